-- A deleted key's buckets keep no notification rule into the root tenant (layout v68):
-- delete_access_key (functions/catalog.sql) drops the OJS-queue and RESP-channel rules of the
-- buckets it leaves to the root key; webhook rules stay. Resolved against the owner at each
-- event, those rules sent the buckets' events into `default`'s queues and channels, under names
-- the deleted key chose, where it could never send them itself. Rules of keys deleted before
-- this version are left as they are (the root key reviews them: docs/events.md).
SELECT 1;
