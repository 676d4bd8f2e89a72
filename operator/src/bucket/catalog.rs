//! The catalog side of a Bucket, through the gateway's SQL control API (`pgvs3.*` functions)
//! and its typed client, `pgvs3_catalog`: the operator never reads the catalog's tables.

use pgvs3_catalog::ErrorKind;
use pgvs3_catalog::notifications::{Notifications, put_bucket_notifications};
use pgvs3_secret::MasterKey;
use tokio_postgres::GenericClient;

use crate::context::{Error, Result};
use crate::crd::Quota;
use crate::database::{self, Binding};

pub use pgvs3_catalog::ORDINARY_NAMESPACE;

/// A failed control call keeps its database error, so that `database::catalog_outdated` and
/// `database::catalog_refused_name` classify it as they do any catalog error.
impl From<pgvs3_catalog::Error> for Error {
    fn from(err: pgvs3_catalog::Error) -> Error {
        Error::Catalog(err.into_source())
    }
}

/// Creates or updates an access key whose secret is already sealed with the master key.
pub async fn put_access_key(
    client: &impl GenericClient,
    key_id: &str,
    sealed: &[u8],
    read_only: bool,
    description: &str,
) -> Result<()> {
    let key = pgvs3_catalog::AccessKey {
        id: key_id,
        sealed_secret: sealed,
        is_root: false,
        read_only,
        description,
    };
    Ok(pgvs3_catalog::put_access_key(client, &key).await?)
}

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
    let ensured = pgvs3_catalog::ensure_bucket(client, name, Some(owner), namespace).await?;
    let owner = bucket_owner(client, name).await?.flatten();
    Ok(EnsuredBucket {
        id: ensured.id,
        created: ensured.created,
        owner,
    })
}

/// `None` when there is no such bucket; `Some(None)` when the root key owns it.
pub async fn bucket_owner(client: &impl GenericClient, name: &str) -> Result<Option<Option<String>>> {
    Ok(pgvs3_catalog::bucket_owner(client, name).await?)
}

/// How the catalog took a Bucket's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Provisioned {
    /// The bucket belongs to the resource's key; `adopted`: it was retained for this resource's
    /// namespace and name, or marked adoptable by an admin, until this call.
    Ready { id: i64, adopted: bool },
    /// The name is taken and may not be taken over: `reason` and `message` say by whom.
    Refused { reason: &'static str, message: String },
    /// The catalog refused the quota.
    QuotaRejected(String),
    /// The catalog refused the notification rules (an unregistered webhook target, a queue name
    /// OJS refuses): nothing of the Bucket's settings was written.
    NotificationsRejected(String),
}

/// The RESP keyspace of the pool's gateways (database 0; the operator sets no other): a
/// root-owned bucket every RESP client of the pool reads and writes, never a Bucket's.
pub const RESP_KEYSPACE: &str = "resp";

/// The key's secret sealed under the master key, and how the key is described in the catalog.
pub struct BucketKey<'a> {
    pub id: &'a str,
    pub secret: &'a str,
    pub read_only: bool,
    pub description: &'a str,
    /// The key's own policy (`build::key_policy`); `None` detaches any.
    pub policy: Option<&'a str>,
}

/// What a Bucket may take over besides a bucket its own key owns.
pub struct Claim<'a> {
    /// The custodian key of its namespace and name (`build::custodian_key_id`): a bucket an
    /// earlier Bucket of the same namespace and name retained is held by it.
    pub custodian: &'a str,
    /// An admin marked the (root-owned) bucket adoptable for the Bucket's namespace.
    pub marked_adoptable: bool,
}

/// Writes the Bucket's key and its policy, its bucket (created, or adopted when `claim` allows),
/// its quota and (when given) its notification rules in one transaction: a bucket that is
/// somebody else's is left exactly as it was, and a refused setting leaves nothing half written.
/// Within the catalog timeout (`database::within`).
pub async fn provision(
    binding: &Binding,
    name: &str,
    key: &BucketKey<'_>,
    claim: &Claim<'_>,
    quota: Option<&Quota>,
    notifications: Option<&Notifications>,
) -> Result<Provisioned> {
    let provisioned = provision_in(binding, name, key, claim, quota, notifications);
    database::within(&binding.connection, provisioned).await
}

