-- OJS workflows (chain, group, batch), claims that use up their attempts by lapsing, the
-- retention of finished jobs, and worker states. Runs once, inside the migration transaction.

-- Every job of a workflow is a row of ojs.jobs from the start: chain steps after the first and
-- batch callbacks wait in state 'pending' until the workflow releases them, so the workflow's
-- whole shape is in one place and cancelling it is one UPDATE.
ALTER TABLE ojs.jobs
    ADD COLUMN workflow_step int,        -- the step of a chain, the job of a group or batch
    ADD COLUMN workflow_callback text    -- a batch callback: on_complete, on_success or on_failure
        CHECK (workflow_callback IN ('on_complete', 'on_success', 'on_failure'));
DROP INDEX ojs.jobs_workflow;
CREATE INDEX jobs_workflow ON ojs.jobs (workflow_id, workflow_step) WHERE workflow_id IS NOT NULL;
-- The reaper of finished jobs walks this in time order.
CREATE INDEX jobs_finished ON ojs.jobs (coalesce(completed_at, cancelled_at))
    WHERE state IN ('completed', 'discarded', 'cancelled');

-- No workflow rows exist before this migration (there was no way to create one).
ALTER TABLE ojs.workflows
    DROP COLUMN definition,
    ADD COLUMN type text NOT NULL CHECK (type IN ('chain', 'group', 'batch')),
    ADD COLUMN name text,
    ADD COLUMN jobs_total int NOT NULL,
    -- Counts of the workflow's jobs (callbacks excluded) by outcome, kept by the trigger below.
    ADD COLUMN jobs_completed int NOT NULL DEFAULT 0,
    ADD COLUMN jobs_failed int NOT NULL DEFAULT 0,
    ADD COLUMN jobs_cancelled int NOT NULL DEFAULT 0,
    ADD COLUMN cancelled_at timestamptz,
    ADD CONSTRAINT workflows_state CHECK (state IN ('running', 'completed', 'failed', 'cancelled'));
CREATE INDEX workflows_finished ON ojs.workflows (completed_at) WHERE state <> 'running';

-- Drives a workflow from its jobs' outcomes, in the transaction that settles the job (ack, nack,
-- cancel, expiry, a lapsed last attempt): a chain releases its next step with the results so far
-- or stops, a group settles when its last job does, a batch then releases the callbacks that
-- apply. The workflow row is locked first, so concurrent finishers of one group take turns and
-- exactly one of them sees the last job settle.
CREATE FUNCTION ojs.workflow_job_settled() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w ojs.workflows;
    was_completed int := (old.state = 'completed')::int;
    was_failed int := (old.state = 'discarded')::int;
    was_cancelled int := (old.state = 'cancelled')::int;
    released int;
