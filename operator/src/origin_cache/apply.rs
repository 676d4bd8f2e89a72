//! Reconciles an OriginCache: the cache bucket's origin row in the catalog of a Primary pool's
//! database (through `pgvs3.put_origin`), re-applied when the spec or the origin's credentials
//! Secret changes, an access key of the cache bucket's own with its credentials Secret (as a
//! Bucket has), and cleanup behind a finalizer once no write-back body is left to upload.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::build::{self, FINALIZER, OriginRow, origin_row};
use super::ca_bundle;
use super::catalog::{self, CacheKey, OriginKey, Written};
use crate::bucket::apply as bucket_apply;
use crate::bucket::build as bucket_build;
use crate::bucket::catalog as bucket_catalog;
use crate::context::{self, Context, Error, Result, backoff_key};
use crate::crd::{DEGRADED, OriginCache, OriginCacheStatus, PROGRESSING, READY, Verdict, waiting};
use crate::database::{self, Binding, bind};
use crate::finalizer::{Event, finalizer};
use crate::gateway_pool::apply::{RESYNC, WAIT_FOR_DEPENDENCY};
use crate::gateway_pool::build::endpoints;
use crate::kube_ops;

pub const KIND: &str = "OriginCache";

pub async fn reconcile(cache: Arc<OriginCache>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.reconcile(KIND);
    let namespace = cache.namespace().ok_or(Error::NoNamespace)?;
    let Some(_slot) = ctx.namespace_slot(KIND, &namespace) else {
        return Ok(Action::requeue(context::NAMESPACE_BUSY_RETRY));
    };
    let caches: Api<OriginCache> = Api::namespaced(ctx.client.clone(), &namespace);
    let action = finalizer(&caches, FINALIZER, cache.clone(), |event| async {
        match event {
            Event::Apply(cache) => provision(&cache, &ctx, &namespace).await,
            Event::Cleanup(cache) => match cleanup(&cache, &ctx, &namespace).await {
                // Its status already says what the drop waits for.
                Err(err @ Error::PendingWriteBack(_)) => Err(err),
                Err(err) => {
                    cleanup_failed(&cache, &ctx, &namespace, &err).await;
                    Err(err)
                }
                cleaned => cleaned,
            },
        }
    })
    .await
    .map_err(|err| Error::Finalizer(Box::new(err)))?;
    ctx.succeeded(&backoff_key(KIND, &*cache));
    Ok(action)
}

pub fn error_policy(cache: Arc<OriginCache>, error: &Error, ctx: Arc<Context>) -> Action {
    context::error_policy(KIND, &*cache, error, &ctx)
}

/// What one attempt to write the origin row came to.
struct Outcome {
    verdicts: Vec<Verdict>,
    /// A failure to retry with backoff (its reason is also in the verdicts).
    failure: Option<Error>,
    requeue: Duration,
}

impl Outcome {
    /// Waiting for something outside the resource: checked again after `requeue`.
    fn waiting(reason: &str, message: &str, requeue: Duration) -> Outcome {
        Outcome {
            verdicts: waiting(reason, message),
            failure: None,
            requeue,
        }
    }
}

async fn provision(cache: &OriginCache, ctx: &Context, namespace: &str) -> Result<Action> {
    let previous = cache.status.clone().unwrap_or_default();
    let mut status = OriginCacheStatus {
        observed_generation: cache.meta().generation,
        ..previous.clone()
    };
    let outcome = configure(cache, ctx, namespace, &mut status).await?;
    status.conditions = kube_ops::conditions(ctx, cache, &previous.conditions, &outcome.verdicts).await;
    write_status(ctx, cache, namespace, status).await?;
    match outcome.failure {
        Some(failure) => Err(failure),
        None => Ok(Action::requeue(outcome.requeue)),
    }
}

