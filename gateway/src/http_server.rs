//! The accept loop every HTTP front shares: TCP_NODELAY on each socket, HTTP/1.1 keep-alive and
//! HTTP/2 (by preface), and a graceful drain of in-flight requests on shutdown.

use std::convert::Infallible;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A signal that flips once, when the process begins to shut down.
#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

pub struct ShutdownTrigger(watch::Sender<bool>);

pub fn shutdown_channel() -> (ShutdownTrigger, Shutdown) {
    let (sender, receiver) = watch::channel(false);
    (ShutdownTrigger(sender), Shutdown(receiver))
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    pub async fn wait(&mut self) {
        let _ = self.0.wait_for(|down| *down).await;
    }
}

/// Serves `service` on `listener` until shutdown, then waits up to `drain` for open requests.
pub async fn serve<S, B>(listener: TcpListener, service: S, mut shutdown: Shutdown, drain: Duration, name: &'static str)
where
    S: Service<http::Request<Incoming>, Response = http::Response<B>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Small responses go out with their headers in one write; with Nagle off nothing waits for
    // the peer's delayed ACK (the ~40 ms stall of keep-alive clients).
    builder
        .http1()
        .writev(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(60));
    builder.http2().timer(hyper_util::rt::TokioTimer::new());
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and similar: back off instead of spinning.
                    tracing::warn!(error = %err, server = name, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.wait() => break,
        };
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "TCP_NODELAY");
        }
        let connection = builder
            .serve_connection(TokioIo::new(stream), service.clone())
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!(server = name, "drained"),
        _ = tokio::time::sleep(drain) => tracing::warn!(server = name, "drain timed out; closing open connections"),
    }
}
