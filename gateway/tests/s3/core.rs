//! The S3 object core through aws-sdk-s3: buckets, objects of every size class, ranges,
//! metadata, listing, batch deletes, checksums, ownership, and a gateway restart.

use pgvs3_testkit as common;

use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode, Delete, ObjectIdentifier};
use common::s3::{head_object, http_status, put_object, put_request};
use common::{TestGateway, noise};

async fn put(gw: &TestGateway, bucket: &str, key: &str, body: Vec<u8>) -> String {
    put_request(&gw.client, bucket, key, body)
        .send()
        .await
        .unwrap_or_else(|err| panic!("put {key}: {err:?}"))
        .e_tag
        .unwrap()
}

async fn get(gw: &TestGateway, bucket: &str, key: &str) -> Vec<u8> {
    let out = gw
        .client
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|err| panic!("get {key}: {err:?}"));
    out.body.collect().await.unwrap().into_bytes().to_vec()
}

fn md5_hex(data: &[u8]) -> String {
    use md5::Digest;
    format!("\"{}\"", hex::encode(md5::Md5::digest(data)))
}

#[tokio::test]
async fn buckets_are_created_listed_located_and_deleted() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("alpha").send().await.unwrap();
    s3.create_bucket().bucket("beta.bucket-2").send().await.unwrap();
    // Re-creating one's own bucket in us-east-1 is 200, as S3 answers there (see below).
    s3.create_bucket().bucket("alpha").send().await.unwrap();

    let names: Vec<String> = s3
        .list_buckets()
        .send()
        .await
        .unwrap()
        .buckets()
        .iter()
        .filter_map(|b| b.name.clone())
        .collect();
    assert_eq!(names, ["alpha", "beta.bucket-2"]);
    s3.head_bucket().bucket("alpha").send().await.unwrap();
    let location = s3.get_bucket_location().bucket("alpha").send().await.unwrap();
    assert!(
        location.location_constraint().is_none_or(|c| c.as_str().is_empty()),
        "us-east-1 is reported empty"
    );

    let missing = s3.head_bucket().bucket("nope").send().await.unwrap_err();
    assert_eq!(http_status(&missing), 404);

    put(&gw, "alpha", "x", b"1".to_vec()).await;
    s3.create_bucket().bucket("alpha").send().await.unwrap();
    assert_eq!(
        get(&gw, "alpha", "x").await,
        b"1",
        "a re-create keeps the bucket's objects"
    );
    let not_empty = s3.delete_bucket().bucket("alpha").send().await.unwrap_err();
    assert_eq!(not_empty.into_service_error().meta().code(), Some("BucketNotEmpty"));
    s3.delete_object().bucket("alpha").key("x").send().await.unwrap();
    s3.delete_bucket().bucket("alpha").send().await.unwrap();
    let gone = s3.get_object().bucket("alpha").key("x").send().await.unwrap_err();
    assert_eq!(gone.into_service_error().meta().code(), Some("NoSuchBucket"));

    for bad in [
        "UPPER",
        "a",
        "-leading",
        "two..dots",
        "192.168.1.1",
        "xn--punycode",
        "under_score",
    ] {
        let err = s3.create_bucket().bucket(bad).send().await.expect_err(bad);
        let status = err.raw_response().map(|r| r.status().as_u16());
        assert_eq!(status, Some(400), "{bad}: {err:?}");
    }
    gw.stop().await;
}

/// S3 answers an account re-creating a bucket it owns with 200 in us-east-1 only, "for legacy
/// compatibility"; every other region answers 409 `BucketAlreadyOwnedByYou` (and another
/// account's bucket is `BucketAlreadyExists` everywhere).
#[tokio::test]
async fn re_creating_ones_own_bucket_outside_us_east_1_is_bucket_already_owned_by_you() {
    let gw = TestGateway::with_args(common::fresh_database().await, &["--region", "eu-west-1"]).await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("alpha").send().await.unwrap();
    put(&gw, "alpha", "x", b"1".to_vec()).await;
    let again = s3.create_bucket().bucket("alpha").send().await.unwrap_err();
    assert_eq!(http_status(&again), 409);
    assert_eq!(
        again.into_service_error().meta().code(),
        Some("BucketAlreadyOwnedByYou")
    );
    assert_eq!(get(&gw, "alpha", "x").await, b"1");
}

