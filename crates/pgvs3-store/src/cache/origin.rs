//! The S3 client a cache bucket uses to reach its origin.

use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_smithy_http_client::tls::{TlsContext, TrustStore};
use bytes::Bytes;
use futures::Stream;
use tokio::sync::mpsc;

use super::addresses::OriginAddresses;
use crate::store::{
    BodyStream, ByteRange, EntryHead, ListPage, ListRequest, ListedObject, ObjectMeta, Origin, OriginFault, StoreError,
    WriteCondition,
};

/// A failed origin request, in terms of what the client of the cache should hear.
#[derive(Debug)]
pub enum OriginError {
    /// 404: the origin has no such key (or bucket).
    Missing,
    /// The origin throttled (503 SlowDown and friends).
    Throttled(OriginFault),
    /// No answer within the origin timeout.
    Timeout(OriginFault),
    /// The origin refused the cache's credentials or request.
    Denied(OriginFault),
    /// The origin could not be reached at all.
    Unreachable(OriginFault),
    /// A precondition sent on to the origin did not hold.
    PreconditionFailed,
    /// 304 to a conditional GET.
    NotModified,
    /// 416: the range starts past the object's end.
    InvalidRange,
    Failed(OriginFault),
}

impl From<OriginError> for StoreError {
    fn from(err: OriginError) -> StoreError {
        match err {
            OriginError::Missing => StoreError::NoSuchKey,
            OriginError::PreconditionFailed => StoreError::PreconditionFailed,
            OriginError::Throttled(fault) => StoreError::OriginThrottled(fault),
            OriginError::Timeout(fault) => StoreError::OriginTimeout(fault),
            OriginError::Denied(fault) => StoreError::OriginDenied(fault),
            OriginError::Unreachable(fault) | OriginError::Failed(fault) => StoreError::OriginFailed(fault),
            OriginError::NotModified => StoreError::OriginFailed(OriginFault::plain("unexpected 304 from the origin")),
            OriginError::InvalidRange => StoreError::InvalidRange { size: 0 },
        }
    }
}

impl OriginError {
    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            OriginError::Missing => "missing",
            OriginError::Throttled(_) => "throttled",
            OriginError::Timeout(_) => "timeout",
            OriginError::Denied(_) => "denied",
            OriginError::Unreachable(_) => "unreachable",
            OriginError::PreconditionFailed => "precondition",
            OriginError::NotModified => "not_modified",
            OriginError::InvalidRange => "invalid_range",
            OriginError::Failed(_) => "failed",
        }
    }

    fn timeout(endpoint: &str, detail: String) -> OriginError {
        OriginError::Timeout(OriginFault {
            said: "the origin did not answer in time".into(),
            detail: format!("origin {endpoint} {detail}"),
        })
    }
}