async fn provision_in(
    binding: &Binding,
    name: &str,
    key: &BucketKey<'_>,
    claim: &Claim<'_>,
    quota: Option<&Quota>,
    notifications: Option<&Notifications>,
) -> Result<Provisioned> {
    let mut client = database::connect(&binding.connection).await?;
    let transaction = client.transaction().await?;
    let sealed = pgvs3_catalog::seal_access_key_secret(&transaction, key.id, &binding.master_key, key.secret).await?;
    put_access_key(&transaction, key.id, &sealed, key.read_only, key.description).await?;
    pgvs3_catalog::set_key_policy(&transaction, key.id, key.policy).await?;
    let ensured = ensure_bucket(&transaction, name, key.id, ORDINARY_NAMESPACE).await?;
    let adopted = match ensured.owner.as_deref() {
        Some(owner) if owner == key.id => false,
        // Retained by an earlier Bucket of this namespace and name: revoking the custodian
        // leaves the bucket unowned for the moment it takes to adopt it, in this transaction.
        Some(owner) if owner == claim.custodian => {
            delete_access_key(&transaction, claim.custodian).await? && adopt_bucket(&transaction, name, key.id).await?
        }
        None if name != RESP_KEYSPACE && claim.marked_adoptable => adopt_bucket(&transaction, name, key.id).await?,
        _ => false,
    };
    if !adopted && ensured.owner.as_deref() != Some(key.id) {
        return Ok(refusal(name, ensured.owner.as_deref(), claim));
    }
    let (max_bytes, max_objects) = quota.map_or((None, None), |q| (q.max_bytes, q.max_objects));
    if let Err(refusal) = set_bucket_quota(&transaction, name, max_bytes, max_objects).await? {
        return Ok(Provisioned::QuotaRejected(refusal));
    }
    if let Some(rules) = notifications {
        match put_bucket_notifications(&transaction, name, rules).await {
            Ok(()) => {}
            Err(err) if err.kind() == ErrorKind::UnknownDestination => {
                return Ok(Provisioned::NotificationsRejected(err.message()));
            }
            Err(err) => return Err(err.into()),
        }
    }
    transaction.commit().await?;
    Ok(Provisioned::Ready {
        id: ensured.id,
        adopted,
    })
}

/// Why bucket `name`, owned by `owner` (`None`: the root key), is not the Bucket's.
fn refusal(name: &str, owner: Option<&str>, claim: &Claim<'_>) -> Provisioned {
    let (reason, message) = match owner {
        _ if name == RESP_KEYSPACE => (
            "BucketNotAdoptable",
            format!("bucket {name} is the gateways' RESP keyspace: never a Bucket's"),
        ),
        Some(owner) => (
            "BucketOwnedElsewhere",
            format!("bucket {name} already exists and belongs to access key {owner}"),
        ),
        None if claim.marked_adoptable => (
            "BucketNotAdoptable",
            format!("bucket {name} already exists and is a cache bucket"),
        ),
        None => (
            "BucketNotAdoptable",
            format!(
                "bucket {name} already exists and belongs to the root key (made by an admin, or a cache bucket); an \
                 admin may mark an ordinary one adoptable for this namespace (the operator's adoptableBuckets)"
            ),
        ),
    };
    Provisioned::Refused { reason, message }
}

/// Hands a bucket the Bucket's key owns to its custodian key (sealed with a secret nobody
/// knows, so it grants nothing) and revokes the Bucket's key: the bucket stays retained for a
/// Bucket of the same namespace and name, and for no one else. False when the Bucket's key did
/// not own it. In the caller's transaction (the cleanup's), so that none of it happens alone.
pub async fn retain_bucket(
    client: &impl GenericClient,
    master_key: &MasterKey,
    name: &str,
    key_id: &str,
    custodian: &str,
    description: &str,
) -> Result<bool> {
    if bucket_owner(client, name).await?.flatten().as_deref() != Some(key_id) {
        return Ok(false);
    }
    let secret = pgvs3_secret::random_token(30);
    let sealed = pgvs3_catalog::seal_access_key_secret(client, custodian, master_key, &secret).await?;
    put_access_key(client, custodian, &sealed, true, description).await?;
    delete_access_key(client, key_id).await?;
    adopt_bucket(client, name, custodian).await
}

/// Gives an unowned ordinary bucket to `owner`; true when it is `owner`'s now.
pub async fn adopt_bucket(client: &impl GenericClient, name: &str, owner: &str) -> Result<bool> {
    Ok(pgvs3_catalog::adopt_bucket(client, name, owner).await?)
}

/// Sets the bucket's quota (both `None`: none). `Err` holds the catalog's refusal.
pub async fn set_bucket_quota(
    client: &impl GenericClient,
    name: &str,
    max_bytes: Option<i64>,
    max_objects: Option<i64>,
) -> Result<std::result::Result<(), String>> {
    match pgvs3_catalog::set_bucket_quota(client, name, max_bytes, max_objects).await {
        Ok(()) => Ok(Ok(())),
        Err(err) if err.kind() == ErrorKind::Refused => Ok(Err(err.message())),
        Err(err) => Err(err.into()),
    }
}

/// Drops the bucket and, with `force`, its objects. False when there was no such bucket;
/// `Err(reason)` when it holds versions object lock protects (nothing may remove those).
pub async fn drop_bucket(
    client: &impl GenericClient,
    name: &str,
    force: bool,
) -> Result<std::result::Result<bool, String>> {
    match pgvs3_catalog::drop_bucket(client, name, force).await {
        Ok(dropped) => Ok(Ok(dropped)),
        Err(err) if err.kind() == ErrorKind::ObjectLocked => Ok(Err(err.message())),
        Err(err) => Err(err.into()),
    }
}

pub async fn delete_access_key(client: &impl GenericClient, key_id: &str) -> Result<bool> {
    Ok(pgvs3_catalog::delete_access_key(client, key_id).await?)
}
