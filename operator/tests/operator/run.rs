//! The operator process wired up against the fake API server: the controllers' watches and
//! owned kinds, reconciles driven by watch events (an owned child deleted), leader election through a Lease with two replicas and a takeover, a replica that
//! loses its Lease exiting, the health and metrics endpoints, and graceful shutdown releasing
//! the Lease.

use crate::mock;

use std::time::Duration;

use http::Method;
use mock::{FakeApi, b64};
use pgvs3_operator::run::{RunArgs, run_on};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/team/deployments/objects";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/pgvs3-system/leases/pgvs3-operator";

/// Every kind the controllers list and watch, as cluster-wide collections.
const WATCHED: [&str; 10] = [
    "/apis/pgvs3.io/v1alpha1/gatewaypools",
    "/apis/pgvs3.io/v1alpha1/buckets",
    "/apis/pgvs3.io/v1alpha1/origincaches",
    "/apis/apps/v1/deployments",
    "/api/v1/services",
    "/api/v1/configmaps",
    "/api/v1/secrets",
    "/api/v1/serviceaccounts",
    "/apis/policy/v1/poddisruptionbudgets",
    "/apis/autoscaling/v2/horizontalpodautoscalers",
];

/// A CA certificate standing for CloudNativePG's `db-ca` (the database is unreachable here).
const FIXTURE_CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIUbFxdJEmKIafYQqJF4wSV10NNLxkwCgYIKoZIzj0EAwIw\nEDEOMAwGA1UEAwwFZGItY2EwIBcNMjYxMjAxMTIyNTQyWhgPMjEyNjExMDcxMjI1\nNDJaMBAxDjAMBgNVBAMMBWRiLWNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\nvyS/ec4bFgInCgBJMyKzknwuKDQmebO7L6R/AV53uUBGPepJp8laUNIg6kocIap/\npBpmL4dw+Y1kBa6A3ni3gKNTMFEwHQYDVR0OBBYEFHynK28lcUKol7omTaL+YSyu\nVXdhMB8GA1UdIwQYMBaAFHynK28lcUKol7omTaL+YSyuVXdhMA8GA1UdEwEB/wQF\nMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgc7KI3uPl8PUgkh7U7DlMEYpUOXMXgmRi\njZX+osbh4h8CIQDaV93isphKlasIL6liDHmIKJgbztzjoTfFlmMHv/Yqjg==\n-----END CERTIFICATE-----\n";

/// A Primary pool on CloudNativePG cluster `db` with its Services and credentials.
fn fake_with_pool() -> FakeApi {
    let (_, fake) = FakeApi::start();
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
        "metadata": {"name": "objects", "namespace": "team"},
        "spec": {"role": "Primary", "postgres": {"clusterName": "db"}},
    }));
    fake.insert(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-app", "namespace": "team"},
        "data": {"username": b64("app"), "password": b64("first-password")},
    }));
    // CloudNativePG's CA, which the pool verifies the database against by default.
    fake.insert(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-ca", "namespace": "team"},
        "data": {"ca.crt": b64(FIXTURE_CA)},
    }));
    for service in ["db-rw", "db-ro"] {
        fake.insert(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": service, "namespace": "team"}}));
    }
    fake
}

fn args(extra: &[&str]) -> RunArgs {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }
    let mut argv = vec![
        "pgvs3-operator",
        "--lease-namespace",
        "pgvs3-system",
        "--lease-duration",
        "3",
    ];
    argv.extend_from_slice(extra);
    Cli::parse_from(argv).run
}

/// One operator replica: its health port, the trigger of its graceful shutdown, its task.
struct Replica {
    port: u16,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Replica {
    async fn start(fake: &FakeApi, identity: &str, args: RunArgs) -> Replica {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stop, stopped) = oneshot::channel::<()>();
        let client = fake.client();
        let identity = identity.to_string();
        let task = tokio::spawn(async move {
            run_on(client, listener, identity, &args, async {
                let _ = stopped.await;
            })
            .await
        });
        Replica {
            port,
            stop: Some(stop),
            task,
        }
    }

