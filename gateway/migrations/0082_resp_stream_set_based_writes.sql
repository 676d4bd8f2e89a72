-- A script run's stream writes set-based (issue 39): functions/resp_stream.sql gains
-- pgvs3.resp_stream_apply, which writes what a run's speculated XADD and XTRIM calls changed of
-- one stream in one call (entries, nodes, header, key), checking the stream and every node it
-- touches were as the run found them, instead of replaying each call in resp_stream. Function
-- files only.
SELECT 1;
