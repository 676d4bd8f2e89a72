//! Jobs and queues: retention, the failure history, batch answers, bounded queues, rate limits.

use super::*;

#[tokio::test]
async fn finished_jobs_are_reaped_after_their_retention_in_batches() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let pool = gateway.gateway.store.pool().clone();
    // More finished jobs than one reaper batch.
    let jobs: Vec<Value> = (0..2500).map(|i| job_in("old", "old.task", json!([i]))).collect();
    let (status, body) = ojs.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(status, 201, "{body}");
    let sql = gateway.sql().await;
    sql.execute(
        "UPDATE ojs.jobs SET state = 'completed', completed_at = now() WHERE queue = 'old'",
        &[],
    )
    .await
    .unwrap();
    let mut keep = Vec::new();
    for queue in ["waiting", "dead"] {
        let (_, body) = ojs
            .post(
                "/ojs/v1/jobs",
                json!({ "type": "kept.task", "args": [], "options": { "queue": queue,
                        "retry": { "max_attempts": 1, "on_exhaustion": "dead_letter" } } }),
            )
            .await;
        keep.push(body["job"]["id"].as_str().unwrap().to_string());
    }
    let dead = ojs.fetch("dead", "w").await.unwrap();
    ojs.fail(&dead).await;
    // A running chain keeps its finished steps: the next step reads their results.
    let steps: Vec<Value> = (0..2).map(|i| job_in("flow", "flow.step", json!([i]))).collect();
    let workflow = ojs.create_workflow(json!({ "type": "chain", "steps": steps })).await;
    let step = ojs.fetch("flow", "w").await.unwrap();
    ojs.ack(&step, json!({ "kept": true })).await;
    keep.push(step["id"].as_str().unwrap().to_string());
    let (_, cancelled) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "gone.task", "args": [], "options": { "queue": "gone" } }),
        )
        .await;
    let cancelled_id = cancelled["job"]["id"].as_str().unwrap().to_string();
    let (status, _) = ojs
        .post(&format!("/ojs/v1/jobs/{cancelled_id}/cancel"), json!({}))
        .await;
    assert_eq!(status, 200);

    let young = pgvs3_gateway::maintenance::reap_finished_jobs(&pool, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(young, 0, "nothing is older than an hour");
    let reaped = pgvs3_gateway::maintenance::reap_finished_jobs(&pool, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(reaped, 2501, "the completed and the cancelled jobs");
    let (status, _) = ojs.get(&format!("/ojs/v1/jobs/{cancelled_id}")).await;
    assert_eq!(status, 404);
    for id in &keep {
        let (status, body) = ojs.get(&format!("/ojs/v1/jobs/{id}")).await;
        assert_eq!(status, 200, "{id} stays: {body}");
    }
    let next = ojs.fetch("flow", "w").await.unwrap();
    assert_eq!(next["parent_results"], json!([{ "kept": true }]));
    ojs.ack(&next, json!(null)).await;
    assert_eq!(ojs.workflow(&workflow["id"]).await["state"], "completed");
    // Once settled, the workflow goes with its jobs.
    pgvs3_gateway::maintenance::reap_finished_jobs(&pool, Duration::ZERO)
        .await
        .unwrap();
    let (status, _) = ojs
        .get(&format!("/ojs/v1/workflows/{}", workflow["id"].as_str().unwrap()))
        .await;
    assert_eq!(status, 404);
    gateway.stop().await;
}

#[tokio::test]
async fn a_bounded_queue_refuses_enqueues_past_its_depth_and_warns_before() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .call(
            "PUT",
            "/ojs/v1/admin/queues/bounded/config",
            Some(json!({ "backpressure": { "max_depth": 3, "warning_threshold": 0.5 } })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = ojs
        .call(
            "PUT",
            "/ojs/v1/admin/queues/bounded/config",
            Some(json!({ "backpressure": { "max_depth": 3, "strategy": "drop_oldest" } })),
        )
        .await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")));
    let job = || json!({ "type": "bounded.task", "args": [], "options": { "queue": "bounded" } });
    let header = |headers: &http::HeaderMap, name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_string());

    let (status, headers, _) = ojs.exchange("POST", "/ojs/v1/jobs", Some(job())).await;
    assert_eq!(status, 201);
    assert_eq!(
        header(&headers, "x-ojs-queue-pressure"),
        None,
        "1 of 3 is below the warning"
    );
    let (status, headers, _) = ojs.exchange("POST", "/ojs/v1/jobs", Some(job())).await;
    assert_eq!(status, 201);
    assert_eq!(header(&headers, "x-ojs-queue-pressure").as_deref(), Some("0.67"));
    assert_eq!(header(&headers, "x-ojs-queue-bound").as_deref(), Some("3"));
    // A batch that does not fit is refused whole.
    let (status, headers, body) = ojs
        .exchange("POST", "/ojs/v1/jobs/batch", Some(json!({ "jobs": [job(), job()] })))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("QUEUE_FULL")),
        "{body}"
    );
    assert!(header(&headers, "retry-after").is_some());
    assert_eq!(header(&headers, "x-ojs-queue-depth").as_deref(), Some("2"));
    let (status, body) = ojs.post("/ojs/v1/jobs", job()).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = ojs.post("/ojs/v1/jobs", job()).await;
    assert_eq!(
        (status, body["error"]["details"]["bound"].as_i64()),
        (429, Some(3)),
        "{body}"
    );
    let (_, stats) = ojs.get("/ojs/v1/queues/bounded/stats").await;
    assert_eq!(
        (stats["stats"]["depth"].as_i64(), stats["stats"]["max_depth"].as_i64()),
        (Some(3), Some(3))
    );
    let (_, events) = ojs.get("/ojs/v1/events?types=backpressure.rejected").await;
    assert_eq!(events["events"].as_array().map(Vec::len), Some(2), "{events}");

    // A claimed job no longer waits in the queue: there is room again.
    ojs.fetch("bounded", "w").await.unwrap();
    let (status, body) = ojs.post("/ojs/v1/jobs", job()).await;
    assert_eq!(status, 201, "{body}");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_limits_hold_concurrent_fetchers_to_the_keys_limits_and_skip_to_other_jobs() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let limited = |n: i64| {
        json!({ "type": "api.call", "args": [n], "options": { "queue": "api",
                "rate_limit": { "key": "partner-api", "concurrency": 3 } } })
    };
    let (status, headers, body) = ojs.exchange("POST", "/ojs/v1/jobs", Some(limited(0))).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(headers.get("x-ratelimit-limit").map(|v| v.to_str().unwrap()), Some("3"));
    let jobs: Vec<Value> = (1..20).map(limited).collect();
    let (status, body) = ojs.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(status, 201, "{body}");

    // Eight fetchers at once: the key's row admits exactly three starts.
    let fetchers: Vec<_> = (0..8)
        .map(|w| {
            let ojs = ojs.clone();
            tokio::spawn(async move { ojs.fetch("api", &format!("worker-{w}")).await })
        })
        .collect();
    let mut started = Vec::new();
    for fetcher in fetchers {
        started.extend(fetcher.await.unwrap());
    }
    assert_eq!(started.len(), 3, "concurrency 3 admits three of eight fetchers");
    assert!(ojs.fetch("api", "late").await.is_none(), "the key is full");

    // Jobs without a limit (or with a key that has room) are not held up behind a full key.
    let (status, _) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "api.free", "args": [], "options": { "queue": "api" } }),
        )
        .await;
    assert_eq!(status, 201);
    let free = ojs.fetch("api", "late").await.expect("an unlimited job is skipped to");
    assert_eq!(free["type"], "api.free");
    let (status, state) = ojs.get("/ojs/v1/rate-limits/partner-api").await;
    assert_eq!(status, 200, "{state}");
    assert_eq!(state["concurrency"], json!({ "limit": 3, "active": 3, "available": 0 }));
    assert_eq!(state["waiting_count"], 17);

    // Settling a claim either way gives its slot back, in the same transaction.
    ojs.ack(&started[0], json!(null)).await;
    ojs.fail(&started[1]).await;
    let next: Vec<Value> = [
        ojs.fetch("api", "w").await,
        ojs.fetch("api", "w").await,
        ojs.fetch("api", "w").await,
    ]
    .into_iter()
    .flatten()
    .collect();
    assert_eq!(next.len(), 2, "two slots came back");
    let (_, state) = ojs.get("/ojs/v1/rate-limits/partner-api").await;
    assert_eq!(state["concurrency"]["active"], 3);
    gateway.stop().await;
}

