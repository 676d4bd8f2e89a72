//! OriginCache reconciles: the Kubernetes side against the fake API server; the catalog side
//! against a real PostgreSQL, with a real cache gateway serving the row the operator wrote and a
//! real origin (another gateway on its own database).

use crate::mock;
use pgvs3_testkit as common;

use std::sync::Arc;
use std::time::Duration;

use crate::catalog_timeout::Stall;
use aws_sdk_s3::primitives::ByteStream;
use common::{ROOT_ACCESS_KEY, ROOT_SECRET_KEY, TestGateway};
use kube::runtime::controller::Action;
use mock::{FakeApi, b64};
use pgvs3_operator::context::{Context, Error};
use pgvs3_operator::crd::OriginCache;
use pgvs3_operator::metrics::Metrics;
use pgvs3_operator::origin_cache;
use pgvs3_secret::MasterKey;
use serde_json::{Value, json};

/// The master key the gateway test harness starts gateways with.
const HARNESS_MASTER_KEY: &str = "integration-test-master-key";
const CACHE: &str = "/apis/pgvs3.io/v1alpha1/namespaces/team/origincaches/datasets";
const SECRET: &str = "/api/v1/namespaces/team/secrets/origin";
/// The cache bucket's own credentials, written by the operator.
const CACHE_SECRET: &str = "/api/v1/namespaces/team/secrets/datasets-cache-credentials";
const CACHE_BUCKET: &str = "datasets-cache";
const ORIGIN_BUCKET: &str = "datasets";

/// The OriginCache `datasets` on pool `objects` in front of `endpoint`, with `changes` merged
/// into its spec.
fn cache_resource(endpoint: &str, changes: Value) -> Value {
    let mut spec = json!({
        "gatewayPoolRef": "objects", "bucket": CACHE_BUCKET, "credentialsSecretRef": "origin",
        "origin": {"endpoint": endpoint, "bucket": ORIGIN_BUCKET},
    });
    json_patch::merge(&mut spec, &changes);
    json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "OriginCache",
        "metadata": {"name": "datasets", "namespace": "team"},
        "spec": spec,
    })
}

fn origin_secret(access_key: &str, secret_key: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "origin", "namespace": "team"},
        "data": {"AWS_ACCESS_KEY_ID": b64(access_key), "AWS_SECRET_ACCESS_KEY": b64(secret_key)},
    })
}

fn context(client: kube::Client) -> Arc<Context> {
    Arc::new(Context::new(client, Metrics::default()))
}

async fn reconcile(ctx: &Arc<Context>, fake: &FakeApi) -> Result<Action, Error> {
    let cache: OriginCache = fake.typed(CACHE);
    origin_cache::reconcile(Arc::new(cache), ctx.clone()).await
}

/// The first reconcile adds the finalizer; the next ones do the work.
async fn add_finalizer(ctx: &Arc<Context>, fake: &FakeApi) {
    assert_eq!(reconcile(ctx, fake).await.unwrap(), Action::await_change());
    assert_eq!(
        fake.get(CACHE).unwrap()["metadata"]["finalizers"],
        json!(["pgvs3.io/origincache-cleanup"])
    );
}

fn mark_deleted(fake: &FakeApi) {
    fake.update(CACHE, |c| {
        c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
    });
}

/// The access key and secret in the cache's credentials Secret.
fn cache_credentials(fake: &FakeApi) -> (String, String) {
    use base64::Engine;
    let secret = fake.get(CACHE_SECRET).expect("the cache's credentials Secret");
    let text = |key: &str| {
        let encoded = secret["data"][key].as_str().unwrap_or_else(|| panic!("no {key}"));
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(encoded).unwrap()).unwrap()
    };
    (text("AWS_ACCESS_KEY_ID"), text("AWS_SECRET_ACCESS_KEY"))
}

fn status(fake: &FakeApi) -> Value {
    fake.get(CACHE).unwrap()["status"].clone()
}

