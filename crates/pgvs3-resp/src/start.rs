//! Starts the RESP endpoint from its flags, unless `--resp-addr off`.

use std::sync::Arc;

use pgvs3_base::feature::{Listen, Shared, Started};
use pgvs3_pg::pg::connections::Dedicated;
use pgvs3_store::bucket::Buckets;

use crate::args::RespArgs;
use crate::resp::{RespServer, RespSettings};

/// Binds the RESP listeners (`--resp-addr`, and `--resp-plaintext-addr` during a move to TLS)
/// and serves RESP on them; `None` when RESP is off. `database` is where blocking commands and
/// pub/sub LISTEN for other gateways' writes.
pub async fn start(
    args: &RespArgs,
    buckets: Buckets,
    shared: &Shared,
    plaintext: Option<std::net::SocketAddr>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    database: Dedicated,
) -> anyhow::Result<Option<Started>> {
    let Some(addr) = args.resp_addr.0 else {
        return Ok(None);
    };
    let listen = Listen { addr, plaintext, tls };
    let (listener, plaintext) = listen
        .bind("RESP", "--resp-addr, or --resp-addr off", "--resp-plaintext-addr")
        .await?;
    let mut started = Started::bound(&listener, plaintext.as_ref())?;
    let admission = shared.admission.limits(args.resp_max_active, args.resp_max_waiting);
    let settings = RespSettings::from_args(args, started.addr, admission);
    let server = RespServer::new(
        buckets,
        shared.metrics.clone(),
        settings,
        started.addr,
        shared.lag.clone(),
        shared.buffers.clone(),
        Some(database),
    )
    .await?;
    if let Some(plaintext) = plaintext {
        let server = Arc::clone(&server);
        started.servers.push(tokio::spawn(server.serve(
            plaintext,
            shared.shutdown.clone(),
            shared.drain,
            None,
        )));
    }
    started.servers.push(tokio::spawn(server.serve(
        listener,
        shared.shutdown.clone(),
        shared.drain,
        listen.tls,
    )));
    Ok(Some(started))
}
