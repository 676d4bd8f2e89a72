//! Whether a write batch's COMMIT has gone out. Up to then a caller past its time limit may
//! drop the batch, which rolls it back; from then on dropping it cannot undo the commit (the
//! server may have it, and a cancel does not reach a COMMIT that waits for a synchronous
//! standby: PostgreSQL commits locally and only stops waiting). A caller that must not say
//! "cancelled" of a write that may land runs its work in [`CommitSent::scope`] and asks it.
//!
//! Task-local: the batch is made deep inside the work (its keys' locks, a script's session),
//! far from the caller's time limit; the work is polled in the caller's task.

use std::sync::Arc;

use tokio::sync::watch;

use crate::store::StoreError;

tokio::task_local! {
    static SIGNAL: CommitSent;
}

/// Set once a write batch run in its [`scope`](CommitSent::scope) sends its COMMIT, and with
/// it the signal it is [`inside`](CommitSent::inside) (a connection's, which must not drop its
/// batch for a gone client either once a COMMIT went out).
#[derive(Clone)]
pub struct CommitSent {
    sent: Arc<watch::Sender<bool>>,
    outer: Option<Box<CommitSent>>,
}

impl Default for CommitSent {
    fn default() -> CommitSent {
        CommitSent {
            sent: Arc::new(watch::Sender::new(false)),
            outer: None,
        }
    }
}

impl CommitSent {
    /// A signal whose COMMITs are signalled to `outer` too.
    pub fn inside(outer: &CommitSent) -> CommitSent {
        CommitSent {
            outer: Some(Box::new(outer.clone())),
            ..CommitSent::default()
        }
    }

    /// Runs `work` with its COMMITs signalled to this (and to what it is inside).
    pub fn scope<F: Future>(&self, work: F) -> impl Future<Output = F::Output> {
        SIGNAL.scope(self.clone(), work)
    }

    /// The signal the current task's work runs in, if any: for work of that task carried on
    /// another thread (a script's calls, made on its interpreter's thread).
    pub fn current() -> Option<CommitSent> {
        SIGNAL.try_with(CommitSent::clone).ok()
    }

    /// Forgets COMMITs sent so far: from now on [`is_sent`](CommitSent::is_sent) tells of the
    /// work that comes next (a connection's next command).
    pub fn clear(&self) {
        self.sent.send_replace(false);
    }

    fn mark(&self) {
        self.sent.send_replace(true);
        if let Some(outer) = &self.outer {
            outer.mark();
        }
    }

    pub fn is_sent(&self) -> bool {
        *self.sent.borrow()
    }

    /// Resolves once a COMMIT went out.
    pub async fn sent(&self) {
        let mut receiver = self.sent.subscribe();
        let _ = receiver.wait_for(|sent| *sent).await;
    }
}

/// Called once everything sent ahead of a pipelined COMMIT has answered: the server is then
/// running the COMMIT, and a cancel could no longer roll it back. (Before, a cancel hits a
/// statement ahead of it, which turns the COMMIT into a rollback; the one window left is a
/// statement's answer still in flight when the cancel goes out.)
pub(super) fn committing() {
    let _ = SIGNAL.try_with(CommitSent::mark);
}

/// What became of a batch whose COMMIT was sent: a database error means the transaction was
/// rolled back (a statement before COMMIT failed, or COMMIT itself did); a lost connection
/// (or a backend terminated) leaves it unknown whether the COMMIT was applied.
pub(super) fn outcome<T>(result: Result<T, StoreError>) -> Result<T, StoreError> {
    result.map_err(|err| match err {
        StoreError::Unavailable(why) => StoreError::CommitUnknown(why),
        err => err,
    })
}
