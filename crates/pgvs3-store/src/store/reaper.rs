//! The reaper's work on the object layout: retired bodies deleted after their grace period
//! (chunk by chunk, in bounded batches), expired keys, abandoned multipart uploads. Who runs
//! it, and when, is `crate::maintenance`'s.

use std::time::Duration;

use super::{Store, StoreResult};

/// Retired bodies handled per statement, and chunks deleted per statement.
const BODY_BATCH: i64 = 16;
const CHUNK_BATCH: i32 = 4096;
const EXPIRED_BATCH: i64 = 1000;

/// The reaper's SQL of one namespace.
#[derive(Debug)]
pub(super) struct ReaperSql {
    drop_abandoned_uploads: String,
    retired_bodies: String,
    delete_retired_chunks: String,
    forget_retired_body: String,
    delete_expired: String,
    backlog: String,
}

impl ReaperSql {
    pub(super) fn new(ns: &str) -> ReaperSql {
        ReaperSql {
            drop_abandoned_uploads: format!(
                "DELETE FROM {ns}.uploads WHERE upload_id = ANY(ARRAY(
                    SELECT upload_id FROM {ns}.uploads
                     WHERE initiated < now() - make_interval(secs => $1) LIMIT $2))
                 RETURNING upload_id"
            ),
            retired_bodies: format!(
                "SELECT body_id FROM {ns}.retired_bodies
                  WHERE retired_at < now() - make_interval(secs => $1) ORDER BY retired_at LIMIT $2"
            ),
            delete_retired_chunks: format!("DELETE FROM {ns}.chunks WHERE body_id = $1 AND seq >= $2 AND seq < $3"),
            forget_retired_body: format!(
                "DELETE FROM {ns}.retired_bodies r WHERE body_id = $1
                   AND NOT EXISTS (SELECT 1 FROM {ns}.chunks c WHERE c.body_id = r.body_id)"
            ),
            // Never a version: a row a versioned write made (`version_seq`), any row of a bucket
            // versioned since its expiry was set (enabling versioning clears expiries, but a RESP
            // write racing it may set one), or one object lock protects. A row changed meanwhile
            // has another ctid, and is left for the next pass to look at again.
            delete_expired: format!(
                "DELETE FROM {ns}.objects WHERE ctid = ANY(ARRAY(
                    SELECT ctid FROM {ns}.objects o WHERE expires_at <= now() AND version_seq IS NULL
                       AND NOT pgvs3.object_locked(meta, false)
                       AND NOT EXISTS (SELECT 1 FROM pgvs3.buckets b WHERE b.id = o.bucket_id AND b.versioning IS NOT NULL)
                     LIMIT $1))"
            ),
            backlog: format!(
                "SELECT (SELECT count(*) FROM {ns}.retired_bodies) AS bodies, (SELECT count(*) FROM {ns}.uploads) AS uploads"
            ),
        }
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReapStats {
    pub bodies: u64,
    pub chunks: u64,
    pub expired_objects: u64,
}

/// The channel kind of a batch of keyspace events (resp/notify.rs `EVENTS`), and the largest
/// NOTIFY payload sent inline (resp/pubsub.rs `INLINE_LIMIT`).
const EVENTS_CHANNEL: &[u8] = b"mexpired";
const INLINE_LIMIT: i32 = 7000;

/// Deletes the expired keys `delete` (a `DELETE` of at most `$1` rows) finds, batch after batch,
/// in statements that also count them per bucket (`pgvs3.resp_expired`, INFO's `expired_keys`)
/// and send their `expired` keyspace events to every gateway when the bucket's setting asks for
/// them (resp/notify.rs's message format): as each row is deleted once, each key's event is
/// sent once in the fleet, with the commit of its deletion. A keyspace with CLIENT TRACKING
/// clients (`pgvs3.resp_tracked`) is sent its expired keys too, for their invalidation (the
/// kinds byte 0 when its setting publishes no `expired` event). The statement marks its
/// transaction as a RESP batch's (`pgvs3.resp_batch`): an expired key's event is `expired`, not
/// the `del` an S3 delete raises (`pgvs3.resp_object_event`, functions/resp_pubsub.sql).
async fn expire(client: &deadpool_postgres::Object, delete: &str) -> StoreResult<u64> {
    let statement = format!(
        "WITH gone AS ({delete} RETURNING bucket_id, key),
         counted AS (
             INSERT INTO pgvs3.resp_expired AS e (bucket_id, keys)
             SELECT bucket_id, count(*) FROM gone GROUP BY bucket_id
             ON CONFLICT (bucket_id) DO UPDATE SET keys = e.keys + excluded.keys
             RETURNING 1),
         told AS (
             SELECT pgvs3.resp_notify($2, m.message, $3) FROM (
                 SELECT set_byte('\\x00'::bytea, 0,
                            CASE WHEN s.flags ~ '[Ax]' AND strpos(s.flags, 'K') > 0 THEN 1 ELSE 0 END
                            + CASE WHEN s.flags ~ '[Ax]' AND strpos(s.flags, 'E') > 0 THEN 2 ELSE 0 END)
                        || int4send(octet_length(convert_to(b.name, 'UTF8'))) || convert_to(b.name, 'UTF8')
                        || string_agg(int4send(7) || convert_to('expired', 'UTF8')
                                      || int4send(octet_length(convert_to(g.key, 'UTF8')))
                                      || convert_to(g.key, 'UTF8'), ''::bytea) AS message
                   FROM gone g
                   JOIN pgvs3.buckets b ON b.id = g.bucket_id
                   LEFT JOIN pgvs3.resp_keyspace_events s ON s.bucket = b.name
                  WHERE (s.flags ~ '[Ax]' AND s.flags ~ '[KE]')
                     OR EXISTS (SELECT 1 FROM pgvs3.resp_tracking t WHERE t.bucket = b.name)
                  GROUP BY b.name, s.flags
                 HAVING (s.flags ~ '[Ax]' AND s.flags ~ '[KE]') OR pgvs3.resp_tracked(b.name)) m)
         SELECT (SELECT count(*) FROM gone) AS deleted, (SELECT count(*) FROM counted) AS counted,
                (SELECT count(*) FROM told) AS told,
                set_config('pgvs3.resp_batch', 'on', true) AS marked"
    );
    let mut expired = 0;
    loop {
        let row = client
            .query_one(&statement, &[&EXPIRED_BATCH, &EVENTS_CHANNEL, &INLINE_LIMIT])
            .await?;
        let deleted: i64 = row.get("deleted");
        expired += deleted as u64;
        if deleted < EXPIRED_BATCH {
            return Ok(expired);
        }
    }
}

