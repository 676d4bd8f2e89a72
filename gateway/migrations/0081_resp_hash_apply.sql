-- A script run's hash writes set-based (issue 39): functions/resp_hash.sql gains
-- pgvs3.resp_hash_apply, which writes what a run's speculated HSET, HSETNX, HINCRBY and HDEL
-- calls changed of one hash in one call, each row only where it still holds the value the run
-- found, instead of replaying each call in pgvs3.resp_hash. Function files only.
SELECT 1;
