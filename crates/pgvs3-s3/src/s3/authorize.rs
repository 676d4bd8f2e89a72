//! Bucket policies and ACLs on S3 requests: the IAM action of each operation (as AWS's "required
//! permissions for S3 API operations" lists them), the request's policy context, the ACL
//! permission it needs, and the verdict, taken once in the access check before the request is
//! admitted. A bucket without a policy and with ACLs disabled (S3's default) costs one cached
//! map lookup and nothing else; so does any request by the bucket's owner.
//!
//! As on S3: a policy's Deny refuses; otherwise a policy's Allow, an ACL grant or owning the
//! bucket allows. A bucket's ACL rides on its cached catalog row and is decided here. An
//! object's ACL and tags live in the object's metadata: a request only its object's ACL could
//! allow (GetObject, HeadObject, Get/PutObjectAcl by another key), or one whose bucket or key
//! policy looks at the object's tags (`s3:ExistingObjectTag/<tag>`), is let through with a
//! pending [`OnRow`] check, which the front decides on the row it reads anyway, before answering
//! anything of the object ([`ON_THE_ROW`]). Deciding it here would cost a second round trip per
//! request. Where no row is read (a copy's source, retention and legal hold), the tags are
//! unknown and a policy counts as its effect demands least (`access/condition.rs`): a Deny on a
//! tag refuses, an Allow on a tag does not allow.

use std::sync::Arc;
use std::time::SystemTime;

use s3s::S3Result;
use s3s::access::S3AccessContext;

use crate::access::acl::{Acl, Permission};
use crate::access::policy::{BucketPolicy, Decision, RequestContext, Requester};
use crate::http_server::Peer;
use crate::s3::front::operations::{self, AclTarget, Resource};
use crate::s3::post_form::FormFields;
use crate::store::{AccessKey, BucketInfo, Catalog, StoreError, Tags};

/// The buckets a policy allowed this request to use, beyond the requester's own. In the
/// request's extensions; the front passes it to `Buckets::open`.
#[derive(Debug, Clone, Default)]
pub struct PolicyGrant {
    buckets: Vec<String>,
    anonymous: bool,
    /// DeleteObjects on a bucket with a policy: each key is decided on its own, as its own
    /// DeleteObject would be (the access check sees no keys).
    per_key: Option<Arc<PerKey>>,
    /// A GET/HEAD the policy allowed to a requester who may not list the bucket: a missing key
    /// is answered 403 AccessDenied, as S3 does.
    hide_missing: bool,
    /// What only the object's row can decide.
    on_row: Option<OnRow>,
}

/// Whether the front can decide `operation` on the object's tags in its row. A cache bucket's
/// rows do not hold the origin's tags: its requests are decided in the access check, the tags
/// unknown (a Deny on a tag applies, an Allow on a tag does not).
fn tags_on_row(operation: &str, bucket: &BucketInfo) -> bool {
    operations::operation(operation).is_some_and(|op| op.decided_on_row) && bucket.origin.is_none()
}

/// A decision the front takes on the object's row.
#[derive(Debug, Clone)]
enum OnRow {
    /// Only the object's ACL can allow the request.
    Acl(ObjectAclCheck),
    /// A policy looks at the object's tags: the whole decision waits for them.
    Tags(Arc<TagCheck>),
}

/// A permission an object's ACL must grant the requester (decided on the object's row).
#[derive(Debug, Clone)]
struct ObjectAclCheck {
    /// `None`: anonymous.
    requester: Option<String>,
    permission: Permission,
    /// The public access block's IgnorePublicAcls.
    ignore_public: bool,
}

impl ObjectAclCheck {
    fn allows(&self, acl: Option<&Acl>) -> bool {
        acl.is_some_and(|acl| acl.allows(self.requester.as_deref(), self.permission, self.ignore_public))
    }
}

/// Who asks, on which bucket, from where: what a decision taken after the access check (per
/// key of a DeleteObjects, or on the object's row) needs of the request.
#[derive(Debug)]
struct Asker {
    bucket: Arc<BucketInfo>,
    /// `None`: anonymous.
    access_key: Option<String>,
    is_root: bool,
    peer: Option<Peer>,
    /// The requester's own policy (a key with one may do only what it allows).
    own_policy: Option<Arc<BucketPolicy>>,
    /// Whether that policy also grants (a session's role policy), where the bucket's is silent.
    own_grants: bool,
}

impl Asker {
    fn new(
        bucket: &Arc<BucketInfo>,
        requester: Requester<'_>,
        peer: Option<Peer>,
        own: Option<Arc<BucketPolicy>>,
    ) -> Asker {
        let (access_key, is_root) = match requester {
            Requester::Key { access_key, is_root } => (Some(access_key.to_owned()), is_root),
            Requester::Anonymous => (None, false),
        };
        Asker {
            bucket: Arc::clone(bucket),
            access_key,
            is_root,
            peer,
            own_policy: own,
            own_grants: false,
        }
    }

