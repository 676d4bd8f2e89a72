//! STS on the S3 endpoint: `AssumeRoleWithWebIdentity` (AWS's query API, unsigned: a form POST
//! or a GET with the query) exchanges a web identity token (a Kubernetes ServiceAccount token)
//! for temporary credentials. The token is verified here against its issuer's key set from the
//! catalog ([`jwt`]); the role's trust names who may assume it. The credentials are stored in
//! the catalog (`pgvs3.sts_sessions`), so every gateway of the fleet accepts them at once; the
//! catalog's session lookup and the access check take them from there.

mod jwt;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use pgvs3_catalog::sts::role_name;
use prometheus::{IntCounterVec, Opts};
use sha2::{Digest, Sha256};

use crate::request_body::RequestBody;
use crate::store::{AccessKey, Catalog, NewSession, RoleTrust};

/// The STS API version every SDK sends.
const VERSION: &str = "2011-06-15";
const NAMESPACE: &str = "https://sts.amazonaws.com/doc/2011-06-15/";
/// The largest form body read (the token is at most 16 KiB; percent-encoding can triple it).
const MAX_FORM_BYTES: usize = 64 * 1024;
/// `DurationSeconds` when the request names none, as on AWS.
const DEFAULT_DURATION_SECS: i32 = 3600;

/// The STS endpoint: the catalog, the parsed keys of each issuer (by the version of its set) and
/// the audit metrics.
pub struct Sts {
    catalog: Arc<Catalog>,
    keys: Mutex<HashMap<String, (i64, Arc<jwt::KeySet>)>>,
    assumed: IntCounterVec,
    refused: IntCounterVec,
}

/// An STS error: HTTP status, code, message.
struct Refusal(StatusCode, &'static str, String);

fn validation(message: impl Into<String>) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, "ValidationError", message.into())
}

fn not_authorized() -> Refusal {
    Refusal(
        StatusCode::FORBIDDEN,
        "AccessDenied",
        "Not authorized to perform sts:AssumeRoleWithWebIdentity".into(),
    )
}

impl Refusal {
    /// The metric label of a refusal that is not the token's.
    fn reason(&self) -> &'static str {
        match self.1 {
            "AccessDenied" => "access_denied",
            "ValidationError" | "MissingParameter" => "validation",
            "InvalidAction" => "invalid_action",
            "MissingAuthenticationToken" => "unsigned",
            _ => "internal",
        }
    }
}

/// A refusal of the token, with its metric reason.
fn token_refusal(refusal: jwt::Refusal) -> (&'static str, Refusal) {
    (refusal.reason(), Refusal::from(refusal))
}

impl From<jwt::Refusal> for Refusal {
    fn from(refusal: jwt::Refusal) -> Refusal {
        let invalid = |message: String| Refusal(StatusCode::BAD_REQUEST, "InvalidIdentityToken", message);
        match refusal {
            jwt::Refusal::Malformed(why) => invalid(format!("The web identity token is not valid: {why}")),
            jwt::Refusal::Algorithm(alg) => invalid(format!("The token's signing algorithm is not accepted: {alg}")),
            jwt::Refusal::KeyNotFound => invalid("No key of the issuer's key set has the token's kid".into()),
            jwt::Refusal::BadSignature => invalid("The token's signature does not verify".into()),
            jwt::Refusal::Issuer(iss) => invalid(format!("No OpenIDConnect provider found for {iss}")),
            jwt::Refusal::Audience => invalid("Incorrect token audience".into()),
            jwt::Refusal::NotYetValid => invalid("The token is not valid yet".into()),
            jwt::Refusal::Expired => Refusal(
                StatusCode::BAD_REQUEST,
                "ExpiredTokenException",
                "Token expired: current date/time is after the token's exp".into(),
            ),
        }
    }
}

/// What an assumption hands back.
struct Issued {
    access_key: String,
    secret: String,
    token: String,
    expiration: time::OffsetDateTime,
    subject: String,
    audience: String,
    issuer: String,
    role: String,
    session_name: String,
}

