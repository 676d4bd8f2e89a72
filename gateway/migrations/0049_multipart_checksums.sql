-- Multipart checksums as S3 keeps them (layout v49): a part of an upload created with
-- `x-amz-checksum-algorithm` is stored with its checksum, from which completion makes the
-- object's (COMPOSITE or FULL_OBJECT) and which ListParts, GetObject with partNumber and
-- GetObjectAttributes answer. The upload's algorithm and type live in its meta (`uc`); new
-- namespaces get the column from functions/objects.sql's ensure_namespace.
DO $$
DECLARE
    ns text;
BEGIN
    FOR ns IN SELECT name FROM pgvs3.namespaces LOOP
        EXECUTE format('ALTER TABLE %I.parts ADD COLUMN IF NOT EXISTS checksum text', ns);
    END LOOP;
END $$;
