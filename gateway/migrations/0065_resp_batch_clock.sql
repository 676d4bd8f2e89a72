-- One clock per batch (layout v65): pgvs3.resp_now() (functions/resp_keys.sql) is the instant a
-- batch's first load fixed for its transaction, which resp_check, resp_type and the list and set
-- functions judge expiry by, where each call read clock_timestamp() afresh: a script or
-- MULTI/EXEC now judges every key at one instant, as Redis 7.0 does.
SELECT 1;