impl Sts {
    pub fn new(catalog: Arc<Catalog>, metrics: &crate::metrics::Metrics) -> Sts {
        let assumed = IntCounterVec::new(
            Opts::new("pgvs3_sts_assumed_total", "Temporary credentials issued, by role"),
            &["role"],
        )
        .expect("valid metric");
        let refused = IntCounterVec::new(
            Opts::new(
                "pgvs3_sts_refused_total",
                "AssumeRoleWithWebIdentity refusals, by reason",
            ),
            &["reason"],
        )
        .expect("valid metric");
        metrics.register(Box::new(assumed.clone()));
        metrics.register(Box::new(refused.clone()));
        Sts {
            catalog,
            keys: Mutex::default(),
            assumed,
            refused,
        }
    }

    /// Whether a request on the endpoint's root (no bucket) is an unsigned STS call: a GET or
    /// POST with `Action=` in its query, or a POST of a URL-encoded form (S3 has no such request
    /// on `/`). Signed ones go through s3s, which checks their signature ([`SignedSts`]).
    pub fn wants<B>(request: &Request<B>) -> bool {
        if signed(request.headers(), request.uri()) {
            return false;
        }
        is_sts(request.method(), request.uri(), request.headers())
    }

    /// Answers an unsigned STS call (the request [`Sts::wants`]).
    pub async fn handle(&self, request: Request<RequestBody>, request_id: &str) -> Response<s3s::Body> {
        let (parts, body) = request.into_parts();
        let body = match parts.method == http::Method::POST {
            true => match http_body_util::Limited::new(body, MAX_FORM_BYTES).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(_) => {
                    let refusal = validation("The request body is over 64 KiB or was cut short");
                    return self.refuse(refusal.reason(), &refusal, request_id);
                }
            },
            false => Bytes::new(),
        };
        self.answer(&params(&parts.uri, &body), request_id, None).await
    }

    /// Answers an STS call's parameters; `caller` is the signer of a signed one.
    async fn answer(
        &self,
        params: &HashMap<String, String>,
        request_id: &str,
        caller: Option<&AccessKey>,
    ) -> Response<s3s::Body> {
        let action = params.get("Action").map(String::as_str).unwrap_or_default();
        if let Some(version) = params.get("Version")
            && version != VERSION
        {
            let refusal = Refusal(
                StatusCode::BAD_REQUEST,
                "InvalidAction",
                format!("Could not find operation {action} for version {version}"),
            );
            return self.refuse(refusal.reason(), &refusal, request_id);
        }
        match action {
            "AssumeRoleWithWebIdentity" => match self.assume(params).await {
                Ok(issued) => {
                    self.assumed.with_label_values(&[&issued.role]).inc();
                    tracing::info!(
                        target: "pgvs3::sts",
                        role = %issued.role,
                        subject = %issued.subject,
                        session = %issued.session_name,
                        access_key = %issued.access_key,
                        expires = %issued.expiration,
                        outcome = "assumed",
                        "AssumeRoleWithWebIdentity"
                    );
                    xml_response(StatusCode::OK, assumed_xml(&issued, request_id))
                }
                Err((reason, refusal)) => {
                    tracing::info!(
                        target: "pgvs3::sts",
                        role = params.get("RoleArn").and_then(|arn| role_name(arn)).unwrap_or_default(),
                        outcome = "refused",
                        reason,
                        code = refusal.1,
                        "AssumeRoleWithWebIdentity"
                    );
                    self.refuse(reason, &refusal, request_id)
                }
            },
            "GetCallerIdentity" => match caller {
                Some(key) => xml_response(StatusCode::OK, caller_xml(key, request_id)),
                None => {
                    let refusal = Refusal(
                        StatusCode::FORBIDDEN,
                        "MissingAuthenticationToken",
                        "Request is missing Authentication Token".into(),
                    );
                    self.refuse(refusal.reason(), &refusal, request_id)
                }
            },
            other => {
                let refusal = Refusal(
                    StatusCode::BAD_REQUEST,
                    "InvalidAction",
                    format!(
                        "Could not find operation {} for version {VERSION}",
                        other.chars().take(64).collect::<String>()
                    ),
                );
                self.refuse(refusal.reason(), &refusal, request_id)
            }
        }
    }

    fn refuse(&self, reason: &str, refusal: &Refusal, request_id: &str) -> Response<s3s::Body> {
        self.refused.with_label_values(&[reason]).inc();
        let Refusal(status, code, message) = refusal;
        error_response(*status, code, message, request_id)
    }

    /// Whether `request` is a signed STS call (GetCallerIdentity), which s3s verifies
    /// ([`SignedSts`]).
    pub fn signed_call<B>(request: &Request<B>) -> bool {
        signed(request.headers(), request.uri()) && is_sts(request.method(), request.uri(), request.headers())
    }

    /// A signed STS call's refusal in STS's terms: s3s refuses a bad signature, an unknown key
    /// or a skewed clock before the route runs, in S3's XML (`<Error>` at the root), where
    /// the SDKs' query protocol finds no code; those become STS's `ErrorResponse`, S3's
    /// `InvalidAccessKeyId` STS's `InvalidClientTokenId`. Counted as reason `signature`.
    pub async fn in_sts_terms(&self, response: Response<s3s::Body>, request_id: &str) -> Response<s3s::Body> {
        if !response.status().is_client_error() && !response.status().is_server_error() {
            return response;
        }
        let (parts, body) = response.into_parts();
        // An S3 error document is a few hundred bytes.
        let Ok(collected) = http_body_util::Limited::new(body, MAX_FORM_BYTES).collect().await else {
            return error_response(parts.status, "InternalFailure", "", request_id);
        };
        let text = String::from_utf8_lossy(&collected.to_bytes()).into_owned();
        if text.contains("<ErrorResponse") {
            return Response::from_parts(parts, s3s::Body::from(text));
        }
        let element = |name: &str| {
            let open = format!("<{name}>");
            let start = text.find(&open)? + open.len();
            let end = text[start..].find(&format!("</{name}>"))? + start;
            Some(unescape(&text[start..end]))
        };
        let code = match element("Code").as_deref() {
            Some("InvalidAccessKeyId") => "InvalidClientTokenId".to_owned(),
            Some(code) => code.to_owned(),
            None => "InternalFailure".to_owned(),
        };
        self.refused.with_label_values(&["signature"]).inc();
        error_response(parts.status, &code, &element("Message").unwrap_or_default(), request_id)
    }

    /// Verifies the token and the role's trust, and stores new credentials. A refusal comes
    /// with its metric reason.
    async fn assume(&self, params: &HashMap<String, String>) -> Result<Issued, (&'static str, Refusal)> {
        let plain = |refusal: Refusal| (refusal.reason(), refusal);
        let Call {
            role,
            session_name,
            token,
            duration,
        } = Call::of(params).map_err(plain)?;
        // Cheap to expensive, and nothing of the role read before the token verified: its
        // size, shape and algorithm; its issuer's keys (cached); its signature and times.
        let token = jwt::decode(token).map_err(token_refusal)?;
        let issuer = token.claims.iss.clone();
        let keys = self.key_set(&issuer).await?;
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let claims = token.verify(&keys, now).map_err(token_refusal)?;
        let Some(role_trust) = self.catalog.sts_role(role).await.map_err(|_| plain(unavailable()))? else {
            return Err(plain(not_authorized()));
        };
        let RoleTrust {
            trust,
            max_session_seconds: max_session,
        } = role_trust;
        // A registered issuer the role does not trust: refused as AWS does.
        if issuer != trust.issuer {
            return Err(("issuer", not_authorized()));
        }
        claims.for_audience(&trust.audience).map_err(token_refusal)?;
        if !trust.admits(&claims.sub, claims.service_account_uid()) {
            return Err(("subject", not_authorized()));
        }
        let secs = duration.unwrap_or(DEFAULT_DURATION_SECS.min(max_session));
        if secs > max_session {
            return Err(plain(validation(
                "The requested DurationSeconds exceeds the MaxSessionDuration set for this role.",
            )));
        }
        let access_key = format!("ASIA{}", random_id(16));
        let secret = random_secret();
        let session_token = base64::engine::general_purpose::STANDARD.encode(random_bytes::<96>());
        let token_digest = Sha256::digest(session_token.as_bytes()).to_vec();
        let opened = self
            .catalog
            .open_session(&NewSession {
                access_key: &access_key,
                secret: &secret,
                token_sha256: &token_digest,
                role,
                subject: &claims.sub,
                session_name,
                seconds: secs,
            })
            .await
            .map_err(|_| plain(unavailable()))?;
        // None: the role was deleted meanwhile.
        let expires = opened.ok_or_else(|| plain(not_authorized()))?;
        Ok(Issued {
            access_key,
            secret,
            token: session_token,
            expiration: expires.into(),
            subject: claims.sub,
            audience: trust.audience,
            issuer,
            role: role.to_owned(),
            session_name: session_name.to_owned(),
        })
    }

    /// The issuer's parsed keys: the cached ones while the catalog's set is still the version
    /// parsed (one indexed read that transfers no keys), else the set read and parsed once. An
    /// issuer that is not registered is the token's refusal.
    async fn key_set(&self, issuer: &str) -> Result<Arc<jwt::KeySet>, (&'static str, Refusal)> {
        let cached = self.keys.lock().expect("sts keys").get(issuer).cloned();
        let unknown = || token_refusal(jwt::Refusal::Issuer(issuer.chars().take(256).collect()));
        let (version, jwks) = self
            .catalog
            .oidc_issuer_keys(issuer, cached.as_ref().map(|(version, _)| *version))
            .await
            .map_err(|_| (unavailable().reason(), unavailable()))?
            .ok_or_else(unknown)?;
        // No set: it is still the version cached.
        if let (None, Some((_, keys))) = (&jwks, cached) {
            return Ok(keys);
        }
        let keys = Arc::new(jwt::parse_key_set(&jwks.unwrap_or_default()));
        let mut cache = self.keys.lock().expect("sts keys");
        // Bounded by the issuers registered (a token of another issuer is refused before it
        // is cached); an issuer deleted leaves one entry until restart.
        cache.insert(issuer.to_owned(), (version, Arc::clone(&keys)));
        Ok(keys)
    }
}

