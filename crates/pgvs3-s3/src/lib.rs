//! The S3 endpoint (`s3`), on s3s.
//!
//! The module keeps its old name so moved code keeps its `crate::…` paths; the aliases below
//! serve the same purpose for what now lives in crates further down.

pub mod args;
pub mod s3;
mod start;

pub use start::start;

pub use pgvs3_base::{admission, http_server, metrics, replica_lag, request_body, telemetry};
pub use pgvs3_secret as master_key;
pub use pgvs3_store::{access, bucket, store};
