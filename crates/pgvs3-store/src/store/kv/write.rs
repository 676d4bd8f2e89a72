//! Writing a batch: its changes (deletes, delete markers, expiries, upserts), typed calls
//! and notification go out together with COMMIT, after the BEGIN and locks a batch that only
//! overwrites still owes (one round trip, plus one per chunked value).

use std::sync::LazyLock;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use bytes::Bytes;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};

use super::sql::ENCODINGS;
use super::{Change, FINE_LOCK_LIMIT, KvBatch, KvSql, KvValue, StringForm};
use crate::pg::checkout::checkout;
use crate::store::chunks::Chunker;
use crate::store::key_probes::rows_of_keys;
use crate::store::objects::INLINE_LIMIT;
use crate::store::types::{
    Borrowed, Committed, ElementWrites, HASH_APPLY, LIST_APPLY, ListWrite, Loaded, SET_APPLY, STREAM_APPLY, SetWrite,
    Speculated, Speculation, StreamNode, StreamWrite, TypedCall, ZSET_APPLY,
};
use crate::store::{BucketInfo, StoreError, StoreResult};

impl KvBatch {
    /// Runs typed calls, sending first the BEGIN and locks a batch that only overwrites still
    /// owes; `commit` ends the batch with them (one round trip in all).
    pub(in crate::store) async fn typed_calls(
        &mut self,
        calls: &[&TypedCall],
        speculation: &Speculation<'_>,
        commit: bool,
    ) -> StoreResult<Speculated> {
        self.busy = true;
        // Boxed, as every path to a round trip of typed calls: the future is large, and runs
        // (scripts, EXEC) nest it deep.
        let rows = Box::pin(self.send_typed_calls(calls, speculation, commit, false)).await;
        self.busy = false;
        rows
    }

