//! SigV4 secrets from the catalog, the rule that every request is signed, and admission of
//! signed requests (after the signature, before the body or the database).

use std::sync::{Arc, Mutex, OnceLock};

use s3s::S3Result;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};

use super::front::Resolved;
use super::front::operations::Class;
use crate::admission::{Admission, Admitted};
use crate::store::{AccessKey, BucketInfo, Catalog};

pub struct CatalogAuth {
    pub catalog: Arc<Catalog>,
}

#[async_trait::async_trait]
impl S3Auth for CatalogAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.catalog.access_key(access_key).await {
            Ok(Some(key)) => Ok(SecretKey::from(key.secret.as_str())),
            Ok(None) => Err(s3s::s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )),
            Err(err) => Err(super::errors::s3_error(err, None)),
        }
    }
}

/// Filled in during routing with what s3s parsed, for metrics and the request's span.
#[derive(Clone, Default)]
pub struct RequestFacts(Arc<Facts>);

#[derive(Default)]
struct Facts {
    operation: OnceLock<&'static str>,
    bucket: OnceLock<String>,
    /// The object key s3s routed the request to (error bodies name it).
    key: OnceLock<String>,
    /// The request's admission slot, taken in [`SignedOnly::check`] and moved into the
    /// response body so it is held until the last byte is sent.
    admitted: Mutex<Option<Admitted>>,
    /// Set when admission turned the request away (its 503 then carries Retry-After).
    turned_away: OnceLock<()>,
    /// The request's server access log record, when its bucket logs (`access_log`).
    log: Mutex<Option<Box<super::access_log::Draft>>>,
}

impl RequestFacts {
    /// The admission slot, if the request was admitted.
    pub fn take_admitted(&self) -> Option<Admitted> {
        self.0.admitted.lock().expect("admission slot").take()
    }

    pub fn turned_away(&self) -> bool {
        self.0.turned_away.get().is_some()
    }

    /// Names a request s3s does not route (a CORS preflight).
    pub fn name_operation(&self, name: &'static str) {
        let _ = self.0.operation.set(name);
    }

    pub fn operation(&self) -> Option<&'static str> {
        self.0.operation.get().copied()
    }

    pub fn bucket(&self) -> Option<&str> {
        self.0.bucket.get().map(String::as_str)
    }

    pub fn key(&self) -> Option<&str> {
        self.0.key.get().map(String::as_str)
    }

    /// The request's access log record, if its bucket logs.
    pub fn take_log(&self) -> Option<Box<super::access_log::Draft>> {
        self.0.log.lock().expect("access log draft").take()
    }
}

/// Signed requests pass, and unsigned ones a bucket policy allows; each is checked against
/// its bucket's policy ([`super::authorize`]) and then admitted in its class. s3s calls this after it
/// verified the signature (for a POST form: after reading the form's fields, bounded by s3s),
/// and before the operation reads the body or takes a database connection, so an
/// unauthenticated client never holds a slot.
pub struct SignedOnly {
    pub admission: S3Admission,
    /// For bucket policies (evaluated here, before admission).
    pub catalog: Arc<Catalog>,
}

/// The admission classes of signed S3 requests: uploads apart, so large bodies streaming in
/// cannot take the slots small requests need.
pub struct S3Admission {
    /// Requests without a large body.
    pub requests: Admission,
    /// Requests whose body is declared larger than `upload_threshold`, or not declared.
    pub uploads: Admission,
    pub upload_threshold: u64,
}

