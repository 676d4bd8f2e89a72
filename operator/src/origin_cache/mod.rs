//! The OriginCache controller. The gateway's catalog has no `pgvs3.put_origin` yet (it comes
//! with the cache tier), so the controller validates the resource, builds the catalog row it
//! will write, follows the credentials Secret, and reports `OriginSupportUnavailable`.

pub mod apply;
pub mod build;

pub use apply::{error_policy, reconcile};
