//! The accept loop every HTTP front shares: a cap on open connections, deadlines for a client's
//! first request, its idle keep-alive and its request bodies, TCP_NODELAY on each socket,
//! HTTP/1.1 keep-alive and HTTP/2 (by preface, or ALPN under TLS), TLS when the listener has a
//! certificate, and a graceful drain of in-flight requests on shutdown.
//!
//! Everything here runs before a request is authenticated, so it spends only a file descriptor
//! and a task per connection, both bounded by the cap and released when the connection ends
//! (also when its task panics).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Instant as Deadline;
use tokio_rustls::TlsAcceptor;

use crate::metrics::Metrics;
use crate::request_body::{Leftover, RequestBody};

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

/// The bounds of one HTTP listener (flags `--http-*` and `--<protocol>-max-connections`).
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Connections open at once; the next one is answered 503 and closed.
    pub max_connections: usize,
    /// A new connection must deliver its first request head within this (its TLS handshake
    /// included).
    pub first_request_timeout: Duration,
    /// HTTP/1.1: an idle keep-alive connection must deliver its next request head within this
    /// (hyper's header-read timer covers the idle wait and the head alike). HTTP/2: the PING
    /// interval that finds dead peers.
    pub idle_timeout: Duration,
    /// A request body that delivers no byte for this long fails (S3: 400 RequestTimeout).
    pub body_idle_timeout: Duration,
}

/// One listener: its name (a metric label), its bounds, and the answer for a connection beyond
/// the cap, in the protocol's own terms.
#[derive(Clone)]
pub struct Listener {
    pub name: &'static str,
    pub limits: HttpLimits,
    /// A whole HTTP/1.1 response (status line to body), written once without waiting.
    pub busy_response: Bytes,
    /// HTTPS: the handshake each connection runs first.
    pub tls: Option<TlsAcceptor>,
}

/// A 503 with Retry-After and `Connection: close`, for [`Listener::busy_response`].
pub fn busy_response(content_type: &str, body: &str) -> Bytes {
    Bytes::from(format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: {content_type}\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ))
}

/// Serves `service` on `listener` until shutdown, then waits up to `drain` for open requests.
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    mut shutdown: Shutdown,
    drain: Duration,
    settings: Listener,
    metrics: Metrics,
) where
    S: Service<http::Request<RequestBody>, Response = http::Response<B>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Listener {
        name,
        limits,
        busy_response,
        tls,
    } = settings;
    let serving = Serving {
        service,
        builder: Arc::new(http_builder(&limits)),
        limits,
        tls: tls.is_some(),
        timed_out: metrics
            .http_connections_refused
            .with_label_values(&[name, "first_request_timeout"]),
    };
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections.clamp(1, Semaphore::MAX_PERMITS)));
    let open = metrics.http_connections.with_label_values(&[name]);
    let refused = metrics.http_connections_refused.with_label_values(&[name, "limit"]);
    let mut accept_errors = AcceptErrors::default();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                accept_errors.record(name, &err);
                // Out of file descriptors and similar: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            refused.inc();
            // A TLS client could not read a plaintext answer: it is closed without one.
            if tls.is_none() {
                refuse(&stream, &busy_response);
            }
            continue;
        };
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "TCP_NODELAY");
        }
        // The watcher is taken now: a shutdown from here on reaches the connection, however
        // long its handshake takes.
        let connection = serving.connection(peer, graceful.watcher());
        let (open, tls) = (open.clone(), tls.clone());
        open.inc();
        tokio::spawn(async move {
            // Dropped however the task ends, a panic included: the slot and the gauge follow.
            let _open = OpenConnection { _slot: slot, open };
            connection.run(stream, tls).await;
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!(server = name, "drained"),
        _ = tokio::time::sleep(drain) => tracing::warn!(server = name, "drain timed out; closing open connections"),
    }
}

/// HTTP/1.1 and HTTP/2 as the listener's limits bound them.
fn http_builder(limits: &HttpLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Small responses go out with their headers in one write; with Nagle off nothing waits for
    // the peer's delayed ACK (the ~40 ms stall of keep-alive clients).
    builder
        .http1()
        .writev(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.idle_timeout);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(limits.idle_timeout)
        .keep_alive_timeout(limits.first_request_timeout);
    builder
}

/// What every connection of one listener is served with.
struct Serving<S> {
    service: S,
    builder: Arc<auto::Builder<TokioExecutor>>,
    limits: HttpLimits,
    tls: bool,
    timed_out: prometheus::IntCounter,
}

impl<S: Clone> Serving<S> {
    /// A connection just accepted from `peer`, its first request due within the limit.
    fn connection(&self, peer: std::net::SocketAddr, watcher: Watcher) -> Connection<S> {
        let first_request = Arc::new(Notify::new());
        Connection {
            service: Requests {
                inner: self.service.clone(),
                first_request: Arc::clone(&first_request),
                body_idle_timeout: self.limits.body_idle_timeout,
                peer: Peer {
                    addr: peer,
                    tls: self.tls,
                },
            },
            builder: Arc::clone(&self.builder),
            watcher,
            first_request,
            deadline: Deadline::now() + self.limits.first_request_timeout,
            timed_out: self.timed_out.clone(),
            peer,
        }
    }
}

/// One accepted connection, until its first request: what serves it, and the deadline for
/// that request.
struct Connection<S> {
    service: Requests<S>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    watcher: Watcher,
    first_request: Arc<Notify>,
    deadline: Deadline,
    timed_out: prometheus::IntCounter,
    peer: std::net::SocketAddr,
}

