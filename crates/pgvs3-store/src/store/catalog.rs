//! Buckets and access keys: the catalog, cached in memory and reloaded when its version moves.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use deadpool_postgres::Pool;
use prometheus::{IntCounterVec, Opts};
use tokio_postgres::Row;
use tokio_postgres::types::Json;

use super::catalog_entries::CatalogEntries;
use super::catalog_misses::CatalogMisses;
use super::key_lookups::KeyLookups;
use super::origins::{ORIGIN_COLUMNS, Origin, origin_from_row};
use super::{Principal, StoreError, StoreResult};
use crate::access::acl::{Acl, Ownership};
use crate::master_key::MasterKey;
use crate::pg::checkout::checkout;
use crate::pg::connections::{Dedicated, session_settings};

/// Pause between attempts to (re)open the LISTEN connection, and between role checks on a
/// standby.
const LISTEN_RETRY: Duration = Duration::from_secs(1);
/// Used when the connection settings carry no connect timeout of their own.
const LISTEN_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct BucketInfo {
    pub id: i64,
    pub name: String,
    pub namespace: String,
    /// `None`: owned by the root key (created by an admin or the operator).
    pub owner: Option<String>,
    pub created_at: SystemTime,
    /// For a cache bucket: the remote bucket it fronts.
    pub origin: Option<Arc<Origin>>,
    /// The bucket's versioning state; `None` when it never had versioning enabled.
    pub versioning: Option<super::Versioning>,
    /// The bucket's object lock configuration; `None` when it has no object lock.
    pub object_lock: Option<super::LockConfig>,
    /// The bucket's lifecycle rules, if it has any.
    pub lifecycle: Option<Arc<super::Lifecycle>>,
    /// CORS rules and bucket policy, parsed with the catalog.
    pub access: crate::access::BucketAccess,
    /// Default encryption (PutBucketEncryption with AES256): new objects get SSE-S3 unless
    /// their request asks for SSE-C.
    pub default_encryption: bool,
    /// Server access logging (PutBucketLogging), if it is on.
    pub logging: Option<Arc<super::LoggingConfig>>,
    pub(super) sql: Arc<super::objects::NamespaceSql>,
}

#[derive(Debug, Clone)]
pub struct BucketSummary {
    pub name: String,
    pub created_at: SystemTime,
}

pub struct AccessKey {
    pub access_key: String,
    pub secret: String,
    /// The key's own policy, if it has one: what it may do, its own buckets included.
    pub policy: Option<Arc<crate::access::policy::BucketPolicy>>,
    /// That policy as it was attached.
    pub policy_text: Option<String>,
    pub is_root: bool,
    pub read_only: bool,
    pub description: String,
    pub created_at: SystemTime,
    /// For temporary credentials (STS): their token and expiry. Their policy is their role's.
    pub session: Option<super::Session>,
}

impl AccessKey {
    pub fn principal(&self) -> Principal {
        Principal {
            access_key: self.access_key.clone(),
            is_root: self.is_root,
            read_only: self.read_only,
        }
    }
}

/// What a CreateBucket asks for beyond the bucket's name.
#[derive(Debug, Default)]
pub struct NewBucket {
    /// Object lock on (and versioning Enabled) from the start.
    pub object_lock: bool,
    /// `x-amz-object-ownership`; `None`: the default, BucketOwnerEnforced.
    pub ownership: Option<Ownership>,
    /// The bucket's ACL; `None`: private.
    pub acl: Option<Acl>,
}

pub struct NewAccessKey {
    pub access_key: String,
    pub secret: String,
    pub is_root: bool,
    pub read_only: bool,
    pub description: String,
}

/// The longest secret key accepted: a signing key, not a document.
const MAX_SECRET_LEN: usize = 1024;

impl NewAccessKey {
    /// Whether `access_key` can name a key, said before anything is written: as
    /// `pgvs3.access_keys` checks it (`^[A-Za-z0-9_.-]{3,128}$`).
    pub fn check_access_key(access_key: &str) -> Result<(), String> {
        let id_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
        if super::is_session_key(access_key) {
            return Err(format!(
                "access key {access_key:?} is not valid: ASIA and 16 upper-case letters or digits is the form of \
                 temporary (STS) credentials, which are looked up as sessions"
            ));
        }
        if (3..=128).contains(&access_key.len()) && access_key.chars().all(id_char) {
            return Ok(());
        }
        Err(format!(
            "access key {access_key:?} is not valid: an access key is 3 to 128 characters, each a letter \
             A-Z or a-z, a digit, '_', '.' or '-' (e.g. PGVS3ROOTKEY0001)"
        ))
    }

