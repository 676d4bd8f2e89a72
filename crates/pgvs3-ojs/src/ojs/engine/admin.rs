//! Queues (pause, settings, stats), rate limit keys, the dead letter, counts by state and
//! tenant, workers, and the reaping of finished jobs.

use std::time::Duration;

use serde_json::{Value, json};

use tokio_postgres::Row;

use super::job::{Job, State, job_columns};
use super::{EngineError, Queue};

/// A count per state, as columns named after the states, over the rows of `j`.
const COUNTS_BY_STATE: &str = "count(*) FILTER (WHERE j.state = 'scheduled') AS scheduled,
    count(*) FILTER (WHERE j.state = 'available') AS available,
    count(*) FILTER (WHERE j.state = 'pending') AS pending,
    count(*) FILTER (WHERE j.state = 'active') AS active,
    count(*) FILTER (WHERE j.state = 'completed') AS completed,
    count(*) FILTER (WHERE j.state = 'retryable') AS retryable,
    count(*) FILTER (WHERE j.state = 'cancelled') AS cancelled,
    count(*) FILTER (WHERE j.state = 'discarded') AS discarded";

/// Jobs counted by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts([i64; 8]);

impl Counts {
    /// Reads a row of [`COUNTS_BY_STATE`].
    fn from_row(row: &Row) -> Counts {
        Counts(State::ALL.map(|state| row.get(state.as_str())))
    }

    pub fn of(&self, state: State) -> i64 {
        self.0[State::ALL
            .iter()
            .position(|s| *s == state)
            .expect("every state is listed")]
    }

    /// Jobs waiting to run: available, scheduled or retryable (what a depth bound counts).
    pub fn depth(&self) -> i64 {
        self.of(State::Available) + self.of(State::Scheduled) + self.of(State::Retryable)
    }
}

/// A queue's state and its jobs by state.
#[derive(Debug, Clone)]
pub struct QueueStats {
    pub name: String,
    pub paused: bool,
    /// The depth bound (ext-backpressure), when one is set.
    pub max_depth: Option<i64>,
    pub counts: Counts,
}

/// Counts over all queues (or one tenant's jobs): jobs by state, the queues and the workers
/// holding claims, and the last minute's completions and failures (from the event log).
#[derive(Debug, Clone)]
pub struct Stats {
    pub jobs: Counts,
    pub queues: i64,
    pub workers: i64,
    pub completed_last_minute: i64,
    pub failed_last_minute: i64,
}

/// A queue as `GET /queues` lists it: its state and its jobs waiting or active.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSummary {
    pub name: String,
    pub paused: bool,
    pub available: i64,
    pub active: i64,
    pub scheduled: i64,
    pub retryable: i64,
}

/// The tenants that have jobs (name, job count), and whether there were more than listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenants {
    pub tenants: Vec<(String, i64)>,
    pub truncated: bool,
}

/// Most tenants `GET /admin/tenants` lists in one answer.
const MAX_TENANTS_LISTED: i64 = 1000;

impl Queue {
    pub async fn set_paused(&self, queue: &str, paused: bool) -> Result<(), EngineError> {
        let client = self.client().await?;
        client
            .execute(
                "WITH queue AS (
                     INSERT INTO ojs.queues (name, paused) VALUES ($1, $2)
                     ON CONFLICT (name) DO UPDATE SET paused = excluded.paused
                     RETURNING name
                 )
                 INSERT INTO ojs.events (id, type, queue, data)
                 SELECT gen_random_uuid()::text, CASE WHEN $2 THEN 'queue.paused' ELSE 'queue.resumed' END, name,
                        jsonb_build_object('queue', name)
                 FROM queue",
                &[&queue, &paused],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(())
    }

