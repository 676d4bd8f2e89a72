//! The binding's small pieces of wire format: path ids, query strings, optional fields of request
//! bodies, and the shapes answers take (jobs, listings, settled jobs, subscriptions, headers).

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::super::engine::admin::{QueueStats, QueueSummary, Stats, Tenants};
use super::super::engine::claims::{Claim, Strategy};
use super::super::engine::envelope;
use super::super::engine::job::{Job, State, Timestamp};
use super::super::engine::jobs::{Answer, Inserted};
use super::super::engine::scheduling::{QueueDispatch, WINDOW};
use super::OjsError;

/// A job's own fields as this binding answers them; a field without a value is left out.
#[derive(Serialize)]
struct JobFields<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    job_type: &'a str,
    queue: &'a str,
    priority: i32,
    state: State,
    attempt: i32,
    max_attempts: i32,
    created_at: Timestamp,
    /// The same time: the spec's name for it.
    enqueued_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduled_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_attempt_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    completed_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cancelled_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    discarded_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    visible_until: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    workflow_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_delay_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    progress: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    progress_data: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_checkpoint: Option<Value>,
}

/// A job as this binding answers it: the envelope the client sent, with the job's own fields
/// over it (a field without a value leaves the envelope's, as when the server built this
/// answer in SQL with `envelope || jsonb_strip_nulls(...)`). The JSON values the job holds
/// (result, errors, progress) are answered without their null object fields, as that
/// rendering had them: clients have always seen them so.
pub(super) fn job_answer(job: Job) -> Value {
    let Job {
        id,
        job_type,
        queue,
        priority,
        state,
        attempt,
        max_attempts,
        created_at,
        scheduled_at,
        next_attempt_at,
        started_at,
        completed_at,
        cancelled_at,
        discarded_at,
        expires_at,
        worker_id,
        visible_until,
        workflow_id,
        retry_delay_ms,
        result,
        error,
        errors,
        progress,
        progress_data,
        progress_updated_at: _,
        last_checkpoint,
        mut envelope,
    } = job;
    let fields = JobFields {
        id: &id,
        job_type: &job_type,
        queue: &queue,
        priority,
        state,
        attempt,
        max_attempts,
        created_at,
        enqueued_at: created_at,
        scheduled_at,
        next_attempt_at,
        started_at,
        completed_at,
        cancelled_at,
        discarded_at,
        expires_at,
        worker_id: worker_id.as_deref(),
        visible_until,
        workflow_id: workflow_id.as_deref(),
        retry_delay_ms,
        result: without_nulls(result),
        error: without_nulls(error),
        errors: (!errors.is_empty()).then(|| strip_nulls(Value::Array(errors))),
        progress: without_nulls(progress),
        progress_data: without_nulls(progress_data),
        last_checkpoint: without_nulls(last_checkpoint),
    };
    let Ok(Value::Object(fields)) = serde_json::to_value(fields) else {
        unreachable!("a struct serializes as an object")
    };
    envelope.extend(fields);
    Value::Object(envelope)
}

/// A batch's answer for a job (the HTTP binding's batch example): its id, type, queue, state,
/// priority, attempts and times, and what the client stated about the job itself — not the
/// args and options it just sent.
fn summary(job: Job) -> Value {
    let mut answer = json!({
        "id": job.id,
        "type": job.job_type,
        "queue": job.queue,
        "state": job.state,
        "priority": job.priority,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "created_at": job.created_at,
        "enqueued_at": job.created_at,
    });
    if let Some(at) = job.scheduled_at {
        answer["scheduled_at"] = json!(at);
    }
    let Value::Object(fields) = &mut answer else {
        unreachable!("an object")
    };
    fields.extend(job.envelope);
    answer
}

