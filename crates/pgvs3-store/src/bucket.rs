//! A request's bucket, resolved once: the access key's right to it checked, its kind known,
//! and the one object API every protocol front calls. This is the only place that decides what
//! a bucket's kind means for an operation: a plain bucket's objects live in its namespace
//! (`store`), a cache bucket's are served by the cache tier in front of its origin (`cache`),
//! and a RESP keyspace must be a plain bucket. Fronts map wire types in and out and never
//! branch on the kind themselves.

use std::sync::Arc;

use crate::cache::CacheTier;
use crate::store::{
    Access, BodyObserver, BucketInfo, ByteRange, CacheMode, Catalog, CompletedPart, CopySource, CustomerKey,
    DeleteCondition, DeleteOutcome, KvBatch, Lifecycle, ListPage, ListRequest, LockConfig, Notifications, ObjectMeta,
    ObjectRead, PartChecksums, PartOutcome, PartsPage, Preconditions, Principal, PutOutcome, ReadOptions,
    RequestedEncryption, RequestedLock, Retention, Store, StoreError, StoreResult, StoredBytes, Tags, Upload,
    UploadsPage, UploadsRequest, VersionEntry, Versioning, VersionsPage, VersionsRequest, WriteCondition,
    valid_version_id,
};

/// Opens buckets for requests: the store and the cache tier behind every bucket handle.
#[derive(Clone)]
pub struct Buckets {
    store: Store,
    cache: CacheTier,
}

/// What a bucket is, as far as its objects are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BucketKind {
    /// Objects live in the bucket's namespace in PostgreSQL.
    Plain,
    /// A cache bucket in front of a remote S3 bucket, in this mode.
    Cache(CacheMode),
}

impl Buckets {
    pub fn new(store: Store, cache: CacheTier) -> Buckets {
        Buckets { store, cache }
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        self.store.catalog()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Resolves the bucket `name` for `principal`, who must be allowed to use it as `access`
    /// says: the one authorization of a request. The bucket comes from the catalog cache (one
    /// map lookup) unless this gateway has not seen it yet.
    pub async fn open(&self, principal: &Principal, name: &str, access: Access) -> StoreResult<BucketHandle<'_>> {
        self.open_granted(principal, name, access, false).await
    }

    /// [`Buckets::open`] for a request the bucket's policy allowed (`granted`; the S3 front
    /// evaluates policies before admission): a key that does not own the bucket may use it
    /// then. A read-only key stays read-only whatever a policy says.
    pub async fn open_granted(
        &self,
        principal: &Principal,
        name: &str,
        access: Access,
        granted: bool,
    ) -> StoreResult<BucketHandle<'_>> {
        if access == Access::Write && principal.read_only {
            return Err(StoreError::AccessDenied);
        }
        let info = self.store.catalog().bucket(name).await?;
        self.open_resolved(principal, info, access, granted)
    }

    /// [`Buckets::open_granted`] for a bucket the request already resolved (the S3 access
    /// check looks it up before admission; it is not looked up again).
    pub fn open_resolved(
        &self,
        principal: &Principal,
        info: Arc<BucketInfo>,
        access: Access,
        granted: bool,
    ) -> StoreResult<BucketHandle<'_>> {
        if access == Access::Write && principal.read_only {
            return Err(StoreError::AccessDenied);
        }
        if !granted && !principal.is_root && info.owner.as_deref() != Some(principal.access_key.as_str()) {
            return Err(StoreError::AccessDenied);
        }
        Ok(BucketHandle {
            buckets: self,
            info,
            access,
        })
    }
}

/// The encryption of a copy: the SSE-C key of its source (`x-amz-copy-source-server-side-
/// encryption-customer-*`) and what its own request asks for.
#[derive(Debug, Default)]
pub struct CopyEncryption {
    pub source_key: Option<CustomerKey>,
    pub target: RequestedEncryption,
}

/// An authorized bucket and the object API on it. Opened for reading, it refuses writes.
pub struct BucketHandle<'a> {
    buckets: &'a Buckets,
    info: Arc<BucketInfo>,
    access: Access,
}

impl<'a> BucketHandle<'a> {
    pub fn name(&self) -> &str {
        &self.info.name
    }

    pub fn kind(&self) -> BucketKind {
        match &self.info.origin {
            Some(origin) => BucketKind::Cache(origin.mode),
            None => BucketKind::Plain,
        }
    }

