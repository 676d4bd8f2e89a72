-- RESP sorted sets (layout v14): one call per command, as functions/resp_keys.sql describes.
-- keys[1] is the sorted set (for ZRANGESTORE, ZUNIONSTORE and ZINTERSTORE the destination,
-- the sources following). Order is Redis's: by score, then member bytes.
--
-- Ranges (ZRANGE and its kin, ZCOUNT, ZLEXCOUNT, ZREMRANGEBY*) come parsed as
--   ints   {mode (0 rank, 1 score, 2 lex), rev (1: highest first), start, stop (ranks),
--           offset, count (-1: all), min kind, max kind, withscores}
--   floats {min, max}            (by score; kinds: 0 inclusive, 1 exclusive)
--   args   {min, max}            (by lex; kinds: 0 inclusive, 1 exclusive, 2 '-', 3 '+')
-- and answer members in `items` and their scores in `scores`.

-- The members of `k` in a range, in order (see above): what ZRANGE and ZRANGESTORE return.
CREATE OR REPLACE FUNCTION pgvs3.resp_zrange(b bigint, k text, ints bigint[], floats float8[], args bytea[],
    OUT members bytea[], OUT member_scores float8[])
LANGUAGE plpgsql AS $$
DECLARE
    total bigint;
    first bigint := ints[3];
    last bigint := ints[4];
    direction text := CASE WHEN ints[2] = 1 THEN 'DESC' ELSE 'ASC' END;
    filter text;
    skip bigint := ints[5];
    take bigint := CASE WHEN ints[6] < 0 THEN NULL ELSE ints[6] END;
BEGIN
    members := '{}';
    member_scores := '{}';
    IF ints[1] = 0 THEN
        -- Ranks from the end need the size; ranks from the start only a limit.
        IF first < 0 OR last < 0 THEN
            total := (SELECT count(*) FROM pgvs3.resp_zset WHERE bucket_id = b AND key = k);
            IF first < 0 THEN first := first + total; END IF;
            IF last < 0 THEN last := last + total; END IF;
        END IF;
        first := greatest(first, 0);
        IF first > last THEN
            RETURN;
        END IF;
        filter := 'true';
        skip := first;
        -- (A range to 2^63 - 1 is as good as no end: its count would pass bigint.)
        take := least(last - first, 9223372036854775806) + 1;
    ELSIF skip < 0 THEN
        RETURN;
    ELSIF ints[1] = 1 THEN
        -- The range condition the index serves, then exclusivity as a filter.
        filter := 'score >= $3 AND score <= $4 AND ($5 = 0 OR score > $3) AND ($6 = 0 OR score < $4)';
    ELSE
        filter := '($5 = 2 OR member > $7 OR $5 = 0 AND member = $7) AND $5 <> 3
                   AND ($6 = 3 OR member < $8 OR $6 = 0 AND member = $8) AND $6 <> 2';
    END IF;
    EXECUTE format(
        'SELECT coalesce(array_agg(member ORDER BY o), ''{}''), coalesce(array_agg(score ORDER BY o), ''{}'') FROM (
             SELECT member, score, row_number() OVER () AS o FROM (
                 SELECT member, score FROM pgvs3.resp_zset WHERE bucket_id = $1 AND key = $2 AND %s
                  ORDER BY score %s, member %s OFFSET $9 LIMIT $10) r) s',
        filter, direction, direction)
      INTO members, member_scores
     USING b, k, floats[1], floats[2], ints[7], ints[8], args[1], args[2], skip, take;
END $$;

