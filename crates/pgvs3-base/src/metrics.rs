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
        let requests = IntCounterVec::new(
            Opts::new("pgvs3_requests_total", "Requests by protocol, operation and status"),
            &["protocol", "operation", "status"],
        )
        .expect("metric");
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
        let bytes_received = IntCounterVec::new(
            Opts::new("pgvs3_bytes_received_total", "Request body bytes"),
            &["protocol"],
        )
        .expect("metric");
        let bytes_sent = IntCounterVec::new(
            Opts::new("pgvs3_bytes_sent_total", "Response body bytes"),
            &["protocol"],
        )
        .expect("metric");
        let pool_connections = IntGaugeVec::new(
            Opts::new("pgvs3_db_pool_connections", "PostgreSQL pool connections by state"),
            &["state"],
        )
        .expect("metric");
        let pool_max = IntGauge::new("pgvs3_db_pool_max_connections", "PostgreSQL pool size limit").expect("metric");
        let maintenance_reaped = IntCounterVec::new(
            Opts::new(
                "pgvs3_maintenance_reaped_total",
                "Rows removed by the maintenance reaper",
            ),
            &["kind"],
        )
        .expect("metric");
        let maintenance_last_run = IntGauge::new(
            "pgvs3_maintenance_last_run_timestamp_seconds",
            "When this gateway last completed a maintenance pass as leader",
        )
        .expect("metric");
        let maintenance_backlog = IntGaugeVec::new(
            Opts::new(
                "pgvs3_maintenance_backlog",
                "Rows left for the reaper after its last pass (retired bodies still in their grace period, \
                 multipart uploads in progress)",
            ),
            &["kind"],
        )
        .expect("metric");
        let resp_group_commits = IntCounter::new(
            "pgvs3_resp_group_commits_total",
            "RESP write transactions committed (each may carry many connections' batches)",
        )
        .expect("metric");
        let resp_group_committed_batches = IntCounter::new(
            "pgvs3_resp_group_committed_batches_total",
            "RESP write batches (one connection's pipelined writes) carried by those commits",
        )
        .expect("metric");
        let resp_coalesced_commands = IntCounter::new(
            "pgvs3_resp_coalesced_commands_total",
            "RESP typed writes run inside the SQL call of the command before them (same kind, same key)",
        )
        .expect("metric");
        let resp_group_reads = IntCounter::new(
            "pgvs3_resp_group_reads_total",
            "RESP read statements (each may carry many connections' batches)",
        )
        .expect("metric");
        let resp_group_read_batches = IntCounter::new(
            "pgvs3_resp_group_read_batches_total",
            "RESP read batches (one connection's pipelined reads) carried by those statements",
        )
        .expect("metric");
        let resp_output_limit_closed = IntCounter::new(
            "pgvs3_resp_client_output_limit_closed_total",
            "RESP connections closed because a reply passed --resp-output-limit \
             (Redis's client-output-buffer-limit for normal clients)",
        )
        .expect("metric");
        let replication_lag_seconds = Gauge::new(
            "pgvs3_replication_lag_seconds",
            "On a hot standby, seconds since the last replayed transaction committed on the primary",
        )
        .expect("metric");
        let admission_active = IntGaugeVec::new(
            Opts::new("pgvs3_admission_active", "Requests being served"),
            &["protocol"],
        )
        .expect("metric");
        let admission_waiting = IntGaugeVec::new(
            Opts::new("pgvs3_admission_waiting", "Requests waiting for a slot"),
            &["protocol"],
        )
        .expect("metric");
        let admitted_after_wait = IntCounterVec::new(
            Opts::new(
                "pgvs3_admission_admitted_after_wait_total",
                "Requests admitted after waiting",
            ),
            &["protocol"],
        )
        .expect("metric");
        let admission_rejected = IntCounterVec::new(
            Opts::new(
                "pgvs3_admission_rejected_total",
                "Requests turned away (queue full or deadline passed)",
            ),
            &["protocol", "reason"],
        )
        .expect("metric");
        let http_connections = IntGaugeVec::new(
            Opts::new("pgvs3_http_connections", "HTTP connections open, by listener"),
            &["server"],
        )
        .expect("metric");
        let http_connections_refused = IntCounterVec::new(
            Opts::new(
                "pgvs3_http_connections_refused_total",
                "HTTP connections closed unserved: over the listener's cap (limit), or no request \
                 within the first-request timeout (first_request_timeout)",
            ),
            &["server", "reason"],
        )
        .expect("metric");
        let build_info =
            IntGaugeVec::new(Opts::new("pgvs3_build_info", "Build information"), &["version"]).expect("metric");
        build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        for collector in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(request_seconds.clone()),
            Box::new(bytes_received.clone()),
            Box::new(bytes_sent.clone()),
            Box::new(pool_connections.clone()),
            Box::new(pool_max.clone()),
            Box::new(maintenance_reaped.clone()),
            Box::new(maintenance_last_run.clone()),
            Box::new(maintenance_backlog.clone()),
            Box::new(resp_group_commits.clone()),
            Box::new(resp_group_committed_batches.clone()),
            Box::new(resp_coalesced_commands.clone()),
            Box::new(resp_group_reads.clone()),
            Box::new(resp_group_read_batches.clone()),
            Box::new(resp_output_limit_closed.clone()),
            Box::new(replication_lag_seconds.clone()),
            Box::new(admission_active.clone()),
            Box::new(admission_waiting.clone()),
            Box::new(admitted_after_wait.clone()),
            Box::new(admission_rejected.clone()),
            Box::new(http_connections.clone()),
            Box::new(http_connections_refused.clone()),
            Box::new(build_info),
        ] {
            registry.register(collector).expect("metric names are unique");
        }
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
