-- RESP values compressed with lz4 where the server has it (issue 39). A typed value that makes
-- its row pass about 2 KB (a hash field's value, a list element, a stream entry's fields) is
-- compressed by TOAST before it is stored, with pglz unless the column says otherwise. pglz
-- took 17 % of PostgreSQL's time under 64 pipelines of 16 XADDs of a 4 KiB field; with lz4
-- PostgreSQL's time per XADD fell by 13-26 % (docs/benchmarks.md "Values read by their
-- position"). lz4 compresses and decompresses several times faster than pglz, at a similar
-- ratio on such values, and gives up as quickly on values that do not compress. Values already
-- stored keep their compression (each datum records its own), so this changes metadata only
-- and rewrites nothing. A server built without lz4 keeps pglz.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE pgvs3.resp_hash ALTER COLUMN value SET COMPRESSION lz4;
        ALTER TABLE pgvs3.resp_list ALTER COLUMN value SET COMPRESSION lz4;
        ALTER TABLE pgvs3.resp_stream_entry ALTER COLUMN fields SET COMPRESSION lz4;
    END IF;
END $$;
