-- Redis 7.0's small encodings (layout v51): OBJECT ENCODING answers `listpack` (hash, sorted
-- set) or `intset` (set) while a key is within the keyspace's encoding parameters, and the large
-- encoding (`hashtable`, `skiplist`) from the write that passed them on, as Redis converts a key
-- once and never back. `large` is that mark, set by the write in its own statement
-- (functions/resp_keys.sql `resp_grown`); NULL for keys made before this layout, which OBJECT
-- ENCODING judges by what they hold (`resp_fits`).
ALTER TABLE pgvs3.resp_keys ADD COLUMN large boolean;
ALTER TABLE pgvs3.resp_keys ALTER COLUMN large SET DEFAULT false;

-- The encoding parameters CONFIG SET changes, per keyspace like `notify-keyspace-events`: the
-- same for every gateway. NULL: Redis 7.0.15's default (functions/resp_keys.sql
-- `resp_encodings`).
CREATE TABLE pgvs3.resp_encoding_parameters (
    bucket_id    bigint PRIMARY KEY REFERENCES pgvs3.buckets (id) ON DELETE CASCADE,
    hash_entries bigint,
    hash_value   bigint,
    set_entries  bigint,
    zset_entries bigint,
    zset_value   bigint
);
