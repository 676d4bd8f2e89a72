//! Hostile input on the OJS endpoint: oversized bodies are refused while they stream in, before
//! they are read or parsed, and values PostgreSQL cannot store (NUL, out-of-range times) get a
//! 400 OJS error object, never a 5xx; and concurrent large bodies are held within the buffer
//! budget, whatever JSON trees they make.

use pgvs3_testkit as common;

use std::time::Duration;

use common::TestGateway;
use common::ojs::Ojs;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SIXTY_MIB: u64 = 60 << 20;
const DEFAULT_LIMIT: u64 = 4 << 20;

/// This process's resident set (the gateway runs in it), in bytes.
fn rss() -> u64 {
    status_bytes("VmRSS:")
}

/// The most this process has held since [`reset_peak`].
fn peak_rss() -> u64 {
    status_bytes("VmHWM:")
}

fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting the peak resident set");
}

fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    kib << 10
}

/// Tests that measure this process's memory take turns (tests of a binary run concurrently).
static MEASURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Reads one response (head and its Content-Length body) without waiting for the connection to
/// close: the server may close it with the rest of the request unread.
async fn read_one_response(read: &mut tokio::net::tcp::OwnedReadHalf) -> (u16, Value) {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .expect("the response has a Content-Length");
            if raw.len() >= end + 4 + length {
                let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap();
                let body = serde_json::from_slice(&raw[end + 4..end + 4 + length]).unwrap();
                return (status, body);
            }
        }
        let n = read.read(&mut buf).await.expect("the response arrives before a reset");
        assert!(n > 0, "the connection closed before a whole response: {raw:?}");
        raw.extend_from_slice(&buf[..n]);
    }
}

/// What a body writer sends before it waits for the answer: past the 4 MiB limit by more than
/// loopback socket buffers hold, so a gateway that answers has refused without the rest.
const SENT_BEFORE_WAITING: u64 = 16 << 20;

/// Starts a 60 MiB enqueue (declared by Content-Length, or chunked), sends
/// [`SENT_BEFORE_WAITING`] of it and then waits: the answer must come while the rest is unsent
/// (a gateway that waited for the whole body would never answer).
async fn send_huge_enqueue(gateway: &TestGateway, chunked: bool) -> (u16, Value) {
    let stream = TcpStream::connect(gateway.gateway.ojs_addr.unwrap()).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let framing = if chunked {
        "transfer-encoding: chunked".to_string()
    } else {
        format!("content-length: {SIXTY_MIB}")
    };
    let head = format!(
        "POST /ojs/v1/jobs HTTP/1.1\r\nhost: ojs\r\ncontent-type: application/openjobspec+json\r\n{framing}\r\n\r\n"
    );
    write.write_all(head.as_bytes()).await.unwrap();
    let (answered, mut answer_seen) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        // One big string argument: `{"type":"big.task","args":["xxxx...`, never finished.
        let opening = br#"{"type":"big.task","args":[""#;
        let mut chunk = vec![b'x'; 64 << 10];
        chunk[..opening.len()].copy_from_slice(opening);
        let mut sent = 0;
        while sent < SENT_BEFORE_WAITING {
            let framed = if chunked {
                let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                framed.extend_from_slice(&chunk);
                framed.extend_from_slice(b"\r\n");
                framed
            } else {
                chunk.clone()
            };
            // A write may block once the gateway stops reading; the answer ends the wait.
            tokio::select! {
                written = write.write_all(&framed) => {
                    if written.is_err() {
                        return;
                    }
                }
                _ = &mut answer_seen => return,
            }
            sent += chunk.len() as u64;
            chunk[..opening.len()].fill(b'x');
        }
        // The rest is never sent: only the answer (or its absence) ends this.
        let _ = answer_seen.await;
    });
    let (status, body) = tokio::time::timeout(Duration::from_secs(30), read_one_response(&mut read))
        .await
        .expect("an answer within 30 s, with most of the body unsent");
    let _ = answered.send(());
    drop(read);
    tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .expect("the writer stops once the answer came")
        .unwrap();
    (status, body)
}

