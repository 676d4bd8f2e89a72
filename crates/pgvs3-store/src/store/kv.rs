//! Keys and values for RESP: a keyspace is a bucket, a key an object, a value its body.
//!
//! A run of reads loads every key it names in one statement. A run of writes is one
//! transaction: its keys are locked in sorted order first (so concurrent batches never
//! deadlock), their current state is loaded, the protocol front applies its commands to that
//! state in memory, and the changes go back in one round trip that ends with COMMIT. A run that
//! only overwrites (plain SET, MSET) loads nothing: its BEGIN and locks go out with its writes,
//! so the whole run is one round trip.
//!
//! Locks are advisory and transaction-scoped: every write batch holds its keyspace's lock
//! shared plus one lock per key; a batch of more than [`FINE_LOCK_LIMIT`] keys holds the
//! keyspace's lock exclusively instead, so no batch can exhaust PostgreSQL's lock table. The
//! keyspace lock is always taken first, which keeps the order, and so deadlock freedom.
//!
//! A key is a string (an object) or a typed key (`pgvs3.resp_keys`, see store/types.rs). Loads
//! read both; writes of strings and deletes replace a typed key of the same name, so a key
//! has one type. Typed commands run in SQL inside the same transaction ([`KvBatch::typed`]):
//! what the batch changed in memory is written before them, and keys they touched are loaded
//! again before the next command in memory.
//!
//! A namespace whose buckets have no typed keys (`pgvs3.resp_typed` lists those that have)
//! pays nothing for them: until the gateway has seen one ([`KvSql::typed`]), loads read the
//! objects alone and check `resp_typed` in the same statement (an empty index probe, where
//! probing `resp_keys` per key cost 15% of a GET), and blind overwrites raise if the bucket has
//! typed keys after all (the batch is then rolled back and written again the typed way). A
//! batch that loaded its keys knows which of them are typed: it deletes typed rows only for
//! those.
//!
//! In a bucket with S3 versioning a string write is a new version and a deleted string leaves a
//! delete marker, as S3's PUT and DELETE do; the statements read the bucket's versioning as
//! committed, so a batch is right even when this gateway's catalog has not seen a change yet.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use bytes::Bytes;
use md5::{Digest, Md5};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};

use super::chunks::{ChunkStream, Chunker};
use super::objects::{INLINE_LIMIT, check_key};
use super::types::{KeyType, TypedCall, TypedRow};
use super::{BucketInfo, Store, StoreError, StoreResult};
use crate::pg::connections::Connections;

/// Most keys a write batch locks one by one.
pub const FINE_LOCK_LIMIT: usize = 64;

/// The keyspace SQL of one namespace.
#[derive(Debug)]
pub(super) struct KvSql {
    /// Some bucket of the namespace has typed keys (sticky; see the module's doc). Until then
    /// the `*_strings` statements serve.
    typed: AtomicBool,
    load: String,
    load_one: String,
    load_strings: String,
    load_one_strings: String,
    delete: String,
    mark_deleted: String,
    lock: String,
    lock_keyspace_shared: String,
    lock_keyspace: String,
    pub(super) await_writers: String,
    try_lock: String,
    upsert: String,
    upsert_plain: String,
    upsert_strings: String,
    set_expiry: String,
    delete_expired_strings: String,
    scan: String,
    count: String,
    random: String,
    flush: String,
}

/// Strings and typed keys: a typed key's version is its `version` counter (WATCH compares it),
/// its type the tenth column (NULL for a string). `key_condition` names the key as `KEY`. An
/// expired typed row comes too (its expiry at or before the row's clock): the key is absent,
/// but a string written over it must delete the row, which could otherwise come back to life
/// with an EXPIRE or PERSIST of the string. An expired string row comes as well and is taken as
/// absent (typed writes delete it, see `delete_expired_strings`): a read that meets an expired
/// row waits for the key's writer first ([`KvBatch::load`]).
fn load_sql(ns: &str, key_condition: &str) -> String {
    let objects = key_condition.replace("KEY", "o.key");
    let typed = key_condition.replace("KEY", "r.key");
    format!(
        "SELECT o.key, o.size, o.etag, o.last_modified, o.expires_at, o.inline, o.body_id, t.now,
                o.meta ? 'pc' AS multipart, NULL::\"char\" AS type, o.meta ? 'se' AS sealed
           FROM (SELECT clock_timestamp() AS now) t
           LEFT JOIN {ns}.objects o ON o.bucket_id = $1 AND {objects}
         UNION ALL
         SELECT r.key, 0, 't' || r.version, to_timestamp(0), r.expires_at, NULL, NULL, clock_timestamp(),
                false, r.type, false
           FROM pgvs3.resp_keys r
          WHERE r.bucket_id = $1 AND {typed}"
    )
}

/// Strings only, for a keyspace without typed keys; the last column says whether the bucket has
/// typed keys after all (then the load is done again with [`load_sql`]).
fn load_strings_sql(ns: &str, key_condition: &str) -> String {
    let objects = key_condition.replace("KEY", "o.key");
    format!(
        "SELECT o.key, o.size, o.etag, o.last_modified, o.expires_at, o.inline, o.body_id, t.now,
                o.meta ? 'pc' AS multipart, NULL::\"char\" AS type, o.meta ? 'se' AS sealed, t.typed
           FROM (SELECT clock_timestamp() AS now,
                        EXISTS (SELECT 1 FROM pgvs3.resp_typed WHERE bucket_id = $1) AS typed) t
           LEFT JOIN {ns}.objects o ON o.bucket_id = $1 AND {objects}"
    )
}

/// The string upsert; `typed` is what goes before it about typed keys of the same names. `$8`
/// is the new versions' metadata (their object lock retention, else empty). In a versioned bucket
/// (as committed, not as the catalog cache has it) a write is a new version, numbered as an S3
/// PUT's is; the objects_keep_version trigger keeps the version it replaces. A version takes no
/// TTL (one kept from before the bucket was versioned included): at its expiry the reaper would
/// remove it for good.
fn upsert_sql(ns: &str, typed: &str, guard: &str) -> String {
    // A subquery with a volatile output is not flattened, so each key draws one number.
    format!(
        "{typed}
         INSERT INTO {ns}.objects AS o (bucket_id, key, size, etag, last_modified, meta, inline, body_id, expires_at,
                                        version_seq, version_id)
         SELECT $1, u.key, u.size, u.etag, clock_timestamp(), $8::jsonb, u.inline, u.body_id,
                CASE WHEN u.seq IS NULL THEN u.expires_at END, u.seq,
                CASE WHEN u.enabled THEN lpad(to_hex(u.seq), 16, '0') END
           FROM (SELECT u.*, b.versioning = 'Enabled' AS enabled,
                        CASE WHEN b.versioning IS NOT NULL THEN nextval('{ns}.version_seqs') END AS seq
                   FROM pgvs3.buckets b,
                        unnest($2::text[], $3::int8[], $4::text[], $5::bytea[], $6::int8[], $7::timestamptz[])
                        AS u(key, size, etag, inline, body_id, expires_at)
                  WHERE b.id = $1{guard}) u
         ON CONFLICT (bucket_id, key) DO UPDATE
            SET size = EXCLUDED.size, etag = EXCLUDED.etag, last_modified = EXCLUDED.last_modified,
                meta = EXCLUDED.meta, inline = EXCLUDED.inline, body_id = EXCLUDED.body_id,
                expires_at = EXCLUDED.expires_at, {redrawn}",
        redrawn = super::objects::version_drawn_under_lock(
            ns,
            "EXCLUDED.version_seq IS NOT NULL",
            "EXCLUDED.version_id IS NOT NULL"
        ),
    )
}

