//! S3 server access logs: a record in S3's log format for each request to a bucket with
//! logging on (PutBucketLogging, `front::logging`), queued durably in PostgreSQL and delivered
//! to the target bucket in batches, best effort, as S3 documents.
//!
//! A request's record starts as a [`Draft`] in the access check (`auth::SignedOnly`, once the
//! bucket is resolved: refused requests are logged too), is completed with the answer's status
//! and error code ([`Draft::answered`]), and is finished when its response body ends or is
//! dropped (bytes sent, total time; `AdmittedBody`). Finished records go through a bounded
//! channel to this gateway's writer, which queues them in `pgvs3.access_log_records` in one
//! statement per batch (a full channel or queue drops records, as S3's logging is best effort).
//! Every gateway runs a deliverer: each tick it claims queued records no other gateway holds
//! (`Store::claim_access_logs`), writes each source bucket's as one log object, and deletes them
//! in the claim's transaction. A log object's name is made of its first record (time and id),
//! so a batch delivered again after a crash rewrites the same object instead of adding records
//! twice. Log objects are written by the deliverer, never through the S3 front, so they are
//! never themselves logged (a bucket may log to itself).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::bucket::Buckets;
use crate::store::{
    Access, BucketInfo, ClaimedRecords, LoggingConfig, ObjectMeta, PartitionDate, Principal, RequestedEncryption,
    Store, StoreError, StoredBytes, Upload, WriteCondition,
};

/// Records waiting for this gateway's writer; beyond it new records are dropped.
const CHANNEL_RECORDS: usize = 10_000;

/// The most records the writer queues in one statement.
const WRITE_BATCH: usize = 1_000;

/// How often each gateway's deliverer looks for queued records.
const DELIVERY_EVERY: Duration = Duration::from_secs(2);

/// A finished record: its source bucket, its time and its line.
type Record = (i64, SystemTime, String);

/// Where finished records go: this gateway's writer.
#[derive(Clone)]
pub struct Records(mpsc::Sender<Record>);

