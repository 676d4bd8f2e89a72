//! Group commit for small PUTs: unconditional inline writes to a bucket that never had
//! versioning, arriving together, share one transaction and one commit.
//!
//! Each such PUT is one INSERT in a transaction of its own, and at 16 clients the statement
//! costs PostgreSQL ~4× its CPU at one client (~240 µs against ~60: sixteen backends on two
//! cores contending for the WAL, the lock manager and the same index pages, and a WAL flush
//! per commit; measured with pgbench on the gateway's own statement, docs/benchmarks.md). A
//! lane takes every PUT waiting on it and sends them as one pipelined transaction: `BEGIN`,
//! each PUT's own statement (the same SQL a lone PUT runs, so versioning, triggers, quotas and
//! events are as they are), `COMMIT`, in one round trip. While one batch runs, the next one
//! gathers.
//!
//! A batch's writes take their rows' locks in key order (byte order, as `COLLATE "C"` sorts),
//! so batches of two gateways on the same keys wait for each other rather than deadlock. Should
//! any statement fail (a quota's refusal, a deadlock with some other writer), PostgreSQL rolls
//! the whole batch back and each PUT is run again alone, answered as it would have been without
//! the lane. Should the connection fail, no PUT is run again: whether the batch committed is not
//! known, and each is told so, as a lone PUT would be.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use deadpool_postgres::Pool;
use futures::future::join_all;
use prometheus::{IntCounterVec, Opts};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::Json;

use super::objects::{NamespaceSql, ObjectMeta, Written};
use super::{StoreError, StoreResult};
use crate::pg::checkout::checkout;

/// Lanes per bucket (a key's lane is its hash's): the batches in flight, and so the commits
/// PostgreSQL may flush together, per bucket.
const LANES: u64 = 2;
/// PUTs per batch: bounds the locks a batch holds and the bytes it carries (each at most the
/// inline limit, 64 KiB).
const MAX_BATCH: usize = 64;
const QUEUE_DEPTH: usize = 1024;
/// A lane without a PUT for this long ends (buckets come and go).
const IDLE: std::time::Duration = std::time::Duration::from_secs(60);

/// One inline PUT, as its statement's parameters; `meta` comes back with the answer.
pub(super) struct PutJob {
    pub bucket_id: i64,
    pub sql: Arc<NamespaceSql>,
    pub key: String,
    pub size: i64,
    pub etag: String,
    pub meta: ObjectMeta,
    pub inline: bytes::Bytes,
}

/// What became of a job: its row (`None`: the statement wrote nothing, a bucket gone), and its
/// metadata back.
pub(super) type PutAnswer = (StoreResult<Option<Written>>, ObjectMeta);

struct Queued {
    job: PutJob,
    done: oneshot::Sender<PutAnswer>,
}

pub(super) struct PutLanes {
    pool: Pool,
    lanes: Mutex<HashMap<(i64, u64), mpsc::Sender<Queued>>>,
    /// PUTs written by the lanes, by how their commit went: `shared` (a batch of several),
    /// `alone` (nothing else was waiting), `again_alone` (run again alone after their batch
    /// was rolled back), `failed` (the batch's connection failed: each PUT answered so).
    writes: IntCounterVec,
}

impl PutLanes {
    pub fn new(pool: Pool) -> PutLanes {
        PutLanes {
            pool,
            lanes: Mutex::default(),
            writes: IntCounterVec::new(
                Opts::new(
                    "pgvs3_put_lane_writes_total",
                    "Small unconditional PUTs written through a write lane, by how they were committed",
                ),
                &["commit"],
            )
            .expect("metric"),
        }
    }

    pub fn register_metrics(&self, metrics: &crate::metrics::Metrics) {
        metrics.register(Box::new(self.writes.clone()));
    }

    /// Runs `job` in its lane's next batch.
    pub async fn put(&self, job: PutJob) -> PutAnswer {
        let (done, answer) = oneshot::channel();
        let mut queued = Queued { job, done };
        // A lane idle for a while closes (its worker ends); a PUT that finds it closing opens
        // it again.
        loop {
            let lane = self.lane(queued.job.bucket_id, &queued.job.key);
            match lane.send(queued).await {
                Ok(()) => break,
                Err(mpsc::error::SendError(refused)) => queued = refused,
            }
        }
        answer.await.unwrap_or_else(|_| {
            // The worker is gone with the job (the runtime shutting down): its outcome is unknown.
            (
                Err(StoreError::CommitUnknown(
                    "the write lane stopped with the write".into(),
                )),
                ObjectMeta::default(),
            )
        })
    }

    fn lane(&self, bucket_id: i64, key: &str) -> mpsc::Sender<Queued> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        let lane = (bucket_id, hasher.finish() % LANES);
        let mut lanes = self.lanes.lock().expect("put lanes");
        if let Some(sender) = lanes.get(&lane).filter(|sender| !sender.is_closed()) {
            return sender.clone();
        }
        let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
        tokio::spawn(run_lane(self.pool.clone(), receiver, self.writes.clone()));
        lanes.insert(lane, sender.clone());
        sender
    }
}

