-- Layout v1: the catalog, the SQL control API, and the default object namespace `s3p`.
-- Runs once, inside the migration transaction, under the migration advisory lock.

CREATE TABLE pgvs3.catalog_version (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version   bigint NOT NULL
);
INSERT INTO pgvs3.catalog_version VALUES (true, 1);

-- Gateways cache the catalog; every change bumps the version so they know to reload.
-- Standbys cannot LISTEN, so the version row is what they poll.
CREATE FUNCTION pgvs3.bump_catalog_version() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE v bigint;
BEGIN
    UPDATE pgvs3.catalog_version SET version = version + 1 RETURNING version INTO v;
    PERFORM pg_notify('pgvs3_catalog', v::text);
    RETURN NULL;
END $$;

CREATE TABLE pgvs3.namespaces (
    name       text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,30}$'),
    purpose    text NOT NULL CHECK (purpose IN ('objects', 'cache', 'write-back')),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pgvs3.access_keys (
    access_key       text PRIMARY KEY CHECK (access_key ~ '^[A-Za-z0-9_.-]{3,128}$'),
    -- AES-256-GCM under the gateways' master key: 12-byte nonce || ciphertext || tag.
    secret_encrypted bytea NOT NULL,
    is_root          boolean NOT NULL DEFAULT false,
    read_only        boolean NOT NULL DEFAULT false,
    description      text NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX access_keys_one_root ON pgvs3.access_keys (is_root) WHERE is_root;

CREATE TABLE pgvs3.buckets (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text COLLATE "C" NOT NULL UNIQUE,
    namespace  text NOT NULL REFERENCES pgvs3.namespaces (name),
    -- NULL owner: owned by the root key (e.g. created by the operator or an admin).
    owner      text REFERENCES pgvs3.access_keys (access_key) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TRIGGER buckets_catalog_version AFTER INSERT OR UPDATE OR DELETE ON pgvs3.buckets
    FOR EACH STATEMENT EXECUTE FUNCTION pgvs3.bump_catalog_version();
CREATE TRIGGER access_keys_catalog_version AFTER INSERT OR UPDATE OR DELETE ON pgvs3.access_keys
    FOR EACH STATEMENT EXECUTE FUNCTION pgvs3.bump_catalog_version();
CREATE TRIGGER namespaces_catalog_version AFTER INSERT OR UPDATE OR DELETE ON pgvs3.namespaces
    FOR EACH STATEMENT EXECUTE FUNCTION pgvs3.bump_catalog_version();

-- Bodies are immutable: overwriting or deleting an object retires its chunked body, and the
-- maintenance reaper deletes retired bodies after a grace period. A trigger (not the callers)
-- does the retiring so that every path — S3, RESP, drop_bucket, plain SQL — gets it right,
-- including concurrent upserts where only the row version being replaced knows its body.
CREATE FUNCTION pgvs3.retire_body() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NEW.body_id IS DISTINCT FROM OLD.body_id THEN
        EXECUTE format('INSERT INTO %I.retired_bodies (body_id) VALUES ($1)', TG_TABLE_SCHEMA)
            USING OLD.body_id;
    END IF;
    RETURN NULL;
END $$;

-- A namespace is a schema with one objects table and one chunks table.
CREATE FUNCTION pgvs3.ensure_namespace(ns text, ns_purpose text DEFAULT 'objects') RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgvs3.namespaces (name, purpose) VALUES (ns, ns_purpose) ON CONFLICT (name) DO NOTHING;
    EXECUTE format('CREATE SCHEMA IF NOT EXISTS %I', ns);
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS %I.body_ids AS bigint', ns);
    -- `key` sorts in byte order (COLLATE "C") because S3 lists keys in UTF-8 byte order.
    -- `inline` holds bodies up to 64 KiB so a small GET is one index lookup; EXTERNAL storage
    -- skips pglz, which rarely pays on object payloads and costs CPU on every write.
    EXECUTE format($f$
        CREATE TABLE IF NOT EXISTS %I.objects (
            bucket_id     bigint NOT NULL,
            key           text COLLATE "C" NOT NULL,
            size          bigint NOT NULL,
            etag          text NOT NULL,
            last_modified timestamptz NOT NULL DEFAULT now(),
            expires_at    timestamptz,
            meta          jsonb NOT NULL DEFAULT '{}',
            inline        bytea,
            body_id       bigint,
            PRIMARY KEY (bucket_id, key),
            CHECK ((inline IS NULL) <> (body_id IS NULL))
        )$f$, ns);
    EXECUTE format('ALTER TABLE %I.objects ALTER COLUMN inline SET STORAGE EXTERNAL', ns);
    -- 8,120-byte chunks with PLAIN storage: one chunk row fills one heap page exactly
    -- (24 B tuple header + 8 + 4 + 4-byte varlena header + 8,120 = 8,160 = MaxHeapTupleSize),
    -- with no TOAST indirection. A chunk stored shorter than its logical length is zstd.
    EXECUTE format($f$
        CREATE TABLE IF NOT EXISTS %I.chunks (
            body_id bigint NOT NULL,
            seq     int NOT NULL,
            data    bytea NOT NULL,
            PRIMARY KEY (body_id, seq)
        )$f$, ns);
    EXECUTE format('ALTER TABLE %I.chunks ALTER COLUMN data SET STORAGE PLAIN', ns);
    EXECUTE format($f$
        CREATE TABLE IF NOT EXISTS %I.retired_bodies (
            body_id    bigint PRIMARY KEY,
            retired_at timestamptz NOT NULL DEFAULT now()
        )$f$, ns);
    EXECUTE format('CREATE INDEX IF NOT EXISTS retired_bodies_age ON %I.retired_bodies (retired_at)', ns);
    EXECUTE format('DROP TRIGGER IF EXISTS objects_retire_body ON %I.objects', ns);
    EXECUTE format($f$
        CREATE TRIGGER objects_retire_body AFTER UPDATE OR DELETE ON %I.objects
            FOR EACH ROW WHEN (OLD.body_id IS NOT NULL)
            EXECUTE FUNCTION pgvs3.retire_body()$f$, ns);
END $$;

SELECT pgvs3.ensure_namespace('s3p', 'objects');

-- ---------------------------------------------------------------------------------------------
-- The SQL control API: the stable contract between the operator, the CLI and the gateways.
-- ---------------------------------------------------------------------------------------------

-- S3 bucket naming rules (general purpose buckets).
CREATE FUNCTION pgvs3.valid_bucket_name(bucket text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT bucket ~ '^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$'
       AND bucket !~ '\.\.'
       AND bucket !~ '^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$'
       AND bucket !~ '^xn--' AND bucket !~ '^sthree-' AND bucket !~ '^amzn-s3-demo-'
       AND bucket !~ '-s3alias$' AND bucket !~ '--ol-s3$' AND bucket !~ '\.mrap$'
       AND bucket !~ '--x-s3$' AND bucket !~ '--table-s3$'
$$;

-- Creates the bucket if absent; returns its id and whether this call created it.
CREATE FUNCTION pgvs3.ensure_bucket(bucket text, bucket_owner text DEFAULT NULL, ns text DEFAULT 's3p',
                                    OUT bucket_id bigint, OUT created boolean)
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pgvs3.valid_bucket_name(bucket) THEN
        RAISE EXCEPTION 'invalid bucket name: %', bucket USING ERRCODE = '22023';
    END IF;
    PERFORM pgvs3.ensure_namespace(ns) WHERE NOT EXISTS (SELECT 1 FROM pgvs3.namespaces WHERE name = ns);
    INSERT INTO pgvs3.buckets (name, namespace, owner) VALUES (bucket, ns, bucket_owner)
        ON CONFLICT (name) DO NOTHING RETURNING id INTO bucket_id;
    created := bucket_id IS NOT NULL;
    IF NOT created THEN
        SELECT id INTO bucket_id FROM pgvs3.buckets WHERE name = bucket;
    END IF;
END $$;

-- Drops a bucket. Without `force` it refuses a bucket that holds objects (S3 BucketNotEmpty);
-- with it, the objects go too and their bodies are retired for the reaper.
CREATE FUNCTION pgvs3.drop_bucket(bucket text, force boolean DEFAULT false) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE b pgvs3.buckets;
BEGIN
    SELECT * INTO b FROM pgvs3.buckets WHERE name = bucket FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF force THEN
        EXECUTE format('DELETE FROM %I.objects WHERE bucket_id = $1', b.namespace) USING b.id;
    ELSE
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.objects WHERE bucket_id = $1)', b.namespace)
            INTO force USING b.id;
        IF force THEN
            RAISE EXCEPTION 'bucket % is not empty', bucket USING ERRCODE = 'P0001', HINT = 'BucketNotEmpty';
        END IF;
    END IF;
    DELETE FROM pgvs3.buckets WHERE id = b.id;
    RETURN true;
END $$;

CREATE FUNCTION pgvs3.put_access_key(key_id text, secret_encrypted bytea, key_is_root boolean DEFAULT false,
                                     key_read_only boolean DEFAULT false, key_description text DEFAULT '')
RETURNS void LANGUAGE sql AS $$
    INSERT INTO pgvs3.access_keys (access_key, secret_encrypted, is_root, read_only, description)
    VALUES (key_id, secret_encrypted, key_is_root, key_read_only, key_description)
    ON CONFLICT (access_key) DO UPDATE
        SET secret_encrypted = EXCLUDED.secret_encrypted, read_only = EXCLUDED.read_only,
            description = EXCLUDED.description
$$;

CREATE FUNCTION pgvs3.delete_access_key(key_id text) RETURNS boolean LANGUAGE sql AS $$
    WITH gone AS (DELETE FROM pgvs3.access_keys WHERE access_key = key_id AND NOT is_root RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$$;
