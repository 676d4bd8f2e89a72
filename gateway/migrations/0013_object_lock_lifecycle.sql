-- Layout v13: S3 object lock and lifecycle, per bucket.
-- `object_lock`: NULL when the bucket has no object lock; otherwise its configuration as
-- stored by store/lock.rs (`{}` enabled without a default retention, or `{"mode": ..., "days":
-- n}` / `{"mode": ..., "years": n}`). A bucket with object lock keeps versioning Enabled: S3
-- never lets it be suspended, and the constraint makes every writer respect that.
-- `lifecycle`: NULL, or the bucket's lifecycle rules as store/lifecycle.rs stores them; the
-- leader's maintenance pass applies them.
-- A version's retention and legal hold live in its `meta` (keys `rt`, `lh`): they move with
-- the row between `objects` and `versions`. functions/objects.sql gains object_locked(), which
-- every statement that deletes a version for good checks; functions/catalog.sql's
-- drop_bucket refuses to force-drop a bucket that still holds a locked version; keep_version and
-- retire_body use static statements for the ordinary namespace `s3p` (planned once per session).
ALTER TABLE pgvs3.buckets ADD COLUMN object_lock jsonb;
ALTER TABLE pgvs3.buckets ADD CONSTRAINT object_lock_keeps_versioning
    CHECK (object_lock IS NULL OR versioning = 'Enabled');
ALTER TABLE pgvs3.buckets ADD COLUMN lifecycle jsonb;
-- `notifications`: NULL, or the bucket's notification rules as store/notifications.rs stores
-- them; writes of a namespace whose buckets have rules run the objects_event / versions_event
-- triggers (functions/objects.sql), which enqueue OJS jobs in the writing transaction.
ALTER TABLE pgvs3.buckets ADD COLUMN notifications jsonb;
