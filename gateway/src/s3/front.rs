//! The S3 operations: wire types in, store calls, wire types out.

use std::time::SystemTime;

use futures::TryStreamExt;
use s3s::dto::*;
use s3s::{S3, S3Error, S3Request, S3Response, S3Result};

use super::checksum::{Algorithm, UploadCheck, body_error};
use super::errors::{RequestId, s3_error};
use crate::store::{self, ListRequest, ObjectHead, ObjectMeta, Principal, Store, StoreError};

pub struct S3Front {
    store: Store,
    region: String,
}

impl S3Front {
    pub fn new(store: Store, region: String) -> S3Front {
        S3Front { store, region }
    }

    async fn principal<T>(&self, req: &S3Request<T>) -> S3Result<Principal> {
        let credentials = req.credentials.as_ref().ok_or_else(|| s3s::s3_error!(AccessDenied))?;
        match self.store.catalog().access_key(&credentials.access_key).await {
            Ok(Some(key)) => Ok(key.principal()),
            Ok(None) => Err(s3s::s3_error!(InvalidAccessKeyId)),
            Err(err) => Err(fail(req, err)),
        }
    }
}

fn fail<T>(req: &S3Request<T>, err: StoreError) -> S3Error {
    s3_error(err, req.extensions.get::<RequestId>())
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

macro_rules! describe_object {
    ($output:expr, $head:expr, $checksums:expr) => {{
        let head: &ObjectHead = $head;
        let [crc32, crc32c, crc64nvme, sha1, sha256] = $checksums;
        $output.e_tag = Some(ETag::Strong(head.etag.clone()));
        $output.last_modified = Some(timestamp(head.last_modified));
        $output.content_type = head.meta.content_type.clone();
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
    }};
}

#[async_trait::async_trait]
impl S3 for S3Front {
    async fn list_buckets(&self, req: S3Request<ListBucketsInput>) -> S3Result<S3Response<ListBucketsOutput>> {
        let principal = self.principal(&req).await?;
        let prefix = req.input.prefix.clone().unwrap_or_default();
        let buckets = self
            .store
            .catalog()
            .list_buckets(&principal)
            .await
            .map_err(|e| fail(&req, e))?;
        let buckets = buckets
            .into_iter()
            .filter(|bucket| bucket.name.starts_with(&prefix))
            .map(|bucket| Bucket {
                name: Some(bucket.name),
                creation_date: Some(timestamp(bucket.created_at)),
                bucket_region: Some(self.region.clone()),
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(owner(&principal)),
            prefix: req.input.prefix.clone(),
            ..Default::default()
        }))
    }

    async fn create_bucket(&self, req: S3Request<CreateBucketInput>) -> S3Result<S3Response<CreateBucketOutput>> {
        let principal = self.principal(&req).await?;
        self.store
            .catalog()
            .create_bucket(&principal, &req.input.bucket)
            .await
            .map_err(|e| fail(&req, e))?;
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{}", req.input.bucket)),
        }))
    }

    async fn head_bucket(&self, req: S3Request<HeadBucketInput>) -> S3Result<S3Response<HeadBucketOutput>> {
        let principal = self.principal(&req).await?;
        self.store
            .bucket(&principal, &req.input.bucket, store::Access::Read)
            .await
            .map_err(|e| fail(&req, e))?;
        Ok(S3Response::new(HeadBucketOutput {
            bucket_region: Some(self.region.clone()),
            ..Default::default()
        }))
    }

    async fn delete_bucket(&self, req: S3Request<DeleteBucketInput>) -> S3Result<S3Response<DeleteBucketOutput>> {
        let principal = self.principal(&req).await?;
        self.store
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
        self.store
            .bucket(&principal, &req.input.bucket, store::Access::Read)
            .await
            .map_err(|e| fail(&req, e))?;
        // S3 reports us-east-1 as an empty LocationConstraint.
        let location_constraint =
            (self.region != "us-east-1").then(|| BucketLocationConstraint::from(self.region.clone()));
        Ok(S3Response::new(GetBucketLocationOutput { location_constraint }))
    }

    async fn put_object(&self, mut req: S3Request<PutObjectInput>) -> S3Result<S3Response<PutObjectOutput>> {
        let principal = self.principal(&req).await?;
        let check = UploadCheck::from_request(&req.headers, req.trailing_headers.clone())?;
        let body: store::BodyStream = match req.input.body.take() {
            Some(blob) => Box::pin(blob.map_err(|err| body_error(err.as_ref()))),
            None => Box::pin(futures::stream::empty()),
        };
        let input = &req.input;
        let meta = ObjectMeta {
            content_type: input.content_type.clone(),
            content_encoding: input.content_encoding.clone().filter(|enc| enc != "aws-chunked"),
            content_disposition: input.content_disposition.clone(),
            content_language: input.content_language.clone(),
            cache_control: input.cache_control.clone(),
            expires: req
                .headers
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
        };
        let declared_len = input.content_length.map(|len| len.max(0) as u64);
        let outcome = self
            .store
            .put_object(
                &principal,
                &req.input.bucket,
                &req.input.key,
                store::Upload {
                    meta,
                    body,
                    declared_len,
                    observer: Box::new(check),
                },
            )
            .await
            .map_err(|e| fail(&req, e))?;
        let mut output = PutObjectOutput {
            e_tag: Some(ETag::Strong(outcome.etag)),
            ..Default::default()
        };
        if let Some(stored) = outcome.checksum
            && let Some(alg) = Algorithm::from_name(&stored.algorithm)
        {
            let value = Some(stored.value);
            match alg {
                Algorithm::Crc32 => output.checksum_crc32 = value,
                Algorithm::Crc32c => output.checksum_crc32c = value,
                Algorithm::Crc64Nvme => output.checksum_crc64nvme = value,
                Algorithm::Sha1 => output.checksum_sha1 = value,
                Algorithm::Sha256 => output.checksum_sha256 = value,
            }
            output.checksum_type = Some(ChecksumType::from_static(ChecksumType::FULL_OBJECT));
        }
        Ok(S3Response::new(output))
    }

    async fn get_object(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
        let principal = self.principal(&req).await?;
        let input = &req.input;
        let range = input.range.map(to_range);
        let read = self
            .store
            .get_object(&principal, &input.bucket, &input.key, range)
            .await
            .map_err(|e| fail(&req, e))?;
        let mut output = GetObjectOutput::default();
        let wants_checksum = checksum_requested(&input.checksum_mode) && !read.partial;
        describe_object!(output, &read.head, checksum_fields(&read.head, wants_checksum));
        let (start, end) = read.span;
        output.content_length = Some((end - start) as i64);
        if read.partial {
            output.content_range = Some(format!("bytes {start}-{}/{}", end - 1, read.head.size));
        }
        output.body = Some(StreamingBlob::wrap(read.body));
        Ok(S3Response::new(output))
    }

    async fn head_object(&self, req: S3Request<HeadObjectInput>) -> S3Result<S3Response<HeadObjectOutput>> {
        let principal = self.principal(&req).await?;
        let input = &req.input;
        let head = self
            .store
            .head_object(&principal, &input.bucket, &input.key)
            .await
            .map_err(|e| fail(&req, e))?;
        let mut output = HeadObjectOutput::default();
        let (length, partial) = match input.range.map(to_range) {
            Some(range) => {
                let (start, end) = range.resolve(head.size).map_err(|e| fail(&req, e))?;
                output.content_range = Some(format!("bytes {start}-{}/{}", end - 1, head.size));
                (end - start, true)
            }
            None => (head.size, false),
        };
        let wants_checksum = checksum_requested(&input.checksum_mode) && !partial;
        describe_object!(output, &head, checksum_fields(&head, wants_checksum));
        output.content_length = Some(length as i64);
        Ok(S3Response::new(output))
    }

    async fn delete_object(&self, req: S3Request<DeleteObjectInput>) -> S3Result<S3Response<DeleteObjectOutput>> {
        let principal = self.principal(&req).await?;
        self.store
            .delete_object(&principal, &req.input.bucket, &req.input.key)
            .await
            .map_err(|e| fail(&req, e))?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(&self, req: S3Request<DeleteObjectsInput>) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let principal = self.principal(&req).await?;
        let identifiers = &req.input.delete.objects;
        if identifiers.len() > 1000 {
            return Err(s3s::s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema."
            ));
        }
        let (valid, too_long): (Vec<&ObjectIdentifier>, Vec<&ObjectIdentifier>) =
            identifiers.iter().partition(|id| id.key.len() <= 1024);
        let keys: Vec<String> = valid.iter().map(|id| id.key.clone()).collect();
        self.store
            .delete_objects(&principal, &req.input.bucket, &keys)
            .await
            .map_err(|e| fail(&req, e))?;
        let quiet = req.input.delete.quiet.unwrap_or(false);
        let deleted = (!quiet).then(|| {
            keys.into_iter()
                .map(|key| DeletedObject {
                    key: Some(key),
                    ..Default::default()
                })
                .collect()
        });
        let errors: Vec<s3s::dto::Error> = too_long
            .into_iter()
            .map(|id| s3s::dto::Error {
                code: Some("KeyTooLongError".into()),
                key: Some(id.key.clone()),
                message: Some(StoreError::KeyTooLong.to_string()),
                version_id: None,
            })
            .collect();
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted,
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(&self, req: S3Request<ListObjectsV2Input>) -> S3Result<S3Response<ListObjectsV2Output>> {
        let principal = self.principal(&req).await?;
        let input = &req.input;
        let max_keys = match input.max_keys {
            Some(n) if n < 0 => {
                return Err(s3s::s3_error!(
                    InvalidArgument,
                    "Argument maxKeys must be an integer between 0 and 2147483647"
                ));
            }
            Some(n) => n as usize,
            None => store::LIST_MAX_KEYS,
        };
        let request = ListRequest {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone(),
            start_after: input.start_after.clone(),
            continuation: input.continuation_token.clone(),
            max_keys,
        };
        let page = self
            .store
            .list_objects(&principal, &input.bucket, &request)
            .await
            .map_err(|e| fail(&req, e))?;
        let url_encode = input
            .encoding_type
            .as_ref()
            .is_some_and(|e| e.as_str() == EncodingType::URL);
        let encode = |text: String| {
            if url_encode { url_encode_key(&text) } else { text }
        };
        let fetch_owner = input.fetch_owner.unwrap_or(false);
        let key_count = (page.objects.len() + page.common_prefixes.len()) as i32;
        let contents = page
            .objects
            .into_iter()
            .map(|object| Object {
                key: Some(encode(object.key)),
                size: Some(object.size as i64),
                e_tag: Some(ETag::Strong(object.etag)),
                last_modified: Some(timestamp(object.last_modified)),
                storage_class: Some(ObjectStorageClass::from_static(ObjectStorageClass::STANDARD)),
                owner: fetch_owner.then(|| owner(&principal)),
                ..Default::default()
            })
            .collect();
        let common_prefixes = page
            .common_prefixes
            .into_iter()
            .map(|prefix| CommonPrefix {
                prefix: Some(encode(prefix)),
            })
            .collect();
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket.clone()),
            prefix: Some(encode(request.prefix)),
            delimiter: request.delimiter.map(encode),
            start_after: request.start_after.map(encode),
            max_keys: Some(max_keys.min(i32::MAX as usize) as i32),
            key_count: Some(key_count),
            continuation_token: input.continuation_token.clone(),
            is_truncated: Some(page.next_token.is_some()),
            next_continuation_token: page.next_token,
            contents: Some(contents),
            common_prefixes: Some(common_prefixes),
            encoding_type: input.encoding_type.clone(),
            ..Default::default()
        }))
    }
}

/// Percent-encodes like S3's `encoding-type=url`: everything but unreserved characters and `/`.
fn url_encode_key(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