impl KvSql {
    pub(super) fn new(ns: &str) -> KvSql {
        let live = "(expires_at IS NULL OR expires_at > clock_timestamp())";
        KvSql {
            // The clock row makes the statement answer even when no key exists, and gives the
            // batch the database's notion of "now" for TTLs.
            load: load_sql(ns, "KEY = ANY($2)"),
            // One key is the common case. Its own statement lets PostgreSQL keep one generic plan
            // (a unique index probe) instead of planning every execution, as it must for ANY($2):
            // planning was a quarter of the server's time on single GETs.
            load_one: load_sql(ns, "KEY = $2"),
            load_strings: load_strings_sql(ns, "KEY = ANY($2)"),
            load_one_strings: load_strings_sql(ns, "KEY = $2"),
            typed: AtomicBool::new(false),
            // In a versioned bucket (as committed) a deleted key's current version is kept as
            // S3's DELETE keeps it: noncurrent (Enabled), or gone when it is the null version of a
            // Suspended bucket, whose noncurrent null version goes too. The marker follows in
            // `mark_deleted`, a statement of its own: a Suspended bucket's new null marker must not
            // meet the null version this one deletes in the same statement.
            delete: format!(
                "WITH typed AS (DELETE FROM pgvs3.resp_keys WHERE bucket_id = $1 AND key = ANY($2)),
                      gone AS (DELETE FROM {ns}.objects WHERE bucket_id = $1 AND key = ANY($2) RETURNING *),
                      dropped AS (DELETE FROM {ns}.versions v USING pgvs3.buckets b
                                   WHERE b.id = $1 AND b.versioning = 'Suspended'
                                     AND v.bucket_id = $1 AND v.key = ANY($2) AND v.version_id = 'null'
                                  RETURNING v.body_id),
                      retired AS (INSERT INTO {ns}.retired_bodies (body_id)
                                  SELECT body_id FROM dropped WHERE body_id IS NOT NULL ON CONFLICT DO NOTHING)
                 INSERT INTO {ns}.versions (bucket_id, key, version_id, version_seq, size, etag, last_modified, meta,
                                            inline, body_id)
                 SELECT g.bucket_id, g.key, coalesce(g.version_id, 'null'), g.version_seq, g.size, g.etag,
                        g.last_modified, g.meta, g.inline, g.body_id
                   FROM gone g JOIN pgvs3.buckets b ON b.id = $1
                  WHERE b.versioning = 'Enabled' OR (b.versioning = 'Suspended' AND g.version_id IS NOT NULL)"
            ),
            // The delete markers of deleted strings, in a versioned bucket: a new version id when
            // Enabled, the null version when Suspended (as S3's DELETE writes them).
            mark_deleted: format!(
                "INSERT INTO {ns}.versions (bucket_id, key, version_id, version_seq, is_delete_marker, size, etag,
                                            last_modified)
                 SELECT $1, m.key, CASE WHEN m.enabled THEN lpad(to_hex(m.seq), 16, '0') ELSE 'null' END, m.seq, true,
                        0, '', clock_timestamp()
                   FROM (SELECT k AS key, b.versioning = 'Enabled' AS enabled, nextval('{ns}.version_seqs') AS seq
                           FROM pgvs3.buckets b, unnest($2::text[]) AS k
                          WHERE b.id = $1 AND b.versioning IS NOT NULL) m"
            ),
            // Two-int advisory locks live apart from the single-bigint ones the gateway uses
            // elsewhere. Hash collisions only serialize a little more.
            lock: "SELECT count(pg_advisory_xact_lock($1::int4, h))
                     FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest($2::text[]) AS k ORDER BY h) AS sorted"
                .to_owned(),
            // The single-bigint lock space, negated bucket ids: apart from the gateway's other
            // (positive) advisory locks.
            lock_keyspace_shared: "SELECT pg_advisory_xact_lock_shared(-$1::int8)".to_owned(),
            lock_keyspace: "SELECT pg_advisory_xact_lock(-$1::int8)".to_owned(),
            // A read's wait for the writers of keys it found expired (see `Waited`): shared, in
            // the writers' order (keyspace, then keys), held only for this statement.
            await_writers: "SELECT pg_advisory_xact_lock_shared(-$1::int8),
                                   (SELECT count(pg_advisory_xact_lock_shared($2::int4, h))
                                      FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest($3::text[]) AS k
                                             ORDER BY h) AS sorted)"
                .to_owned(),
            // Out of the sorted order, so never waiting: see `KvBatch::try_lock`.
            try_lock: "SELECT bool_and(pg_try_advisory_xact_lock($1::int4, h)) AS locked
                         FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest($2::text[]) AS k) AS keys"
                .to_owned(),
            // A string written over a typed key replaces it.
            upsert: upsert_sql(
                ns,
                "WITH typed AS (DELETE FROM pgvs3.resp_keys WHERE bucket_id = $1 AND key = ANY($2::text[]))",
                "",
            ),
            // Keys known to have no typed row (loaded under the batch's locks).
            upsert_plain: upsert_sql(ns, "", ""),
            // Keys not loaded, in a keyspace believed to have no typed keys: the bucket's
            // `resp_typed` row, if any, raises (and the batch is written again with `upsert`).
            upsert_strings: upsert_sql(
                ns,
                "",
                "
            AND NOT EXISTS (SELECT 1 FROM pgvs3.resp_typed WHERE bucket_id = $1 AND pgvs3.resp_typed_conflict())",
            ),
            // Only rows that were live when the batch loaded them (`$4`, its clock then): an
            // expired row of the other table under the same name stays expired, where setting
            // its expiry would bring its old value back over the live key.
            set_expiry: format!(
                "WITH typed AS (
                     UPDATE pgvs3.resp_keys r SET expires_at = u.expires_at, version = r.version + 1
                       FROM unnest($2::text[], $3::timestamptz[]) AS u(key, expires_at)
                      WHERE r.bucket_id = $1 AND r.key = u.key AND (r.expires_at IS NULL OR r.expires_at > $4))
                 UPDATE {ns}.objects o SET expires_at = u.expires_at
                   FROM unnest($2::text[], $3::timestamptz[]) AS u(key, expires_at)
                  WHERE o.bucket_id = $1 AND o.key = u.key AND (o.expires_at IS NULL OR o.expires_at > $4)"
            ),
            // Before a write batch's typed calls: the expired strings among their keys, which a
            // typed key made there must not leave behind (see `set_expiry`). The reaper's
            // statement, for these keys now.
            delete_expired_strings: format!(
                "DELETE FROM {ns}.objects WHERE bucket_id = $1 AND key = ANY($2) AND expires_at <= clock_timestamp()"
            ),
            // Both kinds of key in one order; a name that is both (an S3 write over a typed
            // key) is the string, as loads have it.
            scan: format!(
                "SELECT DISTINCT ON (key) key, t FROM (
                    (SELECT key, NULL::\"char\" AS t FROM {ns}.objects
                      WHERE bucket_id = $1 AND key > $2 AND key >= $3 AND starts_with(key, $3) AND {live}
                      ORDER BY key LIMIT $4)
                    UNION ALL
                    (SELECT key, type FROM pgvs3.resp_keys
                      WHERE bucket_id = $1 AND key > $2 AND key >= $3 AND starts_with(key, $3) AND {live}
                      ORDER BY key LIMIT $4)) u
                  ORDER BY key, t IS NOT NULL LIMIT $4"
            ),
            count: format!(
                "SELECT o.keys + r.keys AS keys, o.expiring + r.expiring AS expiring
                   FROM (SELECT count(*) AS keys, count(expires_at) AS expiring FROM {ns}.objects
                          WHERE bucket_id = $1 AND {live}) o,
                        (SELECT count(*) AS keys, count(expires_at) AS expiring FROM pgvs3.resp_keys
                          WHERE bucket_id = $1 AND {live}) r"
            ),
            random: format!(
                "SELECT key FROM (SELECT key FROM {ns}.objects WHERE bucket_id = $1 AND {live}
                                  UNION ALL
                                  SELECT key FROM pgvs3.resp_keys WHERE bucket_id = $1 AND {live}) k
                  ORDER BY random() LIMIT 1"
            ),
            // Never the objects of a versioned bucket (FLUSHDB refuses it; this holds should the
            // catalog cache not know yet): deleting them would remove versions for good.
            flush: format!(
                "WITH typed AS (DELETE FROM pgvs3.resp_keys WHERE bucket_id = $1)
                 DELETE FROM {ns}.objects WHERE bucket_id = $1
                    AND NOT EXISTS (SELECT 1 FROM pgvs3.buckets WHERE id = $1 AND versioning IS NOT NULL)"
            ),
        }
    }
}

