//! The e2e test binary: the load generator's smoke, the OJS conformance cases and session
//! credentials from a web identity token (`pgvs3-web-identity`, `pgvs3-loadgen --role-arn`) against
//! in-process gateways (crates/pgvs3-testkit), and the ignored kind suite (just e2e-kind).

mod kind_fleet;
mod loadgen_smoke;
mod ojs_conformance;
mod web_identity;
