//! Events (`events.k8s.io/v1`) about the operator's resources, as kube's event recorder
//! publishes them (one Event per repeating series, its count patched), but with every write
//! naming the operator's field manager, so managedFields and the audit log tell them apart from
//! a user's.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PostParams};
use kube::runtime::events::EventType;
use kube::{Client, ResourceExt};
use tokio::sync::Mutex;

use crate::kube_ops::{FIELD_MANAGER, manager};

/// How long a published Event is remembered as the start of a series (kube's recorder: 6 min).
const SERIES_WINDOW: Duration = Duration::from_secs(360);

/// What makes two Events one series: the object, and what was said about it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    uid: String,
    namespace: String,
    name: String,
    type_: &'static str,
    action: String,
    reason: String,
}

pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    series: Mutex<HashMap<SeriesKey, K8sEvent>>,
}

impl Recorder {
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Recorder {
        Recorder {
            client,
            controller: controller.to_string(),
            instance: instance.unwrap_or_else(|| controller.to_string()),
            series: Mutex::new(HashMap::new()),
        }
    }

    /// Creates the Event, or counts one more of its series within [`SERIES_WINDOW`].
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        action: &str,
        reason: &str,
        note: String,
    ) -> kube::Result<()> {
        let now = Timestamp::now();
        let window = jiff_span(SERIES_WINDOW);
        let type_ = match type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let key = SeriesKey {
            uid: regarding.uid.clone().unwrap_or_default(),
            namespace: namespace.clone(),
            name: regarding.name.clone().unwrap_or_default(),
            type_,
            action: action.to_string(),
            reason: reason.to_string(),
        };
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        let mut series = self.series.lock().await;
        series.retain(|_, event| {
            let last = event
                .series
                .as_ref()
                .map(|s| &s.last_observed_time)
                .or(event.event_time.as_ref());
            last.is_some_and(|time| time.0.checked_add(window).is_ok_and(|until| until > now))
        });
        let event = match series.get(&key) {
            Some(first) => {
                let mut event = first.clone();
                event.series = Some(EventSeries {
                    count: first.series.as_ref().map_or(2, |s| s.count + 1),
                    last_observed_time: MicroTime(now),
                });
                events
                    .patch(&event.name_any(), &manager(), &Patch::Merge(&event))
                    .await?;
                event
            }
            None => {
                let event = K8sEvent {
                    metadata: ObjectMeta {
                        name: Some(format!("{}.{:x}", key.name, now.as_nanosecond())),
                        namespace: Some(namespace),
                        ..ObjectMeta::default()
                    },
                    action: Some(action.to_string()),
                    reason: Some(reason.to_string()),
                    note: Some(note),
                    type_: Some(type_.to_string()),
                    event_time: Some(MicroTime(now)),
                    regarding: Some(regarding.clone()),
                    reporting_controller: Some(self.controller.clone()),
                    reporting_instance: Some(self.instance.clone()),
                    ..K8sEvent::default()
                };
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PostParams::default()
                };
                // Kept as sent, without the stored resourceVersion: the next of its series
                // merges over whatever the Event became.
                events.create(&params, &event).await?;
                event
            }
        };
        series.insert(key, event);
        Ok(())
    }
}

fn jiff_span(duration: Duration) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::try_from(duration).unwrap_or(k8s_openapi::jiff::SignedDuration::MAX)
}
