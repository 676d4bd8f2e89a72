//! This gateway's heartbeat row (`pgvs3.gateways`, migrations 0037 and 0039): gateways of one database do
//! not otherwise know each other, and the console's fleet page lists them from these rows. Only
//! a gateway whose server accepts writes beats (a standby is read-only; it is seen through its
//! server's `pg_stat_replication` row instead); each beat also deletes rows silent for
//! [`FORGET_AFTER`], so a gateway that stopped or died leaves the list by itself.

use std::time::{Duration, SystemTime};

use deadpool_postgres::Pool;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;
use crate::pg::checkout::checkout;
use crate::replica_lag::ReplicaLag;

/// How often a gateway writes its row.
pub const BEAT_EVERY: Duration = Duration::from_secs(5);
/// Rows whose last beat is older than this are deleted by the next beat of any gateway.
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// What a gateway's row says of it, besides its summary of `/metrics`.
pub struct Beat {
    pub host: String,
    /// Listener name (`s3`, `admin`, ...) to the address it is bound to.
    pub listeners: serde_json::Value,
}

/// Summaries kept in a row's `history` ring: five minutes of beats (the console charts them).
const HISTORY: i32 = 61;

/// The beat: the row's summary, and the summary stamped with the database's clock appended to
/// its ring, whose oldest samples past [`HISTORY`] are dropped.
const BEAT_SQL: &str = "WITH forgotten AS (DELETE FROM pgvs3.gateways
                                            WHERE beat < now() - make_interval(secs => $7) AND id <> $1)
                       INSERT INTO pgvs3.gateways (id, host, version, started, listeners, stats, history, beat)
                       VALUES ($1, $2, $3, $4, $5, $6,
                               jsonb_build_array($6::jsonb || jsonb_build_object('at', extract(epoch FROM now()))), now())
                       ON CONFLICT (id) DO UPDATE SET stats = excluded.stats, beat = now(),
                           history = (SELECT coalesce(jsonb_agg(sample ORDER BY n), '[]')
                                        FROM jsonb_array_elements(pgvs3.gateways.history || excluded.history)
                                             WITH ORDINALITY AS ring(sample, n)
                                       WHERE n > jsonb_array_length(pgvs3.gateways.history) + 1 - $8::int)";

/// The host name a gateway reports (the pod's name under Kubernetes).
pub fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|name| name.trim().chars().take(255).collect())
        .unwrap_or_default()
}

/// Beats every [`BEAT_EVERY`] until aborted; a failed beat is logged and the next one tried.
pub fn spawn(pool: Pool, metrics: Metrics, lag: ReplicaLag, beat: Beat) -> JoinHandle<()> {
    let id = crate::master_key::random_token(12);
    let started = SystemTime::now();
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(BEAT_EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if lag.is_standby() {
                continue;
            }
            let stats = pgvs3_console::metrics_summary(&metrics.render(&pool));
            let written = async {
                let client = checkout(&pool).await.map_err(|err| err.to_string())?;
                client
                    .execute(
                        BEAT_SQL,
                        &[
                            &id,
                            &beat.host,
                            &env!("CARGO_PKG_VERSION"),
                            &started,
                            &beat.listeners,
                            &stats,
                            &FORGET_AFTER.as_secs_f64(),
                            &HISTORY,
                        ],
                    )
                    .await
                    .map_err(|err| err.to_string())
            }
            .await;
            if let Err(err) = written {
                tracing::debug!(%err, "gateway heartbeat not written");
            }
        }
    })
}
