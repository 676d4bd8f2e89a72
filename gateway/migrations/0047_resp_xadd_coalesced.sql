-- The RESP stream function's XADD can add a run of entries (functions/resp_stream.sql): the
-- gateway runs consecutive XADDs with `*` IDs and the same options on one stream, from one
-- pipeline or from many connections' batches sharing a commit, as one call and answers each
-- command its own ID (issue 39). A single XADD's call is as before. No table changes.
SELECT 1;
