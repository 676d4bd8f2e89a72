-- Layout v21: two more functions of the SQL control API, so the operator writes what the S3
-- path writes through the same code (functions only; no table changes):
--   pgvs3.set_key_policy            (functions/catalog.sql) a key's own policy, the operator's
--                                   Bucket `accessPrefixes`;
--   pgvs3.put_bucket_notifications (functions/events.sql) a bucket's notification rules, their
--                                   targets checked and the event triggers installed, the
--                                   operator's Bucket `notifications`.
SELECT 1;
