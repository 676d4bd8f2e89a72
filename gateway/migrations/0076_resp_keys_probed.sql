-- Keys probed one at a time (issue 39): resp_check's WRONGTYPE test, SMEMBERS' and the other set
-- commands' live sources and ZUNION's source types look each named key up by the primary key
-- (functions/resp_keys.sql, resp_set.sql, resp_zset.sql) instead of `key = ANY (keys)`, whose
-- generic plan, made while resp_keys was small or never analyzed, read every key of the bucket.
-- ZUNION, ZINTER and ZDIFF (which delete no expired key) no longer answer WRONGTYPE for an
-- expired source of another type. HDEL, SREM, ZREM, ZMSCORE, the sorted-set pops and range
-- removals find each named member by the primary key too (a generic plan of `member = ANY
-- (args)` walked every member of the key).
SELECT 1;
