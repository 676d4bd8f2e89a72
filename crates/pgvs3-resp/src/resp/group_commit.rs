//! Group commit and group reads: batches from many connections that arrive together share one
//! round trip. Write batches share one transaction and one commit; read batches share one
//! statement. Each keyspace has a queue of reads with a few workers, and a few lanes of
//! writes with one worker each; a worker takes everything waiting, runs it as one batch
//! (writes lock their keys in sorted order), and hands each connection its result. While one
//! batch runs, the next one gathers.
//!
//! A write goes to the lane of its first key, so the writes on one hot key follow each other
//! in one lane, each batch taking everything that arrived while the last one ran: one lock
//! wait and one commit for all of it, its typed commands coalesced (`coalesce.rs`). Spread
//! over workers, they made batches that waited for each other's lock in turn, each carrying a
//! share (issue 39). Writes on keys of different lanes still overlap.
//!
//! A write batch runs within the write limits (deadline.rs): past `--resp-write-timeout` before
//! its COMMIT is sent the batch is dropped, which rolls its transaction back, and every
//! connection in it is told its commands were cancelled; once COMMIT is sent the batch waits
//! for its outcome (at most `--resp-commit-timeout`, past which every connection is told the
//! outcome is unknown). A connection past the limit while its commands still wait in the queue
//! withdraws them (they never run); once its batch has started it waits for the batch's answer,
//! since the batch commits for the others and so may for it too: "cancelled" is only ever said
//! when true.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::codec::Reply;
use super::command::KeyCommand;
use super::deadline::WriteLimits;
use super::notify::{self, KeyspaceEvents};
use super::tracking::Tracking;
use crate::bucket::Keyspace;
use crate::metrics::Metrics;
use crate::store::{KvBatch, StoreError};

/// Read batches in flight per keyspace, and write lanes: enough to keep PostgreSQL's WAL
/// flushes (and its two cores' worth of reads) overlapping.
const WORKERS: usize = 4;
/// Commands (or keys) per shared batch: bounds the locks held and the memory of one batch.
const MAX_BATCH: usize = 4096;
const QUEUE_DEPTH: usize = 1024;

type Outcome = Result<Vec<Reply>, Failed>;

/// Why a connection's writes in a shared batch have no replies of their own.
pub enum Failed {
    Store(StoreError),
    /// The batch's fate at its time limits (deadline.rs): cancelled, or outcome unknown.
    Limit(Reply),
}

impl From<StoreError> for Failed {
    fn from(err: StoreError) -> Failed {
        Failed::Store(err)
    }
}

/// Each job carries the keyspace its connection opened (and so was authorized for); a batch
/// runs on the first job's, all of one bucket.
struct WriteJob {
    keyspace: Keyspace,
    commands: Vec<KeyCommand>,
    /// The connection's client id (the writer its invalidations name).
    client: u64,
    /// [`QUEUED`], then [`STARTED`] by the worker or [`WITHDRAWN`] by the connection.
    state: Arc<AtomicU8>,
    done: oneshot::Sender<Outcome>,
}

const QUEUED: u8 = 0;
const STARTED: u8 = 1;
const WITHDRAWN: u8 = 2;

/// What became of a connection's writes submitted with a time limit.
pub enum Submitted {
    Answered(Outcome),
    /// Past the limit (given) before their batch started: they never ran and never will.
    Withdrawn(Duration),
}

struct ReadJob {
    keyspace: Keyspace,
    keys: Vec<String>,
    done: oneshot::Sender<Result<KvBatch, StoreError>>,
}

/// Queues by keyspace and lane (reads have one).
type Queues<J> = Mutex<HashMap<(String, usize), mpsc::Sender<J>>>;
type SharedReceiver<J> = Arc<tokio::sync::Mutex<mpsc::Receiver<J>>>;

pub struct GroupCommit {
    metrics: Metrics,
    /// Which events each keyspace's writes emit (notify.rs).
    events: Arc<KeyspaceEvents>,
    /// This gateway's tracking clients, told of the keys a batch changed before its replies.
    tracking: Arc<Tracking>,
    writes: Queues<WriteJob>,
    reads: Queues<ReadJob>,
    /// How long a write batch may run, and wait for its COMMIT.
    limits: WriteLimits,
}

impl GroupCommit {
    pub fn new(
        metrics: Metrics,
        events: Arc<KeyspaceEvents>,
        tracking: Arc<Tracking>,
        limits: WriteLimits,
    ) -> GroupCommit {
        GroupCommit {
            metrics,
            events,
            tracking,
            writes: Mutex::default(),
            reads: Mutex::default(),
            limits,
        }
    }

