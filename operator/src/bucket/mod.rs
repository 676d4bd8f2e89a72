//! The Bucket controller: a bucket and an access key in the catalog of a Primary pool's
//! database, and a credentials Secret for the applications that use it; with workload identity,
//! a role its ServiceAccounts assume and a ConfigMap for their pods.

pub mod apply;
pub mod build;
pub mod catalog;
pub mod role;

pub use apply::{error_policy, reconcile};
