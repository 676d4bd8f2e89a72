//! A cache bucket going (DeleteBucket, or its OriginCache removed: `drop_origin`) while a write
//! into it waits after it found the bucket: a fill of a whole object or of range chunks, a
//! write-back PUT. The write either commits before the bucket goes (and goes with it) or finds
//! it gone and writes nothing: no entry, range chunk, body, write-back or outbox row is left of
//! no bucket, nothing deadlocks, and a write-back the client was told of is never dropped
//! without reaching the origin.
//! The waits are made, not hoped for: a transaction of the test holds an uncommitted row of the
//! key, and each step waits until PostgreSQL shows the request's backend waiting for a lock.

use super::*;

use common::s3::{error_code, once};
use common::{await_statement_wait, statement_waits};

/// How a race ended: the write's answer (`Ok` with what it read, or its S3 error code) and the
/// removal's (`Ok`, or its error).
struct Outcome {
    write: Result<Vec<u8>, String>,
    removal: Result<(), String>,
}

/// Runs `write` (of key `k` of the cache bucket) against `removal` so that the write waits for
/// the row `hold` inserts (uncommitted) while `removal` runs: `waits_like` is the write's
/// statement, `removal_like` the removal's, as pg_stat_activity shows them.
async fn race<W, R>(pair: &Pair, hold: &str, waits_like: &str, write: W, removal_like: &str, removal: R) -> Outcome
where
    W: Future<Output = Result<Vec<u8>, String>> + Send + 'static,
    R: Future<Output = Result<(), String>> + Send + 'static,
{
    let holder = pair.cache.sql().await;
    let watcher = pair.cache.sql().await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder.execute(hold, &[&CACHE]).await.unwrap();
    let write = tokio::spawn(write);
    await_statement_wait(&watcher, waits_like).await;
    let removal = tokio::spawn(removal);
    // The removal either ends at once (it did not wait for the write) or waits for it.
    while !removal.is_finished() && !statement_waits(&watcher, removal_like).await {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    holder.batch_execute("ROLLBACK").await.unwrap();
    Outcome {
        write: write.await.unwrap(),
        removal: removal.await.unwrap(),
    }
}

/// Rows of the cache database that belong to no bucket, and bodies nothing refers to.
async fn orphans(cache: &TestGateway) -> i64 {
    let sql = cache.sql().await;
    let mut orphans = query_count(
        &sql,
        "SELECT (SELECT count(*) FROM pgvs3.origin_outbox WHERE bucket_id NOT IN (SELECT id FROM pgvs3.buckets))
              + (SELECT count(*) FROM s3c.ranges WHERE bucket_id NOT IN (SELECT id FROM pgvs3.buckets))",
        &[],
    )
    .await;
    for ns in ["s3c", "s3w"] {
        orphans += query_count(
            &sql,
            &format!(
                "SELECT (SELECT count(*) FROM {ns}.objects WHERE bucket_id NOT IN (SELECT id FROM pgvs3.buckets))
                      + (SELECT count(*) FROM {ns}.uploads WHERE bucket_id NOT IN (SELECT id FROM pgvs3.buckets))
                      + (SELECT count(DISTINCT c.body_id) FROM {ns}.chunks c
                          WHERE NOT EXISTS (SELECT 1 FROM {ns}.objects o WHERE o.body_id = c.body_id)
                            AND NOT EXISTS (SELECT 1 FROM {ns}.versions v WHERE v.body_id = c.body_id)
                            AND NOT EXISTS (SELECT 1 FROM {ns}.parts p WHERE p.body_id = c.body_id)
                            AND NOT EXISTS (SELECT 1 FROM {ns}.retired_bodies r WHERE r.body_id = c.body_id))"
            ),
            &[],
        )
        .await;
    }
    orphans
}

/// An uncommitted filled entry of `k` (`$1`: the cache bucket), which a fill of `k` waits for.
const HOLD_ENTRY: &str = "INSERT INTO s3c.objects (bucket_id, key, size, etag, inline)
                          SELECT id, 'k', 0, 'held', ''::bytea FROM pgvs3.buckets WHERE name = $1";

/// An uncommitted first range chunk of `k`, which a range fill of `k` waits for.
const HOLD_CHUNK: &str =
    "INSERT INTO s3c.ranges (bucket_id, key, chunk, chunk_size, size, etag, last_modified, meta, data)
                          SELECT id, 'k', 0, 65536, 1, 'held', now(), '{}', ''::bytea
                            FROM pgvs3.buckets WHERE name = $1";

/// An uncommitted body of `k` written here, which a staged write of `k` waits for.
const HOLD_BODY: &str = "INSERT INTO s3w.objects (bucket_id, key, size, etag, inline)
                         SELECT id, 'k', 0, 'held', ''::bytea FROM pgvs3.buckets WHERE name = $1";

/// DeleteBucket of `CACHE`, without the SDK's retries.
fn delete_bucket(pair: &Pair) -> impl Future<Output = Result<(), String>> + Send + 'static {
    let s3 = once(&pair.cache.client);
    async move {
        s3.delete_bucket()
            .bucket(CACHE)
            .send()
            .await
            .map(drop)
            .map_err(|err| error_code(&err))
    }
}

