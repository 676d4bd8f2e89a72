use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// An S3 bucket in a GatewayPool's database, with an access key and a credentials Secret.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "pgvs3.io",
    version = "v1alpha1",
    kind = "Bucket",
    namespaced,
    status = "BucketStatus",
    shortname = "pgb",
    category = "pgvs3",
    doc = "An S3 bucket served by a Primary GatewayPool, with its own access key and credentials Secret.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Bucket", type_ = "string", json_path = ".status.bucketName"),
    printcolumn(name = "Pool", type_ = "string", json_path = ".spec.gatewayPoolRef"),
    printcolumn(name = "Secret", type_ = "string", json_path = ".status.secretName", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(validation = Rule::new("has(self.bucketName) == has(oldSelf.bucketName)").message("bucketName cannot be added or removed"))]
#[serde(rename_all = "camelCase")]
pub struct BucketSpec {
    /// S3 bucket name (default: `<namespace>-<name>-<hash>`, the hash of namespace and name
    /// telling apart `team-a`/`logs` and `team`/`a-logs`, cut to 63 characters; Buckets
    /// created before the hash keep the `<namespace>-<name>` in their status). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 3, max = 63), regex(pattern = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"))]
    #[x_kube(
        validation = Rule::new("self == oldSelf").message("bucketName is immutable"),
        validation = Rule::new("!self.contains('..') && !self.matches('^[0-9]{1,3}[.][0-9]{1,3}[.][0-9]{1,3}[.][0-9]{1,3}$')").message("bucketName must not contain '..' nor be an IP address"),
        validation = Rule::new("!self.startsWith('xn--') && !self.startsWith('sthree-') && !self.endsWith('-s3alias') && !self.endsWith('--ol-s3')").message("bucketName uses a reserved prefix or suffix"),
    )]
    pub bucket_name: Option<String>,

    /// Name of the Primary GatewayPool (same namespace) whose database holds the bucket. Immutable.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("gatewayPoolRef is immutable"))]
    pub gateway_pool_ref: String,

    /// What happens to the bucket's data when this resource is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Quota>,

    /// What the generated access key may do.
    #[serde(default)]
    pub access: AccessMode,

    /// Key prefixes the generated access key is limited to, e.g. `["incoming/"]` (empty: the
    /// whole bucket). The key may then read, write and list only keys starting with one of them,
    /// within what `access` allows; anything else in the bucket is AccessDenied. Written as the
    /// key's own policy (`pgvs3 admin key policy`). Plain characters only: no `*`, `?` or `$`,
    /// which the policy language would read as patterns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        inner(length(min = 1, max = 512), regex(pattern = r"^[A-Za-z0-9!_.'()/=+,;:@&~ -]+$"))
    )]
    pub access_prefixes: Vec<String>,

    /// Bucket notifications, as S3's PutBucketNotificationConfiguration sets them: each event
    /// becomes a job in an OJS queue, or a delivery to a registered webhook target, in the
    /// transaction of the write. Absent: the bucket's configuration is left as it is (e.g. as an
    /// application put it through S3); empty: it is removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub notifications: Option<Vec<Notification>>,

    /// A DuckLake on this bucket: its files in the bucket, its catalog in the pool's database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ducklake: Option<DuckLake>,

    /// Pods that reach the bucket with their Kubernetes ServiceAccount instead of a static key:
    /// the operator writes a role that these ServiceAccounts' tokens (audience `pgvs3`) may
    /// assume through STS AssumeRoleWithWebIdentity on the pool's S3 endpoint, granting this
    /// bucket only, and a ConfigMap `<name>-identity` with `AWS_ROLE_ARN` and the endpoints for
    /// the pods (docs/operator.md, "Workload identity").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_identity: Option<WorkloadIdentity>,
}

/// Who may assume a Bucket's role, and what it grants.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadIdentity {
    /// The ServiceAccounts whose tokens may assume the role.
    #[schemars(length(min = 1, max = 32))]
    pub service_accounts: Vec<ServiceAccountRef>,
    /// What the role may do in the bucket (default: the Bucket's `access`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessMode>,
    /// The longest session the role grants, in seconds (default 3600; 900 to 43200, as AWS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 900, max = 43200))]
    pub max_session_seconds: Option<i32>,
    /// Whether the Bucket still gets its static access key in the credentials Secret. `false`:
    /// no Secret (an existing one is deleted); the bucket's key stays in the catalog as its
    /// owner, with a secret nobody is given.
    #[serde(default = "static_key_default")]
    pub static_key: bool,
}

fn static_key_default() -> bool {
    true
}

/// A ServiceAccount, `name` `*` for every one of the namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.__namespace__) && has(self.namespaceSelector))").message("set namespace or namespaceSelector, not both"))]
pub struct ServiceAccountRef {
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$")
    )]
    pub name: String,
    /// Default: the Bucket's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub namespace: Option<String>,
    /// Instead of `namespace`: the account (`*`: every one) of each namespace whose labels
    /// match, followed as namespaces are labelled, unlabelled, created and deleted. Needs the
    /// operator's cluster-wide role (not with `watchNamespace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
}

/// One notification rule of a Bucket.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    /// The rule's id (default `notification-<n>`, n counting from 1), unique within the Bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub id: Option<String>,
    /// The destination ARN: `arn:pgvs3:ojs:::<queue>` (one OJS job per event) or
    /// `arn:pgvs3:webhook:::<target>` (a webhook target registered with
    /// `pgvs3.put_webhook_target`), as in docs/events.md.
    #[schemars(length(min = 1, max = 512), regex(pattern = r"^arn:pgvs3:[a-z]+:::.+$"))]
    pub target: String,
    /// S3 event names or patterns, e.g. `s3:ObjectCreated:*`.
    #[schemars(length(min = 1, max = 16), inner(length(min = 1, max = 64)))]
    pub events: Vec<String>,
    /// Only keys starting with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub prefix: Option<String>,
    /// Only keys ending with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub suffix: Option<String>,
}