#[tokio::test]
async fn waits_for_pool_credentials_and_database_with_conditions() {
    let (client, fake) = FakeApi::start();
    let ctx = context(client);
    fake.insert(cache_resource("https://s3.example", json!({})));
    add_finalizer(&ctx, &fake).await;
    assert_eq!(
        reconcile(&ctx, &fake).await.unwrap(),
        Action::requeue(Duration::from_secs(30))
    );
    assert_eq!(fake.condition(CACHE, "Ready"), ("False".into(), "PoolNotFound".into()));
    assert_eq!(
        fake.condition(CACHE, "Degraded"),
        ("True".into(), "PoolNotFound".into())
    );

    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
        "metadata": {"name": "objects", "namespace": "team"},
        "spec": {"postgres": {"host": "127.0.0.1", "port": 1, "secretRef": "login", "sendPasswordToUnverifiedServer": true}, "masterKeySecretRef": {"name": "master"}},
    }));
    reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(
        fake.condition(CACHE, "Ready"),
        ("False".into(), "CredentialsUnavailable".into())
    );

    for (name, key) in [("login", "username"), ("login", "password"), ("master", "masterKey")] {
        let path = format!("/api/v1/namespaces/team/secrets/{name}");
        if fake.get(&path).is_none() {
            fake.insert(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "team"}}));
        }
        fake.update(&path, |s| s["data"][key] = json!(b64("x")));
    }
    reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(
        fake.condition(CACHE, "Ready"),
        ("False".into(), "SecretNotFound".into())
    );

    fake.insert(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "origin", "namespace": "team"},
        "data": {"AWS_ACCESS_KEY_ID": b64("AKID")},
    }));
    reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(fake.condition(CACHE, "Ready"), ("False".into(), "SecretInvalid".into()));

    // A CA bundle for the origin: it must exist and hold CA certificates the gateways can use
    // (they would refuse it at start) before anything is written.
    fake.update(SECRET, |s| s["data"]["AWS_SECRET_ACCESS_KEY"] = json!(b64("secret")));
    fake.update(CACHE, |c| {
        c["spec"]["origin"]["caBundle"] = json!({"configMapRef": "trust", "key": "bundle.pem"})
    });
    let bundle_refusal = |fake: &FakeApi| {
        assert_eq!(
            fake.condition(CACHE, "Ready"),
            ("False".into(), "CaBundleUnavailable".into())
        );
        let conditions = status(fake)["conditions"].clone();
        let ready = conditions
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone();
        ready["message"].as_str().unwrap().to_string()
    };
    reconcile(&ctx, &fake).await.unwrap();
    assert_eq!(bundle_refusal(&fake), "ConfigMap trust does not exist");
    fake.insert(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trust", "namespace": "team"},
        "data": {"bundle.pem": "not a certificate"},
    }));
    reconcile(&ctx, &fake).await.unwrap();
    let refusal = bundle_refusal(&fake);
    assert!(refusal.starts_with("ConfigMap trust key \"bundle.pem\": "), "{refusal}");
    assert!(
        fake.get(CACHE_SECRET).is_none(),
        "nothing written before the bundle is usable"
    );
    let ca = std::fs::read_to_string(common::certs::TestCa::new("operator-origin").ca_cert()).unwrap();
    fake.update("/api/v1/namespaces/team/configmaps/trust", |m| {
        m["data"]["bundle.pem"] = json!(ca)
    });

    // With everything in place the database itself is tried: a failure is a condition and an
    // error, retried with the object's backoff.
    let err = reconcile(&ctx, &fake).await.unwrap_err();
    assert_eq!(
        fake.condition(CACHE, "Ready"),
        ("False".into(), "DatabaseUnavailable".into())
    );
    assert_eq!(status(&fake)["endpoint"], "http://objects.team.svc:9000");
    let cache = Arc::new(fake.typed::<OriginCache>(CACHE));
    assert_eq!(
        origin_cache::error_policy(cache.clone(), &err, ctx.clone()),
        Action::requeue(Duration::from_secs(2))
    );
    assert_eq!(
        origin_cache::error_policy(cache, &err, ctx.clone()),
        Action::requeue(Duration::from_secs(4))
    );
    assert_eq!(ctx.metrics.failures("OriginCache", "Catalog"), 2);
    assert!(
        fake.events()
            .contains(&("Warning".to_string(), "DatabaseUnavailable".to_string()))
    );

    // Deleted while its pool lives and its database does not answer: the cleanup is retried,
    // and the cache says why it is stuck (as a Bucket does), with a Warning Event.
    mark_deleted(&fake);
    reconcile(&ctx, &fake).await.unwrap_err();
    assert_eq!(fake.condition(CACHE, "Ready"), ("False".into(), "CleanupFailed".into()));
    let ready = status(&fake)["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    let message = ready["message"].as_str().unwrap();
    assert!(message.starts_with("catalog at 127.0.0.1:1/app"), "{message}");
    assert!(
        fake.events()
            .contains(&("Warning".to_string(), "CleanupFailed".to_string()))
    );
    assert!(fake.get(CACHE).is_some(), "the finalizer holds");

    // Its pool being deleted too (the namespace is), the cleanup gives up once the grace
    // passed: the object goes, a Warning Event says what was left.
    fake.update("/apis/pgvs3.io/v1alpha1/namespaces/team/gatewaypools/objects", |p| {
        p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
    });
    reconcile(&ctx, &fake).await.unwrap();
    assert!(fake.get(CACHE).is_none(), "finalizer removed, object gone");
    assert!(
        fake.events()
            .contains(&("Warning".to_string(), "CleanupSkipped".to_string()))
    );
}

