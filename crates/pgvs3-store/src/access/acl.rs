//! ACLs as data: S3's grants of a bucket or an object to access keys and to the AllUsers and
//! AuthenticatedUsers groups, the canned ACLs and `x-amz-grant-*` headers that ask for them,
//! the bucket's object ownership setting that turns them off, and whether an ACL allows a
//! requester a permission. No SQL, no S3 wire types.
//!
//! Grantees are access key ids (S3's canonical user ids; pgvs3 has no accounts, so a key is
//! the grantee and the owner). The owner of a bucket is its owning key (the root key for
//! buckets made by an admin); the owner of an object is the bucket's owner, except an object
//! a key other than the bucket's owner wrote under ObjectWriter (or BucketOwnerPreferred
//! without `bucket-owner-full-control`), which that key owns, as on S3. The bucket's owner
//! keeps every right on its bucket's objects here (on S3 it needs a grant to read an object
//! another account owns): pgvs3 has one owner key per bucket and no way for it to be locked out.

use http::HeaderMap;
use serde::{Deserialize, Serialize};

/// S3's group of everyone, signed or not.
pub const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
/// S3's group of every signed request (here: every access key of this deployment).
pub const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";
const LOG_DELIVERY: &str = "http://acs.amazonaws.com/groups/s3/LogDelivery";

/// S3's limit on the grants of one ACL.
pub const MAX_GRANTS: usize = 100;

/// A bucket's object ownership setting (its ownership controls).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// ACLs are disabled: the bucket's owner owns every object, ACLs grant nothing.
    BucketOwnerEnforced,
    /// ACLs count; a write with `bucket-owner-full-control` makes the bucket's owner own it.
    BucketOwnerPreferred,
    /// ACLs count; the writing key owns what it writes.
    ObjectWriter,
}

impl Ownership {
    pub fn parse(text: &str) -> Option<Ownership> {
        match text {
            "BucketOwnerEnforced" => Some(Ownership::BucketOwnerEnforced),
            "BucketOwnerPreferred" => Some(Ownership::BucketOwnerPreferred),
            "ObjectWriter" => Some(Ownership::ObjectWriter),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Ownership::BucketOwnerEnforced => "BucketOwnerEnforced",
            Ownership::BucketOwnerPreferred => "BucketOwnerPreferred",
            Ownership::ObjectWriter => "ObjectWriter",
        }
    }

