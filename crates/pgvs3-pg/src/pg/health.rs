//! Whether the database answers: a background probe on a dedicated connection, what an outage
//! does (one warning on loss, every connection severed, one line on recovery), and the verdict
//! for /readyz and /healthz.
//!
//! A server that refuses the probe a new connection (a rotated password, see
//! [`super::checkout`]) answers: that is no outage, and the connections open, still
//! authenticated, keep serving.
//!
//! Requests never wait for the probe: they use the pool as always, and the probe only changes
//! what they find there (no connections to a dead server). The probe runs on a thread of its
//! own, so that what it times is the database, not the gateway's busy runtime.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use prometheus::{IntCounter, IntGauge};
use tokio_postgres::Client;

use super::checkout::refuses_new_connection;
use super::connections::Connections;
use crate::metrics::Metrics;

#[derive(Clone)]
pub struct DatabaseHealth {
    inner: Arc<Inner>,
}

struct Inner {
    up: AtomicBool,
    /// Why the server refuses the probe new connections, as of the last probe; `None` while it
    /// lets it in (or the probe's connection holds).
    refusal: Mutex<Option<String>>,
    /// Since when, and why, the database is unreachable; `None` while it answers.
    outage: Mutex<Option<(Instant, String)>>,
    /// Set once the gateway cannot recover by itself (the embedded server could not be
    /// restarted): liveness fails so that the gateway is restarted.
    fatal: OnceLock<String>,
    probe_timeout: Duration,
    connections: Connections,
    pool: Pool,
    /// `pgvs3_database_up`: 1 while the probe gets answers.
    up_gauge: IntGauge,
    /// `pgvs3_database_restarts_total`: restarts of the embedded server.
    restarts: IntCounter,
    /// `pgvs3_database_refusals_total`: new connections the server refused the probe.
    refusals: IntCounter,
}

impl DatabaseHealth {
    pub fn new(pool: Pool, connections: Connections, metrics: &Metrics, probe_timeout: Duration) -> DatabaseHealth {
        let up_gauge = IntGauge::new(
            "pgvs3_database_up",
            "1 while PostgreSQL answers the health probe, else 0",
        )
        .expect("metric");
        let restarts = IntCounter::new(
            "pgvs3_database_restarts_total",
            "Restarts of the embedded PostgreSQL after it exited on its own",
        )
        .expect("metric");
        let refusals = IntCounter::new(
            "pgvs3_database_refusals_total",
            "New connections PostgreSQL refused the health probe while it answered (a rotated password, a role that may not log in, max_connections)",
        )
        .expect("metric");
        metrics.register(Box::new(up_gauge.clone()));
        metrics.register(Box::new(restarts.clone()));
        metrics.register(Box::new(refusals.clone()));
        up_gauge.set(1);
        DatabaseHealth {
            inner: Arc::new(Inner {
                up: AtomicBool::new(true),
                refusal: Mutex::new(None),
                outage: Mutex::new(None),
                fatal: OnceLock::new(),
                probe_timeout,
                connections,
                pool,
                up_gauge,
                restarts,
                refusals,
            }),
        }
    }

    /// Why the database is unreachable, as of the last probe (at most one probe interval plus
    /// the probe timeout old); `None` while it answers.
    pub fn outage(&self) -> Option<String> {
        if self.inner.up.load(Ordering::Relaxed) {
            return None;
        }
        let outage = self.inner.outage.lock().expect("health lock");
        outage.as_ref().map(|(_, reason)| reason.clone())
    }

    /// Why the gateway cannot recover by itself, once that is so.
    pub fn fatal(&self) -> Option<&str> {
        self.inner.fatal.get().map(String::as_str)
    }

    /// Why the server refused the probe's last attempt at a new connection, if it did.
    pub fn refusal(&self) -> Option<String> {
        self.inner.refusal.lock().expect("health lock").clone()
    }

    /// How long a readiness check may wait for the database.
    pub fn probe_timeout(&self) -> Duration {
        self.inner.probe_timeout
    }

    pub fn restarted(&self) {
        self.inner.restarts.inc();
    }

    pub fn give_up(&self, reason: String) {
        tracing::error!(%reason, "the gateway cannot recover its database; /healthz now reports 503");
        let _ = self.inner.fatal.set(reason);
    }