/// An AssumeRoleWithWebIdentity call's parameters, checked as AWS checks them (in its order,
/// and with its messages), before any token or role is looked at.
struct Call<'a> {
    role: &'a str,
    session_name: &'a str,
    token: &'a str,
    duration: Option<i32>,
}

impl<'a> Call<'a> {
    fn of(params: &'a HashMap<String, String>) -> Result<Call<'a>, Refusal> {
        let required = |name: &str, field: &str| {
            params
                .get(name)
                .map(String::as_str)
                .filter(|value| !value.is_empty())
                .ok_or_else(|| {
                    validation(format!(
                        "1 validation error detected: Value null at '{field}' failed to satisfy constraint: Member must not be null"
                    ))
                })
        };
        let arn = required("RoleArn", "roleArn")?;
        let session_name = required("RoleSessionName", "roleSessionName")?;
        let token = required("WebIdentityToken", "webIdentityToken")?;
        let session_ok = (2..=64).contains(&session_name.len())
            && session_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c));
        if !session_ok {
            return Err(validation(
                "1 validation error detected: Value at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]{2,64}",
            ));
        }
        if params.contains_key("Policy") || params.keys().any(|name| name.starts_with("PolicyArns")) {
            return Err(validation("Session policies (Policy, PolicyArns) are not supported"));
        }
        let duration = match params.get("DurationSeconds") {
            None => None,
            Some(text) => Some(text.parse::<i32>().map_err(|_| {
                validation("1 validation error detected: Value at 'durationSeconds' failed to satisfy constraint: Member must be a number")
            })?),
        };
        if let Some(secs) = duration
            && secs < pgvs3_catalog::sts::MIN_SESSION_SECONDS
        {
            return Err(validation(format!(
                "1 validation error detected: Value '{secs}' at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to 900"
            )));
        }
        let Some(role) = role_name(arn) else {
            return Err(validation(format!(
                "{} is not a role ARN",
                arn.chars().take(256).collect::<String>()
            )));
        };
        Ok(Call {
            role,
            session_name,
            token,
            duration,
        })
    }
}

