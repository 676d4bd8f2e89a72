//! Workers' side of the queue: claiming jobs (with the promotion of due and lapsed ones),
//! acknowledging, failing, heartbeats and worker directives.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};

use super::envelope::RetryPolicy;
use super::job::{Job, job_columns};
use super::jobs::refusal;
use super::{EngineError, Queue};
use crate::replica_lag::ReplicaLag;

/// Who claims: the queues in preference order, how many jobs, and for how long.
pub struct FetchRequest {
    pub queues: Vec<String>,
    pub count: i64,
    /// How the claim shares itself among the queues (ext-fair-scheduling §7).
    pub strategy: Strategy,
    /// Only this tenant's jobs are handed out.
    pub tenant: String,
    pub worker_id: Option<String>,
    pub visibility_ms: Option<i32>,
}

/// How one fetch picks among its queues.
#[derive(Debug, Clone, PartialEq)]
pub enum Strategy {
    /// The queues in the order listed: a later queue only gets what the earlier ones leave.
    Strict,
    /// One job from each queue in turn (§7.1), starting from a random queue so that fetches
    /// of one job spread evenly over the queues that have work.
    RoundRobin,
    /// Queues served in proportion to their weights (§7.3), aligned with `queues`.
    Weighted(Vec<u32>),
}

impl Strategy {
    /// Each queue's weight and the phase of its first turn, for the claim's ordering: a
    /// queue's n-th job (from 0) comes at `(n + phase) / weight`, stride scheduling. One queue,
    /// drawn with a probability proportional to its weight, leads (phase 0); the others start
    /// at a random phase in (0, 1]. So a fetch of one job comes from each queue that has work
    /// in proportion to its weight, and a fetch of many takes from each in proportion (to
    /// within a job). `None` for the strict order.
    fn turns(&self, queues: usize) -> Option<(Vec<f64>, Vec<f64>)> {
        use rand::Rng;
        let weights: Vec<f64> = match self {
            Strategy::Strict => return None,
            Strategy::RoundRobin => vec![1.0; queues],
            Strategy::Weighted(weights) => weights.iter().map(|w| f64::from(*w)).collect(),
        };
        let mut rng = rand::rng();
        let mut draw = rng.random::<f64>() * weights.iter().sum::<f64>();
        let leader = weights
            .iter()
            .position(|w| {
                draw -= w;
                draw < 0.0
            })
            .unwrap_or(0);
        let phases = (0..queues)
            .map(|queue| {
                if queue == leader {
                    0.0
                } else {
                    1.0 - rng.random::<f64>()
                }
            })
            .collect();
        Some((weights, phases))
    }
}

