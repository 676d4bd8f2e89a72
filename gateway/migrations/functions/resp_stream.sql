-- RESP streams (layout v22): one call per command, as functions/resp_keys.sql describes.
-- IDs travel as pairs of ints, stored as 0022_resp_streams.sql says (each half's sign bit
-- flipped), and come back as items of 16 bytes (int8send of both halves) that the gateway
-- formats (resp/stream.rs). Entries come back flat: items hold each entry's ID followed by its
-- fields and values, scores hold each entry's number of fields and values.

-- -2^63 and 2^63 - 1: the stored forms of 0 and 2^64 - 1.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_min() RETURNS bigint LANGUAGE sql IMMUTABLE AS $$ SELECT -9223372036854775807 - 1 $$;
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_max() RETURNS bigint LANGUAGE sql IMMUTABLE AS $$ SELECT 9223372036854775807::bigint $$;

CREATE OR REPLACE FUNCTION pgvs3.resp_stream_id(ms bigint, seq bigint) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
    SELECT int8send(ms) || int8send(seq)
$$;

-- Entries flattened as the file's header says, in the order given.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_flat(entries pgvs3.resp_stream_entry[], OUT items bytea[], OUT scores float8[])
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce((SELECT array_agg(f.item ORDER BY e.r, f.o)
                       FROM unnest(entries) WITH ORDINALITY AS e(bucket_id, key, ms, seq, fields, r),
                            unnest(pgvs3.resp_stream_id(e.ms, e.seq) || e.fields) WITH ORDINALITY AS f(item, o)), '{}'),
           coalesce((SELECT array_agg(cardinality(e.fields)::float8 ORDER BY e.r)
                       FROM unnest(entries) WITH ORDINALITY AS e(bucket_id, key, ms, seq, fields, r)), '{}')
$$;

-- The ID right after (`ms`, `seq`), NULLs after the greatest.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_successor(ms bigint, seq bigint, OUT next_ms bigint, OUT next_seq bigint)
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN seq < pgvs3.resp_stream_max() THEN ms WHEN ms < pgvs3.resp_stream_max() THEN ms + 1 END,
           CASE WHEN seq < pgvs3.resp_stream_max() THEN seq + 1 WHEN ms < pgvs3.resp_stream_max() THEN pgvs3.resp_stream_min() END
$$;

-- Up to `c` entries (NULL: all) from `lo` to `hi`, both included, in ID order or (`rev`) the
-- reverse: an index range scan, which starts no lower than the stream's first possible ID
-- (layout v32), past the index entries of trimmed entries.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_range(b bigint, k text, lo_ms bigint, lo_seq bigint, hi_ms bigint, hi_seq bigint,
    rev boolean, c bigint) RETURNS pgvs3.resp_stream_entry[]
LANGUAGE plpgsql STABLE AS $$
DECLARE
    first record;
BEGIN
    SELECT first_ms, first_seq INTO first FROM pgvs3.resp_stream WHERE bucket_id = b AND key = k;
    IF (first.first_ms, first.first_seq) > (lo_ms, lo_seq) THEN
        lo_ms := first.first_ms;
        lo_seq := first.first_seq;
    END IF;
    IF rev THEN
        RETURN ARRAY(SELECT e FROM pgvs3.resp_stream_entry e
                      WHERE bucket_id = b AND key = k AND (ms, seq) >= (lo_ms, lo_seq) AND (ms, seq) <= (hi_ms, hi_seq)
                      ORDER BY ms DESC, seq DESC LIMIT c);
    END IF;
    RETURN ARRAY(SELECT e FROM pgvs3.resp_stream_entry e
                  WHERE bucket_id = b AND key = k AND (ms, seq) >= (lo_ms, lo_seq) AND (ms, seq) <= (hi_ms, hi_seq)
                  ORDER BY ms, seq LIMIT c);
END $$;

