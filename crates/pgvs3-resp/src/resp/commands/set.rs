//! Set commands (SADD, SINTER, SPOP, SSCAN, ...): parsing into calls of `pgvs3.resp_set`
//! (gateway/migrations/functions/resp_set.sql), which does their work.

use bytes::Bytes;

use crate::resp::codec::Reply;
use crate::resp::command::{integer, key, syntax_error};
use crate::resp::typed::{MAX_RANDOM, Shape, Typed, random_count, scan_options};
use crate::store::SetOp;

fn keys(args: &[Bytes]) -> Result<Vec<String>, Reply> {
    args.iter().map(key).collect()
}

pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<Typed>, Reply> {
    let set = |op, rest: &[Bytes], shape| Ok(Typed::new(op, vec![key(&args[1])?], rest, shape));
    let typed: Typed = match name {
        "sadd" | "srem" => set(
            if name == "sadd" { SetOp::Sadd } else { SetOp::Srem },
            &args[2..],
            Shape::Int,
        )?,
        "smembers" => set(SetOp::Smembers, &[], Shape::Bulks)?,
        "sismember" => set(SetOp::Sismember, &args[2..], Shape::Int)?,
        "smismember" => set(SetOp::Smismember, &args[2..], Shape::Ints)?,
        "scard" => set(SetOp::Scard, &[], Shape::Int)?,
        "spop" => match args.len() {
            2 => set(SetOp::Spop, &[], Shape::Random)?.ints(&[None]),
            3 => {
                let count = integer(&args[2])?;
                if count < 0 {
                    return Err(Reply::error("ERR value is out of range, must be positive"));
                }
                // The popped members are the reply: as many as a reply may hold, at most.
                set(SetOp::Spop, &[], Shape::Bulks)?.ints(&[Some(count.min(MAX_RANDOM))])
            }
            _ => return Err(syntax_error()),
        },
        "srandmember" => match args.len() {
            2 => set(SetOp::Srandmember, &[], Shape::Random)?.ints(&[None]),
            3 => {
                let count = random_count(&args[2])?;
                set(SetOp::Srandmember, &[], Shape::Bulks)?.ints(&[Some(count.min(MAX_RANDOM))])
            }
            _ => return Err(syntax_error()),
        },
        "smove" => Typed::new(
            SetOp::Smove,
            vec![key(&args[1])?, key(&args[2])?],
            &args[3..],
            Shape::Int,
        ),
        "sinter" | "sunion" | "sdiff" => {
            let op = match name {
                "sinter" => SetOp::Sinter,
                "sunion" => SetOp::Sunion,
                _ => SetOp::Sdiff,
            };
            Typed::new(op, keys(&args[1..])?, &[], Shape::Bulks)
        }
        "sinterstore" | "sunionstore" | "sdiffstore" => {
            let op = match name {
                "sinterstore" => SetOp::Sinterstore,
                "sunionstore" => SetOp::Sunionstore,
                _ => SetOp::Sdiffstore,
            };
            Typed::new(op, keys(&args[1..])?, &[], Shape::Int)
        }
        "sintercard" => {
            let numkeys = integer(&args[1])
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| Reply::error("ERR numkeys should be greater than 0"))?;
            let rest = &args[2..];
            if numkeys as usize > rest.len() {
                return Err(Reply::error("ERR Number of keys can't be greater than number of args"));
            }
            let (sources, options) = rest.split_at(numkeys as usize);
            let limit = match options {
                [] => 0,
                [option, limit] if option.eq_ignore_ascii_case(b"limit") => integer(limit)
                    .ok()
                    .filter(|limit| *limit >= 0)
                    .ok_or_else(|| Reply::error("ERR LIMIT can't be negative"))?,
                _ => return Err(syntax_error()),
            };
            Typed::new(SetOp::Sintercard, keys(sources)?, &[], Shape::Int).ints(&[Some(limit)])
        }
        "sscan" => {
            let (cursor, count, pattern) = scan_options(&args[2..])?;
            set(
                SetOp::Sscan,
                &[],
                Shape::Scan {
                    pattern,
                    pairs: false,
                    scored: false,
                },
            )?
            .ints(&[Some(cursor), Some(count)])
        }
        _ => return Ok(None),
    };
    Ok(Some(typed))
}