    fn requester(&self) -> Requester<'_> {
        match &self.access_key {
            Some(access_key) => Requester::Key {
                access_key,
                is_root: self.is_root,
            },
            None => Requester::Anonymous,
        }
    }

    /// What the policies say of `action` on `key`: `Some(false)` when the key's own policy does
    /// not allow it or the bucket's denies it, `Some(true)` when the bucket's allows it, `None`
    /// when the bucket's says nothing (ownership and ACLs decide).
    fn policies(
        &self,
        action: &str,
        key: &str,
        headers: &http::HeaderMap,
        query: Option<&str>,
        object_tags: Option<&Tags>,
    ) -> Option<bool> {
        let context = RequestContext {
            requester: self.requester(),
            action,
            bucket: &self.bucket.name,
            key: Some(key),
            source_ip: self.peer.map(|peer| peer.addr.ip()),
            secure_transport: self.peer.is_some_and(|peer| peer.tls),
            now: SystemTime::now(),
            headers,
            query,
            object_tags,
            restrict_public: restricted(&self.bucket),
        };
        let own = RequestContext {
            restrict_public: false,
            ..context
        };
        if let Some(policy) = &self.own_policy
            && policy.evaluate(&own) != Decision::Allow
        {
            return Some(false);
        }
        match self
            .bucket
            .access
            .policy
            .as_ref()
            .map(|policy| policy.rules.evaluate(&context))
        {
            Some(Decision::Allow) => Some(true),
            Some(Decision::Deny) => Some(false),
            _ if self.own_grants => Some(true),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct PerKey {
    asker: Asker,
    /// The bucket's ACL grants the requester WRITE (which deletes, as on S3).
    acl_writes: bool,
}

/// A request whose policies look at the object's tags, decided on its row.
#[derive(Debug)]
struct TagCheck {
    asker: Asker,
    action: &'static str,
    key: String,
    /// Where the bucket's policy says nothing: the requester owns the bucket or the bucket's ACL
    /// allows the request.
    silent_allows: bool,
    /// What the object's ACL must grant where nothing else allows.
    acl: Option<ObjectAclCheck>,
}

impl TagCheck {
    fn allows(&self, headers: &http::HeaderMap, query: Option<&str>, acl: Option<&Acl>, tags: &Tags) -> bool {
        self.asker
            .policies(self.action, &self.key, headers, query, Some(tags))
            .unwrap_or_else(|| self.silent_allows || self.acl.as_ref().is_some_and(|check| check.allows(acl)))
    }
}

impl PolicyGrant {
    /// For DeleteObjects: whether deleting `key` (`versioned`: one version of it) is allowed.
    /// Without a per-key decision the bucket's opening already decided.
    pub fn may_delete(&self, key: &str, versioned: bool, headers: &http::HeaderMap) -> bool {
        let Some(per_key) = &self.per_key else {
            return true;
        };
        let action = if versioned {
            "s3:DeleteObjectVersion"
        } else {
            "s3:DeleteObject"
        };
        // DeleteObject acts on no existing object: no tags are looked at.
        let asker = &per_key.asker;
        let owner = owns(&asker.bucket, asker.requester());
        // Only a policy or owning the bucket grants a bypass of GOVERNANCE retention (no ACL).
        let bypass_allowed = || {
            !bypasses_governance(headers)
                || asker
                    .policies("s3:BypassGovernanceRetention", key, headers, None, None)
                    .unwrap_or(owner)
        };
        asker
            .policies(action, key, headers, None, None)
            .unwrap_or_else(|| per_key.acl_writes || owner)
            && bypass_allowed()
    }

    pub fn covers(&self, bucket: &str) -> bool {
        self.buckets.iter().any(|granted| granted == bucket)
    }

    /// Whether a missing key must be answered AccessDenied rather than NoSuchKey.
    pub fn hides_missing(&self) -> bool {
        self.hide_missing
    }

    /// An unsigned request some policy or ACL let through.
    pub fn anonymous(&self) -> bool {
        self.anonymous
    }

    /// Whether the object's row, its ACL (`None`: private, the bucket owner's alone) and its
    /// tags, allows what this request was let through for. True when nothing is pending.
    /// `headers` and `query` are the request's (policy conditions may look at them).
    pub fn object_allows(
        &self,
        headers: &http::HeaderMap,
        query: Option<&str>,
        acl: Option<&Acl>,
        tags: &Tags,
    ) -> bool {
        match &self.on_row {
            None => true,
            Some(OnRow::Acl(check)) => check.allows(acl),
            Some(OnRow::Tags(check)) => check.allows(headers, query, acl, tags),
        }
    }

    /// Whether a policy looking at the object's tags decides the request on the object's row:
    /// a tag write must then check them where it writes.
    pub fn decides_on_tags(&self) -> bool {
        matches!(self.on_row, Some(OnRow::Tags(_)))
    }

    /// Whether a missing object is AccessDenied rather than NoSuchKey because the policies,
    /// looking at tags, do not allow the request on an object without any: as on S3, where
    /// the permission is decided before the object is looked for.
    pub fn refuses_missing(&self, headers: &http::HeaderMap, query: Option<&str>) -> bool {
        matches!(&self.on_row, Some(OnRow::Tags(check)) if !check.allows(headers, query, None, &Tags::new()))
    }
}

/// The ACL permission an operation needs, as S3's ACL overview maps them.
fn acl_permission(operation: &str) -> Option<(AclTarget, Permission)> {
    operations::operation(operation)?.acl
}

fn requester_key<'a>(requester: Requester<'a>) -> Option<&'a str> {
    match requester {
        Requester::Key { access_key, .. } => Some(access_key),
        Requester::Anonymous => None,
    }
}

