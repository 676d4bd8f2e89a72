//! Multipart uploads: each part is a body of its own; completion turns the upload into an
//! object whose body is a manifest of its parts (see migrations/0002_multipart.sql), in
//! O(parts) statements' work and without touching a byte.

use std::collections::BTreeMap;
use std::time::SystemTime;

use bytes::BytesMut;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use tokio_postgres::types::Json;

use super::bodies::{BodyDigest, check_length};
use super::objects::{BUCKET_HELD, NewObjectRow, ObjectHead};
use super::{
    BucketInfo, ObjectMeta, PutOutcome, Store, StoreError, StoreResult, StoredChecksum, Upload, WriteCondition,
};

/// The multipart SQL of one namespace.
#[derive(Debug)]
pub(super) struct MultipartSql {
    create_upload: String,
    /// An upload's encryption (its parts are encrypted with the key the upload was started with).
    upload_encryption: String,
    lock_upload: String,
    put_part: String,
    take_upload: String,
    upload_parts: String,
    drop_unlisted_parts: String,
    place_parts: String,
    find_upload: String,
    list_parts: String,
    /// The parts of a completed object (GetObjectAttributes' ObjectParts).
    object_parts: String,
    list_uploads: String,
    /// `list_uploads` under `$6` too: the end of the listed prefix.
    list_uploads_below: String,
    /// Deletes the parts of ended uploads (the reaper's and lifecycle's too).
    pub(super) drop_parts: String,
}

impl MultipartSql {
    pub(super) fn new(ns: &str) -> MultipartSql {
        MultipartSql {
            // The initiator (`in`) is kept in the upload's meta only: the completed object's
            // meta is read back as `ObjectMeta`, which has no such field, so it ends with the
            // upload (S3 names the initiator in upload listings only).
            create_upload: format!(
                "INSERT INTO {ns}.uploads (upload_id, bucket_id, key, meta)
                 SELECT nextval('{ns}.body_ids'), $1, $2,
                        CASE WHEN $4::text IS NULL THEN $3::jsonb ELSE $3::jsonb || jsonb_build_object('in', $4::text) END
                   FROM pgvs3.buckets WHERE id = $1 AND {BUCKET_HELD}
                 RETURNING upload_id"
            ),
            upload_encryption: format!(
                "SELECT meta->'se' AS encryption, meta->'uc' AS checksum
                   FROM {ns}.uploads WHERE upload_id = $1 AND bucket_id = $2 AND key = $3"
            ),
            // A part commits under a share lock on its upload, so completion and abort (which
            // delete the upload row) wait for parts in flight and then see them.
            lock_upload: format!(
                "SELECT 1 FROM {ns}.uploads WHERE upload_id = $1 AND bucket_id = $2 AND key = $3 FOR SHARE"
            ),
            put_part: format!(
                "INSERT INTO {ns}.parts (owner_id, part_number, size, etag, body_id, checksum)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (owner_id, part_number) DO UPDATE
                    SET size = EXCLUDED.size, etag = EXCLUDED.etag, body_id = EXCLUDED.body_id,
                        checksum = EXCLUDED.checksum, last_modified = clock_timestamp()
                 RETURNING last_modified"
            ),
            // The bucket held before the upload's row: a completion then writes its object
            // under the same lock, taken in DeleteBucket's order (which deletes the uploads
            // after it holds the bucket), so the two never wait for each other in a cycle.
            take_upload: format!(
                "DELETE FROM {ns}.uploads WHERE upload_id = $1 AND bucket_id = $2 AND key = $3
                    AND pgvs3.bucket_held($2)
                 RETURNING meta"
            ),
            upload_parts: format!(
                "SELECT part_number, size, etag, checksum FROM {ns}.parts WHERE owner_id = $1 ORDER BY part_number"
            ),
            drop_unlisted_parts: format!("DELETE FROM {ns}.parts WHERE owner_id = $1 AND part_number <> ALL($2)"),
            place_parts: format!(
                "UPDATE {ns}.parts p SET start_offset = v.start_offset
                   FROM unnest($2::int[], $3::bigint[]) AS v(part_number, start_offset)
                  WHERE p.owner_id = $1 AND p.part_number = v.part_number"
            ),
            find_upload: format!(
                "SELECT meta->>'in' AS initiator, meta->'ac'->>'o' AS owner, meta->'uc' AS checksum
                   FROM {ns}.uploads WHERE upload_id = $1 AND bucket_id = $2 AND key = $3"
            ),
            list_parts: format!(
                "SELECT part_number, size, etag, last_modified, checksum FROM {ns}.parts
                  WHERE owner_id = $1 AND part_number > $2 ORDER BY part_number LIMIT $3"
            ),
            // The object (or version) whose ETag was just read; one replaced since lists none.
            object_parts: format!(
                "SELECT part_number, size, etag, last_modified, checksum FROM {ns}.parts
                  WHERE owner_id = (SELECT body_id FROM {ns}.objects
                                     WHERE bucket_id = $1 AND key = $2 AND etag = $3
                                       AND ($4::text IS NULL OR coalesce(version_id, 'null') = $4)
                                    UNION ALL
                                    SELECT body_id FROM {ns}.versions
                                     WHERE bucket_id = $1 AND key = $2 AND etag = $3 AND version_id = $4
                                    LIMIT 1)
                    AND part_number > $5 ORDER BY part_number LIMIT $6"
            ),
            list_uploads: list_uploads_sql(ns, ""),
            list_uploads_below: list_uploads_sql(ns, "AND key < $6"),
            drop_parts: format!("DELETE FROM {ns}.parts WHERE owner_id = ANY($1)"),
        }
    }
}

