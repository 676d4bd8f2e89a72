-- Layout v22: RESP streams, a fifth typed key ('x' in `pgvs3.resp_keys`);
-- functions/resp_stream.sql holds the commands.
--
-- Entry IDs are Redis's two unsigned 64-bit halves (milliseconds, sequence), stored as bigint
-- with the sign bit flipped (u XOR 2^63), which keeps their order: 0 is -2^63 and 2^64 - 1 is
-- 2^63 - 1. The gateway converts (resp/stream.rs). Ranges by ID are then one index range scan
-- of the entries' primary key, O(log n + k).
ALTER TABLE pgvs3.resp_keys DROP CONSTRAINT resp_keys_type_check,
    ADD CONSTRAINT resp_keys_type_check CHECK (type IN ('h', 's', 'z', 'l', 'x'));

-- One row per stream: what outlives its entries. Redis keeps an empty stream (after XDEL or
-- XTRIM) with its last ID, so that a later XADD never reuses an ID.
CREATE TABLE pgvs3.resp_stream (
    bucket_id   bigint NOT NULL,
    key         text COLLATE "C" NOT NULL,
    -- The last ID XADD generated.
    last_ms     bigint NOT NULL,
    last_seq    bigint NOT NULL,
    -- The greatest ID XDEL removed (XINFO's max-deleted-entry-id).
    deleted_ms  bigint NOT NULL,
    deleted_seq bigint NOT NULL,
    -- Entries ever added (XINFO's entries-added), and entries now held (XLEN).
    added       bigint NOT NULL,
    length      bigint NOT NULL,
    PRIMARY KEY (bucket_id, key),
    FOREIGN KEY (bucket_id, key) REFERENCES pgvs3.resp_keys ON DELETE CASCADE ON UPDATE CASCADE
);

-- An entry's fields and values, alternating, as XADD got them.
CREATE TABLE pgvs3.resp_stream_entry (
    bucket_id bigint NOT NULL,
    key       text COLLATE "C" NOT NULL,
    ms        bigint NOT NULL,
    seq       bigint NOT NULL,
    fields    bytea[] NOT NULL,
    PRIMARY KEY (bucket_id, key, ms, seq),
    FOREIGN KEY (bucket_id, key) REFERENCES pgvs3.resp_stream ON DELETE CASCADE ON UPDATE CASCADE
);
