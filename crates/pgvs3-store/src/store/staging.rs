//! Large bodies from clients, written so that a client sending slowly holds no database
//! connection: up to [`BATCH_BYTES`] of a body are read ahead in memory, and only a full batch
//! (or the end of the body) takes a connection, for as long as writing it takes. While a batch
//! is written the body goes on being read, up to one batch more: the client keeps sending, and a
//! batch slow to write (a loaded database) does not stall its upload until a client's low-speed
//! limit gives up on it. A body that
//! fits one batch is written in the transaction that stores its row, as before. A longer one is
//! written batch by batch, each batch committed on its own: nothing of it is visible until the
//! last batch commits with the row that names the body, and until then the body is *leased* —
//! a row in `retired_bodies` dated in the future — so the reaper takes the chunks of an upload
//! whose client left or whose gateway died (once the lease ran out), and never those of a live
//! one. Uploads take their connections within the stream share (`super::share`), so requests that
//! are not streams always find some of the pool free.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use deadpool_postgres::GenericClient;
use futures::StreamExt;
use tokio::time::Instant;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;

use super::bodies::BodyDigest;
use super::chunks::Chunker;
use super::encryption::ObjectKey;
use super::objects::{BodyStream, NamespaceSql};
use super::{Store, StoreError, StoreResult};

/// Bytes of a body read ahead in memory before they are written (per upload streaming).
pub const BATCH_BYTES: usize = 1 << 20;

/// How long a leased body is safe from the reaper without word from its upload.
const LEASE: Duration = Duration::from_secs(15 * 60);
/// An upload renews its lease this often, while it waits for its client too.
const RENEW_EVERY: Duration = Duration::from_secs(60);
/// The least a lease must have left when its body commits. The reaper takes a body only once
/// its lease has run out; with this margin the final transaction would have to run for minutes
/// for the reaper to start on a body it is committing.
const COMMIT_MARGIN: Duration = Duration::from_secs(5 * 60);

/// The lease statements of one namespace (quoted).
#[derive(Debug)]
pub(super) struct StagingSql {
    lease: String,
    renew: String,
    take: String,
    retire: String,
}

impl StagingSql {
    pub(super) fn new(ns: &str) -> StagingSql {
        StagingSql {
            lease: format!(
                "INSERT INTO {ns}.retired_bodies (body_id, retired_at)
                 SELECT nextval('{ns}.body_ids'), now() + make_interval(secs => $1) RETURNING body_id"
            ),
            // A lease that ran out is never renewed: the reaper may already be deleting its
            // chunks, so the upload fails instead of writing more or committing a body with holes.
            renew: format!(
                "UPDATE {ns}.retired_bodies SET retired_at = now() + make_interval(secs => $2)
                  WHERE body_id = $1 AND retired_at > now()"
            ),
            take: format!(
                "DELETE FROM {ns}.retired_bodies WHERE body_id = $1 AND retired_at > now() + make_interval(secs => $2)"
            ),
            retire: format!("UPDATE {ns}.retired_bodies SET retired_at = now() WHERE body_id = $1"),
        }
    }
}

impl Store {
    /// Reads `body` (after `head`, bytes already taken from it) into chunks, each piece also
    /// given to `digest`; every full batch but the last is written on a connection of its own.
    /// The rest is written by [`Staged::finish`], in the transaction that stores the row.
    pub(super) async fn stage_body<'a>(
        &'a self,
        sql: &'a NamespaceSql,
        compress: bool,
        head: BytesMut,
        body: &mut BodyStream,
        digest: Option<&BodyDigest>,
        key: Option<&'a ObjectKey>,
    ) -> StoreResult<Staged<'a>> {
        let mut staged = Staged {
            writer: Writer {
                store: self,
                sql,
                key,
                next_seq: 0,
                lease: None,
            },
            read: Read {
                chunker: Chunker::new(compress),
                ready: Vec::new(),
                ready_bytes: 0,
                size: 0,
            },
        };
        staged.read.take(head.freeze(), digest).await?;
        while let Some(piece) = staged.next_piece(body).await? {
            staged.read.take(piece, digest).await?;
            if staged.read.ready_bytes >= BATCH_BYTES && staged.flush_reading(body, digest).await? {
                break;
            }
        }
        Ok(staged)
    }
}

