//! List commands (LPUSH, LPOP, LRANGE, LINSERT, LPOS, LMOVE, ...): parsing, with Redis's
//! checks and error texts, into calls of `pgvs3.resp_list`
//! (gateway/migrations/functions/resp_list.sql), which does their work.

use bytes::Bytes;

use crate::resp::blocking::timeout;
use crate::resp::codec::Reply;
use crate::resp::command::{integer, key, syntax_error, wrong_arity};
use crate::resp::typed::{MAX_RANDOM, Shape, Typed};
use crate::store::ListOp;

/// LEFT or RIGHT of LMOVE: whether it is the head.
fn side(arg: &[u8]) -> Result<bool, Reply> {
    match arg.to_ascii_lowercase().as_slice() {
        b"left" => Ok(true),
        b"right" => Ok(false),
        _ => Err(syntax_error()),
    }
}

pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<Typed>, Reply> {
    let one = || Ok::<_, Reply>(vec![key(&args[1])?]);
    let list = |op, rest: &[Bytes], shape| Ok::<_, Reply>(Typed::new(op, one()?, rest, shape));
    let typed: Typed = match name {
        "lpush" => list(ListOp::Lpush, &args[2..], Shape::Int)?,
        "rpush" => list(ListOp::Rpush, &args[2..], Shape::Int)?,
        "lpushx" => list(ListOp::Lpushx, &args[2..], Shape::Int)?,
        "rpushx" => list(ListOp::Rpushx, &args[2..], Shape::Int)?,
        "lpop" | "rpop" => {
            let op = if name == "lpop" { ListOp::Lpop } else { ListOp::Rpop };
            match args.len() {
                2 => list(op, &[], Shape::Bulk)?.ints(&[None]),
                3 => {
                    let count = integer(&args[2])
                        .ok()
                        .filter(|count| *count >= 0)
                        .ok_or_else(|| Reply::error("ERR value is out of range, must be positive"))?;
                    list(op, &[], Shape::ListPop)?.ints(&[Some(count.min(MAX_RANDOM))])
                }
                // Redis's arity is -2, and its LPOP names the arity for more than a count.
                _ => return Err(wrong_arity(name)),
            }
        }
        "llen" => list(ListOp::Llen, &[], Shape::Int)?,
        "lindex" => list(ListOp::Lindex, &[], Shape::Bulk)?.ints(&[Some(integer(&args[2])?)]),
        "lrange" => {
            list(ListOp::Lrange, &[], Shape::Bulks)?.ints(&[Some(integer(&args[2])?), Some(integer(&args[3])?)])
        }
        "ltrim" => list(ListOp::Ltrim, &[], Shape::Ok)?.ints(&[Some(integer(&args[2])?), Some(integer(&args[3])?)]),
        "lset" => list(ListOp::Lset, &args[3..4], Shape::Ok)?.ints(&[Some(integer(&args[2])?)]),
        "linsert" => {
            let before = match args[2].to_ascii_lowercase().as_slice() {
                b"before" => 1,
                b"after" => 0,
                _ => return Err(syntax_error()),
            };
            list(ListOp::Linsert, &args[3..5], Shape::Int)?.ints(&[Some(before)])
        }
        "lrem" => list(ListOp::Lrem, &args[3..4], Shape::Int)?.ints(&[Some(integer(&args[2])?)]),
        "lpos" => parse_lpos(one()?, args)?,
        "lmove" | "rpoplpush" | "blmove" | "brpoplpush" => {
            let (from, to) = match name {
                "lmove" | "blmove" => (side(&args[3])?, side(&args[4])?),
                _ => (false, true),
            };
            let typed = Typed::new(ListOp::Lmove, vec![key(&args[1])?, key(&args[2])?], &[], Shape::Bulk)
                .ints(&[Some(i64::from(from)), Some(i64::from(to))]);
            match name {
                "blmove" | "brpoplpush" => typed.blocking(timeout(&args[args.len() - 1])?),
                _ => typed,
            }
        }
        "lmpop" | "blmpop" => {
            let blocking = name == "blmpop";
            let (keys, left, count) =
                crate::resp::typed::multi_pop(&args[1 + usize::from(blocking)..], [b"left", b"right"])?;
            let typed = Typed::new(ListOp::Lmpop, keys, &[], Shape::MultiPop { scored: false })
                .ints(&[Some(i64::from(left)), Some(count)]);
            match blocking {
                true => typed.blocking(timeout(&args[1])?),
                false => typed,
            }
        }
        "blpop" | "brpop" => {
            let keys = args[1..args.len() - 1].iter().map(key).collect::<Result<_, _>>()?;
            let op = if name == "blpop" { ListOp::Blpop } else { ListOp::Brpop };
            Typed::new(op, keys, &[], Shape::BlockPop).blocking(timeout(&args[args.len() - 1])?)
        }
        _ => return Ok(None),
    };
    Ok(Some(typed))
}

/// `LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]`.
fn parse_lpos(keys: Vec<String>, args: &[Bytes]) -> Result<Typed, Reply> {
    let (mut rank, mut count, mut maxlen) = (1, None, 0);
    let mut options = &args[3..];
    while let [option, value, rest @ ..] = options {
        match option.to_ascii_lowercase().as_slice() {
            b"rank" => {
                rank = integer(value)?;
                if rank == 0 {
                    return Err(Reply::error(
                        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... \
                         or use negative to start from the end of the list",
                    ));
                }
                if rank == i64::MIN {
                    return Err(Reply::error("ERR value is out of range"));
                }
            }
            b"count" => {
                let n = integer(value)?;
                if n < 0 {
                    return Err(Reply::error("ERR COUNT can't be negative"));
                }
                count = Some(n);
            }
            b"maxlen" => {
                maxlen = integer(value)?;
                if maxlen < 0 {
                    return Err(Reply::error("ERR MAXLEN can't be negative"));
                }
            }
            _ => return Err(syntax_error()),
        }
        options = rest;
    }
    if !options.is_empty() {
        return Err(syntax_error());
    }
    let shape = if count.is_some() { Shape::Ints } else { Shape::FirstInt };
    Ok(Typed::new(ListOp::Lpos, keys, &args[2..3], shape).ints(&[Some(rank), count, Some(maxlen)]))
}
