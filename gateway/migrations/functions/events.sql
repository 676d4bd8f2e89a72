-- Webhook deliveries owed (layout v17): what writes rows into `pgvs3.outbox`, always inside the
-- transaction of the change that causes them, and the registration of bucket notification
-- targets; and (layout v20) object events published to RESP pub/sub channels, which need no
-- outbox. The delivery itself is the gateway's (gateway/src/webhooks.rs).
--
-- Triggers and what must stay true:
--   events_webhooks  AFTER INSERT ON ojs.events, FOR EACH STATEMENT (transition table
--       new_events): created by ojs.ensure_webhook_trigger when the first OJS webhook is
--       registered, never dropped, so a database without webhooks pays nothing per event. Every
--       lifecycle event is an INSERT into ojs.events (the queue's statements and the triggers of
--       functions/ojs.sql), so every event a subscription matches is owed once per subscription.
-- The current definition of every function of this area (see functions/ojs.sql on how function
-- files are applied).

-- A delivery as the OJS webhook routes show it (delivered rows are deleted, so only what is
-- still owed is shown).
CREATE OR REPLACE FUNCTION ojs.delivery_json(o pgvs3.outbox) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'id', o.delivery_id, 'subscription_id', o.webhook_id, 'event_type', o.event_type,
        'status', CASE WHEN o.dead THEN 'dead' WHEN o.attempts > 0 THEN 'retrying' ELSE 'pending' END,
        'attempts', o.attempts, 'next_attempt_at', CASE WHEN NOT o.dead THEN ojs.ts(o.due_at) END,
        'last_error', o.last_error, 'created_at', ojs.ts(o.created_at), 'event', o.body))
$$;

-- Whether an event type is selected by a subscription's patterns: a name, `*`, or a prefix
-- pattern like `job.*`.
CREATE OR REPLACE FUNCTION ojs.event_matches(patterns text[], event_type text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT EXISTS (SELECT 1 FROM unnest(patterns) p
                    WHERE p = event_type OR p = '*'
                       OR (right(p, 2) = '.*' AND starts_with(event_type, left(p, -1))))
$$;

-- The OJS event envelope a webhook receives (CloudEvents-shaped, as the webhooks extension
-- shows it): the event as `GET /ojs/v1/events` shows it (ojs.event_json, functions/ojs.sql).
CREATE OR REPLACE FUNCTION ojs.event_webhooks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgvs3.outbox (delivery_id, webhook_id, event_type, body)
    SELECT 'del_' || pgvs3.uuid_v7(), w.id, e.type,
           ojs.event_json(e.id, e.seq, e.type, e.time, e.queue, e.job_id, e.data)
      FROM new_events e
      JOIN ojs.webhooks w ON w.active AND ojs.event_matches(w.events, e.type)
     WHERE (w.filter -> 'queues' IS NULL OR w.filter -> 'queues' ? e.queue)
       AND (w.filter -> 'job_types' IS NULL OR w.filter -> 'job_types' ? (e.data ->> 'job_type'))
     ORDER BY e.seq;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION ojs.ensure_webhook_trigger() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'events_webhooks'
                                              AND tgrelid = 'ojs.events'::regclass) THEN
        CREATE TRIGGER events_webhooks AFTER INSERT ON ojs.events
            REFERENCING NEW TABLE AS new_events
            FOR EACH STATEMENT EXECUTE FUNCTION ojs.event_webhooks();
    END IF;
END $$;

CREATE OR REPLACE FUNCTION ojs.webhook_json(w ojs.webhooks) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object('id', w.id, 'url', w.url, 'events', to_jsonb(w.events),
                              'filter', w.filter, 'active', w.active, 'metadata', w.metadata,
                              'created_at', ojs.ts(w.created_at))) || jsonb_build_object(
        'pending', (SELECT count(*) FROM pgvs3.outbox o WHERE o.webhook_id = w.id AND NOT o.dead),
        'dead', (SELECT count(*) FROM pgvs3.outbox o WHERE o.webhook_id = w.id AND o.dead))
$$;

-- An object event owed to a bucket notification webhook target: the AWS event message
-- (`{"Records": [record]}`). A target dropped since the rule was put owes nothing (the rule
-- stays, and its events are not delivered): a write never fails for a missing endpoint.
CREATE OR REPLACE FUNCTION pgvs3.owe_object_event(target_name text, event_name text, record jsonb) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO pgvs3.outbox (delivery_id, target, event_type, body)
    SELECT pgvs3.uuid_v7(), t.name, 's3:' || event_name, jsonb_build_object('Records', jsonb_build_array(record))
      FROM pgvs3.webhook_targets t WHERE t.name = target_name
$$;

