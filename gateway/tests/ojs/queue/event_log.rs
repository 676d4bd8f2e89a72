//! The event log: the live event stream and a job's life as logged.

use super::*;

/// An open server-sent-events response, read frame by frame as a plain HTTP client does.
struct EventReader {
    body: hyper::body::Incoming,
    pending: String,
}

impl EventReader {
    async fn open(ojs: &Ojs, query: &str, last_event_id: Option<&str>) -> EventReader {
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<http_body_util::Empty<bytes::Bytes>>();
        let mut request = http::Request::get(format!("http://{}/ojs/v1/events/stream?{query}", ojs.addr))
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = client.request(request.body(Default::default()).unwrap()).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let mut reader = EventReader {
            body: response.into_body(),
            pending: String::new(),
        };
        // The stream opens with the reconnection delay: from here on, events are live.
        assert_eq!(reader.next_block().await.as_deref(), Some("retry: 1000"));
        reader
    }

    /// The next blank-line-terminated block, or None when the stream ends.
    async fn next_block(&mut self) -> Option<String> {
        use http_body_util::BodyExt;
        loop {
            if let Some(end) = self.pending.find("\n\n") {
                let block = self.pending[..end].to_string();
                self.pending.drain(..end + 2);
                return Some(block);
            }
            let frame = tokio::time::timeout(Duration::from_secs(20), self.body.frame())
                .await
                .expect("an event within 20 s")?
                .unwrap();
            if let Ok(data) = frame.into_data() {
                self.pending.push_str(std::str::from_utf8(&data).unwrap());
            }
        }
    }

