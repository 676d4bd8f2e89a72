-- Layout v27: RESP stream consumer groups; functions/resp_stream_group.sql holds the commands.
--
-- A stream's groups, each group's consumers and the pending entries list (PEL) are rows keyed
-- under the stream's key, so that DEL, UNLINK, expiry, FLUSHDB and a SET over the stream take
-- them with it (ON DELETE CASCADE from `pgvs3.resp_stream`) and RENAME moves them (ON UPDATE
-- CASCADE). IDs are stored as in 0022_resp_streams.sql (each half's sign bit flipped). Group
-- and consumer names are bytes, as Redis's are; times are Unix milliseconds of the database
-- server's clock.
CREATE TABLE pgvs3.resp_stream_group (
    bucket_id    bigint NOT NULL,
    key          text COLLATE "C" NOT NULL,
    name         bytea NOT NULL,
    -- The last ID delivered to the group's consumers (XREADGROUP `>` reads after it).
    last_ms      bigint NOT NULL,
    last_seq     bigint NOT NULL,
    -- The logical count of entries the group has read (XINFO's entries-read); NULL when
    -- unknown (Redis's SCG_INVALID_ENTRIES_READ), as after SETID to an arbitrary ID.
    entries_read bigint,
    PRIMARY KEY (bucket_id, key, name),
    FOREIGN KEY (bucket_id, key) REFERENCES pgvs3.resp_stream ON DELETE CASCADE ON UPDATE CASCADE
);

CREATE TABLE pgvs3.resp_stream_consumer (
    bucket_id bigint NOT NULL,
    key       text COLLATE "C" NOT NULL,
    grp       bytea NOT NULL,
    name      bytea NOT NULL,
    -- The last time the consumer tried to read or claim (XINFO's idle), and the last time it
    -- got entries (XINFO's inactive; NULL: never).
    seen_ms   bigint NOT NULL,
    active_ms bigint,
    PRIMARY KEY (bucket_id, key, grp, name),
    FOREIGN KEY (bucket_id, key, grp) REFERENCES pgvs3.resp_stream_group ON DELETE CASCADE ON UPDATE CASCADE
);

-- The group's PEL: an entry delivered and not yet acknowledged, the consumer that holds it,
-- when it was last delivered and how many times. XACK is a primary-key delete; XPENDING and
-- XAUTOCLAIM scan the primary key from an ID; a consumer's own PEL (XREADGROUP's history,
-- XPENDING ... consumer) scans the second index. Entries removed by XDEL or XTRIM stay here,
-- as in Redis.
CREATE TABLE pgvs3.resp_stream_pending (
    bucket_id    bigint NOT NULL,
    key          text COLLATE "C" NOT NULL,
    grp          bytea NOT NULL,
    ms           bigint NOT NULL,
    seq          bigint NOT NULL,
    consumer     bytea NOT NULL,
    delivered_ms bigint NOT NULL,
    deliveries   bigint NOT NULL,
    PRIMARY KEY (bucket_id, key, grp, ms, seq),
    FOREIGN KEY (bucket_id, key, grp, consumer) REFERENCES pgvs3.resp_stream_consumer ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX resp_stream_pending_consumer ON pgvs3.resp_stream_pending (bucket_id, key, grp, consumer, ms, seq);
