//! The working set's hashes: a hash's fields in the order its small encoding answers them, and
//! the calls on it predicted (resp_hash.sql answers them).

use std::collections::HashMap;

use bytes::Bytes;

use super::changes::Changes;
use super::{Known, Value, within_limit};
use crate::resp::command::parse_integer;
use crate::store::{HashOp, HashWrite, Loaded, TypedCall, TypedRow};

/// Loads a hash (see [`Loaded`]): its fields and values in the order of its small encoding
/// (the order they were first added, older rows' in byte order), and in `ints` whether it is in
/// its large encoding (`-1`: not yet judged, before layout v51) and the keyspace's
/// `hash-max-listpack-entries` and `-value`.
pub const LOAD: &str = "WITH r AS (SELECT large FROM pgvs3.resp_keys
                    WHERE bucket_id = $1 AND key = $2 AND type = 'h'
                      AND (expires_at IS NULL OR expires_at > pgvs3.resp_now())),
          e AS (SELECT field, value, added FROM pgvs3.resp_hash
                 WHERE bucket_id = $1 AND key = $2 AND EXISTS (SELECT 1 FROM r)
                 ORDER BY added NULLS FIRST, field LIMIT $3::bigint + 1),
          c AS (SELECT count(*) > $3::bigint AS too_large FROM e)
     SELECT EXISTS (SELECT 1 FROM r) AS present, c.too_large,
            CASE WHEN NOT c.too_large THEN (SELECT array_agg(field ORDER BY added NULLS FIRST, field) FROM e) END AS items,
            CASE WHEN NOT c.too_large THEN (SELECT array_agg(value ORDER BY added NULLS FIRST, field) FROM e) END AS vals,
            NULL::float8[] AS scores,
            ARRAY[(SELECT CASE WHEN large IS NULL THEN -1 WHEN large THEN 1 ELSE 0 END FROM r),
                  enc.hash_entries, enc.hash_value] AS ints
       FROM c, pgvs3.resp_encodings($1) enc";

#[derive(Debug, Clone)]
pub struct Hash {
    /// Fields and values in the order the small encoding answers them.
    fields: Vec<(Bytes, Bytes)>,
    /// Each field's place in `fields`.
    places: HashMap<Bytes, usize>,
    /// In the large encoding, which answers in byte order; `None`: not judged yet.
    large: Option<bool>,
    /// `hash-max-listpack-entries` and `hash-max-listpack-value`, as loaded.
    max_entries: i64,
    max_value: i64,
    /// What the run's writes changed since the value was last written to the database.
    changes: Changes<Bytes>,
}

impl Hash {
    fn empty(max_entries: i64, max_value: i64) -> Hash {
        Hash {
            fields: Vec::new(),
            places: HashMap::new(),
            large: Some(false),
            max_entries,
            max_value,
            changes: Changes::default(),
        }
    }

    pub fn changes(&mut self) -> &mut Changes<Bytes> {
        &mut self.changes
    }

    /// The set-based write of what the run changed since its last round trip (see [`Changes`]).
    pub fn write(&mut self, start: HashWrite) -> HashWrite {
        let (places, fields) = (&self.places, &self.fields);
        self.changes.write(start, |field| {
            places.get(field).map(|&place| (place, fields[place].1.clone()))
        })
    }

    pub fn from_loaded(loaded: Loaded) -> Option<Hash> {
        let [large, max_entries, max_value] = loaded.ints[..] else {
            return None;
        };
        if loaded.items.len() != loaded.vals.len() {
            return None;
        }
        let mut hash = Hash::empty(max_entries, max_value);
        hash.large = match large {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        };
        for (field, value) in loaded.items.into_iter().zip(loaded.vals) {
            hash.places.insert(field.clone(), hash.fields.len());
            hash.fields.push((field, value));
        }
        (hash.places.len() == hash.fields.len()).then_some(hash)
    }

    pub fn bytes(&self) -> usize {
        self.fields
            .iter()
            .map(|(field, value)| 2 * field.len() + value.len() + 64)
            .sum()
    }

    fn get(&self, field: &[u8]) -> Option<&Bytes> {
        self.places.get(field).map(|&place| &self.fields[place].1)
    }

