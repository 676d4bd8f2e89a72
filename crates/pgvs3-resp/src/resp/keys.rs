//! Key commands applied to the loaded state of a batch. Strings (an object's bytes) are changed
//! in memory; commands on typed keys (hashes, sets, sorted sets, lists) run in SQL, in runs that
//! go out together (see [`apply_all`]). A string command on a typed key answers WRONGTYPE.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::codec::Reply;
use super::command::{Expiry, KeyCommand, ObjectInfo, parse_integer};
use crate::store::{KeyType, KeysOp, KvBatch, KvEntry, KvValue, StoreResult, StringForm, TypedCall};

pub fn wrongtype() -> Reply {
    Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value")
}

/// Runs commands in order against the batch. Consecutive typed commands go out together (one
/// round trip, after what the batch changed in memory before them); the keys they touched are
/// loaded again before a later command works on them in memory. With `commit`, a run of typed
/// commands at the end commits with them.
pub async fn apply_all(commands: &[&KeyCommand], batch: &mut KvBatch, commit: bool) -> StoreResult<Vec<Reply>> {
    let mut replies = Vec::with_capacity(commands.len());
    let mut i = 0;
    while i < commands.len() {
        let run: Vec<&super::typed::Typed> = commands[i..]
            .iter()
            .map_while(|command| match command {
                KeyCommand::Typed(typed) => Some(&**typed),
                _ => None,
            })
            .collect();
        if run.is_empty() {
            replies.push(apply(commands[i], batch).await?);
            i += 1;
            continue;
        }
        i += run.len();
        let last = i == commands.len();
        // Consecutive writes of one kind on one key go as one call (see `coalesce.rs`).
        let groups = super::coalesce::coalesce(&run);
        let calls: Vec<&TypedCall> = groups.iter().map(super::coalesce::Group::call).collect();
        let rows = batch.typed(&calls, commit && last).await?;
        for (group, row) in groups.iter().zip(rows) {
            replies.extend(group.replies(row));
        }
        if !last {
            let mut touched: Vec<String> = calls.iter().flat_map(|call| call.keys.iter().cloned()).collect();
            touched.sort_unstable();
            touched.dedup();
            batch.reload(&touched).await?;
        }
    }
    Ok(replies)
}

/// RENAME or COPY of a typed key: its elements move in SQL, then the batch sees the result.
async fn move_typed(batch: &mut KvBatch, op: KeysOp, from: &str, to: &str, only_new: bool) -> StoreResult<Reply> {
    let mut call = TypedCall::new(op, vec![from.to_owned(), to.to_owned()], Vec::new());
    call.ints = vec![Some(i64::from(only_new))];
    let row = batch.typed(&[&call], false).await?;
    batch.reload(&call.keys).await?;
    let row = row.into_iter().next().unwrap_or_default();
    Ok(match (row.err, op, only_new) {
        (Some(err), ..) => Reply::Error(err),
        (None, KeysOp::Rename, false) => Reply::OK,
        (None, ..) => Reply::Integer(row.n.unwrap_or(0)),
    })
}

/// The latest expiry kept, about the year 287,000. Redis takes expiries up to the year 292
/// million; PostgreSQL's timestamps end in the year 294,276, so later ones are kept as this.
const LATEST_EXPIRY: Duration = Duration::from_secs(9_000_000_000_000);

/// When an expiry falls, within what the store can hold: one before 1970 is in the past all
/// the same, one past [`LATEST_EXPIRY`] is as good as never.
pub(crate) fn at(now: SystemTime, expiry: Expiry) -> SystemTime {
    let latest = UNIX_EPOCH + LATEST_EXPIRY;
    let when = match expiry {
        Expiry::In(millis) if millis >= 0 => now.checked_add(Duration::from_millis(millis as u64)),
        Expiry::In(millis) => now.checked_sub(Duration::from_millis(millis.unsigned_abs())),
        Expiry::At(millis) if millis >= 0 => UNIX_EPOCH.checked_add(Duration::from_millis(millis as u64)),
        Expiry::At(_) => Some(UNIX_EPOCH),
    };
    let past = matches!(expiry, Expiry::In(millis) | Expiry::At(millis) if millis < 0);
    when.unwrap_or(if past { UNIX_EPOCH } else { latest })
        .clamp(UNIX_EPOCH, latest)
}

