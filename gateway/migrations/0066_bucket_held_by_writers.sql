-- Writers hold the bucket they write to (layout v66): functions/catalog.sql gains bucket_held(),
-- which takes the bucket's write lock shared (an advisory lock of its own, apart from the
-- keyspace lock, so that a write into a never-versioned bucket waiting for a key's row does not
-- hold up a versioning switch) and answers whether the bucket exists as committed then; every
-- statement that creates an object or an upload filters on it, and drop_bucket takes the write
-- lock and the keyspace lock exclusively before it looks for rows. A PUT that read the bucket
-- row and then waited for a key's row while DeleteBucket ran committed an object of no bucket
-- and answered 200. drop_bucket also deletes the bucket's multipart uploads in progress and their
-- parts, as AWS S3 does with a general purpose bucket (they were left behind for the reaper).
SELECT 1;
