//! WATCH's registrations (layout v48, `pgvs3.resp_watches`): a watching connection's keys,
//! which every write of them marks as touched (triggers on the keys' rows), so that EXEC fails
//! on any write since WATCH, as Redis's does, and not only on a key that now differs: a key
//! made and deleted again in between, or deleted and made again, compares equal.

use tokio_postgres::types::ToSql;

use super::KvBatch;
use crate::pg::checkout::checkout;
use crate::store::{BucketInfo, Store, StoreResult};

/// A connection's registered WATCH: its token, and how many (database, key) pairs it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watches {
    pub token: i64,
    pub keys: i64,
}

/// The registrations of `$1` taken back; how many were untouched.
const TAKE: &str = "WITH taken AS (DELETE FROM pgvs3.resp_watches WHERE token = $1 RETURNING touched)
                    SELECT count(*) FILTER (WHERE NOT touched) AS untouched FROM taken";

impl Store {
    /// Registers `keys` of `bucket` under `token`, committed before it answers: the WATCH reads
    /// the keys after it. How many were not registered under `token` before; `None` where
    /// nothing can be registered (a hot standby).
    ///
    /// It answers once the writers under way on the keys are done (in the same round trip): a
    /// transaction holding a key's lock may have written its row before the registration
    /// existed, so its write leaves no mark; waiting puts its commit before the WATCH, whose
    /// read then sees it, where otherwise the WATCH could answer first and EXEC miss a write
    /// that left the key as it found it.
    pub(crate) async fn kv_watch(&self, bucket: &BucketInfo, token: i64, keys: &[String]) -> StoreResult<Option<i64>> {
        let client = self.client().await?;
        let await_writers = client.prepare_cached(bucket.sql.kv.await_writers(keys.len())).await?;
        let params: [&(dyn ToSql + Sync); 3] = [&token, &bucket.id, &keys];
        let (row, ()) = futures::try_join!(
            client.query_one("SELECT pgvs3.resp_watch($1, $2, $3) AS registered", &params),
            super::load::await_writers(&client, &await_writers, bucket.id, keys),
        )?;
        Ok(row.get::<_, Option<i32>>("registered").map(i64::from))
    }

    /// Drops the registrations of `token` (UNWATCH, DISCARD, an EXEC that did not commit, a
    /// connection that went away).
    pub async fn kv_unwatch(&self, token: i64) -> StoreResult<()> {
        let client = self.client().await?;
        client
            .execute("DELETE FROM pgvs3.resp_watches WHERE token = $1", &[&token])
            .await?;
        Ok(())
    }
}

impl KvBatch {
    /// Takes `watches` back, and answers whether none of its keys was written since WATCH. A
    /// write batch does it in its transaction, under its keys' locks: no write of them can
    /// come between this and its commit, and its rollback keeps the registrations. A read batch
    /// does it after its load: a write that committed before the load is seen as touched (one
    /// after it may be too, and fails an EXEC that Redis would have run: the client retries).
    pub async fn watches_untouched(&mut self, watches: Watches) -> StoreResult<bool> {
        let in_transaction = self.in_transaction && self.deferred_locks.is_none();
        let untouched: i64 = match (in_transaction, self.client.as_ref()) {
            (true, Some(client)) => {
                self.busy = true;
                let row = client.query_one(TAKE, &[&watches.token]).await;
                self.busy = false;
                row?.get("untouched")
            }
            _ => checkout(&self.pool)
                .await?
                .query_one(TAKE, &[&watches.token])
                .await?
                .get("untouched"),
        };
        Ok(untouched == watches.keys)
    }
}
