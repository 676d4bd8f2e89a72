-- Bucket quotas (layout v7): limits on a bucket's bytes and objects, kept by a row trigger.
-- The current definition of every function of this area. Re-applied (CREATE OR REPLACE) by the
-- migration runner after the numbered migrations, in the same advisory-locked transaction, when
-- this file's digest differs from the one the database recorded (gateway/src/pg/migrate.rs).
-- Edit the function here, never in a numbered migration, and add a numbered migration with the
-- change (it bumps the layout version, which is what keeps an older gateway from re-applying
-- its older copy). A migration that needs a function as it runs keeps its own definition.

-- Keeps a bucket's usage row in step with its objects and their versions, and refuses growth
-- past a limit. Every version counts (migration 0024): a noncurrent version's bytes are stored as a
-- current one's are, and a delete marker is an object of no bytes.
-- Triggers: objects_bucket_usage, AFTER INSERT OR UPDATE OR DELETE ON <ns>.objects, and
-- versions_bucket_usage, the same ON <ns>.versions, FOR EACH ROW, created by set_bucket_quota
-- the first time a bucket of that namespace gets a quota (and never dropped: buckets without a
-- usage row cost one UPDATE that finds nothing).
-- Preconditions: every object or version row change is an INSERT, UPDATE or DELETE (never
-- TRUNCATE, which fires no row trigger), and `size` is the logical size. A row's bucket never
-- changes (`bucket_id` is never updated), since the delta is booked to NEW's bucket. Multipart
-- parts are not counted until completion writes the object row. A `versions` row only ever
-- arrives from `objects` (a replaced or deleted current version, moved) or is a delete marker
-- (no bytes), so it is counted but never refused: refusing it would refuse a DELETE. Its growth
-- is checked when it happens, at the object row, with what the version triggers firing after
-- this one will do: an UPDATE that changes the version id is one whose replaced version
-- objects_keep_version moves into `versions` (still stored), and a null version written into a
-- versioned bucket is one for which objects_replace_null removes a noncurrent null version (no
-- longer stored: in a Suspended bucket a PUT replaces a null delete marker so). A version promoted to current
-- (after the current one was deleted for good) is a versions DELETE then an objects INSERT: no
-- growth, refused only when the bucket is over a limit lowered below its usage.
CREATE OR REPLACE FUNCTION pgvs3.count_bucket_usage() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    target        bigint;
    bytes_delta   bigint;
    objects_delta bigint;
    -- What the version triggers firing after this one add to the bucket (negative: remove).
    pending_bytes   bigint := 0;
    pending_objects bigint := 0;
    replaced_bytes  bigint;
    replaced_count  bigint;
    quota         pgvs3.bucket_quotas;