-- ZADD's pairs applied in order (resp_zset below), in one statement: per pair whether it added
-- its member or changed its score (`steps`: 1 added, 2 changed), the members' final scores
-- (`ma`, `sa`) and the members added (`fresh`). ints as resp_zset's ZADD: {XX, NX, GT, LT}.
-- Its own function so that the statement is planned once (plan_cache_mode below): with the
-- default, PostgreSQL planned it again at every call (~0.3 ms, more than running it), as a
-- custom plan, knowing the array's length, always looked cheaper than the generic one. The
-- generic plan is as good: it joins nothing (each pair probes the primary key), so the number
-- of pairs cannot change its shape.
CREATE OR REPLACE FUNCTION pgvs3.resp_zadd_steps(b bigint, k text, args bytea[], floats float8[], ints bigint[],
    OUT added bigint, OUT changed bigint, OUT ma bytea[], OUT sa float8[], OUT steps float8[], OUT fresh bytea[])
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    WITH pairs AS (
        SELECT p.m, p.s, p.pos,
               (SELECT z.score FROM pgvs3.resp_zset z WHERE z.bucket_id = b AND z.key = k AND z.member = p.m) AS was
          FROM unnest(args, floats) WITH ORDINALITY AS p(m, s, pos)
    ), steps AS (
        SELECT m, s, pos, was,
               CASE WHEN ints[3] = 1 THEN greatest(was, max(s) OVER earlier)
                    WHEN ints[4] = 1 THEN least(was, min(s) OVER earlier)
                    ELSE coalesce(lag(s) OVER (PARTITION BY m ORDER BY pos), was) END AS before
          FROM pairs
        WINDOW earlier AS (PARTITION BY m ORDER BY pos ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
    ), applied AS (
        -- A member added by its first pair (unless XX); changed by a later one unless
        -- NX, or XX of a member that was not there, or GT/LT forbid, or the same score.
        SELECT m, s, pos, before IS NULL AND ints[2] = 0 AS adds,
               before IS NOT NULL AND ints[1] = 0 AND (was IS NOT NULL OR ints[2] = 0)
               AND NOT (ints[3] = 1 AND s <= before) AND NOT (ints[4] = 1 AND s >= before)
               AND s <> before AS changes
          FROM steps
    ), final AS (
        -- The score a member ends with: that of its last pair that applied.
        SELECT DISTINCT ON (m) m, s FROM applied WHERE adds OR changes ORDER BY m, pos DESC
    )
    SELECT c.added, c.changed, f.ma, f.sa, c.steps, c.fresh
      INTO added, changed, ma, sa, steps, fresh
      FROM (SELECT count(*) FILTER (WHERE adds) AS added, count(*) FILTER (WHERE changes) AS changed,
                   array_agg((adds::int + 2 * changes::int)::float8 ORDER BY pos) AS steps,
                   array_agg(m) FILTER (WHERE adds) AS fresh
              FROM applied) c,
           (SELECT coalesce(array_agg(m ORDER BY m), '{}') AS ma, coalesce(array_agg(s ORDER BY m), '{}') AS sa
              FROM final) f;
END $$;

-- A batch's script runs' writes to sorted sets, set-based (layout v81; every sorted set of the
-- batch in one call since v85): what their speculated ZADD, ZINCRBY, ZREM, ZPOPMIN/ZPOPMAX and
-- ZREMRANGEBY* calls changed, as resp_hash_apply writes hashes' (functions/resp_hash.sql says
-- how, what the arrays are, and how a changed row is caught): members removed with the scores
-- found, members whose score changed, and members added. Members added wake the clients
-- blocked on their key (BZPOPMIN), as a ZADD that adds does.
CREATE OR REPLACE FUNCTION pgvs3.resp_zset_apply(b bigint, ks text[], existed boolean[], emptied boolean[],
    bump boolean[], adds boolean[], peak bigint[], longest bigint[],
    gone_keys text[], gone bytea[], gone_scores float8[],
    changed_keys text[], changed bytea[], changed_from float8[], changed_to float8[],
    added_keys text[], added bytea[], added_scores float8[])