impl<S, B> Connection<S>
where
    S: Service<http::Request<RequestBody>, Response = http::Response<B>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    /// Serves the connection on `stream`, after its TLS handshake when the listener has TLS.
    async fn run(self, stream: TcpStream, tls: Option<TlsAcceptor>) {
        match tls {
            None => self.serve(stream).await,
            Some(tls) => match tokio::time::timeout_at(self.deadline, tls.accept(stream)).await {
                Ok(Ok(stream)) => self.serve(stream).await,
                Ok(Err(err)) => tracing::debug!(error = %err, peer = %self.peer, "TLS handshake failed"),
                Err(_) => self.expired(),
            },
        }
    }

    /// Serves HTTP on `io` (a socket, or a TLS session on one) until the connection ends.
    async fn serve<IO>(self, io: IO)
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let connection = self
            .builder
            .serve_connection(TokioIo::new(io), self.service)
            .into_owned();
        let connection = self.watcher.watch(connection);
        tokio::pin!(connection);
        let peer = self.peer;
        tokio::select! {
            ended = &mut connection => if let Err(err) = ended {
                tracing::debug!(error = %err, %peer, "connection ended with an error");
            },
            () = first_request_deadline(&self.first_request, self.deadline) => {
                self.timed_out.inc();
                tracing::debug!(%peer, "closed a connection that sent no request in time");
            }
        }
    }

    /// The handshake outlasted the first request's deadline.
    fn expired(&self) {
        self.timed_out.inc();
        tracing::debug!(peer = %self.peer, "closed a connection that completed no TLS handshake in time");
    }
}

/// Completes when `deadline` passes before the connection's first request; never, once it came.
async fn first_request_deadline(first_request: &Notify, deadline: Deadline) {
    if tokio::time::timeout_at(deadline, first_request.notified())
        .await
        .is_ok()
    {
        std::future::pending::<()>().await;
    }
}

/// Answers a connection beyond the cap without waiting: whatever fits in the socket buffer now.
fn refuse(stream: &TcpStream, busy_response: &[u8]) {
    let _ = stream.try_write(busy_response);
}

/// A connection's slot under the cap, and its count in the open-connections gauge.
struct OpenConnection {
    _slot: tokio::sync::OwnedSemaphorePermit,
    open: prometheus::IntGauge,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.open.dec();
    }
}

/// Accept failures (EMFILE above all) are logged at most every ten seconds, with a count, so
/// a descriptor shortage cannot fill the log.
#[derive(Default)]
struct AcceptErrors {
    last_logged: Option<Instant>,
    since: u64,
}

impl AcceptErrors {
    fn record(&mut self, server: &'static str, err: &std::io::Error) {
        self.since += 1;
        if self
            .last_logged
            .is_some_and(|at| at.elapsed() < Duration::from_secs(10))
        {
            return;
        }
        tracing::warn!(error = %err, server, failures = self.since, "accept failed");
        self.last_logged = Some(Instant::now());
        self.since = 0;
    }
}

/// The per-connection service: marks the first request and gives each request its body with
/// the idle deadline.
#[derive(Clone)]
struct Requests<S> {
    inner: S,
    first_request: Arc<Notify>,
    body_idle_timeout: Duration,
    peer: Peer,
}

/// The connection a request came on, in its extensions (bucket policies' `aws:SourceIp` and
/// `aws:SecureTransport`).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub addr: std::net::SocketAddr,
    pub tls: bool,
}

impl<S, B> Service<http::Request<Incoming>> for Requests<S>
where
    S: Service<http::Request<RequestBody>, Response = http::Response<B>>,
{
    type Response = http::Response<B>;
    type Error = S::Error;
    type Future = Answer<S::Future>;

    fn call(&self, request: http::Request<Incoming>) -> Answer<S::Future> {
        self.first_request.notify_one();
        let idle = self.body_idle_timeout;
        let leftover = if request.version() == http::Version::HTTP_2 {
            Leftover::Drained
        } else if http_body::Body::is_end_stream(request.body()) || expects_continue(request.headers()) {
            // A client waiting for `100 Continue` has sent no body: reading one would ask it
            // for the body of a request that was refused.
            Leftover::Dropped
        } else {
            Leftover::DrainedThenClosed(Arc::default())
        };
        let close = match &leftover {
            Leftover::DrainedThenClosed(close) => Some(Arc::clone(close)),
            _ => None,
        };
        let mut request = request.map(|body| RequestBody::new(body, idle, leftover));
        request.extensions_mut().insert(self.peer);
        Answer {
            inner: self.inner.call(request),
            close,
        }
    }
}

pin_project_lite::pin_project! {
    /// A handler's answer, which closes its HTTP/1.1 connection when the handler left the
    /// request's body unread (request_body.rs): the body is read on, then the connection ends.
    pub struct Answer<F> {
        #[pin]
        inner: F,
        close: Option<Arc<AtomicBool>>,
    }
}

impl<F, B, E> Future for Answer<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let mut answer = std::task::ready!(this.inner.poll(cx));
        if let (Ok(response), Some(close)) = (&mut answer, this.close.as_ref())
            && close.load(Ordering::Relaxed)
        {
            response
                .headers_mut()
                .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
        }
        Poll::Ready(answer)
    }
}

fn expects_continue(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::EXPECT)
        .is_some_and(|expect| expect.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Raises this process's open-file limit to its hard limit: every connection is a descriptor,
/// and the soft default (often 1024) is far below the connection caps.
pub fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    limit.rlim_cur
}
