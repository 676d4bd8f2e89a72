//! Every connection the gateway holds to PostgreSQL (the pool's and the dedicated ones), so that
//! a detected outage can end them all at once.
//!
//! A connection whose server vanished without a word (a network cut, a frozen host, a proxy that
//! stopped forwarding) looks alive to its client until TCP gives up, which can take minutes; a
//! query on it would hang as long. When the health probe finds the database unreachable it
//! severs every tracked connection: their drivers end, queries waiting on them fail at once, and
//! the pool discards them and connects afresh.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::Connect;
use pgvs3_pgtls::PgTls;
use tokio::task::{AbortHandle, JoinHandle};
use tokio_postgres::Client;

/// TCP keepalives notice a peer that went away (a host or network gone) on connections that sit
/// idle, such as the catalog's LISTEN connection; the health probe covers the rest.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_RETRIES: u32 = 3;
/// Unacknowledged data this long ends the connection (Linux `TCP_USER_TIMEOUT`).
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Default)]
pub struct Connections {
    inner: Arc<Registry>,
    /// How every connection negotiates TLS (the `sslmode` of `--database-url`; the default
    /// encrypts when the config's mode asks, verifying nothing).
    tls: PgTls,
}

#[derive(Default)]
struct Registry {
    next: AtomicU64,
    drivers: Mutex<HashMap<u64, AbortHandle>>,
}

impl Connections {
    pub fn new(tls: PgTls) -> Connections {
        Connections {
            inner: Arc::default(),
            tls,
        }
    }

    /// The TLS connector, for a connection opened outside [`Connections::connect`].
    pub fn tls(&self) -> PgTls {
        self.tls.clone()
    }

    /// Runs a connection's driver (the task doing its I/O) so that [`Connections::sever_all`]
    /// can end it.
    pub fn spawn<T: Send + 'static>(&self, driver: impl Future<Output = T> + Send + 'static) -> JoinHandle<T> {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let forget = Forget {
            id,
            registry: Arc::downgrade(&self.inner),
        };
        // Not held across the spawn: a runtime shutting down drops the future inside `spawn`,
        // and `Forget::drop` would then wait for the lock held here (a deadlock seen at a test
        // process's exit). A task that ends before it is registered is removed again below (were
        // one ever left, aborting a finished task does nothing).
        let task = tokio::spawn(async move {
            let _forget = forget;
            driver.await
        });
        self.inner
            .drivers
            .lock()
            .expect("connections lock")
            .insert(id, task.abort_handle());
        if task.is_finished() {
            self.inner.drivers.lock().expect("connections lock").remove(&id);
        }
        task
    }

    /// Ends every tracked connection; returns how many there were.
    pub fn sever_all(&self) -> usize {
        let drivers: Vec<AbortHandle> = {
            let mut drivers = self.inner.drivers.lock().expect("connections lock");
            drivers.drain().map(|(_, driver)| driver).collect()
        };
        for driver in &drivers {
            driver.abort();
        }
        drivers.len()
    }

    pub fn count(&self) -> usize {
        self.inner.drivers.lock().expect("connections lock").len()
    }

    /// Connects with the gateway's session settings and a tracked driver; for dedicated
    /// connections outside the pool.
    pub async fn connect(&self, config: &tokio_postgres::Config) -> Result<Client, tokio_postgres::Error> {
        Ok(self.open(config).await?.0)
    }

    async fn open(&self, config: &tokio_postgres::Config) -> Result<(Client, JoinHandle<()>), tokio_postgres::Error> {
        let (client, connection) = session_settings(config).connect(self.tls()).await?;
        let driver = self.spawn(async move {
            if let Err(error) = connection.await {
                // The health probe reports an outage once; every connection repeating it adds
                // nothing.
                tracing::debug!(%error, "PostgreSQL connection ended");
            }
        });
        Ok((client, driver))
    }
}

/// What a dedicated connection outside the pool (a LISTEN connection) needs: how to reach the
/// server, the registry its driver joins (so that an outage severs it too), and how it makes
/// sure that its server still answers.
#[derive(Clone)]
pub struct Dedicated {
    pub config: tokio_postgres::Config,
    pub connections: Connections,
    pub liveness: Liveness,
}