/// Writes the cache's credentials Secret and its catalog rows; fills in what `status` learns
/// on the way.
async fn configure(
    cache: &OriginCache,
    ctx: &Context,
    namespace: &str,
    status: &mut OriginCacheStatus,
) -> Result<Outcome> {
    let row = match validate(cache) {
        Ok(row) => row,
        Err(outcome) => return Ok(outcome),
    };
    let binding = match bind(ctx, namespace, &cache.spec.gateway_pool_ref).await? {
        Ok(binding) => binding,
        Err(verdicts) => {
            return Ok(Outcome {
                verdicts,
                failure: None,
                requeue: WAIT_FOR_DEPENDENCY,
            });
        }
    };
    status.endpoint = endpoints(&binding.pool).s3;
    let (secret, access_key, secret_key) = match origin_credentials(ctx, namespace, cache).await? {
        Ok(credentials) => credentials,
        Err(outcome) => return Ok(outcome),
    };

    // Checked as the pool checks it before mounting it into the gateways (which would refuse
    // it at start).
    if let Some(bundle) = &cache.spec.origin.ca_bundle
        && let Err(problem) = ca_bundle::read(&ctx.client, namespace, bundle).await?
    {
        return Ok(Outcome::waiting("CaBundleUnavailable", &problem, WAIT_FOR_DEPENDENCY));
    }

    // The cache bucket's own key, for the applications that use the cache.
    let target = bucket_apply::target(ctx, &binding.pool, namespace, row.bucket.clone()).await?;
    let key_id = build::access_key_id(cache);
    let own_secret = match bucket_apply::write_credentials(ctx, namespace, cache, &target, &key_id, None).await {
        Err(Error::Exists(message)) => {
            return Ok(Outcome::waiting(
                context::RESOURCE_EXISTS,
                &message,
                WAIT_FOR_DEPENDENCY,
            ));
        }
        written => written?,
    };
    status.secret_name = Some(bucket_build::secret_name(cache));
    status.access_key_id = Some(key_id.clone());

    let cache_key = CacheKey {
        id: &key_id,
        secret: &own_secret,
        description: &format!("OriginCache {namespace}/{}", cache.name_any()),
    };
    let origin_key = OriginKey {
        access_key: &access_key,
        secret_key: &secret_key,
    };
    let written = catalog::write_cache(&binding, &row, &cache_key, &origin_key).await;
    Ok(written_outcome(written, &row, &secret, status))
}

/// The catalog row the spec makes, or why it cannot be written as it stands. Only a change of
/// the spec helps, and that triggers a reconcile of its own.
fn validate(cache: &OriginCache) -> std::result::Result<OriginRow, Outcome> {
    let row = origin_row(cache).map_err(|problem| Outcome::waiting(database::INVALID_SPEC, &problem, RESYNC))?;
    let secret_name = &cache.spec.credentials_secret_ref;
    if !database::valid_object_name(secret_name) {
        let message = format!("credentialsSecretRef {secret_name:?} is not a valid Secret name");
        return Err(Outcome::waiting(database::INVALID_SPEC, &message, RESYNC));
    }
    Ok(row)
}

/// The origin's access key and secret key, from the cache's credentials Secret (returned too:
/// its version is the status's), or what the cache waits for.
async fn origin_credentials(
    ctx: &Context,
    namespace: &str,
    cache: &OriginCache,
) -> Result<std::result::Result<(Secret, String, String), Outcome>> {
    let secret_name = &cache.spec.credentials_secret_ref;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let Some(secret) = secrets.get_opt(secret_name).await? else {
        let message = format!("Secret {secret_name} with the origin's credentials does not exist");
        return Ok(Err(Outcome::waiting("SecretNotFound", &message, WAIT_FOR_DEPENDENCY)));
    };
    let credentials = kube_ops::secret_text(&secret, "AWS_ACCESS_KEY_ID")
        .and_then(|access_key| Ok((access_key, kube_ops::secret_text(&secret, "AWS_SECRET_ACCESS_KEY")?)));
    Ok(match credentials {
        Ok((access_key, secret_key)) => Ok((secret, access_key, secret_key)),
        Err(problem) => Err(Outcome::waiting(
            "SecretInvalid",
            &problem.to_string(),
            WAIT_FOR_DEPENDENCY,
        )),
    })
}

