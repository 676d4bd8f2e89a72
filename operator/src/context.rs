//! What every reconcile shares: the client, the event reporter, metrics, per-object backoff.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::database::Connection;
use crate::events::Recorder;
use crate::identity::IssuerState;
use crate::metrics::Metrics;

pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    failures: Mutex<HashMap<String, u32>>,
    /// Backoff keys whose next retry is due by a time, whatever their backoff.
    due: Mutex<HashMap<String, Instant>>,
    /// Whether the ServiceMonitor API is served, and when that was learnt (see
    /// [`Context::serves_service_monitors`]). An async lock, held across the discovery request,
    /// so concurrent reconciles ask once and share the answer.
    service_monitors: tokio::sync::Mutex<Option<(Instant, bool)>>,
    /// Pools known to have no HorizontalPodAutoscaler (deleted, or found absent), so a pool
    /// without `autoscaling` is not sent a DELETE on every reconcile.
    without_autoscaler: Mutex<HashSet<String>>,
    /// `(namespace, bucket)`: root-owned buckets an admin marked adoptable by that namespace's
    /// Buckets (`--adoptable-bucket`).
    adoptable: HashSet<(String, String)>,
    /// `(namespace, pool)`: the connection each pool was last bound with. Deleting a namespace
    /// deletes a pool and its Secrets alongside its Buckets; a Bucket's cleanup that finds them
    /// gone still revokes its key through this (lost with the process: an operator restarted
    /// in between skips the cleanup as before).
    connections: Mutex<HashMap<(String, String), Connection>>,
    /// The cluster's service-account token issuer, and the catalogs it was published into.
    pub issuer: IssuerState,
    /// How long the cleanup of a resource whose pool is being deleted too retries an
    /// unreachable catalog before it gives up (`database::cleanup_gives_up`).
    pub cleanup_grace: Duration,
    /// The longest one catalog interaction may take (`database::within`).
    pub catalog_timeout: Duration,
    /// Per kind and namespace, the reconciles of that kind running in it
    /// ([`Context::namespace_slot`]).
    namespace_slots: Mutex<HashMap<(&'static str, String), Arc<Semaphore>>>,
}

/// How long the answer of API discovery for ServiceMonitors is trusted: installing the
/// Prometheus operator is noticed within this.
pub const SERVICE_MONITOR_RECHECK: Duration = Duration::from_secs(300);
const SERVICE_MONITOR_API: &str = "monitoring.coreos.com/v1";

/// How many reconciles each controller runs at once.
pub const CONCURRENCY: u16 = 4;

/// How many of a controller's [`CONCURRENCY`] slots one namespace's resources may hold. A
/// catalog that never answers holds a reconcile for the catalog timeout; without this share a
/// namespace's flood of resources on such a database (four would do) would take every slot, one
/// timeout after another, and every other namespace's resources would wait behind them. With it
/// the other namespaces keep half the slots whatever one namespace does.
pub const NAMESPACE_SHARE: usize = CONCURRENCY as usize / 2;

/// When a reconcile that found its namespace's share taken is tried again: soon, since a healthy
/// catalog frees a slot in milliseconds; it costs one lookup.
pub const NAMESPACE_BUSY_RETRY: Duration = Duration::from_secs(1);

/// The cleanup's grace by default: two minutes of retries while a namespace is deleted.
pub const DEFAULT_CLEANUP_GRACE: Duration = Duration::from_secs(120);

/// The first retry after a failure, doubled per consecutive failure up to `MAX_BACKOFF`.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(2);
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

impl Context {
    pub fn new(client: Client, metrics: Metrics) -> Context {
        Context {
            recorder: Recorder::new(client.clone(), "pgvs3-operator", std::env::var("POD_NAME").ok()),
            client,
            metrics,
            failures: Mutex::new(HashMap::new()),
            due: Mutex::new(HashMap::new()),
            service_monitors: tokio::sync::Mutex::new(None),
            without_autoscaler: Mutex::new(HashSet::new()),
            adoptable: HashSet::new(),
            connections: Mutex::new(HashMap::new()),
            issuer: IssuerState::default(),
            cleanup_grace: DEFAULT_CLEANUP_GRACE,
            catalog_timeout: crate::database::DEFAULT_CATALOG_TIMEOUT,
            namespace_slots: Mutex::new(HashMap::new()),
        }
    }

    /// With `timeout` as the catalog's timeout (see [`Context::catalog_timeout`]).
    pub fn with_catalog_timeout(mut self, timeout: Duration) -> Context {
        self.catalog_timeout = timeout;
        self
    }