/// How a connection that mostly waits (a LISTEN connection) makes sure that its server still
/// answers: a round trip every `every`, one unanswered for `timeout` ending it. Keepalives and
/// `TCP_USER_TIMEOUT` notice neither a backend that is stopped or stuck (its host's kernel
/// acknowledges for it) nor, for half a minute, a path that drops this connection's packets
/// alone (a firewall or NAT that lost its state); the health probe notices neither while its
/// own connection works. Meanwhile notifications would go unheard: blocked clients wait for
/// their fallback, other gateways' changes stay unknown.
#[derive(Debug, Clone, Copy)]
pub struct Liveness {
    pub every: Duration,
    pub timeout: Duration,
}

/// [`Liveness::timeout`] is counted in this many steps.
const LIVENESS_STEPS: u32 = 10;

impl Liveness {
    /// Returns, with why, once a round trip on `client` failed or went unanswered.
    pub async fn lost(&self, client: &Client) -> anyhow::Error {
        let mut ticker = tokio::time::interval(self.every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if let Err(err) = self.answered(client.simple_query("SELECT 1")).await {
                return err;
            }
        }
    }

    /// Waits for `round_trip` for `timeout`, counted in steps that each count once however
    /// long the runtime took to come back to them: a runtime that stalled (a handler computing
    /// for seconds in a debug build) is not taken for a server that did not answer.
    async fn answered<T>(
        &self,
        round_trip: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> anyhow::Result<()> {
        let step = self.timeout / LIVENESS_STEPS;
        futures::pin_mut!(round_trip);
        for _ in 0..LIVENESS_STEPS {
            if let Ok(answer) = tokio::time::timeout(step, &mut round_trip).await {
                return answer
                    .map(drop)
                    .map_err(|err| anyhow::Error::new(err).context("round trip failed"));
            }
        }
        anyhow::bail!("no answer within {:?}", self.timeout)
    }
}

/// Deregisters a driver when its task ends, however it ends (finished, failed or aborted).
struct Forget {
    id: u64,
    registry: std::sync::Weak<Registry>,
}

impl Drop for Forget {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.drivers.lock().expect("connections lock").remove(&self.id);
        }
    }
}

/// The settings every gateway connection gets: its name in `pg_stat_activity` (unless the URL
/// names it), and keepalives and a user timeout tuned to notice a dead peer in well under a
/// minute instead of the kernel's two hours.
pub fn session_settings(config: &tokio_postgres::Config) -> tokio_postgres::Config {
    let mut config = config.clone();
    if config.get_application_name().is_none() {
        config.application_name("pgvs3");
    }
    config
        .keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(KEEPALIVE_INTERVAL)
        .keepalives_retries(KEEPALIVE_RETRIES)
        .tcp_user_timeout(TCP_USER_TIMEOUT);
    config
}

/// The pool's way to connect: the same settings and tracked drivers as dedicated connections.
impl Connect for Connections {
    fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> futures::future::BoxFuture<'_, Result<(Client, JoinHandle<()>), tokio_postgres::Error>> {
        let config = config.clone();
        Box::pin(async move { self.open(&config).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round trip answered while the runtime was held past the whole timeout (one task
    /// computing without yielding) is answered; one never answered is lost.
    #[tokio::test(flavor = "current_thread")]
    async fn a_stalled_runtime_is_not_taken_for_a_silent_server() {
        let liveness = Liveness {
            every: Duration::from_secs(1),
            timeout: Duration::from_millis(200),
        };
        let (answer, answered) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            // Runs once the wait has begun, on the runtime's one thread.
            std::thread::sleep(Duration::from_millis(500));
            // The answer comes from another task's turn, as a connection's driver hands it on.
            tokio::task::yield_now().await;
            let _ = answer.send(());
        });
        let round_trip = async {
            answered.await.expect("sent");
            Ok::<(), tokio_postgres::Error>(())
        };
        liveness.answered(round_trip).await.expect("answered after the stall");
        let never = std::future::pending::<Result<(), tokio_postgres::Error>>();
        let lost = liveness.answered(never).await.expect_err("never answered");
        assert_eq!(lost.to_string(), "no answer within 200ms");
    }

    #[tokio::test]
    async fn severing_ends_every_tracked_driver_and_forgets_it() {
        let connections = Connections::default();
        let hanging: Vec<_> = (0..3)
            .map(|_| connections.spawn(std::future::pending::<()>()))
            .collect();
        let finished = connections.spawn(async {});
        finished.await.expect("finishes");
        assert_eq!(connections.count(), 3, "a finished driver is forgotten");
        assert_eq!(connections.sever_all(), 3);
        for driver in hanging {
            assert!(driver.await.expect_err("aborted").is_cancelled());
        }
        assert_eq!(connections.count(), 0);
        assert_eq!(connections.sever_all(), 0);
    }
}