    /// Runs client `client`'s commands in a shared write transaction on `keyspace`; replies in
    /// order. Past the write time limit they are withdrawn if their batch has not started.
    pub async fn submit(&self, keyspace: &Keyspace, commands: Vec<KeyCommand>, client: u64) -> Submitted {
        let lane = (keyspace.bucket().to_owned(), lane(&commands));
        let queue = queue(&self.writes, lane, 1, |receiver| {
            let shared = (Arc::clone(&self.events), Arc::clone(&self.tracking));
            tokio::spawn(commit_loop(self.metrics.clone(), shared, self.limits, receiver));
        });
        let (done, mut outcome) = oneshot::channel();
        let state = Arc::new(AtomicU8::new(QUEUED));
        let job = WriteJob {
            keyspace: keyspace.clone(),
            commands,
            client,
            state: Arc::clone(&state),
            done,
        };
        let answered = async {
            queue.send(job).await.map_err(|_| stopped())?;
            (&mut outcome).await.map_err(|_| Failed::from(stopped()))?
        };
        let Some(limit) = self.limits.write else {
            return Submitted::Answered(answered.await);
        };
        if let Ok(outcome) = tokio::time::timeout(limit, answered).await {
            return Submitted::Answered(outcome);
        }
        match state.compare_exchange(QUEUED, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Submitted::Withdrawn(limit),
            // Started: the batch answers within its own limits, committed, cancelled or unknown.
            Err(_) => Submitted::Answered(
                outcome
                    .await
                    .map_err(|_| Failed::from(stopped()))
                    .and_then(|outcome| outcome),
            ),
        }
    }

