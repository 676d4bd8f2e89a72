//! Objects: put (inline or chunked), get (whole or ranged), head, delete; the SQL of a namespace
//! (`NamespaceSql`, with its families' own structs). Reading and writing bodies is `bodies.rs`'s.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use deadpool_postgres::GenericClient;
use futures::Stream;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use tokio_postgres::types::Json;

use super::bodies::{BodyDigest, body_rows, check_length, inline_span, locate, read_prefix};
use super::chunks::{ChunkStream, worth_compressing};
use super::conditions::{CurrentVersion, DeleteCondition, Preconditions, WriteCondition};
use super::encryption::ObjectKey;
use super::put_lanes::PutJob;
use super::versions::KEY_LOCKS;
use super::{BucketInfo, Store, StoreError, StoreResult};

/// Bodies up to this size live in the object row itself: a small GET is one index lookup.
pub const INLINE_LIMIT: usize = 64 * 1024;
const MAX_KEY_BYTES: usize = 1024;

pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, StoreError>> + Send + Sync>>;

/// Everything about an object besides its bytes, kept as one jsonb column.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ObjectMeta {
    #[serde(rename = "ct", default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(rename = "ce", default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    #[serde(rename = "cd", default, skip_serializing_if = "Option::is_none")]
    pub content_disposition: Option<String>,
    #[serde(rename = "cl", default, skip_serializing_if = "Option::is_none")]
    pub content_language: Option<String>,
    #[serde(rename = "cc", default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
    /// The `Expires` header as the client sent it (an HTTP date).
    #[serde(rename = "ex", default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    #[serde(rename = "um", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user: BTreeMap<String, String>,
    #[serde(rename = "ck", default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<StoredChecksum>,
    /// How many parts a multipart object has; its body is then a manifest of part bodies.
    #[serde(rename = "pc", default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<u32>,
    #[serde(rename = "tg", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Object lock: the version's retention (`pgvs3.object_locked` reads `rt` and `lh`).
    #[serde(rename = "rt", default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<super::lock::Retention>,
    /// Object lock: the legal hold, once one was ever set (`false`: lifted).
    #[serde(rename = "lh", default, skip_serializing_if = "Option::is_none")]
    pub legal_hold: Option<bool>,
    /// Server-side encryption of the body (see `encryption`); `None`: stored as sent.
    #[serde(rename = "se", default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<super::encryption::Sealed>,
    /// The object's ACL (`access/acl.rs`); `None`: private, owned by the bucket's owner.
    #[serde(rename = "ac", default, skip_serializing_if = "Option::is_none")]
    pub acl: Option<crate::access::acl::Acl>,
    /// A multipart upload's checksum, kept on the upload only: its object gets `checksum`.
    #[serde(rename = "uc", default, skip_serializing_if = "Option::is_none")]
    pub upload_checksum: Option<super::multipart::UploadChecksum>,
}

/// A checksum the client asked for (e.g. `CRC32`, base64 value as S3 returns it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StoredChecksum {
    #[serde(rename = "a")]
    pub algorithm: String,
    #[serde(rename = "v")]
    pub value: String,
    /// S3's COMPOSITE type: a multipart object's checksum of its parts' checksums, its value
    /// ending in `-<parts>`; otherwise the checksum of the whole object (FULL_OBJECT).
    #[serde(rename = "c", default, skip_serializing_if = "std::ops::Not::not")]
    pub composite: bool,
}

#[derive(Debug, Clone)]
pub struct ObjectHead {
    pub size: u64,
    /// Hex MD5 of the body, without quotes.
    pub etag: String,
    pub last_modified: SystemTime,
    pub meta: ObjectMeta,
    /// In a versioned bucket, the version read (`null` for the null version); else `None`.
    pub version_id: Option<String>,
}

impl ObjectHead {
    /// The head of a row with the columns `size, etag, last_modified, meta` (of `objects` or
    /// `versions`); its version is the caller's to set.
    pub(super) fn from_row(row: &tokio_postgres::Row) -> ObjectHead {
        let Json(meta): Json<ObjectMeta> = row.get("meta");
        ObjectHead {
            size: row.get::<_, i64>("size") as u64,
            etag: row.get("etag"),
            last_modified: row.get("last_modified"),
            meta,
            version_id: None,
        }
    }
}

pub struct ObjectRead {
    pub head: ObjectHead,
    /// The byte span served: `start..end` of the object.
    pub span: (u64, u64),
    /// Whether the caller asked for a range (so the answer is 206 with Content-Range).
    pub partial: bool,
    pub body: BodyStream,
}