#[tokio::test]
async fn specs_the_catalog_cannot_hold_are_reported_not_retried() {
    let (client, fake) = FakeApi::start();
    let ctx = context(client);
    fake.insert(cache_resource("https://s3.example", json!({"ttl": "forever"})));
    add_finalizer(&ctx, &fake).await;
    assert_eq!(
        reconcile(&ctx, &fake).await.unwrap(),
        Action::requeue(Duration::from_secs(300))
    );
    assert_eq!(fake.condition(CACHE, "Ready"), ("False".into(), "InvalidSpec".into()));
}

#[tokio::test]
async fn deleting_without_a_pool_releases_the_finalizer_and_warns() {
    let (client, fake) = FakeApi::start();
    let ctx = context(client);
    fake.insert(cache_resource("https://s3.example", json!({"gatewayPoolRef": "gone"})));
    add_finalizer(&ctx, &fake).await;
    mark_deleted(&fake);
    reconcile(&ctx, &fake).await.unwrap();
    assert!(fake.get(CACHE).is_none(), "finalizer removed, object gone");
    assert!(
        fake.events()
            .contains(&("Warning".to_string(), "CleanupSkipped".to_string()))
    );
}

#[tokio::test]
async fn deleting_after_the_pool_went_revokes_the_cache_key() {
    let setup = Setup::start(json!({})).await;
    create_origin_bucket(&setup.origin).await;
    setup.reconcile().await.unwrap();
    let (key_id, _) = cache_credentials(&setup.fake);
    assert_eq!(setup.access_keys_named(&key_id).await, 1);
    // A namespace's deletion: the pool and its Secrets go alongside the OriginCache.
    setup
        .fake
        .remove("/apis/pgvs3.io/v1alpha1/namespaces/team/gatewaypools/objects");
    setup.fake.remove("/api/v1/namespaces/team/secrets/login");
    mark_deleted(&setup.fake);
    setup.reconcile().await.unwrap();
    assert!(setup.fake.get(CACHE).is_none(), "finalizer removed, object gone");
    assert_eq!(setup.access_keys_named(&key_id).await, 0, "the cache's key is revoked");
    assert!(
        setup.bucket_exists().await,
        "dropping needs the pool: the cache bucket stays"
    );
    assert!(
        setup
            .fake
            .events()
            .contains(&("Warning".to_string(), "CleanupPartial".to_string()))
    );
    setup.stop().await;
}

