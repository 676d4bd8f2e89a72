//! The OJS endpoint in a fleet: admission control under a burst (a bounded number active, a
//! bounded line waiting, then 429 `rate_limited` with Retry-After; probes never wait), and a
//! standby gateway that stops serving reads while its replay lags too far behind and sends no
//! promotion.

use pgvs3_testkit as common;

use std::time::Duration;

use common::ojs::Ojs;
use common::{TestGateway, eventually, primary_and_standby};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An enqueue whose headers are sent but whose body is held back: admitted before its body is
/// read, it keeps its slot until [`finish`] sends the rest.
async fn hold_slot(ojs: &Ojs, body: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(ojs.addr).await.unwrap();
    let head = format!(
        "POST /ojs/v1/jobs HTTP/1.1\r\nhost: {}\r\ncontent-type: application/openjobspec+json\r\ncontent-length: {}\r\n\r\n",
        ojs.addr,
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// Sends the held-back body and reads the answer's status line.
async fn finish(mut stream: TcpStream, body: &[u8]) -> String {
    stream.write_all(body).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let read = stream.read(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer[..read])
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

fn job(n: usize) -> Value {
    json!({ "type": "burst.task", "args": [n], "options": { "queue": "burst" } })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_two_hundred_gets_eight_served_sixteen_waiting_and_the_rest_told_to_retry() {
    let gateway = TestGateway::with_args(
        common::fresh_database().await,
        &[
            "--ojs-max-active",
            "8",
            "--ojs-max-waiting",
            "16",
            "--admission-wait",
            "30s",
        ],
    )
    .await;
    let ojs = Ojs::of(&gateway);
    let held_body = job(usize::MAX).to_string().into_bytes();
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(hold_slot(&ojs, &held_body).await);
    }
    eventually(Duration::from_secs(10), "eight requests active", || async {
        (gateway.metric("pgvs3_admission_active{protocol=\"ojs\"}").await == Some(8.0)).then_some(())
    })
    .await;

    let burst: Vec<_> = (0..200)
        .map(|n| {
            let ojs = ojs.clone();
            tokio::spawn(async move {
                // A hung request fails the test instead of blocking it.
                tokio::time::timeout(
                    Duration::from_secs(60),
                    ojs.exchange("POST", "/ojs/v1/jobs", Some(job(n))),
                )
                .await
                .expect("every request is answered")
            })
        })
        .collect();
    eventually(Duration::from_secs(30), "16 waiting and 184 turned away", || async {
        let waiting = gateway.metric("pgvs3_admission_waiting{protocol=\"ojs\"}").await;
        let rejected = gateway
            .metric("pgvs3_admission_rejected_total{protocol=\"ojs\",reason=\"queue_full\"}")
            .await;
        (waiting == Some(16.0) && rejected == Some(184.0)).then_some(())
    })
    .await;
    // Probes and discovery answer while every slot is taken and the line is full.
    for path in ["/ojs/v1/health", "/ojs/manifest", "/health"] {
        assert_eq!(ojs.get(path).await.0, 200, "{path}");
    }

    for stream in held {
        assert_eq!(finish(stream, &held_body).await, "HTTP/1.1 201 Created");
    }
    let mut created = Vec::new();
    let mut turned_away = 0;
    for request in burst {
        let (status, headers, body) = request.await.unwrap();
        match status {
            201 => created.push(body["job"]["args"][0].as_u64().unwrap()),
            429 => {
                turned_away += 1;
                assert_eq!(body["error"]["code"], "rate_limited", "{body}");
                assert_eq!(body["error"]["retryable"], true);
                assert_eq!(headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
            }
            other => panic!("unexpected status {other}: {body}"),
        }
    }
    assert_eq!((created.len(), turned_away), (16, 184));
    assert_eq!(
        gateway
            .metric("pgvs3_admission_admitted_after_wait_total{protocol=\"ojs\"}")
            .await,
        Some(16.0)
    );
    assert_eq!(
        gateway
            .metric("pgvs3_admission_rejected_total{protocol=\"ojs\",reason=\"timed_out\"}")
            .await,
        None,
        "no waiter ran out of time"
    );
    // Nothing lost, nothing extra: the queue holds exactly the jobs that were answered 201.
    let (_, stats) = ojs.get("/ojs/v1/queues/burst/stats").await;
    assert_eq!(stats["stats"]["available"].as_u64(), Some(16 + 8), "{stats}");
    assert_eq!(
        gateway.metric("pgvs3_admission_active{protocol=\"ojs\"}").await,
        Some(0.0)
    );
    assert_eq!(
        ojs.get("/ojs/v1/queues/burst/stats").await.0,
        200,
        "slots are all returned"
    );
    gateway.stop().await;
}

#[tokio::test]
async fn a_waiter_is_turned_away_at_the_admission_deadline() {
    let gateway = TestGateway::with_args(
        common::fresh_database().await,
        &["--ojs-max-active", "1", "--admission-wait", "200ms"],
    )
    .await;
    let ojs = Ojs::of(&gateway);
    let body = job(0).to_string().into_bytes();
    let held = hold_slot(&ojs, &body).await;
    eventually(Duration::from_secs(10), "the slot taken", || async {
        (gateway.metric("pgvs3_admission_active{protocol=\"ojs\"}").await == Some(1.0)).then_some(())
    })
    .await;
    let (status, headers, answer) = ojs.exchange("GET", "/ojs/v1/queues", None).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (429, Some("rate_limited")));
    assert!(headers.contains_key("retry-after"));
    assert_eq!(
        gateway
            .metric("pgvs3_admission_rejected_total{protocol=\"ojs\",reason=\"timed_out\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(finish(held, &body).await, "HTTP/1.1 201 Created");
    assert_eq!(ojs.get("/ojs/v1/queues").await.0, 200);
    gateway.stop().await;
}

#[tokio::test]
async fn a_standby_too_far_behind_refuses_ojs_reads_until_replay_catches_up() {
    let (primary, standby) = primary_and_standby("ojs-lag");
    let writer = TestGateway::on(primary.url("postgres")).await;
    let reader = TestGateway::with_args(standby.url("postgres"), &["--max-replication-lag", "1s"]).await;
    let (to_primary, from_standby) = (Ojs::of(&writer), Ojs::of(&reader));
    let enqueue = |n| {
        let ojs = to_primary.clone();
        async move {
            let (status, body) = ojs.post("/ojs/v1/jobs", job(n)).await;
            assert_eq!(status, 201, "{body}");
            body["job"]["id"].as_str().unwrap().to_string()
        }
    };
    let first = enqueue(1).await;
    let read = |id: String| {
        let ojs = from_standby.clone();
        async move { ojs.call("GET", &format!("/ojs/v1/jobs/{id}"), None).await }
    };
    eventually(Duration::from_secs(30), "the standby to serve the job", || async {
        (read(first.clone()).await.0 == 200).then_some(())
    })
    .await;

    let replay = standby.pause_replay().await;
    let second = enqueue(2).await;
    let refusal = eventually(Duration::from_secs(30), "reads to be refused", || async {
        let (status, body) = read(first.clone()).await;
        (status == 503).then_some(body)
    })
    .await;
    assert_eq!(refusal["error"]["code"], "backend_error", "{refusal}");
    assert_eq!(refusal["error"]["retryable"], true);
    assert!(
        refusal["error"]["message"]
            .as_str()
            .unwrap()
            .contains("behind its primary"),
        "{refusal}"
    );
    assert!(refusal["error"]["details"]["lag_seconds"].as_f64().unwrap() > 1.0);
    let (status, _) = from_standby.get("/ojs/v1/queues/burst/stats").await;
    assert_eq!(status, 503, "every data route is refused, not only job reads");
    for path in ["/ojs/v1/health", "/ojs/manifest"] {
        assert_eq!(from_standby.get(path).await.0, 200, "{path} still answers");
    }

    replay.resume().await;
    let caught_up = eventually(Duration::from_secs(30), "reads once replay caught up", || async {
        let (status, body) = read(second.clone()).await;
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(caught_up["job"]["state"], "available");
    reader.stop().await;
    writer.stop().await;
}

/// The health routes (`/health`, `/ready`, `/ojs/v1/health`) answer before any token check or
/// admission slot, so they must not need the request pool: with every pooled connection held
/// by enqueues waiting on a lock, they still answer 200 (on the readiness connection, which
/// the admin port's /readyz uses too). Fails before: they pinged through the pool, waited out
/// `--pg-pool-wait-timeout` and answered 503 (and any number of unauthenticated clients could
/// hold the pool's connections that way).
#[tokio::test]
async fn health_answers_while_the_request_pool_is_taken() {
    let gateway = TestGateway::with_args(
        common::fresh_database().await,
        &["--pool-size", "2", "--pg-pool-wait-timeout", "2s"],
    )
    .await;
    let ojs = Ojs::of(&gateway);
    let mut sql = gateway.sql().await;
    let lock = sql.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE ojs.jobs IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let held: Vec<_> = (0..2)
        .map(|n| {
            let ojs = ojs.clone();
            tokio::spawn(async move { ojs.post("/ojs/v1/jobs", job(n)).await })
        })
        .collect();
    let watcher = gateway.sql().await;
    eventually(
        Duration::from_secs(30),
        "both pooled connections wait on the lock",
        || async { (common::lock_waiters(&watcher).await >= 2).then_some(()) },
    )
    .await;
    for path in ["/health", "/ready", "/ojs/v1/health"] {
        let (status, body) = ojs.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body["backend"]["status"], "ok", "{path}: {body}");
    }
    lock.commit().await.unwrap();
    for request in held {
        assert_eq!(request.await.unwrap().0, 201);
    }
    gateway.stop().await;
}

/// A gateway bound to a hot standby runs no promotion of due and lapsed jobs: its statement
/// could only be refused there. A fetch still sends its claim, which the standby refuses (503
/// `read_only`), and that refusal in the standby's log shows that the log would show a
/// promotion too. Fails before: the first fetch sent the promotion with its claim (only the
/// gateway's warning for it had been silenced).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_gateway_sends_no_promotion() {
    let (primary, standby) = primary_and_standby("ojs-promote");
    let writer = TestGateway::on(primary.url("postgres")).await;
    let reader = TestGateway::on(standby.url("postgres")).await;
    let (status, body) = Ojs::of(&reader)
        .post("/ojs/v1/workers/fetch", json!({ "queues": ["q"], "worker_id": "w" }))
        .await;
    assert_eq!((status, &body["error"]["code"]), (503, &json!("read_only")), "{body}");
    // PostgreSQL writes an error (and its statement) to its log before it answers the client.
    let log = std::fs::read_to_string(
        std::env::temp_dir()
            .join(format!("pgvs3-test-{}-pair-ojs-promote", std::process::id()))
            .join("standby/pg/log/postgres.log"),
    )
    .unwrap();
    assert!(
        log.contains("Expired but not yet moved to discarded by a promotion"),
        "the claim was refused on the standby and logged: {log}"
    );
    assert!(
        !log.contains("the claim lapsed before an ack, nack or heartbeat"),
        "no promotion was sent: {log}"
    );
    reader.stop().await;
    writer.stop().await;
}