#[async_trait::async_trait]
impl S3Access for SignedOnly {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        // The table's entry, found once: its name is the `&'static str` metrics label (only an
        // operation s3s routes and the table lacks is interned).
        let operation = super::front::operations::operation(cx.s3_op().name());
        let name = operation.map_or_else(|| operation_name(cx.s3_op().name()), |op| op.name);
        let bucket = cx.s3_path().get_bucket_name().map(str::to_owned);
        let class = match operation.map(|op| op.class) {
            Some(Class::Requests) => &self.admission.requests,
            _ if self.admission.is_upload(cx.headers()) => &self.admission.uploads,
            _ => &self.admission.requests,
        };
        let peer = cx.extensions_mut().get::<crate::http_server::Peer>().copied();
        let Some(facts) = cx.extensions_mut().get::<RequestFacts>().cloned() else {
            return Err(s3s::s3_error!(InternalError, "request facts missing"));
        };
        let _ = facts.0.operation.set(name);
        if let Some(bucket) = bucket {
            let _ = facts.0.bucket.set(bucket);
        }
        if let Some(key) = cx.s3_path().get_object_key() {
            let _ = facts.0.key.set(key.to_owned());
        }
        // The signing key and the bucket, looked up once here for the access check and the
        // front (`front::RequestContext`).
        let key = match cx.credentials().map(|c| c.access_key.as_str()) {
            Some(access_key) => Some(
                self.catalog
                    .access_key(access_key)
                    .await
                    .map_err(|err| super::errors::s3_error(err, None))?
                    .ok_or_else(unknown_key)?,
            ),
            None => None,
        };
        if let Some(key) = &key {
            security_token_of(key, cx.headers(), cx.uri())?;
        }
        let resolved_bucket = super::authorize::resolve_bucket(&self.catalog, cx, name).await?;
        // Before the access decision, so a refused request is logged too, as S3 logs it.
        if let Some(bucket) = resolved_bucket.as_ref().filter(|bucket| bucket.logging.is_some()) {
            let draft = self.log_draft(cx, bucket, key.as_deref(), name, peer);
            *facts.0.log.lock().expect("access log draft") = Some(Box::new(draft));
        }
        // A browser upload's fields went by before s3s's access check: its key and settings.
        let form = cx.extensions_mut().get::<super::post_form::FormNotes>().cloned();
        let fields = form.as_ref().and_then(super::post_form::FormNotes::get);
        if let Some(grant) = super::authorize::authorize(
            &self.catalog,
            cx,
            peer,
            name,
            fields,
            key.as_ref(),
            resolved_bucket.as_ref(),
        )? {
            cx.extensions_mut().insert(grant);
        }
        cx.extensions_mut().insert(Resolved {
            key,
            bucket: resolved_bucket,
        });
        match class.admit().await {
            Ok(admitted) => {
                *facts.0.admitted.lock().expect("admission slot") = Some(admitted);
                Ok(())
            }
            Err(_) => {
                let _ = facts.0.turned_away.set(());
                Err(s3s::s3_error!(SlowDown, "Please reduce your request rate."))
            }
        }
    }
}

impl SignedOnly {
    /// The server access log record of a request to `bucket`, which logs.
    fn log_draft(
        &self,
        cx: &mut S3AccessContext<'_>,
        bucket: &Arc<BucketInfo>,
        key: Option<&AccessKey>,
        operation: &'static str,
        peer: Option<crate::http_server::Peer>,
    ) -> super::access_log::Draft {
        let owner = bucket
            .owner
            .clone()
            .or_else(|| self.catalog.root_key_id())
            .unwrap_or_default();
        let request_id = cx
            .extensions_mut()
            .get::<super::errors::RequestId>()
            .map(|id| id.0.clone());
        super::access_log::Draft::new(super::access_log::RequestSeen {
            bucket,
            owner,
            requester: key.map(|key| key.access_key.as_str()),
            request_id: request_id.as_deref().unwrap_or_default(),
            operation,
            key: cx.s3_path().get_object_key(),
            method: cx.method(),
            uri: cx.uri(),
            headers: cx.headers(),
            peer,
        })
    }
}

