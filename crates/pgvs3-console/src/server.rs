//! The console's HTTP/1.1 listener: bounded connections, a deadline on each request head, TLS
//! when the gateway has it, and a graceful stop.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::app::{App, Request};

/// Connections open at once: a console has a handful of users; beyond this a connection waits.
const MAX_CONNECTIONS: usize = 256;
/// A request head (and a TLS handshake) must arrive within this.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request body: forms and policy documents (S3 caps a policy at 20 KiB).
const MAX_BODY: usize = 256 * 1024;

pub async fn serve(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: App,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let app = Arc::new(app);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            permit = Arc::clone(&slots).acquire_owned() => permit.expect("the semaphore is never closed"),
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of descriptors and the like: back off rather than spin.
                    tracing::warn!(%err, "console accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let app = Arc::clone(&app);
        let tls = tls.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _permit = permit;
            let service = service_fn(move |request| handle(Arc::clone(&app), peer, request));
            let http = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .to_owned();
            let result = match tls {
                Some(acceptor) => match tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => {
                        watcher
                            .watch(http.serve_connection(TokioIo::new(stream), service))
                            .await
                    }
                    _ => return,
                },
                None => {
                    watcher
                        .watch(http.serve_connection(TokioIo::new(stream), service))
                        .await
                }
            };
            if let Err(err) = result {
                tracing::debug!(%err, %peer, "console connection ended");
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(10), graceful.shutdown()).await;
}

async fn handle(
    app: Arc<App>,
    peer: SocketAddr,
    request: hyper::Request<Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let (head, body) = request.into_parts();
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return Ok(App::plain(
                http::StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large\n",
            ));
        }
    };
    Ok(app.handle(Request::new(head, body, peer)).await)
}
