//! Buckets as a whole: ListBuckets, CreateBucket, HeadBucket, DeleteBucket,
//! GetBucketLocation and Get/PutBucketVersioning.

use s3s::dto::*;
use s3s::{S3Error, S3Request, S3Response, S3Result};

use super::acl;
use super::checks::{self, Request};
use super::context::{RequestContext, ServiceContext};
use super::wire::{fail, owner, timestamp};
use crate::store;

/// The region S3 answers some requests in its own way (an empty LocationConstraint, a re-created
/// bucket).
const US_EAST_1: &str = "us-east-1";

pub(super) async fn list_buckets(
    cx: ServiceContext<'_>,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
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
    let listed = cx
        .front
        .buckets
        .catalog()
        .list_buckets(&cx.principal)
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
            bucket_region: Some(cx.front.region.clone()),
        });
    }
    let continuation_token = more.then(|| buckets.last().and_then(|b| b.name.clone())).flatten();
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(buckets),
        continuation_token,
        owner: Some(owner(&cx.principal)),
        prefix: input.prefix.clone(),
    }))
}

pub(super) async fn create_bucket(
    cx: ServiceContext<'_>,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    checks::refuse_unkept(&req.headers, Request::CreateBucket)?;
    if let Some(config) = &req.input.create_bucket_configuration {
        check_bucket_configuration(config, &cx.front.region)?;
    }
    let name = &req.input.bucket;
    let catalog = cx.front.buckets.catalog();
    // S3 answers an account re-creating a bucket it owns with 200 in us-east-1 ("for legacy
    // compatibility"; tools "ensure" their bucket this way) and resets the bucket's ACL to what
    // the request asks for; every other region answers 409 BucketAlreadyOwnedByYou (the store's
    // answer). The request's ACL is the existing bucket's to judge, so it is looked at first.
    if cx.front.region == US_EAST_1
        && let Ok(existing) = catalog.bucket(name).await
        && cx.principal.owns(&existing)
    {
        let bucket = cx.front.open(&req, &cx.principal, name, store::Access::Write).await?;
        acl::reset_on_recreate(&req, &bucket, catalog).await?;
        return Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{name}")),
        }));
    }
    let new = acl::new_bucket(&req, &cx.principal, catalog, cx.front.default_ownership).await?;
    catalog
        .create_bucket(&cx.principal, name, &new)
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{name}")),
    }))
}

pub(super) async fn head_bucket(
    cx: RequestContext<'_>,
    _req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    Ok(S3Response::new(HeadBucketOutput {
        bucket_region: Some(cx.front.region.clone()),
        ..Default::default()
    }))
}

pub(super) async fn delete_bucket(
    cx: ServiceContext<'_>,
    req: S3Request<DeleteBucketInput>,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    cx.front
        .buckets
        .catalog()
        .delete_bucket(&cx.principal, &req.input.bucket)
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(DeleteBucketOutput {}))
}

pub(super) async fn get_bucket_location(
    cx: RequestContext<'_>,
    _req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    // S3 reports us-east-1 as an empty LocationConstraint.
    let location_constraint =
        (cx.front.region != US_EAST_1).then(|| BucketLocationConstraint::from(cx.front.region.clone()));
    Ok(S3Response::new(GetBucketLocationOutput { location_constraint }))
}

pub(super) async fn get_bucket_versioning(
    cx: RequestContext<'_>,
    _req: S3Request<GetBucketVersioningInput>,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    let bucket = &cx.bucket;
    // A bucket that never had versioning enabled has no Status at all.
    Ok(S3Response::new(GetBucketVersioningOutput {
        status: bucket
            .versioning()
            .map(|state| BucketVersioningStatus::from(state.as_str().to_owned())),
        ..Default::default()
    }))
}

pub(super) async fn put_bucket_versioning(
    cx: RequestContext<'_>,
    req: S3Request<PutBucketVersioningInput>,
) -> S3Result<S3Response<PutBucketVersioningOutput>> {
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
    let bucket = &cx.bucket;
    bucket.set_versioning(state).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutBucketVersioningOutput::default()))
}

/// A CreateBucket body: the bucket can only be in this gateway's region, and directory
/// buckets (S3 Express) do not exist here.
fn check_bucket_configuration(config: &CreateBucketConfiguration, region: &str) -> S3Result<()> {
    if config.bucket.is_some() || config.location.is_some() {
        return Err(s3s::s3_error!(NotImplemented, "Directory buckets are not implemented"));
    }
    match config.location_constraint.as_ref().map(|c| c.as_str()) {
        Some(constraint) if !constraint.is_empty() && constraint != region => Err(S3Error::with_message(
            s3s::S3ErrorCode::IllegalLocationConstraintException,
            format!(
                "The {constraint} location constraint is incompatible for the region specific endpoint this request was sent to."
            ),
        )),
        _ => Ok(()),
    }
}
