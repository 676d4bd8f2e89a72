//! Large uploads written batch by batch while the next batch is read (issue 40 step 2): the
//! read-ahead is one batch and no more, a slow client's body is stored byte for byte whichever
//! of reading and writing finishes first, and an upload whose client dies while a batch is
//! being written leaves nothing visible and nothing leased. Driven through the store's bucket
//! API with bodies the test controls piece by piece (an HTTP client's bytes would be buffered
//! by the sockets, out of the test's sight).

use pgvs3_testkit as common;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use common::{ROOT_ACCESS_KEY, TestGateway, noise};
use futures::Stream;
use pgvs3_gateway::bucket::Buckets;
use pgvs3_gateway::cache::CacheTier;
use pgvs3_gateway::store::{
    Access, BodyStream, ObjectMeta, Principal, PutOutcome, RequestedEncryption, StoreError, StoreResult, StoredBytes,
    Upload, WriteCondition,
};

/// The store's batch (`BATCH_BYTES`) and chunk sizes.
const BATCH: usize = 1 << 20;
const CHUNK: usize = 8120;

/// The bucket API of the gateway's store, as the protocol fronts reach it.
fn buckets(gw: &TestGateway) -> Buckets {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        cache: pgvs3_store::args::CacheArgs,
    }
    let store = gw.gateway.store.clone();
    let metrics = pgvs3_gateway::metrics::Metrics::new();
    let buffers = pgvs3_gateway::admission::BufferBudget::new(1 << 30, &metrics);
    let settings = Cli::parse_from(["test"]).cache.settings().unwrap();
    Buckets::new(store.clone(), CacheTier::new(store, settings, &metrics, buffers))
}

/// Stores `body` as `key` of `bucket` (a root write).
async fn put(
    buckets: &Buckets,
    bucket: &str,
    key: &str,
    body: BodyStream,
    encryption: RequestedEncryption,
) -> StoreResult<PutOutcome> {
    let root = Principal {
        access_key: ROOT_ACCESS_KEY.into(),
        is_root: true,
        read_only: false,
    };
    let upload = Upload {
        meta: ObjectMeta::default(),
        body,
        declared_len: None,
        observer: Box::new(StoredBytes),
        encryption,
    };
    let handle = buckets.open(&root, bucket, Access::Write).await?;
    handle.put(key, upload, &WriteCondition::Always).await
}

async fn get(gw: &TestGateway, bucket: &str, key: &str) -> Vec<u8> {
    let got = gw.client.get_object().bucket(bucket).key(key).send().await.unwrap();
    got.body.collect().await.unwrap().into_bytes().to_vec()
}

/// A body that is always ready with its next piece, counts what was taken, and refuses to give
/// more than `limit` bytes while `held` is set.
struct Metered {
    body: Bytes,
    piece: usize,
    taken: Arc<AtomicUsize>,
    held: Arc<AtomicBool>,
    limit: usize,
}

impl Stream for Metered {
    type Item = Result<Bytes, StoreError>;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let at = this.taken.load(Ordering::SeqCst);
        if at == this.body.len() {
            return Poll::Ready(None);
        }
        if this.held.load(Ordering::SeqCst) && at >= this.limit {
            return Poll::Ready(Some(Err(StoreError::Body(format!(
                "{at} bytes read ahead of a batch that cannot be written yet"
            )))));
        }
        let end = (at + this.piece).min(this.body.len());
        this.taken.store(end, Ordering::SeqCst);
        Poll::Ready(Some(Ok(this.body.slice(at..end))))
    }
}

/// Leased chunks the database holds (committed batches of uploads not yet stored), and COPYs
/// waiting for a lock.
async fn leased_chunks(sql: &tokio_postgres::Client) -> (i64, i64) {
    let row = sql
        .query_one(
            "SELECT (SELECT count(*) FROM s3p.chunks c JOIN s3p.retired_bodies r USING (body_id)
                      WHERE r.retired_at > now()) AS leased,
                    (SELECT count(*) FROM pg_stat_activity
                      WHERE wait_event_type = 'Lock' AND query LIKE 'COPY%') AS waiting",
            &[],
        )
        .await
        .unwrap();
    (row.get("leased"), row.get("waiting"))
}

/// Transactions under way on the database, besides the caller's.
async fn writes_under_way(sql: &tokio_postgres::Client) -> i64 {
    sql.query_one(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
            AND state IN ('active', 'idle in transaction')",
        &[],
    )
    .await
    .unwrap()
    .get("count")
}

/// While a batch is written the next one is read, and no more: with the chunks table locked,
/// the first batch's COPY waits, the second batch is read meanwhile (one write at a time, no
/// overlap, would read nothing further), and the body is not asked for more than that second
/// batch (its last piece and the chunk left over each time included) until the first is
/// written. Then the upload completes with exactly its bytes.
#[tokio::test]
async fn an_upload_reads_one_batch_ahead_of_its_write_and_no_further() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("ahead").send().await.unwrap();
    const PIECE: usize = 64 << 10;
    let body = Bytes::from(noise(6 << 20, 21));
    let taken = Arc::new(AtomicUsize::new(0));
    let held = Arc::new(AtomicBool::new(true));
    let metered = Metered {
        body: body.clone(),
        piece: PIECE,
        taken: Arc::clone(&taken),
        held: Arc::clone(&held),
        limit: 2 * (BATCH + CHUNK + PIECE),
    };
    let lock = gw.sql().await;
    lock.batch_execute("BEGIN; LOCK TABLE s3p.chunks IN SHARE MODE").await.unwrap();
    let buckets = buckets(&gw);
    let upload = tokio::spawn(async move {
        put(&buckets, "ahead", "k", Box::pin(metered), RequestedEncryption::None).await
    });
    let sql = gw.sql().await;
    common::eventually(Duration::from_secs(30), "the first batch's COPY waits", || async {
        (leased_chunks(&sql).await.1 == 1).then_some(())
    })
    .await;
    common::eventually(Duration::from_secs(30), "the second batch read meanwhile", || async {
        (taken.load(Ordering::SeqCst) >= 2 * BATCH).then_some(())
    })
    .await;
    held.store(false, Ordering::SeqCst);
    lock.batch_execute("COMMIT").await.unwrap();
    let stored = upload.await.unwrap().expect("the upload never read past its bound");
    assert_eq!(stored.size, body.len() as u64);
    assert!(get(&gw, "ahead", "k").await == body, "stored byte for byte");
    assert_eq!(leased_chunks(&sql).await.0, 0, "nothing is left leased");
    gw.stop().await;
}

