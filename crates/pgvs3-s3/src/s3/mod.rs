//! The S3 REST front: s3s does routing, SigV4 and XML; `front` maps operations onto bucket handles.

mod access_log;
mod auth;
mod authorize;
mod checksum;
mod chunk_guard;
mod cors;
mod domains;
mod error_body;
mod errors;
mod front;
mod multipart_checksum;
mod post_form;
mod sts;
mod unkept_xml;

pub use front::FrontSettings;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use prometheus::IntCounter;
use s3s::service::{S3Service, S3ServiceBuilder};
use tracing::Instrument;

use crate::admission::Admitted;
use crate::bucket::Buckets;
use crate::metrics::Metrics;
use crate::replica_lag::ReplicaLag;
use crate::request_body::RequestBody;
pub use auth::S3Admission;
use auth::{CatalogAuth, RequestFacts, SignedOnly};
use errors::RequestId;
pub use post_form::PostLimits;

/// The S3 endpoint as a hyper service: s3s plus request ids and metrics. One `Arc`, so the
/// clone each request's future takes is one reference count, not one per metric.
#[derive(Clone)]
pub struct S3Endpoint(Arc<Endpoint>);

struct Endpoint {
    service: S3Service,
    metrics: Metrics,
    /// This front's byte counters, resolved once instead of looked up by label per request.
    bytes_received: IntCounter,
    bytes_sent: IntCounter,
    lag: ReplicaLag,
    next_request: AtomicU64,
    id_prefix: String,
    /// For CORS, answered around s3s: preflights before it, headers on its responses.
    catalog: Arc<crate::store::Catalog>,
    hosts: Option<domains::Domains>,
    /// Bounds on browser uploads, which s3s reads into memory before any access check.
    post: post_form::PostLimits,
    /// Unsigned STS calls (AssumeRoleWithWebIdentity), answered before s3s: they name no
    /// bucket. Signed ones (GetCallerIdentity) are s3s's custom route.
    sts: Arc<sts::Sts>,
    /// Where server access log records go, and the tasks that queue and deliver them; `None`
    /// on a standby, whose database takes no writes.
    access_logs: Option<(access_log::Records, access_log::Tasks)>,
}

impl S3Endpoint {
    pub fn new(
        buckets: Buckets,
        settings: front::FrontSettings,
        domains: &[String],
        metrics: Metrics,
        admission: S3Admission,
        lag: ReplicaLag,
        post: post_form::PostLimits,
    ) -> anyhow::Result<S3Endpoint> {
        let catalog = Arc::clone(buckets.catalog());
        let access_logs = (!lag.is_standby()).then(|| access_log::start(buckets.clone(), settings.region.clone()));
        let mut builder = S3ServiceBuilder::new(front::S3Front::new(buckets, settings));
        let mut config = s3s::config::S3Config::default();
        config.post_object_max_file_size = post.max_file;
        config.form_max_field_size = post_form::MAX_FIELDS_SIZE;
        config.form_max_fields_size = post_form::MAX_FIELDS_SIZE;
        config.form_max_parts = post_form::MAX_PARTS;
        builder.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(config))));
        let sts = Arc::new(sts::Sts::new(Arc::clone(&catalog), &metrics));
        builder.set_route(sts::SignedSts(Arc::clone(&sts)));
        builder.set_auth(CatalogAuth {
            catalog: Arc::clone(&catalog),
        });
        builder.set_access(SignedOnly {
            admission,
            catalog: Arc::clone(&catalog),
        });
        let hosts = match domains.is_empty() {
            true => None,
            false => {
                builder.set_host(domains::Domains::new(domains)?);
                Some(domains::Domains::new(domains)?)
            }
        };
        Ok(S3Endpoint(Arc::new(Endpoint {
            service: builder.build(),
            bytes_received: metrics.bytes_received.with_label_values(&["s3"]),
            bytes_sent: metrics.bytes_sent.with_label_values(&["s3"]),
            metrics,
            lag,
            next_request: AtomicU64::new(1),
            id_prefix: crate::master_key::random_token(6),
            catalog,
            hosts,
            post,
            sts,
            access_logs,
        })))
    }
}

