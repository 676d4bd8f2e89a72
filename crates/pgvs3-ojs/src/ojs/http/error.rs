//! OJS error objects (`{"error": {...}}`) and their HTTP statuses: the binding's own refusals
//! (authentication, limits, admission) and, in [`From<EngineError>`], the one place an engine
//! error becomes a status and an OJS code.

use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use serde_json::{Value, json};

use super::super::engine::{EngineError, ErrorKind};
use super::{add_headers, json_response};

const DOCS_URL: &str = "https://openjobspec.org/spec/ojs-http-binding";

/// The error code of an enqueue refused by a queue's depth bound (ext-backpressure).
const QUEUE_FULL: &str = "QUEUE_FULL";
/// What a refused producer is told to wait, in seconds: a full queue drains at its workers' pace.
const QUEUE_FULL_RETRY_AFTER: &str = "5";

/// What a worker refused by its tenant's worker bound is told to wait, in seconds.
const TOO_MANY_WORKERS_RETRY_AFTER: &str = "60";

/// What a client turned away by admission control is told to wait, in seconds.
const OVERLOADED_RETRY_AFTER_SECONDS: i64 = 1;

/// An OJS error object and its HTTP status.
#[derive(Debug)]
pub struct OjsError {
    pub(super) status: StatusCode,
    pub(super) code: &'static str,
    kind: &'static str,
    pub(super) message: String,
    pub(super) retryable: bool,
    pub(super) details: Option<Value>,
    headers: Vec<(&'static str, String)>,
}

impl OjsError {
    pub(super) fn new(
        status: StatusCode,
        code: &'static str,
        kind: &'static str,
        message: impl Into<String>,
    ) -> OjsError {
        OjsError {
            status,
            code,
            kind,
            message: message.into(),
            retryable: false,
            details: None,
            headers: Vec::new(),
        }
    }

    /// Admission control turned the request away before reading it (more requests than the
    /// gateway serves at once, and its waiting line full or too slow).
    pub(super) fn overloaded() -> OjsError {
        let mut error = OjsError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "rate_limited",
            "this gateway is serving as many OJS requests as it can; retry after a second",
        )
        .with_details(json!({ "retry_after_seconds": OVERLOADED_RETRY_AFTER_SECONDS }));
        error.retryable = true;
        error.headers = vec![("retry-after", OVERLOADED_RETRY_AFTER_SECONDS.to_string())];
        error
    }

    /// A standby whose replay trails its primary by more than `--max-replication-lag` serves
    /// no reads: they could be arbitrarily stale.
    pub(super) fn lagging(lag: Duration, limit: Duration) -> OjsError {
        let mut error = OjsError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "backend_error",
            "backend_error",
            format!(
                "this gateway's standby is {:.1} s behind its primary (limit {:.1} s); read from another replica",
                lag.as_secs_f64(),
                limit.as_secs_f64()
            ),
        )
        .with_details(json!({ "lag_seconds": lag.as_secs_f64(), "limit_seconds": limit.as_secs_f64() }));
        error.retryable = true;
        error.headers = vec![("retry-after", "1".to_string())];
        error
    }

    /// A request whose body (and the JSON tree it makes) does not fit in what is left of the
    /// buffer budget: retryable, as the budget frees when other requests finish.
    pub(super) fn out_of_memory(bytes: u64) -> OjsError {
        let mut error = OjsError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "rate_limited",
            format!("this gateway's request memory (--buffer-budget) cannot hold this request's {bytes} bytes now; retry after a second"),
        )
        .with_details(json!({ "retry_after_seconds": OVERLOADED_RETRY_AFTER_SECONDS, "memory_bytes": bytes }));
        error.retryable = true;
        error.headers = vec![("retry-after", OVERLOADED_RETRY_AFTER_SECONDS.to_string())];
        error
    }

    /// A request that would need more memory than the whole buffer budget: never served.
    pub(super) fn beyond_memory(bytes: u64, budget: u64) -> OjsError {
        OjsError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_payload",
            "validation_error",
            format!("the request would take {bytes} bytes of memory to serve, more than this gateway's --buffer-budget ({budget})"),
        )
        .with_details(json!({ "memory_bytes": bytes, "buffer_budget_bytes": budget }))
    }

    /// A request body over `--ojs-max-body-bytes`, refused before the rest of it is read.
    pub(super) fn too_large(limit: u64) -> OjsError {
        OjsError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_payload",
            "validation_error",
            format!("the request body is over this server's limit of {limit} bytes"),
        )
        .with_details(json!({ "max_body_bytes": limit }))
    }

    pub fn invalid(message: impl Into<String>) -> OjsError {
        OjsError::new(StatusCode::BAD_REQUEST, "invalid_request", "validation_error", message)
    }

    /// A feature this server does not offer (the error catalog's `UNSUPPORTED_FEATURE`, 422),
    /// refused rather than ignored.
    pub fn unsupported(message: impl Into<String>) -> OjsError {
        OjsError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unsupported_feature",
            "unsupported_feature",
            message,
        )
    }

    pub fn not_found(message: impl Into<String>) -> OjsError {
        OjsError::new(StatusCode::NOT_FOUND, "not_found", "not_found", message)
    }

    /// Authenticated, but not allowed this (a tenant token outside its tenant or its routes).
    pub fn forbidden(message: impl Into<String>) -> OjsError {
        OjsError::new(StatusCode::FORBIDDEN, "forbidden", "forbidden", message)
    }

    /// The job store failed (the cause goes to the log).
    pub fn backend(err: impl std::fmt::Display) -> OjsError {
        EngineError::backend(err).into()
    }

    pub fn with_details(mut self, details: Value) -> OjsError {
        self.details = Some(details);
        self
    }

    pub(super) fn response(&self) -> Response<Full<Bytes>> {
        let mut response = json_response(self.status, &self.object());
        add_headers(response.headers_mut(), &self.headers);
        response
    }

    /// The wire form: `{"error": {...}}`.
    pub(super) fn object(&self) -> Value {
        let mut error = json!({
            "code": self.code,
            "type": self.kind,
            "message": self.message,
            "retryable": self.retryable,
            "hint": hint(self.code),
            "docs_url": DOCS_URL,
        });
        if let Some(details) = &self.details {
            error["details"] = details.clone();
        }
        json!({ "error": error })
    }
}