/// The catalog stops answering after the cleanup's drop, as it revokes the cache's key, while
/// the namespace goes: the drop and the revocation are one transaction, so the cache bucket and
/// its key are still there, as the Event says.
#[tokio::test]
async fn a_cleanup_cut_short_before_its_commit_leaves_everything_as_its_event_says() {
    let setup = Setup::start(json!({})).await;
    setup.reconcile().await.unwrap();
    assert_eq!(setup.fake.condition(CACHE, "Ready").0, "True");
    let (key_id, _) = cache_credentials(&setup.fake);
    let stall = Stall::start(&setup.cache.database_url, "pgvs3.delete_access_key").await;
    setup.fake.insert_primary_pool(&stall.url, HARNESS_MASTER_KEY);
    setup
        .fake
        .update("/apis/pgvs3.io/v1alpha1/namespaces/team/gatewaypools/objects", |p| {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
        });
    let timeout = Duration::from_secs(2);
    let ctx = Arc::new(
        Context::new(setup.ctx.client.clone(), Metrics::default())
            .with_catalog_timeout(timeout)
            .with_cleanup_grace(Duration::ZERO),
    );
    mark_deleted(&setup.fake);
    reconcile(&ctx, &setup.fake).await.unwrap();
    assert!(setup.fake.get(CACHE).is_none(), "finalizer removed, object gone");
    assert!(stall.stalled(), "the cleanup revoked the key");
    assert!(setup.bucket_exists().await, "the drop is undone with the revocation");
    assert_eq!(setup.access_keys_named(&key_id).await, 1);
    let (host, port, database, user) = crate::control_plane::database_parts(&stall.url);
    assert_eq!(
        setup.fake.event_note("CleanupSkipped"),
        Some(format!(
            "catalog not reachable (catalog at {host}:{port}/{database} as {user}: the database did not answer \
             within {:?}); cache bucket {CACHE_BUCKET} left in place, its access key {key_id} still active",
            timeout * 10
        ))
    );
    setup.stop().await;
}

/// An origin gateway, a cache gateway on a database of its own, and the fake API server with
/// the cache gateway's pool, the origin's credentials and an OriginCache in front of the origin
/// with `changes` merged into its spec (after its first reconcile, which adds the finalizer).
struct Setup {
    origin: TestGateway,
    cache: TestGateway,
    fake: FakeApi,
    ctx: Arc<Context>,
}

impl Setup {
    async fn start(changes: Value) -> Setup {
        let origin = TestGateway::start().await;
        let cache = TestGateway::start().await;
        let (client, fake) = FakeApi::start();
        fake.insert_primary_pool(&cache.database_url, HARNESS_MASTER_KEY);
        fake.insert(origin_secret(ROOT_ACCESS_KEY, ROOT_SECRET_KEY));
        fake.insert(cache_resource(&origin.endpoint(), changes));
        let ctx = context(client);
        add_finalizer(&ctx, &fake).await;
        Setup {
            origin,
            cache,
            fake,
            ctx,
        }
    }

    async fn reconcile(&self) -> Result<Action, Error> {
        reconcile(&self.ctx, &self.fake).await
    }

    async fn origin_row(&self) -> Option<OriginRow> {
        let sql = self.cache.sql().await;
        let row = sql
            .query_opt(
                "SELECT b.id, o.endpoint, o.region, o.origin_bucket, o.access_key, o.secret_encrypted, o.path_style,
                        o.mode, o.ttl_seconds, o.negative_ttl_seconds, o.fill_concurrency, o.size_limit_bytes,
                        o.write_back_threshold, o.range_chunk_bytes, o.updated_at
                   FROM pgvs3.origins o JOIN pgvs3.buckets b ON b.id = o.bucket_id WHERE b.name = $1",
                &[&CACHE_BUCKET],
            )
            .await
            .unwrap()?;
        Some(OriginRow {
            bucket_id: row.get("id"),
            endpoint: row.get("endpoint"),
            region: row.get("region"),
            origin_bucket: row.get("origin_bucket"),
            access_key: row.get("access_key"),
            secret_encrypted: row.get("secret_encrypted"),
            path_style: row.get("path_style"),
            mode: row.get("mode"),
            ttl_seconds: row.get("ttl_seconds"),
            negative_ttl_seconds: row.get("negative_ttl_seconds"),
            fill_concurrency: row.get("fill_concurrency"),
            size_limit_bytes: row.get("size_limit_bytes"),
            write_back_threshold: row.get("write_back_threshold"),
            range_chunk_bytes: row.get("range_chunk_bytes"),
            updated_at: row.get("updated_at"),
        })
    }

    async fn access_keys_named(&self, key_id: &str) -> i64 {
        let sql = self.cache.sql().await;
        sql.query_one(
            "SELECT count(*) FROM pgvs3.access_keys WHERE access_key = $1",
            &[&key_id],
        )
        .await
        .unwrap()
        .get("count")
    }