/// The writer and deliverer tasks, stopped with the endpoint.
pub struct Tasks(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Starts this gateway's writer and deliverer.
pub fn start(buckets: Buckets, region: String) -> (Records, Tasks) {
    let (sender, receiver) = mpsc::channel(CHANNEL_RECORDS);
    let writer = tokio::spawn(write(buckets.store().clone(), receiver));
    let deliverer = tokio::spawn(deliver_forever(buckets, region));
    (Records(sender), Tasks(vec![writer, deliverer]))
}

async fn write(store: Store, mut receiver: mpsc::Receiver<Record>) {
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    while receiver.recv_many(&mut batch, WRITE_BATCH).await > 0 {
        match store.queue_access_logs(&batch).await {
            Ok(0) => {}
            Ok(dropped) => tracing::warn!(dropped, "server access log queue full; records dropped"),
            Err(err) => tracing::warn!(error = %err, records = batch.len(), "server access log records dropped"),
        }
        batch.clear();
    }
}

async fn deliver_forever(buckets: Buckets, region: String) {
    let mut ticker = tokio::time::interval(DELIVERY_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Err(err) = deliver_queued(&buckets, &region).await {
            tracing::debug!(error = %err, "server access log delivery failed; retried next tick");
        }
    }
}

/// Delivers every queued record this gateway can claim.
async fn deliver_queued(buckets: &Buckets, region: &str) -> Result<(), StoreError> {
    while let Some(claim) = buckets.store().claim_access_logs().await? {
        let mut settled = Vec::with_capacity(claim.batches.len());
        for (n, batch) in claim.batches.iter().enumerate() {
            match deliver(buckets, region, batch).await {
                Ok(()) => settled.push(n),
                Err(err @ (StoreError::Database(_) | StoreError::Unavailable(_))) => {
                    tracing::debug!(error = %err, bucket = %batch.bucket, "server access log delivery retried");
                }
                Err(err) => {
                    // The target refuses the write (quota, lock...): best effort, dropped.
                    tracing::warn!(error = %err, bucket = %batch.bucket, records = batch.ids.len(),
                        "server access log records dropped");
                    settled.push(n);
                }
            }
        }
        let all = settled.len() == claim.batches.len();
        claim.settle(&settled).await?;
        if !all {
            // What is left is retried next tick rather than claimed again at once.
            return Ok(());
        }
    }
    Ok(())
}

/// Writes one source bucket's records as a log object, as its logging is configured now. Records
/// of a bucket whose logging is off, or whose target is gone or no longer its owner's, are
/// dropped (`Ok`).
async fn deliver(buckets: &Buckets, region: &str, batch: &ClaimedRecords) -> Result<(), StoreError> {
    let catalog = buckets.catalog();
    let present = |found: Result<Arc<BucketInfo>, StoreError>| match found {
        Ok(info) => Ok(Some(info)),
        Err(StoreError::NoSuchBucket) => Ok(None),
        Err(err) => Err(err),
    };
    let Some(source) = present(catalog.bucket(&batch.bucket).await)? else {
        return Ok(());
    };
    let Some(config) = source.logging.clone() else {
        return Ok(());
    };
    let Some(target) = present(catalog.bucket(&config.target).await)? else {
        return Ok(());
    };
    if target.owner != source.owner || target.origin.is_some() {
        return Ok(());
    }
    let owner = source
        .owner
        .clone()
        .or_else(|| catalog.root_key_id())
        .unwrap_or_default();
    let key = object_key(&config, &owner, region, &source.name, batch);
    let mut body = batch.lines.join("\n");
    body.push('\n');
    let length = body.len() as u64;
    let meta = ObjectMeta {
        content_type: Some("text/plain".into()),
        acl: (!config.grants.is_empty()).then(|| crate::access::acl::Acl {
            owner: None,
            grants: config.grants.clone(),
        }),
        ..Default::default()
    };
    let upload = Upload {
        meta,
        body: Box::pin(futures::stream::once(async move { Ok(Bytes::from(body)) })),
        declared_len: Some(length),
        observer: Box::new(StoredBytes),
        encryption: RequestedEncryption::None,
    };
    // The deliverer writes as the logging service: with the owner's say-so, checked above.
    let service = Principal {
        access_key: owner,
        is_root: true,
        read_only: false,
    };
    let handle = buckets.open_resolved(&service, target, Access::Write, false)?;
    handle.put(&key, upload, &WriteCondition::Always).await?;
    Ok(())
}

/// A log object's key: `TargetPrefix` and `YYYY-mm-DD-HH-MM-SS-UniqueString` (SimplePrefix), or
/// under `SourceAccountId/SourceRegion/SourceBucket/YYYY/MM/DD/` (PartitionedPrefix, the time's
/// hours, minutes and seconds zero for EventTime). The time is the batch's first record's and
/// the unique string its id, so a redelivered batch keeps its name.
fn object_key(config: &LoggingConfig, owner: &str, region: &str, source: &str, batch: &ClaimedRecords) -> String {
    let at = time::OffsetDateTime::from(batch.first_at);
    let unique = format!("{:016X}", batch.ids.first().copied().unwrap_or_default());
    let (y, m, d) = (at.year(), at.month() as u8, at.day());
    match config.partitioned {
        None => format!(
            "{}{y:04}-{m:02}-{d:02}-{:02}-{:02}-{:02}-{unique}",
            config.prefix,
            at.hour(),
            at.minute(),
            at.second()
        ),
        Some(date) => {
            let (hh, mm, ss) = match date {
                PartitionDate::EventTime => (0, 0, 0),
                PartitionDate::DeliveryTime => (at.hour(), at.minute(), at.second()),
            };
            format!(
                "{}{owner}/{region}/{source}/{y:04}/{m:02}/{d:02}/{y:04}-{m:02}-{d:02}-{hh:02}-{mm:02}-{ss:02}-{unique}",
                config.prefix
            )
        }
    }
}

/// What a record knows once the request's bucket is resolved.
pub struct Draft {
    bucket_id: i64,
    at: SystemTime,
    /// Bucket owner, bucket, time, remote IP, requester, request id, operation, key and
    /// request URI: the fields before the answer's.
    head: String,
    /// Referer and User-Agent, version id, host id, signature version, cipher suite,
    /// authentication type, Host, TLS version, access point ARN, ACL required: the fields
    /// after the times.
    tail: String,
    /// The bytes the request declared (an upload's object size).
    declared: Option<u64>,
    object_op: bool,
}

/// The facts of a request its record is made of, as the access check sees them.
pub struct RequestSeen<'a> {
    pub bucket: &'a BucketInfo,
    pub owner: String,
    pub requester: Option<&'a str>,
    pub request_id: &'a str,
    pub operation: &'static str,
    pub key: Option<&'a str>,
    pub method: &'a http::Method,
    pub uri: &'a http::Uri,
    pub headers: &'a http::HeaderMap,
    pub peer: Option<crate::http_server::Peer>,
}

