use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The rule on a GatewayPool's own name (the API server allows any object name, dots and 253
/// characters included; its Deployment and Service take the name, and a Service's name is a
/// DNS label): [`valid_pool_name`] is the same check in the reconciler, for pools admitted
/// before the rule.
const POOL_NAME_RULE: &str =
    "self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')";

/// Whether `name` may name a GatewayPool ([`POOL_NAME_RULE`]).
pub fn valid_pool_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && (bytes[bytes.len() - 1].is_ascii_lowercase() || bytes[bytes.len() - 1].is_ascii_digit())
        && bytes
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A fleet of pgvs3 gateways bound to one PostgreSQL: a Primary pool serves reads and writes
/// through the read-write Service, a Standby pool serves reads from hot standbys.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "pgvs3.io",
    version = "v1alpha1",
    kind = "GatewayPool",
    namespaced,
    status = "GatewayPoolStatus",
    shortname = "gwp",
    category = "pgvs3",
    doc = "A pool of pgvs3 gateways (S3, RESP, OJS) bound to a PostgreSQL primary or standby.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Role", type_ = "string", json_path = ".spec.role"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Database", type_ = "string", json_path = ".status.database", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new(POOL_NAME_RULE).message("a GatewayPool's name names its Services: a DNS label (lower case letters, digits and '-', starting with a letter) of at most 63 characters")
)]
#[x_kube(validation = Rule::new("!(has(self.replicas) && has(self.autoscaling))").message("set either replicas or autoscaling, not both"))]
#[x_kube(validation = Rule::new(CONSOLE_PORT_RULE).message("console.port must differ from adminPort and the enabled protocols' ports"))]
#[serde(rename_all = "camelCase")]
pub struct GatewayPoolSpec {
    /// Primary binds to the read-write Service, Standby to the read-only one. Immutable.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("role is immutable"))]
    pub role: PoolRole,

    /// The PostgreSQL this pool serves.
    pub postgres: PostgresSpec,

    /// Fixed number of gateways (default 2). Mutually exclusive with `autoscaling`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,

    /// Scale on CPU with a HorizontalPodAutoscaler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,

    /// Gateway image.
    #[serde(default = "default_image")]
    #[schemars(length(min = 1, max = 1024))]
    pub image: String,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Always", "IfNotPresent", "Never"]))]
    pub image_pull_policy: Option<String>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Which protocols the gateways serve, and on which ports.
    #[serde(default)]
    pub protocols: Protocols,

    /// Port of /healthz, /readyz and /metrics.
    #[serde(default = "default_admin_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub admin_port: i32,

    /// PostgreSQL connections per gateway.
    #[serde(default = "default_pool_size")]
    #[schemars(range(min = 1, max = 1000))]
    pub pool_size: i32,

    /// Bounded concurrency per gateway; beyond it requests wait, then get the protocol's busy error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,

    /// Region the S3 endpoint reports and signs with.
    #[serde(default = "default_region")]
    #[schemars(length(min = 1, max = 63))]
    pub region: String,

    /// The object ownership of an S3 bucket created without `x-amz-object-ownership`
    /// (`PGVS3_S3_DEFAULT_OBJECT_OWNERSHIP`): BucketOwnerEnforced (AWS's default: ACLs off), or
    /// ObjectWriter / BucketOwnerPreferred for ACL-era tools (`create_bucket(ACL=...)`, s3cmd
    /// `--acl-public`, PutBucketAcl), as buckets made on MinIO or Ceph behave.
    #[serde(default)]
    pub default_object_ownership: ObjectOwnership,

    /// Secret holding the master key that seals access-key secrets in the catalog. Generated
    /// once by the operator when absent and never overwritten; every pool on one database must
    /// use the same key. Default: `<clusterName>-pgvs3-master-key`, or `<pool>-pgvs3-master-key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_key_secret_ref: Option<SecretKeySelector>,

    /// Secret with the root access key (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`) the first
    /// gateway on an empty catalog creates, instead of a generated one printed to its log. Read
    /// only then: a catalog that has a root key keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_key_secret_ref: Option<RootKeySecretRef>,

