//! Object writes: PutObject (and the browser uploads s3s makes one of).

use futures::TryStreamExt;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::checks::{self, Request};
use super::context::RequestContext;
use super::lifecycle::expiration_header;
use super::tagging::header_tags;
use super::wire::{fail, write_condition};
use super::{acl, encryption, post};
use crate::s3::checksum::{UploadCheck, body_error};
use crate::store;

pub(super) async fn put_object(
    cx: RequestContext<'_>,
    mut req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
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
    let bucket = &cx.bucket;
    upload.meta.acl = acl::new_object_acl(requested_acl, bucket, &cx.principal, cx.front.buckets.catalog()).await?;
    let outcome = bucket
        .put(&input.key, upload, &condition)
        .await
        .map_err(|e| fail(&req, e))?;
    let expiration = bucket.expiry_of_written(&input.key, &outcome).map(expiration_header);
    let etag = ETag::Strong(outcome.etag);
    let mut output = PutObjectOutput {
        e_tag: Some(etag.clone()),
        expiration,
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
