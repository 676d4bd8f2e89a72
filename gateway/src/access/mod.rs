//! Bucket access rules as data: CORS rules and bucket policies, parsed once per catalog
//! version (they ride on the cached bucket) and matched per request. No SQL, no S3 wire types.

mod condition;
pub mod cors;
pub mod policy;

/// A bucket's access rules, as the catalog holds them.
#[derive(Debug, Default)]
pub struct BucketAccess {
    pub cors: Option<cors::CorsRules>,
    pub policy: Option<StoredPolicy>,
    pub public_access_block: Option<PublicAccessBlock>,
}

/// S3's public access block of a bucket. ACLs here never grant beyond the owner (a public
/// canned ACL is refused), so the two ACL settings are kept and reported and have nothing
/// more to block; the policy settings act on bucket policies.
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
    /// The rules from the catalog's `cors` and `policy` columns. A stored policy is parsed
    /// without checking its principals (a key named in it may have been deleted since).
    pub fn from_columns(
        name: &str,
        cors: Option<serde_json::Value>,
        policy: Option<String>,
        public_access_block: Option<serde_json::Value>,
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
        Ok(BucketAccess {
            cors,
            policy,
            public_access_block,
        })
    }
}
