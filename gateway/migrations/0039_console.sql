-- Layout v37: what the console reads for issue 36's last pages (docs/console.md).
-- A queue's jobs in one state, newest first, a page at a time by keyset (`seq < last seen`):
-- with this index a page costs the same at a million jobs in that state as at ten, where
-- jobs_queue_state (queue, state) would sort every one of them for each page.
CREATE INDEX jobs_listing ON ojs.jobs (queue, tenant, state, seq);
