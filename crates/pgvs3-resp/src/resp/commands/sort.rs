//! SORT and SORT_RO, as Redis 7's sort.c does them: the elements of a list, set or sorted set
//! read with their family's call, weighed (by themselves or by the keys and hash fields a BY
//! pattern names), sorted and cut in the gateway, then answered, or with GET patterns looked up,
//! or with STORE written as a list. Bounded: the elements read ([`MAX_SORT_BYTES`]) and the
//! keys BY and GET look up ([`MAX_SORT_LOOKUPS`]) are counted before they cost memory.

use std::cmp::Ordering;

use bytes::Bytes;

use super::family::{self, FamilyError};
use crate::resp::codec::Reply;
use crate::resp::command::{integer, key, syntax_error};
use crate::store::{KeyType, KvBatch, KvValue};

/// Most bytes of elements SORT reads from its key (the collection is sorted in memory).
pub const MAX_SORT_BYTES: i64 = 64 << 20;
/// Most keys and hash fields one SORT looks up for BY and GET (elements times patterns).
pub const MAX_SORT_LOOKUPS: usize = 100_000;

#[derive(Debug, Clone)]
pub struct Sort {
    key: String,
    /// BY's pattern, when it has a `*` (without one, nothing is sorted).
    by: Option<Bytes>,
    dont_sort: bool,
    gets: Vec<Bytes>,
    desc: bool,
    alpha: bool,
    /// LIMIT's offset and count.
    limit: (i64, i64),
    store: Option<String>,
}

impl Sort {
    /// STORE's destination.
    pub fn destination(&self) -> Option<&String> {
        self.store.as_ref()
    }

    /// `SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA]
    /// [STORE destination]`; SORT_RO takes no STORE (a syntax error, as in Redis).
    pub fn parse(read_only: bool, args: &[Bytes]) -> Result<Sort, Reply> {
        let mut sort = Sort {
            key: key(&args[1])?,
            by: None,
            dont_sort: false,
            gets: Vec::new(),
            desc: false,
            alpha: false,
            limit: (0, -1),
            store: None,
        };
        let mut j = 2;
        while j < args.len() {
            let left = args.len() - j - 1;
            match args[j].to_ascii_lowercase().as_slice() {
                b"asc" => sort.desc = false,
                b"desc" => sort.desc = true,
                b"alpha" => sort.alpha = true,
                b"limit" if left >= 2 => {
                    sort.limit = (integer(&args[j + 1])?, integer(&args[j + 2])?);
                    j += 2;
                }
                b"store" if left >= 1 && !read_only => {
                    sort.store = Some(key(&args[j + 1])?);
                    j += 1;
                }
                b"by" if left >= 1 => {
                    let pattern = &args[j + 1];
                    sort.dont_sort = !pattern.contains(&b'*');
                    sort.by = (!sort.dont_sort).then(|| pattern.clone());
                    j += 1;
                }
                b"get" if left >= 1 => {
                    sort.gets.push(args[j + 1].clone());
                    j += 1;
                }
                _ => return Err(syntax_error()),
            }
            j += 1;
        }
        Ok(sort)
    }

    pub fn keys(&self) -> Vec<&String> {
        std::iter::once(&self.key).chain(&self.store).collect()
    }

