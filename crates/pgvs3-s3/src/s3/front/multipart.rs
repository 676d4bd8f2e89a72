//! Multipart uploads: Create, UploadPart, Complete, Abort, ListParts, ListMultipartUploads.

use futures::TryStreamExt;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::checks::{self, Request};
use super::context::RequestContext;
use super::lifecycle::expiration_header;
use super::tagging::header_tags;
use super::wire::{fail, part_number, timestamp, write_condition};
use super::{acl, encryption};
use crate::s3::checksum::{Algorithm, UploadCheck, body_error};
use crate::s3::multipart_checksum::{self, checksum_type};
use crate::store::{self, ObjectMeta, StoredChecksum};

/// The checksum a request names among its `ChecksumCRC32`... fields (S3 takes one).
macro_rules! named_checksum {
    ($fields:expr) => {{
        let fields = &$fields;
        [
            (Algorithm::Crc32, &fields.checksum_crc32),
            (Algorithm::Crc32c, &fields.checksum_crc32c),
            (Algorithm::Crc64Nvme, &fields.checksum_crc64nvme),
            (Algorithm::Sha1, &fields.checksum_sha1),
            (Algorithm::Sha256, &fields.checksum_sha256),
        ]
        .into_iter()
        .find_map(|(algorithm, value)| value.clone().map(|value| (algorithm, value)))
    }};
}

pub(super) async fn create_multipart_upload(
    cx: RequestContext<'_>,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    checks::refuse_unkept(&req.headers, Request::NewObject)?;
    let input = &req.input;
    let mut meta = meta_from_input!(input, req.headers);
    checks::check_user_metadata(&meta.user)?;
    meta.tags = header_tags(&input.tagging).map_err(|e| fail(&req, e))?;
    requested_lock!(input)?.apply(&mut meta);
    meta.upload_checksum =
        multipart_checksum::requested(input.checksum_algorithm.as_ref(), input.checksum_type.as_ref())?;
    let requested = requested_encryption!(req, input)?;
    let requested_acl = acl::requested(&req.headers)?;
    let bucket = &cx.bucket;
    let kept = meta.upload_checksum.clone();
    meta.acl = acl::new_object_acl(requested_acl, bucket, &cx.principal, cx.front.buckets.catalog()).await?;
    let answer = encryption::answer_requested(&requested, bucket.default_encryption());
    let initiator = Some(cx.principal.access_key.as_str()).filter(|key| !key.is_empty());
    let upload_id = bucket
        .create_multipart_upload(&input.key, meta, requested, initiator)
        .await
        .map_err(|e| fail(&req, e))?;
    let mut output = CreateMultipartUploadOutput {
        bucket: Some(input.bucket.clone()),
        key: Some(input.key.clone()),
        upload_id: Some(upload_id),
        checksum_algorithm: kept
            .as_ref()
            .map(|kept| ChecksumAlgorithm::from(kept.algorithm.clone())),
        checksum_type: kept.map(|kept| checksum_type(kept.full_object)),
        ..Default::default()
    };
    set_encryption!(output, answer);
    Ok(S3Response::new(output))
}

pub(super) async fn upload_part(
    cx: RequestContext<'_>,
    mut req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
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
    let bucket = &cx.bucket;
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

pub(super) async fn complete_multipart_upload(
    cx: RequestContext<'_>,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
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
            checksum: named_checksum!(part).map(|(algorithm, value)| StoredChecksum {
                algorithm: algorithm.name().to_owned(),
                value,
                composite: false,
            }),
        })
        .collect();
    let completion = multipart_checksum::Completion {
        declared: named_checksum!(input),
        declared_type: input.checksum_type.clone(),
    };
    let condition = write_condition(&input.if_match, &input.if_none_match)?;
    // The size the client expects its parts to add up to (AWS checks it, and completes
    // nothing when they do not).
    let expected_size = input
        .mpu_object_size
        .map(|size| {
            u64::try_from(size).map_err(|_| {
                s3s::s3_error!(
                    InvalidRequest,
                    "Value for x-amz-mp-object-size header is less than zero: '{}'",
                    size
                )
            })
        })
        .transpose()?;
    let bucket = &cx.bucket;
    let store::PartOutcome {
        written: outcome,
        sse_s3,
    } = bucket
        .complete_multipart_upload(
            &input.key,
            &input.upload_id,
            &parts,
            &completion,
            &condition,
            expected_size,
        )
        .await
        .map_err(|e| fail(&req, e))?;
    let mut output = CompleteMultipartUploadOutput {
        bucket: Some(input.bucket.clone()),
        key: Some(input.key.clone()),
        location: Some(format!("/{}/{}", input.bucket, input.key)),
        expiration: bucket.expiry_of_written(&input.key, &outcome).map(expiration_header),
        e_tag: Some(ETag::Strong(outcome.etag)),
        version_id: outcome.version_id,
        ..Default::default()
    };
    output.checksum_type = set_checksum!(output, outcome.checksum);
    // S3 answers the object's SSE-S3 (asked for on CreateMultipartUpload, or the bucket's
    // default) on the completion too; it names no SSE-C key there.
    output.server_side_encryption = sse_s3.then(|| ServerSideEncryption::from_static(ServerSideEncryption::AES256));
    Ok(S3Response::new(output))
}