#[derive(Debug, Clone)]
pub struct PutOutcome {
    pub etag: String,
    pub size: u64,
    pub last_modified: SystemTime,
    pub checksum: Option<StoredChecksum>,
    /// The version written when it has an id (versioning Enabled); `None` for the null version
    /// (an unversioned or Suspended bucket), which S3 answers without `x-amz-version-id`.
    pub version_id: Option<String>,
    /// The tags the written version carries: what a lifecycle rule's tag filter is matched
    /// against for the write's `x-amz-expiration`.
    pub tags: BTreeMap<String, String>,
}

/// A byte range as HTTP states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// `bytes=first-last` or `bytes=first-`.
    From { first: u64, last: Option<u64> },
    /// `bytes=-length`: the last `length` bytes.
    Suffix { length: u64 },
}

impl ByteRange {
    /// The span `start..end` this range selects from an object of `size` bytes, as S3 resolves
    /// it: a range past the end is clamped, one starting past the end is unsatisfiable.
    pub fn resolve(self, size: u64) -> StoreResult<(u64, u64)> {
        match self {
            ByteRange::From { first, last } => {
                if first >= size || last.is_some_and(|last| last < first) {
                    return Err(StoreError::InvalidRange { size });
                }
                let end = last.map_or(size, |last| last.saturating_add(1).min(size));
                Ok((first, end))
            }
            ByteRange::Suffix { length } => {
                if length == 0 || size == 0 {
                    return Err(StoreError::InvalidRange { size });
                }
                Ok((size.saturating_sub(length), size))
            }
        }
    }
}

/// An object's bytes on their way in, with what the client declared about them.
pub struct Upload {
    pub meta: ObjectMeta,
    pub body: BodyStream,
    /// The length the client announced, checked against the bytes that arrive.
    pub declared_len: Option<u64>,
    pub observer: Box<dyn BodyObserver>,
    /// The encryption the write asks for (the bucket handle adds its default).
    pub encryption: super::encryption::Requested,
}

/// Sees every byte of an upload and decides, once it is complete, whether it may be committed:
/// the protocol front verifies the digests its client declared (possibly in trailers).
pub trait BodyObserver: Send {
    fn update(&mut self, data: &[u8]);
    /// Called with the complete body's size and MD5, before commit; an error aborts the write.
    fn finish(self: Box<Self>, size: u64, md5: &[u8; 16]) -> StoreResult<Option<StoredChecksum>>;
    /// Called before any byte when the body is a part of an upload that keeps `checksum` for
    /// every part: the observer computes that checksum (`finish` returns it) or refuses the part
    /// (one that declared another). An observer that hashes nothing cannot keep one.
    fn keep(&mut self, checksum: &super::multipart::UploadChecksum) -> StoreResult<()> {
        Err(StoreError::NotImplemented(format!(
            "this write cannot keep the {} checksum of its upload",
            checksum.algorithm
        )))
    }
}

/// The observer of bytes copied from a stored object: they were verified when they were stored.
pub struct StoredBytes;

impl BodyObserver for StoredBytes {
    fn update(&mut self, _data: &[u8]) {}

    fn finish(self: Box<Self>, _size: u64, _md5: &[u8; 16]) -> StoreResult<Option<StoredChecksum>> {
        Ok(None)
    }
}

/// The SQL of one namespace (a schema with `objects` and `chunks` tables).
#[derive(Debug)]
pub struct NamespaceSql {
    pub(super) get: String,
    pub(super) head: String,
    pub(super) put: String,
    pub(super) put_if_absent: String,
    pub(super) put_if_match: String,
    pub(super) put_if_none_match: String,
    pub(super) set_tags: String,
    pub(super) copy_parts: String,
    pub(super) body_held: String,
    pub(super) lock_current: String,
    pub(super) delete_unversioned: String,
    pub(super) delete_many_unversioned: String,
    pub(super) bodies: super::bodies::BodySql,
    pub(super) listing: super::listing::ListingSql,
    pub(super) multipart: super::multipart::MultipartSql,
    pub(super) reaper: super::reaper::ReaperSql,
    pub(super) kv: super::kv::KvSql,
    pub(super) types: super::types::TypedSql,
    pub(super) versions: super::versions::VersionSql,
    pub(super) lock: super::lock::LockSql,
    pub(super) staging: super::staging::StagingSql,
}

