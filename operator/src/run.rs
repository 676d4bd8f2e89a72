//! The operator process: health and metrics server, leader election, the three controllers,
//! graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use futures::Stream;
use futures::StreamExt;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::runtime::{PredicateConfig, WatchStreamExt, predicates};
use kube::{Client, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::context::Context;
use crate::crd::{Bucket, GatewayPool, OriginCache, PoolRole, RELOAD_LABEL};
use crate::lease::Elector;
use crate::metrics::Metrics;
use crate::origin_cache::ca_bundle::Source;
use crate::{bucket, gateway_pool, identity, origin_cache};

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "PGVS3_OPERATOR_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Watch only these namespaces (repeat, or separate with commas; default: all namespaces).
    /// Each gets controllers of its own, so the operator needs rights in those namespaces only.
    #[arg(
        long = "watch-namespace",
        env = "PGVS3_OPERATOR_WATCH_NAMESPACE",
        value_delimiter = ','
    )]
    pub watch_namespaces: Vec<String>,
    /// Name of the Lease that elects the one active replica.
    #[arg(long, env = "PGVS3_OPERATOR_LEASE_NAME", default_value = "pgvs3-operator")]
    pub lease_name: String,
    /// Namespace of the Lease (default: the client's namespace, i.e. the operator's own).
    #[arg(long, env = "PGVS3_OPERATOR_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Run without leader election (a single replica).
    #[arg(long, env = "PGVS3_OPERATOR_NO_LEADER_ELECTION")]
    pub no_leader_election: bool,
    /// Seconds a leader's Lease lasts without renewal: how long a crashed leader's replica
    /// waits before it takes over. The leader renews a third of that before it expires.
    #[arg(long, env = "PGVS3_OPERATOR_LEASE_DURATION", default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..))]
    pub lease_duration: u64,
    /// A root-owned bucket an admin lets one namespace's Buckets adopt, as `namespace/bucket`
    /// (repeat, or separate with commas). Without it no Bucket takes over a bucket it did not
    /// create, save one retained by a Bucket of the same namespace and name.
    #[arg(long = "adoptable-bucket", env = "PGVS3_OPERATOR_ADOPTABLE_BUCKETS", value_delimiter = ',', value_parser = parse_adoptable)]
    pub adoptable_buckets: Vec<String>,
    /// Seconds the cleanup of a Bucket or OriginCache whose pool is being deleted too (a
    /// namespace deleted whole) retries an unreachable database before it gives up, leaving
    /// the catalog's rows as they are (a Warning Event says which).
    #[arg(long, env = "PGVS3_OPERATOR_CLEANUP_GRACE", default_value_t = crate::context::DEFAULT_CLEANUP_GRACE.as_secs())]
    pub cleanup_grace: u64,
    /// Seconds one catalog interaction (connecting to a pool's database and the statements of
    /// one step) may take before the database counts as not answering: the resource says so,
    /// its reconcile is retried with backoff, and a cleanup counts it as unreachable.
    #[arg(long, env = "PGVS3_OPERATOR_CATALOG_TIMEOUT", default_value_t = crate::database::DEFAULT_CATALOG_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub catalog_timeout: u64,
}

fn parse_adoptable(mark: &str) -> Result<String, String> {
    match mark.split_once('/') {
        Some((namespace, bucket)) if !namespace.is_empty() && !bucket.is_empty() => Ok(mark.to_string()),
        _ => Err(format!("{mark:?}: expected namespace/bucket")),
    }
}

/// The operator's User-Agent towards the API server.
pub const USER_AGENT: &str = concat!("pgvs3-operator/", env!("CARGO_PKG_VERSION"));

fn api<K>(client: &Client, namespace: &Option<String>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let mut config = kube::Config::infer().await.context("Kubernetes client configuration")?;
    // Named in the API server's audit log and metrics (kube-rs sends none of its own).
    config
        .headers
        .push((http::header::USER_AGENT, http::HeaderValue::from_static(USER_AGENT)));
    let client = Client::try_from(config).context("Kubernetes client")?;
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("binding {}", args.metrics_addr))?;
    // The address bound, a port 0 resolved: what a supervisor started on `:0` reads back.
    let bound = listener.local_addr().context("the health listener's address")?;
    tracing::info!("health and metrics endpoints on http://{bound}/");
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| pgvs3_secret::random_token(9));
    run_on(client, listener, identity, &args, shutdown_signal()).await
}

