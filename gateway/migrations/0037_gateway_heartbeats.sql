-- Layout v35: the gateways of a database, as their heartbeats describe them (the console's
-- fleet page, docs/console.md). Every gateway on a server that accepts writes upserts its row
-- every few seconds and deletes rows silent for a minute (gateways that stopped or died); a
-- gateway on a standby server cannot write, and is seen through its server instead
-- (pg_stat_replication). `stats` is a summary of the gateway's own /metrics at its last beat.
CREATE TABLE pgvs3.gateways (
    id        text PRIMARY KEY,
    host      text NOT NULL,
    version   text NOT NULL,
    started   timestamptz NOT NULL,
    listeners jsonb NOT NULL,
    stats     jsonb NOT NULL,
    beat      timestamptz NOT NULL
);
