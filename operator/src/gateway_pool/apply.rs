//! Reconciles a GatewayPool: checks the database Service and Secrets, applies the built objects
//! and reports status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::build::{self, Inputs, Login};
use super::in_use::{self, IN_USE};
use crate::context::{self, Context, Error, Result, backoff_key};
use crate::crd::{
    DEGRADED, GatewayPool, GatewayPoolStatus, PROGRESSING, PoolRole, READY, RELOAD_LABEL, ROOT_ACCESS_KEY_KEY,
    ROOT_SECRET_KEY_KEY, Verdict, waiting,
};
use crate::database::INVALID_SPEC;
use crate::finalizer;
use crate::kube_ops::{self, FIELD_MANAGER};
use crate::origin_cache::ca_bundle;

pub const KIND: &str = "GatewayPool";
/// While a dependency is missing, look again this often (watches usually notice sooner).
pub const WAIT_FOR_DEPENDENCY: Duration = Duration::from_secs(30);
pub const RESYNC: Duration = Duration::from_secs(300);

pub async fn reconcile(pool: Arc<GatewayPool>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.reconcile(KIND);
    let namespace = pool.namespace().ok_or(Error::NoNamespace)?;
    let pools: Api<GatewayPool> = Api::namespaced(ctx.client.clone(), &namespace);
    let action = if pool.meta().deletion_timestamp.is_some() {
        release(&pool, &ctx, &pools, &namespace).await?
    } else {
        // Before anything else: a Bucket created next must find its pool held.
        finalizer::mark(&pools, &*pool, IN_USE, true).await?;
        in_use::hold_secrets(&ctx, &pool, &namespace).await?;
        reconcile_in(&pool, &ctx, &namespace).await?
    };
    ctx.succeeded(&backoff_key(KIND, &*pool));
    Ok(action)
}

/// A pool being deleted: held while resources refer to it (their cleanup needs its database),
/// saying which in its status; released, with its Secrets, once none does.
///
/// Its children are left alone meanwhile: the garbage collector deletes them once the pool is
/// gone, or with `--cascade=orphan` removes their owner references. Applying them now would
/// put back a reference it just removed, and it would then delete that child as one whose
/// owner is gone. The gateways keep serving the Buckets until they are cleaned up.
async fn release(pool: &GatewayPool, ctx: &Context, pools: &Api<GatewayPool>, namespace: &str) -> Result<Action> {
    if !pool.finalizers().iter().any(|f| f == IN_USE) {
        return Ok(Action::await_change());
    }
    let referrers = in_use::hold_secrets(ctx, pool, namespace).await?;
    if referrers.is_empty() {
        finalizer::mark(pools, pool, IN_USE, false).await?;
        return Ok(Action::await_change());
    }
    let message = format!(
        "deletion waits for {} to be cleaned up: that needs this pool's database",
        referrers.join(", ")
    );
    let database = pool.spec.postgres.host(pool.spec.role);
    report(ctx, pool, pools, database, IN_USE_REASON, &message).await?;
    // Their deletions are watched (run.rs); this is the fallback.
    Ok(Action::requeue(WAIT_FOR_DEPENDENCY))
}

/// The condition reason of a pool whose deletion waits for the resources that refer to it.
pub const IN_USE_REASON: &str = "InUse";

pub fn error_policy(pool: Arc<GatewayPool>, error: &Error, ctx: Arc<Context>) -> Action {
    context::error_policy(KIND, &*pool, error, &ctx)
}

