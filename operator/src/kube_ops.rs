//! The few ways this operator writes to the API server: server-side apply with one field
//! manager, status through the status subresource, and events on condition transitions.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::context::{Context, Result};
use crate::crd::{Verdict, merge_conditions, transition};

pub const FIELD_MANAGER: &str = "pgvs3-operator";

/// Server-side apply, forcing ownership of the fields we set: the operator is the authority
/// for its children. Drift the apply alone cannot revert is written over: when another
/// manager's edit makes the merged object invalid (a Service port changed by hand keeps that
/// manager's list entry while the apply adds the operator's back, two ports named `s3`: 422),
/// the desired object replaces what is there with a JSON merge patch (lists replaced whole),
/// and the apply runs again to own its fields.
pub async fn apply<K>(api: &Api<K>, object: &K) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = object.name_any();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api.patch(&name, &params, &Patch::Apply(object)).await {
        Err(kube::Error::Api(status)) if status.code == 422 => {
            tracing::info!(object = %name, refusal = %status.message, "apply refused: writing over the drift");
            // Writing over fails too when there was no drift to write over (the object does
            // not exist yet: 404; the desired object itself is invalid: 422 again): the
            // apply's refusal is what to report.
            if api.patch(&name, &manager(), &Patch::Merge(object)).await.is_err() {
                return Err(kube::Error::Api(status).into());
            }
            Ok(api.patch(&name, &params, &Patch::Apply(object)).await?)
        }
        applied => Ok(applied?),
    }
}

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
