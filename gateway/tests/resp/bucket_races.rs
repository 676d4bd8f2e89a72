//! S3 DeleteBucket racing RESP writes into the bucket a database maps to. As with an S3 write
//! (gateway/tests/s3/bucket_races.rs), one of the two fails: never both succeed, which answered
//! the write OK with nothing written (an acknowledged write lost), and never a deadlock.
//! The waits are made, not hoped for: a transaction of the test holds the keyspace as a RESP
//! batch does, DeleteBucket comes to wait for it, then the write comes to wait too, and each step
//! waits until PostgreSQL shows the waiter.

use pgvs3_testkit as common;

use std::time::Duration;

use aws_sdk_s3::config::retry::RetryConfig;
use common::TestGateway;
use common::resp::{RawResp, Value, encode};

/// How many statements of the gateway's database wait for a lock that one like `query` is.
async fn waiting(sql: &tokio_postgres::Client, query: &str) -> i64 {
    common::query_count(
        sql,
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1",
        &[&query],
    )
    .await
}

/// Sends `commands` (pipelined) so that they run while DeleteBucket of their database's bucket
/// waits for a RESP batch under way; returns DeleteBucket's outcome and the last command's reply.
async fn race(gateway: &TestGateway, commands: &[&[&str]]) -> (Result<(), String>, Value) {
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    // The gateway knows the bucket before it is dropped.
    assert_eq!(raw.command(&["GET", "k"]).await, Value::Nil);
    let (holder, watch) = (gateway.sql().await, gateway.sql().await);
    holder
        .batch_execute("BEGIN; SELECT pg_advisory_xact_lock_shared(-id) FROM pgvs3.buckets WHERE name = 'resp'")
        .await
        .unwrap();
    let s3 = aws_sdk_s3::Client::from_conf(
        gateway
            .client
            .config()
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .build(),
    );
    let delete = tokio::spawn(async move {
        s3.delete_bucket()
            .bucket("resp")
            .send()
            .await
            .map(drop)
            .map_err(|err| common::s3::error_code(&err))
    });
    common::eventually(Duration::from_secs(10), "DeleteBucket waiting", || async {
        (waiting(&watch, "%drop_bucket%").await == 1).then_some(())
    })
    .await;
    let mut pipeline = Vec::new();
    for command in commands {
        let args: Vec<&[u8]> = command.iter().map(|arg| arg.as_bytes()).collect();
        pipeline.extend(encode(&args));
    }
    raw.send(&pipeline).await;
    common::eventually(Duration::from_secs(10), "the write waiting", || async {
        (common::lock_waiters(&watch).await == 2).then_some(())
    })
    .await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    let mut last = Value::Nil;
    for _ in commands {
        last = raw.reply().await.expect("a reply");
    }
    (delete.await.unwrap(), last)
}

/// Rows of a bucket that is gone: strings (objects) and typed keys.
async fn orphans(gateway: &TestGateway) -> i64 {
    let sql = gateway.sql().await;
    let namespaces: Vec<String> = sql
        .query("SELECT name FROM pgvs3.namespaces", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get("name"))
        .collect();
    let mut orphans = common::query_count(
        &sql,
        "SELECT count(*) FROM pgvs3.resp_keys WHERE bucket_id NOT IN (SELECT id FROM pgvs3.buckets)",
        &[],
    )
    .await;
    for namespace in namespaces {
        orphans += common::query_count(
            &sql,
            &format!("SELECT count(*) FROM {namespace}.objects WHERE bucket_id NOT IN (SELECT id FROM pgvs3.buckets)"),
            &[],
        )
        .await;
    }
    orphans
}

/// A string write, a typed one, a script's and a transaction's, each waiting behind DeleteBucket
/// of its (empty) bucket: DeleteBucket succeeds, and the write, coming after it, finds the bucket
/// gone, writes nothing and says so (in EXEC, each command of the transaction). Before, SET and
/// the script answered OK having written nothing (the upsert joins the bucket's row, gone by
/// then): an acknowledged write lost; HSET answered a foreign key violation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resp_write_racing_delete_bucket_is_never_lost() {
    let cases: [(&str, &[&[&str]]); 4] = [
        ("SET", &[&["SET", "k", "v"]]),
        ("HSET", &[&["HSET", "h", "f", "v"]]),
        ("EVAL", &[&["EVAL", "return redis.call('SET', KEYS[1], 'v')", "1", "k"]]),
        (
            "EXEC",
            &[&["MULTI"], &["SET", "k", "v"], &["HSET", "h", "f", "v"], &["EXEC"]],
        ),
    ];
    let gone = Value::Error("ERR the bucket of this database does not exist".into());
    for (name, commands) in cases {
        let gateway = TestGateway::with_resp(&[]).await;
        let (delete, reply) = race(&gateway, commands).await;
        assert_eq!(delete, Ok(()), "{name}: DeleteBucket of the empty bucket");
        assert_eq!(
            orphans(&gateway).await,
            0,
            "{name}: rows of no bucket (the write answered {reply:?})"
        );
        let expected = match name {
            "EXEC" => Value::Array(vec![gone.clone(), gone.clone()]),
            _ => gone.clone(),
        };
        assert_eq!(reply, expected, "{name}");
    }
}

/// The other order: a write that holds its bucket and waits (for a key's lock, here held by the
/// test as another RESP writer of the key would) makes DeleteBucket wait for it, with no deadlock;
/// the write commits and answers OK, and DeleteBucket then finds the key: BucketNotEmpty.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delete_bucket_waits_for_a_resp_write_under_way() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["GET", "k"]).await, Value::Nil);
    let (holder, watch) = (gateway.sql().await, gateway.sql().await);
    holder
        .batch_execute(
            "BEGIN; SELECT pg_advisory_xact_lock(id::int4, hashtext('k')) FROM pgvs3.buckets WHERE name = 'resp'",
        )
        .await
        .unwrap();
    raw.send(&encode(&[b"SET", b"k", b"v"])).await;
    common::eventually(Duration::from_secs(10), "the write waiting", || async {
        (common::lock_waiters(&watch).await == 1).then_some(())
    })
    .await;
    let s3 = gateway.client.clone();
    let delete = tokio::spawn(async move {
        s3.delete_bucket()
            .bucket("resp")
            .send()
            .await
            .map(drop)
            .map_err(|err| common::s3::error_code(&err))
    });
    common::eventually(Duration::from_secs(10), "DeleteBucket waiting", || async {
        (waiting(&watch, "%drop_bucket%").await == 1).then_some(())
    })
    .await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(raw.reply().await, Some(Value::Simple("OK".into())));
    assert_eq!(delete.await.unwrap(), Err("BucketNotEmpty".to_owned()));
    assert_eq!(raw.command(&["GET", "k"]).await, Value::bulk("v"));
}
