//! Whether the database is ready for this gateway, asked on a connection of its own: the admin
//! port's /readyz and the OJS listener's unauthenticated health routes share it.
//!
//! Not through the request pool: a pool busy with slow requests made every gateway of a fleet
//! report itself unready ("the database did not answer") while PostgreSQL answered at once, and
//! OJS health checks (answered before any token or admission slot) could take every pooled
//! connection (200 keep-alive clients pipelining `GET /health` held all 32). Opened on first use
//! and again once lost (an outage severs it with every other connection); one check at a time,
//! so however many ask, they hold one connection.

use std::sync::Arc;

use crate::pg::Database;
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
    client: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
}

impl Readiness {
    pub fn new(database: &Database, health: DatabaseHealth) -> Readiness {
        Readiness {
            inner: Arc::new(Inner {
                health,
                config: database.config.clone(),
                connections: database.connections.clone(),
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
        let timeout = health.probe_timeout();
        tokio::time::timeout(timeout, self.ask())
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the database did not answer within {timeout:?}")))
    }

    async fn ask(&self) -> anyhow::Result<(i32, bool)> {
        let mut client = self.inner.client.lock().await;
        let open = match client.take() {
            Some(open) if !open.is_closed() => open,
            _ => self.inner.connections.connect(&self.inner.config).await?,
        };
        let layout = layout_version(&open).await?;
        let standby = crate::pg::in_recovery(&open).await?;
        *client = Some(open);
        Ok((layout, standby))
    }
}

/// The OJS health routes ask the same question.
impl pgvs3_ojs::ojs::HealthProbe for Readiness {
    fn answers(&self) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send + '_>> {
        Box::pin(async move { self.check().await.map(drop) })
    }
}
