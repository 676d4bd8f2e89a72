-- Layout v30: functions/resp_zset.sql applies ZADD's pairs in one statement (unnest and window
-- functions for a member named twice) instead of a statement per pair: ZADD was quadratic in its
-- argument count (40,000 members over 30 s, now under 1 s). No table changes.
SELECT 1;
