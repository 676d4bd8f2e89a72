-- Layout v26: `pgvs3.access_key_secret` (functions/catalog.sql) lets a writer of access keys (the
-- operator, on every resync of a Bucket or OriginCache) keep the sealed secret already stored
-- while it still opens to the same secret, so an unchanged key writes no row and no gateway
-- reloads its catalog for it. No table changes.
SELECT 1;
