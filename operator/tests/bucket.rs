//! Bucket reconciles: the Kubernetes side against the fake API server, the catalog side
//! against a real PostgreSQL and a real gateway (the gateway tests' own harness), driven with
//! aws-sdk-s3 using the credentials the operator wrote.

#[path = "../../gateway/tests/common/mod.rs"]
mod common;
mod mock;

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use http::Method;
use kube::runtime::controller::Action;
use mock::{FakeApi, b64};
use pgvs3_operator::bucket;
use pgvs3_operator::context::Context;
use pgvs3_operator::crd::Bucket;
use pgvs3_operator::metrics::Metrics;
use serde_json::{Value, json};

/// The master key the gateway test harness starts gateways with.
const HARNESS_MASTER_KEY: &str = "integration-test-master-key";
const BUCKET: &str = "/apis/pgvs3.io/v1alpha1/namespaces/team/buckets/photos";
const SECRET: &str = "/api/v1/namespaces/team/secrets/photos-credentials";

fn secret_text(fake: &FakeApi, key: &str) -> String {
    use base64::Engine;
    let secret = fake.get(SECRET).expect("credentials Secret");
    let encoded = secret["data"][key].as_str().unwrap_or_else(|| panic!("no {key}"));
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(encoded).unwrap()).unwrap()
}

/// The Primary pool on the test database, a Standby pool elsewhere, and the Bucket.
fn setup(database_url: &str, bucket_spec: Value) -> (Arc<Context>, FakeApi) {
    let (client, fake) = FakeApi::start();
    fake.insert_primary_pool(database_url, HARNESS_MASTER_KEY);
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
        "metadata": {"name": "reader", "namespace": "team"},
        "spec": {"role": "Standby", "postgres": {"host": "standby.example", "secretRef": "login"}},
    }));
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "photos", "namespace": "team"},
        "spec": bucket_spec,
    }));
    (Arc::new(Context::new(client, Metrics::default())), fake)
}

async fn reconcile(ctx: &Arc<Context>, fake: &FakeApi) -> Result<Action, pgvs3_operator::context::Error> {
    let bucket: Bucket = fake.typed(BUCKET);
    bucket::reconcile(Arc::new(bucket), ctx.clone()).await
}

fn condition(fake: &FakeApi, type_: &str) -> (String, String) {
    fake.condition(BUCKET, type_)
}

/// The first reconcile adds the finalizer, the second provisions.
async fn provision(ctx: &Arc<Context>, fake: &FakeApi) {
    reconcile(ctx, fake).await.unwrap();
    assert_eq!(
        fake.get(BUCKET).unwrap()["metadata"]["finalizers"],
        json!(["pgvs3.io/bucket-cleanup"])
    );
    assert_eq!(
        reconcile(ctx, fake).await.unwrap(),
        Action::requeue(Duration::from_secs(300))
    );
}

