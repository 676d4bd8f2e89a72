//! The OJS endpoint's flags (`OjsArgs`) and the webhook outbox's (`WebhookArgs`), flattened into
//! `pgvs3 serve`.

use std::time::Duration;

use clap::Args;

use crate::ojs::http::tenant::OperatorToken;
use pgvs3_base::args::{ListenAddr, parse_bytes, parse_duration, parse_listen_addr};

#[derive(Debug, Clone, Args)]
pub struct OjsArgs {
    /// Listen address of the OJS (Open Job Spec) HTTP endpoint; `off` disables it.
    #[arg(long, env = "PGVS3_OJS_ADDR", default_value = "127.0.0.1:8080", value_parser = parse_listen_addr)]
    pub ojs_addr: ListenAddr,

    /// Conformance mode, for conformance runs only: serve POST /ojs/v1/admin/reset (it deletes
    /// every job) and honour the suite's test hook (`options.metadata.test_directive`).
    #[arg(long, env = "PGVS3_OJS_ALLOW_RESET")]
    pub ojs_allow_reset: bool,

    /// Largest serialized `args` of one job, in bytes.
    #[arg(long, env = "PGVS3_OJS_MAX_ARGS_BYTES", default_value_t = 1 << 20)]
    pub ojs_max_args_bytes: usize,

    /// Largest OJS request body, checked against Content-Length and while it streams in, before
    /// it is parsed (a batch's jobs share it); beyond it 413. At least the args limit plus 64 KiB.
    #[arg(long, env = "PGVS3_OJS_MAX_BODY_BYTES", default_value = "4MiB", value_parser = parse_bytes)]
    pub ojs_max_body_bytes: u64,

    /// Whether the OJS job routes need a bearer token: `token` (the default) takes `--ojs-token`
    /// and the tenant tokens, or without them the root access key as `<access-key>:<secret>`
    /// (printed at the first start); `none` needs none unless `--ojs-token` or tenant tokens
    /// are set (for conformance runners and test suites that cannot send one).
    #[arg(long, env = "PGVS3_OJS_AUTH", value_enum, default_value_t = OjsAuth::Token)]
    pub ojs_auth: OjsAuth,

    /// Bearer token the OJS endpoint requires (manifest and health stay open).
    #[arg(long, env = "PGVS3_OJS_TOKEN", hide_env_values = true)]
    pub ojs_token: Option<String>,

    /// `TENANT=TOKEN` (repeatable): a bearer token that acts as TENANT only (docs/ojs-compatibility.md,
    /// Tenants); a request with it that names another tenant in `X-OJS-Tenant` is refused (403).
    #[arg(
        long = "ojs-tenant-token",
        env = "PGVS3_OJS_TENANT_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub ojs_tenant_tokens: Vec<crate::ojs::http::tenant::TenantToken>,

    /// How long completed, discarded and cancelled OJS jobs (and settled workflows) stay
    /// readable before the maintenance leader deletes them; dead-lettered jobs stay until
    /// deleted or retried.
    #[arg(long, env = "PGVS3_OJS_JOB_RETENTION", default_value = "24h", value_parser = parse_duration)]
    pub ojs_job_retention: Duration,

    /// OJS connections open at once; beyond it a connection is answered 503 and closed.
    #[arg(long, env = "PGVS3_OJS_MAX_CONNECTIONS", default_value_t = 1024)]
    pub ojs_max_connections: usize,

    /// OJS requests served at once (0: twice the pool size); beyond it requests wait.
    /// Health, readiness and the manifest never wait.
    #[arg(long, env = "PGVS3_OJS_MAX_ACTIVE", default_value_t = 0)]
    pub ojs_max_active: usize,

    /// OJS requests that may wait for a slot (0: twice the active limit); beyond it, and after
    /// --admission-wait, they get 429 `rate_limited` with Retry-After.
    #[arg(long, env = "PGVS3_OJS_MAX_WAITING", default_value_t = 0)]
    pub ojs_max_waiting: usize,

    /// Workers one OJS tenant may have registered (a heartbeat registers its worker id); a new
    /// worker beyond it is refused with 429 `rate_limited` until a silent one is removed (after
    /// --ojs-job-retention without a heartbeat).
    #[arg(long, env = "PGVS3_OJS_MAX_WORKERS_PER_TENANT",
          default_value_t = crate::ojs::engine::DEFAULT_MAX_WORKERS_PER_TENANT,
          value_parser = clap::value_parser!(i64).range(1..))]
    pub ojs_max_workers_per_tenant: i64,
}

