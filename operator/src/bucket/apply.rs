//! Reconciles a Bucket: catalog rows through the SQL control API, the credentials Secret, and
//! cleanup under the deletion policy (behind a finalizer).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use pgvs3_secret::random_token;
use tokio_postgres::GenericClient;

use super::build::{self, FINALIZER, LakeCatalog, Target};
use super::catalog::{self, BucketKey, Claim, Provisioned};
use super::role;
use crate::context::{self, Context, Error, Result, backoff_key};
use crate::crd::{
    AccessMode, Bucket, BucketStatus, DEGRADED, DeletionPolicy, GatewayPool, PROGRESSING, PoolRole, Quota, READY,
    Verdict, WorkloadIdentity, valid_bucket_name, waiting,
};
use crate::database::{self, Binding, INVALID_SPEC, bind};
use crate::finalizer::{Event, finalizer};
use crate::gateway_pool::apply::{RESYNC, WAIT_FOR_DEPENDENCY};
use crate::gateway_pool::build::endpoints;
use crate::identity;
use crate::kube_ops;

pub const KIND: &str = "Bucket";

pub async fn reconcile(bucket: Arc<Bucket>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.reconcile(KIND);
    let namespace = bucket.namespace().ok_or(Error::NoNamespace)?;
    let Some(_slot) = ctx.namespace_slot(KIND, &namespace) else {
        return Ok(Action::requeue(context::NAMESPACE_BUSY_RETRY));
    };
    let buckets: Api<Bucket> = Api::namespaced(ctx.client.clone(), &namespace);
    let action = finalizer(&buckets, FINALIZER, bucket.clone(), |event| async {
        match event {
            Event::Apply(bucket) => match provision(&bucket, &ctx, &namespace).await {
                Err(Error::Exists(message)) => taken(&bucket, &ctx, &namespace, &message).await,
                provisioned => provisioned,
            },
            Event::Cleanup(bucket) => match cleanup(&bucket, &ctx, &namespace).await {
                Err(err) => {
                    cleanup_failed(&bucket, &ctx, &namespace, &err).await;
                    Err(err)
                }
                cleaned => cleaned,
            },
        }
    })
    .await
    .map_err(|err| Error::Finalizer(Box::new(err)))?;
    ctx.succeeded(&backoff_key(KIND, &*bucket));
    Ok(action)
}

pub fn error_policy(bucket: Arc<Bucket>, error: &Error, ctx: Arc<Context>) -> Action {
    context::error_policy(KIND, &*bucket, error, &ctx)
}

async fn write_status(ctx: &Context, bucket: &Bucket, namespace: &str, status: BucketStatus) -> Result<()> {
    let buckets: Api<Bucket> = Api::namespaced(ctx.client.clone(), namespace);
    kube_ops::apply_status(
        &buckets,
        bucket,
        serde_json::to_value(status).expect("status serializes"),
    )
    .await
}

/// A Terminating Bucket whose cleanup failed (retried with backoff) says so: `Ready=False
/// CleanupFailed` with the error and a Warning Event, instead of the `Ready` of its last
/// provisioning. Failing to say so must not hide the cleanup's own error.
async fn cleanup_failed(bucket: &Bucket, ctx: &Context, namespace: &str, err: &Error) {
    let previous = bucket.status.clone().unwrap_or_default();
    let verdicts = waiting(CLEANUP_FAILED, &err.to_string());
    let status = BucketStatus {
        conditions: kube_ops::conditions(ctx, bucket, &previous.conditions, &verdicts).await,
        ..previous
    };
    if let Err(error) = write_status(ctx, bucket, namespace, status).await {
        tracing::warn!(%error, "writing the failed cleanup's status");
    }
}

/// The condition reason of a Terminating Bucket whose cleanup failed.
pub const CLEANUP_FAILED: &str = "CleanupFailed";

/// A name the Bucket would write (its Secret, its ConfigMap) is another object's: said in its
/// status, checked again later (nothing watched tells when that object goes).
async fn taken(bucket: &Bucket, ctx: &Context, namespace: &str, message: &str) -> Result<Action> {
    let previous = bucket.status.clone().unwrap_or_default();
    let verdicts = waiting(context::RESOURCE_EXISTS, message);
    let status = BucketStatus {
        observed_generation: bucket.meta().generation,
        conditions: kube_ops::conditions(ctx, bucket, &previous.conditions, &verdicts).await,
        ..previous
    };
    write_status(ctx, bucket, namespace, status).await?;
    Ok(Action::requeue(WAIT_FOR_DEPENDENCY))
}

