//! Consumer groups of streams (XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM, XINFO
//! GROUPS and CONSUMERS): parsing, with Redis's checks and error texts, into calls of
//! `pgvs3.resp_stream_group` (gateway/migrations/functions/resp_stream_group.sql), which does
//! their work, and its rows turned into Redis's replies.

use bytes::Bytes;

use super::stream::{self, ReadArgs, StreamId, id_reply, interval_end, interval_start, parse_id, parse_read_args};
use crate::resp::codec::Reply;
use crate::resp::command::{integer, key, parse_integer, syntax_error, wrong_arity};
use crate::resp::typed::{Shape, Typed};
use crate::store::{StreamGroupOp, TypedRow};

/// Most entries one XAUTOCLAIM claims, whatever its COUNT: it looks at ten times as many
/// pending entries, and its reply is built in memory.
const MAX_AUTOCLAIM: i64 = 10_000;

/// How a group call's row becomes the reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    /// `+OK` (XGROUP CREATE, SETID).
    Ok,
    /// `n` (XGROUP DESTROY, CREATECONSUMER, DELCONSUMER, XACK).
    Int,
    /// XREADGROUP: as XREAD's reply.
    Read,
    /// XPENDING's summary: the count, first and last IDs, and each consumer's count.
    Summary,
    /// XPENDING's extended form: per entry its ID, consumer, idle time and deliveries.
    Pending,
    /// XCLAIM: the entries, or with JUSTID their IDs.
    Claimed { justid: bool },
    /// XAUTOCLAIM: the next cursor, the entries (or IDs), the IDs of deleted entries dropped.
    AutoClaimed { justid: bool },
    /// XINFO GROUPS.
    Groups,
    /// XINFO CONSUMERS.
    Consumers,
}

/// The reply's shape and Redis's NOGROUP texts: the SQL answers `NOGROUP` (with XREADGROUP,
/// `n` is the key's position), and the names, which need not be UTF-8, are worded here.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupShape {
    reading: Reading,
    nogroup: Vec<String>,
}

fn lossy(name: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(name)
}

/// XGROUP's and XINFO CONSUMERS' text.
fn no_such_group(key: &str, group: &[u8]) -> String {
    format!("NOGROUP No such consumer group '{}' for key name '{key}'", lossy(group))
}

/// XPENDING's, XCLAIM's and XAUTOCLAIM's text.
fn no_such_key_or_group(key: &str, group: &[u8]) -> String {
    format!("NOGROUP No such key '{key}' or consumer group '{}'", lossy(group))
}

fn group_call(op: StreamGroupOp, keys: Vec<String>, args: &[Bytes], reading: Reading, nogroup: Vec<String>) -> Typed {
    Typed::new(op, keys, args, Shape::Group(GroupShape { reading, nogroup }))
}

