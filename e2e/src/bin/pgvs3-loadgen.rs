//! `pgvs3-loadgen`: closed-loop load against any S3, RESP or OJS endpoint (pgvs3 or a peer).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use pgvs3_e2e::loadgen::session::Session;
use pgvs3_e2e::loadgen::{self, Budget, cache, capacity, human_size, ojs, requests, resp, s3, sha256_hex};
use pgvs3_e2e::web_identity::WebIdentity;
use serde_json::json;

#[derive(Parser)]
#[command(
    name = "pgvs3-loadgen",
    version,
    about = "Closed-loop load generator for pgvs3 and its peers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// S3 load: one or more operations on objects of one or more sizes (or a payload file).
    S3(S3Args),
    /// RESP load: GET, SET, MGET, INCR, with a pipeline depth.
    Resp(RespArgs),
    /// OJS load: enqueue, batch enqueue, fetch+ack.
    Ojs(OjsArgs),
    /// The origin cache tier: cold and warm GETs through a cache bucket, PUTs acknowledged by it.
    Cache(CacheArgs),
}

/// How each case runs, and what is recorded: shared by every protocol.
#[derive(Args)]
struct RunArgs {
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// Measured time per case (ignored with --requests).
    #[arg(long, default_value = "10", value_parser = seconds)]
    duration: Duration,
    /// A request budget per case instead of a duration.
    #[arg(long)]
    requests: Option<u64>,
    #[arg(long, default_value = "2", value_parser = seconds)]
    warmup: Duration,
    #[arg(long, default_value = "60", value_parser = seconds)]
    timeout: Duration,
    /// Append one JSON object per case to this file (NDJSON).
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    capacity: CapacityArgs,
}

#[derive(Args)]
struct CapacityArgs {
    /// Per case, snapshot PostgreSQL (relation sizes, WAL, checkpoints) and the gateway (RSS,
    /// pool) before and after, and after --capacity-drain.
    #[arg(long, requires = "capacity_database_url")]
    capacity: bool,
    /// The gateway's database, as a libpq connection string.
    #[arg(long, env = "PGVS3_LOADGEN_DATABASE_URL")]
    capacity_database_url: Option<String>,
    /// The gateway's Prometheus endpoint (http://ADMIN/metrics), for its pool gauges.
    #[arg(long)]
    capacity_metrics_url: Option<String>,
    /// The gateway's process id, for its resident memory.
    #[arg(long)]
    capacity_gateway_pid: Option<u32>,
    /// A shell command run after each case, before the last snapshot (e.g.
    /// `pgvs3 admin --data-dir D maintenance --run-once --grace 0s`).
    #[arg(long)]
    capacity_drain: Option<String>,
}

#[derive(Args)]
struct S3Connection {
    #[arg(long, env = "AWS_ENDPOINT_URL", default_value = "http://127.0.0.1:9000")]
    endpoint: String,
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    region: String,
    #[arg(long, env = "AWS_ACCESS_KEY_ID", required_unless_present = "role_arn")]
    access_key: Option<String>,
    #[arg(
        long,
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true,
        required_unless_present = "role_arn"
    )]
    secret_key: Option<String>,
    /// Session credentials instead of a static key: before the run, assume this role at STS
    /// (the S3 endpoint) with the web identity token in --web-identity-token-file, as an SDK's
    /// web identity provider does (--access-key/--secret-key, from the environment too, are then
    /// not used). The session is taken once: it must outlast the run (1 h).
    #[arg(long, requires = "web_identity_token_file")]
    role_arn: Option<String>,
    /// The web identity token (a JWT) for --role-arn.
    #[arg(long, requires = "role_arn")]
    web_identity_token_file: Option<PathBuf>,
    #[arg(long, default_value = "loadgen")]
    bucket: String,
    /// The CA certificate (PEM) an `https://` endpoint's certificate chains to.
    #[arg(long)]
    ca_cert: Option<std::path::PathBuf>,
    /// Turns versioning on for the bucket before the run (a versioned bucket against an
    /// unversioned one, side by side).
    #[arg(long)]
    versioning: bool,
}

