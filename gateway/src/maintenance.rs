//! The maintenance reaper: one leader per database (an advisory lock) deletes retired bodies
//! after their grace period, expired objects and finished OJS jobs past their retention, in
//! small batches that never hold long locks.

use std::time::Duration;

use deadpool_postgres::Pool;

use crate::metrics::Metrics;
use crate::store::Store;

/// Any fixed number works; it only has to be the same for every gateway of one database.
const LEADER_LOCK: i64 = 0x7067_7673_335f_6d74; // "pgvs3_mt"
/// Retired bodies handled per statement, and chunks deleted per statement.
const BODY_BATCH: i64 = 16;
const CHUNK_BATCH: i32 = 4096;
const EXPIRED_BATCH: i64 = 1000;
/// Finished OJS jobs (and settled workflows) deleted per statement.
const JOB_BATCH: i64 = 1000;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReapStats {
    pub bodies: u64,
    pub chunks: u64,
    pub expired_objects: u64,
}

/// One full pass: repeats batches until nothing old enough is left, so a pass ends drained.
pub async fn run_once(store: &Store, grace: Duration) -> anyhow::Result<ReapStats> {
    let mut stats = ReapStats::default();
    let client = store.pool().get().await?;
    for ns in store.catalog().namespaces().await? {
        loop {
            let rows = client
                .query(&ns.retired_bodies, &[&grace.as_secs_f64(), &BODY_BATCH])
                .await?;
            for row in &rows {
                let body_id: i64 = row.get(0);
                // Chunks are numbered from 0 without gaps, so a short batch is the last one.
                let mut from = 0i32;
                loop {
                    let deleted = client
                        .execute(&ns.delete_retired_chunks, &[&body_id, &from, &(from + CHUNK_BATCH)])
                        .await?;
                    stats.chunks += deleted;
                    if deleted < CHUNK_BATCH as u64 {
                        break;
                    }
                    from += CHUNK_BATCH;
                }
                // A multipart object's body is a manifest: its parts' bodies retire with it.
                client.execute(&ns.drop_parts, &[&vec![body_id]]).await?;
                stats.bodies += client.execute(&ns.forget_retired_body, &[&body_id]).await?;
            }
            if (rows.len() as i64) < BODY_BATCH {
                break;
            }
        }
        loop {
            let deleted = client.execute(&ns.delete_expired, &[&EXPIRED_BATCH]).await?;
            stats.expired_objects += deleted;
            if (deleted as i64) < EXPIRED_BATCH {
                break;
            }
        }
    }
    Ok(stats)
}

/// What is left for the reaper: retired bodies still in their grace period, and multipart
/// uploads in progress, over all namespaces.
pub async fn backlog(store: &Store) -> anyhow::Result<(i64, i64)> {
    let client = store.pool().get().await?;
    let (mut bodies, mut uploads) = (0, 0);
    for ns in store.catalog().namespaces().await? {
        let row = client.query_one(&ns.backlog, &[]).await?;
        bodies += row.get::<_, i64>(0);
        uploads += row.get::<_, i64>(1);
    }
    Ok((bodies, uploads))
}

/// Aborts multipart uploads started more than `max_age` ago, retiring their parts' bodies.
/// Returns how many uploads went.
pub async fn reap_abandoned_uploads(store: &Store, max_age: Duration) -> anyhow::Result<u64> {
    let mut reaped = 0;
    let client = store.pool().get().await?;
    for ns in store.catalog().namespaces().await? {
        loop {
            // Two statements: the second one's snapshot sees every part that committed while
            // the first waited for the upload rows (parts commit under a share lock on them).
            let uploads: Vec<i64> = client
                .query(&ns.drop_abandoned_uploads, &[&max_age.as_secs_f64(), &EXPIRED_BATCH])
                .await?
                .iter()
                .map(|row| row.get(0))
                .collect();
            client.execute(&ns.drop_parts, &[&uploads]).await?;
            reaped += uploads.len() as u64;
            if (uploads.len() as i64) < EXPIRED_BATCH {
                break;
            }
        }
    }
    Ok(reaped)
}

/// Deletes OJS jobs that finished more than `retention` ago (see
/// [`crate::ojs::queue::Queue::reap_finished`]), a batch at a time until none is left. Returns
/// how many jobs went.
pub async fn reap_finished_jobs(pool: &Pool, retention: Duration) -> anyhow::Result<u64> {
    let queue = crate::ojs::queue::Queue::new(pool.clone());
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
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The session-level lock lives as long as this dedicated connection.
        let mut leader_connection: Option<deadpool_postgres::ClientWrapper> = None;
        loop {
            ticker.tick().await;
            if leader_connection.as_ref().is_none_or(|client| client.is_closed()) {
                leader_connection = try_lead(&pool, LEADER_LOCK, "maintenance").await;
            }
            if leader_connection.is_none() {
                continue;
            }
            match reap_abandoned_uploads(&store, upload_max_age).await {
                Ok(0) => {}
                Ok(uploads) => {
                    metrics
                        .maintenance_reaped
                        .with_label_values(&["abandoned_uploads"])
                        .inc_by(uploads);
                    tracing::info!(uploads, "aborted abandoned multipart uploads");
                }
                Err(err) => tracing::warn!(error = %err, "reaping abandoned uploads failed"),
            }
            match reap_finished_jobs(&pool, job_retention).await {
                Ok(0) => {}
                Ok(jobs) => {
                    metrics.maintenance_reaped.with_label_values(&["ojs_jobs"]).inc_by(jobs);
                    tracing::info!(jobs, "deleted finished OJS jobs past their retention");
                }
                Err(err) => tracing::warn!(error = %err, "reaping finished OJS jobs failed"),
            }
            match run_once(&store, grace).await {
                Ok(stats) => {
                    metrics
                        .maintenance_reaped
                        .with_label_values(&["bodies"])
                        .inc_by(stats.bodies);
                    metrics
                        .maintenance_reaped
                        .with_label_values(&["chunks"])
                        .inc_by(stats.chunks);
                    metrics
                        .maintenance_reaped
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
                    match backlog(&store).await {
                        Ok((bodies, uploads)) => {
                            metrics
                                .maintenance_backlog
                                .with_label_values(&["retired_bodies"])
                                .set(bodies);
                            metrics
                                .maintenance_backlog
                                .with_label_values(&["uploads_in_progress"])
                                .set(uploads);
                        }
                        Err(err) => tracing::warn!(error = %err, "measuring the maintenance backlog failed"),
                    }
                }
                Err(err) => tracing::warn!(error = %err, "maintenance pass failed"),
            }
        }
    })
}

/// Tries to become the one gateway of the database (a primary) that holds `lock`; the returned
/// connection holds it for as long as it lives.
pub(crate) async fn try_lead(pool: &Pool, lock: i64, role: &str) -> Option<deadpool_postgres::ClientWrapper> {
    let client = pool.get().await.ok()?;
    let standby: bool = client.query_one("SELECT pg_is_in_recovery()", &[]).await.ok()?.get(0);
    if standby {
        return None;
    }
    let won: bool = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&lock])
        .await
        .ok()?
        .get(0);
    if !won {
        return None;
    }
    tracing::info!("this gateway is the {role} leader");
    // Taken out of the pool: the session lock must not be shared with, or released by, requests.
    Some(deadpool_postgres::Object::take(client))
}