    /// Whether ACLs grant anything on a bucket with this setting (`None`: the ownership
    /// controls were deleted, and the bucket behaves as ObjectWriter, as on S3).
    pub fn acls_enabled(ownership: Option<Ownership>) -> bool {
        ownership != Some(Ownership::BucketOwnerEnforced)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Permission {
    #[serde(rename = "R")]
    Read,
    #[serde(rename = "W")]
    Write,
    #[serde(rename = "RA")]
    ReadAcp,
    #[serde(rename = "WA")]
    WriteAcp,
    #[serde(rename = "F")]
    FullControl,
}

impl Permission {
    pub fn parse(text: &str) -> Option<Permission> {
        match text {
            "READ" => Some(Permission::Read),
            "WRITE" => Some(Permission::Write),
            "READ_ACP" => Some(Permission::ReadAcp),
            "WRITE_ACP" => Some(Permission::WriteAcp),
            "FULL_CONTROL" => Some(Permission::FullControl),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "READ",
            Permission::Write => "WRITE",
            Permission::ReadAcp => "READ_ACP",
            Permission::WriteAcp => "WRITE_ACP",
            Permission::FullControl => "FULL_CONTROL",
        }
    }

    fn covers(self, wanted: Permission) -> bool {
        self == Permission::FullControl || self == wanted
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Grantee {
    /// An access key id.
    #[serde(rename = "k")]
    Key(String),
    #[serde(rename = "all")]
    AllUsers,
    #[serde(rename = "auth")]
    AuthenticatedUsers,
}

impl Grantee {
    /// S3 calls a grant to either group public (the public access block's sense).
    fn is_public(&self) -> bool {
        !matches!(self, Grantee::Key(_))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    #[serde(rename = "g")]
    pub grantee: Grantee,
    #[serde(rename = "p")]
    pub permission: Permission,
}

/// An ACL as stored: with the bucket row (`buckets.acl`) or in an object's metadata (`ac`). No
/// stored ACL means "private": the owner's full control and nothing else.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acl {
    /// The owner, when it is not the bucket's owner (an object another key wrote and owns).
    #[serde(rename = "o", default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(rename = "g", default)]
    pub grants: Vec<Grant>,
}

impl Acl {
    /// Whether the ACL allows `requester` (`None`: anonymous) `wanted`. `ignore_public`: the
    /// public access block's IgnorePublicAcls, under which group grants do not count. The
    /// owner of an object may always read and write its ACL, as on S3.
    pub fn allows(&self, requester: Option<&str>, wanted: Permission, ignore_public: bool) -> bool {
        if matches!(wanted, Permission::ReadAcp | Permission::WriteAcp)
            && requester.is_some_and(|key| self.owner.as_deref() == Some(key))
        {
            return true;
        }
        self.grants.iter().any(|grant| {
            grant.permission.covers(wanted)
                && match &grant.grantee {
                    Grantee::Key(key) => requester == Some(key.as_str()),
                    Grantee::AllUsers => !ignore_public,
                    Grantee::AuthenticatedUsers => !ignore_public && requester.is_some(),
                }
        })
    }

    /// Whether the ACL grants anything to a group (what BlockPublicAcls refuses).
    pub fn is_public(&self) -> bool {
        self.grants.iter().any(|grant| grant.grantee.is_public())
    }

    /// Whether it grants nothing beyond `owner`'s full control: all a bucket whose ACLs are
    /// disabled takes (S3 accepts exactly such ACLs there).
    pub fn is_owner_only(&self, owner: &str) -> bool {
        self.grants
            .iter()
            .all(|grant| grant.grantee == Grantee::Key(owner.to_owned()) && grant.permission == Permission::FullControl)
    }

    /// Whether it is the default ACL, private: `owner`'s full control and nothing else, what
    /// no stored ACL stands for. An empty grant list is not: it revokes the owner's own grant,
    /// and S3 answers it back empty.
    pub fn is_private(&self, owner: &str) -> bool {
        !self.grants.is_empty() && self.is_owner_only(owner)
    }
}

/// The canned ACLs S3 defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Canned {
    Private,
    PublicRead,
    PublicReadWrite,
    AuthenticatedRead,
    BucketOwnerRead,
    BucketOwnerFullControl,
}

/// What a request asks for: a canned ACL (`x-amz-acl`) or explicit grants (`x-amz-grant-*`, or
/// an `AccessControlPolicy` body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requested {
    Canned(Canned),
    Grants(Vec<Grant>),
}

impl Requested {
    /// The access key ids it grants to (each must exist).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        let grants = match self {
            Requested::Grants(grants) => grants.as_slice(),
            Requested::Canned(_) => &[],
        };
        grants.iter().filter_map(|grant| match &grant.grantee {
            Grantee::Key(key) => Some(key.as_str()),
            _ => None,
        })
    }

    /// The ACL it makes for an object or bucket `owner` owns, in a bucket `bucket_owner` owns.
    /// The stored owner is kept only when it is not the bucket's.
    pub fn resolve(&self, owner: &str, bucket_owner: &str) -> Acl {
        let grant = |grantee: Grantee, permission| Grant { grantee, permission };
        let key = |id: &str| Grantee::Key(id.to_owned());
        let mut grants = match self {
            Requested::Grants(grants) => grants.clone(),
            Requested::Canned(canned) => {
                let mut grants = vec![grant(key(owner), Permission::FullControl)];
                match canned {
                    Canned::Private => {}
                    Canned::PublicRead => grants.push(grant(Grantee::AllUsers, Permission::Read)),
                    Canned::PublicReadWrite => {
                        grants.push(grant(Grantee::AllUsers, Permission::Read));
                        grants.push(grant(Grantee::AllUsers, Permission::Write));
                    }
                    Canned::AuthenticatedRead => grants.push(grant(Grantee::AuthenticatedUsers, Permission::Read)),
                    Canned::BucketOwnerRead => grants.push(grant(key(bucket_owner), Permission::Read)),
                    Canned::BucketOwnerFullControl => grants.push(grant(key(bucket_owner), Permission::FullControl)),
                }
                grants
            }
        };
        grants.dedup();
        Acl {
            owner: (owner != bucket_owner).then(|| owner.to_owned()),
            grants,
        }
    }
}

/// A refused ACL request: S3's error code and message.
#[derive(Debug, PartialEq, Eq)]
pub struct AclRefused {
    pub code: &'static str,
    pub message: String,
}

