//! The S3 operations: wire types in, store calls, wire types out.

mod access;
mod acl;
mod checks;
mod encryption;
mod lifecycle;
mod lock;
mod notifications;
mod post;

use std::time::SystemTime;

use futures::TryStreamExt;
use s3s::dto::*;
use s3s::{S3, S3Error, S3Request, S3Response, S3Result};

use super::authorize::PolicyGrant;
use super::checksum::{Algorithm, UploadCheck, body_error};
use super::errors::{RequestId, s3_error};
use crate::bucket::{BucketHandle, Buckets};
use crate::store::{
    self, Access, DeleteCondition, ListRequest, ObjectHead, ObjectMeta, ObjectRead, Principal, StoreError,
    WriteCondition,
};
use checks::Request;

pub struct S3Front {
    buckets: Buckets,
    region: String,
    /// The ownership of a bucket created without one; `None`: AWS's (BucketOwnerEnforced).
    default_ownership: Option<crate::access::acl::Ownership>,
}

/// The server-wide settings of the S3 front.
pub struct FrontSettings {
    /// `--region`.
    pub region: String,
    /// `--s3-default-object-ownership`.
    pub default_ownership: crate::access::acl::Ownership,
}

impl S3Front {
    pub fn new(buckets: Buckets, settings: FrontSettings) -> S3Front {
        use crate::access::acl::Ownership;
        S3Front {
            buckets,
            region: settings.region,
            default_ownership: Some(settings.default_ownership).filter(|o| *o != Ownership::BucketOwnerEnforced),
        }
    }