/// A GET of `k` from the cache bucket (`range`: of that range), its body or its error code.
fn get(pair: &Pair, range: Option<&str>) -> impl Future<Output = Result<Vec<u8>, String>> + Send + 'static {
    let s3 = once(&pair.cache.client);
    let range = range.map(str::to_owned);
    async move {
        let answer = s3
            .get_object()
            .bucket(CACHE)
            .key("k")
            .set_range(range)
            .send()
            .await
            .map_err(|err| error_code(&err))?;
        Ok(answer.body.collect().await.map_err(|err| err.to_string())?.to_vec())
    }
}

/// A miss whose fill waits to write its entry while DeleteBucket runs: the bucket goes, the
/// entry and its body with it. Cache entries never make a cache bucket not empty (they are the
/// origin's objects), so DeleteBucket succeeds whichever way the race goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fill_racing_delete_bucket_leaves_nothing_behind() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let body = noise(300_000, 1);
    pair.put_at_origin("k", body.clone()).await;
    let outcome = race(
        &pair,
        HOLD_ENTRY,
        "%INSERT INTO s3c.objects%",
        get(&pair, None),
        "%drop_bucket%",
        delete_bucket(&pair),
    )
    .await;
    assert_eq!(outcome.removal, Ok(()));
    match &outcome.write {
        Ok(read) => assert!(read == &body, "the fill's reader gets the origin's body"),
        Err(code) => assert_eq!(code, "NoSuchBucket"),
    }
    assert_eq!(orphans(&pair.cache).await, 0, "rows of no bucket, or bodies of nothing");
    pair.stop().await;
}

/// The same for a range fill, which stores aligned chunks (and drops the chunks of any other
/// version of the object).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_range_fill_racing_delete_bucket_leaves_nothing_behind() {
    let pair = Pair::start(CacheMode::WriteBack).await;
    let body = noise(300_000, 2);
    pair.put_at_origin("k", body.clone()).await;
    let outcome = race(
        &pair,
        HOLD_CHUNK,
        "%INSERT INTO s3c.ranges%",
        get(&pair, Some("bytes=10-99")),
        "%drop_bucket%",
        delete_bucket(&pair),
    )
    .await;
    assert_eq!(outcome.removal, Ok(()));
    match &outcome.write {
        Ok(read) => assert!(read[..] == body[10..100], "the range's reader gets the origin's bytes"),
        Err(code) => assert_eq!(code, "NoSuchBucket"),
    }
    assert_eq!(orphans(&pair.cache).await, 0, "rows of no bucket, or bodies of nothing");
    pair.stop().await;
}

/// A write-back PUT (acknowledged once stored here, uploaded later) whose body waits to be
/// written while the cache is removed as the operator removes it (`drop_origin` without force,
/// which refuses while write-backs are pending). Either the removal refuses, the body being
/// pending, and it still reaches the origin; or the body was uploaded first; never is an
/// acknowledged body dropped with the cache, nor left behind in no bucket with its outbox row.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_back_racing_the_cache_removal_is_never_lost() {
    let pair = Pair::start_with(|origin| Origin {
        write_back_threshold: 1,
        ..origin_settings(origin, CacheMode::WriteBack)
    })
    .await;
    let body = noise(100_000, 3);
    let s3 = once(&pair.cache.client);
    let written = body.clone();
    let put = async move {
        put_request(&s3, CACHE, "k", written)
            .send()
            .await
            .map(|_| Vec::new())
            .map_err(|err| error_code(&err))
    };
    let catalog = pair.cache.gateway.store.catalog().clone();
    let removal = async move {
        match catalog.drop_origin(CACHE, false).await {
            Ok(true) => Ok(()),
            Ok(false) => Err("no such cache".to_owned()),
            Err(err) => Err(err.to_string()),
        }
    };
    let outcome = race(
        &pair,
        HOLD_BODY,
        "%INSERT INTO%s3w%.objects%",
        put,
        "%drop_origin%",
        removal,
    )
    .await;
    assert_eq!(orphans(&pair.cache).await, 0, "rows of no bucket, or bodies of nothing");
    match (&outcome.write, &outcome.removal) {
        (Ok(_), Err(_)) => {
            // Refused: the cache stays, and the acknowledged body goes on to the origin.
            eventually("the write-back to reach the origin", || async {
                pair.origin_has("k").await.as_ref() == Some(&body)
            })
            .await;
        }
        (Ok(_), Ok(())) => assert!(
            pair.origin_has("k").await.as_ref() == Some(&body),
            "the cache was removed with an acknowledged write-back not at the origin"
        ),
        (Err(code), Ok(())) => assert_eq!(code, "NoSuchBucket"),
        (write, removal) => panic!("the PUT answered {write:?} and the removal {removal:?}"),
    }
    pair.stop().await;
}
