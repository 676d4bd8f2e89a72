//! Bucket → its access key id and credentials Secret. Pure. An OriginCache gets its key and
//! Secret from the same functions.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use sha2::{Digest, Sha256};

use crate::crd::Bucket;

pub const FINALIZER: &str = "pgvs3.io/bucket-cleanup";

/// Where the bucket is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub bucket_name: String,
    /// S3 endpoint URL of the Primary pool, e.g. `http://pool.ns.svc:9000`.
    pub endpoint: String,
    pub region: String,
    /// S3 endpoint URLs of Standby pools on the same cluster.
    pub read_endpoints: Vec<String>,
}

/// `<name>-credentials`, the Secret of the resource that owns the key.
pub fn secret_name<K: Resource>(owner: &K) -> String {
    format!("{}-credentials", owner.meta().name.as_deref().unwrap_or_default())
}

/// The access key id of a Bucket.
pub fn access_key_id(bucket: &Bucket) -> String {
    key_id_of(bucket, "PGVS3B")
}

/// An access key id derived from the resource's uid: stable across reconciles and rotations
/// of the secret, and distinct for a re-created resource of the same name. The prefix (six
/// characters) tells the kinds apart.
pub fn key_id_of<K: Resource>(owner: &K, prefix: &str) -> String {
    let uid = owner.meta().uid.as_deref().unwrap_or_default();
    let digest = Sha256::digest(uid.as_bytes());
    format!("{prefix}{}", hex::encode_upper(&digest[..7]))
}

/// Host and port of an `http://host:port` endpoint.
fn host_port(endpoint: &str) -> (String, String) {
    let authority = endpoint.split_once("://").map_or(endpoint, |(_, rest)| rest);
    let authority = authority.split('/').next().unwrap_or_default();
    match authority.rsplit_once(':') {
        Some((host, port)) => (host.to_string(), port.to_string()),
        None => (authority.to_string(), "80".to_string()),
    }
}

/// The credentials Secret of `owner` (a Bucket or an OriginCache), owned by it: the AWS SDKs'
/// variables, plain `BUCKET_*` ones and COSI's.
pub fn credentials_secret<K: Resource<DynamicType = ()>>(
    owner: &K,
    target: &Target,
    access_key_id: &str,
    secret_access_key: &str,
) -> Secret {
    let (host, port) = host_port(&target.endpoint);
    let read_endpoints = target.read_endpoints.join(",");
    let data = BTreeMap::from([
        ("AWS_ACCESS_KEY_ID", access_key_id.to_string()),
        ("AWS_SECRET_ACCESS_KEY", secret_access_key.to_string()),
        ("AWS_ENDPOINT_URL", target.endpoint.clone()),
        ("AWS_REGION", target.region.clone()),
        ("BUCKET_NAME", target.bucket_name.clone()),
        ("BUCKET_HOST", host),
        ("BUCKET_PORT", port),
        ("BUCKET_REGION", target.region.clone()),
        ("BUCKET_READ_ENDPOINT_URLS", read_endpoints.clone()),
        ("COSI_S3_BUCKET_ID", target.bucket_name.clone()),
        ("COSI_S3_ENDPOINT", target.endpoint.clone()),
        ("COSI_S3_REGION", target.region.clone()),
        ("COSI_S3_ADDRESSING_STYLE", "path".to_string()),
        ("COSI_S3_ACCESS_KEY_ID", access_key_id.to_string()),
        ("COSI_S3_ACCESS_SECRET_KEY", secret_access_key.to_string()),
        ("COSI_S3_READ_ENDPOINTS", read_endpoints),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(owner)),
            namespace: owner.meta().namespace.clone(),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/managed-by".to_string(), "pgvs3-operator".to_string()),
                (
                    // pgvs3.io/bucket or pgvs3.io/origincache: the resource's name.
                    format!("pgvs3.io/{}", K::kind(&()).to_lowercase()),
                    owner.meta().name.clone().unwrap_or_default(),
                ),
            ])),
            owner_references: owner.controller_owner_ref(&()).map(|reference| vec![reference]),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::BucketSpec;

    fn bucket(uid: &str) -> Bucket {
        let mut bucket = Bucket::new(
            "photos",
            BucketSpec {
                bucket_name: None,
                gateway_pool_ref: "pool".into(),
                deletion_policy: Default::default(),
                quota: None,
                access: Default::default(),
            },
        );
        bucket.metadata.namespace = Some("team".into());
        bucket.metadata.uid = Some(uid.into());
        bucket
    }

    fn text(secret: &Secret, key: &str) -> String {
        String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
    }

    #[test]
    fn access_key_ids_are_stable_per_uid_and_valid_for_the_catalog() {
        let id = access_key_id(&bucket("a"));
        assert_eq!(id, access_key_id(&bucket("a")));
        assert_ne!(id, access_key_id(&bucket("b")));
        assert_eq!(id.len(), 20, "as long as an AWS access key id");
        assert!(id.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()));
    }

    #[test]
    fn generated_bucket_names_include_the_namespace() {
        assert_eq!(bucket("a").bucket_name(), "team-photos");
    }

    #[test]
    fn credentials_secret_has_aws_bucket_and_cosi_keys() {
        let target = Target {
            bucket_name: "team-photos".into(),
            endpoint: "http://pool.team.svc:9000".into(),
            region: "eu-west-1".into(),
            read_endpoints: vec!["http://ro-a.team.svc:9000".into(), "http://ro-b.team.svc:9000".into()],
        };
        let secret = credentials_secret(&bucket("a"), &target, "KEYID", "s3cret");
        assert_eq!(secret.metadata.name.as_deref(), Some("photos-credentials"));
        assert_eq!(secret.metadata.owner_references.as_ref().unwrap()[0].kind, "Bucket");
        assert_eq!(text(&secret, "AWS_ACCESS_KEY_ID"), "KEYID");
        assert_eq!(text(&secret, "AWS_SECRET_ACCESS_KEY"), "s3cret");
        assert_eq!(text(&secret, "AWS_ENDPOINT_URL"), "http://pool.team.svc:9000");
        assert_eq!(text(&secret, "AWS_REGION"), "eu-west-1");
        assert_eq!(text(&secret, "BUCKET_NAME"), "team-photos");
        assert_eq!(text(&secret, "BUCKET_HOST"), "pool.team.svc");
        assert_eq!(text(&secret, "BUCKET_PORT"), "9000");
        assert_eq!(
            text(&secret, "BUCKET_READ_ENDPOINT_URLS"),
            "http://ro-a.team.svc:9000,http://ro-b.team.svc:9000"
        );
        assert_eq!(text(&secret, "COSI_S3_ACCESS_KEY_ID"), "KEYID");
        assert_eq!(text(&secret, "COSI_S3_ACCESS_SECRET_KEY"), "s3cret");
        assert_eq!(text(&secret, "COSI_S3_ENDPOINT"), "http://pool.team.svc:9000");
        assert_eq!(text(&secret, "COSI_S3_BUCKET_ID"), "team-photos");
    }
}
