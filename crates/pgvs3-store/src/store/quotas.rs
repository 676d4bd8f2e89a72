//! Bucket quotas: limits on a bucket's bytes and objects, enforced by the catalog's usage
//! trigger inside every write statement (see migration 0007), so a write past a limit fails
//! as [`StoreError::QuotaExceeded`] with nothing written. Quotas are set through the typed
//! control client (`pgvs3_catalog::set_bucket_quota`).

use super::{Catalog, StoreError, StoreResult};
use crate::pg::checkout::checkout;

/// A bucket's limits (`None`: unlimited) and its usage as the trigger keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketQuota {
    pub max_bytes: Option<i64>,
    pub max_objects: Option<i64>,
    pub used_bytes: i64,
    pub used_objects: i64,
}

impl Catalog {
    /// Sets (or, with both limits `None`, removes) the quota of `bucket`.
    pub async fn set_bucket_quota(
        &self,
        bucket: &str,
        max_bytes: Option<i64>,
        max_objects: Option<i64>,
    ) -> StoreResult<()> {
        let client = checkout(self.pool()).await?;
        pgvs3_catalog::set_bucket_quota(&**client, bucket, max_bytes, max_objects)
            .await
            .map_err(|err| match err.kind() {
                pgvs3_catalog::ErrorKind::NoSuchBucket => StoreError::NoSuchBucket,
                pgvs3_catalog::ErrorKind::Refused => StoreError::InvalidArgument(err.message()),
                _ => StoreError::from(err.into_source()),
            })?;
        Ok(())
    }

    /// The quota of `bucket`, or `None` when it has none.
    pub async fn bucket_quota(&self, bucket: &str) -> StoreResult<Option<BucketQuota>> {
        let client = checkout(self.pool()).await?;
        let row = client
            .query_opt(
                "SELECT q.max_bytes, q.max_objects, q.used_bytes, q.used_objects
                   FROM pgvs3.bucket_quotas q JOIN pgvs3.buckets b ON b.id = q.bucket_id
                  WHERE b.name = $1",
                &[&bucket],
            )
            .await?;
        Ok(row.map(|row| BucketQuota {
            max_bytes: row.get("max_bytes"),
            max_objects: row.get("max_objects"),
            used_bytes: row.get("used_bytes"),
            used_objects: row.get("used_objects"),
        }))
    }
}
