//! The job queue engine: every SQL statement about jobs lives here. Jobs are rows of `ojs.jobs`;
//! a claim is an UPDATE of rows picked with `FOR UPDATE SKIP LOCKED` in index order, and the
//! attempt number a claim sets is the fence that turns a stale worker's ack or nack away.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use serde_json::{Value, json};
use tokio_postgres::error::SqlState;

use super::cron::Schedule;
use super::envelope::{self, NewJob, OnConflict, RetryPolicy};
use super::tenant::DEFAULT_TENANT;
use super::workflow::{Kind, Member, NewWorkflow};
use super::{OjsError, QUEUE_FULL};

/// One row of the event log, with what stream filters look at.
#[derive(Debug, Clone)]
pub struct LoggedEvent {
    pub seq: i64,
    pub kind: String,
    pub queue: Option<String>,
    pub job_id: Option<String>,
    /// The event, serialized (one line).
    pub json: String,
}

#[derive(Clone)]
pub struct Queue {
    pool: Pool,
    /// When this gateway last ran the promotion (ms since `started`), so that busy fetchers run
    /// it a few times a second rather than on every fetch.
    last_promote_ms: Arc<AtomicU64>,
    started: Instant,
}

/// Who claims: the queues in preference order, how many jobs, and for how long.
pub struct FetchRequest {
    pub queues: Vec<String>,
    pub count: i64,
    /// Only this tenant's jobs are handed out.
    pub tenant: String,
    pub worker_id: Option<String>,
    pub visibility_ms: Option<i32>,
}

/// A worker's heartbeat: the claims it extends and, when it names itself, its state.
pub struct Beat<'a> {
    pub worker_id: Option<&'a str>,
    pub job_ids: &'a [String],
    /// Only this tenant's claims are extended.
    pub tenant: &'a str,
    pub visibility_ms: Option<i32>,
    /// running, quiet, drain or terminate; unchanged when absent.
    pub state: Option<&'a str>,
    pub active_jobs: Option<i32>,
}

pub struct BeatReply {
    pub extended: Vec<String>,
    pub state: String,
    /// What an operator asked the worker to do: quiet or terminate.
    pub directive: Option<String>,
    /// The conformance suite's test hook: a directive named by an extended job's
    /// `options.metadata.test_directive` (honoured only in conformance mode).
    pub test_directive: Option<String>,
}

/// Which claim an ack or nack speaks for. Both fields are optional; given ones must match the
/// job's current claim.
pub struct Claim {
    pub job_id: String,
    pub attempt: Option<i32>,
    pub worker_id: Option<String>,
    /// The job must be this tenant's: another tenant's is not found.
    pub tenant: String,
}

pub struct Failure {
    pub error: Value,
    /// Put the job straight back (a worker releasing it), without spending the attempt's retry.
    pub requeue: bool,
}

/// Any fixed number works; it only has to be the same for every gateway of one database.
const CRON_LOCK: i64 = 0x7067_7673_335f_6372; // "pgvs3_cr"

/// Every state a job can be in.
/// Most tenants `GET /admin/tenants` lists in one answer.
const MAX_TENANTS_LISTED: i64 = 1000;

pub const STATES: [&str; 8] = [
    "scheduled",
    "available",
    "pending",
    "active",
    "completed",
    "retryable",
    "cancelled",
    "discarded",
];

/// Jobs become due or lapse while nobody fetches; at most this many move per promotion.
const PROMOTE_BATCH: i64 = 1000;
/// How often a busy gateway promotes; a due job waits at most this long beyond its time.
const PROMOTE_EVERY: Duration = Duration::from_millis(50);

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

/// Moves due scheduled/retryable jobs to available, lapsed claims back to available (discarded on
/// their last attempt), and expired jobs to discarded. Cheap when there is nothing to move: three partial-index range scans.
const PROMOTE: &str = "
WITH due AS (
    UPDATE ojs.jobs SET state = 'available'
    WHERE id IN (SELECT id FROM ojs.jobs WHERE state IN ('scheduled', 'retryable') AND run_at <= now()
                 LIMIT $1 FOR UPDATE SKIP LOCKED)
), lapse AS (
    SELECT id, attempt >= max_attempts AS exhausted,
           jsonb_build_object('code', 'visibility_timeout', 'type', 'visibility_timeout', 'attempt', attempt,
                              'message', 'the claim lapsed before an ack, nack or heartbeat',
                              'occurred_at', ojs.ts(now())) AS error
    FROM ojs.jobs WHERE state = 'active' AND visible_until < now()
    LIMIT $1 FOR UPDATE SKIP LOCKED
), lapsed AS (
    -- A lapsed claim spent its attempt: on the last one the job is discarded (or dead-lettered)
    -- as a nack would, rather than offered again forever.
    UPDATE ojs.jobs j SET visible_until = NULL, error = lapse.error, errors = j.errors || jsonb_build_array(lapse.error),
        state = CASE WHEN lapse.exhausted THEN 'discarded' ELSE 'available' END,
        completed_at = CASE WHEN lapse.exhausted THEN now() END,
        dead_letter = lapse.exhausted AND coalesce(j.envelope #>> '{options,retry,on_exhaustion}' = 'dead_letter', false)
    FROM lapse WHERE j.id = lapse.id
    RETURNING j.id, j.queue, j.type, j.attempt, j.envelope, lapse.exhausted, lapse.error
), lapse_events AS (
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    SELECT gen_random_uuid()::text, 'job.discarded', queue, id,
           jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue, 'attempt', attempt,
                              'total_attempts', attempt, 'error', error,
                              'last_error', error - 'occurred_at' - 'attempt') || ojs.trace_of(envelope)
    FROM lapsed WHERE exhausted
), expired AS (
    UPDATE ojs.jobs SET state = 'discarded',
        error = jsonb_build_object('code', 'expired', 'type', 'expired', 'message', 'expires_at passed before the job ran')
    WHERE id IN (SELECT id FROM ojs.jobs WHERE expires_at <= now() AND state IN ('available', 'scheduled')
                 LIMIT $1 FOR UPDATE SKIP LOCKED)
    RETURNING id, queue, type, created_at, expires_at, envelope
), expired_events AS (
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    SELECT gen_random_uuid()::text, 'job.expired', queue, id,
           jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue,
                              'created_at', ojs.ts(created_at), 'expired_at', ojs.ts(now()),
                              'ttl_ms', round(extract(epoch FROM expires_at - created_at) * 1000)) || ojs.trace_of(envelope)
    FROM expired
)
SELECT 1";