async fn provision(bucket: &Bucket, ctx: &Context, namespace: &str) -> Result<Action> {
    let previous = bucket.status.clone().unwrap_or_default();
    let bucket_name = bucket.bucket_name();
    let binding = match bind_valid(bucket, ctx, namespace, &bucket_name).await? {
        Ok(binding) => binding,
        Err(verdicts) => {
            let status = BucketStatus {
                observed_generation: bucket.meta().generation,
                conditions: kube_ops::conditions(ctx, bucket, &previous.conditions, &verdicts).await,
                // Not recorded while a pre-hash bucket of this Bucket's may yet be found.
                bucket_name: match bucket.legacy_bucket_name() {
                    None => Some(bucket_name),
                    Some(_) => previous.bucket_name.clone(),
                },
                ..previous.clone()
            };
            write_status(ctx, bucket, namespace, status).await?;
            // Only an edit of the spec can fix an invalid one, and an edit reconciles anyway.
            return Ok(if verdicts[0].reason == INVALID_SPEC {
                Action::await_change()
            } else {
                Action::requeue(WAIT_FOR_DEPENDENCY)
            });
        }
    };
    let static_key = bucket
        .spec
        .workload_identity
        .as_ref()
        .is_none_or(|identity| identity.static_key);
    let resolved = match legacy_named(&binding, bucket).await {
        Ok(resolved) => resolved,
        // Said as a failure of the catalog (and retried), with no name recorded yet. The
        // credentials Secret is written all the same, as when the catalog fails below (its
        // bucket name is the hashed one until the question is answered).
        Err(err) => {
            if static_key {
                let target = target(ctx, &binding.pool, namespace, bucket_name.clone()).await?;
                let lake = build::lake_catalog(bucket, &binding.pool, namespace);
                let key_id = build::access_key_id(bucket);
                write_credentials(ctx, namespace, bucket, &target, &key_id, lake.as_ref()).await?;
            }
            let failed = Err(err);
            let verdicts = verdicts(&bucket_name, "", &failed, &None, &None, bucket.spec.quota.as_ref());
            let status = BucketStatus {
                observed_generation: bucket.meta().generation,
                conditions: kube_ops::conditions(ctx, bucket, &previous.conditions, &verdicts).await,
                ..previous
            };
            write_status(ctx, bucket, namespace, status).await?;
            return next_action(failed, false, false);
        }
    };
    let bucket = resolved.as_ref().unwrap_or(bucket);
    let bucket_name = bucket.bucket_name();
    let target = target(ctx, &binding.pool, namespace, bucket_name.clone()).await?;

    let key_id = build::access_key_id(bucket);
    let provisioned = into_catalog(ctx, namespace, bucket, &binding, &target, &key_id, static_key).await?;
    let quota = bucket.spec.quota.as_ref();
    // A refusal is a Warning Event with its reason too: the condition's transition (below).
    if let Ok(Provisioned::Ready { adopted: true, .. }) = &provisioned {
        let note = format!(
            "bucket {bucket_name}, retained for {namespace}/{} or marked adoptable for this namespace, is now this resource's, with its objects",
            bucket.name_any()
        );
        kube_ops::publish(ctx, bucket, "Provision", EventType::Normal, "Adopted", note).await;
    }
    let identity = identity(ctx, &binding, bucket, &provisioned, &target).await?;
    let pool_not_ready = pool_not_ready(&binding.pool);
    let verdicts = verdicts(
        &bucket_name,
        &target.endpoint,
        &provisioned,
        &identity,
        &pool_not_ready,
        quota,
    );
    let identity_waiting = matches!(identity, Some(Err(_)));
    let status = BucketStatus {
        observed_generation: bucket.meta().generation,
        conditions: kube_ops::conditions(ctx, bucket, &previous.conditions, &verdicts).await,
        bucket_name: Some(bucket_name),
        bucket_id: match &provisioned {
            Ok(Provisioned::Ready { id, .. }) => Some(*id),
            _ => previous.bucket_id,
        },
        secret_name: static_key.then(|| build::secret_name(bucket)),
        access_key_id: Some(key_id),
        endpoint: Some(target.endpoint),
        read_endpoints: target.read_endpoints,
        role_arn: match identity {
            Some(Ok(arn)) => Some(arn),
            Some(Err(_)) => previous.role_arn,
            None if bucket.spec.workload_identity.is_none() => None,
            None => previous.role_arn,
        },
    };
    write_status(ctx, bucket, namespace, status).await?;
    next_action(provisioned, pool_not_ready.is_some(), identity_waiting)
}

