//! The working set's sorted sets: what a zset key holds, and the calls on it predicted, each as
//! `pgvs3.resp_zset` (gateway/migrations/functions/resp_zset.sql) answers it.
//!
//! Order is the function's: by score as PostgreSQL's float8 sorts (-0 equals 0; a zset never
//! holds NaN), then by member bytes (bytea's order, which is the slices' order in Rust).

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

use bytes::Bytes;

use super::changes::Changes;
use super::{Known, Value, within_limit};
use crate::resp::commands::zset::Range;
use crate::store::{Loaded, TypedCall, TypedRow, ZsetWrite};

/// Loads a zset key (see [`Loaded`]): its members in `items`, their scores in `scores`.
/// `present` judges the key's liveness as `pgvs3.resp_type` does; a key of another type is
/// present with no elements, which [`Zset::from_loaded`] refuses.
pub const LOAD: &str = "SELECT k.key IS NOT NULL AS present, coalesce(z.too_large, false) AS too_large,
        CASE WHEN NOT z.too_large THEN z.items END AS items, NULL::bytea[] AS vals,
        CASE WHEN NOT z.too_large THEN z.scores END AS scores, NULL::int8[] AS ints
   FROM (SELECT 1) one
   LEFT JOIN pgvs3.resp_keys k
     ON k.bucket_id = $1::bigint AND k.key = $2::text AND (k.expires_at IS NULL OR k.expires_at > pgvs3.resp_now())
   LEFT JOIN LATERAL (
        SELECT count(*) > $3::bigint AS too_large, array_agg(e.member) AS items, array_agg(e.score) AS scores
          FROM (SELECT member, score FROM pgvs3.resp_zset
                 WHERE bucket_id = $1::bigint AND key = $2::text LIMIT $3::bigint + 1) e) z ON k.type = 'z'";

/// Bytes a member takes besides its own: its score, twice its handle, the two maps' nodes.
const MEMBER_OVERHEAD: usize = 96;

/// A score in the order PostgreSQL's float8 sorts: -0 equals 0 (NaN is never held).
#[derive(Debug, Clone, Copy)]
struct Score(f64);

impl Ord for Score {
    fn cmp(&self, other: &Score) -> Ordering {
        self.0.partial_cmp(&other.0).unwrap_or(Ordering::Equal)
    }
}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Score) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Score {
    fn eq(&self, other: &Score) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Score {}

#[derive(Debug, Clone, Default)]
pub struct Zset {
    scores: HashMap<Bytes, f64>,
    order: BTreeSet<(Score, Bytes)>,
    member_bytes: usize,
    /// What the run's writes changed since the value was last written to the database.
    changes: Changes<f64>,
}

impl Zset {
    /// The zset a load answered; `None` when it holds nothing or what no zset holds (members
    /// and scores of different counts, a NaN score, a member twice).
    pub fn from_loaded(loaded: Loaded) -> Option<Zset> {
        if loaded.items.is_empty() || loaded.items.len() != loaded.scores.len() {
            return None;
        }
        let mut zset = Zset::default();
        for (member, score) in loaded.items.into_iter().zip(loaded.scores) {
            if score.is_nan() || zset.scores.contains_key(&member) {
                return None;
            }
            zset.set(member, score);
        }
        zset.changes.clear();
        Some(zset)
    }

    pub fn changes(&mut self) -> &mut Changes<f64> {
        &mut self.changes
    }

    /// The set-based write of what the run changed since its last round trip (see [`Changes`]).
    pub fn write(&mut self, start: ZsetWrite) -> ZsetWrite {
        let scores = &self.scores;
        self.changes
            .write(start, |member| scores.get(member).map(|&score| (0, score)))
    }

    pub fn bytes(&self) -> usize {
        self.member_bytes + MEMBER_OVERHEAD * self.scores.len()
    }

    fn len(&self) -> usize {
        self.scores.len()
    }

    fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }

    fn set(&mut self, member: Bytes, score: f64) {
        self.changes.setting(&member, self.scores.get(&member));
        if let Some(old) = self.scores.insert(member.clone(), score) {
            self.order.remove(&(Score(old), member.clone()));
        } else {
            self.member_bytes += member.len();
            self.changes.grew(self.scores.len(), [member.len()]);
        }
        self.order.insert((Score(score), member));
    }

    fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove_entry(member) {
            Some((member, score)) => {
                self.changes.removing(&member, &score);
                self.member_bytes -= member.len();
                self.order.remove(&(Score(score), member));
                true
            }
            None => false,
        }
    }

    /// The members in order, or (`rev`) the reverse.
    fn ordered(&self, rev: bool) -> Box<dyn Iterator<Item = &(Score, Bytes)> + '_> {
        match rev {
            true => Box::new(self.order.iter().rev()),
            false => Box::new(self.order.iter()),
        }
    }

    /// The members of `range` with their scores, in its order, as `pgvs3.resp_zrange` selects
    /// them; `None` where its arithmetic would overflow (the function would raise).
    fn select(&self, range: &Range) -> Option<Vec<(Bytes, f64)>> {
        let picked = |(score, member): &(Score, Bytes)| (member.clone(), score.0);
        if range.mode == 0 {
            let total = i64::try_from(self.len()).ok()?;
            let (mut first, mut last) = (range.start, range.stop);
            if first < 0 {
                first += total;
            }
            if last < 0 {
                last += total;
            }
            let first = first.max(0);
            if first > last {
                return Some(Vec::new());
            }
            let take = last.checked_sub(first)?.checked_add(1)?;
            return Some(
                self.ordered(range.rev)
                    .skip(to_usize(first))
                    .take(to_usize(take))
                    .map(picked)
                    .collect(),
            );
        }
        if range.offset < 0 {
            return Some(Vec::new());
        }
        let take = match range.count {
            count if count < 0 => usize::MAX,
            count => to_usize(count),
        };
        Some(
            self.ordered(range.rev)
                .filter(|(score, member)| range.holds(score.0, member))
                .skip(to_usize(range.offset))
                .take(take)
                .map(picked)
                .collect(),
        )
    }

    /// The rank of `member` (of score `score`): how many come before it, or (`rev`) after it.
    fn rank(&self, member: &Bytes, score: f64, rev: bool) -> usize {
        let at = (Score(score), member.clone());
        match rev {
            true => self.order.range((Bound::Excluded(at), Bound::Unbounded)).count(),
            false => self.order.range(..at).count(),
        }
    }
}

