//! Names the database said do not exist (access keys, buckets), remembered briefly so that a
//! client sending random keys or bucket names does not make every request a catalog query
//! before admission.
//!
//! A miss is remembered with the catalog version this gateway had loaded when it asked, and
//! counts only while that is still the loaded version: any reload (NOTIFY on a primary, the
//! poll on a standby) forgets every miss, so a key or bucket created elsewhere works as soon
//! as the reload that brings it — and a miss read just before a creation but recorded after
//! the reload cannot outlive it. The TTL bounds how long a miss stands while no reload comes;
//! the entry cap bounds memory whatever the client sends.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Most misses remembered; the oldest go first.
pub(super) const MAX_MISSES: usize = 10_000;
/// How long a miss stands without a reload.
pub(super) const MISS_TTL: Duration = Duration::from_secs(3);

#[derive(Default)]
pub(super) struct CatalogMisses {
    /// When each name was found missing, and at which loaded catalog version.
    by_name: HashMap<String, Miss>,
    /// Names in the order they were recorded (a name recorded again appears twice; the stale
    /// occurrence is skipped on eviction by comparing its time).
    order: VecDeque<(String, Instant)>,
}

#[derive(Clone, Copy)]
struct Miss {
    at: Instant,
    version: i64,
}

impl CatalogMisses {
    /// Whether `name` is known missing as of the loaded catalog `version`.
    pub(super) fn contains(&self, name: &str, version: i64, now: Instant) -> bool {
        self.by_name
            .get(name)
            .is_some_and(|miss| miss.version == version && now.duration_since(miss.at) < MISS_TTL)
    }

    /// Records that `name` was missing when the loaded catalog was at `asked_at`; ignored when
    /// a reload came in between (`loaded` is the version loaded now).
    pub(super) fn record(&mut self, name: &str, asked_at: i64, loaded: i64, now: Instant) {
        if asked_at != loaded {
            return;
        }
        while !self.by_name.contains_key(name) && self.by_name.len() >= MAX_MISSES {
            let Some((oldest, at)) = self.order.pop_front() else {
                break;
            };
            if self.by_name.get(&oldest).is_some_and(|miss| miss.at == at) {
                self.by_name.remove(&oldest);
            }
        }
        self.by_name.insert(
            name.to_owned(),
            Miss {
                at: now,
                version: asked_at,
            },
        );
        self.order.push_back((name.to_owned(), now));
        // Re-recorded names leave stale occurrences behind; keep the queue within twice the cap.
        if self.order.len() > 2 * MAX_MISSES {
            let by_name = &self.by_name;
            self.order
                .retain(|(name, at)| by_name.get(name).is_some_and(|miss| miss.at == *at));
        }
    }

    /// Forgets `name` (created through this gateway, before its reload arrives).
    pub(super) fn remove(&mut self, name: &str) {
        self.by_name.remove(name);
    }

    /// Forgets every miss (the catalog reloaded).
    pub(super) fn clear(&mut self) {
        self.by_name.clear();
        self.order.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_miss_stands_for_its_version_and_ttl_only() {
        let mut misses = CatalogMisses::default();
        let now = Instant::now();
        misses.record("k", 4, 4, now);
        assert!(misses.contains("k", 4, now));
        assert!(!misses.contains("k", 5, now), "a newer catalog forgets it");
        assert!(!misses.contains("k", 4, now + MISS_TTL), "expired");
        misses.remove("k");
        assert!(!misses.contains("k", 4, now));
    }

    #[test]
    fn a_miss_asked_before_a_reload_is_not_recorded() {
        let mut misses = CatalogMisses::default();
        let now = Instant::now();
        misses.record("k", 4, 5, now);
        assert!(!misses.contains("k", 5, now));
    }

    #[test]
    fn the_oldest_misses_go_first_at_the_cap() {
        let mut misses = CatalogMisses::default();
        let now = Instant::now();
        for i in 0..MAX_MISSES {
            misses.record(&format!("n{i}"), 1, 1, now);
        }
        // Recorded again: now the newest, so it outlives n1.
        misses.record("n0", 1, 1, now + Duration::from_millis(1));
        misses.record("extra", 1, 1, now + Duration::from_millis(2));
        assert_eq!(misses.by_name.len(), MAX_MISSES);
        assert!(misses.contains("n0", 1, now));
        assert!(!misses.contains("n1", 1, now));
        assert!(misses.contains("extra", 1, now));
        assert!(misses.order.len() <= 2 * MAX_MISSES);
    }
}