impl Store {
    /// One full pass: repeats batches until nothing old enough is left, so a pass ends drained.
    pub async fn reap_retired(&self, grace: Duration) -> StoreResult<ReapStats> {
        let mut stats = ReapStats::default();
        let client = self.client().await?;
        for ns in self.catalog.namespaces().await? {
            loop {
                let rows = client
                    .query(&ns.reaper.retired_bodies, &[&grace.as_secs_f64(), &BODY_BATCH])
                    .await?;
                for row in &rows {
                    let body_id: i64 = row.get("body_id");
                    // Chunks are numbered from 0 without gaps, so a short batch is the last one.
                    let mut from = 0i32;
                    loop {
                        let deleted = client
                            .execute(
                                &ns.reaper.delete_retired_chunks,
                                &[&body_id, &from, &(from + CHUNK_BATCH)],
                            )
                            .await?;
                        stats.chunks += deleted;
                        if deleted < CHUNK_BATCH as u64 {
                            break;
                        }
                        from += CHUNK_BATCH;
                    }
                    // A multipart object's body is a manifest: its parts' bodies retire with it.
                    client.execute(&ns.multipart.drop_parts, &[&vec![body_id]]).await?;
                    stats.bodies += client.execute(&ns.reaper.forget_retired_body, &[&body_id]).await?;
                }
                if (rows.len() as i64) < BODY_BATCH {
                    break;
                }
            }
            stats.expired_objects += expire(&client, &ns.reaper.delete_expired).await?;
        }
        // RESP's typed keys (hashes, sets, sorted sets, lists) live outside the namespaces.
        stats.expired_objects += expire(&client, super::types::DELETE_EXPIRED).await?;
        // WATCH registrations a gateway that went away left (a connection drops its own): an
        // EXEC that comes a day after its WATCH finds them gone and fails, as if touched.
        client
            .execute(
                "DELETE FROM pgvs3.resp_watches WHERE since < clock_timestamp() - interval '1 day'",
                &[],
            )
            .await?;
        Ok(stats)
    }

    /// What is left for the reaper: retired bodies still in their grace period, and multipart
    /// uploads in progress, over all namespaces.
    pub async fn reaper_backlog(&self) -> StoreResult<(i64, i64)> {
        let client = self.client().await?;
        let (mut bodies, mut uploads) = (0, 0);
        for ns in self.catalog.namespaces().await? {
            let row = client.query_one(&ns.reaper.backlog, &[]).await?;
            bodies += row.get::<_, i64>("bodies");
            uploads += row.get::<_, i64>("uploads");
        }
        Ok((bodies, uploads))
    }

    /// Aborts multipart uploads started more than `max_age` ago, retiring their parts' bodies.
    /// Returns how many uploads went.
    pub async fn reap_abandoned_uploads(&self, max_age: Duration) -> StoreResult<u64> {
        let mut reaped = 0;
        let client = self.client().await?;
        for ns in self.catalog.namespaces().await? {
            loop {
                // Two statements: the second one's snapshot sees every part that committed while
                // the first waited for the upload rows (parts commit under a share lock on them).
                let uploads: Vec<i64> = client
                    .query(
                        &ns.reaper.drop_abandoned_uploads,
                        &[&max_age.as_secs_f64(), &EXPIRED_BATCH],
                    )
                    .await?
                    .iter()
                    .map(|row| row.get("upload_id"))
                    .collect();
                client.execute(&ns.multipart.drop_parts, &[&uploads]).await?;
                reaped += uploads.len() as u64;
                if (uploads.len() as i64) < EXPIRED_BATCH {
                    break;
                }
            }
        }
        Ok(reaped)
    }
}