/// Temporary credentials are good only with their session token (`x-amz-security-token`, or
/// `X-Amz-Security-Token` in a presigned URL) and until they expire, as on S3: a missing or
/// wrong token is 400 InvalidToken, an expired session 400 ExpiredToken. A static key has no
/// token: one sent with it is 400 InvalidToken too, as S3 answers a long-term key with a
/// session token, rather than a token silently ignored.
pub(super) async fn security_token(
    catalog: &Catalog,
    access_key: &str,
    headers: &http::HeaderMap,
    uri: &http::Uri,
) -> S3Result<()> {
    if !crate::store::is_session_key(access_key) {
        return no_token(headers, uri);
    }
    let key = catalog
        .access_key(access_key)
        .await
        .map_err(|err| super::errors::s3_error(err, None))?;
    match key {
        Some(key) => security_token_of(&key, headers, uri),
        None => Err(unknown_key()),
    }
}

fn unknown_key() -> s3s::S3Error {
    s3s::s3_error!(
        InvalidAccessKeyId,
        "The AWS Access Key Id you provided does not exist in our records."
    )
}

fn invalid_token() -> s3s::S3Error {
    s3s::s3_error!(InvalidToken, "The provided token is malformed or otherwise invalid.")
}

/// The session token the request presents, if any. A header that is not text counts as
/// presented (and matches no session's token).
fn presented_token(headers: &http::HeaderMap, uri: &http::Uri) -> Option<String> {
    match headers.get("x-amz-security-token") {
        Some(value) => Some(value.to_str().unwrap_or_default().to_owned()),
        None => {
            let query = uri.query().filter(|query| query.contains("X-Amz-Security-Token="))?;
            form_urlencoded::parse(query.as_bytes())
                .find(|(name, _)| name == "X-Amz-Security-Token")
                .map(|(_, value)| value.into_owned())
        }
    }
}

/// A static key's request: it may carry no session token.
fn no_token(headers: &http::HeaderMap, uri: &http::Uri) -> S3Result<()> {
    match presented_token(headers, uri) {
        Some(_) => Err(invalid_token()),
        None => Ok(()),
    }
}

/// [`security_token`] for a key already looked up.
fn security_token_of(key: &AccessKey, headers: &http::HeaderMap, uri: &http::Uri) -> S3Result<()> {
    if !crate::store::is_session_key(&key.access_key) {
        return no_token(headers, uri);
    }
    let Some(session) = key.session.as_ref() else {
        return Err(unknown_key());
    };
    if !presented_token(headers, uri).is_some_and(|token| session.token_matches(&token)) {
        return Err(invalid_token());
    }
    if session.expired() {
        return Err(s3s::s3_error!(ExpiredToken, "The provided token has expired."));
    }
    Ok(())
}

impl S3Admission {
    /// A body declared larger than the threshold, or streamed without a declared length.
    fn is_upload(&self, headers: &http::HeaderMap) -> bool {
        let declared = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        match declared("x-amz-decoded-content-length").or_else(|| declared("content-length")) {
            Some(length) => length > self.upload_threshold,
            None => headers.contains_key(http::header::TRANSFER_ENCODING),
        }
    }
}

/// The longest a presigned URL may be valid: SigV4 signing keys last seven days.
const MAX_PRESIGNED_SECS: i64 = 604_800;

/// Checks a presigned URL's `X-Amz-Expires` as S3 does (400 AuthorizationQueryParametersError).
/// s3s checks only that the URL has not expired; it takes any u32 and calls a negative or
/// non-numeric value a missing field (400 InvalidRequest) before this can run, so this also
/// answers S3's way when called ahead of s3s. A request without the parameter costs one
/// substring search of its query.
pub fn presigned_expiry(uri: &http::Uri) -> S3Result<()> {
    let Some(value) = query_param(uri, "X-Amz-Expires") else {
        return Ok(());
    };
    let refuse = |message: &str| {
        Err(s3s::S3Error::with_message(
            s3s::S3ErrorCode::AuthorizationQueryParametersError,
            message.to_owned(),
        ))
    };
    let digits = value.strip_prefix('-').unwrap_or(&value);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return refuse("X-Amz-Expires should be a number");
    }
    if value.starts_with('-') && digits.bytes().any(|b| b != b'0') {
        return refuse("X-Amz-Expires must be non-negative");
    }
    // All digits: a value too long for i64 is over the limit too.
    if value.parse::<i64>().map_or(true, |secs| secs > MAX_PRESIGNED_SECS) {
        return refuse(
            "X-Amz-Expires must be less than a week (in seconds); that is, the given X-Amz-Expires must be less than 604800 seconds",
        );
    }
    Ok(())
}

