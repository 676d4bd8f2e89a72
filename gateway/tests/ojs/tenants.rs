//! OJS tenants (`X-OJS-Tenant`) over plain HTTP against a real PostgreSQL: another tenant's job
//! or workflow is not found by any route and is left as it was, a queue's depth bound holds for
//! each tenant apart, a worker only ever receives its tenant's
//! jobs, a tenant token acts as its tenant only (and on the job routes only), and the claim stays
//! one index range scan.

use pgvs3_testkit as common;

use std::collections::HashSet;
use std::time::Duration;

use common::TestGateway;
use common::ojs::Ojs;
use serde_json::{Value, json};

async fn enqueue(ojs: &Ojs, queue: &str) -> String {
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "tenant.task", "args": [1], "options": { "queue": queue } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    body["job"]["id"].as_str().unwrap().to_string()
}

fn assert_not_found((status, body): (u16, Value), what: &str) {
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{what}: {body}"
    );
}

async fn job_row(gateway: &TestGateway, id: &str) -> (String, i32, String) {
    let row = gateway
        .sql()
        .await
        .query_one("SELECT state, attempt, tenant FROM ojs.jobs WHERE id = $1", &[&id])
        .await
        .unwrap();
    (row.get("state"), row.get("attempt"), row.get("tenant"))
}

#[tokio::test]
async fn another_tenants_job_is_not_found_by_any_job_route_and_stays_as_it_was() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let (acme, globex) = (ojs.as_tenant("acme"), ojs.as_tenant("globex"));
    let id = enqueue(&acme, "reports").await;
    assert_eq!(job_row(&gateway, &id).await, ("available".into(), 0, "acme".into()));

    for intruder in [&globex, &ojs] {
        assert_not_found(intruder.get(&format!("/ojs/v1/jobs/{id}")).await, "get");
        assert_not_found(
            intruder.call("DELETE", &format!("/ojs/v1/jobs/{id}"), None).await,
            "delete",
        );
        assert_not_found(
            intruder.post(&format!("/ojs/v1/jobs/{id}/cancel"), json!({})).await,
            "cancel",
        );
        assert_not_found(intruder.get(&format!("/ojs/v1/jobs/{id}/progress")).await, "progress");
        assert!(
            intruder.fetch("reports", "intruder").await.is_none(),
            "a fetch of another tenant"
        );
    }
    assert_eq!(job_row(&gateway, &id).await, ("available".into(), 0, "acme".into()));

    let claimed = acme
        .fetch("reports", "acme-worker")
        .await
        .expect("acme's worker gets acme's job");
    assert_eq!(claimed["id"], id.as_str());
    for intruder in [&globex, &ojs] {
        let settle = json!({ "job_id": id, "worker_id": "acme-worker" });
        assert_not_found(intruder.post("/ojs/v1/workers/ack", settle.clone()).await, "ack");
        assert_not_found(
            intruder.post(&format!("/ojs/v1/jobs/{id}/ack"), json!({})).await,
            "per-job ack",
        );
        assert_not_found(intruder.post("/ojs/v1/workers/nack", settle.clone()).await, "nack");
        assert_not_found(
            intruder.post(&format!("/ojs/v1/jobs/{id}/nack"), json!({})).await,
            "per-job nack",
        );
        assert_not_found(
            intruder
                .post(&format!("/ojs/v1/jobs/{id}/progress"), json!({ "progress": 0.5 }))
                .await,
            "progress report",
        );
        let (status, beat) = intruder
            .post(
                "/ojs/v1/workers/heartbeat",
                json!({ "worker_id": "acme-worker", "active_jobs": [id] }),
            )
            .await;
        assert_eq!((status, &beat["jobs_extended"]), (200, &json!([])), "{beat}");
    }
    let (status, progress) = acme.get(&format!("/ojs/v1/jobs/{id}/progress")).await;
    assert_eq!(
        (status, &progress["progress"]),
        (200, &Value::Null),
        "no report was taken: {progress}"
    );
    assert_eq!(job_row(&gateway, &id).await, ("active".into(), 1, "acme".into()));

    let (status, body) = acme
        .post(
            "/ojs/v1/workers/ack",
            json!({ "job_id": id, "worker_id": "acme-worker" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(job_row(&gateway, &id).await, ("completed".into(), 1, "acme".into()));
    gateway.stop().await;
}

#[tokio::test]
async fn a_worker_receives_only_its_own_tenants_jobs() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let acme = ojs.as_tenant("acme");
    let mut acme_jobs = HashSet::new();
    let mut default_jobs = HashSet::new();
    for _ in 0..5 {
        acme_jobs.insert(enqueue(&acme, "shared").await);
        default_jobs.insert(enqueue(&ojs, "shared").await);
    }
    // The header naming the default tenant is the same as no header.
    default_jobs.insert(enqueue(&ojs.as_tenant("default"), "shared").await);

    assert!(ojs.as_tenant("globex").fetch("shared", "globex-worker").await.is_none());
    for (worker, expected) in [(&acme, &acme_jobs), (&ojs, &default_jobs)] {
        let (status, body) = worker
            .post(
                "/ojs/v1/workers/fetch",
                json!({ "queues": ["shared"], "count": 100, "worker_id": "w" }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let fetched: HashSet<String> = body["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|job| job["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(&fetched, expected);
    }
    gateway.stop().await;
}

#[tokio::test]
async fn a_job_cannot_depend_on_another_tenants_job_or_share_its_unique_key() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let (acme, globex) = (ojs.as_tenant("acme"), ojs.as_tenant("globex"));
    let theirs = enqueue(&acme, "dag").await;
    let (status, body) = globex
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "tenant.task", "args": [], "options": { "queue": "dag", "depends_on": [theirs] } }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );

    let unique = json!({ "type": "tenant.task", "args": [7], "options": { "unique": { "keys": ["args"] } } });
    for tenant in [&acme, &globex] {
        let (status, body) = tenant.post("/ojs/v1/jobs", unique.clone()).await;
        assert_eq!(status, 201, "each tenant's first unique job is new: {body}");
    }
    let (status, body) = globex.post("/ojs/v1/jobs", unique).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("duplicate")),
        "within one tenant: {body}"
    );
    gateway.stop().await;
}

