//! Fair scheduling (ext-fair-scheduling) over HTTP against a real PostgreSQL: a fetch's
//! `round-robin` strategy alternates between its queues, `weighted` shares fetches by weight, the
//! strict order stays the default, a tenant with a deep backlog cannot hold up another tenant's
//! jobs in the same queue, the scheduling stats show how the last minute's claims spread over
//! the queues, and what is not offered (`least-loaded`, worker pools) is refused, not ignored.

use pgvs3_testkit as common;

use common::TestGateway;
use common::ojs::Ojs;
use serde_json::{Value, json};

async fn fill(ojs: &Ojs, queue: &str, count: usize) {
    let jobs: Vec<Value> = (0..count)
        .map(|n| json!({ "type": "fair.task", "args": [n], "options": { "queue": queue } }))
        .collect();
    let (status, body) = ojs.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(status, 201, "{body}");
}

async fn fetch(ojs: &Ojs, body: Value) -> Vec<Value> {
    let (status, answer) = ojs.post("/ojs/v1/workers/fetch", body).await;
    assert_eq!(status, 200, "{answer}");
    answer["jobs"].as_array().unwrap().clone()
}

fn queues_of(jobs: &[Value]) -> Vec<&str> {
    jobs.iter().map(|job| job["queue"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn round_robin_alternates_between_queues_and_strict_stays_the_default() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    fill(&ojs, "rr-a", 3).await;
    fill(&ojs, "rr-b", 3).await;

    let jobs = fetch(
        &ojs,
        json!({ "queues": ["rr-a", "rr-b"], "count": 4, "strategy": "round-robin" }),
    )
    .await;
    let queues = queues_of(&jobs);
    assert_eq!(queues.len(), 4);
    assert!(
        queues.windows(2).all(|pair| pair[0] != pair[1]),
        "turns alternate: {queues:?}"
    );
    // Within each queue, FIFO still holds.
    for queue in ["rr-a", "rr-b"] {
        let args: Vec<i64> = jobs
            .iter()
            .filter(|job| job["queue"] == queue)
            .map(|job| job["args"][0].as_i64().unwrap())
            .collect();
        assert_eq!(args, [0, 1], "{queue}");
    }
    // Without a strategy, the listed order rules: rr-b's job comes only after rr-a's.
    let jobs = fetch(&ojs, json!({ "queues": ["rr-a", "rr-b"], "count": 2 })).await;
    assert_eq!(queues_of(&jobs), ["rr-a", "rr-b"]);
}

#[tokio::test]
async fn weighted_fetches_share_the_queues_by_weight() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    fill(&ojs, "w-heavy", 150).await;
    fill(&ojs, "w-light", 150).await;
    let mut from_heavy = 0;
    for _ in 0..100 {
        let jobs = fetch(
            &ojs,
            json!({ "queues": ["w-heavy", "w-light"], "weights": { "w-heavy": 3, "w-light": 1 } }),
        )
        .await;
        if queues_of(&jobs) == ["w-heavy"] {
            from_heavy += 1;
        }
    }
    // 3:1 of 100 fetches of one job: 75 expected, the standard deviation 4.3; strict order
    // would give 100, no weighting 50.
    assert!(
        (60..=90).contains(&from_heavy),
        "{from_heavy} of 100 from the heavier queue"
    );
    // A fetch of many takes from both in proportion, to within a job or so.
    let jobs = fetch(
        &ojs,
        json!({ "queues": ["w-heavy", "w-light"], "count": 40, "strategy": "weighted",
                "weights": { "w-heavy": 3 } }),
    )
    .await;
    let heavy = queues_of(&jobs).iter().filter(|q| **q == "w-heavy").count();
    assert_eq!(jobs.len(), 40);
    assert!((28..=32).contains(&heavy), "{heavy} of 40 from the heavier queue");
}

#[tokio::test]
async fn a_tenant_with_a_deep_backlog_does_not_hold_up_another_tenants_jobs() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let (heavy, light) = (ojs.as_tenant("heavy"), ojs.as_tenant("light"));
    for _ in 0..4 {
        fill(&heavy, "shared", 500).await;
    }
    fill(&light, "shared", 5).await;
    // The light tenant's worker gets its jobs at once, in order, though 2,000 older jobs of the
    // other tenant wait in the same queue: a claim reads one tenant's range of the queue.
    let jobs = fetch(&light, json!({ "queues": ["shared"], "count": 10 })).await;
    let args: Vec<i64> = jobs.iter().map(|job| job["args"][0].as_i64().unwrap()).collect();
    assert_eq!(args, [0, 1, 2, 3, 4]);
    let jobs = fetch(&heavy, json!({ "queues": ["shared"], "count": 10 })).await;
    assert_eq!(jobs.len(), 10);
    let waiting: i64 = gateway
        .sql()
        .await
        .query_one(
            "SELECT count(*) AS waiting FROM ojs.jobs WHERE tenant = 'heavy' AND state = 'available'",
            &[],
        )
        .await
        .unwrap()
        .get("waiting");
    assert_eq!(waiting, 1_990);
}

