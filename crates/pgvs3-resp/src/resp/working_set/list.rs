//! The working set's lists: what a list key holds, and the calls on it predicted, each row as
//! `pgvs3.resp_list` (gateway/migrations/functions/resp_list.sql) answers it; and the set-based
//! write of a run's calls on one list (`pgvs3.resp_list_apply`).
//!
//! Pushes, pops, LMOVE and LREM leave a list's elements of before in their order, less those
//! removed, between the elements pushed at the head and those pushed at the tail. So a list
//! keeps each element's position in the database (`resp_list.pos`) and its bounds: the write
//! deletes the elements removed by position and puts the new ones past the bounds, at their end.

use std::collections::VecDeque;

use bytes::Bytes;

use super::{Known, Value, within_limit};
use crate::store::{ListOp, ListWrite, Loaded, SqlOp, TypedCall, TypedRow};

/// Loads a list key (see [`Loaded`]): its elements in order, and in `ints` its bounds then the
/// elements' positions (none when the key has no bounds). A live key of another type answers
/// `too_large`, so that it is never taken for a list or for no key.
pub const LOAD: &str = "SELECT k.key IS NOT NULL AS present,
        k.key IS NOT NULL AND coalesce(k.type <> 'l' OR k.length > $3::bigint, true) AS too_large,
        CASE WHEN k.type = 'l' AND k.length <= $3::bigint THEN ARRAY(
            SELECT value FROM pgvs3.resp_list WHERE bucket_id = $1::bigint AND key = $2::text ORDER BY pos LIMIT $3::bigint)
        END AS items,
        NULL::bytea[] AS vals, NULL::float8[] AS scores,
        CASE WHEN k.type = 'l' AND k.length <= $3::bigint AND k.list_head IS NOT NULL AND k.list_tail IS NOT NULL
            THEN ARRAY[k.list_head, k.list_tail] || ARRAY(
                SELECT pos FROM pgvs3.resp_list WHERE bucket_id = $1::bigint AND key = $2::text ORDER BY pos LIMIT $3::bigint)
        END AS ints
   FROM (VALUES (1)) AS one
   LEFT JOIN pgvs3.resp_keys k
     ON k.bucket_id = $1::bigint AND k.key = $2::text AND (k.expires_at IS NULL OR k.expires_at > pgvs3.resp_now())";

/// About the memory an element takes besides its bytes.
const ELEMENT_BYTES: usize = 48;

/// The distance between two elements a push puts (`pgvs3.resp_list_push`'s).
const STEP: i64 = 1 << 20;

/// What the database holds of a list as the run last wrote or loaded it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stored {
    /// No key.
    Absent,
    /// The key's length and bounds.
    Row { len: i64, head: i64, tail: i64 },
    /// Not known: its calls were sent as they are (a LINSERT among them may renumber a list),
    /// or it was loaded without bounds. Its writes go as the calls until it is loaded again.
    Unknown,
}

/// A list's elements, head first. Empty only when the run emptied it: it is then no key to
/// the calls, and is held for the elements its write deletes.
#[derive(Debug, Clone)]
pub struct List {
    /// Each element with its position in the database, `None` for one pushed since the list
    /// was last written there.
    elements: VecDeque<(Option<i64>, Bytes)>,
    /// The elements' bytes, kept as they change.
    data: usize,
    stored: Stored,
    /// The elements of `stored` removed since, by position, with their values.
    gone: Vec<(i64, Bytes)>,
    /// Whether a call removed its last element since (even one LMOVE brought back onto the
    /// list: `pgvs3.resp_list` deletes the key between its pop and its push).
    emptied: bool,
}

impl List {
    /// `None` for a load of no elements, which no live list answers.
    pub fn from_loaded(loaded: Loaded) -> Option<List> {
        if loaded.items.is_empty() {
            return None;
        }
        let data = loaded.items.iter().map(Bytes::len).sum();
        let (stored, positions): (Stored, Vec<Option<i64>>) = match loaded.ints[..] {
            [head, tail, ref positions @ ..] if positions.len() == loaded.items.len() => (
                Stored::Row {
                    len: loaded.items.len() as i64,
                    head,
                    tail,
                },
                positions.iter().copied().map(Some).collect(),
            ),
            _ => (Stored::Unknown, vec![None; loaded.items.len()]),
        };
        Some(List {
            elements: positions.into_iter().zip(loaded.items).collect(),
            data,
            stored,
            gone: Vec::new(),
            emptied: false,
        })
    }

