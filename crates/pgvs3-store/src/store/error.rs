use std::fmt;

use super::StoreResult;

/// A cache origin's failure, told twice. `said` is all an S3 client hears: a fixed text naming at
/// most the origin's HTTP status and error code. `detail` is for the log and the operator
/// (`admin origin put`): the origin's endpoint and the HTTP client's account of its answer, which
/// carries every response header and the raw body (an AWS SignatureDoesNotMatch body holds the
/// string to sign, the canonical request and the access key id).
#[derive(Debug, Clone)]
pub struct OriginFault {
    pub said: String,
    pub detail: String,
}

impl OriginFault {
    /// A fault whose one text holds nothing of the origin's (both sides hear it).
    pub fn plain(text: impl Into<String>) -> OriginFault {
        let said = text.into();
        OriginFault {
            detail: said.clone(),
            said,
        }
    }
}

/// What can go wrong in the store, in terms every protocol front can map to its own errors.
#[derive(Debug)]
pub enum StoreError {
    NoSuchBucket,
    NoSuchKey,
    BucketAlreadyExists,
    BucketAlreadyOwnedByYou,
    BucketNotEmpty,
    InvalidBucketName,
    KeyTooLong,
    InvalidArgument(String),
    AccessDenied,
    /// The server is a hot standby: writes are refused.
    ReadOnly,
    InvalidRange {
        size: u64,
    },
    /// The body's digest differs from the one the client declared.
    BadDigest(String),
    /// The body ended before (or ran past) its declared length.
    IncompleteBody {
        expected: u64,
        received: u64,
    },
    /// The client's body stream failed (disconnect, bad framing, bad chunk signature).
    Body(String),
    /// The client stopped sending its body for longer than the body idle timeout.
    BodyTimeout(String),
    /// A stored body is damaged (missing or undecodable chunk).
    Corrupt(String),
    Database(tokio_postgres::Error),
    Unavailable(String),
    /// The connection was lost after a write's COMMIT was sent: it may or may not have been
    /// applied (see `kv/commit_sent.rs`).
    CommitUnknown(String),
    /// A speculated typed call answered otherwise than the working set had predicted
    /// (`pgvs3.resp_expect`): its transaction is rolled back, and the run starts over.
    Mispredicted,
    NoSuchUpload,
    /// A part named in a completion is missing or has another ETag.
    InvalidPart(String),
    /// The part list of a completion is not in ascending order.
    InvalidPartOrder,
    /// A part other than the last is smaller than the 5 MiB minimum.
    EntityTooSmall,
    /// A `partNumber` read names a part the object does not have.
    InvalidPartNumber,
    /// A conditional request's precondition does not hold (HTTP 412).
    PreconditionFailed,
    /// A conditional read's object has not changed (HTTP 304, which still names the version).
    NotModified {
        etag: String,
        last_modified: std::time::SystemTime,
    },
    InvalidTag(String),
    /// The bucket has no tags.
    NoSuchTagSet,
    /// A cache bucket's origin throttled the request.
    OriginThrottled(OriginFault),
    /// A cache bucket's origin did not answer in time.
    OriginTimeout(OriginFault),
    /// A cache bucket's origin refused the cache's credentials.
    OriginDenied(OriginFault),
    /// A cache bucket's origin could not be reached or failed.
    OriginFailed(OriginFault),
    /// The write would take the bucket past its quota (bytes or objects); nothing was written.
    QuotaExceeded(String),
    /// An operation this kind of bucket does not offer (answered, never pretended).
    NotImplemented(String),
    /// A RESP database mapped to a bucket RESP cannot serve (a cache or versioned bucket).
    NotAKeyspace(String),
    /// The version named does not exist.
    NoSuchVersion,
    /// The version read is a delete marker: the latest one (`allowed`: the key reads as
    /// missing, 404) or one named by id (405, a marker has no body).
    DeleteMarker {
        version_id: String,
        allowed: bool,
        /// When the marker was written, where S3 names it (a GET or HEAD of the marker by id).
        last_modified: Option<std::time::SystemTime>,
    },
    /// A request S3 answers with 400 InvalidRequest (e.g. a lock on a bucket without one).
    InvalidRequest(String),
    /// The bucket's state forbids the change (409), e.g. suspending versioning under object lock.
    InvalidBucketState(String),
    /// Object lock protects the version from this request.
    ObjectLocked,
    /// The version has no retention (or no legal hold) to read.
    NoSuchObjectLockConfiguration,
    /// The bucket has no object lock configuration to read.
    ObjectLockConfigurationNotFound,
    /// The bucket has no lifecycle configuration to read.
    NoSuchLifecycleConfiguration,
    /// SSE-C: the key offered is not the one the object was stored with (403).
    WrongCustomerKey(String),
    /// An encryption algorithm other than AES256.
    InvalidEncryptionAlgorithm,
    /// The bucket has no default encryption configuration.
    NoEncryptionConfiguration,
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NoSuchBucket => f.write_str("the specified bucket does not exist"),
            StoreError::NoSuchKey => f.write_str("the specified key does not exist"),
            StoreError::BucketAlreadyExists => f.write_str("the requested bucket name is not available"),
            StoreError::BucketAlreadyOwnedByYou => f.write_str("you already own this bucket"),
            StoreError::BucketNotEmpty => f.write_str("the bucket you tried to delete is not empty"),
            StoreError::InvalidBucketName => f.write_str("the specified bucket is not valid"),
            StoreError::KeyTooLong => f.write_str("your key is too long (the limit is 1024 bytes)"),
            StoreError::AccessDenied => f.write_str("access denied"),
            StoreError::ReadOnly => f.write_str("this gateway is bound to a read-only (standby) database"),
            StoreError::InvalidRange { size } => {
                write!(f, "the requested range is not satisfiable (object size {size})")
            }
            StoreError::InvalidArgument(msg)
            | StoreError::BadDigest(msg)
            | StoreError::Body(msg)
            | StoreError::BodyTimeout(msg)
            | StoreError::Corrupt(msg) => f.write_str(msg),
            StoreError::IncompleteBody { expected, received } => {
                write!(f, "the body had {received} bytes but {expected} were declared")
            }
            StoreError::Database(err) => match err.as_db_error() {
                Some(db) => write!(f, "database error: {} ({})", db.message(), db.code().code()),
                None => write!(f, "database error: {err}"),
            },
            StoreError::Unavailable(msg) => write!(f, "database unavailable: {msg}"),
            StoreError::CommitUnknown(msg) => write!(
                f,
                "the connection to the database was lost after COMMIT was sent ({msg}): \
                 the write may or may not have been applied"
            ),
            StoreError::Mispredicted => f.write_str("a speculated call answered otherwise than predicted"),
            StoreError::NoSuchUpload => f.write_str(
                "the specified multipart upload does not exist: the upload ID may be invalid, \
                 or the upload may have been aborted or completed",
            ),
            StoreError::InvalidPart(msg) | StoreError::InvalidTag(msg) => f.write_str(msg),
            StoreError::NoSuchTagSet => f.write_str("the TagSet does not exist"),
            StoreError::InvalidPartOrder => f.write_str("the list of parts was not in ascending order"),
            StoreError::EntityTooSmall => f.write_str("your proposed upload is smaller than the minimum allowed size"),
            StoreError::InvalidPartNumber => f.write_str("the requested partnumber is not satisfiable"),
            StoreError::PreconditionFailed => {
                f.write_str("at least one of the preconditions you specified did not hold")
            }
            StoreError::NotModified { .. } => f.write_str("not modified"),
            StoreError::OriginThrottled(fault)
            | StoreError::OriginTimeout(fault)
            | StoreError::OriginDenied(fault)
            | StoreError::OriginFailed(fault) => f.write_str(&fault.detail),
            StoreError::QuotaExceeded(usage) => write!(f, "bucket quota exceeded ({usage})"),
            StoreError::NotImplemented(msg) | StoreError::InvalidRequest(msg) | StoreError::InvalidBucketState(msg) => {
                f.write_str(msg)
            }
            StoreError::ObjectLocked => f.write_str("Access Denied because object protected by object lock."),
            StoreError::NoSuchObjectLockConfiguration => {
                f.write_str("The specified object does not have a ObjectLock configuration")
            }
            StoreError::ObjectLockConfigurationNotFound => {
                f.write_str("Object Lock configuration does not exist for this bucket")
            }
            StoreError::NoSuchLifecycleConfiguration => f.write_str("The lifecycle configuration does not exist"),
            StoreError::WrongCustomerKey(msg) => f.write_str(msg),
            StoreError::InvalidEncryptionAlgorithm => {
                f.write_str("The Encryption request you specified is not valid. Supported value: AES256.")
            }
            StoreError::NoEncryptionConfiguration => {
                f.write_str("The server side encryption configuration was not found")
            }
            StoreError::NotAKeyspace(msg) => f.write_str(msg),
            StoreError::NoSuchVersion => f.write_str("the specified version does not exist"),
            StoreError::DeleteMarker { allowed: true, .. } => f.write_str("the specified key does not exist"),
            StoreError::DeleteMarker { allowed: false, .. } => {
                f.write_str("the specified method is not allowed against this resource")
            }
        }
    }
}

