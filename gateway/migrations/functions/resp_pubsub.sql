-- RESP pub/sub (layout v16): PUBLISH sends NOTIFY `pgvs3_pubsub` to every gateway of the
-- database (resp/pubsub.rs). The payload is `i<channel base64> <message base64>` when that fits
-- in `inline_limit` bytes (NOTIFY's payload ends at 8,000), else `r<id>` of a
-- `resp_messages` row holding both, which receivers read by id. Rows older than a minute go
-- with each such publish. Fire and forget, as in Redis: the commit does not wait for the WAL.
CREATE OR REPLACE FUNCTION pgvs3.resp_publish(channel bytea, message bytea, inline_limit int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    payload text;
    id bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    payload := 'i' || translate(encode(channel, 'base64'), E'\n', '') || ' '
                   || translate(encode(message, 'base64'), E'\n', '');
    IF octet_length(payload) > inline_limit THEN
        DELETE FROM pgvs3.resp_messages WHERE created_at < clock_timestamp() - interval '1 minute';
        INSERT INTO pgvs3.resp_messages (channel, message) VALUES (channel, message)
            RETURNING resp_messages.id INTO id;
        payload := 'r' || id;
    END IF;
    PERFORM pg_notify('pgvs3_pubsub', payload);
END $$;
