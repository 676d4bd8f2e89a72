//! Requests to pages and actions: the session and CSRF gate, the security headers every answer
//! carries, and one handler per page or change. Each change is one S3 request signed with the
//! session's key; its outcome (the gateway's own error, if any) is shown on the next page.

use std::collections::HashMap;
use std::fmt::Write;
use std::net::SocketAddr;
use std::time::Duration;

use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::DateTimeFormat;
use aws_sdk_s3::types::{BucketVersioningStatus, CorsRule, Tag, Tagging};
use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use http_body_util::Full;

mod access_keys;
mod fleet;
mod jobs;
mod keyspace;
mod lock;
mod preview;
mod settings;
mod stream;
mod workflow;

pub use fleet::metrics_summary;

use crate::gateway::{Gateway, SignIn, describe};
use crate::html::{self, Page, button, esc, form, link, name};
use crate::session::{Flash, Session, Sessions, Throttle, random_token, same_secret};

pub type Response = hyper::Response<Full<Bytes>>;

const SCRIPT: &str = include_str!("../assets/console.js");
const STYLE: &str = include_str!("../assets/console.css");
/// Objects per listing page.
const PAGE_SIZE: i32 = 100;
/// How long a presigned download or upload URL works.
const DOWNLOAD_URL_LIFETIME: Duration = Duration::from_secs(15 * 60);
const UPLOAD_URL_LIFETIME: Duration = Duration::from_secs(3600);

pub struct App {
    gateway: Gateway,
    sessions: Sessions,
    tls: bool,
    csp: HeaderValue,
    session_cookie: &'static str,
    login_cookie: &'static str,
    /// The health page's samples of the request counters (rates, charts).
    samples: std::sync::Arc<fleet::Samples>,
}

/// What a handler needs of a request.
pub struct Request {
    method: Method,
    path: String,
    query: HashMap<String, String>,
    form: HashMap<String, String>,
    headers: http::HeaderMap,
    peer: SocketAddr,
}

impl Request {
    pub fn new(head: http::request::Parts, body: Bytes, peer: SocketAddr) -> Request {
        let pairs = |bytes: &[u8]| -> HashMap<String, String> {
            let mut map = HashMap::new();
            for (key, value) in form_urlencoded::parse(bytes) {
                map.entry(key.into_owned()).or_insert_with(|| value.into_owned());
            }
            map
        };
        let is_form = head
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        Request {
            query: pairs(head.uri.query().unwrap_or("").as_bytes()),
            form: if is_form { pairs(&body) } else { HashMap::new() },
            method: head.method,
            path: head.uri.path().to_owned(),
            headers: head.headers,
            peer,
        }
    }

    fn cookie(&self, wanted: &str) -> Option<&str> {
        self.headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == wanted)
            .map(|(_, value)| value)
    }

    fn arg(&self, key: &str) -> &str {
        self.form
            .get(key)
            .or_else(|| self.query.get(key))
            .map(String::as_str)
            .unwrap_or("")
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The origin of a URL (`scheme://host[:port]`), for the CSP's `connect-src`.
fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let host = rest.split('/').next()?;
    let safe = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-.:[]".contains(c));
    (matches!(scheme, "http" | "https") && safe(host)).then(|| format!("{scheme}://{host}"))
}

impl App {
    pub fn new(gateway: Gateway, sessions: Sessions, tls: bool) -> App {
        // The browser fetches only this console and, for uploads and image previews (presigned
        // URLs), the gateway's S3 endpoint.
        let s3 = origin_of(&gateway.public).unwrap_or_default();
        let csp = format!(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: {s3}; \
             connect-src 'self' {s3}; form-action 'self'; frame-ancestors 'none'; \
             base-uri 'none'; object-src 'none'"
        );
        let samples = std::sync::Arc::new(fleet::Samples::default());
        if let Some(listener) = gateway.admin_listener {
            tokio::spawn(fleet::keep_sampling(
                std::sync::Arc::downgrade(&samples),
                listener,
                gateway.admin.clone(),
            ));
        }
        App {
            gateway,
            sessions,
            tls,
            csp: HeaderValue::from_str(&csp).expect("the CSP is ASCII"),
            // Under TLS the __Host- prefix makes the browser insist on Secure, Path=/ and no Domain.
            session_cookie: if tls { "__Host-pgvs3_session" } else { "pgvs3_session" },
            login_cookie: if tls { "__Host-pgvs3_login" } else { "pgvs3_login" },
            samples,
        }
    }

    /// A plain-text answer with the console's headers.
    pub fn plain(status: StatusCode, text: &'static str) -> Response {
        let mut response = hyper::Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }

