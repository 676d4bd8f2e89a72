//! Fair scheduling's statistics (ojs-fair-scheduling §10.2, FS-R004): how the last minute's
//! claims spread over the queues, read from the event log's `job.started` rows (kept an hour,
//! indexed by time), beside each queue's jobs active and waiting now. The strategies themselves
//! are the fetch's (`claims::Strategy`); worker pools (§6, §10.1) are not built.

use super::{EngineError, Queue};

/// The window the dispatch figures cover, as §10.2 names it (ISO 8601).
pub const WINDOW: &str = "PT1M";

/// One queue's share of the window's claims, and its jobs now.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueDispatch {
    pub name: String,
    /// Claims (`job.started`) in the window.
    pub dispatched: i64,
    /// Its share of all the window's claims; 0 when there were none.
    pub ratio: f64,
    /// Mean time from a job's due time (`run_at`: enqueued, scheduled or retry time) to its
    /// claim, over the window's claims that are still their job's latest (an earlier claim of a
    /// job claimed again, or retried since, no longer has its due time); `None` when none is.
    pub avg_wait_ms: Option<f64>,
    pub active_jobs: i64,
    pub available_jobs: i64,
}

/// The window's claims by queue, and the jobs active and available now by queue. A claim's
/// event and the job's `started_at` are written in one transaction, so both read its `now()`.
const DISPATCHES: &str = "
WITH claims AS (
    SELECT e.queue, count(*) AS dispatched,
           avg(extract(epoch FROM e.time - j.run_at) * 1000)
               FILTER (WHERE j.started_at = e.time AND j.run_at <= e.time) AS avg_wait_ms
    FROM ojs.events e LEFT JOIN ojs.jobs j ON j.id = e.job_id
    WHERE e.type = 'job.started' AND e.time > now() - interval '1 minute'
    GROUP BY e.queue
), waiting AS (
    SELECT queue, count(*) FILTER (WHERE state = 'active') AS active_jobs,
           count(*) FILTER (WHERE state = 'available') AS available_jobs
    FROM ojs.jobs WHERE state IN ('active', 'available') GROUP BY queue
)
SELECT coalesce(c.queue, w.queue) AS name, coalesce(c.dispatched, 0) AS dispatched,
       c.avg_wait_ms::float8 AS avg_wait_ms, coalesce(w.active_jobs, 0) AS active_jobs,
       coalesce(w.available_jobs, 0) AS available_jobs
FROM claims c FULL JOIN waiting w ON w.queue = c.queue
ORDER BY name";

impl Queue {
    /// Every queue that had claims in the last minute or has jobs active or available now, in
    /// name order.
    pub async fn dispatches(&self) -> Result<Vec<QueueDispatch>, EngineError> {
        let client = self.client().await?;
        let rows = client.query(DISPATCHES, &[]).await.map_err(EngineError::sql)?;
        let total: i64 = rows.iter().map(|row| row.get::<_, i64>("dispatched")).sum();
        Ok(rows
            .iter()
            .map(|row| {
                let dispatched: i64 = row.get("dispatched");
                QueueDispatch {
                    name: row.get("name"),
                    dispatched,
                    ratio: if total == 0 {
                        0.0
                    } else {
                        dispatched as f64 / total as f64
                    },
                    avg_wait_ms: row.get("avg_wait_ms"),
                    active_jobs: row.get("active_jobs"),
                    available_jobs: row.get("available_jobs"),
                }
            })
            .collect())
    }
}