/// Whether the requester owns the bucket (the root keys own every bucket here).
fn owns(bucket: &BucketInfo, requester: Requester<'_>) -> bool {
    match requester {
        Requester::Key { access_key, is_root } => is_root || bucket.owner.as_deref() == Some(access_key),
        Requester::Anonymous => false,
    }
}

/// Whether the bucket's own ACL grants `permission` (never while its ACLs are disabled).
fn bucket_acl_allows(bucket: &BucketInfo, requester: Requester<'_>, permission: Permission) -> bool {
    bucket.access.acls_enabled()
        && bucket.access.acl.as_ref().is_some_and(|acl| {
            acl.allows(
                requester_key(requester),
                permission,
                bucket.access.ignores_public_acls(),
            )
        })
}

fn denied() -> s3s::S3Error {
    s3s::s3_error!(AccessDenied, "Access Denied")
}

/// The IAM action an operation needs. `versioned`: the request names a version, which AWS's
/// Service Authorization Reference gives actions of their own for reads, deletes, tags and ACLs.
pub fn action_of(operation: &str, versioned: bool) -> Option<&'static str> {
    operations::operation(operation)?.action_of(versioned)
}

/// The actions a request needs besides its operation's, as on AWS: one that writes an object and
/// sets its ACL (`x-amz-acl`, `x-amz-grant-*`) needs `s3:PutObjectAcl` too, otherwise a key
/// allowed only to write could make what it writes public; a delete or retention change that
/// bypasses GOVERNANCE retention needs `s3:BypassGovernanceRetention`, otherwise a key allowed
/// to delete versions could remove what the retention protects.
fn extra_actions(operation: &str, headers: &http::HeaderMap) -> impl Iterator<Item = &'static str> + use<> {
    let op = operations::operation(operation);
    let sets_acl = op.is_some_and(|op| op.sets_object_acl)
        && headers
            .keys()
            .any(|name| name == "x-amz-acl" || name.as_str().starts_with("x-amz-grant-"));
    let bypasses = op.is_some_and(|op| op.bypasses_governance) && bypasses_governance(headers);
    [
        sets_acl.then_some("s3:PutObjectAcl"),
        bypasses.then_some("s3:BypassGovernanceRetention"),
    ]
    .into_iter()
    .flatten()
}

/// The request asks to bypass GOVERNANCE retention (the front acts on the header as s3s parses
/// it, `true`; any casing counts here, so that nothing the front might take as true goes
/// unchecked).
fn bypasses_governance(headers: &http::HeaderMap) -> bool {
    headers
        .get("x-amz-bypass-governance-retention")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim().eq_ignore_ascii_case("true"))
}

/// The policy actions the bucket's owner (and the root keys) keep whatever the policy says, as
/// on AWS, where an account cannot lock itself out of its bucket's policy.
const NEVER_LOCKED_OUT: [&str; 3] = ["s3:GetBucketPolicy", "s3:PutBucketPolicy", "s3:DeleteBucketPolicy"];

/// The request's bucket, resolved once for the access check and the front: `None` when the
/// request names none, or (signed) names one that does not exist. Unsigned requests must name a
/// bucket, which must exist (NoSuchBucket).
pub async fn resolve_bucket(
    catalog: &Catalog,
    cx: &S3AccessContext<'_>,
    operation: &str,
) -> S3Result<Option<Arc<BucketInfo>>> {
    let signed = cx.credentials().is_some();
    let Some(bucket_name) = cx.s3_path().get_bucket_name() else {
        return match signed {
            true => Ok(None),
            false => Err(s3s::s3_error!(AccessDenied, "Anonymous access is not allowed.")),
        };
    };
    let bucket = catalog.cached_bucket(bucket_name);
    if bucket.is_some() || (!signed && operation == "CreateBucket") {
        return Ok(bucket);
    }
    // Not cached: a bucket made a moment ago (through another gateway, its NOTIFY still on the
    // way) is checked against its own rules, not the owner check's alone, and for an unsigned
    // request only a bucket that does not exist is NoSuchBucket. One indexed lookup, holding no
    // admission slot; the store finds the row cached.
    match catalog.bucket(bucket_name).await {
        Ok(found) => Ok(Some(found)),
        Err(StoreError::NoSuchBucket) if signed => Ok(None),
        Err(StoreError::NoSuchBucket) => Err(s3s::s3_error!(NoSuchBucket, "The specified bucket does not exist")),
        Err(err) => Err(super::errors::s3_error(err, None)),
    }
}