fn assert_too_large(status: u16, body: &Value, limit: u64) {
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "invalid_payload", "{body}");
    assert_eq!(body["error"]["retryable"], false, "{body}");
    assert_eq!(body["error"]["details"]["max_body_bytes"], limit, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sixty_mib_enqueue_is_refused_before_it_is_read() {
    let _measuring = MEASURING.lock().await;
    let gateway = TestGateway::start().await;
    let before = rss();
    for chunked in [false, true] {
        // The answer comes with most of the body never sent (send_huge_enqueue waits for it):
        // the gateway read at most its limit (plus what socket buffers hold), not the 60 MiB.
        let (status, body) = send_huge_enqueue(&gateway, chunked).await;
        assert_too_large(status, &body, DEFAULT_LIMIT);
    }
    let grown = rss().saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "the gateway grew by {grown} bytes refusing two 60 MiB bodies"
    );
    // The endpoint still serves.
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .post("/ojs/v1/jobs", json!({ "type": "small.task", "args": [1] }))
        .await;
    assert_eq!(status, 201, "{body}");
    gateway.stop().await;
}

#[tokio::test]
async fn the_body_limit_is_a_flag_and_covers_meta_and_batches() {
    let gateway = TestGateway::with_args(
        common::fresh_database().await,
        &["--ojs-max-body-bytes", "100KiB", "--ojs-max-args-bytes", "1024"],
    )
    .await;
    let ojs = Ojs::of(&gateway);
    let limit = 100 << 10;
    // `meta` is bounded by the body limit (args have their own, smaller one).
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "a.b", "args": [], "meta": { "note": "m".repeat(limit as usize) } }),
        )
        .await;
    assert_too_large(status, &body, limit);
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "a.b", "args": [], "unknown": "u".repeat(limit as usize) }),
        )
        .await;
    assert_too_large(status, &body, limit);
    // A batch shares one body: 200 jobs of 512-byte args fit, 400 do not.
    let batch = |n: usize| {
        let jobs: Vec<Value> = (0..n)
            .map(|i| json!({ "type": "a.b", "args": [i, "p".repeat(500)] }))
            .collect();
        json!({ "jobs": jobs })
    };
    let (status, body) = ojs.post("/ojs/v1/jobs/batch", batch(150)).await;
    assert_eq!((status, body["count"].as_u64()), (201, Some(150)), "{body}");
    let (status, body) = ojs.post("/ojs/v1/jobs/batch", batch(400)).await;
    assert_too_large(status, &body, limit);
    gateway.stop().await;
}

