//! CORS on the wire: preflight `OPTIONS` requests answered from the bucket's rules without a
//! signature (as S3 does, before s3s, which has no route for them), and the
//! `Access-Control-*` headers S3 adds to the real response of a request whose Origin a rule
//! allows. Requests without an Origin header skip all of this.

use http::{HeaderMap, HeaderValue, Method, StatusCode};

use crate::access::cors::{CorsRule, requested_headers};
use crate::store::Catalog;

const NOT_ALLOWED: &str = "CORSResponse: This CORS request is not allowed. This is usually because the evalution of Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.";

/// What S3 varies a CORS answer on.
const VARY: &str = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method";

/// A refusal: status, S3 error code, message.
pub type Refusal = (StatusCode, &'static str, &'static str);

/// The answer to a preflight for `bucket` (None: the path names no bucket): the headers of a
/// 200, or S3's refusal.
pub fn preflight(catalog: &Catalog, bucket: Option<&str>, headers: &HeaderMap) -> Result<HeaderMap, Refusal> {
    let Some(origin) = header(headers, "origin") else {
        return Err((
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "Insufficient information. Origin request header needed.",
        ));
    };
    let Some(method) = header(headers, "access-control-request-method") else {
        return Err((
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "Invalid Access-Control-Request-Method: null",
        ));
    };
    let Some(bucket) = bucket else {
        return Err((StatusCode::FORBIDDEN, "AccessForbidden", NOT_ALLOWED));
    };
    // From the cache alone: an unsigned request never makes the gateway query the database.
    let Some(info) = catalog.cached_bucket(bucket) else {
        return Err((
            StatusCode::NOT_FOUND,
            "NoSuchBucket",
            "The specified bucket does not exist",
        ));
    };
    let Some(rules) = &info.access.cors else {
        return Err((
            StatusCode::FORBIDDEN,
            "AccessForbidden",
            "CORSResponse: CORS is not enabled for this bucket.",
        ));
    };
    let requested = header(headers, "access-control-request-headers").unwrap_or_default();
    let names = requested_headers(requested);
    let rule = rules
        .matching(origin, method, &names)
        .ok_or((StatusCode::FORBIDDEN, "AccessForbidden", NOT_ALLOWED))?;
    let mut out = HeaderMap::new();
    allow(&mut out, rule, origin);
    if !names.is_empty()
        && let Ok(value) = HeaderValue::from_str(&names.join(", ").to_ascii_lowercase())
    {
        out.insert("access-control-allow-headers", value);
    }
    Ok(out)
}

/// Adds S3's CORS headers to the response of a real request from `origin`, when a rule of
/// the bucket allows it.
pub fn decorate(catalog: &Catalog, bucket: &str, origin: &str, method: &Method, response: &mut HeaderMap) {
    let Some(info) = catalog.cached_bucket(bucket) else {
        return;
    };
    let Some(rules) = &info.access.cors else {
        return;
    };
    if let Some(rule) = rules.matching(origin, method.as_str(), &[]) {
        allow(response, rule, origin);
    }
}

/// The headers of an allowed CORS request.
fn allow(out: &mut HeaderMap, rule: &CorsRule, origin: &str) {
    let allow_origin = rule.allow_origin(origin);
    let mut put = |name: &'static str, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            out.insert(name, value);
        }
    };
    put("access-control-allow-origin", allow_origin);
    put("access-control-allow-methods", &rule.allowed_methods.join(", "));
    if !rule.expose_headers.is_empty() {
        put("access-control-expose-headers", &rule.expose_headers.join(", "));
    }
    if let Some(age) = rule.max_age_seconds {
        put("access-control-max-age", &age.to_string());
    }
    // S3 allows credentials unless the rule lets any origin in.
    if allow_origin != "*" {
        put("access-control-allow-credentials", "true");
    }
    put("vary", VARY);
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name)?.to_str().ok()
}