impl S3Connection {
    /// The target, with a session's credentials when --role-arn asks for them.
    async fn target(&self) -> anyhow::Result<s3::Target> {
        let endpoint = self.endpoint.trim_end_matches('/').to_owned();
        let (access_key, secret_key, session_token) = match (&self.role_arn, &self.web_identity_token_file) {
            (Some(role_arn), Some(token_file)) => {
                let session = WebIdentity {
                    endpoint: endpoint.clone(),
                    region: self.region.clone(),
                    role_arn: role_arn.clone(),
                    token_file: token_file.clone(),
                    session_name: "pgvs3-loadgen".into(),
                    ca_cert: self.ca_cert.clone(),
                }
                .assume()
                .await
                .map_err(anyhow::Error::msg)?;
                (
                    session.access_key_id().to_owned(),
                    session.secret_access_key().to_owned(),
                    session.session_token().map(str::to_owned),
                )
            }
            // clap requires both keys without --role-arn
            _ => (
                self.access_key.clone().unwrap_or_default(),
                self.secret_key.clone().unwrap_or_default(),
                None,
            ),
        };
        Ok(s3::Target {
            ca_cert: self.ca_cert.clone(),
            endpoint,
            region: self.region.clone(),
            access_key,
            secret_key,
            session_token,
            bucket: self.bucket.clone(),
            versioning: self.versioning,
        })
    }
}

#[derive(Args)]
struct S3Args {
    #[command(flatten)]
    connection: S3Connection,
    /// Operations to run, one case each (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "put,get")]
    ops: Vec<s3::Operation>,
    /// Object sizes, one case each (comma-separated: 4KiB,64MiB,...).
    #[arg(long, value_delimiter = ',', default_value = "4KiB", value_parser = loadgen::parse_size)]
    sizes: Vec<u64>,
    /// Objects hold these files' bytes instead (e.g. the Parquet fixtures): one case per file
    /// and operation, in place of --sizes.
    #[arg(long, value_delimiter = ',')]
    payload_file: Vec<PathBuf>,
    /// Distinct keys per case.
    #[arg(long, default_value_t = 1000)]
    keys: u64,
    #[arg(long)]
    shared_key: bool,
    #[arg(long)]
    unique_reads: bool,
    /// Bytes per ranged read.
    #[arg(long, default_value = "1MiB", value_parser = loadgen::parse_size)]
    range_size: u64,
    /// Write the objects that read cases read through this endpoint instead (e.g. a cache's
    /// origin, so that the cache's first reads are cold).
    #[arg(long)]
    seed_endpoint: Option<String>,
    /// The bucket to seed at --seed-endpoint (default: --bucket).
    #[arg(long)]
    seed_bucket: Option<String>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
struct RespArgs {
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    url: String,
    #[arg(long, value_enum, value_delimiter = ',', default_value = "set,get")]
    ops: Vec<resp::Operation>,
    /// Value sizes, one case each.
    #[arg(long, value_delimiter = ',', default_value = "4KiB", value_parser = loadgen::parse_size)]
    sizes: Vec<u64>,
    /// Pipeline depths (commands per round trip), one case each.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pipeline: Vec<u64>,
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Keys per MGET.
    #[arg(long, default_value_t = 10)]
    mget_keys: u64,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
struct OjsArgs {
    /// The OJS base URL (what `pgvs3 serve` prints: http://HOST:PORT/ojs/v1).
    #[arg(long, default_value = "http://127.0.0.1:8080/ojs/v1")]
    url: String,
    #[arg(long, value_enum, value_delimiter = ',', default_value = "enqueue,batch,cycle")]
    ops: Vec<ojs::Operation>,
    /// Bytes of each job's argument.
    #[arg(long, default_value = "1KiB", value_parser = loadgen::parse_size)]
    args_size: u64,
    /// Jobs per batch enqueue.
    #[arg(long, default_value_t = 100)]
    batch: u64,
    /// Jobs queued before a fetch+ack case (default: the request budget, else 20000).
    #[arg(long)]
    prefill: Option<u64>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
struct CacheArgs {
    /// The cache gateway, and (--bucket) its cache bucket.
    #[command(flatten)]
    connection: S3Connection,
    /// The origin the cache bucket fronts (same credentials).
    #[arg(long)]
    origin_endpoint: String,
    #[arg(long)]
    origin_bucket: String,
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "cold-get,warm-get,write-back-put"
    )]
    ops: Vec<cache::Operation>,
    #[arg(long, value_delimiter = ',', default_value = "10MiB", value_parser = loadgen::parse_size)]
    sizes: Vec<u64>,
    /// Distinct keys per case (a cold case reads each exactly once).
    #[arg(long, default_value_t = 5)]
    keys: u64,
    #[command(flatten)]
    run: RunArgs,
}

fn seconds(text: &str) -> Result<Duration, String> {
    text.trim_end_matches('s')
        .parse::<f64>()
        .map(Duration::from_secs_f64)
        .map_err(|e| format!("{text}: {e}"))
}

impl RunArgs {
    fn budget(&self) -> Budget {
        Budget {
            workers: self.workers,
            warmup: if self.requests.is_some() {
                Duration::ZERO
            } else {
                self.warmup
            },
            duration: self.requests.is_none().then_some(self.duration),
            requests: self.requests,
            timeout: self.timeout,
        }
    }