    /// Loads `keys` of `keyspace` for reading, in a statement shared with other connections'
    /// reads that arrive at the same time.
    pub async fn load(&self, keyspace: &Keyspace, keys: Vec<String>) -> Result<KvBatch, StoreError> {
        let queue = queue(&self.reads, (keyspace.bucket().to_owned(), 0), WORKERS, |receiver| {
            tokio::spawn(read_loop(self.metrics.clone(), receiver));
        });
        let (done, outcome) = oneshot::channel();
        let job = ReadJob {
            keyspace: keyspace.clone(),
            keys,
            done,
        };
        queue.send(job).await.map_err(|_| stopped())?;
        outcome.await.map_err(|_| stopped())?
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the batch worker stopped".into())
}

/// The write lane of a batch: that of its first key.
fn lane(commands: &[KeyCommand]) -> usize {
    let first = commands.iter().flat_map(KeyCommand::keys).min();
    first.map_or(0, |key| {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        (hasher.finish() % WORKERS as u64) as usize
    })
}

/// The queue of a keyspace's lane, made (with its `workers`) on first use.
fn queue<J>(
    queues: &Queues<J>,
    lane: (String, usize),
    workers: usize,
    spawn_worker: impl Fn(SharedReceiver<J>),
) -> mpsc::Sender<J> {
    let mut queues = queues.lock().expect("queues lock");
    if let Some(queue) = queues.get(&lane) {
        return queue.clone();
    }
    let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
    let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
    for _ in 0..workers {
        spawn_worker(Arc::clone(&receiver));
    }
    queues.insert(lane, sender.clone());
    sender
}

/// Waits for one job, then takes what else is already waiting, up to [`MAX_BATCH`] by `size`.
/// `None` when every sender is gone (the server stopped).
async fn take_waiting<J>(receiver: &SharedReceiver<J>, size: impl Fn(&J) -> usize) -> Option<Vec<J>> {
    let mut receiver = receiver.lock().await;
    let first = receiver.recv().await?;
    let mut total = size(&first);
    let mut jobs = vec![first];
    while total < MAX_BATCH {
        match receiver.try_recv() {
            Ok(job) => {
                total += size(&job);
                jobs.push(job);
            }
            Err(_) => break,
        }
    }
    Some(jobs)
}

async fn commit_loop(
    metrics: Metrics,
    (events, tracking): (Arc<KeyspaceEvents>, Arc<Tracking>),
    limits: WriteLimits,
    receiver: SharedReceiver<WriteJob>,
) {
    while let Some(jobs) = take_waiting(&receiver, |job| job.commands.len()).await {
        let (work, mut done): (Vec<_>, Vec<_>) = jobs
            .into_iter()
            .filter(|job| {
                job.state
                    .compare_exchange(QUEUED, STARTED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            })
            .map(|job| ((job.keyspace, job.commands, job.client), job.done))
            .unzip();
        if work.is_empty() {
            continue;
        }
        // Past its limits the batch has one fate for all: cancelled (dropped before its
        // COMMIT), or unknown (its COMMIT unanswered).
        let batch = async {
            limits
                .run(None, run(&metrics, &work, &events, &tracking))
                .await
                .answer()
        };
        let Some(outcome) = unless_abandoned(batch, &mut done).await else {
            continue;
        };
        // How many connections' batches each commit carried: the gain of grouping.
        metrics.resp_group_commits.inc();
        metrics.resp_group_committed_batches.inc_by(done.len() as u64);
        match outcome {
            Ok(outcome) => answer(done.into_iter(), outcome),
            Err(fate) => {
                for done in done {
                    let _ = done.send(Err(Failed::Limit(fate.clone())));
                }
            }
        }
    }
}

async fn read_loop(metrics: Metrics, receiver: SharedReceiver<ReadJob>) {
    while let Some(jobs) = take_waiting(&receiver, |job| job.keys.len()).await {
        let (work, mut done): (Vec<_>, Vec<_>) =
            jobs.into_iter().map(|job| ((job.keyspace, job.keys), job.done)).unzip();
        let requests: Vec<&[String]> = work.iter().map(|(_, keys)| keys.as_slice()).collect();
        let Some(outcome) = unless_abandoned(work[0].0.read_many(&requests), &mut done).await else {
            continue;
        };
        metrics.resp_group_reads.inc();
        metrics.resp_group_read_batches.inc_by(done.len() as u64);
        answer(done.into_iter(), outcome);
    }
}

/// Runs a shared batch unless every connection waiting for it goes away first (disconnected,
/// or past its command time limit): then the batch is dropped, which cancels its statement
/// and rolls back its transaction, and `None`.
async fn unless_abandoned<T, R>(batch: impl Future<Output = R>, done: &mut [oneshot::Sender<T>]) -> Option<R> {
    let abandoned = futures::future::join_all(done.iter_mut().map(|done| done.closed()));
    tokio::select! {
        biased;
        outcome = batch => Some(outcome),
        _ = abandoned => None,
    }
}

/// Hands each job its share of a batch's outcome: its own result, or the batch's error.
fn answer<T, E: From<StoreError>>(
    done: impl Iterator<Item = oneshot::Sender<Result<T, E>>>,
    outcome: Result<Vec<T>, StoreError>,
) {
    match outcome {
        Ok(results) => {
            for (done, result) in done.zip(results) {
                let _ = done.send(Ok(result));
            }
        }
        Err(err) => {
            for done in done {
                let _ = done.send(Err(E::from(err.shared())));
            }
        }
    }
}

/// A shared commit serves many connections' requests, so its span is a trace of its own.
#[tracing::instrument(name = "store", skip_all, fields(otel.name = "store kv_group_commit", otel.kind = "client", db.system = "postgresql", batches = jobs.len()))]
async fn run(
    metrics: &Metrics,
    jobs: &[(Keyspace, Vec<KeyCommand>, u64)],
    events: &KeyspaceEvents,
    tracking: &Tracking,
) -> Result<Vec<Vec<Reply>>, StoreError> {
    let mut keys: Vec<String> = jobs
        .iter()
        .flat_map(|(_, commands, _)| commands.iter().flat_map(KeyCommand::keys))
        .cloned()
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let commands: Vec<&KeyCommand> = jobs.iter().flat_map(|(_, commands, _)| commands.iter()).collect();
    let keyspace = &jobs[0].0;
    let flags = events.flags(keyspace.bucket()).await?;
    // Typed commands need nothing loaded either: they run in SQL. (A tracked keyspace's
    // invalidations need only the keys.)
    let nothing_to_load = !flags.emits()
        && commands
            .iter()
            .all(|command| command.overwrites_blindly() || matches!(command, KeyCommand::Typed(_)));
    let batch = if nothing_to_load {
        keyspace.overwrite(keys).await?
    } else {
        keyspace.write(&keys).await?
    };
    let clients: Vec<u64> = match flags.tracked() {
        true => jobs
            .iter()
            .flat_map(|(_, commands, client)| std::iter::repeat_n(*client, commands.len()))
            .collect(),
        false => Vec::new(),
    };
    let writers = notify::Writers {
        token: events.token,
        clients: &clients,
    };
    let (all, changed) = notify::apply_and_commit(flags, &commands, writers, batch).await?;
    changed.tell(tracking, keyspace.bucket());
    let mut all = all.into_iter();
    metrics
        .resp_coalesced_commands
        .inc_by(super::coalesce::merged(&commands) as u64);
    Ok(jobs
        .iter()
        .map(|(_, commands, _)| all.by_ref().take(commands.len()).collect())
        .collect())
}