/// The jobs an enqueue stored, as it asked for them; an `on_conflict: ignore` duplicate says
/// so and names itself.
pub(super) fn inserted_answers(inserted: Inserted) -> Vec<Value> {
    let (answer, duplicate) = (inserted.answer, inserted.duplicate);
    inserted
        .jobs
        .into_iter()
        .map(|stored| match answer {
            Answer::Summary => summary(stored),
            Answer::Job => {
                let id = stored.id.clone();
                let mut answer = job_answer(stored);
                if duplicate {
                    answer["duplicate"] = Value::Bool(true);
                    answer["existing_job_id"] = Value::String(id);
                }
                answer
            }
        })
        .collect()
}

/// A job's progress as `GET /jobs/{id}/progress` answers it (ojs-progress §7.1), read off the
/// job's answer: nulls when none was reported, `updated_at` with a progress.
pub(super) fn progress_answer(stored: Job) -> Value {
    let (id, updated_at) = (stored.id.clone(), stored.progress_updated_at.clone());
    let job = job_answer(stored);
    let mut answer = json!({
        "job_id": id,
        "state": job["state"],
        "progress": job.get("progress"),
        "data": job.get("progress_data"),
        // The SDKs' report carries a `message`, kept as `data.message`; they read it back here.
        "message": job.get("progress_data").and_then(|data| data.get("message")),
        "updated_at": if job.get("progress").is_some() { updated_at } else { None },
    });
    if let Some(checkpoint) = without_nulls(job.get("last_checkpoint").cloned()) {
        answer["last_checkpoint"] = checkpoint;
    }
    answer
}

/// A queue's stats (`GET /queues/{name}/stats`, and the answer to pausing or resuming one):
/// its summary under `queue` (as the admin API nests it) and `stats` (as the core binding
/// does), each with the queue's name, state, depth bound (null when none), depth and a count
/// per job state.
pub(super) fn queue_stats_answer(stats: QueueStats) -> Value {
    let mut summary = json!({
        "name": stats.name,
        "queue": stats.name,
        "max_depth": stats.max_depth,
        "paused": stats.paused,
        "status": if stats.paused { "paused" } else { "active" },
        "depth": stats.counts.depth(),
    });
    for state in State::ALL {
        summary[state.as_str()] = json!(stats.counts.of(state));
    }
    json!({ "queue": summary.clone(), "name": stats.name, "stats": summary })
}

/// `GET /queues` (and `/admin/queues`): each queue's name, state and jobs waiting or active.
pub(super) fn queues_answer(queues: Vec<QueueSummary>, total: i64, page: Page) -> Value {
    let queues = queues
        .into_iter()
        .map(|queue| {
            json!({
                "name": queue.name,
                "paused": queue.paused,
                "status": if queue.paused { "paused" } else { "active" },
                "counts": { "available": queue.available, "active": queue.active,
                            "scheduled": queue.scheduled, "retryable": queue.retryable },
            })
        })
        .collect();
    paged("queues", queues, total, page)
}

/// `GET /admin/tenants`: the tenants that have jobs, with their job counts.
pub(super) fn tenants_answer(tenants: Tenants) -> Value {
    let listed: Vec<Value> = tenants
        .tenants
        .into_iter()
        .map(|(tenant, jobs)| json!({ "tenant_id": tenant, "jobs": jobs }))
        .collect();
    json!({ "tenants": listed, "truncated": tenants.truncated })
}

/// `GET /admin/stats` (and a tenant's): jobs by state, queues, workers and throughput.
pub(super) fn stats_answer(stats: &Stats) -> Value {
    let mut jobs = json!({});
    for state in State::ALL {
        jobs[state.as_str()] = json!(stats.jobs.of(state));
    }
    json!({
        "jobs": jobs,
        // Every job counted once (the conformance suite's EXT-MT-003 reads it for a tenant).
        "total_jobs": State::ALL.iter().map(|state| stats.jobs.of(*state)).sum::<i64>(),
        "queues": stats.queues,
        "workers": stats.workers,
        "throughput": {
            "processed_per_minute": stats.completed_last_minute,
            "failed_per_minute": stats.failed_last_minute,
        },
    })
}