fn to_usize(n: i64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

// The range's judgements of members, as the function's filters and orders make them.
impl Range {
    /// Whether a member of a score or lex range is within it (the function's filters).
    fn holds(&self, score: f64, member: &[u8]) -> bool {
        if self.mode == 1 {
            return score >= self.min
                && score <= self.max
                && (self.min_kind == 0 || score > self.min)
                && (self.max_kind == 0 || score < self.max);
        }
        let [min, max] = &self.lex;
        (self.min_kind == 2 || member > &min[..] || self.min_kind == 0 && member == &min[..])
            && self.min_kind != 3
            && (self.max_kind == 3 || member < &max[..] || self.max_kind == 0 && member == &max[..])
            && self.max_kind != 2
    }
}

pub(super) fn row(n: Option<i64>, items: Vec<Option<Bytes>>, scores: Vec<Option<f64>>) -> TypedRow {
    TypedRow {
        err: None,
        n,
        items,
        scores,
        cut: None,
    }
}

fn count(n: usize) -> Option<TypedRow> {
    Some(row(Some(i64::try_from(n).ok()?), Vec::new(), Vec::new()))
}

/// The row of a call on a zset (see [`super::predict`]).
pub fn predict(call: &TypedCall, known: &mut Known) -> Option<TypedRow> {
    let [key] = &call.keys[..] else {
        return None;
    };
    let slot = known.get_mut(key)?;
    if slot.as_ref().is_some_and(|value| !matches!(value, Value::Zset(_))) {
        return None;
    }
    let read = slot_zset_ref(slot);
    match call.op() {
        "zadd" | "zincrby" => zadd(call, slot),
        "zrem" => {
            if !call.ints.is_empty() {
                // The form whose items list the removed members in the order of a DELETE's
                // RETURNING, which nothing fixes.
                return None;
            }
            let mut removed = 0;
            if let Some(zset) = slot_zset(slot) {
                for member in &call.args {
                    removed += usize::from(zset.remove(member));
                }
            }
            settle(slot);
            count(removed)
        }
        "zscore" => {
            let [member] = &call.args[..] else {
                return None;
            };
            Some(row(None, Vec::new(), vec![read.and_then(|zset| zset.score(member))]))
        }
        "zmscore" => {
            // Its scores as long a reply as the members asked for would be, at most.
            if call.args.is_empty() || !within_limit(call, &vec![None; call.args.len()]) {
                return None;
            }
            let scores = call.args.iter().map(|member| read.and_then(|zset| zset.score(member)));
            Some(row(None, Vec::new(), scores.collect()))
        }
        "zcard" => count(read.map_or(0, Zset::len)),
        "zrank" | "zrevrank" => {
            let [member] = &call.args[..] else {
                return None;
            };
            let Some((zset, score)) = read.and_then(|zset| Some((zset, zset.score(member)?))) else {
                return Some(row(None, Vec::new(), Vec::new()));
            };
            let rank = zset.rank(member, score, call.op() == "zrevrank");
            Some(row(Some(i64::try_from(rank).ok()?), Vec::new(), vec![Some(score)]))
        }
        "zrange" | "zcount" | "zlexcount" | "zremrangebyrank" | "zremrangebyscore" | "zremrangebylex" => {
            let range = Range::of(call)?;
            let selected = match read {
                Some(zset) => zset.select(&range)?,
                None => Vec::new(),
            };
            match call.op() {
                "zrange" => members(call, selected),
                "zcount" | "zlexcount" => count(selected.len()),
                _ => {
                    if let Some(zset) = slot_zset(slot) {
                        for (member, _) in &selected {
                            zset.remove(member);
                        }
                    }
                    settle(slot);
                    count(selected.len())
                }
            }
        }
        "zpopmin" | "zpopmax" => {
            let [Some(wanted)] = call.ints[..] else {
                return None;
            };
            let popped: Vec<(Bytes, f64)> = match read {
                Some(zset) if wanted > 0 => zset
                    .ordered(call.op() == "zpopmax")
                    .take(to_usize(wanted))
                    .map(|(score, member)| (member.clone(), score.0))
                    .collect(),
                _ => Vec::new(),
            };
            let answer = members(call, popped.clone())?;
            if let Some(zset) = slot_zset(slot) {
                for (member, _) in &popped {
                    zset.remove(member);
                }
            }
            settle(slot);
            Some(answer)
        }
        _ => None,
    }
}

/// The row of members and their scores, when surely within the call's reply limit.
fn members(call: &TypedCall, selected: Vec<(Bytes, f64)>) -> Option<TypedRow> {
    let (items, scores): (Vec<_>, Vec<_>) = selected
        .into_iter()
        .map(|(member, score)| (Some(member), Some(score)))
        .unzip();
    within_limit(call, &items).then(|| row(None, items, scores))
}

fn slot_zset(slot: &mut Option<Value>) -> Option<&mut Zset> {
    match slot {
        Some(Value::Zset(zset)) => Some(zset),
        _ => None,
    }
}

/// A write removed members: an emptied zset is deleted (`pgvs3.resp_settle`).
fn settle(slot: &mut Option<Value>) {
    if slot_zset(slot).is_some_and(|zset| zset.len() == 0) {
        *slot = None;
    }
}

/// ZADD and ZINCRBY: ints {nx, xx, gt, lt, ch, incr}, the members in args, their scores (the
/// increment) in floats. The batched form (a seventh int) is not predicted.
fn zadd(call: &TypedCall, slot: &mut Option<Value>) -> Option<TypedRow> {
    let flags: Vec<bool> = call
        .ints
        .iter()
        .map(|flag| match flag {
            Some(0) => Some(false),
            Some(1) => Some(true),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let [nx, xx, gt, lt, ch, incr] = flags[..] else {
        return None;
    };
    if call.args.is_empty() || call.args.len() != call.floats.len() || call.floats.iter().any(|s| s.is_nan()) {
        return None;
    }
    let current = |member: &[u8]| slot_zset_ref(slot).and_then(|zset| zset.score(member));
    if incr {
        let ([member], [by]) = (&call.args[..], &call.floats[..]) else {
            return None;
        };
        let cur = current(member);
        let stopped = row(None, Vec::new(), vec![None]);
        if cur.is_none() && xx || cur.is_some() && nx {
            return Some(stopped);
        }
        let new = cur.map_or(*by, |cur| cur + by);
        if new.is_nan() {
            return None;
        }
        if cur.is_some_and(|cur| gt && new <= cur || lt && new >= cur) {
            return Some(stopped);
        }
        if cur == Some(new) {
            return Some(row(None, Vec::new(), vec![Some(new)]));
        }
        let n = i64::from(cur.is_none()) + i64::from(ch && cur.is_some());
        add(slot, vec![(member.clone(), new)]);
        return Some(row(Some(n), Vec::new(), vec![Some(new)]));
    }
    // Each pair as the function's window over the pairs judges it: `before` is the score the
    // earlier pairs of its member left (under GT or LT the highest or lowest of them and the
    // member's score), whether those pairs applied or not.
    struct Earlier {
        last: f64,
        max: f64,
        min: f64,
    }
    let mut earlier: HashMap<&Bytes, Earlier> = HashMap::new();
    let mut last_applied: HashMap<&Bytes, f64> = HashMap::new();
    let (mut added, mut changed) = (0i64, 0i64);
    for (member, &s) in call.args.iter().zip(&call.floats) {
        let was = current(member);
        let seen = earlier.get(member);
        let before = if gt {
            max_of(was, seen.map(|e| e.max))
        } else if lt {
            min_of(was, seen.map(|e| e.min))
        } else {
            seen.map(|e| e.last).or(was)
        };
        let adds = before.is_none() && !xx;
        let changes = before.is_some_and(|before| {
            !nx && (was.is_some() || !xx) && (!gt || s > before) && (!lt || s < before) && s != before
        });
        added += i64::from(adds);
        changed += i64::from(changes);
        if adds || changes {
            last_applied.insert(member, s);
        }
        let entry = earlier.entry(member).or_insert(Earlier {
            last: s,
            max: s,
            min: s,
        });
        entry.last = s;
        entry.max = entry.max.max(s);
        entry.min = entry.min.min(s);
    }
    let n = added + if ch { changed } else { 0 };
    add(
        slot,
        last_applied
            .into_iter()
            .map(|(member, s)| (member.clone(), s))
            .collect(),
    );
    Some(row(Some(n), Vec::new(), Vec::new()))
}

fn slot_zset_ref(slot: &Option<Value>) -> Option<&Zset> {
    match slot {
        Some(Value::Zset(zset)) => Some(zset),
        _ => None,
    }
}

/// Sets members' scores, making the zset when it was absent.
fn add(slot: &mut Option<Value>, members: Vec<(Bytes, f64)>) {
    if members.is_empty() {
        return;
    }
    if slot.is_none() {
        *slot = Some(Value::Zset(Zset::default()));
    }
    if let Some(zset) = slot_zset(slot) {
        for (member, score) in members {
            zset.set(member, score);
        }
    }
}

/// SQL's `greatest` and `least`, which pass over NULLs.
fn max_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The call a command line parses into.
    pub(in crate::resp::working_set) fn call(line: &str) -> TypedCall {
        let args: Vec<Bytes> = line
            .split(' ')
            .map(|word| Bytes::copy_from_slice(word.as_bytes()))
            .collect();
        let name = line.split(' ').next().unwrap_or_default().to_ascii_lowercase();
        crate::resp::typed::parse(&name, &args)
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("{line} parses"))
            .call
    }

    fn known(key: &str, value: Option<Value>) -> Known {
        Known::from([(key.to_owned(), value)])
    }

    fn zset(pairs: &[(&str, f64)]) -> Option<Value> {
        let loaded = Loaded {
            present: true,
            items: pairs
                .iter()
                .map(|(member, _)| Bytes::copy_from_slice(member.as_bytes()))
                .collect(),
            scores: pairs.iter().map(|(_, score)| *score).collect(),
            ..Loaded::default()
        };
        Zset::from_loaded(loaded).map(Value::Zset)
    }

    /// The members and scores in order.
    fn held(known: &Known, key: &str) -> Option<Vec<(String, f64)>> {
        match known.get(key)? {
            Some(Value::Zset(zset)) => Some(
                zset.order
                    .iter()
                    .map(|(score, member)| (String::from_utf8_lossy(member).into_owned(), score.0))
                    .collect(),
            ),
            _ => None,
        }
    }

    fn n(row: Option<TypedRow>) -> Option<i64> {
        let row = row.expect("predicted");
        assert!(row.items.is_empty() && row.scores.is_empty(), "{row:?}");
        row.n
    }

    fn items(row: &TypedRow) -> Vec<String> {
        row.items
            .iter()
            .map(|item| String::from_utf8_lossy(item.as_deref().unwrap_or(b"(nil)")).into_owned())
            .collect()
    }

    /// A range's members and scores, checked to come as the function answers them (no n).
    fn ranged(row: Option<TypedRow>) -> (Vec<String>, Vec<f64>) {
        let row = row.expect("predicted");
        assert_eq!(row.n, None);
        let scores = row.scores.iter().map(|score| score.expect("a score")).collect();
        (items(&row), scores)
    }

    fn owned(pairs: &[(&str, f64)]) -> Vec<(String, f64)> {
        pairs
            .iter()
            .map(|(member, score)| ((*member).to_owned(), *score))
            .collect()
    }

    #[test]
    fn zadd_makes_the_key_and_counts_added_members_or_with_ch_changed_ones() {
        let mut known = known("k", None);
        assert_eq!(n(predict(&call("ZADD k 1 a 2 b"), &mut known)), Some(2));
        assert_eq!(n(predict(&call("ZADD k 1 a"), &mut known)), Some(0));
        assert_eq!(n(predict(&call("ZADD k 3 a 5 c"), &mut known)), Some(1));
        assert_eq!(n(predict(&call("ZADD k CH 4 a 5 c 0 d"), &mut known)), Some(2));
        assert_eq!(n(predict(&call("ZADD k NX 9 a 6 e"), &mut known)), Some(1));
        assert_eq!(n(predict(&call("ZADD k XX CH 7 e 8 f"), &mut known)), Some(1));
        assert_eq!(
            held(&known, "k"),
            Some(owned(&[("d", 0.0), ("b", 2.0), ("a", 4.0), ("c", 5.0), ("e", 7.0)]))
        );
        assert_eq!(n(predict(&call("ZCARD k"), &mut known)), Some(5));
    }

    #[test]
    fn zadd_xx_on_an_absent_key_leaves_it_absent() {
        let mut known = known("k", None);
        assert_eq!(n(predict(&call("ZADD k XX 1 a"), &mut known)), Some(0));
        assert!(matches!(known.get("k"), Some(None)));
    }

    #[test]
    fn zadd_pairs_of_one_member_apply_in_order_as_the_function_judges_them() {
        // GT: the member is added by its first pair, raised by the third; CH counts both.
        let mut known = known("k", None);
        assert_eq!(n(predict(&call("ZADD k GT CH 5 m 3 m 7 m"), &mut known)), Some(2));
        assert_eq!(held(&known, "k"), Some(owned(&[("m", 7.0)])));
        // LT against the score held and the pairs before: 6 is below 7, 2 below 6, 4 not below 2.
        assert_eq!(n(predict(&call("ZADD k LT CH 6 m 2 m 4 m"), &mut known)), Some(2));
        assert_eq!(held(&known, "k"), Some(owned(&[("m", 2.0)])));
        // Plain: each pair against the one before it; back to the first score still changes.
        assert_eq!(n(predict(&call("ZADD k CH 1 n 2 n 1 n"), &mut known)), Some(3));
        // NX: only the first pair of an absent member adds it.
        assert_eq!(n(predict(&call("ZADD k NX CH 8 o 9 o"), &mut known)), Some(1));
        // XX of an absent member: no pair applies, even after an earlier one.
        assert_eq!(n(predict(&call("ZADD k XX CH 8 p 9 p"), &mut known)), Some(0));
        assert_eq!(held(&known, "k"), Some(owned(&[("n", 1.0), ("m", 2.0), ("o", 8.0)])));
    }

    #[test]
    fn zadd_of_minus_zero_over_zero_changes_nothing_and_ties_with_it() {
        let mut known = known("k", zset(&[("a", 0.0)]));
        assert_eq!(n(predict(&call("ZADD k CH -0 a -0 b"), &mut known)), Some(1));
        // b's -0 ties with a's 0: by member, a first.
        let (members, scores) = ranged(predict(&call("ZRANGE k 0 -1 WITHSCORES"), &mut known));
        assert_eq!(members, ["a", "b"]);
        assert!(scores[0] == 0.0 && scores[0].is_sign_positive() && scores[1].is_sign_negative());
        assert_eq!(n(predict(&call("ZCOUNT k 0 0"), &mut known)), Some(2));
    }

    #[test]
    fn zincrby_and_zadd_incr_answer_the_new_score_or_nil_when_a_condition_stops_them() {
        let mut known = known("k", None);
        let row = predict(&call("ZINCRBY k 2.5 m"), &mut known).expect("predicted");
        assert_eq!((row.n, row.scores), (Some(1), vec![Some(2.5)]));
        let row = predict(&call("ZADD k INCR 1 m"), &mut known).expect("predicted");
        assert_eq!((row.n, row.scores), (Some(0), vec![Some(3.5)]));
        let row = predict(&call("ZADD k CH INCR 1 m"), &mut known).expect("predicted");
        assert_eq!((row.n, row.scores), (Some(1), vec![Some(4.5)]));
        // The same score: answered, but no count.
        let row = predict(&call("ZADD k CH INCR 0 m"), &mut known).expect("predicted");
        assert_eq!((row.n, row.scores), (None, vec![Some(4.5)]));
        for stopped in [
            "ZADD k NX INCR 1 m",
            "ZADD k XX INCR 1 absent",
            "ZADD k GT INCR -1 m",
            "ZADD k LT INCR 1 m",
        ] {
            let row = predict(&call(stopped), &mut known).expect("predicted");
            assert_eq!((row.n, row.scores), (None, vec![None]), "{stopped}");
        }
        assert_eq!(held(&known, "k"), Some(owned(&[("m", 4.5)])));
    }

    #[test]
    fn an_increment_to_nan_is_not_predicted_and_leaves_the_value() {
        let mut known = known("k", zset(&[("m", f64::INFINITY)]));
        assert!(predict(&call("ZINCRBY k -inf m"), &mut known).is_none());
        assert_eq!(held(&known, "k"), Some(owned(&[("m", f64::INFINITY)])));
    }

    fn sample() -> Known {
        known(
            "k",
            zset(&[
                ("c", 2.0),
                ("a", 2.0),
                ("b", 2.0),
                ("lo", f64::NEG_INFINITY),
                ("hi", f64::INFINITY),
                ("x", 5.5),
                ("one", 1.0),
            ]),
        )
    }

    #[test]
    fn score_ranges_order_ties_by_member_and_honour_exclusion_infinities_limit_and_rev() {
        let mut known = sample();
        let cases: &[(&str, &[&str], &[f64])] = &[
            (
                "ZRANGEBYSCORE k -inf +inf",
                &["lo", "one", "a", "b", "c", "x", "hi"],
                &[f64::NEG_INFINITY, 1.0, 2.0, 2.0, 2.0, 5.5, f64::INFINITY],
            ),
            ("ZRANGEBYSCORE k (1 5.5", &["a", "b", "c", "x"], &[2.0, 2.0, 2.0, 5.5]),
            ("ZRANGEBYSCORE k (1 (5.5", &["a", "b", "c"], &[2.0; 3]),
            (
                "ZRANGEBYSCORE k (-inf (inf",
                &["one", "a", "b", "c", "x"],
                &[1.0, 2.0, 2.0, 2.0, 5.5],
            ),
            ("ZRANGEBYSCORE k 2 2 LIMIT 1 1", &["b"], &[2.0]),
            ("ZRANGEBYSCORE k 0 10 LIMIT 2 -1", &["b", "c", "x"], &[2.0, 2.0, 5.5]),
            ("ZRANGEBYSCORE k 0 10 LIMIT 0 0", &[], &[]),
            ("ZRANGEBYSCORE k 0 10 LIMIT -1 5", &[], &[]),
            ("ZRANGEBYSCORE k 3 1", &[], &[]),
            ("ZREVRANGEBYSCORE k 5.5 (1 LIMIT 1 2", &["c", "b"], &[2.0, 2.0]),
            (
                "ZRANGE k +inf (1 BYSCORE REV LIMIT 0 2",
                &["hi", "x"],
                &[f64::INFINITY, 5.5],
            ),
            (
                "ZRANGE k 1 +inf BYSCORE WITHSCORES",
                &["one", "a", "b", "c", "x", "hi"],
                &[1.0, 2.0, 2.0, 2.0, 5.5, f64::INFINITY],
            ),
        ];
        for (line, members, scores) in cases {
            assert_eq!(
                ranged(predict(&call(line), &mut known)),
                (members.iter().map(|m| (*m).to_owned()).collect(), scores.to_vec()),
                "{line}"
            );
        }
        assert_eq!(n(predict(&call("ZCOUNT k (1 2"), &mut known)), Some(3));
    }

    #[test]
    fn rank_ranges_count_from_either_end() {
        let mut known = sample();
        let cases: &[(&str, &[&str])] = &[
            ("ZRANGE k 0 -1", &["lo", "one", "a", "b", "c", "x", "hi"]),
            ("ZRANGE k -2 -1", &["x", "hi"]),
            ("ZRANGE k -100 1", &["lo", "one"]),
            ("ZRANGE k 5 100", &["x", "hi"]),
            ("ZRANGE k 3 2", &[]),
            ("ZRANGE k 7 9", &[]),
            ("ZRANGE k 0 -8", &[]),
            ("ZRANGE k 0 1 REV", &["hi", "x"]),
            ("ZREVRANGE k 2 3", &["c", "b"]),
        ];
        for (line, members) in cases {
            assert_eq!(ranged(predict(&call(line), &mut known)).0, *members, "{line}");
        }
        // Beyond a bigint the function raises: not predicted.
        assert!(predict(&call("ZRANGE k 0 9223372036854775807"), &mut known).is_none());
    }

    #[test]
    fn lex_ranges_take_their_bounds_as_the_function_does() {
        let mut known = known("k", zset(&[("a", 0.0), ("b", 0.0), ("bb", 0.0), ("c", 0.0)]));
        let cases: &[(&str, &[&str])] = &[
            ("ZRANGEBYLEX k - +", &["a", "b", "bb", "c"]),
            ("ZRANGEBYLEX k [b (c", &["b", "bb"]),
            ("ZRANGEBYLEX k (b +", &["bb", "c"]),
            ("ZRANGEBYLEX k + -", &[]),
            ("ZREVRANGEBYLEX k + [b LIMIT 1 1", &["bb"]),
        ];
        for (line, members) in cases {
            assert_eq!(ranged(predict(&call(line), &mut known)).0, *members, "{line}");
        }
        assert_eq!(n(predict(&call("ZLEXCOUNT k [b [bb"), &mut known)), Some(2));
    }

    #[test]
    fn removing_ranges_counts_and_deletes_an_emptied_key() {
        let mut known = sample();
        assert_eq!(n(predict(&call("ZREMRANGEBYSCORE k (1 2"), &mut known)), Some(3));
        assert_eq!(n(predict(&call("ZREMRANGEBYRANK k -1 -1"), &mut known)), Some(1));
        assert_eq!(n(predict(&call("ZREMRANGEBYLEX k [x [x"), &mut known)), Some(1));
        assert_eq!(
            held(&known, "k"),
            Some(owned(&[("lo", f64::NEG_INFINITY), ("one", 1.0)]))
        );
        assert_eq!(n(predict(&call("ZREMRANGEBYSCORE k 10 20"), &mut known)), Some(0));
        assert_eq!(n(predict(&call("ZREMRANGEBYRANK k 0 -1"), &mut known)), Some(2));
        assert!(matches!(known.get("k"), Some(None)));
        assert_eq!(n(predict(&call("ZREMRANGEBYRANK k 0 -1"), &mut known)), Some(0));
    }

    #[test]
    fn zrem_counts_members_once_and_deletes_an_emptied_key() {
        let mut known = known("k", zset(&[("a", 1.0), ("b", 2.0)]));
        assert_eq!(n(predict(&call("ZREM k a a nope"), &mut known)), Some(1));
        assert_eq!(n(predict(&call("ZREM k b"), &mut known)), Some(1));
        assert!(matches!(known.get("k"), Some(None)));
        assert_eq!(n(predict(&call("ZREM k b"), &mut known)), Some(0));
    }

    #[test]
    fn pops_take_the_lowest_or_highest_and_delete_an_emptied_key() {
        let mut known = sample();
        assert_eq!(
            ranged(predict(&call("ZPOPMIN k"), &mut known)),
            (vec!["lo".to_owned()], vec![f64::NEG_INFINITY])
        );
        assert_eq!(
            ranged(predict(&call("ZPOPMAX k 2"), &mut known)),
            (vec!["hi".to_owned(), "x".to_owned()], vec![f64::INFINITY, 5.5])
        );
        assert_eq!(ranged(predict(&call("ZPOPMIN k 0"), &mut known)), (vec![], vec![]));
        assert_eq!(ranged(predict(&call("ZPOPMIN k 2"), &mut known)).0, ["one", "a"]);
        assert_eq!(ranged(predict(&call("ZPOPMAX k 10"), &mut known)).0, ["c", "b"]);
        assert!(matches!(known.get("k"), Some(None)));
        assert_eq!(ranged(predict(&call("ZPOPMIN k"), &mut known)), (vec![], vec![]));
    }

    #[test]
    fn ranks_and_scores_of_members_present_or_not() {
        let mut known = sample();
        let row = predict(&call("ZRANK k b"), &mut known).expect("predicted");
        assert_eq!((row.n, row.scores), (Some(3), vec![Some(2.0)]));
        let row = predict(&call("ZREVRANK k b WITHSCORE"), &mut known).expect("predicted");
        assert_eq!((row.n, row.scores), (Some(3), vec![Some(2.0)]));
        assert_eq!(n(predict(&call("ZRANK k nope"), &mut known)), None);
        let row = predict(&call("ZSCORE k x"), &mut known).expect("predicted");
        assert_eq!((row.n, row.scores), (None, vec![Some(5.5)]));
        let row = predict(&call("ZMSCORE k nope lo x"), &mut known).expect("predicted");
        assert_eq!(row.scores, vec![None, Some(f64::NEG_INFINITY), Some(5.5)]);
        let mut absent = known_absent();
        let row = predict(&call("ZMSCORE k a b"), &mut absent).expect("predicted");
        assert_eq!(row.scores, vec![None, None]);
        let row = predict(&call("ZSCORE k a"), &mut absent).expect("predicted");
        assert_eq!(row.scores, vec![None]);
        assert_eq!(n(predict(&call("ZCARD k"), &mut absent)), Some(0));
        assert_eq!(
            ranged(predict(&call("ZRANGEBYSCORE k -inf +inf"), &mut absent)),
            (vec![], vec![])
        );
    }

    fn known_absent() -> Known {
        known("k", None)
    }

    #[test]
    fn unknown_keys_other_types_big_replies_and_unmodelled_forms_are_not_predicted() {
        let mut unknown = Known::new();
        assert!(predict(&call("ZCARD k"), &mut unknown).is_none());
        let stream = Loaded {
            present: true,
            ints: vec![i64::MIN, i64::MIN, 0, 100, 0],
            ..Loaded::default()
        };
        let mut other = known(
            "k",
            super::super::stream::Stream::from_loaded(stream).map(Value::Stream),
        );
        assert!(other["k"].is_some());
        assert!(predict(&call("ZADD k 1 a"), &mut other).is_none());
        let mut known = sample();
        let mut limited = call("ZRANGE k 0 -1");
        // 7 members of 11 bytes, and 16 bytes each: 123, past a quarter of 491.
        limited.reply_limit = Some(491);
        assert!(predict(&limited, &mut known).is_none());
        limited.reply_limit = Some(492);
        assert!(predict(&limited, &mut known).is_some());
        let mut pop = call("ZPOPMIN k 7");
        pop.reply_limit = Some(100);
        assert!(predict(&pop, &mut known).is_none());
        // The batched forms of ZADD and ZREM.
        let mut batched = call("ZADD k 1 a");
        batched.ints.push(Some(1));
        assert!(predict(&batched, &mut known).is_none());
        let mut batched = call("ZREM k a");
        batched.ints.push(Some(1));
        assert!(predict(&batched, &mut known).is_none());
        assert!(predict(&call("ZRANDMEMBER k"), &mut known).is_none());
        assert!(predict(&call("ZRANGESTORE d k 0 -1"), &mut known).is_none());
        assert_eq!(held(&known, "k"), held(&sample(), "k"));
    }

    #[test]
    fn loads_that_no_zset_answers_are_refused() {
        let loaded = |items: &[&str], scores: &[f64]| Loaded {
            present: true,
            items: items
                .iter()
                .map(|item| Bytes::copy_from_slice(item.as_bytes()))
                .collect(),
            scores: scores.to_vec(),
            ..Loaded::default()
        };
        assert!(Zset::from_loaded(loaded(&[], &[])).is_none());
        assert!(Zset::from_loaded(loaded(&["a"], &[])).is_none());
        assert!(Zset::from_loaded(loaded(&["a", "a"], &[1.0, 2.0])).is_none());
        assert!(Zset::from_loaded(loaded(&["a"], &[f64::NAN])).is_none());
        let zset = Zset::from_loaded(loaded(&["ab", "c"], &[1.0, 0.0])).expect("a zset");
        assert_eq!(zset.bytes(), 3 + 2 * MEMBER_OVERHEAD);
    }
}