    /// `with_changes`: the batch's string changes go out first, in the same round trip (see
    /// [`KvBatch::typed_speculated`]).
    async fn send_typed_calls(
        &mut self,
        calls: &[&TypedCall],
        speculation: &Speculation<'_>,
        commit: bool,
        with_changes: bool,
    ) -> StoreResult<Speculated> {
        if self.client.is_none() {
            self.client = Some(checkout(&self.pool).await?);
        }
        // The calls may create the bucket's first typed key: string statements stop assuming
        // there is none (the batch's own later writes included).
        self.bucket.sql.kv.typed.store(true, Ordering::Relaxed);
        let client = self.client.as_ref().expect("taken above");
        if !self.in_transaction {
            // A read batch's calls read as the store's typed reads do (nothing is speculated
            // there: a working set serves write runs).
            let rows = crate::store::types::read_calls(client, &self.bucket, calls).await?;
            return Ok(Speculated {
                rows,
                ..Speculated::default()
            });
        }
        let id = self.bucket.id;
        let locked = self.deferred_locks.take();
        let mut begin = match &locked {
            Some(locked) => Some((
                BeginLocked::prepare(client, &self.bucket.sql.kv, locked.len()).await?,
                locked,
            )),
            None => None,
        };
        let changes = match with_changes {
            true => Some(Box::pin(self.prepare_changes(client, &mut begin)).await?),
            false => None,
        };
        // A write batch first deletes the expired strings among the keys, which a typed key
        // made there would leave behind (the SQL functions delete expired typed rows, but only
        // the namespace's statements reach its objects).
        let expired_strings = match self.in_transaction {
            true => {
                let keys: Vec<&str> = calls
                    .iter()
                    .flat_map(|call| &call.keys)
                    .chain(speculation.hash_writes.iter().map(|write| &write.key))
                    .chain(speculation.zset_writes.iter().map(|write| &write.key))
                    .chain(speculation.set_writes.iter().map(|write| &write.key))
                    .chain(speculation.stream_writes.iter().map(|write| &write.key))
                    .chain(speculation.list_writes.iter().map(|write| &write.key))
                    .map(String::as_str)
                    .collect();
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
        let hash_apply = match speculation.hash_writes.is_empty() {
            true => None,
            false => Some(client.prepare_cached(HASH_APPLY).await?),
        };
        let zset_apply = match speculation.zset_writes.is_empty() {
            true => None,
            false => Some(client.prepare_cached(ZSET_APPLY).await?),
        };
        let set_apply = match speculation.set_writes.is_empty() {
            true => None,
            false => Some(client.prepare_cached(SET_APPLY).await?),
        };
        let stream_apply = match speculation.stream_writes.is_empty() {
            true => None,
            false => Some(client.prepare_cached(STREAM_APPLY).await?),
        };
        let list_apply = match speculation.list_writes.is_empty() {
            true => None,
            false => Some(client.prepare_cached(LIST_APPLY).await?),
        };
        let borrowed = match speculation.borrowed.is_empty() {
            true => None,
            false => {
                let sql = &self.bucket.sql.kv;
                Some((
                    client.prepare_cached(&sql.lock_borrowed).await?,
                    client.prepare_cached(&sql.check_borrowed).await?,
                    BorrowedParams::of(&speculation.borrowed),
                ))
            }
        };
        // Sent in this order on the first poll, so in one round trip with the calls.
        let before = async {
            let begin = async {
                match &begin {
                    Some((statements, locked)) => statements.send(client, id, locked).await,
                    None => Ok(()),
                }
            };
            // Ahead of every write: the keys the run borrowed are locked and checked before
            // anything of the run's reaches them.
            let borrowed = async {
                let Some((lock, check, expected)) = &borrowed else {
                    return Ok(());
                };
                let lock_id = self.bucket.id as i32;
                let lock_params: [&(dyn ToSql + Sync); 2] = [&lock_id, &expected.keys];
                let check_params: [&(dyn ToSql + Sync); 6] = [
                    &id,
                    &expected.keys,
                    &expected.versions,
                    &expected.values,
                    &expected.expiries,
                    &expected.forms,
                ];
                futures::try_join!(
                    client.query_one(lock, &lock_params),
                    client.query_one(check, &check_params)
                )
                .map(drop)
            };
            let changes = async {
                match &changes {
                    Some(changes) => changes.send(client, id, &self.now).await,
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
            // Ahead of the calls: these writes are on keys no call of the round trip owes a
            // write to (working_set/run.rs).
            // Every hash's in one statement, every sorted set's in another, every set's in a third.
            let hash_writes = async {
                match &hash_apply {
                    Some(statement) => {
                        send_element_writes(client, statement, id, &speculation.hash_writes, |value| &value[..]).await
                    }
                    None => Ok(()),
                }
            };
            let zset_writes = async {
                match &zset_apply {
                    Some(statement) => {
                        send_element_writes(client, statement, id, &speculation.zset_writes, |score| *score).await
                    }
                    None => Ok(()),
                }
            };
            let set_writes = async {
                match &set_apply {
                    Some(statement) => send_set_writes(client, statement, id, &speculation.set_writes).await,
                    None => Ok(()),
                }
            };
            let stream_writes = futures::future::try_join_all(speculation.stream_writes.iter().map(|write| {
                let statement = stream_apply.as_ref().expect("prepared for stream writes");
                send_stream_write(client, statement, id, write)
            }));
            let list_writes = futures::future::try_join_all(speculation.list_writes.iter().map(|write| {
                let statement = list_apply.as_ref().expect("prepared for list writes");
                send_list_write(client, statement, id, write)
            }));
            futures::try_join!(
                begin,
                borrowed,
                changes,
                expired,
                hash_writes,
                zset_writes,
                set_writes,
                stream_writes,
                list_writes
            )
            .map(drop)
        };
        // The loads and versions a working set asked for, prepared first so that they go out
        // in the same round trip, after the calls.
        let mut load_statements = Vec::with_capacity(speculation.loads.len());
        for (sql, _) in &speculation.loads {
            load_statements.push(client.prepare_cached(sql).await?);
        }
        let versions = match speculation.versions.is_empty() {
            true => None,
            false => Some(client.prepare_cached(&TYPED_VERSIONS).await?),
        };
        let after = async {
            let loads = load_statements
                .iter()
                .zip(&speculation.loads)
                .map(|(statement, (_, key))| async move {
                    let params: [&(dyn ToSql + Sync); 3] = [&id, key, &speculation.load_limit];
                    client.query_one(statement, &params).await
                });
            let versions = async {
                match &versions {
                    Some(statement) => client.query(statement, &[&id, &speculation.versions]).await,
                    None => Ok(Vec::new()),
                }
            };
            let commit = async {
                match commit {
                    true => client.batch_execute("COMMIT").await,
                    false => Ok(()),
                }
            };
            let (loaded, versions, ()) = futures::try_join!(futures::future::try_join_all(loads), versions, commit)?;
            Ok((loaded, versions))
        };
        // The calls answered, COMMIT runs (see send_changes).
        let ahead_done = || {
            if commit {
                super::commit_sent::committing();
            }
        };
        // Boxed: with the loads and the versions behind the calls, the future is large, and a
        // script's or EXEC's run nests it deep.
        let sent = Box::pin(crate::store::types::send_calls(
            client,
            &self.bucket,
            calls,
            &speculation.expected,
            true,
            before,
            after,
            ahead_done,
        ))
        .await;
        let (rows, (loaded, versions)) = match commit {
            true => super::commit_sent::outcome(sent)?,
            false => sent?,
        };
        if commit {
            self.in_transaction = false;
        }
        Ok(Speculated {
            rows,
            loaded: loaded.iter().map(loaded_value).collect(),
            versions: versions
                .iter()
                .map(|row| Committed {
                    key: row.get("key"),
                    version: row.get("version"),
                    large: row.get("large"),
                    hash_limits: (row.get("hash_entries"), row.get("hash_value")),
                    encodings: row.get("encodings"),
                })
                .collect(),
        })
    }

    /// Runs typed calls inside the batch with what a working set asks of them (see
    /// [`Speculation`]), after whatever the batch has changed so far (written first); `commit`
    /// ends the batch with them, in the same round trip. A call whose answer differs from its
    /// predicted row fails the batch with [`StoreError::Mispredicted`](crate::store::StoreError):
    /// its transaction is then rolled back.
    pub async fn typed_speculated(
        &mut self,
        calls: &[&TypedCall],
        speculation: &Speculation<'_>,
        commit: bool,
    ) -> StoreResult<Speculated> {
        let changed = self.slots.values().any(|slot| slot.change != Change::None);
        // A blind batch's writes may have to be sent again whole (`write_changes_now`): they go
        // alone, as before any typed calls.
        if !changed || self.blind || !self.in_transaction {
            self.write_pending().await?;
            return self.typed_calls(calls, speculation, commit).await;
        }
        // The string changes, the calls, the loads and the COMMIT in one round trip; the
        // changes ahead of the calls, which must see them.
        self.busy = true;
        let sent = Box::pin(self.send_typed_calls(calls, speculation, commit, true)).await;
        self.busy = false;
        let sent = sent?;
        self.changes_written();
        Ok(sent)
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
        self.changes_written();
        Ok(())
    }

    /// The batch's changes went out: the slots hold what the database has.
    fn changes_written(&mut self) {
        for slot in self.slots.values_mut() {
            slot.existed = slot.current.is_some();
            slot.string = slot
                .current
                .as_ref()
                .is_some_and(|entry| !matches!(entry.value, KvValue::Typed(_)));
            slot.change = Change::None;
        }
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
        let client = self.client.as_ref().expect("client until commit");
        let id = &self.bucket.id;
        // Kept until the writes are sent: a batch whose blind overwrite met typed keys is sent
        // again whole (see write_changes).
        let mut begin = match self.deferred_locks.as_ref() {
            Some(locked) => Some((
                BeginLocked::prepare(client, &self.bucket.sql.kv, locked.len()).await?,
                locked,
            )),
            None => None,
        };
        let changes = Box::pin(self.prepare_changes(client, &mut begin)).await?;
        // Prepared ahead: a statement prepared as it goes would let COMMIT overtake it.
        let notify = match self.notification.as_ref().filter(|_| commit) {
            Some(notification) => Some((client.prepare_cached(BATCH_NOTIFY).await?, notification)),
            None => None,
        };
        // COMMIT goes out with the writes. Should one of them fail, the server turns it into a
        // rollback and the error comes back from the failed statement. Until they have all
        // answered, a cancel hits one of them (and so rolls back); from then on, COMMIT runs.
        let ahead = async {
            let ahead = futures::try_join!(
                async {
                    match &begin {
                        Some((statements, locked)) => statements.send(client, *id, locked).await,
                        None => Ok(()),
                    }
                },
                changes.send(client, *id, &self.now),
                async {
                    match &notify {
                        Some((statement, (channel, message, limit))) => {
                            client.execute(statement, &[channel, message, limit]).await.map(drop)
                        }
                        None => Ok(()),
                    }
                },
            );
            if ahead.is_ok() && commit {
                super::commit_sent::committing();
            }
            ahead
        };
        let sent = futures::try_join!(ahead, async {
            match commit {
                true => client.batch_execute("COMMIT").await,
                false => Ok(()),
            }
        },)
        .map_err(StoreError::from);
        match commit {
            true => super::commit_sent::outcome(sent)?,
            false => sent?,
        };
        if commit {
            self.in_transaction = false;
        }
        Ok(())
    }

    /// The batch's changes with their statements prepared, to go out in one round trip (their
    /// large values are stored on the way, see [`KvBatch::changes`]).
    async fn prepare_changes<'a>(
        &'a self,
        client: &deadpool_postgres::Object,
        begin: &mut Option<(BeginLocked, &Vec<String>)>,
    ) -> StoreResult<PreparedChanges<'a>> {
        let sql = &self.bucket.sql;
        let changes = self.changes(client, begin).await?;
        let upsert = self.upsert_statement(&changes.written, begin.is_some());
        let (delete, mark_deleted, set_expiry, upsert) = futures::try_join!(
            client.prepare_cached(&sql.kv.delete),
            client.prepare_cached(&sql.kv.mark_deleted),
            client.prepare_cached(&sql.kv.set_expiry),
            client.prepare_cached(upsert),
        )?;
        Ok(PreparedChanges {
            changes,
            delete,
            mark_deleted,
            set_expiry,
            upsert,
            meta: self.new_version_meta()?,
        })
    }

    /// The batch's changes, key by key in sorted order. A value too large to be inline is
    /// stored as a chunked body on the way; COPY cannot queue behind statements, so the BEGIN
    /// and locks still owed (`begin`) go out before it.
    async fn changes<'a>(
        &'a self,
        client: &deadpool_postgres::Object,
        begin: &mut Option<(BeginLocked, &Vec<String>)>,
    ) -> StoreResult<Changes<'a>> {
        let mut keys: Vec<&String> = self
            .slots
            .iter()
            .filter(|(_, slot)| slot.change != Change::None)
            .map(|(key, _)| key)
            .collect();
        keys.sort();
        let mut changes = Changes::default();
        for key in keys {
            let slot = &self.slots[key];
            match (slot.change, &slot.current) {
                (Change::Delete, _) | (_, None) if slot.existed => {
                    changes.deleted.push(key.as_str());
                    if slot.string {
                        changes.marked.push(key.as_str());
                    }
                }
                (Change::Delete, _) | (_, None) => {}
                (Change::Expiry, Some(entry)) => {
                    changes.expiring.0.push(key);
                    changes.expiring.1.push(entry.expires_at);
                }
                (_, Some(entry)) => {
                    let KvValue::Bytes(value) = &entry.value else {
                        unreachable!("a written value is always in memory");
                    };
                    let body_id = if value.len() > INLINE_LIMIT {
                        // COPY cannot queue behind statements; the transaction must be open.
                        if let Some((statements, locked)) = begin.take() {
                            statements.send(client, self.bucket.id, locked).await?;
                        }
                        Some(copy_body(client, &self.bucket, value).await?)
                    } else {
                        None
                    };
                    changes.written.push(key, value, body_id, entry.expires_at, entry.form);
                }
            }
        }
        changes.written.hash_values();
        Ok(changes)
    }

