//! The cache tier's tables: entries filled from an origin (`s3c`), bodies written to the cache
//! bucket (its own namespace `s3w`: pending until `pgvs3.origin_outbox` has seen them uploaded,
//! then clean cache entries where they are), freshness, fill locks and eviction. `crate::cache`
//! decides what to do; this module knows the layout.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use deadpool_postgres::{GenericClient, Object, Pool};
use md5::{Digest, Md5};
use tokio_postgres::types::Json;

use super::bodies::{check_length, locate, read_prefix, stored_body, write_chunks};
use super::chunks::worth_compressing;
use super::conditions::Preconditions;
use super::objects::{
    BUCKET_HELD, BodyStream, ByteRange, INLINE_LIMIT, NamespaceSql, ObjectHead, ObjectMeta, ObjectRead, ReadOptions,
};
use super::{BucketInfo, Store, StoreError, StoreResult};
use crate::admission::{BufferBudget, Reservation};
use crate::pg::checkout::checkout;

/// The namespace that holds the entries of every cache bucket filled from its origin.
const FILLED: &str = "s3c";

struct CacheSql {
    filled: NamespaceSql,
    lookup_get: String,
    lookup_head: String,
    upsert_entry: String,
    mark_validated: String,
    forget: String,
    touch: String,
    cached_bytes: String,
    evict: String,
    pending: String,
    queued: String,
    due: String,
    retry_later: String,
    settle: String,
    drop_pending: String,
    raise_owed: String,
    raise_event: String,
    outbox_depth: String,
    range_size: String,
    range_chunks: String,
    range_head: String,
    store_ranges: String,
    drop_other_ranges: String,
    supersede: String,
}