-- An object event published to a RESP pub/sub channel (`arn:pgvs3:pubsub:::<channel>`): the
-- same AWS event message, as a PUBLISH to that plain channel by the bucket's owner would send
-- it, from the write's own transaction. NOTIFY goes out at the commit, so subscribers on every
-- gateway of the database get it once per committed event, in commit order, and never for a
-- write that rolled back; like any Redis message, a subscriber that is not connected then never
-- gets it. 7,000 is the inline limit PUBLISH passes too (INLINE_LIMIT in resp/pubsub.rs).
-- Channels are per tenant (layout v56, resp/pubsub.rs): a bucket of the root key's publishes in
-- the root namespace (`c`, the name), another key's in that key's (`C`, the key's length in a
-- byte, the key, the name), where that tenant's subscribers listen.
CREATE OR REPLACE FUNCTION pgvs3.publish_object_event(channel text, record jsonb) RETURNS void
LANGUAGE sql AS $$
    SELECT pgvs3.resp_notify(
               CASE WHEN k.access_key IS NULL OR k.is_root THEN '\x63'::bytea
                    ELSE '\x43'::bytea || set_byte('\x00'::bytea, 0, octet_length(k.access_key))
                         || convert_to(k.access_key, 'UTF8') END
               || convert_to(channel, 'UTF8'),
               convert_to(jsonb_build_object('Records', jsonb_build_array(record))::text, 'UTF8'),
               7000)
      FROM (SELECT record -> 's3' -> 'bucket' ->> 'name' AS name) event
      LEFT JOIN pgvs3.buckets b ON b.name = event.name
      LEFT JOIN pgvs3.access_keys k ON k.access_key = b.owner
$$;

