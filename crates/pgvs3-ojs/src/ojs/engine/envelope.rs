//! The job envelope as clients send it: validation, defaults, and the retry policy. Nothing here
//! touches the database.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::EngineError;

pub const DEFAULT_QUEUE: &str = "default";
/// The spec's default visibility timeout for a claimed job: 30 minutes (ojs-worker-protocol
/// §5.2), long enough for most jobs; shorter ones say so per job, longer ones heartbeat.
pub const DEFAULT_VISIBILITY_MS: i32 = 1_800_000;

/// A validated job ready to insert.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub id: String,
    pub queue: String,
    pub job_type: String,
    pub priority: i32,
    pub max_attempts: i32,
    /// What the client sent, unknown fields included, with `id` and `queue` filled in.
    pub envelope: Value,
    /// An absolute start time (RFC 3339), when the client gave one.
    pub scheduled_at: Option<String>,
    /// A start delay in milliseconds (relative `scheduled_at` such as `+PT5S`).
    pub delay_ms: Option<f64>,
    pub expires_at: Option<String>,
    /// A time to live in milliseconds (relative `expires_at` such as `+PT1H`).
    pub ttl_ms: Option<f64>,
    pub visibility_ms: i32,
    pub unique: Option<Unique>,
    pub rate_limit: Option<RateLimit>,
    /// `options.depends_on`: ids of existing jobs this one waits for (at most
    /// [`MAX_DEPENDENCIES`], no repeats).
    pub depends_on: Vec<String>,
}

/// Jobs one job may wait for; a larger fan-in belongs in a batch workflow with callbacks.
pub const MAX_DEPENDENCIES: usize = 100;

impl NewJob {
    /// Refuses a job that names dependencies where they cannot apply (`context`: a workflow's
    /// member, a cron template), rather than running it without them.
    pub fn without_dependencies(self, context: &str) -> Result<NewJob, EngineError> {
        if self.depends_on.is_empty() {
            Ok(self)
        } else {
            Err(EngineError::invalid(format!(
                "options.depends_on is not supported in {context}; name the jobs of a plain enqueue"
            )))
        }
    }
}

/// `options.rate_limit` (ext-rate-limiting): the partition key and its limits on job starts.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimit {
    pub key: String,
    /// Most jobs of the key active at once.
    pub concurrency: Option<i32>,
    /// Most starts per window: (count, window length in ms).
    pub rate: Option<(i32, i64)>,
    /// Least time between two starts, in ms.
    pub throttle_ms: Option<i64>,
}

impl RateLimit {
    /// The limits as `ojs.rate_limits` stores them.
    pub fn policy(&self) -> Value {
        json!({
            "concurrency": self.concurrency,
            "rate": self.rate.map(|(count, _)| count),
            "rate_period_ms": self.rate.map(|(_, period)| period),
            "throttle_ms": self.throttle_ms,
        })
    }
}

/// `options.unique`: which jobs count as duplicates of this one, and what to do about them.
#[derive(Debug, Clone)]
pub struct Unique {
    pub key: String,
    pub period_ms: Option<f64>,
    pub states: Vec<String>,
    pub on_conflict: OnConflict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    Reject,
    Ignore,
    Replace,
}

