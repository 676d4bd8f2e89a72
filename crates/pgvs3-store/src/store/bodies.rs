//! Object bodies in the database: read by span (a slice of an inline body, or the chunk rows
//! of a chunked one, located part by part in a multipart object), and written chunk by chunk
//! while their digest is computed beside them.

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;

use super::chunks::{CHUNKS_PER_ROW, ChunkStream, Chunker, Segment};
use super::encryption::ObjectKey;
use super::md5_lanes::{Lost, Md5Stream};
use super::objects::{BodyObserver, BodyStream, NamespaceSql, ObjectHead, ReadOptions, StoredChecksum};
use super::{Store, StoreError, StoreResult};

/// The body SQL of one namespace: chunks read and written, parts located.
#[derive(Debug)]
pub(super) struct BodySql {
    pub(super) part_span: String,
    pub(super) part_segments: String,
    pub(super) read_segments: String,
    pub(super) copy_body: String,
    pub(super) next_body_id: String,
    pub(super) copy_chunks: String,
    pub(super) read_chunks: String,
}

impl BodySql {
    pub(super) fn new(ns: &str) -> BodySql {
        BodySql {
            part_span: format!(
                "SELECT start_offset, size, checksum FROM {ns}.parts WHERE owner_id = $1 AND part_number = $2"
            ),
            part_segments: format!(
                "SELECT body_id, size, start_offset FROM {ns}.parts
                  WHERE owner_id = $1 AND start_offset < $3 AND start_offset + size > $2 ORDER BY part_number"
            ),
            // One statement (one snapshot) for all parts. A function scan yields the arrays in
            // order and a nested loop runs the (ordered, not pulled-up) inner query per part, so
            // rows arrive part by part without a sort that would buffer a whole part. Each row
            // carries a part's chunks from `seq` on, CHUNKS_PER_ROW of them at most (why:
            // chunks.rs), read by an ordered index range scan.
            read_segments: format!(
                "SELECT s.body_id, g.seq,
                        ARRAY(SELECT c.data FROM {ns}.chunks c
                               WHERE c.body_id = s.body_id AND c.seq >= g.seq AND c.seq <= least(g.seq + {group} - 1, s.last_seq)
                               ORDER BY c.seq) AS data
                   FROM unnest($1::bigint[], $2::int[], $3::int[]) AS s(body_id, first_seq, last_seq)
                  CROSS JOIN LATERAL generate_series(s.first_seq, s.last_seq, {group}) AS g(seq)",
                group = CHUNKS_PER_ROW
            ),
            copy_body: format!(
                "INSERT INTO {ns}.chunks (body_id, seq, data) SELECT $2, seq, data FROM {ns}.chunks WHERE body_id = $1"
            ),
            next_body_id: format!("SELECT nextval('{ns}.body_ids') AS body_id"),
            copy_chunks: format!("COPY {ns}.chunks (body_id, seq, data) FROM STDIN (FORMAT binary)"),
            read_chunks: chunk_rows_statement(ns),
        }
    }
}

/// The statement reading chunks `$2..=$3` of body `$1` in namespace `ns`: rows of `(body_id,
/// seq, data)`, `data` the chunks from `seq` on, CHUNKS_PER_ROW of them at most, as
/// read_segments (also the direct side of the `gateway_vs_direct` bench).
pub fn chunk_rows_statement(ns: &str) -> String {
    format!(
        "SELECT $1::bigint AS body_id, g AS seq,
                ARRAY(SELECT c.data FROM {ns}.chunks c
                       WHERE c.body_id = $1 AND c.seq >= g AND c.seq <= least(g + {group} - 1, $3)
                       ORDER BY c.seq) AS data
           FROM generate_series($2::int, $3::int, {group}) AS g",
        group = CHUNKS_PER_ROW
    )
}

/// The body of a read of bytes `span`: a slice of an inline body, or the chunks of a chunked
/// one streamed by the connection (which the stream keeps until it ends); empty for a HEAD.
#[allow(clippy::too_many_arguments)]
pub(super) async fn stored_body(
    store: &Store,
    client: deadpool_postgres::Object,
    sql: &NamespaceSql,
    inline: Option<Bytes>,
    body_id: Option<i64>,
    size: u64,
    multipart: bool,
    span: (u64, u64),
    with_body: bool,
    key: Option<ObjectKey>,
) -> StoreResult<BodyStream> {
    Ok(match (with_body, inline, body_id) {
        (false, ..) => Box::pin(futures::stream::empty()),
        (true, Some(inline), _) => {
            let bytes = inline_span(&inline, span, key.as_ref());
            Box::pin(futures::stream::once(async move { Ok(bytes) }))
        }
        (true, None, Some(body_id)) if span.0 < span.1 => {
            let client = store.streaming(client).await?;
            let (segments, rows) = body_rows(&client, sql, body_id, size, multipart, span).await?;
            Box::pin(ChunkStream::new(Some(client), rows, segments).decrypting(key))
        }
        (true, None, _) => Box::pin(futures::stream::empty()),
    })
}

