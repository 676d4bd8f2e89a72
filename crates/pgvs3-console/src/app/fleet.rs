//! The health page (root-key sessions): the gateways of this database (their heartbeat rows,
//! `gateway/src/heartbeat.rs`) and the standbys of its server, this gateway's readiness, role
//! and replication lag (its admin listener's `/readyz`), request counts, rates and mean
//! latencies per protocol and its database pool (its own `/metrics`), and the database's size
//! and WAL position (asked in-process). The request counters and the WAL position are sampled
//! every few seconds by a task of the console, and at each look at the page, into a small
//! ring: the rates and the charts of the last minutes come from it.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode};

use super::{Context, Response};
use crate::html::{esc, name};

/// The most of `/metrics` the console reads.
const MAX_METRICS: usize = 8 << 20;
/// The most of `/readyz`.
const MAX_READY: usize = 64 * 1024;
/// How often the console samples the counters on its own.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Samples kept: five minutes at one each [`SAMPLE_EVERY`] (looks at the page add more, and
/// push the oldest out sooner).
const HISTORY: usize = 61;
/// Samples closer together than this are one (their interval would mean little).
const MIN_INTERVAL: Duration = Duration::from_millis(500);

/// The request counters and latency sums per protocol, and the WAL position in bytes, at one
/// moment.
struct Sample {
    at: Instant,
    requests: BTreeMap<String, f64>,
    latency: BTreeMap<String, (f64, f64)>,
    wal: Option<f64>,
}

/// The last [`HISTORY`] samples, oldest first.
#[derive(Default)]
pub struct Samples(Mutex<VecDeque<Sample>>);

/// Between two samples: when it ended (seconds before now), and per protocol the requests a
/// second and the mean latency in milliseconds (`None` without requests).
struct Interval {
    ago: f64,
    rates: BTreeMap<String, f64>,
    latency_ms: BTreeMap<String, Option<f64>>,
    /// WAL bytes a second (`None` unless both samples have a position).
    wal_rate: Option<f64>,
}

/// Samples the admin listener's `/metrics` (and the WAL position, when the gateway answers
/// in-process) every [`SAMPLE_EVERY`] while the console's app (the owner of `samples`) lives.
pub async fn keep_sampling(samples: Weak<Samples>, listener: SocketAddr, admin: Option<Arc<dyn crate::Admin>>) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (answer, wal) = tokio::join!(
            crate::loopback::request(listener, Method::GET, "/metrics", &[], MAX_METRICS),
            wal_bytes(admin.as_deref()),
        );
        let Some(samples) = samples.upgrade() else { return };
        if let Ok((status, text)) = answer
            && status.is_success()
        {
            samples.record(Instant::now(), &parse(&String::from_utf8_lossy(&text)), wal);
        }
    }
}

/// The WAL position in bytes, if the gateway tells.
async fn wal_bytes(admin: Option<&dyn crate::Admin>) -> Option<f64> {
    admin?.wal_position().await.ok().map(|position| position.bytes)
}

/// See [`crate::metrics_summary`].
pub fn metrics_summary(text: &str) -> serde_json::Value {
    let metrics = parse(text);
    serde_json::json!({
        "requests": metrics.requests.values().sum::<f64>(),
        "server_errors": metrics.errors.values().sum::<f64>(),
        "cache_reads": metrics.cache_reads.values().sum::<f64>(),
        "cache_hits": metrics.cache_hits(),
        "origin_errors": metrics.origin_errors.values().sum::<f64>(),
        "latency_seconds": metrics.latency.values().map(|(sum, _)| sum).sum::<f64>(),
        "latency_count": metrics.latency.values().map(|(_, count)| count).sum::<f64>(),
    })
}

impl Metrics {
    /// Cache bucket reads served from the cache: every result but a miss or a stale entry
    /// (those went to the origin).
    fn cache_hits(&self) -> f64 {
        self.cache_reads
            .iter()
            .filter(|(result, _)| !matches!(result.as_str(), "miss" | "stale"))
            .map(|(_, count)| count)
            .sum()
    }
}

