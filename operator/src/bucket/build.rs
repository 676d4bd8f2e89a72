//! Bucket → its access key id and policy, its notification rules and its credentials Secret
//! (with a DuckLake's ATTACH string when asked). Pure. An OriginCache gets its key and Secret
//! from the same functions.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use sha2::{Digest, Sha256};

use pgvs3_catalog::lake::{self, LakeTarget};
use pgvs3_catalog::notifications::{NotificationRule, Notifications, RuleError};
use serde_json::json;

use crate::crd::{Bucket, GatewayPool, Notification, OriginCache, PoolRole};

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
    /// With TLS: the CA that issued the pool's certificate (`ca.crt` of its TLS Secret, a
    /// certificate, never a key), for clients to trust the `https://` endpoint.
    pub ca_cert: Option<String>,
}

/// The key of the CA certificate in a credentials Secret, as in cert-manager's TLS Secrets, so
/// a pod that mounts it gets a file `ca.crt` (`AWS_CA_BUNDLE` is a path).
pub const CA_CERT_KEY: &str = "ca.crt";

/// A resource that holds an access key, given to its users in a credentials Secret.
pub trait KeyHolder: Resource<DynamicType = ()> {
    /// The name of its credentials Secret: distinct per kind, so a Bucket and an OriginCache
    /// of the same name do not write (and own) one Secret.
    fn secret_name(&self) -> String;
}

/// `<name>-credentials`.
impl KeyHolder for Bucket {
    fn secret_name(&self) -> String {
        format!("{}-credentials", self.meta().name.as_deref().unwrap_or_default())
    }
}

/// `<name>-cache-credentials`; a cache whose status already names its Secret keeps that one
/// (caches made before the name changed have `<name>-credentials`, which their users read).
impl KeyHolder for OriginCache {
    fn secret_name(&self) -> String {
        self.status
            .as_ref()
            .and_then(|status| status.secret_name.clone())
            .unwrap_or_else(|| format!("{}-cache-credentials", self.meta().name.as_deref().unwrap_or_default()))
    }
}

/// The credentials Secret's name of the resource that owns the key.
pub fn secret_name<K: KeyHolder>(owner: &K) -> String {
    owner.secret_name()
}

/// The access key id of a Bucket.
pub fn access_key_id(bucket: &Bucket) -> String {
    key_id_of(bucket, "PGVS3B")
}

/// The custodian key of a Bucket's namespace and name: it holds a bucket a Bucket retained
/// (deletionPolicy Retain) until a Bucket of the same namespace and name adopts it. Derived
/// from namespace and name, not the uid, since the Bucket that adopts it is a new object; no
/// other namespace's Bucket can name it, and its secret is known to nobody.
pub fn custodian_key_id(bucket: &Bucket) -> String {
    let namespace = bucket.meta().namespace.as_deref().unwrap_or_default();
    let name = bucket.meta().name.as_deref().unwrap_or_default();
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    format!("PGVS3R{}", hex::encode_upper(&digest[..7]))
}

/// An access key id derived from the resource's uid: stable across reconciles and rotations
/// of the secret, and distinct for a re-created resource of the same name. The prefix (six
/// characters) tells the kinds apart.
pub fn key_id_of<K: Resource>(owner: &K, prefix: &str) -> String {
    let uid = owner.meta().uid.as_deref().unwrap_or_default();
    let digest = Sha256::digest(uid.as_bytes());
    format!("{prefix}{}", hex::encode_upper(&digest[..7]))
}

/// The generated key's own policy (an IAM identity policy, see docs/s3-compatibility.md) when
/// the Bucket limits it to `prefixes`: any object action on keys under them, listings whose
/// `prefix` is under one of them, and the bucket's location (SDKs ask for it). `None`: no
/// prefixes, no policy (the key is its bucket's owner). The prefixes are plain text (the CRD
/// admits no `*`, `?` or `$`), so each is matched literally, followed by anything.
pub fn key_policy(bucket_name: &str, prefixes: &[String]) -> Option<String> {
    if prefixes.is_empty() {
        return None;
    }
    let objects: Vec<String> = prefixes
        .iter()
        .map(|prefix| format!("arn:aws:s3:::{bucket_name}/{prefix}*"))
        .collect();
    let listed: Vec<String> = prefixes.iter().map(|prefix| format!("{prefix}*")).collect();
    let bucket = format!("arn:aws:s3:::{bucket_name}");
    let policy = json!({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ObjectsUnderPrefixes", "Effect": "Allow", "Action": "s3:*", "Resource": objects},
            {"Sid": "ListUnderPrefixes", "Effect": "Allow",
             "Action": ["s3:ListBucket", "s3:ListBucketVersions", "s3:ListBucketMultipartUploads"],
             "Resource": bucket, "Condition": {"StringLike": {"s3:prefix": listed}}},
            {"Sid": "Location", "Effect": "Allow", "Action": "s3:GetBucketLocation", "Resource": bucket},
        ],
    });
    Some(policy.to_string())
}