    async fn get(&self, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: operator\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    async fn readiness(&self) -> String {
        self.get("/readyz")
            .await
            .rsplit("\r\n\r\n")
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// Graceful shutdown; returns how the replica ended.
    async fn stop(mut self) -> anyhow::Result<()> {
        self.stop.take().unwrap().send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the replica stops promptly")
            .unwrap()
    }
}

/// Polls `check` every 50 ms for up to 20 s; the condition is what the test asserts.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..400 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn lease_holder(fake: &FakeApi) -> Option<String> {
    fake.get(LEASE)?["spec"]["holderIdentity"].as_str().map(str::to_string)
}

#[tokio::test]
async fn the_leader_watches_its_kinds_reconciles_on_events_and_releases_its_lease_on_shutdown() {
    let fake = fake_with_pool();
    let replica = Replica::start(&fake, "replica-a", args(&[])).await;

    eventually("leadership", async || replica.readiness().await == "leading\n").await;
    assert_eq!(lease_holder(&fake).as_deref(), Some("replica-a"));
    for collection in WATCHED {
        eventually(collection, async || fake.watched(collection)).await;
    }
    // The pool is reconciled by the controller, not by the test. (A referenced Secret's change
    // reconciling its pool is apiserver.rs's: this fake ignores label selectors.)
    eventually("the pool's Deployment", async || fake.get(DEPLOYMENT).is_some()).await;

    // An owned child is deleted: the owner is reconciled and the child comes back.
    fake.remove(DEPLOYMENT);
    eventually("the Deployment re-created", async || fake.get(DEPLOYMENT).is_some()).await;

    // A new Bucket is reconciled by the Bucket controller (its pool does not exist).
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "photos", "namespace": "team"},
        "spec": {"gatewayPoolRef": "missing"},
    }));
    let bucket = "/apis/pgvs3.io/v1alpha1/namespaces/team/buckets/photos";
    eventually("the Bucket's status", async || {
        fake.get(bucket).is_some_and(|b| !b["status"]["conditions"].is_null())
    })
    .await;
    assert_eq!(fake.condition(bucket, "Ready"), ("False".into(), "PoolNotFound".into()));

    let metrics = replica.get("/metrics").await;
    for kind in ["GatewayPool", "Bucket"] {
        let line = format!("pgvs3_operator_reconciles_total{{kind=\"{kind}\"}} ");
        let count: f64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&line))
            .unwrap_or_else(|| panic!("no {line} in {metrics}"))
            .parse()
            .unwrap();
        assert!(count >= 1.0, "{metrics}");
    }
    assert!(replica.get("/healthz").await.starts_with("HTTP/1.1 200"));

    replica.stop().await.unwrap();
    assert_eq!(lease_holder(&fake), None, "the Lease is released for the next replica");
}

#[tokio::test]
async fn a_second_replica_stands_by_until_the_leader_stops_then_takes_over() {
    let fake = fake_with_pool();
    let first = Replica::start(&fake, "replica-a", args(&[])).await;
    eventually("first leads", async || first.readiness().await == "leading\n").await;
    let second = Replica::start(&fake, "replica-b", args(&[])).await;
    assert_eq!(second.readiness().await, "standing by\n");
    let metrics = second.get("/metrics").await;
    assert!(
        !metrics.contains("pgvs3_operator_reconciles_total{"),
        "a replica standing by reconciles nothing: {metrics}"
    );
    eventually("the first replica's Deployment", async || {
        fake.get(DEPLOYMENT).is_some()
    })
    .await;
    assert_eq!(lease_holder(&fake).as_deref(), Some("replica-a"));

    first.stop().await.unwrap();
    eventually("second leads", async || second.readiness().await == "leading\n").await;
    assert_eq!(lease_holder(&fake).as_deref(), Some("replica-b"));
    fake.remove(DEPLOYMENT);
    eventually("the new leader reconciles", async || fake.get(DEPLOYMENT).is_some()).await;
    second.stop().await.unwrap();
}

#[tokio::test]
async fn a_leader_whose_lease_is_taken_stops_leading_and_says_so() {
    let fake = fake_with_pool();
    let replica = Replica::start(&fake, "replica-a", args(&[])).await;
    eventually("leadership", async || replica.readiness().await == "leading\n").await;
    // Another replica holds the Lease now (say the leader was partitioned away too long).
    fake.update(LEASE, |lease| {
        lease["spec"]["holderIdentity"] = json!("replica-z");
        lease["spec"]["renewTime"] = json!(k8s_openapi::jiff::Timestamp::now().to_string());
        lease["spec"]["leaseDurationSeconds"] = json!(60);
    });
    eventually("the replica stops leading", async || {
        replica.readiness().await == "standing by: stopped leading (another replica holds the lease)\n"
    })
    .await;
    assert_eq!(lease_holder(&fake).as_deref(), Some("replica-z"));
    replica.stop().await.unwrap();
}

