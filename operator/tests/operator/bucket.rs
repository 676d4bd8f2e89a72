//! Bucket reconciles: the Kubernetes side against the fake API server, the catalog side
//! against a real PostgreSQL and a real gateway (the gateway tests' own harness), driven with
//! aws-sdk-s3 using the credentials the operator wrote.

use crate::mock;
use pgvs3_testkit as common;

use std::sync::Arc;
use std::time::Duration;

use crate::catalog_timeout::Stall;
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
/// The S3 name of Bucket `photos` of namespace `team` (no `bucketName`).
fn photos() -> String {
    pgvs3_operator::crd::default_bucket_name("team", "photos")
}

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
    let added = fake.requests_to(Method::PATCH, "/buckets/photos");
    assert!(
        added.iter().all(|r| r.query.contains("fieldManager=pgvs3-operator")),
        "finalizer patches without the field manager: {:?}",
        added.iter().map(|r| &r.query).collect::<Vec<_>>()
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
    let patches = fake.requests_to(Method::PATCH, "/buckets/photos");
    assert!(patches.last().unwrap().query.contains("fieldManager=pgvs3-operator"));
}

/// S3 client with the Secret's credentials; the gateway learns new keys from the catalog by
/// notification, so the first request is retried for a bounded time.
async fn put_with_secret(gateway: &common::TestGateway, fake: &FakeApi, bucket: &str, key: &str) -> Result<(), String> {
    put_until_accepted(gateway, fake, bucket, key, |_| true).await
}

/// Like [`put_with_secret`], but stops retrying at the first refusal `retry` says is final.
async fn put_until_accepted(
    gateway: &common::TestGateway,
    fake: &FakeApi,
    bucket: &str,
    key: &str,
    retry: impl Fn(&str) -> bool,
) -> Result<(), String> {
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
        if !retry(&last) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(last)
}