/// The root key as the OJS token: `<access-key>:<secret>`.
pub fn root_key_token(access_key: &str, secret: &str) -> String {
    format!("{access_key}:{secret}")
}

/// `--ojs-auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OjsAuth {
    Token,
    None,
}

impl OjsArgs {
    /// Whether the root key is the token: `--ojs-auth token` without a token of either kind.
    pub fn root_key_is_token(&self) -> bool {
        self.ojs_auth == OjsAuth::Token && self.ojs_token.is_none() && self.ojs_tenant_tokens.is_empty()
    }

    /// The token that authenticates without binding a tenant: `--ojs-token`, or (when
    /// [`Self::root_key_is_token`]) the root key's, which its owner keeps following the catalog
    /// with [`root_key_token`].
    pub fn token(&self) -> Option<OperatorToken> {
        match (&self.ojs_token, self.root_key_is_token()) {
            (Some(token), _) => Some(OperatorToken::new(Some(token.clone()))),
            (None, true) => Some(OperatorToken::default()),
            (None, false) => None,
        }
    }

    /// What the OJS service is told (`token`: see [`Self::token`]); the webhook settings bound
    /// its synchronous webhook test call (its timeout, and the destinations it may reach).
    pub fn options(&self, webhooks: &WebhookArgs, token: Option<OperatorToken>) -> crate::ojs::OjsOptions {
        crate::ojs::OjsOptions {
            allow_reset: self.ojs_allow_reset,
            max_args_bytes: self.ojs_max_args_bytes,
            max_body_bytes: self.ojs_max_body_bytes,
            credentials: crate::ojs::http::tenant::Credentials {
                token,
                tenant_tokens: self.ojs_tenant_tokens.clone(),
            },
            webhook_timeout: webhooks.webhook_timeout,
            webhook_destinations: webhooks.delivery().destinations,
        }
    }
}

/// The webhook outbox (OJS webhooks and bucket notification webhook targets).
#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// Webhook deliveries this gateway makes at once (0: this gateway delivers none; others
    /// on the same database still do).
    #[arg(long, env = "PGVS3_WEBHOOK_CONCURRENCY", default_value_t = 16)]
    pub webhook_concurrency: usize,

    /// How long one webhook POST may take, connecting included; longer is a failed attempt.
    #[arg(long, env = "PGVS3_WEBHOOK_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub webhook_timeout: Duration,

    /// Attempts of one webhook delivery before it is dead-lettered (kept, not retried).
    #[arg(long, env = "PGVS3_WEBHOOK_MAX_ATTEMPTS", default_value_t = 8, value_parser = clap::value_parser!(i32).range(1..))]
    pub webhook_max_attempts: i32,

    /// The wait after a webhook delivery's first failure; it grows fourfold with each further one.
    #[arg(long, env = "PGVS3_WEBHOOK_BACKOFF", default_value = "30s", value_parser = parse_duration)]
    pub webhook_backoff: Duration,

    /// The longest wait between two attempts of a webhook delivery.
    #[arg(long, env = "PGVS3_WEBHOOK_MAX_BACKOFF", default_value = "24h", value_parser = parse_duration)]
    pub webhook_max_backoff: Duration,

    /// How often an idle gateway looks for webhook deliveries that came due.
    #[arg(long, env = "PGVS3_WEBHOOK_POLL", default_value = "500ms", value_parser = parse_duration)]
    pub webhook_poll: Duration,

    /// Internal networks webhooks may reach (comma-separated addresses or blocks, such as
    /// `127.0.0.1,10.0.0.0/8`). By default deliveries and tests reach public addresses only:
    /// loopback, link-local (cloud metadata), private, unique-local and the like are refused.
    #[arg(long, env = "PGVS3_WEBHOOK_ALLOW_NETWORKS", value_delimiter = ',')]
    pub webhook_allow_networks: Vec<crate::webhooks::AddressBlock>,
}

impl WebhookArgs {
    pub fn delivery(&self) -> crate::webhooks::DeliveryOptions {
        crate::webhooks::DeliveryOptions {
            concurrency: self.webhook_concurrency,
            timeout: self.webhook_timeout,
            max_attempts: self.webhook_max_attempts,
            backoff: self.webhook_backoff,
            max_backoff: self.webhook_max_backoff.max(self.webhook_backoff),
            poll: self.webhook_poll,
            destinations: crate::webhooks::Destinations::allowing(&self.webhook_allow_networks),
        }
    }
}
