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
/// A stream as Redis 5 and 6 write it.
const STREAM_LISTPACKS: u8 = 15;
/// A stream as Redis 7.0 writes it: 15 with the first and greatest deleted IDs, entries added
/// and each group's entries read.
const STREAM_LISTPACKS_2: u8 = 19;
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
    Stream(Box<Stream>),
}

/// A stream ID: milliseconds and sequence number.
pub type Id = (u64, u64);

/// A stream as the payload carries it (Redis's `stream`, t_stream.c).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stream {
    /// Its radix tree's listpacks, in ID order.
    pub nodes: Vec<Node>,
    pub last: Id,
    /// The first entry's ID as Redis recorded it (DUMP writes it; RESTORE does not keep it).
    pub first: Id,
    pub max_deleted: Id,
    pub added: u64,
    pub groups: Vec<Group>,
}

/// A listpack of the stream: the entries it was given from its master ID on.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub master: Id,
    /// Its entries not deleted, in ID order.
    pub entries: Vec<Entry>,
    /// Entries it was given, deleted ones included (`stream-node-max-entries` counts them).
    pub given: u64,
    /// The ID of the last entry it was given (deleted or not).
    pub last: Id,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: Id,
    /// Fields and values, alternating.
    pub fields: Vec<Bytes>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub name: Bytes,
    pub last_delivered: Id,
    /// `None`: unknown (Redis's SCG_INVALID_ENTRIES_READ).
    pub entries_read: Option<u64>,
    /// The PEL in ID order.
    pub pending: Vec<Pending>,
    /// In name order.
    pub consumers: Vec<Consumer>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub id: Id,
    /// Unix milliseconds.
    pub delivered: i64,
    pub deliveries: u64,
    /// Its consumer, an index into the group's.
    pub consumer: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Consumer {
    pub name: Bytes,
    /// Unix milliseconds.
    pub seen: i64,
}

impl Stream {
    /// Entries it holds.
    pub fn length(&self) -> u64 {
        self.nodes.iter().map(|node| node.entries.len() as u64).sum()
    }
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

/// A string as Redis's rdbSaveRawString writes it: the canonical form of an integer that fits
/// 32 bits (at most 11 bytes) as the integer; more than 20 bytes LZF-compressed when that saves
/// more than 4 bytes; else its bytes.
fn put_string(out: &mut Vec<u8>, data: &[u8]) {
    if let Some(value) = canonical_integer(data).and_then(|value| i32::try_from(value).ok()) {
        match (i8::try_from(value), i16::try_from(value)) {
            (Ok(small), _) => out.extend_from_slice(&[0xc0, small as u8]),
            (_, Ok(medium)) => {
                out.push(0xc1);
                out.extend_from_slice(&medium.to_le_bytes());
            }
            _ => {
                out.push(0xc2);
                out.extend_from_slice(&value.to_le_bytes());
            }
        }
        return;
    }
    if data.len() > 20
        && let Some(compressed) = lzf_compress(data, data.len() - 4)
    {
        out.push(0xc3);
        put_len(out, compressed.len());
        put_len(out, data.len());
        out.extend_from_slice(&compressed);
        return;
    }
    put_len(out, data.len());
    out.extend_from_slice(data);
}

/// The integer `data` is the canonical decimal form of (no sign but `-`, no leading zeros, no
/// `-0`), as Redis's string2ll and lpStringToInt64 accept one.
fn canonical_integer(data: &[u8]) -> Option<i64> {
    if data.len() > 20 {
        return None;
    }
    let value: i64 = std::str::from_utf8(data).ok()?.parse().ok()?;
    (value.to_string().as_bytes() == data).then_some(value)
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
        Value::Stream(stream) => put_stream(&mut out, stream),
    }
    sealed(out)
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    put_len(out, value as usize);
}

fn put_id(out: &mut Vec<u8>, id: Id) {
    put_u64(out, id.0);
    put_u64(out, id.1);
}

/// An ID as a radix tree key: both halves big-endian.
fn raw_id(id: Id) -> [u8; 16] {
    let mut raw = [0; 16];
    raw[..8].copy_from_slice(&id.0.to_be_bytes());
    raw[8..].copy_from_slice(&id.1.to_be_bytes());
    raw
}

