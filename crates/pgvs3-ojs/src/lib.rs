//! The Open Job Spec endpoint (`ojs`) and the webhook outbox (`webhooks`) that delivers OJS
//! webhooks and bucket notification webhook targets. Depends on no storage crate: the queue is
//! its own SQL.
//!
//! The modules keep their old names so moved code keeps its `crate::…` paths; the aliases below
//! serve the same purpose for what now lives in pgvs3-base.

pub mod args;
pub mod ojs;
mod start;
pub mod webhooks;

pub use ojs::http::tenant::OperatorToken;
pub use start::start;

pub use pgvs3_base::{admission, http_server, replica_lag, request_body, telemetry};
