//! One script run's share of the working set: the values of the keys it knows, and the calls it
//! answered from them that have not been sent yet.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::changes::Track;
use super::{Known, Value, WorkingSet, family_type, list, predict};
use crate::resp::codec::Reply;
use crate::resp::typed::Typed;
use crate::store::{
    Borrowed, Family, HashWrite, KvBatch, KvValue, ListWrite, SetWrite, Speculation, StoreError, StoreResult,
    StreamWrite, TypedCall, TypedRow, ZsetWrite,
};

/// The most elements of one key a run loads into the working set.
const LOAD_LIMIT: i64 = 10_000;

/// What a value is kept at: its key's version, under the setting of the keyspace's encoding
/// parameters it was loaded or judged by (`KvBatch::encodings`). A CONFIG SET of one changes
/// how the next writes encode the key without moving its version; a value kept under the
/// setting before is not taken then (its limits would judge the encoding, and so the order of
/// HGETALL or SMEMBERS, as the database no longer does).
fn kept_as(version: &str, encodings: Option<&str>) -> String {
    format!("{version}/{}", encodings.unwrap_or("-"))
}

/// The version a value was kept at ([`kept_as`]), when under the setting `encodings`.
fn kept_version<'a>(kept: &'a str, encodings: Option<&str>) -> Option<&'a str> {
    let (version, setting) = kept.rsplit_once('/')?;
    (setting == encodings.unwrap_or("-")).then_some(version)
}

/// The set-based writes of a round trip's hashes, sorted sets, sets and streams.
#[derive(Default)]
struct ElementWrites {
    hashes: Vec<HashWrite>,
    zsets: Vec<ZsetWrite>,
    sets: Vec<SetWrite>,
    streams: Vec<StreamWrite>,
}

pub struct RunSet {
    set: Arc<WorkingSet>,
    bucket: i64,
    known: Known,
    /// Calls answered from `known`, not sent yet, with the rows they were answered.
    pending: Vec<(TypedCall, TypedRow)>,
    /// Calls answered so far whose check in the database passed.
    confirmed: u64,
    /// The keys `pending` writes to whose writes go set-based (see [`RunSet::send`]).
    tracks: HashMap<String, Track>,
    /// Keys borrowed (see [`RunSet::borrow_kept`]) and not checked yet, each with what it was
    /// taken to be.
    borrowed: Vec<(String, Borrowed)>,
    /// Keys borrowed and checked.
    checked: u64,
}

impl RunSet {
    pub fn new(set: Arc<WorkingSet>, bucket: i64) -> RunSet {
        RunSet {
            set,
            bucket,
            known: Known::new(),
            pending: Vec::new(),
            confirmed: 0,
            tracks: HashMap::new(),
            borrowed: Vec::new(),
            checked: 0,
        }
    }

    /// Learns the keys among `keys` it does not know yet, as the batch loaded them: an absent
    /// key as absent, a typed one from the working set when the set holds its loaded version.
    /// `stale` keys changed in the database since the batch loaded them: not learned.
    fn learn(&mut self, batch: &KvBatch, keys: &[String], stale: &HashSet<String>) {
        for key in keys {
            if self.known.contains_key(key) || stale.contains(key) {
                continue;
            }
            match batch.get(key) {
                None => {
                    self.known.insert(key.clone(), None);
                }
                Some(entry) => {
                    let (KvValue::Typed(kind), Some((version, _))) = (&entry.value, &entry.version) else {
                        continue;
                    };
                    if let Some(value) = self.set.take(self.bucket, key, &kept_as(version, batch.encodings()))
                        && value.kind() == *kind
                    {
                        self.known.insert(key.clone(), Some(value));
                    }
                }
            }
        }
    }

    /// Borrows `key`, which the run's batch has not loaded (nor locked): takes its value from
    /// the working set at whatever version it was kept at, so that calls on it are answered
    /// without the load's round trip, which a key first used on the way cost inside the run's
    /// locks (a job queue's script finds the job it works on that way). The first round trip
    /// the run sends from now on (its commit at the latest) locks the key and checks that it
    /// still has that version, ahead of everything else, and fails the run (a miss: it starts
    /// over without speculation) if not. False when the working set keeps no value of it (under
    /// the keyspace's encoding setting `encodings`).
    pub fn borrow_kept(&mut self, key: &str, encodings: Option<&str>) -> bool {
        if self.known.contains_key(key) {
            return true;
        }
        if let Some((kept, value)) = self.set.take_any(self.bucket, key)
            && let Some(version) = kept_version(&kept, encodings)
        {
            self.borrowed
                .push((key.to_owned(), Borrowed::Typed(version.to_owned())));
            self.known.insert(key.to_owned(), Some(value));
            return true;
        }
        false
    }

