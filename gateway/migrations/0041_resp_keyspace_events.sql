-- Keyspace notifications (CONFIG SET notify-keyspace-events): the setting of each RESP
-- keyspace, by its bucket's name, so that every gateway of the fleet emits the same events for
-- it (resp/notify.rs). Redis's flag letters as CONFIG GET shows them; no row is the default,
-- an empty setting (no events).
CREATE TABLE pgvs3.resp_keyspace_events (
    bucket text PRIMARY KEY,
    flags  text NOT NULL
);

-- INFO's expired_keys: the keys of each bucket the reaper deleted at their expiry, counted by
-- the reaper's own statement (store/reaper.rs), for the whole fleet.
CREATE TABLE pgvs3.resp_expired (
    bucket_id bigint PRIMARY KEY,
    keys      bigint NOT NULL
);
