//! The operator process wired up against the fake API server: the controllers' watches and
//! owned kinds, reconciles driven by watch events (a referenced Secret changing, an owned child
//! deleted), leader election through a Lease with two replicas and a takeover, a replica that
//! loses its Lease exiting, the health and metrics endpoints, and graceful shutdown releasing
//! the Lease.

mod mock;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use mock::{FakeApi, b64};
use pgvs3_operator::gateway_pool::build::CHECKSUM_ANNOTATION;
use pgvs3_operator::run::{RunArgs, run_on};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/team/deployments/objects";
const CREDENTIALS: &str = "/api/v1/namespaces/team/secrets/db-app";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/pgvs3-system/leases/pgvs3-operator";

/// Every kind the controllers list and watch, as cluster-wide collections.
const WATCHED: [&str; 9] = [
    "/apis/pgvs3.io/v1alpha1/gatewaypools",
    "/apis/pgvs3.io/v1alpha1/buckets",
    "/apis/pgvs3.io/v1alpha1/origincaches",
    "/apis/apps/v1/deployments",
    "/api/v1/services",
    "/api/v1/configmaps",
    "/api/v1/secrets",
    "/apis/policy/v1/poddisruptionbudgets",
    "/apis/autoscaling/v2/horizontalpodautoscalers",
];

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

fn checksum(fake: &FakeApi) -> Option<String> {
    let deployment: Deployment = serde_json::from_value(fake.get(DEPLOYMENT)?).unwrap();
    deployment
        .spec?
        .template
        .metadata?
        .annotations?
        .get(CHECKSUM_ANNOTATION)
        .cloned()
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
    // The pool is reconciled by the controller, not by the test.
    eventually("the pool's Deployment", async || fake.get(DEPLOYMENT).is_some()).await;
    let first = checksum(&fake).unwrap();

    // A referenced Secret changes: the pool that uses it is reconciled and its pods roll.
    fake.update(CREDENTIALS, |secret| {
        secret["data"]["password"] = json!(b64("rotated-password"))
    });
    eventually("a new checksum", async || checksum(&fake).is_some_and(|c| c != first)).await;

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
async fn a_leader_that_loses_its_lease_exits_with_an_error() {
    let fake = fake_with_pool();
    let replica = Replica::start(&fake, "replica-a", args(&[])).await;
    eventually("leadership", async || replica.readiness().await == "leading\n").await;
    // Another replica holds the Lease now (say the leader was partitioned away too long).
    fake.update(LEASE, |lease| {
        lease["spec"]["holderIdentity"] = json!("replica-z");
        lease["spec"]["renewTime"] = json!(k8s_openapi::jiff::Timestamp::now().to_string());
        lease["spec"]["leaseDurationSeconds"] = json!(60);
    });
    let ended = tokio::time::timeout(Duration::from_secs(20), replica.task)
        .await
        .expect("the replica exits")
        .unwrap();
    assert_eq!(ended.unwrap_err().to_string(), "lost leadership");
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
