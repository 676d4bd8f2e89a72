//! OJS cases over HTTP/JSON: single enqueue, batch enqueue, and the worker's fetch+ack cycle on a
//! queue filled beforehand. Every answer is checked (status, the job's id, the batch's count, the
//! acknowledgement); OJS error objects count as errors under their code.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use super::Outcome;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Enqueue,
    Batch,
    /// Fetch one job and acknowledge it.
    Cycle,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Case {
    pub operation: Operation,
    /// Bytes of the job's one string argument.
    pub args_size: u64,
    /// Jobs per batch enqueue.
    pub batch: u64,
    /// Jobs put in the queue before a fetch+ack case.
    pub prefill: u64,
    pub queue: String,
}

pub struct Runner {
    http: Client<HttpConnector, Full<Bytes>>,
    /// `http://host:port/ojs/v1`
    base: String,
    case: Case,
    job: Value,
}

/// Jobs per request while filling a queue.
const FILL_BATCH: u64 = 1000;

impl Runner {
    pub fn new(base: &str, case: Case) -> Runner {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1024)
            .build(connector);
        let args = "x".repeat(case.args_size as usize);
        let job = json!({ "type": "loadgen.job", "args": [args], "options": { "queue": case.queue } });
        Runner {
            http,
            base: base.trim_end_matches('/').to_owned(),
            case,
            job,
        }
    }

    async fn post(&self, path: &str, body: &Value) -> Result<(u16, Value), String> {
        let request = http::Request::post(format!("{}{path}", self.base))
            .header("content-type", "application/openjobspec+json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| format!("request: {e}"))?;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|e| format!("connection: {e}"))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if !(200..300).contains(&status) {
            let code = value.pointer("/error/code").and_then(Value::as_str).unwrap_or("");
            return Err(format!("{status} {code}").trim().to_owned());
        }
        Ok((status, value))
    }

    async fn fetch_and_ack(&self) -> Outcome {
        let fetched = match self
            .post("/workers/fetch", &json!({ "queues": [self.case.queue] }))
            .await
        {
            Ok((_, body)) => body,
            Err(kind) => return Outcome::Error(kind),
        };
        let Some(job) = fetched["jobs"].get(0) else {
            return Outcome::Error("queue drained (raise --prefill)".into());
        };
        if job["type"] != self.job["type"] {
            return Outcome::Error("fetched a job of another type".into());
        }
        let ack = json!({ "job_id": job["id"], "attempt": job["attempt"] });
        match self.post("/workers/ack", &ack).await {
            Ok((_, body)) if body["acknowledged"] == Value::Bool(true) => Outcome::Ok {
                bytes: self.case.args_size,
            },
            Ok(_) => Outcome::Error("ack answered without acknowledged".into()),
            Err(kind) => Outcome::Error(kind),
        }
    }

    fn batch_of(&self, count: u64) -> Value {
        json!({ "jobs": vec![self.job.clone(); count as usize] })
    }

    /// Fills the queue a fetch+ack case drains.
    pub async fn prepare(&self) -> anyhow::Result<()> {
        if self.case.operation != Operation::Cycle {
            return Ok(());
        }
        for start in (0..self.case.prefill).step_by(FILL_BATCH as usize) {
            let count = FILL_BATCH.min(self.case.prefill - start);
            self.post("/jobs/batch", &self.batch_of(count))
                .await
                .map_err(|kind| anyhow::anyhow!("filling queue {}: {kind}", self.case.queue))?;
        }
        Ok(())
    }
}

impl super::Request for Runner {
    async fn once(&self, _worker: usize, _sequence: u64) -> Outcome {
        let args_bytes = self.case.args_size;
        match self.case.operation {
            Operation::Enqueue => match self.post("/jobs", &self.job).await {
                Ok((201, body)) if body.pointer("/job/id").is_some_and(Value::is_string) => {
                    Outcome::Ok { bytes: args_bytes }
                }
                Ok(_) => Outcome::Error("enqueue answered without a new job".into()),
                Err(kind) => Outcome::Error(kind),
            },
            Operation::Batch => match self.post("/jobs/batch", &self.batch_of(self.case.batch)).await {
                Ok((201, body)) if body["count"].as_u64() == Some(self.case.batch) => Outcome::Batch {
                    bytes: args_bytes * self.case.batch,
                    items: self.case.batch,
                },
                Ok(_) => Outcome::Error("batch answered with another count".into()),
                Err(kind) => Outcome::Error(kind),
            },
            Operation::Cycle => self.fetch_and_ack().await,
        }
    }
}
