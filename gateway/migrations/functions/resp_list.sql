-- RESP lists (layout v14): one call per command, as functions/resp_keys.sql describes.
-- keys[1] is the list (for LMOVE and RPOPLPUSH the source, keys[2] the destination). Elements
-- have positions 2^20 apart, so that LINSERT finds room between two neighbours; a list that
-- runs out of room there is renumbered. `resp_keys.length` keeps the length, and
-- `resp_keys.list_head`/`list_tail` bound the positions (layout v32): a push goes past them
-- without a scan, and a pop's index scan starts there, past the entries of popped elements,
-- which stay in the index until VACUUM (and are walked while any snapshot may see them).
-- Statements delete by ctid = ANY (ARRAY(...)) and take each end by one ordered index scan
-- with LIMIT: shapes that plan the same before and after ANALYZE (0032_resp_plans.sql).

-- Pushes `vals` at the head (`left`) or the tail, in order; returns the new length.
CREATE OR REPLACE FUNCTION pgvs3.resp_list_push(b bigint, k text, left_end boolean, vals bytea[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    edge bigint;
    step bigint := CASE WHEN left_end THEN -1048576 ELSE 1048576 END;
    len bigint;
BEGIN
    PERFORM pgvs3.resp_touch(b, k, 'l');
    -- A new list has no bounds yet: it starts around 0.
    edge := coalesce((SELECT CASE WHEN left_end THEN list_head ELSE list_tail END
                        FROM pgvs3.resp_keys WHERE bucket_id = b AND key = k), 0);
    INSERT INTO pgvs3.resp_list (bucket_id, key, pos, value)
        SELECT b, k, edge + i * step, v FROM unnest(vals) WITH ORDINALITY AS a(v, i);
    UPDATE pgvs3.resp_keys
       SET length = coalesce(length, 0) + cardinality(vals),
           list_head = least(list_head, edge + step, edge + cardinality(vals) * step),
           list_tail = greatest(list_tail, edge + step, edge + cardinality(vals) * step)
     WHERE bucket_id = b AND key = k RETURNING length INTO len;
    PERFORM pgvs3.resp_wake(b, k);
    RETURN len;
END $$;

-- Pops up to `c` elements from the head (`left`) or the tail, in the order popped.
CREATE OR REPLACE FUNCTION pgvs3.resp_list_pop(b bigint, k text, left_end boolean, c bigint) RETURNS bytea[]
LANGUAGE plpgsql AS $$
DECLARE
    head bigint;
    tail bigint;
    popped bytea[];
    reached bigint;
BEGIN
    SELECT list_head, list_tail INTO head, tail FROM pgvs3.resp_keys WHERE bucket_id = b AND key = k;
    IF left_end THEN
        WITH d AS (
            DELETE FROM pgvs3.resp_list WHERE ctid = ANY (ARRAY(
                SELECT ctid FROM pgvs3.resp_list WHERE bucket_id = b AND key = k AND pos >= head ORDER BY pos LIMIT c))
            RETURNING pos, value)
        SELECT coalesce(array_agg(value ORDER BY pos), '{}'), max(pos) INTO popped, reached FROM d;
        PERFORM pgvs3.resp_list_shrink(b, k, cardinality(popped), reached + 1, NULL);
    ELSE
        WITH d AS (
            DELETE FROM pgvs3.resp_list WHERE ctid = ANY (ARRAY(
                SELECT ctid FROM pgvs3.resp_list WHERE bucket_id = b AND key = k AND pos <= tail ORDER BY pos DESC LIMIT c))
            RETURNING pos, value)
        SELECT coalesce(array_agg(value ORDER BY pos DESC), '{}'), min(pos) INTO popped, reached FROM d;
        PERFORM pgvs3.resp_list_shrink(b, k, cardinality(popped), NULL, reached - 1);
    END IF;
    RETURN popped;
END $$;

-- `removed` elements went: the length follows, the bounds move to `head` and `tail` where
-- given (no element lies beyond them), and an empty list is deleted.
CREATE OR REPLACE FUNCTION pgvs3.resp_list_shrink(b bigint, k text, removed bigint, head bigint, tail bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgvs3.resp_keys
       SET length = length - removed, version = nextval('pgvs3.resp_key_versions'),
           list_head = coalesce(head, list_head), list_tail = coalesce(tail, list_tail)
     WHERE bucket_id = b AND key = k AND removed > 0;
    DELETE FROM pgvs3.resp_keys WHERE bucket_id = b AND key = k AND type = 'l' AND length <= 0;
END $$;

-- A script run's speculated writes on one list (layout v83, resp/working_set/list.rs), written
-- in one call instead of one resp_list call each (issue 39). Pushes, pops, LMOVE's two sides and
-- LREM leave the elements the list held, less those they removed, between the elements pushed
-- at the head and those pushed at the tail: so the elements that went are deleted by position,
-- and those added are inserted past the bounds found, at their end. The key's part is
-- resp_apply_begin's and resp_apply_end's (functions/resp_keys.sql). The list, as found:
--   existed: the key was a live list; found_len, found_head, found_tail: its length and bounds
--     (checked).
--   gone_pos, gone_values: the elements the calls removed of those it held (each checked).
-- What the run left:
--   emptied: a call removed its last element (the key went, its TTL with it, and was made again
--     by a push after).
--   added_pos, added_values: the elements pushed that are left, with their positions.
--   len, head, tail: the length and the bounds (0 and NULLs: no key).
-- Answers whether the list was as found (the caller raises otherwise, pgvs3.resp_expect).
-- Its statements plan the same before and after ANALYZE (0032_resp_plans.sql): probes of the
-- whole primary key, inserts.
CREATE OR REPLACE FUNCTION pgvs3.resp_list_apply(b bigint, k text, existed boolean, emptied boolean,
    found_len bigint, found_head bigint, found_tail bigint, gone_pos bigint[], gone_values bytea[],
    added_pos bigint[], added_values bytea[], len bigint, head bigint, tail bigint)
RETURNS boolean LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    n bigint;
BEGIN
    IF existed THEN
        PERFORM 1 FROM pgvs3.resp_keys
          WHERE bucket_id = b AND key = k AND type = 'l' AND length = found_len
            AND list_head = found_head AND list_tail = found_tail;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
    END IF;
    IF cardinality(gone_pos) > 0 THEN
        DELETE FROM pgvs3.resp_list WHERE ctid = ANY (ARRAY(
            SELECT (SELECT l.ctid FROM pgvs3.resp_list l WHERE l.bucket_id = b AND l.key = k AND l.pos = g.p AND l.value = g.v)
              FROM unnest(gone_pos, gone_values) AS g(p, v)));
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n <> cardinality(gone_pos) THEN
            RETURN false;
        END IF;
    END IF;
    IF NOT pgvs3.resp_apply_begin(b, k, 'l', existed, emptied, len > 0) THEN
        RETURN false;
    END IF;
    IF cardinality(added_pos) > 0 THEN
        INSERT INTO pgvs3.resp_list (bucket_id, key, pos, value)
        SELECT b, k, a.p, a.v FROM unnest(added_pos, added_values) AS a(p, v)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n <> cardinality(added_pos) THEN
            RETURN false;
        END IF;
    END IF;
    IF len > 0 THEN
        UPDATE pgvs3.resp_keys SET length = len, list_head = head, list_tail = tail WHERE bucket_id = b AND key = k;
    ELSIF existed AND NOT emptied THEN
        RETURN false;
    END IF;
    PERFORM pgvs3.resp_apply_end(b, k, 'l', existed, emptied, true, len > 0, 0, 0);
    IF cardinality(added_pos) > 0 THEN
        PERFORM pgvs3.resp_wake(b, k);
    END IF;
    RETURN true;
END $$;

-- The position of the element at `idx` (negative: from the tail), NULL when out of range.
CREATE OR REPLACE FUNCTION pgvs3.resp_list_at(b bigint, k text, idx bigint) RETURNS bigint LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF idx >= 0 THEN
        RETURN (SELECT pos FROM pgvs3.resp_list WHERE bucket_id = b AND key = k ORDER BY pos OFFSET idx LIMIT 1);
    END IF;
    RETURN (SELECT pos FROM pgvs3.resp_list WHERE bucket_id = b AND key = k ORDER BY pos DESC OFFSET -(idx + 1) LIMIT 1);
END $$;

CREATE OR REPLACE FUNCTION pgvs3.resp_list(op text, b bigint, ks text[], strings text[], args bytea[], ints bigint[], floats float8[],
    OUT err text, OUT n bigint, OUT items bytea[], OUT scores float8[])
LANGUAGE plpgsql AS $$
DECLARE
    k text := ks[1];
    write boolean := op IN ('lpush', 'rpush', 'lpushx', 'rpushx', 'lpop', 'rpop', 'lset', 'linsert', 'lrem', 'ltrim', 'lmove',
                            'blpop', 'brpop', 'lmpop');
    len bigint;
    first bigint;
    last bigint;
    p bigint;
    q bigint;
    vals bytea[];
    j int;
BEGIN
    -- LMOVE from a missing source answers nil (BLMOVE blocks) whatever the destination holds,
    -- as Redis looks the destination up only once the source has an element.
    err := pgvs3.resp_check(b, ks, strings,
                            CASE WHEN op = 'lmove' AND pgvs3.resp_type(b, k) IS NULL AND NOT k = ANY (strings) THEN ARRAY[k] ELSE ks END,
                            'l', write);
    IF err IS NOT NULL THEN
        RETURN;
    END IF;
    IF op IN ('blpop', 'brpop', 'lmpop') THEN
        -- The first of the keys that holds a list: items {key, element}; none, no items.
        -- LMPOP/BLMPOP, ints {left (1) or right (0), count}: {key, elements...}.
        FOR j IN 1 .. cardinality(ks) LOOP
            IF pgvs3.resp_type(b, ks[j]) IS NOT NULL THEN
                items := ARRAY[convert_to(ks[j], 'UTF8')] || CASE op
                    WHEN 'lmpop' THEN pgvs3.resp_list_pop(b, ks[j], ints[1] = 1, ints[2])
                    ELSE pgvs3.resp_list_pop(b, ks[j], op = 'blpop', 1) END;
                RETURN;
            END IF;
        END LOOP;
        RETURN;
    END IF;
    len := (SELECT length FROM pgvs3.resp_keys
             WHERE bucket_id = b AND key = k AND (expires_at IS NULL OR expires_at > pgvs3.resp_now()));
    IF len IS NULL AND op NOT IN ('lpush', 'rpush') THEN
        -- Every other command finds nothing in a missing list.
        CASE op
        WHEN 'lset' THEN err := 'no_such_key';
        WHEN 'lpop', 'rpop', 'lmove', 'lindex' THEN items := ARRAY[NULL::bytea];
        WHEN 'lrange' THEN items := '{}';
        WHEN 'lpos' THEN scores := '{}';
        WHEN 'ltrim' THEN NULL;
        ELSE n := 0;
        END CASE;
        RETURN;
    END IF;
    CASE op
    WHEN 'lpush', 'lpushx' THEN
        n := pgvs3.resp_list_push(b, k, true, args);
    WHEN 'rpush', 'rpushx' THEN
        n := pgvs3.resp_list_push(b, k, false, args);
    WHEN 'lpop', 'rpop' THEN
        -- ints: {count (NULL: one)}; n = 1: the list existed.
        items := pgvs3.resp_list_pop(b, k, op = 'lpop', coalesce(ints[1], 1));
        n := 1;
        IF ints[1] IS NULL THEN
            items := ARRAY[items[1]];
        END IF;
    WHEN 'llen' THEN
        n := len;
    WHEN 'lindex' THEN
        items := ARRAY[(SELECT value FROM pgvs3.resp_list WHERE bucket_id = b AND key = k
                         AND pos = pgvs3.resp_list_at(b, k, ints[1]))];
    WHEN 'lrange' THEN
        first := CASE WHEN ints[1] < 0 THEN greatest(ints[1] + len, 0) ELSE ints[1] END;
        last := CASE WHEN ints[2] < 0 THEN ints[2] + len ELSE least(ints[2], len - 1) END;
        SELECT coalesce(array_agg(value ORDER BY pos), '{}') INTO items FROM (
            SELECT pos, value FROM pgvs3.resp_list WHERE bucket_id = b AND key = k
             ORDER BY pos OFFSET first LIMIT CASE WHEN last < first THEN 0 ELSE last - first + 1 END) r;
    WHEN 'lset' THEN
        p := pgvs3.resp_list_at(b, k, ints[1]);
        IF p IS NULL THEN
            err := 'index_out_of_range';
            RETURN;
        END IF;
        UPDATE pgvs3.resp_list SET value = args[1] WHERE bucket_id = b AND key = k AND pos = p;
        UPDATE pgvs3.resp_keys SET version = nextval('pgvs3.resp_key_versions') WHERE bucket_id = b AND key = k;
    WHEN 'linsert' THEN
        -- args: {pivot, element}; ints: {1 before, 0 after}. n: the new length, -1 without the pivot.
        p := (SELECT pos FROM pgvs3.resp_list WHERE bucket_id = b AND key = k AND value = args[1] ORDER BY pos LIMIT 1);
        IF p IS NULL THEN
            n := -1;
            RETURN;
        END IF;
        IF ints[1] = 1 THEN
            q := (SELECT max(pos) FROM pgvs3.resp_list WHERE bucket_id = b AND key = k AND pos < p);
            q := coalesce(q, p - 2097152);
        ELSE
            q := (SELECT min(pos) FROM pgvs3.resp_list WHERE bucket_id = b AND key = k AND pos > p);
            q := coalesce(q, p + 2097152);
        END IF;
        IF abs(q - p) < 2 THEN
            -- No room left between the two: renumber the list, keeping its order.
            vals := ARRAY(SELECT value FROM pgvs3.resp_list WHERE bucket_id = b AND key = k ORDER BY pos);
            first := (SELECT count(*) FROM pgvs3.resp_list WHERE bucket_id = b AND key = k AND pos < p);
            DELETE FROM pgvs3.resp_list WHERE bucket_id = b AND key = k;
            INSERT INTO pgvs3.resp_list (bucket_id, key, pos, value)
                SELECT b, k, i * 1048576, v FROM unnest(vals) WITH ORDINALITY AS a(v, i);
            p := (first + 1) * 1048576;
            q := CASE WHEN ints[1] = 1 THEN p - 1048576 ELSE p + 1048576 END;
            UPDATE pgvs3.resp_keys SET list_head = 1048576, list_tail = cardinality(vals) * 1048576
             WHERE bucket_id = b AND key = k;
        END IF;
        INSERT INTO pgvs3.resp_list (bucket_id, key, pos, value) VALUES (b, k, (p + q) / 2, args[2]);
        UPDATE pgvs3.resp_keys
           SET length = length + 1, version = nextval('pgvs3.resp_key_versions'),
               list_head = least(list_head, (p + q) / 2), list_tail = greatest(list_tail, (p + q) / 2)
         WHERE bucket_id = b AND key = k RETURNING length INTO n;
    WHEN 'lrem' THEN
        -- ints: {count}: > 0 from the head, < 0 from the tail, 0 all.
        IF ints[1] >= 0 THEN
            DELETE FROM pgvs3.resp_list WHERE bucket_id = b AND key = k AND pos IN (
                SELECT pos FROM pgvs3.resp_list WHERE bucket_id = b AND key = k AND value = args[1]
                 ORDER BY pos LIMIT CASE WHEN ints[1] > 0 THEN ints[1] END);
        ELSE
            DELETE FROM pgvs3.resp_list WHERE bucket_id = b AND key = k AND pos IN (
                SELECT pos FROM pgvs3.resp_list WHERE bucket_id = b AND key = k AND value = args[1]
                 ORDER BY pos DESC LIMIT -greatest(ints[1], -9223372036854775807));
        END IF;
        GET DIAGNOSTICS n = ROW_COUNT;
        PERFORM pgvs3.resp_list_shrink(b, k, n, NULL, NULL);
    WHEN 'ltrim' THEN
        first := CASE WHEN ints[1] < 0 THEN greatest(ints[1] + len, 0) ELSE ints[1] END;
        last := CASE WHEN ints[2] < 0 THEN ints[2] + len ELSE least(ints[2], len - 1) END;
        IF first > last OR first >= len THEN
            DELETE FROM pgvs3.resp_list WHERE bucket_id = b AND key = k;
            GET DIAGNOSTICS n = ROW_COUNT;
        ELSE
            p := pgvs3.resp_list_at(b, k, first);
            q := pgvs3.resp_list_at(b, k, last);
            -- Two index ranges, each from a bound (`pos < p OR pos > q` could plan as a scan of
            -- the whole list, and walked what earlier trims deleted).
            SELECT list_head, list_tail INTO first, last FROM pgvs3.resp_keys WHERE bucket_id = b AND key = k;
            DELETE FROM pgvs3.resp_list WHERE bucket_id = b AND key = k AND pos >= first AND pos < p;
            GET DIAGNOSTICS n = ROW_COUNT;
            DELETE FROM pgvs3.resp_list WHERE bucket_id = b AND key = k AND pos > q AND pos <= last;
            GET DIAGNOSTICS j = ROW_COUNT;
            n := n + j;
        END IF;
        PERFORM pgvs3.resp_list_shrink(b, k, n, p, q);
    WHEN 'lpos' THEN
        -- ints: {rank (negative: from the tail), count (NULL: one, 0: all), maxlen (0: all)}.
        SELECT coalesce(array_agg(CASE WHEN ints[1] < 0 THEN len - 1 - idx ELSE idx END ORDER BY idx), '{}') INTO scores FROM (
            SELECT idx FROM (
                SELECT value, row_number() OVER (ORDER BY CASE WHEN ints[1] < 0 THEN -pos ELSE pos END) - 1 AS idx
                  FROM pgvs3.resp_list WHERE bucket_id = b AND key = k
                 ORDER BY CASE WHEN ints[1] < 0 THEN -pos ELSE pos END
                 LIMIT CASE WHEN ints[3] > 0 THEN ints[3] END) scanned
             WHERE value = args[1] ORDER BY idx OFFSET abs(ints[1]) - 1
             LIMIT CASE WHEN ints[2] IS NULL THEN 1 WHEN ints[2] > 0 THEN ints[2] END) found;
    WHEN 'lmove' THEN
        -- ints: {1: pop from the source's head, 1: push at the destination's head}.
        IF ks[2] = k AND len = 1 THEN
            -- A list's only element goes and comes back: the list stays, its TTL with it, as in
            -- Redis, whose LMOVE pushes before it looks whether the source emptied (a pop here
            -- would delete the key, and the push make a new one without the TTL). Its version
            -- moves, as the pop and the push would move it.
            vals := ARRAY(SELECT value FROM pgvs3.resp_list
                           WHERE bucket_id = b AND key = k
                             AND pos >= (SELECT list_head FROM pgvs3.resp_keys WHERE bucket_id = b AND key = k)
                           ORDER BY pos LIMIT 1);
            UPDATE pgvs3.resp_keys SET version = nextval('pgvs3.resp_key_versions') WHERE bucket_id = b AND key = k;
        ELSE
            vals := pgvs3.resp_list_pop(b, k, ints[1] = 1, 1);
            PERFORM pgvs3.resp_list_push(b, ks[2], ints[2] = 1, vals);
        END IF;
        items := vals;
    END CASE;
END $$;