    /// Which of [`KvSql`]'s upserts writes `written`; `begins`: the batch's BEGIN goes out with
    /// the writes.
    fn upsert_statement(&self, written: &WrittenValues<'_>, begins: bool) -> &str {
        let sql = &self.bucket.sql.kv;
        let upsert = if self.blind {
            // Only a batch that sends its BEGIN here can be written again whole.
            if begins && !sql.typed.load(Ordering::Relaxed) {
                &sql.upsert_strings
            } else {
                &sql.upsert
            }
        } else if written.keys.iter().any(|key| self.slots[*key].typed_row) {
            &sql.upsert
        } else {
            &sql.upsert_plain
        };
        match written.marks.is_empty() {
            true => &upsert.whole,
            false => &upsert.marked,
        }
    }
}

/// A batch's changes and their statements, prepared (see [`KvBatch::prepare_changes`]).
struct PreparedChanges<'a> {
    changes: Changes<'a>,
    delete: tokio_postgres::Statement,
    mark_deleted: tokio_postgres::Statement,
    set_expiry: tokio_postgres::Statement,
    upsert: tokio_postgres::Statement,
    meta: tokio_postgres::types::Json<super::super::ObjectMeta>,
}

impl PreparedChanges<'_> {
    /// Sends the changes, each statement on the first poll (in key order, in one round trip).
    async fn send(
        &self,
        client: &deadpool_postgres::Object,
        id: i64,
        now: &SystemTime,
    ) -> Result<(), tokio_postgres::Error> {
        let Changes {
            deleted,
            marked,
            expiring,
            written,
        } = &self.changes;
        let delete_params: [&(dyn ToSql + Sync); 2] = [&id, deleted];
        let mark_params: [&(dyn ToSql + Sync); 2] = [&id, marked];
        let expiry_params: [&(dyn ToSql + Sync); 4] = [&id, &expiring.0, &expiring.1, now];
        let upsert_params: [&(dyn ToSql + Sync); 9] = [
            &id,
            &written.keys,
            &written.sizes,
            &written.etags,
            &written.inline,
            &written.body_ids,
            &written.expires_at,
            &self.meta,
            &written.marks,
        ];
        // `$9` only for the marked shape, which has it.
        let upsert_params = &upsert_params[..if written.marks.is_empty() { 8 } else { 9 }];
        futures::try_join!(
            execute_unless_empty(client, &self.delete, &delete_params, deleted.len()),
            execute_unless_empty(client, &self.mark_deleted, &mark_params, marked.len()),
            execute_unless_empty(client, &self.set_expiry, &expiry_params, expiring.0.len()),
            execute_unless_empty(client, &self.upsert, upsert_params, written.keys.len()),
        )
        .map(drop)
    }
}

