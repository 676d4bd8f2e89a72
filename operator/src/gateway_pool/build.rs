//! GatewayPool → desired Kubernetes objects. Pure: no client, so every object can be unit
//! tested, golden-filed and rendered by `pgvs3-operator render`.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec, MetricTarget,
    ResourceMetricSource,
};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapEnvSource, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource,
    EnvFromSource, EnvVar, EnvVarSource, HTTPGetAction, KeyToPath, Lifecycle, LifecycleHandler, PodSecurityContext,
    PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, Secret,
    SecretKeySelector as CoreSecretKeySelector, SecretVolumeSource, SecurityContext, Service, ServicePort, ServiceSpec,
    SleepAction, TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use sha2::{Digest, Sha256};

use crate::crd::{
    DEFAULT_REPLICAS, Endpoints, GatewayPool, OJS_TOKEN_KEY, ObjectOwnership, POSTGRES_CA_KEY, PoolRole,
    ROOT_ACCESS_KEY_KEY, ROOT_SECRET_KEY_KEY,
};
use crate::origin_cache::ca_bundle::{Mounted, Source};

pub const CONTAINER: &str = "gateway";
pub const CHECKSUM_ANNOTATION: &str = "pgvs3.io/config-checksum";
pub const POOL_LABEL: &str = "pgvs3.io/pool";
pub const ROLE_LABEL: &str = "pgvs3.io/role";
/// Non-root user of the gateway image (distroless "nonroot").
const GATEWAY_UID: i64 = 65532;
/// How long a terminating gateway keeps serving before SIGTERM (see the container's preStop).
const PRE_STOP_SECONDS: i64 = 5;
/// Where the listeners' `kubernetes.io/tls` Secret is mounted.
const TLS_DIR: &str = "/etc/pgvs3/tls";
/// The keys of the listeners' Secret the gateway reads (`PGVS3_TLS_CERT`, `PGVS3_TLS_KEY`).
const TLS_KEYS: [&str; 2] = ["tls.crt", "tls.key"];
/// Where PostgreSQL's CA Secret is mounted.
const POSTGRES_CA_DIR: &str = "/etc/pgvs3/postgres-ca";
/// Where the OriginCaches' CA bundles are mounted: `-0`, `-1`, ... each holding `ca.crt`.
const ORIGIN_CA_DIR: &str = "/etc/pgvs3/origin-ca";

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

/// Gateway settings (flags' `PGVS3_*` twins) that are not secret.
fn settings(pool: &GatewayPool) -> BTreeMap<String, String> {
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

/// Why the pool's spec cannot be built as written, beyond what the CRD's schema checks (or did
/// not, for a pool admitted before its rules): a name that is empty, or no object name at all,
/// would have the gateways (or the operator's reads) wait forever for an object that cannot
/// exist.
pub fn spec_refusal(pool: &GatewayPool) -> Option<String> {
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
    empty
        .into_iter()
        .find(|(_, value)| value.is_some_and(str::is_empty))
        .map(|(field, _)| format!("{field} must not be empty"))
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
        pod_disruption_budget: pod_disruption_budget(pool),
        autoscaler: autoscaler(pool),
        service_monitor: inputs.service_monitor_crd.then(|| service_monitor(pool)),
    }
}

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
    ports.push(("admin", pool.spec.admin_port));
    if let Some(console) = pool.spec.console.as_ref().filter(|console| console.enabled) {
        ports.push(("console", console.port));
    }
    ports
}

fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(CoreSecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// `<pool>-pgvs3-database`: the Secret holding the gateways' connection string.
pub fn database_secret_name(pool: &GatewayPool) -> String {
    format!("{}-pgvs3-database", pool_name(pool))
}

/// The key of the connection string in [`database_secret_name`].
pub const DATABASE_URL_KEY: &str = "PGVS3_DATABASE_URL";

/// The gateways' libpq connection string, every value quoted and escaped as libpq's (and
/// tokio-postgres's) parser reads it: a password with `'`, `\` or a space is just a password.
/// Built here rather than by the kubelet's `$(VAR)` expansion, which pastes a value in verbatim.
pub fn database_url(pool: &GatewayPool, login: &Login) -> String {
    let postgres = &pool.spec.postgres;
    let port = postgres.port().to_string();
    let application = format!("pgvs3-{}", pool_name(pool));
    let root_cert = format!("{POSTGRES_CA_DIR}/{POSTGRES_CA_KEY}");
    let host = postgres.host(pool.spec.role);
    let mut pairs = vec![
        ("host", host.as_str()),
        ("port", port.as_str()),
        ("dbname", postgres.database()),
        ("user", login.user.as_str()),
        ("password", login.password.as_str()),
        ("application_name", application.as_str()),
        ("sslmode", postgres.ssl_mode().as_str()),
    ];
    if postgres.ca_secret().is_some() {
        pairs.push(("sslrootcert", root_cert.as_str()));
    }
    pgvs3_catalog::lake::conninfo_of(&pairs)
}

fn database_secret(pool: &GatewayPool, login: &Login) -> Secret {
    Secret {
        metadata: meta(pool, database_secret_name(pool)),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            DATABASE_URL_KEY.to_string(),
            ByteString(database_url(pool, login).into_bytes()),
        )])),
        ..Secret::default()
    }
}

fn env(pool: &GatewayPool) -> Vec<EnvVar> {
    let master_key = pool.spec.master_key_ref(&pool_name(pool));
    let mut env = vec![
        secret_env(DATABASE_URL_KEY, &database_secret_name(pool), DATABASE_URL_KEY),
        secret_env("PGVS3_MASTER_KEY", &master_key.name, &master_key.key),
    ];
    if let Some(secret) = pool.spec.protocols.ojs_token_secret() {
        env.push(secret_env("PGVS3_OJS_TOKEN", secret, OJS_TOKEN_KEY));
    }
    if let Some(root) = &pool.spec.root_key_secret_ref {
        env.push(secret_env("PGVS3_ROOT_ACCESS_KEY", &root.name, ROOT_ACCESS_KEY_KEY));
        env.push(secret_env("PGVS3_ROOT_SECRET_KEY", &root.name, ROOT_SECRET_KEY_KEY));
    }
    env
}

/// Probes use the admin port by name, so they follow `adminPort`.
fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("admin".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Probe::default()
    }
}

fn default_resources() -> ResourceRequirements {
    // CPU requests are what an autoscaler's utilization target is measured against.
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity("250m".into())),
            ("memory".to_string(), Quantity("256Mi".into())),
        ])),
        limits: Some(BTreeMap::from([("memory".to_string(), Quantity("1Gi".into()))])),
        ..ResourceRequirements::default()
    }
}

