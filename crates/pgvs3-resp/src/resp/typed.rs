//! Commands on typed keys (hashes, sets, sorted sets, lists, streams): parsed by their family's module
//! into one SQL call each (see store/types.rs), and the call's row turned into Redis's reply.

use bytes::Bytes;

use super::codec::{Reply, format_score};
use super::command::{integer, not_an_integer, parse_integer};
use super::glob;
use crate::store::{SqlOp, TypedCall, TypedRow};

/// Most elements one command may ask for at random with repeats (HRANDFIELD, SRANDMEMBER and
/// ZRANDMEMBER with a negative count): the reply is built in memory before it is sent.
pub const MAX_RANDOM: i64 = 100_000;
/// Most elements one SCAN-family page returns, whatever COUNT says.
pub const MAX_SCAN_COUNT: i64 = 100_000;

/// How a call's row becomes the reply.
#[derive(Debug, Clone)]
pub enum Shape {
    /// `n`, an integer.
    Int,
    /// `n`, or nil when NULL (ZRANK of a missing member).
    IntOrNil,
    /// The first score, or nil (ZSCORE, ZINCRBY, ZADD INCR).
    Double,
    /// The scores, nil where NULL (ZMSCORE).
    Doubles,
    /// Members in `items`, scores in `scores`: the members, or with WITHSCORES pairs of both.
    Scored { with_scores: bool },
    /// ZPOPMIN/ZPOPMAX: with a count, pairs of member and score; without, one flat pair (or
    /// an empty array).
    Popped { count: bool },
    /// `+OK` (HMSET, LSET, LTRIM).
    Ok,
    /// The first item, or nil.
    Bulk,
    /// The items, nil where NULL.
    Bulks,
    /// The scores as integers (SMISMEMBER's 1 or 0 per member, LPOS's indexes).
    Ints,
    /// The first score as an integer, or nil (LPOS without COUNT).
    FirstInt,
    /// LPOP/RPOP with a count: the items, or the null array when the list did not exist.
    ListPop,
    /// BLPOP/BRPOP: `{key, element}`, or the null array when nothing was popped.
    BlockPop,
    /// BZPOPMIN/BZPOPMAX: `{key, member}` and the score, or the null array.
    BlockZPop,
    /// LMPOP/ZMPOP and their blocking forms: `{key, elements...}` (with `scored`, each
    /// element's score in `scores`) as `[key, [elements]]`, or the null array.
    MultiPop { scored: bool },
    /// ZRANK/ZREVRANK WITHSCORE: `[rank, score]`, or the null array.
    RankScore,
    /// The items as field-value pairs: a map in RESP3 (HGETALL).
    Map,
    /// The items as pairs: nested pairs in RESP3, a flat array in RESP2 (HRANDFIELD WITHVALUES).
    Pairs,
    /// HRANDFIELD/SRANDMEMBER without a count: one element or nil.
    Random,
    /// A SCAN-family page: `n` is the next cursor; items are elements (`pairs`: each followed
    /// by its value; `scored`: each with its score), filtered by the pattern of MATCH.
    Scan {
        pattern: Option<Bytes>,
        pairs: bool,
        scored: bool,
    },
    /// HSCAN ... NOVALUES: a page of field-value pairs answered with the fields alone.
    ScanFields { pattern: Option<Bytes> },
    /// A stream's entries or information (stream.rs).
    Stream(super::stream::Reading),
    /// A consumer group command's reply (stream_group.rs).
    Group(super::stream_group::GroupShape),
}

/// A typed command: its SQL call and the shape of its reply.
#[derive(Debug, Clone)]
pub struct Typed {
    pub call: TypedCall,
    pub shape: Shape,
    /// A blocking pop or XREAD BLOCK: how long it may wait for elements (`Some(None)`:
    /// forever). Inside MULTI it does not wait, as in Redis.
    pub blocking: Option<Option<std::time::Duration>>,
}

impl Typed {
    pub fn new(op: impl SqlOp, keys: Vec<String>, args: &[Bytes], shape: Shape) -> Typed {
        Typed {
            call: TypedCall::new(op, keys, args.to_vec()),
            shape,
            blocking: None,
        }
    }

    /// Makes the command a blocking one with this timeout (`None`: forever).
    pub fn blocking(mut self, timeout: Option<std::time::Duration>) -> Typed {
        self.blocking = Some(timeout);
        self
    }

    pub fn ints(mut self, ints: &[Option<i64>]) -> Typed {
        self.call.ints = ints.to_vec();
        self
    }

    pub fn floats(mut self, floats: &[f64]) -> Typed {
        self.call.floats = floats.to_vec();
        self
    }

