-- RESP sets (layout v14): one call per command, as functions/resp_keys.sql describes. keys[1]
-- is the set (for SMOVE the source, keys[2] the destination; for the *STORE commands keys[1]
-- is the destination and the sources follow); args are members. ints carry counts and limits;
-- SMISMEMBER answers in `scores` (1 or 0 per member).
-- A batch's script runs' writes to sets, set-based (layout v84; every set of the batch in one
-- call since v85): what their speculated SADD and SREM calls changed, as the gateway's working
-- set holds it (resp/working_set/changes.rs, set.rs), written in one call instead of one
-- resp_set call each (issue 39), as resp_hash_apply writes hashes' (functions/resp_hash.sql,
-- which says what the arrays are). A member is written only where the run found it so: each
-- removed must be there, each added must not, and the answer is whether all were (and every
-- key was as the run found it), which the caller raises on (`pgvs3.resp_expect`); a set changed
-- underneath aborts the batch as a mispredicted call does. The members', each with its key:
--   gone_keys, gone: members removed (one removed and added again comes in both).
--   added_keys, added: members added.
-- The intset is judged as resp_grown judges each SADD that added (t_set.c setTypeAdd): `peak`
-- is the most members after one, and `longest` 1 when one named a member that is no integer
-- (an intset's only other limit, resp_keys_end's value limit of 0 for sets), 0 otherwise. A
-- large set stays large, as in Redis.
-- Its statements have the shapes that plan the same before and after ANALYZE (0032_resp_plans.sql):
-- a probe of the whole primary key per member, and an insert, which the unique index decides.
CREATE OR REPLACE FUNCTION pgvs3.resp_set_apply(b bigint, ks text[], existed boolean[], emptied boolean[],
    bump boolean[], adds boolean[], peak bigint[], longest bigint[], gone_keys text[], gone bytea[],
    added_keys text[], added bytea[])
RETURNS boolean LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    n bigint;
BEGIN
    IF NOT pgvs3.resp_keys_begin(b, ks, 's', existed, emptied, adds) THEN
        RETURN false;
    END IF;
    IF cardinality(gone) > 0 THEN
        DELETE FROM pgvs3.resp_set WHERE ctid = ANY (ARRAY(
            SELECT (SELECT s.ctid FROM pgvs3.resp_set s WHERE s.bucket_id = b AND s.key = g.k AND s.member = g.m)
              FROM unnest(gone_keys, gone) AS g(k, m)));
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n <> cardinality(gone) THEN
            RETURN false;
        END IF;
    END IF;
    IF cardinality(added) > 0 THEN
        INSERT INTO pgvs3.resp_set (bucket_id, key, member) SELECT b, a.k, a.m FROM unnest(added_keys, added) AS a(k, m)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n <> cardinality(added) THEN
            RETURN false;
        END IF;
    END IF;
    PERFORM pgvs3.resp_keys_end(b, ks, 's', existed, emptied, bump, adds, peak, longest);
    RETURN true;
END $$;

-- One set's writes, as gateways of layout v84 send them (kept callable through a rolling
-- upgrade; the next layout drops it).
CREATE OR REPLACE FUNCTION pgvs3.resp_set_apply(b bigint, k text, existed boolean, emptied boolean, bump boolean,
    peak bigint, longest bigint, gone bytea[], added bytea[])
RETURNS boolean LANGUAGE sql AS $$
    SELECT pgvs3.resp_set_apply(b, ARRAY[k], ARRAY[existed], ARRAY[emptied], ARRAY[bump], ARRAY[cardinality(added) > 0],
        ARRAY[peak], ARRAY[longest], array_fill(k, ARRAY[cardinality(gone)]), gone,
        array_fill(k, ARRAY[cardinality(added)]), added)
$$;

CREATE OR REPLACE FUNCTION pgvs3.resp_set(op text, b bigint, ks text[], strings text[], args bytea[], ints bigint[], floats float8[],
    OUT err text, OUT n bigint, OUT items bytea[], OUT scores float8[])
