//! The working set's sets: what a set key holds, and the calls on it predicted, each row as
//! `pgvs3.resp_set` (gateway/migrations/functions/resp_set.sql) answers it.

use std::collections::BTreeSet;

use bytes::Bytes;

use super::changes::Changes;
use super::{Known, Value, within_limit};
use crate::resp::command::parse_integer;
use crate::store::{Loaded, SetOp, SetWrite, SqlOp, TypedCall, TypedRow};

/// Loads a set key (see [`Loaded`]): its members, and in `ints` what SMEMBERS orders them by:
/// the key's `large` mark (1 true, 0 false, -1 NULL: judged when read) and the bucket's
/// intset limit (`set-max-intset-entries`). A live key of another type answers `too_large`,
/// so that it is never taken for a set or for no key.
pub const LOAD: &str = "SELECT k.key IS NOT NULL AS present,
        k.key IS NOT NULL AND coalesce(k.type <> 's' OR m.members > $3::bigint, true) AS too_large,
        CASE WHEN k.type = 's' AND m.members <= $3::bigint THEN m.items END AS items,
        NULL::bytea[] AS vals, NULL::float8[] AS scores,
        CASE WHEN k.type = 's' AND m.members <= $3::bigint THEN ARRAY[CASE k.large WHEN true THEN 1 WHEN false THEN 0 ELSE -1 END,
                                          (pgvs3.resp_small_limits($1::bigint, 's')).entries] END AS ints
   FROM (VALUES (1)) AS one
   LEFT JOIN pgvs3.resp_keys k
     ON k.bucket_id = $1::bigint AND k.key = $2::text AND (k.expires_at IS NULL OR k.expires_at > pgvs3.resp_now())
   LEFT JOIN LATERAL (
        SELECT count(*) AS members, array_agg(member) AS items FROM (
            SELECT member FROM pgvs3.resp_set WHERE bucket_id = $1::bigint AND key = $2::text LIMIT least($3::bigint, 1099511627776) + 1) e) m
     ON k.type = 's'";

/// About the memory a member takes besides its bytes.
const MEMBER_BYTES: usize = 64;

/// How SMEMBERS orders a set: what `pgvs3.resp_large` answers of it (resp_keys.sql), which
/// `pgvs3.resp_grown` keeps as Redis converts an intset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    /// `large` false, an intset: numeric order.
    Small,
    /// `large` true: byte order.
    Large,
    /// `large` NULL (a key of before layout v51): judged by its members when read.
    Judged,
    /// Not known here: a set made in this run grew past a limit not loaded with it.
    Unknown,
}

/// A set's members; never empty (an emptied set is no key).
#[derive(Debug, Clone)]
pub struct Set {
    members: BTreeSet<Bytes>,
    encoding: Encoding,
    /// The bucket's intset limit, when loaded with the key.
    entries: Option<i64>,
    /// The members' bytes, kept as they change.
    data: usize,
    /// What the run's writes changed since the value was last written to the database.
    changes: Changes<()>,
}

impl Set {
    /// `None` for a load of no members, which no live set answers, or without its encoding.
    pub fn from_loaded(loaded: Loaded) -> Option<Set> {
        let [large, entries] = loaded.ints[..] else {
            return None;
        };
        let encoding = match large {
            1 => Encoding::Large,
            0 => Encoding::Small,
            -1 => Encoding::Judged,
            _ => return None,
        };
        let members: BTreeSet<Bytes> = loaded.items.into_iter().collect();
        if members.is_empty() {
            return None;
        }
        Some(Set {
            data: members.iter().map(Bytes::len).sum(),
            members,
            encoding,
            entries: Some(entries),
            changes: Changes::default(),
        })
    }

    pub fn bytes(&self) -> usize {
        self.data + MEMBER_BYTES * self.members.len()
    }

    /// A set SADD makes: `pgvs3.resp_create`'s row, `large` false.
    fn new() -> Set {
        Set {
            members: BTreeSet::new(),
            encoding: Encoding::Small,
            entries: None,
            data: 0,
            changes: Changes::default(),
        }
    }