/// Uploads in key order from after (`$3`, `$4`), at or above the listed prefix (`$2`) and, in the
/// `below` form, under its end (`$6`): bounds the key index takes in any plan (a `starts_with`
/// over a parameter is a filter in a generic plan, which then walks every upload before the
/// prefix).
fn list_uploads_sql(ns: &str, below: &str) -> String {
    format!(
        "SELECT key, upload_id, initiated, meta->>'in' AS initiator, meta->'ac'->>'o' AS owner,
                meta->'uc' AS checksum FROM {ns}.uploads
          WHERE bucket_id = $1 AND key >= $2 {below} AND (key, upload_id) > ($3, $4)
          ORDER BY key, upload_id LIMIT $5"
    )
}

/// A part stored (or an upload completed), and whether its upload is encrypted with SSE-S3
/// (which S3's answer says; an SSE-C upload's answer names the key the request brought).
pub struct PartOutcome {
    pub written: PutOutcome,
    pub sse_s3: bool,
}

/// S3's limits: parts are numbered 1 to 10,000, and all but the last hold at least 5 MiB.
pub const MAX_PART_NUMBER: u32 = 10_000;
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;
const MAX_LISTED: usize = 1000;

/// The checksum a multipart upload keeps (CreateMultipartUpload's `x-amz-checksum-algorithm`
/// and `x-amz-checksum-type`): every part is stored with one of this algorithm, and the
/// completed object gets one made of them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct UploadChecksum {
    /// S3's name of the algorithm (`CRC32`, ...).
    #[serde(rename = "a")]
    pub algorithm: String,
    /// FULL_OBJECT: the object's checksum is its parts' CRCs combined into the whole object's;
    /// otherwise COMPOSITE: the algorithm over the parts' checksums.
    #[serde(rename = "f", default, skip_serializing_if = "std::ops::Not::not")]
    pub full_object: bool,
}

/// Makes a completed upload's checksum of its parts' (the protocol front knows the
/// algorithms, and what the completion request declared).
pub trait PartChecksums: Send + Sync {
    /// The object's checksum from its parts' base64 checksums and sizes, in order; an error
    /// (the completion declared another) refuses the completion.
    fn complete(&self, upload: &UploadChecksum, parts: &[(&str, u64)]) -> StoreResult<StoredChecksum>;

    /// The object keeps no checksum (its upload was created without an algorithm, or a part
    /// came through a gateway of an earlier layout): an error when the completion declared one
    /// it expects checked.
    fn none_kept(&self) -> StoreResult<()>;
}

