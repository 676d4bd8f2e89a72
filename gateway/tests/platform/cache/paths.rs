//! The other ways into a cache bucket: re-applied settings, a spent buffer budget, copies and
//! completions, and a RESP database mapped onto it.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn re_applying_unchanged_origin_settings_does_not_move_the_catalog_version() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let sql = pair.cache.sql().await;
    let version = || async {
        sql.query_one("SELECT version FROM pgvs3.catalog_version", &[])
            .await
            .unwrap()
            .get::<_, i64>("version")
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

/// A range answered from cached chunks is gathered in memory, so it holds its bytes of the
/// buffer budget until its body is sent: a second one that does not fit beside it streams from
/// the origin instead of gathering another copy. (Such hits used to reserve nothing: any number
/// of clients could each hold up to 64 MiB of gathered chunks.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_range_served_from_cached_chunks_holds_its_buffer_budget_until_sent() {
    use tokio::io::AsyncWriteExt;
    const RANGE: usize = 40 << 20;
    let pair = Pair::start_with_args(
        |origin| origin_settings(origin, CacheMode::WriteThrough),
        &["--buffer-budget", "48MiB"],
    )
    .await;
    let client = &pair.cache.client;
    let in_use = || async { pair.cache.metric("pgvs3_buffer_bytes_in_use").await.unwrap_or(-1.0) };
    let ranged_gets = || origin_requests(&pair.origin, "GetObject", 206);
    // A range short of the whole object (a range that covers it all is cached as the object).
    let table = noise(RANGE + (1 << 20), 33);
    pair.put_at_origin("big.bin", table.clone()).await;
    let (span, ranged) = (format!("bytes=0-{}", RANGE - 1), &table[..RANGE]);
    assert_eq!(range(client, "big.bin", &span).await.1, ranged, "the fill");
    assert_eq!(ranged_gets().await, 1.0);

    // A hit whose client reads nothing: its answer waits in the gateway, its bytes reserved.
    let addr = pair.cache.gateway.s3_addr;
    let signer = common::raw::Signer {
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: ROOT_SECRET_KEY.into(),
        host: addr.to_string(),
    };
    let path = format!("/{CACHE}/big.bin");
    let headers = signer.sign(
        "GET",
        &path,
        &[("range", span.clone())],
        "UNSIGNED-PAYLOAD",
        std::time::SystemTime::now(),
    );
    let mut request = format!("GET {path} HTTP/1.1\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let mut unread = tokio::net::TcpStream::connect(addr).await.unwrap();
    unread.write_all(request.as_bytes()).await.unwrap();
    common::eventually(
        Duration::from_secs(60),
        "the unread answer's bytes reserved",
        || async { (in_use().await >= RANGE as f64).then_some(()) },
    )
    .await;
    assert_eq!(ranged_gets().await, 1.0, "served from the cached chunks");

    // The same range again, beside it: no room to gather it, so it streams from the origin.
    assert_eq!(range(client, "big.bin", &span).await.1, ranged);
    assert_eq!(ranged_gets().await, 2.0);
    let exhausted = pair
        .cache
        .metric("pgvs3_buffer_budget_exhausted_total{use=\"range_hit\"}")
        .await;
    assert_eq!(exhausted, Some(1.0));

    drop(unread);
    common::eventually(Duration::from_secs(60), "the reservation given back", || async {
        (in_use().await == 0.0).then_some(())
    })
    .await;
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

/// A RESP database mapped to a cache bucket is refused with a reason when selected, and nothing
/// reaches the origin; the plain database beside it works.
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
    // SELECT checks that the database can be used (as it refuses one the key may not read),
    // and the connection stays where it was.
    let reply = resp.command(&["SELECT", "1"]).await;
    assert!(
        reply.error().contains("is a cache bucket") && reply.error().contains(CACHE),
        "{reply:?}"
    );
    assert_eq!(
        resp.command(&["GET", "plain"]).await,
        common::resp::Value::Bulk(b"v".to_vec())
    );
    assert_eq!(
        pair.origin_has("k").await,
        Some(b"at the origin".to_vec()),
        "not overwritten"
    );
    resp_gateway.stop().await;
    pair.stop().await;
}