/// Why the Bucket's spec cannot be provisioned as written, beyond what the CRD's schema checks:
/// notification rules the catalog could never take, a lake whose files its key could not write.
pub fn spec_refusal(bucket: &Bucket) -> Option<String> {
    if let Some(Err(refused)) = bucket.spec.notifications.as_deref().map(notification_rules) {
        return Some(format!("notifications: {refused}"));
    }
    let prefixes = &bucket.spec.access_prefixes;
    let lake = bucket.spec.ducklake.as_ref().filter(|lake| lake.enabled)?;
    let data = lake.data_prefix.as_deref().unwrap_or_default();
    (!prefixes.is_empty() && !prefixes.iter().any(|prefix| data.starts_with(prefix.as_str()))).then(|| {
        format!(
            "ducklake.dataPrefix {data:?} is outside accessPrefixes {prefixes:?}: the key could not write the lake's files"
        )
    })
}

/// The Bucket's notification rules as the catalog takes them, or why they cannot be.
pub fn notification_rules(notifications: &[Notification]) -> Result<Notifications, RuleError> {
    let rules = notifications
        .iter()
        .enumerate()
        .map(|(n, notification)| {
            let events: Vec<&str> = notification.events.iter().map(String::as_str).collect();
            NotificationRule::new(
                notification
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("notification-{}", n + 1)),
                &notification.target,
                &events,
                notification.prefix.clone().unwrap_or_default(),
                notification.suffix.clone().unwrap_or_default(),
            )
        })
        .collect::<Result<_, _>>()?;
    Notifications::new(rules)
}

/// Where a DuckLake's catalog lives, as the Bucket's Secret names it: the pool's database,
/// without credentials (the workload brings its own, see docs/operator.md, DuckLake).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LakeCatalog {
    pub alias: String,
    /// Where in the bucket its files go (`""`: anywhere).
    pub data_prefix: String,
    /// The catalog tables' schema (`spec.ducklake.metadataSchema`, or the bucket's default).
    pub metadata_schema: Option<String>,
    pub host: String,
    pub port: u16,
    pub database: String,
    /// libpq's `sslmode`, the pool's.
    pub ssl_mode: String,
    /// The pool's database Secret (`username`, `password`), named for whoever may use it.
    pub credentials_secret: String,
}

/// The Bucket's lake catalog on `pool`'s database (of `namespace`), when its DuckLake is enabled.
pub fn lake_catalog(bucket: &Bucket, pool: &GatewayPool, namespace: &str) -> Option<LakeCatalog> {
    let lake = bucket.spec.ducklake.as_ref().filter(|lake| lake.enabled)?;
    let postgres = &pool.spec.postgres;
    Some(LakeCatalog {
        alias: lake.alias.clone(),
        data_prefix: lake.data_prefix.clone().unwrap_or_default(),
        metadata_schema: lake.metadata_schema.clone(),
        host: postgres.host_from_anywhere(PoolRole::Primary, namespace),
        port: u16::try_from(postgres.port()).unwrap_or(5432),
        database: postgres.database().to_string(),
        ssl_mode: postgres.ssl_mode().as_str().to_string(),
        credentials_secret: postgres.credentials_secret(),
    })
}

