-- Range chunks are evicted by last use, like whole entries, instead of by fill time: a Parquet
-- footer read on every query stays cached while chunks nobody reads go first.
ALTER TABLE s3c.ranges ADD COLUMN accessed_at timestamptz NOT NULL DEFAULT now();
UPDATE s3c.ranges SET accessed_at = validated_at;
DROP INDEX s3c.ranges_age;
CREATE INDEX ranges_lru ON s3c.ranges (bucket_id, accessed_at);
