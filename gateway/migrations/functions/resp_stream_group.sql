-- RESP stream consumer groups (layout v27): XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM,
-- XAUTOCLAIM and XINFO GROUPS/CONSUMERS, one call per command as functions/resp_keys.sql
-- describes, on the tables of 0027_resp_stream_groups.sql. IDs travel and come back as in
-- functions/resp_stream.sql. A missing group answers err = 'nogroup': the gateway words the
-- error (resp/stream_group.rs), as the names need not be UTF-8.

-- Now, as the tables keep times: Unix milliseconds.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_now() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

-- Redis's streamEstimateDistanceFromFirstEverEntry: the logical count of entries up to the
-- ID (`ms`, `seq`) of stream `s`, whose first entry is (`first_ms`, `first_seq`) (NULL when
-- empty); NULL when it cannot be known.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_counter(s pgvs3.resp_stream, first_ms bigint, first_seq bigint, ms bigint, seq bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN s.added = 0 THEN 0
        WHEN s.length = 0 AND (ms, seq) <= (s.last_ms, s.last_seq) THEN s.added
        WHEN (ms, seq) = (s.last_ms, s.last_seq) THEN s.added
        WHEN (ms, seq) > (s.last_ms, s.last_seq) THEN NULL
        WHEN (s.deleted_ms, s.deleted_seq) = (pgvs3.resp_stream_min(), pgvs3.resp_stream_min())
             OR (s.deleted_ms, s.deleted_seq) < (first_ms, first_seq) THEN
            CASE WHEN (ms, seq) < (first_ms, first_seq) THEN s.added - s.length
                 WHEN (ms, seq) = (first_ms, first_seq) THEN s.added - s.length + 1
            END
    END
$$;

-- Redis's streamRangeHasTombstones from (`ms`, `seq`) to the end: whether an entry XDEL
-- removed lies there, within the stream's entries.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_tombstone_after(s pgvs3.resp_stream, first_ms bigint, first_seq bigint, ms bigint, seq bigint)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT s.length > 0
       AND (s.deleted_ms, s.deleted_seq) <> (pgvs3.resp_stream_min(), pgvs3.resp_stream_min())
       AND (first_ms, first_seq) <= (s.deleted_ms, s.deleted_seq)
       AND (ms, seq) <= (s.deleted_ms, s.deleted_seq)
$$;

-- The first entry's ID of a stream, NULLs when it is empty.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_first(b bigint, k text, OUT ms bigint, OUT seq bigint) LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT e.ms, e.seq INTO ms, seq FROM pgvs3.resp_stream_entry e WHERE e.bucket_id = b AND e.key = k ORDER BY e.ms, e.seq LIMIT 1;
END $$;

-- A group's lag (Redis's streamReplyWithCGLag): the entries not yet delivered to it, NULL
-- when unknown.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_lag(s pgvs3.resp_stream, first_ms bigint, first_seq bigint, g pgvs3.resp_stream_group)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN s.added = 0 THEN 0
        WHEN g.entries_read IS NOT NULL AND NOT pgvs3.resp_stream_tombstone_after(s, first_ms, first_seq, g.last_ms, g.last_seq)
            THEN s.added - g.entries_read
        ELSE s.added - pgvs3.resp_stream_counter(s, first_ms, first_seq, g.last_ms, g.last_seq)
    END
$$;

-- XINFO STREAM FULL's groups of stream `s`, in name order, each PEL listed up to `c` entries
-- (NULL: all). Per group, items: {name, last-delivered-id}, then each listed pending entry's
-- ID and consumer, then per consumer its name and its listed entries' IDs. Scores: {entries-
-- read, lag, PEL size, listed}, each listed entry's delivery time and count, {consumers}, then
-- per consumer {seen-time, active-time (-1: never), PEL size, listed} and each listed entry's
-- delivery time and count.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_groups_full(s pgvs3.resp_stream, c bigint, OUT items bytea[], OUT scores float8[])
LANGUAGE plpgsql STABLE AS $$
DECLARE
    head record;
    g pgvs3.resp_stream_group;
    r pgvs3.resp_stream_consumer;
