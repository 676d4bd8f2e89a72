//! Hash commands (HSET, HGET, HINCRBY, HSCAN, ...): parsing into calls of `pgvs3.resp_hash`
//! (gateway/migrations/functions/resp_hash.sql), which does their work.

use bytes::Bytes;

use crate::resp::codec::Reply;
use crate::resp::command::{integer, key, parse_float, syntax_error, wrong_arity};
use crate::resp::typed::{Shape, Typed, random_count, scan_options};
use crate::store::HashOp;

pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<Typed>, Reply> {
    let hash = |op, rest: &[Bytes], shape| Ok(Typed::new(op, vec![key(&args[1])?], rest, shape));
    let typed: Typed = match name {
        "hset" | "hmset" => {
            if !args.len().is_multiple_of(2) {
                return Err(wrong_arity(name));
            }
            let shape = if name == "hset" { Shape::Int } else { Shape::Ok };
            hash(HashOp::Hset, &args[2..], shape)?
        }
        "hsetnx" => hash(HashOp::Hsetnx, &args[2..], Shape::Int)?,
        "hget" => hash(HashOp::Hget, &args[2..], Shape::Bulk)?,
        "hmget" => hash(HashOp::Hmget, &args[2..], Shape::Bulks)?,
        "hdel" => hash(HashOp::Hdel, &args[2..], Shape::Int)?,
        "hexists" => hash(HashOp::Hexists, &args[2..], Shape::Int)?,
        "hstrlen" => hash(HashOp::Hstrlen, &args[2..], Shape::Int)?,
        "hlen" => hash(HashOp::Hlen, &[], Shape::Int)?,
        "hgetall" => hash(HashOp::Hgetall, &[], Shape::Map)?,
        "hkeys" => hash(HashOp::Hkeys, &[], Shape::Bulks)?,
        "hvals" => hash(HashOp::Hvals, &[], Shape::Bulks)?,
        "hincrby" => {
            let by = integer(&args[3])?;
            hash(HashOp::Hincrby, &args[2..3], Shape::Int)?.ints(&[Some(by)])
        }
        "hincrbyfloat" => {
            let by = parse_float(&args[3]).ok_or_else(|| Reply::error("ERR value is not a valid float"))?;
            // Checked before the key, as Redis does.
            if by.is_infinite() {
                return Err(Reply::error("ERR value is NaN or Infinity"));
            }
            hash(HashOp::Hincrbyfloat, &args[2..4], Shape::Bulk)?.floats(&[by])
        }
        "hrandfield" => match args.len() {
            2 => hash(HashOp::Hrandfield, &[], Shape::Random)?.ints(&[None, Some(0)]),
            3 | 4 => {
                let count = random_count(&args[2])?;
                let with_values = match args.get(3) {
                    None => false,
                    Some(option) if option.eq_ignore_ascii_case(b"withvalues") => true,
                    Some(_) => return Err(syntax_error()),
                };
                let shape = if with_values { Shape::Pairs } else { Shape::Bulks };
                hash(HashOp::Hrandfield, &[], shape)?.ints(&[Some(count), Some(i64::from(with_values))])
            }
            _ => return Err(syntax_error()),
        },
        "hscan" => {
            // NOVALUES (Redis 7.4) comes last.
            // Options after the cursor come in pairs: an odd one out at the end is NOVALUES.
            let novalues = args.len().is_multiple_of(2) && args[args.len() - 1].eq_ignore_ascii_case(b"novalues");
            let options = &args[2..args.len() - usize::from(novalues)];
            let (cursor, count, pattern) = scan_options(options)?;
            let shape = match novalues {
                true => Shape::ScanFields { pattern },
                false => Shape::Scan {
                    pattern,
                    pairs: true,
                    scored: false,
                },
            };
            hash(HashOp::Hscan, &[], shape)?.ints(&[Some(cursor), Some(count)])
        }
        _ => return Ok(None),
    };
    Ok(Some(typed))
}