fn deployment(pool: &GatewayPool, checksum: String, origin_cas: &[Mounted]) -> Deployment {
    let spec = &pool.spec;
    let overrides = spec.pod_template.clone().unwrap_or_default();
    let mut pod_labels = labels(pool);
    pod_labels.extend(overrides.labels.unwrap_or_default());
    let mut annotations = overrides.annotations.unwrap_or_default();
    annotations.insert(CHECKSUM_ANNOTATION.into(), checksum);
    let selector = LabelSelector {
        match_labels: Some(selector_labels(pool)),
        ..LabelSelector::default()
    };
    let mounts = volumes(pool, origin_cas);
    let spread = |topology_key: &str| TopologySpreadConstraint {
        max_skew: 1,
        topology_key: topology_key.into(),
        when_unsatisfiable: "ScheduleAnyway".into(),
        label_selector: Some(selector.clone()),
        ..TopologySpreadConstraint::default()
    };
    let container = Container {
        name: CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.clone(),
        args: Some(vec!["serve".into()]),
        ports: Some(
            ports(pool)
                .into_iter()
                .map(|(name, port)| ContainerPort {
                    name: Some(name.into()),
                    container_port: port,
                    protocol: Some("TCP".into()),
                    ..ContainerPort::default()
                })
                .collect(),
        ),
        env_from: Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: config_map_name(pool),
                optional: Some(false),
            }),
            ..EnvFromSource::default()
        }]),
        env: Some(env(pool)),
        // The log's tail becomes the termination message of a gateway that exits with an
        // error: the pool's status quotes it (why its gateways cannot start).
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        readiness_probe: Some(probe("/readyz", 5, 3)),
        // A terminating pod leaves its Service's endpoints only once kube-proxy on every node
        // has caught up; until then new connections still arrive. The gateway stops accepting
        // at SIGTERM, so it is sent after this pause (the node tier's rolling update under load
        // lost 1-7 requests in 68-177 without it).
        lifecycle: Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction {
                    seconds: PRE_STOP_SECONDS,
                }),
                ..LifecycleHandler::default()
            }),
            ..Lifecycle::default()
        }),
        liveness_probe: Some(probe("/healthz", 10, 6)),
        resources: Some(spec.resources.clone().unwrap_or_else(default_resources)),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(mounts.iter().map(|(mount, _)| mount.clone()).collect()),
        ..Container::default()
    };
    Deployment {
        metadata: meta(pool, pool_name(pool)),
        spec: Some(DeploymentSpec {
            // With an autoscaler the HPA owns the replica count; leaving it out of the applied
            // object keeps server-side apply from fighting it.
            replicas: match spec.autoscaling {
                Some(_) => None,
                None => Some(spec.replicas.unwrap_or(DEFAULT_REPLICAS)),
            },
            selector: selector.clone(),
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(0)),
                    max_surge: Some(IntOrString::Int(1)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    // Longer than the pre-stop pause plus the gateway's drain (30 s) so
                    // in-flight requests finish.
                    termination_grace_period_seconds: Some(PRE_STOP_SECONDS + 45),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(GATEWAY_UID),
                        run_as_group: Some(GATEWAY_UID),
                        fs_group: Some(GATEWAY_UID),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    topology_spread_constraints: Some(vec![
                        spread("topology.kubernetes.io/zone"),
                        spread("kubernetes.io/hostname"),
                    ]),
                    node_selector: overrides.node_selector,
                    tolerations: overrides.tolerations,
                    affinity: overrides.affinity,
                    priority_class_name: overrides.priority_class_name,
                    volumes: Some(mounts.into_iter().map(|(_, volume)| volume).collect()),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// Where the gateway reads the `index`th origin CA bundle.
fn origin_ca_file(index: usize) -> String {
    format!("{ORIGIN_CA_DIR}-{index}/ca.crt")
}

/// The gateway's volumes and where each is mounted: a scratch /tmp, the TLS Secrets and the
/// origins' CA bundles.
fn volumes(pool: &GatewayPool, origin_cas: &[Mounted]) -> Vec<(VolumeMount, Volume)> {
    let mount = |name: &str, path: &str| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(path != "/tmp"),
        ..VolumeMount::default()
    };
    // Only the keys the gateway reads (`items`): a CloudNativePG CA Secret also holds the CA's
    // private key (`ca.key`), which would let whoever reads the pod's files sign certificates
    // PostgreSQL trusts.
    let secret = |name: &str, secret: &str, keys: &[&str]| Volume {
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
    };
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
        volumes.push((mount("tls", TLS_DIR), secret("tls", &tls.secret_ref, &TLS_KEYS)));
    }
    if let Some(ca) = pool.spec.postgres.ca_secret() {
        volumes.push((
            mount("postgres-ca", POSTGRES_CA_DIR),
            secret("postgres-ca", &ca, &[POSTGRES_CA_KEY]),
        ));
    }
    for (index, ca) in origin_cas.iter().enumerate() {
        let name = format!("origin-ca-{index}");
        // The bundle's key, whatever it is called, as `ca.crt`.
        let items = Some(vec![KeyToPath {
            key: ca.key.clone(),
            path: "ca.crt".into(),
            mode: None,
        }]);
        let volume = match &ca.source {
            Source::Secret(secret) => Volume {
                name: name.clone(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(secret.clone()),
                    items,
                    default_mode: Some(0o440),
                    optional: Some(false),
                }),
                ..Volume::default()
            },
            Source::ConfigMap(config_map) => Volume {
                name: name.clone(),
                config_map: Some(ConfigMapVolumeSource {
                    name: config_map.clone(),
                    items,
                    default_mode: Some(0o444),
                    optional: Some(false),
                }),
                ..Volume::default()
            },
        };
        volumes.push((mount(&name, &format!("{ORIGIN_CA_DIR}-{index}")), volume));
    }
    volumes
}

