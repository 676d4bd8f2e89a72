//! OJS: workers enqueue, fetch, ack and nack jobs of one queue with a short visibility timeout
//! (some stall past it, so claims lapse and jobs move to the next worker), then the queue is
//! drained. Checked per job: never claimed by two workers at once (a second claim needs a nack
//! or a lapsed visibility timeout of the first), never completed twice, never delivered again
//! after an acknowledged ack, no stale attempt's ack accepted, and every enqueued job ends
//! completed or dead.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use serde_json::{Value, json};

use super::recorder::{Op, Outcome, Recorder};
use super::schedule::{Bounds, Schedule, join};
use crate::common::ojs::Ojs;

pub const QUEUE: &str = "history";
/// Each job's visibility timeout (milliseconds).
pub const VISIBILITY_MS: u64 = 400;
/// How far the server's clock and request timing may put a claim's end from the client's view.
const TOLERANCE: u64 = 100_000;

#[derive(Clone, PartialEq, Eq)]
pub enum Cmd {
    Enqueue,
    Fetch,
    Ack { job: String, attempt: i64 },
    Nack { job: String, attempt: i64 },
}

impl fmt::Debug for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cmd::Enqueue => write!(f, "ENQUEUE"),
            Cmd::Fetch => write!(f, "FETCH"),
            Cmd::Ack { job, attempt } => write!(f, "ACK {job} attempt {attempt}"),
            Cmd::Nack { job, attempt } => write!(f, "NACK {job} attempt {attempt}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Enqueued(String),
    Claimed {
        job: String,
        attempt: i64,
    },
    Empty,
    Done,
    /// Any other status (409 for a stale attempt).
    Status(u16, String),
}

/// Runs `clients` workers against `ojs`, then drains the queue; the history and the jobs'
/// final states.
pub async fn run(ojs: &Ojs, clients: usize, bounds: &Bounds) -> (Vec<Op<Cmd, Reply>>, BTreeMap<String, String>) {
    let recorder = Arc::new(Recorder::new(std::time::Instant::now()));
    let schedule = Schedule::new(clients, bounds, Duration::from_millis(60));
    let mut tasks = tokio::task::JoinSet::new();
    for id in 0..clients {
        let (recorder, schedule, ojs) = (recorder.clone(), schedule.clone(), ojs.clone());
        let mut rng = bounds.rng("ojs", id);
        tasks.spawn(async move {
            let mut held: Option<(String, i64)> = None;
            while let Some(ops) = schedule.round(&mut rng).await {
                for _ in 0..ops {
                    let roll = rng.random_range(0..100);
                    let cmd = match held.take() {
                        // Stalls: keeps the claim past its visibility timeout, maybe.
                        Some(claim) if roll < 25 => {
                            held = Some(claim);
                            continue;
                        }
                        Some((job, attempt)) if roll < 75 => Cmd::Ack { job, attempt },
                        Some((job, attempt)) => Cmd::Nack { job, attempt },
                        None if roll < 35 => Cmd::Enqueue,
                        None => Cmd::Fetch,
                    };
                    if let Some(Reply::Claimed { job, attempt }) =
                        recorder.record(id, cmd.clone(), send(&ojs, &cmd)).await
                    {
                        held = Some((job, attempt));
                    }
                }
            }
        });
    }
    join(tasks).await;
    let states = drain(ojs, &recorder, clients).await;
    (recorder.history(), states)
}

/// Fetches and acks (as one more client, recorded) until every enqueued job is finished; their states.
async fn drain(ojs: &Ojs, recorder: &Recorder<Cmd, Reply>, client: usize) -> BTreeMap<String, String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        while let Some(Reply::Claimed { job, attempt }) =
            recorder.record(client, Cmd::Fetch, send(ojs, &Cmd::Fetch)).await
        {
            let ack = Cmd::Ack { job, attempt };
            recorder.record(client, ack.clone(), send(ojs, &ack)).await;
        }
        let mut states = BTreeMap::new();
        for op in recorder.history() {
            if let Some(Reply::Enqueued(job)) = op.output() {
                let (_, body) = ojs.get(&format!("/ojs/v1/jobs/{job}")).await;
                states.insert(job.clone(), body["job"]["state"].as_str().unwrap_or("?").to_owned());
            }
        }
        let finished = |state: &String| matches!(state.as_str(), "completed" | "discarded" | "dead" | "cancelled");
        if states.values().all(finished) || tokio::time::Instant::now() > deadline {
            return states;
        }
        // Retries wait out their backoff before they can be fetched again.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn send(ojs: &Ojs, cmd: &Cmd) -> Outcome<Reply> {
    let (path, body) = match cmd {
        Cmd::Enqueue => (
            "/ojs/v1/jobs",
            json!({ "type": "history.task", "args": [], "options": { "queue": QUEUE,
                    "visibility_timeout_ms": VISIBILITY_MS,
                    "retry": { "max_attempts": 4, "initial_interval": "PT0.05S", "backoff_coefficient": 1, "jitter": false } } }),
        ),
        Cmd::Fetch => ("/ojs/v1/workers/fetch", json!({ "queues": [QUEUE], "worker_id": "w" })),
        Cmd::Ack { job, attempt } => ("/ojs/v1/workers/ack", json!({ "job_id": job, "attempt": attempt })),
        Cmd::Nack { job, attempt } => (
            "/ojs/v1/workers/nack",
            json!({ "job_id": job, "attempt": attempt, "error": { "message": "history nack" } }),
        ),
    };
    let (status, body) = ojs.post(path, body).await;
    if status >= 500 {
        return Outcome::Unknown(format!("{status} {body}"));
    }
    let reply = match (cmd, status) {
        (Cmd::Enqueue, 201) => Reply::Enqueued(body["job"]["id"].as_str().unwrap_or_default().to_owned()),
        (Cmd::Fetch, 200) => match body["jobs"].as_array().and_then(|jobs| jobs.first()) {
            Some(job) => Reply::Claimed {
                job: job["id"].as_str().unwrap_or_default().to_owned(),
                attempt: job["attempt"].as_i64().unwrap_or_default(),
            },
            None => Reply::Empty,
        },
        (Cmd::Ack { .. } | Cmd::Nack { .. }, 200) => Reply::Done,
        (_, status) => Reply::Status(status, body.to_string()),
    };
    Outcome::Answered(reply)
}