/// What a batch sends, in key order.
#[derive(Default)]
struct Changes<'a> {
    /// Keys that existed and are gone.
    deleted: Vec<&'a str>,
    /// The strings among them: a versioned bucket writes their delete markers.
    marked: Vec<&'a str>,
    /// Keys whose expiry alone changed, and their new expiry.
    expiring: (Vec<&'a str>, Vec<Option<SystemTime>>),
    written: WrittenValues<'a>,
}

/// A write batch's hold of its keyspace (functions/resp_keys.sql `resp_hold_keyspace`): its
/// bucket's write lock shared, the bucket as committed once that is held, then the keyspace's
/// lock (`$2`: exclusively), in DeleteBucket's order. One statement, as the keyspace lock alone
/// was: a batch racing DeleteBucket either holds the bucket first (DeleteBucket then waits for it
/// and finds its rows) or finds the bucket gone and raises, aborting the writes and the COMMIT
/// pipelined behind it (before, it wrote rows of no bucket and answered OK).
const HOLD_KEYSPACE: &str = "SELECT pgvs3.resp_hold_keyspace($1, $2)";

/// The statements that begin a write batch: BEGIN, its keyspace's hold ([`HOLD_KEYSPACE`]), and
/// (for a batch of few keys) its key locks. Prepared before anything is sent, so that sending
/// them together with the statements queued behind them is one round trip.
pub(super) struct BeginLocked {
    keyspace: tokio_postgres::Statement,
    keys: Option<tokio_postgres::Statement>,
}

