-- Layout v18: which buckets hold typed RESP keys, and pub/sub messages too large for NOTIFY.
--
-- `resp_typed` lists every bucket that has (or had) a hash, set, sorted set or list key: a row
-- goes in, in the same transaction, when a bucket's first typed key is created (trigger below),
-- and stays. A keyspace without one answers string commands from its objects alone
-- (store/kv.rs): its string statements check this table (an empty index probe) instead of
-- probing and deleting `resp_keys` per key.
CREATE TABLE pgvs3.resp_typed (
    bucket_id bigint PRIMARY KEY REFERENCES pgvs3.buckets (id) ON DELETE CASCADE
);
INSERT INTO pgvs3.resp_typed SELECT DISTINCT bucket_id FROM pgvs3.resp_keys;

-- The first definition; functions/resp_keys.sql holds the current one.
CREATE OR REPLACE FUNCTION pgvs3.resp_mark_typed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgvs3.resp_typed VALUES (NEW.bucket_id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER resp_keys_mark_typed AFTER INSERT ON pgvs3.resp_keys
    FOR EACH ROW EXECUTE FUNCTION pgvs3.resp_mark_typed();

-- PUBLISH of a message too large for a NOTIFY payload (8,000 bytes): the row, whose id the
-- NOTIFY carries (functions/resp_pubsub.sql). Unlogged: pub/sub is fire and forget, and a
-- standby (which NOTIFY does not reach) never reads them. Publishes delete rows older than a minute.
CREATE UNLOGGED TABLE pgvs3.resp_messages (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    channel    bytea NOT NULL,
    message    bytea NOT NULL
);
CREATE INDEX resp_messages_age ON pgvs3.resp_messages (created_at);
