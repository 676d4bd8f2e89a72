//! Command-line values every feature's argument group parses the same way: sizes, durations
//! and listen addresses that can be switched off.

use std::net::SocketAddr;
use std::time::Duration;

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