BEGIN
    items := '{}';
    scores := '{}';
    SELECT * INTO head FROM pgvs3.resp_stream_first(s.bucket_id, s.key);
    FOR g IN SELECT * FROM pgvs3.resp_stream_group x WHERE x.bucket_id = s.bucket_id AND x.key = s.key ORDER BY x.name LOOP
        WITH p AS (
            SELECT q.ms, q.seq, q.consumer, q.delivered_ms, q.deliveries FROM pgvs3.resp_stream_pending q
             WHERE q.bucket_id = s.bucket_id AND q.key = s.key AND q.grp = g.name ORDER BY q.ms, q.seq LIMIT c)
        SELECT items || g.name || pgvs3.resp_stream_id(g.last_ms, g.last_seq)
                     || coalesce((SELECT array_agg(x.item ORDER BY p.ms, p.seq, x.o)
                                    FROM p, unnest(ARRAY[pgvs3.resp_stream_id(p.ms, p.seq), p.consumer]) WITH ORDINALITY AS x(item, o)), '{}'),
               scores || ARRAY[g.entries_read, pgvs3.resp_stream_lag(s, head.ms, head.seq, g),
                               (SELECT count(*) FROM pgvs3.resp_stream_pending q
                                 WHERE q.bucket_id = s.bucket_id AND q.key = s.key AND q.grp = g.name),
                               (SELECT count(*) FROM p)]::float8[]
                      || coalesce((SELECT array_agg(x.v ORDER BY p.ms, p.seq, x.o)
                                     FROM p, unnest(ARRAY[p.delivered_ms, p.deliveries]::float8[]) WITH ORDINALITY AS x(v, o)), '{}')
                      || (SELECT count(*)::float8 FROM pgvs3.resp_stream_consumer x
                           WHERE x.bucket_id = s.bucket_id AND x.key = s.key AND x.grp = g.name)
          INTO items, scores;
        FOR r IN SELECT * FROM pgvs3.resp_stream_consumer x
                  WHERE x.bucket_id = s.bucket_id AND x.key = s.key AND x.grp = g.name ORDER BY x.name LOOP
            WITH p AS (
                SELECT q.ms, q.seq, q.delivered_ms, q.deliveries FROM pgvs3.resp_stream_pending q
                 WHERE q.bucket_id = s.bucket_id AND q.key = s.key AND q.grp = g.name AND q.consumer = r.name
                 ORDER BY q.ms, q.seq LIMIT c)
            SELECT items || r.name || coalesce((SELECT array_agg(pgvs3.resp_stream_id(p.ms, p.seq) ORDER BY p.ms, p.seq) FROM p), '{}'),
                   scores || ARRAY[r.seen_ms, coalesce(r.active_ms, -1),
                                   (SELECT count(*) FROM pgvs3.resp_stream_pending q
                                     WHERE q.bucket_id = s.bucket_id AND q.key = s.key AND q.grp = g.name AND q.consumer = r.name),
                                   (SELECT count(*) FROM p)]::float8[]
                          || coalesce((SELECT array_agg(x.v ORDER BY p.ms, p.seq, x.o)
                                         FROM p, unnest(ARRAY[p.delivered_ms, p.deliveries]::float8[]) WITH ORDINALITY AS x(v, o)), '{}')
              INTO items, scores;
        END LOOP;
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION pgvs3.resp_stream_group(op text, b bigint, ks text[], strings text[], args bytea[], ints bigint[], floats float8[],
    OUT err text, OUT n bigint, OUT items bytea[], OUT scores float8[])