    fn respond(&self, status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response {
        let mut response = hyper::Response::new(Full::new(body.into()));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        self.secure(headers);
        response
    }

    fn secure(&self, headers: &mut http::HeaderMap) {
        headers.insert(header::CONTENT_SECURITY_POLICY, self.csp.clone());
        headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        // No Referer to other sites (the gateway's, where downloads go, included). Not
        // `no-referrer`: with it browsers send `Origin: null` on this site's own forms.
        headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
        headers.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if self.tls {
            headers.insert(
                header::STRICT_TRANSPORT_SECURITY,
                HeaderValue::from_static("max-age=31536000"),
            );
        }
    }

    fn page(&self, status: StatusCode, page: Page) -> Response {
        self.respond(status, "text/html; charset=utf-8", page.render())
    }

    /// 303 to one of the console's own pages (`to` is always built here, never taken from the
    /// request: no open redirect).
    fn redirect(&self, to: &str) -> Response {
        let mut response = self.respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
        if let Ok(location) = HeaderValue::from_str(to) {
            response.headers_mut().insert(header::LOCATION, location);
        }
        response
    }

    fn json(&self, status: StatusCode, value: serde_json::Value) -> Response {
        self.respond(status, "application/json", value.to_string())
    }

    fn cookie(&self, name: &str, value: &str, max_age: Option<u64>) -> HeaderValue {
        let mut cookie = format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict");
        if let Some(seconds) = max_age {
            let _ = write!(cookie, "; Max-Age={seconds}");
        }
        if self.tls {
            cookie.push_str("; Secure");
        }
        HeaderValue::from_str(&cookie).expect("cookie values are base64url")
    }

    /// A change must come from a page of this console: its Origin (which browsers send on every
    /// POST) names this host, and no cross-site fetch metadata says otherwise.
    fn same_origin(&self, request: &Request) -> bool {
        let scheme = if self.tls { "https" } else { "http" };
        let (Some(origin), Some(host)) = (request.header("origin"), request.header("host")) else {
            return false;
        };
        let site_ok = request
            .header("sec-fetch-site")
            .is_none_or(|site| site == "same-origin");
        site_ok && origin == format!("{scheme}://{host}")
    }

    pub async fn handle(&self, request: Request) -> Response {
        let get = request.method == Method::GET || request.method == Method::HEAD;
        let post = request.method == Method::POST;
        match (request.path.as_str(), get) {
            ("/static/console.js", true) => {
                return self.respond(StatusCode::OK, "text/javascript; charset=utf-8", SCRIPT);
            }
            ("/static/console.css", true) => return self.respond(StatusCode::OK, "text/css; charset=utf-8", STYLE),
            ("/login", true) => return self.login_page(&request, None, StatusCode::OK),
            ("/login", false) if post => return self.login(&request).await,
            _ => {}
        }
        let signed_in = request
            .cookie(self.session_cookie)
            .and_then(|id| Some((id.to_owned(), self.sessions.get(id)?)));
        let Some((id, (session, flash))) = signed_in else {
            return if get {
                self.redirect("/login")
            } else {
                self.respond(StatusCode::FORBIDDEN, "text/plain; charset=utf-8", "sign in first\n")
            };
        };
        let context = Context {
            app: self,
            id: &id,
            session: &session,
            flash,
        };
        if post {
            let token = request.header("x-csrf-token").unwrap_or_else(|| request.arg("_csrf"));
            if !self.same_origin(&request) || !same_secret(token, &session.csrf) {
                return self.respond(
                    StatusCode::FORBIDDEN,
                    "text/plain; charset=utf-8",
                    "refused: the request did not come from this console's pages (CSRF check)\n",
                );
            }
            return context.change(&request).await;
        }
        if !get {
            return self.respond(StatusCode::METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", "");
        }
        context.view(&request).await
    }

    fn login_page(&self, request: &Request, problem: Option<&str>, status: StatusCode) -> Response {
        // Login CSRF: the form carries a token that must match a cookie only this site can set.
        // A token the browser has is kept, so a second tab (or a favicon fetch sent to sign-in)
        // does not spoil the first form.
        let token = request
            .cookie(self.login_cookie)
            .filter(|token| {
                token.len() == 43
                    && token
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            })
            .map_or_else(random_token, str::to_owned);
        let mut body = String::from("<section class=\"login\"><h1>Sign in</h1>");
        if let Some(problem) = problem {
            let _ = write!(body, "<p class=\"flash error\" role=\"alert\">{}</p>", esc(problem));
        }
        let _ = write!(
            body,
            "<form method=\"post\" action=\"/login\"><input type=\"hidden\" name=\"_login\" value=\"{token}\">\
             <label>Access key <input name=\"access_key\" id=\"access_key\" autocomplete=\"username\" required></label>\
             <label>Secret key <input name=\"secret_key\" id=\"secret_key\" type=\"password\" autocomplete=\"current-password\" required></label>\
             <button id=\"sign-in\">Sign in</button></form>\
             <p class=\"hint\">The console acts with exactly this key's rights. The secret stays on the server, in memory, for the session only.</p></section>"
        );
        let mut response = self.page(
            status,
            Page {
                title: "Sign in",
                session: None,
                admin: false,
                flash: None,
                body,
            },
        );
        response
            .headers_mut()
            .append(header::SET_COOKIE, self.cookie(self.login_cookie, &token, Some(600)));
        response
    }

    async fn login(&self, request: &Request) -> Response {
        let fresh = request
            .cookie(self.login_cookie)
            .is_some_and(|cookie| same_secret(cookie, request.arg("_login")));
        if !self.same_origin(request) || !fresh {
            return self.login_page(
                request,
                Some("The sign-in form expired or came from elsewhere; try again."),
                StatusCode::FORBIDDEN,
            );
        }
        let access_key = request.arg("access_key").trim();
        let secret = request.arg("secret_key");
        if access_key.is_empty() || secret.is_empty() || access_key.len() > 128 || secret.len() > 256 {
            return self.login_page(
                request,
                Some("Give an access key and its secret."),
                StatusCode::BAD_REQUEST,
            );
        }
        let subjects = Throttle::subjects(request.peer.ip(), access_key);
        if !self.sessions.throttle.allowed(&subjects) {
            return self.login_page(
                request,
                Some("Too many failed sign-ins; wait a few minutes."),
                StatusCode::TOO_MANY_REQUESTS,
            );
        }
        let (s3, presign) = match self.gateway.sign_in(access_key, secret).await {
            Ok(clients) => clients,
            Err(SignIn::Refused) => {
                self.sessions.throttle.failed(&subjects);
                return self.login_page(
                    request,
                    Some("Unknown access key or wrong secret."),
                    StatusCode::UNAUTHORIZED,
                );
            }
            Err(SignIn::Unreachable(why)) => return self.login_page(request, Some(&why), StatusCode::BAD_GATEWAY),
        };
        // A session the browser already had ends: sign-in always starts a new id.
        if let Some(old) = request.cookie(self.session_cookie) {
            self.sessions.remove(old);
        }
        let session = Session {
            access_key: access_key.to_owned(),
            csrf: random_token(),
            s3,
            presign,
            secret: secret.into(),
            keyspace: Default::default(),
            admin: self.gateway.is_root(access_key).await,
        };
        let Some(id) = self.sessions.create(session) else {
            return self.login_page(
                request,
                Some("The console has too many sessions open."),
                StatusCode::SERVICE_UNAVAILABLE,
            );
        };
        let mut response = self.redirect("/buckets");
        let headers = response.headers_mut();
        headers.append(header::SET_COOKIE, self.cookie(self.session_cookie, &id, None));
        headers.append(header::SET_COOKIE, self.cookie(self.login_cookie, "", Some(0)));
        response
    }
}

/// One signed-in request.
struct Context<'a> {
    app: &'a App,
    id: &'a str,
    session: &'a Session,
    flash: Option<Flash>,
}

/// The outcome of a change, shown on the page it returns to.
type Outcome = Result<String, String>;

fn sdk<E, R>(
    result: Result<
        E,
        aws_sdk_s3::error::SdkError<impl aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + 'static, R>,
    >,
) -> Result<E, String>
where
    R: std::fmt::Debug,
{
    result.map_err(|err| describe(&err))
}

fn date(value: Option<&aws_sdk_s3::primitives::DateTime>) -> String {
    value
        .and_then(|time| time.fmt(DateTimeFormat::DateTime).ok())
        .unwrap_or_default()
}

/// The `Key: value` lines of a tag set, and back.
fn tags_text(tags: &[Tag]) -> String {
    tags.iter()
        .map(|tag| format!("{}={}\n", tag.key(), tag.value()))
        .collect()
}

impl Context<'_> {
    fn page(&self, status: StatusCode, title: &str, body: String) -> Response {
        let flash = self.flash.as_ref().map(|flash| (flash.ok, flash.text.as_str()));
        self.app.page(
            status,
            Page {
                title,
                session: Some((&self.session.access_key, &self.session.csrf)),
                admin: self.session.admin,
                flash,
                body,
            },
        )
    }

