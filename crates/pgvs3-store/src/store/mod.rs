//! The only module that knows the storage layout: buckets, objects, chunks, expiry.
//! Protocol fronts call it and never write SQL for objects themselves.

mod access;
mod access_logs;
mod bodies;
mod cache;
mod catalog;
mod catalog_entries;
mod catalog_misses;
mod chunks;
mod conditions;
mod copy;
mod encryption;
mod error;
mod key_lookups;
pub mod key_probes;
mod kv;
mod lifecycle;
mod listing;
mod lock;
mod md5_lanes;
mod multipart;
mod notifications;
mod objects;
mod origins;
mod put_lanes;
mod quotas;
mod reaper;
mod resp_acl;
#[cfg(test)]
mod row_reads;
mod share;
mod staging;
mod sts;
mod tagging;
mod types;
mod versions;

use std::sync::Arc;

use deadpool_postgres::Pool;

pub use access_logs::{Claim as AccessLogClaim, ClaimedRecords, LoggingConfig, MAX_QUEUED_RECORDS, PartitionDate};
pub use bodies::chunk_rows_statement;
pub use bodies::{check_length as check_declared_length, read_prefix};
pub(crate) use cache::held_body;
pub use cache::{CacheEntry, DueUpload, EntryHead, FillLock, RangeLookup, UploadLock, WriteEvent};
pub use catalog::{AccessKey, BucketInfo, BucketSummary, Catalog, NewAccessKey, NewBucket};
pub use chunks::CHUNK_SIZE;
pub use conditions::{DeleteCondition, EtagCondition, Preconditions, WriteCondition, as_copy_source_error};
pub use copy::CopySource;
pub use encryption::{
    CustomerKey, Mode as EncryptionMode, Requested as RequestedEncryption, Sealed as SealedEncryption,
};
pub use error::{OriginFault, StoreError};
pub use kv::{
    CommitSent, EncodingParameter, FunctionLibrary, KvBatch, KvEntry, KvValue, LibraryPolicy, LibraryRefusal,
    RegisteredFunction, StringForm, StringValue, Watches,
};
pub use lifecycle::{
    Expiration, LIFECYCLE_BATCH, Lifecycle, LifecycleRule, LifecycleStats, NoncurrentExpiration, RuleFilter,
};
pub use listing::{ListPage, ListRequest, ListedObject, MAX_KEYS as LIST_MAX_KEYS};
pub use lock::{DefaultRetention, LockConfig, LockMode, RequestedLock, Retention, RetentionPeriod, lock_missing};
pub use multipart::{
    CompletedPart, MultipartUpload, PartChecksums, PartInfo, PartOutcome, PartsPage, UploadChecksum, UploadParties,
    UploadsPage, UploadsRequest,
};
pub use notifications::{MAX_RULES as MAX_NOTIFICATION_RULES, NotificationRule, Notifications, RuleError};
pub use objects::{
    BodyObserver, BodyStream, ByteRange, INLINE_LIMIT, ObjectHead, ObjectMeta, ObjectRead, PutOutcome, ReadOptions,
    StoredBytes, StoredChecksum, Upload,
};
pub use origins::{CacheMode, Origin, OriginEntry};
pub use quotas::BucketQuota;
pub use reaper::ReapStats;
pub use resp_acl::RespAclUser;
pub use staging::BATCH_BYTES as UPLOAD_BATCH_BYTES;
pub use sts::{NewSession, RoleTrust, Session, is_session_key};
pub use tagging::{MAX_BUCKET_TAGS, MAX_OBJECT_TAGS, Tags, tag_set};
pub use types::{
    Borrowed, Committed, Cut, ElementWrites, Family, HashOp, HashWrite, KeyType, KeysOp, ListOp, ListWrite, Loaded,
    SetOp, SetWrite, Speculated, Speculation, SqlOp, StreamGroupOp, StreamId, StreamNode, StreamOp, StreamWrite,
    TypedCall, TypedRow, ZsetOp, ZsetWrite, sql_error_text,
};
pub use versions::{DeleteOutcome, VersionEntry, Versioning, VersionsPage, VersionsRequest, valid_version_id};

pub type StoreResult<T> = Result<T, StoreError>;

/// Who is asking: the access key that signed the request.
#[derive(Debug, Clone)]
pub struct Principal {
    pub access_key: String,
    pub is_root: bool,
    pub read_only: bool,
}

impl Principal {
    /// Whether `bucket` is this principal's own (a root key's are the buckets no key owns):
    /// another's bucket of the same name is `BucketAlreadyExists` to it, its own
    /// `BucketAlreadyOwnedByYou`.
    pub fn owns(&self, bucket: &BucketInfo) -> bool {
        match &bucket.owner {
            None => self.is_root,
            Some(owner) => *owner == self.access_key,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

#[derive(Clone)]
pub struct Store {
    pool: Pool,
    catalog: Arc<Catalog>,
    /// The connections streams (uploads' writes, downloads' reads) may hold at once.
    streams: share::StreamShare,
    /// How to reach the server to cancel a keyspace statement its caller abandoned (see
    /// `kv::abandon`); without it such a statement runs to its end.
    cancel: Option<crate::pg::connections::Connections>,
    /// Small PUTs that arrive together, committed together (put_lanes.rs).
    put_lanes: Arc<put_lanes::PutLanes>,
}

impl Store {
    pub fn new(pool: Pool, catalog: Arc<Catalog>) -> Store {
        let streams = share::StreamShare::of(&pool);
        Store {
            put_lanes: Arc::new(put_lanes::PutLanes::new(pool.clone())),
            pool,
            catalog,
            streams,
            cancel: None,
        }
    }

    /// Cancels keyspace statements whose caller goes away (a RESP client that disconnects, a
    /// command past its time limit) through `connections`' way of reaching the server.
    pub fn cancelling_with(mut self, connections: crate::pg::connections::Connections) -> Store {
        self.cancel = Some(connections);
        self
    }

    /// Exposes the store's counters (the catalog's, the write lanes') on `metrics`.
    pub fn register_metrics(&self, metrics: &crate::metrics::Metrics) {
        self.catalog.register_metrics(metrics);
        self.put_lanes.register_metrics(metrics);
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    async fn client(&self) -> StoreResult<deadpool_postgres::Object> {
        crate::pg::checkout::checkout(&self.pool)
            .await
            .map_err(StoreError::from)
    }
}