impl NamespaceSql {
    pub fn new(ns: &str) -> NamespaceSql {
        // Namespace names are checked by the catalog (^[a-z][a-z0-9_]*$), so quoting suffices.
        let ns = format!("\"{ns}\"");
        let insert = insert_sql(&ns);
        NamespaceSql {
            get: lookup_sql(&ns, "o.inline"),
            head: lookup_sql(&ns, "NULL::bytea"),
            put: format!("{insert} RETURNING last_modified, version_id"),
            // The conflict arbiter makes the check atomic: of concurrent creators one inserts,
            // the others find its row and (it being live) update nothing.
            put_if_absent: format!(
                "{insert} WHERE o.expires_at IS NOT NULL AND o.expires_at <= now()
                 RETURNING last_modified, version_id"
            ),
            // Inserted when absent; an existing live object is replaced unless it has the ETag.
            put_if_none_match: format!(
                "{insert} WHERE (o.expires_at IS NOT NULL AND o.expires_at <= now()) OR o.etag <> $8
                 RETURNING last_modified, version_id"
            ),
            // Under READ COMMITTED a concurrent update makes PostgreSQL re-check the WHERE on the
            // newest row version, so of writers that read the same ETag only the first wins.
            put_if_match: format!(
                "UPDATE {ns}.objects o SET size = $3, etag = $4, last_modified = clock_timestamp(), meta = $5,
                        inline = $6, body_id = $7, expires_at = NULL, {redrawn}
                   FROM pgvs3.buckets b
                  WHERE b.id = $1 AND o.bucket_id = $1 AND key = $2 AND ($8 = '*' OR etag = $8)
                    AND (expires_at IS NULL OR expires_at > now())
                 RETURNING o.last_modified, o.version_id",
                // The bucket's state read under the row's lock: the FROM item's row is the
                // snapshot's even when the UPDATE waited and re-checked the row.
                redrawn = version_drawn_under_lock(
                    &ns,
                    "pgvs3.versioning_now($1) IS NOT NULL",
                    "pgvs3.versioning_now($1) = 'Enabled'"
                ),
            ),
            set_tags: format!(
                "UPDATE {ns}.objects SET meta = CASE WHEN $3 = '{{}}'::jsonb THEN meta - 'tg'
                                                     ELSE jsonb_set(meta, '{{tg}}', $3) END
                  WHERE bucket_id = $1 AND key = $2 AND (expires_at IS NULL OR expires_at > now())"
            ),
            // Each part gets a copy of its chunks under a new body id; the new parts belong to
            // the new manifest `$2`.
            copy_parts: format!(
                "WITH source AS (
                     SELECT part_number, size, etag, checksum, body_id, start_offset,
                            nextval('{ns}.body_ids') AS new_body
                       FROM {ns}.parts WHERE owner_id = $1),
                 new_parts AS (
                     INSERT INTO {ns}.parts (owner_id, part_number, size, etag, checksum, body_id, start_offset)
                     SELECT $2, part_number, size, etag, checksum, new_body, start_offset FROM source)
                 INSERT INTO {ns}.chunks (body_id, seq, data)
                 SELECT s.new_body, c.seq, c.data FROM source s JOIN {ns}.chunks c ON c.body_id = s.body_id"
            ),
            // Whether body `$3` (of key `$2`) still belongs to a version, current or not.
            body_held: format!(
                "SELECT EXISTS (SELECT 1 FROM {ns}.objects WHERE bucket_id = $1 AND key = $2 AND body_id = $3)
                     OR EXISTS (SELECT 1 FROM {ns}.versions WHERE body_id = $3) AS held"
            ),
            // The current version a conditional delete compares, held until it is deleted.
            lock_current: format!(
                "SELECT etag, size, last_modified FROM {ns}.objects WHERE bucket_id = $1 AND key = $2
                    AND (expires_at IS NULL OR expires_at > now())
                  FOR UPDATE"
            ),
            // An S3 delete as the bucket is (not as the catalog cache has it): it deletes only
            // in a bucket that never had versioning, and answers the bucket's state either way.
            // A row a versioned write made is never deleted (`version_seq`): the bucket's state
            // is read as the statement started, but a row it waited for is checked as it is now.
            delete_unversioned: format!(
                "WITH b AS (SELECT versioning FROM pgvs3.buckets WHERE id = $1),
                      d AS (DELETE FROM {ns}.objects WHERE bucket_id = $1 AND key = $2 AND version_seq IS NULL
                              AND EXISTS (SELECT 1 FROM b WHERE versioning IS NULL))
                 SELECT versioning FROM b"
            ),
            delete_many_unversioned: format!(
                "WITH b AS (SELECT versioning FROM pgvs3.buckets WHERE id = $1),
                      d AS (DELETE FROM {ns}.objects o USING {named}
                             WHERE o.bucket_id = $1 AND o.key = n.k AND o.version_seq IS NULL
                               AND EXISTS (SELECT 1 FROM b WHERE versioning IS NULL))
                 SELECT versioning FROM b",
                named = super::key_probes::named_keys("$2", "n")
            ),
            bodies: super::bodies::BodySql::new(&ns),
            listing: super::listing::ListingSql::new(&ns),
            multipart: super::multipart::MultipartSql::new(&ns),
            reaper: super::reaper::ReaperSql::new(&ns),
            kv: super::kv::KvSql::new(&ns),
            types: super::types::TypedSql::new(&ns),
            versions: super::versions::VersionSql::new(&ns),
            lock: super::lock::LockSql::new(&ns),
            staging: super::staging::StagingSql::new(&ns),
        }
    }
}

