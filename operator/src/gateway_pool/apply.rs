//! Reconciles a GatewayPool: checks the database Service and Secrets, applies the built objects
//! and reports status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::build::{self, Inputs};
use crate::context::{self, Context, Error, Result, backoff_key};
use crate::crd::{
    DEFAULT_REPLICAS, DEGRADED, GatewayPool, GatewayPoolStatus, PROGRESSING, READY, RELOAD_LABEL, Verdict, waiting,
};
use crate::kube_ops::{self, FIELD_MANAGER};

pub const KIND: &str = "GatewayPool";
/// While a dependency is missing, look again this often (watches usually notice sooner).
pub const WAIT_FOR_DEPENDENCY: Duration = Duration::from_secs(30);
pub const RESYNC: Duration = Duration::from_secs(300);

pub async fn reconcile(pool: Arc<GatewayPool>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.reconcile(KIND);
    let namespace = pool.namespace().ok_or(Error::NoNamespace)?;
    let action = reconcile_in(&pool, &ctx, &namespace).await?;
    ctx.succeeded(&backoff_key(KIND, &*pool));
    Ok(action)
}

pub fn error_policy(pool: Arc<GatewayPool>, error: &Error, ctx: Arc<Context>) -> Action {
    context::error_policy(KIND, &*pool, error, &ctx)
}

async fn reconcile_in(pool: &GatewayPool, ctx: &Context, namespace: &str) -> Result<Action> {
    // Being deleted: the garbage collector deletes the children, or with `--cascade=orphan`
    // removes their owner references. Applying them now would put back a reference it just
    // removed, and it would then delete that child as one whose owner is gone.
    if pool.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let client = &ctx.client;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), namespace);
    let previous = pool.status.clone().unwrap_or_default();
    let database = pool.spec.postgres.host(pool.spec.role);

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
    let master_key = ensure_master_key(&secrets, pool).await?;
    let credentials_name = pool.spec.postgres.credentials_secret();
    let Some(credentials) = secrets.get_opt(&credentials_name).await? else {
        let message = format!("database credentials Secret {credentials_name} does not exist");
        return wait_for(ctx, pool, &pools, database, "CredentialsUnavailable", &message).await;
    };

    let mut referenced = vec![credentials, master_key];
    if let Some(token_name) = pool.spec.protocols.ojs_token_secret() {
        let Some(token) = secrets.get_opt(token_name).await? else {
            let message = format!("OJS token Secret {token_name} does not exist");
            return wait_for(ctx, pool, &pools, database, "CredentialsUnavailable", &message).await;
        };
        referenced.push(token);
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
            return wait_for(ctx, pool, &pools, database, "TlsUnavailable", &message).await;
        };
        referenced.push(secret);
    }

    let inputs = Inputs {
        secrets_digest: kube_ops::secrets_digest(&referenced),
        service_monitor_crd: ctx.serves_service_monitors().await?,
    };
    let objects = build::build(pool, &inputs);

    let deployment = match apply_children(ctx, pool, namespace, &objects).await {
        Ok(deployment) => deployment,
        // Refused by the API server (a quota, an admission plugin, a webhook, a value the
        // schema let through): the pool says which child and why, then retries with backoff.
        Err((kind, err)) => {
            let message = format!("{kind} {}: {}", pool.name_any(), refusal(&err));
            report(ctx, pool, &pools, database, "ApplyFailed", &message).await?;
            return Err(err);
        }
    };

    let desired = match &pool.spec.autoscaling {
        Some(autoscaling) => autoscaling.min_replicas,
        None => pool.spec.replicas.unwrap_or(DEFAULT_REPLICAS),
    };
    let deployment_status = deployment.status.unwrap_or_default();
    let ready = deployment_status.ready_replicas.unwrap_or(0);
    let updated = deployment_status.updated_replicas.unwrap_or(0);
    let rolled_out = deployment_status.observed_generation >= deployment.metadata.generation
        && ready >= desired
        && updated >= desired;
    let verdicts = if rolled_out {
        vec![
            Verdict::new(
                READY,
                true,
                "Available",
                format!("{ready} gateways ready on {database}"),
            ),
            Verdict::new(PROGRESSING, false, "RolledOut", ""),
            Verdict::new(DEGRADED, false, "Available", ""),
        ]
    } else {
        vec![
            Verdict::new(
                READY,
                false,
                "Progressing",
                format!("{ready} of {desired} gateways ready"),
            ),
            Verdict::new(
                PROGRESSING,
                true,
                "RollingOut",
                format!("{updated} of {desired} gateways updated"),
            ),
            Verdict::new(DEGRADED, false, "Progressing", ""),
        ]
    };
    let status = GatewayPoolStatus {
        observed_generation: pool.meta().generation,
        conditions: kube_ops::conditions(ctx, pool, &previous.conditions, &verdicts).await,
        replicas: deployment_status.replicas,
        ready_replicas: Some(ready),
        database: Some(database),
        endpoints: Some(build::endpoints(pool)),
    };
    kube_ops::apply_status(&pools, pool, serde_json::to_value(status).expect("status serializes")).await?;
    Ok(Action::requeue(RESYNC))
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

/// The pool's children, the ConfigMap before the Deployment that mounts it; the Deployment as
/// applied, or the kind the API server refused.
async fn apply_children(
    ctx: &Context,
    pool: &GatewayPool,
    namespace: &str,
    objects: &build::Objects,
) -> Result<Deployment, (&'static str, Error)> {
    let client = &ctx.client;
    let failed = |kind: &'static str| move |err: Error| (kind, err);
    kube_ops::apply(
        &Api::<ConfigMap>::namespaced(client.clone(), namespace),
        &objects.config_map,
    )
    .await
    .map_err(failed("ConfigMap"))?;
    kube_ops::apply(&Api::<Service>::namespaced(client.clone(), namespace), &objects.service)
        .await
        .map_err(failed("Service"))?;
    let deployment = kube_ops::apply(
        &Api::<Deployment>::namespaced(client.clone(), namespace),
        &objects.deployment,
    )
    .await
    .map_err(failed("Deployment"))?;
    kube_ops::apply(
        &Api::<PodDisruptionBudget>::namespaced(client.clone(), namespace),
        &objects.pod_disruption_budget,
    )
    .await
    .map_err(failed("PodDisruptionBudget"))?;
    let autoscalers: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), namespace);
    let pool_key = backoff_key(KIND, pool);
    match &objects.autoscaler {
        Some(autoscaler) => {
            kube_ops::apply(&autoscalers, autoscaler)
                .await
                .map_err(failed("HorizontalPodAutoscaler"))?;
            ctx.set_autoscaler(&pool_key, true);
        }
        // Autoscaling switched off: the old HPA would keep resizing the Deployment. Deleted
        // once (per pool and operator start), not on every reconcile.
        None if ctx.known_without_autoscaler(&pool_key) => {}
        None => {
            match autoscalers.delete(&pool.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(("HorizontalPodAutoscaler", err.into())),
            }
            ctx.set_autoscaler(&pool_key, false);
        }
    }
    if let Some(monitor) = &objects.service_monitor {
        let monitors: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &build::service_monitor_resource());
        monitors
            .patch(
                &pool.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(monitor),
            )
            .await
            .map_err(|err| ("ServiceMonitor", err.into()))?;
    }
    Ok(deployment)
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