    /// Sets `field`; whether it was new (a new field goes last, as its `added` number is the
    /// next drawn).
    fn set(&mut self, field: &Bytes, value: Bytes) -> bool {
        self.changes
            .setting(field, self.places.get(field).map(|&place| &self.fields[place].1));
        match self.places.get(field) {
            Some(&place) => {
                self.fields[place].1 = value;
                false
            }
            None => {
                self.places.insert(field.clone(), self.fields.len());
                self.fields.push((field.clone(), value));
                true
            }
        }
    }

    fn remove(&mut self, field: &Bytes) -> bool {
        let Some(place) = self.places.remove(field) else {
            return false;
        };
        self.changes.removing(field, &self.fields[place].1);
        self.fields.remove(place);
        for (_, at) in self.places.iter_mut() {
            if *at > place {
                *at -= 1;
            }
        }
        true
    }

    /// Learns the encoding the database left a hash in at commit, and the keyspace's limits
    /// then (`hash-max-listpack-entries` and `-value`), when it did not know them: a hash made
    /// within the run (whose limits no load brought), or one loaded from before layout v51.
    /// Its HGETALL, HKEYS and HVALS, whose order is the encoding's, are answered from then on.
    pub fn settle(&mut self, large: Option<bool>, (max_entries, max_value): (i64, i64)) {
        if self.large.is_none() {
            self.large = large;
            self.max_entries = max_entries;
            self.max_value = max_value;
        }
    }

    /// After a write added `added` (fields and values): the large encoding once an element is
    /// past the value limit or the hash past the entries limit, as `pgvs3.resp_grown` judges.
    fn grown(&mut self, added: &[&Bytes]) {
        self.changes
            .grew(self.fields.len(), added.iter().map(|element| element.len()));
        if self.large != Some(false) {
            return;
        }
        let over = added.iter().any(|element| element.len() as i64 > self.max_value);
        if over || self.fields.len() as i64 > self.max_entries {
            self.large = Some(true);
        }
    }

    /// The fields and values in the order HGETALL answers them, if known.
    fn ordered(&self) -> Option<Vec<&(Bytes, Bytes)>> {
        let mut fields: Vec<&(Bytes, Bytes)> = self.fields.iter().collect();
        match self.large? {
            false => {}
            true => fields.sort_by(|a, b| a.0.cmp(&b.0)),
        }
        Some(fields)
    }
}

fn row_n(n: i64) -> TypedRow {
    TypedRow {
        n: Some(n),
        ..TypedRow::default()
    }
}

fn row_items(items: Vec<Option<Bytes>>) -> TypedRow {
    TypedRow {
        items,
        ..TypedRow::default()
    }
}