/// A value as loaded: small ones in full, chunked ones by reference until someone needs them.
#[derive(Debug, Clone)]
pub enum KvValue {
    Bytes(Bytes),
    /// A chunked body, or (`multipart`) the manifest of an object uploaded in parts over S3.
    Chunked {
        body_id: i64,
        size: u64,
        multipart: bool,
    },
    /// A hash, set, sorted set or list: its elements stay in the database.
    Typed(KeyType),
    /// An object an S3 client stored with server-side encryption: RESP has no key to open it
    /// with, so its value is refused rather than answered as ciphertext.
    Sealed {
        size: u64,
    },
}

impl KvValue {
    pub fn len(&self) -> u64 {
        match self {
            KvValue::Bytes(bytes) => bytes.len() as u64,
            KvValue::Chunked { size, .. } | KvValue::Sealed { size } => *size,
            KvValue::Typed(_) => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The collection's type, `None` for a string.
    pub fn key_type(&self) -> Option<KeyType> {
        match self {
            KvValue::Typed(kind) => Some(*kind),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct KvEntry {
    pub value: KvValue,
    pub expires_at: Option<SystemTime>,
    /// What the row looked like when loaded (ETag, last modified): WATCH compares it.
    pub version: Option<(String, SystemTime)>,
}

/// What a write batch has done to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    None,
    Expiry,
    Write,
    Delete,
}

#[derive(Debug, Clone)]
struct Slot {
    current: Option<KvEntry>,
    existed: bool,
    change: Change,
    /// A typed row of this name was loaded (the key, or one an S3 write shadowed): a string
    /// written here must delete it.
    typed_row: bool,
    /// The key existed as a string (an object row): deleting it writes a delete marker in a
    /// versioned bucket.
    string: bool,
}

/// The keys of one batch, loaded; changes are kept in memory until [`KvBatch::commit`].
pub struct KvBatch {
    bucket: Arc<BucketInfo>,
    /// Taken from `pool` when a chunked value must be read, for batches loaded together with
    /// others (see [`Store::kv_read_many`]).
    client: Option<deadpool_postgres::Object>,
    pool: deadpool_postgres::Pool,
    /// Set while a statement is under way on `client`: a batch dropped then (its caller went
    /// away) has the statement cancelled (see [`abandon`]).
    busy: bool,
    cancel: Option<Connections>,
    in_transaction: bool,
    /// The keys of a batch that only overwrites: its BEGIN and locks wait to go out with the
    /// writes at commit.
    deferred_locks: Option<Vec<String>>,
    /// Its keys were not loaded (a batch that only overwrites): nothing is known of their types.
    blind: bool,
    /// The database's clock when the keys were loaded (first: see [`KvBatch::reload`]).
    pub now: SystemTime,
    slots: HashMap<String, Slot>,
    /// A message `pgvs3.resp_notify` sends with the commit (keyspace notifications): channel,
    /// message, inline limit.
    notification: Option<(Vec<u8>, Vec<u8>, i32)>,
}

impl Store {
    /// Loads `keys` for reading, in one statement.
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store kv_read", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn kv_read(&self, bucket: &Arc<BucketInfo>, keys: &[String]) -> StoreResult<KvBatch> {
        let client = self.client().await?;
        KvBatch::load(self, Arc::clone(bucket), client, keys, Locking::None).await
    }

    /// Loads the keys of several read batches in one statement: reads from many
    /// connections that arrive together share it. One batch per request, in order.
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store kv_read_many", otel.kind = "client", db.system = "postgresql", batches = requests.len()))]
    pub(crate) async fn kv_read_many(
        &self,
        bucket: &Arc<BucketInfo>,
        requests: &[&[String]],
    ) -> StoreResult<Vec<KvBatch>> {
        let mut keys: Vec<String> = requests.iter().flat_map(|keys| keys.iter()).cloned().collect();
        keys.sort_unstable();
        keys.dedup();
        let mut all = self.kv_read(bucket, &keys).await?;
        all.client = None;
        Ok(requests
            .iter()
            .map(|keys| KvBatch {
                bucket: Arc::clone(&all.bucket),
                client: None,
                pool: self.pool.clone(),
                busy: false,
                cancel: self.cancel.clone(),
                in_transaction: false,
                deferred_locks: None,
                blind: false,
                now: all.now,
                slots: keys
                    .iter()
                    .filter_map(|key| Some((key.clone(), all.slots.get(key)?.clone())))
                    .collect(),
                notification: None,
            })
            .collect())
    }

    /// Begins a write batch on `keys`: one transaction, keys locked in sorted order, then loaded.
    /// BEGIN, the locks and the load go out together (one round trip).
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store kv_write", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn kv_write(&self, bucket: &Arc<BucketInfo>, keys: &[String]) -> StoreResult<KvBatch> {
        let client = self.client().await?;
        KvBatch::load(self, Arc::clone(bucket), client, keys, Locking::Keys).await
    }

    /// Begins a write batch that holds the whole keyspace (its lock exclusively), with `keys`
    /// loaded: for work that names further keys as it goes (a Lua script), which could not be
    /// locked one by one later without breaking the lock order.
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store kv_write_all", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn kv_write_all(&self, bucket: &Arc<BucketInfo>, keys: &[String]) -> StoreResult<KvBatch> {
        let client = self.client().await?;
        KvBatch::load(self, Arc::clone(bucket), client, keys, Locking::Keyspace).await
    }

    /// Begins a write batch whose commands only overwrite `keys`, never reading them: nothing
    /// is loaded, and BEGIN and the locks go out with the writes at commit (one round trip in
    /// all, where [`Store::kv_write`] takes two).
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store kv_overwrite", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn kv_overwrite(&self, bucket: &Arc<BucketInfo>, keys: Vec<String>) -> StoreResult<KvBatch> {
        for key in &keys {
            check_key(key)?;
        }
        let client = self.client().await?;
        Ok(KvBatch {
            bucket: Arc::clone(bucket),
            client: Some(client),
            pool: self.pool.clone(),
            busy: false,
            cancel: self.cancel.clone(),
            in_transaction: true,
            deferred_locks: Some(keys),
            blind: true,
            now: SystemTime::now(),
            slots: HashMap::new(),
            notification: None,
        })
    }

    /// One page of keys after `after` that start with `prefix`, with their types (`None`: a
    /// string); fewer than `count` means done.
    pub(crate) async fn kv_scan(
        &self,
        bucket: &BucketInfo,
        after: &str,
        prefix: &str,
        count: i64,
    ) -> StoreResult<Vec<(String, Option<KeyType>)>> {
        let under_way = UnderWay::new(self.client().await?, self.cancel.as_ref());
        let client = under_way.client();
        let statement = client.prepare_cached(&bucket.sql.kv.scan).await?;
        let rows = client.query(&statement, &[&bucket.id, &after, &prefix, &count]).await?;
        under_way.done();
        Ok(rows
            .iter()
            .map(|row| {
                (
                    row.get("key"),
                    row.get::<_, Option<i8>>("t").and_then(KeyType::from_code),
                )
            })
            .collect())
    }

    /// How many live keys the keyspace holds, and how many of them have a TTL.
    pub(crate) async fn kv_count(&self, bucket: &BucketInfo) -> StoreResult<(i64, i64)> {
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.kv.count).await?;
        let row = client.query_one(&statement, &[&bucket.id]).await?;
        Ok((row.get("keys"), row.get("expiring")))
    }

    pub(crate) async fn kv_random_key(&self, bucket: &BucketInfo) -> StoreResult<Option<String>> {
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.kv.random).await?;
        let row = client.query_opt(&statement, &[&bucket.id]).await?;
        Ok(row.map(|row| row.get("key")))
    }

    /// Deletes every key of the keyspace (their chunked bodies are retired for the reaper).
    pub(crate) async fn kv_flush(&self, bucket: &BucketInfo) -> StoreResult<()> {
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.kv.flush).await?;
        client.execute(&statement, &[&bucket.id]).await?;
        Ok(())
    }
}

