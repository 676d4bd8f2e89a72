//! An OriginCache's CA bundle (`spec.origin.caBundle`): read from its Secret or ConfigMap,
//! checked as the gateway checks `--origin-ca-file`, and the bundles a pool's gateways mount.
//! A bundle that cannot be read or used is reported by its OriginCache and never mounted: the
//! gateway refuses such a file at start, which would stop every gateway of the pool.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use sha2::{Digest, Sha256};

use crate::context::Result;
use crate::crd::{CaBundle, OriginCache};

/// Where a bundle is kept.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    Secret(String),
    ConfigMap(String),
}

impl Source {
    pub fn of(bundle: &CaBundle) -> Option<Source> {
        match (&bundle.secret_ref, &bundle.config_map_ref) {
            (Some(secret), None) => Some(Source::Secret(secret.clone())),
            (None, Some(config_map)) => Some(Source::ConfigMap(config_map.clone())),
            // The CRD's rule admits neither; one admitted before it (or without validation).
            _ => None,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Source::Secret(name) => format!("Secret {name}"),
            Source::ConfigMap(name) => format!("ConfigMap {name}"),
        }
    }
}

/// A bundle a pool's gateways mount: where it is, and a digest of its text (in the pods'
/// checksum, since the gateway reads the file at start: a new bundle rolls them).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mounted {
    pub source: Source,
    pub key: String,
    pub digest: String,
}

/// The bundle's PEM text, or why it cannot be used (a condition's message).
pub async fn read(client: &Client, namespace: &str, bundle: &CaBundle) -> Result<Result<String, String>> {
    let Some(source) = Source::of(bundle) else {
        return Ok(Err(
            "caBundle needs exactly one of secretRef or configMapRef".to_string()
        ));
    };
    let key = &bundle.key;
    let text = match &source {
        Source::Secret(name) => Api::<Secret>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await?
            .map(|secret| {
                secret
                    .data
                    .and_then(|mut data| data.remove(key))
                    .map(|value| String::from_utf8(value.0).ok())
            }),
        Source::ConfigMap(name) => Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await?
            .map(|config_map| config_map.data.and_then(|mut data| data.remove(key)).map(Some)),
    };
    let what = source.describe();
    Ok(match text {
        None => Err(format!("{what} does not exist")),
        Some(None) => Err(format!("{what} has no key {key:?}")),
        Some(Some(None)) => Err(format!("{what}: key {key:?} is not UTF-8")),
        Some(Some(Some(pem))) => check(&pem)
            .map(|()| pem)
            .map_err(|why| format!("{what} key {key:?}: {why}")),
    })
}

/// Whether the gateway can take `pem` as CA certificates: PEM certificates, each usable as a
/// trust anchor (its HTTP client panics on one that is not, so the gateway refuses the file).
pub fn check(pem: &str) -> Result<(), String> {
    let certs = pgvs3_pgtls::pem_certs(pem.as_bytes()).map_err(|err| format!("{err:#}"))?;
    let mut roots = pgvs3_pgtls::rustls::RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .map_err(|err| format!("a certificate not usable as a CA: {err}"))?;
    }
    Ok(())
}

/// The bundle `cache` has its pool's gateways mount, its text not read (an empty digest):
/// what `render` shows.
pub fn wanted(cache: &OriginCache) -> Option<Mounted> {
    let bundle = cache.spec.origin.ca_bundle.as_ref()?;
    Some(Mounted {
        source: Source::of(bundle)?,
        key: bundle.key.clone(),
        digest: String::new(),
    })
}

/// The bundles that can be used of the OriginCaches of `namespace` on one of the pools
/// `pools` (a Standby pool serves the caches of its cluster's Primary pool too), each once, in
/// a stable order.
pub async fn of_pools(client: &Client, namespace: &str, pools: &[String]) -> Result<Vec<Mounted>> {
    let caches = Api::<OriginCache>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?;
    let mut mounted = Vec::new();
    for cache in caches.items {
        let (Some(bundle), Some(wanted)) = (&cache.spec.origin.ca_bundle, wanted(&cache)) else {
            continue;
        };
        if !pools.contains(&cache.spec.gateway_pool_ref) || cache.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match read(client, namespace, bundle).await? {
            Ok(pem) => mounted.push(Mounted {
                digest: hex::encode(Sha256::digest(pem.as_bytes())),
                ..wanted
            }),
            Err(problem) => tracing::debug!(cache = %cache.name_any(), %problem, "CA bundle not mounted"),
        }
    }
    mounted.sort();
    mounted.dedup();
    Ok(mounted)
}
