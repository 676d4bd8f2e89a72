//! Stream commands (XADD, XRANGE, XREAD, XTRIM, XINFO, ...): parsing, with Redis's checks and
//! error texts, into calls of `pgvs3.resp_stream` (gateway/migrations/functions/resp_stream.sql),
//! which does their work, and the entries it returns turned into Redis's replies. Consumer
//! groups are stream_group.rs's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;

use crate::resp::codec::Reply;
use crate::resp::command::{integer, key, parse_integer, syntax_error, wrong_arity};
use crate::resp::typed::{Shape, Typed};
use crate::store::{StreamOp, TypedRow};

/// Most bytes of fields and values one entry holds: PostgreSQL keeps a row's array in one
/// value of at most 1 GiB, and an error raised there would fail the shared transaction.
const MAX_ENTRY_BYTES: usize = 512 * 1024 * 1024;
/// XINFO STREAM FULL's entries without COUNT.
const FULL_COUNT: i64 = 10;

/// An entry ID: a Unix time in milliseconds and a sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct StreamId {
    ms: u64,
    seq: u64,
}

impl StreamId {
    const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    /// As the SQL takes it: each half with its sign bit flipped, which keeps the order in a
    /// signed bigint (see 0022_resp_streams.sql).
    pub(super) fn stored(self) -> [Option<i64>; 2] {
        [Some(stored_half(self.ms)), Some(stored_half(self.seq))]
    }

    /// From the SQL's 16 bytes (both halves as stored, big-endian).
    pub(super) fn from_stored(bytes: &[u8]) -> Option<StreamId> {
        let (ms, seq) = bytes.split_at_checked(8)?;
        let half = |bytes: &[u8]| Some(stored_half(u64::from_be_bytes(bytes.try_into().ok()?)) as u64);
        Some(StreamId {
            ms: half(ms)?,
            seq: half(seq)?,
        })
    }

    fn successor(self) -> Option<StreamId> {
        match self.seq.checked_add(1) {
            Some(seq) => Some(StreamId { seq, ..self }),
            None => Some(StreamId {
                ms: self.ms.checked_add(1)?,
                seq: 0,
            }),
        }
    }

    fn predecessor(self) -> Option<StreamId> {
        match self.seq.checked_sub(1) {
            Some(seq) => Some(StreamId { seq, ..self }),
            None => Some(StreamId {
                ms: self.ms.checked_sub(1)?,
                seq: u64::MAX,
            }),
        }
    }
}

/// As a DUMP payload carries it (rdb.rs).
impl From<super::rdb::Id> for StreamId {
    fn from((ms, seq): super::rdb::Id) -> StreamId {
        StreamId { ms, seq }
    }
}

