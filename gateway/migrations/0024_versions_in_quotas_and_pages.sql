-- Bucket quotas count every version (functions/quotas.sql): noncurrent versions and delete
-- markers are stored objects too, as AWS bills them. Namespaces that already keep usage get the
-- trigger on `versions` that set_bucket_quota now creates beside the one on `objects`, and each
-- bucket's usage adds the versions it holds, counted while the namespace's writers are held off.
-- Versions rows that fit a page stay whole, as object rows do (functions/objects.sql,
-- ensure_versions): a versioned overwrite of a small object then writes no TOAST chunks.
DO $$
DECLARE ns text;
BEGIN
    FOR ns IN SELECT DISTINCT n.nspname
                FROM pg_trigger t
                JOIN pg_class c ON c.oid = t.tgrelid
                JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE t.tgname = 'objects_bucket_usage' LOOP
        EXECUTE format('LOCK TABLE %1$I.objects, %1$I.versions IN SHARE ROW EXCLUSIVE MODE', ns);
        EXECUTE format($f$
            CREATE OR REPLACE TRIGGER versions_bucket_usage AFTER INSERT OR UPDATE OR DELETE ON %I.versions
                FOR EACH ROW EXECUTE FUNCTION pgvs3.count_bucket_usage()$f$, ns);
        EXECUTE format($f$
            UPDATE pgvs3.bucket_quotas q
               SET used_bytes = q.used_bytes + v.bytes, used_objects = q.used_objects + v.versions
              FROM (SELECT bucket_id, sum(size) AS bytes, count(*) AS versions FROM %I.versions GROUP BY bucket_id) v
             WHERE q.bucket_id = v.bucket_id$f$, ns);
    END LOOP;
END $$;

DO $$
DECLARE ns text;
BEGIN
    FOR ns IN SELECT name FROM pgvs3.namespaces LOOP
        EXECUTE format('ALTER TABLE %I.versions SET (toast_tuple_target = 8160)', ns);
    END LOOP;
END $$;