    /// Overrides for the gateway pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodOverrides>,

    /// The Service in front of the gateways.
    #[serde(default)]
    pub service: ServiceSettings,

    /// TLS on the S3, RESP and OJS listeners (the admin port, probed by the kubelet and
    /// scraped by Prometheus, stays plaintext).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,

    /// The gateways' web console (`PGVS3_CONSOLE_ADDR`): off unless enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console: Option<Console>,
}

/// Two listeners of one gateway on one port: the second would fail to bind and the gateway
/// would crash-loop, so the CRD refuses it (defaults are applied before the rule runs).
const CONSOLE_PORT_RULE: &str = "!has(self.console) || !self.console.enabled || \
    (self.console.port != self.adminPort \
     && !(self.protocols.s3.enabled && self.protocols.s3.port == self.console.port) \
     && !(self.protocols.resp.enabled && self.protocols.resp.port == self.console.port) \
     && !(self.protocols.ojs.enabled && self.protocols.ojs.port == self.console.port))";

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Console {
    /// Serve the console (S3 buckets and objects in a browser, signed in with an access key)
    /// on `port` of every gateway and of the pool's Service (port name `console`).
    #[serde(default)]
    pub enabled: bool,
    /// Its port; not the admin port's (9090 by default) nor a protocol's.
    #[serde(default = "default_console_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RootKeySecretRef {
    /// The Secret's name; its keys are [`ROOT_ACCESS_KEY_KEY`] and [`ROOT_SECRET_KEY_KEY`].
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// The keys of a root key Secret: the AWS names, so the same Secret serves an admin's client
/// through `envFrom`.
pub const ROOT_ACCESS_KEY_KEY: &str = "AWS_ACCESS_KEY_ID";
pub const ROOT_SECRET_KEY_KEY: &str = "AWS_SECRET_ACCESS_KEY";

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// A `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`), e.g. from cert-manager. Mounted
    /// into the gateways, which reload it when it is renewed; a change also rolls the pods.
    #[schemars(length(min = 1, max = 253))]
    pub secret_ref: String,
}

/// libpq's `sslmode` for the gateways' and the operator's PostgreSQL connections.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PoolRole {
    #[default]
    Primary,
    Standby,
}

/// Either a CloudNativePG cluster (`clusterName`) or an explicit host.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("has(self.clusterName) != has(self.host)").message("set exactly one of clusterName or host"))]
#[x_kube(validation = Rule::new("has(self.clusterName) || has(self.secretRef)").message("an explicit host needs secretRef"))]
#[x_kube(validation = Rule::new("!has(self.sslMode) || !(self.sslMode in ['verify-ca', 'verify-full']) || has(self.clusterName) || has(self.caSecretRef)").message("sslMode verify-ca and verify-full need caSecretRef for an explicit host"))]
#[serde(rename_all = "camelCase")]
pub struct PostgresSpec {
    /// CloudNativePG cluster: Services `<c>-rw` / `<c>-ro`, credentials in Secret `<c>-app`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub cluster_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// Database name (default `app`, CloudNativePG's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub database: Option<String>,
    /// Secret with `username` and `password` keys (default for a cluster: `<c>-app`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_ref: Option<String>,
    /// TLS to PostgreSQL, as libpq's `sslmode` (default for a cluster: `verify-full` against
    /// its CA; for a host: `prefer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_mode: Option<SslMode>,
    /// Secret whose `ca.crt` is PostgreSQL's CA (default for a cluster: `<c>-ca`,
    /// CloudNativePG's). With `prefer` or `require` it makes the chain checked, as in libpq.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub ca_secret_ref: Option<String>,
    /// Without `sslMode: verify-full`, whoever answers at the database's address may ask for
    /// the password in cleartext (or as an MD5 hash, as good as cleartext to crack) and get
    /// it: neither the gateways nor the operator can refuse those methods. Such a pool is
    /// refused (`InvalidSpec`) unless this says the risk is accepted (a trusted network, a
    /// test database).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub send_password_to_unverified_server: bool,
}