impl Endpoint {
    async fn handle(&self, request: Request<RequestBody>) -> Response<AdmittedBody> {
        let span = crate::telemetry::request_span("s3", Some(request.headers()));
        self.handle_in_span(request).instrument(span).await
    }

    async fn handle_in_span(&self, request: Request<RequestBody>) -> Response<AdmittedBody> {
        let started = Instant::now();
        let request_id = format!(
            "{}{:010X}",
            self.id_prefix,
            self.next_request.fetch_add(1, Ordering::Relaxed)
        );
        if let Some(lag) = self.lag.too_far_behind() {
            let message = format!(
                "this gateway's standby is {:.1} s behind its primary (limit {:.1} s); read from another replica",
                lag.as_secs_f64(),
                self.lag.limit().unwrap_or_default().as_secs_f64()
            );
            return self.turn_away(started, "ServiceUnavailable", &message, &request_id);
        }
        // Admitted in `SignedOnly::check`, once the signature holds and before the body is
        // read or a database connection is taken; the slot then rides on the response body.
        let facts = RequestFacts::default();
        let mut response = self.serve(request, &facts, started, request_id).await;
        if facts.turned_away() {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        let admitted = facts.take_admitted();
        let log = match (facts.take_log(), &self.access_logs) {
            (Some(draft), Some((records, _))) => Some(Box::new(draft.answered(&response, started, records))),
            _ => None,
        };
        response.map(|body| AdmittedBody {
            inner: body,
            admitted,
            log,
            sent: 0,
        })
    }

    /// A 503 with Retry-After, before anything of the request was read.
    fn turn_away(&self, started: Instant, code: &str, message: &str, request_id: &str) -> Response<AdmittedBody> {
        let mut response = error_response(http::StatusCode::SERVICE_UNAVAILABLE, code, message, request_id);
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
        self.record(started, &RequestFacts::default(), &response, None);
        response.map(|body| AdmittedBody {
            inner: body,
            admitted: None,
            log: None,
            sent: 0,
        })
    }

    async fn serve(
        &self,
        mut request: Request<RequestBody>,
        facts: &RequestFacts,
        started: Instant,
        request_id: String,
    ) -> Response<s3s::Body> {
        request.extensions_mut().insert(RequestId(request_id.clone()));
        request.extensions_mut().insert(facts.clone());
        let method = request.method().clone();
        let received = content_length(request.headers(), "x-amz-decoded-content-length")
            .or_else(|| content_length(request.headers(), "content-length"));
        // A browser's request: its bucket is taken from the path or Host now, so that even an
        // error s3s raises before routing (a bad signature) carries the CORS headers.
        let origin = request.headers().get(http::header::ORIGIN).cloned();
        let cors_bucket = origin.as_ref().and_then(|_| self.bucket_of(&request));
        let signed_sts = sts::Sts::signed_call(&request) && self.host_bucket(&request).is_none();
        let mut asked = error_body::Asked::of(request.uri(), request.headers());
        let outcome = self.route(request, facts, cors_bucket.as_deref(), &request_id).await;
        let mut response = match outcome {
            Ok(response) if facts.operation() == Some("GetObjectAttributes") => unquote_attributes_etag(response),
            Ok(response) => response,
            Err(err) => {
                tracing::error!(error = ?err, "S3 request failed inside the service");
                let mut response = Response::new(s3s::Body::empty());
                *response.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                response
            }
        };
        asked.named(facts.bucket(), facts.key());
        response = error_body::complete(response, &asked);
        if signed_sts {
            response = self.sts.in_sts_terms(response, &request_id).await;
        }
        if let Ok(value) = HeaderValue::from_str(&request_id) {
            response.headers_mut().insert("x-amz-request-id", value);
        }
        // A browser's real request: S3's CORS headers if the bucket's rules allow its origin.
        if let (Some(origin), Some(bucket)) = (&origin, facts.bucket().or(cors_bucket.as_deref()))
            && method != http::Method::OPTIONS
            && let Ok(origin) = origin.to_str()
        {
            cors::decorate(&self.catalog, bucket, origin, &method, response.headers_mut());
        }
        self.record(started, facts, &response, received);
        response
    }

    /// Who answers the request: a CORS preflight, STS, a refusal s3s would word otherwise, or
    /// s3s (a browser upload's form, and a body whose unkept XML is watched, observed on the
    /// way).
    async fn route(
        &self,
        mut request: Request<RequestBody>,
        facts: &RequestFacts,
        cors_bucket: Option<&str>,
        request_id: &str,
    ) -> Result<Response<s3s::Body>, s3s::HttpError> {
        if request.method() == http::Method::OPTIONS {
            facts.name_operation("PreflightCors");
            return Ok(match cors::preflight(&self.catalog, cors_bucket, request.headers()) {
                Ok(headers) => {
                    let mut response = Response::new(s3s::Body::empty());
                    *response.headers_mut() = headers;
                    response
                }
                Err((status, code, message)) => error_response(status, code, message, request_id),
            });
        }
        if sts::Sts::wants(&request) && self.host_bucket(&request).is_none() {
            facts.name_operation("STS");
            return Ok(self.sts.handle(request, request_id).await);
        }
        if let Some(refused) = refused_before_s3s(&request, request_id) {
            return Ok(refused);
        }
        if self.host_bucket(&request).is_none() {
            auth::slash_v2_bucket_path(&mut request);
        }
        match post_form::FormPost::of(&request) {
            None if unkept_xml::watched(&request) => {
                let (request, unkept) = unkept_xml::watch(request);
                let outcome = self.service.call(request).await;
                match unkept.refused() {
                    Some(message) => Ok(error_response(
                        http::StatusCode::NOT_IMPLEMENTED,
                        "NotImplemented",
                        message,
                        request_id,
                    )),
                    None => outcome,
                }
            }
            None => {
                let chunked = chunk_guard::is_chunked(request.headers());
                self.service.call(request.map(|body| s3s_body(body, chunked))).await
            }
            Some(form) => self.post(form, request, facts, request_id).await,
        }
    }

    /// A browser upload (POST form): bounded and gated before s3s reads its fields, its
    /// refusals and its answer (`success_action_*`) as S3 gives them.
    async fn post(
        &self,
        form: post_form::FormPost,
        request: Request<RequestBody>,
        facts: &RequestFacts,
        request_id: &str,
    ) -> Result<Response<s3s::Body>, s3s::HttpError> {
        let gate = match form.length(request.headers(), &self.post) {
            Ok(length) => self
                .unsigned_form(&request)
                .await
                .map(|unsigned| post_form::Gate::new(length, unsigned, &self.post)),
            Err(refusal) => Err(refusal),
        };
        let gate = match gate {
            Err((status, code, message)) => {
                facts.name_operation("PostObject");
                return Ok(error_response(status, code, message, request_id));
            }
            Ok(gate) => gate,
        };
        let request = form.observe(request, gate);
        let notes = request.extensions().get::<post_form::FormNotes>().cloned();
        // The notes hold the file's reservation until s3s has stored it.
        let outcome = self.service.call(request).await;
        outcome.map(|response| match notes {
            Some(notes) => match notes.refused() {
                Some((status, code, message)) => {
                    facts.name_operation("PostObject");
                    error_response(status, code, message, request_id)
                }
                None => post_form::finish(response, &notes, request_id),
            },
            None => response,
        })
    }

    /// What decides an unsigned form to the bucket a form is posted to, where its rules (a
    /// policy, or ACLs) may let one write; refused when it does not exist, as S3 does, before a
    /// byte of the form is read.
    async fn unsigned_form<B>(
        &self,
        request: &Request<B>,
    ) -> Result<Option<post_form::UnsignedForm>, post_form::Refusal> {
        let Some(name) = self.bucket_of(request) else {
            return Ok(None);
        };
        let bucket = match self.catalog.cached_bucket(&name) {
            Some(bucket) => bucket,
            None => match self.catalog.bucket(&name).await {
                Ok(bucket) => bucket,
                Err(crate::store::StoreError::NoSuchBucket) => {
                    return Err((
                        http::StatusCode::NOT_FOUND,
                        "NoSuchBucket",
                        "The specified bucket does not exist",
                    ));
                }
                Err(_) => {
                    return Err((
                        http::StatusCode::SERVICE_UNAVAILABLE,
                        "ServiceUnavailable",
                        "Please reduce your request rate.",
                    ));
                }
            },
        };
        let has_rules = bucket.access.policy.is_some() || bucket.access.acls_enabled();
        Ok(has_rules.then(|| post_form::UnsignedForm {
            bucket,
            peer: request.extensions().get::<crate::http_server::Peer>().copied(),
            headers: request.headers().clone(),
            query: request.uri().query().map(str::to_owned),
        }))
    }

    /// The bucket a virtual-host-style request names in its Host header (`--s3-domain`).
    fn host_bucket<B>(&self, request: &Request<B>) -> Option<String> {
        use s3s::host::S3Host;
        let hosts = self.hosts.as_ref()?;
        let host = request.headers().get(http::header::HOST)?.to_str().ok()?;
        let parsed = hosts.parse_host_header(host).ok()?;
        parsed.bucket().map(str::to_owned)
    }

    /// The bucket a request's path or Host names (for preflights, which s3s does not route).
    fn bucket_of<B>(&self, request: &Request<B>) -> Option<String> {
        if let Some(bucket) = self.host_bucket(request) {
            return Some(bucket);
        }
        let first = request.uri().path().trim_start_matches('/').split('/').next()?;
        (!first.is_empty()).then(|| first.to_owned())
    }

    /// Metrics and the request span's fields, once the response's head is known.
    fn record(&self, started: Instant, facts: &RequestFacts, response: &Response<s3s::Body>, received: Option<u64>) {
        let operation = facts.operation().unwrap_or("Unknown");
        let status_code = response.status();
        let status = status_code.as_str();
        let sent = content_length(response.headers(), "content-length");
        let answer = crate::telemetry::Answer {
            operation,
            bucket: facts.bucket(),
            bytes_in: received,
            bytes_out: sent,
            status,
            failed: status_code.is_server_error(),
        };
        crate::telemetry::answered(&tracing::Span::current(), "S3", &answer);
        self.metrics
            .requests
            .with_label_values(&["s3", operation, status])
            .inc();
        self.metrics
            .request_seconds
            .with_label_values(&["s3", operation])
            .observe(started.elapsed().as_secs_f64());
        if let Some(bytes) = received {
            self.bytes_received.inc_by(bytes);
        }
        if let Some(bytes) = sent {
            self.bytes_sent.inc_by(bytes);
        }
    }
}

/// An S3 XML error for requests answered before s3s sees them.
fn error_response(status: http::StatusCode, code: &str, message: &str, request_id: &str) -> Response<s3s::Body> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{message}</Message><RequestId>{request_id}</RequestId></Error>"
    );
    let mut response = Response::new(s3s::Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    response
}

