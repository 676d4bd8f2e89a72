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

-- CLIENT TRACKING (resp/tracking.rs): marks `bucket` as tracked by backend `listener` (a
-- gateway's LISTEN connection, which delivers its invalidations) or takes the mark away (a mark
-- watches the keyspace's S3 writes, `resp_watch_objects`), drops the marks of backends that are
-- gone, and tells every gateway (a message of kind `T`, resp/notify.rs `TRACKERS`) to read the
-- keyspace's state again. Called on a pooled connection, not on the listener: the watch's DDL
-- waits for the writers of the namespace's objects table, which would keep the listener from
-- answering its liveness probe (layout v69). A listener that is gone is marked with nothing.
CREATE OR REPLACE FUNCTION pgvs3.resp_track(bucket text, tracked boolean, inline_limit int, listener int) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgvs3.resp_tracking t
     WHERE t.bucket = resp_track.bucket
       AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                        WHERE a.pid = t.pid AND a.backend_start = t.backend_start
                          AND a.pid <> listener);
    IF tracked THEN
        INSERT INTO pgvs3.resp_tracking (bucket, pid, backend_start)
        SELECT resp_track.bucket, a.pid, a.backend_start FROM pg_stat_activity a
         WHERE a.pid = listener
        ON CONFLICT DO NOTHING;
        PERFORM pgvs3.resp_watch_objects(bucket);
    END IF;
    PERFORM pgvs3.resp_notify('\x54'::bytea || convert_to(bucket, 'UTF8'), ''::bytea, inline_limit);
END $$;

-- As gateways of layout v66 call it, on their LISTEN connection: until they are replaced.
CREATE OR REPLACE FUNCTION pgvs3.resp_track(bucket text, tracked boolean, inline_limit int) RETURNS void
LANGUAGE sql AS $$
    SELECT pgvs3.resp_track(bucket, tracked, inline_limit, pg_backend_pid());
$$;

-- Whether a live backend tracks `bucket`: its writes must then send the keys they change.
CREATE OR REPLACE FUNCTION pgvs3.resp_tracked(bucket text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM pgvs3.resp_tracking t
                     JOIN pg_stat_activity a ON a.pid = t.pid AND a.backend_start = t.backend_start
                    WHERE t.bucket = resp_tracked.bucket);
END $$;

-- A RESP write batch's events (resp/notify.rs `Recorder`), sent with its commit: `message`
-- empty when it has none to send. Either way the transaction is marked as a RESP batch's
-- (`pgvs3.resp_batch`), so that `resp_object_event` adds no event of its own for its writes:
-- the batch's are Redis's, named by command. Sent before the batch's COMMIT (store/kv/write.rs),
-- so before any deferred trigger runs.
CREATE OR REPLACE FUNCTION pgvs3.resp_batch_notify(channel bytea, message bytea, inline_limit int) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('pgvs3.resp_batch', 'on', true);
    IF octet_length(message) > 0 THEN
        PERFORM pgvs3.resp_notify(channel, message, inline_limit);
    END IF;
END $$;

-- S3 writes seen by RESP (layout v46): a string key's write that no RESP batch made (S3
-- PutObject, CopyObject, CompleteMultipartUpload, DeleteObject(s), the lifecycle pass) is what a
-- RESP SET (`set`, after `new` for a key that did not exist) or DEL (`del`) of the key would
-- be: sent to every gateway with the write's commit as a RESP batch's events are (resp/notify.rs
-- `Recorder::pack`'s format), published to the keyspace's subscribers as its setting says and,
-- in a tracked keyspace, invalidating the key for CLIENT TRACKING clients. One NOTIFY carries
-- both, from the write's own transaction: the write and its event commit together or not at all.
--
-- Trigger (created by resp_watch_objects when one of the namespace's keyspaces first publishes
-- events or is tracked; never dropped, so a namespace whose keyspaces do neither pays nothing):
--   resp_object_event  AFTER INSERT OR UPDATE OR DELETE ON <ns>.objects, FOR EACH ROW, a
--       constraint trigger DEFERRABLE INITIALLY DEFERRED: it runs at COMMIT, after every
--       statement, so a RESP batch's `resp_batch_notify` (sent before its COMMIT) has marked the
--       transaction by then, and the reaper's expiry statement (store/reaper.rs, which sends
--       `expired`) and FLUSHDB (store/kv.rs, which emits no key events, as in Redis) mark theirs.
-- Preconditions, as objects_event's (functions/objects.sql): an update that keeps etag,
-- last_modified and version_id changes metadata only (tags, object lock, a TTL) and is no event;
-- a row past its expiry is a key RESP already takes as absent: deleting it is no event, and
-- writing over it makes the key `new`. The events name no writer (0) and no gateway (token 0):
-- NOLOOP never hides them.
CREATE OR REPLACE FUNCTION pgvs3.resp_object_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    row_bucket bigint;
    object_key text;
    bucket_name text;
    flags text;
    tracked boolean;
    emits boolean;
    events text[];
    classes text[];
    message bytea;
    kinds int;
    published boolean;