/// What a batch locks as it begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Locking {
    /// Nothing: a read, outside any transaction.
    None,
    /// Its keys (or the keyspace, past [`FINE_LOCK_LIMIT`] keys), in a transaction.
    Keys,
    /// The keyspace exclusively, in a transaction, however few its keys.
    Keyspace,
}

impl KvBatch {
    async fn load(
        store: &Store,
        bucket: Arc<BucketInfo>,
        client: deadpool_postgres::Object,
        keys: &[String],
        locking: Locking,
    ) -> StoreResult<KvBatch> {
        let write = locking != Locking::None;
        for key in keys {
            check_key(key)?;
        }
        // Busy until loaded: a load abandoned midway (or failed) is cancelled.
        let mut batch = KvBatch {
            bucket,
            client: Some(client),
            pool: store.pool.clone(),
            busy: true,
            cancel: store.cancel.clone(),
            in_transaction: write,
            deferred_locks: None,
            blind: false,
            now: SystemTime::now(),
            slots: HashMap::with_capacity(keys.len()),
            notification: None,
        };
        let client = batch.client.as_ref().expect("client until commit");
        let sql = &batch.bucket.sql.kv;
        let id = &batch.bucket.id;
        let typed = sql.typed.load(Ordering::Relaxed);
        let (load, load_params): (_, [&(dyn ToSql + Sync); 2]) = match (keys, typed) {
            ([key], true) => (client.prepare_cached(&sql.load_one).await?, [id, key]),
            ([key], false) => (client.prepare_cached(&sql.load_one_strings).await?, [id, key]),
            (_, true) => (client.prepare_cached(&sql.load).await?, [id, &keys]),
            (_, false) => (client.prepare_cached(&sql.load_strings).await?, [id, &keys]),
        };
        let mut rows = if write {
            let lock_count = match locking {
                Locking::Keyspace => usize::MAX,
                _ => keys.len(),
            };
            let begin = BeginLocked::prepare(client, sql, lock_count).await?;
            let (_, rows) = futures::try_join!(begin.send(client, *id, keys), client.query(&load, &load_params))?;
            rows
        } else {
            client.query(&load, &load_params).await?
        };
        if !typed && rows.first().is_some_and(|row| row.get::<_, bool>("typed")) {
            // The bucket has typed keys after all (the clock row always comes): from now on
            // the namespace is loaded the typed way, this batch first (still under its locks).
            sql.typed.store(true, Ordering::Relaxed);
            let load = client.prepare_cached(&sql.load).await?;
            rows = client.query(&load, &[id, &keys]).await?;
        }
        let mut lapsed = batch.absorb(&rows, keys);
        if !write {
            // See [`Waited`]. (Rare: the reaper removes expired rows.)
            let mut waited = Waited::default();
            loop {
                let fresh = waited.fresh(lapsed);
                if fresh.is_empty() {
                    break;
                }
                let client = batch.client.as_ref().expect("client until commit");
                let sql = &batch.bucket.sql.kv;
                let bucket_id = batch.bucket.id;
                let (wait, load) = futures::try_join!(
                    client.prepare_cached(&sql.await_writers),
                    client.prepare_cached(&sql.load)
                )?;
                // Sent together: the load runs once the writers are done.
                let params: [&(dyn ToSql + Sync); 2] = [&bucket_id, &keys];
                let (_, rows) = futures::try_join!(
                    await_writers(client, &wait, bucket_id, &fresh),
                    client.query(&load, &params)
                )?;
                batch.slots.clear();
                lapsed = batch.absorb(&rows, keys);
            }
        }
        batch.busy = false;
        Ok(batch)
    }

    /// Takes loaded rows as the state of `keys`; answers the keys whose row had expired by the
    /// load's clock (they are absent).
    fn absorb(&mut self, rows: &[tokio_postgres::Row], keys: &[String]) -> Vec<String> {
        let mut lapsed = Vec::new();
        for row in rows {
            self.now = row.get("now");
            let Some(key) = row.get::<_, Option<String>>("key") else {
                continue;
            };
            let inline: Option<&[u8]> = row.get("inline");
            let typed = row.get::<_, Option<i8>>("type").and_then(KeyType::from_code);
            let expires_at: Option<SystemTime> = row.get("expires_at");
            let expired = expires_at.is_some_and(|at| at <= self.now);
            if expired {
                lapsed.push(key.clone());
            }
            if expired && typed.is_none() {
                // An expired string: absent; a write over it replaces the row by its key.
                continue;
            }
            if expired {
                // An expired typed row: the key is absent, but the row is there to replace.
                self.slots
                    .entry(key)
                    .or_insert(Slot {
                        current: None,
                        existed: false,
                        change: Change::None,
                        typed_row: false,
                        string: false,
                    })
                    .typed_row = true;
                continue;
            }
            let sealed = row.get::<_, Option<bool>>("sealed").unwrap_or(false);
            let value = match (typed, inline) {
                (Some(typed), _) => KvValue::Typed(typed),
                (None, _) if sealed => KvValue::Sealed {
                    size: row.get::<_, i64>("size") as u64,
                },
                (None, Some(inline)) => KvValue::Bytes(Bytes::copy_from_slice(inline)),
                (None, None) => KvValue::Chunked {
                    body_id: row.get("body_id"),
                    size: row.get::<_, i64>("size") as u64,
                    multipart: row.get("multipart"),
                },
            };
            let entry = KvEntry {
                value,
                expires_at,
                version: Some((row.get("etag"), row.get("last_modified"))),
            };
            let slot = Slot {
                current: Some(entry),
                existed: true,
                change: Change::None,
                typed_row: typed.is_some(),
                string: typed.is_none(),
            };
            // A name that is both (an S3 write over a typed key) is the string.
            match self.slots.entry(key) {
                Entry::Occupied(mut both) if typed.is_some() && both.get().current.is_some() => {
                    both.get_mut().typed_row = true
                }
                Entry::Occupied(mut both) => {
                    *both.get_mut() = Slot {
                        typed_row: true,
                        ..slot
                    }
                }
                Entry::Vacant(vacant) => {
                    vacant.insert(slot);
                }
            }
        }
        for key in keys {
            self.slots.entry(key.clone()).or_insert(Slot {
                current: None,
                existed: false,
                change: Change::None,
                typed_row: false,
                string: false,
            });
        }
        lapsed
    }

    /// Loads `keys` again (inside the batch's transaction, under its locks): after typed
    /// commands changed them in the database.
    pub async fn reload(&mut self, keys: &[String]) -> StoreResult<()> {
        if self.client.is_none() {
            self.client = Some(self.pool.get().await?);
        }
        let client = self.client.as_ref().expect("taken above");
        let sql = &self.bucket.sql.kv;
        let load = client.prepare_cached(&sql.load).await?;
        let rows = client.query(&load, &[&self.bucket.id, &keys]).await?;
        for key in keys {
            self.slots.remove(key);
        }
        // The batch keeps the clock of its first load: it found its other keys alive by it, and
        // `set_expiry` changes only rows live by it. A later clock would pass over a key that
        // expired since, whose EXPIRE or PERSIST had answered 1 (found under load by
        // resp_key_histories_are_linearizable: PERSIST 1, then TYPE none).
        let now = self.now;
        self.absorb(&rows, keys);
        self.now = now;
        Ok(())
    }

    /// Locks further keys of a write batch, after those it began with, without waiting: false
    /// when another transaction holds one of them. Taking them in the sorted order is no longer
    /// possible, and waiting could deadlock; the caller starts over instead, holding the whole
    /// keyspace ([`Store::kv_write_all`]).
    pub async fn try_lock(&mut self, keys: &[String]) -> StoreResult<bool> {
        if self.client.is_none() {
            self.client = Some(self.pool.get().await?);
        }
        let client = self.client.as_ref().expect("taken above");
        let statement = client.prepare_cached(&self.bucket.sql.kv.try_lock).await?;
        let lock_id = self.bucket.id as i32;
        let row = client.query_one(&statement, &[&lock_id, &keys]).await?;
        Ok(row.get::<_, Option<bool>>("locked").unwrap_or(true))
    }

