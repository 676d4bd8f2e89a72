//! What INFO's `stats`, `commandstats` and `errorstats` sections count, per command of the
//! command table: calls, their time, and the calls refused before they ran or answered with an
//! error; and the error replies by their code. Atomic counters in a slot per command, so
//! counting a call takes no lock on any connection's path (an error reply takes the codes').
//! CONFIG RESETSTAT zeroes them all.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::command::{COMMANDS, Spec};

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    usec: AtomicU64,
    /// Refused before running (arity, authentication, a read-only replica, a bad argument).
    rejected: AtomicU64,
    /// Ran and answered with an error.
    failed: AtomicU64,
}

pub(crate) struct CommandStats {
    /// One slot per entry of `COMMANDS`, in its order.
    commands: Box<[Counters]>,
    /// Calls of commands that exist (Redis's `total_commands_processed` leaves out the refused).
    processed: AtomicU64,
    /// Replies that were errors, refused calls (unknown commands among them) included.
    error_replies: AtomicU64,
    /// Error replies by code (their first word), at most `MAX_ERROR_CODES` codes.
    errors: Mutex<BTreeMap<String, u64>>,
}

/// Distinct error codes `errorstats` counts, as Redis's bound: a client's made-up codes
/// (`redis.error_reply` in a script) cannot grow it without end.
const MAX_ERROR_CODES: usize = 128;

impl Default for CommandStats {
    fn default() -> Self {
        CommandStats {
            commands: COMMANDS.iter().map(|_| Counters::default()).collect(),
            processed: AtomicU64::new(0),
            error_replies: AtomicU64::new(0),
            errors: Mutex::default(),
        }
    }
}

impl CommandStats {
    /// The slot of `spec`, which is an entry of `COMMANDS` (every `Spec` is): found by its
    /// address, not by a search of the table.
    fn slot(&self, spec: &'static Spec) -> Option<&Counters> {
        let offset = (spec as *const Spec as usize).checked_sub(COMMANDS.as_ptr() as usize)?;
        self.commands.get(offset / size_of::<Spec>())
    }

    /// A command that ran, taking `took`, answered with error `error` if it failed.
    pub(crate) fn called(&self, spec: &'static Spec, took: Duration, error: Option<&str>) {
        self.processed.fetch_add(1, Relaxed);
        if let Some(counters) = self.slot(spec) {
            counters.calls.fetch_add(1, Relaxed);
            counters
                .usec
                .fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Relaxed);
            if let Some(error) = error {
                counters.failed.fetch_add(1, Relaxed);
                self.error_reply(error);
            }
        }
    }

    /// A command refused before it ran with `error` (`None`: a command that does not exist).
    pub(crate) fn rejected(&self, spec: Option<&'static Spec>, error: &str) {
        self.error_reply(error);
        if let Some(counters) = spec.and_then(|spec| self.slot(spec)) {
            counters.rejected.fetch_add(1, Relaxed);
        }
    }

    fn error_reply(&self, error: &str) {
        self.error_replies.fetch_add(1, Relaxed);
        let code = error.split(' ').next().unwrap_or_default();
        let mut errors = self.errors.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let room = errors.len() < MAX_ERROR_CODES;
        match errors.get_mut(code) {
            Some(count) => *count += 1,
            None if room => {
                errors.insert(code.to_owned(), 1);
            }
            None => {}
        }
    }

    /// CONFIG RESETSTAT: every count back to zero.
    pub(crate) fn reset(&self) {
        for counters in self.commands.iter() {
            for counter in [&counters.calls, &counters.usec, &counters.rejected, &counters.failed] {
                counter.store(0, Relaxed);
            }
        }
        self.processed.store(0, Relaxed);
        self.error_replies.store(0, Relaxed);
        self.errors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }

    /// INFO's `errorstats`, as Redis 7.0 prints it: `errorstat_<code>:count=…` by code.
    pub(crate) fn error_section(&self) -> String {
        let mut text = String::from("# Errorstats\r\n");
        for (code, count) in self
            .errors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
        {
            text.push_str(&format!("errorstat_{code}:count={count}\r\n"));
        }
        text
    }

    pub(crate) fn processed(&self) -> u64 {
        self.processed.load(Relaxed)
    }

    pub(crate) fn error_replies(&self) -> u64 {
        self.error_replies.load(Relaxed)
    }

    /// INFO's `commandstats` lines, as Redis 7.0 prints them: the commands called or refused
    /// at least once, each `cmdstat_<name>:calls=…,usec=…,usec_per_call=…,rejected_calls=…,
    /// failed_calls=…`.
    pub(crate) fn section(&self) -> String {
        let mut text = String::from("# Commandstats\r\n");
        for (spec, counters) in COMMANDS.iter().zip(self.commands.iter()) {
            let calls = counters.calls.load(Relaxed);
            let rejected = counters.rejected.load(Relaxed);
            if calls == 0 && rejected == 0 {
                continue;
            }
            let usec = counters.usec.load(Relaxed);
            let per_call = if calls == 0 { 0.0 } else { usec as f64 / calls as f64 };
            text.push_str(&format!(
                "cmdstat_{}:calls={calls},usec={usec},usec_per_call={per_call:.2},rejected_calls={rejected},failed_calls={}\r\n",
                spec.name,
                counters.failed.load(Relaxed)
            ));
        }
        text
    }
}
