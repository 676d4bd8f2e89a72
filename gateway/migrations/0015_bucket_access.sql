-- Layout v15: bucket access control. A bucket's CORS rules (`cors`, the rules as JSON; NULL:
-- none), its bucket policy (`policy`, the document as the client sent it; NULL: none) and its
-- public access block (`public_access_block`, the four settings as JSON; NULL: none). All are
-- read with the catalog (one snapshot, cached per catalog version by every gateway) and
-- written by the Put/Delete operations of each, which bump the catalog version through
-- buckets_catalog_version like any bucket change.
ALTER TABLE pgvs3.buckets ADD COLUMN cors jsonb;
ALTER TABLE pgvs3.buckets ADD COLUMN policy text;
ALTER TABLE pgvs3.buckets ADD COLUMN public_access_block jsonb;
