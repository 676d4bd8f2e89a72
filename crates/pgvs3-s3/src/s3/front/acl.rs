//! ACLs and ownership controls on the wire: Put/Get/DeleteBucketOwnershipControls,
//! Put/GetBucketAcl, Put/GetObjectAcl, and the ACL a new bucket or object gets from its
//! request's `x-amz-acl` / `x-amz-grant-*` headers. `S3Front`'s trait methods call these; the
//! ACLs themselves are `access/acl.rs`, their evaluation `s3/authorize.rs`.

use http::HeaderMap;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::context::RequestContext;
use super::wire::{fail, missing, row_allows};
use crate::access::acl::{self, Acl, AclRefused, Canned, Ownership, Requested};
use crate::bucket::BucketHandle;
use crate::store::{self, Catalog, NewBucket, Principal};

pub(super) async fn put_ownership(
    cx: RequestContext<'_>,
    req: S3Request<PutBucketOwnershipControlsInput>,
) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
    let rules = &req.input.ownership_controls.rules;
    let malformed_xml = || {
        s3s::s3_error!(
            MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema."
        )
    };
    let [rule] = rules.as_slice() else {
        return Err(malformed_xml());
    };
    let ownership = Ownership::parse(rule.object_ownership.as_str()).ok_or_else(malformed_xml)?;
    let bucket = &cx.bucket;
    let owner = owner_id(bucket, cx.front.buckets.catalog());
    if ownership == Ownership::BucketOwnerEnforced
        && bucket
            .access()
            .acl
            .as_ref()
            .is_some_and(|acl| !acl.is_owner_only(&owner))
    {
        return Err(bucket_acl_with_enforced());
    }
    bucket.set_ownership(Some(ownership)).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutBucketOwnershipControlsOutput::default()))
}

pub(super) async fn get_ownership(
    cx: RequestContext<'_>,
    _req: S3Request<GetBucketOwnershipControlsInput>,
) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
    let bucket = &cx.bucket;
    let Some(ownership) = bucket.access().ownership else {
        return Err(S3Error::with_message(
            S3ErrorCode::OwnershipControlsNotFoundError,
            "The bucket ownership controls were not found",
        ));
    };
    Ok(S3Response::new(GetBucketOwnershipControlsOutput {
        ownership_controls: Some(OwnershipControls {
            rules: vec![OwnershipControlsRule {
                object_ownership: ObjectOwnership::from(ownership.as_str().to_owned()),
            }],
        }),
    }))
}

pub(super) async fn delete_ownership(
    cx: RequestContext<'_>,
    req: S3Request<DeleteBucketOwnershipControlsInput>,
) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
    let bucket = &cx.bucket;
    bucket.set_ownership(None).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(DeleteBucketOwnershipControlsOutput::default()))
}

pub(super) async fn get_bucket_acl(
    cx: RequestContext<'_>,
    _req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    let bucket = &cx.bucket;
    let owner = owner_id(bucket, cx.front.buckets.catalog());
    let acl = bucket
        .access()
        .acls_enabled()
        .then_some(bucket.access().acl.as_ref())
        .flatten();
    Ok(S3Response::new(GetBucketAclOutput {
        grants: Some(wire_grants(acl, &owner)),
        owner: Some(wire_owner(&owner)),
    }))
}

pub(super) async fn put_bucket_acl(
    cx: RequestContext<'_>,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    let requested = requested_of_put(&req.headers, req.input.access_control_policy.as_ref())?;
    set_bucket_acl(&req, &cx.bucket, cx.front.buckets.catalog(), &requested, acls_disabled).await?;
    Ok(S3Response::new(PutBucketAclOutput::default()))
}

/// Replaces `bucket`'s ACL with `requested` (PutBucketAcl, a us-east-1 re-create). With ACLs
/// disabled only the owner's full control is taken (and nothing kept); anything else is
/// `disabled()`, the refusal of the operation asking.
async fn set_bucket_acl<T>(
    req: &S3Request<T>,
    bucket: &BucketHandle<'_>,
    catalog: &Catalog,
    requested: &Requested,
    disabled: fn() -> S3Error,
) -> S3Result<()> {
    let owner = owner_id(bucket, catalog);
    let acl = requested.resolve(&owner, &owner);
    if !bucket.access().acls_enabled() {
        return match acl.is_owner_only(&owner) {
            true => Ok(()),
            false => Err(disabled()),
        };
    }
    check_grantees(requested, catalog).await?;
    if acl.is_public() && bucket.access().blocks_public_acls() {
        return Err(public_acl_blocked());
    }
    let stored = (!acl.is_private(&owner)).then_some(&acl);
    bucket.set_acl(stored).await.map_err(|e| fail(req, e))
}