/// What the page shows of Prometheus text: per protocol its requests, server errors, and
/// latency sum and count; and single gauges by name.
#[derive(Default)]
struct Metrics {
    requests: BTreeMap<String, f64>,
    errors: BTreeMap<String, f64>,
    latency: BTreeMap<String, (f64, f64)>,
    gauges: BTreeMap<String, f64>,
    /// Cache bucket reads by result (`hit`, `miss`, `stale`, `range_hit`, ...).
    cache_reads: BTreeMap<String, f64>,
    /// Failed origin requests by kind.
    origin_errors: BTreeMap<String, f64>,
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
            "pgvs3_cache_lookups_total" => {
                let result = label(labels, "result").unwrap_or("").to_owned();
                *metrics.cache_reads.entry(result).or_default() += value;
            }
            "pgvs3_cache_origin_errors_total" => {
                let kind = label(labels, "kind").unwrap_or("").to_owned();
                *metrics.origin_errors.entry(kind).or_default() += value;
            }
            "pgvs3_db_pool_max_connections"
            | "pgvs3_cache_outbox_depth"
            | "pgvs3_cache_outbox_oldest_seconds"
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
    /// Keeps the counters of `metrics` as the sample of `now`, unless the last sample is under
    /// [`MIN_INTERVAL`] old. A counter that went back (the gateway restarted) starts the history
    /// again.
    fn record(&self, now: Instant, metrics: &Metrics, wal: Option<f64>) {
        let mut samples = self.0.lock().unwrap();
        if let Some(last) = samples.back() {
            if now.saturating_duration_since(last.at) < MIN_INTERVAL {
                return;
            }
            if metrics
                .requests
                .iter()
                .any(|(protocol, total)| total < last.requests.get(protocol).unwrap_or(&0.0))
            {
                samples.clear();
            }
        }
        samples.push_back(Sample {
            at: now,
            requests: metrics.requests.clone(),
            latency: metrics.latency.clone(),
            wal,
        });
        while samples.len() > HISTORY {
            samples.pop_front();
        }
    }

    /// Every interval between consecutive samples, oldest first.
    fn intervals(&self, now: Instant) -> Vec<Interval> {
        let samples = self.0.lock().unwrap();
        samples
            .iter()
            .zip(samples.iter().skip(1))
            .map(|(before, after)| {
                let seconds = after.at.duration_since(before.at).as_secs_f64();
                let rates = after
                    .requests
                    .iter()
                    .map(|(protocol, total)| {
                        let change = total - before.requests.get(protocol).unwrap_or(&0.0);
                        (protocol.clone(), change / seconds)
                    })
                    .collect();
                let latency_ms = after
                    .latency
                    .iter()
                    .map(|(protocol, (sum, count))| {
                        let (sum_before, count_before) = before.latency.get(protocol).copied().unwrap_or_default();
                        let requests = count - count_before;
                        (
                            protocol.clone(),
                            (requests > 0.0).then(|| (sum - sum_before) / requests * 1000.0),
                        )
                    })
                    .collect();
                let wal_rate = match (before.wal, after.wal) {
                    (Some(before), Some(after)) => Some((after - before).max(0.0) / seconds),
                    _ => None,
                };
                Interval {
                    ago: now.saturating_duration_since(after.at).as_secs_f64(),
                    rates,
                    latency_ms,
                    wal_rate,
                }
            })
            .collect()
    }
}

/// Chart size, in SVG user units.
const CHART_WIDTH: f64 = 600.0;
const CHART_HEIGHT: f64 = 140.0;