fn classify<E: ProvideErrorMetadata + std::error::Error + 'static>(
    endpoint: &str,
    err: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> OriginError {
    match &err {
        SdkError::TimeoutError(_) => return OriginError::timeout(endpoint, "did not answer in time".into()),
        SdkError::DispatchFailure(failure) if failure.is_timeout() => {
            return OriginError::timeout(endpoint, "did not answer in time".into());
        }
        SdkError::DispatchFailure(_) => {
            // A refused certificate will be refused again: the log says which check failed and
            // what to do (the client's own text buries it in its causes).
            if let Some(why) = pgvs3_pgtls::refused_certificate(&err) {
                return OriginError::Unreachable(OriginFault {
                    said: "the origin could not be reached: its TLS certificate was refused".into(),
                    detail: pgvs3_pgtls::certificate_refusal(
                        why,
                        &pgvs3_pgtls::Refused {
                            whose: &format!("origin {endpoint}'s"),
                            roots: "the system's roots or the gateway's --origin-ca-file",
                            name_remedy: "use an endpoint URL with one of its names",
                            see: "see the origin's endpoint and --origin-ca-file",
                        },
                    ),
                });
            }
            return OriginError::Unreachable(OriginFault {
                said: "the origin could not be reached".into(),
                detail: format!(
                    "origin {endpoint} unreachable: {}",
                    aws_sdk_s3::error::DisplayErrorContext(&err)
                ),
            });
        }
        _ => {}
    }
    let status = err.raw_response().map(|response| response.status().as_u16());
    let code = err.code().unwrap_or("").to_owned();
    // What the client hears names the status and, when it looks like one, S3's error code:
    // never a text of the origin's own.
    let answer = match (status, plain_code(&code)) {
        (Some(status), Some(code)) => format!(" ({status} {code})"),
        (Some(status), None) => format!(" ({status})"),
        (None, Some(code)) => format!(" ({code})"),
        (None, None) => String::new(),
    };
    let fault = |said: &str| OriginFault {
        said: format!("{said}{answer}"),
        detail: format!(
            "origin {endpoint} answered {}: {}",
            status.map(|s| s.to_string()).unwrap_or_else(|| "an error".into()),
            aws_sdk_s3::error::DisplayErrorContext(&err)
        ),
    };
    match status {
        Some(304) => OriginError::NotModified,
        Some(404) => OriginError::Missing,
        Some(416) => OriginError::InvalidRange,
        Some(412) => OriginError::PreconditionFailed,
        Some(401 | 403) => OriginError::Denied(fault("the origin refused the request")),
        Some(429 | 503) => OriginError::Throttled(fault("the origin is throttling requests")),
        Some(504) => OriginError::Timeout(fault("the origin did not answer in time")),
        _ if code == "SlowDown" => OriginError::Throttled(fault("the origin is throttling requests")),
        _ => OriginError::Failed(fault("the origin failed the request")),
    }
}

/// An origin's error code as the client may hear it: S3's codes are short words of letters and
/// digits; anything else is the origin's own text, which stays in the log.
fn plain_code(code: &str) -> Option<&str> {
    (!code.is_empty() && code.len() <= 64 && code.bytes().all(|b| b.is_ascii_alphanumeric())).then_some(code)
}

/// The head of a GET or HEAD answer (their output types share the field names).
macro_rules! entry_head {
    ($output:ident, $size:expr) => {
        EntryHead {
            size: $size,
            etag: $output.e_tag.as_deref().map(unquote).unwrap_or_default(),
            last_modified: system_time($output.last_modified),
            meta: ObjectMeta {
                content_type: $output.content_type,
                content_encoding: $output.content_encoding,
                content_disposition: $output.content_disposition,
                content_language: $output.content_language,
                cache_control: $output.cache_control,
                expires: $output.expires_string,
                user: $output.metadata.unwrap_or_default().into_iter().collect(),
                ..ObjectMeta::default()
            },
        }
    };
}

/// Sets an object's stored headers and user metadata on a PUT or multipart-create request.
macro_rules! with_meta {
    ($request:expr, $meta:ident) => {
        $request
            .set_content_type($meta.content_type.clone())
            .set_content_encoding($meta.content_encoding.clone())
            .set_content_disposition($meta.content_disposition.clone())
            .set_content_language($meta.content_language.clone())
            .set_cache_control($meta.cache_control.clone())
            .set_metadata((!$meta.user.is_empty()).then(|| $meta.user.clone().into_iter().collect()))
    };
}

/// A GET's outcome.
pub enum Fetch {
    Body(Box<Fetched>),
    /// The entity tag sent as If-None-Match still matches.
    NotModified,
}

pub struct Fetched {
    pub head: EntryHead,
    /// For a ranged GET: the bytes sent, `(start, end)` exclusive.
    pub span: (u64, u64),
    pub body: BodyStream,
}

/// What origins' TLS certificates are verified with: the system's roots, and the CA bundles of
/// `--origin-ca-file` when given (origins with a private CA).
#[derive(Debug, Clone, Default)]
pub struct OriginTls(Option<TlsContext>);