BEGIN
    IF new.workflow_callback IS NULL THEN
        UPDATE ojs.workflows
        SET jobs_completed = jobs_completed + (new.state = 'completed')::int - was_completed,
            jobs_failed = jobs_failed + (new.state = 'discarded')::int - was_failed,
            jobs_cancelled = jobs_cancelled + (new.state = 'cancelled')::int - was_cancelled
        WHERE id = new.workflow_id
        RETURNING * INTO w;
    ELSE
        SELECT * INTO w FROM ojs.workflows WHERE id = new.workflow_id FOR UPDATE;
    END IF;
    IF w.id IS NULL OR w.state <> 'running' OR new.state NOT IN ('completed', 'discarded', 'cancelled') THEN
        RETURN NULL;
    END IF;

    IF new.workflow_callback IS NOT NULL THEN
        -- A batch settles when the callbacks it released have: failed if one of them did.
        IF NOT EXISTS (SELECT 1 FROM ojs.jobs WHERE workflow_id = w.id AND workflow_callback IS NOT NULL
                       AND state NOT IN ('completed', 'discarded', 'cancelled')) THEN
            UPDATE ojs.workflows SET completed_at = now(),
                state = CASE WHEN EXISTS (SELECT 1 FROM ojs.jobs WHERE workflow_id = w.id
                                          AND workflow_callback IS NOT NULL AND state <> 'completed')
                             THEN 'failed' ELSE 'completed' END
            WHERE id = w.id;
        END IF;
        RETURN NULL;
    END IF;

    IF w.type = 'chain' THEN
        IF new.state <> 'completed' THEN
            -- The chain stops: later steps never run.
            UPDATE ojs.workflows SET state = 'failed', completed_at = now() WHERE id = w.id;
            UPDATE ojs.jobs SET state = 'cancelled', cancelled_at = now()
            WHERE workflow_id = w.id AND state = 'pending';
        ELSIF w.jobs_completed = w.jobs_total THEN
            UPDATE ojs.workflows SET state = 'completed', completed_at = now() WHERE id = w.id;
        ELSE
            -- The next step sees every earlier step's result, indexed by step.
            UPDATE ojs.jobs
            SET state = CASE WHEN run_at > now() THEN 'scheduled' ELSE 'available' END,
                envelope = envelope || jsonb_build_object('parent_results',
                    (SELECT jsonb_agg(coalesce(p.result, 'null') ORDER BY p.workflow_step) FROM ojs.jobs p
                     WHERE p.workflow_id = w.id AND p.workflow_step <= new.workflow_step))
            WHERE workflow_id = w.id AND workflow_step = new.workflow_step + 1 AND state = 'pending';
        END IF;
        RETURN NULL;
    END IF;

    IF w.jobs_completed + w.jobs_failed + w.jobs_cancelled < w.jobs_total THEN
        RETURN NULL;
    END IF;
    released := 0;
    IF w.type = 'batch' THEN
        -- Callbacks see every job's result (null for a job that failed), indexed by job.
        WITH fired AS (
            UPDATE ojs.jobs
            SET state = CASE WHEN run_at > now() THEN 'scheduled' ELSE 'available' END,
                envelope = envelope || jsonb_build_object('parent_results',
                    (SELECT jsonb_agg(coalesce(p.result, 'null') ORDER BY p.workflow_step) FROM ojs.jobs p
                     WHERE p.workflow_id = w.id AND p.workflow_callback IS NULL))
            WHERE workflow_id = w.id AND state = 'pending'
              AND (workflow_callback = 'on_complete'
                   OR (workflow_callback = 'on_success' AND w.jobs_completed = w.jobs_total)
                   OR (workflow_callback = 'on_failure' AND w.jobs_completed < w.jobs_total))
            RETURNING 1
        )
        SELECT count(*) INTO released FROM fired;
        -- The callbacks whose condition did not hold were never enqueued, as far as anyone sees.
        DELETE FROM ojs.jobs WHERE workflow_id = w.id AND workflow_callback IS NOT NULL AND state = 'pending';
    END IF;
    IF released = 0 THEN
        UPDATE ojs.workflows SET completed_at = now(),
            state = CASE WHEN w.jobs_completed = w.jobs_total THEN 'completed' ELSE 'failed' END
        WHERE id = w.id;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER workflow_job_settled
    AFTER UPDATE OF state ON ojs.jobs
    FOR EACH ROW
    WHEN (new.workflow_id IS NOT NULL
          AND (old.state IN ('completed', 'discarded', 'cancelled')) <> (new.state IN ('completed', 'discarded', 'cancelled')))
    EXECUTE FUNCTION ojs.workflow_job_settled();

-- A workflow step as GET /workflows/:id shows it, in the workflow spec's step states.
CREATE FUNCTION ojs.workflow_entry_json(j ojs.jobs) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'index', j.workflow_step,
        'callback', j.workflow_callback,
        'type', j.type,
        'state', CASE j.state WHEN 'pending' THEN 'waiting' WHEN 'discarded' THEN 'failed'
                              WHEN 'available' THEN 'pending' WHEN 'scheduled' THEN 'pending'
                              WHEN 'retryable' THEN 'pending' ELSE j.state END,
        'result', j.result,
        'error', CASE WHEN j.state = 'discarded' THEN j.error END,
        'started_at', ojs.ts(j.started_at),
        'completed_at', ojs.ts(j.completed_at)
    )) || jsonb_build_object('job_id', CASE WHEN j.state <> 'pending' THEN j.id END)
$$;