    pub fn bytes(&self) -> usize {
        self.data + ELEMENT_BYTES * self.elements.len()
    }

    fn new() -> List {
        List {
            elements: VecDeque::new(),
            data: 0,
            stored: Stored::Absent,
            gone: Vec::new(),
            emptied: false,
        }
    }

    /// Whether the run emptied it (it is no key).
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// Whether the working set may keep it past its run: it has elements, and their positions
    /// are the database's, or are those its write gives them.
    pub fn placed(&self) -> bool {
        !self.is_empty() && self.stored != Stored::Unknown
    }

    fn len(&self) -> i64 {
        self.elements.len() as i64
    }

    fn push(&mut self, left: bool, element: Bytes) {
        self.data += element.len();
        match left {
            true => self.elements.push_front((None, element)),
            false => self.elements.push_back((None, element)),
        }
    }

    fn pop(&mut self, left: bool) -> Option<Bytes> {
        let (pos, element) = match left {
            true => self.elements.pop_front(),
            false => self.elements.pop_back(),
        }?;
        self.removed(pos, &element);
        self.emptied |= self.elements.is_empty();
        Some(element)
    }

    /// `element`, at `pos` (`None`: pushed since the last write), went.
    fn removed(&mut self, pos: Option<i64>, element: &Bytes) {
        self.data -= element.len();
        if let Some(pos) = pos {
            self.gone.push((pos, element.clone()));
        }
    }

    /// The element at `index` (negative: from the tail), as `pgvs3.resp_list_at` finds it.
    /// `Err`: the function's arithmetic overflows (it raises).
    fn at(&self, index: i64) -> Result<Option<&Bytes>, ()> {
        let from_head = match index {
            0.. => index,
            // OFFSET -idx - 1 from the tail.
            _ => self.len() - 1 - index.checked_neg().ok_or(())?.checked_sub(1).ok_or(())?,
        };
        Ok(usize::try_from(from_head)
            .ok()
            .and_then(|at| self.elements.get(at))
            .map(|(_, element)| element))
    }

    /// The set-based write of the calls on the list since it was last written (see
    /// [`ListWrite`]), the key holding a list when they began (`existed`). The elements pushed at the head go below the head bound
    /// found, the nearest first; the others (all of them when none of before is left) above
    /// the tail bound. `None` when it cannot be written so (positions unknown, or past the
    /// bigint range): the calls go as they are, and the list calls [`List::unplace`].
    pub fn write(&self, key: &str, existed: bool) -> Option<ListWrite> {
        let (len, head, tail) = match (self.stored, existed) {
            (Stored::Row { len, head, tail }, true) => (len, head, tail),
            (Stored::Absent, false) => (0, 0, 0),
            _ => return None,
        };
        let first = self.elements.iter().position(|(pos, _)| pos.is_some());
        let last = self.elements.iter().rposition(|(pos, _)| pos.is_some());
        let (before, after) = match (first, last) {
            (Some(first), Some(last)) => (first, last + 1),
            _ => (0, 0),
        };
        let mut added = Vec::new();
        for (at, (_, element)) in self.elements.iter().enumerate() {
            let pos = match at {
                _ if at < before => head.checked_sub(i64::try_from(before - at).ok()?.checked_mul(STEP)?)?,
                _ if at >= after => tail.checked_add(i64::try_from(at - after + 1).ok()?.checked_mul(STEP)?)?,
                _ => continue,
            };
            added.push((pos, element.clone()));
        }
        // An end pushed since is the first or the last element added.
        let left = match (self.elements.front(), self.elements.back()) {
            (Some((front, _)), Some((back, _))) => Some((
                self.len(),
                front.or(added.first().map(|(pos, _)| *pos))?,
                back.or(added.last().map(|(pos, _)| *pos))?,
            )),
            _ => None,
        };
        Some(ListWrite {
            key: key.to_owned(),
            existed,
            emptied: self.emptied,
            found: (len, head, tail),
            gone: self.gone.clone(),
            added,
            left,
        })
    }

    /// The database holds `write` now: the elements pushed have their positions. (A write of
    /// nothing is not sent: the database keeps the bounds found.)
    pub fn wrote(&mut self, write: &ListWrite) {
        if write.is_empty() {
            return;
        }
        let mut positions = write.added.iter().map(|(pos, _)| *pos);
        for (pos, _) in self.elements.iter_mut().filter(|(pos, _)| pos.is_none()) {
            *pos = positions.next();
        }
        self.stored = match write.left {
            Some((len, head, tail)) => Stored::Row { len, head, tail },
            None => Stored::Absent,
        };
        self.gone.clear();
        self.emptied = false;
    }

