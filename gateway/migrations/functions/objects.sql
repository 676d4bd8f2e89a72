-- Object namespaces: the schemas that hold objects and bodies (`s3p`, `s3w`, `s3c`).
-- The current definition of every function of this area. Re-applied (CREATE OR REPLACE) by the
-- migration runner after the numbered migrations, in the same advisory-locked transaction, when
-- this file's digest differs from the one the database recorded (gateway/src/pg/migrate.rs).
-- Edit the function here, never in a numbered migration, and add a numbered migration with the
-- change (it bumps the layout version, which is what keeps an older gateway from re-applying
-- its older copy). A migration that needs a function as it runs keeps its own definition.

-- Bodies are immutable: overwriting or deleting an object retires its chunked body, and the
-- maintenance reaper deletes retired bodies after a grace period. A trigger (not the callers)
-- does the retiring so that every path — S3, RESP, drop_bucket, plain SQL — gets it right,
-- including concurrent upserts where only the row version being replaced knows its body.
--
-- Triggers (created by ensure_namespace, for every namespace):
--   objects_retire_body  AFTER UPDATE OR DELETE ON <ns>.objects, FOR EACH ROW
--                        WHEN (OLD.body_id IS NOT NULL): only chunked bodies are retired.
--   parts_retire_body    AFTER UPDATE OR DELETE ON <ns>.parts, FOR EACH ROW.
-- Preconditions: a body id is never reused (drawn from <ns>.body_ids), and an UPDATE that keeps
-- `body_id` (metadata, tagging, TTL) retires nothing. A part's body is retired on any update
-- that changes `body_id`: completion only fixes `start_offset`, so it retires nothing either.
-- Deleting an upload row does not retire its parts; the caller deletes the parts (which fires
-- parts_retire_body) or keeps them as the completed object's body.
-- An object's body that moved into `versions` (a noncurrent version now owns it) is kept: the
-- version triggers run before this one (triggers fire in name order: objects_keep_version,
-- objects_replace_null, objects_retire_body), and delete-marker statements archive the row in
-- the same statement, whose effects AFTER triggers see.
-- As keep_version, static statements for the ordinary namespace (v13).
CREATE OR REPLACE FUNCTION pgvs3.retire_body() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE kept boolean := false;
BEGIN
    IF (TG_OP = 'DELETE' OR NEW.body_id IS DISTINCT FROM OLD.body_id) AND TG_TABLE_SCHEMA = 's3p' THEN
        IF TG_TABLE_NAME = 'objects' THEN
            kept := EXISTS (SELECT 1 FROM s3p.versions WHERE body_id = OLD.body_id);
        END IF;
        IF NOT kept THEN
            INSERT INTO s3p.retired_bodies (body_id) VALUES (OLD.body_id);
        END IF;
    ELSIF TG_OP = 'DELETE' OR NEW.body_id IS DISTINCT FROM OLD.body_id THEN
        IF TG_TABLE_NAME = 'objects' THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.versions WHERE body_id = $1)', TG_TABLE_SCHEMA)
                INTO kept USING OLD.body_id;
        END IF;
        IF NOT kept THEN
            EXECUTE format('INSERT INTO %I.retired_bodies (body_id) VALUES ($1)', TG_TABLE_SCHEMA)
                USING OLD.body_id;
        END IF;
    END IF;
    RETURN NULL;
END $$;