/// The bucket, its owner key (the secret written to the credentials Secret for a static key,
/// otherwise one given to nobody) and its quota and notifications, into the catalog: the
/// catalog's answer, a failure of it included.
async fn into_catalog(
    ctx: &Context,
    namespace: &str,
    bucket: &Bucket,
    binding: &Binding,
    target: &Target,
    key_id: &str,
    static_key: bool,
) -> Result<Result<Provisioned>> {
    let lake = build::lake_catalog(bucket, &binding.pool, namespace);
    let secret_key = if static_key {
        write_credentials(ctx, namespace, bucket, target, key_id, lake.as_ref()).await?
    } else {
        // The key still owns the bucket in the catalog; its secret is given to nobody.
        if bucket
            .status
            .as_ref()
            .is_some_and(|status| status.secret_name.is_some())
        {
            role::delete_written::<Secret>(ctx, bucket, &build::secret_name(bucket)).await?;
        }
        random_token(30)
    };

    let description = format!("Bucket {namespace}/{}", bucket.name_any());
    let bucket_name = bucket.bucket_name();
    let policy = build::key_policy(&bucket_name, &bucket.spec.access_prefixes);
    let key = BucketKey {
        id: key_id,
        secret: &secret_key,
        read_only: bucket.spec.access == AccessMode::ReadOnly,
        description: &description,
        policy: policy.as_deref(),
    };
    let quota = bucket.spec.quota.as_ref();
    // Checked before (bind_valid, spec_refusal): only valid rules get here.
    let notifications = bucket
        .spec
        .notifications
        .as_deref()
        .and_then(|n| build::notification_rules(n).ok());
    let custodian = build::custodian_key_id(bucket);
    let claim = Claim {
        custodian: &custodian,
        marked_adoptable: ctx.adoptable(namespace, &bucket_name),
    };
    Ok(catalog::provision(binding, &bucket_name, &key, &claim, quota, notifications.as_ref()).await)
}

/// `bucket` as if its status recorded its pre-hash default name (`Bucket::legacy_bucket_name`),
/// when the catalog has a bucket of that name held by this Bucket's key or by the custodian of
/// its namespace and name: the bucket it had before an upgrade, or that its predecessor
/// retained. Anybody else's bucket of that name (`team`/`a-logs` and `team-a`/`logs` had the
/// same) is never looked at again: the hashed name is used.
async fn legacy_named(binding: &Binding, bucket: &Bucket) -> Result<Option<Bucket>> {
    let Some(legacy) = bucket.legacy_bucket_name() else {
        return Ok(None);
    };
    let owner = database::within(&binding.connection, async {
        let client = database::connect(&binding.connection).await?;
        catalog::bucket_owner(&client, &legacy).await
    })
    .await?
    .flatten();
    let ours = [build::access_key_id(bucket), build::custodian_key_id(bucket)];
    Ok(owner.filter(|owner| ours.contains(owner)).map(|_| {
        let mut named = bucket.clone();
        named.status.get_or_insert_with(BucketStatus::default).bucket_name = Some(legacy);
        named
    }))
}

