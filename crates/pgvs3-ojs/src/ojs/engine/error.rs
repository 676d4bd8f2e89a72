//! What an engine operation refuses, or fails at: a kind, a message for the client, and
//! details. No HTTP here; `super::super::http::error` maps each kind to its status and OJS code.

use serde_json::{Value, json};
use tokio_postgres::error::SqlState;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// A value of the request is malformed or out of range.
    Invalid,
    /// Well-formed but refused (retry policy values).
    Unprocessable,
    /// Job arguments that do not match their type's registered schema, or a schema version
    /// that breaks the one before it (ext-schema-registry); details say how.
    SchemaMismatch,
    /// A workflow definition is malformed; details carry the path of the fault.
    InvalidWorkflow,
    NotFound,
    /// The job's or workflow's state does not allow this now.
    Conflict,
    /// An id or unique key already taken.
    Duplicate,
    /// A queue at its depth bound refuses the enqueue (ext-backpressure, reject strategy).
    QueueFull {
        depth: i64,
        bound: i64,
    },
    /// A tenant at its bound of registered workers refuses a new worker id.
    TooManyWorkers,
    /// The database is a read-only standby.
    ReadOnly,
    /// The database cannot be reached or failed; worth a retry.
    Unavailable,
}

#[derive(Debug)]
pub struct EngineError {
    pub kind: ErrorKind,
    pub message: String,
    pub details: Option<Value>,
}

impl EngineError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> EngineError {
        EngineError {
            kind,
            message: message.into(),
            details: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> EngineError {
        EngineError::new(ErrorKind::Invalid, message)
    }

    pub fn unprocessable(message: impl Into<String>) -> EngineError {
        EngineError::new(ErrorKind::Unprocessable, message)
    }

    pub fn not_found(message: impl Into<String>) -> EngineError {
        EngineError::new(ErrorKind::NotFound, message)
    }

    pub fn job_not_found(id: &str) -> EngineError {
        EngineError::not_found(format!("job {id} not found"))
    }

    pub fn conflict(message: impl Into<String>) -> EngineError {
        EngineError::new(ErrorKind::Conflict, message)
    }

    pub fn duplicate(message: impl Into<String>) -> EngineError {
        EngineError::new(ErrorKind::Duplicate, message)
    }

    pub fn queue_full(queue: &str, depth: i64, bound: i64) -> EngineError {
        EngineError::new(
            ErrorKind::QueueFull { depth, bound },
            format!("queue {queue:?} has reached its depth bound ({bound})"),
        )
        .with_details(json!({ "queue": queue, "depth": depth, "bound": bound, "strategy": "reject" }))
    }

    pub fn too_many_workers(tenant: &str, bound: i64) -> EngineError {
        EngineError::new(
            ErrorKind::TooManyWorkers,
            format!(
                "tenant {tenant:?} has {bound} workers registered, its bound (--ojs-max-workers-per-tenant): \
                 a new worker id is taken once a worker silent for the job retention is removed; \
                 registered workers keep sending heartbeats"
            ),
        )
        .with_details(json!({ "tenant_id": tenant, "max_workers": bound }))
    }

    pub fn with_details(mut self, details: Value) -> EngineError {
        self.details = Some(details);
        self
    }

    /// The job store failed; the cause goes to the log, not to the client.
    pub fn backend(err: impl std::fmt::Display) -> EngineError {
        tracing::warn!(error = %err, "OJS backend unavailable");
        EngineError::new(ErrorKind::Unavailable, "the job store is unavailable; retry later")
    }

    /// A statement's failure: the client's when PostgreSQL refused one of its values, the
    /// store's otherwise.
    pub fn sql(err: tokio_postgres::Error) -> EngineError {
        let said = || err.as_db_error().map_or("", |db| db.message()).to_string();
        match err.code() {
            Some(&SqlState::READ_ONLY_SQL_TRANSACTION) => EngineError::new(
                ErrorKind::ReadOnly,
                "this gateway is bound to a read-only PostgreSQL standby: reads work, writes must go to a gateway on the primary",
            ),
            Some(&SqlState::INVALID_DATETIME_FORMAT)
            | Some(&SqlState::DATETIME_FIELD_OVERFLOW)
            | Some(&SqlState::INVALID_TIME_ZONE_DISPLACEMENT_VALUE) => {
                EngineError::invalid(format!("invalid timestamp: {}", said()))
            }
            // jsonb refuses the escape \u0000, text columns the byte 0x00.
            Some(&SqlState::UNTRANSLATABLE_CHARACTER) | Some(&SqlState::CHARACTER_NOT_IN_REPERTOIRE) => {
                EngineError::invalid("strings cannot hold the NUL character (\\u0000)")
            }
            // Class 22 (data exception): a value from the request that PostgreSQL cannot hold,
            // such as a time or number out of range. The client's to fix, never worth a retry.
            Some(state) if state.code().starts_with("22") => EngineError::invalid(format!(
                "a value in the request is out of range or malformed: {}",
                said()
            )),
            // A client string too long to index (a worker id of kilobytes, say).
            Some(&SqlState::PROGRAM_LIMIT_EXCEEDED) => {
                EngineError::invalid(format!("a value in the request is too large: {}", said()))
            }
            _ => EngineError::backend(err),
        }
    }
}