    /// Redis's reply to the call's row.
    pub fn reply(&self, row: TypedRow) -> Reply {
        if let Some(cut) = row.cut {
            return Reply::OverLimit(Some(cut));
        }
        // (A group command words its own errors.)
        if !matches!(self.shape, Shape::Group(_))
            && let Some(err) = row.err
        {
            return Reply::Error(err);
        }
        let bulk = |item: Option<Bytes>| item.map_or(Reply::Nil, Reply::Bulk);
        match &self.shape {
            Shape::Stream(reading) => super::stream::reply(reading, row),
            Shape::Group(shape) => super::stream_group::reply(shape, row),
            Shape::Int => Reply::Integer(row.n.unwrap_or(0)),
            Shape::IntOrNil => row.n.map_or(Reply::Nil, Reply::Integer),
            Shape::FirstInt => row
                .scores
                .first()
                .copied()
                .flatten()
                .map_or(Reply::Nil, |index| Reply::Integer(index as i64)),
            Shape::BlockPop | Shape::BlockZPop if row.items.is_empty() => Reply::NilArray,
            Shape::BlockPop => Reply::Array(row.items.into_iter().map(bulk).collect()),
            Shape::BlockZPop => {
                let mut reply: Vec<Reply> = row.items.into_iter().map(bulk).collect();
                reply.push(double(row.scores.into_iter().next().flatten()));
                Reply::Array(reply)
            }
            Shape::MultiPop { .. } if row.items.is_empty() => Reply::NilArray,
            Shape::MultiPop { scored } => {
                let mut items = row.items.into_iter();
                let key = bulk(items.next().flatten());
                let elements = if *scored {
                    items
                        .zip(row.scores)
                        .map(|(member, score)| Reply::Array(vec![bulk(member), double(score)]))
                        .collect()
                } else {
                    items.map(bulk).collect()
                };
                Reply::Array(vec![key, Reply::Array(elements)])
            }
            Shape::RankScore => match row.n {
                Some(rank) => Reply::Array(vec![
                    Reply::Integer(rank),
                    double(row.scores.into_iter().next().flatten()),
                ]),
                None => Reply::NilArray,
            },
            Shape::ScanFields { pattern } => {
                let fields = row
                    .items
                    .chunks(2)
                    .map(|pair| pair[0].clone().unwrap_or_default())
                    .filter(|field| pattern.as_ref().is_none_or(|pattern| glob::matches(pattern, field)))
                    .map(Reply::Bulk)
                    .collect();
                Reply::Array(vec![Reply::text(&row.n.unwrap_or(0).to_string()), Reply::Array(fields)])
            }
            Shape::ListPop if row.n.is_none() => Reply::NilArray,
            Shape::ListPop => Reply::Array(row.items.into_iter().map(bulk).collect()),
            Shape::Double => double(row.scores.into_iter().next().flatten()),
            Shape::Doubles => Reply::Array(row.scores.into_iter().map(double).collect()),
            Shape::Scored { with_scores: false } => Reply::Array(row.items.into_iter().map(bulk).collect()),
            Shape::Scored { with_scores: true } | Shape::Popped { count: true } => Reply::Pairs(
                row.items
                    .into_iter()
                    .zip(row.scores)
                    .map(|(member, score)| (bulk(member), double(score)))
                    .collect(),
            ),
            Shape::Popped { count: false } => Reply::Array(
                row.items
                    .into_iter()
                    .zip(row.scores)
                    .flat_map(|(member, score)| [bulk(member), double(score)])
                    .collect(),
            ),
            Shape::Ok => Reply::OK,
            Shape::Bulk => bulk(row.items.into_iter().next().flatten()),
            Shape::Bulks => Reply::Array(row.items.into_iter().map(bulk).collect()),
            Shape::Ints => Reply::Array(
                row.scores
                    .into_iter()
                    .map(|score| Reply::Integer(score.unwrap_or(0.0) as i64))
                    .collect(),
            ),
            Shape::Map => Reply::Map(pairs(row.items, bulk)),
            Shape::Pairs => Reply::Pairs(pairs(row.items, bulk)),
            Shape::Random => bulk(row.items.into_iter().next().flatten()),
            Shape::Scan { pattern, pairs, scored } => {
                let step = if *pairs { 2 } else { 1 };
                let mut found = Vec::with_capacity(row.items.len());
                for (index, chunk) in row.items.chunks(step).enumerate() {
                    let element = chunk[0].clone().unwrap_or_default();
                    if pattern.as_ref().is_none_or(|pattern| glob::matches(pattern, &element)) {
                        found.extend(chunk.iter().cloned().map(bulk));
                        if *scored {
                            let score = row.scores.get(index).copied().flatten().unwrap_or_default();
                            found.push(Reply::text(&format_score(score)));
                        }
                    }
                }
                Reply::Array(vec![Reply::text(&row.n.unwrap_or(0).to_string()), Reply::Array(found)])
            }
        }
    }
}

