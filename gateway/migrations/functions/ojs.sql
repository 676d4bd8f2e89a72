-- OJS (Open Job Specification) job server: JSON renderings and the workflow/rate-limit triggers.
--
-- Triggers (migrations 0005 and 0008) and what the Rust SQL (gateway/src/ojs/) must keep true:
--   job_cancelled, workflow_job_started, workflow_job_settled, rate_limit_released
--       AFTER UPDATE OF state ON ojs.jobs, FOR EACH ROW, each WHEN a particular state change:
--       a job's state changes only by an UPDATE that names `state` in its SET list, never by
--       deleting and re-inserting the row, so every transition is seen once.
--   rate_limit_released_by_delete  AFTER DELETE ON ojs.jobs, WHEN the job was active with a
--       rate key: deleting an active job gives its rate-limit slot back.
--   workflow_settled  AFTER UPDATE OF state, started_at ON ojs.workflows: a workflow's state and
--       start time are set by UPDATE only (the functions below and the queue's own statements).
--   workflow_tenant  AFTER INSERT ON ojs.workflows, a constraint trigger deferred to the commit,
--       WHEN the row has no tenant: a workflow's jobs are inserted in the transaction that
--       inserts it (so they are there at its commit), and the current gateway always writes the
--       tenant (so the trigger fires only for a layout-v55 gateway's workflows).
-- TRUNCATE (the test reset) fires none of them, and needs none: it empties every table at once.
-- The current definition of every function of this area. Re-applied (CREATE OR REPLACE) by the
-- migration runner after the numbered migrations, in the same advisory-locked transaction, when
-- this file's digest differs from the one the database recorded (gateway/src/pg/migrate.rs).
-- Edit the function here, never in a numbered migration, and add a numbered migration with the
-- change (it bumps the layout version, which is what keeps an older gateway from re-applying
-- its older copy). A migration that needs a function as it runs keeps its own definition.

-- RFC 3339 in UTC, whatever the session's TimeZone; microseconds unless the time is whole seconds.
CREATE OR REPLACE FUNCTION ojs.ts(t timestamptz) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC',
                   CASE WHEN date_trunc('second', t) = t THEN 'YYYY-MM-DD"T"HH24:MI:SS"Z"'
                        ELSE 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"' END)
$$;

-- ojs-cron §2.2's system-managed fields: `last_run_at` is null until the first trigger and
-- `next_run_at` null while the schedule is disabled (§8.5), so those two are kept when null.
CREATE OR REPLACE FUNCTION ojs.cron_json(c ojs.cron) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT c.definition || jsonb_strip_nulls(jsonb_build_object(
        'name', c.name,
        'enabled', c.enabled,
        'run_count', c.run_count,
        'timezone', coalesce(c.definition ->> 'timezone', 'UTC'),
        'overlap_policy', coalesce(c.definition ->> 'overlap_policy', 'allow'),
        'created_at', ojs.ts(c.created_at)
    )) || jsonb_build_object(
        'next_run_at', CASE WHEN c.enabled AND c.next_run < 'infinity' THEN ojs.ts(c.next_run) END,
        'last_run_at', ojs.ts(c.last_run)
    )
$$;

-- The job side: a member job settles its workflow's member; a batch callback settles the batch
-- when the callbacks it released have (failed if one of them did).
CREATE OR REPLACE FUNCTION ojs.workflow_job_settled() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w ojs.workflows;
BEGIN
    IF new.workflow_callback IS NULL THEN
        PERFORM ojs.workflow_member_settled(new.workflow_id, new.workflow_step, new.type, old.state, new.state,
                                            round(extract(epoch FROM now() - new.started_at) * 1000)::bigint);
        RETURN NULL;
    END IF;
    SELECT * INTO w FROM ojs.workflows WHERE id = new.workflow_id FOR UPDATE;
    IF w.id IS NULL OR w.state <> 'running' OR new.state NOT IN ('completed', 'discarded', 'cancelled') THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM ojs.jobs WHERE workflow_id = w.id AND workflow_callback IS NOT NULL
                   AND state NOT IN ('completed', 'discarded', 'cancelled')) THEN
        UPDATE ojs.workflows SET completed_at = now(),
            state = CASE WHEN EXISTS (SELECT 1 FROM ojs.jobs WHERE workflow_id = w.id
                                      AND workflow_callback IS NOT NULL AND state <> 'completed')
                         THEN 'failed' ELSE 'completed' END
        WHERE id = w.id;
    END IF;
    RETURN NULL;
END $$;

-- A workflow step as GET /workflows/:id shows it, in the workflow spec's step states.
CREATE OR REPLACE FUNCTION ojs.workflow_entry_json(j ojs.jobs) RETURNS jsonb LANGUAGE sql STABLE AS $$
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

-- A workflow as GET /workflows/:id shows it; a nested workflow is a member entry holding the
-- nested workflow as GET shows it.
CREATE OR REPLACE FUNCTION ojs.workflow_json(w ojs.workflows) RETURNS jsonb LANGUAGE sql STABLE AS $$
    WITH members AS (
        SELECT j.workflow_step, j.workflow_callback, j.id, j.state, j.attempt, j.error, j.started_at,
               ojs.workflow_entry_json(j) AS entry
        FROM ojs.jobs j WHERE j.workflow_id = w.id
        UNION ALL
        SELECT c.parent_step, NULL, c.id, CASE c.state WHEN 'failed' THEN 'discarded' ELSE c.state END, NULL,
               jsonb_build_object('code', 'workflow_failed', 'message', 'nested workflow ' || c.id || ' failed'),
               c.started_at,
               jsonb_build_object('index', c.parent_step, 'type', c.type, 'job_id', NULL, 'workflow_id', c.id,
                   'state', CASE c.state WHEN 'pending' THEN 'waiting' WHEN 'running' THEN 'active' ELSE c.state END,
                   'workflow', ojs.workflow_json(c))
        FROM ojs.workflows c WHERE c.parent_id = w.id
    ), summary AS (
        SELECT coalesce(jsonb_agg(entry ORDER BY workflow_step) FILTER (WHERE workflow_callback IS NULL), '[]') AS jobs,
               jsonb_agg(entry ORDER BY workflow_callback) FILTER (WHERE workflow_callback IS NOT NULL) AS callbacks,
               min(started_at) AS started_at,
               min(workflow_step) FILTER (WHERE state = 'discarded' AND workflow_callback IS NULL) AS failed_step,
               jsonb_agg(id ORDER BY workflow_step) FILTER (WHERE state = 'discarded') AS failed_ids,
               jsonb_agg(jsonb_strip_nulls(jsonb_build_object('job_id', id, 'attempt', attempt,
                                            'code', coalesce(error ->> 'code', error ->> 'type', 'error'),
                                            'message', coalesce(error ->> 'message', ''))))
                         FILTER (WHERE state = 'discarded') AS errors
        FROM members
    )
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'id', w.id,
        'type', w.type,
        'name', w.name,
        'state', w.state,
        'parent_workflow_id', w.parent_id,
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
        'started_at', ojs.ts(coalesce(w.started_at, s.started_at)),
        'completed_at', ojs.ts(w.completed_at),
        'cancelled_at', ojs.ts(w.cancelled_at),
        'metadata', jsonb_build_object(
            'created_at', ojs.ts(w.created_at), 'started_at', ojs.ts(coalesce(w.started_at, s.started_at)),
            'completed_at', ojs.ts(w.completed_at), 'cancelled_at', ojs.ts(w.cancelled_at),
            'job_count', w.jobs_total, 'completed_count', w.jobs_completed, 'failed_count', w.jobs_failed)
    )) || jsonb_build_object(CASE WHEN w.type = 'chain' THEN 'steps' ELSE 'jobs' END, s.jobs)
    FROM summary s