fn service(pool: &GatewayPool) -> Service {
    let mut metadata = meta(pool, pool_name(pool));
    metadata.annotations = pool.spec.service.annotations.clone();
    Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(format!("{:?}", pool.spec.service.type_)),
            selector: Some(selector_labels(pool)),
            ports: Some(
                ports(pool)
                    .into_iter()
                    .map(|(name, port)| ServicePort {
                        name: Some(name.into()),
                        port,
                        target_port: Some(IntOrString::String(name.into())),
                        protocol: Some("TCP".into()),
                        app_protocol: Some(if name == "resp" { "redis" } else { "http" }.into()),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

fn pod_disruption_budget(pool: &GatewayPool) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: meta(pool, pool_name(pool)),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(pool)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}

fn autoscaler(pool: &GatewayPool) -> Option<HorizontalPodAutoscaler> {
    let autoscaling = pool.spec.autoscaling.as_ref()?;
    Some(HorizontalPodAutoscaler {
        metadata: meta(pool, pool_name(pool)),
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".into()),
                kind: "Deployment".into(),
                name: pool_name(pool),
            },
            min_replicas: Some(autoscaling.min_replicas),
            max_replicas: autoscaling.max_replicas,
            metrics: Some(vec![MetricSpec {
                type_: "Resource".into(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".into(),
                    target: MetricTarget {
                        type_: "Utilization".into(),
                        average_utilization: Some(autoscaling.target_cpu_utilization_percentage),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }]),
            ..HorizontalPodAutoscalerSpec::default()
        }),
        ..HorizontalPodAutoscaler::default()
    })
}

pub fn service_monitor_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("monitoring.coreos.com", "v1", "ServiceMonitor"),
        "servicemonitors",
    )
}