fn refused(code: &'static str, message: impl Into<String>) -> AclRefused {
    AclRefused {
        code,
        message: message.into(),
    }
}

/// The `x-amz-grant-*` headers and the permission each grants.
const GRANT_HEADERS: [(&str, Permission); 5] = [
    ("x-amz-grant-read", Permission::Read),
    ("x-amz-grant-write", Permission::Write),
    ("x-amz-grant-read-acp", Permission::ReadAcp),
    ("x-amz-grant-write-acp", Permission::WriteAcp),
    ("x-amz-grant-full-control", Permission::FullControl),
];

/// The ACL a request's headers ask for, if any. Whether the keys it names exist is the
/// caller's to check (after the bucket's ownership, which S3 checks first).
pub fn from_headers(headers: &HeaderMap) -> Result<Option<Requested>, AclRefused> {
    let canned = match headers.get("x-amz-acl") {
        None => None,
        Some(value) => Some(canned(value.to_str().unwrap_or_default().trim())?),
    };
    let mut grants = Vec::new();
    for (name, permission) in GRANT_HEADERS {
        for value in headers.get_all(name) {
            for grantee in value.to_str().unwrap_or_default().split(',') {
                let grantee = header_grantee(grantee)?;
                grants.push(Grant { grantee, permission });
                if grants.len() > MAX_GRANTS {
                    return Err(too_many_grants());
                }
            }
        }
    }
    match (canned, grants.is_empty()) {
        (Some(_), false) => Err(refused(
            "InvalidRequest",
            "Specifying both Canned ACLs and Header Grants is not allowed",
        )),
        (Some(canned), true) => Ok(Some(Requested::Canned(canned))),
        (None, false) => Ok(Some(Requested::Grants(grants))),
        (None, true) => Ok(None),
    }
}

pub fn too_many_grants() -> AclRefused {
    refused(
        "MalformedACLError",
        format!("The ACL you provided has more than {MAX_GRANTS} grants"),
    )
}

fn canned(text: &str) -> Result<Canned, AclRefused> {
    Ok(match text {
        "private" => Canned::Private,
        "public-read" => Canned::PublicRead,
        "public-read-write" => Canned::PublicReadWrite,
        "authenticated-read" => Canned::AuthenticatedRead,
        "bucket-owner-read" => Canned::BucketOwnerRead,
        "bucket-owner-full-control" => Canned::BucketOwnerFullControl,
        "aws-exec-read" | "log-delivery-write" => {
            return Err(refused(
                "NotImplemented",
                format!("The canned ACL {text} is not implemented: pgvs3 has no EC2 or log delivery"),
            ));
        }
        _ => return Err(refused("InvalidArgument", "The canned ACL is not valid")),
    })
}

/// One `type="value"` of a grant header.
fn header_grantee(text: &str) -> Result<Grantee, AclRefused> {
    let invalid = || {
        refused(
            "InvalidArgument",
            format!("Invalid grantee in a grant header: {}", text.trim()),
        )
    };
    let (kind, value) = text.trim().split_once('=').ok_or_else(invalid)?;
    let value = value.trim();
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    match kind.trim().to_ascii_lowercase().as_str() {
        "id" => Ok(Grantee::Key(value.to_owned())),
        "uri" => grantee_group(value),
        "emailaddress" => Err(by_email()),
        _ => Err(invalid()),
    }
}

/// A grant to a group, by its URI.
pub fn grantee_group(uri: &str) -> Result<Grantee, AclRefused> {
    match uri {
        ALL_USERS => Ok(Grantee::AllUsers),
        AUTHENTICATED_USERS => Ok(Grantee::AuthenticatedUsers),
        LOG_DELIVERY => Err(refused(
            "NotImplemented",
            "Grants to the LogDelivery group are not implemented: pgvs3 has no server access logs",
        )),
        _ => Err(refused("InvalidArgument", "Invalid group uri")),
    }
}

