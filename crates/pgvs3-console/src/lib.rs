//! The pgvs3 web console (docs/console.md): a browser front end that is a *client* of the
//! gateway, never a side door. A visitor signs in with an access key and its secret; the secret
//! stays in this process's memory, and every action is an S3 request signed with that key and sent
//! to the gateway's own endpoint, so every decision is the gateway's authorization. Object bytes
//! go between the browser and the gateway directly, through presigned URLs.

mod app;
mod gateway;
mod html;
mod loopback;
mod ojs;
mod parquet;
mod policy;
mod resp;
mod server;
mod session;

pub use app::metrics_summary;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::task::JoinHandle;

/// The console's flags (flattened into `pgvs3 serve`).
#[derive(Debug, Clone, clap::Args)]
pub struct ConsoleArgs {
    /// Listen address of the web console (docs/console.md); off unless set. With --tls-cert it
    /// speaks HTTPS with the gateway's certificate.
    #[arg(long, env = "PGVS3_CONSOLE_ADDR")]
    pub console_addr: Option<SocketAddr>,

    /// The S3 URL browsers reach this gateway at (presigned downloads and uploads go there
    /// directly). Default: the S3 listener's own address.
    #[arg(long, env = "PGVS3_CONSOLE_S3_URL")]
    pub console_s3_url: Option<String>,

    /// A console session unused this long ends (it ends 12 hours after sign-in in any case).
    #[arg(long, env = "PGVS3_CONSOLE_SESSION_IDLE", default_value = "30m", value_parser = parse_duration)]
    pub console_session_idle: Duration,
}

/// How the console reaches the gateway it fronts.
/// The OJS operator token as it is now: `--ojs-token`, or the root key's, which follows its
/// secret when that is rotated. `None`: no token works (the root key is gone).
pub type Token = std::sync::Arc<dyn Fn() -> Option<String> + Send + Sync>;

pub struct Gateway {
    /// The S3 endpoint's URL from this process (loopback), e.g. `http://127.0.0.1:9000`.
    pub s3_url: String,
    /// The region the gateway accepts in signatures.
    pub region: String,
    /// The gateway's TLS acceptor, when its listeners speak TLS: the console then does too.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// The RESP listener as the console reaches it (plaintext, loopback), for the keyspace
    /// pages; `None` without one the console can reach.
    pub resp: Option<SocketAddr>,
    /// The OJS listener (plaintext, loopback) and the operator's token, for the jobs pages.
    pub ojs: Option<(SocketAddr, Option<Token>)>,
    /// The gateway's in-process answers for admin (root-key) sessions. `None`: no session is one.
    pub admin: Option<std::sync::Arc<dyn Admin>>,
    /// The admin listener (plaintext, loopback): `/readyz` and `/metrics` for the fleet page.
    pub admin_listener: Option<SocketAddr>,
}

pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the gateway answers in-process for the console's admin pages (jobs, fleet): only what
/// no listener serves to a client.
pub trait Admin: Send + Sync {
    /// Whether `access_key` (already proven by a signed request) is the root key: its sessions
    /// are the console's admin sessions.
    fn is_root(&self, access_key: String) -> BoxFuture<'_, bool>;
    /// The database's size in bytes.
    fn database_size(&self) -> BoxFuture<'_, Result<i64, String>>;
    /// The standbys streaming from this database's server (`pg_stat_replication`; none on a
    /// standby or without any).
    fn standbys(&self) -> BoxFuture<'_, Result<Vec<Standby>, String>>;
    /// The gateways of this database by their heartbeat rows (at most 100, oldest first).
    fn gateways(&self) -> BoxFuture<'_, Result<Vec<GatewayBeat>, String>>;
    /// The server's WAL position: written (a primary) or replayed (a standby).
    fn wal_position(&self) -> BoxFuture<'_, Result<WalPosition, String>>;
    /// Every access key (never a secret), with the buckets each owns.
    fn list_keys(&self) -> BoxFuture<'_, Result<Vec<KeyInfo>, String>>;
    /// Creates a key that does not exist yet (an existing one, the root key included, is never
    /// overwritten).
    fn create_key(&self, key: NewKey) -> BoxFuture<'_, Result<(), String>>;
    /// Deletes a key other than the root key (its buckets pass to root); false when none.
    fn delete_key(&self, access_key: String) -> BoxFuture<'_, Result<bool, String>>;
    /// Disables (or enables again) a key other than the root key: every gateway of the
    /// database refuses a disabled key at once. False when there is no such key.
    fn set_key_disabled(&self, access_key: String, disabled: bool) -> BoxFuture<'_, Result<bool, String>>;
    /// Attaches an identity policy to a key other than the root key (the gateway checks it
    /// first), or detaches its policy (`None`). False when there is no such key.
    fn set_key_policy(&self, access_key: String, policy: Option<String>) -> BoxFuture<'_, Result<bool, String>>;
    /// A bucket's quota and usage (no S3 API has them); `None` without a quota.
    fn bucket_quota(&self, bucket: String) -> BoxFuture<'_, Result<Option<Quota>, String>>;
    /// Sets a bucket's quota (`None`: that limit unlimited); both `None` removes it.
    fn set_bucket_quota(
        &self,
        bucket: String,
        max_bytes: Option<i64>,
        max_objects: Option<i64>,
    ) -> BoxFuture<'_, Result<(), String>>;
    /// A page of one queue's jobs of one tenant in one state, newest first: at most `limit`
    /// with `seq` below `before` (keyset; `None` from the newest).
    fn jobs_in_state(&self, page: JobsPage) -> BoxFuture<'_, Result<Vec<JobRow>, String>>;
    /// Per queue of a tenant, the jobs enqueued, completed and failed over the last minute,
    /// from the database's event log: every gateway's work counts (at most 1,000 queues).
    fn queue_rates(&self, tenant: String) -> BoxFuture<'_, Result<Vec<QueueRates>, String>>;
}

/// Which jobs [`Admin::jobs_in_state`] lists.
pub struct JobsPage {
    pub tenant: String,
    pub queue: String,
    pub state: String,
    pub before: Option<i64>,
    pub limit: i64,
}

/// A job as a queue's listing shows it.
pub struct JobRow {
    /// Its place in enqueue order: the listing's keyset.
    pub seq: i64,
    pub id: String,
    pub job_type: String,
    pub attempt: i32,
    pub max_attempts: i32,
    pub created: std::time::SystemTime,
    /// When it runs (or ran) next: a scheduled or retryable job's due time.
    pub run_at: std::time::SystemTime,
    /// Its last error (`{code, message, ...}`), or null.
    pub error: serde_json::Value,
}

/// A queue's last minute.
pub struct QueueRates {
    pub queue: String,
    pub enqueued: i64,
    pub completed: i64,
    pub failed: i64,
}

/// A standby as the primary sees it.
pub struct Standby {
    pub name: String,
    /// Its address, when this server's role may read it.
    pub address: String,
    pub state: String,
    pub sync_state: String,
    /// How far its replay is behind, when known.
    pub replay_lag_seconds: Option<f64>,
}

/// A gateway as its heartbeat row describes it.
pub struct GatewayBeat {
    pub id: String,
    pub host: String,
    pub version: String,
    pub started: std::time::SystemTime,
    /// Listener name to bound address (`null`: off).
    pub listeners: serde_json::Value,
    /// [`metrics_summary`] of its `/metrics` at its last beat.
    pub stats: serde_json::Value,
    pub seconds_since_beat: f64,
    /// Its last beats' summaries, oldest first, each with `ago`: seconds before now.
    pub history: serde_json::Value,
}

/// A WAL position, as PostgreSQL writes it and as bytes from the start.
pub struct WalPosition {
    pub lsn: String,
    pub bytes: f64,
}

/// A bucket's hard quota (`None`: unlimited) and what counts against it.
pub struct Quota {
    pub max_bytes: Option<i64>,
    pub max_objects: Option<i64>,
    pub used_bytes: i64,
    pub used_objects: i64,
}

/// An access key as the console lists it.
pub struct KeyInfo {
    pub access_key: String,
    pub is_root: bool,
    pub read_only: bool,
    /// Refused by every listener until enabled again.
    pub disabled: bool,
    pub description: String,
    pub created: std::time::SystemTime,
    /// The key's own (identity) policy document, if it has one.
    pub policy: Option<String>,
    /// The buckets it owns, by name.
    pub buckets: Vec<String>,
}

