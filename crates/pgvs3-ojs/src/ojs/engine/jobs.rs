//! Enqueueing (single, batch, unique, with dependencies), reading and cancelling jobs.

use deadpool_postgres::GenericClient;
use serde_json::{Value, json};
use tokio_postgres::error::SqlState;

use super::envelope::{NewJob, OnConflict};
use super::{DEFAULT_TENANT, EngineError, Queue};

const INSERT_JOBS: &str = "
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::int[], $6::jsonb[],
                         $7::text[], $8::float8[], $9::text[], $10::float8[], $11::int[], $12::text[],
                         $14::int[], $15::text[], $16::bool[], $17::text[], $18::jsonb[])
        AS t(id, queue, type, priority, max_attempts, envelope, scheduled_at, delay_ms, expires_at, ttl_ms,
             visibility_ms, unique_key, workflow_step, workflow_callback, held, rate_key, rate_policy)
), timed AS (
    SELECT input.*, coalesce(scheduled_at::timestamptz, now() + coalesce(delay_ms, 0) * interval '1 ms') AS run_at,
           coalesce(expires_at::timestamptz, now() + ttl_ms * interval '1 ms') AS expires
    FROM input
), bounded AS (
    -- Queues with a depth bound (ext-backpressure); one primary-key probe per queue otherwise.
    SELECT q.name, (q.config #>> '{backpressure,max_depth}')::bigint AS bound,
           coalesce((q.config #>> '{backpressure,warning_threshold}')::float8, 0.8) AS warning,
           (SELECT count(*) FROM input i WHERE i.queue = q.name AND NOT coalesce(i.held, false)) AS incoming
    FROM ojs.queues q
    WHERE q.name IN (SELECT queue FROM input) AND (q.config #>> '{backpressure,max_depth}')::bigint > 0
), pressure AS (
    -- Counting stops at the bound: a full queue costs no more than that to check.
    SELECT b.*, (SELECT count(*) FROM (SELECT 1 FROM ojs.jobs j WHERE j.queue = b.name
                 AND j.state IN ('available', 'scheduled', 'retryable') LIMIT b.bound) d) AS depth
    FROM bounded b
), full_queue AS (
    SELECT * FROM pressure WHERE depth + incoming > bound
), rejection AS (
    INSERT INTO ojs.events (id, type, queue, data)
    SELECT gen_random_uuid()::text, 'backpressure.rejected', name,
           jsonb_build_object('queue', name, 'depth', depth, 'bound', bound)
    FROM full_queue
), rate_policy AS (
    -- A key's limits are the ones its latest job named.
    INSERT INTO ojs.rate_limits AS r (key, concurrency, rate, rate_period_ms, throttle_ms)
    SELECT DISTINCT ON (rate_key) rate_key, (rate_policy ->> 'concurrency')::int, (rate_policy ->> 'rate')::int,
           (rate_policy ->> 'rate_period_ms')::bigint, (rate_policy ->> 'throttle_ms')::bigint
    FROM input WHERE rate_key IS NOT NULL
    ORDER BY rate_key
    ON CONFLICT (key) DO UPDATE SET concurrency = excluded.concurrency, rate = excluded.rate,
        rate_period_ms = excluded.rate_period_ms, throttle_ms = excluded.throttle_ms
    WHERE (r.concurrency, r.rate, r.rate_period_ms, r.throttle_ms)
          IS DISTINCT FROM (excluded.concurrency, excluded.rate, excluded.rate_period_ms, excluded.throttle_ms)
), job AS (
    INSERT INTO ojs.jobs AS j (id, queue, type, state, priority, max_attempts, envelope, run_at, expires_at,
                               visibility_ms, unique_key, workflow_id, workflow_step, workflow_callback, rate_key,
                               tenant)
    SELECT id, queue, type,
           CASE WHEN held THEN 'pending' WHEN run_at > now() THEN 'scheduled' ELSE 'available' END, priority,
           max_attempts, envelope, run_at, expires, visibility_ms, unique_key, $13, workflow_step, workflow_callback,
           rate_key, $20
    FROM timed WHERE NOT EXISTS (SELECT 1 FROM full_queue)
    RETURNING j.id, j.queue, j.type, j.seq, j.state, j.priority, j.run_at, j.envelope,
        CASE WHEN NOT $19::bool THEN ojs.job_json(j) END AS body
), event AS (
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    SELECT gen_random_uuid()::text, 'job.enqueued', queue, id,
           jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue, 'priority', priority)
           || CASE WHEN state = 'scheduled' THEN jsonb_build_object('scheduled_at', ojs.ts(run_at)) ELSE '{}' END
           || ojs.trace_of(envelope)
    FROM job WHERE state <> 'pending'
    UNION ALL
    SELECT gen_random_uuid()::text, 'job.scheduled', queue, id,
           jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue,
                              'scheduled_at', ojs.ts(run_at)) || ojs.trace_of(envelope)
    FROM job WHERE state = 'scheduled'
)
SELECT body, seq, state, CASE WHEN state = 'scheduled' THEN ojs.ts(run_at) END AS scheduled_at,
       (SELECT ojs.ts(now())) AS created_at, NULL AS queue, NULL::bigint AS depth, NULL::bigint AS bound,
       NULL::bigint AS incoming, NULL::float8 AS warning
FROM job
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, name, depth, bound, incoming, warning FROM pressure
ORDER BY 2";

impl Queue {
    /// Inserts jobs all-or-nothing; returns them as stored (or summed up), in order. Jobs with
    /// unique options go through [`Queue::enqueue_unique`]. A queue at its depth bound refuses
    /// the lot, and so does one job whose `args` do not match its type's schema.
    pub async fn enqueue(&self, jobs: &[NewJob], tenant: &str, answer: Answer) -> Result<Inserted, EngineError> {
        self.check_args(jobs.iter(), answer == Answer::Summary).await?;
        if let [job] = jobs
            && job.unique.is_some()
        {
            return self.enqueue_unique(job, tenant).await;
        }
        let mut client = self.client().await?;
        if jobs.iter().all(|job| job.depends_on.is_empty()) {
            return insert_placed(&client, jobs, &Placement::of(tenant), answer).await;
        }
        let tx = client.transaction().await.map_err(EngineError::sql)?;
        let inserted = insert_waiting(&tx, jobs, tenant, answer).await?;
        tx.commit().await.map_err(EngineError::sql)?;
        Ok(inserted)
    }

    /// Duplicates are looked for among the tenant's own jobs only.
    async fn enqueue_unique(&self, job: &NewJob, tenant: &str) -> Result<Inserted, EngineError> {
        let unique = job.unique.as_ref().expect("unique options");
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(EngineError::sql)?;
        // One enqueuer per key at a time, so two duplicates cannot both see "no duplicate".
        tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&unique.key])
            .await
            .map_err(EngineError::sql)?;
        let existing = tx
            .query_opt(
                "SELECT j.id, ojs.job_json(j) AS job FROM ojs.jobs j
                 WHERE j.unique_key = $1 AND j.state = ANY($2) AND j.tenant = $4
                   AND ($3::float8 IS NULL OR j.created_at > now() - $3 * interval '1 ms')
                 ORDER BY j.created_at DESC LIMIT 1",
                &[&unique.key, &unique.states, &unique.period_ms, &tenant],
            )
            .await
            .map_err(EngineError::sql)?;
        if let Some(row) = existing {
            let existing_id: String = row.get("id");
            match unique.on_conflict {
                OnConflict::Reject => {
                    return Err(EngineError::duplicate(format!(
                        "a job with the same unique key exists: {existing_id}"
                    ))
                    .with_details(json!({ "existing_job_id": existing_id })));
                }
                OnConflict::Ignore => {
                    let mut body: Value = row.get("job");
                    body["duplicate"] = Value::Bool(true);
                    body["existing_job_id"] = Value::String(existing_id);
                    return Ok(Inserted {
                        jobs: vec![body],
                        pressure: None,
                    });
                }
                OnConflict::Replace => {
                    tx.execute(
                        "UPDATE ojs.jobs SET state = 'cancelled', cancelled_at = now(), unique_key = NULL WHERE id = $1",
                        &[&existing_id],
                    )
                    .await
                    .map_err(EngineError::sql)?;
                }
            }
        }
        let inserted = insert_waiting(&tx, std::slice::from_ref(job), tenant, Answer::Job).await?;
        tx.commit().await.map_err(EngineError::sql)?;
        Ok(inserted)
    }

    /// A job of `tenant`; another tenant's is not found.
    pub async fn get(&self, id: &str, tenant: &str) -> Result<Value, EngineError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached("SELECT ojs.job_json(j) AS job FROM ojs.jobs j WHERE j.id = $1 AND j.tenant = $2")
            .await
            .map_err(EngineError::sql)?;
        let row = client
            .query_opt(&statement, &[&id, &tenant])
            .await
            .map_err(EngineError::sql)?;
        row.map(|row| row.get("job"))
            .ok_or_else(|| EngineError::job_not_found(id))
    }

    pub async fn cancel(&self, id: &str, tenant: &str) -> Result<Value, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "UPDATE ojs.jobs j SET state = 'cancelled', cancelled_at = now(), visible_until = NULL
                 WHERE j.id = $1 AND j.tenant = $2
                   AND j.state IN ('scheduled', 'available', 'pending', 'active', 'retryable')
                 RETURNING ojs.job_json(j) AS job",
                &[&id, &tenant],
            )
            .await
            .map_err(EngineError::sql)?;
        match row {
            Some(row) => Ok(row.get("job")),
            None => Err(self.explain_refusal(&client, id, tenant, "cancelled").await),
        }
    }

    /// Why an ack/nack/cancel changed nothing: no such job of the tenant (404) or the wrong
    /// state or claim (409).
    pub(super) async fn explain_refusal(
        &self,
        client: &tokio_postgres::Client,
        id: &str,
        tenant: &str,
        verb: &str,
    ) -> EngineError {
        match client
            .query_opt(
                "SELECT state FROM ojs.jobs WHERE id = $1 AND tenant = $2",
                &[&id, &tenant],
            )
            .await
        {
            Ok(Some(row)) => refusal(id, &row.get::<_, String>("state"), verb),
            Ok(None) => EngineError::job_not_found(id),
            Err(err) => EngineError::sql(err),
        }
    }
}