    /// The type of a typed key; `None` for a string or a missing key.
    pub fn key_type(&self, key: &str) -> Option<KeyType> {
        match self.get(key)?.value {
            KvValue::Typed(typed) => Some(typed),
            _ => None,
        }
    }

    /// Runs typed calls, sending first the BEGIN and locks a batch that only overwrites still
    /// owes; `commit` ends the batch with them (one round trip in all).
    pub(super) async fn typed_calls(&mut self, calls: &[&TypedCall], commit: bool) -> StoreResult<Vec<TypedRow>> {
        self.busy = true;
        let rows = self.send_typed_calls(calls, commit).await;
        self.busy = false;
        rows
    }

    async fn send_typed_calls(&mut self, calls: &[&TypedCall], commit: bool) -> StoreResult<Vec<TypedRow>> {
        if self.client.is_none() {
            self.client = Some(self.pool.get().await?);
        }
        // The calls may create the bucket's first typed key: string statements stop assuming
        // there is none (the batch's own later writes included).
        self.bucket.sql.kv.typed.store(true, Ordering::Relaxed);
        let client = self.client.as_ref().expect("taken above");
        if !self.in_transaction {
            // A read batch's calls read as the store's typed reads do.
            return super::types::read_calls(client, &self.bucket, calls).await;
        }
        let id = self.bucket.id;
        let begin = match self.deferred_locks.take() {
            Some(locked) => Some((
                BeginLocked::prepare(client, &self.bucket.sql.kv, locked.len()).await?,
                locked,
            )),
            None => None,
        };
        // A write batch first deletes the expired strings among the keys, which a typed key
        // made there would leave behind (the SQL functions delete expired typed rows, but only
        // the namespace's statements reach its objects).
        let expired_strings = match self.in_transaction {
            true => {
                let keys: Vec<&str> = calls.iter().flat_map(|call| &call.keys).map(String::as_str).collect();
                Some((
                    client
                        .prepare_cached(&self.bucket.sql.kv.delete_expired_strings)
                        .await?,
                    keys,
                ))
            }
            false => None,
        };
        let commit = commit && self.in_transaction;
        // Sent in this order on the first poll, so in one round trip with the calls.
        let before = async {
            let begin = async {
                match &begin {
                    Some((statements, locked)) => statements.send(client, id, locked).await,
                    None => Ok(()),
                }
            };
            let expired = async {
                match &expired_strings {
                    Some((statement, keys)) => {
                        let params: [&(dyn ToSql + Sync); 2] = [&id, keys];
                        client.execute(statement, &params).await.map(drop)
                    }
                    None => Ok(()),
                }
            };
            futures::try_join!(begin, expired).map(drop)
        };
        let after = async {
            match commit {
                true => client.batch_execute("COMMIT").await,
                false => Ok(()),
            }
        };
        let (rows, ()) = super::types::send_calls(client, &self.bucket, calls, before, after).await?;
        if commit {
            self.in_transaction = false;
        }
        Ok(rows)
    }

    /// Whether the keyspace's bucket keeps S3 versions (as this gateway's catalog has it).
    pub fn versioned(&self) -> bool {
        self.bucket.versioning.is_some()
    }

    /// The metadata of the versions this batch writes: the bucket's default object lock
    /// retention, counted from now, as an S3 PUT's version gets it; else none.
    fn new_version_meta(&self) -> StoreResult<tokio_postgres::types::Json<super::ObjectMeta>> {
        let mut meta = super::ObjectMeta::default();
        self.bucket.lock_new_version(&mut meta)?;
        Ok(tokio_postgres::types::Json(meta))
    }

    /// The key's entry, if it exists (and has not expired).
    pub fn get(&self, key: &str) -> Option<&KvEntry> {
        self.slots.get(key).and_then(|slot| slot.current.as_ref())
    }

    /// The key's value in full, reading a chunked body when it is one.
    pub async fn value(&mut self, key: &str) -> StoreResult<Option<Bytes>> {
        let Some(entry) = self.get(key) else {
            return Ok(None);
        };
        let (body_id, size, multipart) = match &entry.value {
            KvValue::Bytes(bytes) => return Ok(Some(bytes.clone())),
            KvValue::Sealed { .. } => {
                return Err(StoreError::NotAKeyspace(format!(
                    "key '{key}' holds an object stored with S3 server-side encryption: read it over S3"
                )));
            }
            // Not a string: MGET's nil (every other string command checked the type).
            KvValue::Typed(_) => return Ok(None),
            KvValue::Chunked {
                body_id,
                size,
                multipart,
            } => (*body_id, *size, *multipart),
        };
        if self.client.is_none() {
            self.client = Some(self.pool.get().await?);
        }
        let client = self.client.as_ref().expect("taken above");
        let (segments, rows) =
            super::objects::body_rows(client, &self.bucket.sql, body_id, size, multipart, (0, size)).await?;
        let mut data = Vec::with_capacity(size as usize);
        let mut stream = ChunkStream::new(None, rows, segments);
        while let Some(piece) = futures::StreamExt::next(&mut stream).await {
            data.extend_from_slice(&piece?);
        }
        let data = Bytes::from(data);
        if let Some(slot) = self.slots.get_mut(key)
            && let Some(entry) = slot.current.as_mut()
        {
            entry.value = KvValue::Bytes(data.clone());
        }
        Ok(Some(data))
    }