    pub fn changes(&mut self) -> &mut Changes<()> {
        &mut self.changes
    }

    /// The set-based write of what the run changed since its last round trip (see [`Changes`]):
    /// members removed and added.
    pub fn write(&mut self, start: SetWrite) -> SetWrite {
        let members = &self.members;
        self.changes
            .write(start, |member| members.contains(member).then_some((0, ())))
    }

    /// Adds `member`; whether it was new.
    fn insert(&mut self, member: &Bytes) -> bool {
        if self.members.contains(member) {
            return false;
        }
        self.changes.setting(member, None);
        self.data += member.len();
        self.members.insert(member.clone())
    }

    /// Removes `member`; whether it was there.
    fn remove(&mut self, member: &Bytes) -> bool {
        if !self.members.remove(member) {
            return false;
        }
        self.changes.removing(member, &());
        self.data -= member.len();
        true
    }

    fn len(&self) -> i64 {
        self.members.len() as i64
    }

    /// Whether SMEMBERS orders it as an intset; `None`: not known here.
    fn small(&self) -> Option<bool> {
        match self.encoding {
            Encoding::Small => Some(true),
            Encoding::Large => Some(false),
            Encoding::Judged if self.members.iter().any(|member| resp_int(member).is_none()) => Some(false),
            Encoding::Judged => self.entries.map(|entries| self.len() <= entries),
            Encoding::Unknown => None,
        }
    }

    /// SADD added members of `args`: `pgvs3.resp_grown` marks an intset large once a member
    /// of the call (added or not) is no integer, or it holds more than the limit. The record
    /// of changes keeps the most members after such a write and, as its longest element, 1
    /// when a member of one is no integer (`pgvs3.resp_set_apply` judges by them).
    fn grown(&mut self, args: &[Bytes]) {
        self.changes.grew(
            self.members.len(),
            args.iter().map(|arg| usize::from(resp_int(arg).is_none())),
        );
        if !matches!(self.encoding, Encoding::Small | Encoding::Unknown) {
            return;
        }
        if args.iter().any(|arg| resp_int(arg).is_none()) {
            self.encoding = Encoding::Large;
        } else if self.encoding == Encoding::Small {
            self.encoding = match self.entries {
                Some(entries) if self.len() > entries => Encoding::Large,
                Some(_) => Encoding::Small,
                None => Encoding::Unknown,
            };
        }
    }

    /// SMEMBERS's order: an intset's by number (then bytes), a large set's by bytes; `None`
    /// when the encoding is not known and the two orders differ.
    fn ordered(&self) -> Option<Vec<Option<Bytes>>> {
        let by_bytes = || self.members.iter().cloned().map(Some).collect::<Vec<_>>();
        let by_number = || {
            let mut members: Vec<&Bytes> = self.members.iter().collect();
            // ORDER BY resp_int(member), member: ascending, NULLs last.
            members.sort_by_key(|member| {
                let number = resp_int(member);
                (number.is_none(), number, *member)
            });
            members.into_iter().cloned().map(Some).collect::<Vec<_>>()
        };
        match self.small() {
            Some(true) => Some(by_number()),
            Some(false) => Some(by_bytes()),
            None => {
                let (numbers, bytes) = (by_number(), by_bytes());
                (numbers == bytes).then_some(bytes)
            }
        }
    }
}

/// The integer `pgvs3.resp_int` reads a member as (resp_keys.sql): Redis's string2ll, but for
/// `-0`, which its pattern takes.
fn resp_int(member: &[u8]) -> Option<i64> {
    match member {
        b"-0" => Some(0),
        _ => parse_integer(member),
    }
}

fn int(n: i64) -> TypedRow {
    TypedRow {
        n: Some(n),
        ..TypedRow::default()
    }
}

