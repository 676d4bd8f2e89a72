//! The bound on a client that stops reading its response: a connection whose writes accept no
//! byte for the limit fails, so hyper ends it and drops the response — and with it the database
//! connection a streaming GET holds. Without it, a client that sent a GET and never read (or
//! read at a few KiB/s) held a pool connection for as long as it liked, and a handful of them
//! starved every protocol of the gateway.
//!
//! Only a write that has bytes to send and cannot counts: a response waiting for its own data
//! (the database) is no stall, nor is a slow client that keeps accepting some bytes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

pin_project_lite::pin_project! {
    /// `io` whose writes fail with `TimedOut` once they accepted nothing for `limit`.
    pub struct SendStall<IO> {
        #[pin]
        io: IO,
        limit: Duration,
        // Armed while a write is pending: the moment the stall passes the limit. Allocated at
        // the first stall and reset after, so a fast stream costs no allocation per write.
        stalled: Option<Pin<Box<Sleep>>>,
        armed: bool,
    }
}

impl<IO> SendStall<IO> {
    pub fn new(io: IO, limit: Duration) -> SendStall<IO> {
        SendStall {
            io,
            limit,
            stalled: None,
            armed: false,
        }
    }
}

/// The write's outcome, the stall's clock started, kept or stopped by it.
fn watch<T>(
    polled: Poll<io::Result<T>>,
    limit: Duration,
    stalled: &mut Option<Pin<Box<Sleep>>>,
    armed: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<io::Result<T>> {
    if polled.is_ready() {
        *armed = false;
        return polled;
    }
    if !*armed {
        let deadline = Instant::now() + limit;
        match stalled {
            Some(sleep) => sleep.as_mut().reset(deadline),
            None => *stalled = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
        *armed = true;
    }
    let sleep = stalled.as_mut().expect("armed above");
    ready!(sleep.as_mut().poll(cx));
    Poll::Ready(Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("the client accepted no response bytes for {limit:?}"),
    )))
}

impl<IO: AsyncWrite> AsyncWrite for SendStall<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.project();
        let polled = this.io.poll_write(cx, buf);
        watch(polled, *this.limit, this.stalled, this.armed, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let polled = this.io.poll_write_vectored(cx, bufs);
        watch(polled, *this.limit, this.stalled, this.armed, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        let polled = this.io.poll_flush(cx);
        watch(polled, *this.limit, this.stalled, this.armed, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        let polled = this.io.poll_shutdown(cx);
        watch(polled, *this.limit, this.stalled, this.armed, cx)
    }
}

impl<IO: AsyncRead> AsyncRead for SendStall<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_read(cx, buf)
    }
}
