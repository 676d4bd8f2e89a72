//! A second real job framework over pgvs3's RESP port: Celery (PyPI `celery` with its Redis
//! transport from kombu, pinned in scripts/test) with pgvs3 as both broker and result backend.
//! A `celery worker` runs plain tasks, a group, a chain, a chord (the backend's counter and
//! result list), a countdown task (held back by the worker, tracked in kombu's `unacked`
//! hash and sorted set), a task that retries itself and one that fails; results come back
//! through Celery's own API.

use pgvs3_testkit as common;

use common::TestGateway;

const TASKS: &str = r#"
import os
from celery import Celery

url = os.environ["PGVS3_RESP_URL"]
app = Celery("tasks", broker=url, backend=url)
app.conf.broker_connection_retry_on_startup = True

@app.task
def add(a, b):
    return a + b

@app.task
def total(values):
    return sum(values)

@app.task(bind=True, max_retries=3, default_retry_delay=0)
def flaky(self, failures):
    if self.request.retries < failures:
        raise self.retry(exc=ValueError("again"))
    return self.request.retries

@app.task
def boom():
    raise ValueError("boom")
"#;

const SCRIPT: &str = r#"
import json, os, subprocess, sys
from celery import chain, chord, group
from redis import Redis
from tasks import add, boom, flaky, total

worker = subprocess.Popen(
    [os.path.join(os.path.dirname(sys.executable), "celery"), "-A", "tasks", "worker", "--pool", "solo",
     "--loglevel", "warning", "--without-gossip", "--without-mingle", "--without-heartbeat"],
    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
try:
    report = {
        "results": [add.delay(i, 10 * i).get(timeout=60) for i in range(5)],
        "group": group(add.s(i, 1) for i in range(10))().get(timeout=60),
        "chain": chain(add.s(1, 2), add.s(3), add.s(4))().get(timeout=60),
        "chord": chord(add.s(i, i) for i in range(6))(total.s()).get(timeout=60),
        "countdown": add.apply_async((20, 22), countdown=1).get(timeout=60),
        "retried": flaky.delay(2).get(timeout=60),
    }
    try:
        boom.delay().get(timeout=60)
        report["failed"] = None
    except ValueError as err:
        report["failed"] = str(err)
    redis = Redis.from_url(os.environ["PGVS3_RESP_URL"])
    report["binding"] = redis.type("_kombu.binding.celery").decode()
    report["queued"] = redis.llen("celery")
    print(json.dumps(report))
finally:
    worker.terminate()
    sys.stderr.write(worker.communicate(timeout=30)[0].decode(errors="replace")[-4000:])
"#;

#[tokio::test]
async fn celery_runs_tasks_through_pgvs3_as_broker_and_backend() {
    let gateway = TestGateway::with_resp(&[]).await;
    let dir = std::env::temp_dir().join(format!("pgvs3-celery-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tasks.py"), TASKS).unwrap();
    std::fs::write(dir.join("run.py"), SCRIPT).unwrap();
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(180),
        tokio::process::Command::new("python3")
            .arg(dir.join("run.py"))
            .current_dir(&dir)
            .env("PYTHONPATH", &dir)
            .env("PGVS3_RESP_URL", format!("redis://{}/0", gateway.resp_addr()))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the Celery run ends within 180 s")
    .unwrap_or_else(|err| panic!("python3 could not start: {err}; run the tests with scripts/test"));
    assert!(
        output.status.success(),
        "the Celery script failed (celery missing? scripts/test installs it):\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let sums: Vec<i64> = (0..5).map(|i| i + 10 * i).collect();
    assert_eq!(report["results"], serde_json::json!(sums), "{report}");
    let group: Vec<i64> = (1..=10).collect();
    assert_eq!(report["group"], serde_json::json!(group), "{report}");
    assert_eq!(report["chain"], 10, "((1 + 2) + 3) + 4");
    assert_eq!(report["chord"], 30, "the chord's body sums its header's six results");
    assert_eq!(report["countdown"], 42);
    assert_eq!(report["retried"], 2, "the task succeeded on its second retry");
    assert_eq!(
        report["failed"], "boom",
        "the failure and its exception reach the caller"
    );
    assert_eq!(report["binding"], "set", "kombu's routing table is a set");
    assert_eq!(report["queued"], 0, "every message was consumed");
    let _ = std::fs::remove_dir_all(&dir);
}
