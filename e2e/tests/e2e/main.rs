//! The e2e test binary: the load generator's smoke and the OJS conformance cases against
//! in-process gateways (crates/pgvs3-testkit), and the ignored kind suite (just e2e-kind).

mod kind_fleet;
mod loadgen_smoke;
mod ojs_conformance;
