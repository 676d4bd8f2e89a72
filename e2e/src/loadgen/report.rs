//! The human table and the machine-readable record of a run.

use super::Summary;

pub const HEADER: &str =
    "case                           rate/s   items/s     MiB/s   p50 ms   p90 ms   p99 ms   max ms  errors";

pub fn row(name: &str, summary: &Summary) -> String {
    let errors: u64 = summary.errors.values().sum();
    format!(
        "{name:<28} {:>9.0} {:>9.0} {:>9.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {errors:>7}",
        summary.rate,
        summary.items_per_second,
        summary.mib_per_second,
        summary.p50_ms,
        summary.p90_ms,
        summary.p99_ms,
        summary.max_ms
    )
}

/// One JSON object per case: the full configuration next to the results.
pub fn record(name: &str, config: &impl serde::Serialize, summary: &Summary) -> serde_json::Value {
    serde_json::json!({ "case": name, "config": config, "result": summary })
}
