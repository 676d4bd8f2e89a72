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
//!
//! Here: the batch and its keys' state in memory. `kv/sql.rs` has the statements, `kv/load.rs` a
//! batch's load, `kv/write.rs` its writes and commit, `kv/abandon.rs` what becomes of a statement
//! whose caller went away, `kv/commit_sent.rs` whether a batch's COMMIT went out (after which
//! dropping it no longer rolls it back), `kv/catalog.rs` the fleet-wide RESP tables (Functions libraries,
//! keyspace-event settings).

mod abandon;
mod catalog;
mod commit_sent;
mod load;
mod sql;
mod watch;
mod wide;
mod write;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;

use super::chunks::ChunkStream;
use super::objects::check_key;
use super::types::KeyType;
use super::{BucketInfo, Store, StoreError, StoreResult};
use crate::pg::checkout::checkout;
use crate::pg::connections::Connections;
pub(super) use abandon::UnderWay;
use abandon::abandon;
pub use catalog::{EncodingParameter, FunctionLibrary, LibraryPolicy, LibraryRefusal, RegisteredFunction};
pub use commit_sent::CommitSent;
pub(super) use load::{Waited, await_writers};
pub(super) use sql::KvSql;
pub use watch::Watches;

/// Most keys a write batch locks one by one.
pub const FINE_LOCK_LIMIT: usize = 64;

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
    /// How a string was last written (a typed key's is [`StringForm::Whole`]).
    pub form: StringForm,
}

/// A string's value held inline, with its expiry and form: as a batch wrote it
/// ([`KvBatch::changed_strings`]), or took it without a load ([`KvBatch::assume_string`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StringValue {
    pub value: Bytes,
    pub expires_at: Option<SystemTime>,
    pub form: StringForm,
}

/// How a string was last written, which decides the encoding Redis would hold it in (OBJECT
/// ENCODING). Only the forms other than `Whole` are stored: as `re` in the row's `meta`, which
/// S3 does not read and a write whole (SET, or an S3 PUT) replaces. RENAME and COPY keep it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StringForm {
    /// Written whole (SET and kin, INCR, RESTORE, RENAME of a whole one): Redis's
    /// `tryObjectEncoding` picks `int`, `embstr` or `raw` by the bytes.
    #[default]
    Whole,
    /// Stored as given, never as an integer (INCRBYFLOAT's `createStringObject`): `embstr` up
    /// to 44 bytes, else `raw`.
    AsIs,
    /// Changed in place (APPEND to an existing string, SETRANGE, SETBIT, BITFIELD, PFADD,
    /// PFMERGE) or built as Redis builds such a string (BITOP's destination): `raw`, whatever
    /// its bytes, until written whole again.
    Raw,
}

impl StringForm {
    /// The `re` mark in `meta`; none for a string written whole.
    pub(in crate::store) fn mark(self) -> Option<&'static str> {
        match self {
            StringForm::Whole => None,
            StringForm::AsIs => Some("as-is"),
            StringForm::Raw => Some("raw"),
        }
    }

    fn from_mark(mark: Option<&str>) -> StringForm {
        match mark {
            Some("as-is") => StringForm::AsIs,
            Some("raw") => StringForm::Raw,
            _ => StringForm::Whole,
        }
    }
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

impl Slot {
    /// A key without a live row.
    fn absent() -> Slot {
        Slot {
            current: None,
            existed: false,
            change: Change::None,
            typed_row: false,
            string: false,
        }
    }
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
    /// Whether the bucket keeps S3 versions: see [`KvBatch::versioned`].
    versioned: bool,
    /// See [`KvBatch::encodings`].
    encodings: Option<String>,
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
                versioned: all.versioned,
                encodings: all.encodings.clone(),
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
            versioned: bucket.versioning.is_some(),
            encodings: None,
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

    /// Deletes every key of the keyspace (their chunked bodies are retired for the reaper). As a
    /// RESP batch's (`pgvs3.resp_batch`), so the rows it deletes raise no `del` each: FLUSHDB
    /// emits no key events, as in Redis (tracking clients are told apart, resp/pubsub.rs).
    pub(crate) async fn kv_flush(&self, bucket: &BucketInfo) -> StoreResult<()> {
        let mut client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.kv.flush).await?;
        let tx = client.transaction().await?;
        tx.execute("SELECT set_config('pgvs3.resp_batch', 'on', true)", &[])
            .await?;
        tx.execute(&statement, &[&bucket.id]).await?;
        tx.commit().await?;
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
    /// The type of a typed key; `None` for a string or a missing key.
    pub fn key_type(&self, key: &str) -> Option<KeyType> {
        match self.get(key)?.value {
            KvValue::Typed(typed) => Some(typed),
            _ => None,
        }
    }