impl OriginTls {
    pub fn load(ca_files: &[impl AsRef<Path>]) -> anyhow::Result<OriginTls> {
        use anyhow::Context;
        if ca_files.is_empty() {
            return Ok(OriginTls::default());
        }
        let mut trust = TrustStore::default();
        for path in ca_files.iter().map(AsRef::as_ref) {
            let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            // The HTTP client panics on a certificate it cannot take as a root: each is tried here.
            let mut roots = pgvs3_pgtls::rustls::RootCertStore::empty();
            for cert in pgvs3_pgtls::pem_certs(&pem).with_context(|| path.display().to_string())? {
                roots
                    .add(cert)
                    .with_context(|| format!("a certificate of {} is not usable as a CA", path.display()))?;
            }
            trust = trust.with_pem_certificate(pem);
        }
        let context = TlsContext::builder()
            .with_trust_store(trust)
            .build()
            .map_err(|err| anyhow::anyhow!("{err:?}"))?;
        Ok(OriginTls(Some(context)))
    }
}

pub struct OriginClient {
    client: aws_sdk_s3::Client,
    bucket: String,
    endpoint: String,
    timeout: Duration,
}

/// Parts of uploads above this size are sent one by one (multipart upload).
const MULTIPART_ABOVE: u64 = 64 * 1024 * 1024;
const PART_SIZE: usize = 16 * 1024 * 1024;