/// An SVG line chart (server-side: no script, no inline style — classes from the stylesheet)
/// of one series per protocol over the last `span` seconds; each point is an interval's end.
fn chart(id: &str, title: &str, unit: &str, span: f64, series: &BTreeMap<String, Vec<(f64, f64)>>) -> String {
    let top = series
        .values()
        .flatten()
        .map(|(_, value)| *value)
        .fold(0.0_f64, f64::max);
    let scale = if top > 0.0 { top * 1.1 } else { 1.0 };
    let (left, bottom) = (48.0, 18.0);
    let x = |ago: f64| left + (span - ago.min(span)) / span * (CHART_WIDTH - left);
    let y = |value: f64| CHART_HEIGHT - bottom - value / scale * (CHART_HEIGHT - bottom - 6.0);
    let mut out = format!(
        "<figure class=\"chart\"><figcaption>{}</figcaption><svg id=\"{}\" viewBox=\"0 0 {CHART_WIDTH} {CHART_HEIGHT}\" role=\"img\" aria-label=\"{}\">\
         <line class=\"axis\" x1=\"{left}\" y1=\"{}\" x2=\"{CHART_WIDTH}\" y2=\"{}\"/>\
         <text class=\"label\" x=\"0\" y=\"12\">{} {}</text><text class=\"label\" x=\"0\" y=\"{}\">0</text>\
         <text class=\"label\" x=\"{left}\" y=\"{CHART_HEIGHT}\">{span:.0} s ago</text>\
         <text class=\"label end\" x=\"{CHART_WIDTH}\" y=\"{CHART_HEIGHT}\">now</text>",
        esc(title),
        esc(id),
        esc(title),
        CHART_HEIGHT - bottom,
        CHART_HEIGHT - bottom,
        format_value(top),
        esc(unit),
        CHART_HEIGHT - bottom,
    );
    for (index, (protocol, points)) in series.iter().enumerate() {
        let class = format!("series series-{}", index % 6);
        let line: Vec<String> = points
            .iter()
            .map(|(ago, value)| format!("{:.1},{:.1}", x(*ago), y(*value)))
            .collect();
        let _ = write!(
            out,
            "<g class=\"{class}\" data-protocol=\"{}\"><title>{}</title><polyline points=\"{}\"/>",
            esc(protocol),
            name(protocol),
            line.join(" ")
        );
        for (ago, value) in points {
            let _ = write!(out, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2\"/>", x(*ago), y(*value));
        }
        out.push_str("</g>");
    }
    out.push_str("</svg><p class=\"legend\">");
    for (index, protocol) in series.keys().enumerate() {
        let _ = write!(out, "<span class=\"series-{}\">{}</span> ", index % 6, name(protocol));
    }
    out.push_str("</p></figure>");
    out
}

/// A heartbeat older than this many beats marks its gateway silent (stopped, stuck or cut off
/// from the database); rows are forgotten after a minute (`gateway/src/heartbeat.rs`).
const SILENT_AFTER_BEATS: f64 = 3.0;
/// The heartbeat interval (`gateway/src/heartbeat.rs`).
const BEAT_EVERY: f64 = 5.0;

/// The gateways of this database, from their heartbeat rows, each with the summary of its own
/// `/metrics` at its last beat.
fn gateways_section(gateways: Result<Vec<crate::GatewayBeat>, String>) -> String {
    let mut out = String::from("<section id=\"gateways\"><h2>Gateways of this database</h2>");
    let gateways = match gateways {
        Err(err) => {
            let _ = write!(out, "<p class=\"flash error\">{}</p></section>", name(&err));
            return out;
        }
        Ok(gateways) if gateways.is_empty() => {
            out.push_str("<p id=\"gateways-status\">No gateway has written a heartbeat yet.</p></section>");
            return out;
        }
        Ok(gateways) => gateways,
    };
    out.push_str(
        "<table id=\"gateway-list\"><thead><tr><th>Host</th><th>Role</th><th>Version</th><th>Started</th>\
         <th>Listeners</th><th>Last heartbeat</th><th>Requests</th><th>Server errors</th>\
         <th>Served from the cache</th><th>Origin errors</th></tr></thead><tbody>",
    );
    for gateway in &gateways {
        let silent = gateway.seconds_since_beat > SILENT_AFTER_BEATS * BEAT_EVERY;
        let listeners = gateway
            .listeners
            .as_object()
            .map(|listeners| {
                listeners
                    .iter()
                    .filter_map(|(listener, addr)| Some(format!("{} {}", name(listener), name(addr.as_str()?))))
                    .collect::<Vec<_>>()
                    .join("<br>")
            })
            .unwrap_or_default();
        let stat = |key: &str| gateway.stats[key].as_f64().unwrap_or(0.0);
        let reads = stat("cache_reads");
        let cache = if reads > 0.0 {
            format!("{:.1} % of {reads}", stat("cache_hits") / reads * 100.0)
        } else {
            "no reads".to_owned()
        };
        let _ = write!(
            out,
            "<tr class=\"gateway{}\" data-id=\"{}\"><td>{}</td><td>primary</td><td>{}</td><td>{}</td><td class=\"listeners\">{listeners}</td>\
             <td>{:.0} s ago{}</td><td>{}</td><td>{}</td><td>{cache}</td><td>{}</td></tr>",
            if silent { " silent" } else { "" },
            esc(&gateway.id),
            name(&gateway.host),
            name(&gateway.version),
            esc(&super::date(Some(&aws_sdk_s3::primitives::DateTime::from(
                gateway.started
            )))),
            gateway.seconds_since_beat.max(0.0),
            if silent { " <strong>(silent)</strong>" } else { "" },
            stat("requests"),
            stat("server_errors"),
            stat("origin_errors"),
        );
    }
    out.push_str(
        "</tbody></table><p class=\"hint\">Each gateway whose server accepts writes records itself every 5 s; \
         one on a standby server cannot write there and is seen as that server, below. A row silent \
         for a minute is removed. The numbers are each gateway's own since it started.</p>",
    );
    out.push_str(&gateway_charts(&gateways));
    out.push_str("</section>");
    out
}