LANGUAGE plpgsql AS $$
DECLARE
    k text := ks[1];
    g_name bytea := args[1];
    c_name bytea := args[2];
    write boolean := op NOT IN ('xpending', 'xinfo_groups', 'xinfo_consumers');
    now_ms bigint := pgvs3.resp_stream_now();
    s pgvs3.resp_stream;
    g pgvs3.resp_stream_group;
    p pgvs3.resp_stream_pending;
    head record;
    e record;
    flat record;
    batch pgvs3.resp_stream_entry[];
    claimed pgvs3.resp_stream_entry[];
    -- XCLAIM: where in `ints` each claimed ID is.
    claimed_at int[] := '{}';
    j int;
    entry_fields bytea[];
    delivered bigint;
    cursor_ms bigint;
    cursor_seq bigint;
BEGIN
    err := pgvs3.resp_check(b, ks, strings, ks, 'x', write);
    IF err IS NOT NULL THEN
        RETURN;
    END IF;
    items := '{}';
    scores := '{}';
    IF op = 'xreadgroup' THEN
        -- args: {group, consumer}; ints: {count (NULL: all), NOACK (1)}, then per key {mode,
        -- ms, seq}: mode 1 is `>` (new entries), 0 the consumer's pending entries after the ID.
        -- items and scores as XREAD's (resp_stream), a deleted pending entry with a NULL length.
        FOR j IN 1 .. cardinality(ks) LOOP
            IF NOT EXISTS (SELECT 1 FROM pgvs3.resp_stream_group r
                            WHERE r.bucket_id = b AND r.key = ks[j] AND r.name = g_name AND pgvs3.resp_type(b, ks[j]) IS NOT NULL) THEN
                err := 'nogroup';
                n := j;
                RETURN;
            END IF;
        END LOOP;
        FOR j IN 1 .. cardinality(ks) LOOP
            k := ks[j];
            SELECT * INTO s FROM pgvs3.resp_stream r WHERE r.bucket_id = b AND r.key = k;
            SELECT * INTO g FROM pgvs3.resp_stream_group r WHERE r.bucket_id = b AND r.key = k AND r.name = g_name;
            INSERT INTO pgvs3.resp_stream_consumer AS r VALUES (b, k, g_name, c_name, now_ms, NULL)
            ON CONFLICT (bucket_id, key, grp, name) DO UPDATE SET seen_ms = now_ms;
            IF ints[3 * j] = 0 THEN
                -- The history: the consumer's pending entries after the ID (the stream comes
                -- back with none too), each delivered once more unless deleted.
                batch := ARRAY(SELECT ROW(b, k, q.ms, q.seq, x.fields)::pgvs3.resp_stream_entry
                                 FROM pgvs3.resp_stream_pending q
                                 LEFT JOIN LATERAL (SELECT fields FROM pgvs3.resp_stream_entry
                                                     WHERE bucket_id = b AND key = k AND ms = q.ms AND seq = q.seq OFFSET 0) x ON true
                                WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name AND q.consumer = c_name
                                  AND (q.ms, q.seq) > (ints[3 * j + 1], ints[3 * j + 2])
                                ORDER BY q.ms, q.seq LIMIT ints[1]);
                UPDATE pgvs3.resp_stream_pending q SET delivered_ms = now_ms, deliveries = q.deliveries + 1
                  FROM unnest(batch) f
                 WHERE f.fields IS NOT NULL AND q.bucket_id = b AND q.key = k AND q.grp = g_name AND q.ms = f.ms AND q.seq = f.seq;
            ELSE
                batch := ARRAY(SELECT x FROM pgvs3.resp_stream_entry x
                                WHERE x.bucket_id = b AND x.key = k AND (x.ms, x.seq) > (g.last_ms, g.last_seq)
                                ORDER BY x.ms, x.seq LIMIT ints[1]);
                CONTINUE WHEN cardinality(batch) = 0;
                -- Redis's count of entries read: counted on while no XDEL gap lies ahead, else
                -- estimated again (once it is known with no gap ahead, the rest count on).
                SELECT * INTO head FROM pgvs3.resp_stream_first(b, k);
                FOR e IN SELECT f.ms, f.seq, f.r FROM unnest(batch) WITH ORDINALITY AS f(bucket_id, key, ms, seq, fields, r) LOOP
                    IF g.entries_read IS NOT NULL AND NOT pgvs3.resp_stream_tombstone_after(s, head.ms, head.seq, e.ms, e.seq) THEN
                        g.entries_read := g.entries_read + cardinality(batch) - e.r + 1;
                        EXIT;
                    END IF;
                    g.entries_read := pgvs3.resp_stream_counter(s, head.ms, head.seq, e.ms, e.seq);
                END LOOP;
                UPDATE pgvs3.resp_stream_group r
                   SET last_ms = batch[cardinality(batch)].ms, last_seq = batch[cardinality(batch)].seq, entries_read = g.entries_read
                 WHERE r.bucket_id = b AND r.key = k AND r.name = g_name;
                UPDATE pgvs3.resp_stream_consumer r SET active_ms = now_ms
                 WHERE r.bucket_id = b AND r.key = k AND r.grp = g_name AND r.name = c_name;
                IF ints[2] IS DISTINCT FROM 1 THEN
                    -- An entry already pending (after SETID back) moves to this consumer.
                    INSERT INTO pgvs3.resp_stream_pending AS q SELECT b, k, g_name, f.ms, f.seq, c_name, now_ms, 1 FROM unnest(batch) f
                    ON CONFLICT (bucket_id, key, grp, ms, seq) DO UPDATE SET consumer = c_name, delivered_ms = now_ms, deliveries = 1;
                END IF;
            END IF;
            SELECT * INTO flat FROM pgvs3.resp_stream_flat(batch);
            items := items || convert_to(k, 'UTF8') || flat.items;
            scores := scores || cardinality(batch)::float8 || flat.scores;
        END LOOP;
        RETURN;
    END IF;
    SELECT * INTO s FROM pgvs3.resp_stream r WHERE r.bucket_id = b AND r.key = k AND pgvs3.resp_type(b, k) IS NOT NULL;
    SELECT * INTO g FROM pgvs3.resp_stream_group r WHERE r.bucket_id = b AND r.key = k AND r.name = g_name AND s.key IS NOT NULL;
    IF op LIKE 'xgroup_%' THEN
        IF s.key IS NULL AND NOT (op = 'xgroup_create' AND ints[4] = 1) THEN
            err := 'xgroup_needs_key';
            RETURN;
        END IF;
        IF g.name IS NULL AND op IN ('xgroup_setid', 'xgroup_createconsumer', 'xgroup_delconsumer') THEN
            err := 'nogroup';
            RETURN;
        END IF;
        -- Group changes are changes of the key, for WATCH.
        UPDATE pgvs3.resp_keys SET version = nextval('pgvs3.resp_key_versions') WHERE bucket_id = b AND key = k;
    ELSIF op = 'xinfo_groups' THEN
        IF s.key IS NULL THEN
            err := 'no_such_key';
            RETURN;
        END IF;
    ELSIF s.key IS NULL OR g.name IS NULL THEN
        CASE op
        WHEN 'xack' THEN n := 0;
        WHEN 'xinfo_consumers' THEN err := CASE WHEN s.key IS NULL THEN 'no_such_key' ELSE 'nogroup' END;
        ELSE err := 'nogroup';
        END CASE;
        RETURN;
    END IF;
    CASE op
    WHEN 'xgroup_create' THEN
        -- args: {group}; ints: {`$` (1) or an ID (0), ms, seq, MKSTREAM (1), ENTRIESREAD (NULL: unknown)}.
        IF s.key IS NULL THEN
            PERFORM pgvs3.resp_touch(b, k, 'x');
            INSERT INTO pgvs3.resp_stream VALUES (b, k, pgvs3.resp_stream_min(), pgvs3.resp_stream_min(),
                                                  pgvs3.resp_stream_min(), pgvs3.resp_stream_min(), 0, 0)
            RETURNING * INTO s;
        ELSIF g.name IS NOT NULL THEN
            err := 'busygroup';
            RETURN;
        END IF;
        INSERT INTO pgvs3.resp_stream_group VALUES (b, k, g_name,
            CASE WHEN ints[1] = 1 THEN s.last_ms ELSE ints[2] END,
            CASE WHEN ints[1] = 1 THEN s.last_seq ELSE ints[3] END, ints[5]);
        n := 1;
    WHEN 'xgroup_setid' THEN
        -- args: {group}; ints: as CREATE's.
        UPDATE pgvs3.resp_stream_group r
           SET last_ms = CASE WHEN ints[1] = 1 THEN s.last_ms ELSE ints[2] END,
               last_seq = CASE WHEN ints[1] = 1 THEN s.last_seq ELSE ints[3] END,
               entries_read = ints[5]
         WHERE r.bucket_id = b AND r.key = k AND r.name = g_name;
        n := 1;
    WHEN 'xgroup_destroy' THEN
        DELETE FROM pgvs3.resp_stream_group r WHERE r.bucket_id = b AND r.key = k AND r.name = g_name;
        GET DIAGNOSTICS n = ROW_COUNT;
        -- Clients blocked in XREADGROUP on the group are unblocked (with Redis's NOGROUP).
        PERFORM pgvs3.resp_wake(b, k);
    WHEN 'xgroup_createconsumer' THEN
        -- args: {group, consumer}.
        INSERT INTO pgvs3.resp_stream_consumer VALUES (b, k, g_name, c_name, now_ms, NULL) ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
    WHEN 'xgroup_delconsumer' THEN
        -- n: how many pending entries went with the consumer.
        SELECT count(*) INTO n FROM pgvs3.resp_stream_pending q
         WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name AND q.consumer = c_name;
        DELETE FROM pgvs3.resp_stream_consumer r WHERE r.bucket_id = b AND r.key = k AND r.grp = g_name AND r.name = c_name;
    WHEN 'xack' THEN
        -- args: {group}; ints: the IDs, in pairs. Each is a primary-key delete (one at a
        -- time, whatever the planner would make of a join).
        n := 0;
        FOR j IN 1 .. cardinality(ints) - 1 BY 2 LOOP
            DELETE FROM pgvs3.resp_stream_pending q
             WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name AND q.ms = ints[j] AND q.seq = ints[j + 1];
            IF FOUND THEN
                n := n + 1;
            END IF;
        END LOOP;
    WHEN 'xpending' THEN
        IF ints[1] IS NULL THEN
            -- The summary. n: the PEL's size; items: {first ID, last ID} (NULLs when none),
            -- then each consumer that holds entries; scores: how many each holds.
            SELECT count(*) INTO n FROM pgvs3.resp_stream_pending q WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name;
            items := ARRAY[
                (SELECT pgvs3.resp_stream_id(q.ms, q.seq) FROM pgvs3.resp_stream_pending q
                  WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name ORDER BY q.ms, q.seq LIMIT 1),
                (SELECT pgvs3.resp_stream_id(q.ms, q.seq) FROM pgvs3.resp_stream_pending q
                  WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name ORDER BY q.ms DESC, q.seq DESC LIMIT 1)];
            SELECT items || coalesce(array_agg(c.consumer ORDER BY c.consumer), '{}'),
                   coalesce(array_agg(c.held::float8 ORDER BY c.consumer), '{}')
              INTO items, scores
              FROM (SELECT q.consumer, count(*) AS held FROM pgvs3.resp_stream_pending q
                     WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name GROUP BY q.consumer) c;
        ELSE
            -- ints: {1, least idle time, start ms, seq, end ms, seq, count}; args[2]: only
            -- this consumer's. items: each entry's ID and consumer; scores: its idle time and
            -- deliveries.
            WITH q AS (
                SELECT q.ms, q.seq, q.consumer, q.delivered_ms, q.deliveries FROM pgvs3.resp_stream_pending q
                 WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name
                   AND (q.ms, q.seq) >= (ints[3], ints[4]) AND (q.ms, q.seq) <= (ints[5], ints[6])
                   AND (c_name IS NULL OR q.consumer = c_name) AND now_ms - q.delivered_ms >= ints[2]
                 ORDER BY q.ms, q.seq LIMIT ints[7])
            SELECT (SELECT coalesce(array_agg(i.item ORDER BY q.ms, q.seq, i.o), '{}')
                      FROM q, unnest(ARRAY[pgvs3.resp_stream_id(q.ms, q.seq), q.consumer]) WITH ORDINALITY AS i(item, o)),
                   (SELECT coalesce(array_agg(i.score ORDER BY q.ms, q.seq, i.o), '{}')
                      FROM q, unnest(ARRAY[greatest(now_ms - q.delivered_ms, 0), q.deliveries]::float8[]) WITH ORDINALITY AS i(score, o))
              INTO items, scores;
        END IF;
    WHEN 'xclaim' THEN
        -- args: {group, consumer}; ints: {least idle time, IDLE (NULL), TIME (NULL), RETRYCOUNT
        -- (NULL), FORCE (1), JUSTID (1), LASTID ms (NULL), seq}, then the IDs in pairs. items:
        -- the claimed IDs (JUSTID) or entries, flat with their lengths in scores.
        IF ints[7] IS NOT NULL AND (ints[7], ints[8]) > (g.last_ms, g.last_seq) THEN
            UPDATE pgvs3.resp_stream_group r SET last_ms = ints[7], last_seq = ints[8]
             WHERE r.bucket_id = b AND r.key = k AND r.name = g_name;
        END IF;
        delivered := coalesce(ints[3], now_ms - ints[2], now_ms);
        IF delivered < 0 OR delivered > now_ms THEN
            delivered := now_ms;
        END IF;
        INSERT INTO pgvs3.resp_stream_consumer AS r VALUES (b, k, g_name, c_name, now_ms, NULL)
        ON CONFLICT (bucket_id, key, grp, name) DO UPDATE SET seen_ms = now_ms;
        FOR j IN 9 .. cardinality(ints) - 1 BY 2 LOOP
            SELECT * INTO p FROM pgvs3.resp_stream_pending q
             WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name AND q.ms = ints[j] AND q.seq = ints[j + 1];
            SELECT x.fields INTO entry_fields FROM pgvs3.resp_stream_entry x
             WHERE x.bucket_id = b AND x.key = k AND x.ms = ints[j] AND x.seq = ints[j + 1];
            IF entry_fields IS NULL THEN
                -- Gone from the stream: gone from the PEL too.
                DELETE FROM pgvs3.resp_stream_pending q
                 WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name AND q.ms = ints[j] AND q.seq = ints[j + 1];
                CONTINUE;
            END IF;
            IF p.key IS NULL THEN
                CONTINUE WHEN ints[5] IS DISTINCT FROM 1;
                -- FORCE makes the entry pending, with Redis's first delivery count.
                INSERT INTO pgvs3.resp_stream_pending VALUES (b, k, g_name, ints[j], ints[j + 1], c_name, now_ms, 1) RETURNING * INTO p;
            ELSIF ints[1] > 0 AND now_ms - p.delivered_ms < ints[1] THEN
                CONTINUE;
            END IF;
            UPDATE pgvs3.resp_stream_pending q
               SET consumer = c_name, delivered_ms = delivered,
                   deliveries = coalesce(ints[4], q.deliveries + CASE WHEN ints[6] = 1 THEN 0 ELSE 1 END)
             WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name AND q.ms = ints[j] AND q.seq = ints[j + 1];
            -- (Appending one element is done in place; the reply is built once, below.)
            claimed_at := claimed_at || j;
        END LOOP;
        IF cardinality(claimed_at) > 0 THEN
            UPDATE pgvs3.resp_stream_consumer r SET active_ms = now_ms
             WHERE r.bucket_id = b AND r.key = k AND r.grp = g_name AND r.name = c_name;
        END IF;
        IF ints[6] = 1 THEN
            items := ARRAY(SELECT pgvs3.resp_stream_id(ints[c.j], ints[c.j + 1])
                             FROM unnest(claimed_at) WITH ORDINALITY AS c(j, o) ORDER BY c.o);
        ELSE
            SELECT * INTO flat FROM pgvs3.resp_stream_flat(ARRAY(
                SELECT x.entry FROM unnest(claimed_at) WITH ORDINALITY AS c(j, o)
                  JOIN LATERAL (SELECT stored AS entry FROM pgvs3.resp_stream_entry stored
                                 WHERE stored.bucket_id = b AND stored.key = k AND stored.ms = ints[c.j]
                                   AND stored.seq = ints[c.j + 1] OFFSET 0) x ON true
                 ORDER BY c.o));
            items := flat.items;
            scores := flat.scores;
        END IF;
    WHEN 'xautoclaim' THEN
        -- args: {group, consumer}; ints: {least idle time, start ms, seq, count, JUSTID (1)}.
        -- Looks at 10 times `count` pending entries at most, as Redis. items: {the next
        -- cursor}, the claimed IDs (JUSTID) or entries, then the IDs of deleted entries it
        -- dropped; scores: {claimed, dropped}, then the entries' lengths.
        INSERT INTO pgvs3.resp_stream_consumer AS r VALUES (b, k, g_name, c_name, now_ms, NULL)
        ON CONFLICT (bucket_id, key, grp, name) DO UPDATE SET seen_ms = now_ms;
        -- Entries deleted from the stream and entries idle long enough each take one of
        -- `count`; the cursor is the pending entry after the last one looked at.
        batch := ARRAY(SELECT ROW(b, k, q.ms, q.seq, x.fields)::pgvs3.resp_stream_entry
                         FROM (SELECT * FROM pgvs3.resp_stream_pending q
                                WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name AND (q.ms, q.seq) >= (ints[2], ints[3])
                                ORDER BY q.ms, q.seq LIMIT ints[4] * 10) q
                         LEFT JOIN LATERAL (SELECT fields FROM pgvs3.resp_stream_entry
                                             WHERE bucket_id = b AND key = k AND ms = q.ms AND seq = q.seq OFFSET 0) x ON true
                        WHERE x.fields IS NULL OR ints[1] = 0 OR now_ms - q.delivered_ms >= ints[1]
                        ORDER BY q.ms, q.seq LIMIT ints[4]);
        IF cardinality(batch) = ints[4] THEN
            cursor_ms := batch[cardinality(batch)].ms;
            cursor_seq := batch[cardinality(batch)].seq;
        ELSE
            SELECT q.ms, q.seq INTO cursor_ms, cursor_seq
              FROM (SELECT q.ms, q.seq FROM pgvs3.resp_stream_pending q
                     WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name AND (q.ms, q.seq) >= (ints[2], ints[3])
                     ORDER BY q.ms, q.seq LIMIT ints[4] * 10) q
             ORDER BY q.ms DESC, q.seq DESC LIMIT 1;
        END IF;
        DELETE FROM pgvs3.resp_stream_pending q USING unnest(batch) f
         WHERE f.fields IS NULL AND q.bucket_id = b AND q.key = k AND q.grp = g_name AND q.ms = f.ms AND q.seq = f.seq;
        UPDATE pgvs3.resp_stream_pending q
           SET consumer = c_name, delivered_ms = now_ms, deliveries = q.deliveries + CASE WHEN ints[5] = 1 THEN 0 ELSE 1 END
          FROM unnest(batch) f
         WHERE f.fields IS NOT NULL AND q.bucket_id = b AND q.key = k AND q.grp = g_name AND q.ms = f.ms AND q.seq = f.seq;
        claimed := ARRAY(SELECT f FROM unnest(batch) f WHERE f.fields IS NOT NULL);
        IF cardinality(claimed) > 0 THEN
            UPDATE pgvs3.resp_stream_consumer r SET active_ms = now_ms
             WHERE r.bucket_id = b AND r.key = k AND r.grp = g_name AND r.name = c_name;
        END IF;
        IF ints[5] = 1 THEN
            SELECT ARRAY(SELECT pgvs3.resp_stream_id(f.ms, f.seq) FROM unnest(claimed) f) AS items, '{}'::float8[] AS scores INTO flat;
        ELSE
            SELECT * INTO flat FROM pgvs3.resp_stream_flat(claimed);
        END IF;
        items := ARRAY[coalesce(
                    (SELECT pgvs3.resp_stream_id(q.ms, q.seq) FROM pgvs3.resp_stream_pending q
                      WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name AND (q.ms, q.seq) > (cursor_ms, cursor_seq)
                      ORDER BY q.ms, q.seq LIMIT 1),
                    pgvs3.resp_stream_id(pgvs3.resp_stream_min(), pgvs3.resp_stream_min()))]
                 || flat.items
                 || ARRAY(SELECT pgvs3.resp_stream_id(f.ms, f.seq) FROM unnest(batch) f WHERE f.fields IS NULL);
        scores := ARRAY[cardinality(claimed), cardinality(batch) - cardinality(claimed)]::float8[] || flat.scores;
    WHEN 'xinfo_groups' THEN
        -- Per group, in name order: items {name, last-delivered-id}; scores {consumers,
        -- pending, entries-read, lag} (NULL: unknown).
        SELECT * INTO head FROM pgvs3.resp_stream_first(b, k);
        FOR g IN SELECT * FROM pgvs3.resp_stream_group r WHERE r.bucket_id = b AND r.key = k ORDER BY r.name LOOP
            items := items || g.name || pgvs3.resp_stream_id(g.last_ms, g.last_seq);
            scores := scores
                || (SELECT count(*)::float8 FROM pgvs3.resp_stream_consumer r WHERE r.bucket_id = b AND r.key = k AND r.grp = g.name)
                || (SELECT count(*)::float8 FROM pgvs3.resp_stream_pending q WHERE q.bucket_id = b AND q.key = k AND q.grp = g.name)
                || g.entries_read::float8
                || pgvs3.resp_stream_lag(s, head.ms, head.seq, g)::float8;
        END LOOP;
    WHEN 'xinfo_consumers' THEN
        -- Per consumer, in name order: items {name}; scores {pending, idle, inactive (-1:
        -- never active)}.
        WITH c AS (
            SELECT r.name, ARRAY[(SELECT count(*) FROM pgvs3.resp_stream_pending q
                                   WHERE q.bucket_id = b AND q.key = k AND q.grp = g_name AND q.consumer = r.name),
                                 greatest(now_ms - r.seen_ms, 0),
                                 CASE WHEN r.active_ms IS NULL THEN -1 ELSE greatest(now_ms - r.active_ms, 0) END]::float8[] AS v
              FROM pgvs3.resp_stream_consumer r
             WHERE r.bucket_id = b AND r.key = k AND r.grp = g_name)
        SELECT (SELECT coalesce(array_agg(c.name ORDER BY c.name), '{}') FROM c),
               (SELECT coalesce(array_agg(x.score ORDER BY c.name, x.o), '{}') FROM c, unnest(c.v) WITH ORDINALITY AS x(score, o))
          INTO items, scores;
    END CASE;
END $$;
