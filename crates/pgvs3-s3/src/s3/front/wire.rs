//! What the operation families share: errors as S3 answers them, the decision left to an
//! object's row, and the conversions of wire fields every family reads or writes. The macros
//! read fields that several s3s input and output types have under the same names.

use std::time::SystemTime;

use s3s::dto::*;
use s3s::{S3Error, S3Request, S3Result};

use crate::s3::authorize::PolicyGrant;
use crate::s3::errors::{RequestId, s3_error};
use crate::store::{self, ObjectMeta, Principal, StoreError, WriteCondition};

pub(super) fn fail<T>(req: &S3Request<T>, err: StoreError) -> S3Error {
    s3_error(err, req.extensions.get::<RequestId>())
}

/// A missing object is AccessDenied where the request's grant says S3 would not tell (see
/// `PolicyGrant::hides_missing` and `PolicyGrant::refuses_missing`).
pub(super) fn missing<T>(req: &S3Request<T>, err: StoreError) -> StoreError {
    let hidden = |grant: &PolicyGrant| grant.hides_missing() || grant.refuses_missing(&req.headers, req.uri.query());
    match err {
        StoreError::NoSuchKey if req.extensions.get::<PolicyGrant>().is_some_and(hidden) => StoreError::AccessDenied,
        err => err,
    }
}

/// Decides, on the object's row (`meta`, the version the request names), what the access
/// check left to it: the object's ACL or tags (see `PolicyGrant::object_allows`).
pub(super) fn row_allows<T>(req: &S3Request<T>, meta: &ObjectMeta) -> S3Result<()> {
    let allows =
        |grant: &PolicyGrant| grant.object_allows(&req.headers, req.uri.query(), meta.acl.as_ref(), &meta.tags);
    match req.extensions.get::<PolicyGrant>().is_none_or(allows) {
        true => Ok(()),
        false => Err(s3s::s3_error!(AccessDenied, "Access Denied")),
    }
}

pub(super) fn timestamp(time: SystemTime) -> Timestamp {
    Timestamp::from(time)
}

pub(super) fn owner(principal: &Principal) -> Owner {
    Owner {
        id: Some(principal.access_key.clone()),
        display_name: Some(principal.access_key.clone()),
    }
}

pub(super) fn to_system_time(time: &Option<Timestamp>) -> Option<SystemTime> {
    time.clone().map(|time| time::OffsetDateTime::from(time).into())
}

pub(super) fn to_etag_condition(condition: &Option<ETagCondition>) -> Option<store::EtagCondition> {
    condition.as_ref().map(|condition| match condition.as_etag() {
        Some(etag) => store::EtagCondition::Tag(etag.value().to_owned()),
        None => store::EtagCondition::Any,
    })
}

/// The condition of a write: `If-None-Match: *` creates only, `If-Match: <etag>` compares and
/// swaps (`If-Match: *` replaces only an existing object), `If-None-Match: <etag>` writes unless
/// the stored object has that ETag. Each is checked atomically with the write.
pub(super) fn write_condition(
    if_match: &Option<ETagCondition>,
    if_none_match: &Option<ETagCondition>,
) -> S3Result<WriteCondition> {
    match (if_match, if_none_match) {
        (None, None) => Ok(WriteCondition::Always),
        (None, Some(condition)) => Ok(match condition.as_etag() {
            Some(etag) => WriteCondition::if_none_match(etag.value()),
            None => WriteCondition::IfAbsent,
        }),
        (Some(condition), None) => Ok(match condition.as_etag() {
            Some(etag) => WriteCondition::if_match(etag.value()),
            None => WriteCondition::IfMatch("*".into()),
        }),
        (Some(_), Some(_)) => Err(s3s::s3_error!(
            NotImplemented,
            "If-Match and If-None-Match cannot both be set on a write"
        )),
    }
}

/// The destination's `If-Match` / `If-None-Match` of a request whose s3s input has no field for
/// them (CopyObject: AWS's conditional copies), read from its headers as s3s reads PutObject's.
pub(super) fn header_write_condition(headers: &http::HeaderMap) -> S3Result<WriteCondition> {
    let read = |name: http::HeaderName| -> S3Result<Option<ETagCondition>> {
        headers
            .get(&name)
            .map(|value| {
                ETagCondition::parse_http_header(value.as_bytes())
                    .map_err(|_| s3s::s3_error!(InvalidArgument, "invalid header: {}: {:?}", name.as_str(), value))
            })
            .transpose()
    };
    write_condition(&read(http::header::IF_MATCH)?, &read(http::header::IF_NONE_MATCH)?)
}

