//! Samples and their summary: rate, throughput, latency percentiles, errors by kind.

use std::collections::BTreeMap;
use std::time::Duration;

/// What one request came to.
#[derive(Debug, Clone)]
pub enum Outcome {
    Ok {
        bytes: u64,
    },
    /// One request that carried several items (a pipeline of commands, a batch of jobs).
    Batch {
        bytes: u64,
        items: u64,
    },
    Error(String),
}

#[derive(Default)]
pub(crate) struct Recorder {
    latencies_us: Vec<u32>,
    bytes: u64,
    items: u64,
    errors: BTreeMap<String, u64>,
}

impl Recorder {
    pub(crate) fn record(&mut self, latency: Duration, outcome: Outcome) {
        match outcome {
            Outcome::Ok { bytes } => self.sample(latency, bytes, 1),
            Outcome::Batch { bytes, items } => self.sample(latency, bytes, items),
            Outcome::Error(kind) => *self.errors.entry(kind).or_default() += 1,
        }
    }

    fn sample(&mut self, latency: Duration, bytes: u64, items: u64) {
        self.latencies_us.push(latency.as_micros().min(u32::MAX as u128) as u32);
        self.bytes += bytes;
        self.items += items;
    }

    pub(crate) fn merge(&mut self, other: Recorder) {
        self.latencies_us.extend(other.latencies_us);
        self.bytes += other.bytes;
        self.items += other.items;
        for (kind, count) in other.errors {
            *self.errors.entry(kind).or_default() += count;
        }
    }

    pub(crate) fn summary(mut self, elapsed: Duration) -> Summary {
        self.latencies_us.sort_unstable();
        let percentile = |p: f64| -> f64 {
            if self.latencies_us.is_empty() {
                return 0.0;
            }
            let index = ((self.latencies_us.len() - 1) as f64 * p).round() as usize;
            f64::from(self.latencies_us[index]) / 1000.0
        };
        let seconds = elapsed.as_secs_f64().max(f64::EPSILON);
        Summary {
            samples: self.latencies_us.len() as u64,
            seconds,
            rate: self.latencies_us.len() as f64 / seconds,
            items: self.items,
            items_per_second: self.items as f64 / seconds,
            mib_per_second: self.bytes as f64 / seconds / f64::from(1 << 20),
            bytes: self.bytes,
            p50_ms: percentile(0.50),
            p90_ms: percentile(0.90),
            p99_ms: percentile(0.99),
            max_ms: self.latencies_us.last().map_or(0.0, |us| f64::from(*us) / 1000.0),
            errors: self.errors,
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub samples: u64,
    pub seconds: f64,
    /// Requests per second.
    pub rate: f64,
    /// Items carried (one per request, or the pipeline depth, or the batch size).
    pub items: u64,
    pub items_per_second: f64,
    pub mib_per_second: f64,
    pub bytes: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub errors: BTreeMap<String, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_sorted_samples() {
        let mut recorder = Recorder::default();
        for ms in (1..=100).rev() {
            recorder.record(Duration::from_millis(ms), Outcome::Ok { bytes: 1 });
        }
        let summary = recorder.summary(Duration::from_secs(10));
        assert_eq!((summary.p50_ms, summary.p99_ms, summary.max_ms), (51.0, 99.0, 100.0));
        assert_eq!(summary.rate, 10.0);
        assert_eq!(summary.items_per_second, 10.0);
    }

    #[test]
    fn batches_count_their_items_but_one_latency_each() {
        let mut recorder = Recorder::default();
        recorder.record(Duration::from_millis(2), Outcome::Batch { bytes: 0, items: 16 });
        recorder.record(Duration::from_millis(4), Outcome::Batch { bytes: 0, items: 16 });
        recorder.record(Duration::from_millis(1), Outcome::Error("refused".into()));
        let summary = recorder.summary(Duration::from_secs(2));
        assert_eq!((summary.samples, summary.items), (2, 32));
        assert_eq!((summary.rate, summary.items_per_second), (1.0, 16.0));
    }
}