/// A request refused before s3s sees it, in S3's words where s3s would use its own: a presigned
/// URL's expiry (s3s refuses a negative or non-numeric one its way) or malformed signature, a
/// SigV2 date (s3s checks none), a signed request without a date (s3s: 400 InvalidRequest).
fn refused_before_s3s<B>(request: &Request<B>, request_id: &str) -> Option<Response<s3s::Body>> {
    if let Err(refused) = auth::presigned_expiry(request.uri()) {
        let message = refused.message().unwrap_or_default();
        return Some(error_response(
            http::StatusCode::BAD_REQUEST,
            refused.code().as_str(),
            message,
            request_id,
        ));
    }
    if auth::presigned_signature_malformed(request.uri()) {
        return Some(error_response(
            http::StatusCode::FORBIDDEN,
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
            request_id,
        ));
    }
    if let Err((code, message)) = auth::sigv2_date(request.headers(), time::OffsetDateTime::now_utc()) {
        return Some(error_response(http::StatusCode::FORBIDDEN, code, message, request_id));
    }
    if auth::unsigned_header(request.uri(), request.headers()).is_some() {
        return Some(error_response(
            http::StatusCode::FORBIDDEN,
            "AccessDenied",
            "There were headers present in the request which were not signed",
            request_id,
        ));
    }
    if let Some(subresource) = auth::sigv2_unsigned_subresource(request.uri(), request.headers()) {
        return Some(error_response(
            http::StatusCode::FORBIDDEN,
            "AccessDenied",
            &format!(
                "The '{subresource}' sub-resource needs a Signature Version 4 request: Signature Version 2 does not sign it."
            ),
            request_id,
        ));
    }
    let undated = request.headers().contains_key(http::header::AUTHORIZATION)
        && !request.headers().contains_key("x-amz-date")
        && !request.headers().contains_key(http::header::DATE);
    undated.then(|| {
        error_response(
            http::StatusCode::FORBIDDEN,
            "AccessDenied",
            "AWS authentication requires a valid Date or x-amz-date header",
            request_id,
        )
    })
}

