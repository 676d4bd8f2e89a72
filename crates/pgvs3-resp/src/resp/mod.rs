//! RESP2/RESP3 server: listener → connection task → frame codec → command table → store.
//!
//! A keyspace is a bucket: database 0 is `--resp-bucket`, `SELECT n` maps through
//! `--resp-databases`. A string key is an object of that bucket and its value the object's
//! bytes, so what SET writes, S3 GET reads, and the other way round. Hashes, sets, sorted sets
//! and lists live in tables of their own, out of S3's sight (`typed.rs` and the family modules
//! beside it; `blocking.rs` for the blocking pops).

mod acl;
mod bits;
mod blocking;
mod clients;
mod coalesce;
pub mod codec;
mod command;
mod command_info;
mod commands;
mod connection;
mod deadline;
mod execute;
mod glob;
mod group_commit;
mod keys;
mod lcs;
mod lua;
mod monitor;
mod notify;
mod pause;
mod pubsub;
mod script;
mod stats;
mod tracking;
mod typed;
mod working_set;

// The typed families live with the other commands; their old paths stay.
use commands::{hash, list, set, stream, stream_group, zset};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

pub use crate::args::RespArgs;
use crate::bucket::Buckets;
use crate::http_server::Shutdown;
use crate::metrics::Metrics;
use crate::replica_lag::ReplicaLag;
use crate::store::{Principal, StoreError};

/// How the RESP endpoint behaves, from the command line.
#[derive(Debug, Clone)]
pub struct RespSettings {
    /// Database index → bucket.
    pub databases: BTreeMap<u32, String>,
    pub password: Option<String>,
    /// Whether clients must AUTH before anything else.
    pub require_auth: bool,
    pub flushdb: bool,
    pub max_clients: usize,
    pub idle_timeout: Option<Duration>,
    /// How long a new connection may stay silent before its first byte.
    pub first_byte_timeout: Option<Duration>,
    /// How long a connection that must AUTH may go without.
    pub auth_timeout: Option<Duration>,
    /// How long a read's database work may take.
    pub read_timeout: Option<Duration>,
    /// How long a write's work may take before its COMMIT, and its COMMIT (deadline.rs).
    pub write_limits: deadline::WriteLimits,
    pub admission: crate::admission::Limits,
    /// How often a blocked client (BLPOP, ...) tries again without being told of new elements:
    /// the safety net should a notification be lost with the LISTEN connection.
    pub block_poll: Duration,
    pub pubsub: pubsub::Limits,
    /// Bytes of replies one batch may produce (`--resp-output-limit`; `None`: any).
    pub output_limit: Option<usize>,
    /// How far one Lua script may go (time, memory).
    pub script: lua::Limits,
    /// Lua interpreters that may run at once.
    pub running_scripts: usize,
    /// Bytes of the working set (`--resp-working-set`; `0`: none).
    pub working_set: usize,
}

impl RespSettings {
    /// The defaults documented in docs/resp-compatibility.md: AUTH is needed unless
    /// `--resp-auth none`, no password is set and the listener is on loopback.
    pub fn from_args(args: &RespArgs, addr: SocketAddr, admission: crate::admission::Limits) -> RespSettings {
        let mut databases: BTreeMap<u32, String> = args.resp_databases.iter().cloned().collect();
        databases.insert(0, args.resp_bucket.clone());
        RespSettings {
            databases,
            password: args.resp_password.clone(),
            require_auth: args.resp_auth == crate::args::RespAuth::Key
                || args.resp_password.is_some()
                || !addr.ip().is_loopback(),
            flushdb: args.resp_flushdb,
            max_clients: args.resp_max_clients,
            admission,
            idle_timeout: (!args.resp_idle_timeout.is_zero()).then_some(args.resp_idle_timeout),
            first_byte_timeout: (!args.resp_first_byte_timeout.is_zero()).then_some(args.resp_first_byte_timeout),
            auth_timeout: (!args.resp_auth_timeout.is_zero()).then_some(args.resp_auth_timeout),
            read_timeout: (!args.resp_read_timeout.is_zero()).then_some(args.resp_read_timeout),
            write_limits: deadline::WriteLimits {
                write: (!args.resp_write_timeout.is_zero()).then_some(args.resp_write_timeout),
                commit: (!args.resp_commit_timeout.is_zero()).then_some(args.resp_commit_timeout),
            },
            block_poll: args.resp_block_poll,
            pubsub: pubsub::Limits {
                output_limit: usize::try_from(args.resp_pubsub_output_limit).unwrap_or(usize::MAX),
                max_subscriptions: args.resp_max_subscriptions,
                max_pattern: args.resp_max_pattern,
                max_patterns: args.resp_max_patterns,
                max_message: usize::try_from(args.resp_max_message).unwrap_or(usize::MAX),
            },
            output_limit: (args.resp_output_limit > 0)
                .then(|| usize::try_from(args.resp_output_limit).unwrap_or(usize::MAX)),
            script: lua::Limits {
                time: args.resp_script_time_limit,
                memory: usize::try_from(args.resp_script_max_memory).unwrap_or(usize::MAX),
            },
            running_scripts: args
                .resp_max_running_scripts
                .map(usize::from)
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |cores| cores.get().max(2))),
            working_set: usize::try_from(args.resp_working_set).unwrap_or(usize::MAX),
        }
    }
}

