//! Command-line values every feature's argument group parses the same way (sizes, durations,
//! listen addresses that can be switched off), and the flags of what this crate owns: the HTTP
//! listeners' bounds (`HttpArgs`) and the simulated remote store (`SimulateArgs`).

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

/// A listen address that can be switched off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAddr(pub Option<SocketAddr>);

pub fn parse_listen_addr(text: &str) -> Result<ListenAddr, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(ListenAddr(None));
    }
    text.parse()
        .map(|addr| ListenAddr(Some(addr)))
        .map_err(|err| format!("invalid address {text:?} (or `off`): {err}"))
}

/// Parses byte sizes written as `<n>`, `<n>KiB`, `<n>MiB`, `<n>GiB` or `<n>TiB` (also `K`,
/// `M`, `G`, `T`, and `KB`... as the same binary multiples).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("invalid size: {text:?}"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("invalid size unit in {text:?} (use KiB, MiB, GiB or TiB)")),
    };
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("size too large: {text:?}"))
}

/// Parses durations written as `<n>ms`, `<n>s`, `<n>m` or `<n>h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("invalid duration: {text:?}"))?;
    let seconds = match unit {
        "ms" => return Ok(Duration::from_millis(number)),
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => {
            return Err(format!("invalid duration unit in {text:?} (use ms, s, m or h)"));
        }
    };
    number
        .checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("duration too long: {text:?}"))
}

/// The bounds every HTTP listener (S3, OJS, admin) shares.
#[derive(Debug, Clone, Args)]
pub struct HttpArgs {
    /// A new HTTP connection must send its first request head within this, or it is closed.
    #[arg(long, env = "PGVS3_HTTP_FIRST_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub http_first_request_timeout: Duration,

    /// A keep-alive connection with no request open for this long is closed: HTTP/1.1 must send
    /// its next request head within it, HTTP/2 is sent GOAWAY (and PINGed at this interval, which
    /// finds dead peers). A connection whose client accepts no byte of a response for this long
    /// is cut, freeing the database connection a download holds.
    #[arg(long, env = "PGVS3_HTTP_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub http_idle_timeout: Duration,

    /// A request body that sends nothing for this long fails (S3: 400 RequestTimeout), freeing its
    /// slot and database connection.
    #[arg(long, env = "PGVS3_HTTP_BODY_IDLE_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub http_body_idle_timeout: Duration,

    /// Connections one client address may hold open on each HTTP listener (0: no cap); beyond
    /// it a connection is answered 503 and closed. Behind a proxy that does not keep client
    /// addresses, raise it (or 0): every connection then comes from the proxy.
    #[arg(long, env = "PGVS3_HTTP_MAX_CONNECTIONS_PER_IP", default_value_t = 1024)]
    pub http_max_connections_per_ip: usize,
}

impl HttpArgs {
    /// The bounds of an HTTP listener that takes `max_connections` at once.
    pub fn limits(&self, max_connections: usize) -> crate::http_server::HttpLimits {
        crate::http_server::HttpLimits {
            max_connections,
            max_connections_per_ip: self.http_max_connections_per_ip,
            first_request_timeout: self.http_first_request_timeout,
            idle_timeout: self.http_idle_timeout,
            body_idle_timeout: self.http_body_idle_timeout,
        }
    }
}

/// A simulated remote endpoint, for benchmarks: the S3 endpoint answers like a distant store.
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    // --- simulated remote endpoint (benchmarks) ---
    /// Make the S3 endpoint answer like a remote store: this one-way latency each way.
    #[arg(long, env = "PGVS3_SIMULATE_LATENCY", default_value = "0ms", value_parser = parse_duration)]
    pub simulate_latency: Duration,

    /// ... and this bandwidth per request, in bytes per second (uploads and answers; 0: unlimited).
    #[arg(long, env = "PGVS3_SIMULATE_BANDWIDTH", default_value_t = 0)]
    pub simulate_bandwidth: u64,

    /// ... and at most this many requests started per second (0: unlimited).
    #[arg(long, env = "PGVS3_SIMULATE_RPS", default_value_t = 0)]
    pub simulate_rps: u32,
}

impl SimulateArgs {
    pub fn constraints(&self) -> crate::simulate::Constraints {
        crate::simulate::Constraints {
            latency: self.simulate_latency,
            bandwidth: self.simulate_bandwidth,
            rps: self.simulate_rps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("m").is_err());
        assert!(
            parse_duration("99999999999999999h").is_err(),
            "overflow is an error, not a panic"
        );
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        assert_eq!(parse_bytes("8MiB"), Ok(8 << 20));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert!(parse_bytes("1PiB").is_err());
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("99999999999TiB").is_err());
    }
}