/// The workload identity's role and ConfigMap, once the bucket is in the catalog (its ARN, or
/// why not); unset, what an earlier spec had written is removed.
async fn identity(
    ctx: &Context,
    binding: &Binding,
    bucket: &Bucket,
    provisioned: &Result<Provisioned>,
    target: &Target,
) -> Result<Option<Result<String, (&'static str, String)>>> {
    Ok(match (provisioned, &bucket.spec.workload_identity) {
        (Ok(Provisioned::Ready { .. }), Some(identity)) => {
            Some(write_identity(ctx, binding, bucket, identity, target).await?)
        }
        (_, None) => {
            if bucket.status.as_ref().is_some_and(|status| status.role_arn.is_some()) {
                remove_identity(ctx, binding, bucket).await?;
            }
            None
        }
        _ => None,
    })
}

/// The Bucket's binding to its pool, or why there is none: an invalid spec (checked before
/// anything is written: what the catalog could never take is an invalid spec, not a catalog
/// failure) or a pool or database not there yet.
async fn bind_valid(
    bucket: &Bucket,
    ctx: &Context,
    namespace: &str,
    bucket_name: &str,
) -> Result<std::result::Result<Binding, Vec<Verdict>>> {
    let bound = if valid_bucket_name(bucket_name) {
        bind(ctx, namespace, &bucket.spec.gateway_pool_ref).await?
    } else {
        // Admitted before the CRD's rules, or with validation off: the catalog refuses it.
        let message = format!("bucketName {bucket_name:?} is not a valid S3 bucket name");
        Err(waiting(INVALID_SPEC, &message))
    };
    Ok(match (bound, build::spec_refusal(bucket)) {
        (Ok(_), Some(message)) => Err(waiting(INVALID_SPEC, &message)),
        (bound, _) => bound,
    })
}

