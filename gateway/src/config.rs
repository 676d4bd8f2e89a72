//! One configuration, from flags and their `PGVS3_*` environment twins.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

/// Where the gateway's PostgreSQL is: an explicit URL, or the embedded default in a data dir.
/// Global: `pgvs3 admin key list --data-dir D` works as well as `pgvs3 admin --data-dir D key list`.
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL connection URL (postgres://user:pass@host:port/db). Without it, pgvs3 starts
    /// (or, for admin commands, reaches) an embedded PostgreSQL in --data-dir.
    #[arg(long, global = true, env = "PGVS3_DATABASE_URL")]
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

    // --- database faults ---
    /// How often a dedicated connection checks that PostgreSQL answers.
    #[arg(long, env = "PGVS3_PG_PROBE_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub pg_probe_interval: Duration,

    /// A check unanswered this long counts as an outage: /readyz turns 503 and every
    /// connection is dropped, so no request keeps waiting on a dead one.
    #[arg(long, env = "PGVS3_PG_PROBE_TIMEOUT", default_value = "3s", value_parser = parse_duration)]
    pub pg_probe_timeout: Duration,

    /// Restarts of an embedded PostgreSQL that exited, with backoff, before the gateway gives
    /// up and reports /healthz 503.
    #[arg(long, env = "PGVS3_PG_RESTART_ATTEMPTS", default_value_t = 8)]
    pub pg_restart_attempts: u32,
    // --- end database faults ---
    /// How long shutdown waits for in-flight requests.
    #[arg(long, env = "PGVS3_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    // --- HTTP listeners (S3, OJS, admin) ---
    /// A new HTTP connection must send its first request head within this, or it is closed.
    #[arg(long, env = "PGVS3_HTTP_FIRST_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub http_first_request_timeout: Duration,

    /// An idle HTTP/1.1 keep-alive connection must send its next request head within this, or it
    /// is closed (HTTP/2: the PING interval that finds dead peers).
    #[arg(long, env = "PGVS3_HTTP_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub http_idle_timeout: Duration,

    /// A request body that sends nothing for this long fails (S3: 400 RequestTimeout), freeing its
    /// slot and database connection.
    #[arg(long, env = "PGVS3_HTTP_BODY_IDLE_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub http_body_idle_timeout: Duration,

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

    // --- RESP ---
    /// Listen address of the RESP (Redis protocol) endpoint, or `off`.
    #[arg(long, env = "PGVS3_RESP_ADDR", default_value = "127.0.0.1:6380", value_parser = parse_listen_addr)]
    pub resp_addr: ListenAddr,

    /// Bucket that holds RESP database 0 (created on first start, owned by the root key).
    #[arg(long, env = "PGVS3_RESP_BUCKET", default_value = "resp")]
    pub resp_bucket: String,

    /// Further RESP databases for SELECT, as `index=bucket` pairs: `1=cache,2=sessions`.
    #[arg(long, env = "PGVS3_RESP_DATABASES", value_delimiter = ',', value_parser = parse_resp_database)]
    pub resp_databases: Vec<(u32, String)>,

    /// Password for `AUTH <password>`. Without it, clients on a loopback listener need no AUTH;
    /// on any other listener they must AUTH with an access key and its secret.
    #[arg(long, env = "PGVS3_RESP_PASSWORD", hide_env_values = true)]
    pub resp_password: Option<String>,

    /// Allow FLUSHDB (off by default: it deletes every object of the database's bucket).
    #[arg(long, env = "PGVS3_RESP_FLUSHDB")]
    pub resp_flushdb: bool,

    /// Most RESP clients connected at once; more are refused with `-ERR max number of clients reached`.
    #[arg(long, env = "PGVS3_RESP_MAX_CLIENTS", default_value_t = 10_000)]
    pub resp_max_clients: usize,

    /// Batches of RESP commands served at once (0: twice the pool size); beyond it they wait.
    #[arg(long, env = "PGVS3_RESP_MAX_ACTIVE", default_value_t = 0)]
    pub resp_max_active: usize,

    /// RESP batches that may wait for a slot (0: twice the active limit); beyond it, and after
    /// --admission-wait, every command of the batch gets `-BUSY`.
    #[arg(long, env = "PGVS3_RESP_MAX_WAITING", default_value_t = 0)]
    pub resp_max_waiting: usize,

    /// How often a client blocked in BLPOP and its kin tries again without being told of new
    /// elements (it is told by NOTIFY at once; this covers a lost LISTEN connection).
    #[arg(long, env = "PGVS3_RESP_BLOCK_POLL", default_value = "1s", value_parser = parse_duration)]
    pub resp_block_poll: Duration,

    /// Bytes of published messages a RESP subscriber may have waiting unread before its
    /// connection is closed (Redis's `client-output-buffer-limit pubsub` hard limit, 32 MiB).
    #[arg(long, env = "PGVS3_RESP_PUBSUB_OUTPUT_LIMIT", default_value = "32MiB", value_parser = parse_bytes)]
    pub resp_pubsub_output_limit: u64,

    /// How long a Lua script (EVAL, EVALSHA) may run before it is stopped and its writes rolled
    /// back (Redis's `lua-time-limit`, 5 s; Redis only starts to answer BUSY then).
    #[arg(long, env = "PGVS3_RESP_SCRIPT_TIME_LIMIT", default_value = "5s", value_parser = parse_duration)]
    pub resp_script_time_limit: Duration,

    /// Memory one Lua script's interpreter may allocate; past it the script fails and its writes
    /// are rolled back.
    #[arg(long, env = "PGVS3_RESP_SCRIPT_MAX_MEMORY", default_value = "64MiB", value_parser = parse_bytes)]
    pub resp_script_max_memory: u64,

    /// Lua scripts that may run at once (default: the machine's cores, at least 2); a script
    /// that finds them all busy for `--admission-wait` is answered `BUSY`, as Redis answers
    /// while a script runs. Bounds the CPU and memory scripts can take (this times
    /// `--resp-script-max-memory`).
    #[arg(long, env = "PGVS3_RESP_MAX_RUNNING_SCRIPTS", value_parser = clap::value_parser!(u16).range(1..))]
    pub resp_max_running_scripts: Option<u16>,

    /// Channels, patterns and shard channels one RESP connection may subscribe to.
    #[arg(long, env = "PGVS3_RESP_MAX_SUBSCRIPTIONS", default_value_t = 10_000)]
    pub resp_max_subscriptions: usize,

    /// Longest pattern (bytes) PSUBSCRIBE takes.
    #[arg(long, env = "PGVS3_RESP_MAX_PATTERN", default_value_t = 1024)]
    pub resp_max_pattern: usize,

    /// Close RESP connections idle this long (`0s`: never, as Redis's default `timeout 0`).
    #[arg(long, env = "PGVS3_RESP_IDLE_TIMEOUT", default_value = "0s", value_parser = parse_duration)]
    pub resp_idle_timeout: Duration,

    /// Close RESP connections that send nothing this long after connecting (`0s`: never).
    /// Clients write as soon as they connect; a silent connection only holds a descriptor.
    #[arg(long, env = "PGVS3_RESP_FIRST_BYTE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub resp_first_byte_timeout: Duration,

    /// Close RESP connections that must AUTH and have not this long after connecting (or
    /// after RESET) (`0s`: never).
    #[arg(long, env = "PGVS3_RESP_AUTH_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub resp_auth_timeout: Duration,

    // --- OJS ---
    /// Listen address of the OJS (Open Job Spec) HTTP endpoint; `off` disables it.
    #[arg(long, env = "PGVS3_OJS_ADDR", default_value = "127.0.0.1:8080", value_parser = parse_listen_addr)]
    pub ojs_addr: ListenAddr,

    /// Conformance mode, for conformance runs only: serve POST /ojs/v1/admin/reset (it deletes
    /// every job) and honour the suite's test hook (`options.metadata.test_directive`).
    #[arg(long, env = "PGVS3_OJS_ALLOW_RESET")]
    pub ojs_allow_reset: bool,

    /// Largest serialized `args` of one job, in bytes.
    #[arg(long, env = "PGVS3_OJS_MAX_ARGS_BYTES", default_value_t = 1 << 20)]
    pub ojs_max_args_bytes: usize,

    /// Largest OJS request body, checked against Content-Length and while it streams in, before
    /// it is parsed (a batch's jobs share it); beyond it 413. At least the args limit plus 64 KiB.
    #[arg(long, env = "PGVS3_OJS_MAX_BODY_BYTES", default_value = "4MiB", value_parser = parse_bytes)]
    pub ojs_max_body_bytes: u64,

    /// Bearer token the OJS endpoint requires (manifest and health stay open); none by default.
    #[arg(long, env = "PGVS3_OJS_TOKEN", hide_env_values = true)]
    pub ojs_token: Option<String>,

    /// `TENANT=TOKEN` (repeatable): a bearer token that acts as TENANT only (docs/ojs-compatibility.md,
    /// Tenants); a request with it that names another tenant in `X-OJS-Tenant` is refused (403).
    #[arg(
        long = "ojs-tenant-token",
        env = "PGVS3_OJS_TENANT_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub ojs_tenant_tokens: Vec<crate::ojs::tenant::TenantToken>,

    /// How long completed, discarded and cancelled OJS jobs (and settled workflows) stay
    /// readable before the maintenance leader deletes them; dead-lettered jobs stay until
    /// deleted or retried.
    #[arg(long, env = "PGVS3_OJS_JOB_RETENTION", default_value = "24h", value_parser = parse_duration)]
    pub ojs_job_retention: Duration,

    /// OJS requests served at once (0: twice the pool size); beyond it requests wait.
    /// Health, readiness and the manifest never wait.
    #[arg(long, env = "PGVS3_OJS_MAX_ACTIVE", default_value_t = 0)]
    pub ojs_max_active: usize,

    /// OJS requests that may wait for a slot (0: twice the active limit); beyond it, and after
    /// --admission-wait, they get 429 `rate_limited` with Retry-After.
    #[arg(long, env = "PGVS3_OJS_MAX_WAITING", default_value_t = 0)]
    pub ojs_max_waiting: usize,

    // --- webhook outbox (OJS webhooks and bucket notification webhook targets) ---
    /// Webhook deliveries this gateway makes at once (0: this gateway delivers none; others
    /// on the same database still do).
    #[arg(long, env = "PGVS3_WEBHOOK_CONCURRENCY", default_value_t = 16)]
    pub webhook_concurrency: usize,

    /// How long one webhook POST may take, connecting included; longer is a failed attempt.
    #[arg(long, env = "PGVS3_WEBHOOK_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub webhook_timeout: Duration,

    /// Attempts of one webhook delivery before it is dead-lettered (kept, not retried).
    #[arg(long, env = "PGVS3_WEBHOOK_MAX_ATTEMPTS", default_value_t = 8, value_parser = clap::value_parser!(i32).range(1..))]
    pub webhook_max_attempts: i32,

    /// The wait after a webhook delivery's first failure; it grows fourfold with each further one.
    #[arg(long, env = "PGVS3_WEBHOOK_BACKOFF", default_value = "30s", value_parser = parse_duration)]
    pub webhook_backoff: Duration,

    /// The longest wait between two attempts of a webhook delivery.
    #[arg(long, env = "PGVS3_WEBHOOK_MAX_BACKOFF", default_value = "24h", value_parser = parse_duration)]
    pub webhook_max_backoff: Duration,

    /// How often an idle gateway looks for webhook deliveries that came due.
    #[arg(long, env = "PGVS3_WEBHOOK_POLL", default_value = "500ms", value_parser = parse_duration)]
    pub webhook_poll: Duration,
    // --- end webhook outbox ---

    // --- TLS ---
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
    // --- end TLS ---

    // --- cache tier ---
    /// Origin fills running at once in this gateway over all cache buckets (each cache bucket
    /// also has its own limit, set with its origin).
    #[arg(long, env = "PGVS3_FILL_CONCURRENCY", default_value_t = 8)]
    pub fill_concurrency: usize,

    /// Bounds connecting to an origin and waiting for each of its answers to begin.
    #[arg(long, env = "PGVS3_ORIGIN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub origin_timeout: Duration,

    /// How often the write-back worker looks for due uploads (writes also wake it).
    #[arg(long, env = "PGVS3_WRITE_BACK_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub write_back_interval: Duration,

    /// Write-back uploads running at once (on the one gateway that runs the worker).
    #[arg(long, env = "PGVS3_WRITE_BACK_CONCURRENCY", default_value_t = 4)]
    pub write_back_concurrency: usize,

    // --- simulated remote endpoint (benchmarks) ---
    /// Make the S3 endpoint answer like a remote store: this one-way latency each way.
    #[arg(long, env = "PGVS3_SIMULATE_LATENCY", default_value = "0ms", value_parser = parse_duration)]
    pub simulate_latency: Duration,

    /// ... and this bandwidth per request, in bytes per second (uploads and answers; 0: unlimited).
    #[arg(long, env = "PGVS3_SIMULATE_BANDWIDTH", default_value_t = 0)]
    pub simulate_bandwidth: u64,

    /// ... and at most this many requests started per second (0: unlimited).
    #[arg(long, env = "PGVS3_SIMULATE_RPS", default_value_t = 0)]
    pub simulate_rps: u32,

    /// The web console (docs/console.md).
    #[command(flatten)]
    pub console: pgvs3_console::ConsoleArgs,
}

