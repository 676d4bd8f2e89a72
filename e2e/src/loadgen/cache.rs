//! Cases of the origin cache tier, as S3 requests to a cache bucket whose origin is reachable
//! directly too: cold GETs (objects written straight to the origin, each read once through the
//! cache, so every read is a miss), warm GETs (the same after one unmeasured pass), and PUTs
//! (acknowledged by the cache; in write-back mode the upload to the origin follows later).

use std::sync::Arc;

use super::Budget;
use super::s3::{self, S3Client};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    ColdGet,
    WarmGet,
    WriteBackPut,
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Operation::ColdGet => "cold-get",
            Operation::WarmGet => "warm-get",
            Operation::WriteBackPut => "write-back-put",
        }
    }
}

/// A cache case: the S3 case it runs through the cache, and how it is prepared.
pub struct Runner {
    operation: Operation,
    runner: Arc<s3::Runner>,
    keys: u64,
}

impl Runner {
    pub fn new(cache: Arc<S3Client>, operation: Operation, size: u64, keys: u64) -> Runner {
        let s3_operation = match operation {
            Operation::ColdGet | Operation::WarmGet => s3::Operation::Get,
            Operation::WriteBackPut => s3::Operation::Put,
        };
        let case = s3::Case {
            operation: s3_operation,
            size,
            keys,
            shared_key: false,
            unique_reads: true,
            range_size: size,
            prefix: format!("{}-{size}/", operation.name()),
        };
        Runner {
            operation,
            runner: Arc::new(s3::Runner::new(cache, case)),
            keys,
        }
    }

    /// Writes the objects GETs read straight to the origin and, for warm reads, reads each once
    /// through the cache. Returns the budget the case must run with: a cold case reads every key
    /// exactly once, whatever was asked.
    pub async fn prepare(&self, origin: &S3Client, budget: Budget) -> anyhow::Result<Budget> {
        let workers = budget.workers;
        let once_each = Budget {
            warmup: std::time::Duration::ZERO,
            duration: None,
            requests: Some(self.keys),
            ..budget
        };
        match self.operation {
            Operation::WriteBackPut => {
                self.runner.prepare(workers).await?;
                Ok(budget)
            }
            Operation::ColdGet => {
                self.runner.prepare_via(origin, workers).await?;
                Ok(once_each)
            }
            Operation::WarmGet => {
                self.runner.prepare_via(origin, workers).await?;
                let fill = super::run(once_each, self.op()).await;
                anyhow::ensure!(fill.errors.is_empty(), "warming the cache: {:?}", fill.errors);
                Ok(budget)
            }
        }
    }

    /// The measured request, for `loadgen::run`.
    pub fn op(&self) -> impl Fn(usize, u64) -> super::RequestFuture + Send + Sync + 'static {
        super::requests(Arc::clone(&self.runner))
    }
}