    /// The next event as (id, event name, data).
    async fn next_event(&mut self) -> (String, String, Value) {
        loop {
            let block = self.next_block().await.expect("the stream stays open");
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|line| line.strip_prefix(name))
                    .map(|value| value.trim().to_string())
            };
            if let (Some(id), Some(event), Some(data)) = (field("id:"), field("event:"), field("data:")) {
                return (id, event, serde_json::from_str(&data).unwrap());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_event_stream_pushes_matching_events_live_and_resumes_after_the_last_id() {
    let gateway = TestGateway::with_args(common::fresh_database().await, &["--shutdown-timeout", "60s"]).await;
    let ojs = Ojs::of(&gateway);
    let mut mail = EventReader::open(&ojs, "queues=mail", None).await;
    let mut everything = EventReader::open(&ojs, "types=job.*", None).await;

    let enqueue = |queue: &'static str| {
        let ojs = ojs.clone();
        async move {
            let (status, body) = ojs
                .post(
                    "/ojs/v1/jobs",
                    json!({ "type": "sse.task", "args": [queue], "options": { "queue": queue } }),
                )
                .await;
            assert_eq!(status, 201, "{body}");
            body["job"]["id"].as_str().unwrap().to_string()
        }
    };
    let other = enqueue("sms").await;
    let id = enqueue("mail").await;
    let job = ojs.fetch("mail", "w").await.unwrap();
    ojs.ack(&job, json!({ "sent": true })).await;

    let (enqueued_id, name, enqueued) = mail.next_event().await;
    assert_eq!(
        (name.as_str(), enqueued["subject"].as_str()),
        ("job.enqueued", Some(id.as_str()))
    );
    let (started_id, name, started) = mail.next_event().await;
    assert_eq!(
        (name.as_str(), started["data"]["worker_id"].as_str()),
        ("job.started", Some("w"))
    );
    let (completed_id, name, completed) = mail.next_event().await;
    assert_eq!(
        (name.as_str(), completed["subject"].as_str()),
        ("job.completed", Some(id.as_str()))
    );
    assert_eq!(completed["data"]["queue"], "mail", "{completed}");
    assert_eq!(completed["data"]["result"], json!({ "sent": true }), "{completed}");
    assert!(completed_id.parse::<i64>().unwrap() > enqueued_id.parse::<i64>().unwrap());
    // The unfiltered stream saw the other queue's job too, in log order.
    let seen: Vec<(String, Option<String>)> = [
        everything.next_event().await,
        everything.next_event().await,
        everything.next_event().await,
        everything.next_event().await,
    ]
    .into_iter()
    .map(|(_, name, event)| (name, event["subject"].as_str().map(String::from)))
    .collect();
    assert_eq!(
        seen,
        [
            ("job.enqueued".to_string(), Some(other.clone())),
            ("job.enqueued".to_string(), Some(id.clone())),
            ("job.started".to_string(), Some(id.clone())),
            ("job.completed".to_string(), Some(id.clone())),
        ]
    );

    // A client that reconnects with the last id it got is replayed what came after, and only
    // the job it asks for.
    let mut resumed = EventReader::open(&ojs, &format!("channel=job%3A{id}"), Some(&enqueued_id)).await;
    let (replayed_id, name, _) = resumed.next_event().await;
    assert_eq!((replayed_id, name.as_str()), (started_id, "job.started"));
    let (replayed_id, name, _) = resumed.next_event().await;
    assert_eq!((replayed_id, name.as_str()), (completed_id, "job.completed"));

    let (status, body) = ojs.get("/ojs/v1/events/stream?channel=worker%3Aw").await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")));

    // Shutdown ends open streams instead of waiting out the 60 s drain.
    tokio::time::timeout(Duration::from_secs(20), gateway.stop())
        .await
        .expect("open event streams end at shutdown");
    assert_eq!(mail.next_block().await, None, "the stream ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_jobs_life_is_logged_in_order_with_the_data_the_spec_names() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let mut stream = EventReader::open(&ojs, "types=job.*", None).await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "life.task", "args": [1], "meta": { "trace_id": trace },
                    "options": { "queue": "life", "retry": { "max_attempts": 2, "initial_interval": "PT1S", "jitter": false } } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["job"]["id"].as_str().unwrap().to_string();

    let first = ojs.fetch("life", "worker-1").await.unwrap();
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/heartbeat",
            json!({ "worker_id": "worker-1", "active_jobs": [id] }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ojs.fail(&first).await["state"], "retryable");
    let second = loop {
        if let Some(job) = ojs.fetch("life", "worker-2").await {
            break job;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let result = json!({ "message_id": "msg_abc123", "count": 3 });
    ojs.ack(&second, result.clone()).await;

    let events = events_of(&ojs, &id, 7).await;
    assert_eq!(
        kinds(&events),
        [
            "job.enqueued",
            "job.started",
            "job.heartbeat",
            "job.failed",
            "job.retrying",
            "job.started",
            "job.completed"
        ]
    );
    for event in &events {
        assert_eq!(
            (event["data"]["job_type"].as_str(), event["data"]["queue"].as_str()),
            (Some("life.task"), Some("life")),
            "{event}"
        );
        assert_eq!(
            event["data"]["trace_id"], trace,
            "the job's trace is in every event: {event}"
        );
        assert_eq!(event["specversion"], "1.0");
        assert!(event["source"].as_str().unwrap().starts_with("ojs://"), "{event}");
    }
    let data = |index: usize| &events[index]["data"];
    assert_eq!(
        (data(1)["worker_id"].as_str(), data(1)["attempt"].as_i64()),
        (Some("worker-1"), Some(1))
    );
    assert_eq!(data(2)["worker_id"], "worker-1");
    assert!(data(2)["visible_until"].is_string());
    assert_eq!(data(3)["attempt"], 1);
    assert_eq!(
        (
            data(3)["error"]["code"].as_str(),
            data(3)["error"]["retryable"].as_bool()
        ),
        (Some("boom"), Some(true))
    );
    assert!(data(3)["duration_ms"].is_number());
    assert_eq!(data(4)["max_attempts"], 2);
    assert!(data(4)["next_retry_at"].is_string());
    assert_eq!(
        (data(5)["worker_id"].as_str(), data(5)["attempt"].as_i64()),
        (Some("worker-2"), Some(2))
    );
    assert_eq!(data(6)["attempt"], 2);
    assert!(data(6)["duration_ms"].is_number());
    assert_eq!(data(6)["result"], result, "job.completed carries what the ack sent");
    let (_, job) = ojs.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(job["job"]["result"], result, "and so does the job");

    // The stream delivers the same life, in the same order.
    let mut streamed = Vec::new();
    while streamed.len() < events.len() {
        let (_, name, event) = stream.next_event().await;
        if event["subject"] == id.as_str() {
            streamed.push(name);
        }
    }
    assert_eq!(streamed, kinds(&events));

    // A last attempt's failure discards: job.failed, then job.discarded with the final error.
    let (_, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "life.doomed", "args": [], "options": { "queue": "doomed", "retry": { "max_attempts": 1 } } }),
        )
        .await;
    let doomed = body["job"]["id"].as_str().unwrap().to_string();
    let job = ojs.fetch("doomed", "w").await.unwrap();
    assert_eq!(ojs.fail(&job).await["state"], "discarded");
    let events = events_of(&ojs, &doomed, 4).await;
    assert_eq!(
        kinds(&events),
        ["job.enqueued", "job.started", "job.failed", "job.discarded"]
    );
    assert_eq!(events[3]["data"]["total_attempts"], 1);
    assert_eq!(
        (
            events[3]["data"]["last_error"]["code"].as_str(),
            events[3]["data"]["last_error"]["message"].as_str()
        ),
        (Some("boom"), Some("failed"))
    );

    // Scheduled, cancelled and expired jobs, and a paused queue.
    let (_, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "life.later", "args": [], "options": { "queue": "later", "delay_until": "+PT1H" } }),
        )
        .await;
    let later = body["job"]["id"].as_str().unwrap().to_string();
    let (status, _) = ojs.call("DELETE", &format!("/ojs/v1/jobs/{later}"), None).await;
    assert_eq!(status, 200);
    let events = events_of(&ojs, &later, 3).await;
    assert_eq!(kinds(&events), ["job.enqueued", "job.scheduled", "job.cancelled"]);
    assert_eq!(events[1]["data"]["scheduled_at"], body["job"]["scheduled_at"]);
    assert_eq!(events[2]["data"]["previous_state"], "scheduled");

