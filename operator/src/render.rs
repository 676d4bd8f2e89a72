//! `pgvs3-operator render -f resources.yaml`: the objects the operator would apply, from the
//! same `build` functions the controllers use.

use crate::bucket::build::{self as bucket_build, Target};
use crate::bucket::role;
use crate::crd::{Bucket, GatewayPool, OriginCache, PoolRole};
use crate::gateway_pool::build::{self as pool_build, Inputs, endpoints};
use crate::origin_cache::build::{access_key_id, origin_row};
use crate::origin_cache::ca_bundle;
use kube::Resource;

/// Shown instead of the secret the operator generates at reconcile time.
pub const GENERATED: &str = "<generated-by-the-operator>";

/// Renders every pgvs3 resource in a multi-document YAML text. Pools referenced by Buckets and
/// OriginCaches are looked up in the same text (their endpoints go into the credentials Secret).
pub fn render(text: &str, inputs: &Inputs) -> anyhow::Result<String> {
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(text)?;
    let documents: Vec<_> = documents.into_iter().filter(|d| !d.is_null()).collect();
    let pools: Vec<GatewayPool> = documents
        .iter()
        .filter(|d| d["kind"] == "GatewayPool")
        .map(|d| serde_json::from_value(d.clone()))
        .collect::<Result<_, _>>()?;
    let caches: Vec<OriginCache> = documents
        .iter()
        .filter(|d| d["kind"] == "OriginCache")
        .map(|d| serde_json::from_value(d.clone()))
        .collect::<Result<_, _>>()?;
    let mut out = String::new();
    for document in &documents {
        let kind = document["kind"].as_str().unwrap_or_default();
        let values: Vec<serde_json::Value> = match kind {
            "GatewayPool" => pool_objects(&serde_json::from_value(document.clone())?, &pools, &caches, inputs),
            "Bucket" => bucket_objects(&serde_json::from_value(document.clone())?, &pools)?,
            "OriginCache" => cache_objects(&serde_json::from_value(document.clone())?, &pools, &mut out)?,
            other => anyhow::bail!("cannot render kind {other:?} (expected GatewayPool, Bucket or OriginCache)"),
        };
        for value in values {
            out.push_str("---\n");
            out.push_str(&serde_saphyr::to_string(&value)?);
        }
    }
    Ok(out)
}

/// A pool's objects, mounting the CA bundles of its OriginCaches in the same text (a Standby
/// pool's own are its cluster's Primary pool's).
fn pool_objects(
    pool: &GatewayPool,
    pools: &[GatewayPool],
    caches: &[OriginCache],
    inputs: &Inputs,
) -> Vec<serde_json::Value> {
    let served = |cache: &&OriginCache| {
        pools.iter().any(|served| {
            served.metadata.name.as_deref() == Some(cache.spec.gateway_pool_ref.as_str())
                && (served.metadata.name == pool.metadata.name
                    || (pool.spec.role == PoolRole::Standby
                        && pool.spec.postgres.cluster_name.is_some()
                        && served.spec.postgres.cluster_name == pool.spec.postgres.cluster_name))
        })
    };
    let mut origin_cas: Vec<_> = caches.iter().filter(served).filter_map(ca_bundle::wanted).collect();
    origin_cas.sort();
    origin_cas.dedup();
    let inputs = Inputs {
        origin_cas,
        ..inputs.clone()
    };
    pool_build::build(pool, &inputs).to_values()
}

/// A Bucket's credentials Secret (unless it has workload identity only) and its role's
/// ConfigMap (with workload identity).
fn bucket_objects(bucket: &Bucket, pools: &[GatewayPool]) -> anyhow::Result<Vec<serde_json::Value>> {
    let target = target(bucket, &bucket.spec.gateway_pool_ref, bucket.bucket_name(), pools);
    let namespace = bucket.metadata.namespace.as_deref().unwrap_or("default");
    let lake = pools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(bucket.spec.gateway_pool_ref.as_str()))
        .and_then(|pool| bucket_build::lake_catalog(bucket, pool, namespace));
    let secret = bucket_build::credentials_secret(
        bucket,
        &target,
        &bucket_build::access_key_id(bucket),
        GENERATED,
        lake.as_ref(),
    );
    let identity = bucket.spec.workload_identity.as_ref();
    let mut values = Vec::new();
    if identity.is_none_or(|identity| identity.static_key) {
        values.push(serde_json::to_value(secret)?);
    }
    if identity.is_some() {
        let arn = pgvs3_catalog::sts::role_arn(&role::role_name(bucket));
        values.push(serde_json::to_value(role::config_map(bucket, &target, &arn))?);
    }
    Ok(values)
}

/// An OriginCache's credentials Secret, after (in `out`) the catalog row it would put, as
/// comments.
fn cache_objects(
    cache: &OriginCache,
    pools: &[GatewayPool],
    out: &mut String,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let row = origin_row(cache).map_err(anyhow::Error::msg)?;
    let target = target(cache, &cache.spec.gateway_pool_ref, row.bucket.clone(), pools);
    out.push_str(&format!(
        "# OriginCache {}: the arguments of pgvs3.put_origin (with the credentials of Secret {})\n",
        cache.metadata.name.as_deref().unwrap_or_default(),
        cache.spec.credentials_secret_ref
    ));
    out.push_str(
        &serde_saphyr::to_string(&row)?
            .lines()
            .map(|l| format!("# {l}\n"))
            .collect::<String>(),
    );
    let secret = bucket_build::credentials_secret(cache, &target, &access_key_id(cache), GENERATED, None);
    Ok(vec![serde_json::to_value(secret)?])
}

/// Where `owner`'s bucket is served: by the pool `pool_ref` when it is in the same text.
fn target<K: Resource>(owner: &K, pool_ref: &str, bucket_name: String, pools: &[GatewayPool]) -> Target {
    let pool = pools.iter().find(|p| p.metadata.name.as_deref() == Some(pool_ref));
    let namespace = owner.meta().namespace.as_deref().unwrap_or("default");
    let read_endpoints = pool
        .and_then(|pool| pool.spec.postgres.cluster_name.as_ref())
        .map(|cluster| {
            pools
                .iter()
                .filter(|p| p.spec.role == PoolRole::Standby && p.spec.postgres.cluster_name.as_ref() == Some(cluster))
                .filter_map(|p| endpoints(p).s3)
                .collect()
        })
        .unwrap_or_default();
    Target {
        bucket_name,
        endpoint: pool
            .and_then(|p| endpoints(p).s3)
            .unwrap_or_else(|| format!("http://{pool_ref}.{namespace}.svc:9000")),
        region: pool.map_or_else(|| "us-east-1".to_string(), |p| p.spec.region.clone()),
        read_endpoints,
        // In the cluster's TLS Secret, which rendering offline cannot read.
        ca_cert: None,
    }
}
