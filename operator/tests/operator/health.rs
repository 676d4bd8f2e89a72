//! The operator's own HTTP endpoints: liveness, readiness (leading or standing by) and the
//! controller metrics, over a real socket.

use pgvs3_operator::metrics::Metrics;
use pgvs3_operator::run::{Role, serve_health};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get(port: u16, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: operator\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let metrics = Metrics::default();
    let (role, readiness) = tokio::sync::watch::channel(Role::Standby);
    tokio::spawn(serve_health(listener, metrics.clone(), readiness));

    assert!(get(port, "/healthz").await.starts_with("HTTP/1.1 200"));
    let standby = get(port, "/readyz").await;
    assert!(
        standby.starts_with("HTTP/1.1 200") && standby.ends_with("standing by\n"),
        "{standby}"
    );
    role.send_replace(Role::Leading);
    assert!(get(port, "/readyz").await.ends_with("\r\n\r\nleading\n"));
    role.send_replace(Role::Fenced("lease not renewed within 10s".into()));
    let fenced = get(port, "/readyz").await;
    assert!(
        fenced.ends_with("standing by: stopped leading (lease not renewed within 10s)\n"),
        "{fenced}"
    );

    drop(metrics.reconcile("Bucket"));
    metrics.failure("Bucket", "Catalog");
    let text = get(port, "/metrics").await;
    assert!(
        text.contains("pgvs3_operator_reconciles_total{kind=\"Bucket\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("pgvs3_operator_reconcile_failures_total{kind=\"Bucket\",reason=\"Catalog\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("pgvs3_operator_reconcile_duration_seconds_count{kind=\"Bucket\"} 1"),
        "{text}"
    );
    assert!(get(port, "/nope").await.starts_with("HTTP/1.1 404"));
}
