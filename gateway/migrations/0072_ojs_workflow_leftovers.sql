-- A stopped workflow's leftovers are swept until none is left (layout v72). A workflow's cancel,
-- and a chain's stop when a step fails for good, skip the jobs another transaction holds at that
-- moment; the cancel swept them after its commit, but a sweep that failed (the request then
-- answered 500 for a cancel that had happened) or never ran left them for ever, and a failing
-- chain had no sweep at all: its held step stayed pending, and the reaper never took its
-- workflow. Such a stop now marks the workflow has_leftovers; the sweep after its commit clears
-- the mark, and the maintenance pass sweeps the workflows still marked (functions/ojs.sql:
-- workflow_leftovers, workflow_sweep, workflow_sweep_marked).
ALTER TABLE ojs.workflows ADD COLUMN has_leftovers boolean NOT NULL DEFAULT false;
CREATE INDEX workflows_has_leftovers ON ojs.workflows (id) WHERE has_leftovers;
-- Stops from before this layout whose leftovers are still there.
UPDATE ojs.workflows w SET has_leftovers = true
WHERE w.state IN ('cancelled', 'failed', 'completed')
  AND EXISTS (SELECT 1 FROM ojs.jobs j WHERE j.workflow_id = w.id
              AND CASE w.state WHEN 'cancelled' THEN j.state IN ('pending', 'available', 'scheduled', 'retryable')
                               ELSE j.state = 'pending' END);
