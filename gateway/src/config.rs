//! One configuration, from flags and their `PGVS3_*` environment twins.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

pub use crate::pg::DatabaseArgs;
pub use crate::telemetry::LogFormat;
pub use pgvs3_base::args::{ListenAddr, parse_bytes, parse_duration, parse_listen_addr};

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// Listen address of the S3 endpoint.
    #[arg(long, env = "PGVS3_S3_ADDR", default_value = "127.0.0.1:9000")]
    pub s3_addr: SocketAddr,

    /// Listen address of /healthz, /readyz and /metrics.
    #[arg(long, env = "PGVS3_ADMIN_ADDR", default_value = "127.0.0.1:9090")]
    pub admin_addr: SocketAddr,

    /// Report unready unless the database has this role: a gateway meant for the primary must
    /// not quietly serve from a standby, nor the other way round.
    #[arg(long, env = "PGVS3_REQUIRE_ROLE", value_enum, default_value_t)]
    pub require_role: RequiredRole,

    /// S3 requests served at once (0: twice the pool size); beyond it requests wait.
    #[arg(long, env = "PGVS3_S3_MAX_ACTIVE", default_value_t = 0)]
    pub s3_max_active: usize,

    /// S3 requests that may wait for a slot (0: twice the active limit); beyond it they get
    /// 503 SlowDown at once.
    #[arg(long, env = "PGVS3_S3_MAX_WAITING", default_value_t = 0)]
    pub s3_max_waiting: usize,

    /// How long a request waits for a slot before 503 SlowDown.
    #[arg(long, env = "PGVS3_ADMISSION_WAIT", default_value = "1s", value_parser = parse_duration)]
    pub admission_wait: Duration,

    /// Memory the gateway may hold for request bodies it must buffer (cache write-through
    /// bodies, range fills, large RESP requests); requests beyond it take their unbuffered path
    /// instead of waiting, and a RESP request that cannot fit gets -OOM.
    #[arg(long, env = "PGVS3_BUFFER_BUDGET", default_value = "256MiB", value_parser = parse_bytes)]
    pub buffer_budget: u64,

    /// The largest file a browser upload (POST Object) may carry. s3s holds the file in memory
    /// before storing it, so each form draws its size from the buffer budget while it is read
    /// (a form that does not fit gets 503 SlowDown); keep it well below --buffer-budget.
    #[arg(long, env = "PGVS3_S3_POST_MAX_SIZE", default_value = "64MiB", value_parser = parse_bytes)]
    pub s3_post_max_size: u64,

    /// The object ownership of a bucket created without `x-amz-object-ownership`:
    /// BucketOwnerEnforced (AWS's default: ACLs off), or ObjectWriter / BucketOwnerPreferred for
    /// ACL-era tools (`create_bucket(ACL=...)`, s3cmd `--acl-public`, PutBucketAcl), as buckets
    /// made on MinIO or Ceph behave.
    #[arg(
        long,
        env = "PGVS3_S3_DEFAULT_OBJECT_OWNERSHIP",
        default_value = "BucketOwnerEnforced",
        value_parser = parse_ownership
    )]
    pub s3_default_object_ownership: crate::access::acl::Ownership,

    /// Region reported by GetBucketLocation and accepted in signatures.
    #[arg(long, env = "PGVS3_REGION", default_value = "us-east-1")]
    pub region: String,

    /// Base domain(s) for virtual-host-style requests (`<bucket>.<domain>`); path style always works.
    #[arg(long = "s3-domain", env = "PGVS3_S3_DOMAINS", value_delimiter = ',')]
    pub s3_domains: Vec<String>,

    /// Access key of the root key, created on first start (generated when unset).
    #[arg(long, env = "PGVS3_ROOT_ACCESS_KEY")]
    pub root_access_key: Option<String>,

    /// Secret of the root key, used on first start (generated when unset).
    #[arg(long, env = "PGVS3_ROOT_SECRET_KEY", hide_env_values = true)]
    pub root_secret_key: Option<String>,

    /// How long a retired (overwritten or deleted) body stays readable before it is reaped.
    #[arg(long, env = "PGVS3_BODY_GRACE", default_value = "10m", value_parser = parse_duration)]
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

    /// S3 connections open at once; beyond it a connection is answered 503 SlowDown and closed.
    #[arg(long, env = "PGVS3_S3_MAX_CONNECTIONS", default_value_t = 4096)]
    pub s3_max_connections: usize,

    /// OJS connections open at once; beyond it a connection is answered 503 and closed.
    #[arg(long, env = "PGVS3_OJS_MAX_CONNECTIONS", default_value_t = 1024)]
    pub ojs_max_connections: usize,

    /// Admin (/healthz, /readyz, /metrics) connections open at once: its own budget, so probes
    /// are answered while the data ports are flooded.
    #[arg(long, env = "PGVS3_ADMIN_MAX_CONNECTIONS", default_value_t = 64)]
    pub admin_max_connections: usize,

    /// S3 requests whose body is declared larger than this (or not declared) are admitted as
    /// uploads, in their own class (--s3-max-active-uploads), so large bodies cannot take the
    /// slots small requests need.
    #[arg(long, env = "PGVS3_S3_UPLOAD_THRESHOLD", default_value = "1MiB", value_parser = parse_bytes)]
    pub s3_upload_threshold: u64,

    /// Uploads (see --s3-upload-threshold) streaming at once (0: as many as --s3-max-active);
    /// beyond it they wait (up to --s3-upload-wait), then get 503 SlowDown.
    #[arg(long, env = "PGVS3_S3_MAX_ACTIVE_UPLOADS", default_value_t = 0)]
    pub s3_max_active_uploads: usize,

    /// How long an upload waits for its turn. Longer than --admission-wait: a waiting upload
    /// costs an idle connection (its body is not read yet), while one turned away is sent again
    /// by its client, body and all.
    #[arg(long, env = "PGVS3_S3_UPLOAD_WAIT", default_value = "30s", value_parser = parse_duration)]
    pub s3_upload_wait: Duration,

    // --- S3 multipart ---
    /// Multipart uploads neither completed nor aborted this long after they started are
    /// aborted by the maintenance reaper.
    #[arg(long, env = "PGVS3_MULTIPART_MAX_AGE", default_value = "168h", value_parser = parse_duration)]
    pub multipart_max_age: Duration,

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
    /// The S3 admission limits, with the automatic defaults filled in.
    pub fn s3_limits(&self) -> crate::admission::Limits {
        self.admission_limits(self.s3_max_active, self.s3_max_waiting)
    }

    /// The admission limits of S3 uploads (large or undeclared bodies), defaults filled in.
    pub fn s3_upload_limits(&self) -> crate::admission::Limits {
        // Measured (docs/benchmarks.md, "Small requests beside large uploads"): fewer upload
        // slots than small-request slots made 4 KiB GETs beside 10 MiB PUTs slower, not faster.
        let max_active = if self.s3_max_active_uploads == 0 {
            self.s3_limits().max_active
        } else {
            self.s3_max_active_uploads
        };
        crate::admission::Limits {
            max_active,
            // As many as the other requests may have waiting: uploads wait rather than retry.
            max_waiting: self.s3_limits().max_waiting,
            max_wait: self.s3_upload_wait,
        }
    }

    /// The RESP admission limits (per batch of pipelined commands), defaults filled in.
    pub fn resp_limits(&self) -> crate::admission::Limits {
        self.admission_limits(self.resp.resp_max_active, self.resp.resp_max_waiting)
    }

    /// The OJS admission limits, defaults filled in.
    pub fn ojs_limits(&self) -> crate::admission::Limits {
        self.admission_limits(self.ojs.ojs_max_active, self.ojs.ojs_max_waiting)
    }

    /// 0 active: twice the pool size; 0 waiting: twice the active limit.
    fn admission_limits(&self, max_active: usize, max_waiting: usize) -> crate::admission::Limits {
        let max_active = if max_active == 0 {
            self.database.pool_size * 2
        } else {
            max_active
        };
        crate::admission::Limits {
            max_active,
            max_waiting: if max_waiting == 0 { max_active * 2 } else { max_waiting },
            max_wait: self.admission_wait,
        }
    }
}

fn parse_ownership(text: &str) -> Result<crate::access::acl::Ownership, String> {
    crate::access::acl::Ownership::parse(text)
        .ok_or_else(|| format!("{text}: not BucketOwnerEnforced, BucketOwnerPreferred or ObjectWriter"))
}
