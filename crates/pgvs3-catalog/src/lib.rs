//! The typed client of the catalog's SQL control API: the `pgvs3.*` functions defined in
//! gateway/migrations/functions/ (catalog.sql, quotas.sql, cache.sql, sts.sql), the contract between the
//! gateways, their admin CLI and the operator. Each call is one statement on the caller's client
//! or transaction; what the catalog refuses comes back as a typed [`ErrorKind`].
//!
//! Nothing here reads or writes a catalog table: the functions are the interface, so the layout
//! underneath can change with a migration without breaking an operator of another release.

use std::fmt;

pub mod lake;
pub mod notifications;
pub mod sts;

use pgvs3_secret::MasterKey;
use tokio_postgres::GenericClient;
use tokio_postgres::error::SqlState;

/// The catalog namespace of ordinary buckets' objects.
pub const ORDINARY_NAMESPACE: &str = "s3p";
/// The catalog namespace of cache buckets' objects (the write-back namespace).
pub const CACHE_NAMESPACE: &str = "s3w";

/// What went wrong in a control call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// `ensure_bucket` refused the name (S3 bucket naming rules).
    InvalidBucketName,
    /// `drop_bucket` without force: the bucket holds objects.
    BucketNotEmpty,
    /// `drop_bucket` with force: the bucket holds versions object lock still protects, which
    /// nothing may remove before their retention ends or their legal hold is lifted.
    ObjectLocked,
    /// The call names a bucket the catalog does not have (`set_bucket_quota`).
    NoSuchBucket,
    /// `put_bucket_notifications_as`: the caller may no longer configure the bucket (its owner
    /// changed since the request was authorized).
    AccessDenied,
    /// The catalog refused the call's arguments: a negative quota, a quota on a cache bucket, a
    /// cache over an existing ordinary bucket, a cache bucket name the naming rules refuse.
    Refused,
    /// A setting outside the range the catalog's tables accept (a CHECK constraint).
    InvalidSetting,
    /// `drop_origin` without force: write-back bodies have not reached the origin yet.
    PendingWriteBack,
    /// `put_bucket_notifications`: a webhook target that is not registered, or a queue name OJS
    /// refuses.
    UnknownDestination,
    /// The catalog lacks a function or table this client calls: no gateway has migrated the
    /// database to this client's layout yet.
    CatalogOutdated,
    /// Anything else (the connection, the database).
    Database,
}

