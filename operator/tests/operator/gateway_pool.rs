//! GatewayPool reconciles against the fake API server: create, configuration and Secret
//! changes rolling pods, a missing database Service, readiness, and failures with backoff.

use crate::mock;

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::runtime::controller::Action;
use mock::FakeApi;
use pgvs3_operator::context::Context;
use pgvs3_operator::crd::GatewayPool;
use pgvs3_operator::gateway_pool::{self, build::CHECKSUM_ANNOTATION};
use pgvs3_operator::metrics::Metrics;
use serde_json::{Value, json};

const POOL: &str = "/apis/pgvs3.io/v1alpha1/namespaces/team/gatewaypools/objects";
const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/team/deployments/objects";
const MASTER_KEY: &str = "/api/v1/namespaces/team/secrets/db-pgvs3-master-key";
const CREDENTIALS: &str = "/api/v1/namespaces/team/secrets/db-app";

fn setup(role: &str) -> (Arc<Context>, FakeApi) {
    let (client, fake) = FakeApi::start();
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
        "metadata": {"name": "objects", "namespace": "team"},
        "spec": {"role": role, "postgres": {"clusterName": "db"}},
    }));
    fake.insert(secret("db-app", "app", "first-password"));
    // CloudNativePG's CA, which the pool verifies the database against by default.
    fake.insert(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-ca", "namespace": "team"},
        "data": {"ca.crt": b64("-----BEGIN CERTIFICATE-----\n")},
    }));
    // A Standby pool starts on a cluster whose `-ro` Service does not exist yet.
    for service in ["db-rw", "db-ro"] {
        if role == "Primary" || service == "db-rw" {
            fake.insert(
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": service, "namespace": "team"}}),
            );
        }
    }
    (Arc::new(Context::new(client, Metrics::default())), fake)
}

fn secret(name: &str, user: &str, password: &str) -> Secret {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "team"},
        "data": {"username": b64(user), "password": b64(password)},
    }))
    .unwrap()
}

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

async fn reconcile(ctx: &Arc<Context>, fake: &FakeApi) -> Result<Action, pgvs3_operator::context::Error> {
    let pool: GatewayPool = fake.typed(POOL);
    gateway_pool::reconcile(Arc::new(pool), ctx.clone()).await
}

fn checksum(fake: &FakeApi) -> String {
    let deployment: Deployment = fake.typed(DEPLOYMENT);
    deployment.spec.unwrap().template.metadata.unwrap().annotations.unwrap()[CHECKSUM_ANNOTATION].clone()
}

fn condition(fake: &FakeApi, type_: &str) -> (String, String) {
    fake.condition(POOL, type_)
}

#[tokio::test]
async fn create_applies_children_with_one_field_manager_and_generates_the_master_key() {
    let (ctx, fake) = setup("Primary");
    let action = reconcile(&ctx, &fake).await.unwrap();
    // Rolling out: looked at again soon (gateways that cannot start are reported).
    assert_eq!(action, Action::requeue(Duration::from_secs(10)));

    // The master key is created once (POST, not apply) and not owned by the pool.
    let created = fake.requests_to(Method::POST, "/secrets");
    assert_eq!(created.len(), 1);
    let key: Secret = fake.typed(MASTER_KEY);
    assert!(key.data.unwrap()["masterKey"].0.len() >= 32);
    assert!(key.metadata.owner_references.is_none());

    let mut applies: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::PATCH && !r.path.contains("/events"))
        .collect();
    // First the in-use finalizer (a merge patch on the pool's resourceVersion), before
    // anything a Bucket's cleanup could need.
    let held = applies.remove(0);
    assert_eq!(held.path, POOL);
    assert_eq!(
        held.body["metadata"]["finalizers"],
        serde_json::json!(["pgvs3.io/in-use"])
    );
    assert!(held.body["metadata"]["resourceVersion"].is_string(), "{:?}", held.body);
    let paths: Vec<&str> = applies.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/api/v1/namespaces/team/configmaps/objects-config",
            "/api/v1/namespaces/team/secrets/objects-pgvs3-database",
            "/api/v1/namespaces/team/services/objects",
            "/api/v1/namespaces/team/services/objects-admin",
            DEPLOYMENT,
            "/apis/policy/v1/namespaces/team/poddisruptionbudgets/objects",
            "/apis/pgvs3.io/v1alpha1/namespaces/team/gatewaypools/objects/status",
        ]
    );
    for apply in &applies {
        assert!(apply.query.contains("fieldManager=pgvs3-operator"), "{}", apply.query);
        assert!(apply.query.contains("force=true"), "{}", apply.query);
    }
    let deployment: Deployment = fake.typed(DEPLOYMENT);
    assert_eq!(deployment.metadata.owner_references.unwrap()[0].name, "objects");
    // No autoscaling: a stale HPA is removed (404 is fine).
    assert_eq!(
        fake.requests_to(Method::DELETE, "/horizontalpodautoscalers/objects")
            .len(),
        1
    );

    let status = &fake.get(POOL).unwrap()["status"];
    assert_eq!(status["database"], "db-rw");
    assert_eq!(status["endpoints"]["s3"], "http://objects.team.svc:9000");
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(condition(&fake, "Ready"), ("False".into(), "Progressing".into()));
    assert_eq!(condition(&fake, "Progressing"), ("True".into(), "RollingOut".into()));
    assert_eq!(fake.events(), vec![("Normal".to_string(), "Progressing".to_string())]);
}