async fn bucket_row(sql: &tokio_postgres::Client, name: &str) -> Option<Option<String>> {
    sql.query_opt("SELECT owner FROM pgvs3.buckets WHERE name = $1", &[&name])
        .await
        .unwrap()
        .map(|row| row.get("owner"))
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
    assert_eq!(status["bucketName"], photos().as_str());
    assert!(status["bucketID"].as_i64().unwrap() > 0);
    assert_eq!(status["secretName"], "photos-credentials");
    assert_eq!(status["endpoint"], "http://objects.team.svc:9000");
    assert_eq!(secret_text(&fake, "BUCKET_NAME"), photos());
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
    put_with_secret(&gateway, &fake, &photos(), "a.txt").await.unwrap();
    let sql = gateway.sql().await;
    let key_id = secret_text(&fake, "AWS_ACCESS_KEY_ID");
    assert_eq!(bucket_row(&sql, &photos()).await, Some(Some(key_id.clone())));

    // Reconciling again keeps the same key and secret (no rotation on resync), and writes no
    // catalog row: a changed row would make every gateway reload its catalog on each resync.
    let secret_before = secret_text(&fake, "AWS_SECRET_ACCESS_KEY");
    let catalog_version = || async {
        sql.query_one("SELECT version FROM pgvs3.catalog_version", &[])
            .await
            .unwrap()
            .get::<_, i64>("version")
    };
    let version_before = catalog_version().await;
    reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(secret_text(&fake, "AWS_SECRET_ACCESS_KEY"), secret_before);
    assert_eq!(catalog_version().await, version_before, "a resync changed the catalog");

    delete(&ctx, &fake).await;
    assert_eq!(
        bucket_row(&sql, &photos()).await,
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
        .get("count");
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
    let custodian = bucket_row(&sql, "kept-bucket").await.flatten();
    assert!(
        custodian.as_deref().is_some_and(|key| key.starts_with("PGVS3R")),
        "retained, held by the custodian key of team/photos: {custodian:?}"
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
async fn a_bucket_deleted_after_its_pool_still_has_its_key_revoked() {
    let gateway = common::TestGateway::start().await;
    let (ctx, fake) = setup(
        &gateway.database_url,
        json!({"gatewayPoolRef": "objects", "deletionPolicy": "Delete"}),
    );
    provision(&ctx, &fake).await;
    let key_id = secret_text(&fake, "AWS_ACCESS_KEY_ID");
    // A namespace's deletion: the pool and its Secrets go alongside the Bucket.
    fake.remove("/apis/pgvs3.io/v1alpha1/namespaces/team/gatewaypools/objects");
    fake.remove("/api/v1/namespaces/team/secrets/login");
    delete(&ctx, &fake).await;
    assert!(
        fake.events()
            .contains(&("Warning".to_string(), "CleanupPartial".to_string()))
    );
    let sql = gateway.sql().await;
    let keys: i64 = sql
        .query_one(
            "SELECT count(*) FROM pgvs3.access_keys WHERE access_key = $1",
            &[&key_id],
        )
        .await
        .unwrap()
        .get("count");
    assert_eq!(keys, 0, "the access key is revoked through the pool's last connection");
    // Dropping needs the pool: the bucket is left as it was.
    assert!(bucket_row(&sql, &photos()).await.is_some());
    gateway.stop().await;
}

#[tokio::test]
async fn a_bucket_deleted_without_its_pool_keeps_the_secret_of_its_unrevoked_key() {
    let gateway = common::TestGateway::start().await;
    let (ctx, fake) = setup(&gateway.database_url, json!({"gatewayPoolRef": "objects"}));
    provision(&ctx, &fake).await;
    let key_id = secret_text(&fake, "AWS_ACCESS_KEY_ID");
    assert!(!fake.get(SECRET).unwrap()["metadata"]["ownerReferences"].is_null());
    fake.remove("/apis/pgvs3.io/v1alpha1/namespaces/team/gatewaypools/objects");
    // An operator restarted since: it never bound the pool, so it has no connection to use.
    let restarted = Arc::new(Context::new(ctx.client.clone(), Metrics::default()));
    delete(&restarted, &fake).await;
    assert!(
        fake.events()
            .contains(&("Warning".to_string(), "CleanupSkipped".to_string()))
    );
    // The key still works, so its only copy is not left to garbage collection.
    let secret = fake.get(SECRET).expect("the credentials Secret is kept");
    assert!(secret["metadata"]["ownerReferences"].is_null(), "{secret}");
    assert!(secret["metadata"]["annotations"]["pgvs3.io/key-not-revoked"].is_string());
    assert_eq!(secret_text(&fake, "AWS_ACCESS_KEY_ID"), key_id);
    put_with_secret(&gateway, &fake, &photos(), "still.txt").await.unwrap();
    let patches = fake.requests_to(Method::PATCH, "/secrets/photos-credentials");
    assert!(
        patches.last().unwrap().query.contains("fieldManager=pgvs3-operator"),
        "{:?}",
        patches.last().unwrap().query
    );
    gateway.stop().await;
}

/// A Delete Bucket whose bucket holds a version under object lock: the forced drop is refused,
/// undone to its savepoint, and the bucket retained for the Bucket's namespace and name in the
/// cleanup's own transaction, with its objects; the key revoked.
#[tokio::test]
async fn a_delete_bucket_under_object_lock_is_retained_by_the_same_transaction() {
    use aws_sdk_s3::primitives::DateTime;
    use aws_sdk_s3::types::{
        BucketVersioningStatus, ObjectLockConfiguration, ObjectLockEnabled, ObjectLockMode, VersioningConfiguration,
    };
    let gateway = common::TestGateway::start().await;
    let (ctx, fake) = setup(
        &gateway.database_url,
        json!({"gatewayPoolRef": "objects", "deletionPolicy": "Delete"}),
    );
    provision(&ctx, &fake).await;
    let key_id = secret_text(&fake, "AWS_ACCESS_KEY_ID");
    let bucket = photos();
    let root = &gateway.client;
    root.put_bucket_versioning()
        .bucket(&bucket)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    root.put_object_lock_configuration()
        .bucket(&bucket)
        .object_lock_configuration(
            ObjectLockConfiguration::builder()
                .object_lock_enabled(ObjectLockEnabled::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let until = std::time::SystemTime::now() + Duration::from_secs(3600);
    root.put_object()
        .bucket(&bucket)
        .key("locked.txt")
        .body(ByteStream::from_static(b"kept"))
        .object_lock_mode(ObjectLockMode::Governance)
        .object_lock_retain_until_date(DateTime::from(until))
        .send()
        .await
        .unwrap();

    delete(&ctx, &fake).await;
    let sql = gateway.sql().await;
    let custodian = bucket_row(&sql, &bucket).await.flatten();
    assert!(
        custodian.as_deref().is_some_and(|key| key.starts_with("PGVS3R")),
        "retained, held by the custodian key of team/photos: {custodian:?}"
    );
    assert_eq!(access_keys_named(&sql, &key_id).await, 0, "the key is revoked");
    assert_eq!(
        fake.event_note("Cleanup"),
        Some(format!(
            "bucket {bucket} retained: bucket {bucket} holds versions under object lock (object lock); its access key \
             was revoked"
        ))
    );
    let object = root
        .get_object()
        .bucket(&bucket)
        .key("locked.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(object.body.collect().await.unwrap().into_bytes().as_ref(), b"kept");
    gateway.stop().await;
}

const POOL: &str = "/apis/pgvs3.io/v1alpha1/namespaces/team/gatewaypools/objects";

/// The catalog timeout of the cleanups cut short below (the forced drop's bound is ten of them).
const SHORT_TIMEOUT: Duration = Duration::from_secs(2);

async fn access_keys_named(sql: &tokio_postgres::Client, key_id: &str) -> i64 {
    sql.query_one(
        "SELECT count(*) FROM pgvs3.access_keys WHERE access_key = $1",
        &[&key_id],
    )
    .await
    .unwrap()
    .get("count")
}

/// A Delete Bucket, provisioned, then deleted with its pool (a namespace's deletion, so the
/// cleanup gives up on a catalog that does not answer) by an operator with a short catalog
/// timeout whose connections go through a [`Stall`] at `marker`.
struct StalledCleanup {
    gateway: common::TestGateway,
    fake: FakeApi,
    key_id: String,
    /// What the cleanup failed with: the catalog, through the proxy, did not answer.
    why: String,
}

async fn stalled_cleanup(marker: &'static str) -> StalledCleanup {
    let gateway = common::TestGateway::start().await;
    let (ctx, fake) = setup(
        &gateway.database_url,
        json!({"gatewayPoolRef": "objects", "deletionPolicy": "Delete"}),
    );
    provision(&ctx, &fake).await;
    let key_id = secret_text(&fake, "AWS_ACCESS_KEY_ID");
    let stall = Stall::start(&gateway.database_url, marker).await;
    fake.insert_primary_pool(&stall.url, HARNESS_MASTER_KEY);
    fake.update(POOL, |p| {
        p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
    });
    let ctx = Arc::new(
        Context::new(ctx.client.clone(), Metrics::default())
            .with_catalog_timeout(SHORT_TIMEOUT)
            .with_cleanup_grace(Duration::ZERO),
    );
    delete(&ctx, &fake).await;
    assert!(stall.stalled(), "the cleanup sent {marker}");
    let (host, port, database, user) = crate::control_plane::database_parts(&stall.url);
    let why = format!(
        "catalog at {host}:{port}/{database} as {user}: the database did not answer within {:?}",
        SHORT_TIMEOUT * 10
    );
    StalledCleanup {
        gateway,
        fake,
        key_id,
        why,
    }
}

/// The catalog stops answering after the cleanup's forced drop, as it revokes the key: the drop,
/// the revocation and the role's deletion are one transaction, so the bucket is still there,
/// with its objects and its key, exactly as the Event says.
#[tokio::test]
async fn a_cleanup_cut_short_before_its_commit_leaves_everything_as_its_event_says() {
    let stalled = stalled_cleanup("pgvs3.delete_access_key").await;
    let sql = stalled.gateway.sql().await;
    assert_eq!(
        bucket_row(&sql, &photos()).await,
        Some(Some(stalled.key_id.clone())),
        "the drop is undone with the rest"
    );
    assert_eq!(access_keys_named(&sql, &stalled.key_id).await, 1);
    assert_eq!(
        stalled.fake.event_note("CleanupSkipped").as_deref(),
        Some(
            format!(
                "catalog not reachable ({}); bucket {} left in place, its access key {} still active: Secret \
                 photos-credentials kept",
                stalled.why,
                photos(),
                stalled.key_id
            )
            .as_str()
        )
    );
    let secret = stalled.fake.get(SECRET).expect("the credentials Secret is kept");
    assert!(secret["metadata"]["annotations"]["pgvs3.io/key-not-revoked"].is_string());
    stalled.gateway.stop().await;
}

/// The catalog stops answering once the cleanup's COMMIT is sent: nobody can know whether it
/// took effect, and the Event says both what it did and what is left if it did not. (Here it did
/// not: the COMMIT never reached the server.)
#[tokio::test]
async fn a_cleanup_whose_commit_is_not_answered_says_it_is_unconfirmed() {
    let stalled = stalled_cleanup("COMMIT").await;
    let sql = stalled.gateway.sql().await;
    assert_eq!(bucket_row(&sql, &photos()).await, Some(Some(stalled.key_id.clone())));
    assert_eq!(
        stalled.fake.event_note("CleanupUnconfirmed").as_deref(),
        Some(
            format!(
                "catalog did not answer the cleanup's COMMIT ({}): either it took effect (bucket {bucket} and its \
                 objects were dropped; its access key was revoked), or nothing changed: bucket {bucket} left in \
                 place, its access key {} still active: Secret photos-credentials kept",
                stalled.why,
                stalled.key_id,
                bucket = photos(),
            )
            .as_str()
        )
    );
    assert!(stalled.fake.get(SECRET).is_some(), "the key may still work");
    stalled.gateway.stop().await;
}

/// The revocation, after the drop, waits for a row another session holds until the server's
/// lock_timeout: the cleanup fails having dropped nothing, says so, and its retry does it all.
#[tokio::test]
async fn a_cleanup_refused_half_way_drops_nothing_and_its_retry_does_it_all() {
    let gateway = common::TestGateway::start().await;
    let (ctx, fake) = setup(
        &gateway.database_url,
        json!({"gatewayPoolRef": "objects", "deletionPolicy": "Delete"}),
    );
    provision(&ctx, &fake).await;
    let key_id = secret_text(&fake, "AWS_ACCESS_KEY_ID");
    let holder = gateway.sql().await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute(
            "SELECT 1 FROM pgvs3.access_keys WHERE access_key = $1 FOR UPDATE",
            &[&key_id],
        )
        .await
        .unwrap();
    let short = Arc::new(Context::new(ctx.client.clone(), Metrics::default()).with_catalog_timeout(SHORT_TIMEOUT));
    fake.update(BUCKET, |b| {
        b["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
    });
    reconcile(&short, &fake).await.unwrap_err();
    let sql = gateway.sql().await;
    assert_eq!(bucket_row(&sql, &photos()).await, Some(Some(key_id.clone())));
    assert_eq!(access_keys_named(&sql, &key_id).await, 1);
    assert_eq!(condition(&fake, "Ready"), ("False".into(), "CleanupFailed".into()));
    let message = fake.get(BUCKET).unwrap()["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()["message"]
        .clone();
    assert_eq!(
        message,
        "catalog: ERROR: canceling statement due to lock timeout (SQLSTATE 55P03)"
    );

    holder.batch_execute("ROLLBACK").await.unwrap();
    delete(&short, &fake).await;
    assert_eq!(bucket_row(&sql, &photos()).await, None);
    assert_eq!(access_keys_named(&sql, &key_id).await, 0);
    assert_eq!(
        fake.event_note("Cleanup").as_deref(),
        Some(
            format!(
                "bucket {} and its objects were dropped; its access key was revoked",
                photos()
            )
            .as_str()
        )
    );
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
        "spec": {"postgres": {"host": "127.0.0.1", "port": 1, "secretRef": "login", "sendPasswordToUnverifiedServer": true}, "masterKeySecretRef": {"name": "master"}},
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
        ("False".into(), "CatalogUnavailable".into())
    );
    // The Secret was written before the catalog was tried, so the key survives the retry.
    assert!(fake.get(SECRET).is_some());
    assert_eq!(fake.requests_to(Method::PATCH, "/secrets/photos-credentials").len(), 1);
}

/// A database whose certificate the pool's CA does not vouch for: the condition says why
/// (unknown CA, naming the Secret the CA came from), not only tokio-postgres's "error
/// performing TLS handshake".
#[tokio::test]
async fn a_refused_database_certificate_is_named_in_the_condition() {
    use common::certs::TestCa;
    let ca = TestCa::new("operator-pg");
    let cluster = common::tls_cluster("operator", &ca.issue("server", "localhost", "DNS:localhost"));
    let (admin, connection) = tokio_postgres::connect(&cluster.url("postgres"), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    for statement in [
        "CREATE ROLE tls LOGIN PASSWORD 'tls-secret'",
        "CREATE DATABASE tls OWNER tls",
    ] {
        admin.batch_execute(statement).await.unwrap();
    }
    let other = std::fs::read_to_string(TestCa::new("operator-pg-other").ca_cert()).unwrap();

    let (client, fake) = FakeApi::start();
    let ctx = Arc::new(Context::new(client, Metrics::default()));
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
        "metadata": {"name": "objects", "namespace": "team"},
        "spec": {
            "postgres": {"host": "localhost", "port": cluster.port, "database": "tls", "secretRef": "login",
                         "sslMode": "verify-full", "caSecretRef": "pg-ca"},
            "masterKeySecretRef": {"name": "master"},
        },
    }));
    for (name, key, value) in [
        ("login", "username", "tls"),
        ("login", "password", "tls-secret"),
        ("master", "masterKey", "k"),
        ("pg-ca", "ca.crt", other.as_str()),
    ] {
        let path = format!("/api/v1/namespaces/team/secrets/{name}");
        if fake.get(&path).is_none() {
            fake.insert(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "team"}, "data": {}}));
        }
        fake.update(&path, |secret| secret["data"][key] = json!(b64(value)));
    }
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "photos", "namespace": "team", "finalizers": ["pgvs3.io/bucket-cleanup"]},
        "spec": {"gatewayPoolRef": "objects"},
    }));
    let err = reconcile(&ctx, &fake).await.unwrap_err().to_string();
    assert!(
        err.contains("unknown CA") && err.contains("Secret pg-ca (ca.crt)"),
        "{err}"
    );
    let conditions = fake.get(BUCKET).unwrap()["status"]["conditions"].clone();
    let ready = conditions
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["reason"], "CatalogUnavailable");
    assert!(ready["message"].as_str().unwrap().contains("unknown CA"), "{ready}");
}

