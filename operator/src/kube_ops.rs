//! The few ways this operator writes to the API server: server-side apply with one field
//! manager, status through the status subresource, and events on condition transitions.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, Preconditions};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::context::{Context, Error, Result};
use crate::crd::{Verdict, merge_conditions, transition};

pub const FIELD_MANAGER: &str = "pgvs3-operator";

/// Server-side apply, forcing ownership of the fields we set: the operator is the authority
/// for its children. Drift the apply alone cannot revert is written over: when another
/// manager's edit makes the merged object invalid (a Service port changed by hand keeps that
/// manager's list entry while the apply adds the operator's back, two ports named `s3`: 422),
/// the desired object replaces what is there with a JSON merge patch (lists replaced whole),
/// and the apply runs again to own its fields.
///
/// An object of that name the resource does not control is left alone (see [`claim`]), and
/// every write is conditional on the version that was judged (see [`guard`]).
pub async fn apply<K>(api: &Api<K>, object: &K) -> Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    apply_kind(api, object, &K::kind(&())).await
}

/// How many times [`apply_kind`] reads and writes again when the object changed in between:
/// a Deployment's status is written by its controller every few seconds during a rollout.
pub const APPLY_ATTEMPTS: u32 = 5;

/// [`apply`] for any kind (a ServiceMonitor is a `DynamicObject`); `kind` names it in refusals.
pub async fn apply_kind<K>(api: &Api<K>, object: &K, kind: &str) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let mut attempt = 1;
    loop {
        let existing = api.get_opt(&object.name_any()).await?;
        match apply_judged(api, object, kind, existing).await {
            // Changed since it was judged: judged again as it is now.
            Err(Error::Kube(kube::Error::Api(status))) if status.code == 409 && attempt < APPLY_ATTEMPTS => {
                attempt += 1;
            }
            applied => return applied,
        }
    }
}

/// One attempt of [`apply_kind`]: `object` written over `existing` (the object of that name as
/// it was read, or `None`) if [`guard`] allows it, conditional on `existing`'s version (409
/// when it changed since).
pub async fn apply_judged<K>(api: &Api<K>, object: &K, kind: &str, existing: Option<K>) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = object.name_any();
    let client = api.clone().into_client();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut object = object.clone();
    object.meta_mut().resource_version = guard(
        &client,
        existing.as_ref().map(|existing| existing.meta()),
        object.meta(),
        kind,
    )
    .await?;
    match api.patch(&name, &params, &Patch::Apply(&object)).await {
        Err(kube::Error::Api(status)) if status.code == 422 => {
            tracing::info!(object = %name, refusal = %status.message, "apply refused: writing over the drift");
            // Writing over fails too when there was no drift to write over (the object does
            // not exist yet: 404; the desired object itself is invalid: 422 again): the
            // apply's refusal is what to report, unless the object changed meanwhile (409).
            match api.patch(&name, &manager(), &Patch::Merge(&object)).await {
                Ok(written) => {
                    object.meta_mut().resource_version = written.meta().resource_version.clone();
                    Ok(api.patch(&name, &params, &Patch::Apply(&object)).await?)
                }
                Err(kube::Error::Api(conflict)) if conflict.code == 409 => Err(kube::Error::Api(conflict).into()),
                Err(_) => Err(kube::Error::Api(status).into()),
            }
        }
        applied => Ok(applied?),
    }
}

/// How an existing object stands to the resource that would write it (see [`claim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Nothing of that name exists, or the desired object names no owner.
    Free,
    /// The desired object's owner controls it.
    Held,
    /// Nobody controls it and it carries the operator's labels: the resource's own child,
    /// orphaned by a deletion with `propagationPolicy: Orphan`, to be adopted.
    Orphan,
}

/// Whether the operator may write `desired` over `existing` (an object of the same name), as a
/// Kubernetes controller does: only when the desired object's controller (its owner) controls
/// it, or when nobody does and it carries every `pgvs3.io/` label and the `managed-by` label of
/// the desired object (the operator's own child orphaned by a deletion with `propagationPolicy:
/// Orphan`, adopted as a ReplicaSet adopts its orphaned pods). Anything else — an application's
/// Secret named like a Bucket's, a Service of another resource — is somebody else's: writing
/// over it would take it, and the garbage collector would delete it with the resource.
pub fn claim(existing: Option<&ObjectMeta>, desired: &ObjectMeta, kind: &str) -> Result<Claim> {
    let Some(existing) = existing else {
        return Ok(Claim::Free);
    };
    let name = existing.name.as_deref().unwrap_or_default();
    let Some(owner) = controller(desired) else {
        // Never stored (no uid): nothing to own it by; the write is the caller's to decide.
        return Ok(Claim::Free);
    };
    let refusal = |holder: String| {
        Error::Exists(format!(
            "{kind} {name} already exists and is {holder}: rename or delete it"
        ))
    };
    match controller(existing) {
        Some(current) if current.uid == owner.uid => Ok(Claim::Held),
        Some(current) => Err(refusal(format!("controlled by {} {}", current.kind, current.name))),
        None => {
            let labels = existing.labels.clone().unwrap_or_default();
            let ours = desired.labels.iter().flatten().all(|(key, value)| {
                !(key.starts_with("pgvs3.io/") || key == MANAGED_BY) || labels.get(key) == Some(value)
            }) && labels.get(MANAGED_BY).map(String::as_str) == Some(FIELD_MANAGER);
            if ours {
                Ok(Claim::Orphan)
            } else {
                Err(refusal(format!("not {} {}'s", owner.kind, owner.name)))
            }
        }
    }
}