impl BeginLocked {
    pub(super) async fn prepare(
        client: &deadpool_postgres::Object,
        sql: &KvSql,
        key_count: usize,
    ) -> Result<BeginLocked, tokio_postgres::Error> {
        if key_count <= FINE_LOCK_LIMIT {
            let (keyspace, keys) =
                futures::try_join!(client.prepare_cached(HOLD_KEYSPACE), client.prepare_cached(&sql.lock))?;
            Ok(BeginLocked {
                keyspace,
                keys: Some(keys),
            })
        } else {
            Ok(BeginLocked {
                keyspace: client.prepare_cached(HOLD_KEYSPACE).await?,
                keys: None,
            })
        }
    }

    /// Sends BEGIN and the locks. Statements the caller polls after this one's first poll queue
    /// behind them and run inside the transaction, after the locks are held.
    pub(super) async fn send(
        &self,
        client: &deadpool_postgres::Object,
        bucket_id: i64,
        keys: &[String],
    ) -> Result<(), tokio_postgres::Error> {
        let exclusive = self.keys.is_none();
        let keyspace_params: [&(dyn ToSql + Sync); 2] = [&bucket_id, &exclusive];
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
    values: Vec<&'a [u8]>,
    /// The ETags S3 reports for the same bytes, once [`hash_values`](Self::hash_values) ran.
    etags: Vec<String>,
    inline: Vec<Option<&'a [u8]>>,
    body_ids: Vec<Option<i64>>,
    expires_at: Vec<Option<SystemTime>>,
    /// Each value's form mark (see [`StringForm`]); empty while every value so far was written
    /// whole, as a batch of SETs' stays.
    marks: Vec<Option<&'static str>>,
}

impl<'a> WrittenValues<'a> {
    fn push(
        &mut self,
        key: &'a str,
        value: &'a Bytes,
        body_id: Option<i64>,
        expires_at: Option<SystemTime>,
        form: StringForm,
    ) {
        if form != StringForm::Whole || !self.marks.is_empty() {
            // The values before the first marked one were written whole.
            self.marks.resize(self.keys.len(), None);
            self.marks.push(form.mark());
        }
        self.keys.push(key);
        self.sizes.push(value.len() as i64);
        self.values.push(value);
        self.inline.push(body_id.is_none().then_some(&value[..]));
        self.body_ids.push(body_id);
        self.expires_at.push(expires_at);
    }

