//! The gateways' ConfigMap: their non-secret settings, and the checksum that rolls the pods
//! when those (or the Secrets they read) change.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::role_label;
use super::volumes::TLS_DIR;
use crate::crd::{GatewayPool, ObjectOwnership};

/// Gateway settings (flags' `PGVS3_*` twins) that are not secret.
pub(super) fn settings(pool: &GatewayPool) -> BTreeMap<String, String> {
    let spec = &pool.spec;
    let mut env = BTreeMap::from([
        ("PGVS3_ADMIN_ADDR".to_string(), format!("0.0.0.0:{}", spec.admin_port)),
        ("PGVS3_REGION".to_string(), spec.region.clone()),
        ("PGVS3_POOL_SIZE".to_string(), spec.pool_size.to_string()),
        ("PGVS3_LOG_FORMAT".to_string(), "json".to_string()),
        // A gateway whose Service leads to a database of the other role (a misrouted `-rw` or
        // `-ro`) reports unready instead of serving from it.
        ("PGVS3_REQUIRE_ROLE".to_string(), role_label(spec.role).to_string()),
    ]);
    // Only when not the gateway's default: a pool that does not set it keeps its ConfigMap (and
    // its pods) as they were.
    if spec.default_object_ownership != ObjectOwnership::default() {
        env.insert(
            "PGVS3_S3_DEFAULT_OBJECT_OWNERSHIP".to_string(),
            spec.default_object_ownership.as_str().to_string(),
        );
    }
    let protocols = [
        ("PGVS3_S3_ADDR", &spec.protocols.s3),
        ("PGVS3_RESP_ADDR", &spec.protocols.resp),
        ("PGVS3_OJS_ADDR", &spec.protocols.ojs),
    ];
    for (name, protocol) in protocols {
        // The gateway serves RESP and OJS by default, so a disabled protocol is switched off
        // explicitly rather than left unset.
        let value = match (protocol.enabled, name) {
            (true, _) => format!("0.0.0.0:{}", protocol.port),
            // S3 cannot be switched off; unexposed, it listens on loopback only.
            (false, "PGVS3_S3_ADDR") => continue,
            (false, _) => "off".to_string(),
        };
        env.insert(name.to_string(), value);
    }
    if let Some(admission) = &spec.admission {
        let limits = [
            ("PGVS3_S3_MAX_ACTIVE", admission.max_active.map(|v| v.to_string())),
            ("PGVS3_S3_MAX_WAITING", admission.max_waiting.map(|v| v.to_string())),
            ("PGVS3_ADMISSION_WAIT", admission.wait_timeout.clone()),
        ];
        env.extend(limits.into_iter().filter_map(|(k, v)| Some((k.to_string(), v?))));
    }
    if let Some(console) = spec.console.as_ref().filter(|console| console.enabled) {
        env.insert("PGVS3_CONSOLE_ADDR".to_string(), format!("0.0.0.0:{}", console.port));
    }
    if spec.tls.is_some() {
        env.extend([
            ("PGVS3_TLS_CERT".to_string(), format!("{TLS_DIR}/tls.crt")),
            ("PGVS3_TLS_KEY".to_string(), format!("{TLS_DIR}/tls.key")),
            // Probes and scrapers reach the admin port without TLS.
            ("PGVS3_TLS_PLAINTEXT".to_string(), "admin".to_string()),
        ]);
    }
    env
}

pub fn checksum(config: &BTreeMap<String, String>, secrets_digest: &str) -> String {
    let mut hasher = Sha256::new();
    for (key, value) in config {
        hasher.update(key.as_bytes());
        hasher.update([0]);
        hasher.update(value.as_bytes());
        hasher.update([0]);
    }
    hasher.update(secrets_digest.as_bytes());
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{checksum_of, pool, primary};
    use super::super::{Inputs, build};
    use super::*;

    #[test]
    fn the_default_object_ownership_reaches_the_gateways_only_when_set() {
        let config = |pool: &GatewayPool| settings(pool);
        let mut pool = primary();
        assert!(!config(&pool).contains_key("PGVS3_S3_DEFAULT_OBJECT_OWNERSHIP"));
        pool.spec.default_object_ownership = ObjectOwnership::ObjectWriter;
        assert_eq!(config(&pool)["PGVS3_S3_DEFAULT_OBJECT_OWNERSHIP"], "ObjectWriter");
        let parsed = self::pool(
            "apiVersion: pgvs3.io/v1alpha1\nkind: GatewayPool\nmetadata: {name: p, namespace: ns}\nspec: {postgres: {clusterName: db}, defaultObjectOwnership: BucketOwnerPreferred}",
        );
        assert_eq!(
            config(&parsed)["PGVS3_S3_DEFAULT_OBJECT_OWNERSHIP"],
            "BucketOwnerPreferred"
        );
    }
    #[test]
    fn checksum_changes_with_settings_and_secrets_only() {
        let base = build(&primary(), &Inputs::default());
        assert_eq!(checksum_of(&base), checksum_of(&build(&primary(), &Inputs::default())));
        let mut bigger = primary();
        bigger.spec.pool_size = 64;
        assert_ne!(checksum_of(&base), checksum_of(&build(&bigger, &Inputs::default())));
        let rotated = Inputs {
            secrets_digest: "new".into(),
            ..Inputs::default()
        };
        assert_ne!(checksum_of(&base), checksum_of(&build(&primary(), &rotated)));
        // Scaling is not a configuration change: no pod restarts.
        let mut scaled = primary();
        scaled.spec.replicas = Some(5);
        assert_eq!(checksum_of(&base), checksum_of(&build(&scaled, &Inputs::default())));
    }
}