fn unix_millis(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_millis() as i64,
        Err(before) => -(before.duration().as_millis() as i64),
    }
}

/// Runs one key command against the batch. Store errors (the database failing) end the batch.
async fn apply(command: &KeyCommand, batch: &mut KvBatch) -> StoreResult<Reply> {
    use KeyCommand::*;
    let now = batch.now;
    let reply = match command {
        Typed(_) => unreachable!("apply_all runs typed commands"),
        Family(command) => Box::pin(command.apply(batch)).await?,
        Str(string) if string.needs_strings() && string.keys().iter().any(|key| batch.key_type(key).is_some()) => {
            wrongtype()
        }
        Str(string) => string.apply(batch).await?,
        Object { key, subcommand } => match batch.get(key) {
            None => Reply::Nil,
            Some(entry) => match subcommand {
                ObjectInfo::Encoding => Reply::text(match entry.value.key_type() {
                    Some(kind @ (KeyType::Hash | KeyType::Set | KeyType::Zset)) => {
                        collection_encoding(kind, batch.typed_large(key).await?)
                    }
                    // Redis 7.0's only list encoding.
                    Some(KeyType::List) => "quicklist",
                    Some(KeyType::Stream) => "stream",
                    None => string_encoding(entry),
                }),
                // No access is tracked: with the `noeviction` policy CONFIG GET reports, Redis
                // answers FREQ with this error; IDLETIME counts every key as just used.
                ObjectInfo::Freq => Reply::error(super::commands::object::NO_LFU),
                ObjectInfo::IdleTime => Reply::Integer(0),
                ObjectInfo::RefCount => Reply::Integer(1),
            },
        },
        MemoryUsage { key, samples } => match batch.get(key).map(|entry| (entry.value.key_type(), entry.value.len())) {
            None => Reply::Nil,
            Some((Some(kind), _)) => {
                let elements = batch.typed_size(key, kind, *samples).await?;
                Reply::Integer(stored_size(key, elements))
            }
            Some((None, len)) => Reply::Integer(stored_size(key, len)),
        },
        Del(keys) => Reply::Integer(keys.iter().filter(|key| batch.delete(key)).count() as i64),
        Exists(keys) => Reply::Integer(keys.iter().filter(|key| batch.get(key).is_some()).count() as i64),
        Expire { key, when, condition } => {
            let Some(entry) = batch.get(key) else {
                return Ok(Reply::Integer(0));
            };
            let new = at(now, *when);
            let current = entry.expires_at;
            let allowed = condition.allows(current, new);
            if allowed && let Err(refused) = expire_or_delete(batch, key, new) {
                return Ok(refused);
            }
            Reply::bool(allowed)
        }
        ExpireTime { key, millis } => match batch.get(key) {
            None => Reply::Integer(-2),
            Some(entry) => match entry.expires_at {
                None => Reply::Integer(-1),
                Some(when) if *millis => Reply::Integer(unix_millis(when)),
                Some(when) => Reply::Integer(unix_millis(when) / 1000),
            },
        },
        Ttl { key, millis } => match batch.get(key) {
            None => Reply::Integer(-2),
            Some(entry) => match entry.expires_at {
                None => Reply::Integer(-1),
                Some(when) => {
                    let left = unix_millis(when) - unix_millis(now);
                    // Redis rounds TTL to the nearest second.
                    Reply::Integer(if *millis {
                        left.max(0)
                    } else {
                        ((left + 500) / 1000).max(0)
                    })
                }
            },
        },
        Persist(key) => {
            let has_ttl = batch.get(key).is_some_and(|entry| entry.expires_at.is_some());
            if has_ttl {
                batch.set_expiry(key, None);
            }
            Reply::bool(has_ttl)
        }
        Type(key) => Reply::Simple(match (batch.get(key), batch.key_type(key)) {
            (None, _) => "none",
            (Some(_), None) => "string",
            (Some(_), Some(typed)) => typed.name(),
        }),
        Rename { from, to, only_new } if batch.key_type(from).is_some() => {
            move_typed(batch, KeysOp::Rename, from, to, *only_new).await?
        }
        // A client's COPY in its own database has no DB left (`resolve_copy_db`).
        Copy { db: Some(_), .. } => super::command::copy_across_databases(),
        // Before the source is looked up, as in Redis.
        Copy { from, to, .. } if from == to => Reply::error("ERR source and destination objects are the same"),
        Copy { from, to, replace, .. } if batch.key_type(from).is_some() => {
            move_typed(batch, KeysOp::Copy, from, to, !*replace).await?
        }
        Rename { from, to, only_new } => {
            let Some(expires_at) = batch.get(from).map(|entry| entry.expires_at) else {
                return Ok(Reply::error("ERR no such key"));
            };
            if from == to {
                return Ok(if *only_new { Reply::Integer(0) } else { Reply::OK });
            }
            if *only_new && batch.get(to).is_some() {
                return Ok(Reply::Integer(0));
            }
            // The value is copied, not its body moved: a deleted row retires its body. Redis
            // moves the object, its encoding with it.
            let form = batch.get(from).map_or(StringForm::Whole, |entry| entry.form);
            let value = batch.value(from).await?.unwrap_or_default();
            batch.delete(from);
            batch.write(to, value, expires_at, form);
            if *only_new { Reply::Integer(1) } else { Reply::OK }
        }
        Copy { from, to, replace, .. } => {
            let Some(expires_at) = batch.get(from).map(|entry| entry.expires_at) else {
                return Ok(Reply::Integer(0));
            };
            if !replace && batch.get(to).is_some() {
                return Ok(Reply::Integer(0));
            }
            // Redis's `dupStringObject` keeps the encoding.
            let form = batch.get(from).map_or(StringForm::Whole, |entry| entry.form);
            let value = batch.value(from).await?.unwrap_or_default();
            batch.write(to, value, expires_at, form);
            Reply::Integer(1)
        }
    };
    Ok(reply)
}
/// PostgreSQL's tuple header (23 bytes, aligned to 24) and line pointer (4): what a row of a
/// key costs beyond its columns.
const ROW_OVERHEAD: u64 = 28;

