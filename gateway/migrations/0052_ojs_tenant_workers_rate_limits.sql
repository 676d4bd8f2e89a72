-- Layout v52: OJS workers and rate-limit keys belong to a tenant, as jobs do (layout v25). Both
-- were keyed by the name a request gives, so a tenant naming another tenant's worker id could
-- set its state (a heartbeat reporting quiet or terminate stops its fetches) and read its
-- directive, and a tenant naming another tenant's rate-limit key shared its limits: it could
-- spend the other's starts, or redefine its limits with its own next job.
--
-- Now the row of a tenant's worker or key is keyed `tenant name` (`ojs.tenant_key`, in
-- functions/ojs.sql, which says why this form and not a (tenant, name) key), and a job's
-- `rate_key` is its tenant's key in that form. Existing rows, which record no tenant, go to the
-- tenants that use them, so what an operator set keeps applying where it applied:
--   * a worker row to every tenant whose jobs that worker id claimed (any state), and stays
--     `default`'s only when it claimed `default` jobs or none at all;
--   * a rate-limit key to every tenant with jobs naming it, its limits and current window copied
--     to each (so no tenant may start more in the current window than the shared key allowed),
--     its active count recounted per tenant from the active jobs; a key no job names stays
--     `default`'s.
-- Both tables are small (workers are reaped after the retention, keys are as many as the names
-- clients give); the scans of ojs.jobs that find their tenants run once. The forms are written
-- out here, as this migration's own copy of ojs.tenant_key.

-- `default`'s worker ids that hold a space take the `default name` form.
UPDATE ojs.workers SET id = 'default ' || id WHERE strpos(id, ' ') > 0;

-- Every row is `default`'s now; its name is what follows a leading `default `, if any.
WITH users AS (
    SELECT DISTINCT j.worker_id AS name, j.tenant FROM ojs.jobs j
    WHERE j.worker_id IN (SELECT substr(id, strpos(id, ' ') + 1) FROM ojs.workers)
), copied AS (
    INSERT INTO ojs.workers (id, state, directive, active_jobs, last_beat)
    SELECT u.tenant || ' ' || u.name, w.state, w.directive, w.active_jobs, w.last_beat
    FROM ojs.workers w JOIN users u ON u.name = substr(w.id, strpos(w.id, ' ') + 1)
    WHERE u.tenant <> 'default'
)
DELETE FROM ojs.workers w
WHERE EXISTS (SELECT 1 FROM users u WHERE u.name = substr(w.id, strpos(w.id, ' ') + 1))
  AND NOT EXISTS (SELECT 1 FROM users u WHERE u.name = substr(w.id, strpos(w.id, ' ') + 1)
                                         AND u.tenant = 'default');

-- Rate-limit keys hold no spaces (the envelope's check), so every existing key is bare.
WITH users AS (
    SELECT DISTINCT j.rate_key AS key, j.tenant FROM ojs.jobs j WHERE j.rate_key IS NOT NULL
), copied AS (
    INSERT INTO ojs.rate_limits (key, concurrency, rate, rate_period_ms, throttle_ms, active,
                                 window_start, window_count, next_start, granted)
    SELECT u.tenant || ' ' || r.key, r.concurrency, r.rate, r.rate_period_ms, r.throttle_ms, 0,
           r.window_start, r.window_count, r.next_start, 0
    FROM ojs.rate_limits r JOIN users u ON u.key = r.key
    WHERE u.tenant <> 'default'
)
DELETE FROM ojs.rate_limits r
WHERE EXISTS (SELECT 1 FROM users u WHERE u.key = r.key)
  AND NOT EXISTS (SELECT 1 FROM users u WHERE u.key = r.key AND u.tenant = 'default');

-- Changing rate_key fires no trigger (they watch state).
UPDATE ojs.jobs SET rate_key = tenant || ' ' || rate_key WHERE rate_key IS NOT NULL AND tenant <> 'default';

UPDATE ojs.rate_limits r
SET active = (SELECT count(*) FROM ojs.jobs j WHERE j.rate_key = r.key AND j.state = 'active');