CREATE FUNCTION ojs.workflow_json(w ojs.workflows) RETURNS jsonb LANGUAGE sql STABLE AS $$
    WITH members AS (
        SELECT j.workflow_step, j.workflow_callback, j.id, j.state, j.attempt, j.error, j.started_at,
               ojs.workflow_entry_json(j) AS entry
        FROM ojs.jobs j WHERE j.workflow_id = w.id
    ), summary AS (
        SELECT coalesce(jsonb_agg(entry ORDER BY workflow_step) FILTER (WHERE workflow_callback IS NULL), '[]') AS jobs,
               jsonb_agg(entry ORDER BY workflow_callback) FILTER (WHERE workflow_callback IS NOT NULL) AS callbacks,
               min(started_at) AS started_at,
               min(workflow_step) FILTER (WHERE state = 'discarded' AND workflow_callback IS NULL) AS failed_step,
               jsonb_agg(id ORDER BY workflow_step) FILTER (WHERE state = 'discarded') AS failed_ids,
               jsonb_agg(jsonb_build_object('job_id', id, 'attempt', attempt,
                                            'code', coalesce(error ->> 'code', error ->> 'type', 'error'),
                                            'message', coalesce(error ->> 'message', ''))
                         ORDER BY workflow_step) FILTER (WHERE state = 'discarded') AS errors
        FROM members
    )
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'id', w.id,
        'type', w.type,
        'name', w.name,
        'state', w.state,
        'jobs_total', w.jobs_total,
        'jobs_completed', w.jobs_completed,
        'jobs_failed', w.jobs_failed,
        'jobs_cancelled', w.jobs_cancelled,
        'steps_total', CASE WHEN w.type = 'chain' THEN w.jobs_total END,
        'steps_completed', CASE WHEN w.type = 'chain' THEN w.jobs_completed END,
        'callbacks', s.callbacks,
        'failed_step_index', CASE WHEN w.type = 'chain' THEN s.failed_step END,
        'failed_job_ids', s.failed_ids,
        'errors', s.errors,
        'created_at', ojs.ts(w.created_at),
        'started_at', ojs.ts(s.started_at),
        'completed_at', ojs.ts(w.completed_at),
        'cancelled_at', ojs.ts(w.cancelled_at),
        'metadata', jsonb_build_object(
            'created_at', ojs.ts(w.created_at), 'started_at', ojs.ts(s.started_at),
            'completed_at', ojs.ts(w.completed_at), 'cancelled_at', ojs.ts(w.cancelled_at),
            'job_count', w.jobs_total, 'completed_count', w.jobs_completed, 'failed_count', w.jobs_failed)
    )) || jsonb_build_object(CASE WHEN w.type = 'chain' THEN 'steps' ELSE 'jobs' END, s.jobs)
    FROM summary s
$$;

-- A claim that lapses on the job's last attempt spends it: the job reads as discarded, as the
-- promotion will make it, rather than as available forever.
CREATE OR REPLACE FUNCTION ojs.job_json(j ojs.jobs) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT j.envelope || jsonb_strip_nulls(jsonb_build_object(
        'id', j.id,
        'type', j.type,
        'queue', j.queue,
        'priority', j.priority,
        'state', CASE
            WHEN j.state = 'active' AND j.visible_until < now() AND j.attempt >= j.max_attempts THEN 'discarded'
            WHEN j.state = 'active' AND j.visible_until < now() THEN 'available'
            WHEN j.state IN ('scheduled', 'retryable') AND j.run_at <= now() THEN 'available'
            ELSE j.state END,
        'attempt', j.attempt,
        'max_attempts', j.max_attempts,
        'created_at', ojs.ts(j.created_at),
        'enqueued_at', ojs.ts(j.created_at),
        'scheduled_at', CASE WHEN j.state = 'scheduled' THEN ojs.ts(j.run_at) END,
        'next_attempt_at', CASE WHEN j.state = 'retryable' THEN ojs.ts(j.run_at) END,
        'started_at', ojs.ts(j.started_at),
        'completed_at', ojs.ts(j.completed_at),
        'cancelled_at', ojs.ts(j.cancelled_at),
        'discarded_at', CASE WHEN j.state = 'discarded' THEN ojs.ts(j.completed_at) END,
        'expires_at', ojs.ts(j.expires_at),
        'worker_id', CASE WHEN j.state = 'active' THEN j.worker_id END,
        'visible_until', CASE WHEN j.state = 'active' THEN ojs.ts(j.visible_until) END,
        'workflow_id', j.workflow_id,
        'retry_delay_ms', j.retry_delay_ms,
        'result', j.result,
        'error', CASE WHEN j.state = 'active' AND j.visible_until < now()
                      THEN jsonb_build_object('code', 'visibility_timeout', 'type', 'visibility_timeout',
                                              'message', 'the claim lapsed before an ack, nack or heartbeat')
                      ELSE j.error END,
        'errors', CASE WHEN jsonb_array_length(j.errors) > 0 THEN j.errors END
    ))
$$;

-- Workers as their heartbeats describe them (worker protocol, ext-graceful-shutdown): a worker
-- that is not running (quiet, drain, terminate), or that an operator told to quiet or terminate,
-- is given no new jobs.
CREATE TABLE ojs.workers (
    id          text PRIMARY KEY,
    state       text NOT NULL CHECK (state IN ('running', 'quiet', 'drain', 'terminate')),
    directive   text CHECK (directive IN ('quiet', 'terminate')),
    active_jobs int,
    last_beat   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workers_last_beat ON ojs.workers (last_beat);

CREATE FUNCTION ojs.worker_json(w ojs.workers) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'id', w.id, 'worker_id', w.id, 'state', w.state, 'directive', coalesce(w.directive, 'continue'),
        'active_jobs', w.active_jobs, 'last_heartbeat_at', ojs.ts(w.last_beat)))
