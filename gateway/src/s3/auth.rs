//! SigV4 secrets from the catalog, and the rule that every request is signed.

use std::sync::{Arc, OnceLock};

use s3s::S3Result;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};

use crate::store::Catalog;

pub struct CatalogAuth {
    pub catalog: Arc<Catalog>,
}

#[async_trait::async_trait]
impl S3Auth for CatalogAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.catalog.access_key(access_key).await {
            Ok(Some(key)) => Ok(SecretKey::from(key.secret.as_str())),
            Ok(None) => Err(s3s::s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )),
            Err(err) => Err(super::errors::s3_error(err, None)),
        }
    }
}

/// Filled in during routing with what s3s parsed, for metrics and the request's span.
#[derive(Clone, Default)]
pub struct RequestFacts(Arc<Facts>);

#[derive(Default)]
struct Facts {
    operation: OnceLock<&'static str>,
    bucket: OnceLock<String>,
}

impl RequestFacts {
    pub fn operation(&self) -> Option<&'static str> {
        self.0.operation.get().copied()
    }

    pub fn bucket(&self) -> Option<&str> {
        self.0.bucket.get().map(String::as_str)
    }
}

pub struct SignedOnly;

#[async_trait::async_trait]
impl S3Access for SignedOnly {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let name = operation_name(cx.s3_op().name());
        let bucket = cx.s3_path().get_bucket_name().map(str::to_owned);
        if let Some(facts) = cx.extensions_mut().get::<RequestFacts>() {
            let _ = facts.0.operation.set(name);
            if let Some(bucket) = bucket {
                let _ = facts.0.bucket.set(bucket);
            }
        }
        if cx.credentials().is_none() {
            return Err(s3s::s3_error!(AccessDenied, "Anonymous access is not allowed."));
        }
        Ok(())
    }
}

/// Interns an operation name so metric labels are `&'static str` without leaking per request.
fn operation_name(name: &str) -> &'static str {
    static NAMES: OnceLock<std::sync::Mutex<std::collections::HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Default::default).lock().expect("operation names");
    if let Some(known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}