    /// Borrows `key` as absent: the batch takes it so (`KvBatch::assume_absent`), and the
    /// check goes as for [`RunSet::borrow_kept`]'s.
    pub fn borrow_absent(&mut self, key: &str) {
        self.borrowed.push((key.to_owned(), Borrowed::Absent));
    }

    /// Borrows the string `key` as a run left it, when the working set keeps it: the batch
    /// takes it so (`KvBatch::assume_string`), and the check compares the row's value, expiry
    /// and form with it. False when none is kept (or it expired by the batch's clock).
    pub fn borrow_string(&mut self, key: &str, batch: &mut KvBatch) -> bool {
        let Some(string) = self.set.kept_string(self.bucket, key) else {
            return false;
        };
        if !batch.assume_string(key, string.clone()) {
            return false;
        }
        self.borrowed.push((key.to_owned(), Borrowed::String(string)));
        true
    }

    /// Whether keys borrowed and not checked yet must be before a command (not a typed one)
    /// runs on `keys`: one of them borrowed from a kept typed value (the batch holds nothing of
    /// it: it must be checked before it is loaded), or any borrowed key at all before a command
    /// that does not stay in its batch (`stays`; `KeyCommand::stays_in_batch`): its statements
    /// go out with the batch's string changes so far, which may be writes to borrowed keys.
    pub fn borrows(&self, keys: &[&String], stays: bool) -> bool {
        self.borrowed
            .iter()
            .any(|(key, taken)| !stays || matches!(taken, Borrowed::Typed(_)) && keys.contains(&key))
    }

    /// A typed command: answered from what the run knows, or else run now, with the calls
    /// answered before it, and its keys loaded after it (one round trip).
    pub async fn call(&mut self, typed: &Typed, batch: &mut KvBatch, stale: &HashSet<String>) -> StoreResult<Reply> {
        let call = &typed.call;
        if typed.blocking.is_none() {
            self.learn(batch, &call.keys, stale);
            let tracked = Track::kept(call.family()) && call.writes();
            let present = |known: &Known, key: &String| matches!(known.get(key), Some(Some(value)) if !value.is_void());
            // Each key the call writes to (LMOVE's two).
            let was_present: Vec<bool> = call.keys.iter().map(|key| present(&self.known, key)).collect();
            if let Some(row) = predict(call, &mut self.known, batch.now) {
                if tracked {
                    for (key, was_present) in call.keys.iter().zip(was_present) {
                        let track = self
                            .tracks
                            .entry(key.clone())
                            .or_insert(Track::new(call.family(), was_present));
                        track.note(was_present, present(&self.known, key));
                    }
                }
                self.pending.push((call.clone(), row.clone()));
                return Ok(typed.reply(row));
            }
        }
        let kind = family_type(call.family());
        let loads = match kind {
            Some(kind) => call
                .keys
                .iter()
                .map(|key| (Value::load_sql(kind), key.clone()))
                .collect(),
            None => Vec::new(),
        };
        let mut rows = self.send(batch, Some(call), loads, Vec::new(), false).await?;
        let row = rows.rows.pop().unwrap_or_default();
        match (kind, &row.err) {
            (Some(kind), None) => {
                for (key, loaded) in call.keys.iter().zip(rows.loaded) {
                    match (loaded.present, Value::from_loaded(kind, loaded)) {
                        (false, _) => self.known.insert(key.clone(), None),
                        (true, Some(value)) => self.known.insert(key.clone(), Some(value)),
                        (true, None) => self.known.remove(key),
                    };
                }
            }
            _ => {
                for key in &call.keys {
                    self.known.remove(key);
                }
            }
        }
        Ok(typed.reply(row))
    }

    /// Whether a call answered but not sent yet touches one of `keys`.
    pub fn owes(&self, keys: &[&String]) -> bool {
        self.pending
            .iter()
            .any(|(call, _)| call.keys.iter().any(|key| keys.contains(&key)))
    }

    /// Sends the calls answered so far (before a command that works on their keys in the
    /// gateway, which reloads them).
    pub async fn flush(&mut self, batch: &mut KvBatch) -> StoreResult<()> {
        if !self.pending.is_empty() || !self.borrowed.is_empty() {
            self.send(batch, None, Vec::new(), Vec::new(), false).await?;
        }
        Ok(())
    }