pub(super) async fn abort_multipart_upload(
    cx: RequestContext<'_>,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let input = &req.input;
    let bucket = &cx.bucket;
    bucket
        .abort_multipart_upload(&input.key, &input.upload_id)
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

pub(super) async fn list_parts(
    cx: RequestContext<'_>,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let input = &req.input;
    let max_parts = input.max_parts.unwrap_or(1000).clamp(0, 1000);
    let marker = input.part_number_marker.unwrap_or(0).max(0);
    let bucket = &cx.bucket;
    let page = bucket
        .list_parts(&input.key, &input.upload_id, marker as u32, max_parts as usize)
        .await
        .map_err(|e| fail(&req, e))?;
    let next_marker = page.next_marker(marker as u32);
    let parts = page
        .parts
        .into_iter()
        .map(|part| {
            let mut listed = Part {
                e_tag: Some(ETag::Strong(part.etag)),
                last_modified: Some(timestamp(part.last_modified)),
                part_number: Some(part.part_number as i32),
                size: Some(part.size as i64),
                ..Default::default()
            };
            let _ = set_checksum!(listed, part_checksum(&page.checksum, part.checksum));
            listed
        })
        .collect();
    let (owner, initiator) = parties(page.parties, &acl::owner_id(bucket, cx.front.buckets.catalog()));
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(input.bucket.clone()),
        key: Some(input.key.clone()),
        upload_id: Some(input.upload_id.clone()),
        max_parts: Some(max_parts),
        part_number_marker: Some(marker),
        is_truncated: Some(page.truncated),
        next_part_number_marker: Some(next_marker as i32),
        parts: Some(parts),
        owner: Some(owner),
        initiator: Some(initiator),
        storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
        checksum_algorithm: page
            .checksum
            .as_ref()
            .map(|kept| ChecksumAlgorithm::from(kept.algorithm.clone())),
        checksum_type: page.checksum.map(|kept| checksum_type(kept.full_object)),
        ..Default::default()
    }))
}

/// A stored part's checksum, in the algorithm its upload keeps.
pub(super) fn part_checksum(kept: &Option<store::UploadChecksum>, value: Option<String>) -> Option<StoredChecksum> {
    Some(StoredChecksum {
        algorithm: kept.as_ref()?.algorithm.clone(),
        value: value?,
        composite: false,
    })
}

pub(super) async fn list_multipart_uploads(
    cx: RequestContext<'_>,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let input = &req.input;
    let max_uploads = input.max_uploads.unwrap_or(1000).clamp(0, 1000);
    let request = store::UploadsRequest {
        prefix: input.prefix.clone().unwrap_or_default(),
        delimiter: input.delimiter.clone(),
        key_marker: input.key_marker.clone(),
        upload_id_marker: input.upload_id_marker.clone(),
        max_uploads: max_uploads as usize,
    };
    // `encoding-type=url` encodes every key field, as ListObjectsV2's.
    let encode = super::list::key_encoder(super::list::url_encoding(input.encoding_type.as_ref())?);
    let bucket = &cx.bucket;
    let page = bucket
        .list_multipart_uploads(&request)
        .await
        .map_err(|e| fail(&req, e))?;
    let bucket_owner = acl::owner_id(bucket, cx.front.buckets.catalog());
    let uploads = page
        .uploads
        .into_iter()
        .map(|upload| {
            let (owner, initiator) = parties(upload.parties, &bucket_owner);
            MultipartUpload {
                key: Some(encode(upload.key)),
                upload_id: Some(upload.upload_id),
                initiated: Some(timestamp(upload.initiated)),
                owner: Some(owner),
                initiator: Some(initiator),
                storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
                checksum_algorithm: upload
                    .checksum
                    .as_ref()
                    .map(|kept| ChecksumAlgorithm::from(kept.algorithm.clone())),
                checksum_type: upload.checksum.map(|kept| checksum_type(kept.full_object)),
            }
        })
        .collect();
    let common_prefixes = page
        .common_prefixes
        .into_iter()
        .map(|prefix| CommonPrefix {
            prefix: Some(encode(prefix)),
        })
        .collect();
    let (next_key_marker, next_upload_id_marker) = page.next_marker.unzip();
    let next_key_marker = next_key_marker.map(encode);
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(input.bucket.clone()),
        prefix: Some(encode(request.prefix)),
        delimiter: input.delimiter.clone().filter(|d| !d.is_empty()).map(encode),
        key_marker: input.key_marker.clone().map(encode),
        upload_id_marker: input.upload_id_marker.clone(),
        max_uploads: Some(max_uploads),
        is_truncated: Some(next_key_marker.is_some()),
        next_key_marker,
        next_upload_id_marker,
        uploads: Some(uploads),
        common_prefixes: Some(common_prefixes),
        encoding_type: input.encoding_type.clone(),
        ..Default::default()
    }))
}

/// The Owner and Initiator S3 names an upload by (ListParts, ListMultipartUploads): the owner
/// of the object it will complete (the bucket's owner unless the upload's ACL names the key
/// that wrote it) and the key that created it. An upload created anonymously, or before
/// initiators were recorded, names its owner as its initiator.
fn parties(parties: store::UploadParties, bucket_owner: &str) -> (Owner, Initiator) {
    let owner = parties.owner.unwrap_or_else(|| bucket_owner.to_owned());
    let initiator = parties.initiator.unwrap_or_else(|| owner.clone());
    (
        Owner {
            id: Some(owner.clone()),
            display_name: Some(owner),
        },
        Initiator {
            id: Some(initiator.clone()),
            display_name: Some(initiator),
        },
    )
}
