//! PostgreSQL plumbing: the connection pool, the migrations runner, the embedded launcher and
//! what keeps the gateway serving through database faults (health probe, supervision).

pub mod connections;
pub mod embedded;
pub mod health;
pub mod migrate;
pub mod supervise;

use std::time::Duration;

use anyhow::{Context, bail};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use pgvs3_pgtls::PgTls;

pub use crate::args::DatabaseArgs;
use crate::metrics::Metrics;
use connections::Connections;
use embedded::{EmbeddedOptions, EmbeddedPostgres};
use health::DatabaseHealth;
pub use pgvs3_base::checkout;
use supervise::Supervisor;

/// The database a command works on, and the embedded server behind it when pgvs3 started one.
pub struct Database {
    pub pool: Pool,
    /// How to reach the server outside the pool (e.g. a dedicated LISTEN connection).
    pub config: tokio_postgres::Config,
    /// Every connection to it, the pool's and the dedicated ones.
    pub connections: Connections,
    embedded: Embedded,
}

enum Embedded {
    /// The database is someone else's (a URL, or a `serve` already running on the data dir).
    None,
    /// Boxed: it is far larger than the others, and moves into its supervisor soon anyway.
    Owned(Box<EmbeddedPostgres>),
    Supervised(Supervisor),
}

impl Database {
    /// Connects as `serve` does: the URL when given, else the embedded PostgreSQL in the data dir,
    /// started now (or reused when a `serve` on the same data dir already runs it).
    pub async fn open(args: &DatabaseArgs) -> anyhow::Result<Database> {
        let (config, tls, embedded) = match &args.database_url {
            Some(url) => {
                let (config, tls) = pgvs3_pgtls::parse(url).context("invalid --database-url")?;
                (config, tls, None)
            }
            // The embedded server is reached on its Unix socket, where TLS has no use.
            None => match embedded::running_cluster(&args.data_dir) {
                Some(config) if answers(&config).await => (config, PgTls::default(), None),
                running => {
                    if running.is_some() {
                        // A server orphaned by a killed gateway is still shutting down (it
                        // refuses connections meanwhile): let it finish, then start afresh.
                        embedded::wait_for_shutdown(&args.data_dir, Duration::from_secs(60)).await?;
                    }
                    let server = EmbeddedPostgres::start(EmbeddedOptions {
                        data_dir: args.data_dir.clone(),
                        pg_bin: args.pg_bin.clone(),
                        memory_budget: None,
                        shared_buffers: args.pg_shared_buffers,
                        tls: args.pg_embedded_tls(),
                    })
                    .await?;
                    (server.connect_config(), PgTls::default(), Some(server))
                }
            },
        };
        let mut config = config;
        config.connect_timeout(args.pg_connect_timeout);
        let connections = Connections::new(tls.clone());
        let pool = build_pool(
            config.clone(),
            args.pool_size,
            (args.pg_pool_wait_timeout, args.pg_connect_timeout),
            connections.clone(),
        )?;
        wait_until_reachable(&pool, &tls).await?;
        let embedded = embedded.map_or(Embedded::None, |server| Embedded::Owned(Box::new(server)));
        Ok(Database {
            pool,
            config,
            connections,
            embedded,
        })
    }

    /// The database's health, as `serve` tracks it (see [`DatabaseHealth::spawn_probe`]); the
    /// embedded server, if this process started it, is supervised from now on and restarted up
    /// to `restart_attempts` times in a row when it exits.
    pub fn watch(&mut self, probe_timeout: Duration, restart_attempts: u32, metrics: &Metrics) -> DatabaseHealth {
        let health = DatabaseHealth::new(self.pool.clone(), self.connections.clone(), metrics, probe_timeout);
        if let Embedded::Owned(server) = std::mem::replace(&mut self.embedded, Embedded::None) {
            self.embedded = Embedded::Supervised(Supervisor::start(*server, restart_attempts, health.clone()));
        }
        health
    }

