//! String commands (GET, SET, INCR, APPEND, SETRANGE, the bit commands, LCS, ...): their parsing,
//! keys, work and replies. A string is an object's bytes, changed in memory in the batch
//! (`resp/keys.rs` runs key commands in order and answers WRONGTYPE for a typed key).

use bytes::{Bytes, BytesMut};

use crate::resp::bits::{self, BitRange};
use crate::resp::codec::{Reply, format_double};
use crate::resp::command::{
    Expiry, integer, invalid_expire_time, key, keys, not_an_integer, now_millis, parse_float, parse_integer,
    syntax_error, within_string_limit, wrong_arity,
};
use crate::resp::keys::{at, expire_or_delete, versioned_ttl};
use crate::resp::lcs;
use crate::store::{KvBatch, StoreResult, StringForm};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTtl {
    /// Clear any expiry (the default of SET).
    Clear,
    Keep,
    Expire(Expiry),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Only if the key does not exist (NX).
    Absent,
    /// Only if it exists (XX).
    Present,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetExTtl {
    Unchanged,
    Persist,
    Expire(Expiry),
}

/// What LCS answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LcsAnswer {
    Sequence,
    Len,
    /// The matched ranges (at least `min_len` long), with their lengths if `with_len`.
    Idx {
        min_len: usize,
        with_len: bool,
    },
}

/// A command on string keys.
#[derive(Debug, Clone)]
pub enum StringCommand {
    Get(String),
    Set {
        key: String,
        value: Bytes,
        condition: Option<Condition>,
        get: bool,
        ttl: SetTtl,
    },
    SetNx(String, Bytes),
    MGet(Vec<String>),
    MSet(Vec<(String, Bytes)>),
    MSetNx(Vec<(String, Bytes)>),
    GetSet(String, Bytes),
    GetDel(String),
    GetEx(String, GetExTtl),
    Append(String, Bytes),
    Strlen(String),
    GetRange(String, i64, i64),
    SetRange(String, i64, Bytes),
    IncrBy(String, i64),
    IncrByFloat(String, f64),
    SetBit {
        key: String,
        offset: u64,
        bit: bool,
    },
    GetBit {
        key: String,
        offset: u64,
    },
    BitCount {
        key: String,
        range: Option<BitRange>,
    },
    BitPos {
        key: String,
        bit: bool,
        range: Option<BitRange>,
    },
    Lcs {
        a: String,
        b: String,
        answer: LcsAnswer,
    },
}

impl StringCommand {
    /// Parses a string command; `Ok(None)` when `name` is not one. The arity is already checked.
    pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<StringCommand>, Reply> {
        use StringCommand::*;
        let arg = |i: usize| &args[i];
        let command = match name {
            "get" => Get(key(arg(1))?),
            "set" => parse_set(args)?,
            "setnx" => SetNx(key(arg(1))?, arg(2).clone()),
            "setex" | "psetex" => {
                let scale = if name == "setex" { 1000 } else { 1 };
                let expiry = positive_expiry(name, integer(arg(2))?, scale, false)?;
                Set {
                    key: key(arg(1))?,
                    value: arg(3).clone(),
                    condition: None,
                    get: false,
                    ttl: SetTtl::Expire(expiry),
                }
            }
            "mget" => MGet(keys(&args[1..])?),
            "mset" | "msetnx" => {
                if args.len().is_multiple_of(2) {
                    return Err(wrong_arity(name));
                }
                let pairs = args[1..]
                    .chunks(2)
                    .map(|pair| Ok((key(&pair[0])?, pair[1].clone())))
                    .collect::<Result<_, Reply>>()?;
                if name == "mset" { MSet(pairs) } else { MSetNx(pairs) }
            }
            "getset" => GetSet(key(arg(1))?, arg(2).clone()),
            "getdel" => GetDel(key(arg(1))?),
            "getex" => GetEx(key(arg(1))?, parse_getex(&args[2..])?),
            "append" => Append(key(arg(1))?, arg(2).clone()),
            "strlen" => Strlen(key(arg(1))?),
            "getrange" | "substr" => GetRange(key(arg(1))?, integer(arg(2))?, integer(arg(3))?),
            "setrange" => SetRange(key(arg(1))?, integer(arg(2))?, arg(3).clone()),
            "incr" => IncrBy(key(arg(1))?, 1),
            "decr" => IncrBy(key(arg(1))?, -1),
            "incrby" => IncrBy(key(arg(1))?, integer(arg(2))?),
            "decrby" => {
                let by = integer(arg(2))?
                    .checked_neg()
                    .ok_or_else(|| Reply::error("ERR decrement would overflow"))?;
                IncrBy(key(arg(1))?, by)
            }
            "incrbyfloat" => IncrByFloat(
                key(arg(1))?,
                parse_float(arg(2)).ok_or_else(|| Reply::error("ERR value is not a valid float"))?,
            ),
            "setbit" => SetBit {
                key: key(arg(1))?,
                offset: bit_offset(arg(2))?,
                bit: match arg(3).as_ref() {
                    b"0" => false,
                    b"1" => true,
                    _ => return Err(Reply::error("ERR bit is not an integer or out of range")),
                },
            },
            "getbit" => GetBit {
                key: key(arg(1))?,
                offset: bit_offset(arg(2))?,
            },
            "bitcount" => BitCount {
                key: key(arg(1))?,
                range: match args.len() {
                    2 => None,
                    4 | 5 => Some(bit_range(&args[2..])?),
                    _ => return Err(syntax_error()),
                },
            },
            "bitpos" => BitPos {
                key: key(arg(1))?,
                bit: match arg(2).as_ref() {
                    b"0" => false,
                    b"1" => true,
                    _ => return Err(Reply::error("ERR The bit argument must be 1 or 0.")),
                },
                range: match args.len() {
                    3 => None,
                    4 => Some(BitRange {
                        start: integer(arg(3))?,
                        end: None,
                        bits: false,
                    }),
                    5 | 6 => Some(bit_range(&args[3..])?),
                    _ => return Err(syntax_error()),
                },
            },
            "lcs" => Lcs {
                a: key(arg(1))?,
                b: key(arg(2))?,
                answer: parse_lcs(&args[3..])?,
            },
            _ => return Ok(None),
        };
        Ok(Some(command))
    }

