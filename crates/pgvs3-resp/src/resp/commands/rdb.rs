//! Redis's DUMP payload (RDB version 10, as Redis 7.0 writes it): one value's RDB object,
//! the version and a CRC-64 (Jones) of what precedes it. Written in the plain encodings every
//! Redis since 2.x loads (a string raw, a list, set, sorted set and hash element by element);
//! read in what redis-server 7.0 dumps as well (integer and LZF strings, quicklist 2 with
//! listpacks, intsets, listpack hashes and sorted sets). FUNCTION DUMP's payload is the same
//! frame around each function library's code.

use bytes::Bytes;

pub const RDB_VERSION: u16 = 10;

const STRING: u8 = 0;
const LIST: u8 = 1;
const SET: u8 = 2;
const ZSET: u8 = 3;
const HASH: u8 = 4;
const ZSET_2: u8 = 5;
const SET_INTSET: u8 = 11;
const HASH_LISTPACK: u8 = 16;
const ZSET_LISTPACK: u8 = 17;
const LIST_QUICKLIST_2: u8 = 18;
/// A function library: its code (Redis 7.0 GA and later).
const FUNCTION_2: u8 = 245;
/// A function library as Redis 7.0's release candidates wrote it: name, engine, an optional
/// description, then the code without its `#!` line.
const FUNCTION_RC: u8 = 246;

/// A value as a payload carries it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    String(Bytes),
    List(Vec<Bytes>),
    Set(Vec<Bytes>),
    Zset(Vec<(Bytes, f64)>),
    Hash(Vec<(Bytes, Bytes)>),
}

/// Redis's `crc64` (Jones polynomial, reflected, no final xor).
pub fn crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for byte in data {
        crc ^= u64::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ POLY } else { crc >> 1 };
        }
    }
    crc
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    if len < 64 {
        out.push(len as u8);
    } else if len < 16384 {
        out.extend_from_slice(&[0x40 | (len >> 8) as u8, len as u8]);
    } else if let Ok(len) = u32::try_from(len) {
        out.push(0x80);
        out.extend_from_slice(&len.to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
}

fn put_string(out: &mut Vec<u8>, data: &[u8]) {
    put_len(out, data.len());
    out.extend_from_slice(data);
}

/// DUMP's payload of a value.
pub fn dump(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    match value {
        Value::String(data) => {
            out.push(STRING);
            put_string(&mut out, data);
        }
        Value::List(elements) | Value::Set(elements) => {
            out.push(if matches!(value, Value::List(_)) { LIST } else { SET });
            put_len(&mut out, elements.len());
            for element in elements {
                put_string(&mut out, element);
            }
        }
        Value::Zset(members) => {
            out.push(ZSET_2);
            put_len(&mut out, members.len());
            for (member, score) in members {
                put_string(&mut out, member);
                out.extend_from_slice(&score.to_le_bytes());
            }
        }
        Value::Hash(pairs) => {
            out.push(HASH);
            put_len(&mut out, pairs.len());
            for (field, value) in pairs {
                put_string(&mut out, field);
                put_string(&mut out, value);
            }
        }
    }
    sealed(out)
}

/// `body` with the footer every payload ends with: the RDB version and the CRC-64 of both.
fn sealed(mut body: Vec<u8>) -> Vec<u8> {
    body.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

/// The body of a payload whose footer is good: a version Redis 7.0 reads and the CRC-64.
fn verified(payload: &[u8]) -> Option<&[u8]> {
    let body_len = payload.len().checked_sub(10)?;
    let (body, footer) = payload.split_at(body_len);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    let crc = u64::from_le_bytes(footer[2..].try_into().expect("8 bytes"));
    (version <= RDB_VERSION && crc64(&payload[..payload.len() - 8]) == crc).then_some(body)
}

/// FUNCTION DUMP's payload of the libraries whose code is `codes`.
pub fn dump_functions<'a>(codes: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut out = Vec::new();
    for code in codes {
        out.push(FUNCTION_2);
        put_string(&mut out, code.as_bytes());
    }
    sealed(out)
}

/// FUNCTION RESTORE's reading of a payload: the libraries' code, in order, or Redis's error.
pub fn restore_functions(payload: &[u8]) -> Result<Vec<Bytes>, &'static str> {
    let body = verified(payload).ok_or("ERR DUMP payload version or checksum are wrong")?;
    let mut reader = Reader { data: body, at: 0 };
    let mut codes = Vec::new();
    while let Some(kind) = reader.byte() {
        codes.push(match kind {
            FUNCTION_2 => reader.string().ok_or("ERR Failed loading library payload")?,
            FUNCTION_RC => {
                let name = reader.string().ok_or("ERR Failed loading library name")?;
                let engine = reader.string().ok_or("ERR Failed loading engine name")?;
                let has_description = reader.len().ok_or("ERR Failed loading library description indicator")?;
                if has_description != 0 {
                    reader.string().ok_or("ERR Failed loading library description")?;
                }
                let code = reader.string().ok_or("ERR Failed loading library blob")?;
                let mut text = format!(
                    "#!{} name={}\n",
                    String::from_utf8_lossy(&engine),
                    String::from_utf8_lossy(&name)
                )
                .into_bytes();
                text.extend_from_slice(&code);
                Bytes::from(text)
            }
            _ => return Err("ERR given type is not a function"),
        });
    }
    Ok(codes)
}

