-- Layout v17: one delivery outbox for HTTP webhooks, its two kinds of endpoint, and job progress.
--
-- `pgvs3.outbox` holds one row per delivery still owed: written in the transaction of the state
-- change that causes it (a job's lifecycle event, a committed object event), so a write that
-- rolls back owes nothing. Every gateway delivers: it claims due rows (FOR UPDATE SKIP LOCKED),
-- pushes their `due_at` past its HTTP timeout as a lease, POSTs them, and deletes each row once
-- its endpoint answered 2xx, or counts the failure, backs off, and after the last attempt marks
-- it `dead` (kept, with its last error, for an operator to read or retry). A gateway that dies
-- mid-delivery leaves its rows to come due again when the lease ends: at least once.
--
-- Each row names exactly one endpoint: an OJS webhook subscription (`webhook_id`) or a bucket
-- notification target (`target`); dropping the endpoint drops what is still owed to it.
-- OJS webhook subscriptions (ojs-webhooks.md §5.1): event patterns, an optional `filter`
-- ({"queues": [...], "job_types": [...]}), and `active` (an inactive one is owed nothing).
CREATE TABLE ojs.webhooks (
    id         text PRIMARY KEY,
    url        text NOT NULL,
    events     text[] NOT NULL,
    filter     jsonb,
    active     boolean NOT NULL DEFAULT true,
    secret     text NOT NULL,
    metadata   jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Webhook endpoints of bucket notifications, registered by name (pgvs3.put_webhook_target) and
-- named by `arn:pgvs3:webhook:::<name>` in a bucket's notification configuration.
CREATE TABLE pgvs3.webhook_targets (
    name       text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_.-]{1,64}$'),
    url        text NOT NULL CHECK (url ~ '^https?://[^/?#]+'),
    secret     text,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pgvs3.outbox (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id text NOT NULL,
    webhook_id  text REFERENCES ojs.webhooks (id) ON DELETE CASCADE,
    target      text REFERENCES pgvs3.webhook_targets (name) ON DELETE CASCADE ON UPDATE CASCADE,
    event_type  text NOT NULL,
    body        jsonb NOT NULL,
    attempts    int NOT NULL DEFAULT 0,
    due_at      timestamptz NOT NULL DEFAULT now(),
    dead        boolean NOT NULL DEFAULT false,
    last_error  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((webhook_id IS NULL) <> (target IS NULL))
);
-- What the deliverers poll: the due rows that are not dead, soonest first.
CREATE INDEX outbox_due ON pgvs3.outbox (due_at) WHERE NOT dead;
-- The cascades from an endpoint dropped.
CREATE INDEX outbox_webhook ON pgvs3.outbox (webhook_id) WHERE webhook_id IS NOT NULL;
CREATE INDEX outbox_target ON pgvs3.outbox (target) WHERE target IS NOT NULL;

-- A job's latest progress report (ojs-progress): the attempt it belongs to, `progress` (0–1,
-- never decreasing within the attempt), `data`, the last `checkpoint` (kept across attempts) and
-- `updated_at`. ojs.job_json shows the current attempt's only.
ALTER TABLE ojs.jobs ADD COLUMN progress jsonb;
