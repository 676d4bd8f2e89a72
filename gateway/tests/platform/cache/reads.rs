//! Reads through a cache bucket: a miss fills once, ranges fill aligned chunks, stale entries
//! are revalidated, a 404 is remembered, listings pass through, a standby serves warm hits.

use super::*;

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
        .map(|row| row.get("chunk"))
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
        .get("count");
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

/// Every chunk of an object larger than one fill can end up cached, one bounded fill after
/// another; a range spanning more than a fill's bound is then streamed from the origin, not
/// gathered from the chunks into the gateway's memory. Failed before: `bytes=0-` was answered
/// from 65 MiB of chunks held in memory at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_range_larger_than_a_fill_is_streamed_not_gathered_from_chunks() {
    let pair = Pair::start(CacheMode::WriteBack).await; // 64 KiB range chunks
    let body = noise(65 << 20, 6);
    let len = body.len();
    pair.put_at_origin("big.bin", body.clone()).await;
    let client = &pair.cache.client;
    let ranged_gets = || origin_requests(&pair.origin, "GetObject", 206);
    // Two fills, each within the 64 MiB bound, cache every chunk.
    let (_, bytes) = range(client, "big.bin", &format!("bytes=0-{}", (64 << 20) - 1)).await;
    assert_eq!(bytes.len(), 64 << 20);
    let (_, bytes) = range(client, "big.bin", &format!("bytes={}-{}", 64 << 20, len - 1)).await;
    assert_eq!(bytes, &body[64 << 20..]);
    assert_eq!(ranged_gets().await, 2.0);
    let (_, bytes) = range(client, "big.bin", "bytes=1000-2000").await;
    assert_eq!(bytes, &body[1000..2001]);
    assert_eq!(ranged_gets().await, 2.0, "a small range is a hit");

    for asked in ["bytes=0-", "bytes=0-99999999999", "bytes=-67200000"] {
        let before = ranged_gets().await;
        let (content_range, bytes) = range(client, "big.bin", asked).await;
        let first = len - bytes.len();
        assert!(content_range.is_some(), "{asked}");
        assert!(
            bytes[..] == body[if asked.starts_with("bytes=-") { first } else { 0 }..],
            "{asked}"
        );
        assert_eq!(ranged_gets().await, before + 1.0, "{asked}: streamed from the origin");
    }
    pair.stop().await;
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
        .get("count");
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