    fn store(&self) -> &'a Store {
        &self.buckets.store
    }

    fn cache(&self) -> Option<&'a CacheTier> {
        self.info.origin.is_some().then_some(&self.buckets.cache)
    }

    fn writable(&self) -> StoreResult<()> {
        match self.access {
            Access::Write => Ok(()),
            Access::Read => Err(StoreError::AccessDenied),
        }
    }

    pub fn versioning(&self) -> Option<Versioning> {
        self.info.versioning
    }

    /// The encryption a new object here gets: what its request asks for, else the bucket's
    /// default. Cache buckets refuse it: their bodies are the origin's bytes.
    fn encryption_of(&self, requested: RequestedEncryption) -> StoreResult<RequestedEncryption> {
        let requested = match requested {
            RequestedEncryption::None if self.info.default_encryption => RequestedEncryption::S3,
            requested => requested,
        };
        if self.info.origin.is_some() && !matches!(requested, RequestedEncryption::None) {
            return Err(StoreError::NotImplemented(
                "Server-side encryption is not implemented for cache buckets: their objects are the origin's".into(),
            ));
        }
        Ok(requested)
    }

    /// Whether new objects here are encrypted with SSE-S3 unless they ask otherwise.
    pub fn default_encryption(&self) -> bool {
        self.info.default_encryption
    }

    pub async fn set_default_encryption(&self, on: bool) -> StoreResult<()> {
        self.writable()?;
        if self.info.origin.is_some() && on {
            return Err(StoreError::NotImplemented(
                "Server-side encryption is not implemented for cache buckets: their objects are the origin's".into(),
            ));
        }
        self.store().set_bucket_encryption(&self.info, on).await
    }

    /// The version a request names, as this bucket takes it: in a bucket that never had
    /// versioning only `null` exists (and is the current object); elsewhere the ids this
    /// layout issues. Anything else is S3's 400 for an invalid version id.
    pub fn version<'v>(&self, version_id: Option<&'v str>) -> StoreResult<Option<&'v str>> {
        let invalid = || StoreError::InvalidArgument("Invalid version id specified".into());
        match version_id {
            None => Ok(None),
            Some("null") if self.info.versioning.is_none() => Ok(None),
            Some(_) if self.info.versioning.is_none() => Err(invalid()),
            Some(version) if valid_version_id(version) => Ok(Some(version)),
            Some(_) => Err(invalid()),
        }
    }

    /// GET of a key (or of the version, range or part `options` name).
    pub async fn get(&self, key: &str, options: &ReadOptions) -> StoreResult<ObjectRead> {
        self.read(key, options, true).await
    }

    /// HEAD of a key: what a GET with the same options would answer, without the body.
    pub async fn head(&self, key: &str, options: &ReadOptions) -> StoreResult<ObjectRead> {
        self.read(key, options, false).await
    }

    async fn read(&self, key: &str, options: &ReadOptions, with_body: bool) -> StoreResult<ObjectRead> {
        let version = self.version(options.version_id.as_deref())?;
        let normalized;
        let options = if version.is_none() && options.version_id.is_some() {
            normalized = ReadOptions {
                version_id: None,
                ..options.clone()
            };
            &normalized
        } else {
            options
        };
        match self.cache() {
            // Boxed, like every cache-tier call here: its future is tens of KiB, and inline it
            // would be moved with every request's future, cache bucket or not.
            Some(cache) => Box::pin(cache.read(&self.info, key, options, with_body)).await,
            None if with_body => self.store().get_object(&self.info, key, options).await,
            None => self.store().head_object(&self.info, key, options).await,
        }
    }

    /// Turns versioning on or suspends it. Not for cache buckets: their objects' versions are
    /// the origin's.
    pub async fn set_versioning(&self, state: Versioning) -> StoreResult<()> {
        self.writable()?;
        if self.cache().is_some() {
            return Err(StoreError::NotImplemented(
                "versioning is not supported on cache buckets".into(),
            ));
        }
        self.store().set_versioning(&self.info, state).await
    }

    /// The bucket's object lock configuration (S3's 404 when it has none).
    pub fn object_lock(&self) -> StoreResult<&LockConfig> {
        self.info
            .object_lock
            .as_ref()
            .ok_or(StoreError::ObjectLockConfigurationNotFound)
    }

    /// Turns object lock on, or changes its default retention. Not for cache buckets: their
    /// objects' versions are the origin's.
    pub async fn set_object_lock(&self, config: &LockConfig) -> StoreResult<()> {
        self.writable()?;
        if self.cache().is_some() {
            return Err(StoreError::NotImplemented(
                "object lock is not supported on cache buckets".into(),
            ));
        }
        self.store().set_object_lock(&self.info, config).await
    }

    /// The head of the version a lock request names.
    async fn locked_version(&self, key: &str, version_id: Option<&str>) -> StoreResult<crate::store::ObjectHead> {
        if self.info.object_lock.is_none() {
            return Err(crate::store::lock_missing());
        }
        let options = ReadOptions {
            version_id: self.version(version_id)?.map(str::to_owned),
            ..ReadOptions::default()
        };
        Ok(self.head(key, &options).await?.head)
    }

    /// A version's retention (S3's 404 when it has none).
    pub async fn retention(&self, key: &str, version_id: Option<&str>) -> StoreResult<Retention> {
        let head = self.locked_version(key, version_id).await?;
        head.meta.retention.ok_or(StoreError::NoSuchObjectLockConfiguration)
    }

    /// Whether a version is under legal hold (S3's 404 when none was ever set on it).
    pub async fn legal_hold(&self, key: &str, version_id: Option<&str>) -> StoreResult<bool> {
        let head = self.locked_version(key, version_id).await?;
        head.meta.legal_hold.ok_or(StoreError::NoSuchObjectLockConfiguration)
    }

    pub async fn set_retention(
        &self,
        key: &str,
        version_id: Option<&str>,
        retention: Option<Retention>,
        bypass_governance: bool,
    ) -> StoreResult<()> {
        self.writable()?;
        let version = self.version(version_id)?;
        self.store()
            .set_retention(&self.info, key, version, retention, bypass_governance)
            .await
    }

    pub async fn set_legal_hold(&self, key: &str, version_id: Option<&str>, on: bool) -> StoreResult<()> {
        self.writable()?;
        let version = self.version(version_id)?;
        self.store().set_legal_hold(&self.info, key, version, on).await
    }

    /// The bucket's notification rules (none: an empty configuration, as S3 answers).
    pub async fn notifications(&self) -> StoreResult<Notifications> {
        self.store().notifications(&self.info).await
    }

    /// Replaces the bucket's notification rules, as `caller` asks (the principal it was opened
    /// for; the database checks again that the bucket is still the owner's this handle saw). A
    /// cache bucket's rules see the writes made through it (not those made at its origin
    /// directly, nor its fills: docs/events.md).
    pub async fn set_notifications(&self, caller: &Principal, rules: &Notifications) -> StoreResult<()> {
        self.writable()?;
        self.store().set_notifications(caller, &self.info, rules).await
    }

    /// The bucket's lifecycle rules (S3's 404 when it has none).
    pub fn lifecycle(&self) -> StoreResult<&Lifecycle> {
        self.info
            .lifecycle
            .as_deref()
            .ok_or(StoreError::NoSuchLifecycleConfiguration)
    }

    /// Sets (`None`: removes) the bucket's lifecycle rules. Not for cache buckets: their
    /// objects' lifetimes are the origin's.
    pub async fn set_lifecycle(&self, lifecycle: Option<&Lifecycle>) -> StoreResult<()> {
        self.writable()?;
        if self.cache().is_some() {
            return Err(StoreError::NotImplemented(
                "lifecycle rules are not supported on cache buckets".into(),
            ));
        }
        self.store().set_lifecycle(&self.info, lifecycle).await
    }

    /// When the current version read as `head` expires under the bucket's lifecycle rules, and
    /// by which rule (the `x-amz-expiration` of GET and HEAD).
    pub fn expiry(&self, key: &str, head: &crate::store::ObjectHead) -> Option<(std::time::SystemTime, &str)> {
        self.info
            .lifecycle
            .as_ref()?
            .expiry(key, head.size, head.last_modified, &head.meta.tags)
    }

    /// When the version a write made expires, and by which rule (the `x-amz-expiration` of
    /// PutObject, CopyObject and CompleteMultipartUpload).
    pub fn expiry_of_written(
        &self,
        key: &str,
        written: &crate::store::PutOutcome,
    ) -> Option<(std::time::SystemTime, &str)> {
        self.info
            .lifecycle
            .as_ref()?
            .expiry(key, written.size, written.last_modified, &written.tags)
    }

    /// Stores an object if `condition` holds when it commits. Its lock is the one its
    /// metadata asks for, else the bucket's default retention.
    pub async fn put(&self, key: &str, mut upload: Upload, condition: &WriteCondition) -> StoreResult<PutOutcome> {
        self.writable()?;
        self.info.lock_new_version(&mut upload.meta)?;
        upload.encryption = self.encryption_of(std::mem::take(&mut upload.encryption))?;
        match self.cache() {
            Some(cache) => Box::pin(cache.put(&self.info, key, upload, condition)).await,
            None => self.store().put_object(&self.info, key, upload, condition).await,
        }
    }

    /// Deletes a key, or (`version_id`) one version of it for good; a missing key is no error,
    /// as in S3. In a versioned bucket a delete without a version writes a delete marker. A
    /// version object lock protects is never removed (`bypass_governance`: the request may
    /// remove one under a GOVERNANCE retention). A delete of the key happens only if
    /// `condition` holds on its current version; a condition this bucket cannot check (on a
    /// named version, whose conditions S3 does not define, or in a cache bucket, whose current
    /// version is its origin's) is refused, never ignored.
    pub async fn delete(
        &self,
        key: &str,
        version_id: Option<&str>,
        bypass_governance: bool,
        condition: &DeleteCondition,
    ) -> StoreResult<DeleteOutcome> {
        self.writable()?;
        let version = self.version(version_id)?;
        if !condition.is_unconditional() && (version.is_some() || self.cache().is_some()) {
            return Err(StoreError::NotImplemented(
                if version.is_some() {
                    "Conditional deletes apply to the current version; they are not implemented with a versionId."
                } else {
                    "Conditional deletes are not implemented for cache buckets."
                }
                .into(),
            ));
        }
        if let Some(cache) = self.cache() {
            Box::pin(cache.delete(&self.info, key)).await?;
            return Ok(DeleteOutcome::default());
        }
        let store = self.store();
        match (self.info.versioning, version) {
            (None, _) => match store.delete_object(&self.info, key, condition).await? {
                None => Ok(DeleteOutcome::default()),
                // Versioned since this gateway's catalog last looked: a delete marker after all.
                Some(_) => store.delete_versioned(&self.info, key, condition).await,
            },
            (Some(_), None) => store.delete_versioned(&self.info, key, condition).await,
            (Some(_), Some(version)) => store.delete_version(&self.info, key, version, bypass_governance).await,
        }
    }

    /// Deletes many keys: one statement in a plain bucket, one origin DELETE per key in a
    /// cache bucket.
    pub async fn delete_many(&self, keys: &[String]) -> StoreResult<()> {
        self.writable()?;
        match self.cache() {
            Some(cache) => {
                for key in keys {
                    Box::pin(cache.delete(&self.info, key)).await?;
                }
                Ok(())
            }
            None => {
                if self.store().delete_objects(&self.info, keys).await?.is_some() {
                    for key in keys {
                        let unconditional = DeleteCondition::default();
                        self.store().delete_versioned(&self.info, key, &unconditional).await?;
                    }
                }
                Ok(())
            }
        }
    }

    /// One page of keys (a cache bucket lists its origin).
    pub async fn list(&self, request: &ListRequest) -> StoreResult<ListPage> {
        match self.cache() {
            Some(cache) => Box::pin(cache.list(&self.info, request)).await,
            None => self.store().list_objects(&self.info, request).await,
        }
    }

    /// One page of ListObjectVersions. A cache bucket lists its origin's current objects, each
    /// its only (null) version.
    pub async fn list_versions(&self, request: &VersionsRequest) -> StoreResult<VersionsPage> {
        let Some(cache) = self.cache() else {
            return self.store().list_versions(&self.info, request).await;
        };
        let page = Box::pin(cache.list(&self.info, &request.list)).await?;
        Ok(VersionsPage {
            next: page
                .next_token
                .as_ref()
                .and(page.last_entry.clone())
                .map(|key| (key, None)),
            entries: page
                .objects
                .into_iter()
                .map(|object| VersionEntry {
                    key: object.key,
                    version_id: "null".into(),
                    is_latest: true,
                    delete_marker: false,
                    size: object.size,
                    etag: object.etag,
                    last_modified: object.last_modified,
                })
                .collect(),
            common_prefixes: page.common_prefixes,
        })
    }

    /// Copies `source_key` of `source` (if `conditions` hold on it) to `key` here, if
    /// `condition` holds on `key` (the destination's `If-Match` / `If-None-Match`, checked
    /// atomically with the write). `meta` and
    /// `tags` replace the source's when given; the copy's ACL is `acl`, never the source's. Between plain buckets of one namespace the bytes
    /// never leave PostgreSQL; otherwise they stream through the gateway, read and written as
    /// each bucket's kind says (a cache source fills from its origin, a cache destination
    /// writes to its origin as its mode says). `checksum`, when given, computes the checksum
    /// the copy is to get (CopyObject's `x-amz-checksum-algorithm`): the bytes then stream
    /// through the gateway, which reads them as it copies.
    #[allow(clippy::too_many_arguments)]
    pub async fn copy_from(
        &self,
        source: &BucketHandle<'_>,
        source_key: &str,
        source_version: Option<&str>,
        conditions: &Preconditions,
        key: &str,
        condition: &WriteCondition,
        meta: Option<ObjectMeta>,
        tags: Option<Tags>,
        lock: RequestedLock,
        acl: Option<crate::access::acl::Acl>,
        encryption: CopyEncryption,
        checksum: Option<Box<dyn BodyObserver>>,
    ) -> StoreResult<PutOutcome> {
        self.writable()?;
        let source_version = source.version(source_version)?;
        let target = self.encryption_of(encryption.target)?;
        if source_version.is_none()
            && checksum.is_none()
            && matches!(target, RequestedEncryption::None)
            && encryption.source_key.is_none()
            && self.cache().is_none()
            && source.cache().is_none()
            && source.info.namespace == self.info.namespace
        {
            let from = CopySource {
                bucket: &source.info,
                key: source_key,
                conditions,
            };
            // `None`: the source is encrypted, and is copied through the gateway below.
            if let Some(copied) = self
                .store()
                .copy_object(
                    &from,
                    &self.info,
                    key,
                    meta.clone(),
                    tags.clone(),
                    lock.clone(),
                    acl.clone(),
                    condition,
                )
                .await?
            {
                return Ok(copied);
            }
        }
        let options = ReadOptions {
            conditions: conditions.clone(),
            version_id: source_version.map(str::to_owned),
            customer_key: encryption.source_key,
            ..ReadOptions::default()
        };
        let read = source
            .get(source_key, &options)
            .await
            .map_err(crate::store::as_copy_source_error)?;
        let mut meta = meta.unwrap_or_else(|| read.head.meta.clone());
        // The copy is one body of its own; a checksum the client asked for was of the source's
        // upload, which may have been in parts (the copy's own, if asked for, is `checksum`'s).
        meta.parts = None;
        meta.checksum = None;
        meta.tags = tags.unwrap_or_else(|| read.head.meta.tags.clone());
        lock.apply(&mut meta);
        // The copy's encryption is its own request's (or the bucket default), never the source's.
        meta.encryption = None;
        meta.acl = acl;
        let upload = Upload {
            meta,
            declared_len: Some(read.head.size),
            body: read.body,
            observer: checksum.unwrap_or_else(|| Box::new(StoredBytes)),
            encryption: target,
        };
        self.put(key, upload, condition).await
    }

    /// Starts an upload by `initiator` (`None`: anonymous); the object it completes gets the
    /// lock `meta` asks for, else the bucket's default retention as of now.
    pub async fn create_multipart_upload(
        &self,
        key: &str,
        mut meta: ObjectMeta,
        encryption: RequestedEncryption,
        initiator: Option<&str>,
    ) -> StoreResult<String> {
        self.writable()?;
        self.info.lock_new_version(&mut meta)?;
        let encryption = self.encryption_of(encryption)?;
        self.store()
            .create_multipart_upload(&self.info, key, &meta, &encryption, initiator)
            .await
    }

    pub async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: u32,
        upload: Upload,
    ) -> StoreResult<PartOutcome> {
        self.writable()?;
        self.store()
            .upload_part(&self.info, key, upload_id, part_number, upload)
            .await
    }

    /// Fills a part with an object of `source` (read as its kind says, opened with the SSE-C
    /// key in `options`), or the byte range of it in `options.range`; `part_key` is the SSE-C
    /// key of the upload, if it has one; `observer` computes the checksum the upload keeps.
    #[allow(clippy::too_many_arguments)]
    pub async fn upload_part_copy(
        &self,
        source: &BucketHandle<'_>,
        source_key: &str,
        options: &ReadOptions,
        key: &str,
        upload_id: &str,
        part_number: u32,
        part_key: Option<CustomerKey>,
        observer: Box<dyn BodyObserver>,
    ) -> StoreResult<PartOutcome> {
        self.writable()?;
        let read = source
            .get(source_key, options)
            .await
            .map_err(crate::store::as_copy_source_error)?;
        // A GET clamps a range past the end; a part copy refuses it, as S3 does.
        if let Some(ByteRange::From { last: Some(last), .. }) = options.range
            && last >= read.head.size
        {
            return Err(StoreError::InvalidRange { size: read.head.size });
        }
        let upload = Upload {
            meta: ObjectMeta::default(),
            declared_len: Some(read.span.1 - read.span.0),
            body: read.body,
            observer,
            encryption: part_key.map_or(RequestedEncryption::None, RequestedEncryption::Customer),
        };
        self.upload_part(key, upload_id, part_number, upload).await
    }

    /// Turns an upload into its object, if its parts add up to `expected_size` (when given).
    /// In a cache bucket the object then reaches the origin as the bucket's mode says, like a
    /// PUT of the same size.
    pub async fn complete_multipart_upload(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[CompletedPart],
        checksums: &dyn PartChecksums,
        condition: &WriteCondition,
        expected_size: Option<u64>,
    ) -> StoreResult<PartOutcome> {
        self.writable()?;
        let outcome = self
            .store()
            .complete_multipart_upload(&self.info, key, upload_id, parts, checksums, condition, expected_size)
            .await?;
        if let Some(cache) = self.cache() {
            let wait = CacheTier::waits_for_origin(&self.info, outcome.written.size);
            Box::pin(cache.written_here(&self.info, key, wait)).await?;
        }
        Ok(outcome)
    }

    pub async fn abort_multipart_upload(&self, key: &str, upload_id: &str) -> StoreResult<()> {
        self.writable()?;
        self.store().abort_multipart_upload(&self.info, key, upload_id).await
    }

    pub async fn list_parts(
        &self,
        key: &str,
        upload_id: &str,
        after_part: u32,
        max_parts: usize,
    ) -> StoreResult<PartsPage> {
        self.store()
            .list_parts(&self.info, key, upload_id, after_part, max_parts)
            .await
    }

    /// The parts of the multipart object `head` was read as (GetObjectAttributes' ObjectParts).
    pub async fn object_parts(
        &self,
        key: &str,
        head: &crate::store::ObjectHead,
        after_part: u32,
        max_parts: usize,
    ) -> StoreResult<PartsPage> {
        self.store()
            .object_parts(&self.info, key, head, after_part, max_parts)
            .await
    }

    pub async fn list_multipart_uploads(&self, request: &UploadsRequest) -> StoreResult<UploadsPage> {
        self.store().list_multipart_uploads(&self.info, request).await
    }

    /// Replaces an object's (current version's) tags. Not in a cache bucket: the origin's copy
    /// would keep its own. `allowed`, when given, decides on the object's metadata first (under
    /// the row's lock, so the tags it sees are the ones replaced): refused, nothing changes.
    pub async fn set_object_tags(
        &self,
        key: &str,
        version_id: Option<&str>,
        tags: &Tags,
        allowed: Option<&(dyn Fn(&ObjectMeta) -> bool + Sync)>,
    ) -> StoreResult<()> {
        self.writable()?;
        if self.cache().is_some() {
            return Err(StoreError::NotImplemented(
                "object tagging is not supported on cache buckets".into(),
            ));
        }
        match (self.version(version_id)?, allowed) {
            // The common case, one statement.
            (None, None) => self.store().set_object_tags(&self.info, key, tags).await,
            (version, allowed) => {
                let allowed = |meta: &ObjectMeta| match allowed.is_none_or(|allowed| allowed(meta)) {
                    true => Ok(()),
                    false => Err(StoreError::AccessDenied),
                };
                self.store()
                    .set_version_tags(&self.info, key, version, tags, allowed)
                    .await
            }
        }
    }

    /// The bucket's CORS rules, policy and public access block, as the catalog had them when the bucket was opened.
    pub fn access(&self) -> &crate::access::BucketAccess {
        &self.info.access
    }

    /// The bucket's server access logging, as the catalog had it when the bucket was opened.
    pub fn logging(&self) -> Option<&crate::store::LoggingConfig> {
        self.info.logging.as_deref()
    }

    /// Replaces the bucket's server access logging (a checked configuration); `None` turns it
    /// off.
    pub async fn set_logging(&self, config: Option<&crate::store::LoggingConfig>) -> StoreResult<()> {
        self.writable()?;
        self.store().set_bucket_logging(&self.info, config).await
    }

    /// Replaces the bucket's CORS rules; `None` deletes them.
    pub async fn set_cors(&self, rules: Option<&crate::access::cors::CorsRules>) -> StoreResult<()> {
        self.writable()?;
        self.store().set_bucket_cors(&self.info, rules).await
    }

    /// Replaces the bucket's policy (a checked document); `None` deletes it.
    pub async fn set_policy(&self, text: Option<&str>) -> StoreResult<()> {
        self.writable()?;
        self.store().set_bucket_policy(&self.info, text).await
    }

    /// The bucket's owning key; `None`: the root key.
    pub fn owner(&self) -> Option<&str> {
        self.info.owner.as_deref()
    }

    /// Replaces the bucket's ownership controls; `None` deletes them. A cache bucket keeps ACLs
    /// disabled: its objects are the origin's, and their ACLs would not reach it.
    pub async fn set_ownership(&self, ownership: Option<crate::access::acl::Ownership>) -> StoreResult<()> {
        self.writable()?;
        if self.info.origin.is_some() && ownership != Some(crate::access::acl::Ownership::BucketOwnerEnforced) {
            return Err(StoreError::NotImplemented(
                "ACLs are not implemented for cache buckets: their objects are the origin's".into(),
            ));
        }
        self.store().set_bucket_ownership(&self.info, ownership).await
    }

    /// Replaces the bucket's ACL; `None`: private.
    pub async fn set_acl(&self, acl: Option<&crate::access::acl::Acl>) -> StoreResult<()> {
        self.writable()?;
        self.store().set_bucket_acl(&self.info, acl).await
    }

    /// Replaces an object's ACL (of the version named, else the current one). Not for cache
    /// buckets: their objects are the origin's.
    pub async fn set_object_acl(
        &self,
        key: &str,
        version_id: Option<&str>,
        acl: Option<&crate::access::acl::Acl>,
    ) -> StoreResult<()> {
        self.writable()?;
        if self.info.origin.is_some() {
            return Err(StoreError::NotImplemented(
                "Object ACLs are not implemented for cache buckets: their objects are the origin's".into(),
            ));
        }
        let version = self.version(version_id)?;
        self.store().set_object_acl(&self.info, key, version, acl).await
    }

    /// Replaces the bucket's public access block; `None` deletes it.
    pub async fn set_public_access_block(&self, block: Option<&crate::access::PublicAccessBlock>) -> StoreResult<()> {
        self.writable()?;
        self.store().set_bucket_public_access_block(&self.info, block).await
    }

    /// The bucket's tags; `None` when it has none.
    pub async fn tags(&self) -> StoreResult<Option<Tags>> {
        self.store().bucket_tags(&self.info).await
    }

    pub async fn set_tags(&self, tags: Option<&Tags>) -> StoreResult<()> {
        self.writable()?;
        self.store().set_bucket_tags(&self.info, tags).await
    }

    /// The bucket as a RESP keyspace. Only plain buckets are: a cache bucket's keys live at its
    /// origin, which RESP's batched transactions cannot reach. In a versioned bucket RESP writes
    /// versions as S3 does (store/kv.rs).
    pub fn keyspace(&self) -> StoreResult<Keyspace> {
        if let Some(origin) = &self.info.origin {
            return Err(StoreError::NotAKeyspace(format!(
                "bucket {} is a cache bucket ({} origin cache): a RESP database must map to a plain bucket",
                self.info.name,
                origin.mode.as_str()
            )));
        }
        if self.info.default_encryption {
            return Err(StoreError::NotAKeyspace(format!(
                "bucket {} has default encryption: a RESP database must map to a bucket without it",
                self.info.name
            )));
        }
        Ok(Keyspace {
            store: self.store().clone(),
            bucket: Arc::clone(&self.info),
            access: self.access,
        })
    }
}

