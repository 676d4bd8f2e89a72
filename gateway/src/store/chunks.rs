//! Chunked bodies: splitting a request stream into 8,120-byte chunks for binary COPY, and
//! streaming them back in order, with per-chunk zstd where it pays.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures::Stream;
use tokio_postgres::RowStream;

use super::StoreError;

/// One raw chunk fills one heap page exactly (see migrations/0001_layout_v1.sql).
pub const CHUNK_SIZE: usize = 8120;

/// Chunks are compressed only when zstd saves at least this share of the bytes; less is not
/// worth the CPU on every read.
const MIN_SAVING_DIVISOR: usize = 8;
/// After this many chunks that did not compress, the body is treated as incompressible.
const PROBE_CHUNKS: u32 = 4;
const ZSTD_LEVEL: i32 = 1;

/// Logical (uncompressed) length of chunk `seq` of a body of `size` bytes.
pub fn chunk_len(size: u64, seq: i64) -> usize {
    let start = seq as u64 * CHUNK_SIZE as u64;
    (size.saturating_sub(start)).min(CHUNK_SIZE as u64) as usize
}

/// Cuts a stream of arbitrary pieces into chunks, compressing those that compress well.
/// A stored chunk shorter than its logical length is compressed: no flag column is needed,
/// which keeps a raw chunk row at exactly one page.
pub struct Chunker {
    pending: BytesMut,
    compress: bool,
    misses: u32,
}

impl Chunker {
    pub fn new(try_compression: bool) -> Chunker {
        Chunker {
            pending: BytesMut::with_capacity(CHUNK_SIZE * 2),
            compress: try_compression,
            misses: 0,
        }
    }

    pub fn push(&mut self, data: &[u8]) {
        self.pending.extend_from_slice(data);
    }

    /// The next full chunk, ready to store.
    pub fn next_full(&mut self) -> Option<Bytes> {
        if self.pending.len() < CHUNK_SIZE {
            return None;
        }
        let raw = self.pending.split_to(CHUNK_SIZE).freeze();
        Some(self.encode(raw))
    }

    /// The final, possibly short chunk.
    pub fn finish(&mut self) -> Option<Bytes> {
        if self.pending.is_empty() {
            return None;
        }
        let raw = self.pending.split().freeze();
        Some(self.encode(raw))
    }

    fn encode(&mut self, raw: Bytes) -> Bytes {
        if !self.compress {
            return raw;
        }
        match zstd::bulk::compress(&raw, ZSTD_LEVEL) {
            Ok(packed) if packed.len() < raw.len() - raw.len() / MIN_SAVING_DIVISOR => {
                self.misses = 0;
                Bytes::from(packed)
            }
            _ => {
                self.misses += 1;
                if self.misses >= PROBE_CHUNKS {
                    self.compress = false;
                }
                raw
            }
        }
    }
}

/// Whether a body of this content type is worth trying to compress at all.
pub fn worth_compressing(content_type: Option<&str>) -> bool {
    let Some(content_type) = content_type else {
        return true;
    };
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    !(essence.starts_with("image/") && essence != "image/svg+xml"
        || essence.starts_with("video/")
        || essence.starts_with("audio/")
        || matches!(
            essence.as_str(),
            "application/zip"
                | "application/gzip"
                | "application/x-gzip"
                | "application/zstd"
                | "application/x-bzip2"
                | "application/x-xz"
                | "application/x-7z-compressed"
                | "application/vnd.apache.parquet"
                | "application/x-parquet"
        ))
}

/// Turns stored chunks, arriving in order, back into the bytes of a span of one body.
pub struct ChunkDecoder {
    body_size: u64,
    next_seq: i64,
    skip: usize,
    remaining: u64,
}

impl ChunkDecoder {
    pub fn new(body_size: u64, start: u64, end: u64) -> ChunkDecoder {
        let first_seq = (start / CHUNK_SIZE as u64) as i64;
        ChunkDecoder {
            body_size,
            next_seq: first_seq,
            skip: (start - first_seq as u64 * CHUNK_SIZE as u64) as usize,
            remaining: end - start,
        }
    }

    /// Whether every byte of the span has been decoded.
    pub fn done(&self) -> bool {
        self.remaining == 0
    }

