-- OJS (Open Job Spec) job queue: jobs, queue settings, events, cron schedules and workflows.
-- Runs once, inside the migration transaction, under the migration advisory lock.

CREATE SCHEMA ojs;

-- One row per job. `envelope` keeps what the client sent (args, meta, options and any unknown
-- fields, which the spec says to preserve); the columns are what the server manages.
CREATE TABLE ojs.jobs (
    id            text PRIMARY KEY,
    seq           bigint GENERATED ALWAYS AS IDENTITY,   -- FIFO order within a priority
    queue         text NOT NULL,
    type          text NOT NULL,
    state         text NOT NULL CHECK (state IN ('scheduled', 'available', 'pending', 'active', 'completed',
                                                 'retryable', 'cancelled', 'discarded')),
    priority      int NOT NULL DEFAULT 0,
    attempt       int NOT NULL DEFAULT 0,
    max_attempts  int NOT NULL,
    envelope      jsonb NOT NULL,
    -- When a scheduled or retryable job becomes available.
    run_at        timestamptz NOT NULL,
    -- When the current claim lapses (state active); a later claim bumps `attempt`, which fences
    -- the earlier worker's ack/nack.
    visible_until timestamptz,
    visibility_ms int NOT NULL,
    retry_delay_ms bigint,
    worker_id     text,
    expires_at    timestamptz,
    unique_key    text,
    workflow_id   text,
    dead_letter   boolean NOT NULL DEFAULT false,
    result        jsonb,
    error         jsonb,
    errors        jsonb NOT NULL DEFAULT '[]',
    created_at    timestamptz NOT NULL DEFAULT now(),
    started_at    timestamptz,
    completed_at  timestamptz,
    cancelled_at  timestamptz
);

-- The claim: first in priority order, then FIFO, per queue; matches the claim's ORDER BY.
CREATE INDEX jobs_claim ON ojs.jobs (queue, priority DESC, seq) WHERE state = 'available';
-- Promotion of scheduled and retryable jobs whose time has come.
CREATE INDEX jobs_due ON ojs.jobs (run_at) WHERE state IN ('scheduled', 'retryable');
-- Claims whose visibility lapsed.
CREATE INDEX jobs_lapsed ON ojs.jobs (visible_until) WHERE state = 'active';
CREATE INDEX jobs_unique ON ojs.jobs (unique_key, created_at) WHERE unique_key IS NOT NULL;
CREATE INDEX jobs_dead_letter ON ojs.jobs (completed_at) WHERE dead_letter;
CREATE INDEX jobs_workflow ON ojs.jobs (workflow_id) WHERE workflow_id IS NOT NULL;
CREATE INDEX jobs_expiring ON ojs.jobs (expires_at) WHERE expires_at IS NOT NULL AND state IN ('available', 'scheduled');
CREATE INDEX jobs_queue_state ON ojs.jobs (queue, state);

CREATE TABLE ojs.queues (
    name       text PRIMARY KEY,
    paused     boolean NOT NULL DEFAULT false,
    config     jsonb NOT NULL DEFAULT '{}'
);

CREATE TABLE ojs.events (
    seq     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id      text NOT NULL,
    type    text NOT NULL,
    queue   text,
    job_id  text,
    time    timestamptz NOT NULL DEFAULT now(),
    data    jsonb NOT NULL
);
CREATE INDEX events_type ON ojs.events (type, seq);
CREATE INDEX events_time ON ojs.events (time);

CREATE TABLE ojs.cron (
    name       text PRIMARY KEY,
    definition jsonb NOT NULL,
    next_run   timestamptz NOT NULL,
    last_run   timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE ojs.workflows (
    id         text PRIMARY KEY,
    definition jsonb NOT NULL,
    state      text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz
);

-- RFC 3339 in UTC, whatever the session's TimeZone; microseconds unless the time is whole seconds.
CREATE FUNCTION ojs.ts(t timestamptz) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC',
                   CASE WHEN date_trunc('second', t) = t THEN 'YYYY-MM-DD"T"HH24:MI:SS"Z"'
                        ELSE 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"' END)
$$;

-- The job as the HTTP binding returns it. A lapsed claim or a due scheduled/retryable job reads
-- as available even before a fetch moves it, so reads need no writes (and work on a standby).
CREATE FUNCTION ojs.job_json(j ojs.jobs) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT j.envelope || jsonb_strip_nulls(jsonb_build_object(
        'id', j.id,
        'type', j.type,
        'queue', j.queue,
        'priority', j.priority,
        'state', CASE
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

CREATE FUNCTION ojs.cron_json(c ojs.cron) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT c.definition || jsonb_strip_nulls(jsonb_build_object(
        'name', c.name,
        'enabled', true,
        'timezone', coalesce(c.definition ->> 'timezone', 'UTC'),
        'overlap_policy', coalesce(c.definition ->> 'overlap_policy', 'allow'),
        'next_run_at', CASE WHEN c.next_run < 'infinity' THEN ojs.ts(c.next_run) END,
        'last_run_at', ojs.ts(c.last_run),
        'created_at', ojs.ts(c.created_at)
    ))
$$;
