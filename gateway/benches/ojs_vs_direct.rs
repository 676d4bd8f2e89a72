//! OJS through the gateway next to the raw claim issued directly with tokio-postgres on the same
//! PostgreSQL: single enqueue and batch enqueue (100 jobs per request) with 1 KiB args, and the
//! fetch+ack cycle at 1 and 16 workers against a `FOR UPDATE SKIP LOCKED` claim-and-complete
//! loop on the same table. Prints rates side by side.
//!
//! `cargo bench -p pgvs3-gateway --bench ojs_vs_direct -- [--jobs N] [--seconds N] [--json FILE]`

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use pgvs3_gateway::pg::embedded::{EmbeddedOptions, EmbeddedPostgres};
use pgvs3_gateway::serve::RunningGateway;
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    /// Jobs per fetch+ack run (each run drains a queue of this many).
    #[arg(long, default_value_t = 20_000)]
    jobs: usize,
    /// Seconds per enqueue case.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Append one JSON object per case to this file (NDJSON): `just bench` reads the direct
    /// column from it.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// `cargo bench` passes this; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The bearer token the bench's gateway takes for its OJS job routes.
const OJS_TOKEN: &str = "bench-ojs-token";

#[derive(Clone)]
struct Ojs {
    http: Client<HttpConnector, Full<Bytes>>,
    base: String,
}

impl Ojs {
    async fn post(&self, path: &str, body: &Value) -> Value {
        let request = hyper::Request::post(format!("{}{path}", self.base))
            .header("content-type", "application/openjobspec+json")
            .header("authorization", format!("Bearer {OJS_TOKEN}"))
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let response = self.http.request(request).await.unwrap();
        assert!(response.status().is_success(), "{path}: {}", response.status());
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    }
}

fn job(queue: &str, args: &str) -> Value {
    json!({ "type": "bench.job", "args": [args], "options": { "queue": queue } })
}