static SQL: LazyLock<CacheSql> = LazyLock::new(|| {
    // A body written here (s3w) is newer than anything filled from the origin, so it is looked
    // at first: pending, it is always served; clean (uploaded, `origin_etag` set), it is an
    // entry like a filled one. An entry is fresh while the origin vouched for it within the TTL;
    // a filled entry with an empty ETag records that the origin had no such key (negative
    // caching).
    let lookup = |body: &str| {
        format!(
            "SELECT size, coalesce(origin_etag, etag) AS etag, last_modified, meta, {body} AS inline, body_id,
                    origin_etag IS NULL AS pending,
                    origin_etag IS NULL OR validated_at > now() - make_interval(secs => $3::float8) AS fresh,
                    origin_etag IS NOT NULL AND accessed_at < now() - interval '1 minute' AS use_unrecorded,
                    true AS written_here
               FROM s3w.objects WHERE bucket_id = $1 AND key = $2
             UNION ALL
             SELECT size, etag, last_modified, meta, {body}, body_id, false,
                    validated_at > now() - make_interval(secs => CASE WHEN etag = '' THEN $4::float8 ELSE $3::float8 END),
                    accessed_at < now() - interval '1 minute', false
               FROM s3c.objects WHERE bucket_id = $1 AND key = $2
             LIMIT 1"
        )
    };
    CacheSql {
        filled: NamespaceSql::new(FILLED),
        lookup_get: lookup("inline"),
        lookup_head: lookup("NULL::bytea"),
        // Written only into a bucket the write holds (BUCKET_HELD, before the row can wait for
        // another's): a fill racing the bucket's drop commits first, and goes with it, or
        // writes nothing.
        upsert_entry: format!(
            "INSERT INTO s3c.objects (bucket_id, key, size, etag, last_modified, meta, inline, body_id)
                       SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE {BUCKET_HELD}
                       ON CONFLICT (bucket_id, key) DO UPDATE
                          SET size = EXCLUDED.size, etag = EXCLUDED.etag, last_modified = EXCLUDED.last_modified,
                              meta = EXCLUDED.meta, inline = EXCLUDED.inline, body_id = EXCLUDED.body_id,
                              validated_at = now(), accessed_at = now()"
        ),
        mark_validated: "WITH clean AS (UPDATE s3w.objects SET validated_at = now()
                                           WHERE bucket_id = $1 AND key = $2 AND origin_etag = $3)
                         UPDATE s3c.objects SET validated_at = now() WHERE bucket_id = $1 AND key = $2 AND etag = $3"
            .into(),
        // A pending body is not the cache's to forget: it exists nowhere else.
        forget: "WITH chunks AS (DELETE FROM s3c.ranges WHERE bucket_id = $1 AND key = $2),
                      clean AS (DELETE FROM s3w.objects WHERE bucket_id = $1 AND key = $2 AND origin_etag IS NOT NULL)
                 DELETE FROM s3c.objects WHERE bucket_id = $1 AND key = $2"
            .into(),
        // A key's range chunks are used together (a footer, then the column chunks it points
        // at), so a read of any of them counts as a use of all.
        touch: format!(
            "WITH ranges AS (UPDATE s3c.ranges r SET accessed_at = now() FROM {named}
                              WHERE r.bucket_id = $1 AND r.key = n.k),
                  clean AS (UPDATE s3w.objects o SET accessed_at = now() FROM {named}
                             WHERE o.bucket_id = $1 AND o.key = n.k AND o.origin_etag IS NOT NULL)
             UPDATE s3c.objects o SET accessed_at = now() FROM {named} WHERE o.bucket_id = $1 AND o.key = n.k",
            named = super::key_probes::named_keys("$2", "n")
        ),
        cached_bytes: "SELECT ((SELECT coalesce(sum(size), 0) FROM s3c.objects WHERE bucket_id = $1)
                             + (SELECT coalesce(sum(size), 0) FROM s3w.objects
                                 WHERE bucket_id = $1 AND origin_etag IS NOT NULL)
                             + (SELECT coalesce(sum(length(data)), 0) FROM s3c.ranges WHERE bucket_id = $1))::bigint
                       AS cached"
            .into(),
        // The least recently used filled entries, clean written-back bodies and range chunks,
        // in one order, whose sizes add up to the excess `$2`; at most `$3` rows. A body that
        // became pending again meanwhile is kept by the re-checked `origin_etag`.
        evict: "WITH oldest AS (
                    SELECT source, victim, len,
                           sum(len) OVER (ORDER BY accessed_at, key, chunk ROWS UNBOUNDED PRECEDING) AS running
                      FROM (SELECT 'filled' AS source, ctid AS victim, size AS len, accessed_at, key, -1 AS chunk
                              FROM s3c.objects WHERE bucket_id = $1
                            UNION ALL
                            SELECT 'clean', ctid, size, accessed_at, key, -1
                              FROM s3w.objects WHERE bucket_id = $1 AND origin_etag IS NOT NULL
                            UNION ALL
                            SELECT 'range', ctid, length(data)::bigint, accessed_at, key, chunk
                              FROM s3c.ranges WHERE bucket_id = $1
                            ORDER BY accessed_at, key, chunk LIMIT $3) candidates),
                victims AS (SELECT source, victim FROM oldest WHERE running - len < $2::bigint),
                filled AS (DELETE FROM s3c.objects
                            WHERE ctid = ANY(ARRAY(SELECT victim FROM victims WHERE source = 'filled'))
                           RETURNING size),
                clean AS (DELETE FROM s3w.objects
                           WHERE ctid = ANY(ARRAY(SELECT victim FROM victims WHERE source = 'clean'))
                             AND origin_etag IS NOT NULL
                          RETURNING size),
                ranges AS (DELETE FROM s3c.ranges
                            WHERE ctid = ANY(ARRAY(SELECT victim FROM victims WHERE source = 'range'))
                           RETURNING length(data)::bigint AS len)
                SELECT size FROM filled UNION ALL SELECT size FROM clean UNION ALL SELECT len FROM ranges"
            .into(),
        pending: "SELECT EXISTS (SELECT 1 FROM pgvs3.origin_outbox WHERE bucket_id = $1 AND key = $2) AS pending,
                         pg_is_in_recovery() AS in_recovery"
            .into(),
        queued:
            "SELECT bucket_id, key, generation, attempts FROM pgvs3.origin_outbox WHERE bucket_id = $1 AND key = $2"
                .into(),
        due: "SELECT bucket_id, key, generation, attempts FROM pgvs3.origin_outbox
               WHERE next_attempt_at <= now() ORDER BY next_attempt_at LIMIT $1"
            .into(),
        retry_later: "UPDATE pgvs3.origin_outbox
                         SET attempts = attempts + 1, next_attempt_at = now() + make_interval(secs => $4),
                             last_error = $5
                       WHERE bucket_id = $1 AND key = $2 AND generation = $3"
            .into(),
        // The upload's own function (functions/cache.sql): it also raises the event the body owed.
        settle: "SELECT pgvs3.settle_write_back($1, $2, $3, $4)".into(),
        drop_pending: "WITH queued AS (DELETE FROM pgvs3.origin_outbox WHERE bucket_id = $1 AND key = $2 RETURNING 1)
                       DELETE FROM s3w.objects WHERE bucket_id = $1 AND key = $2"
            .into(),
        raise_owed: "SELECT pgvs3.raise_owed_event($1, $2, owed_event) FROM pgvs3.origin_outbox
                      WHERE bucket_id = $1 AND key = $2 AND owed_event IS NOT NULL"
            .into(),
        raise_event: "SELECT pgvs3.emit_object_event($1, $2, $3, $4, $5, NULL)".into(),
        outbox_depth:
            "SELECT count(*) AS depth, coalesce(extract(epoch FROM now() - min(enqueued_at)), 0)::float8 AS age
                         FROM pgvs3.origin_outbox"
                .into(),
        range_size: "SELECT size FROM s3c.ranges WHERE bucket_id = $1 AND key = $2 AND chunk_size = $3 LIMIT 1".into(),
        range_chunks: "SELECT chunk, size, etag, last_modified, meta, data,
                              validated_at > now() - make_interval(secs => $5::float8) AS fresh,
                              accessed_at < now() - interval '1 minute' AS use_unrecorded
                         FROM s3c.ranges
                        WHERE bucket_id = $1 AND key = $2 AND chunk_size = $3 AND chunk = ANY($4)
                        ORDER BY chunk"
            .into(),
        // Every chunk of a key has the same head (other versions' chunks are dropped when one
        // is stored): the most recently validated tells it.
        range_head: "SELECT size, etag, last_modified, meta FROM s3c.ranges
                      WHERE bucket_id = $1 AND key = $2 AND validated_at > now() - make_interval(secs => $3::float8)
                      ORDER BY validated_at DESC LIMIT 1"
            .into(),
        // Held as upsert_entry holds it, once for the statement (an initplan, before any row).
        store_ranges: format!(
            "INSERT INTO s3c.ranges (bucket_id, key, chunk, chunk_size, size, etag, last_modified, meta, data)
                       SELECT $1, $2, c.chunk, $3, $4, $5, $6, $7, c.data
                         FROM unnest($8::int[], $9::bytea[]) AS c(chunk, data) WHERE (SELECT {BUCKET_HELD})
                       ON CONFLICT (bucket_id, key, chunk) DO UPDATE
                          SET chunk_size = EXCLUDED.chunk_size, size = EXCLUDED.size, etag = EXCLUDED.etag,
                              last_modified = EXCLUDED.last_modified, meta = EXCLUDED.meta, data = EXCLUDED.data,
                              validated_at = now(), accessed_at = now()"
        ),
        drop_other_ranges:
            "DELETE FROM s3c.ranges WHERE bucket_id = $1 AND key = $2 AND (etag <> $3 OR chunk_size <> $4)".into(),
        // A whole body filled from the origin replaces its range chunks and a clean body
        // written here (never a pending one).
        supersede:
            "WITH clean AS (DELETE FROM s3w.objects WHERE bucket_id = $1 AND key = $2 AND origin_etag IS NOT NULL)
                    DELETE FROM s3c.ranges WHERE bucket_id = $1 AND key = $2"
                .into(),
    }
});