fn bucket_at(name: &str) -> String {
    format!("/apis/pgvs3.io/v1alpha1/namespaces/team/buckets/{name}")
}

#[tokio::test]
async fn the_quota_is_enforced_by_the_gateway_and_follows_the_spec() {
    let gateway = common::TestGateway::start().await;
    let (ctx, fake) = setup(
        &gateway.database_url,
        json!({"gatewayPoolRef": "objects", "quota": {"maxObjects": 1, "maxBytes": 1000000}}),
    );
    provision(&ctx, &fake).await;
    assert_eq!(condition(&fake, "QuotaEnforced"), ("True".into(), "QuotaSet".into()));
    let quota_row = |sql: tokio_postgres::Client| async move {
        sql.query_opt(
            "SELECT q.max_bytes, q.max_objects FROM pgvs3.bucket_quotas q
               JOIN pgvs3.buckets b ON b.id = q.bucket_id WHERE b.name = $1",
            &[&photos()],
        )
        .await
        .unwrap()
        .map(|row| {
            (
                row.get::<_, Option<i64>>("max_bytes"),
                row.get::<_, Option<i64>>("max_objects"),
            )
        })
    };
    assert_eq!(quota_row(gateway.sql().await).await, Some((Some(1_000_000), Some(1))));

    put_with_secret(&gateway, &fake, &photos(), "first").await.unwrap();
    let refused = put_until_accepted(&gateway, &fake, &photos(), "second", |err| {
        !err.contains("XMinioAdminBucketQuotaExceeded")
    })
    .await
    .unwrap_err();
    assert!(refused.contains("XMinioAdminBucketQuotaExceeded"), "{refused}");

    // Lifting the quota in the spec lifts it in the catalog.
    fake.update(BUCKET, |b| {
        b["spec"].as_object_mut().unwrap().remove("quota");
    });
    reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(quota_row(gateway.sql().await).await, None);
    put_with_secret(&gateway, &fake, &photos(), "second").await.unwrap();
    let conditions = fake.get(BUCKET).unwrap()["status"]["conditions"].clone();
    assert!(
        !conditions
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "QuotaEnforced"),
        "no quota, no QuotaEnforced condition: {conditions}"
    );
    gateway.stop().await;
}

