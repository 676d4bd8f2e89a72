//! PostgreSQL plumbing: the connection pool, the migrations runner and the embedded launcher.

pub mod embedded;
pub mod migrate;

use std::time::Duration;

use anyhow::{Context, bail};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use crate::config::DatabaseArgs;
use embedded::{EmbeddedOptions, EmbeddedPostgres};

/// The database a command works on, and the embedded server behind it when pgvs3 started one.
pub struct Database {
    pub pool: Pool,
    /// How to reach the server outside the pool (e.g. a dedicated LISTEN connection).
    pub config: tokio_postgres::Config,
    pub embedded: Option<EmbeddedPostgres>,
}

impl Database {
    /// Connects as `serve` does: the URL when given, else the embedded PostgreSQL in the data dir,
    /// started now (or reused when a `serve` on the same data dir already runs it).
    pub async fn open(args: &DatabaseArgs) -> anyhow::Result<Database> {
        let (config, embedded) = match &args.database_url {
            Some(url) => (url.parse().context("invalid --database-url")?, None),
            None => match embedded::running_cluster(&args.data_dir) {
                Some(config) if answers(&config).await => (config, None),
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
                    })
                    .await?;
                    (server.connect_config(), Some(server))
                }
            },
        };
        let pool = pool(config.clone(), args.pool_size)?;
        wait_until_reachable(&pool).await?;
        Ok(Database { pool, config, embedded })
    }

    /// Stops the embedded PostgreSQL, if this process started it.
    pub async fn close(mut self) -> anyhow::Result<()> {
        self.pool.close();
        if let Some(server) = self.embedded.as_mut() {
            server.stop().await?;
        }
        Ok(())
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

pub fn pool(mut config: tokio_postgres::Config, size: usize) -> anyhow::Result<Pool> {
    if config.get_application_name().is_none() {
        config.application_name("pgvs3");
    }
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size.max(2))
        .wait_timeout(Some(Duration::from_secs(30)))
        .create_timeout(Some(Duration::from_secs(10)))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .context("building the PostgreSQL pool")
}

/// Retries the first connection for a while: in Kubernetes the database often starts alongside.
async fn wait_until_reachable(pool: &Pool) -> anyhow::Result<()> {
    let mut delay = Duration::from_millis(100);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match pool.get().await {
            Ok(_) => return Ok(()),
            Err(err) if tokio::time::Instant::now() + delay < deadline => {
                tracing::warn!(error = %err, "PostgreSQL not reachable yet; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(err) => bail!("PostgreSQL is not reachable: {err}"),
        }
    }
}

/// Whether the server is a hot standby (reads only).
pub async fn is_standby(pool: &Pool) -> anyhow::Result<bool> {
    let client = pool.get().await?;
    Ok(client.query_one("SELECT pg_is_in_recovery()", &[]).await?.get(0))
}
