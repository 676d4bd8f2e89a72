-- A cache bucket's origin credentials changed (layout v54): what was cached was fetched with
-- the old ones, which may have reached objects the new ones may not. So a change of access key
-- or secret marks entries stale like a move to another origin does (functions/cache.sql
-- `put_origin` for s3c entries; this trigger for clean write-back bodies in s3w). The sealed
-- secret changes only when the secret does: writers re-seal only when the old seal does not
-- open to the new secret (`origin_secret`).
DROP TRIGGER origins_revalidate_clean_write_backs ON pgvs3.origins;
CREATE TRIGGER origins_revalidate_clean_write_backs
    AFTER UPDATE OF endpoint, origin_bucket, access_key, secret_encrypted ON pgvs3.origins
    FOR EACH ROW WHEN ((OLD.endpoint, OLD.origin_bucket, OLD.access_key, OLD.secret_encrypted)
                       IS DISTINCT FROM (NEW.endpoint, NEW.origin_bucket, NEW.access_key, NEW.secret_encrypted))
    EXECUTE FUNCTION pgvs3.revalidate_clean_write_backs();