pub fn reply(shape: &GroupShape, row: TypedRow) -> Reply {
    match row.err {
        Some(err) if err == "NOGROUP" => {
            let at = row.n.unwrap_or(1).max(1) as usize - 1;
            return Reply::Error(shape.nogroup.get(at).cloned().unwrap_or(err));
        }
        Some(err) => return Reply::Error(err),
        None => {}
    }
    let id = |item: Option<Bytes>| item.map_or(Reply::Nil, |id| id_reply(&id));
    let int = |score: Option<f64>| Reply::Integer(score.unwrap_or(0.0) as i64);
    let int_or_nil = |score: Option<f64>| score.map_or(Reply::Nil, |score| Reply::Integer(score as i64));
    let bulk = |item: Option<Bytes>| item.map_or(Reply::Nil, Reply::Bulk);
    let mut items = row.items.into_iter();
    let mut scores = row.scores.into_iter();
    match shape.reading {
        Reading::Ok => Reply::OK,
        Reading::Int => Reply::Integer(row.n.unwrap_or(0)),
        Reading::Read => stream::reply(
            &stream::Reading::Read,
            TypedRow {
                items: items.collect(),
                scores: scores.collect(),
                ..TypedRow::default()
            },
        ),
        Reading::Summary => match row.n.unwrap_or(0) {
            0 => Reply::Array(vec![Reply::Integer(0), Reply::Nil, Reply::Nil, Reply::NilArray]),
            total => {
                let (first, last) = (id(items.next().flatten()), id(items.next().flatten()));
                let consumers = items
                    .zip(scores)
                    .map(|(name, held)| {
                        let held = held.unwrap_or(0.0) as i64;
                        Reply::Array(vec![bulk(name), Reply::text(&held.to_string())])
                    })
                    .collect();
                Reply::Array(vec![Reply::Integer(total), first, last, Reply::Array(consumers)])
            }
        },
        Reading::Pending => {
            let mut pending = Vec::new();
            while let (Some(entry), Some(consumer)) = (items.next(), items.next()) {
                let (idle, deliveries) = (scores.next().flatten(), scores.next().flatten());
                pending.push(Reply::Array(vec![
                    id(entry),
                    bulk(consumer),
                    int(idle),
                    int(deliveries),
                ]));
            }
            Reply::Array(pending)
        }
        Reading::Claimed { justid: true } => Reply::Array(items.map(id).collect()),
        Reading::Claimed { justid: false } => Reply::Array(stream::entries(&mut items, &mut scores, usize::MAX)),
        Reading::AutoClaimed { justid } => {
            let cursor = id(items.next().flatten());
            let claimed = scores.next().flatten().unwrap_or(0.0) as usize;
            let dropped = scores.next().flatten().unwrap_or(0.0) as usize;
            let claimed = if justid {
                items.by_ref().take(claimed).map(id).collect()
            } else {
                stream::entries(&mut items, &mut scores, claimed)
            };
            let dropped = items.take(dropped).map(id).collect();
            Reply::Array(vec![cursor, Reply::Array(claimed), Reply::Array(dropped)])
        }
        Reading::Groups => {
            let mut groups = Vec::new();
            while let (Some(name), Some(last)) = (items.next(), items.next()) {
                let mut next = || scores.next().flatten();
                let (consumers, pending, read, lag) = (next(), next(), next(), next());
                groups.push(Reply::Map(vec![
                    (Reply::text("name"), bulk(name)),
                    (Reply::text("consumers"), int(consumers)),
                    (Reply::text("pending"), int(pending)),
                    (Reply::text("last-delivered-id"), id(last)),
                    (Reply::text("entries-read"), int_or_nil(read)),
                    (Reply::text("lag"), int_or_nil(lag)),
                ]));
            }
            Reply::Array(groups)
        }
        Reading::Consumers => Reply::Array(
            items
                .map(|name| {
                    let mut next = || scores.next().flatten();
                    let (pending, idle, inactive) = (next(), next(), next());
                    Reply::Map(vec![
                        (Reply::text("name"), bulk(name)),
                        (Reply::text("pending"), int(pending)),
                        (Reply::text("idle"), int(idle)),
                        (Reply::text("inactive"), int(inactive)),
                    ])
                })
                .collect(),
        ),
    }
}

/// XINFO STREAM FULL's `groups` groups, from the rest of its row (see
/// `pgvs3.resp_stream_groups_full`).
pub(super) fn full_groups(
    items: &mut impl Iterator<Item = Option<Bytes>>,
    scores: &mut impl Iterator<Item = Option<f64>>,
    groups: usize,
) -> Vec<Reply> {
    let id = |item: Option<Option<Bytes>>| item.flatten().map_or(Reply::Nil, |id| id_reply(&id));
    let bulk = |item: Option<Option<Bytes>>| item.flatten().map_or(Reply::Nil, Reply::Bulk);
    let mut number = || scores.next().flatten();
    let mut replies = Vec::with_capacity(groups);
    for _ in 0..groups {
        let (name, last) = (bulk(items.next()), id(items.next()));
        let (read, lag, pel, listed) = (number(), number(), number(), number());
        let int = |score: Option<f64>| score.map_or(Reply::Nil, |score| Reply::Integer(score as i64));
        let pending = (0..listed.unwrap_or(0.0) as usize)
            .map(|_| {
                let (entry, consumer) = (id(items.next()), bulk(items.next()));
                Reply::Array(vec![entry, consumer, int(number()), int(number())])
            })
            .collect();
        let consumers = (0..number().unwrap_or(0.0) as usize)
            .map(|_| {
                let name = bulk(items.next());
                let (seen, active, pel, listed) = (number(), number(), number(), number());
                let pending = (0..listed.unwrap_or(0.0) as usize)
                    .map(|_| Reply::Array(vec![id(items.next()), int(number()), int(number())]))
                    .collect();
                Reply::Map(vec![
                    (Reply::text("name"), name),
                    (Reply::text("seen-time"), int(seen)),
                    (Reply::text("active-time"), int(active)),
                    (Reply::text("pel-count"), int(pel)),
                    (Reply::text("pending"), Reply::Array(pending)),
                ])
            })
            .collect();
        replies.push(Reply::Map(vec![
            (Reply::text("name"), name),
            (Reply::text("last-delivered-id"), last),
            (Reply::text("entries-read"), int(read)),
            (Reply::text("lag"), int(lag)),
            (Reply::text("pel-count"), int(pel)),
            (Reply::text("pending"), Reply::Array(pending)),
            (Reply::text("consumers"), Reply::Array(consumers)),
        ]));
    }
    replies
}

