//! Large uploads written batch by batch under a lease: a slow client's body, sent in odd-sized
//! pieces with pauses while batches are written, is stored byte for byte, plain, compressed and
//! encrypted. Driven through the store's bucket API with a body the test hands over piece by
//! piece (an HTTP client's bytes would be buffered by the sockets, out of the test's sight).

use pgvs3_testkit as common;

use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use common::{ROOT_ACCESS_KEY, TestGateway, noise};
use pgvs3_gateway::bucket::Buckets;
use pgvs3_gateway::cache::CacheTier;
use pgvs3_gateway::store::{
    Access, BodyStream, ObjectMeta, Principal, PutOutcome, RequestedEncryption, StoreResult, StoredBytes, Upload,
    WriteCondition,
};

/// The store's chunk size.
const CHUNK: usize = 8120;

/// The bucket API of the gateway's store, as the protocol fronts reach it.
pub(crate) fn buckets(gw: &TestGateway) -> Buckets {
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

/// Leased chunks the database holds (committed batches of uploads not yet stored).
async fn leased_chunks(sql: &tokio_postgres::Client) -> i64 {
    sql.query_one(
        "SELECT count(*) FROM s3p.chunks c JOIN s3p.retired_bodies r USING (body_id) WHERE r.retired_at > now()",
        &[],
    )
    .await
    .unwrap()
    .get("count")
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

/// A slow client, sending odd-sized pieces (chunk boundaries fall inside them and between them)
/// and pausing now and then until no batch is being written. Plain, compressed at first (a run
/// of zeros) and encrypted (SSE-S3), the body of several batches is stored byte for byte, and
/// nothing is left leased.
#[tokio::test]
async fn a_slow_clients_large_upload_is_stored_byte_for_byte() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("slow").send().await.unwrap();
    let sql = gw.sql().await;
    let mut body = vec![0u8; 1536 << 10];
    body.extend(noise((4 << 20) + 12_345, 22));
    let body = Bytes::from(body);
    let buckets = buckets(&gw);
    for (key, encryption) in [
        ("plain", RequestedEncryption::None),
        ("sealed", RequestedEncryption::S3),
    ] {
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
    assert_eq!(leased_chunks(&sql).await, 0, "nothing is left leased");
    gw.stop().await;
}

/// While a batch is written the body goes on being read, up to one batch more: with the chunk
/// table locked, so that the first batch's write waits, the client still hands over most of a
/// second megabyte; then its pieces wait, until the lock goes and the writes go on. The body is
/// stored byte for byte, and nothing is left leased.
#[tokio::test]
async fn a_body_is_read_on_while_its_batch_is_written_up_to_one_batch_more() {
    const PIECE: usize = 64 << 10;
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("ahead").send().await.unwrap();
    let sql = gw.sql().await;
    let locker = gw.sql().await;
    let body = Bytes::from(noise((3 << 20) + 12_345, 46));
    let (pieces, mut queued) = tokio::sync::mpsc::channel::<Bytes>(1);
    let stream: BodyStream = Box::pin(futures::stream::poll_fn(move |cx| {
        queued.poll_recv(cx).map(|piece| piece.map(Ok))
    }));
    let buckets = buckets(&gw);
    let upload = tokio::spawn(async move { put(&buckets, "ahead", "k", stream, RequestedEncryption::None).await });
    locker
        .batch_execute("BEGIN; LOCK TABLE s3p.chunks IN SHARE MODE")
        .await
        .unwrap();
    let mut at = 0;
    let send = async |at: &mut usize, limit: Duration| {
        let end = (*at + PIECE).min(body.len());
        let sent = tokio::time::timeout(limit, pieces.send(body.slice(*at..end))).await;
        if sent.is_ok() {
            *at = end;
        }
        sent.is_ok()
    };
    // The first batch and a piece: its write starts, and waits for the lock.
    while at < (1 << 20) + PIECE {
        assert!(send(&mut at, Duration::from_secs(30)).await, "the first batch is read");
    }
    common::eventually(Duration::from_secs(30), "the first batch's write waits", || async {
        let waiting: i64 = sql
            .query_one("SELECT count(*) FROM pg_locks WHERE NOT granted", &[])
            .await
            .unwrap()
            .get("count");
        (waiting > 0).then_some(())
    })
    .await;
    // Fifteen pieces more are read while it waits (they stay short of a second full batch).
    for _ in 0..15 {
        assert!(
            send(&mut at, Duration::from_secs(30)).await,
            "read on while the batch is written, at {at}"
        );
    }
    // Then at most a batch's last pieces: the reading stops one batch ahead.
    let mut more = 0;
    while send(&mut at, Duration::from_millis(500)).await {
        more += 1;
        assert!(more <= 4, "read past one batch ahead of the write, at {at}");
    }
    locker.batch_execute("ROLLBACK").await.unwrap();
    while at < body.len() {
        assert!(
            send(&mut at, Duration::from_secs(30)).await,
            "the rest is read once the lock is gone"
        );
    }
    drop(pieces);
    let stored = upload.await.unwrap().unwrap();
    assert_eq!(stored.size, body.len() as u64);
    assert!(get(&gw, "ahead", "k").await == body, "stored byte for byte");
    assert_eq!(leased_chunks(&sql).await, 0, "nothing is left leased");
    gw.stop().await;
}