/// The filter of every statement that creates a row of bucket `$1` (an object, or an upload): the
/// bucket's write lock, held shared until the write commits, and the bucket as committed once it
/// is held (migrations/functions/catalog.sql). So a DeleteBucket (which takes the lock
/// exclusively) either sees the row and answers BucketNotEmpty, or is seen by the write, which
/// then writes nothing and answers NoSuchBucket; never both succeed. It costs the write no round
/// trip: one call in its statement.
pub(super) const BUCKET_HELD: &str = "pgvs3.bucket_held($1)";

/// A lookup of one key's current row, its body as `body`. The join with pgvs3.buckets tells a
/// missing bucket from a missing key in the same round trip, and catches a cached bucket that
/// has since been dropped.
fn lookup_sql(ns: &str, body: &str) -> String {
    format!(
        "SELECT o.size, o.etag, o.last_modified, o.meta, {body} AS inline, o.body_id, o.key IS NOT NULL AS found,
                o.version_id
           FROM pgvs3.buckets b
           LEFT JOIN {ns}.objects o ON o.bucket_id = b.id AND o.key = $2
                AND (o.expires_at IS NULL OR o.expires_at > now())
          WHERE b.id = $1"
    )
}

/// An object row's insert, or its overwrite. A write to a versioned bucket takes the key's locks
/// ([`KEY_LOCKS`]), then a version number, and in an Enabled bucket a version id (the
/// objects_keep_version trigger keeps the version it replaces). The state it writes under is the
/// bucket's as committed once it holds the locks (`versioning_now`), not as the statement's
/// snapshot (taken before it waited) or this gateway's catalog cache has it. A write to a bucket
/// that never had versioning takes neither (the filter skips the subquery); if it then waits for
/// the key's row, the overwrite judges again under the row's lock, as versioning may have been
/// enabled meanwhile (versioning is never turned off, so a versioned write needs no second look).
/// Every write holds the bucket ([`BUCKET_HELD`]) before its row can wait for another's.
fn insert_sql(ns: &str) -> String {
    let seq = format!(
        "SELECT nextval('{ns}.version_seqs') AS seq, pgvs3.versioning_now($1) AS versioning
           FROM ({KEY_LOCKS}) held WHERE b.versioning IS NOT NULL"
    );
    let versioned_now = "(EXCLUDED.version_seq IS NULL AND pgvs3.versioning_now($1)";
    format!(
        "INSERT INTO {ns}.objects AS o (bucket_id, key, size, etag, last_modified, meta, inline, body_id,
                                        version_seq, version_id)
         SELECT $1, $2, $3, $4, clock_timestamp(), $5, $6, $7, v.seq, {new_id}
           FROM pgvs3.buckets b LEFT JOIN LATERAL ({seq}) v ON true WHERE b.id = $1 AND {BUCKET_HELD}
         ON CONFLICT (bucket_id, key) DO UPDATE
            SET size = EXCLUDED.size, etag = EXCLUDED.etag, last_modified = EXCLUDED.last_modified,
                meta = EXCLUDED.meta, inline = EXCLUDED.inline, body_id = EXCLUDED.body_id,
                expires_at = NULL, {redrawn}",
        new_id = "CASE WHEN v.versioning = 'Enabled' THEN lpad(to_hex(v.seq), 16, '0') END",
        redrawn = version_drawn_under_lock(
            ns,
            &format!("EXCLUDED.version_seq IS NOT NULL OR {versioned_now} IS NOT NULL)"),
            &format!("EXCLUDED.version_id IS NOT NULL OR {versioned_now} = 'Enabled')"),
        ),
    )
}

pub(super) fn check_key(key: &str) -> StoreResult<()> {
    if key.len() > MAX_KEY_BYTES {
        return Err(StoreError::KeyTooLong);
    }
    Ok(())
}

/// What a read asks for besides the key.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    pub range: Option<ByteRange>,
    /// S3's `partNumber`: one part of a multipart object (part 1 is the whole of any other).
    pub part_number: Option<u32>,
    pub conditions: Preconditions,
    /// A version other than the current one (versioned buckets; `null` names the null version).
    pub version_id: Option<String>,
    /// The SSE-C key the request offers (an SSE-C object opens only with its own).
    pub customer_key: Option<super::encryption::CustomerKey>,
}

