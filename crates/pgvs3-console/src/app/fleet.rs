//! The health page (root-key sessions): this gateway's readiness, role and replication lag (its
//! admin listener's `/readyz`), request counts, rates and mean latencies per protocol and its
//! database pool (its own `/metrics`), and the database's size (asked in-process). Rates are
//! the change of the request counters since the previous look at this page, so the console
//! keeps one sample and no history.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Instant;

use http::{Method, StatusCode};

use super::{Context, Response};
use crate::html::{esc, name};

/// The most of `/metrics` the console reads.
const MAX_METRICS: usize = 8 << 20;
/// The most of `/readyz`.
const MAX_READY: usize = 64 * 1024;

/// The request counters per protocol at the previous look, for rates.
#[derive(Default)]
pub struct Samples(Mutex<Option<(Instant, BTreeMap<String, f64>)>>);

/// What the page shows of Prometheus text: per protocol its requests, server errors, and
/// latency sum and count; and single gauges by name.
#[derive(Default)]
struct Metrics {
    requests: BTreeMap<String, f64>,
    errors: BTreeMap<String, f64>,
    latency: BTreeMap<String, (f64, f64)>,
    gauges: BTreeMap<String, f64>,
}

/// A label's value in `{a="x",b="y"}`.
fn label<'a>(labels: &'a str, wanted: &str) -> Option<&'a str> {
    labels
        .trim_matches(|c| c == '{' || c == '}')
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| key.trim() == wanted)
        .map(|(_, value)| value.trim_matches('"'))
}

fn parse(text: &str) -> Metrics {
    let mut metrics = Metrics::default();
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else { continue };
        let (metric, labels) = series.split_at(series.find('{').unwrap_or(series.len()));
        let protocol = label(labels, "protocol").unwrap_or("").to_owned();
        match metric {
            "pgvs3_requests_total" => {
                *metrics.requests.entry(protocol.clone()).or_default() += value;
                if label(labels, "status").is_some_and(|status| status.starts_with('5')) {
                    *metrics.errors.entry(protocol).or_default() += value;
                }
            }
            "pgvs3_request_duration_seconds_sum" => metrics.latency.entry(protocol).or_default().0 += value,
            "pgvs3_request_duration_seconds_count" => metrics.latency.entry(protocol).or_default().1 += value,
            "pgvs3_db_pool_connections" => {
                let state = label(labels, "state").unwrap_or("");
                metrics.gauges.insert(format!("pool {state}"), value);
            }
            "pgvs3_db_pool_max_connections"
            | "pgvs3_database_up"
            | "pgvs3_replication_lag_seconds"
            | "pgvs3_buffer_bytes_in_use"
            | "pgvs3_buffer_bytes_budget" => {
                metrics.gauges.insert(metric.to_owned(), value);
            }
            _ => {}
        }
    }
    metrics
}

impl Samples {
    /// Requests a second per protocol since the previous sample (none at the first look, or
    /// when the counters went back, as after a restart).
    fn rates(&self, now: Instant, totals: &BTreeMap<String, f64>) -> Option<(f64, BTreeMap<String, f64>)> {
        let mut last = self.0.lock().unwrap();
        let previous = last.replace((now, totals.clone()));
        let (then, before) = previous?;
        let seconds = now.duration_since(then).as_secs_f64();
        if seconds < 0.5 {
            // Two looks within half a second: keep the older sample, whose interval means more.
            *last = Some((then, before));
            return None;
        }
        let rates = totals
            .iter()
            .map(|(protocol, total)| {
                (
                    protocol.clone(),
                    (total - before.get(protocol).unwrap_or(&0.0)) / seconds,
                )
            })
            .collect::<BTreeMap<_, _>>();
        rates.values().all(|rate| *rate >= 0.0).then_some((seconds, rates))
    }
}