RETURNS boolean LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    n bigint;
BEGIN
    IF NOT pgvs3.resp_keys_begin(b, ks, 'z', existed, emptied, adds) THEN
        RETURN false;
    END IF;
    IF cardinality(gone) > 0 THEN
        DELETE FROM pgvs3.resp_zset WHERE ctid = ANY (ARRAY(
            SELECT (SELECT z.ctid FROM pgvs3.resp_zset z WHERE z.bucket_id = b AND z.key = g.k AND z.member = g.m AND z.score = g.s)
              FROM unnest(gone_keys, gone, gone_scores) AS g(k, m, s)));
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n <> cardinality(gone) THEN
            RETURN false;
        END IF;
    END IF;
    IF cardinality(changed) > 0 THEN
        IF EXISTS (SELECT 1 FROM unnest(changed_keys, changed, changed_from) AS c(k, m, o)
                    WHERE (SELECT z.score FROM pgvs3.resp_zset z WHERE z.bucket_id = b AND z.key = c.k AND z.member = c.m)
                          IS DISTINCT FROM c.o) THEN
            RETURN false;
        END IF;
        INSERT INTO pgvs3.resp_zset AS z (bucket_id, key, member, score)
        SELECT b, c.k, c.m, c.t FROM unnest(changed_keys, changed, changed_to) AS c(k, m, t)
        ON CONFLICT (bucket_id, key, member) DO UPDATE SET score = EXCLUDED.score;
    END IF;
    IF cardinality(added) > 0 THEN
        INSERT INTO pgvs3.resp_zset (bucket_id, key, member, score)
        SELECT b, a.k, a.m, a.s FROM unnest(added_keys, added, added_scores) AS a(k, m, s)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n <> cardinality(added) THEN
            RETURN false;
        END IF;
        PERFORM pgvs3.resp_wake(b, e.k) FROM unnest(ks, adds) AS e(k, a) WHERE e.a;
    END IF;
    PERFORM pgvs3.resp_keys_end(b, ks, 'z', existed, emptied, bump, adds, peak, longest);
    RETURN true;
END $$;

-- One sorted set's writes, as gateways of layout v84 send them (kept callable through a rolling
-- upgrade; the next layout drops it).
CREATE OR REPLACE FUNCTION pgvs3.resp_zset_apply(b bigint, k text, existed boolean, emptied boolean, bump boolean,
    peak bigint, longest bigint, gone bytea[], gone_scores float8[],
    changed bytea[], changed_from float8[], changed_to float8[], added bytea[], added_scores float8[])
RETURNS boolean LANGUAGE sql AS $$
    SELECT pgvs3.resp_zset_apply(b, ARRAY[k], ARRAY[existed], ARRAY[emptied], ARRAY[bump], ARRAY[cardinality(added) > 0],
        ARRAY[peak], ARRAY[longest], array_fill(k, ARRAY[cardinality(gone)]), gone, gone_scores,
        array_fill(k, ARRAY[cardinality(changed)]), changed, changed_from, changed_to,
        array_fill(k, ARRAY[cardinality(added)]), added, added_scores)
$$;

CREATE OR REPLACE FUNCTION pgvs3.resp_zset(op text, b bigint, ks text[], strings text[], args bytea[], ints bigint[], floats float8[],
    OUT err text, OUT n bigint, OUT items bytea[], OUT scores float8[])
LANGUAGE plpgsql AS $$
DECLARE
    k text := ks[1];
    write boolean := op IN ('zadd', 'zrem', 'zincrby', 'zpopmin', 'zpopmax', 'zrangestore', 'zunionstore', 'zinterstore',
                            'zdiffstore', 'zremrangebyrank', 'zremrangebyscore', 'zremrangebylex', 'bzpopmin', 'bzpopmax',
                            'zmpop');
    store boolean := op IN ('zrangestore', 'zunionstore', 'zinterstore', 'zdiffstore');
    sources text[] := CASE WHEN store THEN ks[2:] ELSE ks END;
    -- Commands over several sources, which may be sets (each member scoring 1) too.
    combining boolean := op IN ('zunionstore', 'zinterstore', 'zdiffstore', 'zunion', 'zinter', 'zdiff', 'zintercard');
    ma bytea[];
    sa float8[];
    total bigint;
    live boolean;
    cur float8;
    new float8;
    i int;
    added bigint := 0;
    changed bigint := 0;
    -- The members the call added (not those whose score it changed): what Redis's zsetAdd
    -- judges the encoding by.
    fresh bytea[];