impl From<StreamId> for super::rdb::Id {
    fn from(id: StreamId) -> super::rdb::Id {
        (id.ms, id.seq)
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// A half of an ID with its sign bit flipped: u64 order becomes i64 order (and the bits of a
/// stored half, flipped again, are the u64).
fn stored_half(half: u64) -> i64 {
    (half ^ (1 << 63)) as i64
}

pub(super) fn invalid_id() -> Reply {
    Reply::error("ERR Invalid stream ID specified as stream command argument")
}

/// An ID as Redis reads one (streamGenericParseIDOrReply): `ms-seq`, or `ms` with
/// `missing_seq`; `-` and `+` are the least and greatest unless `strict`.
pub(super) fn parse_id(arg: &[u8], missing_seq: u64, strict: bool) -> Result<StreamId, Reply> {
    match arg {
        b"-" if !strict => return Ok(StreamId::MIN),
        b"+" if !strict => return Ok(StreamId::MAX),
        _ if arg.len() > 127 => return Err(invalid_id()),
        _ => {}
    }
    let number = |digits: &[u8]| {
        std::str::from_utf8(digits)
            .ok()
            .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|digits| digits.parse::<u64>().ok())
            .ok_or_else(invalid_id)
    };
    match arg.iter().position(|b| *b == b'-') {
        Some(dash) => Ok(StreamId {
            ms: number(&arg[..dash])?,
            seq: number(&arg[dash + 1..])?,
        }),
        None => Ok(StreamId {
            ms: number(arg)?,
            seq: missing_seq,
        }),
    }
}

/// A bound of XRANGE's interval: an ID (`missing_seq` for an incomplete one), exclusive after `(`.
fn parse_bound(arg: &[u8], missing_seq: u64) -> Result<(StreamId, bool), Reply> {
    match arg.strip_prefix(b"(") {
        Some(rest) if !rest.is_empty() => Ok((parse_id(rest, missing_seq, true)?, true)),
        _ => Ok((parse_id(arg, missing_seq, false)?, false)),
    }
}

/// The first ID of an interval (XRANGE's start, XAUTOCLAIM's cursor), included.
pub(super) fn interval_start(arg: &[u8]) -> Result<StreamId, Reply> {
    match parse_bound(arg, 0)? {
        (start, true) => start
            .successor()
            .ok_or_else(|| Reply::error("ERR invalid start ID for the interval")),
        (start, false) => Ok(start),
    }
}

/// The last ID of an interval, included.
pub(super) fn interval_end(arg: &[u8]) -> Result<StreamId, Reply> {
    match parse_bound(arg, u64::MAX)? {
        (end, true) => end
            .predecessor()
            .ok_or_else(|| Reply::error("ERR invalid end ID for the interval")),
        (end, false) => Ok(end),
    }
}

/// Whether an XADD's trim removed entries, for its keyspace events, which its reply does not
/// tell: Redis emits `xtrim` after `xadd` then. The call's `scores` say how many went (each
/// entry's share when XADDs were coalesced, coalesce.rs). Set by each run (a batch run again
/// sets it again), read by the recorder (notify.rs) after it.
#[derive(Debug, Clone, Default)]
pub struct Trimmed(Arc<AtomicBool>);

impl Trimmed {
    /// From how many entries the trim removed (`None`: no trim).
    fn record(&self, removed: Option<f64>) {
        self.0
            .store(removed.is_some_and(|removed| removed > 0.0), Ordering::Relaxed);
    }

    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// How a stream call's row becomes the reply.
#[derive(Debug, Clone)]
pub enum Reading {
    /// XADD: the new entry's ID, or nil (NOMKSTREAM on a missing stream).
    Id(Trimmed),
    /// XRANGE/XREVRANGE: the entries; with `count_zero` (COUNT 0) the null array for an
    /// existing stream, as Redis answers.
    Entries { count_zero: bool },
    /// XREAD: each stream that has entries with its entries, or the null array.
    Read,
    /// XINFO STREAM, with FULL its first entries instead of the first and last.
    Info { full: bool },
}

pub fn reply(reading: &Reading, row: TypedRow) -> Reply {
    let mut items = row.items.into_iter();
    let mut lengths = row.scores.into_iter();
    match reading {
        Reading::Id(trimmed) => {
            trimmed.record(lengths.next().flatten());
            items.next().flatten().map_or(Reply::Nil, |id| id_reply(&id))
        }
        Reading::Entries { count_zero: true } if row.n == Some(1) => Reply::NilArray,
        Reading::Entries { .. } => Reply::Array(entries(&mut items, &mut lengths, usize::MAX)),
        Reading::Read => {
            let mut streams = Vec::new();
            while let Some(name) = items.next() {
                let count = lengths.next().flatten().unwrap_or(0.0) as usize;
                let found = entries(&mut items, &mut lengths, count);
                streams.push((name.map_or(Reply::Nil, Reply::Bulk), Reply::Array(found)));
            }
            if streams.is_empty() {
                Reply::NilArray
            } else {
                Reply::Keyed(streams)
            }
        }
        Reading::Info { full } => {
            let length = row.n.unwrap_or(0);
            let mut id = || items.next().flatten().map_or(Reply::Nil, |id| id_reply(&id));
            let (last, deleted, first) = (id(), id(), id());
            let added = lengths.next().flatten().unwrap_or(0.0) as i64;
            let groups = lengths.next().flatten().unwrap_or(0.0) as usize;
            let listed = lengths.next().flatten().unwrap_or(0.0) as usize;
            // Redis's radix tree holds up to 100 entries per node: the counts it would show.
            let nodes = (length + 99) / 100;
            let mut fields = vec![
                (Reply::text("length"), Reply::Integer(length)),
                (Reply::text("radix-tree-keys"), Reply::Integer(nodes)),
                (Reply::text("radix-tree-nodes"), Reply::Integer(nodes + 1)),
                (Reply::text("last-generated-id"), last),
                (Reply::text("max-deleted-entry-id"), deleted),
                (Reply::text("entries-added"), Reply::Integer(added)),
                (Reply::text("recorded-first-entry-id"), first),
            ];
            if *full {
                let found = entries(&mut items, &mut lengths, listed);
                fields.push((Reply::text("entries"), Reply::Array(found)));
                let groups = super::stream_group::full_groups(&mut items, &mut lengths, groups);
                fields.push((Reply::text("groups"), Reply::Array(groups)));
            } else {
                let mut ends = entries(&mut items, &mut lengths, 2).into_iter();
                fields.push((Reply::text("groups"), Reply::Integer(groups as i64)));
                fields.push((Reply::text("first-entry"), ends.next().unwrap_or(Reply::Nil)));
                fields.push((Reply::text("last-entry"), ends.next().unwrap_or(Reply::Nil)));
            }
            Reply::Map(fields)
        }
    }
}

pub(super) fn id_reply(stored: &[u8]) -> Reply {
    StreamId::from_stored(stored).map_or(Reply::Nil, |id| Reply::text(&id.to_string()))
}

/// Up to `count` entries from the flat items (each an ID and its fields and values) and
/// lengths (each entry's number of fields and values), as `[id, [field, value, ...]]`; a NULL
/// length is an entry deleted since a group delivered it, `[id, nil]` as Redis answers.
pub(super) fn entries(
    items: &mut impl Iterator<Item = Option<Bytes>>,
    lengths: &mut impl Iterator<Item = Option<f64>>,
    count: usize,
) -> Vec<Reply> {
    let mut found = Vec::new();
    while found.len() < count {
        let Some(length) = lengths.next() else { break };
        let id = items.next().flatten().map_or(Reply::Nil, |id| id_reply(&id));
        let fields = match length {
            Some(length) => Reply::Array(
                items
                    .by_ref()
                    .take(length as usize)
                    .map(|item| item.map_or(Reply::Nil, Reply::Bulk))
                    .collect(),
            ),
            None => Reply::NilArray,
        };
        found.push(Reply::Array(vec![id, fields]));
    }
    found
}

/// XADD's and XTRIM's trimming: by length (MAXLEN) or by least ID (MINID), and how.
#[derive(Debug, Clone, Copy)]
struct Trim {
    by: TrimBy,
    /// `~`: only whole nodes go, as in Redis (functions/resp_stream.sql `resp_stream_trim`).
    approximate: bool,
    /// LIMIT: how many entries a `~` trim may remove at most (`Some(0)`: no limit; `None`:
    /// Redis's default, 100 nodes' worth).
    most: Option<i64>,
}

#[derive(Debug, Clone, Copy)]
enum TrimBy {
    MaxLen(i64),
    MinId(StreamId),
}

impl Trim {
    /// As the SQL takes it: {by ID (1) or length (0), plus 2 for `~`, threshold, threshold's
    /// seq, most}.
    fn ints(trim: Option<Trim>) -> [Option<i64>; 4] {
        let Some(trim) = trim else {
            return [None; 4];
        };
        let how = 2 * i64::from(trim.approximate);
        match trim.by {
            TrimBy::MaxLen(len) => [Some(how), Some(len), None, trim.most],
            TrimBy::MinId(id) => {
                let [ms, seq] = id.stored();
                [Some(how + 1), ms, seq, trim.most]
            }
        }
    }
}

/// XADD's ID argument.
#[derive(Debug, Clone, Copy)]
enum NewId {
    /// `*`.
    Auto,
    /// `<ms>-*`.
    AutoSeq(u64),
    Explicit(StreamId),
}

/// The options of XADD or XTRIM.
struct AddOrTrim {
    trim: Option<Trim>,
    nomkstream: bool,
    /// XADD's ID, and where its fields start.
    new_id: Option<(NewId, usize)>,
}

/// The options of XADD (`xadd`) or XTRIM from `args[2]` on, as Redis's
/// streamParseAddOrTrimArgsOrReply reads them.
fn parse_add_or_trim(args: &[Bytes], xadd: bool) -> Result<AddOrTrim, Reply> {
    enum Strategy {
        None,
        MaxLen(i64),
        MinId(StreamId),
    }
    let mut strategy = Strategy::None;
    let (mut approximate, mut limit, mut nomkstream) = (false, None, false);
    let mut new_id = None;
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let option = args[i].to_ascii_lowercase();
        match option.as_slice() {
            b"*" if xadd => {
                new_id = Some((NewId::Auto, i + 1));
                break;
            }
            b"maxlen" | b"minid" if more > 0 => {
                if more >= 2 && (&args[i + 1][..] == b"~" || &args[i + 1][..] == b"=") {
                    approximate = &args[i + 1][..] == b"~";
                    i += 1;
                }
                let threshold = args.get(i + 1).ok_or_else(syntax_error)?;
                let other_given = match option.as_slice() {
                    b"maxlen" => matches!(strategy, Strategy::MinId(_)),
                    _ => matches!(strategy, Strategy::MaxLen(_)),
                };
                if other_given {
                    return Err(Reply::error(
                        "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
                    ));
                }
                strategy = if option.as_slice() == b"maxlen" {
                    let len = integer(threshold)?;
                    if len < 0 {
                        return Err(Reply::error("ERR The MAXLEN argument must be >= 0."));
                    }
                    Strategy::MaxLen(len)
                } else {
                    Strategy::MinId(parse_id(threshold, 0, true)?)
                };
                i += 2;
            }
            b"limit" if more > 0 => {
                let most = integer(&args[i + 1])?;
                if most < 0 {
                    return Err(Reply::error("ERR The LIMIT argument must be >= 0."));
                }
                limit = Some(most);
                i += 2;
            }
            b"nomkstream" if xadd => {
                nomkstream = true;
                i += 1;
            }
            _ if xadd => {
                let arg = &args[i][..];
                let id = match arg.strip_suffix(b"-*") {
                    Some(ms) if ms.contains(&b'-') => return Err(invalid_id()),
                    Some(ms) => NewId::AutoSeq(parse_id(ms, 0, true)?.ms),
                    None => NewId::Explicit(parse_id(arg, 0, true)?),
                };
                new_id = Some((id, i + 1));
                break;
            }
            _ => return Err(syntax_error()),
        }
    }
    if limit.is_some() && matches!(strategy, Strategy::None) {
        return Err(Reply::error(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && matches!(strategy, Strategy::None) {
        return Err(Reply::error(
            "ERR syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    if limit.is_some() && !approximate {
        return Err(Reply::error(
            "ERR syntax error, LIMIT cannot be used without the special ~ option",
        ));
    }
    let by = match strategy {
        Strategy::None => None,
        Strategy::MaxLen(len) => Some(TrimBy::MaxLen(len)),
        Strategy::MinId(id) => Some(TrimBy::MinId(id)),
    };
    let trim = by.map(|by| Trim {
        by,
        approximate,
        most: limit,
    });
    Ok(AddOrTrim {
        trim,
        nomkstream,
        new_id,
    })
}

fn parse_xadd(args: &[Bytes]) -> Result<Typed, Reply> {
    let AddOrTrim {
        trim,
        nomkstream,
        new_id,
    } = parse_add_or_trim(args, true)?;
    let Some((new_id, fields)) = new_id else {
        return Err(wrong_arity("xadd"));
    };
    let fields = &args[fields..];
    if fields.len() < 2 || !fields.len().is_multiple_of(2) {
        return Err(wrong_arity("xadd"));
    }
    if fields.iter().map(Bytes::len).sum::<usize>() > MAX_ENTRY_BYTES {
        return Err(Reply::error(format!(
            "ERR stream entry too large: pgvs3 keeps at most {MAX_ENTRY_BYTES} bytes of fields and values per entry"
        )));
    }
    let (mode, [ms, seq]) = match new_id {
        NewId::Auto => (0, [None, None]),
        NewId::AutoSeq(ms) => (1, [Some(stored_half(ms)), None]),
        NewId::Explicit(StreamId::MIN) => {
            return Err(Reply::error("ERR The ID specified in XADD must be greater than 0-0"));
        }
        NewId::Explicit(id) => (2, id.stored()),
    };
    let mut ints = vec![Some(i64::from(nomkstream)), Some(mode), ms, seq];
    ints.extend(Trim::ints(trim));
    Ok(Typed::new(
        StreamOp::Xadd,
        vec![key(&args[1])?],
        fields,
        Shape::Stream(Reading::Id(Trimmed::default())),
    )
    .ints(&ints))
}

fn parse_range(args: &[Bytes], rev: bool) -> Result<Typed, Reply> {
    let (start, end) = if rev {
        (&args[3], &args[2])
    } else {
        (&args[2], &args[3])
    };
    let (start, end) = (interval_start(start)?, interval_end(end)?);
    let mut count = None;
    let mut options = &args[4..];
    while let [option, rest @ ..] = options {
        match rest {
            [value, rest @ ..] if option.eq_ignore_ascii_case(b"count") => {
                count = Some(integer(value)?.max(0));
                options = rest;
            }
            _ => return Err(syntax_error()),
        }
    }
    let [from_ms, from_seq] = start.stored();
    let [to_ms, to_seq] = end.stored();
    let op = if rev { StreamOp::Xrevrange } else { StreamOp::Xrange };
    let shape = Shape::Stream(Reading::Entries {
        count_zero: count == Some(0),
    });
    Ok(Typed::new(op, vec![key(&args[1])?], &[], shape).ints(&[from_ms, from_seq, to_ms, to_seq, count]))
}

/// XREAD's IDs, as the SQL takes them per key: {mode, ms, seq}, mode 0 after the ID, 1 `$`
/// (nothing yet), 2 `+` (the last entry).
fn read_position(arg: &[u8]) -> Result<[Option<i64>; 3], Reply> {
    match arg {
        b"$" => Ok([Some(1), None, None]),
        b"+" => Ok([Some(2), None, None]),
        b">" => Err(Reply::error(
            "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
        )),
        _ => {
            let [ms, seq] = parse_id(arg, 0, false)?.stored();
            Ok([Some(0), ms, seq])
        }
    }
}

/// BLOCK's milliseconds (`None`: 0, forever).
fn block_timeout(arg: &[u8]) -> Result<Option<Duration>, Reply> {
    let millis = parse_integer(arg).ok_or_else(|| Reply::error("ERR timeout is not an integer or out of range"))?;
    if millis < 0 {
        return Err(Reply::error("ERR timeout is negative"));
    }
    Ok((millis > 0).then(|| Duration::from_millis(millis as u64)))
}

/// XREAD's and XREADGROUP's arguments, as Redis's xreadCommand reads them for both.
pub(super) struct ReadArgs<'a> {
    pub count: Option<i64>,
    /// BLOCK's timeout (`Some(None)`: forever).
    pub block: Option<Option<Duration>>,
    pub noack: bool,
    /// XREADGROUP's group and consumer.
    pub group: Option<&'a [Bytes]>,
    pub keys: &'a [Bytes],
    pub ids: &'a [Bytes],
}

pub(super) fn parse_read_args(args: &[Bytes], xreadgroup: bool) -> Result<ReadArgs<'_>, Reply> {
    let only_xreadgroup = |option: &str| {
        Reply::error(format!(
            "ERR The {option} option is only supported by XREADGROUP. You called XREAD instead."
        ))
    };
    let (mut count, mut block, mut noack, mut group, mut streams) = (None, None, false, None, None);
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - 1 - i;
        match args[i].to_ascii_lowercase().as_slice() {
            b"block" if more > 0 => {
                block = Some(block_timeout(&args[i + 1])?);
                i += 2;
            }
            b"count" if more > 0 => {
                count = Some(integer(&args[i + 1])?).filter(|count| *count > 0);
                i += 2;
            }
            b"streams" if more > 0 => {
                let rest = &args[i + 1..];
                if !rest.len().is_multiple_of(2) {
                    return Err(Reply::error(if xreadgroup {
                        "ERR Unbalanced 'xreadgroup' list of streams: for each stream key an ID or '>' must be specified."
                    } else {
                        "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified."
                    }));
                }
                streams = Some(rest.split_at(rest.len() / 2));
                break;
            }
            b"group" if more >= 2 => {
                if !xreadgroup {
                    return Err(only_xreadgroup("GROUP"));
                }
                group = Some(&args[i + 1..i + 3]);
                i += 3;
            }
            b"noack" => {
                if !xreadgroup {
                    return Err(only_xreadgroup("NOACK"));
                }
                noack = true;
                i += 1;
            }
            _ => return Err(syntax_error()),
        }
    }
    let Some((keys, ids)) = streams else {
        return Err(syntax_error());
    };
    Ok(ReadArgs {
        count,
        block,
        noack,
        group,
        keys,
        ids,
    })
}

fn parse_xread(args: &[Bytes]) -> Result<Typed, Reply> {
    let ReadArgs {
        count,
        block,
        keys,
        ids,
        ..
    } = parse_read_args(args, false)?;
    let mut ints = vec![count];
    for id in ids {
        ints.extend(read_position(id)?);
    }
    let keys = keys.iter().map(key).collect::<Result<_, _>>()?;
    let typed = Typed::new(StreamOp::Xread, keys, &[], Shape::Stream(Reading::Read)).ints(&ints);
    Ok(match block {
        Some(timeout) => typed.blocking(timeout),
        None => typed,
    })
}

fn parse_xinfo(args: &[Bytes]) -> Result<Typed, Reply> {
    let subcommand = args[1].to_ascii_lowercase();
    let arity_ok = match subcommand.as_slice() {
        b"stream" => args.len() >= 3,
        b"groups" => args.len() == 3,
        b"consumers" => args.len() == 4,
        // `XINFO HELP` alone is answered by `help`; with arguments, Redis's arity error.
        b"help" => false,
        _ => {
            return Err(Reply::error(format!(
                "ERR unknown subcommand '{}'. Try XINFO HELP.",
                String::from_utf8_lossy(&args[1])
            )));
        }
    };
    if !arity_ok {
        return Err(wrong_arity(&format!("xinfo|{}", String::from_utf8_lossy(&subcommand))));
    }
    let keys = vec![key(&args[2])?];
    Ok(match subcommand.as_slice() {
        b"stream" => {
            let full = match &args[3..] {
                [] => None,
                [full] if full.eq_ignore_ascii_case(b"full") => Some(FULL_COUNT),
                [full, option, count]
                    if full.eq_ignore_ascii_case(b"full") && option.eq_ignore_ascii_case(b"count") =>
                {
                    Some(Some(integer(count)?).filter(|count| *count >= 0).unwrap_or(FULL_COUNT))
                }
                _ => return Err(syntax_error()),
            };
            let shape = Shape::Stream(Reading::Info { full: full.is_some() });
            Typed::new(StreamOp::Xinfo, keys, &[], shape).ints(&[full])
        }
        b"groups" => super::stream_group::xinfo_groups(keys),
        _ => super::stream_group::xinfo_consumers(keys, &args[3]),
    })
}

/// XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]: the options checked as Redis checks
/// them, before the stream is looked at (the SQL's checks need the stream).
fn parse_xsetid(args: &[Bytes]) -> Result<Typed, Reply> {
    let last = parse_id(&args[2], 0, true)?;
    let (mut entries_added, mut max_deleted) = (None, None);
    let mut options = &args[3..];
    while let [option, rest @ ..] = options {
        match rest {
            [value, rest @ ..] if option.eq_ignore_ascii_case(b"entriesadded") => {
                let added = integer(value)?;
                if added < 0 {
                    return Err(Reply::error("ERR entries_added must be positive"));
                }
                entries_added = Some(added);
                options = rest;
            }
            [value, rest @ ..] if option.eq_ignore_ascii_case(b"maxdeletedid") => {
                let id = parse_id(value, 0, true)?;
                if last < id {
                    return Err(Reply::error(
                        "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                    ));
                }
                // 0-0, Redis's "none", leaves the stream's own.
                max_deleted = Some(id).filter(|id| *id != StreamId::MIN);
                options = rest;
            }
            _ => return Err(syntax_error()),
        }
    }
    let [deleted_ms, deleted_seq] = max_deleted.map_or([None, None], StreamId::stored);
    let [last_ms, last_seq] = last.stored();
    let ints = [last_ms, last_seq, entries_added, deleted_ms, deleted_seq];
    Ok(Typed::new(StreamOp::Xsetid, vec![key(&args[1])?], &[], Shape::Ok).ints(&ints))
}

/// XINFO HELP's lines, as Redis 7.0 prints them.
pub fn help() -> Reply {
    Reply::Array(
        [
            "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "CONSUMERS <key> <groupname>",
            "    Show consumers of <groupname>.",
            "GROUPS <key>",
            "    Show the stream consumer groups.",
            "STREAM <key> [FULL [COUNT <count>]",
            "    Show information about the stream.",
            "HELP",
            "    Prints this help.",
        ]
        .into_iter()
        .map(|line| Reply::Status(line.to_owned()))
        .collect(),
    )
}

pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<Typed>, Reply> {
    let stream = |op, shape| Ok::<_, Reply>(Typed::new(op, vec![key(&args[1])?], &[], shape));
    let typed = match name {
        "xadd" => parse_xadd(args)?,
        "xlen" => stream(StreamOp::Xlen, Shape::Int)?,
        "xrange" => parse_range(args, false)?,
        "xrevrange" => parse_range(args, true)?,
        "xdel" => {
            let mut ints = Vec::with_capacity(2 * (args.len() - 2));
            for id in &args[2..] {
                ints.extend(parse_id(id, 0, true)?.stored());
            }
            stream(StreamOp::Xdel, Shape::Int)?.ints(&ints)
        }
        "xtrim" => {
            let trim = parse_add_or_trim(args, false)?.trim;
            stream(StreamOp::Xtrim, Shape::Int)?.ints(&Trim::ints(trim))
        }
        "xread" => parse_xread(args)?,
        "xinfo" if args.len() == 2 && args[1].eq_ignore_ascii_case(b"help") => return Ok(None),
        "xinfo" => parse_xinfo(args)?,
        "xsetid" => parse_xsetid(args)?,
        _ => return Ok(None),
    };
    Ok(Some(typed))
}

/// Whether a request is XREAD or XREADGROUP with BLOCK (before its STREAMS), which may wait
/// long.
pub fn blocks(args: &[Bytes]) -> bool {
    args.first()
        .is_some_and(|name| name.eq_ignore_ascii_case(b"xread") || name.eq_ignore_ascii_case(b"xreadgroup"))
        && args
            .iter()
            .take_while(|arg| !arg.eq_ignore_ascii_case(b"streams"))
            .any(|arg| arg.eq_ignore_ascii_case(b"block"))
}

/// XREAD BLOCK with `$` waits for entries after each stream's last ID when it started: the call
/// that reads those IDs, when any stream has `$`.
pub fn last_ids_call(typed: &Typed) -> Option<Typed> {
    let waits_for_new =
        typed.call.is(StreamOp::Xread) && typed.call.ints.iter().skip(1).step_by(3).any(|mode| *mode == Some(1));
    waits_for_new.then(|| Typed::new(StreamOp::Xlast, typed.call.keys.clone(), &[], Shape::Bulks))
}

/// The XREAD with each `$` replaced by its stream's last ID, which `last_ids_call` read.
pub fn after_last_ids(typed: &Typed, last_ids: &TypedRow) -> Typed {
    let mut typed = typed.clone();
    for (position, last) in typed.call.ints[1..].chunks_mut(3).zip(&last_ids.items) {
        if position[0] == Some(1) {
            let id = last.as_deref().and_then(StreamId::from_stored).unwrap_or(StreamId::MIN);
            let [ms, seq] = id.stored();
            position.copy_from_slice(&[Some(0), ms, seq]);
        }
    }
    typed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_their_order_when_stored() {
        let ids = [
            StreamId::MIN,
            StreamId { ms: 1, seq: 0 },
            StreamId {
                ms: u64::MAX - 1,
                seq: 7,
            },
            StreamId::MAX,
        ];
        for pair in ids.windows(2) {
            assert!(pair[0].stored() < pair[1].stored(), "{} before {}", pair[0], pair[1]);
        }
        for id in ids {
            let [ms, seq] = id.stored().map(|half| half.expect("stored"));
            let bytes = [ms.to_be_bytes(), seq.to_be_bytes()].concat();
            assert_eq!(StreamId::from_stored(&bytes), Some(id));
        }
    }

    #[test]
    fn ids_parse_as_redis_reads_them() {
        assert_eq!(parse_id(b"5", 0, false).ok(), Some(StreamId { ms: 5, seq: 0 }));
        assert_eq!(
            parse_id(b"5", u64::MAX, false).ok(),
            Some(StreamId { ms: 5, seq: u64::MAX })
        );
        assert_eq!(
            parse_id(b"18446744073709551615-18446744073709551615", 0, true).ok(),
            Some(StreamId::MAX)
        );
        assert_eq!(parse_id(b"-", 0, false).ok(), Some(StreamId::MIN));
        for bad in [
            &b"-"[..],
            b"+",
            b"",
            b"1-",
            b"-1",
            b"a-1",
            b"1-2-3",
            b"18446744073709551616",
            b" 1",
        ] {
            assert!(parse_id(bad, 0, true).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