    /// Whether `secret` can be a key's secret: non-empty, bounded, no control characters (the
    /// message never shows it).
    pub fn check_secret(secret: &str) -> Result<(), String> {
        if secret.is_empty() || secret.len() > MAX_SECRET_LEN || secret.chars().any(char::is_control) {
            return Err(format!(
                "the secret key is not valid: a secret key is 1 to {MAX_SECRET_LEN} bytes without control characters"
            ));
        }
        Ok(())
    }

    /// Both checks, for a key about to be stored.
    pub fn check(&self) -> Result<(), String> {
        NewAccessKey::check_access_key(&self.access_key)?;
        NewAccessKey::check_secret(&self.secret)
    }
}

#[derive(Default)]
struct Cached {
    version: i64,
    buckets: CatalogEntries<BucketInfo>,
    keys: CatalogEntries<AccessKey>,
    /// Names the database said do not exist, answered without it until the next reload.
    missing_buckets: CatalogMisses,
    missing_keys: CatalogMisses,
    namespaces: HashMap<String, Arc<super::objects::NamespaceSql>>,
}

impl Cached {
    /// Whether some cached bucket has a policy or ACLs enabled, or some static key a policy
    /// (a session's key always has its role's, but sessions never take the fast path: their
    /// requests are decided apart, see `authorize`).
    fn has_rules(&self) -> bool {
        self.buckets.values().any(|bucket| has_rules(bucket))
            || self
                .keys
                .values()
                .any(|key| key.policy.is_some() && key.session.is_none())
    }
}

pub struct Catalog {
    pool: Pool,
    master_key: MasterKey,
    cached: RwLock<Cached>,
    /// Whether some cached bucket has a policy or ACLs enabled, or some key a policy: while
    /// none has, the access check of a signed request is this one load (set under the `cached`
    /// write lock).
    rules: AtomicBool,
    /// Bucket and key lookups that missed the cache, by kind and by answer: `found` and
    /// `missing` asked the database, `known_missing` did not (see `CatalogMisses`).
    lookups: IntCounterVec,
    /// The version loaded, for those that act on a change as it comes rather than at their
    /// next request (RESP connections that sit idle, subscribed).
    loaded: tokio::sync::watch::Sender<i64>,
    key_lookups: KeyLookups,
    /// Held by the one reload running (with the version check before it, in `refresh` and
    /// `catch_up_with`): the listener's, the poll's, `reload_now`'s and the first requests of
    /// many new keys after one change wait for it rather than each reload the catalog on a
    /// connection of its own, and find the version loaded when they get it. Unserialized, each
    /// reload held a pool connection for as long as `access_keys` was slow to read (locked),
    /// beside the bounded lookups of unknown keys (`KeyLookups`): the poll's and the listener's
    /// with the lookups' two took the whole of a pool of 4, and signed requests waited for none.
    reloading: tokio::sync::Mutex<()>,
}

/// What the cache says of an access key.
enum CachedKey {
    /// The key, or `None`: known missing.
    Known(Option<Arc<AccessKey>>),
    /// Not in the cache as of the loaded catalog version.
    Unknown { version: i64 },
}

/// The columns of an `access_keys` row, as `decode_key` reads them.
const KEY_COLUMNS: &str = "access_key, secret_encrypted, is_root, read_only, description, created_at, policy";

/// A bucket row with its origin, if it is a cache bucket, and the catalog version of the
/// snapshot it was read from; callers append a `WHERE`.
fn bucket_select() -> String {
    format!(
        "SELECT b.id, b.name, b.namespace, b.owner, b.created_at, {ORIGIN_COLUMNS}, b.versioning, b.object_lock,
                b.lifecycle, b.cors, b.policy, b.public_access_block, b.encryption,
                b.object_ownership, b.acl, b.logging, (SELECT version FROM pgvs3.catalog_version) AS catalog_version
           FROM pgvs3.buckets b LEFT JOIN pgvs3.origins o ON o.bucket_id = b.id"
    )
}

impl Catalog {
    pub async fn load(pool: Pool, master_key: MasterKey) -> anyhow::Result<Arc<Catalog>> {
        let catalog = Arc::new(Catalog {
            pool,
            master_key,
            cached: RwLock::default(),
            rules: AtomicBool::new(false),
            loaded: tokio::sync::watch::Sender::new(0),
            key_lookups: KeyLookups::default(),
            reloading: tokio::sync::Mutex::new(()),
            lookups: IntCounterVec::new(
                Opts::new(
                    "pgvs3_catalog_lookups_total",
                    "Bucket and access key lookups that missed the catalog cache, by answer",
                ),
                &["kind", "result"],
            )
            .expect("metric"),
        });
        catalog.reload_now().await?;
        Ok(catalog)
    }

