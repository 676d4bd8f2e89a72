//! pgvs3-e2e: fleet tests (primary + standby + gateways), the load generator and the kind suite.
//!
//! They arrive with the load generator and operator issues.