/// An STS call on `/`: a GET or POST with `Action=` in its query, or a POST of a URL-encoded
/// form.
fn is_sts(method: &http::Method, uri: &http::Uri, headers: &http::HeaderMap) -> bool {
    if uri.path() != "/" {
        return false;
    }
    let query_action = uri
        .query()
        .is_some_and(|query| query.starts_with("Action=") || query.contains("&Action="));
    let form = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/x-www-form-urlencoded"));
    (query_action && (method == http::Method::GET || method == http::Method::POST))
        || (form && method == http::Method::POST)
}

/// Whether a request carries a signature (a header or a presigned query).
fn signed(headers: &http::HeaderMap, uri: &http::Uri) -> bool {
    headers.contains_key(http::header::AUTHORIZATION)
        || uri.query().is_some_and(|query| query.contains("X-Amz-Credential="))
}

/// A call's parameters: its query's and its form body's.
fn params(uri: &http::Uri, body: &[u8]) -> HashMap<String, String> {
    let mut params: HashMap<String, String> = HashMap::new();
    if let Some(query) = uri.query() {
        params.extend(form_urlencoded::parse(query.as_bytes()).into_owned());
    }
    params.extend(form_urlencoded::parse(body).into_owned());
    params
}

/// Signed STS calls (GetCallerIdentity, as the SDKs sign it with service `sts`), through s3s's
/// custom route: s3s verifies the signature (reading the form, bounded, for its hash) and
/// requires one, then the session token is checked as for S3.
pub struct SignedSts(pub Arc<Sts>);

