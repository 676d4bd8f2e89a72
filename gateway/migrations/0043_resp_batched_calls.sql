-- The RESP family functions' HSET and ZADD can answer pair by pair (functions/resp_hash.sql,
-- functions/resp_zset.sql): the gateway runs consecutive HSETs (ZADDs with the same options) on
-- one key, from one pipeline or from many connections' batches sharing a commit, as one call
-- and gives each command its own count (issue 39). No table changes.
SELECT 1;