#[derive(Debug, Clone)]
pub struct MultipartUpload {
    pub key: String,
    pub upload_id: String,
    pub initiated: SystemTime,
    pub parties: UploadParties,
    /// The checksum the upload keeps, if it keeps one (listings name its algorithm and type).
    pub checksum: Option<UploadChecksum>,
}

/// Who started an upload and who will own its object, as upload listings name them.
#[derive(Debug, Clone, Default)]
pub struct UploadParties {
    /// The access key that created the upload; `None`: anonymous, or an upload created before
    /// initiators were recorded.
    pub initiator: Option<String>,
    /// The object's owner when it is not the bucket's (the upload's ACL owner, `access/acl.rs`).
    pub owner: Option<String>,
}

impl UploadParties {
    fn of(row: &tokio_postgres::Row) -> UploadParties {
        UploadParties {
            initiator: row.get("initiator"),
            owner: row.get("owner"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct PartInfo {
    pub part_number: u32,
    pub size: u64,
    /// Hex MD5 of the part, without quotes.
    pub etag: String,
    pub last_modified: SystemTime,
    /// The part's checksum (base64) when its upload keeps one.
    pub checksum: Option<String>,
}

/// A part as a completion request names it.
#[derive(Debug, Clone)]
pub struct CompletedPart {
    pub part_number: u32,
    pub etag: String,
    /// The checksum the request gives for the part (`ChecksumCRC32`, ...), if any.
    pub checksum: Option<StoredChecksum>,
}

#[derive(Debug, Clone, Default)]
pub struct PartsPage {
    pub parts: Vec<PartInfo>,
    pub parties: UploadParties,
    /// The checksum the upload keeps, if it keeps one.
    pub checksum: Option<UploadChecksum>,
    /// The page was cut: more parts follow its last one.
    pub truncated: bool,
}

impl PartsPage {
    /// S3's `NextPartNumberMarker`, which it answers on every page, cut or not: the last part
    /// listed, or on an empty page the marker the page was asked after.
    pub fn next_marker(&self, after: u32) -> u32 {
        self.parts.last().map_or(after, |part| part.part_number)
    }
}

/// A ListMultipartUploads request: S3's prefix, delimiter and markers.
#[derive(Debug, Clone, Default)]
pub struct UploadsRequest {
    pub prefix: String,
    pub delimiter: Option<String>,
    pub key_marker: Option<String>,
    pub upload_id_marker: Option<String>,
    pub max_uploads: usize,
}

#[derive(Debug, Clone, Default)]
pub struct UploadsPage {
    pub uploads: Vec<MultipartUpload>,
    pub common_prefixes: Vec<String>,
    /// Set when the page was cut: the key and upload id the next page starts after.
    pub next_marker: Option<(String, String)>,
}

fn upload_number(upload_id: &str) -> StoreResult<i64> {
    upload_id.parse().map_err(|_| StoreError::NoSuchUpload)
}

fn check_part_number(part_number: u32) -> StoreResult<i32> {
    if !(1..=MAX_PART_NUMBER).contains(&part_number) {
        return Err(StoreError::InvalidArgument(
            "part number must be an integer between 1 and 10000, inclusive".into(),
        ));
    }
    Ok(part_number as i32)
}

fn is_sse_s3(sealed: &super::encryption::Sealed) -> bool {
    sealed.mode == super::encryption::Mode::S3
}

/// The checksum an upload's row keeps (its meta's `uc`), if any.
fn kept_checksum(row: &tokio_postgres::Row) -> Option<UploadChecksum> {
    row.get::<_, Option<Json<UploadChecksum>>>("checksum")
        .map(|Json(kept)| kept)
}

/// A page of part rows fetched one past `max_parts`, and where the next page starts if it was
/// cut. `max-parts` 0 gets an empty page that is not truncated, as S3 answers ListObjects'
/// `max-keys` 0: a truncated empty page could only name its own marker as the next one, and a
/// paginator would ask for it forever.
fn parts_page(rows: &[tokio_postgres::Row], max_parts: usize) -> (Vec<PartInfo>, bool) {
    let mut parts: Vec<PartInfo> = rows
        .iter()
        .map(|row| PartInfo {
            part_number: row.get::<_, i32>("part_number") as u32,
            size: row.get::<_, i64>("size") as u64,
            etag: row.get("etag"),
            last_modified: row.get("last_modified"),
            checksum: row.get("checksum"),
        })
        .collect();
    let cut = parts.len() > max_parts;
    parts.truncate(max_parts);
    // A page of no parts is never cut: a paginator would ask after the same marker forever.
    (parts, cut && max_parts > 0)
}

/// S3's answer to a completion naming a part it does not have (or with another ETag or checksum).
fn no_such_part() -> StoreError {
    StoreError::InvalidPart(
        "One or more of the specified parts could not be found.  The part may not have been uploaded, \
         or the specified entity tag may not match the part's entity tag."
            .into(),
    )
}

/// The checksum of a listed part of an upload that keeps `kept`: the one stored with it, which
/// the completion must name for a COMPOSITE upload and may name for a FULL_OBJECT one.
fn kept_part_checksum<'a>(kept: &UploadChecksum, part: &CompletedPart, stored: &'a str) -> StoreResult<&'a str> {
    match &part.checksum {
        Some(named) if !named.algorithm.eq_ignore_ascii_case(&kept.algorithm) || named.value.trim() != stored => {
            Err(no_such_part())
        }
        None if !kept.full_object => Err(StoreError::InvalidRequest(format!(
            "The upload was created using a {} checksum. The complete request must include the checksum for \
             each part. It was missing for part {} in the request.",
            kept.algorithm.to_ascii_lowercase(),
            part.part_number
        ))),
        _ => Ok(stored),
    }
}

/// S3's multipart ETag: the MD5 of the parts' binary MD5s, then `-` and the part count.
fn multipart_etag(part_etags: &[&str]) -> StoreResult<String> {
    let mut md5 = Md5::new();
    for etag in part_etags {
        let digest = hex::decode(etag).map_err(|_| StoreError::Corrupt(format!("part ETag {etag:?}")))?;
        md5.update(&digest);
    }
    Ok(format!("{}-{}", hex::encode(md5.finalize()), part_etags.len()))
}

impl Store {
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store create_multipart_upload", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn create_multipart_upload(
        &self,
        bucket: &BucketInfo,
        key: &str,
        meta: &ObjectMeta,
        encryption: &super::encryption::Requested,
        initiator: Option<&str>,
    ) -> StoreResult<String> {
        super::objects::check_key(key)?;
        let sealed;
        let meta = match super::encryption::seal(encryption, self.catalog.master_key()) {
            None => meta,
            Some((encrypted, _)) => {
                sealed = ObjectMeta {
                    encryption: Some(encrypted),
                    ..meta.clone()
                };
                &sealed
            }
        };
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.multipart.create_upload).await?;
        let Some(row) = client
            .query_opt(&statement, &[&bucket.id, &key, &Json(meta), &initiator])
            .await?
        else {
            self.catalog.forget_bucket(&bucket.name);
            return Err(StoreError::NoSuchBucket);
        };
        Ok(row.get::<_, i64>("upload_id").to_string())
    }

