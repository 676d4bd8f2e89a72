-- Consecutive SADDs, SREMs, HDELs, ZREMs and SPOPs on one key run as one call (layout v61,
-- resp/coalesce.rs): functions/resp_set.sql, resp_hash.sql and resp_zset.sql answer, when
-- ints[1] is 1, the members or fields SADD added and SREM, HDEL and ZREM removed, and SPOP's
-- count of SPOPs without one rebuilds no intset.
SELECT 1;
