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

/// Filled in during routing with the S3 operation's name, for metrics and logs.
#[derive(Clone, Default)]
pub struct OperationSlot(pub Arc<OnceLock<&'static str>>);

pub struct SignedOnly;

#[async_trait::async_trait]
impl S3Access for SignedOnly {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let name = operation_name(cx.s3_op().name());
        if let Some(slot) = cx.extensions_mut().get::<OperationSlot>() {
            let _ = slot.0.set(name);
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
