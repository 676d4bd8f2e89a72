//! Controller metrics: reconciles, failures by reason, reconcile duration.

use prometheus::{Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder};

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    reconciles: IntCounterVec,
    failures: IntCounterVec,
    duration: HistogramVec,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let registry = Registry::new();
        let reconciles = IntCounterVec::new(
            Opts::new("pgvs3_operator_reconciles_total", "Reconciles run, by kind"),
            &["kind"],
        )
        .expect("valid metric");
        let failures = IntCounterVec::new(
            Opts::new(
                "pgvs3_operator_reconcile_failures_total",
                "Failed reconciles, by kind and reason",
            ),
            &["kind", "reason"],
        )
        .expect("valid metric");
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "pgvs3_operator_reconcile_duration_seconds",
                "Reconcile duration, by kind",
            )
            .buckets(vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            &["kind"],
        )
        .expect("valid metric");
        registry.register(Box::new(reconciles.clone())).expect("unique metric");
        registry.register(Box::new(failures.clone())).expect("unique metric");
        registry.register(Box::new(duration.clone())).expect("unique metric");
        Metrics {
            registry,
            reconciles,
            failures,
            duration,
        }
    }
}

impl Metrics {
    /// Counts a reconcile and times it until the returned guard drops.
    pub fn reconcile(&self, kind: &str) -> prometheus::HistogramTimer {
        self.reconciles.with_label_values(&[kind]).inc();
        self.duration.with_label_values(&[kind]).start_timer()
    }

    pub fn failure(&self, kind: &str, reason: &str) {
        self.failures.with_label_values(&[kind, reason]).inc();
    }

    pub fn failures(&self, kind: &str, reason: &str) -> u64 {
        self.failures.with_label_values(&[kind, reason]).get()
    }

    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buffer)
            .expect("text encoding of metrics");
        String::from_utf8(buffer).expect("metrics are UTF-8")
    }
}
