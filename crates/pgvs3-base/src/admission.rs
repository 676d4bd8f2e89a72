//! Admission control: a bounded number of requests active per protocol, a bounded queue waiting
//! for at most a deadline, and a clear "slow down" beyond that — instead of unbounded queueing
//! that turns a burst into timeouts for everyone.
//!
//! The uncontended path is one `try_acquire`. Waiters queue fairly (FIFO) and a waiter that
//! gives up (client gone, deadline passed) leaves the queue at once. Callers admit a request
//! before reading its body or taking a database connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::Metrics;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_active: usize,
    pub max_waiting: usize,
    pub max_wait: Duration,
}

#[derive(Clone)]
pub struct Admission {
    protocol: &'static str,
    limits: Limits,
    active: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
    metrics: Metrics,
}

/// Why a request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// The waiting queue was full: rejected without waiting.
    QueueFull,
    /// Waited the whole deadline without a slot.
    TimedOut,
}

/// Held for as long as the request does work (including streaming its response body).
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    active: Arc<Semaphore>,
    metrics: Metrics,
    protocol: &'static str,
    max_active: usize,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        // The permit is released right after this; count it as gone already.
        let active = self.max_active - self.active.available_permits() - 1;
        self.metrics
            .admission_active
            .with_label_values(&[self.protocol])
            .set(active as i64);
    }
}

/// Decrements the waiting count however the wait ends, including cancellation.
struct Waiting<'a>(&'a AtomicUsize, &'a Metrics, &'static str);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let now = self.0.fetch_sub(1, Ordering::AcqRel) - 1;
        self.1.admission_waiting.with_label_values(&[self.2]).set(now as i64);
    }
}

impl Admission {
    pub fn new(protocol: &'static str, limits: Limits, metrics: Metrics) -> Admission {
        let limits = Limits {
            max_active: limits.max_active.max(1),
            ..limits
        };
        Admission {
            protocol,
            limits,
            active: Arc::new(Semaphore::new(limits.max_active)),
            waiting: Arc::new(AtomicUsize::new(0)),
            metrics,
        }
    }

    pub async fn admit(&self) -> Result<Admitted, Rejected> {
        if let Ok(permit) = Arc::clone(&self.active).try_acquire_owned() {
            return Ok(self.admitted(permit));
        }
        let queued = self.waiting.fetch_add(1, Ordering::AcqRel) + 1;
        let _waiting = Waiting(&self.waiting, &self.metrics, self.protocol);
        self.metrics
            .admission_waiting
            .with_label_values(&[self.protocol])
            .set(queued as i64);
        if queued > self.limits.max_waiting {
            return Err(self.reject(Rejected::QueueFull));
        }
        match tokio::time::timeout(self.limits.max_wait, Arc::clone(&self.active).acquire_owned()).await {
            Ok(Ok(permit)) => {
                self.metrics
                    .admitted_after_wait
                    .with_label_values(&[self.protocol])
                    .inc();
                Ok(self.admitted(permit))
            }
            // The semaphore is never closed; treat it like a timeout all the same.
            Ok(Err(_)) | Err(_) => Err(self.reject(Rejected::TimedOut)),
        }
    }

    /// Waits for a slot as long as it takes, outside the bounded queue: for a request admitted
    /// once that gave its slot back to wait on something else (a blocked RESP client woken to
    /// try again). Their number is bounded by their connections, and they must not be refused
    /// for a load they did not add to; the slots are granted in order all the same.
    pub async fn admit_again(&self) -> Result<Admitted, Rejected> {
        match Arc::clone(&self.active).acquire_owned().await {
            Ok(permit) => Ok(self.admitted(permit)),
            // The semaphore is never closed.
            Err(_) => Err(self.reject(Rejected::TimedOut)),
        }
    }

    fn admitted(&self, permit: OwnedSemaphorePermit) -> Admitted {
        let active = self.limits.max_active - self.active.available_permits();
        self.metrics
            .admission_active
            .with_label_values(&[self.protocol])
            .set(active as i64);
        Admitted {
            _permit: permit,
            active: Arc::clone(&self.active),
            metrics: self.metrics.clone(),
            protocol: self.protocol,
            max_active: self.limits.max_active,
        }
    }

    fn reject(&self, why: Rejected) -> Rejected {
        let reason = match why {
            Rejected::QueueFull => "queue_full",
            Rejected::TimedOut => "timed_out",
        };
        self.metrics
            .admission_rejected
            .with_label_values(&[self.protocol, reason])
            .inc();
        why
    }
}

