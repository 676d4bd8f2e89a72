-- Layout v4: the origin cache tier. A cache bucket maps onto a bucket of a remote S3 origin.
--
-- A cache bucket's catalog namespace is `s3w`, the write-back namespace: every write path of the
-- store (PUT, multipart completion, copy) lands there, and a trigger queues the key in the outbox
-- in the same transaction, so an acknowledged body can never miss its upload. Read-through fills
-- and uploaded bodies live in `s3c`, whose rows carry when the origin last vouched for them.
-- A read looks in `s3w` first (a pending body is newer than anything at the origin), then `s3c`.

SELECT pgvs3.ensure_namespace('s3w', 'write-back');
SELECT pgvs3.ensure_namespace('s3c', 'cache');

-- When the origin last confirmed the entry (fill or revalidation): fresh until + ttl.
ALTER TABLE s3c.objects ADD COLUMN validated_at timestamptz NOT NULL DEFAULT now();
-- Approximate last use, for least-recently-used eviction; refreshed in batches, not per read.
ALTER TABLE s3c.objects ADD COLUMN accessed_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX objects_lru ON s3c.objects (bucket_id, accessed_at);

-- Aligned chunks of objects not cached whole, filled by range reads (Parquet footers and
-- column chunks), so a small range never fetches a whole large object. Every chunk carries the
-- object's head; the chunks of one key all have one ETag (a fill with a new one drops the rest).
CREATE TABLE s3c.ranges (
    bucket_id     bigint NOT NULL,
    key           text COLLATE "C" NOT NULL,
    chunk         integer NOT NULL,
    chunk_size    integer NOT NULL,
    size          bigint NOT NULL,
    etag          text NOT NULL,
    last_modified timestamptz NOT NULL,
    meta          jsonb NOT NULL,
    data          bytea NOT NULL,
    validated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bucket_id, key, chunk)
);
ALTER TABLE s3c.ranges ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE INDEX ranges_age ON s3c.ranges (bucket_id, validated_at);