LANGUAGE plpgsql AS $$
DECLARE
    k text := ks[1];
    write boolean := op IN ('sadd', 'srem', 'spop', 'smove', 'sinterstore', 'sunionstore', 'sdiffstore');
    store boolean := op LIKE '%store';
    sources text[] := CASE WHEN op LIKE '%store' THEN ks[2:] ELSE ks END;
    live text[];
    others text[];
    total bigint;
    ma bytea[];
    small boolean;
BEGIN
    err := pgvs3.resp_check(b, ks, strings, CASE WHEN store THEN sources ELSE ks END, 's', write);
    IF err IS NOT NULL THEN
        RETURN;
    END IF;
    live := ARRAY(SELECT DISTINCT s.k FROM unnest(sources) AS s(k) WHERE pgvs3.resp_type(b, s.k) IS NOT NULL);
    CASE op
    WHEN 'sadd' THEN
        PERFORM pgvs3.resp_create(b, k, 's');
        -- ints {1} (layout v61): items answer the members added, for the gateway's run of
        -- consecutive SADDs on one key as one call (resp/coalesce.rs), each command counting
        -- the members of its own that were added first by it.
        WITH added AS (
            INSERT INTO pgvs3.resp_set (bucket_id, key, member) SELECT DISTINCT b, k, m FROM unnest(args) m
            ON CONFLICT DO NOTHING
            RETURNING member)
        SELECT count(*), CASE WHEN ints[1] = 1 THEN coalesce(array_agg(member), '{}') END INTO n, items FROM added;
        IF n > 0 THEN
            PERFORM pgvs3.resp_bump(b, k);
            PERFORM pgvs3.resp_grown(b, k, 's', args, NULL);
        END IF;
    WHEN 'srem' THEN
        -- ints {1} (layout v61): items answer the members removed, as SADD's the added.
        WITH removed AS (
            DELETE FROM pgvs3.resp_set WHERE ctid = ANY (ARRAY(
                SELECT (SELECT s.ctid FROM pgvs3.resp_set s WHERE s.bucket_id = b AND s.key = k AND s.member = a.x)
                  FROM unnest(args) AS a(x)))
            RETURNING member)
        SELECT count(*), CASE WHEN ints[1] = 1 THEN coalesce(array_agg(member), '{}') END INTO n, items FROM removed;
        IF n > 0 THEN
            PERFORM pgvs3.resp_settle(b, k);
        END IF;
    WHEN 'smembers' THEN
        -- An intset answers in numeric order, as Redis's does; a large set in byte order
        -- (Redis's hashtable in none).
        small := k = ANY (live) AND NOT coalesce(pgvs3.resp_large(b, k), true);
        SELECT coalesce(array_agg(member ORDER BY CASE WHEN small THEN pgvs3.resp_int(member) END, member), '{}') INTO items
          FROM pgvs3.resp_set WHERE bucket_id = b AND key = k AND k = ANY (live);
    WHEN 'sismember' THEN
        n := (SELECT count(*) FROM pgvs3.resp_set WHERE bucket_id = b AND key = k AND k = ANY (live) AND member = args[1]);
    WHEN 'smismember' THEN
        -- A probe of the whole primary key per member (a join planned before ANALYZE read
        -- the whole set: 0032_resp_plans.sql).
        SELECT array_agg(CASE WHEN k = ANY (live) AND EXISTS (
                                  SELECT 1 FROM pgvs3.resp_set s WHERE s.bucket_id = b AND s.key = k AND s.member = a.m)
                              THEN 1 ELSE 0 END ORDER BY a.i) INTO scores
          FROM unnest(args) WITH ORDINALITY AS a(m, i);
    WHEN 'scard' THEN
        n := (SELECT count(*) FROM pgvs3.resp_set WHERE bucket_id = b AND key = k AND k = ANY (live));
    WHEN 'spop' THEN
        -- ints: {count (NULL: one, answered as a string), 1: the count is of SPOPs without
        -- one, run as one call (layout v61, resp/coalesce.rs), which rebuild nothing}; the
        -- gateway bounds the count.
        WITH popped AS (
            -- One draw, then a delete by ctid (a semi-join planned before ANALYZE drew again
            -- per member).
            DELETE FROM pgvs3.resp_set WHERE ctid = ANY (ARRAY(
                SELECT ctid FROM pgvs3.resp_set WHERE bucket_id = b AND key = k
                 ORDER BY random() LIMIT coalesce(ints[1], 1)))
            RETURNING member)
        SELECT coalesce(array_agg(member), '{}') INTO items FROM popped;
        IF ints[1] IS NULL AND cardinality(items) = 0 THEN
            items := ARRAY[NULL::bytea];
        END IF;
        IF cardinality(items) > 0 THEN
            PERFORM pgvs3.resp_settle(b, k);
            -- Redis's SPOP with a count that leaves at most a fifth of it builds a new set of
            -- the members left, member by member, as SADD would (t_set.c
            -- spopWithCountCommand's CASE 3, SPOP_MOVE_STRATEGY_MUL): an `intset` again when they
            -- fit one. Counts at most count / 5 + 1 of them.
            IF ints[1] IS NOT NULL AND ints[2] IS DISTINCT FROM 1 THEN
                total := (SELECT count(*) FROM (SELECT 1 FROM pgvs3.resp_set WHERE bucket_id = b AND key = k LIMIT ints[1] / 5 + 1) e);
                IF total > 0 AND total * 5 <= ints[1] THEN
                    UPDATE pgvs3.resp_keys SET large = NOT pgvs3.resp_fits(b, k, 's') WHERE bucket_id = b AND key = k;
                END IF;
            END IF;
        END IF;
    WHEN 'srandmember' THEN
        IF NOT k = ANY (live) THEN
            items := CASE WHEN ints[1] IS NULL THEN ARRAY[NULL::bytea] ELSE '{}' END;
        ELSIF ints[1] IS NULL OR ints[1] >= 0 THEN
            SELECT coalesce(array_agg(member), '{}') INTO items FROM (
                SELECT member FROM pgvs3.resp_set WHERE bucket_id = b AND key = k ORDER BY random() LIMIT coalesce(ints[1], 1)) s;
            IF ints[1] IS NULL AND cardinality(items) = 0 THEN
                items := ARRAY[NULL::bytea];
            END IF;
        ELSE
            SELECT array_agg(member) INTO ma FROM pgvs3.resp_set WHERE bucket_id = b AND key = k;
            total := cardinality(ma);
            SELECT coalesce(array_agg(ma[1 + floor(random() * total)::int]), '{}') INTO items FROM generate_series(1, -ints[1]);
        END IF;
    WHEN 'smove' THEN
        -- keys: {source, destination}.
        DELETE FROM pgvs3.resp_set WHERE bucket_id = b AND key = k AND k = ANY (live) AND member = args[1];
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n > 0 AND ks[2] <> k THEN
            PERFORM pgvs3.resp_settle(b, k);
            -- The destination changes only when it did not hold the member.
            PERFORM pgvs3.resp_create(b, ks[2], 's');
            INSERT INTO pgvs3.resp_set (bucket_id, key, member) VALUES (b, ks[2], args[1]) ON CONFLICT DO NOTHING;
            GET DIAGNOSTICS total = ROW_COUNT;
            IF total > 0 THEN
                PERFORM pgvs3.resp_bump(b, ks[2]);
                PERFORM pgvs3.resp_grown(b, ks[2], 's', args[1:1], NULL);
            END IF;
        ELSIF n > 0 THEN
            INSERT INTO pgvs3.resp_set (bucket_id, key, member) VALUES (b, k, args[1]);
        END IF;
    WHEN 'sinter', 'sinterstore', 'sintercard' THEN
        -- A member of every source; none when a source is missing. SINTERCARD: ints {limit (0: none)}.
        IF (SELECT count(DISTINCT s) FROM unnest(live) s) < (SELECT count(DISTINCT s) FROM unnest(sources) s) THEN
            items := '{}';
        ELSE
            -- Each source by its own index range, as below (`live` names each key once).
            SELECT coalesce(array_agg(member ORDER BY member), '{}') INTO items FROM (
                SELECT e.member FROM unnest(live) AS l(k),
                       LATERAL (SELECT member FROM pgvs3.resp_set WHERE bucket_id = b AND key = l.k OFFSET 0) e
                 GROUP BY e.member HAVING count(*) = cardinality(live)
                 ORDER BY member LIMIT CASE WHEN op = 'sintercard' AND ints[1] > 0 THEN ints[1] END) m;
        END IF;
    WHEN 'sunion', 'sunionstore' THEN
        -- Each source read by its own index range: `key = ANY (live)`, planned before ANALYZE
        -- (a bucket seeming to hold a few rows), read every set of the bucket.
        SELECT coalesce(array_agg(DISTINCT e.member), '{}') INTO items
          FROM unnest(live) AS l(k),
               LATERAL (SELECT member FROM pgvs3.resp_set WHERE bucket_id = b AND key = l.k OFFSET 0) e;
    WHEN 'sdiff', 'sdiffstore' THEN
        others := ARRAY(SELECT s FROM unnest(sources[2:]) s WHERE s = ANY (live));
        SELECT coalesce(array_agg(a.member ORDER BY a.member), '{}') INTO items
          FROM pgvs3.resp_set a
         WHERE a.bucket_id = b AND a.key = sources[1] AND sources[1] = ANY (live)
           AND NOT EXISTS (SELECT 1 FROM unnest(others) AS o(k)
                            WHERE (SELECT true FROM pgvs3.resp_set c
                                    WHERE c.bucket_id = b AND c.key = o.k AND c.member = a.member));
    WHEN 'sscan' THEN
        -- ints: {cursor (an offset in member order), count}; n: the next cursor, 0 at the end.
        -- An intset answers whole, in numeric order and one reply with cursor 0, as Redis
        -- scans one.
        IF k = ANY (live) AND NOT coalesce(pgvs3.resp_large(b, k), true) THEN
            SELECT coalesce(array_agg(member ORDER BY pgvs3.resp_int(member), member), '{}') INTO items
              FROM pgvs3.resp_set WHERE bucket_id = b AND key = k;
            n := 0;
            RETURN;
        END IF;
        SELECT coalesce(array_agg(member ORDER BY member), '{}') INTO items FROM (
            SELECT member FROM pgvs3.resp_set WHERE bucket_id = b AND key = k AND k = ANY (live)
             ORDER BY member OFFSET ints[1] LIMIT ints[2]) s;
        n := CASE WHEN cardinality(items) < ints[2] THEN 0 ELSE ints[1] + cardinality(items) END;
    END CASE;
    IF op = 'sintercard' THEN
        n := cardinality(items);
        items := NULL;
    ELSIF store THEN
        -- The destination is replaced, whatever it held; an empty result deletes it.
        PERFORM pgvs3.resp_clear(b, k, k = ANY (strings));
        IF cardinality(items) > 0 THEN
            INSERT INTO pgvs3.resp_keys (bucket_id, key, type) VALUES (b, k, 's');
            INSERT INTO pgvs3.resp_set (bucket_id, key, member) SELECT b, k, m FROM unnest(items) m;
            -- Built member by member into an intset, as Redis builds it (t_set.c).
            PERFORM pgvs3.resp_grown(b, k, 's', items, cardinality(items));
        END IF;
        n := cardinality(items);
        items := NULL;
    END IF;
END $$;
