//! One invocation's cases: each is run, printed as a table row, appended to the NDJSON file and,
//! in capacity mode, bracketed by snapshots of PostgreSQL and the gateway.

use std::future::Future;
use std::io::Write;

use super::capacity::Probe;
use super::{Budget, Outcome, Summary, report};

pub struct Session {
    json: Option<std::fs::File>,
    capacity: Option<Probe>,
    failed: bool,
}

impl Session {
    /// Prints the table's header; `json` is appended to (NDJSON, one object per case).
    pub fn open(json: Option<&std::path::Path>, capacity: Option<Probe>) -> anyhow::Result<Session> {
        let json = match json {
            Some(path) => Some(std::fs::OpenOptions::new().create(true).append(true).open(path)?),
            None => None,
        };
        println!("{}", report::HEADER);
        Ok(Session {
            json,
            capacity,
            failed: false,
        })
    }

    /// Runs one case: `op(worker, sequence)` in closed loops within `budget`.
    pub async fn case<F, Fut>(
        &mut self,
        name: &str,
        config: serde_json::Value,
        budget: Budget,
        op: F,
    ) -> anyhow::Result<Summary>
    where
        F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send,
    {
        let before = match &self.capacity {
            Some(probe) => Some(probe.snapshot().await?),
            None => None,
        };
        // The CPU split covers the measured requests only: its first reading once the warm-up
        // has passed.
        let processes = self.capacity.as_ref().and_then(Probe::processes);
        let cpu_from = processes.map(|processes| {
            tokio::spawn(async move {
                tokio::time::sleep(budget.warmup).await;
                processes.read()
            })
        });
        let summary = super::run(budget, op).await;
        let cpu = match (processes, cpu_from) {
            (Some(processes), Some(from)) => match (from.await?, processes.read()) {
                (Some(from), Some(to)) => Some(from.per_request(&to, summary.samples)),
                _ => None,
            },
            _ => None,
        };
        println!("{}", report::row(name, &summary));
        for (kind, count) in &summary.errors {
            println!("    {count} × {kind}");
        }
        self.failed |= !summary.errors.is_empty();
        let mut record = report::record(name, &config, &summary);
        if let Some(cpu) = cpu {
            println!("{}", cpu.describe());
            record["cpu"] = serde_json::to_value(cpu)?;
        }
        if let (Some(probe), Some(before)) = (&self.capacity, before) {
            let capacity = probe.after(before).await?;
            println!("{}", capacity.describe());
            record["capacity"] = serde_json::to_value(&capacity)?;
        }
        if let Some(file) = self.json.as_mut() {
            writeln!(file, "{record}")?;
        }
        Ok(summary)
    }

    /// Whether any case had an error.
    pub fn failed(&self) -> bool {
        self.failed
    }
}
