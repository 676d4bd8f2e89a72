//! The write-back worker: one gateway per database (an advisory lock) uploads queued bodies to
//! their origins, with retries and backoff, and evicts entries beyond the caches' size limits.
//! Every gateway also flushes the last-use times of the entries it served.

use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use futures::StreamExt;

use super::CacheTier;
use crate::store::{DueUpload, StoreError, StoreResult};

/// Any fixed number works; it only has to be the same for every gateway of one database.
const UPLOADER_LOCK: i64 = 0x7067_7673_335f_7762; // "pgvs3_wb"
const DUE_BATCH: i64 = 64;
const EVICT_EVERY: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(300);

pub fn spawn_uploader(tier: CacheTier, pool: Pool) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let interval = tier.inner.settings.upload_interval;
        let mut leader: Option<deadpool_postgres::ClientWrapper> = None;
        let mut evicted_at: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = tier.inner.uploads_due.notified() => {}
                _ = tokio::time::sleep(interval) => {}
            }
            match tier.flush_touched().await {
                Ok(()) | Err(StoreError::ReadOnly) => {}
                Err(err) => tracing::warn!(error = %err, "recording cache entry use failed"),
            }
            if leader.as_ref().is_none_or(|client| client.is_closed()) {
                leader = crate::pg::try_lead(&pool, UPLOADER_LOCK, "write-back").await;
            }
            if leader.is_none() {
                continue;
            }
            if let Err(err) = tier.drain_due().await {
                tracing::warn!(error = %err, "write-back pass failed");
            }
            if evicted_at.is_none_or(|at| at.elapsed() >= EVICT_EVERY) {
                evicted_at = Some(Instant::now());
                if let Err(err) = tier.evict().await {
                    tracing::warn!(error = %err, "cache eviction failed");
                }
            }
        }
    })
}

impl CacheTier {
    /// Uploads every body whose upload is due now.
    async fn drain_due(&self) -> StoreResult<()> {
        loop {
            let due = self.store().outbox_due(DUE_BATCH).await?;
            let batch = due.len() as i64;
            futures::stream::iter(due)
                .for_each_concurrent(self.inner.settings.upload_concurrency.max(1), |due| async move {
                    // A failure is recorded on the row (and retried later); the rest go on.
                    let _ = self.upload(&due).await;
                })
                .await;
            let (depth, oldest) = self.store().outbox_depth().await?;
            self.metrics().outbox_depth.set(depth);
            self.metrics().outbox_oldest_seconds.set(oldest as i64);
            if batch < DUE_BATCH {
                return Ok(());
            }
        }
    }

    /// Uploads one queued body. Its upload lock keeps a delete of the key waiting until the
    /// body is at the origin, so the delete cannot be overtaken by it.
    pub(super) async fn upload(&self, due: &DueUpload) -> StoreResult<()> {
        let bucket = self.store().catalog().bucket_by_id(due.bucket_id).await?;
        let remote = self.remote(&bucket)?;
        let mut lock = self.store().upload_lock(due).await?;
        let result = async {
            let Some(read) = lock.read_pending(self.store(), &bucket, due).await? else {
                return Ok(());
            };
            let etag = remote
                .client
                .upload(&due.key, &read.head.meta, read.head.size, read.body)
                .await
                .map_err(|err| self.origin_error(err))?;
            lock.settle(due, &etag).await
        }
        .await;
        lock.release().await;
        match &result {
            Ok(()) => self.metrics().uploads.with_label_values(&["ok"]).inc(),
            Err(err) => {
                self.metrics().uploads.with_label_values(&["failed"]).inc();
                let wait = backoff(due.attempts);
                tracing::warn!(bucket = %bucket.name, key = %due.key, attempts = due.attempts + 1, retry_in = ?wait,
                               error = %err, "write-back upload failed");
                self.store().retry_later(due, wait, &err.to_string()).await?;
            }
        }
        result
    }

    async fn evict(&self) -> StoreResult<()> {
        for bucket in self.store().catalog().cache_buckets() {
            let Some(limit) = bucket.origin.as_ref().and_then(|origin| origin.size_limit) else {
                continue;
            };
            let evicted = self.store().cache_evict(bucket.id, limit).await?;
            self.metrics().evictions.inc_by(evicted);
        }
        Ok(())
    }
}

/// Exponential from 1 s, capped, with jitter so a fleet of failed uploads spreads out.
fn backoff(attempts: i32) -> Duration {
    use rand::Rng;
    let base = Duration::from_secs(1u64 << attempts.clamp(0, 9)).min(MAX_BACKOFF);
    base.mul_f64(rand::rng().random_range(0.8..1.2))
}