    /// Whether the keyspace's bucket keeps S3 versions, which refuses TTLs on its strings: as
    /// committed when the keys were loaded, not as this gateway's catalog has it (it may not
    /// have seen a change yet, and a TTL judged by it would answer 1 and set nothing). A write
    /// batch holds its keyspace's lock from its load to its commit, and a versioning change
    /// takes that lock exclusively (store/versions.rs), so the answer holds until the commit.
    /// A batch that loaded nothing (it only overwrites, setting no TTL) has the catalog's.
    pub fn versioned(&self) -> bool {
        self.versioned
    }

    /// Which setting of the keyspace's encoding parameters (CONFIG SET hash-max-listpack-entries
    /// and the like) the batch's last load saw; `None`: none was ever set (or nothing loaded).
    /// A CONFIG SET changes how the next writes encode a key without moving its version: a
    /// value kept under one setting is not taken under another.
    pub fn encodings(&self) -> Option<&str> {
        self.encodings.as_deref()
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
            self.client = Some(checkout(&self.pool).await?);
        }
        let client = self.client.as_ref().expect("taken above");
        let (segments, rows) =
            super::bodies::body_rows(client, &self.bucket.sql, body_id, size, multipart, (0, size)).await?;
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
        // LIMIT NULL: every row.
        let limit = (samples > 0).then_some(samples);
        let bucket = self.bucket.id;
        let row = self.query_one(&statement, &[&bucket, &key, &limit]).await?;
        Ok(u64::try_from(row.get::<_, i64>("size")).unwrap_or(0))
    }

    /// OBJECT ENCODING of a hash, set or sorted set: whether Redis would hold it in its large
    /// encoding (`hashtable`, `skiplist`) rather than its small one (`listpack`, `intset`), as
    /// the write that passed the keyspace's encoding parameters marked it
    /// (functions/resp_keys.sql `resp_large`). Seen by this batch's transaction.
    pub async fn typed_large(&mut self, key: &str) -> StoreResult<bool> {
        let bucket = self.bucket.id;
        let row = self
            .query_one(
                "SELECT coalesce(pgvs3.resp_large($1, $2), true) AS large",
                &[&bucket, &key],
            )
            .await?;
        Ok(row.get("large"))
    }

    /// One statement on the batch's connection (taken from the pool if it has none yet), which
    /// is cancelled should the batch be dropped while it runs.
    async fn query_one(
        &mut self,
        statement: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> StoreResult<tokio_postgres::Row> {
        if self.client.is_none() {
            self.client = Some(checkout(&self.pool).await?);
        }
        let client = self.client.as_ref().expect("taken above");
        self.busy = true;
        let row = client.query_one(statement, params).await;
        self.busy = false;
        Ok(row?)
    }

    fn slot(&mut self, key: &str) -> &mut Slot {
        self.slots.entry(key.to_owned()).or_insert(Slot::absent())
    }

    /// Sets the key's value and expiry, a string written whole (SET and kin).
    pub fn set(&mut self, key: &str, value: Bytes, expires_at: Option<SystemTime>) {
        self.write(key, value, expires_at, StringForm::Whole);
    }

    /// Sets the key's value and expiry, a string written as `form` says.
    pub fn write(&mut self, key: &str, value: Bytes, expires_at: Option<SystemTime>, form: StringForm) {
        let slot = self.slot(key);
        slot.current = Some(KvEntry {
            value: KvValue::Bytes(value),
            expires_at,
            version: None,
            form,
        });
        slot.change = Change::Write;
    }

    /// The strings the batch changed: each written whole or in place with a value of at most
    /// `most` bytes, with its value, expiry and form; any other change (a delete, a new expiry,
    /// a longer value) with `None`.
    pub fn changed_strings(&self, most: usize) -> Vec<(String, Option<StringValue>)> {
        self.slots
            .iter()
            .filter(|(_, slot)| slot.change != Change::None)
            .map(|(key, slot)| {
                let written = match (&slot.change, &slot.current) {
                    (
                        Change::Write,
                        Some(KvEntry {
                            value: KvValue::Bytes(value),
                            expires_at,
                            form,
                            ..
                        }),
                    ) if value.len() <= most => Some(StringValue {
                        value: value.clone(),
                        expires_at: *expires_at,
                        form: *form,
                    }),
                    _ => None,
                };
                (key.clone(), written)
            })
            .collect()
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

    /// The id of the batch's bucket.
    pub fn bucket_id(&self) -> i64 {
        self.bucket.id
    }

    /// The name of the batch's bucket.
    pub fn bucket_name(&self) -> &str {
        &self.bucket.name
    }

    /// Has `pgvs3.resp_batch_notify(channel, message, inline_limit)` (functions/resp_pubsub.sql)
    /// go out with the commit, so that its NOTIFY reaches the gateways only if the batch
    /// commits, in commit order. One per batch: PostgreSQL folds equal payloads of one
    /// transaction. An empty `message` sends nothing, but marks the transaction as a RESP
    /// batch's all the same: its writes then raise no S3-write events (`resp_object_event`).
    pub fn notify_at_commit(&mut self, channel: Vec<u8>, message: Vec<u8>, inline_limit: i32) {
        self.notification = Some((channel, message, inline_limit));
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