    /// Stores one part, streamed into a body of its own; a part uploaded again under the same
    /// number replaces the earlier one (whose body is retired).
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store upload_part", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn upload_part(
        &self,
        bucket: &BucketInfo,
        key: &str,
        upload_id: &str,
        part_number: u32,
        upload: Upload,
    ) -> StoreResult<PartOutcome> {
        let part_number = check_part_number(part_number)?;
        let upload_id = upload_number(upload_id)?;
        let Upload {
            mut body,
            declared_len,
            mut observer,
            encryption,
            ..
        } = upload;
        let (sealed, object_key, kept) = self.part_key(bucket, key, upload_id, &encryption).await?;
        if let Some(Json(kept)) = &kept {
            observer.keep(kept)?;
        }
        // Read ahead in batches and written without holding a connection while the client
        // sends; the last batch commits with the part's row.
        let digest = BodyDigest::start(observer);
        let mut staged = self
            .stage_body(
                &bucket.sql,
                true,
                BytesMut::new(),
                &mut body,
                Some(&digest),
                object_key.as_ref(),
            )
            .await?;
        let size = staged.size();
        check_length(declared_len, size)?;
        let (md5, checksum) = digest.finish(size).await?;
        let etag = hex::encode(md5);
        let part_checksum = kept.and(checksum.as_ref()).map(|checksum| checksum.value.as_str());
        let mut client = self.stream_client().await?;
        let tx = client.transaction().await?;
        let statement = tx.prepare_cached(&bucket.sql.multipart.lock_upload).await?;
        if tx
            .query_opt(&statement, &[&upload_id, &bucket.id, &key])
            .await?
            .is_none()
        {
            return Err(StoreError::NoSuchUpload);
        }
        let body_id = staged.finish(&tx).await?;
        let statement = tx.prepare_cached(&bucket.sql.multipart.put_part).await?;
        let row = tx
            .query_one(
                &statement,
                &[
                    &upload_id,
                    &part_number,
                    &(size as i64),
                    &etag,
                    &body_id,
                    &part_checksum,
                ],
            )
            .await?;
        tx.commit().await?;
        staged.committed();
        Ok(PartOutcome {
            written: PutOutcome {
                etag,
                size,
                last_modified: row.get("last_modified"),
                checksum,
                version_id: None,
                tags: BTreeMap::new(),
            },
            sse_s3: sealed.is_some_and(|Json(sealed)| is_sse_s3(&sealed)),
        })
    }

    /// The key a part of upload `upload_id` is encrypted with, and the upload's sealed key it
    /// is opened from (`None`: the upload is not encrypted); and the checksum the upload keeps.
    /// A part is encrypted with the upload's key: an SSE-C upload's parts must come with the
    /// key it was started with.
    async fn part_key(
        &self,
        bucket: &BucketInfo,
        key: &str,
        upload_id: i64,
        encryption: &super::encryption::Requested,
    ) -> StoreResult<(
        Option<Json<super::encryption::Sealed>>,
        Option<super::encryption::ObjectKey>,
        Option<Json<UploadChecksum>>,
    )> {
        let (sealed, kept): (Option<Json<super::encryption::Sealed>>, _) = {
            let client = self.client().await?;
            let statement = client.prepare_cached(&bucket.sql.multipart.upload_encryption).await?;
            let Some(row) = client.query_opt(&statement, &[&upload_id, &bucket.id, &key]).await? else {
                return Err(StoreError::NoSuchUpload);
            };
            (row.get("encryption"), row.get("checksum"))
        };
        let offered = match encryption {
            super::encryption::Requested::Customer(customer) => Some(customer),
            _ => None,
        };
        let object_key = super::encryption::open(
            sealed.as_ref().map(|Json(sealed)| sealed),
            offered,
            self.catalog.master_key(),
        )?;
        Ok((sealed, object_key, kept))
    }

    /// Turns an upload into its object, if `condition` holds. The listed parts must exist with
    /// the given ETags, ascend, and all but the last hold at least [`MIN_PART_SIZE`]; parts
    /// not listed are dropped; the parts must add up to `expected_size` when the client names
    /// one (`x-amz-mp-object-size`). On any refusal the upload stays as it was.
    #[allow(clippy::too_many_arguments)]
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store complete_multipart_upload", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn complete_multipart_upload(
        &self,
        bucket: &BucketInfo,
        key: &str,
        upload_id: &str,
        parts: &[CompletedPart],
        checksums: &dyn PartChecksums,
        condition: &WriteCondition,
        expected_size: Option<u64>,
    ) -> StoreResult<PartOutcome> {
        let upload_id = upload_number(upload_id)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // Deleting the upload row first waits for parts still committing, and stops new ones.
        let statement = tx.prepare_cached(&bucket.sql.multipart.take_upload).await?;
        let Some(upload) = tx.query_opt(&statement, &[&upload_id, &bucket.id, &key]).await? else {
            return self.completed_before(&tx, bucket, key, upload_id).await;
        };
        let Json(mut meta): Json<ObjectMeta> = upload.get("meta");
        let statement = tx.prepare_cached(&bucket.sql.multipart.upload_parts).await?;
        let stored: Vec<(i32, i64, String, Option<String>)> = tx
            .query(&statement, &[&upload_id])
            .await?
            .iter()
            .map(|row| {
                (
                    row.get("part_number"),
                    row.get("size"),
                    row.get("etag"),
                    row.get("checksum"),
                )
            })
            .collect();
        if parts.windows(2).any(|pair| pair[0].part_number >= pair[1].part_number) {
            return Err(StoreError::InvalidPartOrder);
        }
        let mut numbers = Vec::with_capacity(parts.len());
        let mut offsets = Vec::with_capacity(parts.len());
        let mut etags = Vec::with_capacity(parts.len());
        let kept = meta.upload_checksum.take();
        let mut part_checksums = kept.as_ref().map(|_| Vec::with_capacity(parts.len()));
        let mut size = 0u64;
        for (index, part) in parts.iter().enumerate() {
            let number = check_part_number(part.part_number)?;
            let found = stored
                .binary_search_by_key(&number, |(n, ..)| *n)
                .ok()
                .map(|at| &stored[at])
                .filter(|(_, _, etag, _)| *etag == part.etag.trim_matches('"'));
            let Some((_, part_size, etag, checksum)) = found else {
                return Err(no_such_part());
            };
            let part_size = *part_size as u64;
            if index + 1 < parts.len() && part_size < MIN_PART_SIZE {
                return Err(StoreError::EntityTooSmall);
            }
            if let Some(kept) = &kept {
                match checksum.as_deref() {
                    Some(stored) => {
                        let named = kept_part_checksum(kept, part, stored)?;
                        if let Some(sums) = part_checksums.as_mut() {
                            sums.push((named, part_size));
                        }
                    }
                    // Stored by a gateway of an earlier layout (a rolling upgrade), which keeps
                    // no part checksums: the object keeps none, as it did then.
                    None => part_checksums = None,
                }
            }
            numbers.push(number);
            offsets.push(size as i64);
            etags.push(etag.as_str());
            size += part_size;
        }
        if let Some(expected) = expected_size.filter(|expected| *expected != size) {
            return Err(StoreError::InvalidRequest(format!(
                "The provided 'x-amz-mp-object-size' header value {expected} does not match what was computed: {size}"
            )));
        }
        let etag = multipart_etag(&etags)?;
        meta.checksum = match (kept, part_checksums) {
            (Some(kept), Some(sums)) => Some(checksums.complete(&kept, &sums)?),
            _ => {
                checksums.none_kept()?;
                None
            }
        };
        tx.execute(&bucket.sql.multipart.drop_unlisted_parts, &[&upload_id, &numbers])
            .await?;
        tx.execute(&bucket.sql.multipart.place_parts, &[&upload_id, &numbers, &offsets])
            .await?;
        meta.parts = Some(parts.len() as u32);
        let row = NewObjectRow {
            key,
            size,
            etag: &etag,
            meta: &meta,
            inline: None,
            body_id: Some(upload_id),
        };
        let written = self.write_object_row(&tx, bucket, &row, condition).await?;
        tx.commit().await?;
        Ok(PartOutcome {
            sse_s3: meta.encryption.as_ref().is_some_and(is_sse_s3),
            written: PutOutcome {
                etag,
                size,
                last_modified: written.last_modified,
                checksum: meta.checksum,
                version_id: written.version_id,
                tags: meta.tags,
            },
        })
    }

    /// A completion of an upload that is gone: if it became the object now under `key` (a
    /// client retrying a completion whose answer it lost), S3 answers with that object again.
    async fn completed_before(
        &self,
        tx: &impl deadpool_postgres::GenericClient,
        bucket: &BucketInfo,
        key: &str,
        upload_id: i64,
    ) -> StoreResult<PartOutcome> {
        let statement = tx.prepare_cached(&bucket.sql.head).await?;
        let row = tx.query_opt(&statement, &[&bucket.id, &key]).await?;
        let row = match self.found(bucket, row) {
            Err(StoreError::NoSuchKey) => return Err(StoreError::NoSuchUpload),
            found => found?,
        };
        if row.get::<_, Option<i64>>("body_id") != Some(upload_id) {
            return Err(StoreError::NoSuchUpload);
        }
        let head = ObjectHead::from_row(&row);
        Ok(PartOutcome {
            sse_s3: head.meta.encryption.as_ref().is_some_and(is_sse_s3),
            written: PutOutcome {
                etag: head.etag,
                size: head.size,
                last_modified: head.last_modified,
                checksum: head.meta.checksum,
                // As the first answer: a null version has no version id to answer.
                version_id: row.get("version_id"),
                tags: head.meta.tags,
            },
        })
    }

    /// Drops an upload and retires its parts' bodies.
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store abort_multipart_upload", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn abort_multipart_upload(
        &self,
        bucket: &BucketInfo,
        key: &str,
        upload_id: &str,
    ) -> StoreResult<()> {
        let upload_id = upload_number(upload_id)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let statement = tx.prepare_cached(&bucket.sql.multipart.take_upload).await?;
        if tx
            .query_opt(&statement, &[&upload_id, &bucket.id, &key])
            .await?
            .is_none()
        {
            return Err(StoreError::NoSuchUpload);
        }
        tx.execute(&bucket.sql.multipart.drop_parts, &[&vec![upload_id]])
            .await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store list_parts", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn list_parts(
        &self,
        bucket: &BucketInfo,
        key: &str,
        upload_id: &str,
        after_part: u32,
        max_parts: usize,
    ) -> StoreResult<PartsPage> {
        let upload_id = upload_number(upload_id)?;
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.multipart.find_upload).await?;
        let Some(upload) = client.query_opt(&statement, &[&upload_id, &bucket.id, &key]).await? else {
            return Err(StoreError::NoSuchUpload);
        };
        let max_parts = max_parts.min(MAX_LISTED);
        let statement = client.prepare_cached(&bucket.sql.multipart.list_parts).await?;
        let after = after_part.min(MAX_PART_NUMBER) as i32;
        let rows = client
            .query(&statement, &[&upload_id, &after, &(max_parts as i64 + 1)])
            .await?;
        let (parts, truncated) = parts_page(&rows, max_parts);
        Ok(PartsPage {
            parts,
            parties: UploadParties::of(&upload),
            checksum: kept_checksum(&upload),
            truncated,
        })
    }

    /// The parts of the completed multipart object `head` was read as (its version), after
    /// part `after_part`, at most `max_parts` of them: GetObjectAttributes' ObjectParts.
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store object_parts", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn object_parts(
        &self,
        bucket: &BucketInfo,
        key: &str,
        head: &ObjectHead,
        after_part: u32,
        max_parts: usize,
    ) -> StoreResult<PartsPage> {
        let max_parts = max_parts.min(MAX_LISTED);
        let after = after_part.min(MAX_PART_NUMBER) as i32;
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.multipart.object_parts).await?;
        let rows = client
            .query(
                &statement,
                &[
                    &bucket.id,
                    &key,
                    &head.etag,
                    &head.version_id,
                    &after,
                    &(max_parts as i64 + 1),
                ],
            )
            .await?;
        let (parts, truncated) = parts_page(&rows, max_parts);
        Ok(PartsPage {
            parts,
            truncated,
            ..PartsPage::default()
        })
    }

    /// Uploads in progress in key order (then by age), with S3's key and upload-id markers.
    /// Keys rolled up under `delimiter` appear once, as a common prefix.
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store list_multipart_uploads", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn list_multipart_uploads(
        &self,
        bucket: &BucketInfo,
        request: &UploadsRequest,
    ) -> StoreResult<UploadsPage> {
        let UploadsRequest {
            prefix,
            delimiter,
            key_marker,
            upload_id_marker,
            max_uploads,
        } = request;
        let (prefix, max_uploads) = (prefix.as_str(), *max_uploads);
        let mut page = UploadsPage::default();
        let max_uploads = max_uploads.min(MAX_LISTED);
        if max_uploads == 0 {
            return Ok(page);
        }
        let delimiter = delimiter.as_deref().filter(|d| !d.is_empty());
        let Some((mut key_marker, mut id_marker)) =
            uploads_from(prefix, delimiter, key_marker.as_deref(), upload_id_marker.as_deref())
        else {
            return Ok(page);
        };
        let end = (!prefix.is_empty())
            .then(|| super::listing::prefix_successor(prefix))
            .flatten();
        let client = self.client().await?;
        let statement = client
            .prepare_cached(match end {
                Some(_) => &bucket.sql.multipart.list_uploads_below,
                None => &bucket.sql.multipart.list_uploads,
            })
            .await?;
        let mut window = super::listing::Window::new((max_uploads as i64 + 1).clamp(64, MAX_LISTED as i64 + 1));
        let mut last = None;
        loop {
            let limit = window.rows();
            let rows = match &end {
                Some(end) => {
                    client
                        .query(&statement, &[&bucket.id, &prefix, &key_marker, &id_marker, &limit, end])
                        .await?
                }
                None => {
                    client
                        .query(&statement, &[&bucket.id, &prefix, &key_marker, &id_marker, &limit])
                        .await?
                }
            };
            let mut rolled_up_last = None;
            for row in &rows {
                let key: String = row.get("key");
                let upload_id: i64 = row.get("upload_id");
                (key_marker, id_marker) = (key.clone(), upload_id);
                let common = delimiter.and_then(|d| {
                    key[prefix.len()..]
                        .find(d)
                        .map(|at| key[..prefix.len() + at + d.len()].to_owned())
                });
                rolled_up_last = common.clone();
                if common.is_some() && page.common_prefixes.last() == common.as_ref() {
                    continue;
                }
                if page.uploads.len() + page.common_prefixes.len() == max_uploads {
                    page.next_marker = last;
                    return Ok(page);
                }
                match common {
                    Some(common) => {
                        last = Some((common.clone(), String::new()));
                        page.common_prefixes.push(common);
                    }
                    None => {
                        last = Some((key.clone(), upload_id.to_string()));
                        page.uploads.push(MultipartUpload {
                            key,
                            upload_id: upload_id.to_string(),
                            initiated: row.get("initiated"),
                            parties: UploadParties::of(row),
                            checksum: kept_checksum(row),
                        });
                    }
                }
            }
            if (rows.len() as i64) < limit {
                break;
            }
            // The window filled up: go on after its last row, past all of a rolled-up prefix.
            match rolled_up_last {
                Some(common) => match super::listing::prefix_successor(&common) {
                    Some(next) => {
                        (key_marker, id_marker) = (next, -1);
                        window.jumped();
                    }
                    None => break,
                },
                None => window.walked(),
            }
        }
        Ok(page)
    }
}

