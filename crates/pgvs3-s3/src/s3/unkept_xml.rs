//! XML request bodies that name settings pgvs3 does not keep and s3s drops without a word: the
//! MinIO extensions of PutBucketVersioning (`ExcludedPrefixes`, `ExcludeFolders`), which s3s
//! reads as AWS's document and skips. A client that sent them would be told its setting was
//! kept; instead the body is watched as s3s reads it, and the request fails with 501
//! NotImplemented when one of them goes by, before anything is applied.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Request;
use http_body::{Body, Frame, SizeHint};

use crate::request_body::{BodyError, RequestBody};

/// The elements refused, and the answer's message.
const VERSIONING: &[(&[u8], &str)] = &[
    (
        b"<ExcludedPrefixes",
        "ExcludedPrefixes (a MinIO extension) is not implemented: every object is versioned",
    ),
    (
        b"<ExcludeFolders",
        "ExcludeFolders (a MinIO extension) is not implemented: every object is versioned",
    ),
];

/// The longest element name, less one: what is kept of a frame to find a name split between
/// two frames.
const CARRY: usize = 17 - 1;

/// What a watched body found: the message of the refusal, once one is found.
#[derive(Clone, Default)]
pub struct Unkept(Arc<OnceLock<&'static str>>);

impl Unkept {
    pub fn refused(&self) -> Option<&'static str> {
        self.0.get().copied()
    }
}

/// Whether the request's body is one to watch: a PutBucketVersioning (PUT `?versioning`).
pub fn watched<B>(request: &Request<B>) -> bool {
    request.method() == http::Method::PUT
        && request
            .uri()
            .query()
            .is_some_and(|query| form_urlencoded::parse(query.as_bytes()).any(|(name, _)| name == "versioning"))
}

/// The request with its body watched, and what the watch finds.
pub fn watch(request: Request<RequestBody>) -> (Request<s3s::Body>, Unkept) {
    let unkept = Unkept::default();
    let (parts, inner) = request.into_parts();
    let body = Watched {
        inner,
        carry: Vec::new(),
        unkept: unkept.clone(),
    };
    (Request::from_parts(parts, s3s::Body::http_body(body)), unkept)
}

struct Watched {
    inner: RequestBody,
    /// The end of the previous frame, for a name split between frames.
    carry: Vec<u8>,
    unkept: Unkept,
}

impl Body for Watched {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &frame
            && let Some(data) = frame.data_ref()
        {
            this.carry.extend_from_slice(data);
            let found = VERSIONING
                .iter()
                .find(|(name, _)| this.carry.windows(name.len()).any(|window| window == *name));
            if let Some((_, message)) = found {
                let _ = this.unkept.0.set(message);
                return Poll::Ready(Some(Err(BodyError::Refused)));
            }
            let keep = this.carry.len().saturating_sub(CARRY);
            this.carry.drain(..keep);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
