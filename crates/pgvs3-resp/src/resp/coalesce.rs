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
//!
//! The only error these calls answer for the whole run is WRONGTYPE (or, for XADD, a stream out
//! of IDs), the same for every command of a run on one key, so each command still gets its own
//! reply; a stream that runs out of IDs midway answers the IDs it gave, and the rest that error. Commands merge only when they follow each
//! other in the batch, so the order of the batch (each connection's arrival order) holds.

use super::codec::Reply;
use super::command::KeyCommand;
use super::typed::{Shape, Typed};
use crate::store::{Cut, HashOp, ListOp, StreamOp, TypedCall, TypedRow, ZsetOp, sql_error_text};

/// How a run of commands became one call, and so how its row is shared out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Push,
    Pop,
    HashSet,
    Zadd,
    Xadd,
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
        if let (Some(_), Some((last_kind, members))) = (kind, groups.last_mut())
            && *last_kind == kind
            && same_target(&members[0].call, &typed.call)
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

/// Same operation, key and options (ZADD's flags; a pop's missing count).
fn same_target(first: &TypedCall, next: &TypedCall) -> bool {
    first.same_op(next) && first.keys == next.keys && first.ints == next.ints
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
            // Each command's share of the output: the elements come back whatever the limit
            // (they are popped), and each command's own element is checked against its own.
            call.reply_limit = members
                .iter()
                .map(|typed| typed.call.reply_limit)
                .try_fold(0i64, |sum, limit| limit.map(|limit| sum.saturating_add(limit)));
        }
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
                        Some(item) => {
                            // As the call alone would have cut it (`TypedSql`'s test).
                            let cut = Cut {
                                datum_bytes: item.len() as u64 + 24,
                                elements: 1,
                            };
                            match typed.call.reply_limit {
                                Some(limit) if (limit.max(0) as u64) < cut.least_reply_bytes() => {
                                    Reply::OverLimit(Some(cut))
                                }
                                _ => Reply::Bulk(item),
                            }
                        }
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
    use bytes::Bytes;

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
