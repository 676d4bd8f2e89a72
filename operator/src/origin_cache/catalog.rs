//! The catalog side of an OriginCache, through the gateway's SQL control API and its typed
//! client: `pgvs3.put_origin`, `pgvs3.drop_origin`, `pgvs3.origin_secret`
//! (gateway/migrations/functions/cache.sql).

use pgvs3_catalog::ErrorKind;
use pgvs3_secret::MasterKey;
use tokio_postgres::GenericClient;

use super::build::{CACHE_NAMESPACE, OriginRow};
use crate::bucket::catalog as bucket_catalog;
use crate::context::Result;
use crate::database::{self, Binding};

/// The cache bucket's own access key (applications use the cache with it).
pub struct CacheKey<'a> {
    pub id: &'a str,
    pub secret: &'a str,
    pub description: &'a str,
}

/// The key the gateways sign origin requests with.
pub struct OriginKey<'a> {
    pub access_key: &'a str,
    pub secret_key: &'a str,
}

/// What the catalog made of a cache.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    /// The cache bucket's id.
    Configured(i64),
    /// A bucket of that name belongs to another key: never taken over.
    OwnedElsewhere(String),
    /// `pgvs3.put_origin` refused the settings.
    Rejected(String),
}

/// Writes the cache's key, its bucket (owned by the key) and its origin in one transaction, so
/// that a refusal leaves neither a key nor a bucket behind. Within the catalog timeout
/// (`database::within`).
pub async fn write_cache(
    binding: &Binding,
    row: &OriginRow,
    cache_key: &CacheKey<'_>,
    origin_key: &OriginKey<'_>,
) -> Result<Written> {
    database::within(&binding.connection, write_cache_in(binding, row, cache_key, origin_key)).await
}

async fn write_cache_in(
    binding: &Binding,
    row: &OriginRow,
    cache_key: &CacheKey<'_>,
    origin_key: &OriginKey<'_>,
) -> Result<Written> {
    let mut client = database::connect(&binding.connection).await?;
    let transaction = client.transaction().await?;
    let sealed_key =
        pgvs3_catalog::seal_access_key_secret(&transaction, cache_key.id, &binding.master_key, cache_key.secret)
            .await?;
    bucket_catalog::put_access_key(&transaction, cache_key.id, &sealed_key, false, cache_key.description).await?;
    let ensured = bucket_catalog::ensure_bucket(&transaction, &row.bucket, cache_key.id, CACHE_NAMESPACE).await?;
    if ensured.owner.as_deref() != Some(cache_key.id) {
        let owner = ensured.owner.unwrap_or_else(|| "the root key".into());
        return Ok(Written::OwnedElsewhere(format!(
            "bucket {} already exists and belongs to {owner}",
            row.bucket
        )));
    }
    let sealed = sealed_secret(&transaction, &row.bucket, &binding.master_key, origin_key.secret_key).await?;
    Ok(
        match put_origin(&transaction, row, origin_key.access_key, &sealed).await? {
            Ok(bucket_id) => {
                transaction.commit().await?;
                Written::Configured(bucket_id)
            }
            Err(refusal) => Written::Rejected(refusal),
        },
    )
}

/// The origin secret to write, sealed under the master key (the catalog's sealed secret is
/// reused while it still opens to `secret_key`, so a resync changes no row).
pub async fn sealed_secret(
    client: &impl GenericClient,
    bucket: &str,
    master_key: &MasterKey,
    secret_key: &str,
) -> Result<Vec<u8>> {
    Ok(pgvs3_catalog::seal_origin_secret(client, bucket, master_key, secret_key).await?)
}

/// Creates or updates the cache bucket's origin; its bucket id, or why the catalog refused
/// the settings (the bucket exists and is no cache bucket, or a value is out of range).
pub async fn put_origin(
    client: &impl GenericClient,
    row: &OriginRow,
    access_key: &str,
    sealed_secret: &[u8],
) -> Result<Result<i64, String>> {
    let settings = pgvs3_catalog::OriginSettings {
        bucket: &row.bucket,
        endpoint: &row.endpoint,
        origin_bucket: &row.origin_bucket,
        region: &row.region,
        access_key,
        sealed_secret,
        cache_mode: row.cache_mode,
        path_style: row.path_style,
        ttl_seconds: row.ttl_seconds,
        negative_ttl_seconds: row.negative_ttl_seconds,
        fill_concurrency: row.fill_concurrency,
        size_limit_bytes: row.size_limit_bytes,
        write_back_threshold: row.write_back_threshold,
        range_chunk_bytes: row.range_chunk_bytes,
    };
    match pgvs3_catalog::put_origin(client, &settings).await {
        Ok(bucket_id) => Ok(Ok(bucket_id)),
        Err(err) if [ErrorKind::Refused, ErrorKind::InvalidSetting].contains(&err.kind()) => Ok(Err(err.message())),
        Err(err) => Err(err.into()),
    }
}

/// Drops the cache bucket and its cached entries (false: it was not in the catalog), or the
/// catalog's refusal while write-back bodies have not reached the origin yet.
pub async fn drop_origin(client: &impl GenericClient, bucket: &str) -> Result<Result<bool, String>> {
    match pgvs3_catalog::drop_origin(client, bucket, false).await {
        Ok(dropped) => Ok(Ok(dropped)),
        Err(err) if err.kind() == ErrorKind::PendingWriteBack => Ok(Err(err.message())),
        Err(err) => Err(err.into()),
    }
}

/// The condition reason of a failed catalog call: a catalog without the origin functions
/// (gateways older than layout v4 migrated it) or a database that could not be used.
pub fn failure_reason(error: &crate::context::Error) -> &'static str {
    if database::catalog_outdated(error) {
        "CatalogOutdated"
    } else {
        "DatabaseUnavailable"
    }
}
