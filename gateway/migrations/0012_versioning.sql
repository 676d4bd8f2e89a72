-- Layout v12: S3 versioning. A bucket's `versioning` (NULL: never enabled; Enabled; Suspended),
-- and in every namespace the version columns of objects, the `versions` table of noncurrent
-- versions and delete markers, and the triggers that keep replaced versions
-- (functions/objects.sql holds the current definitions; these are the ones this migration runs).
-- retire_body (functions/objects.sql) now keeps a body that moved into `versions`, and
-- drop_bucket (functions/catalog.sql) counts and drops versions too.
ALTER TABLE pgvs3.buckets ADD COLUMN versioning text CHECK (versioning IN ('Enabled', 'Suspended'));

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
CREATE OR REPLACE FUNCTION pgvs3.keep_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format(
        'INSERT INTO %I.versions (bucket_id, key, version_id, version_seq, size, etag, last_modified, meta, inline, body_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)', TG_TABLE_SCHEMA)
        USING OLD.bucket_id, OLD.key, coalesce(OLD.version_id, 'null'), OLD.version_seq, OLD.size, OLD.etag,
              OLD.last_modified, OLD.meta, OLD.inline, OLD.body_id;
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

SELECT pgvs3.ensure_versions(name) FROM pgvs3.namespaces;