async fn run_lane(pool: Pool, mut receiver: mpsc::Receiver<Queued>, writes: IntCounterVec) {
    loop {
        let first = match tokio::time::timeout(IDLE, receiver.recv()).await {
            Ok(Some(queued)) => queued,
            Ok(None) => return,
            // Idle: closed to new PUTs (they open a new lane), those already sent still run.
            Err(_) => {
                receiver.close();
                match receiver.recv().await {
                    Some(queued) => queued,
                    None => return,
                }
            }
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(queued) => batch.push(queued),
                Err(_) => break,
            }
        }
        batch.sort_by(|a, b| a.job.key.cmp(&b.job.key));
        let (outcomes, commit) = match batch.len() {
            1 => (vec![alone(&pool, &batch[0].job).await], "alone"),
            _ => together(&pool, &batch).await,
        };
        writes.with_label_values(&[commit]).inc_by(batch.len() as u64);
        for (queued, outcome) in batch.into_iter().zip(outcomes) {
            // A PUT whose client went away is written all the same; nobody hears of it.
            let _ = queued.done.send((outcome, queued.job.meta));
        }
    }
}

/// The batch as one transaction; each job run alone instead if a statement failed in it.
/// Also says how the batch was committed (the label of `pgvs3_put_lane_writes_total`).
async fn together(pool: &Pool, batch: &[Queued]) -> (Vec<StoreResult<Option<Written>>>, &'static str) {
    let client = match checkout(pool).await {
        Ok(client) => client,
        Err(err) => {
            let err = StoreError::from(err);
            return (batch.iter().map(|_| Err(err.shared())).collect(), "failed");
        }
    };
    let statement = match client.prepare_cached(&batch[0].job.sql.put).await {
        Ok(statement) => statement,
        Err(err) => {
            let err = StoreError::from(err);
            return (batch.iter().map(|_| Err(err.shared())).collect(), "failed");
        }
    };
    // Polled together, so sent in this order in one write: BEGIN, the statements, COMMIT. A
    // failed statement turns the COMMIT into a rollback (PostgreSQL answers it "ROLLBACK").
    let metas: Vec<Json<&ObjectMeta>> = batch.iter().map(|queued| Json(&queued.job.meta)).collect();
    let no_body: Option<i64> = None;
    let writes = batch.iter().zip(&metas).map(|(queued, meta)| {
        let job = &queued.job;
        let inline: Option<&[u8]> = Some(&job.inline);
        let statement = &statement;
        let client = &client;
        let no_body = &no_body;
        async move {
            client
                .query_opt(
                    statement,
                    &[&job.bucket_id, &job.key, &job.size, &job.etag, meta, &inline, no_body],
                )
                .await
        }
    });
    let (begun, rows, committed) = futures::join!(
        client.batch_execute("BEGIN"),
        join_all(writes),
        client.simple_query("COMMIT")
    );
    // A statement PostgreSQL refused aborted the transaction, and so did a refused COMMIT:
    // rolled back for certain.
    if rows.iter().any(refused) || refused(&committed) {
        drop(client);
        let mut outcomes = Vec::with_capacity(batch.len());
        for queued in batch {
            outcomes.push(alone(pool, &queued.job).await);
        }
        return (outcomes, "again_alone");
    }
    let mut first_loss = None;
    let mut written_rows = Vec::with_capacity(rows.len());
    for row in rows {
        match row {
            Ok(row) => written_rows.push(Ok(row.map(|row| Written::from_row(&row)))),
            Err(err) => {
                first_loss.get_or_insert(err);
            }
        }
    }
    let first_loss = match (begun, committed) {
        (Err(err), _) => Some(err),
        (_, Err(err)) => first_loss.or(Some(err)),
        _ => first_loss,
    };
    match first_loss {
        None => (written_rows, "shared"),
        // The connection failed on the way: the COMMIT may have been applied or not, as for a
        // lone PUT whose connection fails, and each PUT is answered as that one would be.
        Some(err) => {
            let err = StoreError::from(err);
            (batch.iter().map(|_| Err(err.shared())).collect(), "failed")
        }
    }
}

/// One job as a lone PUT runs it: its own statement, committed by itself.
async fn alone(pool: &Pool, job: &PutJob) -> StoreResult<Option<Written>> {
    let client = checkout(pool).await?;
    let statement = client.prepare_cached(&job.sql.put).await?;
    let inline: Option<&[u8]> = Some(&job.inline);
    let row = client
        .query_opt(
            &statement,
            &[
                &job.bucket_id,
                &job.key,
                &job.size,
                &job.etag,
                &Json(&job.meta),
                &inline,
                &None::<i64>,
            ],
        )
        .await?;
    Ok(row.map(|row| Written::from_row(&row)))
}

/// Whether PostgreSQL refused the statement (rather than the connection failing under it).
fn refused<T>(result: &Result<T, tokio_postgres::Error>) -> bool {
    result.as_ref().is_err_and(|err| err.as_db_error().is_some())
}