    fn csrf(&self) -> &str {
        &self.session.csrf
    }

    /// A policy document's editor (a bucket's or a key's): the problems found with the last
    /// try, then the form posting `policy` with its one hidden field to `action`.
    fn policy_editor(
        &self,
        (action, field): (&str, (&str, &str)),
        text: &str,
        problems: &[String],
        hint: &str,
    ) -> String {
        let mut out = String::from("<ul id=\"policy-problems\" class=\"problems\" role=\"alert\">");
        for problem in problems {
            let _ = write!(out, "<li>{}</li>", name(problem));
        }
        out.push_str("</ul>");
        out.push_str(&form(
            action,
            self.csrf(),
            &[field],
            &format!(
                "<textarea name=\"policy\" id=\"policy\" rows=\"16\" spellcheck=\"false\" data-validate=\"policy\">{}</textarea>\
                 <p class=\"hint\">{}</p><button id=\"save-policy\">Save policy</button>",
                esc(text),
                esc(hint)
            ),
        ));
        out
    }

    /// After a change: its outcome on the next page, which `to` names.
    fn done(&self, outcome: Outcome, to: &str) -> Response {
        match outcome {
            Ok(text) => self.app.sessions.flash(self.id, true, text),
            Err(text) => self.app.sessions.flash(self.id, false, text),
        }
        self.app.redirect(to)
    }

    async fn view(&self, request: &Request) -> Response {
        match request.path.as_str() {
            "/" => self.app.redirect("/buckets"),
            "/buckets" => self.buckets().await,
            "/bucket" => self.bucket(request.arg("bucket"), None).await,
            "/objects" => self.objects(request, request.arg("bucket")).await,
            "/object" => {
                let version = Some(request.arg("version")).filter(|version| !version.is_empty());
                self.object(request.arg("bucket"), request.arg("key"), version).await
            }
            "/keys" => self.keys(request).await,
            "/jobs" => self.jobs(request).await,
            "/health" => self.fleet().await,
            "/access-keys" => self.access_keys(None).await,
            "/access-key" => self.key_policy(request.arg("access_key"), None).await,
            "/jobs/queue" => self.jobs_queue(request).await,
            "/job" => self.job(request).await,
            "/jobs/workflow" => self.workflow(request).await,
            "/key" => self.key(request).await,
            _ => self.page(StatusCode::NOT_FOUND, "Not found", "<h1>Not found</h1>".to_owned()),
        }
    }