/// The answer of [`Store::cache_range`].
pub enum RangeLookup {
    /// `use_unrecorded`: the chunks' last use is over a minute old, so this one should be
    /// recorded (eviction goes by last use).
    Hit {
        read: Box<ObjectRead>,
        use_unrecorded: bool,
    },
    Miss {
        size: Option<u64>,
    },
}

/// What the cache holds for a key.
pub struct CacheEntry {
    pub head: ObjectHead,
    /// Written here and acknowledged, not yet at the origin. Always served, never revalidated.
    pub pending: bool,
    /// Within the TTL (or pending).
    pub fresh: bool,
    /// A filled entry whose recorded last use is over a minute old: worth recording this one
    /// (a hot key is not rewritten on every read).
    pub use_unrecorded: bool,
    /// The body was written to the cache bucket (its own namespace), not filled from the origin.
    written_here: bool,
    inline: Option<Bytes>,
    body_id: Option<i64>,
}

impl CacheEntry {
    /// A negative entry: the origin answered 404 for this key.
    pub fn absent(&self) -> bool {
        !self.pending && self.head.etag.is_empty()
    }
}

/// The head of a body fetched from an origin, as it will be cached.
#[derive(Debug, Clone)]
pub struct EntryHead {
    pub size: u64,
    pub etag: String,
    pub last_modified: SystemTime,
    pub meta: ObjectMeta,
}

/// An outbox row due for upload.
#[derive(Debug, Clone)]
pub struct DueUpload {
    pub bucket_id: i64,
    pub key: String,
    pub generation: i64,
    pub attempts: i32,
}

fn due_from_row(row: &tokio_postgres::Row) -> DueUpload {
    DueUpload {
        bucket_id: row.get("bucket_id"),
        key: row.get("key"),
        generation: row.get("generation"),
        attempts: row.get("attempts"),
    }
}