    /// One of the [`NAMESPACE_SHARE`] slots of `kind`'s reconciles in `namespace`, held while the
    /// reconcile runs; `None` when they are all taken (the reconcile is tried again after
    /// [`NAMESPACE_BUSY_RETRY`], leaving its controller slot to other namespaces).
    pub fn namespace_slot(&self, kind: &'static str, namespace: &str) -> Option<OwnedSemaphorePermit> {
        let semaphore = {
            let mut slots = self.namespace_slots.lock().expect("namespace slots");
            slots
                .entry((kind, namespace.to_string()))
                .or_insert_with(|| Arc::new(Semaphore::new(NAMESPACE_SHARE)))
                .clone()
        };
        semaphore.try_acquire_owned().ok()
    }

    /// With `grace` as the cleanup's grace (see [`Context::cleanup_grace`]).
    pub fn with_cleanup_grace(mut self, grace: Duration) -> Context {
        self.cleanup_grace = grace;
        self
    }

    /// Whether the cleanup of `deleted` (backoff key `key`) gives up on `pool`'s unreachable
    /// catalog now; when it will later, its retry is due by then whatever its backoff.
    pub fn cleanup_gives_up(&self, key: &str, pool: &crate::crd::GatewayPool, deleted: &ObjectMeta) -> bool {
        match crate::database::cleanup_grace_left(pool, deleted, self.cleanup_grace, Timestamp::now()) {
            None => false,
            Some(left) if left.is_zero() => true,
            Some(left) => {
                let mut due = self.due.lock().expect("due table");
                due.insert(key.to_string(), Instant::now() + left);
                false
            }
        }
    }

    /// Keeps `connection` as the last one `pool` of `namespace` was bound with.
    pub fn remember_connection(&self, namespace: &str, pool: &str, connection: &Connection) {
        let mut connections = self.connections.lock().expect("not poisoned");
        connections.insert((namespace.to_string(), pool.to_string()), connection.clone());
    }

    /// The connection `pool` of `namespace` was last bound with, if any since the start.
    pub fn last_connection(&self, namespace: &str, pool: &str) -> Option<Connection> {
        let connections = self.connections.lock().expect("not poisoned");
        connections.get(&(namespace.to_string(), pool.to_string())).cloned()
    }

    /// With the buckets an admin marked adoptable, as `namespace/bucket`.
    pub fn with_adoptable(mut self, marks: &[String]) -> Context {
        self.adoptable = marks
            .iter()
            .filter_map(|mark| mark.split_once('/'))
            .map(|(namespace, bucket)| (namespace.to_string(), bucket.to_string()))
            .collect();
        self
    }

    /// Whether an admin marked the root-owned `bucket` adoptable by Buckets of `namespace`.
    pub fn adoptable(&self, namespace: &str, bucket: &str) -> bool {
        self.adoptable.contains(&(namespace.to_string(), bucket.to_string()))
    }

    /// Whether the API server serves ServiceMonitors, by discovery (readable by every
    /// authenticated client, so no cluster-wide grant), asked at most once per
    /// [`SERVICE_MONITOR_RECHECK`].
    pub async fn serves_service_monitors(&self) -> Result<bool> {
        let mut known = self.service_monitors.lock().await;
        if let Some((asked, serves)) = *known
            && asked.elapsed() < SERVICE_MONITOR_RECHECK
        {
            return Ok(serves);
        }
        let serves = match self.client.list_api_group_resources(SERVICE_MONITOR_API).await {
            Ok(list) => list.resources.iter().any(|r| r.name == "servicemonitors"),
            Err(kube::Error::Api(status)) if status.code == 404 => false,
            Err(err) => return Err(err.into()),
        };
        *known = Some((Instant::now(), serves));
        Ok(serves)
    }

    /// Whether `pool` (a backoff key) is known to have no autoscaler.
    pub fn known_without_autoscaler(&self, pool: &str) -> bool {
        self.without_autoscaler.lock().expect("autoscaler table").contains(pool)
    }

    /// Records whether `pool` has an autoscaler now.
    pub fn set_autoscaler(&self, pool: &str, exists: bool) {
        let mut table = self.without_autoscaler.lock().expect("autoscaler table");
        if exists {
            table.remove(pool);
        } else {
            table.insert(pool.to_string());
        }
    }

    /// Records one more failure of `key` and returns how long to wait before retrying it: its
    /// backoff, or less when a retry is due earlier (a cleanup about to give up).
    pub fn backoff(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().expect("backoff table");
        let count = failures.entry(key.to_string()).or_insert(0);
        let delay = backoff_delay(*count);
        *count += 1;
        let due = self.due.lock().expect("due table").remove(key);
        due.map_or(delay, |due| delay.min(due.saturating_duration_since(Instant::now())))
    }

