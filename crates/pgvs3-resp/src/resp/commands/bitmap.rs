//! BITOP, BITFIELD and BITFIELD_RO on string values, as Redis 7.0's bitops.c parses, checks and
//! answers them, worked in the gateway on the batch's strings (the bit arithmetic is bits.rs's).
//! SETBIT, GETBIT, BITCOUNT and BITPOS are string commands (strings.rs).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use bytes::Bytes;

use super::family::FamilyError;
use crate::resp::bits::{self, BitOp, FieldType, FieldWrite, Overflow};
use crate::resp::codec::{MAX_BULK_LEN, Reply};
use crate::resp::command::{integer, key, keys, parse_integer, syntax_error};
use crate::resp::keys::wrongtype;
use crate::store::{KvBatch, KvValue, StringForm};

/// The most bytes of source strings one BITOP reads (the distinct keys' values, all held in the
/// gateway's memory with the result): the string limit, so any one source fits.
pub const MAX_BITOP_SOURCE_BYTES: u64 = MAX_BULK_LEN as u64;

const BAD_OFFSET: &str = "ERR bit offset is not an integer or out of range";
const BAD_TYPE: &str =
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";

#[derive(Debug, Clone)]
pub enum Bitmap {
    /// BITOP: the destination replaced by the sources combined (deleted when that is empty).
    Op {
        op: BitOp,
        destination: String,
        sources: Vec<String>,
    },
    /// BITFIELD and BITFIELD_RO (which takes GETs only: refused at parsing otherwise).
    Field {
        key: String,
        ops: Vec<FieldOp>,
        outcome: Outcome,
    },
}

/// One GET, SET or INCRBY of a BITFIELD, with the OVERFLOW in force where it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldOp {
    pub offset: u64,
    pub kind: FieldType,
    /// `None` for GET.
    pub write: Option<FieldWrite>,
    pub overflow: Overflow,
}

/// What a BITFIELD's run did to its key, for its keyspace events, which its reply does not
/// tell: Redis emits `setbit` when a write changed a field or the key was created or grown,
/// and `new` alone when it created the key and every write failed (OVERFLOW FAIL). Set by
/// each run (a batch run again sets it again), read by the recorder (notify.rs) after it.
#[derive(Debug, Clone, Default)]
pub struct Outcome(Arc<AtomicU8>);

const CREATED: u8 = 1;
const CHANGED: u8 = 2;

impl Outcome {
    fn record(&self, created: bool, changed: bool) {
        let bits = if created { CREATED } else { 0 } | if changed { CHANGED } else { 0 };
        self.0.store(bits, Ordering::Relaxed);
    }

    pub fn created(&self) -> bool {
        self.0.load(Ordering::Relaxed) & CREATED != 0
    }

    pub fn changed(&self) -> bool {
        self.0.load(Ordering::Relaxed) & CHANGED != 0
    }
}

impl Bitmap {
    /// Parses BITOP, BITFIELD or BITFIELD_RO; `Ok(None)` for another command. The arity is
    /// checked.
    pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<Bitmap>, Reply> {
        Ok(Some(match name {
            "bitop" => parse_bitop(args)?,
            "bitfield" | "bitfield_ro" => parse_bitfield(name == "bitfield_ro", args)?,
            _ => return Ok(None),
        }))
    }

    pub fn keys(&self) -> Vec<&String> {
        match self {
            Bitmap::Op {
                destination, sources, ..
            } => std::iter::once(destination).chain(sources).collect(),
            Bitmap::Field { key, .. } => vec![key],
        }
    }

    pub async fn apply(&self, batch: &mut KvBatch) -> Result<Reply, FamilyError> {
        match self {
            Bitmap::Op {
                op,
                destination,
                sources,
            } => bitop(batch, *op, destination, sources).await,
            Bitmap::Field { key, ops, outcome } => bitfield(batch, key, ops, outcome).await,
        }
    }
}