fn secs(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

fn entry_from_row(row: &tokio_postgres::Row) -> CacheEntry {
    CacheEntry {
        head: ObjectHead::from_row(row),
        inline: row.get::<_, Option<&[u8]>>("inline").map(Bytes::copy_from_slice),
        body_id: row.get("body_id"),
        pending: row.get("pending"),
        fresh: row.get("fresh"),
        use_unrecorded: row.get("use_unrecorded"),
        written_here: row.get("written_here"),
    }
}

/// `grace`: how long past the TTL an entry still counts as fresh (negative entries get none).
async fn lookup(
    db: &impl GenericClient,
    bucket: &BucketInfo,
    key: &str,
    with_body: bool,
    grace: Duration,
) -> StoreResult<Option<CacheEntry>> {
    let origin = bucket.origin.as_ref().ok_or(StoreError::NoSuchBucket)?;
    let sql = if with_body { &SQL.lookup_get } else { &SQL.lookup_head };
    let statement = db.prepare_cached(sql).await?;
    let row = db
        .query_opt(
            &statement,
            &[
                &bucket.id,
                &key,
                &secs(origin.ttl.saturating_add(grace)),
                &secs(origin.negative_ttl),
            ],
        )
        .await?;
    Ok(row.as_ref().map(entry_from_row))
}

/// Writes a filled entry from `body` in one transaction: nothing is visible unless the whole
/// body arrived with the length the origin declared.
async fn write_entry(
    client: &mut Object,
    bucket_id: i64,
    key: &str,
    head: &EntryHead,
    mut body: BodyStream,
    event: Option<&WriteEvent<'_>>,
) -> StoreResult<()> {
    let (first, ended) = read_prefix(&mut body, INLINE_LIMIT as u64).await?;
    let size = head.size as i64;
    let meta = Json(&head.meta);
    let tx = client.transaction().await?;
    let (inline, body_id) = if ended {
        check_length(Some(head.size), first.len() as u64)?;
        (Some(first.freeze()), None)
    } else {
        let compress = worth_compressing(head.meta.content_type.as_deref());
        // The origin's ETag is the entry's: no digest of its own.
        let (body_id, received) = write_chunks(&tx, &SQL.filled, compress, first, &mut body, None, None).await?;
        check_length(Some(head.size), received)?;
        (None, Some(body_id))
    };
    let statement = tx.prepare_cached(&SQL.upsert_entry).await?;
    let written = tx
        .execute(
            &statement,
            &[
                &bucket_id,
                &key,
                &size,
                &head.etag,
                &head.last_modified,
                &meta,
                &inline.as_deref(),
                &body_id,
            ],
        )
        .await?;
    if written == 0 {
        // The bucket went while the body came: dropped with the transaction, chunks and all.
        return Err(StoreError::NoSuchBucket);
    }
    tx.execute(&SQL.supersede, &[&bucket_id, &key]).await?;
    if let Some(event) = event {
        raise(&tx, bucket_id, key, event).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// An object event of a client's write through a cache bucket that the origin took first
/// (bucket notifications), raised in the transaction that records the write in the cache (its
/// entry, or its invalidation), after the origin accepted it. Writes staged here raise theirs
/// from the s3w triggers (functions/cache.sql); fills from the origin raise none.
pub struct WriteEvent<'a> {
    /// `ObjectCreated:Put`, `ObjectRemoved:Delete`, ...
    pub name: &'static str,
    pub size: Option<u64>,
    pub etag: Option<&'a str>,
}

async fn raise(db: &impl GenericClient, bucket_id: i64, key: &str, event: &WriteEvent<'_>) -> StoreResult<()> {
    let size = event.size.map(|size| size as i64);
    let statement = db.prepare_cached(&SQL.raise_event).await?;
    db.execute(&statement, &[&bucket_id, &key, &event.name, &size, &event.etag])
        .await?;
    Ok(())
}

/// A session-level advisory lock on one cache key for one purpose, with the connection that
/// holds it. Dropped without `release`, it closes its connection, which releases the lock.
struct KeyLock {
    client: Option<Object>,
    key: i64,
}

impl KeyLock {
    async fn acquire(client: Object, purpose: &str, bucket_id: i64, key: &str) -> StoreResult<KeyLock> {
        let key = lock_key(purpose, bucket_id, key);
        client.execute("SELECT pg_advisory_lock($1)", &[&key]).await?;
        Ok(KeyLock {
            client: Some(client),
            key,
        })
    }

    fn client(&mut self) -> &mut Object {
        self.client.as_mut().expect("held until release")
    }

    async fn release(mut self) {
        let client = self.client.take().expect("held until release");
        if client
            .execute("SELECT pg_advisory_unlock($1)", &[&self.key])
            .await
            .is_err()
        {
            // Unsure whether the lock is still held: do not hand the session to anyone else.
            let _ = Object::take(client);
        }
    }
}

impl Drop for KeyLock {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = Object::take(client);
        }
    }
}

/// A 64-bit advisory lock key for one purpose on one cache key.
fn lock_key(purpose: &str, bucket_id: i64, key: &str) -> i64 {
    let mut md5 = Md5::new();
    md5.update(purpose.as_bytes());
    md5.update(bucket_id.to_le_bytes());
    md5.update(key.as_bytes());
    let digest = md5.finalize();
    i64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
}