async fn delete(ctx: &Arc<Context>, fake: &FakeApi) {
    fake.update(BUCKET, |b| {
        b["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
    });
    reconcile(ctx, fake).await.unwrap();
    assert!(fake.get(BUCKET).is_none(), "finalizer removed, object gone");
}

/// S3 client with the Secret's credentials; the gateway learns new keys from the catalog by
/// notification, so the first request is retried for a bounded time.
async fn put_with_secret(gateway: &common::TestGateway, fake: &FakeApi, bucket: &str, key: &str) -> Result<(), String> {
    let client = gateway.client_for(
        &secret_text(fake, "AWS_ACCESS_KEY_ID"),
        &secret_text(fake, "AWS_SECRET_ACCESS_KEY"),
    );
    let mut last = String::new();
    for _ in 0..50 {
        match client
            .put_object()
            .bucket(bucket)
            .key(key)
            .body(ByteStream::from_static(b"hello"))
            .send()
            .await
        {
            Ok(_) => return Ok(()),
            Err(err) => last = format!("{:?}", err.into_service_error()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(last)
}

async fn bucket_row(sql: &tokio_postgres::Client, name: &str) -> Option<Option<String>> {
    sql.query_opt("SELECT owner FROM pgvs3.buckets WHERE name = $1", &[&name])
        .await
        .unwrap()
        .map(|row| row.get(0))
}

#[tokio::test]
async fn provisioned_credentials_work_against_a_real_gateway_and_delete_drops_the_data() {
    let gateway = common::TestGateway::start().await;
    let (ctx, fake) = setup(
        &gateway.database_url,
        json!({"gatewayPoolRef": "objects", "deletionPolicy": "Delete"}),
    );
    provision(&ctx, &fake).await;

    assert_eq!(condition(&fake, "Ready"), ("True".into(), "Provisioned".into()));
    let status = fake.get(BUCKET).unwrap()["status"].clone();
    assert_eq!(status["bucketName"], "team-photos");
    assert!(status["bucketID"].as_i64().unwrap() > 0);
    assert_eq!(status["secretName"], "photos-credentials");
    assert_eq!(status["endpoint"], "http://objects.team.svc:9000");
    assert_eq!(secret_text(&fake, "BUCKET_NAME"), "team-photos");
    assert_eq!(
        secret_text(&fake, "COSI_S3_ACCESS_SECRET_KEY"),
        secret_text(&fake, "AWS_SECRET_ACCESS_KEY")
    );
    assert_eq!(
        secret_text(&fake, "BUCKET_READ_ENDPOINT_URLS"),
        "",
        "the standby pool is on another database"
    );
    let secret = fake.get(SECRET).unwrap();
    assert_eq!(secret["metadata"]["ownerReferences"][0]["kind"], "Bucket");

    // The sealed secret opens under the gateway's master key: the S3 key works.
    put_with_secret(&gateway, &fake, "team-photos", "a.txt").await.unwrap();
    let sql = gateway.sql().await;
    let key_id = secret_text(&fake, "AWS_ACCESS_KEY_ID");
    assert_eq!(bucket_row(&sql, "team-photos").await, Some(Some(key_id.clone())));

    // Reconciling again keeps the same key and secret (no rotation on resync).
    let secret_before = secret_text(&fake, "AWS_SECRET_ACCESS_KEY");
    reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(secret_text(&fake, "AWS_SECRET_ACCESS_KEY"), secret_before);

    delete(&ctx, &fake).await;
    assert_eq!(
        bucket_row(&sql, "team-photos").await,
        None,
        "Delete drops the bucket and its objects"
    );
    let keys: i64 = sql
        .query_one(
            "SELECT count(*) FROM pgvs3.access_keys WHERE access_key = $1",
            &[&key_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(keys, 0, "the access key is revoked");
    assert!(fake.events().iter().any(|e| e.1 == "Cleanup"));
    gateway.stop().await;
}

#[tokio::test]
async fn retain_keeps_the_bucket_and_its_objects_but_revokes_the_key() {
    let gateway = common::TestGateway::start().await;
    let (ctx, fake) = setup(
        &gateway.database_url,
        json!({"gatewayPoolRef": "objects", "bucketName": "kept-bucket"}),
    );
    provision(&ctx, &fake).await;
    put_with_secret(&gateway, &fake, "kept-bucket", "keep.txt")
        .await
        .unwrap();
    delete(&ctx, &fake).await;

    let sql = gateway.sql().await;
    assert_eq!(
        bucket_row(&sql, "kept-bucket").await,
        Some(None),
        "retained, now owned by the root key"
    );
    let object = gateway
        .client
        .get_object()
        .bucket("kept-bucket")
        .key("keep.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(object.body.collect().await.unwrap().into_bytes().as_ref(), b"hello");
    gateway.stop().await;
}

#[tokio::test]
async fn read_only_access_reads_but_cannot_write() {
    let gateway = common::TestGateway::start().await;
    let (ctx, fake) = setup(
        &gateway.database_url,
        json!({"gatewayPoolRef": "objects", "access": "ReadOnly"}),
    );
    provision(&ctx, &fake).await;
    let err = put_with_secret(&gateway, &fake, "team-photos", "x").await.unwrap_err();
    assert!(err.contains("AccessDenied"), "{err}");
    gateway.stop().await;
}

#[tokio::test]
async fn bucket_on_a_standby_pool_or_missing_pool_waits_with_a_condition() {
    let (client, fake) = FakeApi::start();
    let ctx = Arc::new(Context::new(client, Metrics::default()));
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "photos", "namespace": "team", "finalizers": ["pgvs3.io/bucket-cleanup"]},
        "spec": {"gatewayPoolRef": "reader"},
    }));
    assert_eq!(
        reconcile(&ctx, &fake).await.unwrap(),
        Action::requeue(Duration::from_secs(30))
    );
    assert_eq!(condition(&fake, "Ready"), ("False".into(), "PoolNotFound".into()));

    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
        "metadata": {"name": "reader", "namespace": "team"},
        "spec": {"role": "Standby", "postgres": {"clusterName": "db"}},
    }));
    reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(condition(&fake, "Ready"), ("False".into(), "PoolNotPrimary".into()));
    assert!(fake.get(SECRET).is_none());

    // Deleting it without a reachable catalog releases the finalizer and says so.
    fake.update(BUCKET, |b| {
        b["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
    });
    reconcile(&ctx, &fake).await.unwrap();
    assert!(fake.get(BUCKET).is_none());
    assert!(
        fake.events()
            .contains(&("Warning".to_string(), "CleanupSkipped".to_string()))
    );
}

#[tokio::test]
async fn unreachable_database_is_a_condition_and_a_retried_error() {
    let (client, fake) = FakeApi::start();
    let ctx = Arc::new(Context::new(client, Metrics::default()));
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
        "metadata": {"name": "objects", "namespace": "team"},
        "spec": {"postgres": {"host": "127.0.0.1", "port": 1, "secretRef": "login"}, "masterKeySecretRef": {"name": "master"}},
    }));
    fake.insert(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "login", "namespace": "team"},
        "data": {"username": b64("u"), "password": b64("p")}}),
    );
    fake.insert(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "master", "namespace": "team"},
        "data": {"masterKey": b64("k")}}),
    );
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "photos", "namespace": "team", "finalizers": ["pgvs3.io/bucket-cleanup"]},
        "spec": {"gatewayPoolRef": "objects", "quota": {"maxBytes": 1000}},
    }));
    let err = reconcile(&ctx, &fake).await.unwrap_err();
    let bucket = Arc::new(fake.typed::<Bucket>(BUCKET));
    assert_eq!(
        bucket::error_policy(bucket, &err, ctx.clone()),
        Action::requeue(Duration::from_secs(2))
    );
    assert_eq!(condition(&fake, "Ready"), ("False".into(), "CatalogUnavailable".into()));
    assert_eq!(
        condition(&fake, "QuotaEnforced"),
        ("False".into(), "QuotaSupportUnavailable".into())
    );
    // The Secret was written before the catalog was tried, so the key survives the retry.
    assert!(fake.get(SECRET).is_some());
    assert_eq!(fake.requests_to(Method::PATCH, "/secrets/photos-credentials").len(), 1);
}
