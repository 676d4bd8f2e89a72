//! `pgvs3-loadgen`: closed-loop load against any S3 endpoint (pgvs3 or a peer).

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use pgvs3_e2e::loadgen::{self, Budget, report, s3};

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
    /// S3 load: one or more operations on objects of one or more sizes.
    S3(S3Args),
}

#[derive(Args)]
struct S3Args {
    #[arg(long, env = "AWS_ENDPOINT_URL", default_value = "http://127.0.0.1:9000")]
    endpoint: String,
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    region: String,
    #[arg(long, env = "AWS_ACCESS_KEY_ID")]
    access_key: String,
    #[arg(long, env = "AWS_SECRET_ACCESS_KEY", hide_env_values = true)]
    secret_key: String,
    #[arg(long, default_value = "loadgen")]
    bucket: String,
    /// Operations to run, one case each (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "put,get")]
    ops: Vec<s3::Operation>,
    /// Object sizes, one case each (comma-separated: 4KiB,64MiB,...).
    #[arg(long, value_delimiter = ',', default_value = "4KiB", value_parser = loadgen::parse_size)]
    sizes: Vec<u64>,
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
    /// Write the objects that read cases read through this endpoint instead (e.g. a cache's
    /// origin, so that the cache's first reads are cold).
    #[arg(long)]
    seed_endpoint: Option<String>,
    /// The bucket to seed at --seed-endpoint (default: --bucket).
    #[arg(long)]
    seed_bucket: Option<String>,
    /// Append one JSON object per case to this file (NDJSON).
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

fn seconds(text: &str) -> Result<Duration, String> {
    text.trim_end_matches('s')
        .parse::<f64>()
        .map(Duration::from_secs_f64)
        .map_err(|e| format!("{text}: {e}"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Command::S3(args) = Cli::parse().command;
    let target = s3::Target {
        endpoint: args.endpoint.trim_end_matches('/').to_owned(),
        region: args.region.clone(),
        access_key: args.access_key.clone(),
        secret_key: args.secret_key.clone(),
        bucket: args.bucket.clone(),
    };
    let client = Arc::new(s3::S3Client::new(target.clone()));
    let seeder = args.seed_endpoint.as_ref().map(|endpoint| {
        s3::S3Client::new(s3::Target {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            bucket: args.seed_bucket.clone().unwrap_or_else(|| args.bucket.clone()),
            ..target.clone()
        })
    });
    let budget = Budget {
        workers: args.workers,
        warmup: if args.requests.is_some() {
            Duration::ZERO
        } else {
            args.warmup
        },
        duration: args.requests.is_none().then_some(args.duration),
        requests: args.requests,
        timeout: args.timeout,
    };
    let mut json = match &args.json {
        Some(path) => Some(std::fs::OpenOptions::new().create(true).append(true).open(path)?),
        None => None,
    };
    println!("{}", report::HEADER);
    let mut failed = false;
    for &size in &args.sizes {
        for &operation in &args.ops {
            let case = s3::Case {
                operation,
                size,
                keys: args.keys.max(1),
                shared_key: args.shared_key,
                unique_reads: args.unique_reads,
                range_size: args.range_size,
                prefix: format!("{operation:?}-{size}/").to_lowercase(),
            };
            let name = format!("s3 {} {}", format!("{operation:?}").to_lowercase(), human_size(size));
            let runner = Arc::new(s3::Runner::new(Arc::clone(&client), case.clone()));
            match &seeder {
                Some(seeder) => runner.prepare_via(seeder, args.workers).await?,
                None => runner.prepare(args.workers).await?,
            }
            let summary = loadgen::run(budget, {
                let runner = Arc::clone(&runner);
                move |worker, sequence| {
                    let runner = Arc::clone(&runner);
                    async move { runner.once(worker, sequence).await }
                }
            })
            .await;
            println!("{}", report::row(&name, &summary));
            for (kind, count) in &summary.errors {
                println!("    {count} × {kind}");
            }
            failed |= !summary.errors.is_empty();
            if let Some(file) = json.as_mut() {
                let config = serde_json::json!({ "target": target, "case": case, "budget": budget });
                writeln!(file, "{}", report::record(&name, &config, &summary))?;
            }
        }
    }
    if failed {
        std::process::exit(2);
    }
    Ok(())
}

fn human_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}KiB", b >> 10),
        b => format!("{b}B"),
    }
}
