//! One request's context, built once before its operation's handler runs (Garage's `ReqCtx`):
//! who asks (the key the access check looked up), the bucket (resolved in the access check and
//! opened here as the operations table says), and the access check's decision (its
//! `PolicyGrant`). The admission slot was taken in the access check too and rides on the
//! response body (`s3::AdmittedBody`). Handlers get the context and never look any of it up.

use std::sync::Arc;

use s3s::{S3Request, S3Result};

use super::operations::{self, Opens};
use super::{S3Front, checks, fail};
use crate::bucket::BucketHandle;
use crate::s3::authorize::PolicyGrant;
use crate::store::{AccessKey, BucketInfo, Principal};

/// What the access check (`auth::SignedOnly`) looked up, handed to the front in the request's
/// extensions so that neither is looked up again.
#[derive(Clone)]
pub struct Resolved {
    /// The signing key; `None`: unsigned.
    pub key: Option<Arc<AccessKey>>,
    /// The request's bucket; `None`: it names none, or one that does not exist.
    pub bucket: Option<Arc<BucketInfo>>,
}

/// The context of an operation on a bucket (or its objects).
pub struct RequestContext<'a> {
    pub front: &'a S3Front,
    pub principal: Principal,
    /// The request's bucket, opened for the access its operation needs.
    pub bucket: BucketHandle<'a>,
}

/// The context of an operation that opens no bucket (ListBuckets, CreateBucket, DeleteBucket).
pub struct ServiceContext<'a> {
    pub front: &'a S3Front,
    pub principal: Principal,
}

impl<'a> RequestContext<'a> {
    /// A second bucket the request reads (a copy's source), opened as the request's own is.
    pub async fn open_source<T>(&self, req: &S3Request<T>, name: &str) -> S3Result<BucketHandle<'a>> {
        self.front
            .open(req, &self.principal, name, crate::store::Access::Read)
            .await
    }
}

impl S3Front {
    /// The context of an operation on `bucket`; `input` names the operation's input type.
    pub(super) async fn context<T>(
        &self,
        req: &S3Request<T>,
        input: &str,
        bucket: &str,
    ) -> S3Result<RequestContext<'_>> {
        let principal = principal(req)?;
        let access = match operations::of_input(input).map(|op| op.opens) {
            Some(Opens::Bucket(access)) => access,
            _ => return Err(s3s::s3_error!(InternalError, "{input} opens no bucket")),
        };
        let resolved = req
            .extensions
            .get::<Resolved>()
            .and_then(|resolved| resolved.bucket.as_ref())
            .filter(|info| info.name == bucket);
        let bucket = match resolved {
            Some(info) => self
                .buckets
                .open_resolved(&principal, Arc::clone(info), access, granted(req, bucket))
                .map_err(|e| fail(req, e))?,
            None => self.open(req, &principal, bucket, access).await?,
        };
        Ok(RequestContext {
            front: self,
            principal,
            bucket,
        })
    }

    /// The context of an operation that opens no bucket.
    pub(super) fn service_context<T>(&self, req: &S3Request<T>) -> S3Result<ServiceContext<'_>> {
        Ok(ServiceContext {
            front: self,
            principal: principal(req)?,
        })
    }
}

/// Whether the access check's grant lets the request use `bucket` beyond the owner check.
pub(super) fn granted<T>(req: &S3Request<T>, bucket: &str) -> bool {
    req.extensions
        .get::<PolicyGrant>()
        .is_some_and(|grant| grant.covers(bucket))
}

/// Who asks. Every operation starts here: the request's text is checked before any work is done.
fn principal<T>(req: &S3Request<T>) -> S3Result<Principal> {
    checks::refuse_nul(&req.uri, &req.headers)?;
    let key = req
        .extensions
        .get::<Resolved>()
        .and_then(|resolved| resolved.key.as_ref());
    match (&req.credentials, key) {
        (Some(_), Some(key)) => Ok(key.principal()),
        (Some(_), None) => Err(s3s::s3_error!(InvalidAccessKeyId)),
        // Unsigned: only where a bucket policy let it through the access check.
        (None, _) => match req.extensions.get::<PolicyGrant>() {
            Some(grant) if grant.anonymous() => Ok(Principal {
                access_key: String::new(),
                is_root: false,
                read_only: false,
            }),
            _ => Err(s3s::s3_error!(AccessDenied)),
        },
    }
}