    async fn change(&self, request: &Request) -> Response {
        let s3 = &self.session.s3;
        let bucket = request.arg("bucket");
        let key = request.arg("key");
        let bucket_page = link("/bucket", &[("bucket", bucket)]);
        let object_page = link("/object", &[("bucket", bucket), ("key", key)]);
        // A lock change returns to the version it was about.
        let version_page = match request.arg("version") {
            "" => object_page.clone(),
            version => link("/object", &[("bucket", bucket), ("key", key), ("version", version)]),
        };
        if let Some(outcome) = self.change_setting(request, bucket).await {
            return self.done(outcome, &bucket_page);
        }
        match request.path.as_str() {
            "/logout" => {
                self.app.sessions.remove(self.id);
                let mut response = self.app.redirect("/login");
                response.headers_mut().append(
                    header::SET_COOKIE,
                    self.app.cookie(self.app.session_cookie, "", Some(0)),
                );
                response
            }
            "/buckets/create" => {
                // Object lock is chosen at creation only (S3 turns it on no later).
                let mut create = s3.create_bucket().bucket(bucket);
                if request.arg("object_lock") == "on" {
                    create = create.object_lock_enabled_for_bucket(true);
                }
                let outcome = sdk(create.send().await).map(|_| format!("Bucket {bucket} created."));
                self.done(outcome, "/buckets")
            }
            "/buckets/delete" => {
                let outcome =
                    sdk(s3.delete_bucket().bucket(bucket).send().await).map(|_| format!("Bucket {bucket} deleted."));
                self.done(outcome, "/buckets")
            }
            "/bucket/versioning" => {
                let status = BucketVersioningStatus::from(request.arg("status"));
                let config = aws_sdk_s3::types::VersioningConfiguration::builder()
                    .status(status.clone())
                    .build();
                let outcome = sdk(s3
                    .put_bucket_versioning()
                    .bucket(bucket)
                    .versioning_configuration(config)
                    .send()
                    .await)
                .map(|_| format!("Versioning is now {}.", status.as_str()));
                self.done(outcome, &bucket_page)
            }
            "/bucket/policy" => {
                let text = request.arg("policy");
                if text.trim().is_empty() {
                    let outcome = sdk(s3.delete_bucket_policy().bucket(bucket).send().await)
                        .map(|_| "Bucket policy removed.".to_owned());
                    return self.done(outcome, &bucket_page);
                }
                let problems = crate::policy::problems(text, false);
                if !problems.is_empty() {
                    return self.bucket(bucket, Some((text, problems))).await;
                }
                match sdk(s3.put_bucket_policy().bucket(bucket).policy(text).send().await) {
                    Ok(_) => self.done(Ok("Bucket policy saved.".to_owned()), &bucket_page),
                    Err(err) => self.bucket(bucket, Some((text, vec![err]))).await,
                }
            }
            "/bucket/cors-console" => {
                let outcome = self.allow_console_uploads(request, bucket).await;
                self.done(
                    outcome,
                    &link("/objects", &[("bucket", bucket), ("prefix", request.arg("prefix"))]),
                )
            }
            "/object/restore" => {
                let version = request.arg("version");
                let source = format!(
                    "{}/{}?versionId={}",
                    bucket,
                    copy_source_key(key),
                    copy_source_key(version)
                );
                let outcome = sdk(s3
                    .copy_object()
                    .bucket(bucket)
                    .key(key)
                    .copy_source(source)
                    .send()
                    .await)
                .map(|_| "That version is now the current one.".to_owned());
                self.done(outcome, &object_page)
            }
            "/object/delete-version" => {
                let version = request.arg("version");
                let outcome = sdk(s3
                    .delete_object()
                    .bucket(bucket)
                    .key(key)
                    .version_id(version)
                    .send()
                    .await)
                .map(|_| "Version deleted permanently.".to_owned());
                self.done(outcome, &object_page)
            }
            "/object/delete" => {
                let outcome =
                    sdk(s3.delete_object().bucket(bucket).key(key).send().await).map(|_| "Object deleted.".to_owned());
                let parent = key.rfind('/').map(|end| &key[..=end]).unwrap_or("");
                self.done(outcome, &link("/objects", &[("bucket", bucket), ("prefix", parent)]))
            }
            "/object/retention" => {
                let outcome = self.put_retention(request).await;
                self.done(outcome, &version_page)
            }
            "/object/legal-hold" => {
                let outcome = self.put_legal_hold(request).await;
                self.done(outcome, &version_page)
            }
            "/object/tags" => {
                let outcome = self.put_tags(bucket, key, request.arg("tags")).await;
                self.done(outcome, &object_page)
            }
            "/key/command" => self.key_command(request).await,
            "/access-keys/create" => self.create_access_key(request).await,
            "/access-keys/delete" => self.delete_access_key(request).await,
            "/access-keys/disable" => self.set_access_key_disabled(request, true).await,
            "/access-keys/enable" => self.set_access_key_disabled(request, false).await,
            "/access-keys/policy" => self.set_key_policy(request).await,
            "/jobs/retry" => self.dead_letter_change(request, true).await,
            "/jobs/delete" => self.dead_letter_change(request, false).await,
            path if path.starts_with("/api/upload/") => self.upload(request, &path["/api/upload/".len()..]).await,
            _ => self
                .app
                .respond(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "no such action\n"),
        }
    }

