//! Requests to pages and actions: the session and CSRF gate, the security headers every answer
//! carries, and one handler per page or change. Each change is one S3 request signed with the
//! session's key; its outcome (the gateway's own error, if any) is shown on the next page.

use std::collections::HashMap;
use std::fmt::Write;
use std::net::SocketAddr;
use std::time::Duration;

use aws_sdk_s3::primitives::DateTimeFormat;
use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use http_body_util::Full;

mod access_keys;
mod buckets;
mod fleet;
mod jobs;
mod keyspace;
mod lock;
mod objects;
mod preview;
mod settings;
mod stream;
mod upload;
mod workflow;

pub use fleet::metrics_summary;

use crate::gateway::{Gateway, SignIn, describe};
use crate::html::{Page, esc, form, link, name};
use crate::session::{Flash, Session, Sessions, Throttle, random_token, same_secret};

pub type Response = hyper::Response<Full<Bytes>>;

const SCRIPT: &str = include_str!("../assets/console.js");
const STYLE: &str = include_str!("../assets/console.css");
/// How long a presigned download URL works (an upload URL: `upload.rs`).
const DOWNLOAD_URL_LIFETIME: Duration = Duration::from_secs(15 * 60);

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
        let bucket = request.arg("bucket");
        if let Some(outcome) = self.change_setting(request, bucket).await {
            return self.done(outcome, &link("/bucket", &[("bucket", bucket)]));
        }
        let path = request.path.as_str();
        if let Some(response) = self.bucket_change(request, path).await {
            return response;
        }
        if let Some(response) = self.object_change(request, path).await {
            return response;
        }
        match path {
            "/logout" => {
                self.app.sessions.remove(self.id);
                let mut response = self.app.redirect("/login");
                response.headers_mut().append(
                    header::SET_COOKIE,
                    self.app.cookie(self.app.session_cookie, "", Some(0)),
                );
                response
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
}