fn double(score: Option<f64>) -> Reply {
    score.map_or(Reply::Nil, Reply::Double)
}

fn pairs(items: Vec<Option<Bytes>>, bulk: impl Fn(Option<Bytes>) -> Reply) -> Vec<(Reply, Reply)> {
    let mut items = items.into_iter();
    let mut pairs = Vec::with_capacity(items.len() / 2);
    while let (Some(first), Some(second)) = (items.next(), items.next()) {
        pairs.push((bulk(first), bulk(second)));
    }
    pairs
}

/// Parses a command on typed keys; `Ok(None)` when `name` is not one. The arity is checked.
pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<Typed>, Reply> {
    if let Some(typed) = super::hash::parse(name, args)? {
        return Ok(Some(typed));
    }
    if let Some(typed) = super::set::parse(name, args)? {
        return Ok(Some(typed));
    }
    if let Some(typed) = super::zset::parse(name, args)? {
        return Ok(Some(typed));
    }
    if let Some(typed) = super::stream::parse(name, args)? {
        return Ok(Some(typed));
    }
    if let Some(typed) = super::stream_group::parse(name, args)? {
        return Ok(Some(typed));
    }
    super::list::parse(name, args)
}

/// A random-element count (HRANDFIELD, SRANDMEMBER): a negative one asks for repeats, and is
/// bounded by [`MAX_RANDOM`] because its reply is that long whatever the key holds.
pub fn random_count(arg: &[u8]) -> Result<i64, Reply> {
    let count = integer(arg)?;
    if count < -MAX_RANDOM {
        return Err(Reply::error(format!(
            "ERR value is out of range, must be at least -{MAX_RANDOM} (pgvs3 builds a reply of at most {MAX_RANDOM} random elements)"
        )));
    }
    Ok(count)
}

/// LMPOP's and ZMPOP's arguments from `numkeys`: `numkeys key [key ...] END [COUNT count]`,
/// where END is one of `ends` (the first answers true). Redis's checks and texts.
pub fn multi_pop(args: &[Bytes], ends: [&[u8]; 2]) -> Result<(Vec<String>, bool, i64), Reply> {
    let positive = |arg: &[u8], what: &str| {
        parse_integer(arg)
            .filter(|n| *n > 0)
            .ok_or_else(|| Reply::error(format!("ERR {what} should be greater than 0")))
    };
    let numkeys = positive(&args[0][..], "numkeys")?;
    let Some(end) = usize::try_from(numkeys).ok().and_then(|n| args.get(n + 1)) else {
        return Err(super::command::syntax_error());
    };
    let numkeys = numkeys as usize;
    let first = if end.eq_ignore_ascii_case(ends[0]) {
        true
    } else if end.eq_ignore_ascii_case(ends[1]) {
        false
    } else {
        return Err(super::command::syntax_error());
    };
    let count = match &args[numkeys + 2..] {
        [] => 1,
        [option, count] if option.eq_ignore_ascii_case(b"count") => positive(&count[..], "count")?.min(MAX_RANDOM),
        _ => return Err(super::command::syntax_error()),
    };
    let keys = args[1..=numkeys]
        .iter()
        .map(super::command::key)
        .collect::<Result<_, _>>()?;
    Ok((keys, first, count))
}

/// The cursor and options of HSCAN, SSCAN and ZSCAN: `(cursor, count, pattern)`.
pub fn scan_options(args: &[Bytes]) -> Result<(i64, i64, Option<Bytes>), Reply> {
    let cursor = parse_integer(&args[0])
        .filter(|cursor| *cursor >= 0)
        .ok_or_else(|| Reply::error("ERR invalid cursor"))?;
    let mut count = 10;
    let mut pattern = None;
    let mut i = 1;
    while i < args.len() {
        let Some(value) = args.get(i + 1) else {
            return Err(super::command::syntax_error());
        };
        match args[i].to_ascii_lowercase().as_slice() {
            b"match" => pattern = Some(value.clone()),
            b"count" => match parse_integer(value) {
                Some(n) if n >= 1 => count = n.min(MAX_SCAN_COUNT),
                Some(_) => return Err(super::command::syntax_error()),
                None => return Err(not_an_integer()),
            },
            _ => return Err(super::command::syntax_error()),
        }
        i += 2;
    }
    Ok((cursor, count, pattern))
}
