-- Writers hold the bucket they write to (layout v62): functions/catalog.sql gains bucket_held(),
-- which takes a bucket's keyspace lock shared and answers whether the bucket exists as committed
-- then; every statement that creates an object or an upload filters on it, and drop_bucket takes
-- the lock exclusively before it looks for rows. A PUT that read the bucket row and then waited
-- for a key's row while DeleteBucket ran committed an object of no bucket and answered 200.
-- drop_bucket also deletes the bucket's multipart uploads in progress and their parts, as AWS S3
-- does with a general purpose bucket (they were left behind for the reaper).
SELECT 1;
