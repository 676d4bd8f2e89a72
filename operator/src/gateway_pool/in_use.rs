//! A pool in use is not deleted: while a Bucket or an OriginCache refers to it, its cleanup
//! (dropping or retaining the bucket, revoking the key) needs the pool's database, so the pool
//! and the Secrets that reach that database (credentials, master key, CA) carry the finalizer
//! [`IN_USE`], as a PersistentVolumeClaim in use by a pod carries `kubernetes.io/pvc-protection`.
//! Deleting the namespace deletes everything at once; the finalizers keep the pool and its
//! Secrets readable until the Buckets' cleanups ran, then go.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::context::{Context, Result};
use crate::crd::{Bucket, GatewayPool, OriginCache};
use crate::finalizer;

/// The finalizer on a pool, and on the Secrets of its catalog, while resources refer to it.
pub const IN_USE: &str = "pgvs3.io/in-use";

/// The resources of one namespace that may refer to pools.
pub struct Namespace {
    pub pools: Vec<GatewayPool>,
    pub buckets: Vec<Bucket>,
    pub caches: Vec<OriginCache>,
}

impl Namespace {
    /// `Bucket <name>` and `OriginCache <name>` of the resources that refer to `pool`, sorted.
    pub fn referrers(&self, pool: &str) -> Vec<String> {
        let buckets = self
            .buckets
            .iter()
            .filter(|bucket| bucket.spec.gateway_pool_ref == pool)
            .map(|bucket| format!("Bucket {}", bucket.name_any()));
        let caches = self
            .caches
            .iter()
            .filter(|cache| cache.spec.gateway_pool_ref == pool)
            .map(|cache| format!("OriginCache {}", cache.name_any()));
        let mut referrers: Vec<String> = buckets.chain(caches).collect();
        referrers.sort();
        referrers
    }

    /// The Secrets to hold: those of every pool some resource refers to (pools on one
    /// cluster share theirs, so one pool's last Bucket gone releases only what no other
    /// pool in use still needs).
    pub fn held_secrets(&self) -> BTreeSet<String> {
        self.pools
            .iter()
            .filter(|pool| !self.referrers(&pool.name_any()).is_empty())
            .flat_map(|pool| pool.spec.catalog_secrets(&pool.name_any()))
            .collect()
    }
}

/// Holds or releases `pool`'s catalog Secrets as its namespace's resources need them; the
/// resources that refer to `pool`.
pub async fn hold_secrets(ctx: &Context, pool: &GatewayPool, namespace: &str) -> Result<Vec<String>> {
    let all = ListParams::default();
    let resources = Namespace {
        pools: Api::<GatewayPool>::namespaced(ctx.client.clone(), namespace)
            .list(&all)
            .await?
            .items,
        buckets: Api::<Bucket>::namespaced(ctx.client.clone(), namespace)
            .list(&all)
            .await?
            .items,
        caches: Api::<OriginCache>::namespaced(ctx.client.clone(), namespace)
            .list(&all)
            .await?
            .items,
    };
    let held = resources.held_secrets();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    for name in pool.spec.catalog_secrets(&pool.name_any()) {
        if let Some(secret) = secrets.get_opt(&name).await? {
            finalizer::mark(&secrets, &secret, IN_USE, held.contains(&name)).await?;
        }
    }
    Ok(resources.referrers(&pool.name_any()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(name: &str, postgres: serde_json::Value) -> GatewayPool {
        serde_json::from_value(json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
            "metadata": {"name": name, "namespace": "team"}, "spec": {"postgres": postgres}}))
        .unwrap()
    }

    fn bucket(name: &str, pool: &str) -> Bucket {
        serde_json::from_value(json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket",
            "metadata": {"name": name, "namespace": "team"}, "spec": {"gatewayPoolRef": pool}}))
        .unwrap()
    }

    fn cache(name: &str, pool: &str) -> OriginCache {
        serde_json::from_value(json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "OriginCache",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"gatewayPoolRef": pool, "credentialsSecretRef": "origin", "bucket": "mirror",
                     "origin": {"endpoint": "http://origin.example", "bucket": "o"}}}))
        .unwrap()
    }

    #[test]
    fn only_the_secrets_of_pools_in_use_are_held() {
        let resources = Namespace {
            pools: vec![
                pool("objects", json!({"clusterName": "pg"})),
                pool("reads", json!({"clusterName": "pg"})),
                pool(
                    "other",
                    json!({"host": "db.example", "secretRef": "other-login", "sslMode": "disable"}),
                ),
            ],
            buckets: vec![bucket("photos", "objects"), bucket("stray", "ghost")],
            caches: vec![cache("mirror", "objects")],
        };
        assert_eq!(resources.referrers("objects"), ["Bucket photos", "OriginCache mirror"]);
        assert!(resources.referrers("other").is_empty());
        let held: Vec<String> = resources.held_secrets().into_iter().collect();
        assert_eq!(held, ["pg-app", "pg-ca", "pg-pgvs3-master-key"]);
    }

    #[test]
    fn nothing_is_held_without_referrers() {
        let resources = Namespace {
            pools: vec![pool("objects", json!({"clusterName": "pg"}))],
            buckets: vec![bucket("photos", "elsewhere")],
            caches: vec![],
        };
        assert!(resources.held_secrets().is_empty());
    }
}