    /// Exposes the catalog's counters on `metrics`.
    pub fn register_metrics(&self, metrics: &crate::metrics::Metrics) {
        metrics.register(Box::new(self.lookups.clone()));
    }

    pub fn master_key(&self) -> &MasterKey {
        &self.master_key
    }

    pub(super) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Reloads everything when the catalog version moved since the last load. Once it returns,
    /// no reload that began before it is still running.
    pub async fn refresh(&self) -> anyhow::Result<bool> {
        let _one_at_a_time = self.reloading.lock().await;
        let client = checkout(&self.pool).await?;
        let version: i64 = client
            .query_one("SELECT version FROM pgvs3.catalog_version", &[])
            .await?
            .get("version");
        drop(client);
        if version == self.cached.read().expect("catalog lock").version {
            return Ok(false);
        }
        self.reload().await?;
        Ok(true)
    }

    /// Reloads the catalog whatever version this gateway has seen: for a caller that must not
    /// miss a change committed a moment ago (a key named in a policy being put).
    pub async fn reload_now(&self) -> anyhow::Result<()> {
        let _one_at_a_time = self.reloading.lock().await;
        self.reload().await
    }

    /// Reads the catalog and installs it; callers hold `reloading`.
    async fn reload(&self) -> anyhow::Result<()> {
        let mut client = checkout(&self.pool).await?;
        // One snapshot, so the version matches the rows read with it.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let version: i64 = tx
            .query_one("SELECT version FROM pgvs3.catalog_version", &[])
            .await?
            .get("version");
        let bucket_rows = tx.query(&bucket_select(), &[]).await?;
        let key_rows = tx
            .query(
                &format!("SELECT {KEY_COLUMNS} FROM pgvs3.access_keys WHERE NOT disabled"),
                &[],
            )
            .await?;
        tx.commit().await?;

        let keys = key_rows
            .iter()
            .map(|row| {
                let key = self.decode_key(row)?;
                Ok((key.access_key.clone(), Arc::new(key)))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut cached = self.cached.write().expect("catalog lock");
        // Reloads can overlap (poller, listener); one that read an older snapshot must not
        // overwrite a newer one, or a deleted key could stay cached until the next change.
        if version < cached.version {
            return Ok(());
        }
        let buckets = bucket_rows
            .iter()
            .map(|row| {
                let bucket = bucket_from_row(row, &mut cached.namespaces, &self.master_key)?;
                Ok((bucket.name.clone(), Arc::new(bucket)))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        if version > cached.version {
            // What did not exist may exist now; a reload of the same version brings nothing new.
            cached.missing_buckets.clear();
            cached.missing_keys.clear();
        }
        cached.version = version;
        self.loaded
            .send_if_modified(|loaded| std::mem::replace(loaded, version) != version);
        // Rows learnt from a newer snapshot than this one stay (see CatalogEntries), and with
        // them the access checks their rules need.
        cached.buckets.install(version, buckets);
        cached.keys.install(version, keys);
        self.rules.store(cached.has_rules(), Ordering::Release);
        Ok(())
    }

    /// An `access_keys` row, read by column name (keys are loaded with the catalog, not per
    /// request).
    fn decode_key(&self, row: &Row) -> anyhow::Result<AccessKey> {
        let access_key: String = row.get("access_key");
        let sealed: Vec<u8> = row.get("secret_encrypted");
        let secret = self
            .master_key
            .open(&sealed)
            .map_err(|err| anyhow::anyhow!("access key {access_key}: {err}"))?;
        let policy_text: Option<String> = row.get("policy");
        let policy = policy_text
            .as_deref()
            .map(crate::access::policy::BucketPolicy::parse_identity)
            .transpose()
            .map_err(|err| anyhow::anyhow!("access key {access_key}: its policy: {err}"))?
            .map(Arc::new);
        Ok(AccessKey {
            access_key,
            secret,
            policy,
            policy_text,
            is_root: row.get("is_root"),
            read_only: row.get("read_only"),
            description: row.get("description"),
            created_at: row.get("created_at"),
            session: None,
        })
    }

    /// Keeps the cache fresh until the returned task is aborted. Polling works on primaries and
    /// standbys alike (a standby cannot LISTEN).
    pub fn spawn_refresher(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let catalog = Arc::clone(self);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // While the database is away every poll fails; saying so once is enough.
            let mut failing = false;
            loop {
                ticker.tick().await;
                match catalog.refresh().await {
                    Ok(_) if failing => {
                        tracing::info!("catalog refresh works again");
                        failing = false;
                    }
                    Ok(_) => {}
                    Err(err) if failing => tracing::debug!(error = %err, "catalog refresh still failing"),
                    Err(err) => {
                        tracing::warn!(error = %err, "catalog refresh failed; retrying every poll");
                        failing = true;
                    }
                }
            }
        })
    }

    /// On a primary, reloads as soon as the catalog changes (NOTIFY `pgvs3_catalog`), so a
    /// deleted key or bucket stops working within milliseconds instead of at the next poll.
    /// Standbys cannot LISTEN; they rely on polling, and this starts listening once promoted.
    /// A lost connection (the database restarted, failed over, or the health probe severed it)
    /// is re-opened until the task is aborted, and so is one whose server stopped answering
    /// (`database.liveness`): it would hear no change until TCP gave up.
    pub fn spawn_listener(self: &Arc<Self>, database: Dedicated) -> tokio::task::JoinHandle<()> {
        let catalog = Arc::clone(self);
        tokio::spawn(async move {
            // Whether the connection was lost and not yet re-opened: the loss is logged once,
            // not once per attempt while the database is away.
            let mut lost = false;
            loop {
                if let Err(err) = catalog.listen(&database, &mut lost).await {
                    let error = format!("{err:#}");
                    if lost {
                        tracing::debug!(error, "catalog LISTEN connection: still reconnecting");
                    } else {
                        // At info: a database outage has its own warning (the health probe's).
                        tracing::info!(error, "catalog LISTEN connection lost; reconnecting");
                        lost = true;
                    }
                }
                tokio::time::sleep(LISTEN_RETRY).await;
            }
        })
    }

    async fn listen(&self, database: &Dedicated, lost: &mut bool) -> anyhow::Result<()> {
        use futures::StreamExt;
        let config = &database.config;
        let connect_timeout = config.get_connect_timeout().copied().unwrap_or(LISTEN_CONNECT_TIMEOUT);
        let (client, mut connection) = tokio::time::timeout(
            connect_timeout,
            session_settings(config).connect(database.connections.tls()),
        )
        .await
        .map_err(|_| anyhow::anyhow!("no connection within {connect_timeout:?}"))??;
        let (notify, mut notified) = tokio::sync::mpsc::channel::<()>(1);
        let driver = database.connections.spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                if let tokio_postgres::AsyncMessage::Notification(_) = message? {
                    // A full channel already means "reload": changes coalesce.
                    let _ = notify.try_send(());
                }
            }
            anyhow::Ok(())
        });
        let stop_driver = driver.abort_handle();
        let session = async {
            // A standby refuses LISTEN; this session may LISTEN once its server is promoted.
            while client
                .query_one("SELECT pg_is_in_recovery() AS in_recovery", &[])
                .await?
                .get::<_, bool>("in_recovery")
            {
                tokio::time::sleep(LISTEN_RETRY).await;
            }
            client.batch_execute("LISTEN pgvs3_catalog").await?;
            if std::mem::take(lost) {
                tracing::info!("catalog LISTEN connection re-established");
            }
            // Changes made before LISTEN took effect (or, on a connection opened again, while
            // none listened) would otherwise wait for the next poll.
            self.refresh().await?;
            while notified.recv().await.is_some() {
                self.refresh().await?;
            }
            driver.await??;
            anyhow::Ok(())
        };
        let ended = tokio::select! {
            ended = session => ended,
            silent = database.liveness.lost(&client) => Err(silent),
        };
        // A server that stopped answering would hold the connection open until TCP gave up.
        stop_driver.abort();
        ended
    }

    /// Looks up a bucket: from the cache, else from the database (a bucket created through
    /// another gateway is usable at once, before the next refresh).
    pub async fn bucket(&self, name: &str) -> StoreResult<Arc<BucketInfo>> {
        let asked_at = {
            let cached = self.cached.read().expect("catalog lock");
            if let Some(bucket) = cached.buckets.get(name) {
                return Ok(Arc::clone(bucket));
            }
            if cached.missing_buckets.contains(name, cached.version, Instant::now()) {
                self.counted("bucket", "known_missing");
                return Err(StoreError::NoSuchBucket);
            }
            cached.version
        };
        let client = checkout(&self.pool).await?;
        let row = client
            .query_opt(&format!("{} WHERE b.name = $1", bucket_select()), &[&name])
            .await?;
        drop(client);
        let Some(row) = row else {
            self.counted("bucket", "missing");
            let mut cached = self.cached.write().expect("catalog lock");
            let loaded = cached.version;
            cached.missing_buckets.record(name, asked_at, loaded, Instant::now());
            return Err(StoreError::NoSuchBucket);
        };
        self.counted("bucket", "found");
        self.remember(&row)
    }

    fn counted(&self, kind: &str, result: &str) {
        self.lookups.with_label_values(&[kind, result]).inc();
    }

    /// The cache buckets known to this gateway.
    pub fn cache_buckets(&self) -> Vec<Arc<BucketInfo>> {
        let cached = self.cached.read().expect("catalog lock");
        cached
            .buckets
            .values()
            .filter(|bucket| bucket.origin.is_some())
            .cloned()
            .collect()
    }

    /// Looks a bucket up by id (background work holds ids, requests hold names).
    pub async fn bucket_by_id(&self, id: i64) -> StoreResult<Arc<BucketInfo>> {
        if let Some(bucket) = self
            .cached
            .read()
            .expect("catalog lock")
            .buckets
            .values()
            .find(|bucket| bucket.id == id)
        {
            return Ok(Arc::clone(bucket));
        }
        let client = checkout(&self.pool).await?;
        let row = client
            .query_opt(&format!("{} WHERE b.id = $1", bucket_select()), &[&id])
            .await?
            .ok_or(StoreError::NoSuchBucket)?;
        self.remember(&row)
    }

    /// Caches a bucket row read outside a reload, unless the cache holds a newer snapshot of
    /// it (the row may predate a change or the bucket's drop, and would outlive it).
    fn remember(&self, row: &Row) -> StoreResult<Arc<BucketInfo>> {
        let mut cached = self.cached.write().expect("catalog lock");
        let bucket = bucket_from_row(row, &mut cached.namespaces, &self.master_key)
            .map_err(|err| StoreError::Corrupt(err.to_string()))?;
        let bucket = Arc::new(bucket);
        // The request at hand is checked against this row's rules whether or not it is cached.
        if has_rules(&bucket) {
            self.rules.store(true, Ordering::Release);
        }
        cached.missing_buckets.remove(&bucket.name);
        cached
            .buckets
            .learn(bucket.name.clone(), Arc::clone(&bucket), row.get("catalog_version"));
        Ok(bucket)
    }

    /// The bucket `name` if this gateway has it cached: no database round trip, for checks
    /// that run before a request is admitted.
    pub fn cached_bucket(&self, name: &str) -> Option<Arc<BucketInfo>> {
        self.cached.read().expect("catalog lock").buckets.get(name).cloned()
    }

    /// Whether any bucket this gateway knows has a bucket policy or ACLs enabled, or any key a
    /// policy: while none has, a signed request needs no access check beyond its owner check.
    pub fn has_access_rules(&self) -> bool {
        self.rules.load(Ordering::Acquire)
    }

    /// The root key's id (the owner S3's answers name for a bucket the root key owns), as of
    /// the cached catalog.
    pub fn root_key_id(&self) -> Option<String> {
        let cached = self.cached.read().expect("catalog lock");
        cached
            .keys
            .values()
            .find(|key| key.is_root)
            .map(|key| key.access_key.clone())
    }

    /// Whether the access key exists (as of the cached catalog).
    /// The catalog version this gateway has loaded: it moves with every change of buckets, keys
    /// and RESP ACL rules, made here or on another gateway (once its NOTIFY arrived).
    pub fn version(&self) -> i64 {
        self.cached.read().expect("catalog lock").version
    }

    /// Told of each new [`Catalog::version`] this gateway loads.
    pub fn watch_version(&self) -> tokio::sync::watch::Receiver<i64> {
        self.loaded.subscribe()
    }

    pub fn has_access_key(&self, access_key: &str) -> bool {
        self.cached.read().expect("catalog lock").keys.contains(access_key)
    }

    /// Drops what the cache holds on a bucket whose row turned out to be gone or was changed
    /// (or created: a cache bucket, by `put_origin`) through this gateway.
    pub(super) fn forget_bucket(&self, name: &str) {
        let mut cached = self.cached.write().expect("catalog lock");
        cached.buckets.remove(name);
        cached.missing_buckets.remove(name);
    }

    /// The key named `access_key`, from the cache or else from the database. Asked before the
    /// request's signature is checked: a lookup waits its turn ([`KeyLookups`]), and the cache
    /// is asked again once it has it (a lookup of the same name may just have answered).
    pub async fn access_key(&self, access_key: &str) -> StoreResult<Option<Arc<AccessKey>>> {
        if let CachedKey::Known(known) = self.cached_key(access_key) {
            return Ok(known);
        }
        let turn = self.key_lookups.turn(access_key).await?;
        let asked_at = match self.cached_key(access_key) {
            CachedKey::Known(known) => return Ok(known),
            CachedKey::Unknown { version } => version,
        };
        let permit = turn.permit().await?;
        let found = self.look_up_key(access_key).await?;
        drop(permit);
        self.counted("access_key", if found.is_some() { "found" } else { "missing" });
        let Some((key, read_at)) = found else {
            let mut cached = self.cached.write().expect("catalog lock");
            let loaded = cached.version;
            cached.missing_keys.record(access_key, asked_at, loaded, Instant::now());
            return Ok(None);
        };
        // Cached only once the catalog is as new as the key: a request that finds the key in
        // the cache must find its buckets as new (see `catch_up_with`).
        self.catch_up_with(read_at).await;
        self.learn_key(&key, read_at);
        Ok(Some(key))
    }

    /// Brings the cache to catalog version `read_at` (that of a key just read from the
    /// database) when it is older: the key's request is then decided on buckets at least as new
    /// as the key. A key is granted in the same transaction as what makes it useful (the
    /// operator puts a Bucket's key and creates or adopts its bucket in one), so until the
    /// reload its NOTIFY brings, the cached bucket would still name its previous owner (a
    /// revoked key, a custodian, nobody) and refuse the new key: AccessDenied for a key whose
    /// Bucket says Ready (a CI failure in the operator's tier). It is the reload that NOTIFY
    /// (or, on a standby, the poll) would run a moment later, run first: that one then finds
    /// the version loaded and reads nothing. Only a key's first request through this gateway
    /// since a catalog change pays for it; a cached key never does. Should it fail, the request
    /// goes on with the cache as it is (as before), the reload left to NOTIFY or the poll.
    async fn catch_up_with(&self, read_at: i64) {
        if read_at <= self.version() {
            return;
        }
        let _one_at_a_time = self.reloading.lock().await;
        // Brought up to it meanwhile, by the reload of another key's request or NOTIFY's.
        if read_at <= self.version() {
            return;
        }
        if let Err(error) = self.reload().await {
            tracing::warn!(error = %format!("{error:#}"), "reloading the catalog for a key newer than it");
        }
    }

    /// What the cache says of `access_key`: the key, known missing, or nothing (as of the
    /// loaded catalog `version`).
    fn cached_key(&self, access_key: &str) -> CachedKey {
        let cached = self.cached.read().expect("catalog lock");
        if let Some(key) = cached.keys.get(access_key) {
            return CachedKey::Known(Some(Arc::clone(key)));
        }
        if cached.missing_keys.contains(access_key, cached.version, Instant::now()) {
            self.counted("access_key", "known_missing");
            return CachedKey::Known(None);
        }
        CachedKey::Unknown {
            version: cached.version,
        }
    }

    /// Reads a key the cache does not hold from the database, with the catalog version of the
    /// snapshot it was read from (the caller caches it).
    async fn look_up_key(&self, access_key: &str) -> StoreResult<Option<(Arc<AccessKey>, i64)>> {
        if super::is_session_key(access_key) {
            return Ok(self
                .session_key(access_key)
                .await?
                .map(|(key, version)| (Arc::new(key), version)));
        }
        let client = checkout(&self.pool).await?;
        // With the catalog version of the same snapshot: the key's row is in every snapshot of
        // that version or newer (key changes bump the version in their own transaction).
        let row = client
            .query_opt(
                &format!(
                    "SELECT {KEY_COLUMNS}, (SELECT version FROM pgvs3.catalog_version) AS catalog_version
                       FROM pgvs3.access_keys WHERE access_key = $1 AND NOT disabled"
                ),
                &[&access_key],
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        let key = Arc::new(
            self.decode_key(&row)
                .map_err(|err| StoreError::Corrupt(err.to_string()))?,
        );
        Ok(Some((key, row.get("catalog_version"))))
    }

    /// Caches a key read from the database at catalog version `read_at` (unless the cache
    /// holds a newer snapshot of it). A session's key is learnt like a key until the next
    /// reload of the catalog (a role's change or deletion is one), its expiry checked on every
    /// request.
    fn learn_key(&self, key: &Arc<AccessKey>, read_at: i64) {
        let mut cached = self.cached.write().expect("catalog lock");
        cached.keys.learn(key.access_key.clone(), Arc::clone(key), read_at);
        // A key learnt before the reload that brings it may carry a policy: the access checks
        // must run for it, or its policy would not narrow it until that reload (a CI failure in
        // the operator's tier). Reloads of older snapshots keep it (CatalogEntries), so they
        // keep the checks on. A session's requests never take the fast path (`has_rules`).
        if key.policy.is_some() && key.session.is_none() {
            self.rules.store(true, Ordering::Release);
        }
    }

    pub async fn list_buckets(&self, principal: &Principal) -> StoreResult<Vec<BucketSummary>> {
        let client = checkout(&self.pool).await?;
        let rows = client
            .query(
                "SELECT name, created_at FROM pgvs3.buckets WHERE $1 OR owner = $2 ORDER BY name",
                &[&principal.is_root, &principal.access_key],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| BucketSummary {
                name: row.get("name"),
                created_at: row.get("created_at"),
            })
            .collect())
    }

    /// Creates a bucket with what `new` asks for beyond its name, in the same transaction (a
    /// bucket must never be seen without the lock, ownership or ACL it was created with).
    pub async fn create_bucket(
        &self,
        principal: &Principal,
        name: &str,
        new: &NewBucket,
    ) -> StoreResult<Arc<BucketInfo>> {
        if principal.read_only {
            return Err(StoreError::AccessDenied);
        }
        // The root key's buckets have no owner row, so that root keys can be rotated.
        let owner = (!principal.is_root).then_some(principal.access_key.as_str());
        let mut client = checkout(&self.pool).await?;
        let tx = client.transaction().await?;
        let created = pgvs3_catalog::ensure_bucket(&*tx, name, owner, pgvs3_catalog::ORDINARY_NAMESPACE)
            .await
            .map_err(|err| match err.kind() {
                pgvs3_catalog::ErrorKind::InvalidBucketName => StoreError::InvalidBucketName,
                _ => StoreError::from(err.into_source()),
            })?
            .created;
        if created && new.object_lock {
            tx.execute(
                "UPDATE pgvs3.buckets SET versioning = 'Enabled', object_lock = '{}' WHERE name = $1",
                &[&name],
            )
            .await?;
        }
        if created && (new.ownership.is_some() || new.acl.is_some()) {
            // The column's default is BucketOwnerEnforced, as S3's for new buckets.
            tx.execute(
                "UPDATE pgvs3.buckets SET object_ownership = coalesce($2, object_ownership), acl = $3 WHERE name = $1",
                &[
                    &name,
                    &new.ownership.map(Ownership::as_str),
                    &new.acl.as_ref().map(Json),
                ],
            )
            .await?;
        }
        let row = tx
            .query_one(&format!("{} WHERE b.name = $1", bucket_select()), &[&name])
            .await?;
        tx.commit().await?;
        let bucket = self.remember(&row)?;
        if !created {
            return Err(if principal.owns(&bucket) {
                StoreError::BucketAlreadyOwnedByYou
            } else {
                StoreError::BucketAlreadyExists
            });
        }
        Ok(bucket)
    }

    pub async fn delete_bucket(&self, principal: &Principal, name: &str) -> StoreResult<()> {
        let bucket = self.bucket(name).await?;
        if principal.read_only || !principal.is_root && bucket.owner.as_deref() != Some(principal.access_key.as_str()) {
            return Err(StoreError::AccessDenied);
        }
        let client = checkout(&self.pool).await?;
        let dropped = pgvs3_catalog::drop_bucket(&**client, name, false)
            .await
            .map_err(|err| match err.kind() {
                pgvs3_catalog::ErrorKind::BucketNotEmpty => StoreError::BucketNotEmpty,
                _ => StoreError::from(err.into_source()),
            })?;
        self.forget_bucket(name);
        if dropped { Ok(()) } else { Err(StoreError::NoSuchBucket) }
    }

    pub async fn put_access_key(&self, key: &NewAccessKey) -> StoreResult<()> {
        let sealed = self.master_key.seal(&key.secret);
        let client = checkout(&self.pool).await?;
        let stored = pgvs3_catalog::AccessKey {
            id: &key.access_key,
            sealed_secret: &sealed,
            is_root: key.is_root,
            read_only: key.read_only,
            description: &key.description,
        };
        pgvs3_catalog::put_access_key(&**client, &stored)
            .await
            .map_err(|err| StoreError::from(err.into_source()))?;
        let mut cached = self.cached.write().expect("catalog lock");
        cached.keys.remove(&key.access_key);
        // Usable through this gateway at once, before the catalog's reload brings it.
        cached.missing_keys.remove(&key.access_key);
        Ok(())
    }

    pub async fn delete_access_key(&self, access_key: &str) -> StoreResult<bool> {
        let client = checkout(&self.pool).await?;
        let deleted = pgvs3_catalog::delete_access_key(&**client, access_key)
            .await
            .map_err(|err| StoreError::from(err.into_source()))?;
        self.cached.write().expect("catalog lock").keys.remove(access_key);
        Ok(deleted)
    }

    /// Attaches `policy` (an identity policy document) to a key other than the root key, or
    /// detaches its policy (`None`). False when there is no such key.
    pub async fn set_key_policy(&self, access_key: &str, policy: Option<&str>) -> anyhow::Result<bool> {
        if let Some(text) = policy {
            crate::access::policy::BucketPolicy::parse_identity(text).map_err(|err| anyhow::anyhow!("{err}"))?;
        }
        let client = checkout(&self.pool).await?;
        let found = pgvs3_catalog::set_key_policy(&**client, access_key, policy).await?;
        drop(client);
        self.reload_now().await?;
        Ok(found)
    }

    pub async fn list_access_keys(&self) -> StoreResult<Vec<AccessKey>> {
        let client = checkout(&self.pool).await?;
        let rows = client
            .query(
                &format!("SELECT {KEY_COLUMNS} FROM pgvs3.access_keys ORDER BY access_key"),
                &[],
            )
            .await?;
        rows.iter()
            .map(|row| self.decode_key(row).map_err(|err| StoreError::Corrupt(err.to_string())))
            .collect()
    }

    pub async fn root_key(&self) -> StoreResult<Option<String>> {
        let client = checkout(&self.pool).await?;
        let row = client
            .query_opt("SELECT access_key FROM pgvs3.access_keys WHERE is_root", &[])
            .await?;
        Ok(row.map(|row| row.get("access_key")))
    }

    /// Every namespace's SQL, for the maintenance reaper.
    pub(super) async fn namespaces(&self) -> StoreResult<Vec<Arc<super::objects::NamespaceSql>>> {
        let client = checkout(&self.pool).await?;
        let names: Vec<String> = client
            .query("SELECT name FROM pgvs3.namespaces", &[])
            .await?
            .iter()
            .map(|row| row.get("name"))
            .collect();
        let mut cached = self.cached.write().expect("catalog lock");
        Ok(names
            .iter()
            .map(|name| namespace_sql(&mut cached.namespaces, name))
            .collect())
    }
}

