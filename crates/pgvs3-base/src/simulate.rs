//! A constrained S3 endpoint for benchmarks: `pgvs3 serve --simulate-latency 20ms
//! --simulate-bandwidth 52428800 --simulate-rps 100` answers like a remote object store (one-way
//! latency each way, per-request bandwidth, a request rate limit), so the cache tier is measured
//! against a realistic origin rather than a loopback one.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::request_body::RequestBody;
use http::{Request, Response};
use http_body::{Body, Frame};
use hyper::service::Service;
use tokio::time::{Instant, Sleep};

#[derive(Debug, Clone, Copy, Default)]
pub struct Constraints {
    /// Added once before a request is handled and once before its answer leaves.
    pub latency: Duration,
    /// Bytes per second for each request's upload and each answer's body; 0: unlimited.
    pub bandwidth: u64,
    /// Requests started per second; 0: unlimited.
    pub rps: u32,
}

impl Constraints {
    pub fn any(&self) -> bool {
        !self.latency.is_zero() || self.bandwidth > 0 || self.rps > 0
    }

    fn transfer_time(&self, bytes: u64) -> Duration {
        if self.bandwidth == 0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(bytes as f64 / self.bandwidth as f64)
    }
}

/// Wraps an HTTP service so it answers under `Constraints`.
#[derive(Clone)]
pub struct Constrained<S> {
    inner: S,
    constraints: Constraints,
    /// When the next request may start (the rate limit).
    next_start: Arc<Mutex<Instant>>,
}

impl<S> Constrained<S> {
    pub fn new(inner: S, constraints: Constraints) -> Constrained<S> {
        Constrained {
            inner,
            constraints,
            next_start: Arc::new(Mutex::new(Instant::now())),
        }
    }

    /// Reserves the next start slot of the rate limit.
    fn start_slot(&self) -> Instant {
        let now = Instant::now();
        if self.constraints.rps == 0 {
            return now;
        }
        let mut next = self.next_start.lock().expect("rate lock");
        let slot = (*next).max(now);
        *next = slot + Duration::from_secs_f64(1.0 / f64::from(self.constraints.rps));
        slot
    }
}

impl<S, B> Service<Request<RequestBody>> for Constrained<S>
where
    S: Service<Request<RequestBody>, Response = Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Body + Send + Unpin + 'static,
{
    type Response = Response<Throttled<B>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<RequestBody>) -> Self::Future {
        let slot = self.start_slot();
        let constraints = self.constraints;
        let inner = self.inner.clone();
        Box::pin(async move {
            tokio::time::sleep_until(slot + constraints.latency).await;
            let uploaded = request
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|value| value.to_str().ok()?.parse().ok())
                .unwrap_or(0);
            let started = Instant::now();
            let response = inner.call(request).await?;
            // The body could not have arrived faster than the link carries it.
            tokio::time::sleep_until(started + constraints.transfer_time(uploaded)).await;
            tokio::time::sleep(constraints.latency).await;
            Ok(response.map(|body| Throttled::new(body, constraints)))
        })
    }
}

/// A response body paced to the bandwidth.
pub struct Throttled<B> {
    inner: B,
    constraints: Constraints,
    started: Option<Instant>,
    sent: u64,
    held: Option<Frame<bytes::Bytes>>,
    delay: Option<Pin<Box<Sleep>>>,
}

impl<B> Throttled<B> {
    fn new(inner: B, constraints: Constraints) -> Throttled<B> {
        Throttled {
            inner,
            constraints,
            started: None,
            sent: 0,
            held: None,
            delay: None,
        }
    }
}

impl<B> Body for Throttled<B>
where
    B: Body<Data = bytes::Bytes> + Unpin,
{
    type Data = bytes::Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if let Some(delay) = this.delay.as_mut() {
            if delay.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.delay = None;
            return Poll::Ready(this.held.take().map(Ok));
        }
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        let Some(data) = frame.data_ref() else {
            return Poll::Ready(Some(Ok(frame)));
        };
        if this.constraints.bandwidth == 0 {
            return Poll::Ready(Some(Ok(frame)));
        }
        let started = *this.started.get_or_insert_with(Instant::now);
        this.sent += data.len() as u64;
        let due = started + this.constraints.transfer_time(this.sent);
        if due <= Instant::now() {
            return Poll::Ready(Some(Ok(frame)));
        }
        let mut delay = Box::pin(tokio::time::sleep_until(due));
        if delay.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Ok(frame)));
        }
        this.held = Some(frame);
        this.delay = Some(delay);
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_time_follows_the_bandwidth() {
        let constraints = Constraints {
            bandwidth: 50 << 20,
            ..Constraints::default()
        };
        assert_eq!(constraints.transfer_time(100 << 20), Duration::from_secs(2));
        assert_eq!(Constraints::default().transfer_time(1 << 30), Duration::ZERO);
        assert!(!Constraints::default().any());
    }
}
