//! Bucket access rules as data: CORS rules, bucket policies, ACLs and ownership controls,
//! parsed once per catalog version (they ride on the cached bucket) and matched per request. No
//! SQL, no S3 wire types.

pub mod acl;
mod condition;
pub mod cors;
pub mod policy;

/// A bucket's access rules, as the catalog holds them.
#[derive(Debug, Default)]
pub struct BucketAccess {
    pub cors: Option<cors::CorsRules>,
    pub policy: Option<StoredPolicy>,
    pub public_access_block: Option<PublicAccessBlock>,
    /// The ownership controls; `None` once deleted (the bucket then behaves as ObjectWriter).
    pub ownership: Option<acl::Ownership>,
    /// The bucket's ACL; `None`: private.
    pub acl: Option<acl::Acl>,
}

/// S3's public access block of a bucket: the ACL settings act on ACLs (`access/acl.rs`), the
/// policy settings on bucket policies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PublicAccessBlock {
    pub block_public_acls: bool,
    pub ignore_public_acls: bool,
    /// PutBucketPolicy refuses a public policy.
    pub block_public_policy: bool,
    /// A public policy's grants to everyone are ignored (its Denies still hold).
    pub restrict_public_buckets: bool,
}

/// A bucket policy: the document as the client put it (GetBucketPolicy answers it) and parsed.
#[derive(Debug)]
pub struct StoredPolicy {
    pub text: String,
    pub rules: policy::BucketPolicy,
}

impl BucketAccess {
    /// The rules from the catalog's `cors`, `policy`, `public_access_block`, `object_ownership`
    /// and `acl` columns. A stored policy is parsed without checking its principals (a key
    /// named in it may have been deleted since).
    pub fn from_columns(
        name: &str,
        cors: Option<serde_json::Value>,
        policy: Option<String>,
        public_access_block: Option<serde_json::Value>,
        ownership: Option<&str>,
        acl: Option<serde_json::Value>,
    ) -> anyhow::Result<BucketAccess> {
        let cors = cors
            .map(serde_json::from_value::<cors::CorsRules>)
            .transpose()
            .map_err(|err| anyhow::anyhow!("bucket {name}: stored CORS rules: {err}"))?;
        let policy = match policy {
            None => None,
            Some(text) => {
                let rules = policy::BucketPolicy::parse(&text, name, &|_| true)
                    .map_err(|err| anyhow::anyhow!("bucket {name}: stored policy: {err:?}"))?;
                Some(StoredPolicy { text, rules })
            }
        };
        let public_access_block = public_access_block
            .map(serde_json::from_value::<PublicAccessBlock>)
            .transpose()
            .map_err(|err| anyhow::anyhow!("bucket {name}: stored public access block: {err}"))?;
        let ownership = ownership
            .map(|text| {
                acl::Ownership::parse(text).ok_or_else(|| anyhow::anyhow!("bucket {name}: object ownership {text}"))
            })
            .transpose()?;
        let acl = acl
            .map(serde_json::from_value::<acl::Acl>)
            .transpose()
            .map_err(|err| anyhow::anyhow!("bucket {name}: stored ACL: {err}"))?;
        Ok(BucketAccess {
            cors,
            policy,
            public_access_block,
            ownership,
            acl,
        })
    }

    /// Whether ACLs grant anything on this bucket (its ownership is not BucketOwnerEnforced).
    pub fn acls_enabled(&self) -> bool {
        acl::Ownership::acls_enabled(self.ownership)
    }

    /// The public access block's IgnorePublicAcls.
    pub fn ignores_public_acls(&self) -> bool {
        self.public_access_block.is_some_and(|block| block.ignore_public_acls)
    }

    /// The public access block's BlockPublicAcls.
    pub fn blocks_public_acls(&self) -> bool {
        self.public_access_block.is_some_and(|block| block.block_public_acls)
    }
}
