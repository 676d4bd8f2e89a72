//! A Bucket's workload identity (`spec.workloadIdentity`): the role its ServiceAccounts may
//! assume through STS AssumeRoleWithWebIdentity — trusted: tokens of the cluster's issuer for
//! audience `pgvs3` whose subject is one of them; granted: this bucket only — and the
//! ConfigMap `<name>-identity` that tells their pods the role and the endpoints.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams};
use kube::core::Selector;
use kube::{Resource, ResourceExt};
use pgvs3_catalog::sts;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio_postgres::GenericClient;

use super::build::{CA_CERT_KEY, Target, label_value};
use crate::context::{Context, Result};
use crate::crd::{AccessMode, Bucket, ServiceAccountRef, WorkloadIdentity};
use crate::kube_ops;

/// Where the documented pod spec mounts its projected token; the ConfigMap's
/// `AWS_WEB_IDENTITY_TOKEN_FILE`.
pub const TOKEN_FILE: &str = "/var/run/secrets/pgvs3.io/serviceaccount/token";
/// The longest role name (IAM's limit, which the catalog enforces).
const MAX_ROLE_NAME: usize = 64;
/// The session length when the Bucket sets none (AWS's default).
pub const DEFAULT_SESSION_SECONDS: i32 = 3600;
/// The most ServiceAccount UIDs a role's trust pins.
pub const MAX_PINNED_UIDS: usize = 1024;

/// `k8s.<namespace>.<name>`: the role of a Bucket. Namespaces have no dots, so no two Buckets
/// share one; the `k8s.` prefix keeps the operator's roles apart from those an admin writes
/// (`pgvs3 admin role`). Longer than [`MAX_ROLE_NAME`]: its first 55 characters, `-` and 8 hex
/// digits of a hash of namespace and name.
pub fn role_name(bucket: &Bucket) -> String {
    let namespace = bucket.namespace().unwrap_or_default();
    let name = bucket.name_any();
    let plain = format!("k8s.{namespace}.{name}");
    if plain.len() <= MAX_ROLE_NAME {
        return plain;
    }
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    let stem: String = plain.chars().take(55).collect();
    format!("{}-{}", stem.trim_end_matches(['-', '.']), hex::encode(&digest[..4]))
}

/// The namespace an entry names outright (default: the Bucket's); `None` for a
/// `namespaceSelector`.
fn named_namespace(bucket: &Bucket, account: &ServiceAccountRef) -> Option<String> {
    match &account.namespace_selector {
        Some(_) => None,
        None => Some(
            account
                .namespace
                .clone()
                .or_else(|| bucket.namespace())
                .unwrap_or_default(),
        ),
    }
}

/// Whether the Bucket's workload identity may name ServiceAccount `name` of `namespace` (by
/// name, or by `*`; an entry with a `namespaceSelector` for any namespace, whose labels are not
/// at hand here).
pub fn names_service_account(bucket: &Bucket, namespace: &str, name: &str) -> bool {
    bucket.spec.workload_identity.as_ref().is_some_and(|identity| {
        identity.service_accounts.iter().any(|account| {
            named_namespace(bucket, account).is_none_or(|named| named == namespace)
                && (account.name == name || account.name == "*")
        })
    })
}

/// Whether the Bucket's workload identity selects namespaces by label.
pub fn selects_namespaces(bucket: &Bucket) -> bool {
    bucket.spec.workload_identity.as_ref().is_some_and(|identity| {
        identity
            .service_accounts
            .iter()
            .any(|account| account.namespace_selector.is_some())
    })
}

/// Who may assume the role, resolved against the cluster now.
#[derive(Debug, Default, PartialEq)]
pub struct Principals {
    /// `system:serviceaccount:<namespace>:<name>` (`*`: any of the namespace), sorted, each once.
    pub subjects: Vec<String>,
    /// The UIDs of those ServiceAccounts that exist now, sorted, each once: what the trust
    /// pins, so a token of an account deleted (or deleted and recreated under its name) is
    /// refused although it has not expired.
    pub uids: Vec<String>,
}