    /// The keys the command reads or writes.
    pub fn keys(&self) -> Vec<&String> {
        use StringCommand::*;
        match self {
            Get(key)
            | Set { key, .. }
            | SetNx(key, _)
            | GetSet(key, _)
            | GetDel(key)
            | GetEx(key, _)
            | Append(key, _)
            | Strlen(key)
            | GetRange(key, ..)
            | SetRange(key, ..)
            | IncrBy(key, _)
            | IncrByFloat(key, _)
            | SetBit { key, .. }
            | GetBit { key, .. }
            | BitCount { key, .. }
            | BitPos { key, .. } => vec![key],
            Lcs { a, b, .. } => vec![a, b],
            MGet(keys) => keys.iter().collect(),
            MSet(pairs) | MSetNx(pairs) => pairs.iter().map(|(key, _)| key).collect(),
        }
    }

    /// Whether the command only overwrites its keys, never looking at what they hold or held:
    /// a batch of such commands needs nothing loaded before it runs.
    pub fn overwrites_blindly(&self) -> bool {
        matches!(
            self,
            StringCommand::Set {
                condition: None,
                get: false,
                ttl: SetTtl::Clear,
                ..
            } | StringCommand::MSet(_)
        )
    }

    /// Whether the command reads or writes a string value, so that a typed key answers
    /// WRONGTYPE (SET without GET replaces any key, MGET answers nil, SETNX and MSET(NX) only
    /// look at whether a key exists).
    pub fn needs_strings(&self) -> bool {
        use StringCommand::*;
        match self {
            Set { get, .. } => *get,
            SetNx(..) | MGet(_) | MSet(_) | MSetNx(_) => false,
            _ => true,
        }
    }

    /// Runs the command against the batch (the caller has answered WRONGTYPE for a typed key
    /// when [`Self::needs_strings`]). Store errors (the database failing) end the batch.
    pub async fn apply(&self, batch: &mut KvBatch) -> StoreResult<Reply> {
        use StringCommand::*;
        let reply = match self {
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
            } => set(batch, key, value, *condition, *get, *ttl).await?,
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
            MSetNx(pairs) => mset_nx(batch, pairs),
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
            GetEx(key, ttl) => get_ex(batch, key, *ttl).await?,
            Append(key, suffix) => append(batch, key, suffix).await?,
            Strlen(key) => Reply::Integer(batch.get(key).map_or(0, |entry| entry.value.len() as i64)),
            GetRange(key, start, end) => {
                let value = batch.value(key).await?.unwrap_or_default();
                Reply::Bulk(substring(&value, *start, *end))
            }
            SetRange(key, offset, piece) => set_range(batch, key, *offset, piece).await?,
            IncrBy(key, by) => incr_by(batch, key, *by).await?,
            IncrByFloat(key, by) => incr_by_float(batch, key, *by).await?,
            SetBit { key, offset, bit } => {
                let raw = batch.get(key).is_some_and(|entry| entry.form == StringForm::Raw);
                let old = batch.value(key).await?.unwrap_or_default();
                let (value, was) = bits::set(&old, *offset, *bit);
                // As Redis's setbitCommand: a bit set to what it was, in a raw string it does
                // not grow, writes nothing, so a WATCHing EXEC does not fail on it. (Redis
                // makes the string raw even then, without signalling it: here that takes a
                // write, which a WATCH sees.)
                if !raw || value.len() != old.len() || was != *bit {
                    keep_ttl_set(batch, key, value, StringForm::Raw);
                }
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
            Lcs { a, b, answer } => lcs_of(batch, a, b, *answer).await?,
        };
        Ok(reply)
    }
}