    /// The calls went as they are: the positions are the database's to give.
    pub fn unplace(&mut self) {
        self.stored = Stored::Unknown;
        self.gone.clear();
        self.emptied = false;
    }
}

/// The write of calls on a list key that is absent (they found it absent and left it so).
pub fn nothing(key: &str) -> ListWrite {
    ListWrite {
        key: key.to_owned(),
        existed: false,
        emptied: false,
        found: (0, 0, 0),
        gone: Vec::new(),
        added: Vec::new(),
        left: None,
    }
}

fn int(n: i64) -> TypedRow {
    TypedRow {
        n: Some(n),
        ..TypedRow::default()
    }
}

fn items(n: Option<i64>, items: Vec<Option<Bytes>>) -> TypedRow {
    TypedRow {
        n,
        items,
        ..TypedRow::default()
    }
}

/// What a missing list answers to LPOP, RPOP, LMOVE and LINDEX: one NULL item.
fn nil() -> TypedRow {
    items(None, vec![None])
}

/// The row of a call on a list (see [`super::predict`]). Predicted: LPUSH, RPUSH, LPUSHX,
/// RPUSHX, LPOP, RPOP, LMOVE and RPOPLPUSH (whose blocking forms make the same call: the run
/// asks for none), LREM, LLEN, LINDEX, LRANGE.
pub fn predict(call: &TypedCall, known: &mut Known) -> Option<TypedRow> {
    let op = *ListOp::ALL.iter().find(|op| call.is(**op))?;
    if op == ListOp::Lmove {
        return lmove(call, known);
    }
    let [key] = call.keys.as_slice() else {
        return None;
    };
    let entry = known.get_mut(key)?;
    // An emptied list is no key to the calls (`pgvs3.resp_list_shrink` deleted it), but a push
    // goes on with it, so that its write deletes what it held.
    let list = match entry {
        None => None,
        Some(Value::List(list)) => Some(list).filter(|list| !list.is_empty()),
        Some(_) => return None,
    };
    let row = match (op, list) {
        (ListOp::Lpush | ListOp::Rpush, None) if !call.args.is_empty() => {
            if !matches!(entry, Some(Value::List(_))) {
                *entry = Some(Value::List(List::new()));
            }
            let Some(Value::List(list)) = entry else {
                unreachable!("a list was put there");
            };
            int(push(list, op == ListOp::Lpush, &call.args))
        }
        (ListOp::Lpushx | ListOp::Rpushx, None) => int(0),
        (ListOp::Lpush | ListOp::Lpushx, Some(list)) if !call.args.is_empty() => int(push(list, true, &call.args)),
        (ListOp::Rpush | ListOp::Rpushx, Some(list)) if !call.args.is_empty() => int(push(list, false, &call.args)),
        (ListOp::Lpop | ListOp::Rpop, None) => nil(),
        (ListOp::Lpop | ListOp::Rpop, Some(list)) => pop(call, list, op == ListOp::Lpop)?,
        (ListOp::Llen, list) => int(list.map_or(0, |list| list.len())),
        (ListOp::Lindex, None) => nil(),
        (ListOp::Lindex, Some(list)) => {
            let [Some(index)] = call.ints[..] else {
                return None;
            };
            let element = list.at(index).ok()?.cloned();
            let element = vec![element];
            within_limit(call, &element).then(|| items(None, element))?
        }
        (ListOp::Lrange, None) => items(None, Vec::new()),
        (ListOp::Lrange, Some(list)) => lrange(call, list)?,
        (ListOp::Lrem, None) => int(0),
        (ListOp::Lrem, Some(list)) => lrem(call, list)?,
        _ => return None,
    };
    Some(row)
}

/// Pushes `args` one by one at the head (`left`) or the tail; the new length.
fn push(list: &mut List, left: bool, args: &[Bytes]) -> i64 {
    for element in args {
        list.push(left, element.clone());
    }
    list.len()
}

/// LPOP/RPOP: ints {count (NULL: one)}; n = 1, as the list existed.
fn pop(call: &TypedCall, list: &mut List, left: bool) -> Option<TypedRow> {
    let [count] = call.ints[..] else {
        return None;
    };
    let take = match count {
        None => 1,
        Some(count) => usize::try_from(count).ok()?.min(list.elements.len()),
    };
    let popped: Vec<Option<Bytes>> = match left {
        true => list
            .elements
            .iter()
            .take(take)
            .map(|(_, element)| Some(element.clone()))
            .collect(),
        false => list
            .elements
            .iter()
            .rev()
            .take(take)
            .map(|(_, element)| Some(element.clone()))
            .collect(),
    };
    if !within_limit(call, &popped) {
        return None;
    }
    for _ in 0..take {
        list.pop(left);
    }
    Some(items(Some(1), popped))
}

