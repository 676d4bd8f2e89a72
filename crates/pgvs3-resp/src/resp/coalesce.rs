//! Consecutive writes of one kind on one key, coalesced into one SQL call (issue 39). A batch
//! of 64 connections' LPUSHes on one list (or a pipeline of them) was 64 calls of
//! `pgvs3.resp_list`, each some statements under the key's lock; it is now one push of all
//! their elements, each command answered from the call's row as if it had run alone:
//!
//! - LPUSH/RPUSH: one push of every element, in order; a command answers the length after its
//!   own elements (the final length less those pushed after it).
//! - LPOP/RPOP without a count: one pop of as many elements; the commands take them in order,
//!   nil once the list ran out (Redis's answer when the key is gone).
//! - HSET/HMSET, and ZADDs with the same options (not INCR): one call over every pair, which
//!   answers pair by pair whether it added its field or member (or changed its score); a
//!   command counts its own pairs.
//! - XADD with a `*` ID and the same options (no `~` trim): one call adds every entry, each with its ID
//!   after the one before, and trims after them what each command's trim would have; a
//!   command answers its own entry's ID, and keeps how many its own trim removed (its `xtrim`
//!   event, notify/recorder.rs).
//! - SADD, and SREM, HDEL and ZREM: one call over every member (field), which answers those it
//!   added (removed); a command counts those of its own that no command before it in the run
//!   named. A run only adds or only removes, so a member changes at most once in it, as the
//!   first command naming it (alone, the later ones found it already added or gone).
//! - SPOP without a count: one pop of as many members, at random as each alone would have
//!   drawn, taken in order, nil once the set ran out; the call is told they are single pops
//!   (SPOP with a count may rebuild an intset, single ones never do).
//! - ZPOPMIN (ZPOPMAX), with a count or without: one pop of the sum of the counts, in score
//!   order, each command taking its own count of them in order, as it would have alone.
//!
//! The only error these calls answer for the whole run is WRONGTYPE (or, for XADD, a stream out
//! of IDs), the same for every command of a run on one key, so each command still gets its own
//! reply; a stream that runs out of IDs midway answers the IDs it gave, and the rest that error. Commands merge only when they follow each
//! other in the batch, so the order of the batch (each connection's arrival order) holds.
//! A key a run emptied is gone for the commands after it, as the call's own (`resp_settle`)
//! deleted it; a batch whose keyspace publishes events never runs removals together
//! (notify/recorder.rs cuts its runs at a key an earlier command may have emptied).

use super::codec::Reply;
use super::command::KeyCommand;
use super::typed::{Shape, Typed};
use std::collections::HashSet;

use bytes::Bytes;

use crate::store::{Cut, HashOp, ListOp, SetOp, StreamOp, TypedCall, TypedRow, ZsetOp, sql_error_text};

/// How a run of commands became one call, and so how its row is shared out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Push,
    /// LPOP/RPOP and SPOP without a count: one element or nil each.
    Pop,
    HashSet,
    Zadd,
    Xadd,
    /// SADD, SREM, HDEL, ZREM: the call answers the members it added or removed.
    Members,
    ZPop,
}

/// The kind of merge a command can take part in, if any.
fn kind(typed: &Typed) -> Option<Kind> {
    let call = &typed.call;
    if typed.blocking.is_some() || call.keys.len() != 1 {
        return None;
    }
    if call.is(ListOp::Lpush) || call.is(ListOp::Rpush) {
        Some(Kind::Push)
    } else if (call.is(ListOp::Lpop) || call.is(ListOp::Rpop)) && call.ints == [None] {
        Some(Kind::Pop)
    } else if call.is(HashOp::Hset) && call.ints.is_empty() {
        Some(Kind::HashSet)
    } else if call.is(ZsetOp::Zadd) && call.ints.len() == 6 && call.ints[5] == Some(0) {
        Some(Kind::Zadd)
    } else if call.is(StreamOp::Xadd)
        && call.ints.len() == 8
        && call.ints[1] == Some(0)
        && call.ints[4].is_none_or(|how| how < 2)
    {
        // `*` only: an explicit ID can be too small, which fails that command alone. Not a `~`
        // trim: one after all the entries would stop at other nodes than each after its own.
        Some(Kind::Xadd)
    } else if call.is(SetOp::Spop) && call.ints == [None] {
        Some(Kind::Pop)
    } else if [
        call.is(SetOp::Sadd),
        call.is(SetOp::Srem),
        call.is(HashOp::Hdel),
        call.is(ZsetOp::Zrem),
    ]
    .contains(&true)
    {
        Some(Kind::Members)
    } else if call.is(ZsetOp::Zpopmin) || call.is(ZsetOp::Zpopmax) {
        Some(Kind::ZPop)
    } else {
        None
    }
}

