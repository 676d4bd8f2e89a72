//! Writes of a bucket's access rules (CORS rules, bucket policy, public access block, default
//! encryption, ownership controls, ACL) to its catalog row. Reads go
//! through the catalog cache (`BucketInfo::access`), never to the database per request.

use tokio_postgres::types::Json;

use super::{BucketInfo, Store, StoreError, StoreResult};
use crate::access::PublicAccessBlock;
use crate::access::acl::{Acl, Ownership};
use crate::access::cors::CorsRules;

impl Store {
    /// Replaces the bucket's CORS rules; `None` deletes them.
    pub(crate) async fn set_bucket_cors(&self, bucket: &BucketInfo, rules: Option<&CorsRules>) -> StoreResult<()> {
        self.set_access_column(
            bucket,
            "UPDATE pgvs3.buckets SET cors = $2 WHERE id = $1",
            &rules.map(Json),
        )
        .await
    }

    /// Replaces the bucket's policy document (already checked); `None` deletes it.
    pub(crate) async fn set_bucket_policy(&self, bucket: &BucketInfo, text: Option<&str>) -> StoreResult<()> {
        self.set_access_column(bucket, "UPDATE pgvs3.buckets SET policy = $2 WHERE id = $1", &text)
            .await
    }

    /// Replaces the bucket's public access block; `None` deletes it.
    pub(crate) async fn set_bucket_public_access_block(
        &self,
        bucket: &BucketInfo,
        block: Option<&PublicAccessBlock>,
    ) -> StoreResult<()> {
        self.set_access_column(
            bucket,
            "UPDATE pgvs3.buckets SET public_access_block = $2 WHERE id = $1",
            &block.map(Json),
        )
        .await
    }

    /// Replaces the bucket's ownership controls; `None` deletes them.
    pub(crate) async fn set_bucket_ownership(
        &self,
        bucket: &BucketInfo,
        ownership: Option<Ownership>,
    ) -> StoreResult<()> {
        self.set_access_column(
            bucket,
            "UPDATE pgvs3.buckets SET object_ownership = $2 WHERE id = $1",
            &ownership.map(Ownership::as_str),
        )
        .await
    }

    /// Replaces the bucket's ACL; `None`: private.
    pub(crate) async fn set_bucket_acl(&self, bucket: &BucketInfo, acl: Option<&Acl>) -> StoreResult<()> {
        self.set_access_column(
            bucket,
            "UPDATE pgvs3.buckets SET acl = $2 WHERE id = $1",
            &acl.map(Json),
        )
        .await
    }

    /// Replaces the ACL of an object (its current version, or the version named); `None`:
    /// private. Kept in the version's metadata (`ac`), so a read finds it in the row it reads.
    pub(crate) async fn set_object_acl(
        &self,
        bucket: &BucketInfo,
        key: &str,
        version_id: Option<&str>,
        acl: Option<&Acl>,
    ) -> StoreResult<()> {
        let value = acl
            .map(serde_json::to_value)
            .transpose()
            .map_err(|err| StoreError::InvalidArgument(err.to_string()))?;
        self.patch_version_meta(bucket, key, version_id, "ac", value, |_| Ok(()))
            .await
    }

    /// Turns the bucket's default encryption (SSE-S3) on or off.
    pub(crate) async fn set_bucket_encryption(&self, bucket: &BucketInfo, on: bool) -> StoreResult<()> {
        self.set_access_column(
            bucket,
            "UPDATE pgvs3.buckets SET encryption = $2 WHERE id = $1",
            &on.then_some("AES256"),
        )
        .await
    }

    async fn set_access_column(
        &self,
        bucket: &BucketInfo,
        sql: &str,
        value: &(dyn tokio_postgres::types::ToSql + Sync),
    ) -> StoreResult<()> {
        let client = self.client().await?;
        let updated = client.execute(sql, &[&bucket.id, value]).await?;
        drop(client);
        if updated == 0 {
            self.catalog.forget_bucket(&bucket.name);
            return Err(StoreError::NoSuchBucket);
        }
        // Reloaded now, as versioning is: the client's next request (often the Get of what it
        // just put) sees the change on this gateway, and others reload on the NOTIFY.
        self.catalog
            .refresh()
            .await
            .map_err(|err| StoreError::Unavailable(err.to_string()))?;
        Ok(())
    }
}