/// Checks the request against its bucket's policy (and, for a copy, the source bucket's).
/// Returns the grant to carry, or the refusal. Unsigned requests pass only where a policy
/// allows everyone. `signer` is the signing key, `bucket` the request's (`resolve_bucket`).
pub fn authorize(
    catalog: &Catalog,
    cx: &S3AccessContext<'_>,
    peer: Option<Peer>,
    operation: &str,
    form: Option<&FormFields>,
    signer: Option<&Arc<AccessKey>>,
    bucket: Option<&Arc<BucketInfo>>,
) -> S3Result<Option<PolicyGrant>> {
    // AWS decides a browser upload as the PutObject it is: on the key the form names (its
    // `${filename}` replaced), with the form's fields as its settings (`acl` needs
    // s3:PutObjectAcl as the header does).
    let form = form.filter(|_| operation == "PostObject");
    let operation = if form.is_some() { "PutObject" } else { operation };
    let form_settings = form.map(|fields| {
        let mut headers = cx.headers().clone();
        headers.extend(fields.settings());
        headers
    });
    // The request's headers, as the policy's condition keys read them.
    let settings = form_settings.as_ref().unwrap_or(cx.headers());
    let form_key = form.and_then(FormFields::key);
    // Only an object's operations name a key in their policy context.
    let on_object = operations::operation(operation).is_none_or(|op| op.resource == Resource::Object);
    let object_key = form_key.or(cx.s3_path().get_object_key()).filter(|_| on_object);
    let signed = cx.credentials().map(|c| c.access_key.as_str());
    let Some(bucket_name) = cx.s3_path().get_bucket_name() else {
        return Ok(None);
    };
    if let Some(access_key) = signed
        && crate::store::is_session_key(access_key)
    {
        return session_request(
            catalog,
            cx,
            peer,
            settings,
            signer,
            bucket,
            bucket_name,
            operation,
            object_key,
        );
    }
    // The hot path: while no bucket has a policy or ACLs enabled (this one included), a signed
    // request is the owner check's alone.
    if signed.is_some() && !catalog.has_access_rules() {
        return Ok(None);
    }
    let own_policy = signer.filter(|key| !key.is_root).and_then(|key| key.policy.clone());
    let weighed = Weighed {
        peer,
        operation,
        settings,
        headers: cx.headers(),
        query: cx.uri().query(),
        object_key,
        signed,
        signer_is_root: signer.is_some_and(|key| key.is_root),
        bucket_name,
        bucket,
        copy: matches!(operation, "CopyObject" | "UploadPartCopy"),
        versioned: query_has(cx.uri().query(), "versionId"),
        // The key's own policy looks at the object's tags: decided on the row (with the
        // bucket's handle at hand; a bucket not cached yet is decided here, tags unknown).
        own_on_tags: bucket.is_some_and(|bucket| tags_on_row(operation, bucket))
            && own_policy.as_ref().is_some_and(|own| own.on_object_tags()),
        own_policy,
    };
    weighed.own_policy_allows()?;
    match weighed.decided_by_owner() {
        Some(decided) => Ok(decided),
        None => weighed.grant(catalog),
    }
}

/// Whether an unsigned browser upload to `bucket` may write the key its `fields` name: the
/// PutObject that [`authorize`] will decide once s3s has read the form (the same key, the
/// form's fields as its settings), decided before the form's file is read, so that a form no
/// rule lets write is refused before it reserves the memory s3s holds its file in.
pub fn unsigned_form_may_write(
    bucket: &Arc<BucketInfo>,
    peer: Option<Peer>,
    headers: &http::HeaderMap,
    query: Option<&str>,
    fields: &FormFields,
) -> bool {
    let mut settings = headers.clone();
    settings.extend(fields.settings());
    let weighed = Weighed {
        peer,
        operation: "PutObject",
        settings: &settings,
        headers,
        query,
        object_key: fields.key(),
        signed: None,
        signer_is_root: false,
        bucket_name: &bucket.name,
        bucket: Some(bucket),
        copy: false,
        versioned: false,
        own_policy: None,
        own_on_tags: false,
    };
    let mut grant = PolicyGrant::default();
    weighed.grant_bucket(&mut grant, Requester::Anonymous).is_ok() && grant.covers(&bucket.name)
}

