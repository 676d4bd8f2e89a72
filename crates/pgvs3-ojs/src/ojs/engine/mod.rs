//! The OJS job engine: jobs, queues, workers, workflows, cron schedules, webhooks and the event
//! log, all in PostgreSQL (schema `ojs`), behind [`Queue`]. It knows nothing of HTTP: its
//! operations take typed requests and answer stored values or an [`EngineError`], which the
//! binding ([`super::http`]) maps to OJS error objects and statuses in one place.
//!
//! Jobs are rows of `ojs.jobs`; a claim is an UPDATE of rows picked with `FOR UPDATE SKIP
//! LOCKED` in index order, and the attempt number a claim sets is the fence that turns a stale
//! worker's ack or nack away. The modules split the engine by concern: [`jobs`] (enqueue,
//! read, cancel; [`job`] is a job as a read answers it, decoded from its row), [`claims`]
//! (fetch, ack, nack, heartbeat, promotion), [`admin`] (queues, dead letter, stats, workers,
//! housekeeping), [`events`], [`cron`], [`workflow`], [`webhooks`], [`progress`], [`schemas`]
//! (the schema registry, with [`json_schema`] its validator), [`scheduling`] (fair
//! scheduling's statistics);
//! [`envelope`] checks the jobs clients send.

pub mod admin;
pub mod claims;
pub mod cron;
pub mod envelope;
mod error;
pub mod events;
pub mod job;
pub mod jobs;
pub mod json_schema;
pub mod progress;
pub mod scheduling;
pub mod schemas;
pub mod webhooks;
pub mod workflow;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use deadpool_postgres::Pool;

use crate::replica_lag::ReplicaLag;

pub use error::{EngineError, ErrorKind};

/// The tenant of a request that names none, and of jobs no request enqueued (bucket
/// notifications, cron).
pub const DEFAULT_TENANT: &str = "default";

/// How many workers one tenant may have registered (`--ojs-max-workers-per-tenant`'s default).
pub const DEFAULT_MAX_WORKERS_PER_TENANT: i64 = 10_000;

#[derive(Clone)]
pub struct Queue {
    pool: Pool,
    /// When this gateway last ran the promotion (ms since `started`), so that busy fetchers run
    /// it a few times a second rather than on every fetch.
    last_promote_ms: Arc<AtomicU64>,
    started: Instant,
    /// The compiled schemas of the job types this gateway enqueues ([`schemas`]).
    schemas: Arc<schemas::Cache>,
    /// How many workers a tenant may have registered ([`claims`]).
    max_workers_per_tenant: i64,
    /// Where the database stands in replication, when known: a gateway bound to a hot standby
    /// runs no promotion (its statement could only fail), and runs it once the standby is
    /// promoted.
    replica: Option<ReplicaLag>,
}

impl Queue {
    pub fn new(pool: Pool) -> Queue {
        Queue {
            pool,
            last_promote_ms: Arc::new(AtomicU64::new(0)),
            started: Instant::now(),
            schemas: Arc::default(),
            max_workers_per_tenant: DEFAULT_MAX_WORKERS_PER_TENANT,
            replica: None,
        }
    }

    /// This queue, told by `replica` whether its database is a hot standby.
    pub fn with_replica(mut self, replica: ReplicaLag) -> Queue {
        self.replica = Some(replica);
        self
    }

    /// This queue with another bound on each tenant's registered workers.
    pub fn with_max_workers_per_tenant(mut self, bound: i64) -> Queue {
        self.max_workers_per_tenant = bound;
        self
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Client, EngineError> {
        pgvs3_base::checkout::checkout(&self.pool)
            .await
            .map_err(EngineError::backend)
    }

    /// Empties every OJS table (conformance runs only; the HTTP route exists behind a flag).
    pub async fn reset(&self) -> Result<(), EngineError> {
        let client = self.client().await?;
        client
            .batch_execute(
                "TRUNCATE ojs.jobs, ojs.job_dependencies, ojs.queues, ojs.events, ojs.cron, ojs.workflows, ojs.workers,
                 ojs.rate_limits, ojs.schemas",
            )
            .await
            .map_err(EngineError::sql)?;
        self.schemas.forget(None);
        Ok(())
    }
}

/// The current time in RFC 3339 (UTC, microseconds), as job timestamps read.
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        now.year(),
        now.month() as u8,
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.microsecond()
    )
}