#[async_trait::async_trait]
impl s3s::route::S3Route for SignedSts {
    fn is_match(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        _: &mut http::Extensions,
    ) -> bool {
        signed(headers, uri) && is_sts(method, uri, headers)
    }

    async fn call(&self, mut req: s3s::S3Request<s3s::Body>) -> s3s::S3Result<s3s::S3Response<s3s::Body>> {
        let body = req
            .input
            .store_all_limited(MAX_FORM_BYTES)
            .await
            .map_err(|_| s3s::s3_error!(InvalidRequest, "The request body is over 64 KiB"))?;
        let request_id = req
            .extensions
            .get::<super::errors::RequestId>()
            .map(|id| id.0.clone())
            .unwrap_or_default();
        let Some(access_key) = req.credentials.as_ref().map(|c| c.access_key.clone()) else {
            return Err(s3s::s3_error!(AccessDenied, "Signature required"));
        };
        if let Err(err) = super::auth::security_token(&self.0.catalog, &access_key, &req.headers, &req.uri).await {
            // In STS's terms, which the SDKs' query protocol parses.
            let refusal = match err.code() {
                s3s::S3ErrorCode::ExpiredToken => Refusal(
                    StatusCode::BAD_REQUEST,
                    "ExpiredToken",
                    "The security token included in the request is expired".into(),
                ),
                _ => Refusal(
                    StatusCode::FORBIDDEN,
                    "InvalidClientTokenId",
                    "The security token included in the request is invalid.".into(),
                ),
            };
            return Ok(s3_response(self.0.refuse("token", &refusal, &request_id)));
        }
        let key = self
            .0
            .catalog
            .access_key(&access_key)
            .await
            .map_err(|err| super::errors::s3_error(err, None))?
            .ok_or_else(|| s3s::s3_error!(InvalidAccessKeyId))?;
        Ok(s3_response(
            self.0.answer(&params(&req.uri, &body), &request_id, Some(&key)).await,
        ))
    }
}

fn s3_response(response: Response<s3s::Body>) -> s3s::S3Response<s3s::Body> {
    let (parts, body) = response.into_parts();
    let mut answer = s3s::S3Response::new(body);
    answer.status = Some(parts.status);
    answer.headers = parts.headers;
    answer
}