/// What every connection shares.
pub struct RespServer {
    buckets: Buckets,
    metrics: Metrics,
    settings: RespSettings,
    /// The root key, as which password-authenticated (and unauthenticated loopback) clients act.
    root: Principal,
    group_commit: group_commit::GroupCommit,
    /// Batches are admitted before they touch the database, as S3 requests are.
    admission: crate::admission::Admission,
    /// On a hot standby every write gets -READONLY, and reads may be refused while replay lags.
    replica: ReplicaLag,
    /// Large requests (values up to 512 MiB) are held in memory whole; beyond a small allowance
    /// per connection, their input comes out of the process's buffer budget.
    buffers: crate::admission::BufferBudget,
    clients: Arc<clients::Clients>,
    /// Tells blocked clients (BLPOP, ...) that their keys got elements.
    wakeups: Arc<blocking::Wakeups>,
    pubsub: Arc<pubsub::PubSub>,
    /// EVAL's script cache and the scripts running now.
    scripts: script::Scripts,
    /// INFO's counts of commands (`total_commands_processed`, `commandstats`, ...).
    stats: stats::CommandStats,
    /// CLIENT PAUSE of this gateway's clients.
    pause: pause::Pause,
    /// ACL users' rules as this gateway last read them, and its ACL LOG.
    acl: Arc<acl::Acl>,
    /// MONITOR's clients on this gateway (scripts' calls are shown to them too).
    monitors: Arc<monitor::Monitors>,
    started: Instant,
    /// Where the RESP listener listens (INFO's `tcp_port`, CONFIG GET's `port` and `bind`).
    addr: std::net::SocketAddr,
}

