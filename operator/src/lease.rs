//! Leader election on a `coordination.k8s.io` Lease, with fencing: a leader that has not renewed
//! its Lease within two thirds of its duration stops leading at once, by its own clock, whether
//! or not the API server answers, so it has stopped before any other replica can see the Lease
//! expire and take it.
//!
//! Expiry is judged as client-go does: by the local time at which a replica last saw the Lease
//! change (its resourceVersion), never by the `renewTime` another machine's clock wrote.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PostParams};
use tokio::time::Instant;

use crate::kube_ops::FIELD_MANAGER;

pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    /// The Lease's resourceVersion when this replica last saw it change, and when that was.
    observed: Option<(String, Instant)>,
}

/// Why a leader stopped leading.
pub type Lost = String;

impl Elector {
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration: Duration) -> Elector {
        Elector {
            api,
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
            observed: None,
        }
    }

    /// How often the leader renews, and a standby retries.
    fn period(&self) -> Duration {
        self.duration / 3
    }

    /// How long after its last successful renewal a leader may still act: less than the
    /// duration, so it stops before the others consider the Lease expired.
    fn deadline(&self) -> Duration {
        self.duration * 2 / 3
    }

    /// Campaigns until this replica holds the Lease; returns when the winning request was sent
    /// (the start of the leadership's validity).
    pub async fn acquire(&mut self) -> Instant {
        loop {
            let sent = Instant::now();
            match tokio::time::timeout(self.period(), self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => return sent,
                Ok(Ok(false)) => {}
                Ok(Err(err)) => tracing::debug!(error = %err, "lease not acquired"),
                Err(_) => tracing::debug!("lease request timed out"),
            }
            tokio::time::sleep_until(sent + self.period()).await;
        }
    }

    /// Renews the Lease every period while leading; resolves, with the reason, at the first
    /// moment the leadership can no longer be vouched for: renewal refused (another holder), or
    /// no successful renewal within the deadline (the API server unreachable or slow).
    pub async fn hold(&mut self, mut renewed: Instant) -> Lost {
        loop {
            tokio::time::sleep_until(renewed + self.period()).await;
            let fence = renewed + self.deadline();
            loop {
                let sent = Instant::now();
                match tokio::time::timeout_at(fence, self.try_acquire_or_renew()).await {
                    Ok(Ok(true)) => {
                        renewed = sent;
                        break;
                    }
                    Ok(Ok(false)) => return "another replica holds the lease".to_string(),
                    Ok(Err(err)) => tracing::warn!(error = %err, "lease renewal failed"),
                    Err(_) => {
                        return format!("lease not renewed within {}s", self.deadline().as_secs_f32());
                    }
                }
                // Retry soon, but never past the fence.
                let retry = (sent + Duration::from_millis(500)).min(fence);
                tokio::time::sleep_until(retry).await;
                if Instant::now() >= fence {
                    return format!("lease not renewed within {}s", self.deadline().as_secs_f32());
                }
            }
        }
    }

    /// Gives the Lease up (shutdown) so the next replica need not wait for it to expire.
    pub async fn release(&mut self) {
        let Some((version, _)) = &self.observed else {
            return;
        };
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": version},
            "spec": {"holderIdentity": null, "renewTime": MicroTime(Timestamp::now())},
        });
        let params = crate::kube_ops::manager();
        let patch = Patch::Merge(&patch);
        let released = self.api.patch(&self.name, &params, &patch);
        if let Err(err) = tokio::time::timeout(self.period(), released)
            .await
            .unwrap_or_else(|_| Err(kube::Error::Service("timed out".into())))
        {
            tracing::warn!(error = %err, "releasing the lease");
        }
    }

    /// One attempt: creates the Lease, renews it, or takes it over once it expired. True when
    /// this replica holds it now. Writes carry the resourceVersion they read, so of two
    /// replicas racing for an expired Lease exactly one succeeds.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now = MicroTime(Timestamp::now());
        let seconds = i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX);
        let Some(lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            };
            return match self.api.create(&params, &lease).await {
                Ok(created) => {
                    self.observe(&created);
                    Ok(true)
                }
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(err) => Err(err),
            };
        };
        self.observe(&lease);
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|holder| !holder.is_empty());
        let ours = holder.as_deref() == Some(self.identity.as_str());
        if holder.is_some() && !ours {
            let lasts = Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(seconds)).unwrap_or(0));
            let seen = self.observed.as_ref().map_or_else(Instant::now, |(_, at)| *at);
            if Instant::now() < seen + lasts {
                return Ok(false);
            }
        }
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": lease.metadata.resource_version},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": seconds,
                "renewTime": now,
                "acquireTime": if ours { spec.acquire_time.unwrap_or(now.clone()) } else { now.clone() },
                "leaseTransitions": spec.lease_transitions.unwrap_or(0) + i32::from(!ours),
            },
        });
        let params = crate::kube_ops::manager();
        match self.api.patch(&self.name, &params, &Patch::Merge(&patch)).await {
            Ok(renewed) => {
                self.observe(&renewed);
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(err) => Err(err),
        }
    }

    fn observe(&mut self, lease: &Lease) {
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|(seen, _)| *seen != version) {
            self.observed = Some((version, Instant::now()));
        }
    }
}
