-- Redis Functions per keyspace (layout v55): a library belongs to one RESP database's bucket,
-- as Redis's belong to one server, so that a tenant (an access key owning some buckets) can
-- neither see, replace, delete nor call another's libraries. Before, one set served every
-- database of the fleet: a tenant's FUNCTION LOAD REPLACE changed what another's FCALL ran, in
-- the other's keyspace.
--
-- The upgrade keeps every existing library callable where it was used: each is copied into
-- every bucket that holds RESP keys or has a keyspace setting (notifications or encodings),
-- the databases clients used; a bucket that never held a key gets none (load them again there).
ALTER TABLE pgvs3.resp_function_libraries DROP CONSTRAINT resp_function_libraries_pkey;
ALTER TABLE pgvs3.resp_function_libraries
    ADD COLUMN bucket_id bigint REFERENCES pgvs3.buckets (id) ON DELETE CASCADE;
INSERT INTO pgvs3.resp_function_libraries (bucket_id, name, code, functions, flags, descriptions, loaded_at)
SELECT b.id, l.name, l.code, l.functions, l.flags, l.descriptions, l.loaded_at
  FROM pgvs3.resp_function_libraries l, pgvs3.buckets b
 WHERE l.bucket_id IS NULL
   AND (EXISTS (SELECT 1 FROM pgvs3.resp_keys k WHERE k.bucket_id = b.id)
        OR EXISTS (SELECT 1 FROM pgvs3.resp_keyspace_events e WHERE e.bucket = b.name)
        OR EXISTS (SELECT 1 FROM pgvs3.resp_encoding_parameters p WHERE p.bucket_id = b.id));
DELETE FROM pgvs3.resp_function_libraries WHERE bucket_id IS NULL;
ALTER TABLE pgvs3.resp_function_libraries ALTER COLUMN bucket_id SET NOT NULL;
ALTER TABLE pgvs3.resp_function_libraries ADD PRIMARY KEY (bucket_id, name);
