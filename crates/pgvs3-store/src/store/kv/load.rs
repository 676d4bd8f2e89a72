//! Loading a batch's keys: one statement for all of them (with BEGIN and the locks for a
//! write), rows taken as the keys' state, and a read's wait for the writers of keys it found
//! past their expiry.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use bytes::Bytes;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::write::BeginLocked;
use super::{Change, KvBatch, KvEntry, KvValue, Locking, Slot, StringForm, StringValue};
use crate::pg::checkout::checkout;
use crate::store::objects::check_key;
use crate::store::types::KeyType;
use crate::store::{BucketInfo, Store, StoreResult};

impl KvBatch {
    pub(super) async fn load(
        store: &Store,
        bucket: Arc<BucketInfo>,
        client: deadpool_postgres::Object,
        keys: &[String],
        locking: Locking,
    ) -> StoreResult<KvBatch> {
        for key in keys {
            check_key(key)?;
        }
        let bucket_versioned = bucket.versioning.is_some();
        // Busy until loaded: a load abandoned midway (or failed) is cancelled.
        let mut batch = KvBatch {
            bucket,
            client: Some(client),
            pool: store.pool.clone(),
            busy: true,
            cancel: store.cancel.clone(),
            in_transaction: locking != Locking::None,
            deferred_locks: None,
            blind: false,
            now: SystemTime::now(),
            versioned: bucket_versioned,
            encodings: None,
            slots: HashMap::with_capacity(keys.len()),
            notification: None,
        };
        let rows = batch.load_rows(keys, locking).await?;
        let lapsed = batch.absorb(&rows, keys);
        if locking == Locking::None {
            batch.wait_for_writers(keys, lapsed).await?;
        }
        batch.busy = false;
        Ok(batch)
    }

    /// The rows of `keys`, in one statement; a write's BEGIN and locks go out with it (one round
    /// trip). A load of strings alone that finds the bucket has typed keys is done again the
    /// typed way.
    async fn load_rows(&self, keys: &[String], locking: Locking) -> StoreResult<Vec<Row>> {
        let client = self.client.as_ref().expect("client until commit");
        let sql = &self.bucket.sql.kv;
        let id = &self.bucket.id;
        let typed = sql.typed.load(Ordering::Relaxed);
        let named = distinct(keys);
        let named = &*named;
        let (load, load_params): (_, [&(dyn ToSql + Sync); 2]) = match (keys, typed) {
            ([key], true) => (client.prepare_cached(&sql.load_one).await?, [id, key]),
            ([key], false) => (client.prepare_cached(&sql.load_one_strings).await?, [id, key]),
            (_, true) => (client.prepare_cached(&sql.load).await?, [id, &named]),
            (_, false) => (client.prepare_cached(&sql.load_strings).await?, [id, &named]),
        };
        let mut rows = if locking != Locking::None {
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
            rows = client.query(&load, &[id, &named]).await?;
        }
        Ok(rows)
    }

    /// A read's wait for the writers of the keys it found past their expiry (`lapsed`), each
    /// followed by a new load: see [`Waited`]. (Rare: the reaper removes expired rows.)
    async fn wait_for_writers(&mut self, keys: &[String], mut lapsed: Vec<Lapsed>) -> StoreResult<()> {
        let mut waited = Waited::default();
        loop {
            let fresh = waited.fresh(lapsed);
            if fresh.is_empty() {
                return Ok(());
            }
            let client = self.client.as_ref().expect("client until commit");
            let sql = &self.bucket.sql.kv;
            let bucket_id = self.bucket.id;
            let (wait, load) = futures::try_join!(
                client.prepare_cached(sql.await_writers(fresh.len())),
                client.prepare_cached(&sql.load)
            )?;
            // Sent together: the load runs once the writers are done.
            let named = distinct(keys);
            let params: [&(dyn ToSql + Sync); 2] = [&bucket_id, &&*named];
            let (_, rows) = futures::try_join!(
                await_writers(client, &wait, bucket_id, &fresh),
                client.query(&load, &params)
            )?;
            self.slots.clear();
            lapsed = self.absorb(&rows, keys);
        }
    }

