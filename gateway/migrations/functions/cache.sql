-- The origin cache tier: cache buckets (`s3w` write-back namespace, `s3c` read-through fills),
-- their origins and the write-back outbox.
-- The current definition of every function of this area. Re-applied (CREATE OR REPLACE) by the
-- migration runner after the numbered migrations, in the same advisory-locked transaction, when
-- this file's digest differs from the one the database recorded (gateway/src/pg/migrate.rs).
-- Edit the function here, never in a numbered migration, and add a numbered migration with the
-- change (it bumps the layout version, which is what keeps an older gateway from re-applying
-- its older copy). A migration that needs a function as it runs keeps its own definition.

-- Queues the key of every write to a cache bucket for its upload to the origin, in the writing
-- transaction, so an acknowledged body can never miss its upload.
-- Trigger: objects_enqueue_write_back, AFTER INSERT OR UPDATE OF size, etag, last_modified,
-- expires_at, meta, inline, body_id ON s3w.objects, FOR EACH ROW (migration 0010). It fires
-- before objects_event (name order), so the row a write's owed event is put on exists.
-- Preconditions on the Rust SQL (gateway/src/store/):
--   * every write path (PUT, conditional PUT, copy, multipart completion, tagging, RESP SET and
--     EXPIRE) sets at least one of those columns: `UPDATE OF` fires on the columns named in SET
--     (or in ON CONFLICT DO UPDATE SET), whether or not the value changes;
--   * the cache tier's bookkeeping (mark clean, revalidate, record last use: store/cache.rs)
--     sets only origin_etag, validated_at and accessed_at, so it queues nothing;
--   * a DELETE queues nothing here: deletes are sent to the origin by the request itself.
-- A body superseded before its upload settled is not uploaded (the newer one is), and its
-- writer, waiting for that upload, is told it succeeded: the event it still owed is raised now,
-- before the newer write's own.
CREATE OR REPLACE FUNCTION pgvs3.enqueue_write_back() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE superseded jsonb;
BEGIN
    SELECT owed_event INTO superseded FROM pgvs3.origin_outbox
     WHERE bucket_id = NEW.bucket_id AND key = NEW.key AND owed_event IS NOT NULL FOR UPDATE;
    IF superseded IS NOT NULL THEN
        PERFORM pgvs3.raise_owed_event(NEW.bucket_id, NEW.key, superseded);
    END IF;
    INSERT INTO pgvs3.origin_outbox (bucket_id, key) VALUES (NEW.bucket_id, NEW.key)
    ON CONFLICT (bucket_id, key) DO UPDATE
        SET generation = nextval('pgvs3.outbox_generations'), enqueued_at = now(), attempts = 0,
            next_attempt_at = now(), last_error = NULL, owed_event = NULL;
    RETURN NULL;
END $$;

-- Bucket notifications of cache buckets (layout v23). A write the cache acknowledges raises its
-- event in the transaction that records it here: a body staged in s3w (objects_event calls
-- cache_write_event), or, for a body the origin took first, the cache's entry or invalidation
-- (store/cache.rs calls emit_object_event). A staged body whose writer waits for the origin
-- (the rule of CacheTier::waits_for_origin: not write-back mode, or below the threshold) owes
-- its event on its outbox row instead, until settle_write_back raises it; an undone write
-- (drop_pending) drops it. A fill from the origin is no client write and raises nothing.
CREATE OR REPLACE FUNCTION pgvs3.cache_write_event(bucket bigint, object_key text, event_name text,
                                                   object_size bigint, object_etag text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgvs3.buckets WHERE id = bucket AND notifications IS NOT NULL) THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM pgvs3.origins o
                WHERE o.bucket_id = bucket
                  AND (o.mode <> 'write-back' OR object_size < greatest(o.write_back_threshold, 1))) THEN
        UPDATE pgvs3.origin_outbox
           SET owed_event = jsonb_build_object('name', event_name, 'size', object_size, 'etag', object_etag)
         WHERE bucket_id = bucket AND key = object_key;
    ELSE
        PERFORM pgvs3.emit_object_event(bucket, object_key, event_name, object_size, object_etag, NULL);
    END IF;
END $$;

-- Raises an event a staged write owed (see cache_write_event).
CREATE OR REPLACE FUNCTION pgvs3.raise_owed_event(bucket bigint, object_key text, owed jsonb) RETURNS void
LANGUAGE sql AS $$
    SELECT pgvs3.emit_object_event(bucket, object_key, owed ->> 'name', (owed ->> 'size')::bigint,
                                   owed ->> 'etag', NULL)
$$;