/// One call of a batch: a command alone, or a run of commands merged.
pub struct Group<'a> {
    members: Vec<&'a Typed>,
    merged: Option<(Kind, TypedCall)>,
}

/// The run's commands as calls, in order.
pub fn coalesce<'a>(run: &[&'a Typed]) -> Vec<Group<'a>> {
    let mut groups: Vec<(Option<Kind>, Vec<&'a Typed>)> = Vec::new();
    for typed in run {
        let kind = kind(typed);
        if let (Some(next), Some((last_kind, members))) = (kind, groups.last_mut())
            && *last_kind == kind
            && same_target(next, &members[0].call, &typed.call)
        {
            members.push(typed);
            continue;
        }
        groups.push((kind, vec![typed]));
    }
    groups
        .into_iter()
        .map(|(kind, members)| {
            let merged = match kind {
                Some(kind) if members.len() > 1 => Some((kind, merge(kind, &members))),
                _ => None,
            };
            Group { members, merged }
        })
        .collect()
}

/// How many of `commands` run inside another's call (`pgvs3_resp_coalesced_commands_total`).
pub fn merged(commands: &[&KeyCommand]) -> usize {
    fn typed(command: &KeyCommand) -> Option<&Typed> {
        match command {
            KeyCommand::Typed(typed) => Some(typed),
            _ => None,
        }
    }
    commands
        .chunk_by(|a, b| typed(a).is_some() && typed(b).is_some())
        .map(|run| {
            let run: Vec<&Typed> = run.iter().filter_map(|command| typed(command)).collect();
            run.len().saturating_sub(coalesce(&run).len().max(1))
        })
        .sum()
}

/// Same operation, key and options (ZADD's flags; a pop's missing count). ZPOPMINs (ZPOPMAXs)
/// merge whatever their counts: each takes its own share.
fn same_target(kind: Kind, first: &TypedCall, next: &TypedCall) -> bool {
    first.same_op(next) && first.keys == next.keys && (kind == Kind::ZPop || first.ints == next.ints)
}

fn merge(kind: Kind, members: &[&Typed]) -> TypedCall {
    let mut call = members[0].call.clone();
    call.args = members
        .iter()
        .flat_map(|typed| typed.call.args.iter().cloned())
        .collect();
    call.reply_limit = None;
    match kind {
        Kind::Push => {}
        Kind::Pop => {
            call.ints = vec![Some(members.len() as i64)];
            if call.is(SetOp::Spop) {
                call.ints.push(Some(1));
            }
            call.reply_limit = summed_limits(members);
        }
        Kind::ZPop => {
            call.ints = vec![Some(members.iter().map(|typed| zpop_count(typed) as i64).sum())];
            call.reply_limit = summed_limits(members);
        }
        Kind::Members => call.ints = vec![Some(1)],
        Kind::HashSet => call.ints = vec![Some(1)],
        Kind::Zadd => {
            call.floats = members
                .iter()
                .flat_map(|typed| typed.call.floats.iter().copied())
                .collect();
            call.ints.push(Some(1));
        }
        Kind::Xadd => call
            .ints
            .extend(members.iter().map(|typed| Some(typed.call.args.len() as i64))),
    }
    call
}

/// The limit of a merged pop's reply: the sum of its commands'. The elements come back whatever
/// the limit (they are popped), and each command's own share is checked against its own
/// ([`own_share`]).
fn summed_limits(members: &[&Typed]) -> Option<i64> {
    members
        .iter()
        .map(|typed| typed.call.reply_limit)
        .try_fold(0i64, |sum, limit| limit.map(|limit| sum.saturating_add(limit)))
}

/// How many members a ZPOPMIN (ZPOPMAX) pops (the gateway bounded its count).
fn zpop_count(typed: &Typed) -> usize {
    typed.call.ints.first().copied().flatten().unwrap_or(1).max(0) as usize
}

/// A command's share of a merged pop, as its reply, or cut as the call alone would have cut it
/// (`TypedSql`'s test, on the share's datums).
fn own_share(typed: &Typed, items: Vec<Option<Bytes>>, scores: Vec<Option<f64>>) -> Reply {
    let arrays = |elements: usize, bytes: usize| match elements {
        0 => 0,
        _ => 24 + bytes as u64,
    };
    let cut = Cut {
        datum_bytes: arrays(items.len(), items.iter().flatten().map(Bytes::len).sum())
            + arrays(scores.len(), 8 * scores.len()),
        elements: (items.len() + scores.len()) as u64,
    };
    match typed.call.reply_limit {
        Some(limit) if cut.elements > 0 && (limit.max(0) as u64) < cut.least_reply_bytes() => {
            Reply::OverLimit(Some(cut))
        }
        _ => typed.reply(TypedRow {
            items,
            scores,
            ..TypedRow::default()
        }),
    }
}