#[tokio::test]
async fn ready_deployment_makes_the_pool_ready_once() {
    let (ctx, fake) = setup("Primary");
    reconcile(&ctx, &fake).await.unwrap();
    fake.update(DEPLOYMENT, |d| {
        d["status"] = json!({"observedGeneration": 1, "replicas": 2, "readyReplicas": 2, "updatedReplicas": 2, "availableReplicas": 2});
    });
    reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(condition(&fake, "Ready"), ("True".into(), "Available".into()));
    assert_eq!(fake.get(POOL).unwrap()["status"]["readyReplicas"], 2);
    reconcile(&ctx, &fake).await.unwrap();
    let events = fake.events();
    assert_eq!(events.iter().filter(|e| e.1 == "Available").count(), 1, "{events:?}");
}

#[tokio::test]
async fn configuration_change_rolls_pods_and_scaling_does_not() {
    let (ctx, fake) = setup("Primary");
    reconcile(&ctx, &fake).await.unwrap();
    let first = checksum(&fake);

    fake.update(POOL, |p| p["spec"]["replicas"] = json!(4));
    reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(checksum(&fake), first, "scaling must not restart pods");
    let deployment: Deployment = fake.typed(DEPLOYMENT);
    assert_eq!(deployment.spec.unwrap().replicas, Some(4));

    fake.update(POOL, |p| p["spec"]["poolSize"] = json!(64));
    reconcile(&ctx, &fake).await.unwrap();
    assert_ne!(checksum(&fake), first);
    let config = fake.get("/api/v1/namespaces/team/configmaps/objects-config").unwrap();
    assert_eq!(config["data"]["PGVS3_POOL_SIZE"], "64");
}

#[tokio::test]
async fn an_ojs_endpoint_waits_for_its_token_secret_and_rolls_when_it_rotates() {
    let (ctx, fake) = setup("Primary");
    fake.update(
        POOL,
        |p| p["spec"]["protocols"] = json!({"ojs": {"enabled": true, "port": 8080}, "ojsTokenSecretRef": "jobs-token"}),
    );
    reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(
        condition(&fake, "Ready"),
        ("False".into(), "CredentialsUnavailable".into())
    );
    assert!(fake.get(DEPLOYMENT).is_none(), "no open OJS endpoint without its token");

    let token = json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "jobs-token", "namespace": "team"},
        "data": {"token": b64("first-token")},
    });
    fake.insert(token);
    reconcile(&ctx, &fake).await.unwrap();
    let first = checksum(&fake);
    let token_path = "/api/v1/namespaces/team/secrets/jobs-token";
    fake.update(token_path, |s| s["data"]["token"] = json!(b64("second-token")));
    reconcile(&ctx, &fake).await.unwrap();
    assert_ne!(checksum(&fake), first, "a rotated token rolls the gateways");
}

#[tokio::test]
async fn missing_ro_service_is_reported_not_crash_looped() {
    let (ctx, fake) = setup("Standby");
    let action = reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));
    assert_eq!(
        condition(&fake, "Ready"),
        ("False".into(), "DatabaseUnavailable".into())
    );
    assert_eq!(
        condition(&fake, "Degraded"),
        ("True".into(), "DatabaseUnavailable".into())
    );
    assert!(fake.get(DEPLOYMENT).is_none(), "no gateways without their database");
    assert_eq!(
        fake.events(),
        vec![("Warning".to_string(), "DatabaseUnavailable".to_string())]
    );

    // CloudNativePG creates the Service once a replica exists: the next reconcile binds.
    fake.insert(
        serde_json::from_value::<Service>(json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "db-ro", "namespace": "team"}
        }))
        .unwrap(),
    );
    reconcile(&ctx, &fake).await.unwrap();
    let url: Secret = fake.typed("/api/v1/namespaces/team/secrets/objects-pgvs3-database");
    let url = String::from_utf8(url.data.unwrap()["PGVS3_DATABASE_URL"].0.clone()).unwrap();
    assert!(url.starts_with("host=db-ro "), "{url}");
    assert_eq!(fake.get(POOL).unwrap()["status"]["database"], "db-ro");
}