impl Context<'_> {
    pub(super) async fn fleet(&self) -> Response {
        let mut body = String::from("<h1>Health</h1>");
        if !self.session.admin {
            body.push_str(
                "<p class=\"flash error\" role=\"alert\">The health page is for the root key&#39;s sessions.</p>",
            );
            return self.page(StatusCode::FORBIDDEN, "Health", body);
        }
        let gateway = &self.app.gateway;
        let Some(listener) = gateway.admin_listener else {
            body.push_str("<p class=\"flash error\">The console reaches no admin listener (it speaks TLS).</p>");
            return self.page(StatusCode::OK, "Health", body);
        };
        let size = async {
            match &gateway.admin {
                Some(admin) => admin.database_size().await,
                None => Err("not asked".to_owned()),
            }
        };
        let (ready, metrics, database_size) = tokio::join!(
            crate::loopback::request(listener, Method::GET, "/readyz", &[], MAX_READY),
            crate::loopback::request(listener, Method::GET, "/metrics", &[], MAX_METRICS),
            size,
        );
        body.push_str("<section><h2>This gateway</h2><dl class=\"meta\">");
        match ready {
            Ok((status, answer)) => match serde_json::from_slice::<serde_json::Value>(&answer) {
                Ok(ready) => {
                    let _ = write!(
                        body,
                        "<dt>Ready</dt><dd id=\"ready\">{}</dd><dt>Role</dt><dd id=\"role\">{}</dd>\
                         <dt>Replication lag</dt><dd id=\"lag\">{:.1} s</dd><dt>Layout</dt><dd>{} (this build: {})</dd>",
                        if status.is_success() { "yes" } else { "no" },
                        name(ready["role"].as_str().unwrap_or("")),
                        ready["replication_lag_seconds"].as_f64().unwrap_or(0.0),
                        esc(&ready["layout"].to_string()),
                        esc(&ready["expected_layout"].to_string()),
                    );
                }
                Err(_) => {
                    let _ = write!(
                        body,
                        "<dt>Ready</dt><dd id=\"ready\">no: {}</dd>",
                        name(&String::from_utf8_lossy(&answer))
                    );
                }
            },
            Err(err) => {
                let _ = write!(body, "<dt>Ready</dt><dd id=\"ready\">{}</dd>", name(&err));
            }
        }
        let _ = write!(
            body,
            "<dt>Database size</dt><dd id=\"database-size\">{}</dd></dl></section>",
            match database_size {
                Ok(bytes) => esc(&crate::html::size(bytes)),
                Err(err) => name(&err),
            }
        );
        match metrics {
            Ok((status, text)) if status.is_success() => {
                let metrics = parse(&String::from_utf8_lossy(&text));
                let rates = self.app.samples.rates(Instant::now(), &metrics.requests);
                body.push_str(
                    "<section><h2>Requests</h2><table id=\"requests\"><thead><tr><th>Protocol</th><th>Requests</th>\
                     <th>Server errors</th><th>Mean latency</th><th>Rate</th></tr></thead><tbody>",
                );
                for (protocol, total) in &metrics.requests {
                    let (sum, count) = metrics.latency.get(protocol).copied().unwrap_or_default();
                    let rate = rates.as_ref().and_then(|(_, rates)| rates.get(protocol));
                    let _ = write!(
                        body,
                        "<tr class=\"protocol\"><td>{}</td><td>{total}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        name(protocol),
                        metrics.errors.get(protocol).copied().unwrap_or(0.0),
                        if count > 0.0 {
                            format!("{:.1} ms", sum / count * 1000.0)
                        } else {
                            String::new()
                        },
                        rate.map(|rate| format!("{rate:.2}/s")).unwrap_or_default(),
                    );
                }
                body.push_str("</tbody></table>");
                let _ = write!(
                    body,
                    "<p class=\"hint\">{}</p>",
                    match &rates {
                        Some((seconds, _)) =>
                            format!("Rates over the {seconds:.0} s since this page was last looked at."),
                        None => "Rates show from the next look at this page (the change of the counters since then)."
                            .to_owned(),
                    }
                );
                body.push_str("</section><section><h2>Database pool and buffers</h2><dl class=\"meta\">");
                for (label, gauge) in [
                    ("Connections in use", "pool in_use"),
                    ("Idle", "pool idle"),
                    ("Waiting", "pool waiting"),
                    ("Pool size", "pgvs3_db_pool_max_connections"),
                    ("Database up", "pgvs3_database_up"),
                ] {
                    if let Some(value) = metrics.gauges.get(gauge) {
                        let _ = write!(body, "<dt>{label}</dt><dd>{value}</dd>");
                    }
                }
                if let (Some(used), Some(budget)) = (
                    metrics.gauges.get("pgvs3_buffer_bytes_in_use"),
                    metrics.gauges.get("pgvs3_buffer_bytes_budget"),
                ) {
                    let _ = write!(
                        body,
                        "<dt>Buffer budget</dt><dd>{} of {}</dd>",
                        esc(&crate::html::size(*used as i64)),
                        esc(&crate::html::size(*budget as i64))
                    );
                }
                body.push_str("</dl></section>");
            }
            Ok((status, _)) => {
                let _ = write!(body, "<p class=\"flash error\">/metrics answered {status}</p>");
            }
            Err(err) => {
                let _ = write!(body, "<p class=\"flash error\">{}</p>", name(&err));
            }
        }
        body.push_str(
            "<p class=\"hint\">This gateway only: gateways of one database do not know each other. \
             Scrape each one's <code>/metrics</code> for the fleet.</p>",
        );
        self.page(StatusCode::OK, "Health", body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_summed_per_protocol_and_rates_need_two_looks() {
        let text = "# HELP x\n\
            pgvs3_requests_total{protocol=\"s3\",operation=\"GetObject\",status=\"200\"} 10\n\
            pgvs3_requests_total{protocol=\"s3\",operation=\"PutObject\",status=\"503\"} 2\n\
            pgvs3_requests_total{protocol=\"resp\",operation=\"get\",status=\"ok\"} 5\n\
            pgvs3_request_duration_seconds_sum{protocol=\"s3\",operation=\"GetObject\"} 0.5\n\
            pgvs3_request_duration_seconds_count{protocol=\"s3\",operation=\"GetObject\"} 10\n\
            pgvs3_db_pool_connections{state=\"idle\"} 3\n";
        let metrics = parse(text);
        assert_eq!(metrics.requests["s3"], 12.0);
        assert_eq!(metrics.errors["s3"], 2.0);
        assert_eq!(metrics.requests["resp"], 5.0);
        assert_eq!(metrics.latency["s3"], (0.5, 10.0));
        assert_eq!(metrics.gauges["pool idle"], 3.0);
        let samples = Samples::default();
        let start = Instant::now();
        assert!(samples.rates(start, &metrics.requests).is_none());
        let mut later = metrics.requests.clone();
        *later.get_mut("s3").unwrap() += 20.0;
        let (seconds, rates) = samples
            .rates(start + std::time::Duration::from_secs(10), &later)
            .unwrap();
        assert_eq!((seconds, rates["s3"], rates["resp"]), (10.0, 2.0, 0.0));
    }
}