-- The upload of generation `settled` of a key succeeded with `origin_etag`: the body that was
-- uploaded stays where it is, now a clean entry with the ETag the origin gave it (not copied:
-- its bytes are written once), and raises the event it owed. A newer generation stays queued.
-- An entry filled before the write goes: it would show again once this body is evicted.
CREATE OR REPLACE FUNCTION pgvs3.settle_write_back(bucket bigint, object_key text, settled bigint,
                                                   etag_at_origin text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE owed jsonb;
BEGIN
    DELETE FROM pgvs3.origin_outbox WHERE bucket_id = bucket AND key = object_key AND generation = settled
    RETURNING owed_event INTO owed;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE s3w.objects SET origin_etag = etag_at_origin, validated_at = now(), accessed_at = now()
     WHERE bucket_id = bucket AND key = object_key;
    IF FOUND THEN
        DELETE FROM s3c.ranges WHERE bucket_id = bucket AND key = object_key;
        DELETE FROM s3c.objects WHERE bucket_id = bucket AND key = object_key;
    END IF;
    IF owed IS NOT NULL THEN
        PERFORM pgvs3.raise_owed_event(bucket, object_key, owed);
    END IF;
END $$;

-- A write to a clean (already uploaded) s3w row makes it pending again: not evictable, not
-- fresh, until its upload marks it clean.
-- Trigger: objects_pending_again, BEFORE UPDATE OF the same body columns ON s3w.objects,
-- FOR EACH ROW WHEN (OLD.origin_etag IS NOT NULL) (migration 0010). Same preconditions as
-- objects_enqueue_write_back; an INSERT needs nothing (new rows start with NULL origin_etag).
CREATE OR REPLACE FUNCTION pgvs3.mark_write_back_pending() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.origin_etag := NULL;
    NEW.validated_at := NULL;
    NEW.accessed_at := NULL;
    RETURN NEW;
END $$;

-- Dropping a cache (or its bucket) drops its pending bodies and their outbox rows.
-- Trigger: origins_forget, AFTER DELETE ON pgvs3.origins, FOR EACH ROW (migration 0004); it also
-- fires through ON DELETE CASCADE when the cache bucket's pgvs3.buckets row is deleted.
CREATE OR REPLACE FUNCTION pgvs3.forget_origin() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgvs3.origin_outbox WHERE bucket_id = OLD.bucket_id;
    DELETE FROM s3w.objects WHERE bucket_id = OLD.bucket_id;
    DELETE FROM s3c.objects WHERE bucket_id = OLD.bucket_id;
    DELETE FROM s3c.ranges WHERE bucket_id = OLD.bucket_id;
    RETURN NULL;
END $$;

-- put_origin marks s3c entries stale when a cache moves to another origin or its credentials
-- change; clean bodies in s3w were vouched for through the old origin or credentials too.
-- Trigger: origins_revalidate_clean_write_backs, AFTER UPDATE OF endpoint, origin_bucket,
-- access_key, secret_encrypted ON pgvs3.origins, FOR EACH ROW WHEN one of them changed
-- (migration 0010; credentials since 0052).
CREATE OR REPLACE FUNCTION pgvs3.revalidate_clean_write_backs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE s3w.objects SET validated_at = '-infinity' WHERE bucket_id = NEW.bucket_id AND origin_etag IS NOT NULL;
    RETURN NULL;
END $$;

-- Creates or updates the cache bucket `bucket` in front of `origin_bucket` at `endpoint`.
-- The bucket is created (owned by the root key) when absent; an existing ordinary bucket is
-- refused, since its objects would be hidden behind the origin's.
CREATE OR REPLACE FUNCTION pgvs3.put_origin(
    bucket text, endpoint text, origin_bucket text, region text,
    access_key text, secret_encrypted bytea,
    cache_mode text DEFAULT 'write-back',
    path_style boolean DEFAULT true,
    ttl_seconds integer DEFAULT 3600,
    negative_ttl_seconds integer DEFAULT 0,
    fill_concurrency integer DEFAULT 8,
    size_limit_bytes bigint DEFAULT NULL,
    write_back_threshold bigint DEFAULT 8388608,
    range_chunk_bytes integer DEFAULT 1048576
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    cache_id bigint;
    ns text;
    previous pgvs3.origins;
BEGIN
    SELECT b.id, b.namespace INTO cache_id, ns FROM pgvs3.buckets b WHERE b.name = bucket FOR UPDATE;
    IF FOUND AND ns <> 's3w' THEN
        RAISE EXCEPTION 'bucket % already exists and is not a cache bucket', bucket USING ERRCODE = '22023';
    END IF;
    IF NOT FOUND THEN
        SELECT e.bucket_id INTO cache_id FROM pgvs3.ensure_bucket(bucket, NULL, 's3w') e;
    END IF;
    SELECT * INTO previous FROM pgvs3.origins o WHERE o.bucket_id = cache_id;
    INSERT INTO pgvs3.origins AS o (bucket_id, endpoint, region, origin_bucket, access_key, secret_encrypted,
                                    path_style, mode, ttl_seconds, negative_ttl_seconds, fill_concurrency,
                                    size_limit_bytes, write_back_threshold, range_chunk_bytes)
    VALUES (cache_id, endpoint, region, origin_bucket, access_key, secret_encrypted, path_style, cache_mode,
            ttl_seconds, negative_ttl_seconds, fill_concurrency, size_limit_bytes, write_back_threshold,
            range_chunk_bytes)
    ON CONFLICT ON CONSTRAINT origins_pkey DO UPDATE
        SET endpoint = EXCLUDED.endpoint, region = EXCLUDED.region, origin_bucket = EXCLUDED.origin_bucket,
            access_key = EXCLUDED.access_key, secret_encrypted = EXCLUDED.secret_encrypted,
            path_style = EXCLUDED.path_style, mode = EXCLUDED.mode, ttl_seconds = EXCLUDED.ttl_seconds,
            negative_ttl_seconds = EXCLUDED.negative_ttl_seconds, fill_concurrency = EXCLUDED.fill_concurrency,
            size_limit_bytes = EXCLUDED.size_limit_bytes, write_back_threshold = EXCLUDED.write_back_threshold,
            range_chunk_bytes = EXCLUDED.range_chunk_bytes, updated_at = now()
        -- Re-applying the same settings (as a reconciling operator does) changes nothing.
        WHERE (o.endpoint, o.region, o.origin_bucket, o.access_key, o.secret_encrypted, o.path_style, o.mode,
               o.ttl_seconds, o.negative_ttl_seconds, o.fill_concurrency, o.size_limit_bytes,
               o.write_back_threshold, o.range_chunk_bytes)
              IS DISTINCT FROM
              (EXCLUDED.endpoint, EXCLUDED.region, EXCLUDED.origin_bucket, EXCLUDED.access_key,
               EXCLUDED.secret_encrypted, EXCLUDED.path_style, EXCLUDED.mode, EXCLUDED.ttl_seconds,
               EXCLUDED.negative_ttl_seconds, EXCLUDED.fill_concurrency, EXCLUDED.size_limit_bytes,
               EXCLUDED.write_back_threshold, EXCLUDED.range_chunk_bytes);
    -- Entries cached from another origin, or with other credentials (which may have read what
    -- these may not), must be fetched again. The sealed secret changes only with the secret.
    IF (previous.endpoint, previous.origin_bucket, previous.access_key, previous.secret_encrypted)
       IS DISTINCT FROM (endpoint, origin_bucket, access_key, secret_encrypted) THEN
        UPDATE s3c.objects SET validated_at = '-infinity' WHERE bucket_id = cache_id;
        DELETE FROM s3c.ranges WHERE bucket_id = cache_id;
    END IF;
    RETURN cache_id;
END $$;

-- Drops a cache bucket and everything cached in it. Without `force` it refuses while bodies
-- still wait for their upload (they exist nowhere else). It holds the bucket as a drop does
-- (bucket_to_drop) before it looks at the outbox: a write-back under way commits first, and is
-- seen, or finds the bucket gone and writes nothing (before v67 it was committed after the drop,
-- acknowledged, in no bucket, never to be uploaded). Then the bucket goes as a forced
-- DeleteBucket takes it, its multipart uploads in progress with it; the cascade to its origin
-- row takes the rest (forget_origin).
CREATE OR REPLACE FUNCTION pgvs3.drop_origin(bucket text, force boolean DEFAULT false) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE cache_id bigint;
BEGIN
    cache_id := (pgvs3.bucket_to_drop(bucket)).id;
    IF cache_id IS NULL OR NOT EXISTS (SELECT 1 FROM pgvs3.origins WHERE bucket_id = cache_id) THEN
        RETURN false;
    END IF;
    IF NOT force AND EXISTS (SELECT 1 FROM pgvs3.origin_outbox WHERE bucket_id = cache_id) THEN
        RAISE EXCEPTION 'cache bucket % has write-backs not yet at the origin', bucket
            USING ERRCODE = 'P0001', HINT = 'PendingWriteBack';
    END IF;
    RETURN pgvs3.drop_bucket(bucket, true);
END $$;

-- The sealed origin secret of cache bucket `bucket` (NULL when it has no origin): a writer
-- re-seals the secret only when this no longer opens to it, since a fresh seal (new nonce)
-- would make an unchanged put_origin an update that every gateway reloads. (Layout v11.)
CREATE OR REPLACE FUNCTION pgvs3.origin_secret(bucket text) RETURNS bytea
LANGUAGE sql STABLE AS $$
    SELECT o.secret_encrypted FROM pgvs3.origins o JOIN pgvs3.buckets b ON b.id = o.bucket_id
     WHERE b.name = bucket
$$;
