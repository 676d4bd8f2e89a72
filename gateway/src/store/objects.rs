//! Objects: put (inline or chunked), get (whole or ranged), head, delete.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{Json, Type};

use super::chunks::{ChunkStream, Chunker, worth_compressing};
use super::{Access, Principal, Store, StoreError, StoreResult};

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
}

/// Sees every byte of an upload and decides, once it is complete, whether it may be committed:
/// the protocol front verifies the digests its client declared (possibly in trailers).
pub trait BodyObserver: Send {
    fn update(&mut self, data: &[u8]);
    /// Called with the complete body's size and MD5, before commit; an error aborts the write.
    fn finish(self: Box<Self>, size: u64, md5: &[u8; 16]) -> StoreResult<Option<StoredChecksum>>;
}

/// The SQL of one namespace (a schema with `objects` and `chunks` tables).
#[derive(Debug)]
pub struct NamespaceSql {
    pub(super) get: String,
    pub(super) head: String,
    pub(super) put: String,
    pub(super) next_body_id: String,
    pub(super) copy_chunks: String,
    pub(super) read_chunks: String,
    pub(super) delete: String,
    pub(super) delete_many: String,
    pub(super) list: String,
    pub(super) list_below: String,
    pub(crate) retired_bodies: String,
    pub(crate) delete_retired_chunks: String,
    pub(crate) forget_retired_body: String,
    pub(crate) delete_expired: String,
    pub(super) kv: super::kv::KvSql,
}

