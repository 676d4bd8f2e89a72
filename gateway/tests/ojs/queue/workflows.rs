//! Workflows: chains, batches, cancellation and nested workflows.

use super::*;

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
        .get("count");
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

/// Claims every job available in `queue` now, keyed by its first argument.
async fn claim_all(ojs: &Ojs, queue: &str) -> HashMap<String, Value> {
    let mut claimed = HashMap::new();
    while let Some(job) = ojs.fetch(queue, "w").await {
        claimed.insert(job["args"][0].as_str().unwrap().to_string(), job);
    }
    claimed
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

/// A workflow cancelled while one of its jobs runs lets that job finish; if it fails instead,
/// it is cancelled, not retried: a retry would wait, never claimed, until the reaper deleted
/// the workflow and a worker then ran it again.
#[tokio::test]
async fn a_cancelled_workflows_running_job_that_fails_is_cancelled_not_retried() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let pool = gateway.gateway.store.pool().clone();
    let member = json!({ "type": "w.a", "args": [1], "options": { "queue": "wfr",
                         "retry": { "max_attempts": 3, "initial_interval": "PT0.01S", "jitter": false } } });
    let workflow = ojs.create_workflow(json!({ "type": "group", "jobs": [member] })).await;
    let wid = workflow["id"].as_str().unwrap().to_string();
    let job = ojs.fetch("wfr", "w1").await.unwrap();
    let id = job["id"].as_str().unwrap().to_string();
    let (status, body) = ojs.post(&format!("/ojs/v1/workflows/{wid}/cancel"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/nack",
            json!({ "job_id": id, "error": { "code": "boom", "message": "failed" } }),
        )
        .await;
    assert_eq!(
        (status, body["job"]["state"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    let events = events_of(&ojs, &id, 3).await;
    assert_eq!(
        kinds(&events).iter().filter(|kind| **kind == "job.cancelled").count(),
        1,
        "{events:?}"
    );
    pgvs3_gateway::maintenance::reap_finished_jobs(&pool, Duration::ZERO)
        .await
        .unwrap();
    assert!(
        ojs.fetch("wfr", "w2").await.is_none(),
        "a cancelled workflow's job runs again"
    );
    gateway.stop().await;
}

/// The same for a claim that lapses: its job is cancelled, not offered again.
#[tokio::test]
async fn a_cancelled_workflows_lapsed_job_is_cancelled_not_offered_again() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let sql = gateway.sql().await;
    let member = json!({ "type": "w.a", "args": [1], "options": { "queue": "wfl", "retry": { "max_attempts": 3 } } });
    let workflow = ojs.create_workflow(json!({ "type": "group", "jobs": [member] })).await;
    let wid = workflow["id"].as_str().unwrap().to_string();
    let job = ojs.fetch("wfl", "w1").await.unwrap();
    let id = job["id"].as_str().unwrap().to_string();
    let (status, body) = ojs.post(&format!("/ojs/v1/workflows/{wid}/cancel"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    sql.execute(
        "UPDATE ojs.jobs SET visible_until = now() - interval '1 s' WHERE id = $1",
        &[&id],
    )
    .await
    .unwrap();
    // It reads as cancelled at once (what the next promotion makes it)...
    let job = promoted(&ojs, &id, "active").await;
    assert_eq!(job["state"], "cancelled", "{job}");
    // ...and a promotion stores it so: no fetch is offered it meanwhile or after.
    let mut stored = String::new();
    for _ in 0..400 {
        assert!(
            ojs.fetch("wfl", "w2").await.is_none(),
            "the lapsed job was offered again"
        );
        stored = sql
            .query_one("SELECT state FROM ojs.jobs WHERE id = $1", &[&id])
            .await
            .unwrap()
            .get("state");
        if stored != "active" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(stored, "cancelled");
    assert!(
        ojs.fetch("wfl", "w2").await.is_none(),
        "the cancelled job was offered again"
    );
    gateway.stop().await;
}

/// A workflow's cancel skips, in its own transaction, the jobs another transaction holds at
/// that moment (here a plain row lock), then cancels them once their holder is done: none stays
/// `available` for ever in a cancelled workflow, never claimed and counted in its queue's depth.
#[tokio::test]
async fn a_workflow_cancel_cancels_the_jobs_held_elsewhere_at_that_moment() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let workflow = ojs
        .create_workflow(
            json!({ "type": "group", "jobs": [job_in("wfc", "w.a", json!([1])), job_in("wfc", "w.b", json!([2]))] }),
        )
        .await;
    let wid = workflow["id"].as_str().unwrap().to_string();
    let mut holder = gateway.sql().await;
    let hold = holder.transaction().await.unwrap();
    let held: String = hold
        .query_one(
            "SELECT id FROM ojs.jobs WHERE workflow_id = $1 ORDER BY workflow_step LIMIT 1 FOR UPDATE",
            &[&wid],
        )
        .await
        .unwrap()
        .get("id");
    let sql = gateway.sql().await;
    let canceller = ojs.clone();
    let cancel = tokio::spawn(async move {
        canceller
            .post(&format!("/ojs/v1/workflows/{wid}/cancel"), json!({}))
            .await
    });
    until_waiting(&sql, "workflow_cancel_leftovers", 1).await;
    hold.rollback().await.unwrap();
    let (status, body) = cancel.await.unwrap();
    assert_eq!(
        (status, body["workflow"]["state"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    assert_eq!(
        body["workflow"]["jobs"][0]["state"], "cancelled",
        "the answer shows the swept job as it is now: {body}"
    );
    let (_, body) = ojs.get(&format!("/ojs/v1/jobs/{held}")).await;
    assert_eq!(body["job"]["state"], "cancelled", "{body}");
    gateway.stop().await;
}

/// The same through a real fetch: a worker fetching one job from ["rl", "wfc"] locks the head of
/// each queue, takes rl's, and (while it waits its turn for rl's rate-limit key, held here the
/// way a concurrent fetch of that key holds it) keeps wfc's job locked; the cancel waits for the
/// fetch, then cancels that job, which stays cancelled after the workflow is reaped.
#[tokio::test]
async fn a_workflow_cancel_racing_a_multi_queue_fetch_cancels_every_job() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let pool = gateway.gateway.store.pool().clone();
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "r.task", "args": [], "options": { "queue": "rl", "rate_limit": { "key": "k", "concurrency": 5 } } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let workflow = ojs
        .create_workflow(
            json!({ "type": "group", "jobs": [job_in("wfc", "w.a", json!([1])), job_in("wfc", "w.b", json!([2]))] }),
        )
        .await;
    let wid = workflow["id"].as_str().unwrap().to_string();
    let mut holder = gateway.sql().await;
    let hold = holder.transaction().await.unwrap();
    hold.execute("SELECT 1 FROM ojs.rate_limits WHERE key = 'k' FOR UPDATE", &[])
        .await
        .unwrap();
    let sql = gateway.sql().await;
    let worker = ojs.clone();
    let fetch = tokio::spawn(async move {
        worker
            .post(
                "/ojs/v1/workers/fetch",
                json!({ "queues": ["rl", "wfc"], "count": 1, "worker_id": "w1" }),
            )
            .await
    });
    until_waiting(&sql, "fair_turn", 1).await;
    let canceller = ojs.clone();
    let cancel = tokio::spawn(async move {
        canceller
            .post(&format!("/ojs/v1/workflows/{wid}/cancel"), json!({}))
            .await
    });
    until_waiting(&sql, "workflow_cancel_leftovers", 1).await;
    hold.commit().await.unwrap();
    let (status, fetched) = fetch.await.unwrap();
    assert_eq!(
        (status, fetched["jobs"][0]["queue"].as_str()),
        (200, Some("rl")),
        "{fetched}"
    );
    let (status, body) = cancel.await.unwrap();
    assert_eq!(status, 200, "{body}");
    pgvs3_gateway::maintenance::reap_finished_jobs(&pool, Duration::ZERO)
        .await
        .unwrap();
    assert!(
        ojs.fetch("wfc", "w2").await.is_none(),
        "a job of a cancelled workflow is handed out"
    );
    let (_, stats) = ojs.get("/ojs/v1/queues/wfc/stats").await;
    assert_eq!(stats["stats"]["available"].as_i64(), Some(0), "{stats}");
    gateway.stop().await;
}

/// The sweep's function, missing in this test's database: every sweep a request makes after
/// its stop committed fails (the maintenance pass's does not go through it).
async fn break_the_sweep_after_commit(sql: &tokio_postgres::Client) {
    sql.batch_execute("ALTER FUNCTION ojs.workflow_cancel_leftovers(text) RENAME TO workflow_cancel_leftovers_gone")
        .await
        .unwrap();
}

/// The state job `id` is stored in.
async fn stored_state(sql: &tokio_postgres::Client, id: &str) -> String {
    sql.query_one("SELECT state FROM ojs.jobs WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get("state")
}

/// A cancel that committed answers so when its sweep of the jobs it skipped fails (here its
/// function is missing): before, it answered 500 for a workflow that was cancelled, and the
/// cancel tried again got 409. The maintenance pass sweeps them instead: it passes over one
/// another transaction still holds (it must not stall behind it) and cancels it once the holder
/// lets go; only then does the reaper take the workflow.
#[tokio::test]
async fn a_workflow_cancel_whose_sweep_fails_answers_cancelled_and_maintenance_sweeps_later() {
    cancel_with_a_held_job_and_a_failing_sweep(
        json!({ "type": "group", "jobs": [job_in("wfs", "w.a", json!([1])), job_in("wfs", "w.b", json!([2]))] }),
        "wfs",
        "SELECT id FROM ojs.jobs WHERE workflow_id = $1 ORDER BY workflow_step LIMIT 1 FOR UPDATE",
    )
    .await;
}

/// The same with the held job a nested workflow's: the stop marks only the workflow cancelled,
/// and the reaper, which looks at a workflow's own jobs, must keep it while the mark stands
/// (before, it deleted the outer workflow with its mark, and the nested job was never swept).
#[tokio::test]
async fn a_cancelled_workflow_is_kept_until_its_nested_workflows_leftovers_are_swept() {
    cancel_with_a_held_job_and_a_failing_sweep(
        json!({ "type": "group", "jobs": [
            { "type": "group", "jobs": [job_in("wfn", "w.a", json!([1])), job_in("wfn", "w.b", json!([2]))] },
            job_in("wfn", "w.c", json!([3])) ] }),
        "wfn",
        "SELECT j.id FROM ojs.jobs j JOIN ojs.workflows w ON w.id = j.workflow_id
         WHERE w.parent_id = $1 ORDER BY j.workflow_step LIMIT 1 FOR UPDATE OF j",
    )
    .await;
}

/// Creates `workflow` (its jobs on `queue`), holds the job `held_query` selects for the
/// workflow's id, cancels the workflow with its sweep after commit failing, and follows the
/// held job through the maintenance pass and the reaper.
async fn cancel_with_a_held_job_and_a_failing_sweep(workflow: Value, queue: &str, held_query: &str) {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let pool = gateway.gateway.store.pool().clone();
    let sql = gateway.sql().await;
    let workflow = ojs.create_workflow(workflow).await;
    let wid = workflow["id"].as_str().unwrap().to_string();
    break_the_sweep_after_commit(&sql).await;
    let mut holder = gateway.sql().await;
    let hold = holder.transaction().await.unwrap();
    let held: String = hold.query_one(held_query, &[&wid]).await.unwrap().get("id");
    let cancel = format!("/ojs/v1/workflows/{wid}/cancel");
    let (status, body) = ojs.post(&cancel, json!({})).await;
    assert_eq!(
        (status, body["workflow"]["state"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    let (status, again) = ojs.post(&cancel, json!({})).await;
    assert_eq!((status, &again["error"]["code"]), (409, &json!("conflict")), "{again}");
    assert_eq!(ojs.workflow(&json!(wid)).await["state"], "cancelled");
    assert_eq!(stored_state(&sql, &held).await, "available", "the held job was skipped");
    assert!(
        ojs.fetch(queue, "w").await.is_none(),
        "a cancelled workflow's job is handed out"
    );

    let sweep = || pgvs3_gateway::maintenance::sweep_stopped_workflows(&pool);
    assert_eq!(sweep().await.unwrap(), 0, "the pass swept a job its holder still holds");
    pgvs3_gateway::maintenance::reap_finished_jobs(&pool, Duration::ZERO)
        .await
        .unwrap();
    let (status, _) = ojs.get(&format!("/ojs/v1/workflows/{wid}")).await;
    assert_eq!(status, 200, "the workflow was reaped with a job left");
    hold.rollback().await.unwrap();
    assert_eq!(sweep().await.unwrap(), 1);
    assert_eq!(stored_state(&sql, &held).await, "cancelled");
    assert_eq!(sweep().await.unwrap(), 0, "a job was cancelled twice");
    pgvs3_gateway::maintenance::reap_finished_jobs(&pool, Duration::ZERO)
        .await
        .unwrap();
    let (status, body) = ojs.get(&format!("/ojs/v1/workflows/{wid}")).await;
    assert_eq!(status, 404, "the swept workflow stays: {body}");
    gateway.stop().await;
}

/// A chain of three steps on `queue` whose first step is claimed, and a transaction holding
/// its second step's row (as a claim, a promotion or another sweep may for a moment): returns
/// the chain's id, the claimed first step, and the held step's id.
async fn chain_with_a_held_step<'a>(
    ojs: &Ojs,
    queue: &str,
    hold: &tokio_postgres::Transaction<'a>,
) -> (String, Value, String) {
    let steps: Vec<Value> = (0..3).map(|i| job_in(queue, "chain.step", json!([i]))).collect();
    let workflow = ojs.create_workflow(json!({ "type": "chain", "steps": steps })).await;
    let wid = workflow["id"].as_str().unwrap().to_string();
    let first = ojs.fetch(queue, "w").await.expect("the first step");
    let held: String = hold
        .query_one(
            "SELECT id FROM ojs.jobs WHERE workflow_id = $1 AND workflow_step = 1 FOR UPDATE",
            &[&wid],
        )
        .await
        .unwrap()
        .get("id");
    (wid, first, held)
}

/// A chain whose step fails for good cancels its later steps, skipping one another transaction
/// holds at that moment; the nack then sweeps it up once the holder is done. Before, it stayed
/// `pending` for ever, and the reaper never took the chain.
#[tokio::test]
async fn a_failing_chain_cancels_the_step_held_elsewhere_at_that_moment() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let pool = gateway.gateway.store.pool().clone();
    let sql = gateway.sql().await;
    let mut holder = gateway.sql().await;
    let hold = holder.transaction().await.unwrap();
    let (wid, first, held) = chain_with_a_held_step(&ojs, "chf", &hold).await;
    let worker = ojs.clone();
    let nack = tokio::spawn(async move { worker.fail(&first).await });
    until_waiting(&sql, "workflow_cancel_leftovers", 1).await;
    hold.rollback().await.unwrap();
    assert_eq!(nack.await.unwrap()["state"], "discarded");
    assert_eq!(stored_state(&sql, &held).await, "cancelled");
    let chain = ojs.workflow(&json!(wid)).await;
    assert_eq!(chain["state"], "failed", "{chain}");
    assert_eq!(chain["steps"][1]["state"], "cancelled", "{chain}");
    assert_eq!(chain["steps"][2]["state"], "cancelled", "{chain}");
    pgvs3_gateway::maintenance::reap_finished_jobs(&pool, Duration::ZERO)
        .await
        .unwrap();
    let (status, body) = ojs.get(&format!("/ojs/v1/workflows/{wid}")).await;
    assert_eq!(status, 404, "the failed chain stays: {body}");
    gateway.stop().await;
}

/// The same when the nack's sweep fails: the nack answers what it did, and the maintenance
/// pass cancels the held step once its holder lets go.
#[tokio::test]
async fn a_failing_chain_whose_sweep_fails_leaves_its_held_step_to_maintenance() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let pool = gateway.gateway.store.pool().clone();
    let sql = gateway.sql().await;
    break_the_sweep_after_commit(&sql).await;
    let mut holder = gateway.sql().await;
    let hold = holder.transaction().await.unwrap();
    let (wid, first, held) = chain_with_a_held_step(&ojs, "chs", &hold).await;
    assert_eq!(ojs.fail(&first).await["state"], "discarded");
    assert_eq!(stored_state(&sql, &held).await, "pending", "the held step was skipped");
    let sweep = || pgvs3_gateway::maintenance::sweep_stopped_workflows(&pool);
    assert_eq!(sweep().await.unwrap(), 0, "the pass swept a job its holder still holds");
    hold.rollback().await.unwrap();
    assert_eq!(sweep().await.unwrap(), 1);
    assert_eq!(stored_state(&sql, &held).await, "cancelled");
    pgvs3_gateway::maintenance::reap_finished_jobs(&pool, Duration::ZERO)
        .await
        .unwrap();
    let (status, body) = ojs.get(&format!("/ojs/v1/workflows/{wid}")).await;
    assert_eq!(status, 404, "the failed chain stays: {body}");
    gateway.stop().await;
}

/// Cancelling a nested workflow stops the chain it is a step of; the chain's later step that
/// another transaction holds then is swept up by that cancel once the holder is done (the sweep
/// goes up to the chain its cancel stopped).
#[tokio::test]
async fn cancelling_a_nested_workflow_sweeps_the_step_its_stopped_chain_skipped() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let sql = gateway.sql().await;
    let chain = ojs
        .create_workflow(json!({ "type": "chain", "steps": [
            { "type": "group", "jobs": [step("chn", "a")] }, step("chn", "b"), step("chn", "c") ] }))
        .await;
    let nested = chain["steps"][0]["workflow_id"].as_str().unwrap().to_string();
    let mut holder = gateway.sql().await;
    let hold = holder.transaction().await.unwrap();
    let held: String = hold
        .query_one(
            "SELECT id FROM ojs.jobs WHERE workflow_id = $1 AND workflow_step = 1 FOR UPDATE",
            &[&chain["id"].as_str()],
        )
        .await
        .unwrap()
        .get("id");
    let canceller = ojs.clone();
    let cancel = tokio::spawn(async move {
        canceller
            .post(&format!("/ojs/v1/workflows/{nested}/cancel"), json!({}))
            .await
    });
    until_waiting(&sql, "workflow_cancel_leftovers", 1).await;
    hold.rollback().await.unwrap();
    let (status, body) = cancel.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(stored_state(&sql, &held).await, "cancelled");
    let chain = ojs.workflow(&chain["id"]).await;
    assert_eq!(chain["state"], "failed", "{chain}");
    assert_eq!(chain["steps"][2]["state"], "cancelled", "{chain}");
    gateway.stop().await;
}

/// A chain step's own cancel stops the chain too; that cancel sweeps up the later step another
/// transaction held at that moment, once the holder is done.
#[tokio::test]
async fn cancelling_a_chain_step_sweeps_the_later_step_held_elsewhere() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let sql = gateway.sql().await;
    let mut holder = gateway.sql().await;
    let hold = holder.transaction().await.unwrap();
    let (wid, first, held) = chain_with_a_held_step(&ojs, "chc", &hold).await;
    let canceller = ojs.clone();
    let cancel = tokio::spawn(async move {
        canceller
            .post(
                &format!("/ojs/v1/jobs/{}/cancel", first["id"].as_str().unwrap()),
                json!({}),
            )
            .await
    });
    until_waiting(&sql, "workflow_cancel_leftovers", 1).await;
    hold.rollback().await.unwrap();
    let (status, body) = cancel.await.unwrap();
    assert_eq!((status, &body["job"]["state"]), (200, &json!("cancelled")), "{body}");
    assert_eq!(stored_state(&sql, &held).await, "cancelled");
    let chain = ojs.workflow(&json!(wid)).await;
    assert_eq!(chain["state"], "failed", "{chain}");
    gateway.stop().await;
}