/// GetCallerIdentity's answer: a key as an IAM user (`root` for a root key), a session as its
/// assumed role.
fn caller_xml(key: &AccessKey, request_id: &str) -> String {
    let account = pgvs3_catalog::sts::ACCOUNT_ID;
    let (arn, user_id) = match &key.session {
        Some(session) => (
            format!(
                "arn:aws:sts::{account}:assumed-role/{}/{}",
                session.role, session.session_name
            ),
            format!("{}:{}", role_id(&session.role), session.session_name),
        ),
        None if key.is_root => (format!("arn:aws:iam::{account}:root"), account.to_owned()),
        None => (
            format!("arn:aws:iam::{account}:user/{}", key.access_key),
            key.access_key.clone(),
        ),
    };
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<GetCallerIdentityResponse xmlns=\"{NAMESPACE}\"><GetCallerIdentityResult>\
<Arn>{}</Arn><UserId>{}</UserId><Account>{account}</Account></GetCallerIdentityResult>\
<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></GetCallerIdentityResponse>",
        escape(&arn),
        escape(&user_id)
    )
}

/// A role's id as AWS shows it (`AROA` and 16 characters), derived from its name.
fn role_id(role: &str) -> String {
    format!(
        "AROA{}",
        hex::encode(&Sha256::digest(role.as_bytes())[..8]).to_uppercase()
    )
}

fn unavailable() -> Refusal {
    Refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailable",
        "The catalog is not reachable; retry".into(),
    )
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).expect("the system's random source");
    bytes
}

/// `len` characters of A-Z and 2-7 (AWS access key ids are upper case and digits).
fn random_id(len: usize) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    random_bytes::<32>()[..len]
        .iter()
        .map(|byte| ALPHABET[usize::from(byte & 31)] as char)
        .collect()
}

/// A 40-character secret, as AWS's.
fn random_secret() -> String {
    base64::engine::general_purpose::STANDARD
        .encode(random_bytes::<30>())
        .replace(['+', '/'], "x")
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// STS's error document.
fn error_response(status: StatusCode, code: &str, message: &str, request_id: &str) -> Response<s3s::Body> {
    let kind = if status.is_server_error() { "Receiver" } else { "Sender" };
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ErrorResponse xmlns=\"{NAMESPACE}\"><Error><Type>{kind}</Type><Code>{}</Code><Message>{}</Message></Error><RequestId>{}</RequestId></ErrorResponse>",
        escape(code),
        escape(message),
        escape(request_id)
    );
    xml_response(status, body)
}

fn xml_response(status: StatusCode, body: String) -> Response<s3s::Body> {
    let mut response = Response::new(s3s::Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/xml"));
    response
}

fn assumed_xml(issued: &Issued, request_id: &str) -> String {
    let expiration = issued
        .expiration
        .replace_nanosecond(0)
        .unwrap_or(issued.expiration)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let role_id = role_id(&issued.role);
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<AssumeRoleWithWebIdentityResponse xmlns=\"{NAMESPACE}\"><AssumeRoleWithWebIdentityResult>\
<SubjectFromWebIdentityToken>{subject}</SubjectFromWebIdentityToken><Audience>{audience}</Audience>\
<AssumedRoleUser><Arn>arn:aws:sts::{account}:assumed-role/{role}/{session}</Arn><AssumedRoleId>{role_id}:{session}</AssumedRoleId></AssumedRoleUser>\
<Credentials><AccessKeyId>{access_key}</AccessKeyId><SecretAccessKey>{secret}</SecretAccessKey><SessionToken>{token}</SessionToken><Expiration>{expiration}</Expiration></Credentials>\
<Provider>{provider}</Provider></AssumeRoleWithWebIdentityResult><ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></AssumeRoleWithWebIdentityResponse>",
        subject = escape(&issued.subject),
        audience = escape(&issued.audience),
        account = pgvs3_catalog::sts::ACCOUNT_ID,
        role = escape(&issued.role),
        session = escape(&issued.session_name),
        access_key = issued.access_key,
        secret = issued.secret,
        token = issued.token,
        provider = escape(&issued.issuer),
    )
}