/// A stream as Redis 7.0's rdbSaveObject writes it (RDB_TYPE_STREAM_LISTPACKS_2).
fn put_stream(out: &mut Vec<u8>, stream: &Stream) {
    out.push(STREAM_LISTPACKS_2);
    put_len(out, stream.nodes.len());
    for node in &stream.nodes {
        put_string(out, &raw_id(node.master));
        put_string(out, &node_listpack(node));
    }
    put_u64(out, stream.length());
    put_id(out, stream.last);
    put_id(out, stream.first);
    put_id(out, stream.max_deleted);
    put_u64(out, stream.added);
    put_len(out, stream.groups.len());
    for group in &stream.groups {
        put_string(out, &group.name);
        put_id(out, group.last_delivered);
        // Unknown is Redis's -1, written as an unsigned length.
        put_u64(out, group.entries_read.unwrap_or(u64::MAX));
        put_len(out, group.pending.len());
        for pending in &group.pending {
            out.extend_from_slice(&raw_id(pending.id));
            out.extend_from_slice(&pending.delivered.to_le_bytes());
            put_u64(out, pending.deliveries);
        }
        put_len(out, group.consumers.len());
        for (index, consumer) in group.consumers.iter().enumerate() {
            put_string(out, &consumer.name);
            out.extend_from_slice(&consumer.seen.to_le_bytes());
            let owned: Vec<_> = group
                .pending
                .iter()
                .filter(|pending| pending.consumer == index)
                .collect();
            put_len(out, owned.len());
            for pending in owned {
                out.extend_from_slice(&raw_id(pending.id));
            }
        }
    }
}

/// Entry flags of a stream listpack (t_stream.c).
const ENTRY_DELETED: i64 = 1;
const ENTRY_SAME_FIELDS: i64 = 2;

/// A node's listpack as Redis's streamAppendItem builds it: the master entry (entries held,
/// deleted, the first entry's field names, a 0), then each entry's flags, ID as the difference
/// from the master ID, its fields and values (only the values when its field names are the
/// master's) and its number of listpack elements. pgvs3 keeps no deleted entries: none are
/// written.
fn node_listpack(node: &Node) -> Vec<u8> {
    let mut lp = ListpackWriter::default();
    let master_fields: Vec<&Bytes> = node
        .entries
        .first()
        .map_or(Vec::new(), |entry| entry.fields.iter().step_by(2).collect());
    lp.int(node.entries.len() as i64);
    lp.int(0);
    lp.int(master_fields.len() as i64);
    for field in &master_fields {
        lp.string(field);
    }
    lp.int(0);
    for entry in &node.entries {
        let same = entry.fields.len() == 2 * master_fields.len()
            && entry.fields.iter().step_by(2).zip(&master_fields).all(|(a, b)| a == *b);
        lp.int(if same { ENTRY_SAME_FIELDS } else { 0 });
        lp.int(entry.id.0.wrapping_sub(node.master.0) as i64);
        lp.int(entry.id.1.wrapping_sub(node.master.1) as i64);
        let pairs = (entry.fields.len() / 2) as i64;
        if same {
            for value in entry.fields.iter().skip(1).step_by(2) {
                lp.string(value);
            }
            lp.int(pairs + 3);
        } else {
            lp.int(pairs);
            for item in &entry.fields {
                lp.string(item);
            }
            lp.int(2 * pairs + 4);
        }
    }
    lp.finish()
}

/// A listpack being built, element after element, as Redis's lpAppend writes them (a string
/// that is an integer's canonical form as the integer, each in its smallest encoding).
#[derive(Default)]
struct ListpackWriter {
    body: Vec<u8>,
    count: usize,
}

impl ListpackWriter {
    fn int(&mut self, value: i64) {
        let start = self.body.len();
        if (0..=127).contains(&value) {
            self.body.push(value as u8);
        } else if (-4096..=4095).contains(&value) {
            let bits = (value as u64) & 0x1fff;
            self.body.extend_from_slice(&[0xc0 | (bits >> 8) as u8, bits as u8]);
        } else if let Ok(value) = i16::try_from(value) {
            self.body.push(0xf1);
            self.body.extend_from_slice(&value.to_le_bytes());
        } else if (-(1 << 23)..(1 << 23)).contains(&value) {
            self.body.push(0xf2);
            self.body.extend_from_slice(&(value as i32).to_le_bytes()[..3]);
        } else if let Ok(value) = i32::try_from(value) {
            self.body.push(0xf3);
            self.body.extend_from_slice(&value.to_le_bytes());
        } else {
            self.body.push(0xf4);
            self.body.extend_from_slice(&value.to_le_bytes());
        }
        self.close(start);
    }