    /// Stops the embedded PostgreSQL, if this process started it.
    pub async fn close(self) -> anyhow::Result<()> {
        self.pool.close();
        match self.embedded {
            Embedded::None => Ok(()),
            Embedded::Owned(mut server) => server.stop().await,
            Embedded::Supervised(supervisor) => supervisor.stop().await,
        }
    }
}

/// Whether a server accepts a connection now.
async fn answers(config: &tokio_postgres::Config) -> bool {
    let mut config = config.clone();
    config.connect_timeout(Duration::from_secs(2));
    match config.connect(tokio_postgres::NoTls).await {
        Ok((client, connection)) => {
            tokio::spawn(connection);
            client.simple_query("SELECT 1").await.is_ok()
        }
        Err(_) => false,
    }
}

/// A pool for tools and benchmarks, with `serve`'s default timeouts.
pub fn pool(config: tokio_postgres::Config, size: usize) -> anyhow::Result<Pool> {
    build_pool(
        config,
        size,
        (Duration::from_secs(10), Duration::from_secs(5)),
        Connections::default(),
    )
}

/// `timeouts`: for a free connection, and for opening one.
fn build_pool(
    config: tokio_postgres::Config,
    size: usize,
    (wait, create): (Duration, Duration),
    connections: Connections,
) -> anyhow::Result<Pool> {
    let manager = Manager::from_connect(
        config,
        connections,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size.max(2))
        .wait_timeout(Some(wait))
        // The whole of opening a connection; the socket-level connect_timeout alone would let
        // a server that accepts and then says nothing hold a request forever.
        .create_timeout(Some(create))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .context("building the PostgreSQL pool")
}

/// Retries the first connection for a while: in Kubernetes the database often starts alongside.
/// What retrying cannot mend (a refused certificate, channel binding) stops at once, with why.
async fn wait_until_reachable(pool: &Pool, tls: &PgTls) -> anyhow::Result<()> {
    let mut delay = Duration::from_millis(100);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match pool.get().await {
            Ok(_) => return Ok(()),
            Err(err) => {
                if let Some(reason) = tls.refusal(&err) {
                    bail!("{reason}");
                }
                // tokio-postgres's own text ("error connecting to server", "db error") keeps
                // the reason in the causes; the pool's wrapper only repeats that text.
                let err = match err {
                    deadpool_postgres::PoolError::Backend(err) => anyhow::Error::new(err),
                    other => anyhow::Error::new(other),
                };
                if tokio::time::Instant::now() + delay >= deadline {
                    bail!("PostgreSQL is not reachable: {err:#}");
                }
                tracing::warn!(error = format!("{err:#}"), "PostgreSQL not reachable yet; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Whether the server is a hot standby (reads only).
pub async fn is_standby(pool: &Pool) -> anyhow::Result<bool> {
    let client = pool.get().await?;
    in_recovery(&client).await
}

/// [`is_standby`] on a connection of the caller's own.
pub async fn in_recovery(client: &tokio_postgres::Client) -> anyhow::Result<bool> {
    Ok(client
        .query_one("SELECT pg_is_in_recovery() AS standby", &[])
        .await?
        .get("standby"))
}

/// Tries to become the one gateway of the database (a primary) that holds `lock`; the returned
/// connection holds it for as long as it lives.
pub async fn try_lead(pool: &Pool, lock: i64, role: &str) -> Option<deadpool_postgres::ClientWrapper> {
    let client = pool.get().await.ok()?;
    let standby: bool = client
        .query_one("SELECT pg_is_in_recovery() AS standby", &[])
        .await
        .ok()?
        .get("standby");
    if standby {
        return None;
    }
    let won: bool = client
        .query_one("SELECT pg_try_advisory_lock($1) AS won", &[&lock])
        .await
        .ok()?
        .get("won");
    if !won {
        return None;
    }
    tracing::info!("this gateway is the {role} leader");
    // Taken out of the pool: the session lock must not be shared with, or released by, requests.
    Some(deadpool_postgres::Object::take(client))
}