/// A body read to its end, all but its last batch written.
pub(super) struct Staged<'a> {
    writer: Writer<'a>,
    read: Read,
}

/// What writes a body's batches: apart from what reads the body, so that both go on at once.
struct Writer<'a> {
    store: &'a Store,
    sql: &'a NamespaceSql,
    key: Option<&'a ObjectKey>,
    next_seq: i32,
    /// Set once the first batch is written ahead of the row.
    lease: Option<Lease>,
}

/// What is read of a body and not written yet.
struct Read {
    chunker: Chunker,
    /// Full chunks (compressed where it paid, not yet sealed) waiting for their batch.
    ready: Vec<Bytes>,
    ready_bytes: usize,
    size: u64,
}

impl Read {
    async fn take(&mut self, piece: Bytes, digest: Option<&BodyDigest>) -> StoreResult<()> {
        if piece.is_empty() {
            return Ok(());
        }
        self.size += piece.len() as u64;
        self.chunker.push(&piece);
        while let Some(chunk) = self.chunker.next_full() {
            self.ready_bytes += chunk.len();
            self.ready.push(chunk);
        }
        if let Some(digest) = digest {
            digest.update(piece).await?;
        }
        Ok(())
    }

    /// The full chunks read so far, to be written as a batch.
    fn full_batch(&mut self) -> Vec<Bytes> {
        self.ready_bytes = 0;
        std::mem::take(&mut self.ready)
    }
}

impl Staged<'_> {
    pub(super) fn size(&self) -> u64 {
        self.read.size
    }

    /// Writes the full batch read so far while the body's next pieces are read, until the
    /// batch is written (or one more is read, which then waits for it); answers whether the
    /// body ended meanwhile. A piece the body had not given yet when the batch was written is
    /// left to the next read (`next` takes nothing from a stream when dropped unfinished).
    async fn flush_reading(&mut self, body: &mut BodyStream, digest: Option<&BodyDigest>) -> StoreResult<bool> {
        let batch = self.read.full_batch();
        let Staged { writer, read } = self;
        let written = writer.flush(batch);
        futures::pin_mut!(written);
        loop {
            if read.ready_bytes >= BATCH_BYTES {
                written.await?;
                return Ok(false);
            }
            tokio::select! {
                biased;
                done = &mut written => {
                    done?;
                    return Ok(false);
                }
                piece = body.next() => match piece.transpose()? {
                    Some(piece) => read.take(piece, digest).await?,
                    None => {
                        written.await?;
                        return Ok(true);
                    }
                },
            }
        }
    }

    /// The body's next piece; while it waits, a lease is renewed when due.
    async fn next_piece(&mut self, body: &mut BodyStream) -> StoreResult<Option<Bytes>> {
        loop {
            let Some(lease) = &mut self.writer.lease else {
                return body.next().await.transpose();
            };
            match tokio::time::timeout_at(lease.renew_due(), body.next()).await {
                Ok(piece) => return piece.transpose(),
                Err(_) => {
                    // A lease not renewed now (no connection, a database error) is renewed with
                    // the next batch; one that ran out fails the upload.
                    let renewed = match self.writer.store.stream_client().await {
                        Ok(client) => lease.renew(&*client).await,
                        Err(err) => Err(err),
                    };
                    match renewed {
                        Ok(true) => {}
                        Ok(false) => return Err(lease_ran_out()),
                        Err(err) => tracing::warn!(error = %err, "renewing an upload's lease failed"),
                    }
                    lease.renewed = Instant::now();
                }
            }
        }
    }

    /// Writes the rest of the body inside `tx` (the transaction that stores the row naming it)
    /// and takes it out of its lease; returns the body id. [`Staged::committed`] once `tx` has
    /// committed.
    pub(super) async fn finish(&mut self, tx: &tokio_postgres::Transaction<'_>) -> StoreResult<i64> {
        if let Some(chunk) = self.read.chunker.finish() {
            self.read.ready.push(chunk);
        }
        let writer = &mut self.writer;
        let body_id = match &writer.lease {
            Some(lease) => {
                let taken = tx
                    .execute(
                        &writer.sql.staging.take,
                        &[&lease.body_id, &COMMIT_MARGIN.as_secs_f64()],
                    )
                    .await?;
                if taken != 1 {
                    return Err(lease_ran_out());
                }
                lease.body_id
            }
            None => tx.query_one(&writer.sql.bodies.next_body_id, &[]).await?.get("body_id"),
        };
        let rest = self.read.full_batch();
        writer.write(tx, body_id, rest).await?;
        Ok(body_id)
    }

    /// The body's row has committed: its chunks are no longer the lease's.
    pub(super) fn committed(mut self) {
        if let Some(lease) = &mut self.writer.lease {
            lease.done = true;
        }
    }
}

