//! GatewayPool → desired Kubernetes objects. Pure: no client, so every object can be unit
//! tested, golden-filed and rendered by `pgvs3-operator render`.

mod config;
mod database;
mod deployment;
mod service;
mod volumes;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::DynamicObject;

pub use self::config::checksum;
use self::config::settings;
use self::database::database_secret;
pub use self::database::{DATABASE_URL_KEY, database_secret_name, database_url};
use self::deployment::deployment;
pub use self::service::admin_service_name;
pub use self::service::service_monitor_resource;
use self::service::{admin_service, autoscaler, pod_disruption_budget, service, service_monitor};
use self::volumes::origin_ca_file;
use crate::crd::{Endpoints, GatewayPool, PoolRole};
use crate::origin_cache::ca_bundle::Mounted;

pub const CONTAINER: &str = "gateway";
pub const CHECKSUM_ANNOTATION: &str = "pgvs3.io/config-checksum";
pub const POOL_LABEL: &str = "pgvs3.io/pool";
pub const ROLE_LABEL: &str = "pgvs3.io/role";

/// What the pool's objects depend on besides its spec: facts the reconciler looked up.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// Digest of the referenced Secrets (database credentials, master key): a rotation rolls pods.
    pub secrets_digest: String,
    /// The Prometheus operator's ServiceMonitor CRD exists in the cluster.
    pub service_monitor_crd: bool,
    /// The login in the pool's database Secret, for the gateways' connection string.
    pub login: Login,
    /// The CA bundles of the OriginCaches the pool serves (`--origin-ca-file`).
    pub origin_cas: Vec<Mounted>,
}

/// A PostgreSQL user and password, as the pool's database Secret holds them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Login {
    pub user: String,
    pub password: String,
}

/// What `render` shows for a login it never reads.
impl Default for Login {
    fn default() -> Login {
        let unread = "<from the database Secret>".to_string();
        Login {
            user: unread.clone(),
            password: unread,
        }
    }
}

/// Everything one GatewayPool turns into.
#[derive(Clone, Debug)]
pub struct Objects {
    pub config_map: ConfigMap,
    /// The gateways' connection string, password included: a Secret of its own.
    pub database_secret: Secret,
    pub deployment: Deployment,
    pub service: Service,
    pub admin_service: Service,
    pub pod_disruption_budget: PodDisruptionBudget,
    pub autoscaler: Option<HorizontalPodAutoscaler>,
    pub service_monitor: Option<DynamicObject>,
}

impl Objects {
    /// All objects as JSON values, in apply order (ConfigMap before the Deployment that reads it).
    pub fn to_values(&self) -> Vec<serde_json::Value> {
        let mut values = vec![
            serde_json::to_value(&self.config_map),
            serde_json::to_value(&self.database_secret),
            serde_json::to_value(&self.service),
            serde_json::to_value(&self.admin_service),
            serde_json::to_value(&self.deployment),
            serde_json::to_value(&self.pod_disruption_budget),
        ];
        values.extend(self.autoscaler.iter().map(serde_json::to_value));
        values.extend(self.service_monitor.iter().map(serde_json::to_value));
        values.into_iter().map(|v| v.expect("k8s objects serialize")).collect()
    }
}

pub fn selector_labels(pool: &GatewayPool) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "pgvs3-gateway".to_string()),
        ("app.kubernetes.io/instance".to_string(), pool_name(pool)),
    ])
}

fn labels(pool: &GatewayPool) -> BTreeMap<String, String> {
    let mut labels = selector_labels(pool);
    labels.insert("app.kubernetes.io/managed-by".into(), "pgvs3-operator".into());
    labels.insert("app.kubernetes.io/component".into(), "gateway".into());
    labels.insert(POOL_LABEL.into(), pool_name(pool));
    labels.insert(ROLE_LABEL.into(), role_label(pool.spec.role).into());
    labels
}

pub fn role_label(role: PoolRole) -> &'static str {
    match role {
        PoolRole::Primary => "primary",
        PoolRole::Standby => "standby",
    }
}

