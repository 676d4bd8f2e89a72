//! OJS (Open Job Spec): the job engine ([`engine`], PostgreSQL only, no HTTP) and the HTTP
//! binding over it ([`http`]: routes, wire types, error objects and statuses).

pub mod engine;
pub mod http;

pub use engine::cron::spawn_cron_ticker;
pub use http::{HealthProbe, OjsOptions, OjsService, busy_response, check_limits};
