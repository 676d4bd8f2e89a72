//! CLIENT PAUSE and UNPAUSE: for a while, this gateway's clients wait before their commands
//! run (all of them, or those that write), as Redis postpones them.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use tokio::sync::watch;

#[derive(Debug, Clone, Copy)]
struct Paused {
    until: Instant,
    /// ALL: every command waits; else (WRITE) those that may write.
    all: bool,
}

pub(crate) struct Pause {
    state: watch::Sender<Option<Paused>>,
    /// Whether a pause was set and has not been lifted: a command's one check while none is.
    active: AtomicBool,
}

impl Default for Pause {
    fn default() -> Self {
        Pause {
            state: watch::Sender::new(None),
            active: AtomicBool::new(false),
        }
    }
}

impl Pause {
    /// Pauses until `until`. Over a running pause, as Redis: the later end and the stricter
    /// mode win.
    pub(crate) fn pause(&self, until: Instant, all: bool) {
        self.state.send_modify(|state| {
            *state = Some(match *state {
                Some(paused) => Paused {
                    until: paused.until.max(until),
                    all: paused.all || all,
                },
                None => Paused { until, all },
            });
        });
        self.active.store(true, Relaxed);
    }

    pub(crate) fn unpause(&self) {
        self.active.store(false, Relaxed);
        self.state.send_replace(None);
    }

    /// Ends a pause whose time is over, so that commands are back to their one check. Under
    /// the state's lock: a pause set meanwhile is not the expired one and stays.
    fn lift_expired(&self) {
        self.state.send_if_modified(|state| {
            if state.is_some_and(|paused| Instant::now() >= paused.until) {
                *state = None;
                self.active.store(false, Relaxed);
                return true;
            }
            false
        });
    }

    pub(crate) fn active(&self) -> bool {
        self.active.load(Relaxed)
    }

    /// Returns once a command that `writes` (or not) may run: at once unless a pause holds
    /// it, else when that pause ends or is lifted.
    pub(crate) async fn wait(&self, writes: bool) {
        let mut state = self.state.subscribe();
        loop {
            let Some(paused) = *state.borrow_and_update() else {
                return;
            };
            if Instant::now() >= paused.until {
                self.lift_expired();
                return;
            }
            if !(paused.all || writes) {
                return;
            }
            tokio::select! {
                _ = state.changed() => {}
                () = tokio::time::sleep_until(paused.until.into()) => {}
            }
        }
    }
}
