//! The OJS test binary: every OJS test module over HTTP against gateways started in-process on
//! one throwaway PostgreSQL (crates/pgvs3-testkit).

mod events;
mod fairness;
mod fleet;
mod input_limits;
mod queue;
mod schemas;
mod tenants;
