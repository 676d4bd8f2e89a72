//! Capacity mode: what a case leaves behind. Around each case it takes snapshots of the
//! database (every relation's size with its indexes and TOAST, the WAL position, the checkpoint
//! count) and of the gateway (resident memory, the pool gauges from its /metrics); a third
//! snapshot follows a reaper drain (a command such as `pgvs3 admin maintenance --run-once`), so
//! the space deletes and overwrites give back shows.

use std::collections::BTreeMap;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Where the probe looks.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// The gateway's database (a libpq connection string).
    pub database_url: String,
    /// The gateway's Prometheus endpoint (`http://admin-addr/metrics`).
    pub metrics_url: Option<String>,
    /// The gateway's process id, for its resident memory (same machine only).
    pub gateway_pid: Option<u32>,
    /// A shell command that drains the reaper's backlog.
    pub drain_command: Option<String>,
}

pub struct Probe {
    db: tokio_postgres::Client,
    http: Client<HttpConnector, Full<Bytes>>,
    sources: Sources,
    checkpoints_sql: &'static str,
    /// The gateway and its PostgreSQL, for the CPU split (when the gateway's pid is known).
    processes: Option<super::cpu::Processes>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Snapshot {
    pub database_bytes: i64,
    /// `schema.relation` → bytes, with its indexes and TOAST.
    pub relations: BTreeMap<String, i64>,
    /// The WAL insert position, in bytes since 0/0.
    pub wal_position: i64,
    /// Checkpoints since the statistics were reset (timed and requested).
    pub checkpoints: i64,
    pub gateway_rss_bytes: Option<u64>,
    /// Every `pgvs3_db_pool*` series of the gateway's /metrics.
    pub pool: BTreeMap<String, f64>,
}

/// A case's footprint: before, after, and after the reaper drain (when a drain command is set).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Footprint {
    pub before: Snapshot,
    pub after: Snapshot,
    pub after_drain: Option<Snapshot>,
}

impl Probe {
    pub async fn connect(sources: Sources) -> anyhow::Result<Probe> {
        let (db, connection) = tokio_postgres::connect(&sources.database_url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        let version: i32 = db
            .query_one("SELECT current_setting('server_version_num')::int AS version", &[])
            .await?
            .get("version");
        // PostgreSQL 17 moved the checkpoint counters to their own view.
        let checkpoints_sql = if version >= 170_000 {
            "SELECT num_timed + num_requested AS checkpoints FROM pg_stat_checkpointer"
        } else {
            "SELECT checkpoints_timed + checkpoints_req AS checkpoints FROM pg_stat_bgwriter"
        };
        let backend: i32 = db.query_one("SELECT pg_backend_pid() AS pid", &[]).await?.get("pid");
        let processes = sources
            .gateway_pid
            .and_then(|gateway| super::cpu::Processes::of_backend(gateway, backend as u32));
        Ok(Probe {
            db,
            http: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
            sources,
            checkpoints_sql,
            processes,
        })
    }

    pub async fn snapshot(&self) -> anyhow::Result<Snapshot> {
        // Statistics are cached per transaction; a fresh read each time.
        self.db.batch_execute("SELECT pg_stat_clear_snapshot()").await?;
        let row = self
            .db
            .query_one(
                "SELECT pg_database_size(current_database()) AS database_bytes,
                        (pg_current_wal_insert_lsn() - '0/0')::bigint AS wal_position",
                &[],
            )
            .await?;
        let checkpoints: i64 = self.db.query_one(self.checkpoints_sql, &[]).await?.get("checkpoints");
        let relations = self
            .db
            .query(
                "SELECT n.nspname || '.' || c.relname AS relation, pg_total_relation_size(c.oid) AS bytes
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.relkind IN ('r', 'p', 'm')
                    AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'",
                &[],
            )
            .await?
            .iter()
            .map(|row| (row.get("relation"), row.get("bytes")))
            .collect();
        Ok(Snapshot {
            database_bytes: row.get("database_bytes"),
            relations,
            wal_position: row.get("wal_position"),
            checkpoints,
            gateway_rss_bytes: self.sources.gateway_pid.and_then(resident_bytes),
            pool: self.pool_metrics().await?,
        })
    }

    /// The processes whose CPU a case's split counts (same machine, gateway pid given).
    pub fn processes(&self) -> Option<super::cpu::Processes> {
        self.processes
    }

    /// The snapshot after a case, and another after the drain command.
    pub async fn after(&self, before: Snapshot) -> anyhow::Result<Footprint> {
        let after = self.snapshot().await?;
        let after_drain = match &self.sources.drain_command {
            Some(command) => {
                let status = tokio::process::Command::new("sh")
                    .args(["-c", command])
                    .stdout(std::process::Stdio::null())
                    .status()
                    .await?;
                anyhow::ensure!(status.success(), "drain command {command:?} failed: {status}");
                Some(self.snapshot().await?)
            }
            None => None,
        };
        Ok(Footprint {
            before,
            after,
            after_drain,
        })
    }

    async fn pool_metrics(&self) -> anyhow::Result<BTreeMap<String, f64>> {
        let Some(url) = &self.sources.metrics_url else {
            return Ok(BTreeMap::new());
        };
        let request = http::Request::get(url).body(Full::new(Bytes::new()))?;
        let response = self.http.request(request).await?;
        anyhow::ensure!(response.status().is_success(), "{url}: {}", response.status());
        let body = response.into_body().collect().await?.to_bytes();
        Ok(String::from_utf8_lossy(&body)
            .lines()
            .filter(|line| line.starts_with("pgvs3_db_pool"))
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                Some((series.to_owned(), value.parse().ok()?))
            })
            .collect())
    }
}

