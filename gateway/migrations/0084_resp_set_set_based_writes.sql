-- A script run's set writes set-based (issue 39): functions/resp_set.sql gains
-- pgvs3.resp_set_apply, which writes what a run's speculated SADD and SREM calls changed of one
-- set in one call (the members removed, each checked to be there, the members added, each
-- checked to be new, the key and its intset judged once), instead of replaying each call in
-- resp_set (its key's part resp_apply_begin and resp_apply_end, resp_keys.sql, as
-- hashes'). Function files only.
SELECT 1;