#[tokio::test]
async fn existing_master_key_is_never_overwritten() {
    let (ctx, fake) = setup("Primary");
    fake.insert(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db-pgvs3-master-key", "namespace": "team"},
        "data": {"masterKey": b64("operator-chosen-key")},
    }));
    reconcile(&ctx, &fake).await.unwrap();
    assert!(fake.requests_to(Method::POST, "/secrets").is_empty());
    let key = fake.get(MASTER_KEY).unwrap();
    assert_eq!(key["data"]["masterKey"], Value::String(b64("operator-chosen-key")));
}

#[tokio::test]
async fn conflicts_and_server_errors_back_off_exponentially_and_reset_on_success() {
    let (ctx, fake) = setup("Primary");
    let pool = Arc::new(fake.typed::<GatewayPool>(POOL));
    // One conflict (the Deployment changed between its read and the write, as its controller's
    // status writes make it do) is read and judged again at once: no failure.
    fake.fail(Method::PATCH, "/deployments/objects", 409, 1);
    reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(fake.requests_to(Method::PATCH, "/deployments/objects").len(), 2);
    assert_eq!(ctx.metrics.failures("GatewayPool", "Conflict"), 0);

    // Conflicts on every attempt fail the reconcile, which backs off.
    fake.fail(
        Method::PATCH,
        "/deployments/objects",
        409,
        pgvs3_operator::kube_ops::APPLY_ATTEMPTS,
    );
    fake.fail(Method::PATCH, "/deployments/objects", 500, 1);

    let conflict = reconcile(&ctx, &fake).await.unwrap_err();
    assert_eq!(conflict.reason(), "Conflict");
    let first = gateway_pool::error_policy(pool.clone(), &conflict, ctx.clone());
    let failure = reconcile(&ctx, &fake).await.unwrap_err();
    assert_eq!(failure.reason(), "KubeApi");
    let second = gateway_pool::error_policy(pool.clone(), &failure, ctx.clone());
    assert_eq!(first, Action::requeue(Duration::from_secs(2)));
    assert_eq!(second, Action::requeue(Duration::from_secs(4)));
    assert_eq!(ctx.metrics.failures("GatewayPool", "Conflict"), 1);
    assert_eq!(ctx.metrics.failures("GatewayPool", "KubeApi"), 1);

    reconcile(&ctx, &fake).await.unwrap();
    assert!(fake.get(DEPLOYMENT).is_some());
    // Success reset the backoff: the next failure waits the first delay again.
    let again = gateway_pool::error_policy(pool, &conflict, ctx.clone());
    assert_eq!(again, Action::requeue(Duration::from_secs(2)));
}

#[tokio::test]
async fn missing_database_credentials_wait_with_a_condition() {
    let (ctx, fake) = setup("Primary");
    fake.remove(CREDENTIALS);
    let action = reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));
    assert_eq!(
        condition(&fake, "Ready"),
        ("False".into(), "CredentialsUnavailable".into())
    );
    assert!(fake.get(DEPLOYMENT).is_none());
}

#[tokio::test]
async fn autoscaling_applies_an_hpa_and_service_monitor_follows_its_crd() {
    let (ctx, fake) = setup("Primary");
    fake.update(POOL, |p| {
        p["spec"]["autoscaling"] = json!({"minReplicas": 2, "maxReplicas": 5})
    });
    fake.insert(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    }));
    reconcile(&ctx, &fake).await.unwrap();
    let hpa = fake
        .get("/apis/autoscaling/v2/namespaces/team/horizontalpodautoscalers/objects")
        .unwrap();
    assert_eq!(hpa["spec"]["maxReplicas"], 5);
    assert!(
        fake.get("/apis/monitoring.coreos.com/v1/namespaces/team/servicemonitors/objects")
            .is_some()
    );
    let deployment = fake.get(DEPLOYMENT).unwrap();
    assert!(
        deployment["spec"].get("replicas").is_none(),
        "the HPA owns the replica count"
    );
}