-- Removes the oldest entries, as Redis's streamTrim does: beyond the newest `threshold`
-- (`by_id` false, MAXLEN) or those before ID (`threshold`, `threshold_seq`) (MINID). Whole nodes
-- (0060_resp_stream_nodes.sql) go first, oldest first, while the stream keeps its threshold
-- without them (MAXLEN) or their last ID is below it (MINID), and while their entries keep what
-- went within `most` (NULL or 0: no limit; Redis's LIMIT). Then `approx` (`~`) stops; an exact
-- trim removes the entries of the next node that must go, and stops. The stream's first
-- possible ID moves past what went. Returns how many went.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_trim(b bigint, k text, by_id boolean, threshold bigint, threshold_seq bigint,
    most bigint, approx boolean) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    s pgvs3.resp_stream;
    node pgvs3.resp_stream_node;
    next_node record;
    removed bigint := 0;
    gone record;
    went_ms bigint;
    went_seq bigint;
BEGIN
    SELECT * INTO s FROM pgvs3.resp_stream WHERE bucket_id = b AND key = k;
    IF approx AND most IS NULL THEN
        -- Redis's bound of `~` without LIMIT: 100 nodes' worth, within 10,000 (no bound per
        -- node) and 1,000,000.
        SELECT CASE WHEN e.stream_entries <= 0 THEN 10000 ELSE 100 * least(e.stream_entries, 10000) END
          INTO most FROM pgvs3.resp_encodings(b) e;
    END IF;
    FOR node IN SELECT * FROM pgvs3.resp_stream_node n WHERE n.bucket_id = b AND n.key = k ORDER BY n.ms, n.seq LOOP
        EXIT WHEN NOT by_id AND s.length <= threshold;
        EXIT WHEN most > 0 AND removed + node.live > most;
        SELECT n.ms, n.seq INTO next_node FROM pgvs3.resp_stream_node n
         WHERE n.bucket_id = b AND n.key = k AND (n.ms, n.seq) > (node.ms, node.seq) ORDER BY n.ms, n.seq LIMIT 1;
        IF (by_id AND (node.last_ms, node.last_seq) < (threshold, threshold_seq)) OR (NOT by_id AND s.length - node.live >= threshold) THEN
            DELETE FROM pgvs3.resp_stream_entry e
             WHERE e.bucket_id = b AND e.key = k AND (e.ms, e.seq) >= (node.ms, node.seq)
               AND (next_node.ms IS NULL OR (e.ms, e.seq) < (next_node.ms, next_node.seq));
            DELETE FROM pgvs3.resp_stream_node n WHERE n.bucket_id = b AND n.key = k AND (n.ms, n.seq) = (node.ms, node.seq);
            s.length := s.length - node.live;
            removed := removed + node.live;
            went_ms := node.last_ms;
            went_seq := node.last_seq;
            CONTINUE;
        END IF;
        EXIT WHEN approx;
        WITH d AS (
            DELETE FROM pgvs3.resp_stream_entry WHERE ctid = ANY (ARRAY(
                SELECT ctid FROM pgvs3.resp_stream_entry e
                 WHERE e.bucket_id = b AND e.key = k AND (e.ms, e.seq) >= (node.ms, node.seq)
                   AND (next_node.ms IS NULL OR (e.ms, e.seq) < (next_node.ms, next_node.seq))
                   AND (NOT by_id OR (e.ms, e.seq) < (threshold, threshold_seq))
                 ORDER BY e.ms, e.seq
                 LIMIT CASE WHEN by_id THEN NULL ELSE greatest(s.length - threshold, 0) END))
            RETURNING ms, seq)
        SELECT count(*) OVER () AS n, ms, seq INTO gone FROM d ORDER BY ms DESC, seq DESC LIMIT 1;
        IF FOUND THEN
            UPDATE pgvs3.resp_stream_node n SET live = n.live - gone.n
             WHERE n.bucket_id = b AND n.key = k AND (n.ms, n.seq) = (node.ms, node.seq);
            s.length := s.length - gone.n;
            removed := removed + gone.n;
            went_ms := gone.ms;
            went_seq := gone.seq;
        END IF;
        EXIT;
    END LOOP;
    IF removed = 0 THEN
        RETURN 0;
    END IF;
    UPDATE pgvs3.resp_stream r
       SET length = s.length,
           (first_ms, first_seq) = (SELECT coalesce(x.next_ms, went_ms), coalesce(x.next_seq, went_seq)
                                      FROM pgvs3.resp_stream_successor(went_ms, went_seq) x)
     WHERE r.bucket_id = b AND r.key = k;
    UPDATE pgvs3.resp_keys SET version = nextval('pgvs3.resp_key_versions') WHERE bucket_id = b AND key = k;
    RETURN removed;
END $$;

-- Gives the entries just added to stream `k` (IDs `ids_ms`/`ids_seq`, in order) to its nodes
-- as Redis's streamAppendItem does: to the last node until it was given
-- `stream-node-max-entries` (0: no bound), then to new nodes of that many.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_append_nodes(b bigint, k text, ids_ms bigint[], ids_seq bigint[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    per_node bigint := (pgvs3.resp_encodings(b)).stream_entries;
    added bigint := cardinality(ids_ms);
    tail pgvs3.resp_stream_node;
    into_tail bigint := 0;
BEGIN
    SELECT * INTO tail FROM pgvs3.resp_stream_node n WHERE n.bucket_id = b AND n.key = k ORDER BY n.ms DESC, n.seq DESC LIMIT 1;
    IF FOUND THEN
        into_tail := CASE WHEN per_node > 0 THEN least(greatest(per_node - tail.given, 0), added) ELSE added END;
    END IF;
    IF into_tail > 0 THEN
        UPDATE pgvs3.resp_stream_node n
           SET live = n.live + into_tail, given = n.given + into_tail, last_ms = ids_ms[into_tail], last_seq = ids_seq[into_tail]
         WHERE n.bucket_id = b AND n.key = k AND (n.ms, n.seq) = (tail.ms, tail.seq);
    END IF;
    IF per_node <= 0 THEN
        per_node := added;
    END IF;
    INSERT INTO pgvs3.resp_stream_node
    SELECT b, k, ids_ms[lo], ids_seq[lo], ids_ms[hi], ids_seq[hi], hi - lo + 1, hi - lo + 1
      FROM (SELECT lo, lo + least(per_node, added - lo + 1) - 1 AS hi
              FROM generate_series(into_tail + 1, added, per_node) lo) nodes;
END $$;

-- Stream entries (IDs `ids_ms`/`ids_seq`; entry e's fields and values are `sizes[e]` args from
-- `starts[e]`) inserted into stream `k`. Each entry's fields are read element by element: a
-- slice of `args` (`args[from : to]`) made a flat copy of the whole array for every entry, so a
-- run of XADDs coalesced into one call copied its arguments once per entry, quadratic in the
-- run's length (half of PostgreSQL's time under 64 pipelines of 16 XADDs of 4 KiB, issue 39,
-- 0079_resp_values_by_position.sql). A subscript reads the element directly only in a generic
-- plan, where `args` stays the expanded array the function was given (a custom plan flattens
-- it, and a subscript then walks it from its start): hence its own function, planned once
-- (plan_cache_mode).
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_entries(b bigint, k text, ids_ms bigint[], ids_seq bigint[], args bytea[],
    starts bigint[], sizes bigint[]) RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    INSERT INTO pgvs3.resp_stream_entry (bucket_id, key, ms, seq, fields)
    SELECT b, k, ids_ms[e], ids_seq[e],
           ARRAY(SELECT args[a] FROM generate_series(starts[e], starts[e] + sizes[e] - 1) a ORDER BY a)
      FROM generate_series(1, cardinality(ids_ms)) e;
END $$;

-- XADD's entries (IDs `ids_ms`/`ids_seq`; entry e's fields and values are `sizes[e]` args from
-- `starts[e]`) added to stream `k`, and to its nodes: their IDs, as XADD answers them. Its own
-- function, as is resp_stream_append_nodes, so that their statements are planned once
-- (plan_cache_mode): with the default, PostgreSQL planned them again at every call, a custom
-- plan knowing the series' length always looking cheaper than the generic one, which is as
-- good: they join nothing, so the number of entries cannot change their shape.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_append(b bigint, k text, ids_ms bigint[], ids_seq bigint[], args bytea[],
    starts bigint[], sizes bigint[]) RETURNS bytea[]
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    PERFORM pgvs3.resp_stream_entries(b, k, ids_ms, ids_seq, args, starts, sizes);
    PERFORM pgvs3.resp_stream_append_nodes(b, k, ids_ms, ids_seq);
    RETURN ARRAY(SELECT pgvs3.resp_stream_id(ids_ms[e], ids_seq[e]) FROM generate_series(1, cardinality(ids_ms)) e ORDER BY e);
END $$;

-- A script run's writes to stream `k`, set-based (layout v82): what its speculated XADD and
-- XTRIM calls changed, as the gateway's working set holds it (resp/working_set/stream.rs),
-- written in one call instead of one resp_stream call each (issue 39). It leaves what the calls
-- leave: a trim removes a stream's oldest entries (whole nodes from the front, then part of the
-- next one), so the entries that went are the oldest the stream held, and the entries added
-- that are left are the newest. The key's part is resp_apply_begin's and resp_apply_end's
-- (functions/resp_keys.sql); a stream is never deleted by its writes. The stream, as found:
--   existed: the key was a live stream; found_ms/found_seq, found_len: its last ID and length
--     (checked).
-- What the run left:
--   to_ms/to_seq, to_len: the last ID and the length.
--   n_added: how many entries the calls added (the entries-added counter), those trimmed since
--     included.
--   went_ms/went_seq: the greatest last ID of a node a trim removed whole, or of an entry added
--     and trimmed within the run (NULL: none); the stream's first possible ID moves past it, or
--     past the newest entry of before that went, whichever is greater, as the last trim's did.
--   ids_ms/ids_seq, args, starts, sizes: the entries added that are left, in order, as
--     resp_stream_entries takes them.
--   node_ms/node_seq: the nodes the calls touched (by first ID); node_was and node_now, four
--     ints each (last ID's halves, given, live): the node as found and as left, NULLs when absent
--     (a node made; a node removed). A node's found row is checked.
--   node_size: the `stream-node-max-entries` the nodes were given entries by, as the run loaded
--     it (checked: a CONFIG SET since moves no key's version; NULL for a stream made in the
--     run, whose only node any size takes).
-- Answers whether the stream was as found (the caller raises otherwise, pgvs3.resp_expect).
-- Its statements plan the same before and after ANALYZE (0032_resp_plans.sql): probes of the
-- whole primary key, an index scan of the oldest entries, inserts.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_apply(b bigint, k text, existed boolean, found_ms bigint, found_seq bigint,
    found_len bigint, to_ms bigint, to_seq bigint, to_len bigint, n_added bigint, went_ms bigint, went_seq bigint,
    ids_ms bigint[], ids_seq bigint[], args bytea[], starts bigint[], sizes bigint[],
    node_ms bigint[], node_seq bigint[], node_was bigint[], node_now bigint[], node_size bigint)
RETURNS boolean LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    s pgvs3.resp_stream;
    old_gone bigint := found_len - (to_len - cardinality(ids_ms));
    gone record;
    after_ms bigint;
    after_seq bigint;
BEGIN
    IF NOT existed AND n_added = 0 THEN
        -- Calls on a stream that is not there and was not made (XTRIM, XADD NOMKSTREAM).
        RETURN true;
    END IF;
    IF old_gone < 0 OR node_size <> (pgvs3.resp_encodings(b)).stream_entries
       OR NOT pgvs3.resp_apply_begin(b, k, 'x', existed, false, n_added > 0) THEN
        RETURN false;
    END IF;
    IF NOT existed THEN
        INSERT INTO pgvs3.resp_stream (bucket_id, key, last_ms, last_seq, deleted_ms, deleted_seq, added, length)
        VALUES (b, k, found_ms, found_seq, pgvs3.resp_stream_min(), pgvs3.resp_stream_min(), 0, found_len)
        ON CONFLICT DO NOTHING;
    END IF;
    SELECT * INTO s FROM pgvs3.resp_stream r WHERE r.bucket_id = b AND r.key = k;
    IF NOT FOUND OR (s.last_ms, s.last_seq, s.length) <> (found_ms, found_seq, found_len) THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM generate_series(1, cardinality(node_ms)) i
                WHERE (SELECT ARRAY[x.last_ms, x.last_seq, x.given, x.live] FROM pgvs3.resp_stream_node x
                        WHERE x.bucket_id = b AND x.key = k AND x.ms = node_ms[i] AND x.seq = node_seq[i])
                      IS DISTINCT FROM CASE WHEN node_was[4 * i] IS NOT NULL
                          THEN ARRAY[node_was[4 * i - 3], node_was[4 * i - 2], node_was[4 * i - 1], node_was[4 * i]] END) THEN
        RETURN false;
    END IF;
    DELETE FROM pgvs3.resp_stream_node WHERE ctid = ANY (ARRAY(
        SELECT (SELECT x.ctid FROM pgvs3.resp_stream_node x
                 WHERE x.bucket_id = b AND x.key = k AND x.ms = node_ms[i] AND x.seq = node_seq[i])
          FROM generate_series(1, cardinality(node_ms)) i WHERE node_now[4 * i] IS NULL));
    INSERT INTO pgvs3.resp_stream_node AS x (bucket_id, key, ms, seq, last_ms, last_seq, given, live)
    SELECT b, k, node_ms[i], node_seq[i], node_now[4 * i - 3], node_now[4 * i - 2], node_now[4 * i - 1], node_now[4 * i]
      FROM generate_series(1, cardinality(node_ms)) i WHERE node_now[4 * i] IS NOT NULL
    ON CONFLICT (bucket_id, key, ms, seq) DO UPDATE
        SET last_ms = EXCLUDED.last_ms, last_seq = EXCLUDED.last_seq, given = EXCLUDED.given, live = EXCLUDED.live;
    IF old_gone > 0 THEN
        -- From the stream's first possible ID, past the index entries of trimmed entries.
        WITH d AS (
            DELETE FROM pgvs3.resp_stream_entry WHERE ctid = ANY (ARRAY(
                SELECT e.ctid FROM pgvs3.resp_stream_entry e
                 WHERE e.bucket_id = b AND e.key = k AND (e.ms, e.seq) >= (s.first_ms, s.first_seq)
                 ORDER BY e.ms, e.seq LIMIT old_gone))
            RETURNING ms, seq)
        SELECT count(*) OVER () AS n, ms, seq INTO gone FROM d ORDER BY ms DESC, seq DESC LIMIT 1;
        IF gone.n IS DISTINCT FROM old_gone THEN
            RETURN false;
        END IF;
        IF went_ms IS NULL OR (gone.ms, gone.seq) > (went_ms, went_seq) THEN
            went_ms := gone.ms;
            went_seq := gone.seq;
        END IF;
    END IF;
    IF cardinality(ids_ms) > 0 THEN
        PERFORM pgvs3.resp_stream_entries(b, k, ids_ms, ids_seq, args, starts, sizes);
    END IF;
    -- Only when something went (a BullMQ job's XADDs mostly trim nothing): the successor is a
    -- call of its own, with four more inside it, a fifth of the apply's time in BullMQ's run.
    IF went_ms IS NOT NULL THEN
        SELECT x.next_ms, x.next_seq INTO after_ms, after_seq FROM pgvs3.resp_stream_successor(went_ms, went_seq) x;
    END IF;
    UPDATE pgvs3.resp_stream r
       SET last_ms = to_ms, last_seq = to_seq, length = to_len, added = r.added + n_added,
           (first_ms, first_seq) = (coalesce(after_ms, went_ms, r.first_ms), coalesce(after_seq, went_seq, r.first_seq))
     WHERE r.bucket_id = b AND r.key = k;
    PERFORM pgvs3.resp_apply_end(b, k, 'x', existed, false, n_added > 0 OR to_len <> found_len, n_added > 0, 0, 0);
    IF n_added > 0 THEN
        PERFORM pgvs3.resp_wake(b, k);
    END IF;
    RETURN true;
END $$;

-- The ID XADD gives an entry, after the stream's last ID (`last_ms`, `last_seq`): `mode` 0 is
-- `*` (now, or after the last), 1 is `<ms>-*`, 2 an explicit ID. NULLs: the ID is too small.
-- `*` reads the batch's clock (layout v74, `pgvs3.resp_now`): the instant the gateway's working
-- set predicts a script's XADD by (resp/working_set/stream.rs), where clock_timestamp() came
-- later and gave every speculated XADD another ID. The IDs of one batch then share its
-- milliseconds and count up in their sequence, after the stream's last ID as ever.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_next_id(mode bigint, ms bigint, seq bigint, last_ms bigint, last_seq bigint,
    OUT id_ms bigint, OUT id_seq bigint) LANGUAGE plpgsql STABLE AS $$