    async fn session(&self) -> anyhow::Result<Session> {
        let capacity = &self.capacity;
        let probe = match (&capacity.capacity_database_url, capacity.capacity) {
            (Some(database_url), true) => Some(
                capacity::Probe::connect(capacity::Sources {
                    database_url: database_url.clone(),
                    metrics_url: capacity.capacity_metrics_url.clone(),
                    gateway_pid: capacity.capacity_gateway_pid,
                    drain_command: capacity.capacity_drain.clone(),
                })
                .await
                .context("connecting to the gateway's database for --capacity")?,
            ),
            _ => None,
        };
        Session::open(self.json.as_deref(), probe)
    }
}

/// Seeding writes a case's objects before it is measured: a few dozen at once fill the pipe, and
/// hundreds at once only queue in the server's admission (or are told to slow down).
fn setup_concurrency(workers: usize) -> usize {
    workers.min(32)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let session = match Cli::parse().command {
        Command::S3(args) => run_s3(args).await?,
        Command::Resp(args) => run_resp(args).await?,
        Command::Ojs(args) => run_ojs(args).await?,
        Command::Cache(args) => run_cache(args).await?,
    };
    if session.failed() {
        std::process::exit(2);
    }
    Ok(())
}

async fn run_s3(args: S3Args) -> anyhow::Result<Session> {
    let target = args.connection.target().await?;
    let client = Arc::new(s3::S3Client::new(target.clone()));
    let seeder = args.seed_endpoint.as_ref().map(|endpoint| {
        s3::S3Client::new(s3::Target {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            bucket: args
                .seed_bucket
                .clone()
                .unwrap_or_else(|| args.connection.bucket.clone()),
            ..target.clone()
        })
    });
    // One payload per case: generated of each size, or read from each file.
    let mut payloads = Vec::new();
    if args.payload_file.is_empty() {
        payloads.extend(
            args.sizes
                .iter()
                .map(|&size| (human_size(size), loadgen::payload(size))),
        );
    }
    for path in &args.payload_file {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        payloads.push((name, bytes.into()));
    }
    let budget = args.run.budget();
    let mut session = args.run.session().await?;
    for (label, payload) in payloads {
        let size = payload.len() as u64;
        let payload_sha256 = sha256_hex(&payload);
        for &operation in &args.ops {
            let case = s3::Case {
                operation,
                size,
                keys: args.keys.max(1),
                shared_key: args.shared_key,
                unique_reads: args.unique_reads,
                range_size: args.range_size,
                prefix: format!("{operation:?}-{label}/").to_lowercase(),
            };
            let name = format!("s3 {} {label}", format!("{operation:?}").to_lowercase());
            let runner = Arc::new(s3::Runner::with_payload(
                Arc::clone(&client),
                case.clone(),
                payload.clone(),
            ));
            match &seeder {
                Some(seeder) => runner.prepare_via(seeder, setup_concurrency(args.run.workers)).await?,
                None => runner.prepare(setup_concurrency(args.run.workers)).await?,
            }
            let config = json!({ "target": target, "session_credentials": target.session_token.is_some(),
                                 "case": case, "budget": budget, "payload": label,
                                 "payload_sha256": payload_sha256 });
            session.case(&name, config, budget, requests(runner)).await?;
        }
    }
    Ok(session)
}

async fn run_resp(args: RespArgs) -> anyhow::Result<Session> {
    let budget = args.run.budget();
    let mut session = args.run.session().await?;
    for &size in &args.sizes {
        let payload_sha256 = sha256_hex(&loadgen::payload(size));
        for &pipeline in &args.pipeline {
            for &operation in &args.ops {
                let op_name = format!("{operation:?}").to_lowercase();
                let case = resp::Case {
                    operation,
                    size,
                    keys: args.keys.max(1),
                    pipeline: pipeline.max(1),
                    mget_keys: args.mget_keys.max(1),
                    prefix: format!("loadgen:{op_name}-{size}:"),
                };
                let runner = resp::Runner::connect(&args.url, args.run.workers, case.clone()).await?;
                runner.prepare().await?;
                let name = format!("resp {op_name} {} P{pipeline}", human_size(size));
                let config = json!({ "url": args.url, "case": case, "budget": budget,
                                     "payload_sha256": payload_sha256 });
                session.case(&name, config, budget, requests(Arc::new(runner))).await?;
            }
        }
    }
    Ok(session)
}

async fn run_ojs(args: OjsArgs) -> anyhow::Result<Session> {
    let budget = args.run.budget();
    let mut session = args.run.session().await?;
    for &operation in &args.ops {
        let op_name = format!("{operation:?}").to_lowercase();
        let case = ojs::Case {
            operation,
            args_size: args.args_size,
            batch: args.batch.max(1),
            prefill: args.prefill.or(args.run.requests).unwrap_or(20_000),
            // A queue per case and run, so a cycle drains only what it filled.
            queue: format!("loadgen-{op_name}-{}", std::process::id()),
        };
        let runner = ojs::Runner::new(&args.url, case.clone());
        runner.prepare().await?;
        let name = match operation {
            ojs::Operation::Batch => format!("ojs batch x{}", case.batch),
            _ => format!("ojs {op_name}"),
        };
        let config = json!({ "url": args.url, "case": case, "budget": budget });
        session.case(&name, config, budget, requests(Arc::new(runner))).await?;
    }
    Ok(session)
}

async fn run_cache(args: CacheArgs) -> anyhow::Result<Session> {
    let target = args.connection.target().await?;
    let cache_client = Arc::new(s3::S3Client::new(target.clone()));
    let origin = s3::S3Client::new(s3::Target {
        endpoint: args.origin_endpoint.trim_end_matches('/').to_owned(),
        bucket: args.origin_bucket.clone(),
        ..target.clone()
    });
    let mut session = args.run.session().await?;
    for &size in &args.sizes {
        let payload_sha256 = sha256_hex(&loadgen::payload(size));
        for &operation in &args.ops {
            let runner = cache::Runner::new(Arc::clone(&cache_client), operation, size, args.keys.max(1));
            let budget = runner.prepare(&origin, args.run.budget()).await?;
            let name = format!("cache {} {}", operation.name(), human_size(size));
            let config = json!({ "target": target, "origin_bucket": args.origin_bucket, "operation": operation,
                                 "size": size, "keys": args.keys, "budget": budget,
                                 "payload_sha256": payload_sha256 });
            session.case(&name, config, budget, runner.op()).await?;
        }
    }
    Ok(session)
}