/// One queue in `GET /admin/scheduling/stats` (ojs-fair-scheduling §10.2).
#[derive(Serialize)]
struct QueueDispatchFields<'a> {
    name: &'a str,
    dispatch_count_1m: i64,
    dispatch_ratio_1m: f64,
    /// Null when no claim of the window could be timed (see [`QueueDispatch::avg_wait_ms`]).
    avg_wait_ms: Option<i64>,
    active_jobs: i64,
    available_jobs: i64,
}

/// `GET /admin/scheduling/stats`: each queue's share of the last minute's claims, as §10.2
/// answers it (`queues`, `window`), and the same under `stats` (the conformance suite's
/// EXT-FS-002 reads that).
pub(super) fn scheduling_answer(queues: &[QueueDispatch]) -> Value {
    let queues: Vec<QueueDispatchFields> = queues
        .iter()
        .map(|queue| QueueDispatchFields {
            name: &queue.name,
            dispatch_count_1m: queue.dispatched,
            dispatch_ratio_1m: queue.ratio,
            avg_wait_ms: queue.avg_wait_ms.map(|ms| ms.round() as i64),
            active_jobs: queue.active_jobs,
            available_jobs: queue.available_jobs,
        })
        .collect();
    let stats = json!({ "queues": queues, "window": WINDOW });
    json!({ "queues": stats["queues"], "window": WINDOW, "stats": stats })
}

/// `value` without null object fields at any depth, as PostgreSQL's `jsonb_strip_nulls`;
/// `None` when nothing is left but null.
fn without_nulls(value: Option<Value>) -> Option<Value> {
    value.map(strip_nulls).filter(|value| !value.is_null())
}

fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .filter(|(_, value)| !value.is_null())
                .map(|(name, value)| (name, strip_nulls(value)))
                .collect::<Map<String, Value>>(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

/// A subscription's answer: its fields at the top (as the webhooks extension shows them) and
/// under `subscription` (as this binding's other answers nest their object).
pub(super) fn subscription(webhook: Value) -> Value {
    let mut answer = webhook.clone();
    answer["subscription"] = webhook;
    answer
}

/// ojs-progress §10.3: the numeric progress as a header, and no caching.
pub(super) fn progress_headers(progress: &Value, headers: &mut Vec<(&'static str, String)>) {
    if let Some(value) = progress["progress"].as_f64() {
        headers.push(("x-ojs-progress", value.to_string()));
    }
    if let Some(modified) = progress["updated_at"].as_str().and_then(http_date) {
        headers.push(("last-modified", modified));
    }
    headers.push(("cache-control", "no-cache".to_string()));
}

/// An RFC 3339 time as an HTTP date (RFC 9110 §5.6.7: `Sun, 06 Nov 1994 08:49:37 GMT`).
pub(super) fn http_date(rfc3339: &str) -> Option<String> {
    use time::format_description::well_known::Rfc3339;
    let at = time::OffsetDateTime::parse(rfc3339, &Rfc3339)
        .ok()?
        .to_offset(time::UtcOffset::UTC);
    let format = time::format_description::parse_borrowed::<2>(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT",
    )
    .ok()?;
    at.format(&format).ok()
}

/// Tells a producer that a bounded queue is past its warning threshold (ext-backpressure).
pub(super) fn pressure_headers(inserted: &Inserted, headers: &mut Vec<(&'static str, String)>) {
    if let Some(pressure) = inserted.pressure {
        headers.push(("x-ojs-queue-depth", pressure.depth.to_string()));
        headers.push(("x-ojs-queue-bound", pressure.bound.to_string()));
        headers.push(("x-ojs-queue-pressure", format!("{:.2}", pressure.ratio())));
    }
}

/// A list under its own name and, as the admin API reads it, under `items` with pagination.
/// One cron schedule: under `cron` (this binding's first form) and `cron_job` (ojs-cron §8).
pub(super) fn cron_answer(cron: Value) -> Value {
    json!({ "cron": cron.clone(), "cron_job": cron })
}

pub(super) fn listing(name: &str, items: Vec<Value>) -> Value {
    let total = items.len();
    let per_page = total.max(1) as i64;
    paged(name, items, total as i64, Page { page: 1, per_page })
}

/// One page of a listing that can grow without bound (queues, workers), as the admin API
/// pages (ojs-admin-api: `?page=` from 1 and `?per_page=`, answered in `pagination`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Page {
    pub page: i64,
    pub per_page: i64,
}

impl Page {
    const DEFAULT_PER_PAGE: i64 = 100;
    const MAX_PER_PAGE: i64 = 1_000;

    /// `?page=` (default 1) and `?per_page=` (1 to 1,000, default 100); anything else is 400.
    pub fn of(query: &HashMap<String, String>) -> Result<Page, OjsError> {
        let number = |name: &str, default: i64, max: i64| match query.get(name) {
            None => Ok(default),
            Some(text) => text
                .parse::<i64>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| OjsError::invalid(format!("{name} is an integer from 1 to {max}, not {text:?}"))),
        };
        Ok(Page {
            page: number("page", 1, i64::from(i32::MAX))?,
            per_page: number("per_page", Self::DEFAULT_PER_PAGE, Self::MAX_PER_PAGE)?,
        })
    }

    pub fn offset(self) -> i64 {
        (self.page - 1) * self.per_page
    }
}

/// `items` (one page of `total`) under `name` and `items`, with the admin API's `pagination`.
pub(super) fn paged(name: &str, items: Vec<Value>, total: i64, page: Page) -> Value {
    let total_pages = (total + page.per_page - 1) / page.per_page;
    let mut body = json!({ "items": items, "pagination": {
        "total": total, "page": page.page, "per_page": page.per_page, "total_pages": total_pages } });
    body[name] = body["items"].clone();
    body
}

/// Checks `PUT /admin/queues/:name/config`. Of ext-backpressure, depth bounds with the reject
/// strategy are supported; size bounds and the block and drop-oldest strategies are refused
/// rather than silently ignored.
pub(super) fn queue_settings(body: Value) -> Result<Value, OjsError> {
    let Value::Object(mut fields) = body else {
        return Err(OjsError::invalid("queue settings are a JSON object"));
    };
    if let Some(unknown) = fields.keys().find(|key| *key != "backpressure") {
        return Err(OjsError::invalid(format!(
            "unsupported queue setting {unknown:?} (supported: backpressure)"
        )));
    }
    let Some(Value::Object(backpressure)) = fields.remove("backpressure") else {
        return Err(OjsError::invalid("\"backpressure\" must be an object"));
    };
    let max_depth = match backpressure.get("max_depth") {
        None => 0,
        Some(value) => value
            .as_i64()
            .filter(|depth| *depth >= 0)
            .ok_or_else(|| OjsError::invalid("backpressure.max_depth must be a non-negative integer"))?,
    };
    match backpressure.get("strategy").and_then(Value::as_str) {
        None | Some("reject") => {}
        Some(other) => {
            return Err(OjsError::invalid(format!(
                "backpressure strategy {other:?} is not supported (supported: reject)"
            )));
        }
    }
    if backpressure
        .get("max_size_bytes")
        .and_then(Value::as_i64)
        .is_some_and(|size| size != 0)
    {
        return Err(OjsError::invalid(
            "backpressure.max_size_bytes is not supported; bound max_depth",
        ));
    }
    let warning = match backpressure.get("warning_threshold") {
        None => 0.8,
        Some(value) => value
            .as_f64()
            .filter(|fraction| (0.0..=1.0).contains(fraction))
            .ok_or_else(|| OjsError::invalid("backpressure.warning_threshold must be from 0 to 1"))?,
    };
    Ok(json!({ "backpressure": { "max_depth": max_depth, "strategy": "reject", "warning_threshold": warning } }))
}

/// Most queues one fetch may list: each is an index range scan of the claim, so a worker
/// serving more should fetch from them in several requests.
pub(super) const MAX_FETCH_QUEUES: usize = 100;

/// A fetch's `queues` (the default queue when absent), each once in the order first listed: a
/// queue listed twice would be scanned twice for the same jobs.
pub(super) fn fetch_queues(body: &Value) -> Result<Vec<String>, OjsError> {
    let names = match body.get("queues") {
        None => return Ok(vec![envelope::DEFAULT_QUEUE.to_string()]),
        Some(Value::Array(names)) => names,
        Some(_) => return Err(OjsError::invalid("\"queues\" must be an array of queue names")),
    };
    let mut seen = HashSet::new();
    let mut queues = Vec::new();
    for name in names {
        match name.as_str() {
            Some(name) if envelope::is_valid_queue(name) => {
                if seen.insert(name) {
                    queues.push(name.to_string());
                }
            }
            _ => return Err(OjsError::invalid("\"queues\" must be an array of valid queue names")),
        }
        if queues.len() > MAX_FETCH_QUEUES {
            return Err(OjsError::invalid(format!(
                "a fetch lists at most {MAX_FETCH_QUEUES} queues; fetch from more in several requests"
            )));
        }
    }
    Ok(queues)
}

/// Largest weight a fetch may give a queue (`weights`): enough for any ratio worth asking.
const MAX_WEIGHT: u64 = 1_000;

/// A fetch's `strategy` and `weights` (ext-fair-scheduling §5.2, §7): `strict` (the default, the
/// order the queues are listed in), `round-robin`, or `weighted` (weights by queue name, 1 to
/// [`MAX_WEIGHT`], 1 for a queue not named; `weights` alone implies it). `least-loaded` needs
/// per-worker capacities the worker protocol does not carry, and is refused as unsupported.
pub(super) fn fetch_strategy(body: &Value, queues: &[String]) -> Result<Strategy, OjsError> {
    let weights = match body.get("weights") {
        None | Some(Value::Null) => None,
        Some(Value::Object(weights)) => {
            let listed: HashSet<&String> = queues.iter().collect();
            if let Some(unknown) = weights.keys().find(|name| !listed.contains(name)) {
                return Err(OjsError::invalid(format!(
                    "\"weights\" names queue {unknown:?}, which the fetch does not list"
                )));
            }
            let weight = |queue: &String| match weights.get(queue) {
                None => Ok(1),
                Some(w) => w
                    .as_u64()
                    .filter(|w| (1..=MAX_WEIGHT).contains(w))
                    .map(|w| w as u32)
                    .ok_or_else(|| {
                        OjsError::invalid(format!("weights.{queue} must be an integer from 1 to {MAX_WEIGHT}"))
                    }),
            };
            Some(queues.iter().map(weight).collect::<Result<Vec<u32>, _>>()?)
        }
        Some(_) => {
            return Err(OjsError::invalid(
                "\"weights\" must be an object of queue names to weights",
            ));
        }
    };
    match (optional_string(body, "strategy")?.as_deref(), weights) {
        (None | Some("weighted"), Some(weights)) => Ok(Strategy::Weighted(weights)),
        (Some("weighted"), None) => Ok(Strategy::Weighted(vec![1; queues.len()])),
        (None | Some("strict"), None) => Ok(Strategy::Strict),
        (Some("round-robin"), None) => Ok(Strategy::RoundRobin),
        (Some("strict" | "round-robin"), Some(_)) => {
            Err(OjsError::invalid("\"weights\" go with the \"weighted\" strategy"))
        }
        (Some("least-loaded"), _) => Err(OjsError::unsupported(
            "the least-loaded strategy is not supported: fetch with strict, round-robin or weighted",
        )),
        (Some(other), _) => Err(OjsError::invalid(format!(
            "unknown fetch strategy {other:?} (strict, round-robin or weighted)"
        ))),
    }
}

pub(super) fn claim(body: &Value, tenant: &str) -> Result<Claim, OjsError> {
    let job_id = optional_string(body, "job_id")?
        .or(optional_string(body, "id")?)
        .ok_or_else(|| OjsError::invalid("missing \"job_id\""))?;
    let attempt = match body.get("attempt") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            value
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| OjsError::invalid("\"attempt\" must be an integer"))?,
        ),
    };
    Ok(Claim {
        job_id,
        attempt,
        worker_id: optional_string(body, "worker_id")?,
        tenant: tenant.to_string(),
    })
}