#[tokio::test]
async fn a_tenant_token_acts_as_its_tenant_only() {
    let gateway = TestGateway::with_args(
        common::fresh_database().await,
        &["--ojs-token", "operator", "--ojs-tenant-token", "acme=acme-secret"],
    )
    .await;
    let mut acme = Ojs::of(&gateway);
    acme.token = Some("acme-secret".into());
    let id = enqueue(&acme, "billing").await;
    assert_eq!(
        job_row(&gateway, &id).await.2,
        "acme",
        "the token's tenant, without a header"
    );
    let (status, body) = acme.as_tenant("globex").get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    let (status, _) = acme.as_tenant("acme").get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(status, 200);
    let (status, body) = enqueue_with_meta(&acme, json!({ "tenant_id": "globex" })).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "a meta.tenant_id is no way around the token's tenant: {body}"
    );

    // Routes that span all tenants are the operator's.
    for path in [
        "/ojs/v1/events",
        "/ojs/v1/events/stream",
        "/ojs/v1/queues",
        "/ojs/v1/admin/stats",
        "/ojs/v1/admin/tenants",
        "/ojs/v1/admin/tenants/acme/stats",
        "/ojs/v1/cron",
        "/ojs/v1/webhooks/subscriptions",
        "/ojs/v1/schemas",
        "/ojs/v1/admin/workers",
    ] {
        let (status, body) = acme.get(path).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "{path}: {body}"
        );
    }
    let (status, body) = acme.get("/ojs/v1/dead-letter").await;
    assert_eq!(status, 200, "the dead letter is scoped by tenant: {body}");
    let (status, body) = acme.get("/ojs/v1/workers/nobody/health").await;
    assert_eq!(
        status, 404,
        "a worker is the tenant's, so its health is a job route: {body}"
    );
    let (status, body) = acme.get("/ojs/v1/rate-limits").await;
    assert_eq!(status, 200, "rate-limit keys are the tenant's: {body}");
    let (status, body) = acme.get("/ojs/v1/workflows/0190a000-0000-7000-8000-000000000000").await;
    assert_eq!(status, 404, "workflows are the tenant's: {body}");
    let (status, body) = acme
        .post(
            "/ojs/v1/workflows",
            json!({ "type": "chain", "steps": [{ "type": "tenant.task", "args": [], "meta": { "tenant_id": "globex" } }] }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "a workflow member's meta.tenant_id is no way around the token's tenant either: {body}"
    );

    let mut operator = Ojs::of(&gateway);
    operator.token = Some("operator".into());
    assert_not_found(
        operator.get(&format!("/ojs/v1/jobs/{id}")).await,
        "the operator's default tenant",
    );
    let (status, _) = operator.as_tenant("acme").get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(status, 200, "the operator token may name any tenant");

    let mut stranger = acme.as_tenant("acme");
    stranger.token = Some("guess".into());
    let (status, body) = stranger.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("unauthenticated")),
        "{body}"
    );
    gateway.stop().await;
}

#[tokio::test]
async fn a_malformed_tenant_header_is_refused() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    for tenant in ["two words", &"t".repeat(129)] {
        let (status, body) = ojs
            .as_tenant(tenant)
            .post("/ojs/v1/jobs", json!({ "type": "tenant.task", "args": [] }))
            .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "{body}"
        );
    }
    let count: i64 = gateway
        .sql()
        .await
        .query_one("SELECT count(*) FROM ojs.jobs", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(count, 0);
    gateway.stop().await;
}

/// The claim's tenant predicate is served by the `jobs_claim` index: one range per (queue,
/// tenant), already in claim order (no sort), whichever the tenant.
#[tokio::test]
async fn the_claim_reads_one_index_range_per_queue_and_tenant() {
    let gateway = TestGateway::start().await;
    let sql = gateway.sql().await;
    sql.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
        .await
        .unwrap();
    for tenant in ["default", "acme"] {
        let plan: Value = sql
            .query_one(
                "EXPLAIN (FORMAT JSON) SELECT j.id FROM ojs.jobs j
                 WHERE j.state = 'available' AND j.queue = 'q' AND j.tenant = $1
                 ORDER BY j.priority DESC, j.seq LIMIT 10 FOR UPDATE SKIP LOCKED",
                &[&tenant],
            )
            .await
            .unwrap()
            .get("QUERY PLAN");
        let text = plan.to_string();
        assert!(text.contains("\"Index Name\":\"jobs_claim\""), "{text}");
        assert!(!text.contains("\"Node Type\":\"Sort\""), "{text}");
        assert!(text.contains("tenant ="), "the tenant is an index condition: {text}");
    }
    gateway.stop().await;
}

