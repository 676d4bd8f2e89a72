//! OriginCache reconciles against the fake API server: until the gateway's catalog can hold
//! origins, a valid cache says so plainly; a missing pool or Secret is reported, and a change
//! of the credentials Secret is picked up.

mod mock;

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use mock::FakeApi;
use pgvs3_operator::context::Context;
use pgvs3_operator::crd::OriginCache;
use pgvs3_operator::metrics::Metrics;
use pgvs3_operator::origin_cache;
use serde_json::json;

const CACHE: &str = "/apis/pgvs3.io/v1alpha1/namespaces/team/origincaches/datasets";
const SECRET: &str = "/api/v1/namespaces/team/secrets/origin";

fn setup() -> (Arc<Context>, FakeApi) {
    let (client, fake) = FakeApi::start();
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "OriginCache",
        "metadata": {"name": "datasets", "namespace": "team"},
        "spec": {
            "gatewayPoolRef": "objects", "bucket": "datasets-cache", "credentialsSecretRef": "origin",
            "origin": {"endpoint": "https://s3.example", "bucket": "datasets"},
        },
    }));
    (Arc::new(Context::new(client, Metrics::default())), fake)
}

async fn reconcile(ctx: &Arc<Context>, fake: &FakeApi) -> Action {
    let cache: OriginCache = fake.typed(CACHE);
    origin_cache::reconcile(Arc::new(cache), ctx.clone()).await.unwrap()
}

#[tokio::test]
async fn waits_for_pool_and_secret_then_reports_missing_origin_support() {
    let (ctx, fake) = setup();
    assert_eq!(reconcile(&ctx, &fake).await, Action::requeue(Duration::from_secs(30)));
    assert_eq!(fake.condition(CACHE, "Ready"), ("False".into(), "PoolNotFound".into()));

    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
        "metadata": {"name": "objects", "namespace": "team"},
        "spec": {"postgres": {"clusterName": "db"}},
    }));
    reconcile(&ctx, &fake).await;
    assert_eq!(
        fake.condition(CACHE, "Ready"),
        ("False".into(), "CredentialsUnavailable".into())
    );

    fake.insert(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "origin", "namespace": "team"},
        "data": {"AWS_ACCESS_KEY_ID": "QQ==", "AWS_SECRET_ACCESS_KEY": "Qg=="},
    }));
    assert_eq!(reconcile(&ctx, &fake).await, Action::requeue(Duration::from_secs(300)));
    assert_eq!(
        fake.condition(CACHE, "Ready"),
        ("False".into(), "OriginSupportUnavailable".into())
    );
    assert_eq!(
        fake.condition(CACHE, "Degraded").0,
        "False",
        "nothing that exists is degraded"
    );
    let first = fake.get(CACHE).unwrap()["status"]["credentialsVersion"].clone();
    assert!(first.is_string());

    // A rotated origin key is noticed (the controller watches the Secret).
    fake.update(SECRET, |s| s["data"]["AWS_SECRET_ACCESS_KEY"] = json!("Qw=="));
    reconcile(&ctx, &fake).await;
    assert_ne!(fake.get(CACHE).unwrap()["status"]["credentialsVersion"], first);
}

#[tokio::test]
async fn invalid_durations_are_reported_not_retried() {
    let (ctx, fake) = setup();
    fake.update(CACHE, |c| c["spec"]["ttl"] = json!("forever"));
    assert_eq!(reconcile(&ctx, &fake).await, Action::requeue(Duration::from_secs(300)));
    assert_eq!(fake.condition(CACHE, "Ready"), ("False".into(), "InvalidSpec".into()));
}
