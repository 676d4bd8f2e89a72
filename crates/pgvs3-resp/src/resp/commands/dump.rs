//! DUMP and RESTORE with Redis's payload (rdb.rs): a key's value read whole (a collection
//! with its family's call, bounded by [`MAX_DUMP_BYTES`]) and written back with the families'
//! own writes. RESTORE's IDLETIME and FREQ are checked as Redis checks them and kept nowhere
//! (pgvs3 tracks no access).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::family::{self, FamilyError, word, words};
use super::rdb::{self, Refused, Value};
use super::stream_dump;
use crate::resp::codec::Reply;
use crate::resp::command::{key, not_an_integer, parse_integer, syntax_error};
use crate::resp::keys::versioned_ttl;
use crate::store::{KeyType, KvBatch, KvValue};

/// Most bytes of elements DUMP reads of a collection (the payload is built in memory).
pub const MAX_DUMP_BYTES: i64 = 64 << 20;
/// The latest expiry kept (as `keys.rs` keeps them: about the year 287,000).
const LATEST_EXPIRY: Duration = Duration::from_secs(9_000_000_000_000);

#[derive(Debug, Clone)]
pub enum Dumped {
    Dump(String),
    Restore(Box<Restore>),
}

#[derive(Debug, Clone)]
pub struct Restore {
    key: String,
    ttl: Bytes,
    payload: Bytes,
    replace: bool,
    absolute: bool,
}

impl Dumped {
    pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<Dumped>, Reply> {
        Ok(Some(match name {
            "dump" => Dumped::Dump(key(&args[1])?),
            "restore" => {
                let mut restore = Restore {
                    key: key(&args[1])?,
                    ttl: args[2].clone(),
                    payload: args[3].clone(),
                    replace: false,
                    absolute: false,
                };
                let (mut idle, mut freq) = (false, false);
                let mut j = 4;
                while j < args.len() {
                    let more = j + 1 < args.len();
                    match args[j].to_ascii_lowercase().as_slice() {
                        b"replace" => restore.replace = true,
                        b"absttl" => restore.absolute = true,
                        b"idletime" if more && !freq => {
                            if parse_integer(&args[j + 1]).ok_or_else(not_an_integer)? < 0 {
                                return Err(Reply::error("ERR Invalid IDLETIME value, must be >= 0"));
                            }
                            idle = true;
                            j += 1;
                        }
                        b"freq" if more && !idle => {
                            let value = parse_integer(&args[j + 1]).ok_or_else(not_an_integer)?;
                            if !(0..=255).contains(&value) {
                                return Err(Reply::error("ERR Invalid FREQ value, must be >= 0 and <= 255"));
                            }
                            freq = true;
                            j += 1;
                        }
                        _ => return Err(syntax_error()),
                    }
                    j += 1;
                }
                Dumped::Restore(Box::new(restore))
            }
            _ => return Ok(None),
        }))
    }

    pub fn keys(&self) -> Vec<&String> {
        match self {
            Dumped::Dump(key) => vec![key],
            Dumped::Restore(restore) => vec![&restore.key],
        }
    }

    pub async fn apply(&self, batch: &mut KvBatch) -> Result<Reply, FamilyError> {
        match self {
            Dumped::Dump(key) => Ok(match read(batch, key).await? {
                None => Reply::Nil,
                Some(value) => Reply::Bulk(Bytes::from(rdb::dump(&value))),
            }),
            Dumped::Restore(restore) => restore.apply(batch).await,
        }
    }
}

