//! The keyspace-wide statements (KEYS and SCAN's pages, DBSIZE, RANDOMKEY, FLUSHDB) inside a
//! batch's transaction: MULTI/EXEC runs them in their queue position, so they see the writes
//! queued before them and those after them see theirs, as Redis's EXEC runs every command at
//! one point in time. What the batch changed so far is written first.

use super::{KeyType, KvBatch, Slot, StoreError, StoreResult};
use crate::pg::checkout::checkout;

impl KvBatch {
    /// As [`Keyspace::scan`](crate::bucket::Keyspace::scan), in the batch.
    pub async fn scan_keys(
        &mut self,
        after: &str,
        prefix: &str,
        count: i64,
    ) -> StoreResult<Vec<(String, Option<KeyType>)>> {
        self.write_pending().await?;
        let bucket = std::sync::Arc::clone(&self.bucket);
        let client = self.statement_client().await?;
        let statement = client.prepare_cached(&bucket.sql.kv.scan).await?;
        let rows = client.query(&statement, &[&bucket.id, &after, &prefix, &count]).await?;
        Ok(rows
            .iter()
            .map(|row| {
                (
                    row.get("key"),
                    row.get::<_, Option<i8>>("t").and_then(KeyType::from_code),
                )
            })
            .collect())
    }

    /// As [`Keyspace::count`](crate::bucket::Keyspace::count), in the batch.
    pub async fn count_keys(&mut self) -> StoreResult<(i64, i64)> {
        self.write_pending().await?;
        let bucket = std::sync::Arc::clone(&self.bucket);
        let client = self.statement_client().await?;
        let statement = client.prepare_cached(&bucket.sql.kv.count).await?;
        let row = client.query_one(&statement, &[&bucket.id]).await?;
        Ok((row.get("keys"), row.get("expiring")))
    }

    /// As [`Keyspace::random_key`](crate::bucket::Keyspace::random_key), in the batch.
    pub async fn random_key(&mut self) -> StoreResult<Option<String>> {
        self.write_pending().await?;
        let bucket = std::sync::Arc::clone(&self.bucket);
        let client = self.statement_client().await?;
        let statement = client.prepare_cached(&bucket.sql.kv.random).await?;
        let row = client.query_opt(&statement, &[&bucket.id]).await?;
        Ok(row.map(|row| row.get("key")))
    }

    /// As [`Keyspace::flush`](crate::bucket::Keyspace::flush), in the batch (a batch that
    /// holds the whole keyspace: [`Store::kv_write_all`](super::Store)). Its rows are deleted as
    /// a RESP batch's, raising no `del` each (see `Store::kv_flush`); the setting is put back
    /// for the batch's later writes, whose events are theirs.
    pub async fn flush_keys(&mut self) -> StoreResult<()> {
        if self.versioned {
            return Err(StoreError::NotImplemented(format!(
                "FLUSHDB is not supported on bucket {}: it has S3 versioning",
                self.bucket.name
            )));
        }
        self.write_pending().await?;
        let bucket = std::sync::Arc::clone(&self.bucket);
        let client = self.statement_client().await?;
        let statement = client.prepare_cached(&bucket.sql.kv.flush).await?;
        let row = client
            .query_one(
                "SELECT coalesce(current_setting('pgvs3.resp_batch', true), '') AS was,
                        set_config('pgvs3.resp_batch', 'on', true) AS now",
                &[],
            )
            .await?;
        let was: String = row.get("was");
        client.execute(&statement, &[&bucket.id]).await?;
        client
            .execute("SELECT set_config('pgvs3.resp_batch', $1, true)", &[&was])
            .await?;
        for slot in self.slots.values_mut() {
            *slot = Slot::absent();
        }
        Ok(())
    }

    /// The batch's connection (taken from the pool for a read batch that holds none: a
    /// standby's, outside any transaction).
    async fn statement_client(&mut self) -> StoreResult<&deadpool_postgres::Object> {
        if self.client.is_none() {
            self.client = Some(checkout(&self.pool).await?);
        }
        Ok(self.client.as_ref().expect("taken above"))
    }
}
