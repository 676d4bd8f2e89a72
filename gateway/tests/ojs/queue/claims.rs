//! Claims and their fencing: exactly-once completion under concurrent workers, stale workers
//! refused, claims surviving a restart and lapsing, read-only mode, quiet workers, the per-job routes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_workers_complete_ten_thousand_jobs_exactly_once() {
    const JOBS: usize = 10_000;
    const WORKERS: usize = 16;
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let mut enqueued = Vec::with_capacity(JOBS);
    for batch in 0..JOBS / 100 {
        let jobs: Vec<Value> = (0..100)
            .map(|i| json!({ "type": "load.item", "args": [batch * 100 + i], "options": { "queue": "load" } }))
            .collect();
        let (status, body) = ojs.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
        assert_eq!(status, 201, "{body}");
        enqueued.extend(
            body["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|job| job["id"].as_str().unwrap().to_string()),
        );
    }
    assert_eq!(enqueued.len(), JOBS);

    let completions: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let ojs = ojs.clone();
            let completions = Arc::clone(&completions);
            tokio::spawn(async move {
                let worker = format!("worker-{w}");
                while let Some(job) = ojs.fetch("load", &worker).await {
                    let id = job["id"].as_str().unwrap().to_string();
                    let (status, body) = ojs
                        .post(
                            "/ojs/v1/workers/ack",
                            json!({ "job_id": id, "attempt": job["attempt"], "worker_id": worker }),
                        )
                        .await;
                    assert_eq!(status, 200, "{body}");
                    *completions.lock().unwrap().entry(id).or_default() += 1;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let completions = std::mem::take(&mut *completions.lock().unwrap());
    assert_eq!(completions.len(), JOBS, "every job completed");
    assert!(completions.values().all(|&n| n == 1), "no job completed twice");
    assert!(enqueued.iter().all(|id| completions.contains_key(id)));
    let sql = gateway.sql().await;
    let row = sql
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 'completed') AS completed, count(*) AS jobs, max(attempt) AS attempts FROM ojs.jobs",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>("completed"), row.get::<_, i64>("jobs")),
        (JOBS as i64, JOBS as i64)
    );
    assert_eq!(row.get::<_, i32>("attempts"), 1, "no job was claimed twice");
    gateway.stop().await;
}

#[tokio::test]
async fn a_stale_workers_ack_and_nack_are_refused() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "slow.task", "args": [], "options": { "queue": "fence", "visibility_timeout_ms": 200 } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["job"]["id"].as_str().unwrap().to_string();
    let first = ojs.fetch("fence", "worker-a").await.expect("worker A claims");
    assert_eq!(first["attempt"], 1);

    // Worker A stalls past its visibility timeout; the job reads as available again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = ojs.get(&format!("/ojs/v1/jobs/{id}")).await;
        if body["job"]["state"] == "available" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the claim never lapsed: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let second = ojs
        .fetch("fence", "worker-b")
        .await
        .expect("worker B claims the lapsed job");
    assert_eq!(second["id"], id.as_str());
    assert_eq!(second["attempt"], 2);

    for (path, body) in [
        ("/ojs/v1/workers/ack", json!({ "job_id": id, "attempt": 1 })),
        ("/ojs/v1/workers/ack", json!({ "job_id": id, "worker_id": "worker-a" })),
        (
            "/ojs/v1/workers/nack",
            json!({ "job_id": id, "attempt": 1, "error": { "message": "late" } }),
        ),
    ] {
        let (status, reply) = ojs.post(path, body).await;
        assert_eq!(status, 409, "{path}: {reply}");
        assert_eq!(reply["error"]["code"], "conflict");
    }
    // A progress report is fenced by its attempt too (a report is not an error: it is ignored).
    // Fails without the fence: worker A's report of attempt 1 landed on attempt 2.
    for (attempt, taken) in [(1, false), (2, true)] {
        let (status, reply) = ojs
            .post(
                &format!("/ojs/v1/jobs/{id}/progress"),
                json!({ "attempt": attempt, "progress": 0.1 * f64::from(attempt) }),
            )
            .await;
        assert_eq!((status, &reply["accepted"]), (200, &json!(taken)), "{reply}");
    }
    let (_, reply) = ojs.get(&format!("/ojs/v1/jobs/{id}/progress")).await;
    assert_eq!(reply["progress"], 0.2, "{reply}");
    let (status, reply) = ojs
        .post(
            "/ojs/v1/workers/ack",
            json!({ "job_id": id, "attempt": 2, "worker_id": "worker-b" }),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["state"], "completed");
    gateway.stop().await;
}

