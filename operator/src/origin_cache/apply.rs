//! Reconciles an OriginCache as far as the gateway allows today: validates it, follows its
//! credentials Secret and says plainly that the catalog cannot hold origins yet.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::build::origin_row;
use crate::context::{self, Context, Error, Result, backoff_key};
use crate::crd::{GatewayPool, OriginCache, OriginCacheStatus, Verdict, waiting};
use crate::gateway_pool::apply::{RESYNC, WAIT_FOR_DEPENDENCY};
use crate::kube_ops;

pub const KIND: &str = "OriginCache";

pub async fn reconcile(cache: Arc<OriginCache>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.reconcile(KIND);
    let namespace = cache.namespace().ok_or(Error::NoNamespace)?;
    let previous = cache.status.clone().unwrap_or_default();
    let pools: Api<GatewayPool> = Api::namespaced(ctx.client.clone(), &namespace);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);

    let mut credentials_version = None;
    let (verdicts, requeue) = if let Err(problem) = origin_row(&cache) {
        (blocked("InvalidSpec", &problem), RESYNC)
    } else if pools.get_opt(&cache.spec.gateway_pool_ref).await?.is_none() {
        let message = format!("GatewayPool {} does not exist", cache.spec.gateway_pool_ref);
        (blocked("PoolNotFound", &message), WAIT_FOR_DEPENDENCY)
    } else {
        let secret = match &cache.spec.credentials_secret_ref {
            Some(name) => secrets.get_opt(name).await?.map(Some).ok_or(name),
            None => Ok(None),
        };
        match secret {
            Err(name) => (
                blocked("CredentialsUnavailable", &format!("Secret {name} does not exist")),
                WAIT_FOR_DEPENDENCY,
            ),
            Ok(secret) => {
                credentials_version = secret.and_then(|s| s.resource_version());
                let message = "the gateway's catalog has no pgvs3.put_origin yet (cache tier issue); \
                               the origin is validated but not served";
                (blocked("OriginSupportUnavailable", message), RESYNC)
            }
        }
    };
    let status = OriginCacheStatus {
        observed_generation: cache.meta().generation,
        conditions: kube_ops::conditions(&ctx, &*cache, &previous.conditions, &verdicts).await,
        credentials_version,
    };
    let caches: Api<OriginCache> = Api::namespaced(ctx.client.clone(), &namespace);
    kube_ops::apply_status(
        &caches,
        &*cache,
        serde_json::to_value(status).expect("status serializes"),
    )
    .await?;
    ctx.succeeded(&backoff_key(KIND, &*cache));
    Ok(Action::requeue(requeue))
}

pub fn error_policy(cache: Arc<OriginCache>, error: &Error, ctx: Arc<Context>) -> Action {
    context::error_policy(KIND, &*cache, error, &ctx)
}

/// Like `waiting`, but an unsupported feature is not a degradation of what exists.
fn blocked(reason: &str, message: &str) -> Vec<Verdict> {
    let mut verdicts = waiting(reason, message);
    verdicts[2].status = reason != "OriginSupportUnavailable";
    verdicts
}
