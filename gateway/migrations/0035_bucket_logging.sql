-- Layout v35: S3 server access logging (PutBucketLogging). A bucket's `logging` is its
-- LoggingEnabled ({"target": bucket name, "prefix", "grants", "partitioned"}), NULL when logging is
-- off; like every bucket column it moves the catalog version, so each gateway of the fleet
-- learns it with its catalog.
--
-- Each logged request's record (one line of S3's log format) is queued here right after its
-- answer, by the gateway that answered it; any gateway's deliverer claims a source bucket's
-- queued records (FOR UPDATE SKIP LOCKED, so two gateways never take the same record), writes
-- them to the target bucket as one log object, and deletes them in the transaction that held
-- the claim. Records survive a gateway restart; a bucket's records go with it.
ALTER TABLE pgvs3.buckets ADD COLUMN logging jsonb;

CREATE TABLE pgvs3.access_log_records (
    id        bigserial PRIMARY KEY,
    bucket_id bigint NOT NULL REFERENCES pgvs3.buckets (id) ON DELETE CASCADE,
    at        timestamptz NOT NULL,
    line      text NOT NULL
);
CREATE INDEX access_log_records_bucket ON pgvs3.access_log_records (bucket_id, id);