/// A plain bucket as a RESP keyspace, authorized as it was opened. Owned, so batches shared by
/// many connections (group commit) can carry it.
#[derive(Clone)]
pub struct Keyspace {
    store: Store,
    bucket: Arc<BucketInfo>,
    access: Access,
}

impl Keyspace {
    pub fn bucket(&self) -> &str {
        &self.bucket.name
    }

    /// Its bucket's id: what keyspace-scoped catalog rows (function libraries) are keyed by.
    pub fn bucket_id(&self) -> i64 {
        self.bucket.id
    }

    fn writable(&self) -> StoreResult<()> {
        match self.access {
            Access::Write => Ok(()),
            Access::Read => Err(StoreError::AccessDenied),
        }
    }

    /// Loads `keys` for reading, in one statement.
    pub async fn read(&self, keys: &[String]) -> StoreResult<KvBatch> {
        self.store.kv_read(&self.bucket, keys).await
    }

    /// Loads the keys of several read batches in one statement.
    pub async fn read_many(&self, requests: &[&[String]]) -> StoreResult<Vec<KvBatch>> {
        self.store.kv_read_many(&self.bucket, requests).await
    }

    /// Begins a batch on `keys` locked as a write's, for reads that must all see one moment (a
    /// read-only MULTI/EXEC or script whose typed calls are statements of their own): writers of the keys
    /// wait until it ends. It writes nothing of the client's, so it needs no write access.
    pub async fn read_locked(&self, keys: &[String]) -> StoreResult<KvBatch> {
        self.store.kv_write(&self.bucket, keys).await
    }

