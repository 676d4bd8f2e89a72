//! The kind end-to-end suite: a real cluster from `kind/up.sh` (PostgreSQL primary + standby,
//! the operator chart, a Primary and a Standby GatewayPool), driven with kubectl and real clients.
//!
//! Every test is `#[ignore]`d because these machines have no Docker or kind; a plain
//! `cargo test` lists them as ignored rather than passing them. To run:
//!
//! ```text
//! kind/up.sh
//! PGVS3_E2E_KIND=1 cargo test -p pgvs3-e2e --test e2e -- --ignored kind_fleet:: --test-threads 1
//! ```

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use serde_json::Value;

const NAMESPACE: &str = "pgvs3-demo";

fn require_kind() {
    assert_eq!(
        std::env::var("PGVS3_E2E_KIND").as_deref(),
        Ok("1"),
        "set PGVS3_E2E_KIND=1 after kind/up.sh; these tests drive a real cluster"
    );
}

fn kubectl(args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .args(["-n", NAMESPACE])
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn kubectl_apply(manifest: &str) {
    let mut child = Command::new("kubectl")
        .args(["-n", NAMESPACE, "apply", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(manifest.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success(), "kubectl apply failed:\n{manifest}");
}

fn get_json(kind_name: &str) -> Option<Value> {
    let output = Command::new("kubectl")
        .args(["-n", NAMESPACE, "get", kind_name, "-o", "json"])
        .output()
        .expect("kubectl runs");
    output
        .status
        .success()
        .then(|| serde_json::from_slice(&output.stdout).unwrap())
}

/// Polls `check` until it returns Some, for at most `limit`.
fn eventually<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_secs(2));
    }
}

