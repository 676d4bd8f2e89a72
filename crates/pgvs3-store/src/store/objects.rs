//! Objects: put (inline or chunked), get (whole or ranged), head, delete.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use deadpool_postgres::GenericClient;
use futures::{Stream, StreamExt};
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{Json, Type};

use super::chunks::{ChunkStream, Chunker, Segment, worth_compressing};
use super::conditions::{CurrentVersion, DeleteCondition, Preconditions, WriteCondition};
use super::encryption::ObjectKey;
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
}

/// A full-object checksum the client asked for (e.g. `CRC32`, base64 value as S3 returns it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StoredChecksum {
    #[serde(rename = "a")]
    pub algorithm: String,
    #[serde(rename = "v")]
    pub value: String,
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
    /// In a versioned bucket, the version written (`null` in a Suspended one); else `None`.
    pub version_id: Option<String>,
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
    pub(super) part_span: String,
    pub(super) part_segments: String,
    pub(super) read_segments: String,
    pub(super) create_upload: String,
    pub(super) lock_upload: String,
    /// An upload's encryption (its parts are encrypted with the key the upload was started with).
    pub(super) upload_encryption: String,
    pub(super) put_part: String,
    pub(super) take_upload: String,
    pub(super) upload_parts: String,
    pub(super) drop_unlisted_parts: String,
    pub(super) place_parts: String,
    pub(super) find_upload: String,
    pub(super) list_parts: String,
    pub(super) list_uploads: String,
    pub(super) copy_body: String,
    pub(super) set_tags: String,
    pub(super) copy_parts: String,
    pub(super) drop_parts: String,
    pub(super) drop_abandoned_uploads: String,
    pub(super) next_body_id: String,
    pub(super) copy_chunks: String,
    pub(super) read_chunks: String,
    pub(super) lock_current: String,
    pub(super) delete_unversioned: String,
    pub(super) delete_many_unversioned: String,
    pub(super) list: String,
    pub(super) list_below: String,
    pub(super) retired_bodies: String,
    pub(super) delete_retired_chunks: String,
    pub(super) forget_retired_body: String,
    pub(super) delete_expired: String,
    pub(super) backlog: String,
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
        // The join with pgvs3.buckets tells a missing bucket from a missing key in the same
        // round trip, and catches a cached bucket that has since been dropped.
        let lookup = |body: &str| {
            format!(
                "SELECT o.size, o.etag, o.last_modified, o.meta, {body} AS inline, o.body_id, o.key IS NOT NULL AS found,
                        o.version_id
                   FROM pgvs3.buckets b
                   LEFT JOIN {ns}.objects o ON o.bucket_id = b.id AND o.key = $2
                        AND (o.expires_at IS NULL OR o.expires_at > now())
                  WHERE b.id = $1"
            )
        };
        let list = format!(
            "SELECT key, size, etag, last_modified FROM {ns}.objects
              WHERE bucket_id = $1 AND key > $2 AND key >= $3
                AND (expires_at IS NULL OR expires_at > now())"
        );
        // The bucket's versioning state as committed (not as this gateway's catalog cache has
        // it, which may lag a change): a write to a versioned bucket takes a version number, and
        // in an Enabled bucket a version id (the objects_keep_version trigger keeps the version
        // it replaces). A write to a bucket that never had versioning draws no number.
        let version =
            |seq: &str| format!("CASE WHEN b.versioning IS NOT NULL THEN nextval('{ns}.version_seqs') END AS {seq}");
        let version_id =
            |seq: &str| format!("CASE WHEN b.versioning = 'Enabled' THEN lpad(to_hex({seq}), 16, '0') END");
        let insert = format!(
            "INSERT INTO {ns}.objects AS o (bucket_id, key, size, etag, last_modified, meta, inline, body_id,
                                            version_seq, version_id)
             SELECT $1, $2, $3, $4, clock_timestamp(), $5, $6, $7, v.seq, {new_id}
               FROM pgvs3.buckets b CROSS JOIN LATERAL (SELECT {seq}) v WHERE b.id = $1
             ON CONFLICT (bucket_id, key) DO UPDATE
                SET size = EXCLUDED.size, etag = EXCLUDED.etag, last_modified = EXCLUDED.last_modified,
                    meta = EXCLUDED.meta, inline = EXCLUDED.inline, body_id = EXCLUDED.body_id,
                    expires_at = NULL, {redrawn}",
            new_id = version_id("v.seq"),
            seq = version("seq"),
            redrawn = version_drawn_under_lock(
                &ns,
                "EXCLUDED.version_seq IS NOT NULL",
                "EXCLUDED.version_id IS NOT NULL"
            ),
        );
        NamespaceSql {
            get: lookup("o.inline"),
            head: lookup("NULL::bytea"),
            put: format!("{insert} RETURNING last_modified, version_id, version_seq IS NOT NULL AS versioned"),
            // The conflict arbiter makes the check atomic: of concurrent creators one inserts,
            // the others find its row and (it being live) update nothing.
            put_if_absent: format!(
                "{insert} WHERE o.expires_at IS NOT NULL AND o.expires_at <= now()
                 RETURNING last_modified, version_id, version_seq IS NOT NULL AS versioned"
            ),
            // Inserted when absent; an existing live object is replaced unless it has the ETag.
            put_if_none_match: format!(
                "{insert} WHERE (o.expires_at IS NOT NULL AND o.expires_at <= now()) OR o.etag <> $8
                 RETURNING last_modified, version_id, version_seq IS NOT NULL AS versioned"
            ),
            // Under READ COMMITTED a concurrent update makes PostgreSQL re-check the WHERE on the
            // newest row version, so of writers that read the same ETag only the first wins.
            put_if_match: format!(
                "UPDATE {ns}.objects o SET size = $3, etag = $4, last_modified = clock_timestamp(), meta = $5,
                        inline = $6, body_id = $7, expires_at = NULL, {redrawn}
                   FROM pgvs3.buckets b
                  WHERE b.id = $1 AND o.bucket_id = $1 AND key = $2 AND ($8 = '*' OR etag = $8)
                    AND (expires_at IS NULL OR expires_at > now())
                 RETURNING o.last_modified, o.version_id, o.version_seq IS NOT NULL AS versioned",
                redrawn = version_drawn_under_lock(&ns, "b.versioning IS NOT NULL", "b.versioning = 'Enabled'"),
            ),
            part_span: format!("SELECT start_offset, size FROM {ns}.parts WHERE owner_id = $1 AND part_number = $2"),
            part_segments: format!(
                "SELECT body_id, size, start_offset FROM {ns}.parts
                  WHERE owner_id = $1 AND start_offset < $3 AND start_offset + size > $2 ORDER BY part_number"
            ),
            // One statement (one snapshot) for all parts. A function scan yields the arrays in
            // order and a nested loop runs the (ordered, not pulled-up) inner query per part, so
            // rows arrive part by part without a sort that would buffer a whole part.
            read_segments: format!(
                "SELECT c.seq, c.data
                   FROM unnest($1::bigint[], $2::int[], $3::int[]) AS s(body_id, first_seq, last_seq)
                  CROSS JOIN LATERAL (SELECT seq, data FROM {ns}.chunks
                                       WHERE body_id = s.body_id AND seq >= s.first_seq AND seq <= s.last_seq
                                       ORDER BY seq) c"
            ),
            // The initiator (`in`) is kept in the upload's meta only: the completed object's
            // meta is read back as `ObjectMeta`, which has no such field, so it ends with the
            // upload (S3 names the initiator in upload listings only).
            create_upload: format!(
                "INSERT INTO {ns}.uploads (upload_id, bucket_id, key, meta)
                 SELECT nextval('{ns}.body_ids'), $1, $2,
                        CASE WHEN $4::text IS NULL THEN $3::jsonb ELSE $3::jsonb || jsonb_build_object('in', $4::text) END
                   FROM pgvs3.buckets WHERE id = $1
                 RETURNING upload_id"
            ),
            // A part commits under a share lock on its upload, so completion and abort (which
            // delete the upload row) wait for parts in flight and then see them.
            upload_encryption: format!(
                "SELECT meta->'se' AS encryption FROM {ns}.uploads WHERE upload_id = $1 AND bucket_id = $2 AND key = $3"
            ),
            lock_upload: format!(
                "SELECT 1 FROM {ns}.uploads WHERE upload_id = $1 AND bucket_id = $2 AND key = $3 FOR SHARE"
            ),
            put_part: format!(
                "INSERT INTO {ns}.parts (owner_id, part_number, size, etag, body_id) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (owner_id, part_number) DO UPDATE
                    SET size = EXCLUDED.size, etag = EXCLUDED.etag, body_id = EXCLUDED.body_id,
                        last_modified = clock_timestamp()
                 RETURNING last_modified"
            ),
            take_upload: format!(
                "DELETE FROM {ns}.uploads WHERE upload_id = $1 AND bucket_id = $2 AND key = $3 RETURNING meta"
            ),
            upload_parts: format!(
                "SELECT part_number, size, etag FROM {ns}.parts WHERE owner_id = $1 ORDER BY part_number"
            ),
            drop_unlisted_parts: format!("DELETE FROM {ns}.parts WHERE owner_id = $1 AND part_number <> ALL($2)"),
            place_parts: format!(
                "UPDATE {ns}.parts p SET start_offset = v.start_offset
                   FROM unnest($2::int[], $3::bigint[]) AS v(part_number, start_offset)
                  WHERE p.owner_id = $1 AND p.part_number = v.part_number"
            ),
            find_upload: format!(
                "SELECT meta->>'in' AS initiator, meta->'ac'->>'o' AS owner
                   FROM {ns}.uploads WHERE upload_id = $1 AND bucket_id = $2 AND key = $3"
            ),
            list_parts: format!(
                "SELECT part_number, size, etag, last_modified FROM {ns}.parts
                  WHERE owner_id = $1 AND part_number > $2 ORDER BY part_number LIMIT $3"
            ),
            list_uploads: format!(
                "SELECT key, upload_id, initiated, meta->>'in' AS initiator, meta->'ac'->>'o' AS owner FROM {ns}.uploads
                  WHERE bucket_id = $1 AND starts_with(key, $2) AND (key, upload_id) > ($3, $4)
                  ORDER BY key, upload_id LIMIT $5"
            ),
            set_tags: format!(
                "UPDATE {ns}.objects SET meta = CASE WHEN $3 = '{{}}'::jsonb THEN meta - 'tg'
                                                     ELSE jsonb_set(meta, '{{tg}}', $3) END
                  WHERE bucket_id = $1 AND key = $2 AND (expires_at IS NULL OR expires_at > now())"
            ),
            copy_body: format!(
                "INSERT INTO {ns}.chunks (body_id, seq, data) SELECT $2, seq, data FROM {ns}.chunks WHERE body_id = $1"
            ),
            // Each part gets a copy of its chunks under a new body id; the new parts belong to
            // the new manifest `$2`.
            copy_parts: format!(
                "WITH source AS (
                     SELECT part_number, size, etag, body_id, start_offset, nextval('{ns}.body_ids') AS new_body
                       FROM {ns}.parts WHERE owner_id = $1),
                 new_parts AS (
                     INSERT INTO {ns}.parts (owner_id, part_number, size, etag, body_id, start_offset)
                     SELECT $2, part_number, size, etag, new_body, start_offset FROM source)
                 INSERT INTO {ns}.chunks (body_id, seq, data)
                 SELECT s.new_body, c.seq, c.data FROM source s JOIN {ns}.chunks c ON c.body_id = s.body_id"
            ),
            drop_parts: format!("DELETE FROM {ns}.parts WHERE owner_id = ANY($1)"),
            drop_abandoned_uploads: format!(
                "DELETE FROM {ns}.uploads WHERE upload_id = ANY(ARRAY(
                    SELECT upload_id FROM {ns}.uploads
                     WHERE initiated < now() - make_interval(secs => $1) LIMIT $2))
                 RETURNING upload_id"
            ),
            next_body_id: format!("SELECT nextval('{ns}.body_ids') AS body_id"),
            copy_chunks: format!("COPY {ns}.chunks (body_id, seq, data) FROM STDIN (FORMAT binary)"),
            read_chunks: format!(
                "SELECT seq, data FROM {ns}.chunks WHERE body_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq"
            ),
            // The current version a conditional delete compares, held until it is deleted.
            lock_current: format!(
                "SELECT etag, size, last_modified FROM {ns}.objects WHERE bucket_id = $1 AND key = $2
                    AND (expires_at IS NULL OR expires_at > now())
                  FOR UPDATE"
            ),
            // An S3 delete as the bucket is (not as the catalog cache has it): it deletes only
            // in a bucket that never had versioning, and answers the bucket's state either way.
            delete_unversioned: format!(
                "WITH b AS (SELECT versioning FROM pgvs3.buckets WHERE id = $1),
                      d AS (DELETE FROM {ns}.objects WHERE bucket_id = $1 AND key = $2
                              AND EXISTS (SELECT 1 FROM b WHERE versioning IS NULL))
                 SELECT versioning FROM b"
            ),
            delete_many_unversioned: format!(
                "WITH b AS (SELECT versioning FROM pgvs3.buckets WHERE id = $1),
                      d AS (DELETE FROM {ns}.objects WHERE bucket_id = $1 AND key = ANY($2)
                              AND EXISTS (SELECT 1 FROM b WHERE versioning IS NULL))
                 SELECT versioning FROM b"
            ),
            list_below: format!("{list} AND key < $5 ORDER BY key LIMIT $4"),
            list: format!("{list} ORDER BY key LIMIT $4"),
            retired_bodies: format!(
                "SELECT body_id FROM {ns}.retired_bodies
                  WHERE retired_at < now() - make_interval(secs => $1) ORDER BY retired_at LIMIT $2"
            ),
            delete_retired_chunks: format!("DELETE FROM {ns}.chunks WHERE body_id = $1 AND seq >= $2 AND seq < $3"),
            forget_retired_body: format!(
                "DELETE FROM {ns}.retired_bodies r WHERE body_id = $1
                   AND NOT EXISTS (SELECT 1 FROM {ns}.chunks c WHERE c.body_id = r.body_id)"
            ),
            delete_expired: format!(
                "DELETE FROM {ns}.objects WHERE ctid = ANY(ARRAY(
                    SELECT ctid FROM {ns}.objects WHERE expires_at <= now() LIMIT $1))"
            ),
            backlog: format!(
                "SELECT (SELECT count(*) FROM {ns}.retired_bodies) AS bodies, (SELECT count(*) FROM {ns}.uploads) AS uploads"
            ),
            kv: super::kv::KvSql::new(&ns),
            types: super::types::TypedSql::new(&ns),
            versions: super::versions::VersionSql::new(&ns),
            lock: super::lock::LockSql::new(&ns),
            staging: super::staging::StagingSql::new(&ns),
        }
    }
}