/// SET with its condition, GET and expiry options.
async fn set(
    batch: &mut KvBatch,
    key: &str,
    value: &Bytes,
    condition: Option<Condition>,
    get: bool,
    ttl: SetTtl,
) -> StoreResult<Reply> {
    let old = if get { batch.value(key).await? } else { None };
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
            SetTtl::Expire(expiry) => Some(at(batch.now, expiry)),
        };
        batch.set(key, value.clone(), expires_at);
    }
    Ok(match (get, allowed) {
        (true, _) => value_reply(old),
        (false, true) => Reply::OK,
        (false, false) => Reply::Nil,
    })
}

/// MSETNX: all the keys are set, or none when one exists.
fn mset_nx(batch: &mut KvBatch, pairs: &[(String, Bytes)]) -> Reply {
    let none_exist = pairs.iter().all(|(key, _)| batch.get(key).is_none());
    if none_exist {
        for (key, value) in pairs {
            batch.set(key, value.clone(), None);
        }
    }
    Reply::bool(none_exist)
}

/// GETEX: the value, its expiry changed as asked when the key exists.
async fn get_ex(batch: &mut KvBatch, key: &str, ttl: GetExTtl) -> StoreResult<Reply> {
    let old = batch.value(key).await?;
    if old.is_some() {
        match ttl {
            GetExTtl::Unchanged => {}
            GetExTtl::Persist => {
                batch.set_expiry(key, None);
            }
            GetExTtl::Expire(expiry) => {
                if let Err(refused) = expire_or_delete(batch, key, at(batch.now, expiry)) {
                    return Ok(refused);
                }
            }
        }
    }
    Ok(value_reply(old))
}

async fn append(batch: &mut KvBatch, key: &str, suffix: &Bytes) -> StoreResult<Reply> {
    let old = batch.value(key).await?.unwrap_or_default();
    if !within_string_limit(old.len() as u64 + suffix.len() as u64) {
        return Ok(too_large());
    }
    let mut joined = BytesMut::with_capacity(old.len() + suffix.len());
    joined.extend_from_slice(&old);
    joined.extend_from_slice(suffix);
    let len = joined.len();
    // APPEND to a missing key stores the suffix as SET would.
    let form = match batch.get(key) {
        Some(_) => StringForm::Raw,
        None => StringForm::Whole,
    };
    keep_ttl_set(batch, key, joined.freeze(), form);
    Ok(Reply::Integer(len as i64))
}

async fn set_range(batch: &mut KvBatch, key: &str, offset: i64, piece: &Bytes) -> StoreResult<Reply> {
    if offset < 0 {
        return Ok(Reply::error("ERR offset is out of range"));
    }
    let old = batch.value(key).await?;
    let offset = offset as u64;
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
    keep_ttl_set(batch, key, value.freeze(), StringForm::Raw);
    Ok(Reply::Integer(len as i64))
}

/// INCR, INCRBY, DECR and DECRBY.
async fn incr_by(batch: &mut KvBatch, key: &str, by: i64) -> StoreResult<Reply> {
    let current = match batch.value(key).await? {
        None => 0,
        Some(value) => match parse_integer(&value) {
            Some(current) => current,
            None => return Ok(not_an_integer()),
        },
    };
    let Some(next) = current.checked_add(by) else {
        return Ok(Reply::error("ERR increment or decrement would overflow"));
    };
    keep_ttl_set(batch, key, Bytes::from(next.to_string()), StringForm::Whole);
    Ok(Reply::Integer(next))
}