/// Per gateway, between consecutive samples of its heartbeat ring: requests a second, mean
/// latency (ms) and the share of cache reads served from the cache (%), each at the later
/// sample's age. A counter that went back (it cannot within one row: a restart is a new row)
/// gives no point.
fn gateway_series(history: &serde_json::Value) -> [Vec<(f64, f64)>; 3] {
    let samples = history.as_array().map(Vec::as_slice).unwrap_or_default();
    let mut series: [Vec<(f64, f64)>; 3] = Default::default();
    for pair in samples.windows(2) {
        let value = |sample: &serde_json::Value, key: &str| sample[key].as_f64().unwrap_or(0.0);
        let change = |key: &str| value(&pair[1], key) - value(&pair[0], key);
        let (ago, seconds) = (value(&pair[1], "ago"), value(&pair[0], "ago") - value(&pair[1], "ago"));
        if seconds < MIN_INTERVAL.as_secs_f64() || change("requests") < 0.0 {
            continue;
        }
        series[0].push((ago, change("requests") / seconds));
        if change("latency_count") > 0.0 {
            series[1].push((ago, change("latency_seconds") / change("latency_count") * 1000.0));
        }
        if change("cache_reads") > 0.0 {
            series[2].push((ago, change("cache_hits") / change("cache_reads") * 100.0));
        }
    }
    series
}

/// The fleet's charts: one series per gateway (its host and id) from its heartbeat ring.
fn gateway_charts(gateways: &[crate::GatewayBeat]) -> String {
    let span = (HISTORY as f64 - 1.0) * BEAT_EVERY;
    let mut charts: [BTreeMap<String, Vec<(f64, f64)>>; 3] = Default::default();
    for gateway in gateways {
        let label = format!("{} {}", gateway.host, gateway.id);
        for (chart, points) in charts.iter_mut().zip(gateway_series(&gateway.history)) {
            let points: Vec<_> = points.into_iter().filter(|(ago, _)| *ago <= span).collect();
            if !points.is_empty() {
                chart.insert(label.clone(), points);
            }
        }
    }
    format!(
        "<h3>Every gateway, the last {} minutes (from their heartbeats)</h3>{}{}{}",
        span / 60.0,
        chart(
            "chart-gateway-rates",
            "Requests a second, per gateway",
            "/s",
            span,
            &charts[0]
        ),
        chart(
            "chart-gateway-latency",
            "Mean latency, per gateway",
            "ms",
            span,
            &charts[1]
        ),
        chart(
            "chart-gateway-cache",
            "Cache reads served from the cache, per gateway",
            "%",
            span,
            &charts[2]
        ),
    )
}

