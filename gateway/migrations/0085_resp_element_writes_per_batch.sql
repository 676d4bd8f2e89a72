-- A batch's hash and sorted-set writes in one call each (issue 39): functions/resp_hash.sql's
-- pgvs3.resp_hash_apply and functions/resp_zset.sql's pgvs3.resp_zset_apply take every key a
-- batch's script runs wrote (arrays by key, each element with its key) instead of one key a
-- call, and the keys' part, functions/resp_keys.sql's pgvs3.resp_keys_begin and
-- pgvs3.resp_keys_end, is set-based over the keys (a key's row updated once for its version and
-- its encoding). The one-key forms stay callable for gateways of layout v84 (resp_apply_begin
-- and resp_apply_end serve the list and stream writes). Function files only.
SELECT 1;