async fn incr_by_float(batch: &mut KvBatch, key: &str, by: f64) -> StoreResult<Reply> {
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
    keep_ttl_set(batch, key, Bytes::from(text.clone()), StringForm::AsIs);
    Ok(Reply::Bulk(Bytes::from(text)))
}

async fn lcs_of(batch: &mut KvBatch, a: &str, b: &str, answer: LcsAnswer) -> StoreResult<Reply> {
    let a = batch.value(a).await?.unwrap_or_default();
    let b = batch.value(b).await?.unwrap_or_default();
    if !lcs::fits(a.len(), b.len()) {
        return Ok(Reply::error(
            "ERR Insufficient memory, transient memory for LCS exceeds pgvs3's limit of 256 MiB",
        ));
    }
    Ok(lcs_reply(&a, &b, answer))
}

/// The expiry option of SET or GETEX at `args[0]` (with its amount at `args[1]`).
fn parse_expiry(command: &str, option: &[u8], amount: Option<&Bytes>) -> Result<Option<Expiry>, Reply> {
    let unit: Option<(bool, i64)> = match option.to_ascii_lowercase().as_slice() {
        b"ex" => Some((false, 1000)),
        b"px" => Some((false, 1)),
        b"exat" => Some((true, 1000)),
        b"pxat" => Some((true, 1)),
        _ => None,
    };
    let Some((absolute, scale)) = unit else {
        return Ok(None);
    };
    let amount = integer(amount.ok_or_else(syntax_error)?)?;
    positive_expiry(command, amount, scale, absolute).map(Some)
}

/// The expiry of SET, GETEX, SETEX and PSETEX, checked as Redis's
/// `getExpireMillisecondsOrReply` does: positive, and neither the conversion to milliseconds
/// nor the addition of now (for a relative one) overflows.
fn positive_expiry(command: &str, amount: i64, scale: i64, absolute: bool) -> Result<Expiry, Reply> {
    let invalid = || invalid_expire_time(command);
    if amount <= 0 {
        return Err(invalid());
    }
    let millis = amount.checked_mul(scale).ok_or_else(invalid)?;
    if absolute {
        return Ok(Expiry::At(millis));
    }
    now_millis().checked_add(millis).ok_or_else(invalid)?;
    Ok(Expiry::In(millis))
}

/// SET's or GETEX's options (`getex`), read as Redis 7.0's `parseExtendedStringArgumentsOrReply`
/// reads them: an option may come again (the last one counts, and only its amount is checked),
/// but not with one it excludes (NX with XX; EX, PX, EXAT, PXAT, KEEPTTL and PERSIST with
/// another of them); NX, XX, GET and KEEPTTL are SET's, PERSIST is GETEX's.
fn parse_string_options(command: &str, options: &[Bytes]) -> Result<StringOptions, Reply> {
    let set = command == "set";
    let mut parsed = StringOptions::default();
    // The expiry option, lower case, and its amount (checked once all are read).
    let mut expiry: Option<(Vec<u8>, &Bytes)> = None;
    let mut i = 0;
    while i < options.len() {
        let option = options[i].to_ascii_lowercase();
        // No other TTL option before this one (the same one again is taken).
        let ttl_free = !parsed.keep_ttl && !parsed.persist && expiry.as_ref().is_none_or(|(kind, _)| *kind == option);
        match option.as_slice() {
            b"nx" if set && parsed.condition != Some(Condition::Present) => parsed.condition = Some(Condition::Absent),
            b"xx" if set && parsed.condition != Some(Condition::Absent) => parsed.condition = Some(Condition::Present),
            b"get" if set => parsed.get = true,
            b"keepttl" if set && !parsed.persist && expiry.is_none() => parsed.keep_ttl = true,
            b"persist" if !set && !parsed.keep_ttl && expiry.is_none() => parsed.persist = true,
            b"ex" | b"px" | b"exat" | b"pxat" if ttl_free && i + 1 < options.len() => {
                expiry = Some((option, &options[i + 1]));
                i += 1;
            }
            _ => return Err(syntax_error()),
        }
        i += 1;
    }
    if let Some((kind, amount)) = expiry {
        parsed.expiry = parse_expiry(command, &kind, Some(amount))?;
    }
    Ok(parsed)
}

#[derive(Default)]
struct StringOptions {
    condition: Option<Condition>,
    get: bool,
    keep_ttl: bool,
    persist: bool,
    expiry: Option<Expiry>,
}