/// Held by the one gateway that fills a key, so concurrent misses on that key from every
/// gateway of the database wait for one origin GET instead of making their own. The fill
/// commits in its own transaction while the lock stays held.
pub struct FillLock(KeyLock);

impl FillLock {
    /// Waits for any other fill of the key to end. A hot standby cannot fill: `ReadOnly`.
    pub async fn acquire(pool: &Pool, bucket_id: i64, key: &str) -> StoreResult<FillLock> {
        let client = checkout(pool).await?;
        let standby: bool = client
            .query_one("SELECT pg_is_in_recovery() AS in_recovery", &[])
            .await?
            .get("in_recovery");
        if standby {
            return Err(StoreError::ReadOnly);
        }
        Ok(FillLock(KeyLock::acquire(client, "fill", bucket_id, key).await?))
    }

    /// Looks again, now that no other fill of this key is running.
    pub async fn lookup(&mut self, bucket: &BucketInfo, key: &str) -> StoreResult<Option<CacheEntry>> {
        lookup(&*self.0.client(), bucket, key, false, Duration::ZERO).await
    }

    pub async fn store(&mut self, bucket_id: i64, key: &str, head: &EntryHead, body: BodyStream) -> StoreResult<()> {
        write_entry(self.0.client(), bucket_id, key, head, body, None).await
    }

    /// The origin confirmed that the cached body (with `etag`) is still current.
    pub async fn mark_validated(&mut self, bucket_id: i64, key: &str, etag: &str) -> StoreResult<()> {
        let client = self.0.client();
        let statement = client.prepare_cached(&SQL.mark_validated).await?;
        client.execute(&statement, &[&bucket_id, &key, &etag]).await?;
        Ok(())
    }

    /// Remembers that the origin has no such key (until the negative TTL passes).
    pub async fn remember_absent(&mut self, bucket_id: i64, key: &str) -> StoreResult<()> {
        let head = EntryHead {
            size: 0,
            etag: String::new(),
            last_modified: SystemTime::now(),
            meta: ObjectMeta::default(),
        };
        self.store(bucket_id, key, &head, Box::pin(futures::stream::empty()))
            .await
    }

    pub async fn forget(&mut self, bucket_id: i64, key: &str) -> StoreResult<()> {
        forget(&*self.0.client(), bucket_id, key).await
    }

    pub async fn release(self) {
        self.0.release().await
    }
}

async fn forget(db: &impl GenericClient, bucket_id: i64, key: &str) -> StoreResult<()> {
    let statement = db.prepare_cached(&SQL.forget).await?;
    db.execute(&statement, &[&bucket_id, &key]).await?;
    Ok(())
}

impl Store {
    /// Looks a key up in a cache bucket: its pending body, else its filled entry. `grace`: how
    /// long past the TTL the entry still counts as fresh (zero but when the origin fails).
    pub async fn cache_lookup(
        &self,
        bucket: &BucketInfo,
        key: &str,
        with_body: bool,
        grace: Duration,
    ) -> StoreResult<Option<CacheEntry>> {
        super::objects::check_key(key)?;
        let client = self.client().await?;
        lookup(&client, bucket, key, with_body, grace).await
    }

    /// The head of an object cached in range chunks only, if a chunk of it is fresh (within
    /// the TTL plus `grace`), so a HEAD of it needs no origin request.
    pub async fn cache_range_head(
        &self,
        bucket: &BucketInfo,
        key: &str,
        grace: Duration,
    ) -> StoreResult<Option<ObjectHead>> {
        let origin = bucket.origin.as_ref().ok_or(StoreError::NoSuchBucket)?;
        let client = self.client().await?;
        let statement = client.prepare_cached(&SQL.range_head).await?;
        let row = client
            .query_opt(&statement, &[&bucket.id, &key, &secs(origin.ttl.saturating_add(grace))])
            .await?;
        Ok(row.map(|row| ObjectHead::from_row(&row)))
    }

    /// Serves a read from a cached entry (found by [`Store::cache_lookup`]).
    pub async fn cache_read(
        &self,
        bucket: &BucketInfo,
        entry: CacheEntry,
        options: &ReadOptions,
        with_body: bool,
    ) -> StoreResult<ObjectRead> {
        let sql: &NamespaceSql = if entry.written_here { &bucket.sql } else { &SQL.filled };
        let client = self.client().await?;
        let multipart = entry.head.meta.parts.is_some();
        let (head, span, partial) = locate(&client, sql, entry.head, entry.body_id, options).await?;
        let size = head.size;
        let body = stored_body(
            self,
            client,
            sql,
            entry.inline,
            entry.body_id,
            size,
            multipart,
            span,
            with_body,
            // Cache buckets refuse server-side encryption: their bodies are the origin's bytes.
            None,
        )
        .await?;
        Ok(ObjectRead {
            head,
            span,
            partial,
            body,
        })
    }

