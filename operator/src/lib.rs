//! pgvs3-operator: reconciles `GatewayPool`, `Bucket` and `OriginCache` resources into gateway
//! fleets and catalog rows.
//!
//! Each controller module has a pure `build` (spec → desired objects, rendered by
//! `pgvs3-operator render`) and an `apply` (server-side apply, status, finalizers, events).

pub mod bucket;
pub mod context;
pub mod crd;
pub mod database;
pub mod events;
pub mod finalizer;
pub mod gateway_pool;
pub mod identity;
pub mod kube_ops;
pub mod lease;
pub mod metrics;
pub mod origin_cache;
pub mod render;
pub mod run;