fn parse_set(args: &[Bytes]) -> Result<StringCommand, Reply> {
    let options = parse_string_options("set", &args[3..])?;
    let ttl = match (options.keep_ttl, options.expiry) {
        (_, Some(expiry)) => SetTtl::Expire(expiry),
        (true, None) => SetTtl::Keep,
        (false, None) => SetTtl::Clear,
    };
    Ok(StringCommand::Set {
        key: key(&args[1])?,
        value: args[2].clone(),
        condition: options.condition,
        get: options.get,
        ttl,
    })
}

fn parse_getex(options: &[Bytes]) -> Result<GetExTtl, Reply> {
    let options = parse_string_options("getex", options)?;
    Ok(match (options.persist, options.expiry) {
        (_, Some(expiry)) => GetExTtl::Expire(expiry),
        (true, None) => GetExTtl::Persist,
        (false, None) => GetExTtl::Unchanged,
    })
}

/// A bit offset as SETBIT and GETBIT take it: 0 to 2^32 - 1 (a 512 MiB string's bits).
fn bit_offset(arg: &[u8]) -> Result<u64, Reply> {
    parse_integer(arg)
        .and_then(|offset| u32::try_from(offset).ok())
        .map(u64::from)
        .ok_or_else(|| Reply::error("ERR bit offset is not an integer or out of range"))
}

/// `start end [BYTE|BIT]` of BITCOUNT and BITPOS.
fn bit_range(args: &[Bytes]) -> Result<BitRange, Reply> {
    let bits = match args.get(2) {
        None => false,
        Some(unit) if unit.eq_ignore_ascii_case(b"byte") => false,
        Some(unit) if unit.eq_ignore_ascii_case(b"bit") => true,
        Some(_) => return Err(syntax_error()),
    };
    Ok(BitRange {
        start: integer(&args[0])?,
        end: Some(integer(&args[1])?),
        bits,
    })
}

fn parse_lcs(options: &[Bytes]) -> Result<LcsAnswer, Reply> {
    let (mut len, mut idx, mut with_len, mut min_len) = (false, false, false, 0usize);
    let mut i = 0;
    while i < options.len() {
        match options[i].to_ascii_lowercase().as_slice() {
            b"len" => len = true,
            b"idx" => idx = true,
            b"withmatchlen" => with_len = true,
            b"minmatchlen" => {
                let value = options.get(i + 1).ok_or_else(syntax_error)?;
                min_len = usize::try_from(integer(value)?.max(0)).unwrap_or(usize::MAX);
                i += 1;
            }
            _ => return Err(syntax_error()),
        }
        i += 1;
    }
    match (len, idx) {
        (true, true) => Err(Reply::error(
            "ERR If you want both the length and indexes, please just use IDX.",
        )),
        (true, false) => Ok(LcsAnswer::Len),
        (false, true) => Ok(LcsAnswer::Idx { min_len, with_len }),
        (false, false) => Ok(LcsAnswer::Sequence),
    }
}

fn too_large() -> Reply {
    Reply::error("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
}

fn value_reply(value: Option<Bytes>) -> Reply {
    value.map_or(Reply::Nil, Reply::Bulk)
}

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

/// Sets a new value and keeps the key's TTL (INCR, APPEND and SETRANGE do); `form` is how
/// Redis would have written it (see [`StringForm`]).
fn keep_ttl_set(batch: &mut KvBatch, key: &str, value: Bytes, form: StringForm) {
    let expires_at = batch.get(key).and_then(|entry| entry.expires_at);
    batch.write(key, value, expires_at, form);
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

    #[test]
    fn set_options_parse_and_conflicts_are_syntax_errors() {
        let args = |text: &str| {
            text.split(' ')
                .map(|part| Bytes::from(part.to_owned()))
                .collect::<Vec<_>>()
        };
        let parsed = parse_set(&args("set k v NX GET PX 1500")).unwrap();
        assert!(matches!(
            parsed,
            StringCommand::Set {
                condition: Some(Condition::Absent),
                get: true,
                ttl: SetTtl::Expire(Expiry::In(1500)),
                ..
            }
        ));
        assert_eq!(parse_set(&args("set k v NX XX")).unwrap_err(), syntax_error());
        assert_eq!(parse_set(&args("set k v EX 1 KEEPTTL")).unwrap_err(), syntax_error());
        assert_eq!(parse_set(&args("set k v EX")).unwrap_err(), syntax_error());
        assert_eq!(parse_set(&args("set k v EX x")).unwrap_err(), not_an_integer());
        assert_eq!(
            parse_set(&args("set k v EX 0")).unwrap_err(),
            Reply::error("ERR invalid expire time in 'set' command")
        );
    }
}