/// VmRSS of a process, from /proc.
fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

const MIB: f64 = (1 << 20) as f64;

impl Footprint {
    /// Lines under the case's row: database and WAL growth, checkpoints, memory, the relations
    /// that grew most, and what the drain gave back.
    pub fn describe(&self) -> String {
        let (before, after) = (&self.before, &self.after);
        let mut text = format!(
            "    capacity: database {:+.1} MiB, WAL {:.1} MiB, checkpoints {:+}",
            (after.database_bytes - before.database_bytes) as f64 / MIB,
            (after.wal_position - before.wal_position) as f64 / MIB,
            after.checkpoints - before.checkpoints,
        );
        if let (Some(b), Some(a)) = (before.gateway_rss_bytes, after.gateway_rss_bytes) {
            text += &format!(", gateway RSS {:.0} -> {:.0} MiB", b as f64 / MIB, a as f64 / MIB);
        }
        let pool: Vec<String> = after
            .pool
            .iter()
            .map(|(series, value)| format!("{series} {value}"))
            .collect();
        if !pool.is_empty() {
            text += &format!("\n    pool after: {}", pool.join(", "));
        }
        let mut growth: Vec<(&String, i64)> = after
            .relations
            .iter()
            .map(|(name, size)| (name, size - before.relations.get(name).copied().unwrap_or(0)))
            .filter(|(_, delta)| *delta != 0)
            .collect();
        growth.sort_by_key(|(_, delta)| -delta.abs());
        if !growth.is_empty() {
            let top: Vec<String> = growth
                .iter()
                .take(4)
                .map(|(name, delta)| format!("{name} {:+.1} MiB", *delta as f64 / MIB))
                .collect();
            text += &format!("\n    grew: {}", top.join(", "));
        }
        if let Some(drained) = &self.after_drain {
            text += &format!(
                "\n    after drain: database {:+.1} MiB against before, WAL {:.1} MiB more",
                (drained.database_bytes - before.database_bytes) as f64 / MIB,
                (drained.wal_position - after.wal_position) as f64 / MIB,
            );
        }
        text
    }
}
