-- Sources read one at a time (issue 39): SUNION, SINTER and SDIFF (and their STORE and CARD
-- forms) read each source set by its own index range, ZUNION, ZINTER and their kin each source
-- likewise, and XREADGROUP's history, XCLAIM and XAUTOCLAIM each pending entry's fields by its
-- own probe (functions/resp_set.sql, resp_zset.sql, resp_stream_group.sql): joins and
-- `key = ANY (live)`, planned while the tables were small or never analyzed, could read every
-- set of the bucket or every entry of the stream.
SELECT 1;
