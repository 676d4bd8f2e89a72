//! The gateway's working set: the values of typed keys its script runs left, by bucket and key,
//! each with the version its key had when the run that left it committed. A run takes a value
//! out when the key it locked still has that version (no other writer came between), and puts
//! it back when it commits; so one key's value is in one run at a time, as the key's lock is.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use bytes::Bytes;

use crate::store::{KvBatch, StringValue};

use super::Value;
use super::sites::CallSites;

/// Values past this share of the budget are not kept: one key must not push out every other.
const LARGEST_SHARE: usize = 4;

/// The longest string value kept (a job queue's lock token, a flag): see [`WorkingSet::strings`].
const KEPT_STRING: usize = 1024;

/// The most bytes of kept strings (values and names); past it, all are dropped at once.
const STRINGS_BUDGET: usize = 8 << 20;

pub struct WorkingSet {
    budget: usize,
    inner: Mutex<Inner>,
    /// What scripts' calls may borrow (sites.rs).
    pub sites: CallSites,
    /// Short strings script runs wrote, as they wrote them: a run that uses one on the way
    /// borrows it (run.rs `RunSet::borrow_string`), checked by its content as it commits, so a
    /// string changed since (by anyone) costs a miss, never a wrong reply.
    strings: Mutex<Strings>,
}

#[derive(Default)]
struct Strings {
    values: HashMap<(i64, String), StringValue>,
    bytes: usize,
}

#[derive(Default)]
struct Inner {
    values: HashMap<(i64, String), Held>,
    /// Keys by the tick they were put back at: the oldest goes first when over budget.
    order: BTreeMap<u64, (i64, String)>,
    tick: u64,
    bytes: usize,
}

struct Held {
    version: String,
    value: Value,
    tick: u64,
    bytes: usize,
}

impl WorkingSet {
    /// A working set of at most `budget` bytes of values.
    pub fn new(budget: usize) -> WorkingSet {
        WorkingSet {
            budget,
            inner: Mutex::default(),
            sites: CallSites::default(),
            strings: Mutex::default(),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes out the value of `key` if it was left at `version`; a value of another version
    /// is dropped (the key changed since).
    pub fn take(&self, bucket: i64, key: &str, version: &str) -> Option<Value> {
        let mut inner = self.inner();
        let held = inner.values.remove(&(bucket, key.to_owned()))?;
        inner.order.remove(&held.tick);
        inner.bytes -= held.bytes;
        (held.version == version).then_some(held.value)
    }

    /// Takes out the value of `key`, whatever version it was left at, with that version: for a
    /// run that borrows the key (run.rs), which checks the version when it commits.
    pub fn take_any(&self, bucket: i64, key: &str) -> Option<(String, Value)> {
        let mut inner = self.inner();
        let held = inner.values.remove(&(bucket, key.to_owned()))?;
        inner.order.remove(&held.tick);
        inner.bytes -= held.bytes;
        Some((held.version, held.value))
    }

    fn strings(&self) -> std::sync::MutexGuard<'_, Strings> {
        self.strings.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The string `key` held as a run left it, if one is kept.
    pub fn kept_string(&self, bucket: i64, key: &str) -> Option<StringValue> {
        self.strings().values.get(&(bucket, key.to_owned())).cloned()
    }

    /// The strings `batch` changed, to keep once it commits ([`WorkingSet::keep_strings`]).
    pub fn changed_strings(batch: &KvBatch) -> Vec<(String, Option<StringValue>)> {
        batch.changed_strings(KEPT_STRING)
    }

    /// Keeps the strings a run committed as it committed them (`None`: changed otherwise, or
    /// too long: dropped).
    pub fn keep_strings(&self, bucket: i64, changed: Vec<(String, Option<StringValue>)>) {
        for (key, string) in changed {
            self.keep_string(bucket, key, string);
        }
    }

    fn keep_string(&self, bucket: i64, key: String, string: Option<StringValue>) {
        let mut strings = self.strings();
        let id = (bucket, key);
        if let Some(old) = strings.values.remove(&id) {
            strings.bytes -= string_bytes(&id.1, &old);
        }
        let Some(mut string) = string.filter(|string| string.value.len() <= KEPT_STRING) else {
            return;
        };
        // Its own bytes: a value sliced from a client's read buffer would hold all of it.
        string.value = Bytes::copy_from_slice(&string.value);
        let bytes = string_bytes(&id.1, &string);
        if strings.bytes + bytes > STRINGS_BUDGET {
            strings.values.clear();
            strings.bytes = 0;
        }
        strings.bytes += bytes;
        strings.values.insert(id, string);
    }

    /// Drops what is held of `key` (a run changed it otherwise than through the working set).
    pub fn forget(&self, bucket: i64, key: &str) {
        let mut inner = self.inner();
        if let Some(held) = inner.values.remove(&(bucket, key.to_owned())) {
            inner.order.remove(&held.tick);
            inner.bytes -= held.bytes;
        }
    }

    /// Puts back the value of `key` as of `version`, dropping the oldest values past the budget.
    pub fn put(&self, bucket: i64, key: String, version: String, value: Value) {
        let bytes = value.bytes() + key.len() + 64;
        if bytes > self.budget / LARGEST_SHARE {
            self.forget(bucket, &key);
            return;
        }
        let mut inner = self.inner();
        inner.tick += 1;
        let tick = inner.tick;
        let id = (bucket, key);
        if let Some(old) = inner.values.remove(&id) {
            inner.order.remove(&old.tick);
            inner.bytes -= old.bytes;
        }
        inner.order.insert(tick, id.clone());
        inner.values.insert(
            id,
            Held {
                version,
                value,
                tick,
                bytes,
            },
        );
        inner.bytes += bytes;
        while inner.bytes > self.budget {
            let Some((_, oldest)) = inner.order.pop_first() else {
                break;
            };
            if let Some(held) = inner.values.remove(&oldest) {
                inner.bytes -= held.bytes;
            }
        }
    }
}

/// What a kept string counts against [`STRINGS_BUDGET`]: its value, its name and about what
/// the map spends on an entry.
fn string_bytes(key: &str, string: &StringValue) -> usize {
    string.value.len() + key.len() + 96
}