fn row_turn(row: &tokio_postgres::Row) -> f64 {
    row.get("fair_turn")
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
/// job's current claim: a `worker_id` settles only a claim that worker made, never another's nor
/// an anonymous fetch's. (Without either, as the spec's ack is, any holder of the job id may
/// settle its current claim.)
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

/// A job's error history with `$new` appended, keeping the last 100 errors (the oldest dropped
/// first). A job put back with `requeue: true` may fail without end, and its row (read whole by
/// every fetch that hands it out, and by promotion) must not grow with it; a hundred attempts
/// are more history than any retry policy spends. The old array is cut before the append, so a
/// history already past the bound is mended rather than concatenated again.
macro_rules! kept_errors {
    ($new:literal) => {
        concat!(
            "(SELECT coalesce(jsonb_agg(e ORDER BY i), '[]') FROM jsonb_array_elements(j.errors) WITH ORDINALITY AS t(e, i)
               WHERE i > jsonb_array_length(j.errors) - 99) || jsonb_build_array(",
            $new,
            ")"
        )
    };
}

/// What one fetch's jobs may carry (envelopes and error histories) before the rest are left for
/// the next fetch: the answer is built in memory, and a fetch of 1,000 jobs of 4 MiB each would
/// otherwise build 4 GiB.
const MAX_FETCH_BYTES: i64 = 16 << 20;

/// Jobs become due or lapse while nobody fetches; at most this many move per promotion.
const PROMOTE_BATCH: i64 = 1000;
/// How often a busy gateway promotes; a due job waits at most this long beyond its time.
const PROMOTE_EVERY: Duration = Duration::from_millis(50);

/// Moves due scheduled/retryable jobs to available, lapsed claims back to available (discarded on
/// their last attempt), and expired jobs to discarded. Cheap when there is nothing to move: three partial-index range scans.
const PROMOTE: &str = concat!(
    "
WITH due AS (
    -- A cancelled workflow's retry or scheduled job is cancelled, not run: the claim would pass
    -- it over, and it would wait there.
    UPDATE ojs.jobs j
    SET state = CASE WHEN ojs.workflow_cancelled(j.workflow_id) THEN 'cancelled' ELSE 'available' END,
        cancelled_at = CASE WHEN ojs.workflow_cancelled(j.workflow_id) THEN now() ELSE j.cancelled_at END
    WHERE id IN (SELECT id FROM ojs.jobs WHERE state IN ('scheduled', 'retryable') AND run_at <= now()
                 LIMIT $1 FOR UPDATE SKIP LOCKED)
), lapse AS (
    SELECT id, attempt >= max_attempts AS exhausted, ojs.workflow_cancelled(workflow_id) AS cancelled,
           jsonb_build_object('code', 'visibility_timeout', 'type', 'visibility_timeout', 'attempt', attempt,
                              'message', 'the claim lapsed before an ack, nack or heartbeat',
                              'occurred_at', ojs.ts(now())) AS error
    FROM ojs.jobs WHERE state = 'active' AND visible_until < now()
    LIMIT $1 FOR UPDATE SKIP LOCKED
), lapsed AS (
    -- A lapsed claim spent its attempt: on the last one the job is discarded (or dead-lettered)
    -- as a nack would, rather than offered again forever; one of a cancelled workflow is
    -- cancelled, as a nack would.
    UPDATE ojs.jobs j SET visible_until = NULL, error = lapse.error, errors = ",
    kept_errors!("lapse.error"),
    ",
        state = CASE WHEN lapse.cancelled THEN 'cancelled' WHEN lapse.exhausted THEN 'discarded' ELSE 'available' END,
        completed_at = CASE WHEN lapse.exhausted AND NOT lapse.cancelled THEN now() END,
        cancelled_at = CASE WHEN lapse.cancelled THEN now() ELSE j.cancelled_at END,
        dead_letter = lapse.exhausted AND NOT lapse.cancelled
                      AND coalesce(j.envelope #>> '{options,retry,on_exhaustion}' = 'dead_letter', false)
    FROM lapse WHERE j.id = lapse.id
    RETURNING j.id, j.queue, j.type, j.attempt, j.envelope, lapse.exhausted AND NOT lapse.cancelled AS exhausted,
              lapse.error
), lapse_events AS (
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    SELECT gen_random_uuid()::text, 'job.discarded', queue, id,
           jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue, 'attempt', attempt,
                              'total_attempts', attempt, 'error', error,
                              'last_error', error - 'occurred_at' - 'attempt') || ojs.trace_of(envelope)
    FROM lapsed WHERE exhausted
), expired AS (
    -- No completed_at (it never ran, and the conformance suite's expired job shows none): the
    -- reaper goes by its expires_at.
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
SELECT 1"
);

/// Claims up to $2 jobs of tenant $5 for worker $3 (the tenant's worker of that name: its row
/// is keyed `ojs.tenant_key($5, $3)`): queues in the order given (or, for a fair strategy, in
/// the turns its weights $6 and phases $7 make), then priority, then FIFO, each queue read along
/// the `jobs_claim` index (whose (queue, tenant) prefix is one range).
/// Rate-limited jobs whose key has no room are passed over; those picked then take their starts
/// from the key's row atomically (`admitted`), and any the key cannot take now stay available.
/// Jobs past the answer's budget of $8 bytes stay available too (`budgeted`).
const CLAIM: &str = concat!(
    "
WITH claimed AS (
    SELECT c.id, q.ord, c.priority, c.seq, c.rate_key,
           -- A fair strategy's turn (Strategy::turns); the strict order has none.
           CASE WHEN $6::float8[] IS NULL THEN 0
                ELSE (row_number() OVER (PARTITION BY q.ord ORDER BY c.priority DESC, c.seq) - 1
                      + ($7::float8[])[q.ord::int]) / ($6::float8[])[q.ord::int] END AS fair_turn
    -- Each queue once (where first listed): a queue scanned twice would offer its jobs twice,
    -- and the rate limits below would count each such job twice.
    FROM (SELECT name, min(ord) AS ord FROM unnest($1::text[]) WITH ORDINALITY AS u(name, ord) GROUP BY name) q
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.seq, j.rate_key FROM ojs.jobs j
        WHERE j.state = 'available' AND j.queue = q.name AND j.tenant = $5
          -- Expired but not yet moved to discarded by a promotion: not to be run.
          AND (j.expires_at IS NULL OR j.expires_at > now())
          AND (j.rate_key IS NULL
               OR EXISTS (SELECT 1 FROM ojs.rate_limits r WHERE r.key = j.rate_key AND ojs.rate_room(r) > 0))
          AND (j.workflow_id IS NULL
               OR NOT EXISTS (SELECT 1 FROM ojs.workflows w WHERE w.id = j.workflow_id AND w.state = 'cancelled'))
        ORDER BY j.priority DESC, j.seq
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ) c
    WHERE NOT EXISTS (SELECT 1 FROM ojs.queues p WHERE p.name = q.name AND p.paused)
      AND NOT EXISTS (SELECT 1 FROM ojs.workers w WHERE w.id = ojs.tenant_key($5, $3)
                      AND (w.state <> 'running' OR w.directive IS NOT NULL))
    ORDER BY fair_turn, q.ord, c.priority DESC, c.seq
    LIMIT $2
), budgeted AS (
    -- The answer is built whole, so it takes jobs in claim order up to $8 bytes (the first
    -- always); the rest stay available. A job's size is that of what it sends, its envelope and
    -- error history: as stored when stored uncompressed, else as text (a compressed value can be
    -- hundreds of times its stored size).
    SELECT c.* FROM (
        SELECT claimed.*, sum(s.bytes) OVER (ORDER BY claimed.fair_turn, claimed.ord, claimed.priority DESC, claimed.seq
                                            ROWS UNBOUNDED PRECEDING)
                          - s.bytes AS before
        FROM claimed JOIN ojs.jobs j ON j.id = claimed.id
        CROSS JOIN LATERAL (SELECT
            CASE WHEN pg_column_compression(j.envelope) IS NULL THEN pg_column_size(j.envelope)
                 ELSE octet_length(j.envelope::text) END
            + coalesce(CASE WHEN pg_column_compression(j.errors) IS NULL THEN pg_column_size(j.errors)
                            ELSE octet_length(j.errors::text) END, 0) AS bytes) s
    ) c
    WHERE c.before < $8
), wanted AS (
    SELECT rate_key, count(*)::int AS n FROM budgeted WHERE rate_key IS NOT NULL GROUP BY rate_key
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
    SELECT c.id, c.ord, c.fair_turn FROM (
        SELECT budgeted.*, row_number() OVER (PARTITION BY rate_key ORDER BY fair_turn, ord, priority DESC, seq) AS turn
        FROM budgeted
    ) c
    LEFT JOIN admitted a ON a.key = c.rate_key
    WHERE c.rate_key IS NULL OR c.turn <= a.granted
), running AS (
    UPDATE ojs.jobs j
    SET state = 'active', attempt = j.attempt + 1, started_at = now(), worker_id = $3,
        visible_until = now() + coalesce($4, j.visibility_ms) * interval '1 ms'
    FROM started
    WHERE j.id = started.id
    RETURNING started.ord, started.fair_turn, j.*
), event AS (
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    SELECT gen_random_uuid()::text, 'job.started', queue, id,
           jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue, 'worker_id', $3::text,
                              'attempt', attempt) || ojs.trace_of(envelope)
    FROM running
)
SELECT j.ord, j.fair_turn, j.seq, ",
    job_columns!(),
    ", j.envelope FROM running j"
);

const ACK: &str = concat!(
    "
WITH done AS (
    UPDATE ojs.jobs j
    SET state = 'completed', completed_at = now(), result = $2, error = NULL, visible_until = NULL
    WHERE j.id = $1 AND j.state = 'active' AND j.tenant = $5
      AND ($3::int IS NULL OR j.attempt = $3) AND ($4::text IS NULL OR j.worker_id = $4)
    RETURNING j.*
), event AS (
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    SELECT gen_random_uuid()::text, 'job.completed', queue, id,
           jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue, 'attempt', attempt,
                              'duration_ms', round(extract(epoch FROM now() - started_at) * 1000),
                              'result', $2::jsonb) || ojs.trace_of(envelope)
    FROM done
)
SELECT ",
    job_columns!(),
    ", j.envelope FROM done j"
);

