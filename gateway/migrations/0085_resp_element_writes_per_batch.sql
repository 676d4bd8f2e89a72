-- A batch's hash, sorted-set and set writes in one call each (issue 39): pgvs3.resp_hash_apply
-- (functions/resp_hash.sql), pgvs3.resp_zset_apply (functions/resp_zset.sql) and
-- pgvs3.resp_set_apply (functions/resp_set.sql) take every key of their type a batch's script
-- runs wrote (arrays by key, each element with its key) instead of one key a call, and the
-- keys' part, pgvs3.resp_keys_begin and pgvs3.resp_keys_end (functions/resp_keys.sql), is
-- set-based over the keys (a key's row updated once for its version and its encoding). The
-- one-key forms stay callable for gateways of layout v84 (resp_apply_begin and resp_apply_end
-- serve the list and stream writes). Function files only.
SELECT 1;
