//! The OriginCache controller: a cache bucket in a Primary pool's catalog in front of a remote
//! S3 bucket, with the origin's credentials sealed under the pool's master key.

pub mod apply;
pub mod build;
pub mod ca_bundle;
pub mod catalog;

pub use apply::{error_policy, reconcile};