DECLARE
    now_ms bigint := floor(extract(epoch FROM pgvs3.resp_now()) * 1000)::bigint + pgvs3.resp_stream_min();
BEGIN
    IF mode = 0 THEN
        IF now_ms > last_ms THEN
            id_ms := now_ms; id_seq := pgvs3.resp_stream_min();
        ELSIF last_seq = pgvs3.resp_stream_max() THEN
            -- (The last ID is not the greatest: the caller checked.)
            id_ms := last_ms + 1; id_seq := pgvs3.resp_stream_min();
        ELSE
            id_ms := last_ms; id_seq := last_seq + 1;
        END IF;
    ELSIF mode = 1 THEN
        IF ms > last_ms THEN
            id_ms := ms; id_seq := pgvs3.resp_stream_min();
        ELSIF ms = last_ms AND last_seq < pgvs3.resp_stream_max() THEN
            id_ms := ms; id_seq := last_seq + 1;
        END IF;
    ELSIF (ms, seq) > (last_ms, last_seq) THEN
        id_ms := ms; id_seq := seq;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION pgvs3.resp_stream(op text, b bigint, ks text[], strings text[], args bytea[], ints bigint[], floats float8[],
    OUT err text, OUT n bigint, OUT items bytea[], OUT scores float8[])