/// The principals `identity` names: each entry's namespace (or those its `namespaceSelector`
/// matches now) and the ServiceAccounts there. ServiceAccounts and namespaces are watched
/// (run.rs): a change resolves them again. Why not, as a reason and a message for the Bucket's
/// conditions: more than [`MAX_PINNED_UIDS`] subjects or UIDs (each assumption reads the
/// trust), or a selector the operator may not follow.
pub async fn principals(
    ctx: &Context,
    bucket: &Bucket,
    identity: &WorkloadIdentity,
) -> Result<Result<Principals, (&'static str, String)>> {
    let too_many = || {
        let message = format!(
            "the ServiceAccounts named come to more than {MAX_PINNED_UIDS} subjects or UIDs to pin in the role's trust; name fewer"
        );
        Ok(Err(("TooManyServiceAccounts", message)))
    };
    let mut principals = Principals::default();
    for account in &identity.service_accounts {
        let namespaces = match (&account.namespace_selector, named_namespace(bucket, account)) {
            (_, Some(named)) => vec![named],
            (Some(selector), None) => match selected_namespaces(ctx, selector).await? {
                Some(Ok(namespaces)) => namespaces,
                Some(Err(refused)) => return Ok(Err(refused)),
                None => return too_many(),
            },
            (None, None) => Vec::new(),
        };
        for namespace in namespaces {
            principals
                .subjects
                .push(sts::service_account_subject(&namespace, &account.name));
            let accounts: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &namespace);
            if account.name == "*" {
                let params = ListParams::default().limit(MAX_PINNED_UIDS as u32 + 1);
                let listed = accounts.list_metadata(&params).await?;
                if listed
                    .metadata
                    .continue_
                    .as_deref()
                    .is_some_and(|next| !next.is_empty())
                {
                    return too_many();
                }
                principals
                    .uids
                    .extend(listed.items.into_iter().filter_map(|account| account.metadata.uid));
            } else if let Some(found) = accounts.get_metadata_opt(&account.name).await? {
                principals.uids.extend(found.metadata.uid);
            }
            if principals.uids.len() > MAX_PINNED_UIDS || principals.subjects.len() > MAX_PINNED_UIDS {
                return too_many();
            }
        }
    }
    for list in [&mut principals.subjects, &mut principals.uids] {
        list.sort();
        list.dedup();
    }
    Ok(Ok(principals))
}

/// The names of the namespaces `selector` matches now; `None` when more than
/// [`MAX_PINNED_UIDS`]; a refusal when the selector is malformed or the operator may not list
/// namespaces (its namespaced role, `watchNamespace`).
async fn selected_namespaces(
    ctx: &Context,
    selector: &LabelSelector,
) -> Result<Option<Result<Vec<String>, (&'static str, String)>>> {
    let selector = match Selector::try_from(selector.clone()) {
        Ok(selector) => selector,
        Err(err) => return Ok(Some(Err(("InvalidNamespaceSelector", err.to_string())))),
    };
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let params = ListParams::default()
        .labels_from(&selector)
        .limit(MAX_PINNED_UIDS as u32 + 1);
    let listed = match namespaces.list_metadata(&params).await {
        Ok(listed) => listed,
        Err(kube::Error::Api(status)) if status.code == 403 => {
            let message = format!(
                "namespaceSelector needs the operator's cluster-wide role to list namespaces (not with watchNamespace): {}",
                status.message
            );
            return Ok(Some(Err(("NamespaceSelectorForbidden", message))));
        }
        Err(err) => return Err(err.into()),
    };
    if listed
        .metadata
        .continue_
        .as_deref()
        .is_some_and(|next| !next.is_empty())
    {
        return Ok(None);
    }
    Ok(Some(Ok(listed
        .items
        .into_iter()
        // A namespace being deleted takes its ServiceAccounts with it.
        .filter(|namespace| namespace.metadata.deletion_timestamp.is_none())
        .filter_map(|namespace| namespace.metadata.name)
        .collect())))
}

/// The role's trust: tokens of the cluster's issuer for audience `pgvs3` (the projected
/// token's `audience`) of one of `principals`.
pub fn trust(issuer: &str, principals: Principals) -> sts::Trust {
    sts::Trust {
        issuer: issuer.to_string(),
        audience: sts::DEFAULT_AUDIENCE.to_string(),
        subjects: principals.subjects,
        service_account_uids: Some(principals.uids),
    }
}