-- The versions of a namespace's objects (layout v12): an object row's `version_id` (NULL: the
-- null version) and `version_seq` (its place among the key's versions; NULL: written before
-- the bucket ever had versioning), and `versions`, the noncurrent versions and delete markers.
-- Triggers on objects (preconditions beside them):
--   objects_keep_version  AFTER UPDATE, WHEN the version id changes: the replaced row becomes a
--                         noncurrent version (its body moves with it, so retire_body keeps it).
--                         A write keeps the id only when it replaces the null version with the
--                         null version (unversioned or suspended buckets) or changes metadata.
--   objects_replace_null  AFTER INSERT OR UPDATE, WHEN a null version is written into a
--                         versioned bucket (`version_seq` set): a noncurrent null version goes,
--                         and its body is retired (one null version per key, as S3 keeps).
-- Deleting rows of `versions` retires nothing by itself: the statements that delete versions
-- retire their bodies explicitly (store/versions.rs).
-- The ordinary namespace's statement is static, so PL/pgSQL plans it once per session (v13;
-- planning a dynamic INSERT on every versioned overwrite cost a tenth of its rate); any other
-- namespace is named dynamically.
CREATE OR REPLACE FUNCTION pgvs3.keep_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_SCHEMA = 's3p' THEN
        INSERT INTO s3p.versions (bucket_id, key, version_id, version_seq, size, etag, last_modified, meta, inline, body_id)
        VALUES (OLD.bucket_id, OLD.key, coalesce(OLD.version_id, 'null'), OLD.version_seq, OLD.size, OLD.etag,
                OLD.last_modified, OLD.meta, OLD.inline, OLD.body_id);
    ELSE
        EXECUTE format(
            'INSERT INTO %I.versions (bucket_id, key, version_id, version_seq, size, etag, last_modified, meta, inline, body_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)', TG_TABLE_SCHEMA)
            USING OLD.bucket_id, OLD.key, coalesce(OLD.version_id, 'null'), OLD.version_seq, OLD.size, OLD.etag,
                  OLD.last_modified, OLD.meta, OLD.inline, OLD.body_id;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION pgvs3.replace_null_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format(
        'WITH dropped AS (DELETE FROM %1$I.versions WHERE bucket_id = $1 AND key = $2 AND version_id = ''null''
                          RETURNING body_id)
         INSERT INTO %1$I.retired_bodies (body_id) SELECT body_id FROM dropped WHERE body_id IS NOT NULL
         ON CONFLICT DO NOTHING', TG_TABLE_SCHEMA)
        USING NEW.bucket_id, NEW.key;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION pgvs3.ensure_versions(ns text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER TABLE %I.objects ADD COLUMN IF NOT EXISTS version_id text', ns);
    EXECUTE format('ALTER TABLE %I.objects ADD COLUMN IF NOT EXISTS version_seq bigint', ns);
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS %I.version_seqs AS bigint', ns);
    EXECUTE format($f$
        CREATE TABLE IF NOT EXISTS %I.versions (
            bucket_id        bigint NOT NULL,
            key              text COLLATE "C" NOT NULL,
            -- 'null' for the null version.
            version_id       text NOT NULL,
            version_seq      bigint,
            is_delete_marker boolean NOT NULL DEFAULT false,
            size             bigint NOT NULL,
            etag             text NOT NULL,
            last_modified    timestamptz NOT NULL,
            meta             jsonb NOT NULL DEFAULT '{}',
            inline           bytea,
            body_id          bigint,
            PRIMARY KEY (bucket_id, key, version_id)
        )$f$, ns);
    EXECUTE format('ALTER TABLE %I.versions ALTER COLUMN inline SET STORAGE EXTERNAL', ns);
    -- As in objects: a row that fits a page stays whole. A versioned overwrite moves the replaced
    -- row here, and a 4 KiB body no longer goes through TOAST (its chunk rows and their index
    -- entries): +27% versioned-overwrite statements per second in a pgbench of the two statements
    -- (migration 0024), for up to twice the pages of versions of 4-8 KiB.
    EXECUTE format('ALTER TABLE %I.versions SET (toast_tuple_target = 8160)', ns);
    EXECUTE format('CREATE INDEX IF NOT EXISTS versions_order ON %I.versions (bucket_id, key, (coalesce(version_seq, -1)) DESC)', ns);
    EXECUTE format('CREATE INDEX IF NOT EXISTS versions_body ON %I.versions (body_id) WHERE body_id IS NOT NULL', ns);
    EXECUTE format('DROP TRIGGER IF EXISTS objects_keep_version ON %I.objects', ns);
    EXECUTE format($f$
        CREATE TRIGGER objects_keep_version AFTER UPDATE ON %I.objects
            FOR EACH ROW WHEN (OLD.version_id IS DISTINCT FROM NEW.version_id)
            EXECUTE FUNCTION pgvs3.keep_version()$f$, ns);
    EXECUTE format('DROP TRIGGER IF EXISTS objects_replace_null ON %I.objects', ns);
    EXECUTE format($f$
        CREATE TRIGGER objects_replace_null AFTER INSERT OR UPDATE ON %I.objects
            FOR EACH ROW WHEN (NEW.version_id IS NULL AND NEW.version_seq IS NOT NULL)
            EXECUTE FUNCTION pgvs3.replace_null_version()$f$, ns);
END $$;

-- A namespace is a schema with objects, chunks, multipart uploads and their parts.
CREATE OR REPLACE FUNCTION pgvs3.ensure_namespace(ns text, ns_purpose text DEFAULT 'objects') RETURNS void
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
    -- A row that fits a page stays whole, so a small object's body is read with its row rather
    -- than through TOAST; only bodies too big for a page go out of line (uncompressed).
    EXECUTE format('ALTER TABLE %I.objects SET (toast_tuple_target = 8160)', ns);
    -- The reaper finds expired objects (RESP TTLs, cache entries) without scanning every row.
    EXECUTE format('CREATE INDEX IF NOT EXISTS objects_expiry ON %I.objects (expires_at) WHERE expires_at IS NOT NULL', ns);
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
    -- Multipart uploads. `upload_id` is drawn from body_ids because it becomes the completed
    -- object's body: a manifest with no chunks of its own whose parts (rows of `parts` with
    -- owner_id = upload_id) are bodies in their own right. Completion only deletes the upload
    -- row, drops unlisted parts and fixes each listed part's offset: O(parts), no byte copied.
    EXECUTE format($f$
        CREATE TABLE IF NOT EXISTS %I.uploads (
            upload_id bigint PRIMARY KEY,
            bucket_id bigint NOT NULL,
            key       text COLLATE "C" NOT NULL,
            meta      jsonb NOT NULL DEFAULT '{}',
            initiated timestamptz NOT NULL DEFAULT clock_timestamp()
        )$f$, ns);
    EXECUTE format('CREATE INDEX IF NOT EXISTS uploads_by_key ON %I.uploads (bucket_id, key, upload_id)', ns);
    EXECUTE format('CREATE INDEX IF NOT EXISTS uploads_age ON %I.uploads (initiated)', ns);
    -- `start_offset` is NULL while the upload is in progress and the part's place in the
    -- object once completed, so a ranged read finds its parts by offset. `checksum` is the
    -- part's (base64) when its upload keeps one, in the algorithm named in the upload's meta.
    EXECUTE format($f$
        CREATE TABLE IF NOT EXISTS %I.parts (
            owner_id      bigint NOT NULL,
            part_number   int NOT NULL CHECK (part_number BETWEEN 1 AND 10000),
            size          bigint NOT NULL,
            etag          text NOT NULL,
            body_id       bigint NOT NULL,
            start_offset  bigint,
            last_modified timestamptz NOT NULL DEFAULT clock_timestamp(),
            checksum      text,
            PRIMARY KEY (owner_id, part_number)
        )$f$, ns);
    -- A replaced or deleted part retires its body like an object does (same trigger function).
    EXECUTE format('DROP TRIGGER IF EXISTS parts_retire_body ON %I.parts', ns);
    EXECUTE format($f$
        CREATE TRIGGER parts_retire_body AFTER UPDATE OR DELETE ON %I.parts
            FOR EACH ROW EXECUTE FUNCTION pgvs3.retire_body()$f$, ns);
    EXECUTE format('DROP TRIGGER IF EXISTS objects_retire_body ON %I.objects', ns);
    EXECUTE format($f$
        CREATE TRIGGER objects_retire_body AFTER UPDATE OR DELETE ON %I.objects
            FOR EACH ROW WHEN (OLD.body_id IS NOT NULL)
            EXECUTE FUNCTION pgvs3.retire_body()$f$, ns);
    PERFORM pgvs3.ensure_versions(ns);