    /// The request's bucket, which `principal` must be allowed to use as `access` says (or a
    /// bucket policy allowed, in the access check).
    async fn open<T>(
        &self,
        req: &S3Request<T>,
        principal: &Principal,
        bucket: &str,
        access: Access,
    ) -> S3Result<BucketHandle<'_>> {
        let granted = req
            .extensions
            .get::<PolicyGrant>()
            .is_some_and(|grant| grant.covers(bucket));
        self.buckets
            .open_granted(principal, bucket, access, granted)
            .await
            .map_err(|e| fail(req, e))
    }

    /// GET or HEAD (`with_body` false) of an object: the options both take, checked alike;
    /// with the read, its `x-amz-expiration` when a lifecycle rule will expire it.
    #[allow(clippy::too_many_arguments)]
    async fn read<T>(
        &self,
        req: &S3Request<T>,
        bucket: &str,
        key: &str,
        version_id: &Option<String>,
        range: Option<Range>,
        part: Option<i32>,
        conditions: store::Preconditions,
        with_body: bool,
        customer: encryption::CustomerFields<'_>,
    ) -> S3Result<(ObjectRead, store::ReadOptions, Option<String>)> {
        let principal = self.principal(req).await?;
        checks::refuse_unkept(&req.headers, Request::Read)?;
        let options = store::ReadOptions {
            range: range.map(to_range),
            part_number: part_number(part)?,
            conditions,
            version_id: version_id.clone(),
            customer_key: customer.key(req)?,
        };
        let bucket = self.open(req, &principal, bucket, Access::Read).await?;
        let read = match with_body {
            true => bucket.get(key, &options).await,
            false => bucket.head(key, &options).await,
        }
        .map_err(|e| fail(req, missing(req, e)))?;
        // A read only the object's ACL or tags could allow is decided on the row just read,
        // before any of it is answered.
        row_allows(req, &read.head.meta)?;
        let expiration = match options.version_id {
            None => bucket.expiry(key, &read.head).map(lifecycle::expiration_header),
            Some(_) => None,
        };
        Ok((read, options, expiration))
    }

    /// A CreateBucket body: the bucket can only be in this gateway's region, and directory
    /// buckets (S3 Express) do not exist here.
    fn check_bucket_configuration(&self, config: &CreateBucketConfiguration) -> S3Result<()> {
        if config.bucket.is_some() || config.location.is_some() {
            return Err(s3s::s3_error!(NotImplemented, "Directory buckets are not implemented"));
        }
        match config.location_constraint.as_ref().map(|c| c.as_str()) {
            Some(constraint) if !constraint.is_empty() && constraint != self.region => Err(S3Error::with_message(
                s3s::S3ErrorCode::IllegalLocationConstraintException,
                format!(
                    "The {constraint} location constraint is incompatible for the region specific endpoint this request was sent to."
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Every operation starts here: the request's text is checked before any work is done.
    async fn principal<T>(&self, req: &S3Request<T>) -> S3Result<Principal> {
        checks::refuse_nul(&req.uri, &req.headers)?;
        let Some(credentials) = req.credentials.as_ref() else {
            // Unsigned: only where a bucket policy let it through the access check.
            return match req.extensions.get::<PolicyGrant>() {
                Some(grant) if grant.anonymous() => Ok(Principal {
                    access_key: String::new(),
                    is_root: false,
                    read_only: false,
                }),
                _ => Err(s3s::s3_error!(AccessDenied)),
            };
        };
        match self.buckets.catalog().access_key(&credentials.access_key).await {
            Ok(Some(key)) => Ok(key.principal()),
            Ok(None) => Err(s3s::s3_error!(InvalidAccessKeyId)),
            Err(err) => Err(fail(req, err)),
        }
    }
}

fn fail<T>(req: &S3Request<T>, err: StoreError) -> S3Error {
    s3_error(err, req.extensions.get::<RequestId>())
}

/// A missing object is AccessDenied where the request's grant says S3 would not tell (see
/// `PolicyGrant::hides_missing` and `PolicyGrant::refuses_missing`).
fn missing<T>(req: &S3Request<T>, err: StoreError) -> StoreError {
    let hidden = |grant: &PolicyGrant| grant.hides_missing() || grant.refuses_missing(&req.headers, req.uri.query());
    match err {
        StoreError::NoSuchKey if req.extensions.get::<PolicyGrant>().is_some_and(hidden) => StoreError::AccessDenied,
        err => err,
    }
}

/// Decides, on the object's row (`meta`, the version the request names), what the access
/// check left to it: the object's ACL or tags (see `PolicyGrant::object_allows`).
fn row_allows<T>(req: &S3Request<T>, meta: &ObjectMeta) -> S3Result<()> {
    let allows =
        |grant: &PolicyGrant| grant.object_allows(&req.headers, req.uri.query(), meta.acl.as_ref(), &meta.tags);
    match req.extensions.get::<PolicyGrant>().is_none_or(allows) {
        true => Ok(()),
        false => Err(s3s::s3_error!(AccessDenied, "Access Denied")),
    }
}

fn timestamp(time: SystemTime) -> Timestamp {
    Timestamp::from(time)
}

fn owner(principal: &Principal) -> Owner {
    Owner {
        id: Some(principal.access_key.clone()),
        display_name: Some(principal.access_key.clone()),
    }
}

fn http_date(text: &Option<String>) -> Option<Timestamp> {
    text.as_deref()
        .and_then(|text| Timestamp::parse(TimestampFormat::HttpDate, text).ok())
}

/// The Content-Range of a partial answer.
fn content_range(read: &ObjectRead) -> Option<String> {
    let (start, end) = read.span;
    read.partial
        .then(|| format!("bytes {start}-{}/{}", end.max(1) - 1, read.head.size))
}

fn to_range(range: Range) -> store::ByteRange {
    match range {
        Range::Int { first, last } => store::ByteRange::From { first, last },
        Range::Suffix { length } => store::ByteRange::Suffix { length },
    }
}

/// The checksum field of a response, when the client asked for checksums and the answer is the
/// whole object (a part's bytes never match the whole object's checksum).
fn checksum_fields(head: &ObjectHead, wanted: bool) -> [Option<String>; 5] {
    let mut fields: [Option<String>; 5] = Default::default();
    if let (true, Some(stored)) = (wanted, &head.meta.checksum)
        && let Some(alg) = Algorithm::from_name(&stored.algorithm)
    {
        fields[Algorithm::ALL.iter().position(|a| *a == alg).expect("listed")] = Some(stored.value.clone());
    }
    fields
}

fn checksum_requested(mode: &Option<ChecksumMode>) -> bool {
    mode.as_ref()
        .is_some_and(|mode| mode.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED))
}

fn to_system_time(time: &Option<Timestamp>) -> Option<SystemTime> {
    time.clone().map(|time| time::OffsetDateTime::from(time).into())
}

/// A delete's size condition: a negative size matches no object.
fn size_condition(size: i64) -> u64 {
    u64::try_from(size).unwrap_or(u64::MAX)
}

fn to_etag_condition(condition: &Option<ETagCondition>) -> Option<store::EtagCondition> {
    condition.as_ref().map(|condition| match condition.as_etag() {
        Some(etag) => store::EtagCondition::Tag(etag.value().to_owned()),
        None => store::EtagCondition::Any,
    })
}

/// The condition of a write: `If-None-Match: *` creates only, `If-Match: <etag>` compares and
/// swaps (`If-Match: *` replaces only an existing object), `If-None-Match: <etag>` writes unless
/// the stored object has that ETag. Each is checked atomically with the write.
fn write_condition(
    if_match: &Option<ETagCondition>,
    if_none_match: &Option<ETagCondition>,
) -> S3Result<WriteCondition> {
    match (if_match, if_none_match) {
        (None, None) => Ok(WriteCondition::Always),
        (None, Some(condition)) => Ok(match condition.as_etag() {
            Some(etag) => WriteCondition::if_none_match(etag.value()),
            None => WriteCondition::IfAbsent,
        }),
        (Some(condition), None) => Ok(match condition.as_etag() {
            Some(etag) => WriteCondition::if_match(etag.value()),
            None => WriteCondition::IfMatch("*".into()),
        }),
        (Some(_), Some(_)) => Err(s3s::s3_error!(
            NotImplemented,
            "If-Match and If-None-Match cannot both be set on a write"
        )),
    }
}

/// The part number of a read, as S3 checks it.
fn part_number(number: Option<i32>) -> S3Result<Option<u32>> {
    match number {
        None => Ok(None),
        Some(n) if (1..=10_000).contains(&n) => Ok(Some(n as u32)),
        Some(_) => Err(s3s::s3_error!(
            InvalidArgument,
            "Part number must be an integer between 1 and 10000, inclusive"
        )),
    }
}

/// The metadata a write declares (PutObject, CreateMultipartUpload, CopyObject's REPLACE).
macro_rules! meta_from_input {
    ($input:expr, $headers:expr) => {{
        let input = &$input;
        ObjectMeta {
            content_type: input.content_type.clone(),
            content_encoding: stored_encoding(&input.content_encoding),
            content_disposition: input.content_disposition.clone(),
            content_language: input.content_language.clone(),
            cache_control: input.cache_control.clone(),
            expires: $headers
                .get(http::header::EXPIRES)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            user: input
                .metadata
                .iter()
                .flatten()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                .collect(),
            checksum: None,
            parts: None,
            tags: Default::default(),
            retention: None,
            legal_hold: None,
            encryption: None,
            acl: None,
        }
    }};
}

/// The Content-Encoding kept with an object: the client's, without `aws-chunked` (which only
/// framed the upload), as S3 stores it.
fn stored_encoding(encoding: &Option<String>) -> Option<String> {
    let kept: Vec<&str> = encoding
        .as_deref()?
        .split(',')
        .map(str::trim)
        .filter(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// Put/DeleteObjectTagging: replaces the tags, deciding first on the tags replaced when a policy
/// looks at them. That costs the locked read-then-write of a version's metadata (one
/// transaction) instead of one UPDATE, only for such requests: the decision must see the tags
/// before they change, and under the lock no other write slips in between.
async fn set_tags<T>(
    req: &S3Request<T>,
    bucket: &BucketHandle<'_>,
    key: &str,
    version_id: Option<&str>,
    tags: &store::Tags,
) -> S3Result<()> {
    let grant = req
        .extensions
        .get::<PolicyGrant>()
        .filter(|grant| grant.decides_on_tags());
    let (headers, query) = (&req.headers, req.uri.query());
    let allowed = |meta: &ObjectMeta| {
        grant.is_none_or(|grant| grant.object_allows(headers, query, meta.acl.as_ref(), &meta.tags))
    };
    let allowed: Option<&(dyn Fn(&ObjectMeta) -> bool + Sync)> = grant.map(|_| &allowed as _);
    bucket
        .set_object_tags(key, version_id, tags, allowed)
        .await
        .map_err(|e| fail(req, missing(req, e)))
}

/// The tags of `x-amz-tagging` (a URL-encoded query string).
fn header_tags(header: &Option<String>) -> Result<store::Tags, StoreError> {
    let pairs = header
        .iter()
        .flat_map(|text| form_urlencoded::parse(text.as_bytes()).into_owned());
    store::tag_set(pairs, store::MAX_OBJECT_TAGS)
}

fn tags_from(tagging: &Tagging, max: usize) -> Result<store::Tags, StoreError> {
    let pairs = tagging.tag_set.iter().map(|tag| {
        (
            tag.key.clone().unwrap_or_default(),
            tag.value.clone().unwrap_or_default(),
        )
    });
    store::tag_set(pairs, max)
}

fn tag_list(tags: store::Tags) -> Vec<Tag> {
    tags.into_iter()
        .map(|(key, value)| Tag {
            key: Some(key),
            value: Some(value),
        })
        .collect()
}

/// The preconditions on a copy's source, from its `x-amz-copy-source-if-*` fields.
macro_rules! copy_source_conditions {
    ($input:expr) => {{
        let input = &$input;
        store::Preconditions {
            if_match: to_etag_condition(&input.copy_source_if_match),
            if_none_match: to_etag_condition(&input.copy_source_if_none_match),
            if_modified_since: to_system_time(&input.copy_source_if_modified_since),
            if_unmodified_since: to_system_time(&input.copy_source_if_unmodified_since),
        }
    }};
}

/// The bucket, key and version of `x-amz-copy-source`.
fn copy_source(source: &CopySource) -> S3Result<(&str, &str, Option<&str>)> {
    let CopySource::Bucket {
        bucket,
        key,
        version_id,
    } = source
    else {
        return Err(s3s::s3_error!(
            NotImplemented,
            "copying from an access point is not supported"
        ));
    };
    Ok((bucket, key, version_id.as_deref()))
}

/// `x-amz-copy-source-range`: `bytes=first-last`, both ends required.
fn copy_source_range(text: &str) -> S3Result<store::ByteRange> {
    let invalid = || {
        s3s::s3_error!(
            InvalidArgument,
            "The x-amz-copy-source-range value must be of the form bytes=first-last"
        )
    };
    let (first, last) = text
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .ok_or_else(invalid)?;
    let first: u64 = first.parse().map_err(|_| invalid())?;
    let last: u64 = last.parse().map_err(|_| invalid())?;
    if last < first {
        return Err(invalid());
    }
    Ok(store::ByteRange::From {
        first,
        last: Some(last),
    })
}

/// The lock a write's `x-amz-object-lock-*` fields ask for.
macro_rules! requested_lock {
    ($input:expr) => {{
        let input = &$input;
        lock::requested_lock(
            &input.object_lock_mode,
            &input.object_lock_retain_until_date,
            &input.object_lock_legal_hold_status,
        )
    }};
}

/// The preconditions of a read, from its If-* fields.
macro_rules! read_conditions {
    ($input:expr) => {{
        let input = &$input;
        store::Preconditions {
            if_match: to_etag_condition(&input.if_match),
            if_none_match: to_etag_condition(&input.if_none_match),
            if_modified_since: to_system_time(&input.if_modified_since),
            if_unmodified_since: to_system_time(&input.if_unmodified_since),
        }
    }};
}

macro_rules! describe_object {
    ($output:expr, $head:expr, $checksums:expr) => {{
        let head: &ObjectHead = $head;
        let [crc32, crc32c, crc64nvme, sha1, sha256] = $checksums;
        $output.e_tag = Some(ETag::Strong(head.etag.clone()));
        $output.last_modified = Some(timestamp(head.last_modified));
        // S3 answers an object stored without a Content-Type (PutObject, or CopyObject's
        // REPLACE, without one) with this one.
        $output.content_type = Some(
            head.meta
                .content_type
                .clone()
                .unwrap_or_else(|| "binary/octet-stream".into()),
        );
        $output.content_encoding = head.meta.content_encoding.clone();
        $output.content_disposition = head.meta.content_disposition.clone();
        $output.content_language = head.meta.content_language.clone();
        $output.cache_control = head.meta.cache_control.clone();
        $output.expires = http_date(&head.meta.expires);
        $output.metadata =
            (!head.meta.user.is_empty()).then(|| head.meta.user.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
        $output.accept_ranges = Some("bytes".into());
        $output.checksum_crc32 = crc32;
        $output.checksum_crc32c = crc32c;
        $output.checksum_crc64nvme = crc64nvme;
        $output.checksum_sha1 = sha1;
        $output.checksum_sha256 = sha256;
        (
            $output.object_lock_mode,
            $output.object_lock_retain_until_date,
            $output.object_lock_legal_hold_status,
        ) = lock::lock_fields(head);
        let sse = encryption::answer(head.meta.encryption.as_ref());
        $output.server_side_encryption = sse.sse;
        $output.sse_customer_algorithm = sse.customer_algorithm;
        $output.sse_customer_key_md5 = sse.customer_key_md5;
    }};
}

/// The SSE-C fields of an input, as `encryption::CustomerFields`.
macro_rules! customer_fields {
    ($input:expr) => {
        encryption::CustomerFields {
            algorithm: $input.sse_customer_algorithm.as_deref(),
            key: $input.sse_customer_key.as_deref(),
            key_md5: $input.sse_customer_key_md5.as_deref(),
        }
    };
}

/// The SSE-C fields of a copy's source (`x-amz-copy-source-server-side-encryption-customer-*`).
macro_rules! copy_source_fields {
    ($input:expr) => {
        encryption::CustomerFields {
            algorithm: $input.copy_source_sse_customer_algorithm.as_deref(),
            key: $input.copy_source_sse_customer_key.as_deref(),
            key_md5: $input.copy_source_sse_customer_key_md5.as_deref(),
        }
    };
}

/// The encryption a write's input asks for (SSE-S3, SSE-C, or SSE-KMS refused).
macro_rules! requested_encryption {
    ($req:expr, $input:expr) => {
        encryption::requested(
            &$req,
            $input.server_side_encryption.as_ref(),
            $input.ssekms_key_id.as_deref(),
            customer_fields!($input),
        )
    };
}

/// Sets the SSE headers of a write's answer.
macro_rules! set_encryption {
    ($output:expr, $answer:expr) => {{
        let answer: encryption::Answer = $answer;
        $output.server_side_encryption = answer.sse;
        $output.sse_customer_algorithm = answer.customer_algorithm;
        $output.sse_customer_key_md5 = answer.customer_key_md5;
    }};
}

/// Sets the checksum field of a write's answer; yields the checksum type to report with it.
macro_rules! set_checksum {
    ($output:expr, $checksum:expr) => {{
        let mut kind = None;
        if let Some(stored) = $checksum
            && let Some(alg) = Algorithm::from_name(&stored.algorithm)
        {
            let value = Some(stored.value);
            match alg {
                Algorithm::Crc32 => $output.checksum_crc32 = value,
                Algorithm::Crc32c => $output.checksum_crc32c = value,
                Algorithm::Crc64Nvme => $output.checksum_crc64nvme = value,
                Algorithm::Sha1 => $output.checksum_sha1 = value,
                Algorithm::Sha256 => $output.checksum_sha256 = value,
            }
            kind = Some(ChecksumType::from_static(ChecksumType::FULL_OBJECT));
        }
        kind
    }};
}

#[async_trait::async_trait]
impl S3 for S3Front {
    async fn list_buckets(&self, req: S3Request<ListBucketsInput>) -> S3Result<S3Response<ListBucketsOutput>> {
        let principal = self.principal(&req).await?;
        let input = &req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        // Pages of `max-buckets` (1 to 10,000) in name order; the token is the last name sent.
        let page_size = match input.max_buckets {
            None => usize::MAX,
            Some(n @ 1..=10_000) => n as usize,
            Some(_) => {
                return Err(s3s::s3_error!(
                    InvalidArgument,
                    "Argument max-buckets must be an integer between 1 and 10000"
                ));
            }
        };
        let after = input.continuation_token.clone().unwrap_or_default();
        let mut buckets: Vec<Bucket> = Vec::new();
        let mut more = false;
        let listed = self
            .buckets
            .catalog()
            .list_buckets(&principal)
            .await
            .map_err(|e| fail(&req, e))?;
        for bucket in listed
            .into_iter()
            .filter(|bucket| bucket.name.starts_with(&prefix) && bucket.name > after)
        {
            if buckets.len() == page_size {
                more = true;
                break;
            }
            buckets.push(Bucket {
                name: Some(bucket.name),
                creation_date: Some(timestamp(bucket.created_at)),
                bucket_region: Some(self.region.clone()),
            });
        }
        let continuation_token = more.then(|| buckets.last().and_then(|b| b.name.clone())).flatten();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            continuation_token,
            owner: Some(owner(&principal)),
            prefix: input.prefix.clone(),
        }))
    }

    async fn create_bucket(&self, req: S3Request<CreateBucketInput>) -> S3Result<S3Response<CreateBucketOutput>> {
        let principal = self.principal(&req).await?;
        checks::refuse_unkept(&req.headers, Request::CreateBucket)?;
        if let Some(config) = &req.input.create_bucket_configuration {
            self.check_bucket_configuration(config)?;
        }
        let new = acl::new_bucket(&req, &principal, self.buckets.catalog(), self.default_ownership).await?;
        self.buckets
            .catalog()
            .create_bucket(&principal, &req.input.bucket, &new)
            .await
            .map_err(|e| fail(&req, e))?;
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{}", req.input.bucket)),
        }))
    }

    async fn head_bucket(&self, req: S3Request<HeadBucketInput>) -> S3Result<S3Response<HeadBucketOutput>> {
        let principal = self.principal(&req).await?;
        self.open(&req, &principal, &req.input.bucket, Access::Read).await?;
        Ok(S3Response::new(HeadBucketOutput {
            bucket_region: Some(self.region.clone()),
            ..Default::default()
        }))
    }

    async fn delete_bucket(&self, req: S3Request<DeleteBucketInput>) -> S3Result<S3Response<DeleteBucketOutput>> {
        let principal = self.principal(&req).await?;
        self.buckets
            .catalog()
            .delete_bucket(&principal, &req.input.bucket)
            .await
            .map_err(|e| fail(&req, e))?;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let principal = self.principal(&req).await?;
        self.open(&req, &principal, &req.input.bucket, Access::Read).await?;
        // S3 reports us-east-1 as an empty LocationConstraint.
        let location_constraint =
            (self.region != "us-east-1").then(|| BucketLocationConstraint::from(self.region.clone()));
        Ok(S3Response::new(GetBucketLocationOutput { location_constraint }))
    }

    async fn put_object(&self, mut req: S3Request<PutObjectInput>) -> S3Result<S3Response<PutObjectOutput>> {
        let principal = self.principal(&req).await?;
        checks::refuse_unkept(&req.headers, Request::NewObject)?;
        let form = post::FormUpload::of(&mut req)?;
        // A form's fields are its settings, as the headers are a PutObject's: its `acl` field is
        // its ACL, its checksum fields its checksums.
        let settings = form.as_ref().map_or(&req.headers, post::FormUpload::settings);
        let requested_acl = acl::requested(settings)?;
        let check = UploadCheck::from_request(settings, req.trailing_headers.clone())?;
        let body: store::BodyStream = match req.input.body.take() {
            Some(blob) => Box::pin(blob.map_err(|err| body_error(err.as_ref()))),
            None => Box::pin(futures::stream::empty()),
        };
        let input = &req.input;
        let mut meta = meta_from_input!(input, req.headers);
        checks::check_user_metadata(&meta.user)?;
        meta.tags = header_tags(&input.tagging).map_err(|e| fail(&req, e))?;
        requested_lock!(input)?.apply(&mut meta);
        let condition = write_condition(&input.if_match, &input.if_none_match)?;
        let declared_len = input.content_length.map(|len| len.max(0) as u64);
        let requested = requested_encryption!(req, input)?;
        let mut upload = store::Upload {
            meta,
            body,
            declared_len,
            observer: Box::new(check),
            encryption: requested.clone(),
        };
        let bucket = self.open(&req, &principal, &input.bucket, Access::Write).await?;
        upload.meta.acl = acl::new_object_acl(requested_acl, &bucket, &principal, self.buckets.catalog()).await?;
        let outcome = bucket
            .put(&input.key, upload, &condition)
            .await
            .map_err(|e| fail(&req, e))?;
        let etag = ETag::Strong(outcome.etag);
        let mut output = PutObjectOutput {
            e_tag: Some(etag.clone()),
            version_id: outcome.version_id,
            ..Default::default()
        };
        output.checksum_type = set_checksum!(output, outcome.checksum);
        set_encryption!(
            output,
            encryption::answer_requested(&requested, bucket.default_encryption())
        );
        let mut response = S3Response::new(output);
        if let Some(form) = form {
            form.answer(&req, &format!("\"{}\"", etag.value()), &mut response.headers);
        }
        Ok(response)
    }

    async fn get_object(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
        let input = &req.input;
        let (read, options, expiration) = self
            .read(
                &req,
                &input.bucket,
                &input.key,
                &input.version_id,
                input.range,
                input.part_number,
                read_conditions!(input),
                true,
                customer_fields!(input),
            )
            .await?;
        let mut output = GetObjectOutput {
            expiration,
            ..Default::default()
        };
        let wants_checksum = checksum_requested(&input.checksum_mode) && !read.partial;
        describe_object!(output, &read.head, checksum_fields(&read.head, wants_checksum));
        if options.part_number.is_some() {
            output.parts_count = read.head.meta.parts.map(|n| n as i32);
        }
        output.tag_count = (!read.head.meta.tags.is_empty()).then_some(read.head.meta.tags.len() as i32);
        output.version_id = read.head.version_id.clone();
        output.content_length = Some((read.span.1 - read.span.0) as i64);
        output.content_range = content_range(&read);
        output.body = Some(StreamingBlob::wrap(read.body));
        Ok(S3Response::new(output))
    }

    async fn head_object(&self, req: S3Request<HeadObjectInput>) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = &req.input;
        let (read, options, expiration) = self
            .read(
                &req,
                &input.bucket,
                &input.key,
                &input.version_id,
                input.range,
                input.part_number,
                read_conditions!(input),
                false,
                customer_fields!(input),
            )
            .await?;
        let mut output = HeadObjectOutput {
            version_id: read.head.version_id.clone(),
            expiration,
            ..Default::default()
        };
        let wants_checksum = checksum_requested(&input.checksum_mode) && !read.partial;
        describe_object!(output, &read.head, checksum_fields(&read.head, wants_checksum));
        if options.part_number.is_some() {
            output.parts_count = read.head.meta.parts.map(|n| n as i32);
        }
        output.content_length = Some((read.span.1 - read.span.0) as i64);
        output.content_range = content_range(&read);
        let mut response = S3Response::new(output);
        // S3 sends the tag count on HEAD as on GET; s3s's HEAD output has no field for it.
        if !read.head.meta.tags.is_empty() {
            response.headers.insert(
                "x-amz-tagging-count",
                http::HeaderValue::from(read.head.meta.tags.len()),
            );
        }
        Ok(response)
    }

    async fn delete_object(&self, req: S3Request<DeleteObjectInput>) -> S3Result<S3Response<DeleteObjectOutput>> {
        let principal = self.principal(&req).await?;
        let bucket = self.open(&req, &principal, &req.input.bucket, Access::Write).await?;
        let condition = DeleteCondition {
            if_match: to_etag_condition(&req.input.if_match),
            last_modified: to_system_time(&req.input.if_match_last_modified_time),
            size: req.input.if_match_size.map(size_condition),
        };
        let deleted = bucket
            .delete(
                &req.input.key,
                req.input.version_id.as_deref(),
                lock::bypasses_governance(&req.input.bypass_governance_retention),
                &condition,
            )
            .await
            .map_err(|e| fail(&req, e))?;
        Ok(S3Response::new(DeleteObjectOutput {
            delete_marker: deleted.delete_marker.then_some(true),
            version_id: deleted.version_id,
            ..Default::default()
        }))
    }

    async fn delete_objects(&self, req: S3Request<DeleteObjectsInput>) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let principal = self.principal(&req).await?;
        checks::require_body_digest(&req.headers)?;
        let identifiers = &req.input.delete.objects;
        if identifiers.len() > 1000 {
            return Err(s3s::s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema."
            ));
        }
        let bucket = self.open(&req, &principal, &req.input.bucket, Access::Write).await?;
        // Entries S3 would refuse are reported one by one; the others are deleted.
        let mut keys = Vec::with_capacity(identifiers.len());
        let mut errors = Vec::new();
        let error = |id: &ObjectIdentifier, code: &str, message: String| s3s::dto::Error {
            code: Some(code.into()),
            key: Some(id.key.clone()),
            message: Some(message),
            version_id: id.version_id.clone(),
        };
        for id in identifiers {
            if id.key.len() > 1024 {
                errors.push(error(id, "KeyTooLongError", StoreError::KeyTooLong.to_string()));
            } else if id.key.contains('\0') {
                errors.push(error(
                    id,
                    "InvalidArgument",
                    "Object keys cannot contain a NUL character.".into(),
                ));
            } else if let Err(err) = bucket.version(id.version_id.as_deref()) {
                errors.push(error(id, "NoSuchVersion", err.to_string()));
            } else if let Some(grant) = req.extensions.get::<PolicyGrant>()
                && !grant.may_delete(&id.key, id.version_id.is_some(), &req.headers)
            {
                errors.push(error(id, "AccessDenied", "Access Denied".into()));
            } else {
                keys.push(id);
            }
        }
        let mut deleted = Vec::with_capacity(keys.len());
        let bypass = lock::bypasses_governance(&req.input.bypass_governance_retention);
        // An entry's ETag, LastModifiedTime and Size are its delete's conditions.
        let condition = |id: &ObjectIdentifier| DeleteCondition {
            if_match: id.e_tag.as_ref().map(|etag| match etag.value() {
                "*" => store::EtagCondition::Any,
                value => store::EtagCondition::Tag(value.to_owned()),
            }),
            last_modified: to_system_time(&id.last_modified_time),
            size: id.size.map(size_condition),
        };
        // Unconditional entries of a plain bucket go in one statement; the others (each writes
        // a delete marker, deletes its version or checks its conditions) one at a time.
        let (one_by_one, batch): (Vec<_>, Vec<_>) = keys
            .into_iter()
            .partition(|id| bucket.versioning().is_some() || !condition(id).is_unconditional());
        if !batch.is_empty() {
            let names: Vec<String> = batch.iter().map(|id| id.key.clone()).collect();
            bucket.delete_many(&names).await.map_err(|e| fail(&req, e))?;
            deleted.extend(names.into_iter().map(|key| DeletedObject {
                key: Some(key),
                ..Default::default()
            }));
        }
        for id in one_by_one {
            match bucket
                .delete(&id.key, id.version_id.as_deref(), bypass, &condition(id))
                .await
            {
                Ok(outcome) => deleted.push(DeletedObject {
                    key: Some(id.key.clone()),
                    version_id: id.version_id.clone(),
                    delete_marker: outcome.delete_marker.then_some(true),
                    delete_marker_version_id: outcome
                        .version_id
                        .filter(|_| outcome.delete_marker && id.version_id.is_none()),
                }),
                Err(err) => {
                    let err = fail(&req, err);
                    let message = err.message().unwrap_or_default().to_owned();
                    errors.push(error(id, err.code().as_str(), message));
                }
            }
        }
        let quiet = req.input.delete.quiet.unwrap_or(false);
        let deleted = (!quiet).then_some(deleted);
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted,
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(&self, req: S3Request<ListObjectsV2Input>) -> S3Result<S3Response<ListObjectsV2Output>> {
        let principal = self.principal(&req).await?;
        let input = &req.input;
        let request = ListRequest {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone(),
            start_after: input.start_after.clone(),
            // An empty token is no token (S3 starts from the beginning).
            continuation: input.continuation_token.clone().filter(|token| !token.is_empty()),
            max_keys: max_keys(input.max_keys)?,
        };
        let fetch_owner = input.fetch_owner.unwrap_or(false);
        let bucket = self.open(&req, &principal, &input.bucket, Access::Read).await?;
        let listing = self
            .listing(&bucket, &request, &input.encoding_type, fetch_owner)
            .await
            .map_err(|e| fail(&req, e))?;
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket.clone()),
            prefix: Some(listing.encode(request.prefix)),
            delimiter: request.delimiter.filter(|d| !d.is_empty()).map(|d| listing.encode(d)),
            start_after: request.start_after.map(|s| listing.encode(s)),
            max_keys: Some(request.max_keys.min(i32::MAX as usize) as i32),
            key_count: Some(listing.key_count),
            continuation_token: input.continuation_token.clone(),
            is_truncated: Some(listing.truncated),
            next_continuation_token: listing.next_token,
            contents: Some(listing.contents),
            common_prefixes: Some(listing.common_prefixes),
            encoding_type: input.encoding_type.clone(),
            ..Default::default()
        }))
    }

    async fn list_objects(&self, req: S3Request<ListObjectsInput>) -> S3Result<S3Response<ListObjectsOutput>> {
        let principal = self.principal(&req).await?;
        let input = &req.input;
        let request = ListRequest {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone(),
            start_after: input.marker.clone(),
            continuation: None,
            max_keys: max_keys(input.max_keys)?,
        };
        let bucket = self.open(&req, &principal, &input.bucket, Access::Read).await?;
        let listing = self
            .listing(&bucket, &request, &input.encoding_type, true)
            .await
            .map_err(|e| fail(&req, e))?;
        // S3 sends NextMarker only with a delimiter; without one, clients resume after the last key.
        let next_marker = listing
            .next_marker
            .clone()
            .filter(|_| request.delimiter.as_deref().is_some_and(|d| !d.is_empty()));
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket.clone()),
            prefix: Some(listing.encode(request.prefix)),
            marker: Some(input.marker.clone().map(|m| listing.encode(m)).unwrap_or_default()),
            delimiter: request.delimiter.filter(|d| !d.is_empty()).map(|d| listing.encode(d)),
            max_keys: Some(request.max_keys.min(i32::MAX as usize) as i32),
            is_truncated: Some(listing.truncated),
            next_marker,
            contents: Some(listing.contents),
            common_prefixes: Some(listing.common_prefixes),
            encoding_type: input.encoding_type.clone(),
            ..Default::default()
        }))
    }

    /// Every version of every key, keys in order and each key's versions newest first; a
    /// bucket that never had versioning lists each object as its only version, "null".
    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let principal = self.principal(&req).await?;
        let input = &req.input;
        let request = store::VersionsRequest {
            list: ListRequest {
                prefix: input.prefix.clone().unwrap_or_default(),
                delimiter: input.delimiter.clone(),
                start_after: input.key_marker.clone().filter(|marker| !marker.is_empty()),
                continuation: None,
                max_keys: max_keys(input.max_keys)?,
            },
            version_id_marker: input.version_id_marker.clone().filter(|marker| !marker.is_empty()),
        };
        let bucket = self.open(&req, &principal, &input.bucket, Access::Read).await?;
        let page = bucket.list_versions(&request).await.map_err(|e| fail(&req, e))?;
        let owner = acl::bucket_owner(&bucket, self.buckets.catalog());
        let url_encode = input
            .encoding_type
            .as_ref()
            .is_some_and(|e| e.as_str() == EncodingType::URL);
        let encode = |text: String| {
            if url_encode {
                super::percent_encode(&text, true)
            } else {
                text
            }
        };
        let mut versions = Vec::new();
        let mut delete_markers = Vec::new();
        for entry in page.entries {
            if entry.delete_marker {
                delete_markers.push(DeleteMarkerEntry {
                    is_latest: Some(entry.is_latest),
                    key: Some(encode(entry.key)),
                    last_modified: Some(timestamp(entry.last_modified)),
                    owner: Some(owner.clone()),
                    version_id: Some(entry.version_id),
                });
            } else {
                versions.push(ObjectVersion {
                    e_tag: Some(ETag::Strong(entry.etag)),
                    is_latest: Some(entry.is_latest),
                    key: Some(encode(entry.key)),
                    last_modified: Some(timestamp(entry.last_modified)),
                    owner: Some(owner.clone()),
                    size: Some(entry.size as i64),
                    storage_class: Some(ObjectVersionStorageClass::from_static(
                        ObjectVersionStorageClass::STANDARD,
                    )),
                    version_id: Some(entry.version_id),
                    ..Default::default()
                });
            }
        }
        let (next_key_marker, next_version_id_marker) = match page.next {
            Some((key, version)) => (Some(encode(key)), version),
            None => (None, None),
        };
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(input.bucket.clone()),
            prefix: Some(encode(request.list.prefix)),
            delimiter: request.list.delimiter.filter(|d| !d.is_empty()).map(encode),
            key_marker: Some(input.key_marker.clone().unwrap_or_default()),
            version_id_marker: Some(input.version_id_marker.clone().unwrap_or_default()),
            max_keys: Some(request.list.max_keys.min(i32::MAX as usize) as i32),
            is_truncated: Some(next_key_marker.is_some()),
            next_key_marker,
            next_version_id_marker,
            versions: Some(versions),
            delete_markers: Some(delete_markers),
            common_prefixes: Some(
                page.common_prefixes
                    .into_iter()
                    .map(|prefix| CommonPrefix {
                        prefix: Some(encode(prefix)),
                    })
                    .collect(),
            ),
            encoding_type: input.encoding_type.clone(),
            ..Default::default()
        }))
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        let principal = self.principal(&req).await?;
        let bucket = self.open(&req, &principal, &req.input.bucket, Access::Read).await?;
        // A bucket that never had versioning enabled has no Status at all.
        Ok(S3Response::new(GetBucketVersioningOutput {
            status: bucket
                .versioning()
                .map(|state| BucketVersioningStatus::from(state.as_str().to_owned())),
            ..Default::default()
        }))
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let principal = self.principal(&req).await?;
        let config = &req.input.versioning_configuration;
        if config
            .mfa_delete
            .as_ref()
            .is_some_and(|mfa| mfa.as_str() == MFADelete::ENABLED)
            || req.input.mfa.is_some()
        {
            return Err(s3s::s3_error!(NotImplemented, "MFA delete is not supported"));
        }
        let state = match config.status.as_ref().map(|status| status.as_str()) {
            Some("Enabled") => store::Versioning::Enabled,
            Some("Suspended") => store::Versioning::Suspended,
            _ => {
                return Err(s3s::s3_error!(
                    IllegalVersioningConfigurationException,
                    "The Versioning element must be specified as Enabled or Suspended"
                ));
            }
        };
        let bucket = self.open(&req, &principal, &req.input.bucket, Access::Write).await?;
        bucket.set_versioning(state).await.map_err(|e| fail(&req, e))?;
        Ok(S3Response::new(PutBucketVersioningOutput::default()))
    }

    async fn put_bucket_lifecycle_configuration(
        &self,
        req: S3Request<PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        S3Front::put_bucket_lifecycle_configuration(self, req).await
    }

    async fn get_bucket_lifecycle_configuration(
        &self,
        req: S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        S3Front::get_bucket_lifecycle_configuration(self, req).await
    }

    async fn delete_bucket_lifecycle(
        &self,
        req: S3Request<DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        S3Front::delete_bucket_lifecycle(self, req).await
    }

    async fn put_bucket_notification_configuration(
        &self,
        req: S3Request<PutBucketNotificationConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketNotificationConfigurationOutput>> {
        S3Front::put_bucket_notification_configuration(self, req).await
    }

    async fn get_bucket_notification_configuration(
        &self,
        req: S3Request<GetBucketNotificationConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketNotificationConfigurationOutput>> {
        S3Front::get_bucket_notification_configuration(self, req).await
    }

    async fn put_object_lock_configuration(
        &self,
        req: S3Request<PutObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
        S3Front::put_object_lock_configuration(self, req).await
    }

    async fn get_object_lock_configuration(
        &self,
        req: S3Request<GetObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
        S3Front::get_object_lock_configuration(self, req).await
    }

    async fn put_object_retention(
        &self,
        req: S3Request<PutObjectRetentionInput>,
    ) -> S3Result<S3Response<PutObjectRetentionOutput>> {
        S3Front::put_object_retention(self, req).await
    }

    async fn get_object_retention(
        &self,
        req: S3Request<GetObjectRetentionInput>,
    ) -> S3Result<S3Response<GetObjectRetentionOutput>> {
        S3Front::get_object_retention(self, req).await
    }

    async fn put_object_legal_hold(
        &self,
        req: S3Request<PutObjectLegalHoldInput>,
    ) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
        S3Front::put_object_legal_hold(self, req).await
    }

    async fn get_object_legal_hold(
        &self,
        req: S3Request<GetObjectLegalHoldInput>,
    ) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
        S3Front::get_object_legal_hold(self, req).await
    }

    async fn put_bucket_cors(&self, req: S3Request<PutBucketCorsInput>) -> S3Result<S3Response<PutBucketCorsOutput>> {
        self.put_cors(req).await
    }

    async fn get_bucket_cors(&self, req: S3Request<GetBucketCorsInput>) -> S3Result<S3Response<GetBucketCorsOutput>> {
        self.get_cors(req).await
    }

    async fn delete_bucket_cors(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        self.delete_cors(req).await
    }

    async fn put_bucket_policy(
        &self,
        req: S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        self.put_policy(req).await
    }

    async fn get_bucket_policy(
        &self,
        req: S3Request<GetBucketPolicyInput>,
    ) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        self.get_policy(req).await
    }

    async fn delete_bucket_policy(
        &self,
        req: S3Request<DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        self.delete_policy(req).await
    }

    async fn get_bucket_policy_status(
        &self,
        req: S3Request<GetBucketPolicyStatusInput>,
    ) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
        self.policy_status(req).await
    }

    async fn put_public_access_block(
        &self,
        req: S3Request<PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
        self.put_access_block(req).await
    }

    async fn get_public_access_block(
        &self,
        req: S3Request<GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
        self.get_access_block(req).await
    }

    async fn delete_public_access_block(
        &self,
        req: S3Request<DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
        self.delete_access_block(req).await
    }

    async fn put_bucket_encryption(
        &self,
        req: S3Request<PutBucketEncryptionInput>,
    ) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
        S3Front::put_bucket_encryption(self, req).await
    }

    async fn get_bucket_encryption(
        &self,
        req: S3Request<GetBucketEncryptionInput>,
    ) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
        S3Front::get_bucket_encryption(self, req).await
    }

    async fn delete_bucket_encryption(
        &self,
        req: S3Request<DeleteBucketEncryptionInput>,
    ) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
        S3Front::delete_bucket_encryption(self, req).await
    }

    async fn get_bucket_acl(&self, req: S3Request<GetBucketAclInput>) -> S3Result<S3Response<GetBucketAclOutput>> {
        S3Front::get_bucket_acl(self, req).await
    }

    async fn put_bucket_acl(&self, req: S3Request<PutBucketAclInput>) -> S3Result<S3Response<PutBucketAclOutput>> {
        S3Front::put_bucket_acl(self, req).await
    }

    async fn get_object_acl(&self, req: S3Request<GetObjectAclInput>) -> S3Result<S3Response<GetObjectAclOutput>> {
        S3Front::get_object_acl(self, req).await
    }

    async fn put_object_acl(&self, req: S3Request<PutObjectAclInput>) -> S3Result<S3Response<PutObjectAclOutput>> {
        S3Front::put_object_acl(self, req).await
    }

    async fn put_bucket_ownership_controls(
        &self,
        req: S3Request<PutBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
        self.put_ownership(req).await
    }

    async fn get_bucket_ownership_controls(
        &self,
        req: S3Request<GetBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
        self.get_ownership(req).await
    }

    async fn delete_bucket_ownership_controls(
        &self,
        req: S3Request<DeleteBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
        self.delete_ownership(req).await
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        let principal = self.principal(&req).await?;
        let input = &req.input;
        let bucket = self.open(&req, &principal, &input.bucket, Access::Read).await?;
        // An SSE-C object's attributes are read with its key, as its HEAD is.
        let options = store::ReadOptions {
            version_id: input.version_id.clone(),
            customer_key: customer_fields!(input).key(&req)?,
            ..Default::default()
        };
        let head = bucket
            .head(&input.key, &options)
            .await
            .map_err(|e| fail(&req, missing(&req, e)))?
            .head;
        row_allows(&req, &head.meta)?;
        // Clients send the attributes in one header, comma-separated, or in several.
        let wanted = |name: &str| {
            input
                .object_attributes
                .iter()
                .flat_map(|a| a.as_str().split(','))
                .any(|a| a.trim() == name)
        };
        let [crc32, crc32c, crc64nvme, sha1, sha256] = checksum_fields(&head, true);
        let has_checksum = head.meta.checksum.is_some();
        // The ETag goes out unquoted, as S3 writes it here (see `unquote_attributes_etag`).
        Ok(S3Response::new(GetObjectAttributesOutput {
            e_tag: wanted(ObjectAttributes::ETAG).then(|| ETag::Strong(head.etag.clone())),
            version_id: head.version_id.clone(),
            last_modified: Some(timestamp(head.last_modified)),
            object_size: wanted(ObjectAttributes::OBJECT_SIZE).then_some(head.size as i64),
            storage_class: wanted(ObjectAttributes::STORAGE_CLASS)
                .then(|| StorageClass::from_static(StorageClass::STANDARD)),
            object_parts: wanted(ObjectAttributes::OBJECT_PARTS)
                .then_some(head.meta.parts)
                .flatten()
                .map(|count| GetObjectAttributesParts {
                    total_parts_count: Some(count as i32),
                    ..Default::default()
                }),
            checksum: (wanted(ObjectAttributes::CHECKSUM) && has_checksum).then(|| Checksum {
                checksum_crc32: crc32,
                checksum_crc32c: crc32c,
                checksum_crc64nvme: crc64nvme,
                checksum_sha1: sha1,
                checksum_sha256: sha256,
                checksum_type: Some(ChecksumType::from_static(ChecksumType::FULL_OBJECT)),
            }),
            ..Default::default()
        }))
    }

    async fn copy_object(&self, req: S3Request<CopyObjectInput>) -> S3Result<S3Response<CopyObjectOutput>> {
        let principal = self.principal(&req).await?;
        checks::refuse_unkept(&req.headers, Request::CopyObject)?;
        let input = &req.input;
        let (source_bucket, source_key, source_version) = copy_source(&input.copy_source)?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        let target = requested_encryption!(req, input)?;
        let source_key_offer = copy_source_fields!(input).key(&req)?;
        let reencrypts = !matches!(target, store::RequestedEncryption::None);
        if !replace
            && !reencrypts
            && source_bucket == input.bucket
            && source_key == input.key
            && source_version.is_none()
        {
            return Err(s3s::s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself without \
                 changing the object's metadata, storage class, website redirect location or encryption attributes."
            ));
        }
        let conditions = copy_source_conditions!(input);
        let meta = replace.then(|| meta_from_input!(input, req.headers));
        if let Some(meta) = &meta {
            checks::check_user_metadata(&meta.user)?;
        }
        let replace_tags = input
            .tagging_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE);
        let tags = match replace_tags {
            true => Some(header_tags(&input.tagging).map_err(|e| fail(&req, e))?),
            false => None,
        };
        let lock = requested_lock!(input)?;
        let requested_acl = acl::requested(&req.headers)?;
        let source = self.open(&req, &principal, source_bucket, Access::Read).await?;
        let bucket = self.open(&req, &principal, &input.bucket, Access::Write).await?;
        let new_acl = acl::new_object_acl(requested_acl, &bucket, &principal, self.buckets.catalog()).await?;
        let answer = encryption::answer_requested(&target, bucket.default_encryption());
        let copy_encryption = crate::bucket::CopyEncryption {
            source_key: source_key_offer,
            target,
        };
        let outcome = bucket
            .copy_from(
                &source,
                source_key,
                source_version,
                &conditions,
                &input.key,
                meta,
                tags,
                lock,
                new_acl,
                copy_encryption,
            )
            .await
            .map_err(|e| fail(&req, e))?;
        let mut result = CopyObjectResult {
            e_tag: Some(ETag::Strong(outcome.etag)),
            last_modified: Some(timestamp(outcome.last_modified)),
            ..Default::default()
        };
        result.checksum_type = set_checksum!(result, outcome.checksum);
        let mut output = CopyObjectOutput {
            copy_object_result: Some(result),
            copy_source_version_id: source_version
                .filter(|_| source.versioning().is_some())
                .map(str::to_owned),
            version_id: outcome.version_id,
            ..Default::default()
        };
        set_encryption!(output, answer);
        Ok(S3Response::new(output))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let principal = self.principal(&req).await?;
        checks::refuse_unkept(&req.headers, Request::Other)?;
        let input = &req.input;
        let (source_bucket, source_key, source_version) = copy_source(&input.copy_source)?;
        let range = input.copy_source_range.as_deref().map(copy_source_range).transpose()?;
        let options = store::ReadOptions {
            range,
            part_number: None,
            conditions: copy_source_conditions!(input),
            version_id: source_version.map(str::to_owned),
            customer_key: copy_source_fields!(input).key(&req)?,
        };
        let part_key = customer_fields!(input).key(&req)?;
        let part_number = part_number(Some(input.part_number))?.unwrap_or_default();
        let source = self.open(&req, &principal, source_bucket, Access::Read).await?;
        let bucket = self.open(&req, &principal, &input.bucket, Access::Write).await?;
        let requested = part_key
            .clone()
            .map_or(store::RequestedEncryption::None, store::RequestedEncryption::Customer);
        let store::PartOutcome {
            written: outcome,
            sse_s3,
        } = bucket
            .upload_part_copy(
                &source,
                source_key,
                &options,
                &input.key,
                &input.upload_id,
                part_number,
                part_key,
            )
            .await
            .map_err(|e| fail(&req, e))?;
        let mut output = UploadPartCopyOutput {
            copy_part_result: Some(CopyPartResult {
                e_tag: Some(ETag::Strong(outcome.etag)),
                last_modified: Some(timestamp(outcome.last_modified)),
                ..Default::default()
            }),
            ..Default::default()
        };
        set_encryption!(output, encryption::answer_requested(&requested, sse_s3));
        Ok(S3Response::new(output))
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        let principal = self.principal(&req).await?;
        let bucket = self.open(&req, &principal, &req.input.bucket, Access::Read).await?;
        let options = store::ReadOptions {
            version_id: req.input.version_id.clone(),
            ..Default::default()
        };
        let head = bucket
            .head(&req.input.key, &options)
            .await
            .map_err(|e| fail(&req, missing(&req, e)))?
            .head;
        row_allows(&req, &head.meta)?;
        Ok(S3Response::new(GetObjectTaggingOutput {
            tag_set: tag_list(head.meta.tags),
            version_id: req.input.version_id.clone(),
        }))
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        let principal = self.principal(&req).await?;
        let input = &req.input;
        let tags = tags_from(&input.tagging, store::MAX_OBJECT_TAGS).map_err(|e| fail(&req, e))?;
        let bucket = self.open(&req, &principal, &input.bucket, Access::Write).await?;
        set_tags(&req, &bucket, &input.key, input.version_id.as_deref(), &tags).await?;
        Ok(S3Response::new(PutObjectTaggingOutput::default()))
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        let principal = self.principal(&req).await?;
        let bucket = self.open(&req, &principal, &req.input.bucket, Access::Write).await?;
        let input = &req.input;
        set_tags(
            &req,
            &bucket,
            &input.key,
            input.version_id.as_deref(),
            &store::Tags::new(),
        )
        .await?;
        Ok(S3Response::new(DeleteObjectTaggingOutput::default()))
    }

    async fn get_bucket_tagging(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        let principal = self.principal(&req).await?;
        let bucket = self.open(&req, &principal, &req.input.bucket, Access::Read).await?;
        let tags = bucket
            .tags()
            .await
            .and_then(|tags| tags.ok_or(StoreError::NoSuchTagSet))
            .map_err(|e| fail(&req, e))?;
        Ok(S3Response::new(GetBucketTaggingOutput {
            tag_set: tag_list(tags),
        }))
    }

    async fn put_bucket_tagging(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        let principal = self.principal(&req).await?;
        let tags = tags_from(&req.input.tagging, store::MAX_BUCKET_TAGS).map_err(|e| fail(&req, e))?;
        let bucket = self.open(&req, &principal, &req.input.bucket, Access::Write).await?;
        bucket.set_tags(Some(&tags)).await.map_err(|e| fail(&req, e))?;
        Ok(S3Response::new(PutBucketTaggingOutput::default()))
    }

    async fn delete_bucket_tagging(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        let principal = self.principal(&req).await?;
        let bucket = self.open(&req, &principal, &req.input.bucket, Access::Write).await?;
        bucket.set_tags(None).await.map_err(|e| fail(&req, e))?;
        Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let principal = self.principal(&req).await?;
        checks::refuse_unkept(&req.headers, Request::NewObject)?;
        let input = &req.input;
        let mut meta = meta_from_input!(input, req.headers);
        checks::check_user_metadata(&meta.user)?;
        meta.tags = header_tags(&input.tagging).map_err(|e| fail(&req, e))?;
        requested_lock!(input)?.apply(&mut meta);
        let requested = requested_encryption!(req, input)?;
        let requested_acl = acl::requested(&req.headers)?;
        let bucket = self.open(&req, &principal, &input.bucket, Access::Write).await?;
        meta.acl = acl::new_object_acl(requested_acl, &bucket, &principal, self.buckets.catalog()).await?;
        let answer = encryption::answer_requested(&requested, bucket.default_encryption());
        let upload_id = bucket
            .create_multipart_upload(&input.key, meta, requested)
            .await
            .map_err(|e| fail(&req, e))?;
        let mut output = CreateMultipartUploadOutput {
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            upload_id: Some(upload_id),
            ..Default::default()
        };
        set_encryption!(output, answer);
        Ok(S3Response::new(output))
    }

    async fn upload_part(&self, mut req: S3Request<UploadPartInput>) -> S3Result<S3Response<UploadPartOutput>> {
        let principal = self.principal(&req).await?;
        checks::refuse_unkept(&req.headers, Request::Other)?;
        let check = UploadCheck::from_request(&req.headers, req.trailing_headers.clone())?;
        let body: store::BodyStream = match req.input.body.take() {
            Some(blob) => Box::pin(blob.map_err(|err| body_error(err.as_ref()))),
            None => Box::pin(futures::stream::empty()),
        };
        let input = &req.input;
        let part_key = customer_fields!(input).key(&req)?;
        let upload = store::Upload {
            meta: ObjectMeta::default(),
            body,
            declared_len: input.content_length.map(|len| len.max(0) as u64),
            observer: Box::new(check),
            encryption: part_key
                .clone()
                .map_or(store::RequestedEncryption::None, store::RequestedEncryption::Customer),
        };
        let part_number = part_number(Some(input.part_number))?.unwrap_or_default();
        let bucket = self.open(&req, &principal, &input.bucket, Access::Write).await?;
        let requested = upload.encryption.clone();
        let store::PartOutcome {
            written: outcome,
            sse_s3,
        } = bucket
            .upload_part(&input.key, &input.upload_id, part_number, upload)
            .await
            .map_err(|e| fail(&req, e))?;
        let mut output = UploadPartOutput {
            e_tag: Some(ETag::Strong(outcome.etag)),
            ..Default::default()
        };
        // The part is encrypted as its upload is: SSE-S3 (asked for, or the bucket's default)
        // is said as S3 says it; SSE-C names the key this request brought.
        set_encryption!(output, encryption::answer_requested(&requested, sse_s3));
        let _ = set_checksum!(output, outcome.checksum);
        Ok(S3Response::new(output))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let principal = self.principal(&req).await?;
        let input = &req.input;
        let listed = input
            .multipart_upload
            .as_ref()
            .and_then(|upload| upload.parts.as_ref())
            .filter(|parts| !parts.is_empty())
            .ok_or_else(|| {
                s3s::s3_error!(
                    MalformedXML,
                    "The XML you provided was not well-formed or did not validate against our published schema."
                )
            })?;
        let parts: Vec<store::CompletedPart> = listed
            .iter()
            .map(|part| store::CompletedPart {
                part_number: part.part_number.unwrap_or(0).max(0) as u32,
                etag: part
                    .e_tag
                    .as_ref()
                    .map(|etag| etag.value().to_owned())
                    .unwrap_or_default(),
            })
            .collect();
        let condition = write_condition(&input.if_match, &input.if_none_match)?;
        let bucket = self.open(&req, &principal, &input.bucket, Access::Write).await?;
        let outcome = bucket
            .complete_multipart_upload(&input.key, &input.upload_id, &parts, &condition)
            .await
            .map_err(|e| fail(&req, e))?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            e_tag: Some(ETag::Strong(outcome.etag)),
            version_id: outcome.version_id,
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let principal = self.principal(&req).await?;
        let input = &req.input;
        let bucket = self.open(&req, &principal, &input.bucket, Access::Write).await?;
        bucket
            .abort_multipart_upload(&input.key, &input.upload_id)
            .await
            .map_err(|e| fail(&req, e))?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(&self, req: S3Request<ListPartsInput>) -> S3Result<S3Response<ListPartsOutput>> {
        let principal = self.principal(&req).await?;
        let input = &req.input;
        let max_parts = input.max_parts.unwrap_or(1000).clamp(0, 1000);
        let marker = input.part_number_marker.unwrap_or(0).max(0);
        let bucket = self.open(&req, &principal, &input.bucket, Access::Read).await?;
        let page = bucket
            .list_parts(&input.key, &input.upload_id, marker as u32, max_parts as usize)
            .await
            .map_err(|e| fail(&req, e))?;
        let parts = page
            .parts
            .into_iter()
            .map(|part| Part {
                e_tag: Some(ETag::Strong(part.etag)),
                last_modified: Some(timestamp(part.last_modified)),
                part_number: Some(part.part_number as i32),
                size: Some(part.size as i64),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            upload_id: Some(input.upload_id.clone()),
            max_parts: Some(max_parts),
            part_number_marker: Some(marker),
            is_truncated: Some(page.next_marker.is_some()),
            next_part_number_marker: page.next_marker.map(|n| n as i32),
            parts: Some(parts),
            owner: Some(owner(&principal)),
            initiator: Some(Initiator {
                id: Some(principal.access_key.clone()),
                display_name: Some(principal.access_key.clone()),
            }),
            storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let principal = self.principal(&req).await?;
        let input = &req.input;
        let max_uploads = input.max_uploads.unwrap_or(1000).clamp(0, 1000);
        let request = store::UploadsRequest {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone(),
            key_marker: input.key_marker.clone(),
            upload_id_marker: input.upload_id_marker.clone(),
            max_uploads: max_uploads as usize,
        };
        let bucket = self.open(&req, &principal, &input.bucket, Access::Read).await?;
        let page = bucket
            .list_multipart_uploads(&request)
            .await
            .map_err(|e| fail(&req, e))?;
        let uploads = page
            .uploads
            .into_iter()
            .map(|upload| MultipartUpload {
                key: Some(upload.key),
                upload_id: Some(upload.upload_id),
                initiated: Some(timestamp(upload.initiated)),
                owner: Some(owner(&principal)),
                storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
                ..Default::default()
            })
            .collect();
        let common_prefixes = page
            .common_prefixes
            .into_iter()
            .map(|prefix| CommonPrefix { prefix: Some(prefix) })
            .collect();
        let (next_key_marker, next_upload_id_marker) = page.next_marker.unzip();
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket.clone()),
            prefix: Some(request.prefix),
            delimiter: input.delimiter.clone().filter(|d| !d.is_empty()),
            key_marker: input.key_marker.clone(),
            upload_id_marker: input.upload_id_marker.clone(),
            max_uploads: Some(max_uploads),
            is_truncated: Some(next_key_marker.is_some()),
            next_key_marker,
            next_upload_id_marker,
            uploads: Some(uploads),
            common_prefixes: Some(common_prefixes),
            ..Default::default()
        }))
    }
}

