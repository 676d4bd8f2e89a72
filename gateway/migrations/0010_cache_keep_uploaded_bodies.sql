-- Layout v10: an uploaded write-back body stays where it was written.
--
-- Before, the upload worker copied every uploaded body from s3w into s3c, which wrote each
-- write-back body twice (chunks and WAL) on the same cores that acknowledge the next PUTs. Now
-- the s3w row is marked clean instead: `origin_etag` records the origin's ETag (NULL while the
-- body waits for its upload), and from then on the row is an ordinary cache entry — fresh for
-- the TTL from `validated_at`, evicted by `accessed_at` with the rest. A pending row (NULL
-- `origin_etag`) is never evicted.
ALTER TABLE s3w.objects ADD COLUMN origin_etag text;
ALTER TABLE s3w.objects ADD COLUMN validated_at timestamptz;
ALTER TABLE s3w.objects ADD COLUMN accessed_at timestamptz;
CREATE INDEX objects_clean_lru ON s3w.objects (bucket_id, accessed_at) WHERE origin_etag IS NOT NULL;

-- Every write path of the store sets the body columns (PUT, conditional PUT, copy, multipart
-- completion, tagging); the cache tier's own bookkeeping (marking clean, revalidation, last
-- use) sets only the columns above. So a write queues an upload and makes a clean body pending
-- again, and the bookkeeping does neither.
DROP TRIGGER objects_enqueue_write_back ON s3w.objects;
CREATE TRIGGER objects_enqueue_write_back
    AFTER INSERT OR UPDATE OF size, etag, last_modified, expires_at, meta, inline, body_id ON s3w.objects
    FOR EACH ROW EXECUTE FUNCTION pgvs3.enqueue_write_back();

CREATE FUNCTION pgvs3.mark_write_back_pending() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.origin_etag := NULL;
    NEW.validated_at := NULL;
    NEW.accessed_at := NULL;
    RETURN NEW;
END $$;
CREATE TRIGGER objects_pending_again
    BEFORE UPDATE OF size, etag, last_modified, expires_at, meta, inline, body_id ON s3w.objects
    FOR EACH ROW WHEN (OLD.origin_etag IS NOT NULL) EXECUTE FUNCTION pgvs3.mark_write_back_pending();

-- put_origin marks s3c entries stale when a cache moves to another origin; clean bodies in s3w
-- were vouched for by the old origin too.
CREATE FUNCTION pgvs3.revalidate_clean_write_backs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE s3w.objects SET validated_at = '-infinity' WHERE bucket_id = NEW.bucket_id AND origin_etag IS NOT NULL;
    RETURN NULL;
END $$;
CREATE TRIGGER origins_revalidate_clean_write_backs AFTER UPDATE OF endpoint, origin_bucket ON pgvs3.origins
    FOR EACH ROW WHEN ((OLD.endpoint, OLD.origin_bucket) IS DISTINCT FROM (NEW.endpoint, NEW.origin_bucket))
    EXECUTE FUNCTION pgvs3.revalidate_clean_write_backs();