/// Validates one envelope. `max_args_bytes` bounds the serialized `args`.
pub fn parse_job(value: Value, max_args_bytes: usize) -> Result<NewJob, EngineError> {
    let Value::Object(mut fields) = value else {
        return Err(EngineError::invalid("a job must be a JSON object"));
    };
    let job_type = parse_type(fields.get("type"))?;
    check_args(fields.get("args"), max_args_bytes)?;
    if let Some(meta) = fields.get("meta")
        && !meta.is_object()
    {
        return Err(EngineError::invalid("\"meta\" must be a JSON object"));
    }
    let id = match fields.get("id") {
        None | Some(Value::Null) => new_uuid_v7(),
        Some(Value::String(text)) if is_uuid_v7(text) => text.clone(),
        Some(_) => return Err(EngineError::invalid("\"id\" must be a lower-case UUIDv7")),
    };
    fields.insert("id".into(), Value::String(id.clone()));

    let empty = Map::new();
    let options = match fields.get("options") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(options)) => options,
        Some(_) => return Err(EngineError::invalid("\"options\" must be a JSON object")),
    };
    // Options may also come at the top level (the spec's flat form); `options` wins.
    let option = |name: &str| options.get(name).or_else(|| fields.get(name)).filter(|v| !v.is_null());

    let queue = parse_queue(option("queue"))?;
    let depends_on = match option("depends_on") {
        None => Vec::new(),
        Some(deps) => parse_dependencies(deps, &id)?,
    };
    let priority = match option("priority") {
        None => 0,
        Some(value) => parse_priority(value)?,
    };
    let retry = RetryPolicy::from_options(option("retry"))?;
    let max_attempts = retry.max_attempts;
    let visibility_ms = parse_visibility(option("visibility_timeout_ms").or_else(|| option("timeout_ms")))?;
    // An error names the field the client sent.
    let (scheduled_at, delay_ms) = match option("scheduled_at") {
        Some(value) => moment(Some(value), "scheduled_at")?,
        None => moment(option("delay_until"), "delay_until")?,
    };
    let (expires_at, ttl_ms) = moment(option("expires_at"), "expires_at")?;
    let unique = match option("unique") {
        None => None,
        Some(spec) => Some(parse_unique(spec, &job_type, &queue, &fields)?),
    };
    let rate_limit = match option("rate_limit") {
        None => None,
        Some(spec) => Some(parse_rate_limit(spec, &queue)?),
    };
    fields.insert("queue".into(), Value::String(queue.clone()));
    Ok(NewJob {
        id,
        queue,
        job_type,
        priority,
        max_attempts,
        envelope: Value::Object(fields),
        scheduled_at,
        delay_ms,
        expires_at,
        ttl_ms,
        visibility_ms,
        unique,
        rate_limit,
        depends_on,
    })
}

/// `type`: dot-separated lower-case segments.
fn parse_type(value: Option<&Value>) -> Result<String, EngineError> {
    match value {
        Some(Value::String(text)) if is_valid_type(text) => Ok(text.clone()),
        Some(Value::String(text)) => Err(EngineError::invalid(format!(
            "invalid job type {text:?}: use dot-separated lower-case segments such as \"email.send\""
        ))),
        Some(_) => Err(EngineError::invalid("\"type\" must be a string")),
        None => Err(EngineError::invalid("missing required field \"type\"")),
    }
}

/// `args`: an array, at most `max_args_bytes` serialized.
fn check_args(value: Option<&Value>, max_args_bytes: usize) -> Result<(), EngineError> {
    let args = match value {
        Some(args @ Value::Array(_)) => args,
        Some(_) => return Err(EngineError::invalid("\"args\" must be a JSON array")),
        None => return Err(EngineError::invalid("missing required field \"args\"")),
    };
    let args_bytes = serde_json::to_vec(args).map_or(0, |bytes| bytes.len());
    if args_bytes > max_args_bytes {
        return Err(EngineError::invalid(format!(
            "\"args\" is {args_bytes} bytes, over this server's limit of {max_args_bytes}"
        )));
    }
    Ok(())
}

/// `queue`, or the default queue.
fn parse_queue(value: Option<&Value>) -> Result<String, EngineError> {
    match value {
        None => Ok(DEFAULT_QUEUE.to_string()),
        Some(Value::String(name)) if is_valid_queue(name) => Ok(name.clone()),
        Some(_) => Err(EngineError::invalid(
            "invalid queue name: use lower-case letters, digits, '-' and '.', starting with a letter or digit",
        )),
    }
}

/// `visibility_timeout_ms` (or `timeout_ms`): positive milliseconds that fit an `int`.
fn parse_visibility(value: Option<&Value>) -> Result<i32, EngineError> {
    match value {
        None => Ok(DEFAULT_VISIBILITY_MS),
        Some(value) => match value.as_i64() {
            Some(ms) if (1..=i32::MAX as i64).contains(&ms) => Ok(ms as i32),
            _ => Err(EngineError::invalid(
                "timeouts must be positive integers of milliseconds",
            )),
        },
    }
}