impl std::error::Error for StoreError {}

impl StoreError {
    /// This error (one that befell a whole batch of writes) for each write in the batch.
    pub fn shared(&self) -> StoreError {
        match self {
            StoreError::ReadOnly => StoreError::ReadOnly,
            StoreError::NoSuchBucket => StoreError::NoSuchBucket,
            StoreError::QuotaExceeded(usage) => StoreError::QuotaExceeded(usage.clone()),
            StoreError::CommitUnknown(why) => StoreError::CommitUnknown(why.clone()),
            _ => StoreError::Unavailable(self.to_string()),
        }
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(err: tokio_postgres::Error) -> Self {
        // 25006: read_only_sql_transaction — what a hot standby answers to any write.
        if err.code() == Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION) {
            return StoreError::ReadOnly;
        }
        // The usage trigger of a bucket with a quota refuses the statement that would exceed it.
        if let Some(db) = err.as_db_error()
            && db.hint() == Some("QuotaExceeded")
        {
            return StoreError::QuotaExceeded(db.detail().unwrap_or_default().to_string());
        }
        // A speculated call whose answer was not the predicted one: its transaction aborted.
        if err.as_db_error().and_then(|db| db.hint()) == Some("Mispredicted") {
            return StoreError::Mispredicted;
        }
        // A write whose bucket was dropped under it (a RESP batch's `resp_hold_keyspace`).
        if err.as_db_error().and_then(|db| db.hint()) == Some("NoSuchBucket") {
            return StoreError::NoSuchBucket;
        }
        // Text PostgreSQL cannot hold (a NUL character) is the client's error, whichever value
        // carried it; its message stays in the log, not in the answer.
        if matches!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::CHARACTER_NOT_IN_REPERTOIRE)
                | Some(&tokio_postgres::error::SqlState::UNTRANSLATABLE_CHARACTER)
        ) {
            tracing::debug!(error = %err, "the database refused a request value");
            return StoreError::InvalidArgument("the request contains a character that cannot be stored".into());
        }
        // The server refusing this gateway a new connection (a rotated password, max_connections)
        // is the service's state, not the request's fault: 503, which clients retry.
        if is_connection_loss(&err) || crate::pg::checkout::refuses_new_connection(&err) {
            return StoreError::Unavailable(err.to_string());
        }
        StoreError::Database(err)
    }
}

