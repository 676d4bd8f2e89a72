//! The cache tier's flags (`CacheArgs`, flattened into `pgvs3 serve`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use clap::Args;
use pgvs3_base::args::parse_duration;

#[derive(Debug, Clone, Args)]
pub struct CacheArgs {
    /// Origin fills running at once in this gateway over all cache buckets (each cache bucket
    /// also has its own limit, set with its origin).
    #[arg(long, env = "PGVS3_FILL_CONCURRENCY", default_value_t = 8)]
    pub fill_concurrency: usize,

    /// Bounds connecting to an origin and waiting for each of its answers to begin.
    #[arg(long, env = "PGVS3_ORIGIN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub origin_timeout: Duration,

    /// How often the write-back worker looks for due uploads (writes also wake it).
    #[arg(long, env = "PGVS3_WRITE_BACK_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub write_back_interval: Duration,

    /// Write-back uploads running at once (on the one gateway that runs the worker).
    #[arg(long, env = "PGVS3_WRITE_BACK_CONCURRENCY", default_value_t = 4)]
    pub write_back_concurrency: usize,

    /// How long past its TTL a cached object is still served while its origin cannot answer
    /// (unreachable, timed out, throttled, a server error): stale-if-error. `0s` turns it off.
    #[arg(long, env = "PGVS3_ORIGIN_STALE_IF_ERROR", default_value = "24h", value_parser = parse_stale_if_error)]
    pub origin_stale_if_error: Duration,

    /// A PEM bundle of CA certificates that origins' TLS certificates are also verified with
    /// (besides the system's roots): for origins whose certificate is from a private CA.
    /// Repeat it (or separate files with commas) for several bundles.
    #[arg(long, env = "PGVS3_ORIGIN_CA_FILE", value_delimiter = ',')]
    pub origin_ca_file: Vec<PathBuf>,

    /// Lets origins be at loopback, link-local (169.254.0.0/16, fe80::/10: the cloud metadata
    /// service), unspecified, multicast and broadcast addresses, which are refused otherwise
    /// (an origin's endpoint would let a cache bucket fetch what this host serves to itself).
    /// Private networks are always allowed. For tests and single-host setups.
    #[arg(long, env = "PGVS3_ORIGIN_ALLOW_LOCAL_ADDRESSES", num_args = 0..=1, default_value_t = false,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub origin_allow_local_addresses: bool,
}

impl CacheArgs {
    pub fn settings(&self) -> anyhow::Result<crate::cache::CacheSettings> {
        Ok(crate::cache::CacheSettings {
            fill_concurrency: self.fill_concurrency,
            origin_timeout: self.origin_timeout,
            upload_interval: self.write_back_interval,
            upload_concurrency: self.write_back_concurrency,
            stale_if_error: self.origin_stale_if_error,
            origin_tls: crate::cache::origin::OriginTls::load(&self.origin_ca_file).context("--origin-ca-file")?,
            origin_addresses: crate::cache::addresses::OriginAddresses {
                allow_local: self.origin_allow_local_addresses,
            },
        })
    }
}

/// A stale-if-error window: a duration of at most a year (it is added to TTLs in SQL).
fn parse_stale_if_error(text: &str) -> Result<Duration, String> {
    let window = parse_duration(text)?;
    if window > Duration::from_secs(366 * 24 * 3600) {
        return Err(format!("{text:?} is more than a year"));
    }
    Ok(window)
}