fn ready(object: &Value) -> bool {
    object["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

fn secret_value(secret: &str, key: &str) -> String {
    use base64::Engine;
    let encoded = kubectl(&["get", "secret", secret, "-o", &format!("jsonpath={{.data.{key}}}")]);
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .unwrap(),
    )
    .unwrap()
}

/// `kubectl port-forward` to a Service; killed on drop.
struct PortForward {
    child: Child,
    port: u16,
}

impl PortForward {
    fn service(service: &str, remote: u16) -> PortForward {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("kubectl")
            .args([
                "-n",
                NAMESPACE,
                "port-forward",
                &format!("svc/{service}"),
                &format!("{port}:{remote}"),
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("kubectl port-forward");
        eventually("port-forward", Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        PortForward { child, port }
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn s3(port: u16, secret: &str) -> Client {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version_latest()
        .region(Region::new(secret_value(secret, "AWS_REGION")))
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .credentials_provider(Credentials::new(
            secret_value(secret, "AWS_ACCESS_KEY_ID"),
            secret_value(secret, "AWS_SECRET_ACCESS_KEY"),
            None,
            None,
            "kind",
        ))
        .force_path_style(true)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(config)
}

/// A Bucket on the Primary pool; `extra` is more of its spec in YAML flow style (`quota: {...}`).
fn bucket_manifest(name: &str, policy: &str, extra: &str) -> String {
    format!(
        "apiVersion: pgvs3.io/v1alpha1\nkind: Bucket\nmetadata: {{name: {name}, namespace: {NAMESPACE}}}\n\
         spec: {{gatewayPoolRef: demo-primary, deletionPolicy: {policy}{extra}}}\n"
    )
}

fn create_bucket(name: &str, policy: &str) -> Value {
    create_bucket_with(name, policy, "")
}

fn create_bucket_with(name: &str, policy: &str, extra: &str) -> Value {
    kubectl_apply(&bucket_manifest(name, policy, extra));
    eventually(&format!("Bucket {name} Ready"), Duration::from_secs(120), || {
        get_json(&format!("bucket/{name}")).filter(ready)
    })
}

/// Rows in the catalog, read on the PostgreSQL primary.
fn catalog_count(sql: &str) -> i64 {
    let pod = kubectl(&[
        "get",
        "pod",
        "-l",
        "role=primary",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    let pod = if pod.trim().is_empty() {
        kubectl(&[
            "get",
            "pod",
            "-l",
            "cnpg.io/instanceRole=primary",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])
    } else {
        pod
    };
    kubectl(&["exec", pod.trim(), "--", "psql", "-U", "app", "-d", "app", "-tAc", sql])
        .trim()
        .parse()
        .unwrap()
}

#[test]
#[ignore = "needs a kind cluster from kind/up.sh"]
fn pools_are_ready_with_endpoints_and_bound_services() {
    require_kind();
    let primary = get_json("gatewaypool/demo-primary").unwrap();
    assert!(ready(&primary), "{primary}");
    assert_eq!(primary["status"]["database"], "demo-rw");
    assert_eq!(
        primary["status"]["endpoints"]["s3"],
        "http://demo-primary.pgvs3-demo.svc:9000"
    );
    let standby = get_json("gatewaypool/demo-standby").unwrap();
    assert!(ready(&standby), "{standby}");
    assert_eq!(standby["status"]["database"], "demo-ro");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a kind cluster from kind/up.sh"]
async fn bucket_credentials_write_on_the_primary_and_read_on_the_standby() {
    require_kind();
    create_bucket("e2e-rw", "Delete");
    let primary = PortForward::service("demo-primary", 9000);
    let client = s3(primary.port, "e2e-rw-credentials");
    let bucket = secret_value("e2e-rw-credentials", "BUCKET_NAME");
    client
        .put_object()
        .bucket(&bucket)
        .key("hello.txt")
        .body(ByteStream::from_static(b"hello from kind"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        secret_value("e2e-rw-credentials", "BUCKET_READ_ENDPOINT_URLS"),
        "http://demo-standby.pgvs3-demo.svc:9000"
    );
    // The standby replays the write shortly; a bounded wait for replication, not a sleep.
    let standby = PortForward::service("demo-standby", 9000);
    let reader = s3(standby.port, "e2e-rw-credentials");
    let start = Instant::now();
    let body = loop {
        match reader.get_object().bucket(&bucket).key("hello.txt").send().await {
            Ok(object) => break object.body.collect().await.unwrap().into_bytes(),
            Err(err) => assert!(start.elapsed() < Duration::from_secs(60), "standby read: {err:?}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert_eq!(body.as_ref(), b"hello from kind");
    kubectl(&["delete", "bucket", "e2e-rw", "--wait=true"]);
}

#[test]
#[ignore = "needs a kind cluster from kind/up.sh"]
fn deletion_policies_drop_or_keep_the_catalog_bucket() {
    require_kind();
    for (name, policy, expected) in [("e2e-delete", "Delete", 0), ("e2e-retain", "Retain", 1)] {
        let bucket = create_bucket(name, policy);
        let bucket_name = bucket["status"]["bucketName"].as_str().unwrap().to_string();
        let query = format!("SELECT count(*) FROM pgvs3.buckets WHERE name = '{bucket_name}'");
        assert_eq!(catalog_count(&query), 1);
        kubectl(&["delete", "bucket", name, "--wait=true"]);
        assert_eq!(catalog_count(&query), expected, "{policy}");
        assert!(
            get_json(&format!("secret/{name}-credentials")).is_none(),
            "the Secret goes with its Bucket"
        );
    }
}

#[test]
#[ignore = "needs a kind cluster from kind/up.sh"]
fn standby_pool_scales() {
    require_kind();
    kubectl(&[
        "patch",
        "gatewaypool",
        "demo-standby",
        "--type=merge",
        "-p",
        r#"{"spec":{"autoscaling":null,"replicas":3}}"#,
    ]);
    eventually("3 ready standby gateways", Duration::from_secs(180), || {
        get_json("gatewaypool/demo-standby").filter(|p| p["status"]["readyReplicas"] == 3 && ready(p))
    });
    assert!(
        get_json("hpa/demo-standby").is_none(),
        "the autoscaler is gone with autoscaling"
    );
}

#[test]
#[ignore = "needs a kind cluster from kind/up.sh"]
fn resp_and_ojs_answer_through_their_services() {
    require_kind();
    // An enabled OJS endpoint needs its bearer token Secret (the CRD refuses one without).
    let _ = kubectl(&["delete", "secret", "e2e-ojs-token", "--ignore-not-found"]);
    kubectl(&[
        "create",
        "secret",
        "generic",
        "e2e-ojs-token",
        "--from-literal=token=e2e-ojs-secret-token",
    ]);
    kubectl(&[
        "patch",
        "gatewaypool",
        "demo-primary",
        "--type=merge",
        "-p",
        r#"{"spec":{"protocols":{"ojs":{"enabled":true,"port":8080},"ojsTokenSecretRef":"e2e-ojs-token"}}}"#,
    ]);
    eventually("primary pool rolled out", Duration::from_secs(180), || {
        get_json("gatewaypool/demo-primary").filter(|p| ready(p) && p["status"]["endpoints"]["ojs"].is_string())
    });
    // RESP clients authenticate with an access key of the catalog: a Bucket's will do.
    create_bucket("e2e-resp", "Delete");
    let user = secret_value("e2e-resp-credentials", "AWS_ACCESS_KEY_ID");
    let pass = secret_value("e2e-resp-credentials", "AWS_SECRET_ACCESS_KEY");
    let pong = kubectl(&[
        "run",
        "e2e-redis-cli",
        "--rm",
        "-i",
        "--restart=Never",
        "--image=redis:7",
        "--",
        "redis-cli",
        "-h",
        "demo-primary",
        "-p",
        "6379",
        "--user",
        &user,
        "--pass",
        &pass,
        "PING",
    ]);
    assert!(pong.contains("PONG"), "{pong}");
    kubectl(&["delete", "bucket", "e2e-resp", "--wait=true"]);
    let health = kubectl(&[
        "run",
        "e2e-curl",
        "--rm",
        "-i",
        "--restart=Never",
        "--image=curlimages/curl:8.10.1",
        "--",
        "-fsS",
        "http://demo-primary:8080/ojs/v1/health",
    ]);
    assert!(health.contains("ok"), "{health}");
    let status_of = |name: &str, auth: &str| {
        kubectl(&[
            "run",
            name,
            "--rm",
            "-i",
            "--restart=Never",
            "--image=curlimages/curl:8.10.1",
            "--",
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            auth,
            "http://demo-primary:8080/ojs/v1/queues",
        ])
    };
    assert!(status_of("e2e-curl-anonymous", "X-None: 1").starts_with("401"));
    assert!(status_of("e2e-curl-token", "Authorization: Bearer e2e-ojs-secret-token").starts_with("200"));
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a kind cluster from kind/up.sh"]
async fn a_bucket_quota_refuses_writes_past_it() {
    require_kind();
    let bucket = create_bucket_with("e2e-quota", "Delete", ", quota: {maxObjects: 1}");
    let enforced = bucket["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "QuotaEnforced" && c["status"] == "True");
    assert!(enforced, "{bucket}");
    let primary = PortForward::service("demo-primary", 9000);
    let client = s3(primary.port, "e2e-quota-credentials");
    let name = secret_value("e2e-quota-credentials", "BUCKET_NAME");
    let put = |key: &'static str| {
        client
            .put_object()
            .bucket(&name)
            .key(key)
            .body(ByteStream::from_static(b"x"))
            .send()
    };
    put("first").await.unwrap();
    let refused = put("second").await.unwrap_err().into_service_error();
    assert_eq!(
        aws_sdk_s3::error::ProvideErrorMetadata::code(&refused),
        Some("XMinioAdminBucketQuotaExceeded")
    );
    kubectl(&["delete", "bucket", "e2e-quota", "--wait=true"]);
}

#[test]
#[ignore = "needs a kind cluster from kind/up.sh"]
fn a_retained_bucket_is_adopted_by_a_new_resource() {
    require_kind();
    let first = create_bucket_with("e2e-adopt", "Retain", ", bucketName: e2e-adopted-data");
    // Retained for a Bucket of the same namespace and name: held by its custodian key.
    let query = "SELECT count(*) FROM pgvs3.buckets WHERE name = 'e2e-adopted-data' AND owner LIKE 'PGVS3R%'";
    kubectl(&["delete", "bucket", "e2e-adopt", "--wait=true"]);
    assert_eq!(catalog_count(query), 1, "retained for e2e-adopt");
    let second = create_bucket_with("e2e-adopt", "Delete", ", bucketName: e2e-adopted-data");
    assert_ne!(first["metadata"]["uid"], second["metadata"]["uid"]);
    let key = secret_value("e2e-adopt-credentials", "AWS_ACCESS_KEY_ID");
    let owned = format!("SELECT count(*) FROM pgvs3.buckets WHERE name = 'e2e-adopted-data' AND owner = '{key}'");
    assert_eq!(catalog_count(&owned), 1, "adopted by the new resource's key");
    kubectl(&["delete", "bucket", "e2e-adopt", "--wait=true"]);
    assert_eq!(
        catalog_count("SELECT count(*) FROM pgvs3.buckets WHERE name = 'e2e-adopted-data'"),
        0,
        "the adopter's Delete policy drops it"
    );
}