    /// The values' MD5s, hashed together (side by side where the CPU can: md5_lanes.rs).
    fn hash_values(&mut self) {
        self.etags = super::super::md5_lanes::digests(&self.values)
            .iter()
            .map(hex::encode)
            .collect();
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
    let body_id: i64 = client
        .query_one(&bucket.sql.bodies.next_body_id, &[])
        .await?
        .get("body_id");
    let sink = client.copy_in(&bucket.sql.bodies.copy_chunks).await?;
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
const BATCH_NOTIFY: &str = "SELECT pgvs3.resp_batch_notify($1, $2, $3)";

/// A message to every gateway, in the caller's transaction (functions/resp_pubsub.sql).
pub(super) const NOTIFY: &str = "SELECT pgvs3.resp_notify($1, $2, $3)";

/// The versions of typed keys, as the batch's loads give them (`t<version>`), each key's
/// encoding as the batch left it, and the keyspace's hash limits (see [`Committed`]).
/// The parameters of `check_borrowed` (see [`Borrowed`]): a key each, and what it was taken
/// to be.
struct BorrowedParams<'a> {
    keys: Vec<&'a str>,
    versions: Vec<Option<&'a str>>,
    values: Vec<Option<&'a [u8]>>,
    expiries: Vec<Option<SystemTime>>,
    forms: Vec<Option<&'static str>>,
}

impl<'a> BorrowedParams<'a> {
    fn of(borrowed: &'a [(String, Borrowed)]) -> BorrowedParams<'a> {
        let mut params = BorrowedParams {
            keys: Vec::with_capacity(borrowed.len()),
            versions: Vec::with_capacity(borrowed.len()),
            values: Vec::with_capacity(borrowed.len()),
            expiries: Vec::with_capacity(borrowed.len()),
            forms: Vec::with_capacity(borrowed.len()),
        };
        for (key, expected) in borrowed {
            let (version, value, expires_at, form) = match expected {
                Borrowed::Absent => (None, None, None, None),
                Borrowed::Typed(version) => (Some(version.as_str()), None, None, None),
                Borrowed::String(string) => (None, Some(&string.value[..]), string.expires_at, string.form.mark()),
            };
            params.keys.push(key);
            params.versions.push(version);
            params.values.push(value);
            params.expiries.push(expires_at);
            params.forms.push(form);
        }
        params
    }
}

static TYPED_VERSIONS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT r.key, 't' || r.version AS version, r.large, enc.hash_entries, enc.hash_value, {ENCODINGS}
           FROM {}, pgvs3.resp_encodings($1) enc",
        rows_of_keys("pgvs3.resp_keys", "r", "$1", "$2")
    )
});