#[tokio::test]
async fn objects_of_every_size_class_round_trip_byte_exact() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("sizes").send().await.unwrap();
    let sizes = [
        0usize,
        1,
        4096,
        8119,
        8120,
        8121,
        65_536,
        65_537,
        3 * 8120 + 17,
        10 << 20,
    ];
    for (i, size) in sizes.into_iter().enumerate() {
        let body = noise(size, i as u64);
        let key = format!("obj-{size}");
        let etag = put(&gw, "sizes", &key, body.clone()).await;
        assert_eq!(etag, md5_hex(&body), "ETag is the MD5 of the body ({size} B)");
        let back = get(&gw, "sizes", &key).await;
        assert_eq!(back.len(), size);
        assert!(back == body, "{size} B round trip");
        let head = head_object(&gw.client, "sizes", &key).await;
        assert_eq!(head.content_length(), Some(size as i64));
        assert_eq!(head.e_tag(), Some(md5_hex(&body).as_str()));
    }
    // Bodies above 64 KiB are chunked; at or below they are inline in the object row.
    // A body that fits a page with its row (4 KiB) is stored in the row itself, not in TOAST;
    // only the larger inline bodies (8,119 B .. 64 KiB: five of them here) go out of line.
    let sql = gw.sql().await;
    let toast: String = sql
        .query_one(
            "SELECT reltoastrelid::regclass::text AS toast FROM pg_class WHERE oid = 's3p.objects'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get("toast");
    let toasted: i64 = sql
        .query_one(&format!("SELECT count(DISTINCT chunk_id) FROM {toast}"), &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(toasted, 5);
    let chunked: i64 = sql
        .query_one("SELECT count(*) FROM s3p.objects WHERE body_id IS NOT NULL", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(chunked, 2, "only 65,537 B and 10 MiB exceed the inline limit");
    let chunks: i64 = sql
        .query_one("SELECT count(*) FROM s3p.chunks", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(
        chunks,
        (65_537usize.div_ceil(8120) + (10usize << 20).div_ceil(8120)) as i64
    );
    gw.stop().await;
}

/// Chunked bodies uploaded at once, each hashed beside its own stream: each keeps its own ETag,
/// the MD5 of its bytes, whatever the others' sizes, and with a checksum the request asks for
/// computed beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bodies_uploaded_at_once_each_get_the_md5_of_their_own_bytes() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("together").send().await.unwrap();
    let sizes = [
        65_537usize,
        200_003,
        (1 << 20) + 3,
        3 << 20,
        (2 << 20) + 64,
        700_001,
        5 << 20,
        8120 * 40,
        130_000,
    ];
    let uploads = sizes.into_iter().enumerate().map(|(i, size)| {
        let client = gw.client.clone();
        async move {
            let body = noise(size, 1000 + i as u64);
            let key = format!("together-{i}");
            let mut request = put_request(&client, "together", &key, body.clone());
            if i % 3 == 0 {
                request = request.checksum_algorithm(ChecksumAlgorithm::Sha256);
            }
            let etag = request
                .send()
                .await
                .unwrap_or_else(|err| panic!("put {key}: {err:?}"))
                .e_tag
                .unwrap();
            (key, body, etag)
        }
    });
    for (key, body, etag) in futures::future::join_all(uploads).await {
        assert_eq!(etag, md5_hex(&body), "{key}: the ETag is the MD5 of its body");
        assert!(
            get(&gw, "together", &key).await == body,
            "{key} reads back byte for byte"
        );
    }
}
#[tokio::test]
async fn compressible_bodies_are_stored_smaller_and_read_back_exact() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("text").send().await.unwrap();
    let body: Vec<u8> = (0..200_000u32)
        .flat_map(|i| format!("line {i},value {}\n", i % 97).into_bytes())
        .collect();
    put(&gw, "text", "big.csv", body.clone()).await;
    assert!(get(&gw, "text", "big.csv").await == body);
    let stored: i64 = gw
        .sql()
        .await
        .query_one("SELECT sum(length(data)) AS bytes FROM s3p.chunks", &[])
        .await
        .unwrap()
        .get("bytes");
    assert!((stored as usize) < body.len() / 2, "stored {stored} of {}", body.len());
    let range = gw
        .client
        .get_object()
        .bucket("text")
        .key("big.csv")
        .range("bytes=100000-100099")
        .send()
        .await
        .unwrap();
    assert_eq!(
        range.body.collect().await.unwrap().into_bytes().as_ref(),
        &body[100_000..100_100]
    );
    gw.stop().await;
}

#[tokio::test]
async fn every_range_form_is_exact_and_unsatisfiable_ranges_get_416() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("ranges").send().await.unwrap();
    for (key, size) in [("inline", 50_000usize), ("chunked", 100_000)] {
        let body = noise(size, 7);
        put(&gw, "ranges", key, body.clone()).await;
        let cases: [(&str, usize, usize); 7] = [
            ("bytes=0-0", 0, 1),
            ("bytes=10-8129", 10, 8130),
            ("bytes=8119-8120", 8119, 8121),
            ("bytes=40000-", 40_000, size),
            ("bytes=-100", size - 100, size),
            ("bytes=-999999999", 0, size),
            ("bytes=49000-99999999", 49_000, size),
        ];
        for (range, start, end) in cases {
            let out = gw
                .client
                .get_object()
                .bucket("ranges")
                .key(key)
                .range(range)
                .send()
                .await
                .unwrap();
            assert_eq!(
                out.content_range(),
                Some(format!("bytes {start}-{}/{size}", end - 1).as_str()),
                "{key} {range}"
            );
            assert_eq!(out.content_length(), Some((end - start) as i64));
            assert!(out.checksum_crc32().is_none());
            let got = out.body.collect().await.unwrap().into_bytes();
            assert!(got.as_ref() == &body[start..end], "{key} {range}");
        }
        let err = gw
            .client
            .get_object()
            .bucket("ranges")
            .key(key)
            .range(format!("bytes={size}-"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(http_status(&err), 416);
        assert_eq!(err.into_service_error().meta().code(), Some("InvalidRange"));
    }
    put(&gw, "ranges", "empty", Vec::new()).await;
    let err = gw
        .client
        .get_object()
        .bucket("ranges")
        .key("empty")
        .range("bytes=0-0")
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&err), 416);
    gw.stop().await;
}