/// `clients` closed loops for `seconds`; each call of `op` returns how many jobs it handled.
async fn timed<F, Fut>(clients: usize, seconds: u64, op: F) -> f64
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = usize> + Send,
{
    let op = Arc::new(op);
    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let stop = start + Duration::from_secs(seconds);
    let loops: Vec<_> = (0..clients)
        .map(|_| {
            let (op, done) = (Arc::clone(&op), Arc::clone(&done));
            tokio::spawn(async move {
                while Instant::now() < stop {
                    done.fetch_add(op().await, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for handle in loops {
        handle.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// `workers` loops until each finds nothing; returns completed jobs per second.
async fn drain<F, Fut>(workers: usize, op: F) -> f64
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let op = Arc::new(op);
    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let loops: Vec<_> = (0..workers)
        .map(|_| {
            let (op, done) = (Arc::clone(&op), Arc::clone(&done));
            tokio::spawn(async move {
                while op().await {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for handle in loops {
        handle.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let data_dir = std::env::temp_dir().join(format!("pgvs3-ojs-bench-{}", std::process::id()));
    let mut server = EmbeddedPostgres::start(EmbeddedOptions {
        data_dir: data_dir.clone(),
        pg_bin: None,
        memory_budget: None,
        shared_buffers: None,
        tls: None,
    })
    .await?;
    let config = server.connect_config();
    let socket = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
    };
    let url = format!("host={socket} port={} user=pgvs3 dbname=postgres", server.port());
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: pgvs3_gateway::config::ServeArgs,
    }
    let serve = Cli::parse_from([
        "pgvs3",
        "--database-url",
        &url,
        "--master-key",
        "bench",
        "--s3-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--ojs-addr",
        "127.0.0.1:0",
        // The job routes need a bearer token, as they do by default in production.
        "--ojs-token",
        OJS_TOKEN,
        // Its default port may be taken by another gateway on the machine.
        "--resp-addr",
        "off",
        "--pool-size",
        "32",
    ])
    .serve;
    let gateway = RunningGateway::start(&serve).await?;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let ojs = Ojs {
        http: Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(64)
            .build(connector),
        base: format!("http://{}", gateway.ojs_addr.expect("OJS listener")),
    };
    let args_1k = "x".repeat(1024);
    let direct = Arc::new(pgvs3_gateway::pg::pool(url.parse()?, 32)?);

    println!("{:<34} {:>12}", "case", "jobs/s");
    for clients in [1, 16] {
        let (ojs, payload) = (ojs.clone(), args_1k.clone());
        let rate = timed(clients, args.seconds, move || {
            let (ojs, payload) = (ojs.clone(), payload.clone());
            async move {
                ojs.post("/ojs/v1/jobs", &job("enqueue", &payload)).await;
                1
            }
        })
        .await;
        let case = format!("enqueue, {clients} client(s)");
        println!("{case:<34} {rate:>12.0}");
        record(&args, &case, rate, None)?;
    }
    for clients in [1, 16] {
        let (ojs, payload) = (ojs.clone(), args_1k.clone());
        let rate = timed(clients, args.seconds, move || {
            let (ojs, payload) = (ojs.clone(), payload.clone());
            async move {
                let jobs: Vec<Value> = (0..100).map(|_| job("batch", &payload)).collect();
                ojs.post("/ojs/v1/jobs/batch", &json!({ "jobs": jobs })).await;
                100
            }
        })
        .await;
        let case = format!("batch enqueue x100, {clients} client(s)");
        println!("{case:<34} {rate:>12.0}");
        record(&args, &case, rate, None)?;
    }

    for workers in [1, 16] {
        let queue = format!("cycle-{workers}");
        fill(&ojs, &queue, args.jobs, &args_1k).await;
        let (ojs_c, queue_c) = (ojs.clone(), queue.clone());
        let gateway_rate = drain(workers, move || {
            let (ojs, queue) = (ojs_c.clone(), queue_c.clone());
            async move {
                let fetched = ojs.post("/ojs/v1/workers/fetch", &json!({ "queues": [queue] })).await;
                let Some(job) = fetched["jobs"].get(0) else {
                    return false;
                };
                ojs.post(
                    "/ojs/v1/workers/ack",
                    &json!({ "job_id": job["id"], "attempt": job["attempt"] }),
                )
                .await;
                true
            }
        })
        .await;

        let raw_queue = format!("raw-{workers}");
        fill(&ojs, &raw_queue, args.jobs, &args_1k).await;
        let pool = Arc::clone(&direct);
        let raw_rate = drain(workers, move || {
            let (pool, queue) = (Arc::clone(&pool), raw_queue.clone());
            async move {
                let client = pool.get().await.unwrap();
                let claimed = client
                    .query_opt(
                        "UPDATE ojs.jobs j SET state = 'active', attempt = attempt + 1, started_at = now(),
                                visible_until = now() + interval '30 s'
                         FROM (SELECT id FROM ojs.jobs WHERE state = 'available' AND queue = $1
                               ORDER BY priority DESC, seq LIMIT 1 FOR UPDATE SKIP LOCKED) c
                         WHERE j.id = c.id RETURNING j.id, j.envelope",
                        &[&queue],
                    )
                    .await
                    .unwrap();
                let Some(row) = claimed else { return false };
                let id: String = row.get("id");
                client
                    .execute(
                        "UPDATE ojs.jobs SET state = 'completed', completed_at = now() WHERE id = $1 AND state = 'active'",
                        &[&id],
                    )
                    .await
                    .unwrap();
                true
            }
        })
        .await;
        let case = format!("fetch+ack, {workers} worker(s)");
        println!(
            "{case:<34} {gateway_rate:>12.0}   raw SKIP LOCKED {raw_rate:>8.0}   ratio {:.2}",
            gateway_rate / raw_rate
        );
        record(&args, &case, gateway_rate, Some(raw_rate))?;
    }
    gateway.shutdown().await?;
    server.stop().await?;
    let _ = std::fs::remove_dir_all(data_dir);
    Ok(())
}

/// Appends `{case, gateway: {rate}, direct: {rate}}` to the --json file, if any.
fn record(args: &Args, case: &str, gateway_rate: f64, direct_rate: Option<f64>) -> anyhow::Result<()> {
    let Some(path) = &args.json else { return Ok(()) };
    use std::io::Write;
    let mut record = json!({ "case": case, "gateway": { "rate": gateway_rate } });
    if let Some(rate) = direct_rate {
        record["direct"] = json!({ "rate": rate });
    }
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    writeln!(file, "{record}")?;
    Ok(())
}

async fn fill(ojs: &Ojs, queue: &str, count: usize, payload: &str) {
    for start in (0..count).step_by(1000) {
        let jobs: Vec<Value> = (start..count.min(start + 1000)).map(|_| job(queue, payload)).collect();
        ojs.post("/ojs/v1/jobs/batch", &json!({ "jobs": jobs })).await;
    }
}
