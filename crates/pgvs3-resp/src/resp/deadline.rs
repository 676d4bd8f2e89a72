//! The time limits of a write's database work, and what its answer may say at them. Before
//! the write's COMMIT runs, `--resp-write-timeout` drops the work, which rolls it back: the
//! answer is "cancelled", and true. Once COMMIT runs (store/kv/commit_sent.rs), dropping the
//! work could not undo it (a COMMIT waiting for a synchronous standby commits locally even
//! when cancelled): the answer waits for COMMIT's outcome, for at most `--resp-commit-timeout`
//! from then; past that, or when the connection is lost meanwhile, the answer says the outcome is
//! unknown, never "cancelled" of something that may have landed.

use std::time::Duration;

use super::codec::Reply;
use crate::store::CommitSent;

/// What became of a write's work within its limits.
pub(crate) enum Bounded<T> {
    Done(T),
    /// Dropped at the write time limit (given) before its COMMIT ran: rolled back.
    Cancelled(Duration),
    /// Its COMMIT ran, and had no answer within the commit limit (given).
    Unknown(Duration),
}

/// The two limits of a write.
#[derive(Clone, Copy, Debug)]
pub struct WriteLimits {
    /// `--resp-write-timeout`: until COMMIT runs (`None`: none).
    pub write: Option<Duration>,
    /// `--resp-commit-timeout`: from COMMIT running to its answer (`None`: none).
    pub commit: Option<Duration>,
}

impl WriteLimits {
    /// Runs `work` within the limits; `write: None` leaves the work before COMMIT unbounded
    /// (a script, bounded by its own time limit). `connection`: the signal of the connection
    /// running it, told of its COMMIT too (so that a gone client's batch is not cut after it).
    pub(crate) async fn run<T>(self, connection: Option<&CommitSent>, work: impl Future<Output = T>) -> Bounded<T> {
        let signal = connection.map_or_else(CommitSent::default, CommitSent::inside);
        let work = signal.scope(work);
        futures::pin_mut!(work);
        let cancel_at = async {
            match self.write {
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        // Polled in this order: the deadline only fires when the work's last poll did not hand
        // COMMIT to its connection, so dropping the work then cannot commit it.
        tokio::select! {
            biased;
            out = &mut work => return Bounded::Done(out),
            () = signal.sent() => {}
            () = cancel_at => return Bounded::Cancelled(self.write.unwrap_or_default()),
        }
        match self.commit {
            Some(limit) => tokio::time::timeout(limit, work)
                .await
                .map_or(Bounded::Unknown(limit), Bounded::Done),
            None => Bounded::Done(work.await),
        }
    }
}

impl<T> Bounded<T> {
    /// The work's output, or the answer to a write that did not finish within its limits.
    pub(crate) fn answer(self) -> Result<T, Reply> {
        match self {
            Bounded::Done(out) => Ok(out),
            Bounded::Cancelled(limit) => Err(timed_out(limit, true)),
            Bounded::Unknown(limit) => Err(outcome_unknown(&format!(
                "it had no answer within {} s (--resp-commit-timeout)",
                limit.as_secs_f64()
            ))),
        }
    }
}

/// The answer to commands dropped at their time limit, before they took effect.
pub(crate) fn timed_out(limit: Duration, write: bool) -> Reply {
    let flag = match write {
        true => "--resp-write-timeout",
        false => "--resp-read-timeout",
    };
    Reply::error(format!(
        "ERR command timed out after {} s ({flag}) and was cancelled",
        limit.as_secs_f64()
    ))
}

/// The answer to a write whose COMMIT was sent but whose outcome is not known (`why`): it may
/// have been applied, so a client must not take it as failed (and retry an INCR twice).
pub(crate) fn outcome_unknown(why: &str) -> Reply {
    Reply::error(format!(
        "ERR outcome unknown: the write's COMMIT was sent but {why}; it may or may not have been applied"
    ))
}
