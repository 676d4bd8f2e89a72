//! One configuration, from flags and their `PGVS3_*` environment twins.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

pub use crate::pg::DatabaseArgs;
pub use crate::telemetry::LogFormat;
pub use pgvs3_base::args::{ListenAddr, parse_bytes, parse_duration, parse_listen_addr};

/// The shortest `--body-grace`: a read or an in-database copy that found a body just before it
/// was retired still reads or copies all of its chunks, however long its statements queue.
pub const MIN_BODY_GRACE: Duration = Duration::from_secs(60);

fn parse_body_grace(text: &str) -> Result<Duration, String> {
    let grace = parse_duration(text)?;
    match grace >= MIN_BODY_GRACE {
        true => Ok(grace),
        false => Err(format!("{text:?} is shorter than the minimum of 60s")),
    }
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// The S3 endpoint.
    #[command(flatten)]
    pub s3: pgvs3_s3::args::S3Args,

    /// Listen address of /healthz, /readyz and /metrics.
    #[arg(long, env = "PGVS3_ADMIN_ADDR", default_value = "127.0.0.1:9090")]
    pub admin_addr: SocketAddr,

    /// Report unready unless the database has this role: a gateway meant for the primary must
    /// not quietly serve from a standby, nor the other way round.
    #[arg(long, env = "PGVS3_REQUIRE_ROLE", value_enum, default_value_t)]
    pub require_role: RequiredRole,

    /// How long a request waits for a slot before 503 SlowDown.
    #[arg(long, env = "PGVS3_ADMISSION_WAIT", default_value = "1s", value_parser = parse_duration)]
    pub admission_wait: Duration,

    /// Memory the gateway may hold for request bodies it must buffer (cache write-through
    /// bodies, range fills, large RESP requests); requests beyond it take their unbuffered path
    /// instead of waiting, and a RESP request that cannot fit gets -OOM.
    #[arg(long, env = "PGVS3_BUFFER_BUDGET", default_value = "256MiB", value_parser = parse_bytes)]
    pub buffer_budget: u64,

    /// Access key of the root key, created on first start (generated when unset).
    #[arg(long, env = "PGVS3_ROOT_ACCESS_KEY")]
    pub root_access_key: Option<String>,

    /// Secret of the root key, used on first start (generated when unset).
    #[arg(long, env = "PGVS3_ROOT_SECRET_KEY", hide_env_values = true)]
    pub root_secret_key: Option<String>,

    /// How long a retired (overwritten or deleted) body stays readable before it is reaped: at
    /// least a minute ([`MIN_BODY_GRACE`]).
    #[arg(long, env = "PGVS3_BODY_GRACE", default_value = "10m", value_parser = parse_body_grace)]
    pub body_grace: Duration,

    /// On a hot standby, refuse S3 and OJS reads (503) and report unready while replay trails what the
    /// primary sent by more than this (`0s`: never).
    #[arg(long, env = "PGVS3_MAX_REPLICATION_LAG", default_value = "0s", value_parser = parse_duration)]
    pub max_replication_lag: Duration,

    /// How often the catalog version is polled (standbys rely on it; primaries also LISTEN).
    #[arg(long, env = "PGVS3_CATALOG_POLL", default_value = "1s", value_parser = parse_duration)]
    pub catalog_poll: Duration,

    /// How often the maintenance leader runs the reaper.
    #[arg(long, env = "PGVS3_MAINTENANCE_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub maintenance_interval: Duration,

    #[command(flatten)]
    pub supervision: pgvs3_pg::args::SupervisionArgs,

    /// How long shutdown waits for in-flight requests.
    #[arg(long, env = "PGVS3_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    // --- HTTP listeners (S3, OJS, admin) ---
    #[command(flatten)]
    pub http: pgvs3_base::args::HttpArgs,

    /// Admin (/healthz, /readyz, /metrics) connections open at once: its own budget, so probes
    /// are answered while the data ports are flooded.
    #[arg(long, env = "PGVS3_ADMIN_MAX_CONNECTIONS", default_value_t = 64)]
    pub admin_max_connections: usize,

    #[command(flatten)]
    pub resp: pgvs3_resp::resp::RespArgs,

    #[command(flatten)]
    pub ojs: pgvs3_ojs::args::OjsArgs,

    #[command(flatten)]
    pub webhooks: pgvs3_ojs::args::WebhookArgs,

    #[command(flatten)]
    pub tls: TlsArgs,

    #[command(flatten)]
    pub cache: pgvs3_store::args::CacheArgs,

    #[command(flatten)]
    pub simulate: pgvs3_base::args::SimulateArgs,

    /// The web console (docs/console.md).
    #[command(flatten)]
    pub console: pgvs3_console::ConsoleArgs,
}

/// TLS on the listeners.
#[derive(Debug, Clone, Args)]
pub struct TlsArgs {
    /// PEM certificate chain of the listeners; with --tls-key, S3, OJS and admin speak HTTPS
    /// and RESP speaks TLS (as `redis-cli --tls`). Re-read when the files change.
    #[arg(long, env = "PGVS3_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, env = "PGVS3_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Listeners that stay plaintext although --tls-cert is given (e.g. `admin`, for probes
    /// and scrapers without TLS): any of s3, resp, ojs, admin.
    #[arg(long, env = "PGVS3_TLS_PLAINTEXT", value_delimiter = ',', value_enum)]
    pub tls_plaintext: Vec<TlsListener>,

    /// With TLS on, admin clients must present a certificate issued by this PEM CA.
    #[arg(long, env = "PGVS3_ADMIN_TLS_CLIENT_CA", requires = "tls_cert")]
    pub admin_tls_client_ca: Option<PathBuf>,

    /// During a move to TLS: a second, plaintext S3 listener on this address (off by default).
    #[arg(long, env = "PGVS3_S3_PLAINTEXT_ADDR", requires = "tls_cert")]
    pub s3_plaintext_addr: Option<SocketAddr>,

    /// During a move to TLS: a second, plaintext RESP listener on this address (off by default).
    #[arg(long, env = "PGVS3_RESP_PLAINTEXT_ADDR", requires = "tls_cert")]
    pub resp_plaintext_addr: Option<SocketAddr>,

    /// During a move to TLS: a second, plaintext OJS listener on this address (off by default).
    #[arg(long, env = "PGVS3_OJS_PLAINTEXT_ADDR", requires = "tls_cert")]
    pub ojs_plaintext_addr: Option<SocketAddr>,
}

/// A listener that may stay plaintext (`--tls-plaintext`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TlsListener {
    S3,
    Resp,
    Ojs,
    Admin,
}

#[derive(Debug, Clone, Copy, ValueEnum, Default, PartialEq, Eq)]
pub enum RequiredRole {
    #[default]
    Any,
    Primary,
    Standby,
}

impl ServeArgs {
    /// What each protocol's admission limits default to when its flags say 0.
    pub fn admission_defaults(&self) -> pgvs3_base::feature::AdmissionDefaults {
        pgvs3_base::feature::AdmissionDefaults {
            pool_size: self.database.pool_size,
            wait: self.admission_wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_grace_is_at_least_a_minute() {
        assert_eq!(parse_body_grace("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_body_grace("60s"), Ok(MIN_BODY_GRACE));
        assert!(parse_body_grace("59s").is_err());
        assert!(parse_body_grace("0s").is_err());
    }
}
