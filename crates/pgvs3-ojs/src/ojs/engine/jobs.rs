//! Enqueueing (single, batch, unique, with dependencies), reading and cancelling jobs.

use deadpool_postgres::GenericClient;
use serde_json::{Map, Value, json};
use tokio_postgres::error::SqlState;

use super::envelope::{NewJob, OnConflict};
use super::job::{Job, job_columns};
use super::{DEFAULT_TENANT, EngineError, Queue};

const INSERT_JOBS: &str = concat!(
    "
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
    -- A bound holds for each tenant ($20) apart: another tenant's backlog neither fills this
    -- tenant's share of the queue nor shows in its depth.
    SELECT q.name, (q.config #>> '{backpressure,max_depth}')::bigint AS bound,
           coalesce((q.config #>> '{backpressure,warning_threshold}')::float8, 0.8) AS warning,
           (SELECT count(*) FROM input i WHERE i.queue = q.name AND NOT coalesce(i.held, false)) AS incoming
    FROM ojs.queues q
    WHERE q.name IN (SELECT queue FROM input) AND (q.config #>> '{backpressure,max_depth}')::bigint > 0
), pressure AS (
    -- Enqueues into one bounded queue of one tenant take turns (ojs.bounded_depth), queues in
    -- name order so that two batches spanning the same ones cannot deadlock.
    SELECT b.*, ojs.bounded_depth(b.name, $20, b.bound) AS depth
    FROM (SELECT * FROM bounded ORDER BY name OFFSET 0) b
), full_queue AS (
    SELECT * FROM pressure WHERE depth + incoming > bound
), rejection AS (
    INSERT INTO ojs.events (id, type, queue, data)
    SELECT gen_random_uuid()::text, 'backpressure.rejected', name,
           jsonb_build_object('queue', name, 'depth', depth, 'bound', bound, 'tenant_id', $20::text)
    FROM full_queue
), rate_policy AS (
    -- A key's limits are the ones its latest job named. Keys are the tenant's ($20).
    INSERT INTO ojs.rate_limits AS r (key, concurrency, rate, rate_period_ms, throttle_ms)
    SELECT DISTINCT ON (rate_key) ojs.tenant_key($20, rate_key), (rate_policy ->> 'concurrency')::int, (rate_policy ->> 'rate')::int,
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
           ojs.tenant_key($20, rate_key), $20
    FROM timed WHERE NOT EXISTS (SELECT 1 FROM full_queue)
    RETURNING j.*
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
-- A row per job (a summary does not read the envelope back: for a batch of large jobs, writing
-- the args out again was most of the statement's work), then a row per bounded queue.
SELECT j.seq, ",
    job_columns!(),
    ", CASE WHEN $19::bool THEN NULL ELSE j.envelope END AS envelope,
       p.name AS bounded_queue, p.depth, p.bound, p.incoming, p.warning
FROM job j FULL JOIN pressure p ON false
ORDER BY j.seq"
);

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

    async fn enqueue_unique(&self, job: &NewJob, tenant: &str) -> Result<Inserted, EngineError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(EngineError::sql)?;
        let inserted = insert_unique(&tx, job, tenant).await?;
        tx.commit().await.map_err(EngineError::sql)?;
        Ok(inserted)
    }

    /// A job of `tenant`; another tenant's is not found.
    pub async fn get(&self, id: &str, tenant: &str) -> Result<Job, EngineError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(concat!(
                "SELECT ",
                job_columns!(),
                ", j.envelope FROM ojs.jobs j WHERE j.id = $1 AND j.tenant = $2"
            ))
            .await
            .map_err(EngineError::sql)?;
        let row = client
            .query_opt(&statement, &[&id, &tenant])
            .await
            .map_err(EngineError::sql)?;
        row.map(|row| Job::from_row(&row))
            .ok_or_else(|| EngineError::job_not_found(id))
    }

    pub async fn cancel(&self, id: &str, tenant: &str) -> Result<Job, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                concat!(
                    "UPDATE ojs.jobs j SET state = 'cancelled', cancelled_at = now(), visible_until = NULL
                     WHERE j.id = $1 AND j.tenant = $2
                       AND j.state IN ('scheduled', 'available', 'pending', 'active', 'retryable')
                     RETURNING ",
                    job_columns!(),
                    ", j.envelope"
                ),
                &[&id, &tenant],
            )
            .await
            .map_err(EngineError::sql)?;
        match row {
            Some(row) => {
                let job = Job::from_row(&row);
                super::workflow::after_member_settled(&client, &job).await;
                Ok(job)
            }
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

/// Jobs as stored (as `answer` asks: whole, or without the envelope but for what the client
/// stated about the job itself), and how close to its bound the fullest bounded queue they
/// went to now is (when over its warning threshold).
pub struct Inserted {
    pub jobs: Vec<Job>,
    pub answer: Answer,
    /// The job is not inserted: it is the existing duplicate a unique job's `on_conflict:
    /// ignore` answers with.
    pub duplicate: bool,
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

/// Inserts a job with unique options in the caller's transaction, as its `on_conflict` says when
/// a duplicate exists: refused, answered with the duplicate, or replacing it. Duplicates are
/// looked for among the tenant's own jobs only.
pub(super) async fn insert_unique(
    tx: &deadpool_postgres::Transaction<'_>,
    job: &NewJob,
    tenant: &str,
) -> Result<Inserted, EngineError> {
    let unique = job.unique.as_ref().expect("unique options");
    // One enqueuer per key of the tenant at a time, so two duplicates cannot both see "no
    // duplicate" (and one tenant's enqueues never wait for another's of the same key).
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(ojs.tenant_key($1, $2), 0))",
        &[&tenant, &unique.key],
    )
    .await
    .map_err(EngineError::sql)?;
    let existing = tx
        .query_opt(
            concat!(
                "SELECT ",
                job_columns!(),
                ", j.envelope FROM ojs.jobs j
                 WHERE j.unique_key = $1 AND j.state = ANY($2) AND j.tenant = $4
                   AND ($3::float8 IS NULL OR j.created_at > now() - $3 * interval '1 ms')
                 ORDER BY j.created_at DESC LIMIT 1"
            ),
            &[&unique.key, &unique.states, &unique.period_ms, &tenant],
        )
        .await
        .map_err(EngineError::sql)?;
    if let Some(row) = existing {
        let existing = Job::from_row(&row);
        let existing_id = existing.id.clone();
        match unique.on_conflict {
            OnConflict::Reject => {
                return Err(
                    EngineError::duplicate(format!("a job with the same unique key exists: {existing_id}"))
                        .with_details(json!({ "existing_job_id": existing_id })),
                );
            }
            OnConflict::Ignore => {
                return Ok(Inserted {
                    jobs: vec![existing],
                    answer: Answer::Job,
                    duplicate: true,
                    pressure: None,
                });
            }
            OnConflict::Replace => {
                // The duplicate was read unlocked: if it finished meanwhile (an ack that
                // committed in between was answered 200), it stays as it finished. The new
                // job goes in either way.
                tx.execute(
                    "UPDATE ojs.jobs SET state = 'cancelled', cancelled_at = now(), unique_key = NULL
                     WHERE id = $1 AND state NOT IN ('completed', 'discarded', 'cancelled')",
                    &[&existing_id],
                )
                .await
                .map_err(EngineError::sql)?;
            }
        }
    }
    insert_waiting(tx, std::slice::from_ref(job), tenant, Answer::Job).await
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
    for (job, stored) in jobs.iter().zip(inserted.jobs.iter_mut()) {
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
                concat!(
                    "SELECT ",
                    job_columns!(),
                    ", j.envelope FROM ojs.jobs j WHERE j.id = $1"
                ),
                &[&job.id],
            )
            .await
            .map_err(EngineError::sql)?;
        let now = Job::from_row(&row);
        match answer {
            Answer::Job => *stored = now,
            Answer::Summary => stored.state = now.state,
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
    let c = Columns::of(jobs);
    let statement = client.prepare_cached(INSERT_JOBS).await.map_err(EngineError::sql)?;
    let rows = client
        .query(
            &statement,
            &[
                &c.ids,
                &c.queues,
                &c.types,
                &c.priorities,
                &c.max_attempts,
                &c.envelopes,
                &c.scheduled,
                &c.delays,
                &c.expires,
                &c.ttls,
                &c.visibility,
                &c.unique,
                &placement.workflow_id,
                &placement.steps,
                &placement.callbacks,
                &placement.held,
                &c.rate_keys,
                &c.rate_policies,
                &summary,
                &placement.tenant.unwrap_or(DEFAULT_TENANT),
            ],
        )
        .await
        .map_err(|err| match err.code() {
            Some(&SqlState::UNIQUE_VIOLATION) => EngineError::duplicate("a job with this id already exists"),
            _ => EngineError::sql(err),
        })?;
    inserted_of(&rows, jobs, answer)
}

/// The jobs as the insert's parallel arrays, one element per job.
struct Columns<'a> {
    ids: Vec<String>,
    queues: Vec<String>,
    types: Vec<String>,
    priorities: Vec<i32>,
    max_attempts: Vec<i32>,
    envelopes: Vec<&'a Value>,
    scheduled: Vec<Option<&'a str>>,
    delays: Vec<Option<f64>>,
    expires: Vec<Option<&'a str>>,
    ttls: Vec<Option<f64>>,
    visibility: Vec<i32>,
    unique: Vec<Option<&'a str>>,
    rate_keys: Vec<Option<&'a str>>,
    rate_policies: Vec<Option<Value>>,
}

impl<'a> Columns<'a> {
    fn of(jobs: &'a [NewJob]) -> Columns<'a> {
        let column = |f: fn(&NewJob) -> String| jobs.iter().map(f).collect::<Vec<_>>();
        // Empty unless some job is rate-limited: unnest pads a shorter array with NULLs.
        let rate_limited = jobs.iter().any(|job| job.rate_limit.is_some());
        let (rate_keys, rate_policies) = jobs
            .iter()
            .filter(|_| rate_limited)
            .map(|job| match &job.rate_limit {
                Some(limit) => (Some(limit.key.as_str()), Some(limit.policy())),
                None => (None, None),
            })
            .unzip();
        Columns {
            ids: column(|job| job.id.clone()),
            queues: column(|job| job.queue.clone()),
            types: column(|job| job.job_type.clone()),
            priorities: jobs.iter().map(|job| job.priority).collect(),
            max_attempts: jobs.iter().map(|job| job.max_attempts).collect(),
            envelopes: jobs.iter().map(|job| &job.envelope).collect(),
            scheduled: jobs.iter().map(|job| job.scheduled_at.as_deref()).collect(),
            delays: jobs.iter().map(|job| job.delay_ms).collect(),
            expires: jobs.iter().map(|job| job.expires_at.as_deref()).collect(),
            ttls: jobs.iter().map(|job| job.ttl_ms).collect(),
            visibility: jobs.iter().map(|job| job.visibility_ms).collect(),
            unique: jobs
                .iter()
                .map(|job| job.unique.as_ref().map(|u| u.key.as_str()))
                .collect(),
            rate_keys,
            rate_policies,
        }
    }
}

/// The insert's answer: the job rows, then a row per bounded queue with its depth (an error
/// when the jobs would take it past its bound; a warning's pressure when near).
fn inserted_of(rows: &[tokio_postgres::Row], jobs: &[NewJob], answer: Answer) -> Result<Inserted, EngineError> {
    let summary = answer == Answer::Summary;
    let mut inserted = Inserted {
        jobs: Vec::with_capacity(jobs.len()),
        answer,
        duplicate: false,
        pressure: None,
    };
    // Job rows come first, in the order of `jobs` (seq is taken in insert order).
    let mut sent = jobs.iter();
    for row in rows {
        if row.get::<_, Option<i64>>("seq").is_some() {
            let mut stored = Job::from_row(row);
            if summary {
                stored.envelope = stated(sent.next().expect("a row per job"));
            }
            inserted.jobs.push(stored);
        } else {
            let queue: String = row.get("bounded_queue");
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

/// What a batch's answer for a job (a summary) keeps of what the client sent: what it stated
/// about the job itself.
fn stated(job: &NewJob) -> Map<String, Value> {
    ["specversion", "version", "meta"]
        .into_iter()
        .filter_map(|field| {
            Some((
                field.to_string(),
                job.envelope.get(field).filter(|v| !v.is_null())?.clone(),
            ))
        })
        .collect()
}

pub(super) fn refusal(id: &str, state: &str, verb: &str) -> EngineError {
    EngineError::conflict(format!(
        "job {id} is {state} (or claimed by another worker): it cannot be {verb} now"
    ))
}