async fn enqueue_with_meta(ojs: &Ojs, meta: Value) -> (u16, Value) {
    ojs.post(
        "/ojs/v1/jobs",
        json!({ "type": "tenant.task", "args": [1], "meta": meta, "options": { "queue": "reports" } }),
    )
    .await
}

#[tokio::test]
async fn meta_tenant_id_names_the_tenant_when_no_header_does() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = enqueue_with_meta(&ojs, json!({ "tenant_id": "acme", "source": "api" })).await;
    assert_eq!(status, 201, "{body}");
    let id = body["job"]["id"].as_str().unwrap().to_string();
    assert_eq!(job_row(&gateway, &id).await, ("available".into(), 0, "acme".into()));
    assert_not_found(
        ojs.get(&format!("/ojs/v1/jobs/{id}")).await,
        "the default tenant's view",
    );
    let claimed = ojs.as_tenant("acme").fetch("reports", "acme-worker").await;
    assert_eq!(claimed.expect("acme's worker gets it")["id"], id.as_str());

    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs/batch",
            json!({ "jobs": [
                { "type": "tenant.task", "args": [1], "meta": { "tenant_id": "globex" } },
                { "type": "tenant.task", "args": [2], "meta": { "tenant_id": "globex" } },
            ] }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    for job in body["jobs"].as_array().unwrap() {
        assert_eq!(job_row(&gateway, job["id"].as_str().unwrap()).await.2, "globex");
    }
}

#[tokio::test]
async fn a_header_and_a_meta_tenant_that_disagree_are_refused() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let acme = ojs.as_tenant("acme");
    let (status, body) = enqueue_with_meta(&acme, json!({ "tenant_id": "globex" })).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_request")),
        "{body}"
    );
    assert!(
        body["error"]["message"].as_str().unwrap().contains("disagree"),
        "{body}"
    );
    let (status, body) = ojs
        .as_tenant("acme")
        .post(
            "/ojs/v1/jobs/batch",
            json!({ "jobs": [
                { "type": "tenant.task", "args": [1] },
                { "type": "tenant.task", "args": [2], "meta": { "tenant_id": "globex" } },
            ] }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_request")),
        "{body}"
    );
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs/batch",
            json!({ "jobs": [
                { "type": "tenant.task", "args": [1], "meta": { "tenant_id": "acme" } },
                { "type": "tenant.task", "args": [2], "meta": { "tenant_id": "globex" } },
            ] }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_request")),
        "{body}"
    );
    let (status, body) = enqueue_with_meta(&ojs, json!({ "tenant_id": "a b" })).await;
    assert_eq!(status, 400, "a malformed meta.tenant_id: {body}");
    let stored: i64 = gateway
        .sql()
        .await
        .query_one("SELECT count(*) FROM ojs.jobs", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(stored, 0, "a refused request stores no job");

    // Agreeing is fine, and a header alone is written into the job's meta (§5.3).
    let (status, body) = enqueue_with_meta(&acme, json!({ "tenant_id": "acme" })).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = enqueue_with_meta(&acme, json!({ "source": "api" })).await;
    assert_eq!(status, 201, "{body}");
    let (_, read) = acme
        .get(&format!("/ojs/v1/jobs/{}", body["job"]["id"].as_str().unwrap()))
        .await;
    assert_eq!(
        read["job"]["meta"],
        json!({ "source": "api", "tenant_id": "acme" }),
        "{read}"
    );
}

#[tokio::test]
async fn stats_are_kept_per_tenant() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let (acme, globex) = (ojs.as_tenant("acme"), ojs.as_tenant("globex"));
    for _ in 0..2 {
        enqueue(&acme, "reports").await;
    }
    enqueue(&globex, "mail").await;
    enqueue(&globex, "mail").await;
    let claimed = globex.fetch("mail", "globex-worker").await.expect("a globex job");
    let (status, body) = globex
        .post(
            "/ojs/v1/workers/ack",
            json!({ "job_id": claimed["id"], "worker_id": "globex-worker" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let (status, stats) = ojs.get("/ojs/v1/admin/tenants/acme/stats").await;
    assert_eq!(status, 200, "{stats}");
    assert_eq!(stats["tenant_id"], "acme");
    assert_eq!(
        (
            &stats["jobs"]["available"],
            &stats["jobs"]["completed"],
            &stats["queues"]
        ),
        (&json!(2), &json!(0), &json!(1)),
        "{stats}"
    );
    assert_eq!(stats["total_jobs"], 2, "{stats}");
    assert_eq!(stats["throughput"]["processed_per_minute"], 0, "{stats}");
    let (_, stats) = ojs.get("/ojs/v1/admin/tenants/globex/stats").await;
    assert_eq!(
        (&stats["jobs"]["available"], &stats["jobs"]["completed"]),
        (&json!(1), &json!(1)),
        "{stats}"
    );
    assert_eq!(stats["throughput"]["processed_per_minute"], 1, "{stats}");
    let (_, stats) = ojs.get("/ojs/v1/admin/tenants/initech/stats").await;
    assert_eq!(stats["jobs"]["available"], 0, "a tenant without jobs: {stats}");
    let (_, all) = ojs.get("/ojs/v1/admin/stats").await;
    assert_eq!(all["jobs"]["available"], 3, "{all}");

    // A queue read at its bare path (the upstream suite's EXT-MT-004) answers its stats, over
    // all tenants' jobs as `/queues/{name}/stats` does.
    let (status, queue) = acme.get("/ojs/v1/queues/mail").await;
    assert_eq!(
        (status, &queue["queue"]["name"], &queue["queue"]["available"]),
        (200, &json!("mail"), &json!(1)),
        "{queue}"
    );

    let (status, listed) = ojs.get("/ojs/v1/admin/tenants").await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        listed,
        json!({ "tenants": [{ "tenant_id": "acme", "jobs": 2 }, { "tenant_id": "globex", "jobs": 2 }],
                "truncated": false })
    );
}

/// `/metrics` counts every tenant's jobs: it needs the root token, as the admin routes do, and a
/// tenant's token is refused. Fails before: it answered anyone, token or not.
#[tokio::test]
async fn metrics_need_the_root_token_not_a_tenants() {
    let gateway = TestGateway::with_args(
        common::fresh_database().await,
        &["--ojs-token", "operator", "--ojs-tenant-token", "acme=acme-secret"],
    )
    .await;
    let mut client = Ojs::of(&gateway);
    let (status, _, _) = client.exchange("GET", "/metrics", None).await;
    assert_eq!(status, 401, "no token");
    client.token = Some("acme-secret".into());
    let (status, _, body) = client.exchange("GET", "/metrics", None).await;
    assert_eq!((status, &body["error"]["code"]), (403, &json!("forbidden")), "{body}");
    client.token = Some("operator".into());
    let (status, headers, _) = client.exchange("GET", "/metrics", None).await;
    assert_eq!((status, headers["content-type"].to_str().unwrap()), (200, "text/plain"));
    gateway.stop().await;
}

/// Without `--ojs-token` the token is the root key's `<access-key>:<secret>` as the catalog holds
/// it now: rotating the root secret from another process (`pgvs3 admin key create --access-key
/// <root> --secret-key NEW`) makes the old token 401 and the new one work, without a restart.
/// Fails before: the token was made once at start, so the old one kept working and the new one
/// was refused.
#[tokio::test]
async fn the_root_key_token_follows_a_rotated_secret() {
    let gateway = TestGateway::with_args(common::fresh_database().await, &["--ojs-auth", "token"]).await;
    let mut old = Ojs::of(&gateway);
    old.token = Some(format!("{}:{}", common::ROOT_ACCESS_KEY, common::ROOT_SECRET_KEY));
    assert_eq!(old.get("/ojs/v1/queues").await.0, 200);
    let rotated = "rotated-root-secret-0123456789";
    let mut new = old.clone();
    new.token = Some(format!("{}:{rotated}", common::ROOT_ACCESS_KEY));
    assert_eq!(new.get("/ojs/v1/queues").await.0, 401);

    let cli = tokio::process::Command::new(env!("CARGO_BIN_EXE_pgvs3"))
        .args([
            "admin",
            "--database-url",
            &gateway.database_url,
            "--master-key",
            common::MASTER_KEY,
        ])
        .args([
            "key",
            "create",
            "--access-key",
            common::ROOT_ACCESS_KEY,
            "--secret-key",
            rotated,
        ])
        .output()
        .await
        .unwrap();
    assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));

    // The catalog's reload (its listener hears the change) carries the new secret over.
    common::eventually(
        Duration::from_secs(30),
        "the rotated root token is accepted",
        || async { (new.get("/ojs/v1/queues").await.0 == 200).then_some(()) },
    )
    .await;
    let (status, body) = old
        .post("/ojs/v1/jobs", json!({"type": "t", "queue": "q", "args": []}))
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (401, &json!("unauthenticated")),
        "{body}"
    );
    assert_eq!(old.get("/ojs/v1/queues").await.0, 401);
    let (status, body) = new
        .post("/ojs/v1/jobs", json!({"type": "t", "queue": "q", "args": []}))
        .await;
    assert_eq!(status, 201, "{body}");
    gateway.stop().await;
}

