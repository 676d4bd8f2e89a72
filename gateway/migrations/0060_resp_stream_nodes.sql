-- Layout v60: a stream's entries grouped into nodes as Redis groups them (the listpacks of its
-- radix tree, t_stream.c), so that XADD's and XTRIM's `~` trimming removes what Redis's does:
-- whole nodes only, and LIMIT counts the entries of whole nodes (functions/resp_stream.sql).
-- An XADD appends to the stream's last node until that node was given
-- `stream-node-max-entries` entries (deleted ones count, as Redis counts them), then starts a
-- new one. Entries belong to the node with the greatest first ID at or below theirs.

-- `stream-node-max-entries`, kept per keyspace as the other encoding parameters (NULL: Redis's
-- 100). Its function gains the column: dropped here, defined again by functions/resp_keys.sql.
ALTER TABLE pgvs3.resp_encoding_parameters ADD COLUMN stream_entries bigint;
DROP FUNCTION IF EXISTS pgvs3.resp_encodings(bigint);
CREATE FUNCTION pgvs3.resp_encodings(b bigint,
    OUT hash_entries bigint, OUT hash_value bigint, OUT set_entries bigint, OUT zset_entries bigint, OUT zset_value bigint,
    OUT stream_entries bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT coalesce(p.hash_entries, 512), coalesce(p.hash_value, 64), coalesce(p.set_entries, 512),
           coalesce(p.zset_entries, 128), coalesce(p.zset_value, 64), coalesce(p.stream_entries, 100)
      INTO hash_entries, hash_value, set_entries, zset_entries, zset_value, stream_entries
      FROM (VALUES (1)) AS one LEFT JOIN pgvs3.resp_encoding_parameters p ON p.bucket_id = b;
END $$;

-- The trim takes `~` (functions/resp_stream.sql defines it again with it).
DROP FUNCTION IF EXISTS pgvs3.resp_stream_trim(bigint, text, boolean, bigint, bigint, bigint);

CREATE TABLE pgvs3.resp_stream_node (
    bucket_id bigint NOT NULL,
    key       text COLLATE "C" NOT NULL,
    -- The ID of the entry the node was made for (Redis's master ID, its radix tree key).
    ms        bigint NOT NULL,
    seq       bigint NOT NULL,
    -- The ID of the last entry it was given (MINID removes a node whose last ID is below it).
    last_ms   bigint NOT NULL,
    last_seq  bigint NOT NULL,
    -- Entries it holds, and entries it was given (held and deleted).
    live      bigint NOT NULL,
    given     bigint NOT NULL,
    PRIMARY KEY (bucket_id, key, ms, seq),
    FOREIGN KEY (bucket_id, key) REFERENCES pgvs3.resp_stream ON DELETE CASCADE ON UPDATE CASCADE
);

-- The streams there are: their entries in nodes of Redis's default 100, in ID order.
INSERT INTO pgvs3.resp_stream_node
SELECT bucket_id, key, (min(ARRAY[ms, seq]))[1], (min(ARRAY[ms, seq]))[2],
       (max(ARRAY[ms, seq]))[1], (max(ARRAY[ms, seq]))[2], count(*), count(*)
  FROM (SELECT bucket_id, key, ms, seq,
               (row_number() OVER (PARTITION BY bucket_id, key ORDER BY ms, seq) - 1) / 100 AS node
          FROM pgvs3.resp_stream_entry) e
 GROUP BY bucket_id, key, node;