/// A slow client, sending odd-sized pieces: sometimes the batch being written commits before
/// the next piece comes (the lease is back with the reader while it waits), sometimes the next
/// batch is full before the write is done. Plain, compressed at first (a run of zeros) and
/// encrypted (SSE-S3), the body is stored byte for byte.
#[tokio::test]
async fn a_slow_clients_large_upload_is_stored_byte_for_byte() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("slow").send().await.unwrap();
    let sql = gw.sql().await;
    let mut body = vec![0u8; 1536 << 10];
    body.extend(noise((4 << 20) + 12_345, 22));
    let body = Bytes::from(body);
    let buckets = buckets(&gw);
    for (key, encryption) in [("plain", RequestedEncryption::None), ("sealed", RequestedEncryption::S3)] {
        let (pieces, mut queued) = tokio::sync::mpsc::channel::<Bytes>(1);
        let stream: BodyStream = Box::pin(futures::stream::poll_fn(move |cx| {
            queued.poll_recv(cx).map(|piece| piece.map(Ok))
        }));
        let buckets = buckets.clone();
        let upload = tokio::spawn(async move { put(&buckets, "slow", key, stream, encryption).await });
        let sizes = [1, CHUNK - 1, CHUNK + 1, 100_003, 65_536, 333_333, 7];
        let mut at = 0;
        for (n, size) in sizes.iter().cycle().enumerate() {
            if at == body.len() {
                break;
            }
            let end = (at + size).min(body.len());
            pieces.send(body.slice(at..end)).await.unwrap();
            at = end;
            // Now and then the client waits until no batch is being written.
            if n % 5 == 4 {
                common::eventually(Duration::from_secs(30), "no write under way", || async {
                    (writes_under_way(&sql).await == 0).then_some(())
                })
                .await;
            }
        }
        drop(pieces);
        let stored = upload.await.unwrap().unwrap();
        assert_eq!(stored.size, body.len() as u64, "{key}");
        assert!(get(&gw, "slow", key).await == body, "{key}: stored byte for byte");
    }
    assert_eq!(leased_chunks(&sql).await.0, 0, "nothing is left leased");
    gw.stop().await;
}

/// A client that dies while a batch is being written (its COPY waits on a lock) and the next
/// is read: the upload fails, its write is abandoned, nothing of it is visible, and nothing of
/// it stays leased or in the chunks once the reaper has run.
#[tokio::test]
async fn a_client_dying_while_a_batch_is_written_leaves_nothing() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("dies").send().await.unwrap();
    let sql = gw.sql().await;
    // First a committed batch, then the client dies while the second is being written.
    let body = Bytes::from(noise(4 << 20, 23));
    let (pieces, mut queued) = tokio::sync::mpsc::channel::<Result<Bytes, StoreError>>(1);
    let stream: BodyStream = Box::pin(futures::stream::poll_fn(move |cx| queued.poll_recv(cx)));
    let buckets = buckets(&gw);
    let upload = tokio::spawn(async move { put(&buckets, "dies", "k", stream, RequestedEncryption::None).await });
    let first_batch = BATCH + 64 * CHUNK;
    pieces.send(Ok(body.slice(..first_batch))).await.unwrap();
    common::eventually(Duration::from_secs(30), "the first batch committed", || async {
        (leased_chunks(&sql).await.0 > 0).then_some(())
    })
    .await;
    let lock = gw.sql().await;
    lock.batch_execute("BEGIN; LOCK TABLE s3p.chunks IN SHARE MODE").await.unwrap();
    pieces.send(Ok(body.slice(first_batch..2 * first_batch))).await.unwrap();
    common::eventually(Duration::from_secs(30), "the second batch's COPY waits", || async {
        (leased_chunks(&sql).await.1 == 1).then_some(())
    })
    .await;
    pieces
        .send(Err(StoreError::Body("the client went away".into())))
        .await
        .unwrap();
    let failed = upload.await.unwrap();
    assert!(matches!(failed, Err(StoreError::Body(_))), "{:?}", failed.map(|_| ()));
    lock.batch_execute("COMMIT").await.unwrap();
    let missing = gw.client.head_object().bucket("dies").key("k").send().await;
    assert!(missing.is_err(), "nothing of the upload is visible");
    // The abandoned upload's lease is handed to the reaper at once, and the reaper takes it.
    common::eventually(Duration::from_secs(30), "the lease retired", || async {
        let leased: i64 = sql
            .query_one("SELECT count(*) FROM s3p.retired_bodies WHERE retired_at > now()", &[])
            .await
            .unwrap()
            .get("count");
        (leased == 0).then_some(())
    })
    .await;
    gw.gateway.store.reap_retired(Duration::ZERO).await.unwrap();
    let left: i64 = sql
        .query_one("SELECT count(*) FROM s3p.chunks", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(left, 0, "the reaper took the written batch");
    gw.stop().await;
}
