-- RESP pub/sub (layout v16): PUBLISH sends NOTIFY `pgvs3_pubsub` to every gateway of the
-- database (resp/pubsub.rs). The payload is `i<channel base64> <message base64>` when that fits
-- in `inline_limit` bytes (NOTIFY's payload ends at 8,000), else `r<id>` of a
-- `resp_messages` row holding both, which receivers read by id. Rows older than a minute go
-- with each such publish. The channel carries its kind as its first byte (`c` a plain channel,
-- `s` a shard channel).
--
-- NOTIFY is transactional: the gateways receive the message when (and only if) the calling
-- transaction commits, in commit order. `resp_notify` is that step alone, for callers whose
-- transaction does other work (a bucket notification to a channel, functions/events.sql);
-- `resp_publish` is the PUBLISH command's whole transaction.
CREATE OR REPLACE FUNCTION pgvs3.resp_notify(channel bytea, message bytea, inline_limit int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    payload text;
    id bigint;
BEGIN
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

-- Fire and forget, as in Redis: the commit does not wait for the WAL.
CREATE OR REPLACE FUNCTION pgvs3.resp_publish(channel bytea, message bytea, inline_limit int) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pgvs3.resp_notify(channel, message, inline_limit);
END $$;

-- CLIENT TRACKING (resp/tracking.rs): marks `bucket` as tracked by the calling backend (a
-- gateway's LISTEN connection) or takes the mark away, drops the marks of backends that are
-- gone, and tells every gateway (a message of kind `T`, resp/notify.rs `TRACKERS`) to read
-- the keyspace's state again.
CREATE OR REPLACE FUNCTION pgvs3.resp_track(bucket text, tracked boolean, inline_limit int) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgvs3.resp_tracking t
     WHERE t.bucket = resp_track.bucket
       AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                        WHERE a.pid = t.pid AND a.backend_start = t.backend_start
                          AND a.pid <> pg_backend_pid());
    IF tracked THEN
        INSERT INTO pgvs3.resp_tracking (bucket, pid, backend_start)
        SELECT resp_track.bucket, a.pid, a.backend_start FROM pg_stat_activity a
         WHERE a.pid = pg_backend_pid()
        ON CONFLICT DO NOTHING;
    END IF;
    PERFORM pgvs3.resp_notify('\x54'::bytea || convert_to(bucket, 'UTF8'), ''::bytea, inline_limit);
END $$;

-- Whether a live backend tracks `bucket`: its writes must then send the keys they change.
CREATE OR REPLACE FUNCTION pgvs3.resp_tracked(bucket text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM pgvs3.resp_tracking t
                     JOIN pg_stat_activity a ON a.pid = t.pid AND a.backend_start = t.backend_start
                    WHERE t.bucket = resp_tracked.bucket);
END $$;