$$;

-- A workflow belongs to the tenant of its jobs (layout v58). Gateways of layout v55 insert
-- workflows without a tenant during a rolling upgrade; this gives such a workflow, at its
-- commit, the tenant of any job of its tree (its own jobs, or those of the workflows nested in
-- it: a workflow of nested workflows only has none of its own). Every tree has a job, so
-- `default` is only for a tree whose jobs are gone.
CREATE OR REPLACE FUNCTION ojs.workflow_tenant_of_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ojs.workflows SET tenant = coalesce((
        WITH RECURSIVE tree AS (
            SELECT new.id AS id
            UNION ALL
            SELECT c.id FROM ojs.workflows c JOIN tree t ON c.parent_id = t.id
        )
        SELECT j.tenant FROM ojs.jobs j JOIN tree t ON j.workflow_id = t.id LIMIT 1), 'default')
    WHERE id = new.id AND tenant IS NULL;
    RETURN NULL;
END $$;

-- Workers and rate-limit keys are per tenant (layout v52): the row of a tenant's worker or key
-- is keyed `tenant name`, and `default`'s by the bare name unless it holds a space. Tenant names
-- hold no spaces, so a key splits at its first space, and no bare name takes another tenant's
-- form. Keyed so, rather than by (tenant, name), because the previous layout's gateways name
-- ON CONFLICT (id) and (key) in their heartbeats and in every enqueue: during a rolling upgrade
-- they keep working, on `default`'s rows as before.
CREATE OR REPLACE FUNCTION ojs.tenant_key(tenant text, name text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN tenant = 'default' AND strpos(name, ' ') = 0 THEN name ELSE tenant || ' ' || name END
$$;

CREATE OR REPLACE FUNCTION ojs.key_tenant(key text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN strpos(key, ' ') = 0 THEN 'default' ELSE split_part(key, ' ', 1) END
$$;

CREATE OR REPLACE FUNCTION ojs.key_name(key text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT substr(key, strpos(key, ' ') + 1)
$$;

CREATE OR REPLACE FUNCTION ojs.worker_json(w ojs.workers) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'id', ojs.key_name(w.id), 'worker_id', ojs.key_name(w.id), 'tenant_id', ojs.key_tenant(w.id),
        'state', w.state, 'directive', coalesce(w.directive, 'continue'),
        'active_jobs', w.active_jobs, 'last_heartbeat_at', ojs.ts(w.last_beat)))
$$;

-- How many more jobs of the key may start now.
CREATE OR REPLACE FUNCTION ojs.rate_room(r ojs.rate_limits) RETURNS int LANGUAGE sql STABLE AS $$
    SELECT greatest(0, least(
        coalesce(r.concurrency - r.active, 2147483647),
        CASE WHEN r.rate IS NULL THEN 2147483647
             WHEN now() >= r.window_start + r.rate_period_ms * interval '1 ms' THEN r.rate
             ELSE r.rate - r.window_count END,
        CASE WHEN r.throttle_ms IS NULL THEN 2147483647 WHEN now() >= r.next_start THEN 1 ELSE 0 END))
$$;

CREATE OR REPLACE FUNCTION ojs.rate_limit_released() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ojs.rate_limits SET active = greatest(active - 1, 0) WHERE key = old.rate_key;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION ojs.rate_limit_json(r ojs.rate_limits) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'key', ojs.key_name(r.key),
        'tenant_id', ojs.key_tenant(r.key),
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

-- An event as clients see it, CloudEvents-shaped: the polled and streamed event APIs
-- (crates/pgvs3-ojs/src/ojs/engine/events.rs) and webhook deliveries (ojs.event_webhooks in
-- functions/events.sql) all render it here, the one definition. Takes the columns of an
-- `ojs.events` row, as the webhook trigger reads them from a transition table.
CREATE OR REPLACE FUNCTION ojs.event_json(event_id text, seq bigint, kind text, at timestamptz, queue text,
                                          job_id text, data jsonb) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('id', event_id, 'seq', seq, 'type', kind, 'specversion', '1.0',
        'source', 'ojs://pgvs3/gateway', 'time', ojs.ts(at),
        'subject', coalesce(job_id, data ->> 'workflow_id', data ->> 'cron_name', queue, data ->> 'worker_id'),
        'data', data)
$$;

-- ojs-events §8.3: every event of a job whose meta carries trace context has its trace_id.
CREATE OR REPLACE FUNCTION ojs.trace_of(envelope jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN envelope -> 'meta' ?| ARRAY['trace_id', 'traceparent']
                THEN jsonb_build_object('trace_id', coalesce(envelope #>> '{meta,trace_id}',
                                                              split_part(envelope #>> '{meta,traceparent}', '-', 2)))
                ELSE '{}' END
$$;

-- job.cancelled, however a job gets cancelled: its own cancel, its workflow's, a chain that
-- stopped, a unique job replaced.
CREATE OR REPLACE FUNCTION ojs.job_cancelled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    VALUES (gen_random_uuid()::text, 'job.cancelled', new.queue, new.id,
            jsonb_strip_nulls(jsonb_build_object(
                'job_id', new.id, 'job_type', new.type, 'queue', new.queue, 'previous_state', old.state,
                'workflow_id', new.workflow_id)) || ojs.trace_of(new.envelope));
    RETURN NULL;
END $$;

-- A workflow's results up to member `upto`, by member index: a job's result (null unless it
-- completed), or a nested workflow's own results.
CREATE OR REPLACE FUNCTION ojs.workflow_results(wid text, upto int) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(r ORDER BY step), '[]') FROM (
        SELECT workflow_step AS step, coalesce(result, 'null') AS r FROM ojs.jobs
        WHERE workflow_id = wid AND workflow_callback IS NULL AND workflow_step <= upto
        UNION ALL
        SELECT parent_step, CASE WHEN state = 'completed' THEN ojs.workflow_results(id, 2147483647) ELSE 'null' END
        FROM ojs.workflows WHERE parent_id = wid AND parent_step <= upto
    ) members
$$;

-- Releases members `lo`..`hi` of a workflow: a job becomes available (or scheduled) with
-- `inputs` as its parent_results, a nested workflow starts with them.
CREATE OR REPLACE FUNCTION ojs.workflow_release(wid text, lo int, hi int, inputs jsonb) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    released int;
    child text;
BEGIN
    WITH job AS (
        UPDATE ojs.jobs
        SET state = CASE WHEN run_at > now() THEN 'scheduled' ELSE 'available' END,
            envelope = CASE WHEN inputs IS NULL THEN envelope
                            ELSE envelope || jsonb_build_object('parent_results', inputs) END
        WHERE workflow_id = wid AND workflow_step BETWEEN lo AND hi AND workflow_callback IS NULL
          AND state = 'pending'
        RETURNING id, queue, type, envelope
    ), event AS (
        INSERT INTO ojs.events (id, type, queue, job_id, data)
        SELECT gen_random_uuid()::text, 'job.enqueued', queue, id,
               jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue, 'workflow_id', wid)
               || ojs.trace_of(envelope)
        FROM job
    )
    SELECT count(*) INTO released FROM job;
    FOR child IN SELECT id FROM ojs.workflows
                 WHERE parent_id = wid AND parent_step BETWEEN lo AND hi AND state = 'pending'
                 ORDER BY parent_step LOOP
        PERFORM ojs.workflow_start(child, inputs);
        released := released + 1;
    END LOOP;
    RETURN released;
END $$;

-- A nested workflow's turn: a chain releases its first step, a group or batch all its jobs.
CREATE OR REPLACE FUNCTION ojs.workflow_start(wid text, inputs jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    w ojs.workflows;
BEGIN
    UPDATE ojs.workflows SET state = 'running' WHERE id = wid AND state = 'pending' RETURNING * INTO w;
    IF w.id IS NOT NULL THEN
        PERFORM ojs.workflow_release(wid, 0, CASE WHEN w.type = 'chain' THEN 0 ELSE w.jobs_total - 1 END, inputs);
    END IF;
END $$;

-- The depth of bounded queue `q` for tenant `t` (ext-backpressure: available, scheduled and
-- retryable jobs), counted up to `bound`, once this transaction is the only enqueuer into it: the
-- enqueue's insert statement calls it and inserts only if its jobs fit, and holds the lock to
-- its commit, so two enqueues cannot both see room for one. Volatile, so its count reads a
-- snapshot taken after the lock (the calling statement's predates it) and sees what the
-- enqueuer before committed.
CREATE OR REPLACE FUNCTION ojs.bounded_depth(q text, t text, bound bigint) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('ojs.bounded_depth ' || ojs.tenant_key(t, q), 0));
    RETURN (SELECT count(*) FROM (SELECT 1 FROM ojs.jobs j WHERE j.queue = q AND j.tenant = t
                                  AND j.state IN ('available', 'scheduled', 'retryable') LIMIT bound) d);
END $$;

-- Whether a job's workflow (NULL for a job outside one) was cancelled: such a job that fails,
-- lapses or comes due is cancelled rather than run again.
CREATE OR REPLACE FUNCTION ojs.workflow_cancelled(wid text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT wid IS NOT NULL AND EXISTS (SELECT 1 FROM ojs.workflows w WHERE w.id = wid AND w.state = 'cancelled')
$$;

-- Cancels what has not run of a workflow: its waiting or queued jobs, and its nested workflows
-- (with theirs). The caller settles the workflow itself first, so nothing is released after.
-- Jobs another transaction holds are skipped (waiting for them here could deadlock with their
-- holder's trigger waiting for the workflow row): the workflow is then marked has_leftovers,
-- and the sweep (ojs.workflow_sweep) cancels them once this commits, or later, by the
-- maintenance pass, if that sweep never ran or failed.
CREATE OR REPLACE FUNCTION ojs.workflow_cancel_members(wid text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    skipped boolean;
BEGIN
    WITH RECURSIVE tree AS (
        SELECT id FROM ojs.workflows WHERE parent_id = wid AND state IN ('pending', 'running')
        UNION ALL
        SELECT w.id FROM ojs.workflows w JOIN tree t ON w.parent_id = t.id WHERE w.state IN ('pending', 'running')
    ), settled AS (
        UPDATE ojs.workflows SET state = 'cancelled', cancelled_at = now(), completed_at = now()
        WHERE id IN (SELECT id FROM tree)
        RETURNING id
    ), doomed AS (
        SELECT id FROM ojs.jobs
        WHERE (workflow_id = wid OR workflow_id IN (SELECT id FROM settled))
          AND state IN ('pending', 'available', 'scheduled', 'retryable')
    ), cancelled AS (
        -- The state again: a job whose holder committed a move out of these states is left be.
        UPDATE ojs.jobs SET state = 'cancelled', cancelled_at = now()
        WHERE id IN (SELECT id FROM ojs.jobs
                     WHERE id IN (SELECT id FROM doomed) AND state IN ('pending', 'available', 'scheduled', 'retryable')
                     FOR UPDATE SKIP LOCKED)
        RETURNING id
    )
    SELECT (SELECT count(*) FROM doomed) > (SELECT count(*) FROM cancelled) INTO skipped;
    IF skipped THEN
        UPDATE ojs.workflows SET has_leftovers = true WHERE id = wid;
    END IF;
END $$;

-- The jobs that a stop of the workflows `roots` (a cancel, or a chain that failed) left behind,
-- there and in the workflows nested in them: those of a cancelled workflow not yet finished (no
-- claim takes them; a promotion cancels them when they come due), and those of a failed or
-- completed one still waiting (nothing releases them). Not locked.
CREATE OR REPLACE FUNCTION ojs.workflow_leftovers(roots text[]) RETURNS SETOF text LANGUAGE sql STABLE AS $$
    WITH RECURSIVE tree AS (
        SELECT id, state FROM ojs.workflows WHERE id = ANY(roots)
        UNION ALL
        SELECT w.id, w.state FROM ojs.workflows w JOIN tree t ON w.parent_id = t.id
    )
    SELECT j.id FROM ojs.jobs j JOIN tree t ON j.workflow_id = t.id
    WHERE CASE t.state WHEN 'cancelled' THEN j.state IN ('pending', 'available', 'scheduled', 'retryable')
                       WHEN 'failed' THEN j.state = 'pending'
                       WHEN 'completed' THEN j.state = 'pending'
                       ELSE false END
$$;

-- Cancels the leftovers of the workflows `roots` and clears the has_leftovers of each that has
-- none left. `wait`: whether to wait for the transactions that hold them (after the stop
-- committed, in the request that made it) or skip them for a later pass (the maintenance
-- pass, which must not stall behind one). Locks them all, in id order, before cancelling any
-- (whose triggers lock the workflows): it holds nothing those holders wait for. Nobody moves
-- such a job back out of these states, so one sweep that waits leaves none. Returns how many
-- jobs it cancelled.
CREATE OR REPLACE FUNCTION ojs.workflow_sweep(roots text[], wait boolean) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    ids text[];
    swept int;
BEGIN
    IF wait THEN
        SELECT array_agg(id) INTO ids FROM (
            SELECT id FROM ojs.jobs
            WHERE id IN (SELECT ojs.workflow_leftovers(roots)) AND state IN ('pending', 'available', 'scheduled', 'retryable')
            ORDER BY id FOR UPDATE) held;
    ELSE
        SELECT array_agg(id) INTO ids FROM (
            SELECT id FROM ojs.jobs
            WHERE id IN (SELECT ojs.workflow_leftovers(roots)) AND state IN ('pending', 'available', 'scheduled', 'retryable')
            ORDER BY id FOR UPDATE SKIP LOCKED) free;
    END IF;
    UPDATE ojs.jobs SET state = 'cancelled', cancelled_at = now()
    WHERE id = ANY(ids) AND state IN ('pending', 'available', 'scheduled', 'retryable');
    GET DIAGNOSTICS swept = ROW_COUNT;
    UPDATE ojs.workflows w SET has_leftovers = false
    WHERE w.id = ANY(roots) AND w.has_leftovers AND NOT EXISTS (SELECT 1 FROM ojs.workflow_leftovers(ARRAY[w.id]));
    RETURN swept;
END $$;

-- The sweep after a stop committed, by the request that made it: cancels the leftovers of
-- workflow `wid` and of its ancestors that the stop marked (cancelling a nested workflow fails
-- the chain it is a step of), waiting for their holders.
CREATE OR REPLACE FUNCTION ojs.workflow_cancel_leftovers(wid text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    roots text[];
BEGIN
    WITH RECURSIVE up AS (
        SELECT id, parent_id, has_leftovers FROM ojs.workflows WHERE id = wid
        UNION ALL
        SELECT w.id, w.parent_id, w.has_leftovers FROM ojs.workflows w JOIN up ON w.id = up.parent_id
    )
    SELECT array_agg(id) INTO roots FROM up WHERE has_leftovers;
    IF roots IS NOT NULL THEN
        PERFORM ojs.workflow_sweep(roots, true);
    END IF;
END $$;

-- The maintenance pass's sweep: up to `batch` marked workflows, skipping the leftovers another
-- transaction holds (their workflows stay marked for the next pass). Returns how many jobs it
-- cancelled.
CREATE OR REPLACE FUNCTION ojs.workflow_sweep_marked(batch int) RETURNS int LANGUAGE sql AS $$
    SELECT ojs.workflow_sweep(ARRAY(SELECT id FROM ojs.workflows WHERE has_leftovers ORDER BY id LIMIT batch), false)
$$;

-- A member of a workflow (a job, or a nested workflow) changed outcome; outcomes are job
-- states (a nested workflow that failed counts as discarded). Keeps the counts and, when the
-- member settled, drives the workflow: a chain releases its next member with the results so far
-- or stops, a group settles with its last member, a batch then releases the callbacks that
-- apply. The workflow row is locked first (the UPDATE), so concurrent finishers of one group
-- take turns and exactly one of them sees the last member settle.
CREATE OR REPLACE FUNCTION ojs.workflow_member_settled(wid text, slot int, member_type text, was text, outcome text,
                                            took_ms bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    w ojs.workflows;
    released int := 0;
BEGIN
    UPDATE ojs.workflows
    SET jobs_completed = jobs_completed + (outcome = 'completed')::int - (was = 'completed')::int,
        jobs_failed = jobs_failed + (outcome = 'discarded')::int - (was = 'discarded')::int,
        jobs_cancelled = jobs_cancelled + (outcome = 'cancelled')::int - (was = 'cancelled')::int
    WHERE id = wid
    RETURNING * INTO w;
    IF w.id IS NULL OR w.state <> 'running' OR outcome NOT IN ('completed', 'discarded', 'cancelled') THEN
        RETURN;
    END IF;
    IF outcome = 'completed' THEN
        INSERT INTO ojs.events (id, type, data)
        VALUES (gen_random_uuid()::text, 'workflow.step_completed', jsonb_build_object(
            'workflow_id', w.id, 'workflow_name', w.name, 'step_id', slot::text, 'step_index', slot,
            'step_type', member_type, 'duration_ms', took_ms,
            'steps_remaining', w.jobs_total - w.jobs_completed - w.jobs_failed - w.jobs_cancelled));
    END IF;

    IF w.type = 'chain' THEN
        IF outcome <> 'completed' THEN
            -- The chain stops: later steps never run.
            UPDATE ojs.workflows SET state = 'failed', completed_at = now() WHERE id = w.id;
            PERFORM ojs.workflow_cancel_members(w.id);
        ELSIF w.jobs_completed = w.jobs_total THEN
            UPDATE ojs.workflows SET state = 'completed', completed_at = now() WHERE id = w.id;
        ELSE
            -- The next step sees every earlier step's result, indexed by step.
            PERFORM ojs.workflow_release(w.id, slot + 1, slot + 1, ojs.workflow_results(w.id, slot));
        END IF;
        RETURN;
    END IF;

    IF w.jobs_completed + w.jobs_failed + w.jobs_cancelled < w.jobs_total THEN
        RETURN;
    END IF;
    IF w.type = 'batch' THEN
        -- Callbacks see every member's result (null for one that failed), indexed by member.
        WITH fired AS (
            UPDATE ojs.jobs
            SET state = CASE WHEN run_at > now() THEN 'scheduled' ELSE 'available' END,
                envelope = envelope || jsonb_build_object('parent_results', ojs.workflow_results(w.id, 2147483647))
            WHERE workflow_id = w.id AND state = 'pending'
              AND (workflow_callback = 'on_complete'
                   OR (workflow_callback = 'on_success' AND w.jobs_completed = w.jobs_total)
                   OR (workflow_callback = 'on_failure' AND w.jobs_completed < w.jobs_total))
            RETURNING id, queue, type, envelope
        ), event AS (
            INSERT INTO ojs.events (id, type, queue, job_id, data)
            SELECT gen_random_uuid()::text, 'job.enqueued', queue, id,
                   jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue, 'workflow_id', w.id)
                   || ojs.trace_of(envelope)
            FROM fired
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
END $$;

-- The workflow side: workflow.started when its first job starts (and so its parents'),
-- workflow.completed / workflow.failed when it settles, and a nested workflow that settles
-- settles its member of the parent.
CREATE OR REPLACE FUNCTION ojs.workflow_settled() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    failure record;
BEGIN
    IF old.started_at IS NULL AND new.started_at IS NOT NULL THEN
        INSERT INTO ojs.events (id, type, data)
        VALUES (gen_random_uuid()::text, 'workflow.started', jsonb_build_object(
            'workflow_id', new.id, 'workflow_name', new.name, 'workflow_type', new.type, 'total_steps', new.jobs_total));
        UPDATE ojs.workflows SET started_at = new.started_at WHERE id = new.parent_id AND started_at IS NULL;
    END IF;
    IF new.state = old.state THEN
        RETURN NULL;
    END IF;
    IF new.state = 'completed' THEN
        INSERT INTO ojs.events (id, type, data)
        VALUES (gen_random_uuid()::text, 'workflow.completed', jsonb_build_object(
            'workflow_id', new.id, 'workflow_name', new.name, 'workflow_type', new.type, 'total_steps', new.jobs_total,
            'duration_ms', round(extract(epoch FROM now() - coalesce(new.started_at, new.created_at)) * 1000)::bigint));
    ELSIF new.state = 'failed' THEN
        -- The member that failed first (a callback for a batch whose callback failed).
        SELECT * INTO failure FROM (
            SELECT coalesce(workflow_callback, workflow_step::text) AS step_id, type, state,
                   coalesce(completed_at, cancelled_at) AS at, coalesce(error, '{}') AS error
            FROM ojs.jobs WHERE workflow_id = new.id AND state IN ('discarded', 'cancelled')
            UNION ALL
            SELECT parent_step::text, type, CASE state WHEN 'failed' THEN 'discarded' ELSE state END, completed_at,
                   jsonb_build_object('code', 'workflow_failed', 'message', 'nested workflow ' || id || ' ' || state)
            FROM ojs.workflows WHERE parent_id = new.id AND state IN ('failed', 'cancelled')
        ) f ORDER BY (state <> 'discarded'), at LIMIT 1;
        INSERT INTO ojs.events (id, type, data)
        VALUES (gen_random_uuid()::text, 'workflow.failed', jsonb_build_object(
            'workflow_id', new.id, 'workflow_name', new.name, 'workflow_type', new.type,
            'failed_step_id', failure.step_id, 'failed_step_type', failure.type,
            'error', jsonb_build_object(
                'code', coalesce(failure.error ->> 'code', failure.error ->> 'type',
                                 CASE WHEN failure.state = 'cancelled' THEN 'cancelled' ELSE 'error' END),
                'message', coalesce(failure.error ->> 'message',
                                    CASE WHEN failure.state = 'cancelled' THEN 'the step was cancelled' ELSE '' END))));
    END IF;
    IF new.parent_id IS NOT NULL AND new.state IN ('completed', 'failed', 'cancelled') THEN
        PERFORM ojs.workflow_member_settled(new.parent_id, new.parent_step, new.type,
            CASE old.state WHEN 'failed' THEN 'discarded' ELSE old.state END,
            CASE new.state WHEN 'failed' THEN 'discarded' ELSE new.state END,
            round(extract(epoch FROM now() - coalesce(new.started_at, new.created_at)) * 1000)::bigint);
    END IF;
    RETURN NULL;
END $$;

-- A workflow starts with its first claimed job; the workflow_settled trigger then logs workflow.started.
-- A trigger rather than part of the claim, so that claims of jobs outside workflows pay nothing.
CREATE OR REPLACE FUNCTION ojs.workflow_job_started() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ojs.workflows SET started_at = now() WHERE id = new.workflow_id AND started_at IS NULL;
    RETURN NULL;
END $$;

-- Job dependencies (layout v23, `options.depends_on`; table ojs.job_dependencies). A job that
-- waits for others is inserted `pending` with no workflow; these functions decide its fate.
-- Trigger: jobs_dependency_settled, AFTER UPDATE OF state ON ojs.jobs, FOR EACH ROW WHEN the
-- state becomes completed, discarded or cancelled (migration 0023). What must stay true:
--   * a dependency's settling and a dependent's enqueue never miss each other: the enqueue
--     (add_dependencies) locks the dependencies FOR SHARE before it looks at their states, and
--     the trigger locks the waiting dependents before it does, each look a statement of its own
--     (a fresh snapshot in READ COMMITTED, so it sees what the other committed while it waited);
--   * cancelling a dependent cancels every job waiting on it in the same statement (the closure),
--     so the trigger's nesting stays two deep however long a chain of dependencies is.

-- Releases `job` when all its dependencies completed, cancels it and what waits on it when one
-- was discarded or cancelled; otherwise it keeps waiting.
CREATE OR REPLACE FUNCTION ojs.resolve_dependencies(job text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    failed record;
BEGIN
    SELECT p.id, p.state INTO failed
      FROM ojs.job_dependencies d JOIN ojs.jobs p ON p.id = d.depends_on
     WHERE d.job_id = job AND p.state IN ('discarded', 'cancelled')
     ORDER BY p.id LIMIT 1;
    IF FOUND THEN
        WITH RECURSIVE doomed(id) AS (
            SELECT job
            UNION
            SELECT d.job_id FROM ojs.job_dependencies d JOIN doomed ON d.depends_on = doomed.id)
        UPDATE ojs.jobs SET state = 'cancelled', cancelled_at = now(),
               error = jsonb_build_object('code', 'dependency_failed', 'type', 'dependency_failed',
                                          'message', format('dependency %s was %s', failed.id, failed.state),
                                          'details', jsonb_build_object('dependency_id', failed.id,
                                                                        'dependency_state', failed.state))
         WHERE id IN (SELECT id FROM doomed) AND state = 'pending' AND workflow_id IS NULL;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM ojs.job_dependencies d JOIN ojs.jobs p ON p.id = d.depends_on
                WHERE d.job_id = job AND p.state <> 'completed') THEN
        RETURN;
    END IF;
    WITH released AS (
        UPDATE ojs.jobs SET state = CASE WHEN run_at > now() THEN 'scheduled' ELSE 'available' END
         WHERE id = job AND state = 'pending' AND workflow_id IS NULL
        RETURNING id, queue, type, priority, envelope)
    INSERT INTO ojs.events (id, type, queue, job_id, data)
    SELECT gen_random_uuid()::text, 'job.enqueued', queue, id,
           jsonb_build_object('job_id', id, 'job_type', type, 'queue', queue, 'priority', priority)
           || ojs.trace_of(envelope)
      FROM released;
END $$;

-- Records what the just-inserted `job` waits for and resolves it at once (its dependencies may
-- all be settled already). Returns the ids that name no job of the same tenant (then nothing is
-- recorded, and the caller refuses the enqueue): another tenant's job is as good as absent.
CREATE OR REPLACE FUNCTION ojs.add_dependencies(job text, deps text[]) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    missing text[];
BEGIN
    PERFORM 1 FROM ojs.jobs WHERE id = ANY(deps) ORDER BY id FOR SHARE;
    SELECT coalesce(array_agg(d ORDER BY n), '{}') INTO missing
      FROM unnest(deps) WITH ORDINALITY AS t(d, n)
     WHERE NOT EXISTS (SELECT 1 FROM ojs.jobs p WHERE p.id = d
                          AND p.tenant = (SELECT w.tenant FROM ojs.jobs w WHERE w.id = job));
    IF cardinality(missing) > 0 THEN
        RETURN missing;
    END IF;
    INSERT INTO ojs.job_dependencies (job_id, depends_on) SELECT job, d FROM unnest(deps) d;
    PERFORM ojs.resolve_dependencies(job);
    RETURN missing;
END $$;

CREATE OR REPLACE FUNCTION ojs.dependency_settled() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    dependent text;
BEGIN
    FOR dependent IN SELECT j.id FROM ojs.job_dependencies d JOIN ojs.jobs j ON j.id = d.job_id
                      WHERE d.depends_on = new.id AND j.state = 'pending'
                      ORDER BY j.id FOR UPDATE OF j LOOP
        PERFORM ojs.resolve_dependencies(dependent);
    END LOOP;
    RETURN NULL;
END $$;