#[tokio::test]
async fn one_namespace_and_no_election_watch_only_that_namespace_without_a_lease() {
    let fake = fake_with_pool();
    let replica = Replica::start(
        &fake,
        "solo",
        args(&["--watch-namespace", "team", "--no-leader-election"]),
    )
    .await;
    eventually("ready", async || replica.readiness().await == "leading\n").await;
    for collection in WATCHED {
        let (base, plural) = collection.rsplit_once('/').unwrap();
        let namespaced = format!("{base}/namespaces/team/{plural}");
        eventually(&namespaced, async || fake.watched(&namespaced)).await;
        assert!(!fake.watched(collection), "{collection} is not watched cluster-wide");
    }
    eventually("the Deployment", async || fake.get(DEPLOYMENT).is_some()).await;
    assert!(fake.get(LEASE).is_none(), "no election, no Lease");
    replica.stop().await.unwrap();
}

/// The Services (CloudNativePG's), ServiceAccounts and Namespaces the operator cannot select
/// by label are listed and watched as metadata only (`PartialObjectMetadata`): their specs
/// and statuses never reach it.
#[tokio::test]
async fn objects_it_cannot_select_are_watched_as_metadata_only() {
    let fake = fake_with_pool();
    let replica = Replica::start(&fake, "replica-a", args(&[])).await;
    for collection in ["/api/v1/services", "/api/v1/serviceaccounts", "/api/v1/namespaces"] {
        eventually(collection, async || fake.watched(collection)).await;
        let unselected: Vec<_> = fake
            .requests()
            .into_iter()
            .filter(|r| r.method == Method::GET && r.path == collection && !r.query.contains("labelSelector"))
            .collect();
        assert!(!unselected.is_empty(), "{collection}");
        for request in unselected {
            assert!(
                request.accept.contains("as=PartialObjectMetadata"),
                "{collection}?{}: Accept {:?}",
                request.query,
                request.accept
            );
        }
    }
    replica.stop().await.unwrap();
}

/// Several namespaces (the chart's `watchNamespaces`): each watched on its own, nothing
/// cluster-wide, and a pool in each reconciled.
#[tokio::test]
async fn a_list_of_namespaces_is_watched_namespace_by_namespace() {
    let fake = fake_with_pool();
    fake.insert(json!({
        "apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
        "metadata": {"name": "objects", "namespace": "other"},
        "spec": {"role": "Primary", "postgres": {"host": "db.other", "secretRef": "login",
                 "sendPasswordToUnverifiedServer": true}},
    }));
    fake.insert(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "login", "namespace": "other"},
        "data": {"username": b64("app"), "password": b64("other-password")},
    }));
    let replica = Replica::start(
        &fake,
        "solo",
        args(&["--watch-namespace", "team,other", "--no-leader-election"]),
    )
    .await;
    for collection in WATCHED {
        let (base, plural) = collection.rsplit_once('/').unwrap();
        for namespace in ["team", "other"] {
            let namespaced = format!("{base}/namespaces/{namespace}/{plural}");
            eventually(&namespaced, async || fake.watched(&namespaced)).await;
        }
        assert!(!fake.watched(collection), "{collection} is not watched cluster-wide");
    }
    eventually("both Deployments", async || {
        fake.get(DEPLOYMENT).is_some() && fake.get("/apis/apps/v1/namespaces/other/deployments/objects").is_some()
    })
    .await;
    replica.stop().await.unwrap();
}

/// One permission a request needs: API group, resource (with `/subresource`), verb.
type Permission = (String, String, String);

