//! pgvs3 gateway: S3, RESP and OJS on PostgreSQL.
//!
//! The binary (`src/main.rs`) is only the command line; this crate wires the feature crates
//! (`crates/pgvs3-*`) into one gateway (`serve`, `config`, `admin`, `tls`, `maintenance`), so
//! the integration tests can start a gateway in-process. The re-exports keep every module at its
//! old `pgvs3_gateway::…` path.

pub mod admin;
pub mod config;
pub mod heartbeat;
pub mod maintenance;
pub mod readiness;
pub mod serve;
pub mod tls;

pub use pgvs3_base::{admission, args, http_server, metrics, replica_lag, request_body, simulate, telemetry};
pub use pgvs3_ojs::{ojs, webhooks};
pub use pgvs3_pg::pg;
pub use pgvs3_resp::resp;
pub use pgvs3_s3::s3;
pub use pgvs3_secret as master_key;
pub use pgvs3_store::{access, bucket, cache, store};
