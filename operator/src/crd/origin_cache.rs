use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A cache bucket in PostgreSQL in front of a remote S3 origin bucket.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "pgvs3.io",
    version = "v1alpha1",
    kind = "OriginCache",
    namespaced,
    status = "OriginCacheStatus",
    shortname = "pgoc",
    category = "pgvs3",
    doc = "A pgvs3 cache bucket that reads through (and optionally writes to) a remote S3 origin.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Bucket", type_ = "string", json_path = ".spec.bucket"),
    printcolumn(name = "Origin", type_ = "string", json_path = ".spec.origin.endpoint"),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct OriginCacheSpec {
    pub origin: Origin,
    /// Secret (same namespace) with `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` for the
    /// origin; the gateways sign every origin request with them. A change is applied at once.
    #[schemars(length(min = 1, max = 253))]
    pub credentials_secret_ref: String,
    /// The cache bucket in pgvs3. Immutable.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("bucket is immutable"))]
    pub bucket: String,
    /// `ReadThrough`: writes go to the origin and invalidate the cached copy; `WriteThrough`:
    /// writes reach the origin before they are acknowledged and stay cached; `WriteBack`: like
    /// `WriteThrough` below `writeBackThreshold`, larger bodies are acknowledged once stored and
    /// uploaded in the background.
    #[serde(default)]
    pub mode: CacheMode,
    /// How long a filled object is served without asking the origin (e.g. `1h`).
    #[serde(default = "default_ttl")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+(s|m|h)$')").message("a duration like 30s, 10m or 1h"))]
    pub ttl: String,
    /// How long an origin 404 is remembered (`0s`: not at all).
    #[serde(default = "default_negative_ttl")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+(s|m|h)$')").message("a duration like 30s, 10m or 1h"))]
    pub negative_ttl: String,
    /// A range read of an object not cached whole fills the aligned chunks of this many bytes
    /// it touches.
    #[serde(default = "default_range_chunk")]
    #[schemars(range(min = 65536, max = 67108864))]
    pub range_chunk_size: i64,
    /// Origin fills in flight per gateway.
    #[serde(default = "default_fill_concurrency")]
    #[schemars(range(min = 1, max = 1024))]
    pub fill_concurrency: i32,
    /// In `WriteBack` mode, writes at or above this size are acknowledged before the origin has
    /// them (smaller ones are written through).
    #[serde(default = "default_write_back_threshold")]
    #[schemars(range(min = 1))]
    pub write_back_threshold: i64,
    /// Upper bound of the cached bodies' size; least recently used entries are evicted beyond it
    /// (never a body not yet at the origin). Default: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_bytes: Option<i64>,
    /// The Primary GatewayPool whose database holds the cache.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("gatewayPoolRef is immutable"))]
    pub gateway_pool_ref: String,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Origin {
    /// Origin S3 endpoint URL, e.g. `https://s3.eu-west-1.amazonaws.com`.
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new("self.startsWith('http://') || self.startsWith('https://')").message("an http(s) URL"))]
    pub endpoint: String,
    #[serde(default = "default_region")]
    #[schemars(length(min = 1, max = 63))]
    pub region: String,
    /// The origin's bucket (S3 allowed legacy names up to 255 characters).
    #[schemars(length(min = 1, max = 255))]
    pub bucket: String,
    #[serde(default)]
    pub style: AddressingStyle,
    /// CA certificates (PEM) the origin's TLS certificate is verified with besides the
    /// system's roots, for an origin whose certificate is from a private CA. Mounted into the
    /// pool's gateways (`--origin-ca-file`), where it is trusted for every origin they reach;
    /// a change rolls them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,
}

/// Where an origin's CA bundle is: a key of a Secret or of a ConfigMap of the cache's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.secretRef) != has(self.configMapRef)").message("set exactly one of secretRef or configMapRef"))]
pub struct CaBundle {
    /// A Secret holding the bundle (only that key is mounted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_ref: Option<String>,
    /// A ConfigMap, as trust-manager's Bundles write them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub config_map_ref: Option<String>,
    /// The key that holds the PEM bundle.
    #[serde(default = "default_ca_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AddressingStyle {
    #[default]
    Path,
    VirtualHost,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheMode {
    #[default]
    ReadThrough,
    WriteThrough,
    WriteBack,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OriginCacheStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Id of the cache bucket in the pool's catalog.
    #[serde(default, rename = "bucketID", skip_serializing_if = "Option::is_none")]
    pub bucket_id: Option<i64>,
    /// Secret with the cache bucket's own access key (owned by this resource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    /// S3 endpoint of the pool that serves the cache bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// resourceVersion of the credentials Secret last written to the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_version: Option<String>,
}

fn default_ca_key() -> String {
    "ca.crt".into()
}
fn default_region() -> String {
    "us-east-1".into()
}
fn default_ttl() -> String {
    "1h".into()
}
// The defaults are the gateway's own (`pgvs3.put_origin`, `pgvs3 admin origin put`), so a cache
// behaves the same whichever way it was configured.
fn default_negative_ttl() -> String {
    "0s".into()
}
fn default_range_chunk() -> i64 {
    1 << 20
}
fn default_fill_concurrency() -> i32 {
    8
}
fn default_write_back_threshold() -> i64 {
    8 << 20
}
