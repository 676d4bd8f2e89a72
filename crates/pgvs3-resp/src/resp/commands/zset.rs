//! Sorted-set commands (ZADD, ZRANGE and its kin, ZPOPMIN, ZUNIONSTORE, ...): parsing, with
//! Redis's checks and error texts, into calls of `pgvs3.resp_zset`
//! (gateway/migrations/functions/resp_zset.sql), which does their work.

use bytes::Bytes;

use crate::resp::codec::Reply;
use crate::resp::command::{integer, key, parse_float, syntax_error};
use crate::resp::typed::{MAX_RANDOM, Shape, Typed, multi_pop, random_count, scan_options};
use crate::store::{TypedCall, ZsetOp};

fn not_a_float() -> Reply {
    Reply::error("ERR value is not a valid float")
}

fn score(arg: &[u8]) -> Result<f64, Reply> {
    parse_float(arg).ok_or_else(not_a_float)
}

/// A range of ZRANGE and its kin, as `pgvs3.resp_zrange` takes it (see resp_zset.sql): made
/// here from a command's words, read back from its call by the working set (working_set/zset.rs).
#[derive(Default)]
pub(crate) struct Range {
    pub(crate) mode: i64,
    pub(crate) rev: bool,
    pub(crate) start: i64,
    pub(crate) stop: i64,
    pub(crate) offset: i64,
    pub(crate) count: i64,
    pub(crate) min_kind: i64,
    pub(crate) max_kind: i64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) lex: [Bytes; 2],
}

impl Range {
    fn by_rank(start: &[u8], stop: &[u8]) -> Result<Range, Reply> {
        Ok(Range {
            start: integer(start)?,
            stop: integer(stop)?,
            count: -1,
            ..Range::default()
        })
    }

    /// `min` and `max` of a score range: `(` before a bound excludes it.
    fn by_score(min: &[u8], max: &[u8]) -> Result<Range, Reply> {
        let bound = |arg: &[u8]| {
            let (exclusive, value) = match arg.strip_prefix(b"(") {
                Some(value) => (1, value),
                None => (0, arg),
            };
            parse_float(value)
                .map(|value| (exclusive, value))
                .ok_or_else(|| Reply::error("ERR min or max is not a float"))
        };
        let ((min_kind, min), (max_kind, max)) = (bound(min)?, bound(max)?);
        Ok(Range {
            mode: 1,
            count: -1,
            min_kind,
            max_kind,
            min,
            max,
            ..Range::default()
        })
    }

    /// `min` and `max` of a lexicographic range: `[` includes, `(` excludes, `-` and `+` are
    /// the ends.
    fn by_lex(min: &Bytes, max: &Bytes) -> Result<Range, Reply> {
        let bound = |arg: &Bytes| match arg.first() {
            Some(b'-') if arg.len() == 1 => Ok((2, Bytes::new())),
            Some(b'+') if arg.len() == 1 => Ok((3, Bytes::new())),
            Some(b'[') => Ok((0, arg.slice(1..))),
            Some(b'(') => Ok((1, arg.slice(1..))),
            _ => Err(Reply::error("ERR min or max not valid string range item")),
        };
        let ((min_kind, min), (max_kind, max)) = (bound(min)?, bound(max)?);
        Ok(Range {
            mode: 2,
            count: -1,
            min_kind,
            max_kind,
            lex: [min, max],
            ..Range::default()
        })
    }

    fn call(self, op: ZsetOp, keys: Vec<String>, shape: Shape) -> Typed {
        Typed::new(op, keys, &self.lex, shape)
            .ints(&[
                Some(self.mode),
                Some(i64::from(self.rev)),
                Some(self.start),
                Some(self.stop),
                Some(self.offset),
                Some(self.count),
                Some(self.min_kind),
                Some(self.max_kind),
            ])
            .floats(&[self.min, self.max])
    }

    /// The range a call carries (what [`Range::call`] made), if it is one.
    pub(crate) fn of(call: &TypedCall) -> Option<Range> {
        let ints: Vec<i64> = call.ints.iter().copied().collect::<Option<_>>()?;
        let [mode, rev, start, stop, offset, count, min_kind, max_kind] = ints[..] else {
            return None;
        };
        let [min, max] = call.floats[..] else {
            return None;
        };
        let [low, high] = &call.args[..] else {
            return None;
        };
        if !(0..=2).contains(&mode) || min.is_nan() || max.is_nan() {
            return None;
        }
        Some(Range {
            mode,
            rev: rev == 1,
            start,
            stop,
            offset,
            count,
            min_kind,
            max_kind,
            min,
            max,
            lex: [low.clone(), high.clone()],
        })
    }
}