END $$;

-- Object lock (layout v13): whether a version whose metadata is `meta` may not be deleted for
-- good now. A legal hold (`lh`) always protects; a retention (`rt`: mode `m`, until `u`)
-- protects until its date, a GOVERNANCE one only from requests that do not bypass it. Every
-- statement that removes a version for good (store/versions.rs, the lifecycle pass) checks
-- this in its WHERE clause, so a concurrent PutObjectRetention is seen as the row locks.
CREATE OR REPLACE FUNCTION pgvs3.object_locked(meta jsonb, bypass_governance boolean) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce((meta->>'lh')::boolean, false)
        OR coalesce((meta->'rt'->>'u')::timestamptz > now()
                    AND (meta->'rt'->>'m' = 'COMPLIANCE' OR NOT bypass_governance), false)
$$;

-- Bucket notifications (layout v13): every committed object event of a bucket with rules
-- becomes one OJS job in the transaction that makes it visible, so a write that rolls back
-- enqueues nothing and a job is never missing for one that commits.
--
-- Triggers (created by ensure_event_triggers when a bucket of the namespace first gets rules;
-- never dropped, so a namespace without rules pays nothing):
--   objects_event   AFTER INSERT OR UPDATE OR DELETE ON <ns>.objects, FOR EACH ROW
--   versions_event  AFTER INSERT OR DELETE ON <ns>.versions, FOR EACH ROW
-- Preconditions: an object row inserted or updated with new content is an ObjectCreated event
-- (a metadata-only update — tags, object lock — keeps etag and last_modified and is none); a
-- deleted object row is ObjectRemoved:Delete unless the same version moved to `versions` in the
-- same statement (a delete marker's archive, whose marker row is the event); a delete marker
-- inserted into `versions` is ObjectRemoved:DeleteMarkerCreated; a `versions` row deleted is
-- ObjectRemoved:Delete of that version. A statement that only moves rows (a version promoted
-- after the current one was deleted) sets `pgvs3.events = off` for its transaction; the
-- lifecycle pass sets `pgvs3.event_source = lifecycle` (LifecycleExpiration events), CopyObject
-- `copy` (ObjectCreated:Copy).
CREATE OR REPLACE FUNCTION pgvs3.uuid_v7() RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT encode(overlay(overlay(overlay(uuid_send(gen_random_uuid())
               PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6)
           PLACING set_byte('\x00'::bytea, 0, (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112) FROM 7 FOR 1)
           PLACING set_byte('\x00'::bytea, 0, (get_byte(uuid_send(gen_random_uuid()), 8) & 63) | 128) FROM 9 FOR 1),
        'hex')::uuid::text
$$;

-- A key as S3 event records carry it: URL-encoded, a space as `+`, `/` kept. A key with nothing
-- to encode (most) is returned as it is: splitting it into characters costs ~30 µs per event.
CREATE OR REPLACE FUNCTION pgvs3.event_key(object_key text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN object_key ~ '^[A-Za-z0-9_.~/*-]*$' THEN object_key ELSE (
        SELECT coalesce(string_agg(CASE WHEN c ~ '^[A-Za-z0-9_.~/*-]$' THEN c
                                        WHEN c = ' ' THEN '+'
                                        ELSE regexp_replace(upper(encode(convert_to(c, 'UTF8'), 'hex')), '(..)', '%\1', 'g')
                                   END, '' ORDER BY n), '')
          FROM regexp_split_to_table(object_key, '') WITH ORDINALITY AS t(c, n)) END
$$;

CREATE OR REPLACE FUNCTION pgvs3.emit_object_event(bucket bigint, object_key text, event_name text, object_size bigint,
                                                   object_etag text, object_version text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    b record;
    rule jsonb;
    record jsonb;
    job_type text;
    job_id text;
    queue_name text;
    owner_tenant text;
    job_tenant text;
BEGIN
    IF coalesce(current_setting('pgvs3.events', true), '') = 'off' THEN
        RETURN;
    END IF;
    SELECT name, owner, notifications INTO b FROM pgvs3.buckets WHERE id = bucket;
    IF b.notifications IS NULL THEN
        RETURN;
    END IF;
    -- Jobs belong to the OJS tenant of the bucket's owner (layout v62): the owning access key's
    -- id, `default` for the root key's buckets. A root key's rule may name another tenant
    -- (`arn:pgvs3:ojs::<tenant>:<queue>`); any other owner's jobs go to its own tenant whatever
    -- the rule says (put_bucket_notifications refuses another, and a rule put before the
    -- bucket changed hands, or before v62, is resolved here, at delivery).
    IF b.owner IS NOT NULL THEN
        SELECT access_key INTO owner_tenant FROM pgvs3.access_keys WHERE access_key = b.owner AND NOT is_root;
    END IF;
    IF current_setting('pgvs3.event_source', true) = 'lifecycle' THEN
        event_name := replace(event_name, 'ObjectRemoved:', 'LifecycleExpiration:');
    ELSIF current_setting('pgvs3.event_source', true) = 'copy' THEN
        event_name := regexp_replace(event_name, '^ObjectCreated:.*$', 'ObjectCreated:Copy');
    END IF;
    FOR rule IN SELECT * FROM jsonb_array_elements(b.notifications -> 'rules') LOOP
        CONTINUE WHEN NOT starts_with(object_key, coalesce(rule ->> 'prefix', ''));
        CONTINUE WHEN right(object_key, length(coalesce(rule ->> 'suffix', ''))) <> coalesce(rule ->> 'suffix', '');
        CONTINUE WHEN NOT EXISTS (
            SELECT 1 FROM jsonb_array_elements_text(rule -> 'events') e
             WHERE e = 's3:' || event_name OR (right(e, 2) = ':*' AND starts_with('s3:' || event_name, left(e, -1))));
        job_id := pgvs3.uuid_v7();
        job_type := CASE split_part(event_name, ':', 1)
                        WHEN 'ObjectCreated' THEN 's3.object.created'
                        WHEN 'ObjectRemoved' THEN 's3.object.removed'
                        ELSE 's3.lifecycle.expiration' END;
        -- The S3 event record as AWS shapes it (keys URL-encoded as S3 sends them).
        record := jsonb_build_object(
            'eventVersion', '2.1', 'eventSource', 'pgvs3:s3', 'awsRegion', coalesce(rule ->> 'region', 'us-east-1'),
            'eventTime', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            'eventName', event_name,
            'userIdentity', jsonb_build_object('principalId', coalesce(b.owner, 'root')),
            's3', jsonb_build_object(
                's3SchemaVersion', '1.0', 'configurationId', rule ->> 'id',
                'bucket', jsonb_build_object('name', b.name, 'arn', 'arn:aws:s3:::' || b.name,
                                             'ownerIdentity', jsonb_build_object('principalId', coalesce(b.owner, 'root'))),
                'object', jsonb_strip_nulls(jsonb_build_object(
                    'key', pgvs3.event_key(object_key),
                    'size', object_size, 'eTag', nullif(object_etag, ''), 'versionId', object_version,
                    'sequencer', lpad(upper(to_hex((extract(epoch FROM clock_timestamp()) * 1000000)::bigint)), 16, '0')))));
        -- A webhook target's rule owes a delivery, a channel's rule publishes (both in
        -- functions/events.sql), instead of a job.
        IF rule ? 'webhook' THEN
            PERFORM pgvs3.owe_object_event(rule ->> 'webhook', event_name, record);
            CONTINUE;
        ELSIF rule ? 'channel' THEN
            PERFORM pgvs3.publish_object_event(rule ->> 'channel', record);
            CONTINUE;
        END IF;
        -- The job is not held to the queue's depth bound (ext-backpressure): the write it
        -- records has happened, and refusing the job would lose its event or fail the write.
        -- It counts against its tenant's bound like any waiting job, so a tenant's own uploads
        -- can fill its share of a queue (its producers then get 429), never another tenant's.
        queue_name := rule ->> 'queue';
        job_tenant := coalesce(owner_tenant, rule ->> 'tenant', 'default');
        INSERT INTO ojs.jobs (id, queue, type, state, priority, max_attempts, envelope, run_at, visibility_ms, tenant)
        VALUES (job_id, queue_name, job_type, 'available', 0, 3,
                jsonb_build_object('specversion', '1.0', 'id', job_id, 'type', job_type, 'queue', queue_name,
                                   'args', jsonb_build_array(record),
                                   'meta', jsonb_build_object('source', 's3', 'bucket', b.name, 'event', event_name)
                                           || CASE WHEN job_tenant = 'default' THEN '{}'::jsonb
                                                   ELSE jsonb_build_object('tenant_id', job_tenant) END),
                now(), 1800000, job_tenant);
        INSERT INTO ojs.events (id, type, queue, job_id, data)
        VALUES (gen_random_uuid()::text, 'job.enqueued', queue_name, job_id,
                jsonb_build_object('job_id', job_id, 'job_type', job_type, 'queue', queue_name, 'priority', 0));
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION pgvs3.object_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE moved boolean;
BEGIN
    -- A cache bucket's own bodies (functions/cache.sql): a new body is a client's write; a row
    -- deleted is the cache's bookkeeping (eviction, a fill replacing a clean body, an undone
    -- write), never a client's delete, which raises its event where the request sends it to
    -- the origin (store/cache.rs). Cache buckets keep no versions.
    IF TG_TABLE_SCHEMA = 's3w' THEN
        IF TG_TABLE_NAME = 'objects' AND TG_OP <> 'DELETE'
           AND (TG_OP = 'INSERT' OR OLD.etag IS DISTINCT FROM NEW.etag
                OR OLD.last_modified IS DISTINCT FROM NEW.last_modified) THEN
            PERFORM pgvs3.cache_write_event(NEW.bucket_id, NEW.key,
                CASE WHEN NEW.meta ? 'pc' THEN 'ObjectCreated:CompleteMultipartUpload' ELSE 'ObjectCreated:Put' END,
                NEW.size, NEW.etag);
        END IF;
        RETURN NULL;
    END IF;
    IF TG_TABLE_NAME = 'objects' THEN
        IF TG_OP = 'DELETE' THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.versions WHERE bucket_id = $1 AND key = $2
                                              AND version_id = coalesce($3, ''null'') AND NOT is_delete_marker)',
                           TG_TABLE_SCHEMA)
                INTO moved USING OLD.bucket_id, OLD.key, OLD.version_id;
            IF NOT moved THEN
                PERFORM pgvs3.emit_object_event(OLD.bucket_id, OLD.key, 'ObjectRemoved:Delete', NULL, NULL, OLD.version_id);
            END IF;
        ELSIF TG_OP = 'INSERT' OR OLD.etag IS DISTINCT FROM NEW.etag OR OLD.last_modified IS DISTINCT FROM NEW.last_modified
              OR OLD.version_id IS DISTINCT FROM NEW.version_id THEN
            PERFORM pgvs3.emit_object_event(NEW.bucket_id, NEW.key,
                CASE WHEN NEW.meta ? 'pc' THEN 'ObjectCreated:CompleteMultipartUpload' ELSE 'ObjectCreated:Put' END,
                NEW.size, NEW.etag, NEW.version_id);
        END IF;
    ELSIF TG_OP = 'INSERT' THEN
        IF NEW.is_delete_marker THEN
            PERFORM pgvs3.emit_object_event(NEW.bucket_id, NEW.key, 'ObjectRemoved:DeleteMarkerCreated', NULL, NULL,
                                            NEW.version_id);
        END IF;
    ELSE
        PERFORM pgvs3.emit_object_event(OLD.bucket_id, OLD.key, 'ObjectRemoved:Delete', NULL, NULL, OLD.version_id);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION pgvs3.ensure_event_triggers(ns text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DROP TRIGGER IF EXISTS objects_event ON %I.objects', ns);
    EXECUTE format('CREATE TRIGGER objects_event AFTER INSERT OR UPDATE OR DELETE ON %I.objects
                        FOR EACH ROW EXECUTE FUNCTION pgvs3.object_event()', ns);
    EXECUTE format('DROP TRIGGER IF EXISTS versions_event ON %I.versions', ns);
    EXECUTE format('CREATE TRIGGER versions_event AFTER INSERT OR DELETE ON %I.versions
                        FOR EACH ROW EXECUTE FUNCTION pgvs3.object_event()', ns);
END $$;

-- A bucket's versioning state as committed now, not as the calling statement's snapshot has it:
-- each query of a volatile function takes a fresh snapshot under READ COMMITTED. A write judges
-- versioning with it after it holds the key's locks (or the row's), so a switch that committed
-- while it waited is the state it writes under, as a delete that waited sees it (v59).
CREATE OR REPLACE FUNCTION pgvs3.versioning_now(bucket bigint) RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    state text;
BEGIN
    -- PL/pgSQL rather than SQL: its plan is kept per session, where a SQL function that is not
    -- inlined is planned again on every call (~25 µs more per write, measured with pgbench).
    SELECT versioning INTO state FROM pgvs3.buckets WHERE id = bucket;
    RETURN state;
END
$$;