fn pool_name(pool: &GatewayPool) -> String {
    pool.metadata.name.clone().unwrap_or_default()
}

pub fn config_map_name(pool: &GatewayPool) -> String {
    format!("{}-config", pool_name(pool))
}

fn meta(pool: &GatewayPool, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: pool.metadata.namespace.clone(),
        labels: Some(labels(pool)),
        owner_references: owner(pool),
        ..ObjectMeta::default()
    }
}

/// The owner reference that garbage-collects children with their pool (absent when rendering
/// a manifest that was never stored, which has no uid yet), with `blockOwnerDeletion`
/// ([`crate::crd::controller_reference`]). Under the admission plugin
/// `OwnerReferencesPermissionEnforcement` that takes `update` on `gatewaypools/finalizers`, and
/// changing the reference of an existing child (re-adopting one orphaned by an
/// `--cascade=orphan` delete) takes `delete` on the child: the chart grants both, as
/// CloudNativePG's does.
fn owner(pool: &GatewayPool) -> Option<Vec<OwnerReference>> {
    crate::crd::controller_reference(pool)
}

/// Service endpoints, as clients inside the cluster reach them.
pub fn endpoints(pool: &GatewayPool) -> Endpoints {
    let host = format!(
        "{}.{}.svc",
        pool_name(pool),
        pool.metadata.namespace.as_deref().unwrap_or("default")
    );
    let protocols = &pool.spec.protocols;
    let (http, redis) = match pool.spec.tls {
        Some(_) => ("https", "rediss"),
        None => ("http", "redis"),
    };
    Endpoints {
        s3: protocols
            .s3
            .enabled
            .then(|| format!("{http}://{host}:{}", protocols.s3.port)),
        resp: protocols
            .resp
            .enabled
            .then(|| format!("{redis}://{host}:{}", protocols.resp.port)),
        ojs: protocols
            .ojs
            .enabled
            .then(|| format!("{http}://{host}:{}", protocols.ojs.port)),
    }
}

/// Why the pool's spec cannot be built as written, beyond what the CRD's schema checks (or did
/// not, for a pool admitted before its rules): a name that is empty, or no object name at all,
/// would have the gateways (or the operator's reads) wait forever for an object that cannot
/// exist.
pub fn spec_refusal(pool: &GatewayPool) -> Option<String> {
    let name = pool_name(pool);
    if !crate::crd::valid_pool_name(&name) {
        return Some(format!(
            "the pool's name {name:?} is no DNS label (lower case letters, digits and '-', starting with a letter, at most 63 characters): its Service could not take it"
        ));
    }
    let spec = &pool.spec;
    let postgres = &spec.postgres;
    let names = [
        ("postgres.clusterName", postgres.cluster_name.as_deref()),
        ("postgres.secretRef", postgres.secret_ref.as_deref()),
        ("postgres.caSecretRef", postgres.ca_secret_ref.as_deref()),
        (
            "masterKeySecretRef.name",
            spec.master_key_secret_ref.as_ref().map(|r| r.name.as_str()),
        ),
        (
            "protocols.ojsTokenSecretRef",
            spec.protocols.ojs_token_secret_ref.as_deref(),
        ),
        ("tls.secretRef", spec.tls.as_ref().map(|tls| tls.secret_ref.as_str())),
        (
            "rootKeySecretRef.name",
            spec.root_key_secret_ref.as_ref().map(|r| r.name.as_str()),
        ),
    ];
    let bad_name = names.into_iter().find_map(|(field, name)| {
        name.filter(|name| !crate::database::valid_object_name(name))
            .map(|name| (field, name))
    });
    if let Some((field, name)) = bad_name {
        return Some(format!("{field} {name:?} is not a valid object name"));
    }
    let empty = [
        ("postgres.host", postgres.host.as_deref()),
        ("postgres.database", postgres.database.as_deref()),
        (
            "masterKeySecretRef.key",
            spec.master_key_secret_ref.as_ref().map(|r| r.key.as_str()),
        ),
    ];
    let empty = empty
        .into_iter()
        .find(|(_, value)| value.is_some_and(str::is_empty))
        .map(|(field, _)| format!("{field} must not be empty"));
    empty.or_else(|| postgres.password_exposure())
}

