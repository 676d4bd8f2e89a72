//! A bound on the chunks of an `aws-chunked` upload (`STREAMING-*` payloads), checked as the bytes
//! pass on their way to s3s.
//!
//! s3s reads each chunk whole into memory before it checks the chunk's signature, and a chunk's
//! size line is a hex u32: one request that says `ffffffff` makes it hold up to 4 GiB, whoever
//! sent it (any key that may write somewhere). SDKs send chunks of 64 KiB to 1 MiB, so a chunk
//! larger than [`MAX_CHUNK`] is refused as soon as its size line arrives, before its data is
//! read; a size line longer than [`MAX_SIZE_LINE`] (the size, its signature or extensions) is
//! refused too. Nothing else of the framing is judged here: s3s parses it and checks the
//! signatures; the bytes go on unchanged.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// The largest chunk an upload may send: 16 times the largest an SDK sends by default.
pub const MAX_CHUNK: u64 = 16 << 20;
/// The longest size line (hex size, `;chunk-signature=` and 64 hex digits, CRLF) with room for
/// extensions.
const MAX_SIZE_LINE: usize = 4096;

/// Whether a request's body is `aws-chunked` framing.
pub fn is_chunked(headers: &http::HeaderMap) -> bool {
    headers
        .get("x-amz-content-sha256")
        .is_some_and(|value| value.as_bytes().starts_with(b"STREAMING-"))
        || headers
            .get(http::header::CONTENT_ENCODING)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.split(',').any(|coding| coding.trim() == "aws-chunked"))
}

/// Where the scan is in the framing.
enum State {
    /// Reading a size line; the bytes of it so far (at most [`MAX_SIZE_LINE`]).
    SizeLine(Vec<u8>),
    /// Inside a chunk's data and the CRLF after it: bytes left to pass.
    Data(u64),
    /// Past the last (zero-length) chunk: trailers, which s3s bounds.
    Done,
}

/// A chunk larger than [`MAX_CHUNK`], or a size line that is not one.
#[derive(Debug)]
pub struct ChunkRefused(String);

impl fmt::Display for ChunkRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ChunkRefused {}

/// The scan of an `aws-chunked` body's size lines, fed its bytes in order.
struct Framing {
    state: State,
}

impl Framing {
    fn new() -> Framing {
        Framing {
            state: State::SizeLine(Vec::new()),
        }
    }

    /// Takes the next bytes of the body.
    fn feed(&mut self, mut bytes: &[u8]) -> Result<(), ChunkRefused> {
        while !bytes.is_empty() {
            match &mut self.state {
                State::Done => return Ok(()),
                State::Data(left) => {
                    let passed = (*left).min(bytes.len() as u64);
                    *left -= passed;
                    bytes = &bytes[passed as usize..];
                    if *left == 0 {
                        self.state = State::SizeLine(Vec::new());
                    }
                }
                State::SizeLine(line) => {
                    let end = bytes.iter().position(|&b| b == b'\n');
                    let take = end.map_or(bytes.len(), |at| at + 1);
                    if line.len() + take > MAX_SIZE_LINE {
                        return Err(ChunkRefused(format!(
                            "an aws-chunked size line is longer than {MAX_SIZE_LINE} bytes"
                        )));
                    }
                    line.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if end.is_some() {
                        let size = chunk_size(line)?;
                        self.state = match size {
                            0 => State::Done,
                            // The data, then its CRLF.
                            size => State::Data(size + 2),
                        };
                    }
                }
            }
        }
        Ok(())
    }
}

/// The size a size line (`<hex>[;ext...]\r\n`) declares, within [`MAX_CHUNK`].
fn chunk_size(line: &[u8]) -> Result<u64, ChunkRefused> {
    let digits = line
        .split(|&b| b == b';' || b == b'\r' || b == b'\n')
        .next()
        .unwrap_or_default();
    let malformed = || ChunkRefused("an aws-chunked size line is not a hex size".to_owned());
    if digits.is_empty() || digits.len() > 16 {
        return Err(malformed());
    }
    let size = std::str::from_utf8(digits)
        .ok()
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .ok_or_else(malformed)?;
    if size > MAX_CHUNK {
        return Err(ChunkRefused(format!(
            "an aws-chunked chunk of {size} bytes is larger than the {MAX_CHUNK} bytes one may hold"
        )));
    }
    Ok(size)
}

/// A request body whose `aws-chunked` framing is scanned as it passes (see the module's comment).
pub struct ChunkGuard<B> {
    inner: B,
    framing: Framing,
    failed: bool,
}

impl<B> ChunkGuard<B> {
    pub fn new(inner: B) -> ChunkGuard<B> {
        ChunkGuard {
            inner,
            framing: Framing::new(),
            failed: false,
        }
    }
}

impl<B> Body for ChunkGuard<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Err(refused) = this.framing.feed(data)
                {
                    this.failed = true;
                    return Poll::Ready(Some(Err(Box::new(refused))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => Poll::Ready(Some(Err(err.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(parts: &[&[u8]]) -> Result<(), String> {
        let mut framing = Framing::new();
        for part in parts {
            framing.feed(part).map_err(|refused| refused.to_string())?;
        }
        Ok(())
    }

    #[test]
    fn sdk_framing_passes_in_any_split() {
        let signature = "a".repeat(64);
        let body = format!(
            "10000;chunk-signature={signature}\r\n{}\r\n4;chunk-signature={signature}\r\nabcd\r\n0;chunk-signature={signature}\r\n\r\n",
            "x".repeat(0x10000)
        );
        let bytes = body.as_bytes();
        assert_eq!(scan(&[bytes]), Ok(()));
        for split in [1, 7, 70, 0x10000 + 80] {
            let (head, tail) = bytes.split_at(split);
            assert_eq!(scan(&[head, tail]), Ok(()), "split at {split}");
        }
        let trailer = format!(
            "{:x}\r\n{}\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n",
            MAX_CHUNK,
            "y".repeat(MAX_CHUNK as usize)
        );
        assert_eq!(scan(&[trailer.as_bytes()]), Ok(()), "a chunk of the largest size");
    }

    #[test]
    fn a_huge_or_garbled_size_line_is_refused_before_its_data() {
        let refused = scan(&[b"ffffffff;chunk-signature=00\r\n"]).unwrap_err();
        assert!(refused.contains("larger than"), "{refused}");
        let later = scan(&[b"4\r\nabcd\r\n", b"1000001\r\n"]).unwrap_err();
        assert!(later.contains("larger than"), "{later}");
        assert!(scan(&[b"zz\r\n"]).unwrap_err().contains("not a hex size"));
        assert!(scan(&[b"\r\n"]).unwrap_err().contains("not a hex size"));
        let endless = vec![b'1'; MAX_SIZE_LINE + 1];
        assert!(scan(&[&endless]).unwrap_err().contains("longer than"));
    }

    #[test]
    fn only_chunked_uploads_are_scanned() {
        let mut headers = http::HeaderMap::new();
        assert!(!is_chunked(&headers));
        headers.insert("x-amz-content-sha256", "UNSIGNED-PAYLOAD".parse().unwrap());
        assert!(!is_chunked(&headers));
        headers.insert(
            "x-amz-content-sha256",
            "STREAMING-UNSIGNED-PAYLOAD-TRAILER".parse().unwrap(),
        );
        assert!(is_chunked(&headers));
        let mut encoded = http::HeaderMap::new();
        encoded.insert(http::header::CONTENT_ENCODING, "gzip, aws-chunked".parse().unwrap());
        assert!(is_chunked(&encoded));
    }
}
