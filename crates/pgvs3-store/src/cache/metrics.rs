//! What the cache tier counts.

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts};

use crate::metrics::Metrics;

#[derive(Clone)]
pub struct CacheMetrics {
    /// Reads by how the cache answered: hit, pending (a write-back body), negative, miss, stale.
    pub lookups: IntCounterVec,
    pub fills: IntCounterVec,
    pub fill_bytes: IntCounter,
    pub fill_seconds: Histogram,
    /// Reads passed through to the origin without filling: range, head, standby.
    pub passthrough: IntCounterVec,
    pub revalidations: IntCounterVec,
    pub origin_errors: IntCounterVec,
    pub uploads: IntCounterVec,
    pub outbox_depth: IntGauge,
    pub outbox_oldest_seconds: IntGauge,
    pub evictions: IntCounter,
}

impl CacheMetrics {
    pub fn new(metrics: &Metrics) -> CacheMetrics {
        let counter_vec = |name: &str, help: &str, label: &str| {
            let counter = IntCounterVec::new(Opts::new(name, help), &[label]).expect("metric");
            metrics.register(Box::new(counter.clone()));
            counter
        };
        let cache = CacheMetrics {
            lookups: counter_vec("pgvs3_cache_lookups_total", "Cache bucket reads by outcome", "result"),
            fills: counter_vec("pgvs3_cache_fills_total", "Read-through fills by outcome", "outcome"),
            fill_bytes: IntCounter::new("pgvs3_cache_fill_bytes_total", "Bytes filled from origins").expect("metric"),
            fill_seconds: Histogram::with_opts(
                HistogramOpts::new("pgvs3_cache_fill_duration_seconds", "Duration of read-through fills")
                    .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0]),
            )
            .expect("metric"),
            passthrough: counter_vec(
                "pgvs3_cache_passthrough_total",
                "Reads served from the origin without filling",
                "kind",
            ),
            revalidations: counter_vec(
                "pgvs3_cache_revalidations_total",
                "Conditional revalidations of stale entries by outcome",
                "outcome",
            ),
            origin_errors: counter_vec(
                "pgvs3_cache_origin_errors_total",
                "Failed origin requests by kind",
                "kind",
            ),
            uploads: counter_vec("pgvs3_cache_uploads_total", "Write-back uploads by outcome", "outcome"),
            outbox_depth: IntGauge::new("pgvs3_cache_outbox_depth", "Write-back bodies not yet at their origin")
                .expect("metric"),
            outbox_oldest_seconds: IntGauge::new(
                "pgvs3_cache_outbox_oldest_seconds",
                "Age of the oldest write-back body not yet at its origin",
            )
            .expect("metric"),
            evictions: IntCounter::new("pgvs3_cache_evictions_total", "Entries evicted to honour size limits")
                .expect("metric"),
        };
        metrics.register(Box::new(cache.fill_bytes.clone()));
        metrics.register(Box::new(cache.fill_seconds.clone()));
        metrics.register(Box::new(cache.outbox_depth.clone()));
        metrics.register(Box::new(cache.outbox_oldest_seconds.clone()));
        metrics.register(Box::new(cache.evictions.clone()));
        cache
    }
}