-- Registers (or changes) a bucket notification webhook target; buckets name it
-- `arn:pgvs3:webhook:::<name>`. With a secret, deliveries are signed (X-Pgvs3-Signature).
CREATE OR REPLACE FUNCTION pgvs3.put_webhook_target(target_name text, target_url text, target_secret text DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO pgvs3.webhook_targets (name, url, secret) VALUES (target_name, target_url, target_secret)
    ON CONFLICT (name) DO UPDATE SET url = EXCLUDED.url, secret = EXCLUDED.secret
$$;

-- Drops a target and what is still owed to it; true when it existed.
CREATE OR REPLACE FUNCTION pgvs3.drop_webhook_target(target_name text) RETURNS boolean LANGUAGE sql AS $$
    WITH dropped AS (DELETE FROM pgvs3.webhook_targets WHERE name = target_name RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM dropped)
$$;

-- Replaces a bucket's notification rules (`rules`: the JSON array crates/pgvs3-catalog's
-- notifications module writes, [] or NULL: none); the one write path of S3's
-- PutBucketNotificationConfiguration and of the operator's Bucket `notifications`. It checks
-- what only the database knows: the bucket exists (NO_DATA_FOUND), each queue is an
-- OJS queue name, a queue's tenant, when the rule names one, is the owner's (any, for the root
-- key's buckets), and each webhook target is registered (INVALID_PARAMETER_VALUE, hint
-- UnknownDestination; the target is locked until commit so it cannot be dropped in between).
-- With rules, the namespace's event triggers exist when it returns, so the first write after
-- it already raises its event (a cache bucket's, in s3w: its writes raise events there, see
-- functions/cache.sql); they are created only when missing (creating a trigger locks the
-- namespace's tables), and the same rules re-put change no row.
--
-- S3's calls (layout v71) name the access key that asks (`caller`; '' when unsigned) and the
-- owner its request was authorized against (`authorized_owner`, NULL: the root key's bucket):
-- the caller itself when it owns the bucket, the bucket's owner then when a policy granted it.
-- Unless the caller is a root key, a bucket whose owner is no longer that one is refused
-- (INSUFFICIENT_PRIVILEGE, S3's AccessDenied): a key deleted while its request was on the way
-- leaves its buckets to the root key with their queue and channel rules dropped
-- (delete_access_key), and its rules must not land on them after that. The bucket's row is
-- locked before it is read, so that check and the rules written hold until the commit:
-- delete_access_key locks the key's buckets before it drops their rules, so it either waits
-- for this call and drops what it wrote, or this call waits for it and finds the root key the
-- owner. Only a root key, or the control API (`caller` NULL: the operator, the two-argument
-- form), may name another tenant than `default` for a root key's bucket: a key a policy lets
-- configure one may send its events only into the owner's tenant.
CREATE OR REPLACE FUNCTION pgvs3.put_bucket_notifications(bucket text, rules jsonb, caller text,
                                                          authorized_owner text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    b pgvs3.buckets;
    privileged boolean := caller IS NULL
                          OR EXISTS (SELECT 1 FROM pgvs3.access_keys WHERE access_key = caller AND is_root);
    owner_tenant text;
    rule jsonb;
    stored jsonb := CASE WHEN coalesce(jsonb_array_length(rules), 0) = 0 THEN NULL
                         ELSE jsonb_build_object('rules', rules) END;
BEGIN
    SELECT * INTO b FROM pgvs3.buckets WHERE name = bucket FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'bucket % does not exist', bucket USING ERRCODE = 'no_data_found';
    END IF;
    IF NOT privileged AND b.owner IS DISTINCT FROM authorized_owner THEN
        RAISE EXCEPTION 'Access Denied' USING ERRCODE = 'insufficient_privilege',
            DETAIL = format('bucket %s is no longer owned by %s', bucket, coalesce(authorized_owner, 'the root key'));
    END IF;
    -- The one tenant a rule may name (NULL: any): a bucket's jobs are its owner's tenant's
    -- (functions/objects.sql), `default` for the root key's, whose rules a root key may send
    -- to any tenant.
    SELECT access_key INTO owner_tenant FROM pgvs3.access_keys WHERE access_key = b.owner AND NOT is_root;
    IF owner_tenant IS NULL AND NOT privileged THEN
        owner_tenant := 'default';
    END IF;
    FOR rule IN SELECT value FROM jsonb_array_elements(coalesce(rules, '[]')) LOOP
        IF coalesce(rule->>'webhook', '') <> '' THEN
            PERFORM 1 FROM pgvs3.webhook_targets WHERE name = rule->>'webhook' FOR KEY SHARE;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'Unable to validate the following destination configurations: arn:pgvs3:webhook:::% '
                                '(no such webhook target; register it with pgvs3.put_webhook_target)', rule->>'webhook'
                    USING ERRCODE = 'invalid_parameter_value', HINT = 'UnknownDestination';
            END IF;
        ELSIF coalesce(rule->>'channel', '') <> '' THEN
            -- A RESP pub/sub channel needs no registration (as in Redis); its shape is checked
            -- by the rule's builder (pgvs3_catalog::notifications), its length here too, since
            -- it rides in every event's NOTIFY payload.
            IF octet_length(rule->>'channel') > 256 OR rule->>'channel' ~ '[[:cntrl:]]' THEN
                RAISE EXCEPTION 'Unable to validate the following destination configurations: arn:pgvs3:pubsub:::% '
                                '(a channel is 1 to 256 bytes without control characters)', rule->>'channel'
                    USING ERRCODE = 'invalid_parameter_value', HINT = 'UnknownDestination';
            END IF;
        ELSIF NOT coalesce(rule->>'queue', '') ~ '^[a-z0-9][a-z0-9.-]{0,254}$'
              OR NOT coalesce(rule->>'tenant', 'default') ~ '^[!-~]{1,128}$' THEN
            RAISE EXCEPTION 'Unable to validate the following destination configurations: arn:pgvs3:ojs::%:% '
                            '(not an OJS queue name, or not an OJS tenant)', coalesce(rule->>'tenant', ''), rule->>'queue'
                USING ERRCODE = 'invalid_parameter_value', HINT = 'UnknownDestination';
        ELSIF rule ? 'tenant' AND owner_tenant IS NOT NULL AND rule->>'tenant' <> owner_tenant THEN
            RAISE EXCEPTION 'Unable to validate the following destination configurations: arn:pgvs3:ojs::%:% '
                            '(the events of bucket % go to its owner''s OJS tenant, %)',
                            rule->>'tenant', rule->>'queue', bucket, owner_tenant
                USING ERRCODE = 'invalid_parameter_value', HINT = 'UnknownDestination';
        END IF;
    END LOOP;
    IF stored IS NOT NULL AND (
        NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'objects_event'
                     AND tgrelid = format('%I.objects', b.namespace)::regclass)
        OR NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'versions_event'
                        AND tgrelid = format('%I.versions', b.namespace)::regclass)) THEN
        PERFORM pgvs3.ensure_event_triggers(b.namespace);
    END IF;
    UPDATE pgvs3.buckets SET notifications = stored
     WHERE id = b.id AND notifications IS DISTINCT FROM stored;
END $$;

-- The control API's form (the operator's, and S3's before layout v71): no caller to check.
CREATE OR REPLACE FUNCTION pgvs3.put_bucket_notifications(bucket text, rules jsonb) RETURNS void
LANGUAGE sql AS $$
    SELECT pgvs3.put_bucket_notifications(bucket, rules, NULL, NULL)
$$;

-- Dead-lettered deliveries made due again (all, or one target's / webhook's); how many.
CREATE OR REPLACE FUNCTION pgvs3.retry_dead_deliveries(endpoint text DEFAULT NULL) RETURNS bigint
LANGUAGE sql AS $$
    WITH retried AS (
        UPDATE pgvs3.outbox SET dead = false, attempts = 0, due_at = now(), last_error = NULL
         WHERE dead AND (endpoint IS NULL OR target = endpoint OR webhook_id = endpoint)
        RETURNING 1)
    SELECT count(*) FROM retried
$$;
