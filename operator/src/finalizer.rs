//! The cleanup finalizer of Buckets and OriginCaches: added before anything is provisioned,
//! removed once cleanup succeeded. Like kube's `finalizer` helper, but its patches name the
//! operator's field manager, and they are merge patches conditional on the object's
//! `resourceVersion`: a concurrent change is a 409 and a retry, never another finalizer lost.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::Error as FinalizerError;
pub use kube::runtime::finalizer::Event;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Error;
use crate::kube_ops::FIELD_MANAGER;

/// Runs `reconcile` with `Event::Apply` while `obj` lives (adding `name` first) and with
/// `Event::Cleanup` once it is being deleted (removing `name` after it succeeded).
pub async fn finalizer<K, Fut>(
    api: &Api<K>,
    name: &str,
    obj: Arc<K>,
    reconcile: impl FnOnce(Event<K>) -> Fut,
) -> Result<Action, FinalizerError<Error>>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    Fut: Future<Output = Result<Action, Error>>,
{
    let present = obj.finalizers().iter().any(|f| f == name);
    let deleting = obj.meta().deletion_timestamp.is_some();
    match (present, deleting) {
        (true, false) => reconcile(Event::Apply(obj)).await.map_err(FinalizerError::ApplyFailed),
        (true, true) => {
            let action = reconcile(Event::Cleanup(obj.clone()))
                .await
                .map_err(FinalizerError::CleanupFailed)?;
            let rest: Vec<&String> = obj.finalizers().iter().filter(|f| *f != name).collect();
            set_finalizers(api, &obj, &rest)
                .await
                .map_err(FinalizerError::RemoveFinalizer)?;
            Ok(action)
        }
        (false, false) => {
            let mut all: Vec<&String> = obj.finalizers().iter().collect();
            let added = name.to_string();
            all.push(&added);
            set_finalizers(api, &obj, &all)
                .await
                .map_err(FinalizerError::AddFinalizer)?;
            // The patch is a change: it brings the next reconcile.
            Ok(Action::await_change())
        }
        (false, true) => Ok(Action::await_change()),
    }
}

/// Adds (`held`) or removes finalizer `name` on `obj`, when it is not so already.
pub async fn mark<K>(api: &Api<K>, obj: &K, name: &str, held: bool) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let present = obj.finalizers().iter().any(|f| f == name);
    if present == held {
        return Ok(());
    }
    let added = name.to_string();
    let mut finalizers: Vec<&String> = obj.finalizers().iter().filter(|f| *f != name).collect();
    if held {
        finalizers.push(&added);
    }
    set_finalizers(api, obj, &finalizers).await
}

async fn set_finalizers<K>(api: &Api<K>, obj: &K, finalizers: &[&String]) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch = serde_json::json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": obj.resource_version(),
    }});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    api.patch(&obj.name_any(), &params, &Patch::Merge(&patch)).await?;
    Ok(())
}
