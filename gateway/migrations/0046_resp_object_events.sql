-- S3 writes seen by RESP (layout v46): a write to a namespace's objects that no RESP batch
-- made (S3 PutObject, CopyObject, CompleteMultipartUpload, DeleteObject(s), the lifecycle pass)
-- sends the keyspace notification and CLIENT TRACKING invalidation a RESP SET or DEL of the key
-- would, from its own transaction (functions/resp_pubsub.sql `resp_object_event`, created on a
-- namespace by `resp_watch_objects` once one of its keyspaces publishes events or is tracked).
--
-- The keyspaces that publish events already are watched here. The trigger's function needs to
-- exist for that: this stub, replaced in the same transaction by functions/resp_pubsub.sql's
-- definition (function files are applied after the numbered migrations).
CREATE FUNCTION pgvs3.resp_object_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END $$;

DO $$
DECLARE
    ns text;
BEGIN
    FOR ns IN SELECT DISTINCT b.namespace FROM pgvs3.resp_keyspace_events s
                JOIN pgvs3.buckets b ON b.name = s.bucket
               WHERE s.flags ~ '[KE]' AND s.flags ~ '[A$gn]' LOOP
        EXECUTE format('CREATE CONSTRAINT TRIGGER resp_object_event AFTER INSERT OR UPDATE OR DELETE ON %I.objects
                            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION pgvs3.resp_object_event()', ns);
    END LOOP;
END $$;
