//! The operator's test binary: reconciles against the fake API server (mock), the catalog side
//! against a real PostgreSQL and gateway (crates/pgvs3-testkit), and the ignored real-apiserver
//! and chart tier (control_plane; .ci/apiserver-tier.sh runs it with --ignored).

mod apiserver;
mod apiserver_fencing;
mod apiserver_identity;
mod apiserver_scoped;
mod bucket;
mod catalog_timeout;
mod chart;
mod control_plane;
mod gateway_pool;
mod golden;
mod health;
mod mock;
mod origin_cache;
mod run;