/// Whether a presigned URL's `X-Amz-Signature` is not a signature at all (not 64 lowercase
/// hex digits). S3 computes the signature and answers that it does not match; s3s refuses the
/// URL's form instead (400 InvalidRequest "missing presigned url v4 fields").
pub fn presigned_signature_malformed(uri: &http::Uri) -> bool {
    query_param(uri, "X-Amz-Signature")
        .is_some_and(|value| value.len() != 64 || !value.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// A query parameter by its name as s3s reads it: percent-decoded, so `X-Amz%2DExpires` is
/// `X-Amz-Expires` too. A query holding neither the name nor any escape costs one substring
/// search.
fn query_param<'a>(uri: &'a http::Uri, name: &str) -> Option<std::borrow::Cow<'a, str>> {
    let query = uri
        .query()
        .filter(|query| query.contains(name) || query.contains('%'))?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value)
}

/// The `x-amz-*` header of a SigV4 request that its signature does not cover (or `host`, when
/// the signature leaves it out), as S3 refuses them: 403 AccessDenied "There were headers present
/// in the request which were not signed". s3s checks only the headers a request lists as signed,
/// so without this a presigned URL could carry any `x-amz-*` header its holder likes — an
/// `x-amz-copy-source` turns a presigned upload into a copy of whatever the signer may read, an
/// `x-amz-object-lock-mode` locks the object for years. Exempt, as the SDKs leave them unsigned:
/// the session token (a credential checked on its own) and, on a presigned URL, the headers
/// that SDKs never sign there (`x-amz-user-agent`, `x-amz-checksum-mode`) and the payload hash.
pub fn unsigned_header(uri: &http::Uri, headers: &http::HeaderMap) -> Option<String> {
    let authorization = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    let (signed, presigned) = match authorization {
        Some(value) if value.starts_with("AWS4-HMAC-SHA256") => {
            let signed = value
                .split(',')
                .find_map(|part| part.split_once("SignedHeaders=").map(|(_, list)| list.trim()))?;
            (std::borrow::Cow::Borrowed(signed), false)
        }
        Some(_) => return None,
        None => (query_param(uri, "X-Amz-SignedHeaders")?, true),
    };
    let signed: Vec<String> = signed.split(';').map(str::to_ascii_lowercase).collect();
    let is_signed = |name: &str| signed.iter().any(|entry| entry == name);
    if !is_signed("host") {
        return Some("host".to_owned());
    }
    let exempt = |name: &str| {
        name == "x-amz-security-token"
            || presigned
                && matches!(
                    name,
                    "x-amz-user-agent" | "x-amz-checksum-mode" | "x-amz-content-sha256"
                )
    };
    headers
        .keys()
        .map(http::HeaderName::as_str)
        .find(|name| name.starts_with("x-amz-") && !exempt(name) && !is_signed(name))
        .map(str::to_owned)
}

/// Sub-resources that choose an operation but that SigV2 does not sign (s3s's list, as botocore's,
/// predates them): with one of them added, a SigV2 presigned URL (or a replayed request) for an
/// object would still verify while running another operation — `?retention` turns an upload
/// URL into a COMPLIANCE lock until 2099. S3 has refused SigV2 for buckets made since 2020;
/// pgvs3 takes SigV2 for older tools, but not for these: they need SigV4.
const SIGV2_UNSIGNED_SUBRESOURCES: &[&str] = &[
    "retention",
    "legal-hold",
    "encryption",
    "ownershipControls",
    "publicAccessBlock",
    "intelligent-tiering",
    "policyStatus",
    "attributes",
    "session",
];