/// XGROUP HELP's lines.
pub fn help() -> Reply {
    Reply::Array(
        [
            "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "CREATE <key> <groupname> <id|$> [option]",
            "    Create a new consumer group. Options are:",
            "    * MKSTREAM",
            "      Create the empty stream if it does not exist.",
            "    * ENTRIESREAD entries_read",
            "      Set the group's entries_read counter (internal use).",
            "CREATECONSUMER <key> <groupname> <consumer>",
            "    Create a new consumer in the specified group.",
            "DELCONSUMER <key> <groupname> <consumer>",
            "    Remove the specified consumer.",
            "DESTROY <key> <groupname>",
            "    Remove the specified group.",
            "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
            "    Set the current group ID and entries_read counter.",
            "HELP",
            "    Print this help.",
        ]
        .into_iter()
        .map(|line| Reply::Status(line.to_owned()))
        .collect(),
    )
}

/// An ID given as an int triple {`$` (1) or an ID (0), ms, seq}.
fn id_or_last(arg: &[u8], strict: bool) -> Result<[Option<i64>; 3], Reply> {
    if arg == b"$" {
        return Ok([Some(1), None, None]);
    }
    let [ms, seq] = parse_id(arg, 0, strict)?.stored();
    Ok([Some(0), ms, seq])
}

/// XGROUP CREATE/SETID/DESTROY/CREATECONSUMER/DELCONSUMER; `Ok(None)` for HELP.
fn parse_xgroup(args: &[Bytes]) -> Result<Option<Typed>, Reply> {
    let subcommand = args[1].to_ascii_lowercase();
    let (op, arity_ok) = match subcommand.as_slice() {
        b"create" => (StreamGroupOp::XgroupCreate, args.len() >= 5),
        b"setid" => (StreamGroupOp::XgroupSetid, args.len() >= 5),
        b"destroy" => (StreamGroupOp::XgroupDestroy, args.len() == 4),
        b"createconsumer" => (StreamGroupOp::XgroupCreateconsumer, args.len() == 5),
        b"delconsumer" => (StreamGroupOp::XgroupDelconsumer, args.len() == 5),
        b"help" if args.len() == 2 => return Ok(None),
        b"help" => return Err(wrong_arity("xgroup|help")),
        _ => {
            return Err(Reply::error(format!(
                "ERR unknown subcommand '{}'. Try XGROUP HELP.",
                lossy(&args[1])
            )));
        }
    };
    if !arity_ok {
        return Err(wrong_arity(&format!("xgroup|{}", lossy(&subcommand))));
    }
    let subcommand_error = || {
        Reply::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try XGROUP HELP.",
            lossy(&args[1])
        ))
    };
    let keys = vec![key(&args[2])?];
    let nogroup = vec![no_such_group(&keys[0], &args[3])];
    let typed = match op {
        StreamGroupOp::XgroupCreate | StreamGroupOp::XgroupSetid => {
            let create = op == StreamGroupOp::XgroupCreate;
            if args.len() > if create { 8 } else { 7 } || !create && args.len() == 6 {
                return Err(subcommand_error());
            }
            let mut ints = id_or_last(&args[4], create)?.to_vec();
            let (mut mkstream, mut entries_read) = (false, None);
            let mut options = &args[5..];
            while let [option, rest @ ..] = options {
                match rest {
                    _ if create && option.eq_ignore_ascii_case(b"mkstream") => {
                        mkstream = true;
                        options = rest;
                    }
                    [value, rest @ ..] if option.eq_ignore_ascii_case(b"entriesread") => {
                        let read = integer(value)?;
                        if read < -1 {
                            return Err(Reply::error("ERR value for ENTRIESREAD must be positive or -1"));
                        }
                        // -1: unknown, as when not given.
                        entries_read = (read >= 0).then_some(read);
                        options = rest;
                    }
                    _ if create => return Err(subcommand_error()),
                    _ => return Err(syntax_error()),
                }
            }
            ints.extend([Some(i64::from(mkstream)), entries_read]);
            group_call(op, keys, &args[3..4], Reading::Ok, nogroup).ints(&ints)
        }
        StreamGroupOp::XgroupDestroy => group_call(op, keys, &args[3..4], Reading::Int, nogroup),
        _ => group_call(op, keys, &args[3..5], Reading::Int, nogroup),
    };
    Ok(Some(typed))
}