BEGIN
    IF TG_OP = 'INSERT' THEN
        target := NEW.bucket_id; bytes_delta := NEW.size; objects_delta := 1;
    ELSIF TG_OP = 'DELETE' THEN
        target := OLD.bucket_id; bytes_delta := -OLD.size; objects_delta := -1;
    ELSE
        target := NEW.bucket_id; bytes_delta := NEW.size - OLD.size; objects_delta := 0;
    END IF;
    IF TG_TABLE_NAME = 'objects' AND TG_OP = 'UPDATE' AND OLD.version_id IS DISTINCT FROM NEW.version_id THEN
        -- The replaced version stays, as a row of `versions` (counted by its own trigger).
        pending_bytes := OLD.size; pending_objects := 1;
    END IF;
    IF TG_TABLE_NAME = 'objects' AND TG_OP <> 'DELETE' AND NEW.version_id IS NULL AND NEW.version_seq IS NOT NULL THEN
        EXECUTE format('SELECT coalesce(sum(size), 0), count(*) FROM %I.versions
                         WHERE bucket_id = $1 AND key = $2 AND version_id = ''null''', TG_TABLE_SCHEMA)
            INTO replaced_bytes, replaced_count USING NEW.bucket_id, NEW.key;
        pending_bytes := pending_bytes - replaced_bytes; pending_objects := pending_objects - replaced_count;
    END IF;
    IF bytes_delta = 0 AND objects_delta = 0 AND pending_bytes = 0 AND pending_objects = 0 THEN
        RETURN NULL;
    END IF;
    UPDATE pgvs3.bucket_quotas
       SET used_bytes = used_bytes + bytes_delta, used_objects = used_objects + objects_delta
     WHERE bucket_id = target
    RETURNING * INTO quota;
    -- Only growth is refused: a delete or a smaller overwrite always goes through, so a bucket
    -- whose limit was lowered below its usage can be brought back under it.
    IF TG_TABLE_NAME = 'objects'
       AND ((bytes_delta + pending_bytes > 0 AND quota.used_bytes + pending_bytes > quota.max_bytes)
            OR (objects_delta + pending_objects > 0 AND quota.used_objects + pending_objects > quota.max_objects)) THEN
        RAISE EXCEPTION 'bucket quota exceeded'
            USING ERRCODE = 'P0001', HINT = 'QuotaExceeded',
                  DETAIL = format('bucket id %s: %s of %s bytes, %s of %s objects', target,
                                  quota.used_bytes + pending_bytes, coalesce(quota.max_bytes::text, 'unlimited'),
                                  quota.used_objects + pending_objects, coalesce(quota.max_objects::text, 'unlimited'));
    END IF;
    RETURN NULL;
END $$;

-- Sets a bucket's quota (NULL: no limit on that dimension; both NULL: no quota). Setting the
-- first quota counts the bucket's objects while its namespace's writers are held off, so no
-- write can slip between the count and the trigger that keeps it. Lowering a limit below the
-- current usage is allowed: the bucket then only shrinks until it is under it.
CREATE OR REPLACE FUNCTION pgvs3.set_bucket_quota(bucket text, quota_bytes bigint, quota_objects bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    b            pgvs3.buckets;
    ns_purpose   text;
    counted_size bigint;
    counted_rows bigint;
BEGIN
    IF quota_bytes < 0 OR quota_objects < 0 THEN
        RAISE EXCEPTION 'a quota cannot be negative' USING ERRCODE = '22023';
    END IF;
    SELECT * INTO b FROM pgvs3.buckets WHERE name = bucket;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no such bucket: %', bucket USING ERRCODE = 'P0002', HINT = 'NoSuchBucket';
    END IF;
    IF quota_bytes IS NULL AND quota_objects IS NULL THEN
        DELETE FROM pgvs3.bucket_quotas WHERE bucket_id = b.id;
        RETURN;
    END IF;
    SELECT purpose INTO ns_purpose FROM pgvs3.namespaces WHERE name = b.namespace;
    IF ns_purpose <> 'objects' THEN
        -- A cache bucket's size is bounded by eviction (its origin's size_limit_bytes).
        RAISE EXCEPTION 'bucket % is a cache bucket; it takes no quota', bucket USING ERRCODE = '22023';
    END IF;
    UPDATE pgvs3.bucket_quotas SET max_bytes = quota_bytes, max_objects = quota_objects
     WHERE bucket_id = b.id
       AND (max_bytes, max_objects) IS DISTINCT FROM (quota_bytes, quota_objects);
    IF FOUND OR EXISTS (SELECT 1 FROM pgvs3.bucket_quotas WHERE bucket_id = b.id) THEN
        RETURN;
    END IF;
    EXECUTE format('LOCK TABLE %1$I.objects, %1$I.versions IN SHARE ROW EXCLUSIVE MODE', b.namespace);
    EXECUTE format($f$
        CREATE OR REPLACE TRIGGER objects_bucket_usage AFTER INSERT OR UPDATE OR DELETE ON %I.objects
            FOR EACH ROW EXECUTE FUNCTION pgvs3.count_bucket_usage()$f$, b.namespace);
    EXECUTE format($f$
        CREATE OR REPLACE TRIGGER versions_bucket_usage AFTER INSERT OR UPDATE OR DELETE ON %I.versions
            FOR EACH ROW EXECUTE FUNCTION pgvs3.count_bucket_usage()$f$, b.namespace);
    EXECUTE format('SELECT coalesce(sum(size), 0), count(*)
                      FROM (SELECT size FROM %1$I.objects WHERE bucket_id = $1
                            UNION ALL
                            SELECT size FROM %1$I.versions WHERE bucket_id = $1) counted', b.namespace)
        INTO counted_size, counted_rows USING b.id;
    INSERT INTO pgvs3.bucket_quotas (bucket_id, max_bytes, max_objects, used_bytes, used_objects)
    VALUES (b.id, quota_bytes, quota_objects, counted_size, counted_rows)
    ON CONFLICT (bucket_id) DO UPDATE SET max_bytes = EXCLUDED.max_bytes, max_objects = EXCLUDED.max_objects;
END $$;

