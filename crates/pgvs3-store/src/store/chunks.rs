//! Chunked bodies: splitting a request stream into 8,120-byte chunks for binary COPY, and
//! streaming them back in order, with per-chunk zstd where it pays.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use futures::Stream;
use tokio_postgres::RowStream;

use super::StoreError;
use super::encryption::ObjectKey;
use super::share::StreamClient;

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

/// The bytes `start..end` of one body of `size` bytes: a whole object's body, or one part of
/// a multipart object.
#[derive(Debug, Clone, Copy)]
pub struct Segment {
    pub body_id: i64,
    pub size: u64,
    pub start: u64,
    pub end: u64,
}

impl Segment {
    pub fn first_seq(&self) -> i32 {
        (self.start / CHUNK_SIZE as u64) as i32
    }

    pub fn last_seq(&self) -> i32 {
        ((self.end - 1) / CHUNK_SIZE as u64) as i32
    }
}

/// Streams the chunks of a run of segments (one per body, in order) from one statement,
/// holding its pooled connection (and its place in the stream share) until the last byte so no
/// other request queues behind the stream on that connection.
pub struct ChunkStream {
    client: Option<StreamClient>,
    rows: Pin<Box<RowStream>>,
    segments: VecDeque<Segment>,
    /// The body of the segment being read (its chunks' counter blocks name it).
    body_id: i64,
    body_size: u64,
    next_seq: i64,
    skip: usize,
    remaining: u64,
    /// The object's key when its body is encrypted.
    key: Option<ObjectKey>,
}

impl ChunkStream {
    /// `rows` yields `(body_id, seq, data)` for the chunks of `segments`, segment after segment:
    /// `data` an array of up to [`CHUNKS_PER_ROW`] chunks, the first of them chunk `seq`.
    /// `client` is the connection `rows` come from, kept checked out until the stream ends
    /// (`None` when the caller holds it).
    pub fn new(client: Option<StreamClient>, rows: RowStream, segments: Vec<Segment>) -> ChunkStream {
        let mut stream = ChunkStream {
            client,
            rows: Box::pin(rows),
            segments: segments.into(),
            body_id: 0,
            body_size: 0,
            next_seq: 0,
            skip: 0,
            remaining: 0,
            key: None,
        };
        stream.next_segment();
        stream
    }

    /// The stream of an encrypted body, decrypted with its object's key.
    pub fn decrypting(mut self, key: Option<ObjectKey>) -> ChunkStream {
        self.key = key;
        self
    }

    /// Moves on to the next non-empty segment; false when none is left.
    fn next_segment(&mut self) -> bool {
        while let Some(segment) = self.segments.pop_front() {
            if segment.start == segment.end {
                continue;
            }
            let first_seq = segment.first_seq() as i64;
            self.body_id = segment.body_id;
            self.body_size = segment.size;
            self.next_seq = first_seq;
            self.skip = (segment.start - first_seq as u64 * CHUNK_SIZE as u64) as usize;
            self.remaining = segment.end - segment.start;
            return true;
        }
        false
    }

    /// Ends the stream with `err`: nothing more is read after a failure.
    fn fail(&mut self, err: StoreError) -> Poll<Option<Result<Bytes, StoreError>>> {
        self.remaining = 0;
        self.segments.clear();
        Poll::Ready(Some(Err(err)))
    }

    /// Appends the wanted part of chunk `seq` of body `body_id` to `frame`. A chunk of another
    /// body (the next part's, when this part's chunks are gone) is never taken for this one's.
    fn decode_into(&mut self, body_id: i64, seq: i64, stored: &[u8], frame: &mut BytesMut) -> Result<(), StoreError> {
        if body_id != self.body_id || seq != self.next_seq {
            return Err(StoreError::Corrupt(format!(
                "chunk {} of body {} missing (found chunk {seq} of body {body_id})",
                self.next_seq, self.body_id
            )));
        }
        self.next_seq += 1;
        let logical = chunk_len(self.body_size, seq);
        let decrypted;
        let stored = match &self.key {
            None => stored,
            Some(key) => {
                decrypted = {
                    let mut plain = stored.to_vec();
                    key.apply(self.body_id, seq, &mut plain);
                    plain
                };
                &decrypted[..]
            }
        };
        let unpacked;
        let data = if stored.len() == logical {
            stored
        } else {
            unpacked = zstd::bulk::decompress(stored, CHUNK_SIZE)
                .map_err(|err| StoreError::Corrupt(format!("chunk {seq}: {err}")))?;
            if unpacked.len() != logical {
                return Err(StoreError::Corrupt(format!(
                    "chunk {seq} has {} bytes, expected {logical}",
                    unpacked.len()
                )));
            }
            &unpacked[..]
        };
        let skip = std::mem::take(&mut self.skip).min(data.len());
        let take = (self.remaining.min((data.len() - skip) as u64)) as usize;
        frame.extend_from_slice(&data[skip..skip + take]);
        self.remaining -= take as u64;
        Ok(())
    }
}

/// Chunks a read statement returns per row, as one array: about 256 KiB a row, which the
/// stream hands on as one frame. PostgreSQL 15 sends a row in 8 KiB writes whatever its size,
/// but with a chunk per row each of them woke the connection's task, handed a row across to the
/// request's task and made a write to the client, which cost the gateway more than the bytes
/// themselves (an 8 MiB GET: ~880 reads, ~430 writes and ~520 context switches). With a row of
/// 32 chunks the client gets one write per row and tokio-postgres's buffer grows to a row, so
/// its reads take what has arrived.
pub const CHUNKS_PER_ROW: usize = 32;

impl Stream for ChunkStream {
    type Item = Result<Bytes, StoreError>;

    /// The wanted bytes of the next row's chunks, as one frame.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if self.remaining == 0 && !self.next_segment() {
                self.client = None;
                return Poll::Ready(None);
            }
            let row = match ready!(self.rows.as_mut().poll_next(cx)) {
                Some(Ok(row)) => row,
                Some(Err(err)) => return self.fail(StoreError::from(err)),
                None => {
                    let missing = self.next_seq;
                    return self.fail(StoreError::Corrupt(format!("body ends before chunk {missing}")));
                }
            };
            let seq: i32 = row.get("seq");
            let body_id: i64 = row.get("body_id");
            let chunks: Vec<&[u8]> = match row.try_get("data") {
                Ok(chunks) => chunks,
                Err(err) => return self.fail(StoreError::Corrupt(format!("chunks from {seq}: {err}"))),
            };
            // Sized for the row's chunks as they are read back (decompressed).
            let mut frame = BytesMut::with_capacity((chunks.len() * CHUNK_SIZE).min(self.remaining as usize));
            // A chunk missing from the row shifts the ones after it: the next seq expected no
            // longer matches, and decode_into says which is missing.
            for (i, chunk) in chunks.into_iter().enumerate() {
                if let Err(err) = self.decode_into(body_id, i64::from(seq) + i as i64, chunk, &mut frame) {
                    return self.fail(err);
                }
            }
            if self.remaining == 0 && self.segments.is_empty() {
                // Back to the pool as soon as the last byte is read, not when the client is done.
                self.client = None;
            }
            if !frame.is_empty() {
                return Poll::Ready(Some(Ok(frame.freeze())));
            }
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
