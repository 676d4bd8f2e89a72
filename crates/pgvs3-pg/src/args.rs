//! The database's flags: where it is (`DatabaseArgs`, taken by every command that reaches it)
//! and how a gateway rides out its faults (`SupervisionArgs`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use pgvs3_base::args::{parse_bytes, parse_duration};

/// Where the gateway's PostgreSQL is: an explicit URL, or the embedded default in a data dir.
/// Global: `pgvs3 admin key list --data-dir D` works as well as `pgvs3 admin --data-dir D key list`.
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL connection URL (postgres://user:pass@host:port/db). Without it, pgvs3 starts
    /// (or, for admin commands, reaches) an embedded PostgreSQL in --data-dir.
    #[arg(long, global = true, env = "PGVS3_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Data directory of the embedded PostgreSQL (cluster, master key, logs).
    #[arg(long, global = true, env = "PGVS3_DATA_DIR", default_value = ".pgvs3")]
    pub data_dir: PathBuf,

    /// Directory holding the PostgreSQL server binaries (initdb, postgres).
    #[arg(long, global = true, env = "PGVS3_PG_BIN")]
    pub pg_bin: Option<PathBuf>,

    /// Master key that encrypts access-key secrets in the catalog. The embedded default
    /// generates one and keeps it in the data dir.
    #[arg(long, global = true, env = "PGVS3_MASTER_KEY", hide_env_values = true)]
    pub master_key: Option<String>,

    /// Maximum PostgreSQL connections in this gateway's pool.
    #[arg(long, global = true, env = "PGVS3_POOL_SIZE", default_value_t = 32)]
    pub pool_size: usize,

    // --- database faults ---
    /// `shared_buffers` of the embedded PostgreSQL (default: a quarter of RAM, at most 1GiB).
    #[arg(long, global = true, env = "PGVS3_PG_SHARED_BUFFERS", value_parser = parse_bytes)]
    pub pg_shared_buffers: Option<u64>,

    /// How long opening a PostgreSQL connection (socket, startup, authentication) may take.
    #[arg(long, global = true, env = "PGVS3_PG_CONNECT_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub pg_connect_timeout: Duration,

    /// How long a request waits for a free pool connection before it fails (503).
    #[arg(long, global = true, env = "PGVS3_PG_POOL_WAIT_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub pg_pool_wait_timeout: Duration,
    // --- end database faults ---

    // --- TLS ---
    /// The embedded PostgreSQL also accepts TLS on 127.0.0.1 with this PEM certificate (with
    /// --pg-embedded-tls-key); off by default (the gateway reaches it on its Unix socket).
    #[arg(
        long,
        global = true,
        env = "PGVS3_PG_EMBEDDED_TLS_CERT",
        requires = "pg_embedded_tls_key"
    )]
    pub pg_embedded_tls_cert: Option<PathBuf>,

    /// The PEM private key of --pg-embedded-tls-cert.
    #[arg(
        long,
        global = true,
        env = "PGVS3_PG_EMBEDDED_TLS_KEY",
        requires = "pg_embedded_tls_cert"
    )]
    pub pg_embedded_tls_key: Option<PathBuf>,
    // --- end TLS ---
}

impl DatabaseArgs {
    /// The embedded server's certificate and key, when it is to speak TLS.
    pub fn pg_embedded_tls(&self) -> Option<(PathBuf, PathBuf)> {
        self.pg_embedded_tls_cert.clone().zip(self.pg_embedded_tls_key.clone())
    }
}

/// How the gateway notices a database fault and restarts an embedded server (`pgvs3 serve`).
#[derive(Debug, Clone, Args)]
pub struct SupervisionArgs {
    /// How often a dedicated connection checks that PostgreSQL answers, and each LISTEN
    /// connection (the catalog's, RESP's) makes a round trip.
    #[arg(long, env = "PGVS3_PG_PROBE_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub pg_probe_interval: Duration,

    /// A check unanswered this long counts as an outage: /readyz turns 503 and every
    /// connection is dropped, so no request keeps waiting on a dead one. A LISTEN connection's
    /// round trip unanswered this long has that connection re-opened (it went silent alone).
    #[arg(long, env = "PGVS3_PG_PROBE_TIMEOUT", default_value = "3s", value_parser = parse_duration)]
    pub pg_probe_timeout: Duration,

    /// Restarts of an embedded PostgreSQL that exited, with backoff, before the gateway gives
    /// up and reports /healthz 503.
    #[arg(long, env = "PGVS3_PG_RESTART_ATTEMPTS", default_value_t = 8)]
    pub pg_restart_attempts: u32,
}