impl Draft {
    pub fn new(seen: RequestSeen<'_>) -> Draft {
        let at = SystemTime::now();
        let time = log_time(at);
        let header = |name: &str| seen.headers.get(name).and_then(|value| value.to_str().ok());
        let key = seen
            .key
            .filter(|key| !key.is_empty())
            .map(|key| super::percent_encode(key, true));
        let request_uri = format!(
            "{} {} HTTP/1.1",
            seen.method,
            seen.uri.path_and_query().map_or("/", |pq| pq.as_str())
        );
        let head = [
            field(Some(&seen.owner)),
            field(Some(&seen.bucket.name)),
            time,
            field(seen.peer.map(|peer| peer.addr.ip().to_string()).as_deref()),
            field(seen.requester),
            field(Some(seen.request_id)),
            field(Some(&rest_operation(seen.operation, seen.method))),
            field(key.as_deref()),
            quoted(Some(&request_uri)),
        ]
        .join(" ");
        let query = seen.uri.query().unwrap_or_default();
        let version_id = form_urlencoded::parse(query.as_bytes())
            .find(|(name, _)| name == "versionId")
            .map(|(_, value)| value.into_owned());
        let authorization = header("authorization").unwrap_or_default();
        let (signature, auth_type) = if authorization.starts_with("AWS4-") {
            (Some("SigV4"), Some("AuthHeader"))
        } else if authorization.starts_with("AWS ") {
            (Some("SigV2"), Some("AuthHeader"))
        } else if query.contains("X-Amz-Signature=") {
            (Some("SigV4"), Some("QueryString"))
        } else if query.contains("Signature=") {
            (Some("SigV2"), Some("QueryString"))
        } else {
            (None, None)
        };
        let tls = seen.peer.is_some_and(|peer| peer.tls);
        let tail = [
            quoted(header("referer")),
            quoted(header("user-agent")),
            field(version_id.as_deref()),
            field(None),
            field(signature),
            field(None),
            field(auth_type),
            field(header("host")),
            // The listener's TLS is rustls's; the negotiated version is not kept per request.
            field(tls.then_some("TLS")),
            field(None),
            field(None),
        ]
        .join(" ");
        let declared = ["x-amz-decoded-content-length", "content-length"]
            .iter()
            .find_map(|name| header(name)?.parse().ok());
        Draft {
            bucket_id: seen.bucket.id,
            at,
            head,
            tail,
            declared,
            object_op: seen.key.is_some_and(|key| !key.is_empty()),
        }
    }