/// A chunked body is read back in rows of many chunks (chunks.rs `CHUNKS_PER_ROW`, 32): whole
/// and in ranges that start, end and cross where one row's chunks end and the next's begin it
/// is exact; a chunk lost from the middle of a row fails every read that reaches it (never a
/// body short by a chunk, or with the chunks after it shifted), while a range before it reads.
#[tokio::test]
async fn chunked_bodies_read_exactly_across_rows_and_a_lost_chunk_fails_the_read() {
    const CHUNK: usize = 8120;
    const ROW: usize = 32 * CHUNK;
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("rows").send().await.unwrap();
    let size = 100 * CHUNK + 17;
    let body = noise(size, 41);
    put(&gw, "rows", "body", body.clone()).await;
    assert!(get(&gw, "rows", "body").await == body, "whole body");
    let range = |first: usize, last: usize| {
        gw.client
            .get_object()
            .bucket("rows")
            .key("body")
            .range(format!("bytes={first}-{last}"))
            .send()
    };
    // A range's bytes; or its failure, at its head (when its first bytes are lost) or in its body.
    let read = |first: usize, last: usize| {
        let range = range(first, last);
        async move {
            match range.await {
                Ok(out) => out
                    .body
                    .collect()
                    .await
                    .map(|b| b.into_bytes().to_vec())
                    .map_err(|e| e.to_string()),
                Err(err) => Err(err.to_string()),
            }
        }
    };
    for (first, last) in [
        (ROW - 1, ROW),
        (ROW, ROW),
        (ROW - 5, 2 * ROW + 5),
        (ROW + 3, 3 * ROW - 1),
        (3 * ROW, size - 1),
        (size - 1, size - 1),
        (0, ROW - 1),
    ] {
        let got = read(first, last).await.unwrap();
        assert!(got == body[first..=last], "bytes {first}-{last}");
    }
    // Chunk 40, inside the second row, goes missing.
    let sql = gw.sql().await;
    let lost = sql.execute("DELETE FROM s3p.chunks WHERE seq = 40", &[]).await.unwrap();
    assert_eq!(lost, 1);
    for (first, last) in [
        (0, size - 1),
        (ROW, 2 * ROW - 1),
        (40 * CHUNK + 1, 40 * CHUNK + 2),
        (39 * CHUNK, size - 1),
    ] {
        let read = read(first, last).await.map(|got| got.len());
        assert!(read.is_err(), "bytes {first}-{last} reach the lost chunk, got {read:?}");
    }
    let before = read(0, 40 * CHUNK - 1).await.unwrap();
    assert!(
        before == body[..40 * CHUNK],
        "the bytes before the lost chunk still read"
    );
    gw.stop().await;
}

