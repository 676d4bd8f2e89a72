//! pgvs3-operator: reconciles `GatewayPool`, `Bucket` and `OriginCache` resources.
//!
//! The controllers arrive with the operator issue; this crate holds the workspace slot so the
//! layout of DESIGN.md §2 is in place from the start.