impl RespServer {
    /// Creates the databases' buckets when missing (on a primary) and returns the server.
    pub async fn new(
        buckets: Buckets,
        metrics: Metrics,
        settings: RespSettings,
        addr: std::net::SocketAddr,
        replica: ReplicaLag,
        buffers: crate::admission::BufferBudget,
        database: Option<crate::pg::connections::Dedicated>,
    ) -> anyhow::Result<Arc<RespServer>> {
        let root_key = buckets
            .catalog()
            .root_key()
            .await?
            .ok_or_else(|| anyhow::anyhow!("no root access key"))?;
        let root = Principal {
            access_key: root_key,
            is_root: true,
            read_only: false,
        };
        if !replica.is_standby() {
            for bucket in settings.databases.values() {
                match buckets
                    .catalog()
                    .create_bucket(&root, bucket, &Default::default())
                    .await
                {
                    Ok(_) => tracing::info!(bucket, "created the RESP keyspace bucket"),
                    // A bucket an access key owns may be a database too: its key (as a RESP
                    // user) and the root key use it.
                    Err(StoreError::BucketAlreadyOwnedByYou | StoreError::BucketAlreadyExists) => {}
                    Err(err) => anyhow::bail!("RESP bucket {bucket}: {err}"),
                }
            }
        }
        for (db, bucket) in &settings.databases {
            // Its commands will answer with this error; said once here for the operator.
            if let Ok(info) = buckets.catalog().bucket(bucket).await
                && let Some(origin) = &info.origin
            {
                tracing::warn!(
                    db,
                    bucket,
                    mode = origin.mode.as_str(),
                    "RESP database maps to a cache bucket; its commands will be refused (map it to a plain bucket)"
                );
            }
        }
        let keyspace_events = Arc::new(notify::KeyspaceEvents::new(Arc::clone(buckets.catalog())));
        let databases = settings
            .databases
            .iter()
            .map(|(db, bucket)| (*db, bucket.clone()))
            .collect();
        let clients: Arc<clients::Clients> = Arc::default();
        let tracking = Arc::new(tracking::Tracking::new(
            settings.pubsub.output_limit,
            Arc::clone(&clients),
        ));
        let pubsub = Arc::new(pubsub::PubSub::new(
            settings.pubsub,
            Arc::clone(&keyspace_events),
            databases,
            Arc::clone(&tracking),
            buckets.store().clone(),
        ));
        let monitors = Arc::new(monitor::Monitors::default());
        let scripts = script::Scripts::new(
            settings.script,
            settings.running_scripts,
            settings.admission.max_wait,
            Arc::clone(&pubsub),
            Arc::clone(&monitors),
            (settings.working_set > 0).then(|| Arc::new(working_set::WorkingSet::new(settings.working_set))),
            metrics.clone(),
        );
        Ok(Arc::new(RespServer {
            group_commit: group_commit::GroupCommit::new(
                metrics.clone(),
                keyspace_events,
                tracking,
                settings.write_limits,
            ),
            admission: crate::admission::Admission::new("resp", settings.admission, metrics.clone()),
            buckets,
            metrics,
            settings,
            replica,
            buffers,
            root,
            clients,
            wakeups: blocking::Wakeups::start(database, Arc::clone(&pubsub)),
            pubsub,
            scripts,
            stats: stats::CommandStats::default(),
            pause: pause::Pause::default(),
            acl: Arc::default(),
            monitors,
            started: Instant::now(),
            addr,
        }))
    }

    /// Accepts connections until shutdown, then lets each finish the batch it is running. With
    /// `tls`, each connection's handshake must end within `--resp-first-byte-timeout` (10 s
    /// when that is off).
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        mut shutdown: Shutdown,
        drain: Duration,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) {
        let mut connections = JoinSet::new();
        loop {
            let (mut stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        tracing::warn!(error = %err, server = "resp", "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = shutdown.wait() => break,
                // Reap finished connection tasks so the set does not grow without bound.
                Some(finished) = connections.join_next(), if !connections.is_empty() => {
                    if let Err(err) = finished
                        && err.is_panic()
                    {
                        // Its registration was dropped with it: the slot is free again.
                        tracing::error!(server = "resp", "a connection task panicked; its connection is closed");
                    }
                    continue;
                }
            };
            if let Err(err) = stream.set_nodelay(true) {
                tracing::debug!(error = %err, "TCP_NODELAY");
            }
            let info = clients::ClientInfo::new(peer, stream.local_addr().unwrap_or(peer));
            let Some(registration) = self.clients.register(self.settings.max_clients, info) else {
                // A TLS client could not read a plaintext answer: it is closed without one.
                if tls.is_none() {
                    let _ = stream.write_all(b"-ERR max number of clients reached\r\n").await;
                }
                continue;
            };
            let connection = connection::Connection::new(Arc::clone(&self), registration);
            match &tls {
                None => {
                    connections.spawn(connection.run(stream, shutdown.clone()));
                }
                Some(tls) => {
                    let handshake = tls.accept(stream);
                    let limit = self.settings.first_byte_timeout.unwrap_or(TLS_HANDSHAKE_TIMEOUT);
                    let shutdown = shutdown.clone();
                    connections.spawn(async move {
                        match tokio::time::timeout(limit, handshake).await {
                            Ok(Ok(stream)) => connection.run(stream, shutdown).await,
                            Ok(Err(err)) => tracing::debug!(error = %err, %peer, "RESP TLS handshake failed"),
                            Err(_) => tracing::debug!(%peer, "RESP TLS handshake not done in time"),
                        }
                    });
                }
            }
        }
        drop(listener);
        // A running script would hold its connection (and its thread) past the drain.
        self.scripts.shut_down();
        let drained = tokio::time::timeout(drain, async { while connections.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(server = "resp", "drain timed out; closing open connections");
        }
        tracing::info!(server = "resp", "drained");
    }
}

/// How long a TLS handshake may take when `--resp-first-byte-timeout` is off.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
