//! Store errors as S3 errors: the codes and statuses S3 itself returns.

use s3s::{S3Error, S3ErrorCode};

use super::checksum::{CHUNK_SIGNATURE_MISMATCH, MALFORMED_TRAILER, PAYLOAD_SHA256_MISMATCH};
use crate::store::StoreError;

/// S3's message for a request body that stalled (400 RequestTimeout).
pub const REQUEST_TIMEOUT: &str = "Your socket connection to the server was not read from or written to within the timeout period. Idle connections will be closed.";

/// A request id, stamped on every response header and on errors raised by the front.
#[derive(Clone, Debug)]
pub struct RequestId(pub String);

/// The S3 error for a store error. A server fault is logged here, once, at error level, and
/// answered with S3's generic text: database and internal messages never reach the client.
/// Client faults are not logged (metrics count them): a client must not be able to fill the log.
pub fn s3_error(err: StoreError, request_id: Option<&RequestId>) -> S3Error {
    let (code, message) = code_of(&err, request_id);
    let mut error = S3Error::with_message(code.clone(), message);
    if let S3ErrorCode::Custom(_) = code {
        error.set_status_code(match err {
            StoreError::OriginTimeout(_) => http::StatusCode::GATEWAY_TIMEOUT,
            StoreError::OriginFailed(_) => http::StatusCode::BAD_GATEWAY,
            _ => http::StatusCode::BAD_REQUEST,
        });
    }
    if let Some(headers) = headers_of(&err) {
        error.set_headers(headers);
    }
    if let Some(RequestId(id)) = request_id {
        error.set_request_id(id.clone());
    }
    error
}

/// S3's code for a store error, and the message the client gets (S3's generic text for a
/// server fault, logged here; for a cache origin's failure, a fixed text naming its status and
/// code, its whole answer logged here with the request id).
fn code_of(err: &StoreError, request_id: Option<&RequestId>) -> (S3ErrorCode, String) {
    let mut message = err.to_string();
    let request_id = request_id.map_or("", |RequestId(id)| id.as_str());
    let code = match err {
        StoreError::NoSuchBucket => S3ErrorCode::NoSuchBucket,
        StoreError::NoSuchKey => S3ErrorCode::NoSuchKey,
        StoreError::BucketAlreadyExists => S3ErrorCode::BucketAlreadyExists,
        StoreError::BucketAlreadyOwnedByYou => S3ErrorCode::BucketAlreadyOwnedByYou,
        StoreError::BucketNotEmpty => S3ErrorCode::BucketNotEmpty,
        StoreError::InvalidBucketName => S3ErrorCode::InvalidBucketName,
        StoreError::KeyTooLong => S3ErrorCode::KeyTooLongError,
        StoreError::InvalidArgument(_) => S3ErrorCode::InvalidArgument,
        StoreError::AccessDenied | StoreError::ReadOnly => S3ErrorCode::AccessDenied,
        StoreError::InvalidRange { .. } => S3ErrorCode::InvalidRange,
        StoreError::BadDigest(msg) if msg == PAYLOAD_SHA256_MISMATCH => {
            S3ErrorCode::Custom("XAmzContentSHA256Mismatch".into())
        }
        StoreError::BadDigest(msg) if msg == CHUNK_SIGNATURE_MISMATCH => S3ErrorCode::SignatureDoesNotMatch,
        StoreError::BadDigest(msg) if msg == MALFORMED_TRAILER => S3ErrorCode::Custom("MalformedTrailerError".into()),
        StoreError::BadDigest(_) => S3ErrorCode::BadDigest,
        StoreError::IncompleteBody { .. } | StoreError::Body(_) => S3ErrorCode::IncompleteBody,
        StoreError::BodyTimeout(_) => S3ErrorCode::RequestTimeout,
        StoreError::Unavailable(_) | StoreError::CommitUnknown(_) => {
            // The loss of the database is logged once by its health check, not per request.
            tracing::debug!(error = %err, "database unavailable");
            message = "Service is unable to handle request.".into();
            S3ErrorCode::ServiceUnavailable
        }
        StoreError::NoSuchUpload => S3ErrorCode::NoSuchUpload,
        StoreError::InvalidPart(_) => S3ErrorCode::InvalidPart,
        StoreError::InvalidPartOrder => S3ErrorCode::InvalidPartOrder,
        StoreError::EntityTooSmall => S3ErrorCode::EntityTooSmall,
        // What S3 test suites expect of a `partNumber` past the object's part count (ceph's
        // s3-tests, as RGW answers): 400 InvalidPart.
        StoreError::InvalidPartNumber => S3ErrorCode::InvalidPart,
        StoreError::PreconditionFailed => S3ErrorCode::PreconditionFailed,
        StoreError::NotModified { .. } => S3ErrorCode::NotModified,
        StoreError::InvalidTag(_) => S3ErrorCode::InvalidTag,
        StoreError::NoSuchTagSet => S3ErrorCode::NoSuchTagSet,
        StoreError::OriginThrottled(fault) => {
            tracing::warn!(request_id, error = %fault.detail, "cache origin throttled");
            message = fault.said.clone();
            S3ErrorCode::SlowDown
        }
        StoreError::OriginTimeout(fault) => {
            tracing::error!(request_id, error = %fault.detail, "cache origin timed out");
            message = fault.said.clone();
            S3ErrorCode::Custom("GatewayTimeout".into())
        }
        StoreError::OriginDenied(fault) => {
            tracing::error!(request_id, error = %fault.detail, "cache origin refused the request");
            message = fault.said.clone();
            S3ErrorCode::AccessDenied
        }
        StoreError::OriginFailed(fault) => {
            tracing::error!(request_id, error = %fault.detail, "cache origin failed");
            message = fault.said.clone();
            S3ErrorCode::Custom("BadGateway".into())
        }
        // What MinIO answers (400) for a write beyond a bucket's hard quota; S3 has no quotas.
        StoreError::QuotaExceeded(_) => S3ErrorCode::Custom("XMinioAdminBucketQuotaExceeded".into()),
        StoreError::NotImplemented(_) => S3ErrorCode::NotImplemented,
        StoreError::NoSuchVersion => S3ErrorCode::NoSuchVersion,
        StoreError::InvalidRequest(_) => S3ErrorCode::InvalidRequest,
        StoreError::InvalidBucketState(_) => S3ErrorCode::InvalidBucketState,
        StoreError::ObjectLocked => S3ErrorCode::AccessDenied,
        StoreError::NoSuchObjectLockConfiguration => S3ErrorCode::NoSuchObjectLockConfiguration,
        StoreError::ObjectLockConfigurationNotFound => S3ErrorCode::ObjectLockConfigurationNotFoundError,
        StoreError::NoSuchLifecycleConfiguration => S3ErrorCode::NoSuchLifecycleConfiguration,
        StoreError::WrongCustomerKey(_) => S3ErrorCode::AccessDenied,
        StoreError::InvalidEncryptionAlgorithm => S3ErrorCode::InvalidEncryptionAlgorithmError,
        StoreError::NoEncryptionConfiguration => S3ErrorCode::ServerSideEncryptionConfigurationNotFoundError,
        StoreError::DeleteMarker { allowed: true, .. } => S3ErrorCode::NoSuchKey,
        StoreError::DeleteMarker { allowed: false, .. } => S3ErrorCode::MethodNotAllowed,
        // (Mispredicted: RESP scripts only; never an S3 request's.)
        StoreError::Corrupt(_) | StoreError::NotAKeyspace(_) | StoreError::Database(_) | StoreError::Mispredicted => {
            tracing::error!(error = ?err, "internal error");
            message = "We encountered an internal error. Please try again.".into();
            S3ErrorCode::InternalError
        }
    };
    (code, message)
}