/// The options after a range: `[LIMIT offset count] [WITHSCORES]`, each where allowed.
fn range_options(range: &mut Range, options: &[Bytes], allow_limit: bool, allow_scores: bool) -> Result<bool, Reply> {
    let mut with_scores = false;
    let mut i = 0;
    while i < options.len() {
        match options[i].to_ascii_lowercase().as_slice() {
            b"withscores" if allow_scores => with_scores = true,
            b"limit" if allow_limit && i + 2 < options.len() => {
                range.offset = integer(&options[i + 1])?;
                range.count = integer(&options[i + 2])?;
                i += 2;
            }
            _ => return Err(syntax_error()),
        }
        i += 1;
    }
    Ok(with_scores)
}

/// ZRANGE's generic form: `key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]`
/// (for ZRANGESTORE, `args` begins with the destination).
fn parse_zrange(op: ZsetOp, keys: Vec<String>, args: &[Bytes]) -> Result<Typed, Reply> {
    let (mut by, mut rev, mut with_scores, mut limit) = (0, false, false, None);
    let mut i = 2;
    while i < args.len() {
        match args[i].to_ascii_lowercase().as_slice() {
            b"byscore" => by = 1,
            b"bylex" => by = 2,
            b"rev" => rev = true,
            b"withscores" if op == ZsetOp::Zrange => with_scores = true,
            b"limit" if i + 2 < args.len() => {
                limit = Some((integer(&args[i + 1])?, integer(&args[i + 2])?));
                i += 2;
            }
            _ => return Err(syntax_error()),
        }
        i += 1;
    }
    if limit.is_some() && by == 0 {
        return Err(Reply::error(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if with_scores && by == 2 {
        return Err(Reply::error(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    // With REV, a score or lex range is given highest first.
    let (low, high) = if rev && by != 0 {
        (&args[1], &args[0])
    } else {
        (&args[0], &args[1])
    };
    let mut range = match by {
        0 => Range::by_rank(low, high)?,
        1 => Range::by_score(low, high)?,
        _ => Range::by_lex(low, high)?,
    };
    range.rev = rev;
    if let Some((offset, count)) = limit {
        range.offset = offset;
        range.count = count;
    }
    let shape = if op == ZsetOp::Zrange {
        Shape::Scored { with_scores }
    } else {
        Shape::Int
    };
    Ok(range.call(op, keys, shape))
}

pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<Typed>, Reply> {
    let one = || Ok::<_, Reply>(vec![key(&args[1])?]);
    let zset = |op, rest: &[Bytes], shape| Ok::<_, Reply>(Typed::new(op, one()?, rest, shape));
    let typed: Typed = match name {
        "zadd" => parse_zadd(one()?, &args[2..])?,
        "zincrby" => zset(ZsetOp::Zincrby, &args[3..4], Shape::Double)?
            .ints(&[Some(0), Some(0), Some(0), Some(0), Some(0), Some(1)])
            .floats(&[score(&args[2])?]),
        "zrem" => zset(ZsetOp::Zrem, &args[2..], Shape::Int)?,
        "zscore" => zset(ZsetOp::Zscore, &args[2..], Shape::Double)?,
        "zmscore" => zset(ZsetOp::Zmscore, &args[2..], Shape::Doubles)?,
        "zcard" => zset(ZsetOp::Zcard, &[], Shape::Int)?,
        "zrank" | "zrevrank" => {
            let shape = match &args[3..] {
                [] => Shape::IntOrNil,
                [option] if option.eq_ignore_ascii_case(b"withscore") => Shape::RankScore,
                _ => return Err(syntax_error()),
            };
            zset(
                if name == "zrank" {
                    ZsetOp::Zrank
                } else {
                    ZsetOp::Zrevrank
                },
                &args[2..3],
                shape,
            )?
        }
        "zrandmember" => match &args[2..] {
            [] => zset(ZsetOp::Zrandmember, &[], Shape::Random)?.ints(&[None]),
            [count, rest @ ..] => {
                let with_scores = match rest {
                    [] => false,
                    [option] if option.eq_ignore_ascii_case(b"withscores") => true,
                    _ => return Err(syntax_error()),
                };
                zset(ZsetOp::Zrandmember, &[], Shape::Scored { with_scores })?.ints(&[Some(random_count(count)?)])
            }
        },
        "zmpop" | "bzmpop" => {
            let blocking = name == "bzmpop";
            let (keys, min, count) = multi_pop(&args[1 + usize::from(blocking)..], [b"min", b"max"])?;
            let typed = Typed::new(ZsetOp::Zmpop, keys, &[], Shape::MultiPop { scored: true })
                .ints(&[Some(i64::from(!min)), Some(count)]);
            match blocking {
                true => typed.blocking(crate::resp::blocking::timeout(&args[1])?),
                false => typed,
            }
        }
        "zunion" | "zinter" | "zdiff" | "zdiffstore" | "zintercard" => parse_store(name, args)?,
        "zcount" => Range::by_score(&args[2], &args[3])?.call(ZsetOp::Zcount, one()?, Shape::Int),
        "zlexcount" => Range::by_lex(&args[2], &args[3])?.call(ZsetOp::Zlexcount, one()?, Shape::Int),
        "zremrangebyrank" => Range::by_rank(&args[2], &args[3])?.call(ZsetOp::Zremrangebyrank, one()?, Shape::Int),
        "zremrangebyscore" => Range::by_score(&args[2], &args[3])?.call(ZsetOp::Zremrangebyscore, one()?, Shape::Int),
        "zremrangebylex" => Range::by_lex(&args[2], &args[3])?.call(ZsetOp::Zremrangebylex, one()?, Shape::Int),
        "zrange" => parse_zrange(ZsetOp::Zrange, one()?, &args[2..])?,
        "zrangestore" => parse_zrange(ZsetOp::Zrangestore, vec![key(&args[1])?, key(&args[2])?], &args[3..])?,
        "zrevrange" => {
            let mut range = Range::by_rank(&args[2], &args[3])?;
            range.rev = true;
            let with_scores = range_options(&mut range, &args[4..], false, true)?;
            range.call(ZsetOp::Zrange, one()?, Shape::Scored { with_scores })
        }
        "zrangebyscore" | "zrevrangebyscore" | "zrangebylex" | "zrevrangebylex" => {
            let rev = name.starts_with("zrev");
            let lex = name.ends_with("lex");
            let (low, high) = if rev {
                (&args[3], &args[2])
            } else {
                (&args[2], &args[3])
            };
            let mut range = if lex {
                Range::by_lex(low, high)?
            } else {
                Range::by_score(low, high)?
            };
            range.rev = rev;
            let with_scores = range_options(&mut range, &args[4..], true, !lex)?;
            range.call(ZsetOp::Zrange, one()?, Shape::Scored { with_scores })
        }
        "zpopmin" | "zpopmax" => {
            let op = if name == "zpopmin" {
                ZsetOp::Zpopmin
            } else {
                ZsetOp::Zpopmax
            };
            match args.len() {
                2 => zset(op, &[], Shape::Popped { count: false })?.ints(&[Some(1)]),
                3 => {
                    let count = integer(&args[2])?;
                    if count < 0 {
                        return Err(Reply::error("ERR value is out of range, must be positive"));
                    }
                    zset(op, &[], Shape::Popped { count: true })?.ints(&[Some(count.min(MAX_RANDOM))])
                }
                _ => return Err(syntax_error()),
            }
        }
        "zunionstore" | "zinterstore" => parse_store(name, args)?,
        "bzpopmin" | "bzpopmax" => {
            let keys = args[1..args.len() - 1].iter().map(key).collect::<Result<_, _>>()?;
            let op = if name == "bzpopmin" {
                ZsetOp::Bzpopmin
            } else {
                ZsetOp::Bzpopmax
            };
            Typed::new(op, keys, &[], Shape::BlockZPop).blocking(crate::resp::blocking::timeout(&args[args.len() - 1])?)
        }
        "zscan" => {
            let (cursor, count, pattern) = scan_options(&args[2..])?;
            zset(
                ZsetOp::Zscan,
                &[],
                Shape::Scan {
                    pattern,
                    pairs: false,
                    scored: true,
                },
            )?
            .ints(&[Some(cursor), Some(count)])
        }
        _ => return Ok(None),
    };
    Ok(Some(typed))
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`, checked in Redis's order.
fn parse_zadd(keys: Vec<String>, args: &[Bytes]) -> Result<Typed, Reply> {
    let mut flags = [false; 6];
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let flag = match arg.to_ascii_lowercase().as_slice() {
            b"nx" => 0,
            b"xx" => 1,
            b"gt" => 2,
            b"lt" => 3,
            b"ch" => 4,
            b"incr" => 5,
            _ => break,
        };
        flags[flag] = true;
        i += 1;
    }
    let [nx, xx, gt, lt, _, incr] = flags;
    let pairs = &args[i..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err(syntax_error());
    }
    if nx && xx {
        return Err(Reply::error(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    if (gt || lt) && nx || gt && lt {
        return Err(Reply::error(
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if incr && pairs.len() > 2 {
        return Err(Reply::error("ERR INCR option supports a single increment-element pair"));
    }
    let scores = pairs
        .chunks(2)
        .map(|pair| score(&pair[0]))
        .collect::<Result<Vec<f64>, Reply>>()?;
    let members: Vec<Bytes> = pairs.chunks(2).map(|pair| pair[1].clone()).collect();
    let shape = if incr { Shape::Double } else { Shape::Int };
    let ints: Vec<Option<i64>> = flags.iter().map(|flag| Some(i64::from(*flag))).collect();
    Ok(Typed::new(ZsetOp::Zadd, keys, &members, shape)
        .ints(&ints)
        .floats(&scores))
}

/// `ZUNIONSTORE|ZINTERSTORE|ZDIFFSTORE dest numkeys key [key ...] [WEIGHTS w ...]
/// [AGGREGATE SUM|MIN|MAX]`, and without `dest` ZUNION, ZINTER, ZDIFF (with WITHSCORES) and
/// ZINTERCARD (with LIMIT). ZDIFF and ZDIFFSTORE take no WEIGHTS or AGGREGATE.
fn parse_store(name: &str, args: &[Bytes]) -> Result<Typed, Reply> {
    let op = match name {
        "zunionstore" => ZsetOp::Zunionstore,
        "zinterstore" => ZsetOp::Zinterstore,
        "zdiffstore" => ZsetOp::Zdiffstore,
        "zunion" => ZsetOp::Zunion,
        "zinter" => ZsetOp::Zinter,
        "zdiff" => ZsetOp::Zdiff,
        _ => ZsetOp::Zintercard,
    };
    let store = name.ends_with("store");
    let numkeys_at = if store { 2 } else { 1 };
    // ZINTERCARD's numkeys as the others' (redis-server 7.0.15's zunionInterDiffGenericCommand),
    // not as SINTERCARD's.
    let numkeys = integer(&args[numkeys_at])?;
    if numkeys < 1 {
        return Err(Reply::error(format!(
            "ERR at least 1 input key is needed for '{name}' command"
        )));
    }
    let rest = &args[numkeys_at + 1..];
    if numkeys as usize > rest.len() {
        return Err(syntax_error());
    }
    let (sources, mut options) = rest.split_at(numkeys as usize);
    let mut weights = Vec::new();
    let mut aggregate = 0;
    let mut with_scores = false;
    let mut limit = 0;
    let combines = !matches!(op, ZsetOp::Zdiff | ZsetOp::Zdiffstore | ZsetOp::Zintercard);
    while let Some(option) = options.first() {
        match option.to_ascii_lowercase().as_slice() {
            b"withscores" if !store && op != ZsetOp::Zintercard => {
                with_scores = true;
                options = &options[1..];
            }
            b"limit" if op == ZsetOp::Zintercard && options.len() > 1 => {
                // Redis's getPositiveLongFromObjectOrReply: one text for a negative number and
                // for one that is not a number.
                limit = match crate::resp::command::parse_integer(&options[1]) {
                    Some(limit) if limit >= 0 => limit,
                    _ => return Err(Reply::error("ERR LIMIT can't be negative")),
                };
                options = &options[2..];
            }
            b"weights" if combines && options.len() > sources.len() => {
                weights = options[1..=sources.len()]
                    .iter()
                    .map(|weight| parse_float(weight).ok_or_else(|| Reply::error("ERR weight value is not a float")))
                    .collect::<Result<_, Reply>>()?;
                options = &options[sources.len() + 1..];
            }
            b"aggregate" if combines && options.len() > 1 => {
                aggregate = match options[1].to_ascii_lowercase().as_slice() {
                    b"sum" => 0,
                    b"min" => 1,
                    b"max" => 2,
                    _ => return Err(syntax_error()),
                };
                options = &options[2..];
            }
            _ => return Err(syntax_error()),
        }
    }
    let mut keys = match store {
        true => vec![key(&args[1])?],
        false => Vec::new(),
    };
    for source in sources {
        keys.push(key(source)?);
    }
    let shape = match op {
        ZsetOp::Zunion | ZsetOp::Zinter | ZsetOp::Zdiff => Shape::Scored { with_scores },
        _ => Shape::Int,
    };
    Ok(Typed::new(op, keys, &[], shape)
        .ints(&[Some(aggregate), Some(limit)])
        .floats(&weights))
}