/// The statement reading a chunked body probes only the chunks it returns. Planned generic (as
/// the gateway's prepared statement runs from its sixth execution) on a table never analyzed,
/// each row's array is one index range scan of at most 32 chunks, with nothing sorted or
/// filtered out: a plan that walked the whole body for each row would make a GET quadratic in
/// the object's size.
#[tokio::test]
async fn a_chunked_read_probes_only_the_chunks_it_returns() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("plan").send().await.unwrap();
    let chunks = 200;
    put(&gw, "plan", "body", noise(chunks * 8120, 43)).await;
    let sql = gw.sql().await;
    let body_id: i64 = sql
        .query_one("SELECT body_id FROM s3p.objects WHERE key = 'body'", &[])
        .await
        .unwrap()
        .get("body_id");
    let statement = pgvs3_gateway::store::chunk_rows_statement("s3p");
    sql.batch_execute(&format!(
        "SET plan_cache_mode = force_generic_plan; PREPARE chunk_rows(bigint, int, int) AS {statement}"
    ))
    .await
    .unwrap();
    let explain = format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE chunk_rows({body_id}, 0, {})",
        chunks - 1
    );
    let plan: serde_json::Value = sql.query_one(&explain, &[]).await.unwrap().get("QUERY PLAN");
    fn nodes<'a>(node: &'a serde_json::Value, all: &mut Vec<&'a serde_json::Value>) {
        all.push(node);
        for child in node["Plans"].as_array().into_iter().flatten() {
            nodes(child, all);
        }
    }
    let mut all = Vec::new();
    nodes(&plan[0]["Plan"], &mut all);
    assert!(
        !all.iter().any(|node| node["Node Type"] == "Sort"),
        "nothing sorted: {plan}"
    );
    let scans: Vec<_> = all.iter().filter(|node| node["Relation Name"] == "chunks").collect();
    assert!(!scans.is_empty(), "{plan}");
    for scan in scans {
        let condition = scan["Index Cond"].as_str().unwrap_or_default();
        assert!(
            condition.contains("seq >=") && condition.contains("seq <="),
            "the chunks' range is the index scan's: {scan}"
        );
        assert!(
            scan.get("Rows Removed by Filter").is_none_or(|removed| removed == 0),
            "{scan}"
        );
        let loops = scan["Actual Loops"].as_f64().unwrap();
        let read = scan["Actual Rows"].as_f64().unwrap() * loops;
        assert!(
            read <= chunks as f64 + loops,
            "{read} chunk rows read for {chunks}: {scan}"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn metadata_and_standard_headers_are_kept() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("meta").send().await.unwrap();
    put_request(&gw.client, "meta", "doc.html", b"<p>hi</p>")
        .content_type("text/html; charset=utf-8")
        .content_encoding("identity")
        .content_disposition("attachment; filename=\"doc.html\"")
        .content_language("en-GB")
        .cache_control("max-age=60")
        .expires(aws_sdk_s3::primitives::DateTime::from_secs(2_000_000_000))
        .metadata("Colour", "blue")
        .metadata("owner-id", "42")
        .send()
        .await
        .unwrap();
    let head = head_object(&gw.client, "meta", "doc.html").await;
    assert_eq!(head.content_type(), Some("text/html; charset=utf-8"));
    assert_eq!(head.content_encoding(), Some("identity"));
    assert_eq!(head.content_disposition(), Some("attachment; filename=\"doc.html\""));
    assert_eq!(head.content_language(), Some("en-GB"));
    assert_eq!(head.cache_control(), Some("max-age=60"));
    assert_eq!(head.expires_string(), Some("Wed, 18 May 2033 03:33:20 GMT"));
    let meta = head.metadata().unwrap();
    assert_eq!(meta.get("colour").map(String::as_str), Some("blue"));
    assert_eq!(meta.get("owner-id").map(String::as_str), Some("42"));
    assert!(head.last_modified().is_some());
    assert_eq!(head.accept_ranges(), Some("bytes"));

    // Overwrite replaces metadata too.
    put(&gw, "meta", "doc.html", b"v2".to_vec()).await;
    let head = head_object(&gw.client, "meta", "doc.html").await;
    assert!(head.metadata().is_none_or(|m| m.is_empty()));
    assert_eq!(head.content_length(), Some(2));
    gw.stop().await;
}

#[tokio::test]
async fn listing_pages_prefixes_and_odd_keys_like_s3() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("list").send().await.unwrap();
    let sql = gw.sql().await;
    // 3,000 keys through SQL would bypass the gateway; write them through S3 concurrently.
    let mut keys: Vec<String> = Vec::new();
    for dir in 0..30 {
        for file in 0..100 {
            keys.push(format!("dir{dir:02}/file{file:03}.txt"));
        }
    }
    let odd = [
        "a b.txt",
        "a+b.txt",
        "100%.txt",
        "ünïcødé/ß.txt",
        "日本/語.txt",
        "top.txt",
        "x/y/z.txt",
    ];
    keys.extend(odd.iter().map(|k| k.to_string()));
    let writes = futures::stream::iter(keys.clone()).map(|key| {
        let client = gw.client.clone();
        async move {
            put_request(&client, "list", &key, key.clone().into_bytes())
                .send()
                .await
                .map(|_| ())
        }
    });
    use futures::StreamExt;
    let results: Vec<_> = writes.buffer_unordered(16).collect().await;
    assert!(results.iter().all(Result::is_ok));
    drop(sql);

    // Full listing, 1,000 per page, in UTF-8 byte order.
    let mut expected = keys.clone();
    expected.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let mut listed = Vec::new();
    let mut token = None;
    let mut pages = 0;
    loop {
        let out = gw
            .client
            .list_objects_v2()
            .bucket("list")
            .set_continuation_token(token.clone())
            .send()
            .await
            .unwrap();
        pages += 1;
        listed.extend(out.contents().iter().map(|o| o.key().unwrap().to_owned()));
        assert_eq!(out.key_count(), Some(out.contents().len() as i32));
        match out.next_continuation_token() {
            Some(next) => {
                assert_eq!(out.is_truncated(), Some(true));
                token = Some(next.to_owned());
            }
            None => break,
        }
    }
    assert_eq!(pages, 4);
    assert_eq!(listed, expected);

    // Delimiter: one common prefix per directory, top-level files as contents.
    let out = gw
        .client
        .list_objects_v2()
        .bucket("list")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let prefixes: Vec<&str> = out.common_prefixes().iter().filter_map(|p| p.prefix()).collect();
    assert_eq!(prefixes.len(), 30 + 3);
    assert_eq!(prefixes[0], "dir00/");
    assert!(prefixes.contains(&"ünïcødé/") && prefixes.contains(&"日本/") && prefixes.contains(&"x/"));
    let files: Vec<&str> = out.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(files, ["100%.txt", "a b.txt", "a+b.txt", "top.txt"]);

    // Paging through common prefixes with a small max-keys never repeats or skips one.
    let mut seen = Vec::new();
    let mut token = None;
    loop {
        let out = gw
            .client
            .list_objects_v2()
            .bucket("list")
            .delimiter("/")
            .max_keys(7)
            .set_continuation_token(token)
            .send()
            .await
            .unwrap();
        seen.extend(
            out.common_prefixes()
                .iter()
                .filter_map(|p| p.prefix().map(str::to_owned)),
        );
        seen.extend(out.contents().iter().filter_map(|o| o.key().map(str::to_owned)));
        assert!(out.key_count().unwrap() <= 7);
        token = out.next_continuation_token().map(str::to_owned);
        if token.is_none() {
            break;
        }
    }
    assert_eq!(seen.len(), 30 + 3 + 4);

    // Prefix + delimiter, start-after, and max-keys.
    let out = gw
        .client
        .list_objects_v2()
        .bucket("list")
        .prefix("dir07/")
        .delimiter("/")
        .start_after("dir07/file095.txt")
        .send()
        .await
        .unwrap();
    let files: Vec<&str> = out.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(
        files,
        [
            "dir07/file096.txt",
            "dir07/file097.txt",
            "dir07/file098.txt",
            "dir07/file099.txt"
        ]
    );
    let out = gw
        .client
        .list_objects_v2()
        .bucket("list")
        .prefix("x/")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    assert_eq!(out.common_prefixes()[0].prefix(), Some("x/y/"));

    // encoding-type=url percent-encodes keys the way clients decode them.
    let out = gw
        .client
        .list_objects_v2()
        .bucket("list")
        .prefix("a")
        .encoding_type(aws_sdk_s3::types::EncodingType::Url)
        .send()
        .await
        .unwrap();
    let encoded: Vec<&str> = out.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(encoded, ["a%20b.txt", "a%2Bb.txt"]);

    // fetch-owner.
    let out = gw
        .client
        .list_objects_v2()
        .bucket("list")
        .prefix("top")
        .fetch_owner(true)
        .send()
        .await
        .unwrap();
    assert_eq!(
        out.contents()[0].owner().and_then(|o| o.id()),
        Some(common::ROOT_ACCESS_KEY)
    );
    gw.stop().await;
}

