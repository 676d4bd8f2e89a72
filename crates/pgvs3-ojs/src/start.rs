//! Starts the OJS endpoint from its flags, unless `--ojs-addr off`.

use deadpool_postgres::Pool;
use pgvs3_base::feature::{Listen, Shared, Started, spawn_http};
use pgvs3_base::http_server;

use crate::admission::Admission;
use crate::args::{OjsArgs, WebhookArgs};
use crate::ojs::engine::Queue;
use crate::ojs::http::tenant::OperatorToken;
use crate::ojs::{HealthProbe, OjsService, busy_response, spawn_cron_ticker};
use std::sync::Arc;

/// Binds the OJS listeners (`--ojs-addr`, and `--ojs-plaintext-addr` during a move to TLS),
/// serves OJS on them and runs the cron ticker; `None` when OJS is off. `token` is what
/// [`OjsArgs::token`] made of the flags (and of the root key, when it is the token); the pool
/// serves requests, `health` the health routes.
pub async fn start(
    args: &OjsArgs,
    webhooks: &WebhookArgs,
    token: Option<OperatorToken>,
    (pool, health): (Pool, Arc<dyn HealthProbe>),
    shared: &Shared,
    plaintext: Option<std::net::SocketAddr>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> anyhow::Result<Option<Started>> {
    let Some(addr) = args.ojs_addr.0 else {
        return Ok(None);
    };
    let listen = Listen { addr, plaintext, tls };
    let listeners = listen
        .bind("OJS", "--ojs-addr, or --ojs-addr off", "--ojs-plaintext-addr")
        .await?;
    let mut started = Started::bound(&listeners.0, listeners.1.as_ref())?;
    let options = args.options(webhooks, token);
    let queue = Queue::new(pool)
        .with_max_workers_per_tenant(args.ojs_max_workers_per_tenant)
        .with_replica(shared.lag.clone());
    started
        .background
        .push(spawn_cron_ticker(queue.clone(), options.max_args_bytes));
    let admission = Admission::new(
        "ojs",
        shared.admission.limits(args.ojs_max_active, args.ojs_max_waiting),
        shared.metrics.clone(),
    );
    let service = OjsService::new(
        queue,
        options,
        health,
        admission,
        shared.lag.clone(),
        shared.shutdown.clone(),
        shared.buffers.clone(),
    );
    let settings = http_server::Listener {
        name: "ojs",
        limits: shared.http.limits(args.ojs_max_connections),
        busy_response: busy_response(),
        tls: listen.tls,
    };
    started.servers = spawn_http(listeners, service, settings, shared);
    Ok(Some(started))
}