LANGUAGE plpgsql AS $$
DECLARE
    k text := ks[1];
    write boolean := op IN ('xadd', 'xdel', 'xtrim', 'xsetid', 'xrestore');
    s pgvs3.resp_stream;
    id record;
    flat record;
    entries pgvs3.resp_stream_entry[];
    found_entries pgvs3.resp_stream_entry[];
    j int;
    sizes bigint[];
    p bigint;
    a bigint;
    ids_ms bigint[] := '{}';
    ids_seq bigint[] := '{}';
    starts bigint[] := '{}';
    added bigint;
    trimmed bigint;
    pending bigint;
    share bigint;
BEGIN
    err := pgvs3.resp_check(b, ks, strings, ks, 'x', write);
    IF err IS NOT NULL THEN
        RETURN;
    END IF;
    IF op = 'xread' THEN
        -- ints: {count (NULL: all)}, then per key {mode, ms, seq}: mode 0 reads after the ID,
        -- 1 (`$`) nothing, 2 (`+`) the last entry. items: per stream with entries its name
        -- and entries; scores: per such stream its number of entries, then its entries'.
        items := '{}';
        scores := '{}';
        FOR j IN 1 .. cardinality(ks) LOOP
            CONTINUE WHEN pgvs3.resp_type(b, ks[j]) IS NULL OR ints[3 * j - 1] = 1;
            IF ints[3 * j - 1] = 2 THEN
                found_entries := pgvs3.resp_stream_range(b, ks[j], pgvs3.resp_stream_min(), pgvs3.resp_stream_min(),
                                                         pgvs3.resp_stream_max(), pgvs3.resp_stream_max(), true, 1);
            ELSE
                SELECT * INTO id FROM pgvs3.resp_stream_successor(ints[3 * j], ints[3 * j + 1]);
                CONTINUE WHEN id.next_ms IS NULL;
                found_entries := pgvs3.resp_stream_range(b, ks[j], id.next_ms, id.next_seq,
                                                         pgvs3.resp_stream_max(), pgvs3.resp_stream_max(), false, ints[1]);
            END IF;
            CONTINUE WHEN cardinality(found_entries) = 0;
            SELECT * INTO flat FROM pgvs3.resp_stream_flat(found_entries);
            items := items || convert_to(ks[j], 'UTF8') || flat.items;
            scores := scores || cardinality(found_entries)::float8 || flat.scores;
        END LOOP;
        RETURN;
    END IF;
    IF op = 'xlast' THEN
        -- XREAD BLOCK's `$`: the streams' last IDs (0-0 for a missing one).
        SELECT array_agg(pgvs3.resp_stream_id(coalesce(r.last_ms, pgvs3.resp_stream_min()),
                                              coalesce(r.last_seq, pgvs3.resp_stream_min())) ORDER BY o)
          INTO items
          FROM unnest(ks) WITH ORDINALITY AS q(name, o)
          LEFT JOIN pgvs3.resp_stream r ON r.bucket_id = b AND r.key = q.name AND pgvs3.resp_type(b, q.name) IS NOT NULL;
        RETURN;
    END IF;
    IF op = 'xrestore' THEN
        -- RESTORE of a stream (layout v63, resp/commands/dump.rs) into `k`, which the gateway
        -- emptied. ints: {last ID (ms, seq), greatest deleted ID (ms, seq), entries added,
        -- nodes, entries, groups}, then per node {ID (ms, seq), last ID given (ms, seq), entries
        -- given, entries held}, per entry {ID (ms, seq), number of fields and values}, per group
        -- {last delivered ID (ms, seq), entries read (NULL: unknown), consumers, PEL size}, its
        -- consumers' seen times, then per PEL entry {ID (ms, seq), delivery time, deliveries,
        -- its consumer's place among the group's (from 1)}. args: the entries' fields and
        -- values, then per group its name and its consumers' names. A consumer was last active
        -- when it was last seen (Redis 7.0 keeps no active time).
        PERFORM pgvs3.resp_touch(b, k, 'x');
        INSERT INTO pgvs3.resp_stream (bucket_id, key, last_ms, last_seq, deleted_ms, deleted_seq, added, length)
        VALUES (b, k, ints[1], ints[2], ints[3], ints[4], ints[5], ints[7]);
        p := 9;
        INSERT INTO pgvs3.resp_stream_node (bucket_id, key, ms, seq, last_ms, last_seq, given, live)
        SELECT b, k, ints[p + 6 * i], ints[p + 6 * i + 1], ints[p + 6 * i + 2], ints[p + 6 * i + 3], ints[p + 6 * i + 4], ints[p + 6 * i + 5]
          FROM generate_series(0, ints[6] - 1) i;
        p := p + 6 * ints[6];
        SELECT array_agg(e.ms ORDER BY e.i), array_agg(e.seq ORDER BY e.i), array_agg(e.start + 1 ORDER BY e.i), array_agg(e.size ORDER BY e.i)
          INTO ids_ms, ids_seq, starts, sizes
          FROM (SELECT i, ints[p + 3 * i] AS ms, ints[p + 3 * i + 1] AS seq, ints[p + 3 * i + 2] AS size,
                       coalesce(sum(ints[p + 3 * i + 2]) OVER (ORDER BY i ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS start
                  FROM generate_series(0, ints[7] - 1) i) e;
        PERFORM pgvs3.resp_stream_entries(b, k, coalesce(ids_ms, '{}'), ids_seq, args, starts, sizes);
        a := 1 + coalesce((SELECT sum(ints[p + 3 * i + 2]) FROM generate_series(0, ints[7] - 1) i), 0);
        p := p + 3 * ints[7];
        FOR j IN 1 .. ints[8] LOOP
            INSERT INTO pgvs3.resp_stream_group (bucket_id, key, name, last_ms, last_seq, entries_read)
            VALUES (b, k, args[a], ints[p], ints[p + 1], ints[p + 2]);
            INSERT INTO pgvs3.resp_stream_consumer (bucket_id, key, grp, name, seen_ms, active_ms)
            SELECT b, k, args[a], args[a + c], ints[p + 4 + c], ints[p + 4 + c]
              FROM generate_series(1, ints[p + 3]) c;
            INSERT INTO pgvs3.resp_stream_pending (bucket_id, key, grp, ms, seq, consumer, delivered_ms, deliveries)
            SELECT b, k, args[a], ints[p + 5 + ints[p + 3] + 5 * i], ints[p + 6 + ints[p + 3] + 5 * i],
                   args[a + ints[p + 9 + ints[p + 3] + 5 * i]],
                   ints[p + 7 + ints[p + 3] + 5 * i], ints[p + 8 + ints[p + 3] + 5 * i]
              FROM generate_series(0, ints[p + 4] - 1) i;
            a := a + 1 + ints[p + 3];
            p := p + 5 + ints[p + 3] + 5 * ints[p + 4];
        END LOOP;
        PERFORM pgvs3.resp_wake(b, k);
        RETURN;
    END IF;
    SELECT * INTO s FROM pgvs3.resp_stream r WHERE r.bucket_id = b AND r.key = k AND pgvs3.resp_type(b, k) IS NOT NULL;
    IF s.key IS NULL AND op <> 'xadd' THEN
        CASE op
        WHEN 'xrange', 'xrevrange' THEN items := '{}';
        WHEN 'xinfo', 'xsetid', 'xdump' THEN err := 'no_such_key';
        ELSE n := 0;
        END CASE;
        RETURN;
    END IF;
    CASE op
    WHEN 'xadd' THEN
        -- args: fields and values; ints: {NOMKSTREAM (1), ID mode, ms, seq (see
        -- resp_stream_next_id), then the trimming: by ID (1) or length (0), plus 2 for `~`
        -- (layout v60), or none (NULL), threshold, threshold's seq, most to remove (LIMIT; NULL
        -- without one)}. items: {the ID}, or {NULL}.
        -- A run of XADDs with `*` IDs and the same options coalesced into one call (layout
        -- v47, resp/coalesce.rs) adds ints: each entry's number of fields and values, its
        -- entries' args one after another. Each entry gets its ID after the one before, as the
        -- commands one after another would; one trim after all of them removes what theirs
        -- would have, each after its own entry (the oldest entries first, as many as the last
        -- trim leaves beyond the threshold, each trim's most added up); one notification wakes
        -- the blocked readers (PostgreSQL sends a transaction's equal notifications once).
        -- items: the IDs in order, {NULL} per entry (NOMKSTREAM, no stream), fewer IDs than
        -- entries when the stream ran out of IDs midway (the rest are `stream_exhausted`).
        -- scores (layout v50), with a trimming: per entry how many entries its command's trim
        -- removed, for its keyspace event (`xtrim` when any, resp/notify).
        sizes := CASE WHEN cardinality(ints) > 8 THEN ints[9:] ELSE ARRAY[cardinality(args)::bigint] END;
        IF s.key IS NULL THEN
            IF ints[1] = 1 THEN
                items := array_fill(NULL::bytea, ARRAY[cardinality(sizes)]);
                RETURN;
            END IF;
            s.last_ms := pgvs3.resp_stream_min();
            s.last_seq := pgvs3.resp_stream_min();
        ELSIF (s.last_ms, s.last_seq) = (pgvs3.resp_stream_max(), pgvs3.resp_stream_max()) THEN
            err := 'stream_exhausted';
            RETURN;
        END IF;
        FOR j IN 1 .. cardinality(sizes) LOOP
            EXIT WHEN j > 1 AND (s.last_ms, s.last_seq) = (pgvs3.resp_stream_max(), pgvs3.resp_stream_max());
            SELECT * INTO id FROM pgvs3.resp_stream_next_id(ints[2], ints[3], ints[4], s.last_ms, s.last_seq);
            IF id.id_ms IS NULL THEN
                -- (Only an explicit ID, never coalesced: nothing was added.)
                err := 'xadd_id_too_small';
                RETURN;
            END IF;
            starts := starts || coalesce(starts[j - 1] + sizes[j - 1], 1);
            ids_ms := ids_ms || id.id_ms;
            ids_seq := ids_seq || id.id_seq;
            s.last_ms := id.id_ms;
            s.last_seq := id.id_seq;
        END LOOP;
        added := cardinality(ids_ms);
        PERFORM pgvs3.resp_touch(b, k, 'x');
        INSERT INTO pgvs3.resp_stream AS r VALUES (b, k, s.last_ms, s.last_seq, pgvs3.resp_stream_min(), pgvs3.resp_stream_min(), added, added)
        ON CONFLICT (bucket_id, key) DO UPDATE
            SET last_ms = EXCLUDED.last_ms, last_seq = EXCLUDED.last_seq, added = r.added + EXCLUDED.added,
                length = r.length + EXCLUDED.length;
        items := pgvs3.resp_stream_append(b, k, ids_ms, ids_seq, args, starts, sizes);
        IF ints[5] IS NOT NULL THEN
            -- A most past what a bigint holds is no limit. (`~` is never coalesced.)
            trimmed := pgvs3.resp_stream_trim(b, k, ints[5] % 2 = 1, ints[6], ints[7],
                CASE WHEN ints[8] <= 9223372036854775807 / added THEN ints[8] * added END, ints[5] >= 2);
            -- Each command's share, as its own trim right after its own entry would have
            -- removed: each entry adds one to what a trim may remove (MAXLEN: one more than
            -- the threshold; MINID: when it is below it), and each trim removes all it may, at
            -- most `most`. Then either every trim removed `most` or the last left nothing, so
            -- what they may remove started at `trimmed` less what the entries added (below
            -- zero for MAXLEN: a stream that many entries short of the threshold).
            pending := trimmed - CASE WHEN ints[5] % 2 = 1
                THEN (SELECT count(*) FROM generate_series(1, added) e WHERE (ids_ms[e], ids_seq[e]) < (ints[6], ints[7]))
                ELSE added END;
            scores := '{}';
            FOR j IN 1 .. added LOOP
                IF ints[5] % 2 = 0 OR (ids_ms[j], ids_seq[j]) < (ints[6], ints[7]) THEN
                    pending := pending + 1;
                END IF;
                -- (LEAST passes over a NULL most: no limit.)
                share := greatest(least(pending, ints[8]), 0);
                pending := pending - share;
                scores := scores || share::float8;
            END LOOP;
        END IF;
        PERFORM pgvs3.resp_wake(b, k);
    WHEN 'xlen' THEN
        n := s.length;
    WHEN 'xrange', 'xrevrange' THEN
        -- ints: {from, from's seq, to, to's seq, count (NULL: all, 0: none)}, the lower ID
        -- first. n = 1: the stream exists (COUNT 0 answers it with the null array).
        n := 1;
        SELECT * INTO flat FROM pgvs3.resp_stream_flat(
            pgvs3.resp_stream_range(b, k, ints[1], ints[2], ints[3], ints[4], op = 'xrevrange', ints[5]));
        items := flat.items;
        scores := flat.scores;
    WHEN 'xdel' THEN
        -- ints: the IDs, in pairs.
        WITH gone AS (
            DELETE FROM pgvs3.resp_stream_entry WHERE bucket_id = b AND key = k AND (ms, seq) IN (
                SELECT ints[i], ints[i + 1] FROM generate_series(1, cardinality(ints), 2) i)
            RETURNING ms, seq
        ), greatest_gone AS (
            SELECT ms, seq FROM gone ORDER BY ms DESC, seq DESC LIMIT 1
        ), counted AS (
            UPDATE pgvs3.resp_stream r
               SET length = r.length - (SELECT count(*) FROM gone),
                   (deleted_ms, deleted_seq) = (SELECT CASE WHEN (g.ms, g.seq) > (r.deleted_ms, r.deleted_seq) THEN g.ms ELSE r.deleted_ms END,
                                                       CASE WHEN (g.ms, g.seq) > (r.deleted_ms, r.deleted_seq) THEN g.seq ELSE r.deleted_seq END
                                                  FROM greatest_gone g)
             WHERE r.bucket_id = b AND r.key = k AND EXISTS (SELECT 1 FROM gone)
        ), held AS (
            -- Each entry's node holds one fewer (0060_resp_stream_nodes.sql).
            UPDATE pgvs3.resp_stream_node x SET live = x.live - c.entries
              FROM (SELECT o.ms, o.seq, count(*) AS entries
                      FROM gone g CROSS JOIN LATERAL (
                           SELECT n.ms, n.seq FROM pgvs3.resp_stream_node n
                            WHERE n.bucket_id = b AND n.key = k AND (n.ms, n.seq) <= (g.ms, g.seq)
                            ORDER BY n.ms DESC, n.seq DESC LIMIT 1) o
                     GROUP BY o.ms, o.seq) c
             WHERE x.bucket_id = b AND x.key = k AND (x.ms, x.seq) = (c.ms, c.seq)
        )
        SELECT count(*) INTO n FROM gone;
        IF n > 0 THEN
            -- A node left empty goes, as Redis removes it from its radix tree.
            DELETE FROM pgvs3.resp_stream_node x WHERE x.bucket_id = b AND x.key = k AND x.live <= 0;
            UPDATE pgvs3.resp_keys SET version = nextval('pgvs3.resp_key_versions') WHERE bucket_id = b AND key = k;
        END IF;
    WHEN 'xtrim' THEN
        -- ints: as XADD's trimming.
        n := pgvs3.resp_stream_trim(b, k, ints[1] % 2 = 1, ints[2], ints[3], ints[4], ints[1] >= 2);
    WHEN 'xsetid' THEN
        -- ints: {last ID ms, seq, entries added (NULL: unchanged), greatest deleted ID ms, seq
        -- (NULL: unchanged)}; Redis 7.0's checks against the stream, in its order (7.0 does not
        -- compare the ID with the stream's greatest deleted ID).
        IF s.length > 0 THEN
            IF EXISTS (SELECT 1 FROM pgvs3.resp_stream_entry e
                        WHERE e.bucket_id = b AND e.key = k AND (e.ms, e.seq) > (ints[1], ints[2])) THEN
                err := 'xsetid_id_too_small';
                RETURN;
            END IF;
            IF ints[3] < s.length THEN
                err := 'xsetid_entries_too_small';
                RETURN;
            END IF;
        END IF;
        -- The last ID may go down on an empty stream, and later entries below the first
        -- possible ID: that bound starts over.
        UPDATE pgvs3.resp_stream r
           SET last_ms = ints[1], last_seq = ints[2], added = coalesce(ints[3], r.added),
               deleted_ms = coalesce(ints[4], r.deleted_ms), deleted_seq = coalesce(ints[5], r.deleted_seq),
               first_ms = pgvs3.resp_stream_min(), first_seq = pgvs3.resp_stream_min()
         WHERE r.bucket_id = b AND r.key = k;
        UPDATE pgvs3.resp_keys SET version = nextval('pgvs3.resp_key_versions') WHERE bucket_id = b AND key = k;
    WHEN 'xinfo', 'xdump' THEN
        -- ints: {how many entries from the start (FULL; 0: all), or NULL for the first and
        -- last}. n: the length; items: {last ID, greatest deleted ID, first ID (0-0 when
        -- empty)} and the entries; scores: {entries added, groups, entries} and the entries'
        -- lengths. FULL adds the groups (functions/resp_stream_group.sql). DUMP's read (layout
        -- v63, resp/commands/dump.rs) is XINFO STREAM FULL's of everything (ints {0}) with the
        -- nodes after: items each node's ID and last ID given, scores their number, then each
        -- one's entries given.
        IF ints[1] IS NULL THEN
            entries := pgvs3.resp_stream_range(b, k, pgvs3.resp_stream_min(), pgvs3.resp_stream_min(),
                                               pgvs3.resp_stream_max(), pgvs3.resp_stream_max(), false, 1)
                    || pgvs3.resp_stream_range(b, k, pgvs3.resp_stream_min(), pgvs3.resp_stream_min(),
                                               pgvs3.resp_stream_max(), pgvs3.resp_stream_max(), true, 1);
        ELSE
            entries := pgvs3.resp_stream_range(b, k, pgvs3.resp_stream_min(), pgvs3.resp_stream_min(),
                                               pgvs3.resp_stream_max(), pgvs3.resp_stream_max(), false, nullif(ints[1], 0));
        END IF;
        SELECT * INTO flat FROM pgvs3.resp_stream_flat(entries);
        n := s.length;
        items := ARRAY[pgvs3.resp_stream_id(s.last_ms, s.last_seq), pgvs3.resp_stream_id(s.deleted_ms, s.deleted_seq),
                       coalesce((SELECT pgvs3.resp_stream_id(e.ms, e.seq) FROM pgvs3.resp_stream_entry e
                                  WHERE e.bucket_id = b AND e.key = k ORDER BY ms, seq LIMIT 1),
                                pgvs3.resp_stream_id(pgvs3.resp_stream_min(), pgvs3.resp_stream_min()))]
                 || flat.items;
        scores := ARRAY[s.added::float8,
                        (SELECT count(*) FROM pgvs3.resp_stream_group g WHERE g.bucket_id = b AND g.key = k)::float8,
                        cardinality(entries)::float8]
                  || flat.scores;
        IF ints[1] IS NOT NULL THEN
            SELECT * INTO flat FROM pgvs3.resp_stream_groups_full(s, nullif(ints[1], 0));
            items := items || flat.items;
            scores := scores || flat.scores;
        END IF;
        IF op = 'xdump' THEN
            SELECT items || coalesce(array_agg(x.item ORDER BY x.ms, x.seq, x.o), '{}'),
                   scores || (SELECT count(*)::float8 FROM pgvs3.resp_stream_node x WHERE x.bucket_id = b AND x.key = k)
                          || coalesce((SELECT array_agg(x.given::float8 ORDER BY x.ms, x.seq) FROM pgvs3.resp_stream_node x
                                        WHERE x.bucket_id = b AND x.key = k), '{}')
              INTO items, scores
              FROM (SELECT x.ms, x.seq, u.item, u.o FROM pgvs3.resp_stream_node x,
                           unnest(ARRAY[pgvs3.resp_stream_id(x.ms, x.seq), pgvs3.resp_stream_id(x.last_ms, x.last_seq)])
                               WITH ORDINALITY AS u(item, o)
                     WHERE x.bucket_id = b AND x.key = k) x;
        END IF;
    END CASE;
END $$;