impl OriginClient {
    /// `timeout` bounds connecting and waiting for each response's head (not the transfer).
    /// Refused when the origin is at an address `addresses` does not allow.
    pub fn new(
        origin: &Origin,
        timeout: Duration,
        tls: &OriginTls,
        addresses: OriginAddresses,
    ) -> Result<OriginClient, OriginError> {
        addresses.check(&origin.endpoint).map_err(|refused| {
            OriginError::Unreachable(OriginFault {
                said: "the origin is at an address this gateway may not reach".into(),
                detail: format!("origin {}: {refused}", origin.endpoint),
            })
        })?;
        let mut http =
            aws_smithy_http_client::Builder::new().tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
            ));
        if let Some(context) = &tls.0 {
            http = http.tls_context(context.clone());
        }
        let http = match addresses.resolver() {
            Some(resolver) => http.build_with_resolver(resolver),
            None => http.build_https(),
        };
        let config = aws_sdk_s3::Config::builder()
            .behavior_version_latest()
            .region(Region::new(origin.region.clone()))
            .endpoint_url(origin.endpoint.trim_end_matches('/'))
            .force_path_style(origin.path_style)
            .credentials_provider(Credentials::new(
                origin.access_key.clone(),
                origin.secret_key.clone(),
                None,
                None,
                "pgvs3-origin",
            ))
            .http_client(http)
            // The cache's own retries (fills on the next miss, uploads with backoff) know
            // more than a blind retry inside a client request.
            .retry_config(RetryConfig::disabled())
            .timeout_config(TimeoutConfig::builder().connect_timeout(timeout).build())
            // Origins vary (S3-compatible servers lag on new checksum rules): plain requests.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .build();
        Ok(OriginClient {
            client: aws_sdk_s3::Client::from_conf(config),
            bucket: origin.origin_bucket.clone(),
            endpoint: origin.endpoint.clone(),
            timeout,
        })
    }

    async fn timed<T, E>(&self, request: impl Future<Output = Result<T, E>>) -> Result<T, OriginError>
    where
        E: Into<OriginError>,
    {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(result) => result.map_err(Into::into),
            Err(_) => Err(OriginError::timeout(
                &self.endpoint,
                format!("did not answer within {:?}", self.timeout),
            )),
        }
    }

    fn classify<E: ProvideErrorMetadata + std::error::Error + 'static>(
        &self,
        err: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
    ) -> OriginError {
        classify(&self.endpoint, err)
    }

    /// Checks that the origin bucket exists and the credentials work.
    pub async fn verify(&self) -> Result<(), OriginError> {
        let request = self.client.head_bucket().bucket(&self.bucket).send();
        self.timed(async { request.await.map_err(|err| self.classify(err)) })
            .await
            .map(drop)
    }

    /// GETs a key (or a range of it), unless `if_none_match` still matches.
    pub async fn get(
        &self,
        key: &str,
        range: Option<ByteRange>,
        if_none_match: Option<&str>,
    ) -> Result<Fetch, OriginError> {
        let mut request = self.client.get_object().bucket(&self.bucket).key(key);
        if let Some(range) = range {
            request = request.range(match range {
                ByteRange::From {
                    first,
                    last: Some(last),
                } => format!("bytes={first}-{last}"),
                ByteRange::From { first, last: None } => format!("bytes={first}-"),
                ByteRange::Suffix { length } => format!("bytes=-{length}"),
            });
        }
        if let Some(etag) = if_none_match {
            request = request.if_none_match(format!("\"{etag}\""));
        }
        let sent = request.send();
        let output = match self.timed(async { sent.await.map_err(|err| self.classify(err)) }).await {
            Ok(output) => output,
            Err(OriginError::NotModified) => return Ok(Fetch::NotModified),
            Err(err) => return Err(err),
        };
        let length = output.content_length.unwrap_or(0).max(0) as u64;
        let (span, size) = answered_span(output.content_range.as_deref(), length).map_err(|range| {
            OriginError::Failed(OriginFault {
                said: "the origin answered a range without the object's size".into(),
                detail: format!(
                    "origin {} answered Content-Range {range:?}, not bytes FIRST-LAST/SIZE",
                    self.endpoint
                ),
            })
        })?;
        let head = entry_head!(output, size);
        Ok(Fetch::Body(Box::new(Fetched {
            head,
            span,
            body: body_stream(output.body),
        })))
    }

    pub async fn head(&self, key: &str) -> Result<EntryHead, OriginError> {
        let request = self.client.head_object().bucket(&self.bucket).key(key).send();
        let output = self
            .timed(async { request.await.map_err(|err| self.classify(err)) })
            .await?;
        let size = output.content_length.unwrap_or(0).max(0) as u64;
        Ok(entry_head!(output, size))
    }

    /// PUTs a body held in memory; returns the origin's ETag.
    pub async fn put(
        &self,
        key: &str,
        meta: &ObjectMeta,
        body: Bytes,
        condition: &WriteCondition,
    ) -> Result<String, OriginError> {
        let mut request = self
            .put_request(key, meta)
            .content_length(body.len() as i64)
            .body(ByteStream::from(body));
        match condition {
            WriteCondition::Always => {}
            WriteCondition::IfAbsent => request = request.if_none_match("*"),
            WriteCondition::IfMatch(etag) if etag == "*" => request = request.if_match("*"),
            WriteCondition::IfMatch(etag) => request = request.if_match(format!("\"{etag}\"")),
            WriteCondition::IfNoneMatch(etag) => request = request.if_none_match(format!("\"{etag}\"")),
        }
        let sent = request.send();
        let output = self
            .timed(async { sent.await.map_err(|err| self.classify(err)) })
            .await?;
        Ok(output.e_tag.as_deref().map(unquote).unwrap_or_default())
    }

    fn put_request(
        &self,
        key: &str,
        meta: &ObjectMeta,
    ) -> aws_sdk_s3::operation::put_object::builders::PutObjectFluentBuilder {
        with_meta!(self.client.put_object().bucket(&self.bucket).key(key), meta)
    }

    /// Uploads a stored body of `size` bytes: one streamed PUT, or a multipart upload for
    /// large bodies. Returns the origin's ETag.
    pub async fn upload(
        &self,
        key: &str,
        meta: &ObjectMeta,
        size: u64,
        body: BodyStream,
    ) -> Result<String, OriginError> {
        if size <= MULTIPART_ABOVE {
            let request = self
                .put_request(key, meta)
                .content_length(size as i64)
                .body(ByteStream::from_body_1_x(StreamBody(body)))
                .customize()
                .disable_payload_signing()
                .send();
            let output = self
                .timed(async { request.await.map_err(|err| self.classify(err)) })
                .await?;
            return Ok(output.e_tag.as_deref().map(unquote).unwrap_or_default());
        }
        self.upload_multipart(key, meta, body).await
    }

    async fn upload_multipart(&self, key: &str, meta: &ObjectMeta, body: BodyStream) -> Result<String, OriginError> {
        use aws_sdk_s3::types::CompletedMultipartUpload;
        let create = with_meta!(
            self.client.create_multipart_upload().bucket(&self.bucket).key(key),
            meta
        )
        .send();
        let upload_id = self
            .timed(async { create.await.map_err(|err| self.classify(err)) })
            .await?
            .upload_id
            .ok_or_else(|| OriginError::Failed(OriginFault::plain("the origin returned no upload id")))?;
        let parts = match self.upload_parts(key, &upload_id, body).await {
            Ok(parts) => parts,
            Err(err) => {
                let _ = self
                    .client
                    .abort_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .send()
                    .await;
                return Err(err);
            }
        };
        let complete = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(&upload_id)
            .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(parts)).build())
            .send();
        let output = self
            .timed(async { complete.await.map_err(|err| self.classify(err)) })
            .await?;
        Ok(output.e_tag.as_deref().map(unquote).unwrap_or_default())
    }

    /// `body` as the upload's parts of [`PART_SIZE`] (the last one shorter; one empty part for
    /// an empty body).
    async fn upload_parts(
        &self,
        key: &str,
        upload_id: &str,
        mut body: BodyStream,
    ) -> Result<Vec<aws_sdk_s3::types::CompletedPart>, OriginError> {
        use futures::StreamExt;
        let mut parts = Vec::new();
        let mut buffer = bytes::BytesMut::with_capacity(PART_SIZE);
        let mut ended = false;
        while !ended {
            while buffer.len() < PART_SIZE {
                match body.next().await {
                    Some(piece) => buffer.extend_from_slice(&piece.map_err(|err| {
                        OriginError::Failed(OriginFault {
                            said: "reading the stored body failed".into(),
                            detail: format!("reading the stored body: {err}"),
                        })
                    })?),
                    None => {
                        ended = true;
                        break;
                    }
                }
            }
            let take = buffer.len().min(PART_SIZE);
            let part = buffer.split_to(take).freeze();
            if part.is_empty() && !parts.is_empty() {
                break;
            }
            let number = parts.len() as i32 + 1;
            parts.push(self.upload_part(key, upload_id, number, part).await?);
        }
        Ok(parts)
    }

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        number: i32,
        part: Bytes,
    ) -> Result<aws_sdk_s3::types::CompletedPart, OriginError> {
        let request = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .part_number(number)
            .content_length(part.len() as i64)
            .body(ByteStream::from(part))
            .send();
        let output = self
            .timed(async { request.await.map_err(|err| self.classify(err)) })
            .await?;
        Ok(aws_sdk_s3::types::CompletedPart::builder()
            .part_number(number)
            .set_e_tag(output.e_tag)
            .build())
    }

    pub async fn delete(&self, key: &str) -> Result<(), OriginError> {
        let request = self.client.delete_object().bucket(&self.bucket).key(key).send();
        self.timed(async { request.await.map_err(|err| self.classify(err)) })
            .await
            .map(drop)
    }

    /// One page of a ListObjectsV2 of the origin bucket (its continuation tokens pass
    /// through unchanged).
    pub async fn list(&self, request: &ListRequest) -> Result<ListPage, OriginError> {
        let sent = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&request.prefix)
            .set_delimiter(request.delimiter.clone())
            .set_start_after(request.start_after.clone())
            .set_continuation_token(request.continuation.clone())
            .max_keys(request.max_keys.min(i32::MAX as usize) as i32)
            .send();
        let output = self
            .timed(async { sent.await.map_err(|err| self.classify(err)) })
            .await?;
        let objects: Vec<ListedObject> = output
            .contents
            .unwrap_or_default()
            .into_iter()
            .map(|object| ListedObject {
                key: object.key.unwrap_or_default(),
                size: object.size.unwrap_or(0).max(0) as u64,
                etag: object.e_tag.as_deref().map(unquote).unwrap_or_default(),
                last_modified: system_time(object.last_modified),
            })
            .collect();
        let common_prefixes: Vec<String> = output
            .common_prefixes
            .unwrap_or_default()
            .into_iter()
            .filter_map(|prefix| prefix.prefix)
            .collect();
        let last_entry = objects
            .last()
            .map(|object| object.key.clone())
            .into_iter()
            .chain(common_prefixes.last().cloned())
            .max();
        Ok(ListPage {
            objects,
            common_prefixes,
            next_token: output
                .next_continuation_token
                .filter(|_| output.is_truncated == Some(true)),
            last_entry,
        })
    }
}

