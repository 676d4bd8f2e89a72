-- Speculated calls (issue 39; functions/resp_keys.sql, `pgvs3.resp_expect`): a script's typed
-- calls answered from the gateway's working set are sent later, in one round trip, each checked
-- against the answer the script was given; a difference aborts the transaction.
SELECT 1;
