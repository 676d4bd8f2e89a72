-- Layout v11: the current definition of every function lives in migrations/functions/*.sql,
-- re-applied by the migration runner after the numbered migrations whenever a file changed.
-- This table records which version of each file the database has, so a gateway whose files are
-- unchanged applies nothing at startup. Deleting its rows makes the next `pgvs3 migrate`
-- re-apply every file (e.g. to repair a function edited by hand).
--
-- The layout also gains pgvs3.bucket_owner and pgvs3.origin_secret (functions/catalog.sql,
-- functions/cache.sql): the operator reads the catalog through functions only.
CREATE TABLE pgvs3.function_files (
    name       text PRIMARY KEY,
    -- SHA-256 (hex) of the file's text as the gateway that applied it embedded it.
    digest     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