    pub fn decode(&mut self, seq: i64, stored: &[u8]) -> Result<Bytes, StoreError> {
        if seq != self.next_seq {
            return Err(StoreError::Corrupt(format!(
                "chunk {} missing (found {seq})",
                self.next_seq
            )));
        }
        self.next_seq += 1;
        let logical = chunk_len(self.body_size, seq);
        let mut data = if stored.len() == logical {
            Bytes::copy_from_slice(stored)
        } else {
            let raw = zstd::bulk::decompress(stored, CHUNK_SIZE)
                .map_err(|err| StoreError::Corrupt(format!("chunk {seq}: {err}")))?;
            if raw.len() != logical {
                return Err(StoreError::Corrupt(format!(
                    "chunk {seq} has {} bytes, expected {logical}",
                    raw.len()
                )));
            }
            Bytes::from(raw)
        };
        if self.skip > 0 {
            let _ = data.split_to(self.skip.min(data.len()));
            self.skip = 0;
        }
        data.truncate(self.remaining.min(data.len() as u64) as usize);
        self.remaining -= data.len() as u64;
        Ok(data)
    }

    /// The error for a body whose chunks ran out before the span was complete.
    pub fn truncated(&mut self) -> StoreError {
        self.remaining = 0;
        StoreError::Corrupt(format!("body ends before chunk {}", self.next_seq))
    }
}

/// Streams the chunks of one body (or of a byte range of it), holding its pooled connection
/// until the last byte so no other request queues behind the stream on that connection.
pub struct ChunkStream {
    client: Option<deadpool_postgres::Object>,
    rows: Pin<Box<RowStream>>,
    decoder: ChunkDecoder,
}

impl ChunkStream {
    pub fn new(
        client: deadpool_postgres::Object,
        rows: RowStream,
        body_size: u64,
        start: u64,
        end: u64,
    ) -> ChunkStream {
        ChunkStream {
            client: Some(client),
            rows: Box::pin(rows),
            decoder: ChunkDecoder::new(body_size, start, end),
        }
    }
}

impl Stream for ChunkStream {
    type Item = Result<Bytes, StoreError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.decoder.done() {
            self.client = None;
            return Poll::Ready(None);
        }
        match self.rows.as_mut().poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(row))) => {
                let seq: i32 = row.get(0);
                let item = self.decoder.decode(i64::from(seq), row.get(1));
                Poll::Ready(Some(item))
            }
            Poll::Ready(Some(Err(err))) => Poll::Ready(Some(Err(StoreError::from(err)))),
            Poll::Ready(None) => Poll::Ready(Some(Err(self.decoder.truncated()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_lengths_cover_the_body_exactly() {
        assert_eq!(chunk_len(8120, 0), 8120);
        assert_eq!(chunk_len(8121, 1), 1);
        assert_eq!(chunk_len(8121, 2), 0);
        assert_eq!(chunk_len(20_000, 2), 20_000 - 2 * 8120);
    }

    #[test]
    fn compressible_chunks_shrink_and_random_ones_stay_raw() {
        let mut chunker = Chunker::new(true);
        chunker.push(&vec![b'a'; CHUNK_SIZE + 10]);
        let packed = chunker.next_full().unwrap();
        assert!(packed.len() < CHUNK_SIZE / 2);
        assert_eq!(chunker.finish().unwrap().len(), 10, "a tiny tail does not compress");

        let mut chunker = Chunker::new(true);
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let noise: Vec<u8> = (0..CHUNK_SIZE * 6)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        chunker.push(&noise);
        let mut stored = Vec::new();
        while let Some(chunk) = chunker.next_full() {
            stored.push(chunk);
        }
        assert_eq!(stored.len(), 6);
        assert!(stored.iter().all(|chunk| chunk.len() == CHUNK_SIZE));
        assert!(!chunker.compress, "gives up after {PROBE_CHUNKS} misses");
    }

    #[test]
    fn compressed_media_types_are_skipped() {
        assert!(!worth_compressing(Some("image/jpeg")));
        assert!(!worth_compressing(Some("application/zip; charset=binary")));
        assert!(worth_compressing(Some("text/csv")));
        assert!(worth_compressing(None));
    }
}