    /// As [`read_locked`](Self::read_locked), holding the whole keyspace (see
    /// [`write_all`](Self::write_all)).
    pub async fn read_locked_all(&self, keys: &[String]) -> StoreResult<KvBatch> {
        self.store.kv_write_all(&self.bucket, keys).await
    }

    /// Begins a write batch on `keys` (locked, then loaded).
    pub async fn write(&self, keys: &[String]) -> StoreResult<KvBatch> {
        self.writable()?;
        self.store.kv_write(&self.bucket, keys).await
    }

    /// Begins a write batch that holds the whole keyspace, `keys` loaded (more may be loaded
    /// as it goes: [`KvBatch::reload`](crate::store::KvBatch)).
    pub async fn write_all(&self, keys: &[String]) -> StoreResult<KvBatch> {
        self.writable()?;
        self.store.kv_write_all(&self.bucket, keys).await
    }

    /// Begins a write batch that only overwrites `keys`, loading nothing.
    pub async fn overwrite(&self, keys: Vec<String>) -> StoreResult<KvBatch> {
        self.writable()?;
        self.store.kv_overwrite(&self.bucket, keys).await
    }

    /// One page of keys after `after` that start with `prefix`, with their types (`None`: a
    /// string); fewer than `count` means done.
    pub async fn scan(
        &self,
        after: &str,
        prefix: &str,
        count: i64,
    ) -> StoreResult<Vec<(String, Option<crate::store::KeyType>)>> {
        self.store.kv_scan(&self.bucket, after, prefix, count).await
    }