    fn string(&mut self, data: &[u8]) {
        if let Some(value) = canonical_integer(data) {
            return self.int(value);
        }
        let start = self.body.len();
        let len = data.len();
        if len < 64 {
            self.body.push(0x80 | len as u8);
        } else if len < 4096 {
            self.body.extend_from_slice(&[0xe0 | (len >> 8) as u8, len as u8]);
        } else {
            self.body.push(0xf0);
            self.body.extend_from_slice(&(len as u32).to_le_bytes());
        }
        self.body.extend_from_slice(data);
        self.close(start);
    }

    /// Ends the element begun at `start` with its back length (lpEncodeBacklen).
    fn close(&mut self, start: usize) {
        let len = (self.body.len() - start) as u64;
        let size = backlen_size(len as usize);
        for k in (0..size).rev() {
            let seven = ((len >> (7 * k)) & 127) as u8;
            // The most significant group comes first, the others marked with the high bit.
            self.body.push(if k == size - 1 { seven } else { seven | 128 });
        }
        self.count += 1;
    }

    fn finish(self) -> Vec<u8> {
        let total = 6 + self.body.len() + 1;
        let mut lp = Vec::with_capacity(total);
        lp.extend_from_slice(&(total as u32).to_le_bytes());
        // 65535: unknown, counted when read.
        lp.extend_from_slice(&(self.count.min(65535) as u16).to_le_bytes());
        lp.extend_from_slice(&self.body);
        lp.push(0xff);
        lp
    }
}

/// Bytes of an element's back length (lpEncodeBacklen).
fn backlen_size(len: usize) -> usize {
    match len {
        0..=127 => 1,
        128..16383 => 2,
        16383..2097151 => 3,
        2097151..268435455 => 4,
        _ => 5,
    }
}