impl Store {
    /// The head of an object and the span a GET with the same options would serve (the body
    /// of the answer is empty).
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store head_object", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn head_object(
        &self,
        bucket: &BucketInfo,
        key: &str,
        options: &ReadOptions,
    ) -> StoreResult<ObjectRead> {
        check_key(key)?;
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.head).await?;
        let row = client.query_opt(&statement, &[&bucket.id, &key]).await?;
        let row = match self.current_row(bucket, key, row, options).await? {
            Ok(row) => row,
            Err(version) => return Box::pin(self.read_noncurrent(bucket, key, &version, options, false)).await,
        };
        let (head, span, partial) = locate(
            &client,
            &bucket.sql,
            current_head(bucket, &row),
            row.get("body_id"),
            options,
        )
        .await?;
        self.object_key(&head, options)?;
        Ok(ObjectRead {
            head,
            span,
            partial,
            body: Box::pin(futures::stream::empty()),
        })
    }

    /// Reads an object, or the range or part of it the caller asked for. A small object costs
    /// one round trip; a chunked one streams its chunks from one statement (one snapshot), so
    /// an overwrite racing the read can never mix old and new bytes. A multipart object costs
    /// one more round trip, to find the parts that hold the span.
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store get_object", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn get_object(
        &self,
        bucket: &BucketInfo,
        key: &str,
        options: &ReadOptions,
    ) -> StoreResult<ObjectRead> {
        check_key(key)?;
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.get).await?;
        let row = client.query_opt(&statement, &[&bucket.id, &key]).await?;
        let row = match self.current_row(bucket, key, row, options).await? {
            Ok(row) => row,
            Err(version) => {
                drop(client);
                // Boxed, like every path a plain read does not take: a future inlines the
                // largest of the futures it awaits, and this whole read's is moved and boxed
                // on its way up (s3s's operation, the endpoint), once or more per request.
                return Box::pin(self.read_noncurrent(bucket, key, &version, options, true)).await;
            }
        };
        let (head, span, partial) = locate(
            &client,
            &bucket.sql,
            current_head(bucket, &row),
            row.get("body_id"),
            options,
        )
        .await?;
        let key = self.object_key(&head, options)?;
        let inline: Option<&[u8]> = row.get("inline");
        if let Some(inline) = inline {
            let bytes = inline_span(inline, span, key.as_ref());
            let body: BodyStream = Box::pin(futures::stream::once(async move { Ok(bytes) }));
            return Ok(ObjectRead {
                head,
                span,
                partial,
                body,
            });
        }
        let body_id: i64 = row.get("body_id");
        if span.0 == span.1 {
            return Ok(ObjectRead {
                head,
                span,
                partial,
                body: Box::pin(futures::stream::empty()),
            });
        }
        let client = Box::pin(self.streaming(client)).await?;
        let (segments, rows) = body_rows(
            &client,
            &bucket.sql,
            body_id,
            head.size,
            head.meta.parts.is_some(),
            span,
        )
        .await?;
        let body = ChunkStream::new(Some(client), rows, segments).decrypting(key);
        Ok(ObjectRead {
            head,
            span,
            partial,
            body: Box::pin(body),
        })
    }

    /// The key that opens an object's body for a read with `options` (`None`: plaintext),
    /// refused as S3 refuses a missing, wrong or needless SSE-C key.
    pub(super) fn object_key(&self, head: &ObjectHead, options: &ReadOptions) -> StoreResult<Option<ObjectKey>> {
        super::encryption::open(
            head.meta.encryption.as_ref(),
            options.customer_key.as_ref(),
            self.catalog.master_key(),
        )
    }

    /// The looked-up row of `key` if it is what the read asks for; `Err(version)` when the
    /// read names another version (a noncurrent one). A key without a current version is
    /// missing, with its delete marker named in a versioned bucket.
    async fn current_row(
        &self,
        bucket: &BucketInfo,
        key: &str,
        row: Option<tokio_postgres::Row>,
        options: &ReadOptions,
    ) -> StoreResult<Result<tokio_postgres::Row, String>> {
        let Some(row) = row else {
            self.catalog.forget_bucket(&bucket.name);
            return Err(StoreError::NoSuchBucket);
        };
        let exists: bool = row.get("found");
        if let Some(wanted) = &options.version_id {
            let current: Option<&str> = row.get("version_id");
            if !exists || current.unwrap_or("null") != wanted {
                return Ok(Err(wanted.clone()));
            }
        } else if !exists {
            return Err(match bucket.versioning {
                Some(_) => Box::pin(self.missing_key(bucket, key)).await,
                None => StoreError::NoSuchKey,
            });
        }
        Ok(Ok(row))
    }

    pub(super) fn found(
        &self,
        bucket: &BucketInfo,
        row: Option<tokio_postgres::Row>,
    ) -> StoreResult<tokio_postgres::Row> {
        let Some(row) = row else {
            self.catalog.forget_bucket(&bucket.name);
            return Err(StoreError::NoSuchBucket);
        };
        if !row.get::<_, bool>("found") {
            return Err(StoreError::NoSuchKey);
        }
        Ok(row)
    }

    /// Stores an object from a stream, if `condition` holds when it commits. Bodies up to
    /// [`INLINE_LIMIT`] go into the object row in one statement; larger ones are chunked and
    /// written in batches (`staging`), the last with the transaction that flips the object row,
    /// so nothing is visible until the whole body is in and verified.
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store put_object", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn put_object(
        &self,
        bucket: &BucketInfo,
        key: &str,
        mut upload: Upload,
        condition: &WriteCondition,
    ) -> StoreResult<PutOutcome> {
        check_key(key)?;
        let sealed = super::encryption::seal(&upload.encryption, self.catalog.master_key());
        let object_key = sealed.map(|(sealed, object_key)| {
            upload.meta.encryption = Some(sealed);
            object_key
        });
        let (head, ended) = if upload.declared_len.is_none_or(|len| len <= INLINE_LIMIT as u64) {
            read_prefix(&mut upload.body, INLINE_LIMIT as u64).await?
        } else {
            (BytesMut::new(), false)
        };
        if ended {
            return self.put_inline(bucket, key, head, upload, object_key, condition).await;
        }
        self.put_chunked(bucket, key, head, upload, object_key, condition).await
    }

    /// [`Store::put_object`] of a body that ended within [`INLINE_LIMIT`] (`head`, all of it):
    /// one statement writes it into the object row.
    async fn put_inline(
        &self,
        bucket: &BucketInfo,
        key: &str,
        head: BytesMut,
        upload: Upload,
        object_key: Option<ObjectKey>,
        condition: &WriteCondition,
    ) -> StoreResult<PutOutcome> {
        let Upload {
            mut meta,
            declared_len,
            mut observer,
            ..
        } = upload;
        let size = head.len() as u64;
        check_length(declared_len, size)?;
        observer.update(&head);
        let digest: [u8; 16] = Md5::digest(&head).into();
        meta.checksum = observer.finish(size, &digest)?;
        let etag = hex::encode(digest);
        let mut head = head;
        if let Some(object_key) = &object_key {
            object_key.apply_inline(&mut head);
        }
        // An unconditional write to a bucket that never had versioning goes with the PUTs
        // arriving beside it (put_lanes.rs); the others take their key's locks in an order of
        // their own (a versioned write's key lock, a condition's read) and run alone.
        if matches!(condition, WriteCondition::Always) && bucket.versioning.is_none() {
            let job = PutJob {
                bucket_id: bucket.id,
                sql: Arc::clone(&bucket.sql),
                key: key.to_string(),
                size: size as i64,
                etag,
                meta,
                inline: head.freeze(),
            };
            let etag = job.etag.clone();
            let (written, meta) = self.put_lanes.put(job).await;
            return match written? {
                Some(written) => Ok(written.outcome(etag, size, meta)),
                None => {
                    let client = self.client().await?;
                    Err(self.refusal(&client, bucket, key).await)
                }
            };
        }
        let client = self.client().await?;
        let row = NewObjectRow {
            key,
            size,
            etag: &etag,
            meta: &meta,
            inline: Some(&head[..]),
            body_id: None,
        };
        let written = self.write_object_row(&client, bucket, &row, condition).await?;
        Ok(written.outcome(etag, size, meta))
    }

    /// [`Store::put_object`] of a larger body (`head`, then the rest of the upload's): read
    /// ahead in batches and written without holding a connection while the client sends; the
    /// last batch commits with the row.
    async fn put_chunked(
        &self,
        bucket: &BucketInfo,
        key: &str,
        head: BytesMut,
        upload: Upload,
        object_key: Option<ObjectKey>,
        condition: &WriteCondition,
    ) -> StoreResult<PutOutcome> {
        let Upload {
            mut meta,
            mut body,
            declared_len,
            observer,
            ..
        } = upload;
        let compress = worth_compressing(meta.content_type.as_deref());
        let digest = BodyDigest::start(observer);
        let mut staged = self
            .stage_body(
                &bucket.sql,
                compress,
                head,
                &mut body,
                Some(&digest),
                object_key.as_ref(),
            )
            .await?;
        let size = staged.size();
        check_length(declared_len, size)?;
        let (md5, checksum) = digest.finish(size).await?;
        meta.checksum = checksum;
        let etag = hex::encode(md5);
        let mut client = self.stream_client().await?;
        let tx = client.transaction().await?;
        let body_id = staged.finish(&tx).await?;
        let row = NewObjectRow {
            key,
            size,
            etag: &etag,
            meta: &meta,
            inline: None,
            body_id: Some(body_id),
        };
        let written = self.write_object_row(&tx, bucket, &row, condition).await?;
        tx.commit().await?;
        staged.committed();
        Ok(written.outcome(etag, size, meta))
    }

    /// Writes (or replaces) an object row if `condition` holds; the one place that decides
    /// which SQL a conditional write runs and what its refusal means.
    pub(super) async fn write_object_row(
        &self,
        db: &impl GenericClient,
        bucket: &BucketInfo,
        row: &NewObjectRow<'_>,
        condition: &WriteCondition,
    ) -> StoreResult<Written> {
        let size = row.size as i64;
        let meta = Json(row.meta);
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            vec![&bucket.id, &row.key, &size, &row.etag, &meta, &row.inline, &row.body_id];
        let sql = match condition {
            WriteCondition::Always => &bucket.sql.put,
            WriteCondition::IfAbsent => &bucket.sql.put_if_absent,
            WriteCondition::IfMatch(etag) => {
                params.push(etag);
                &bucket.sql.put_if_match
            }
            WriteCondition::IfNoneMatch(etag) => {
                params.push(etag);
                &bucket.sql.put_if_none_match
            }
        };
        let statement = db.prepare_cached(sql).await?;
        if let Some(written) = db.query_opt(&statement, &params).await? {
            return Ok(Written::from_row(&written));
        }
        Err(self.refusal(db, bucket, row.key).await)
    }

    /// Why a write of `key` wrote nothing: a missing bucket or key, else a precondition that
    /// did not hold.
    async fn refusal(&self, db: &impl GenericClient, bucket: &BucketInfo, key: &str) -> StoreError {
        let lookup = async {
            let statement = db.prepare_cached(&bucket.sql.head).await?;
            let current = db.query_opt(&statement, &[&bucket.id, &key]).await?;
            self.found(bucket, current)
        };
        match lookup.await {
            Ok(_) => StoreError::PreconditionFailed,
            Err(err) => err,
        }
    }
    /// Deletes an object if `condition` holds on it; deleting a missing key succeeds, as in S3.
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store delete_object", otel.kind = "client", db.system = "postgresql"))]
    /// Returns the bucket's versioning state instead when it has one after all (this gateway's
    /// catalog had not seen the change yet): nothing is deleted then.
    pub(crate) async fn delete_object(
        &self,
        bucket: &BucketInfo,
        key: &str,
        condition: &DeleteCondition,
    ) -> StoreResult<Option<super::Versioning>> {
        check_key(key)?;
        let mut client = self.client().await?;
        let row = if condition.is_unconditional() {
            let statement = client.prepare_cached(&bucket.sql.delete_unversioned).await?;
            client.query_opt(&statement, &[&bucket.id, &key]).await?
        } else {
            let tx = client.transaction().await?;
            if !check_delete_condition(&tx, bucket, key, condition).await? {
                return Ok(None);
            }
            let row = tx
                .query_opt(&bucket.sql.delete_unversioned, &[&bucket.id, &key])
                .await?;
            tx.commit().await?;
            row
        };
        self.versioned_after_all(bucket, row)
    }

    /// Deletes many keys in one statement (or, like [`Store::delete_object`], none when the
    /// bucket turns out to be versioned).
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store delete_objects", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn delete_objects(
        &self,
        bucket: &BucketInfo,
        keys: &[String],
    ) -> StoreResult<Option<super::Versioning>> {
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.delete_many_unversioned).await?;
        let row = client.query_opt(&statement, &[&bucket.id, &keys]).await?;
        self.versioned_after_all(bucket, row)
    }

    fn versioned_after_all(
        &self,
        bucket: &BucketInfo,
        row: Option<tokio_postgres::Row>,
    ) -> StoreResult<Option<super::Versioning>> {
        let Some(row) = row else {
            self.catalog.forget_bucket(&bucket.name);
            return Err(StoreError::NoSuchBucket);
        };
        let state: Option<&str> = row.get("versioning");
        let state = state
            .map(super::Versioning::parse)
            .transpose()
            .map_err(|err| StoreError::Corrupt(err.to_string()))?;
        if state.is_some() {
            self.catalog.forget_bucket(&bucket.name);
        }
        Ok(state)
    }
}