    /// MEMORY USAGE of a hash, set, sorted set, list or stream: the stored size of its rows
    /// (`pg_column_size` of each, its bucket and key columns included), from `samples` of them
    /// times their count, or all of them with `samples` 0; one statement. The count reads
    /// the key's index entries (O(n)); the sizes read `samples` rows.
    pub async fn typed_size(&mut self, key: &str, kind: KeyType, samples: i64) -> StoreResult<u64> {
        let table = match kind {
            KeyType::Hash => "resp_hash",
            KeyType::Set => "resp_set",
            KeyType::Zset => "resp_zset",
            KeyType::List => "resp_list",
            KeyType::Stream => "resp_stream_entry",
        };
        let statement = format!(
            "WITH sampled AS (SELECT pg_column_size(t.*) AS size FROM pgvs3.{table} t
                               WHERE t.bucket_id = $1 AND t.key = $2 LIMIT $3)
             SELECT coalesce(round(avg(size) * (SELECT count(*) FROM pgvs3.{table}
                                                 WHERE bucket_id = $1 AND key = $2)), 0)::bigint AS size
               FROM sampled"
        );
        if self.client.is_none() {
            self.client = Some(self.pool.get().await?);
        }
        let client = self.client.as_ref().expect("taken above");
        // LIMIT NULL: every row.
        let limit = (samples > 0).then_some(samples);
        self.busy = true;
        let row = client.query_one(&statement, &[&self.bucket.id, &key, &limit]).await;
        self.busy = false;
        Ok(u64::try_from(row?.get::<_, i64>("size")).unwrap_or(0))
    }

    fn slot(&mut self, key: &str) -> &mut Slot {
        self.slots.entry(key.to_owned()).or_insert(Slot {
            current: None,
            existed: false,
            change: Change::None,
            typed_row: false,
            string: false,
        })
    }

    /// Sets the key's value and expiry.
    pub fn set(&mut self, key: &str, value: Bytes, expires_at: Option<SystemTime>) {
        let slot = self.slot(key);
        slot.current = Some(KvEntry {
            value: KvValue::Bytes(value),
            expires_at,
            version: None,
        });
        slot.change = Change::Write;
    }

    /// Changes the expiry of an existing key; false when the key does not exist.
    pub fn set_expiry(&mut self, key: &str, expires_at: Option<SystemTime>) -> bool {
        let slot = self.slot(key);
        let Some(entry) = slot.current.as_mut() else {
            return false;
        };
        entry.expires_at = expires_at;
        if slot.change == Change::None {
            slot.change = Change::Expiry;
        }
        true
    }

    /// Deletes the key; true when it existed.
    pub fn delete(&mut self, key: &str) -> bool {
        let slot = self.slot(key);
        let existed = slot.current.take().is_some();
        if existed || slot.change != Change::None {
            slot.change = Change::Delete;
        }
        existed
    }

    /// Ends a write batch without writing anything.
    pub async fn rollback(mut self) -> StoreResult<()> {
        if self.deferred_locks.take().is_some() {
            // Nothing was sent.
            self.in_transaction = false;
        }
        if self.in_transaction {
            let client = self.client.as_ref().expect("client until commit");
            client.batch_execute("ROLLBACK").await?;
            self.in_transaction = false;
        }
        Ok(())
    }

    /// The name of the batch's bucket.
    pub fn bucket_name(&self) -> &str {
        &self.bucket.name
    }

    /// Has `pgvs3.resp_notify(channel, message, inline_limit)` (functions/resp_pubsub.sql) go
    /// out with the commit, so that its NOTIFY reaches the gateways only if the batch commits,
    /// in commit order. One per batch: PostgreSQL folds equal payloads of one transaction.
    pub fn notify_at_commit(&mut self, channel: Vec<u8>, message: Vec<u8>, inline_limit: i32) {
        self.notification = Some((channel, message, inline_limit));
    }

    /// Writes the changes and commits in one round trip (plus one per chunked value).
    pub async fn commit(mut self) -> StoreResult<()> {
        if !self.in_transaction {
            return Ok(());
        }
        self.write_changes(true).await
    }

    /// Writes what the batch changed so far, without committing (before typed commands, which
    /// run in the database and must see it).
    pub async fn write_pending(&mut self) -> StoreResult<()> {
        if !self.in_transaction || self.slots.values().all(|slot| slot.change == Change::None) {
            return Ok(());
        }
        self.write_changes(false).await?;
        for slot in self.slots.values_mut() {
            slot.existed = slot.current.is_some();
            slot.string = slot
                .current
                .as_ref()
                .is_some_and(|entry| !matches!(entry.value, KvValue::Typed(_)));
            slot.change = Change::None;
        }
        Ok(())
    }

    async fn write_changes(&mut self, commit: bool) -> StoreResult<()> {
        self.busy = true;
        let written = self.write_changes_now(commit).await;
        self.busy = false;
        written
    }

    async fn write_changes_now(&mut self, commit: bool) -> StoreResult<()> {
        match self.send_changes(commit).await {
            Err(StoreError::Database(err)) if err.as_db_error().and_then(|db| db.hint()) == Some("RespTyped") => {
                // A blind overwrite met a bucket that has typed keys now: nothing of the
                // transaction stays. Written again from BEGIN, the typed way.
                self.bucket.sql.kv.typed.store(true, Ordering::Relaxed);
                let client = self.client.as_ref().expect("client until commit");
                client.batch_execute("ROLLBACK").await?;
                let result = self.send_changes(commit).await;
                self.deferred_locks = None;
                result
            }
            result => {
                // Sent (or failed): a rollback must not take it for a batch that sent nothing.
                self.deferred_locks = None;
                result
            }
        }
    }

    async fn send_changes(&mut self, commit: bool) -> StoreResult<()> {
        let mut keys: Vec<&String> = self
            .slots
            .iter()
            .filter(|(_, slot)| slot.change != Change::None)
            .map(|(key, _)| key)
            .collect();
        keys.sort();
        let mut deleted = Vec::new();
        let mut marked = Vec::new();
        let mut expiring: (Vec<&str>, Vec<Option<SystemTime>>) = Default::default();
        let mut written = WrittenValues::default();
        let client = self.client.as_ref().expect("client until commit");
        let sql = &self.bucket.sql;
        let id = &self.bucket.id;
        // Kept until the writes are sent: a batch whose blind overwrite met typed keys is sent
        // again whole (see write_changes).
        let mut begin = match self.deferred_locks.as_ref() {
            Some(locked) => Some((BeginLocked::prepare(client, &sql.kv, locked.len()).await?, locked)),
            None => None,
        };
        for key in keys {
            let slot = &self.slots[key];
            match (slot.change, &slot.current) {
                (Change::Delete, _) | (_, None) if slot.existed => {
                    deleted.push(key.as_str());
                    if slot.string {
                        marked.push(key.as_str());
                    }
                }
                (Change::Delete, _) | (_, None) => {}
                (Change::Expiry, Some(entry)) => {
                    expiring.0.push(key);
                    expiring.1.push(entry.expires_at);
                }
                (_, Some(entry)) => {
                    let KvValue::Bytes(value) = &entry.value else {
                        unreachable!("a written value is always in memory");
                    };
                    let body_id = if value.len() > INLINE_LIMIT {
                        // COPY cannot queue behind statements; the transaction must be open.
                        if let Some((statements, locked)) = begin.take() {
                            statements.send(client, *id, locked).await?;
                        }
                        Some(copy_body(client, &self.bucket, value).await?)
                    } else {
                        None
                    };
                    written.push(key, value, body_id, entry.expires_at);
                }
            }
        }
        let upsert = if self.blind {
            // Only a batch that sends its BEGIN here can be written again whole.
            if begin.is_some() && !sql.kv.typed.load(Ordering::Relaxed) {
                &sql.kv.upsert_strings
            } else {
                &sql.kv.upsert
            }
        } else if written.keys.iter().any(|key| self.slots[*key].typed_row) {
            &sql.kv.upsert
        } else {
            &sql.kv.upsert_plain
        };
        let (delete, mark_deleted, set_expiry, upsert) = futures::try_join!(
            client.prepare_cached(&sql.kv.delete),
            client.prepare_cached(&sql.kv.mark_deleted),
            client.prepare_cached(&sql.kv.set_expiry),
            client.prepare_cached(upsert),
        )?;
        // Prepared ahead: a statement prepared as it goes would let COMMIT overtake it.
        let notify = match self.notification.as_ref().filter(|_| commit) {
            Some(notification) => Some((client.prepare_cached(NOTIFY).await?, notification)),
            None => None,
        };
        let delete_params: [&(dyn ToSql + Sync); 2] = [id, &deleted];
        let mark_params: [&(dyn ToSql + Sync); 2] = [id, &marked];
        let meta = self.new_version_meta()?;
        let expiry_params: [&(dyn ToSql + Sync); 4] = [id, &expiring.0, &expiring.1, &self.now];
        let upsert_params: [&(dyn ToSql + Sync); 8] = [
            id,
            &written.keys,
            &written.sizes,
            &written.etags,
            &written.inline,
            &written.body_ids,
            &written.expires_at,
            &meta,
        ];
        // COMMIT goes out with the writes. Should one of them fail, the server turns it into a
        // rollback and the error comes back from the failed statement.
        futures::try_join!(
            async {
                match &begin {
                    Some((statements, locked)) => statements.send(client, *id, locked).await,
                    None => Ok(()),
                }
            },
            execute_unless_empty(client, &delete, &delete_params, deleted.len()),
            execute_unless_empty(client, &mark_deleted, &mark_params, marked.len()),
            execute_unless_empty(client, &set_expiry, &expiry_params, expiring.0.len()),
            execute_unless_empty(client, &upsert, &upsert_params, written.keys.len()),
            async {
                match &notify {
                    Some((statement, (channel, message, limit))) => {
                        client.execute(statement, &[channel, message, limit]).await.map(drop)
                    }
                    None => Ok(()),
                }
            },
            async {
                match commit {
                    true => client.batch_execute("COMMIT").await,
                    false => Ok(()),
                }
            },
        )?;
        if commit {
            self.in_transaction = false;
        }
        Ok(())
    }
}

/// A batch that ends without commit (an error, a dropped connection) must not hand a
/// connection inside an open transaction back to the pool: the connection is closed instead,
/// which rolls the transaction back. One dropped while its statement runs has it cancelled.
impl Drop for KvBatch {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            if self.busy {
                abandon(client, self.cancel.as_ref());
            } else if self.in_transaction {
                drop(deadpool_postgres::Object::take(client));
            }
        }
    }
}