fn unquote(etag: &str) -> String {
    etag.trim_matches('"').to_owned()
}

fn system_time(time: Option<DateTime>) -> SystemTime {
    time.and_then(|time| SystemTime::try_from(time).ok())
        .unwrap_or_else(SystemTime::now)
}

/// The bytes a GET's answer holds, `(start, end)` exclusive, and the object's size: the whole
/// object without a Content-Range. A Content-Range that does not name the object's size
/// (`bytes 0-99/*`) is refused (`Err` holds it): its bytes taken for the whole object would be
/// cached as the object, and S3 clients need the size in the range answered to them.
fn answered_span(content_range: Option<&str>, length: u64) -> Result<((u64, u64), u64), &str> {
    match content_range {
        None => Ok(((0, length), length)),
        Some(range) => match parse_content_range(range) {
            Some((start, end, total)) => Ok(((start, end), total)),
            None => Err(range),
        },
    }
}

/// `bytes 0-99/1000` → (0, 100, 1000).
fn parse_content_range(text: &str) -> Option<(u64, u64, u64)> {
    let rest = text.strip_prefix("bytes ")?;
    let (span, total) = rest.split_once('/')?;
    let (first, last) = span.split_once('-')?;
    let first: u64 = first.trim().parse().ok()?;
    let last: u64 = last.trim().parse().ok()?;
    Some((first, last + 1, total.trim().parse().ok()?))
}

