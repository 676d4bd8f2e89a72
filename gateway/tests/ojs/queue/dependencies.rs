//! Job dependencies (`options.depends_on`).

use super::*;

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
