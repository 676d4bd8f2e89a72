//! The maintenance reaper: one leader per database (an advisory lock) deletes retired bodies
//! after their grace period, expired objects and finished OJS jobs past their retention (after
//! cancelling the jobs stopped workflows left behind), in small batches that never hold long
//! locks. What to delete, and how, is the store's (and the job queue's); this module decides who
//! runs it and when.

use std::time::Duration;

use deadpool_postgres::Pool;

use crate::metrics::Metrics;
use crate::pg::try_lead;
use crate::store::{LIFECYCLE_BATCH, ReapStats, Store};

/// Any fixed number works; it only has to be the same for every gateway of one database.
const LEADER_LOCK: i64 = 0x7067_7673_335f_6d74; // "pgvs3_mt"
/// Finished OJS jobs (and settled workflows) deleted per statement.
const JOB_BATCH: i64 = 1000;

/// Deletes OJS jobs that finished more than `retention` ago (see
/// [`crate::ojs::engine::Queue::reap_finished`]), a batch at a time until none is left. Returns
/// how many jobs went.
pub async fn reap_finished_jobs(pool: &Pool, retention: Duration) -> anyhow::Result<u64> {
    let queue = crate::ojs::engine::Queue::new(pool.clone());
    let mut reaped = 0;
    loop {
        let (jobs, workflows) = queue
            .reap_finished(retention, JOB_BATCH)
            .await
            .map_err(|error| anyhow::anyhow!("{error:?}"))?;
        reaped += jobs;
        if (jobs as i64) < JOB_BATCH && (workflows as i64) < JOB_BATCH {
            return Ok(reaped);
        }
    }
}

/// Stopped OJS workflows swept per pass; each normally has a job or two left over, if any.
const WORKFLOW_SWEEP_BATCH: i32 = 1000;

/// Cancels the jobs that stopped OJS workflows still leave behind (see
/// [`crate::ojs::engine::Queue::sweep_stopped_workflows`]): what a cancel's or a failing chain's
/// own sweep could not do. Returns how many jobs it cancelled.
pub async fn sweep_stopped_workflows(pool: &Pool) -> anyhow::Result<u64> {
    crate::ojs::engine::Queue::new(pool.clone())
        .sweep_stopped_workflows(WORKFLOW_SWEEP_BATCH)
        .await
        .map_err(|error| anyhow::anyhow!("{error:?}"))
}

/// Runs the reaper every `interval` while this gateway holds the leader lock; gateways that do
/// not hold it keep trying, so a new leader takes over when the old one goes away.
pub fn spawn_leader_loop(
    store: Store,
    pool: Pool,
    metrics: Metrics,
    grace: Duration,
    interval: Duration,
    upload_max_age: Duration,
    job_retention: Duration,
) -> tokio::task::JoinHandle<()> {
    let maintenance = Maintenance {
        store,
        pool,
        metrics,
        grace,
        upload_max_age,
        job_retention,
    };
    tokio::spawn(async move {
        // The first pass comes one interval after the start, not at once: a start is no reason to
        // reap, and a pass racing the first requests of a fresh gateway made tests that backdate
        // rows and then call the reaper themselves flaky (a lifecycle expiration ran twice).
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The session-level lock lives as long as this dedicated connection.
        let mut leader_connection: Option<deadpool_postgres::ClientWrapper> = None;
        loop {
            ticker.tick().await;
            if leader_connection.as_ref().is_none_or(|client| client.is_closed()) {
                leader_connection = try_lead(&maintenance.pool, LEADER_LOCK, "maintenance").await;
            }
            if leader_connection.is_some() {
                maintenance.pass().await;
            }
        }
    })
}

/// What one maintenance pass works on, and its settings.
struct Maintenance {
    store: Store,
    pool: Pool,
    metrics: Metrics,
    grace: Duration,
    upload_max_age: Duration,
    job_retention: Duration,
}

impl Maintenance {
    /// One pass as leader: each step's failure is logged and the next step still runs.
    async fn pass(&self) {
        self.reap_abandoned_uploads().await;
        // Before the reaper, so the bodies of versions it removes are reaped once their
        // grace period ends.
        self.apply_lifecycle().await;
        self.reap_sessions().await;
        // Before the jobs are reaped: a workflow is kept while it has a job not finished.
        self.sweep_workflows().await;
        self.reap_jobs().await;
        self.reap_retired().await;
    }