/// A key in a URL's path (`keep_slash`) or a query value: everything but RFC 3986's unreserved
/// characters percent-encoded.
pub(crate) fn percent_encode(text: &str, keep_slash: bool) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => encoded.push(byte as char),
            b'/' if keep_slash => encoded.push('/'),
            _ => encoded.push_str(&format!("%{byte:02X}")),
        }
    }
    encoded
}

/// The body as s3s reads it: an empty one as such (no box, no timer), others with their idle
/// deadline, and an `aws-chunked` one with its chunks bounded (see `chunk_guard`).
fn s3s_body(body: RequestBody, chunked: bool) -> s3s::Body {
    if http_body::Body::is_end_stream(&body) {
        s3s::Body::empty()
    } else if chunked {
        s3s::Body::http_body(chunk_guard::ChunkGuard::new(body))
    } else {
        s3s::Body::http_body(body)
    }
}

/// The answer to a connection beyond `--s3-max-connections`.
pub fn busy_response() -> Bytes {
    crate::http_server::busy_response(
        "application/xml",
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>\
         <Message>Please reduce your request rate (too many connections).</Message></Error>",
    )
}

fn content_length(headers: &http::HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.parse().ok()
}

/// A response body that keeps its request's admission slot until the last byte is sent, and
/// finishes its access log record (bytes sent, total time) when it ends or is dropped.
pub struct AdmittedBody {
    inner: s3s::Body,
    admitted: Option<Admitted>,
    log: Option<Box<access_log::Pending>>,
    /// Bytes sent, counted while a record waits for them.
    sent: u64,
}