async fn reconcile_in(pool: &GatewayPool, ctx: &Context, namespace: &str) -> Result<Action> {
    let client = &ctx.client;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), namespace);
    let database = pool.spec.postgres.host(pool.spec.role);

    // What the schema cannot check (or did not, for a pool admitted before its rules): only
    // an edit of the spec can fix it, and an edit reconciles anyway.
    if let Some(message) = build::spec_refusal(pool) {
        report(ctx, pool, &pools, database, INVALID_SPEC, &message).await?;
        return Ok(Action::await_change());
    }

    // A standby pool on a cluster without replicas has no `-ro` Service: say so and wait for
    // it rather than start gateways that cannot connect.
    if let Some(service) = pool.spec.postgres.expected_service(pool.spec.role) {
        let services: Api<Service> = Api::namespaced(client.clone(), namespace);
        if services.get_opt(&service).await?.is_none() {
            let message = format!("PostgreSQL Service {service} does not exist");
            return wait_for(ctx, pool, &pools, database, "DatabaseUnavailable", &message).await;
        }
    }

    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let (referenced, login) = match referenced_secrets(pool, &secrets).await? {
        Ok(found) => found,
        Err((reason, message)) => return wait_for(ctx, pool, &pools, database, reason, &message).await,
    };

    let origin_cas = ca_bundle::of_pools(client, namespace, &served_pools(&pools, pool).await?).await?;

    let inputs = Inputs {
        secrets_digest: kube_ops::secrets_digest(&referenced),
        service_monitor_crd: ctx.serves_service_monitors().await?,
        login,
        origin_cas,
    };
    let objects = build::build(pool, &inputs);

    let (deployment, mut refused) = apply_children(ctx, pool, namespace, &objects).await;
    if let Some(at) = refused.iter().position(|(_, err)| matches!(err, Error::OwnerGone(_))) {
        // This reconcile's copy of the pool predates its deletion: the next one releases it.
        return Err(refused.swap_remove(at).1);
    }
    if !refused.is_empty() {
        // Refused by the API server (a quota, an admission plugin, a webhook, a value the
        // schema let through): the pool says which children and why, then retries with
        // backoff. The others were applied all the same.
        // A name taken by an object the pool does not own is the user's to resolve: said
        // as such, and the object left alone.
        let taken = refused.iter().any(|(_, err)| matches!(err, Error::Exists(_)));
        let message = refused
            .iter()
            .map(|(kind, err)| match err {
                Error::Exists(message) => message.clone(),
                err => format!("{kind} {}: {}", pool.name_any(), refusal(err)),
            })
            .collect::<Vec<_>>()
            .join("; ");
        let reason = if taken { context::RESOURCE_EXISTS } else { "ApplyFailed" };
        report(ctx, pool, &pools, database, reason, &message).await?;
        return Err(refused.swap_remove(0).1);
    }
    let deployment = deployment.expect("applied when nothing was refused");
    let rollout = Rollout::of(&deployment);
    let failing = if rollout.complete() {
        None
    } else {
        failing_gateways(ctx, pool, namespace).await?
    };
    let verdicts = rollout.verdicts(&database, failing.as_deref());
    let previous = pool.status.clone().unwrap_or_default();
    let status = GatewayPoolStatus {
        observed_generation: pool.meta().generation,
        conditions: kube_ops::conditions(ctx, pool, &previous.conditions, &verdicts).await,
        replicas: Some(rollout.replicas),
        ready_replicas: Some(rollout.ready),
        database: Some(database),
        endpoints: Some(build::endpoints(pool)),
    };
    kube_ops::apply_status(&pools, pool, serde_json::to_value(status).expect("status serializes")).await?;
    // Pods are not watched (every gateway pod of the cluster would be in memory): while the
    // rollout is under way, look again soon, so gateways that cannot start are reported.
    Ok(Action::requeue(if rollout.complete() { RESYNC } else { ROLLOUT_CHECK }))
}

/// The Secrets the gateways read (their digest rolls the pods when one changes; the master key
/// is created when missing) and the database login, or why the pool waits for them: a reason
/// and a message for its conditions.
async fn referenced_secrets(
    pool: &GatewayPool,
    secrets: &Api<Secret>,
) -> Result<std::result::Result<(Vec<Secret>, Login), (&'static str, String)>> {
    let master_key = ensure_master_key(secrets, pool).await?;
    let credentials_name = pool.spec.postgres.credentials_secret();
    let Some(credentials) = secrets.get_opt(&credentials_name).await? else {
        let message = format!("database credentials Secret {credentials_name} does not exist");
        return Ok(Err(("CredentialsUnavailable", message)));
    };
    let login = match (
        kube_ops::secret_text(&credentials, "username"),
        kube_ops::secret_text(&credentials, "password"),
    ) {
        (Ok(user), Ok(password)) => Login { user, password },
        (Err(err), _) | (_, Err(err)) => {
            return Ok(Err(("CredentialsUnavailable", err.to_string())));
        }
    };

    let mut referenced = vec![credentials, master_key];
    if let Some(token_name) = pool.spec.protocols.ojs_token_secret() {
        let Some(token) = secrets.get_opt(token_name).await? else {
            let message = format!("OJS token Secret {token_name} does not exist");
            return Ok(Err(("CredentialsUnavailable", message)));
        };
        referenced.push(token);
    }
    // The root key is read by a gateway only on an empty catalog, so it is not in the digest
    // (a change would roll the pods for nothing); checked here, since a gateway without it
    // could not even start (CreateContainerConfigError).
    if let Some(root) = &pool.spec.root_key_secret_ref {
        let problem = match secrets.get_opt(&root.name).await? {
            None => Some(format!("root key Secret {} does not exist", root.name)),
            Some(secret) => [ROOT_ACCESS_KEY_KEY, ROOT_SECRET_KEY_KEY]
                .into_iter()
                .find_map(|key| kube_ops::secret_text(&secret, key).err())
                .map(|err| err.to_string()),
        };
        if let Some(message) = problem {
            return Ok(Err(("CredentialsUnavailable", message)));
        }
    }
    // The listeners' certificate and PostgreSQL's CA: in the digest, so a renewal rolls the
    // pods (the gateways also reload the mounted files by themselves).
    let tls_secrets = [
        pool.spec.tls.as_ref().map(|tls| tls.secret_ref.clone()),
        pool.spec.postgres.ca_secret(),
    ];
    for name in tls_secrets.into_iter().flatten() {
        let Some(secret) = secrets.get_opt(&name).await? else {
            let message = format!("TLS Secret {name} does not exist");
            return Ok(Err(("TlsUnavailable", message)));
        };
        referenced.push(secret);
    }
    Ok(Ok((referenced, login)))
}

