//! OJS (Open Job Spec) over HTTP: the binding's routes under `/ojs/v1`, the manifest at
//! `/ojs/manifest`, and OJS error objects. The queue engine underneath is [`queue::Queue`].
//!
//! Auth: none by default (the listener binds to loopback); with `--ojs-token` (or tenant tokens)
//! every route except the manifest and health needs `Authorization: Bearer <token>`. Job routes
//! act as the request's tenant ([`tenant`]).

pub mod cron;
pub mod envelope;
pub mod queue;
mod request;
pub mod stream;
pub mod tenant;
pub mod webhooks;
pub mod workflow;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use crate::request_body::RequestBody;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{Either, Full};
use serde_json::{Value, json};
use tokio_postgres::error::SqlState;

use crate::admission::{Admission, BufferBudget};
use crate::http_server::Shutdown;
use crate::replica_lag::ReplicaLag;
use envelope::NewJob;
use queue::{Answer, Claim, Failure, FetchRequest, Queue};
use stream::EventHub;

const CONTENT_TYPE: &str = "application/openjobspec+json";
const OJS_VERSION: &str = "1.0";
const DOCS_URL: &str = "https://openjobspec.org/spec/ojs-http-binding";
/// What a request body needs beyond its job's `args`: the rest of the envelope (type, options,
/// meta). `--ojs-max-body-bytes` must leave at least this much room over `--ojs-max-args-bytes`.
const ENVELOPE_ROOM: u64 = 64 << 10;
const MAX_BATCH: usize = 10_000;
const MAX_FETCH: i64 = 1_000;
const EVENT_STREAM_PATH: &str = "/ojs/v1/events/stream";
/// The error code of an enqueue refused by a queue's depth bound (ext-backpressure).
pub(crate) const QUEUE_FULL: &str = "QUEUE_FULL";
/// What a refused producer is told to wait, in seconds: a full queue drains at its workers' pace.
const QUEUE_FULL_RETRY_AFTER: &str = "5";

/// What a client turned away by admission control is told to wait, in seconds.
const OVERLOADED_RETRY_AFTER_SECONDS: i64 = 1;
/// Routes served without admission or the replication-lag check: probes and discovery must
/// answer while data traffic is saturated.
const ALWAYS_SERVED: [&str; 4] = ["/ojs/manifest", "/health", "/ready", "/ojs/v1/health"];

/// What an operator can tune (from `--ojs-*` flags).
#[derive(Debug, Clone)]
pub struct OjsOptions {
    /// Conformance mode (`--ojs-allow-reset`): serves the reset endpoint and honours the
    /// conformance suite's test hook (a job's `options.metadata.test_directive` becomes the
    /// directive of a heartbeat that extends it). Never on by default.
    pub allow_reset: bool,
    pub max_args_bytes: usize,
    /// Largest request body (`--ojs-max-body-bytes`): bounds what one request makes the gateway
    /// read and parse, `meta` and unknown fields included.
    pub max_body_bytes: u64,
    /// `--ojs-token` and `--ojs-tenant-token`.
    pub credentials: tenant::Credentials,
    /// How long a subscription's test delivery may take (`--webhook-timeout`).
    pub webhook_timeout: Duration,
    /// Where test deliveries may go (`--webhook-allow-networks`), as the outbox's deliveries.
    pub webhook_destinations: crate::webhooks::Destinations,
}

/// Refuses a body limit that could not carry a job with the largest `args` allowed.
pub fn check_limits(max_args_bytes: usize, max_body_bytes: u64) -> anyhow::Result<()> {
    let needed = max_args_bytes as u64 + ENVELOPE_ROOM;
    anyhow::ensure!(
        max_body_bytes >= needed,
        "--ojs-max-body-bytes ({max_body_bytes}) must be at least --ojs-max-args-bytes + 64 KiB ({needed}): \
         a job with the largest args allowed must fit in a request"
    );
    Ok(())
}

#[derive(Clone)]
pub struct OjsService {
    inner: Arc<Inner>,
}

struct Inner {
    queue: Queue,
    options: OjsOptions,
    admission: Admission,
    lag: ReplicaLag,
    events: EventHub,
    shutdown: Shutdown,
    /// The gateway's buffer budget, which large request bodies draw on ([`request`]).
    budget: BufferBudget,
    /// When this service started (the health answer's `uptime_seconds`).
    started: std::time::Instant,
}

/// A JSON answer, or an event stream.
type OjsBody = Either<Full<Bytes>, stream::EventStream>;

/// An OJS error object and its HTTP status.
#[derive(Debug)]
pub struct OjsError {
    status: StatusCode,
    code: &'static str,
    kind: &'static str,
    message: String,
    retryable: bool,
    details: Option<Value>,
    headers: Vec<(&'static str, String)>,
}

impl OjsError {
    fn new(status: StatusCode, code: &'static str, kind: &'static str, message: impl Into<String>) -> OjsError {
        OjsError {
            status,
            code,
            kind,
            message: message.into(),
            retryable: false,
            details: None,
            headers: Vec::new(),
        }
    }

    /// A queue at its depth bound refuses an enqueue (the reject strategy of ext-backpressure).
    pub fn queue_full(queue: &str, depth: i64, bound: i64) -> OjsError {
        let mut error = OjsError::new(
            StatusCode::TOO_MANY_REQUESTS,
            QUEUE_FULL,
            "backpressure",
            format!("queue {queue:?} has reached its depth bound ({bound})"),
        )
        .with_details(json!({ "queue": queue, "depth": depth, "bound": bound, "strategy": "reject" }));
        error.retryable = true;
        error.headers = vec![
            ("retry-after", QUEUE_FULL_RETRY_AFTER.to_string()),
            ("x-ojs-queue-depth", depth.to_string()),
            ("x-ojs-queue-bound", bound.to_string()),
        ];
        error
    }

    /// Admission control turned the request away before reading it (more requests than the
    /// gateway serves at once, and its waiting line full or too slow).
    fn overloaded() -> OjsError {
        let mut error = OjsError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "rate_limited",
            "this gateway is serving as many OJS requests as it can; retry after a second",
        )
        .with_details(json!({ "retry_after_seconds": OVERLOADED_RETRY_AFTER_SECONDS }));
        error.retryable = true;
        error.headers = vec![("retry-after", OVERLOADED_RETRY_AFTER_SECONDS.to_string())];
        error
    }