/// Claims up to $2 jobs of tenant $5: queues in the order given, then priority, then FIFO, each
/// queue read along the `jobs_claim` index (whose (queue, tenant) prefix is one range).
/// Rate-limited jobs whose key has no room are passed over; those picked then take their starts
/// from the key's row atomically (`admitted`), and any the key cannot take now stay available.
const CLAIM: &str = "
WITH claimed AS (
    SELECT c.id, q.ord, c.priority, c.seq, c.rate_key
    FROM unnest($1::text[]) WITH ORDINALITY AS q(name, ord)
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.seq, j.rate_key FROM ojs.jobs j
        WHERE j.state = 'available' AND j.queue = q.name AND j.tenant = $5
          AND (j.rate_key IS NULL
               OR EXISTS (SELECT 1 FROM ojs.rate_limits r WHERE r.key = j.rate_key AND ojs.rate_room(r) > 0))
          AND (j.workflow_id IS NULL
               OR NOT EXISTS (SELECT 1 FROM ojs.workflows w WHERE w.id = j.workflow_id AND w.state = 'cancelled'))
        ORDER BY j.priority DESC, j.seq
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ) c
    WHERE NOT EXISTS (SELECT 1 FROM ojs.queues p WHERE p.name = q.name AND p.paused)
      AND NOT EXISTS (SELECT 1 FROM ojs.workers w WHERE w.id = $3 AND (w.state <> 'running' OR w.directive IS NOT NULL))
    ORDER BY q.ord, c.priority DESC, c.seq
    LIMIT $2
), wanted AS (
    SELECT rate_key, count(*)::int AS n FROM claimed WHERE rate_key IS NOT NULL GROUP BY rate_key
), locked AS (
    -- Keys are locked in key order, so two claims that span the same keys cannot deadlock.
    SELECT r.key FROM ojs.rate_limits r WHERE r.key IN (SELECT rate_key FROM wanted) ORDER BY r.key FOR UPDATE
), admitted AS (
    UPDATE ojs.rate_limits r
    SET granted = least(w.n, ojs.rate_room(r)),
        active = r.active + least(w.n, ojs.rate_room(r)),
        window_count = CASE WHEN now() >= r.window_start + r.rate_period_ms * interval '1 ms' THEN 0
                            ELSE r.window_count END + least(w.n, ojs.rate_room(r)),
        window_start = CASE WHEN now() >= r.window_start + r.rate_period_ms * interval '1 ms'
                                 AND least(w.n, ojs.rate_room(r)) > 0 THEN now() ELSE r.window_start END,
        next_start = CASE WHEN r.throttle_ms IS NOT NULL AND least(w.n, ojs.rate_room(r)) > 0
                          THEN now() + r.throttle_ms * interval '1 ms' ELSE r.next_start END
    FROM wanted w JOIN locked l ON l.key = w.rate_key
    WHERE r.key = w.rate_key
    RETURNING r.key, r.granted
), started AS (
    SELECT c.id, c.ord FROM (
        SELECT claimed.*, row_number() OVER (PARTITION BY rate_key ORDER BY ord, priority DESC, seq) AS turn
        FROM claimed
    ) c
    LEFT JOIN admitted a ON a.key = c.rate_key
    WHERE c.rate_key IS NULL OR c.turn <= a.granted
), running AS (
    UPDATE ojs.jobs j
    SET state = 'active', attempt = j.attempt + 1, started_at = now(), worker_id = $3,
        visible_until = now() + coalesce($4, j.visibility_ms) * interval '1 ms'
    FROM started
    WHERE j.id = started.id
    RETURNING started.ord, j.priority, j.seq, j.id, j.queue, j.type, j.attempt, j.envelope, ojs.job_json(j) AS body
), event AS (
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    SELECT gen_random_uuid()::text, 'job.started', queue, id,
           jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue, 'worker_id', $3::text,
                              'attempt', attempt) || ojs.trace_of(envelope)
    FROM running
)
SELECT ord, priority, seq, body FROM running";

const ACK: &str = "
WITH done AS (
    UPDATE ojs.jobs j
    SET state = 'completed', completed_at = now(), result = $2, error = NULL, visible_until = NULL
    WHERE j.id = $1 AND j.state = 'active' AND j.tenant = $5
      AND ($3::int IS NULL OR j.attempt = $3) AND ($4::text IS NULL OR j.worker_id IS NULL OR j.worker_id = $4)
    RETURNING j.id, j.queue, j.type, j.attempt, j.started_at, j.workflow_id, j.envelope, ojs.job_json(j) AS body
), event AS (
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    SELECT gen_random_uuid()::text, 'job.completed', queue, id,
           jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue, 'attempt', attempt,
                              'duration_ms', round(extract(epoch FROM now() - started_at) * 1000),
                              'result', $2::jsonb) || ojs.trace_of(envelope)
    FROM done
)
SELECT body, workflow_id FROM done";

/// The failing half of a nack: the job's claim, locked, for the retry decision.
const NACK_LOCK: &str = "
SELECT state, attempt, worker_id, envelope #> '{options,retry}' AS retry, max_attempts FROM ojs.jobs
WHERE id = $1 AND tenant = $2 FOR UPDATE";

/// The other half: the decided state, the error kept in the history, and the events.
const NACK: &str = "
WITH failed AS (
    UPDATE ojs.jobs j
    SET state = $2, error = $3, errors = errors || jsonb_build_array($3::jsonb), visible_until = NULL,
        retry_delay_ms = coalesce($4, retry_delay_ms),
        run_at = CASE WHEN $4::bigint IS NULL THEN run_at ELSE now() + $4 * interval '1 ms' END,
        completed_at = CASE WHEN $2 = 'discarded' THEN now() END,
        dead_letter = $5
    WHERE id = $1
    RETURNING j.id, j.queue, j.type, j.max_attempts, j.run_at, j.started_at, j.envelope, ojs.job_json(j) AS body
), said AS (
    -- The error as events carry it: the spec's code, message and retryable, and what else the worker sent.
    SELECT $3::jsonb - 'occurred_at' - 'attempt'
           || jsonb_build_object('code', coalesce($3::jsonb ->> 'code', $3::jsonb ->> 'type'), 'retryable', $8::bool)
           AS error
), event AS (
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    SELECT gen_random_uuid()::text, e.kind, f.queue, f.id, e.data || ojs.trace_of(f.envelope)
    FROM failed f CROSS JOIN said CROSS JOIN LATERAL (VALUES
        ('job.failed', jsonb_build_object('job_id', f.id, 'job_type', f.type, 'queue', f.queue, 'attempt', $7::int,
                                          'error', said.error,
                                          'duration_ms', round(extract(epoch FROM now() - f.started_at) * 1000))),
        ($6::text, jsonb_build_object('job_id', f.id, 'job_type', f.type, 'queue', f.queue, 'attempt', $7::int,
                                      'error', said.error)
                   || CASE $6::text
                      WHEN 'job.retrying' THEN jsonb_build_object('max_attempts', f.max_attempts,
                                                                  'next_retry_at', ojs.ts(f.run_at))
                      WHEN 'job.discarded' THEN jsonb_build_object('total_attempts', $7::int,
                                                                   'last_error', said.error)
                      ELSE '{}' END)
    ) AS e(kind, data)
)
SELECT body FROM failed";

const EXTEND_CLAIMS: &str = "
WITH extended AS (
    UPDATE ojs.jobs SET visible_until = now() + coalesce($3, visibility_ms) * interval '1 ms'
    WHERE id = ANY($1) AND state = 'active' AND tenant = $4
      AND ($2::text IS NULL OR worker_id IS NULL OR worker_id = $2)
    RETURNING id, queue, type, attempt, worker_id, visible_until, envelope
), event AS (
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    SELECT gen_random_uuid()::text, 'job.heartbeat', queue, id,
           jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue,
                              'worker_id', coalesce(worker_id, $2), 'attempt', attempt,
                              'visible_until', ojs.ts(visible_until)) || ojs.trace_of(envelope)
    FROM extended
)
SELECT id, envelope #>> '{options,metadata,test_directive}' AS test_directive FROM extended";

/// An event as the polled and streamed event APIs show it (CloudEvents-like envelope).
const EVENT_JSON: &str = "jsonb_build_object('id', id, 'seq', seq, 'type', type, 'specversion', '1.0',
    'source', 'ojs://pgvs3/gateway', 'time', ojs.ts(time),
    'subject', coalesce(job_id, data ->> 'workflow_id', data ->> 'cron_name', queue, data ->> 'worker_id'), 'data', data)";