/// `options.depends_on`: an array of job ids (UUIDs), none of them the job's own.
fn parse_dependencies(deps: &Value, own_id: &str) -> Result<Vec<String>, EngineError> {
    let Value::Array(list) = deps else {
        return Err(EngineError::invalid("options.depends_on must be an array of job ids"));
    };
    if list.len() > MAX_DEPENDENCIES {
        return Err(EngineError::invalid(format!(
            "options.depends_on names at most {MAX_DEPENDENCIES} jobs"
        )));
    }
    let mut ids: Vec<String> = Vec::with_capacity(list.len());
    for dep in list {
        match dep {
            Value::String(id) if is_uuid(id) && id != own_id => {
                if !ids.contains(id) {
                    ids.push(id.clone());
                }
            }
            Value::String(id) if id == own_id => {
                return Err(EngineError::invalid("a job cannot depend on itself"));
            }
            _ => return Err(EngineError::invalid("options.depends_on must be an array of job ids")),
        }
    }
    Ok(ids)
}

/// Accepts the spec's form (`rate: {limit, period}`, `throttle: {limit, period}`) and the short
/// ones the conformance cases use (`rate: 1, period: "second"`, `max_per_second: 1`). Without a
/// key the limit is the queue's. Only `on_limit: "wait"` (the default) is supported.
fn parse_rate_limit(spec: &Value, queue: &str) -> Result<RateLimit, EngineError> {
    let Value::Object(spec) = spec else {
        return Err(EngineError::invalid("\"rate_limit\" must be a JSON object"));
    };
    let key = match spec.get("key") {
        None => format!("queue:{queue}"),
        Some(Value::String(key)) if is_valid_rate_key(key) => key.clone(),
        Some(_) => {
            return Err(EngineError::invalid(
                "rate_limit.key must be letters, digits and . _ : - (starting with a letter or digit)",
            ));
        }
    };
    let count = |value: &Value, field: &str| {
        value
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .filter(|n| *n >= 0)
            .ok_or_else(|| EngineError::invalid(format!("rate_limit.{field} must be a non-negative integer")))
    };
    let period = |value: Option<&Value>, field: &str| -> Result<i64, EngineError> {
        let millis = match value.and_then(Value::as_str) {
            Some("second") => 1_000,
            Some("minute") => 60_000,
            Some("hour") => 3_600_000,
            Some("day") => 86_400_000,
            Some(text) => parse_iso_duration(text)?.as_millis() as i64,
            None => return Err(EngineError::invalid(format!("rate_limit.{field} needs a period"))),
        };
        if millis == 0 {
            return Err(EngineError::invalid(format!(
                "rate_limit.{field} period must be positive"
            )));
        }
        Ok(millis)
    };
    let concurrency = spec.get("concurrency").map(|v| count(v, "concurrency")).transpose()?;
    let rate = match (spec.get("rate"), spec.get("max_per_second")) {
        (Some(Value::Object(rate)), _) => Some((
            count(rate.get("limit").unwrap_or(&Value::Null), "rate.limit")?,
            period(rate.get("period"), "rate.period")?,
        )),
        (Some(limit), _) => Some((count(limit, "rate")?, period(spec.get("period"), "period")?)),
        (None, Some(limit)) => Some((count(limit, "max_per_second")?, 1_000)),
        (None, None) => None,
    };
    let throttle_ms = match spec.get("throttle") {
        None => None,
        Some(Value::Object(throttle)) => {
            let limit = count(throttle.get("limit").unwrap_or(&Value::Null), "throttle.limit")?.max(1);
            Some(period(throttle.get("period"), "throttle.period")? / i64::from(limit))
        }
        Some(_) => {
            return Err(EngineError::invalid(
                "rate_limit.throttle must be {\"limit\", \"period\"}",
            ));
        }
    };
    match spec.get("on_limit").and_then(Value::as_str) {
        None | Some("wait") => {}
        Some(other) => {
            return Err(EngineError::invalid(format!(
                "rate_limit.on_limit {other:?} is not supported (supported: wait)"
            )));
        }
    }
    Ok(RateLimit {
        key,
        concurrency,
        rate,
        throttle_ms,
    })
}

