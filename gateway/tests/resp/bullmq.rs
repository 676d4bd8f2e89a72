//! A Node.js job queue over pgvs3's RESP port: BullMQ (npm `bullmq` with `ioredis`, pinned in
//! e2e/node/package.json, installed by scripts/test under ~/.cache/pgvs3-tools/node) adds
//! plain, prioritized and delayed jobs, a flow (a parent run after its children) and a job
//! scheduler; a Worker runs them (one retried with backoff until it succeeds, one until it fails
//! for good), and QueueEvents hears every completion, failure and progress report (an `XREAD
//! BLOCK` on the queue's event stream). BullMQ does all of it in Lua scripts that
//! use `cmsgpack` and `cjson`, so this is their test against a real user too.
//!
//! Without node or the installed packages the test says "not run" and passes, unless
//! PGVS3_REQUIRE_NODE is set (CI sets it), as the browser tier does.

use crate::redis_rs;
use pgvs3_testkit as common;

use std::path::PathBuf;

use common::TestGateway;

const JOBS: usize = 20;

/// Where scripts/test installs the packages (`npm ci` of e2e/node).
fn node_modules() -> PathBuf {
    let tools = std::env::var_os("PGVS3_TOOLS_DIR").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/pgvs3-tools"),
        PathBuf::from,
    );
    tools.join("node/node_modules")
}

fn node_ready(modules: &std::path::Path) -> Result<(), String> {
    let version = std::process::Command::new("node").arg("--version").output();
    if !version.is_ok_and(|output| output.status.success()) {
        return Err("node is not installed".into());
    }
    if !modules.join("bullmq/package.json").is_file() {
        return Err(format!("bullmq is not installed in {}", modules.display()));
    }
    Ok(())
}

#[tokio::test]
async fn bullmq_runs_a_queue_through_pgvs3() {
    let modules = node_modules();
    if let Err(why) = node_ready(&modules) {
        assert!(
            std::env::var_os("PGVS3_REQUIRE_NODE").is_none(),
            "BullMQ tier not run: {why}, and PGVS3_REQUIRE_NODE is set"
        );
        eprintln!("BullMQ tier not run: {why} (scripts/test installs it)");
        return;
    }
    let gateway = TestGateway::with_resp(&[]).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../e2e/node/bullmq-run.js");
    let url = format!("redis://{}/0", gateway.resp_addr());
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(180),
        tokio::process::Command::new("node")
            .arg(&script)
            .arg(&url)
            .arg(JOBS.to_string())
            .env("NODE_PATH", &modules)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the BullMQ run ends within 180 s")
    .expect("node starts");
    assert!(
        output.status.success(),
        "the BullMQ script failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&output.stdout)));

    assert_eq!(report["delayed_state"], "delayed", "{report}");
    assert_eq!(
        report["before"],
        serde_json::json!({"wait": JOBS + 2, "prioritized": 3, "delayed": 1, "active": 0, "completed": 0, "failed": 0}),
        "plain, retried and failing jobs wait; prioritized and delayed ones have sets of their own"
    );
    let sums: Vec<usize> = (0..JOBS).map(|i| i + 10 * i).collect();
    assert_eq!(report["results"], serde_json::json!(sums), "{report}");
    assert_eq!(
        report["priority_order"],
        serde_json::json!([1, 2, 3]),
        "lower priority numbers first"
    );
    assert_eq!(
        report["priority_results"],
        serde_json::json!(["priority 3", "priority 1", "priority 2"])
    );
    assert_eq!(report["delayed"], serde_json::json!({"result": 1001, "waited": true}));
    assert_eq!(
        report["flaky"],
        serde_json::json!({"state": "completed", "result": "ok after 2 failures", "attempts": 3}),
        "retried with backoff until it succeeds"
    );
    assert_eq!(
        report["doomed"],
        serde_json::json!({"state": "failed", "reason": "boom", "attempts": 2}),
        "failed for good after its attempts"
    );
    assert_eq!(report["parent"], 300, "the parent sums its children's results");
    assert_eq!(report["ticks"], 3, "the scheduler made its 3 jobs");
    assert_eq!(report["schedulers"], serde_json::json!([3]));
    // Plain jobs, 3 prioritized, the delayed one, the retried one, the flow's 3 and 3 ticks.
    let completed = JOBS + 11;
    assert_eq!(
        report["after"],
        serde_json::json!({"wait": 0, "prioritized": 0, "delayed": 0, "active": 0, "completed": completed,
            "failed": 1, "waiting-children": 0})
    );
    assert_eq!(report["events"]["completed"], completed, "{report}");
    assert_eq!(report["events"]["failed"], 1, "{report}");
    assert_eq!(
        report["events"]["progress"],
        JOBS + 1,
        "each `add` job reported its progress once"
    );

    // The same state, read from pgvs3's side.
    let mut con = redis_rs::connect(&gateway).await;
    let completed_set: usize = redis_rs::query(&mut con, &["ZCARD", "bull:pgvs3:completed"]).await;
    let failed: Vec<String> = redis_rs::query(&mut con, &["ZRANGE", "bull:pgvs3:failed", "0", "-1"]).await;
    assert_eq!(completed_set, completed);
    assert_eq!(failed.len(), 1);
    let reason: String = redis_rs::query(
        &mut con,
        &["HGET", &format!("bull:pgvs3:{}", failed[0]), "failedReason"],
    )
    .await;
    assert_eq!(reason, "boom");
    let kind: String = redis_rs::query(&mut con, &["TYPE", "bull:pgvs3:events"]).await;
    assert_eq!(kind, "stream", "BullMQ's events are a stream");
}