/// The role's policy: the bucket `bucket_name` and nothing else — under `prefixes` only when
/// the Bucket limits its key to them — read-only (objects read, listings, the bucket's
/// location) or everything.
pub fn policy(bucket_name: &str, prefixes: &[String], access: AccessMode) -> serde_json::Value {
    let bucket = format!("arn:aws:s3:::{bucket_name}");
    let objects: Vec<String> = if prefixes.is_empty() {
        vec![format!("{bucket}/*")]
    } else {
        prefixes.iter().map(|prefix| format!("{bucket}/{prefix}*")).collect()
    };
    let object_actions = match access {
        AccessMode::ReadWrite => json!("s3:*"),
        AccessMode::ReadOnly => json!(["s3:GetObject*"]),
    };
    let list_actions = json!([
        "s3:ListBucket",
        "s3:ListBucketVersions",
        "s3:ListBucketMultipartUploads"
    ]);
    let mut list = json!({"Sid": "List", "Effect": "Allow", "Action": list_actions, "Resource": bucket});
    if !prefixes.is_empty() {
        let listed: Vec<String> = prefixes.iter().map(|prefix| format!("{prefix}*")).collect();
        list["Condition"] = json!({"StringLike": {"s3:prefix": listed}});
    }
    let bucket_actions = match (access, prefixes.is_empty()) {
        // The whole bucket, read-write: its settings too, as its owner's key may.
        (AccessMode::ReadWrite, true) => json!("s3:*"),
        _ => json!("s3:GetBucketLocation"),
    };
    json!({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "Objects", "Effect": "Allow", "Action": object_actions, "Resource": objects},
            list,
            {"Sid": "Bucket", "Effect": "Allow", "Action": bucket_actions, "Resource": bucket},
        ],
    })
}

/// `<name>-identity`.
pub fn config_map_name(bucket: &Bucket) -> String {
    format!("{}-identity", bucket.name_any())
}

/// What a pod of one of the ServiceAccounts needs besides its token: the role, the endpoints
/// (STS is served on the S3 endpoint), the region and the bucket, and the CA with TLS. Mounted
/// with `envFrom` (`ca.crt`, no variable name, is skipped there; mount it as a file for
/// `AWS_CA_BUNDLE`).
pub fn config_map(bucket: &Bucket, target: &Target, role_arn: &str) -> ConfigMap {
    let mut data = BTreeMap::from([
        ("AWS_ROLE_ARN".to_string(), role_arn.to_string()),
        ("AWS_WEB_IDENTITY_TOKEN_FILE".to_string(), TOKEN_FILE.to_string()),
        ("AWS_ENDPOINT_URL".to_string(), target.endpoint.clone()),
        ("AWS_ENDPOINT_URL_S3".to_string(), target.endpoint.clone()),
        ("AWS_ENDPOINT_URL_STS".to_string(), target.endpoint.clone()),
        ("AWS_REGION".to_string(), target.region.clone()),
        // boto3 (botocore) reads only this one: without it its STS client, and any client of a
        // regional service, stops at NoRegionError (the node tier's boto3 pod showed it)
        ("AWS_DEFAULT_REGION".to_string(), target.region.clone()),
        ("BUCKET_NAME".to_string(), target.bucket_name.clone()),
    ]);
    if let Some(ca) = &target.ca_cert {
        data.insert(CA_CERT_KEY.to_string(), ca.clone());
    }
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(bucket)),
            namespace: bucket.namespace(),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/managed-by".to_string(), "pgvs3-operator".to_string()),
                ("pgvs3.io/bucket".to_string(), label_value(&bucket.name_any())),
            ])),
            owner_references: crate::crd::controller_reference(bucket),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// Writes the Bucket's role into the catalog, its trust admitting `principals`; its ARN.
pub async fn put_role(
    client: &impl GenericClient,
    bucket: &Bucket,
    identity: &WorkloadIdentity,
    issuer: &str,
    principals: Principals,
    bucket_name: &str,
) -> Result<String> {
    let name = role_name(bucket);
    let access = identity.access.unwrap_or(bucket.spec.access);
    let trust = trust(issuer, principals);
    let policy = policy(bucket_name, &bucket.spec.access_prefixes, access);
    let seconds = identity.max_session_seconds.unwrap_or(DEFAULT_SESSION_SECONDS);
    sts::put_role(client, &name, &trust, &policy, seconds).await?;
    Ok(sts::role_arn(&name))
}

/// Removes the Bucket's role from the catalog (none there: nothing to do).
pub async fn delete_role(client: &impl GenericClient, bucket: &Bucket) -> Result<()> {
    sts::delete_role(client, &role_name(bucket)).await?;
    Ok(())
}