impl Writer<'_> {
    /// Writes `batch`, in a transaction of its own, under the body's lease.
    async fn flush(&mut self, batch: Vec<Bytes>) -> StoreResult<()> {
        let mut client = self.store.stream_client().await?;
        let tx = client.transaction().await?;
        // A batch's commit acknowledges nothing, so it does not wait for its WAL to reach the
        // disk: the upload's last transaction commits synchronously, and that flush takes the
        // WAL up to its commit record, past every batch written before it. A crash before it
        // loses batches and their lease together (a commit is atomic either way), as it would
        // lose an upload still streaming. Each batch waited for an fsync of its megabyte before.
        tx.batch_execute("SET LOCAL synchronous_commit = off").await?;
        // Each batch renews the lease in its own transaction: chunks are only ever written
        // under a lease that has not run out, so none can outlive the reaper's pass unseen.
        let lease = match &mut self.lease {
            Some(lease) => {
                if !lease.renew(&tx).await? {
                    return Err(lease_ran_out());
                }
                lease
            }
            None => {
                // In the batch's transaction: the chunks are never there without their lease.
                let body_id: i64 = tx
                    .query_one(&self.sql.staging.lease, &[&LEASE.as_secs_f64()])
                    .await?
                    .get("body_id");
                self.lease.insert(Lease {
                    store: self.store.clone(),
                    retire: self.sql.staging.retire.clone(),
                    renew: self.sql.staging.renew.clone(),
                    body_id,
                    renewed: Instant::now(),
                    done: false,
                })
            }
        };
        let body_id = lease.body_id;
        self.write(&tx, body_id, batch).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Writes `chunks` of body `body_id` in `tx`, numbered on from the last written.
    async fn write(
        &mut self,
        tx: &tokio_postgres::Transaction<'_>,
        body_id: i64,
        chunks: Vec<Bytes>,
    ) -> StoreResult<()> {
        if chunks.is_empty() {
            return Ok(());
        }
        let sink = tx.copy_in(&self.sql.bodies.copy_chunks).await?;
        let writer = BinaryCopyInWriter::new(sink, &[Type::INT8, Type::INT4, Type::BYTEA]);
        futures::pin_mut!(writer);
        for chunk in chunks {
            let seq = self.next_seq;
            let chunk = match self.key {
                None => chunk,
                Some(key) => {
                    let mut sealed = BytesMut::from(&chunk[..]);
                    key.apply(body_id, i64::from(seq), &mut sealed);
                    sealed.freeze()
                }
            };
            writer.as_mut().write(&[&body_id, &seq, &&chunk[..]]).await?;
            self.next_seq += 1;
        }
        writer.finish().await?;
        Ok(())
    }
}

fn lease_ran_out() -> StoreError {
    StoreError::Unavailable("the upload's lease on its body ran out (the database was unreachable too long)".into())
}

/// A body written ahead of its row: kept from the reaper while the upload lives, handed to it
/// at once when the upload fails or is dropped.
struct Lease {
    store: Store,
    renew: String,
    retire: String,
    body_id: i64,
    renewed: Instant,
    done: bool,
}

impl Lease {
    fn renew_due(&self) -> Instant {
        self.renewed + RENEW_EVERY
    }

    /// Extends the lease; false when it had already run out.
    async fn renew(&mut self, client: &impl GenericClient) -> StoreResult<bool> {
        let renewed = client
            .execute(&self.renew, &[&self.body_id, &LEASE.as_secs_f64()])
            .await?;
        self.renewed = Instant::now();
        Ok(renewed == 1)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // The upload failed, or its request was dropped (client gone): its chunks go to the
        // reaper now rather than when the lease runs out.
        let (store, retire, body_id) = (self.store.clone(), std::mem::take(&mut self.retire), self.body_id);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Ok(client) = store.client().await {
                    let _ = client.execute(&retire, &[&body_id]).await;
                }
            });
        }
    }
}
