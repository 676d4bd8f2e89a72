-- The RESP stream function's XADD answers, when it trims, how many entries each command's
-- trim removed (functions/resp_stream.sql), so that the gateway emits Redis's `xtrim`
-- keyspace event after `xadd` (also for XADDs coalesced into one call). No table changes.
SELECT 1;