    /// Takes loaded rows as the state of `keys`; answers the keys whose row had expired by the
    /// load's clock (they are absent), with their deadlines.
    fn absorb(&mut self, rows: &[Row], keys: &[String]) -> Vec<Lapsed> {
        let mut lapsed = Vec::new();
        for row in rows {
            self.now = row.get("now");
            // NULL once the bucket is gone (the batch's writes then fail on their own).
            if let Some(versioned) = row.get::<_, Option<bool>>("versioned") {
                self.versioned = versioned;
            }
            self.encodings = row.get("encodings");
            let Some(key) = row.get::<_, Option<String>>("key") else {
                continue;
            };
            let typed = row.get::<_, Option<i8>>("type").and_then(KeyType::from_code);
            let expires_at: Option<SystemTime> = row.get("expires_at");
            let expired = expires_at.filter(|at| *at <= self.now);
            if let Some(deadline) = expired {
                lapsed.push((key.clone(), deadline));
            }
            let expired = expired.is_some();
            if expired && typed.is_none() {
                // An expired string: absent; a write over it replaces the row by its key.
                continue;
            }
            if expired {
                // An expired typed row: the key is absent, but the row is there to replace.
                self.slots.entry(key).or_insert(Slot::absent()).typed_row = true;
                continue;
            }
            self.absorb_live(key, loaded_entry(row, typed, expires_at), typed.is_some());
        }
        for key in keys {
            self.slots.entry(key.clone()).or_insert(Slot::absent());
        }
        lapsed
    }