    /// A standby whose replay trails its primary by more than `--max-replication-lag` serves
    /// no reads: they could be arbitrarily stale.
    fn lagging(lag: Duration, limit: Duration) -> OjsError {
        let mut error = OjsError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "backend_error",
            "backend_error",
            format!(
                "this gateway's standby is {:.1} s behind its primary (limit {:.1} s); read from another replica",
                lag.as_secs_f64(),
                limit.as_secs_f64()
            ),
        )
        .with_details(json!({ "lag_seconds": lag.as_secs_f64(), "limit_seconds": limit.as_secs_f64() }));
        error.retryable = true;
        error.headers = vec![("retry-after", "1".to_string())];
        error
    }

    /// A request whose body (and the JSON tree it makes) does not fit in what is left of the
    /// buffer budget: retryable, as the budget frees when other requests finish.
    fn out_of_memory(bytes: u64) -> OjsError {
        let mut error = OjsError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "rate_limited",
            format!("this gateway's request memory (--buffer-budget) cannot hold this request's {bytes} bytes now; retry after a second"),
        )
        .with_details(json!({ "retry_after_seconds": OVERLOADED_RETRY_AFTER_SECONDS, "memory_bytes": bytes }));
        error.retryable = true;
        error.headers = vec![("retry-after", OVERLOADED_RETRY_AFTER_SECONDS.to_string())];
        error
    }

    /// A request that would need more memory than the whole buffer budget: never served.
    fn beyond_memory(bytes: u64, budget: u64) -> OjsError {
        OjsError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_payload",
            "validation_error",
            format!("the request would take {bytes} bytes of memory to serve, more than this gateway's --buffer-budget ({budget})"),
        )
        .with_details(json!({ "memory_bytes": bytes, "buffer_budget_bytes": budget }))
    }

    /// A request body over `--ojs-max-body-bytes`, refused before the rest of it is read.
    fn too_large(limit: u64) -> OjsError {
        OjsError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_payload",
            "validation_error",
            format!("the request body is over this server's limit of {limit} bytes"),
        )
        .with_details(json!({ "max_body_bytes": limit }))
    }

    pub fn invalid(message: impl Into<String>) -> OjsError {
        OjsError::new(StatusCode::BAD_REQUEST, "invalid_request", "validation_error", message)
    }

    /// Well-formed but semantically refused (retry policy values).
    pub fn unprocessable(message: impl Into<String>) -> OjsError {
        OjsError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "validation_error",
            message,
        )
    }

    pub fn not_found(message: impl Into<String>) -> OjsError {
        OjsError::new(StatusCode::NOT_FOUND, "not_found", "not_found", message)
    }

    pub fn job_not_found(id: &str) -> OjsError {
        OjsError::not_found(format!("job {id} not found"))
    }

    pub fn conflict(message: impl Into<String>) -> OjsError {
        OjsError::new(StatusCode::CONFLICT, "conflict", "conflict", message)
    }

    /// Authenticated, but not allowed this (a tenant token outside its tenant or its routes).
    pub fn forbidden(message: impl Into<String>) -> OjsError {
        OjsError::new(StatusCode::FORBIDDEN, "forbidden", "forbidden", message)
    }

    pub fn duplicate(message: impl Into<String>) -> OjsError {
        OjsError::new(StatusCode::CONFLICT, "duplicate", "conflict", message)
    }

    pub fn with_details(mut self, details: Value) -> OjsError {
        self.details = Some(details);
        self
    }

    pub fn backend(err: impl std::fmt::Display) -> OjsError {
        tracing::warn!(error = %err, "OJS backend unavailable");
        let mut error = OjsError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "backend_error",
            "backend_error",
            "the job store is unavailable; retry later",
        );
        error.retryable = true;
        error
    }

    pub fn sql(err: tokio_postgres::Error) -> OjsError {
        match err.code() {
            Some(&SqlState::READ_ONLY_SQL_TRANSACTION) => OjsError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "read_only",
                "read_only",
                "this gateway is bound to a read-only PostgreSQL standby: reads work, writes must go to a gateway on the primary",
            ),
            Some(&SqlState::INVALID_DATETIME_FORMAT)
            | Some(&SqlState::DATETIME_FIELD_OVERFLOW)
            | Some(&SqlState::INVALID_TIME_ZONE_DISPLACEMENT_VALUE) => OjsError::invalid(format!(
                "invalid timestamp: {}",
                err.as_db_error().map_or("", |db| db.message())
            )),
            // jsonb refuses the escape \u0000, text columns the byte 0x00.
            Some(&SqlState::UNTRANSLATABLE_CHARACTER) | Some(&SqlState::CHARACTER_NOT_IN_REPERTOIRE) => {
                OjsError::invalid("strings cannot hold the NUL character (\\u0000)")
            }
            // Class 22 (data exception): a value from the request that PostgreSQL cannot hold,
            // such as a time or number out of range. The client's to fix, never worth a retry.
            Some(state) if state.code().starts_with("22") => OjsError::invalid(format!(
                "a value in the request is out of range or malformed: {}",
                err.as_db_error().map_or("", |db| db.message())
            )),
            // A client string too long to index (a worker id of kilobytes, say).
            Some(&SqlState::PROGRAM_LIMIT_EXCEEDED) => OjsError::invalid(format!(
                "a value in the request is too large: {}",
                err.as_db_error().map_or("", |db| db.message())
            )),
            _ => OjsError::backend(err),
        }
    }

    fn response(&self) -> Response<Full<Bytes>> {
        let mut response = json_response(self.status, &self.object());
        add_headers(response.headers_mut(), &self.headers);
        response
    }

    /// The wire form: `{"error": {...}}`.
    fn object(&self) -> Value {
        let mut error = json!({
            "code": self.code,
            "type": self.kind,
            "message": self.message,
            "retryable": self.retryable,
            "hint": hint(self.code),
            "docs_url": DOCS_URL,
        });
        if let Some(details) = &self.details {
            error["details"] = details.clone();
        }
        json!({ "error": error })
    }
}

fn hint(code: &str) -> &'static str {
    match code {
        "invalid_request" | "invalid_payload" | "invalid_workflow" => {
            "fix the request body as the message says and send it again"
        }
        "not_found" => "check the id; jobs are found by the id enqueue returned",
        "conflict" => "the job's state does not allow this; GET the job to see its state",
        "duplicate" => "use a new id, or GET the existing job",
        "read_only" => "send writes to a gateway bound to the primary",
        QUEUE_FULL => "wait Retry-After seconds and enqueue again, or raise the queue's max_depth",
        "unauthenticated" => "send Authorization: Bearer <token>",
        "forbidden" => "send this token's own tenant in X-OJS-Tenant, or no X-OJS-Tenant",
        "rate_limited" => "wait Retry-After seconds and send the request again",
        _ => "retry with backoff",
    }
}

