//! Group commit: write batches from many connections that arrive together share one
//! transaction and one commit. Each keyspace has a queue and a few committers; a committer
//! takes everything waiting, runs it as one batch (keys locked in sorted order), and hands
//! each connection its replies. While one batch commits, the next one gathers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use super::codec::Reply;
use super::command::KeyCommand;
use super::keys;
use crate::metrics::Metrics;
use crate::store::{Principal, Store, StoreError};

/// Batches in flight per keyspace: enough to keep PostgreSQL's WAL flushes overlapping.
const COMMITTERS: usize = 4;
/// Commands per shared batch: bounds the locks held and the memory of one transaction.
const MAX_BATCH_COMMANDS: usize = 4096;
const QUEUE_DEPTH: usize = 1024;

type Outcome = Result<Vec<Reply>, StoreError>;

struct Job {
    commands: Vec<KeyCommand>,
    done: oneshot::Sender<Outcome>,
}

pub struct GroupCommit {
    store: Store,
    metrics: Metrics,
    /// Acts for every connection: each checked its own access to the bucket before submitting.
    committer: Principal,
    queues: Mutex<HashMap<String, mpsc::Sender<Job>>>,
}

impl GroupCommit {
    pub fn new(store: Store, committer: Principal, metrics: Metrics) -> GroupCommit {
        GroupCommit {
            store,
            metrics,
            committer,
            queues: Mutex::default(),
        }
    }

    /// Runs the commands in a shared write transaction on `bucket`; replies in order.
    pub async fn submit(&self, bucket: &str, commands: Vec<KeyCommand>) -> Outcome {
        let queue = self.queue(bucket);
        let (done, outcome) = oneshot::channel();
        queue
            .send(Job { commands, done })
            .await
            .map_err(|_| StoreError::Unavailable("the committer stopped".into()))?;
        outcome
            .await
            .map_err(|_| StoreError::Unavailable("the committer stopped".into()))?
    }

    fn queue(&self, bucket: &str) -> mpsc::Sender<Job> {
        let mut queues = self.queues.lock().expect("queues lock");
        if let Some(queue) = queues.get(bucket) {
            return queue.clone();
        }
        let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
        let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
        for _ in 0..COMMITTERS {
            tokio::spawn(commit_loop(
                self.store.clone(),
                self.metrics.clone(),
                self.committer.clone(),
                bucket.to_owned(),
                Arc::clone(&receiver),
            ));
        }
        queues.insert(bucket.to_owned(), sender.clone());
        sender
    }
}

/// Ends when every sender is gone (the server stopped).
async fn commit_loop(
    store: Store,
    metrics: Metrics,
    principal: Principal,
    bucket: String,
    receiver: Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>,
) {
    loop {
        let jobs = {
            let mut receiver = receiver.lock().await;
            let Some(first) = receiver.recv().await else {
                return;
            };
            let mut size = first.commands.len();
            let mut jobs = vec![first];
            while size < MAX_BATCH_COMMANDS {
                match receiver.try_recv() {
                    Ok(job) => {
                        size += job.commands.len();
                        jobs.push(job);
                    }
                    Err(_) => break,
                }
            }
            jobs
        };
        let outcome = run(&store, &principal, &bucket, &jobs).await;
        // How many connections' batches each commit carried: the gain of grouping.
        metrics.resp_group_commits.inc();
        metrics.resp_group_committed_batches.inc_by(jobs.len() as u64);
        match outcome {
            Ok(replies) => {
                for (job, replies) in jobs.into_iter().zip(replies) {
                    let _ = job.done.send(Ok(replies));
                }
            }
            Err(err) => {
                let text = err.to_string();
                for job in jobs {
                    let _ = job.done.send(Err(match &err {
                        StoreError::ReadOnly => StoreError::ReadOnly,
                        StoreError::QuotaExceeded(usage) => StoreError::QuotaExceeded(usage.clone()),
                        _ => StoreError::Unavailable(text.clone()),
                    }));
                }
            }
        }
    }
}

async fn run(store: &Store, principal: &Principal, bucket: &str, jobs: &[Job]) -> Result<Vec<Vec<Reply>>, StoreError> {
    let mut keys: Vec<String> = jobs
        .iter()
        .flat_map(|job| job.commands.iter().flat_map(KeyCommand::keys))
        .cloned()
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut batch = store.kv_write(principal, bucket, &keys).await?;
    let mut replies = Vec::with_capacity(jobs.len());
    for job in jobs {
        let mut job_replies = Vec::with_capacity(job.commands.len());
        for command in &job.commands {
            job_replies.push(keys::apply(command, &mut batch).await?);
        }
        replies.push(job_replies);
    }
    batch.commit().await?;
    Ok(replies)
}