/// The keys a read found past their expiry and waited for the writers of.
///
/// A write holds its keys' locks from the load that judges their expiry to its commit, and
/// reads take no lock. A writer that loaded a key alive before it expired (an EXPIRE, PERSIST,
/// SET KEEPTTL, HSET, ...) is ordered before the expiry, so before any read that finds the key
/// expired: such a read must not answer "absent" while that write may still commit, which would
/// bring the key back after the read. So a read that meets a key past its expiry (not yet
/// removed by the reaper) waits for the key's writers ([`await_writers`]) and reads again; a
/// writer that takes the key's lock after that loads it past its expiry and finds it absent
/// too. A key met past its expiry again after its wait needs no second one; one that expired
/// between the two reads does: a read repeats until it meets no key it has not waited for,
/// at most once per key.
#[derive(Debug, Default)]
pub(super) struct Waited(Vec<String>);

impl Waited {
    /// Of `lapsed` (keys a read found past their expiry), those it has not waited for yet, now
    /// counted as waited for.
    pub(super) fn fresh(&mut self, lapsed: Vec<String>) -> Vec<String> {
        let mut fresh = Vec::new();
        for key in lapsed {
            if !self.0.contains(&key) && !fresh.contains(&key) {
                fresh.push(key);
            }
        }
        self.0.extend(fresh.iter().cloned());
        fresh
    }
}

/// Waits for the writers of `keys` (`statement` is [`KvSql::await_writers`], prepared), sent
/// on the first poll so that statements sent after it run once the writers are done.
pub(super) async fn await_writers(
    client: &deadpool_postgres::Object,
    statement: &tokio_postgres::Statement,
    bucket_id: i64,
    keys: &[String],
) -> Result<(), tokio_postgres::Error> {
    let lock_id = bucket_id as i32;
    client
        .execute(statement, &[&bucket_id, &lock_id, &keys])
        .await
        .map(drop)
}

/// A connection with a statement under way outside a batch: dropped before
/// [`UnderWay::done`] (its caller went away), the statement is abandoned.
pub(super) struct UnderWay<'a> {
    client: Option<deadpool_postgres::Object>,
    cancel: Option<&'a Connections>,
}

impl<'a> UnderWay<'a> {
    pub(super) fn new(client: deadpool_postgres::Object, cancel: Option<&'a Connections>) -> UnderWay<'a> {
        UnderWay {
            client: Some(client),
            cancel,
        }
    }

    pub(super) fn client(&self) -> &deadpool_postgres::Object {
        self.client.as_ref().expect("until done")
    }

    /// The statement ended: the connection goes back to the pool.
    pub(super) fn done(mut self) {
        self.client = None;
    }
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            abandon(client, self.cancel);
        }
    }
}

/// The connection of a statement whose caller went away (its future was dropped: the RESP
/// client disconnected, or its command ran past its time limit). PostgreSQL would run the
/// statement to its end, holding a backend, its locks and maybe minutes of work: the server is
/// asked to cancel it, and the connection is closed rather than handed to anyone else (a
/// cancel arriving late would hit the next statement).
fn abandon(client: deadpool_postgres::Object, cancel: Option<&Connections>) {
    let client = deadpool_postgres::Object::take(client);
    if let (Some(connections), Ok(runtime)) = (cancel, tokio::runtime::Handle::try_current()) {
        let token = client.cancel_token();
        let tls = connections.tls();
        runtime.spawn(async move {
            if let Err(err) = token.cancel_query(tls).await {
                tracing::warn!(error = %err, "cancelling an abandoned statement");
            }
        });
    }
}

/// The statements that begin a write batch: BEGIN, its keyspace lock, and (for a batch of few
/// keys) its key locks. Prepared before anything is sent, so that sending them together with the
/// statements queued behind them is one round trip.
struct BeginLocked {
    keyspace: tokio_postgres::Statement,
    keys: Option<tokio_postgres::Statement>,
}

impl BeginLocked {
    async fn prepare(
        client: &deadpool_postgres::Object,
        sql: &KvSql,
        key_count: usize,
    ) -> Result<BeginLocked, tokio_postgres::Error> {
        if key_count <= FINE_LOCK_LIMIT {
            let (keyspace, keys) = futures::try_join!(
                client.prepare_cached(&sql.lock_keyspace_shared),
                client.prepare_cached(&sql.lock)
            )?;
            Ok(BeginLocked {
                keyspace,
                keys: Some(keys),
            })
        } else {
            Ok(BeginLocked {
                keyspace: client.prepare_cached(&sql.lock_keyspace).await?,
                keys: None,
            })
        }
    }

    /// Sends BEGIN and the locks. Statements the caller polls after this one's first poll queue
    /// behind them and run inside the transaction, after the locks are held.
    async fn send(
        &self,
        client: &deadpool_postgres::Object,
        bucket_id: i64,
        keys: &[String],
    ) -> Result<(), tokio_postgres::Error> {
        let keyspace_params: [&(dyn ToSql + Sync); 1] = [&bucket_id];
        match &self.keys {
            Some(lock) => {
                let lock_id = bucket_id as i32;
                let lock_params: [&(dyn ToSql + Sync); 2] = [&lock_id, &keys];
                futures::try_join!(
                    client.batch_execute("BEGIN"),
                    client.query_one(&self.keyspace, &keyspace_params),
                    client.query_one(lock, &lock_params),
                )?;
            }
            None => {
                futures::try_join!(
                    client.batch_execute("BEGIN"),
                    client.query_one(&self.keyspace, &keyspace_params)
                )?;
            }
        }
        Ok(())
    }
}

#[derive(Default)]
struct WrittenValues<'a> {
    keys: Vec<&'a str>,
    sizes: Vec<i64>,
    etags: Vec<String>,
    inline: Vec<Option<&'a [u8]>>,
    body_ids: Vec<Option<i64>>,
    expires_at: Vec<Option<SystemTime>>,
}

impl<'a> WrittenValues<'a> {
    fn push(&mut self, key: &'a str, value: &'a Bytes, body_id: Option<i64>, expires_at: Option<SystemTime>) {
        self.keys.push(key);
        self.sizes.push(value.len() as i64);
        // The ETag S3 reports for the same bytes.
        self.etags.push(hex::encode(Md5::digest(value)));
        self.inline.push(body_id.is_none().then_some(&value[..]));
        self.body_ids.push(body_id);
        self.expires_at.push(expires_at);
    }
}

/// Runs a statement over arrays of `rows` elements, skipping it when there are none. Several
/// of these joined go out together on the connection (one round trip).
async fn execute_unless_empty(
    client: &deadpool_postgres::Object,
    statement: &tokio_postgres::Statement,
    params: &[&(dyn ToSql + Sync)],
    rows: usize,
) -> Result<u64, tokio_postgres::Error> {
    if rows == 0 {
        return Ok(0);
    }
    client.execute(statement, params).await
}

/// Stores a large value as a new chunked body, inside the batch's transaction.
async fn copy_body(client: &deadpool_postgres::Object, bucket: &BucketInfo, value: &[u8]) -> StoreResult<i64> {
    let body_id: i64 = client.query_one(&bucket.sql.next_body_id, &[]).await?.get("body_id");
    let sink = client.copy_in(&bucket.sql.copy_chunks).await?;
    let writer = BinaryCopyInWriter::new(sink, &[Type::INT8, Type::INT4, Type::BYTEA]);
    futures::pin_mut!(writer);
    let mut chunker = Chunker::new(true);
    chunker.push(value);
    let mut seq: i32 = 0;
    while let Some(chunk) = chunker.next_full().or_else(|| chunker.finish()) {
        writer.as_mut().write(&[&body_id, &seq, &&chunk[..]]).await?;
        seq += 1;
    }
    writer.finish().await?;
    Ok(body_id)
}

/// A batch's keyspace notifications, sent before its COMMIT (see [`KvBatch::notify_at_commit`]).
const NOTIFY: &str = "SELECT pgvs3.resp_notify($1, $2, $3)";

/// A library of Redis Functions (FUNCTION LOAD), kept in `pgvs3.resp_function_libraries`: one
/// set of libraries for the whole fleet and every database, as Redis keeps one per server.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionLibrary {
    pub name: String,
    /// The library's source, its `#!lua name=...` line included.
    pub code: String,
    /// What it registered, in order: name, flags, description.
    pub functions: Vec<RegisteredFunction>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RegisteredFunction {
    pub name: String,
    pub flags: Vec<String>,
    pub description: Option<String>,
}