/// A session key's request: its role's policy decides ([`session_grant`]).
#[allow(clippy::too_many_arguments)]
fn session_request(
    catalog: &Catalog,
    cx: &S3AccessContext<'_>,
    peer: Option<Peer>,
    settings: &http::HeaderMap,
    signer: Option<&Arc<AccessKey>>,
    bucket: Option<&Arc<BucketInfo>>,
    bucket_name: &str,
    operation: &str,
    object_key: Option<&str>,
) -> S3Result<Option<PolicyGrant>> {
    // A copy's source bucket, whose policy may deny reading it (as the static keys' path reads
    // it: from the cache).
    let source = matches!(operation, "CopyObject" | "UploadPartCopy")
        .then(|| copy_source(cx.headers()))
        .flatten()
        .and_then(|(source_bucket, ..)| catalog.cached_bucket(&source_bucket));
    match signer.map(Arc::as_ref) {
        Some(AccessKey {
            session: Some(session),
            policy: Some(policy),
            ..
        }) => session_grant(
            SessionAsk {
                headers: settings,
                query: cx.uri().query(),
                peer,
                requester: Requester::Key {
                    access_key: &session.username,
                    is_root: false,
                },
                policy,
            },
            bucket,
            source.as_ref(),
            bucket_name,
            operation,
            object_key,
        ),
        _ => Err(denied()),
    }
}

/// A static key's (or an unsigned) request as the access check weighs it, once the hot path
/// did not decide it: what each step of [`authorize`] reads.
struct Weighed<'a> {
    peer: Option<Peer>,
    operation: &'a str,
    /// The request's headers as the policy's condition keys read them (a form's fields in).
    settings: &'a http::HeaderMap,
    /// The request's own headers (a copy's source).
    headers: &'a http::HeaderMap,
    query: Option<&'a str>,
    object_key: Option<&'a str>,
    /// The signing key's id; `None`: unsigned.
    signed: Option<&'a str>,
    signer_is_root: bool,
    bucket_name: &'a str,
    bucket: Option<&'a Arc<BucketInfo>>,
    copy: bool,
    /// It names a version (`?versionId`).
    versioned: bool,
    /// The signing key's own policy (not the root keys').
    own_policy: Option<Arc<BucketPolicy>>,
    /// That policy looks at the object's tags, and the front decides it on the object's row.
    own_on_tags: bool,
}

impl<'a> Weighed<'a> {
    /// The key's own policy, unless decided on the row (or per key of a DeleteObjects): it
    /// must allow the operation's action, the ACL it sets, and a copy's read of its source.
    fn own_policy_allows(&self) -> S3Result<()> {
        let (Some(own), Some(access_key)) = (&self.own_policy, self.signed) else {
            return Ok(());
        };
        if self.operation == "DeleteObjects" || self.own_on_tags {
            return Ok(());
        }
        let requester = Requester::Key {
            access_key,
            is_root: false,
        };
        let action = match self.operation {
            "CreateBucket" => Some("s3:CreateBucket"),
            _ => action_of(self.operation, self.versioned),
        };
        let allows = |action| {
            own_allows(
                self.settings,
                self.peer,
                own,
                requester,
                action,
                self.bucket_name,
                self.object_key,
                self.query,
            )
        };
        let allowed = action.is_some_and(allows) && extra_actions(self.operation, self.settings).all(allows);
        let source_allowed = !self.copy
            || copy_source(self.headers).is_some_and(|(source_bucket, source_key, version)| {
                let action = if version { "s3:GetObjectVersion" } else { "s3:GetObject" };
                own_allows(
                    self.settings,
                    self.peer,
                    own,
                    requester,
                    action,
                    &source_bucket,
                    Some(&source_key),
                    None,
                )
            });
        match allowed && source_allowed {
            true => Ok(()),
            false => Err(denied()),
        }
    }

    /// A signed request to a bucket without a policy is the owner check's alone too (once the
    /// key's own policy, if any, allowed it), unless the bucket's ACLs may grant the requester
    /// what it does not own: `Some` with the grant to carry, `None` when the policies and ACLs
    /// are to decide.
    fn decided_by_owner(&self) -> Option<Option<PolicyGrant>> {
        let per_key_deletes = self.operation == "DeleteObjects" && self.own_policy.is_some();
        let signer_owns = |bucket: &BucketInfo| self.signer_is_root || bucket.owner.as_deref() == self.signed;
        let owner_decides = self.signed.is_some()
            && !self.copy
            && !per_key_deletes
            && self.bucket.is_none_or(|bucket| {
                bucket.access.policy.is_none() && (!bucket.access.acls_enabled() || signer_owns(bucket))
            });
        if !owner_decides {
            return None;
        }
        // Only the key's own policy is left to decide, on the row; the bucket's opening checks
        // the owner.
        Some(
            match (self.bucket, self.signed, action_of(self.operation, self.versioned)) {
                (Some(bucket), Some(access_key), Some(action)) if self.own_on_tags => {
                    let requester = Requester::Key {
                        access_key,
                        is_root: false,
                    };
                    Some(PolicyGrant {
                        on_row: Some(OnRow::Tags(Arc::new(TagCheck {
                            asker: Asker::new(bucket, requester, self.peer, self.own_policy.clone()),
                            action,
                            key: self.object_key.unwrap_or_default().to_owned(),
                            silent_allows: true,
                            acl: None,
                        }))),
                        ..PolicyGrant::default()
                    })
                }
                _ => None,
            },
        )
    }