pub(super) async fn get_object_acl(
    cx: RequestContext<'_>,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let bucket = &cx.bucket;
    let acl = object_acl(&req, bucket, &req.input.key, &req.input.version_id).await?;
    // With ACLs disabled the bucket's owner owns every object and an ACL kept from before
    // (written under ObjectWriter, say) grants nothing: S3 answers the owner's full control.
    let acl = acl.filter(|_| bucket.access().acls_enabled());
    let bucket_owner = owner_id(bucket, cx.front.buckets.catalog());
    let owner = acl.as_ref().and_then(|acl| acl.owner.clone()).unwrap_or(bucket_owner);
    Ok(S3Response::new(GetObjectAclOutput {
        grants: Some(wire_grants(acl.as_ref(), &owner)),
        owner: Some(wire_owner(&owner)),
        ..Default::default()
    }))
}

pub(super) async fn put_object_acl(
    cx: RequestContext<'_>,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let catalog = cx.front.buckets.catalog();
    let requested = requested_of_put(&req.headers, req.input.access_control_policy.as_ref())?;
    let bucket = &cx.bucket;
    let input = &req.input;
    let current = object_acl(&req, bucket, &input.key, &input.version_id).await?;
    let bucket_owner = owner_id(bucket, catalog);
    if !bucket.access().acls_enabled() {
        return match requested
            .resolve(&bucket_owner, &bucket_owner)
            .is_owner_only(&bucket_owner)
        {
            true => Ok(S3Response::new(PutObjectAclOutput::default())),
            false => Err(acls_disabled()),
        };
    }
    check_grantees(&requested, catalog).await?;
    // An ACL never changes who owns the object.
    let owner = current
        .and_then(|acl| acl.owner)
        .unwrap_or_else(|| bucket_owner.clone());
    let acl = requested.resolve(&owner, &bucket_owner);
    if acl.is_public() && bucket.access().blocks_public_acls() {
        return Err(public_acl_blocked());
    }
    bucket
        .set_object_acl(
            &input.key,
            input.version_id.as_deref(),
            stored(acl, &bucket_owner).as_ref(),
        )
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}

/// The stored ACL of an object (its version, if named), once the request may see it: a
/// request only the object's ACL or tags can decide is decided here, on the row just read.
async fn object_acl<T>(
    req: &S3Request<T>,
    bucket: &BucketHandle<'_>,
    key: &str,
    version_id: &Option<String>,
) -> S3Result<Option<Acl>> {
    let options = store::ReadOptions {
        version_id: version_id.clone(),
        ..Default::default()
    };
    let head = bucket
        .head(key, &options)
        .await
        .map_err(|e| fail(req, missing(req, e)))?
        .head;
    row_allows(req, &head.meta)?;
    Ok(head.meta.acl)
}

/// The ACL a request's headers ask for (`x-amz-acl`, `x-amz-grant-*`), checked before any work.
pub(super) fn requested(headers: &HeaderMap) -> S3Result<Option<Requested>> {
    acl::from_headers(headers).map_err(refused)
}

/// Refuses grants to access keys that do not exist (S3's InvalidArgument "Invalid id"). A key
/// made since this gateway's catalog last loaded would look unknown, so the cache is brought
/// up to date once before a grantee is called invalid.
async fn check_grantees(requested: &Requested, catalog: &Catalog) -> S3Result<()> {
    let all_known = || requested.keys().all(|key| catalog.has_access_key(key));
    if all_known() {
        return Ok(());
    }
    catalog
        .reload_now()
        .await
        .map_err(|err| s3s::s3_error!(ServiceUnavailable, "{err}"))?;
    match all_known() {
        true => Ok(()),
        false => Err(s3s::s3_error!(InvalidArgument, "Invalid id")),
    }
}

/// What a CreateBucket asks for beyond its name: object lock, ownership (`x-amz-object-ownership`,
/// else `default_ownership` — `--s3-default-object-ownership` — else BucketOwnerEnforced) and the
/// ACL, which BucketOwnerEnforced takes only owner-only.
pub(super) async fn new_bucket(
    req: &S3Request<CreateBucketInput>,
    principal: &Principal,
    catalog: &Catalog,
    default_ownership: Option<Ownership>,
) -> S3Result<NewBucket> {
    let ownership = req
        .input
        .object_ownership
        .as_ref()
        .map(|text| {
            Ownership::parse(text.as_str())
                .ok_or_else(|| s3s::s3_error!(InvalidArgument, "Invalid x-amz-object-ownership header"))
        })
        .transpose()?
        .or(default_ownership);
    let owner = match principal.is_root {
        true => catalog.root_key_id().unwrap_or_else(|| principal.access_key.clone()),
        false => principal.access_key.clone(),
    };
    let requested = requested(&req.headers)?;
    let acl = requested.as_ref().map(|requested| requested.resolve(&owner, &owner));
    let acl = acl.filter(|acl| !acl.is_owner_only(&owner));
    if acl.is_some() && !Ownership::acls_enabled(Some(ownership.unwrap_or(Ownership::BucketOwnerEnforced))) {
        return Err(bucket_acl_with_enforced());
    }
    if let Some(requested) = &requested {
        check_grantees(requested, catalog).await?;
    }
    Ok(NewBucket {
        object_lock: req.input.object_lock_enabled_for_bucket.unwrap_or(false),
        ownership,
        acl,
    })
}