/// The database went away (restart, failover, network): the request may be retried, unlike a
/// genuine error in it. The pool replaces closed connections on their next use.
fn is_connection_loss(err: &tokio_postgres::Error) -> bool {
    if err.is_closed() {
        return true;
    }
    if let Some(code) = err.code() {
        // Class 08: connection exception; 57P01-57P03: admin/crash shutdown, cannot connect now.
        let code = code.code();
        return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03");
    }
    // No SQLSTATE: the failure happened below the protocol (connect refused, socket closed).
    std::error::Error::source(err).is_some_and(|source| source.is::<std::io::Error>())
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(err: deadpool_postgres::PoolError) -> Self {
        match err {
            deadpool_postgres::PoolError::Backend(err) => StoreError::from(err),
            other => StoreError::Unavailable(other.to_string()),
        }
    }
}

impl StoreError {
    /// PostgreSQL aborted the transaction for a conflict with a concurrent one (a serialization
    /// failure or a deadlock it broke): the same transaction may simply run again.
    fn is_transaction_conflict(&self) -> bool {
        use tokio_postgres::error::SqlState;
        matches!(self, StoreError::Database(err)
            if matches!(err.code(), Some(&SqlState::T_R_SERIALIZATION_FAILURE) | Some(&SqlState::T_R_DEADLOCK_DETECTED)))
    }
}

/// How many times a transaction runs before its conflict is reported.
const CONFLICT_ATTEMPTS: u32 = 5;

/// Runs `transaction` again (a bounded number of times) while PostgreSQL aborts it for a conflict
/// with a concurrent one, so the client sees the outcome, not a 500 for a race it cannot fix.
pub(super) async fn retry_conflicts<T, F, Fut>(mut transaction: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<T>>,
{
    let mut attempt = 1;
    loop {
        match transaction().await {
            Err(err) if err.is_transaction_conflict() && attempt < CONFLICT_ATTEMPTS => {
                tracing::debug!(error = %err, attempt, "transaction conflict: running it again");
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}