    /// Registers WATCHed `keys` under `token` (see `store/kv/watch.rs`): how many were new to
    /// it, `None` where nothing can be registered (a hot standby).
    pub async fn watch(&self, token: i64, keys: &[String]) -> StoreResult<Option<i64>> {
        self.store.kv_watch(&self.bucket, token, keys).await
    }

    /// Runs typed reads (hashes, sets, sorted sets, lists) in one round trip.
    pub async fn typed_read(&self, calls: &[&crate::store::TypedCall]) -> StoreResult<Vec<crate::store::TypedRow>> {
        self.store.kv_typed_read(&self.bucket, calls).await
    }

    /// How many live keys there are, and how many of them have a TTL.
    pub async fn count(&self) -> StoreResult<(i64, i64)> {
        self.store.kv_count(&self.bucket).await
    }

    pub async fn random_key(&self) -> StoreResult<Option<String>> {
        self.store.kv_random_key(&self.bucket).await
    }

    /// Deletes every key. Not in a versioned bucket, where it would remove versions for good
    /// (S3 has no such operation; DEL writes delete markers).
    pub async fn flush(&self) -> StoreResult<()> {
        self.writable()?;
        if self.bucket.versioning.is_some() {
            return Err(StoreError::NotImplemented(format!(
                "FLUSHDB is not supported on bucket {}: it has S3 versioning",
                self.bucket.name
            )));
        }
        self.store.kv_flush(&self.bucket).await
    }
}