pub fn is_valid_rate_key(key: &str) -> bool {
    key.len() <= 255
        && key.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && key.chars().all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c))
}

/// A point in time given absolutely (RFC 3339) or relative to now (`+PT5S`, as milliseconds).
fn moment(value: Option<&Value>, field: &str) -> Result<(Option<String>, Option<f64>), EngineError> {
    match value {
        None => Ok((None, None)),
        Some(Value::String(text)) => match text.strip_prefix('+') {
            Some(duration) => {
                let duration = parse_iso_duration(duration)
                    .map_err(|err| EngineError::invalid(format!("\"{field}\": {}", err.message)))?;
                Ok((None, Some(duration.as_secs_f64() * 1000.0)))
            }
            None => Ok((Some(timestamp(text, field)?), None)),
        },
        Some(_) => Err(EngineError::invalid(format!(
            "\"{field}\" must be an RFC 3339 timestamp or +<ISO 8601 duration>"
        ))),
    }
}

fn parse_priority(value: &Value) -> Result<i32, EngineError> {
    let named = value.as_str().and_then(|name| match name {
        "critical" => Some(100),
        "high" => Some(50),
        "normal" | "default" => Some(0),
        "low" => Some(-50),
        "bulk" | "lowest" => Some(-100),
        _ => None,
    });
    match named.or_else(|| value.as_i64().filter(|p| (-100..=100).contains(p)).map(|p| p as i32)) {
        Some(priority) => Ok(priority),
        None => Err(EngineError::invalid("\"priority\" must be an integer from -100 to 100")),
    }
}

/// Checked here as RFC 3339 (a date and time that exist, with a zone), so that an impossible
/// one is reported under its field's name rather than by PostgreSQL on insert.
fn timestamp(text: &str, field: &str) -> Result<String, EngineError> {
    let bytes = text.as_bytes();
    let shaped = bytes.len() >= 20
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && (bytes[10] == b'T' || bytes[10] == b't')
        && (text.ends_with('Z')
            || text.ends_with('z')
            || bytes[bytes.len() - 6] == b'+'
            || bytes[bytes.len() - 6] == b'-');
    let exists = || time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).is_ok();
    if shaped && exists() {
        Ok(text.to_string())
    } else {
        Err(EngineError::invalid(format!(
            "\"{field}\" must be an RFC 3339 timestamp with a time zone"
        )))
    }
}

fn parse_unique(spec: &Value, job_type: &str, queue: &str, fields: &Map<String, Value>) -> Result<Unique, EngineError> {
    let Value::Object(spec) = spec else {
        return Err(EngineError::invalid("\"unique\" must be a JSON object"));
    };
    let keys: Vec<&str> = match spec.get("keys") {
        None => vec!["type", "args", "queue"],
        Some(Value::Array(keys)) => keys.iter().filter_map(Value::as_str).collect(),
        Some(_) => return Err(EngineError::invalid("\"unique.keys\" must be an array of field names")),
    };
    let mut identity = serde_json::Map::new();
    for key in keys {
        let value = match key {
            "type" => Value::String(job_type.into()),
            "queue" => Value::String(queue.into()),
            other => fields.get(other).cloned().unwrap_or(Value::Null),
        };
        identity.insert(key.into(), value);
    }
    // serde_json keeps maps sorted, so equal identities serialize equally.
    let key = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(Value::Object(identity).to_string().as_bytes()))
    };
    let period_ms = match spec.get("period") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(parse_iso_duration(text)?.as_secs_f64() * 1000.0),
        Some(_) => return Err(EngineError::invalid("\"unique.period\" must be an ISO 8601 duration")),
    };
    let states = match spec.get("states") {
        None => ["available", "active", "scheduled", "retryable", "pending"]
            .map(String::from)
            .to_vec(),
        Some(Value::Array(states)) => states.iter().filter_map(Value::as_str).map(String::from).collect(),
        Some(_) => return Err(EngineError::invalid("\"unique.states\" must be an array of states")),
    };
    let on_conflict = match spec.get("on_conflict").and_then(Value::as_str) {
        None | Some("reject") => OnConflict::Reject,
        Some("ignore") => OnConflict::Ignore,
        Some("replace") => OnConflict::Replace,
        Some(other) => return Err(EngineError::invalid(format!("unknown unique.on_conflict {other:?}"))),
    };
    Ok(Unique {
        key,
        period_ms,
        states,
        on_conflict,
    })
}

