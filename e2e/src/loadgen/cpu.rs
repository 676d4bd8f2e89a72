//! The CPU split of a case (capacity mode, same machine only): how much CPU the gateway process,
//! its PostgreSQL (the postmaster and every process it started: backends, WAL writer,
//! checkpointer, autovacuum) and this load generator spent over the measured seconds, per
//! request. Wall-clock rates move with whatever else the machine runs; CPU per request barely
//! does, so it says where a request's cost goes.
//!
//! PostgreSQL's processes have one thread each and are read from `/proc/PID/schedstat`
//! (nanoseconds on a CPU, user and system); one that exited during the case is still counted
//! through the postmaster's `cutime + cstime` (children it reaped). The gateway and this process
//! have many threads, some of which come and go (Tokio's blocking pool): their `utime + stime`
//! in `/proc/PID/stat` counts every thread, exited ones too, in clock ticks (10 ms, a small
//! error over seconds of CPU).

use std::time::Duration;

/// Whose CPU is counted.
#[derive(Debug, Clone, Copy)]
pub struct Processes {
    pub gateway: u32,
    pub postmaster: u32,
}

/// CPU consumed so far by each side.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    gateway: Duration,
    postgres: Duration,
    client: Duration,
}

/// CPU per request over a case, in microseconds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Split {
    pub gateway_us: f64,
    pub postgres_us: f64,
    pub client_us: f64,
    pub requests: u64,
}

impl Processes {
    /// The postmaster of the backend `backend` (a connection's `pg_backend_pid()`): its parent.
    pub fn of_backend(gateway: u32, backend: u32) -> Option<Processes> {
        let fields = stat_fields(backend)?;
        let postmaster = fields.get(1)?.parse().ok()?;
        Some(Processes { gateway, postmaster })
    }

    pub fn read(&self) -> Option<Reading> {
        let mut postgres = on_cpu(self.postmaster)? + reaped(self.postmaster)?;
        for child in children(self.postmaster) {
            // A child that exits between the listing and the read is counted at the next
            // reading through the postmaster's reaped time.
            postgres += on_cpu(child).unwrap_or_default();
        }
        Some(Reading {
            gateway: process_cpu(&self.gateway.to_string())?,
            postgres,
            client: process_cpu("self")?,
        })
    }
}

impl Reading {
    /// Per request from `self` to `later`.
    pub fn per_request(&self, later: &Reading, requests: u64) -> Split {
        let per = |before: Duration, after: Duration| {
            after.saturating_sub(before).as_secs_f64() * 1e6 / requests.max(1) as f64
        };
        Split {
            gateway_us: per(self.gateway, later.gateway),
            postgres_us: per(self.postgres, later.postgres),
            client_us: per(self.client, later.client),
            requests,
        }
    }
}

impl Split {
    pub fn describe(&self) -> String {
        format!(
            "    cpu per request: gateway {:.1} µs, PostgreSQL {:.1} µs, client {:.1} µs (gateway / PostgreSQL {:.2}; {} requests)",
            self.gateway_us,
            self.postgres_us,
            self.client_us,
            self.gateway_us / self.postgres_us.max(f64::MIN_POSITIVE),
            self.requests
        )
    }
}

/// The fields of /proc/PID/stat after the command name (which may hold spaces): state, ppid, ...
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    stat_fields_of(&pid.to_string())
}

fn stat_fields_of(pid: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

fn schedstat(path: &str) -> Option<Duration> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(Duration::from_nanos(text.split_whitespace().next()?.parse().ok()?))
}

/// Time on a CPU of a single-threaded process.
fn on_cpu(pid: u32) -> Option<Duration> {
    schedstat(&format!("/proc/{pid}/schedstat"))
}

/// `utime + stime` (fields 14 and 15 of stat) of every thread of `pid` (a number or `self`).
fn process_cpu(pid: &str) -> Option<Duration> {
    ticks(&stat_fields_of(pid)?, 11)
}

/// CPU of the children `pid` has waited for (`cutime + cstime`, fields 16 and 17 of stat).
fn reaped(pid: u32) -> Option<Duration> {
    ticks(&stat_fields(pid)?, 13)
}

/// Two adjacent clock-tick fields of stat (counted from the state, field 3), summed.
fn ticks(fields: &[String], first: usize) -> Option<Duration> {
    let ticks = fields.get(first)?.parse::<u64>().ok()? + fields.get(first + 1)?.parse::<u64>().ok()?;
    // USER_HZ: 100 on every Linux architecture this runs on.
    Some(Duration::from_millis(ticks * 10))
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&candidate| {
            stat_fields(candidate)
                .and_then(|fields| fields.get(1)?.parse::<u32>().ok())
                .is_some_and(|parent| parent == pid)
        })
        .collect()
}
