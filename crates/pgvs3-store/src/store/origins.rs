//! Origins: which cache buckets front which remote S3 buckets, and how. Catalog rows written
//! only through `pgvs3.put_origin` / `pgvs3.drop_origin` (the typed client `pgvs3_catalog`,
//! shared with the operator).

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use tokio_postgres::Row;

use super::catalog::Catalog;
use super::{StoreError, StoreResult};
use crate::master_key::MasterKey;
use crate::pg::checkout::checkout;

/// What a cache bucket does with writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    /// Writes go to the origin and invalidate the cached copy.
    ReadThrough,
    /// Writes reach the origin before they are acknowledged, and the cache keeps the body.
    WriteThrough,
    /// Like write-through below the threshold; bodies at or above it are acknowledged once
    /// stored, and uploaded by a background worker.
    WriteBack,
}

impl CacheMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMode::ReadThrough => "read-through",
            CacheMode::WriteThrough => "write-through",
            CacheMode::WriteBack => "write-back",
        }
    }
}

impl fmt::Display for CacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CacheMode {
    type Err = String;
    fn from_str(text: &str) -> Result<CacheMode, String> {
        match text {
            "read-through" => Ok(CacheMode::ReadThrough),
            "write-through" => Ok(CacheMode::WriteThrough),
            "write-back" => Ok(CacheMode::WriteBack),
            other => Err(format!(
                "unknown cache mode {other:?} (read-through, write-through or write-back)"
            )),
        }
    }
}

/// A cache bucket's origin and policy.
#[derive(Clone, PartialEq, Eq)]
pub struct Origin {
    pub endpoint: String,
    pub region: String,
    pub origin_bucket: String,
    pub access_key: String,
    pub secret_key: String,
    pub path_style: bool,
    pub mode: CacheMode,
    pub ttl: Duration,
    pub negative_ttl: Duration,
    pub fill_concurrency: u32,
    pub size_limit: Option<u64>,
    pub write_back_threshold: u64,
    /// Range reads of objects not cached whole fill the aligned chunks of this size they touch.
    pub range_chunk: u32,
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Origin")
            .field("endpoint", &self.endpoint)
            .field("origin_bucket", &self.origin_bucket)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Origin {
    pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
    pub const DEFAULT_FILL_CONCURRENCY: u32 = 8;
    pub const DEFAULT_WRITE_BACK_THRESHOLD: u64 = 8 * 1024 * 1024;
    pub const DEFAULT_RANGE_CHUNK: u32 = 1024 * 1024;
}

/// An origin as listed: the bucket it serves and when it last changed.
pub struct OriginEntry {
    pub bucket: String,
    pub origin: Origin,
    pub updated_at: SystemTime,
}

/// The origin columns, as joined onto a bucket row (all NULL for an ordinary bucket).
pub(super) const ORIGIN_COLUMNS: &str = "o.endpoint, o.region, o.origin_bucket, o.access_key, o.secret_encrypted, \
     o.path_style, o.mode, o.ttl_seconds, o.negative_ttl_seconds, o.fill_concurrency, o.size_limit_bytes, \
     o.write_back_threshold, o.range_chunk_bytes";

/// Decodes the origin columns ([`ORIGIN_COLUMNS`], by name); `None` when the bucket has no origin.
pub(super) fn origin_from_row(row: &Row, master_key: &MasterKey) -> anyhow::Result<Option<Origin>> {
    let Some(endpoint) = row.get::<_, Option<String>>("endpoint") else {
        return Ok(None);
    };
    let sealed: Vec<u8> = row.get("secret_encrypted");
    let secret_key = master_key
        .open(&sealed)
        .map_err(|err| anyhow::anyhow!("origin secret of {endpoint}: {err}"))?;
    let mode: String = row.get("mode");
    Ok(Some(Origin {
        endpoint,
        region: row.get("region"),
        origin_bucket: row.get("origin_bucket"),
        access_key: row.get("access_key"),
        secret_key,
        path_style: row.get("path_style"),
        mode: mode.parse().map_err(anyhow::Error::msg)?,
        ttl: Duration::from_secs(row.get::<_, i32>("ttl_seconds") as u64),
        negative_ttl: Duration::from_secs(row.get::<_, i32>("negative_ttl_seconds") as u64),
        fill_concurrency: row.get::<_, i32>("fill_concurrency") as u32,
        size_limit: row.get::<_, Option<i64>>("size_limit_bytes").map(|n| n as u64),
        write_back_threshold: row.get::<_, i64>("write_back_threshold") as u64,
        range_chunk: row.get::<_, i32>("range_chunk_bytes") as u32,
    }))
}

impl Catalog {
    /// Creates or updates the cache bucket `bucket` in front of `origin`.
    pub async fn put_origin(&self, bucket: &str, origin: &Origin) -> StoreResult<()> {
        let client = checkout(self.pool()).await?;
        let control = |err: pgvs3_catalog::Error| match err.kind() {
            pgvs3_catalog::ErrorKind::Refused => StoreError::InvalidArgument(err.message()),
            pgvs3_catalog::ErrorKind::InvalidSetting => {
                StoreError::InvalidArgument(format!("invalid origin setting: {}", err.message()))
            }
            _ => StoreError::from(err.into_source()),
        };
        let sealed = pgvs3_catalog::seal_origin_secret(&**client, bucket, self.master_key(), &origin.secret_key)
            .await
            .map_err(control)?;
        let settings = pgvs3_catalog::OriginSettings {
            bucket,
            endpoint: &origin.endpoint,
            origin_bucket: &origin.origin_bucket,
            region: &origin.region,
            access_key: &origin.access_key,
            sealed_secret: &sealed,
            cache_mode: origin.mode.as_str(),
            path_style: origin.path_style,
            ttl_seconds: secs(origin.ttl),
            negative_ttl_seconds: secs(origin.negative_ttl),
            fill_concurrency: origin.fill_concurrency.min(1024) as i32,
            size_limit_bytes: origin.size_limit.map(|n| n.min(i64::MAX as u64) as i64),
            write_back_threshold: origin.write_back_threshold.min(i64::MAX as u64) as i64,
            range_chunk_bytes: origin.range_chunk.min(i32::MAX as u32) as i32,
        };
        pgvs3_catalog::put_origin(&**client, &settings).await.map_err(control)?;
        self.forget_bucket(bucket);
        Ok(())
    }