/// The conditions after provisioning: the catalog's answer, then the workload identity's and
/// the pool's when they hold it back, and the quota's.
fn verdicts(
    bucket_name: &str,
    endpoint: &str,
    provisioned: &Result<Provisioned>,
    identity: &Option<Result<String, (&'static str, String)>>,
    pool_not_ready: &Option<(bool, String)>,
    quota: Option<&Quota>,
) -> Vec<Verdict> {
    let mut verdicts = match provisioned {
        Ok(Provisioned::Ready { .. }) => vec![
            Verdict::new(
                READY,
                true,
                "Provisioned",
                format!("bucket {bucket_name} is served by {}", endpoint),
            ),
            Verdict::new(PROGRESSING, false, "Provisioned", ""),
            Verdict::new(DEGRADED, false, "Provisioned", ""),
        ],
        Ok(Provisioned::Refused { reason, message }) => waiting(reason, message),
        Ok(Provisioned::QuotaRejected(message)) => waiting("QuotaRejected", message),
        Ok(Provisioned::NotificationsRejected(message)) => waiting("NotificationTargetUnknown", message),
        Err(err) if database::catalog_outdated(err) => waiting("CatalogOutdated", &err.to_string()),
        Err(err) if database::catalog_refused_name(err) => waiting(INVALID_SPEC, &err.to_string()),
        Err(err) => waiting("CatalogUnavailable", &err.to_string()),
    };
    if let Some(Err((reason, message))) = identity {
        verdicts = waiting(reason, message);
    }
    // In the catalog, but nothing serves it yet (or any more): not Ready either.
    if let (Ok(Provisioned::Ready { .. }), Some((degraded, why))) = (provisioned, pool_not_ready) {
        let message = format!("bucket {bucket_name} is in the catalog, but {why}");
        verdicts = vec![
            Verdict::new(READY, false, POOL_NOT_READY, &message),
            Verdict::new(PROGRESSING, !degraded, POOL_NOT_READY, &message),
            Verdict::new(DEGRADED, *degraded, POOL_NOT_READY, &message),
        ];
    }
    if let Some(quota) = quota {
        let enforced = matches!(provisioned, Ok(Provisioned::Ready { .. }));
        let (reason, message) = if enforced {
            ("QuotaSet".to_string(), describe_quota(quota))
        } else {
            (
                verdicts[0].reason.clone(),
                "the quota is not in the catalog yet".to_string(),
            )
        };
        verdicts.push(Verdict::new(QUOTA_ENFORCED, enforced, &reason, message));
    }
    verdicts
}

/// When to reconcile again. A catalog failure is retried with backoff (its reason is already
/// in the status); a name the catalog refuses is not a failure that time heals.
fn next_action(provisioned: Result<Provisioned>, pool_not_ready: bool, identity_waiting: bool) -> Result<Action> {
    match provisioned {
        Err(err) if database::catalog_refused_name(&err) => Ok(Action::await_change()),
        Err(err) => Err(err),
        // A webhook target is registered in the database, not in Kubernetes: no watch sees it.
        Ok(Provisioned::NotificationsRejected(_)) => Ok(Action::requeue(WAIT_FOR_DEPENDENCY)),
        // The pool's changes are watched (run.rs); this is the fallback.
        Ok(_) if pool_not_ready => Ok(Action::requeue(WAIT_FOR_DEPENDENCY)),
        // The issuer or the gateways' STS is not there yet.
        Ok(_) if identity_waiting => Ok(Action::requeue(WAIT_FOR_DEPENDENCY)),
        Ok(_) => Ok(Action::requeue(RESYNC)),
    }
}

/// Writes the Bucket's role (its trust naming the cluster's issuer, published into the same
/// catalog first so the gateways can verify its tokens) and its ConfigMap: the role's ARN, or
/// why not (a reason and a message for the Bucket's conditions).
async fn write_identity(
    ctx: &Context,
    binding: &Binding,
    bucket: &Bucket,
    identity: &WorkloadIdentity,
    target: &Target,
) -> Result<Result<String, (&'static str, String)>> {
    let issuer = match identity::current(ctx).await {
        Ok(issuer) => issuer,
        Err(err) => {
            let message = format!(
                "{err} (the operator reads the API server's /.well-known/openid-configuration and /openid/v1/jwks)"
            );
            return Ok(Err(("IssuerUnavailable", message)));
        }
    };
    let principals = match role::principals(ctx, bucket, identity).await? {
        Ok(principals) => principals,
        Err(refused) => return Ok(Err(refused)),
    };
    let written = database::within(&binding.connection, async {
        identity::publish(ctx, binding, &issuer).await?;
        let client = database::connect(&binding.connection).await?;
        role::put_role(
            &client,
            bucket,
            identity,
            &issuer.issuer,
            principals,
            &target.bucket_name,
        )
        .await
    })
    .await;
    let arn = match written {
        Ok(arn) => arn,
        Err(err) if database::catalog_outdated(&err) => {
            let message = format!("the pool's gateways do not serve STS yet (the catalog lacks it): {err}");
            return Ok(Err(("CatalogOutdated", message)));
        }
        Err(err) => return Ok(Err(("CatalogUnavailable", err.to_string()))),
    };
    role::apply_config_map(ctx, bucket, target, &arn).await?;
    Ok(Ok(arn))
}

/// Removes the role and ConfigMap of a Bucket whose `workloadIdentity` was unset.
async fn remove_identity(ctx: &Context, binding: &Binding, bucket: &Bucket) -> Result<()> {
    database::within(&binding.connection, async {
        role::delete_role(&database::connect(&binding.connection).await?, bucket).await
    })
    .await?;
    role::delete_written::<ConfigMap>(ctx, bucket, &role::config_map_name(bucket)).await
}

/// The condition type that says whether the catalog enforces the Bucket's quota.
pub const QUOTA_ENFORCED: &str = "QuotaEnforced";

/// The reason of a Bucket that is in the catalog while its pool is not Ready.
pub const POOL_NOT_READY: &str = "PoolNotReady";

/// Why `pool` does not serve its Buckets, and whether it says it is degraded; `None` when it
/// does: it is Ready, or it is rolling out with gateways ready and nothing failing (a rolling
/// update, which keeps every gateway until its successor is ready, must not make every Bucket
/// of the pool unready).
fn pool_not_ready(pool: &GatewayPool) -> Option<(bool, String)> {
    let status = pool.status.clone().unwrap_or_default();
    let condition = |type_: &str| status.conditions.iter().find(|condition| condition.type_ == type_);
    let ready = condition(READY);
    let degraded = condition(DEGRADED).is_some_and(|degraded| degraded.status == "True");
    let serving = status.ready_replicas.unwrap_or(0) > 0 && !degraded;
    if serving || ready.is_some_and(|ready| ready.status == "True") {
        return None;
    }
    let why = match ready {
        Some(ready) => format!(
            "GatewayPool {} is not Ready ({}: {})",
            pool.name_any(),
            ready.reason,
            ready.message
        ),
        None => format!("GatewayPool {} has no Ready condition yet", pool.name_any()),
    };
    Some((degraded, why))
}

fn describe_quota(quota: &Quota) -> String {
    let limit =
        |value: Option<i64>, unit: &str| value.map_or(format!("any number of {unit}"), |v| format!("{v} {unit}"));
    format!(
        "writes are refused beyond {} and {}",
        limit(quota.max_bytes, "bytes"),
        limit(quota.max_objects, "objects")
    )
}

/// Writes `owner`'s credentials Secret for the key `key_id` and returns the key's secret: the
/// one already in the Secret, or a new one. The Secret is written before the catalog's key so a
/// crash in between never loses it: the next reconcile reads it back and writes the same key.
pub(crate) async fn write_credentials<K>(
    ctx: &Context,
    namespace: &str,
    owner: &K,
    target: &Target,
    key_id: &str,
    lake: Option<&LakeCatalog>,
) -> Result<String>
where
    K: build::KeyHolder,
{
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let secret_key = match secrets.get_opt(&build::secret_name(owner)).await? {
        Some(existing) => {
            kube_ops::secret_text(&existing, "AWS_SECRET_ACCESS_KEY").unwrap_or_else(|_| random_token(30))
        }
        None => random_token(30),
    };
    kube_ops::apply(
        &secrets,
        &build::credentials_secret(owner, target, key_id, &secret_key, lake),
    )
    .await?;
    Ok(secret_key)
}

/// The pool's S3 endpoint, plus those of Standby pools on the same CloudNativePG cluster.
pub(crate) async fn target(ctx: &Context, pool: &GatewayPool, namespace: &str, bucket_name: String) -> Result<Target> {
    let mut read_endpoints = Vec::new();
    if let Some(cluster) = &pool.spec.postgres.cluster_name {
        let pools: Api<GatewayPool> = Api::namespaced(ctx.client.clone(), namespace);
        for standby in pools.list(&ListParams::default()).await? {
            if standby.spec.role == PoolRole::Standby && standby.spec.postgres.cluster_name.as_ref() == Some(cluster) {
                read_endpoints.extend(endpoints(&standby).s3);
            }
        }
        read_endpoints.sort();
    }
    Ok(Target {
        bucket_name,
        endpoint: endpoints(pool).s3.unwrap_or_default(),
        region: pool.spec.region.clone(),
        read_endpoints,
        ca_cert: pool_ca(ctx, pool, namespace).await?,
    })
}

/// `ca.crt` of a TLS pool's Secret (cert-manager writes the issuer's CA there): public, and what
/// a client of the `https://` endpoint needs to trust. `None` without TLS, or when the Secret
/// (not yet there, or a certificate of a public CA) has none.
async fn pool_ca(ctx: &Context, pool: &GatewayPool, namespace: &str) -> Result<Option<String>> {
    let Some(tls) = &pool.spec.tls else { return Ok(None) };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(secrets
        .get_opt(&tls.secret_ref)
        .await?
        .and_then(|secret| kube_ops::secret_text(&secret, build::CA_CERT_KEY).ok()))
}

/// Annotation on a credentials Secret kept after its Bucket was deleted without revoking the key.
pub const KEY_NOT_REVOKED: &str = "pgvs3.io/key-not-revoked";

/// Drops the Bucket's owner reference from its credentials Secret and marks it
/// [`KEY_NOT_REVOKED`]; whether there was a Secret to keep.
async fn keep_credentials(ctx: &Context, bucket: &Bucket, namespace: &str) -> Result<bool> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let patch = serde_json::json!({"metadata": {
        "ownerReferences": null,
        "annotations": {KEY_NOT_REVOKED: "the Bucket was deleted while its catalog was unreachable"},
    }});
    match secrets
        .patch(
            &build::secret_name(bucket),
            &PatchParams::apply(kube_ops::FIELD_MANAGER),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(err) => Err(err.into()),
    }
}

