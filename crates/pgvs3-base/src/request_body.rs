//! The request body every HTTP front reads: hyper's body with an idle deadline, so a client that
//! stops sending in the middle of a body cannot hold its request (and the admission slot and
//! database connection behind it) for longer than `--http-body-idle-timeout`.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

/// A request body that fails with [`BodyError::IdleTimeout`] when no byte arrives for `idle`.
pub struct RequestBody {
    inner: Incoming,
    idle: Duration,
    /// Armed at the first wait, so bodies that arrive with their head (and empty ones) never
    /// touch the timer wheel.
    deadline: Option<Pin<Box<Sleep>>>,
    /// A frame arrived since the deadline was last set: the next wait starts a new idle period.
    progressed: bool,
}

impl RequestBody {
    pub fn new(inner: Incoming, idle: Duration) -> RequestBody {
        RequestBody {
            inner,
            idle,
            deadline: None,
            progressed: false,
        }
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
        match Pin::new(&mut this.inner).poll_frame(cx) {
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
                    Poll::Ready(()) => Poll::Ready(Some(Err(BodyError::IdleTimeout(idle)))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
