//! The real-apiserver tier, leader election (defect 4): two `pgvs3-operator` processes share a
//! Lease; the API server is killed for longer than the Lease lasts, then started again. The
//! leader must stop leading (and say so on /readyz) before its Lease can expire, and at no
//! sampled moment may both processes lead. Its own control plane: the outage would disturb the
//! other scenarios. Ignored without `PGVS3_KUBE_ASSETS` (`.ci/apiserver-tier.sh` runs it).

use crate::control_plane;

use std::time::Duration;

use control_plane::{ControlPlane, Operator, SYSTEM_NAMESPACE, eventually, wait};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

const LEASE: &str = "fencing";
/// Lease duration in seconds: the leader fences itself 4 s after its last renewal.
const DURATION: u64 = 6;

#[test]
#[ignore = "the real-apiserver tier: needs PGVS3_KUBE_ASSETS (.ci/apiserver-tier.sh)"]
fn a_leader_that_cannot_renew_stops_before_another_takes_over() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(fencing());
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases.get_opt(LEASE).await.ok()??.spec?.holder_identity
}

/// Which of the replicas say they lead.
async fn leaders(replicas: &[(&str, &Operator)]) -> Vec<String> {
    let mut leading = Vec::new();
    for (name, replica) in replicas {
        if replica.readiness().await.as_deref() == Some("leading\n") {
            leading.push(name.to_string());
        }
    }
    leading
}

async fn fencing() {
    let plane = ControlPlane::start("fencing", "").await;
    let leases: Api<Lease> = Api::namespaced(plane.admin.clone(), SYSTEM_NAMESPACE);
    let a = Operator::start(&plane, "replica-a", None, (LEASE, DURATION));
    let first = eventually(wait(), "one replica leads", || async {
        let holder = holder(&leases).await?;
        (leaders(&[("replica-a", &a)]).await == [holder.clone()]).then_some(holder)
    })
    .await;
    assert_eq!(first, "replica-a");
    let b = Operator::start(&plane, "replica-b", None, (LEASE, DURATION));
    let replicas = [("replica-a", &a), ("replica-b", &b)];
    eventually(wait(), "the second stands by", || async {
        (b.readiness().await.as_deref() == Some("standing by\n")).then_some(())
    })
    .await;
    assert_eq!(leaders(&replicas).await, ["replica-a"]);

    // The outage: longer than the Lease.
    let apiserver = plane.kill_apiserver();
    let killed = tokio::time::Instant::now();
    let fenced = eventually(Duration::from_secs(DURATION), "the leader stops leading", || async {
        let readiness = a.readiness().await?;
        readiness
            .starts_with("standing by: stopped leading")
            .then_some(readiness)
    })
    .await;
    assert!(fenced.contains("not renewed"), "{fenced}");
    assert!(
        killed.elapsed() < Duration::from_secs(DURATION),
        "fenced before the Lease could expire"
    );
    while killed.elapsed() < Duration::from_secs(DURATION + 4) {
        assert!(
            leaders(&replicas).await.is_empty(),
            "nobody leads without an API server"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    plane.restart_apiserver(&apiserver).await;
    // From now on: never two leaders at once; one of them leads again, and it holds the Lease.
    let restarted = tokio::time::Instant::now();
    let mut new_leader = None;
    while restarted.elapsed() < Duration::from_secs(3 * DURATION + 10) {
        let leading = leaders(&replicas).await;
        assert!(leading.len() <= 1, "two leaders at once: {leading:?}");
        if let [leader] = &leading[..]
            && holder(&leases).await.as_ref() == Some(leader)
        {
            new_leader.get_or_insert(leader.clone());
        }
        if new_leader.is_some() && restarted.elapsed() > Duration::from_secs(2 * DURATION) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let new_leader = new_leader.unwrap_or_else(|| {
        panic!(
            "a leader after the outage\n--- a ---\n{}\n--- b ---\n{}",
            a.process.log_text(),
            b.process.log_text()
        )
    });
    assert_eq!(
        leaders(&replicas).await,
        std::slice::from_ref(&new_leader),
        "the leader keeps leading"
    );
    assert_eq!(holder(&leases).await, Some(new_leader));
}