/// Bytes `span` of an inline body, decrypted first when it is encrypted.
pub(super) fn inline_span(inline: &[u8], span: (u64, u64), key: Option<&ObjectKey>) -> Bytes {
    match key {
        None => Bytes::copy_from_slice(&inline[span.0 as usize..span.1 as usize]),
        Some(key) => {
            let mut plain = inline.to_vec();
            key.apply_inline(&mut plain);
            Bytes::from(plain).slice(span.0 as usize..span.1 as usize)
        }
    }
}

/// Starts the statement that streams bytes `span` of a chunked body: a plain body, or the
/// manifest of a multipart object (one more round trip finds the parts holding the span).
pub(super) async fn body_rows(
    client: &deadpool_postgres::ClientWrapper,
    sql: &NamespaceSql,
    body_id: i64,
    size: u64,
    multipart: bool,
    span: (u64, u64),
) -> StoreResult<(Vec<Segment>, tokio_postgres::RowStream)> {
    type Params<'a> = [&'a (dyn tokio_postgres::types::ToSql + Sync); 3];
    if !multipart {
        let segment = Segment {
            body_id,
            size,
            start: span.0,
            end: span.1,
        };
        let statement = client.prepare_cached(&sql.bodies.read_chunks).await?;
        let params: Params = [&body_id, &segment.first_seq(), &segment.last_seq()];
        let rows = client.query_raw(&statement, params).await?;
        return Ok((vec![segment], rows));
    }
    let statement = client.prepare_cached(&sql.bodies.part_segments).await?;
    let (start, end) = (span.0 as i64, span.1 as i64);
    let segments: Vec<Segment> = client
        .query(&statement, &[&body_id, &start, &end])
        .await?
        .iter()
        .map(|row| {
            let size = row.get::<_, i64>("size") as u64;
            let offset = row.get::<_, i64>("start_offset") as u64;
            Segment {
                body_id: row.get("body_id"),
                size,
                start: span.0.max(offset) - offset,
                end: span.1.min(offset + size) - offset,
            }
        })
        .collect();
    let ids: Vec<i64> = segments.iter().map(|s| s.body_id).collect();
    let firsts: Vec<i32> = segments.iter().map(Segment::first_seq).collect();
    let lasts: Vec<i32> = segments.iter().map(Segment::last_seq).collect();
    let statement = client.prepare_cached(&sql.bodies.read_segments).await?;
    let params: Params = [&ids, &firsts, &lasts];
    let rows = client.query_raw(&statement, params).await?;
    Ok((segments, rows))
}

/// The head of a found object, after its preconditions, and the span `options` select, and
/// whether that is part of the object (a 206 answer). A read of one part of a multipart object
/// has the checksum of that part's bytes in its head, where there is one: a COMPOSITE object's
/// part has its own; a FULL_OBJECT checksum is that of a part only when it is the only one.
pub(super) async fn locate(
    client: &deadpool_postgres::Object,
    sql: &NamespaceSql,
    head: ObjectHead,
    body_id: Option<i64>,
    options: &ReadOptions,
) -> StoreResult<(ObjectHead, (u64, u64), bool)> {
    options.conditions.check(&head)?;
    let Some(part_number) = options.part_number else {
        let span = match options.range {
            Some(range) => range.resolve(head.size)?,
            None => (0, head.size),
        };
        return Ok((head, span, options.range.is_some()));
    };
    if options.range.is_some() {
        return Err(StoreError::InvalidArgument(
            "cannot specify both Range header and partNumber query parameter".into(),
        ));
    }
    if head.meta.parts.is_none() {
        return match part_number {
            1 => Ok((head.clone(), (0, head.size), false)),
            _ => Err(StoreError::InvalidPartNumber),
        };
    }
    // Boxed: only a read by part number of a multipart object looks its part up, and inline
    // this lookup would size every read's future (see `Store::get_object`).
    Box::pin(part_span(client, sql, head, body_id, part_number)).await
}

/// The span of part `part_number` of a multipart object's body, and its head with the part's
/// checksum (a composite one) or none (a whole-object one, unless the object is one part).
async fn part_span(
    client: &deadpool_postgres::Object,
    sql: &NamespaceSql,
    head: ObjectHead,
    body_id: Option<i64>,
    part_number: u32,
) -> StoreResult<(ObjectHead, (u64, u64), bool)> {
    let statement = client.prepare_cached(&sql.bodies.part_span).await?;
    let part = client
        .query_opt(&statement, &[&body_id, &(part_number.min(i32::MAX as u32) as i32)])
        .await?
        .ok_or(StoreError::InvalidPartNumber)?;
    let start = part.get::<_, i64>("start_offset") as u64;
    let end = start + part.get::<_, i64>("size") as u64;
    let mut head = head;
    head.meta.checksum = match head.meta.checksum.take() {
        Some(object) if object.composite => part
            .get::<_, Option<String>>("checksum")
            .map(|value| StoredChecksum { value, ..object }),
        whole => whole.filter(|_| head.meta.parts == Some(1)),
    };
    Ok((head, (start, end), true))
}

