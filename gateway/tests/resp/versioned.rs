//! RESP TTLs on a bucket whose S3 versioning changes: a string there is an S3 version, which
//! takes no TTL. What a TTL command answers must be what the database stored, whatever this
//! gateway's catalog has seen of the change, and a TTL set while the bucket was unversioned
//! must not outlive the change as a row that expires and is never reaped.

use crate::redis_rs;
use pgvs3_testkit as common;

use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
use common::TestGateway;
use redis_rs::{connect, error, query};

const VERSIONED_TTL: &str =
    "ERR TTLs are not supported on strings of a bucket with S3 versioning: use a lifecycle rule";

/// The stored expiry of string `key` of bucket `resp` (NULL: none).
async fn stored_expiry(sql: &tokio_postgres::Client, key: &str) -> Option<std::time::SystemTime> {
    let namespace: String = sql
        .query_one("SELECT namespace FROM pgvs3.buckets WHERE name = 'resp'", &[])
        .await
        .unwrap()
        .get("namespace");
    sql.query_one(
        &format!(
            "SELECT o.expires_at FROM \"{namespace}\".objects o JOIN pgvs3.buckets b ON b.id = o.bucket_id
              WHERE b.name = 'resp' AND o.key = $1"
        ),
        &[&key],
    )
    .await
    .unwrap()
    .get("expires_at")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ttl_is_judged_by_the_versioning_committed_not_the_cached() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let _: () = query(&mut con, &["SET", "k", "v"]).await;
    // Versioning turned on without the catalog's notification (triggers off for this session):
    // the gateway's cache has the bucket unversioned, as a gateway that has not heard of the
    // change yet has it.
    let sql = gateway.sql().await;
    sql.batch_execute(
        "SET session_replication_role = replica;
         UPDATE pgvs3.buckets SET versioning = 'Enabled' WHERE name = 'resp';
         RESET session_replication_role",
    )
    .await
    .unwrap();

    assert_eq!(error(&mut con, &["EXPIRE", "k", "100"]).await, VERSIONED_TTL);
    assert_eq!(
        error(&mut con, &["PEXPIREAT", "k", "99999999999999"]).await,
        VERSIONED_TTL
    );
    assert_eq!(query::<i64>(&mut con, &["TTL", "k"]).await, -1);
    assert_eq!(error(&mut con, &["SET", "k", "w", "EX", "100"]).await, VERSIONED_TTL);
    assert_eq!(query::<String>(&mut con, &["GET", "k"]).await, "v", "refused whole");
    assert_eq!(
        error(&mut con, &["SET", "new", "w", "PX", "100000"]).await,
        VERSIONED_TTL
    );
    assert_eq!(query::<Option<String>>(&mut con, &["GET", "new"]).await, None);
    assert_eq!(stored_expiry(&sql, "k").await, None);
    // A typed key is no S3 version: its TTL stands.
    let _: i64 = query(&mut con, &["RPUSH", "l", "a"]).await;
    assert_eq!(query::<i64>(&mut con, &["EXPIRE", "l", "100"]).await, 1);
    assert!(query::<i64>(&mut con, &["TTL", "l"]).await > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_set_ex_racing_a_versioning_change_keeps_no_ttl_that_would_hide_it() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let _: () = query(&mut con, &["SET", "k", "before"]).await;
    let namespace: String = {
        let sql = gateway.sql().await;
        sql.query_one("SELECT namespace FROM pgvs3.buckets WHERE name = 'resp'", &[])
            .await
            .unwrap()
            .get("namespace")
    };
    // A second session holds the key's row: the SET's upsert, planned while the bucket was
    // unversioned, waits on it inside its transaction while the versioning change is made.
    let mut holder = gateway.sql().await;
    let held = holder.transaction().await.unwrap();
    held.execute(
        &format!(
            "SELECT 1 FROM \"{namespace}\".objects o JOIN pgvs3.buckets b ON b.id = o.bucket_id
              WHERE b.name = 'resp' AND o.key = 'k' FOR UPDATE OF o"
        ),
        &[],
    )
    .await
    .unwrap();
    let watch = gateway.sql().await;
    let mut setter = connect(&gateway).await;
    let set = tokio::spawn(async move { query::<String>(&mut setter, &["SET", "k", "after", "EX", "100000"]).await });
    common::eventually(std::time::Duration::from_secs(60), "the SET waits on the row", || {
        let watch = &watch;
        async move { (common::lock_waiters(watch).await == 1).then_some(()) }
    })
    .await;
    let s3 = gateway.client.clone();
    let change = tokio::spawn(async move {
        s3.put_bucket_versioning()
            .bucket("resp")
            .versioning_configuration(
                VersioningConfiguration::builder()
                    .status(BucketVersioningStatus::Enabled)
                    .build(),
            )
            .send()
            .await
            .unwrap();
    });
    // Either the change is made while the SET waits (the interleaving that left a TTL behind),
    // or it waits for the SET's transaction (a second lock waiter).
    common::eventually(std::time::Duration::from_secs(60), "the change made or waiting", || {
        let (watch, change) = (&watch, &change);
        async move { (change.is_finished() || common::lock_waiters(watch).await == 2).then_some(()) }
    })
    .await;
    held.rollback().await.unwrap();
    change.await.unwrap();
    assert_eq!(set.await.unwrap(), "OK");
    // The write is there, and keeps no TTL: at its expiry the row would have stayed, invisible
    // and never reaped (a version is never), until overwritten.
    assert_eq!(query::<String>(&mut con, &["GET", "k"]).await, "after");
    assert_eq!(query::<i64>(&mut con, &["TTL", "k"]).await, -1);
    assert_eq!(stored_expiry(&gateway.sql().await, "k").await, None);
    assert_eq!(error(&mut con, &["EXPIRE", "k", "100"]).await, VERSIONED_TTL);
}

/// RESTORE with a TTL in a versioned bucket: a string there is refused as SET ... EX is (it
/// was written as a version without its TTL, which PTTL then showed as -1), and nothing is
/// written; a typed key keeps its TTL, and a string restored without one is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restore_with_a_ttl_in_a_versioned_bucket() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let _: () = query(&mut con, &["SET", "s", "v"]).await;
    let _: i64 = query(&mut con, &["RPUSH", "l", "a"]).await;
    let dump = |key: &'static str| redis::cmd("DUMP").arg(key).clone();
    let string: Vec<u8> = dump("s").query_async(&mut con).await.unwrap();
    let list: Vec<u8> = dump("l").query_async(&mut con).await.unwrap();
    gateway
        .client
        .put_bucket_versioning()
        .bucket("resp")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let restore = |key: &str, ttl: &str, payload: &[u8]| {
        let mut cmd = redis::cmd("RESTORE");
        cmd.arg(key).arg(ttl).arg(payload);
        cmd
    };

    let refused = restore("s2", "100000", &string)
        .query_async::<()>(&mut con)
        .await
        .unwrap_err();
    assert_eq!(
        format!("{} {}", refused.code().unwrap_or("?"), refused.detail().unwrap_or("")),
        VERSIONED_TTL
    );
    assert_eq!(query::<Option<String>>(&mut con, &["GET", "s2"]).await, None);
    // REPLACE over an existing string: refused, the string left as it was.
    let mut replace = restore("s", "100000", &string);
    replace.arg("REPLACE");
    assert!(replace.query_async::<()>(&mut con).await.is_err());
    assert_eq!(query::<i64>(&mut con, &["PTTL", "s"]).await, -1);
    assert_eq!(query::<String>(&mut con, &["GET", "s"]).await, "v");

    let _: () = restore("l2", "100000", &list).query_async(&mut con).await.unwrap();
    assert!(query::<i64>(&mut con, &["PTTL", "l2"]).await > 0);
    let _: () = restore("s3", "0", &string).query_async(&mut con).await.unwrap();
    assert_eq!(query::<String>(&mut con, &["GET", "s3"]).await, "v");
    assert_eq!(query::<i64>(&mut con, &["PTTL", "s3"]).await, -1);
}
