//! The S3 operations: s3s's trait, each operation delegated to its family's handler (as
//! Garage's `api/s3`) with the request's context built once (`context::RequestContext`) as the
//! operations table (`operations`) says.

#[macro_use]
mod wire;

mod access;
mod acl;
mod bucket;
mod checks;
mod context;
mod copy;
mod delete;
mod encryption;
mod lifecycle;
mod list;
mod lock;
mod logging;
mod multipart;
mod notifications;
mod object_read;
mod object_write;
pub(super) mod operations;
mod post;
mod tagging;

use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result};

use crate::bucket::{BucketHandle, Buckets};
use crate::store::{Access, Principal};
pub use context::Resolved;
use wire::fail;

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

    /// A bucket the request names, which `principal` must be allowed to use as `access` says
    /// (or the access check's grant allowed): the request's own when the access check did not
    /// resolve it, a copy's source.
    async fn open<T>(
        &self,
        req: &S3Request<T>,
        principal: &Principal,
        bucket: &str,
        access: Access,
    ) -> S3Result<BucketHandle<'_>> {
        self.buckets
            .open_granted(principal, bucket, access, context::granted(req, bucket))
            .await
            .map_err(|e| fail(req, e))
    }
}

/// s3s's trait: each operation gets its context (`service` ones open no bucket, the others the
/// bucket their input names) and goes to its family's handler.
macro_rules! operations {
    (
        service: [$($s_method:ident($s_input:ident) -> $s_output:ident => $s_handler:path,)*]
        bucket: [$($method:ident($input:ident) -> $output:ident => $handler:path,)*]
    ) => {
        #[async_trait::async_trait]
        impl S3 for S3Front {
            $(
                async fn $s_method(&self, req: S3Request<$s_input>) -> S3Result<S3Response<$s_output>> {
                    let cx = self.service_context(&req)?;
                    $s_handler(cx, req).await
                }
            )*
            $(
                async fn $method(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    let cx = self.context(&req, stringify!($input), &req.input.bucket).await?;
                    $handler(cx, req).await
                }
            )*
        }
    };
}

