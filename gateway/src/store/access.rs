//! Writes of a bucket's access rules (CORS rules, bucket policy, public access block, default
//! encryption) to its catalog row. Reads go
//! through the catalog cache (`BucketInfo::access`), never to the database per request.

use tokio_postgres::types::Json;

use super::{BucketInfo, Store, StoreError, StoreResult};
use crate::access::PublicAccessBlock;
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
