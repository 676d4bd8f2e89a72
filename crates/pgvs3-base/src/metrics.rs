//! Prometheus metrics shared by every front.

use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub request_seconds: HistogramVec,
    pub bytes_received: IntCounterVec,
    pub bytes_sent: IntCounterVec,
    pool_connections: IntGaugeVec,
    pool_max: IntGauge,
    pub maintenance_reaped: IntCounterVec,
    pub maintenance_last_run: IntGauge,
    pub maintenance_backlog: IntGaugeVec,
    pub resp_group_commits: IntCounter,
    pub resp_group_committed_batches: IntCounter,
    pub resp_coalesced_commands: IntCounter,
    pub resp_group_reads: IntCounter,
    pub resp_group_read_batches: IntCounter,
    pub resp_output_limit_closed: IntCounter,
    pub resp_speculated_calls: IntCounter,
    pub resp_speculation_misses: IntCounter,
    pub resp_borrowed_keys: IntCounter,
    pub resp_script_batches: IntCounter,
    pub resp_batched_scripts: IntCounter,
    pub replication_lag_seconds: Gauge,
    pub admission_active: IntGaugeVec,
    pub admission_waiting: IntGaugeVec,
    pub admitted_after_wait: IntCounterVec,
    pub admission_rejected: IntCounterVec,
    pub http_connections: IntGaugeVec,
    pub http_connections_refused: IntCounterVec,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let r = &registry;
        let (requests, request_seconds, bytes_received, bytes_sent) = request_metrics(r);
        let (http_connections, http_connections_refused) = connection_metrics(r);
        let (pool_connections, pool_max, replication_lag_seconds) = database_metrics(r);
        let (maintenance_reaped, maintenance_last_run, maintenance_backlog) = maintenance_metrics(r);
        let [
            resp_group_commits,
            resp_group_committed_batches,
            resp_coalesced_commands,
            resp_group_reads,
            resp_group_read_batches,
            resp_output_limit_closed,
            resp_speculated_calls,
            resp_speculation_misses,
            resp_borrowed_keys,
            resp_script_batches,
            resp_batched_scripts,
        ] = resp_counters(r);
        let (admission_active, admission_waiting, admitted_after_wait, admission_rejected) = admission_metrics(r);
        let build_info = register(
            r,
            IntGaugeVec::new(Opts::new("pgvs3_build_info", "Build information"), &["version"]).expect("metric"),
        );
        build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        Metrics {
            registry,
            requests,
            request_seconds,
            bytes_received,
            bytes_sent,
            pool_connections,
            pool_max,
            maintenance_reaped,
            maintenance_last_run,
            maintenance_backlog,
            resp_group_commits,
            resp_group_committed_batches,
            resp_coalesced_commands,
            resp_group_reads,
            resp_group_read_batches,
            resp_output_limit_closed,
            resp_speculated_calls,
            resp_speculation_misses,
            resp_borrowed_keys,
            resp_script_batches,
            resp_batched_scripts,
            replication_lag_seconds,
            admission_active,
            admission_waiting,
            admitted_after_wait,
            admission_rejected,
            http_connections,
            http_connections_refused,
        }
    }

    /// Registers a component's own metrics next to these.
    pub fn register(&self, collector: Box<dyn prometheus::core::Collector>) {
        self.registry.register(collector).expect("metric names are unique");
    }

    /// Renders the text exposition, sampling the pool first so its gauges are current.
    pub fn render(&self, pool: &deadpool_postgres::Pool) -> String {
        let status = pool.status();
        self.pool_connections
            .with_label_values(&["idle"])
            .set(status.available as i64);
        self.pool_connections
            .with_label_values(&["in_use"])
            .set((status.size - status.available) as i64);
        self.pool_connections
            .with_label_values(&["waiting"])
            .set(status.waiting as i64);
        self.pool_max.set(status.max_size as i64);
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding cannot fail");
        String::from_utf8(out).expect("prometheus text is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// `collector`, registered in `registry` (a clone: both share the same values).
fn register<C: prometheus::core::Collector + Clone + 'static>(registry: &Registry, collector: C) -> C {
    registry
        .register(Box::new(collector.clone()))
        .expect("metric names are unique");
    collector
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(
        registry,
        IntCounterVec::new(Opts::new(name, help), labels).expect("metric"),
    )
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    register(
        registry,
        IntGaugeVec::new(Opts::new(name, help), labels).expect("metric"),
    )
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    register(registry, IntCounter::new(name, help).expect("metric"))
}

/// Requests of every protocol: counts, latency and body bytes.
fn request_metrics(r: &Registry) -> (IntCounterVec, HistogramVec, IntCounterVec, IntCounterVec) {
    let requests = counter_vec(
        r,
        "pgvs3_requests_total",
        "Requests by protocol, operation and status",
        &["protocol", "operation", "status"],
    );
    let request_seconds = HistogramVec::new(
        HistogramOpts::new(
            "pgvs3_request_duration_seconds",
            "Request latency until the response head",
        )
        .buckets(vec![
            0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
        ]),
        &["protocol", "operation"],
    )
    .expect("metric");
    let request_seconds = register(r, request_seconds);
    let bytes_received = counter_vec(r, "pgvs3_bytes_received_total", "Request body bytes", &["protocol"]);
    let bytes_sent = counter_vec(r, "pgvs3_bytes_sent_total", "Response body bytes", &["protocol"]);
    (requests, request_seconds, bytes_received, bytes_sent)
}

/// The HTTP listeners' connections: open, and closed unserved.
fn connection_metrics(r: &Registry) -> (IntGaugeVec, IntCounterVec) {
    let open = gauge_vec(
        r,
        "pgvs3_http_connections",
        "HTTP connections open, by listener",
        &["server"],
    );
    let refused = counter_vec(
        r,
        "pgvs3_http_connections_refused_total",
        "HTTP connections closed unserved: over the listener's cap (limit) or its cap per \
         client address (per_ip_limit), or no request within the first-request timeout \
         (first_request_timeout)",
        &["server", "reason"],
    );
    (open, refused)
}

/// The PostgreSQL pool (sampled at each render) and, on a standby, its replication lag.
fn database_metrics(r: &Registry) -> (IntGaugeVec, IntGauge, Gauge) {
    let connections = gauge_vec(
        r,
        "pgvs3_db_pool_connections",
        "PostgreSQL pool connections by state",
        &["state"],
    );
    let max = register(
        r,
        IntGauge::new("pgvs3_db_pool_max_connections", "PostgreSQL pool size limit").expect("metric"),
    );
    let lag = Gauge::new(
        "pgvs3_replication_lag_seconds",
        "On a hot standby, seconds since the last replayed transaction committed on the primary",
    )
    .expect("metric");
    (connections, max, register(r, lag))
}

/// The maintenance reaper's work, as leader.
fn maintenance_metrics(r: &Registry) -> (IntCounterVec, IntGauge, IntGaugeVec) {
    let reaped = counter_vec(
        r,
        "pgvs3_maintenance_reaped_total",
        "Rows removed by the maintenance reaper",
        &["kind"],
    );
    let last_run = IntGauge::new(
        "pgvs3_maintenance_last_run_timestamp_seconds",
        "When this gateway last completed a maintenance pass as leader",
    )
    .expect("metric");
    let backlog = gauge_vec(
        r,
        "pgvs3_maintenance_backlog",
        "Rows left for the reaper after its last pass (retired bodies still in their grace period, \
         multipart uploads in progress)",
        &["kind"],
    );
    (reaped, register(r, last_run), backlog)
}

/// RESP's group commit and group read, and the connections closed for their output.
fn resp_counters(r: &Registry) -> [IntCounter; 11] {
    [
        counter(
            r,
            "pgvs3_resp_group_commits_total",
            "RESP write transactions committed (each may carry many connections' batches)",
        ),
        counter(
            r,
            "pgvs3_resp_group_committed_batches_total",
            "RESP write batches (one connection's pipelined writes) carried by those commits",
        ),
        counter(
            r,
            "pgvs3_resp_coalesced_commands_total",
            "RESP typed writes run inside the SQL call of the command before them (same kind, same key)",
        ),
        counter(
            r,
            "pgvs3_resp_group_reads_total",
            "RESP read statements (each may carry many connections' batches)",
        ),
        counter(
            r,
            "pgvs3_resp_group_read_batches_total",
            "RESP read batches (one connection's pipelined reads) carried by those statements",
        ),
        counter(
            r,
            "pgvs3_resp_client_output_limit_closed_total",
            "RESP connections closed because a reply passed --resp-output-limit \
             (Redis's client-output-buffer-limit for normal clients)",
        ),
        counter(
            r,
            "pgvs3_resp_speculated_calls_total",
            "Script calls answered from the working set and checked in the database in a later round trip",
        ),
        counter(
            r,
            "pgvs3_resp_speculation_misses_total",
            "Script runs started over without the working set because a call answered otherwise than predicted",
        ),
        counter(
            r,
            "pgvs3_resp_borrowed_keys_total",
            "Keys a script first used on the way, answered from the working set without a load and checked at commit",
        ),
        counter(
            r,
            "pgvs3_resp_script_batches_total",
            "RESP transactions of a client's pipelined scripts committed (each carries one or more scripts)",
        ),
        counter(
            r,
            "pgvs3_resp_batched_scripts_total",
            "Pipelined scripts carried by those transactions",
        ),
    ]
}

/// Admission control: requests served, waiting, admitted after a wait and turned away.
fn admission_metrics(r: &Registry) -> (IntGaugeVec, IntGaugeVec, IntCounterVec, IntCounterVec) {
    let active = gauge_vec(r, "pgvs3_admission_active", "Requests being served", &["protocol"]);
    let waiting = gauge_vec(
        r,
        "pgvs3_admission_waiting",
        "Requests waiting for a slot",
        &["protocol"],
    );
    let admitted_after_wait = counter_vec(
        r,
        "pgvs3_admission_admitted_after_wait_total",
        "Requests admitted after waiting",
        &["protocol"],
    );
    let rejected = counter_vec(
        r,
        "pgvs3_admission_rejected_total",
        "Requests turned away (queue full or deadline passed)",
        &["protocol", "reason"],
    );
    (active, waiting, admitted_after_wait, rejected)
}
