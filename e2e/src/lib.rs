//! pgvs3-e2e: end-to-end checks against live gateways. Today: the OJS conformance runner
//! (`ojs_conformance`); fleet tests, the load generator and the kind suite arrive with their issues.

pub mod ojs_conformance;
