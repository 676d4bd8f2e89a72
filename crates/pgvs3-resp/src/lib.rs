//! The RESP (Redis protocol) endpoint (`resp`) and its flags (`args`).
//!
//! The module keeps its old name so moved code keeps its `crate::…` paths; the aliases below
//! serve the same purpose for what now lives in crates further down.

pub mod args;
pub mod resp;
mod start;

pub use start::start;

pub use pgvs3_base::{admission, http_server, metrics, replica_lag, telemetry};
pub use pgvs3_pg::pg;
pub use pgvs3_store::{bucket, store};