BEGIN
    IF coalesce(current_setting('pgvs3.resp_batch', true), '') = 'on' THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        IF OLD.expires_at IS NOT NULL AND OLD.expires_at <= clock_timestamp() THEN
            RETURN NULL;
        END IF;
        row_bucket := OLD.bucket_id;
        object_key := OLD.key;
        events := ARRAY['del'];
        classes := ARRAY['[Ag]'];
    ELSIF TG_OP = 'INSERT' OR (OLD.expires_at IS NOT NULL AND OLD.expires_at <= clock_timestamp()) THEN
        row_bucket := NEW.bucket_id;
        object_key := NEW.key;
        events := ARRAY['new', 'set'];
        classes := ARRAY['n', '[A$]'];
    ELSIF OLD.etag IS DISTINCT FROM NEW.etag OR OLD.last_modified IS DISTINCT FROM NEW.last_modified
          OR OLD.version_id IS DISTINCT FROM NEW.version_id THEN
        row_bucket := NEW.bucket_id;
        object_key := NEW.key;
        events := ARRAY['set'];
        classes := ARRAY['[A$]'];
    ELSE
        RETURN NULL;
    END IF;
    SELECT b.name, s.flags INTO bucket_name, flags
      FROM pgvs3.buckets b LEFT JOIN pgvs3.resp_keyspace_events s ON s.bucket = b.name
     WHERE b.id = row_bucket;
    flags := coalesce(flags, '');
    emits := flags ~ '[KE]' AND flags ~ '[A$gn]';
    tracked := EXISTS (SELECT 1 FROM pgvs3.resp_tracking t WHERE t.bucket = bucket_name)
               AND pgvs3.resp_tracked(bucket_name);
    IF NOT emits AND NOT tracked THEN
        RETURN NULL;
    END IF;
    kinds := CASE WHEN strpos(flags, 'K') > 0 THEN 1 ELSE 0 END + CASE WHEN strpos(flags, 'E') > 0 THEN 2 ELSE 0 END;
    IF tracked THEN
        -- Every event, each with whether it is published and its writer (none).
        message := set_byte('\x00'::bytea, 0, kinds | 128)
                   || int4send(octet_length(convert_to(bucket_name, 'UTF8'))) || convert_to(bucket_name, 'UTF8')
                   || int8send(0);
    ELSE
        message := set_byte('\x00'::bytea, 0, kinds)
                   || int4send(octet_length(convert_to(bucket_name, 'UTF8'))) || convert_to(bucket_name, 'UTF8');
    END IF;
    FOR j IN 1 .. cardinality(events) LOOP
        published := emits AND flags ~ classes[j];
        CONTINUE WHEN NOT tracked AND NOT published;
        IF tracked THEN
            message := message || set_byte('\x00'::bytea, 0, CASE WHEN published THEN 1 ELSE 0 END);
        END IF;
        message := message || int4send(octet_length(events[j])) || convert_to(events[j], 'UTF8')
                   || int4send(octet_length(convert_to(object_key, 'UTF8'))) || convert_to(object_key, 'UTF8');
        IF tracked THEN
            message := message || int8send(0);
        END IF;
    END LOOP;
    -- The kind of a batch's events (resp/notify.rs `EVENTS`); 7,000 is PUBLISH's inline limit.
    PERFORM pgvs3.resp_notify('\x6d'::bytea || convert_to('s3', 'UTF8'), message, 7000);
    RETURN NULL;
END $$;

-- Watches the S3 writes of `bucket`'s namespace for RESP (`resp_object_event`) once the keyspace
-- publishes events or is tracked: called by CONFIG SET notify-keyspace-events (store/kv/catalog.rs)
-- and by `resp_track`. Creating the trigger locks the namespace's objects table, so it is created
-- only when missing.
CREATE OR REPLACE FUNCTION pgvs3.resp_watch_objects(bucket text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    ns text;
BEGIN
    SELECT b.namespace INTO ns FROM pgvs3.buckets b WHERE b.name = bucket;
    IF ns IS NULL
       OR EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'resp_object_event'
                   AND tgrelid = format('%I.objects', ns)::regclass)
       OR NOT (EXISTS (SELECT 1 FROM pgvs3.resp_keyspace_events s
                        WHERE s.bucket = resp_watch_objects.bucket AND s.flags ~ '[KE]' AND s.flags ~ '[A$gn]')
               OR EXISTS (SELECT 1 FROM pgvs3.resp_tracking t WHERE t.bucket = resp_watch_objects.bucket)) THEN
        RETURN;
    END IF;
    -- Two callers may both have found it missing: the second replaces the first's.
    EXECUTE format('DROP TRIGGER IF EXISTS resp_object_event ON %I.objects', ns);
    EXECUTE format('CREATE CONSTRAINT TRIGGER resp_object_event AFTER INSERT OR UPDATE OR DELETE ON %I.objects
                        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION pgvs3.resp_object_event()', ns);
END $$;