fn parse_xreadgroup(args: &[Bytes]) -> Result<Typed, Reply> {
    let ReadArgs {
        count,
        block,
        noack,
        group,
        keys,
        ids,
    } = parse_read_args(args, true)?;
    let Some(group) = group else {
        return Err(Reply::error("ERR Missing GROUP option for XREADGROUP"));
    };
    let mut ints = vec![count, Some(i64::from(noack))];
    for id in ids {
        match &id[..] {
            b">" => ints.extend([Some(1), None, None]),
            b"$" => {
                return Err(Reply::error(
                    "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
                ));
            }
            id => {
                let [ms, seq] = parse_id(id, 0, true)?.stored();
                ints.extend([Some(0), ms, seq]);
            }
        }
    }
    let keys: Vec<String> = keys.iter().map(key).collect::<Result<_, _>>()?;
    let nogroup = keys
        .iter()
        .map(|key| {
            format!(
                "NOGROUP No such key '{key}' or consumer group '{}' in XREADGROUP with GROUP option",
                lossy(&group[0])
            )
        })
        .collect();
    let typed = group_call(StreamGroupOp::Xreadgroup, keys, group, Reading::Read, nogroup).ints(&ints);
    Ok(match block {
        Some(timeout) => typed.blocking(timeout),
        None => typed,
    })
}

fn parse_xpending(args: &[Bytes]) -> Result<Typed, Reply> {
    let keys = vec![key(&args[1])?];
    let nogroup = vec![no_such_key_or_group(&keys[0], &args[2])];
    if args.len() == 3 {
        return Ok(group_call(StreamGroupOp::Xpending, keys, &args[2..3], Reading::Summary, nogroup).ints(&[None]));
    }
    if !(6..=9).contains(&args.len()) {
        return Err(syntax_error());
    }
    let (mut first, mut min_idle) = (3, 0);
    if args[3].eq_ignore_ascii_case(b"idle") {
        min_idle = integer(&args[4])?;
        if args.len() < 8 {
            return Err(syntax_error());
        }
        first = 5;
    }
    let count = integer(&args[first + 2])?.max(0);
    let [from_ms, from_seq] = interval_start(&args[first])?.stored();
    let [to_ms, to_seq] = interval_end(&args[first + 1])?.stored();
    // Redis reads a consumer after the count and ignores anything beyond it.
    let mut group_args = vec![args[2].clone()];
    group_args.extend(args.get(first + 3).cloned());
    let ints = [Some(1), Some(min_idle), from_ms, from_seq, to_ms, to_seq, Some(count)];
    Ok(group_call(StreamGroupOp::Xpending, keys, &group_args, Reading::Pending, nogroup).ints(&ints))
}

/// XCLAIM's and XAUTOCLAIM's min-idle-time (a negative one is 0).
fn min_idle(arg: &[u8], command: &str) -> Result<i64, Reply> {
    parse_integer(arg)
        .map(|idle| idle.max(0))
        .ok_or_else(|| Reply::error(format!("ERR Invalid min-idle-time argument for {command}")))
}