#[tokio::test]
async fn a_quota_the_catalog_refuses_is_a_condition_and_nothing_is_written() {
    let gateway = common::TestGateway::start().await;
    // The CRD's schema refuses negative limits; a resource written before it (or with
    // validation off) still must not get a half-provisioned bucket.
    let (ctx, fake) = setup(
        &gateway.database_url,
        json!({"gatewayPoolRef": "objects", "quota": {"maxBytes": -5}}),
    );
    reconcile(&ctx, &fake).await.unwrap();
    reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(condition(&fake, "Ready"), ("False".into(), "QuotaRejected".into()));
    assert_eq!(bucket_row(&gateway.sql().await, &photos()).await, None);
    gateway.stop().await;
}

#[tokio::test]
async fn a_retained_or_marked_bucket_is_adopted_with_its_objects() {
    let gateway = common::TestGateway::start().await;
    let (ctx, fake) = setup(
        &gateway.database_url,
        json!({"gatewayPoolRef": "objects", "bucketName": "shared-data"}),
    );
    provision(&ctx, &fake).await;
    put_with_secret(&gateway, &fake, "shared-data", "old.txt")
        .await
        .unwrap();
    delete(&ctx, &fake).await;
    let sql = gateway.sql().await;
    let custodian = bucket_row(&sql, "shared-data").await.flatten().unwrap();
    assert!(custodian.starts_with("PGVS3R"), "retained for team/photos: {custodian}");

    // The garbage collector takes the old resource's Secret (this fake API server has none);
    // a new resource of the same namespace and name (a new uid, so a new key) adopts it.
    fake.remove("/api/v1/namespaces/team/secrets/photos-credentials");
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "photos", "namespace": "team"},
        "spec": {"gatewayPoolRef": "objects", "bucketName": "shared-data", "deletionPolicy": "Delete"},
    }));
    provision(&ctx, &fake).await;
    assert_eq!(condition(&fake, "Ready"), ("True".into(), "Provisioned".into()));
    assert!(fake.events().contains(&("Normal".to_string(), "Adopted".to_string())));
    let key_id = secret_text(&fake, "AWS_ACCESS_KEY_ID");
    assert_eq!(bucket_row(&sql, "shared-data").await, Some(Some(key_id.clone())));
    let adopter = gateway.client_for(&key_id, &secret_text(&fake, "AWS_SECRET_ACCESS_KEY"));
    let mut old = None;
    for _ in 0..50 {
        if let Ok(object) = adopter.get_object().bucket("shared-data").key("old.txt").send().await {
            old = Some(object.body.collect().await.unwrap().into_bytes());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        old.as_deref(),
        Some(&b"hello"[..]),
        "the adopter reads the retained objects"
    );
    // Adopted means governed: Delete now drops it.
    delete(&ctx, &fake).await;
    assert_eq!(bucket_row(&sql, "shared-data").await, None);

    // A bucket made by hand with the root key is the root's: refused, until an admin marks it
    // adoptable for the namespace.
    gateway.client.create_bucket().bucket("hand-made").send().await.unwrap();
    fake.remove("/api/v1/namespaces/team/secrets/photos-credentials");
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "photos", "namespace": "team"},
        "spec": {"gatewayPoolRef": "objects", "bucketName": "hand-made"},
    }));
    provision(&ctx, &fake).await;
    assert_eq!(condition(&fake, "Ready"), ("False".into(), "BucketNotAdoptable".into()));
    assert_eq!(bucket_row(&sql, "hand-made").await, Some(None));
    let marked = Arc::new(Context::new(fake.client(), Metrics::default()).with_adoptable(&["team/hand-made".into()]));
    reconcile(&marked, &fake).await.unwrap();
    assert_eq!(condition(&fake, "Ready"), ("True".into(), "Provisioned".into()));
    assert_eq!(
        bucket_row(&sql, "hand-made").await,
        Some(Some(secret_text(&fake, "AWS_ACCESS_KEY_ID")))
    );
    gateway.stop().await;
}

