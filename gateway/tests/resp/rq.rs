//! A real job framework over pgvs3's RESP port: rq (PyPI `rq`, pinned in scripts/test) enqueues
//! jobs, an `rq worker --burst` runs them, and their results, failures and queue state are read
//! back through rq's own API. rq 2.x keeps every job's result in a stream (`XADD
//! rq:results:<id> MAXLEN ~ 10 *` in the pipeline that closes the job, read back with
//! `XREVRANGE`, `XLEN`, `XREAD`). `Queue.empty()` runs rq's Lua script (`EVALSHA`, then `EVAL`
//! on NOSCRIPT), which pops every job id and deletes job hashes its KEYS do not declare.

use pgvs3_testkit as common;

use common::TestGateway;

const TASKS: &str = r#"
def add(a, b):
    return a + b

def shout(text):
    return text.upper() * 2

def fail():
    raise ValueError("boom")
"#;

const SCRIPT: &str = r#"
import json, os, subprocess, sys
from redis import Redis
from rq import Queue
from rq.job import Job

url = sys.argv[1]
connection = Redis.from_url(url)
queue = Queue("default", connection=connection)
jobs = [queue.enqueue("tasks.add", i, 10 * i) for i in range(20)]
text = queue.enqueue("tasks.shout", "pgvs3")
failing = queue.enqueue("tasks.fail")
delayed_parent = queue.enqueue("tasks.add", 1, 1)
dependent = queue.enqueue("tasks.add", 2, 2, depends_on=delayed_parent)
before = {"queued": queue.count, "deferred": queue.deferred_job_registry.count}

extra = Queue("extra", connection=connection)
extra_jobs = [extra.enqueue("tasks.add", i, i) for i in range(5)]
emptied = {"removed": extra.empty(), "queued": extra.count,
           "job_hashes": sum(connection.exists(job.key) for job in extra_jobs)}

worker = subprocess.run(
    [os.path.join(os.path.dirname(sys.executable), "rq"), "worker", "--burst", "--url", url, "default"],
    capture_output=True, text=True, timeout=120,
)
print(worker.stdout, worker.stderr, file=sys.stderr)
if worker.returncode != 0:
    sys.exit(1)

def fetch(job):
    return Job.fetch(job.id, connection=connection)

print(json.dumps({
    "before": before,
    "emptied": emptied,
    "results": [fetch(job).return_value() for job in jobs],
    "text": fetch(text).return_value(),
    "failed": fetch(failing).get_status(),
    "failed_registry": queue.failed_job_registry.count,
    "dependent": fetch(dependent).return_value(),
    "finished_registry": queue.finished_job_registry.count,
    "left": queue.count,
}))
"#;

#[tokio::test]
async fn rq_runs_jobs_through_pgvs3() {
    let gateway = TestGateway::with_resp(&[]).await;
    let dir = tempdir();
    std::fs::write(dir.join("tasks.py"), TASKS).unwrap();
    std::fs::write(dir.join("run.py"), SCRIPT).unwrap();
    let url = format!("redis://{}/0", gateway.resp_addr());
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(180),
        tokio::process::Command::new("python3")
            .arg(dir.join("run.py"))
            .arg(&url)
            .current_dir(&dir)
            .env("PYTHONPATH", &dir)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the rq run ends within 180 s")
    .unwrap_or_else(|err| panic!("python3 could not start: {err}; run the tests with scripts/test"));
    assert!(
        output.status.success(),
        "the rq script failed (rq missing? scripts/test installs it):\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["before"]["queued"], 23, "{report}");
    assert_eq!(report["before"]["deferred"], 1, "{report}");
    assert_eq!(
        report["emptied"],
        serde_json::json!({"removed": 5, "queued": 0, "job_hashes": 0}),
        "Queue.empty() (a Lua script) removes the queue's jobs and their hashes"
    );
    let expected: Vec<i64> = (0..20).map(|i| i + 10 * i).collect();
    assert_eq!(report["results"], serde_json::json!(expected), "{report}");
    assert_eq!(report["text"], "PGVS3PGVS3");
    assert_eq!(report["failed"], "failed");
    assert_eq!(report["failed_registry"], 1);
    assert_eq!(report["dependent"], 4, "a job run after the job it depends on");
    assert_eq!(report["finished_registry"], 23);
    assert_eq!(report["left"], 0);
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pgvs3-rq-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
