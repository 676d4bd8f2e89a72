//! Bucket notifications of a cache bucket: one event per acknowledged write, none for fills.

use super::*;

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
        .get("count");
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
