//! The origin cache tier: cache buckets in front of buckets of remote S3 origins.
//!
//! Reads are served from PostgreSQL when the entry is fresh; a miss makes one origin GET that
//! streams to the client while it fills the cache, and concurrent misses on a key share that
//! GET (in-process through a per-key mutex, across gateways through an advisory lock). Ranges
//! of uncached objects pass through. Writes below the write-back threshold reach the origin
//! before they are acknowledged; larger ones (in write-back mode) are acknowledged once stored,
//! and the outbox worker uploads them. Deletes go to the origin and invalidate the entry.

pub mod addresses;
mod metrics;
pub mod origin;
mod outbox;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use md5::{Digest, Md5};
use tokio::sync::{Notify, OwnedMutexGuard, OwnedSemaphorePermit, Semaphore, mpsc};

use addresses::OriginAddresses;
pub use metrics::CacheMetrics;
use origin::{ChannelBody, Fetch, OriginClient, OriginError, OriginTls};
pub use outbox::spawn_uploader;

use crate::admission::{BufferBudget, Reservation};

use crate::store::{
    BodyStream, BucketInfo, ByteRange, CacheEntry, CacheMode, EntryHead, FillLock, ListPage, ListRequest, ObjectHead,
    ObjectRead, Origin, OriginFault, PutOutcome, RangeLookup, ReadOptions, Store, StoreError, StoreResult, Upload,
    WriteCondition, WriteEvent, check_declared_length, held_body, read_prefix,
};

#[derive(Debug, Clone)]
pub struct CacheSettings {
    /// Fills running at once in this process, over all cache buckets (each bucket also has
    /// its own limit in the catalog).
    pub fill_concurrency: usize,
    /// Bounds connecting to an origin and waiting for each answer's head.
    pub origin_timeout: Duration,
    /// How often the upload worker looks for due write-backs (it is also woken by writes).
    pub upload_interval: Duration,
    /// Uploads the worker runs at once.
    pub upload_concurrency: usize,
    /// How long past its TTL an entry is still served when its origin cannot answer
    /// (stale-if-error; zero turns it off).
    pub stale_if_error: Duration,
    /// What origins' TLS certificates are verified with.
    pub origin_tls: OriginTls,
    /// Whether origins may be at local addresses.
    pub origin_addresses: OriginAddresses,
}

/// A cache bucket's origin client and fill limit, rebuilt when its catalog row changes.
struct Remote {
    origin: Arc<Origin>,
    client: OriginClient,
    fills: Arc<Semaphore>,
}

#[derive(Clone)]
pub struct CacheTier {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    settings: CacheSettings,
    /// Bounds the bodies and range chunks held in memory at once.
    buffers: BufferBudget,
    metrics: CacheMetrics,
    remotes: Mutex<HashMap<i64, Arc<Remote>>>,
    process_fills: Arc<Semaphore>,
    /// In-process single flight: one fill per key at a time.
    flights: Mutex<HashMap<FlightKey, Weak<tokio::sync::Mutex<()>>>>,
    /// Keys read since the last flush of their last-use times.
    touched: Mutex<HashMap<i64, HashSet<String>>>,
    uploads_due: Notify,
}

/// Range chunks are at least this large (the catalog allows 64 KiB..64 MiB).
const MIN_RANGE_CHUNK: u32 = 64 * 1024;
/// A range needing more aligned bytes than this passes through instead of filling chunks
/// (they are buffered while they are stored) or being gathered from them.
const MAX_RANGE_FILL: u64 = 64 * 1024 * 1024;

/// A bucket id and a key.
type FlightKey = (i64, String);

/// Touched keys remembered between flushes; beyond this, reads are not recorded (eviction
/// order is an approximation anyway).
const MAX_TOUCHED: usize = 100_000;

impl CacheTier {
    pub fn new(
        store: Store,
        settings: CacheSettings,
        metrics: &crate::metrics::Metrics,
        buffers: BufferBudget,
    ) -> CacheTier {
        CacheTier {
            inner: Arc::new(Inner {
                buffers,
                process_fills: Arc::new(Semaphore::new(settings.fill_concurrency.max(1))),
                store,
                settings,
                metrics: CacheMetrics::new(metrics),
                remotes: Mutex::default(),
                flights: Mutex::default(),
                touched: Mutex::default(),
                uploads_due: Notify::new(),
            }),
        }
    }

    fn store(&self) -> &Store {
        &self.inner.store
    }

    fn metrics(&self) -> &CacheMetrics {
        &self.inner.metrics
    }

