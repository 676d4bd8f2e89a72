//! Which of a script's calls may borrow their keys (run.rs `RunSet::borrow`): learned from
//! the runs that loaded them, so that a run can take a key first used on the way from the
//! working set's value, or as absent, without loading it, and have that checked when it
//! commits. A job queue's script finds the job it works on that way (its hash, kept from the
//! run that made it), and looks at keys named after the job that hardly ever exist (BullMQ's
//! `ZCARD <job>:unsuccessful` and `SCARD <job>:dependencies` when a job finishes): each was a
//! round trip inside the queue keys' locks.
//!
//! A call is known by its keyspace, its script (SHA1 or function name), its place among the
//! run's calls and the key's place among its keys. A borrow goes wrong when another writer
//! changed the key since its value was kept (another gateway's run, a client's command), when
//! a script's branches put another call at that place, or when the key exists after all: the
//! run then starts over without speculation (a whole run's time), and its call sites are
//! doubted for their next runs.

use std::collections::HashMap;
use std::sync::Mutex;

/// Loads that found the key absent, in a row, before a call's key is taken as absent unloaded.
const PROVEN: u8 = 2;

/// The runs of a call site that load its keys after a run that borrowed there missed; doubled
/// for each miss after it without a run between that borrowed there and committed, up to
/// ×2^[`MOST_DOUBLINGS`] (a key another writer changes all the time: a miss in ~1,000 runs).
const DOUBT: u16 = 8;
const MOST_DOUBLINGS: u8 = 7;

/// The most call sites remembered (bounded: script bodies and their calls come from clients);
/// past it, all are forgotten and learned again.
const MOST_SITES: usize = 4096;

/// A script's call and the key's place among its keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallSite {
    pub bucket: i64,
    pub script: String,
    pub call: u32,
    pub key: u8,
}

/// What a call site may borrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Borrowing {
    /// Nothing: its keys are loaded.
    Nothing,
    /// A value the working set keeps.
    Kept,
    /// A kept value, or else the key as absent.
    KeptOrAbsent,
}

#[derive(Debug, Default, Clone, Copy)]
struct Learned {
    /// Loads in a row that found the key absent (at most [`PROVEN`]).
    absent: u8,
    /// Runs left that load rather than borrow, after a miss.
    doubt: u16,
    /// Misses since a run that borrowed here last committed.
    misses: u8,
}

#[derive(Default)]
pub struct CallSites {
    sites: Mutex<HashMap<CallSite, Learned>>,
}

impl CallSites {
    fn sites(&self) -> std::sync::MutexGuard<'_, HashMap<CallSite, Learned>> {
        self.sites.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What the key of `site` may be borrowed as; a doubted site counts one run down.
    pub fn borrowing(&self, site: &CallSite) -> Borrowing {
        let mut sites = self.sites();
        let Some(learned) = sites.get_mut(site) else {
            return Borrowing::Kept;
        };
        if learned.doubt > 0 {
            learned.doubt -= 1;
            return Borrowing::Nothing;
        }
        match learned.absent >= PROVEN {
            true => Borrowing::KeptOrAbsent,
            false => Borrowing::Kept,
        }
    }

    fn learned(&self, site: CallSite, change: impl FnOnce(&mut Learned)) {
        let mut sites = self.sites();
        if sites.len() >= MOST_SITES && !sites.contains_key(&site) {
            sites.clear();
        }
        change(sites.entry(site).or_default());
    }

    /// A load of the key of `site` found it `absent` or not.
    pub fn learn(&self, site: CallSite, absent: bool) {
        self.learned(site, |learned| {
            learned.absent = match absent {
                true => (learned.absent + 1).min(PROVEN),
                false => 0,
            }
        });
    }

    /// A run that borrowed keys at `sites` missed: they load their keys for a while, longer
    /// after each miss in a row.
    pub fn doubt(&self, sites: &[CallSite]) {
        for site in sites {
            self.learned(site.clone(), |learned| {
                learned.doubt = DOUBT << learned.misses;
                learned.misses = (learned.misses + 1).min(MOST_DOUBLINGS);
            });
        }
    }

    /// A run that borrowed keys at `sites` committed: the next miss there starts the doubt over.
    pub fn committed(&self, sites: &[CallSite]) {
        let mut all = self.sites();
        for site in sites {
            if let Some(learned) = all.get_mut(site) {
                learned.misses = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(call: u32) -> CallSite {
        CallSite {
            bucket: 1,
            script: "sha".to_owned(),
            call,
            key: 0,
        }
    }

    #[test]
    fn a_key_is_taken_as_absent_after_proven_absent_loads_until_one_finds_it() {
        let sites = CallSites::default();
        assert_eq!(sites.borrowing(&site(3)), Borrowing::Kept);
        sites.learn(site(3), true);
        assert_eq!(sites.borrowing(&site(3)), Borrowing::Kept);
        sites.learn(site(3), true);
        assert_eq!(sites.borrowing(&site(3)), Borrowing::KeptOrAbsent);
        assert_eq!(
            sites.borrowing(&site(4)),
            Borrowing::Kept,
            "another call learned nothing"
        );
        sites.learn(site(3), false);
        assert_eq!(sites.borrowing(&site(3)), Borrowing::Kept);
        sites.learn(site(3), true);
        sites.learn(site(3), true);
        assert_eq!(sites.borrowing(&site(3)), Borrowing::KeptOrAbsent);
    }

    #[test]
    fn a_site_that_missed_loads_for_its_next_runs() {
        let sites = CallSites::default();
        sites.learn(site(3), true);
        sites.learn(site(3), true);
        sites.doubt(&[site(3), site(5)]);
        for _ in 0..DOUBT {
            assert_eq!(sites.borrowing(&site(3)), Borrowing::Nothing);
        }
        assert_eq!(sites.borrowing(&site(3)), Borrowing::KeptOrAbsent);
        assert_eq!(sites.borrowing(&site(5)), Borrowing::Nothing);
        // A second miss in a row: twice as long.
        sites.doubt(&[site(3)]);
        for _ in 0..2 * DOUBT {
            assert_eq!(sites.borrowing(&site(3)), Borrowing::Nothing);
        }
        assert_eq!(sites.borrowing(&site(3)), Borrowing::KeptOrAbsent);
        // A run that borrowed there and committed: the next miss starts over.
        sites.committed(&[site(3)]);
        sites.doubt(&[site(3)]);
        for _ in 0..DOUBT {
            assert_eq!(sites.borrowing(&site(3)), Borrowing::Nothing);
        }
        assert_eq!(sites.borrowing(&site(3)), Borrowing::KeptOrAbsent);
        // Bounded.
        for _ in 0..2 * MOST_DOUBLINGS {
            sites.doubt(&[site(7)]);
        }
        let learned = sites.sites()[&site(7)];
        assert_eq!(learned.doubt, DOUBT << MOST_DOUBLINGS);
    }

    #[test]
    fn remembered_sites_are_bounded() {
        let sites = CallSites::default();
        for call in 0..MOST_SITES as u32 + 10 {
            sites.learn(site(call), true);
        }
        assert!(sites.sites().len() <= MOST_SITES);
    }
}