/// The body of a read of bytes `span`: a slice of an inline body, or the chunks of a chunked
/// one streamed by the connection (which the stream keeps until it ends); empty for a HEAD.
#[allow(clippy::too_many_arguments)]
pub(super) async fn stored_body(
    client: deadpool_postgres::Object,
    sql: &NamespaceSql,
    inline: Option<Bytes>,
    body_id: Option<i64>,
    size: u64,
    multipart: bool,
    span: (u64, u64),
    with_body: bool,
    key: Option<ObjectKey>,
) -> StoreResult<BodyStream> {
    Ok(match (with_body, inline, body_id) {
        (false, ..) => Box::pin(futures::stream::empty()),
        (true, Some(inline), _) => {
            let bytes = inline_span(&inline, span, key.as_ref());
            Box::pin(futures::stream::once(async move { Ok(bytes) }))
        }
        (true, None, Some(body_id)) if span.0 < span.1 => {
            let (segments, rows) = body_rows(&client, sql, body_id, size, multipart, span).await?;
            Box::pin(ChunkStream::new(Some(client), rows, segments).decrypting(key))
        }
        (true, None, _) => Box::pin(futures::stream::empty()),
    })
}

/// Bytes `span` of an inline body, decrypted first when it is encrypted.
pub(super) fn inline_span(inline: &[u8], span: (u64, u64), key: Option<&ObjectKey>) -> Bytes {
    match key {
        None => Bytes::copy_from_slice(&inline[span.0 as usize..span.1 as usize]),
        Some(key) => {
            let mut plain = inline.to_vec();
            key.apply_inline(&mut plain);
            Bytes::from(plain).slice(span.0 as usize..span.1 as usize)
        }
    }
}