    fn remote(&self, bucket: &BucketInfo) -> StoreResult<Arc<Remote>> {
        let origin = bucket.origin.as_ref().ok_or(StoreError::NoSuchBucket)?;
        let mut remotes = self.inner.remotes.lock().expect("remotes lock");
        if let Some(remote) = remotes.get(&bucket.id)
            && remote.origin == *origin
        {
            return Ok(Arc::clone(remote));
        }
        let remote = Arc::new(Remote {
            origin: Arc::clone(origin),
            client: OriginClient::new(
                origin,
                self.inner.settings.origin_timeout,
                &self.inner.settings.origin_tls,
                self.inner.settings.origin_addresses,
            )
            .map_err(|err| self.origin_error(err))?,
            fills: Arc::new(Semaphore::new(origin.fill_concurrency.max(1) as usize)),
        });
        remotes.insert(bucket.id, Arc::clone(&remote));
        Ok(remote)
    }

    fn origin_error(&self, err: OriginError) -> StoreError {
        if !matches!(
            err,
            OriginError::Missing | OriginError::PreconditionFailed | OriginError::InvalidRange
        ) {
            self.metrics().origin_errors.with_label_values(&[err.kind()]).inc();
        }
        err.into()
    }

    /// GET (`with_body`) or HEAD of a key of a cache bucket.
    pub async fn read(
        &self,
        bucket: &Arc<BucketInfo>,
        key: &str,
        options: &ReadOptions,
        with_body: bool,
    ) -> StoreResult<ObjectRead> {
        let entry = self
            .store()
            .cache_lookup(bucket, key, with_body, Duration::ZERO)
            .await?;
        let stale = match entry {
            Some(entry) if entry.fresh => return self.serve(bucket, key, entry, options, with_body).await,
            Some(_) => "stale",
            None => "miss",
        };
        let remote = self.remote(bucket)?;
        // A HEAD of an object cached in range chunks (a Parquet file read by its footer and
        // column chunks) is answered from their head, like a range read of them.
        if !with_body && let Some(head) = self.store().cache_range_head(bucket, key, Duration::ZERO).await? {
            self.metrics().lookups.with_label_values(&["range_hit"]).inc();
            return head_read(head, options);
        }
        // So is a GET of one whose every chunk is cached (read whole by its ranges).
        if with_body
            && options.range.is_none()
            && options.part_number.is_none()
            && let Some(read) = self
                .whole_from_chunks(bucket, &remote, key, options, Duration::ZERO)
                .await?
        {
            self.metrics().lookups.with_label_values(&["range_hit"]).inc();
            return Ok(read);
        }
        self.metrics().lookups.with_label_values(&[stale]).inc();
        let answer = self.read_from_origin(bucket, &remote, key, options, with_body).await;
        match answer {
            Err(err) if origin_unavailable(&err) && !self.inner.settings.stale_if_error.is_zero() => {
                match self.serve_stale(bucket, &remote, key, options, with_body).await? {
                    Some(read) => Ok(read),
                    None => Err(err),
                }
            }
            answer => answer,
        }
    }

    /// A read that the cache could not answer alone.
    async fn read_from_origin(
        &self,
        bucket: &Arc<BucketInfo>,
        remote: &Arc<Remote>,
        key: &str,
        options: &ReadOptions,
        with_body: bool,
    ) -> StoreResult<ObjectRead> {
        if !with_body {
            return self.head_from_origin(remote, key, options).await;
        }
        match (options.range, options.part_number) {
            (Some(range), None) => self.range_read(bucket, remote, key, range, options).await,
            (None, None) => self.fill(bucket, remote, key, options).await,
            _ => self.pass_through(remote, key, options, "part").await,
        }
    }

    /// Stale-if-error: while the origin cannot answer, what the cache holds of a key (a whole
    /// entry, or for a range or a HEAD its range chunks) is served up to `stale_if_error` past
    /// its TTL. `None`: nothing to serve, the origin's error stands.
    async fn serve_stale(
        &self,
        bucket: &BucketInfo,
        remote: &Remote,
        key: &str,
        options: &ReadOptions,
        with_body: bool,
    ) -> StoreResult<Option<ObjectRead>> {
        let grace = self.inner.settings.stale_if_error;
        let read = match self.store().cache_lookup(bucket, key, with_body, grace).await? {
            Some(entry) if entry.fresh && !entry.absent() => {
                Some(self.store().cache_read(bucket, entry, options, with_body).await?)
            }
            _ if !with_body => match self.store().cache_range_head(bucket, key, grace).await? {
                Some(head) => Some(head_read(head, options)?),
                None => None,
            },
            _ => match (options.range, options.part_number) {
                (Some(range), None) => {
                    let chunk_size = remote.origin.range_chunk.max(MIN_RANGE_CHUNK);
                    match self
                        .store()
                        .cache_range(
                            bucket,
                            key,
                            range,
                            chunk_size,
                            MAX_RANGE_FILL,
                            &options.conditions,
                            grace,
                            &self.inner.buffers,
                        )
                        .await?
                    {
                        RangeLookup::Hit { read, .. } => Some(*read),
                        RangeLookup::Miss { .. } => None,
                    }
                }
                (None, None) => self.whole_from_chunks(bucket, remote, key, options, grace).await?,
                _ => None,
            },
        };
        if read.is_some() {
            self.metrics().lookups.with_label_values(&["stale_if_error"]).inc();
        }
        Ok(read)
    }

