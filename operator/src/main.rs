//! The `pgvs3-operator` command line.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use pgvs3_operator::gateway_pool::build::Inputs;
use pgvs3_operator::{render, run};

#[derive(Parser)]
#[command(
    name = "pgvs3-operator",
    version,
    about = "Kubernetes operator for pgvs3 gateway fleets"
)]
struct Cli {
    /// Log format: human or json.
    #[arg(long, env = "PGVS3_OPERATOR_LOG_FORMAT", default_value = "human", global = true)]
    log_format: String,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controllers (the default).
    Run(run::RunArgs),
    /// Print the objects the operator would apply for the resources in a YAML file.
    Render {
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        /// Render the ServiceMonitor as if the Prometheus operator were installed.
        #[arg(long)]
        service_monitor: bool,
    },
}

#[derive(Parser)]
struct DefaultRun {
    #[command(flatten)]
    args: run::RunArgs,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("PGVS3_OPERATOR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if cli.log_format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
    match cli.command {
        Some(Command::Render { file, service_monitor }) => {
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let inputs = Inputs {
                service_monitor_crd: service_monitor,
                ..Inputs::default()
            };
            print!("{}", render::render(&text, &inputs)?);
            Ok(())
        }
        command => {
            let args = match command {
                Some(Command::Run(args)) => args,
                // No subcommand: run, configured from the environment.
                _ => DefaultRun::parse_from(["pgvs3-operator"]).args,
            };
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?
                .block_on(run::run(args))
        }
    }
}