/// Starts the statement that streams bytes `span` of a chunked body: a plain body, or the
/// manifest of a multipart object (one more round trip finds the parts holding the span).
pub(super) async fn body_rows(
    client: &deadpool_postgres::ClientWrapper,
    sql: &NamespaceSql,
    body_id: i64,
    size: u64,
    multipart: bool,
    span: (u64, u64),
) -> StoreResult<(Vec<Segment>, tokio_postgres::RowStream)> {
    type Params<'a> = [&'a (dyn tokio_postgres::types::ToSql + Sync); 3];
    if !multipart {
        let segment = Segment {
            body_id,
            size,
            start: span.0,
            end: span.1,
        };
        let statement = client.prepare_cached(&sql.read_chunks).await?;
        let params: Params = [&body_id, &segment.first_seq(), &segment.last_seq()];
        let rows = client.query_raw(&statement, params).await?;
        return Ok((vec![segment], rows));
    }
    let statement = client.prepare_cached(&sql.part_segments).await?;
    let (start, end) = (span.0 as i64, span.1 as i64);
    let segments: Vec<Segment> = client
        .query(&statement, &[&body_id, &start, &end])
        .await?
        .iter()
        .map(|row| {
            let size = row.get::<_, i64>("size") as u64;
            let offset = row.get::<_, i64>("start_offset") as u64;
            Segment {
                body_id: row.get("body_id"),
                size,
                start: span.0.max(offset) - offset,
                end: span.1.min(offset + size) - offset,
            }
        })
        .collect();
    let ids: Vec<i64> = segments.iter().map(|s| s.body_id).collect();
    let firsts: Vec<i32> = segments.iter().map(Segment::first_seq).collect();
    let lasts: Vec<i32> = segments.iter().map(Segment::last_seq).collect();
    let statement = client.prepare_cached(&sql.read_segments).await?;
    let params: Params = [&ids, &firsts, &lasts];
    let rows = client.query_raw(&statement, params).await?;
    Ok((segments, rows))
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
            Err(version) => return self.read_noncurrent(bucket, key, &version, options, false).await,
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
                return self.read_noncurrent(bucket, key, &version, options, true).await;
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
                Some(_) => self.missing_key(bucket, key).await,
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
        upload: Upload,
        condition: &WriteCondition,
    ) -> StoreResult<PutOutcome> {
        let Upload {
            mut meta,
            mut body,
            declared_len,
            mut observer,
            encryption,
        } = upload;
        check_key(key)?;
        let sealed = super::encryption::seal(&encryption, self.catalog.master_key());
        let object_key = sealed.map(|(sealed, object_key)| {
            meta.encryption = Some(sealed);
            object_key
        });
        let (head, ended) = if declared_len.is_none_or(|len| len <= INLINE_LIMIT as u64) {
            read_prefix(&mut body, INLINE_LIMIT as u64).await?
        } else {
            (BytesMut::new(), false)
        };
        if ended {
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
            return Ok(PutOutcome {
                etag,
                size,
                last_modified: written.last_modified,
                checksum: meta.checksum,
                version_id: written.version_id,
            });
        }

        // Read ahead in batches and written without holding a connection while the client
        // sends; the last batch commits with the row.
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
        let mut client = self.upload_client().await?;
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
        Ok(PutOutcome {
            etag,
            size,
            last_modified: written.last_modified,
            checksum: meta.checksum,
            version_id: written.version_id,
        })
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
            let versioned: bool = written.get("versioned");
            return Ok(Written {
                last_modified: written.get("last_modified"),
                version_id: versioned.then(|| {
                    written
                        .get::<_, Option<String>>("version_id")
                        .unwrap_or_else(|| "null".into())
                }),
            });
        }
        // Refused: tell a missing bucket or key from a precondition that did not hold.
        let statement = db.prepare_cached(&bucket.sql.head).await?;
        let current = db.query_opt(&statement, &[&bucket.id, &row.key]).await?;
        self.found(bucket, current)?;
        Err(StoreError::PreconditionFailed)
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
            check_delete_condition(&tx, bucket, key, condition).await?;
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
/// rest of `tx` (a concurrent write waits, so what was compared is what gets deleted).
pub(super) async fn check_delete_condition(
    tx: &impl GenericClient,
    bucket: &BucketInfo,
    key: &str,
    condition: &DeleteCondition,
) -> StoreResult<()> {
    if condition.is_unconditional() {
        return Ok(());
    }
    let statement = tx.prepare_cached(&bucket.sql.lock_current).await?;
    let row = tx.query_opt(&statement, &[&bucket.id, &key]).await?;
    condition.check(row.as_ref().map(|row| CurrentVersion {
        etag: row.get("etag"),
        size: row.get::<_, i64>("size") as u64,
        last_modified: row.get("last_modified"),
    }))
}

