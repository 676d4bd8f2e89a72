//! The catalog side of a Bucket, through the gateway's SQL control API (`pgvs3.*` functions).

use tokio_postgres::GenericClient;

use crate::context::Result;

/// Creates or updates an access key whose secret is already sealed with the master key.
pub async fn put_access_key(
    client: &impl GenericClient,
    key_id: &str,
    sealed: &[u8],
    read_only: bool,
    description: &str,
) -> Result<()> {
    client
        .execute(
            "SELECT pgvs3.put_access_key($1, $2, false, $3, $4)",
            &[&key_id, &sealed, &read_only, &description],
        )
        .await?;
    Ok(())
}

/// The catalog namespace of ordinary buckets' objects.
pub const ORDINARY_NAMESPACE: &str = "s3p";

/// A bucket as the catalog has it after `ensure_bucket`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnsuredBucket {
    pub id: i64,
    pub created: bool,
    /// The access key owning the bucket (`None`: the root key).
    pub owner: Option<String>,
}

/// Creates the bucket owned by `owner` when absent (`namespace`: where its objects live, `s3p`
/// for an ordinary bucket, `s3w` for a cache bucket); an existing bucket is left as it is.
pub async fn ensure_bucket(
    client: &impl GenericClient,
    name: &str,
    owner: &str,
    namespace: &str,
) -> Result<EnsuredBucket> {
    let row = client
        .query_one(
            "SELECT bucket_id, created FROM pgvs3.ensure_bucket($1, $2, $3)",
            &[&name, &owner, &namespace],
        )
        .await?;
    let id: i64 = row.get(0);
    let owner = bucket_owner(client, name).await?.flatten();
    Ok(EnsuredBucket {
        id,
        created: row.get(1),
        owner,
    })
}

/// `None` when there is no such bucket; `Some(None)` when the root key owns it.
pub async fn bucket_owner(client: &impl GenericClient, name: &str) -> Result<Option<Option<String>>> {
    let row = client
        .query_opt("SELECT owner FROM pgvs3.buckets WHERE name = $1", &[&name])
        .await?;
    Ok(row.map(|row| row.get(0)))
}

/// Drops the bucket and, with `force`, its objects. False when there was no such bucket.
pub async fn drop_bucket(client: &impl GenericClient, name: &str, force: bool) -> Result<bool> {
    let row = client
        .query_one("SELECT pgvs3.drop_bucket($1, $2)", &[&name, &force])
        .await?;
    Ok(row.get(0))
}

pub async fn delete_access_key(client: &impl GenericClient, key_id: &str) -> Result<bool> {
    let row = client
        .query_one("SELECT pgvs3.delete_access_key($1)", &[&key_id])
        .await?;
    Ok(row.get(0))
}