/// The standbys of this database's server, from PostgreSQL (`pg_stat_replication`): their
/// state and how far their replay is behind.
fn standbys_section(standbys: Result<Vec<crate::Standby>, String>) -> String {
    let mut out = String::from("<section id=\"standbys\"><h2>Standbys of this database</h2>");
    match standbys {
        Err(err) => {
            let _ = write!(out, "<p class=\"flash error\">{}</p>", name(&err));
        }
        Ok(standbys) if standbys.is_empty() => out.push_str(
            "<p id=\"standbys-status\">No standby streams from this server (it has none, or it is a standby itself).</p>",
        ),
        Ok(standbys) => {
            out.push_str(
                "<table id=\"standby-list\"><thead><tr><th>Name</th><th>Address</th><th>State</th><th>Sync</th>\
                 <th>Replay lag</th></tr></thead><tbody>",
            );
            for standby in &standbys {
                let _ = write!(
                    out,
                    "<tr class=\"standby\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    name(&standby.name),
                    name(&standby.address),
                    name(&standby.state),
                    name(&standby.sync_state),
                    standby
                        .replay_lag_seconds
                        .map(|lag| format!("{lag:.1} s"))
                        .unwrap_or_else(|| "caught up (no recent WAL)".to_owned()),
                );
            }
            out.push_str("</tbody></table>");
        }
    }
    out.push_str("</section>");
    out
}