#[tokio::test]
async fn a_rate_window_holds_further_starts_until_it_closes() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    for n in 0..2 {
        let (status, body) = ojs
            .post(
                "/ojs/v1/jobs",
                json!({ "type": "tick.task", "args": [n], "options": { "queue": "ticks",
                        "rate_limit": { "key": "ticker", "rate": { "limit": 1, "period": "PT1S" } } } }),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let first = ojs.fetch("ticks", "w").await.expect("the window has room for one");
    ojs.ack(&first, json!(null)).await;
    assert!(
        ojs.fetch("ticks", "w").await.is_none(),
        "one start per window, finished or not"
    );
    let (_, state) = ojs.get("/ojs/v1/rate-limits/ticker").await;
    assert_eq!(state["rate"]["current_count"], 1, "{state}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let second = loop {
        if let Some(job) = ojs.fetch("ticks", "w").await {
            break job;
        }
        assert!(tokio::time::Instant::now() < deadline, "the window never closed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(second["args"], json!([1]));
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "tick.task", "args": [], "options": { "rate_limit": { "key": "ticker", "on_limit": "drop" } } }),
        )
        .await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")));
    gateway.stop().await;
}

#[tokio::test]
async fn every_failure_is_kept_with_its_type_message_and_attempt() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "flaky.task", "args": [], "options": { "queue": "flaky",
                    "retry": { "max_attempts": 4, "initial_interval": "PT0.01S", "jitter": false } } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let failures = [
        ("ConnectionTimeout", "Database connection timed out"),
        ("RateLimitExceeded", "API rate limit reached"),
        ("InternalServerError", "Unexpected null reference"),
    ];
    for (kind, message) in failures {
        let job = loop {
            if let Some(job) = ojs.fetch("flaky", "w").await {
                break job;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let (status, body) = ojs
            .post(
                "/ojs/v1/workers/nack",
                json!({ "job_id": job["id"], "error": { "type": kind, "message": message } }),
            )
            .await;
        assert_eq!((status, body["state"].as_str()), (200, Some("retryable")), "{body}");
    }
    let id = body["job"]["id"].as_str().unwrap();
    let (_, body) = ojs.get(&format!("/ojs/v1/jobs/{id}")).await;
    let history: Vec<(&str, &str, i64)> = body["job"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["message"].as_str().unwrap(),
                e["attempt"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        history,
        failures
            .iter()
            .zip(1..)
            .map(|((kind, message), attempt)| (*kind, *message, attempt))
            .collect::<Vec<_>>()
    );
    gateway.stop().await;
}

#[tokio::test]
async fn a_batch_answers_with_each_jobs_summary_and_reads_show_the_whole_job() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let jobs = json!({ "jobs": [
        { "type": "report.build", "args": [{ "big": "x".repeat(2048) }], "meta": { "team": "ops" },
          "specversion": "1.0", "options": { "queue": "reports" } },
        { "type": "report.mail", "args": [], "options": { "queue": "reports", "delay_until": "+PT1H" } },
    ] });
    let (status, body) = ojs.post("/ojs/v1/jobs/batch", jobs).await;
    assert_eq!((status, body["count"].as_i64()), (201, Some(2)), "{body}");
    let first = &body["jobs"][0];
    assert_eq!(
        (first["type"].as_str(), first["queue"].as_str(), first["state"].as_str()),
        (Some("report.build"), Some("reports"), Some("available"))
    );
    assert!(first["created_at"].is_string() && first["args"].is_null(), "{first}");
    // What the client said about the job itself comes back: its meta and spec version.
    assert_eq!(first["meta"]["team"], "ops", "{first}");
    assert_eq!(first["specversion"], "1.0", "{first}");
    assert_eq!(body["jobs"][1]["state"], "scheduled");
    assert!(body["jobs"][1]["scheduled_at"].is_string());
    let (_, read) = ojs
        .get(&format!("/ojs/v1/jobs/{}", first["id"].as_str().unwrap()))
        .await;
    assert_eq!(read["job"]["args"][0]["big"].as_str().map(str::len), Some(2048));
    assert_eq!(read["job"]["meta"]["team"], "ops");
    gateway.stop().await;
}

/// A batch's answer gives back, for each job, the `version` and `meta` the client sent with it
/// (the HTTP binding's batch example; official runners compare them).
#[tokio::test]
async fn a_batch_answer_keeps_each_jobs_version_and_meta() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let jobs = json!([
        { "type": "report.build", "args": [1], "version": "2", "meta": { "tenant": "a", "trace": "t-1" },
          "options": { "queue": "reports" } },
        { "type": "report.build", "args": [2], "meta": { "tenant": "b" }, "options": { "queue": "reports" } },
        { "type": "report.build", "args": [3], "version": "3", "options": { "queue": "reports" } },
    ]);
    let (status, body) = ojs.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(status, 201, "{body}");
    let answered: Vec<(Value, Value)> = body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| (job["version"].clone(), job["meta"].clone()))
        .collect();
    assert_eq!(
        answered,
        vec![
            (json!("2"), json!({ "tenant": "a", "trace": "t-1" })),
            (Value::Null, json!({ "tenant": "b" })),
            (json!("3"), Value::Null),
        ]
    );
    gateway.stop().await;
}