impl From<EngineError> for OjsError {
    fn from(error: EngineError) -> OjsError {
        let (status, code, kind) = match error.kind {
            ErrorKind::Invalid => (StatusCode::BAD_REQUEST, "invalid_request", "validation_error"),
            ErrorKind::Unprocessable => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", "validation_error"),
            ErrorKind::SchemaMismatch => (StatusCode::UNPROCESSABLE_ENTITY, "validation_error", "validation_error"),
            ErrorKind::InvalidWorkflow => (StatusCode::BAD_REQUEST, "invalid_workflow", "validation_error"),
            ErrorKind::NotFound => (StatusCode::NOT_FOUND, "not_found", "not_found"),
            ErrorKind::Conflict => (StatusCode::CONFLICT, "conflict", "conflict"),
            ErrorKind::Duplicate => (StatusCode::CONFLICT, "duplicate", "conflict"),
            ErrorKind::QueueFull { .. } => (StatusCode::TOO_MANY_REQUESTS, QUEUE_FULL, "backpressure"),
            ErrorKind::TooManyWorkers => (StatusCode::TOO_MANY_REQUESTS, "rate_limited", "rate_limited"),
            ErrorKind::ReadOnly => (StatusCode::SERVICE_UNAVAILABLE, "read_only", "read_only"),
            ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "backend_error", "backend_error"),
        };
        let mut answer = OjsError::new(status, code, kind, error.message);
        answer.details = error.details;
        match error.kind {
            // A full queue drains at its workers' pace: the producer is told when to come back.
            ErrorKind::QueueFull { depth, bound } => {
                answer.retryable = true;
                answer.headers = vec![
                    ("retry-after", QUEUE_FULL_RETRY_AFTER.to_string()),
                    ("x-ojs-queue-depth", depth.to_string()),
                    ("x-ojs-queue-bound", bound.to_string()),
                ];
            }
            // Room comes when a silent worker is reaped (after the job retention, 24 h by
            // default): a minute between tries costs nothing and finds it.
            ErrorKind::TooManyWorkers => {
                answer.retryable = true;
                answer.headers = vec![("retry-after", TOO_MANY_WORKERS_RETRY_AFTER.to_string())];
            }
            // A standby is promoted, or the client's next connection lands on the primary: the
            // same write may well succeed later.
            ErrorKind::Unavailable | ErrorKind::ReadOnly => answer.retryable = true,
            _ => {}
        }
        answer
    }
}

fn hint(code: &str) -> &'static str {
    match code {
        "invalid_request" | "invalid_payload" | "invalid_workflow" | "validation_error" => {
            "fix the request body as the message says and send it again"
        }
        "not_found" => "check the id; jobs are found by the id enqueue returned",
        "conflict" => "the job's state does not allow this; GET the job to see its state",
        "duplicate" => "use a new id, or GET the existing job",
        "read_only" => "send writes to a gateway bound to the primary",
        "unsupported_feature" => "use one of the alternatives the message names",
        QUEUE_FULL => "wait Retry-After seconds and enqueue again, or raise the queue's max_depth",
        "unauthenticated" => "send Authorization: Bearer <token>",
        "forbidden" => "send this token's own tenant in X-OJS-Tenant, or no X-OJS-Tenant",
        "rate_limited" => "wait Retry-After seconds and send the request again",
        _ => "retry with backoff",
    }
}