async fn cleanup(bucket: &Bucket, ctx: &Context, namespace: &str) -> Result<Action> {
    let bucket_name = bucket.bucket_name();
    let key_id = build::access_key_id(bucket);
    let pool_ref = &bucket.spec.gateway_pool_ref;
    let binding = match bind(ctx, namespace, pool_ref).await? {
        Ok(binding) => binding,
        Err(verdicts) => {
            // The pool or its Secrets are gone (a namespace's deletion takes them alongside
            // the Bucket): the key is revoked through the connection the pool was last bound
            // with, when this process has one and the database answers; the bucket is left
            // as it is (dropping or retaining it needs the pool).
            let why = &verdicts[0].message;
            return match database::revoke_through_last_connection(ctx, namespace, pool_ref, &key_id).await? {
                Ok(()) => {
                    if has_role(bucket)
                        && let Some(connection) = ctx.last_connection(namespace, pool_ref)
                    {
                        // Best effort, as the revocation: the key no longer opens the bucket.
                        let deleted = database::within(&connection, async {
                            role::delete_role(&database::connect(&connection).await?, bucket).await
                        });
                        if let Err(error) = deleted.await {
                            tracing::warn!(%error, role = %role::role_name(bucket), "the Bucket's role not deleted");
                        }
                    }
                    let note = format!(
                        "{why}; bucket {bucket_name} left in place, its access key {key_id} revoked through the pool's last connection"
                    );
                    kube_ops::publish(ctx, bucket, "Cleanup", EventType::Warning, "CleanupPartial", note).await;
                    Ok(Action::await_change())
                }
                Err(unrevoked) => skip_cleanup(ctx, bucket, namespace, &format!("{why}; {unrevoked}")).await,
            };
        }
    };
    let commit = database::Commit::default();
    let cleaned = database::within_drop(&binding.connection, clean_catalog(&binding, bucket, namespace, &commit)).await;
    let note = match cleaned {
        Ok(note) => note,
        // The namespace (or the pool) is being deleted, and the database with it, it seems.
        Err(err)
            if database::unreachable(&err)
                && ctx.cleanup_gives_up(&backoff_key(KIND, bucket), &binding.pool, bucket.meta()) =>
        {
            return match commit.in_flight() {
                None => skip_cleanup(ctx, bucket, namespace, &err.to_string()).await,
                Some(done) => unconfirmed_cleanup(ctx, bucket, namespace, &err.to_string(), done).await,
            };
        }
        Err(err) => return Err(err),
    };
    kube_ops::publish(ctx, bucket, "Cleanup", EventType::Normal, "Cleanup", note).await;
    Ok(Action::await_change())
}

