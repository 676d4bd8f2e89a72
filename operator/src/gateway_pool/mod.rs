//! The GatewayPool controller: a Deployment of gateways, its Service, PodDisruptionBudget,
//! optional HorizontalPodAutoscaler and ServiceMonitor, bound to one PostgreSQL.

pub mod apply;
pub mod build;

pub use apply::{error_policy, reconcile};
