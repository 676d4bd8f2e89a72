//! The one table of S3 operations: per operation, the IAM action it needs (AWS's "required
//! permissions for S3 API operations"), the resource it acts on, the admission class it is
//! admitted in, the ACL permission that grants it, and what the front opens for it. The access
//! check (`authorize`, `auth::SignedOnly`) and the front's `RequestContext` both read it, so an
//! operation's needs are said once.

use crate::access::acl::Permission;
use crate::store::Access;

/// What an operation acts on, as IAM names its resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// No bucket (ListBuckets).
    Service,
    Bucket,
    Object,
}

/// The admission class an operation is admitted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// No body worth a class of its own: the small requests' slots.
    Requests,
    /// It carries a body: an upload's slots when the body is declared large (or not declared),
    /// so large bodies streaming in cannot take the slots small requests need.
    BySize,
}

/// What the front resolves before the operation's handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opens {
    /// Nothing: the operation names no bucket, or makes or removes it itself (the catalog
    /// checks its owner there).
    Nothing,
    /// The bucket, which must exist and which the requester must be allowed to use this way.
    Bucket(Access),
}

/// Where an operation's ACL permission is granted: on the bucket or on the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclTarget {
    Bucket,
    Object,
}

#[derive(Debug, Clone, Copy)]
pub struct Operation {
    /// s3s's name of the operation (`GetObject`).
    pub name: &'static str,
    /// The IAM action; `None`: no policy grants it (the owner check alone decides).
    pub action: Option<&'static str>,
    /// The action when the request names a version (`?versionId`), where AWS's Service
    /// Authorization Reference gives it one of its own.
    pub version_action: Option<&'static str>,
    pub resource: Resource,
    pub class: Class,
    pub opens: Opens,
    /// The ACL permission that allows the operation, as S3's ACL overview maps them.
    pub acl: Option<(AclTarget, Permission)>,
    /// It writes an object, whose ACL (`x-amz-acl`, `x-amz-grant-*`) needs `s3:PutObjectAcl`
    /// too, as on AWS.
    pub sets_object_acl: bool,
    /// It may remove or weaken what a GOVERNANCE retention protects when asked to
    /// (`x-amz-bypass-governance-retention: true`), which needs `s3:BypassGovernanceRetention`
    /// too, as on AWS.
    pub bypasses_governance: bool,
    /// The front reads (or, for a tag write, locks) the object's row before it answers anything
    /// of the object, and decides there what only the row can decide (its ACL, its tags).
    pub decided_on_row: bool,
}

impl Operation {
    const fn new(name: &'static str, resource: Resource, opens: Opens) -> Operation {
        Operation {
            name,
            action: None,
            version_action: None,
            resource,
            class: Class::Requests,
            opens,
            acl: None,
            sets_object_acl: false,
            bypasses_governance: false,
            decided_on_row: false,
        }
    }

    const fn action(mut self, action: &'static str) -> Operation {
        self.action = Some(action);
        self
    }

    const fn versioned(mut self, action: &'static str) -> Operation {
        self.version_action = Some(action);
        self
    }

    const fn with_body(mut self) -> Operation {
        self.class = Class::BySize;
        self
    }

    const fn acl(mut self, target: AclTarget, permission: Permission) -> Operation {
        self.acl = Some((target, permission));
        self
    }

    const fn sets_object_acl(mut self) -> Operation {
        self.sets_object_acl = true;
        self
    }

    const fn bypasses_governance(mut self) -> Operation {
        self.bypasses_governance = true;
        self
    }

    const fn on_row(mut self) -> Operation {
        self.decided_on_row = true;
        self
    }

    /// The IAM action of a request; `versioned`: it names a version.
    pub fn action_of(&self, versioned: bool) -> Option<&'static str> {
        match versioned {
            true => self.version_action.or(self.action),
            false => self.action,
        }
    }
}

/// The operation s3s names `name`, if the front implements it.
pub fn operation(name: &str) -> Option<&'static Operation> {
    OPERATIONS.iter().find(|op| op.name == name)
}

/// The operation whose s3s input type is named `input` (`GetObjectInput`).
pub fn of_input(input: &str) -> Option<&'static Operation> {
    operation(input.strip_suffix("Input")?)
}

const READ: Opens = Opens::Bucket(Access::Read);
const WRITE: Opens = Opens::Bucket(Access::Write);

use AclTarget as On;
use Resource::{Bucket as B, Object as O, Service};