    /// A successful reconcile resets the object's backoff.
    pub fn succeeded(&self, key: &str) {
        self.failures.lock().expect("backoff table").remove(key);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A catalog statement failed; the text is the database's own message (see [`db_cause`]).
    #[error("catalog: {}", db_cause(.0))]
    Catalog(#[from] tokio_postgres::Error),
    /// The pool's database could not be reached: which server was tried, as whom, and why
    /// (for a refused TLS certificate or channel binding, the reason `PgTls::refusal` names).
    #[error("catalog at {target}: {}", refusal.clone().unwrap_or_else(|| db_cause(source)))]
    CatalogConnect {
        target: String,
        refusal: Option<String>,
        source: tokio_postgres::Error,
    },
    /// The pool's database did not answer within the catalog timeout (connecting or in a
    /// statement): the work was abandoned and its connection closed.
    #[error("catalog at {target}: the database did not answer within {}s", after.as_secs())]
    CatalogTimeout { target: String, after: Duration },
    /// The resource asks for something that can never work (a name the catalog refuses);
    /// retrying cannot help, so it waits for the spec to change.
    #[error("{0}")]
    InvalidSpec(String),
    #[error("{0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("Secret {secret}: {problem}")]
    Secret { secret: String, problem: String },
    #[error("resource has no namespace")]
    NoNamespace,
    /// A cache bucket cannot be dropped yet: bodies acknowledged in write-back mode have not
    /// reached the origin. Retried with backoff until the uploads drain.
    #[error("{0}")]
    PendingWriteBack(String),
    /// An object the resource would write exists and is somebody else's (see
    /// `kube_ops::claim`): left alone, and reported until it is renamed or deleted.
    #[error("{0}")]
    Exists(String),
    /// An orphaned child was not adopted because its owner is being deleted (see
    /// `kube_ops::guard`): the reconcile that would have adopted it read the owner before its
    /// deletion; the next one sees the deletion.
    #[error("{0}")]
    OwnerGone(String),
    /// The API server's service-account issuer could not be read (OIDC discovery, JWKS).
    #[error("service-account issuer: {0}")]
    Issuer(String),
}

impl Error {
    /// Short label for the failures metric.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(status)) if status.code == 409 => "Conflict",
            Error::Kube(_) => "KubeApi",
            Error::Catalog(_) | Error::CatalogConnect { .. } => "Catalog",
            Error::CatalogTimeout { .. } => "CatalogTimeout",
            Error::InvalidSpec(_) => "InvalidSpec",
            Error::Finalizer(inner) => match &**inner {
                kube::runtime::finalizer::Error::ApplyFailed(err)
                | kube::runtime::finalizer::Error::CleanupFailed(err) => err.reason(),
                _ => "Finalizer",
            },
            Error::Secret { .. } => "Secret",
            Error::NoNamespace => "NoNamespace",
            Error::PendingWriteBack(_) => "PendingWriteBack",
            Error::Issuer(_) => "Issuer",
            Error::Exists(_) => RESOURCE_EXISTS,
            Error::OwnerGone(_) => "OwnerGone",
        }
    }
}

/// The condition reason of a resource whose child's name is taken by an object it does not own.
pub const RESOURCE_EXISTS: &str = "ResourceExists";

/// What a PostgreSQL error says, with its cause: `tokio_postgres::Error`'s own text is only its
/// kind ("db error", "error connecting to server"), so this adds the server's message (severity,
/// SQLSTATE, detail, hint) or the chain of sources (refused, timed out, no such host).
pub fn db_cause(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        let mut text = format!("{}: {} (SQLSTATE {})", db.severity(), db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            text.push_str(&format!("; {detail}"));
        }
        if let Some(hint) = db.hint() {
            text.push_str(&format!("; hint: {hint}"));
        }
        return text;
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// Counts a failed reconcile and schedules its retry with the object's backoff.
pub fn error_policy<K: kube::Resource>(
    kind: &str,
    object: &K,
    error: &Error,
    ctx: &Context,
) -> kube::runtime::controller::Action {
    let key = backoff_key(kind, object);
    tracing::warn!(object = %key, %error, "reconcile failed");
    ctx.metrics.failure(kind, error.reason());
    kube::runtime::controller::Action::requeue(ctx.backoff(&key))
}

/// The backoff table's key of an object.
pub fn backoff_key<K: kube::Resource>(kind: &str, object: &K) -> String {
    let meta = object.meta();
    format!(
        "{kind}/{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// Delay before retrying after `failures` earlier consecutive failures.
pub fn backoff_delay(failures: u32) -> Duration {
    FIRST_BACKOFF.saturating_mul(1 << failures.min(16)).min(MAX_BACKOFF)
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        assert_eq!(backoff_delay(0), Duration::from_secs(2));
        assert_eq!(backoff_delay(1), Duration::from_secs(4));
        assert_eq!(backoff_delay(2), Duration::from_secs(8));
        assert_eq!(backoff_delay(7), Duration::from_secs(256));
        assert_eq!(backoff_delay(8), MAX_BACKOFF);
        assert_eq!(backoff_delay(u32::MAX), MAX_BACKOFF);
    }
}