$$;

-- Rate limits (ext-rate-limiting): jobs that name a key share its limits on starts. A claim
-- takes its starts from the key's row with one UPDATE whose WHERE and SET see the row's latest
-- version, so concurrent fetchers never start more than the limits allow; finishing (or losing)
-- a claim gives the slot back in the same transaction (trigger below).
ALTER TABLE ojs.jobs ADD COLUMN rate_key text;
CREATE INDEX jobs_rate_key ON ojs.jobs (rate_key, state) WHERE rate_key IS NOT NULL;
CREATE TABLE ojs.rate_limits (
    key            text PRIMARY KEY,
    concurrency    int,                 -- most active jobs at once; NULL: no limit
    rate           int,                 -- most starts per window; NULL: no limit
    rate_period_ms bigint,
    throttle_ms    bigint,              -- least time between starts; NULL: none
    active         int NOT NULL DEFAULT 0,
    -- A fixed window that opens at the first start after the previous one closed.
    window_start   timestamptz NOT NULL DEFAULT '-infinity',
    window_count   int NOT NULL DEFAULT 0,
    next_start     timestamptz NOT NULL DEFAULT '-infinity',
    -- Starts the last claim took (set and read back by the claim's UPDATE).
    granted        int NOT NULL DEFAULT 0
);

-- How many more jobs of the key may start now.
CREATE FUNCTION ojs.rate_room(r ojs.rate_limits) RETURNS int LANGUAGE sql STABLE AS $$
    SELECT greatest(0, least(
        coalesce(r.concurrency - r.active, 2147483647),
        CASE WHEN r.rate IS NULL THEN 2147483647
             WHEN now() >= r.window_start + r.rate_period_ms * interval '1 ms' THEN r.rate
             ELSE r.rate - r.window_count END,
        CASE WHEN r.throttle_ms IS NULL THEN 2147483647 WHEN now() >= r.next_start THEN 1 ELSE 0 END))
$$;

CREATE FUNCTION ojs.rate_limit_released() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ojs.rate_limits SET active = greatest(active - 1, 0) WHERE key = old.rate_key;
    RETURN NULL;
END $$;

CREATE TRIGGER rate_limit_released
    AFTER UPDATE OF state ON ojs.jobs
    FOR EACH ROW
    WHEN (old.rate_key IS NOT NULL AND old.state = 'active' AND new.state <> 'active')
    EXECUTE FUNCTION ojs.rate_limit_released();
CREATE TRIGGER rate_limit_released_by_delete
    AFTER DELETE ON ojs.jobs
    FOR EACH ROW
    WHEN (old.rate_key IS NOT NULL AND old.state = 'active')
    EXECUTE FUNCTION ojs.rate_limit_released();

CREATE FUNCTION ojs.rate_limit_json(r ojs.rate_limits) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'key', r.key,
        'concurrency', CASE WHEN r.concurrency IS NOT NULL THEN jsonb_build_object(
            'limit', r.concurrency, 'active', r.active, 'available', greatest(r.concurrency - r.active, 0)) END,
        'rate', CASE WHEN r.rate IS NOT NULL THEN jsonb_build_object(
            'limit', r.rate, 'period_ms', r.rate_period_ms,
            'current_count', CASE WHEN now() >= r.window_start + r.rate_period_ms * interval '1 ms' THEN 0
                                  ELSE r.window_count END,
            'window_resets_at', CASE WHEN now() < r.window_start + r.rate_period_ms * interval '1 ms'
                                     THEN ojs.ts(r.window_start + r.rate_period_ms * interval '1 ms') END,
            'window_resets_unix', ceil(extract(epoch FROM greatest(now(),
                                       r.window_start + r.rate_period_ms * interval '1 ms')))::bigint) END,
        'throttle', CASE WHEN r.throttle_ms IS NOT NULL THEN jsonb_build_object(
            'interval_ms', r.throttle_ms, 'next_allowed_at', ojs.ts(greatest(r.next_start, now()))) END,
        'room', ojs.rate_room(r),
        'waiting_count', (SELECT count(*) FROM ojs.jobs j WHERE j.rate_key = r.key AND j.state = 'available')))
$$;
