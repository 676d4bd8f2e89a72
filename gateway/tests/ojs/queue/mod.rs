//! OJS queue properties over plain HTTP against a real PostgreSQL: exactly-once completion under
//! 16 concurrent workers, fencing of stale workers, durability across a restart, read-only mode,
//! size limits and the bearer token.

use pgvs3_testkit as common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::TestGateway;
use common::ojs::Ojs;
use serde_json::{Value, json};

async fn start() -> TestGateway {
    TestGateway::start().await
}

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
            "SELECT count(*) FILTER (WHERE state = 'completed'), count(*), max(attempt) FROM ojs.jobs",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (JOBS as i64, JOBS as i64));
    assert_eq!(row.get::<_, i32>(2), 1, "no job was claimed twice");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_cron_tick_fires_once_across_three_gateways() {
    let first = start().await;
    let database_url = first.database_url.clone();
    let others = [
        TestGateway::on(database_url.clone()).await,
        TestGateway::on(database_url.clone()).await,
    ];
    let ojs = Ojs::of(&first);
    let (status, body) = ojs
        .post(
            "/ojs/v1/cron",
            json!({ "name": "tick", "expression": "0 0 1 1 *", "job_template": { "type": "cron.tick", "args": [], "options": { "queue": "ticks" } } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    // Make the yearly schedule due now rather than waiting for New Year.
    let sql = first.sql().await;
    sql.execute("UPDATE ojs.cron SET next_run = now() - interval '1 second'", &[])
        .await
        .unwrap();
    let count = || async {
        sql.query_one("SELECT count(*) FROM ojs.jobs WHERE queue = 'ticks'", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while count().await == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the due tick never fired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every gateway polls once a second: three more polls each, and still one job.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(count().await, 1, "the tick fired once across three gateways");
    let advanced: bool = sql
        .query_one(
            "SELECT next_run > now() + interval '1 day' FROM ojs.cron WHERE name = 'tick'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(advanced, "the schedule moved on to next year");
    let events = events_of(&ojs, "tick", 1).await;
    assert_eq!(kinds(&events), ["cron.triggered"], "one tick, one event");
    let job: String = sql
        .query_one("SELECT id FROM ojs.jobs WHERE queue = 'ticks'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        (
            events[0]["data"]["job_id"].as_str(),
            events[0]["data"]["cron_expr"].as_str()
        ),
        (Some(job.as_str()), Some("0 0 1 1 *"))
    );
    assert!(events[0]["data"]["scheduled_at"].is_string());
    for gateway in others {
        gateway.stop().await;
    }
    first.stop().await;
}

/// The spec's registration form (ojs-cron §2: `cron`, `timezone`, `type`, `args`, `options`),
/// weekday names, `overlap_policy` defaulting to `skip`, an existing name refused (409) unless
/// replaced with PUT, and time zones that are IANA names only. Fails before: the spec's form was
/// 400 (no `expression`), a second registration replaced the first, and `+05:00` was taken as
/// POSIX time (9:00 fired at 14:00Z).
#[tokio::test]
async fn cron_registration_takes_the_spec_form_and_refuses_what_the_spec_refuses() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let report = json!({ "name": "daily-report", "cron": "0 9 * * MON-FRI", "timezone": "America/New_York",
                         "type": "report.generate", "args": [{ "report": "daily" }], "options": { "queue": "reports" } });
    let (status, body) = ojs.post("/ojs/v1/cron", report.clone()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        (
            &body["cron"]["overlap_policy"],
            &body["cron"]["cron"],
            &body["cron"]["timezone"]
        ),
        (&json!("skip"), &json!("0 9 * * MON-FRI"), &json!("America/New_York"))
    );
    // 9:00 in New York is 13:00 or 14:00 UTC, on a weekday.
    let next = body["cron"]["next_run_at"].as_str().unwrap().to_string();
    assert!(next.contains("T13:00:00") || next.contains("T14:00:00"), "{next}");
    let (status, body) = ojs.post("/ojs/v1/cron", report.clone()).await;
    assert_eq!((status, &body["error"]["code"]), (409, &json!("duplicate")), "{body}");
    let mut changed = report.clone();
    changed["cron"] = json!("30 8 * * *");
    let (status, body) = ojs.call("PUT", "/ojs/v1/cron/daily-report", Some(changed)).await;
    assert_eq!(
        (status, &body["cron"]["expression"]),
        (200, &json!("30 8 * * *")),
        "{body}"
    );
    for zone in ["+05:00", "-08:00", "UTC+5", "EST", "Mars/Olympus_Mons"] {
        let mut bad = report.clone();
        bad["name"] = json!("zoned");
        bad["timezone"] = json!(zone);
        let (status, body) = ojs.post("/ojs/v1/cron", bad).await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("invalid_request")),
            "{zone}: {body}"
        );
    }
    let mut bad = report.clone();
    bad["name"] = json!("policy");
    bad["overlap_policy"] = json!("sometimes");
    let (status, _) = ojs.post("/ojs/v1/cron", bad).await;
    assert_eq!(status, 400);
    let (_, body) = ojs.get("/ojs/v1/cron").await;
    assert_eq!(body["crons"].as_array().map(Vec::len), Some(1), "{body}");
    gateway.stop().await;
}

/// Each overlap policy acts when a tick comes while the schedule's previous job is active:
/// `skip` enqueues nothing (`cron.skipped`), `allow` a second job, `cancel_previous` cancels the
/// running one first, `enqueue` a second job that is not fetched until the first is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cron_overlap_policy_acts() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let sql = gateway.sql().await;
    let jobs_of = |queue: String| {
        let sql = &sql;
        async move {
            sql.query(
                "SELECT state FROM ojs.jobs WHERE queue = $1 ORDER BY created_at, id",
                &[&queue],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<_, String>(0))
            .collect::<Vec<_>>()
        }
    };
    for policy in ["skip", "allow", "cancel_previous", "enqueue"] {
        // Queue and schedule names take no '_' (cancel_previous).
        let name = format!("overlap-{}", policy.replace('_', "-"));
        let queue = name.clone();
        let (status, body) = ojs
            .post(
                "/ojs/v1/cron",
                json!({ "name": name, "cron": "0 0 1 1 *", "overlap_policy": policy,
                        "type": "overlap.task", "options": { "queue": queue } }),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let tick = || async {
            let before: i64 = sql
                .query_one(
                    "SELECT count(*) FROM ojs.events WHERE data ->> 'cron_name' = $1",
                    &[&name],
                )
                .await
                .unwrap()
                .get(0);
            sql.execute(
                "UPDATE ojs.cron SET next_run = now() - interval '1 second' WHERE name = $1",
                &[&name],
            )
            .await
            .unwrap();
            common::eventually(Duration::from_secs(10), "the tick", || async {
                let after: i64 = sql
                    .query_one(
                        "SELECT count(*) FROM ojs.events WHERE data ->> 'cron_name' = $1",
                        &[&name],
                    )
                    .await
                    .unwrap()
                    .get(0);
                (after > before).then_some(())
            })
            .await;
        };
        tick().await;
        let first = ojs.fetch(&queue, "w1").await.expect("the first tick's job");
        assert_eq!(first["meta"]["cron_name"], json!(name), "{first}");
        tick().await;
        let states = jobs_of(queue.clone()).await;
        match policy {
            "skip" => assert_eq!(states, ["active"]),
            "allow" => assert_eq!(states, ["active", "available"]),
            "cancel_previous" => assert_eq!(states, ["cancelled", "available"]),
            _ => {
                assert_eq!(states, ["active", "available"]);
                assert!(ojs.fetch(&queue, "w2").await.is_none(), "not while the first runs");
                ojs.ack(&first, json!(null)).await;
                assert!(ojs.fetch(&queue, "w2").await.is_some(), "after it");
            }
        }
    }
    gateway.stop().await;
}

/// The worker and workflow calls these tests make, on the kit's client (a trait of this module:
/// `Ojs` is pgvs3-testkit's).
trait QueueCalls {
    async fn ack(&self, job: &Value, result: Value) -> Value;
    async fn fail(&self, job: &Value) -> Value;
    async fn create_workflow(&self, definition: Value) -> Value;
    async fn workflow(&self, id: &Value) -> Value;
}

impl QueueCalls for Ojs {
    async fn ack(&self, job: &Value, result: Value) -> Value {
        let (status, body) = self
            .post(
                "/ojs/v1/workers/ack",
                json!({ "job_id": job["id"], "attempt": job["attempt"], "result": result }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    async fn fail(&self, job: &Value) -> Value {
        let (status, body) = self
            .post(
                "/ojs/v1/workers/nack",
                json!({ "job_id": job["id"], "attempt": job["attempt"], "error": { "code": "boom", "message": "failed" } }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    async fn create_workflow(&self, definition: Value) -> Value {
        let (status, body) = self.post("/ojs/v1/workflows", definition).await;
        assert_eq!(status, 201, "{body}");
        body["workflow"].clone()
    }

    async fn workflow(&self, id: &Value) -> Value {
        let (status, body) = self.get(&format!("/ojs/v1/workflows/{}", id.as_str().unwrap())).await;
        assert_eq!(status, 200, "{body}");
        body["workflow"].clone()
    }
}

fn job_in(queue: &str, job_type: &str, args: Value) -> Value {
    json!({ "type": job_type, "args": args, "options": { "queue": queue, "retry": { "max_attempts": 1 } } })
}

#[tokio::test]
async fn a_chain_runs_its_steps_in_order_with_earlier_results_and_stops_on_failure() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let steps: Vec<Value> = (0..3).map(|i| job_in("chain", "chain.step", json!([i]))).collect();
    let workflow = ojs.create_workflow(json!({ "type": "chain", "steps": steps })).await;
    assert_eq!(
        (workflow["state"].as_str(), workflow["steps_total"].as_i64()),
        (Some("running"), Some(3))
    );
    assert_eq!(workflow["steps"][1]["state"], "waiting");
    assert!(
        workflow["steps"][1]["job_id"].is_null(),
        "a waiting step has no job yet"
    );

    for step in 0..3 {
        let job = ojs.fetch("chain", "w").await.expect("the next step is available");
        assert_eq!(job["args"], json!([step]), "steps run in order");
        assert!(ojs.fetch("chain", "w").await.is_none(), "one step at a time");
        let expected: Vec<Value> = (0..step).map(|i| json!({ "step": i })).collect();
        if step == 0 {
            assert!(job.get("parent_results").is_none());
        } else {
            assert_eq!(job["parent_results"], json!(expected), "every earlier result, by step");
        }
        ojs.ack(&job, json!({ "step": step })).await;
    }
    let done = ojs.workflow(&workflow["id"]).await;
    assert_eq!(
        (done["state"].as_str(), done["steps_completed"].as_i64()),
        (Some("completed"), Some(3))
    );
    assert_eq!(done["steps"][2]["result"], json!({ "step": 2 }));

    // A step that fails for good stops the chain; the steps after it are cancelled, never run.
    let steps: Vec<Value> = (0..3).map(|i| job_in("broken", "chain.step", json!([i]))).collect();
    let workflow = ojs.create_workflow(json!({ "type": "chain", "steps": steps })).await;
    let first = ojs.fetch("broken", "w").await.unwrap();
    ojs.ack(&first, json!(null)).await;
    let second = ojs.fetch("broken", "w").await.unwrap();
    assert_eq!(ojs.fail(&second).await["state"], "discarded");
    assert!(ojs.fetch("broken", "w").await.is_none(), "no step runs after a failure");
    let failed = ojs.workflow(&workflow["id"]).await;
    assert_eq!(failed["state"], "failed");
    assert_eq!(failed["steps_completed"], 1);
    assert_eq!(failed["failed_step_index"], 1);
    assert_eq!(failed["failed_job_ids"], json!([second["id"]]));
    assert_eq!(failed["steps"][2]["state"], "cancelled");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_fans_in_once_under_concurrent_workers_and_fires_the_callbacks_that_apply() {
    const JOBS: usize = 40;
    const FAILING: i64 = 7;
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let jobs: Vec<Value> = (0..JOBS).map(|i| job_in("fan", "fan.item", json!([i]))).collect();
    let callback = |name: &str| job_in(&format!("cb-{name}"), "fan.callback", json!([name]));
    let workflow = ojs
        .create_workflow(json!({ "type": "batch", "jobs": jobs, "callbacks": {
            "on_complete": callback("complete"), "on_success": callback("success"), "on_failure": callback("failure") } }))
        .await;
    assert_eq!(workflow["jobs_total"], JOBS);

    // Eight workers settle the jobs at once; the last of them, whichever it is, fires the callbacks.
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let ojs = ojs.clone();
            tokio::spawn(async move {
                while let Some(job) = ojs.fetch("fan", &format!("worker-{w}")).await {
                    let index = job["args"][0].as_i64().unwrap();
                    if index == FAILING {
                        ojs.fail(&job).await;
                    } else {
                        ojs.ack(&job, json!({ "index": index })).await;
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let settled = ojs.workflow(&workflow["id"]).await;
    assert_eq!(
        (settled["jobs_completed"].as_u64(), settled["jobs_failed"].as_u64()),
        (Some(JOBS as u64 - 1), Some(1))
    );
    assert_eq!(settled["state"], "running", "a batch runs until its callbacks have");

    let on_complete = ojs.fetch("cb-complete", "w").await.expect("on_complete fires");
    let on_failure = ojs.fetch("cb-failure", "w").await.expect("on_failure fires");
    assert!(ojs.fetch("cb-success", "w").await.is_none(), "on_success does not");
    for callback in [&on_complete, &on_failure] {
        let results = callback["parent_results"].as_array().expect("every job's result");
        assert_eq!(results.len(), JOBS);
        assert_eq!(results[3], json!({ "index": 3 }));
        assert!(results[FAILING as usize].is_null(), "the failed job has no result");
    }
    assert!(
        ojs.fetch("cb-complete", "w").await.is_none(),
        "each callback fires once"
    );
    assert!(ojs.fetch("cb-failure", "w").await.is_none(), "each callback fires once");
    let sql = gateway.sql().await;
    let callbacks: i64 = sql
        .query_one("SELECT count(*) FROM ojs.jobs WHERE queue LIKE 'cb-%'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(callbacks, 2, "the callback whose condition failed was never enqueued");

    ojs.ack(&on_complete, json!(null)).await;
    assert_eq!(ojs.workflow(&workflow["id"]).await["state"], "running");
    ojs.ack(&on_failure, json!(null)).await;
    assert_eq!(ojs.workflow(&workflow["id"]).await["state"], "completed");

    // When every job succeeds, on_success fires and on_failure does not.
    let jobs: Vec<Value> = (0..2).map(|i| job_in("fine", "fine.item", json!([i]))).collect();
    let batch = ojs
        .create_workflow(json!({ "type": "batch", "jobs": jobs, "callbacks": {
            "on_success": job_in("fine-ok", "fine.ok", json!([])), "on_failure": job_in("fine-bad", "fine.bad", json!([])) } }))
        .await;
    for _ in 0..2 {
        let job = ojs.fetch("fine", "w").await.unwrap();
        ojs.ack(&job, json!({ "ok": job["args"][0] })).await;
    }
    let on_success = ojs.fetch("fine-ok", "w").await.expect("on_success fires");
    assert_eq!(on_success["parent_results"], json!([{ "ok": 0 }, { "ok": 1 }]));
    assert!(ojs.fetch("fine-bad", "w").await.is_none(), "on_failure does not");
    ojs.ack(&on_success, json!(null)).await;
    assert_eq!(ojs.workflow(&batch["id"]).await["state"], "completed");

    // A group has no callbacks: it settles with its last job, failed if any job failed.
    let jobs: Vec<Value> = (0..3).map(|i| job_in("group", "group.item", json!([i]))).collect();
    let group = ojs.create_workflow(json!({ "type": "group", "jobs": jobs })).await;
    let claimed = [
        ojs.fetch("group", "w").await.unwrap(),
        ojs.fetch("group", "w").await.unwrap(),
        ojs.fetch("group", "w").await.unwrap(),
    ];
    ojs.ack(&claimed[0], json!(null)).await;
    ojs.fail(&claimed[1]).await;
    assert_eq!(ojs.workflow(&group["id"]).await["state"], "running");
    ojs.ack(&claimed[2], json!(null)).await;
    assert_eq!(ojs.workflow(&group["id"]).await["state"], "failed");
    gateway.stop().await;
}

#[tokio::test]
async fn cancelling_a_workflow_cancels_its_waiting_jobs_and_releases_nothing_more() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let steps: Vec<Value> = (0..3).map(|i| job_in("halt", "halt.step", json!([i]))).collect();
    let workflow = ojs.create_workflow(json!({ "type": "chain", "steps": steps })).await;
    let path = format!("/ojs/v1/workflows/{}", workflow["id"].as_str().unwrap());
    let running = ojs.fetch("halt", "w").await.unwrap();
    let (status, body) = ojs.call("DELETE", &path, None).await;
    assert_eq!(
        (status, body["workflow"]["state"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    // The active step may finish, but the chain goes no further.
    assert_eq!(ojs.ack(&running, json!(null)).await["state"], "completed");
    assert!(ojs.fetch("halt", "w").await.is_none());
    let cancelled = ojs.workflow(&workflow["id"]).await;
    assert_eq!(cancelled["state"], "cancelled");
    assert_eq!(cancelled["steps"][1]["state"], "cancelled");
    let (status, body) = ojs.call("DELETE", &path, None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("conflict")));
    let (status, _) = ojs.get("/ojs/v1/workflows/019539a4-0000-7000-8000-000000000000").await;
    assert_eq!(status, 404);
    let (status, body) = ojs
        .post("/ojs/v1/workflows", json!({ "type": "chain", "steps": [] }))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_workflow"))
    );
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

/// Every logged event about `subject` (a job, workflow or queue), oldest first, once at least
/// `expect` of them are there (polling: some come from background work such as promotion).
async fn events_of(ojs: &Ojs, subject: &str, expect: usize) -> Vec<Value> {
    for _ in 0..100 {
        let (status, body) = ojs.get("/ojs/v1/events?limit=1000").await;
        assert_eq!(status, 200, "{body}");
        let events: Vec<Value> = body["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|event| event["subject"] == subject)
            .cloned()
            .collect();
        if events.len() >= expect {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("fewer than {expect} events about {subject}");
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|event| event["type"].as_str().unwrap()).collect()
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

/// Claims every job available in `queue` now, keyed by its first argument.
async fn claim_all(ojs: &Ojs, queue: &str) -> HashMap<String, Value> {
    let mut claimed = HashMap::new();
    while let Some(job) = ojs.fetch(queue, "w").await {
        claimed.insert(job["args"][0].as_str().unwrap().to_string(), job);
    }
    claimed
}

fn step(queue: &str, name: &str) -> Value {
    job_in(queue, "nest.step", json!([name]))
}

#[tokio::test]
async fn nested_workflows_run_as_steps_and_jobs_of_their_parents_and_pass_results_up() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    // A chain whose middle step fans out to a job and a chain of two (three levels).
    let workflow = ojs
        .create_workflow(json!({ "type": "chain", "name": "etl", "steps": [
            step("nest", "extract"),
            { "type": "group", "name": "transforms", "jobs": [
                step("nest", "t0"),
                { "type": "chain", "steps": [step("nest", "c0"), step("nest", "c1")] } ] },
            step("nest", "load") ] }))
        .await;
    assert_eq!(workflow["steps"][1]["state"], "waiting", "{workflow}");
    assert_eq!(workflow["steps"][1]["workflow"]["type"], "group");
    assert_eq!(
        workflow["steps"][1]["workflow"]["jobs"][1]["workflow"]["state"],
        "pending"
    );
    let group_id = workflow["steps"][1]["workflow_id"].clone();

    let claimed = claim_all(&ojs, "nest").await;
    assert_eq!(
        claimed.keys().collect::<Vec<_>>(),
        ["extract"],
        "only the first step runs"
    );
    ojs.ack(&claimed["extract"], json!({ "rows": 10 })).await;

    // The group's job and the nested chain's first step start, with the chain's results so far.
    let mut claimed = claim_all(&ojs, "nest").await;
    let mut names: Vec<&String> = claimed.keys().collect();
    names.sort();
    assert_eq!(names, ["c0", "t0"]);
    for job in claimed.values() {
        assert_eq!(job["parent_results"], json!([{ "rows": 10 }]), "{job}");
    }
    let running = ojs.workflow(&workflow["id"]).await;
    assert_eq!(running["steps"][1]["state"], "active");
    ojs.ack(&claimed.remove("t0").unwrap(), json!({ "t": 0 })).await;
    ojs.ack(&claimed.remove("c0").unwrap(), json!({ "c": 0 })).await;
    assert_eq!(
        ojs.workflow(&group_id).await["state"],
        "running",
        "the nested chain has a step to go"
    );
    let c1 = claim_all(&ojs, "nest")
        .await
        .remove("c1")
        .expect("the nested chain's next step");
    assert_eq!(c1["parent_results"], json!([{ "c": 0 }]));
    ojs.ack(&c1, json!({ "c": 1 })).await;

    // The group settled with its chain, so the outer chain moves on with every result so far.
    let load = claim_all(&ojs, "nest").await.remove("load").expect("the last step");
    assert_eq!(
        load["parent_results"],
        json!([{ "rows": 10 }, [{ "t": 0 }, [{ "c": 0 }, { "c": 1 }]]])
    );
    ojs.ack(&load, json!({ "loaded": true })).await;
    let done = ojs.workflow(&workflow["id"]).await;
    assert_eq!(
        (done["state"].as_str(), done["steps_completed"].as_i64()),
        (Some("completed"), Some(3))
    );
    assert_eq!(done["steps"][1]["state"], "completed");
    assert_eq!(ojs.workflow(&group_id).await["parent_workflow_id"], workflow["id"]);

    // Workflow events, nested ones included.
    let root = workflow["id"].as_str().unwrap();
    let events = events_of(&ojs, root, 5).await;
    assert_eq!(
        kinds(&events),
        [
            "workflow.started",
            "workflow.step_completed",
            "workflow.step_completed",
            "workflow.step_completed",
            "workflow.completed"
        ]
    );
    assert_eq!(
        (
            events[0]["data"]["workflow_name"].as_str(),
            events[0]["data"]["total_steps"].as_i64()
        ),
        (Some("etl"), Some(3))
    );
    let remaining: Vec<i64> = events[1..4]
        .iter()
        .map(|e| e["data"]["steps_remaining"].as_i64().unwrap())
        .collect();
    assert_eq!(remaining, [2, 1, 0]);
    assert_eq!(events[2]["data"]["step_type"], "group");
    let group_events = events_of(&ojs, group_id.as_str().unwrap(), 4).await;
    assert_eq!(
        kinds(&group_events),
        [
            "workflow.started",
            "workflow.step_completed",
            "workflow.step_completed",
            "workflow.completed"
        ]
    );
    gateway.stop().await;
}

#[tokio::test]
async fn a_failed_or_cancelled_nested_workflow_settles_its_parent_and_nothing_after_it_runs() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    // A group step that fails (one job fails for good) fails the chain; the step after it is cancelled.
    let workflow = ojs
        .create_workflow(json!({ "type": "chain", "steps": [
            { "type": "group", "jobs": [step("sad", "a"), step("sad", "b")] },
            step("sad", "after") ] }))
        .await;
    let mut claimed = claim_all(&ojs, "sad").await;
    ojs.ack(&claimed.remove("a").unwrap(), json!(null)).await;
    ojs.fail(&claimed.remove("b").unwrap()).await;
    assert!(
        claim_all(&ojs, "sad").await.is_empty(),
        "nothing runs after the failed step"
    );
    let failed = ojs.workflow(&workflow["id"]).await;
    assert_eq!(failed["state"], "failed");
    assert_eq!(failed["steps"][0]["state"], "failed");
    assert_eq!(failed["steps"][1]["state"], "cancelled");
    assert_eq!(failed["failed_step_index"], 0);
    let events = events_of(&ojs, workflow["id"].as_str().unwrap(), 2).await;
    let last = events.last().unwrap();
    assert_eq!(last["type"], "workflow.failed");
    assert_eq!(
        (
            last["data"]["failed_step_id"].as_str(),
            last["data"]["failed_step_type"].as_str()
        ),
        (Some("0"), Some("group"))
    );
    assert_eq!(last["data"]["error"]["code"], "workflow_failed");

    // Cancelling the outer workflow cancels the nested one that waits, with its jobs.
    let workflow = ojs
        .create_workflow(json!({ "type": "chain", "steps": [
            step("halted", "first"),
            { "type": "group", "jobs": [step("halted", "x"), step("halted", "y")] } ] }))
        .await;
    let first = claim_all(&ojs, "halted").await.remove("first").unwrap();
    let (status, body) = ojs
        .call(
            "DELETE",
            &format!("/ojs/v1/workflows/{}", workflow["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(
        (status, body["workflow"]["state"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    ojs.ack(&first, json!(null)).await;
    assert!(claim_all(&ojs, "halted").await.is_empty());
    let cancelled = ojs.workflow(&workflow["id"]).await;
    assert_eq!(cancelled["steps"][1]["state"], "cancelled");
    let inner = &cancelled["steps"][1]["workflow"];
    assert_eq!(inner["state"], "cancelled");
    assert_eq!(inner["jobs"][0]["state"], "cancelled");

    // A batch as a chain step: the chain moves on once the batch's callbacks have run.
    let workflow = ojs
        .create_workflow(json!({ "type": "chain", "steps": [
            { "type": "batch", "jobs": [step("cb", "item")],
              "callbacks": { "on_success": step("cb", "celebrate"), "on_failure": step("cb", "alert") } },
            step("cb", "next") ] }))
        .await;
    let item = claim_all(&ojs, "cb").await.remove("item").unwrap();
    ojs.ack(&item, json!({ "ok": 1 })).await;
    let mut claimed = claim_all(&ojs, "cb").await;
    let names: Vec<&String> = claimed.keys().collect();
    assert_eq!(
        names,
        ["celebrate"],
        "on_success alone fires, and the next step waits for it"
    );
    ojs.ack(&claimed.remove("celebrate").unwrap(), json!({ "party": true }))
        .await;
    let next = claim_all(&ojs, "cb")
        .await
        .remove("next")
        .expect("the step after the batch");
    assert_eq!(next["parent_results"], json!([[{ "ok": 1 }]]));
    ojs.ack(&next, json!(null)).await;
    assert_eq!(ojs.workflow(&workflow["id"]).await["state"], "completed");

    // Deeper than the limit is refused at creation, with the spec's error.
    let too_deep = (0..4).fold(
        json!({ "type": "chain", "steps": [step("deep", "leaf")] }),
        |inner, _| json!({ "type": "group", "jobs": [inner] }),
    );
    let (status, body) = ojs.post("/ojs/v1/workflows", too_deep).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_workflow")),
        "{body}"
    );
    let (_, body) = ojs.get("/ojs/v1/events?types=job.enqueued&queues=deep").await;
    assert_eq!(body["events"], json!([]), "nothing of it was stored");
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

/// Enqueues a job on queue `dag` (with `options`' other fields) and returns its id and state.
async fn enqueue_on_dag(ojs: &Ojs, options: Value) -> (String, String) {
    let mut all = json!({ "queue": "dag" });
    all.as_object_mut()
        .unwrap()
        .extend(options.as_object().unwrap().clone());
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "dag.step", "args": [], "options": all }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    (
        body["job"]["id"].as_str().unwrap().to_owned(),
        body["job"]["state"].as_str().unwrap().to_owned(),
    )
}

async fn state_of(ojs: &Ojs, id: &str) -> Value {
    let (status, body) = ojs.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(status, 200, "{body}");
    body["job"].clone()
}

async fn ack(ojs: &Ojs, id: &str) {
    let (status, body) = ojs.post("/ojs/v1/workers/ack", json!({ "job_id": id })).await;
    assert_eq!(status, 200, "{body}");
}

/// `options.depends_on`: a job waits `pending` until every job it names completes, then is
/// fetched like any other; one discarded or cancelled dependency cancels it and whatever waits
/// on it; unknown ids refuse the enqueue (nothing is stored), and so do names of later jobs of a
/// batch, the job itself, or too many jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_runs_only_after_the_jobs_it_depends_on_complete() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (a, _) = enqueue_on_dag(&ojs, json!({})).await;
    let (b, _) = enqueue_on_dag(&ojs, json!({})).await;
    let (c, state) = enqueue_on_dag(&ojs, json!({ "depends_on": [a, b] })).await;
    assert_eq!(state, "pending");
    let first = ojs.fetch("dag", "w").await.unwrap();
    let second = ojs.fetch("dag", "w").await.unwrap();
    assert!(ojs.fetch("dag", "w").await.is_none(), "the dependent waits");
    assert_eq!(
        [first["id"].as_str().unwrap(), second["id"].as_str().unwrap()],
        [a.as_str(), b.as_str()]
    );
    ack(&ojs, &a).await;
    assert_eq!(state_of(&ojs, &c).await["state"], "pending", "one dependency left");
    assert!(ojs.fetch("dag", "w").await.is_none());
    ack(&ojs, &b).await;
    assert_eq!(state_of(&ojs, &c).await["state"], "available");
    let third = ojs.fetch("dag", "w").await.unwrap();
    assert_eq!(third["id"], c.as_str());
    ack(&ojs, &c).await;

    // Dependencies already complete: available at once.
    let (_, state) = enqueue_on_dag(&ojs, json!({ "depends_on": [a] })).await;
    assert_eq!(state, "available");
    ack(&ojs, ojs.fetch("dag", "w").await.unwrap()["id"].as_str().unwrap()).await;

    // A cancelled dependency cancels the chain waiting on it, however long.
    let (d, _) = enqueue_on_dag(&ojs, json!({ "scheduled_at": "2099-01-01T00:00:00Z" })).await;
    let (e, _) = enqueue_on_dag(&ojs, json!({ "depends_on": [d] })).await;
    let (f, _) = enqueue_on_dag(&ojs, json!({ "depends_on": [e, a] })).await;
    let (status, body) = ojs.call("DELETE", &format!("/ojs/v1/jobs/{d}"), None).await;
    assert_eq!(status, 200, "{body}");
    for waiting in [&e, &f] {
        let job = state_of(&ojs, waiting).await;
        assert_eq!(job["state"], "cancelled", "{job}");
        assert_eq!(job["error"]["code"], "dependency_failed", "{job}");
    }
    // A discarded one (its last attempt failed) too.
    let (g, _) = enqueue_on_dag(&ojs, json!({ "retry": { "max_attempts": 1 } })).await;
    let (h, _) = enqueue_on_dag(&ojs, json!({ "depends_on": [g] })).await;
    assert_eq!(ojs.fetch("dag", "w").await.unwrap()["id"], g.as_str());
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/nack",
            json!({ "job_id": g, "error": { "message": "broken" } }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(state_of(&ojs, &g).await["state"], "discarded");
    assert_eq!(state_of(&ojs, &h).await["state"], "cancelled");
    // Depending on a job already cancelled cancels the new one at once.
    let (_, state) = enqueue_on_dag(&ojs, json!({ "depends_on": [d] })).await;
    assert_eq!(state, "cancelled");

    // Unknown ids: 404, and the job is not stored.
    let unknown = "01900000-0000-7000-8000-000000000000";
    let id = "01900000-0000-7000-8000-000000000001";
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "id": id, "type": "dag.step", "args": [], "options": { "queue": "dag", "depends_on": [a, unknown] } }),
        )
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
    assert_eq!(body["error"]["details"]["missing"], json!([unknown]));
    assert_eq!(ojs.get(&format!("/ojs/v1/jobs/{id}")).await.0, 404);

    // A batch may name earlier jobs of itself, never later ones (so no cycle can be built).
    let j = "01900000-0000-7000-8000-00000000000a";
    let k = "01900000-0000-7000-8000-00000000000b";
    let batch = |first: Value, second: Value| {
        json!({ "jobs": [
            { "id": j, "type": "dag.step", "args": [], "options": { "queue": "dag", "depends_on": first } },
            { "id": k, "type": "dag.step", "args": [], "options": { "queue": "dag", "depends_on": second } },
        ] })
    };
    let (status, body) = ojs.post("/ojs/v1/jobs/batch", batch(json!([k]), json!([j]))).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = ojs.post("/ojs/v1/jobs/batch", batch(json!([]), json!([j]))).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["jobs"][1]["state"], "pending");
    assert_eq!(state_of(&ojs, k).await["state"], "pending");

    // Itself, too many, not ids; and where dependencies cannot apply.
    let too_many: Vec<String> = (0..101).map(|n| format!("01900000-0000-7000-8000-{n:012}")).collect();
    for options in [
        json!({ "depends_on": [id] }),
        json!({ "depends_on": too_many }),
        json!({ "depends_on": "x" }),
    ] {
        let mut options = options;
        options["queue"] = json!("dag");
        let (status, body) = ojs
            .post(
                "/ojs/v1/jobs",
                json!({ "id": id, "type": "dag.step", "args": [], "options": options }),
            )
            .await;
        assert_eq!(status, 400, "{body}");
    }
    let (status, body) = ojs
        .post(
            "/ojs/v1/workflows",
            json!({ "type": "chain", "steps": [{ "type": "dag.step", "args": [], "options": { "depends_on": [a] } }] }),
        )
        .await;
    assert_eq!(status, 400, "{body}");

    // The conformance suite's reset empties the dependencies with the jobs.
    let conformance = TestGateway::with_args(gateway.database_url.clone(), &["--ojs-allow-reset"]).await;
    let (status, body) = Ojs::of(&conformance).post("/ojs/v1/admin/reset", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ojs.get(&format!("/ojs/v1/jobs/{k}")).await.0, 404);
    conformance.stop().await;
    gateway.stop().await;
}

/// Two dependencies acked at the same moment by two workers: the dependent is released once,
/// never left waiting (each settling sees the other's commit, functions/ojs.sql).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dependencies_settled_at_once_release_their_dependent() {
    const PAIRS: usize = 20;
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let mut dependents = Vec::new();
    for _ in 0..PAIRS {
        let (left, _) = enqueue_on_dag(&ojs, json!({})).await;
        let (right, _) = enqueue_on_dag(&ojs, json!({})).await;
        let (dependent, _) = enqueue_on_dag(&ojs, json!({ "queue": "after", "depends_on": [left, right] })).await;
        let left_job = ojs.fetch("dag", "left").await.unwrap();
        let right_job = ojs.fetch("dag", "right").await.unwrap();
        let acks = [left_job, right_job].map(|job| {
            let ojs = ojs.clone();
            tokio::spawn(async move { ack(&ojs, job["id"].as_str().unwrap()).await })
        });
        for handle in acks {
            handle.await.unwrap();
        }
        dependents.push(dependent);
    }
    for dependent in &dependents {
        assert_eq!(state_of(&ojs, dependent).await["state"], "available", "{dependent}");
    }
    let mut released = 0;
    while ojs.fetch("after", "w").await.is_some() {
        released += 1;
    }
    assert_eq!(released, PAIRS);
    // A waiting job logs job.enqueued when it is released, not when it is stored.
    let (status, events) = ojs
        .get("/ojs/v1/events?types=job.enqueued&queues=after&limit=1000")
        .await;
    assert_eq!(status, 200, "{events}");
    assert_eq!(events["events"].as_array().unwrap().len(), PAIRS, "{events}");
    gateway.stop().await;
}