/// What writing an object row made: its time, and its version in a versioned bucket.
pub(super) struct Written {
    pub last_modified: SystemTime,
    pub version_id: Option<String>,
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

/// The head of a found object, after its preconditions, and the span `options` select, and
/// whether that is part of the object (a 206 answer).
pub(super) async fn locate(
    client: &deadpool_postgres::Object,
    sql: &NamespaceSql,
    head: ObjectHead,
    body_id: Option<i64>,
    options: &ReadOptions,
) -> StoreResult<(ObjectHead, (u64, u64), bool)> {
    options.conditions.check(&head)?;
    let Some(part_number) = options.part_number else {
        let span = match options.range {
            Some(range) => range.resolve(head.size)?,
            None => (0, head.size),
        };
        return Ok((head, span, options.range.is_some()));
    };
    if options.range.is_some() {
        return Err(StoreError::InvalidArgument(
            "cannot specify both Range header and partNumber query parameter".into(),
        ));
    }
    if head.meta.parts.is_none() {
        return match part_number {
            1 => Ok((head.clone(), (0, head.size), false)),
            _ => Err(StoreError::InvalidPartNumber),
        };
    }
    let statement = client.prepare_cached(&sql.part_span).await?;
    let part = client
        .query_opt(&statement, &[&body_id, &(part_number.min(i32::MAX as u32) as i32)])
        .await?
        .ok_or(StoreError::InvalidPartNumber)?;
    let start = part.get::<_, i64>("start_offset") as u64;
    let end = start + part.get::<_, i64>("size") as u64;
    Ok((head, (start, end), true))
}

/// Pieces of a body queued for its [`BodyDigest`] at most.
const PIECES_IN_DIGEST: usize = 16;

/// Hashes a chunked body on a blocking thread while it is written: its MD5 (the ETag) and
/// whatever the observer checks. MD5 is serial (about 600 MB/s here, 41% of the gateway's CPU
/// on a 10 MiB PUT); on the request's task it ran between the COPY's writes, here it overlaps
/// them. The queue is bounded, so a hash that falls behind slows the upload down.
pub(super) struct BodyDigest {
    pieces: tokio::sync::mpsc::Sender<Bytes>,
    hashed: tokio::task::JoinHandle<([u8; 16], Box<dyn BodyObserver>)>,
}

impl BodyDigest {
    pub(super) fn start(mut observer: Box<dyn BodyObserver>) -> BodyDigest {
        let (pieces, mut queued) = tokio::sync::mpsc::channel::<Bytes>(PIECES_IN_DIGEST);
        let hashed = tokio::task::spawn_blocking(move || {
            let mut md5 = Md5::new();
            while let Some(piece) = queued.blocking_recv() {
                md5.update(&piece);
                observer.update(&piece);
            }
            (md5.finalize().into(), observer)
        });
        BodyDigest { pieces, hashed }
    }