/// A page resumes from its continuation token alone: S3 applies start-after to the first page
/// only, and minio-py sends start-after again (the token itself) with every later page. Keys
/// that sort before the token's text listed 1,000 of 1,500 when the larger of the two won.
#[tokio::test]
async fn pages_resume_from_the_continuation_token_whatever_start_after_says() {
    use futures::StreamExt;
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("csv").send().await.unwrap();
    let keys: Vec<String> = (0..1500).map(|i| format!("2026/{i:05}.csv")).collect();
    let writes = futures::stream::iter(keys.clone()).map(|key| {
        let client = gw.client.clone();
        async move {
            put_request(&client, "csv", &key, b"x".to_vec())
                .send()
                .await
                .map(|_| ())
        }
    });
    let results: Vec<_> = writes.buffer_unordered(16).collect().await;
    assert!(results.iter().all(Result::is_ok));
    // Later pages send start-after as minio-py does (the token), or the first page's again.
    for (first, later) in [(None, "token"), (Some("2026/00099.csv"), "first")] {
        let mut listed = Vec::new();
        let mut token: Option<String> = None;
        let mut pages = 0;
        loop {
            let start_after = match (&token, later) {
                (None, _) => first.map(str::to_owned),
                (Some(token), "token") => Some(token.clone()),
                (Some(_), _) => first.map(str::to_owned),
            };
            let out = gw
                .client
                .list_objects_v2()
                .bucket("csv")
                .set_start_after(start_after)
                .set_continuation_token(token.clone())
                .max_keys(400)
                .send()
                .await
                .unwrap();
            pages += 1;
            listed.extend(out.contents().iter().map(|o| o.key().unwrap().to_owned()));
            token = out.next_continuation_token().map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        let skip = if first.is_some() { 100 } else { 0 };
        assert_eq!(
            listed.len(),
            1500 - skip,
            "later pages sending the {later}: {pages} pages"
        );
        assert_eq!(listed, keys[skip..], "later pages sending the {later}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn delete_objects_reports_verbose_and_quiet() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("del").send().await.unwrap();
    for key in ["a", "b", "c", "big"] {
        let size = if key == "big" { 200_000 } else { 10 };
        put(&gw, "del", key, noise(size, 1)).await;
    }
    let ids = |keys: &[&str]| {
        Delete::builder().set_objects(Some(
            keys.iter()
                .map(|k| ObjectIdentifier::builder().key(*k).build().unwrap())
                .collect(),
        ))
    };
    let out = gw
        .client
        .delete_objects()
        .bucket("del")
        .delete(ids(&["a", "missing", "big"]).build().unwrap())
        .send()
        .await
        .unwrap();
    let mut deleted: Vec<&str> = out.deleted().iter().filter_map(|d| d.key()).collect();
    deleted.sort();
    assert_eq!(deleted, ["a", "big", "missing"]);
    let out = gw
        .client
        .delete_objects()
        .bucket("del")
        .delete(ids(&["b"]).quiet(true).build().unwrap())
        .send()
        .await
        .unwrap();
    assert!(out.deleted().is_empty() && out.errors().is_empty());
    let left: Vec<String> = gw
        .client
        .list_objects_v2()
        .bucket("del")
        .send()
        .await
        .unwrap()
        .contents()
        .iter()
        .filter_map(|o| o.key.clone())
        .collect();
    assert_eq!(left, ["c"]);
    // The chunked body was retired for the reaper, not deleted inline.
    let retired: i64 = gw
        .sql()
        .await
        .query_one("SELECT count(*) FROM s3p.retired_bodies", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(retired, 1);
    gw.stop().await;
}

#[tokio::test]
async fn checksums_are_verified_stored_and_returned_for_whole_objects_only() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("sums").send().await.unwrap();
    for (algorithm, size) in [
        (ChecksumAlgorithm::Crc32, 1000usize),
        (ChecksumAlgorithm::Crc32C, 300_000),
        (ChecksumAlgorithm::Crc64Nvme, 70_000),
        (ChecksumAlgorithm::Sha1, 10),
        (ChecksumAlgorithm::Sha256, 9000),
    ] {
        let key = algorithm.as_str().to_owned();
        let body = noise(size, 3);
        let put = put_request(&gw.client, "sums", &key, body.clone())
            .checksum_algorithm(algorithm.clone())
            .send()
            .await
            .unwrap();
        let sent = [
            put.checksum_crc32(),
            put.checksum_crc32_c(),
            put.checksum_crc64_nvme(),
            put.checksum_sha1(),
            put.checksum_sha256(),
        ];
        assert_eq!(sent.iter().flatten().count(), 1, "{key}: one checksum echoed");
        let got = gw
            .client
            .get_object()
            .bucket("sums")
            .key(&key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .unwrap();
        let returned = [
            got.checksum_crc32(),
            got.checksum_crc32_c(),
            got.checksum_crc64_nvme(),
            got.checksum_sha1(),
            got.checksum_sha256(),
        ];
        assert_eq!(returned, sent, "{key}: stored checksum returned");
        // The SDK validates the checksum while reading the body.
        assert!(got.body.collect().await.unwrap().into_bytes().as_ref() == body.as_slice());
        let ranged = gw
            .client
            .get_object()
            .bucket("sums")
            .key(&key)
            .range("bytes=0-4")
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .unwrap();
        let on_range = [
            ranged.checksum_crc32(),
            ranged.checksum_crc32_c(),
            ranged.checksum_crc64_nvme(),
            ranged.checksum_sha1(),
            ranged.checksum_sha256(),
        ];
        assert!(
            on_range.iter().all(Option::is_none),
            "{key}: no whole-object checksum on a range"
        );
    }
    let err = put_request(&gw.client, "sums", "bad", b"hello")
        .checksum_crc32("AAAAAA==")
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.into_service_error().meta().code(), Some("BadDigest"));
    let missing = gw
        .client
        .head_object()
        .bucket("sums")
        .key("bad")
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&missing), 404);
    gw.stop().await;
}

#[tokio::test]
async fn access_keys_own_their_buckets_and_read_only_keys_cannot_write() {
    let gw = TestGateway::start().await;
    let catalog = gw.gateway.store.catalog();
    for (key, read_only) in [("ALICEKEY", false), ("BOBKEY", false), ("READERKEY", true)] {
        catalog
            .put_access_key(&pgvs3_gateway::store::NewAccessKey {
                access_key: key.into(),
                secret: format!("{key}-secret"),
                is_root: false,
                read_only,
                description: String::new(),
            })
            .await
            .unwrap();
    }
    let alice = gw.client_for("ALICEKEY", "ALICEKEY-secret");
    let bob = gw.client_for("BOBKEY", "BOBKEY-secret");
    let reader = gw.client_for("READERKEY", "READERKEY-secret");
    alice.create_bucket().bucket("alices").send().await.unwrap();
    put_object(&alice, "alices", "k", b"v").await;
    let denied = bob.get_object().bucket("alices").key("k").send().await.unwrap_err();
    assert_eq!(denied.into_service_error().meta().code(), Some("AccessDenied"));
    let denied = put_request(&bob, "alices", "k", b"x").send().await.unwrap_err();
    assert_eq!(denied.into_service_error().meta().code(), Some("AccessDenied"));
    let taken = bob.create_bucket().bucket("alices").send().await.unwrap_err();
    assert_eq!(taken.into_service_error().meta().code(), Some("BucketAlreadyExists"));
    let bobs_view = bob.list_buckets().send().await.unwrap();
    assert!(bobs_view.buckets().is_empty());
    // The root key sees and reads everything.
    assert_eq!(get(&gw, "alices", "k").await, b"v");
    let denied = reader.create_bucket().bucket("readers").send().await.unwrap_err();
    assert_eq!(denied.into_service_error().meta().code(), Some("AccessDenied"));
    let wrong_secret = gw
        .client_for("ALICEKEY", "not-the-secret")
        .list_buckets()
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        wrong_secret.into_service_error().meta().code(),
        Some("SignatureDoesNotMatch")
    );
    let unknown = gw.client_for("NOBODY", "x").list_buckets().send().await.unwrap_err();
    assert_eq!(unknown.into_service_error().meta().code(), Some("InvalidAccessKeyId"));
    gw.stop().await;
}