/// The failing half of a nack: the job's claim, locked, for the retry decision.
const NACK_LOCK: &str = "
SELECT j.state, j.attempt, j.worker_id, j.envelope #> '{options,retry}' AS retry, j.max_attempts,
       ojs.workflow_cancelled(j.workflow_id) AS workflow_cancelled
FROM ojs.jobs j WHERE j.id = $1 AND j.tenant = $2 FOR UPDATE OF j";

/// The other half: the decided state, the error kept in the history, and the events.
const NACK: &str = concat!(
    "
WITH failed AS (
    UPDATE ojs.jobs j
    SET state = $2, error = $3, errors = ",
    kept_errors!("$3::jsonb"),
    ", visible_until = NULL,
        -- A job put back (requeue: the only nack that makes it available) ran nothing: the
        -- claim's attempt is given back, so its retries are all still to come.
        attempt = CASE WHEN $2 = 'available' THEN j.attempt - 1 ELSE j.attempt END,
        retry_delay_ms = coalesce($4, retry_delay_ms),
        run_at = CASE WHEN $4::bigint IS NULL THEN run_at ELSE now() + $4 * interval '1 ms' END,
        completed_at = CASE WHEN $2 = 'discarded' THEN now() END,
        cancelled_at = CASE WHEN $2 = 'cancelled' THEN now() ELSE cancelled_at END,
        dead_letter = $5
    WHERE id = $1
    RETURNING j.*
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
    WHERE e.kind IS NOT NULL
)
SELECT ",
    job_columns!(),
    ", j.envelope FROM failed j"
);