pub fn build(pool: &GatewayPool, inputs: &Inputs) -> Objects {
    let mut config = settings(pool);
    if !inputs.origin_cas.is_empty() {
        let files: Vec<String> = (0..inputs.origin_cas.len()).map(origin_ca_file).collect();
        config.insert("PGVS3_ORIGIN_CA_FILE".to_string(), files.join(","));
    }
    // The gateway reads the bundles at start: a changed one rolls the pods.
    let bundles: String = inputs.origin_cas.iter().map(|ca| ca.digest.as_str()).collect();
    let checksum = checksum(&config, &format!("{}{bundles}", inputs.secrets_digest));
    let config_map = ConfigMap {
        metadata: meta(pool, config_map_name(pool)),
        data: Some(config),
        ..ConfigMap::default()
    };
    Objects {
        config_map,
        database_secret: database_secret(pool, &inputs.login),
        deployment: deployment(pool, checksum, &inputs.origin_cas),
        service: service(pool),
        admin_service: admin_service(pool),
        pod_disruption_budget: pod_disruption_budget(pool),
        autoscaler: autoscaler(pool),
        service_monitor: inputs.service_monitor_crd.then(|| service_monitor(pool)),
    }
}

/// The name of the port of `/healthz`, `/readyz` and `/metrics` (probes use it by name).
pub const ADMIN_PORT: &str = "admin";