/// `options.retry`, with the spec's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub max_attempts: i32,
    pub initial: Duration,
    pub coefficient: f64,
    pub max_interval: Duration,
    pub jitter: bool,
    pub strategy: Backoff,
    pub non_retryable: Vec<String>,
    pub dead_letter: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    Exponential,
    Linear,
    Constant,
}

impl RetryPolicy {
    pub fn from_options(retry: Option<&Value>) -> Result<RetryPolicy, EngineError> {
        let mut policy = RetryPolicy {
            max_attempts: 3,
            initial: Duration::from_secs(1),
            coefficient: 2.0,
            max_interval: Duration::from_secs(300),
            jitter: true,
            strategy: Backoff::Exponential,
            non_retryable: Vec::new(),
            dead_letter: false,
        };
        let Some(retry) = retry.filter(|v| !v.is_null()) else {
            return Ok(policy);
        };
        let Value::Object(retry) = retry else {
            return Err(EngineError::unprocessable("\"retry\" must be a JSON object"));
        };
        if let Some(value) = retry.get("max_attempts") {
            policy.max_attempts = value
                .as_i64()
                .filter(|n| (1..=10_000).contains(n))
                .ok_or_else(|| EngineError::unprocessable("retry.max_attempts must be an integer of at least 1"))?
                as i32;
        }
        if let Some(value) = retry.get("initial_interval") {
            policy.initial = iso_field(value, "retry.initial_interval")?;
        }
        if let Some(value) = retry.get("max_interval") {
            policy.max_interval = iso_field(value, "retry.max_interval")?;
        }
        if let Some(value) = retry.get("backoff_coefficient") {
            policy.coefficient = value.as_f64().filter(|c| *c >= 1.0).ok_or_else(|| {
                EngineError::unprocessable("retry.backoff_coefficient must be a number of at least 1")
            })?;
        }
        if let Some(value) = retry.get("jitter") {
            policy.jitter = value
                .as_bool()
                .ok_or_else(|| EngineError::unprocessable("retry.jitter must be a boolean"))?;
        }
        if let Some(value) = retry.get("backoff_strategy").or_else(|| retry.get("backoff_type")) {
            policy.strategy = match value.as_str() {
                Some("exponential") => Backoff::Exponential,
                Some("linear") => Backoff::Linear,
                Some("constant") => Backoff::Constant,
                _ => {
                    return Err(EngineError::unprocessable(
                        "retry.backoff_strategy must be exponential, linear or constant",
                    ));
                }
            };
        }
        if let Some(Value::Array(errors)) = retry.get("non_retryable_errors") {
            policy.non_retryable = errors.iter().filter_map(Value::as_str).map(String::from).collect();
        }
        policy.dead_letter = match retry.get("on_exhaustion").and_then(Value::as_str) {
            None | Some("discard") => false,
            Some("dead_letter") => true,
            Some(other) => {
                return Err(EngineError::unprocessable(format!(
                    "unknown retry.on_exhaustion {other:?}"
                )));
            }
        };
        Ok(policy)
    }