/// Checks a delete's `condition` on the current version of `key`, which stays locked for the
/// rest of `tx` (a concurrent write waits, so what was compared is what gets deleted). Answers
/// whether the delete goes on: not when its conditions held only because there is no current
/// version (S3's 204 for a missing object): a row a concurrent write made since would be
/// deleted, or hidden behind a marker, without its conditions ever being checked.
pub(super) async fn check_delete_condition(
    tx: &impl GenericClient,
    bucket: &BucketInfo,
    key: &str,
    condition: &DeleteCondition,
) -> StoreResult<bool> {
    if condition.is_unconditional() {
        return Ok(true);
    }
    let statement = tx.prepare_cached(&bucket.sql.lock_current).await?;
    let row = tx.query_opt(&statement, &[&bucket.id, &key]).await?;
    condition.check(row.as_ref().map(|row| CurrentVersion {
        etag: row.get("etag"),
        size: row.get::<_, i64>("size") as u64,
        last_modified: row.get("last_modified"),
    }))?;
    Ok(row.is_some())
}

/// What writing an object row made: its time, and its version in a versioned bucket.
pub(super) struct Written {
    pub last_modified: SystemTime,
    pub version_id: Option<String>,
}

impl Written {
    /// From a write's `RETURNING last_modified, version_id`.
    pub(super) fn from_row(row: &tokio_postgres::Row) -> Written {
        Written {
            last_modified: row.get("last_modified"),
            // A null version (unversioned or suspended bucket) is answered without a version
            // id, as S3's PutObject reference shows for a versioning-suspended bucket.
            version_id: row.get("version_id"),
        }
    }