#[tokio::test]
async fn strategies_not_offered_are_refused() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    for (body, status, code) in [
        (
            json!({ "queues": ["a"], "strategy": "least-loaded" }),
            422,
            "unsupported_feature",
        ),
        (
            json!({ "queues": ["a"], "strategy": "fastest" }),
            400,
            "invalid_request",
        ),
        (
            json!({ "queues": ["a"], "weights": { "b": 2 } }),
            400,
            "invalid_request",
        ),
        (
            json!({ "queues": ["a"], "weights": { "a": 0 } }),
            400,
            "invalid_request",
        ),
        (
            json!({ "queues": ["a"], "weights": { "a": 1.5 } }),
            400,
            "invalid_request",
        ),
        (
            json!({ "queues": ["a"], "strategy": "round-robin", "weights": { "a": 2 } }),
            400,
            "invalid_request",
        ),
    ] {
        let (got, answer) = ojs.post("/ojs/v1/workers/fetch", body.clone()).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {answer}"
        );
    }
}

/// `GET /admin/scheduling/stats` (ojs-fair-scheduling §10.2) shows how the last minute's claims
/// spread over the queues, each queue's wait from due to claim, and its jobs active and
/// available now.
#[tokio::test]
async fn scheduling_stats_show_how_the_last_minutes_claims_spread_over_the_queues() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let (_, empty) = ojs.get("/ojs/v1/admin/scheduling/stats").await;
    assert_eq!(
        empty,
        json!({ "queues": [], "window": "PT1M", "stats": { "queues": [], "window": "PT1M" } })
    );
    fill(&ojs, "stats-a", 3).await;
    fill(&ojs, "stats-b", 2).await;
    fill(&ojs, "stats-c", 1).await;
    let jobs = fetch(&ojs, json!({ "queues": ["stats-a"], "count": 2 })).await;
    assert_eq!(jobs.len(), 2);
    let jobs = fetch(&ojs, json!({ "queues": ["stats-b"], "count": 1 })).await;
    let (status, body) = ojs
        .post("/ojs/v1/workers/ack", json!({ "job_id": jobs[0]["id"] }))
        .await;
    assert_eq!(status, 200, "{body}");

    let (status, stats) = ojs.get("/ojs/v1/admin/scheduling/stats").await;
    assert_eq!(status, 200, "{stats}");
    assert_eq!(stats["stats"]["queues"], stats["queues"], "{stats}");
    let queues = stats["queues"].as_array().unwrap();
    let shape: Vec<(&str, i64, i64, i64)> = queues
        .iter()
        .map(|queue| {
            (
                queue["name"].as_str().unwrap(),
                queue["dispatch_count_1m"].as_i64().unwrap(),
                queue["active_jobs"].as_i64().unwrap(),
                queue["available_jobs"].as_i64().unwrap(),
            )
        })
        .collect();
    // stats-b's claimed job is completed: it counts as a dispatch, not as active.
    assert_eq!(
        shape,
        [("stats-a", 2, 2, 1), ("stats-b", 1, 0, 1), ("stats-c", 0, 0, 1)],
        "{stats}"
    );
    let ratios: Vec<f64> = queues
        .iter()
        .map(|q| q["dispatch_ratio_1m"].as_f64().unwrap())
        .collect();
    assert!(
        (ratios[0] - 2.0 / 3.0).abs() < 1e-9 && (ratios[1] - 1.0 / 3.0).abs() < 1e-9 && ratios[2] == 0.0,
        "{ratios:?}"
    );
    // Claimed queues have a wait (the jobs were due when enqueued); an unclaimed one has none.
    assert!(queues[0]["avg_wait_ms"].as_i64().is_some_and(|ms| ms >= 0), "{stats}");
    assert!(queues[2]["avg_wait_ms"].is_null(), "{stats}");
}

/// Worker pools (§6, §10.1) are not built: their routes refuse rather than accept a pool whose
/// queues, strategy and concurrency limit nothing would keep.
#[tokio::test]
async fn worker_pools_are_refused_not_accepted() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let pool = json!({ "queues": ["critical"], "concurrency": 20, "strategy": "strict" });
    for (method, body) in [("PUT", Some(pool)), ("GET", None)] {
        let path = if method == "PUT" {
            "/ojs/v1/admin/pools/critical"
        } else {
            "/ojs/v1/admin/pools"
        };
        let (status, answer) = ojs.call(method, path, body).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (422, Some("unsupported_feature")),
            "{method} {path}: {answer}"
        );
    }
}
