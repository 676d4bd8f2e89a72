//! Tagging: Get/Put/DeleteObjectTagging, Get/Put/DeleteBucketTagging, and the tags of
//! `x-amz-tagging` that writes carry.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::context::RequestContext;
use super::wire::{fail, missing, row_allows};
use crate::bucket::BucketHandle;
use crate::s3::authorize::PolicyGrant;
use crate::store::{self, ObjectMeta, StoreError};

pub(super) async fn get_object_tagging(
    cx: RequestContext<'_>,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let bucket = &cx.bucket;
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

pub(super) async fn put_object_tagging(
    cx: RequestContext<'_>,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let input = &req.input;
    let tags = tags_from(&input.tagging, store::MAX_OBJECT_TAGS).map_err(|e| fail(&req, e))?;
    let bucket = &cx.bucket;
    set_tags(&req, bucket, &input.key, input.version_id.as_deref(), &tags).await?;
    Ok(S3Response::new(PutObjectTaggingOutput::default()))
}

pub(super) async fn delete_object_tagging(
    cx: RequestContext<'_>,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let bucket = &cx.bucket;
    let input = &req.input;
    set_tags(
        &req,
        bucket,
        &input.key,
        input.version_id.as_deref(),
        &store::Tags::new(),
    )
    .await?;
    Ok(S3Response::new(DeleteObjectTaggingOutput::default()))
}

pub(super) async fn get_bucket_tagging(
    cx: RequestContext<'_>,
    req: S3Request<GetBucketTaggingInput>,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    let bucket = &cx.bucket;
    let tags = bucket
        .tags()
        .await
        .and_then(|tags| tags.ok_or(StoreError::NoSuchTagSet))
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(GetBucketTaggingOutput {
        tag_set: tag_list(tags),
    }))
}

pub(super) async fn put_bucket_tagging(
    cx: RequestContext<'_>,
    req: S3Request<PutBucketTaggingInput>,
) -> S3Result<S3Response<PutBucketTaggingOutput>> {
    let tags = tags_from(&req.input.tagging, store::MAX_BUCKET_TAGS).map_err(|e| fail(&req, e))?;
    let bucket = &cx.bucket;
    bucket.set_tags(Some(&tags)).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutBucketTaggingOutput::default()))
}

pub(super) async fn delete_bucket_tagging(
    cx: RequestContext<'_>,
    req: S3Request<DeleteBucketTaggingInput>,
) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
    let bucket = &cx.bucket;
    bucket.set_tags(None).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
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
pub(super) fn header_tags(header: &Option<String>) -> Result<store::Tags, StoreError> {
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
