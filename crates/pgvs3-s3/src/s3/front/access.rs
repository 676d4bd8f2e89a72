//! The bucket access operations: Put/Get/DeleteBucketCors, Put/Get/DeleteBucketPolicy,
//! GetBucketPolicyStatus and Put/Get/DeletePublicAccessBlock. `S3Front`'s trait methods call these.

use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::context::RequestContext;
use super::wire::fail;
use crate::access::PublicAccessBlock;
use crate::access::cors::{CorsRefused, CorsRule, CorsRules};
use crate::access::policy::{BucketPolicy, PolicyRefused};
use crate::store::StoreError;

pub(super) async fn put_cors(
    cx: RequestContext<'_>,
    req: S3Request<PutBucketCorsInput>,
) -> S3Result<S3Response<PutBucketCorsOutput>> {
    let rules = req
        .input
        .cors_configuration
        .cors_rules
        .iter()
        .map(|rule| CorsRule {
            id: rule.id.clone(),
            allowed_origins: rule.allowed_origins.clone(),
            allowed_methods: rule.allowed_methods.clone(),
            allowed_headers: rule.allowed_headers.clone().unwrap_or_default(),
            expose_headers: rule.expose_headers.clone().unwrap_or_default(),
            max_age_seconds: rule.max_age_seconds,
        })
        .collect();
    let rules = CorsRules::new(rules).map_err(cors_refused)?;
    let bucket = &cx.bucket;
    bucket.set_cors(Some(&rules)).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutBucketCorsOutput::default()))
}

pub(super) async fn get_cors(
    cx: RequestContext<'_>,
    _req: S3Request<GetBucketCorsInput>,
) -> S3Result<S3Response<GetBucketCorsOutput>> {
    let bucket = &cx.bucket;
    let Some(rules) = &bucket.access().cors else {
        return Err(S3Error::with_message(
            S3ErrorCode::NoSuchCORSConfiguration,
            "The CORS configuration does not exist",
        ));
    };
    let cors_rules = rules
        .rules
        .iter()
        .map(|rule| CORSRule {
            id: rule.id.clone(),
            allowed_origins: rule.allowed_origins.clone(),
            allowed_methods: rule.allowed_methods.clone(),
            allowed_headers: (!rule.allowed_headers.is_empty()).then(|| rule.allowed_headers.clone()),
            expose_headers: (!rule.expose_headers.is_empty()).then(|| rule.expose_headers.clone()),
            max_age_seconds: rule.max_age_seconds,
        })
        .collect();
    Ok(S3Response::new(GetBucketCorsOutput {
        cors_rules: Some(cors_rules),
    }))
}

pub(super) async fn delete_cors(
    cx: RequestContext<'_>,
    req: S3Request<DeleteBucketCorsInput>,
) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
    let bucket = &cx.bucket;
    bucket.set_cors(None).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(DeleteBucketCorsOutput::default()))
}

pub(super) async fn put_policy(
    cx: RequestContext<'_>,
    req: S3Request<PutBucketPolicyInput>,
) -> S3Result<S3Response<PutBucketPolicyOutput>> {
    if req.input.confirm_remove_self_bucket_access == Some(true) {
        return Err(s3s::s3_error!(
            NotImplemented,
            "x-amz-confirm-remove-self-bucket-access is not supported: the bucket owner always keeps access to its policy"
        ));
    }
    let bucket = &cx.bucket;
    let catalog = cx.front.buckets.catalog();
    let parse = || BucketPolicy::parse(&req.input.policy, bucket.name(), &|key| catalog.has_access_key(key));
    if let Err(PolicyRefused::Malformed(_)) = parse() {
        // A key made since this gateway's catalog last loaded would look unknown: the
        // cache is brought up to date once before the principal is called invalid.
        catalog
            .reload_now()
            .await
            .map_err(|err| fail(&req, StoreError::Unavailable(err.to_string())))?;
    }
    let policy = parse().map_err(policy_refused)?;
    let blocked = bucket
        .access()
        .public_access_block
        .is_some_and(|b| b.block_public_policy);
    if blocked && policy.is_public() {
        // S3's answer when BlockPublicPolicy meets a public policy.
        return Err(s3s::s3_error!(AccessDenied, "Access Denied"));
    }
    bucket
        .set_policy(Some(&req.input.policy))
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutBucketPolicyOutput::default()))
}