/// The key of PostgreSQL's CA certificate in the Secret `caSecretRef` names.
pub const POSTGRES_CA_KEY: &str = "ca.crt";

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("self.minReplicas <= self.maxReplicas").message("minReplicas must not exceed maxReplicas"))]
#[serde(rename_all = "camelCase")]
pub struct Autoscaling {
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub min_replicas: i32,
    #[schemars(range(min = 1))]
    pub max_replicas: i32,
    #[serde(default = "default_cpu_target", rename = "targetCPUUtilizationPercentage")]
    #[schemars(range(min = 1, max = 100))]
    pub target_cpu_utilization_percentage: i32,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("!self.ojs.enabled || has(self.ojsTokenSecretRef)").message("an enabled OJS endpoint needs ojsTokenSecretRef: the Service makes it reachable from the whole cluster"))]
#[serde(rename_all = "camelCase")]
pub struct Protocols {
    #[serde(default = "s3_default")]
    pub s3: Protocol,
    #[serde(default = "resp_default")]
    pub resp: Protocol,
    #[serde(default = "ojs_default")]
    pub ojs: Protocol,
    /// Secret whose key `token` is the bearer token OJS clients must send
    /// (`Authorization: Bearer <token>`); required when OJS is enabled. S3 and RESP clients
    /// authenticate with access keys instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub ojs_token_secret_ref: Option<String>,
}

/// The key of the OJS token in the Secret `ojsTokenSecretRef` names.
pub const OJS_TOKEN_KEY: &str = "token";

impl Protocols {
    /// The OJS token's Secret, when OJS is served.
    pub fn ojs_token_secret(&self) -> Option<&str> {
        self.ojs_token_secret_ref.as_deref().filter(|_| self.ojs.enabled)
    }
}

