//! The reaper's work on the object layout: retired bodies deleted after their grace period
//! (chunk by chunk, in bounded batches), expired keys, abandoned multipart uploads. Who runs
//! it, and when, is `crate::maintenance`'s.

use std::time::Duration;

use super::{Store, StoreResult};

/// Retired bodies handled per statement, and chunks deleted per statement.
const BODY_BATCH: i64 = 16;
const CHUNK_BATCH: i32 = 4096;
const EXPIRED_BATCH: i64 = 1000;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReapStats {
    pub bodies: u64,
    pub chunks: u64,
    pub expired_objects: u64,
}

impl Store {
    /// One full pass: repeats batches until nothing old enough is left, so a pass ends drained.
    pub async fn reap_retired(&self, grace: Duration) -> StoreResult<ReapStats> {
        let mut stats = ReapStats::default();
        let client = self.client().await?;
        for ns in self.catalog.namespaces().await? {
            loop {
                let rows = client
                    .query(&ns.retired_bodies, &[&grace.as_secs_f64(), &BODY_BATCH])
                    .await?;
                for row in &rows {
                    let body_id: i64 = row.get("body_id");
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
        // RESP's typed keys (hashes, sets, sorted sets, lists) live outside the namespaces.
        loop {
            let deleted = client.execute(super::types::DELETE_EXPIRED, &[&EXPIRED_BATCH]).await?;
            stats.expired_objects += deleted;
            if (deleted as i64) < EXPIRED_BATCH {
                break;
            }
        }
        Ok(stats)
    }

    /// What is left for the reaper: retired bodies still in their grace period, and multipart
    /// uploads in progress, over all namespaces.
    pub async fn reaper_backlog(&self) -> StoreResult<(i64, i64)> {
        let client = self.client().await?;
        let (mut bodies, mut uploads) = (0, 0);
        for ns in self.catalog.namespaces().await? {
            let row = client.query_one(&ns.backlog, &[]).await?;
            bodies += row.get::<_, i64>("bodies");
            uploads += row.get::<_, i64>("uploads");
        }
        Ok((bodies, uploads))
    }

    /// Aborts multipart uploads started more than `max_age` ago, retiring their parts' bodies.
    /// Returns how many uploads went.
    pub async fn reap_abandoned_uploads(&self, max_age: Duration) -> StoreResult<u64> {
        let mut reaped = 0;
        let client = self.client().await?;
        for ns in self.catalog.namespaces().await? {
            loop {
                // Two statements: the second one's snapshot sees every part that committed while
                // the first waited for the upload rows (parts commit under a share lock on them).
                let uploads: Vec<i64> = client
                    .query(&ns.drop_abandoned_uploads, &[&max_age.as_secs_f64(), &EXPIRED_BATCH])
                    .await?
                    .iter()
                    .map(|row| row.get("upload_id"))
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
}
