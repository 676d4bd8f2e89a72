-- Values read by their position (issue 39): a coalesced HSET sorts only its fields and reads
-- each value once, by its position, as its row is inserted (functions/resp_hash.sql,
-- pgvs3.resp_hash_set), and XADD and RESTORE read each entry's fields element by element
-- (functions/resp_stream.sql, pgvs3.resp_stream_entries), where a slice of the arguments per
-- entry copied all of them each time. Function files only.
SELECT 1;