/// The origin's body as a store body stream. A pump task moves it into a channel, so the
/// stream handed on is `Sync` whatever the client's body type is.
fn body_stream(mut body: ByteStream) -> BodyStream {
    let (sender, receiver) = mpsc::channel(4);
    tokio::spawn(async move {
        loop {
            let piece = match body.next().await {
                None => break,
                Some(Ok(bytes)) => Ok(bytes),
                Some(Err(err)) => Err(StoreError::OriginFailed(OriginFault {
                    said: "the origin's body failed".into(),
                    detail: format!("origin body failed: {err}"),
                })),
            };
            let failed = piece.is_err();
            if sender.send(piece).await.is_err() || failed {
                break;
            }
        }
    });
    Box::pin(ChannelBody(receiver))
}

/// A body fed through a channel.
pub struct ChannelBody(pub mpsc::Receiver<Result<Bytes, StoreError>>);

impl Stream for ChannelBody {
    type Item = Result<Bytes, StoreError>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// A stored body as an HTTP body for an upload.
struct StreamBody(BodyStream);

impl http_body::Body for StreamBody {
    type Data = Bytes;
    type Error = StoreError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, StoreError>>> {
        self.0
            .as_mut()
            .poll_next(cx)
            .map(|piece| piece.map(|piece| piece.map(http_body::Frame::data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges_parse_to_exclusive_spans() {
        assert_eq!(parse_content_range("bytes 0-99/1000"), Some((0, 100, 1000)));
        assert_eq!(parse_content_range("bytes 5-5/6"), Some((5, 6, 6)));
        assert_eq!(parse_content_range("bytes */1000"), None);
        assert_eq!(parse_content_range("items 0-1/2"), None);
    }

    #[test]
    fn a_range_of_unknown_size_is_never_taken_for_the_whole_object() {
        assert_eq!(answered_span(None, 10), Ok(((0, 10), 10)));
        assert_eq!(answered_span(Some("bytes 0-9/100"), 10), Ok(((0, 10), 100)));
        assert_eq!(answered_span(Some("bytes 0-9/*"), 10), Err("bytes 0-9/*"));
        assert_eq!(answered_span(Some("bytes 0-9"), 10), Err("bytes 0-9"));
    }
}