/// `on_conflict: replace` reads the duplicate unlocked, then cancels it: a duplicate acked in
/// between (its worker answered 200) stays completed, and the new job goes in all the same.
#[tokio::test]
async fn a_unique_replace_leaves_a_duplicate_acked_meanwhile_completed() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let job =
        json!({ "type": "u.task", "args": [1], "options": { "queue": "uq", "unique": { "on_conflict": "replace" } } });
    let (status, body) = ojs.post("/ojs/v1/jobs", job.clone()).await;
    assert_eq!(status, 201, "{body}");
    let first = ojs.fetch("uq", "w1").await.unwrap();
    let id = first["id"].as_str().unwrap().to_string();

    // A lock that holds the ack back until the replace has read the job as active.
    let mut holder = gateway.sql().await;
    let hold = holder.transaction().await.unwrap();
    hold.execute("SELECT 1 FROM ojs.jobs WHERE id = $1 FOR SHARE", &[&id])
        .await
        .unwrap();
    let sql = gateway.sql().await;
    let acker = ojs.clone();
    let ack = tokio::spawn(async move {
        acker
            .post(
                "/ojs/v1/workers/ack",
                json!({ "job_id": first["id"], "attempt": first["attempt"], "result": {"ok": true} }),
            )
            .await
    });
    until_waiting(&sql, "completed_at = now(), result", 1).await;
    let replacer = ojs.clone();
    let replace = tokio::spawn(async move { replacer.post("/ojs/v1/jobs", job).await });
    until_waiting(&sql, "unique_key = NULL", 1).await;
    hold.commit().await.unwrap();

    let (status, body) = ack.await.unwrap();
    assert_eq!(status, 200, "the ack was accepted: {body}");
    let (status, body) = replace.await.unwrap();
    assert_eq!(status, 201, "{body}");
    let new_id = body["job"]["id"].as_str().unwrap().to_string();
    assert_ne!(new_id, id);
    let (_, body) = ojs.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(
        body["job"]["state"], "completed",
        "an acknowledged job stays completed: {body}"
    );
    let (_, body) = ojs.get(&format!("/ojs/v1/jobs/{new_id}")).await;
    assert_eq!(body["job"]["state"], "available", "{body}");
    gateway.stop().await;
}