fn add_headers(headers: &mut http::HeaderMap, extra: &[(&'static str, String)]) {
    for (name, value) in extra {
        if let Ok(value) = header::HeaderValue::from_str(value) {
            headers.insert(*name, value);
        }
    }
}

/// A path with its ids (UUIDs, numbers) replaced by `:id`, to name a request's span after its
/// route rather than after one job.
fn route_template(path: &str) -> String {
    path.trim_end_matches('/')
        .split('/')
        .map(|segment| {
            let id = uuid_like(segment) || (!segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()));
            if id { ":id" } else { segment }
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn uuid_like(segment: &str) -> bool {
    segment.len() == 36 && segment.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// The answer to a connection beyond `--ojs-max-connections`: an OJS error object.
pub fn busy_response() -> Bytes {
    let mut error = OjsError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "rate_limited",
        "rate_limited",
        "this gateway has as many OJS connections open as it takes; retry after a second",
    );
    error.retryable = true;
    crate::http_server::busy_response(CONTENT_TYPE, &error.object().to_string())
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let text = if status == StatusCode::NO_CONTENT {
        String::new()
    } else {
        body.to_string()
    };
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(CONTENT_TYPE));
    response
}

type Reply = Result<(StatusCode, Value), OjsError>;

impl OjsService {
    /// `shutdown` ends open event streams, which would otherwise hold a graceful stop for its
    /// whole drain timeout.
    pub fn new(
        queue: Queue,
        options: OjsOptions,
        admission: Admission,
        lag: ReplicaLag,
        shutdown: Shutdown,
        budget: BufferBudget,
    ) -> OjsService {
        OjsService {
            inner: Arc::new(Inner {
                events: EventHub::new(queue.clone()),
                queue,
                options,
                admission,
                lag,
                shutdown,
                budget,
                started: std::time::Instant::now(),
            }),
        }
    }

    async fn handle(self, request: Request<RequestBody>) -> Response<OjsBody> {
        let span = crate::telemetry::request_span("ojs", Some(request.headers()));
        let operation = format!("{} {}", request.method(), route_template(request.uri().path()));
        crate::telemetry::name_operation(&span, "OJS", &operation);
        let response = self.handle_in_span(request).instrument(span.clone()).await;
        crate::telemetry::finish(&span, response.status().as_str(), response.status().is_server_error());
        response
    }

    async fn handle_in_span(self, request: Request<RequestBody>) -> Response<OjsBody> {
        let request_id = request
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(String::from)
            .unwrap_or_else(envelope::new_uuid_v7);
        let path = request.uri().path().trim_end_matches('/');
        let mut response = if path == "/metrics" {
            self.metrics().await.map(Either::Left)
        } else if ALWAYS_SERVED.contains(&path) {
            self.serve(request).await
        } else if let Some(lag) = self.inner.lag.too_far_behind() {
            OjsError::lagging(lag, self.inner.lag.limit().unwrap_or_default())
                .response()
                .map(Either::Left)
        } else if let Err(error) = self.authorize_route(path, request.headers()) {
            // Before a slot is taken: an unauthenticated client never holds one.
            error.response().map(Either::Left)
        } else {
            // Admitted before the body is read or a database connection is taken; the slot is
            // held until the answer is built (for an event stream: until it opens).
            match self.inner.admission.admit().await {
                Ok(_admitted) => self.serve(request).await,
                Err(_) => OjsError::overloaded().response().map(Either::Left),
            }
        };

        if let Ok(value) = header::HeaderValue::from_str(&request_id) {
            response.headers_mut().insert("x-request-id", value);
        }
        response
            .headers_mut()
            .insert("ojs-version", header::HeaderValue::from_static(OJS_VERSION));
        response
    }

    async fn serve(&self, request: Request<RequestBody>) -> Response<OjsBody> {
        if request.method() == Method::GET && request.uri().path().trim_end_matches('/') == EVENT_STREAM_PATH {
            return match self.event_stream(&request) {
                Ok(response) => response,
                Err(error) => error.response().map(Either::Left),
            };
        }
        let mut extra = Vec::new();
        let mut response = match self.route(request, &mut extra).await {
            Ok((status, body)) => json_response(status, &body),
            Err(error) => error.response(),
        };
        add_headers(response.headers_mut(), &extra);
        response.map(Either::Left)
    }

    /// `GET /ojs/v1/events/stream`: server-sent events. Filters: `types` (names or `job.*`
    /// prefixes), `queues`, and the SDKs' `channel=job:<id>` or `channel=queue:<name>`; a
    /// stream resumes after `Last-Event-ID` (or `?after=<seq>`).
    fn event_stream(&self, request: &Request<RequestBody>) -> Result<Response<OjsBody>, OjsError> {
        if self.authorize(request.headers())?.bound {
            // Events span all tenants.
            return Err(OjsError::forbidden(
                "a tenant token reaches the job routes only, not the event stream",
            ));
        }
        let query = parse_query(request.uri().query().unwrap_or(""));
        let mut filter = stream::Filter {
            types: list_param(&query, "types"),
            queues: list_param(&query, "queues"),
            job_id: None,
        };
        match query.get("channel") {
            None => {}
            Some(channel) => match channel.split_once(':') {
                Some(("job", id)) => filter.job_id = Some(job_id(id)?.to_string()),
                Some(("queue", name)) => filter.queues.push(queue_name(name)?.to_string()),
                _ => {
                    return Err(OjsError::invalid(format!(
                        "unknown channel {channel:?} (job:<id> or queue:<name>)"
                    )));
                }
            },
        }
        let resume = request
            .headers()
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .or(query.get("after").map(String::as_str));
        let after = match resume {
            None => None,
            Some(text) => Some(
                text.trim()
                    .parse::<i64>()
                    .map_err(|_| OjsError::invalid(format!("event ids are integers, not {text:?}")))?,
            ),
        };
        let body = self.inner.events.open(filter, after, self.inner.shutdown.clone());
        let mut response = Response::new(Either::Right(body));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-cache"));
        // Proxies that buffer (nginx) would hold events back.
        headers.insert("x-accel-buffering", header::HeaderValue::from_static("no"));
        Ok(response)
    }

    /// Job counts by state, in the Prometheus text format (the gateway's own metrics are on the
    /// admin port).
    async fn metrics(&self) -> Response<Full<Bytes>> {
        let (status, text) = match self.inner.queue.stats(None).await {
            Ok(stats) => {
                let mut text = String::from("# HELP ojs_jobs Jobs by state.\n# TYPE ojs_jobs gauge\n");
                for state in queue::STATES {
                    let count = stats["jobs"][state].as_i64().unwrap_or(0);
                    text.push_str(&format!("ojs_jobs{{state=\"{state}\"}} {count}\n"));
                }
                (StatusCode::OK, text)
            }
            Err(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "# the job store is unavailable\n".to_string(),
            ),
        };
        let mut response = Response::new(Full::new(Bytes::from(text)));
        *response.status_mut() = status;
        // Exactly `text/plain`: the official OJS conformance runner compares the header as a
        // whole, and Prometheus reads a `text/plain` answer without `version` as its text
        // format 0.0.4 all the same.
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain"));
        response
    }

    /// Serves one request; `headers` collects response headers beyond the usual ones.
    async fn route(&self, request: Request<RequestBody>, headers: &mut Vec<(&'static str, String)>) -> Reply {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path().trim_end_matches('/').to_string();
        let query = parse_query(parts.uri.query().unwrap_or(""));
        match path.as_str() {
            "/ojs/manifest" => return Ok((StatusCode::OK, self.manifest())),
            "/health" => return Ok(self.health().await),
            "/ready" => {
                let (status, body) = self.health().await;
                let ready = if status == StatusCode::OK { "ready" } else { "not_ready" };
                return Ok((status, json!({ "status": ready, "backend": body["backend"] })));
            }
            _ => {}
        }
        let Some(route) = path.strip_prefix("/ojs/v1") else {
            return Err(OjsError::not_found(format!("no OJS route {path}")));
        };
        let segments: Vec<&str> = route.split('/').filter(|s| !s.is_empty()).collect();
        let acting = if route == "/health" {
            tenant::Acting::default_tenant()
        } else {
            self.authorize(&parts.headers)?
        };
        if acting.bound && !tenant::is_scoped(&segments) {
            return Err(OjsError::forbidden(format!(
                "a tenant token reaches the job routes only, not {path}"
            )));
        }
        let tenant = acting.tenant.as_str();
        let queue = &self.inner.queue;
        let method = parts.method.clone();
        let body = request::read(body, self.inner.options.max_body_bytes, &self.inner.budget).await?;
        match (&method, segments.as_slice()) {
            (&Method::GET, ["health"]) => Ok(self.health().await),
            (&Method::POST, ["jobs"]) => self.enqueue(request::json(&body)?, &acting, headers).await,
            (&Method::POST, ["jobs", "batch"]) => self.enqueue_batch(request::json(&body)?, &acting, headers).await,
            (&Method::GET, ["jobs", id]) => {
                Ok((StatusCode::OK, json!({ "job": queue.get(job_id(id)?, tenant).await? })))
            }
            (&Method::GET, ["admin", "jobs", id]) => Ok((StatusCode::OK, queue.get(job_id(id)?, tenant).await?)),
            (&Method::DELETE, ["jobs", id]) | (&Method::POST, ["jobs", id, "cancel"]) => Ok((
                StatusCode::OK,
                json!({ "job": queue.cancel(job_id(id)?, tenant).await? }),
            )),
            (&Method::POST, ["workers", "fetch"]) => self.fetch(request::json(&body)?, tenant).await,
            (&Method::POST, ["workers", "ack"]) => self.ack(request::json(&body)?, tenant).await,
            (&Method::POST, ["workers", "nack"]) => self.nack(request::json(&body)?, tenant).await,
            // The per-job forms: the job is the path's, the body (optional) the rest.
            (&Method::POST, ["jobs", id, "ack"]) => self.ack(request::job_json(id, &body)?, tenant).await,
            (&Method::POST, ["jobs", id, "nack"]) => self.nack(request::job_json(id, &body)?, tenant).await,
            (&Method::PUT | &Method::POST, ["jobs", id, "progress"]) => {
                self.progress(request::job_json(id, &body)?, tenant).await
            }
            (&Method::POST, ["workers", "progress"]) => self.progress(request::json(&body)?, tenant).await,
            (&Method::GET, ["jobs", id, "progress"]) => {
                let progress = queue.progress(job_id(id)?, tenant).await?;
                progress_headers(&progress, headers);
                Ok((StatusCode::OK, progress))
            }
            // The webhooks extension's routes are under /webhooks/subscriptions; the website's
            // shorter /webhooks form is the same.
            (method, ["webhooks", rest @ ..]) => {
                let rest = match rest {
                    ["subscriptions", rest @ ..] => rest,
                    rest => rest,
                };
                self.webhooks(method, rest, &body, &query).await
            }
            (&Method::POST, ["workers", "heartbeat"]) | (&Method::POST, ["workers", "beat"]) => {
                self.heartbeat(request::json(&body)?, tenant).await
            }
            (&Method::GET, ["queues"]) | (&Method::GET, ["admin", "queues"]) => {
                let queues = queue.list_queues().await?;
                Ok((StatusCode::OK, listing("queues", queues)))
            }
            (&Method::GET, ["queues", name, "stats"]) | (&Method::GET, ["admin", "queues", name, "stats"]) => {
                Ok((StatusCode::OK, queue.queue_stats(queue_name(name)?).await?))
            }
            (&Method::POST, ["queues", name, action]) if *action == "pause" || *action == "resume" => {
                queue.set_paused(queue_name(name)?, *action == "pause").await?;
                Ok((StatusCode::OK, queue.queue_stats(name).await?))
            }
            (&Method::POST, ["admin", "queues", name, action]) if *action == "pause" || *action == "resume" => {
                queue.set_paused(queue_name(name)?, *action == "pause").await?;
                Ok((StatusCode::OK, queue.queue_stats(name).await?["queue"].take()))
            }
            (&Method::PUT, ["admin", "queues", name, "config"]) => {
                let settings = queue_settings(request::json(&body)?)?;
                let config = queue.configure_queue(queue_name(name)?, &settings).await?;
                Ok((StatusCode::OK, json!({ "queue": name, "config": config })))
            }
            (&Method::GET, ["admin", "queues", name, "config"]) => {
                let config = queue.queue_config(queue_name(name)?).await?;
                Ok((StatusCode::OK, json!({ "queue": name, "config": config })))
            }
            (&Method::GET, ["dead-letter"]) | (&Method::GET, ["admin", "dead-letter"]) => {
                let limit = query
                    .get("limit")
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(100)
                    .clamp(1, 1000);
                let jobs = queue
                    .dead_letter(query.get("queue").map(String::as_str), limit, tenant)
                    .await?;
                Ok((StatusCode::OK, listing("jobs", jobs)))
            }
            (&Method::GET, ["admin", "dead-letter", "stats"]) => {
                let total = queue.dead_letter_count().await?;
                Ok((StatusCode::OK, json!({ "total": total, "count": total })))
            }
            (&Method::POST, ["dead-letter", id, "retry"]) | (&Method::POST, ["admin", "dead-letter", id, "retry"]) => {
                Ok((
                    StatusCode::OK,
                    json!({ "job": queue.retry_dead_letter(job_id(id)?, tenant).await? }),
                ))
            }
            (&Method::DELETE, ["dead-letter", id]) => {
                queue.delete_dead_letter(job_id(id)?, tenant).await?;
                Ok((StatusCode::OK, json!({ "deleted": true, "job_id": id })))
            }
            (&Method::DELETE, ["admin", "dead-letter", id]) => {
                queue.delete_dead_letter(job_id(id)?, tenant).await?;
                Ok((StatusCode::NO_CONTENT, Value::Null))
            }
            (&Method::POST, ["workflows"]) => {
                let workflow = workflow::parse_workflow(request::json(&body)?, self.inner.options.max_args_bytes)?;
                let workflow = queue.create_workflow(&workflow, tenant).await?;
                Ok((StatusCode::CREATED, json!({ "workflow": workflow })))
            }
            (&Method::GET, ["workflows", id]) => Ok((
                StatusCode::OK,
                json!({ "workflow": queue.get_workflow(workflow_id(id)?).await? }),
            )),
            (&Method::DELETE, ["workflows", id]) | (&Method::POST, ["workflows", id, "cancel"]) => Ok((
                StatusCode::OK,
                json!({ "workflow": queue.cancel_workflow(workflow_id(id)?).await? }),
            )),
            (&Method::GET, ["rate-limits"]) => Ok((StatusCode::OK, listing("items", queue.rate_limits().await?))),
            (&Method::GET, ["rate-limits", key]) => Ok((StatusCode::OK, queue.rate_limit(key).await?)),
            (&Method::GET, ["events"]) => self.events(&query).await,
            (&Method::POST, ["cron"]) => self.register_cron(request::json(&body)?, None).await,
            (&Method::PUT, ["cron", name]) => self.register_cron(request::json(&body)?, Some(*name)).await,
            (&Method::GET, ["cron"]) => {
                let crons = queue.list_crons().await?;
                Ok((StatusCode::OK, listing("crons", crons)))
            }
            (&Method::DELETE, ["cron", name]) => {
                Ok((StatusCode::OK, json!({ "cron": queue.delete_cron(name).await? })))
            }
            (&Method::POST, ["admin", "jobs", "bulk", "retry"]) => {
                self.retry_in_bulk(request::json(&body)?, tenant).await
            }
            (&Method::GET, ["admin", "stats"]) => Ok((StatusCode::OK, queue.stats(None).await?)),
            (&Method::GET, ["admin", "tenants"]) => Ok((StatusCode::OK, queue.tenants().await?)),
            (&Method::GET, ["admin", "tenants", id, "stats"]) => {
                let mut stats = queue.stats(Some(id)).await?;
                stats["tenant_id"] = json!(id);
                Ok((StatusCode::OK, stats))
            }
            (&Method::GET, ["workers", id, "health"]) | (&Method::GET, ["admin", "workers", id]) => {
                Ok((StatusCode::OK, queue.worker(id).await?))
            }
            (&Method::POST, ["admin", "workers", id, action]) => {
                let directive = match *action {
                    "quiet" => Some("quiet"),
                    "terminate" => Some("terminate"),
                    "resume" => None,
                    _ => return Err(OjsError::not_found(format!("no OJS route POST {path}"))),
                };
                Ok((
                    StatusCode::OK,
                    json!({ "worker": queue.direct_worker(id, directive).await? }),
                ))
            }
            (&Method::GET, ["admin", "workers"]) => {
                let workers = queue.active_workers().await?;
                let mut body = listing("workers", workers);
                body["summary"] = json!({ "total": body["pagination"]["total"] });
                Ok((StatusCode::OK, body))
            }
            (&Method::POST, ["admin", "reset"]) if self.inner.options.allow_reset => {
                queue.reset().await?;
                Ok((StatusCode::OK, json!({ "reset": true })))
            }
            _ => Err(OjsError::not_found(format!("no OJS route {method} {path}"))),
        }
    }

    /// The bearer token check of the routes that need it (those under `/ojs/v1`).
    fn authorize_route(&self, path: &str, headers: &http::HeaderMap) -> Result<(), OjsError> {
        if path.starts_with("/ojs/v1") {
            self.authorize(headers).map(drop)
        } else {
            Ok(())
        }
    }

    /// Authenticates a request and answers the tenant it acts as.
    fn authorize(&self, headers: &http::HeaderMap) -> Result<tenant::Acting, OjsError> {
        self.inner.options.credentials.tenant_of(headers)
    }

    fn manifest(&self) -> Value {
        json!({
            "specversion": "1.0",
            "ojs_version": "1.0",
            "implementation": { "name": "pgvs3", "version": env!("CARGO_PKG_VERSION"), "language": "rust",
                                "homepage": "https://github.com/pgvs3/pgvs3" },
            "conformance_level": 4,
            "protocols": ["http"],
            "backend": "postgresql",
            "capabilities": {
                "batch_enqueue": true, "unique_jobs": true, "scheduled_jobs": true, "priority": true,
                "dead_letter": true, "events": true, "cron": true, "workflows": true,
                "webhooks": true, "progress": true,
            },
            "extensions": ["dead-letter", "admin-api", "observability", "backpressure", "graceful-shutdown", "rate-limiting",
                           "webhooks", "progress"],
        })
    }

    /// The HTTP binding's health answer (§8.1): the protocol `version`, this gateway's uptime,
    /// and the database's state with the round trip it took.
    async fn health(&self) -> (StatusCode, Value) {
        let asked = std::time::Instant::now();
        let (status, mut answer) = match self.inner.queue.ping().await {
            Ok(()) => (
                StatusCode::OK,
                json!({ "status": "ok", "backend": { "type": "postgresql", "status": "ok",
                                                     "latency_ms": asked.elapsed().as_millis() as u64 } }),
            ),
            Err(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "status": "degraded", "backend": { "type": "postgresql", "status": "unreachable" } }),
            ),
        };
        answer["version"] = json!(OJS_VERSION);
        answer["uptime_seconds"] = json!(self.inner.started.elapsed().as_secs());
        (status, answer)
    }

    async fn enqueue(
        &self,
        mut body: Value,
        acting: &tenant::Acting,
        headers: &mut Vec<(&'static str, String)>,
    ) -> Reply {
        let tenant = acting.tenant_of_job(&mut body)?;
        let job = envelope::parse_job(body, self.inner.options.max_args_bytes)?;
        let mut inserted = self
            .inner
            .queue
            .enqueue(std::slice::from_ref(&job), &tenant, Answer::Job)
            .await?;
        pressure_headers(&inserted, headers);
        if let Some(limit) = &job.rate_limit {
            self.rate_limit_headers(&limit.key, headers).await?;
        }
        let job = inserted
            .jobs
            .pop()
            .ok_or_else(|| OjsError::backend("enqueue returned no job"))?;
        let status = if job.get("duplicate").is_some() {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        Ok((status, json!({ "job": job })))
    }

    async fn enqueue_batch(
        &self,
        body: Value,
        acting: &tenant::Acting,
        headers: &mut Vec<(&'static str, String)>,
    ) -> Reply {
        let list = match body {
            Value::Object(mut fields) => fields.remove("jobs"),
            array @ Value::Array(_) => Some(array),
            _ => None,
        };
        let Some(Value::Array(list)) = list else {
            return Err(OjsError::invalid("a batch is {\"jobs\": [...]}"));
        };
        if list.is_empty() || list.len() > MAX_BATCH {
            return Err(OjsError::invalid(format!("a batch holds 1 to {MAX_BATCH} jobs")));
        }
        // One batch is one tenant's: the jobs' `meta.tenant_id`s (or the request's) must agree.
        let mut tenant: Option<String> = None;
        let jobs = list
            .into_iter()
            .enumerate()
            .map(|(index, mut job)| {
                let parsed = acting.tenant_of_job(&mut job).and_then(|of_job| {
                    match &tenant {
                        Some(first) if *first != of_job => {
                            return Err(OjsError::invalid(format!(
                                "meta.tenant_id {of_job:?} is not the batch's tenant {first:?}; a batch is one tenant's"
                            )));
                        }
                        _ => tenant = Some(of_job),
                    }
                    envelope::parse_job(job, self.inner.options.max_args_bytes)
                });
                parsed.map_err(|mut error| {
                    error.message = format!("jobs[{index}]: {}", error.message);
                    error
                })
            })
            .collect::<Result<Vec<NewJob>, _>>()?;
        let tenant = tenant.unwrap_or_else(|| acting.tenant.clone());
        if jobs.iter().any(|job| job.unique.is_some()) {
            return Err(OjsError::invalid(
                "unique options are not supported in batches; enqueue such jobs singly",
            ));
        }
        // A job may wait for jobs earlier in the batch, never later ones: every dependency is
        // older than its dependent, so no cycle can form.
        for (index, job) in jobs.iter().enumerate() {
            if let Some(later) = jobs[index..].iter().find(|other| job.depends_on.contains(&other.id)) {
                return Err(OjsError::invalid(format!(
                    "jobs[{index}]: options.depends_on names job {}, which is not enqueued before it",
                    later.id
                )));
            }
        }
        let inserted = self.inner.queue.enqueue(&jobs, &tenant, Answer::Summary).await?;
        pressure_headers(&inserted, headers);
        let stored = inserted.jobs;
        let count = stored.len();
        Ok((StatusCode::CREATED, json!({ "jobs": stored, "count": count })))
    }

    /// What the job's rate limit key allows now, in the X-RateLimit-* headers' terms: the limit
    /// (the window's count, else the concurrency), the starts left, and when one more frees up.
    async fn rate_limit_headers(&self, key: &str, headers: &mut Vec<(&'static str, String)>) -> Result<(), OjsError> {
        let state = self.inner.queue.rate_limit(key).await?;
        let limit = state
            .pointer("/rate/limit")
            .or_else(|| state.pointer("/concurrency/limit"))
            .and_then(Value::as_i64);
        if let Some(limit) = limit {
            let reset = state
                .pointer("/rate/window_resets_unix")
                .and_then(Value::as_i64)
                .unwrap_or_else(|| time::OffsetDateTime::now_utc().unix_timestamp());
            headers.push(("x-ratelimit-limit", limit.to_string()));
            headers.push((
                "x-ratelimit-remaining",
                state["room"].as_i64().unwrap_or(0).min(limit).to_string(),
            ));
            headers.push(("x-ratelimit-reset", reset.to_string()));
        }
        Ok(())
    }

    async fn fetch(&self, body: Value, tenant: &str) -> Reply {
        let queues: Vec<String> = match body.get("queues") {
            None => vec![envelope::DEFAULT_QUEUE.to_string()],
            Some(Value::Array(names)) => names
                .iter()
                .map(|name| match name.as_str() {
                    Some(name) if envelope::is_valid_queue(name) => Ok(name.to_string()),
                    _ => Err(OjsError::invalid("\"queues\" must be an array of valid queue names")),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(OjsError::invalid("\"queues\" must be an array of queue names")),
        };
        let count = match body.get("count").or_else(|| body.get("max_jobs")) {
            None => 1,
            Some(count) => count
                .as_i64()
                .filter(|n| (1..=MAX_FETCH).contains(n))
                .ok_or_else(|| OjsError::invalid(format!("\"count\" must be from 1 to {MAX_FETCH}")))?,
        };
        let request = FetchRequest {
            queues,
            count,
            tenant: tenant.to_string(),
            worker_id: optional_string(&body, "worker_id")?,
            visibility_ms: optional_ms(&body, "visibility_timeout_ms")?,
        };
        let jobs = self.inner.queue.fetch(&request).await?;
        Ok((StatusCode::OK, json!({ "jobs": jobs })))
    }

    async fn ack(&self, body: Value, tenant: &str) -> Reply {
        let claim = claim(&body, tenant)?;
        let result = body.get("result").cloned();
        let job = self.inner.queue.ack(&claim, result).await?;
        Ok((StatusCode::OK, settled(job, "acknowledged")))
    }

    async fn nack(&self, body: Value, tenant: &str) -> Reply {
        let claim = claim(&body, tenant)?;
        let error = match body.get("error") {
            Some(error @ (Value::Object(_) | Value::String(_))) => error.clone(),
            None => json!({ "message": "the worker reported a failure" }),
            Some(_) => return Err(OjsError::invalid("\"error\" must be an object")),
        };
        let requeue = body.get("requeue").and_then(Value::as_bool).unwrap_or(false);
        let job = self.inner.queue.nack(&claim, Failure { error, requeue }).await?;
        Ok((StatusCode::OK, settled(job, "nacked")))
    }

    /// A worker's progress on its active job (ojs-progress §6): stored on the job, logged as a
    /// `job.progress` event, and a heartbeat. A report on a job that is not active is ignored,
    /// not refused (`accepted: false`).
    async fn progress(&self, body: Value, tenant: &str) -> Reply {
        let job_id = optional_string(&body, "job_id")?.ok_or_else(|| OjsError::invalid("missing \"job_id\""))?;
        let report = webhooks::parse_progress(&body)?;
        let worker_id = optional_string(&body, "worker_id")?;
        let (accepted, mut progress) = self
            .inner
            .queue
            .report_progress(self::job_id(&job_id)?, tenant, worker_id.as_deref(), &report)
            .await?;
        progress["accepted"] = Value::Bool(accepted);
        Ok((StatusCode::OK, progress))
    }

    /// The webhooks extension (ojs-webhooks §10): `rest` is the path after `/webhooks` (and
    /// `/subscriptions`): subscriptions by id, or `deliveries`.
    async fn webhooks(
        &self,
        method: &Method,
        rest: &[&str],
        body: &request::Body,
        query: &HashMap<String, String>,
    ) -> Reply {
        let queue = &self.inner.queue;
        match (method, rest) {
            (&Method::POST, []) => {
                let webhook = webhooks::parse_webhook(request::json(body)?)?;
                Ok((StatusCode::CREATED, subscription(queue.create_webhook(&webhook).await?)))
            }
            (&Method::GET, []) => Ok((StatusCode::OK, listing("subscriptions", queue.list_webhooks().await?))),
            (&Method::GET, ["deliveries"]) => {
                let count = query
                    .get("limit")
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(100)
                    .clamp(1, 1000);
                let subscription = query.get("subscription_id").map(String::as_str);
                let status = query.get("status").map(String::as_str);
                let deliveries = queue.webhook_deliveries(subscription, status, count).await?;
                Ok((StatusCode::OK, listing("deliveries", deliveries)))
            }
            (&Method::GET, ["deliveries", id]) => {
                Ok((StatusCode::OK, json!({ "delivery": queue.webhook_delivery(id).await? })))
            }
            (&Method::POST, ["deliveries", id, "retry"]) => Ok((
                StatusCode::OK,
                json!({ "delivery": queue.retry_webhook_delivery(id).await? }),
            )),
            (&Method::GET, [id]) => Ok((StatusCode::OK, subscription(queue.webhook(id).await?))),
            (&Method::PATCH, [id]) => {
                let update = webhooks::parse_update(&request::json(body)?)?;
                Ok((StatusCode::OK, subscription(queue.update_webhook(id, &update).await?)))
            }
            (&Method::DELETE, [id]) => {
                let mut deleted = subscription(queue.delete_webhook(id).await?);
                deleted["deleted"] = Value::Bool(true);
                Ok((StatusCode::OK, deleted))
            }
            (&Method::POST, [id, "rotate-secret"]) => {
                Ok((StatusCode::OK, subscription(queue.rotate_webhook_secret(id).await?)))
            }
            (&Method::POST, [id, "test"]) => self.test_webhook(id).await,
            _ => Err(OjsError::not_found(format!(
                "no OJS webhooks route {method} {}",
                rest.join("/")
            ))),
        }
    }

    /// Sends a `webhook.test` event to a subscription's endpoint now, outside the outbox, and
    /// says whether it accepted it (ojs-webhooks §6.6). Every failure answers alike, and only
    /// once the whole timeout has passed: a refused connection, an open port that does not speak
    /// HTTP, a silent one and a non-2xx answer must look the same, or the route scans ports
    /// (the gateway's log has the cause). An internal destination is refused before any
    /// connection, so saying so tells nothing about the port.
    async fn test_webhook(&self, id: &str) -> Reply {
        let (url, secret) = self.inner.queue.webhook_endpoint(id).await?;
        let event_id = format!("evt_{}", envelope::new_uuid_v7());
        let body = json!({ "specversion": "1.0", "id": event_id, "type": "webhook.test",
                           "source": "ojs://pgvs3/gateway", "time": now_rfc3339(), "subject": id, "data": {} });
        let delivery = crate::webhooks::Delivery {
            delivery_id: format!("del_{}", envelope::new_uuid_v7()),
            event_type: "webhook.test".into(),
            body: body.to_string(),
            url,
            secret: Some(secret),
            subscription: Some(id.to_string()),
        };
        let timeout = self.inner.options.webhook_timeout;
        let client = crate::webhooks::WebhookClient::new(timeout, 1, self.inner.options.webhook_destinations.clone())
            .map_err(OjsError::backend)?;
        let started = tokio::time::Instant::now();
        let mut answer = match client.post(&delivery).await {
            crate::webhooks::Outcome::Delivered => {
                json!({ "success": true, "response_time_ms": started.elapsed().as_millis() as u64 })
            }
            crate::webhooks::Outcome::Forbidden(error) => json!({ "success": false, "error": error }),
            crate::webhooks::Outcome::Failed(error) | crate::webhooks::Outcome::Refused(error) => {
                tracing::info!(subscription = id, %error, "webhook test delivery failed");
                tokio::time::sleep_until(started + timeout).await;
                json!({ "success": false, "error": "the endpoint did not accept the delivery (no 2xx answer in time)" })
            }
        };
        answer["delivery_id"] = json!(delivery.delivery_id);
        Ok((StatusCode::OK, answer))
    }

    async fn heartbeat(&self, body: Value, tenant: &str) -> Reply {
        let worker_id = optional_string(&body, "worker_id")?;
        let mut ids: Vec<String> = match body.get("active_jobs").or_else(|| body.get("job_ids")) {
            Some(Value::Array(ids)) => ids.iter().filter_map(Value::as_str).map(String::from).collect(),
            _ => Vec::new(),
        };
        if let Some(id) = optional_string(&body, "job_id")? {
            ids.push(id);
        }
        let state = match optional_string(&body, "state")?.as_deref() {
            None => None,
            Some(state @ ("running" | "quiet" | "drain" | "terminate")) => Some(state.to_string()),
            Some("draining") => Some("drain".to_string()),
            Some(other) => {
                return Err(OjsError::invalid(format!(
                    "unknown worker state {other:?} (running, quiet, drain or terminate)"
                )));
            }
        };
        // A count, or the list of jobs the worker holds.
        let active_jobs = match body.get("active_jobs") {
            Some(Value::Array(jobs)) => Some(jobs.len() as i32),
            Some(count) => count.as_i64().and_then(|n| i32::try_from(n).ok()),
            None => None,
        };
        let beat = queue::Beat {
            worker_id: worker_id.as_deref(),
            job_ids: &ids,
            tenant,
            visibility_ms: optional_ms(&body, "visibility_timeout_ms")?,
            state: state.as_deref(),
            active_jobs,
        };
        let mut reply = self.inner.queue.heartbeat(&beat).await?;
        if self.inner.options.allow_reset && reply.directive.is_none() {
            reply.directive = reply
                .test_directive
                .filter(|directive| matches!(directive.as_str(), "quiet" | "terminate"));
        }
        // A directive overrides what the worker reported: it is what the worker should become.
        let state = reply.directive.clone().unwrap_or(reply.state);
        Ok((
            StatusCode::OK,
            json!({ "acknowledged": true, "state": state, "directive": reply.directive.as_deref().unwrap_or("continue"),
                    "jobs_extended": reply.extended, "server_time": now_rfc3339() }),
        ))
    }

    /// Retrying many jobs at once is easy to regret, so the request must say `confirm: true`.
    async fn retry_in_bulk(&self, body: Value, tenant: &str) -> Reply {
        if body.get("confirm").and_then(Value::as_bool) != Some(true) {
            return Err(OjsError::invalid(
                "bulk retry changes many jobs: send \"confirm\": true",
            ));
        }
        let state = match body.pointer("/filter/state").and_then(Value::as_str) {
            Some(state @ ("discarded" | "cancelled")) => state,
            _ => return Err(OjsError::invalid("filter.state must be \"discarded\" or \"cancelled\"")),
        };
        let queue = body.pointer("/filter/queue").and_then(Value::as_str);
        let retried = self.inner.queue.retry_in_bulk(state, queue, tenant).await?;
        Ok((StatusCode::OK, json!({ "retried": retried, "count": retried })))
    }

    /// Registers a cron schedule (`POST /cron`; an existing name is 409), or registers or
    /// replaces one by name (`PUT /cron/{name}`).
    async fn register_cron(&self, mut body: Value, path_name: Option<&str>) -> Reply {
        if let (Some(path_name), Some(fields)) = (path_name, body.as_object_mut()) {
            match fields.get("name") {
                None => {
                    fields.insert("name".into(), Value::String(path_name.to_string()));
                }
                Some(name) if name == path_name => {}
                Some(_) => return Err(OjsError::invalid("the body's \"name\" is not the path's")),
            }
        }
        let registration = cron::parse_registration(body)?;
        // Checked now so a bad template fails here rather than at every tick.
        envelope::parse_job(
            registration.definition["job_template"].clone(),
            self.inner.options.max_args_bytes,
        )?
        .without_dependencies("a cron template")?;
        let replace = path_name.is_some();
        let cron = self.inner.queue.put_cron(&registration, replace).await?;
        let status = if replace { StatusCode::OK } else { StatusCode::CREATED };
        Ok((status, json!({ "cron": cron })))
    }

    async fn events(&self, query: &HashMap<String, String>) -> Reply {
        let after = query.get("after").and_then(|v| v.parse().ok()).unwrap_or(0);
        let limit = query
            .get("limit")
            .and_then(|v| v.parse().ok())
            .unwrap_or(100)
            .clamp(1, 1000);
        let events = self
            .inner
            .queue
            .events(&list_param(query, "types"), &list_param(query, "queues"), after, limit)
            .await?;
        Ok((StatusCode::OK, json!({ "events": events })))
    }
}

/// A subscription's answer: its fields at the top (as the webhooks extension shows them) and
/// under `subscription` (as this binding's other answers nest their object).
fn subscription(webhook: Value) -> Value {
    let mut answer = webhook.clone();
    answer["subscription"] = webhook;
    answer
}

/// ojs-progress §10.3: the numeric progress as a header, and no caching.
fn progress_headers(progress: &Value, headers: &mut Vec<(&'static str, String)>) {
    if let Some(value) = progress["progress"].as_f64() {
        headers.push(("x-ojs-progress", value.to_string()));
    }
    if let Some(modified) = progress["updated_at"].as_str().and_then(http_date) {
        headers.push(("last-modified", modified));
    }
    headers.push(("cache-control", "no-cache".to_string()));
}

/// An RFC 3339 time as an HTTP date (RFC 9110 §5.6.7: `Sun, 06 Nov 1994 08:49:37 GMT`).
fn http_date(rfc3339: &str) -> Option<String> {
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
fn pressure_headers(inserted: &queue::Inserted, headers: &mut Vec<(&'static str, String)>) {
    if let Some(pressure) = inserted.pressure {
        headers.push(("x-ojs-queue-depth", pressure.depth.to_string()));
        headers.push(("x-ojs-queue-bound", pressure.bound.to_string()));
        headers.push(("x-ojs-queue-pressure", format!("{:.2}", pressure.ratio())));
    }
}

/// A list under its own name and, as the admin API reads it, under `items` with pagination.
fn listing(name: &str, items: Vec<Value>) -> Value {
    let total = items.len();
    let mut body = json!({ "items": items, "pagination": { "total": total, "page": 1, "per_page": total.max(1) } });
    body[name] = body["items"].clone();
    body
}

/// Checks `PUT /admin/queues/:name/config`. Of ext-backpressure, depth bounds with the reject
/// strategy are supported; size bounds and the block and drop-oldest strategies are refused
/// rather than silently ignored.
fn queue_settings(body: Value) -> Result<Value, OjsError> {
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

fn claim(body: &Value, tenant: &str) -> Result<Claim, OjsError> {
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

fn optional_string(body: &Value, field: &str) -> Result<Option<String>, OjsError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(OjsError::invalid(format!("\"{field}\" must be a string"))),
    }
}

fn optional_ms(body: &Value, field: &str) -> Result<Option<i32>, OjsError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_i64()
            .filter(|ms| (1..=i32::MAX as i64).contains(ms))
            .map(|ms| Some(ms as i32))
            .ok_or_else(|| OjsError::invalid(format!("\"{field}\" must be a positive integer"))),
    }
}

fn job_id(text: &str) -> Result<&str, OjsError> {
    if envelope::is_uuid(text) {
        Ok(text)
    } else {
        Err(OjsError::not_found(format!("job {text} not found (ids are UUIDs)")))
    }
}

fn workflow_id(text: &str) -> Result<&str, OjsError> {
    if envelope::is_uuid(text) {
        Ok(text)
    } else {
        Err(OjsError::not_found(format!(
            "workflow {text} not found (ids are UUIDs)"
        )))
    }
}

fn queue_name(text: &str) -> Result<&str, OjsError> {
    if envelope::is_valid_queue(text) {
        Ok(text)
    } else {
        Err(OjsError::invalid(format!("invalid queue name {text:?}")))
    }
}

/// Reads a JSON body of at most `limit` bytes: a declared Content-Length over it is refused
/// before any of the body is read, a chunked body as soon as it passes the limit.
/// The answer to an ACK or NACK: the job's fields at the top (as the core binding reads them)
/// and the job under `job` (as the extension suites read it), with `flag` set.
fn settled(job: Value, flag: &str) -> Value {
    let mut answer = job.clone();
    answer[flag] = Value::Bool(true);
    answer["job"] = job;
    answer
}

fn parse_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .filter(|(key, _)| !key.is_empty())
        .map(|(key, value)| (key.to_string(), percent_decode(value)))
        .collect()
}

/// Decodes `%XX` escapes (query values are ids, names and lists: `,` and `:` arrive escaped);
/// a malformed escape is kept as it is.
fn percent_decode(text: &str) -> String {
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
fn list_param(query: &HashMap<String, String>, name: &str) -> Vec<String> {
    query
        .get(name)
        .map(|v| v.split(',').filter(|s| !s.is_empty()).map(String::from).collect())
        .unwrap_or_default()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The current time in RFC 3339 (UTC, microseconds), as job timestamps read.
pub(crate) fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        now.year(),
        now.month() as u8,
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.microsecond()
    )
}

/// How often a gateway checks for due cron schedules. Ticks are minutes apart, so a second of
/// lateness is the price of not needing a clock-synchronized scheduler.
const CRON_POLL: std::time::Duration = std::time::Duration::from_secs(1);
/// The event log is for pollers catching up, not an archive.
const EVENT_RETENTION: std::time::Duration = std::time::Duration::from_secs(3600);
const PRUNE_EVERY_TICKS: u64 = 60;

/// The cron ticker every gateway runs; the advisory lock in [`Queue::fire_due_crons`] makes one
/// of them fire each tick. On a standby it finds nothing to do (writes fail) and keeps polling.
/// Once a minute it also prunes old events (idempotent, so every gateway may).
pub fn spawn_cron_ticker(queue: Queue, max_args_bytes: usize) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(CRON_POLL);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for tick in 0u64.. {
            interval.tick().await;
            if tick % PRUNE_EVERY_TICKS == PRUNE_EVERY_TICKS - 1
                && let Err(error) = queue.prune_events(EVENT_RETENTION).await
            {
                tracing::debug!(?error, "pruning OJS events failed");
            }
            match queue.fire_due_crons(max_args_bytes).await {
                Ok(0) => {}
                Ok(fired) => tracing::debug!(fired, "cron jobs enqueued"),
                Err(error) => tracing::debug!(?error, "cron tick failed"),
            }
        }
    })
}

impl hyper::service::Service<Request<RequestBody>> for OjsService {
    type Response = Response<OjsBody>;
    type Error = Infallible;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<RequestBody>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move { Ok(service.handle(request).await) })
    }
}

#[cfg(test)]
mod tests {
    use super::route_template;

    #[test]
    fn span_names_follow_routes_not_jobs() {
        assert_eq!(
            route_template("/ojs/v1/jobs/0190b1d2-5c4e-7a3b-9c1d-2e3f4a5b6c7d/"),
            "/ojs/v1/jobs/:id"
        );
        assert_eq!(route_template("/ojs/v1/workers/fetch"), "/ojs/v1/workers/fetch");
        assert_eq!(route_template("/ojs/v1/events/42"), "/ojs/v1/events/:id");
        assert_eq!(
            route_template("/ojs/v1/queues/emails/pause"),
            "/ojs/v1/queues/emails/pause"
        );
    }
}
