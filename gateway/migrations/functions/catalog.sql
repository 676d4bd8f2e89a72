-- The catalog's SQL control API: buckets and access keys. The contract between gateways, the
-- operator and the CLI; crates/pgvs3-catalog is its typed client.
-- The current definition of every function of this area. Re-applied (CREATE OR REPLACE) by the
-- migration runner after the numbered migrations, in the same advisory-locked transaction, when
-- this file's digest differs from the one the database recorded (gateway/src/pg/migrate.rs).
-- Edit the function here, never in a numbered migration, and add a numbered migration with the
-- change (it bumps the layout version, which is what keeps an older gateway from re-applying
-- its older copy). A migration that needs a function as it runs keeps its own definition.

-- Gateways cache the catalog; every change bumps the version so they know to reload.
-- Standbys cannot LISTEN, so the version row is what they poll.
-- Triggers: buckets_catalog_version, access_keys_catalog_version, namespaces_catalog_version and
-- origins_catalog_version, AFTER INSERT OR UPDATE OR DELETE, FOR EACH ROW (migration 0004): an
-- upsert whose WHERE leaves the row as it was (put_access_key, put_origin re-applied unchanged)
-- touches no row and bumps nothing. So catalog writers must not rewrite rows needlessly
-- (e.g. sealing a secret again, which draws a new nonce), or every gateway reloads.
CREATE OR REPLACE FUNCTION pgvs3.bump_catalog_version() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE v bigint;
BEGIN
    UPDATE pgvs3.catalog_version SET version = version + 1 RETURNING version INTO v;
    PERFORM pg_notify('pgvs3_catalog', v::text);
    RETURN NULL;
END $$;