/// Whether a bucket has rules the access check must evaluate for a signed request.
fn has_rules(bucket: &BucketInfo) -> bool {
    bucket.access.policy.is_some() || bucket.access.acls_enabled()
}

fn namespace_sql(
    known: &mut HashMap<String, Arc<super::objects::NamespaceSql>>,
    namespace: &str,
) -> Arc<super::objects::NamespaceSql> {
    Arc::clone(
        known
            .entry(namespace.to_owned())
            .or_insert_with(|| Arc::new(super::objects::NamespaceSql::new(namespace))),
    )
}

fn bucket_from_row(
    row: &Row,
    namespaces: &mut HashMap<String, Arc<super::objects::NamespaceSql>>,
    master_key: &MasterKey,
) -> anyhow::Result<BucketInfo> {
    let namespace: String = row.get("namespace");
    let name: String = row.get("name");
    let access = crate::access::BucketAccess::from_columns(
        &name,
        row.get("cors"),
        row.get("policy"),
        row.get("public_access_block"),
        row.get("object_ownership"),
        row.get("acl"),
    )?;
    Ok(BucketInfo {
        access,
        default_encryption: row.get::<_, Option<&str>>("encryption") == Some("AES256"),
        id: row.get("id"),
        name,
        sql: namespace_sql(namespaces, &namespace),
        namespace,
        owner: row.get("owner"),
        created_at: row.get("created_at"),
        versioning: row
            .get::<_, Option<&str>>("versioning")
            .map(super::Versioning::parse)
            .transpose()?,
        object_lock: row
            .get::<_, Option<Json<super::LockConfig>>>("object_lock")
            .map(|Json(config)| config),
        lifecycle: row
            .get::<_, Option<Json<super::Lifecycle>>>("lifecycle")
            .map(|Json(lifecycle)| Arc::new(lifecycle)),
        origin: origin_from_row(row, master_key)?.map(Arc::new),
        logging: row
            .get::<_, Option<Json<super::LoggingConfig>>>("logging")
            .map(|Json(config)| Arc::new(config)),
    })
}
