-- Layout v20: bucket notifications to RESP pub/sub channels (`arn:pgvs3:pubsub:::<channel>`).
--
-- A rule's destination is stored in `pgvs3.buckets.notifications` as before, now with a
-- `channel` member beside `queue` and `webhook`. Nothing of the tables changes: the function
-- files carry it (functions/objects.sql raises the event, functions/events.sql publishes it,
-- functions/resp_pubsub.sql splits PUBLISH's NOTIFY out as `pgvs3.resp_notify`), and this
-- migration bumps the layout so that a gateway of layout v18 never re-applies its older
-- functions over them.
SELECT 1;