/// The sub-resource a SigV2 request names that its signature does not cover (see
/// [`SIGV2_UNSIGNED_SUBRESOURCES`]).
pub fn sigv2_unsigned_subresource(uri: &http::Uri, headers: &http::HeaderMap) -> Option<&'static str> {
    let query = uri.query()?;
    let sigv2_header = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("AWS "));
    let sigv2 = sigv2_header || query_param(uri, "AWSAccessKeyId").is_some();
    if !sigv2 {
        return None;
    }
    form_urlencoded::parse(query.as_bytes())
        .find_map(|(name, _)| SIGV2_UNSIGNED_SUBRESOURCES.iter().find(|unsigned| **unsigned == name))
        .copied()
}

/// How far a SigV2 request's date may be from the gateway's clock, as S3 allows.
const MAX_SIGV2_SKEW: time::Duration = time::Duration::minutes(15);

/// A SigV2 request's date (`x-amz-date`, else `Date`), checked as S3 checks it — s3s does not
/// look at it, so a request signed once was good forever. Unreadable, empty or before 1970: 403
/// `AccessDenied`; more than 15 minutes from now: 403 `RequestTimeTooSkewed`. The code and
/// message of the refusal.
pub fn sigv2_date(headers: &http::HeaderMap, now: time::OffsetDateTime) -> Result<(), (&'static str, &'static str)> {
    let sigv2 = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("AWS "));
    if !sigv2 {
        return Ok(());
    }
    let invalid = (
        "AccessDenied",
        "AWS authentication requires a valid Date or x-amz-date header",
    );
    let date = headers
        .get("x-amz-date")
        .or_else(|| headers.get(http::header::DATE))
        .and_then(|value| value.to_str().ok())
        .ok_or(invalid)?;
    // The weekday is not held against the date (S3 reads "Tue, 07 Jul 2010", a Wednesday, as
    // a date that is too old).
    let (_weekday, date) = date.trim().split_once(", ").ok_or(invalid)?;
    let format =
        time::format_description::parse_borrowed::<2>("[day] [month repr:short] [year] [hour]:[minute]:[second] GMT")
            .map_err(|_| invalid)?;
    let at = time::PrimitiveDateTime::parse(date, &format)
        .map_err(|_| invalid)?
        .assume_utc();
    if at.year() < 1970 {
        return Err(invalid);
    }
    if (at - now).abs() > MAX_SIGV2_SKEW {
        return Err((
            "RequestTimeTooSkewed",
            "The difference between the request time and the current time is too large.",
        ));
    }
    Ok(())
}