    /// Caches a body the origin just sent or accepted (`event`: a client's write-through,
    /// whose event is raised with it).
    pub async fn cache_store(
        &self,
        bucket_id: i64,
        key: &str,
        head: &EntryHead,
        body: BodyStream,
        event: Option<&WriteEvent<'_>>,
    ) -> StoreResult<()> {
        let mut client = self.client().await?;
        write_entry(&mut client, bucket_id, key, head, body, event).await
    }

    /// Forgets what the cache holds of a key that a client's write or delete just changed at
    /// the origin, and raises that write's event with it.
    pub async fn cache_forget(&self, bucket_id: i64, key: &str, event: &WriteEvent<'_>) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        forget(&tx, bucket_id, key).await?;
        raise(&tx, bucket_id, key, event).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Whether a body for this key still waits for its upload. Asked before any write to a
    /// cache bucket, so it also refuses writes on a hot standby (before the origin sees them).
    pub async fn cache_pending(&self, bucket_id: i64, key: &str) -> StoreResult<bool> {
        super::objects::check_key(key)?;
        let client = self.client().await?;
        let statement = client.prepare_cached(&SQL.pending).await?;
        let row = client.query_one(&statement, &[&bucket_id, &key]).await?;
        if row.get::<_, bool>("in_recovery") {
            return Err(StoreError::ReadOnly);
        }
        Ok(row.get("pending"))
    }

    /// The outbox row of a key, if its body waits for an upload.
    pub async fn outbox_row(&self, bucket_id: i64, key: &str) -> StoreResult<Option<DueUpload>> {
        let client = self.client().await?;
        let statement = client.prepare_cached(&SQL.queued).await?;
        let row = client.query_opt(&statement, &[&bucket_id, &key]).await?;
        Ok(row.as_ref().map(due_from_row))
    }

    /// Drops a key's pending body and its outbox row, after waiting for an upload of it in
    /// progress (so that upload cannot land at the origin after the caller's delete). The event
    /// the body still owed is raised first when it was acknowledged (`acknowledged`: a client
    /// deletes the key), dropped with it when its write is being undone.
    pub async fn cache_drop_pending(&self, bucket_id: i64, key: &str, acknowledged: bool) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&lock_key("upload", bucket_id, key)],
        )
        .await?;
        if acknowledged {
            tx.execute(&SQL.raise_owed, &[&bucket_id, &key]).await?;
        }
        tx.execute(&SQL.drop_pending, &[&bucket_id, &key]).await?;
        forget(&tx, bucket_id, key).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Refreshes the last-use time of entries that were read, for eviction.
    pub async fn cache_touch(&self, bucket_id: i64, keys: &[String]) -> StoreResult<()> {
        let client = self.client().await?;
        client.execute(&SQL.touch, &[&bucket_id, &keys]).await?;
        Ok(())
    }

    /// Evicts until the bucket's entries fit `limit` bytes: filled whole entries, clean
    /// written-back bodies and range chunks alike, least recently used first. Pending bodies are
    /// neither counted nor evicted. Returns the number of rows evicted.
    pub async fn cache_evict(&self, bucket_id: i64, limit: u64) -> StoreResult<u64> {
        const BATCH: i64 = 100;
        let limit = limit.min(i64::MAX as u64) as i64;
        let client = self.client().await?;
        let mut cached: i64 = client.query_one(&SQL.cached_bytes, &[&bucket_id]).await?.get("cached");
        let mut evicted = 0;
        while cached > limit {
            let rows = client
                .query(&SQL.evict, &[&bucket_id, &(cached - limit), &BATCH])
                .await?;
            if rows.is_empty() {
                break;
            }
            evicted += rows.len() as u64;
            cached -= rows.iter().map(|row| row.get::<_, i64>("size")).sum::<i64>();
        }
        Ok(evicted)
    }

    /// A range read served from aligned chunks, if every chunk it needs is cached and fresh
    /// (within the TTL plus `grace`). On a miss, tells the object's size when a chunk of it is
    /// cached. The chunks are gathered in memory, so a range whose aligned chunks exceed
    /// `max_bytes` is a miss (the caller streams it from the origin) before any chunk is read:
    /// every chunk of a large object can end up cached, one bounded fill after another, and a
    /// `bytes=0-` of it must not then load it whole.
    #[allow(clippy::too_many_arguments)]
    pub async fn cache_range(
        &self,
        bucket: &BucketInfo,
        key: &str,
        range: ByteRange,
        chunk_size: u32,
        max_bytes: u64,
        conditions: &Preconditions,
        grace: Duration,
        buffers: &BufferBudget,
    ) -> StoreResult<RangeLookup> {
        let origin = bucket.origin.as_ref().ok_or(StoreError::NoSuchBucket)?;
        let client = self.client().await?;
        let chunk = u64::from(chunk_size);
        let chunk_size = chunk_size as i32;
        let ttl = secs(origin.ttl.saturating_add(grace));
        let too_large = |first: u64, last: u64| (last / chunk - first / chunk + 1).saturating_mul(chunk) > max_bytes;
        // An explicit range names its chunks; other forms need the size first.
        let guess: Vec<i32> = match range {
            ByteRange::From {
                first,
                last: Some(last),
            } if last >= first && !too_large(first, last) => (first / chunk..=last / chunk)
                .map(|c| c.min(i32::MAX as u64) as i32)
                .collect(),
            // Open, suffix, and explicit ranges past the bound (an end past the object's size
            // is common): sized first, then bounded by what the object really spans.
            _ => Vec::new(),
        };
        let statement = client.prepare_cached(&SQL.range_chunks).await?;
        // The chunks are gathered in memory and answered from there: their bytes are reserved
        // from the buffer budget until the answer's body is gone, and without room the range is
        // not served from the cache now (a miss: the caller goes to the origin, streaming).
        let reserve = |chunks: usize| buffers.try_reserve(chunks as u64 * chunk, "range_hit");
        let (rows, known_size, reservation) = if guess.is_empty() {
            let sized = client.prepare_cached(&SQL.range_size).await?;
            let Some(row) = client.query_opt(&sized, &[&bucket.id, &key, &chunk_size]).await? else {
                return Ok(RangeLookup::Miss { size: None });
            };
            let size = row.get::<_, i64>("size") as u64;
            let span = range.resolve(size)?;
            if too_large(span.0, span.1 - 1) {
                return Ok(RangeLookup::Miss { size: Some(size) });
            }
            let needed: Vec<i32> = (span.0 / chunk..=(span.1 - 1) / chunk).map(|c| c as i32).collect();
            let Some(reservation) = reserve(needed.len()) else {
                return Ok(RangeLookup::Miss { size: Some(size) });
            };
            let rows = client
                .query(&statement, &[&bucket.id, &key, &chunk_size, &needed, &ttl])
                .await?;
            (rows, Some(size), reservation)
        } else {
            let Some(reservation) = reserve(guess.len()) else {
                return Ok(RangeLookup::Miss { size: None });
            };
            let rows = client
                .query(&statement, &[&bucket.id, &key, &chunk_size, &guess, &ttl])
                .await?;
            (rows, None, reservation)
        };
        if rows.is_empty() {
            return Ok(RangeLookup::Miss { size: known_size });
        }
        assemble_range(&rows, range, chunk, conditions, reservation)
    }

    /// Caches the aligned chunks in `data`, which starts at chunk `first_chunk`; chunks of any
    /// other version of the object go.
    pub async fn cache_store_ranges(
        &self,
        bucket_id: i64,
        key: &str,
        head: &EntryHead,
        chunk_size: u32,
        first_chunk: u64,
        data: &Bytes,
    ) -> StoreResult<()> {
        let chunk = chunk_size as usize;
        let indexes: Vec<i32> = (0..data.len().div_ceil(chunk))
            .map(|i| (first_chunk + i as u64) as i32)
            .collect();
        let pieces: Vec<&[u8]> = data.chunks(chunk).collect();
        let size = head.size as i64;
        let chunk_size = chunk_size as i32;
        let meta = Json(&head.meta);
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // Stored first, holding the bucket, then the other versions' chunks go: a chunk the
        // delete locked before the bucket's lock could be one the bucket's drop waits for.
        let stored = tx
            .execute(
                &SQL.store_ranges,
                &[
                    &bucket_id,
                    &key,
                    &chunk_size,
                    &size,
                    &head.etag,
                    &head.last_modified,
                    &meta,
                    &indexes,
                    &pieces,
                ],
            )
            .await?;
        if stored == 0 && !indexes.is_empty() {
            return Err(StoreError::NoSuchBucket);
        }
        tx.execute(&SQL.drop_other_ranges, &[&bucket_id, &key, &head.etag, &chunk_size])
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Outbox rows whose upload is due, oldest first.
    pub async fn outbox_due(&self, limit: i64) -> StoreResult<Vec<DueUpload>> {
        let client = self.client().await?;
        let rows = client.query(&SQL.due, &[&limit]).await?;
        Ok(rows.iter().map(due_from_row).collect())
    }

    /// Rows waiting in the outbox and the age of the oldest, in seconds.
    pub async fn outbox_depth(&self) -> StoreResult<(i64, f64)> {
        let client = self.client().await?;
        let row = client.query_one(&SQL.outbox_depth, &[]).await?;
        Ok((row.get("depth"), row.get("age")))
    }

    /// Takes the key's upload lock, which a delete of the key waits for.
    pub async fn upload_lock(&self, due: &DueUpload) -> StoreResult<UploadLock> {
        let client = self.client().await?;
        Ok(UploadLock(
            KeyLock::acquire(client, "upload", due.bucket_id, &due.key).await?,
        ))
    }

    pub async fn retry_later(&self, due: &DueUpload, after: Duration, error: &str) -> StoreResult<()> {
        let client = self.client().await?;
        client
            .execute(
                &SQL.retry_later,
                &[&due.bucket_id, &due.key, &due.generation, &after.as_secs_f64(), &error],
            )
            .await?;
        Ok(())
    }
}