CREATE TABLE pgvs3.origins (
    bucket_id            bigint PRIMARY KEY REFERENCES pgvs3.buckets (id) ON DELETE CASCADE,
    endpoint             text NOT NULL CHECK (endpoint ~ '^https?://'),
    region               text NOT NULL,
    origin_bucket        text NOT NULL CHECK (origin_bucket <> ''),
    access_key           text NOT NULL,
    -- AES-256-GCM under the gateways' master key, as for access keys.
    secret_encrypted     bytea NOT NULL,
    path_style           boolean NOT NULL,
    mode                 text NOT NULL CHECK (mode IN ('read-through', 'write-through', 'write-back')),
    ttl_seconds          integer NOT NULL CHECK (ttl_seconds >= 0),
    -- 0: a 404 from the origin is not remembered.
    negative_ttl_seconds integer NOT NULL CHECK (negative_ttl_seconds >= 0),
    fill_concurrency     integer NOT NULL CHECK (fill_concurrency BETWEEN 1 AND 1024),
    -- NULL: no limit on the bytes of cached (already uploaded) bodies.
    size_limit_bytes     bigint CHECK (size_limit_bytes > 0),
    -- In write-back mode, bodies of at least this size are acknowledged before the upload.
    write_back_threshold bigint NOT NULL CHECK (write_back_threshold > 0),
    -- A range read of an object not cached whole fills the aligned chunks of this size it touches.
    range_chunk_bytes    integer NOT NULL CHECK (range_chunk_bytes BETWEEN 65536 AND 67108864),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
-- Row-level, unlike layout v1's statement-level triggers (replaced below): a reconciling
-- operator re-applies unchanged settings all the time, and an upsert that changes no row must
-- not make every gateway reload its catalog.
CREATE TRIGGER origins_catalog_version AFTER INSERT OR UPDATE OR DELETE ON pgvs3.origins
    FOR EACH ROW EXECUTE FUNCTION pgvs3.bump_catalog_version();
DROP TRIGGER buckets_catalog_version ON pgvs3.buckets;
CREATE TRIGGER buckets_catalog_version AFTER INSERT OR UPDATE OR DELETE ON pgvs3.buckets
    FOR EACH ROW EXECUTE FUNCTION pgvs3.bump_catalog_version();
DROP TRIGGER access_keys_catalog_version ON pgvs3.access_keys;
CREATE TRIGGER access_keys_catalog_version AFTER INSERT OR UPDATE OR DELETE ON pgvs3.access_keys
    FOR EACH ROW EXECUTE FUNCTION pgvs3.bump_catalog_version();
DROP TRIGGER namespaces_catalog_version ON pgvs3.namespaces;
CREATE TRIGGER namespaces_catalog_version AFTER INSERT OR UPDATE OR DELETE ON pgvs3.namespaces
    FOR EACH ROW EXECUTE FUNCTION pgvs3.bump_catalog_version();

-- Re-putting a key with the same settings (and the same sealed secret) changes nothing.
CREATE OR REPLACE FUNCTION pgvs3.put_access_key(key_id text, secret_encrypted bytea, key_is_root boolean DEFAULT false,
                                                key_read_only boolean DEFAULT false, key_description text DEFAULT '')
RETURNS void LANGUAGE sql AS $$
    INSERT INTO pgvs3.access_keys AS k (access_key, secret_encrypted, is_root, read_only, description)
    VALUES (key_id, secret_encrypted, key_is_root, key_read_only, key_description)
    ON CONFLICT (access_key) DO UPDATE
        SET secret_encrypted = EXCLUDED.secret_encrypted, read_only = EXCLUDED.read_only,
            description = EXCLUDED.description
        WHERE (k.secret_encrypted, k.read_only, k.description)
              IS DISTINCT FROM (EXCLUDED.secret_encrypted, EXCLUDED.read_only, EXCLUDED.description)
$$;

-- One row per key whose newest body waits in s3w for its upload. `generation` changes with every
-- new body, so an uploader can tell that the body it sent has been superseded meanwhile.
CREATE SEQUENCE pgvs3.outbox_generations AS bigint;
CREATE TABLE pgvs3.origin_outbox (
    bucket_id       bigint NOT NULL,
    key             text COLLATE "C" NOT NULL,
    generation      bigint NOT NULL DEFAULT nextval('pgvs3.outbox_generations'),
    enqueued_at     timestamptz NOT NULL DEFAULT now(),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    PRIMARY KEY (bucket_id, key)
);
CREATE INDEX origin_outbox_due ON pgvs3.origin_outbox (next_attempt_at);

CREATE FUNCTION pgvs3.enqueue_write_back() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgvs3.origin_outbox (bucket_id, key) VALUES (NEW.bucket_id, NEW.key)
    ON CONFLICT (bucket_id, key) DO UPDATE
        SET generation = nextval('pgvs3.outbox_generations'), enqueued_at = now(), attempts = 0,
            next_attempt_at = now(), last_error = NULL;
    RETURN NULL;
END $$;
CREATE TRIGGER objects_enqueue_write_back AFTER INSERT OR UPDATE ON s3w.objects
    FOR EACH ROW EXECUTE FUNCTION pgvs3.enqueue_write_back();

-- Dropping a cache (or its bucket) drops its pending bodies and their outbox rows.
CREATE FUNCTION pgvs3.forget_origin() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgvs3.origin_outbox WHERE bucket_id = OLD.bucket_id;
    DELETE FROM s3w.objects WHERE bucket_id = OLD.bucket_id;
    DELETE FROM s3c.objects WHERE bucket_id = OLD.bucket_id;
    DELETE FROM s3c.ranges WHERE bucket_id = OLD.bucket_id;
    RETURN NULL;
END $$;
CREATE TRIGGER origins_forget AFTER DELETE ON pgvs3.origins
    FOR EACH ROW EXECUTE FUNCTION pgvs3.forget_origin();

-- Creates or updates the cache bucket `bucket` in front of `origin_bucket` at `endpoint`.
-- The bucket is created (owned by the root key) when absent; an existing ordinary bucket is
-- refused, since its objects would be hidden behind the origin's.
CREATE FUNCTION pgvs3.put_origin(
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
    -- Entries cached from another origin must be fetched again.
    IF previous.endpoint IS DISTINCT FROM endpoint OR previous.origin_bucket IS DISTINCT FROM origin_bucket THEN
        UPDATE s3c.objects SET validated_at = '-infinity' WHERE bucket_id = cache_id;
        DELETE FROM s3c.ranges WHERE bucket_id = cache_id;
    END IF;
    RETURN cache_id;
END $$;

-- Drops a cache bucket and everything cached in it. Without `force` it refuses while bodies
-- still wait for their upload (they exist nowhere else).
CREATE FUNCTION pgvs3.drop_origin(bucket text, force boolean DEFAULT false) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE cache_id bigint;
BEGIN
    SELECT o.bucket_id INTO cache_id FROM pgvs3.origins o JOIN pgvs3.buckets b ON b.id = o.bucket_id
     WHERE b.name = bucket FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT force AND EXISTS (SELECT 1 FROM pgvs3.origin_outbox WHERE bucket_id = cache_id) THEN
        RAISE EXCEPTION 'cache bucket % has write-backs not yet at the origin', bucket
            USING ERRCODE = 'P0001', HINT = 'PendingWriteBack';
    END IF;
    DELETE FROM pgvs3.buckets WHERE buckets.id = cache_id;
    RETURN true;
END $$;
