-- Layout v23: cache buckets raise bucket notifications as other buckets do, and OJS jobs may
-- depend on other jobs (issue 21).
--
-- A write to a cache bucket that waits for its origin before it is acknowledged (write-through,
-- or write-back below the threshold) is staged in `s3w` and its upload queued; its object event
-- is owed until that upload settles, since the write is undone (and its client told it failed)
-- when the upload fails. `owed_event` holds it meanwhile ({"name", "size", "etag"}); it is
-- raised in the transaction that settles the upload, or in the one of a newer write that
-- supersedes the body first (whose writer then succeeds), and dropped with an undone write.
-- The functions (functions/cache.sql, functions/objects.sql, functions/events.sql) carry the rest.
ALTER TABLE pgvs3.origin_outbox ADD COLUMN owed_event jsonb;

-- Job dependencies (`options.depends_on` of the OJS HTTP binding): a job that names other jobs
-- waits `pending` (outside any workflow) until every one of them completes, and is cancelled when
-- one is discarded or cancelled. A dependency must exist when the job is enqueued, so every edge
-- points at an older job and no cycle can form. Dependencies are not foreign keys: a settled
-- dependency may be pruned with the other finished jobs.
CREATE TABLE ojs.job_dependencies (
    job_id     text NOT NULL REFERENCES ojs.jobs (id) ON DELETE CASCADE,
    depends_on text NOT NULL,
    PRIMARY KEY (job_id, depends_on)
);
CREATE INDEX job_dependencies_depends_on ON ojs.job_dependencies (depends_on);
-- The function is functions/ojs.sql's; the trigger is created here, over a stub the function
-- file replaces once the migrations have run.
CREATE FUNCTION ojs.dependency_settled() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER jobs_dependency_settled AFTER UPDATE OF state ON ojs.jobs FOR EACH ROW
    WHEN (new.state IN ('completed', 'discarded', 'cancelled') AND old.state IS DISTINCT FROM new.state)
    EXECUTE FUNCTION ojs.dependency_settled();