fn parse_xclaim(args: &[Bytes]) -> Result<Typed, Reply> {
    let keys = vec![key(&args[1])?];
    let nogroup = vec![no_such_key_or_group(&keys[0], &args[2])];
    let min_idle = min_idle(&args[4], "XCLAIM")?;
    // The IDs run until an argument is not one; options follow.
    let ids: Vec<StreamId> = args[5..].iter().map_while(|arg| parse_id(arg, 0, true).ok()).collect();
    let (mut idle, mut time, mut retries, mut force, mut justid, mut last_id) = (None, None, None, false, false, None);
    let mut options = &args[5 + ids.len()..];
    let invalid = |option: &str| Reply::error(format!("ERR Invalid {option} option argument for XCLAIM"));
    while let [option, rest @ ..] = options {
        let name = option.to_ascii_lowercase();
        match (name.as_slice(), rest) {
            (b"force", _) => force = true,
            (b"justid", _) => justid = true,
            (b"idle" | b"time" | b"retrycount" | b"lastid", [value, ..]) => {
                match name.as_slice() {
                    // A delivery time in the future (a negative IDLE) is now, as in Redis;
                    // bounded so that the SQL's arithmetic cannot overflow.
                    b"idle" => {
                        idle = Some(parse_integer(value).ok_or_else(|| invalid("IDLE"))?.clamp(0, 1 << 62));
                        time = None;
                    }
                    b"time" => {
                        time = Some(parse_integer(value).ok_or_else(|| invalid("TIME"))?);
                        idle = None;
                    }
                    b"retrycount" => {
                        // Negative: not given, as in Redis; bounded so that later deliveries
                        // cannot overflow the count.
                        let given = parse_integer(value).ok_or_else(|| invalid("RETRYCOUNT"))?;
                        retries = (given >= 0).then(|| given.min(1 << 62));
                    }
                    _ => last_id = Some(parse_id(value, 0, true)?),
                }
                options = &rest[1..];
                continue;
            }
            _ => {
                return Err(Reply::error(format!(
                    "ERR Unrecognized XCLAIM option '{}'",
                    lossy(option)
                )));
            }
        }
        options = rest;
    }
    let [last_ms, last_seq] = last_id.map_or([None, None], StreamId::stored);
    let mut ints = vec![
        Some(min_idle),
        idle,
        time,
        retries,
        Some(i64::from(force)),
        Some(i64::from(justid)),
        last_ms,
        last_seq,
    ];
    ints.extend(ids.into_iter().flat_map(StreamId::stored));
    Ok(group_call(
        StreamGroupOp::Xclaim,
        keys,
        &args[2..4],
        Reading::Claimed { justid },
        nogroup,
    )
    .ints(&ints))
}

fn parse_xautoclaim(args: &[Bytes]) -> Result<Typed, Reply> {
    let keys = vec![key(&args[1])?];
    let nogroup = vec![no_such_key_or_group(&keys[0], &args[2])];
    let min_idle = min_idle(&args[4], "XAUTOCLAIM")?;
    let [start_ms, start_seq] = interval_start(&args[5])?.stored();
    let (mut count, mut justid) = (100, false);
    let mut options = &args[6..];
    while let [option, rest @ ..] = options {
        match rest {
            [value, rest @ ..] if option.eq_ignore_ascii_case(b"count") => {
                // Redis's bound: the attempts (ten per entry) must fit in a long.
                count = parse_integer(value)
                    .filter(|count| (1..=i64::MAX / 16).contains(count))
                    .ok_or_else(|| Reply::error("ERR COUNT must be > 0"))?;
                options = rest;
            }
            _ if option.eq_ignore_ascii_case(b"justid") => {
                justid = true;
                options = rest;
            }
            _ => return Err(syntax_error()),
        }
    }
    let ints = [
        Some(min_idle),
        start_ms,
        start_seq,
        Some(count.min(MAX_AUTOCLAIM)),
        Some(i64::from(justid)),
    ];
    Ok(group_call(
        StreamGroupOp::Xautoclaim,
        keys,
        &args[2..4],
        Reading::AutoClaimed { justid },
        nogroup,
    )
    .ints(&ints))
}

fn parse_xack(args: &[Bytes]) -> Result<Typed, Reply> {
    let mut ints = Vec::with_capacity(2 * (args.len() - 3));
    for id in &args[3..] {
        ints.extend(parse_id(id, 0, true)?.stored());
    }
    Ok(group_call(
        StreamGroupOp::Xack,
        vec![key(&args[1])?],
        &args[2..3],
        Reading::Int,
        Vec::new(),
    )
    .ints(&ints))
}

/// XINFO GROUPS of the stream `keys[0]`.
pub(super) fn xinfo_groups(keys: Vec<String>) -> Typed {
    group_call(StreamGroupOp::XinfoGroups, keys, &[], Reading::Groups, Vec::new())
}

/// XINFO CONSUMERS of the stream `keys[0]`'s `group`.
pub(super) fn xinfo_consumers(keys: Vec<String>, group: &Bytes) -> Typed {
    let nogroup = vec![no_such_group(&keys[0], group)];
    group_call(
        StreamGroupOp::XinfoConsumers,
        keys,
        std::slice::from_ref(group),
        Reading::Consumers,
        nogroup,
    )
}

pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<Typed>, Reply> {
    let typed = match name {
        "xgroup" => return parse_xgroup(args),
        "xreadgroup" => parse_xreadgroup(args)?,
        "xack" => parse_xack(args)?,
        "xpending" => parse_xpending(args)?,
        "xclaim" => parse_xclaim(args)?,
        "xautoclaim" => parse_xautoclaim(args)?,
        _ => return Ok(None),
    };
    Ok(Some(typed))
}
