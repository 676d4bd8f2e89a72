//! What every pgvs3 feature builds on: metrics, admission, request bodies, the HTTP listener,
//! replica lag, telemetry, the simulated remote store, and the command-line value parsers.
//!
//! The bottom of the crate graph (`pgvs3-base → pgvs3-pg → pgvs3-store → pgvs3-cache → the
//! protocol crates → pgvs3-gateway`): it depends on no other pgvs3 crate.

pub mod admission;
pub mod args;
pub mod checkout;
pub mod feature;
pub mod http_server;
pub mod metrics;
pub mod replica_lag;
pub mod request_body;
pub mod send_stall;
pub mod simulate;
pub mod telemetry;
