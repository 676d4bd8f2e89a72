//! The platform test binary: what is shared by the protocols (admission, HTTP connections, TLS,
//! the CLI, the layout, database faults, fleets, the origin cache, the lake, events), against
//! gateways in-process or as processes on one throwaway PostgreSQL (crates/pgvs3-testkit) and
//! clusters of their own where a test changes or kills one.

mod admission;
mod cache;
mod cli;
mod db_faults;
mod events_exactly_once;
mod fleet;
mod http_connections;
mod lake;
mod layout;
mod pg_tls_errors;
mod tls;