/// 16 concurrent enqueues of just under 4 MiB each, whose `meta` is 1.9 million zeros (a JSON
/// tree of 32 bytes a value: 16 times the text, built again for the answer): the gateway's peak
/// stays within its buffer budget plus a margin. Those that do not fit now get 429
/// `rate_limited` (retryable), and each is served when retried. Fails without the budget (the
/// issue measured 1.67 GB for 16).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_large_enqueues_stay_within_the_buffer_budget() {
    let _measuring = MEASURING.lock().await;
    // Each of these requests needs about 210 MiB (two trees of 2^21 values, the text's copies):
    // a 1 GiB budget serves four at once.
    let budget: u64 = 1 << 30;
    // What is measured is memory: a request admitted by the budget waits for a connection as
    // (and opens it) as long as it takes (a loaded machine inserts 4 MiB rows slowly), not the
    // default 10 s (5 s to connect) after which it would answer 503.
    let gateway = TestGateway::with_args(
        common::fresh_database().await,
        &[
            "--buffer-budget",
            "1GiB",
            "--pg-pool-wait-timeout",
            "300s",
            "--pg-connect-timeout",
            "60s",
        ],
    )
    .await;
    let zeros = (DEFAULT_LIMIT as usize - (64 << 10)) / 2;
    let mut text = String::with_capacity(DEFAULT_LIMIT as usize);
    text.push_str(r#"{"type":"big.meta","args":[],"meta":{"pad":["#);
    text.push_str(&"0,".repeat(zeros));
    text.push_str("0]}}");
    let body = bytes::Bytes::from(text);
    let addr = gateway.gateway.ojs_addr.unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let enqueue = || {
        let request = http::Request::post(format!("http://{addr}/ojs/v1/jobs"))
            .header("content-type", "application/openjobspec+json")
            .body(http_body_util::Full::new(body.clone()))
            .unwrap();
        let client = client.clone();
        async move {
            use http_body_util::BodyExt;
            let response = client.request(request).await.unwrap();
            let status = response.status().as_u16();
            let answer = response.into_body().collect().await.unwrap().to_bytes();
            // Only an error is parsed: a job's answer is as large as its request, and its tree
            // would count in this process's peak (the gateway's too).
            let code = (status != 201)
                .then(|| serde_json::from_slice::<Value>(&answer).ok())
                .flatten()
                .and_then(|answer| answer["error"]["code"].as_str().map(String::from));
            (status, code)
        }
    };
    let ojs = Ojs::of(&gateway);
    let (status, _) = ojs.post("/ojs/v1/jobs", json!({ "type": "warm", "args": [] })).await;
    assert_eq!(status, 201);
    reset_peak();
    let before = rss();
    let answers = futures::future::join_all((0..16).map(|_| enqueue())).await;
    let peak = peak_rss().saturating_sub(before);
    println!("16 concurrent 4 MiB enqueues: peak growth {} MiB", peak >> 20);
    let served = answers.iter().filter(|(status, _)| *status == 201).count();
    for (status, code) in &answers {
        assert!(
            *status == 201 || (*status == 429 && code.as_deref() == Some("rate_limited")),
            "{status} {code:?}"
        );
    }
    assert!(served >= 1, "{answers:?}");
    assert!(
        peak < budget + (128 << 20),
        "16 concurrent 4 MiB enqueues grew the gateway by {} MiB at their peak ({served} served)",
        peak >> 20
    );
    // Those turned away are served when retried, one at a time.
    for _ in served..16 {
        assert_eq!(enqueue().await, (201, None));
    }
    assert_eq!(gateway.metric("pgvs3_buffer_bytes_in_use").await, Some(0.0));
    gateway.stop().await;
}

/// Every answer here is a 400 (or 404) with an OJS error object: nothing the client sends may
/// reach PostgreSQL and come back as "the job store is unavailable".
fn assert_client_error(what: &str, status: u16, body: &Value) {
    assert!((400..500).contains(&status), "{what}: {status} {body}");
    let error = &body["error"];
    assert!(
        error["code"].is_string() && error["message"].is_string() && error["retryable"] == false,
        "{what}: not an OJS error object: {body}"
    );
}