/// Concurrent duplicates of a unique job: one is created, the others refused.
#[tokio::test]
async fn concurrent_duplicates_of_a_unique_job_create_one() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let job = json!({ "type": "u.task", "args": [7], "options": { "queue": "uq2", "unique": {} } });
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (client, job) = (ojs.clone(), job.clone());
        tasks.push(tokio::spawn(async move { client.post("/ojs/v1/jobs", job).await.0 }));
    }
    let mut codes = Vec::new();
    for task in tasks {
        codes.push(task.await.unwrap());
    }
    assert_eq!(codes.iter().filter(|c| **c == 201).count(), 1, "{codes:?}");
    gateway.stop().await;
}

/// A job whose `expires_at` passed before it ran is discarded by promotion (with no
/// `completed_at`: it never ran) and reaped after its retention like any finished job (the
/// reaper went by `completed_at` alone and kept expired jobs for ever).
#[tokio::test]
async fn expired_jobs_are_reaped_like_other_finished_ones() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let pool = gateway.gateway.store.pool().clone();
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "x.task", "args": [], "options": { "queue": "xq" } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["job"]["id"].as_str().unwrap().to_string();
    let sql = gateway.sql().await;
    sql.execute(
        "UPDATE ojs.jobs SET expires_at = now() - interval '1 s' WHERE id = $1",
        &[&id],
    )
    .await
    .unwrap();
    let job = promoted(&ojs, &id, "available").await;
    // As the conformance suite's expired job: discarded, never completed.
    assert_eq!(
        (&job["state"], &job["completed_at"]),
        (&json!("discarded"), &Value::Null),
        "{job}"
    );
    let reaped = pgvs3_gateway::maintenance::reap_finished_jobs(&pool, Duration::ZERO)
        .await
        .unwrap();
    let (status, body) = ojs.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!((reaped, status), (1, 404), "the expired job is reaped: {body}");
    gateway.stop().await;
}