/// The part number of a read, as S3 checks it.
pub(super) fn part_number(number: Option<i32>) -> S3Result<Option<u32>> {
    match number {
        None => Ok(None),
        Some(n) if (1..=10_000).contains(&n) => Ok(Some(n as u32)),
        Some(_) => Err(s3s::s3_error!(
            InvalidArgument,
            "Part number must be an integer between 1 and 10000, inclusive"
        )),
    }
}

/// The metadata a write declares (PutObject, CreateMultipartUpload, CopyObject's REPLACE).
macro_rules! meta_from_input {
    ($input:expr, $headers:expr) => {{
        let input = &$input;
        $crate::store::ObjectMeta {
            content_type: input.content_type.clone(),
            content_encoding: $crate::s3::front::wire::stored_encoding(&input.content_encoding),
            content_disposition: input.content_disposition.clone(),
            content_language: input.content_language.clone(),
            cache_control: input.cache_control.clone(),
            expires: $headers
                .get(http::header::EXPIRES)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            user: input
                .metadata
                .iter()
                .flatten()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                .collect(),
            checksum: None,
            parts: None,
            tags: Default::default(),
            retention: None,
            legal_hold: None,
            encryption: None,
            acl: None,
            upload_checksum: None,
        }
    }};
}

/// The Content-Encoding kept with an object: the client's, without `aws-chunked` (which only
/// framed the upload), as S3 stores it.
pub(super) fn stored_encoding(encoding: &Option<String>) -> Option<String> {
    let kept: Vec<&str> = encoding
        .as_deref()?
        .split(',')
        .map(str::trim)
        .filter(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// The lock a write's `x-amz-object-lock-*` fields ask for.
macro_rules! requested_lock {
    ($input:expr) => {{
        let input = &$input;
        $crate::s3::front::lock::requested_lock(
            &input.object_lock_mode,
            &input.object_lock_retain_until_date,
            &input.object_lock_legal_hold_status,
        )
    }};
}

/// The SSE-C fields of an input, as `encryption::CustomerFields`.
macro_rules! customer_fields {
    ($input:expr) => {
        $crate::s3::front::encryption::CustomerFields {
            algorithm: $input.sse_customer_algorithm.as_deref(),
            key: $input.sse_customer_key.as_deref(),
            key_md5: $input.sse_customer_key_md5.as_deref(),
        }
    };
}

/// The encryption a write's input asks for (SSE-S3, SSE-C, or SSE-KMS refused).
macro_rules! requested_encryption {
    ($req:expr, $input:expr) => {
        $crate::s3::front::encryption::requested(
            &$req,
            $input.server_side_encryption.as_ref(),
            $input.ssekms_key_id.as_deref(),
            customer_fields!($input),
        )
    };
}

/// Sets the SSE headers of a write's answer.
macro_rules! set_encryption {
    ($output:expr, $answer:expr) => {{
        let answer: $crate::s3::front::encryption::Answer = $answer;
        $output.server_side_encryption = answer.sse;
        $output.sse_customer_algorithm = answer.customer_algorithm;
        $output.sse_customer_key_md5 = answer.customer_key_md5;
    }};
}

/// Sets the checksum field of a write's answer; yields the checksum type to report with it.
macro_rules! set_checksum {
    ($output:expr, $checksum:expr) => {{
        let mut kind = None;
        if let Some(stored) = $checksum
            && let Some(alg) = $crate::s3::checksum::Algorithm::from_name(&stored.algorithm)
        {
            use $crate::s3::checksum::Algorithm;
            let value = Some(stored.value);
            match alg {
                Algorithm::Crc32 => $output.checksum_crc32 = value,
                Algorithm::Crc32c => $output.checksum_crc32c = value,
                Algorithm::Crc64Nvme => $output.checksum_crc64nvme = value,
                Algorithm::Sha1 => $output.checksum_sha1 = value,
                Algorithm::Sha256 => $output.checksum_sha256 = value,
            }
            kind = Some($crate::s3::multipart_checksum::checksum_type(!stored.composite));
        }
        kind
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_chunked_framing_is_not_kept_as_the_content_encoding() {
        let stored = |text: &str| stored_encoding(&Some(text.to_owned()));
        assert_eq!(stored("gzip, aws-chunked").as_deref(), Some("gzip"));
        assert_eq!(stored("aws-chunked,gzip").as_deref(), Some("gzip"));
        assert_eq!(stored("aws-chunked"), None);
        assert_eq!(stored("gzip, br").as_deref(), Some("gzip, br"));
        assert_eq!(stored_encoding(&None), None);
    }
}