/// `max-keys` as S3 checks it; absent means 1,000.
fn max_keys(max_keys: Option<i32>) -> S3Result<usize> {
    match max_keys {
        Some(n) if n < 0 => Err(s3s::s3_error!(
            InvalidArgument,
            "Argument maxKeys must be an integer between 0 and 2147483647"
        )),
        Some(n) => Ok(n as usize),
        None => Ok(store::LIST_MAX_KEYS),
    }
}

/// One page of a listing in wire types, shared by ListObjects, ListObjectsV2 and
/// ListObjectVersions.
struct Listing {
    contents: Vec<Object>,
    common_prefixes: Vec<CommonPrefix>,
    key_count: i32,
    truncated: bool,
    next_token: Option<String>,
    /// The last key or common prefix of a cut page (encoded like the keys).
    next_marker: Option<String>,
    url_encode: bool,
}

impl Listing {
    fn encode(&self, text: String) -> String {
        if self.url_encode {
            super::percent_encode(&text, true)
        } else {
            text
        }
    }
}

impl S3Front {
    async fn listing(
        &self,
        bucket: &BucketHandle<'_>,
        request: &ListRequest,
        encoding_type: &Option<EncodingType>,
        fetch_owner: bool,
    ) -> Result<Listing, StoreError> {
        let page = bucket.list(request).await?;
        let owner = fetch_owner.then(|| acl::bucket_owner(bucket, self.buckets.catalog()));
        let mut listing = Listing {
            contents: Vec::new(),
            common_prefixes: Vec::new(),
            key_count: (page.objects.len() + page.common_prefixes.len()) as i32,
            truncated: page.next_token.is_some(),
            next_token: page.next_token.clone(),
            next_marker: None,
            url_encode: encoding_type.as_ref().is_some_and(|e| e.as_str() == EncodingType::URL),
        };
        listing.next_marker = page
            .next_token
            .is_some()
            .then(|| page.last_entry.clone().map(|last| listing.encode(last)))
            .flatten();
        listing.contents = page
            .objects
            .into_iter()
            .map(|object| Object {
                key: Some(listing.encode(object.key)),
                size: Some(object.size as i64),
                e_tag: Some(ETag::Strong(object.etag)),
                last_modified: Some(timestamp(object.last_modified)),
                storage_class: Some(ObjectStorageClass::from_static(ObjectStorageClass::STANDARD)),
                owner: owner.clone(),
                ..Default::default()
            })
            .collect();
        listing.common_prefixes = page
            .common_prefixes
            .into_iter()
            .map(|prefix| CommonPrefix {
                prefix: Some(listing.encode(prefix)),
            })
            .collect();
        Ok(listing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn aws_chunked_framing_is_not_kept_as_the_content_encoding() {
        let stored = |text: &str| stored_encoding(&Some(text.to_owned()));
        assert_eq!(stored("gzip, aws-chunked").as_deref(), Some("gzip"));
        assert_eq!(stored("aws-chunked,gzip").as_deref(), Some("gzip"));
        assert_eq!(stored("aws-chunked"), None);
        assert_eq!(stored("gzip, br").as_deref(), Some("gzip, br"));
        assert_eq!(stored_encoding(&None), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn a_copy_source_range_is_both_ends_in_order(first in any::<u64>(), len in 0u64..1 << 40) {
            let last = first.saturating_add(len);
            let range = copy_source_range(&format!("bytes={first}-{last}")).unwrap();
            let exact = matches!(range, store::ByteRange::From { first: f, last: Some(l) } if f == first && l == last);
            prop_assert!(exact);
            if first > 0 {
                let reversed = format!("bytes={last}-{}", first - 1);
                prop_assert!(copy_source_range(&reversed).is_err());
            }
        }

        #[test]
        fn any_other_copy_source_range_is_invalid_argument(text in "(bytes=)?\\PC{0,24}") {
            if let Err(err) = copy_source_range(&text) {
                prop_assert_eq!(err.code().as_str(), "InvalidArgument");
            }
        }
    }
}