/// Enqueues into a bounded queue take turns: two that overlap cannot both see the queue below
/// its bound, so `max_depth: 1` holds one job. The lock held here (on the rate-limit key both
/// jobs name, which every enqueue of them updates) makes the first wait inside its insert
/// statement while the second comes in.
#[tokio::test]
async fn concurrent_enqueues_do_not_overfill_a_bounded_queue() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let job = json!({ "type": "b.task", "args": [], "options": { "queue": "bp",
                      "rate_limit": { "key": "bk", "concurrency": 10 } } });
    // The key's row exists (created by a job in another queue).
    let mut other = job.clone();
    other["options"]["queue"] = json!("elsewhere");
    assert_eq!(ojs.post("/ojs/v1/jobs", other).await.0, 201);
    let (status, _) = ojs
        .call(
            "PUT",
            "/ojs/v1/admin/queues/bp/config",
            Some(json!({ "backpressure": { "max_depth": 1 } })),
        )
        .await;
    assert_eq!(status, 200);
    let mut holder = gateway.sql().await;
    let hold = holder.transaction().await.unwrap();
    hold.execute(
        "SELECT 1 FROM ojs.rate_limits WHERE key = ojs.tenant_key('default', 'bk') FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let sql = gateway.sql().await;
    let mut enqueues = Vec::new();
    for _ in 0..2 {
        let (client, job) = (ojs.clone(), job.clone());
        enqueues.push(tokio::spawn(async move { client.post("/ojs/v1/jobs", job).await }));
    }
    until_waiting(&sql, "backpressure", 2).await;
    hold.commit().await.unwrap();
    let mut statuses = Vec::new();
    for enqueue in enqueues {
        let (status, body) = enqueue.await.unwrap();
        statuses.push((status, body["error"]["code"].as_str().map(str::to_owned)));
    }
    statuses.sort();
    assert_eq!(statuses, [(201, None), (429, Some("QUEUE_FULL".to_owned()))]);
    let (_, stats) = ojs.get("/ojs/v1/queues/bp/stats").await;
    assert_eq!(stats["stats"]["depth"].as_i64(), Some(1), "max_depth 1: {stats}");
    gateway.stop().await;
}