/// The row of a call on a hash (see [`super::predict`]).
pub fn predict(call: &TypedCall, known: &mut Known) -> Option<TypedRow> {
    let [key] = &call.keys[..] else {
        return None;
    };
    let slot = known.get_mut(key)?;
    let value = match slot {
        None => None,
        Some(Value::Hash(hash)) => Some(hash),
        Some(_) => return None,
    };
    let args = &call.args;
    if call.is(HashOp::Hget) || call.is(HashOp::Hmget) {
        if call.is(HashOp::Hget) && args.len() != 1 {
            return None;
        }
        let items: Vec<Option<Bytes>> = args
            .iter()
            .map(|field| value.as_ref().and_then(|hash| hash.get(field)).cloned())
            .collect();
        return within_limit(call, &items).then(|| row_items(items));
    }
    if call.is(HashOp::Hexists) || call.is(HashOp::Hstrlen) {
        let field = args.first()?;
        let found = value.as_ref().and_then(|hash| hash.get(field));
        return Some(row_n(match call.is(HashOp::Hexists) {
            true => i64::from(found.is_some()),
            false => found.map_or(0, |value| value.len() as i64),
        }));
    }
    if call.is(HashOp::Hlen) {
        return Some(row_n(value.map_or(0, |hash| hash.fields.len() as i64)));
    }
    if call.is(HashOp::Hgetall) || call.is(HashOp::Hkeys) || call.is(HashOp::Hvals) {
        let Some(hash) = value else {
            // A missing hash's reads answer 0 and nothing.
            return Some(TypedRow {
                n: Some(0),
                ..TypedRow::default()
            });
        };
        let ordered = hash.ordered()?;
        let items: Vec<Option<Bytes>> = match call.op() {
            "hgetall" => ordered
                .iter()
                .flat_map(|(field, value)| [Some(field.clone()), Some(value.clone())])
                .collect(),
            "hkeys" => ordered.iter().map(|(field, _)| Some(field.clone())).collect(),
            _ => ordered.iter().map(|(_, value)| Some(value.clone())).collect(),
        };
        return within_limit(call, &items).then(|| row_items(items));
    }
    // Writes. A coalesced run's forms (ints {1}) are not predicted.
    if call.is(HashOp::Hset) {
        if !call.ints.is_empty() || args.is_empty() || !args.len().is_multiple_of(2) {
            return None;
        }
        let hash = hash_to_write(known, key);
        let mut added = 0;
        for pair in args.chunks(2) {
            if hash.set(&pair[0], pair[1].clone()) {
                added += 1;
            }
        }
        hash.grown(&args.iter().collect::<Vec<_>>());
        return Some(row_n(added));
    }
    if call.is(HashOp::Hsetnx) {
        let [field, new] = &args[..] else {
            return None;
        };
        let hash = hash_to_write(known, key);
        if hash.get(field).is_some() {
            return Some(row_n(0));
        }
        hash.set(field, new.clone());
        hash.grown(&[field, new]);
        return Some(row_n(1));
    }
    if call.is(HashOp::Hincrby) {
        let ([field], [Some(by)]) = (&args[..], &call.ints[..]) else {
            return None;
        };
        let current = match value.as_ref().and_then(|hash| hash.get(field)) {
            None => 0,
            Some(current) => parse_integer(current)?,
        };
        let sum = current.checked_add(*by)?;
        let hash = hash_to_write(known, key);
        let text = Bytes::from(sum.to_string());
        hash.set(field, text.clone());
        hash.grown(&[field, &text]);
        return Some(row_n(sum));
    }
    if call.is(HashOp::Hdel) {
        if !call.ints.is_empty() {
            return None;
        }
        let Some(hash) = value else {
            return Some(row_n(0));
        };
        let removed = args.iter().filter(|field| hash.remove(field)).count() as i64;
        if hash.fields.is_empty() {
            known.insert(key.clone(), None);
        }
        return Some(row_n(removed));
    }
    None
}

