//! The request body every HTTP front reads: hyper's body with an idle deadline, so a client that
//! stops sending in the middle of a body cannot hold its request (and the admission slot and
//! database connection behind it) for longer than `--http-body-idle-timeout`.
//!
//! A body its handler leaves unread (a PUT refused before its body, 403) is read on and
//! discarded after the handler is done with it, up to [`DRAIN_BYTES`] within [`DRAIN_TIME`], so
//! the client that is still sending it gets the answer it was sent. Otherwise, over HTTP/2, a
//! stream whose request is still arriving when its response ends is reset (RST_STREAM NO_ERROR,
//! as RFC 9113 §8.1 allows), and clients that are still uploading then (curl 7.88: exit 92)
//! report the reset; over HTTP/1.1 the connection is closed at the answer, the rest of the body
//! meets a TCP reset, and clients that send their whole body before they read (Python's
//! http.client, under boto3) report the reset instead of the 403. So an HTTP/1.1 answer given
//! while its body is unread says `Connection: close`, and the connection closes once the body
//! is read (at its end, no reset). An HTTP/1.1 client that waits for `100 Continue` before its
//! body is not asked for it: it gets the answer, which says `Connection: close`, and the
//! connection is closed. Saying so matters: hyper closes the connection a moment after the
//! answer, and a client that reuses it in between (botocore, whose next request then reads the
//! end of the stream as an answer without headers or body) must know not to.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

/// The most of an unread request body read on after its handler dropped it: a refused
/// multipart part or single PUT of up to 64 MiB still gets its answer; beyond, the stream is
/// reset after the response (at once when its declared length says so). Reading and discarding
/// costs no memory (the flow-control window bounds what is buffered), only the bandwidth an
/// upload would have cost anyway, and [`DRAIN_TIME`] bounds how long the stream is held.
pub const DRAIN_BYTES: u64 = 64 << 20;
/// How long an unread request body is read on at most, however slowly it arrives.
pub const DRAIN_TIME: Duration = Duration::from_secs(10);

/// What becomes of what is left of a body its handler drops (see the module's comment).
pub enum Leftover {
    /// Dropped with the body: hyper resets the HTTP/2 stream or closes the HTTP/1.1 connection.
    Dropped,
    /// Read on and discarded (HTTP/2).
    Drained,
    /// Read on and discarded, and the flag raised: the answer closes the connection (HTTP/1.1).
    DrainedThenClosed(Arc<AtomicBool>),
    /// Not asked for (HTTP/1.1, the client waits for `100 Continue`): the flag is raised and
    /// the answer closes the connection.
    Unsent(Arc<AtomicBool>),
}

impl Leftover {
    /// The flag that makes the answer close its connection, when there is one.
    fn close_flag(&self) -> Option<&AtomicBool> {
        match self {
            Leftover::DrainedThenClosed(close) | Leftover::Unsent(close) => Some(close),
            Leftover::Dropped | Leftover::Drained => None,
        }
    }

    /// The body failed: the connection is not kept for another request, and what is left of
    /// the body is not waited for.
    fn abandon(&mut self) {
        if let Some(close) = self.close_flag() {
            close.store(true, Ordering::Relaxed);
        }
        *self = Leftover::Dropped;
    }
}

/// A request body that fails with [`BodyError::IdleTimeout`] when no byte arrives for `idle`.
pub struct RequestBody {
    /// `None` only once dropped: [`Drop`] hands the rest of the body to [`drain`].
    inner: Option<Incoming>,
    /// Dropped once the body failed: a client that stalled or broke its framing is not waited for.
    leftover: Leftover,
    idle: Duration,
    /// Armed at the first wait, so bodies that arrive with their head (and empty ones) never
    /// touch the timer wheel.
    deadline: Option<Pin<Box<Sleep>>>,
    /// A frame arrived since the deadline was last set: the next wait starts a new idle period.
    progressed: bool,
}

impl RequestBody {
    pub fn new(inner: Incoming, idle: Duration, leftover: Leftover) -> RequestBody {
        RequestBody {
            inner: Some(inner),
            leftover,
            idle,
            deadline: None,
            progressed: false,
        }
    }

    /// How long the body may deliver nothing.
    pub fn idle_timeout(&self) -> Duration {
        self.idle
    }
}

/// Why a request body could not be read to its end.
#[derive(Debug)]
pub enum BodyError {
    /// The connection failed or the client sent a malformed body.
    Transport(hyper::Error),
    /// The client sent nothing for this long in the middle of the body.
    IdleTimeout(Duration),
    /// The request was refused before the rest of its body was read (its answer is decided
    /// by whoever refused it).
    Refused,
}

impl BodyError {
    /// Whether `err` (or an error it wraps, as s3s's verifying streams do) is a body idle timeout.
    pub fn is_idle_timeout(mut err: &(dyn std::error::Error + 'static)) -> bool {
        loop {
            if let Some(BodyError::IdleTimeout(_)) = err.downcast_ref::<BodyError>() {
                return true;
            }
            match err.source() {
                Some(source) => err = source,
                None => return false,
            }
        }
    }
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Transport(err) => write!(f, "reading the request body: {err}"),
            BodyError::IdleTimeout(idle) => write!(
                f,
                "the client sent no part of the request body for {} s",
                idle.as_secs_f64()
            ),
            BodyError::Refused => write!(f, "the request was refused before its body was read"),
        }
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BodyError::Transport(err) => Some(err),
            BodyError::IdleTimeout(_) | BodyError::Refused => None,
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(Some(Err(err))) => {
                this.leftover.abandon();
                Poll::Ready(Some(Err(BodyError::Transport(err))))
            }
            Poll::Ready(frame) => {
                this.progressed = true;
                Poll::Ready(frame.map(|frame| frame.map_err(BodyError::Transport)))
            }
            Poll::Pending => {
                let idle = this.idle;
                let deadline = this.deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                if std::mem::take(&mut this.progressed) {
                    deadline.as_mut().reset(Instant::now() + idle);
                }
                match deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.leftover.abandon();
                        Poll::Ready(Some(Err(BodyError::IdleTimeout(idle))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else { return };
        if inner.is_end_stream() {
            return;
        }
        if let Some(close) = self.leftover.close_flag() {
            close.store(true, Ordering::Relaxed);
        }
        // A declared length past the limit would be reset after the limit anyway: reset now.
        if matches!(self.leftover, Leftover::Dropped | Leftover::Unsent(_)) || inner.size_hint().lower() > DRAIN_BYTES {
            return;
        }
        // Dropped by a handler, always inside the runtime; elsewhere the stream is just reset.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain(inner));
        }
    }
}

/// Reads and discards `body` to its end, or until [`DRAIN_BYTES`] or [`DRAIN_TIME`] is spent;
/// dropping it then resets the stream (after its response: hyper holds the stream for that).
async fn drain(mut body: Incoming) {
    let mut left = DRAIN_BYTES;
    let read = async {
        while let Some(Ok(frame)) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            let size = frame.data_ref().map_or(0, |data| data.len() as u64);
            let Some(rest) = left.checked_sub(size) else {
                tracing::debug!("an unread request body is larger than the drain limit; resetting its stream");
                return;
            };
            left = rest;
        }
    };
    if tokio::time::timeout(DRAIN_TIME, read).await.is_err() {
        tracing::debug!("an unread request body did not end within the drain time; resetting its stream");
    }
}