fn ports(pool: &GatewayPool) -> Vec<(&'static str, i32)> {
    let protocols = &pool.spec.protocols;
    let mut ports: Vec<(&'static str, i32)> = [
        ("s3", &protocols.s3),
        ("resp", &protocols.resp),
        ("ojs", &protocols.ojs),
    ]
    .into_iter()
    .filter(|(_, protocol)| protocol.enabled)
    .map(|(name, protocol)| (name, protocol.port))
    .collect();
    ports.push((ADMIN_PORT, pool.spec.admin_port));
    if let Some(console) = pool.spec.console.as_ref().filter(|console| console.enabled) {
        ports.push(("console", console.port));
    }
    ports
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::EnvVar;

    use super::*;
    use crate::crd::{DEFAULT_REPLICAS, PostgresSpec, SslMode};

    pub(super) fn pool(yaml: &str) -> GatewayPool {
        let mut pool: GatewayPool = serde_saphyr::from_str(yaml).unwrap();
        pool.metadata.uid = Some("uid-1".into());
        pool
    }

    pub(super) fn primary() -> GatewayPool {
        pool(
            "apiVersion: pgvs3.io/v1alpha1\nkind: GatewayPool\nmetadata: {name: p, namespace: ns}\nspec: {postgres: {clusterName: db}}",
        )
    }
    pub(super) fn url_of(objects: &Objects) -> String {
        String::from_utf8(
            objects.database_secret.data.as_ref().unwrap()[DATABASE_URL_KEY]
                .0
                .clone(),
        )
        .unwrap()
    }
    #[test]
    fn empty_or_invalid_names_are_refused_before_anything_is_built() {
        assert_eq!(spec_refusal(&primary()), None);
        let mut pool = primary();
        pool.spec.postgres.ca_secret_ref = Some(String::new());
        assert_eq!(
            spec_refusal(&pool).as_deref(),
            Some(r#"postgres.caSecretRef "" is not a valid object name"#)
        );
        let mut pool = primary();
        pool.spec.protocols.ojs_token_secret_ref = Some("Not_A_Name".into());
        assert!(spec_refusal(&pool).unwrap().starts_with("protocols.ojsTokenSecretRef"));
        let mut pool = primary();
        pool.spec.postgres = PostgresSpec {
            host: Some(String::new()),
            secret_ref: Some("login".into()),
            ..PostgresSpec::default()
        };
        assert_eq!(spec_refusal(&pool).as_deref(), Some("postgres.host must not be empty"));
        for name in ["gw.prod", "1st", "Pool", &"p".repeat(64)] {
            let mut pool = primary();
            pool.metadata.name = Some(name.to_string());
            assert!(spec_refusal(&pool).unwrap().contains("no DNS label"), "{name}");
        }
        let mut pool = primary();
        pool.metadata.name = Some("p".repeat(63));
        assert_eq!(spec_refusal(&pool), None);
    }

    #[test]
    fn a_password_that_could_reach_an_unverified_server_is_refused_unless_accepted() {
        let host = |mode: Option<SslMode>, accepted: bool| {
            let mut pool = primary();
            pool.spec.postgres = PostgresSpec {
                host: Some("db.example".into()),
                secret_ref: Some("login".into()),
                ca_secret_ref: Some("db-ca".into()),
                ssl_mode: mode,
                send_password_to_unverified_server: accepted,
                ..PostgresSpec::default()
            };
            spec_refusal(&pool)
        };
        // A host's default, prefer, falls back to plaintext; require and verify-ca do not check
        // the name: whoever answers may ask for the password in cleartext.
        for mode in [
            None,
            Some(SslMode::Disable),
            Some(SslMode::Require),
            Some(SslMode::VerifyCa),
        ] {
            let refusal = host(mode, false).unwrap_or_else(|| panic!("{mode:?} refused"));
            assert!(
                refusal.contains("db.example") && refusal.contains("sendPasswordToUnverifiedServer: true"),
                "{refusal}"
            );
            assert_eq!(host(mode, true), None, "{mode:?} accepted");
        }
        assert_eq!(host(Some(SslMode::VerifyFull), false), None);
        // A CloudNativePG cluster verifies its CA by default; lowering that needs the same word.
        let mut pool = primary();
        assert_eq!(spec_refusal(&pool), None);
        pool.spec.postgres.ssl_mode = Some(SslMode::Require);
        assert!(spec_refusal(&pool).unwrap().starts_with("postgres.sslMode require"));
    }

    pub(super) fn env_value(deployment: &Deployment, name: &str) -> Option<EnvVar> {
        let container = &deployment.spec.as_ref()?.template.spec.as_ref()?.containers[0];
        container.env.as_ref()?.iter().find(|e| e.name == name).cloned()
    }

    pub(super) fn checksum_of(objects: &Objects) -> String {
        objects
            .deployment
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()[CHECKSUM_ANNOTATION]
            .clone()
    }

    #[test]
    fn defaults_give_two_s3_gateways_on_the_rw_service() {
        let objects = build(&primary(), &Inputs::default());
        let spec = objects.deployment.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(DEFAULT_REPLICAS));
        let url = url_of(&objects);
        assert!(url.starts_with("host=db-rw port=5432 dbname=app "), "{url}");
        let from = env_value(&objects.deployment, "PGVS3_DATABASE_URL").unwrap();
        let from = from.value_from.unwrap().secret_key_ref.unwrap();
        assert_eq!(
            (from.name.as_str(), from.key.as_str()),
            ("p-pgvs3-database", DATABASE_URL_KEY)
        );
        assert_eq!(
            objects.database_secret.metadata.name.as_deref(),
            Some("p-pgvs3-database")
        );
        assert!(
            objects
                .deployment
                .spec
                .as_ref()
                .unwrap()
                .template
                .spec
                .as_ref()
                .unwrap()
                .containers[0]
                .env
                .iter()
                .flatten()
                .all(|e| e.value.as_deref().is_none_or(|v| !v.contains("$("))),
            "no $(VAR) expansion"
        );
        let master = env_value(&objects.deployment, "PGVS3_MASTER_KEY").unwrap();
        assert_eq!(
            master.value_from.unwrap().secret_key_ref.unwrap().name,
            "db-pgvs3-master-key"
        );
        let config = objects.config_map.data.as_ref().unwrap();
        assert_eq!(config["PGVS3_S3_ADDR"], "0.0.0.0:9000");
        assert_eq!(config["PGVS3_RESP_ADDR"], "off");
        let ports: Vec<_> = objects
            .service
            .spec
            .unwrap()
            .ports
            .unwrap()
            .into_iter()
            .map(|p| p.port)
            .collect();
        // The admin port (9090) is on `<pool>-admin` only.
        assert_eq!(ports, vec![9000]);
        assert!(objects.autoscaler.is_none() && objects.service_monitor.is_none());
        let owners = objects.deployment.metadata.owner_references.unwrap();
        assert_eq!(owners[0].kind, "GatewayPool");
        assert_eq!(owners[0].controller, Some(true));
    }

    #[test]
    fn standby_binds_to_the_ro_service() {
        let mut standby = primary();
        standby.spec.role = PoolRole::Standby;
        let objects = build(&standby, &Inputs::default());
        let url = url_of(&objects);
        assert!(url.starts_with("host=db-ro "), "{url}");
        assert_eq!(objects.deployment.metadata.labels.unwrap()[ROLE_LABEL], "standby");
    }

    #[test]
    fn endpoints_follow_enabled_protocols() {
        let mut pool = primary();
        pool.spec.protocols.resp.enabled = true;
        let endpoints = endpoints(&pool);
        assert_eq!(endpoints.s3.as_deref(), Some("http://p.ns.svc:9000"));
        assert_eq!(endpoints.resp.as_deref(), Some("redis://p.ns.svc:6379"));
        assert_eq!(endpoints.ojs, None);
    }

    /// The pod's Secret volumes, by name: (Secret, mount path, read-only).
    pub(super) fn secret_mounts(deployment: &Deployment) -> BTreeMap<String, (String, String, bool)> {
        let pod = deployment.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let mounts = pod.containers[0].volume_mounts.as_ref().unwrap();
        pod.volumes
            .iter()
            .flatten()
            .filter_map(|volume| {
                let secret = volume.secret.as_ref()?.secret_name.clone()?;
                let mount = mounts.iter().find(|mount| mount.name == volume.name)?;
                Some((
                    volume.name.clone(),
                    (secret, mount.mount_path.clone(), mount.read_only == Some(true)),
                ))
            })
            .collect()
    }
    #[test]
    fn the_console_is_served_only_when_enabled_on_its_own_port() {
        let ports = |objects: &Objects| {
            let container = &objects
                .deployment
                .spec
                .as_ref()
                .unwrap()
                .template
                .spec
                .as_ref()
                .unwrap()
                .containers[0];
            let container: Vec<(String, i32)> = container
                .ports
                .iter()
                .flatten()
                .map(|p| (p.name.clone().unwrap(), p.container_port))
                .collect();
            let service: Vec<(String, i32)> = objects
                .service
                .spec
                .as_ref()
                .unwrap()
                .ports
                .iter()
                .flatten()
                .map(|p| (p.name.clone().unwrap(), p.port))
                .collect();
            (container, service)
        };
        let off = build(&primary(), &Inputs::default());
        assert!(!off.config_map.data.as_ref().unwrap().contains_key("PGVS3_CONSOLE_ADDR"));
        assert!(!ports(&off).0.iter().any(|(name, _)| name == "console"));

        let mut pool: GatewayPool = serde_json::from_value(serde_json::json!({
            "apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool", "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"postgres": {"clusterName": "db"}, "console": {"enabled": true}}}))
        .unwrap();
        let on = build(&pool, &Inputs::default());
        assert_eq!(
            on.config_map.data.as_ref().unwrap()["PGVS3_CONSOLE_ADDR"],
            "0.0.0.0:9091"
        );
        let (container, service) = ports(&on);
        assert!(container.contains(&("console".into(), 9091)), "{container:?}");
        assert!(service.contains(&("console".into(), 9091)), "{service:?}");
        assert_ne!(checksum_of(&off), checksum_of(&on), "turning it on rolls the pods");

        pool.spec.console.as_mut().unwrap().enabled = false;
        assert!(
            !ports(&build(&pool, &Inputs::default()))
                .1
                .iter()
                .any(|(name, _)| name == "console")
        );
    }
}