const OPERATIONS: &[Operation] = &[
    // The service and buckets as a whole.
    Operation::new("ListBuckets", Service, Opens::Nothing),
    Operation::new("CreateBucket", B, Opens::Nothing).with_body(),
    Operation::new("DeleteBucket", B, Opens::Nothing).action("s3:DeleteBucket"),
    Operation::new("HeadBucket", B, READ)
        .action("s3:ListBucket")
        .acl(On::Bucket, Permission::Read),
    Operation::new("GetBucketLocation", B, READ).action("s3:GetBucketLocation"),
    // Listings.
    Operation::new("ListObjects", B, READ)
        .action("s3:ListBucket")
        .acl(On::Bucket, Permission::Read),
    Operation::new("ListObjectsV2", B, READ)
        .action("s3:ListBucket")
        .acl(On::Bucket, Permission::Read),
    Operation::new("ListObjectVersions", B, READ)
        .action("s3:ListBucketVersions")
        .acl(On::Bucket, Permission::Read),
    // Object reads.
    Operation::new("GetObject", O, READ)
        .action("s3:GetObject")
        .versioned("s3:GetObjectVersion")
        .acl(On::Object, Permission::Read)
        .on_row(),
    Operation::new("HeadObject", O, READ)
        .action("s3:GetObject")
        .versioned("s3:GetObjectVersion")
        .acl(On::Object, Permission::Read)
        .on_row(),
    Operation::new("GetObjectAttributes", O, READ)
        .action("s3:GetObjectAttributes")
        .versioned("s3:GetObjectVersionAttributes")
        .on_row(),
    // Object writes.
    Operation::new("PutObject", O, WRITE)
        .action("s3:PutObject")
        .with_body()
        .acl(On::Bucket, Permission::Write)
        .sets_object_acl(),
    Operation::new("PostObject", O, WRITE)
        .action("s3:PutObject")
        .with_body(),
    // Deletes.
    Operation::new("DeleteObject", O, WRITE)
        .action("s3:DeleteObject")
        .versioned("s3:DeleteObjectVersion")
        .acl(On::Bucket, Permission::Write)
        .bypasses_governance(),
    Operation::new("DeleteObjects", B, WRITE)
        .action("s3:DeleteObject")
        .with_body()
        .acl(On::Bucket, Permission::Write)
        .bypasses_governance(),
    // Copies.
    Operation::new("CopyObject", O, WRITE)
        .action("s3:PutObject")
        .acl(On::Bucket, Permission::Write)
        .sets_object_acl(),
    Operation::new("UploadPartCopy", O, WRITE)
        .action("s3:PutObject")
        .acl(On::Bucket, Permission::Write),
    // Multipart uploads.
    Operation::new("CreateMultipartUpload", O, WRITE)
        .action("s3:PutObject")
        .acl(On::Bucket, Permission::Write)
        .sets_object_acl(),
    Operation::new("UploadPart", O, WRITE)
        .action("s3:PutObject")
        .with_body()
        .acl(On::Bucket, Permission::Write),
    Operation::new("CompleteMultipartUpload", O, WRITE)
        .action("s3:PutObject")
        .with_body()
        .acl(On::Bucket, Permission::Write),
    Operation::new("AbortMultipartUpload", O, WRITE)
        .action("s3:AbortMultipartUpload")
        .acl(On::Bucket, Permission::Write),
    Operation::new("ListParts", O, READ)
        .action("s3:ListMultipartUploadParts")
        .acl(On::Bucket, Permission::Read),
    Operation::new("ListMultipartUploads", B, READ)
        .action("s3:ListBucketMultipartUploads")
        .acl(On::Bucket, Permission::Read),
    // Tagging.
    Operation::new("GetObjectTagging", O, READ)
        .action("s3:GetObjectTagging")
        .versioned("s3:GetObjectVersionTagging")
        .on_row(),
    Operation::new("PutObjectTagging", O, WRITE)
        .action("s3:PutObjectTagging")
        .versioned("s3:PutObjectVersionTagging")
        .with_body()
        .on_row(),
    Operation::new("DeleteObjectTagging", O, WRITE)
        .action("s3:DeleteObjectTagging")
        .versioned("s3:DeleteObjectVersionTagging")
        .on_row(),
    Operation::new("GetBucketTagging", B, READ).action("s3:GetBucketTagging"),
    Operation::new("PutBucketTagging", B, WRITE)
        .action("s3:PutBucketTagging")
        .with_body(),
    Operation::new("DeleteBucketTagging", B, WRITE).action("s3:PutBucketTagging"),
    // ACLs and ownership.
    Operation::new("GetBucketAcl", B, READ)
        .action("s3:GetBucketAcl")
        .acl(On::Bucket, Permission::ReadAcp),
    Operation::new("PutBucketAcl", B, WRITE)
        .action("s3:PutBucketAcl")
        .with_body()
        .acl(On::Bucket, Permission::WriteAcp),
    Operation::new("GetObjectAcl", O, READ)
        .action("s3:GetObjectAcl")
        .versioned("s3:GetObjectVersionAcl")
        .acl(On::Object, Permission::ReadAcp)
        .on_row(),
    Operation::new("PutObjectAcl", O, WRITE)
        .action("s3:PutObjectAcl")
        .versioned("s3:PutObjectVersionAcl")
        .with_body()
        .acl(On::Object, Permission::WriteAcp)
        .on_row(),
    Operation::new("GetBucketOwnershipControls", B, READ).action("s3:GetBucketOwnershipControls"),
    Operation::new("PutBucketOwnershipControls", B, WRITE)
        .action("s3:PutBucketOwnershipControls")
        .with_body(),
    Operation::new("DeleteBucketOwnershipControls", B, WRITE).action("s3:PutBucketOwnershipControls"),
    // Versioning.
    Operation::new("GetBucketVersioning", B, READ).action("s3:GetBucketVersioning"),
    Operation::new("PutBucketVersioning", B, WRITE)
        .action("s3:PutBucketVersioning")
        .with_body(),
    // Object lock (a version's retention and legal hold use the object's actions).
    Operation::new("GetObjectLockConfiguration", B, READ).action("s3:GetBucketObjectLockConfiguration"),
    Operation::new("PutObjectLockConfiguration", B, WRITE)
        .action("s3:PutBucketObjectLockConfiguration")
        .with_body(),
    Operation::new("GetObjectRetention", O, READ).action("s3:GetObjectRetention"),
    Operation::new("PutObjectRetention", O, WRITE)
        .action("s3:PutObjectRetention")
        .with_body()
        .bypasses_governance(),
    Operation::new("GetObjectLegalHold", O, READ).action("s3:GetObjectLegalHold"),
    Operation::new("PutObjectLegalHold", O, WRITE)
        .action("s3:PutObjectLegalHold")
        .with_body(),
    // Bucket access: CORS, policy, public access block.
    Operation::new("GetBucketCors", B, READ).action("s3:GetBucketCORS"),
    Operation::new("PutBucketCors", B, WRITE)
        .action("s3:PutBucketCORS")
        .with_body(),
    Operation::new("DeleteBucketCors", B, WRITE).action("s3:PutBucketCORS"),
    Operation::new("GetBucketPolicy", B, READ).action("s3:GetBucketPolicy"),
    Operation::new("PutBucketPolicy", B, WRITE)
        .action("s3:PutBucketPolicy")
        .with_body(),
    Operation::new("DeleteBucketPolicy", B, WRITE).action("s3:DeleteBucketPolicy"),
    Operation::new("GetBucketPolicyStatus", B, READ).action("s3:GetBucketPolicyStatus"),
    Operation::new("GetPublicAccessBlock", B, READ).action("s3:GetBucketPublicAccessBlock"),
    Operation::new("PutPublicAccessBlock", B, WRITE)
        .action("s3:PutBucketPublicAccessBlock")
        .with_body(),
    Operation::new("DeletePublicAccessBlock", B, WRITE).action("s3:PutBucketPublicAccessBlock"),
    // Lifecycle, default encryption (granted by no policy), notifications (a rule a key a
    // policy lets configure them puts still sends the events into the owner's OJS tenant
    // alone: pgvs3.put_bucket_notifications, functions/events.sql).
    Operation::new("GetBucketLifecycleConfiguration", B, READ).action("s3:GetLifecycleConfiguration"),
    Operation::new("PutBucketLifecycleConfiguration", B, WRITE)
        .action("s3:PutLifecycleConfiguration")
        .with_body(),
    Operation::new("DeleteBucketLifecycle", B, WRITE).action("s3:PutLifecycleConfiguration"),
    Operation::new("GetBucketEncryption", B, READ),
    Operation::new("PutBucketEncryption", B, WRITE).with_body(),
    Operation::new("DeleteBucketEncryption", B, WRITE),
    Operation::new("GetBucketNotificationConfiguration", B, READ).action("s3:GetBucketNotification"),
    Operation::new("PutBucketNotificationConfiguration", B, WRITE)
        .action("s3:PutBucketNotification")
        .with_body(),
    // Server access logging.
    Operation::new("GetBucketLogging", B, READ).action("s3:GetBucketLogging"),
    Operation::new("PutBucketLogging", B, WRITE)
        .action("s3:PutBucketLogging")
        .with_body(),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_named_once() {
        for (i, op) in OPERATIONS.iter().enumerate() {
            assert!(
                OPERATIONS[i + 1..].iter().all(|other| other.name != op.name),
                "{} twice",
                op.name
            );
        }
    }

    #[test]
    fn inputs_name_their_operation() {
        assert_eq!(of_input("GetObjectInput").map(|op| op.name), Some("GetObject"));
        assert!(of_input("GetObject").is_none());
        assert!(of_input("GetBucketWebsiteInput").is_none());
    }
}