impl LakeCatalog {
    /// `DUCKLAKE_ATTACH`: the secret for the bucket's files (the Bucket's own key) and the
    /// ATTACH of the catalog, whose user and password libpq takes from `PGUSER`/`PGPASSWORD`.
    fn attach(&self, target: &Target, access_key_id: &str, secret_access_key: &str) -> String {
        let port = self.port.to_string();
        let conninfo = lake::conninfo_of(&[
            ("host", &self.host),
            ("port", &port),
            ("dbname", &self.database),
            ("sslmode", &self.ssl_mode),
        ]);
        lake::attach_sql(&LakeTarget {
            conninfo: &conninfo,
            bucket: &target.bucket_name,
            data_prefix: &self.data_prefix,
            access_key: access_key_id,
            secret_key: secret_access_key,
            endpoint: &target.endpoint,
            region: &target.region,
            alias: &self.alias,
            metadata_schema: &self
                .metadata_schema
                .clone()
                .unwrap_or_else(|| lake::metadata_schema(&target.bucket_name)),
            read_only: false,
        })
    }
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

/// A name as a label value: itself when it fits (63 characters), else its first 54, `-` and 8
/// hex digits of its hash (an object name goes up to 253 characters; a label the API server
/// refuses would keep the Secret, and so the resource's status, from ever being written).
pub fn label_value(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    let digest = Sha256::digest(name.as_bytes());
    let stem: String = name.chars().take(54).collect();
    format!("{}-{}", stem.trim_end_matches(['-', '.']), hex::encode(&digest[..4]))
}

/// The credentials Secret of `owner` (a Bucket or an OriginCache), owned by it: the AWS SDKs'
/// variables, plain `BUCKET_*` ones and COSI's; with `lake`, `DUCKLAKE_ATTACH` and
/// `DUCKLAKE_CATALOG_SECRET` (the pool's database Secret, by name: never its password).
pub fn credentials_secret<K: KeyHolder>(
    owner: &K,
    target: &Target,
    access_key_id: &str,
    secret_access_key: &str,
    lake: Option<&LakeCatalog>,
) -> Secret {
    let (host, port) = host_port(&target.endpoint);
    let read_endpoints = target.read_endpoints.join(",");
    let mut data = BTreeMap::from([
        ("AWS_ACCESS_KEY_ID", access_key_id.to_string()),
        ("AWS_SECRET_ACCESS_KEY", secret_access_key.to_string()),
        ("AWS_ENDPOINT_URL", target.endpoint.clone()),
        ("AWS_REGION", target.region.clone()),
        // boto3 and the AWS CLI v1 read only this one.
        ("AWS_DEFAULT_REGION", target.region.clone()),
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
    if let Some(ca) = &target.ca_cert {
        data.insert(CA_CERT_KEY, ca.clone());
    }
    if let Some(lake) = lake {
        data.insert("DUCKLAKE_ATTACH", lake.attach(target, access_key_id, secret_access_key));
        data.insert("DUCKLAKE_CATALOG_SECRET", lake.credentials_secret.clone());
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(owner)),
            namespace: owner.meta().namespace.clone(),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/managed-by".to_string(), "pgvs3-operator".to_string()),
                (
                    // pgvs3.io/bucket or pgvs3.io/origincache: the resource's name.
                    format!("pgvs3.io/{}", K::kind(&()).to_lowercase()),
                    label_value(owner.meta().name.as_deref().unwrap_or_default()),
                ),
            ])),
            owner_references: crate::crd::controller_reference(owner),
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
                access_prefixes: Vec::new(),
                notifications: None,
                ducklake: None,
                workload_identity: None,
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
    fn long_names_become_valid_label_values() {
        assert_eq!(label_value("photos"), "photos");
        let long = format!("{}.x", "a".repeat(53));
        let value = label_value(&long);
        assert!(value.len() <= 63 && value.starts_with(&"a".repeat(53)), "{value}");
        assert_ne!(
            value,
            label_value(&format!("{}.y", "a".repeat(53))),
            "distinct per name"
        );
        let dotted = format!("{}.{}", "b".repeat(53), "c".repeat(20));
        assert!(!label_value(&dotted).contains(".-"), "{}", label_value(&dotted));
    }

    #[test]
    fn custodian_keys_are_per_namespace_and_name_not_per_uid() {
        let custodian = custodian_key_id(&bucket("a"));
        assert_eq!(
            custodian,
            custodian_key_id(&bucket("b")),
            "a re-created Bucket finds its bucket"
        );
        let mut elsewhere = bucket("a");
        elsewhere.metadata.namespace = Some("other".into());
        assert_ne!(custodian, custodian_key_id(&elsewhere));
        assert_ne!(custodian, access_key_id(&bucket("a")));
        assert_eq!(custodian.len(), 20);
    }

