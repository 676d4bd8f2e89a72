//! OJS events beyond the log: job progress reported by a worker (stored on the job, logged as
//! `job.progress`), and webhooks (the webhooks extension) delivered from the outbox to a real
//! HTTP receiver on 127.0.0.1: signed, filtered, owed only by what commits, kept through a
//! receiver outage, dead-lettered after the last attempt and retried on request.

mod common;
mod receiver;

use std::collections::HashSet;
use std::time::Duration;

use common::ojs::Ojs;
use common::{TestGateway, eventually};
use receiver::{Receiver, signed_by};
use serde_json::{Value, json};

/// A gateway that retries webhooks quickly, so outages and dead letters fit in a test.
async fn start(max_attempts: &str) -> TestGateway {
    TestGateway::with_args(
        common::fresh_database().await,
        &[
            "--webhook-poll",
            "50ms",
            "--webhook-backoff",
            "100ms",
            "--webhook-max-backoff",
            "400ms",
            "--webhook-timeout",
            "2s",
            "--webhook-max-attempts",
            max_attempts,
        ],
    )
    .await
}

async fn subscribe(ojs: &Ojs, url: &str, events: Value, secret: &str) -> String {
    let (status, body) = ojs
        .post(
            "/ojs/v1/webhooks",
            json!({ "url": url, "events": events, "secret": secret, "metadata": { "team": "t" } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert!(body["webhook"].get("secret").is_none(), "the secret is not echoed");
    body["webhook"]["id"].as_str().unwrap().to_string()
}

/// Enqueues a job on `queue`, claims it and acks it; its id.
async fn complete_one(ojs: &Ojs, queue: &str) -> String {
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "t.work", "args": [1], "options": { "queue": queue } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let job = ojs.fetch(queue, "w1").await.expect("the job just enqueued");
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/ack",
            json!({ "job_id": job["id"], "result": { "ok": true } }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    job["id"].as_str().unwrap().to_string()
}

async fn outbox_rows(gw: &TestGateway) -> i64 {
    gw.sql()
        .await
        .query_one("SELECT count(*) FROM pgvs3.outbox", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_reports_progress_readable_on_the_job_and_as_an_event() {
    let gw = start("3").await;
    let ojs = Ojs::of(&gw);
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "csv.convert", "args": [], "options": { "queue": "p" } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["job"]["id"].as_str().unwrap().to_string();
    // Not claimed yet: nothing to report progress on.
    let (status, body) = ojs
        .call(
            "PUT",
            &format!("/ojs/v1/jobs/{id}/progress"),
            Some(json!({ "progress": 0.1 })),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{body}"
    );

    ojs.fetch("p", "w1").await.expect("the job");
    let (status, body) = ojs
        .call(
            "PUT",
            &format!("/ojs/v1/jobs/{id}/progress"),
            Some(json!({ "progress": 0.5, "data": { "rows": 500 }, "checkpoint": { "offset": 500 } })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["job"]["progress"]["progress"], 0.5);
    // Another worker cannot report on a job it does not hold; bad values are 400s.
    let (status, _) = ojs
        .call(
            "PUT",
            &format!("/ojs/v1/jobs/{id}/progress"),
            Some(json!({ "progress": 0.9, "worker_id": "w2" })),
        )
        .await;
    assert_eq!(status, 409);
    for bad in [
        json!({ "progress": 1.5 }),
        json!({ "checkpoint": {} }),
        json!({ "data": [1] }),
    ] {
        let (status, body) = ojs.call("PUT", &format!("/ojs/v1/jobs/{id}/progress"), Some(bad)).await;
        assert_eq!(status, 400, "{body}");
    }
    // The SDKs' older worker route, with a percentage and a message.
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/progress",
            json!({ "job_id": id, "worker_id": "w1", "percentage": 75, "message": "three quarters" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let (_, body) = ojs.get(&format!("/ojs/v1/jobs/{id}")).await;
    let progress = &body["job"]["progress"];
    assert_eq!(progress["progress"], 0.75);
    assert_eq!(progress["data"]["message"], "three quarters");
    let (_, body) = ojs.get("/ojs/v1/events?types=job.progress").await;
    let events = body["events"].as_array().unwrap();
    assert_eq!(events.len(), 2, "{body}");
    assert_eq!(events[0]["subject"], id.as_str());
    assert_eq!(events[0]["data"]["progress"], 0.5);
    assert_eq!(events[0]["data"]["data"]["rows"], 500);
    assert_eq!(events[1]["data"]["progress"], 0.75);
    assert_eq!(events[1]["data"]["worker_id"], "w1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhooks_get_the_events_they_match_signed_and_nothing_is_lost_while_the_receiver_is_down() {
    let gw = start("50").await;
    let ojs = Ojs::of(&gw);
    let mut receiver = Receiver::start().await;
    let id = subscribe(
        &ojs,
        &receiver.url("/hooks/ojs"),
        json!(["job.completed"]),
        "whsec_test",
    )
    .await;
    let (status, body) = ojs.get(&format!("/ojs/v1/webhooks/{id}")).await;
    assert_eq!(
        (status, body["webhook"]["events"].clone()),
        (200, json!(["job.completed"]))
    );
    let (_, body) = ojs.get("/ojs/v1/webhooks").await;
    assert_eq!(body["webhooks"].as_array().unwrap().len(), 1);

    let job = complete_one(&ojs, "hooks").await;
    let delivered = eventually(Duration::from_secs(10), "the completion delivered", || async {
        receiver.received().into_iter().next()
    })
    .await;
    assert!(signed_by(&delivered, "x-ojs", "whsec_test"), "{:?}", delivered.headers);
    assert!(!signed_by(&delivered, "x-ojs", "another secret"));
    assert!(delivered.header("x-ojs-delivery-id").starts_with("del_"));
    assert_eq!(delivered.header("x-ojs-event-type"), "job.completed");
    assert_eq!(delivered.header("content-type"), "application/json");
    let event = delivered.json();
    assert_eq!(
        (event["type"].as_str(), event["subject"].as_str()),
        (Some("job.completed"), Some(job.as_str()))
    );
    assert_eq!(event["specversion"], "1.0");
    assert_eq!(event["data"]["result"], json!({ "ok": true }));
    eventually(Duration::from_secs(5), "the delivered row deleted", || async {
        (outbox_rows(&gw).await == 0).then_some(())
    })
    .await;
    // Only what the subscription matches was owed: job.enqueued and job.started were not.
    assert_eq!(receiver.received().len(), 1);

    // Down: completions are owed and retried, none lost.
    receiver.stop().await;
    let mut jobs = HashSet::new();
    for _ in 0..5 {
        jobs.insert(complete_one(&ojs, "hooks").await);
    }
    let sql = gw.sql().await;
    eventually(Duration::from_secs(10), "failed attempts counted", || async {
        let failing: i64 = sql
            .query_one(
                "SELECT count(*) FROM pgvs3.outbox WHERE attempts >= 2 AND last_error IS NOT NULL AND NOT dead",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        (failing == 5).then_some(())
    })
    .await;
    receiver.restart().await;
    eventually(
        Duration::from_secs(15),
        "every completion delivered after the outage",
        || async { (outbox_rows(&gw).await == 0).then_some(()) },
    )
    .await;
    let after: Vec<_> = receiver.received().into_iter().skip(1).collect();
    let subjects: HashSet<String> = after
        .iter()
        .map(|d| d.json()["subject"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(subjects, jobs, "each completion delivered");
    // At least once, and here exactly once: a duplicate needs a gateway to stop between the
    // answer and the delete. Every delivery has its own id, stable across its retries.
    let ids: HashSet<&str> = after.iter().map(|d| d.header("x-ojs-delivery-id")).collect();
    assert_eq!((after.len(), ids.len()), (5, 5));
    assert!(after.iter().all(|d| signed_by(d, "x-ojs", "whsec_test")));

    // Unsubscribed: nothing more is owed.
    let (status, _) = ojs.call("DELETE", &format!("/ojs/v1/webhooks/{id}"), None).await;
    assert_eq!(status, 200);
    complete_one(&ojs, "hooks").await;
    assert_eq!(outbox_rows(&gw).await, 0);
    let (status, _) = ojs.get(&format!("/ojs/v1/webhooks/{id}")).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delivery_is_dead_lettered_after_its_last_attempt_and_retried_on_request() {
    let gw = start("3").await;
    let ojs = Ojs::of(&gw);
    let receiver = Receiver::start().await;
    receiver.answer(500);
    let id = subscribe(&ojs, &receiver.url("/failing"), json!(["job.*"]), "s").await;
    let (status, _) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "t.dead", "args": [], "options": { "queue": "dl" } }),
        )
        .await;
    assert_eq!(status, 201);
    let deliveries = eventually(Duration::from_secs(10), "the delivery dead-lettered", || async {
        let (_, body) = ojs.get(&format!("/ojs/v1/webhooks/{id}/deliveries")).await;
        let deliveries = body["deliveries"].as_array().cloned().unwrap_or_default();
        deliveries
            .iter()
            .all(|d| d["status"] == "dead_letter")
            .then_some(deliveries)
            .filter(|d| !d.is_empty())
    })
    .await;
    assert_eq!(deliveries.len(), 1, "one event: job.enqueued");
    assert_eq!(deliveries[0]["attempts"], 3);
    assert_eq!(deliveries[0]["event_type"], "job.enqueued");
    assert!(deliveries[0]["last_error"].as_str().unwrap().contains("500"));
    // Dead means no more attempts: exactly three were made.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(receiver.received().len(), 3);

    receiver.answer(204);
    let (status, body) = ojs
        .post(&format!("/ojs/v1/webhooks/{id}/deliveries/retry"), json!({}))
        .await;
    assert_eq!((status, body["retried"].as_i64()), (200, Some(1)));
    eventually(Duration::from_secs(10), "the retried delivery delivered", || async {
        (outbox_rows(&gw).await == 0).then_some(())
    })
    .await;
    let received = receiver.received();
    assert_eq!(received.len(), 4);
    assert_eq!(
        received[3].header("x-ojs-delivery-id"),
        received[0].header("x-ojs-delivery-id"),
        "a retry is the same delivery"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_committed_events_are_owed() {
    let gw = start("3").await;
    let ojs = Ojs::of(&gw);
    let receiver = Receiver::start().await;
    subscribe(&ojs, &receiver.url("/tx"), json!(["job.*", "queue.*"]), "s").await;
    // A batch refused whole by a queue's depth bound logs nothing, so owes nothing.
    let (status, _) = ojs
        .call(
            "PUT",
            "/ojs/v1/admin/queues/bounded/config",
            Some(json!({ "backpressure": { "max_depth": 1 } })),
        )
        .await;
    assert_eq!(status, 200);
    let job = json!({ "type": "t.b", "args": [], "options": { "queue": "bounded" } });
    let (status, _) = ojs.post("/ojs/v1/jobs/batch", json!({ "jobs": [job, job] })).await;
    assert_eq!(status, 429);
    // An event logged by a transaction that rolls back owes nothing; one that commits, one
    // delivery per subscription.
    let mut sql = gw.sql().await;
    let tx = sql.transaction().await.unwrap();
    tx.execute(
        "INSERT INTO ojs.events (id, type, queue, data) VALUES ('e-rolled-back', 'queue.paused', 'q', '{}')",
        &[],
    )
    .await
    .unwrap();
    let owed: i64 = tx
        .query_one("SELECT count(*) FROM pgvs3.outbox", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(owed, 1, "owed inside the transaction");
    tx.rollback().await.unwrap();
    assert_eq!(outbox_rows(&gw).await, 0);
    let (status, _) = ojs.post("/ojs/v1/queues/bounded/pause", json!({})).await;
    assert_eq!(status, 200);
    let delivered = eventually(Duration::from_secs(10), "the committed event delivered", || async {
        receiver.received().into_iter().next()
    })
    .await;
    assert_eq!(delivered.json()["type"], "queue.paused");
    eventually(Duration::from_secs(5), "the outbox empty", || async {
        (outbox_rows(&gw).await == 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let types: Vec<String> = receiver
        .received()
        .iter()
        .map(|d| d.json()["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        types,
        vec!["queue.paused"],
        "the refused batch and the rolled-back event owed nothing"
    );

    // Registration is checked.
    let (status, body) = ojs
        .post(
            "/ojs/v1/webhooks",
            json!({ "url": "ftp://x", "events": ["*"], "secret": "s" }),
        )
        .await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")));
}