/// Where a listing of uploads starts: after the upload-id marker among the uploads of the key
/// marker (without one, after all of them). A key marker that is a common prefix (the
/// NextKeyMarker of a rolled-up page) skips every upload under it. `None`: nothing comes after.
fn uploads_from(
    prefix: &str,
    delimiter: Option<&str>,
    key_marker: Option<&str>,
    upload_id_marker: Option<&str>,
) -> Option<(String, i64)> {
    let mut key_marker = key_marker.unwrap_or_default().to_owned();
    let mut id_marker = match upload_id_marker {
        Some(id) if !key_marker.is_empty() => id.parse().unwrap_or(i64::MAX),
        _ if key_marker.is_empty() => -1,
        _ => i64::MAX,
    };
    if let Some(d) = delimiter
        && let Some(rest) = key_marker.strip_prefix(prefix)
        && rest.find(d).is_some_and(|at| at + d.len() == rest.len())
    {
        (key_marker, id_marker) = (super::listing::prefix_successor(&key_marker)?, -1);
    }
    Some((key_marker, id_marker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_etag_is_md5_of_part_md5s() {
        let a = hex::encode(Md5::digest(b"a"));
        let b = hex::encode(Md5::digest(b"b"));
        let mut joined = Md5::digest(b"a").to_vec();
        joined.extend_from_slice(&Md5::digest(b"b"));
        let expected = format!("{}-2", hex::encode(Md5::digest(&joined)));
        assert_eq!(multipart_etag(&[&a, &b]).unwrap(), expected);
    }
}