    async fn bucket_exists(&self) -> bool {
        let sql = self.cache.sql().await;
        let rows = sql
            .query("SELECT 1 FROM pgvs3.buckets WHERE name = $1", &[&CACHE_BUCKET])
            .await
            .unwrap();
        !rows.is_empty()
    }

    async fn stop(self) {
        self.cache.stop().await;
        self.origin.stop().await;
    }
}

#[derive(Debug)]
struct OriginRow {
    bucket_id: i64,
    endpoint: String,
    region: String,
    origin_bucket: String,
    access_key: String,
    secret_encrypted: Vec<u8>,
    path_style: bool,
    mode: String,
    ttl_seconds: i32,
    negative_ttl_seconds: i32,
    fill_concurrency: i32,
    size_limit_bytes: Option<i64>,
    write_back_threshold: i64,
    range_chunk_bytes: i32,
    updated_at: std::time::SystemTime,
}

impl OriginRow {
    fn secret(&self) -> String {
        MasterKey::from_text(HARNESS_MASTER_KEY)
            .open(&self.secret_encrypted)
            .unwrap()
    }
}

async fn create_origin_bucket(origin: &TestGateway) {
    origin
        .client
        .create_bucket()
        .bucket(ORIGIN_BUCKET)
        .send()
        .await
        .unwrap();
}

async fn put(client: &aws_sdk_s3::Client, bucket: &str, key: &str, body: &'static [u8]) {
    client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from_static(body))
        .send()
        .await
        .unwrap();
}

async fn get(client: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<Vec<u8>, String> {
    match client.get_object().bucket(bucket).key(key).send().await {
        Ok(output) => Ok(output.body.collect().await.unwrap().to_vec()),
        Err(err) => Err(format!("{:?}", err.into_service_error())),
    }
}

/// Polls (bounded) until `check` holds; the condition is what the test asserts.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..150 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out waiting until {what}");
}