/// Records a worker's heartbeat and logs the worker events of ojs-events §3.4 with it:
/// `worker.started` at its first heartbeat, `worker.quiet` when it reports quiet (or drain),
/// `worker.stopped` when it reports terminate, and `worker.heartbeat` every time. (The CTEs
/// share one snapshot, so `previous` is the row before this heartbeat.)
const RECORD_WORKER: &str = "
WITH previous AS (
    SELECT state FROM ojs.workers WHERE id = $1
), recorded AS (
    INSERT INTO ojs.workers AS w (id, state, active_jobs) VALUES ($1, coalesce($2, 'running'), $3)
    ON CONFLICT (id) DO UPDATE SET state = coalesce($2, w.state), active_jobs = coalesce($3, w.active_jobs), last_beat = now()
    RETURNING w.state, w.directive, w.active_jobs
), event AS (
    INSERT INTO ojs.events (id, type, data)
    SELECT gen_random_uuid()::text, e.type,
           jsonb_strip_nulls(jsonb_build_object('worker_id', $1::text, 'active_jobs', r.active_jobs, 'state', r.state))
           || e.extra
      FROM recorded r, (SELECT (SELECT state FROM previous) AS state) p,
           LATERAL (VALUES
               ('worker.started', p.state IS NULL, '{}'::jsonb),
               ('worker.quiet', r.state IN ('quiet', 'drain') AND p.state IS DISTINCT FROM r.state, '{}'),
               ('worker.stopped', r.state = 'terminate' AND p.state IS DISTINCT FROM 'terminate',
                jsonb_build_object('reason', 'terminate')),
               ('worker.heartbeat', true, '{}')) AS e(type, wanted, extra)
     WHERE e.wanted
)
SELECT state, directive FROM recorded";

impl Queue {
    pub fn new(pool: Pool) -> Queue {
        Queue {
            pool,
            last_promote_ms: Arc::new(AtomicU64::new(0)),
            started: Instant::now(),
        }
    }

