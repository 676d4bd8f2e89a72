-- RESP typed keys (layout v14): what every type's commands share, and the key commands that
-- move a typed key's elements (RENAME, COPY). Each command is one call of a family function
--   pgvs3.resp_<family>(op, bucket, keys, strings, args, ints, floats)
--     -> (err text, n bigint, items bytea[], scores float8[])
-- made by the gateway (store/types.rs) with `strings` = the keys among `keys` that are live
-- strings (objects) of the bucket, which only the gateway's per-namespace SQL can see. Redis's
-- errors come back in `err` as codes (`wrongtype`, `no_such_key`, ...), never raised: a raised
-- error would abort the shared transaction of every connection whose commands went with it. The
-- gateway words each code (store/types.rs `SQL_ERRORS`: Redis's exact texts live only there).
-- Write calls run under the keys' advisory locks (store/kv.rs), so what a call checks stays
-- true until it commits.

CREATE OR REPLACE FUNCTION pgvs3.resp_wrongtype() RETURNS text LANGUAGE sql IMMUTABLE AS
$$ SELECT 'wrongtype' $$;

-- The clock keys' expiry is judged by (layout v65): the batch's, which its first load fixes in
-- `pgvs3.resp_now` for its transaction (store/kv/sql.rs BATCH_CLOCK), so every call of a
-- script or MULTI/EXEC judges every key at one instant, as Redis 7.0 does; outside a batch's
-- transaction, now.
-- A speculated call's check (layout v74): the gateway answered a script's call from its
-- working set before the call ran, and sends the call with that answer; `kept` is whether the
-- function answered the same. When not, the transaction must not commit (the script acted on
-- an answer the database did not give): the error aborts it, and the gateway, told by the
-- hint, runs the script again without speculation.
CREATE OR REPLACE FUNCTION pgvs3.resp_expect(kept boolean) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF kept IS NOT TRUE THEN
        RAISE EXCEPTION 'a speculated reply differs from the call''s' USING HINT = 'Mispredicted';
    END IF;
    RETURN true;
END $$;

-- The helpers below that a call runs on every key are PL/pgSQL (layout v75), not SQL: a SQL
-- function that cannot be inlined (one with a FROM, or calling a volatile function from a
-- STABLE one) is parsed and planned again in every statement that calls it, which cost ~40 µs
-- for resp_type and ~8 µs for this one per call; PL/pgSQL keeps its plans for the session.
CREATE OR REPLACE FUNCTION pgvs3.resp_now() RETURNS timestamptz LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce(nullif(current_setting('pgvs3.resp_now', true), '')::timestamptz, clock_timestamp());
END $$;

-- A RESP write batch's first lock (store/kv/write.rs `BeginLocked`; layout v69): the bucket's
-- write lock shared, with the bucket as committed once it is held (catalog.sql bucket_held),
-- then its keyspace lock, shared, or exclusively for a batch of many keys. DeleteBucket takes
-- both exclusively in that order, so it waits for a batch under way (and then finds its rows),
-- and a batch that comes after finds the bucket gone. That batch raises (hint NoSuchBucket,
-- unlike the family functions' codes: no write of the batch can stand): its transaction aborts,
-- and the writes and COMMIT pipelined behind this statement write nothing. Before, it waited for
-- the keyspace behind DeleteBucket, then wrote rows of no bucket and answered OK.
CREATE OR REPLACE FUNCTION pgvs3.resp_hold_keyspace(bucket bigint, exclusive boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pgvs3.bucket_held(bucket) THEN
        RAISE EXCEPTION 'no such bucket: %', bucket USING ERRCODE = 'P0002', HINT = 'NoSuchBucket';
    END IF;
    IF exclusive THEN
        PERFORM pg_advisory_xact_lock(-bucket);
    ELSE
        PERFORM pg_advisory_xact_lock_shared(-bucket);
    END IF;
END $$;

-- NULL when every key of `check` is absent or of type `t`, else the WRONGTYPE code. A write
-- call (`write`) first deletes the expired typed keys among `all_keys`, which then count as
-- absent (reads only skip them: a standby cannot delete). One clock for both: a row of
-- another type that expired between a delete and a check read by two clocks would be neither
-- deleted nor refused, and the write would land in it, expired.
CREATE OR REPLACE FUNCTION pgvs3.resp_check(b bigint, all_keys text[], strings text[], check_keys text[], t "char", write boolean)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    now timestamptz := pgvs3.resp_now();
BEGIN
    IF write THEN
        DELETE FROM pgvs3.resp_keys WHERE bucket_id = b AND key = ANY (all_keys) AND expires_at <= now;
    END IF;
    IF strings && check_keys OR EXISTS (
        SELECT 1 FROM unnest(check_keys) AS c(k)
         WHERE (SELECT type FROM pgvs3.resp_keys
                 WHERE bucket_id = b AND key = c.k AND (expires_at IS NULL OR expires_at > now)) <> t) THEN
        RETURN pgvs3.resp_wrongtype();
    END IF;
    RETURN NULL;
END $$;

-- The live type of a key, NULL when it has none (or is a string).
CREATE OR REPLACE FUNCTION pgvs3.resp_type(b bigint, k text) RETURNS "char" LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT type FROM pgvs3.resp_keys
             WHERE bucket_id = b AND key = k AND (expires_at IS NULL OR expires_at > pgvs3.resp_now()));
END $$;

-- A write is about to add to key `k` of type `t`: creates the key, or bumps its version.
CREATE OR REPLACE FUNCTION pgvs3.resp_touch(b bigint, k text, t "char") RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgvs3.resp_keys AS r (bucket_id, key, type) VALUES (b, k, t)
    ON CONFLICT (bucket_id, key) DO UPDATE SET version = nextval('pgvs3.resp_key_versions');
END $$;

-- A write is about to add to key `k` of type `t` and does not know yet whether it changes
-- anything (SADD of members already there, HSETNX of a field already set): creates the key, and
-- leaves its version to `resp_bump`, called once something changed. Redis signals a key to
-- WATCH only when a command changes it.
CREATE OR REPLACE FUNCTION pgvs3.resp_create(b bigint, k text, t "char") RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgvs3.resp_keys (bucket_id, key, type) VALUES (b, k, t) ON CONFLICT (bucket_id, key) DO NOTHING;
END $$;

CREATE OR REPLACE FUNCTION pgvs3.resp_bump(b bigint, k text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgvs3.resp_keys SET version = nextval('pgvs3.resp_key_versions') WHERE bucket_id = b AND key = k;
END $$;

-- A write removed elements of `k`: bumps its version, and deletes the key when it is empty
-- (Redis has no empty hashes, sets, sorted sets or lists; it keeps empty streams).
CREATE OR REPLACE FUNCTION pgvs3.resp_settle(b bigint, k text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgvs3.resp_keys SET version = nextval('pgvs3.resp_key_versions') WHERE bucket_id = b AND key = k;
    DELETE FROM pgvs3.resp_keys r
     WHERE r.bucket_id = b AND r.key = k
       AND NOT CASE r.type
           WHEN 'h' THEN EXISTS (SELECT 1 FROM pgvs3.resp_hash e WHERE e.bucket_id = b AND e.key = k)
           WHEN 's' THEN EXISTS (SELECT 1 FROM pgvs3.resp_set e WHERE e.bucket_id = b AND e.key = k)
           WHEN 'z' THEN EXISTS (SELECT 1 FROM pgvs3.resp_zset e WHERE e.bucket_id = b AND e.key = k)
           WHEN 'l' THEN EXISTS (SELECT 1 FROM pgvs3.resp_list e WHERE e.bucket_id = b AND e.key = k)
           ELSE true
       END;
END $$;

-- The encoding parameters of bucket `b`'s keyspace (0051_resp_encodings.sql; layout v60 adds
-- `stream-node-max-entries`), Redis 7.0.15's defaults where CONFIG SET never set one: what
-- CONFIG GET answers and the writes below judge by.
-- PL/pgSQL, so that its statement's plan is kept, where a SQL function's would be made at each
-- write.
CREATE OR REPLACE FUNCTION pgvs3.resp_encodings(b bigint,
    OUT hash_entries bigint, OUT hash_value bigint, OUT set_entries bigint, OUT zset_entries bigint, OUT zset_value bigint,
    OUT stream_entries bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT coalesce(p.hash_entries, 512), coalesce(p.hash_value, 64), coalesce(p.set_entries, 512),
           coalesce(p.zset_entries, 128), coalesce(p.zset_value, 64), coalesce(p.stream_entries, 100)
      INTO hash_entries, hash_value, set_entries, zset_entries, zset_value, stream_entries
      FROM (VALUES (1)) AS one LEFT JOIN pgvs3.resp_encoding_parameters p ON p.bucket_id = b;
END $$;

-- The limits of a small key of type `t` ('h', 's', 'z'): most elements, and longest field,
-- value or member (NULL for a set, whose small encoding, intset, takes integers only). Redis
-- caps an intset at 2^30 entries whatever the parameter says.
CREATE OR REPLACE FUNCTION pgvs3.resp_small_limits(b bigint, t "char", OUT entries bigint, OUT value bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    e record := pgvs3.resp_encodings(b);
BEGIN
    entries := CASE t WHEN 'h' THEN e.hash_entries WHEN 's' THEN least(e.set_entries, 1073741824) ELSE e.zset_entries END;
    value := CASE t WHEN 'h' THEN e.hash_value WHEN 'z' THEN e.zset_value END;
END $$;

-- Whether what `k` (of type `t`) holds fits its small encoding now: at most `entries` elements,
-- each within `value` bytes (a set's each an integer Redis's intset takes, string2ll's). Reads
-- at most entries + 1 elements: what Redis's RESTORE, *STORE and ZRANGESTORE judge a new key by.
CREATE OR REPLACE FUNCTION pgvs3.resp_fits(b bigint, k text, t "char") RETURNS boolean LANGUAGE plpgsql STABLE AS $$
DECLARE
    lim record := pgvs3.resp_small_limits(b, t);
    cap bigint := least(lim.entries, 1099511627776) + 1;
    fits boolean;
BEGIN
    IF t = 'h' THEN
        SELECT count(*) <= lim.entries AND coalesce(bool_and(length(field) <= lim.value AND length(value) <= lim.value), true)
          INTO fits FROM (SELECT field, value FROM pgvs3.resp_hash WHERE bucket_id = b AND key = k LIMIT cap) e;
    ELSIF t = 's' THEN
        SELECT count(*) <= lim.entries AND coalesce(bool_and(pgvs3.resp_int(member) IS NOT NULL), true)
          INTO fits FROM (SELECT member FROM pgvs3.resp_set WHERE bucket_id = b AND key = k LIMIT cap) e;
    ELSE
        SELECT count(*) <= lim.entries AND coalesce(bool_and(length(member) <= lim.value), true)
          INTO fits FROM (SELECT member FROM pgvs3.resp_zset WHERE bucket_id = b AND key = k LIMIT cap) e;
    END IF;
    RETURN fits;
END $$;

-- A write added `added` (fields and values, or members) to `k` of type `t` ('h', 's', 'z'),
-- which now holds `total` elements when the caller knows (NULL: counted here, up to the limit):
-- marks the key `large` when it passed its small encoding's limits, as Redis converts it then
-- (t_hash.c hashTypeTryConversion/hashTypeSet, t_set.c setTypeAdd, t_zset.c zsetAdd). A key
-- already large costs one probe of its row; a small one also its limits' and at most
-- entries + 1 index entries.
CREATE OR REPLACE FUNCTION pgvs3.resp_grown(b bigint, k text, t "char", added bytea[], total bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    lim record;
    cap bigint;
    over boolean;
BEGIN
    -- A large key stays large; one of before layout v51 (NULL) is judged when read.
    IF NOT EXISTS (SELECT 1 FROM pgvs3.resp_keys WHERE bucket_id = b AND key = k AND NOT large) THEN
        RETURN;
    END IF;
    lim := pgvs3.resp_small_limits(b, t);
    IF t = 's' THEN
        over := EXISTS (SELECT 1 FROM unnest(added) a WHERE pgvs3.resp_int(a) IS NULL);
    ELSE
        over := EXISTS (SELECT 1 FROM unnest(added) a WHERE length(a) > lim.value);
    END IF;
    IF NOT over AND total IS NULL THEN
        cap := least(lim.entries, 1099511627776) + 1;
        IF t = 'h' THEN
            total := (SELECT count(*) FROM (SELECT 1 FROM pgvs3.resp_hash WHERE bucket_id = b AND key = k LIMIT cap) e);
        ELSIF t = 's' THEN
            total := (SELECT count(*) FROM (SELECT 1 FROM pgvs3.resp_set WHERE bucket_id = b AND key = k LIMIT cap) e);
        ELSE
            total := (SELECT count(*) FROM (SELECT 1 FROM pgvs3.resp_zset WHERE bucket_id = b AND key = k LIMIT cap) e);
        END IF;
    END IF;
    IF over OR total > lim.entries THEN
        UPDATE pgvs3.resp_keys SET large = true WHERE bucket_id = b AND key = k;
    END IF;
END $$;

-- A batch's set-based writes to keys of type `t` ('h', 'z', 's'; layout v85: every key of the
-- type a batch's script runs wrote, in one call of resp_hash_apply, resp_zset_apply or
-- resp_set_apply; the arrays go by key, and the keys are distinct), the keys' part before the
-- elements' (`adds`: the write adds elements to the key): whether each key is as the run found
-- it, a live key of the type (`existed`) or none (an expired row is deleted, as resp_check
-- deletes one before a write); with `emptied` (the run removed its last element) its row goes,
-- its elements, TTL and encoding with it (the foreign keys cascade); a key made or made again
-- by the write is inserted. Each key is probed by its whole primary key (a scalar subquery
-- the planner cannot turn into a join), which plans the same before and after ANALYZE.
CREATE OR REPLACE FUNCTION pgvs3.resp_keys_begin(b bigint, ks text[], t "char", existed boolean[], emptied boolean[],
    adds boolean[])
RETURNS boolean LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    now timestamptz := pgvs3.resp_now();
    made bigint;
    n bigint;
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(ks, existed) AS e(k, x)
                WHERE e.x AND (SELECT r.type FROM pgvs3.resp_keys r
                                WHERE r.bucket_id = b AND r.key = e.k AND (r.expires_at IS NULL OR r.expires_at > now))
                              IS DISTINCT FROM t) THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(existed, emptied) AS e(x, gone) WHERE e.gone OR NOT e.x) THEN
        DELETE FROM pgvs3.resp_keys WHERE ctid = ANY (ARRAY(
            SELECT (SELECT r.ctid FROM pgvs3.resp_keys r
                     WHERE r.bucket_id = b AND r.key = e.k AND (e.x OR r.expires_at <= now))
              FROM unnest(ks, existed, emptied) AS e(k, x, gone)
             WHERE e.gone OR NOT e.x));
    END IF;
    SELECT count(*) INTO made FROM unnest(existed, emptied, adds) AS e(x, gone, a) WHERE (NOT e.x OR e.gone) AND e.a;
    IF made > 0 THEN
        INSERT INTO pgvs3.resp_keys (bucket_id, key, type)
        SELECT b, e.k, t FROM unnest(ks, existed, emptied, adds) AS e(k, x, gone, a) WHERE (NOT e.x OR e.gone) AND e.a
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
        RETURN n = made;
    END IF;
    RETURN true;
END $$;

-- The keys' part after the elements' (see resp_keys_begin): a key kept whose elements changed
-- (`bump`) gets a new version, as WATCH sees it (a key made or deleted here was by its row); one
-- made and emptied within the run leaves no row, but its WATCHes see the write, as Redis's do.
-- `peak` (the most elements after a write) and `longest` (the longest element a write added)
-- are judged as resp_grown judges each write's, so that a key past its small encoding's limits
-- at any point of the run is in its large encoding. A key's row is updated once, for both.
CREATE OR REPLACE FUNCTION pgvs3.resp_keys_end(b bigint, ks text[], t "char", existed boolean[], emptied boolean[],
    bump boolean[], adds boolean[], peak bigint[], longest bigint[])
RETURNS void LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    entries bigint;
    longest_value bigint;
    bumped text[];
    grown text[];
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(existed, emptied, adds) AS e(x, gone, a) WHERE e.gone AND NOT e.a AND NOT e.x) THEN
        UPDATE pgvs3.resp_watches SET touched = true
         WHERE bucket_id = b AND NOT touched
           AND key = ANY (ARRAY(SELECT e.k FROM unnest(ks, existed, emptied, adds) AS e(k, x, gone, a)
                                 WHERE e.gone AND NOT e.a AND NOT e.x));
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(peak) AS p WHERE p > 0) THEN
        -- A set's `longest` is 1 when a member is no integer, which its intset cannot hold:
        -- past a value limit of 0.
        SELECT l.entries, CASE WHEN t = 's' THEN 0 ELSE l.value END INTO entries, longest_value
          FROM pgvs3.resp_small_limits(b, t) AS l;
    END IF;
    -- Keys left without a row (emptied and not made again) have nothing more to judge.
    SELECT array_agg(e.k) FILTER (WHERE e.u AND e.x AND NOT e.gone),
           array_agg(e.k) FILTER (WHERE e.p > 0 AND (e.p > entries OR e.l > longest_value))
      INTO bumped, grown
      FROM unnest(ks, existed, emptied, bump, adds, peak, longest) AS e(k, x, gone, u, a, p, l)
     WHERE NOT (e.gone AND NOT e.a);
    IF bumped IS NULL AND grown IS NULL THEN
        RETURN;
    END IF;
    -- A large key stays large; one of before layout v51 (NULL) is judged when read.
    UPDATE pgvs3.resp_keys r
       SET version = CASE WHEN r.key = ANY (bumped) THEN nextval('pgvs3.resp_key_versions') ELSE r.version END,
           large = CASE WHEN r.key = ANY (grown) AND NOT r.large THEN true ELSE r.large END
     WHERE r.ctid = ANY (ARRAY(
        SELECT (SELECT k.ctid FROM pgvs3.resp_keys k
                 WHERE k.bucket_id = b AND k.key = e.k AND (e.k = ANY (bumped) OR NOT k.large))
          FROM unnest(coalesce(bumped, '{}') || coalesce(grown, '{}')) AS e(k)));
END $$;

-- One key's part before and after its elements' (resp_keys_begin, resp_keys_end), for the
-- functions that write one key a call (resp_list_apply, resp_stream_apply).
CREATE OR REPLACE FUNCTION pgvs3.resp_apply_begin(b bigint, k text, t "char", existed boolean, emptied boolean, adds boolean)
RETURNS boolean LANGUAGE sql AS $$
    SELECT pgvs3.resp_keys_begin(b, ARRAY[k], t, ARRAY[existed], ARRAY[emptied], ARRAY[adds])
$$;

CREATE OR REPLACE FUNCTION pgvs3.resp_apply_end(b bigint, k text, t "char", existed boolean, emptied boolean, bump boolean,
    adds boolean, peak bigint, longest bigint)
RETURNS void LANGUAGE sql AS $$
    SELECT pgvs3.resp_keys_end(b, ARRAY[k], t, ARRAY[existed], ARRAY[emptied], ARRAY[bump], ARRAY[adds], ARRAY[peak],
                               ARRAY[longest])
$$;

-- OBJECT ENCODING of a hash, set or sorted set: whether it is in its large encoding (NULL:
-- no such key).
CREATE OR REPLACE FUNCTION pgvs3.resp_large(b bigint, k text) RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT coalesce(r.large, NOT pgvs3.resp_fits(b, k, r.type)) FROM pgvs3.resp_keys r WHERE r.bucket_id = b AND r.key = k);
END $$;

-- Replaces whatever `k` holds, of any type, with nothing: the destination of a *STORE command,
-- RENAME or COPY. `is_string`: it is a live string (an object of the bucket's namespace).
CREATE OR REPLACE FUNCTION pgvs3.resp_clear(b bigint, k text, is_string boolean) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    ns text;
BEGIN
    DELETE FROM pgvs3.resp_keys WHERE bucket_id = b AND key = k;
    IF is_string THEN
        SELECT namespace INTO ns FROM pgvs3.buckets WHERE id = b;
        EXECUTE format('DELETE FROM %I.objects WHERE bucket_id = $1 AND key = $2', ns) USING b, k;
    END IF;
END $$;

-- Elements were added to `k`: clients blocked on it (BLPOP, BZPOPMIN, ...) on every gateway
-- are told at commit (NOTIFY `pgvs3_resp`, payload "<bucket id> <key>").
CREATE OR REPLACE FUNCTION pgvs3.resp_wake(b bigint, k text) RETURNS void LANGUAGE sql AS $$
    SELECT pg_notify('pgvs3_resp', b || ' ' || k)
$$;

-- Trigger (layout v28): a stream key deleted (DEL, expiry, SET over it, FLUSHDB) or renamed
-- wakes the clients blocked on it, as a push does, so that an XREADGROUP ... BLOCK is answered
-- Redis's `UNBLOCKED the stream key no longer exists` at once.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgvs3.resp_wake(OLD.bucket_id, OLD.key);
    RETURN NULL;
END $$;

-- Trigger (layout v57): a list, sorted set or stream key made by any means (RENAME, COPY,
-- RESTORE, a *STORE command) wakes the clients blocked on it, as a push does; a push to a new
-- key notifies once (PostgreSQL folds equal notifications of a transaction).
CREATE OR REPLACE FUNCTION pgvs3.resp_key_ready() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgvs3.resp_wake(NEW.bucket_id, NEW.key);
    RETURN NULL;
END $$;

-- Integers as Redis reads them (string2ll): NULL when `v` is not one.
CREATE OR REPLACE FUNCTION pgvs3.resp_int(v bytea) RETURNS numeric LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN length(v) <= 20 AND encode(v, 'escape') ~ '^-?(0|[1-9][0-9]*)$'
                     AND encode(v, 'escape')::numeric BETWEEN -9223372036854775808 AND 9223372036854775807
                THEN encode(v, 'escape')::numeric END
$$;

-- Floats as Redis reads a stored value (string2ld), exactly, as numeric: NULL when `v` is not
-- one, or is infinite (which no increment can make finite).
CREATE OR REPLACE FUNCTION pgvs3.resp_decimal(v bytea) RETURNS numeric LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN length(v) <= 400
                     AND encode(v, 'escape') ~ '^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,3})?$'
                THEN encode(v, 'escape')::numeric END
$$;

-- The key commands on a typed key (RENAME, COPY): keys = {from, to}; ints[1] = 1 for RENAMENX
-- or COPY without REPLACE. n: 1 done, 0 not done (the destination exists); err: no such key.
CREATE OR REPLACE FUNCTION pgvs3.resp_keys(op text, b bigint, ks text[], strings text[], args bytea[], ints bigint[], floats float8[],
    OUT err text, OUT n bigint, OUT items bytea[], OUT scores float8[])
LANGUAGE plpgsql AS $$
DECLARE
    src text := ks[1];
    dst text := ks[2];
    src_type "char";
    only_new boolean := ints[1] = 1;
BEGIN
    PERFORM pgvs3.resp_check(b, ks, '{}', '{}', 'h', true);
    src_type := pgvs3.resp_type(b, src);
    IF src_type IS NULL THEN
        err := 'no_such_key';
        RETURN;
    END IF;
    IF src = dst THEN
        IF op = 'copy' THEN
            err := 'same_object';
        ELSE
            n := CASE WHEN only_new THEN 0 ELSE 1 END;
        END IF;
        RETURN;
    END IF;
    IF only_new AND (dst = ANY (strings) OR pgvs3.resp_type(b, dst) IS NOT NULL) THEN
        n := 0;
        RETURN;
    END IF;
    PERFORM pgvs3.resp_clear(b, dst, dst = ANY (strings));
    IF op = 'rename' THEN
        -- The elements follow (ON UPDATE CASCADE).
        UPDATE pgvs3.resp_keys SET key = dst, version = nextval('pgvs3.resp_key_versions') WHERE bucket_id = b AND key = src;
    ELSE
        -- With a list's length and bounds (functions/resp_list.sql), and the encoding: Redis's
        -- COPY duplicates the object as it is encoded (hashTypeDup, setTypeDup, zsetDup).
        INSERT INTO pgvs3.resp_keys (bucket_id, key, type, expires_at, length, list_head, list_tail, large)
            SELECT b, dst, type, expires_at, length, list_head, list_tail, large FROM pgvs3.resp_keys WHERE bucket_id = b AND key = src;
        CASE src_type
        WHEN 'h' THEN
            INSERT INTO pgvs3.resp_hash SELECT b, dst, field, value, added FROM pgvs3.resp_hash WHERE bucket_id = b AND key = src;
        WHEN 's' THEN
            INSERT INTO pgvs3.resp_set SELECT b, dst, member FROM pgvs3.resp_set WHERE bucket_id = b AND key = src;
        WHEN 'z' THEN
            INSERT INTO pgvs3.resp_zset SELECT b, dst, member, score FROM pgvs3.resp_zset WHERE bucket_id = b AND key = src;
        WHEN 'l' THEN
            INSERT INTO pgvs3.resp_list SELECT b, dst, pos, value FROM pgvs3.resp_list WHERE bucket_id = b AND key = src;
        ELSE
            INSERT INTO pgvs3.resp_stream SELECT b, dst, last_ms, last_seq, deleted_ms, deleted_seq, added, length, first_ms, first_seq
                FROM pgvs3.resp_stream WHERE bucket_id = b AND key = src;
            INSERT INTO pgvs3.resp_stream_entry SELECT b, dst, ms, seq, fields
                FROM pgvs3.resp_stream_entry WHERE bucket_id = b AND key = src;
            INSERT INTO pgvs3.resp_stream_node SELECT b, dst, ms, seq, last_ms, last_seq, live, given
                FROM pgvs3.resp_stream_node WHERE bucket_id = b AND key = src;
            -- Its consumer groups too, as Redis copies them.
            INSERT INTO pgvs3.resp_stream_group SELECT b, dst, name, last_ms, last_seq, entries_read
                FROM pgvs3.resp_stream_group WHERE bucket_id = b AND key = src;
            INSERT INTO pgvs3.resp_stream_consumer SELECT b, dst, grp, name, seen_ms, active_ms
                FROM pgvs3.resp_stream_consumer WHERE bucket_id = b AND key = src;
            INSERT INTO pgvs3.resp_stream_pending SELECT b, dst, grp, ms, seq, consumer, delivered_ms, deliveries
                FROM pgvs3.resp_stream_pending WHERE bucket_id = b AND key = src;
        END CASE;
    END IF;
    n := 1;
END $$;

-- Trigger (layout v16): a bucket's first typed key lists the bucket in `resp_typed`, in the
-- same transaction, so string statements that assumed none see it (store/kv.rs).
CREATE OR REPLACE FUNCTION pgvs3.resp_mark_typed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgvs3.resp_typed VALUES (NEW.bucket_id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

-- Raised by a string write that assumed its bucket had no typed keys when it has some: the
-- gateway rolls the batch back and writes it again the typed way (store/kv.rs). Called only
-- when a `resp_typed` row matched, so it costs nothing otherwise.
CREATE OR REPLACE FUNCTION pgvs3.resp_typed_conflict() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'the keyspace holds typed keys' USING ERRCODE = 'P0001', HINT = 'RespTyped';
END $$;

-- WATCH (layout v48, 0048_resp_watches.sql): registers `keys` of bucket `b` under `token` (one
-- per watching connection) and has every write of them mark the registration touched: typed
-- keys by the trigger on resp_keys, strings by one made here on the namespace's objects the
-- first time one of its keys is watched. Committed before the WATCH reads the keys, so a write
-- that commits after that read sees the registration. Answers how many of `keys` were new to
-- `token`; NULL on a hot standby, which cannot write it (its gateway refuses EXEC's writes
-- anyway; a read-only EXEC there compares values).
CREATE OR REPLACE FUNCTION pgvs3.resp_watch(token bigint, b bigint, keys text[]) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    ns text;
    added int;
BEGIN
    IF pg_is_in_recovery() THEN
        RETURN NULL;
    END IF;
    SELECT namespace INTO ns FROM pgvs3.buckets WHERE id = b;
    IF ns IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'resp_watched_write'
                                         AND tgrelid = format('%I.objects', ns)::regclass) THEN
        -- Two WATCHes may both have found it missing: the second replaces the first's.
        EXECUTE format('CREATE OR REPLACE TRIGGER resp_watched_write AFTER INSERT OR UPDATE OR DELETE ON %I.objects
                            FOR EACH ROW EXECUTE FUNCTION pgvs3.resp_watched_write()', ns);
    END IF;
    INSERT INTO pgvs3.resp_watches (token, bucket_id, key)
    SELECT token, b, k FROM unnest(keys) AS k
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS added = ROW_COUNT;
    RETURN added;
END $$;

-- A write of a key (row of resp_keys or of a namespace's objects) marks the WATCHes of it, of
-- the old key and the new when RENAME moves a row.
CREATE OR REPLACE FUNCTION pgvs3.resp_watched_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        UPDATE pgvs3.resp_watches SET touched = true
         WHERE bucket_id = OLD.bucket_id AND key = OLD.key AND NOT touched;
    END IF;
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND (NEW.bucket_id, NEW.key) IS DISTINCT FROM (OLD.bucket_id, OLD.key)) THEN
        UPDATE pgvs3.resp_watches SET touched = true
         WHERE bucket_id = NEW.bucket_id AND key = NEW.key AND NOT touched;
    END IF;
    RETURN NULL;
END $$;