/// A failed control call: its kind and the database's error.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    source: tokio_postgres::Error,
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The database's own message (e.g. "bucket x is not empty"), or the client error's text.
    pub fn message(&self) -> String {
        match self.source.as_db_error() {
            Some(db) => db.message().to_string(),
            None => self.source.to_string(),
        }
    }

    /// The database error, for callers that report or classify it themselves.
    pub fn into_source(self) -> tokio_postgres::Error {
        self.source
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A call's refusals: SQLSTATE (or HINT, for `P0001`) to kind. Outdated catalogs and everything
/// else are classified the same for every call.
type Refusals = &'static [(Refusal, ErrorKind)];

enum Refusal {
    Code(SqlState),
    Hint(&'static str),
}

fn classify(refusals: Refusals) -> impl Fn(tokio_postgres::Error) -> Error {
    move |source| {
        let kind = match source.as_db_error() {
            None => ErrorKind::Database,
            Some(db) if [SqlState::UNDEFINED_FUNCTION, SqlState::UNDEFINED_TABLE].contains(db.code()) => {
                ErrorKind::CatalogOutdated
            }
            Some(db) => refusals
                .iter()
                .find(|(refusal, _)| match refusal {
                    Refusal::Code(code) => db.code() == code,
                    Refusal::Hint(hint) => db.hint() == Some(*hint),
                })
                .map_or(ErrorKind::Database, |(_, kind)| *kind),
        };
        Error { kind, source }
    }
}

/// A bucket as `ensure_bucket` left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnsuredBucket {
    pub id: i64,
    /// Whether this call created it (false: it existed, and was left as it was).
    pub created: bool,
}

/// Creates the bucket when absent, owned by `owner` (`None`: the root key), its objects in
/// `namespace` ([`ORDINARY_NAMESPACE`] or [`CACHE_NAMESPACE`]).
pub async fn ensure_bucket(
    client: &impl GenericClient,
    name: &str,
    owner: Option<&str>,
    namespace: &str,
) -> Result<EnsuredBucket> {
    const REFUSALS: Refusals = &[(
        Refusal::Code(SqlState::INVALID_PARAMETER_VALUE),
        ErrorKind::InvalidBucketName,
    )];
    let row = client
        .query_one(
            "SELECT bucket_id, created FROM pgvs3.ensure_bucket($1, $2, $3)",
            &[&name, &owner, &namespace],
        )
        .await
        .map_err(classify(REFUSALS))?;
    Ok(EnsuredBucket {
        id: row.get("bucket_id"),
        created: row.get("created"),
    })
}

/// Drops the bucket; with `force`, its objects too (without it, a bucket holding objects is
/// [`ErrorKind::BucketNotEmpty`]; even with it, a bucket holding locked versions is
/// [`ErrorKind::ObjectLocked`]). False when there was no such bucket.
pub async fn drop_bucket(client: &impl GenericClient, name: &str, force: bool) -> Result<bool> {
    const REFUSALS: Refusals = &[
        (Refusal::Hint("BucketNotEmpty"), ErrorKind::BucketNotEmpty),
        (Refusal::Hint("ObjectLocked"), ErrorKind::ObjectLocked),
    ];
    let row = client
        .query_one("SELECT pgvs3.drop_bucket($1, $2) AS dropped", &[&name, &force])
        .await
        .map_err(classify(REFUSALS))?;
    Ok(row.get("dropped"))
}

/// `None` when there is no such bucket; `Some(None)` when the root key owns it.
pub async fn bucket_owner(client: &impl GenericClient, name: &str) -> Result<Option<Option<String>>> {
    let row = client
        .query_opt("SELECT owner_key FROM pgvs3.bucket_owner($1)", &[&name])
        .await
        .map_err(classify(&[]))?;
    Ok(row.map(|row| row.get("owner_key")))
}

/// Gives an unowned ordinary bucket to `owner`; true when it is `owner`'s now (adopted, or
/// theirs already), false when there is no such ordinary bucket or another key owns it.
pub async fn adopt_bucket(client: &impl GenericClient, name: &str, owner: &str) -> Result<bool> {
    let row = client
        .query_one("SELECT pgvs3.adopt_bucket($1, $2) AS adopted", &[&name, &owner])
        .await
        .map_err(classify(&[]))?;
    Ok(row.get("adopted"))
}

/// Sets the bucket's quota (`None`: no limit on that dimension; both `None`: no quota).
pub async fn set_bucket_quota(
    client: &impl GenericClient,
    name: &str,
    max_bytes: Option<i64>,
    max_objects: Option<i64>,
) -> Result<()> {
    const REFUSALS: Refusals = &[
        (Refusal::Code(SqlState::NO_DATA_FOUND), ErrorKind::NoSuchBucket),
        (Refusal::Code(SqlState::INVALID_PARAMETER_VALUE), ErrorKind::Refused),
    ];
    client
        .execute(
            "SELECT pgvs3.set_bucket_quota($1, $2, $3)",
            &[&name, &max_bytes, &max_objects],
        )
        .await
        .map_err(classify(REFUSALS))?;
    Ok(())
}

/// An access key as the catalog stores it: its secret already sealed with the master key.
pub struct AccessKey<'a> {
    pub id: &'a str,
    pub sealed_secret: &'a [u8],
    /// Only the gateways' bootstrap sets the root key; a root key's flag is never changed later.
    pub is_root: bool,
    pub read_only: bool,
    pub description: &'a str,
}

/// Creates or updates the key (re-putting the same settings and sealed secret changes no row).
pub async fn put_access_key(client: &impl GenericClient, key: &AccessKey<'_>) -> Result<()> {
    client
        .execute(
            "SELECT pgvs3.put_access_key($1, $2, $3, $4, $5)",
            &[
                &key.id,
                &key.sealed_secret,
                &key.is_root,
                &key.read_only,
                &key.description,
            ],
        )
        .await
        .map_err(classify(&[]))?;
    Ok(())
}

/// Attaches `policy` (an IAM identity policy document the caller has checked or generated) to a
/// key other than the root key, or detaches its policy (`None`). False when there is no such
/// non-root key. Re-attaching the same document changes no row.
pub async fn set_key_policy(client: &impl GenericClient, key_id: &str, policy: Option<&str>) -> Result<bool> {
    let row = client
        .query_one("SELECT pgvs3.set_key_policy($1, $2) AS changed", &[&key_id, &policy])
        .await
        .map_err(classify(&[]))?;
    Ok(row.get("changed"))
}

/// Deletes a key (never the root key); false when there was no such non-root key.
pub async fn delete_access_key(client: &impl GenericClient, key_id: &str) -> Result<bool> {
    let row = client
        .query_one("SELECT pgvs3.delete_access_key($1) AS deleted", &[&key_id])
        .await
        .map_err(classify(&[]))?;
    Ok(row.get("deleted"))
}

