//! Where this gateway's database stands in replication, sampled in the background: whether it is
//! a hot standby (it changes when a standby is promoted), how far its replay trails its primary,
//! and the optional refusal of reads beyond a limit (`--max-replication-lag`).
//!
//! A standby that streams from its primary lags by what it received and has not replayed. One
//! that does not stream (its primary is down or cut off, its WAL receiver reconnecting) cannot
//! tell what it is missing: its lag counts as the time since it was last seen streaming, so a
//! limit trips that long after the cut — the WAL receiver's own reconnects (5 s apart by
//! default) are the grace — and reads that could be arbitrarily stale are refused.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;

use crate::metrics::Metrics;

#[derive(Clone)]
pub struct ReplicaLag {
    inner: Arc<Inner>,
}

struct Inner {
    standby: AtomicBool,
    /// The last sample, in milliseconds (0 on a primary).
    millis: AtomicU64,
    limit: Option<Duration>,
    /// When the standby was last seen streaming from its primary (or the sampler started).
    streamed: Mutex<Instant>,
}

/// Replay is behind when the standby has received WAL it has not replayed yet; then the lag is
/// the age of the last replayed commit. A standby that replayed all it received counts as
/// current, so an idle primary does not look like lag. `streaming`: a WAL receiver is connected
/// and streaming; a role without pg_read_all_stats sees the receiver's row but not its status,
/// and a row is only shown once the receiver has connected, so that counts as streaming.
const SAMPLE_SQL: &str = "SELECT pg_is_in_recovery() AS standby, CASE
        WHEN NOT pg_is_in_recovery() THEN 0
        WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
        ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0)
    END::float8 AS lag_seconds,
    EXISTS (SELECT FROM pg_stat_wal_receiver WHERE coalesce(status, 'streaming') = 'streaming') AS streaming";

impl ReplicaLag {
    /// The lag of one sample: a standby that does not stream lags by at least the time since
    /// it last did.
    fn lag_seconds(&self, standby: bool, replay: f64, streaming: bool) -> f64 {
        let mut streamed = self.inner.streamed.lock().expect("lag lock");
        if !standby || streaming {
            *streamed = Instant::now();
            return replay;
        }
        replay.max(streamed.elapsed().as_secs_f64())
    }

    /// `standby`: the role found at start. `limit`: refuse reads while the lag exceeds it
    /// (`None`: never).
    pub fn new(standby: bool, limit: Option<Duration>) -> ReplicaLag {
        ReplicaLag {
            inner: Arc::new(Inner {
                standby: AtomicBool::new(standby),
                millis: AtomicU64::new(0),
                limit,
                streamed: Mutex::new(Instant::now()),
            }),
        }
    }

    /// Whether the database was a hot standby at the last sample: writes would be refused.
    pub fn is_standby(&self) -> bool {
        self.inner.standby.load(Ordering::Relaxed)
    }

    pub fn current(&self) -> Duration {
        Duration::from_millis(self.inner.millis.load(Ordering::Relaxed))
    }

    /// The lag, when it is beyond the limit and reads must be refused.
    pub fn too_far_behind(&self) -> Option<Duration> {
        let limit = self.inner.limit?;
        let lag = self.current();
        (lag > limit).then_some(lag)
    }

    pub fn limit(&self) -> Option<Duration> {
        self.inner.limit
    }

    /// Samples every `every` until the task is aborted; a failed sample keeps the last value.
    pub fn spawn_sampler(&self, pool: Pool, metrics: Metrics, every: Duration) -> tokio::task::JoinHandle<()> {
        let lag = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let sample = async {
                    let client = crate::checkout::checkout(&pool).await.ok()?;
                    let row = client.query_one(SAMPLE_SQL, &[]).await.ok()?;
                    Some((
                        row.get::<_, bool>("standby"),
                        row.get::<_, f64>("lag_seconds"),
                        row.get::<_, bool>("streaming"),
                    ))
                }
                .await;
                if let Some((standby, replay, streaming)) = sample {
                    let seconds = lag.lag_seconds(standby, replay.max(0.0), streaming);
                    lag.inner.standby.store(standby, Ordering::Relaxed);
                    lag.inner.millis.store((seconds * 1000.0) as u64, Ordering::Relaxed);
                    metrics.replication_lag_seconds.set(seconds);
                }
            }
        })
    }
}
