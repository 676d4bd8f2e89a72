//! The working set's streams: what a stream key holds of what XADD, XTRIM and XLEN answer (its
//! last ID, its length, its nodes: not its entries), and those calls predicted, each as
//! `pgvs3.resp_stream` (gateway/migrations/functions/resp_stream.sql) answers it; and what a
//! run's XADDs and XTRIMs changed, written as one `pgvs3.resp_stream_apply` call per stream
//! ([`Stream::write`]).
//!
//! IDs are held as the function holds them: each half a bigint with its sign bit flipped
//! (0022_resp_streams.sql), so that their order is the bigints' order and the reply's 16 bytes
//! are both halves big-endian. A trim removes whole nodes (0060_resp_stream_nodes.sql), so the
//! nodes are what a trim's count is predicted from; a stream made here, whose node size
//! (`stream-node-max-entries`) was never loaded, loses its nodes at its second entry, and then
//! only a trim that surely removes nothing is predicted.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::zset::row;
use super::{Known, Value, within_limit};
use crate::store::{Loaded, StreamNode, StreamWrite, TypedCall, TypedRow};

/// Loads a stream key (see [`Loaded`]): in `ints` its last ID (two halves), length, node size
/// (`resp_encodings`' stream_entries) and number of nodes, then the nodes' columns one after
/// another (first IDs' halves, last IDs' halves, entries given, entries live), oldest first.
/// `$3` bounds the nodes. `present` judges the key's liveness as `pgvs3.resp_type` does; a key of
/// another type is present with no `ints`, which [`Stream::from_loaded`] refuses.
pub const LOAD: &str = "SELECT k.key IS NOT NULL AS present, coalesce(n.too_large, false) AS too_large,
        NULL::bytea[] AS items, NULL::bytea[] AS vals, NULL::float8[] AS scores,
        CASE WHEN s.key IS NOT NULL AND NOT n.too_large THEN
            ARRAY[s.last_ms, s.last_seq, s.length, (pgvs3.resp_encodings($1::bigint)).stream_entries, n.nodes]
            || n.ms || n.seq || n.last_ms || n.last_seq || n.given || n.live END AS ints
   FROM (SELECT 1) one
   LEFT JOIN pgvs3.resp_keys k
     ON k.bucket_id = $1::bigint AND k.key = $2::text AND (k.expires_at IS NULL OR k.expires_at > pgvs3.resp_now())
   LEFT JOIN pgvs3.resp_stream s ON k.type = 'x' AND s.bucket_id = $1::bigint AND s.key = $2::text
   LEFT JOIN LATERAL (
        SELECT count(*) > $3::bigint AS too_large, count(*) AS nodes,
               array_agg(x.ms ORDER BY x.ms, x.seq) AS ms, array_agg(x.seq ORDER BY x.ms, x.seq) AS seq,
               array_agg(x.last_ms ORDER BY x.ms, x.seq) AS last_ms, array_agg(x.last_seq ORDER BY x.ms, x.seq) AS last_seq,
               array_agg(x.given ORDER BY x.ms, x.seq) AS given, array_agg(x.live ORDER BY x.ms, x.seq) AS live
          FROM (SELECT * FROM pgvs3.resp_stream_node
                 WHERE bucket_id = $1::bigint AND key = $2::text ORDER BY ms, seq LIMIT $3::bigint + 1) x) n
     ON s.key IS NOT NULL";

/// The halves of the least and the greatest ID, as stored.
const MIN: i64 = i64::MIN;
const MAX: i64 = i64::MAX;

/// An ID as stored: (ms, seq), each half with its sign bit flipped.
type Id = (i64, i64);

/// A node of entries (Redis's listpack in the stream's radix tree).
#[derive(Debug, Clone, PartialEq)]
struct Node {
    /// The ID of the entry it was made for.
    first: Id,
    /// The ID of the last entry it was given.
    last: Id,
    given: i64,
    live: i64,
}