/// The cache's conditions after its catalog rows were written (or not).
fn written_outcome(
    written: Result<Written>,
    row: &OriginRow,
    secret: &Secret,
    status: &mut OriginCacheStatus,
) -> Outcome {
    match written {
        Ok(Written::Configured(bucket_id)) => {
            status.bucket_id = Some(bucket_id);
            status.credentials_version = secret.resource_version();
            let message = format!(
                "cache bucket {} ({}) in front of {}/{}",
                row.bucket, row.cache_mode, row.endpoint, row.origin_bucket
            );
            Outcome {
                verdicts: vec![
                    Verdict::new(READY, true, "Configured", message),
                    Verdict::new(PROGRESSING, false, "Configured", ""),
                    Verdict::new(DEGRADED, false, "Configured", ""),
                ],
                failure: None,
                requeue: RESYNC,
            }
        }
        // Only the user can resolve these: another name, or the other bucket gone.
        Ok(Written::OwnedElsewhere(message)) => Outcome::waiting("BucketOwnedElsewhere", &message, WAIT_FOR_DEPENDENCY),
        Ok(Written::Rejected(refusal)) => Outcome::waiting("OriginRejected", &refusal, WAIT_FOR_DEPENDENCY),
        Err(failure) => Outcome {
            verdicts: waiting(catalog::failure_reason(&failure), &failure.to_string()),
            failure: Some(failure),
            requeue: RESYNC,
        },
    }
}

async fn write_status(ctx: &Context, cache: &OriginCache, namespace: &str, status: OriginCacheStatus) -> Result<()> {
    let caches: Api<OriginCache> = Api::namespaced(ctx.client.clone(), namespace);
    kube_ops::apply_status(&caches, cache, serde_json::to_value(status).expect("status serializes")).await
}

/// A Terminating OriginCache whose cleanup failed (retried with backoff) says so, as a Bucket
/// does: `Ready=False CleanupFailed` with the error, and a Warning Event. Failing to say so
/// must not hide the cleanup's own error.
async fn cleanup_failed(cache: &OriginCache, ctx: &Context, namespace: &str, err: &Error) {
    let previous = cache.status.clone().unwrap_or_default();
    let verdicts = waiting(bucket_apply::CLEANUP_FAILED, &err.to_string());
    let status = OriginCacheStatus {
        conditions: kube_ops::conditions(ctx, cache, &previous.conditions, &verdicts).await,
        ..previous
    };
    if let Err(error) = write_status(ctx, cache, namespace, status).await {
        tracing::warn!(%error, "writing the failed cleanup's status");
    }
}

