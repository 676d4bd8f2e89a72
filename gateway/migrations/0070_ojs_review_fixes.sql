-- A cancelled workflow's jobs all end cancelled (layout v70). functions/ojs.sql gains
-- workflow_cancelled(), which the nack and promotion use to cancel a cancelled workflow's job
-- that fails, lapses or comes due rather than retry or offer it (it was retried, then waited
-- unclaimed until the reaper deleted its workflow, and ran again), and
-- workflow_cancel_leftovers(), with which a workflow's cancel, once committed, cancels the jobs
-- its own transaction skipped because another one held them (they stayed available for ever).
-- The reaper keeps a workflow while it has a job not finished.
-- ojs.bounded_depth() makes enqueues into one bounded queue of one tenant take turns (an
-- advisory lock to their commit, the depth counted after it): two enqueues that overlapped both
-- saw room for one.
-- Expired jobs are discarded without a completed_at (they never ran; the conformance suite's
-- expired job shows none), and the reaper picked finished jobs by coalesce(completed_at,
-- cancelled_at): expired jobs were never reaped. It now goes by their expires_at too, along
-- this index.
DROP INDEX ojs.jobs_finished;
CREATE INDEX jobs_finished ON ojs.jobs (coalesce(completed_at, cancelled_at, expires_at))
    WHERE state IN ('completed', 'discarded', 'cancelled');