/// Cache buckets' reads since this gateway started, the share served from the cache, and the
/// health of their origins (failed requests by kind, write-backs not yet there).
fn cache_section(metrics: &Metrics) -> String {
    let mut out = String::from("<section id=\"cache\"><h2>Cache and origins</h2>");
    let reads: f64 = metrics.cache_reads.values().sum();
    if reads == 0.0 {
        out.push_str("<p id=\"cache-status\">No reads of cache buckets since this gateway started.</p></section>");
        return out;
    }
    let errors = match metrics
        .origin_errors
        .iter()
        .filter(|(_, count)| **count > 0.0)
        .collect::<Vec<_>>()
    {
        errors if errors.is_empty() => "none".to_owned(),
        errors => errors
            .iter()
            .map(|(kind, count)| format!("{}: {count}", name(kind)))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let _ = write!(
        out,
        "<dl class=\"meta\"><dt>Cache reads</dt><dd id=\"cache-reads\">{reads}</dd>\
         <dt>Served from the cache</dt><dd id=\"cache-hit-ratio\">{:.1} %</dd>\
         <dt>Origin errors</dt><dd id=\"origin-errors\">{errors}</dd>",
        metrics.cache_hits() / reads * 100.0,
    );
    if let Some(depth) = metrics.gauges.get("pgvs3_cache_outbox_depth") {
        let _ = write!(
            out,
            "<dt>Write-backs waiting</dt><dd id=\"outbox\">{depth} (oldest {} s)</dd>",
            metrics
                .gauges
                .get("pgvs3_cache_outbox_oldest_seconds")
                .copied()
                .unwrap_or(0.0)
        );
    }
    out.push_str("</dl></section>");
    out
}

fn format_value(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

/// The requests-a-second and latency charts of `intervals`.
fn charts(intervals: &[Interval]) -> String {
    let span = (HISTORY as f64 - 1.0) * SAMPLE_EVERY.as_secs_f64();
    let mut rates: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut latency: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut wal: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for interval in intervals.iter().filter(|interval| interval.ago <= span) {
        if let Some(rate) = interval.wal_rate {
            wal.entry("WAL".to_owned())
                .or_default()
                .push((interval.ago, rate / 1024.0));
        }
        for (protocol, rate) in &interval.rates {
            rates.entry(protocol.clone()).or_default().push((interval.ago, *rate));
        }
        for (protocol, ms) in &interval.latency_ms {
            if let Some(ms) = ms {
                latency.entry(protocol.clone()).or_default().push((interval.ago, *ms));
            }
        }
    }
    format!(
        "<section><h2>The last {} minutes</h2>{}{}{}</section>",
        span / 60.0,
        chart("chart-rates", "Requests a second", "/s", span, &rates),
        chart("chart-latency", "Mean latency", "ms", span, &latency),
        chart("chart-wal", "WAL written a second", "KiB/s", span, &wal),
    )
}

/// The readiness entries of this gateway's section, from its `/readyz` answer.
fn ready_entries(ready: Result<(StatusCode, Bytes), String>) -> String {
    let mut body = String::new();
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
    body
}

/// Requests per protocol (totals, server errors, mean latency, the last interval's rate) and
/// the charts of the sampled intervals.
fn requests_section(metrics: &Metrics, intervals: &[Interval]) -> String {
    let last = intervals.last();
    let mut body = String::new();
    body.push_str(
        "<section><h2>Requests</h2><table id=\"requests\"><thead><tr><th>Protocol</th><th>Requests</th>\
         <th>Server errors</th><th>Mean latency</th><th>Rate</th></tr></thead><tbody>",
    );
    for (protocol, total) in &metrics.requests {
        let (sum, count) = metrics.latency.get(protocol).copied().unwrap_or_default();
        let rate = last.and_then(|interval| interval.rates.get(protocol));
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
        match last {
            Some(_) => format!(
                "Rates over the last interval between samples (the counters are sampled every {} s and at each look at this page).",
                SAMPLE_EVERY.as_secs()
            ),
            None => "Rates show once the counters have been sampled twice.".to_owned(),
        }
    );
    body.push_str(&charts(intervals));
    body.push_str("</section>");
    body
}

/// The database pool's gauges and the buffer budget.
fn pool_section(metrics: &Metrics) -> String {
    let mut body = String::new();
    body.push_str("<section><h2>Database pool and buffers</h2><dl class=\"meta\">");
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
    body
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
        let standbys = async {
            match &gateway.admin {
                Some(admin) => admin.standbys().await,
                None => Err("not asked".to_owned()),
            }
        };
        let gateways = async {
            match &gateway.admin {
                Some(admin) => admin.gateways().await,
                None => Err("not asked".to_owned()),
            }
        };
        let wal = async {
            match &gateway.admin {
                Some(admin) => admin.wal_position().await,
                None => Err("not asked".to_owned()),
            }
        };
        let (ready, metrics, database_size, standbys, gateways, wal) = tokio::join!(
            crate::loopback::request(listener, Method::GET, "/readyz", &[], MAX_READY),
            crate::loopback::request(listener, Method::GET, "/metrics", &[], MAX_METRICS),
            size,
            standbys,
            gateways,
            wal,
        );
        body.push_str(&gateways_section(gateways));
        body.push_str(&standbys_section(standbys));
        body.push_str("<section><h2>This gateway</h2><dl class=\"meta\">");
        body.push_str(&ready_entries(ready));
        body.push_str("</dl></section>");
        let _ = write!(
            body,
            "<section id=\"database\"><h2>The database</h2><dl class=\"meta\"><dt>Size</dt><dd id=\"database-size\">{}</dd>\
             <dt>WAL position</dt><dd id=\"wal-lsn\">{}</dd>",
            match database_size {
                Ok(bytes) => esc(&crate::html::size(bytes)),
                Err(err) => name(&err),
            },
            match &wal {
                Ok(position) => name(&position.lsn),
                Err(err) => name(err),
            }
        );
        match metrics {
            Ok((status, text)) if status.is_success() => {
                body.push_str(&self.metrics_sections(&text, wal.as_ref().ok().map(|position| position.bytes)));
            }
            Ok((status, _)) => {
                let _ = write!(
                    body,
                    "</dl></section><p class=\"flash error\">/metrics answered {status}</p>"
                );
            }
            Err(err) => {
                let _ = write!(body, "</dl></section><p class=\"flash error\">{}</p>", name(&err));
            }
        }
        self.page(StatusCode::OK, "Health", body)
    }

    /// What this gateway's `/metrics` answer (`text`) shows, sampled with the WAL position
    /// (`wal`, bytes): the WAL rate, which closes the database's section, then the requests,
    /// cache, and pool sections.
    fn metrics_sections(&self, text: &[u8], wal: Option<f64>) -> String {
        let mut body = String::new();
        let metrics = parse(&String::from_utf8_lossy(text));
        let now = Instant::now();
        self.app.samples.record(now, &metrics, wal);
        let intervals = self.app.samples.intervals(now);
        if let Some(rate) = intervals.last().and_then(|interval| interval.wal_rate) {
            let _ = write!(
                body,
                "<dt>WAL written</dt><dd id=\"wal-rate\">{}/s</dd>",
                esc(&crate::html::size(rate as i64))
            );
        }
        body.push_str("</dl></section>");
        body.push_str(&requests_section(&metrics, &intervals));
        body.push_str(&cache_section(&metrics));
        body.push_str(&pool_section(&metrics));
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_summed_per_protocol_and_sampled_into_a_bounded_ring() {
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
        let cached = format!(
            "{text}pgvs3_cache_lookups_total{{result=\"hit\"}} 6\npgvs3_cache_lookups_total{{result=\"miss\"}} 3\n\
             pgvs3_cache_lookups_total{{result=\"range_hit\"}} 1\npgvs3_cache_origin_errors_total{{kind=\"unreachable\"}} 2\n"
        );
        assert_eq!(
            metrics_summary(&cached),
            serde_json::json!({ "requests": 17.0, "server_errors": 2.0, "cache_reads": 10.0, "cache_hits": 7.0,
                "origin_errors": 2.0, "latency_seconds": 0.5, "latency_count": 10.0 })
        );
        let samples = Samples::default();
        let start = Instant::now();
        samples.record(start, &metrics, Some(1000.0));
        assert!(samples.intervals(start).is_empty());
        let mut later = parse(text);
        *later.requests.get_mut("s3").unwrap() += 20.0;
        later.latency.get_mut("s3").unwrap().0 += 1.0;
        later.latency.get_mut("s3").unwrap().1 += 20.0;
        let ten = start + std::time::Duration::from_secs(10);
        // A look within half a second adds no sample.
        samples.record(start + std::time::Duration::from_millis(100), &later, None);
        samples.record(ten, &later, Some(21_000.0));
        let intervals = samples.intervals(ten + std::time::Duration::from_secs(1));
        assert_eq!(intervals.len(), 1);
        let interval = &intervals[0];
        assert_eq!(
            (interval.ago, interval.rates["s3"], interval.rates["resp"]),
            (1.0, 2.0, 0.0)
        );
        assert!((interval.latency_ms["s3"].unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(interval.wal_rate, Some(2000.0));
        // A restart (counters back to zero) starts the history again; it stays bounded.
        samples.record(ten + std::time::Duration::from_secs(5), &metrics, None);
        assert!(samples.intervals(ten).is_empty());
        for second in 0..200 {
            samples.record(ten + std::time::Duration::from_secs(10 + second), &metrics, None);
        }
        assert_eq!(samples.0.lock().unwrap().len(), HISTORY);
    }

    #[test]
    fn a_gateways_ring_gives_its_rates_latency_and_cache_share() {
        let history = serde_json::json!([
            { "ago": 20.0, "requests": 5.0, "latency_seconds": 1.0, "latency_count": 5.0, "cache_reads": 0.0, "cache_hits": 0.0 },
            { "ago": 15.0, "requests": 15.0, "latency_seconds": 1.2, "latency_count": 15.0, "cache_reads": 4.0, "cache_hits": 1.0 },
            // Too close to the one before: no point.
            { "ago": 14.9, "requests": 16.0, "latency_seconds": 1.2, "latency_count": 16.0, "cache_reads": 4.0, "cache_hits": 1.0 },
            { "ago": 10.0, "requests": 15.0, "latency_seconds": 1.2, "latency_count": 15.0, "cache_reads": 4.0, "cache_hits": 1.0 },
        ]);
        let [rates, latency, cache] = gateway_series(&history);
        assert_eq!(rates, vec![(15.0, 2.0)]);
        assert_eq!(latency.len(), 1);
        assert!((latency[0].1 - 20.0).abs() < 1e-9, "{latency:?}");
        assert_eq!(cache, vec![(15.0, 25.0)]);
        assert!(gateway_series(&serde_json::json!("not a ring"))[0].is_empty());
    }
}
