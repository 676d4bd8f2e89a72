//! The GatewayPool controller: a Deployment of gateways, its Service, PodDisruptionBudget,
//! optional HorizontalPodAutoscaler and ServiceMonitor, bound to one PostgreSQL.

pub mod apply;
pub mod build;
pub mod in_use;

pub use apply::{error_policy, reconcile};
