-- Layout v32: plans that hold from the first request (issue 39). Until ANALYZE, PostgreSQL
-- guesses that a key has one element, and a plan cached then stays: a pop joined the whole
-- list against itself (20,000 index scans per LPOP) and ZADD read the whole sorted set per
-- member. functions/resp_list.sql, resp_zset.sql and resp_stream.sql now use shapes that plan
-- the same on any table (equality on a whole primary key, ctid = ANY (ARRAY(...)), one ordered
-- index scan with LIMIT), and keep bounds that let a scan start past what pops and trims
-- deleted, whose index entries stay until VACUUM and are walked while any snapshot may see them.

-- A list's bounds (NULL: none known): no element lies before `list_head` or after `list_tail`.
-- Pops move them past the popped elements, pushes to the new ends.
-- Every list has them (a push sets them on a new one).
ALTER TABLE pgvs3.resp_keys ADD COLUMN list_head bigint, ADD COLUMN list_tail bigint;
UPDATE pgvs3.resp_keys r
   SET (list_head, list_tail) = (SELECT min(pos), max(pos) FROM pgvs3.resp_list l
                                  WHERE l.bucket_id = r.bucket_id AND l.key = r.key)
 WHERE type = 'l';
-- It gained the bounds as arguments.
DROP FUNCTION IF EXISTS pgvs3.resp_list_shrink(bigint, text, bigint);

-- A stream's bound: no entry lies before (first_ms, first_seq); trims move it past what they
-- removed.
ALTER TABLE pgvs3.resp_stream
    ADD COLUMN first_ms bigint NOT NULL DEFAULT -9223372036854775807 - 1,
    ADD COLUMN first_seq bigint NOT NULL DEFAULT -9223372036854775807 - 1;

-- A sorted set's member lookups (ZADD, ZSCORE, ZINCRBY, ZREM) match both its primary key and
-- `resp_zset_by_score` (bucket_id, key, score, member), where the member is no bound and the
-- lookup walks the whole set. Until ANALYZE both cost the planner the same (a key seems to hold
-- one member), and PostgreSQL then takes the index created last: the primary key is rebuilt
-- here, after by_score, covering the score, so that lookups take it (index only) while ranges
-- by score, which it cannot give in order, keep by_score.
ALTER TABLE pgvs3.resp_zset DROP CONSTRAINT resp_zset_pkey,
    ADD PRIMARY KEY (bucket_id, key, member) INCLUDE (score);