    /// The whole object from its range chunks, when every chunk is cached and fresh within the
    /// TTL plus `grace`, answered as a GET of the whole (200), its conditions checked against
    /// the chunks' head. Only objects up to [`MAX_RANGE_FILL`]: their bytes are gathered in
    /// memory, as a range fill's are; a larger one goes to the origin.
    async fn whole_from_chunks(
        &self,
        bucket: &BucketInfo,
        remote: &Remote,
        key: &str,
        options: &ReadOptions,
        grace: Duration,
    ) -> StoreResult<Option<ObjectRead>> {
        let Some(head) = self.store().cache_range_head(bucket, key, grace).await? else {
            return Ok(None);
        };
        if head.size == 0 || head.size > MAX_RANGE_FILL {
            return Ok(None);
        }
        let whole = ByteRange::From {
            first: 0,
            last: Some(head.size - 1),
        };
        let chunk_size = remote.origin.range_chunk.max(MIN_RANGE_CHUNK);
        match self
            .store()
            .cache_range(
                bucket,
                key,
                whole,
                chunk_size,
                MAX_RANGE_FILL,
                &options.conditions,
                grace,
                &self.inner.buffers,
            )
            .await?
        {
            RangeLookup::Hit {
                mut read,
                use_unrecorded,
            } => {
                if use_unrecorded {
                    self.touch(bucket.id, key);
                }
                read.partial = false;
                Ok(Some(*read))
            }
            RangeLookup::Miss { .. } => Ok(None),
        }
    }

    async fn serve(
        &self,
        bucket: &BucketInfo,
        key: &str,
        entry: CacheEntry,
        options: &ReadOptions,
        with_body: bool,
    ) -> StoreResult<ObjectRead> {
        if entry.absent() {
            self.metrics().lookups.with_label_values(&["negative"]).inc();
            return Err(StoreError::NoSuchKey);
        }
        let result = if entry.pending { "pending" } else { "hit" };
        self.metrics().lookups.with_label_values(&[result]).inc();
        if entry.use_unrecorded {
            self.touch(bucket.id, key);
        }
        self.store().cache_read(bucket, entry, options, with_body).await
    }

    /// Serves a fresh entry found after a fill or revalidation.
    async fn serve_cached(&self, bucket: &BucketInfo, key: &str, options: &ReadOptions) -> StoreResult<ObjectRead> {
        match self.store().cache_lookup(bucket, key, true, Duration::ZERO).await? {
            Some(entry) => self.serve(bucket, key, entry, options, true).await,
            None => Err(StoreError::NoSuchKey),
        }
    }

    async fn head_from_origin(&self, remote: &Remote, key: &str, options: &ReadOptions) -> StoreResult<ObjectRead> {
        self.metrics().passthrough.with_label_values(&["head"]).inc();
        let head = remote.client.head(key).await.map_err(|err| self.origin_error(err))?;
        head_read(object_head(head), options)
    }

    /// Serves a read straight from the origin, without filling.
    async fn pass_through(
        &self,
        remote: &Remote,
        key: &str,
        options: &ReadOptions,
        kind: &str,
    ) -> StoreResult<ObjectRead> {
        if options.part_number.is_some_and(|n| n != 1) {
            return Err(StoreError::InvalidPartNumber);
        }
        self.metrics().passthrough.with_label_values(&[kind]).inc();
        let fetched = self.get_from_origin(remote, key, options.range).await?;
        let head = object_head(fetched.head);
        options.conditions.check(&head)?;
        Ok(ObjectRead {
            partial: options.range.is_some(),
            head,
            span: fetched.span,
            body: fetched.body,
        })
    }