async fn heartbeat(ojs: &Ojs, worker: &str, state: Option<&str>) -> Value {
    let mut beat = json!({ "worker_id": worker });
    if let Some(state) = state {
        beat["state"] = json!(state);
    }
    let (status, body) = ojs.post("/ojs/v1/workers/heartbeat", beat).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// A worker id is an id, not a payload: one over 256 bytes is a 400 OJS error object on the
/// heartbeat and the fetch, and `/admin/workers` answers a page at a time (`?page=`,
/// `?per_page=`, pagination with the total). Fails before: any id was stored and every worker
/// of every tenant came back in one answer (8,000 heartbeats with 2,000-byte ids made 66.5 MB).
#[tokio::test]
async fn worker_ids_are_bounded_and_workers_listed_a_page_at_a_time() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let long = "w".repeat(257);
    let (status, body) = ojs
        .post("/ojs/v1/workers/heartbeat", json!({ "worker_id": long }))
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_request")),
        "{body}"
    );
    let (status, body) = ojs
        .post("/ojs/v1/workers/fetch", json!({ "queues": ["q"], "worker_id": long }))
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_request")),
        "{body}"
    );
    heartbeat(&ojs, &"w".repeat(256), None).await;
    for worker in ["a", "b"] {
        heartbeat(&ojs, worker, None).await;
    }

    let page = |query: &'static str| {
        let ojs = ojs.clone();
        async move {
            let (status, body) = ojs.get(&format!("/ojs/v1/admin/workers{query}")).await;
            assert_eq!(status, 200, "{body}");
            let ids: Vec<String> = body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|worker| worker["id"].as_str().unwrap().chars().take(3).collect())
                .collect();
            (ids, body["pagination"].clone(), body["summary"]["total"].clone())
        }
    };
    let (ids, pagination, summary) = page("?per_page=2").await;
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(
        pagination,
        json!({ "total": 3, "page": 1, "per_page": 2, "total_pages": 2 })
    );
    assert_eq!(summary, json!(3));
    let (ids, pagination, _) = page("?per_page=2&page=2").await;
    assert_eq!((ids, &pagination["page"]), (vec!["www".to_string()], &json!(2)));
    assert!(page("?page=3&per_page=2").await.0.is_empty());
    for bad in ["?per_page=0", "?per_page=1001", "?page=0", "?page=x"] {
        let (status, body) = ojs.get(&format!("/ojs/v1/admin/workers{bad}")).await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("invalid_request")),
            "{bad}: {body}"
        );
    }
    gateway.stop().await;
}