    async fn buckets(&self) -> Response {
        let listed = sdk(self.session.s3.list_buckets().send().await);
        let mut body = String::from("<h1>Buckets</h1>");
        body.push_str(&form(
            "/buckets/create",
            self.csrf(),
            &[],
            "<label>New bucket <input name=\"bucket\" id=\"new-bucket\" required minlength=\"3\" maxlength=\"63\"></label> \
             <label><input type=\"checkbox\" name=\"object_lock\" id=\"new-bucket-lock\" value=\"on\"> with object lock</label> \
             <button id=\"create-bucket\">Create</button>",
        ));
        match listed {
            Err(err) => {
                let _ = write!(body, "<p class=\"flash error\">{}</p>", name(&err));
            }
            Ok(listed) if listed.buckets().is_empty() => body.push_str("<p>No buckets yet.</p>"),
            Ok(listed) => {
                body.push_str("<table><thead><tr><th>Name</th><th>Created</th><th></th></tr></thead><tbody>");
                for bucket in listed.buckets() {
                    let bucket_name = bucket.name().unwrap_or_default();
                    let _ = write!(
                        body,
                        "<tr><td><a class=\"bucket\" href=\"{}\">{}</a></td><td>{}</td><td class=\"actions\"><a href=\"{}\">Settings</a>{}</td></tr>",
                        esc(&link("/objects", &[("bucket", bucket_name)])),
                        name(bucket_name),
                        esc(&date(bucket.creation_date())),
                        esc(&link("/bucket", &[("bucket", bucket_name)])),
                        form(
                            "/buckets/delete",
                            self.csrf(),
                            &[("bucket", bucket_name)],
                            &button("Delete", "danger", Some("Delete this bucket? It must be empty.")),
                        ),
                    );
                }
                body.push_str("</tbody></table>");
            }
        }
        self.page(StatusCode::OK, "Buckets", body)
    }

    /// A bucket's settings; `edited` is a policy that was not saved, and why.
    async fn bucket(&self, bucket: &str, edited: Option<(&str, Vec<String>)>) -> Response {
        let s3 = &self.session.s3;
        let mut body = format!(
            "<h1>Bucket <span class=\"name\">{}</span></h1><p><a href=\"{}\">Browse objects</a></p>",
            name(bucket),
            esc(&link("/objects", &[("bucket", bucket)]))
        );
        body.push_str("<section><h2>Versioning</h2>");
        match sdk(s3.get_bucket_versioning().bucket(bucket).send().await) {
            Ok(versioning) => {
                let status = versioning.status().map(|s| s.as_str()).unwrap_or("Unversioned");
                let (next, label) = if status == "Enabled" {
                    ("Suspended", "Suspend versioning")
                } else {
                    ("Enabled", "Enable versioning")
                };
                let _ = write!(
                    body,
                    "<p>Status: <strong id=\"versioning-status\">{}</strong></p>{}",
                    esc(status),
                    form(
                        "/bucket/versioning",
                        self.csrf(),
                        &[("bucket", bucket), ("status", next)],
                        &format!("<button id=\"versioning-toggle\">{label}</button>"),
                    )
                );
            }
            Err(err) => {
                let _ = write!(body, "<p class=\"flash error\">{}</p>", name(&err));
            }
        }
        body.push_str("</section>");
        body.push_str(&self.settings(bucket).await);
        body.push_str("<section><h2>Bucket policy</h2>");
        let (text, problems) = match edited {
            Some((text, problems)) => (text.to_owned(), problems),
            None => {
                match settings::optional(s3.get_bucket_policy().bucket(bucket).send().await, "NoSuchBucketPolicy") {
                    Ok(policy) => (policy.and_then(|p| p.policy).unwrap_or_default(), Vec::new()),
                    Err(err) => (String::new(), vec![err]),
                }
            }
        };
        let status = if problems.is_empty() {
            StatusCode::OK
        } else {
            StatusCode::BAD_REQUEST
        };
        body.push_str(&self.policy_editor(
            ("/bucket/policy", ("bucket", bucket)),
            &text,
            &problems,
            "JSON, checked here and again by the gateway before it is saved. Empty removes the policy.",
        ));
        body.push_str("</section>");
        self.page(status, "Bucket", body)
    }

