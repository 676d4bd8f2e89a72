//! The real-apiserver tier, one namespace: the chart rendered with `watchNamespace` (a Role and
//! RoleBinding in that namespace, no ClusterRole) and the operator run with
//! `PGVS3_OPERATOR_WATCH_NAMESPACE`, as the chart's ServiceAccount. It provisions a pool and a
//! Bucket there (the keys used against a gateway), leaves another namespace alone, and asks the
//! API server for nothing outside its namespace and its Lease's. Its own control plane: the
//! cluster-wide operator of apiserver.rs would reconcile the namespace too. Ignored
//! without `PGVS3_KUBE_ASSETS` (`.ci/apiserver-tier.sh` runs it).

use crate::control_plane;
use pgvs3_testkit as common;

use control_plane::{
    ControlPlane, Gateway, Operator, SYSTEM_NAMESPACE, eventually, primary_pool, put, secret_text, wait,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use pgvs3_operator::crd::{Bucket, GatewayPool};
use serde_json::json;

const WATCHED: &str = "scoped";

#[test]
#[ignore = "the real-apiserver tier: needs PGVS3_KUBE_ASSETS (.ci/apiserver-tier.sh)"]
fn an_operator_of_one_namespace_works_with_the_namespaced_rbac_and_sees_only_it() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(scoped());
}

async fn scoped() {
    let plane = ControlPlane::start_with("scoped", "", Some(WATCHED)).await;
    let roles = plane.kubectl(&["get", "clusterroles,clusterrolebindings", "-o", "name"]);
    assert!(!roles.contains("pgvs3"), "no cluster-wide roles: {roles}");
    let operator = Operator::start(&plane, "scoped-operator", Some(WATCHED), ("pgvs3-operator", 15));
    let client = plane.admin.clone();
    plane.kubectl(&["create", "namespace", "outside"]);
    let url = common::fresh_database().await;
    primary_pool(&client, "outside", "objects", &url).await;
    primary_pool(&client, WATCHED, "objects", &url).await;
    control_plane::gateways_ready(&client, WATCHED, "objects").await;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), WATCHED);
    let master = eventually(wait(), "the pool's master key Secret", || async {
        secrets.get_opt("objects-pgvs3-master-key").await.unwrap()
    })
    .await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), WATCHED);
    eventually(wait(), "the pool's Deployment", || async {
        deployments.get_opt("objects").await.unwrap()
    })
    .await;
    let gateway = Gateway::start(&plane.run_dir, "scoped", &url, &secret_text(&master, "masterKey")).await;
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), WATCHED);
    control_plane::apply(
        &buckets,
        "photos",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "photos"},
               "spec": {"gatewayPoolRef": "objects"}}),
    )
    .await;
    eventually(wait(), "the Bucket Ready", || async {
        let bucket = buckets.get("photos").await.ok()?;
        let ready = bucket.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        (ready.status == "True").then_some(())
    })
    .await;
    let credentials = secrets.get("photos-credentials").await.unwrap();
    put(&gateway, &credentials, "a.txt").await.unwrap();

    // The other namespace's pool was never touched: no status, no children.
    let outside: Api<GatewayPool> = Api::namespaced(client.clone(), "outside");
    assert!(outside.get("objects").await.unwrap().status.is_none());
    let outside_deployments: Api<Deployment> = Api::namespaced(client.clone(), "outside");
    assert!(outside_deployments.get_opt("objects").await.unwrap().is_none());

    // Every request stays in its namespace (or its Lease's), and none was forbidden. The
    // service-account issuer's discovery and keys are URLs, no namespace's objects (read with
    // the default grant to every ServiceAccount: the scoped chart has no ClusterRole).
    let audit = std::fs::read_to_string(plane.run_dir.join("audit.log")).unwrap();
    let requests: Vec<serde_json::Value> = audit
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["user"]["username"] == format!("system:serviceaccount:{SYSTEM_NAMESPACE}:pgvs3-operator")
        })
        .collect();
    assert!(requests.len() > 10, "{} requests", requests.len());
    let outside_requests: Vec<&str> = requests
        .iter()
        .map(|e| e["requestURI"].as_str().unwrap_or_default())
        .filter(|uri| {
            !uri.contains(&format!("/namespaces/{WATCHED}/"))
                && !uri.contains(&format!("/namespaces/{SYSTEM_NAMESPACE}/leases"))
                && *uri != "/apis/monitoring.coreos.com/v1"
                && *uri != "/.well-known/openid-configuration"
                && *uri != "/openid/v1/jwks"
        })
        .collect();
    assert!(
        outside_requests.is_empty(),
        "requests outside {WATCHED}: {outside_requests:#?}"
    );
    let forbidden: Vec<&str> = requests
        .iter()
        .filter(|e| e["responseStatus"]["code"] == 403)
        .map(|e| e["requestURI"].as_str().unwrap_or_default())
        .collect();
    assert!(
        forbidden.is_empty(),
        "forbidden: {forbidden:#?}\n{}",
        operator.process.log_text()
    );
}