    /// A range read of an object not cached whole: served from its aligned chunks when they
    /// are cached, else one origin GET of the aligned chunks it touches fills them (never the
    /// whole object for a small range). Open and suffix ranges of an object whose size is not
    /// known yet, and very large ranges, pass through.
    async fn range_read(
        &self,
        bucket: &Arc<BucketInfo>,
        remote: &Remote,
        key: &str,
        range: ByteRange,
        options: &ReadOptions,
    ) -> StoreResult<ObjectRead> {
        let chunk_size = remote.origin.range_chunk.max(MIN_RANGE_CHUNK);
        let size = match self
            .store()
            .cache_range(
                bucket,
                key,
                range,
                chunk_size,
                MAX_RANGE_FILL,
                &options.conditions,
                Duration::ZERO,
                &self.inner.buffers,
            )
            .await?
        {
            RangeLookup::Hit { read, use_unrecorded } => {
                self.metrics().lookups.with_label_values(&["range_hit"]).inc();
                if use_unrecorded {
                    self.touch(bucket.id, key);
                }
                return Ok(*read);
            }
            RangeLookup::Miss { size } => size,
        };
        let chunk = u64::from(chunk_size);
        let (first, last) = match (range, size) {
            (
                ByteRange::From {
                    first,
                    last: Some(last),
                },
                size,
            ) => (first, size.map_or(last, |size| last.min(size.saturating_sub(1)))),
            (_, Some(size)) => {
                let span = range.resolve(size)?;
                (span.0, span.1 - 1)
            }
            (_, None) => return self.pass_through(remote, key, options, "range").await,
        };
        let (first_chunk, last_chunk) = (first / chunk, last / chunk);
        let fill_bytes = (last_chunk - first_chunk + 1) * chunk;
        if last < first || fill_bytes > MAX_RANGE_FILL {
            return self.pass_through(remote, key, options, "range").await;
        }
        let Some(buffer) = self.inner.buffers.try_reserve(fill_bytes, "range_fill") else {
            return self.pass_through(remote, key, options, "range").await;
        };
        let aligned = ByteRange::From {
            first: first_chunk * chunk,
            last: Some((last_chunk + 1) * chunk - 1),
        };
        let fetched = self.fetch_range(remote, key, aligned).await?;
        self.keep_range(bucket.id, key, chunk_size, first_chunk, &fetched)
            .await?;
        self.metrics().fills.with_label_values(&["range"]).inc();
        self.metrics().fill_bytes.inc_by(fetched.data.len() as u64);
        range_answer(range, options, fetched, buffer)
    }

    /// An unconditional GET from the origin (which a 304 cannot answer).
    async fn get_from_origin(
        &self,
        remote: &Remote,
        key: &str,
        range: Option<ByteRange>,
    ) -> StoreResult<Box<origin::Fetched>> {
        match remote.client.get(key, range, None).await {
            Ok(Fetch::Body(fetched)) => Ok(fetched),
            Ok(Fetch::NotModified) => Err(StoreError::OriginFailed(OriginFault::plain(
                "unexpected 304 from the origin",
            ))),
            Err(err) => Err(self.origin_error(err)),
        }
    }

    /// The `aligned` chunks from the origin, read whole (the caller bounded and reserved them).
    async fn fetch_range(&self, remote: &Remote, key: &str, aligned: ByteRange) -> StoreResult<FetchedRange> {
        let origin::Fetched { head, span, mut body } = *self.get_from_origin(remote, key, Some(aligned)).await?;
        let mut data = BytesMut::with_capacity((span.1 - span.0) as usize);
        while let Some(piece) = body.next().await {
            data.extend_from_slice(&piece?);
        }
        check_declared_length(Some(span.1 - span.0), data.len() as u64)?;
        Ok(FetchedRange {
            head,
            span,
            data: data.freeze(),
        })
    }

