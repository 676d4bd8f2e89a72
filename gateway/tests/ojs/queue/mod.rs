//! OJS queue properties over plain HTTP against a real PostgreSQL: exactly-once completion under
//! 16 concurrent workers, fencing of stale workers, durability across a restart, read-only mode,
//! size limits and the bearer token.

mod claims;
mod cron;
mod dependencies;
mod event_log;
mod jobs;
mod workflows;

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

/// Waits until `n` sessions of this test's database wait on a lock while running a statement
/// containing `needle`: a race made to land one way by a lock the test holds.
async fn until_waiting(sql: &tokio_postgres::Client, needle: &str, n: i64) {
    for _ in 0..400 {
        let row = sql
            .query_one(
                "SELECT count(*) AS n FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'
                   AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()",
                &[&needle],
            )
            .await
            .unwrap();
        if row.get::<_, i64>("n") >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("nobody waits on a lock in a statement with {needle}");
}

/// The job `id` once a promotion has moved it out of state `from`: fetches (of a queue nobody
/// uses) promote, at most once per 50 ms each gateway, so this fetches until one has.
async fn promoted(ojs: &Ojs, id: &str, from: &str) -> Value {
    for _ in 0..400 {
        assert!(ojs.fetch("promotion-only", "promoter").await.is_none());
        let (status, body) = ojs.get(&format!("/ojs/v1/jobs/{id}")).await;
        assert_eq!(status, 200, "{body}");
        if body["job"]["state"] != from {
            return body["job"].clone();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("job {id} stays {from}");
}

fn job_in(queue: &str, job_type: &str, args: Value) -> Value {
    json!({ "type": job_type, "args": args, "options": { "queue": queue, "retry": { "max_attempts": 1 } } })
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

fn step(queue: &str, name: &str) -> Value {
    job_in(queue, "nest.step", json!([name]))
}
