-- WATCH as Redis keeps it (layout v48): EXEC fails when a watched key was written at all since
-- WATCH, not only when it now differs. Comparing what the key held at WATCH with what it holds
-- at EXEC missed a key made and deleted again in between (absent both times), a typed key
-- deleted and made again (its version counter starts over) and a string set to the value it
-- had. A WATCH registers its keys here (functions/resp_keys.sql `resp_watch`); every write of
-- a watched key marks its rows `touched`, from triggers on `pgvs3.resp_keys` (typed keys, below)
-- and on a namespace's objects (strings, made when the namespace's first key is watched); EXEC
-- deletes its rows under its keys' locks and runs only when none was touched. Unlogged: a
-- crash empties it, and an EXEC that finds its rows gone fails, as a touched one does.
CREATE UNLOGGED TABLE pgvs3.resp_watches (
    token bigint NOT NULL,
    bucket_id bigint NOT NULL,
    key text NOT NULL COLLATE "C",
    touched boolean NOT NULL DEFAULT false,
    since timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (token, bucket_id, key)
);
CREATE INDEX resp_watches_key ON pgvs3.resp_watches (bucket_id, key);

-- The trigger's function must exist for it: this stub is replaced in the same transaction by
-- functions/resp_keys.sql's definition (function files are applied after the migrations).
CREATE FUNCTION pgvs3.resp_watched_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END $$;

CREATE TRIGGER resp_watched_write AFTER INSERT OR UPDATE OR DELETE ON pgvs3.resp_keys
    FOR EACH ROW EXECUTE FUNCTION pgvs3.resp_watched_write();