/// MEMORY USAGE's estimate: the key's row (its name and `value` bytes, the value's elements
/// for a collection) as stored, not memory: the gateway holds no values.
fn stored_size(key: &str, value: u64) -> i64 {
    i64::try_from(ROW_OVERHEAD + key.len() as u64 + value).unwrap_or(i64::MAX)
}

/// What OBJECT ENCODING names for a hash, set or sorted set: Redis 7.0's small encoding until
/// a write passed the keyspace's encoding parameters (`large`, see [`KvBatch::typed_large`]).
fn collection_encoding(kind: KeyType, large: bool) -> &'static str {
    match (kind, large) {
        (KeyType::Set, false) => "intset",
        (_, false) => "listpack",
        (KeyType::Zset, true) => "skiplist",
        (_, true) => "hashtable",
    }
}

/// What OBJECT ENCODING names for a string: the encoding Redis would hold it in, by the bytes
/// of one written whole (`int`, `embstr`, `raw`), never `int` for one stored as is, `raw` for
/// one changed in place (see [`StringForm`]).
fn string_encoding(entry: &KvEntry) -> &'static str {
    match (&entry.value, entry.form) {
        (_, StringForm::Raw) => "raw",
        (KvValue::Bytes(bytes), StringForm::Whole) if bytes.len() <= 20 && parse_integer(bytes).is_some() => "int",
        (KvValue::Bytes(bytes), StringForm::Whole | StringForm::AsIs) if bytes.len() <= 44 => "embstr",
        _ => "raw",
    }
}

/// An expiry in the past deletes the key at once, as in Redis. A string of a versioned bucket
/// takes no expiry (see [`versioned_ttl`]).
pub(crate) fn expire_or_delete(batch: &mut KvBatch, key: &str, when: SystemTime) -> Result<(), Reply> {
    if when <= batch.now {
        batch.delete(key);
    } else if batch.versioned() && batch.key_type(key).is_none() {
        return Err(versioned_ttl());
    } else {
        batch.set_expiry(key, Some(when));
    }
    Ok(())
}

/// The answer to a TTL on a string of a versioned bucket: a string there is an S3 version, and
/// a version that vanished at its TTL would be removed for good, past any delete marker or
/// object lock. (S3 expires versions by lifecycle rules, which pgvs3 runs.)
pub(crate) fn versioned_ttl() -> Reply {
    Reply::error("ERR TTLs are not supported on strings of a bucket with S3 versioning: use a lifecycle rule")
}