/// `GET /queues` (and `/admin/queues`) answers a page at a time: any number of queues (30,000
/// made 21.8 MB before, past what the console reads) come back `per_page` (default 100, at most
/// 1,000) at a time with the total. Fails before: every queue came back at once.
#[tokio::test]
async fn queues_are_listed_a_page_at_a_time() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    for queue in ["q1", "q2", "q3"] {
        enqueue(&ojs, queue).await;
    }
    for path in ["/ojs/v1/queues", "/ojs/v1/admin/queues"] {
        let names = |body: &Value| -> Vec<String> {
            body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|queue| queue["name"].as_str().unwrap().to_string())
                .collect()
        };
        let (status, first) = ojs.get(&format!("{path}?per_page=2")).await;
        assert_eq!(status, 200, "{first}");
        assert_eq!(names(&first), ["q1", "q2"]);
        assert_eq!(first["queues"], first["items"]);
        assert_eq!(
            first["pagination"],
            json!({ "total": 3, "page": 1, "per_page": 2, "total_pages": 2 })
        );
        let (_, second) = ojs.get(&format!("{path}?per_page=2&page=2")).await;
        assert_eq!(names(&second), ["q3"]);
        assert_eq!(second["items"][0]["counts"]["available"], 1);
        let (_, all) = ojs.get(path).await;
        assert_eq!((names(&all).len(), &all["pagination"]["per_page"]), (3, &json!(100)));
        let (status, _) = ojs.get(&format!("{path}?per_page=5000")).await;
        assert_eq!(status, 400);
    }
    gateway.stop().await;
}

/// A worker id is its tenant's: another tenant's worker of the same id reporting terminate, or
/// an operator quieting it, leaves this tenant's worker running and fetching, and neither sees
/// the other's state or directive.
#[tokio::test]
async fn a_worker_id_is_its_tenants_own() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let (acme, globex) = (ojs.as_tenant("acme"), ojs.as_tenant("globex"));
    heartbeat(&acme, "w1", None).await;
    heartbeat(&globex, "w1", Some("terminate")).await;
    // The default tenant's worker whose id reads as acme's w1 is not it either.
    heartbeat(&ojs, "acme w1", Some("terminate")).await;
    let id = enqueue(&acme, "reports").await;
    let claimed = acme.fetch("reports", "w1").await;
    assert_eq!(
        claimed.expect("globex's terminate does not stop acme's w1")["id"],
        id.as_str()
    );
    let (status, worker) = acme.get("/ojs/v1/workers/w1/health").await;
    assert_eq!(
        (status, worker["state"].as_str(), worker["tenant_id"].as_str()),
        (200, Some("running"), Some("acme")),
        "{worker}"
    );

    // The operator directs one tenant's worker (the header names the tenant).
    let (status, body) = globex.post("/ojs/v1/admin/workers/w1/quiet", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(heartbeat(&acme, "w1", None).await["directive"], "continue");
    assert_eq!(heartbeat(&globex, "w1", None).await["directive"], "quiet");
    let (status, body) = acme.post("/ojs/v1/admin/workers/w2/terminate", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let id = enqueue(&globex, "reports").await;
    let claimed = globex.fetch("reports", "w2").await;
    assert_eq!(
        claimed.expect("acme's w2 terminated, globex's w2 fetches")["id"],
        id.as_str()
    );
    let (status, body) = globex.get("/ojs/v1/workers/w2/health").await;
    assert_eq!(status, 404, "acme's w2 is not globex's: {body}");

    let (status, body) = ojs.get("/ojs/v1/admin/workers").await;
    assert_eq!(status, 200, "{body}");
    let mut listed: Vec<(String, String)> = body["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["id"].as_str().unwrap().into(),
                w["tenant_id"].as_str().unwrap().into(),
            )
        })
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        // Globex's w2 holds a claim without having sent a heartbeat.
        [
            ("acme w1", "default"),
            ("w1", "acme"),
            ("w1", "globex"),
            ("w2", "acme"),
            ("w2", "globex")
        ]
        .map(|(id, tenant)| (id.to_string(), tenant.to_string()))
    );
    gateway.stop().await;
}

