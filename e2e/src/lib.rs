//! pgvs3-e2e: the load generator (`pgvs3-loadgen`), and fleet and kind end-to-end suites.

pub mod loadgen;