    /// Records that the database is unreachable and drops every connection to it: idle ones
    /// would fail their next request, busy ones could hang on a server that will never answer.
    pub fn lost(&self, reason: String) {
        {
            let mut outage = self.inner.outage.lock().expect("health lock");
            if self.inner.up.swap(false, Ordering::Relaxed) {
                tracing::warn!(%reason, "PostgreSQL is unreachable; requests fail with 503 until it answers again");
                *outage = Some((Instant::now(), reason));
            } else if let Some((_, last)) = outage.as_mut() {
                *last = reason;
            }
        }
        self.inner.up_gauge.set(0);
        self.inner.pool.retain(|_, _| false);
        let severed = self.inner.connections.sever_all();
        tracing::debug!(severed, "dropped every PostgreSQL connection");
    }

    /// The server refused the probe a new connection. While it is up that is no outage: the
    /// connections open stay authenticated and serve (requests wait for one of them rather
    /// than fail), and a gateway that has none fails its requests with 503 by itself.
    fn refused(&self, reason: String) {
        self.inner.refusals.inc();
        if !self.inner.up.load(Ordering::Relaxed) {
            // Down already: the reason is the refusal now.
            self.lost(reason);
        } else if self
            .inner
            .refusal
            .lock()
            .expect("health lock")
            .replace(reason.clone())
            .is_none()
        {
            tracing::warn!(%reason, "PostgreSQL refuses this gateway new connections; serving on those open");
        }
    }

    fn answered(&self) {
        if self.inner.refusal.lock().expect("health lock").take().is_some() {
            tracing::info!("PostgreSQL accepts this gateway's new connections again");
        }
        if self.inner.up.load(Ordering::Relaxed) {
            return;
        }
        let mut outage = self.inner.outage.lock().expect("health lock");
        if !self.inner.up.swap(true, Ordering::Relaxed) {
            let lasted = outage.take().map(|(since, _)| since.elapsed()).unwrap_or_default();
            tracing::info!(outage = ?lasted, "PostgreSQL answers again");
            self.inner.up_gauge.set(1);
        }
    }

    /// Probes every `every` until the returned task is aborted (or dropped with its runtime).
    ///
    /// The probe runs on a thread and runtime of its own, with its connection's driver: on the
    /// gateway's runtime, a handler computing for seconds without yielding (a debug build
    /// parsing 4 MiB OJS bodies under load stalled every task for 3.2 s while PostgreSQL
    /// answered a SELECT 1 within 60 ms) delayed the probe past its timeout, and the "outage"
    /// severed every connection, failing the requests PostgreSQL was serving with 503.
    pub fn spawn_probe(&self, config: tokio_postgres::Config, every: Duration) -> tokio::task::JoinHandle<()> {
        let health = self.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("pgvs3-db-probe".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the database probe's runtime");
                runtime.block_on(async move {
                    tokio::select! {
                        _ = stopped => {}
                        () = health.probe_every(&config, every) => {}
                    }
                });
            });
        if let Err(err) = thread {
            tracing::error!(error = %err, "could not start the database probe's thread; outages go unnoticed");
        }
        // Aborting (or dropping) this task drops `stop`, which ends the thread.
        tokio::spawn(async move {
            let _stop = stop;
            std::future::pending::<()>().await
        })
    }

    async fn probe_every(&self, config: &tokio_postgres::Config, every: Duration) {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut client: Option<Client> = None;
        loop {
            ticker.tick().await;
            let timeout = self.inner.probe_timeout;
            let probed = tokio::time::timeout(timeout, probe(&self.inner.connections, config, &mut client))
                .await
                .unwrap_or_else(|_| Err(Failure::Lost(format!("no answer within {timeout:?}"))));
            match probed {
                Ok(()) => self.answered(),
                Err(Failure::Refused(reason)) => self.refused(reason),
                Err(Failure::Lost(reason)) => {
                    client = None;
                    self.lost(reason);
                }
            }
        }
    }
}

/// Why a probe got no answer.
enum Failure {
    /// The server answered by refusing a new connection.
    Refused(String),
    Lost(String),
}

/// One round trip on the probe's own connection, so a busy pool cannot make a healthy database
/// look dead. A round trip that fails on the connection it has (its backend ended alone, say)
/// is tried again on a new one, which tells whether the server is gone, answers, or refuses.
async fn probe(
    connections: &Connections,
    config: &tokio_postgres::Config,
    client: &mut Option<Client>,
) -> Result<(), Failure> {
    if let Some(open) = client.take()
        && !open.is_closed()
        && open.simple_query("SELECT 1").await.is_ok()
    {
        *client = Some(open);
        return Ok(());
    }
    let open = connections.connect(config).await.map_err(|err| {
        if refuses_new_connection(&err) {
            Failure::Refused(explain(err))
        } else {
            Failure::Lost(explain(err))
        }
    })?;
    open.simple_query("SELECT 1")
        .await
        .map_err(|err| Failure::Lost(explain(err)))?;
    *client = Some(open);
    Ok(())
}

