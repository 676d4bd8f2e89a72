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
#[x_kube(validation = Rule::new("self.mode != 'WriteBack' || has(self.writeBackThreshold)").message("WriteBack needs writeBackThreshold"))]
#[serde(rename_all = "camelCase")]
pub struct OriginCacheSpec {
    pub origin: Origin,
    /// Secret with `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` for the origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<String>,
    /// The cache bucket in pgvs3. Immutable.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("bucket is immutable"))]
    pub bucket: String,
    #[serde(default)]
    pub mode: CacheMode,
    /// How long a filled object is served without asking the origin (e.g. `1h`).
    #[serde(default = "default_ttl")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+(s|m|h)$')").message("a duration like 30s, 10m or 1h"))]
    pub ttl: String,
    /// How long an origin 404 is remembered.
    #[serde(default = "default_negative_ttl")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+(s|m|h)$')").message("a duration like 30s, 10m or 1h"))]
    pub negative_ttl: String,
    /// Range reads fill aligned chunks of this many bytes.
    #[serde(default = "default_range_chunk")]
    #[schemars(range(min = 65536))]
    pub range_chunk_size: i64,
    /// Origin fills in flight per gateway.
    #[serde(default = "default_fill_concurrency")]
    #[schemars(range(min = 1, max = 1024))]
    pub fill_concurrency: i32,
    /// Writes at or above this size are written back (acknowledged before the origin has them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub write_back_threshold: Option<i64>,
    /// Upper bound of the cache's size; least recently used objects are evicted beyond it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_bytes: Option<i64>,
    /// The Primary GatewayPool whose database holds the cache.
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
    pub region: String,
    pub bucket: String,
    #[serde(default)]
    pub style: AddressingStyle,
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
    /// resourceVersion of the credentials Secret last written to the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_version: Option<String>,
}

fn default_region() -> String {
    "us-east-1".into()
}
fn default_ttl() -> String {
    "1h".into()
}
fn default_negative_ttl() -> String {
    "1m".into()
}
fn default_range_chunk() -> i64 {
    8 << 20
}
fn default_fill_concurrency() -> i32 {
    16
}