fn job_of(op: &Op<Cmd, Reply>) -> Option<&str> {
    match (&op.input, op.output()) {
        (Cmd::Ack { job, .. } | Cmd::Nack { job, .. }, _) => Some(job),
        (_, Some(Reply::Enqueued(job) | Reply::Claimed { job, .. })) => Some(job),
        _ => None,
    }
}

/// Each violated job: what is wrong and the job's history.
pub fn check(ops: &[Op<Cmd, Reply>], states: &BTreeMap<String, String>) -> Vec<(String, Vec<Op<Cmd, Reply>>)> {
    let mut by_job: BTreeMap<&str, Vec<&Op<Cmd, Reply>>> = BTreeMap::new();
    for op in ops {
        if let Some(job) = job_of(op) {
            by_job.entry(job).or_default().push(op);
        }
    }
    let mut failures = Vec::new();
    for (job, history) in &by_job {
        if let Some(problem) = problem(history, states.get(*job).map(String::as_str)) {
            failures.push((
                format!("job {job}: {problem}"),
                history.iter().map(|op| (*op).clone()).collect(),
            ));
        }
    }
    failures
}

fn problem(history: &[&Op<Cmd, Reply>], state: Option<&str>) -> Option<String> {
    let claims: Vec<(&Op<Cmd, Reply>, i64)> = history
        .iter()
        .filter_map(|op| match op.output() {
            Some(Reply::Claimed { attempt, .. }) => Some((*op, *attempt)),
            _ => None,
        })
        .collect();
    let settled = |op: &Op<Cmd, Reply>, is_ack: bool| {
        matches!((&op.input, is_ack), (Cmd::Ack { .. }, true) | (Cmd::Nack { .. }, false))
            && matches!(op.output(), Some(Reply::Done))
    };
    let attempt_of = |op: &Op<Cmd, Reply>| match &op.input {
        Cmd::Ack { attempt, .. } | Cmd::Nack { attempt, .. } => *attempt,
        _ => 0,
    };
    let acks: Vec<&&Op<Cmd, Reply>> = history.iter().filter(|op| settled(op, true)).collect();
    if acks.len() > 1 {
        return Some(format!("acknowledged as completed {} times", acks.len()));
    }
    for ack in &acks {
        if let Some((claim, _)) = claims.iter().find(|(claim, _)| claim.call > ack.end()) {
            return Some(format!(
                "delivered again at {} µs after its ack was answered",
                claim.call
            ));
        }
        if let Some((_, later)) = claims
            .iter()
            .find(|(claim, attempt)| *attempt > attempt_of(ack) && claim.end() < ack.call)
        {
            return Some(format!(
                "the ack of attempt {} was accepted after attempt {later} was claimed",
                attempt_of(ack)
            ));
        }
    }
    let mut sorted = claims.clone();
    sorted.sort_by_key(|(_, attempt)| *attempt);
    for pair in sorted.windows(2) {
        let ((first, a1), (second, a2)) = (pair[0], pair[1]);
        if a1 == a2 {
            return Some(format!("attempt {a1} claimed twice"));
        }
        let released = history.iter().any(|op| {
            matches!(op.input, Cmd::Nack { attempt, .. } if attempt == a1)
                && op.output().is_none_or(|reply| *reply == Reply::Done)
                && op.call < second.end()
        });
        let lapsed = second.end() > first.call + VISIBILITY_MS * 1000 - TOLERANCE;
        if !released && !lapsed {
            return Some(format!(
                "attempt {a2} claimed while attempt {a1}'s claim held (neither nacked nor past its visibility timeout)"
            ));
        }
    }
    match state {
        Some("completed")
            if acks.is_empty()
                && !history
                    .iter()
                    .any(|op| matches!(op.input, Cmd::Ack { .. }) && op.output().is_none()) =>
        {
            Some("completed without an acknowledged ack".into())
        }
        Some("completed" | "discarded" | "dead" | "cancelled") | None => None,
        Some(other) => Some(format!("never finished: {other} after the drain")),
    }
}

/// A job's state as the gateway reports it (for the failure report).
pub fn describe(states: &BTreeMap<String, String>) -> Value {
    let mut counts = BTreeMap::new();
    for state in states.values() {
        *counts.entry(state.clone()).or_insert(0) += 1;
    }
    json!(counts)
}
