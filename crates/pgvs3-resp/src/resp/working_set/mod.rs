//! The working set: what a gateway holds in memory of the typed keys its scripts touch, to
//! answer a script's typed `redis.call`s without a round trip each (issue 39).
//!
//! A call a predictor can answer from the key's value is answered at once, and its effect
//! applied to the value (a *speculated* call). A speculated write still runs in its family's
//! SQL function, later, in one round trip with the others, each with the reply it was answered:
//! PostgreSQL checks the reply against what the function answers, and a difference aborts the
//! transaction (`pgvs3.resp_expect`, functions/resp_keys.sql): the run starts over without
//! speculation. So the effects are written by the very functions a client's commands run
//! (encodings, lengths, events, wake-ups of blocked pops), and a predictor wrong about a write
//! costs a run's time, never a wrong reply. A speculated read is not sent at all: it changes
//! nothing, and the value it was answered from is the key's, exactly: a key's value comes
//! from a load in the run's own transaction, or from the working set only when the key still
//! has the version the value was left at (cache.rs), every change of a typed key by pgvs3 gives
//! it a new version, the run holds the key's lock from its load to its commit, and the batch
//! judges expiry by one frozen clock (store/kv/sql.rs `BATCH_CLOCK`). What the values are after
//! a run's writes is held to the functions by the differential tests (tests/resp/working_set.rs).
//!
//! A predictor answers `None` whenever it is not sure (an error would result, a key it does not
//! know, a form of the command it does not model, a reply past the call's limit): the call then
//! runs at once, as without a working set, and the key's value is loaded again after it in the
//! same round trip.

mod cache;
mod changes;
pub mod hash;
pub mod list;
mod run;
pub mod set;
mod sites;
pub mod stream;
pub mod zset;

use std::collections::HashMap;
use std::time::SystemTime;

use crate::store::{Family, KeyType, Loaded, TypedCall, TypedRow};

pub use cache::WorkingSet;
pub use run::RunSet;
pub use sites::{Borrowing, CallSite};

/// A typed key's value, as far as the working set holds it.
#[derive(Debug, Clone)]
pub enum Value {
    Hash(hash::Hash),
    Set(set::Set),
    Zset(zset::Zset),
    List(list::List),
    Stream(stream::Stream),
}

/// The keys a run knows the values of: `Some(value)`, or `None` for a key known to be absent.
/// A key not in the map is not known, and no call on it is predicted.
pub type Known = HashMap<String, Option<Value>>;

impl Value {
    /// The statement that loads a key of this type (see [`Loaded`]).
    pub fn load_sql(kind: KeyType) -> &'static str {
        match kind {
            KeyType::Hash => hash::LOAD,
            KeyType::Set => set::LOAD,
            KeyType::Zset => zset::LOAD,
            KeyType::List => list::LOAD,
            KeyType::Stream => stream::LOAD,
        }
    }

    /// The value a load answered; `None` when the key is absent or was too large to load
    /// (the caller tells them apart by `loaded.present`).
    pub fn from_loaded(kind: KeyType, loaded: Loaded) -> Option<Value> {
        if !loaded.present || loaded.too_large {
            return None;
        }
        match kind {
            KeyType::Hash => hash::Hash::from_loaded(loaded).map(Value::Hash),
            KeyType::Set => set::Set::from_loaded(loaded).map(Value::Set),
            KeyType::Zset => zset::Zset::from_loaded(loaded).map(Value::Zset),
            KeyType::List => list::List::from_loaded(loaded).map(Value::List),
            KeyType::Stream => stream::Stream::from_loaded(loaded).map(Value::Stream),
        }
    }

    pub fn kind(&self) -> KeyType {
        match self {
            Value::Hash(_) => KeyType::Hash,
            Value::Set(_) => KeyType::Set,
            Value::Zset(_) => KeyType::Zset,
            Value::List(_) => KeyType::List,
            Value::Stream(_) => KeyType::Stream,
        }
    }

    /// Whether the working set keeps the value past its run. A stream made within the run is
    /// not: its node size was never loaded, so its nodes are unknown from its second entry and
    /// its writes could not go set-based; the next run loads it instead, nodes and all. Nor is
    /// a list whose elements' positions are not known (list.rs).
    pub fn kept(&self) -> bool {
        match self {
            Value::Stream(stream) => stream.sized(),
            Value::List(list) => list.placed(),
            _ => true,
        }
    }

    /// Whether it is no key to the calls: a list the run emptied, held until its write is
    /// sent (list.rs).
    pub fn is_void(&self) -> bool {
        matches!(self, Value::List(list) if list.is_empty())
    }

    /// About the memory the value takes (its elements' bytes and some per element).
    pub fn bytes(&self) -> usize {
        match self {
            Value::Hash(value) => value.bytes(),
            Value::Set(value) => value.bytes(),
            Value::Zset(value) => value.bytes(),
            Value::List(value) => value.bytes(),
            Value::Stream(value) => value.bytes(),
        }
    }
}