/// `BITOP operation destkey key [key ...]`, checked in Redis's order: the operation, NOT's
/// single source, then the keys.
fn parse_bitop(args: &[Bytes]) -> Result<Bitmap, Reply> {
    let op = match args[1].to_ascii_lowercase().as_slice() {
        b"and" => BitOp::And,
        b"or" => BitOp::Or,
        b"xor" => BitOp::Xor,
        b"not" => BitOp::Not,
        _ => return Err(syntax_error()),
    };
    if op == BitOp::Not && args.len() != 4 {
        return Err(Reply::error("ERR BITOP NOT must be called with a single source key."));
    }
    Ok(Bitmap::Op {
        op,
        destination: key(&args[2])?,
        sources: keys(&args[3..])?,
    })
}

/// BITFIELD's subcommands in order, as Redis's `bitfieldGeneric` reads them: a name without
/// enough arguments after it is a syntax error; each operation's type, then its offset, then
/// its value.
fn parse_bitfield(read_only: bool, args: &[Bytes]) -> Result<Bitmap, Reply> {
    let mut ops = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let remaining = args.len() - j - 1;
        // `Some(true)` INCRBY, `Some(false)` SET, `None` GET.
        let increment = match args[j].to_ascii_lowercase().as_slice() {
            b"get" if remaining >= 2 => None,
            b"set" if remaining >= 3 => Some(false),
            b"incrby" if remaining >= 3 => Some(true),
            b"overflow" if remaining >= 1 => {
                overflow = match args[j + 1].to_ascii_lowercase().as_slice() {
                    b"wrap" => Overflow::Wrap,
                    b"sat" => Overflow::Sat,
                    b"fail" => Overflow::Fail,
                    _ => return Err(Reply::error("ERR Invalid OVERFLOW type specified")),
                };
                j += 2;
                continue;
            }
            _ => return Err(syntax_error()),
        };
        let kind = field_type(&args[j + 1])?;
        let offset = field_offset(&args[j + 2], kind.bits)?;
        let write = match increment {
            None => None,
            Some(true) => Some(FieldWrite::IncrBy(integer(&args[j + 3])?)),
            Some(false) => Some(FieldWrite::Set(integer(&args[j + 3])?)),
        };
        ops.push(FieldOp {
            offset,
            kind,
            write,
            overflow,
        });
        j += if write.is_some() { 4 } else { 3 };
    }
    if read_only && ops.iter().any(|op| op.write.is_some()) {
        return Err(Reply::error("ERR BITFIELD_RO only supports the GET subcommand"));
    }
    Ok(Bitmap::Field {
        key: key(&args[1])?,
        ops,
        outcome: Outcome::default(),
    })
}

/// `i1`..`i64` or `u1`..`u63` (the letter is case-sensitive in Redis).
fn field_type(arg: &[u8]) -> Result<FieldType, Reply> {
    let bad = || Reply::error(BAD_TYPE);
    let (signed, digits) = match arg.split_first() {
        Some((b'i', digits)) => (true, digits),
        Some((b'u', digits)) => (false, digits),
        _ => return Err(bad()),
    };
    // Redis reads the width as a C string: up to a NUL.
    let digits = digits.split(|byte| *byte == 0).next().unwrap_or_default();
    let bits = parse_integer(digits).ok_or_else(bad)?;
    if bits < 1 || bits > if signed { 64 } else { 63 } {
        return Err(bad());
    }
    Ok(FieldType {
        signed,
        bits: bits as u32,
    })
}

