-- Layout v13: bucket access control. A bucket's CORS rules (`cors`, the rules as JSON; NULL:
-- none) and its bucket policy (`policy`, the document as the client sent it; NULL: none). Both
-- are read with the catalog (one snapshot, cached per catalog version by every gateway) and
-- written by Put/DeleteBucketCors and Put/DeleteBucketPolicy, which bump the catalog version
-- through buckets_catalog_version like any bucket change.
ALTER TABLE pgvs3.buckets ADD COLUMN cors jsonb;
ALTER TABLE pgvs3.buckets ADD COLUMN policy text;