    async fn objects(&self, request: &Request, bucket: &str) -> Response {
        let prefix = request.arg("prefix");
        let token = request.arg("token");
        let mut listing = self
            .session
            .s3
            .list_objects_v2()
            .bucket(bucket)
            .delimiter("/")
            .max_keys(PAGE_SIZE);
        if !prefix.is_empty() {
            listing = listing.prefix(prefix);
        }
        if !token.is_empty() {
            listing = listing.continuation_token(token);
        }
        let mut body = format!(
            "<h1><a href=\"{}\">{}</a>",
            esc(&link("/objects", &[("bucket", bucket)])),
            name(bucket)
        );
        let mut at = 0;
        for part in prefix.split_inclusive('/') {
            at += part.len();
            let _ = write!(
                body,
                " / <a href=\"{}\">{}</a>",
                esc(&link("/objects", &[("bucket", bucket), ("prefix", &prefix[..at])])),
                name(part.trim_end_matches('/'))
            );
        }
        let _ = write!(
            body,
            "</h1><p><a href=\"{}\">Bucket settings</a></p>",
            esc(&link("/bucket", &[("bucket", bucket)]))
        );
        body.push_str(&self.upload_zone(request, bucket, prefix).await);
        match sdk(listing.send().await) {
            Err(err) => {
                let _ = write!(body, "<p class=\"flash error\">{}</p>", name(&err));
            }
            Ok(page) => {
                body.push_str("<table id=\"objects\"><thead><tr><th>Name</th><th>Size</th><th>Modified</th><th></th></tr></thead><tbody>");
                for folder in page.common_prefixes() {
                    let full = folder.prefix().unwrap_or_default();
                    let _ = write!(
                        body,
                        "<tr><td><a class=\"folder\" href=\"{}\">{}/</a></td><td></td><td></td><td></td></tr>",
                        esc(&link("/objects", &[("bucket", bucket), ("prefix", full)])),
                        name(full[prefix.len().min(full.len())..].trim_end_matches('/'))
                    );
                }
                for object in page.contents() {
                    let key = object.key().unwrap_or_default();
                    let download = self.download_url(bucket, key, None).await;
                    let _ = write!(
                        body,
                        "<tr><td><a class=\"object\" href=\"{}\">{}</a></td><td>{}</td><td>{}</td><td class=\"actions\"><a href=\"{}\" rel=\"noreferrer\">Download</a></td></tr>",
                        esc(&link("/object", &[("bucket", bucket), ("key", key)])),
                        name(&key[prefix.len().min(key.len())..]),
                        esc(&html::size(object.size().unwrap_or(0))),
                        esc(&date(object.last_modified())),
                        esc(&download),
                    );
                }
                body.push_str("</tbody></table>");
                if page.contents().is_empty() && page.common_prefixes().is_empty() {
                    body.push_str("<p>Nothing here.</p>");
                }
                if let Some(next) = page
                    .next_continuation_token()
                    .filter(|_| page.is_truncated() == Some(true))
                {
                    let _ = write!(
                        body,
                        "<p><a id=\"next-page\" href=\"{}\">Next page</a></p>",
                        esc(&link(
                            "/objects",
                            &[("bucket", bucket), ("prefix", prefix), ("token", next)]
                        ))
                    );
                }
            }
        }
        self.page(StatusCode::OK, "Objects", body)
    }

    /// The drop zone, and, when the bucket's CORS rules would stop the browser's uploads to the
    /// gateway, the offer to add a rule for this console's origin.
    async fn upload_zone(&self, request: &Request, bucket: &str, prefix: &str) -> String {
        let mut out = format!(
            "<section id=\"upload\" class=\"dropzone\" data-bucket=\"{}\" data-prefix=\"{}\">\
             <p>Drop files here to upload them to this folder, or <label class=\"pick\">choose files<input type=\"file\" id=\"file-input\" multiple hidden></label>.</p>\
             <ul id=\"uploads\"></ul></section>",
            esc(bucket),
            esc(prefix)
        );
        let Some(origin) = self.console_origin(request) else {
            return out;
        };
        let allowed = self.cors_rules(bucket).await.is_ok_and(|rules| {
            rules.iter().any(|rule| {
                rule.allowed_methods().iter().any(|m| m == "PUT")
                    && rule.allowed_origins().iter().any(|o| o == "*" || *o == origin)
            })
        });
        if !allowed {
            out.push_str(&form(
                "/bucket/cors-console",
                self.csrf(),
                &[("bucket", bucket), ("prefix", prefix)],
                &format!(
                    "<p class=\"hint\">The bucket's CORS rules do not let a browser on {} upload to it. \
                     <button id=\"allow-uploads\">Allow uploads from this console</button></p>",
                    esc(&origin)
                ),
            ));
        }
        out
    }

    /// This console's origin as the browser sees it.
    fn console_origin(&self, request: &Request) -> Option<String> {
        let host = request.header("host")?;
        let scheme = if self.app.tls { "https" } else { "http" };
        Some(format!("{scheme}://{host}"))
    }

    async fn allow_console_uploads(&self, request: &Request, bucket: &str) -> Outcome {
        let origin = self.console_origin(request).ok_or("no Host header")?;
        let mut rules = self.cors_rules(bucket).await?;
        let rule = CorsRule::builder()
            .id("pgvs3-console")
            .allowed_origins(origin)
            .allowed_methods("PUT")
            .allowed_methods("GET")
            .allowed_headers("*")
            .expose_headers("ETag")
            .max_age_seconds(3600)
            .build()
            .map_err(|err| err.to_string())?;
        rules.retain(|rule| rule.id() != Some("pgvs3-console"));
        rules.push(rule);
        self.put_cors_rules(bucket, rules)
            .await
            .map(|_| "This console may now upload to the bucket.".to_owned())
    }

    async fn download_url(&self, bucket: &str, key: &str, version: Option<&str>) -> String {
        let Ok(config) = PresigningConfig::expires_in(DOWNLOAD_URL_LIFETIME) else {
            return String::new();
        };
        let file = key.rsplit('/').next().unwrap_or(key);
        let disposition = format!(
            "attachment; filename*=UTF-8''{}",
            copy_source_key(file).replace('/', "%2F")
        );
        self.session
            .presign
            .get_object()
            .bucket(bucket)
            .key(key)
            .set_version_id(version.map(str::to_owned))
            .response_content_disposition(disposition)
            .presigned(config)
            .await
            .map(|request| request.uri().to_owned())
            .unwrap_or_default()
    }