impl Drop for AdmittedBody {
    fn drop(&mut self) {
        if let Some(log) = self.log.take() {
            log.finish(self.sent);
        }
    }
}

impl http_body::Body for AdmittedBody {
    type Data = bytes::Bytes;
    type Error = <s3s::Body as http_body::Body>::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let frame = std::pin::Pin::new(&mut this.inner).poll_frame(cx);
        match &frame {
            std::task::Poll::Ready(None) => this.admitted = None,
            std::task::Poll::Ready(Some(Ok(frame))) if this.log.is_some() => {
                this.sent += frame.data_ref().map_or(0, |data| data.len() as u64);
            }
            _ => {}
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl hyper::service::Service<Request<RequestBody>> for S3Endpoint {
    type Response = Response<AdmittedBody>;
    type Error = Infallible;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<RequestBody>) -> Self::Future {
        let endpoint = Arc::clone(&self.0);
        Box::pin(async move { Ok(endpoint.handle(request).await) })
    }
}

/// GetObjectAttributes' `<ETag>` as S3 writes it: without the quotes every other ETag has
/// (s3s writes them all quoted). The body is a short XML document s3s has already built whole.
fn unquote_attributes_etag(mut response: Response<s3s::Body>) -> Response<s3s::Body> {
    let Some(body) = response.body().bytes() else {
        return response;
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return response;
    };
    let (Some(open), Some(close)) = (text.find("<ETag>\""), text.find("\"</ETag>")) else {
        return response;
    };
    if close <= open {
        return response;
    }
    let value = &text[open + "<ETag>\"".len()..close];
    let unquoted = format!(
        "{}<ETag>{value}</ETag>{}",
        &text[..open],
        &text[close + "\"</ETag>".len()..]
    );
    response.headers_mut().remove(http::header::CONTENT_LENGTH);
    *response.body_mut() = s3s::Body::from(unquoted);
    response
}