    /// The record once the answer's head is known.
    pub fn answered(self, response: &http::Response<s3s::Body>, started: Instant, records: &Records) -> Pending {
        let status = response.status();
        let error = match status.as_u16() >= 300 {
            true => response
                .body()
                .bytes()
                .and_then(|body| error_code(&body))
                .or_else(|| default_code(status)),
            false => None,
        };
        let header = |name| super::content_length(response.headers(), name);
        let object_size = match (self.object_op, status.is_success()) {
            (true, true) => match response.headers().get(http::header::CONTENT_RANGE) {
                Some(range) => range
                    .to_str()
                    .ok()
                    .and_then(|range| range.rsplit('/').next()?.parse::<u64>().ok()),
                None => header("content-length").filter(|length| *length > 0).or(self.declared),
            },
            _ => None,
        };
        Pending {
            bucket_id: self.bucket_id,
            at: self.at,
            head: format!("{} {} {}", self.head, status.as_u16(), field(error.as_deref())),
            object_size,
            tail: self.tail,
            started,
            turnaround: started.elapsed(),
            records: records.clone(),
        }
    }
}

/// A record waiting for its response body's end.
pub struct Pending {
    bucket_id: i64,
    at: SystemTime,
    head: String,
    object_size: Option<u64>,
    tail: String,
    started: Instant,
    turnaround: Duration,
    records: Records,
}

impl Pending {
    /// The record, its body sent (`sent` bytes), handed to the writer; dropped when it is
    /// behind.
    pub fn finish(self, sent: u64) {
        let line = format!(
            "{} {} {} {} {} {}",
            self.head,
            field((sent > 0).then(|| sent.to_string()).as_deref()),
            field(self.object_size.map(|size| size.to_string()).as_deref()),
            self.started.elapsed().as_millis(),
            self.turnaround.as_millis(),
            self.tail
        );
        if self.records.0.try_send((self.bucket_id, self.at, line)).is_err() {
            tracing::debug!("server access log writer behind; record dropped");
        }
    }
}