    #[test]
    fn generated_bucket_names_include_the_namespace_and_a_hash() {
        let photos = bucket("a").bucket_name();
        assert!(
            photos.starts_with("team-photos-") && photos.len() == "team-photos-".len() + 8,
            "{photos}"
        );
        // The dash alone would make these one name.
        assert_ne!(
            crate::crd::default_bucket_name("team-a", "logs"),
            crate::crd::default_bucket_name("team", "a-logs")
        );
        assert!(crate::crd::default_bucket_name("team-a", "logs").starts_with("team-a-logs-"));
        // A name already recorded in the status is kept (Buckets made before the hash).
        let mut existing = bucket("a");
        existing.status = Some(crate::crd::BucketStatus {
            bucket_name: Some("team-photos".into()),
            ..Default::default()
        });
        assert_eq!(existing.bucket_name(), "team-photos");
        // An explicit name wins.
        existing.spec.bucket_name = Some("chosen".into());
        assert_eq!(existing.bucket_name(), "chosen");
    }

    #[test]
    fn prefixes_become_a_key_policy_matching_them_literally() {
        assert_eq!(key_policy("team-photos", &[]), None, "no prefixes, no policy");
        let policy: serde_json::Value =
            serde_json::from_str(&key_policy("team-photos", &["in/".into(), "o'k ".into()]).unwrap()).unwrap();
        let statements = policy["Statement"].as_array().unwrap();
        assert_eq!(
            statements[0]["Resource"],
            json!(["arn:aws:s3:::team-photos/in/*", "arn:aws:s3:::team-photos/o'k *"])
        );
        assert_eq!(statements[0]["Action"], "s3:*");
        assert_eq!(statements[1]["Resource"], "arn:aws:s3:::team-photos");
        assert_eq!(
            statements[1]["Condition"]["StringLike"]["s3:prefix"],
            json!(["in/*", "o'k *"])
        );
        assert!(
            statements
                .iter()
                .all(|s| s["Effect"] == "Allow" && s.get("Principal").is_none())
        );
    }

    fn notification(target: &str, id: Option<&str>) -> Notification {
        Notification {
            id: id.map(Into::into),
            target: target.into(),
            events: vec!["s3:ObjectCreated:*".into()],
            prefix: Some("in/".into()),
            suffix: None,
        }
    }