    /// The wait before the attempt after `attempt` (1-based) failed.
    pub fn delay(&self, attempt: i32) -> Duration {
        let n = attempt.max(1) as f64;
        let base = self.initial.as_secs_f64();
        let seconds = match self.strategy {
            Backoff::Exponential => base * self.coefficient.powf(n - 1.0),
            Backoff::Linear => base * n,
            Backoff::Constant => base,
        };
        let capped = seconds.min(self.max_interval.as_secs_f64());
        let jittered = if self.jitter {
            use rand::Rng;
            capped * rand::rng().random_range(0.5..1.5)
        } else {
            capped
        };
        Duration::from_secs_f64(jittered.max(0.0))
    }

    /// Whether an error (by its type, code or class) is one the policy says never to retry. A
    /// pattern ending in `.*` or `*` matches by prefix.
    pub fn is_non_retryable(&self, names: &[&str]) -> bool {
        self.non_retryable.iter().any(|pattern| {
            let prefix = pattern.strip_suffix(".*").or_else(|| pattern.strip_suffix('*'));
            names.iter().any(|name| match prefix {
                Some(prefix) => name.starts_with(prefix),
                None => name == pattern,
            })
        })
    }
}

fn iso_field(value: &Value, field: &str) -> Result<Duration, EngineError> {
    value
        .as_str()
        .and_then(|text| parse_iso_duration(text).ok())
        .ok_or_else(|| EngineError::unprocessable(format!("{field} must be an ISO 8601 duration such as \"PT1S\"")))
}