async fn enqueue_limited(ojs: &Ojs, key: &str, concurrency: i64) -> String {
    let (status, body) = ojs
        .post(
            "/ojs/v1/jobs",
            json!({ "type": "tenant.limited", "args": [],
                    "options": { "queue": "limited", "rate_limit": { "key": key, "concurrency": concurrency } } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    body["job"]["id"].as_str().unwrap().to_string()
}

async fn fetch_ids(ojs: &Ojs, count: i64) -> Vec<String> {
    let (status, body) = ojs
        .post(
            "/ojs/v1/workers/fetch",
            json!({ "queues": ["limited"], "count": count, "worker_id": "limited-worker" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| job["id"].as_str().unwrap().to_string())
        .collect()
}

/// A rate-limit key is its tenant's: another tenant's jobs naming the same key neither spend
/// its starts nor redefine its limits, and its state reads as its tenant's.
#[tokio::test]
async fn a_rate_limit_key_is_its_tenants_own() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let (acme, globex) = (ojs.as_tenant("acme"), ojs.as_tenant("globex"));
    let acme_jobs = [
        enqueue_limited(&acme, "k", 1).await,
        enqueue_limited(&acme, "k", 1).await,
    ];
    // Globex's job names the same key with a looser limit, after acme's.
    let globex_job = enqueue_limited(&globex, "k", 5).await;
    assert_eq!(
        fetch_ids(&acme, 10).await,
        [acme_jobs[0].clone()],
        "acme's key keeps acme's concurrency of 1"
    );
    assert_eq!(
        fetch_ids(&globex, 10).await,
        [globex_job],
        "acme's active job spends none of globex's key"
    );
    for (tenant, concurrency) in [(&acme, 1), (&globex, 5)] {
        let (status, state) = tenant.get("/ojs/v1/rate-limits/k").await;
        assert_eq!(status, 200, "{state}");
        assert_eq!(state["tenant_id"], tenant.tenant.as_deref().unwrap(), "{state}");
        assert_eq!(state["concurrency"]["limit"], concurrency, "{state}");
        assert_eq!(state["concurrency"]["active"], 1, "{state}");
    }
    let (_, acme_state) = acme.get("/ojs/v1/rate-limits/k").await;
    assert_eq!(acme_state["waiting_count"], 1, "{acme_state}");
    let (status, body) = ojs.get("/ojs/v1/rate-limits/k").await;
    assert_eq!(status, 404, "the default tenant named no key k: {body}");
    gateway.stop().await;
}

/// The error a refused request answers, without what differs from one request to the next.
fn refusal((status, body): (u16, Value)) -> (u16, Value) {
    let mut error = body["error"].clone();
    if let Some(fields) = error.as_object_mut() {
        fields.remove("request_id");
    }
    (status, error)
}

/// A workflow is its tenant's, as its jobs are: another tenant reading or cancelling it by id
/// finds no such workflow (404, as for an id nobody holds) and leaves it running. Ids stay one
/// namespace (ojs-core: two jobs never share an id, and a client's id is kept as given), so an
/// id another tenant's job or workflow holds is refused, with exactly the answer an id of the
/// tenant's own gets. Fails before: any tenant read and cancelled any workflow.
#[tokio::test]
async fn a_workflow_is_its_tenants_own_and_a_taken_id_answers_alike_whoever_holds_it() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let (acme, globex) = (ojs.as_tenant("acme"), ojs.as_tenant("globex"));
    let step = |n: i64| json!({ "type": "tenant.step", "args": [n], "options": { "queue": "flow" } });
    let (status, body) = acme
        .post(
            "/ojs/v1/workflows",
            json!({ "type": "chain", "steps": [step(1), step(2)] }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let workflow_id = body["workflow"]["id"].as_str().unwrap().to_string();
    let first_job = body["workflow"]["steps"][0]["job_id"].as_str().unwrap().to_string();
    let path = format!("/ojs/v1/workflows/{workflow_id}");

    for intruder in [&globex, &ojs] {
        let absent = format!("/ojs/v1/workflows/{}", "0190a000-0000-7000-8000-000000000000");
        let (status, nobodys) = intruder.get(&absent).await;
        assert_eq!(status, 404, "{nobodys}");
        let (status, theirs) = intruder.get(&path).await;
        assert_eq!(status, 404, "another tenant's workflow: {theirs}");
        assert_eq!(
            theirs["error"]["code"], nobodys["error"]["code"],
            "{theirs} vs {nobodys}"
        );
        assert_not_found(intruder.call("DELETE", &path, None).await, "delete");
        assert_not_found(intruder.post(&format!("{path}/cancel"), json!({})).await, "cancel");
    }
    let (status, read) = acme.get(&path).await;
    assert_eq!(
        (status, read["workflow"]["state"].as_str()),
        (200, Some("running")),
        "{read}"
    );
    let row = gateway
        .sql()
        .await
        .query_one("SELECT tenant, state FROM ojs.workflows WHERE id = $1", &[&workflow_id])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>("tenant"), row.get::<_, String>("state")),
        ("acme".into(), "running".into())
    );

    // A taken id: another tenant's job's, or its workflow's, answers as the tenant's own would.
    let job_with_id = json!({ "type": "tenant.task", "args": [], "id": first_job });
    let own = refusal(acme.post("/ojs/v1/jobs", job_with_id.clone()).await);
    assert_eq!((own.0, &own.1["code"]), (409, &json!("duplicate")), "{own:?}");
    assert_eq!(refusal(globex.post("/ojs/v1/jobs", job_with_id).await), own);
    let workflow_with_id = json!({ "type": "group", "id": workflow_id, "jobs": [step(3)] });
    let own = refusal(acme.post("/ojs/v1/workflows", workflow_with_id.clone()).await);
    assert_eq!((own.0, &own.1["code"]), (409, &json!("duplicate")), "{own:?}");
    assert_eq!(refusal(globex.post("/ojs/v1/workflows", workflow_with_id).await), own);
    assert_eq!(
        job_row(&gateway, &first_job).await,
        ("available".into(), 0, "acme".into())
    );

    let (status, cancelled) = acme.post(&format!("{path}/cancel"), json!({})).await;
    assert_eq!(
        (status, cancelled["workflow"]["state"].as_str()),
        (200, Some("cancelled")),
        "{cancelled}"
    );
    gateway.stop().await;
}

/// A workflow is one tenant's (ojs-multi-tenancy §15.2): its jobs' `meta.tenant_id`s, nested
/// workflows' and callbacks' included, must agree with the request's tenant, or, when the
/// request names none, with each other, and name the workflow's tenant. Fails before: a member
/// naming another tenant was stored as the request's tenant's, with the other tenant in its meta.
#[tokio::test]
async fn a_workflows_jobs_are_one_tenants() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let member = |tenant: Option<&str>| match tenant {
        Some(tenant) => json!({ "type": "tenant.step", "args": [], "meta": { "tenant_id": tenant } }),
        None => json!({ "type": "tenant.step", "args": [] }),
    };
    let nested =
        |inner: Value| json!({ "type": "group", "jobs": [member(None), { "type": "chain", "steps": [inner] }] });
    let batch =
        |callback: Value| json!({ "type": "batch", "jobs": [member(None)], "callbacks": { "on_complete": callback } });
    for (client, body, expected) in [
        (
            ojs.as_tenant("acme"),
            nested(member(Some("globex"))),
            (400, "invalid_request"),
        ),
        (
            ojs.as_tenant("acme"),
            batch(member(Some("globex"))),
            (400, "invalid_request"),
        ),
        (
            ojs.clone(),
            json!({ "type": "group", "jobs": [member(Some("initech")), member(Some("globex"))] }),
            (400, "invalid_request"),
        ),
    ] {
        let (status, answer) = client.post("/ojs/v1/workflows", body).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str().unwrap()),
            expected,
            "{answer}"
        );
    }
    let stored: i64 = gateway
        .sql()
        .await
        .query_one("SELECT count(*) FROM ojs.workflows", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(stored, 0, "a refused workflow stores nothing");

    // Without a header, the members' meta.tenant_id names the workflow's tenant (a member
    // without one would be `default`'s, and disagree, as in a batch).
    let all_initech = json!({ "type": "group", "jobs": [member(Some("initech")), { "type": "chain", "steps": [member(Some("initech"))] }] });
    let (status, body) = ojs.post("/ojs/v1/workflows", all_initech).await;
    assert_eq!(status, 201, "{body}");
    let path = format!("/ojs/v1/workflows/{}", body["workflow"]["id"].as_str().unwrap());
    let (status, _) = ojs.as_tenant("initech").get(&path).await;
    assert_eq!(status, 200);
    assert_not_found(ojs.get(&path).await, "the default tenant's view");
    // With one, members without a meta.tenant_id get it written.
    let (status, body) = ojs
        .as_tenant("acme")
        .post("/ojs/v1/workflows", batch(member(Some("acme"))))
        .await;
    assert_eq!(status, 201, "{body}");
    let job = body["workflow"]["jobs"][0]["job_id"].as_str().unwrap();
    let (_, read) = ojs.as_tenant("acme").get(&format!("/ojs/v1/jobs/{job}")).await;
    assert_eq!(read["job"]["meta"], json!({ "tenant_id": "acme" }), "{read}");
    gateway.stop().await;
}

/// During a rolling upgrade, gateways of layout v55 insert workflows without a tenant; at their
/// commit the workflow takes the tenant of its jobs (of its nested workflows' jobs when it has
/// none of its own), so its tenant reads it through a current gateway and no other does.
#[tokio::test]
async fn a_workflow_written_without_a_tenant_takes_its_jobs_tenant() {
    let gateway = TestGateway::start().await;
    let (outer, inner, job) = (
        "0190a000-0000-7000-8000-0000000000a1",
        "0190a000-0000-7000-8000-0000000000a2",
        "0190a000-0000-7000-8000-0000000000a3",
    );
    // What a v55 gateway's `store_workflow` writes for a group whose one member is a chain.
    gateway
        .sql()
        .await
        .batch_execute(&format!(
            "BEGIN;
             INSERT INTO ojs.workflows (id, type, state, jobs_total) VALUES ('{outer}', 'group', 'running', 1);
             INSERT INTO ojs.workflows (id, type, state, jobs_total, parent_id, parent_step)
                 VALUES ('{inner}', 'chain', 'running', 1, '{outer}', 0);
             INSERT INTO ojs.jobs (id, queue, type, state, max_attempts, envelope, run_at, visibility_ms,
                                   workflow_id, workflow_step, tenant)
                 VALUES ('{job}', 'flow', 'tenant.step', 'available', 3, '{{\"args\": []}}', now(), 30000,
                         '{inner}', 0, 'acme');
             COMMIT;"
        ))
        .await
        .unwrap();
    let ojs = Ojs::of(&gateway);
    for id in [outer, inner] {
        let path = format!("/ojs/v1/workflows/{id}");
        let (status, body) = ojs.as_tenant("acme").get(&path).await;
        assert_eq!(status, 200, "{body}");
        assert_not_found(ojs.get(&path).await, "the default tenant's view");
    }
    gateway.stop().await;
}

/// A queue's depth bound (ext-backpressure) holds for each tenant apart: one tenant's backlog
/// at the bound refuses that tenant's next job, not another tenant's, and the depth each is told
/// is its own. The queue's stats still count every tenant's jobs. Fails before: the bound
/// counted all tenants' jobs, so acme's backlog refused globex's first job.
#[tokio::test]
async fn a_queue_depth_bound_holds_for_each_tenant_apart() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .call(
            "PUT",
            "/ojs/v1/admin/queues/bounded/config",
            Some(json!({ "backpressure": { "max_depth": 2 } })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (acme, globex) = (ojs.as_tenant("acme"), ojs.as_tenant("globex"));
    let job = json!({ "type": "tenant.task", "args": [], "options": { "queue": "bounded" } });
    for _ in 0..2 {
        let (status, body) = acme.post("/ojs/v1/jobs", job.clone()).await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, full) = acme.post("/ojs/v1/jobs", job.clone()).await;
    assert_eq!(
        (
            status,
            full["error"]["code"].as_str(),
            &full["error"]["details"]["depth"]
        ),
        (429, Some("QUEUE_FULL"), &json!(2)),
        "{full}"
    );
    let (status, headers, body) = globex.exchange("POST", "/ojs/v1/jobs", Some(job.clone())).await;
    assert_eq!(status, 201, "acme's backlog is not globex's: {body}");
    assert!(
        headers.get("x-ojs-queue-pressure").is_none(),
        "globex's 1 of 2 is below the warning"
    );
    let (status, body) = ojs.post("/ojs/v1/jobs", job.clone()).await;
    assert_eq!(status, 201, "nor the default tenant's: {body}");
    let (status, body) = globex.post("/ojs/v1/jobs", job.clone()).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = globex.post("/ojs/v1/jobs", job).await;
    assert_eq!(status, 429, "globex at its own bound: {body}");

    let (_, stats) = ojs.get("/ojs/v1/queues/bounded/stats").await;
    assert_eq!(stats["stats"]["depth"], 5, "{stats}");

    // The count reads the tenant's range of the queue only, whatever other tenants hold there.
    let sql = gateway.sql().await;
    sql.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
        .await
        .unwrap();
    let plan: Value = sql
        .query_one(
            "EXPLAIN (FORMAT JSON) SELECT 1 FROM ojs.jobs j WHERE j.queue = 'bounded' AND j.tenant = 'globex'
             AND j.state IN ('available', 'scheduled', 'retryable') LIMIT 2",
            &[],
        )
        .await
        .unwrap()
        .get("QUERY PLAN");
    let text = plan.to_string();
    assert!(text.contains("\"Index Name\":\"jobs_listing\""), "{text}");
    assert!(text.contains("tenant ="), "the tenant is an index condition: {text}");
    gateway.stop().await;
}

/// A tenant registers at most `--ojs-max-workers-per-tenant` workers: a heartbeat of one more
/// worker id (or a directive naming one) is 429 `rate_limited` with the bound in its details,
/// while the registered workers keep beating, other tenants register theirs, and a worker
/// removed makes room. The count reads the tenant's range of the index `workers_tenant`. Fails
/// before: any number of worker ids were registered (the flag did not exist).
#[tokio::test]
async fn a_tenants_registered_workers_are_bounded() {
    let gateway = TestGateway::with_args(common::fresh_database().await, &["--ojs-max-workers-per-tenant", "3"]).await;
    let ojs = Ojs::of(&gateway);
    let acme = ojs.as_tenant("acme");
    for worker in ["w1", "w2", "w3"] {
        heartbeat(&acme, worker, None).await;
    }
    let (status, headers, refused) = acme
        .exchange("POST", "/ojs/v1/workers/heartbeat", Some(json!({ "worker_id": "w4" })))
        .await;
    assert_eq!(
        (status, &refused["error"]["code"], &refused["error"]["retryable"]),
        (429, &json!("rate_limited"), &json!(true)),
        "{refused}"
    );
    assert_eq!(
        refused["error"]["details"],
        json!({ "tenant_id": "acme", "max_workers": 3 })
    );
    assert_eq!(headers.get("retry-after").map(|v| v.to_str().unwrap()), Some("60"));
    let (status, body) = acme.post("/ojs/v1/admin/workers/w5/quiet", json!({})).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (429, &json!("rate_limited")),
        "{body}"
    );

    // Registered workers keep beating (and take directives); other tenants are not held back.
    assert_eq!(heartbeat(&acme, "w1", Some("quiet")).await["state"], "quiet");
    let (status, body) = acme.post("/ojs/v1/admin/workers/w2/quiet", json!({})).await;
    assert_eq!(status, 200, "{body}");
    for worker in ["w1", "w2", "w3"] {
        heartbeat(&ojs.as_tenant("globex"), worker, None).await;
    }
    heartbeat(&ojs, "w4", None).await;

    // A worker removed (as the maintenance pass removes a silent one) makes room.
    let sql = gateway.sql().await;
    sql.execute("DELETE FROM ojs.workers WHERE id = 'acme w3'", &[])
        .await
        .unwrap();
    heartbeat(&acme, "w4", None).await;
    let acme_rows: i64 = sql
        .query_one("SELECT count(*) AS n FROM ojs.workers WHERE id LIKE 'acme %'", &[])
        .await
        .unwrap()
        .get("n");
    assert_eq!(acme_rows, 3);

    sql.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
        .await
        .unwrap();
    let plan: Value = sql
        .query_one(
            "EXPLAIN (FORMAT JSON) SELECT 1 FROM ojs.workers WHERE ojs.key_tenant(id) = 'acme' LIMIT 3",
            &[],
        )
        .await
        .unwrap()
        .get("QUERY PLAN");
    let text = plan.to_string();
    assert!(text.contains("\"Index Name\":\"workers_tenant\""), "{text}");
    gateway.stop().await;
}