    #[test]
    fn notifications_map_onto_the_catalogs_rules() {
        let rules = notification_rules(&[
            notification("arn:pgvs3:ojs:::csv", None),
            notification("arn:pgvs3:webhook:::audit", Some("hook")),
        ])
        .unwrap();
        let ids: Vec<&str> = rules.rules.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["notification-1", "hook"]);
        assert_eq!(
            (rules.rules[0].queue.as_str(), rules.rules[0].prefix.as_str()),
            ("csv", "in/")
        );
        assert_eq!(rules.rules[1].webhook, "audit");
        assert_eq!(
            notification_rules(&[notification("arn:aws:sqs:us-east-1:1:q", None)]),
            Err(RuleError::UnknownDestination("arn:aws:sqs:us-east-1:1:q".into()))
        );
        assert_eq!(
            notification_rules(&[
                notification("arn:pgvs3:ojs:::a", Some("x")),
                notification("arn:pgvs3:ojs:::b", Some("x"))
            ]),
            Err(RuleError::DuplicateId("x".into()))
        );
    }

    #[test]
    fn a_lake_outside_the_keys_prefixes_is_refused() {
        let mut limited = bucket("a");
        limited.spec.access_prefixes = vec!["incoming/".into(), "tables/".into()];
        limited.spec.ducklake = Some(crate::crd::DuckLake {
            enabled: true,
            alias: "lake".into(),
            data_prefix: Some("tables/sales/".into()),
            metadata_schema: None,
        });
        assert_eq!(spec_refusal(&limited), None);
        limited.spec.ducklake.as_mut().unwrap().data_prefix = None;
        let refusal = spec_refusal(&limited).unwrap();
        assert!(refusal.contains("outside accessPrefixes"), "{refusal}");
        limited.spec.ducklake.as_mut().unwrap().enabled = false;
        assert_eq!(spec_refusal(&limited), None, "a disabled lake writes nothing");
        limited.spec.notifications = Some(vec![notification("arn:pgvs3:ojs:::q", None)]);
        limited.spec.notifications.as_mut().unwrap()[0].events = vec!["s3:ObjectRestore:*".into()];
        assert_eq!(
            spec_refusal(&limited).as_deref(),
            Some("notifications: The event s3:ObjectRestore:* is not raised by pgvs3")
        );
    }

    #[test]
    fn a_lake_puts_its_attach_string_in_the_secret_without_a_database_password() {
        let target = Target {
            bucket_name: "team-photos".into(),
            endpoint: "http://pool.team.svc:9000".into(),
            region: "eu-west-1".into(),
            read_endpoints: vec![],
            ca_cert: None,
        };
        let mut lake = LakeCatalog {
            alias: "sales".into(),
            data_prefix: "tables/".into(),
            metadata_schema: None,
            host: "pg-rw.team.svc".into(),
            port: 5432,
            database: "app".into(),
            ssl_mode: "verify-full".into(),
            credentials_secret: "pg-app".into(),
        };
        let secret = credentials_secret(&bucket("a"), &target, "KEYID", "s3cret", Some(&lake));
        let attach = text(&secret, "DUCKLAKE_ATTACH");
        assert!(
            attach.contains("KEY_ID 'KEYID', SECRET 's3cret', ENDPOINT 'pool.team.svc:9000'"),
            "{attach}"
        );
        assert!(attach.contains("USE_SSL false, REGION 'eu-west-1'"), "{attach}");
        assert!(
            attach.contains(
                "ATTACH 'ducklake:postgres:host=pg-rw.team.svc port=5432 dbname=app sslmode=verify-full' \
                 AS sales (DATA_PATH 's3://team-photos/tables/', METADATA_SCHEMA 'ducklake_team_photos')"
            ),
            "{attach}"
        );
        assert_eq!(text(&secret, "DUCKLAKE_CATALOG_SECRET"), "pg-app");
        // A lake made before per-bucket schemas keeps reading its tables in `public`.
        lake.metadata_schema = Some("public".into());
        let kept = credentials_secret(&bucket("a"), &target, "KEYID", "s3cret", Some(&lake));
        let attach = text(&kept, "DUCKLAKE_ATTACH");
        assert!(attach.contains("METADATA_SCHEMA 'public')"), "{attach}");
        let plain = credentials_secret(&bucket("a"), &target, "KEYID", "s3cret", None);
        assert!(!plain.data.unwrap().contains_key("DUCKLAKE_ATTACH"));
    }

    #[test]
    fn credentials_secret_has_aws_bucket_and_cosi_keys() {
        let target = Target {
            bucket_name: "team-photos".into(),
            endpoint: "http://pool.team.svc:9000".into(),
            region: "eu-west-1".into(),
            read_endpoints: vec!["http://ro-a.team.svc:9000".into(), "http://ro-b.team.svc:9000".into()],
            ca_cert: None,
        };
        let secret = credentials_secret(&bucket("a"), &target, "KEYID", "s3cret", None);
        assert_eq!(secret.metadata.name.as_deref(), Some("photos-credentials"));
        assert_eq!(secret.metadata.owner_references.as_ref().unwrap()[0].kind, "Bucket");
        assert_eq!(text(&secret, "AWS_ACCESS_KEY_ID"), "KEYID");
        assert_eq!(text(&secret, "AWS_SECRET_ACCESS_KEY"), "s3cret");
        assert_eq!(text(&secret, "AWS_ENDPOINT_URL"), "http://pool.team.svc:9000");
        assert_eq!(text(&secret, "AWS_REGION"), "eu-west-1");
        assert_eq!(text(&secret, "AWS_DEFAULT_REGION"), "eu-west-1");
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
        assert!(
            !secret.data.as_ref().unwrap().contains_key(CA_CERT_KEY),
            "no TLS, no CA"
        );

        let tls = Target {
            endpoint: "https://pool.team.svc:9000".into(),
            ca_cert: Some("-----BEGIN CERTIFICATE-----\n".into()),
            ..target
        };
        let secret = credentials_secret(&bucket("a"), &tls, "KEYID", "s3cret", None);
        assert_eq!(text(&secret, CA_CERT_KEY), "-----BEGIN CERTIFICATE-----\n");
    }
}