/// A cache bucket's origin and policy as `put_origin` takes them: durations in seconds, the
/// origin's secret sealed with the master key (see [`seal_origin_secret`]).
pub struct OriginSettings<'a> {
    pub bucket: &'a str,
    pub endpoint: &'a str,
    pub origin_bucket: &'a str,
    pub region: &'a str,
    pub access_key: &'a str,
    pub sealed_secret: &'a [u8],
    /// `read-through`, `write-through` or `write-back`.
    pub cache_mode: &'a str,
    pub path_style: bool,
    pub ttl_seconds: i32,
    pub negative_ttl_seconds: i32,
    pub fill_concurrency: i32,
    pub size_limit_bytes: Option<i64>,
    pub write_back_threshold: i64,
    pub range_chunk_bytes: i32,
}

/// Creates or updates the cache bucket in front of its origin (the bucket is created, owned by
/// the root key, when absent); its bucket id. Re-applying unchanged settings changes no row.
pub async fn put_origin(client: &impl GenericClient, origin: &OriginSettings<'_>) -> Result<i64> {
    const REFUSALS: Refusals = &[
        (Refusal::Code(SqlState::INVALID_PARAMETER_VALUE), ErrorKind::Refused),
        (Refusal::Code(SqlState::CHECK_VIOLATION), ErrorKind::InvalidSetting),
    ];
    let row = client
        .query_one(
            "SELECT pgvs3.put_origin($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) AS bucket_id",
            &[
                &origin.bucket,
                &origin.endpoint,
                &origin.origin_bucket,
                &origin.region,
                &origin.access_key,
                &origin.sealed_secret,
                &origin.cache_mode,
                &origin.path_style,
                &origin.ttl_seconds,
                &origin.negative_ttl_seconds,
                &origin.fill_concurrency,
                &origin.size_limit_bytes,
                &origin.write_back_threshold,
                &origin.range_chunk_bytes,
            ],
        )
        .await
        .map_err(classify(REFUSALS))?;
    Ok(row.get("bucket_id"))
}

/// Drops the cache bucket and everything cached in it; false when it was not a cache bucket.
/// Without `force`, pending write-backs are [`ErrorKind::PendingWriteBack`]; with it they are lost.
pub async fn drop_origin(client: &impl GenericClient, bucket: &str, force: bool) -> Result<bool> {
    const REFUSALS: Refusals = &[(Refusal::Hint("PendingWriteBack"), ErrorKind::PendingWriteBack)];
    let row = client
        .query_one("SELECT pgvs3.drop_origin($1, $2) AS dropped", &[&bucket, &force])
        .await
        .map_err(classify(REFUSALS))?;
    Ok(row.get("dropped"))
}

/// The sealed origin secret of cache bucket `bucket`, `None` when it has no origin.
pub async fn origin_secret(client: &impl GenericClient, bucket: &str) -> Result<Option<Vec<u8>>> {
    let row = client
        .query_one("SELECT pgvs3.origin_secret($1) AS secret", &[&bucket])
        .await
        .map_err(classify(&[]))?;
    Ok(row.get("secret"))
}

/// The origin secret to pass to [`put_origin`], sealed under `master_key` (see [`reseal`]).
pub async fn seal_origin_secret(
    client: &impl GenericClient,
    bucket: &str,
    master_key: &MasterKey,
    secret_key: &str,
) -> Result<Vec<u8>> {
    Ok(reseal(origin_secret(client, bucket).await?, master_key, secret_key))
}

/// The secret to pass to [`put_access_key`] for key `key_id`, sealed under `master_key` (see
/// [`reseal`]).
pub async fn seal_access_key_secret(
    client: &impl GenericClient,
    key_id: &str,
    master_key: &MasterKey,
    secret: &str,
) -> Result<Vec<u8>> {
    let row = client
        .query_one("SELECT pgvs3.access_key_secret($1) AS secret", &[&key_id])
        .await
        .map_err(classify(&[]))?;
    Ok(reseal(row.get("secret"), master_key, secret))
}

/// The catalog's sealed secret while it still opens to `secret`, else a fresh seal: a fresh
/// seal differs on every call (random nonce), and writing it would make each unchanged put an
/// update every gateway reloads.
fn reseal(stored: Option<Vec<u8>>, master_key: &MasterKey, secret: &str) -> Vec<u8> {
    match stored {
        Some(sealed) if master_key.open(&sealed).is_ok_and(|open| open == secret) => sealed,
        _ => master_key.seal(secret),
    }
}
