//! The RESP test binary: every RESP test module (redis-rs, redis-cli, raw RESP, BullMQ, Celery,
//! RQ) against gateways started in-process on one throwaway PostgreSQL (crates/pgvs3-testkit).

mod acl;
mod bad_input;
mod batches;
mod bitmap;
mod bits_and_lcs;
mod borrowed_keys;
mod bucket_races;
mod bullmq;
mod celery;
mod commit_outcome;
mod core;
mod dump_restore;
mod encodings;
mod functions;
mod geo;
mod hostile;
mod hyperloglog;
mod notifications;
mod plans;
mod pubsub;
mod redis_cli;
mod redis_rs;
mod rq;
mod scripting;
mod server_commands;
mod sort;
mod stream_groups;
mod streams;
mod tenants;
mod tracking;
mod transactions;
mod types;
mod versioned;
mod working_set;

/// The gateways of this binary run in its one process, so a test that measures the process's
/// peak memory (hostile.rs) would count another test's large values: tests that hold tens of
/// MiB at once take this shared, the measuring test takes it alone.
pub static LARGE_ALLOCATIONS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());