    /// An object's page; `version` names the version whose retention and legal hold it shows
    /// (the current one without).
    async fn object(&self, bucket: &str, key: &str, version: Option<&str>) -> Response {
        let s3 = &self.session.s3;
        let parent = key.rfind('/').map(|end| &key[..=end]).unwrap_or("");
        let mut body = format!(
            "<h1><a href=\"{}\">{}</a> / <span class=\"name\">{}</span></h1>",
            esc(&link("/objects", &[("bucket", bucket), ("prefix", parent)])),
            name(bucket),
            name(key)
        );
        match s3.head_object().bucket(bucket).key(key).send().await {
            Ok(head) => {
                let download = self.download_url(bucket, key, None).await;
                let _ = write!(
                    body,
                    "<dl class=\"meta\"><dt>Size</dt><dd>{}</dd><dt>Type</dt><dd>{}</dd><dt>ETag</dt><dd>{}</dd><dt>Modified</dt><dd>{}</dd>",
                    esc(&html::size(head.content_length().unwrap_or(0))),
                    name(head.content_type().unwrap_or("")),
                    name(head.e_tag().unwrap_or("")),
                    esc(&date(head.last_modified())),
                );
                if let Some(metadata) = head.metadata() {
                    let mut pairs: Vec<_> = metadata.iter().collect();
                    pairs.sort();
                    for (meta_key, value) in pairs {
                        let _ = write!(body, "<dt>x-amz-meta-{}</dt><dd>{}</dd>", name(meta_key), name(value));
                    }
                }
                let _ = write!(
                    body,
                    "</dl><p class=\"actions\"><a id=\"download\" href=\"{}\" rel=\"noreferrer\">Download</a>{}</p>",
                    esc(&download),
                    form(
                        "/object/delete",
                        self.csrf(),
                        &[("bucket", bucket), ("key", key)],
                        &button(
                            "Delete",
                            "danger",
                            Some("Delete this object? With versioning on, older versions stay.")
                        ),
                    )
                );
                body.push_str(&self.preview(bucket, key, &head).await);
                if let Ok(tags) = s3.get_object_tagging().bucket(bucket).key(key).send().await {
                    body.push_str("<section><h2>Tags</h2>");
                    body.push_str(&form(
                        "/object/tags",
                        self.csrf(),
                        &[("bucket", bucket), ("key", key)],
                        &format!(
                            "<textarea name=\"tags\" id=\"tags\" rows=\"4\" spellcheck=\"false\">{}</textarea>\
                             <p class=\"hint\">One <code>key=value</code> per line (at most 10).</p><button id=\"save-tags\">Save tags</button>",
                            esc(&tags_text(tags.tag_set()))
                        ),
                    ));
                    body.push_str("</section>");
                }
            }
            Err(err) => {
                let _ = write!(
                    body,
                    "<p class=\"hint\">No current version ({}).</p>",
                    name(&describe(&err))
                );
            }
        }
        let lock = self.lock_section(bucket, key, version).await;
        body.push_str(&lock);
        body.push_str(&self.versions(bucket, key, !lock.is_empty()).await);
        self.page(StatusCode::OK, "Object", body)
    }