/// The operator on an API client and a listener for its health and metrics endpoints, as
/// replica `identity`: waits for leadership (unless election is off), then runs the controllers
/// until `shutdown` resolves (releasing the Lease). A leader that cannot renew its Lease in time
/// stops its controllers at once (another replica may take over as soon as the Lease expires),
/// says so on /readyz, and campaigns again.
pub async fn run_on(
    client: Client,
    listener: tokio::net::TcpListener,
    identity: String,
    args: &RunArgs,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let metrics = Metrics::default();
    let (role, readiness) = watch::channel(Role::Standby);
    let server = tokio::spawn(serve_health(listener, metrics.clone(), readiness));
    let outcome = lead(client, identity, args, shutdown, metrics, &role).await;
    role.send_replace(Role::Standby);
    server.abort();
    outcome
}

/// What /readyz reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Standby,
    Leading,
    /// Was leading, and stopped: the reason (the Lease not renewed in time, taken by another).
    Fenced(String),
}

impl Role {
    fn readiness(&self) -> String {
        match self {
            Role::Standby => "standing by\n".to_string(),
            Role::Leading => "leading\n".to_string(),
            Role::Fenced(reason) => format!("standing by: stopped leading ({reason})\n"),
        }
    }
}

async fn lead(
    client: Client,
    identity: String,
    args: &RunArgs,
    shutdown: impl Future<Output = ()>,
    metrics: Metrics,
    role: &watch::Sender<Role>,
) -> anyhow::Result<()> {
    let mut shutdown = std::pin::pin!(shutdown);
    let ctx = Arc::new(
        Context::new(client.clone(), metrics)
            .with_adoptable(&args.adoptable_buckets)
            .with_cleanup_grace(Duration::from_secs(args.cleanup_grace))
            .with_catalog_timeout(Duration::from_secs(args.catalog_timeout)),
    );
    if args.no_leader_election {
        tracing::info!("leader election off: starting controllers");
        role.send_replace(Role::Leading);
        tokio::select! {
            () = watched(client, &args.watch_namespaces, ctx) => tracing::warn!("controllers ended"),
            () = &mut shutdown => tracing::info!("shutting down"),
        }
        return Ok(());
    }
    let leases: Api<Lease> = match &args.lease_namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::default_namespaced(client.clone()),
    };
    let duration = Duration::from_secs(args.lease_duration);
    let mut elector = Elector::new(leases, &args.lease_name, &identity, duration);
    loop {
        tracing::info!(lease = %args.lease_name, "waiting for leadership");
        let renewed = tokio::select! {
            renewed = elector.acquire() => renewed,
            () = &mut shutdown => return Ok(()),
        };
        tracing::info!("leading: starting controllers");
        role.send_replace(Role::Leading);
        let controllers = watched(client.clone(), &args.watch_namespaces, ctx.clone());
        // Dropping the controllers' future (a lost Lease) cancels every watch and reconcile.
        tokio::select! {
            () = controllers => {
                tracing::warn!("controllers ended");
                break;
            }
            () = &mut shutdown => {
                tracing::info!("shutting down");
                break;
            }
            lost = elector.hold(renewed) => {
                tracing::error!(reason = %lost, "stopped leading: controllers stopped");
                role.send_replace(Role::Fenced(lost));
            }
        }
    }
    elector.release().await;
    Ok(())
}

/// The controllers of every namespace, or of each of `namespaces` (a set of its own per
/// namespace: a watch of one namespace needs rights in that namespace only).
async fn watched(client: Client, namespaces: &[String], ctx: Arc<Context>) {
    if namespaces.is_empty() {
        return controllers(client, None, ctx).await;
    }
    let each = namespaces
        .iter()
        .map(|namespace| controllers(client.clone(), Some(namespace.clone()), ctx.clone()));
    futures::future::join_all(each).await;
}

async fn controllers(client: Client, namespace: Option<String>, ctx: Arc<Context>) {
    let config = ControllerConfig::default().concurrency(crate::context::CONCURRENCY);
    let pools = Controller::new(api::<GatewayPool>(&client, &namespace), watcher::Config::default());
    let pools_reader = pools.store();
    let caches = Controller::new(api::<OriginCache>(&client, &namespace), watcher::Config::default());
    let caches_reader = caches.store();
    // The cluster's service-account issuer into every Primary pool's catalog (workload identity).
    let issuer_publisher = identity::publisher(ctx.clone(), pools_reader.clone());
    let pools = owns_service_monitors(pools, &client, &namespace, &ctx).await;
    let pool_controller = pool_watches(
        pools.with_config(config.clone()),
        &client,
        &namespace,
        pools_reader,
        &caches_reader,
    )
    .run(gateway_pool::reconcile, gateway_pool::error_policy, ctx.clone())
    .for_each(|_| async {});
    let bucket_controller = bucket_controller(&client, &namespace, config.clone())
        .run(bucket::reconcile, bucket::error_policy, ctx.clone())
        .for_each(|_| async {});
    let cache_controller = cache_watches(caches.with_config(config), &client, &namespace, caches_reader)
        .run(origin_cache::reconcile, origin_cache::error_policy, ctx)
        .for_each(|_| async {});
    tokio::join!(pool_controller, bucket_controller, cache_controller, issuer_publisher);
}

