//! The S3 test binary: every S3 test module against gateways started in-process on one
//! throwaway PostgreSQL (a fresh database per test; crates/pgvs3-testkit), with real clients.

mod acl;
mod aws_edges;
mod aws_wording;
mod bad_input;
mod bucket_logging;
mod bucket_races;
mod cli_clients;
mod copy_conditional;
mod core;
mod cors;
mod edge_semantics;
mod encryption;
mod key_policy;
mod large_uploads;
mod lifecycle;
mod log_volume;
mod multipart;
mod notifications;
mod object_lock;
mod object_tag_policy;
mod policy;
mod post_object;
mod presigned;
mod quota;
mod refusals;
mod small_puts;
mod streaming;
mod sts;
mod tool_calls;
mod unknown_names;
mod versioning;