const EXTEND_CLAIMS: &str = "
WITH extended AS (
    -- A heartbeat extends a claim, never shortens it: the later of its current end and now
    -- plus the extension asked for.
    UPDATE ojs.jobs SET visible_until = greatest(visible_until, now() + coalesce($3, visibility_ms) * interval '1 ms')
    WHERE id = ANY($1) AND state = 'active' AND tenant = $4
      AND ($2::text IS NULL OR worker_id = $2)
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

/// Whether worker `$1` of tenant `$2` may have a row: it has one, or the tenant has fewer than
/// `$3` (`--ojs-max-workers-per-tenant`). The count reads the tenant's range of the index
/// `workers_tenant` and stops at the bound, and runs only for a worker not yet registered. Two
/// first heartbeats of one tenant that run at once both see the count before either's row, so
/// the bound may be passed by the registrations in flight at the moment it is reached (at most
/// the gateways' pool connections), never further.
macro_rules! worker_room {
    () => {
        "(EXISTS (SELECT 1 FROM ojs.workers WHERE id = ojs.tenant_key($2, $1))
          OR (SELECT count(*) FROM (SELECT 1 FROM ojs.workers WHERE ojs.key_tenant(id) = $2 LIMIT $3) n) < $3)"
    };
}

/// Records a heartbeat of worker $1 of tenant $2 (when [`worker_room!`] lets it be recorded: no
/// row otherwise) and logs the worker events of ojs-events §3.4: `worker.started` at its first
/// heartbeat, `worker.quiet` when it reports quiet (or drain), `worker.stopped` when it reports
/// terminate, and `worker.heartbeat` every time. (The CTEs share one snapshot, so `previous` is
/// the row before this heartbeat.)
const RECORD_WORKER: &str = concat!(
    "
WITH previous AS (
    SELECT state FROM ojs.workers WHERE id = ojs.tenant_key($2, $1)
), recorded AS (
    INSERT INTO ojs.workers AS w (id, state, active_jobs)
    SELECT ojs.tenant_key($2, $1), coalesce($4::text, 'running'), $5::int WHERE ",
    worker_room!(),
    "
    ON CONFLICT (id) DO UPDATE SET state = coalesce($4, w.state), active_jobs = coalesce($5, w.active_jobs), last_beat = now()
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
SELECT state, directive FROM recorded"
);

/// Sets the directive of worker $1 of tenant $2 (registering it, when [`worker_room!`] lets it
/// be), for [`Queue::direct_worker`].
const DIRECT_WORKER: &str = concat!(
    "INSERT INTO ojs.workers AS w (id, state, directive)
     SELECT ojs.tenant_key($2, $1), 'running', $4::text WHERE ",
    worker_room!(),
    "
     ON CONFLICT (id) DO UPDATE SET directive = $4
     RETURNING ojs.worker_json(w) AS worker"
);

impl Queue {
    /// Whether this fetch should also promote: true at most once per [`PROMOTE_EVERY`], never
    /// on a hot standby.
    fn promotion_due(&self) -> bool {
        if self.replica.as_ref().is_some_and(ReplicaLag::is_standby) {
            return false;
        }
        let now = self.started.elapsed().as_millis() as u64 + PROMOTE_EVERY.as_millis() as u64;
        let last = self.last_promote_ms.load(Ordering::Relaxed);
        // Another fetch may have stored a later `now` since this one read the clock.
        now.saturating_sub(last) >= PROMOTE_EVERY.as_millis() as u64
            && self
                .last_promote_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// When promotion is due, it goes out with the claim: one round trip, two statements. The
    /// hot statements are prepared once per connection (a plain query would prepare it again
    /// each time: one more round trip and a fresh plan).
    pub async fn fetch(&self, request: &FetchRequest) -> Result<Vec<Job>, EngineError> {
        let client = self.client().await?;
        let (weights, phases) = request.strategy.turns(request.queues.len()).unzip();
        let claim_params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
            &request.queues,
            &request.count,
            &request.worker_id,
            &request.visibility_ms,
            &request.tenant,
            &weights,
            &phases,
            &MAX_FETCH_BYTES,
        ];
        let claim_statement = client.prepare_cached(CLAIM).await.map_err(EngineError::sql)?;
        let claim = client.query(&claim_statement, &claim_params);
        let claimed = if self.promotion_due() {
            let promote_statement = client.prepare_cached(PROMOTE).await.map_err(EngineError::sql)?;
            let promote_params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&PROMOTE_BATCH];
            let (promote, claim) = tokio::join!(client.execute(&promote_statement, &promote_params), claim);
            // The claim has committed by now: its jobs are active and their attempts spent, so
            // they go to this worker whatever became of the promotion (which the next fetch
            // tries again).
            // A read-only refusal is a standby the sampler has not seen yet (a failover's
            // moment): not worth a warning.
            match promote {
                Err(error) if error.code() != Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION) => {
                    tracing::warn!(%error, "promoting due and lapsed OJS jobs failed");
                }
                _ => {}
            }
            claim
        } else {
            claim.await
        };
        let mut rows = claimed.map_err(EngineError::sql)?;
        // RETURNING has no order of its own.
        rows.sort_by(|a, b| {
            let key = |row: &tokio_postgres::Row| {
                (
                    row.get::<_, i64>("ord"),
                    -row.get::<_, i32>("priority"),
                    row.get::<_, i64>("seq"),
                )
            };
            row_turn(a).total_cmp(&row_turn(b)).then_with(|| key(a).cmp(&key(b)))
        });
        Ok(rows.iter().map(Job::from_row).collect())
    }

    pub async fn ack(&self, claim: &Claim, result: Option<Value>) -> Result<Job, EngineError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(ACK).await.map_err(EngineError::sql)?;
        let row = client
            .query_opt(
                &statement,
                &[&claim.job_id, &result, &claim.attempt, &claim.worker_id, &claim.tenant],
            )
            .await
            .map_err(EngineError::sql)?;
        match row {
            Some(row) => Ok(Job::from_row(&row)),
            None => Err(self
                .explain_refusal(&client, &claim.job_id, &claim.tenant, "acknowledged")
                .await),
        }
    }

    /// A failed attempt: retry after the policy's backoff, or discard (to the dead letter when
    /// the policy says so).
    pub async fn nack(&self, claim: &Claim, failure: Failure) -> Result<Job, EngineError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(EngineError::sql)?;
        let statement = tx.prepare_cached(NACK_LOCK).await.map_err(EngineError::sql)?;
        let row = tx
            .query_opt(&statement, &[&claim.job_id, &claim.tenant])
            .await
            .map_err(EngineError::sql)?;
        let Some(row) = row else {
            return Err(EngineError::job_not_found(&claim.job_id));
        };
        let state: String = row.get("state");
        let attempt: i32 = row.get("attempt");
        let worker_id: Option<String> = row.get("worker_id");
        let fenced_out = claim.attempt.is_some_and(|a| a != attempt)
            || claim
                .worker_id
                .as_ref()
                .is_some_and(|mine| worker_id.as_ref() != Some(mine));
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
        let (next_state, delay_ms, dead_letter, event) = if row.get("workflow_cancelled") {
            // Its workflow was cancelled while it ran: it was let finish, not run again (the
            // claim passes over a cancelled workflow's jobs, so a retry would only wait).
            // (job.cancelled is the job_cancelled trigger's.)
            ("cancelled", None, false, None)
        } else if failure.requeue {
            ("available", None, false, Some("job.requeued"))
        } else if retryable && attempt < max_attempts {
            (
                "retryable",
                Some(policy.delay(attempt).as_millis() as i64),
                false,
                Some("job.retrying"),
            )
        } else {
            ("discarded", None, policy.dead_letter, Some("job.discarded"))
        };
        let statement = tx.prepare_cached(NACK).await.map_err(EngineError::sql)?;
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
            .map_err(EngineError::sql)?;
        tx.commit().await.map_err(EngineError::sql)?;
        let job = Job::from_row(&row);
        super::workflow::after_member_settled(&client, &job).await;
        Ok(job)
    }

    /// Extends the claims a worker still holds and records the worker's state (both statements
    /// in one round trip). Returns the ids it extended and the worker's state and directive.
    pub async fn heartbeat(&self, beat: &Beat<'_>) -> Result<BeatReply, EngineError> {
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
                .query_opt(
                    &statement,
                    &[
                        &worker_id,
                        &beat.tenant,
                        &self.max_workers_per_tenant,
                        &beat.state,
                        &beat.active_jobs,
                    ],
                )
                .await
                .map(|row| Some(row.ok_or(())))
        };
        let (extended, worker) = tokio::join!(extend, record);
        // Claims extended by a heartbeat whose worker was refused stay extended: they are the
        // tenant's own jobs, claimed under that worker id (a fetch registers no worker).
        let worker = worker
            .map_err(EngineError::sql)?
            .transpose()
            .map_err(|()| EngineError::too_many_workers(beat.tenant, self.max_workers_per_tenant))?;
        let extended = extended.map_err(EngineError::sql)?;
        Ok(BeatReply {
            test_directive: extended.iter().find_map(|row| row.get("test_directive")),
            extended: extended.iter().map(|row| row.get("id")).collect(),
            state: worker.as_ref().map_or_else(|| "running".into(), |row| row.get("state")),
            directive: worker.and_then(|row| row.get("directive")),
        })
    }

    /// Tells a worker of `tenant`, at its next heartbeat, to quiet or terminate (`None` clears
    /// the directive); either way it is given no new jobs from now on.
    pub async fn direct_worker(
        &self,
        tenant: &str,
        worker_id: &str,
        directive: Option<&str>,
    ) -> Result<Value, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                DIRECT_WORKER,
                &[&worker_id, &tenant, &self.max_workers_per_tenant, &directive],
            )
            .await
            .map_err(EngineError::sql)?
            .ok_or_else(|| EngineError::too_many_workers(tenant, self.max_workers_per_tenant))?;
        Ok(row.get("worker"))
    }

    /// A worker of `tenant`; another tenant's of the same id is not found.
    pub async fn worker(&self, tenant: &str, worker_id: &str) -> Result<Value, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT ojs.worker_json(w) AS worker FROM ojs.workers w WHERE w.id = ojs.tenant_key($1, $2)",
                &[&tenant, &worker_id],
            )
            .await
            .map_err(EngineError::sql)?;
        row.map(|row| row.get("worker"))
            .ok_or_else(|| EngineError::not_found(format!("no worker {worker_id:?} has sent a heartbeat")))
    }
}