pub(super) fn optional_string(body: &Value, field: &str) -> Result<Option<String>, OjsError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(OjsError::invalid(format!("\"{field}\" must be a string"))),
    }
}

/// Longest worker id: an id, not a payload (every heartbeat stores it, its events carry it and
/// the workers listing returns it).
const MAX_WORKER_ID_BYTES: usize = 256;

/// A request's `worker_id`: a string of at most [`MAX_WORKER_ID_BYTES`], else 400.
pub(super) fn worker_id(body: &Value) -> Result<Option<String>, OjsError> {
    let id = optional_string(body, "worker_id")?;
    if id.as_ref().is_some_and(|id| id.len() > MAX_WORKER_ID_BYTES) {
        return Err(OjsError::invalid(format!(
            "\"worker_id\" is at most {MAX_WORKER_ID_BYTES} bytes"
        )));
    }
    Ok(id)
}

pub(super) fn optional_ms(body: &Value, field: &str) -> Result<Option<i32>, OjsError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_i64()
            .filter(|ms| (1..=i32::MAX as i64).contains(ms))
            .map(|ms| Some(ms as i32))
            .ok_or_else(|| OjsError::invalid(format!("\"{field}\" must be a positive integer"))),
    }
}

pub(super) fn job_id(text: &str) -> Result<&str, OjsError> {
    if envelope::is_uuid(text) {
        Ok(text)
    } else {
        Err(OjsError::not_found(format!("job {text} not found (ids are UUIDs)")))
    }
}