    let (_, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "life.stale", "args": [], "options": { "queue": "stale", "expires_at": "+PT1S" } }),
        )
        .await;
    let stale = body["job"]["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // A fetch runs the promotion that finds it expired.
    assert!(ojs.fetch("stale", "w").await.is_none());
    let events = events_of(&ojs, &stale, 2).await;
    assert_eq!(kinds(&events), ["job.enqueued", "job.expired"]);
    assert!(events[1]["data"]["ttl_ms"].as_i64().unwrap() >= 900, "{}", events[1]);
    assert!(events[1]["data"]["created_at"].is_string() && events[1]["data"]["expired_at"].is_string());

    for action in ["pause", "resume"] {
        let (status, body) = ojs.post(&format!("/ojs/v1/queues/later/{action}"), json!({})).await;
        assert_eq!(status, 200, "{body}");
    }
    let events = events_of(&ojs, "later", 2).await;
    assert_eq!(kinds(&events), ["queue.paused", "queue.resumed"]);
    assert_eq!(events[0]["data"]["queue"], "later");
    gateway.stop().await;
}

/// A replay (`?after=0`, `Last-Event-ID`) queries the log after its stream opened, when the
/// stream's admission slot is given back: each of its queries takes a slot again, so any number
/// of replays hold no more of the pool than admission allows. Here two replays wait on a lock
/// taken on the log, each holding a slot. Fails before: they ran outside admission (none
/// active while both queries waited).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_queries_within_an_admission_slot() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (status, _) = ojs
        .post("/ojs/v1/jobs", json!({"type": "t", "queue": "replayed", "args": []}))
        .await;
    assert_eq!(status, 201);
    let mut sql = gateway.sql().await;
    let lock = sql.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE ojs.events IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let mut first = EventReader::open(&ojs, "after=0", None).await;
    let mut second = EventReader::open(&ojs, "", Some("0")).await;
    let watcher = gateway.sql().await;
    // The hub's poller waits on the lock too, outside admission: one slot a replay.
    common::eventually(
        Duration::from_secs(30),
        "each replay waiting on the lock holds a slot",
        || async {
            let active = gateway.metric("pgvs3_admission_active{protocol=\"ojs\"}").await;
            (common::lock_waiters(&watcher).await >= 2 && active == Some(2.0)).then_some(())
        },
    )
    .await;
    lock.commit().await.unwrap();
    for reader in [&mut first, &mut second] {
        assert_eq!(reader.next_event().await.1, "job.enqueued");
    }
    common::eventually(Duration::from_secs(30), "the slots given back", || async {
        (gateway.metric("pgvs3_admission_active{protocol=\"ojs\"}").await == Some(0.0)).then_some(())
    })
    .await;
    gateway.stop().await;
}