    pub(super) async fn update(&self, piece: Bytes) -> StoreResult<()> {
        self.pieces
            .send(piece)
            .await
            .map_err(|_| StoreError::Body("the body's digest stopped".into()))
    }

    /// The body's MD5, and the observer's verdict on all of it.
    pub(super) async fn finish(self, size: u64) -> StoreResult<([u8; 16], Option<StoredChecksum>)> {
        drop(self.pieces);
        let (md5, observer) = self
            .hashed
            .await
            .map_err(|err| StoreError::Body(format!("the body's digest failed: {err}")))?;
        Ok((md5, observer.finish(size, &md5)?))
    }
}

/// Streams a body into the chunks of a new body inside `tx`: `head` (bytes already read from
/// it), then the rest of `body`, all of it seen by `digest` when there is one. Returns the body
/// id and the total size.
pub(super) async fn write_chunks(
    tx: &tokio_postgres::Transaction<'_>,
    sql: &NamespaceSql,
    compress: bool,
    head: BytesMut,
    body: &mut BodyStream,
    digest: Option<&BodyDigest>,
    key: Option<&ObjectKey>,
) -> StoreResult<(i64, u64)> {
    let body_id: i64 = tx.query_one(&sql.next_body_id, &[]).await?.get("body_id");
    let sink = tx.copy_in(&sql.copy_chunks).await?;
    let writer = BinaryCopyInWriter::new(sink, &[Type::INT8, Type::INT4, Type::BYTEA]);
    futures::pin_mut!(writer);
    let mut chunker = Chunker::new(compress);
    let mut seq: i32 = 0;
    let mut size = head.len() as u64;
    chunker.push(&head);
    if let Some(digest) = digest
        && !head.is_empty()
    {
        digest.update(head.freeze()).await?;
    }
    let seal = |seq: i32, chunk: Bytes| match key {
        None => chunk,
        Some(key) => {
            let mut sealed = BytesMut::from(&chunk[..]);
            key.apply(body_id, i64::from(seq), &mut sealed);
            sealed.freeze()
        }
    };
    loop {
        while let Some(chunk) = chunker.next_full() {
            writer.as_mut().write(&[&body_id, &seq, &&seal(seq, chunk)[..]]).await?;
            seq += 1;
        }
        let Some(piece) = body.next().await else {
            break;
        };
        let piece = piece?;
        size += piece.len() as u64;
        chunker.push(&piece);
        if let Some(digest) = digest {
            digest.update(piece).await?;
        }
    }
    if let Some(chunk) = chunker.finish() {
        writer.as_mut().write(&[&body_id, &seq, &&seal(seq, chunk)[..]]).await?;
    }
    writer.finish().await?;
    Ok((body_id, size))
}

/// Reads `body` until more than `max` bytes are in (or it ends); returns them and whether the
/// body ended.
pub async fn read_prefix(body: &mut BodyStream, max: u64) -> StoreResult<(BytesMut, bool)> {
    let mut prefix = BytesMut::new();
    while prefix.len() as u64 <= max {
        match body.next().await {
            Some(piece) => prefix.extend_from_slice(&piece?),
            None => return Ok((prefix, true)),
        }
    }
    Ok((prefix, false))
}

pub fn check_length(declared: Option<u64>, received: u64) -> StoreResult<()> {
    match declared {
        Some(expected) if expected != received => Err(StoreError::IncompleteBody { expected, received }),
        _ => Ok(()),
    }
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
