//! Writes to a cache bucket: at the origin before the answer (small), or acknowledged and
//! uploaded by the worker (large, multipart); a clean written-back body is an entry like any other.

use super::*;

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
        .map(|row| row.get("origin_etag"))
        .collect();
    assert_eq!(clean, [Some(at_origin.trim_matches('"').to_owned())]);
    let copied: i64 = sql
        .query_one(
            "SELECT (SELECT count(*) FROM s3c.objects) + (SELECT count(*) FROM s3c.chunks) AS entries",
            &[],
        )
        .await
        .unwrap()
        .get("entries");
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
            "SELECT validated_at > now() - interval '1 minute' AS validated FROM s3w.objects",
            &[],
        )
        .await
        .unwrap()
        .get("validated");
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
        .get("count");
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
        .get("count");
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
            "SELECT validated_at = '-infinity' AS expired FROM s3w.objects WHERE key = 'clean.bin'",
            &[],
        )
        .await
        .unwrap()
        .get("expired");
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
                "SELECT accessed_at > now() - interval '1 minute' AS used FROM s3w.objects WHERE key = 'clean.bin'",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, bool>("used")
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
        .get("count");
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
        .map(|row| row.get("key"))
        .collect();
    assert_eq!(kept, ["pending.bin"]);
    assert_eq!(read_object(client, CACHE, "pending.bin").await, pending);
    pair.stop().await;
}

/// New origin credentials may not reach what the old ones did: what was cached with the old
/// ones is fetched again with the new (re-applying the same settings changes nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn new_origin_credentials_mark_what_was_cached_stale() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let client = &pair.cache.client;
    let sql = pair.cache.sql().await;
    put_object(client, CACHE, "clean.bin", noise(2 << 20, 90)).await;
    uploaded(&pair.cache, "clean.bin").await;
    pair.put_at_origin("filled", noise(1000, 91)).await;
    read_object(client, CACHE, "filled").await;
    filled(&pair.cache, "filled").await;
    let expired = || async {
        let row = sql
            .query_one(
                "SELECT (SELECT bool_and(validated_at = '-infinity') FROM s3c.objects) AS filled,
                        (SELECT bool_and(validated_at = '-infinity') FROM s3w.objects WHERE key = 'clean.bin') AS clean",
                &[],
            )
            .await
            .unwrap();
        (row.get::<_, bool>("filled"), row.get::<_, bool>("clean"))
    };
    let store = &pair.cache.gateway.store;
    let mut settings = origin_settings(&pair.origin, CacheMode::WriteBack);
    store.catalog().put_origin(CACHE, &settings).await.unwrap();
    assert_eq!(
        expired().await,
        (false, false),
        "the same settings again change nothing"
    );

    settings.secret_key = "another-secret".into();
    store.catalog().put_origin(CACHE, &settings).await.unwrap();
    assert_eq!(expired().await, (true, true));
    // The new credentials are refused at the origin: the stale entry is not served.
    let err = client
        .get_object()
        .bucket(CACHE)
        .key("filled")
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&err), 403, "{err:?}");
    pair.stop().await;
}