/// A DuckLake whose data files live in the bucket and whose catalog lives in the pool's
/// database: the Secret gets `DUCKLAKE_ATTACH`, the SQL a DuckDB session runs to attach it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DuckLake {
    #[serde(default)]
    pub enabled: bool,
    /// The name the lake is attached as (also `<alias>_files`, the files' DuckDB secret).
    #[serde(default = "default_lake_alias")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[A-Za-z0-9_]+$"))]
    pub alias: String,
    /// Where in the bucket the lake's files go, e.g. `tables/` (default: the whole bucket). With
    /// `accessPrefixes`, it must lie under one of them, or the key could not write its files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 512),
        regex(pattern = r"^[A-Za-z0-9!_.'()=+,;:@&~ -][A-Za-z0-9!_.'()/=+,;:@&~ -]*/$")
    )]
    pub data_prefix: Option<String>,
    /// The PostgreSQL schema of the lake's catalog tables (default `ducklake_<bucket>`, `-` and
    /// `.` as `_`): each lake its own, so lakes of several buckets share a database. A lake made
    /// before per-bucket schemas keeps its tables in `public`: set `public` to keep reading it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z_][a-z0-9_]*$"))]
    pub metadata_schema: Option<String>,
}

fn default_lake_alias() -> String {
    "lake".into()
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeletionPolicy {
    /// Keep the bucket and its objects; only the access key is revoked.
    #[default]
    Retain,
    /// Drop the bucket and all its objects.
    Delete,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AccessMode {
    #[default]
    ReadWrite,
    ReadOnly,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Quota {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_objects: Option<i64>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BucketStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_name: Option<String>,
    #[serde(default, rename = "bucketID", skip_serializing_if = "Option::is_none")]
    pub bucket_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    /// S3 endpoint of the owning (Primary) pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// S3 endpoints of Standby pools on the same cluster (reads only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_endpoints: Vec<String>,
    /// The role of `workloadIdentity`, once written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,
}

impl Bucket {
    /// The S3 name: explicit; or the one its status records (a bucket keeps the name it was
    /// created with); or, for a new Bucket, `<namespace>-<name>-<hash>`, the hash (8 hex digits
    /// of SHA-256 of `<namespace>/<name>`) telling apart what the dash alone would not
    /// (`team-a`/`logs` and `team`/`a-logs`), the stem cut to keep it within 63 characters.
    /// Buckets created before the hash was added have `<namespace>-<name>` in their status.
    pub fn bucket_name(&self) -> String {
        if let Some(name) = &self.spec.bucket_name {
            return name.clone();
        }
        if let Some(name) = self.status.as_ref().and_then(|status| status.bucket_name.clone()) {
            return name;
        }
        default_bucket_name(
            self.metadata.namespace.as_deref().unwrap_or("default"),
            self.metadata.name.as_deref().unwrap_or_default(),
        )
    }
}

impl Bucket {
    /// The name a Bucket without `bucketName` got before default names were hashed,
    /// `<namespace>-<name>` (when that was a valid bucket name), for a Bucket whose status does
    /// not record its name (one re-applied without status, e.g. after its predecessor retained
    /// the bucket): `bucket::apply` takes it when the catalog says that bucket is this
    /// Bucket's (its key's, or its custodian's), and the hashed name otherwise.
    pub fn legacy_bucket_name(&self) -> Option<String> {
        if self.spec.bucket_name.is_some() || self.status.as_ref().is_some_and(|s| s.bucket_name.is_some()) {
            return None;
        }
        let namespace = self.metadata.namespace.as_deref().unwrap_or("default");
        let plain = format!("{namespace}-{}", self.metadata.name.as_deref().unwrap_or_default());
        valid_bucket_name(&plain).then_some(plain)
    }
}

/// The S3 name a new Bucket `name` of `namespace` without `bucketName` gets (see
/// [`Bucket::bucket_name`]).
pub fn default_bucket_name(namespace: &str, name: &str) -> String {
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    let hash = hex::encode(&digest[..4]);
    let stem: String = format!("{namespace}-{name}")
        .replace('.', "-")
        .chars()
        .take(54)
        .collect();
    let derived = format!("{}-{hash}", stem.trim_end_matches('-'));
    if valid_bucket_name(&derived) {
        derived
    } else {
        format!("bucket-{hash}")
    }
}

/// The catalog's bucket naming rules (`pgvs3.valid_bucket_name`, AWS's general purpose rules).
pub fn valid_bucket_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let edge = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let ip = name.split('.').count() == 4
        && name
            .split('.')
            .all(|part| (1..=3).contains(&part.len()) && part.bytes().all(|b| b.is_ascii_digit()));
    let reserved_prefix = ["xn--", "sthree-", "amzn-s3-demo-"].iter().any(|p| name.starts_with(p));
    let reserved_suffix = ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"]
        .iter()
        .any(|s| name.ends_with(s));
    (3..=63).contains(&bytes.len())
        && edge(bytes[0])
        && edge(bytes[bytes.len() - 1])
        && bytes.iter().all(|&b| edge(b) || b == b'.' || b == b'-')
        && !name.contains("..")
        && !ip
        && !reserved_prefix
        && !reserved_suffix
}