/// A BITFIELD offset: bits, or with `#` fields of the type's width, within the string limit
/// (Redis's `getBitOffsetFromArgument` with its default `proto-max-bulk-len`, 512 MiB; pgvs3's
/// is fixed there). `#` times the width wraps on overflow, as Redis's C multiplication does.
fn field_offset(arg: &[u8], bits: u32) -> Result<u64, Reply> {
    let (hash, digits) = match arg.strip_prefix(b"#") {
        Some(digits) => (true, digits),
        None => (false, arg),
    };
    let mut offset = parse_integer(digits).ok_or_else(|| Reply::error(BAD_OFFSET))?;
    if hash {
        offset = offset.wrapping_mul(i64::from(bits));
    }
    if offset < 0 || (offset >> 3) >= MAX_BULK_LEN as i64 {
        return Err(Reply::error(BAD_OFFSET));
    }
    Ok(offset as u64)
}

/// The length of the key's string: `None` when the key does not exist, WRONGTYPE for a typed key.
fn string_len(batch: &KvBatch, key: &str) -> Result<Option<u64>, FamilyError> {
    match batch.get(key).map(|entry| &entry.value) {
        None => Ok(None),
        Some(KvValue::Typed(_)) => Err(FamilyError::Reply(wrongtype())),
        Some(value) => Ok(Some(value.len())),
    }
}

/// Redis's `bitopCommand`: missing sources are empty strings, shorter ones padded with zeros;
/// the destination (whatever it held) becomes the result without a TTL, or is deleted when the
/// result is empty. Answers the result's length.
async fn bitop(batch: &mut KvBatch, op: BitOp, destination: &str, sources: &[String]) -> Result<Reply, FamilyError> {
    let mut distinct = BTreeSet::new();
    let mut bytes = 0u64;
    for source in sources {
        let len = string_len(batch, source)?.unwrap_or(0);
        if distinct.insert(source) {
            bytes += len;
        }
    }
    if bytes > MAX_BITOP_SOURCE_BYTES {
        return Err(Reply::error(format!(
            "ERR BITOP would read more than {} MiB of source strings (pgvs3 works on them in the gateway's memory)",
            MAX_BITOP_SOURCE_BYTES >> 20
        ))
        .into());
    }
    let mut values = Vec::with_capacity(sources.len());
    for source in sources {
        values.push(batch.value(source).await?.unwrap_or_default());
    }
    let slices: Vec<&[u8]> = values.iter().map(|value| &value[..]).collect();
    let result = bits::combine(op, &slices);
    let len = result.len() as i64;
    if result.is_empty() {
        batch.delete(destination);
    } else {
        batch.write(destination, Bytes::from(result), None, StringForm::Raw);
    }
    Ok(Reply::Integer(len))
}