/// liblzf's lzf_compress as Redis builds it (HLOG 16, VERY_FAST, the hash table starting
/// empty) into at most `out_len` bytes; `None` when it does not fit.
fn lzf_compress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    const HSIZE: usize = 1 << 16;
    const MAX_LIT: usize = 1 << 5;
    const MAX_OFF: usize = 1 << 13;
    const MAX_REF: usize = (1 << 8) + (1 << 3);
    let in_len = input.len();
    if in_len < 3 || out_len == 0 {
        return None;
    }
    let first = |p: usize| (u32::from(input[p]) << 8) | u32::from(input[p + 1]);
    let next = |v: u32, p: usize| (v << 8) | u32::from(input[p + 2]);
    let slot = |h: u32| ((h >> 8).wrapping_sub(h.wrapping_mul(5)) as usize) & (HSIZE - 1);
    // Positions + 1 (0: none).
    let mut table = vec![0usize; HSIZE];
    // (Slack for the run header the last step may start.)
    let mut out = vec![0u8; out_len + 4];
    let (mut ip, mut op, mut lit) = (0usize, 1usize, 0usize);
    let mut hval = first(ip);
    while ip + 2 < in_len {
        hval = next(hval, ip);
        let h = slot(hval);
        let reference = table[h].checked_sub(1);
        table[h] = ip + 1;
        let matched = reference.filter(|&r| {
            r > 0 && ip - r - 1 < MAX_OFF && input[r + 2] == input[ip + 2] && input[r..r + 2] == input[ip..ip + 2]
        });
        if let Some(r) = matched {
            let off = ip - r - 1;
            let mut len = 2;
            let maxlen = (in_len - ip - len).min(MAX_REF);
            if op + 3 + 1 >= out_len && op - usize::from(lit == 0) + 3 + 1 >= out_len {
                return None;
            }
            out[op - lit - 1] = (lit as u8).wrapping_sub(1);
            op -= usize::from(lit == 0);
            let mut mismatched = false;
            if maxlen > 16 {
                for _ in 0..16 {
                    len += 1;
                    if input[r + len] != input[ip + len] {
                        mismatched = true;
                        break;
                    }
                }
            }
            if !mismatched {
                loop {
                    len += 1;
                    if !(len < maxlen && input[r + len] == input[ip + len]) {
                        break;
                    }
                }
            }
            len -= 2;
            ip += 1;
            if len < 7 {
                out[op] = ((off >> 8) + (len << 5)) as u8;
                op += 1;
            } else {
                out[op] = ((off >> 8) + (7 << 5)) as u8;
                out[op + 1] = (len - 7) as u8;
                op += 2;
            }
            out[op] = off as u8;
            op += 2;
            lit = 0;
            ip += len + 1;
            if ip + 2 >= in_len {
                break;
            }
            ip -= 2;
            hval = first(ip);
            for _ in 0..2 {
                hval = next(hval, ip);
                table[slot(hval)] = ip + 1;
                ip += 1;
            }
        } else {
            if op >= out_len {
                return None;
            }
            lit += 1;
            out[op] = input[ip];
            op += 1;
            ip += 1;
            if lit == MAX_LIT {
                out[op - lit - 1] = (lit - 1) as u8;
                lit = 0;
                op += 1;
            }
        }
    }
    if op + 3 > out_len {
        return None;
    }
    while ip < in_len {
        lit += 1;
        out[op] = input[ip];
        op += 1;
        ip += 1;
        if lit == MAX_LIT {
            out[op - lit - 1] = (lit - 1) as u8;
            lit = 0;
            op += 1;
        }
    }
    out[op - lit - 1] = (lit as u8).wrapping_sub(1);
    op -= usize::from(lit == 0);
    (op <= out_len).then(|| {
        out.truncate(op);
        out
    })
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
            STREAM_LISTPACKS | STREAM_LISTPACKS_2 => Value::Stream(Box::new(self.stream(kind == STREAM_LISTPACKS_2)?)),
            _ => return None,
        };
        // An empty collection, or bytes left over: not a value Redis wrote.
        let empty = match &value {
            Value::String(_) | Value::Stream(_) => false,
            Value::List(items) | Value::Set(items) => items.is_empty(),
            Value::Zset(members) => members.is_empty(),
            Value::Hash(pairs) => pairs.is_empty(),
        };
        (!empty && self.remaining() == 0).then_some(value)
    }

    fn u64(&mut self) -> Option<u64> {
        self.len().map(|len| len as u64)
    }

    /// A number pgvs3 keeps in a bigint.
    fn bigint(&mut self) -> Option<u64> {
        self.u64().filter(|value| i64::try_from(*value).is_ok())
    }

    fn id(&mut self) -> Option<Id> {
        Some((self.u64()?, self.u64()?))
    }

    fn raw_id(&mut self) -> Option<Id> {
        let raw = self.take(16)?;
        Some((
            u64::from_be_bytes(raw[..8].try_into().ok()?),
            u64::from_be_bytes(raw[8..].try_into().ok()?),
        ))
    }

    /// rdbLoadMillisecondTime: eight bytes, little-endian.
    fn time(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// A stream (15: Redis 5 and 6; 19, `v2`: 7.0), as rdbLoadObject reads one, checked as
    /// Redis's deep sanitization checks it and for what pgvs3's tables need: the nodes in ID
    /// order, their entries' IDs increasing from each node's master ID to before the next's,
    /// the length their entries', the last ID at or after them, each PEL entry owned by one
    /// consumer of its group, no duplicated group, consumer or PEL entry.
    fn stream(&mut self, v2: bool) -> Option<Stream> {
        let mut stream = Stream::default();
        // The last entry read (deleted ones too), and the last master ID.
        let mut previous: Option<Id> = None;
        let mut previous_master: Option<Id> = None;
        for _ in 0..self.count()? {
            let key = self.string()?;
            if key.len() != 16 {
                return None;
            }
            let master = (
                u64::from_be_bytes(key[..8].try_into().ok()?),
                u64::from_be_bytes(key[8..].try_into().ok()?),
            );
            if previous_master.is_some_and(|before| before >= master) || previous.is_some_and(|before| before >= master)
            {
                return None;
            }
            previous_master = Some(master);
            let node = stream_node(&self.string()?, master)?;
            previous = Some(node.last);
            // A node whose entries are all deleted holds nothing pgvs3 keeps.
            if !node.entries.is_empty() {
                stream.nodes.push(node);
            }
        }
        let length = self.u64()?;
        stream.last = self.id()?;
        let first_entry = stream.nodes.first().map(|node| node.entries[0].id);
        if v2 {
            stream.first = self.id()?;
            stream.max_deleted = self.id()?;
            stream.added = self.bigint()?;
        } else {
            stream.first = first_entry.unwrap_or((0, 0));
            stream.added = length;
        }
        if length != stream.length() || previous.is_some_and(|last| last > stream.last) || stream.added < length {
            return None;
        }
        let mut names = std::collections::HashSet::new();
        for _ in 0..self.count()? {
            let name = self.string()?;
            let last_delivered = self.id()?;
            let entries_read = match v2 {
                true => match self.u64()? {
                    u64::MAX => None,
                    read => Some(read).filter(|read| i64::try_from(*read).is_ok()).map(Some)?,
                },
                false => estimated_reads(&stream, first_entry, last_delivered),
            };
            // The PEL by ID, each with its owner once the consumers are read.
            let mut pel = std::collections::BTreeMap::new();
            for _ in 0..self.count()? {
                let id = self.raw_id()?;
                let delivered = self.time()?;
                let deliveries = self.bigint()?;
                if pel.insert(id, (delivered, deliveries, None)).is_some() {
                    return None;
                }
            }
            let mut consumers = Vec::new();
            let mut consumer_names = std::collections::HashSet::new();
            for _ in 0..self.count()? {
                let name = self.string()?;
                let seen = self.time()?;
                for _ in 0..self.count()? {
                    let owner = &mut pel.get_mut(&self.raw_id()?)?.2;
                    if owner.replace(consumers.len()).is_some() {
                        return None;
                    }
                }
                if !consumer_names.insert(name.clone()) {
                    return None;
                }
                consumers.push(Consumer { name, seen });
            }
            let pending = pel
                .into_iter()
                .map(|(id, (delivered, deliveries, owner))| {
                    Some(Pending {
                        id,
                        delivered,
                        deliveries,
                        consumer: owner?,
                    })
                })
                .collect::<Option<_>>()?;
            if !names.insert(name.clone()) {
                return None;
            }
            stream.groups.push(Group {
                name,
                last_delivered,
                entries_read,
                pending,
                consumers,
            });
        }
        Some(stream)
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

/// A group's entries read as Redis 7.0 estimates them for a stream of Redis 5 or 6
/// (streamEstimateDistanceFromFirstEverEntry, with no entry deleted and every entry added held).
fn estimated_reads(stream: &Stream, first: Option<Id>, id: Id) -> Option<u64> {
    let length = stream.length();
    if stream.added == 0 || id == stream.last || (length == 0 && id <= stream.last) {
        return Some(stream.added);
    }
    match first {
        _ if id > stream.last => None,
        Some(first) if id < first => Some(stream.added - length),
        Some(first) if id == first => Some(stream.added - length + 1),
        _ => None,
    }
}

/// A stream node's listpack (see [`node_listpack`]) under master ID `master`, deleted entries
/// read and left out.
fn stream_node(blob: &[u8], master: Id) -> Option<Node> {
    let mut items = listpack(blob)?.into_iter();
    let held = u64::try_from(lp_int(&mut items)?).ok()?;
    let deleted = u64::try_from(lp_int(&mut items)?).ok()?;
    let mut master_fields = Vec::new();
    for _ in 0..u64::try_from(lp_int(&mut items)?).ok()? {
        master_fields.push(items.next()?);
    }
    if lp_int(&mut items)? != 0 {
        return None;
    }
    let given = held.checked_add(deleted)?;
    let mut node = Node {
        master,
        entries: Vec::new(),
        given,
        last: master,
    };
    let mut previous: Option<Id> = None;
    for _ in 0..given {
        let flags = lp_int(&mut items)?;
        if flags & !(ENTRY_DELETED | ENTRY_SAME_FIELDS) != 0 {
            return None;
        }
        let id = (
            master.0.wrapping_add(lp_int(&mut items)? as u64),
            master.1.wrapping_add(lp_int(&mut items)? as u64),
        );
        if id < master || previous.is_some_and(|before| before >= id) {
            return None;
        }
        previous = Some(id);
        let mut fields = Vec::new();
        let elements = if flags & ENTRY_SAME_FIELDS != 0 {
            for field in &master_fields {
                fields.push(field.clone());
                fields.push(items.next()?);
            }
            master_fields.len() as i64 + 3
        } else {
            let count = lp_int(&mut items)?;
            for _ in 0..u64::try_from(count).ok()? {
                fields.push(items.next()?);
                fields.push(items.next()?);
            }
            count.checked_mul(2)?.checked_add(4)?
        };
        if lp_int(&mut items)? != elements {
            return None;
        }
        node.last = id;
        if flags & ENTRY_DELETED == 0 {
            node.entries.push(Entry { id, fields });
        }
    }
    (items.next().is_none() && node.entries.len() as u64 == held).then_some(node)
}

/// A listpack element that is an integer (an integer encoding, or a string of one, as Redis's
/// lpGetIntegerIfValid takes it).
fn lp_int(items: &mut impl Iterator<Item = Bytes>) -> Option<i64> {
    canonical_integer(&items.next()?)
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
        p += len + backlen_size(len);
        entries.push(entry);
    }
    // The end marker is the last byte.
    (p + 1 == blob.len()).then_some(entries)
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

    fn sample_stream() -> Stream {
        let entry = |ms, fields: &[&str]| Entry {
            id: (ms, 0),
            fields: fields.iter().map(|text| Bytes::from(text.to_string())).collect(),
        };
        Stream {
            nodes: vec![
                Node {
                    master: (5, 0),
                    entries: vec![
                        entry(5, &["f", "1"]),
                        entry(6, &["f", "-70000"]),
                        entry(
                            9,
                            &[
                                "g",
                                "x",
                                "h",
                                "a long value that is more than sixty-four bytes long..........",
                            ],
                        ),
                    ],
                    given: 3,
                    last: (9, 0),
                },
                Node {
                    master: (10, 0),
                    entries: vec![entry(10, &["f", "12345678901"])],
                    given: 1,
                    last: (10, 0),
                },
            ],
            last: (10, 0),
            first: (5, 0),
            max_deleted: (0, 0),
            added: 4,
            groups: vec![Group {
                name: Bytes::from_static(b"g1"),
                last_delivered: (9, 0),
                entries_read: None,
                pending: vec![
                    Pending {
                        id: (5, 0),
                        delivered: 1_700_000_000_000,
                        deliveries: 2,
                        consumer: 1,
                    },
                    Pending {
                        id: (6, 0),
                        delivered: 1_700_000_000_001,
                        deliveries: 1,
                        consumer: 0,
                    },
                ],
                consumers: vec![
                    Consumer {
                        name: Bytes::from_static(b"alice"),
                        seen: 1_700_000_000_002,
                    },
                    Consumer {
                        name: Bytes::from_static(b"123"),
                        seen: 7,
                    },
                ],
            }],
        }
    }

    #[test]
    fn streams_round_trip() {
        let value = Value::Stream(Box::new(sample_stream()));
        let payload = dump(&value);
        assert_eq!(payload[0], STREAM_LISTPACKS_2);
        assert_eq!(restore(&payload), Ok(value));
    }

    #[test]
    fn lzf_round_trips() {
        for input in [
            b"abcabcabcabcabcabcabcabcabcabcabcabc".to_vec(),
            (0..5000u32).map(|n| (n * 7 % 251) as u8).collect(),
            b"x".repeat(1000),
        ] {
            let compressed = lzf_compress(&input, input.len() - 4).expect("compressible");
            assert_eq!(lzf_decompress(&compressed, input.len()).as_deref(), Some(&input[..]));
        }
        assert_eq!(lzf_compress(b"abcdefghijklmnopqrstuvwxyz", 22), None);
    }

    /// Every truncation and every bit flipped (the checksum made right again) is refused or
    /// read, never a panic.
    #[test]
    fn hostile_stream_payloads_are_refused() {
        let payload = dump(&Value::Stream(Box::new(sample_stream())));
        let body = &payload[..payload.len() - 10];
        for cut in 0..body.len() {
            assert_eq!(restore(&sealed(body[..cut].to_vec())), Err(Refused::BadFormat), "{cut}");
        }
        for at in 0..body.len() {
            for bit in 0..8 {
                let mut flipped = body.to_vec();
                flipped[at] ^= 1 << bit;
                let _ = restore(&sealed(flipped));
            }
        }
        // A PEL entry no consumer owns.
        let mut stream = sample_stream();
        stream.groups[0].consumers.truncate(1);
        stream.groups[0].pending.retain(|pending| pending.consumer == 0);
        assert!(restore(&dump(&Value::Stream(Box::new(stream.clone())))).is_ok());
        let mut orphan = dump(&Value::Stream(Box::new(stream)));
        let body_len = orphan.len() - 10;
        orphan.truncate(body_len);
        // (The body ends with the consumer's PEL, a count of 1 and an ID of 16 bytes: emptied.)
        let at = body_len - 17;
        assert_eq!(orphan[at], 1);
        orphan[at] = 0;
        orphan.truncate(at + 1);
        assert_eq!(restore(&sealed(orphan)), Err(Refused::BadFormat));
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
