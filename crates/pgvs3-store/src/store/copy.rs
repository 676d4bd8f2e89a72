//! Server-side copy. The bytes never leave PostgreSQL: an inline body is copied with its row,
//! a chunked body by one `INSERT .. SELECT` of its chunks, a multipart body part by part.
//!
//! Why copy rather than share a body between objects: bodies are retired by the row that owns
//! them (a trigger) and reaped after a grace period; sharing would need reference counts kept
//! exact under concurrent overwrites and deletes of every sharer, on every write path. A copy
//! inside the database costs disk I/O but no network, no gateway memory and no second design
//! for body lifetimes.

use super::objects::{NewObjectRow, check_key};
use super::{BucketInfo, ObjectMeta, Preconditions, PutOutcome, Store, StoreError, StoreResult, WriteCondition};

/// Where a copy comes from, and the preconditions on it (`x-amz-copy-source-if-*`).
pub struct CopySource<'a> {
    pub bucket: &'a BucketInfo,
    pub key: &'a str,
    pub conditions: &'a Preconditions,
}

impl Store {
    /// Copies an object if `condition` holds on the destination key (checked atomically with
    /// the write, as a PutObject's). `meta` and `tags` replace the source's when given (S3's
    /// REPLACE directives); the copy's ACL is `acl`, never the source's (as S3's); a copy keeps
    /// the source's ETag, since it has the same bytes. `None` when
    /// the source is encrypted: its chunks are sealed for its own bodies and key, so the copy
    /// must be read and written through the gateway.
    #[allow(clippy::too_many_arguments)]
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store copy_object", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn copy_object(
        &self,
        source: &CopySource<'_>,
        to: &BucketInfo,
        key: &str,
        meta: Option<ObjectMeta>,
        tags: Option<super::Tags>,
        lock: super::RequestedLock,
        acl: Option<crate::access::acl::Acl>,
        condition: &WriteCondition,
    ) -> StoreResult<Option<PutOutcome>> {
        check_key(source.key)?;
        check_key(key)?;
        let from = source.bucket;
        debug_assert_eq!(
            from.namespace, to.namespace,
            "copies inside the database stay in one namespace"
        );
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let statement = tx.prepare_cached(&from.sql.get).await?;
        let row = tx.query_opt(&statement, &[&from.id, &source.key]).await?;
        let row = self.found(from, row)?;
        let head = super::objects::ObjectHead::from_row(&row);
        source
            .conditions
            .check(&head)
            .map_err(super::conditions::as_copy_source_error)?;
        if head.meta.encryption.is_some() {
            return Ok(None);
        }
        let mut meta = meta.unwrap_or_else(|| head.meta.clone());
        meta.parts = head.meta.parts;
        meta.checksum = head.meta.checksum.clone();
        meta.tags = tags.unwrap_or_else(|| head.meta.tags.clone());
        meta.acl = acl;
        lock.apply(&mut meta);
        to.lock_new_version(&mut meta)?;
        let inline: Option<&[u8]> = row.get("inline");
        let body_id = match row.get::<_, Option<i64>>("body_id") {
            None => None,
            Some(source_body) => {
                let copy: i64 = tx.query_one(&to.sql.bodies.next_body_id, &[]).await?.get("body_id");
                let sql = if head.meta.parts.is_some() {
                    &to.sql.copy_parts
                } else {
                    &to.sql.bodies.copy_body
                };
                tx.execute(sql, &[&source_body, &copy]).await?;
                // The source was read without a lock: overwritten or deleted since, its body
                // retires, and once past the grace period the reaper deletes its chunks, maybe
                // before the copy read them all. Still held by a row now, after the copy's
                // statement, it was held all along: bodies never come back from retirement.
                let held: bool = tx
                    .query_one(&to.sql.body_held, &[&from.id, &source.key, &source_body])
                    .await?
                    .get("held");
                if !held {
                    return Err(StoreError::Unavailable(
                        "The copy's source changed while it was copied; please try again.".into(),
                    ));
                }
                Some(copy)
            }
        };
        let row = NewObjectRow {
            key,
            size: head.size,
            etag: &head.etag,
            meta: &meta,
            inline,
            body_id,
        };
        // Bucket notifications name this write ObjectCreated:Copy (functions/objects.sql).
        tx.execute("SELECT set_config('pgvs3.event_source', 'copy', true)", &[])
            .await?;
        let written = self.write_object_row(&tx, to, &row, condition).await?;
        tx.commit().await?;
        Ok(Some(PutOutcome {
            etag: head.etag,
            size: head.size,
            last_modified: written.last_modified,
            checksum: meta.checksum,
            version_id: written.version_id,
            tags: meta.tags,
        }))
    }
}
