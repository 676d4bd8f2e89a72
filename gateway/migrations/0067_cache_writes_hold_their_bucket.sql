-- A cache's fills and write-backs hold their bucket as S3 writes do (layout v67): the cache
-- tier's entry and range-chunk writes filter on bucket_held() (store/cache.rs), and
-- functions/catalog.sql gains bucket_to_drop(), drop_bucket's locking (the bucket's write lock
-- and keyspace lock exclusively, then its row), which drop_origin now takes too before it looks
-- for pending write-backs, then dropping the bucket as a forced drop_bucket does (its multipart
-- uploads in progress with it). A fill whose entry waited for a row while DeleteBucket ran, or a
-- write-back committed while the OriginCache was removed, left an entry (with its body), range
-- chunks, or an acknowledged body and its outbox row of no bucket.
SELECT 1;