    /// What the policies and ACLs of the request's bucket (and a copy's source bucket) grant.
    fn grant(&self, catalog: &Catalog) -> S3Result<Option<PolicyGrant>> {
        let requester = match self.signed {
            Some(access_key) => Requester::Key {
                access_key,
                is_root: self.signer_is_root,
            },
            None if self.operation == "CreateBucket" => return Err(denied()),
            None => Requester::Anonymous,
        };
        let mut grant = PolicyGrant {
            anonymous: self.signed.is_none(),
            ..PolicyGrant::default()
        };
        self.grant_bucket(&mut grant, requester)?;
        self.grant_copy_source(catalog, &mut grant, requester)?;
        if grant.anonymous && grant.buckets.is_empty() {
            return Err(denied());
        }
        Ok((!grant.buckets.is_empty() || grant.anonymous || grant.per_key.is_some()).then_some(grant))
    }

    /// What the request's bucket's policy and ACLs grant: a DeleteObjects' keys each decided
    /// later, any other operation's action now (or on the object's row).
    fn grant_bucket(&self, grant: &mut PolicyGrant, requester: Requester<'_>) -> S3Result<()> {
        let Some(bucket) = self.bucket else {
            return Ok(());
        };
        if self.operation == "DeleteObjects" && (bucket.access.policy.is_some() || self.own_policy.is_some()) {
            // Only a bucket policy grants the bucket; a key's own policy only narrows.
            if bucket.access.policy.is_some() {
                grant.buckets.push(bucket.name.clone());
            }
            let acl_writes = bucket_acl_allows(bucket, requester, Permission::Write);
            if acl_writes && bucket.access.policy.is_none() {
                grant.buckets.push(bucket.name.clone());
            }
            grant.per_key = Some(Arc::new(PerKey {
                asker: Asker::new(bucket, requester, self.peer, self.own_policy.clone()),
                acl_writes,
            }));
            return Ok(());
        }
        let Some(action) = action_of(self.operation, self.versioned) else {
            return Ok(());
        };
        let key = self.object_key;
        let on_tags = tags_on_row(self.operation, bucket)
            && (self.own_on_tags || bucket.access.policy.as_ref().is_some_and(|p| p.rules.on_object_tags()));
        let policy_allows = |action| decide(self.settings, self.peer, bucket, requester, action, key, self.query);
        // Both decided, so that a Deny of either refuses.
        let by_policy = !on_tags && policy_allows(action)?;
        let mut extras_by_policy = true;
        for extra in extra_actions(self.operation, self.settings) {
            extras_by_policy &= policy_allows(extra)?;
        }
        let by_policy = by_policy && extras_by_policy;
        let (by_bucket_acl, object_acl) = self.acl_allows(bucket, requester);
        grant.on_row = match on_tags {
            true => Some(OnRow::Tags(Arc::new(TagCheck {
                asker: Asker::new(bucket, requester, self.peer, self.own_policy.clone()),
                action,
                key: key.unwrap_or_default().to_owned(),
                silent_allows: owns(bucket, requester) || by_bucket_acl,
                acl: object_acl,
            }))),
            false if by_policy => None,
            false => object_acl.map(OnRow::Acl),
        };
        if by_policy || by_bucket_acl || grant.on_row.is_some() {
            grant.buckets.push(bucket.name.clone());
            // S3 tells a reader without s3:ListBucket (or the bucket's READ) that a missing key
            // is 403, not 404, so a grant to read objects does not reveal which keys exist.
            grant.hide_missing = matches!(self.operation, "GetObject" | "HeadObject")
                && !owns(bucket, requester)
                && !bucket_acl_allows(bucket, requester, Permission::Read)
                && !decide(self.settings, self.peer, bucket, requester, "s3:ListBucket", None, None)?;
        }
        Ok(())
    }

    /// Where the policies are silent, an ACL may allow: whether the bucket's does now, and what
    /// the object's must grant once its row is read.
    fn acl_allows(&self, bucket: &BucketInfo, requester: Requester<'_>) -> (bool, Option<ObjectAclCheck>) {
        if owns(bucket, requester) || !bucket.access.acls_enabled() {
            return (false, None);
        }
        match acl_permission(self.operation) {
            Some((AclTarget::Bucket, permission)) => (bucket_acl_allows(bucket, requester, permission), None),
            Some((AclTarget::Object, permission)) => (
                false,
                Some(ObjectAclCheck {
                    requester: requester_key(requester).map(str::to_owned),
                    permission,
                    ignore_public: bucket.access.ignores_public_acls(),
                }),
            ),
            None => (false, None),
        }
    }