pub(super) fn workflow_id(text: &str) -> Result<&str, OjsError> {
    if envelope::is_uuid(text) {
        Ok(text)
    } else {
        Err(OjsError::not_found(format!(
            "workflow {text} not found (ids are UUIDs)"
        )))
    }
}

pub(super) fn queue_name(text: &str) -> Result<&str, OjsError> {
    if envelope::is_valid_queue(text) {
        Ok(text)
    } else {
        Err(OjsError::invalid(format!("invalid queue name {text:?}")))
    }
}

/// The answer to an ACK or NACK: the job's fields at the top (as the core binding reads them)
/// and the job under `job` (as the extension suites read it), with `flag` set.
pub(super) fn settled(job: Value, flag: &str) -> Value {
    let mut answer = job.clone();
    answer[flag] = Value::Bool(true);
    answer["job"] = job;
    answer
}

pub(super) fn parse_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .filter(|(key, _)| !key.is_empty())
        .map(|(key, value)| (key.to_string(), percent_decode(value)))
        .collect()
}

/// Decodes `%XX` escapes (query values are ids, names and lists: `,` and `:` arrive escaped);
/// a malformed escape is kept as it is.
pub(super) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match escaped {
            Some(byte) => {
                decoded.push(byte);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// A comma-separated query parameter as a list (absent: empty).
pub(super) fn list_param(query: &HashMap<String, String>, name: &str) -> Vec<String> {
    query
        .get(name)
        .map(|v| v.split(',').filter(|s| !s.is_empty()).map(String::from).collect())
        .unwrap_or_default()
}