#[tokio::test]
async fn values_postgresql_cannot_store_get_400s() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let nul = "a\u{0}b";
    let jobs = [
        ("NUL in args", json!({ "type": "a.b", "args": [nul] })),
        (
            "NUL in a nested arg",
            json!({ "type": "a.b", "args": [{ "k": [nul] }] }),
        ),
        (
            "NUL in a key",
            serde_json::from_str(r#"{"type": "a.b", "args": [{"a\u0000": 1}]}"#).unwrap(),
        ),
        (
            "NUL in meta",
            json!({ "type": "a.b", "args": [], "meta": { "trace": nul } }),
        ),
        (
            "NUL in an unknown field",
            json!({ "type": "a.b", "args": [], "extra": nul }),
        ),
        (
            "a delay of 10^25 weeks",
            json!({ "type": "a.b", "args": [], "scheduled_at": "+P10000000000000000000000000W" }),
        ),
        (
            "a delay of 20,000 years",
            json!({ "type": "a.b", "args": [], "scheduled_at": "+P1043000W" }),
        ),
        (
            "year 0",
            json!({ "type": "a.b", "args": [], "scheduled_at": "0000-01-01T00:00:00Z" }),
        ),
        (
            "30 February",
            json!({ "type": "a.b", "args": [], "expires_at": "2026-02-30T00:00:00Z" }),
        ),
        (
            "hour 25",
            json!({ "type": "a.b", "args": [], "scheduled_at": "2026-01-01T25:00:00+00:00" }),
        ),
        (
            "a huge priority",
            json!({ "type": "a.b", "args": [], "priority": 1e30 }),
        ),
        (
            "a huge timeout",
            json!({ "type": "a.b", "args": [], "timeout_ms": 1e20 }),
        ),
        (
            "a huge unique period",
            json!({ "type": "a.b", "args": [], "unique": { "period": "P99999999999999999999D" } }),
        ),
    ];
    for (what, job) in jobs {
        let (status, body) = ojs.post("/ojs/v1/jobs", job.clone()).await;
        assert_client_error(what, status, &body);
        let (status, body) = ojs.post("/ojs/v1/jobs/batch", json!({ "jobs": [job] })).await;
        assert_client_error(&format!("{what} (batch)"), status, &body);
    }
    let (status, body) = ojs
        .post(
            "/ojs/v1/workflows",
            json!({ "type": "chain", "name": "w", "steps": [{ "type": "a.b", "args": [nul] }] }),
        )
        .await;
    assert_client_error("NUL in a workflow step", status, &body);
    let (status, body) = ojs
        .post(
            "/ojs/v1/cron",
            json!({ "name": nul, "expression": "* * * * *", "job_template": { "type": "a.b", "args": [] } }),
        )
        .await;
    assert_client_error("NUL in a cron name", status, &body);
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/fetch",
            json!({ "queues": ["default"], "worker_id": nul }),
        )
        .await;
    assert_client_error("NUL in a worker id", status, &body);
    let (status, body) = ojs.post("/ojs/v1/workers/heartbeat", json!({ "worker_id": nul })).await;
    assert_client_error("NUL in a heartbeat", status, &body);
    // Too long for the workers' index, and not compressible below its limit.
    let long_id: String = (0..200u8).map(|i| common::sha256(&[i])).collect();
    let (status, body) = ojs
        .post("/ojs/v1/workers/heartbeat", json!({ "worker_id": long_id }))
        .await;
    assert_client_error("a 12 KiB worker id", status, &body);
    for path in [
        "/ojs/v1/dead-letter?queue=a%00b",
        "/ojs/v1/events?types=job.%00&queues=x",
        "/ojs/v1/events?queues=a%00b",
        "/ojs/v1/jobs/not-a-uuid",
        "/ojs/v1/workflows/not-a-uuid",
    ] {
        let (status, body) = ojs.get(path).await;
        assert_client_error(path, status, &body);
    }
    // Not JSON at all, or not UTF-8: the spec's invalid_payload.
    for raw in [
        &b"{\"type\":\"a.b\",\"args\":[\"\xff\xfe\"]}"[..],
        b"{\"type\":\"a.b\",\"args\":[\"\0\"]}",
        b"[1e999]",
    ] {
        let host = gateway.gateway.ojs_addr.unwrap().to_string();
        let response = common::raw::send(
            gateway.gateway.ojs_addr.unwrap(),
            "POST",
            "/ojs/v1/jobs",
            &[
                ("host".into(), host),
                ("content-type".into(), "application/openjobspec+json".into()),
                ("content-length".into(), raw.len().to_string()),
            ],
            raw,
        )
        .await;
        let body: Value = serde_json::from_str(&response.body).unwrap();
        assert_eq!(
            (response.status, body["error"]["code"].as_str()),
            (400, Some("invalid_payload")),
            "{body}"
        );
    }

    // A claimed job: a result or error the store cannot hold is refused, and the job is still
    // the worker's to finish.
    let (status, body) = ojs.post("/ojs/v1/jobs", json!({ "type": "a.b", "args": [1] })).await;
    assert_eq!(status, 201, "{body}");
    let job = ojs.fetch("default", "w1").await.expect("the job is claimed");
    let claim = |extra: Value| {
        let mut body = json!({ "job_id": job["id"], "attempt": job["attempt"], "worker_id": "w1" });
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let (status, body) = ojs
        .post("/ojs/v1/workers/ack", claim(json!({ "result": { "r": nul } })))
        .await;
    assert_client_error("NUL in an ack's result", status, &body);
    let (status, body) = ojs
        .post("/ojs/v1/workers/nack", claim(json!({ "error": { "message": nul } })))
        .await;
    assert_client_error("NUL in a nack's error", status, &body);
    let (status, body) = ojs.post("/ojs/v1/workers/ack", claim(json!({ "attempt": 1e20 }))).await;
    assert_client_error("a huge attempt", status, &body);
    let (status, body) = ojs
        .post("/ojs/v1/workers/ack", claim(json!({ "result": { "r": 1 } })))
        .await;
    assert_eq!(status, 200, "{body}");
    gateway.stop().await;
}

