-- Layout v52: OJS workers and rate-limit keys belong to a tenant, as jobs do (layout v25). Both
-- were keyed by the name a request gives, so a tenant naming another tenant's worker id could
-- set its state (a heartbeat reporting quiet or terminate stops its fetches) and read its
-- directive, and a tenant naming another tenant's rate-limit key shared its limits: it could
-- spend the other's starts, or redefine its limits with its own next job. Now each is keyed
-- (tenant, name), and every statement that reads or writes them names the request's tenant.
--
-- Existing rows, which record no tenant, go to the tenants that use them, so what an operator
-- set keeps applying where it applied:
--   * a worker row to every tenant whose jobs that worker id has claimed (any state), and stays
--     `default`'s only when it claimed `default` jobs or none at all;
--   * a rate-limit key to every tenant with jobs naming it, its limits and current window copied
--     to each (so no tenant may start more in the current window than the shared key allowed),
--     its active count recounted per tenant from the active jobs; a key no job names stays
--     `default`'s.
-- Both tables are small (workers are reaped after the retention, keys are as many as the
-- names clients give); the one-off scans of ojs.jobs that find their tenants run once.

ALTER TABLE ojs.workers DROP CONSTRAINT workers_pkey;
ALTER TABLE ojs.workers ADD COLUMN tenant text NOT NULL DEFAULT 'default';

WITH users AS (
    SELECT DISTINCT j.worker_id AS id, j.tenant FROM ojs.jobs j
    WHERE j.worker_id IN (SELECT id FROM ojs.workers)
), copied AS (
    INSERT INTO ojs.workers (tenant, id, state, directive, active_jobs, last_beat)
    SELECT u.tenant, w.id, w.state, w.directive, w.active_jobs, w.last_beat
    FROM ojs.workers w JOIN users u ON u.id = w.id
    WHERE u.tenant <> 'default'
)
DELETE FROM ojs.workers w
WHERE w.tenant = 'default'
  AND EXISTS (SELECT 1 FROM users u WHERE u.id = w.id)
  AND NOT EXISTS (SELECT 1 FROM users u WHERE u.id = w.id AND u.tenant = 'default');

ALTER TABLE ojs.workers ADD PRIMARY KEY (tenant, id);

ALTER TABLE ojs.rate_limits DROP CONSTRAINT rate_limits_pkey;
ALTER TABLE ojs.rate_limits ADD COLUMN tenant text NOT NULL DEFAULT 'default';

WITH users AS (
    SELECT DISTINCT j.rate_key AS key, j.tenant FROM ojs.jobs j WHERE j.rate_key IS NOT NULL
), copied AS (
    INSERT INTO ojs.rate_limits (tenant, key, concurrency, rate, rate_period_ms, throttle_ms, active,
                                 window_start, window_count, next_start, granted)
    SELECT u.tenant, r.key, r.concurrency, r.rate, r.rate_period_ms, r.throttle_ms, 0,
           r.window_start, r.window_count, r.next_start, 0
    FROM ojs.rate_limits r JOIN users u ON u.key = r.key
    WHERE u.tenant <> 'default'
)
DELETE FROM ojs.rate_limits r
WHERE r.tenant = 'default'
  AND EXISTS (SELECT 1 FROM users u WHERE u.key = r.key)
  AND NOT EXISTS (SELECT 1 FROM users u WHERE u.key = r.key AND u.tenant = 'default');

-- The active count per tenant: the active jobs holding a slot of the key (a statement of its
-- own, so it sees the rows copied above).
UPDATE ojs.rate_limits r
SET active = (SELECT count(*) FROM ojs.jobs j
              WHERE j.rate_key = r.key AND j.tenant = r.tenant AND j.state = 'active');

ALTER TABLE ojs.rate_limits ADD PRIMARY KEY (tenant, key);

-- A key's waiting jobs (the inspection's `waiting_count`) are its tenant's.
DROP INDEX ojs.jobs_rate_key;
CREATE INDEX jobs_rate_key ON ojs.jobs (rate_key, tenant, state) WHERE rate_key IS NOT NULL;
