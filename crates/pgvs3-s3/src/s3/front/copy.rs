//! Copies: CopyObject and UploadPartCopy.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::checks::{self, Request};
use super::context::RequestContext;
use super::lifecycle::expiration_header;
use super::tagging::header_tags;
use super::wire::{fail, header_write_condition, part_number, timestamp, to_etag_condition, to_system_time};
use super::{acl, encryption};
use crate::s3::checksum::{Algorithm, UploadCheck};
use crate::store;

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

pub(super) async fn copy_object(
    cx: RequestContext<'_>,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
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
    if !replace && !reencrypts && source_bucket == input.bucket && source_key == input.key && source_version.is_none() {
        return Err(s3s::s3_error!(
            InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself without \
             changing the object's metadata, storage class, website redirect location or encryption attributes."
        ));
    }
    let conditions = copy_source_conditions!(input);
    // The destination's conditions, as on a PutObject (AWS's conditional copies).
    let condition = header_write_condition(&req.headers)?;
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
    // S3 gives the copy a checksum of the named algorithm, computed from its bytes.
    let checksum = input
        .checksum_algorithm
        .as_ref()
        .map(|named| {
            Algorithm::from_name(named.as_str())
                .ok_or_else(|| s3s::s3_error!(InvalidRequest, "Value for x-amz-checksum-algorithm header is invalid."))
        })
        .transpose()?
        .map(|algorithm| Box::new(UploadCheck::copied(Some(algorithm))) as Box<dyn store::BodyObserver>);
    let source = cx.open_source(&req, source_bucket).await?;
    let bucket = &cx.bucket;
    let new_acl = acl::new_object_acl(requested_acl, bucket, &cx.principal, cx.front.buckets.catalog()).await?;
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
            &condition,
            meta,
            tags,
            lock,
            new_acl,
            copy_encryption,
            checksum,
        )
        .await
        .map_err(|e| fail(&req, e))?;
    let expiration = bucket.expiry_of_written(&input.key, &outcome).map(expiration_header);
    let mut result = CopyObjectResult {
        e_tag: Some(ETag::Strong(outcome.etag)),
        last_modified: Some(timestamp(outcome.last_modified)),
        ..Default::default()
    };
    result.checksum_type = set_checksum!(result, outcome.checksum);
    let mut output = CopyObjectOutput {
        expiration,
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

pub(super) async fn upload_part_copy(
    cx: RequestContext<'_>,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
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
    let source = cx.open_source(&req, source_bucket).await?;
    let bucket = &cx.bucket;
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
            Box::new(UploadCheck::copied(None)),
        )
        .await
        .map_err(|e| fail(&req, e))?;
    let mut result = CopyPartResult {
        e_tag: Some(ETag::Strong(outcome.etag)),
        last_modified: Some(timestamp(outcome.last_modified)),
        ..Default::default()
    };
    let _ = set_checksum!(result, outcome.checksum);
    let mut output = UploadPartCopyOutput {
        copy_part_result: Some(result),
        ..Default::default()
    };
    set_encryption!(output, encryption::answer_requested(&requested, sse_s3));
    Ok(S3Response::new(output))
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
