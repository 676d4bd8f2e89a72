//! Object reads: GetObject, HeadObject and GetObjectAttributes.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::checks::{self, Request};
use super::context::RequestContext;
use super::wire::{fail, missing, part_number, row_allows, timestamp, to_etag_condition, to_system_time};
use super::{encryption, lifecycle, lock};
use crate::s3::checksum::Algorithm;
use crate::s3::multipart_checksum::checksum_type;
use crate::store::{self, ObjectHead, ObjectRead};

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

/// GET or HEAD (`with_body` false) of an object: the options both take, checked alike;
/// with the read, its `x-amz-expiration` when a lifecycle rule will expire it.
#[allow(clippy::too_many_arguments)]
async fn read<T>(
    cx: &RequestContext<'_>,
    req: &S3Request<T>,
    key: &str,
    version_id: &Option<String>,
    range: Option<Range>,
    part: Option<i32>,
    conditions: store::Preconditions,
    with_body: bool,
    customer: encryption::CustomerFields<'_>,
) -> S3Result<(ObjectRead, store::ReadOptions, Option<String>)> {
    checks::refuse_unkept(&req.headers, Request::Read)?;
    let options = store::ReadOptions {
        range: range.map(to_range),
        part_number: part_number(part)?,
        conditions,
        version_id: version_id.clone(),
        customer_key: customer.key(req)?,
    };
    let bucket = &cx.bucket;
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

pub(super) async fn get_object(
    cx: RequestContext<'_>,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let input = &req.input;
    let (read, options, expiration) = read(
        &cx,
        &req,
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
    let wants_checksum = checksum_requested(&input.checksum_mode) && (!read.partial || options.part_number.is_some());
    describe_object!(output, &read.head, checksum_fields(&read.head, wants_checksum));
    output.checksum_type = checksum_kind(&read.head, wants_checksum);
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

pub(super) async fn head_object(
    cx: RequestContext<'_>,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let input = &req.input;
    let (read, options, expiration) = read(
        &cx,
        &req,
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
    let wants_checksum = checksum_requested(&input.checksum_mode) && (!read.partial || options.part_number.is_some());
    describe_object!(output, &read.head, checksum_fields(&read.head, wants_checksum));
    output.checksum_type = checksum_kind(&read.head, wants_checksum);
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

pub(super) async fn get_object_attributes(
    cx: RequestContext<'_>,
    req: S3Request<GetObjectAttributesInput>,
) -> S3Result<S3Response<GetObjectAttributesOutput>> {
    let input = &req.input;
    let bucket = &cx.bucket;
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
    // S3 answers a COMPOSITE checksum here without its `-<parts>`.
    let mut head = head;
    if let Some(stored) = &mut head.meta.checksum
        && stored.composite
        && let Some((value, _parts)) = stored.value.rsplit_once('-')
    {
        stored.value = value.to_owned();
    }
    let [crc32, crc32c, crc64nvme, sha1, sha256] = checksum_fields(&head, true);
    let kind = checksum_kind(&head, true);
    let object_parts = match head.meta.parts.filter(|_| wanted(ObjectAttributes::OBJECT_PARTS)) {
        Some(count) => Some(object_parts(&cx, &req, &head, count).await?),
        None => None,
    };
    // The ETag goes out unquoted, as S3 writes it here (see `unquote_attributes_etag`).
    Ok(S3Response::new(GetObjectAttributesOutput {
        e_tag: wanted(ObjectAttributes::ETAG).then(|| ETag::Strong(head.etag.clone())),
        version_id: head.version_id.clone(),
        last_modified: Some(timestamp(head.last_modified)),
        object_size: wanted(ObjectAttributes::OBJECT_SIZE).then_some(head.size as i64),
        storage_class: wanted(ObjectAttributes::STORAGE_CLASS)
            .then(|| StorageClass::from_static(StorageClass::STANDARD)),
        object_parts,
        checksum: (wanted(ObjectAttributes::CHECKSUM) && kind.is_some()).then_some(Checksum {
            checksum_crc32: crc32,
            checksum_crc32c: crc32c,
            checksum_crc64nvme: crc64nvme,
            checksum_sha1: sha1,
            checksum_sha256: sha256,
            checksum_type: kind,
        }),
        ..Default::default()
    }))
}

/// GetObjectAttributes' ObjectParts: the part count and, for a COMPOSITE object, a page of its
/// parts with their checksums, as S3 lists them (`max-parts`, `part-number-marker`).
async fn object_parts(
    cx: &RequestContext<'_>,
    req: &S3Request<GetObjectAttributesInput>,
    head: &ObjectHead,
    count: u32,
) -> S3Result<GetObjectAttributesParts> {
    let mut answer = GetObjectAttributesParts {
        total_parts_count: Some(count as i32),
        ..Default::default()
    };
    let Some(stored) = head.meta.checksum.as_ref().filter(|stored| stored.composite) else {
        return Ok(answer);
    };
    let input = &req.input;
    let max_parts = input.max_parts.unwrap_or(1000).clamp(0, 1000);
    let marker = input.part_number_marker.unwrap_or(0).max(0);
    let page = cx
        .bucket
        .object_parts(&input.key, head, marker as u32, max_parts as usize)
        .await
        .map_err(|e| fail(req, e))?;
    let kept = Some(store::UploadChecksum {
        algorithm: stored.algorithm.clone(),
        full_object: false,
    });
    answer.is_truncated = Some(page.truncated);
    answer.next_part_number_marker = Some(page.next_marker(marker as u32) as i32);
    answer.parts = Some(
        page.parts
            .into_iter()
            .map(|part| {
                let mut listed = ObjectPart {
                    part_number: Some(part.part_number as i32),
                    size: Some(part.size as i64),
                    ..Default::default()
                };
                let _ = set_checksum!(listed, super::multipart::part_checksum(&kept, part.checksum));
                listed
            })
            .collect(),
    );
    answer.max_parts = Some(max_parts);
    answer.part_number_marker = Some(marker);
    Ok(answer)
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
/// whole object or one part of it (whose head has that part's checksum, if any; see
/// `store::bodies::locate`): a range's bytes match no checksum kept.
pub(super) fn checksum_fields(head: &ObjectHead, wanted: bool) -> [Option<String>; 5] {
    let mut fields: [Option<String>; 5] = Default::default();
    if let (true, Some(stored)) = (wanted, &head.meta.checksum)
        && let Some(alg) = Algorithm::from_name(&stored.algorithm)
    {
        fields[Algorithm::ALL.iter().position(|a| *a == alg).expect("listed")] = Some(stored.value.clone());
    }
    fields
}

/// The `x-amz-checksum-type` of the checksum [`checksum_fields`] answers.
fn checksum_kind(head: &ObjectHead, wanted: bool) -> Option<ChecksumType> {
    head.meta
        .checksum
        .as_ref()
        .filter(|_| wanted)
        .map(|stored| checksum_type(!stored.composite))
}

fn checksum_requested(mode: &Option<ChecksumMode>) -> bool {
    mode.as_ref()
        .is_some_and(|mode| mode.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED))
}