/// Jobs as stored, and how close to its bound the fullest bounded queue they went to now is
/// (when over its warning threshold).
#[derive(Default)]
pub struct Inserted {
    pub jobs: Vec<Value>,
    pub pressure: Option<Pressure>,
}

/// A bounded queue's depth against its bound (ext-backpressure).
#[derive(Debug, Clone, Copy)]
pub struct Pressure {
    pub depth: i64,
    pub bound: i64,
}

impl Pressure {
    pub fn ratio(&self) -> f64 {
        self.depth as f64 / self.bound as f64
    }
}

/// Whose inserted jobs are and where they sit in a workflow, one entry per job; empty for plain
/// enqueues.
#[derive(Default)]
pub(super) struct Placement<'a> {
    /// The default tenant when `None`.
    pub(super) tenant: Option<&'a str>,
    pub(super) workflow_id: Option<&'a str>,
    pub(super) steps: Vec<Option<i32>>,
    pub(super) callbacks: Vec<Option<&'static str>>,
    /// Inserted as `pending`, for the workflow to release later.
    pub(super) held: Vec<bool>,
}

/// How much of each inserted job an enqueue answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The whole job, as a read shows it.
    Job,
    /// Id, type, queue, state, priority, attempts and timestamps: the HTTP binding's batch
    /// answer, which does not echo the args and options the client just sent (for a batch of
    /// large jobs, writing them out again was most of the statement's work).
    Summary,
}