/// Pieces of a body queued for its [`BodyDigest`] at most.
const PIECES_IN_DIGEST: usize = 16;

/// Hashes a chunked body on a blocking thread while it is written: its MD5 (the ETag) and
/// whatever the observer checks. MD5 is serial (about 600 MB/s here, 41% of the gateway's CPU
/// on a 10 MiB PUT); on the request's task it ran between the COPY's writes, here it overlaps
/// them, and the thread hashes the pieces other uploads' threads have queued beside its own
/// (md5_lanes.rs). The queue is bounded, so a hash that falls behind slows the upload down.
pub(super) struct BodyDigest {
    pieces: tokio::sync::mpsc::Sender<Bytes>,
    hashed: tokio::task::JoinHandle<Hashed>,
}

/// What a body's thread answers at its end: the MD5 (unless another thread lost it) and the
/// observer that saw every piece.
type Hashed = (Result<[u8; 16], Lost>, Box<dyn BodyObserver>);

impl BodyDigest {
    pub(super) fn start(mut observer: Box<dyn BodyObserver>) -> BodyDigest {
        let (pieces, mut queued) = tokio::sync::mpsc::channel::<Bytes>(PIECES_IN_DIGEST);
        let hashed = tokio::task::spawn_blocking(move || {
            let md5 = Md5Stream::open();
            while let Some(piece) = queued.blocking_recv() {
                observer.update(&piece);
                md5.give(piece);
            }
            (md5.finish(), observer)
        });
        BodyDigest { pieces, hashed }
    }

    pub(super) async fn update(&self, piece: Bytes) -> StoreResult<()> {
        self.pieces
            .send(piece)
            .await
            .map_err(|_| StoreError::Body("the body's digest stopped".into()))
    }

    /// The body's MD5, and the observer's verdict on all of it.
    pub(super) async fn finish(self, size: u64) -> StoreResult<([u8; 16], Option<StoredChecksum>)> {
        drop(self.pieces);
        let (md5, observer) = self
            .hashed
            .await
            .map_err(|err| StoreError::Body(format!("the body's digest failed: {err}")))?;
        let md5 = md5.map_err(|Lost| StoreError::Body("the body's digest was lost".into()))?;
        Ok((md5, observer.finish(size, &md5)?))
    }
}

/// Streams a body into the chunks of a new body inside `tx`: `head` (bytes already read from
/// it), then the rest of `body`, all of it seen by `digest` when there is one. Returns the body
/// id and the total size.
pub(super) async fn write_chunks(
    tx: &tokio_postgres::Transaction<'_>,
    sql: &NamespaceSql,
    compress: bool,
    head: BytesMut,
    body: &mut BodyStream,
    digest: Option<&BodyDigest>,
    key: Option<&ObjectKey>,
) -> StoreResult<(i64, u64)> {
    let body_id: i64 = tx.query_one(&sql.bodies.next_body_id, &[]).await?.get("body_id");
    let sink = tx.copy_in(&sql.bodies.copy_chunks).await?;
    let writer = BinaryCopyInWriter::new(sink, &[Type::INT8, Type::INT4, Type::BYTEA]);
    futures::pin_mut!(writer);
    let mut chunker = Chunker::new(compress);
    let mut seq: i32 = 0;
    let mut size = head.len() as u64;
    chunker.push(&head);
    if let Some(digest) = digest
        && !head.is_empty()
    {
        digest.update(head.freeze()).await?;
    }
    let seal = |seq: i32, chunk: Bytes| match key {
        None => chunk,
        Some(key) => {
            let mut sealed = BytesMut::from(&chunk[..]);
            key.apply(body_id, i64::from(seq), &mut sealed);
            sealed.freeze()
        }
    };
    loop {
        while let Some(chunk) = chunker.next_full() {
            writer.as_mut().write(&[&body_id, &seq, &&seal(seq, chunk)[..]]).await?;
            seq += 1;
        }
        let Some(piece) = body.next().await else {
            break;
        };
        let piece = piece?;
        size += piece.len() as u64;
        chunker.push(&piece);
        if let Some(digest) = digest {
            digest.update(piece).await?;
        }
    }
    if let Some(chunk) = chunker.finish() {
        writer.as_mut().write(&[&body_id, &seq, &&seal(seq, chunk)[..]]).await?;
    }
    writer.finish().await?;
    Ok((body_id, size))
}

/// Reads `body` until more than `max` bytes are in (or it ends); returns them and whether the
/// body ended.
pub async fn read_prefix(body: &mut BodyStream, max: u64) -> StoreResult<(BytesMut, bool)> {
    let mut prefix = BytesMut::new();
    while prefix.len() as u64 <= max {
        match body.next().await {
            Some(piece) => prefix.extend_from_slice(&piece?),
            None => return Ok((prefix, true)),
        }
    }
    Ok((prefix, false))
}

pub fn check_length(declared: Option<u64>, received: u64) -> StoreResult<()> {
    match declared {
        Some(expected) if expected != received => Err(StoreError::IncompleteBody { expected, received }),
        _ => Ok(()),
    }
}