/// The pools whose OriginCaches `pool`'s gateways serve: itself, and for a Standby pool the
/// Primary pools of its cluster (a standby passes misses through to the origin).
async fn served_pools(pools: &Api<GatewayPool>, pool: &GatewayPool) -> Result<Vec<String>> {
    let mut served = vec![pool.name_any()];
    if let (PoolRole::Standby, Some(cluster)) = (pool.spec.role, &pool.spec.postgres.cluster_name) {
        let primaries = pools
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|other| {
                other.spec.role == PoolRole::Primary && other.spec.postgres.cluster_name.as_ref() == Some(cluster)
            });
        served.extend(primaries.map(|primary| primary.name_any()));
    }
    Ok(served)
}

/// How often a pool whose rollout is under way is looked at again.
pub const ROLLOUT_CHECK: Duration = Duration::from_secs(10);

/// Where the Deployment's rollout stands, from its status.
struct Rollout {
    desired: i32,
    replicas: i32,
    updated: i32,
    ready: i32,
    available: i32,
    observed: bool,
}

impl Rollout {
    fn of(deployment: &Deployment) -> Rollout {
        let status = deployment.status.clone().unwrap_or_default();
        Rollout {
            // The Deployment's own count: the pool's, or the autoscaler's.
            desired: deployment.spec.as_ref().and_then(|spec| spec.replicas).unwrap_or(1),
            replicas: status.replicas.unwrap_or(0),
            updated: status.updated_replicas.unwrap_or(0),
            ready: status.ready_replicas.unwrap_or(0),
            available: status.available_replicas.unwrap_or(0),
            observed: status.observed_generation >= deployment.metadata.generation,
        }
    }

    /// Every gateway of the current template available, none of an older one left.
    fn complete(&self) -> bool {
        self.observed && self.updated >= self.desired && self.available >= self.desired && self.replicas == self.updated
    }

    /// Ready only when the gateways are; `failing`: why some cannot start.
    fn verdicts(&self, database: &str, failing: Option<&str>) -> Vec<Verdict> {
        let (desired, updated, available) = (self.desired, self.updated, self.available);
        match failing {
            _ if self.complete() => vec![
                Verdict::new(
                    READY,
                    true,
                    "Available",
                    format!("{available} gateways available on {database}"),
                ),
                Verdict::new(PROGRESSING, false, "RolledOut", ""),
                Verdict::new(DEGRADED, false, "Available", ""),
            ],
            Some(failure) => vec![
                Verdict::new(
                    READY,
                    false,
                    "GatewaysFailing",
                    format!("{available} of {desired} gateways available; {failure}"),
                ),
                Verdict::new(
                    PROGRESSING,
                    true,
                    "RollingOut",
                    format!("{updated} of {desired} gateways updated"),
                ),
                Verdict::new(DEGRADED, true, "GatewaysFailing", failure),
            ],
            None => vec![
                Verdict::new(
                    READY,
                    false,
                    "Progressing",
                    format!("{available} of {desired} gateways available"),
                ),
                Verdict::new(
                    PROGRESSING,
                    true,
                    "RollingOut",
                    format!("{updated} of {desired} gateways updated"),
                ),
                Verdict::new(DEGRADED, false, "Progressing", ""),
            ],
        }
    }
}

/// Container states of a gateway that will not start by itself (kubelet's reasons).
const NOT_STARTING: [&str; 7] = [
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
];