/// A listener that may stay plaintext (`--tls-plaintext`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TlsListener {
    S3,
    Resp,
    Ojs,
    Admin,
}

/// A listen address that can be switched off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAddr(pub Option<SocketAddr>);

fn parse_listen_addr(text: &str) -> Result<ListenAddr, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(ListenAddr(None));
    }
    text.parse()
        .map(|addr| ListenAddr(Some(addr)))
        .map_err(|err| format!("invalid address {text:?} (or `off`): {err}"))
}

fn parse_resp_database(text: &str) -> Result<(u32, String), String> {
    let (index, bucket) = text
        .split_once('=')
        .ok_or_else(|| format!("expected index=bucket, got {text:?}"))?;
    let index: u32 = index
        .trim()
        .parse()
        .map_err(|_| format!("invalid database index in {text:?}"))?;
    if index == 0 {
        return Err("database 0 is --resp-bucket".into());
    }
    Ok((index, bucket.trim().to_owned()))
}

#[derive(Debug, Clone, Copy, ValueEnum, Default, PartialEq, Eq)]
pub enum RequiredRole {
    #[default]
    Any,
    Primary,
    Standby,
}

#[derive(Debug, Clone, Copy, ValueEnum, Default)]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

impl ServeArgs {
    pub fn simulated(&self) -> crate::simulate::Constraints {
        crate::simulate::Constraints {
            latency: self.simulate_latency,
            bandwidth: self.simulate_bandwidth,
            rps: self.simulate_rps,
        }
    }