/// The row `call` will answer, predicted from the values in `known`, whose entries it then
/// changes as the call will (a key the call empties becomes `None`, or a void list:
/// [`Value::is_void`]). `None`: not predicted,
/// and `known` is left as it was. `now` is the batch's clock (a stream's new IDs).
pub fn predict(call: &TypedCall, known: &mut Known, now: SystemTime) -> Option<TypedRow> {
    match call.family() {
        Family::Hash => hash::predict(call, known),
        Family::Set => set::predict(call, known),
        Family::Zset => zset::predict(call, known),
        Family::List => list::predict(call, known),
        Family::Stream => stream::predict(call, known, now),
        Family::Keys | Family::StreamGroup => None,
    }
}

/// The type of the keys a call of `family` leaves behind (what its keys' values are loaded as
/// after it ran), if one.
pub fn family_type(family: Family) -> Option<KeyType> {
    match family {
        Family::Hash => Some(KeyType::Hash),
        Family::Set => Some(KeyType::Set),
        Family::Zset => Some(KeyType::Zset),
        Family::List => Some(KeyType::List),
        Family::Stream => Some(KeyType::Stream),
        Family::Keys | Family::StreamGroup => None,
    }
}

/// Whether a reply of `items` is surely within `call`'s reply limit (a quarter of it, with 16
/// bytes an element): a reply past the limit is cut in the database, which no prediction is.
pub fn within_limit(call: &TypedCall, items: &[Option<bytes::Bytes>]) -> bool {
    let Some(limit) = call.reply_limit else {
        return true;
    };
    let bytes: usize = items
        .iter()
        .map(|item| item.as_ref().map_or(0, bytes::Bytes::len) + 16)
        .sum();
    i64::try_from(bytes).is_ok_and(|bytes| bytes <= limit / 4)
}

/// A loaded list of `elements`, for unit tests.
#[cfg(test)]
pub fn loaded_list(elements: &[&str]) -> Option<Value> {
    let loaded = Loaded {
        present: true,
        items: elements
            .iter()
            .map(|element| bytes::Bytes::copy_from_slice(element.as_bytes()))
            .collect(),
        ..Default::default()
    };
    Some(Value::List(list::List::from_loaded(loaded).expect("a list")))
}

/// A loaded set of `members`, for unit tests: `large` 1, 0 or -1 (NULL), and the bucket's intset
/// limit.
#[cfg(test)]
pub fn loaded_set(members: &[&str], large: i64, entries: i64) -> Option<Value> {
    let loaded = Loaded {
        present: true,
        items: members
            .iter()
            .map(|member| bytes::Bytes::copy_from_slice(member.as_bytes()))
            .collect(),
        ints: vec![large, entries],
        ..Default::default()
    };
    Some(Value::Set(set::Set::from_loaded(loaded).expect("a set")))
}

/// The keys of a unit test's run, as `(key, value)` pairs.
#[cfg(test)]
pub fn known(entries: &[(&str, Option<Value>)]) -> Known {
    entries
        .iter()
        .map(|(key, value)| (key.to_string(), value.clone()))
        .collect()
}
