//! DeleteBucket racing a write into the bucket (aws-sdk-s3): a PUT, a multipart completion or a
//! copy whose object row waits (for another transaction's row of the same key) after it found
//! the bucket, while DeleteBucket runs. As in AWS S3 one of the two fails: the write with
//! NoSuchBucket, or DeleteBucket with BucketNotEmpty; never both succeed, leaving an object
//! acknowledged in no bucket (and, for a completion, parts and chunks nothing reaps).
//! The waits are made, not hoped for: a transaction of the test holds an uncommitted row of the
//! key (or, in a versioned bucket, the key's locks), and each step waits until PostgreSQL shows
//! the request's backend waiting for a lock.

use pgvs3_testkit as common;

use std::future::Future;
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::types::BucketVersioningStatus;
use common::s3::{
    completion, copy_request, error_code, once, put_object, put_request, set_versioning, start_upload, upload_part,
};
use common::{TestGateway, await_statement_wait, statement_waits};

/// How the race ended: each request's answer (`Ok`, or its S3 error code).
struct Outcome {
    write: Result<(), String>,
    delete: Result<(), String>,
}

/// An uncommitted row of `race/k`, which an unversioned write of `k` waits for.
const HOLD_ROW: &str = "INSERT INTO s3p.objects (bucket_id, key, size, etag, inline)
                        SELECT id, 'k', 0, 'held', ''::bytea FROM pgvs3.buckets WHERE name = 'race'";

/// The locks of `race/k` as a RESP write of the key holds them (store/kv.rs: its keyspace's shared,
/// then the key's), which a versioned write of `k` waits for while it holds the keyspace shared.
const HOLD_KEY_LOCKS: &str = "SELECT pg_advisory_xact_lock(id::int4, hashtext('k'))
                                FROM (SELECT id, pg_advisory_xact_lock_shared(-id) FROM pgvs3.buckets
                                       WHERE name = 'race') keyspace";

