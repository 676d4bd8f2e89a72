//! The storage model on PostgreSQL: layout, catalog, objects, the typed keyspace (`store`), the
//! access rules evaluated against them (`access`), the origin cache tier (`cache`) and the bucket
//! handle every protocol works through (`bucket`), which routes a request to the store or
//! through the cache. One crate: the bucket handle is the store's public face (the store's
//! operations are `pub(crate)` behind it), and the cache both uses the store and is used by it.
//!
//! The modules keep their old names so moved code keeps its `crate::…` paths; the aliases below
//! serve the same purpose for what now lives in crates further down.

pub mod access;
pub mod args;
pub mod bucket;
pub mod cache;
pub mod store;

pub use pgvs3_base::{admission, metrics};
pub use pgvs3_pg::pg;
pub use pgvs3_secret as master_key;