    async fn reap_abandoned_uploads(&self) {
        match self.store.reap_abandoned_uploads(self.upload_max_age).await {
            Ok(0) => {}
            Ok(uploads) => {
                self.metrics
                    .maintenance_reaped
                    .with_label_values(&["abandoned_uploads"])
                    .inc_by(uploads);
                tracing::info!(uploads, "aborted abandoned multipart uploads");
            }
            Err(err) => tracing::warn!(error = %err, "reaping abandoned uploads failed"),
        }
    }

    async fn apply_lifecycle(&self) {
        match self.store.apply_lifecycle(LIFECYCLE_BATCH).await {
            Ok(stats) => {
                let reaped = &self.metrics.maintenance_reaped;
                reaped.with_label_values(&["lifecycle_expired"]).inc_by(stats.expired);
                reaped
                    .with_label_values(&["lifecycle_noncurrent"])
                    .inc_by(stats.noncurrent_deleted);
                reaped
                    .with_label_values(&["lifecycle_delete_markers"])
                    .inc_by(stats.delete_markers_removed);
                reaped
                    .with_label_values(&["lifecycle_uploads"])
                    .inc_by(stats.uploads_aborted);
            }
            Err(err) => tracing::warn!(error = %err, "lifecycle pass failed"),
        }
    }

    async fn reap_sessions(&self) {
        match self.store.catalog().reap_sessions().await {
            Ok(0) => {}
            Ok(sessions) => {
                self.metrics
                    .maintenance_reaped
                    .with_label_values(&["sts_sessions"])
                    .inc_by(sessions.unsigned_abs());
            }
            Err(err) => tracing::warn!(error = %err, "reaping expired STS sessions failed"),
        }
    }

    async fn sweep_workflows(&self) {
        match sweep_stopped_workflows(&self.pool).await {
            Ok(0) => {}
            Ok(jobs) => {
                self.metrics
                    .maintenance_reaped
                    .with_label_values(&["ojs_workflow_leftovers"])
                    .inc_by(jobs);
                tracing::info!(jobs, "cancelled jobs that stopped OJS workflows left behind");
            }
            Err(err) => tracing::warn!(error = %err, "sweeping stopped OJS workflows failed"),
        }
    }

    async fn reap_jobs(&self) {
        match reap_finished_jobs(&self.pool, self.job_retention).await {
            Ok(0) => {}
            Ok(jobs) => {
                self.metrics
                    .maintenance_reaped
                    .with_label_values(&["ojs_jobs"])
                    .inc_by(jobs);
                tracing::info!(jobs, "deleted finished OJS jobs past their retention");
            }
            Err(err) => tracing::warn!(error = %err, "reaping finished OJS jobs failed"),
        }
    }

    /// Retired bodies past their grace period and expired objects; a completed pass is the
    /// last run's time, and measures the backlog left.
    async fn reap_retired(&self) {
        let metrics = &self.metrics;
        let stats = match self.store.reap_retired(self.grace).await {
            Ok(stats) => stats,
            Err(err) => {
                tracing::warn!(error = %err, "maintenance pass failed");
                return;
            }
        };
        let reaped = &metrics.maintenance_reaped;
        reaped.with_label_values(&["bodies"]).inc_by(stats.bodies);
        reaped.with_label_values(&["chunks"]).inc_by(stats.chunks);
        reaped
            .with_label_values(&["expired_objects"])
            .inc_by(stats.expired_objects);
        metrics.maintenance_last_run.set(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs() as i64,
        );
        if stats != ReapStats::default() {
            tracing::info!(?stats, "maintenance pass");
        }
        match self.store.reaper_backlog().await {
            Ok((bodies, uploads)) => {
                let backlog = &metrics.maintenance_backlog;
                backlog.with_label_values(&["retired_bodies"]).set(bodies);
                backlog.with_label_values(&["uploads_in_progress"]).set(uploads);
            }
            Err(err) => tracing::warn!(error = %err, "measuring the maintenance backlog failed"),
        }
    }
}