/// A record's time as S3 writes it: `[06/Feb/2019:00:00:38 +0000]`.
fn log_time(at: SystemTime) -> String {
    let at = time::OffsetDateTime::from(at);
    let month = at.month().to_string();
    format!(
        "[{:02}/{}/{:04}:{:02}:{:02}:{:02} +0000]",
        at.day(),
        &month[..3],
        at.year(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// A field as S3 writes it: `-` when it has no value.
fn field(value: Option<&str>) -> String {
    match value {
        Some(value) if !value.is_empty() => value.replace(' ', "%20"),
        _ => "-".into(),
    }
}

/// A quoted field (request URI, Referer, User-Agent): `"-"` when absent.
fn quoted(value: Option<&str>) -> String {
    match value {
        Some(value) if !value.is_empty() => format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\"")),
        _ => "\"-\"".into(),
    }
}

/// The error code of an S3 error document.
fn error_code(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("<Code>")? + "<Code>".len();
    let end = start + text[start..].find("</Code>")?;
    Some(text[start..end].to_owned())
}

/// The code of an error answered without a body (HEAD), as S3 logs it.
fn default_code(status: http::StatusCode) -> Option<String> {
    match status.as_u16() {
        304 => None,
        403 => Some("AccessDenied".into()),
        404 => Some("NoSuchKey".into()),
        405 => Some("MethodNotAllowed".into()),
        412 => Some("PreconditionFailed".into()),
        _ => None,
    }
}

/// S3's name of an operation in a log record: `REST.<method>.<resource>`.
fn rest_operation(operation: &str, method: &http::Method) -> String {
    let resource = match operation {
        "GetObject" | "HeadObject" | "PutObject" | "DeleteObject" | "PostObject" => "OBJECT",
        "CopyObject" => return "REST.COPY.OBJECT".into(),
        "UploadPartCopy" => return "REST.COPY.PART".into(),
        "ListObjects" | "ListObjectsV2" | "HeadBucket" | "CreateBucket" | "DeleteBucket" => "BUCKET",
        "ListObjectVersions" => "BUCKETVERSIONS",
        "DeleteObjects" => "MULTI_OBJECT_DELETE",
        "CreateMultipartUpload" | "ListMultipartUploads" => "UPLOADS",
        "UploadPart" => "PART",
        "CompleteMultipartUpload" | "AbortMultipartUpload" | "ListParts" => "UPLOAD",
        "GetObjectTagging" | "PutObjectTagging" | "DeleteObjectTagging" => "OBJECT_TAGGING",
        "GetBucketTagging" | "PutBucketTagging" | "DeleteBucketTagging" => "TAGGING",
        "GetBucketAcl" | "PutBucketAcl" | "GetObjectAcl" | "PutObjectAcl" => "ACL",
        "GetBucketVersioning" | "PutBucketVersioning" => "VERSIONING",
        "GetBucketLogging" | "PutBucketLogging" => "LOGGING_STATUS",
        "GetBucketPolicy" | "PutBucketPolicy" | "DeleteBucketPolicy" => "BUCKETPOLICY",
        "GetBucketCors" | "PutBucketCors" | "DeleteBucketCors" => "CORS",
        "GetBucketLifecycleConfiguration" | "PutBucketLifecycleConfiguration" | "DeleteBucketLifecycle" => "LIFECYCLE",
        "GetBucketEncryption" | "PutBucketEncryption" | "DeleteBucketEncryption" => "ENCRYPTION",
        "GetBucketLocation" => "LOCATION",
        "GetObjectAttributes" => "OBJECT_ATTRIBUTES",
        "GetObjectRetention" | "PutObjectRetention" => "RETENTION",
        "GetObjectLegalHold" | "PutObjectLegalHold" => "LEGAL_HOLD",
        "GetObjectLockConfiguration" | "PutObjectLockConfiguration" => "OBJECT_LOCK_CONFIGURATION",
        "GetBucketNotificationConfiguration" | "PutBucketNotificationConfiguration" => "NOTIFICATION",
        "GetBucketOwnershipControls" | "PutBucketOwnershipControls" | "DeleteBucketOwnershipControls" => {
            "OWNERSHIP_CONTROLS"
        }
        "GetPublicAccessBlock" | "PutPublicAccessBlock" | "DeletePublicAccessBlock" => "PUBLIC_ACCESS_BLOCK",
        "GetBucketPolicyStatus" => "BUCKETPOLICYSTATUS",
        other => return format!("REST.{method}.{}", other.to_ascii_uppercase()),
    };
    format!("REST.{method}.{resource}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_named_as_s3_logs_them() {
        assert_eq!(rest_operation("GetObject", &http::Method::GET), "REST.GET.OBJECT");
        assert_eq!(rest_operation("HeadObject", &http::Method::HEAD), "REST.HEAD.OBJECT");
        assert_eq!(rest_operation("CopyObject", &http::Method::PUT), "REST.COPY.OBJECT");
        assert_eq!(rest_operation("UploadPart", &http::Method::PUT), "REST.PUT.PART");
        assert_eq!(
            rest_operation("DeleteObjects", &http::Method::POST),
            "REST.POST.MULTI_OBJECT_DELETE"
        );
    }

    #[test]
    fn times_are_written_as_s3_writes_them() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_549_411_238);
        assert_eq!(log_time(at), "[06/Feb/2019:00:00:38 +0000]");
    }

    #[test]
    fn fields_are_dashes_or_quoted() {
        assert_eq!(field(None), "-");
        assert_eq!(field(Some("")), "-");
        assert_eq!(quoted(None), "\"-\"");
        assert_eq!(quoted(Some("a \"b\"")), "\"a \\\"b\\\"\"");
        assert_eq!(
            error_code(b"<Error><Code>NoSuchKey</Code></Error>").as_deref(),
            Some("NoSuchKey")
        );
    }
}