/// A Bucket re-applied without status (its predecessor retained the bucket; or its status was
/// lost) finds the bucket it had under the pre-hash default name `<namespace>-<name>` when the
/// catalog says that bucket is its own (its custodian's, its key's); anybody else's bucket of
/// that name is left alone and the hashed name is used.
#[tokio::test]
async fn a_pre_hash_default_name_is_found_again_only_when_it_is_the_buckets_own() {
    let gateway = common::TestGateway::start().await;
    let sql = gateway.sql().await;
    // Before the upgrade: Bucket team/photos got `team-photos`, then was deleted (Retain).
    let (ctx, fake) = setup(
        &gateway.database_url,
        json!({"gatewayPoolRef": "objects", "bucketName": "team-photos"}),
    );
    provision(&ctx, &fake).await;
    put_with_secret(&gateway, &fake, "team-photos", "kept.txt")
        .await
        .unwrap();
    delete(&ctx, &fake).await;
    fake.remove(SECRET);

    // Re-applied from its manifest, which never named the bucket.
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "photos", "namespace": "team"},
        "spec": {"gatewayPoolRef": "objects"},
    }));
    provision(&ctx, &fake).await;
    assert_eq!(condition(&fake, "Ready"), ("True".into(), "Provisioned".into()));
    let status = fake.get(BUCKET).unwrap()["status"].clone();
    assert_eq!(status["bucketName"], "team-photos");
    assert_eq!(
        bucket_row(&sql, "team-photos").await,
        Some(Some(secret_text(&fake, "AWS_ACCESS_KEY_ID"))),
        "adopted with its objects"
    );
    assert_eq!(bucket_row(&sql, &photos()).await, None);
    delete(&ctx, &fake).await;
    fake.remove(SECRET);

    // `team-photos` the root key's now (or another namespace's): not this Bucket's.
    sql.execute("UPDATE pgvs3.buckets SET owner = NULL WHERE name = 'team-photos'", &[])
        .await
        .unwrap();
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "photos", "namespace": "team"},
        "spec": {"gatewayPoolRef": "objects"},
    }));
    provision(&ctx, &fake).await;
    let status = fake.get(BUCKET).unwrap()["status"].clone();
    assert_eq!(status["bucketName"], photos().as_str());
    assert_eq!(bucket_row(&sql, "team-photos").await, Some(None), "left as it was");
    gateway.stop().await;
}