/// Runs `write` (which writes `race/k`) against DeleteBucket of `race` so that the write waits
/// for what `hold` holds of `k` while DeleteBucket runs, then lets it go.
async fn race<W>(gw: &TestGateway, hold: &str, write: W) -> Outcome
where
    W: Future<Output = Result<(), String>> + Send + 'static,
{
    let holder = gw.sql().await;
    let watcher = gw.sql().await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder.execute(hold, &[]).await.unwrap();
    let write = tokio::spawn(write);
    await_statement_wait(&watcher, "%s3p%objects%").await;

    let s3 = once(&gw.client);
    let delete = tokio::spawn(async move {
        s3.delete_bucket()
            .bucket("race")
            .send()
            .await
            .map(drop)
            .map_err(|err| error_code(&err))
    });
    // DeleteBucket either answers at once (it did not wait for the write) or waits for it.
    while !delete.is_finished() && !statement_waits(&watcher, "%drop_bucket%").await {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    holder.batch_execute("ROLLBACK").await.unwrap();
    Outcome {
        write: write.await.unwrap(),
        delete: delete.await.unwrap(),
    }
}

/// After a race: one of the two failed, the write with NoSuchBucket or DeleteBucket with
/// BucketNotEmpty, and no row (object, version, upload, part) is left without its bucket.
async fn assert_one_won(gw: &TestGateway, outcome: &Outcome) {
    match (&outcome.write, &outcome.delete) {
        (Ok(()), Err(code)) => assert_eq!(code, "BucketNotEmpty"),
        (Err(code), Ok(())) => assert_eq!(code, "NoSuchBucket"),
        (write, delete) => panic!("the write answered {write:?} and DeleteBucket {delete:?}"),
    }
    let sql = gw.sql().await;
    let orphans: i64 = sql
        .query_one(
            "SELECT (SELECT count(*) FROM s3p.objects WHERE bucket_id NOT IN (SELECT id FROM pgvs3.buckets))
                  + (SELECT count(*) FROM s3p.versions WHERE bucket_id NOT IN (SELECT id FROM pgvs3.buckets))
                  + (SELECT count(*) FROM s3p.uploads WHERE bucket_id NOT IN (SELECT id FROM pgvs3.buckets))
                  + (SELECT count(*) FROM s3p.parts p WHERE NOT EXISTS (SELECT 1 FROM s3p.uploads u WHERE u.upload_id = p.owner_id)
                        AND NOT EXISTS (SELECT 1 FROM s3p.objects o WHERE o.body_id = p.owner_id)
                        AND NOT EXISTS (SELECT 1 FROM s3p.versions v WHERE v.body_id = p.owner_id)) AS orphans",
            &[],
        )
        .await
        .unwrap()
        .get("orphans");
    assert_eq!(orphans, 0, "rows of no bucket (or parts of nothing)");
    if outcome.write.is_ok() {
        let read = gw.client.get_object().bucket("race").key("k").send().await;
        assert!(read.is_ok(), "the acknowledged object reads back: {read:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_put_racing_delete_bucket_is_never_lost() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("race").send().await.unwrap();
    let s3 = gw.client.clone();
    let outcome = race(&gw, HOLD_ROW, async move {
        put_request(&s3, "race", "k", b"acknowledged".to_vec())
            .send()
            .await
            .map(drop)
            .map_err(|err| error_code(&err))
    })
    .await;
    assert_one_won(&gw, &outcome).await;
    gw.stop().await;
}

/// In a versioned bucket a write holds the keyspace shared while it waits for the key's lock,
/// and DeleteBucket waits for the keyspace after it took the bucket's write lock: the write must
/// not then ask for the write lock (which it held first), or the two wait for each other and
/// PostgreSQL cancels one as a deadlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_versioned_put_racing_delete_bucket_never_deadlocks() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("race").send().await.unwrap();
    set_versioning(&gw.client, "race", BucketVersioningStatus::Enabled).await;
    let s3 = once(&gw.client);
    let outcome = race(&gw, HOLD_KEY_LOCKS, async move {
        put_request(&s3, "race", "k", b"acknowledged".to_vec())
            .send()
            .await
            .map(drop)
            .map_err(|err| error_code(&err))
    })
    .await;
    assert_one_won(&gw, &outcome).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_completion_racing_delete_bucket_is_never_lost() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("race").send().await.unwrap();
    let upload = start_upload(&gw.client, "race", "k").await;
    let etag = upload_part(&gw.client, "race", "k", &upload, 1, &common::noise(100_000, 1)).await;
    let s3: Client = gw.client.clone();
    let outcome = race(&gw, HOLD_ROW, async move {
        s3.complete_multipart_upload()
            .bucket("race")
            .key("k")
            .upload_id(upload)
            .multipart_upload(completion(&[(1, &etag)]))
            .send()
            .await
            .map(drop)
            .map_err(|err| error_code(&err))
    })
    .await;
    assert_one_won(&gw, &outcome).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copy_racing_delete_bucket_is_never_lost() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("source").send().await.unwrap();
    gw.client.create_bucket().bucket("race").send().await.unwrap();
    put_object(&gw.client, "source", "original", common::noise(200_000, 2)).await;
    let s3 = gw.client.clone();
    let outcome = race(&gw, HOLD_ROW, async move {
        copy_request(&s3, "race", "k", "source/original")
            .send()
            .await
            .map(drop)
            .map_err(|err| error_code(&err))
    })
    .await;
    assert_one_won(&gw, &outcome).await;
    gw.stop().await;
}

/// DeleteBucket of a bucket with a multipart upload in progress succeeds, as with a general
/// purpose bucket in AWS S3 (only objects, versions and delete markers make it not empty), and
/// the upload goes with it: its parts' bodies are retired, not left for an age-based reaper.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delete_bucket_takes_uploads_in_progress_with_it() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("race").send().await.unwrap();
    let upload = start_upload(&gw.client, "race", "big").await;
    upload_part(&gw.client, "race", "big", &upload, 1, &common::noise(100_000, 3)).await;
    gw.client.delete_bucket().bucket("race").send().await.unwrap();
    let sql = gw.sql().await;
    let left: i64 = sql
        .query_one(
            "SELECT (SELECT count(*) FROM s3p.uploads) + (SELECT count(*) FROM s3p.parts) AS left",
            &[],
        )
        .await
        .unwrap()
        .get("left");
    assert_eq!(left, 0, "no upload or part outlives its bucket");
    gw.client.create_bucket().bucket("race").send().await.unwrap();
    let listed = gw.client.list_multipart_uploads().bucket("race").send().await.unwrap();
    assert!(
        listed.uploads().is_empty(),
        "a bucket of the same name starts without uploads"
    );
    gw.stop().await;
}