/// A deleted or edited ServiceMonitor is put back at once, as the other children are; the
/// API is watched only when served at start (one installed later is applied at the next
/// reconcile, watched after a restart of the operator).
async fn owns_service_monitors(
    pools: Controller<GatewayPool>,
    client: &Client,
    namespace: &Option<String>,
    ctx: &Context,
) -> Controller<GatewayPool> {
    match ctx.serves_service_monitors().await {
        Ok(true) => {
            let resource = gateway_pool::build::service_monitor_resource();
            let monitors: Api<DynamicObject> = match namespace {
                Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            pools.owns_with(monitors, resource, own_objects())
        }
        _ => pools,
    }
}

/// The GatewayPools' children, and what else reconciles a pool: a (labelled) Secret or a
/// database Service it refers to, an OriginCache it serves and the CA bundle of one.
fn pool_watches(
    pools: Controller<GatewayPool>,
    client: &Client,
    namespace: &Option<String>,
    pools_reader: Store<GatewayPool>,
    caches_reader: &Store<OriginCache>,
) -> Controller<GatewayPool> {
    pools
        .owns(api::<Deployment>(client, namespace), own_objects())
        .owns(api::<Service>(client, namespace), own_objects())
        .owns(api::<ConfigMap>(client, namespace), own_objects())
        .owns(api::<PodDisruptionBudget>(client, namespace), own_objects())
        .owns(api::<HorizontalPodAutoscaler>(client, namespace), own_objects())
        // The Secret holding the gateways' connection string.
        .owns(api::<Secret>(client, namespace), own_objects())
        .watches(api::<Secret>(client, namespace), reloaded_secrets(), {
            let named = referrers(pools_reader.clone(), |pool: &GatewayPool, secret| {
                pool.spec.postgres.credentials_secret() == secret
                    || pool.spec.master_key_ref(&pool.name_any()).name == secret
                    || pool.spec.protocols.ojs_token_secret() == Some(secret)
                    || pool.spec.tls.as_ref().is_some_and(|tls| tls.secret_ref == secret)
                    || pool.spec.postgres.ca_secret().as_deref() == Some(secret)
            });
            let bundles = bundle_holders(pools_reader.clone(), caches_reader.clone(), Source::Secret);
            move |secret: Secret| {
                let mut pools = named(secret.clone());
                pools.extend(bundles(secret));
                pools
            }
        })
        .watches_stream(
            metadata_of(api::<PartialObjectMeta<Service>>(client, namespace)),
            referrers(pools_reader.clone(), |pool: &GatewayPool, service| {
                pool.spec.postgres.expected_service(pool.spec.role).as_deref() == Some(service)
            }),
        )
        // The gateways mount the CA bundles of their OriginCaches: a cache's change, or one
        // of the (labelled) Secret or ConfigMap holding its bundle, reaches the pools serving it.
        .watches(api::<OriginCache>(client, namespace), watcher::Config::default(), {
            let pools = pools_reader.clone();
            move |cache: OriginCache| serving_pools(&pools, &cache)
        })
        .watches(
            api::<ConfigMap>(client, namespace),
            reloaded_secrets(),
            bundle_holders(pools_reader, caches_reader.clone(), Source::ConfigMap),
        )
        // A pool is held while Buckets refer to it (gateway_pool/in_use.rs): one created or
        // gone reaches its pool. Only a change of its finalizers (first seen; the cleanup's
        // added; removed as its cleanup is done and it goes), not every status update of
        // every Bucket, which would re-apply the pool's children each time. (OriginCaches
        // reach theirs through the watch above.)
        .watches_stream(
            watcher::watcher(api::<Bucket>(client, namespace), watcher::Config::default())
                .touched_objects()
                .predicate_filter(predicates::finalizers, PredicateConfig::default()),
            |bucket: Bucket| {
                let namespace = bucket.namespace().unwrap_or_default();
                Some(ObjectRef::new(&bucket.spec.gateway_pool_ref).within(&namespace))
            },
        )
}

/// The Buckets, their credentials Secrets and workload-identity ConfigMaps, and what else
/// reconciles a Bucket: its pool, a ServiceAccount or namespace its roles name.
fn bucket_controller(client: &Client, namespace: &Option<String>, config: ControllerConfig) -> Controller<Bucket> {
    let buckets = Controller::new(api::<Bucket>(client, namespace), watcher::Config::default());
    let buckets_reader = buckets.store();
    let bucket_controller = buckets
        .with_config(config)
        .owns(api::<Secret>(client, namespace), own_objects())
        // The ConfigMap of a Bucket's workload identity, put back when edited or deleted.
        .owns(api::<ConfigMap>(client, namespace), own_objects())
        // A Bucket is Ready only while its pool is: a pool's change reaches its Buckets.
        .watches(
            api::<GatewayPool>(client, namespace),
            watcher::Config::default(),
            referrers(buckets_reader.clone(), |bucket: &Bucket, pool| {
                bucket.spec.gateway_pool_ref == pool
            }),
        )
        // A ServiceAccount created, deleted or recreated: the roles that name it pin its UID
        // (bucket/role.rs), so a deleted one's tokens stop at once.
        .watches_stream(
            metadata_of(api::<PartialObjectMeta<ServiceAccount>>(client, namespace)),
            buckets_where(
                buckets_reader.clone(),
                |bucket, account: &PartialObjectMeta<ServiceAccount>| {
                    let namespace = account.namespace().unwrap_or_default();
                    bucket::role::names_service_account(bucket, &namespace, &account.name_any())
                },
            ),
        );
    // A namespace labelled, unlabelled, created or deleted: the Buckets that select namespaces
    // by label resolve their roles' subjects again. Namespaces are cluster-scoped: watched only
    // by an operator of every namespace (one of one namespace refuses `namespaceSelector`).
    match namespace {
        None => bucket_controller.watches_stream(
            metadata_of(Api::<PartialObjectMeta<Namespace>>::all(client.clone())),
            buckets_where(buckets_reader, |bucket, _: &PartialObjectMeta<Namespace>| {
                bucket::role::selects_namespaces(bucket)
            }),
        ),
        Some(_) => bucket_controller,
    }
}

/// The OriginCaches' credentials Secrets, and the (labelled) Secrets and ConfigMaps a cache
/// refers to: its origin's credentials and CA bundle.
fn cache_watches(
    caches: Controller<OriginCache>,
    client: &Client,
    namespace: &Option<String>,
    caches_reader: Store<OriginCache>,
) -> Controller<OriginCache> {
    caches
        .owns(api::<Secret>(client, namespace), own_objects())
        .watches(
            api::<Secret>(client, namespace),
            reloaded_secrets(),
            referrers(caches_reader.clone(), |cache: &OriginCache, secret| {
                cache.spec.credentials_secret_ref == secret
                    || bundle_source(cache) == Some(Source::Secret(secret.into()))
            }),
        )
        .watches(
            api::<ConfigMap>(client, namespace),
            reloaded_secrets(),
            referrers(caches_reader, |cache: &OriginCache, config_map| {
                bundle_source(cache) == Some(Source::ConfigMap(config_map.into()))
            }),
        )
}

/// The watch of the objects the operator writes (the pools' children, the credentials Secrets,
/// the Bucket ConfigMaps): only those it labels, not every Deployment, Service, ConfigMap or
/// Secret of the cluster in this process's memory.
fn own_objects() -> watcher::Config {
    watcher::Config::default().labels("app.kubernetes.io/managed-by=pgvs3-operator")
}

/// The watch of objects the operator does not write and cannot select by label (the database
/// Services CloudNativePG makes, the ServiceAccounts and namespaces a Bucket's roles name):
/// their metadata only, all their mappers read (name, namespace, labels). The spec and status
/// of every Service, ServiceAccount and Namespace of the cluster are never sent to the
/// operator, let alone decoded.
fn metadata_of<K>(
    api: Api<PartialObjectMeta<K>>,
) -> impl Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Default,
{
    watcher::watcher(api, watcher::Config::default()).touched_objects()
}

/// The watch of the Secrets pools and caches refer to (database credentials, master keys, OJS
/// tokens, origin credentials): only those labelled [`RELOAD_LABEL`]`=true`, as CloudNativePG
/// watches only Secrets labelled `cnpg.io/reload`. Watching every Secret of the cluster would
/// put them all in this process's memory and take a cluster-wide `watch secrets` to do it.
/// Unlabelled ones are still read by name on every reconcile: a change to them is picked up at
/// the next resync (or any change to the resource) instead of at once.
fn reloaded_secrets() -> watcher::Config {
    watcher::Config::default().labels(&format!("{RELOAD_LABEL}=true"))
}

/// Maps a changed object (a Secret, a Service) to the resources in its namespace that refer to
/// it by name, so they are reconciled when it changes.
fn referrers<K, W>(
    store: Store<K>,
    refers: impl Fn(&K, &str) -> bool + Send + Sync + 'static,
) -> impl Fn(W) -> Vec<ObjectRef<K>> + Send + Sync + 'static
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    W: kube::Resource,
{
    move |changed: W| {
        let namespace = changed.namespace();
        let name = changed.name_any();
        store
            .state()
            .into_iter()
            .filter(|object| object.namespace() == namespace && refers(object, &name))
            .map(|object| ObjectRef::from_obj(&*object))
            .collect()
    }
}

/// Where `cache`'s CA bundle is kept, if it has one.
fn bundle_source(cache: &OriginCache) -> Option<Source> {
    cache.spec.origin.ca_bundle.as_ref().and_then(Source::of)
}

/// The pools whose gateways mount `cache`'s CA bundle: its pool, and the Standby pools of that
/// pool's cluster.
fn serving_pools(pools: &Store<GatewayPool>, cache: &OriginCache) -> Vec<ObjectRef<GatewayPool>> {
    let namespace = cache.namespace();
    let in_namespace: Vec<_> = pools
        .state()
        .into_iter()
        .filter(|pool| pool.namespace() == namespace)
        .collect();
    let primary = in_namespace
        .iter()
        .find(|pool| pool.name_any() == cache.spec.gateway_pool_ref);
    let cluster = primary.and_then(|pool| pool.spec.postgres.cluster_name.clone());
    in_namespace
        .iter()
        .filter(|pool| {
            pool.name_any() == cache.spec.gateway_pool_ref
                || (pool.spec.role == PoolRole::Standby
                    && cluster.is_some()
                    && pool.spec.postgres.cluster_name == cluster)
        })
        .map(|pool| ObjectRef::from_obj(&**pool))
        .collect()
}

/// Maps a changed Secret or ConfigMap (`source` makes its [`Source`]) to the pools mounting a CA
/// bundle it holds.
fn bundle_holders<W: kube::Resource>(
    pools: Store<GatewayPool>,
    caches: Store<OriginCache>,
    source: fn(String) -> Source,
) -> impl Fn(W) -> Vec<ObjectRef<GatewayPool>> + Send + Sync + 'static {
    move |changed: W| {
        let held = Some(source(changed.name_any()));
        caches
            .state()
            .into_iter()
            .filter(|cache| cache.namespace() == changed.namespace() && bundle_source(cache) == held)
            .flat_map(|cache| serving_pools(&pools, &cache))
            .collect()
    }
}