impl Node {
    fn row(&self) -> StreamNode {
        StreamNode {
            last: self.last,
            given: self.given,
            live: self.live,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Stream {
    last: Id,
    length: i64,
    /// The bucket's `stream-node-max-entries` when loaded (0 or less: no bound).
    per_node: Option<i64>,
    /// Oldest first; `None` when not known.
    nodes: Option<Vec<Node>>,
    changes: Changes,
}

/// What the run's writes changed of a stream since it was last written to the database (or
/// loaded), so that they go as one set-based write (`pgvs3.resp_stream_apply`) rather than as
/// the calls: the last ID and length then, the entries added since (with their fields and
/// values), the greatest last ID of a node removed whole, and each node touched as it was.
#[derive(Debug, Clone, Default, PartialEq)]
struct Changes {
    found: (Id, i64),
    added: Vec<(Id, Vec<Bytes>)>,
    went: Option<Id>,
    touched: BTreeMap<Id, Option<Node>>,
}

impl Changes {
    /// A write is about to change or remove `node`.
    fn touching(&mut self, node: &Node) {
        self.touched.entry(node.first).or_insert_with(|| Some(node.clone()));
    }
}

impl Stream {
    /// The stream a load answered; `None` when its ints are not a stream's (see [`LOAD`]).
    pub fn from_loaded(loaded: Loaded) -> Option<Stream> {
        let [last_ms, last_seq, length, per_node, count, ref columns @ ..] = loaded.ints[..] else {
            return None;
        };
        let count = usize::try_from(count).ok()?;
        if columns.len() != count.checked_mul(6)? || length < 0 {
            return None;
        }
        let column = |i: usize| &columns[i * count..(i + 1) * count];
        let nodes: Vec<Node> = (0..count)
            .map(|j| Node {
                first: (column(0)[j], column(1)[j]),
                last: (column(2)[j], column(3)[j]),
                given: column(4)[j],
                live: column(5)[j],
            })
            .collect();
        let ordered = nodes.windows(2).all(|pair| pair[0].first < pair[1].first);
        let held: Option<i64> = nodes.iter().try_fold(0i64, |sum, node| sum.checked_add(node.live));
        if !ordered || held != Some(length) || nodes.iter().any(|node| node.live < 0 || node.given < node.live) {
            return None;
        }
        Some(Stream::new((last_ms, last_seq), length, Some(per_node), Some(nodes)))
    }

    fn new(last: Id, length: i64, per_node: Option<i64>, nodes: Option<Vec<Node>>) -> Stream {
        Stream {
            last,
            length,
            per_node,
            nodes,
            changes: Changes {
                found: (last, length),
                ..Changes::default()
            },
        }
    }

    /// The set-based write of what the run changed (see [`Changes`]), the stream having existed
    /// (`existed`) when the changes began; `None` when its nodes are not known, and then the
    /// calls go instead. The record starts over either way: the database has them once sent.
    pub fn write(&mut self, key: &str, existed: bool) -> Option<StreamWrite> {
        let changes = std::mem::take(&mut self.changes);
        self.changes.found = (self.last, self.length);
        let nodes = self.nodes.as_ref()?;
        let added = changes.added.len();
        // Trims remove the oldest entries: those added that are left are the newest.
        let kept = added.min(usize::try_from(self.length).ok()?);
        let went = changes.added[..added - kept]
            .last()
            .map(|(id, _)| *id)
            .into_iter()
            .chain(changes.went)
            .max();
        let touched = changes
            .touched
            .into_iter()
            .filter_map(|(first, was)| {
                let now = nodes
                    .binary_search_by_key(&first, |node| node.first)
                    .ok()
                    .map(|at| nodes[at].row());
                let was = was.map(|node| node.row());
                (was != now).then_some((first, was, now))
            })
            .collect();
        Some(StreamWrite {
            key: key.to_owned(),
            existed,
            found: changes.found,
            left: (self.last, self.length),
            added: added as i64,
            went,
            entries: changes.added.into_iter().skip(added - kept).collect(),
            nodes: touched,
            node_size: self.per_node,
        })
    }

    /// The record of changes starts over (the calls went instead).
    pub fn clear(&mut self) {
        self.changes = Changes {
            found: (self.last, self.length),
            ..Changes::default()
        };
    }

    /// Whether its node size is known (it was loaded).
    pub fn sized(&self) -> bool {
        self.per_node.is_some()
    }

    pub fn bytes(&self) -> usize {
        64 + 48 * self.nodes.as_ref().map_or(0, Vec::len)
    }

    /// Gives the entry of ID `id`, just added, to the nodes, as `pgvs3.resp_stream_append_nodes`
    /// does: to the last node until it was given the node size, else to a new node. Without
    /// the node size, the nodes are no longer known.
    fn append(&mut self, id: Id) {
        let per_node = self.per_node;
        let changes = &mut self.changes;
        self.nodes = self.nodes.take().and_then(|mut nodes| {
            let fresh = Node {
                first: id,
                last: id,
                given: 1,
                live: 1,
            };
            match nodes.last_mut() {
                Some(tail) if tail.first >= id => return None,
                Some(tail) if per_node? <= 0 || tail.given < per_node? => {
                    changes.touching(tail);
                    // (A loaded count near a bigint's end: then unknown, never a panic.)
                    tail.live = tail.live.checked_add(1)?;
                    tail.given = tail.given.checked_add(1)?;
                    tail.last = id;
                }
                _ => {
                    changes.touched.insert(id, None);
                    nodes.push(fresh);
                }
            }
            Some(nodes)
        });
    }

    /// How many entries `pgvs3.resp_stream_trim` removes, and their removal; `None` when that is
    /// not known. `threshold`: a length (MAXLEN), or an ID (MINID, `by_id`).
    fn trim(&mut self, by_id: bool, threshold: Id, most: Option<i64>, approx: bool) -> Option<i64> {
        if !by_id && self.length <= threshold.0 {
            return Some(0);
        }
        let most = match (approx, most) {
            (true, None) => Some(match self.per_node? {
                per_node if per_node <= 0 => 10_000,
                per_node => 100 * per_node.min(10_000),
            }),
            (_, most) => most,
        };
        let nodes = self.nodes.as_mut()?;
        let mut removed = 0i64;
        while let Some(node) = nodes.first_mut() {
            if !by_id && self.length <= threshold.0 || most.is_some_and(|most| most > 0 && removed + node.live > most) {
                break;
            }
            let whole = match by_id {
                true => node.last < threshold,
                false => self.length - node.live >= threshold.0,
            };
            if whole {
                self.changes.touching(node);
                self.changes.went = self.changes.went.max(Some(node.last));
                self.length -= node.live;
                removed += node.live;
                nodes.remove(0);
                continue;
            }
            if approx {
                break;
            }
            // An exact trim's part of the next node: its oldest entries beyond the length, or
            // those below the ID, whose IDs are not held (unless the node starts at it).
            let gone = match by_id {
                true if node.first >= threshold => 0,
                true => return None,
                false => self.length.saturating_sub(threshold.0).clamp(0, node.live),
            };
            self.changes.touching(node);
            node.live -= gone;
            self.length -= gone;
            removed += gone;
            break;
        }
        Some(removed)
    }
}

/// A trimming as XADD's and XTRIM's ints carry it: {by ID (1) or length (0), plus 2 for `~`;
/// threshold; threshold's seq; most}.
struct Trim {
    by_id: bool,
    approx: bool,
    threshold: Id,
    most: Option<i64>,
}

impl Trim {
    fn of(ints: &[Option<i64>]) -> Option<Trim> {
        let [Some(kind), Some(threshold), threshold_seq, most] = ints[..] else {
            return None;
        };
        if !(0..=3).contains(&kind) {
            return None;
        }
        let by_id = kind % 2 == 1;
        Some(Trim {
            by_id,
            approx: kind >= 2,
            threshold: (threshold, if by_id { threshold_seq? } else { 0 }),
            most,
        })
    }
}

/// The 16 bytes of an ID in a reply (`pgvs3.resp_stream_id`).
fn id_bytes((ms, seq): Id) -> Bytes {
    let mut bytes = Vec::with_capacity(16);
    bytes.extend_from_slice(&ms.to_be_bytes());
    bytes.extend_from_slice(&seq.to_be_bytes());
    Bytes::from(bytes)
}

/// The ID XADD gives its entry after `last` (`pgvs3.resp_stream_next_id`): `mode` 0 is `*`,
/// by the clock `now`; 1 is `<ms>-*`; 2 is `(ms, seq)`. `None` when it is too small.
fn next_id(mode: i64, ms: Option<i64>, seq: Option<i64>, last: Id, now: SystemTime) -> Option<Id> {
    match mode {
        0 => {
            let now_ms = i64::try_from(now.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()?;
            let now_ms = now_ms.wrapping_add(MIN);
            if now_ms > last.0 {
                Some((now_ms, MIN))
            } else if last.1 == MAX {
                Some((last.0.checked_add(1)?, MIN))
            } else {
                Some((last.0, last.1 + 1))
            }
        }
        1 => {
            let ms = ms?;
            if ms > last.0 {
                Some((ms, MIN))
            } else if ms == last.0 && last.1 < MAX {
                Some((ms, last.1 + 1))
            } else {
                None
            }
        }
        2 => Some((ms?, seq?)).filter(|id| *id > last),
        _ => None,
    }
}

/// The row of a call on a stream (see [`super::predict`]). `now`: the clock XADD's `*` reads.
pub fn predict(call: &TypedCall, known: &mut Known, now: SystemTime) -> Option<TypedRow> {
    let [key] = &call.keys[..] else {
        return None;
    };
    let slot = known.get_mut(key)?;
    let stream = match slot {
        None => None,
        Some(Value::Stream(stream)) => Some(stream),
        Some(_) => return None,
    };
    let answer = match call.op() {
        "xlen" => row(Some(stream.map_or(0, |stream| stream.length)), Vec::new(), Vec::new()),
        "xtrim" => {
            let trim = Trim::of(&call.ints)?;
            let Some(stream) = stream else {
                return Some(row(Some(0), Vec::new(), Vec::new()));
            };
            let mut trimmed = stream.clone();
            let removed = trimmed.trim(trim.by_id, trim.threshold, trim.most, trim.approx)?;
            *stream = trimmed;
            row(Some(removed), Vec::new(), Vec::new())
        }
        "xadd" => {
            // Eight ints; a run of XADDs coalesced into one call has more.
            let [Some(nomkstream), Some(mode), ms, seq, ref trimming @ ..] = call.ints[..] else {
                return None;
            };
            if trimming.len() != 4 || call.args.is_empty() {
                return None;
            }
            let trim = match trimming[0] {
                Some(_) => Some(Trim::of(trimming)?),
                None => None,
            };
            let mut added = match stream {
                Some(stream) if stream.last == (MAX, MAX) => return None,
                Some(stream) => stream.clone(),
                None if nomkstream == 1 => return Some(row(None, vec![None], Vec::new())),
                None => Stream::new((MIN, MIN), 0, None, Some(Vec::new())),
            };
            let id = next_id(mode, ms, seq, added.last, now)?;
            added.last = id;
            added.length = added.length.checked_add(1)?;
            added.append(id);
            added.changes.added.push((id, call.args.clone()));
            let scores = match trim {
                // Its command's share of the trim (the function's `share`): all it removed,
                // within the most (LEAST passes over a NULL most), and never below 0.
                Some(trim) => {
                    let removed = added.trim(trim.by_id, trim.threshold, trim.most, trim.approx)?;
                    vec![Some(trim.most.map_or(removed, |most| removed.min(most)).max(0) as f64)]
                }
                None => Vec::new(),
            };
            let items = vec![Some(id_bytes(id))];
            if !within_limit(call, &items) {
                return None;
            }
            let answer = row(None, items, scores);
            *slot = Some(Value::Stream(added));
            answer
        }
        _ => return None,
    };
    Some(answer)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::zset::tests::call;
    use super::*;

    fn half(half: u64) -> i64 {
        (half ^ (1 << 63)) as i64
    }

    fn id(ms: u64, seq: u64) -> Id {
        (half(ms), half(seq))
    }

    /// The clock at `ms` and some microseconds, which an ID's milliseconds drop.
    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(ms * 1000 + 999)
    }

    fn node(first: Id, last: Id, given: i64, live: i64) -> Node {
        Node {
            first,
            last,
            given,
            live,
        }
    }

    /// A stream as loaded: its last ID, node size, and nodes.
    fn stream(last: Id, per_node: i64, nodes: &[Node]) -> Option<Value> {
        let length = nodes.iter().map(|node| node.live).sum();
        let mut ints = vec![last.0, last.1, length, per_node, nodes.len() as i64];
        let columns: [fn(&Node) -> i64; 6] = [
            |node| node.first.0,
            |node| node.first.1,
            |node| node.last.0,
            |node| node.last.1,
            |node| node.given,
            |node| node.live,
        ];
        for column in columns {
            ints.extend(nodes.iter().map(column));
        }
        let loaded = Loaded {
            present: true,
            ints,
            ..Loaded::default()
        };
        Stream::from_loaded(loaded).map(Value::Stream)
    }

    fn held(known: &Known) -> &Stream {
        match &known["k"] {
            Some(Value::Stream(stream)) => stream,
            other => panic!("not a stream: {other:?}"),
        }
    }

    /// XADD's ID, and its trim's count when it has one.
    fn added(row: Option<TypedRow>) -> (Id, Option<f64>) {
        let row = row.expect("predicted");
        assert_eq!(row.n, None);
        let [Some(item)] = &row.items[..] else {
            panic!("one ID: {row:?}");
        };
        let both = |range: std::ops::Range<usize>| i64::from_be_bytes(item[range].try_into().expect("8 bytes"));
        assert_eq!(item.len(), 16);
        let trimmed = match &row.scores[..] {
            [] => None,
            [Some(trimmed)] => Some(*trimmed),
            other => panic!("scores {other:?}"),
        };
        ((both(0..8), both(8..16)), trimmed)
    }

    fn n(row: Option<TypedRow>) -> i64 {
        let row = row.expect("predicted");
        assert!(row.items.is_empty() && row.scores.is_empty(), "{row:?}");
        row.n.expect("a count")
    }

    #[test]
    fn xadd_star_takes_the_clock_then_counts_up_after_the_last_id() {
        let mut known = Known::from([("k".to_owned(), None)]);
        assert_eq!(
            added(predict(&call("XADD k * f v"), &mut known, at(1000))),
            (id(1000, 0), None)
        );
        assert_eq!(
            added(predict(&call("XADD k * f v"), &mut known, at(1000))),
            (id(1000, 1), None)
        );
        assert_eq!(
            added(predict(&call("XADD k * f v"), &mut known, at(2000))),
            (id(2000, 0), None)
        );
        // A clock behind the last ID: the next sequence number.
        assert_eq!(
            added(predict(&call("XADD k * f v"), &mut known, at(1500))),
            (id(2000, 1), None)
        );
        assert_eq!(n(predict(&call("XLEN k"), &mut known, at(0))), 4);
        let mut full_seq = Known::from([(
            "k".to_owned(),
            stream(id(10, u64::MAX), 100, &[node(id(10, 0), id(10, u64::MAX), 1, 1)]),
        )]);
        assert_eq!(
            added(predict(&call("XADD k * f v"), &mut full_seq, at(10))).0,
            id(11, 0)
        );
    }

    #[test]
    fn xadd_with_ids_given_follows_them_or_is_not_predicted_when_too_small() {
        let mut known = Known::from([("k".to_owned(), stream(id(5, 5), 100, &[node(id(5, 5), id(5, 5), 1, 1)]))]);
        assert_eq!(added(predict(&call("XADD k 5-* f v"), &mut known, at(0))).0, id(5, 6));
        assert_eq!(added(predict(&call("XADD k 7-* f v"), &mut known, at(0))).0, id(7, 0));
        let before = held(&known).clone();
        for too_small in ["XADD k 7-0 f v", "XADD k 6-* f v", "XADD k 1 f v"] {
            assert!(predict(&call(too_small), &mut known, at(0)).is_none(), "{too_small}");
        }
        assert_eq!(held(&known), &before);
        assert_eq!(added(predict(&call("XADD k 8-3 f v"), &mut known, at(0))).0, id(8, 3));
        assert_eq!(held(&known).nodes, Some(vec![node(id(5, 5), id(8, 3), 4, 4)]));
        let mut exhausted = Known::from([("k".to_owned(), stream(id(u64::MAX, u64::MAX), 100, &[]))]);
        assert!(predict(&call("XADD k * f v"), &mut exhausted, at(0)).is_none());
    }

    #[test]
    fn xadd_nomkstream_on_an_absent_key_answers_nil_and_makes_nothing() {
        let mut known = Known::from([("k".to_owned(), None)]);
        let row = predict(&call("XADD k NOMKSTREAM MAXLEN 1 * f v"), &mut known, at(1)).expect("predicted");
        assert_eq!((row.n, row.items, row.scores), (None, vec![None], vec![]));
        assert!(known["k"].is_none());
        assert_eq!(n(predict(&call("XLEN k"), &mut known, at(0))), 0);
        assert_eq!(n(predict(&call("XTRIM k MAXLEN 0"), &mut known, at(0))), 0);
    }

    #[test]
    fn a_stream_made_here_trims_exactly_but_not_approximately_past_its_threshold() {
        let mut known = Known::from([("k".to_owned(), None)]);
        assert_eq!(
            added(predict(&call("XADD k MAXLEN ~ 10000 * f v"), &mut known, at(1))),
            (id(1, 0), Some(0.0))
        );
        // Its node size was never loaded: its second entry's node is not known.
        assert_eq!(
            added(predict(&call("XADD k MAXLEN 10000 * f v"), &mut known, at(1))),
            (id(1, 1), Some(0.0))
        );
        assert_eq!(held(&known).nodes, None);
        assert!(predict(&call("XTRIM k MAXLEN ~ 1"), &mut known, at(1)).is_none());
        assert!(predict(&call("XTRIM k MINID 0-1"), &mut known, at(1)).is_none());
        assert_eq!(n(predict(&call("XTRIM k MAXLEN 2"), &mut known, at(1))), 0);
        // A new stream's first node is known: an exact MAXLEN 0 removes it, and the stream stays.
        let mut fresh = Known::from([("k".to_owned(), None)]);
        assert_eq!(
            added(predict(&call("XADD k MAXLEN 0 * f v"), &mut fresh, at(3))),
            (id(3, 0), Some(1.0))
        );
        assert_eq!((held(&fresh).length, held(&fresh).nodes.clone()), (0, Some(vec![])));
        assert!(predict(&call("XADD k MAXLEN ~ 0 * f v"), &mut fresh, at(3)).is_none());
    }

    /// Nodes of at most 3: A (3 entries), B (2 of 3 left), C (1).
    fn three_nodes() -> Known {
        let nodes = [
            node(id(1, 0), id(1, 2), 3, 3),
            node(id(2, 0), id(2, 2), 3, 2),
            node(id(3, 0), id(3, 0), 1, 1),
        ];
        Known::from([("k".to_owned(), stream(id(3, 0), 3, &nodes))])
    }

    #[test]
    fn xtrim_removes_whole_nodes_approximately_and_part_of_one_exactly() {
        let cases: &[(&str, Option<i64>, i64)] = &[
            ("XTRIM k MAXLEN ~ 4", Some(0), 6),
            ("XTRIM k MAXLEN ~ 3", Some(3), 3),
            ("XTRIM k MAXLEN 4", Some(2), 4),
            ("XTRIM k MAXLEN ~ 1 LIMIT 3", Some(3), 3),
            ("XTRIM k MAXLEN ~ 1 LIMIT 2", Some(0), 6),
            ("XTRIM k MAXLEN ~ 0", Some(6), 0),
            ("XTRIM k MAXLEN 6", Some(0), 6),
            ("XTRIM k MINID ~ 2-1", Some(3), 3),
            ("XTRIM k MINID 2-0", Some(3), 3),
            ("XTRIM k MINID 4", Some(6), 0),
            // Part of node B is below it: which entries B holds is not known.
            ("XTRIM k MINID 2-1", None, 6),
        ];
        for (line, removed, length) in cases {
            let mut known = three_nodes();
            let row = predict(&call(line), &mut known, at(0));
            assert_eq!(row.map(|row| n(Some(row))), *removed, "{line}");
            assert_eq!(held(&known).length, *length, "{line}");
        }
        let mut known = three_nodes();
        n(predict(&call("XTRIM k MAXLEN 4"), &mut known, at(0)));
        assert_eq!(held(&known).nodes.as_ref().map(|nodes| nodes[0].live), Some(1));
    }

    #[test]
    fn xadd_fills_the_last_node_then_makes_one_and_its_trim_counts_whole_nodes() {
        let mut known = three_nodes();
        for (line, ms) in [("XADD k 4-* f v", 4), ("XADD k 5-* f v", 5), ("XADD k 6-* f v", 6)] {
            assert_eq!(added(predict(&call(line), &mut known, at(0))), (id(ms, 0), None));
        }
        let nodes = held(&known).nodes.clone().expect("known nodes");
        assert_eq!(nodes[2], node(id(3, 0), id(5, 0), 3, 3));
        assert_eq!(nodes[3], node(id(6, 0), id(6, 0), 1, 1));
        // 10 entries: A (3) and B (2) go, leaving 5.
        assert_eq!(
            added(predict(&call("XADD k MAXLEN ~ 5 7-* f v"), &mut known, at(0))),
            (id(7, 0), Some(5.0))
        );
        assert_eq!(n(predict(&call("XLEN k"), &mut known, at(0))), 5);
        // C (3) is past the LIMIT.
        assert_eq!(
            added(predict(&call("XADD k MAXLEN ~ 5 LIMIT 2 8-* f v"), &mut known, at(0))).1,
            Some(0.0)
        );
        // LIMIT 0 trims without a limit, but the function's share of it is at most 0.
        assert_eq!(
            added(predict(&call("XADD k MAXLEN ~ 1 LIMIT 0 9-* f v"), &mut known, at(0))).1,
            Some(0.0)
        );
        assert_eq!(n(predict(&call("XLEN k"), &mut known, at(0))), 1);
    }

    fn held_mut(known: &mut Known) -> &mut Stream {
        match known.get_mut("k") {
            Some(Some(Value::Stream(stream))) => stream,
            other => panic!("not a stream: {other:?}"),
        }
    }

    fn row(last: Id, given: i64, live: i64) -> StreamNode {
        StreamNode { last, given, live }
    }

    #[test]
    fn a_runs_write_holds_the_nodes_it_touched_the_entries_left_and_what_went() {
        let mut known = three_nodes();
        for line in ["XADD k 4-* f v", "XADD k 5-* f v g w", "XTRIM k MAXLEN 4", "XLEN k"] {
            predict(&call(line), &mut known, at(0)).expect(line);
        }
        let write = held_mut(&mut known).write("k", true).expect("nodes known");
        assert_eq!((write.found, write.left), ((id(3, 0), 6), (id(5, 0), 4)));
        assert_eq!((write.added, write.went), (2, Some(id(1, 2))));
        let fields = |words: &[&str]| {
            words
                .iter()
                .map(|word| Bytes::from(word.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            write.entries,
            vec![
                (id(4, 0), fields(&["f", "v"])),
                (id(5, 0), fields(&["f", "v", "g", "w"]))
            ]
        );
        // A went whole, B lost one entry of its two, C was given two: nodes untouched are not
        // sent, and the write holds them in ID order.
        assert_eq!(
            write.nodes,
            vec![
                (id(1, 0), Some(row(id(1, 2), 3, 3)), None),
                (id(2, 0), Some(row(id(2, 2), 3, 2)), Some(row(id(2, 2), 3, 1))),
                (id(3, 0), Some(row(id(3, 0), 1, 1)), Some(row(id(5, 0), 3, 3))),
            ]
        );
        // The record starts over from what was written.
        let again = held_mut(&mut known).write("k", true).expect("nodes known");
        assert!(again.is_empty() && again.nodes.is_empty() && again.found == (id(5, 0), 4));
    }

    #[test]
    fn entries_added_and_trimmed_within_a_run_are_not_sent_and_the_last_one_went() {
        let mut known = three_nodes();
        for line in ["XADD k 7-* f v", "XADD k 8-* f v", "XADD k MAXLEN 0 9-* f v"] {
            predict(&call(line), &mut known, at(0)).expect(line);
        }
        let write = held_mut(&mut known).write("k", true).expect("nodes known");
        assert_eq!((write.added, write.left.1), (3, 0));
        assert!(write.entries.is_empty());
        assert_eq!(write.went, Some(id(9, 0)));
        // The node made for 9-0 was made and removed: not sent.
        assert_eq!(write.nodes.len(), 3);
        assert!(write.nodes.iter().all(|(_, _, now)| now.is_none()));
        // A stream made here loses its nodes at its second entry: its calls go instead.
        let mut fresh = Known::from([("k".to_owned(), None)]);
        predict(&call("XADD k * f v"), &mut fresh, at(1)).expect("predicted");
        assert!(held_mut(&mut fresh).write("k", false).is_some());
        predict(&call("XADD k * f v"), &mut fresh, at(1)).expect("predicted");
        assert!(held_mut(&mut fresh).write("k", false).is_none());
    }

    #[test]
    fn unknown_keys_other_types_and_coalesced_adds_are_not_predicted() {
        let mut unknown = Known::new();
        assert!(predict(&call("XLEN k"), &mut unknown, at(0)).is_none());
        let mut other = Known::from([("k".to_owned(), None)]);
        super::super::zset::predict(&call("ZADD k 1 a"), &mut other);
        assert!(predict(&call("XADD k * f v"), &mut other, at(0)).is_none());
        let mut known = three_nodes();
        let mut coalesced = call("XADD k * f v");
        coalesced.ints.push(Some(2));
        assert!(predict(&coalesced, &mut known, at(0)).is_none());
        assert!(predict(&call("XRANGE k - +"), &mut known, at(0)).is_none());
        assert!(predict(&call("XDEL k 1-0"), &mut known, at(0)).is_none());
    }

    #[test]
    fn loads_that_no_stream_answers_are_refused() {
        let load = |ints: Vec<i64>| {
            Stream::from_loaded(Loaded {
                present: true,
                ints,
                ..Loaded::default()
            })
        };
        assert!(load(vec![]).is_none());
        assert!(load(vec![0, 0, 0, 100]).is_none());
        assert!(load(vec![0, 0, 0, 100, -1]).is_none());
        assert!(load(vec![0, 0, 1, 100, 1, 0, 0, 0, 0, 1]).is_none());
        // A length the nodes do not hold.
        assert!(load(vec![0, 0, 2, 100, 1, 0, 0, 0, 0, 1, 1]).is_none());
        // Nodes out of order.
        assert!(load(vec![0, 0, 2, 100, 2, 5, 1, 0, 0, 5, 1, 0, 0, 1, 1, 1, 1]).is_none());
        assert!(load(vec![0, 0, 2, 100, 2, 1, 5, 0, 0, 1, 5, 0, 0, 1, 1, 1, 1]).is_some());
        assert!(load(vec![0, 0, i64::MAX, 100, i64::MAX]).is_none());
    }

    #[test]
    fn counts_at_a_bigints_end_leave_the_nodes_unknown_and_never_panic() {
        let full = [node(id(1, 0), id(1, 0), i64::MAX, 1)];
        let mut known = Known::from([("k".to_owned(), stream(id(1, 0), 0, &full))]);
        assert_eq!(added(predict(&call("XADD k * f v"), &mut known, at(0))).0, id(1, 1));
        assert_eq!((held(&known).length, held(&known).nodes.clone()), (2, None));
        let long = Loaded {
            present: true,
            ints: vec![0, 0, i64::MAX, 0, 1, 0, 0, 0, 0, i64::MAX, i64::MAX],
            ..Loaded::default()
        };
        let mut known = Known::from([("k".to_owned(), Stream::from_loaded(long).map(Value::Stream))]);
        assert!(predict(&call("XADD k * f v"), &mut known, at(0)).is_none());
    }
}