    pub async fn apply(&self, batch: &mut KvBatch) -> Result<Reply, FamilyError> {
        let kind = match batch.get(&self.key).map(|entry| &entry.value) {
            None => None,
            Some(KvValue::Typed(kind @ (KeyType::List | KeyType::Set | KeyType::Zset))) => Some(*kind),
            Some(_) => return Err(FamilyError::Reply(crate::resp::keys::wrongtype())),
        };
        let mut elements = match kind {
            None => Vec::new(),
            Some(kind) => {
                let (command, end): (&str, &[&str]) = match kind {
                    KeyType::List => ("lrange", &["0", "-1"]),
                    KeyType::Set => ("smembers", &[]),
                    _ => ("zrange", &["0", "-1"]),
                };
                let row = family::read_elements(batch, command, &self.key, end, MAX_SORT_BYTES, "SORT").await?;
                row.into_iter().map(Option::unwrap_or_default).collect()
            }
        };
        // A set has no order of its own: one without sorting is sorted as ALPHA, as Redis
        // does for STORE and scripts, so that every answer is the same.
        let (mut dont_sort, mut alpha, mut by) = (self.dont_sort, self.alpha, self.by.clone());
        if dont_sort && kind == Some(KeyType::Set) {
            (dont_sort, alpha, by) = (false, true, None);
        }
        let len = elements.len() as i64;
        let (offset, count) = self.limit;
        let mut start = offset.clamp(0, len);
        let mut end = if count < 0 {
            len - 1
        } else {
            start.saturating_add(count) - 1
        };
        if start >= len {
            start = len - 1;
            end = len - 2;
        }
        end = end.min(len - 1);
        if dont_sort {
            if self.desc {
                elements.reverse();
            }
        } else {
            let weights = match &by {
                Some(pattern) => {
                    let wanted: Vec<_> = elements.iter().map(|element| lookup_target(pattern, element)).collect();
                    lookups_within_bound(wanted.len())?;
                    family::look_up(batch, &wanted).await?
                }
                None => Vec::new(),
            };
            elements = sorted(elements, weights, by.is_some(), alpha, self.desc)?;
        }
        let chosen: &[Bytes] = if end >= start {
            &elements[start as usize..=end as usize]
        } else {
            &[]
        };
        let values: Vec<Option<Bytes>> = if self.gets.is_empty() {
            chosen.iter().cloned().map(Some).collect()
        } else {
            lookups_within_bound(chosen.len() * self.gets.len())?;
            let wanted: Vec<Target> = chosen
                .iter()
                .flat_map(|element| self.gets.iter().map(move |pattern| (pattern, element)))
                .map(|(pattern, element)| match &pattern[..] {
                    b"#" => Target::Itself(element.clone()),
                    _ => lookup_target(pattern, element),
                })
                .collect();
            family::look_up(batch, &wanted).await?
        };
        let Some(destination) = &self.store else {
            return Ok(Reply::Array(
                values
                    .into_iter()
                    .map(|value| value.map_or(Reply::Nil, Reply::Bulk))
                    .collect(),
            ));
        };
        let stored = values.len() as i64;
        let push = (!values.is_empty())
            .then(|| family::words("rpush", destination, values.into_iter().map(Option::unwrap_or_default)));
        family::replace(batch, destination, push).await?;
        Ok(Reply::Integer(stored))
    }
}

fn lookups_within_bound(lookups: usize) -> Result<(), FamilyError> {
    match lookups <= MAX_SORT_LOOKUPS {
        true => Ok(()),
        false => Err(FamilyError::Reply(Reply::error(format!(
            "ERR SORT would look up {lookups} keys or fields for BY and GET; pgvs3 looks up at most {MAX_SORT_LOOKUPS} (use LIMIT, fewer GET patterns or a smaller key)"
        )))),
    }
}

/// What a BY or GET pattern names for one element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `#`: the element itself.
    Itself(Bytes),
    /// A string key.
    Key(String),
    /// A field of a hash key (`pattern->field`).
    Field(String, Bytes),
    /// Nothing (no `*` in the pattern, or a key pgvs3 cannot hold): nil.
    Nothing,
}

/// Redis's `lookupKeyByPattern`: the first `*` replaced by the element, and what follows the
/// first `->` after it (when something does) a hash field.
fn lookup_target(pattern: &[u8], element: &[u8]) -> Target {
    let Some(star) = pattern.iter().position(|b| *b == b'*') else {
        return Target::Nothing;
    };
    let after = &pattern[star + 1..];
    let arrow = after
        .windows(2)
        .position(|pair| pair == b"->")
        .filter(|at| at + 2 < after.len());
    let (postfix, field) = match arrow {
        Some(at) => (&after[..at], Some(Bytes::copy_from_slice(&after[at + 2..]))),
        None => (after, None),
    };
    let mut name = Vec::with_capacity(pattern.len() + element.len());
    name.extend_from_slice(&pattern[..star]);
    name.extend_from_slice(element);
    name.extend_from_slice(postfix);
    let Ok(name) = key(&Bytes::from(name)) else {
        return Target::Nothing;
    };
    match field {
        Some(field) => Target::Field(name, field),
        None => Target::Key(name),
    }
}