#[tokio::test]
async fn the_resp_keyspace_is_never_adopted_even_when_marked() {
    let gateway = common::TestGateway::start().await;
    let sql = gateway.sql().await;
    sql.execute("SELECT pgvs3.ensure_bucket('resp')", &[]).await.unwrap();
    let (_, fake) = setup(
        &gateway.database_url,
        json!({"gatewayPoolRef": "objects", "bucketName": "resp", "deletionPolicy": "Delete"}),
    );
    let ctx = Arc::new(Context::new(fake.client(), Metrics::default()).with_adoptable(&["team/resp".into()]));
    provision(&ctx, &fake).await;
    assert_eq!(condition(&fake, "Ready"), ("False".into(), "BucketNotAdoptable".into()));
    assert!(
        fake.events()
            .contains(&("Warning".to_string(), "BucketNotAdoptable".to_string()))
    );
    delete(&ctx, &fake).await;
    assert_eq!(
        bucket_row(&sql, "resp").await,
        Some(None),
        "still the root's RESP keyspace"
    );
    gateway.stop().await;
}

#[tokio::test]
async fn a_bucket_of_another_key_or_a_cache_bucket_is_never_taken_over() {
    let gateway = common::TestGateway::start().await;
    let catalog = gateway.gateway.store.catalog();
    catalog
        .put_access_key(&pgvs3_gateway::store::NewAccessKey {
            access_key: "OTHERTEAMKEY0001".into(),
            secret: "other-secret".into(),
            is_root: false,
            read_only: false,
            description: String::new(),
        })
        .await
        .unwrap();
    let other = gateway.client_for("OTHERTEAMKEY0001", "other-secret");
    other.create_bucket().bucket("theirs").send().await.unwrap();
    other
        .put_object()
        .bucket("theirs")
        .key("private.txt")
        .body(ByteStream::from_static(b"theirs"))
        .send()
        .await
        .unwrap();
    let sql = gateway.sql().await;
    sql.execute("SELECT pgvs3.ensure_bucket('a-cache', NULL, 's3w')", &[])
        .await
        .unwrap();

    let (ctx, fake) = setup(
        &gateway.database_url,
        json!({"gatewayPoolRef": "objects", "bucketName": "theirs", "deletionPolicy": "Delete", "quota": {"maxObjects": 0}}),
    );
    provision(&ctx, &fake).await;
    let (status, reason) = condition(&fake, "Ready");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "BucketOwnedElsewhere"));
    let message = fake.get(BUCKET).unwrap()["status"]["conditions"][0]["message"].clone();
    assert!(message.as_str().unwrap().contains("OTHERTEAMKEY0001"), "{message}");
    assert_eq!(bucket_row(&sql, "theirs").await, Some(Some("OTHERTEAMKEY0001".into())));
    let untouched: i64 = sql
        .query_one(
            "SELECT count(*) FROM pgvs3.bucket_quotas q JOIN pgvs3.buckets b ON b.id = q.bucket_id WHERE b.name = 'theirs'",
            &[],
        )
        .await
        .unwrap()
        .get("count");
    assert_eq!(untouched, 0, "no quota lands on a bucket that is not the resource's");
    // Deleting the resource under Delete leaves their bucket and objects alone.
    delete(&ctx, &fake).await;
    let kept = other
        .get_object()
        .bucket("theirs")
        .key("private.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(kept.body.collect().await.unwrap().into_bytes().as_ref(), b"theirs");

    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "cache-name", "namespace": "team"},
        "spec": {"gatewayPoolRef": "objects", "bucketName": "a-cache"},
    }));
    let cache_named: Bucket = fake.typed(&bucket_at("cache-name"));
    bucket::reconcile(Arc::new(cache_named.clone()), ctx.clone())
        .await
        .unwrap();
    let cache_named: Bucket = fake.typed(&bucket_at("cache-name"));
    bucket::reconcile(Arc::new(cache_named), ctx.clone()).await.unwrap();
    assert_eq!(
        fake.condition(&bucket_at("cache-name"), "Ready"),
        ("False".into(), "BucketNotAdoptable".into())
    );
    assert_eq!(
        bucket_row(&sql, "a-cache").await,
        Some(None),
        "the cache bucket stays unowned"
    );
    gateway.stop().await;
}

#[tokio::test]
async fn an_empty_pool_reference_is_invalid_and_never_blocks_deletion() {
    // Admitted before the CRD refused empty references (or with validation off).
    let (client, fake) = FakeApi::start();
    let ctx = Arc::new(Context::new(client, Metrics::default()));
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "photos", "namespace": "team", "finalizers": ["pgvs3.io/bucket-cleanup"]},
        "spec": {"gatewayPoolRef": ""},
    }));
    assert_eq!(
        reconcile(&ctx, &fake).await.unwrap(),
        Action::await_change(),
        "no retries"
    );
    assert_eq!(condition(&fake, "Ready"), ("False".into(), "InvalidSpec".into()));
    assert!(fake.get(SECRET).is_none());
    fake.update(BUCKET, |b| {
        b["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
    });
    reconcile(&ctx, &fake).await.unwrap();
    assert!(fake.get(BUCKET).is_none(), "the finalizer is released");
}