/// A key to create: its secret made by the console, shown once.
pub struct NewKey {
    pub access_key: String,
    pub secret: String,
    pub read_only: bool,
    pub description: String,
}

/// `addr` as this process reaches it: an unspecified address is loopback.
fn loopback(mut addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    addr
}

impl Gateway {
    /// The gateway's S3 listener as the console reaches it: on loopback, through the plaintext
    /// twin when there is one (no certificate to trust), else as the listener speaks.
    pub fn loopback(
        s3: SocketAddr,
        s3_plaintext: Option<SocketAddr>,
        region: String,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Gateway {
        let s3_url = match (s3_plaintext, &tls) {
            (Some(plaintext), _) => format!("http://{}", loopback(plaintext)),
            (None, Some(_)) => format!("https://{}", loopback(s3)),
            (None, None) => format!("http://{}", loopback(s3)),
        };
        Gateway {
            s3_url,
            region,
            tls,
            resp: None,
            ojs: None,
            admin: None,
            admin_listener: None,
        }
    }

    /// The OJS listener, as [`Gateway::with_resp`] takes the RESP one, and its operator token.
    pub fn with_ojs(
        mut self,
        listener: SocketAddr,
        plaintext: Option<SocketAddr>,
        tls: bool,
        token: Option<Token>,
    ) -> Gateway {
        self.ojs = match (plaintext, tls) {
            (Some(plaintext), _) => Some((loopback(plaintext), token)),
            (None, false) => Some((loopback(listener), token)),
            (None, true) => None,
        };
        self
    }

    pub fn with_admin(mut self, admin: std::sync::Arc<dyn Admin>) -> Gateway {
        self.admin = Some(admin);
        self
    }

    /// The admin listener, unless it speaks TLS (it has no plaintext twin).
    pub fn with_admin_listener(mut self, listener: SocketAddr, tls: bool) -> Gateway {
        self.admin_listener = (!tls).then(|| loopback(listener));
        self
    }

    /// The RESP listener (and its plaintext twin, and whether it speaks TLS): the console speaks
    /// plain RESP on loopback, so through the twin when the listener has TLS, else not at all.
    pub fn with_resp(mut self, listener: SocketAddr, plaintext: Option<SocketAddr>, tls: bool) -> Gateway {
        self.resp = match (plaintext, tls) {
            (Some(plaintext), _) => Some(loopback(plaintext)),
            (None, false) => Some(loopback(listener)),
            (None, true) => None,
        };
        self
    }
}

/// A running console listener.
pub struct Console {
    pub addr: SocketAddr,
    /// Ends once `shutdown` has resolved and in-flight requests are done.
    pub task: JoinHandle<()>,
}

/// Starts the console when `--console-addr` is set; `None` otherwise.
pub async fn start(
    args: &ConsoleArgs,
    gateway: Gateway,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Option<Console>> {
    let Some(addr) = args.console_addr else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| anyhow::anyhow!("binding the console on {addr} (change it with --console-addr): {err}"))?;
    let addr = listener.local_addr()?;
    let public_s3 = args
        .console_s3_url
        .clone()
        .unwrap_or_else(|| gateway.s3_url.clone())
        .trim_end_matches('/')
        .to_owned();
    let app = app::App::new(
        gateway::Gateway::new(gateway.s3_url, public_s3, gateway.region, gateway.resp).admin(
            gateway.ojs.map(|(addr, token)| ojs::Ojs { addr, token }),
            gateway.admin,
            gateway.admin_listener,
        ),
        session::Sessions::new(args.console_session_idle),
        gateway.tls.is_some(),
    );
    let task = tokio::spawn(server::serve(listener, gateway.tls, app, shutdown));
    tracing::info!(%addr, "pgvs3 console ready");
    Ok(Some(Console { addr, task }))
}

/// `90s`, `30m`, `2h` (the gateway's duration flags take the same).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("{text:?}: expected e.g. 30m"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(format!("{text:?}: the unit is s, m or h")),
    };
    number
        .checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long"))
}