/// The row of a call on a set (see [`super::predict`]). Predicted: SADD, SREM, SCARD,
/// SISMEMBER, SMISMEMBER, SMEMBERS (when its order is known).
pub fn predict(call: &TypedCall, known: &mut Known) -> Option<TypedRow> {
    let op = *SetOp::ALL.iter().find(|op| call.is(**op))?;
    let [key] = call.keys.as_slice() else {
        return None;
    };
    // ints {1}: SADDs or SREMs run as one call answer their members (resp/coalesce.rs).
    if call.ints.iter().any(Option::is_some) {
        return None;
    }
    let entry = known.get_mut(key)?;
    let set = match entry {
        None => None,
        Some(Value::Set(set)) => Some(set),
        Some(_) => return None,
    };
    let row = match (op, set) {
        (SetOp::Sadd, None) if !call.args.is_empty() => {
            let mut set = Set::new();
            let n = sadd(&mut set, &call.args);
            *entry = Some(Value::Set(set));
            int(n)
        }
        (SetOp::Sadd, Some(set)) if !call.args.is_empty() => int(sadd(set, &call.args)),
        (SetOp::Srem, None) => int(0),
        (SetOp::Srem, Some(set)) => int(call.args.iter().filter(|member| set.remove(member)).count() as i64),
        (SetOp::Scard, set) => int(set.map_or(0, |set| set.len())),
        (SetOp::Sismember, set) => {
            let [member] = call.args.as_slice() else {
                return None;
            };
            int(i64::from(set.is_some_and(|set| set.members.contains(member))))
        }
        (SetOp::Smismember, set) => {
            let scores: Vec<Option<f64>> = call
                .args
                .iter()
                .map(|member| {
                    Some(f64::from(u8::from(
                        set.as_ref().is_some_and(|set| set.members.contains(member)),
                    )))
                })
                .collect();
            // A score takes no more than an element of no bytes.
            if !within_limit(call, &vec![None; scores.len()]) {
                return None;
            }
            TypedRow {
                scores,
                ..TypedRow::default()
            }
        }
        (SetOp::Smembers, None) => TypedRow::default(),
        (SetOp::Smembers, Some(set)) => {
            let items = set.ordered()?;
            if !within_limit(call, &items) {
                return None;
            }
            TypedRow {
                items,
                ..TypedRow::default()
            }
        }
        _ => return None,
    };
    if matches!(entry, Some(Value::Set(set)) if set.members.is_empty()) {
        // `pgvs3.resp_settle` deletes an emptied set.
        *entry = None;
    }
    Some(row)
}