/// The first of the pool's gateway pods that cannot start, and why, with the last words of its
/// container (its termination message: the log's tail, `FallbackToLogsOnError`).
async fn failing_gateways(ctx: &Context, pool: &GatewayPool, namespace: &str) -> Result<Option<String>> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = build::selector_labels(pool)
        .into_iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(",");
    let list = pods.list(&ListParams::default().labels(&selector)).await?;
    let failure = list.items.iter().find_map(|pod| {
        let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
        statuses.iter().find_map(|status| {
            let waiting = status.state.as_ref()?.waiting.as_ref()?;
            let reason = waiting
                .reason
                .as_deref()
                .filter(|reason| NOT_STARTING.contains(reason))?;
            let mut text = format!("pod {}: {reason}", pod.name_any());
            if let Some(message) = waiting.message.as_deref().filter(|m| !m.is_empty()) {
                text.push_str(&format!(" ({message})"));
            }
            let last = status.last_state.as_ref().and_then(|last| last.terminated.as_ref());
            if let Some(last) = last {
                let words = last.message.as_deref().unwrap_or_default().trim();
                text.push_str(&format!("; last exit {}", last.exit_code));
                if !words.is_empty() {
                    let tail: String = words
                        .chars()
                        .rev()
                        .take(300)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect();
                    text.push_str(&format!(": {tail}"));
                }
            }
            Some(text)
        })
    });
    Ok(failure)
}

/// Reports what the pool waits for and looks again later; nothing is applied meanwhile.
async fn wait_for(
    ctx: &Context,
    pool: &GatewayPool,
    pools: &Api<GatewayPool>,
    database: String,
    reason: &str,
    message: &str,
) -> Result<Action> {
    report(ctx, pool, pools, database, reason, message).await?;
    Ok(Action::requeue(WAIT_FOR_DEPENDENCY))
}

/// Writes `Ready=False` with `reason` and `message`, keeping the rest of the last status.
async fn report(
    ctx: &Context,
    pool: &GatewayPool,
    pools: &Api<GatewayPool>,
    database: String,
    reason: &str,
    message: &str,
) -> Result<()> {
    let previous = pool.status.clone().unwrap_or_default();
    let status = GatewayPoolStatus {
        database: Some(database),
        conditions: kube_ops::conditions(ctx, pool, &previous.conditions, &waiting(reason, message)).await,
        observed_generation: pool.meta().generation,
        ..previous
    };
    kube_ops::apply_status(pools, pool, serde_json::to_value(status).expect("status serializes")).await
}

/// The pool's children, each applied whatever became of the others, so one the API server
/// refuses (or that drifted past what an apply can mend) keeps no change from the rest: the
/// Deployment as stored, and every refusal by kind. Only the Deployment waits for the
/// ConfigMap and the Secret its pods read.
async fn apply_children(
    ctx: &Context,
    pool: &GatewayPool,
    namespace: &str,
    objects: &build::Objects,
) -> (Option<Deployment>, Vec<(&'static str, Error)>) {
    let client = &ctx.client;
    let mut refused = Vec::new();
    let config_map = kube_ops::apply(
        &Api::<ConfigMap>::namespaced(client.clone(), namespace),
        &objects.config_map,
    )
    .await;
    note(&mut refused, "ConfigMap", config_map.map(drop));
    let secret = kube_ops::apply(
        &Api::<Secret>::namespaced(client.clone(), namespace),
        &objects.database_secret,
    )
    .await;
    note(&mut refused, "Secret", secret.map(drop));
    let read_first = refused.is_empty();
    let services = Api::<Service>::namespaced(client.clone(), namespace);
    let service = kube_ops::apply(&services, &objects.service).await;
    note(&mut refused, "Service", service.map(drop));
    let admin_service = kube_ops::apply(&services, &objects.admin_service).await;
    note(&mut refused, "Service", admin_service.map(drop));
    let deployment = if read_first {
        let deployments = Api::<Deployment>::namespaced(client.clone(), namespace);
        match apply_deployment(&deployments, &objects.deployment).await {
            Ok(deployment) => Some(deployment),
            Err(err) => {
                refused.push(("Deployment", err));
                None
            }
        }
    } else {
        None
    };
    let budgets = Api::<PodDisruptionBudget>::namespaced(client.clone(), namespace);
    let budget = kube_ops::apply(&budgets, &objects.pod_disruption_budget).await;
    note(&mut refused, "PodDisruptionBudget", budget.map(drop));
    let autoscaler = apply_autoscaler(ctx, pool, namespace, objects).await;
    note(&mut refused, "HorizontalPodAutoscaler", autoscaler);
    if let Some(monitor) = &objects.service_monitor {
        let monitors: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &build::service_monitor_resource());
        let outcome = kube_ops::apply_kind(&monitors, monitor, "ServiceMonitor").await;
        note(&mut refused, "ServiceMonitor", outcome.map(drop));
    }
    (deployment, refused)
}

