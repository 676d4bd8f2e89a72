//! Bucket access rules as data: CORS rules and bucket policies, parsed once per catalog
//! version (they ride on the cached bucket) and matched per request. No SQL, no S3 wire types.

pub mod cors;
pub mod policy;

/// A bucket's access rules, as the catalog holds them.
#[derive(Debug, Default)]
pub struct BucketAccess {
    pub cors: Option<cors::CorsRules>,
    pub policy: Option<StoredPolicy>,
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
        Ok(BucketAccess { cors, policy })
    }
}