/// The error with its causes: tokio-postgres says only "db error" at the top.
fn explain(err: tokio_postgres::Error) -> String {
    format!("{:#}", anyhow::Error::from(err))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::pg::checkout::{checkout, refuses_new_connection};
    use crate::pg::embedded::EmbeddedPostgres;
    use crate::pg::embedded::tests::ScratchDir;
    use deadpool_postgres::PoolError;

    /// Request handlers that compute for seconds without yielding (a debug build parsing 4 MiB
    /// OJS bodies under load: 3.2 s) hold up every task of the gateway's runtime. The probe must
    /// not take that for the database's silence and sever the connections PostgreSQL is serving.
    #[tokio::test(flavor = "current_thread")]
    async fn a_stalled_runtime_is_no_database_outage() {
        let dir = ScratchDir::new();
        let mut server = EmbeddedPostgres::start(dir.options()).await.expect("start PostgreSQL");
        let config = server.connect_config();
        let connections = Connections::default();
        let busy = connections.connect(&config).await.expect("connect");
        let pool = super::super::pool(config.clone(), 2).expect("pool");
        // The probe's timeout is well under each stall (a probe on this runtime would miss it
        // every time) and well over what a connect and a SELECT 1 take on a loaded CI machine
        // (200 ms was not: once under load the probe's first connect took longer).
        let health = DatabaseHealth::new(pool, connections, &Metrics::new(), Duration::from_secs(1));
        let probe = health.spawn_probe(config, Duration::from_millis(20));
        for _ in 0..3 {
            // This test's runtime has one thread: blocking it stalls every task on it, as a
            // handler that computes without yielding stalls a worker of the gateway's.
            std::thread::sleep(Duration::from_secs(2));
            tokio::task::yield_now().await;
        }
        probe.abort();
        assert_eq!(health.outage(), None);
        assert!(
            !busy.is_closed(),
            "the probe severed a connection of a database that answers"
        );
        busy.simple_query("SELECT 1")
            .await
            .expect("the connection still serves");
        server.stop().await.expect("stop PostgreSQL");
    }

    async fn backend_pid(client: &tokio_postgres::Client) -> i32 {
        client
            .query_one("SELECT pg_backend_pid() AS pid", &[])
            .await
            .expect("backend pid")
            .get("pid")
    }

    /// A role that may no longer log in (what a rotated password is to a gateway that still
    /// has the old one): a request that needs a connection while the pool's only one is busy
    /// gets that one once it is given back, not the refusal; with none open, the refusal.
    #[tokio::test]
    async fn a_refused_connection_waits_for_an_open_one() {
        let dir = ScratchDir::new();
        let mut server = EmbeddedPostgres::start(dir.options()).await.expect("start PostgreSQL");
        let admin = crate::pg::connections::Connections::default()
            .connect(&server.connect_config())
            .await
            .expect("connect as the superuser");
        admin
            .batch_execute("CREATE ROLE rotating LOGIN")
            .await
            .expect("create the role");
        let mut config = server.connect_config();
        config.user("rotating");
        let pool = super::super::pool(config, 4).expect("pool");

        let busy = checkout(&pool).await.expect("a first connection");
        let busy_pid = backend_pid(&busy).await;
        admin
            .batch_execute("ALTER ROLE rotating NOLOGIN")
            .await
            .expect("refuse the role new connections");
        match pool.get().await {
            Err(PoolError::Backend(err)) => assert!(refuses_new_connection(&err), "{err:#}"),
            Err(other) => panic!("a new connection failed otherwise: {other:#}"),
            Ok(_) => panic!("the server opened a connection for a role that may not log in"),
        }

        let mut waiting = std::pin::pin!(checkout(&pool));
        // Still waiting while the only connection is busy (it neither failed nor got one).
        assert!(
            tokio::time::timeout(Duration::from_millis(200), &mut waiting)
                .await
                .is_err(),
            "the checkout returned while no connection could be had"
        );
        drop(busy);
        let given = waiting.await.expect("the connection given back");
        assert_eq!(
            backend_pid(&given).await,
            busy_pid,
            "the open connection, not a new one"
        );

        // With no connection open, nothing will come back: the refusal at once.
        drop(given);
        pool.retain(|_, _| false);
        match checkout(&pool).await {
            Err(PoolError::Backend(err)) => assert!(refuses_new_connection(&err), "{err:#}"),
            Err(other) => panic!("failed otherwise: {other:#}"),
            Ok(_) => panic!("a connection for a role that may not log in"),
        }
        pool.close();
        server.stop().await.expect("stop PostgreSQL");
    }
}
