//! A closed-loop load generator: N workers each issue requests back to back for a duration (or
//! a request budget), after a warm-up whose samples are discarded. Reads are verified (every
//! byte); errors are counted by kind and never counted as samples. Protocols: S3 (`s3`), RESP
//! (`resp`), OJS (`ojs`) and the origin cache tier (`cache`, S3 requests to a cache bucket).

pub mod cache;
pub mod capacity;
pub mod cpu;
pub mod ojs;
pub mod report;
pub mod resp;
pub mod s3;
pub mod session;
pub mod stats;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use stats::{Outcome, Summary};

/// When a run stops.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Budget {
    pub workers: usize,
    pub warmup: Duration,
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
    pub timeout: Duration,
}

/// A case's request, as `run` issues it: the `sequence`-th request overall, sent by `worker`.
pub trait Request: Send + Sync + 'static {
    fn once(&self, worker: usize, sequence: u64) -> impl Future<Output = Outcome> + Send;
}

pub type RequestFuture = std::pin::Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// The `op` for `run` that sends `runner`'s requests.
pub fn requests<R: Request>(runner: Arc<R>) -> impl Fn(usize, u64) -> RequestFuture + Send + Sync + 'static {
    move |worker, sequence| {
        let runner = Arc::clone(&runner);
        Box::pin(async move { runner.once(worker, sequence).await })
    }
}

/// Runs `op(worker, sequence)` in `budget.workers` closed loops and summarises the samples.
pub async fn run<F, Fut>(budget: Budget, op: F) -> Summary
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send,
{
    let op = Arc::new(op);
    let started = Instant::now();
    let measured_from = started + budget.warmup;
    let stop_at = budget.duration.map(|d| measured_from + d);
    let issued = Arc::new(AtomicU64::new(0));
    let workers = (0..budget.workers).map(|worker| {
        let (op, issued) = (Arc::clone(&op), Arc::clone(&issued));
        tokio::spawn(async move {
            let mut stats = stats::Recorder::default();
            loop {
                let now = Instant::now();
                if stop_at.is_some_and(|stop| now >= stop) {
                    break;
                }
                let sequence = issued.fetch_add(1, Ordering::Relaxed);
                if budget.requests.is_some_and(|limit| sequence >= limit) {
                    break;
                }
                let outcome = match tokio::time::timeout(budget.timeout, op(worker, sequence)).await {
                    Ok(outcome) => outcome,
                    Err(_) => Outcome::Error("timeout".into()),
                };
                if now >= measured_from {
                    stats.record(now.elapsed(), outcome);
                }
            }
            stats
        })
    });
    let mut total = stats::Recorder::default();
    for worker in futures::future::join_all(workers).await {
        total.merge(worker.expect("worker panicked"));
    }
    let elapsed = Instant::now().saturating_duration_since(measured_from);
    total.summary(elapsed)
}

/// The deterministic, incompressible bytes every object (or value) of a given size holds.
pub fn payload(size: u64) -> bytes::Bytes {
    let mut state = 0x9E37_79B9_7F4A_7C15_u64 ^ size;
    let mut out = Vec::with_capacity(size as usize + 8);
    while (out.len() as u64) < size {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(size as usize);
    bytes::Bytes::from(out)
}

/// The SHA-256 of a payload, hex: recorded with each case so that a comparison knows both sides
/// sent the same bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// `1GiB`, `64MiB`, `4KiB` or `17B`: the largest binary unit that divides the size.
pub fn human_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}KiB", b >> 10),
        b => format!("{b}B"),
    }
}

/// Parses sizes like `4KiB`, `64MiB`, `1GiB`, `1000` (bytes).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("invalid size: {text:?}"))?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return Err(format!("invalid size unit in {text:?} (use B, KiB, MiB or GiB)")),
    };
    Ok(number * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("17"), Ok(17));
        assert!(parse_size("3TB").is_err());
    }

    #[tokio::test]
    async fn a_request_budget_is_exact_and_errors_are_not_samples() {
        let budget = Budget {
            workers: 4,
            warmup: Duration::ZERO,
            duration: None,
            requests: Some(100),
            timeout: Duration::from_secs(5),
        };
        let summary = run(budget, |_, sequence| async move {
            if sequence % 10 == 0 {
                Outcome::Error("every tenth".into())
            } else {
                Outcome::Ok { bytes: 10 }
            }
        })
        .await;
        assert_eq!(summary.samples, 90);
        assert_eq!(summary.errors.get("every tenth"), Some(&10));
        assert_eq!(summary.bytes, 900);
    }
}
