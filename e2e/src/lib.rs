//! pgvs3-e2e: end-to-end checks against live gateways: the load generator (`pgvs3-loadgen`),
//! the OJS conformance runner (`ojs_conformance`), the web identity exchange (`web_identity`,
//! `pgvs3-web-identity`), and the kind suite (tests/kind_*.rs).

pub mod loadgen;
pub mod ojs_conformance;
pub mod web_identity;