/// Bytes the process may hold in memory for requests at once: bodies kept for an origin PUT
/// and range chunks being filled. A reservation never waits: when the budget is spent, the
/// caller takes its unbuffered path at once (staging through PostgreSQL, passing the range
/// through), so a burst of large requests cannot run the gateway out of memory.
#[derive(Clone)]
pub struct BufferBudget {
    bytes: Arc<Semaphore>,
    total: u64,
    in_use: prometheus::IntGauge,
    exhausted: prometheus::IntCounterVec,
}

/// Memory reserved from a [`BufferBudget`], given back on drop.
pub struct Reservation {
    _permit: OwnedSemaphorePermit,
    in_use: prometheus::IntGauge,
    bytes: i64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.in_use.sub(self.bytes);
    }
}

impl BufferBudget {
    pub fn new(total_bytes: u64, metrics: &Metrics) -> BufferBudget {
        let in_use = prometheus::IntGauge::new(
            "pgvs3_buffer_bytes_in_use",
            "Bytes held in memory for requests (origin PUT bodies, range fills)",
        )
        .expect("metric");
        let total = prometheus::IntGauge::new("pgvs3_buffer_bytes_budget", "The buffer budget (--buffer-budget)")
            .expect("metric");
        let exhausted = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "pgvs3_buffer_budget_exhausted_total",
                "Requests that took their unbuffered path because the buffer budget was spent",
            ),
            &["use"],
        )
        .expect("metric");
        let permits = usize::try_from(total_bytes)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        total.set(permits as i64);
        metrics.register(Box::new(in_use.clone()));
        metrics.register(Box::new(total));
        metrics.register(Box::new(exhausted.clone()));
        BufferBudget {
            bytes: Arc::new(Semaphore::new(permits)),
            total: permits as u64,
            in_use,
            exhausted,
        }
    }

    /// The whole budget: a reservation larger than this can never succeed.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Reserves `bytes` for `purpose` (a metric label), or `None` at once when they are not free.
    pub fn try_reserve(&self, bytes: u64, purpose: &str) -> Option<Reservation> {
        let permit = u32::try_from(bytes)
            .ok()
            .and_then(|bytes| Arc::clone(&self.bytes).try_acquire_many_owned(bytes).ok());
        let Some(permit) = permit else {
            self.exhausted.with_label_values(&[purpose]).inc();
            return None;
        };
        let bytes = bytes as i64;
        self.in_use.add(bytes);
        Some(Reservation {
            _permit: permit,
            in_use: self.in_use.clone(),
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(max_active: usize, max_waiting: usize, max_wait: Duration) -> Admission {
        Admission::new(
            "test",
            Limits {
                max_active,
                max_waiting,
                max_wait,
            },
            Metrics::new(),
        )
    }

    #[tokio::test]
    async fn a_full_queue_rejects_at_once_and_a_waiter_gets_the_next_slot() {
        let admission = admission(1, 1, Duration::from_secs(30));
        let first = admission.admit().await.unwrap();
        let queued = {
            let admission = admission.clone();
            tokio::spawn(async move { admission.admit().await.map(|_| ()) })
        };
        while admission.waiting.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(admission.admit().await.err(), Some(Rejected::QueueFull));
        drop(first);
        assert_eq!(queued.await.unwrap(), Ok(()));
        assert_eq!(admission.waiting.load(Ordering::Acquire), 0);
    }

    #[test]
    fn buffer_reservations_fail_at_once_when_spent_and_return_on_drop() {
        let budget = BufferBudget::new(10, &Metrics::new());
        let seven = budget.try_reserve(7, "test").expect("7 of 10 bytes");
        assert!(budget.try_reserve(4, "test").is_none(), "only 3 bytes are left");
        assert_eq!(budget.in_use.get(), 7);
        let three = budget.try_reserve(3, "test").expect("the last 3 bytes");
        drop(seven);
        assert_eq!(budget.in_use.get(), 3);
        assert!(budget.try_reserve(7, "test").is_some());
        drop(three);
        assert_eq!(budget.exhausted.with_label_values(&["test"]).get(), 1);
        assert!(
            budget.try_reserve(u64::from(u32::MAX) + 1, "test").is_none(),
            "beyond one reservation's size"
        );
    }

    #[tokio::test]
    async fn waiting_ends_at_the_deadline_and_cancelled_waiters_leave_the_queue() {
        let admission = admission(1, 4, Duration::from_millis(50));
        let _held = admission.admit().await.unwrap();
        assert_eq!(admission.admit().await.err(), Some(Rejected::TimedOut));
        let cancelled = tokio::time::timeout(Duration::from_millis(10), admission.admit()).await;
        assert!(cancelled.is_err());
        assert_eq!(
            admission.waiting.load(Ordering::Acquire),
            0,
            "the cancelled waiter left the queue"
        );
    }
}
