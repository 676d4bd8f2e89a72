//! S3 admission control: a bounded number active, a bounded queue that waits up to a deadline,
//! then 503 SlowDown with Retry-After; health stays reachable while data traffic is saturated.

use pgvs3_testkit as common;

use std::time::{Duration, SystemTime};

use common::raw::{RawResponse, Signer, send, sha256_hex};
use common::s3::{put_object, put_request};
use common::{ROOT_ACCESS_KEY, ROOT_SECRET_KEY, TestGateway, noise};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn signed_get(gw: &TestGateway, path: &str) -> Vec<(String, String)> {
    let signer = Signer {
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: ROOT_SECRET_KEY.into(),
        host: gw.gateway.s3_addr.to_string(),
    };
    signer.sign("GET", path, &[], &sha256_hex(b""), SystemTime::now())
}

/// Starts downloading a large object and stops reading: the request keeps its slot.
async fn hold_slot(gw: &TestGateway) -> TcpStream {
    let mut stream = TcpStream::connect(gw.gateway.s3_addr).await.unwrap();
    let mut request = "GET /adm/big HTTP/1.1\r\n".to_owned();
    for (name, value) in signed_get(gw, "/adm/big") {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut first = vec![0u8; 64 * 1024];
    stream.read_exact(&mut first).await.unwrap();
    assert!(first.starts_with(b"HTTP/1.1 200"));
    stream
}

async fn release(mut stream: TcpStream) {
    let mut rest = Vec::new();
    stream.shutdown().await.unwrap();
    stream.read_to_end(&mut rest).await.unwrap();
}

async fn small_get(gw: &TestGateway) -> RawResponse {
    send(
        gw.gateway.s3_addr,
        "GET",
        "/adm/small",
        &signed_get(gw, "/adm/small"),
        b"",
    )
    .await
}

#[tokio::test]
async fn bursts_wait_briefly_then_get_slow_down() {
    let args = [
        "--s3-max-active",
        "1",
        "--s3-max-waiting",
        "1",
        "--admission-wait",
        "2s",
    ];
    let gw = TestGateway::with_args(common::fresh_database().await, &args).await;
    gw.client.create_bucket().bucket("adm").send().await.unwrap();
    put_object(&gw.client, "adm", "small", b"tiny").await;
    put_object(&gw.client, "adm", "big", noise(24 << 20, 1)).await;

    let held = hold_slot(&gw).await;
    let waiter = {
        let (addr, headers) = (gw.gateway.s3_addr, signed_get(&gw, "/adm/small"));
        tokio::spawn(async move { send(addr, "GET", "/adm/small", &headers, b"").await })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while gw.metric("pgvs3_admission_waiting{protocol=\"s3\"}").await != Some(1.0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second request should be waiting"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The queue is full: the next request is turned away at once, with S3's SlowDown.
    let turned_away = small_get(&gw).await;
    assert_eq!((turned_away.status, turned_away.code()), (503, Some("SlowDown")));
    assert_eq!(turned_away.header("retry-after"), Some("1"));
    // Health is served on its own listener, never behind data traffic.
    let host = gw.gateway.admin_addr.to_string();
    assert_eq!(
        send(gw.gateway.admin_addr, "GET", "/healthz", &[("host".into(), host)], b"")
            .await
            .status,
        200
    );

    release(held).await;
    let waited = waiter.await.unwrap();
    assert_eq!((waited.status, waited.body.as_str()), (200, "tiny"));
    assert_eq!(
        gw.metric("pgvs3_admission_admitted_after_wait_total{protocol=\"s3\"}")
            .await,
        Some(1.0)
    );

    // A waiter whose deadline passes is turned away too.
    let held = hold_slot(&gw).await;
    let timed_out = small_get(&gw).await;
    assert_eq!((timed_out.status, timed_out.code()), (503, Some("SlowDown")));
    release(held).await;
    assert_eq!(
        gw.metric("pgvs3_admission_rejected_total{protocol=\"s3\",reason=\"timed_out\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(
        gw.metric("pgvs3_admission_rejected_total{protocol=\"s3\",reason=\"queue_full\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(small_get(&gw).await.status, 200, "slots are all returned");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_two_hundred_with_eight_slots_is_served_or_told_to_slow_down() {
    let args = [
        "--s3-max-active",
        "8",
        "--s3-max-waiting",
        "16",
        "--admission-wait",
        "30s",
    ];
    let gw = TestGateway::with_args(common::fresh_database().await, &args).await;
    gw.client.create_bucket().bucket("adm").send().await.unwrap();
    for (key, body) in [("small", b"tiny".to_vec()), ("big", noise(24 << 20, 2))] {
        put_object(&gw.client, "adm", key, body).await;
    }
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(hold_slot(&gw).await);
    }
    let burst: Vec<_> = (0..200)
        .map(|_| {
            let (addr, headers) = (gw.gateway.s3_addr, signed_get(&gw, "/adm/small"));
            tokio::spawn(async move { send(addr, "GET", "/adm/small", &headers, b"").await })
        })
        .collect();
    // Sixteen wait in the queue; everyone else is turned away without waiting.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while gw
        .metric("pgvs3_admission_rejected_total{protocol=\"s3\",reason=\"queue_full\"}")
        .await
        != Some(184.0)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "184 requests turned away at once"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(gw.metric("pgvs3_admission_waiting{protocol=\"s3\"}").await, Some(16.0));
    for stream in held {
        release(stream).await;
    }
    // Every request ends (none lost, none hung): the waiters served, the rest told to retry.
    let answers = tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(burst))
        .await
        .expect("the whole burst is answered");
    let mut served = 0;
    for answer in answers {
        let answer = answer.unwrap();
        match answer.status {
            200 => {
                assert_eq!(answer.body, "tiny");
                served += 1;
            }
            503 => {
                assert_eq!(answer.code(), Some("SlowDown"));
                assert_eq!(answer.header("retry-after"), Some("1"));
            }
            other => panic!("status {other}: {}", answer.body),
        }
    }
    assert_eq!(served, 16);
    assert_eq!(
        gw.metric("pgvs3_admission_admitted_after_wait_total{protocol=\"s3\"}")
            .await,
        Some(16.0)
    );
    assert_eq!(gw.metric("pgvs3_admission_waiting{protocol=\"s3\"}").await, Some(0.0));
    gw.stop().await;
}

/// Opens a signed PUT of `declared` bytes and sends only `sent` of them, then stalls: the
/// request is authenticated (UNSIGNED-PAYLOAD) and admitted, and holds its slot while it stalls.
async fn stalled_put(gw: &TestGateway, key: &str, declared: usize, sent: usize) -> TcpStream {
    let signer = Signer {
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: ROOT_SECRET_KEY.into(),
        host: gw.gateway.s3_addr.to_string(),
    };
    let path = format!("/adm/{key}");
    let headers = signer.sign(
        "PUT",
        &path,
        &[("content-length", declared.to_string())],
        "UNSIGNED-PAYLOAD",
        SystemTime::now(),
    );
    let mut stream = TcpStream::connect(gw.gateway.s3_addr).await.unwrap();
    let mut request = format!("PUT {path} HTTP/1.1\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    // The answer is read to the end of the stream.
    request.push_str("connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.write_all(&noise(sent, 3)).await.unwrap();
    stream
}

async fn admin_metric_eventually(gw: &TestGateway, line: &str, value: f64) {
    common::eventually(Duration::from_secs(20), line, || async {
        (gw.metric(line).await == Some(value)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn unauthenticated_clients_that_stall_hold_no_slot() {
    let args = [
        "--s3-max-active",
        "2",
        "--s3-max-waiting",
        "1",
        "--admission-wait",
        "100ms",
    ];
    let gw = TestGateway::with_args(common::fresh_database().await, &args).await;
    gw.client.create_bucket().bucket("adm").send().await.unwrap();
    // Browser-style POST uploads whose form never arrives, and unsigned PUTs whose body never
    // does: none of them has shown a signature, so none may take a slot.
    let mut stalled = Vec::new();
    for i in 0..16 {
        let mut stream = TcpStream::connect(gw.gateway.s3_addr).await.unwrap();
        let head = if i % 2 == 0 {
            format!(
                "POST /adm HTTP/1.1\r\nhost: {}\r\ncontent-type: multipart/form-data; boundary=xyz\r\n\
                 content-length: 100000\r\n\r\n--xyz\r\ncontent-disposition: form-data; name=\"key\"\r\n\r\n",
                gw.gateway.s3_addr
            )
        } else {
            format!(
                "PUT /adm/k{i} HTTP/1.1\r\nhost: {}\r\ncontent-length: 100000\r\n\r\nabc",
                gw.gateway.s3_addr
            )
        };
        stream.write_all(head.as_bytes()).await.unwrap();
        stalled.push(stream);
    }
    for i in 0..10 {
        put_request(&gw.client, "adm", &format!("served-{i}"), b"ok")
            .send()
            .await
            .expect("a signed request is served while unauthenticated ones stall");
    }
    assert_eq!(
        gw.metric("pgvs3_admission_rejected_total{protocol=\"s3\"").await,
        None,
        "nobody was turned away"
    );
    drop(stalled);
    gw.stop().await;
}

#[tokio::test]
async fn a_signed_put_that_stalls_its_body_times_out_and_frees_its_slot() {
    let args = [
        "--s3-max-active",
        "1",
        "--s3-max-waiting",
        "4",
        "--admission-wait",
        "30s",
        "--http-body-idle-timeout",
        "1s",
    ];
    let gw = TestGateway::with_args(common::fresh_database().await, &args).await;
    gw.client.create_bucket().bucket("adm").send().await.unwrap();
    let mut stalled = stalled_put(&gw, "stalled", 1000, 10).await;
    admin_metric_eventually(&gw, "pgvs3_admission_active{protocol=\"s3\"}", 1.0).await;
    // The only slot is held; this request waits for it, and gets it once the stall times out.
    let waiting = {
        let client = gw.client.clone();
        tokio::spawn(async move { put_request(&client, "adm", "after", b"ok").send().await })
    };
    let answer = common::raw::read_response(&mut stalled).await;
    assert_eq!(
        (answer.status, answer.code()),
        (400, Some("RequestTimeout")),
        "{}",
        answer.body
    );
    tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiter is served once the slot is free")
        .unwrap()
        .expect("served");
    let missing = gw.client.head_object().bucket("adm").key("stalled").send().await;
    assert!(missing.is_err(), "nothing of the stalled body became visible");
    admin_metric_eventually(&gw, "pgvs3_admission_active{protocol=\"s3\"}", 0.0).await;
    gw.stop().await;
}

#[tokio::test]
async fn large_uploads_cannot_take_the_slots_small_requests_need() {
    let args = [
        "--s3-max-active",
        "4",
        "--s3-max-waiting",
        "4",
        "--s3-max-active-uploads",
        "1",
        "--admission-wait",
        "200ms",
    ];
    let gw = TestGateway::with_args(common::fresh_database().await, &args).await;
    gw.client.create_bucket().bucket("adm").send().await.unwrap();
    put_object(&gw.client, "adm", "small", b"tiny").await;
    // Six 10 MiB uploads under way (each sent 1 MiB, then paused): one streams, the rest wait
    // their turn in the upload class or are told to slow down.
    let mut uploads = Vec::new();
    for i in 0..6 {
        uploads.push(stalled_put(&gw, &format!("large-{i}"), 10 << 20, 1 << 20).await);
    }
    admin_metric_eventually(&gw, "pgvs3_admission_active{protocol=\"s3_upload\"}", 1.0).await;
    for _ in 0..20 {
        let answer = small_get(&gw).await;
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (200, "tiny"),
            "small requests keep flowing"
        );
    }
    assert_eq!(gw.metric("pgvs3_admission_rejected_total{protocol=\"s3\",").await, None);
    drop(uploads);
    gw.stop().await;
}

/// Issue 30 item 2: an upload whose client sends slowly holds no database connection. A pool of
/// four, eight signed 3 MiB PUTs that each send 1.5 MiB and pause: S3, RESP and OJS requests
/// are answered at once (on the old write path each upload held a connection for as long as
/// its client took, and everything else failed after the pool's wait timeout). Sent the rest,
/// every upload stores exactly its bytes; one whose client leaves hands its written batches
/// to the reaper at once.
#[tokio::test]
async fn uploads_whose_clients_pause_hold_no_database_connection() {
    // The pool's wait is long: the eight uploads' first batches share the four connections, and
    // on a loaded machine one that waited more than a short bound failed its upload (a CI
    // failure: "the uploads under way" never came). A connection held by a paused upload is
    // still caught, by the requests below that must be answered within `quick`.
    let args = [
        "--pool-size",
        "4",
        "--pg-pool-wait-timeout",
        "15s",
        "--s3-max-active-uploads",
        "16",
        "--http-body-idle-timeout",
        "60s",
    ];
    let gw = TestGateway::with_resp(&args).await;
    gw.client.create_bucket().bucket("adm").send().await.unwrap();
    put_object(&gw.client, "adm", "small", b"tiny").await;
    const SIZE: usize = 3 << 20;
    const SENT: usize = 1536 << 10;
    let bodies: Vec<Vec<u8>> = (0..8).map(|i| noise(SIZE, 100 + i)).collect();
    let mut uploads = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let mut stream = stalled_put(&gw, &format!("slow-{i}"), SIZE, 0).await;
        stream.write_all(&body[..SENT]).await.unwrap();
        uploads.push(stream);
    }
    admin_metric_eventually(&gw, "pgvs3_admission_active{protocol=\"s3_upload\"}", 8.0).await;
    let sql = gw.sql().await;
    let ns: String = sql
        .query_one("SELECT namespace FROM pgvs3.buckets WHERE name = 'adm'", &[])
        .await
        .unwrap()
        .get("namespace");
    // The uploads are under way: each has written its first batch (1 MiB, leased) and waits
    // for its client — or, as the old write path did, the pool's four connections are copying.
    common::eventually(Duration::from_secs(20), "the uploads under way", || async {
        let row = sql
            .query_one(
                &format!(
                    "SELECT (SELECT count(*) FROM \"{ns}\".retired_bodies WHERE retired_at > now()) AS retiring,
                            (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                                AND state = 'active' AND query LIKE 'COPY%') AS copies"
                ),
                &[],
            )
            .await
            .unwrap();
        (row.get::<_, i64>("retiring") == 8 || row.get::<_, i64>("copies") == 4).then_some(())
    })
    .await;
    let quick = Duration::from_millis(1500);
    for _ in 0..5 {
        let answer = tokio::time::timeout(quick, small_get(&gw))
            .await
            .expect("S3 answers at once");
        assert_eq!((answer.status, answer.body.as_str()), (200, "tiny"));
    }
    let mut resp = common::resp::RawResp::connect(gw.resp_addr()).await;
    let set = tokio::time::timeout(quick, resp.command(&["SET", "k", "v"])).await;
    assert_eq!(
        set.expect("RESP answers at once"),
        common::resp::Value::Simple("OK".into())
    );
    let ojs = common::ojs::Ojs::of(&gw);
    let job = serde_json::json!({ "type": "t.task", "args": [] });
    let (status, body) = tokio::time::timeout(quick, ojs.call("POST", "/ojs/v1/jobs", Some(job)))
        .await
        .expect("OJS answers at once");
    assert_eq!(status, 201, "{body}");

    // The last client leaves: its batch is retired now, not when its lease runs out.
    drop(uploads.pop());
    common::eventually(Duration::from_secs(20), "the abandoned batch retired", || async {
        let retired: i64 = sql
            .query_one(
                &format!("SELECT count(*) FROM \"{ns}\".retired_bodies WHERE retired_at <= now()"),
                &[],
            )
            .await
            .unwrap()
            .get("count");
        (retired == 1).then_some(())
    })
    .await;
    // A reaper pass now takes the abandoned batch and none of the live uploads' leased ones.
    gw.gateway.store.reap_retired(Duration::ZERO).await.unwrap();
    let row = sql
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM \"{ns}\".retired_bodies WHERE retired_at <= now()) AS retired,
                        (SELECT count(DISTINCT c.body_id) FROM \"{ns}\".chunks c
                           JOIN \"{ns}\".retired_bodies r USING (body_id)) AS with_chunks"
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>("retired"), row.get::<_, i64>("with_chunks")),
        (0, 7),
        "the abandoned body reaped, the seven leased ones kept"
    );
    for (i, mut stream) in uploads.into_iter().enumerate() {
        stream.write_all(&bodies[i][SENT..]).await.unwrap();
        let answer = common::raw::read_response(&mut stream).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    for (i, body) in bodies.iter().enumerate().take(7) {
        let got = gw
            .client
            .get_object()
            .bucket("adm")
            .key(format!("slow-{i}"))
            .send()
            .await
            .unwrap();
        let bytes = got.body.collect().await.unwrap().into_bytes();
        assert!(bytes[..] == body[..], "upload {i} stored exactly its bytes");
    }
    let missing = gw.client.head_object().bucket("adm").key("slow-7").send().await;
    assert!(missing.is_err(), "nothing of the abandoned upload is visible");
    let leased: i64 = sql
        .query_one(
            &format!("SELECT count(*) FROM \"{ns}\".retired_bodies WHERE retired_at > now()"),
            &[],
        )
        .await
        .unwrap()
        .get("count");
    assert_eq!(leased, 0, "committed bodies left their leases");
    gw.stop().await;
}