/// The catalog side of the cleanup under the deletion policy: the bucket dropped or retained,
/// the key revoked, the role deleted; what was done, for the Event. One transaction, so that a
/// failure or a timeout before its COMMIT (`commit`) leaves the catalog as it was, and the
/// Bucket's `CleanupFailed` or `CleanupSkipped` says what is true.
async fn clean_catalog(
    binding: &Binding,
    bucket: &Bucket,
    namespace: &str,
    commit: &database::Commit,
) -> Result<String> {
    let bucket_name = bucket.bucket_name();
    let key_id = build::access_key_id(bucket);
    let mut client = database::connect(&binding.connection).await?;
    let mut transaction = client.transaction().await?;
    let owner = catalog::bucket_owner(&transaction, &bucket_name).await?;
    let ours = owner == Some(Some(key_id.clone()));
    let note = match bucket.spec.deletion_policy {
        // Dropped by an earlier attempt whose COMMIT was not answered, or never provisioned.
        _ if owner.is_none() => format!("bucket {bucket_name} is not in the catalog; its access key was revoked"),
        DeletionPolicy::Delete if ours => {
            database::allow_long_statements(&transaction, &binding.connection).await?;
            // Refused, the drop's work is undone back to here, and the bucket retained instead.
            let dropping = transaction.savepoint("drop_bucket").await?;
            match catalog::drop_bucket(&dropping, &bucket_name, true).await? {
                Ok(_) => {
                    dropping.commit().await?;
                    format!("bucket {bucket_name} and its objects were dropped; its access key was revoked")
                }
                // Retried, this would block the resource's deletion until every retention ran
                // out (years, for COMPLIANCE): the bucket is kept, as with Retain, and said so.
                Err(locked) => {
                    dropping.rollback().await?;
                    retain(&transaction, binding, bucket, namespace, "object lock").await?;
                    format!("bucket {bucket_name} retained: {locked} (object lock); its access key was revoked")
                }
            }
        }
        DeletionPolicy::Delete => {
            format!("bucket {bucket_name} does not belong to this resource; not dropped; its access key was revoked")
        }
        DeletionPolicy::Retain if ours => {
            retain(&transaction, binding, bucket, namespace, "deletionPolicy Retain").await?;
            format!(
                "bucket {bucket_name} retained for a Bucket named {namespace}/{} only; its access key was revoked",
                bucket.name_any()
            )
        }
        DeletionPolicy::Retain => {
            format!("bucket {bucket_name} does not belong to this resource; left as it is; its access key was revoked")
        }
    };
    catalog::delete_access_key(&transaction, &key_id).await?;
    if has_role(bucket) {
        role::delete_role(&transaction, bucket).await?;
    }
    commit.send(transaction, &note).await?;
    Ok(note)
}