fn service_monitor(pool: &GatewayPool) -> DynamicObject {
    let mut object = DynamicObject::new(&pool_name(pool), &service_monitor_resource());
    object.metadata = meta(pool, pool_name(pool));
    object.data = serde_json::json!({
        "spec": {
            "selector": { "matchLabels": selector_labels(pool) },
            "endpoints": [{ "port": "admin", "path": "/metrics", "interval": "30s" }],
        }
    });
    object
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Autoscaling, PostgresSpec};

    fn pool(yaml: &str) -> GatewayPool {
        let mut pool: GatewayPool = serde_saphyr::from_str(yaml).unwrap();
        pool.metadata.uid = Some("uid-1".into());
        pool
    }

    fn primary() -> GatewayPool {
        pool(
            "apiVersion: pgvs3.io/v1alpha1\nkind: GatewayPool\nmetadata: {name: p, namespace: ns}\nspec: {postgres: {clusterName: db}}",
        )
    }

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
    fn an_enabled_ojs_endpoint_takes_its_token_from_the_secret() {
        let mut pool = primary();
        pool.spec.protocols.ojs_token_secret_ref = Some("jobs-token".into());
        let deployment = |pool: &GatewayPool| build(pool, &Inputs::default()).deployment;
        assert!(
            env_value(&deployment(&pool), "PGVS3_OJS_TOKEN").is_none(),
            "OJS off: no token"
        );
        pool.spec.protocols.ojs.enabled = true;
        let token = env_value(&deployment(&pool), "PGVS3_OJS_TOKEN").unwrap();
        let reference = token.value_from.unwrap().secret_key_ref.unwrap();
        assert_eq!(
            (reference.name.as_str(), reference.key.as_str()),
            ("jobs-token", "token")
        );
        assert_eq!(token.value, None, "the token never appears in the pod spec");
    }

    fn url_of(objects: &Objects) -> String {
        String::from_utf8(
            objects.database_secret.data.as_ref().unwrap()[DATABASE_URL_KEY]
                .0
                .clone(),
        )
        .unwrap()
    }

    #[test]
    fn any_login_survives_the_connection_string() {
        for (user, password) in [
            ("app", "plain"),
            ("app user", r"it's a \ pass'word"),
            ("o'hara", "' OR 1=1 --"),
            ("app", r"ends with \"),
            ("app", ""),
            ("app", "sslmode=disable host=evil"),
        ] {
            let login = Login {
                user: user.into(),
                password: password.into(),
            };
            let mut pool = primary();
            pool.spec.postgres = PostgresSpec {
                host: Some("pg.example".into()),
                secret_ref: Some("login".into()),
                ssl_mode: Some(crate::crd::SslMode::Require),
                ..PostgresSpec::default()
            };
            let url = database_url(&pool, &login);
            // The gateway's own parser (`--database-url`).
            let (config, _) = pgvs3_pgtls::parse(&url).unwrap_or_else(|err| panic!("{url}: {err:#}"));
            assert_eq!(config.get_user(), Some(user), "{url}");
            assert_eq!(config.get_password(), Some(password.as_bytes()), "{url}");
            assert_eq!(config.get_hosts().len(), 1, "{url}");
            assert!(url.ends_with(" sslmode=require"), "{url}");
        }
    }

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
    }

    fn env_value(deployment: &Deployment, name: &str) -> Option<EnvVar> {
        let container = &deployment.spec.as_ref()?.template.spec.as_ref()?.containers[0];
        container.env.as_ref()?.iter().find(|e| e.name == name).cloned()
    }

    fn checksum_of(objects: &Objects) -> String {
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
        assert_eq!(ports, vec![9000, 9090]);
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
    fn explicit_host_uses_its_secret_and_database() {
        let mut pool = primary();
        pool.spec.postgres = PostgresSpec {
            host: Some("pg.example".into()),
            port: Some(6432),
            database: Some("objects".into()),
            secret_ref: Some("pg-login".into()),
            ..PostgresSpec::default()
        };
        let objects = build(&pool, &Inputs::default());
        let url = url_of(&objects);
        assert!(url.starts_with("host=pg.example port=6432 dbname=objects "), "{url}");

        assert_eq!(
            env_value(&objects.deployment, "PGVS3_MASTER_KEY")
                .unwrap()
                .value_from
                .unwrap()
                .secret_key_ref
                .unwrap()
                .name,
            "p-pgvs3-master-key"
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

    #[test]
    fn autoscaling_makes_an_hpa_and_leaves_replicas_to_it() {
        let mut pool = primary();
        pool.spec.autoscaling = Some(Autoscaling {
            min_replicas: 2,
            max_replicas: 7,
            target_cpu_utilization_percentage: 60,
        });
        let objects = build(&pool, &Inputs::default());
        assert_eq!(objects.deployment.spec.unwrap().replicas, None);
        let hpa = objects.autoscaler.unwrap().spec.unwrap();
        assert_eq!((hpa.min_replicas, hpa.max_replicas), (Some(2), 7));
        assert_eq!(hpa.scale_target_ref.name, "p");
        let metrics = hpa.metrics.unwrap();
        assert_eq!(
            metrics[0].resource.as_ref().unwrap().target.average_utilization,
            Some(60)
        );
    }

    #[test]
    fn pods_run_non_root_on_a_read_only_root_spread_over_zones_and_hosts() {
        let objects = build(&primary(), &Inputs::default());
        let pod = objects.deployment.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.security_context.unwrap().run_as_non_root, Some(true));
        let container = &pod.containers[0].security_context.clone().unwrap();
        assert_eq!(container.read_only_root_filesystem, Some(true));
        assert_eq!(container.allow_privilege_escalation, Some(false));
        let keys: Vec<_> = pod
            .topology_spread_constraints
            .unwrap()
            .into_iter()
            .map(|t| t.topology_key)
            .collect();
        assert_eq!(keys, vec!["topology.kubernetes.io/zone", "kubernetes.io/hostname"]);
        let probe = pod.containers[0].readiness_probe.clone().unwrap().http_get.unwrap();
        assert_eq!(probe.path.as_deref(), Some("/readyz"));
        assert_eq!(probe.port, IntOrString::String("admin".into()));
    }

    #[test]
    fn service_monitor_only_when_its_crd_exists() {
        let inputs = Inputs {
            service_monitor_crd: true,
            ..Inputs::default()
        };
        let monitor = build(&primary(), &inputs).service_monitor.unwrap();
        assert_eq!(monitor.types.unwrap().kind, "ServiceMonitor");
        assert_eq!(monitor.data["spec"]["endpoints"][0]["port"], "admin");
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
    fn secret_mounts(deployment: &Deployment) -> BTreeMap<String, (String, String, bool)> {
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

    #[test]
    fn a_root_key_secret_reaches_the_gateways_by_reference_only() {
        let none = build(&primary(), &Inputs::default());
        assert!(env_value(&none.deployment, "PGVS3_ROOT_ACCESS_KEY").is_none());
        let mut pool = primary();
        pool.spec.root_key_secret_ref = Some(crate::crd::RootKeySecretRef {
            name: "root-key".into(),
        });
        let objects = build(&pool, &Inputs::default());
        for (name, key) in [
            ("PGVS3_ROOT_ACCESS_KEY", ROOT_ACCESS_KEY_KEY),
            ("PGVS3_ROOT_SECRET_KEY", ROOT_SECRET_KEY_KEY),
        ] {
            let var = env_value(&objects.deployment, name).unwrap();
            assert_eq!(var.value, None);
            let reference = var.value_from.unwrap().secret_key_ref.unwrap();
            assert_eq!((reference.name.as_str(), reference.key.as_str()), ("root-key", key));
        }
        pool.spec.root_key_secret_ref.as_mut().unwrap().name = "Not_A_Name".into();
        assert_eq!(
            spec_refusal(&pool).as_deref(),
            Some(r#"rootKeySecretRef.name "Not_A_Name" is not a valid object name"#)
        );
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

    #[test]
    fn cloudnativepg_is_verified_in_full_against_its_ca_and_a_host_as_asked() {
        let url = |pool: &GatewayPool| url_of(&build(pool, &Inputs::default()));
        let cluster = primary();
        assert!(
            url(&cluster).ends_with(&format!(" sslmode=verify-full sslrootcert={POSTGRES_CA_DIR}/ca.crt")),
            "{}",
            url(&cluster)
        );
        let mounts = secret_mounts(&build(&cluster, &Inputs::default()).deployment);
        assert_eq!(mounts["postgres-ca"], ("db-ca".into(), POSTGRES_CA_DIR.into(), true));

        let mut host = primary();
        host.spec.postgres = PostgresSpec {
            host: Some("pg.example".into()),
            secret_ref: Some("pg-login".into()),
            ..PostgresSpec::default()
        };
        assert!(url(&host).ends_with(" sslmode=prefer"), "{}", url(&host));
        assert!(secret_mounts(&build(&host, &Inputs::default()).deployment).is_empty());
        host.spec.postgres.ssl_mode = Some(crate::crd::SslMode::VerifyCa);
        host.spec.postgres.ca_secret_ref = Some("pg-ca".into());
        assert!(url(&host).ends_with(&format!(" sslmode=verify-ca sslrootcert={POSTGRES_CA_DIR}/ca.crt")));
        let mut plain = primary();
        plain.spec.postgres.ssl_mode = Some(crate::crd::SslMode::Disable);
        assert!(url(&plain).ends_with(" sslmode=disable"), "{}", url(&plain));
        assert!(secret_mounts(&build(&plain, &Inputs::default()).deployment).is_empty());
    }
}