/// Drops the cache bucket. Bodies acknowledged in write-back mode exist nowhere else until the
/// gateways' worker has uploaded them, so the drop is never forced: while they are pending the
/// resource says so and the drop is retried with backoff.
async fn cleanup(cache: &OriginCache, ctx: &Context, namespace: &str) -> Result<Action> {
    let bucket = &cache.spec.bucket;
    let binding = match bind(ctx, namespace, &cache.spec.gateway_pool_ref).await? {
        Ok(binding) => binding,
        Err(verdicts) => {
            // Without its pool the cache bucket cannot be dropped; holding the finalizer would
            // block the namespace forever, so it stays and the user is told. The cache's key
            // is revoked when the pool's last connection still reaches the catalog.
            let why = &verdicts[0].message;
            let key_id = build::access_key_id(cache);
            let (reason, note) = match database::revoke_through_last_connection(
                ctx,
                namespace,
                &cache.spec.gateway_pool_ref,
                &key_id,
            )
            .await?
            {
                Ok(()) => (
                    "CleanupPartial",
                    format!(
                        "{why}; cache bucket {bucket} left in place, its access key {key_id} revoked through the pool's last connection"
                    ),
                ),
                Err(unrevoked) => (
                    "CleanupSkipped",
                    format!("catalog not reachable ({why}; {unrevoked}); cache bucket {bucket} left in place"),
                ),
            };
            kube_ops::publish(ctx, cache, "Cleanup", EventType::Warning, reason, note).await;
            return Ok(Action::await_change());
        }
    };
    let key_id = build::access_key_id(cache);
    let commit = database::Commit::default();
    let cleaned = database::within_drop(&binding.connection, clean_catalog(&binding, bucket, &key_id, &commit)).await;
    let dropped = match cleaned {
        Ok(dropped) => dropped,
        // The namespace (or the pool) is being deleted, and the database with it, it seems.
        Err(err)
            if database::unreachable(&err)
                && ctx.cleanup_gives_up(&backoff_key(KIND, cache), &binding.pool, cache.meta()) =>
        {
            let left = format!("cache bucket {bucket} left in place, its access key {key_id} still active");
            let (reason, note) = match commit.in_flight() {
                None => ("CleanupSkipped", format!("catalog not reachable ({err}); {left}")),
                Some(done) => (
                    "CleanupUnconfirmed",
                    format!(
                        "catalog did not answer the cleanup's COMMIT ({err}): either it took effect ({done}), or nothing changed: {left}"
                    ),
                ),
            };
            kube_ops::publish(ctx, cache, "Cleanup", EventType::Warning, reason, note).await;
            return Ok(Action::await_change());
        }
        Err(err) => return Err(err),
    };
    match dropped {
        Ok(note) => {
            kube_ops::publish(ctx, cache, "Cleanup", EventType::Normal, "Cleanup", note).await;
            Ok(Action::await_change())
        }
        Err(pending) => {
            let message = format!("{pending}; the drop is retried once they are uploaded");
            let verdicts = [
                Verdict::new(READY, false, "PendingWriteBack", &message),
                Verdict::new(PROGRESSING, true, "PendingWriteBack", &message),
                Verdict::new(DEGRADED, false, "PendingWriteBack", ""),
            ];
            let previous = cache.status.clone().unwrap_or_default();
            let status = OriginCacheStatus {
                conditions: kube_ops::conditions(ctx, cache, &previous.conditions, &verdicts).await,
                ..previous
            };
            write_status(ctx, cache, namespace, status).await?;
            Err(Error::PendingWriteBack(pending))
        }
    }
}

/// The catalog side of the cleanup: the cache bucket dropped when it is the cache's, and its key
/// revoked (what was done, for the Event), or the catalog's refusal while write-back bodies are
/// pending (nothing done). One transaction, as a Bucket's cleanup: a failure or a timeout before
/// its COMMIT (`commit`) leaves the catalog as it was.
async fn clean_catalog(
    binding: &Binding,
    bucket: &str,
    key_id: &str,
    commit: &database::Commit,
) -> Result<Result<String, String>> {
    let mut client = database::connect(&binding.connection).await?;
    let transaction = client.transaction().await?;
    let dropped = match bucket_catalog::bucket_owner(&transaction, bucket).await? {
        Some(owner) if owner.as_deref() == Some(key_id) => {
            database::allow_long_statements(&transaction, &binding.connection).await?;
            match catalog::drop_origin(&transaction, bucket).await? {
                Ok(_) => format!("cache bucket {bucket} and its cached entries were dropped"),
                // Nothing done: the transaction rolls back as it goes.
                Err(pending) => return Ok(Err(pending)),
            }
        }
        Some(_) => format!("bucket {bucket} does not belong to this resource; not dropped"),
        None => format!("cache bucket {bucket} was not in the catalog"),
    };
    let note = format!("{dropped}; the cache's access key was revoked");
    bucket_catalog::delete_access_key(&transaction, key_id).await?;
    commit.send(transaction, &note).await?;
    Ok(Ok(note))
}
