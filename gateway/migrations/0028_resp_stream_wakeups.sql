-- Layout v28: a deleted or renamed stream key wakes the clients blocked on it (XREADGROUP ...
-- BLOCK is then answered Redis's `UNBLOCKED the stream key no longer exists` at once), and
-- functions/resp_*.sql touch a typed key for WATCH only when a command changes it.

-- The first definition; functions/resp_keys.sql holds the current one.
CREATE OR REPLACE FUNCTION pgvs3.resp_stream_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgvs3.resp_wake(OLD.bucket_id, OLD.key);
    RETURN NULL;
END $$;
CREATE TRIGGER resp_keys_stream_gone AFTER DELETE OR UPDATE OF key ON pgvs3.resp_keys
    FOR EACH ROW WHEN (OLD.type = 'x') EXECUTE FUNCTION pgvs3.resp_stream_gone();