    /// A copy's source bucket, granted when its policy allows reading the source object.
    fn grant_copy_source(&self, catalog: &Catalog, grant: &mut PolicyGrant, requester: Requester<'_>) -> S3Result<()> {
        if !self.copy {
            return Ok(());
        }
        let Some((source_bucket, source_key, version)) = copy_source(self.headers) else {
            return Ok(());
        };
        let Some(source) = catalog.cached_bucket(&source_bucket) else {
            return Ok(());
        };
        let action = if version { "s3:GetObjectVersion" } else { "s3:GetObject" };
        // The grant names buckets, not what may be done in them: a source in the destination's
        // bucket must not grant the destination (a key that may only read could copy into it,
        // or copy with an ACL it may not set).
        let grants_destination = source.name == self.bucket_name && !grant.covers(self.bucket_name);
        if decide(
            self.settings,
            self.peer,
            &source,
            requester,
            action,
            Some(&source_key),
            None,
        )? && !grants_destination
        {
            grant.buckets.push(source.name.clone());
        }
        Ok(())
    }
}

/// A session's request, as its role's policy sees it (`${aws:username}` the ServiceAccount).
struct SessionAsk<'a> {
    headers: &'a http::HeaderMap,
    query: Option<&'a str>,
    peer: Option<Peer>,
    requester: Requester<'a>,
    policy: &'a Arc<BucketPolicy>,
}

impl SessionAsk<'_> {
    /// The role's policy allows `action` on the object (or bucket) and the bucket's policy, if
    /// any, does not deny it.
    fn allows(&self, action: &str, bucket_name: &str, bucket: Option<&Arc<BucketInfo>>, key: Option<&str>) -> bool {
        own_allows(
            self.headers,
            self.peer,
            self.policy,
            self.requester,
            action,
            bucket_name,
            key,
            self.query,
        ) && bucket.is_none_or(|bucket| {
            decide(self.headers, self.peer, bucket, self.requester, action, key, self.query).is_ok()
        })
    }
}

/// Temporary credentials (STS) own nothing: their role's policy grants what they may do, where
/// the bucket's policy (and a copy's source bucket's, `source`) does not deny it. Object tags
/// are not known here, so a statement on them counts as its effect demands least (a Deny
/// applies, an Allow does not); ACLs grant them nothing. They create no buckets.
fn session_grant(
    ask: SessionAsk<'_>,
    bucket: Option<&Arc<BucketInfo>>,
    source: Option<&Arc<BucketInfo>>,
    bucket_name: &str,
    operation: &str,
    object_key: Option<&str>,
) -> S3Result<Option<PolicyGrant>> {
    let versioned = query_has(ask.query, "versionId");
    let mut grant = PolicyGrant {
        buckets: vec![bucket_name.to_owned()],
        ..PolicyGrant::default()
    };
    if operation == "DeleteObjects" {
        let Some(bucket) = bucket else {
            return Ok(Some(grant));
        };
        let mut asker = Asker::new(bucket, ask.requester, ask.peer, Some(Arc::clone(ask.policy)));
        asker.own_grants = true;
        grant.per_key = Some(Arc::new(PerKey {
            asker,
            acl_writes: false,
        }));
        return Ok(Some(grant));
    }
    if operation == "CreateBucket" {
        // A session acts for the account its role belongs to, which owns the buckets: one its
        // role may create that exists is answered as AWS answers an account re-creating its own.
        return Err(match bucket {
            Some(_) if ask.allows("s3:CreateBucket", bucket_name, bucket, None) => s3s::s3_error!(
                BucketAlreadyOwnedByYou,
                "Your previous request to create the named bucket succeeded and you already own it."
            ),
            _ => denied(),
        });
    }
    let Some(action) = action_of(operation, versioned) else {
        return Err(denied());
    };
    let allowed = ask.allows(action, bucket_name, bucket, object_key)
        && extra_actions(operation, ask.headers).all(|extra| ask.allows(extra, bucket_name, bucket, object_key));
    let copy = matches!(operation, "CopyObject" | "UploadPartCopy");
    let source_allowed = !copy
        || copy_source(ask.headers).is_some_and(|(source_bucket, source_key, version)| {
            let action = if version { "s3:GetObjectVersion" } else { "s3:GetObject" };
            let source = source.filter(|source| source.name == source_bucket);
            ask.allows(action, &source_bucket, source, Some(&source_key))
        });
    if !allowed || !source_allowed {
        return Err(denied());
    }
    if copy && let Some((source_bucket, ..)) = copy_source(ask.headers) {
        grant.buckets.push(source_bucket);
    }
    grant.hide_missing =
        matches!(operation, "GetObject" | "HeadObject") && !ask.allows("s3:ListBucket", bucket_name, bucket, None);
    Ok(Some(grant))
}