/// Sends a round trip's set-based writes of hashes or sorted sets, every key's in one call (see
/// [`ElementWrites`]): the bucket, the keys' part, then each element with its key, and its
/// values (`param` makes one a parameter).
async fn send_element_writes<'a, V, P: ToSql + Sync>(
    client: &deadpool_postgres::Object,
    statement: &tokio_postgres::Statement,
    bucket: i64,
    writes: &'a [ElementWrites<V>],
    param: impl Fn(&'a V) -> P,
) -> Result<(), tokio_postgres::Error> {
    let key_parts = KeyParts::of(writes);
    let (mut gone_keys, mut gone, mut gone_values) = (Vec::new(), Vec::new(), Vec::new());
    let (mut changed_keys, mut changed, mut changed_from, mut changed_to) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut added_keys, mut added, mut added_values) = (Vec::new(), Vec::new(), Vec::new());
    for write in writes {
        let key = write.key.as_str();
        for (element, value) in &write.gone {
            gone_keys.push(key);
            gone.push(&element[..]);
            gone_values.push(param(value));
        }
        for (element, from, to) in &write.changed {
            changed_keys.push(key);
            changed.push(&element[..]);
            changed_from.push(param(from));
            changed_to.push(param(to));
        }
        for (element, value) in &write.added {
            added_keys.push(key);
            added.push(&element[..]);
            added_values.push(param(value));
        }
    }
    let elements: [&(dyn ToSql + Sync); 10] = [
        &gone_keys,
        &gone,
        &gone_values,
        &changed_keys,
        &changed,
        &changed_from,
        &changed_to,
        &added_keys,
        &added,
        &added_values,
    ];
    key_parts.send(client, statement, bucket, &elements).await
}

/// Sends a round trip's set-based writes of sets, every key's in one call (see [`SetWrite`]):
/// the members removed and added, each with its key.
async fn send_set_writes(
    client: &deadpool_postgres::Object,
    statement: &tokio_postgres::Statement,
    bucket: i64,
    writes: &[SetWrite],
) -> Result<(), tokio_postgres::Error> {
    let (mut gone_keys, mut gone, mut added_keys, mut added) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for write in writes {
        for (member, ()) in &write.gone {
            gone_keys.push(write.key.as_str());
            gone.push(&member[..]);
        }
        for (member, ()) in &write.added {
            added_keys.push(write.key.as_str());
            added.push(&member[..]);
        }
    }
    KeyParts::of(writes)
        .send(client, statement, bucket, &[&gone_keys, &gone, &added_keys, &added])
        .await
}

/// The keys' part of a round trip's set-based writes of one family, as arrays by key (see
/// [`ElementWrites`]; `adds`: whether the write adds elements to the key).
struct KeyParts<'a> {
    keys: Vec<&'a str>,
    existed: Vec<bool>,
    emptied: Vec<bool>,
    bump: Vec<bool>,
    adds: Vec<bool>,
    peak: Vec<i64>,
    longest: Vec<i64>,
}