/// What an element is sorted by.
enum Weight {
    Score(f64),
    /// ALPHA BY: the looked-up value, `None` when missing (first).
    Text(Option<Bytes>),
    /// ALPHA without BY: the element.
    Element,
}

/// Sorts as Redis's `sortCompare`: numbers by their value, equal ones by the elements' bytes;
/// ALPHA by bytes (the C locale's `strcoll`), a missing BY value first.
fn sorted(
    elements: Vec<Bytes>,
    weights: Vec<Option<Bytes>>,
    by: bool,
    alpha: bool,
    desc: bool,
) -> Result<Vec<Bytes>, FamilyError> {
    let mut weighed = Vec::with_capacity(elements.len());
    let mut weights = weights.into_iter();
    for element in elements {
        let looked_up = if by { weights.next().flatten() } else { None };
        let weight = match (alpha, by) {
            (true, true) => Weight::Text(looked_up),
            (true, false) => Weight::Element,
            // A BY key that is missing weighs 0.
            (false, true) if looked_up.is_none() => Weight::Score(0.0),
            (false, _) => {
                let text = looked_up.as_ref().unwrap_or(&element);
                Weight::Score(strtod(text).ok_or_else(|| {
                    FamilyError::Reply(Reply::error("ERR One or more scores can't be converted into double"))
                })?)
            }
        };
        weighed.push((element, weight));
    }
    weighed.sort_by(|(a, wa), (b, wb)| {
        let order = match (wa, wb) {
            (Weight::Score(x), Weight::Score(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal).then_with(|| a.cmp(b)),
            (Weight::Text(x), Weight::Text(y)) => x.cmp(y),
            _ => a.cmp(b),
        };
        if desc { order.reverse() } else { order }
    });
    Ok(weighed.into_iter().map(|(element, _)| element).collect())
}

/// A number as SORT reads one with C's `strtod`: leading white space, then a number that takes
/// the whole rest (an empty rest is 0); not NaN, not out of range.
fn strtod(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    let text = text.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    if text.is_empty() {
        return Some(0.0);
    }
    let value: f64 = text.parse().ok()?;
    let unsigned = text.trim_start_matches(['+', '-']).to_ascii_lowercase();
    let spelled_infinite = unsigned == "inf" || unsigned == "infinity";
    (!value.is_nan() && (value.is_finite() || spelled_infinite)).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_name_keys_and_fields_as_redis_does() {
        assert_eq!(lookup_target(b"w_*", b"3"), Target::Key("w_3".into()));
        assert_eq!(
            lookup_target(b"h_*->f", b"3"),
            Target::Field("h_3".into(), Bytes::from_static(b"f"))
        );
        // Nothing after the arrow: part of the key's name.
        assert_eq!(lookup_target(b"h_*->", b"3"), Target::Key("h_3->".into()));
        assert_eq!(lookup_target(b"nostar", b"3"), Target::Nothing);
        assert_eq!(lookup_target(b"a*b*c", b"1"), Target::Key("a1b*c".into()));
    }

    #[test]
    fn numbers_read_as_strtod_reads_them() {
        assert_eq!(strtod(b" 1.5"), Some(1.5));
        assert_eq!(strtod(b""), Some(0.0));
        assert_eq!(strtod(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(strtod(b"1e400"), None);
        assert_eq!(strtod(b"nan"), None);
        assert_eq!(strtod(b"1x"), None);
        assert_eq!(strtod(b"1 "), None);
    }
}