impl<'a> Placement<'a> {
    pub(super) fn of(tenant: &'a str) -> Placement<'a> {
        Placement {
            tenant: Some(tenant),
            ..Placement::default()
        }
    }
}

/// Inserts jobs of the default tenant (cron's).
pub(super) async fn insert(
    client: &impl deadpool_postgres::GenericClient,
    jobs: &[NewJob],
) -> Result<Inserted, EngineError> {
    insert_placed(client, jobs, &Placement::default(), Answer::Job).await
}

/// Inserts jobs of which some wait for others (`options.depends_on`), in the caller's
/// transaction: those are inserted `pending`, then their dependencies recorded and resolved
/// (functions/ojs.sql), so a job whose dependencies all completed already is answered
/// available. A dependency that names no job refuses the whole enqueue (404, the transaction
/// is not committed).
pub(super) async fn insert_waiting(
    tx: &deadpool_postgres::Transaction<'_>,
    jobs: &[NewJob],
    tenant: &str,
    answer: Answer,
) -> Result<Inserted, EngineError> {
    let placement = Placement {
        held: jobs.iter().map(|job| !job.depends_on.is_empty()).collect(),
        ..Placement::of(tenant)
    };
    let mut inserted = insert_placed(tx, jobs, &placement, answer).await?;
    if inserted.jobs.len() != jobs.len() {
        // Refused as a whole (a full queue): nothing waits.
        return Ok(inserted);
    }
    for (job, body) in jobs.iter().zip(inserted.jobs.iter_mut()) {
        if job.depends_on.is_empty() {
            continue;
        }
        let missing: Vec<String> = tx
            .query_one(
                "SELECT ojs.add_dependencies($1, $2) AS missing",
                &[&job.id, &job.depends_on],
            )
            .await
            .map_err(EngineError::sql)?
            .get("missing");
        if let Some(first) = missing.first() {
            return Err(
                EngineError::not_found(format!("job {} depends on job {first}, which does not exist", job.id))
                    .with_details(json!({ "resource_type": "job", "resource_id": first, "missing": missing })),
            );
        }
        // Read again: the resolution may have released it already.
        let row = tx
            .query_one(
                "SELECT j.state, ojs.job_json(j) AS job FROM ojs.jobs j WHERE j.id = $1",
                &[&job.id],
            )
            .await
            .map_err(EngineError::sql)?;
        match answer {
            Answer::Job => *body = row.get("job"),
            Answer::Summary => body["state"] = Value::String(row.get("state")),
        }
    }
    Ok(inserted)
}

pub(super) async fn insert_placed(
    client: &impl deadpool_postgres::GenericClient,
    jobs: &[NewJob],
    placement: &Placement<'_>,
    answer: Answer,
) -> Result<Inserted, EngineError> {
    let summary = answer == Answer::Summary;
    let column = |f: fn(&NewJob) -> String| jobs.iter().map(f).collect::<Vec<_>>();
    let ids = column(|job| job.id.clone());
    let queues = column(|job| job.queue.clone());
    let types = column(|job| job.job_type.clone());
    let priorities: Vec<i32> = jobs.iter().map(|job| job.priority).collect();
    let max_attempts: Vec<i32> = jobs.iter().map(|job| job.max_attempts).collect();
    let envelopes: Vec<&Value> = jobs.iter().map(|job| &job.envelope).collect();
    let scheduled: Vec<Option<&str>> = jobs.iter().map(|job| job.scheduled_at.as_deref()).collect();
    let delays: Vec<Option<f64>> = jobs.iter().map(|job| job.delay_ms).collect();
    let expires: Vec<Option<&str>> = jobs.iter().map(|job| job.expires_at.as_deref()).collect();
    let ttls: Vec<Option<f64>> = jobs.iter().map(|job| job.ttl_ms).collect();
    let visibility: Vec<i32> = jobs.iter().map(|job| job.visibility_ms).collect();
    let unique: Vec<Option<&str>> = jobs
        .iter()
        .map(|job| job.unique.as_ref().map(|u| u.key.as_str()))
        .collect();
    // Empty unless some job is rate-limited: unnest pads a shorter array with NULLs.
    let rate_limited = jobs.iter().any(|job| job.rate_limit.is_some());
    let (rate_keys, rate_policies): (Vec<Option<&str>>, Vec<Option<Value>>) = jobs
        .iter()
        .filter(|_| rate_limited)
        .map(|job| match &job.rate_limit {
            Some(limit) => (Some(limit.key.as_str()), Some(limit.policy())),
            None => (None, None),
        })
        .unzip();
    let statement = client.prepare_cached(INSERT_JOBS).await.map_err(EngineError::sql)?;
    let rows = client
        .query(
            &statement,
            &[
                &ids,
                &queues,
                &types,
                &priorities,
                &max_attempts,
                &envelopes,
                &scheduled,
                &delays,
                &expires,
                &ttls,
                &visibility,
                &unique,
                &placement.workflow_id,
                &placement.steps,
                &placement.callbacks,
                &placement.held,
                &rate_keys,
                &rate_policies,
                &summary,
                &placement.tenant.unwrap_or(DEFAULT_TENANT),
            ],
        )
        .await
        .map_err(|err| match err.code() {
            Some(&SqlState::UNIQUE_VIOLATION) => EngineError::duplicate("a job with this id already exists"),
            _ => EngineError::sql(err),
        })?;
    let mut inserted = Inserted::default();
    // Job rows come first, in the order of `jobs` (seq is taken in insert order).
    let mut sent = jobs.iter();
    for row in &rows {
        if row.get::<_, Option<i64>>("seq").is_some() {
            let job = sent.next().expect("a row per job");
            inserted.jobs.push(match row.get::<_, Option<Value>>("body") {
                Some(stored) => stored,
                None => job_summary(job, row.get("state"), row.get("scheduled_at"), row.get("created_at")),
            });
        } else {
            let queue: String = row.get("queue");
            let (depth, bound, incoming): (i64, i64, i64) = (row.get("depth"), row.get("bound"), row.get("incoming"));
            if depth + incoming > bound {
                return Err(EngineError::queue_full(&queue, depth, bound));
            }
            let pressure = Pressure {
                depth: depth + incoming,
                bound,
            };
            let warning: f64 = row.get("warning");
            if pressure.ratio() >= warning && inserted.pressure.is_none_or(|p| p.ratio() < pressure.ratio()) {
                inserted.pressure = Some(pressure);
            }
        }
    }
    Ok(inserted)
}

/// A batch's answer for one job (the HTTP binding's batch example): what the client sent about
/// it, and the state and times the insert gave it. Built here rather than in the statement,
/// where one JSON object per job was a good part of a batch's work.
fn job_summary(job: &NewJob, state: String, scheduled_at: Option<String>, created_at: String) -> Value {
    let mut summary = json!({
        "id": job.id,
        "type": job.job_type,
        "queue": job.queue,
        "state": state,
        "priority": job.priority,
        "attempt": 0,
        "max_attempts": job.max_attempts,
        "created_at": created_at,
        "enqueued_at": created_at,
    });
    if let Some(at) = scheduled_at {
        summary["scheduled_at"] = Value::String(at);
    }
    // What the client stated about the job itself comes back with it.
    for field in ["specversion", "version", "meta"] {
        if let Some(value) = job.envelope.get(field).filter(|value| !value.is_null()) {
            summary[field] = value.clone();
        }
    }
    summary
}

pub(super) fn refusal(id: &str, state: &str, verb: &str) -> EngineError {
    EngineError::conflict(format!(
        "job {id} is {state} (or claimed by another worker): it cannot be {verb} now"
    ))
}