#[tokio::test]
async fn jobs_and_claims_survive_a_gateway_restart() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let jobs: Vec<Value> = (0..3)
        .map(|i| json!({ "type": "durable.task", "args": [i], "options": { "queue": "durable" } }))
        .collect();
    let (status, body) = ojs.post("/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(status, 201, "{body}");
    let claimed = ojs.fetch("durable", "worker-1").await.unwrap();
    let database_url = gateway.stop().await;

    let gateway = TestGateway::on(database_url).await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .get(&format!("/ojs/v1/jobs/{}", claimed["id"].as_str().unwrap()))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["job"]["state"], "active", "the claim outlives the gateway");
    let (status, body) = ojs
        .post("/ojs/v1/workers/ack", json!({ "job_id": claimed["id"], "attempt": 1 }))
        .await;
    assert_eq!(status, 200, "{body}");
    let mut rest = Vec::new();
    while let Some(job) = ojs.fetch("durable", "worker-2").await {
        rest.push(job["args"][0].as_i64().unwrap());
    }
    assert_eq!(rest, [1, 2], "the unclaimed jobs are still there, in order");
    gateway.stop().await;
}

#[tokio::test]
async fn a_read_only_database_serves_reads_and_refuses_writes() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (_, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "ro.task", "args": [], "options": { "queue": "ro" } }),
        )
        .await;
    let id = body["job"]["id"].as_str().unwrap().to_string();
    let workflow = ojs
        .create_workflow(json!({ "type": "chain", "steps": [job_in("ro-flow", "ro.step", json!([]))] }))
        .await;
    // A hot standby refuses writes with SQLSTATE 25006, as a read-only default does. The gateway
    // migrated at start; its connections are cut so the pool reconnects under the new default.
    // Two statements, not one batch: a batch is one transaction, and a connection re-opened
    // before it commits would still get the old default.
    let sql = gateway.sql().await;
    sql.execute(
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$",
        &[],
    )
    .await
    .unwrap();
    sql.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
        &[],
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while ojs.get(&format!("/ojs/v1/jobs/{id}")).await.0 != 200 {
        assert!(tokio::time::Instant::now() < deadline, "reads never recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = ojs.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!((status, body["job"]["state"].as_str()), (200, Some("available")));
    let (status, body) = ojs.get("/ojs/v1/queues/ro/stats").await;
    assert_eq!((status, body["stats"]["available"].as_i64()), (200, Some(1)));
    let (status, _) = ojs.get("/ojs/manifest").await;
    assert_eq!(status, 200);
    assert_eq!(ojs.workflow(&workflow["id"]).await["state"], "running");
    for (path, request) in [
        ("/ojs/v1/jobs", json!({ "type": "ro.task", "args": [] })),
        ("/ojs/v1/workers/fetch", json!({ "queues": ["ro"] })),
        (
            "/ojs/v1/workflows",
            json!({ "type": "group", "jobs": [job_in("ro-flow", "ro.step", json!([]))] }),
        ),
    ] {
        let (status, body) = ojs.post(path, request).await;
        assert_eq!(status, 503, "{path}: {body}");
        assert_eq!(body["error"]["code"], "read_only");
        assert!(body["error"]["message"].as_str().unwrap().contains("standby"));
    }
    gateway.stop().await;
}

#[tokio::test]
async fn oversized_args_and_a_missing_token_get_ojs_errors() {
    let gateway = TestGateway::with_args(
        common::fresh_database().await,
        &["--ojs-max-args-bytes", "1024", "--ojs-token", "s3cret"],
    )
    .await;
    let mut ojs = Ojs::of(&gateway);
    let job = json!({ "type": "big.task", "args": ["x".repeat(2000)] });
    let (status, body) = ojs.post("/ojs/v1/jobs", job.clone()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (401, Some("unauthenticated")));
    let (status, _) = ojs.get("/ojs/manifest").await;
    assert_eq!(status, 200, "the manifest needs no token");

    ojs.token = Some("s3cret".into());
    let (status, body) = ojs.post("/ojs/v1/jobs", job).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request");
    assert!(body["error"]["message"].as_str().unwrap().contains("1024"));
    let (status, _) = ojs
        .post("/ojs/v1/jobs", json!({ "type": "big.task", "args": ["x".repeat(900)] }))
        .await;
    assert_eq!(status, 201);
    let (status, body) = ojs.post("/ojs/v1/admin/reset", json!({})).await;
    assert_eq!(status, 404, "reset exists only behind --ojs-allow-reset: {body}");
    gateway.stop().await;
}

#[tokio::test]
async fn a_claim_that_lapses_on_the_last_attempt_discards_the_job() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "stuck.task", "args": [], "options": { "queue": "stuck", "visibility_timeout_ms": 100,
                    "retry": { "max_attempts": 2, "on_exhaustion": "dead_letter" } } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["job"]["id"].as_str().unwrap().to_string();
    let wait_for = |state: &'static str| {
        let ojs = ojs.clone();
        let id = id.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let (_, body) = ojs.get(&format!("/ojs/v1/jobs/{id}")).await;
                if body["job"]["state"] == state {
                    return body["job"].clone();
                }
                assert!(tokio::time::Instant::now() < deadline, "never {state}: {body}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(ojs.fetch("stuck", "w").await.unwrap()["attempt"], 1);
    wait_for("available").await;
    assert_eq!(ojs.fetch("stuck", "w").await.unwrap()["attempt"], 2);
    let job = wait_for("discarded").await;
    assert_eq!(job["error"]["code"], "visibility_timeout");
    // The promotion makes it so in the table too: never offered again, and dead-lettered.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        assert!(
            ojs.fetch("stuck", "w").await.is_none(),
            "a spent job is not offered again"
        );
        let (_, listing) = ojs.get("/ojs/v1/dead-letter?queue=stuck").await;
        if listing["jobs"].as_array().is_some_and(|jobs| jobs.len() == 1) {
            assert_eq!(listing["jobs"][0]["id"], id.as_str());
            assert_eq!(listing["jobs"][0]["errors"].as_array().map(Vec::len), Some(2));
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never dead-lettered: {listing}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gateway.stop().await;
}

#[tokio::test]
async fn a_quiet_or_draining_worker_gets_no_new_jobs() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (status, _) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "shift.task", "args": [], "options": { "queue": "shift" } }),
        )
        .await;
    assert_eq!(status, 201);
    let beat = |body: Value| {
        let ojs = ojs.clone();
        async move {
            let (status, reply) = ojs.post("/ojs/v1/workers/heartbeat", body).await;
            assert_eq!(status, 200, "{reply}");
            reply
        }
    };
    let reply = beat(json!({ "worker_id": "w1", "state": "drain", "active_jobs": 0 })).await;
    assert_eq!(reply["state"], "drain");
    assert!(
        ojs.fetch("shift", "w1").await.is_none(),
        "a draining worker gets nothing"
    );
    let (status, health) = ojs.get("/ojs/v1/workers/w1/health").await;
    assert_eq!((status, health["state"].as_str()), (200, Some("drain")));
    beat(json!({ "worker_id": "w1", "state": "running" })).await;
    let job = ojs.fetch("shift", "w1").await.expect("running again, it gets the job");

    // An operator quiets a worker: its next heartbeat says so, and it gets no new jobs.
    let (status, body) = ojs.post("/ojs/v1/admin/workers/w1/quiet", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let reply = beat(json!({ "worker_id": "w1", "active_jobs": [job["id"]] })).await;
    assert_eq!(
        (reply["state"].as_str(), reply["directive"].as_str()),
        (Some("quiet"), Some("quiet"))
    );
    assert_eq!(
        reply["jobs_extended"],
        json!([job["id"]]),
        "its claims are still extended"
    );
    ojs.ack(&job, json!(null)).await;
    ojs.post(
        "/ojs/v1/jobs",
        json!({ "type": "shift.task", "args": [], "options": { "queue": "shift" } }),
    )
    .await;
    assert!(
        ojs.fetch("shift", "w1").await.is_none(),
        "a quieted worker gets nothing"
    );
    assert!(ojs.fetch("shift", "w2").await.is_some(), "other workers still do");
    let (status, _) = ojs.post("/ojs/v1/admin/workers/w1/resume", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(beat(json!({ "worker_id": "w1" })).await["directive"], "continue");

    let (_, workers) = ojs.get("/ojs/v1/admin/workers").await;
    let listed: Vec<&str> = workers["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["w1", "w2"]);
    let (status, _) = ojs.get("/ojs/v1/workers/nobody/health").await;
    assert_eq!(status, 404);
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/heartbeat",
            json!({ "worker_id": "w1", "state": "asleep" }),
        )
        .await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")));
    gateway.stop().await;
}

#[tokio::test]
async fn the_conformance_suites_directive_hook_works_only_in_conformance_mode() {
    let gateway = start().await;
    let conformance = TestGateway::with_args(gateway.database_url.clone(), &["--ojs-allow-reset"]).await;
    let ojs = Ojs::of(&gateway);
    let (status, _) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "hooked.task", "args": [], "options": { "queue": "hooked",
                    "metadata": { "test_directive": "terminate" } } }),
        )
        .await;
    assert_eq!(status, 201);
    let job = ojs.fetch("hooked", "w-hook").await.expect("the job");
    let beat = json!({ "worker_id": "w-hook", "active_jobs": [job["id"]] });
    let (_, plain) = ojs.post("/ojs/v1/workers/heartbeat", beat.clone()).await;
    assert_eq!(
        (plain["state"].as_str(), plain["directive"].as_str()),
        (Some("running"), Some("continue"))
    );
    let (_, hooked) = Ojs::of(&conformance).post("/ojs/v1/workers/heartbeat", beat).await;
    assert_eq!(
        (hooked["state"].as_str(), hooked["directive"].as_str()),
        (Some("terminate"), Some("terminate"))
    );
    assert_eq!(hooked["jobs_extended"], json!([job["id"]]));
    conformance.stop().await;
    gateway.stop().await;
}

