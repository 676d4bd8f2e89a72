//! Writes of a bucket's access rules (CORS rules, bucket policy, public access block, default
//! encryption, ownership controls, ACL) to its catalog row. Reads go
//! through the catalog cache (`BucketInfo::access`), never to the database per request.

use tokio_postgres::types::Json;

use super::{BucketInfo, Store, StoreError, StoreResult};
use crate::access::PublicAccessBlock;
use crate::access::acl::{Acl, Ownership};
use crate::access::cors::CorsRules;
use crate::pg::checkout::checkout;

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
        self.patch_version_meta(bucket, key, version_id, "ac", value, |_, _| Ok(()))
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

    pub(super) async fn set_access_column(
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

/// Disabled access keys: kept in the catalog (their buckets, policy and secret stay) but skipped
/// by the key lookup (`Catalog::access_key` and the cached keys read `WHERE NOT disabled`), so
/// every listener refuses one as an unknown key.
impl super::Catalog {
    /// Disables or enables a key other than the root key (disabling the root key would lock the
    /// operator out). False when there is no such key. The change moves the catalog version:
    /// this gateway reloads now, the others on the NOTIFY.
    pub async fn set_access_key_disabled(&self, access_key: &str, disabled: bool) -> anyhow::Result<bool> {
        let client = checkout(self.pool()).await?;
        let found = client
            .query_opt(
                "WITH changed AS (
                     UPDATE pgvs3.access_keys SET disabled = $2
                      WHERE access_key = $1 AND NOT is_root AND disabled IS DISTINCT FROM $2)
                 SELECT 1 FROM pgvs3.access_keys WHERE access_key = $1 AND NOT is_root",
                &[&access_key, &disabled],
            )
            .await?
            .is_some();
        drop(client);
        self.reload_now().await?;
        Ok(found)
    }

    /// The disabled keys' ids (the key lookup does not see them; the key lists name them).
    pub async fn disabled_access_keys(&self) -> StoreResult<std::collections::HashSet<String>> {
        let client = checkout(self.pool()).await?;
        let rows = client
            .query("SELECT access_key FROM pgvs3.access_keys WHERE disabled", &[])
            .await?;
        Ok(rows.iter().map(|row| row.get("access_key")).collect())
    }

    /// Whether a key of this id exists, disabled or not: creating one must not replace it.
    pub async fn access_key_exists(&self, access_key: &str) -> StoreResult<bool> {
        let client = checkout(self.pool()).await?;
        let row = client
            .query_opt("SELECT 1 FROM pgvs3.access_keys WHERE access_key = $1", &[&access_key])
            .await?;
        Ok(row.is_some())
    }
}