    /// Replaces a queue's settings named in `settings` (today: `backpressure`); returns them all.
    pub async fn configure_queue(&self, queue: &str, settings: &Value) -> Result<Value, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "INSERT INTO ojs.queues (name, config) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET config = ojs.queues.config || excluded.config
                 RETURNING config",
                &[&queue, settings],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(row.get("config"))
    }

    pub async fn queue_config(&self, queue: &str) -> Result<Value, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT config FROM ojs.queues WHERE name = $1", &[&queue])
            .await
            .map_err(EngineError::sql)?;
        Ok(row.map_or_else(|| json!({}), |row| row.get("config")))
    }

    /// A rate limit key of `tenant`: its limits and what they allow now (ext-rate-limiting
    /// inspection). Keys are per tenant: another tenant's key of the same name is another one.
    pub async fn rate_limit(&self, tenant: &str, key: &str) -> Result<Value, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT ojs.rate_limit_json(r) AS rate_limit FROM ojs.rate_limits r WHERE r.key = ojs.tenant_key($1, $2)",
                &[&tenant, &key],
            )
            .await
            .map_err(EngineError::sql)?;
        row.map(|row| row.get("rate_limit"))
            .ok_or_else(|| EngineError::not_found(format!("no job has named rate limit key {key:?}")))
    }

    /// The rate limit keys of `tenant`, in key order (at most 1,000).
    pub async fn rate_limits(&self, tenant: &str) -> Result<Vec<Value>, EngineError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT ojs.rate_limit_json(r) AS rate_limit FROM ojs.rate_limits r WHERE ojs.key_tenant(r.key) = $1
                 ORDER BY key LIMIT 1000",
                &[&tenant],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(rows.iter().map(|row| row.get("rate_limit")).collect())
    }

    pub async fn queue_stats(&self, queue: &str) -> Result<QueueStats, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                &format!(
                    "SELECT coalesce((SELECT paused FROM ojs.queues WHERE name = $1), false) AS paused,
                            (SELECT (config #>> '{{backpressure,max_depth}}')::bigint FROM ojs.queues WHERE name = $1)
                              AS max_depth,
                            {COUNTS_BY_STATE}
                     FROM ojs.jobs j WHERE j.queue = $1"
                ),
                &[&queue],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(QueueStats {
            name: queue.to_string(),
            paused: row.get("paused"),
            max_depth: row.get::<_, Option<i64>>("max_depth").filter(|bound| *bound > 0),
            counts: Counts::from_row(&row),
        })
    }

    /// One page (`limit` from `offset`) of the queues that have jobs or settings, in name
    /// order, with their jobs waiting and active; and how many there are in all.
    pub async fn list_queues(&self, offset: i64, limit: i64) -> Result<(Vec<QueueSummary>, i64), EngineError> {
        const NAMES: &str = "SELECT DISTINCT queue AS name FROM ojs.jobs UNION SELECT name FROM ojs.queues";
        let client = self.client().await?;
        let total: i64 = client
            .query_one(&format!("SELECT count(*) AS total FROM ({NAMES}) n"), &[])
            .await
            .map_err(EngineError::sql)?
            .get("total");
        let rows = client
            .query(
                &format!(
                    "SELECT n.name, coalesce(q.paused, false) AS paused,
                            count(*) FILTER (WHERE j.state = 'available') AS available,
                            count(*) FILTER (WHERE j.state = 'active') AS active,
                            count(*) FILTER (WHERE j.state = 'scheduled') AS scheduled,
                            count(*) FILTER (WHERE j.state = 'retryable') AS retryable
                     FROM (SELECT name FROM ({NAMES}) all_names ORDER BY name OFFSET $1 LIMIT $2) n
                     LEFT JOIN ojs.queues q USING (name)
                     LEFT JOIN ojs.jobs j ON j.queue = n.name AND j.state IN ('available', 'active', 'scheduled', 'retryable')
                     GROUP BY n.name, q.paused ORDER BY n.name"
                ),
                &[&offset, &limit],
            )
            .await
            .map_err(EngineError::sql)?;
        let queues = rows
            .iter()
            .map(|row| QueueSummary {
                name: row.get("name"),
                paused: row.get("paused"),
                available: row.get("available"),
                active: row.get("active"),
                scheduled: row.get("scheduled"),
                retryable: row.get("retryable"),
            })
            .collect();
        Ok((queues, total))
    }

    pub async fn dead_letter(&self, queue: Option<&str>, limit: i64, tenant: &str) -> Result<Vec<Job>, EngineError> {
        let client = self.client().await?;
        let rows = client
            .query(
                concat!(
                    "SELECT ",
                    job_columns!(),
                    ", j.envelope FROM ojs.jobs j
                     WHERE j.dead_letter AND j.tenant = $3 AND ($1::text IS NULL OR j.queue = $1)
                     ORDER BY j.completed_at DESC LIMIT $2"
                ),
                &[&queue, &limit, &tenant],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(rows.iter().map(Job::from_row).collect())
    }

    pub async fn dead_letter_count(&self) -> Result<i64, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT count(*) AS jobs FROM ojs.jobs WHERE dead_letter", &[])
            .await
            .map_err(EngineError::sql)?;
        Ok(row.get("jobs"))
    }

    /// A dead-lettered job goes back to available with a fresh attempt count.
    pub async fn retry_dead_letter(&self, id: &str, tenant: &str) -> Result<Job, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                concat!(
                    "UPDATE ojs.jobs j SET state = 'available', dead_letter = false, attempt = 0, error = NULL,
                            completed_at = NULL, started_at = NULL, retry_delay_ms = NULL, run_at = now()
                     WHERE j.id = $1 AND j.tenant = $2 AND j.dead_letter RETURNING ",
                    job_columns!(),
                    ", j.envelope"
                ),
                &[&id, &tenant],
            )
            .await
            .map_err(EngineError::sql)?;
        row.map(|row| Job::from_row(&row))
            .ok_or_else(|| EngineError::not_found(format!("no dead-letter job {id}")))
    }

    /// Puts every discarded or cancelled job matching the filter back to available.
    pub async fn retry_in_bulk(&self, state: &str, queue: Option<&str>, tenant: &str) -> Result<u64, EngineError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE ojs.jobs SET state = 'available', dead_letter = false, attempt = 0, error = NULL,
                        completed_at = NULL, started_at = NULL, cancelled_at = NULL, retry_delay_ms = NULL,
                        run_at = now()
                 WHERE state = $1 AND tenant = $3 AND ($2::text IS NULL OR queue = $2)",
                &[&state, &queue, &tenant],
            )
            .await
            .map_err(EngineError::sql)
    }

    pub async fn delete_dead_letter(&self, id: &str, tenant: &str) -> Result<(), EngineError> {
        let client = self.client().await?;
        let deleted = client
            .execute(
                "DELETE FROM ojs.jobs WHERE id = $1 AND tenant = $2 AND dead_letter",
                &[&id, &tenant],
            )
            .await
            .map_err(EngineError::sql)?;
        if deleted == 0 {
            return Err(EngineError::not_found(format!("no dead-letter job {id}")));
        }
        Ok(())
    }

    /// [`Stats`] of every tenant (`None`), or of one (ojs-multi-tenancy §10.2; its queues and
    /// workers are those its jobs are in and claimed by).
    pub async fn stats(&self, tenant: Option<&str>) -> Result<Stats, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                &format!(
                    "WITH j AS (SELECT * FROM ojs.jobs WHERE $1::text IS NULL OR tenant = $1)
                     SELECT {COUNTS_BY_STATE},
                            count(DISTINCT j.queue) AS queues,
                            count(DISTINCT j.worker_id) FILTER (WHERE j.state = 'active') AS workers,
                            (SELECT count(*) FILTER (WHERE e.type = 'job.completed') FROM ojs.events e
                              WHERE e.time > now() - interval '1 minute'
                                AND ($1 IS NULL OR e.job_id IN (SELECT id FROM j))) AS completed_last_minute,
                            (SELECT count(*) FILTER (WHERE e.type = 'job.failed') FROM ojs.events e
                              WHERE e.time > now() - interval '1 minute'
                                AND ($1 IS NULL OR e.job_id IN (SELECT id FROM j))) AS failed_last_minute
                     FROM j"
                ),
                &[&tenant],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(Stats {
            jobs: Counts::from_row(&row),
            queues: row.get("queues"),
            workers: row.get("workers"),
            completed_last_minute: row.get("completed_last_minute"),
            failed_last_minute: row.get("failed_last_minute"),
        })
    }

    /// The tenants that have jobs, each with its job count, in name order (at most
    /// [`MAX_TENANTS_LISTED`]; `truncated` says when there are more).
    pub async fn tenants(&self) -> Result<Tenants, EngineError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT tenant, count(*) AS jobs FROM ojs.jobs GROUP BY tenant ORDER BY tenant LIMIT $1",
                &[&(MAX_TENANTS_LISTED + 1)],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(Tenants {
            truncated: rows.len() as i64 > MAX_TENANTS_LISTED,
            tenants: rows
                .iter()
                .take(MAX_TENANTS_LISTED as usize)
                .map(|row| (row.get("tenant"), row.get("jobs")))
                .collect(),
        })
    }

    /// One page (`limit` from `offset`) of the workers of every tenant that sent heartbeats or
    /// hold claims now, with the claims they hold (a worker is its tenant's: one id used by two
    /// tenants is two workers); and how many there are in all.
    pub async fn active_workers(&self, offset: i64, limit: i64) -> Result<(Vec<Value>, i64), EngineError> {
        const WORKERS: &str = "FROM ojs.workers w
                 FULL JOIN (SELECT tenant, worker_id, count(*) AS claims FROM ojs.jobs
                            WHERE state = 'active' AND worker_id IS NOT NULL GROUP BY tenant, worker_id) a
                   ON ojs.tenant_key(a.tenant, a.worker_id) = w.id";
        let client = self.client().await?;
        let total: i64 = client
            .query_one(&format!("SELECT count(*) AS total {WORKERS}"), &[])
            .await
            .map_err(EngineError::sql)?
            .get("total");
        let rows = client
            .query(
                &format!(
                    "SELECT CASE WHEN w.id IS NULL
                                 THEN jsonb_build_object('id', a.worker_id, 'tenant_id', a.tenant, 'state', 'running')
                                 ELSE ojs.worker_json(w) END
                            || jsonb_build_object('active_jobs', coalesce(a.claims, 0)) AS worker
                     {WORKERS}
                     ORDER BY coalesce(w.id, ojs.tenant_key(a.tenant, a.worker_id)) OFFSET $1 LIMIT $2"
                ),
                &[&offset, &limit],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok((rows.iter().map(|row| row.get("worker")).collect(), total))
    }

    /// Deletes up to `limit` jobs that finished (completed, discarded, cancelled) more than
    /// `retention` ago, workflows settled that long ago, and workers silent that long. Dead-lettered jobs
    /// stay until deleted or retried, jobs and nested workflows of running workflows stay
    /// (later steps read their results), and so do workflows with a job not finished. Returns how many jobs and workflows went.
    pub async fn reap_finished(&self, retention: Duration, limit: i64) -> Result<(u64, u64), EngineError> {
        let client = self.client().await?;
        let seconds = retention.as_secs_f64();
        let jobs = client
            .execute(
                "DELETE FROM ojs.jobs WHERE id IN (
                     SELECT j.id FROM ojs.jobs j
                     WHERE j.state IN ('completed', 'discarded', 'cancelled')
                       -- An expired job finished when it expired: it has no completed_at.
                       AND coalesce(j.completed_at, j.cancelled_at, j.expires_at) < now() - $1 * interval '1 s'
                       AND NOT j.dead_letter
                       AND (j.workflow_id IS NULL OR NOT EXISTS (
                            SELECT 1 FROM ojs.workflows w LEFT JOIN ojs.workflows p ON p.id = w.parent_id
                            WHERE w.id = j.workflow_id AND (w.state = 'running' OR p.state = 'running')))
                     ORDER BY coalesce(j.completed_at, j.cancelled_at, j.expires_at)
                     LIMIT $2
                     FOR UPDATE SKIP LOCKED)",
                &[&seconds, &limit],
            )
            .await
            .map_err(EngineError::sql)?;
        let workflows = client
            .execute(
                "DELETE FROM ojs.workflows WHERE id IN (
                     SELECT w.id FROM ojs.workflows w
                     WHERE w.state NOT IN ('running', 'pending') AND w.completed_at < now() - $1 * interval '1 s'
                       AND NOT EXISTS (SELECT 1 FROM ojs.workflows p WHERE p.id = w.parent_id
                                       AND p.state IN ('running', 'pending'))
                       -- A settled workflow may still have a job running (a cancelled one's,
                       -- let finish) or not yet swept up: the job's workflow decides its fate.
                       AND NOT EXISTS (SELECT 1 FROM ojs.jobs j WHERE j.workflow_id = w.id
                                       AND j.state NOT IN ('completed', 'discarded', 'cancelled'))
                       -- Jobs a stop skipped may be its nested workflows' (found only by
                       -- walking down from this mark): kept until the sweep clears it.
                       AND NOT w.has_leftovers
                     ORDER BY w.completed_at LIMIT $2 FOR UPDATE OF w SKIP LOCKED)",
                &[&seconds, &limit],
            )
            .await
            .map_err(EngineError::sql)?;
        client
            .execute(
                "DELETE FROM ojs.workers WHERE id IN (
                     SELECT id FROM ojs.workers WHERE last_beat < now() - $1 * interval '1 s'
                     ORDER BY last_beat LIMIT $2 FOR UPDATE SKIP LOCKED)",
                &[&seconds, &limit],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok((jobs, workflows))
    }
}
