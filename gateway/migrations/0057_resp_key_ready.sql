-- Layout v57: a list, sorted set or stream key made by any means (RENAME, COPY, RESTORE, MOVE,
-- SORT ... STORE, a *STORE command) wakes the clients blocked on its name, as Redis's dbAdd
-- signals a key as ready. Blocked clients no longer try again every --resp-block-poll while
-- the gateway's LISTEN connection works (resp/blocking.rs), so only a notification wakes them.

-- The first definition; functions/resp_keys.sql holds the current one.
CREATE OR REPLACE FUNCTION pgvs3.resp_key_ready() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgvs3.resp_wake(NEW.bucket_id, NEW.key);
    RETURN NULL;
END $$;
CREATE TRIGGER resp_keys_ready AFTER INSERT OR UPDATE OF key ON pgvs3.resp_keys
    FOR EACH ROW WHEN (NEW.type IN ('l', 'z', 'x')) EXECUTE FUNCTION pgvs3.resp_key_ready();
