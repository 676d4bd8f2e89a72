//! pgvs3 gateway: S3 on PostgreSQL.
//!
//! The binary (`src/main.rs`) is only the command line; everything it runs lives here so the
//! integration tests can start a gateway in-process.

pub mod access;
pub mod admin;
pub mod admission;
pub mod bucket;
pub mod cache;
pub mod config;
pub mod http_server;
pub mod maintenance;
pub use pgvs3_secret as master_key;
pub mod metrics;
pub mod ojs;
pub mod pg;
pub mod replica_lag;
pub mod request_body;
pub mod resp;
pub mod s3;
pub mod serve;
pub mod simulate;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod webhooks;