#[tokio::test]
async fn requests_without_the_token_are_refused_before_they_take_a_slot() {
    let gateway = TestGateway::with_args(common::fresh_database().await, &["--ojs-token", "sesame"]).await;
    let mut ojs = Ojs::of(&gateway);
    for _ in 0..20 {
        let (status, body) = ojs.post("/ojs/v1/jobs", json!({ "type": "t", "args": [1] })).await;
        assert_eq!((status, body["error"]["code"].as_str()), (401, Some("unauthenticated")));
    }
    // Admission's gauge for OJS appears with the first admitted request: none so far.
    assert_eq!(gateway.metric("pgvs3_admission_active{protocol=\"ojs\"}").await, None);
    ojs.token = Some("sesame".into());
    let (status, _) = ojs.post("/ojs/v1/jobs", json!({ "type": "t", "args": [1] })).await;
    assert_eq!(status, 201);
    assert_eq!(
        gateway.metric("pgvs3_admission_active{protocol=\"ojs\"}").await,
        Some(0.0)
    );
    gateway.stop().await;
}

/// A fetch lists at most 100 queues (each is a scan of the claim), counted once each: the
/// same queue listed a hundred thousand times is one queue. Fails before: any number of queues
/// was taken, each a scan, and a `weights` object was checked against the list in quadratic
/// time.
#[tokio::test]
async fn a_fetch_lists_at_most_a_hundred_queues_each_once() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "t", "args": [], "options": { "queue": "q0" } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let distinct = |n: usize| (0..n).map(|i| format!("q{i}")).collect::<Vec<_>>();
    let (status, body) = ojs
        .post("/ojs/v1/workers/fetch", json!({ "queues": distinct(101) }))
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_request")),
        "{body}"
    );
    let weights: serde_json::Map<String, Value> = distinct(100_000).into_iter().map(|q| (q, json!(2))).collect();
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/fetch",
            json!({ "queues": distinct(100), "weights": weights }),
        )
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_request")),
        "{body}"
    );
    let mut repeated = vec!["q0".to_string(); 100_000];
    repeated.extend(distinct(100));
    let (status, body) = ojs
        .post("/ojs/v1/workers/fetch", json!({ "queues": repeated, "count": 5 }))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["jobs"].as_array().map(Vec::len), Some(1), "{body}");
    gateway.stop().await;
}

/// A fetch's answer carries at most 16 MiB of jobs (and always the first): a fetch of 30 jobs of
/// 700 KB each gets 24 (the 24th starts at 16.1 MB, the 25th would at 16.8), and the rest stay
/// available for the next. The args are one repeated
/// letter, which PostgreSQL stores compressed to a few KiB: the budget counts what the answer
/// carries, not what is stored. Fails without the budget: all 30 came in one 21 MB answer (and
/// 1,000 jobs of 4 MiB would have built 4 GiB).
#[tokio::test]
async fn a_fetch_answer_is_bounded_in_bytes_and_leaves_the_rest_available() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let args = json!(["a".repeat(700_000)]);
    for _ in 0..30 {
        let job = json!({ "type": "big.task", "args": args, "options": { "queue": "big" } });
        let (status, body) = ojs.post("/ojs/v1/jobs", job).await;
        assert_eq!(status, 201, "{}", body["error"]);
    }
    let fetch = || async {
        let (status, body) = ojs
            .post("/ojs/v1/workers/fetch", json!({ "queues": ["big"], "count": 100 }))
            .await;
        assert_eq!(status, 200, "{}", body["error"]);
        body["jobs"].as_array().unwrap().len()
    };
    assert_eq!(
        fetch().await,
        24,
        "24 jobs of just over 700 KB each start before 16 MiB"
    );
    let available: i64 = gateway
        .sql()
        .await
        .query_one(
            "SELECT count(*) AS available FROM ojs.jobs WHERE state = 'available'",
            &[],
        )
        .await
        .unwrap()
        .get("available");
    assert_eq!(available, 6, "the rest are neither claimed nor spent");
    assert_eq!(fetch().await, 6);
    gateway.stop().await;
}
