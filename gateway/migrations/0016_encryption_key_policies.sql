-- Layout v16: a bucket's default encryption (PutBucketEncryption). `encryption` is the
-- algorithm new objects are encrypted with unless their request asks for another ('AES256':
-- SSE-S3, a data key per object sealed with the master key); NULL: none. Read with the catalog
-- like the other bucket settings. How an object's body is encrypted lives in its metadata
-- (`meta->'se'`), beside the rest of what a version keeps.
ALTER TABLE pgvs3.buckets ADD COLUMN encryption text CHECK (encryption = 'AES256');

-- A key's own policy (`pgvs3 admin key policy`): an IAM identity policy (no Principal; resources
-- in any bucket) that limits what the key may do, its own buckets included. NULL: none (the key
-- may do anything with the buckets it owns, and what bucket policies grant it).
ALTER TABLE pgvs3.access_keys ADD COLUMN policy text;
