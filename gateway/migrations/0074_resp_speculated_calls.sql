-- Speculated calls (issue 39; functions/resp_keys.sql, `pgvs3.resp_expect`): a script's typed
-- calls answered from the gateway's working set are sent later, in one round trip, each checked
-- against the answer the script was given; a difference aborts the transaction.
-- Also (functions/resp_list.sql): LINDEX, LSET, LRANGE and LREM with an index or count of
-- -2^63 computed past bigint's range and failed with `bigint out of range`; they answer as Redis
-- (nil, an empty array, every match removed from the tail); so does ZRANGE to rank 2^63 - 1
-- (functions/resp_zset.sql), which answers the whole set.
-- And (functions/resp_stream.sql): XADD's `*` takes the batch's clock (`pgvs3.resp_now()`), as
-- the working set predicts it; the IDs of one batch share its millisecond and count up.
SELECT 1;
