//! Whether the database is ready for this gateway, asked on a connection of its own: the admin
//! port's /readyz and the OJS listener's unauthenticated health routes share it.
//!
//! Not through the request pool: a pool busy with slow requests made every gateway of a fleet
//! report itself unready ("the database did not answer") while PostgreSQL answered at once, and
//! OJS health checks (answered before any token or admission slot) could take every pooled
//! connection (200 keep-alive clients pipelining `GET /health` held all 32). Opened on first use
//! and again once lost (an outage severs it with every other connection); one check at a time,
//! so however many ask, they hold one connection.
//!
//! When the server refuses that connection while the pool still has open ones (a rotated
//! password: see [`crate::pg::checkout`]), the question is asked on one of those: the gateway
//! serves on them, so it is ready; with none open it is not.

use std::sync::Arc;

use crate::pg::Database;
use crate::pg::checkout::{checkout, refuses_new_connection};
use crate::pg::connections::Connections;
use crate::pg::health::DatabaseHealth;
use crate::pg::migrate::layout_version;

#[derive(Clone)]
pub struct Readiness {
    inner: Arc<Inner>,
}

struct Inner {
    health: DatabaseHealth,
    config: tokio_postgres::Config,
    connections: Connections,
    pool: deadpool_postgres::Pool,
    client: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
}

impl Readiness {
    pub fn new(database: &Database, health: DatabaseHealth) -> Readiness {
        Readiness {
            inner: Arc::new(Inner {
                health,
                config: database.config.clone(),
                connections: database.connections.clone(),
                pool: database.pool.clone(),
                client: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// The layout version and whether the server is a standby, within the probe timeout; while
    /// the health probe finds the database unreachable (or the gateway gave up on it) an error
    /// without asking.
    pub async fn check(&self) -> anyhow::Result<(i32, bool)> {
        let health = &self.inner.health;
        if let Some(outage) = health.fatal().map(str::to_owned).or_else(|| health.outage()) {
            anyhow::bail!("database unavailable: {outage}");
        }
        // Readiness's own connection may outlive the pool's: refused new ones, with none open,
        // every request fails, whatever this connection says.
        if let Some(refusal) = health.refusal()
            && self.inner.pool.status().size == 0
        {
            anyhow::bail!("PostgreSQL refuses this gateway new connections, and it has none open: {refusal}");
        }
        let timeout = health.probe_timeout();
        tokio::time::timeout(timeout, self.ask())
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the database did not answer within {timeout:?}")))
    }

    async fn ask(&self) -> anyhow::Result<(i32, bool)> {
        let mut client = self.inner.client.lock().await;
        let open = match client.take() {
            Some(open) if !open.is_closed() => open,
            _ => match self.inner.connections.connect(&self.inner.config).await {
                Ok(open) => open,
                Err(err) if refuses_new_connection(&err) => {
                    let pooled = checkout(&self.inner.pool).await.map_err(|pooled| {
                        let err = anyhow::Error::new(err);
                        anyhow::anyhow!("a new connection refused ({err:#}), and no open one to ask on: {pooled}")
                    })?;
                    return layout_and_role(&pooled).await;
                }
                Err(err) => return Err(err.into()),
            },
        };
        let answer = layout_and_role(&open).await?;
        *client = Some(open);
        Ok(answer)
    }
}

async fn layout_and_role(client: &tokio_postgres::Client) -> anyhow::Result<(i32, bool)> {
    Ok((layout_version(client).await?, crate::pg::in_recovery(client).await?))
}

/// The OJS health routes ask the same question.
impl pgvs3_ojs::ojs::HealthProbe for Readiness {
    fn answers(&self) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send + '_>> {
        Box::pin(async move { self.check().await.map(drop) })
    }
}
