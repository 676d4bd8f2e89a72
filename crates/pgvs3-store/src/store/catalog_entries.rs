//! One kind of cached catalog entry (buckets, access keys), each remembered with the catalog
//! version of the snapshot it was read from.
//!
//! Entries arrive two ways: a whole reload (every row of one snapshot) and a single row read
//! outside a reload (a bucket or key first used before the NOTIFY-driven reload brings it).
//! Reloads overlap those reads, so a reload may install a snapshot *older* than a row learnt
//! a moment before. Keeping each entry's version lets the cache keep the newer of the two: a
//! reload never drops or rolls back what a newer snapshot already showed (a bucket created
//! through this gateway, with its ACLs or policy), and a row older than the last reload is
//! never cached (it may have been changed or deleted since).

use std::collections::HashMap;
use std::sync::Arc;

pub(super) struct CatalogEntries<V> {
    /// The catalog version of the last installed reload.
    reloaded_at: i64,
    by_name: HashMap<String, Entry<V>>,
}

struct Entry<V> {
    read_at: i64,
    value: Arc<V>,
}

impl<V> Default for CatalogEntries<V> {
    fn default() -> Self {
        CatalogEntries {
            reloaded_at: 0,
            by_name: HashMap::new(),
        }
    }
}

impl<V> CatalogEntries<V> {
    pub(super) fn get(&self, name: &str) -> Option<&Arc<V>> {
        self.by_name.get(name).map(|entry| &entry.value)
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Arc<V>> {
        self.by_name.values().map(|entry| &entry.value)
    }

    pub(super) fn remove(&mut self, name: &str) {
        self.by_name.remove(name);
    }

    /// Replaces the entries with a reload's, read at catalog version `version`, keeping those
    /// learnt from a newer snapshot than it.
    pub(super) fn install(&mut self, version: i64, rows: impl IntoIterator<Item = (String, Arc<V>)>) {
        let mut by_name: HashMap<String, Entry<V>> = rows
            .into_iter()
            .map(|(name, value)| {
                (
                    name,
                    Entry {
                        read_at: version,
                        value,
                    },
                )
            })
            .collect();
        for (name, entry) in self.by_name.drain() {
            if entry.read_at > version {
                by_name.insert(name, entry);
            }
        }
        self.by_name = by_name;
        self.reloaded_at = version;
    }

    /// Caches one row read outside a reload at catalog version `read_at`, unless it is older
    /// than what the cache already holds for it. Whether it was cached.
    pub(super) fn learn(&mut self, name: String, value: Arc<V>, read_at: i64) -> bool {
        if read_at < self.reloaded_at || self.by_name.get(&name).is_some_and(|known| known.read_at > read_at) {
            return false;
        }
        self.by_name.insert(name, Entry { read_at, value });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(entries: &CatalogEntries<String>) -> Vec<(String, String)> {
        let mut all: Vec<_> = entries
            .by_name
            .iter()
            .map(|(name, entry)| (name.clone(), String::clone(&entry.value)))
            .collect();
        all.sort();
        all
    }

    fn rows(of: &[(&str, &str)]) -> Vec<(String, Arc<String>)> {
        of.iter()
            .map(|(name, value)| ((*name).to_owned(), value_of(value)))
            .collect()
    }

    fn value_of(text: &str) -> Arc<String> {
        Arc::new(text.to_owned())
    }

    fn pairs(of: &[(&str, &str)]) -> Vec<(String, String)> {
        of.iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn a_reload_of_an_older_snapshot_keeps_what_a_newer_read_learnt() {
        let mut entries = CatalogEntries::default();
        entries.install(3, rows(&[("a", "a@3"), ("b", "b@3")]));
        // Read at 5: a new bucket, and a newer state of "a".
        assert!(entries.learn("new".into(), value_of("new@5"), 5));
        assert!(entries.learn("a".into(), value_of("a@5"), 5));
        // A reload whose snapshot (4) was taken before those reads finishes after them.
        entries.install(4, rows(&[("a", "a@4"), ("b", "b@4")]));
        assert_eq!(names(&entries), pairs(&[("a", "a@5"), ("b", "b@4"), ("new", "new@5")]));
        // The reload of their own snapshot or a newer one is authoritative: "new" was dropped since.
        entries.install(6, rows(&[("a", "a@6"), ("b", "b@6")]));
        assert_eq!(names(&entries), pairs(&[("a", "a@6"), ("b", "b@6")]));
    }

    #[test]
    fn a_row_older_than_the_cache_is_not_learnt() {
        let mut entries = CatalogEntries::default();
        entries.install(7, rows(&[("a", "a@7")]));
        // Read before the reload at 7: the key may have been deleted since.
        assert!(!entries.learn("gone".into(), value_of("gone@6"), 6));
        assert!(entries.get("gone").is_none());
        assert!(entries.learn("b".into(), value_of("b@9"), 9));
        assert!(
            !entries.learn("b".into(), value_of("b@8"), 8),
            "an older read of a learnt row"
        );
        assert_eq!(entries.get("b").map(|value| value.as_str()), Some("b@9"));
        assert!(
            entries.learn("a".into(), value_of("a@7'"), 7),
            "the reload's own version"
        );
        entries.remove("a");
        assert!(!entries.contains("a"));
    }
}