/// LRANGE: ints {start, stop}, as the function computes its OFFSET and LIMIT in bigint (an
/// overflow there raises: not predicted).
fn lrange(call: &TypedCall, list: &List) -> Option<TypedRow> {
    let [Some(start), Some(stop)] = call.ints[..] else {
        return None;
    };
    let len = list.len();
    let first = match start {
        ..0 => (start + len).max(0),
        _ => start,
    };
    let last = match stop {
        ..0 => stop + len,
        _ => stop.min(len - 1),
    };
    let count = last.checked_sub(first)?.checked_add(1)?.max(0);
    let range: Vec<Option<Bytes>> = list
        .elements
        .iter()
        .skip(usize::try_from(first).unwrap_or(usize::MAX))
        .take(usize::try_from(count).unwrap_or(usize::MAX))
        .map(|(_, element)| Some(element.clone()))
        .collect();
    within_limit(call, &range).then(|| items(None, range))
}

/// LREM: args {element}, ints {count: > 0 from the head, < 0 from the tail, 0 all}; n: how
/// many went.
fn lrem(call: &TypedCall, list: &mut List) -> Option<TypedRow> {
    let ([element], [Some(count)]) = (call.args.as_slice(), call.ints.as_slice()) else {
        return None;
    };
    // The function's LIMIT -count raises for the least bigint.
    let most = match count {
        0 => usize::MAX,
        _ => usize::try_from(count.checked_abs()?).unwrap_or(usize::MAX),
    };
    let len = list.elements.len();
    let scanned = |i: usize| if *count < 0 { len - 1 - i } else { i };
    let mut gone = vec![false; len];
    let mut removed = 0;
    for at in (0..len)
        .map(scanned)
        .filter(|at| list.elements[*at].1 == element)
        .take(most)
    {
        gone[at] = true;
        removed += 1;
    }
    let kept = std::mem::take(&mut list.elements);
    for ((pos, value), gone) in kept.into_iter().zip(gone) {
        match gone {
            true => list.removed(pos, &value),
            false => list.elements.push_back((pos, value)),
        }
    }
    list.emptied |= list.elements.is_empty();
    Some(int(removed as i64))
}