/// An OriginCache on `pool` whose origin's CA bundle is `bundle`.
fn origin_cache(name: &str, pool: &str, bundle: Value) -> Value {
    json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "OriginCache",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"gatewayPoolRef": pool, "bucket": format!("{name}-cache"), "credentialsSecretRef": "origin",
                 "origin": {"endpoint": "https://origin.example", "bucket": "remote", "caBundle": bundle}},
    })
}

/// The OriginCaches' CA bundles (a Secret's key, a ConfigMap's) reach the gateways as mounted
/// files named in `PGVS3_ORIGIN_CA_FILE`, each once; one that is not usable is left out (the
/// gateway refuses such a file at start, which would stop the whole pool), as are those of
/// another pool's caches; a changed bundle rolls the pods.
#[tokio::test]
async fn origin_ca_bundles_are_mounted_and_a_new_one_rolls_the_pods() {
    let (ctx, fake) = setup("Primary");
    reconcile(&ctx, &fake).await.unwrap();
    let without = checksum(&fake);
    let pem = |name: &str| std::fs::read_to_string(pgvs3_testkit::certs::TestCa::new(name).ca_cert()).unwrap();
    fake.insert(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "origin-ca", "namespace": "team"},
        "data": {"ca.crt": b64(&pem("pool-origin-a"))},
    }));
    fake.insert(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trust", "namespace": "team"},
        "data": {"bundle.pem": pem("pool-origin-b")},
    }));
    fake.insert(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "other-pool-ca", "namespace": "team"},
        "data": {"ca.crt": b64(&pem("pool-origin-other"))},
    }));
    fake.insert(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "not-a-ca", "namespace": "team"},
        "data": {"ca.crt": b64("not a certificate")},
    }));
    for (name, pool, bundle) in [
        ("private", "objects", json!({"secretRef": "origin-ca"})),
        (
            "same-bundle",
            "objects",
            json!({"secretRef": "origin-ca", "key": "ca.crt"}),
        ),
        (
            "shared",
            "objects",
            json!({"configMapRef": "trust", "key": "bundle.pem"}),
        ),
        ("broken", "objects", json!({"secretRef": "not-a-ca"})),
        ("missing", "objects", json!({"configMapRef": "absent"})),
        ("elsewhere", "other", json!({"secretRef": "other-pool-ca"})),
    ] {
        fake.insert(origin_cache(name, pool, bundle));
    }
    reconcile(&ctx, &fake).await.unwrap();

    let config = fake.get("/api/v1/namespaces/team/configmaps/objects-config").unwrap();
    assert_eq!(
        config["data"]["PGVS3_ORIGIN_CA_FILE"],
        "/etc/pgvs3/origin-ca-0/ca.crt,/etc/pgvs3/origin-ca-1/ca.crt"
    );
    let deployment: Deployment = fake.typed(DEPLOYMENT);
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let volumes: Vec<Value> = pod
        .volumes
        .unwrap()
        .into_iter()
        .filter(|v| v.name.starts_with("origin-ca"))
        .map(|v| serde_json::to_value(v).unwrap())
        .collect();
    assert_eq!(
        volumes,
        [
            json!({"name": "origin-ca-0", "secret": {"secretName": "origin-ca", "optional": false, "defaultMode": 0o440,
                   "items": [{"key": "ca.crt", "path": "ca.crt"}]}}),
            json!({"name": "origin-ca-1", "configMap": {"name": "trust", "optional": false, "defaultMode": 0o444,
                   "items": [{"key": "bundle.pem", "path": "ca.crt"}]}}),
        ]
    );
    let mounts: Vec<(String, String)> = pod.containers[0]
        .volume_mounts
        .clone()
        .unwrap()
        .into_iter()
        .filter(|m| m.name.starts_with("origin-ca"))
        .map(|m| (m.name, m.mount_path))
        .collect();
    assert_eq!(
        mounts,
        [
            ("origin-ca-0".to_string(), "/etc/pgvs3/origin-ca-0".to_string()),
            ("origin-ca-1".to_string(), "/etc/pgvs3/origin-ca-1".to_string()),
        ]
    );
    let with = checksum(&fake);
    assert_ne!(with, without, "new bundles roll the pods");

    fake.update("/api/v1/namespaces/team/configmaps/trust", |m| {
        m["data"]["bundle.pem"] = json!(pem("pool-origin-c"))
    });
    reconcile(&ctx, &fake).await.unwrap();
    assert_ne!(checksum(&fake), with, "a renewed bundle rolls the pods");
}