/// An ISO 8601 duration (`P1DT2H3M4.5S`, weeks `P2W`); years and months are refused because
/// their length varies.
pub fn parse_iso_duration(text: &str) -> Result<Duration, EngineError> {
    let bad = || EngineError::invalid(format!("invalid ISO 8601 duration {text:?}"));
    let rest = text.strip_prefix('P').ok_or_else(bad)?;
    let mut seconds = 0.0;
    let mut in_time = false;
    let mut number = String::new();
    let mut any = false;
    for c in rest.chars() {
        match c {
            'T' if !in_time && number.is_empty() => in_time = true,
            '0'..='9' | '.' | ',' => number.push(if c == ',' { '.' } else { c }),
            unit => {
                let value: f64 = number.parse().map_err(|_| bad())?;
                number.clear();
                any = true;
                seconds += value
                    * match (in_time, unit) {
                        (false, 'W') => 604_800.0,
                        (false, 'D') => 86_400.0,
                        (true, 'H') => 3_600.0,
                        (true, 'M') => 60.0,
                        (true, 'S') => 1.0,
                        _ => return Err(bad()),
                    };
            }
        }
    }
    if !number.is_empty() || !any {
        return Err(bad());
    }
    if seconds > MAX_DURATION.as_secs_f64() {
        return Err(EngineError::invalid(format!(
            "ISO 8601 duration {text:?} is over 10000 years"
        )));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// The longest duration accepted: any real delay, period or interval fits, and a time this far
/// ahead (or its milliseconds, or a retry interval with jitter) stays within PostgreSQL's
/// timestamps and an i64.
const MAX_DURATION: Duration = Duration::from_secs(10_000 * 31_557_600);

/// `^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$`
pub(super) fn is_valid_type(text: &str) -> bool {
    text.len() <= 255
        && text.split('.').all(|segment| {
            let mut chars = segment.chars();
            chars.next().is_some_and(|c| c.is_ascii_lowercase())
                && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        })
}

/// `^[a-z0-9][a-z0-9\-\.]*$`, at most 255 characters.
pub fn is_valid_queue(text: &str) -> bool {
    let mut chars = text.chars();
    text.len() <= 255
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

fn is_uuid_v7(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, &b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            14 => b == b'7',
            19 => matches!(b, b'8' | b'9' | b'a' | b'b'),
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
}

/// Any UUID in canonical lower-case form (job ids in paths).
pub fn is_uuid(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, &b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// A UUIDv7: 48 bits of Unix milliseconds, then random bits, so ids sort by creation time.
pub fn new_uuid_v7() -> String {
    use rand::RngCore;
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64);
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes[6..]);
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    bytes[6] = 0x70 | (bytes[6] & 0x0f);
    bytes[8] = 0x80 | (bytes[8] & 0x3f);
    let hex = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_moment_is_reported_under_its_field() {
        for (value, field) in [
            ("+PT5X", "delay_until"),
            ("+P1Y", "scheduled_at"),
            ("2026-13-01T00:00:00Z", "delay_until"),
            ("2026-02-30T00:00:00Z", "expires_at"),
            ("2026-01-01T25:00:00+00:00", "scheduled_at"),
            ("2026-01-01 10:00:00", "delay_until"),
        ] {
            let err = moment(Some(&json!(value)), field).unwrap_err();
            assert!(
                err.message.starts_with(&format!("\"{field}\"")),
                "{value}: {}",
                err.message
            );
        }
        assert_eq!(
            moment(Some(&json!("2026-03-01T09:00:00.5+05:00")), "delay_until").unwrap(),
            (Some("2026-03-01T09:00:00.5+05:00".to_owned()), None)
        );
        assert_eq!(
            moment(Some(&json!("+PT1.5S")), "delay_until").unwrap(),
            (None, Some(1500.0))
        );
    }

    #[test]
    fn rate_limits_parse_in_the_specs_and_the_short_forms() {
        let limit = |spec: Value| parse_rate_limit(&spec, "mail");
        let full = limit(
            json!({ "key": "stripe", "concurrency": 5, "rate": { "limit": 100, "period": "PT1M" },
                                 "throttle": { "limit": 10, "period": "PT1S" } }),
        )
        .unwrap();
        assert_eq!(
            full,
            RateLimit {
                key: "stripe".into(),
                concurrency: Some(5),
                rate: Some((100, 60_000)),
                throttle_ms: Some(100)
            }
        );
        assert_eq!(
            limit(json!({ "rate": 2, "period": "second" })).unwrap().rate,
            Some((2, 1_000))
        );
        let per_queue = limit(json!({ "max_per_second": 1 })).unwrap();
        assert_eq!(
            (per_queue.key.as_str(), per_queue.rate),
            ("queue:mail", Some((1, 1_000)))
        );
        for bad in [
            json!({ "key": "no spaces" }),
            json!({ "concurrency": -1 }),
            json!({ "rate": 5 }),
            json!({ "rate": { "limit": 1, "period": "PT0S" } }),
            json!({ "on_limit": "drop" }),
        ] {
            assert!(limit(bad.clone()).is_err(), "accepted {bad}");
        }
    }

    #[test]
    fn generated_ids_are_uuid_v7() {
        let id = new_uuid_v7();
        assert!(is_uuid_v7(&id), "{id}");
        assert!(!is_uuid_v7("550e8400-e29b-41d4-a716-446655440000"));
        assert!(!is_uuid_v7("019461A8-1A2B-7C3D-8E4F-5A6B7C8D9E0F"));
    }

    #[test]
    fn iso_durations_parse() {
        assert_eq!(parse_iso_duration("PT1S").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_iso_duration("PT5M").unwrap(), Duration::from_secs(300));
        assert_eq!(
            parse_iso_duration("P1DT1H0.5S").unwrap(),
            Duration::from_secs_f64(90_000.5)
        );
        assert!(parse_iso_duration("PT").is_err());
        assert!(parse_iso_duration("1S").is_err());
        assert!(parse_iso_duration("P1Y").is_err());
    }

    #[test]
    fn backoff_follows_strategy_and_cap() {
        let policy = |retry: Value| RetryPolicy::from_options(Some(&retry)).unwrap();
        let exponential =
            policy(serde_json::json!({"initial_interval": "PT1S", "backoff_coefficient": 2, "jitter": false}));
        assert_eq!(exponential.delay(3), Duration::from_secs(4));
        let capped = policy(serde_json::json!({"backoff_coefficient": 10, "max_interval": "PT2S", "jitter": false}));
        assert_eq!(capped.delay(3), Duration::from_secs(2));
        let linear = policy(serde_json::json!({"backoff_strategy": "linear", "jitter": false}));
        assert_eq!(linear.delay(3), Duration::from_secs(3));
        assert!(RetryPolicy::from_options(Some(&serde_json::json!({"backoff_coefficient": 0.5}))).is_err());
    }

    #[test]
    fn names_are_checked() {
        assert!(is_valid_type("email.send") && !is_valid_type("Email.Send") && !is_valid_type("1email"));
        assert!(
            is_valid_queue("default") && is_valid_queue("a.b-c") && !is_valid_queue("-x") && !is_valid_queue("my_q")
        );
    }
}

/// Hostile and valid envelopes, generated: no input panics the parser, and what it accepts
/// keeps what the client sent.
#[cfg(test)]
mod properties {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    /// Any JSON value, a few levels deep, with the envelope's own field names likely as keys.
    fn any_json() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            Just("type".to_string()),
            Just("args".to_string()),
            Just("id".to_string()),
            Just("queue".to_string()),
            Just("priority".to_string()),
            Just("options".to_string()),
            Just("meta".to_string()),
            Just("retry".to_string()),
            Just("unique".to_string()),
            Just("rate_limit".to_string()),
            Just("scheduled_at".to_string()),
            Just("expires_at".to_string()),
            Just("period".to_string()),
            Just("max_interval".to_string()),
            Just("timeout_ms".to_string()),
            "[a-z_]{0,8}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::String),
            "[+PTWDHMS0-9.,]{0,12}".prop_map(Value::String),
            "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{8,12}(Z|[+-][0-9]{2}:[0-9]{2})".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(key.clone(), inner, 0..6)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn no_envelope_panics_the_parser(value in any_json(), options in any_json(), flat in any_json()) {
            let _ = parse_job(value.clone(), 1 << 10);
            // The same values where the parser looks hardest: under `options` and at the top.
            let mut job = json!({ "type": "a.b", "args": [], "options": options });
            if let (Value::Object(job), Value::Object(flat)) = (&mut job, flat) {
                job.extend(flat);
            }
            let _ = parse_job(job, 1 << 10);
        }

        #[test]
        fn no_duration_text_panics(text in "\\PC{0,24}", digits in "P(T?[0-9]{1,30}(\\.[0-9]{0,5})?[WDHMS]){1,3}") {
            let _ = parse_iso_duration(&text);
            if let Ok(duration) = parse_iso_duration(&digits) {
                prop_assert!(duration <= MAX_DURATION);
            }
        }

        #[test]
        fn valid_envelopes_keep_what_the_client_sent(
            job_type in "[a-z][a-z0-9_-]{0,10}(\\.[a-z][a-z0-9_-]{0,10}){0,3}",
            queue in "[a-z0-9][a-z0-9.-]{0,20}",
            priority in -100i64..=100,
            args in prop::collection::vec(any_json(), 0..4),
            meta in prop::collection::btree_map("[a-z]{1,6}", any_json(), 0..4),
        ) {
            let meta: serde_json::Map<String, Value> = meta.into_iter().collect();
            let sent = json!({ "type": job_type, "args": args, "meta": meta,
                               "options": { "queue": queue, "priority": priority } });
            let job = parse_job(sent.clone(), usize::MAX).expect("a valid envelope is accepted");
            prop_assert_eq!(&job.job_type, &job_type);
            prop_assert_eq!(&job.queue, &queue);
            prop_assert_eq!(i64::from(job.priority), priority);
            prop_assert!(is_uuid_v7(&job.id));
            for field in ["type", "args", "meta", "options"] {
                prop_assert_eq!(&job.envelope[field], &sent[field]);
            }
            // What was stored parses again to the same job: the id is kept, not regenerated.
            let again = parse_job(job.envelope.clone(), usize::MAX).expect("a stored envelope is accepted");
            prop_assert_eq!(&again.id, &job.id);
            prop_assert_eq!(&again.envelope, &job.envelope);
        }
    }
}