/// SADD: adds the members of `args` not there yet; n: how many.
fn sadd(set: &mut Set, args: &[Bytes]) -> i64 {
    let n = args.iter().filter(|member| set.insert(member)).count() as i64;
    if n > 0 {
        set.grown(args);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::commands::set::parse;
    use crate::resp::working_set::{known, loaded_list, loaded_set as set};

    fn call(words: &[&str]) -> TypedCall {
        let args: Vec<Bytes> = words
            .iter()
            .map(|word| Bytes::copy_from_slice(word.as_bytes()))
            .collect();
        let typed = parse(words[0], &args).ok().flatten().expect("a set command");
        typed.call
    }

    /// The members `key` holds, in byte order: `None` when it is known to be absent.
    fn members(known: &Known, key: &str) -> Option<Vec<String>> {
        match known.get(key).expect("a known key") {
            None => None,
            Some(Value::Set(set)) => {
                assert_eq!(set.data, set.members.iter().map(Bytes::len).sum::<usize>());
                Some(
                    set.members
                        .iter()
                        .map(|member| String::from_utf8_lossy(member).into_owned())
                        .collect(),
                )
            }
            Some(other) => panic!("not a set: {other:?}"),
        }
    }

    fn owned(members: &[&str]) -> Option<Vec<String>> {
        Some(members.iter().map(|member| member.to_string()).collect())
    }

    /// Predicts `words` on `known`, which must be predicted: (n, items, scores).
    fn predicted(known: &mut Known, words: &[&str]) -> (Option<i64>, Vec<String>, Vec<f64>) {
        let row = predict(&call(words), known).unwrap_or_else(|| panic!("{words:?} predicted"));
        assert!(row.err.is_none() && row.cut.is_none());
        let items = row
            .items
            .iter()
            .map(|item| String::from_utf8_lossy(item.as_ref().expect("no nil member")).into_owned())
            .collect();
        let scores = row.scores.iter().map(|score| score.expect("no NULL score")).collect();
        (row.n, items, scores)
    }

    fn int(n: i64) -> (Option<i64>, Vec<String>, Vec<f64>) {
        (Some(n), vec![], vec![])
    }

    fn smembers(known: &mut Known, key: &str) -> Vec<String> {
        let (n, items, scores) = predicted(known, &["smembers", key]);
        assert!(n.is_none() && scores.is_empty());
        items
    }

    #[test]
    fn sadd_and_srem_count_distinct_members_and_an_emptied_set_goes() {
        let mut known = known(&[("s", None)]);
        assert_eq!(predicted(&mut known, &["sadd", "s", "a", "b", "a"]), int(2));
        assert_eq!(predicted(&mut known, &["sadd", "s", "b", "c"]), int(1));
        assert_eq!(predicted(&mut known, &["sadd", "s", "c"]), int(0));
        assert_eq!(predicted(&mut known, &["srem", "s", "a", "a", "z"]), int(1));
        assert_eq!(members(&known, "s"), owned(&["b", "c"]));
        assert_eq!(predicted(&mut known, &["scard", "s"]), int(2));
        assert_eq!(predicted(&mut known, &["srem", "s", "c", "b"]), int(2));
        assert_eq!(members(&known, "s"), None);
        assert_eq!(predicted(&mut known, &["srem", "s", "b"]), int(0));
        assert_eq!(predicted(&mut known, &["scard", "s"]), int(0));
        assert_eq!(members(&known, "s"), None);
    }

    #[test]
    fn membership_answers_one_or_zero_per_member() {
        let mut known = known(&[("s", set(&["a", "b"], 1, 512)), ("none", None)]);
        assert_eq!(predicted(&mut known, &["sismember", "s", "a"]), int(1));
        assert_eq!(predicted(&mut known, &["sismember", "s", "z"]), int(0));
        assert_eq!(predicted(&mut known, &["sismember", "none", "a"]), int(0));
        assert_eq!(
            predicted(&mut known, &["smismember", "s", "a", "z", "a", "b"]),
            (None, vec![], vec![1.0, 0.0, 1.0, 1.0])
        );
        assert_eq!(
            predicted(&mut known, &["smismember", "none", "a", "b"]),
            (None, vec![], vec![0.0, 0.0])
        );
        assert!(smembers(&mut known, "none").is_empty());
    }

    /// As the reference gateway answered SMEMBERS: `-0` is an integer to `pgvs3.resp_int`.
    #[test]
    fn smembers_orders_an_intset_by_number_and_a_large_set_by_bytes() {
        let mut known = known(&[("s", set(&["3", "1", "20", "-0", "0"], 0, 512))]);
        assert_eq!(smembers(&mut known, "s"), ["-0", "0", "1", "3", "20"]);
        // A member that is no integer converts it, even one already there.
        assert_eq!(predicted(&mut known, &["sadd", "s", "x"]), int(1));
        assert_eq!(smembers(&mut known, "s"), ["-0", "0", "1", "20", "3", "x"]);
        assert_eq!(predicted(&mut known, &["srem", "s", "x"]), int(1));
        assert_eq!(smembers(&mut known, "s"), ["-0", "0", "1", "20", "3"]);
        let mut known = self::known(&[("s", set(&["1", "2"], 0, 512))]);
        assert_eq!(predicted(&mut known, &["sadd", "s", "10", "2", "b"]), int(2));
        assert_eq!(smembers(&mut known, "s"), ["1", "10", "2", "b"]);
        // Adding nothing converts nothing.
        let mut known = self::known(&[("s", set(&["2", "10"], 0, 512))]);
        assert_eq!(predicted(&mut known, &["sadd", "s", "10"]), int(0));
        assert_eq!(smembers(&mut known, "s"), ["2", "10"]);
    }

    #[test]
    fn smembers_follows_an_intset_past_its_limit() {
        let mut known = known(&[("s", set(&["10", "2", "1"], 0, 3))]);
        assert_eq!(smembers(&mut known, "s"), ["1", "2", "10"]);
        assert_eq!(predicted(&mut known, &["sadd", "s", "4"]), int(1));
        assert_eq!(smembers(&mut known, "s"), ["1", "10", "2", "4"]);
        // Large for good.
        assert_eq!(predicted(&mut known, &["srem", "s", "4"]), int(1));
        assert_eq!(smembers(&mut known, "s"), ["1", "10", "2"]);
    }

    #[test]
    fn smembers_judges_a_set_without_a_mark_by_its_members_when_read() {
        let mut known = known(&[("s", set(&["10", "2", "1"], -1, 3))]);
        assert_eq!(smembers(&mut known, "s"), ["1", "2", "10"]);
        assert_eq!(predicted(&mut known, &["sadd", "s", "4"]), int(1));
        assert_eq!(smembers(&mut known, "s"), ["1", "10", "2", "4"]);
        assert_eq!(predicted(&mut known, &["srem", "s", "4"]), int(1));
        assert_eq!(smembers(&mut known, "s"), ["1", "2", "10"]);
        assert_eq!(predicted(&mut known, &["sadd", "s", "a"]), int(1));
        assert_eq!(predicted(&mut known, &["srem", "s", "1"]), int(1));
        assert_eq!(smembers(&mut known, "s"), ["10", "2", "a"]);
    }

    #[test]
    fn smembers_of_a_set_made_here_only_when_both_orders_agree() {
        // The bucket's intset limit came with no load.
        let mut known = known(&[("s", None), ("t", None)]);
        assert_eq!(predicted(&mut known, &["sadd", "s", "10", "9"]), int(2));
        assert!(predict(&call(&["smembers", "s"]), &mut known).is_none());
        assert_eq!(predicted(&mut known, &["srem", "s", "10"]), int(1));
        assert_eq!(smembers(&mut known, "s"), ["9"]);
        assert_eq!(predicted(&mut known, &["sadd", "s", "1", "2"]), int(2));
        assert_eq!(smembers(&mut known, "s"), ["1", "2", "9"]);
        assert_eq!(predicted(&mut known, &["sadd", "t", "10", "b"]), int(2));
        assert_eq!(smembers(&mut known, "t"), ["10", "b"]);
        assert_eq!(predicted(&mut known, &["sadd", "t", "9"]), int(1));
        assert_eq!(smembers(&mut known, "t"), ["10", "9", "b"]);
    }

    #[test]
    fn declines_what_it_does_not_model_and_changes_nothing() {
        let mut known = known(&[("s", set(&["a", "b"], 1, 512)), ("list", loaded_list(&["a"]))]);
        for words in [
            &["sadd", "unknown", "a"][..],
            &["scard", "unknown"],
            &["sadd", "list", "a"],
            &["srem", "list", "a"],
            &["scard", "list"],
            &["sismember", "list", "a"],
            &["smembers", "list"],
            &["spop", "s"],
            &["srandmember", "s"],
            &["smove", "s", "t", "a"],
            &["sinter", "s"],
            &["sunionstore", "s", "s"],
            &["sscan", "s", "0"],
        ] {
            assert!(predict(&call(words), &mut known).is_none(), "{words:?}");
        }
        // SADDs run as one call answer their members (resp/coalesce.rs).
        let mut coalesced = call(&["sadd", "s", "c"]);
        coalesced.ints = vec![Some(1)];
        assert!(predict(&coalesced, &mut known).is_none());
        assert_eq!(members(&known, "s"), owned(&["a", "b"]));
    }

    #[test]
    fn declines_a_reply_near_its_limit() {
        let mut known = known(&[("s", set(&["0123456789abcdef", "x"], 1, 512))]);
        // 16 + 1 bytes and 16 an element: within a quarter of 4 * 49, not of 4 * 48.
        let mut members = call(&["smembers", "s"]);
        members.reply_limit = Some(4 * 49);
        assert!(predict(&members, &mut known).is_some());
        members.reply_limit = Some(4 * 48);
        assert!(predict(&members, &mut known).is_none());
        let mut probe = call(&["smismember", "s", "a", "b", "c"]);
        probe.reply_limit = Some(4 * 48);
        assert!(predict(&probe, &mut known).is_some());
        probe.reply_limit = Some(4 * 47);
        assert!(predict(&probe, &mut known).is_none());
    }

    /// The set-based write of what the run changed: members removed and added (one removed
    /// and added again in both), the most members after a SADD that added, and whether one
    /// named a member that is no integer.
    #[test]
    fn the_write_is_of_the_members_removed_and_added() {
        let mut known = known(&[("s", set(&["1", "2", "3"], 0, 512))]);
        assert_eq!(predicted(&mut known, &["srem", "s", "2", "3", "9"]), int(2));
        assert_eq!(predicted(&mut known, &["sadd", "s", "2", "4", "5"]), int(3));
        assert_eq!(predicted(&mut known, &["srem", "s", "5"]), int(1));
        // Adds nothing: not judged, its member no integer notwithstanding.
        assert_eq!(predicted(&mut known, &["sadd", "s", "1", "4"]), int(0));
        let Some(Some(Value::Set(value))) = known.get_mut("s") else {
            panic!("a set");
        };
        let write = value.write(SetWrite::new("s", true, false, false));
        let sorted = |members: &[(Bytes, ())]| {
            let mut members: Vec<Bytes> = members.iter().map(|(member, ())| member.clone()).collect();
            members.sort();
            members
        };
        let b = |text: &'static str| Bytes::from_static(text.as_bytes());
        assert_eq!(sorted(&write.gone), [b("2"), b("3")]);
        assert_eq!(sorted(&write.added), [b("2"), b("4")]);
        assert!(write.bump && write.changed.is_empty());
        assert_eq!((write.peak, write.longest), (4, 0));
        assert_eq!(predicted(&mut known, &["sadd", "s", "x", "1"]), int(1));
        assert_eq!(predicted(&mut known, &["srem", "s", "x"]), int(1));
        let Some(Some(Value::Set(value))) = known.get_mut("s") else {
            panic!("a set");
        };
        let write = value.write(SetWrite::new("s", true, false, false));
        assert!(write.bump && write.gone.is_empty() && write.added.is_empty());
        assert_eq!((write.peak, write.longest), (4, 1));
        // The record starts over.
        assert!(value.write(SetWrite::new("s", true, false, false)).is_empty());
    }

    #[test]
    fn a_load_without_members_or_its_encoding_is_no_set() {
        let loaded = |items: Vec<Bytes>, ints: Vec<i64>| Loaded {
            present: true,
            items,
            ints,
            ..Loaded::default()
        };
        let a = || vec![Bytes::from_static(b"a")];
        assert!(Set::from_loaded(loaded(Vec::new(), vec![0, 512])).is_none());
        assert!(Set::from_loaded(loaded(a(), Vec::new())).is_none());
        assert!(Set::from_loaded(loaded(a(), vec![2, 512])).is_none());
        assert!(Set::from_loaded(loaded(a(), vec![0, 512, 1])).is_none());
        let set = Set::from_loaded(loaded(
            vec![Bytes::from_static(b"ab"), Bytes::from_static(b"ab")],
            vec![0, 512],
        ))
        .expect("a set");
        assert_eq!(set.len(), 1);
        assert_eq!(set.bytes(), 2 + MEMBER_BYTES);
    }
}