    pub fn cache_settings(&self) -> crate::cache::CacheSettings {
        crate::cache::CacheSettings {
            fill_concurrency: self.fill_concurrency,
            origin_timeout: self.origin_timeout,
            upload_interval: self.write_back_interval,
            upload_concurrency: self.write_back_concurrency,
        }
    }

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

    /// The bounds of an HTTP listener that takes `max_connections` at once.
    pub fn http_limits(&self, max_connections: usize) -> crate::http_server::HttpLimits {
        crate::http_server::HttpLimits {
            max_connections,
            first_request_timeout: self.http_first_request_timeout,
            idle_timeout: self.http_idle_timeout,
            body_idle_timeout: self.http_body_idle_timeout,
        }
    }

    /// The RESP admission limits (per batch of pipelined commands), defaults filled in.
    pub fn resp_limits(&self) -> crate::admission::Limits {
        self.admission_limits(self.resp_max_active, self.resp_max_waiting)
    }

    /// The OJS admission limits, defaults filled in.
    pub fn webhook_delivery(&self) -> crate::webhooks::DeliveryOptions {
        crate::webhooks::DeliveryOptions {
            concurrency: self.webhook_concurrency,
            timeout: self.webhook_timeout,
            max_attempts: self.webhook_max_attempts,
            backoff: self.webhook_backoff,
            max_backoff: self.webhook_max_backoff.max(self.webhook_backoff),
            poll: self.webhook_poll,
        }
    }

    pub fn ojs_limits(&self) -> crate::admission::Limits {
        self.admission_limits(self.ojs_max_active, self.ojs_max_waiting)
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

/// Parses byte sizes written as `<n>`, `<n>KiB`, `<n>MiB`, `<n>GiB` or `<n>TiB` (also `K`,
/// `M`, `G`, `T`, and `KB`... as the same binary multiples).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("invalid size: {text:?}"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("invalid size unit in {text:?} (use KiB, MiB, GiB or TiB)")),
    };
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("size too large: {text:?}"))
}

/// Parses durations written as `<n>ms`, `<n>s`, `<n>m` or `<n>h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("invalid duration: {text:?}"))?;
    let seconds = match unit {
        "ms" => return Ok(Duration::from_millis(number)),
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => {
            return Err(format!("invalid duration unit in {text:?} (use ms, s, m or h)"));
        }
    };
    number
        .checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("duration too long: {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("m").is_err());
        assert!(
            parse_duration("99999999999999999h").is_err(),
            "overflow is an error, not a panic"
        );
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        assert_eq!(parse_bytes("8MiB"), Ok(8 << 20));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert!(parse_bytes("1PiB").is_err());
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("99999999999TiB").is_err());
    }
}