/// Held while one pending body is uploaded; see [`Store::upload_lock`].
pub struct UploadLock(KeyLock);

impl UploadLock {
    /// The pending body of `due`, if it is still the generation that was queued.
    pub async fn read_pending(
        &mut self,
        store: &Store,
        bucket: &Arc<BucketInfo>,
        due: &DueUpload,
    ) -> StoreResult<Option<ObjectRead>> {
        let client = self.0.client();
        let statement = client
            .prepare_cached("SELECT generation FROM pgvs3.origin_outbox WHERE bucket_id = $1 AND key = $2")
            .await?;
        let current = client.query_opt(&statement, &[&due.bucket_id, &due.key]).await?;
        if current.map(|row| row.get::<_, i64>("generation")) != Some(due.generation) {
            return Ok(None);
        }
        match lookup(&*client, bucket, &due.key, true, Duration::ZERO).await? {
            Some(entry) if entry.pending => store
                .cache_read(bucket, entry, &ReadOptions::default(), true)
                .await
                .map(Some),
            _ => Ok(None),
        }
    }

    /// The upload of `due` succeeded with `origin_etag`: the body becomes a clean cache entry
    /// and leaves the outbox, unless a newer body was queued meanwhile.
    pub async fn settle(&mut self, due: &DueUpload, origin_etag: &str) -> StoreResult<()> {
        let client = self.0.client();
        let statement = client.prepare_cached(&SQL.settle).await?;
        client
            .execute(&statement, &[&due.bucket_id, &due.key, &due.generation, &origin_etag])
            .await?;
        Ok(())
    }