/// The permission the recorded request needed, and a second one when a server-side apply may
/// create the object (`create` as well as `patch`). API discovery (`/apis/<group>/<version>`)
/// needs none: the default `system:discovery` role lets every authenticated client read it.
fn permissions(request: &mock::Recorded) -> Vec<Permission> {
    let segments: Vec<&str> = request.path.trim_start_matches('/').split('/').collect();
    if segments[0] == "apis" && segments.len() == 3 {
        return Vec::new();
    }
    if !matches!(segments[0], "api" | "apis") {
        // A URL that is no resource (the service-account issuer's discovery and keys).
        assert_eq!(request.method, "GET", "{}", request.path);
        return vec![(NON_RESOURCE.to_string(), request.path.clone(), "get".to_string())];
    }
    let (group, rest) = match segments[0] {
        "api" => ("", &segments[2..]),
        _ => (segments[1], &segments[3..]),
    };
    let rest = match rest {
        ["namespaces", _, rest @ ..] => rest,
        rest => rest,
    };
    let (resource, named) = match rest {
        [plural] => (plural.to_string(), false),
        [plural, _] => (plural.to_string(), true),
        [plural, _, sub] => (format!("{plural}/{sub}"), true),
        other => panic!("unexpected path {other:?}"),
    };
    let verb = match (request.method.as_str(), named) {
        ("GET", false) if request.query.contains("watch=true") => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", _) => "delete",
        (method, _) => panic!("unexpected method {method}"),
    };
    let mut needed = vec![(group.to_string(), resource.clone(), verb.to_string())];
    let applies = verb == "patch" && request.query.contains("force=true") && !resource.contains('/');
    if applies {
        needed.push((group.to_string(), resource, "create".to_string()));
    }
    needed
}

/// The "API group" of a permission on a URL that is no resource (`nonResourceURLs`).
const NON_RESOURCE: &str = "nonResourceURLs";

/// The rules of the chart's ClusterRoles and leader-election Role, read from the template
/// (its Helm directives only touch names and labels, so dropping those lines leaves the rules).
fn chart_rules() -> Vec<Permission> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/pgvs3-operator/templates/rbac.yaml"
    );
    let text: String = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|line| !line.contains("{{"))
        .map(|line| format!("{line}\n"))
        .collect();
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
    let mut granted = Vec::new();
    let strings = |value: &serde_json::Value| -> Vec<String> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    for document in documents.iter().filter(|d| d.get("rules").is_some()) {
        for rule in document["rules"].as_array().unwrap() {
            if let Some(urls) = rule.get("nonResourceURLs") {
                for url in strings(urls) {
                    for verb in strings(&rule["verbs"]) {
                        granted.push((NON_RESOURCE.to_string(), url.clone(), verb));
                    }
                }
                continue;
            }
            for group in rule["apiGroups"].as_array().unwrap() {
                for resource in rule["resources"].as_array().unwrap() {
                    for verb in rule["verbs"].as_array().unwrap() {
                        granted.push((
                            group.as_str().unwrap().to_string(),
                            resource.as_str().unwrap().to_string(),
                            verb.as_str().unwrap().to_string(),
                        ));
                    }
                }
            }
        }
    }
    granted
}

/// Grants no request in the scenario below makes, each for a reason outside the requests:
/// under `OwnerReferencesPermissionEnforcement`, setting an owner reference with
/// `blockOwnerDeletion` needs `update` on the owner's finalizers and changing an existing
/// child's references needs `delete` on the child (apiserver.rs re-adopts orphans with
/// that plugin on); kube's event recorder patches an Event that repeats; a Bucket's workload
/// identity reads its ServiceAccounts only once its bucket is in the catalog, which is
/// unreachable here (apiserver_identity.rs makes those requests).
const GRANTED_BEYOND_REQUESTS: [(&str, &str, &str); 11] = [
    ("", "serviceaccounts", "get"),
    ("pgvs3.io", "gatewaypools/finalizers", "update"),
    ("pgvs3.io", "buckets/finalizers", "update"),
    ("pgvs3.io", "origincaches/finalizers", "update"),
    ("", "secrets", "delete"),
    ("", "services", "delete"),
    ("", "configmaps", "delete"),
    ("apps", "deployments", "delete"),
    ("policy", "poddisruptionbudgets", "delete"),
    ("monitoring.coreos.com", "servicemonitors", "delete"),
    ("events.k8s.io", "events", "patch"),
];