impl Default for Protocols {
    fn default() -> Protocols {
        Protocols {
            s3: s3_default(),
            resp: resp_default(),
            ojs: ojs_default(),
            ojs_token_secret_ref: None,
        }
    }
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Protocol {
    pub enabled: bool,
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    /// Requests served at once, per protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_active: Option<i32>,
    /// Requests allowed to wait for a slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_waiting: Option<i32>,
    /// How long a request waits before it is turned away (e.g. `2s`, `500ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+(ms|s|m)$')").message("a duration like 500ms, 2s or 1m"))]
    pub wait_timeout: Option<String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeySelector {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[serde(default = "master_key_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSettings {
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ObjectOwnership {
    #[default]
    BucketOwnerEnforced,
    BucketOwnerPreferred,
    ObjectWriter,
}

impl ObjectOwnership {
    /// The name the gateway's flag takes.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectOwnership::BucketOwnerEnforced => "BucketOwnerEnforced",
            ObjectOwnership::BucketOwnerPreferred => "BucketOwnerPreferred",
            ObjectOwnership::ObjectWriter => "ObjectWriter",
        }
    }
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayPoolStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// The PostgreSQL Service (or host) the pool is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Endpoints>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Endpoints {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ojs: Option<String>,
}

pub const DEFAULT_REPLICAS: i32 = 2;

fn default_image() -> String {
    format!("ghcr.io/pgvs3/pgvs3:{}", env!("CARGO_PKG_VERSION"))
}
fn default_admin_port() -> i32 {
    9090
}
fn default_console_port() -> i32 {
    9091
}
fn default_pool_size() -> i32 {
    32
}
fn default_region() -> String {
    "us-east-1".into()
}
fn one() -> i32 {
    1
}
fn default_cpu_target() -> i32 {
    70
}
fn master_key_key() -> String {
    "masterKey".into()
}
fn s3_default() -> Protocol {
    Protocol {
        enabled: true,
        port: 9000,
    }
}
fn resp_default() -> Protocol {
    Protocol {
        enabled: false,
        port: 6379,
    }
}
fn ojs_default() -> Protocol {
    Protocol {
        enabled: false,
        port: 8080,
    }
}

impl GatewayPoolSpec {
    pub fn master_key_ref(&self, pool_name: &str) -> SecretKeySelector {
        self.master_key_secret_ref.clone().unwrap_or_else(|| SecretKeySelector {
            name: match &self.postgres.cluster_name {
                Some(cluster) => format!("{cluster}-pgvs3-master-key"),
                None => format!("{pool_name}-pgvs3-master-key"),
            },
            key: master_key_key(),
        })
    }

    /// The Secrets the operator reads to write a Primary pool's catalog (`database::bind`):
    /// the database credentials, the master key and PostgreSQL's CA.
    pub fn catalog_secrets(&self, pool_name: &str) -> Vec<String> {
        let mut secrets = vec![self.postgres.credentials_secret(), self.master_key_ref(pool_name).name];
        secrets.extend(self.postgres.ca_secret());
        secrets
    }
}

impl PostgresSpec {
    /// Host (Service name) the given role connects to.
    pub fn host(&self, role: PoolRole) -> String {
        match (&self.cluster_name, &self.host) {
            (_, Some(host)) => host.clone(),
            (Some(cluster), None) => match role {
                PoolRole::Primary => format!("{cluster}-rw"),
                PoolRole::Standby => format!("{cluster}-ro"),
            },
            (None, None) => String::new(),
        }
    }

    /// The host as reached from any namespace: with a CloudNativePG cluster, qualified with the
    /// pool's `namespace` (its Services live beside the pool; the operator, and a Bucket's
    /// workloads, may run elsewhere); an explicit host as given.
    pub fn host_from_anywhere(&self, role: PoolRole, namespace: &str) -> String {
        match &self.cluster_name {
            Some(_) => format!("{}.{namespace}.svc", self.host(role)),
            None => self.host(role),
        }
    }

    pub fn port(&self) -> i32 {
        self.port.unwrap_or(5432)
    }

    pub fn database(&self) -> &str {
        self.database.as_deref().unwrap_or("app")
    }

    pub fn credentials_secret(&self) -> String {
        match (&self.secret_ref, &self.cluster_name) {
            (Some(secret), _) => secret.clone(),
            (None, Some(cluster)) => format!("{cluster}-app"),
            (None, None) => String::new(),
        }
    }

    pub fn ssl_mode(&self) -> SslMode {
        match (self.ssl_mode, &self.cluster_name) {
            (Some(mode), _) => mode,
            (None, Some(_)) => SslMode::VerifyFull,
            (None, None) => SslMode::Prefer,
        }
    }

    /// The Secret holding PostgreSQL's CA, when one is used (never with `disable`).
    pub fn ca_secret(&self) -> Option<String> {
        if self.ssl_mode() == SslMode::Disable {
            return None;
        }
        match (&self.ca_secret_ref, &self.cluster_name) {
            (Some(secret), _) => Some(secret.clone()),
            (None, Some(cluster)) => Some(format!("{cluster}-ca")),
            (None, None) => None,
        }
    }

    /// Why the database password could reach a server nobody verified, unless the spec
    /// accepts it (`sendPasswordToUnverifiedServer`); None with `verify-full`.
    pub fn password_exposure(&self) -> Option<String> {
        let mode = self.ssl_mode();
        if mode == SslMode::VerifyFull || self.send_password_to_unverified_server {
            return None;
        }
        Some(format!(
            "postgres.sslMode {} does not verify who answers at {}, and a server that asks for the \
             password in cleartext or as MD5 would be sent it: use sslMode verify-full (with \
             caSecretRef), or accept the risk with postgres.sendPasswordToUnverifiedServer: true",
            mode.as_str(),
            self.host(PoolRole::Primary)
        ))
    }

    /// The Service the operator expects to exist before it binds (CloudNativePG clusters only).
    pub fn expected_service(&self, role: PoolRole) -> Option<String> {
        self.cluster_name.as_ref().map(|_| self.host(role))
    }
}
