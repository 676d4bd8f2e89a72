-- RESP hashes (layout v14): one call per command, as functions/resp_keys.sql describes.
-- keys[1] is the hash; args are fields (and values), ints and floats the numeric arguments the
-- gateway parsed. Replies: n for integers, items for strings (NULL for nil), err for errors.

-- HMGET's values of `fields` in their order, NULL for a missing one. Its own function so that
-- the statement is planned once (plan_cache_mode): with the default, PostgreSQL planned it again
-- at every call, a custom plan knowing the array's length always looking cheaper than the
-- generic one, which is as good: it joins nothing (a probe of the primary key per field).
CREATE OR REPLACE FUNCTION pgvs3.resp_hash_values(b bigint, k text, fields bytea[]) RETURNS bytea[]
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN (SELECT array_agg((SELECT h.value FROM pgvs3.resp_hash h WHERE h.bucket_id = b AND h.key = k AND h.field = a.f)
                             ORDER BY a.i)
              FROM unnest(fields) WITH ORDINALITY AS a(f, i));
END $$;

-- HSET's pairs (fields and values, one after another in `args`) written to hash `k`: `n`, how
-- many fields it added, and with `per_pair`, `added`: pair by pair 1 where the pair added its
-- field (the first pair naming a field that was not there), else 0. The gateway runs
-- consecutive HSETs on one key as one call (0039_resp_batched_calls.sql) and gives each command
-- the count of its own pairs. A field named twice takes its last value; new fields are inserted
-- in the order they first appear, which is the order their `added` numbers are drawn in (the
-- column's default).
-- Only the fields and their positions are sorted and matched: each value is read once, by its
-- position, as its row is inserted. Sorting whole pairs copied every value through three sorts
-- and two materialized row sets (issue 39, 0079_resp_values_by_position.sql), a quarter of a
-- coalesced HSET's time with 4 KiB values. A subscript of `args` reads the element directly
-- only in a generic plan, where `args` stays the expanded array the function was given (a
-- custom plan flattens it, and a subscript then walks it from its start): hence its own
-- function, planned once (plan_cache_mode). A generic plan cannot know how many pairs there
-- are, and took a nested loop to match the written fields to the pairs, quadratic in them (an
-- HSET of 10,000 fields took seconds): the match is hashed (enable_nestloop).
CREATE OR REPLACE FUNCTION pgvs3.resp_hash_set(b bigint, k text, args bytea[], per_pair boolean,
    OUT n bigint, OUT added float8[])
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_nestloop = off AS $$
BEGIN
    WITH pairs AS (
        SELECT f, i, min(i) OVER same AS fi, max(i) OVER same AS li
          FROM unnest(args) WITH ORDINALITY u(f, i) WHERE i % 2 = 1 WINDOW same AS (PARTITION BY f)
    ), written AS (
        -- OFFSET 0 keeps the subquery, so the values are read after the fields are sorted.
        INSERT INTO pgvs3.resp_hash AS h (bucket_id, key, field, value)
        SELECT b, k, s.f, args[s.li + 1] FROM (SELECT f, fi, li FROM pairs WHERE i = fi ORDER BY fi OFFSET 0) s
        ON CONFLICT (bucket_id, key, field) DO UPDATE SET value = EXCLUDED.value
        RETURNING field, xmax = 0 AS inserted
    )
    SELECT count(*) FILTER (WHERE w.inserted AND p.i = p.fi),
           CASE WHEN per_pair THEN array_agg((w.inserted AND p.i = p.fi)::int::float8 ORDER BY p.i) END
      INTO n, added
      FROM pairs p JOIN written w ON w.field = p.f;
END $$;

-- A batch's script runs' writes to hashes, set-based (layout v81; every hash of the batch in one
-- call since v85): what their speculated HSET, HSETNX, HINCRBY and HDEL calls changed, as the
-- gateway's working set holds it (resp/working_set/changes.rs), written in one call instead of
-- one family call each (issue 39). Every field comes with the value the run found it at, and a
-- row is written only where it still holds that value: the answer is whether every one did
-- (and every key was as the run found it), which the caller raises on (`pgvs3.resp_expect`),
-- so a value changed underneath aborts the batch as a mispredicted call does. The runs hold the
-- keys' locks, so only a writer outside pgvs3 could.
-- The keys' part (ks, existed, emptied, bump, adds, peak, longest: arrays by key, the keys
-- distinct) is pgvs3.resp_keys_begin's and pgvs3.resp_keys_end's (functions/resp_keys.sql); the
-- fields', each with its key:
--   gone_keys, gone, gone_values: fields removed, with the values found.
--   changed_keys, changed, changed_from, changed_to: fields overwritten in place (their place in
--     the small encoding's order stays).
--   added_keys, added, added_values: new fields, in the order they were added (a field removed
--     and set again comes in gone and here: it goes last, as in Redis's listpack).
-- Its statements have the shapes that plan the same before and after ANALYZE (0032_resp_plans.sql):
-- a probe of the whole primary key per element (a join of the arrays with the table, planned
-- generically while the table was empty, could read all of it per call for the session's life),
-- and inserts, which the unique index decides.
CREATE OR REPLACE FUNCTION pgvs3.resp_hash_apply(b bigint, ks text[], existed boolean[], emptied boolean[],
    bump boolean[], adds boolean[], peak bigint[], longest bigint[],
    gone_keys text[], gone bytea[], gone_values bytea[],
    changed_keys text[], changed bytea[], changed_from bytea[], changed_to bytea[],
    added_keys text[], added bytea[], added_values bytea[])
RETURNS boolean LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    n bigint;
BEGIN
    IF NOT pgvs3.resp_keys_begin(b, ks, 'h', existed, emptied, adds) THEN
        RETURN false;
    END IF;
    IF cardinality(gone) > 0 THEN
        DELETE FROM pgvs3.resp_hash WHERE ctid = ANY (ARRAY(
            SELECT (SELECT h.ctid FROM pgvs3.resp_hash h WHERE h.bucket_id = b AND h.key = g.k AND h.field = g.f AND h.value = g.v)
              FROM unnest(gone_keys, gone, gone_values) AS g(k, f, v)));
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n <> cardinality(gone) THEN
            RETURN false;
        END IF;
    END IF;
    IF cardinality(changed) > 0 THEN
        IF EXISTS (SELECT 1 FROM unnest(changed_keys, changed, changed_from) AS c(k, f, o)
                    WHERE (SELECT h.value FROM pgvs3.resp_hash h WHERE h.bucket_id = b AND h.key = c.k AND h.field = c.f)
                          IS DISTINCT FROM c.o) THEN
            RETURN false;
        END IF;
        INSERT INTO pgvs3.resp_hash AS h (bucket_id, key, field, value)
        SELECT b, c.k, c.f, c.t FROM unnest(changed_keys, changed, changed_to) AS c(k, f, t)
        ON CONFLICT (bucket_id, key, field) DO UPDATE SET value = EXCLUDED.value;
    END IF;
    IF cardinality(added) > 0 THEN
        -- In their order, so that their `added` numbers (the column's default) follow it.
        INSERT INTO pgvs3.resp_hash (bucket_id, key, field, value)
        SELECT b, a.k, a.f, a.v FROM unnest(added_keys, added, added_values) WITH ORDINALITY AS a(k, f, v, i) ORDER BY a.i
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n <> cardinality(added) THEN
            RETURN false;
        END IF;
    END IF;
    PERFORM pgvs3.resp_keys_end(b, ks, 'h', existed, emptied, bump, adds, peak, longest);
    RETURN true;
END $$;

-- One hash's writes, as gateways of layout v84 send them (kept callable through a rolling
-- upgrade; the next layout drops it).
CREATE OR REPLACE FUNCTION pgvs3.resp_hash_apply(b bigint, k text, existed boolean, emptied boolean, bump boolean,
    peak bigint, longest bigint, gone bytea[], gone_values bytea[],
    changed bytea[], changed_from bytea[], changed_to bytea[], added bytea[], added_values bytea[])
RETURNS boolean LANGUAGE sql AS $$
    SELECT pgvs3.resp_hash_apply(b, ARRAY[k], ARRAY[existed], ARRAY[emptied], ARRAY[bump], ARRAY[cardinality(added) > 0],
        ARRAY[peak], ARRAY[longest], array_fill(k, ARRAY[cardinality(gone)]), gone, gone_values,
        array_fill(k, ARRAY[cardinality(changed)]), changed, changed_from, changed_to,
        array_fill(k, ARRAY[cardinality(added)]), added, added_values)
$$;

CREATE OR REPLACE FUNCTION pgvs3.resp_hash(op text, b bigint, ks text[], strings text[], args bytea[], ints bigint[], floats float8[],
    OUT err text, OUT n bigint, OUT items bytea[], OUT scores float8[])
LANGUAGE plpgsql AS $$
DECLARE
    k text := ks[1];
    write boolean := op IN ('hset', 'hsetnx', 'hdel', 'hincrby', 'hincrbyfloat');
    cur bytea;
    num numeric;
    total bigint;
    fa bytea[];
    va bytea[];
    -- Fields in the order they were first added, as Redis's listpack keeps them, while the
    -- hash is in its small encoding (`added`, 0053_resp_insertion_order.sql; NULL first for
    -- fields of before it, in byte order); a large one answers in byte order (Redis's
    -- hashtable answers in no order), read from the primary key.
    small boolean;
BEGIN
    err := pgvs3.resp_check(b, ks, strings, ks, 'h', write);
    IF err IS NOT NULL THEN
        RETURN;
    END IF;
    IF NOT write AND pgvs3.resp_type(b, k) IS NULL THEN
        -- Reads of a missing hash: nothing, without touching the element table.
        CASE op
        WHEN 'hget' THEN items := ARRAY[NULL::bytea];
        WHEN 'hmget' THEN items := array_fill(NULL::bytea, ARRAY[cardinality(args)]);
        WHEN 'hrandfield' THEN items := CASE WHEN ints[1] IS NULL THEN ARRAY[NULL::bytea] ELSE '{}' END;
        ELSE n := 0; items := '{}';
        END CASE;
        RETURN;
    END IF;
    IF op IN ('hgetall', 'hkeys', 'hvals', 'hscan') THEN
        small := NOT coalesce(pgvs3.resp_large(b, k), true);
    END IF;
    CASE op
    WHEN 'hset' THEN
        PERFORM pgvs3.resp_touch(b, k, 'h');
        SELECT w.n, w.added INTO n, scores FROM pgvs3.resp_hash_set(b, k, args, ints[1] = 1) w;
        PERFORM pgvs3.resp_grown(b, k, 'h', args, NULL);
    WHEN 'hsetnx' THEN
        PERFORM pgvs3.resp_create(b, k, 'h');
        INSERT INTO pgvs3.resp_hash (bucket_id, key, field, value) VALUES (b, k, args[1], args[2])
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n > 0 THEN
            PERFORM pgvs3.resp_bump(b, k);
            PERFORM pgvs3.resp_grown(b, k, 'h', args[1:2], NULL);
        END IF;
    WHEN 'hdel' THEN
        -- ints {1} (layout v61): items answer the fields removed, for the gateway's run of
        -- consecutive HDELs on one key as one call (resp/coalesce.rs).
        WITH removed AS (
            DELETE FROM pgvs3.resp_hash WHERE ctid = ANY (ARRAY(
                SELECT (SELECT h.ctid FROM pgvs3.resp_hash h WHERE h.bucket_id = b AND h.key = k AND h.field = a.x)
                  FROM unnest(args) AS a(x)))
            RETURNING field)
        SELECT count(*), CASE WHEN ints[1] = 1 THEN coalesce(array_agg(field), '{}') END INTO n, items FROM removed;
        IF n > 0 THEN
            PERFORM pgvs3.resp_settle(b, k);
        END IF;
    WHEN 'hincrby', 'hincrbyfloat' THEN
        SELECT value INTO cur FROM pgvs3.resp_hash WHERE bucket_id = b AND key = k AND field = args[1];
        IF op = 'hincrby' THEN
            num := CASE WHEN cur IS NULL THEN 0 ELSE pgvs3.resp_int(cur) END;
            IF num IS NULL THEN
                err := 'hash_not_integer';
                RETURN;
            END IF;
            num := num + ints[1];
            IF num NOT BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
                err := 'overflow';
                RETURN;
            END IF;
            n := num;
            cur := convert_to(num::text, 'UTF8');
        ELSE
            num := CASE WHEN cur IS NULL THEN 0 ELSE pgvs3.resp_decimal(cur) END;
            IF num IS NULL THEN
                err := 'hash_not_float';
                RETURN;
            END IF;
            -- The increment came checked (a finite float); added exactly, in decimal, as
            -- Redis's long double keeps 0.1 + 0.2 at 0.3.
            num := num + coalesce(pgvs3.resp_decimal(args[2]), floats[1]::numeric);
            IF abs(num) > 1.7976931348623157e308 THEN
                err := 'nan_or_infinity';
                RETURN;
            END IF;
            cur := convert_to(trim_scale(num)::text, 'UTF8');
            items := ARRAY[cur];
        END IF;
        PERFORM pgvs3.resp_touch(b, k, 'h');
        INSERT INTO pgvs3.resp_hash (bucket_id, key, field, value) VALUES (b, k, args[1], cur)
        ON CONFLICT (bucket_id, key, field) DO UPDATE SET value = EXCLUDED.value;
        PERFORM pgvs3.resp_grown(b, k, 'h', ARRAY[args[1], cur], NULL);
    WHEN 'hget' THEN
        items := ARRAY[(SELECT value FROM pgvs3.resp_hash WHERE bucket_id = b AND key = k AND field = args[1])];
    WHEN 'hmget' THEN
        -- A probe of the whole primary key per field (a join planned before ANALYZE read
        -- the whole hash: 0032_resp_plans.sql).
        items := pgvs3.resp_hash_values(b, k, args);
    WHEN 'hexists' THEN
        n := (SELECT count(*) FROM pgvs3.resp_hash WHERE bucket_id = b AND key = k AND field = args[1]);
    WHEN 'hstrlen' THEN
        n := coalesce((SELECT length(value) FROM pgvs3.resp_hash WHERE bucket_id = b AND key = k AND field = args[1]), 0);
    WHEN 'hlen' THEN
        n := (SELECT count(*) FROM pgvs3.resp_hash WHERE bucket_id = b AND key = k);
    WHEN 'hgetall' THEN
        SELECT coalesce(array_agg(x ORDER BY CASE WHEN small THEN added END NULLS FIRST, field, j), '{}') INTO items
          FROM pgvs3.resp_hash, LATERAL (VALUES (1, field), (2, value)) AS p(j, x)
         WHERE bucket_id = b AND key = k;
    WHEN 'hkeys' THEN
        SELECT coalesce(array_agg(field ORDER BY CASE WHEN small THEN added END NULLS FIRST, field), '{}') INTO items
          FROM pgvs3.resp_hash WHERE bucket_id = b AND key = k;
    WHEN 'hvals' THEN
        SELECT coalesce(array_agg(value ORDER BY CASE WHEN small THEN added END NULLS FIRST, field), '{}') INTO items
          FROM pgvs3.resp_hash WHERE bucket_id = b AND key = k;
    WHEN 'hrandfield' THEN
        -- ints: {count (NULL: none given), with values (1)}. The gateway bounds the count.
        total := (SELECT count(*) FROM pgvs3.resp_hash WHERE bucket_id = b AND key = k);
        IF ints[1] IS NULL OR ints[1] >= 0 THEN
            SELECT coalesce(array_agg(x ORDER BY r, j), '{}') INTO items FROM (
                SELECT field, value, random() AS r FROM pgvs3.resp_hash WHERE bucket_id = b AND key = k
                 ORDER BY r LIMIT coalesce(ints[1], 1)
            ) s, LATERAL (VALUES (1, field), (2, value)) AS p(j, x)
             WHERE j = 1 OR ints[2] = 1;
        ELSE
            -- Repeats allowed: |count| draws from the fields, read once.
            SELECT array_agg(field), array_agg(value) INTO fa, va FROM pgvs3.resp_hash WHERE bucket_id = b AND key = k;
            SELECT coalesce(array_agg(x ORDER BY g, j), '{}') INTO items
              FROM (SELECT g, 1 + floor(random() * total)::int AS i FROM generate_series(1, -ints[1]) g) d,
                   LATERAL (VALUES (1, fa[d.i]), (2, va[d.i])) AS p(j, x)
             WHERE j = 1 OR ints[2] = 1;
        END IF;
    WHEN 'hscan' THEN
        -- ints: {cursor (an offset in field order), count}; n: the next cursor, 0 at the end.
        -- A small hash answers whole, in one reply with cursor 0, as Redis scans a listpack.
        IF small THEN
            SELECT coalesce(array_agg(x ORDER BY added NULLS FIRST, field, j), '{}') INTO items
              FROM pgvs3.resp_hash, LATERAL (VALUES (1, field), (2, value)) AS p(j, x)
             WHERE bucket_id = b AND key = k;
            n := 0;
            RETURN;
        END IF;
        SELECT coalesce(array_agg(x ORDER BY field, j), '{}'), count(*) / 2 INTO items, total FROM (
            SELECT field, value FROM pgvs3.resp_hash WHERE bucket_id = b AND key = k
             ORDER BY field OFFSET ints[1] LIMIT ints[2]
        ) s, LATERAL (VALUES (1, field), (2, value)) AS p(j, x);
        n := CASE WHEN total < ints[2] THEN 0 ELSE ints[1] + total END;
    END CASE;
END $$;