fn controller(meta: &ObjectMeta) -> Option<OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|reference| reference.controller == Some(true))
        .cloned()
}

/// [`claim`], and for an orphan a fresh read of its would-be owner: the resourceVersion of
/// `existing`, on which the write must be conditional.
///
/// The two races the garbage collector runs against a reconcile that started before its
/// resource was deleted with `propagationPolicy: Orphan` (the reconcile's copy of the resource
/// does not show the deletion): the collector removes the owner reference after the child was
/// read and before it is written (the write is conditional on the version read: 409, and the
/// retry sees the deletion), or before it was read (the child reads as an orphan, and the owner
/// read from the API server, not the cache, shows it being deleted). Either way, writing the
/// reference back would leave the child with an owner about to be gone, and the collector would
/// delete what the deletion meant to keep. Kubernetes' controllers recheck an owner before they
/// adopt for the same reason.
pub async fn guard(
    client: &kube::Client,
    existing: Option<&ObjectMeta>,
    desired: &ObjectMeta,
    kind: &str,
) -> Result<Option<String>> {
    if claim(existing, desired, kind)? == Claim::Orphan
        && let Some(owner) = controller(desired)
    {
        let resource = ApiResource::from_gvk(&GroupVersionKind::from(owner.clone()));
        let namespace = desired.namespace.as_deref().unwrap_or_default();
        let owners: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let fresh = owners.get_opt(&owner.name).await?;
        let live = fresh.is_some_and(|fresh| {
            fresh.metadata.uid.as_deref() == Some(owner.uid.as_str()) && fresh.metadata.deletion_timestamp.is_none()
        });
        if !live {
            return Err(Error::OwnerGone(format!(
                "{kind} {} is not adopted: {} {} is being deleted",
                existing.and_then(|meta| meta.name.as_deref()).unwrap_or_default(),
                owner.kind,
                owner.name
            )));
        }
    }
    Ok(existing.and_then(|meta| meta.resource_version.clone()))
}

/// Deletes `name` if `owner` controls it (gone already is fine); an object of that name that
/// is somebody else's stays.
pub async fn delete_owned<K, O>(api: &Api<K>, name: &str, owner: &O) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    O: Resource<DynamicType = ()>,
{
    let Some(existing) = api.get_opt(name).await? else {
        return Ok(());
    };
    let uid = owner.meta().uid.as_deref();
    let controlled = existing
        .owner_references()
        .iter()
        .any(|reference| reference.controller == Some(true) && Some(reference.uid.as_str()) == uid);
    if !controlled {
        tracing::info!(object = %name, "not deleting: not the resource's own");
        return Ok(());
    }
    // The uid precondition: an object recreated in between by somebody else is not deleted.
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: existing.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// The label on everything the operator writes.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// Patch parameters of the operator's non-apply writes: its field manager named, so that
/// managedFields and the audit log tell its writes from a user's.
pub fn manager() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// Writes `status` through the status subresource with server-side apply.
pub async fn apply_status<K>(api: &Api<K>, object: &K, status: serde_json::Value) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch_status(&object.name_any(), &params, &Patch::Apply(&patch))
        .await?;
    Ok(())
}

/// Conditions for the new status, and one Event when a condition changed.
pub async fn conditions<K>(ctx: &Context, object: &K, previous: &[Condition], verdicts: &[Verdict]) -> Vec<Condition>
where
    K: Resource<DynamicType = ()>,
{
    if let Some(changed) = transition(previous, verdicts) {
        let type_ = if changed.type_ == crate::crd::READY && !changed.status && changed.reason != "Progressing" {
            EventType::Warning
        } else {
            EventType::Normal
        };
        publish(
            ctx,
            object,
            "Reconcile",
            type_,
            &changed.reason,
            changed.message.clone(),
        )
        .await;
    }
    merge_conditions(previous, verdicts, object.meta().generation, Time(Timestamp::now()))
}

/// Publishes an Event about `object`; failing to publish must not fail the reconcile.
pub async fn publish<K>(ctx: &Context, object: &K, action: &str, type_: EventType, reason: &str, note: String)
where
    K: Resource<DynamicType = ()>,
{
    let note = note.chars().take(1000).collect();
    if let Err(err) = ctx
        .recorder
        .publish(&object.object_ref(&()), type_, action, reason, note)
        .await
    {
        tracing::warn!(error = %err, "publishing event");
    }
}

/// A digest of Secrets' contents: a change in any of them changes the digest.
pub fn secrets_digest<'a>(secrets: impl IntoIterator<Item = &'a Secret>) -> String {
    let mut hasher = Sha256::new();
    for secret in secrets {
        hasher.update(secret.name_any().as_bytes());
        for (key, value) in secret.data.iter().flatten() {
            hasher.update(key.as_bytes());
            hasher.update([0]);
            hasher.update(&value.0);
            hasher.update([0]);
        }
    }
    hex::encode(hasher.finalize())
}

/// A key of a Secret as text.
pub fn secret_text(secret: &Secret, key: &str) -> Result<String> {
    let missing = || crate::context::Error::Secret {
        secret: secret.name_any(),
        problem: format!("has no key {key:?}"),
    };
    let value = secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .ok_or_else(missing)?;
    String::from_utf8(value.0.clone()).map_err(|_| crate::context::Error::Secret {
        secret: secret.name_any(),
        problem: format!("key {key:?} is not UTF-8"),
    })
}
