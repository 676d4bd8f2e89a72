//! Keeps the embedded PostgreSQL running: a postmaster that exits on its own (killed, crashed)
//! is restarted on the same port with backoff; one that cannot be restarted makes the gateway
//! report itself unhealthy so that whatever runs it restarts it.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::embedded::EmbeddedPostgres;
use super::health::DatabaseHealth;

/// The first restart waits this long (the killed server's backends need a moment to exit and
/// release its shared memory), each further one twice as long, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// The embedded server, owned by its supervising task until [`Supervisor::stop`]. Dropping it
/// ends the task, which drops the server (asking it for a fast shutdown).
pub struct Supervisor {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Supervisor {
    pub fn start(server: EmbeddedPostgres, attempts: u32, health: DatabaseHealth) -> Supervisor {
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(supervise(server, attempts, health, stopped));
        Supervisor { stop: Some(stop), task }
    }

    /// Stops the server (a fast shutdown) and the supervision.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            // A supervisor that already ended has nothing left to stop.
            let _ = stop.send(());
        }
        (&mut self.task).await?
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn supervise(
    mut server: EmbeddedPostgres,
    attempts: u32,
    health: DatabaseHealth,
    mut stopped: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    loop {
        let status = tokio::select! {
            biased;
            _ = &mut stopped => return server.stop().await,
            status = server.exited() => status,
        };
        let status = status.map_or_else(|err| format!("unknown status: {err}"), |status| status.to_string());
        health.lost(format!("the embedded PostgreSQL exited ({status})"));
        let mut backoff = FIRST_BACKOFF;
        let mut last_error = None;
        for attempt in 1..=attempts {
            tokio::select! {
                biased;
                _ = &mut stopped => return Ok(()),
                () = tokio::time::sleep(backoff) => {}
            }
            tracing::warn!(attempt, of = attempts, "restarting the embedded PostgreSQL");
            // Not raced against a stop: a launch ends within its own timeout, and abandoning it
            // halfway would leave a postmaster nobody waits for.
            match server.restart().await {
                Ok(()) => {
                    health.restarted();
                    break;
                }
                Err(err) => {
                    tracing::warn!(
                        attempt,
                        of = attempts,
                        error = format!("{err:#}"),
                        "PostgreSQL did not restart"
                    );
                    last_error = Some(err);
                }
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        if server.pid().is_none() {
            let why = last_error.map_or_else(|| "restarts are off".to_owned(), |err| format!("{err:#}"));
            health.give_up(format!(
                "the embedded PostgreSQL exited and did not restart in {attempts} attempts: {why}"
            ));
            // Nothing more to supervise; the server stays down until the gateway restarts.
            let _ = stopped.await;
            return Ok(());
        }
    }
}