/// What a us-east-1 re-create of one's own bucket does to its ACL: S3 resets it to what the
/// request asks for, private if nothing.
pub(super) async fn reset_on_recreate(
    req: &S3Request<CreateBucketInput>,
    bucket: &BucketHandle<'_>,
    catalog: &Catalog,
) -> S3Result<()> {
    let requested = requested(&req.headers)?.unwrap_or(Requested::Canned(Canned::Private));
    set_bucket_acl(req, bucket, catalog, &requested, bucket_acl_with_enforced).await
}

/// The ACL a new object (PutObject, PostObject, CopyObject, CreateMultipartUpload) gets in
/// `bucket` from what its request asked for. Under BucketOwnerEnforced only owner-only ACLs
/// are taken, and none is kept; otherwise the writer owns what it writes (BucketOwnerPreferred:
/// unless it asks for `bucket-owner-full-control`), and anonymous writes and the root key's
/// belong to the bucket's owner.
pub(super) async fn new_object_acl(
    requested: Option<Requested>,
    bucket: &BucketHandle<'_>,
    principal: &Principal,
    catalog: &Catalog,
) -> S3Result<Option<Acl>> {
    let ownership = bucket.access().ownership;
    // The hot path: a write asking for no ACL to a bucket with ACLs disabled.
    if !Ownership::acls_enabled(ownership) && requested.is_none() {
        return Ok(None);
    }
    let bucket_owner = owner_id(bucket, catalog);
    if !Ownership::acls_enabled(ownership) {
        // S3 takes `bucket-owner-full-control` or no ACL on a PUT (its Object Ownership
        // troubleshooting page); the bucket owner's own `private` grants the same and is taken,
        // another key's `private` (or grants) is refused.
        let writer = match principal.is_root || principal.access_key.is_empty() {
            true => &bucket_owner,
            false => &principal.access_key,
        };
        let taken = requested.is_none_or(|r| {
            r == Requested::Canned(Canned::BucketOwnerFullControl)
                || r.resolve(writer, &bucket_owner).is_owner_only(&bucket_owner)
        });
        return match taken {
            true => Ok(None),
            false => Err(acls_disabled()),
        };
    }
    let requested = requested.unwrap_or(Requested::Canned(Canned::Private));
    check_grantees(&requested, catalog).await?;
    let hands_over = ownership == Some(Ownership::BucketOwnerPreferred)
        && requested == Requested::Canned(Canned::BucketOwnerFullControl);
    let owner = match principal.is_root || principal.access_key.is_empty() || hands_over {
        true => bucket_owner.clone(),
        false => principal.access_key.clone(),
    };
    let acl = requested.resolve(&owner, &bucket_owner);
    if acl.is_public() && bucket.access().blocks_public_acls() {
        return Err(public_acl_blocked());
    }
    Ok(stored(acl, &bucket_owner))
}

/// What is kept of an ACL: nothing for the default (private, owned by the bucket's owner).
fn stored(acl: Acl, bucket_owner: &str) -> Option<Acl> {
    (acl.owner.is_some() || !acl.is_private(bucket_owner)).then_some(acl)
}

/// The ACL a Put*Acl asks for: in its body, or in its headers, not both.
fn requested_of_put(headers: &HeaderMap, body: Option<&AccessControlPolicy>) -> S3Result<Requested> {
    let from_headers = requested(headers)?;
    match (from_headers, body) {
        (Some(_), Some(_)) => Err(s3s::s3_error!(
            UnexpectedContent,
            "This request does not support content when an ACL header is given"
        )),
        (Some(requested), None) => Ok(requested),
        (None, Some(policy)) => from_policy(policy).map_err(refused),
        (None, None) => Err(s3s::s3_error!(
            MissingSecurityHeader,
            "Your request was missing a required header: x-amz-acl, an x-amz-grant-* header or an AccessControlPolicy body"
        )),
    }
}