#[tokio::test]
async fn the_row_is_written_served_and_follows_spec_and_secret_changes_until_deleted() {
    let setup = Setup::start(json!({
        "origin": {"region": "eu-west-1"},
        "mode": "WriteThrough", "ttl": "10m", "negativeTtl": "30s", "fillConcurrency": 4,
        "maxBytes": 1000000, "rangeChunkSize": 65536, "writeBackThreshold": 1048576,
    }))
    .await;
    let endpoint = setup.origin.endpoint();
    setup.fake.update(CACHE, |c| {
        c["spec"]["origin"]["endpoint"] = json!(format!("{endpoint}/"))
    });
    create_origin_bucket(&setup.origin).await;
    put(&setup.origin.client, ORIGIN_BUCKET, "hello.txt", b"from the origin").await;

    assert_eq!(
        setup.reconcile().await.unwrap(),
        Action::requeue(Duration::from_secs(300))
    );
    assert_eq!(
        setup.fake.condition(CACHE, "Ready"),
        ("True".into(), "Configured".into())
    );
    assert_eq!(
        setup.fake.condition(CACHE, "Degraded"),
        ("False".into(), "Configured".into())
    );
    let row = setup.origin_row().await.expect("the origin row");
    assert_eq!(row.endpoint, setup.origin.endpoint(), "without the trailing slash");
    assert_eq!(
        (row.region.as_str(), row.origin_bucket.as_str(), row.access_key.as_str()),
        ("eu-west-1", ORIGIN_BUCKET, ROOT_ACCESS_KEY)
    );
    assert_eq!(row.secret(), ROOT_SECRET_KEY, "sealed under the pool's master key");
    assert!(row.path_style);
    assert_eq!(row.mode, "write-through");
    assert_eq!((row.ttl_seconds, row.negative_ttl_seconds), (600, 30));
    assert_eq!(row.fill_concurrency, 4);
    assert_eq!(row.size_limit_bytes, Some(1_000_000));
    assert_eq!(row.write_back_threshold, 1 << 20);
    assert_eq!(row.range_chunk_bytes, 64 << 10);
    let configured = status(&setup.fake);
    assert_eq!(configured["bucketID"], row.bucket_id);
    assert_eq!(configured["observedGeneration"], 1);
    let secret_version = configured["credentialsVersion"].clone();
    assert!(secret_version.is_string());
    let (key_id, secret_key) = cache_credentials(&setup.fake);
    assert_eq!(configured["accessKeyId"], key_id.as_str());
    assert_eq!(configured["secretName"], "datasets-cache-credentials");
    let owner = &setup.fake.get(CACHE_SECRET).unwrap()["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["name"].as_str()),
        (Some("OriginCache"), Some("datasets"))
    );

    // The gateway picks the row up from the catalog and fills from the origin, for the
    // applications that hold the cache's own key.
    let application = setup.cache.client_for(&key_id, &secret_key);
    let mut served = Err(String::new());
    eventually("the cache bucket serves the origin's object", async || {
        served = get(&application, CACHE_BUCKET, "hello.txt").await;
        served.is_ok()
    })
    .await;
    assert_eq!(served.unwrap(), b"from the origin");

    // A resync writes identical settings: nothing changes, not even the sealed secret.
    setup.reconcile().await.unwrap();
    let again = setup.origin_row().await.unwrap();
    assert_eq!(again.updated_at, row.updated_at);
    assert_eq!(again.secret_encrypted, row.secret_encrypted);

    // A spec change updates the row in place.
    setup.fake.update(CACHE, |c| {
        c["spec"]["mode"] = json!("ReadThrough");
        c["spec"]["ttl"] = json!("1h");
        c["spec"]["origin"]["style"] = json!("VirtualHost");
        c["spec"].as_object_mut().unwrap().remove("maxBytes");
        c["metadata"]["generation"] = json!(2);
    });
    setup.reconcile().await.unwrap();
    let changed = setup.origin_row().await.unwrap();
    assert_eq!(changed.bucket_id, row.bucket_id);
    assert_eq!(
        (
            changed.mode.as_str(),
            changed.ttl_seconds,
            changed.path_style,
            changed.size_limit_bytes
        ),
        ("read-through", 3600, false, None)
    );
    assert!(changed.updated_at > row.updated_at);
    assert_eq!(status(&setup.fake)["observedGeneration"], 2);

    // A rotated origin key reaches the catalog.
    setup.fake.update(SECRET, |s| {
        s["data"] = origin_secret("ROTATEDKEY", "rotated-secret")["data"].clone()
    });
    setup.reconcile().await.unwrap();
    let rotated = setup.origin_row().await.unwrap();
    assert_eq!(
        (rotated.access_key.as_str(), rotated.secret().as_str()),
        ("ROTATEDKEY", "rotated-secret")
    );
    assert_ne!(status(&setup.fake)["credentialsVersion"], secret_version);

    mark_deleted(&setup.fake);
    assert_eq!(setup.reconcile().await.unwrap(), Action::await_change());
    assert!(setup.fake.get(CACHE).is_none(), "finalizer removed, object gone");
    assert!(setup.origin_row().await.is_none(), "drop_origin removed the row");
    assert!(!setup.bucket_exists().await, "and the cache bucket");
    assert_eq!(setup.access_keys_named(&key_id).await, 0, "the cache's key is revoked");
    assert!(
        setup
            .fake
            .events()
            .contains(&("Normal".to_string(), "Cleanup".to_string()))
    );
    assert_eq!(
        get(&setup.origin.client, ORIGIN_BUCKET, "hello.txt").await.unwrap(),
        b"from the origin",
        "the origin is left alone"
    );
    setup.stop().await;
}

#[tokio::test]
async fn a_bucket_that_is_not_ours_is_never_taken_over_or_dropped() {
    let setup = Setup::start(json!({})).await;
    setup
        .cache
        .client
        .create_bucket()
        .bucket(CACHE_BUCKET)
        .send()
        .await
        .unwrap();
    put(&setup.cache.client, CACHE_BUCKET, "mine.txt", b"not a cache").await;

    assert_eq!(
        setup.reconcile().await.unwrap(),
        Action::requeue(Duration::from_secs(30))
    );
    assert_eq!(
        setup.fake.condition(CACHE, "Ready"),
        ("False".into(), "BucketOwnedElsewhere".into())
    );
    assert_eq!(setup.fake.condition(CACHE, "Degraded").0, "True");
    assert!(setup.origin_row().await.is_none());
    let (key_id, _) = cache_credentials(&setup.fake);
    assert_eq!(
        setup.access_keys_named(&key_id).await,
        0,
        "the transaction was rolled back"
    );

    mark_deleted(&setup.fake);
    setup.reconcile().await.unwrap();
    assert!(setup.fake.get(CACHE).is_none());
    assert_eq!(
        get(&setup.cache.client, CACHE_BUCKET, "mine.txt").await.unwrap(),
        b"not a cache",
        "deleting the OriginCache leaves the other bucket alone"
    );
    setup.stop().await;
}