/// What S3 answers a grant by e-mail address outside the regions that still take them.
pub fn by_email() -> AclRefused {
    refused(
        "UnresolvableGrantByEmailAddress",
        "The e-mail address you provided does not match any account on record.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(n, v)| (n.parse::<http::HeaderName>().unwrap(), v.parse().unwrap()))
            .collect()
    }

    #[test]
    fn canned_acls_expand_to_s3s_grants() {
        let read = Requested::Canned(Canned::PublicRead).resolve("AKOWNER", "AKOWNER");
        assert_eq!(read.owner, None);
        assert!(read.is_public());
        assert!(read.allows(None, Permission::Read, false));
        assert!(!read.allows(None, Permission::Read, true), "IgnorePublicAcls");
        assert!(!read.allows(None, Permission::Write, false));
        assert!(read.allows(Some("AKOWNER"), Permission::WriteAcp, false));
        let auth = Requested::Canned(Canned::AuthenticatedRead).resolve("AKOWNER", "AKOWNER");
        assert!(auth.allows(Some("AKOTHER"), Permission::Read, false));
        assert!(!auth.allows(None, Permission::Read, false));
        let private = Requested::Canned(Canned::Private).resolve("AKOWNER", "AKOWNER");
        assert!(private.is_owner_only("AKOWNER"));
        assert!(private.is_private("AKOWNER"));
        let revoked = Requested::Grants(vec![]).resolve("AKOWNER", "AKOWNER");
        assert!(revoked.is_owner_only("AKOWNER"), "taken where ACLs are disabled");
        assert!(!revoked.is_private("AKOWNER"), "kept, so that it is answered empty");
        assert!(!private.allows(Some("AKOTHER"), Permission::Read, false));
    }

    #[test]
    fn an_object_another_key_wrote_is_owned_by_it() {
        let full = Requested::Canned(Canned::BucketOwnerFullControl).resolve("AKWRITER", "AKOWNER");
        assert_eq!(full.owner.as_deref(), Some("AKWRITER"));
        assert!(full.allows(Some("AKOWNER"), Permission::Read, false));
        let private = Requested::Canned(Canned::Private).resolve("AKWRITER", "AKOWNER");
        assert!(!private.allows(Some("AKOWNER"), Permission::Read, false));
        // The object's owner keeps its ACL even when no grant names it.
        let none = Requested::Grants(vec![]).resolve("AKWRITER", "AKOWNER");
        assert!(none.allows(Some("AKWRITER"), Permission::ReadAcp, false));
        assert!(!none.allows(Some("AKWRITER"), Permission::Read, false));
    }

    #[test]
    fn grant_headers_name_keys_and_groups() {
        let requested = from_headers(&headers(&[
            (
                "x-amz-grant-read",
                "id=\"AKB\", uri=\"http://acs.amazonaws.com/groups/global/AllUsers\"",
            ),
            ("x-amz-grant-write-acp", "ID=AKC"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(requested.keys().collect::<Vec<_>>(), ["AKB", "AKC"]);
        let acl = requested.resolve("AKOWNER", "AKOWNER");
        assert!(acl.allows(Some("AKB"), Permission::Read, false));
        assert!(acl.allows(Some("AKC"), Permission::WriteAcp, false));
        assert!(!acl.allows(Some("AKC"), Permission::Write, false));
        assert!(acl.is_public());
        // The owner granted nothing to itself: only what it names.
        assert!(!acl.is_owner_only("AKOWNER"));
    }

    #[test]
    fn refused_grants_get_s3s_codes() {
        let code = |pairs: &[(&str, &str)]| from_headers(&headers(pairs)).err().map(|e| e.code);
        assert_eq!(
            code(&[("x-amz-grant-read", "emailAddress=\"a@example.com\"")]),
            Some("UnresolvableGrantByEmailAddress")
        );
        assert_eq!(code(&[("x-amz-grant-read", "nobody")]), Some("InvalidArgument"));
        assert_eq!(
            code(&[("x-amz-grant-read", "uri=\"http://example.com\"")]),
            Some("InvalidArgument")
        );
        assert_eq!(code(&[("x-amz-acl", "public-write")]), Some("InvalidArgument"));
        assert_eq!(code(&[("x-amz-acl", "log-delivery-write")]), Some("NotImplemented"));
        assert_eq!(
            code(&[("x-amz-acl", "private"), ("x-amz-grant-read", "id=AKB")]),
            Some("InvalidRequest")
        );
        let many = vec!["id=AKB"; MAX_GRANTS + 1].join(",");
        assert_eq!(code(&[("x-amz-grant-read", many.as_str())]), Some("MalformedACLError"));
        assert_eq!(from_headers(&HeaderMap::new()), Ok(None));
    }

    #[test]
    fn stored_acls_read_back() {
        let acl = Requested::Canned(Canned::PublicReadWrite).resolve("AKW", "AKOWNER");
        let text = serde_json::to_string(&acl).unwrap();
        assert_eq!(serde_json::from_str::<Acl>(&text).unwrap(), acl);
    }
}
