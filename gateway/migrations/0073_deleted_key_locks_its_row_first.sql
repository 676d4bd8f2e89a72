-- A key's deletion takes the key's own row before it looks for the key's buckets (layout v73;
-- functions/catalog.sql, delete_access_key). A bucket the key was creating meanwhile holds the
-- row (its foreign key's share lock) until it commits: the deletion waited for it only at its
-- DELETE, after it had looked for the key's buckets and dropped their queue and channel rules,
-- so a bucket created and configured in that moment went to the root key with rules into the
-- root tenant. Now the deletion waits first, and finds that bucket among the key's.
SELECT 1;