/// Interns the name of an operation the table does not hold, so metric labels are
/// `&'static str` without leaking per request.
fn operation_name(name: &str) -> &'static str {
    static NAMES: OnceLock<std::sync::Mutex<std::collections::HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Default::default).lock().expect("operation names");
    if let Some(known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// SigV2 clients (botocore, the AWS SDK for Java v1, s3cmd) sign a path-style request for a
/// bucket (`GET /bucket?...`) with the resource `/bucket/`, and S3 accepts it; s3s signs the
/// path as sent, so every such request failed with SignatureDoesNotMatch. Its path gets the
/// slash before s3s checks the signature (S3 routes `/bucket` and `/bucket/` alike).
pub fn slash_v2_bucket_path<B>(request: &mut http::Request<B>) {
    let uri = request.uri();
    let path = uri.path();
    if path.len() < 2 || path[1..].contains('/') {
        return;
    }
    let header_v2 = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("AWS "));
    let query_v2 = uri
        .query()
        .is_some_and(|query| query.contains("AWSAccessKeyId=") && query.contains("Signature="));
    if !header_v2 && !query_v2 {
        return;
    }
    let slashed = match uri.query() {
        Some(query) => format!("{path}/?{query}"),
        None => format!("{path}/"),
    };
    let mut parts = uri.clone().into_parts();
    if let Ok(path_and_query) = http::uri::PathAndQuery::try_from(slashed) {
        parts.path_and_query = Some(path_and_query);
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn v2_bucket_paths_get_the_slash_clients_sign() {
        let slashed = |path: &str, auth: &str| {
            let mut request = http::Request::builder()
                .uri(path)
                .header("authorization", auth)
                .body(())
                .unwrap();
            slash_v2_bucket_path(&mut request);
            request.uri().to_string()
        };
        assert_eq!(slashed("/bucket", "AWS KEY:sig"), "/bucket/");
        assert_eq!(slashed("/bucket?versioning", "AWS KEY:sig"), "/bucket/?versioning");
        assert_eq!(slashed("/bucket/key", "AWS KEY:sig"), "/bucket/key");
        assert_eq!(slashed("/", "AWS KEY:sig"), "/");
        assert_eq!(slashed("/bucket", "AWS4-HMAC-SHA256 Credential=x"), "/bucket");
    }

    use super::*;
    use proptest::prelude::*;

    fn expiry(value: &str) -> Option<String> {
        let uri: http::Uri = format!("/b/k?X-Amz-Date=x&X-Amz-Expires={value}&X-Amz-Signature=s")
            .parse()
            .unwrap();
        presigned_expiry(&uri)
            .err()
            .and_then(|e| e.message().map(str::to_owned))
    }

    #[test]
    fn sigv2_dates_are_checked_as_s3_does() {
        let now = time::OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        let check = |date: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert(http::header::AUTHORIZATION, "AWS AK:c2ln".parse().unwrap());
            if let Ok(value) = date.parse() {
                headers.insert(http::header::DATE, value);
            }
            sigv2_date(&headers, now).map_err(|(code, _)| code)
        };
        assert_eq!(check("Tue, 14 Nov 2023 22:13:20 GMT"), Ok(()));
        assert_eq!(check("Tue, 14 Nov 2023 22:20:00 GMT"), Ok(()));
        for bad in ["Bad Date", "", "\x07", "Sat, 01 Jan 1950 00:00:00 GMT"] {
            assert_eq!(check(bad), Err("AccessDenied"), "{bad}");
        }
        for skewed in [
            "Tue, 07 Jul 2010 21:53:04 GMT",
            "Tue, 01 Jan 2030 00:00:00 GMT",
            "Fri, 31 Dec 9999 00:00:00 GMT",
        ] {
            assert_eq!(check(skewed), Err("RequestTimeTooSkewed"), "{skewed}");
        }
        // A SigV4 request's date is s3s's.
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            "AWS4-HMAC-SHA256 Credential=x".parse().unwrap(),
        );
        assert_eq!(sigv2_date(&headers, now), Ok(()));
    }

    #[test]
    fn presigned_expiry_is_checked_as_s3_does() {
        assert_eq!(expiry("604800"), None);
        assert_eq!(expiry("0"), None);
        assert!(expiry("604801").unwrap().contains("less than a week"));
        assert!(expiry("99999999999999999999999").unwrap().contains("less than a week"));
        assert_eq!(expiry("-7").as_deref(), Some("X-Amz-Expires must be non-negative"));
        for not_a_number in ["", "abc", "1e3", "-", "+5", "%2B5"] {
            assert_eq!(
                expiry(not_a_number).as_deref(),
                Some("X-Amz-Expires should be a number"),
                "{not_a_number}"
            );
        }
        assert!(presigned_expiry(&"/b/k?list-type=2".parse().unwrap()).is_ok());
        // s3s decodes parameter names: an escaped name is the same parameter.
        let escaped: http::Uri = "/b/k?X-Amz%2DExpires=4294967295&X-Amz-Signature=x".parse().unwrap();
        assert!(presigned_expiry(&escaped).is_err());
    }

    #[test]
    fn every_amz_header_must_be_signed_but_the_exempt() {
        let unsigned = |uri: &str, headers: &[(&str, &str)]| {
            let mut map = http::HeaderMap::new();
            for (name, value) in headers {
                map.insert(
                    http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    value.parse().unwrap(),
                );
            }
            unsigned_header(&uri.parse().unwrap(), &map)
        };
        let presigned = "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-SignedHeaders=host&X-Amz-Signature=x";
        assert_eq!(unsigned(presigned, &[("host", "h")]), None);
        assert_eq!(
            unsigned(presigned, &[("x-amz-copy-source", "/b/secret")]).as_deref(),
            Some("x-amz-copy-source")
        );
        assert_eq!(
            unsigned(
                &presigned.replace("X-Amz-SignedHeaders", "X-Amz%2DSignedHeaders"),
                &[("x-amz-acl", "public-read")]
            )
            .as_deref(),
            Some("x-amz-acl"),
            "an escaped parameter name is read as s3s reads it"
        );
        let exempt = [
            ("x-amz-user-agent", "sdk"),
            ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
            ("x-amz-security-token", "t"),
        ];
        assert_eq!(unsigned(presigned, &exempt), None);
        let signed = presigned.replace("SignedHeaders=host", "SignedHeaders=host%3Bx-amz-acl");
        assert_eq!(unsigned(&signed, &[("x-amz-acl", "private")]), None);
        assert_eq!(
            unsigned(&presigned.replace("SignedHeaders=host", "SignedHeaders=range"), &[]).as_deref(),
            Some("host")
        );

        let header = |signed: &str| {
            format!(
                "AWS4-HMAC-SHA256 Credential=AK/20260101/us-east-1/s3/aws4_request, SignedHeaders={signed}, Signature=ab"
            )
        };
        let auth = header("host;x-amz-content-sha256;x-amz-date");
        let base = [
            ("authorization", auth.as_str()),
            ("x-amz-date", "d"),
            ("x-amz-content-sha256", "h"),
        ];
        assert_eq!(unsigned("/b/k", &base), None);
        let mut more = base.to_vec();
        more.push(("x-amz-meta-owner", "mallory"));
        assert_eq!(unsigned("/b/k", &more).as_deref(), Some("x-amz-meta-owner"));
        // Header auth: x-amz-user-agent is signed by the SDKs, so it counts.
        let mut agent = base.to_vec();
        agent.push(("x-amz-user-agent", "sdk"));
        assert_eq!(unsigned("/b/k", &agent).as_deref(), Some("x-amz-user-agent"));
        // SigV2 and anonymous requests are not SigV4's to check.
        assert_eq!(
            unsigned("/b/k", &[("authorization", "AWS AK:sig"), ("x-amz-acl", "p")]),
            None
        );
        assert_eq!(unsigned("/b/k", &[("x-amz-acl", "p")]), None);
    }

    #[test]
    fn sigv2_requests_may_not_name_sub_resources_it_does_not_sign() {
        let named = |uri: &str, authorization: Option<&str>| {
            let mut headers = http::HeaderMap::new();
            if let Some(value) = authorization {
                headers.insert(http::header::AUTHORIZATION, value.parse().unwrap());
            }
            sigv2_unsigned_subresource(&uri.parse().unwrap(), &headers)
        };
        assert_eq!(
            named("/b/k?AWSAccessKeyId=AK&Expires=9&Signature=s&retention", None),
            Some("retention")
        );
        assert_eq!(named("/b/k?legal-hold", Some("AWS AK:sig")), Some("legal-hold"));
        assert_eq!(
            named("/b/k?AWSAccessKeyId=AK&Expires=9&Signature=s&tagging", None),
            None,
            "signed by SigV2"
        );
        assert_eq!(
            named("/b/k?retention", Some("AWS4-HMAC-SHA256 Credential=x")),
            None,
            "SigV4 signs every parameter"
        );
        assert_eq!(named("/b/k?retention", None), None, "anonymous");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn every_expiry_in_range_is_accepted_and_none_beyond(secs in 0i64..2 * MAX_PRESIGNED_SECS) {
            prop_assert_eq!(expiry(&secs.to_string()).is_none(), secs <= MAX_PRESIGNED_SECS);
        }

        #[test]
        fn any_expiry_text_gets_an_answer(value in "[-+0-9a-z%]{0,24}") {
            let _ = expiry(&value);
        }
    }
}