impl<'a> KeyParts<'a> {
    fn of<V>(writes: &'a [ElementWrites<V>]) -> KeyParts<'a> {
        KeyParts {
            keys: writes.iter().map(|write| write.key.as_str()).collect(),
            existed: writes.iter().map(|write| write.existed).collect(),
            emptied: writes.iter().map(|write| write.emptied).collect(),
            bump: writes.iter().map(|write| write.bump).collect(),
            adds: writes.iter().map(|write| !write.added.is_empty()).collect(),
            peak: writes.iter().map(|write| write.peak).collect(),
            longest: writes.iter().map(|write| write.longest).collect(),
        }
    }

    /// Sends `statement` with the bucket, the keys' part, then `elements`, the elements' part.
    async fn send(
        &self,
        client: &deadpool_postgres::Object,
        statement: &tokio_postgres::Statement,
        bucket: i64,
        elements: &[&(dyn ToSql + Sync)],
    ) -> Result<(), tokio_postgres::Error> {
        let keys: [&(dyn ToSql + Sync); 8] = [
            &bucket,
            &self.keys,
            &self.existed,
            &self.emptied,
            &self.bump,
            &self.adds,
            &self.peak,
            &self.longest,
        ];
        let params: Vec<&(dyn ToSql + Sync)> = keys.iter().chain(elements).copied().collect();
        client.query_one(statement, &params).await.map(drop)
    }
}

/// Sends one stream's set-based write (see [`StreamWrite`]).
async fn send_stream_write(
    client: &deadpool_postgres::Object,
    statement: &tokio_postgres::Statement,
    bucket: i64,
    write: &StreamWrite,
) -> Result<(), tokio_postgres::Error> {
    let ((found_ms, found_seq), found_len) = write.found;
    let ((to_ms, to_seq), to_len) = write.left;
    let (went_ms, went_seq) = (write.went.map(|id| id.0), write.went.map(|id| id.1));
    let ids_ms: Vec<i64> = write.entries.iter().map(|((ms, _), _)| *ms).collect();
    let ids_seq: Vec<i64> = write.entries.iter().map(|((_, seq), _)| *seq).collect();
    let args: Vec<&[u8]> = write
        .entries
        .iter()
        .flat_map(|(_, fields)| fields.iter().map(|field| &field[..]))
        .collect();
    let sizes: Vec<i64> = write.entries.iter().map(|(_, fields)| fields.len() as i64).collect();
    let starts: Vec<i64> = sizes
        .iter()
        .scan(1i64, |start, size| {
            let at = *start;
            *start += size;
            Some(at)
        })
        .collect();
    let node_ms: Vec<i64> = write.nodes.iter().map(|((ms, _), _, _)| *ms).collect();
    let node_seq: Vec<i64> = write.nodes.iter().map(|((_, seq), _, _)| *seq).collect();
    // Four ints a node, NULLs for an absent one.
    let ints = |node: &Option<StreamNode>| match node {
        Some(node) => [Some(node.last.0), Some(node.last.1), Some(node.given), Some(node.live)],
        None => [None; 4],
    };
    let node_was: Vec<Option<i64>> = write.nodes.iter().flat_map(|(_, was, _)| ints(was)).collect();
    let node_now: Vec<Option<i64>> = write.nodes.iter().flat_map(|(_, _, now)| ints(now)).collect();
    let params: [&(dyn ToSql + Sync); 22] = [
        &bucket,
        &write.key,
        &write.existed,
        &found_ms,
        &found_seq,
        &found_len,
        &to_ms,
        &to_seq,
        &to_len,
        &write.added,
        &went_ms,
        &went_seq,
        &ids_ms,
        &ids_seq,
        &args,
        &starts,
        &sizes,
        &node_ms,
        &node_seq,
        &node_was,
        &node_now,
        &write.node_size,
    ];
    client.query_one(statement, &params).await.map(drop)
}

/// Sends one list's set-based write (see [`ListWrite`]).
async fn send_list_write(
    client: &deadpool_postgres::Object,
    statement: &tokio_postgres::Statement,
    bucket: i64,
    write: &ListWrite,
) -> Result<(), tokio_postgres::Error> {
    let (found_len, found_head, found_tail) = write.found;
    let (gone_pos, gone_values): (Vec<i64>, Vec<&[u8]>) =
        write.gone.iter().map(|(pos, value)| (*pos, &value[..])).unzip();
    let (added_pos, added_values): (Vec<i64>, Vec<&[u8]>) =
        write.added.iter().map(|(pos, value)| (*pos, &value[..])).unzip();
    let (len, head, tail) = match write.left {
        Some((len, head, tail)) => (len, Some(head), Some(tail)),
        None => (0, None, None),
    };
    let params: [&(dyn ToSql + Sync); 14] = [
        &bucket,
        &write.key,
        &write.existed,
        &write.emptied,
        &found_len,
        &found_head,
        &found_tail,
        &gone_pos,
        &gone_values,
        &added_pos,
        &added_values,
        &len,
        &head,
        &tail,
    ];
    client.query_one(statement, &params).await.map(drop)
}

/// A working set's load as it answered (see [`Loaded`]).
fn loaded_value(row: &tokio_postgres::Row) -> Loaded {
    let bytes = |column: &str| -> Vec<Bytes> {
        row.get::<_, Option<Vec<Option<Vec<u8>>>>>(column)
            .unwrap_or_default()
            .into_iter()
            .map(|item| item.map(Bytes::from).unwrap_or_default())
            .collect()
    };
    Loaded {
        present: row.get::<_, Option<bool>>("present").unwrap_or(false),
        too_large: row.get::<_, Option<bool>>("too_large").unwrap_or(false),
        items: bytes("items"),
        vals: bytes("vals"),
        scores: row
            .get::<_, Option<Vec<Option<f64>>>>("scores")
            .unwrap_or_default()
            .into_iter()
            .map(|score| score.unwrap_or_default())
            .collect(),
        ints: row
            .get::<_, Option<Vec<Option<i64>>>>("ints")
            .unwrap_or_default()
            .into_iter()
            .map(|int| int.unwrap_or_default())
            .collect(),
    }
}