/// Why libraries were not stored.
#[derive(Debug, Clone, PartialEq)]
pub enum LibraryRefusal {
    /// A library of this name exists (and the policy is not to replace it).
    Exists(String),
    /// Another library has a function of this name.
    FunctionExists(String),
    /// The fleet would hold more libraries than it may.
    TooMany,
}

/// What storing libraries does with those already there (FUNCTION LOAD [REPLACE], FUNCTION
/// RESTORE's APPEND, REPLACE and FLUSH).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LibraryPolicy {
    /// A library whose name is taken is refused.
    Append,
    /// A library whose name is taken replaces the one there.
    Replace,
    /// Every library there goes first.
    Flush,
}

impl super::Catalog {
    /// Every library, by name.
    pub async fn function_libraries(&self) -> StoreResult<Vec<FunctionLibrary>> {
        let client = self.pool().get().await?;
        let rows = client
            .query(
                "SELECT name, code, functions, flags, descriptions FROM pgvs3.resp_function_libraries ORDER BY name",
                &[],
            )
            .await?;
        Ok(rows.iter().map(library_row).collect())
    }

    /// The library that holds function `function`.
    pub async fn function_library_of(&self, function: &str) -> StoreResult<Option<FunctionLibrary>> {
        let client = self.pool().get().await?;
        let row = client
            .query_opt(
                "SELECT name, code, functions, flags, descriptions FROM pgvs3.resp_function_libraries
                  WHERE $1 = ANY (functions)",
                &[&function],
            )
            .await?;
        Ok(row.as_ref().map(library_row))
    }

    /// Stores `libraries` as `policy` says, all or none, so that the fleet holds at most
    /// `max_libraries`: under a lock, so that two gateways storing at once cannot both pass the
    /// checks. As Redis checks them: library names first, then function names.
    pub async fn put_function_libraries(
        &self,
        libraries: &[FunctionLibrary],
        policy: LibraryPolicy,
        max_libraries: i64,
    ) -> StoreResult<Result<(), LibraryRefusal>> {
        let mut client = self.pool().get().await?;
        let tx = client.transaction().await?;
        tx.execute("LOCK TABLE pgvs3.resp_function_libraries IN EXCLUSIVE MODE", &[])
            .await?;
        if policy == LibraryPolicy::Flush {
            tx.execute("DELETE FROM pgvs3.resp_function_libraries", &[]).await?;
        }
        let names: Vec<&str> = libraries.iter().map(|library| library.name.as_str()).collect();
        if policy == LibraryPolicy::Append {
            let existing = tx
                .query_opt(
                    "SELECT name FROM pgvs3.resp_function_libraries WHERE name = ANY ($1) ORDER BY name LIMIT 1",
                    &[&names],
                )
                .await?;
            if let Some(existing) = existing {
                return Ok(Err(LibraryRefusal::Exists(existing.get("name"))));
            }
        }
        let functions: Vec<&str> = libraries
            .iter()
            .flat_map(|library| library.functions.iter().map(|function| function.name.as_str()))
            .collect();
        let taken = tx
            .query_opt(
                "SELECT f AS function FROM pgvs3.resp_function_libraries, unnest(functions) f
                  WHERE name <> ALL ($1) AND f = ANY ($2) LIMIT 1",
                &[&names, &functions],
            )
            .await?;
        if let Some(taken) = taken {
            return Ok(Err(LibraryRefusal::FunctionExists(taken.get("function"))));
        }
        let others: i64 = tx
            .query_one(
                "SELECT count(*) AS libraries FROM pgvs3.resp_function_libraries WHERE name <> ALL ($1)",
                &[&names],
            )
            .await?
            .get("libraries");
        if others + libraries.len() as i64 > max_libraries {
            return Ok(Err(LibraryRefusal::TooMany));
        }
        for library in libraries {
            let functions: Vec<&str> = library
                .functions
                .iter()
                .map(|function| function.name.as_str())
                .collect();
            let flags: Vec<String> = library
                .functions
                .iter()
                .map(|function| function.flags.join(" "))
                .collect();
            let descriptions: Vec<Option<&str>> = library
                .functions
                .iter()
                .map(|function| function.description.as_deref())
                .collect();
            tx.execute(
                "INSERT INTO pgvs3.resp_function_libraries (name, code, functions, flags, descriptions)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (name) DO UPDATE SET code = excluded.code, functions = excluded.functions,
                     flags = excluded.flags, descriptions = excluded.descriptions, loaded_at = now()",
                &[&library.name, &library.code, &functions, &flags, &descriptions],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// Deletes library `name`; false when there is none.
    pub async fn delete_function_library(&self, name: &str) -> StoreResult<bool> {
        let client = self.pool().get().await?;
        let deleted = client
            .execute("DELETE FROM pgvs3.resp_function_libraries WHERE name = $1", &[&name])
            .await?;
        Ok(deleted > 0)
    }

    /// FUNCTION FLUSH: every library goes.
    pub async fn flush_function_libraries(&self) -> StoreResult<()> {
        let client = self.pool().get().await?;
        client.execute("DELETE FROM pgvs3.resp_function_libraries", &[]).await?;
        Ok(())
    }
}

impl super::Catalog {
    /// The keyspace notifications setting of `bucket`'s keyspace (`None`: never set).
    pub async fn keyspace_events(&self, bucket: &str) -> StoreResult<Option<String>> {
        let client = self.pool().get().await?;
        let row = client
            .query_opt(
                "SELECT flags FROM pgvs3.resp_keyspace_events WHERE bucket = $1",
                &[&bucket],
            )
            .await?;
        Ok(row.map(|row| row.get("flags")))
    }

    /// Whether a live gateway has CLIENT TRACKING clients for `bucket`'s keyspace
    /// (`pgvs3.resp_tracked`, functions/resp_pubsub.sql).
    pub async fn keyspace_tracked(&self, bucket: &str) -> StoreResult<bool> {
        let client = self.pool().get().await?;
        let row = client
            .query_one("SELECT pgvs3.resp_tracked($1) AS tracked", &[&bucket])
            .await?;
        Ok(row.get("tracked"))
    }

    /// The keys of `buckets` the reaper deleted at their expiry (INFO's `expired_keys`).
    pub async fn expired_keys(&self, buckets: &[&str]) -> StoreResult<i64> {
        let client = self.pool().get().await?;
        let row = client
            .query_one(
                "SELECT coalesce(sum(e.keys), 0)::bigint AS keys FROM pgvs3.resp_expired e
                   JOIN pgvs3.buckets b ON b.id = e.bucket_id WHERE b.name = ANY ($1)",
                &[&buckets],
            )
            .await?;
        Ok(row.get("keys"))
    }

    /// Sets it, and tells every gateway with `pgvs3.resp_notify(channel, flags, inline_limit)`
    /// in the same transaction.
    pub async fn set_keyspace_events(
        &self,
        bucket: &str,
        flags: &str,
        channel: &[u8],
        inline_limit: i32,
    ) -> StoreResult<()> {
        let mut client = self.pool().get().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "INSERT INTO pgvs3.resp_keyspace_events (bucket, flags) VALUES ($1, $2)
             ON CONFLICT (bucket) DO UPDATE SET flags = excluded.flags",
            &[&bucket, &flags],
        )
        .await?;
        tx.execute(NOTIFY, &[&channel, &flags.as_bytes(), &inline_limit])
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

fn library_row(row: &tokio_postgres::Row) -> FunctionLibrary {
    let names: Vec<String> = row.get("functions");
    let flags: Vec<String> = row.get("flags");
    let descriptions: Vec<Option<String>> = row.get("descriptions");
    FunctionLibrary {
        name: row.get("name"),
        code: row.get("code"),
        functions: names
            .into_iter()
            .enumerate()
            .map(|(i, name)| RegisteredFunction {
                name,
                flags: flags
                    .get(i)
                    .map(|flags| flags.split_whitespace().map(str::to_owned).collect())
                    .unwrap_or_default(),
                description: descriptions.get(i).cloned().flatten(),
            })
            .collect(),
    }
}