#[tokio::test]
async fn data_survives_a_gateway_restart() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("keep").send().await.unwrap();
    let small = noise(100, 1);
    let large = noise(1 << 20, 2);
    put(&gw, "keep", "small", small.clone()).await;
    put(&gw, "keep", "large", large.clone()).await;
    let url = gw.stop().await;
    let gw = TestGateway::on(url).await;
    assert!(get(&gw, "keep", "small").await == small);
    assert!(get(&gw, "keep", "large").await == large);
    gw.stop().await;
}

#[tokio::test]
async fn catalog_changes_reach_a_primary_gateway_by_notify() {
    // With polling effectively off, only LISTEN/NOTIFY can tell the gateway a key was deleted.
    let gw = TestGateway::with_args(common::fresh_database().await, &["--catalog-poll", "1h"]).await;
    gw.gateway
        .store
        .catalog()
        .put_access_key(&pgvs3_gateway::store::NewAccessKey {
            access_key: "SHORTLIVED".into(),
            secret: "short-secret".into(),
            is_root: false,
            read_only: false,
            description: String::new(),
        })
        .await
        .unwrap();
    let client = gw.client_for("SHORTLIVED", "short-secret");
    client.list_buckets().send().await.unwrap();
    // Deleted behind the gateway's back, straight in SQL (as the operator or another gateway would).
    gw.sql()
        .await
        .execute("SELECT pgvs3.delete_access_key('SHORTLIVED')", &[])
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match client.list_buckets().send().await {
            Err(err) => {
                assert_eq!(err.into_service_error().meta().code(), Some("InvalidAccessKeyId"));
                break;
            }
            Ok(_) => {
                assert!(tokio::time::Instant::now() < deadline, "the deletion was not heard");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    }
    gw.stop().await;
}

#[tokio::test]
async fn http2_clients_are_served_too() {
    use http_body_util::BodyExt;
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("http2").send().await.unwrap();
    put(&gw, "http2", "obj", b"over h2".to_vec()).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let signer = common::raw::Signer {
        access_key: common::ROOT_ACCESS_KEY.into(),
        secret_key: common::ROOT_SECRET_KEY.into(),
        host: gw.gateway.s3_addr.to_string(),
    };
    let mut request = http::Request::builder().uri(format!("{}/http2/obj", gw.endpoint()));
    for (name, value) in signer.sign(
        "GET",
        "/http2/obj",
        &[],
        &common::raw::sha256_hex(b""),
        std::time::SystemTime::now(),
    ) {
        if name != "host" {
            request = request.header(name, value);
        }
    }
    let response = client.request(request.body(Default::default()).unwrap()).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.into_body().collect().await.unwrap().to_bytes().as_ref(),
        b"over h2"
    );
    gw.stop().await;
}