    /// The versions of a key; `locks`: each links to its retention and legal hold.
    async fn versions(&self, bucket: &str, key: &str, locks: bool) -> String {
        let listed = sdk(self
            .session
            .s3
            .list_object_versions()
            .bucket(bucket)
            .prefix(key)
            .max_keys(1000)
            .send()
            .await);
        let listed = match listed {
            Ok(listed) => listed,
            Err(err) => return format!("<p class=\"flash error\">{}</p>", name(&err)),
        };
        // (version id, latest, when, size or None for a delete marker)
        let mut rows: Vec<(String, bool, String, Option<i64>)> = Vec::new();
        for version in listed.versions().iter().filter(|v| v.key() == Some(key)) {
            rows.push((
                version.version_id().unwrap_or("null").to_owned(),
                version.is_latest() == Some(true),
                date(version.last_modified()),
                Some(version.size().unwrap_or(0)),
            ));
        }
        for marker in listed.delete_markers().iter().filter(|m| m.key() == Some(key)) {
            rows.push((
                marker.version_id().unwrap_or("null").to_owned(),
                marker.is_latest() == Some(true),
                date(marker.last_modified()),
                None,
            ));
        }
        rows.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)));
        let mut out = String::from(
            "<section><h2>Versions</h2><table id=\"versions\"><thead><tr><th>Version</th><th>Modified</th><th>Size</th><th></th></tr></thead><tbody>",
        );
        for (version, latest, when, size) in &rows {
            let mut actions = String::new();
            if let Some(_size) = size {
                let download = self.download_url(bucket, key, Some(version)).await;
                let _ = write!(
                    actions,
                    "<a href=\"{}\" rel=\"noreferrer\">Download</a>",
                    esc(&download)
                );
                if locks {
                    let _ = write!(
                        actions,
                        "<a class=\"lock\" href=\"{}#lock\">Retention</a>",
                        esc(&link(
                            "/object",
                            &[("bucket", bucket), ("key", key), ("version", version)]
                        ))
                    );
                }
                if !latest {
                    actions.push_str(&form(
                        "/object/restore",
                        self.csrf(),
                        &[("bucket", bucket), ("key", key), ("version", version)],
                        &button("Restore", "restore", None),
                    ));
                }
            }
            actions.push_str(&form(
                "/object/delete-version",
                self.csrf(),
                &[("bucket", bucket), ("key", key), ("version", version)],
                &button(
                    "Delete permanently",
                    "danger",
                    Some("Delete this version permanently? It cannot be brought back."),
                ),
            ));
            let _ = write!(
                out,
                "<tr class=\"version{}\" data-version=\"{}\"><td><code>{}</code>{}</td><td>{}</td><td>{}</td><td class=\"actions\">{}</td></tr>",
                if *latest { " latest" } else { "" },
                esc(version),
                name(version),
                if *latest { " <em>current</em>" } else { "" },
                esc(when),
                size.map(html::size).unwrap_or_else(|| "delete marker".to_owned()),
                actions
            );
        }
        out.push_str("</tbody></table>");
        if listed.is_truncated() == Some(true) {
            out.push_str("<p class=\"hint\">Only the newest 1,000 versions are shown.</p>");
        }
        out.push_str("</section>");
        out
    }

    async fn put_tags(&self, bucket: &str, key: &str, text: &str) -> Outcome {
        let mut tags = Vec::new();
        for line in text.lines().map(str::trim).filter(|line| !line.is_empty()) {
            let (tag, value) = line.split_once('=').unwrap_or((line, ""));
            tags.push(
                Tag::builder()
                    .key(tag.trim())
                    .value(value.trim())
                    .build()
                    .map_err(|err| err.to_string())?,
            );
        }
        let tagging = Tagging::builder()
            .set_tag_set(Some(tags))
            .build()
            .map_err(|err| err.to_string())?;
        sdk(self
            .session
            .s3
            .put_object_tagging()
            .bucket(bucket)
            .key(key)
            .tagging(tagging)
            .send()
            .await)
        .map(|_| "Tags saved.".to_owned())
    }

    /// The browser's uploads: presigned URLs for a single PUT or for each part of a multipart
    /// upload, which the browser sends to the gateway itself; the console only starts, lists
    /// and completes multipart uploads (with the parts the gateway says it has, so a part the
    /// browser resent after a network error counts once).
    async fn upload(&self, request: &Request, step: &str) -> Response {
        let s3 = &self.session.s3;
        let presign = &self.session.presign;
        let bucket = request.arg("bucket");
        let key = request.arg("key");
        let upload_id = request.arg("upload_id");
        let presigning = PresigningConfig::expires_in(UPLOAD_URL_LIFETIME).expect("an hour is a valid lifetime");
        let answer = match step {
            "put" => presign
                .put_object()
                .bucket(bucket)
                .key(key)
                .presigned(presigning)
                .await
                .map(|url| serde_json::json!({ "url": url.uri() }))
                .map_err(|err| err.to_string()),
            "create" => {
                let content_type = request.arg("content_type");
                let mut create = s3.create_multipart_upload().bucket(bucket).key(key);
                if !content_type.is_empty() {
                    create = create.content_type(content_type);
                }
                sdk(create.send().await).map(|created| serde_json::json!({ "upload_id": created.upload_id() }))
            }
            "part" => match request.arg("part").parse::<i32>() {
                Ok(part @ 1..=10_000) => presign
                    .upload_part()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .part_number(part)
                    .presigned(presigning)
                    .await
                    .map(|url| serde_json::json!({ "url": url.uri() }))
                    .map_err(|err| err.to_string()),
                _ => Err("part must be 1 to 10000".to_owned()),
            },
            "parts" => self.parts(bucket, key, upload_id).await.map(|parts| {
                let done: Vec<_> = parts
                    .iter()
                    .map(|part| serde_json::json!({ "part": part.part_number(), "size": part.size() }))
                    .collect();
                serde_json::json!({ "parts": done })
            }),
            "complete" => match self.parts(bucket, key, upload_id).await {
                Ok(parts) => {
                    let completed: Vec<_> = parts
                        .iter()
                        .map(|part| {
                            aws_sdk_s3::types::CompletedPart::builder()
                                .set_part_number(part.part_number())
                                .set_e_tag(part.e_tag().map(str::to_owned))
                                .build()
                        })
                        .collect();
                    let upload = aws_sdk_s3::types::CompletedMultipartUpload::builder()
                        .set_parts(Some(completed))
                        .build();
                    sdk(s3
                        .complete_multipart_upload()
                        .bucket(bucket)
                        .key(key)
                        .upload_id(upload_id)
                        .multipart_upload(upload)
                        .send()
                        .await)
                    .map(|_| serde_json::json!({}))
                }
                Err(err) => Err(err),
            },
            _ => Err("no such upload step".to_owned()),
        };
        match answer {
            Ok(value) => self.app.json(StatusCode::OK, value),
            Err(err) => self
                .app
                .json(StatusCode::BAD_REQUEST, serde_json::json!({ "error": err })),
        }
    }

    /// Every part the gateway holds of an upload.
    async fn parts(&self, bucket: &str, key: &str, upload_id: &str) -> Result<Vec<aws_sdk_s3::types::Part>, String> {
        let mut parts = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let page = sdk(self
                .session
                .s3
                .list_parts()
                .bucket(bucket)
                .key(key)
                .upload_id(upload_id)
                .set_part_number_marker(marker.clone())
                .send()
                .await)?;
            parts.extend(page.parts().iter().cloned());
            match page
                .next_part_number_marker()
                .filter(|_| page.is_truncated() == Some(true))
            {
                Some(next) if Some(next) != marker.as_deref() => marker = Some(next.to_owned()),
                _ => return Ok(parts),
            }
        }
    }
}

/// A key (or version id) as CopyObject's `x-amz-copy-source` wants it: percent-encoded, `/` kept.
fn copy_source_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~/".contains(&byte) {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}
