-- Layout v23: cache buckets raise bucket notifications as other buckets do (issue 21).
--
-- A write to a cache bucket that waits for its origin before it is acknowledged (write-through,
-- or write-back below the threshold) is staged in `s3w` and its upload queued; its object event
-- is owed until that upload settles, since the write is undone (and its client told it failed)
-- when the upload fails. `owed_event` holds it meanwhile ({"name", "size", "etag"}); it is
-- raised in the transaction that settles the upload, or in the one of a newer write that
-- supersedes the body first (whose writer then succeeds), and dropped with an undone write.
-- The functions (functions/cache.sql, functions/objects.sql, functions/events.sql) carry the rest.
ALTER TABLE pgvs3.origin_outbox ADD COLUMN owed_event jsonb;
