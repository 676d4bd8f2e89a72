-- Layout v25: OJS jobs belong to a tenant (the `X-OJS-Tenant` header of the request that enqueued
-- them, `default` without one), and every job route is scoped to the request's tenant (issue 21).
-- The column's default is a constant, so adding it rewrites nothing; existing jobs and jobs that
-- bucket notifications enqueue belong to `default`.
ALTER TABLE ojs.jobs ADD COLUMN tenant text NOT NULL DEFAULT 'default';

-- The claim reads one (queue, tenant) range in priority then FIFO order: the tenant is an
-- equality column between the queue and the order, so a fetch costs one index range scan as
-- before, whichever the tenant.
DROP INDEX ojs.jobs_claim;
CREATE INDEX jobs_claim ON ojs.jobs (queue, tenant, priority DESC, seq) WHERE state = 'available';