/// Whether the Bucket has (or had) a role in the catalog.
fn has_role(bucket: &Bucket) -> bool {
    bucket.spec.workload_identity.is_some() || bucket.status.as_ref().is_some_and(|status| status.role_arn.is_some())
}

/// The catalog is out of reach: holding the finalizer would block the namespace forever, so the
/// data stays and the user is told. The access key cannot be revoked either: its credentials
/// Secret is kept (no longer owned by the Bucket, so garbage collection leaves it) rather than
/// lose the only copy of a key that still works.
async fn skip_cleanup(ctx: &Context, bucket: &Bucket, namespace: &str, why: &str) -> Result<Action> {
    let left = left_in_place(ctx, bucket, namespace).await?;
    let note = format!("catalog not reachable ({why}); {left}");
    kube_ops::publish(ctx, bucket, "Cleanup", EventType::Warning, "CleanupSkipped", note).await;
    Ok(Action::await_change())
}

/// The catalog stopped answering once the cleanup's COMMIT was sent: whether it took effect
/// (`done`) is unknown, and the finalizer goes as with [`skip_cleanup`]. The credentials Secret
/// is kept, as the key may still work.
async fn unconfirmed_cleanup(ctx: &Context, bucket: &Bucket, namespace: &str, why: &str, done: &str) -> Result<Action> {
    let left = left_in_place(ctx, bucket, namespace).await?;
    let note = format!(
        "catalog did not answer the cleanup's COMMIT ({why}): either it took effect ({done}), or nothing changed: {left}"
    );
    kube_ops::publish(ctx, bucket, "Cleanup", EventType::Warning, "CleanupUnconfirmed", note).await;
    Ok(Action::await_change())
}

/// Keeps the credentials Secret of a Bucket whose cleanup did not reach the catalog; what was
/// left, for the Event.
async fn left_in_place(ctx: &Context, bucket: &Bucket, namespace: &str) -> Result<String> {
    let bucket_name = bucket.bucket_name();
    let key_id = build::access_key_id(bucket);
    let kept = keep_credentials(ctx, bucket, namespace).await?;
    Ok(format!(
        "bucket {bucket_name} left in place{}",
        if kept {
            format!(
                ", its access key {key_id} still active: Secret {} kept",
                build::secret_name(bucket)
            )
        } else {
            String::new()
        }
    ))
}

/// Hands the Bucket's bucket to the custodian key of its namespace and name
/// (`catalog::retain_bucket`), so that only a Bucket of the same namespace and name adopts it;
/// in the cleanup's transaction.
async fn retain(
    client: &impl GenericClient,
    binding: &Binding,
    bucket: &Bucket,
    namespace: &str,
    why: &str,
) -> Result<bool> {
    let bucket_name = bucket.bucket_name();
    let description = format!(
        "custodian of bucket {bucket_name}, retained by Bucket {namespace}/{} uid {} ({why})",
        bucket.name_any(),
        bucket.uid().unwrap_or_default()
    );
    let key_id = build::access_key_id(bucket);
    catalog::retain_bucket(
        client,
        &binding.master_key,
        &bucket_name,
        &key_id,
        &build::custodian_key_id(bucket),
        &description,
    )
    .await
}