/// The key's value, whole; `None` when it does not exist.
async fn read(batch: &mut KvBatch, key: &str) -> Result<Option<Value>, FamilyError> {
    let kind = match batch.get(key).map(|entry| &entry.value) {
        None => return Ok(None),
        Some(KvValue::Typed(kind)) => *kind,
        Some(_) => return Ok(batch.value(key).await?.map(Value::String)),
    };
    let (command, rest): (&str, &[&str]) = match kind {
        KeyType::List => ("lrange", &["0", "-1"]),
        KeyType::Set => ("smembers", &[]),
        KeyType::Zset => ("zrange", &["0", "-1", "WITHSCORES"]),
        KeyType::Hash => ("hgetall", &[]),
        KeyType::Stream => {
            let row = family::run_calls(batch, vec![stream_dump::read_call(key)], Some((MAX_DUMP_BYTES, "DUMP")))
                .await?
                .pop()
                .unwrap_or_default();
            let stream = stream_dump::read(row).ok_or_else(|| Reply::error("ERR DUMP could not read the stream"))?;
            return Ok(Some(Value::Stream(Box::new(stream))));
        }
    };
    let command = words(command, key, rest.iter().map(|text| word(text)));
    let row = family::run(batch, vec![command], Some((MAX_DUMP_BYTES, "DUMP")))
        .await?
        .pop()
        .unwrap_or_default();
    let items = row.items.into_iter().map(Option::unwrap_or_default);
    Ok(Some(match kind {
        KeyType::List => Value::List(items.collect()),
        KeyType::Set => Value::Set(items.collect()),
        KeyType::Zset => Value::Zset(
            items
                .zip(row.scores.into_iter().map(Option::unwrap_or_default))
                .collect(),
        ),
        _ => {
            let mut items = items;
            let mut pairs = Vec::new();
            while let (Some(field), Some(value)) = (items.next(), items.next()) {
                pairs.push((field, value));
            }
            Value::Hash(pairs)
        }
    }))
}

impl Restore {
    /// Redis's `restoreCommand` after its options: the key, the TTL, the payload, in that
    /// order, each with Redis's error.
    async fn apply(&self, batch: &mut KvBatch) -> Result<Reply, FamilyError> {
        if !self.replace && batch.get(&self.key).is_some() {
            return Err(Reply::error("BUSYKEY Target key name already exists.").into());
        }
        let ttl = parse_integer(&self.ttl).ok_or_else(not_an_integer)?;
        if ttl < 0 {
            return Err(Reply::error("ERR Invalid TTL value, must be >= 0").into());
        }
        let value = rdb::restore(&self.payload).map_err(|refused| {
            Reply::error(match refused {
                Refused::VersionOrChecksum => "ERR DUMP payload version or checksum are wrong",
                Refused::BadFormat => "ERR Bad data format",
            })
        })?;
        let expires_at = match (ttl, self.absolute) {
            (0, _) => None,
            (ttl, true) => Some(UNIX_EPOCH + Duration::from_millis(ttl as u64).min(LATEST_EXPIRY)),
            (ttl, false) => Some(
                batch
                    .now
                    .checked_add(Duration::from_millis(ttl as u64))
                    .unwrap_or(UNIX_EPOCH + LATEST_EXPIRY)
                    .min(UNIX_EPOCH + LATEST_EXPIRY),
            ),
        };
        if expires_at.is_some() && batch.versioned() && matches!(value, Value::String(_)) {
            // A string there is an S3 version, which takes no TTL: refused as SET ... EX is,
            // where writing it would have dropped the TTL.
            return Err(versioned_ttl().into());
        }
        batch.delete(&self.key);
        if expires_at.is_some_and(|at| at <= SystemTime::now()) {
            // Already expired: nothing is created (a replaced key is gone), as in Redis.
            return Ok(Reply::OK);
        }
        let key = &self.key;
        let write = match value {
            Value::String(data) => {
                batch.set(key, data, expires_at);
                return Ok(Reply::OK);
            }
            Value::Stream(stream) => stream_dump::write_call(key, &stream),
            Value::List(elements) => family::call(words("rpush", key, elements))?,
            Value::Set(members) => family::call(words("sadd", key, members))?,
            Value::Hash(pairs) => family::call(words(
                "hset",
                key,
                pairs.into_iter().flat_map(|(field, value)| [field, value]),
            ))?,
            Value::Zset(members) => family::call(words(
                "zadd",
                key,
                members
                    .into_iter()
                    .flat_map(|(member, score)| [word(&score.to_string()), member]),
            ))?,
        };
        family::replace_with(batch, key, Some(write)).await?;
        if expires_at.is_some() {
            batch.set_expiry(key, expires_at);
        }
        Ok(Reply::OK)
    }
}
