//! Eviction by last use, within the bucket's size limit.

use super::*;

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
        .map(|row| row.get("key"))
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
        .get("count");
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
                    "SELECT accessed_at > now() - interval '1 minute' AS used FROM s3c.ranges WHERE key = 'ranged-used'",
                    &[],
                )
                .await
                .unwrap()
                .get("used");
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
        .map(|row| row.get("key"))
        .collect();
    assert_eq!(kept, ["ranged-used", "whole-new"]);
    pair.stop().await;
}