/// Maps a changed object to the Buckets `concerns` says it concerns.
fn buckets_where<W>(
    store: Store<Bucket>,
    concerns: impl Fn(&Bucket, &W) -> bool + Send + Sync + 'static,
) -> impl Fn(W) -> Vec<ObjectRef<Bucket>> + Send + Sync + 'static {
    move |changed: W| {
        store
            .state()
            .into_iter()
            .filter(|bucket| concerns(bucket, &changed))
            .map(|bucket| ObjectRef::from_obj(&*bucket))
            .collect()
    }
}

/// /healthz and /readyz: the process runs (a standby replica is ready to take over; the body
/// says which it is, and why a former leader stopped). /metrics: Prometheus text.
pub async fn serve_health(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    role: watch::Receiver<Role>,
) -> anyhow::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let metrics = metrics.clone();
        let role = role.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                let (status, body) = match request.uri().path() {
                    "/healthz" => (StatusCode::OK, "ok\n".to_string()),
                    "/readyz" => (StatusCode::OK, role.borrow().readiness()),
                    "/metrics" => (StatusCode::OK, metrics.render()),
                    _ => (StatusCode::NOT_FOUND, "not found\n".to_string()),
                };
                let mut response = Response::new(Full::new(Bytes::from(body)));
                *response.status_mut() = status;
                std::future::ready(Ok::<_, std::convert::Infallible>(response))
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

async fn shutdown_signal() {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