operations! {
    service: [
        list_buckets(ListBucketsInput) -> ListBucketsOutput => bucket::list_buckets,
        create_bucket(CreateBucketInput) -> CreateBucketOutput => bucket::create_bucket,
        delete_bucket(DeleteBucketInput) -> DeleteBucketOutput => bucket::delete_bucket,
    ]
    bucket: [
        head_bucket(HeadBucketInput) -> HeadBucketOutput => bucket::head_bucket,
        get_bucket_location(GetBucketLocationInput) -> GetBucketLocationOutput => bucket::get_bucket_location,
        get_bucket_versioning(GetBucketVersioningInput) -> GetBucketVersioningOutput => bucket::get_bucket_versioning,
        put_bucket_versioning(PutBucketVersioningInput) -> PutBucketVersioningOutput => bucket::put_bucket_versioning,

        get_object(GetObjectInput) -> GetObjectOutput => object_read::get_object,
        head_object(HeadObjectInput) -> HeadObjectOutput => object_read::head_object,
        get_object_attributes(GetObjectAttributesInput) -> GetObjectAttributesOutput => object_read::get_object_attributes,

        put_object(PutObjectInput) -> PutObjectOutput => object_write::put_object,

        delete_object(DeleteObjectInput) -> DeleteObjectOutput => delete::delete_object,
        delete_objects(DeleteObjectsInput) -> DeleteObjectsOutput => delete::delete_objects,

        list_objects(ListObjectsInput) -> ListObjectsOutput => list::list_objects,
        list_objects_v2(ListObjectsV2Input) -> ListObjectsV2Output => list::list_objects_v2,
        list_object_versions(ListObjectVersionsInput) -> ListObjectVersionsOutput => list::list_object_versions,

        copy_object(CopyObjectInput) -> CopyObjectOutput => copy::copy_object,
        upload_part_copy(UploadPartCopyInput) -> UploadPartCopyOutput => copy::upload_part_copy,

        create_multipart_upload(CreateMultipartUploadInput) -> CreateMultipartUploadOutput => multipart::create_multipart_upload,
        upload_part(UploadPartInput) -> UploadPartOutput => multipart::upload_part,
        complete_multipart_upload(CompleteMultipartUploadInput) -> CompleteMultipartUploadOutput => multipart::complete_multipart_upload,
        abort_multipart_upload(AbortMultipartUploadInput) -> AbortMultipartUploadOutput => multipart::abort_multipart_upload,
        list_parts(ListPartsInput) -> ListPartsOutput => multipart::list_parts,
        list_multipart_uploads(ListMultipartUploadsInput) -> ListMultipartUploadsOutput => multipart::list_multipart_uploads,

        get_object_tagging(GetObjectTaggingInput) -> GetObjectTaggingOutput => tagging::get_object_tagging,
        put_object_tagging(PutObjectTaggingInput) -> PutObjectTaggingOutput => tagging::put_object_tagging,
        delete_object_tagging(DeleteObjectTaggingInput) -> DeleteObjectTaggingOutput => tagging::delete_object_tagging,
        get_bucket_tagging(GetBucketTaggingInput) -> GetBucketTaggingOutput => tagging::get_bucket_tagging,
        put_bucket_tagging(PutBucketTaggingInput) -> PutBucketTaggingOutput => tagging::put_bucket_tagging,
        delete_bucket_tagging(DeleteBucketTaggingInput) -> DeleteBucketTaggingOutput => tagging::delete_bucket_tagging,

        get_bucket_acl(GetBucketAclInput) -> GetBucketAclOutput => acl::get_bucket_acl,
        put_bucket_acl(PutBucketAclInput) -> PutBucketAclOutput => acl::put_bucket_acl,
        get_object_acl(GetObjectAclInput) -> GetObjectAclOutput => acl::get_object_acl,
        put_object_acl(PutObjectAclInput) -> PutObjectAclOutput => acl::put_object_acl,
        get_bucket_ownership_controls(GetBucketOwnershipControlsInput) -> GetBucketOwnershipControlsOutput => acl::get_ownership,
        put_bucket_ownership_controls(PutBucketOwnershipControlsInput) -> PutBucketOwnershipControlsOutput => acl::put_ownership,
        delete_bucket_ownership_controls(DeleteBucketOwnershipControlsInput) -> DeleteBucketOwnershipControlsOutput => acl::delete_ownership,

        get_object_lock_configuration(GetObjectLockConfigurationInput) -> GetObjectLockConfigurationOutput => lock::get_object_lock_configuration,
        put_object_lock_configuration(PutObjectLockConfigurationInput) -> PutObjectLockConfigurationOutput => lock::put_object_lock_configuration,
        get_object_retention(GetObjectRetentionInput) -> GetObjectRetentionOutput => lock::get_object_retention,
        put_object_retention(PutObjectRetentionInput) -> PutObjectRetentionOutput => lock::put_object_retention,
        get_object_legal_hold(GetObjectLegalHoldInput) -> GetObjectLegalHoldOutput => lock::get_object_legal_hold,
        put_object_legal_hold(PutObjectLegalHoldInput) -> PutObjectLegalHoldOutput => lock::put_object_legal_hold,

        get_bucket_cors(GetBucketCorsInput) -> GetBucketCorsOutput => access::get_cors,
        put_bucket_cors(PutBucketCorsInput) -> PutBucketCorsOutput => access::put_cors,
        delete_bucket_cors(DeleteBucketCorsInput) -> DeleteBucketCorsOutput => access::delete_cors,
        get_bucket_policy(GetBucketPolicyInput) -> GetBucketPolicyOutput => access::get_policy,
        put_bucket_policy(PutBucketPolicyInput) -> PutBucketPolicyOutput => access::put_policy,
        delete_bucket_policy(DeleteBucketPolicyInput) -> DeleteBucketPolicyOutput => access::delete_policy,
        get_bucket_policy_status(GetBucketPolicyStatusInput) -> GetBucketPolicyStatusOutput => access::policy_status,
        get_public_access_block(GetPublicAccessBlockInput) -> GetPublicAccessBlockOutput => access::get_access_block,
        put_public_access_block(PutPublicAccessBlockInput) -> PutPublicAccessBlockOutput => access::put_access_block,
        delete_public_access_block(DeletePublicAccessBlockInput) -> DeletePublicAccessBlockOutput => access::delete_access_block,

        get_bucket_lifecycle_configuration(GetBucketLifecycleConfigurationInput) -> GetBucketLifecycleConfigurationOutput => lifecycle::get_bucket_lifecycle_configuration,
        put_bucket_lifecycle_configuration(PutBucketLifecycleConfigurationInput) -> PutBucketLifecycleConfigurationOutput => lifecycle::put_bucket_lifecycle_configuration,
        delete_bucket_lifecycle(DeleteBucketLifecycleInput) -> DeleteBucketLifecycleOutput => lifecycle::delete_bucket_lifecycle,
        get_bucket_encryption(GetBucketEncryptionInput) -> GetBucketEncryptionOutput => encryption::get_bucket_encryption,
        put_bucket_encryption(PutBucketEncryptionInput) -> PutBucketEncryptionOutput => encryption::put_bucket_encryption,
        delete_bucket_encryption(DeleteBucketEncryptionInput) -> DeleteBucketEncryptionOutput => encryption::delete_bucket_encryption,
        get_bucket_notification_configuration(GetBucketNotificationConfigurationInput) -> GetBucketNotificationConfigurationOutput => notifications::get_bucket_notification_configuration,
        put_bucket_notification_configuration(PutBucketNotificationConfigurationInput) -> PutBucketNotificationConfigurationOutput => notifications::put_bucket_notification_configuration,
        get_bucket_logging(GetBucketLoggingInput) -> GetBucketLoggingOutput => logging::get_bucket_logging,
        put_bucket_logging(PutBucketLoggingInput) -> PutBucketLoggingOutput => logging::put_bucket_logging,
    ]
}