    /// Whether this fetch should also promote: true at most once per [`PROMOTE_EVERY`].
    fn promotion_due(&self) -> bool {
        let now = self.started.elapsed().as_millis() as u64 + PROMOTE_EVERY.as_millis() as u64;
        let last = self.last_promote_ms.load(Ordering::Relaxed);
        // Another fetch may have stored a later `now` since this one read the clock.
        now.saturating_sub(last) >= PROMOTE_EVERY.as_millis() as u64
            && self
                .last_promote_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    pub(super) async fn client(&self) -> Result<deadpool_postgres::Client, OjsError> {
        self.pool.get().await.map_err(OjsError::backend)
    }

    /// Inserts jobs all-or-nothing; returns them as stored (or summed up), in order. Jobs with
    /// unique options go through [`Queue::enqueue_unique`]. A queue at its depth bound refuses
    /// the lot.
    pub async fn enqueue(&self, jobs: &[NewJob], tenant: &str, answer: Answer) -> Result<Inserted, OjsError> {
        if let [job] = jobs
            && job.unique.is_some()
        {
            return self.enqueue_unique(job, tenant).await;
        }
        let mut client = self.client().await?;
        if jobs.iter().all(|job| job.depends_on.is_empty()) {
            return insert_placed(&client, jobs, &Placement::of(tenant), answer).await;
        }
        let tx = client.transaction().await.map_err(OjsError::sql)?;
        let inserted = insert_waiting(&tx, jobs, tenant, answer).await?;
        tx.commit().await.map_err(OjsError::sql)?;
        Ok(inserted)
    }

    /// Duplicates are looked for among the tenant's own jobs only.
    async fn enqueue_unique(&self, job: &NewJob, tenant: &str) -> Result<Inserted, OjsError> {
        let unique = job.unique.as_ref().expect("unique options");
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(OjsError::sql)?;
        // One enqueuer per key at a time, so two duplicates cannot both see "no duplicate".
        tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&unique.key])
            .await
            .map_err(OjsError::sql)?;
        let existing = tx
            .query_opt(
                "SELECT j.id, ojs.job_json(j) AS job FROM ojs.jobs j
                 WHERE j.unique_key = $1 AND j.state = ANY($2) AND j.tenant = $4
                   AND ($3::float8 IS NULL OR j.created_at > now() - $3 * interval '1 ms')
                 ORDER BY j.created_at DESC LIMIT 1",
                &[&unique.key, &unique.states, &unique.period_ms, &tenant],
            )
            .await
            .map_err(OjsError::sql)?;
        if let Some(row) = existing {
            let existing_id: String = row.get("id");
            match unique.on_conflict {
                OnConflict::Reject => {
                    return Err(
                        OjsError::duplicate(format!("a job with the same unique key exists: {existing_id}"))
                            .with_details(json!({ "existing_job_id": existing_id })),
                    );
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
                    .map_err(OjsError::sql)?;
                }
            }
        }
        let inserted = insert_waiting(&tx, std::slice::from_ref(job), tenant, Answer::Job).await?;
        tx.commit().await.map_err(OjsError::sql)?;
        Ok(inserted)
    }

    /// A job of `tenant`; another tenant's is not found.
    pub async fn get(&self, id: &str, tenant: &str) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached("SELECT ojs.job_json(j) AS job FROM ojs.jobs j WHERE j.id = $1 AND j.tenant = $2")
            .await
            .map_err(OjsError::sql)?;
        let row = client
            .query_opt(&statement, &[&id, &tenant])
            .await
            .map_err(OjsError::sql)?;
        row.map(|row| row.get("job")).ok_or_else(|| OjsError::job_not_found(id))
    }

    /// When promotion is due, it goes out with the claim: one round trip, two statements. The
    /// hot statements are prepared once per connection (a plain query would prepare it again
    /// each time: one more round trip and a fresh plan).
    pub async fn fetch(&self, request: &FetchRequest) -> Result<Vec<Value>, OjsError> {
        let client = self.client().await?;
        let claim_params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [
            &request.queues,
            &request.count,
            &request.worker_id,
            &request.visibility_ms,
            &request.tenant,
        ];
        let claim_statement = client.prepare_cached(CLAIM).await.map_err(OjsError::sql)?;
        let claim = client.query(&claim_statement, &claim_params);
        let claimed = if self.promotion_due() {
            let promote_statement = client.prepare_cached(PROMOTE).await.map_err(OjsError::sql)?;
            let promote_params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&PROMOTE_BATCH];
            let (promote, claim) = tokio::join!(client.execute(&promote_statement, &promote_params), claim);
            promote.map_err(OjsError::sql)?;
            claim
        } else {
            claim.await
        };
        let mut rows = claimed.map_err(OjsError::sql)?;
        // RETURNING has no order of its own.
        rows.sort_by_key(|row| {
            (
                row.get::<_, i64>("ord"),
                -row.get::<_, i32>("priority"),
                row.get::<_, i64>("seq"),
            )
        });
        Ok(rows.iter().map(|row| row.get("body")).collect())
    }

    pub async fn ack(&self, claim: &Claim, result: Option<Value>) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(ACK).await.map_err(OjsError::sql)?;
        let row = client
            .query_opt(
                &statement,
                &[&claim.job_id, &result, &claim.attempt, &claim.worker_id, &claim.tenant],
            )
            .await
            .map_err(OjsError::sql)?;
        match row {
            Some(row) => Ok(row.get("body")),
            None => Err(self
                .explain_refusal(&client, &claim.job_id, &claim.tenant, "acknowledged")
                .await),
        }
    }

    /// A failed attempt: retry after the policy's backoff, or discard (to the dead letter when
    /// the policy says so).
    pub async fn nack(&self, claim: &Claim, failure: Failure) -> Result<Value, OjsError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(OjsError::sql)?;
        let statement = tx.prepare_cached(NACK_LOCK).await.map_err(OjsError::sql)?;
        let row = tx
            .query_opt(&statement, &[&claim.job_id, &claim.tenant])
            .await
            .map_err(OjsError::sql)?;
        let Some(row) = row else {
            return Err(OjsError::job_not_found(&claim.job_id));
        };
        let state: String = row.get("state");
        let attempt: i32 = row.get("attempt");
        let worker_id: Option<String> = row.get("worker_id");
        let fenced_out = claim.attempt.is_some_and(|a| a != attempt)
            || matches!((&claim.worker_id, &worker_id), (Some(mine), Some(theirs)) if mine != theirs);
        if state != "active" || fenced_out {
            return Err(refusal(&claim.job_id, &state, "failed"));
        }
        let policy = RetryPolicy::from_options(row.get::<_, Option<Value>>("retry").as_ref())
            .unwrap_or_else(|_| RetryPolicy::from_options(None).expect("the default policy is valid"));
        let max_attempts: i32 = row.get("max_attempts");
        let error = error_record(&failure.error, attempt);
        let names: Vec<&str> = ["type", "code"]
            .iter()
            .filter_map(|field| error.get(*field).and_then(Value::as_str))
            .chain(failure.error.pointer("/details/error_class").and_then(Value::as_str))
            .collect();
        let retryable =
            failure.error.get("retryable").and_then(Value::as_bool).unwrap_or(true) && !policy.is_non_retryable(&names);
        let (next_state, delay_ms, dead_letter, event) = if failure.requeue {
            ("available", None, false, "job.requeued")
        } else if retryable && attempt < max_attempts {
            (
                "retryable",
                Some(policy.delay(attempt).as_millis() as i64),
                false,
                "job.retrying",
            )
        } else {
            ("discarded", None, policy.dead_letter, "job.discarded")
        };
        let statement = tx.prepare_cached(NACK).await.map_err(OjsError::sql)?;
        let row = tx
            .query_one(
                &statement,
                &[
                    &claim.job_id,
                    &next_state,
                    &error,
                    &delay_ms,
                    &dead_letter,
                    &event,
                    &attempt,
                    &retryable,
                ],
            )
            .await
            .map_err(OjsError::sql)?;
        tx.commit().await.map_err(OjsError::sql)?;
        let mut body: Value = row.get("body");
        if let Some(delay) = delay_ms {
            body["retry_delay_ms"] = json!(delay);
        }
        Ok(body)
    }

    pub async fn cancel(&self, id: &str, tenant: &str) -> Result<Value, OjsError> {
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
            .map_err(OjsError::sql)?;
        match row {
            Some(row) => Ok(row.get("job")),
            None => Err(self.explain_refusal(&client, id, tenant, "cancelled").await),
        }
    }

    /// Extends the claims a worker still holds and records the worker's state (both statements
    /// in one round trip). Returns the ids it extended and the worker's state and directive.
    pub async fn heartbeat(&self, beat: &Beat<'_>) -> Result<BeatReply, OjsError> {
        let client = self.client().await?;
        let extend = async {
            if beat.job_ids.is_empty() {
                return Ok(Vec::new());
            }
            let statement = client.prepare_cached(EXTEND_CLAIMS).await?;
            client
                .query(
                    &statement,
                    &[&beat.job_ids, &beat.worker_id, &beat.visibility_ms, &beat.tenant],
                )
                .await
        };
        let record = async {
            let Some(worker_id) = beat.worker_id else {
                return Ok(None);
            };
            let statement = client.prepare_cached(RECORD_WORKER).await?;
            client
                .query_one(&statement, &[&worker_id, &beat.state, &beat.active_jobs])
                .await
                .map(Some)
        };
        let (extended, worker) = tokio::join!(extend, record);
        let worker = worker.map_err(OjsError::sql)?;
        let extended = extended.map_err(OjsError::sql)?;
        Ok(BeatReply {
            test_directive: extended.iter().find_map(|row| row.get("test_directive")),
            extended: extended.iter().map(|row| row.get("id")).collect(),
            state: worker.as_ref().map_or_else(|| "running".into(), |row| row.get("state")),
            directive: worker.and_then(|row| row.get("directive")),
        })
    }

    /// Tells a worker, at its next heartbeat, to quiet or terminate (`None` clears the directive);
    /// either way it is given no new jobs from now on.
    pub async fn direct_worker(&self, worker_id: &str, directive: Option<&str>) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "INSERT INTO ojs.workers AS w (id, state, directive) VALUES ($1, 'running', $2)
                 ON CONFLICT (id) DO UPDATE SET directive = $2
                 RETURNING ojs.worker_json(w) AS worker",
                &[&worker_id, &directive],
            )
            .await
            .map_err(OjsError::sql)?;
        Ok(row.get("worker"))
    }

    pub async fn worker(&self, worker_id: &str) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT ojs.worker_json(w) AS worker FROM ojs.workers w WHERE w.id = $1",
                &[&worker_id],
            )
            .await
            .map_err(OjsError::sql)?;
        row.map(|row| row.get("worker"))
            .ok_or_else(|| OjsError::not_found(format!("no worker {worker_id:?} has sent a heartbeat")))
    }

    pub async fn set_paused(&self, queue: &str, paused: bool) -> Result<(), OjsError> {
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
            .map_err(OjsError::sql)?;
        Ok(())
    }

    /// Replaces a queue's settings named in `settings` (today: `backpressure`); returns them all.
    pub async fn configure_queue(&self, queue: &str, settings: &Value) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "INSERT INTO ojs.queues (name, config) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET config = ojs.queues.config || excluded.config
                 RETURNING config",
                &[&queue, settings],
            )
            .await
            .map_err(OjsError::sql)?;
        Ok(row.get("config"))
    }

    pub async fn queue_config(&self, queue: &str) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT config FROM ojs.queues WHERE name = $1", &[&queue])
            .await
            .map_err(OjsError::sql)?;
        Ok(row.map_or_else(|| json!({}), |row| row.get("config")))
    }

    /// A rate limit key's limits and what they allow now (ext-rate-limiting inspection).
    pub async fn rate_limit(&self, key: &str) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT ojs.rate_limit_json(r) AS rate_limit FROM ojs.rate_limits r WHERE r.key = $1",
                &[&key],
            )
            .await
            .map_err(OjsError::sql)?;
        row.map(|row| row.get("rate_limit"))
            .ok_or_else(|| OjsError::not_found(format!("no job has named rate limit key {key:?}")))
    }

    pub async fn rate_limits(&self) -> Result<Vec<Value>, OjsError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT ojs.rate_limit_json(r) AS rate_limit FROM ojs.rate_limits r ORDER BY key LIMIT 1000",
                &[],
            )
            .await
            .map_err(OjsError::sql)?;
        Ok(rows.iter().map(|row| row.get("rate_limit")).collect())
    }

    pub async fn queue_stats(&self, queue: &str) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT coalesce((SELECT paused FROM ojs.queues WHERE name = $1), false) AS paused,
                        coalesce((SELECT jsonb_object_agg(state, n) FROM
                            (SELECT state, count(*) AS n FROM ojs.jobs WHERE queue = $1 GROUP BY state) s), '{}')
                          AS counts,
                        (SELECT (config #>> '{backpressure,max_depth}')::bigint FROM ojs.queues WHERE name = $1)
                          AS max_depth",
                &[&queue],
            )
            .await
            .map_err(OjsError::sql)?;
        let paused: bool = row.get("paused");
        let counts: Value = row.get("counts");
        let count = |state: &str| counts.get(state).and_then(Value::as_i64).unwrap_or(0);
        let depth = count("available") + count("scheduled") + count("retryable");
        let bound = row.get::<_, Option<i64>>("max_depth").filter(|bound| *bound > 0);
        let mut summary = json!({
            "name": queue,
            "queue": queue,
            "max_depth": bound,
            "paused": paused,
            "status": if paused { "paused" } else { "active" },
            "depth": depth,
        });
        for state in STATES {
            summary[state] = json!(count(state));
        }
        Ok(json!({ "queue": summary.clone(), "name": queue, "stats": summary }))
    }

    pub async fn list_queues(&self) -> Result<Vec<Value>, OjsError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT n.name, q.paused,
                        jsonb_build_object('available', count(*) FILTER (WHERE j.state = 'available'),
                                           'active', count(*) FILTER (WHERE j.state = 'active'),
                                           'scheduled', count(*) FILTER (WHERE j.state = 'scheduled'),
                                           'retryable', count(*) FILTER (WHERE j.state = 'retryable')) AS counts
                 FROM (SELECT DISTINCT queue AS name FROM ojs.jobs UNION SELECT name FROM ojs.queues) n
                 LEFT JOIN ojs.queues q USING (name)
                 LEFT JOIN ojs.jobs j ON j.queue = n.name AND j.state IN ('available', 'active', 'scheduled', 'retryable')
                 GROUP BY n.name, q.paused ORDER BY n.name",
                &[],
            )
            .await
            .map_err(OjsError::sql)?;
        Ok(rows
            .iter()
            .map(|row| {
                let paused = row.get::<_, Option<bool>>("paused").unwrap_or(false);
                json!({ "name": row.get::<_, String>("name"), "paused": paused, "status": if paused { "paused" } else { "active" },
                        "counts": row.get::<_, Value>("counts") })
            })
            .collect())
    }

    pub async fn dead_letter(&self, queue: Option<&str>, limit: i64, tenant: &str) -> Result<Vec<Value>, OjsError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT ojs.job_json(j) AS job FROM ojs.jobs j
                 WHERE j.dead_letter AND j.tenant = $3 AND ($1::text IS NULL OR j.queue = $1)
                 ORDER BY j.completed_at DESC LIMIT $2",
                &[&queue, &limit, &tenant],
            )
            .await
            .map_err(OjsError::sql)?;
        Ok(rows.iter().map(|row| row.get("job")).collect())
    }

    pub async fn dead_letter_count(&self) -> Result<i64, OjsError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT count(*) AS jobs FROM ojs.jobs WHERE dead_letter", &[])
            .await
            .map_err(OjsError::sql)?;
        Ok(row.get("jobs"))
    }

    /// A dead-lettered job goes back to available with a fresh attempt count.
    pub async fn retry_dead_letter(&self, id: &str, tenant: &str) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "UPDATE ojs.jobs j SET state = 'available', dead_letter = false, attempt = 0, error = NULL,
                        completed_at = NULL, started_at = NULL, retry_delay_ms = NULL, run_at = now()
                 WHERE j.id = $1 AND j.tenant = $2 AND j.dead_letter RETURNING ojs.job_json(j) AS job",
                &[&id, &tenant],
            )
            .await
            .map_err(OjsError::sql)?;
        row.map(|row| row.get("job"))
            .ok_or_else(|| OjsError::not_found(format!("no dead-letter job {id}")))
    }

    /// Puts every discarded or cancelled job matching the filter back to available.
    pub async fn retry_in_bulk(&self, state: &str, queue: Option<&str>, tenant: &str) -> Result<u64, OjsError> {
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
            .map_err(OjsError::sql)
    }

    pub async fn delete_dead_letter(&self, id: &str, tenant: &str) -> Result<(), OjsError> {
        let client = self.client().await?;
        let deleted = client
            .execute(
                "DELETE FROM ojs.jobs WHERE id = $1 AND tenant = $2 AND dead_letter",
                &[&id, &tenant],
            )
            .await
            .map_err(OjsError::sql)?;
        if deleted == 0 {
            return Err(OjsError::not_found(format!("no dead-letter job {id}")));
        }
        Ok(())
    }

    /// Stores a workflow, its nested workflows and all their jobs in one transaction: what runs
    /// first is enqueued now (a group's or batch's jobs, a chain's first step, and so on down the
    /// nested workflows among them); later steps, callbacks and nested workflows whose turn has
    /// not come wait as `pending` for the triggers of the layout to release them.
    /// The workflow's jobs belong to `tenant` (the workflow itself is not scoped: any tenant
    /// that knows its id may read or cancel it).
    pub async fn create_workflow(&self, workflow: &NewWorkflow, tenant: &str) -> Result<Value, OjsError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(OjsError::sql)?;
        store_workflow(&tx, workflow, tenant, None, true).await?;
        let row = tx
            .query_one(
                "SELECT ojs.workflow_json(w) AS workflow FROM ojs.workflows w WHERE w.id = $1",
                &[&workflow.id],
            )
            .await
            .map_err(OjsError::sql)?;
        tx.commit().await.map_err(OjsError::sql)?;
        Ok(row.get("workflow"))
    }

    pub async fn get_workflow(&self, id: &str) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT ojs.workflow_json(w) AS workflow FROM ojs.workflows w WHERE w.id = $1",
                &[&id],
            )
            .await
            .map_err(OjsError::sql)?;
        row.map(|row| row.get("workflow")).ok_or_else(|| workflow_not_found(id))
    }

    /// Cancels a running (or, nested, still waiting) workflow: its jobs that have not started
    /// are cancelled, and so are its nested workflows with theirs; active ones may finish, but
    /// release nothing further.
    pub async fn cancel_workflow(&self, id: &str) -> Result<Value, OjsError> {
        let mut client = self.client().await?;
        // Cancelling walks down the tree while a settling nested workflow walks up it, so the
        // two can deadlock; PostgreSQL then aborts one of them, and a cancel tries again.
        let mut attempts = 0;
        loop {
            attempts += 1;
            match cancel_workflow_once(&mut client, id).await {
                Err(CancelError::Sql(err)) if err.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) && attempts < 3 => {}
                Err(CancelError::Sql(err)) => return Err(OjsError::sql(err)),
                Err(CancelError::Ojs(error)) => return Err(error),
                Ok(workflow) => return Ok(workflow),
            }
        }
    }

    /// Deletes up to `limit` jobs that finished (completed, discarded, cancelled) more than
    /// `retention` ago, workflows settled that long ago, and workers silent that long. Dead-lettered jobs
    /// stay until deleted or retried, and jobs and nested workflows of running workflows stay
    /// (later steps read their results). Returns how many jobs and workflows went.
    pub async fn reap_finished(&self, retention: Duration, limit: i64) -> Result<(u64, u64), OjsError> {
        let client = self.client().await?;
        let seconds = retention.as_secs_f64();
        let jobs = client
            .execute(
                "DELETE FROM ojs.jobs WHERE id IN (
                     SELECT j.id FROM ojs.jobs j
                     WHERE j.state IN ('completed', 'discarded', 'cancelled')
                       AND coalesce(j.completed_at, j.cancelled_at) < now() - $1 * interval '1 s'
                       AND NOT j.dead_letter
                       AND (j.workflow_id IS NULL OR NOT EXISTS (
                            SELECT 1 FROM ojs.workflows w LEFT JOIN ojs.workflows p ON p.id = w.parent_id
                            WHERE w.id = j.workflow_id AND (w.state = 'running' OR p.state = 'running')))
                     ORDER BY coalesce(j.completed_at, j.cancelled_at)
                     LIMIT $2
                     FOR UPDATE SKIP LOCKED)",
                &[&seconds, &limit],
            )
            .await
            .map_err(OjsError::sql)?;
        let workflows = client
            .execute(
                "DELETE FROM ojs.workflows WHERE id IN (
                     SELECT w.id FROM ojs.workflows w
                     WHERE w.state NOT IN ('running', 'pending') AND w.completed_at < now() - $1 * interval '1 s'
                       AND NOT EXISTS (SELECT 1 FROM ojs.workflows p WHERE p.id = w.parent_id
                                       AND p.state IN ('running', 'pending'))
                     ORDER BY w.completed_at LIMIT $2 FOR UPDATE OF w SKIP LOCKED)",
                &[&seconds, &limit],
            )
            .await
            .map_err(OjsError::sql)?;
        client
            .execute(
                "DELETE FROM ojs.workers WHERE id IN (
                     SELECT id FROM ojs.workers WHERE last_beat < now() - $1 * interval '1 s'
                     ORDER BY last_beat LIMIT $2 FOR UPDATE SKIP LOCKED)",
                &[&seconds, &limit],
            )
            .await
            .map_err(OjsError::sql)?;
        Ok((jobs, workflows))
    }

    /// Events after `after` (a sequence number), oldest first.
    pub async fn events(
        &self,
        types: &[String],
        queues: &[String],
        after: i64,
        limit: i64,
    ) -> Result<Vec<Value>, OjsError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {EVENT_JSON} AS event FROM ojs.events
                     WHERE seq > $1 AND (cardinality($2::text[]) = 0 OR type = ANY($2))
                       AND (cardinality($3::text[]) = 0 OR queue = ANY($3))
                     ORDER BY seq LIMIT $4"
                ),
                &[&after, &types, &queues, &limit],
            )
            .await
            .map_err(OjsError::sql)?;
        Ok(rows.iter().map(|row| row.get("event")).collect())
    }

    /// Events after `after` in log order, unfiltered, serialized for the event stream.
    pub async fn events_since(&self, after: i64, limit: i64) -> Result<Vec<LoggedEvent>, OjsError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT seq, type, queue, job_id, ({EVENT_JSON})::text AS json FROM ojs.events
                 WHERE seq > $1 ORDER BY seq LIMIT $2"
            ))
            .await
            .map_err(OjsError::sql)?;
        let rows = client
            .query(&statement, &[&after, &limit])
            .await
            .map_err(OjsError::sql)?;
        Ok(rows
            .iter()
            .map(|row| LoggedEvent {
                seq: row.get("seq"),
                kind: row.get("type"),
                queue: row.get("queue"),
                job_id: row.get("job_id"),
                json: row.get("json"),
            })
            .collect())
    }

    /// Where a new event stream starts: the last event logged `settled_for` ago or earlier, so
    /// that events of transactions still committing then are read as new.
    pub async fn event_floor(&self, settled_for: Duration) -> Result<i64, OjsError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT coalesce(max(seq), 0) AS seq FROM ojs.events WHERE time < now() - $1::float8 * interval '1 s'",
                &[&settled_for.as_secs_f64()],
            )
            .await
            .map_err(OjsError::sql)?;
        Ok(row.get("seq"))
    }

    /// Counts over all queues: jobs by state, queues, workers holding claims, and the last
    /// minute's completions and failures (from the event log).
    /// Job counts by state, queues, workers and the last minute's throughput: of every tenant
    /// (`None`), or of one (ojs-multi-tenancy §10.2; its queues and workers are those its jobs
    /// are in and claimed by).
    pub async fn stats(&self, tenant: Option<&str>) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "WITH j AS (SELECT * FROM ojs.jobs WHERE $1::text IS NULL OR tenant = $1)
                 SELECT coalesce((SELECT jsonb_object_agg(state, n) FROM
                    (SELECT state, count(*) AS n FROM j GROUP BY state) s), '{}') AS counts,
                        (SELECT count(DISTINCT queue) FROM j) AS queues,
                        (SELECT count(DISTINCT worker_id) FROM j WHERE state = 'active') AS workers,
                        (SELECT count(*) FILTER (WHERE e.type = 'job.completed') FROM ojs.events e
                          WHERE e.time > now() - interval '1 minute'
                            AND ($1 IS NULL OR e.job_id IN (SELECT id FROM j))) AS completed,
                        (SELECT count(*) FILTER (WHERE e.type = 'job.failed') FROM ojs.events e
                          WHERE e.time > now() - interval '1 minute'
                            AND ($1 IS NULL OR e.job_id IN (SELECT id FROM j))) AS failed",
                &[&tenant],
            )
            .await
            .map_err(OjsError::sql)?;
        let counts: Value = row.get("counts");
        let mut jobs = json!({});
        for state in STATES {
            jobs[state] = json!(counts.get(state).and_then(Value::as_i64).unwrap_or(0));
        }
        Ok(json!({
            "jobs": jobs,
            "queues": row.get::<_, i64>("queues"),
            "workers": row.get::<_, i64>("workers"),
            "throughput": {
                "processed_per_minute": row.get::<_, i64>("completed"),
                "failed_per_minute": row.get::<_, i64>("failed"),
            },
        }))
    }

    /// The tenants that have jobs, each with its job count, in name order (at most
    /// [`MAX_TENANTS_LISTED`]; `truncated` says when there are more).
    pub async fn tenants(&self) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT tenant, count(*) AS jobs FROM ojs.jobs GROUP BY tenant ORDER BY tenant LIMIT $1",
                &[&(MAX_TENANTS_LISTED + 1)],
            )
            .await
            .map_err(OjsError::sql)?;
        let truncated = rows.len() as i64 > MAX_TENANTS_LISTED;
        let tenants: Vec<Value> = rows
            .iter()
            .take(MAX_TENANTS_LISTED as usize)
            .map(|row| json!({ "tenant_id": row.get::<_, String>("tenant"), "jobs": row.get::<_, i64>("jobs") }))
            .collect();
        Ok(json!({ "tenants": tenants, "truncated": truncated }))
    }

    /// Workers that sent heartbeats or hold claims now, with the claims they hold.
    pub async fn active_workers(&self) -> Result<Vec<Value>, OjsError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT CASE WHEN w.id IS NULL THEN jsonb_build_object('id', a.worker_id, 'state', 'running')
                             ELSE ojs.worker_json(w) END
                        || jsonb_build_object('active_jobs', coalesce(a.claims, 0)) AS worker
                 FROM ojs.workers w
                 FULL JOIN (SELECT worker_id, count(*) AS claims FROM ojs.jobs
                            WHERE state = 'active' AND worker_id IS NOT NULL GROUP BY worker_id) a
                   ON a.worker_id = w.id
                 ORDER BY coalesce(w.id, a.worker_id)",
                &[],
            )
            .await
            .map_err(OjsError::sql)?;
        Ok(rows.iter().map(|row| row.get("worker")).collect())
    }

    /// Stores a cron schedule: a new one, or (`replace`) whatever has its name. An existing name
    /// not to be replaced is 409; a time zone PostgreSQL does not know is 400.
    pub async fn put_cron(&self, cron: &super::cron::Registration, replace: bool) -> Result<Value, OjsError> {
        let client = self.client().await?;
        if let Some(zone) = cron.definition.get("timezone").and_then(Value::as_str) {
            let known: bool = client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = $1) AS known",
                    &[&zone],
                )
                .await
                .map_err(OjsError::sql)?
                .get("known");
            if !known {
                return Err(OjsError::invalid(format!("unknown time zone {zone:?}")));
            }
        }
        let offset = tz_offset(&client, &cron.definition).await?;
        let next = cron
            .schedule
            .next_after(time::OffsetDateTime::now_utc(), offset)
            .ok_or_else(|| OjsError::invalid("the cron expression never matches"))?;
        let statement = if replace {
            "INSERT INTO ojs.cron (name, definition, next_run) VALUES ($1, $2, to_timestamp($3))
             ON CONFLICT (name) DO UPDATE SET definition = excluded.definition, next_run = excluded.next_run
             RETURNING ojs.cron_json(cron) AS cron"
        } else {
            "INSERT INTO ojs.cron (name, definition, next_run) VALUES ($1, $2, to_timestamp($3))
             ON CONFLICT (name) DO NOTHING
             RETURNING ojs.cron_json(cron) AS cron"
        };
        let row = client
            .query_opt(
                statement,
                &[&cron.name, &cron.definition, &(next.unix_timestamp() as f64)],
            )
            .await
            .map_err(OjsError::sql)?;
        row.map(|row| row.get("cron")).ok_or_else(|| {
            OjsError::duplicate(format!(
                "a cron schedule named {:?} exists; PUT /ojs/v1/cron/{} replaces it",
                cron.name, cron.name
            ))
        })
    }

    pub async fn list_crons(&self) -> Result<Vec<Value>, OjsError> {
        let client = self.client().await?;
        let rows = client
            .query("SELECT ojs.cron_json(c) AS cron FROM ojs.cron c ORDER BY name", &[])
            .await
            .map_err(OjsError::sql)?;
        Ok(rows.iter().map(|row| row.get("cron")).collect())
    }

    pub async fn delete_cron(&self, name: &str) -> Result<Value, OjsError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "DELETE FROM ojs.cron c WHERE name = $1 RETURNING ojs.cron_json(c) AS cron",
                &[&name],
            )
            .await
            .map_err(OjsError::sql)?;
        row.map(|row| row.get("cron"))
            .ok_or_else(|| OjsError::not_found(format!("no cron schedule {name:?}")))
    }

    /// Enqueues the jobs of every cron schedule that is due, once: the schedule row is locked
    /// and moved to its next run in the same transaction as the enqueue, and one gateway at a time
    /// does it (advisory lock), so any number of gateways fire each tick once.
    pub async fn fire_due_crons(&self, max_args_bytes: usize) -> Result<usize, OjsError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(OjsError::sql)?;
        let leader: bool = tx
            .query_one("SELECT pg_try_advisory_xact_lock($1) AS leader", &[&CRON_LOCK])
            .await
            .map_err(OjsError::sql)?
            .get("leader");
        if !leader {
            return Ok(0);
        }
        let due = tx
            .query(
                "SELECT name, definition, ojs.ts(next_run) AS tick FROM ojs.cron WHERE next_run <= now() FOR UPDATE SKIP LOCKED",
                &[],
            )
            .await
            .map_err(OjsError::sql)?;
        let mut fired = 0;
        for row in &due {
            let name: String = row.get("name");
            let definition: Value = row.get("definition");
            let tick: String = row.get("tick");
            let schedule = Schedule::parse(definition["expression"].as_str().unwrap_or_default())?;
            let offset = tz_offset(&tx, &definition).await?;
            let next = schedule
                .next_after(time::OffsetDateTime::now_utc(), offset)
                .map(|next| next.unix_timestamp() as f64);
            let policy = definition["overlap_policy"].as_str().unwrap_or("allow");
            let job = envelope::parse_job(cron_job(&name, &definition, &tick, policy), max_args_bytes)?;
            // The schedule's previous job while it is not done (found by its meta.cron_name):
            // running, or still waiting to run — a tick that comes before a backlogged queue
            // reached the previous one would otherwise enqueue a second run of the same
            // schedule (as Kubernetes' CronJob `Forbid` counts a job not yet started too).
            let running: Option<String> = if matches!(policy, "skip" | "cancel_previous") {
                tx.query_opt(
                    "SELECT id FROM ojs.jobs WHERE queue = $1 AND type = $2
                        AND state NOT IN ('completed', 'cancelled', 'discarded')
                        AND envelope #>> '{meta,cron_name}' = $3 LIMIT 1",
                    &[&job.queue, &job.job_type, &name],
                )
                .await
                .map_err(OjsError::sql)?
                .map(|row| row.get("id"))
            } else {
                None
            };
            if let (Some(previous), "cancel_previous") = (&running, policy) {
                tx.execute(
                    "UPDATE ojs.jobs SET state = 'cancelled', cancelled_at = now(), visible_until = NULL
                      WHERE id = $1 AND state NOT IN ('completed', 'cancelled', 'discarded')",
                    &[previous],
                )
                .await
                .map_err(OjsError::sql)?;
            }
            let overlapping = running.filter(|_| policy == "skip");
            let (kind, mut data) = match overlapping {
                Some(existing) => (
                    "cron.skipped",
                    json!({ "reason": "overlap_prevention", "existing_job_id": existing }),
                ),
                None => match insert(&tx, std::slice::from_ref(&job)).await {
                    Ok(_) => {
                        fired += 1;
                        ("cron.triggered", json!({ "job_id": job.id }))
                    }
                    // A full queue misses this tick, as an overlapping run does; the event log
                    // has the rejection.
                    Err(error) if error.code == QUEUE_FULL => ("cron.skipped", json!({ "reason": "queue_full" })),
                    Err(error) => return Err(error),
                },
            };
            data["cron_name"] = json!(name);
            data["cron_expr"] = definition["expression"].clone();
            data["job_type"] = json!(job.job_type);
            data["scheduled_at"] = json!(tick);
            // The event's subject is the schedule (the data names the job).
            tx.execute(
                "INSERT INTO ojs.events (id, type, queue, data) VALUES (gen_random_uuid()::text, $1, $2, $3)",
                &[&kind, &job.queue, &data],
            )
            .await
            .map_err(OjsError::sql)?;
            tx.execute(
                "UPDATE ojs.cron SET last_run = now(), next_run = coalesce(to_timestamp($2), 'infinity') WHERE name = $1",
                &[&name, &next],
            )
            .await
            .map_err(OjsError::sql)?;
        }
        tx.commit().await.map_err(OjsError::sql)?;
        Ok(fired)
    }

    /// Drops events older than `retention`, a bounded batch at a time.
    pub async fn prune_events(&self, retention: std::time::Duration) -> Result<u64, OjsError> {
        let client = self.client().await?;
        client
            .execute(
                "DELETE FROM ojs.events WHERE seq IN (
                     SELECT seq FROM ojs.events WHERE time < now() - $1 * interval '1 s' LIMIT 10000)",
                &[&retention.as_secs_f64()],
            )
            .await
            .map_err(OjsError::sql)
    }

    pub async fn ping(&self) -> Result<(), OjsError> {
        let client = self.client().await?;
        client.query_one("SELECT 1", &[]).await.map_err(OjsError::sql)?;
        Ok(())
    }

    /// Empties every OJS table (conformance runs only; the HTTP route exists behind a flag).
    pub async fn reset(&self) -> Result<(), OjsError> {
        let client = self.client().await?;
        client
            .batch_execute(
                "TRUNCATE ojs.jobs, ojs.job_dependencies, ojs.queues, ojs.events, ojs.cron, ojs.workflows, ojs.workers,
                 ojs.rate_limits",
            )
            .await
            .map_err(OjsError::sql)
    }

    /// Why an ack/nack/cancel changed nothing: no such job of the tenant (404) or the wrong
    /// state or claim (409).
    async fn explain_refusal(&self, client: &tokio_postgres::Client, id: &str, tenant: &str, verb: &str) -> OjsError {
        match client
            .query_opt(
                "SELECT state FROM ojs.jobs WHERE id = $1 AND tenant = $2",
                &[&id, &tenant],
            )
            .await
        {
            Ok(Some(row)) => refusal(id, &row.get::<_, String>("state"), verb),
            Ok(None) => OjsError::job_not_found(id),
            Err(err) => OjsError::sql(err),
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
struct Placement<'a> {
    /// The default tenant when `None`.
    tenant: Option<&'a str>,
    workflow_id: Option<&'a str>,
    steps: Vec<Option<i32>>,
    callbacks: Vec<Option<&'static str>>,
    /// Inserted as `pending`, for the workflow to release later.
    held: Vec<bool>,
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
    fn of(tenant: &'a str) -> Placement<'a> {
        Placement {
            tenant: Some(tenant),
            ..Placement::default()
        }
    }
}

/// The job a cron tick enqueues: its template, with the schedule's name and tick in `meta`
/// (ojs-cron §6.3, the correlation overlap policies use); under `enqueue`, a rate limit of one
/// at a time keyed by the schedule, so its jobs wait for each other instead of overlapping.
fn cron_job(name: &str, definition: &Value, tick: &str, policy: &str) -> Value {
    let mut job = definition["job_template"].clone();
    if !job["meta"].is_object() {
        job["meta"] = json!({});
    }
    job["meta"]["cron_name"] = json!(name);
    job["meta"]["cron_triggered_at"] = json!(tick);
    if policy == "enqueue" {
        if !job["options"].is_object() {
            job["options"] = json!({});
        }
        job["options"]["rate_limit"] = json!({ "key": format!("cron:{name}"), "concurrency": 1 });
    }
    job
}

/// Inserts jobs of the default tenant (cron's).
async fn insert(client: &impl deadpool_postgres::GenericClient, jobs: &[NewJob]) -> Result<Inserted, OjsError> {
    insert_placed(client, jobs, &Placement::default(), Answer::Job).await
}

/// Inserts jobs of which some wait for others (`options.depends_on`), in the caller's
/// transaction: those are inserted `pending`, then their dependencies recorded and resolved
/// (functions/ojs.sql), so a job whose dependencies all completed already is answered
/// available. A dependency that names no job refuses the whole enqueue (404, the transaction
/// is not committed).
async fn insert_waiting(
    tx: &deadpool_postgres::Transaction<'_>,
    jobs: &[NewJob],
    tenant: &str,
    answer: Answer,
) -> Result<Inserted, OjsError> {
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
            .map_err(OjsError::sql)?
            .get("missing");
        if let Some(first) = missing.first() {
            return Err(
                OjsError::not_found(format!("job {} depends on job {first}, which does not exist", job.id))
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
            .map_err(OjsError::sql)?;
        match answer {
            Answer::Job => *body = row.get("job"),
            Answer::Summary => body["state"] = Value::String(row.get("state")),
        }
    }
    Ok(inserted)
}

enum CancelError {
    Sql(tokio_postgres::Error),
    Ojs(OjsError),
}

impl From<tokio_postgres::Error> for CancelError {
    fn from(err: tokio_postgres::Error) -> Self {
        CancelError::Sql(err)
    }
}

async fn cancel_workflow_once(client: &mut deadpool_postgres::Client, id: &str) -> Result<Value, CancelError> {
    let tx = client.transaction().await?;
    let state: Option<String> = tx
        .query_opt("SELECT state FROM ojs.workflows WHERE id = $1 FOR UPDATE", &[&id])
        .await?
        .map(|row| row.get("state"));
    match state.as_deref() {
        None => return Err(CancelError::Ojs(workflow_not_found(id))),
        Some("running" | "pending") => {}
        Some(state) => {
            return Err(CancelError::Ojs(OjsError::conflict(format!(
                "workflow {id} is already in terminal state {state:?}"
            ))));
        }
    }
    // The workflow goes first, so the triggers see it cancelled and release nothing. Jobs
    // another transaction holds are left to it (a claim, a job's own cancel or expiry): waiting
    // for them could deadlock with its trigger waiting for the workflow row, and a cancelled
    // workflow's jobs are not claimed anyway.
    tx.execute(
        "UPDATE ojs.workflows SET state = 'cancelled', cancelled_at = now(), completed_at = now() WHERE id = $1",
        &[&id],
    )
    .await?;
    tx.execute("SELECT ojs.workflow_cancel_members($1)", &[&id]).await?;
    let row = tx
        .query_one(
            "SELECT ojs.workflow_json(w) AS workflow FROM ojs.workflows w WHERE w.id = $1",
            &[&id],
        )
        .await?;
    tx.commit().await?;
    Ok(row.get("workflow"))
}

/// One workflow of a tree and, recursively, the workflows nested in it. `parent` is the parent
/// workflow and the member index this one takes in it; `now` says whether it runs from the start.
fn store_workflow<'a>(
    tx: &'a deadpool_postgres::Transaction<'a>,
    workflow: &'a NewWorkflow,
    tenant: &'a str,
    parent: Option<(&'a str, i32)>,
    now: bool,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), OjsError>> + Send + 'a>> {
    Box::pin(async move {
        let (parent_id, parent_step) = parent.unzip();
        tx.execute(
            "INSERT INTO ojs.workflows (id, type, name, state, jobs_total, parent_id, parent_step)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &workflow.id,
                &workflow.kind.as_str(),
                &workflow.name,
                &if now { "running" } else { "pending" },
                &(workflow.members.len() as i32),
                &parent_id,
                &parent_step,
            ],
        )
        .await
        .map_err(|err| match err.code() {
            Some(&SqlState::UNIQUE_VIOLATION) => OjsError::duplicate("a workflow with this id already exists"),
            _ => OjsError::sql(err),
        })?;
        // A chain runs its first member first; a group or batch all of them at once.
        let runs_now = |index: usize| now && (workflow.kind != Kind::Chain || index == 0);
        let mut placement = Placement {
            workflow_id: Some(&workflow.id),
            ..Placement::of(tenant)
        };
        let mut jobs = Vec::new();
        for (index, member) in workflow.members.iter().enumerate() {
            match member {
                Member::Job(job) => {
                    jobs.push(NewJob::clone(job));
                    placement.steps.push(Some(index as i32));
                    placement.callbacks.push(None);
                    placement.held.push(!runs_now(index));
                }
                Member::Workflow(inner) => {
                    store_workflow(tx, inner, tenant, Some((&workflow.id, index as i32)), runs_now(index)).await?;
                }
            }
        }
        for (hook, job) in &workflow.callbacks {
            jobs.push(job.clone());
            placement.steps.push(None);
            placement.callbacks.push(Some(*hook));
            placement.held.push(true);
        }
        if !jobs.is_empty() {
            insert_placed(tx, &jobs, &placement, Answer::Job).await?;
        }
        Ok(())
    })
}

async fn insert_placed(
    client: &impl deadpool_postgres::GenericClient,
    jobs: &[NewJob],
    placement: &Placement<'_>,
    answer: Answer,
) -> Result<Inserted, OjsError> {
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
    let statement = client.prepare_cached(INSERT_JOBS).await.map_err(OjsError::sql)?;
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
            Some(&SqlState::UNIQUE_VIOLATION) => OjsError::duplicate("a job with this id already exists"),
            _ => OjsError::sql(err),
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
                return Err(OjsError::queue_full(&queue, depth, bound));
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

/// Seconds east of UTC of a schedule's `timezone` now (UTC when none); PostgreSQL knows the zones.
async fn tz_offset(client: &impl deadpool_postgres::GenericClient, definition: &Value) -> Result<i64, OjsError> {
    let Some(zone) = definition.get("timezone").and_then(Value::as_str) else {
        return Ok(0);
    };
    let row = client
        .query_one(
            "SELECT extract(epoch FROM (now() AT TIME ZONE $1) - (now() AT TIME ZONE 'UTC'))::bigint AS offset_secs",
            &[&zone],
        )
        .await
        .map_err(|err| match err.code() {
            Some(&SqlState::INVALID_PARAMETER_VALUE) => OjsError::invalid(format!("unknown time zone {zone:?}")),
            _ => OjsError::sql(err),
        })?;
    Ok(row.get("offset_secs"))
}

/// The error a worker reported, as kept in the job's history.
fn error_record(error: &Value, attempt: i32) -> Value {
    let mut record = match error {
        Value::Object(fields) => fields.clone(),
        Value::String(message) => [("message".to_string(), Value::String(message.clone()))]
            .into_iter()
            .collect(),
        _ => serde_json::Map::new(),
    };
    if !record.contains_key("type") {
        let kind = error
            .pointer("/details/error_class")
            .or_else(|| error.get("code"))
            .cloned()
            .unwrap_or_else(|| Value::String("error".into()));
        record.insert("type".into(), kind);
    }
    record
        .entry("message")
        .or_insert_with(|| Value::String("the worker reported a failure".into()));
    record.insert("attempt".into(), json!(attempt));
    record.insert("occurred_at".into(), Value::String(super::now_rfc3339()));
    Value::Object(record)
}

fn workflow_not_found(id: &str) -> OjsError {
    OjsError::not_found(format!("workflow {id} not found"))
}

fn refusal(id: &str, state: &str, verb: &str) -> OjsError {
    OjsError::conflict(format!(
        "job {id} is {state} (or claimed by another worker): it cannot be {verb} now"
    ))
}