/// The per-job forms of ACK and NACK (`/jobs/{id}/ack`, `/jobs/{id}/nack`) settle the job the
/// path names, and both forms answer with the job at the top and under `job`.
#[tokio::test]
async fn per_job_ack_and_nack_routes_settle_the_named_job() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let enqueue = async |queue: &str| {
        let (status, body) = ojs
            .post("/ojs/v1/jobs", json!({ "type": "route.task", "args": [], "options": { "queue": queue, "retry": { "max_attempts": 1 } } }))
            .await;
        assert_eq!(status, 201, "{body}");
        body["job"]["id"].as_str().unwrap().to_string()
    };
    let acked = enqueue("per-job").await;
    let claimed = ojs.fetch("per-job", "worker-r").await.expect("claimed");
    assert_eq!(claimed["id"], acked.as_str());
    let (status, reply) = ojs
        .post(
            &format!("/ojs/v1/jobs/{acked}/ack"),
            json!({ "result": { "ok": true } }),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        (reply["state"].as_str(), reply["job"]["state"].as_str()),
        (Some("completed"), Some("completed"))
    );
    assert_eq!(reply["job"]["id"], acked.as_str());
    assert_eq!(reply["acknowledged"], true);
    let (_, read) = ojs.get(&format!("/ojs/v1/jobs/{acked}")).await;
    assert_eq!(read["job"]["state"], "completed");

    let nacked = enqueue("per-job").await;
    ojs.fetch("per-job", "worker-r").await.expect("claimed");
    let (status, reply) = ojs
        .post(
            &format!("/ojs/v1/jobs/{nacked}/nack"),
            json!({ "error": { "message": "boom" } }),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["job"]["id"], nacked.as_str());
    let (_, read) = ojs.get(&format!("/ojs/v1/jobs/{nacked}")).await;
    assert_ne!(read["job"]["state"], "active", "{read}");

    // The path names the job; an id in the body cannot redirect the ack elsewhere.
    let other = enqueue("per-job").await;
    let (status, reply) = ojs
        .post(&format!("/ojs/v1/jobs/{other}/ack"), json!({ "job_id": acked }))
        .await;
    assert_eq!(status, 409, "a job nobody claimed cannot be acked: {reply}");
    let (status, _) = ojs.post("/ojs/v1/jobs/not-a-uuid/ack", json!({})).await;
    assert_eq!(status, 404);
    gateway.stop().await;
}

