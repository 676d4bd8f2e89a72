-- Layout v14: RESP data types beside strings. A string key stays an object (what S3 sees); a
-- hash, set, sorted set or list key is a row of `pgvs3.resp_keys` (its type, expiry and a
-- version that every change bumps, for WATCH) with its elements in the table of its type. S3
-- does not see them. A key has one type: RESP writes lock keys as string batches do, and a
-- string write removes a typed key of the same name (store/kv.rs). Elements go with their key
-- (ON DELETE CASCADE), follow a RENAME (ON UPDATE CASCADE), and every key goes with its bucket.
-- functions/resp_*.sql hold the commands.
CREATE TABLE pgvs3.resp_keys (
    bucket_id  bigint NOT NULL REFERENCES pgvs3.buckets (id) ON DELETE CASCADE,
    key        text COLLATE "C" NOT NULL,
    type       "char" NOT NULL CHECK (type IN ('h', 's', 'z', 'l')),
    expires_at timestamptz,
    version    bigint NOT NULL DEFAULT 1,
    -- A list's length (NULL for other types): LLEN and a push's reply without counting.
    length     bigint,
    PRIMARY KEY (bucket_id, key)
);
-- The reaper's scan for expired keys.
CREATE INDEX resp_keys_expiry ON pgvs3.resp_keys (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE pgvs3.resp_hash (
    bucket_id bigint NOT NULL,
    key       text COLLATE "C" NOT NULL,
    field     bytea NOT NULL,
    value     bytea NOT NULL,
    PRIMARY KEY (bucket_id, key, field),
    FOREIGN KEY (bucket_id, key) REFERENCES pgvs3.resp_keys ON DELETE CASCADE ON UPDATE CASCADE
);

CREATE TABLE pgvs3.resp_set (
    bucket_id bigint NOT NULL,
    key       text COLLATE "C" NOT NULL,
    member    bytea NOT NULL,
    PRIMARY KEY (bucket_id, key, member),
    FOREIGN KEY (bucket_id, key) REFERENCES pgvs3.resp_keys ON DELETE CASCADE ON UPDATE CASCADE
);

-- Sorted sets: by member (the primary key) and by (score, member), Redis's order, so that
-- ranges by score or rank read O(log n + k) rows. Lexicographic ranges use the same index
-- (Redis defines them only when all scores are equal).
CREATE TABLE pgvs3.resp_zset (
    bucket_id bigint NOT NULL,
    key       text COLLATE "C" NOT NULL,
    member    bytea NOT NULL,
    score     float8 NOT NULL,
    PRIMARY KEY (bucket_id, key, member),
    FOREIGN KEY (bucket_id, key) REFERENCES pgvs3.resp_keys ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX resp_zset_by_score ON pgvs3.resp_zset (bucket_id, key, score, member);

-- Lists: a position per element, ordered, spaced apart (functions/resp_list.sql); pushes take a
-- position before the first or after the last (one index probe), so both ends are O(log n),
-- and LINSERT takes one between two neighbours.
CREATE TABLE pgvs3.resp_list (
    bucket_id bigint NOT NULL,
    key       text COLLATE "C" NOT NULL,
    pos       bigint NOT NULL,
    value     bytea NOT NULL,
    PRIMARY KEY (bucket_id, key, pos),
    FOREIGN KEY (bucket_id, key) REFERENCES pgvs3.resp_keys ON DELETE CASCADE ON UPDATE CASCADE
);