/// The hash at `key` to write to, made when the key is absent: small, but by limits the run
/// does not know (the keyspace's parameters come with a load), so its encoding is taken as not
/// known until the key is loaded again.
fn hash_to_write<'a>(known: &'a mut Known, key: &str) -> &'a mut Hash {
    let slot = known.get_mut(key).expect("known before");
    if slot.is_none() {
        let mut hash = Hash::empty(0, 0);
        hash.large = None;
        *slot = Some(Value::Hash(hash));
    }
    match slot {
        Some(Value::Hash(hash)) => hash,
        _ => unreachable!("a hash, or made one above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(words: &str) -> TypedCall {
        let args: Vec<Bytes> = words.split(' ').map(|word| Bytes::from(word.to_owned())).collect();
        let name = words.split(' ').next().unwrap_or_default().to_ascii_lowercase();
        crate::resp::commands::hash::parse(&name, &args)
            .expect("parses")
            .expect("a hash command")
            .call
    }

    fn loaded(fields: &[(&str, &str)], large: i64) -> Known {
        let loaded = Loaded {
            present: true,
            items: fields.iter().map(|(field, _)| Bytes::from(field.to_string())).collect(),
            vals: fields.iter().map(|(_, value)| Bytes::from(value.to_string())).collect(),
            ints: vec![large, 128, 64],
            ..Loaded::default()
        };
        let mut known = Known::new();
        known.insert("h".into(), Hash::from_loaded(loaded).map(Value::Hash));
        known
    }

    fn bulks(items: &[Option<&str>]) -> Vec<Option<Bytes>> {
        items
            .iter()
            .map(|item| item.map(|text| Bytes::from(text.to_owned())))
            .collect()
    }

    #[test]
    fn writes_count_new_fields_and_reads_answer_them() {
        let mut known = Known::new();
        known.insert("h".into(), None);
        // A field named twice counts once; the last value wins.
        let row = predict(&call("HSET h a 1 b 2 a 3"), &mut known).unwrap();
        assert_eq!(row.n, Some(2));
        let row = predict(&call("HMGET h a b c"), &mut known).unwrap();
        assert_eq!(row.items, bulks(&[Some("3"), Some("2"), None]));
        assert_eq!(predict(&call("HSETNX h a 9"), &mut known).unwrap().n, Some(0));
        assert_eq!(predict(&call("HINCRBY h b 5"), &mut known).unwrap().n, Some(7));
        assert_eq!(predict(&call("HLEN h"), &mut known).unwrap().n, Some(2));
        // A hash made here has no known encoding limits: HGETALL is not predicted.
        assert!(predict(&call("HGETALL h"), &mut known).is_none());
        assert_eq!(predict(&call("HDEL h a b a"), &mut known).unwrap().n, Some(2));
        assert!(matches!(known.get("h"), Some(None)), "emptied: the key is gone");
        // A missing hash's reads.
        assert_eq!(predict(&call("HGETALL h"), &mut known).unwrap().n, Some(0));
        assert_eq!(predict(&call("HGET h a"), &mut known).unwrap().items, bulks(&[None]));
    }

    #[test]
    fn hgetall_answers_in_the_order_of_the_encoding() {
        let mut known = loaded(&[("z", "1"), ("a", "2")], 0);
        let row = predict(&call("HGETALL h"), &mut known).unwrap();
        assert_eq!(row.items, bulks(&[Some("z"), Some("1"), Some("a"), Some("2")]));
        assert_eq!(row.n, None);
        // A value past the listpack limit (64) converts it: byte order from then on.
        let long = "x".repeat(65);
        predict(&call(&format!("HSET h m {long}")), &mut known).unwrap();
        let row = predict(&call("HKEYS h"), &mut known).unwrap();
        assert_eq!(row.items, bulks(&[Some("a"), Some("m"), Some("z")]));
        // Not judged yet (a key from before layout v51): no order to predict.
        let mut known = loaded(&[("z", "1")], -1);
        assert!(predict(&call("HVALS h"), &mut known).is_none());
    }

    #[test]
    fn a_hash_made_in_a_run_answers_its_order_once_its_encoding_is_settled() {
        let mut known = Known::new();
        known.insert("h".into(), None);
        predict(&call("HSET h z 1 a 2"), &mut known).unwrap();
        // Made here: the keyspace's limits never came with a load, so no order yet.
        assert!(predict(&call("HGETALL h"), &mut known).is_none());
        let Some(Some(Value::Hash(hash))) = known.get_mut("h") else {
            panic!("a hash")
        };
        hash.settle(Some(false), (3, 64));
        let row = predict(&call("HKEYS h"), &mut known).unwrap();
        assert_eq!(row.items, bulks(&[Some("z"), Some("a")]));
        // Judged by the limits it settled with: past 3 entries, byte order.
        predict(&call("HSET h m 3 b 4"), &mut known).unwrap();
        let row = predict(&call("HKEYS h"), &mut known).unwrap();
        assert_eq!(row.items, bulks(&[Some("a"), Some("b"), Some("m"), Some("z")]));
        // What it knew stays: a settled hash is not settled again.
        let Some(Some(Value::Hash(hash))) = known.get_mut("h") else {
            panic!("a hash")
        };
        hash.settle(Some(false), (128, 64));
        assert_eq!(
            predict(&call("HKEYS h"), &mut known).unwrap().items,
            bulks(&[Some("a"), Some("b"), Some("m"), Some("z")])
        );
    }

    #[test]
    fn what_would_fail_or_is_unknown_is_not_predicted() {
        let mut known = loaded(&[("n", "abc"), ("big", "9223372036854775807")], 0);
        assert!(predict(&call("HINCRBY h n 1"), &mut known).is_none());
        assert!(predict(&call("HINCRBY h big 1"), &mut known).is_none());
        assert!(predict(&call("HINCRBYFLOAT h n 1.5"), &mut known).is_none());
        assert!(predict(&call("HGET other a"), &mut known).is_none());
        known.insert("l".into(), None);
        let mut limited = call("HGETALL h");
        limited.reply_limit = Some(40);
        assert!(predict(&limited, &mut known).is_none());
        // Nothing was changed by what was not predicted.
        assert_eq!(
            predict(&call("HGET h n"), &mut known).unwrap().items,
            bulks(&[Some("abc")])
        );
    }
}