/// LMOVE: keys {source, destination}, ints {1: pop at the source's head, 1: push at the
/// destination's head}; the element moved, or nil from a missing source (whatever the
/// destination holds: the function checks it only once the source has an element).
fn lmove(call: &TypedCall, known: &mut Known) -> Option<TypedRow> {
    let [source, destination] = call.keys.as_slice() else {
        return None;
    };
    let [Some(from), Some(to)] = call.ints[..] else {
        return None;
    };
    let (from_head, to_head) = (from == 1, to == 1);
    let element = match known.get(source)? {
        None => return Some(nil()),
        Some(Value::List(list)) => {
            let end = match from_head {
                true => list.elements.front(),
                false => list.elements.back(),
            };
            // An emptied source is no key.
            let Some((_, element)) = end else {
                return Some(nil());
            };
            element.clone()
        }
        Some(_) => return None,
    };
    if source != destination && !matches!(known.get(destination)?, None | Some(Value::List(_))) {
        return None;
    }
    let moved = vec![Some(element.clone())];
    if !within_limit(call, &moved) {
        return None;
    }
    if let Some(Some(Value::List(list))) = known.get_mut(source) {
        let emptied = list.emptied;
        list.pop(from_head);
        // Onto itself its element comes back, and the list stays (its TTL too): Redis's LMOVE
        // pushes before it looks whether the source emptied.
        if source == destination {
            list.emptied = emptied;
        }
    }
    match known.get_mut(destination) {
        Some(Some(Value::List(list))) => list.push(to_head, element),
        _ => {
            let mut list = List::new();
            list.push(to_head, element);
            known.insert(destination.clone(), Some(Value::List(list)));
        }
    }
    Some(items(None, moved))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::commands::list::parse;
    use crate::resp::working_set::{known, loaded_list as list, loaded_set};

    fn call(words: &[&str]) -> TypedCall {
        let args: Vec<Bytes> = words
            .iter()
            .map(|word| Bytes::copy_from_slice(word.as_bytes()))
            .collect();
        let typed = parse(words[0], &args).ok().flatten().expect("a list command");
        typed.call
    }

    /// The list `key` holds: `None` when it is known to be absent.
    fn elements(known: &Known, key: &str) -> Option<Vec<String>> {
        match known.get(key).expect("a known key") {
            None => None,
            Some(Value::List(list)) if list.is_empty() => None,
            Some(Value::List(list)) => {
                let data: usize = list.elements.iter().map(|(_, element)| element.len()).sum();
                assert_eq!(list.data, data);
                Some(
                    list.elements
                        .iter()
                        .map(|(_, element)| String::from_utf8_lossy(element).into_owned())
                        .collect(),
                )
            }
            Some(other) => panic!("not a list: {other:?}"),
        }
    }

    fn strings(row: &TypedRow) -> Vec<Option<String>> {
        row.items
            .iter()
            .map(|item| item.as_ref().map(|item| String::from_utf8_lossy(item).into_owned()))
            .collect()
    }

    /// Predicts `words` on `known`, which must be predicted: (n, items).
    fn predicted(known: &mut Known, words: &[&str]) -> (Option<i64>, Vec<Option<String>>) {
        let row = predict(&call(words), known).unwrap_or_else(|| panic!("{words:?} predicted"));
        assert!(row.err.is_none() && row.scores.is_empty() && row.cut.is_none());
        (row.n, strings(&row))
    }

    fn some(items: &[&str]) -> Vec<Option<String>> {
        items.iter().map(|item| Some(item.to_string())).collect()
    }

    fn owned(elements: &[&str]) -> Option<Vec<String>> {
        Some(elements.iter().map(|element| element.to_string()).collect())
    }

    #[test]
    fn pushes_make_the_list_in_the_functions_order() {
        let mut known = known(&[("l", None)]);
        assert_eq!(predicted(&mut known, &["lpush", "l", "a", "b", "c"]), (Some(3), vec![]));
        assert_eq!(elements(&known, "l"), owned(&["c", "b", "a"]));
        assert_eq!(predicted(&mut known, &["rpush", "l", "d", "e"]), (Some(5), vec![]));
        assert_eq!(predicted(&mut known, &["lpushx", "l", "x"]), (Some(6), vec![]));
        assert_eq!(predicted(&mut known, &["rpushx", "l", "y", "z"]), (Some(8), vec![]));
        assert_eq!(elements(&known, "l"), owned(&["x", "c", "b", "a", "d", "e", "y", "z"]));
    }

    #[test]
    fn pushx_leaves_a_missing_list_missing() {
        let mut known = known(&[("l", None)]);
        assert_eq!(predicted(&mut known, &["lpushx", "l", "a"]), (Some(0), vec![]));
        assert_eq!(predicted(&mut known, &["rpushx", "l", "a", "b"]), (Some(0), vec![]));
        assert_eq!(elements(&known, "l"), None);
    }

    #[test]
    fn pops_answer_one_element_or_a_count_and_nil_from_a_missing_list() {
        let mut known = known(&[("l", list(&["a", "b", "c", "d"]))]);
        assert_eq!(predicted(&mut known, &["lpop", "l"]), (Some(1), some(&["a"])));
        // A count answers in the order popped; 0 pops nothing from a list that exists.
        assert_eq!(predicted(&mut known, &["rpop", "l", "2"]), (Some(1), some(&["d", "c"])));
        assert_eq!(predicted(&mut known, &["lpop", "l", "0"]), (Some(1), vec![]));
        assert_eq!(elements(&known, "l"), owned(&["b"]));
        assert_eq!(predicted(&mut known, &["lpop", "l", "5"]), (Some(1), some(&["b"])));
        assert_eq!(elements(&known, "l"), None);
        assert_eq!(predicted(&mut known, &["lpop", "l"]), (None, vec![None]));
        assert_eq!(predicted(&mut known, &["rpop", "l", "3"]), (None, vec![None]));
        assert_eq!(predicted(&mut known, &["rpop", "l", "0"]), (None, vec![None]));
        assert_eq!(elements(&known, "l"), None);
    }

    #[test]
    fn lmove_moves_between_either_ends_of_two_keys() {
        let mut known = known(&[("src", list(&["a", "b", "c"])), ("dst", None)]);
        assert_eq!(
            predicted(&mut known, &["rpoplpush", "src", "dst"]),
            (None, some(&["c"]))
        );
        assert_eq!(
            predicted(&mut known, &["lmove", "src", "dst", "LEFT", "RIGHT"]),
            (None, some(&["a"]))
        );
        assert_eq!(elements(&known, "dst"), owned(&["c", "a"]));
        assert_eq!(
            predicted(&mut known, &["lmove", "src", "dst", "right", "left"]),
            (None, some(&["b"]))
        );
        assert_eq!(elements(&known, "src"), None);
        assert_eq!(elements(&known, "dst"), owned(&["b", "c", "a"]));
    }

    #[test]
    fn lmove_on_one_key_rotates_it() {
        let mut known = known(&[("l", list(&["a", "b", "c"])), ("one", list(&["x"]))]);
        assert_eq!(predicted(&mut known, &["rpoplpush", "l", "l"]), (None, some(&["c"])));
        assert_eq!(elements(&known, "l"), owned(&["c", "a", "b"]));
        assert_eq!(
            predicted(&mut known, &["lmove", "l", "l", "left", "right"]),
            (None, some(&["c"]))
        );
        assert_eq!(elements(&known, "l"), owned(&["a", "b", "c"]));
        assert_eq!(
            predicted(&mut known, &["lmove", "l", "l", "left", "left"]),
            (None, some(&["a"]))
        );
        assert_eq!(elements(&known, "l"), owned(&["a", "b", "c"]));
        // Its only element goes and comes back: the key stays.
        assert_eq!(
            predicted(&mut known, &["rpoplpush", "one", "one"]),
            (None, some(&["x"]))
        );
        assert_eq!(elements(&known, "one"), owned(&["x"]));
    }

    #[test]
    fn lmove_from_a_missing_source_is_nil_whatever_the_destination() {
        let mut known = known(&[("src", None), ("set", loaded_set(&["a"], 0, 512))]);
        assert_eq!(predicted(&mut known, &["rpoplpush", "src", "set"]), (None, vec![None]));
        assert_eq!(
            predicted(&mut known, &["lmove", "src", "unknown", "left", "left"]),
            (None, vec![None])
        );
        assert_eq!(elements(&known, "src"), None);
        assert!(!known.contains_key("unknown"));
    }

    #[test]
    fn lmove_declines_a_destination_not_known_to_be_a_list_or_absent() {
        let mut known = known(&[("src", list(&["a"])), ("set", loaded_set(&["a"], 0, 512))]);
        assert!(predict(&call(&["rpoplpush", "src", "unknown"]), &mut known).is_none());
        assert!(predict(&call(&["rpoplpush", "src", "set"]), &mut known).is_none());
        assert!(predict(&call(&["rpoplpush", "unknown", "src"]), &mut known).is_none());
        assert_eq!(elements(&known, "src"), owned(&["a"]));
    }

    #[test]
    fn lrem_counts_from_either_end_and_deletes_an_emptied_list() {
        let mut known = known(&[
            ("l", list(&["a", "b", "a", "c", "a", "b", "a"])),
            ("two", list(&["a", "a"])),
        ]);
        assert_eq!(predicted(&mut known, &["lrem", "l", "1", "a"]), (Some(1), vec![]));
        assert_eq!(elements(&known, "l"), owned(&["b", "a", "c", "a", "b", "a"]));
        assert_eq!(predicted(&mut known, &["lrem", "l", "-2", "a"]), (Some(2), vec![]));
        assert_eq!(elements(&known, "l"), owned(&["b", "a", "c", "b"]));
        assert_eq!(predicted(&mut known, &["lrem", "l", "-5", "b"]), (Some(2), vec![]));
        assert_eq!(predicted(&mut known, &["lrem", "l", "0", "z"]), (Some(0), vec![]));
        assert_eq!(elements(&known, "l"), owned(&["a", "c"]));
        assert_eq!(predicted(&mut known, &["lrem", "two", "0", "a"]), (Some(2), vec![]));
        assert_eq!(elements(&known, "two"), None);
        assert_eq!(predicted(&mut known, &["lrem", "two", "1", "a"]), (Some(0), vec![]));
        // LIMIT -count overflows in the function for the least count (it raises), but not
        // before a missing list answers.
        assert!(predict(&call(&["lrem", "l", "-9223372036854775808", "a"]), &mut known).is_none());
        assert_eq!(
            predicted(&mut known, &["lrem", "two", "-9223372036854775808", "a"]),
            (Some(0), vec![])
        );
        assert_eq!(elements(&known, "l"), owned(&["a", "c"]));
    }

    /// The answers of the reference gateway's `pgvs3.resp_list` on the same list.
    #[test]
    fn reads_answer_as_the_function_at_every_range() {
        let mut known = known(&[("l", list(&["a", "b", "c", "a", "d", "a", "e"])), ("none", None)]);
        assert_eq!(predicted(&mut known, &["llen", "l"]), (Some(7), vec![]));
        assert_eq!(predicted(&mut known, &["lindex", "l", "1"]), (None, some(&["b"])));
        assert_eq!(predicted(&mut known, &["lindex", "l", "-7"]), (None, some(&["a"])));
        assert_eq!(predicted(&mut known, &["lindex", "l", "-1"]), (None, some(&["e"])));
        assert_eq!(predicted(&mut known, &["lindex", "l", "-8"]), (None, vec![None]));
        assert_eq!(predicted(&mut known, &["lindex", "l", "7"]), (None, vec![None]));
        assert_eq!(
            predicted(&mut known, &["lindex", "l", "9223372036854775807"]),
            (None, vec![None])
        );
        assert_eq!(predicted(&mut known, &["lrange", "l", "5", "2"]), (None, vec![]));
        assert_eq!(
            predicted(&mut known, &["lrange", "l", "-100", "100"]),
            (None, some(&["a", "b", "c", "a", "d", "a", "e"]))
        );
        assert_eq!(
            predicted(&mut known, &["lrange", "l", "-3", "-1"]),
            (None, some(&["d", "a", "e"]))
        );
        assert_eq!(predicted(&mut known, &["lrange", "l", "1", "-6"]), (None, some(&["b"])));
        assert_eq!(predicted(&mut known, &["lrange", "l", "7", "10"]), (None, vec![]));
        assert_eq!(
            predicted(
                &mut known,
                &["lrange", "l", "-9223372036854775808", "9223372036854775807"]
            ),
            (None, some(&["a", "b", "c", "a", "d", "a", "e"]))
        );
        // The function's arithmetic overflows there: it raises.
        assert!(predict(&call(&["lindex", "l", "-9223372036854775808"]), &mut known).is_none());
        assert!(predict(&call(&["lrange", "l", "100", "-9223372036854775808"]), &mut known).is_none());
        assert_eq!(predicted(&mut known, &["llen", "none"]), (Some(0), vec![]));
        assert_eq!(predicted(&mut known, &["lindex", "none", "0"]), (None, vec![None]));
        assert_eq!(predicted(&mut known, &["lrange", "none", "0", "-1"]), (None, vec![]));
        assert_eq!(elements(&known, "l"), owned(&["a", "b", "c", "a", "d", "a", "e"]));
        assert_eq!(elements(&known, "none"), None);
    }

    #[test]
    fn declines_what_it_does_not_model_and_changes_nothing() {
        let mut known = known(&[("l", list(&["a", "b"])), ("set", loaded_set(&["a"], 0, 512))]);
        for words in [
            &["lpush", "unknown", "a"][..],
            &["llen", "unknown"],
            &["lpush", "set", "a"],
            &["llen", "set"],
            &["lpop", "set"],
            &["blpop", "l", "0"],
            &["brpop", "l", "0"],
            &["lmpop", "1", "l", "left"],
            &["lset", "l", "0", "x"],
            &["linsert", "l", "before", "a", "x"],
            &["ltrim", "l", "0", "0"],
            &["lpos", "l", "a"],
        ] {
            assert!(predict(&call(words), &mut known).is_none(), "{words:?}");
        }
        assert_eq!(elements(&known, "l"), owned(&["a", "b"]));
        assert!(matches!(known.get("set"), Some(Some(Value::Set(_)))));
    }

    #[test]
    fn declines_a_reply_near_its_limit() {
        let mut known = known(&[("l", list(&["0123456789abcdef", "x"]))]);
        let mut range = call(&["lrange", "l", "0", "-1"]);
        // 16 + 1 bytes and 16 an element: within a quarter of 4 * 49, not of 4 * 48.
        range.reply_limit = Some(4 * 49);
        assert!(predict(&range, &mut known).is_some());
        range.reply_limit = Some(4 * 48);
        assert!(predict(&range, &mut known).is_none());
        let mut pop = call(&["lpop", "l", "2"]);
        pop.reply_limit = Some(4 * 48);
        assert!(predict(&pop, &mut known).is_none());
        let mut pop = call(&["lpop", "l"]);
        pop.reply_limit = Some(4 * 31);
        assert!(predict(&pop, &mut known).is_none());
        assert_eq!(elements(&known, "l"), owned(&["0123456789abcdef", "x"]));
        pop.reply_limit = Some(4 * 32);
        assert_eq!(
            strings(&predict(&pop, &mut known).expect("within")),
            some(&["0123456789abcdef"])
        );
    }

    /// A list of `elements` loaded with positions `STEP` apart from 0, its bounds at its ends.
    fn placed(elements: &[&str]) -> Option<Value> {
        let positions = (0..elements.len() as i64).map(|at| at * STEP);
        let loaded = Loaded {
            present: true,
            items: elements
                .iter()
                .map(|element| Bytes::copy_from_slice(element.as_bytes()))
                .collect(),
            ints: [0, (elements.len() as i64 - 1) * STEP]
                .into_iter()
                .chain(positions)
                .collect(),
            ..Default::default()
        };
        Some(Value::List(List::from_loaded(loaded).expect("a list")))
    }

    fn write(known: &mut Known, key: &str, existed: bool) -> ListWrite {
        let Some(Some(Value::List(list))) = known.get_mut(key) else {
            panic!("{key} is a list");
        };
        let write = list.write(key, existed).expect("written set-based");
        list.wrote(&write);
        write
    }

    fn b(text: &str) -> Bytes {
        Bytes::copy_from_slice(text.as_bytes())
    }

    #[test]
    fn a_write_deletes_what_went_and_puts_pushes_past_the_bounds_at_their_end() {
        let mut known = known(&[("l", placed(&["a", "b", "c"])), ("new", None)]);
        predicted(&mut known, &["lpush", "l", "x", "y"]);
        predicted(&mut known, &["rpop", "l"]);
        predicted(&mut known, &["lrem", "l", "1", "b"]);
        predicted(&mut known, &["rpush", "l", "z", "w"]);
        predicted(&mut known, &["rpoplpush", "l", "new"]);
        assert_eq!(elements(&known, "l"), owned(&["y", "x", "a", "z"]));
        let written = write(&mut known, "l", true);
        assert_eq!(written.found, (3, 0, 2 * STEP));
        assert_eq!(written.gone, vec![(2 * STEP, b("c")), (STEP, b("b"))]);
        assert_eq!(
            written.added,
            vec![(-2 * STEP, b("y")), (-STEP, b("x")), (3 * STEP, b("z"))]
        );
        assert_eq!(written.left, Some((4, -2 * STEP, 3 * STEP)));
        // A new list starts around 0; the next write starts from what this one left. With
        // none of the elements of before left, the pushes all go past the tail.
        let made = write(&mut known, "new", false);
        assert_eq!(
            (made.found, made.added, made.left),
            ((0, 0, 0), vec![(STEP, b("w"))], Some((1, STEP, STEP)))
        );
        predicted(&mut known, &["lpop", "l", "4"]);
        predicted(&mut known, &["lpush", "l", "v"]);
        let emptied = write(&mut known, "l", true);
        assert!(emptied.emptied);
        assert_eq!(emptied.found, (4, -2 * STEP, 3 * STEP));
        assert_eq!(emptied.gone.len(), 4);
        assert_eq!(
            (emptied.added, emptied.left),
            (vec![(4 * STEP, b("v"))], Some((1, 4 * STEP, 4 * STEP)))
        );
        predicted(&mut known, &["rpop", "l"]);
        let emptied = write(&mut known, "l", true);
        assert!(emptied.emptied);
        assert_eq!(
            (emptied.found, emptied.gone.len(), emptied.left),
            ((1, 4 * STEP, 4 * STEP), 1, None)
        );
    }

    #[test]
    fn an_only_element_moved_onto_its_list_keeps_the_list_as_redis_does() {
        let mut known = known(&[("one", placed(&["x"]))]);
        predicted(&mut known, &["rpoplpush", "one", "one"]);
        let written = write(&mut known, "one", true);
        assert!(!written.emptied);
        assert_eq!((written.gone, written.added), (vec![(0, b("x"))], vec![(STEP, b("x"))]));
    }

    #[test]
    fn a_list_whose_positions_are_unknown_goes_as_the_calls() {
        let mut known = known(&[("l", list(&["a"]))]);
        predicted(&mut known, &["rpush", "l", "b"]);
        let Some(Some(Value::List(list))) = known.get("l") else {
            unreachable!()
        };
        assert!(list.write("l", true).is_none() && !list.placed());
    }

    #[test]
    fn a_load_of_no_elements_is_no_list() {
        assert!(List::from_loaded(Loaded::default()).is_none());
        let Some(Value::List(loaded)) = list(&["ab", "c"]) else {
            unreachable!()
        };
        assert_eq!(loaded.bytes(), 3 + 2 * ELEMENT_BYTES);
    }
}
