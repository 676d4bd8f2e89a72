-- Layout v19: ACLs and object ownership. A bucket's ownership controls (`object_ownership`:
-- BucketOwnerEnforced, BucketOwnerPreferred or ObjectWriter; NULL once they were deleted, when
-- the bucket behaves as ObjectWriter, as S3's) and its ACL (`acl`, the owner and grants as JSON;
-- NULL: private, the owner's full control). Buckets made before this layout behaved as
-- BucketOwnerEnforced and keep it; new buckets get it too, as S3's since April 2023. Both are
-- read with the catalog (cached per catalog version by every gateway) and written by the
-- Put/Delete operations, which bump the catalog version through buckets_catalog_version.
-- An object's ACL is kept in its metadata (`meta->'ac'`), with the object or version row, so
-- that reading the object reads its ACL in the same statement.
ALTER TABLE pgvs3.buckets ADD COLUMN object_ownership text DEFAULT 'BucketOwnerEnforced'
    CONSTRAINT buckets_object_ownership_known
    CHECK (object_ownership IN ('BucketOwnerEnforced', 'BucketOwnerPreferred', 'ObjectWriter'));
ALTER TABLE pgvs3.buckets ADD COLUMN acl jsonb;