BEGIN
    IF combining THEN
        err := pgvs3.resp_check(b, ks, strings, '{}', 'z', write);
        IF strings && sources OR EXISTS (
            SELECT 1 FROM unnest(sources) AS s(k) WHERE pgvs3.resp_type(b, s.k) NOT IN ('z', 's')) THEN
            err := pgvs3.resp_wrongtype();
        END IF;
    ELSE
        err := pgvs3.resp_check(b, ks, strings, CASE WHEN store THEN sources ELSE ks END, 'z', write);
    END IF;
    IF err IS NOT NULL THEN
        RETURN;
    END IF;
    IF op = 'zmpop' THEN
        -- ZMPOP/BZMPOP, ints {max (1) or min (0), count}: the first of the keys that holds a
        -- sorted set gives up to count members; items {key, members...}, scores theirs.
        FOR i IN 1 .. cardinality(ks) LOOP
            IF pgvs3.resp_type(b, ks[i]) IS NOT NULL THEN
                SELECT members, member_scores INTO items, scores
                  FROM pgvs3.resp_zrange(b, ks[i], ARRAY[0, ints[1], 0, ints[2] - 1, 0, -1, 0, 0], '{}', '{}');
                DELETE FROM pgvs3.resp_zset WHERE ctid = ANY (ARRAY(
                SELECT (SELECT z.ctid FROM pgvs3.resp_zset z WHERE z.bucket_id = b AND z.key = ks[i] AND z.member = a.x)
                  FROM unnest(items) AS a(x)));
                PERFORM pgvs3.resp_settle(b, ks[i]);
                items := ARRAY[convert_to(ks[i], 'UTF8')] || items;
                RETURN;
            END IF;
        END LOOP;
        RETURN;
    END IF;
    IF op IN ('bzpopmin', 'bzpopmax') THEN
        -- The first of the keys that holds a sorted set: items {key, member}, scores {score}.
        FOR i IN 1 .. cardinality(ks) LOOP
            IF pgvs3.resp_type(b, ks[i]) IS NOT NULL THEN
                SELECT members, member_scores INTO items, scores
                  FROM pgvs3.resp_zrange(b, ks[i], ARRAY[0, CASE WHEN op = 'bzpopmax' THEN 1 ELSE 0 END, 0, 0, 0, -1, 0, 0],
                                         '{}', '{}');
                DELETE FROM pgvs3.resp_zset WHERE bucket_id = b AND key = ks[i] AND member = items[1];
                PERFORM pgvs3.resp_settle(b, ks[i]);
                items := ARRAY[convert_to(ks[i], 'UTF8')] || items;
                RETURN;
            END IF;
        END LOOP;
        RETURN;
    END IF;
    live := pgvs3.resp_type(b, sources[1]) IS NOT NULL;
    CASE op
    WHEN 'zadd', 'zincrby' THEN
        -- ints: {nx, xx, gt, lt, ch, incr} as 0 or 1; floats: the scores of args' members.
        IF ints[6] = 1 THEN
            -- INCR (and ZINCRBY), one pair: the new score, NULL when a condition stopped it.
            SELECT score INTO cur FROM pgvs3.resp_zset WHERE bucket_id = b AND key = k AND member = args[1];
            IF NOT FOUND THEN
                cur := NULL;
            END IF;
            scores := ARRAY[NULL::float8];
            IF cur IS NULL AND ints[2] = 1 OR cur IS NOT NULL AND ints[1] = 1 THEN
                RETURN;
            END IF;
            new := CASE WHEN cur IS NULL THEN floats[1] ELSE cur + floats[1] END;
            IF new = 'NaN'::float8 THEN
                err := 'zset_nan';
                RETURN;
            END IF;
            IF ints[3] = 1 AND new <= cur OR ints[4] = 1 AND new >= cur THEN
                RETURN;
            END IF;
            scores := ARRAY[new];
            IF cur IS NULL THEN
                added := 1;
            ELSIF new <> cur THEN
                changed := 1;
            ELSE
                RETURN;
            END IF;
            ma := args[1:1];
            sa := ARRAY[new];
            fresh := CASE WHEN added > 0 THEN ma END;
        ELSE
            -- One statement over all pairs (a statement per pair, or args[i], was quadratic in
            -- the argument count). Pairs apply in order, as in Redis: a member given twice
            -- sees the score the earlier pair left (`before`): the one before it, or under GT
            -- (LT) the highest (lowest) so far. A member's score now is a probe of the whole
            -- primary key per pair, which no plan reads as a scan of the set: a join planned
            -- before ANALYZE (when a key seems to hold one member) read every member per call.
            -- ints[7] = 1 (0039_resp_batched_calls.sql): scores answer, pair by pair, 1 where it added its member
            -- and 2 where it changed its score: the gateway runs consecutive ZADDs with the same
            -- options on one key as one call and gives each command the count of its own pairs.
            SELECT z.added, z.changed, z.ma, z.sa, CASE WHEN ints[7] = 1 THEN z.steps END, z.fresh
              INTO added, changed, ma, sa, scores, fresh
              FROM pgvs3.resp_zadd_steps(b, k, args, floats, ints) z;
        END IF;
        IF cardinality(ma) > 0 THEN
            PERFORM pgvs3.resp_touch(b, k, 'z');
            INSERT INTO pgvs3.resp_zset AS z (bucket_id, key, member, score)
            SELECT b, k, f.m, f.s FROM unnest(ma, sa) AS f(m, s)
            ON CONFLICT (bucket_id, key, member) DO UPDATE SET score = EXCLUDED.score;
        END IF;
        n := added + CASE WHEN ints[5] = 1 THEN changed ELSE 0 END;
        IF added > 0 THEN
            PERFORM pgvs3.resp_grown(b, k, 'z', fresh, NULL);
            PERFORM pgvs3.resp_wake(b, k);
        END IF;
    WHEN 'zrem' THEN
        -- ints {1} (layout v61): items answer the members removed, for the gateway's run of
        -- consecutive ZREMs on one key as one call (resp/coalesce.rs).
        WITH removed AS (
            DELETE FROM pgvs3.resp_zset WHERE ctid = ANY (ARRAY(
                SELECT (SELECT z.ctid FROM pgvs3.resp_zset z WHERE z.bucket_id = b AND z.key = k AND z.member = a.x)
                  FROM unnest(args) AS a(x)))
            RETURNING member)
        SELECT count(*), CASE WHEN ints[1] = 1 THEN coalesce(array_agg(member), '{}') END INTO n, items FROM removed;
        IF n > 0 THEN
            PERFORM pgvs3.resp_settle(b, k);
        END IF;
    WHEN 'zscore' THEN
        scores := ARRAY[(SELECT score FROM pgvs3.resp_zset WHERE bucket_id = b AND key = k AND live AND member = args[1])];
    WHEN 'zmscore' THEN
        -- A probe of the whole primary key per member (a join planned before ANALYZE read the
        -- whole set).
        SELECT array_agg((SELECT z.score FROM pgvs3.resp_zset z
                           WHERE z.bucket_id = b AND z.key = k AND live AND z.member = a.m) ORDER BY a.i) INTO scores
          FROM unnest(args) WITH ORDINALITY AS a(m, i);
    WHEN 'zcard' THEN
        n := (SELECT count(*) FROM pgvs3.resp_zset WHERE bucket_id = b AND key = k AND live);
    WHEN 'zrank', 'zrevrank' THEN
        -- scores: {the member's score} (WITHSCORE).
        SELECT score INTO cur FROM pgvs3.resp_zset WHERE bucket_id = b AND key = k AND live AND member = args[1];
        IF FOUND THEN
            scores := ARRAY[cur];
            IF op = 'zrank' THEN
                n := (SELECT count(*) FROM pgvs3.resp_zset
                       WHERE bucket_id = b AND key = k AND (score, member) < (cur, args[1]));
            ELSE
                n := (SELECT count(*) FROM pgvs3.resp_zset
                       WHERE bucket_id = b AND key = k AND (score, member) > (cur, args[1]));
            END IF;
        END IF;
    WHEN 'zrange', 'zrangestore', 'zcount', 'zlexcount', 'zremrangebyrank', 'zremrangebyscore', 'zremrangebylex' THEN
        IF live THEN
            SELECT members, member_scores INTO items, scores FROM pgvs3.resp_zrange(b, sources[1], ints, floats, args);
        ELSE
            items := '{}';
            scores := '{}';
        END IF;
        IF op IN ('zcount', 'zlexcount') THEN
            n := cardinality(items);
            items := NULL;
            scores := NULL;
        ELSIF op LIKE 'zremrange%' THEN
            DELETE FROM pgvs3.resp_zset WHERE ctid = ANY (ARRAY(
                SELECT (SELECT z.ctid FROM pgvs3.resp_zset z WHERE z.bucket_id = b AND z.key = k AND z.member = a.x)
                  FROM unnest(items) AS a(x)));
            GET DIAGNOSTICS n = ROW_COUNT;
            IF n > 0 THEN
                PERFORM pgvs3.resp_settle(b, k);
            END IF;
            items := NULL;
            scores := NULL;
        END IF;
    WHEN 'zpopmin', 'zpopmax' THEN
        -- ints: {count}; the gateway bounds it. The lowest (highest) ranks, then gone.
        items := '{}';
        scores := '{}';
        IF live AND ints[1] > 0 THEN
            SELECT members, member_scores INTO items, scores
              FROM pgvs3.resp_zrange(b, k, ARRAY[0, CASE WHEN op = 'zpopmax' THEN 1 ELSE 0 END, 0, ints[1] - 1, 0, -1, 0, 0],
                                     '{}', '{}');
            DELETE FROM pgvs3.resp_zset WHERE ctid = ANY (ARRAY(
                SELECT (SELECT z.ctid FROM pgvs3.resp_zset z WHERE z.bucket_id = b AND z.key = k AND z.member = a.x)
                  FROM unnest(items) AS a(x)));
            PERFORM pgvs3.resp_settle(b, k);
        END IF;
    WHEN 'zunionstore', 'zinterstore', 'zunion', 'zinter', 'zintercard' THEN
        -- floats: one weight per source; ints: {aggregate: 0 sum, 1 min, 2 max, ZINTERCARD's
        -- limit (0: none)}. Expired sources (not yet deleted by a read) count as missing.
        WITH src AS (
            SELECT s.key, s.ord, coalesce(floats[s.ord], 1) AS w FROM unnest(sources) WITH ORDINALITY AS s(key, ord)
             WHERE pgvs3.resp_type(b, s.key) IS NOT NULL
        ), elements AS (
            -- Each source read by its own index range (a join planned before ANALYZE, when a
            -- bucket seems to hold a few rows, read all of the bucket's).
            SELECT src.ord, z.member, z.score * src.w AS score
              FROM src, LATERAL (SELECT member, score FROM pgvs3.resp_zset
                                  WHERE bucket_id = b AND key = src.key OFFSET 0) z
            UNION ALL
            SELECT src.ord, m.member, src.w
              FROM src, LATERAL (SELECT member FROM pgvs3.resp_set
                                  WHERE bucket_id = b AND key = src.key OFFSET 0) m
        ), weighed AS (
            -- inf * 0 is NaN; Redis counts it as 0.
            SELECT ord, member, CASE WHEN score = 'NaN'::float8 THEN 0 ELSE score END AS score FROM elements
        ), combined AS (
            SELECT member,
                   CASE ints[1] WHEN 1 THEN min(score) WHEN 2 THEN max(score) ELSE sum(score) END AS score
              FROM weighed GROUP BY member
            HAVING op IN ('zunionstore', 'zunion') OR count(DISTINCT ord) = cardinality(sources)
        )
        SELECT coalesce(array_agg(member ORDER BY score, member), '{}'),
               coalesce(array_agg(CASE WHEN score = 'NaN'::float8 THEN 0 ELSE score END ORDER BY score, member), '{}')
          INTO items, scores FROM combined;
        IF op = 'zintercard' THEN
            n := CASE WHEN ints[2] > 0 THEN least(cardinality(items), ints[2]) ELSE cardinality(items) END;
            items := NULL;
            scores := NULL;
        END IF;
    WHEN 'zdiff', 'zdiffstore' THEN
        -- The first source's members that no other source has, with their scores.
        WITH first AS (
            SELECT member, score FROM pgvs3.resp_zset
             WHERE bucket_id = b AND key = sources[1] AND pgvs3.resp_type(b, sources[1]) IS NOT NULL
            UNION ALL
            SELECT member, 1 FROM pgvs3.resp_set
             WHERE bucket_id = b AND key = sources[1] AND pgvs3.resp_type(b, sources[1]) IS NOT NULL
        ), others AS (
            SELECT key FROM unnest(sources[2:]) AS o(key) WHERE pgvs3.resp_type(b, key) IS NOT NULL
        )
        SELECT coalesce(array_agg(member ORDER BY score, member), '{}'), coalesce(array_agg(score ORDER BY score, member), '{}')
          INTO items, scores FROM first f
         WHERE NOT EXISTS (SELECT 1 FROM pgvs3.resp_zset z JOIN others o ON z.key = o.key
                            WHERE z.bucket_id = b AND z.member = f.member)
           AND NOT EXISTS (SELECT 1 FROM pgvs3.resp_set m JOIN others o ON m.key = o.key
                            WHERE m.bucket_id = b AND m.member = f.member);
    WHEN 'zrandmember' THEN
        -- ints: {count (NULL: none given)}. The gateway bounds the count.
        IF NOT live THEN
            items := CASE WHEN ints[1] IS NULL THEN ARRAY[NULL::bytea] ELSE '{}' END;
            scores := '{}';
        ELSIF ints[1] IS NULL OR ints[1] >= 0 THEN
            SELECT coalesce(array_agg(member ORDER BY r), '{}'), coalesce(array_agg(score ORDER BY r), '{}')
              INTO items, scores FROM (
                SELECT member, score, random() AS r FROM pgvs3.resp_zset WHERE bucket_id = b AND key = k
                 ORDER BY r LIMIT coalesce(ints[1], 1)) s;
        ELSE
            -- Repeats allowed: |count| draws from the members, read once.
            SELECT array_agg(member), array_agg(score) INTO ma, sa FROM pgvs3.resp_zset WHERE bucket_id = b AND key = k;
            total := cardinality(ma);
            SELECT array_agg(ma[d.i] ORDER BY g), array_agg(sa[d.i] ORDER BY g) INTO items, scores
              FROM (SELECT g, 1 + floor(random() * total)::int AS i FROM generate_series(1, -ints[1]) g) d;
        END IF;
    WHEN 'zscan' THEN
        -- ints: {cursor (an offset in member order), count}; n: the next cursor, 0 at the end.
        SELECT coalesce(array_agg(member ORDER BY member), '{}'), coalesce(array_agg(score ORDER BY member), '{}')
          INTO items, scores FROM (
            SELECT member, score FROM pgvs3.resp_zset WHERE bucket_id = b AND key = k AND live
             ORDER BY member OFFSET ints[1] LIMIT ints[2]) s;
        n := CASE WHEN cardinality(items) < ints[2] THEN 0 ELSE ints[1] + cardinality(items) END;
    END CASE;
    IF store THEN
        -- The destination is replaced, whatever it held; an empty result deletes it.
        PERFORM pgvs3.resp_clear(b, k, k = ANY (strings));
        IF cardinality(items) > 0 THEN
            INSERT INTO pgvs3.resp_keys (bucket_id, key, type) VALUES (b, k, 'z');
            INSERT INTO pgvs3.resp_zset (bucket_id, key, member, score)
                SELECT b, k, m, s FROM unnest(items, scores) AS u(m, s);
            -- Judged by what it holds, as Redis's ZRANGESTORE creates it and its *STORE
            -- converts it (t_zset.c zrangeResultBeginStore, zsetConvertToListpackIfNeeded).
            PERFORM pgvs3.resp_grown(b, k, 'z', items, cardinality(items));
            PERFORM pgvs3.resp_wake(b, k);
        END IF;
        n := cardinality(items);
        items := NULL;
        scores := NULL;
    END IF;
END $$;