    /// The answer to a write of `size` bytes with `etag` and `checksum` that made this row.
    fn outcome(self, etag: String, size: u64, meta: ObjectMeta) -> PutOutcome {
        PutOutcome {
            etag,
            size,
            last_modified: self.last_modified,
            checksum: meta.checksum,
            version_id: self.version_id,
            tags: meta.tags,
        }
    }
}

/// The version columns of an overwrite, as one SET item whose number is drawn as the row is
/// set, after its lock is held (an UPDATE that waited re-evaluates it): a key's versions are then
/// numbered in the order they commit. A number drawn before the lock (the INSERT's own, or an
/// UPDATE's FROM item) can lose the race to a later writer of the key, whose version would then
/// be noncurrent with a higher number than the current one. `versioned` and `enabled` say, in the
/// statement's terms, whether the bucket is versioned and whether versioning is Enabled.
pub(super) fn version_drawn_under_lock(ns: &str, versioned: &str, enabled: &str) -> String {
    format!(
        "(version_seq, version_id) = (SELECT n.seq, CASE WHEN {enabled} THEN lpad(to_hex(n.seq), 16, '0') END
                                        FROM (SELECT CASE WHEN {versioned} THEN nextval('{ns}.version_seqs') END
                                                     AS seq) n)"
    )
}

