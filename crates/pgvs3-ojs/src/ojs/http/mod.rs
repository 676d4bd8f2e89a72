//! OJS (Open Job Spec) over HTTP: the binding's routes under `/ojs/v1` ([`routes`] for jobs,
//! workers, workflows, cron, webhooks and schemas; [`admin`] for queues and `/admin`), the
//! manifest at `/ojs/manifest`, and OJS error objects ([`error`]). The engine underneath is
//! [`super::engine::Queue`]; this side reads requests, calls it, and maps its errors.
//!
//! Auth: none by default (the listener binds to loopback); with `--ojs-token` (or tenant tokens)
//! every route except the manifest and health needs `Authorization: Bearer <token>`. Job routes
//! act as the request's tenant ([`tenant`]).

mod admin;
mod error;
mod request;
mod routes;
pub mod stream;
pub mod tenant;
mod wire;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use crate::request_body::RequestBody;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{Either, Full};
use serde_json::{Value, json};

use super::engine::Queue;
use super::engine::job::State;
use crate::admission::{Admission, BufferBudget};
use crate::http_server::Shutdown;
use crate::replica_lag::ReplicaLag;
pub use error::OjsError;
use stream::EventHub;
use wire::{job_id, list_param, parse_query, queue_name};

const CONTENT_TYPE: &str = "application/openjobspec+json";
const OJS_VERSION: &str = "1.0";

/// What a request body needs beyond its job's `args`: the rest of the envelope (type, options,
/// meta). `--ojs-max-body-bytes` must leave at least this much room over `--ojs-max-args-bytes`.
const ENVELOPE_ROOM: u64 = 64 << 10;
const MAX_BATCH: usize = 10_000;
const MAX_FETCH: i64 = 1_000;
const EVENT_STREAM_PATH: &str = "/ojs/v1/events/stream";

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

/// Whether the database answers, as the health routes (`/health`, `/ready`, `/ojs/v1/health`)
/// ask it: they answer before any token check or admission slot, so they must not reach the
/// request pool (200 keep-alive clients pipelining `GET /health` held all its connections). The
/// gateway answers on its readiness connection (one, one check at a time).
pub trait HealthProbe: Send + Sync {
    fn answers(&self) -> futures::future::BoxFuture<'_, anyhow::Result<()>>;
}

#[derive(Clone)]
pub struct OjsService {
    inner: Arc<Inner>,
}

struct Inner {
    queue: Queue,
    options: OjsOptions,
    health: Arc<dyn HealthProbe>,
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
        health: Arc<dyn HealthProbe>,
        admission: Admission,
        lag: ReplicaLag,
        shutdown: Shutdown,
        budget: BufferBudget,
    ) -> OjsService {
        OjsService {
            inner: Arc::new(Inner {
                events: EventHub::new(queue.clone(), admission.clone()),
                queue,
                options,
                health,
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
            .unwrap_or_else(super::engine::envelope::new_uuid_v7);
        let path = request.uri().path().trim_end_matches('/');
        let mut response = if path == "/metrics" {
            self.serve_metrics(request.headers()).await.map(Either::Left)
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

    /// `/metrics` counts every tenant's jobs with a scan of them all: it takes what the admin
    /// routes take (the root token when one is needed, never a tenant's) and an admission slot
    /// like any query.
    async fn serve_metrics(&self, headers: &http::HeaderMap) -> Response<Full<Bytes>> {
        match self.authorize(headers) {
            Err(error) => return error.response(),
            Ok(acting) if acting.bound => {
                return OjsError::forbidden("a tenant token reaches the job routes only, not /metrics").response();
            }
            Ok(_) => {}
        }
        match self.inner.admission.admit().await {
            Ok(_admitted) => self.metrics().await,
            Err(_) => OjsError::overloaded().response(),
        }
    }

    /// Job counts by state, in the Prometheus text format (the gateway's own metrics are on the
    /// admin port).
    async fn metrics(&self) -> Response<Full<Bytes>> {
        let (status, text) = match self.inner.queue.stats(None).await {
            Ok(stats) => {
                let mut text = String::from("# HELP ojs_jobs Jobs by state.\n# TYPE ojs_jobs gauge\n");
                for state in State::ALL {
                    let count = stats.jobs.of(state);
                    text.push_str(&format!("ojs_jobs{{state=\"{}\"}} {count}\n", state.as_str()));
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
                           "webhooks", "progress", "schema-registry"],
        })
    }

    /// The HTTP binding's health answer (§8.1): the protocol `version`, this gateway's uptime,
    /// and the database's state with the round trip it took.
    async fn health(&self) -> (StatusCode, Value) {
        let asked = std::time::Instant::now();
        let (status, mut answer) = match self.inner.health.answers().await {
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