/// The headers S3 answers a store error with, where it has any.
fn headers_of(err: &StoreError) -> Option<http::HeaderMap> {
    let mut headers = http::HeaderMap::new();
    match err {
        // A delete marker is named in its 404 or 405, as S3 does; the 405 of a marker read by
        // id carries its Last-Modified too.
        StoreError::DeleteMarker {
            version_id,
            last_modified,
            ..
        } => {
            headers.insert("x-amz-delete-marker", http::HeaderValue::from_static("true"));
            if let Ok(value) = http::HeaderValue::from_str(version_id) {
                headers.insert("x-amz-version-id", value);
            }
            if let Some(value) = last_modified.and_then(http_date) {
                headers.insert(http::header::LAST_MODIFIED, value);
            }
        }
        // A 304 carries no body, but names the version the client already has, as S3 does.
        StoreError::NotModified { etag, last_modified } => {
            if let Ok(value) = http::HeaderValue::from_str(&format!("\"{etag}\"")) {
                headers.insert(http::header::ETAG, value);
            }
            if let Some(value) = http_date(*last_modified) {
                headers.insert(http::header::LAST_MODIFIED, value);
            }
        }
        // Named in the 416's body by `error_body::complete`, which takes this header off.
        StoreError::InvalidRange { size } => {
            headers.insert(super::error_body::ACTUAL_OBJECT_SIZE, http::HeaderValue::from(*size));
        }
        _ => return None,
    }
    Some(headers)
}

/// A time as an HTTP date header value.
fn http_date(time: std::time::SystemTime) -> Option<http::HeaderValue> {
    let mut date = Vec::new();
    s3s::dto::Timestamp::from(time)
        .format(s3s::dto::TimestampFormat::HttpDate, &mut date)
        .ok()?;
    http::HeaderValue::from_bytes(&date).ok()
}