    /// Takes the entry of a live row of `key` (`typed`: of a typed key). A name that is both
    /// (an S3 write over a typed key) is the string.
    fn absorb_live(&mut self, key: String, entry: KvEntry, typed: bool) {
        let slot = Slot {
            current: Some(entry),
            existed: true,
            change: Change::None,
            typed_row: typed,
            string: !typed,
        };
        match self.slots.entry(key) {
            Entry::Occupied(mut both) if typed && both.get().current.is_some() => both.get_mut().typed_row = true,
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

    /// Takes `key`, not loaded, as absent, without a load or its lock: a script's run borrowed
    /// it so (pgvs3-resp's working set), and locks and checks it ahead of the first statement it
    /// sends ([`Speculation::borrowed`]). A string written here deletes a typed row of the name,
    /// as over a typed key found expired (the check passes such a key as absent). False for a
    /// name that is no valid key (then loaded, to fail as before), or one the batch holds.
    ///
    /// [`Speculation::borrowed`]: crate::store::Speculation
    pub fn assume_absent(&mut self, key: &str) -> bool {
        if check_key(key).is_err() || self.slots.contains_key(key) {
            return false;
        }
        let slot = Slot {
            typed_row: true,
            ..Slot::absent()
        };
        self.slots.insert(key.to_owned(), slot);
        true
    }

    /// Takes `key`, not loaded, as the string `string`, without a load or its lock, as
    /// [`KvBatch::assume_absent`] takes one absent (the run checks it before its first
    /// statement: [`Borrowed::String`](crate::store::Borrowed)). False for a name that is no
    /// valid key, or a string past its expiry by the batch's clock (then loaded).
    pub fn assume_string(&mut self, key: &str, string: StringValue) -> bool {
        let expired = string.expires_at.is_some_and(|at| at <= self.now);
        if check_key(key).is_err() || expired || self.slots.contains_key(key) {
            return false;
        }
        let entry = KvEntry {
            value: KvValue::Bytes(string.value),
            expires_at: string.expires_at,
            version: None,
            form: string.form,
        };
        self.slots.insert(
            key.to_owned(),
            Slot {
                current: Some(entry),
                existed: true,
                change: Change::None,
                typed_row: true,
                string: true,
            },
        );
        true
    }

    /// Loads `keys` again (inside the batch's transaction, under its locks): after typed
    /// commands changed them in the database.
    pub async fn reload(&mut self, keys: &[String]) -> StoreResult<()> {
        let reloaded = self.try_lock_and_reload(&[], keys).await?;
        debug_assert!(reloaded, "no lock to take");
        Ok(())
    }

    /// Locks further keys of a write batch, after those it began with, without waiting, and
    /// loads `keys` again, in one round trip (the load runs after the locks, so under them):
    /// false when another transaction holds one of `lock`, and then nothing is taken as
    /// loaded. Taking them in the sorted order is no longer possible, and waiting could
    /// deadlock; the caller starts over instead, holding the whole keyspace
    /// ([`Store::kv_write_all`]).
    pub async fn try_lock_and_reload(&mut self, lock: &[String], keys: &[String]) -> StoreResult<bool> {
        if self.client.is_none() {
            self.client = Some(checkout(&self.pool).await?);
        }
        let client = self.client.as_ref().expect("taken above");
        let sql = &self.bucket.sql.kv;
        let id = &self.bucket.id;
        // Both prepared first: sent on their first poll, the lock goes out before the load.
        let load = client.prepare_cached(&sql.load).await?;
        let try_lock = match lock.is_empty() {
            true => None,
            false => Some(client.prepare_cached(&sql.try_lock).await?),
        };
        let lock_id = self.bucket.id as i32;
        let try_lock = async {
            let Some(statement) = &try_lock else {
                return Ok(true);
            };
            let row = client.query_one(statement, &[&lock_id, &lock]).await?;
            Ok::<_, tokio_postgres::Error>(row.get::<_, Option<bool>>("locked").unwrap_or(true))
        };
        let named = distinct(keys);
        let params: [&(dyn ToSql + Sync); 2] = [id, &&*named];
        let (locked, rows) = futures::try_join!(try_lock, client.query(&load, &params))?;
        if !locked {
            return Ok(false);
        }
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
        Ok(true)
    }
}

/// The entry of a live row as loaded (`typed`: the row's key type, `None` for a string).
fn loaded_entry(row: &Row, typed: Option<KeyType>, expires_at: Option<SystemTime>) -> KvEntry {
    let inline: Option<&[u8]> = row.get("inline");
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
    KvEntry {
        value,
        expires_at,
        version: Some((row.get("etag"), row.get("last_modified"))),
        form: StringForm::from_mark(row.get("form")),
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
/// too. A key met past the same deadline again after its wait needs no second one; one that
/// expired between the two reads does, and so does one met past a new deadline: a writer that
/// set it (waited for) may have been followed by another that loaded the key alive before it
/// and has not committed (a read of several keys waits for each in turn, long enough for
/// that). A read repeats until it meets no (key, deadline) it has not waited for.
#[derive(Debug, Default)]
pub(in crate::store) struct Waited(Vec<Lapsed>);

/// A key a read found past its expiry, and that expiry.
pub(in crate::store) type Lapsed = (String, SystemTime);

impl Waited {
    /// Of `lapsed` (keys a read found past their expiry), the keys it has not waited for yet
    /// past that deadline, now counted as waited for.
    pub(in crate::store) fn fresh(&mut self, lapsed: Vec<Lapsed>) -> Vec<String> {
        let mut fresh = Vec::new();
        for met in lapsed {
            if !self.0.contains(&met) {
                if !fresh.contains(&met.0) {
                    fresh.push(met.0.clone());
                }
                self.0.push(met);
            }
        }
        fresh
    }
}

/// Waits for the writers of `keys` (`statement` is `KvSql::await_writers(keys.len())`,
/// prepared), sent on the first poll so that statements sent after it run once the writers are
/// done.
pub(in crate::store) async fn await_writers(
    client: &deadpool_postgres::Object,
    statement: &tokio_postgres::Statement,
    bucket_id: i64,
    keys: &[String],
) -> Result<(), tokio_postgres::Error> {
    let lock_id = bucket_id as i32;
    let waited = match keys.len() > super::FINE_LOCK_LIMIT {
        true => client.execute(statement, &[&bucket_id]).await,
        false => client.execute(statement, &[&bucket_id, &lock_id, &keys]).await,
    };
    waited.map(drop)
}

/// `keys` each once, as the load statements take them: they answer a row per key named
/// (`key_probes::rows_of_keys`), and a key named twice would be taken as two rows of one name.
fn distinct(keys: &[String]) -> std::borrow::Cow<'_, [String]> {
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    if keys.iter().all(|key| seen.insert(key.as_str())) {
        return std::borrow::Cow::Borrowed(keys);
    }
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    std::borrow::Cow::Owned(keys.iter().filter(|key| seen.insert(key.as_str())).cloned().collect())
}