pub(super) async fn get_policy(
    cx: RequestContext<'_>,
    _req: S3Request<GetBucketPolicyInput>,
) -> S3Result<S3Response<GetBucketPolicyOutput>> {
    let bucket = &cx.bucket;
    let policy = bucket.access().policy.as_ref().ok_or_else(no_policy)?;
    Ok(S3Response::new(GetBucketPolicyOutput {
        policy: Some(policy.text.clone()),
    }))
}

pub(super) async fn delete_policy(
    cx: RequestContext<'_>,
    req: S3Request<DeleteBucketPolicyInput>,
) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
    let bucket = &cx.bucket;
    bucket.set_policy(None).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(DeleteBucketPolicyOutput::default()))
}

pub(super) async fn policy_status(
    cx: RequestContext<'_>,
    _req: S3Request<GetBucketPolicyStatusInput>,
) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
    let bucket = &cx.bucket;
    let policy = bucket.access().policy.as_ref().ok_or_else(no_policy)?;
    Ok(S3Response::new(GetBucketPolicyStatusOutput {
        policy_status: Some(PolicyStatus {
            is_public: Some(policy.rules.is_public()),
        }),
    }))
}

pub(super) async fn put_access_block(
    cx: RequestContext<'_>,
    req: S3Request<PutPublicAccessBlockInput>,
) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
    let config = &req.input.public_access_block_configuration;
    let block = PublicAccessBlock {
        block_public_acls: config.block_public_acls.unwrap_or(false),
        ignore_public_acls: config.ignore_public_acls.unwrap_or(false),
        block_public_policy: config.block_public_policy.unwrap_or(false),
        restrict_public_buckets: config.restrict_public_buckets.unwrap_or(false),
    };
    let bucket = &cx.bucket;
    bucket
        .set_public_access_block(Some(&block))
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutPublicAccessBlockOutput::default()))
}

pub(super) async fn get_access_block(
    cx: RequestContext<'_>,
    _req: S3Request<GetPublicAccessBlockInput>,
) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
    let bucket = &cx.bucket;
    let Some(block) = bucket.access().public_access_block else {
        let mut err = S3Error::with_message(
            S3ErrorCode::Custom("NoSuchPublicAccessBlockConfiguration".into()),
            "The public access block configuration was not found",
        );
        err.set_status_code(http::StatusCode::NOT_FOUND);
        return Err(err);
    };
    Ok(S3Response::new(GetPublicAccessBlockOutput {
        public_access_block_configuration: Some(PublicAccessBlockConfiguration {
            block_public_acls: Some(block.block_public_acls),
            ignore_public_acls: Some(block.ignore_public_acls),
            block_public_policy: Some(block.block_public_policy),
            restrict_public_buckets: Some(block.restrict_public_buckets),
        }),
    }))
}

pub(super) async fn delete_access_block(
    cx: RequestContext<'_>,
    req: S3Request<DeletePublicAccessBlockInput>,
) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
    let bucket = &cx.bucket;
    bucket.set_public_access_block(None).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(DeletePublicAccessBlockOutput::default()))
}

fn no_policy() -> S3Error {
    S3Error::with_message(S3ErrorCode::NoSuchBucketPolicy, "The bucket policy does not exist")
}

fn cors_refused(refused: CorsRefused) -> S3Error {
    let code = S3ErrorCode::from_bytes(refused.code.as_bytes()).unwrap_or(S3ErrorCode::InvalidRequest);
    S3Error::with_message(code, refused.message)
}

fn policy_refused(refused: PolicyRefused) -> S3Error {
    match refused {
        PolicyRefused::Malformed(message) => S3Error::with_message(S3ErrorCode::MalformedPolicy, message),
        PolicyRefused::NotImplemented(message) => S3Error::with_message(S3ErrorCode::NotImplemented, message),
    }
}
