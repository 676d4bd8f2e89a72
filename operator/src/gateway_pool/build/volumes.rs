//! The gateways' volumes and their mounts: a scratch /tmp, the TLS and PostgreSQL CA Secrets
//! and the origins' CA bundles.

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, EmptyDirVolumeSource, KeyToPath, SecretVolumeSource, Volume, VolumeMount,
};

use crate::crd::{GatewayPool, POSTGRES_CA_KEY};
use crate::origin_cache::ca_bundle::{Mounted, Source};

/// Where the listeners' `kubernetes.io/tls` Secret is mounted.
pub(super) const TLS_DIR: &str = "/etc/pgvs3/tls";
/// The keys of the listeners' Secret the gateway reads (`PGVS3_TLS_CERT`, `PGVS3_TLS_KEY`).
const TLS_KEYS: [&str; 2] = ["tls.crt", "tls.key"];
/// Where PostgreSQL's CA Secret is mounted.
pub(super) const POSTGRES_CA_DIR: &str = "/etc/pgvs3/postgres-ca";
/// Where the OriginCaches' CA bundles are mounted: `-0`, `-1`, ... each holding `ca.crt`.
const ORIGIN_CA_DIR: &str = "/etc/pgvs3/origin-ca";

/// Where the gateway reads the `index`th origin CA bundle.
pub(super) fn origin_ca_file(index: usize) -> String {
    format!("{ORIGIN_CA_DIR}-{index}/ca.crt")
}

/// The gateway's volumes and where each is mounted: a scratch /tmp, the TLS Secrets and the
/// origins' CA bundles.
pub(super) fn volumes(pool: &GatewayPool, origin_cas: &[Mounted]) -> Vec<(VolumeMount, Volume)> {
    let mut volumes = vec![(
        mount("tmp", "/tmp"),
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
    )];
    // Secret volumes, never subPath: the kubelet then swaps renewed files in place and the
    // gateway reloads them.
    if let Some(tls) = &pool.spec.tls {
        volumes.push((mount("tls", TLS_DIR), secret_volume("tls", &tls.secret_ref, &TLS_KEYS)));
    }
    if let Some(ca) = pool.spec.postgres.ca_secret() {
        volumes.push((
            mount("postgres-ca", POSTGRES_CA_DIR),
            secret_volume("postgres-ca", &ca, &[POSTGRES_CA_KEY]),
        ));
    }
    for (index, ca) in origin_cas.iter().enumerate() {
        let name = format!("origin-ca-{index}");
        volumes.push((
            mount(&name, &format!("{ORIGIN_CA_DIR}-{index}")),
            origin_ca_volume(name, ca),
        ));
    }
    volumes
}

/// Read-only, except the scratch /tmp.
fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(path != "/tmp"),
        ..VolumeMount::default()
    }
}

/// Only the keys the gateway reads (`items`): a CloudNativePG CA Secret also holds the CA's
/// private key (`ca.key`), which would let whoever reads the pod's files sign certificates
/// PostgreSQL trusts.
fn secret_volume(name: &str, secret: &str, keys: &[&str]) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            items: Some(
                keys.iter()
                    .map(|key| KeyToPath {
                        key: (*key).into(),
                        path: (*key).into(),
                        mode: None,
                    })
                    .collect(),
            ),
            // Readable by the gateway's group (fsGroup) only: one holds a private key.
            default_mode: Some(0o440),
            optional: Some(false),
        }),
        ..Volume::default()
    }
}

/// An OriginCache's CA bundle, from its Secret or ConfigMap.
fn origin_ca_volume(name: String, ca: &Mounted) -> Volume {
    // The bundle's key, whatever it is called, as `ca.crt`.
    let items = Some(vec![KeyToPath {
        key: ca.key.clone(),
        path: "ca.crt".into(),
        mode: None,
    }]);
    match &ca.source {
        Source::Secret(secret) => Volume {
            name,
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.clone()),
                items,
                default_mode: Some(0o440),
                optional: Some(false),
            }),
            ..Volume::default()
        },
        Source::ConfigMap(config_map) => Volume {
            name,
            config_map: Some(ConfigMapVolumeSource {
                name: config_map.clone(),
                items,
                default_mode: Some(0o444),
                optional: Some(false),
            }),
            ..Volume::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{checksum_of, primary, secret_mounts};
    use super::super::{Inputs, build, endpoints};
    use super::*;

    #[test]
    fn only_the_keys_the_gateway_reads_are_mounted() {
        let mut pool = primary();
        pool.spec.tls = Some(crate::crd::TlsSpec {
            secret_ref: "gateway-tls".into(),
        });
        let objects = build(&pool, &Inputs::default());
        let volumes = objects.deployment.spec.unwrap().template.spec.unwrap().volumes.unwrap();
        let keys = |name: &str| -> Vec<String> {
            let volume = volumes.iter().find(|v| v.name == name).unwrap();
            let items = volume.secret.as_ref().unwrap().items.as_ref().unwrap();
            items.iter().map(|item| item.key.clone()).collect()
        };
        assert_eq!(keys("postgres-ca"), ["ca.crt"], "never the CA's ca.key");
        assert_eq!(keys("tls"), ["tls.crt", "tls.key"]);
    }
    #[test]
    fn a_tls_secret_is_mounted_switches_endpoints_to_https_and_rolls_the_pods() {
        let mut pool = primary();
        pool.spec.protocols.resp.enabled = true;
        pool.spec.tls = Some(crate::crd::TlsSpec {
            secret_ref: "gw-tls".into(),
        });
        let objects = build(&pool, &Inputs::default());
        let mounts = secret_mounts(&objects.deployment);
        assert_eq!(mounts["tls"], ("gw-tls".into(), TLS_DIR.into(), true));
        let config = objects.config_map.data.as_ref().unwrap();
        assert_eq!(config["PGVS3_TLS_CERT"], format!("{TLS_DIR}/tls.crt"));
        assert_eq!(config["PGVS3_TLS_KEY"], format!("{TLS_DIR}/tls.key"));
        assert_eq!(config["PGVS3_TLS_PLAINTEXT"], "admin", "probes stay plaintext");
        let endpoints = endpoints(&pool);
        assert_eq!(endpoints.s3.as_deref(), Some("https://p.ns.svc:9000"));
        assert_eq!(endpoints.resp.as_deref(), Some("rediss://p.ns.svc:6379"));
        // A renewed certificate changes the Secrets' digest, hence the pod template.
        let renewed = Inputs {
            secrets_digest: "renewed".into(),
            ..Inputs::default()
        };
        assert_ne!(checksum_of(&objects), checksum_of(&build(&pool, &renewed)));
        assert!(!secret_mounts(&build(&primary(), &Inputs::default()).deployment).contains_key("tls"));
    }
}