/// An object row about to be written.
pub(super) struct NewObjectRow<'a> {
    pub key: &'a str,
    pub size: u64,
    pub etag: &'a str,
    pub meta: &'a ObjectMeta,
    pub inline: Option<&'a [u8]>,
    pub body_id: Option<i64>,
}

/// The head of a looked-up current row, with its version in a versioned bucket.
fn current_head(bucket: &BucketInfo, row: &tokio_postgres::Row) -> ObjectHead {
    let mut head = ObjectHead::from_row(row);
    head.version_id = bucket.versioning.map(|_| {
        row.get::<_, Option<String>>("version_id")
            .unwrap_or_else(|| "null".into())
    });
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_as_s3_does() {
        let from = |first, last| ByteRange::From { first, last };
        assert_eq!(from(0, Some(0)).resolve(10).unwrap(), (0, 1));
        assert_eq!(from(2, Some(100)).resolve(10).unwrap(), (2, 10));
        assert_eq!(from(9, None).resolve(10).unwrap(), (9, 10));
        assert!(from(10, None).resolve(10).is_err());
        assert!(from(5, Some(4)).resolve(10).is_err());
        assert!(from(0, Some(0)).resolve(0).is_err());
        assert_eq!(ByteRange::Suffix { length: 3 }.resolve(10).unwrap(), (7, 10));
        assert_eq!(ByteRange::Suffix { length: 30 }.resolve(10).unwrap(), (0, 10));
        assert!(ByteRange::Suffix { length: 0 }.resolve(10).is_err());
    }

    #[test]
    fn meta_round_trips_through_json_compactly() {
        let mut meta = ObjectMeta {
            content_type: Some("text/plain".into()),
            ..ObjectMeta::default()
        };
        meta.user.insert("colour".into(), "blue".into());
        let json = serde_json::to_string(&meta).unwrap();
        assert_eq!(json, r#"{"ct":"text/plain","um":{"colour":"blue"}}"#);
        assert_eq!(serde_json::from_str::<ObjectMeta>(&json).unwrap(), meta);
    }
}