/// Applies the Bucket's ConfigMap.
pub async fn apply_config_map(ctx: &Context, bucket: &Bucket, target: &Target, role_arn: &str) -> Result<()> {
    let namespace = bucket.namespace().unwrap_or_default();
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    kube_ops::apply(&config_maps, &config_map(bucket, target, role_arn)).await?;
    Ok(())
}

/// Deletes the object `name` the operator wrote in the Bucket's namespace (its ConfigMap once
/// `workloadIdentity` is unset, its credentials Secret once `staticKey` is off), if the Bucket
/// still controls it; gone already is fine.
pub async fn delete_written<K>(ctx: &Context, bucket: &Bucket, name: &str) -> Result<()>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let namespace = bucket.namespace().unwrap_or_default();
    kube_ops::delete_owned(&Api::<K>::namespaced(ctx.client.clone(), &namespace), name, bucket).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::BucketSpec;

    fn bucket(namespace: &str, name: &str) -> Bucket {
        let spec: BucketSpec = serde_json::from_value(json!({"gatewayPoolRef": "pool"})).unwrap();
        let mut bucket = Bucket::new(name, spec);
        bucket.metadata.namespace = Some(namespace.into());
        bucket
    }

    #[test]
    fn role_names_are_per_namespace_and_name_and_bounded() {
        assert_eq!(role_name(&bucket("team", "photos")), "k8s.team.photos");
        let long = bucket("team", &"a".repeat(100));
        let name = role_name(&long);
        assert!(name.len() <= MAX_ROLE_NAME, "{name}");
        assert!(name.starts_with("k8s.team.aaa"), "{name}");
        assert_ne!(name, role_name(&bucket("team", &"a".repeat(101))), "distinct per name");
        assert_ne!(role_name(&bucket("a-b", "c")), role_name(&bucket("a", "b-c")));
        assert!(
            role_name(&bucket(&"n".repeat(63), "x"))
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+=,.@-_".contains(c))
        );
    }

    #[test]
    fn entries_name_their_namespace_the_buckets_or_a_selector() {
        let mut photos = bucket("team", "photos");
        assert!(!names_service_account(&photos, "team", "app"), "no workload identity");
        assert!(!selects_namespaces(&photos));
        let identity: WorkloadIdentity = serde_json::from_value(json!({"serviceAccounts": [
            {"name": "app"},
            {"name": "*", "namespace": "batch"},
        ]}))
        .unwrap();
        let accounts = &identity.service_accounts;
        assert_eq!(named_namespace(&photos, &accounts[0]).as_deref(), Some("team"));
        assert_eq!(named_namespace(&photos, &accounts[1]).as_deref(), Some("batch"));
        photos.spec.workload_identity = Some(identity);
        assert!(names_service_account(&photos, "team", "app"));
        assert!(!names_service_account(&photos, "team", "other"));
        assert!(!names_service_account(&photos, "apps", "app"));
        assert!(names_service_account(&photos, "batch", "anyone"));
        assert!(!selects_namespaces(&photos));

        let selected: WorkloadIdentity = serde_json::from_value(json!({"serviceAccounts": [
            {"name": "reports", "namespaceSelector": {"matchLabels": {"team": "data"}}},
        ]}))
        .unwrap();
        assert_eq!(named_namespace(&photos, &selected.service_accounts[0]), None);
        photos.spec.workload_identity = Some(selected);
        assert!(selects_namespaces(&photos));
        // Any namespace may be selected: its account's change is looked at.
        assert!(names_service_account(&photos, "anywhere", "reports"));
        assert!(!names_service_account(&photos, "anywhere", "app"));
    }

    #[test]
    fn the_policy_grants_the_bucket_only() {
        let read_only = policy("team-photos", &[], AccessMode::ReadOnly);
        let text = read_only.to_string();
        assert!(
            text.contains("arn:aws:s3:::team-photos/*") && !text.contains("s3:*"),
            "{text}"
        );
        let scoped = policy("team-photos", &["in/".to_string()], AccessMode::ReadWrite);
        assert_eq!(
            scoped["Statement"][0]["Resource"],
            json!(["arn:aws:s3:::team-photos/in/*"])
        );
        assert_eq!(
            scoped["Statement"][1]["Condition"]["StringLike"]["s3:prefix"],
            json!(["in/*"])
        );
        assert_eq!(scoped["Statement"][2]["Action"], "s3:GetBucketLocation");
    }
}