-- S3 bucket naming rules (general purpose buckets).
CREATE OR REPLACE FUNCTION pgvs3.valid_bucket_name(bucket text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT bucket ~ '^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$'
       AND bucket !~ '\.\.'
       AND bucket !~ '^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$'
       AND bucket !~ '^xn--' AND bucket !~ '^sthree-' AND bucket !~ '^amzn-s3-demo-'
       AND bucket !~ '-s3alias$' AND bucket !~ '--ol-s3$' AND bucket !~ '\.mrap$'
       AND bucket !~ '--x-s3$' AND bucket !~ '--table-s3$'
$$;

-- Creates the bucket if absent; returns its id and whether this call created it.
CREATE OR REPLACE FUNCTION pgvs3.ensure_bucket(bucket text, bucket_owner text DEFAULT NULL, ns text DEFAULT 's3p',
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

-- Whether bucket `bucket` exists as committed now, the calling transaction holding the bucket's
-- write lock shared until it ends (v66). Every statement that creates an object or an upload
-- filters on it: a writer that finds the bucket commits its row before drop_bucket (which takes
-- the lock exclusively) looks for rows, and one that comes after finds it gone and writes
-- nothing. Without it a write that read the bucket row, then waited (for a key's row, say) while
-- the bucket was dropped, committed a row of no bucket and answered success. A fresh snapshot,
-- as versioning_now's: the calling statement's predates its wait for the lock.
-- The write lock is (-1, bucket id), a space of its own: the key locks are (bucket id, key
-- hash), ids being positive, and the keyspace lock, -id, is not taken by a write to a bucket
-- that never had versioning (a versioning switch or a RESP batch need not wait for those).
CREATE OR REPLACE FUNCTION pgvs3.bucket_held(bucket bigint) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(-1, bucket::int4);
    RETURN EXISTS (SELECT 1 FROM pgvs3.buckets WHERE id = bucket);
END
$$;

-- The row of bucket `bucket`, locked for its drop (NULL when there is no such bucket, nothing
-- locked): the bucket's write lock exclusively (pgvs3.bucket_held), then its keyspace lock, which
-- versioned writes (delete markers too) and RESP batches hold shared. It waits for every writer
-- under way, so the caller's checks after it, each a fresh snapshot, see what they wrote, and
-- no writer holds the bucket after it. Both before the row's lock (set_versioning's order:
-- keyspace, then row). A bucket dropped and created again meanwhile has another id: again.
-- drop_bucket's and drop_origin's (a cache's fills and write-backs hold their bucket as S3
-- writes do, layout v67).
CREATE OR REPLACE FUNCTION pgvs3.bucket_to_drop(bucket text) RETURNS pgvs3.buckets LANGUAGE plpgsql AS $$
DECLARE
    b pgvs3.buckets;
    locked bigint;
BEGIN
    LOOP
        SELECT id INTO locked FROM pgvs3.buckets WHERE name = bucket;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        PERFORM pg_advisory_xact_lock(-1, locked::int4);
        PERFORM pg_advisory_xact_lock(-locked);
        SELECT * INTO b FROM pgvs3.buckets WHERE name = bucket FOR UPDATE;
        IF b.id = locked THEN
            RETURN b;
        END IF;
    END LOOP;
END $$;

-- Drops a bucket. Without `force` it refuses a bucket that holds objects (S3 BucketNotEmpty);
-- with it, the objects go too and their bodies are retired for the reaper. Multipart uploads in
-- progress go either way, as they do with a general purpose bucket in AWS S3 (only a directory
-- bucket refuses to go while uploads are in progress).
CREATE OR REPLACE FUNCTION pgvs3.drop_bucket(bucket text, force boolean DEFAULT false) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    b pgvs3.buckets;
    uploads bigint[];
BEGIN
    b := pgvs3.bucket_to_drop(bucket);
    IF b.id IS NULL THEN
        RETURN false;
    END IF;
    IF force AND b.object_lock IS NOT NULL THEN
        -- Not even a forced drop removes a version object lock protects (layout v13).
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %1$I.objects WHERE bucket_id = $1 AND pgvs3.object_locked(meta, false))
                            OR EXISTS (SELECT 1 FROM %1$I.versions WHERE bucket_id = $1 AND pgvs3.object_locked(meta, false))',
                       b.namespace)
            INTO force USING b.id;
        IF force THEN
            RAISE EXCEPTION 'bucket % holds versions under object lock', bucket
                USING ERRCODE = 'P0001', HINT = 'ObjectLocked';
        END IF;
        force := true;
    END IF;
    IF force THEN
        EXECUTE format('DELETE FROM %I.objects WHERE bucket_id = $1', b.namespace) USING b.id;
        -- Noncurrent versions own their bodies: retired here (deleting versions retires nothing).
        EXECUTE format(
            'WITH dropped AS (DELETE FROM %1$I.versions WHERE bucket_id = $1 RETURNING body_id)
             INSERT INTO %1$I.retired_bodies (body_id) SELECT body_id FROM dropped WHERE body_id IS NOT NULL
             ON CONFLICT DO NOTHING', b.namespace) USING b.id;
    ELSE
        -- A bucket with noncurrent versions or delete markers is not empty, as in S3.
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %1$I.objects WHERE bucket_id = $1)
                            OR EXISTS (SELECT 1 FROM %1$I.versions WHERE bucket_id = $1)', b.namespace)
            INTO force USING b.id;
        IF force THEN
            RAISE EXCEPTION 'bucket % is not empty', bucket USING ERRCODE = 'P0001', HINT = 'BucketNotEmpty';
        END IF;
    END IF;
    -- Two statements: deleting an upload waits for its parts still committing (they hold it
    -- FOR SHARE), which the parts' delete, a later snapshot, then sees (parts_retire_body
    -- retires their bodies).
    EXECUTE format('WITH gone AS (DELETE FROM %I.uploads WHERE bucket_id = $1 RETURNING upload_id)
                    SELECT array_agg(upload_id) FROM gone', b.namespace)
        INTO uploads USING b.id;
    EXECUTE format('DELETE FROM %I.parts WHERE owner_id = ANY($1)', b.namespace) USING uploads;
    DELETE FROM pgvs3.buckets WHERE id = b.id;
    RETURN true;
END $$;

-- Gives an unowned ordinary bucket (owned by the root key: created by an admin, or left behind
-- when its key was revoked) to `new_owner`. True when the bucket now belongs to `new_owner`
-- (adopted, or theirs already); false when there is no such ordinary bucket or another key owns
-- it. Of concurrent adopters only one wins: the others find the owner set when the row unlocks.
CREATE OR REPLACE FUNCTION pgvs3.adopt_bucket(bucket text, new_owner text) RETURNS boolean
LANGUAGE sql AS $$
    WITH ordinary AS (
        SELECT b.id, b.owner FROM pgvs3.buckets b JOIN pgvs3.namespaces n ON n.name = b.namespace
         WHERE b.name = bucket AND n.purpose = 'objects'),
    adopted AS (
        UPDATE pgvs3.buckets SET owner = new_owner
         WHERE id = (SELECT id FROM ordinary) AND owner IS NULL
        RETURNING id)
    SELECT EXISTS (SELECT 1 FROM adopted) OR EXISTS (SELECT 1 FROM ordinary WHERE owner = new_owner)
$$;

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

-- The sealed secret of access key `key_id` (NULL when there is no such key): a writer re-seals
-- the secret only when this no longer opens to it, as for origin_secret. (Layout v26.)
CREATE OR REPLACE FUNCTION pgvs3.access_key_secret(key_id text) RETURNS bytea
LANGUAGE sql STABLE AS $$
    SELECT secret_encrypted FROM pgvs3.access_keys WHERE access_key = key_id
$$;

-- Attaches a key's own policy (an IAM identity policy, checked by its caller: the gateway parses
-- it before calling, the operator only writes documents it generated) or detaches it (NULL).
-- Never the root key's. Re-attaching the same document changes no row. False when there is no
-- such non-root key. (Layout v21: the operator's Bucket `accessPrefixes` writes through it.)
CREATE OR REPLACE FUNCTION pgvs3.set_key_policy(key_id text, key_policy text) RETURNS boolean
LANGUAGE sql AS $$
    WITH changed AS (
        UPDATE pgvs3.access_keys SET policy = key_policy
         WHERE access_key = key_id AND NOT is_root AND policy IS DISTINCT FROM key_policy)
    SELECT EXISTS (SELECT 1 FROM pgvs3.access_keys WHERE access_key = key_id AND NOT is_root)
$$;

-- Deletes a non-root key; its buckets are left to the root key (buckets_owner_fkey sets their
-- owner NULL). Their notification rules that deliver into the owner's tenant, OJS queues and
-- RESP channels, go with the key (layout v68): resolved at each event against the owner, they
-- would from then on send the bucket's events into the root tenant's queues and channels
-- (`default`'s), under names the key chose, where it could never send them itself. Webhook
-- rules (targets the administrator registered, no tenant's) stay. Whoever adopts the bucket,
-- or the root key, configures it anew (docs/events.md). The key's buckets are locked first, in
-- id order (layout v71): a PutBucketNotificationConfiguration of the key that holds a bucket's
-- row is waited for, and the rules it committed are among those dropped, not put past the
-- UPDATE's snapshot onto a bucket then the root key's; one that comes after finds the root key
-- the owner and is refused (put_bucket_notifications, functions/events.sql). Before that the
-- key's own row (layout v73): a bucket the key is creating holds it (the foreign key's share
-- lock) until it commits, and is then among the key's buckets found here; looked for first, it
-- was found by no statement but the DELETE, which left it to the root key with its rules.
CREATE OR REPLACE FUNCTION pgvs3.delete_access_key(key_id text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM pgvs3.access_keys WHERE access_key = key_id AND NOT is_root FOR UPDATE;
    PERFORM 1 FROM pgvs3.buckets WHERE owner = key_id ORDER BY id FOR NO KEY UPDATE;
    UPDATE pgvs3.buckets b
       SET notifications = (SELECT jsonb_build_object('rules', jsonb_agg(r.rule ORDER BY r.n))
                              FROM jsonb_array_elements(b.notifications -> 'rules') WITH ORDINALITY AS r(rule, n)
                             WHERE coalesce(r.rule ->> 'webhook', '') <> ''
                            HAVING count(*) > 0)
     WHERE b.owner = key_id AND b.notifications IS NOT NULL
       AND EXISTS (SELECT 1 FROM pgvs3.access_keys WHERE access_key = key_id AND NOT is_root);
    DELETE FROM pgvs3.access_keys WHERE access_key = key_id AND NOT is_root;
    RETURN FOUND;
END $$;

-- The bucket's owner: no row when there is no such bucket, one NULL when the root key owns it.
-- (Layout v11: so the operator reads the catalog through functions, never its tables.)
CREATE OR REPLACE FUNCTION pgvs3.bucket_owner(bucket text) RETURNS TABLE (owner_key text)
LANGUAGE sql STABLE AS $$
    SELECT b.owner FROM pgvs3.buckets b WHERE b.name = bucket
$$;