/// The grants of an `AccessControlPolicy` body.
fn from_policy(policy: &AccessControlPolicy) -> Result<Requested, AclRefused> {
    if policy.owner.is_none() {
        return Err(malformed("The AccessControlPolicy has no Owner"));
    }
    let listed = policy.grants.as_deref().unwrap_or_default();
    if listed.len() > acl::MAX_GRANTS {
        return Err(acl::too_many_grants());
    }
    let grants = listed
        .iter()
        .map(|grant| grant_of(grant.grantee.as_ref(), grant.permission.as_ref().map(|p| p.as_str())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Requested::Grants(grants))
}

/// One grant of an ACL (or of a logging configuration's TargetGrants) as stored.
pub(super) fn grant_of(grantee: Option<&Grantee>, permission: Option<&str>) -> Result<acl::Grant, AclRefused> {
    let grantee = grantee.ok_or_else(|| malformed("A grant has no Grantee"))?;
    let permission = permission
        .and_then(acl::Permission::parse)
        .ok_or_else(|| malformed("A grant has no valid Permission"))?;
    let grantee = match grantee.type_.as_str() {
        Type::CANONICAL_USER => {
            let id = grantee
                .id
                .as_deref()
                .ok_or_else(|| malformed("A CanonicalUser grantee has no ID"))?;
            Ok(acl::Grantee::Key(id.to_owned()))
        }
        Type::GROUP => {
            let uri = grantee
                .uri
                .as_deref()
                .ok_or_else(|| malformed("A Group grantee has no URI"))?;
            acl::grantee_group(uri)
        }
        Type::AMAZON_CUSTOMER_BY_EMAIL => Err(acl::by_email()),
        _ => return Err(malformed("Unknown grantee type")),
    }?;
    Ok(acl::Grant { grantee, permission })
}

/// The id answers name a bucket's owner by: its owning key, or the root key.
pub(super) fn owner_id(bucket: &BucketHandle<'_>, catalog: &Catalog) -> String {
    bucket
        .owner()
        .map(str::to_owned)
        .or_else(|| catalog.root_key_id())
        .unwrap_or_default()
}

/// A bucket's owner as listings name the owner of its objects. With ACLs disabled (the
/// default, BucketOwnerEnforced) the bucket owner owns every object, as in S3.
pub(super) fn bucket_owner(bucket: &BucketHandle<'_>, catalog: &Catalog) -> Owner {
    wire_owner(&owner_id(bucket, catalog))
}

fn wire_owner(id: &str) -> Owner {
    Owner {
        id: Some(id.to_owned()),
        display_name: Some(id.to_owned()),
    }
}

/// The grants of an answer; no stored ACL is the owner's full control.
pub(super) fn wire_grants(acl: Option<&Acl>, owner: &str) -> Vec<Grant> {
    let key_grantee = |id: &str| Grantee {
        display_name: Some(id.to_owned()),
        id: Some(id.to_owned()),
        type_: Type::from_static(Type::CANONICAL_USER),
        email_address: None,
        uri: None,
    };
    let group_grantee = |uri: &str| Grantee {
        display_name: None,
        id: None,
        type_: Type::from_static(Type::GROUP),
        email_address: None,
        uri: Some(uri.to_owned()),
    };
    let Some(acl) = acl else {
        return vec![Grant {
            grantee: Some(key_grantee(owner)),
            permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
        }];
    };
    acl.grants
        .iter()
        .map(|grant| Grant {
            grantee: Some(match &grant.grantee {
                acl::Grantee::Key(id) => key_grantee(id),
                acl::Grantee::AllUsers => group_grantee(acl::ALL_USERS),
                acl::Grantee::AuthenticatedUsers => group_grantee(acl::AUTHENTICATED_USERS),
            }),
            permission: Some(Permission::from(grant.permission.as_str().to_owned())),
        })
        .collect()
}

pub(super) fn refused(refused: AclRefused) -> S3Error {
    let code = S3ErrorCode::from_bytes(refused.code.as_bytes()).unwrap_or(S3ErrorCode::InvalidArgument);
    S3Error::with_message(code, refused.message)
}

fn malformed(message: &'static str) -> AclRefused {
    AclRefused {
        code: "MalformedACLError",
        message: message.into(),
    }
}

/// What S3 answers an ACL (other than the owner's full control) on a bucket, or a new bucket,
/// with BucketOwnerEnforced ownership.
fn bucket_acl_with_enforced() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::InvalidBucketAclWithObjectOwnership,
        "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting",
    )
}

/// What S3 answers an ACL write to a bucket whose ACLs are disabled.
fn acls_disabled() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::AccessControlListNotSupported,
        "The bucket does not allow ACLs",
    )
}

/// What S3 answers a public ACL while the public access block's BlockPublicAcls is on.
fn public_acl_blocked() -> S3Error {
    s3s::s3_error!(AccessDenied, "Access Denied")
}