    pub async fn release(self) {
        self.0.release().await
    }
}

/// A range read out of the cached chunks `rows` (at least one), if the chunks the range spans
/// are all there, fresh, in order and of one version.
fn assemble_range(
    rows: &[tokio_postgres::Row],
    range: ByteRange,
    chunk: u64,
    conditions: &Preconditions,
    reservation: Reservation,
) -> StoreResult<RangeLookup> {
    let first = &rows[0];
    let size = first.get::<_, i64>("size") as u64;
    let etag: String = first.get("etag");
    let span = range.resolve(size)?;
    let (first_chunk, last_chunk) = (span.0 / chunk, (span.1 - 1) / chunk);
    let mut data = BytesMut::new();
    let mut expected = first_chunk;
    let mut use_unrecorded = false;
    for row in rows {
        let index = row.get::<_, i32>("chunk") as u64;
        if index < first_chunk || index > last_chunk {
            continue;
        }
        let fresh: bool = row.get("fresh");
        if index != expected || !fresh || row.get::<_, &str>("etag") != etag {
            return Ok(RangeLookup::Miss { size: Some(size) });
        }
        data.extend_from_slice(row.get::<_, &[u8]>("data"));
        use_unrecorded |= row.get::<_, bool>("use_unrecorded");
        expected += 1;
    }
    if expected != last_chunk + 1 {
        return Ok(RangeLookup::Miss { size: Some(size) });
    }
    let head = ObjectHead::from_row(first);
    conditions.check(&head)?;
    let offset = first_chunk * chunk;
    let bytes = data
        .freeze()
        .slice((span.0 - offset) as usize..(span.1 - offset) as usize);
    Ok(RangeLookup::Hit {
        read: Box::new(ObjectRead {
            head,
            span,
            partial: true,
            body: held_body(bytes, reservation),
        }),
        use_unrecorded,
    })
}

/// The most of a [`held_body`] handed to the client at once: the rest stays in the stream,
/// counted in its reservation, until the client has taken what came before.
const HELD_FRAME: usize = 256 * 1024;

/// A body gathered in memory, answered in frames of [`HELD_FRAME`], its bytes' `reservation`
/// from the buffer budget held until the last frame is taken or the body dropped.
pub(crate) fn held_body(bytes: Bytes, reservation: Reservation) -> BodyStream {
    let frames = futures::stream::unfold((bytes, reservation), |(mut rest, reservation)| async move {
        (!rest.is_empty()).then(|| {
            let frame = rest.split_to(rest.len().min(HELD_FRAME));
            (Ok(frame), (rest, reservation))
        })
    });
    Box::pin(frames)
}
