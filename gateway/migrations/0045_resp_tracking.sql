-- Client-side caching (CLIENT TRACKING, resp/tracking.rs): the keyspaces some gateway has
-- tracking clients for, so that every gateway's writes to them send the keys they change
-- (functions/resp_pubsub.sql `resp_track`, `resp_tracked`). A row names the gateway by its
-- LISTEN connection's backend (pid and start), which is what delivers the invalidations: a row
-- whose backend is gone (a gateway that died or lost its connection) counts for nothing.
CREATE TABLE pgvs3.resp_tracking (
    bucket        text NOT NULL,
    pid           int NOT NULL,
    backend_start timestamptz NOT NULL,
    PRIMARY KEY (bucket, pid, backend_start)
);