    /// Caches what a range fill fetched: the whole object when that is what came, else its
    /// chunks.
    async fn keep_range(
        &self,
        bucket_id: i64,
        key: &str,
        chunk_size: u32,
        first_chunk: u64,
        fetched: &FetchedRange,
    ) -> StoreResult<()> {
        let stored = if fetched.span == (0, fetched.head.size) {
            let whole: BodyStream = Box::pin(futures::stream::once({
                let data = fetched.data.clone();
                async move { Ok(data) }
            }));
            self.store()
                .cache_store(bucket_id, key, &fetched.head, whole, None)
                .await
        } else {
            self.store()
                .cache_store_ranges(bucket_id, key, &fetched.head, chunk_size, first_chunk, &fetched.data)
                .await
        };
        match stored {
            // A standby serves what it fetched without keeping it, and so does a read whose
            // bucket was dropped while it fetched (it began before the drop).
            Ok(()) | Err(StoreError::ReadOnly | StoreError::NoSuchBucket) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Waits until no other task of this process fills `key`.
    async fn flight(&self, bucket_id: i64, key: &str) -> OwnedMutexGuard<()> {
        let mutex = {
            let mut flights = self.inner.flights.lock().expect("flights lock");
            flights.retain(|_, flight| flight.strong_count() > 0);
            let slot = flights.entry((bucket_id, key.to_owned())).or_default();
            match slot.upgrade() {
                Some(mutex) => mutex,
                None => {
                    let mutex = Arc::new(tokio::sync::Mutex::new(()));
                    *slot = Arc::downgrade(&mutex);
                    mutex
                }
            }
        };
        mutex.lock_owned().await
    }

    async fn fill(
        &self,
        bucket: &Arc<BucketInfo>,
        remote: &Arc<Remote>,
        key: &str,
        options: &ReadOptions,
    ) -> StoreResult<ObjectRead> {
        let flight = self.flight(bucket.id, key).await;
        // Another task of this process may have filled it while this one waited.
        if let Some(entry) = self.store().cache_lookup(bucket, key, true, Duration::ZERO).await?
            && entry.fresh
        {
            return self.serve(bucket, key, entry, options, true).await;
        }
        let permits = FillPermits::acquire(remote, &self.inner.process_fills).await;
        let mut lock = match FillLock::acquire(self.store().pool(), bucket.id, key).await {
            Ok(lock) => lock,
            Err(StoreError::ReadOnly) => return self.standby_read(bucket, remote, key, options).await,
            Err(err) => return Err(err),
        };
        let current = lock.lookup(bucket, key).await?;
        if current.as_ref().is_some_and(|entry| entry.fresh) {
            // Another gateway filled it while this one waited for the lock.
            lock.release().await;
            return self.serve_cached(bucket, key, options).await;
        }
        let known_etag = current
            .filter(|entry| !entry.absent() && !entry.pending)
            .map(|entry| entry.head.etag);
        let started = Instant::now();
        let fetched = match remote.client.get(key, None, known_etag.as_deref()).await {
            Ok(Fetch::Body(fetched)) => fetched,
            Ok(Fetch::NotModified) => {
                self.metrics().revalidations.with_label_values(&["unchanged"]).inc();
                let etag = known_etag.expect("only a conditional GET answers 304");
                let validated = lock.mark_validated(bucket.id, key, &etag).await;
                lock.release().await;
                validated?;
                return self.serve_cached(bucket, key, options).await;
            }
            Err(OriginError::Missing) => {
                if known_etag.is_some() {
                    self.metrics().revalidations.with_label_values(&["gone"]).inc();
                }
                let recorded = if remote.origin.negative_ttl.is_zero() {
                    lock.forget(bucket.id, key).await
                } else {
                    lock.remember_absent(bucket.id, key).await
                };
                lock.release().await;
                recorded?;
                return Err(StoreError::NoSuchKey);
            }
            Err(err) => {
                lock.release().await;
                return Err(self.origin_error(err));
            }
        };
        if known_etag.is_some() {
            self.metrics().revalidations.with_label_values(&["changed"]).inc();
        }
        let head = object_head(fetched.head.clone());
        let refused = options.conditions.check(&head).err();
        let filling = Filling {
            lock,
            flight,
            permits,
            started,
        };
        let client_body = self.spawn_fill(filling, bucket.id, key.to_owned(), *fetched);
        if let Some(refused) = refused {
            return Err(refused);
        }
        Ok(ObjectRead {
            span: (0, head.size),
            partial: false,
            head,
            body: Box::pin(ChannelBody(client_body)),
        })
    }

    /// Stores `fetched` in a task of its own, streaming it to the returned receiver as it goes.
    fn spawn_fill(
        &self,
        filling: Filling,
        bucket_id: i64,
        key: String,
        fetched: origin::Fetched,
    ) -> mpsc::Receiver<StoreResult<Bytes>> {
        let Filling {
            mut lock,
            flight,
            permits,
            started,
        } = filling;
        let (client_side, client_body) = mpsc::channel(4);
        let tier = self.clone();
        tokio::spawn(async move {
            // The fill goes on if the client leaves: the next reader gets a warm entry.
            let outcome = tier.store_fill(&mut lock, bucket_id, &key, fetched, &client_side).await;
            // Counted before the lock goes, so whoever waited for this fill sees it counted.
            let metrics = tier.metrics();
            match &outcome {
                Ok(size) => {
                    metrics.fills.with_label_values(&["ok"]).inc();
                    metrics.fill_bytes.inc_by(*size);
                    metrics.fill_seconds.observe(started.elapsed().as_secs_f64());
                }
                Err(err) => {
                    metrics.fills.with_label_values(&["failed"]).inc();
                    tracing::warn!(bucket_id, key, error = %err, "cache fill failed");
                }
            }
            lock.release().await;
            drop((flight, permits));
            match outcome {
                // The entry is written after the body's last byte went to the reader: a bucket
                // dropped meanwhile (the entry not written) takes nothing from this read.
                Ok(_) | Err(StoreError::NoSuchBucket) => {}
                Err(err) => {
                    let _ = client_side.send(Err(err)).await;
                }
            }
        });
        client_body
    }

    /// Copies an origin body into the cache and to the client at once. Returns the size.
    async fn store_fill(
        &self,
        lock: &mut FillLock,
        bucket_id: i64,
        key: &str,
        fetched: origin::Fetched,
        client: &mpsc::Sender<StoreResult<Bytes>>,
    ) -> StoreResult<u64> {
        let origin::Fetched { head, mut body, .. } = fetched;
        let (to_store, store_body) = mpsc::channel(4);
        let write = lock.store(bucket_id, key, &head, Box::pin(ChannelBody(store_body)));
        let pump = async move {
            while let Some(piece) = body.next().await {
                let piece = match piece {
                    Ok(bytes) => bytes,
                    Err(err) => {
                        let _ = to_store.send(Err(err)).await;
                        return;
                    }
                };
                // A client that went away does not stop the fill.
                let _ = client.send(Ok(piece.clone())).await;
                if to_store.send(Ok(piece)).await.is_err() {
                    return;
                }
            }
        };
        let (written, ()) = tokio::join!(write, pump);
        written.map(|()| head.size)
    }

    /// On a hot standby nothing can be filled: a stale entry is revalidated (and served if
    /// unchanged), anything else comes from the origin.
    async fn standby_read(
        &self,
        bucket: &Arc<BucketInfo>,
        remote: &Remote,
        key: &str,
        options: &ReadOptions,
    ) -> StoreResult<ObjectRead> {
        let current = self.store().cache_lookup(bucket, key, false, Duration::ZERO).await?;
        let known_etag = current
            .filter(|entry| !entry.absent() && !entry.pending)
            .map(|entry| entry.head.etag);
        if let Some(etag) = known_etag {
            match remote.client.get(key, None, Some(&etag)).await {
                Ok(Fetch::NotModified) => {
                    self.metrics().revalidations.with_label_values(&["unchanged"]).inc();
                    return self.serve_cached(bucket, key, options).await;
                }
                Ok(Fetch::Body(fetched)) => {
                    self.metrics().passthrough.with_label_values(&["standby"]).inc();
                    let head = object_head(fetched.head);
                    options.conditions.check(&head)?;
                    return Ok(ObjectRead {
                        span: (0, head.size),
                        partial: false,
                        head,
                        body: fetched.body,
                    });
                }
                Err(err) => return Err(self.origin_error(err)),
            }
        }
        self.pass_through(remote, key, options, "standby").await
    }

    fn touch(&self, bucket_id: i64, key: &str) {
        let mut touched = self.inner.touched.lock().expect("touched lock");
        if touched.values().map(HashSet::len).sum::<usize>() < MAX_TOUCHED {
            touched.entry(bucket_id).or_default().insert(key.to_owned());
        }
    }

    /// Records last-use times of entries read since the last call.
    pub async fn flush_touched(&self) -> StoreResult<()> {
        let touched = std::mem::take(&mut *self.inner.touched.lock().expect("touched lock"));
        for (bucket_id, keys) in touched {
            let keys: Vec<String> = keys.into_iter().collect();
            self.store().cache_touch(bucket_id, &keys).await?;
        }
        Ok(())
    }

    /// PUT to a cache bucket.
    pub async fn put(
        &self,
        bucket: &Arc<BucketInfo>,
        key: &str,
        upload: Upload,
        condition: &WriteCondition,
    ) -> StoreResult<PutOutcome> {
        let remote = self.remote(bucket)?;
        let origin = &remote.origin;
        if self.store().cache_pending(bucket.id, key).await? {
            // A body for this key waits for its upload: this one queues behind it, so the
            // origin receives them in order.
            return self.stage(bucket, key, upload, condition, false).await;
        }
        let Upload {
            mut meta,
            mut body,
            declared_len,
            mut observer,
            encryption,
        } = upload;
        let threshold = origin.write_back_threshold.max(1);
        // Below the threshold the body is held in memory for the origin PUT, when memory is
        // free; else it goes the way of a large body, staged in PostgreSQL.
        let most = declared_len.map_or(threshold - 1, |len| len.min(threshold - 1));
        let buffer = declared_len
            .is_none_or(|len| len < threshold)
            .then(|| self.inner.buffers.try_reserve(most, "write_through"))
            .flatten();
        let (buffered, ended) = match buffer {
            Some(_) => read_prefix(&mut body, most).await?,
            None => (BytesMut::new(), false),
        };
        if !ended {
            let first = buffered.freeze();
            let rest = futures::stream::once(async move { Ok(first) }).chain(body);
            let upload = Upload {
                meta,
                body: Box::pin(rest),
                declared_len,
                observer,
                encryption,
            };
            let wait_for_origin = origin.mode != CacheMode::WriteBack;
            return self.stage(bucket, key, upload, condition, wait_for_origin).await;
        }
        let body = buffered.freeze();
        let size = body.len() as u64;
        check_declared_length(declared_len, size)?;
        observer.update(&body);
        let digest: [u8; 16] = Md5::digest(&body).into();
        meta.checksum = observer.finish(size, &digest)?;
        let etag = remote
            .client
            .put(key, &meta, body.clone(), condition)
            .await
            .map_err(|err| self.origin_error(err))?;
        let head = EntryHead {
            size,
            etag,
            last_modified: SystemTime::now(),
            meta,
        };
        self.record_put(bucket.id, key, origin.mode, &head, body).await?;
        Ok(PutOutcome {
            etag: head.etag,
            size,
            last_modified: head.last_modified,
            checksum: head.meta.checksum,
            version_id: None,
            tags: head.meta.tags,
        })
    }

    /// The origin has the write: its event is raised with what the cache records of it (a
    /// gateway that dies before that commits raises none, and its client hears nothing).
    async fn record_put(
        &self,
        bucket_id: i64,
        key: &str,
        mode: CacheMode,
        head: &EntryHead,
        body: Bytes,
    ) -> StoreResult<()> {
        let event = WriteEvent {
            name: "ObjectCreated:Put",
            size: Some(head.size),
            etag: Some(&head.etag),
        };
        if mode == CacheMode::ReadThrough {
            self.store().cache_forget(bucket_id, key, &event).await
        } else {
            let body: BodyStream = Box::pin(futures::stream::once(async move { Ok(body) }));
            self.store().cache_store(bucket_id, key, head, body, Some(&event)).await
        }
    }

    /// Stores a body in the bucket's write-back namespace (which queues its upload in the same
    /// transaction), then either acknowledges it or uploads it first.
    async fn stage(
        &self,
        bucket: &Arc<BucketInfo>,
        key: &str,
        upload: Upload,
        condition: &WriteCondition,
        wait_for_origin: bool,
    ) -> StoreResult<PutOutcome> {
        let outcome = self.store().put_object(bucket, key, upload, condition).await?;
        self.written_here(bucket, key, wait_for_origin).await?;
        Ok(outcome)
    }

    /// Whether a write of `size` bytes into a cache bucket reaches the origin before it is
    /// acknowledged: always, but in write-back mode for bodies of the threshold or more.
    pub fn waits_for_origin(bucket: &BucketInfo, size: u64) -> bool {
        bucket
            .origin
            .as_ref()
            .is_some_and(|origin| origin.mode != CacheMode::WriteBack || size < origin.write_back_threshold.max(1))
    }

    /// Settles a body just committed to the cache bucket's own namespace (whose trigger queued
    /// its upload in the same transaction): the upload worker is woken, or, when the client must
    /// not hear of the write before the origin has it, the upload runs now, and if it fails
    /// the write is undone (the client hears that it failed, so it must not happen later).
    /// PUT, copy and multipart completion into a cache bucket all end here.
    pub async fn written_here(&self, bucket: &BucketInfo, key: &str, wait_for_origin: bool) -> StoreResult<()> {
        if !wait_for_origin {
            self.inner.uploads_due.notify_one();
            return Ok(());
        }
        if let Some(due) = self.store().outbox_row(bucket.id, key).await?
            && let Err(err) = self.upload(&due).await
        {
            self.store().cache_drop_pending(bucket.id, key, false).await?;
            return Err(err);
        }
        Ok(())
    }

    /// DELETE from a cache bucket: the origin's copy goes first, then the cached one.
    pub async fn delete(&self, bucket: &Arc<BucketInfo>, key: &str) -> StoreResult<()> {
        let remote = self.remote(bucket)?;
        if self.store().cache_pending(bucket.id, key).await? {
            self.store().cache_drop_pending(bucket.id, key, true).await?;
        }
        match remote.client.delete(key).await {
            Ok(()) | Err(OriginError::Missing) => {}
            Err(err) => return Err(self.origin_error(err)),
        }
        // Raised whenever the origin took the delete: S3 answers 204 whether or not it had the
        // key, so the cache cannot tell a delete of nothing.
        let event = WriteEvent {
            name: "ObjectRemoved:Delete",
            size: None,
            etag: None,
        };
        self.store().cache_forget(bucket.id, key, &event).await
    }

    /// Lists the origin bucket (pending write-backs appear once uploaded).
    pub async fn list(&self, bucket: &BucketInfo, request: &ListRequest) -> StoreResult<ListPage> {
        let remote = self.remote(bucket)?;
        remote.client.list(request).await.map_err(|err| self.origin_error(err))
    }

    /// Checks that an origin is reachable with its credentials, for `admin origin put`.
    pub async fn verify(
        origin: &Origin,
        timeout: Duration,
        tls: &OriginTls,
        addresses: OriginAddresses,
    ) -> StoreResult<()> {
        OriginClient::new(origin, timeout, tls, addresses)?
            .verify()
            .await
            .map_err(StoreError::from)
    }
}

/// A fill slot of the bucket and of the process, held until the fill ends.
/// What a fill holds until its body is stored: the fill lock, this process's flight for the
/// key and the fill permits, and when it began.
struct Filling {
    lock: FillLock,
    flight: OwnedMutexGuard<()>,
    permits: FillPermits,
    started: Instant,
}

/// The aligned chunks a range fill fetched: the object's head, the bytes' span in it and the
/// bytes.
struct FetchedRange {
    head: EntryHead,
    span: (u64, u64),
    data: Bytes,
}

/// The asked range out of the chunks a range fill fetched.
/// The client's `range` of the aligned chunks fetched, its body holding the fill's reservation.
fn range_answer(
    range: ByteRange,
    options: &ReadOptions,
    fetched: FetchedRange,
    reservation: Reservation,
) -> StoreResult<ObjectRead> {
    let FetchedRange {
        head,
        span: fetched,
        data,
    } = fetched;
    let head = object_head(head);
    options.conditions.check(&head)?;
    let span = range.resolve(head.size)?;
    if span.0 < fetched.0 || span.1 > fetched.1 {
        return Err(StoreError::OriginFailed(OriginFault::plain(
            "the origin answered another range than asked",
        )));
    }
    let bytes = data.slice((span.0 - fetched.0) as usize..(span.1 - fetched.0) as usize);
    Ok(ObjectRead {
        head,
        span,
        partial: true,
        body: held_body(bytes, reservation),
    })
}

struct FillPermits {
    _bucket: OwnedSemaphorePermit,
    _process: OwnedSemaphorePermit,
}

impl FillPermits {
    async fn acquire(remote: &Remote, process: &Arc<Semaphore>) -> FillPermits {
        FillPermits {
            _bucket: Arc::clone(&remote.fills).acquire_owned().await.expect("never closed"),
            _process: Arc::clone(process).acquire_owned().await.expect("never closed"),
        }
    }
}

/// The answer to a HEAD of an object whose head is known.
fn head_read(head: ObjectHead, options: &ReadOptions) -> StoreResult<ObjectRead> {
    options.conditions.check(&head)?;
    let (span, partial) = match (options.range, options.part_number) {
        (Some(range), _) => (range.resolve(head.size)?, true),
        (None, Some(1) | None) => ((0, head.size), false),
        (None, Some(_)) => return Err(StoreError::InvalidPartNumber),
    };
    Ok(ObjectRead {
        head,
        span,
        partial,
        body: Box::pin(futures::stream::empty()),
    })
}

/// The origin could not answer (unreachable, timed out, throttled, a server error), as
/// opposed to answering that the key is missing or the cache may not have it.
fn origin_unavailable(err: &StoreError) -> bool {
    matches!(
        err,
        StoreError::OriginFailed(_) | StoreError::OriginTimeout(_) | StoreError::OriginThrottled(_)
    )
}

fn object_head(head: EntryHead) -> ObjectHead {
    ObjectHead {
        version_id: None,
        size: head.size,
        etag: head.etag,
        last_modified: head.last_modified,
        meta: head.meta,
    }
}