#[tokio::test]
async fn the_chart_grants_exactly_the_verbs_the_operator_uses() {
    let fake = fake_with_pool();
    // Every optional child: an autoscaled pool, and the Prometheus operator's CRD present.
    fake.update("/apis/pgvs3.io/v1alpha1/namespaces/team/gatewaypools/objects", |pool| {
        pool["spec"]["autoscaling"] = json!({"minReplicas": 2, "maxReplicas": 4});
    });
    fake.insert(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    }));
    fake.insert(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "origin", "namespace": "team"},
        "data": {"AWS_ACCESS_KEY_ID": b64("AKIA"), "AWS_SECRET_ACCESS_KEY": b64("secret")},
    }));
    // The API server's service-account issuer, which the operator publishes into catalogs.
    fake.serve(
        "/.well-known/openid-configuration",
        json!({"issuer": "https://kubernetes.default.svc", "jwks_uri": "https://kubernetes.default.svc/openid/v1/jwks"}),
    );
    fake.serve(
        "/openid/v1/jwks",
        json!({"keys": [{"kty": "RSA", "kid": "a", "n": "AQAB", "e": "AQAB"}]}),
    );
    let replica = Replica::start(&fake, "replica-a", args(&[])).await;
    eventually("the issuer's keys read", async || {
        fake.requests().iter().any(|request| request.path == "/openid/v1/jwks")
    })
    .await;
    eventually("the ServiceMonitor", async || {
        fake.get("/apis/monitoring.coreos.com/v1/namespaces/team/servicemonitors/objects")
            .is_some()
    })
    .await;
    let hpa = "/apis/autoscaling/v2/namespaces/team/horizontalpodautoscalers/objects";
    eventually("the HPA", async || fake.get(hpa).is_some()).await;
    fake.update("/apis/pgvs3.io/v1alpha1/namespaces/team/gatewaypools/objects", |pool| {
        pool["spec"].as_object_mut().unwrap().remove("autoscaling");
    });
    eventually("the HPA removed", async || fake.get(hpa).is_none()).await;
    // A Bucket and an OriginCache on the pool (their database is unreachable here, so they
    // stop at the catalog after writing their Secrets), and one of each without a pool, deleted.
    // The OriginCaches' origin has a CA bundle in a ConfigMap (read by them and by the pool).
    fake.insert(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "origin-ca", "namespace": "team"},
        "data": {"ca.crt": FIXTURE_CA},
    }));
    // Their credentials Secrets were orphaned (`--cascade=orphan`): adopting them reads the
    // resource first.
    for (name, label) in [
        ("photos-credentials", "bucket"),
        ("datasets-cache-credentials", "origincache"),
    ] {
        let owner = name.trim_end_matches("-credentials").trim_end_matches("-cache");
        fake.insert(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "team", "labels": {
                "app.kubernetes.io/managed-by": "pgvs3-operator", format!("pgvs3.io/{label}"): owner}},
        }));
    }
    for (kind, plural, name, pool) in [
        ("Bucket", "buckets", "photos", "objects"),
        ("OriginCache", "origincaches", "datasets", "objects"),
        ("Bucket", "buckets", "orphan", "missing"),
        ("OriginCache", "origincaches", "orphan-cache", "missing"),
    ] {
        fake.insert(json!({
            "apiVersion": "pgvs3.io/v1alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"gatewayPoolRef": pool, "bucket": "cache-bucket", "credentialsSecretRef": "origin",
                     "origin": {"endpoint": "http://origin.example", "bucket": "remote",
                                "caBundle": {"configMapRef": "origin-ca"}}},
        }));
        let path = format!("/apis/pgvs3.io/v1alpha1/namespaces/team/{plural}/{name}");
        eventually(&format!("{name}'s status"), async || {
            fake.get(&path).is_some_and(|o| !o["status"]["conditions"].is_null())
        })
        .await;
    }
    for credentials in ["photos-credentials", "datasets-cache-credentials"] {
        let path = format!("/api/v1/namespaces/team/secrets/{credentials}");
        eventually(&path, async || fake.get(&path).is_some()).await;
    }
    for (plural, name) in [("buckets", "orphan"), ("origincaches", "orphan-cache")] {
        let path = format!("/apis/pgvs3.io/v1alpha1/namespaces/team/{plural}/{name}");
        fake.update(&path, |o| {
            o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
        });
        eventually(&format!("{name} gone"), async || fake.get(&path).is_none()).await;
    }
    replica.stop().await.unwrap();

    let granted = chart_rules();
    let mut used: Vec<Permission> = fake.requests().iter().flat_map(permissions).collect();
    used.sort();
    used.dedup();
    let missing: Vec<_> = used.iter().filter(|p| !granted.contains(p)).collect();
    assert!(missing.is_empty(), "the chart does not grant {missing:?}");
    let beyond: Vec<Permission> = GRANTED_BEYOND_REQUESTS
        .iter()
        .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
        .collect();
    let unused: Vec<_> = granted
        .iter()
        .filter(|p| !used.contains(p) && !beyond.contains(p))
        .collect();
    assert!(
        unused.is_empty(),
        "the chart grants verbs the operator never uses: {unused:?}"
    );
}