/// Why a payload was refused, in Redis's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `ERR DUMP payload version or checksum are wrong`.
    VersionOrChecksum,
    /// `ERR Bad data format` (or an encoding pgvs3 does not read: see the docs).
    BadFormat,
}

/// RESTORE's reading of a payload: its version and checksum, then its value.
pub fn restore(payload: &[u8]) -> Result<Value, Refused> {
    let body = verified(payload).ok_or(Refused::VersionOrChecksum)?;
    let mut reader = Reader { data: body, at: 0 };
    reader.value().ok_or(Refused::BadFormat)
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

/// A length, or one of the special string encodings (`11xxxxxx`).
enum Len {
    Plain(usize),
    Special(u8),
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.data.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn remaining(&self) -> usize {
        self.data.len() - self.at
    }

    fn len_or_special(&mut self) -> Option<Len> {
        let first = self.byte()?;
        Some(match first >> 6 {
            0 => Len::Plain(usize::from(first & 0x3f)),
            1 => Len::Plain((usize::from(first & 0x3f) << 8) | usize::from(self.byte()?)),
            3 => Len::Special(first & 0x3f),
            _ => match first {
                0x80 => Len::Plain(u32::from_be_bytes(self.take(4)?.try_into().ok()?) as usize),
                0x81 => Len::Plain(usize::try_from(u64::from_be_bytes(self.take(8)?.try_into().ok()?)).ok()?),
                _ => return None,
            },
        })
    }

    fn len(&mut self) -> Option<usize> {
        match self.len_or_special()? {
            Len::Plain(len) => Some(len),
            Len::Special(_) => None,
        }
    }

    /// A count of things each taking at least a byte: no more than what is left.
    fn count(&mut self) -> Option<usize> {
        self.len().filter(|count| *count <= self.remaining())
    }

    fn string(&mut self) -> Option<Bytes> {
        Some(match self.len_or_special()? {
            Len::Plain(len) => Bytes::copy_from_slice(self.take(len)?),
            Len::Special(0) => Bytes::from((self.byte()? as i8).to_string()),
            Len::Special(1) => Bytes::from(i16::from_le_bytes(self.take(2)?.try_into().ok()?).to_string()),
            Len::Special(2) => Bytes::from(i32::from_le_bytes(self.take(4)?.try_into().ok()?).to_string()),
            Len::Special(3) => {
                let compressed = self.len()?;
                let len = self.len()?;
                Bytes::from(lzf_decompress(self.take(compressed)?, len)?)
            }
            Len::Special(_) => return None,
        })
    }

    fn value(&mut self) -> Option<Value> {
        let kind = self.byte()?;
        let value = match kind {
            STRING => Value::String(self.string()?),
            LIST | SET => {
                let count = self.count()?;
                let mut elements = Vec::with_capacity(count);
                for _ in 0..count {
                    elements.push(self.string()?);
                }
                if kind == LIST {
                    Value::List(elements)
                } else {
                    Value::Set(elements)
                }
            }
            ZSET | ZSET_2 => {
                let count = self.count()?;
                let mut members = Vec::with_capacity(count);
                for _ in 0..count {
                    let member = self.string()?;
                    let score = match kind {
                        ZSET_2 => f64::from_le_bytes(self.take(8)?.try_into().ok()?),
                        _ => self.old_score()?,
                    };
                    members.push((member, score));
                }
                Value::Zset(members)
            }
            HASH => {
                let count = self.count()?;
                let mut pairs = Vec::with_capacity(count);
                for _ in 0..count {
                    pairs.push((self.string()?, self.string()?));
                }
                Value::Hash(pairs)
            }
            SET_INTSET => Value::Set(intset(&self.string()?)?),
            HASH_LISTPACK => Value::Hash(pairs(listpack(&self.string()?)?)?),
            ZSET_LISTPACK => Value::Zset(
                pairs(listpack(&self.string()?)?)?
                    .into_iter()
                    .map(|(member, score)| Some((member, std::str::from_utf8(&score).ok()?.parse().ok()?)))
                    .collect::<Option<_>>()?,
            ),
            LIST_QUICKLIST_2 => {
                let nodes = self.count()?;
                let mut elements = Vec::new();
                for _ in 0..nodes {
                    match self.len()? {
                        // A plain node: one element.
                        1 => elements.push(self.string()?),
                        2 => elements.extend(listpack(&self.string()?)?),
                        _ => return None,
                    }
                }
                Value::List(elements)
            }
            _ => return None,
        };
        // An empty collection, or bytes left over: not a value Redis wrote.
        let empty = match &value {
            Value::String(_) => false,
            Value::List(items) | Value::Set(items) => items.is_empty(),
            Value::Zset(members) => members.is_empty(),
            Value::Hash(pairs) => pairs.is_empty(),
        };
        (!empty && self.remaining() == 0).then_some(value)
    }

    /// A score of the old ZSET type: a length byte and its text (253 NaN, 254 +inf, 255 -inf).
    fn old_score(&mut self) -> Option<f64> {
        match self.byte()? {
            253 => None,
            254 => Some(f64::INFINITY),
            255 => Some(f64::NEG_INFINITY),
            len => std::str::from_utf8(self.take(usize::from(len))?).ok()?.parse().ok(),
        }
    }
}

fn pairs(items: Vec<Bytes>) -> Option<Vec<(Bytes, Bytes)>> {
    if !items.len().is_multiple_of(2) {
        return None;
    }
    let mut items = items.into_iter();
    let mut pairs = Vec::with_capacity(items.len() / 2);
    while let (Some(a), Some(b)) = (items.next(), items.next()) {
        pairs.push((a, b));
    }
    Some(pairs)
}

/// liblzf's decompression, into exactly `len` bytes.
fn lzf_decompress(input: &[u8], len: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(len.min(input.len().saturating_mul(64)));
    let mut i = 0;
    while i < input.len() {
        let ctrl = usize::from(input[i]);
        i += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            out.extend_from_slice(input.get(i..i + run)?);
            i += run;
        } else {
            let mut run = ctrl >> 5;
            if run == 7 {
                run += usize::from(*input.get(i)?);
                i += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + usize::from(*input.get(i)?) + 1;
            i += 1;
            let from = out.len().checked_sub(back)?;
            for k in 0..run + 2 {
                let byte = out[from + k];
                out.push(byte);
            }
        }
        if out.len() > len {
            return None;
        }
    }
    (out.len() == len).then_some(out)
}

/// An intset's members, as decimal strings.
fn intset(blob: &[u8]) -> Option<Vec<Bytes>> {
    let width = u32::from_le_bytes(blob.get(0..4)?.try_into().ok()?) as usize;
    let count = u32::from_le_bytes(blob.get(4..8)?.try_into().ok()?) as usize;
    if !matches!(width, 2 | 4 | 8) || blob.len() != 8 + width.checked_mul(count)? {
        return None;
    }
    Some(
        blob[8..]
            .chunks(width)
            .map(|chunk| {
                let value = match width {
                    2 => i64::from(i16::from_le_bytes([chunk[0], chunk[1]])),
                    4 => i64::from(i32::from_le_bytes(chunk.try_into().expect("4 bytes"))),
                    _ => i64::from_le_bytes(chunk.try_into().expect("8 bytes")),
                };
                Bytes::from(value.to_string())
            })
            .collect(),
    )
}

/// A listpack's entries (integers as decimal strings).
fn listpack(blob: &[u8]) -> Option<Vec<Bytes>> {
    let total = u32::from_le_bytes(blob.get(0..4)?.try_into().ok()?) as usize;
    if total != blob.len() {
        return None;
    }
    let mut p = 6;
    let mut entries = Vec::new();
    loop {
        let b = *blob.get(p)?;
        if b == 0xff {
            break;
        }
        let int = |bytes: &[u8], bits: u32| -> i64 {
            let mut raw = 0u64;
            for (k, byte) in bytes.iter().enumerate() {
                raw |= u64::from(*byte) << (8 * k);
            }
            // Sign-extended from `bits`.
            ((raw << (64 - bits)) as i64) >> (64 - bits)
        };
        let (entry, len): (Bytes, usize) = if b & 0x80 == 0 {
            (Bytes::from(u64::from(b & 0x7f).to_string()), 1)
        } else if b & 0xc0 == 0x80 {
            let n = usize::from(b & 0x3f);
            (Bytes::copy_from_slice(blob.get(p + 1..p + 1 + n)?), 1 + n)
        } else if b & 0xe0 == 0xc0 {
            let raw = (u64::from(b & 0x1f) << 8) | u64::from(*blob.get(p + 1)?);
            let value = ((raw << 51) as i64) >> 51;
            (Bytes::from(value.to_string()), 2)
        } else if b & 0xf0 == 0xe0 {
            let n = (usize::from(b & 0x0f) << 8) | usize::from(*blob.get(p + 1)?);
            (Bytes::copy_from_slice(blob.get(p + 2..p + 2 + n)?), 2 + n)
        } else {
            match b {
                0xf0 => {
                    let n = u32::from_le_bytes(blob.get(p + 1..p + 5)?.try_into().ok()?) as usize;
                    (Bytes::copy_from_slice(blob.get(p + 5..p.checked_add(5 + n)?)?), 5 + n)
                }
                0xf1 => (Bytes::from(int(blob.get(p + 1..p + 3)?, 16).to_string()), 3),
                0xf2 => (Bytes::from(int(blob.get(p + 1..p + 4)?, 24).to_string()), 4),
                0xf3 => (Bytes::from(int(blob.get(p + 1..p + 5)?, 32).to_string()), 5),
                0xf4 => (Bytes::from(int(blob.get(p + 1..p + 9)?, 64).to_string()), 9),
                _ => return None,
            }
        };
        let back = match len {
            0..=127 => 1,
            128..=16383 => 2,
            16384..=2097151 => 3,
            2097152..=268435455 => 4,
            _ => 5,
        };
        p += len + back;
        entries.push(entry);
    }
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_is_redis_s() {
        // Redis's crc64.c test vector.
        assert_eq!(crc64(b"123456789"), 0xe9c6d914c4b8d9ca);
    }

    #[test]
    fn values_round_trip() {
        for value in [
            Value::String(Bytes::from_static(b"hello")),
            Value::List(vec![Bytes::from_static(b"a"), Bytes::from(vec![7u8; 70_000])]),
            Value::Zset(vec![
                (Bytes::from_static(b"m"), 1.5),
                (Bytes::from_static(b"n"), f64::INFINITY),
            ]),
            Value::Hash(vec![(Bytes::from_static(b"f"), Bytes::from_static(b"v"))]),
        ] {
            assert_eq!(restore(&dump(&value)), Ok(value));
        }
    }

    #[test]
    fn function_payloads_round_trip_and_refuse_as_redis() {
        let codes = [
            "#!lua name=a\nredis.register_function('f', function() return 1 end)",
            "#!lua name=b\n",
        ];
        let payload = dump_functions(codes);
        assert_eq!(payload[0], FUNCTION_2);
        assert_eq!(
            restore_functions(&payload).unwrap(),
            codes.map(|code| Bytes::from(code.to_owned()))
        );
        assert_eq!(restore_functions(&dump_functions([])).unwrap(), Vec::<Bytes>::new());
        let mut bad = payload.clone();
        bad[3] ^= 1;
        assert_eq!(
            restore_functions(&bad),
            Err("ERR DUMP payload version or checksum are wrong")
        );
        assert_eq!(
            restore_functions(&dump(&Value::String(Bytes::from_static(b"x")))),
            Err("ERR given type is not a function")
        );
        // A release candidate's library: name, engine, a description, the code after `#!`.
        let mut rc = vec![FUNCTION_RC];
        for part in [&b"lib"[..], b"LUA"] {
            put_string(&mut rc, part);
        }
        put_len(&mut rc, 1);
        put_string(&mut rc, b"a description");
        put_string(&mut rc, b"return 1");
        assert_eq!(
            restore_functions(&sealed(rc)).unwrap(),
            [Bytes::from_static(b"#!LUA name=lib\nreturn 1")]
        );
    }
}
