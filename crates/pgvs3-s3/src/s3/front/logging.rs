//! Server access logging on the wire: Put/GetBucketLogging. The records themselves are written
//! by `s3::access_log`.
//!
//! What PutBucketLogging checks (docs/s3-compatibility.md): the requester may put the source
//! bucket's logging (`s3:PutBucketLogging`: its owner, or a policy grant); the target bucket
//! exists (else 400 InvalidTargetBucketForLogging), is not a cache bucket, and has the source
//! bucket's owner (S3's "same account" rule: pgvs3 has no logging service principal to grant,
//! so the owner's own bucket is the permission, checked again at each delivery). The target may
//! be the source itself: log objects are written by the deliverer, never through the S3 front,
//! so they are never logged. TargetGrants need a target whose ACLs are on (not
//! BucketOwnerEnforced) and become each log object's ACL.

use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::acl::{grant_of, owner_id, refused, wire_grants};
use super::context::RequestContext;
use super::wire::fail;
use crate::access::acl::Acl;
use crate::store::{LoggingConfig, PartitionDate, StoreError};

/// S3's limit on an object key, which the prefix starts.
const MAX_PREFIX_BYTES: usize = 512;

fn invalid_target(message: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidTargetBucketForLogging, message.to_owned())
}

fn malformed_xml() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::MalformedXML,
        "The XML you provided was not well-formed or did not validate against our published schema.",
    )
}

pub(super) async fn put_bucket_logging(
    cx: RequestContext<'_>,
    req: S3Request<PutBucketLoggingInput>,
) -> S3Result<S3Response<PutBucketLoggingOutput>> {
    let bucket = &cx.bucket;
    let Some(enabled) = &req.input.bucket_logging_status.logging_enabled else {
        bucket.set_logging(None).await.map_err(|e| fail(&req, e))?;
        return Ok(S3Response::new(PutBucketLoggingOutput::default()));
    };
    if enabled.target_prefix.len() > MAX_PREFIX_BYTES {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            format!("The target prefix is longer than {MAX_PREFIX_BYTES} bytes"),
        ));
    }
    let catalog = cx.front.buckets.catalog();
    let target = match catalog.bucket(&enabled.target_bucket).await {
        Ok(target) => target,
        Err(StoreError::NoSuchBucket) => return Err(invalid_target("The target bucket for logging does not exist")),
        Err(err) => return Err(fail(&req, err)),
    };
    if target.origin.is_some() {
        return Err(invalid_target(
            "The target bucket for logging is a cache bucket, whose objects are its origin's",
        ));
    }
    if target.owner.as_deref() != bucket.owner() {
        return Err(invalid_target(
            "The owner for the bucket to be logged and the target bucket must be the same.",
        ));
    }
    let grants = enabled
        .target_grants
        .iter()
        .flatten()
        .map(|grant| grant_of(grant.grantee.as_ref(), grant.permission.as_ref().map(|p| p.as_str())))
        .collect::<Result<Vec<_>, _>>()
        .map_err(refused)?;
    if !grants.is_empty() && !target.access.acls_enabled() {
        return Err(S3Error::with_message(
            S3ErrorCode::AccessControlListNotSupported,
            "The target bucket does not allow ACLs: target grants need its ACLs on (not BucketOwnerEnforced)",
        ));
    }
    let format = enabled.target_object_key_format.as_ref();
    let partitioned = match format.and_then(|format| format.partitioned_prefix.as_ref()) {
        None => None,
        Some(prefix) => match prefix.partition_date_source.as_ref().map(|source| source.as_str()) {
            Some(PartitionDateSource::EVENT_TIME) => Some(PartitionDate::EventTime),
            Some(PartitionDateSource::DELIVERY_TIME) | None => Some(PartitionDate::DeliveryTime),
            Some(_) => return Err(malformed_xml()),
        },
    };
    let simple_named = format.is_some_and(|format| format.simple_prefix.is_some());
    if partitioned.is_some() && simple_named {
        return Err(malformed_xml());
    }
    let config = LoggingConfig {
        target: target.name.clone(),
        prefix: enabled.target_prefix.clone(),
        grants,
        partitioned,
        simple_named,
    };
    bucket.set_logging(Some(&config)).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutBucketLoggingOutput::default()))
}

pub(super) async fn get_bucket_logging(
    cx: RequestContext<'_>,
    _req: S3Request<GetBucketLoggingInput>,
) -> S3Result<S3Response<GetBucketLoggingOutput>> {
    let Some(config) = cx.bucket.logging() else {
        return Ok(S3Response::new(GetBucketLoggingOutput::default()));
    };
    let owner = owner_id(&cx.bucket, cx.front.buckets.catalog());
    let target_grants = (!config.grants.is_empty()).then(|| {
        let acl = Acl {
            owner: None,
            grants: config.grants.clone(),
        };
        wire_grants(Some(&acl), &owner)
            .into_iter()
            .map(|grant| TargetGrant {
                grantee: grant.grantee,
                permission: grant
                    .permission
                    .map(|permission| BucketLogsPermission::from(permission.as_str().to_owned())),
            })
            .collect()
    });
    let target_object_key_format = match config.partitioned {
        Some(date) => Some(TargetObjectKeyFormat {
            partitioned_prefix: Some(PartitionedPrefix {
                partition_date_source: Some(PartitionDateSource::from_static(match date {
                    PartitionDate::EventTime => PartitionDateSource::EVENT_TIME,
                    PartitionDate::DeliveryTime => PartitionDateSource::DELIVERY_TIME,
                })),
            }),
            simple_prefix: None,
        }),
        None => config.simple_named.then(|| TargetObjectKeyFormat {
            partitioned_prefix: None,
            simple_prefix: Some(SimplePrefix::default()),
        }),
    };
    Ok(S3Response::new(GetBucketLoggingOutput {
        logging_enabled: Some(LoggingEnabled {
            target_bucket: config.target.clone(),
            target_grants,
            target_object_key_format,
            target_prefix: config.prefix.clone(),
        }),
    }))
}