/// Bounds of one error as the job keeps it (and its events carry it): a worker's `error` is
/// whatever it sent, up to the whole request body, and one job may fail a hundred times.
const MAX_ERROR_BYTES: usize = 16 << 10;
/// `message` is cut to this (at a character boundary), as queues cut a long exception text.
const MAX_MESSAGE_BYTES: usize = 4 << 10;
/// `type` and `code` are names: longer ones are cut to this.
const MAX_NAME_BYTES: usize = 256;

/// The error a worker reported, as kept in the job's history: its fields as sent, with the
/// message cut to [`MAX_MESSAGE_BYTES`], the names to [`MAX_NAME_BYTES`], and, when what is left
/// is still over [`MAX_ERROR_BYTES`], only `type`, `code`, `message` and `retryable` kept, with
/// `details` saying how large the error was. A cut error has `truncated: true`.
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
    let mut truncated = false;
    for (field, limit) in [
        ("message", MAX_MESSAGE_BYTES),
        ("type", MAX_NAME_BYTES),
        ("code", MAX_NAME_BYTES),
    ] {
        if let Some(Value::String(text)) = record.get_mut(field)
            && text.len() > limit
        {
            text.truncate(text.floor_char_boundary(limit));
            truncated = true;
        }
    }
    let size = Value::Object(record.clone()).to_string().len();
    if size > MAX_ERROR_BYTES {
        record.retain(|field, value| match field.as_str() {
            "type" | "code" | "message" => value.is_string(),
            "retryable" => value.is_boolean(),
            _ => false,
        });
        record.entry("type").or_insert_with(|| Value::String("error".into()));
        record.insert("details".into(), json!({ "truncated": true, "original_bytes": size }));
        truncated = true;
    }
    if truncated {
        record.insert("truncated".into(), Value::Bool(true));
    }
    record.insert("attempt".into(), json!(attempt));
    record.insert("occurred_at".into(), Value::String(super::now_rfc3339()));
    Value::Object(record)
}