impl NamespaceSql {
    pub fn new(ns: &str) -> NamespaceSql {
        // Namespace names are checked by the catalog (^[a-z][a-z0-9_]*$), so quoting suffices.
        let ns = format!("\"{ns}\"");
        // The join with pgvs3.buckets tells a missing bucket from a missing key in the same
        // round trip, and catches a cached bucket that has since been dropped.
        let lookup = |body: &str| {
            format!(
                "SELECT o.size, o.etag, o.last_modified, o.meta, {body}, o.body_id, o.key IS NOT NULL
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
        NamespaceSql {
            get: lookup("o.inline"),
            head: lookup("NULL::bytea"),
            put: format!(
                "INSERT INTO {ns}.objects AS o (bucket_id, key, size, etag, last_modified, meta, inline, body_id)
                 SELECT $1, $2, $3, $4, clock_timestamp(), $5, $6, $7 FROM pgvs3.buckets WHERE id = $1
                 ON CONFLICT (bucket_id, key) DO UPDATE
                    SET size = EXCLUDED.size, etag = EXCLUDED.etag, last_modified = EXCLUDED.last_modified,
                        meta = EXCLUDED.meta, inline = EXCLUDED.inline, body_id = EXCLUDED.body_id,
                        expires_at = NULL
                 RETURNING last_modified"
            ),
            next_body_id: format!("SELECT nextval('{ns}.body_ids')"),
            copy_chunks: format!("COPY {ns}.chunks (body_id, seq, data) FROM STDIN (FORMAT binary)"),
            read_chunks: format!(
                "SELECT seq, data FROM {ns}.chunks WHERE body_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq"
            ),
            delete: format!("DELETE FROM {ns}.objects WHERE bucket_id = $1 AND key = $2"),
            delete_many: format!("DELETE FROM {ns}.objects WHERE bucket_id = $1 AND key = ANY($2)"),
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
            kv: super::kv::KvSql::new(&ns),
        }
    }
}

pub(super) fn check_key(key: &str) -> StoreResult<()> {
    if key.len() > MAX_KEY_BYTES {
        return Err(StoreError::KeyTooLong);
    }
    Ok(())
}

impl Store {
    pub async fn head_object(&self, principal: &Principal, bucket: &str, key: &str) -> StoreResult<ObjectHead> {
        check_key(key)?;
        let bucket = self.bucket(principal, bucket, Access::Read).await?;
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.head).await?;
        let row = client.query_opt(&statement, &[&bucket.id, &key]).await?;
        let row = self.found(&bucket, row)?;
        Ok(head_from_row(&row))
    }

    /// Reads an object, or the range of it the caller asked for. A small object costs one round
    /// trip; a chunked one streams its chunks from one statement (one snapshot), so an
    /// overwrite racing the read can never mix old and new bytes.
    pub async fn get_object(
        &self,
        principal: &Principal,
        bucket: &str,
        key: &str,
        range: Option<ByteRange>,
    ) -> StoreResult<ObjectRead> {
        check_key(key)?;
        let bucket = self.bucket(principal, bucket, Access::Read).await?;
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.get).await?;
        let row = client.query_opt(&statement, &[&bucket.id, &key]).await?;
        let row = self.found(&bucket, row)?;
        let head = head_from_row(&row);
        let span = match range {
            Some(range) => range.resolve(head.size)?,
            None => (0, head.size),
        };
        let partial = range.is_some();
        let inline: Option<&[u8]> = row.get(4);
        if let Some(inline) = inline {
            let bytes = Bytes::copy_from_slice(&inline[span.0 as usize..span.1 as usize]);
            let body: BodyStream = Box::pin(futures::stream::once(async move { Ok(bytes) }));
            return Ok(ObjectRead {
                head,
                span,
                partial,
                body,
            });
        }
        let body_id: i64 = row.get(5);
        if span.0 == span.1 {
            return Ok(ObjectRead {
                head,
                span,
                partial,
                body: Box::pin(futures::stream::empty()),
            });
        }
        let first = (span.0 / super::CHUNK_SIZE as u64) as i32;
        let last = ((span.1 - 1) / super::CHUNK_SIZE as u64) as i32;
        let statement = client.prepare_cached(&bucket.sql.read_chunks).await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&body_id, &first, &last];
        let rows = client.query_raw(&statement, params).await?;
        let body = ChunkStream::new(client, rows, head.size, span.0, span.1);
        Ok(ObjectRead {
            head,
            span,
            partial,
            body: Box::pin(body),
        })
    }

    fn found(&self, bucket: &super::BucketInfo, row: Option<tokio_postgres::Row>) -> StoreResult<tokio_postgres::Row> {
        let Some(row) = row else {
            self.catalog.forget_bucket(&bucket.name);
            return Err(StoreError::NoSuchBucket);
        };
        if !row.get::<_, bool>(6) {
            return Err(StoreError::NoSuchKey);
        }
        Ok(row)
    }

    /// Stores an object from a stream. Bodies up to [`INLINE_LIMIT`] go into the object row in
    /// one statement; larger ones are copied chunk by chunk in one transaction that also flips
    /// the object row, so nothing is visible until the whole body is in and verified.
    pub async fn put_object(
        &self,
        principal: &Principal,
        bucket: &str,
        key: &str,
        upload: Upload,
    ) -> StoreResult<PutOutcome> {
        let Upload {
            mut meta,
            mut body,
            declared_len,
            mut observer,
        } = upload;
        check_key(key)?;
        let bucket = self.bucket(principal, bucket, Access::Write).await?;
        let mut md5 = Md5::new();
        let mut head = BytesMut::new();
        let small_enough = declared_len.is_none_or(|len| len <= INLINE_LIMIT as u64);
        let mut ended = false;
        while small_enough && head.len() <= INLINE_LIMIT {
            match body.next().await {
                Some(piece) => head.extend_from_slice(&piece?),
                None => {
                    ended = true;
                    break;
                }
            }
        }
        md5.update(&head);
        observer.update(&head);
        if ended {
            let size = head.len() as u64;
            check_length(declared_len, size)?;
            let digest: [u8; 16] = md5.finalize().into();
            meta.checksum = observer.finish(size, &digest)?;
            let etag = hex::encode(digest);
            let client = self.client().await?;
            let statement = client.prepare_cached(&bucket.sql.put).await?;
            let row = client
                .query_opt(
                    &statement,
                    &[
                        &bucket.id,
                        &key,
                        &(size as i64),
                        &etag,
                        &Json(&meta),
                        &Some(&head[..]),
                        &None::<i64>,
                    ],
                )
                .await?;
            return self.stored(&bucket, row, etag, size, meta.checksum);
        }

        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let body_id: i64 = tx.query_one(&bucket.sql.next_body_id, &[]).await?.get(0);
        let sink = tx.copy_in(&bucket.sql.copy_chunks).await?;
        let writer = BinaryCopyInWriter::new(sink, &[Type::INT8, Type::INT4, Type::BYTEA]);
        futures::pin_mut!(writer);
        let mut chunker = Chunker::new(worth_compressing(meta.content_type.as_deref()));
        let mut seq: i32 = 0;
        let mut size = head.len() as u64;
        chunker.push(&head);
        drop(head);
        loop {
            while let Some(chunk) = chunker.next_full() {
                writer.as_mut().write(&[&body_id, &seq, &&chunk[..]]).await?;
                seq += 1;
            }
            let Some(piece) = body.next().await else {
                break;
            };
            let piece = piece?;
            md5.update(&piece);
            observer.update(&piece);
            size += piece.len() as u64;
            chunker.push(&piece);
        }
        if let Some(chunk) = chunker.finish() {
            writer.as_mut().write(&[&body_id, &seq, &&chunk[..]]).await?;
        }
        writer.finish().await?;
        check_length(declared_len, size)?;
        let digest: [u8; 16] = md5.finalize().into();
        meta.checksum = observer.finish(size, &digest)?;
        let etag = hex::encode(digest);
        let statement = tx.prepare_cached(&bucket.sql.put).await?;
        let row = tx
            .query_opt(
                &statement,
                &[
                    &bucket.id,
                    &key,
                    &(size as i64),
                    &etag,
                    &Json(&meta),
                    &None::<&[u8]>,
                    &Some(body_id),
                ],
            )
            .await?;
        let outcome = self.stored(&bucket, row, etag, size, meta.checksum)?;
        tx.commit().await?;
        Ok(outcome)
    }

    fn stored(
        &self,
        bucket: &super::BucketInfo,
        row: Option<tokio_postgres::Row>,
        etag: String,
        size: u64,
        checksum: Option<StoredChecksum>,
    ) -> StoreResult<PutOutcome> {
        let Some(row) = row else {
            self.catalog.forget_bucket(&bucket.name);
            return Err(StoreError::NoSuchBucket);
        };
        Ok(PutOutcome {
            etag,
            size,
            last_modified: row.get(0),
            checksum,
        })
    }

    /// Deletes an object; deleting a missing key succeeds, as in S3.
    pub async fn delete_object(&self, principal: &Principal, bucket: &str, key: &str) -> StoreResult<()> {
        check_key(key)?;
        let bucket = self.bucket(principal, bucket, Access::Write).await?;
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.delete).await?;
        client.execute(&statement, &[&bucket.id, &key]).await?;
        Ok(())
    }

    /// Deletes many keys in one statement.
    pub async fn delete_objects(&self, principal: &Principal, bucket: &str, keys: &[String]) -> StoreResult<()> {
        let bucket = self.bucket(principal, bucket, Access::Write).await?;
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.delete_many).await?;
        client.execute(&statement, &[&bucket.id, &keys]).await?;
        Ok(())
    }
}

fn check_length(declared: Option<u64>, received: u64) -> StoreResult<()> {
    match declared {
        Some(expected) if expected != received => Err(StoreError::IncompleteBody { expected, received }),
        _ => Ok(()),
    }
}

fn head_from_row(row: &tokio_postgres::Row) -> ObjectHead {
    let Json(meta): Json<ObjectMeta> = row.get(3);
    ObjectHead {
        size: row.get::<_, i64>(0) as u64,
        etag: row.get(1),
        last_modified: row.get(2),
        meta,
    }
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
