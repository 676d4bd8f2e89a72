-- Layout v58: OJS workflows belong to a tenant, as their jobs do (layout v25), and a queue's
-- depth bound (ext-backpressure) counts each tenant's jobs apart.
--
-- Workflows were read and cancelled by id alone: any tenant that held a workflow's id could read
-- its jobs' results and errors, or cancel it. Now `ojs.workflows.tenant` is the tenant that
-- created it, and the workflow routes see only the request's tenant's (another tenant's answers
-- 404, as a job does). The column stays nullable: gateways of layout v55 insert workflows
-- without it during a rolling upgrade, and `workflow_tenant` (below) gives such a workflow the
-- tenant of its jobs before their transaction commits (functions/ojs.sql,
-- `ojs.workflow_tenant_of_jobs`), so no committed workflow is without one.
ALTER TABLE ojs.workflows ADD COLUMN tenant text;

-- Existing workflows go to the tenant of their jobs: first those with jobs of their own, then a
-- workflow whose members are all nested workflows from its children, level by level (workflows
-- nest at most 4 levels, so 3 rounds reach the outermost). A workflow whose jobs were all reaped
-- already (finished, past the retention) is `default`'s.
UPDATE ojs.workflows w SET tenant = j.tenant
FROM (SELECT DISTINCT ON (workflow_id) workflow_id, tenant FROM ojs.jobs
      WHERE workflow_id IS NOT NULL ORDER BY workflow_id) j
WHERE j.workflow_id = w.id;
UPDATE ojs.workflows p SET tenant = c.tenant FROM ojs.workflows c
WHERE c.parent_id = p.id AND p.tenant IS NULL AND c.tenant IS NOT NULL;
UPDATE ojs.workflows p SET tenant = c.tenant FROM ojs.workflows c
WHERE c.parent_id = p.id AND p.tenant IS NULL AND c.tenant IS NOT NULL;
UPDATE ojs.workflows p SET tenant = c.tenant FROM ojs.workflows c
WHERE c.parent_id = p.id AND p.tenant IS NULL AND c.tenant IS NOT NULL;
UPDATE ojs.workflows SET tenant = 'default' WHERE tenant IS NULL;

-- This migration's own copy of the function (functions/ojs.sql holds the current one, which
-- says why it exists).
CREATE FUNCTION ojs.workflow_tenant_of_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
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

-- Deferred to the commit, when the workflow's jobs are in; fires only for rows inserted without
-- a tenant (a v55 gateway's), so a current gateway's workflows cost nothing more.
CREATE CONSTRAINT TRIGGER workflow_tenant
    AFTER INSERT ON ojs.workflows
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (new.tenant IS NULL)
    EXECUTE FUNCTION ojs.workflow_tenant_of_jobs();

-- The depth bound now counts the enqueuing tenant's waiting jobs of the queue, stopping at the
-- bound: the (queue, tenant) range of the console's `jobs_listing` index (layout v40), whatever
-- other tenants hold in the queue, so it needs no index of its own.
