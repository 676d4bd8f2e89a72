-- A script run's hash and sorted set writes set-based (issue 39): functions/resp_hash.sql and
-- resp_zset.sql gain pgvs3.resp_hash_apply and pgvs3.resp_zset_apply (with their key's part,
-- resp_apply_begin and resp_apply_end in resp_keys.sql), which write what a run's speculated
-- calls changed of one key in one call, each row only where it still holds the value the run
-- found, instead of replaying each call in its family function. Function files only.
SELECT 1;