    /// Forgets `keys`: a command changes them otherwise than through the working set.
    pub fn forget<'a>(&mut self, keys: impl IntoIterator<Item = &'a String>) {
        for key in keys {
            self.known.remove(key);
            self.set.forget(self.bucket, key);
        }
    }

    /// Forgets every key (a keyspace-wide command ran).
    pub fn forget_all(&mut self) {
        let keys: Vec<String> = self.known.keys().cloned().collect();
        self.forget(&keys);
    }

    /// Commits the batch, with the calls still owed, and leaves the values the run knows (those
    /// it keeps, [`Value::kept`]) in the working set at the versions their keys commit with.
    /// Answers how many of the run's calls were answered from the working set, and how many
    /// keys it borrowed (all checked by then).
    pub async fn commit(mut self, mut batch: KvBatch) -> StoreResult<(u64, u64)> {
        let encodings = batch.encodings().map(str::to_owned);
        let strings = WorkingSet::changed_strings(&batch);
        let held: Vec<String> = self
            .known
            .iter()
            .filter(|(_, value)| value.as_ref().is_some_and(Value::kept))
            .map(|(key, _)| key.clone())
            .collect();
        if self.pending.is_empty() && held.is_empty() && self.borrowed.is_empty() {
            batch.commit().await?;
            self.set.keep_strings(self.bucket, strings);
            return Ok((self.confirmed, self.checked));
        }
        let sent = match self.send(&mut batch, None, Vec::new(), held, true).await {
            // The COMMIT went out behind the failed check and rolled back: the connection is
            // fine to keep (a batch dropped in its transaction closes its connection).
            Err(StoreError::Mispredicted) => {
                batch.rollback().await?;
                return Err(StoreError::Mispredicted);
            }
            sent => sent?,
        };
        for committed in sent.versions {
            // A list whose write went as the calls is not kept (its positions unknown); nor a
            // value whose limits may be those of the encoding parameters before a CONFIG SET
            // that came during the run.
            if let Some(Some(mut value)) = self.known.remove(&committed.key)
                && value.kept()
                && committed.encodings == encodings
            {
                if let Value::Hash(hash) = &mut value {
                    hash.settle(committed.large, committed.hash_limits);
                }
                let kept = kept_as(&committed.version, committed.encodings.as_deref());
                self.set.put(self.bucket, committed.key, kept, value);
            }
        }
        self.set.keep_strings(self.bucket, strings);
        Ok((self.confirmed, self.checked))
    }

    /// Sends the owed writes, then `call` (run as usual), then the loads, and reads `versions`;
    /// with `commit`, commits after them. The owed reads are not sent: each was answered from a
    /// value the key held, under the batch's lock, at the version the run found it at, judged by
    /// the batch's frozen clock, and so answers as its function would there; a read changes
    /// nothing for a later call to depend on. (Replaying them was a third of a BullMQ job's
    /// calls, each a function's run inside the queue keys' locks.)
    ///
    /// A hash's, sorted set's, set's, stream's or list's owed writes go as one set-based write
    /// of what they changed (`changes.rs`, `stream.rs`, `list.rs`), ahead of the other calls,
    /// when no owed call of another family writes to its key (a key can change type within a
    /// run: then the calls keep their order) and the run still holds its value (and a stream's
    /// nodes, a list's positions); else as the calls. A call is left out when all its keys
    /// (LMOVE's two) are written so.
    async fn send(
        &mut self,
        batch: &mut KvBatch,
        call: Option<&TypedCall>,
        loads: Vec<(&'static str, String)>,
        versions: Vec<String>,
        commit: bool,
    ) -> StoreResult<crate::store::Speculated> {
        let pending = std::mem::take(&mut self.pending);
        let answered = pending.len() as u64;
        let borrowed = std::mem::take(&mut self.borrowed);
        let borrowed_count = borrowed.len() as u64;
        // Before element_writes, which drains the tracks.
        let list_writes = self.list_writes(&pending);
        let ElementWrites {
            hashes: hash_writes,
            zsets: zset_writes,
            sets: set_writes,
            streams: stream_writes,
        } = self.element_writes(&pending);
        let written: HashSet<String> = hash_writes
            .iter()
            .map(|write| write.key.clone())
            .chain(zset_writes.iter().map(|write| write.key.clone()))
            .chain(set_writes.iter().map(|write| write.key.clone()))
            .chain(stream_writes.iter().map(|write| write.key.clone()))
            .chain(list_writes.iter().map(|write| write.key.clone()))
            .collect();
        let owed: Vec<&(TypedCall, TypedRow)> = pending
            .iter()
            .filter(|(call, _)| {
                call.writes() && !(Track::kept(call.family()) && call.keys.iter().all(|key| written.contains(key)))
            })
            .collect();
        let calls: Vec<&TypedCall> = owed.iter().map(|(call, _)| call).chain(call).collect();
        let speculation = Speculation {
            expected: owed.iter().map(|(_, row)| Some(row)).collect(),
            loads,
            load_limit: LOAD_LIMIT,
            versions,
            hash_writes: hash_writes.into_iter().filter(|write| !write.is_empty()).collect(),
            zset_writes: zset_writes.into_iter().filter(|write| !write.is_empty()).collect(),
            set_writes: set_writes.into_iter().filter(|write| !write.is_empty()).collect(),
            stream_writes: stream_writes.into_iter().filter(|write| !write.is_empty()).collect(),
            list_writes: list_writes.into_iter().filter(|write| !write.is_empty()).collect(),
            borrowed,
        };
        let mut sent = batch.typed_speculated(&calls, &speculation, commit).await?;
        self.confirmed += answered;
        self.checked += borrowed_count;
        // The owed calls' rows were answered already: only `call`'s is left.
        sent.rows.drain(..owed.len());
        Ok(sent)
    }

    /// The set-based writes of the keys the `pending` calls write to (see [`RunSet::send`]);
    /// every value's record of changes starts over, the database having them once they are
    /// sent.
    fn element_writes(&mut self, pending: &[(TypedCall, TypedRow)]) -> ElementWrites {
        let mut writes = ElementWrites::default();
        let ElementWrites {
            hashes,
            zsets,
            sets,
            streams,
        } = &mut writes;
        for (key, track) in self.tracks.drain() {
            let shared = pending
                .iter()
                .any(|(call, _)| call.writes() && call.family() != track.family && call.keys.contains(&key));
            match (self.known.get_mut(&key), track.family) {
                (Some(Some(Value::Hash(hash))), _) if shared => hash.changes().clear(),
                (Some(Some(Value::Zset(zset))), _) if shared => zset.changes().clear(),
                (Some(Some(Value::Set(set))), _) if shared => set.changes().clear(),
                (Some(Some(Value::Stream(stream))), _) if shared => stream.clear(),
                (Some(Some(Value::Hash(hash))), Family::Hash) => hashes.push(hash.write(track.start(&key))),
                (Some(Some(Value::Zset(zset))), Family::Zset) => zsets.push(zset.write(track.start(&key))),
                (Some(Some(Value::Set(set))), Family::Set) => sets.push(set.write(track.start(&key))),
                (Some(Some(Value::Stream(stream))), Family::Stream) => {
                    streams.extend(stream.write(&key, track.existed()));
                }
                (Some(None), Family::Hash) if !shared => hashes.push(track.start(&key)),
                (Some(None), Family::Zset) if !shared => zsets.push(track.start(&key)),
                (Some(None), Family::Set) if !shared => sets.push(track.start(&key)),
                _ => {}
            }
        }
        writes
    }

    /// The set-based writes of the lists the `pending` calls write to (see [`RunSet::send`]).
    /// The two lists of an LMOVE go set-based together or not at all (its call is sent whole).
    /// A list whose writes go as the calls forgets its positions; one emptied is no key now.
    fn list_writes(&mut self, pending: &[(TypedCall, TypedRow)]) -> Vec<ListWrite> {
        let mut writes: HashMap<String, Option<ListWrite>> = HashMap::new();
        for (key, track) in &self.tracks {
            let shared = pending
                .iter()
                .any(|(call, _)| call.writes() && call.family() != track.family && call.keys.contains(key));
            let write = match (self.known.get(key), track.family) {
                (Some(Some(Value::List(list))), Family::List) if !shared => list.write(key, track.existed()),
                (Some(None), Family::List) if !shared && !track.existed() => Some(list::nothing(key)),
                (Some(Some(Value::List(_))), _) | (_, Family::List) => None,
                _ => continue,
            };
            writes.insert(key.clone(), write);
        }
        let moves: Vec<&[String]> = pending
            .iter()
            .filter(|(call, _)| call.family() == Family::List && call.keys.len() > 1)
            .map(|(call, _)| &call.keys[..])
            .collect();
        let unwritten =
            |writes: &HashMap<String, Option<ListWrite>>, key: &String| !matches!(writes.get(key), Some(Some(_)));
        while let Some(key) = moves
            .iter()
            .filter(|keys| keys.iter().any(|key| unwritten(&writes, key)))
            .flat_map(|keys| keys.iter())
            .find(|key| !unwritten(&writes, key))
        {
            writes.insert(key.clone(), None);
        }
        let mut sent = Vec::new();
        for (key, write) in writes {
            let Some(Some(Value::List(list))) = self.known.get_mut(&key) else {
                sent.extend(write);
                continue;
            };
            match &write {
                Some(write) => list.wrote(write),
                None => list.unplace(),
            }
            if list.is_empty() {
                self.known.insert(key, None);
            }
            sent.extend(write);
        }
        sent
    }
}
