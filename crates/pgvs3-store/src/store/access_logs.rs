//! S3 server access logging (layout v35): a bucket's logging configuration (its `logging`
//! column, read with the catalog into `BucketInfo::logging`) and the durable queue of its
//! records (`pgvs3.access_log_records`), which any gateway's deliverer drains into log objects
//! (the S3 front's `access_log`). A claim holds its records' row locks until the log object is
//! written and the records deleted, so two gateways never deliver the same record.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::{BucketInfo, Store, StoreResult};

/// The most records queued at once, fleet-wide: beyond it new records are dropped (server
/// access logging is best effort, as on S3) rather than growing the table without bound while
/// no deliverer keeps up. Measured as the span of queued ids, an upper bound of their count
/// read from the primary key's two ends.
pub const MAX_QUEUED_RECORDS: i64 = 1_000_000;

/// The most records one log object carries.
pub const MAX_RECORDS_PER_OBJECT: i64 = 10_000;

/// A bucket's LoggingEnabled, as kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggingConfig {
    /// The target bucket's name.
    pub target: String,
    pub prefix: String,
    /// TargetGrants, kept and put on each log object as its ACL.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<crate::access::acl::Grant>,
    /// TargetObjectKeyFormat's PartitionedPrefix and its PartitionDateSource; `None`:
    /// SimplePrefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitioned: Option<PartitionDate>,
    /// SimplePrefix was named (GetBucketLogging answers the configuration as it was put).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub simple_named: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartitionDate {
    EventTime,
    DeliveryTime,
}

/// A batch of one source bucket's records, claimed for delivery.
pub struct ClaimedRecords {
    pub bucket_id: i64,
    /// The source bucket's name.
    pub bucket: String,
    pub ids: Vec<i64>,
    /// The first record's time (the log object's name is made of it and the first id, so a
    /// batch delivered again after a crash rewrites the same object).
    pub first_at: SystemTime,
    pub lines: Vec<String>,
}

/// A claim on queued records: their rows stay locked (and owed) until [`Claim::settle`]
/// deletes the delivered ones; a claim dropped unsettled (a failed delivery, a crash) leaves
/// them all queued.
pub struct Claim {
    /// The connection whose transaction holds the records' row locks; `None` once settled.
    client: Option<deadpool_postgres::Object>,
    pub batches: Vec<ClaimedRecords>,
}

impl Claim {
    /// Deletes the records of the batches at `done` (indexes into `batches`: those written, or
    /// dropped for good) and releases the others.
    pub async fn settle(mut self, done: &[usize]) -> StoreResult<()> {
        let ids: Vec<i64> = done
            .iter()
            .filter_map(|&n| self.batches.get(n))
            .flat_map(|batch| batch.ids.iter().copied())
            .collect();
        let client = self.client.as_ref().expect("an unsettled claim has its connection");
        client
            .execute("DELETE FROM pgvs3.access_log_records WHERE id = ANY($1)", &[&ids])
            .await?;
        client.batch_execute("COMMIT").await?;
        // Committed: the connection goes back to the pool (only an unsettled one is closed).
        drop(self.client.take());
        Ok(())
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Unsettled: the connection leaves the pool and closes, which rolls its transaction
        // back, rather than going back to the pool with the records' locks held.
        if let Some(client) = self.client.take() {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

impl Store {
    /// Replaces the bucket's logging configuration; `None` turns logging off.
    pub(crate) async fn set_bucket_logging(
        &self,
        bucket: &BucketInfo,
        config: Option<&LoggingConfig>,
    ) -> StoreResult<()> {
        self.set_access_column(
            bucket,
            "UPDATE pgvs3.buckets SET logging = $2 WHERE id = $1",
            &config.map(tokio_postgres::types::Json),
        )
        .await
    }

    /// Queues records (source bucket id, time, line) in one statement; none when the queue is
    /// full (the count of those dropped is returned).
    pub async fn queue_access_logs(&self, records: &[(i64, SystemTime, String)]) -> StoreResult<usize> {
        let ids: Vec<i64> = records.iter().map(|r| r.0).collect();
        let times: Vec<SystemTime> = records.iter().map(|r| r.1).collect();
        let lines: Vec<&str> = records.iter().map(|r| r.2.as_str()).collect();
        let client = self.client().await?;
        let queued = client
            .execute(
                "INSERT INTO pgvs3.access_log_records (bucket_id, at, line)
                 SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::text[])
                  WHERE coalesce((SELECT max(id) - min(id) FROM pgvs3.access_log_records), 0) < $4",
                &[&ids, &times, &lines, &MAX_QUEUED_RECORDS],
            )
            .await?;
        Ok(records.len() - queued as usize)
    }

    /// Claims up to [`MAX_RECORDS_PER_OBJECT`] queued records no other deliverer holds, oldest
    /// first, grouped by their source bucket; `None` when there are none.
    pub async fn claim_access_logs(&self) -> StoreResult<Option<Claim>> {
        // The claim owns the connection before its transaction begins, so a claim abandoned at
        // any await (a deliverer stopped) never returns it to the pool mid-transaction.
        let mut claim = Claim {
            client: Some(self.client().await?),
            batches: Vec::new(),
        };
        let client = claim.client.as_ref().expect("a new claim has its connection");
        client.batch_execute("BEGIN").await?;
        let rows = client
            .query(
                "SELECT c.bucket_id, b.name, array_agg(c.id ORDER BY c.id) AS ids, min(c.at) AS first_at,
                        array_agg(c.line ORDER BY c.id) AS lines
                   FROM (SELECT id, bucket_id, at, line FROM pgvs3.access_log_records
                          ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) c
                   JOIN pgvs3.buckets b ON b.id = c.bucket_id
                  GROUP BY c.bucket_id, b.name",
                &[&MAX_RECORDS_PER_OBJECT],
            )
            .await?;
        for row in rows {
            claim.batches.push(ClaimedRecords {
                bucket_id: row.get("bucket_id"),
                bucket: row.get("name"),
                ids: row.get("ids"),
                first_at: row.get("first_at"),
                lines: row.get("lines"),
            });
        }
        if claim.batches.is_empty() {
            // Nothing queued: the connection goes back to the pool, its transaction ended.
            claim.settle(&[]).await?;
            return Ok(None);
        }
        Ok(Some(claim))
    }
}
