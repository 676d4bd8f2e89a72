//! PostgreSQL plumbing: the pool, the embedded launcher, the migrations and supervision
//! (module `pg`, under its old name so moved code keeps its `crate::pg::…` paths).
//!
//! `migrations/` links to `gateway/migrations`, where the SQL stays while the integration tests
//! that read it still live in `gateway/tests`.

pub mod args;
pub mod pg;

pub use pgvs3_base::metrics;
