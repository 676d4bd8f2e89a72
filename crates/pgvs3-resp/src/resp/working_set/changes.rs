//! What a run's speculated writes changed of a hash's, sorted set's or set's elements since
//! they were last written to the database (or loaded), so that they go as one set-based write of
//! the differences (`pgvs3.resp_hash_apply`, `pgvs3.resp_zset_apply`, `pgvs3.resp_set_apply`)
//! rather than as the calls. A set's members have no values (`()`).

use std::collections::HashMap;

use bytes::Bytes;

use crate::store::{ElementWrites, Family};

/// A value's record of its changes: each element's value when first changed (`None`: absent)
/// and whether a write removed it since; whether any write changed anything; the most elements
/// after a write and the longest element a write added (what the encoding is judged by).
#[derive(Debug, Clone, Default)]
pub struct Changes<V> {
    found: HashMap<Bytes, (Option<V>, bool)>,
    dirty: bool,
    peak: usize,
    longest: usize,
}

impl<V: Clone + PartialEq> Changes<V> {
    /// A write is about to set `element`, whose value is `current`.
    pub fn setting(&mut self, element: &Bytes, current: Option<&V>) {
        self.dirty = true;
        if !self.found.contains_key(element) {
            self.found.insert(element.clone(), (current.cloned(), false));
        }
    }

    /// A write is about to remove `element`, whose value is `current`.
    pub fn removing(&mut self, element: &Bytes, current: &V) {
        self.setting(element, Some(current));
        if let Some((_, removed)) = self.found.get_mut(element) {
            *removed = true;
        }
    }

    /// A write left `len` elements and added elements of `lengths`.
    pub fn grew(&mut self, len: usize, lengths: impl IntoIterator<Item = usize>) {
        self.peak = self.peak.max(len);
        self.longest = lengths.into_iter().fold(self.longest, usize::max);
    }

    /// The record starts over: the database has what it said.
    pub fn clear(&mut self) {
        *self = Changes {
            found: HashMap::new(),
            dirty: false,
            peak: 0,
            longest: 0,
        };
    }

    /// The set-based write of the record (a write that changed anything moves the key's
    /// version), the value now holding what `now` answers for an element (its place among the
    /// value's elements and its value, `None` when absent); the record starts over. A new element goes in the order of its place; one removed and set
    /// again is both gone and new (it goes last in a small hash's order, as Redis's listpack
    /// puts it).
    pub fn write(
        &mut self,
        mut write: ElementWrites<V>,
        now: impl Fn(&Bytes) -> Option<(usize, V)>,
    ) -> ElementWrites<V> {
        write.bump |= self.dirty;
        write.peak = self.peak as i64;
        write.longest = self.longest as i64;
        let mut added: Vec<(usize, Bytes, V)> = Vec::new();
        for (element, (was, removed)) in self.found.drain() {
            match (was, now(&element)) {
                (None, None) => {}
                (Some(was), None) => write.gone.push((element, was)),
                (None, Some((place, now))) => added.push((place, element, now)),
                (Some(was), Some((place, now))) if removed => {
                    added.push((place, element.clone(), now));
                    write.gone.push((element, was));
                }
                (Some(was), Some((_, now))) if was == now => {}
                (Some(was), Some((_, now))) => write.changed.push((element, was, now)),
            }
        }
        added.sort_by_key(|(place, _, _)| *place);
        write.added = added.into_iter().map(|(_, element, value)| (element, value)).collect();
        self.clear();
        write
    }
}

/// One key's share of a run's writes not yet sent, for a family written set-based: its family,
/// whether the key held a value when they began (`existed`), and whether one of them removed
/// its last element (`emptied`: the key's row goes, its TTL and encoding with it).
#[derive(Debug, Clone, Copy)]
pub struct Track {
    pub family: Family,
    existed: bool,
    emptied: bool,
}

impl Track {
    /// The families whose writes go set-based.
    pub fn kept(family: Family) -> bool {
        matches!(
            family,
            Family::Hash | Family::Zset | Family::Set | Family::Stream | Family::List
        )
    }

    /// The track of a key whose first write of `family` since the last round trip found it
    /// `present`.
    pub fn new(family: Family, present: bool) -> Track {
        Track {
            family,
            existed: present,
            emptied: false,
        }
    }

    /// Whether the key held a value when the writes began.
    pub fn existed(&self) -> bool {
        self.existed
    }

    /// Notes a predicted write that found the key `was_present` and left it `present`.
    pub fn note(&mut self, was_present: bool, present: bool) {
        self.emptied |= was_present && !present;
    }

    /// The write's beginning for `key` (an emptied key's version moves with its row).
    pub fn start<V>(&self, key: &str) -> ElementWrites<V> {
        ElementWrites::new(key, self.existed, self.emptied, self.emptied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(text: &str) -> Bytes {
        Bytes::from(text.to_owned())
    }

    /// The write of `changes` over a value whose elements are `now`, in their order.
    fn write(changes: &mut Changes<Bytes>, now: &[(&str, &str)]) -> ElementWrites<Bytes> {
        let start = Track::new(Family::Hash, true).start("k");
        changes.write(start, |element| {
            now.iter()
                .position(|(name, _)| b(name) == element)
                .map(|place| (place, b(now[place].1)))
        })
    }

    #[test]
    fn each_element_goes_by_what_it_was_and_is() {
        let mut changes = Changes::default();
        // Overwritten with another value, with the same one, removed, made, removed and made
        // again, made and removed.
        changes.setting(&b("kept"), Some(&b("1")));
        changes.setting(&b("same"), Some(&b("2")));
        changes.removing(&b("gone"), &b("3"));
        changes.setting(&b("new"), None);
        changes.removing(&b("again"), &b("4"));
        changes.setting(&b("again"), None);
        changes.setting(&b("fleeting"), None);
        changes.removing(&b("fleeting"), &b("5"));
        changes.grew(4, [3, 7]);
        let written = write(
            &mut changes,
            &[("same", "2"), ("kept", "9"), ("again", "6"), ("new", "8")],
        );
        assert!(written.bump);
        assert_eq!(written.changed, vec![(b("kept"), b("1"), b("9"))]);
        let mut gone = written.gone.clone();
        gone.sort();
        assert_eq!(gone, vec![(b("again"), b("4")), (b("gone"), b("3"))]);
        // New elements in their order in the value: one removed and set again goes where it
        // is now.
        assert_eq!(written.added, vec![(b("again"), b("6")), (b("new"), b("8"))]);
        assert_eq!((written.peak, written.longest), (4, 7));
        // The record starts over.
        assert!(write(&mut changes, &[]).is_empty());
    }

    #[test]
    fn a_key_emptied_goes_and_is_made_again_by_what_follows() {
        let mut track = Track::new(Family::Hash, true);
        track.note(true, false);
        track.note(false, true);
        let start: ElementWrites<Bytes> = track.start("k");
        assert!(start.existed && start.emptied && start.bump);
        // A key absent when the writes began is not emptied by a write that finds it absent.
        let mut track = Track::new(Family::Zset, false);
        track.note(false, false);
        let start: ElementWrites<f64> = track.start("k");
        assert!(!start.existed && !start.emptied && start.is_empty());
    }
}