/// Redis's `bitfieldGeneric` after parsing: with no SET or INCRBY the key is only read (a
/// missing one reads as zeros and is not created); otherwise it is created or grown with zero
/// bytes to the farthest bit a write reaches, whether or not the writes then fail, and keeps
/// its TTL. Answers each operation's value in order, nil for a write OVERFLOW FAIL refused.
async fn bitfield(batch: &mut KvBatch, key: &str, ops: &[FieldOp], outcome: &Outcome) -> Result<Reply, FamilyError> {
    let existing = string_len(batch, key)?;
    let reach = ops
        .iter()
        .filter(|op| op.write.is_some())
        .map(|op| (op.offset + u64::from(op.kind.bits) - 1) / 8 + 1)
        .max();
    let value = batch.value(key).await?.unwrap_or_default();
    let Some(reach) = reach else {
        outcome.record(false, false);
        let answers = ops
            .iter()
            .map(|op| Reply::Integer(bits::get_field(&value, op.offset, op.kind)))
            .collect();
        return Ok(Reply::Array(answers));
    };
    let mut value = value.to_vec();
    let grown = value.len() < reach as usize;
    if grown {
        value.resize(reach as usize, 0);
    }
    let dirty = existing.is_none() || grown;
    let mut changed = false;
    let mut answers = Vec::with_capacity(ops.len());
    for op in ops {
        answers.push(match op.write {
            None => Reply::Integer(bits::get_field(&value, op.offset, op.kind)),
            Some(write) => match bits::write_field(&mut value, op.offset, op.kind, write, op.overflow) {
                None => Reply::Nil,
                Some((answer, field_changed)) => {
                    changed |= dirty || field_changed;
                    Reply::Integer(answer)
                }
            },
        });
    }
    if dirty || changed {
        let expires_at = batch.get(key).and_then(|entry| entry.expires_at);
        batch.write(key, Bytes::from(value), expires_at, StringForm::Raw);
    }
    outcome.record(existing.is_none(), changed);
    Ok(Reply::Array(answers))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<Bytes> {
        line.split(' ').map(|word| Bytes::from(word.to_owned())).collect()
    }

    fn error(name: &str, line: &str) -> String {
        match Bitmap::parse(name, &args(line)) {
            Err(Reply::Error(text)) => text,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn arguments_are_checked_in_redis_order_with_its_texts() {
        assert_eq!(error("bitop", "bitop nand d a"), "ERR syntax error");
        assert_eq!(
            error("bitop", "bitop not d a b"),
            "ERR BITOP NOT must be called with a single source key."
        );
        let bad_type = BAD_TYPE;
        for (line, expected) in [
            ("bitfield k get", "ERR syntax error"),
            ("bitfield k get i8", "ERR syntax error"),
            ("bitfield k set i8 0", "ERR syntax error"),
            ("bitfield k overflow", "ERR syntax error"),
            ("bitfield k foo i8 0", "ERR syntax error"),
            ("bitfield k overflow up get i8 0", "ERR Invalid OVERFLOW type specified"),
            ("bitfield k get u64 0", bad_type),
            ("bitfield k get i65 0", bad_type),
            ("bitfield k get I8 0", bad_type),
            ("bitfield k get i0 0", bad_type),
            ("bitfield k get i08 0", bad_type),
            ("bitfield k get x8 0", bad_type),
            ("bitfield k get i8 -1", BAD_OFFSET),
            ("bitfield k get i8 4294967296", BAD_OFFSET),
            ("bitfield k get i8 #536870912", BAD_OFFSET),
            ("bitfield k get i8 ##1", BAD_OFFSET),
            // The type before the offset, the offset before the value.
            ("bitfield k set u64 x y", bad_type),
            ("bitfield k set u8 x y", BAD_OFFSET),
            ("bitfield k set u8 0 y", "ERR value is not an integer or out of range"),
        ] {
            assert_eq!(error("bitfield", line), expected, "{line}");
        }
        assert_eq!(
            error("bitfield_ro", "bitfield_ro k get u8 0 set u8 0 1"),
            "ERR BITFIELD_RO only supports the GET subcommand"
        );
        assert_eq!(
            error("bitfield_ro", "bitfield_ro k get u8 0 set u8"),
            "ERR syntax error"
        );
    }

    #[test]
    fn offsets_and_overflow_modes_parse_as_redis_reads_them() {
        let Ok(Some(Bitmap::Field { ops, .. })) = Bitmap::parse(
            "bitfield",
            &args("bitfield k GET u8 #2 overflow SAT set i5 4294967295 -3 OVERFLOW fail incrby u63 #1 7"),
        ) else {
            panic!("parses")
        };
        let kind = |signed, bits| FieldType { signed, bits };
        assert_eq!(
            ops,
            [
                FieldOp {
                    offset: 16,
                    kind: kind(false, 8),
                    write: None,
                    overflow: Overflow::Wrap
                },
                FieldOp {
                    offset: 4294967295,
                    kind: kind(true, 5),
                    write: Some(FieldWrite::Set(-3)),
                    overflow: Overflow::Sat
                },
                FieldOp {
                    offset: 63,
                    kind: kind(false, 63),
                    write: Some(FieldWrite::IncrBy(7)),
                    overflow: Overflow::Fail
                },
            ]
        );
        // `#` times the width wraps as in C: 2^61 fields of 8 bits is offset 0.
        assert_eq!(field_offset(b"#2305843009213693952", 8), Ok(0));
    }
}