#[tokio::test]
async fn settings_the_catalog_refuses_leave_nothing_behind() {
    // The CRD schema would refuse it; an API server without validation would not.
    let setup = Setup::start(json!({"fillConcurrency": 0})).await;
    assert_eq!(
        setup.reconcile().await.unwrap(),
        Action::requeue(Duration::from_secs(30))
    );
    let (status, reason) = setup.fake.condition(CACHE, "Ready");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "OriginRejected"));
    assert!(!setup.bucket_exists().await, "no cache bucket without its origin");
    let (key_id, _) = cache_credentials(&setup.fake);
    assert_eq!(setup.access_keys_named(&key_id).await, 0);

    // Fixing the spec configures the cache.
    setup.fake.update(CACHE, |c| c["spec"]["fillConcurrency"] = json!(8));
    setup.reconcile().await.unwrap();
    assert_eq!(
        setup.fake.condition(CACHE, "Ready"),
        ("True".into(), "Configured".into())
    );
    assert_eq!(setup.origin_row().await.unwrap().fill_concurrency, 8);
    setup.stop().await;
}

#[tokio::test]
async fn pending_write_backs_hold_the_finalizer_until_they_reach_the_origin() {
    // The origin bucket does not exist yet, so the gateway's uploads fail and stay pending.
    let setup = Setup::start(json!({"mode": "WriteBack", "writeBackThreshold": 1})).await;
    setup.reconcile().await.unwrap();
    assert_eq!(setup.fake.condition(CACHE, "Ready").0, "True");
    let mut acknowledged = Err(String::new());
    eventually("the cache bucket takes a write-back PUT", async || {
        acknowledged = setup
            .cache
            .client
            .put_object()
            .bucket(CACHE_BUCKET)
            .key("late.txt")
            .body(ByteStream::from_static(b"written back"))
            .send()
            .await
            .map(|_| ())
            .map_err(|err| format!("{:?}", err.into_service_error()));
        acknowledged.is_ok()
    })
    .await;

    mark_deleted(&setup.fake);
    let err = setup.reconcile().await.unwrap_err();
    assert_eq!(err.reason(), "PendingWriteBack");
    assert_eq!(
        setup.fake.condition(CACHE, "Ready"),
        ("False".into(), "PendingWriteBack".into())
    );
    assert_eq!(setup.fake.condition(CACHE, "Progressing").0, "True");
    assert_eq!(
        setup.fake.get(CACHE).unwrap()["metadata"]["finalizers"],
        json!(["pgvs3.io/origincache-cleanup"]),
        "the finalizer stays while the body exists only in the cache"
    );
    let cache = Arc::new(setup.fake.typed::<OriginCache>(CACHE));
    assert_eq!(
        origin_cache::error_policy(cache, &err, setup.ctx.clone()),
        Action::requeue(Duration::from_secs(2))
    );
    assert!(setup.origin_row().await.is_some());

    // Once the origin takes the upload, the retried drop goes through.
    create_origin_bucket(&setup.origin).await;
    eventually("the drop goes through", async || match setup.reconcile().await {
        Ok(_) => true,
        Err(err) => {
            assert_eq!(err.reason(), "PendingWriteBack", "{err}");
            false
        }
    })
    .await;
    assert!(setup.fake.get(CACHE).is_none());
    assert!(setup.origin_row().await.is_none());
    assert_eq!(
        get(&setup.origin.client, ORIGIN_BUCKET, "late.txt").await.unwrap(),
        b"written back",
        "the body reached the origin before the cache was dropped"
    );
    setup.stop().await;
}
