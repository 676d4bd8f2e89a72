//! Key commands applied to the loaded state of a batch. Strings (an object's bytes) are changed
//! in memory; commands on typed keys (hashes, sets, sorted sets, lists) run in SQL, in runs that
//! go out together (see [`apply_all`]). A string command on a typed key answers WRONGTYPE.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};

use super::codec::{Reply, format_double};
use super::command::{
    Condition, Expiry, GetExTtl, KeyCommand, LcsAnswer, ObjectInfo, SetTtl, not_an_integer, parse_float, parse_integer,
    within_string_limit,
};
use super::{bits, lcs};
use crate::store::{KeyType, KeysOp, KvBatch, KvValue, StoreResult, TypedCall};

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
        let calls: Vec<&TypedCall> = run.iter().map(|typed| &typed.call).collect();
        let rows = batch.typed(&calls, commit && last).await?;
        replies.extend(run.iter().zip(rows).map(|(typed, row)| typed.reply(row)));
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

fn too_large() -> Reply {
    Reply::error("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
}

/// The latest expiry kept, about the year 287,000. Redis takes expiries up to the year 292
/// million; PostgreSQL's timestamps end in the year 294,276, so later ones are kept as this.
const LATEST_EXPIRY: Duration = Duration::from_secs(9_000_000_000_000);

/// When an expiry falls, within what the store can hold: one before 1970 is in the past all
/// the same, one past [`LATEST_EXPIRY`] is as good as never.
fn at(now: SystemTime, expiry: Expiry) -> SystemTime {
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

fn value_reply(value: Option<Bytes>) -> Reply {
    value.map_or(Reply::Nil, Reply::Bulk)
}

/// Runs one key command against the batch. Store errors (the database failing) end the batch.
async fn apply(command: &KeyCommand, batch: &mut KvBatch) -> StoreResult<Reply> {
    use KeyCommand::*;
    let now = batch.now;
    if command.needs_strings() && command.keys().iter().any(|key| batch.key_type(key).is_some()) {
        return Ok(wrongtype());
    }
    let reply = match command {
        Typed(_) => unreachable!("apply_all runs typed commands"),
        Family(command) => Box::pin(command.apply(batch)).await?,
        Object { key, subcommand } => match batch.get(key) {
            None => Reply::Nil,
            Some(entry) => match subcommand {
                ObjectInfo::Encoding => Reply::text(encoding(&entry.value)),
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
        Get(key) => value_reply(batch.value(key).await?),
        MGet(keys) => {
            let mut values = Vec::with_capacity(keys.len());
            for key in keys {
                values.push(value_reply(batch.value(key).await?));
            }
            Reply::Array(values)
        }
        Set {
            key,
            value,
            condition,
            get,
            ttl,
        } => {
            let old = if *get { batch.value(key).await? } else { None };
            let exists = batch.get(key).is_some();
            let allowed = match condition {
                Some(Condition::Absent) => !exists,
                Some(Condition::Present) => exists,
                None => true,
            };
            if allowed {
                let expires_at = match ttl {
                    SetTtl::Clear => None,
                    SetTtl::Keep => batch.get(key).and_then(|entry| entry.expires_at),
                    SetTtl::Expire(_) if batch.versioned() => return Ok(versioned_ttl()),
                    SetTtl::Expire(expiry) => Some(at(now, *expiry)),
                };
                batch.set(key, value.clone(), expires_at);
            }
            match (get, allowed) {
                (true, _) => value_reply(old),
                (false, true) => Reply::OK,
                (false, false) => Reply::Nil,
            }
        }
        SetNx(key, value) => {
            let absent = batch.get(key).is_none();
            if absent {
                batch.set(key, value.clone(), None);
            }
            Reply::bool(absent)
        }
        MSet(pairs) => {
            for (key, value) in pairs {
                batch.set(key, value.clone(), None);
            }
            Reply::OK
        }
        MSetNx(pairs) => {
            let none_exist = pairs.iter().all(|(key, _)| batch.get(key).is_none());
            if none_exist {
                for (key, value) in pairs {
                    batch.set(key, value.clone(), None);
                }
            }
            Reply::bool(none_exist)
        }
        GetSet(key, value) => {
            let old = batch.value(key).await?;
            batch.set(key, value.clone(), None);
            value_reply(old)
        }
        GetDel(key) => {
            let old = batch.value(key).await?;
            batch.delete(key);
            value_reply(old)
        }
        GetEx(key, ttl) => {
            let old = batch.value(key).await?;
            if old.is_some() {
                match ttl {
                    GetExTtl::Unchanged => {}
                    GetExTtl::Persist => {
                        batch.set_expiry(key, None);
                    }
                    GetExTtl::Expire(expiry) => {
                        if let Err(refused) = expire_or_delete(batch, key, at(now, *expiry)) {
                            return Ok(refused);
                        }
                    }
                }
            }
            value_reply(old)
        }
        Append(key, suffix) => {
            let old = batch.value(key).await?.unwrap_or_default();
            if !within_string_limit(old.len() as u64 + suffix.len() as u64) {
                return Ok(too_large());
            }
            let mut joined = BytesMut::with_capacity(old.len() + suffix.len());
            joined.extend_from_slice(&old);
            joined.extend_from_slice(suffix);
            let len = joined.len();
            keep_ttl_set(batch, key, joined.freeze());
            Reply::Integer(len as i64)
        }
        Strlen(key) => Reply::Integer(batch.get(key).map_or(0, |entry| entry.value.len() as i64)),
        GetRange(key, start, end) => {
            let value = batch.value(key).await?.unwrap_or_default();
            Reply::Bulk(substring(&value, *start, *end))
        }
        SetRange(key, offset, piece) => {
            if *offset < 0 {
                return Ok(Reply::error("ERR offset is out of range"));
            }
            let old = batch.value(key).await?;
            let offset = *offset as u64;
            if piece.is_empty() {
                return Ok(Reply::Integer(old.map_or(0, |old| old.len() as i64)));
            }
            if !within_string_limit(offset + piece.len() as u64) {
                return Ok(too_large());
            }
            let mut value = BytesMut::from(&old.unwrap_or_default()[..]);
            let end = offset as usize + piece.len();
            if value.len() < end {
                value.resize(end, 0);
            }
            value[offset as usize..end].copy_from_slice(piece);
            let len = value.len();
            keep_ttl_set(batch, key, value.freeze());
            Reply::Integer(len as i64)
        }
        IncrBy(key, by) => {
            let current = match batch.value(key).await? {
                None => 0,
                Some(value) => match parse_integer(&value) {
                    Some(current) => current,
                    None => return Ok(not_an_integer()),
                },
            };
            let Some(next) = current.checked_add(*by) else {
                return Ok(Reply::error("ERR increment or decrement would overflow"));
            };
            keep_ttl_set(batch, key, Bytes::from(next.to_string()));
            Reply::Integer(next)
        }
        IncrByFloat(key, by) => {
            let current = match batch.value(key).await? {
                None => 0.0,
                Some(value) => match parse_float(&value) {
                    Some(current) => current,
                    None => return Ok(Reply::error("ERR value is not a valid float")),
                },
            };
            let next = current + by;
            if !next.is_finite() {
                return Ok(Reply::error("ERR increment would produce NaN or Infinity"));
            }
            let text = format_double(next);
            keep_ttl_set(batch, key, Bytes::from(text.clone()));
            Reply::Bulk(Bytes::from(text))
        }
        SetBit { key, offset, bit } => {
            let old = batch.value(key).await?.unwrap_or_default();
            let (value, was) = bits::set(&old, *offset, *bit);
            keep_ttl_set(batch, key, value);
            Reply::Integer(was as i64)
        }
        GetBit { key, offset } => {
            let value = batch.value(key).await?.unwrap_or_default();
            Reply::Integer(bits::get(&value, *offset) as i64)
        }
        BitCount { key, range } => {
            let value = batch.value(key).await?.unwrap_or_default();
            Reply::Integer(bits::count(&value, *range))
        }
        BitPos { key, bit, range } => {
            let value = batch.value(key).await?.unwrap_or_default();
            Reply::Integer(bits::position(&value, *bit, *range))
        }
        Lcs { a, b, answer } => {
            let a = batch.value(a).await?.unwrap_or_default();
            let b = batch.value(b).await?.unwrap_or_default();
            if !lcs::fits(a.len(), b.len()) {
                return Ok(Reply::error(
                    "ERR Insufficient memory, transient memory for LCS exceeds pgvs3's limit of 256 MiB",
                ));
            }
            lcs_reply(&a, &b, *answer)
        }
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
        Copy { from, to, replace } if batch.key_type(from).is_some() => {
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
            // The value is copied, not its body moved: a deleted row retires its body.
            let value = batch.value(from).await?.unwrap_or_default();
            batch.delete(from);
            batch.set(to, value, expires_at);
            if *only_new { Reply::Integer(1) } else { Reply::OK }
        }
        Copy { from, to, replace } => {
            let Some(expires_at) = batch.get(from).map(|entry| entry.expires_at) else {
                return Ok(Reply::Integer(0));
            };
            if from == to {
                return Ok(Reply::error("ERR source and destination objects are the same"));
            }
            if !replace && batch.get(to).is_some() {
                return Ok(Reply::Integer(0));
            }
            let value = batch.value(from).await?.unwrap_or_default();
            batch.set(to, value, expires_at);
            Reply::Integer(1)
        }
    };
    Ok(reply)
}

/// Sets a new value and keeps the key's TTL (INCR, APPEND and SETRANGE do).
/// LCS's answer in the form the client asked for; IDX lists matches last first, as Redis does.
fn lcs_reply(a: &[u8], b: &[u8], answer: LcsAnswer) -> Reply {
    let min_len = match answer {
        LcsAnswer::Idx { min_len, .. } => min_len,
        _ => 0,
    };
    let found = lcs::lcs(a, b, min_len);
    match answer {
        LcsAnswer::Sequence => Reply::Bulk(Bytes::from(found.sequence)),
        LcsAnswer::Len => Reply::Integer(found.sequence.len() as i64),
        LcsAnswer::Idx { with_len, .. } => {
            let pair =
                |(from, to): (usize, usize)| Reply::Array(vec![Reply::Integer(from as i64), Reply::Integer(to as i64)]);
            let matches = found
                .matches
                .iter()
                .map(|found| {
                    let mut entry = vec![pair(found.a), pair(found.b)];
                    if with_len {
                        entry.push(Reply::Integer(found.len() as i64));
                    }
                    Reply::Array(entry)
                })
                .collect();
            Reply::Map(vec![
                (Reply::text("matches"), Reply::Array(matches)),
                (Reply::text("len"), Reply::Integer(found.sequence.len() as i64)),
            ])
        }
    }
}

/// What OBJECT ENCODING names: Redis's encodings for large values of each type (pgvs3 keeps
/// every value in PostgreSQL, so the small-value encodings never apply), `int` and `embstr` for
/// strings as Redis picks them.
/// PostgreSQL's tuple header (23 bytes, aligned to 24) and line pointer (4): what a row of a
/// key costs beyond its columns.
const ROW_OVERHEAD: u64 = 28;

/// MEMORY USAGE's estimate: the key's row (its name and `value` bytes, the value's elements
/// for a collection) as stored, not memory: the gateway holds no values.
fn stored_size(key: &str, value: u64) -> i64 {
    i64::try_from(ROW_OVERHEAD + key.len() as u64 + value).unwrap_or(i64::MAX)
}

fn encoding(value: &KvValue) -> &'static str {
    match value {
        KvValue::Typed(KeyType::Hash) => "hashtable",
        KvValue::Typed(KeyType::Set) => "hashtable",
        KvValue::Typed(KeyType::Zset) => "skiplist",
        KvValue::Typed(KeyType::List) => "quicklist",
        KvValue::Typed(KeyType::Stream) => "stream",
        KvValue::Bytes(bytes) if bytes.len() <= 20 && parse_integer(bytes).is_some() => "int",
        KvValue::Bytes(bytes) if bytes.len() <= 44 => "embstr",
        _ => "raw",
    }
}

fn keep_ttl_set(batch: &mut KvBatch, key: &str, value: Bytes) {
    let expires_at = batch.get(key).and_then(|entry| entry.expires_at);
    batch.set(key, value, expires_at);
}

/// An expiry in the past deletes the key at once, as in Redis. A string of a versioned bucket
/// takes no expiry (see [`versioned_ttl`]).
fn expire_or_delete(batch: &mut KvBatch, key: &str, when: SystemTime) -> Result<(), Reply> {
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
fn versioned_ttl() -> Reply {
    Reply::error("ERR TTLs are not supported on strings of a bucket with S3 versioning: use a lifecycle rule")
}

/// GETRANGE's slice, its range resolved as BITCOUNT's is (bits.rs).
fn substring(value: &Bytes, start: i64, end: i64) -> Bytes {
    if bits::reversed_from_end(start, end) {
        return Bytes::new();
    }
    match bits::clamp(start, end, value.len() as i64) {
        Some((start, end)) => value.slice(start as usize..=end as usize),
        None => Bytes::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getrange_slices_as_redis_does() {
        let value = Bytes::from("This is a string");
        assert_eq!(substring(&value, 0, 3), "This");
        assert_eq!(substring(&value, -3, -1), "ing");
        assert_eq!(substring(&value, 0, -1), "This is a string");
        assert_eq!(substring(&value, 10, 100), "string");
        assert_eq!(substring(&value, 20, 30), "");
        assert_eq!(substring(&value, -1, -5), "");
        assert_eq!(substring(&Bytes::new(), 0, -1), "");
        // Redis 7.0.15 with "foobar": both ends from the end and reversed is empty, else clamped.
        let value = Bytes::from("foobar");
        assert_eq!(substring(&value, -6, -7), "");
        assert_eq!(substring(&value, -100, -100), "f");
        assert_eq!(substring(&value, -7, 0), "f");
        assert_eq!(substring(&value, 10, -100), "");
    }
}
