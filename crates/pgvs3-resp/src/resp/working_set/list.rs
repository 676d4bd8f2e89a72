//! The working set's lists: what a list key holds, and the calls on it predicted, each row as
//! `pgvs3.resp_list` (gateway/migrations/functions/resp_list.sql) answers it.

use std::collections::VecDeque;

use bytes::Bytes;

use super::{Known, Value, within_limit};
use crate::store::{ListOp, Loaded, SqlOp, TypedCall, TypedRow};

/// Loads a list key (see [`Loaded`]): its elements in order. A live key of another type answers
/// `too_large`, so that it is never taken for a list or for no key.
pub const LOAD: &str = "SELECT k.key IS NOT NULL AS present,
        k.key IS NOT NULL AND coalesce(k.type <> 'l' OR k.length > $3::bigint, true) AS too_large,
        CASE WHEN k.type = 'l' AND k.length <= $3::bigint THEN ARRAY(
            SELECT value FROM pgvs3.resp_list WHERE bucket_id = $1::bigint AND key = $2::text ORDER BY pos LIMIT $3::bigint)
        END AS items,
        NULL::bytea[] AS vals, NULL::float8[] AS scores, NULL::int8[] AS ints
   FROM (VALUES (1)) AS one
   LEFT JOIN pgvs3.resp_keys k
     ON k.bucket_id = $1::bigint AND k.key = $2::text AND (k.expires_at IS NULL OR k.expires_at > pgvs3.resp_now())";

/// About the memory an element takes besides its bytes.
const ELEMENT_BYTES: usize = 48;

/// A list's elements, head first; never empty (an emptied list is no key).
#[derive(Debug, Clone)]
pub struct List {
    elements: VecDeque<Bytes>,
    /// The elements' bytes, kept as they change.
    data: usize,
}

impl List {
    /// `None` for a load of no elements, which no live list answers.
    pub fn from_loaded(loaded: Loaded) -> Option<List> {
        if loaded.items.is_empty() {
            return None;
        }
        let data = loaded.items.iter().map(Bytes::len).sum();
        Some(List {
            elements: loaded.items.into(),
            data,
        })
    }

    pub fn bytes(&self) -> usize {
        self.data + ELEMENT_BYTES * self.elements.len()
    }

    fn new() -> List {
        List {
            elements: VecDeque::new(),
            data: 0,
        }
    }

    fn len(&self) -> i64 {
        self.elements.len() as i64
    }

    fn push(&mut self, left: bool, element: Bytes) {
        self.data += element.len();
        match left {
            true => self.elements.push_front(element),
            false => self.elements.push_back(element),
        }
    }

    fn pop(&mut self, left: bool) -> Option<Bytes> {
        let element = match left {
            true => self.elements.pop_front(),
            false => self.elements.pop_back(),
        }?;
        self.data -= element.len();
        Some(element)
    }

    /// The element at `index` (negative: from the tail), as `pgvs3.resp_list_at` finds it.
    /// `Err`: the function's arithmetic overflows (it raises).
    fn at(&self, index: i64) -> Result<Option<&Bytes>, ()> {
        let from_head = match index {
            0.. => index,
            // OFFSET -idx - 1 from the tail.
            _ => self.len() - 1 - index.checked_neg().ok_or(())?.checked_sub(1).ok_or(())?,
        };
        Ok(usize::try_from(from_head).ok().and_then(|at| self.elements.get(at)))
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
    let list = match entry {
        None => None,
        Some(Value::List(list)) => Some(list),
        Some(_) => return None,
    };
    let row = match (op, list) {
        (ListOp::Lpush | ListOp::Rpush, None) if !call.args.is_empty() => {
            let mut list = List::new();
            let n = push(&mut list, op == ListOp::Lpush, &call.args);
            *entry = Some(Value::List(list));
            int(n)
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
    if matches!(entry, Some(Value::List(list)) if list.elements.is_empty()) {
        // `pgvs3.resp_list_shrink` deletes an emptied list.
        *entry = None;
    }
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
        true => list.elements.iter().take(take).cloned().map(Some).collect(),
        false => list.elements.iter().rev().take(take).cloned().map(Some).collect(),
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
        .cloned()
        .map(Some)
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
        .filter(|at| list.elements[*at] == element)
        .take(most)
    {
        gone[at] = true;
        removed += 1;
    }
    let mut at = 0;
    list.elements.retain(|_| {
        at += 1;
        !gone[at - 1]
    });
    list.data -= removed * element.len();
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
        Some(Value::List(list)) => match from_head {
            true => list.elements.front(),
            false => list.elements.back(),
        }?
        .clone(),
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
        list.pop(from_head);
        if list.elements.is_empty() && source != destination {
            known.insert(source.clone(), None);
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
            Some(Value::List(list)) => {
                assert_eq!(list.data, list.elements.iter().map(Bytes::len).sum::<usize>());
                Some(
                    list.elements
                        .iter()
                        .map(|element| String::from_utf8_lossy(element).into_owned())
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

    #[test]
    fn a_load_of_no_elements_is_no_list() {
        assert!(List::from_loaded(Loaded::default()).is_none());
        let Some(Value::List(loaded)) = list(&["ab", "c"]) else {
            unreachable!()
        };
        assert_eq!(loaded.bytes(), 3 + 2 * ELEMENT_BYTES);
    }
}