    /// Drops a cache bucket with its cached entries. Refused while write-backs are pending,
    /// unless `force` (which loses them).
    pub async fn drop_origin(&self, bucket: &str, force: bool) -> StoreResult<bool> {
        let client = checkout(self.pool()).await?;
        let dropped = pgvs3_catalog::drop_origin(&**client, bucket, force)
            .await
            .map_err(|err| match err.kind() {
                pgvs3_catalog::ErrorKind::PendingWriteBack => StoreError::InvalidArgument(format!(
                    "{}: wait for the uploads to drain, or force the drop to lose them",
                    err.message()
                )),
                _ => StoreError::from(err.into_source()),
            })?;
        self.forget_bucket(bucket);
        Ok(dropped)
    }

    pub async fn list_origins(&self) -> StoreResult<Vec<OriginEntry>> {
        let client = checkout(self.pool()).await?;
        let rows = client
            .query(
                &format!(
                    "SELECT b.name, o.updated_at, {ORIGIN_COLUMNS}
                       FROM pgvs3.origins o JOIN pgvs3.buckets b ON b.id = o.bucket_id ORDER BY b.name"
                ),
                &[],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let origin = origin_from_row(row, self.master_key())
                    .map_err(|err| StoreError::Corrupt(err.to_string()))?
                    .expect("joined rows have an origin");
                Ok(OriginEntry {
                    bucket: row.get("name"),
                    updated_at: row.get("updated_at"),
                    origin,
                })
            })
            .collect()
    }
}

fn secs(duration: Duration) -> i32 {
    duration.as_secs().min(i32::MAX as u64) as i32
}