impl Group<'_> {
    pub fn call(&self) -> &TypedCall {
        match &self.merged {
            Some((_, call)) => call,
            None => &self.members[0].call,
        }
    }

    /// Each member's reply, from the call's row.
    pub fn replies(&self, row: TypedRow) -> Vec<Reply> {
        let Some((kind, _)) = &self.merged else {
            return vec![self.members[0].reply(row)];
        };
        if let Some(cut) = row.cut {
            return vec![Reply::OverLimit(Some(cut)); self.members.len()];
        }
        if let Some(err) = row.err {
            return vec![Reply::Error(err); self.members.len()];
        }
        match kind {
            Kind::Push => {
                let mut after: i64 = self.members.iter().map(|typed| typed.call.args.len() as i64).sum();
                let length = row.n.unwrap_or(0);
                self.members
                    .iter()
                    .map(|typed| {
                        after -= typed.call.args.len() as i64;
                        Reply::Integer(length - after)
                    })
                    .collect()
            }
            Kind::Pop => {
                let mut items = row.items.into_iter();
                self.members
                    .iter()
                    .map(|typed| match items.next().flatten() {
                        None => Reply::Nil,
                        Some(item) => own_share(typed, vec![Some(item)], Vec::new()),
                    })
                    .collect()
            }
            Kind::ZPop => {
                let (mut items, mut scores) = (row.items.into_iter(), row.scores.into_iter());
                self.members
                    .iter()
                    .map(|typed| {
                        let count = zpop_count(typed);
                        let share = items.by_ref().take(count).collect();
                        own_share(typed, share, scores.by_ref().take(count).collect())
                    })
                    .collect()
            }
            Kind::Members => {
                // Each member changed is counted once, by the first command naming it.
                let mut changed: HashSet<Bytes> = row.items.into_iter().flatten().collect();
                self.members
                    .iter()
                    .map(|typed| {
                        let own = typed.call.args.iter().filter(|member| changed.remove(*member)).count();
                        Reply::Integer(own as i64)
                    })
                    .collect()
            }
            Kind::HashSet | Kind::Zadd => {
                let mut steps = row.scores.into_iter().map(|step| step.unwrap_or(0.0));
                self.members
                    .iter()
                    .map(|typed| {
                        let pairs = match kind {
                            Kind::HashSet => typed.call.args.len() / 2,
                            _ => typed.call.floats.len(),
                        };
                        // ZADD's CH counts changed scores too.
                        let changed_counts = typed.call.ints.get(4) == Some(&Some(1));
                        let count = steps
                            .by_ref()
                            .take(pairs)
                            .filter(|step| *step == 1.0 || *step == 2.0 && changed_counts)
                            .count();
                        match typed.shape {
                            Shape::Ok => Reply::OK,
                            _ => Reply::Integer(count as i64),
                        }
                    })
                    .collect()
            }
            Kind::Xadd => {
                // One ID per entry added (a nil for each when NOMKSTREAM found no stream), and
                // what its command's trim removed.
                let mut ids = row.items.into_iter();
                let mut trimmed = row.scores.into_iter();
                self.members
                    .iter()
                    .map(|typed| {
                        let row = match ids.next() {
                            Some(id) => TypedRow {
                                items: vec![id],
                                scores: trimmed.next().into_iter().collect(),
                                ..TypedRow::default()
                            },
                            None => TypedRow {
                                err: Some(sql_error_text("stream_exhausted")),
                                ..TypedRow::default()
                            },
                        };
                        typed.reply(row)
                    })
                    .collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Typed {
        let args: Vec<Bytes> = words
            .iter()
            .map(|word| Bytes::copy_from_slice(word.as_bytes()))
            .collect();
        super::super::typed::parse(words[0], &args).unwrap().unwrap()
    }

    fn answers(commands: &[Typed], rows: Vec<TypedRow>) -> (usize, Vec<Reply>) {
        let run: Vec<&Typed> = commands.iter().collect();
        let groups = coalesce(&run);
        let calls = groups.len();
        let replies = groups
            .iter()
            .zip(rows)
            .flat_map(|(group, row)| group.replies(row))
            .collect();
        (calls, replies)
    }

    #[test]
    fn pushes_on_one_key_are_one_call_and_answer_their_own_lengths() {
        let commands = [
            parse(&["lpush", "l", "a"]),
            parse(&["lpush", "l", "b", "c"]),
            parse(&["lpush", "l", "d"]),
            parse(&["lpush", "other", "e"]),
        ];
        let run: Vec<&Typed> = commands.iter().collect();
        let groups = coalesce(&run);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].call().args.len(), 4);
        let row = TypedRow {
            n: Some(10),
            ..TypedRow::default()
        };
        assert_eq!(
            groups[0].replies(row),
            [Reply::Integer(7), Reply::Integer(9), Reply::Integer(10)]
        );
    }

    #[test]
    fn pops_take_the_elements_in_order_and_nil_once_the_list_ran_out() {
        let commands = [parse(&["rpop", "l"]), parse(&["rpop", "l"]), parse(&["rpop", "l"])];
        let row = TypedRow {
            n: Some(1),
            items: vec![Some(Bytes::from_static(b"x")), Some(Bytes::from_static(b"y"))],
            ..TypedRow::default()
        };
        let (calls, replies) = answers(&commands, vec![row]);
        assert_eq!(calls, 1);
        assert_eq!(
            replies,
            [
                Reply::Bulk(Bytes::from_static(b"x")),
                Reply::Bulk(Bytes::from_static(b"y")),
                Reply::Nil
            ]
        );
        // With a count a pop answers an array: it runs alone.
        let commands = [parse(&["rpop", "l"]), parse(&["rpop", "l", "2"])];
        let run: Vec<&Typed> = commands.iter().collect();
        assert_eq!(coalesce(&run).len(), 2);
    }

    #[test]
    fn hset_and_zadd_count_their_own_pairs() {
        let commands = [
            parse(&["hset", "h", "a", "1", "b", "2"]),
            parse(&["hmset", "h", "a", "3"]),
            parse(&["hset", "h", "c", "4"]),
        ];
        let row = TypedRow {
            n: Some(3),
            scores: vec![Some(1.0), Some(1.0), Some(0.0), Some(1.0)],
            ..TypedRow::default()
        };
        let (calls, replies) = answers(&commands, vec![row]);
        assert_eq!(calls, 1);
        assert_eq!(replies, [Reply::Integer(2), Reply::OK, Reply::Integer(1)]);

        let commands = [
            parse(&["zadd", "z", "1", "a", "2", "b"]),
            parse(&["zadd", "z", "3", "a"]),
            parse(&["zadd", "z", "ch", "3", "a"]),
            parse(&["zadd", "z", "ch", "4", "a"]),
        ];
        let rows = vec![
            TypedRow {
                scores: vec![Some(1.0), Some(1.0), Some(2.0)],
                ..TypedRow::default()
            },
            TypedRow {
                scores: vec![Some(0.0), Some(2.0)],
                ..TypedRow::default()
            },
        ];
        let (calls, replies) = answers(&commands, rows);
        assert_eq!(calls, 2, "ZADDs merge only with the same options");
        assert_eq!(
            replies,
            [
                Reply::Integer(2),
                Reply::Integer(0),
                Reply::Integer(0),
                Reply::Integer(1)
            ]
        );
    }

    #[test]
    fn xadds_with_star_ids_are_one_call_and_answer_their_own_ids() {
        let commands = [
            parse(&["xadd", "s", "*", "a", "1"]),
            parse(&["xadd", "s", "*", "b", "2", "c", "3"]),
            parse(&["xadd", "s", "*", "d", "4"]),
            parse(&["xadd", "s", "maxlen", "5", "*", "e", "5"]),
            parse(&["xadd", "s", "7-1", "f", "6"]),
            parse(&["xadd", "s", "7-2", "g", "7"]),
        ];
        let run: Vec<&Typed> = commands.iter().collect();
        let groups = coalesce(&run);
        assert_eq!(groups.len(), 4, "only `*` IDs with the same options merge");
        let call = groups[0].call();
        assert_eq!(call.args.len(), 8);
        assert_eq!(
            call.ints[8..],
            [Some(2), Some(4), Some(2)],
            "each entry's fields and values"
        );
        let id = |ms: u8| {
            let mut id = vec![0u8; 16];
            id[7] = ms;
            Some(Bytes::from(id))
        };
        let row = TypedRow {
            items: vec![id(1), id(2)],
            ..TypedRow::default()
        };
        let replies = groups[0].replies(row);
        assert_eq!(replies.len(), 3);
        assert!(matches!(&replies[0], Reply::Bulk(_)) && replies[0] != replies[1]);
        assert_eq!(
            replies[2],
            Reply::Error(sql_error_text("stream_exhausted")),
            "past the IDs the stream gave, its last ID was the greatest"
        );
        let nomkstream = TypedRow {
            items: vec![None, None, None],
            ..TypedRow::default()
        };
        assert_eq!(groups[0].replies(nomkstream), vec![Reply::Nil; 3]);
    }

    #[test]
    fn adds_and_removals_count_what_they_named_first() {
        let commands = [
            parse(&["sadd", "s", "a", "b", "a"]),
            parse(&["sadd", "s", "b", "c"]),
            parse(&["sadd", "s", "c", "d"]),
            parse(&["srem", "s", "a"]),
            parse(&["srem", "s", "a", "x"]),
            parse(&["hdel", "h", "f"]),
            parse(&["hdel", "h", "f", "g"]),
            parse(&["zrem", "z", "m"]),
            parse(&["zrem", "z", "n"]),
        ];
        let run: Vec<&Typed> = commands.iter().collect();
        let groups = coalesce(&run);
        assert_eq!(groups.len(), 4, "SADD, SREM, HDEL and ZREM runs");
        assert_eq!(groups[0].call().ints, [Some(1)], "asks for the members added");
        let changed = |members: &[&'static str]| TypedRow {
            n: Some(members.len() as i64),
            items: members
                .iter()
                .map(|member| Some(Bytes::from_static(member.as_bytes())))
                .collect(),
            ..TypedRow::default()
        };
        // `b` was there already; `c` is counted by the first SADD naming it.
        assert_eq!(
            groups[0].replies(changed(&["a", "c", "d"])),
            [Reply::Integer(1), Reply::Integer(1), Reply::Integer(1)]
        );
        assert_eq!(
            groups[1].replies(changed(&["a"])),
            [Reply::Integer(1), Reply::Integer(0)]
        );
        assert_eq!(
            groups[2].replies(changed(&["f", "g"])),
            [Reply::Integer(1), Reply::Integer(1)]
        );
        assert_eq!(groups[3].replies(changed(&[])), [Reply::Integer(0), Reply::Integer(0)]);
    }

    #[test]
    fn spops_and_zpops_take_their_own_shares_in_order() {
        let commands = [parse(&["spop", "s"]), parse(&["spop", "s"]), parse(&["spop", "s", "2"])];
        let run: Vec<&Typed> = commands.iter().collect();
        let groups = coalesce(&run);
        assert_eq!(groups.len(), 2, "SPOP with a count runs alone");
        assert_eq!(groups[0].call().ints, [Some(2), Some(1)], "single pops, no rebuild");
        let row = TypedRow {
            items: vec![Some(Bytes::from_static(b"x"))],
            ..TypedRow::default()
        };
        assert_eq!(
            groups[0].replies(row),
            [Reply::Bulk(Bytes::from_static(b"x")), Reply::Nil]
        );

        let commands = [
            parse(&["zpopmin", "z"]),
            parse(&["zpopmin", "z", "2"]),
            parse(&["zpopmin", "z"]),
            parse(&["zpopmin", "z", "0"]),
            parse(&["zpopmax", "z"]),
        ];
        let run: Vec<&Typed> = commands.iter().collect();
        let groups = coalesce(&run);
        assert_eq!(groups.len(), 2, "ZPOPMIN and ZPOPMAX apart");
        assert_eq!(groups[0].call().ints, [Some(4)]);
        let member = |name: &'static str| Some(Bytes::from_static(name.as_bytes()));
        let row = TypedRow {
            items: vec![member("a"), member("b"), member("c")],
            scores: vec![Some(1.0), Some(2.0), Some(3.0)],
            ..TypedRow::default()
        };
        let bulk = |name: &'static str| Reply::Bulk(Bytes::from_static(name.as_bytes()));
        assert_eq!(
            groups[0].replies(row),
            [
                Reply::Array(vec![bulk("a"), Reply::Double(1.0)]),
                Reply::Pairs(vec![(bulk("b"), Reply::Double(2.0)), (bulk("c"), Reply::Double(3.0))]),
                Reply::Array(Vec::new()),
                Reply::Pairs(Vec::new()),
            ],
            "the set ran out at the third"
        );
    }

    #[test]
    fn a_wrongtype_answers_every_command_of_the_run() {
        let commands = [parse(&["lpush", "s", "a"]), parse(&["lpush", "s", "b"])];
        let row = TypedRow {
            err: Some("WRONGTYPE x".into()),
            ..TypedRow::default()
        };
        let (_, replies) = answers(&commands, vec![row]);
        assert_eq!(replies, vec![Reply::Error("WRONGTYPE x".into()); 2]);
    }
}
