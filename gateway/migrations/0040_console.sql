-- Layout v40: what the console reads for issue 36's last pages (docs/console.md).
-- A queue's jobs in one state, newest first, a page at a time by keyset (`seq < last seen`):
-- with this index a page costs the same at a million jobs in that state as at ten, where
-- jobs_queue_state (queue, state) would sort every one of them for each page.
CREATE INDEX jobs_listing ON ojs.jobs (queue, tenant, state, seq);
-- Each gateway's recent heartbeat summaries, oldest first, in a ring the heartbeat bounds to
-- its last 61 (five minutes): the fleet page charts every gateway's request rate, latency and
-- cache share from it, where `stats` alone is one moment's totals.
ALTER TABLE pgvs3.gateways ADD COLUMN history jsonb NOT NULL DEFAULT '[]';
