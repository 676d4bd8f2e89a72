//! The accept loop every HTTP front shares: a cap on open connections, overall and per client
//! address, deadlines for a client's first request, its idle keep-alive (HTTP/1.1 and HTTP/2
//! alike), its request bodies and its reading of responses (HTTP/1.1 and HTTP/2 alike),
//! TCP_NODELAY on each socket,
//! HTTP/1.1 keep-alive and HTTP/2 (by preface, or ALPN under TLS), TLS when the listener has a
//! certificate, and a graceful drain of in-flight requests on shutdown.
//!
//! Everything here runs before a request is authenticated, so it spends only a file descriptor
//! and a task per connection, both bounded by the cap and released when the connection ends
//! (also when its task panics).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
use crate::send_stall::SendStall;

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
    /// Connections open at once from one client address (0: no cap); the next one from it is
    /// answered 503 and closed, so that one client cannot take the whole listener.
    pub max_connections_per_ip: usize,
    /// A new connection must deliver its first request head within this (its TLS handshake
    /// included).
    pub first_request_timeout: Duration,
    /// A connection with no request open for this long is closed: HTTP/1.1 must deliver its
    /// next request head within it (hyper's header-read timer covers the idle wait and the head
    /// alike); HTTP/2 is sent GOAWAY ([`Streams`]), and this is also its PING interval, which
    /// finds dead peers. A connection whose client accepts no response bytes for this long is
    /// cut ([`SendStall`]), and so is an HTTP/2 connection one of whose responses the client
    /// grants no flow-control window for this long ([`Unsent`]).
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
    let per_ip = PerIp::new(limits.max_connections_per_ip);
    let open = metrics.http_connections.with_label_values(&[name]);
    let refused = metrics.http_connections_refused.with_label_values(&[name, "limit"]);
    let refused_per_ip = metrics
        .http_connections_refused
        .with_label_values(&[name, "per_ip_limit"]);
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
        let admitted = match Arc::clone(&slots).try_acquire_owned() {
            Err(_) => Err(&refused),
            Ok(slot) => per_ip
                .admit(peer.ip())
                .map(|from_ip| (slot, from_ip))
                .ok_or(&refused_per_ip),
        };
        let (slot, from_ip) = match admitted {
            Ok(admitted) => admitted,
            Err(refused) => {
                refused.inc();
                // A TLS client could not read a plaintext answer: it is closed without one.
                if tls.is_none() {
                    refuse(&stream, &busy_response);
                }
                continue;
            }
        };
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "TCP_NODELAY");
        }
        // The watcher is taken now: a shutdown from here on reaches the connection, however
        // long its handshake takes.
        let connection = serving.connection(peer, graceful.watcher(), shutdown.clone());
        let (open, tls) = (open.clone(), tls.clone());
        open.inc();
        tokio::spawn(async move {
            // Dropped however the task ends, a panic included: the slot and the gauge follow.
            let _open = OpenConnection {
                _slot: slot,
                _from_ip: from_ip,
                open,
            };
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
    fn connection(&self, peer: std::net::SocketAddr, watcher: Watcher, shutdown: Shutdown) -> Connection<S> {
        let first_request = Arc::new(Notify::new());
        let streams = Streams::default();
        let unsent = Unsent::default();
        Connection {
            service: Requests {
                inner: self.service.clone(),
                first_request: Arc::clone(&first_request),
                streams: streams.clone(),
                unsent: unsent.clone(),
                body_idle_timeout: self.limits.body_idle_timeout,
                peer: Peer {
                    addr: peer,
                    tls: self.tls,
                },
            },
            builder: Arc::clone(&self.builder),
            watcher,
            shutdown,
            streams,
            unsent,
            idle_timeout: self.limits.idle_timeout,
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
    /// Held until the connection ends: the listener's drain waits for it.
    watcher: Watcher,
    shutdown: Shutdown,
    /// The requests open on it, and how long it may have none.
    streams: Streams,
    /// Its HTTP/2 responses waiting for the client's window, cut after the idle timeout.
    unsent: Unsent,
    idle_timeout: Duration,
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
            .serve_connection(TokioIo::new(SendStall::new(io, self.idle_timeout)), self.service)
            .into_owned();
        tokio::pin!(connection);
        let first_request = first_request_deadline(&self.first_request, self.deadline);
        tokio::pin!(first_request);
        let (peer, _draining, mut shutdown) = (self.peer, self.watcher, self.shutdown);
        // Closing: GOAWAY (HTTP/2) or close after the request in flight (HTTP/1.1), at shutdown
        // or once no request has been open for the idle timeout.
        let mut closing = false;
        loop {
            tokio::select! {
                ended = &mut connection => {
                    if let Err(err) = ended {
                        tracing::debug!(error = %err, %peer, "connection ended with an error");
                    }
                    return;
                }
                () = &mut first_request => {
                    self.timed_out.inc();
                    tracing::debug!(%peer, "closed a connection that sent no request in time");
                    return;
                }
                // Dropping the connection ends each of its streams (h2 fails them all), and
                // their bodies drop with them: what a download held is released at once.
                () = self.unsent.stalled(self.idle_timeout) => {
                    tracing::debug!(%peer, "cut an HTTP/2 connection whose client took no response bytes for the idle timeout");
                    return;
                }
                () = shutdown.wait(), if !closing => {}
                () = self.streams.idle(self.idle_timeout), if !closing => {
                    tracing::debug!(%peer, "closing a connection idle for the idle timeout");
                }
            }
            closing = true;
            connection.as_mut().graceful_shutdown();
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

/// A connection's slot under the cap and its client's, and its count in the open-connections
/// gauge.
struct OpenConnection {
    _slot: tokio::sync::OwnedSemaphorePermit,
    _from_ip: Option<IpSlot>,
    open: prometheus::IntGauge,
}

/// The connections open from each client address, under `--http-max-connections-per-ip`.
struct PerIp {
    max: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PerIp {
    fn new(max: usize) -> PerIp {
        PerIp {
            max,
            open: Arc::default(),
        }
    }

    /// A slot for one more connection from `ip`: `None` when it has its cap open already,
    /// `Some(None)` when there is no cap.
    fn admit(&self, ip: IpAddr) -> Option<Option<IpSlot>> {
        if self.max == 0 {
            return Some(None);
        }
        let mut open = self.open.lock().expect("per-ip connections");
        let count = open.entry(ip).or_default();
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(Some(IpSlot {
            ip,
            open: Arc::clone(&self.open),
        }))
    }
}

/// One connection's count under its address's cap, returned when it closes (the address
/// forgotten with its last connection, so the map holds only addresses with one open).
struct IpSlot {
    ip: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().expect("per-ip connections");
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
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

/// The requests (HTTP/2: streams) open on one connection, from their head to the end of their
/// response's body. hyper closes an idle HTTP/1.1 connection itself (its header-read timer)
/// but keeps an HTTP/2 one whose client answers its PINGs for ever: [`Streams::idle`] closes
/// both alike, so that idle connections cannot fill the listener's cap.
#[derive(Clone, Default)]
struct Streams(Arc<watch::Sender<usize>>);

impl Streams {
    /// One more open request, until the guard drops.
    fn open(&self) -> OpenStream {
        self.0.send_modify(|open| *open += 1);
        OpenStream(self.clone())
    }

    /// Completes once no request has been open for `limit`; a request opened or closed
    /// meanwhile starts the wait again.
    async fn idle(&self, limit: Duration) {
        let mut changes = self.0.subscribe();
        loop {
            if *changes.borrow_and_update() > 0 {
                let _ = changes.changed().await;
                continue;
            }
            if tokio::time::timeout(limit, changes.changed()).await.is_err() {
                return;
            }
        }
    }
}

/// A request open on its connection ([`Streams`]).
struct OpenStream(Streams);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.0.send_modify(|open| *open -= 1);
    }
}

/// The HTTP/2 responses of one connection that hyper holds a piece ([`HTTP2_PIECE`]) of until
/// the client grants flow-control window, by the moment each began to wait. hyper does not poll a response's
/// body while its last piece waits for window, so a client that never sends WINDOW_UPDATE
/// stalls the body (and the database connection, download share and buffers behind it) with
/// no socket write pending: [`SendStall`] never sees it. hyper offers no way to reset one
/// stream from outside its body, so the connection is cut, as an HTTP/1.1 one is.
#[derive(Clone, Default)]
struct Unsent(Arc<UnsentInner>);

#[derive(Default)]
struct UnsentInner {
    waiting: watch::Sender<HashMap<u64, Deadline>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl Unsent {
    /// A stream's place in the map: an id no other response of the connection has.
    fn stream(&self) -> UnsentStream {
        UnsentStream {
            unsent: self.clone(),
            id: self.0.next_id.fetch_add(1, Ordering::Relaxed),
            waiting: false,
        }
    }

    /// Completes once a response has waited for the client's window for `limit`.
    async fn stalled(&self, limit: Duration) {
        let mut changes = self.0.waiting.subscribe();
        loop {
            let oldest = changes.borrow_and_update().values().min().copied();
            match oldest {
                None => {
                    let _ = changes.changed().await;
                }
                Some(since) => tokio::select! {
                    _ = changes.changed() => {}
                    () = tokio::time::sleep_until(since + limit) => return,
                },
            }
        }
    }
}

/// One HTTP/2 response's entry in [`Unsent`].
struct UnsentStream {
    unsent: Unsent,
    id: u64,
    /// Whether hyper holds a piece ([`HTTP2_PIECE`]) of it: its last frame was data, and its body not polled
    /// since.
    waiting: bool,
}

impl UnsentStream {
    /// hyper took a piece and will not ask for the next before the client's window lets it
    /// send this one.
    fn wait(&mut self) {
        let id = self.id;
        self.unsent.0.waiting.send_modify(|waiting| {
            waiting.insert(id, Deadline::now());
        });
        self.waiting = true;
    }

    /// hyper asks for the next piece (or the body ended): the client took the last.
    fn taken(&mut self) {
        if self.waiting {
            let id = self.id;
            self.unsent.0.waiting.send_modify(|waiting| {
                waiting.remove(&id);
            });
            self.waiting = false;
        }
    }
}

impl Drop for UnsentStream {
    fn drop(&mut self) {
        self.taken();
    }
}

/// The most of a response's data hyper is handed at once over HTTP/2: [`Unsent`] times each
/// piece's wait for window, so a client must grant this much (h2's default frame size) per
/// idle timeout, not a whole chunk of the body (up to 256 KiB), to count as reading.
const HTTP2_PIECE: usize = 16 << 10;

pin_project_lite::pin_project! {
    /// A response's body, its request counted open until the body ends (or is dropped), and
    /// over HTTP/2 its data handed to hyper in pieces whose wait for the client's window is
    /// watched.
    struct Tracked<B> {
        #[pin]
        inner: B,
        open: Option<OpenStream>,
        unsent: Option<UnsentStream>,
        // HTTP/2: what is left of the body's last chunk, handed on before it is polled again.
        rest: Bytes,
    }
}

impl<B: http_body::Body> http_body::Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let Some(unsent) = this.unsent.as_mut() else {
            let polled = std::task::ready!(this.inner.poll_frame(cx));
            if let None | Some(Err(_)) = &polled {
                this.open.take();
            }
            return Poll::Ready(polled.map(|frame| frame.map(|frame| frame.map_data(into_bytes))));
        };
        // hyper asks for more: it has sent what it held, or is about to.
        unsent.taken();
        if this.rest.is_empty() {
            match std::task::ready!(this.inner.poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => *this.rest = into_bytes(data),
                    // Trailers need no window.
                    Err(frame) => return Poll::Ready(Some(Ok(frame.map_data(into_bytes)))),
                },
                Some(Err(err)) => {
                    this.open.take();
                    return Poll::Ready(Some(Err(err)));
                }
                None => {
                    this.open.take();
                    return Poll::Ready(None);
                }
            }
        }
        let piece = this.rest.split_to(this.rest.len().min(HTTP2_PIECE));
        // Empty data needs no window.
        if !piece.is_empty() {
            unsent.wait();
        }
        Poll::Ready(Some(Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = http_body::SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

/// A chunk as `Bytes`, which a chunk already is (the S3, OJS and admin bodies): then nothing is
/// copied.
fn into_bytes(mut data: impl bytes::Buf) -> Bytes {
    data.copy_to_bytes(data.remaining())
}

/// The per-connection service: marks the first request, counts it open, and gives it its
/// body with the idle deadline.
#[derive(Clone)]
struct Requests<S> {
    inner: S,
    first_request: Arc<Notify>,
    streams: Streams,
    unsent: Unsent,
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
    type Response = http::Response<Tracked<B>>;
    type Error = S::Error;
    type Future = Answer<S::Future>;

    fn call(&self, request: http::Request<Incoming>) -> Answer<S::Future> {
        self.first_request.notify_one();
        let open = self.streams.open();
        let idle = self.body_idle_timeout;
        let http2 = request.version() == http::Version::HTTP_2;
        let unsent = http2.then(|| self.unsent.stream());
        let leftover = if http2 {
            Leftover::Drained
        } else if http_body::Body::is_end_stream(request.body()) {
            Leftover::Dropped
        } else if expects_continue(request.headers()) {
            // A client waiting for `100 Continue` has sent no body: reading one would ask it
            // for the body of a request that was refused.
            Leftover::Unsent(Arc::default())
        } else {
            Leftover::DrainedThenClosed(Arc::default())
        };
        let close = match &leftover {
            Leftover::DrainedThenClosed(close) | Leftover::Unsent(close) => Some(Arc::clone(close)),
            Leftover::Dropped | Leftover::Drained => None,
        };
        let mut request = request.map(|body| RequestBody::new(body, idle, leftover));
        request.extensions_mut().insert(self.peer);
        Answer {
            inner: self.inner.call(request),
            close,
            open: Some(open),
            unsent,
        }
    }
}

pin_project_lite::pin_project! {
    /// A handler's answer, which closes its HTTP/1.1 connection when the handler left the
    /// request's body unread (request_body.rs): the body is read on, then the connection ends.
    /// Its request stays counted open (`open`) until its response's body ends.
    struct Answer<F> {
        #[pin]
        inner: F,
        close: Option<Arc<AtomicBool>>,
        open: Option<OpenStream>,
        unsent: Option<UnsentStream>,
    }
}

impl<F, B, E> Future for Answer<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<Tracked<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut answer = std::task::ready!(this.inner.poll(cx));
        if let (Ok(response), Some(close)) = (&mut answer, this.close.as_ref())
            && close.load(Ordering::Relaxed)
        {
            response
                .headers_mut()
                .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
        }
        let (open, unsent) = (this.open.take(), this.unsent.take());
        Poll::Ready(answer.map(|response| {
            response.map(|inner| Tracked {
                inner,
                open,
                unsent,
                rest: Bytes::new(),
            })
        }))
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