fn note(refused: &mut Vec<(&'static str, Error)>, kind: &'static str, outcome: Result<()>) {
    if let Err(err) = outcome {
        refused.push((kind, err));
    }
}

/// The field manager that holds a Deployment's replica count while an autoscaler takes it
/// over (Kubernetes' documented hand-over: see docs/operator.md, Autoscaling).
pub const HANDOVER_MANAGER: &str = "pgvs3-operator-handover";

/// Applies the Deployment. Without `replicas` (an autoscaler owns the count) and while the
/// operator's apply still owns the count, it is first handed to [`HANDOVER_MANAGER`] at its
/// current value: an apply that merely dropped the field would have the API server reset it to
/// its default, 1, until the autoscaler scales up again (a 3-gateway pool down to 1 for ~15 s).
async fn apply_deployment(deployments: &Api<Deployment>, deployment: &Deployment) -> Result<Deployment> {
    let name = deployment.name_any();
    let autoscaled = deployment.spec.as_ref().is_some_and(|spec| spec.replicas.is_none());
    let existing = deployments.get_opt(&name).await?;
    // Before the hand-over writes replicas: a Deployment that is somebody else's is not touched.
    kube_ops::claim(
        existing.as_ref().map(|d| &d.metadata),
        &deployment.metadata,
        "Deployment",
    )?;
    if autoscaled && let Some(current) = existing {
        let replicas = current.spec.as_ref().and_then(|spec| spec.replicas);
        if let Some(replicas) = replicas.filter(|_| owns_replicas(&current)) {
            let handover = serde_json::json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name},
                "spec": {"replicas": replicas},
            });
            deployments
                .patch(
                    &name,
                    &PatchParams::apply(HANDOVER_MANAGER).force(),
                    &Patch::Apply(&handover),
                )
                .await?;
        }
    }
    kube_ops::apply(deployments, deployment).await
}

/// Whether the operator's apply owns the Deployment's `spec.replicas`.
fn owns_replicas(deployment: &Deployment) -> bool {
    deployment.metadata.managed_fields.iter().flatten().any(|entry| {
        entry.manager.as_deref() == Some(FIELD_MANAGER)
            && entry.operation.as_deref() == Some("Apply")
            && entry
                .fields_v1
                .as_ref()
                .is_some_and(|fields| fields.0.pointer("/f:spec/f:replicas").is_some())
    })
}

async fn apply_autoscaler(ctx: &Context, pool: &GatewayPool, namespace: &str, objects: &build::Objects) -> Result<()> {
    let autoscalers: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), namespace);
    let pool_key = backoff_key(KIND, pool);
    match &objects.autoscaler {
        Some(autoscaler) => {
            kube_ops::apply(&autoscalers, autoscaler).await?;
            ctx.set_autoscaler(&pool_key, true);
        }
        // Autoscaling switched off: the old HPA would keep resizing the Deployment. Deleted
        // once (per pool and operator start), not on every reconcile.
        None if ctx.known_without_autoscaler(&pool_key) => {}
        None => {
            match autoscalers.delete(&pool.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(err.into()),
            }
            ctx.set_autoscaler(&pool_key, false);
        }
    }
    Ok(())
}

/// What the API server said when it refused a write: its message and code, not kube's wrapper.
fn refusal(error: &Error) -> String {
    match error {
        Error::Kube(kube::Error::Api(status)) => format!("{} ({} {})", status.message, status.code, status.reason),
        other => other.to_string(),
    }
}

/// The master key Secret: created once with a random key when absent, never overwritten
/// (a new key would make every stored access-key secret unreadable). It is deliberately not
/// owned by the pool, so deleting a pool does not lose the key to its data.
async fn ensure_master_key(secrets: &Api<Secret>, pool: &GatewayPool) -> Result<Secret> {
    let reference = pool.spec.master_key_ref(&pool.name_any());
    if let Some(secret) = secrets.get_opt(&reference.name).await? {
        kube_ops::secret_text(&secret, &reference.key)?;
        return Ok(secret);
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(reference.name.clone()),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/managed-by".to_string(), "pgvs3-operator".to_string()),
                (RELOAD_LABEL.to_string(), "true".to_string()),
            ])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            reference.key.clone(),
            ByteString(pgvs3_secret::random_token(32).into_bytes()),
        )])),
        ..Secret::default()
    };
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(created) => Ok(created),
        // Another pool (or operator replica) created it first: use theirs.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(secrets.get(&reference.name).await?),
        Err(err) => Err(err.into()),
    }
}