/// Whether a key's own policy allows the request. It can only narrow what the key may do: an
/// Allow lets the request go on to the owner and bucket-policy checks, anything else refuses it.
#[allow(clippy::too_many_arguments)]
fn own_allows(
    headers: &http::HeaderMap,
    peer: Option<Peer>,
    policy: &BucketPolicy,
    requester: Requester<'_>,
    action: &str,
    bucket: &str,
    key: Option<&str>,
    query: Option<&str>,
) -> bool {
    let context = RequestContext {
        requester,
        action,
        bucket,
        key,
        source_ip: peer.map(|peer| peer.addr.ip()),
        secure_transport: peer.is_some_and(|peer| peer.tls),
        now: SystemTime::now(),
        headers,
        query,
        object_tags: None,
        restrict_public: false,
    };
    policy.evaluate(&context) == Decision::Allow
}

/// Whether `bucket`'s policy allows the request (an explicit Deny refuses it here).
fn decide(
    headers: &http::HeaderMap,
    peer: Option<Peer>,
    bucket: &Arc<BucketInfo>,
    requester: Requester<'_>,
    action: &str,
    key: Option<&str>,
    query: Option<&str>,
) -> S3Result<bool> {
    let Some(policy) = &bucket.access.policy else {
        return Ok(false);
    };
    let context = RequestContext {
        requester,
        action,
        bucket: &bucket.name,
        key,
        source_ip: peer.map(|peer| peer.addr.ip()),
        secure_transport: peer.is_some_and(|peer| peer.tls),
        now: SystemTime::now(),
        headers,
        query,
        object_tags: None,
        restrict_public: restricted(bucket),
    };
    match policy.rules.evaluate(&context) {
        Decision::Allow => Ok(true),
        Decision::Silent => Ok(false),
        Decision::Deny => match owns(bucket, requester) && NEVER_LOCKED_OUT.contains(&action) {
            true => Ok(false),
            false => Err(denied()),
        },
    }
}

fn restricted(bucket: &BucketInfo) -> bool {
    bucket
        .access
        .public_access_block
        .is_some_and(|block| block.restrict_public_buckets)
}

fn query_has(query: Option<&str>, name: &str) -> bool {
    query.is_some_and(|query| form_urlencoded::parse(query.as_bytes()).any(|(param, _)| param == name))
}

/// The bucket, key and whether a version is named, of an `x-amz-copy-source` header.
fn copy_source(headers: &http::HeaderMap) -> Option<(String, String, bool)> {
    let value = headers.get("x-amz-copy-source")?.to_str().ok()?;
    let (path, version) = match value.split_once("?versionId=") {
        Some((path, _)) => (path, true),
        None => (value, false),
    };
    let decoded: String = form_urlencoded::parse(format!("p={}", path.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())?;
    let decoded = decoded.strip_prefix('/').unwrap_or(&decoded);
    let (bucket, key) = decoded.split_once('/')?;
    Some((bucket.to_owned(), key.to_owned(), version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_map_to_the_actions_aws_documents() {
        assert_eq!(action_of("HeadObject", false), Some("s3:GetObject"));
        assert_eq!(action_of("GetObject", true), Some("s3:GetObjectVersion"));
        assert_eq!(action_of("PutObjectTagging", true), Some("s3:PutObjectVersionTagging"));
        assert_eq!(
            action_of("DeleteObjectTagging", true),
            Some("s3:DeleteObjectVersionTagging")
        );
        assert_eq!(action_of("GetObjectAcl", true), Some("s3:GetObjectVersionAcl"));
        assert_eq!(action_of("PutObjectAcl", true), Some("s3:PutObjectVersionAcl"));
        assert_eq!(action_of("PutObjectRetention", true), Some("s3:PutObjectRetention"));
        assert_eq!(action_of("ListObjectsV2", false), Some("s3:ListBucket"));
        assert_eq!(action_of("CompleteMultipartUpload", false), Some("s3:PutObject"));
        assert_eq!(action_of("DeleteBucketCors", false), Some("s3:PutBucketCORS"));
        assert_eq!(
            action_of("PutBucketNotificationConfiguration", false),
            Some("s3:PutBucketNotification")
        );
        assert_eq!(
            action_of("GetBucketNotificationConfiguration", false),
            Some("s3:GetBucketNotification")
        );
        assert_eq!(action_of("ListBuckets", false), None);
    }

    #[test]
    fn copy_sources_are_decoded() {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-amz-copy-source", "/src/a%20b/c?versionId=x".parse().unwrap());
        assert_eq!(copy_source(&headers), Some(("src".into(), "a b/c".into(), true)));
        headers.insert("x-amz-copy-source", "src/k+1".parse().unwrap());
        assert_eq!(copy_source(&headers), Some(("src".into(), "k+1".into(), false)));
    }
}
