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