/// A job failed over and over (`requeue: true` spends no retry) with errors as large as a body
/// allows keeps its last hundred errors, each cut to size; so promotion, which appends to the
/// same history, never meets a row it cannot write. Fails without the bounds: 105 errors of
/// ~110 KB each were kept.
#[tokio::test]
async fn an_error_history_keeps_the_last_hundred_errors_each_cut_to_size() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "flaky.task", "args": [], "options": { "queue": "flaky" } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["job"]["id"].as_str().unwrap().to_string();
    let huge_message = "m".repeat(10_000);
    let huge_details = json!({ "dump": "d".repeat(100_000) });
    for n in 1..=105 {
        let job = ojs.fetch("flaky", "w").await.expect("the requeued job is there again");
        assert_eq!(job["attempt"], 1, "a release gives its attempt back");
        let (status, body) = ojs
            .post(
                "/ojs/v1/workers/nack",
                json!({ "job_id": id, "worker_id": "w", "requeue": true,
                        "error": { "code": "boom", "message": format!("{n}:{huge_message}"), "details": huge_details } }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = ojs.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(status, 200);
    let errors = body["job"]["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 100, "the last hundred");
    let first = |error: &Value| {
        error["message"]
            .as_str()
            .unwrap()
            .split(':')
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        (first(&errors[0]), first(&errors[99])),
        ("6".to_string(), "105".to_string())
    );
    for error in errors {
        let message = error["message"].as_str().unwrap();
        assert_eq!(message.len(), 4096, "the message cut to 4 KiB");
        assert_eq!(error["attempt"], 1);
        assert_eq!(error["code"], "boom");
        assert_eq!(error["truncated"], true);
        assert_eq!(
            error["details"]["truncated"], true,
            "details too large to keep: {}",
            error["details"]
        );
        assert!(error.to_string().len() <= 16 << 10, "each kept error is at most 16 KiB");
    }
    // An error within the bounds is kept as sent.
    ojs.fetch("flaky", "w").await.unwrap();
    let (status, _) = ojs
        .post(
            "/ojs/v1/workers/nack",
            json!({ "job_id": id, "requeue": true,
                    "error": { "code": "small", "message": "short", "details": { "k": 1 } } }),
        )
        .await;
    assert_eq!(status, 200);
    let (_, body) = ojs.get(&format!("/ojs/v1/jobs/{id}")).await;
    let last = body["job"]["errors"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (&last["message"], &last["details"], &last["truncated"]),
        (&json!("short"), &json!({ "k": 1 }), &Value::Null)
    );
    gateway.stop().await;
}

/// A promotion that fails (here a trigger refuses to lapse one claim; in the field, a row it
/// could not write) does not fail the fetch it rides with: that fetch's claim has committed, and
/// its job reaches the worker instead of being stranded active with an attempt spent. Nor does a
/// job past its `expires_at` that promotion did not get to discard go to a worker. Fails without
/// the fix: the fetch answered 500 and the job stayed active, handed to nobody.
#[tokio::test]
async fn a_failing_promotion_does_not_fail_the_fetch_that_claimed() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let enqueue = |job_type: &str| {
        let ojs = ojs.clone();
        let job = json!({ "type": job_type, "args": [], "options": { "queue": "promo" } });
        async move {
            let (status, body) = ojs.post("/ojs/v1/jobs", job).await;
            assert_eq!(status, 201, "{body}");
            body["job"]["id"].as_str().unwrap().to_string()
        }
    };
    let stuck = enqueue("poison.lapse").await;
    let expired = enqueue("expired.task").await;
    let sql = gateway.sql().await;
    sql.batch_execute(&format!(
        "UPDATE ojs.jobs SET state = 'active', attempt = 1, visible_until = now() - interval '1 second'
          WHERE id = '{stuck}';
         UPDATE ojs.jobs SET expires_at = now() - interval '1 second' WHERE id = '{expired}';
         CREATE FUNCTION refuse_lapse() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'this test refuses to lapse the claim'; END $$;
         CREATE TRIGGER refuse_lapse BEFORE UPDATE ON ojs.jobs FOR EACH ROW
           WHEN (OLD.type = 'poison.lapse' AND OLD.state = 'active') EXECUTE FUNCTION refuse_lapse();"
    ))
    .await
    .unwrap();
    let wanted = enqueue("work.task").await;
    // The gateway's first fetch promotes (nothing has yet), and that promotion fails.
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/fetch",
            json!({ "queues": ["promo"], "count": 10, "worker_id": "w" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let ids: Vec<&str> = body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [wanted.as_str()], "the claimed job, and not the expired one");
    let state = |id: String| {
        let sql = &sql;
        async move {
            sql.query_one("SELECT state FROM ojs.jobs WHERE id = $1", &[&id])
                .await
                .unwrap()
                .get::<_, String>("state")
        }
    };
    assert_eq!(state(stuck).await, "active", "the promotion did fail");
    assert_eq!(state(expired).await, "available", "left for a promotion to discard");
    gateway.stop().await;
}

/// A queue listed twice is scanned once: its one rate-limited job takes one start of its key,
/// and settling it gives that start back. Fails without the fix: the key counted two starts,
/// released one, and stayed full for ever after.
#[tokio::test]
async fn a_queue_listed_twice_takes_one_start_of_a_rate_limit() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "api.call", "args": [], "options": { "queue": "twice",
                    "rate_limit": { "key": "twice-key", "concurrency": 2 } } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/fetch",
            json!({ "queues": ["twice", "twice"], "count": 2 }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let jobs = body["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{body}");
    let (_, state) = ojs.get("/ojs/v1/rate-limits/twice-key").await;
    assert_eq!(state["concurrency"]["active"], 1, "{state}");
    ojs.ack(&jobs[0], json!(null)).await;
    let (_, state) = ojs.get("/ojs/v1/rate-limits/twice-key").await;
    assert_eq!(state["concurrency"]["active"], 0, "{state}");
    gateway.stop().await;
}

/// A worker that names itself settles, extends and reports progress on its own claims only: not
/// another worker's, and not one made by a fetch that named no worker. (An ack naming no worker
/// still settles any current claim, as the spec's ack form has it.) Fails without the fix: the
/// named ack settled the anonymous claim.
#[tokio::test]
async fn a_named_worker_settles_only_its_own_claims() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    for n in 0..2 {
        let (status, body) = ojs
            .post(
                "/ojs/v1/jobs",
                json!({ "type": "fenced.task", "args": [n], "options": { "queue": "fenced" } }),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let (_, body) = ojs.post("/ojs/v1/workers/fetch", json!({ "queues": ["fenced"] })).await;
    let anonymous = body["jobs"][0].clone();
    let id = anonymous["id"].as_str().unwrap();
    let named = ojs.fetch("fenced", "worker-a").await.unwrap();
    let named_id = named["id"].as_str().unwrap();
    let lease = |id: &str| {
        let id = id.to_string();
        let gateway = &gateway;
        async move {
            gateway
                .sql()
                .await
                .query_one("SELECT visible_until FROM ojs.jobs WHERE id = $1", &[&id])
                .await
                .unwrap()
                .get::<_, std::time::SystemTime>("visible_until")
        }
    };
    let before = lease(id).await;
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/heartbeat",
            json!({ "worker_id": "worker-b", "active_jobs": [id, named_id] }),
        )
        .await;
    assert_eq!((status, &body["jobs_extended"]), (200, &json!([])), "{body}");
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/progress",
            json!({ "job_id": id, "worker_id": "worker-b", "progress": 0.5 }),
        )
        .await;
    assert_eq!((status, &body["accepted"]), (200, &json!(false)), "{body}");
    assert_eq!(lease(id).await, before, "neither extended the anonymous claim");
    for (path, body) in [
        ("/ojs/v1/workers/ack", json!({ "job_id": id, "worker_id": "worker-b" })),
        (
            "/ojs/v1/workers/nack",
            json!({ "job_id": id, "worker_id": "worker-b", "error": { "message": "no" } }),
        ),
        (
            "/ojs/v1/workers/ack",
            json!({ "job_id": named_id, "worker_id": "worker-b" }),
        ),
        (
            "/ojs/v1/workers/nack",
            json!({ "job_id": named_id, "worker_id": "worker-b", "error": { "message": "no" } }),
        ),
    ] {
        let (status, reply) = ojs.post(path, body.clone()).await;
        assert_eq!(
            (status, &reply["error"]["code"]),
            (409, &json!("conflict")),
            "{body}: {reply}"
        );
    }
    let (status, body) = ojs.post("/ojs/v1/workers/ack", json!({ "job_id": id })).await;
    assert_eq!((status, &body["state"]), (200, &json!("completed")), "{body}");
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/ack",
            json!({ "job_id": named_id, "worker_id": "worker-a" }),
        )
        .await;
    assert_eq!((status, &body["state"]), (200, &json!("completed")), "{body}");
    gateway.stop().await;
}

/// A heartbeat or progress report asking for a shorter visibility timeout than the claim has
/// left does not shorten it. Fails without the fix: a heartbeat of 1 ms cut a 10-minute claim to
/// a millisecond (and a progress report to the job's own second), and the job lapsed to another
/// worker.
#[tokio::test]
async fn a_heartbeat_never_shortens_a_claim() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "long.task", "args": [], "options": { "queue": "long", "visibility_timeout_ms": 1000 } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["job"]["id"].as_str().unwrap().to_string();
    let (_, body) = ojs
        .post(
            "/ojs/v1/workers/fetch",
            json!({ "queues": ["long"], "worker_id": "w", "visibility_timeout_ms": 600_000 }),
        )
        .await;
    assert_eq!(body["jobs"][0]["id"], id.as_str(), "{body}");
    let sql = gateway.sql().await;
    let most_left = || async {
        sql.query_one(
            "SELECT visible_until > now() + interval '9 minutes' AS left FROM ojs.jobs WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get::<_, bool>("left")
    };
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/heartbeat",
            json!({ "worker_id": "w", "active_jobs": [id], "visibility_timeout_ms": 1 }),
        )
        .await;
    assert_eq!((status, &body["jobs_extended"]), (200, &json!([id])), "{body}");
    assert!(most_left().await, "the heartbeat left the 10-minute claim its time");
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/progress",
            json!({ "job_id": id, "worker_id": "w", "progress": 0.1 }),
        )
        .await;
    assert_eq!((status, &body["accepted"]), (200, &json!(true)), "{body}");
    assert!(most_left().await, "so did the progress report");
    gateway.stop().await;
}

/// A nack with `requeue: true` (a worker releasing a job it did not run, as at a terminate
/// directive) gives the claim's attempt back: a job of two attempts released once and then
/// failed once is retried, not discarded.
#[tokio::test]
async fn a_released_job_keeps_its_attempts() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "rq.task", "args": [], "options": { "queue": "rq", "retry": { "max_attempts": 2 } } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let job = ojs.fetch("rq", "w1").await.unwrap();
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/nack",
            json!({ "job_id": job["id"], "requeue": true, "error": { "code": "shutdown", "message": "released" } }),
        )
        .await;
    assert_eq!(
        (status, body["job"]["state"].as_str()),
        (200, Some("available")),
        "{body}"
    );
    let job = ojs.fetch("rq", "w2").await.unwrap();
    assert_eq!(job["attempt"], 1, "{job}");
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/nack",
            json!({ "job_id": job["id"], "attempt": 1, "error": { "code": "boom", "message": "failed" } }),
        )
        .await;
    assert_eq!(
        (status, body["job"]["state"].as_str()),
        (200, Some("retryable")),
        "{body}"
    );
    gateway.stop().await;
}
