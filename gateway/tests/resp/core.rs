//! RESP: redis-rs and a raw client against a gateway on a real PostgreSQL. Every command of the
//! table, RESP3, expiry, S3 cross-visibility, concurrency, pipelines and transactions.

use crate::redis_rs;
use pgvs3_testkit as common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_s3::primitives::ByteStream;
use common::resp::{RawResp, Value, encode};
use common::{TestGateway, noise};
use redis::AsyncCommands;
use redis_rs::{client, command, connect, query};

use common::resp::live::{LiveRedis, same_lines};

fn unix_millis() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test]
async fn set_and_get_with_every_option() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;

    assert_eq!(query::<Option<String>>(&mut con, &["GET", "missing"]).await, None);
    assert_eq!(query::<String>(&mut con, &["SET", "k", "v1"]).await, "OK");
    assert_eq!(query::<String>(&mut con, &["GET", "k"]).await, "v1");
    // NX / XX
    assert_eq!(query::<Option<String>>(&mut con, &["SET", "k", "v2", "NX"]).await, None);
    assert_eq!(query::<String>(&mut con, &["GET", "k"]).await, "v1");
    assert_eq!(
        query::<Option<String>>(&mut con, &["SET", "new", "v", "XX"]).await,
        None
    );
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "new"]).await, 0);
    assert_eq!(query::<String>(&mut con, &["SET", "k", "v2", "XX"]).await, "OK");
    // GET returns the old value, also with NX
    assert_eq!(query::<String>(&mut con, &["SET", "k", "v3", "GET"]).await, "v2");
    assert_eq!(
        query::<Option<String>>(&mut con, &["SET", "fresh", "x", "NX", "GET"]).await,
        None
    );
    assert_eq!(query::<String>(&mut con, &["GET", "fresh"]).await, "x");
    // EX / PX / EXAT / PXAT / KEEPTTL
    query::<String>(&mut con, &["SET", "k", "v", "EX", "100"]).await;
    let ttl: i64 = query(&mut con, &["TTL", "k"]).await;
    assert!((99..=100).contains(&ttl), "{ttl}");
    query::<String>(&mut con, &["SET", "k", "v", "PX", "100000"]).await;
    let pttl: i64 = query(&mut con, &["PTTL", "k"]).await;
    assert!((99_000..=100_000).contains(&pttl), "{pttl}");
    let at = (unix_millis() / 1000 + 500).to_string();
    query::<String>(&mut con, &["SET", "k", "v", "EXAT", &at]).await;
    assert_eq!(query::<String>(&mut con, &["EXPIRETIME", "k"]).await, at);
    let pat = (unix_millis() + 600_000).to_string();
    query::<String>(&mut con, &["SET", "k", "v", "PXAT", &pat]).await;
    assert_eq!(query::<String>(&mut con, &["PEXPIRETIME", "k"]).await, pat);
    query::<String>(&mut con, &["SET", "k", "kept", "KEEPTTL"]).await;
    assert_eq!(query::<String>(&mut con, &["PEXPIRETIME", "k"]).await, pat);
    query::<String>(&mut con, &["SET", "k", "cleared"]).await;
    assert_eq!(query::<i64>(&mut con, &["TTL", "k"]).await, -1);
    // Exact texts for bad options.
    assert_eq!(
        raw.command(&["SET", "k", "v", "NX", "XX"]).await.error(),
        "ERR syntax error"
    );
    assert_eq!(
        raw.command(&["SET", "k", "v", "EX", "1", "PX", "1"]).await.error(),
        "ERR syntax error"
    );
    assert_eq!(
        raw.command(&["SET", "k", "v", "BOGUS"]).await.error(),
        "ERR syntax error"
    );
    assert_eq!(
        raw.command(&["SET", "k", "v", "EX", "0"]).await.error(),
        "ERR invalid expire time in 'set' command"
    );
    assert_eq!(
        raw.command(&["SET", "k", "v", "EX", "ten"]).await.error(),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        raw.command(&["SET", "k"]).await.error(),
        "ERR wrong number of arguments for 'set' command"
    );
    assert_eq!(query::<String>(&mut con, &["GET", "k"]).await, "cleared");
}

#[tokio::test]
async fn string_commands() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;

    assert_eq!(query::<i64>(&mut con, &["SETNX", "a", "1"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["SETNX", "a", "2"]).await, 0);
    assert_eq!(query::<String>(&mut con, &["SETEX", "e", "100", "v"]).await, "OK");
    assert!(query::<i64>(&mut con, &["TTL", "e"]).await > 98);
    assert_eq!(query::<String>(&mut con, &["PSETEX", "p", "100000", "v"]).await, "OK");
    assert!(query::<i64>(&mut con, &["PTTL", "p"]).await > 98_000);
    assert_eq!(
        raw.command(&["SETEX", "e", "-1", "v"]).await.error(),
        "ERR invalid expire time in 'setex' command"
    );
    assert_eq!(query::<String>(&mut con, &["MSET", "m1", "x", "m2", "y"]).await, "OK");
    assert_eq!(
        query::<Vec<Option<String>>>(&mut con, &["MGET", "m1", "nope", "m2"]).await,
        vec![Some("x".into()), None, Some("y".into())]
    );
    assert_eq!(
        raw.command(&["MSET", "m1", "x", "m2"]).await.error(),
        "ERR wrong number of arguments for 'mset' command"
    );
    assert_eq!(query::<i64>(&mut con, &["MSETNX", "m1", "z", "m3", "z"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "m3"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["MSETNX", "m3", "z", "m4", "z"]).await, 1);
    assert_eq!(query::<String>(&mut con, &["GETSET", "e", "plain"]).await, "v");
    assert_eq!(query::<i64>(&mut con, &["TTL", "e"]).await, -1, "GETSET clears the TTL");
    assert_eq!(query::<String>(&mut con, &["GETDEL", "m4"]).await, "z");
    assert_eq!(query::<Option<String>>(&mut con, &["GETDEL", "m4"]).await, None);
    assert_eq!(query::<String>(&mut con, &["GETEX", "m3", "EX", "50"]).await, "z");
    assert!(query::<i64>(&mut con, &["TTL", "m3"]).await > 48);
    assert_eq!(query::<String>(&mut con, &["GETEX", "m3", "PERSIST"]).await, "z");
    assert_eq!(query::<i64>(&mut con, &["TTL", "m3"]).await, -1);
    assert_eq!(query::<String>(&mut con, &["GETEX", "m3"]).await, "z");
    assert_eq!(raw.command(&["GETEX", "m3", "EX"]).await.error(), "ERR syntax error");
    assert_eq!(query::<i64>(&mut con, &["APPEND", "s", "Hello"]).await, 5);
    assert_eq!(query::<i64>(&mut con, &["APPEND", "s", " World"]).await, 11);
    assert_eq!(query::<i64>(&mut con, &["STRLEN", "s"]).await, 11);
    assert_eq!(query::<i64>(&mut con, &["STRLEN", "nope"]).await, 0);
    assert_eq!(query::<String>(&mut con, &["GETRANGE", "s", "0", "4"]).await, "Hello");
    assert_eq!(query::<String>(&mut con, &["GETRANGE", "s", "-5", "-1"]).await, "World");
    assert_eq!(query::<String>(&mut con, &["SUBSTR", "s", "6", "100"]).await, "World");
    assert_eq!(query::<i64>(&mut con, &["SETRANGE", "s", "6", "Redis"]).await, 11);
    assert_eq!(query::<String>(&mut con, &["GET", "s"]).await, "Hello Redis");
    assert_eq!(query::<i64>(&mut con, &["SETRANGE", "pad", "3", "x"]).await, 4);
    assert_eq!(query::<Vec<u8>>(&mut con, &["GET", "pad"]).await, b"\0\0\0x");
    assert_eq!(query::<i64>(&mut con, &["SETRANGE", "none", "5", ""]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "none"]).await, 0);
    assert_eq!(
        raw.command(&["SETRANGE", "s", "-1", "x"]).await.error(),
        "ERR offset is out of range"
    );
    assert_eq!(
        raw.command(&["SETRANGE", "s", "536870911", "xx"]).await.error(),
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    );
    // APPEND and SETRANGE keep the TTL.
    query::<String>(&mut con, &["SET", "t", "1", "EX", "100"]).await;
    query::<i64>(&mut con, &["APPEND", "t", "2"]).await;
    query::<i64>(&mut con, &["SETRANGE", "t", "0", "3"]).await;
    assert!(query::<i64>(&mut con, &["TTL", "t"]).await > 98);
}

#[tokio::test]
async fn counters_are_exact_and_refuse_non_integers() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;

    assert_eq!(query::<i64>(&mut con, &["INCR", "n"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["INCRBY", "n", "41"]).await, 42);
    assert_eq!(query::<i64>(&mut con, &["DECR", "n"]).await, 41);
    assert_eq!(query::<i64>(&mut con, &["DECRBY", "n", "50"]).await, -9);
    assert_eq!(query::<String>(&mut con, &["GET", "n"]).await, "-9");
    assert_eq!(query::<String>(&mut con, &["INCRBYFLOAT", "f", "10.5"]).await, "10.5");
    assert_eq!(query::<String>(&mut con, &["INCRBYFLOAT", "f", "0.25"]).await, "10.75");
    assert_eq!(query::<String>(&mut con, &["INCRBYFLOAT", "f", "-0.75"]).await, "10");
    query::<String>(&mut con, &["SET", "word", "abc"]).await;
    query::<String>(&mut con, &["SET", "spaced", " 1"]).await;
    for key in ["word", "spaced", "f"] {
        if key == "f" {
            query::<String>(&mut con, &["SET", "f", "1.5"]).await;
        }
        assert_eq!(
            raw.command(&["INCR", key]).await.error(),
            "ERR value is not an integer or out of range"
        );
    }
    assert_eq!(
        raw.command(&["INCRBY", "n", "1x"]).await.error(),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        raw.command(&["INCRBYFLOAT", "word", "1"]).await.error(),
        "ERR value is not a valid float"
    );
    assert_eq!(
        raw.command(&["INCRBYFLOAT", "n", "nan"]).await.error(),
        "ERR value is not a valid float"
    );
    query::<String>(&mut con, &["SET", "big", &i64::MAX.to_string()]).await;
    assert_eq!(
        raw.command(&["INCR", "big"]).await.error(),
        "ERR increment or decrement would overflow"
    );
    assert_eq!(query::<String>(&mut con, &["GET", "big"]).await, i64::MAX.to_string());
    // INCR keeps the TTL.
    query::<String>(&mut con, &["SET", "ttl", "1", "EX", "100"]).await;
    assert_eq!(query::<i64>(&mut con, &["INCR", "ttl"]).await, 2);
    assert!(query::<i64>(&mut con, &["TTL", "ttl"]).await > 98);
}

#[tokio::test]
async fn incr_from_16_connections_is_exact() {
    let gateway = TestGateway::with_resp(&[]).await;
    let client = client(&gateway, "");
    let mut tasks = Vec::new();
    for _ in 0..16 {
        // Separate connections (not one multiplexed one), so the increments race for real.
        let mut con = redis_rs::open(&client).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..100 {
                let _: i64 = command(&["INCR", "counter"]).query_async(&mut con).await.unwrap();
            }
            // A pipelined burst too: several increments in one batch.
            let mut pipe = redis::pipe();
            for _ in 0..25 {
                pipe.cmd("INCRBY").arg("counter").arg(2);
            }
            let _: Vec<i64> = pipe.query_async(&mut con).await.unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut con = connect(&gateway).await;
    assert_eq!(query::<i64>(&mut con, &["GET", "counter"]).await, 16 * (100 + 50));
}

/// Batches over many keys lock the whole keyspace instead of each key; mixed with small batches
/// on the same keys, every increment still counts exactly once.
#[tokio::test]
async fn large_and_small_batches_on_the_same_keys_stay_exact() {
    let gateway = TestGateway::with_resp(&[]).await;
    let client = client(&gateway, "");
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let mut con = redis_rs::open(&client).await;
        tasks.push(tokio::spawn(async move {
            for round in 0..3 {
                if worker % 2 == 0 {
                    // 100 distinct keys in one pipeline: the keyspace-lock path.
                    let mut pipe = redis::pipe();
                    for key in 0..100 {
                        pipe.cmd("INCR").arg(format!("k{key}"));
                    }
                    let _: Vec<i64> = pipe.query_async(&mut con).await.unwrap();
                } else {
                    for key in (round..100).step_by(3) {
                        let _: i64 = command(&["INCR", &format!("k{key}")])
                            .query_async(&mut con)
                            .await
                            .unwrap();
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut con = connect(&gateway).await;
    let keys: Vec<String> = (0..100).map(|key| format!("k{key}")).collect();
    let values: Vec<i64> = redis::cmd("MGET").arg(&keys).query_async(&mut con).await.unwrap();
    // 4 pipelining workers add 3 to every key; 4 single-command workers add 1 to every key.
    assert!(values.iter().all(|value| *value == 4 * 3 + 4), "{values:?}");
}

#[tokio::test]
async fn expiry_is_exact_on_read() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;

    query::<String>(&mut con, &["SET", "short", "v", "PX", "300"]).await;
    let deadline = std::time::Instant::now() + Duration::from_millis(300);
    // Until the deadline the key may be there; from then on it must be gone at once.
    while std::time::Instant::now() + Duration::from_millis(50) < deadline {
        assert!(query::<i64>(&mut con, &["PTTL", "short"]).await <= 300);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep_until(tokio::time::Instant::from_std(deadline + Duration::from_millis(5))).await;
    assert_eq!(query::<Option<String>>(&mut con, &["GET", "short"]).await, None);
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "short"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["TTL", "short"]).await, -2);
    assert_eq!(query::<i64>(&mut con, &["DBSIZE"]).await, 0);
    // An expired key is absent for conditional writes too.
    assert_eq!(query::<i64>(&mut con, &["SETNX", "short", "again"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["TTL", "short"]).await, -1);

    // EXPIRE family with conditions.
    query::<String>(&mut con, &["SET", "k", "v"]).await;
    assert_eq!(query::<i64>(&mut con, &["TTL", "k"]).await, -1);
    assert_eq!(query::<i64>(&mut con, &["EXPIRE", "k", "100", "XX"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["EXPIRE", "k", "100", "NX"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["EXPIRE", "k", "200", "NX"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["EXPIRE", "k", "50", "GT"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["EXPIRE", "k", "200", "GT"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["PEXPIRE", "k", "150000", "LT"]).await, 1);
    assert!((149..=150).contains(&query::<i64>(&mut con, &["TTL", "k"]).await));
    let at = unix_millis() / 1000 + 1000;
    assert_eq!(query::<i64>(&mut con, &["EXPIREAT", "k", &at.to_string()]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["EXPIRETIME", "k"]).await, at);
    assert_eq!(
        query::<i64>(&mut con, &["PEXPIREAT", "k", &(at * 1000 + 5).to_string()]).await,
        1
    );
    assert_eq!(query::<i64>(&mut con, &["PEXPIRETIME", "k"]).await, at * 1000 + 5);
    assert_eq!(query::<i64>(&mut con, &["PERSIST", "k"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["PERSIST", "k"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["EXPIRETIME", "k"]).await, -1);
    assert_eq!(query::<i64>(&mut con, &["EXPIRETIME", "nope"]).await, -2);
    assert_eq!(query::<i64>(&mut con, &["EXPIRE", "nope", "10"]).await, 0);
    assert_eq!(
        raw.command(&["EXPIRE", "k", "10", "NX", "XX"]).await.error(),
        "ERR NX and XX, GT or LT options at the same time are not compatible"
    );
    assert_eq!(
        raw.command(&["EXPIRE", "k", "10", "GT", "LT"]).await.error(),
        "ERR GT and LT options at the same time are not compatible"
    );
    // A time in the past deletes at once.
    assert_eq!(query::<i64>(&mut con, &["EXPIRE", "k", "-1"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "k"]).await, 0);
    query::<String>(&mut con, &["SET", "k", "v"]).await;
    assert_eq!(query::<i64>(&mut con, &["PEXPIREAT", "k", "1"]).await, 1);
    assert_eq!(query::<Option<String>>(&mut con, &["GET", "k"]).await, None);

    // The reaper removes expired rows later; reads never depended on it.
    query::<String>(&mut con, &["SET", "gone", "v", "PX", "1"]).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let stats = gateway
        .gateway
        .store
        .reap_retired(Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(stats.expired_objects, 1, "{stats:?}");
}

#[tokio::test]
async fn keyspace_commands() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;

    query::<String>(
        &mut con,
        &["MSET", "user:1", "a", "user:2", "b", "user:10", "c", "other", "d"],
    )
    .await;
    assert_eq!(query::<i64>(&mut con, &["DBSIZE"]).await, 4);
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "user:1", "user:1", "nope"]).await, 2);
    assert_eq!(raw.command(&["TYPE", "user:1"]).await, Value::Simple("string".into()));
    assert_eq!(raw.command(&["TYPE", "nope"]).await, Value::Simple("none".into()));
    let mut keys: Vec<String> = query(&mut con, &["KEYS", "user:*"]).await;
    keys.sort();
    assert_eq!(keys, vec!["user:1", "user:10", "user:2"]);
    assert_eq!(
        query::<Vec<String>>(&mut con, &["KEYS", "user:?"]).await,
        vec!["user:1", "user:2"]
    );
    assert_eq!(query::<Vec<String>>(&mut con, &["KEYS", "*er"]).await, vec!["other"]);
    let random: String = query(&mut con, &["RANDOMKEY"]).await;
    assert!(["user:1", "user:2", "user:10", "other"].contains(&random.as_str()));

    // SCAN with a small COUNT walks everything exactly once.
    let mut cursor = "0".to_owned();
    let mut seen = Vec::new();
    let mut rounds = 0;
    loop {
        let (next, page): (String, Vec<String>) = query(&mut con, &["SCAN", &cursor, "COUNT", "1"]).await;
        seen.extend(page);
        rounds += 1;
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    seen.sort();
    assert_eq!(seen, vec!["other", "user:1", "user:10", "user:2"]);
    assert!(rounds >= 4);
    let (_, matched): (String, Vec<String>) = query(&mut con, &["SCAN", "0", "MATCH", "user:1*", "COUNT", "100"]).await;
    assert_eq!(matched, vec!["user:1", "user:10"]);
    let (_, typed): (String, Vec<String>) = query(&mut con, &["SCAN", "0", "TYPE", "hash"]).await;
    assert!(typed.is_empty());
    assert_eq!(raw.command(&["SCAN", "12345"]).await.error(), "ERR invalid cursor");
    // redis-rs's scan iterator.
    let mut iter: redis::AsyncIter<String> = con.scan_match("user:*").await.unwrap();
    let mut scanned = Vec::new();
    while let Some(key) = iter.next_item().await {
        scanned.push(key.unwrap());
    }
    drop(iter);
    assert_eq!(scanned.len(), 3);

    // RENAME / RENAMENX / COPY keep values and TTLs.
    query::<String>(&mut con, &["SET", "src", "value", "EX", "100"]).await;
    assert_eq!(query::<String>(&mut con, &["RENAME", "src", "dst"]).await, "OK");
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "src"]).await, 0);
    assert_eq!(query::<String>(&mut con, &["GET", "dst"]).await, "value");
    assert!(query::<i64>(&mut con, &["TTL", "dst"]).await > 98);
    assert_eq!(raw.command(&["RENAME", "src", "x"]).await.error(), "ERR no such key");
    assert_eq!(query::<i64>(&mut con, &["RENAMENX", "dst", "other"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["RENAMENX", "dst", "dst2"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["COPY", "dst2", "other"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["COPY", "dst2", "other", "REPLACE"]).await, 1);
    assert_eq!(query::<String>(&mut con, &["GET", "other"]).await, "value");
    assert_eq!(query::<i64>(&mut con, &["COPY", "dst2", "copy"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["COPY", "nope", "copy2"]).await, 0);
    assert_eq!(query::<String>(&mut con, &["GET", "dst2"]).await, "value");

    assert_eq!(query::<i64>(&mut con, &["DEL", "user:1", "user:2", "nope"]).await, 2);
    assert_eq!(query::<i64>(&mut con, &["UNLINK", "user:10"]).await, 1);
    assert_eq!(
        query::<Vec<String>>(&mut con, &["KEYS", "user:*"]).await,
        Vec::<String>::new()
    );
    assert_eq!(
        raw.command(&["FLUSHDB"]).await.error(),
        "ERR FLUSHDB is disabled on this server (start pgvs3 with --resp-flushdb)"
    );
    assert!(query::<i64>(&mut con, &["DBSIZE"]).await > 0);
}

#[tokio::test]
async fn flushdb_when_enabled_and_databases_map_to_buckets() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb", "--resp-databases", "1=cache,2=sessions"]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["SET", "k", "zero"]).await, Value::Simple("OK".into()));
    assert_eq!(raw.command(&["SELECT", "1"]).await, Value::Simple("OK".into()));
    assert_eq!(raw.command(&["GET", "k"]).await, Value::Nil);
    assert_eq!(raw.command(&["SET", "k", "one"]).await, Value::Simple("OK".into()));
    assert_eq!(
        raw.command(&["SELECT", "3"]).await.error(),
        "ERR DB index is out of range"
    );
    assert_eq!(
        raw.command(&["SELECT", "x"]).await.error(),
        "ERR value is not an integer or out of range"
    );
    let cached = gateway
        .client
        .get_object()
        .bucket("cache")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(cached.body.collect().await.unwrap().into_bytes().as_ref(), b"one");
    assert_eq!(raw.command(&["FLUSHDB"]).await, Value::Simple("OK".into()));
    assert_eq!(raw.command(&["DBSIZE"]).await, Value::Int(0));
    assert_eq!(raw.command(&["SELECT", "0"]).await, Value::Simple("OK".into()));
    assert_eq!(raw.command(&["GET", "k"]).await, Value::bulk("zero"));
    assert_eq!(raw.command(&["FLUSHDB", "LATER"]).await.error(), "ERR syntax error");
}

#[tokio::test]
async fn resp_and_s3_see_the_same_objects() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let s3 = &gateway.client;

    // Small and chunked values written over RESP, read over S3.
    query::<String>(&mut con, &["SET", "from/resp", "hello s3"]).await;
    let object = s3.get_object().bucket("resp").key("from/resp").send().await.unwrap();
    let expected_etag = format!("\"{}\"", hex::encode(md5_digest(b"hello s3")));
    assert_eq!(object.e_tag(), Some(expected_etag.as_str()));
    assert_eq!(object.body.collect().await.unwrap().into_bytes().as_ref(), b"hello s3");
    let large = noise(300 * 1024 + 17, 5);
    let _: () = redis::cmd("SET")
        .arg("large")
        .arg(&large[..])
        .query_async(&mut con)
        .await
        .unwrap();
    let object = s3.get_object().bucket("resp").key("large").send().await.unwrap();
    assert_eq!(object.content_length(), Some(large.len() as i64));
    assert_eq!(object.body.collect().await.unwrap().into_bytes().as_ref(), &large[..]);

    // Written over S3, read over RESP, inline and chunked.
    s3.put_object()
        .bucket("resp")
        .key("from/s3")
        .body(ByteStream::from_static(b"hello resp"))
        .send()
        .await
        .unwrap();
    assert_eq!(query::<String>(&mut con, &["GET", "from/s3"]).await, "hello resp");
    let big = noise(1024 * 1024 + 3, 9);
    s3.put_object()
        .bucket("resp")
        .key("big")
        .body(ByteStream::from(big.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(query::<Vec<u8>>(&mut con, &["GET", "big"]).await, big);
    assert_eq!(query::<i64>(&mut con, &["STRLEN", "big"]).await, big.len() as i64);
    assert_eq!(
        query::<Vec<u8>>(&mut con, &["GETRANGE", "big", "100000", "100009"]).await,
        &big[100_000..100_010]
    );
    // APPEND to a chunked value rewrites it as a new body.
    assert_eq!(
        query::<i64>(&mut con, &["APPEND", "big", "!"]).await,
        big.len() as i64 + 1
    );
    let object = s3.get_object().bucket("resp").key("big").send().await.unwrap();
    let body = object.body.collect().await.unwrap().into_bytes();
    assert_eq!(&body[..big.len()], &big[..]);
    assert_eq!(body[big.len()], b'!');
    // RENAME of a chunked value survives the reaper (the old body is retired, the new one kept).
    assert_eq!(query::<String>(&mut con, &["RENAME", "large", "renamed"]).await, "OK");
    gateway.gateway.store.reap_retired(Duration::ZERO).await.unwrap();
    assert_eq!(query::<Vec<u8>>(&mut con, &["GET", "renamed"]).await, large);
    let listed = s3.list_objects_v2().bucket("resp").send().await.unwrap();
    let mut names: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    names.sort();
    assert_eq!(names, vec!["big", "from/resp", "from/s3", "renamed"]);

    // Deleted over RESP: gone over S3; an S3 delete is a RESP miss.
    assert_eq!(query::<i64>(&mut con, &["DEL", "from/resp"]).await, 1);
    let missing = s3.get_object().bucket("resp").key("from/resp").send().await;
    assert!(missing.unwrap_err().into_service_error().is_no_such_key());
    s3.delete_object().bucket("resp").key("from/s3").send().await.unwrap();
    assert_eq!(query::<Option<String>>(&mut con, &["GET", "from/s3"]).await, None);
    // An expired key is absent over S3 too.
    query::<String>(&mut con, &["SET", "brief", "v", "PX", "1"]).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let expired = s3.get_object().bucket("resp").key("brief").send().await;
    assert!(expired.unwrap_err().into_service_error().is_no_such_key());
}

/// Values written in one batch have their MD5s computed together (eight at a time where the
/// CPU can): each S3 ETag is still its own value's MD5, whatever the others' lengths.
#[tokio::test]
async fn values_written_together_each_get_their_own_etag() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let lengths = [0usize, 1, 55, 56, 63, 64, 65, 4096, 4096, 4097, 20_000, 70_000];
    let values: Vec<Vec<u8>> = lengths
        .iter()
        .enumerate()
        .map(|(i, len)| noise(*len, 40 + i as u64))
        .collect();
    let mut mset = redis::cmd("MSET");
    for (i, value) in values.iter().enumerate() {
        mset.arg(format!("together/{i}")).arg(value.as_slice());
    }
    let _: () = mset.query_async(&mut con).await.unwrap();
    for (i, value) in values.iter().enumerate() {
        let head = gateway
            .client
            .head_object()
            .bucket("resp")
            .key(format!("together/{i}"))
            .send()
            .await
            .unwrap();
        let expected = format!("\"{}\"", hex::encode(md5_digest(value)));
        assert_eq!(
            head.e_tag(),
            Some(expected.as_str()),
            "value {i}, {} bytes",
            value.len()
        );
    }
}

fn md5_digest(data: &[u8]) -> [u8; 16] {
    use md5::Digest;
    md5::Md5::digest(data).into()
}

#[tokio::test]
async fn pipelines_keep_request_order() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut pipe = redis::pipe();
    for i in 0..200 {
        match i % 4 {
            0 => pipe.cmd("SET").arg(format!("p{i}")).arg(i),
            1 => pipe.cmd("GET").arg(format!("p{}", i - 1)),
            2 => pipe.cmd("INCR").arg("pc"),
            _ => pipe.cmd("MGET").arg(format!("p{}", i - 3)).arg("nope"),
        };
    }
    let replies: Vec<redis::Value> = pipe.query_async(&mut con).await.unwrap();
    assert_eq!(replies.len(), 200);
    for (i, reply) in replies.iter().enumerate() {
        let expected = match i % 4 {
            0 => redis::Value::Okay,
            1 => redis::Value::BulkString((i - 1).to_string().into_bytes()),
            2 => redis::Value::Int(i as i64 / 4 + 1),
            _ => redis::Value::Array(vec![
                redis::Value::BulkString((i - 3).to_string().into_bytes()),
                redis::Value::Nil,
            ]),
        };
        assert_eq!(reply, &expected, "reply {i}");
    }

    // A raw pipeline in one write, with an error in the middle: replies still line up.
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let mut burst = Vec::new();
    for args in [
        &["SET", "a", "1"][..],
        &["INCR", "a"],
        &["GET", "a"],
        &["INCRBY", "a", "x"],
        &["NOSUCH"],
        &["GET", "a"],
        &["PING"],
    ] {
        let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
        burst.extend(common::resp::encode(&args));
    }
    raw.send(&burst).await;
    let mut replies = Vec::new();
    for _ in 0..7 {
        replies.push(raw.reply().await.unwrap());
    }
    assert_eq!(
        replies,
        vec![
            Value::Simple("OK".into()),
            Value::Int(2),
            Value::bulk("2"),
            Value::Error("ERR value is not an integer or out of range".into()),
            Value::Error("ERR unknown command 'NOSUCH', with args beginning with: ".into()),
            Value::bulk("2"),
            Value::Simple("PONG".into()),
        ]
    );
}

#[tokio::test]
async fn transactions_with_multi_exec_and_watch() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    // redis-rs atomic pipeline: MULTI ... EXEC.
    let (one, two, got): (i64, i64, String) = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg("tx")
        .cmd("INCR")
        .arg("tx")
        .cmd("GET")
        .arg("tx")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!((one, two, got.as_str()), (1, 2, "2"));

    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let mut other = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["EXEC"]).await.error(), "ERR EXEC without MULTI");
    assert_eq!(raw.command(&["DISCARD"]).await.error(), "ERR DISCARD without MULTI");
    // WATCH: a change by another client aborts EXEC with a null reply.
    assert_eq!(raw.command(&["WATCH", "w"]).await, Value::Simple("OK".into()));
    assert_eq!(
        other.command(&["SET", "w", "changed"]).await,
        Value::Simple("OK".into())
    );
    assert_eq!(raw.command(&["MULTI"]).await, Value::Simple("OK".into()));
    assert_eq!(
        raw.command(&["WATCH", "w"]).await.error(),
        "ERR WATCH inside MULTI is not allowed"
    );
    assert_eq!(
        raw.command(&["MULTI"]).await.error(),
        "ERR MULTI calls can not be nested"
    );
    assert_eq!(raw.command(&["SET", "w", "mine"]).await, Value::Simple("QUEUED".into()));
    assert_eq!(raw.command(&["EXEC"]).await, Value::Nil);
    assert_eq!(other.command(&["GET", "w"]).await, Value::bulk("changed"));
    // Unchanged watched key: EXEC runs.
    raw.command(&["WATCH", "w"]).await;
    raw.command(&["MULTI"]).await;
    raw.command(&["SET", "w", "mine"]).await;
    raw.command(&["PING"]).await;
    raw.command(&["GET", "w"]).await;
    assert_eq!(
        raw.command(&["EXEC"]).await,
        Value::Array(vec![
            Value::Simple("OK".into()),
            Value::Simple("PONG".into()),
            Value::bulk("mine")
        ])
    );
    // An error while queueing aborts the transaction.
    raw.command(&["MULTI"]).await;
    raw.command(&["SET", "w", "never"]).await;
    assert_eq!(
        raw.command(&["GET"]).await.error(),
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(
        raw.command(&["EXEC"]).await.error(),
        "EXECABORT Transaction discarded because of previous errors."
    );
    assert_eq!(raw.command(&["GET", "w"]).await, Value::bulk("mine"));
    // DISCARD drops the queue; a runtime error inside EXEC affects only its command.
    raw.command(&["MULTI"]).await;
    raw.command(&["SET", "w", "never"]).await;
    assert_eq!(raw.command(&["DISCARD"]).await, Value::Simple("OK".into()));
    raw.command(&["MULTI"]).await;
    raw.command(&["SET", "s", "text"]).await;
    raw.command(&["INCR", "s"]).await;
    raw.command(&["SET", "after", "yes"]).await;
    assert_eq!(
        raw.command(&["EXEC"]).await,
        Value::Array(vec![
            Value::Simple("OK".into()),
            Value::Error("ERR value is not an integer or out of range".into()),
            Value::Simple("OK".into()),
        ])
    );
    assert_eq!(raw.command(&["GET", "after"]).await, Value::bulk("yes"));
    assert_eq!(raw.command(&["UNWATCH"]).await, Value::Simple("OK".into()));
}

/// A read-only MULTI/EXEC or script sees one moment, as in Redis, also when it reads a string
/// (loaded by the gateway) and a list (a call in PostgreSQL): here every committed transaction of the
/// writer keeps `a` equal to the length of `b`, so every reader's EXEC must see them equal. (The
/// two reads once ran as statements of their own, and a writer's commit between them showed
/// `a` one behind.)
#[tokio::test]
async fn a_read_only_transaction_sees_one_moment() {
    const WRITES: usize = 300;
    let gateway = TestGateway::with_resp(&[]).await;
    let mut writer = RawResp::connect(gateway.resp_addr()).await;
    let mut reader = RawResp::connect(gateway.resp_addr()).await;
    let writing = tokio::spawn(async move {
        for n in 1..=WRITES {
            assert_eq!(writer.command(&["MULTI"]).await, Value::Simple("OK".into()));
            for command in [&["SET", "a", &n.to_string()][..], &["RPUSH", "b", "x"]] {
                assert_eq!(writer.command(command).await, Value::Simple("QUEUED".into()));
            }
            let Value::Array(replies) = writer.command(&["EXEC"]).await else {
                panic!("EXEC")
            };
            assert_eq!(replies[1], Value::Int(n as i64));
        }
    });
    let mut reads = 0;
    while !writing.is_finished() {
        // Alternately a transaction and a read-only script.
        let replies = if reads % 2 == 0 {
            assert_eq!(reader.command(&["MULTI"]).await, Value::Simple("OK".into()));
            assert_eq!(reader.command(&["GET", "a"]).await, Value::Simple("QUEUED".into()));
            assert_eq!(reader.command(&["LLEN", "b"]).await, Value::Simple("QUEUED".into()));
            reader.command(&["EXEC"]).await
        } else {
            let script = "return {redis.call('GET', KEYS[1]), redis.call('LLEN', KEYS[2])}";
            reader.command(&["EVAL_RO", script, "2", "a", "b"]).await
        };
        let Value::Array(replies) = replies else {
            panic!("read {reads}: {replies:?}")
        };
        let a = match &replies[0] {
            Value::Nil => 0,
            Value::Bulk(a) => String::from_utf8_lossy(a).parse::<i64>().unwrap(),
            other => panic!("GET a: {other:?}"),
        };
        assert_eq!(replies[1], Value::Int(a), "read {reads}: a and the length of b");
        reads += 1;
    }
    writing.await.unwrap();
    assert!(reads > 0);
}

/// WATCH fails EXEC on any write of a watched key since WATCH, as Redis's does, also when the
/// key holds at EXEC what it held at WATCH: made and deleted again, deleted and made again, set
/// to the value it had, written and deleted over S3, and before a script. A WATCH dropped
/// (UNWATCH, EXEC, DISCARD, a closed connection) leaves no registration behind. Compared with
/// redis-server 7.0.15, where each of these EXECs answers nil.
#[tokio::test]
async fn watch_sees_a_key_written_and_written_back() {
    let gateway = TestGateway::with_resp(&[]).await;
    let sql = gateway.sql().await;
    let registered = || async {
        sql.query_one("SELECT count(*) AS n FROM pgvs3.resp_watches", &[])
            .await
            .unwrap()
            .get::<_, i64>("n")
    };
    // Registrations an EXEC did not take back are dropped in the background.
    let all_dropped = || async {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while registered().await > 0 {
            assert!(std::time::Instant::now() < deadline, "registrations left behind");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let mut other = RawResp::connect(gateway.resp_addr()).await;
    let ok = || Value::Simple("OK".into());
    // (what the key holds before WATCH, what another client writes before EXEC)
    type Case<'a> = (&'a [&'a [&'a str]], &'a [&'a [&'a str]]);
    let cases: &[Case] = &[
        // Absent at WATCH and at EXEC.
        (&[], &[&["SET", "w", "made"], &["DEL", "w"]]),
        // A hash deleted and made again (its version counter starts over).
        (&[&["HSET", "w", "f", "v"]], &[&["DEL", "w"], &["HSET", "w", "f", "v"]]),
        // A list emptied and pushed again.
        (&[&["RPUSH", "w", "a"]], &[&["LPOP", "w"], &["RPUSH", "w", "a"]]),
        // A string set to the value it had.
        (&[&["SET", "w", "same"]], &[&["SET", "w", "same"]]),
        // A TTL set and taken away.
        (&[&["SET", "w", "v"]], &[&["EXPIRE", "w", "100"], &["PERSIST", "w"]]),
    ];
    for (setup, writes) in cases {
        other.command(&["DEL", "w"]).await;
        for args in *setup {
            other.command(args).await;
        }
        assert_eq!(raw.command(&["WATCH", "w"]).await, ok());
        for args in *writes {
            other.command(args).await;
        }
        assert_eq!(raw.command(&["MULTI"]).await, ok());
        assert_eq!(raw.command(&["SET", "w", "mine"]).await, Value::Simple("QUEUED".into()));
        assert_eq!(raw.command(&["EXEC"]).await, Value::Nil, "after {writes:?}");
        assert_ne!(other.command(&["GET", "w"]).await, Value::bulk("mine"));
    }

    // Over S3: an object put and deleted under the watched name.
    other.command(&["DEL", "w"]).await;
    raw.command(&["WATCH", "w"]).await;
    let s3 = &gateway.client;
    s3.put_object()
        .bucket("resp")
        .key("w")
        .body(ByteStream::from_static(b"s3"))
        .send()
        .await
        .unwrap();
    s3.delete_object().bucket("resp").key("w").send().await.unwrap();
    raw.command(&["MULTI"]).await;
    raw.command(&["SET", "w", "mine"]).await;
    assert_eq!(raw.command(&["EXEC"]).await, Value::Nil);

    // A script queued in the transaction runs under the same check.
    raw.command(&["WATCH", "w"]).await;
    other.command(&["SET", "w", "made"]).await;
    other.command(&["DEL", "w"]).await;
    raw.command(&["MULTI"]).await;
    raw.command(&["EVAL", "return redis.call('SET', KEYS[1], 'mine')", "1", "w"])
        .await;
    assert_eq!(raw.command(&["EXEC"]).await, Value::Nil);
    assert_eq!(other.command(&["EXISTS", "w"]).await, Value::Int(0));

    // Untouched, it runs; a write of another key does not count.
    raw.command(&["WATCH", "w", "w2"]).await;
    other.command(&["SET", "unrelated", "x"]).await;
    raw.command(&["MULTI"]).await;
    raw.command(&["SET", "w", "mine"]).await;
    assert_eq!(raw.command(&["EXEC"]).await, Value::Array(vec![ok()]));
    all_dropped().await;

    // Registrations go with UNWATCH, DISCARD and the connection.
    raw.command(&["WATCH", "w", "w2"]).await;
    raw.command(&["WATCH", "w"]).await;
    assert_eq!(registered().await, 2);
    raw.command(&["UNWATCH"]).await;
    all_dropped().await;
    raw.command(&["WATCH", "w", "w2"]).await;
    raw.command(&["MULTI"]).await;
    raw.command(&["DISCARD"]).await;
    all_dropped().await;
    let mut closing = RawResp::connect(gateway.resp_addr()).await;
    closing.command(&["WATCH", "w", "w2", "w3"]).await;
    assert_eq!(registered().await, 3);
    drop(closing);
    all_dropped().await;
}

/// As Redis: a command refused before it runs (unknown, wrong arity) while queueing makes EXEC
/// answer EXECABORT; one whose arguments are bad is queued, and its error is its place in
/// EXEC's reply, beside the others' results. Compared live with redis-server.
#[tokio::test]
async fn argument_errors_inside_multi_answer_inside_exec_as_redis_does() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = common::resp::live::LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    common::resp::live::same_lines(
        &mut ours,
        &mut theirs,
        &[
            "MULTI",
            "SET k 1",
            "SET k v NX XX",
            "SET k v EX notanumber",
            "INCRBY k 5",
            "EXPIRE k abc",
            "ZADD z NX XX 1 m",
            "HINCRBY h f x",
            "LPUSH l a",
            "GET k",
            "EXEC",
            "GET k",
            "LRANGE l 0 -1",
            // A wrong arity or an unknown command while queueing aborts it all.
            "MULTI",
            "SET k 2",
            "GET",
            "SET k v NX XX",
            "EXEC",
            "MULTI",
            "SET k 3",
            "NOSUCHCOMMAND x",
            "EXEC",
            "GET k",
            // An unknown subcommand, or a subcommand's wrong arity, too.
            "MULTI",
            "SET k 4",
            "OBJECT NOSUCH k",
            "EXEC",
            "MULTI",
            "SET k 5",
            "OBJECT ENCODING",
            "EXEC",
            "GET k",
            // Only bad arguments: every part of EXEC's reply is an error.
            "MULTI",
            "SET k v NX XX",
            "EXEC",
            "GET k",
        ],
    )
    .await;
}

/// SET's and GETEX's options as Redis 7.0 reads them: one given again is taken (the last
/// counts, and only its amount is checked), one that excludes another is a syntax error.
/// Compared live with redis-server.
#[tokio::test]
async fn repeated_string_options_are_taken_as_redis_takes_them() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    let mut lines = Vec::new();
    for options in [
        "EX 500 EX 600",
        "PX 500000 PX 600000",
        "EXAT 99999999990 EXAT 99999999999",
        "EX abc EX 600",
        "EX 0 EX 600",
        "EX 600 EX abc",
        "NX NX",
        "XX XX",
        "GET GET",
        "KEEPTTL KEEPTTL",
        "EX 5 PX 5000",
        "PX 5000 EX 5",
        "NX XX",
        "XX NX",
        "KEEPTTL EX 5",
        "EX 5 KEEPTTL",
        "EX 5 EX",
        "PERSIST",
        "GET NX GET XX",
    ] {
        lines.push("SET k v EX 1000".to_owned());
        lines.push(format!("SET k w {options}"));
        lines.push("GET k".to_owned());
        // An absolute expiry read back as a TTL depends on the instant each server reads it
        // (the two straddled a rounding boundary once): its own time is exact on both.
        lines.push(
            if options.contains("EXAT") {
                "EXPIRETIME k"
            } else {
                "TTL k"
            }
            .to_owned(),
        );
    }
    for options in [
        "EX 500 EX 600",
        "PX 500000 PX 600000",
        "PERSIST PERSIST",
        "EX abc EX 600",
        "EX 600 PERSIST",
        "PERSIST EX 600",
        "EX 5 PX 5000",
        "NX",
        "GET",
        "KEEPTTL",
    ] {
        lines.push("SET k v EX 1000".to_owned());
        lines.push(format!("GETEX k {options}"));
        lines.push("TTL k".to_owned());
    }
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    same_lines(&mut ours, &mut theirs, &lines).await;
}

#[tokio::test]
async fn resp3_after_hello_3() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["GET", "nope"]).await, Value::Nil);
    let Value::Map(hello) = raw.command(&["HELLO", "3"]).await else {
        panic!("HELLO 3 answers with a RESP3 map");
    };
    assert!(hello.contains(&(Value::bulk("proto"), Value::Int(3))));
    assert!(hello.contains(&(Value::bulk("server"), Value::bulk("redis"))));
    raw.send(b"*2\r\n$3\r\nGET\r\n$4\r\nnope\r\n").await;
    raw.send(b"*1\r\n$9\r\nRANDOMKEY\r\n").await;
    let mut bytes_nil = Vec::new();
    for _ in 0..2 {
        bytes_nil.push(raw.reply().await.unwrap());
    }
    assert_eq!(bytes_nil, vec![Value::Nil, Value::Nil]);
    assert_eq!(
        raw.command(&["HELLO", "4"]).await.error(),
        "NOPROTO unsupported protocol version"
    );
    assert_eq!(
        raw.command(&["HELLO", "x"]).await.error(),
        "ERR Protocol version is not an integer or out of range"
    );
    let Value::Map(_) = raw.command(&["CONFIG", "GET", "save"]).await else {
        panic!("CONFIG GET is a map in RESP3");
    };

    // redis-rs speaking RESP3.
    let mut con = redis_rs::open(&client(&gateway, "?protocol=resp3")).await;
    assert_eq!(query::<String>(&mut con, &["SET", "k", "v"]).await, "OK");
    assert_eq!(query::<String>(&mut con, &["GET", "k"]).await, "v");
    assert_eq!(query::<Option<String>>(&mut con, &["GET", "nope"]).await, None);
    assert_eq!(query::<String>(&mut con, &["INCRBYFLOAT", "f", "1.5"]).await, "1.5");
    let info: redis::InfoDict = query(&mut con, &["INFO"]).await;
    assert_eq!(info.get::<String>("redis_mode").as_deref(), Some("standalone"));
}

#[tokio::test]
async fn connection_commands() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["PING"]).await, Value::Simple("PONG".into()));
    assert_eq!(raw.command(&["PING", "hi"]).await, Value::bulk("hi"));
    assert_eq!(raw.command(&["ECHO", "echo"]).await, Value::bulk("echo"));
    let Value::Array(time) = raw.command(&["TIME"]).await else {
        panic!()
    };
    assert_eq!(time.len(), 2);
    let Value::Int(id) = raw.command(&["CLIENT", "ID"]).await else {
        panic!()
    };
    assert!(id > 0);
    assert_eq!(raw.command(&["CLIENT", "GETNAME"]).await, Value::Nil);
    assert_eq!(
        raw.command(&["CLIENT", "SETNAME", "tester"]).await,
        Value::Simple("OK".into())
    );
    assert_eq!(raw.command(&["CLIENT", "GETNAME"]).await, Value::bulk("tester"));
    assert_eq!(
        raw.command(&["CLIENT", "SETNAME", "has space"]).await.error(),
        "ERR Client names cannot contain spaces, newlines or special characters."
    );
    assert_eq!(
        raw.command(&["CLIENT", "SETINFO", "LIB-NAME", "raw"]).await,
        Value::Simple("OK".into())
    );
    let Value::Bulk(list) = raw.command(&["CLIENT", "LIST"]).await else {
        panic!()
    };
    let list = String::from_utf8(list).unwrap();
    assert!(
        list.contains(&format!("id={id} ")) && list.contains("name=tester") && list.contains("lib-name=raw"),
        "{list}"
    );
    let Value::Bulk(info) = raw.command(&["CLIENT", "INFO"]).await else {
        panic!()
    };
    assert!(String::from_utf8(info).unwrap().starts_with(&format!("id={id} ")));
    assert_eq!(
        raw.command(&["CLIENT", "BOGUS"]).await.error(),
        "ERR unknown subcommand 'BOGUS'. Try CLIENT HELP."
    );
    let Value::Int(count) = raw.command(&["COMMAND", "COUNT"]).await else {
        panic!()
    };
    assert!(count > 50);
    let Value::Array(info) = raw.command(&["COMMAND", "INFO", "get", "nosuch"]).await else {
        panic!()
    };
    assert_eq!(info[1], Value::Nil);
    let Value::Array(get) = &info[0] else { panic!() };
    assert_eq!(&get[..2], &[Value::bulk("get"), Value::Int(2)]);
    let Value::Array(all) = raw.command(&["COMMAND"]).await else {
        panic!()
    };
    assert_eq!(all.len() as i64, count);
    assert_eq!(
        raw.command(&["COMMAND", "DOCS", "nosuch"]).await,
        Value::Array(Vec::new())
    );
    raw.command(&["SET", "k", "v"]).await;
    let Value::Bulk(info) = raw.command(&["INFO"]).await else {
        panic!()
    };
    let info = String::from_utf8(info).unwrap();
    assert!(
        info.contains("redis_version:") && info.contains("connected_clients:") && info.contains("db0:keys=1,"),
        "{info}"
    );
    let Value::Bulk(server_only) = raw.command(&["INFO", "server"]).await else {
        panic!()
    };
    assert!(!String::from_utf8(server_only).unwrap().contains("# Keyspace"));
    assert_eq!(raw.command(&["SELECT", "0"]).await, Value::Simple("OK".into()));
    assert_eq!(raw.command(&["RESET"]).await, Value::Simple("RESET".into()));
    assert_eq!(raw.command(&["CLIENT", "GETNAME"]).await, Value::Nil);
    assert_eq!(raw.command(&["QUIT"]).await, Value::Simple("OK".into()));
    assert!(raw.closed().await);

    let metrics = gateway.gateway.store.pool().status();
    assert!(metrics.max_size > 0);
}

/// Temporary (STS) credentials are refused by AUTH, which cannot carry their session token.
#[tokio::test]
async fn auth_refuses_session_credentials() {
    let gateway = TestGateway::with_resp(&[]).await;
    let sql = gateway.sql().await;
    let trust = pgvs3_catalog::sts::Trust {
        issuer: "https://issuer".into(),
        audience: "pgvs3".into(),
        subjects: vec!["system:serviceaccount:apps:reader".into()],
        service_account_uids: None,
    };
    let policy = serde_json::json!({"Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]});
    pgvs3_catalog::sts::put_role(&sql, "r", &trust, &policy, 3600)
        .await
        .unwrap();
    let access_key = "ASIAAAAAAAAAAAAAAAAA";
    let opened = gateway
        .gateway
        .store
        .catalog()
        .open_session(&pgvs3_gateway::store::NewSession {
            access_key,
            secret: "session-secret",
            token_sha256: &[0; 32],
            role: "r",
            subject: "system:serviceaccount:apps:reader",
            session_name: "s",
            seconds: 900,
        })
        .await
        .unwrap();
    assert!(opened.is_some());
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert!(
        raw.command(&["AUTH", access_key, "session-secret"])
            .await
            .error()
            .starts_with("WRONGPASS temporary (STS) credentials need their session token"),
    );
}

#[tokio::test]
async fn auth_with_password_or_access_key() {
    let gateway = TestGateway::with_resp(&["--resp-password", "sesame"]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        raw.command(&["GET", "k"]).await.error(),
        "NOAUTH Authentication required."
    );
    assert_eq!(raw.command(&["PING"]).await.error(), "NOAUTH Authentication required.");
    assert!(
        raw.command(&["HELLO", "3"])
            .await
            .error()
            .starts_with("NOAUTH HELLO must be called")
    );
    assert_eq!(
        raw.command(&["AUTH", "wrong"]).await.error(),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(raw.command(&["AUTH", "sesame"]).await, Value::Simple("OK".into()));
    assert_eq!(raw.command(&["SET", "k", "v"]).await, Value::Simple("OK".into()));
    assert_eq!(raw.command(&["RESET"]).await, Value::Simple("RESET".into()));
    assert_eq!(
        raw.command(&["GET", "k"]).await.error(),
        "NOAUTH Authentication required."
    );

    // Access key and secret from the catalog, as AUTH <user> <pass> and in HELLO.
    let mut keyed = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        keyed
            .command(&["AUTH", common::ROOT_ACCESS_KEY, "not-the-secret"])
            .await
            .error(),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(
        keyed
            .command(&["AUTH", common::ROOT_ACCESS_KEY, common::ROOT_SECRET_KEY])
            .await,
        Value::Simple("OK".into())
    );
    assert_eq!(keyed.command(&["GET", "k"]).await, Value::bulk("v"));
    let mut hello = RawResp::connect(gateway.resp_addr()).await;
    let Value::Map(_) = hello
        .command(&["HELLO", "3", "AUTH", "default", "sesame", "SETNAME", "h"])
        .await
    else {
        panic!("HELLO 3 AUTH answers with a map");
    };
    assert_eq!(hello.command(&["CLIENT", "GETNAME"]).await, Value::bulk("h"));

    // redis-rs with a password in the URL.
    let url = format!("redis://:sesame@{}/", gateway.resp_addr());
    let mut con = redis_rs::open(&redis::Client::open(url).unwrap()).await;
    assert_eq!(query::<String>(&mut con, &["GET", "k"]).await, "v");

    // Without a password on loopback, AUTH <password> is an error as in Redis.
    let open = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(open.resp_addr()).await;
    assert_eq!(
        raw.command(&["AUTH", "x"]).await.error(),
        "ERR AUTH <password> called without any password configured for the default user. \
         Are you sure your configuration is correct?"
    );
    assert_eq!(raw.command(&["PING"]).await, Value::Simple("PONG".into()));
}

#[tokio::test]
async fn writes_on_a_read_only_database_get_readonly() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["SET", "k", "v"]).await, Value::Simple("OK".into()));
    raw.command(&["XADD", "s", "1-1", "f", "v"]).await;
    assert_eq!(
        raw.command(&["XGROUP", "CREATE", "s", "g", "0"]).await,
        Value::Simple("OK".into())
    );
    // What a hot standby does to every write: the database refuses it (SQLSTATE 25006).
    let sql = gateway.sql().await;
    let database: String = sql
        .query_one("SELECT current_database() AS name", &[])
        .await
        .unwrap()
        .get("name");
    sql.batch_execute(&format!(
        "ALTER DATABASE {database} SET default_transaction_read_only = on"
    ))
    .await
    .unwrap();
    sql.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
        &[],
    )
    .await
    .unwrap();
    let readonly = "READONLY You can't write against a read only replica.";
    // The pool notices its closed connections (each one as its task reads the server's goodbye,
    // later under load); bounded retries until it has fresh ones.
    let mut answer = raw.command(&["SET", "k", "w"]).await;
    for _ in 0..100 {
        if answer.error() == readonly {
            break;
        }
        answer = raw.command(&["SET", "k", "w"]).await;
    }
    assert_eq!(answer.error(), readonly);
    assert_eq!(raw.command(&["INCR", "n"]).await.error(), readonly);
    assert_eq!(raw.command(&["DEL", "k"]).await.error(), readonly);
    assert_eq!(raw.command(&["GET", "k"]).await, Value::bulk("v"));
    // BITFIELD_RO reads ("v" is 0x76); BITFIELD's writes and BITOP are writes.
    assert_eq!(
        raw.command(&["BITFIELD_RO", "k", "GET", "u8", "0"]).await,
        Value::Array(vec![Value::Int(0x76)])
    );
    assert_eq!(
        raw.command(&["BITFIELD", "k", "SET", "u8", "0", "1"]).await.error(),
        readonly
    );
    assert_eq!(raw.command(&["BITOP", "NOT", "k2", "k"]).await.error(), readonly);
    // XREADGROUP moves its group's cursor: a write. XPENDING reads.
    let read = ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"];
    assert_eq!(raw.command(&read).await.error(), readonly);
    assert_eq!(
        raw.command(&["XPENDING", "s", "g"]).await,
        Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Nil])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_beyond_the_admission_limit_gets_busy_and_nothing_is_lost() {
    let _large = crate::LARGE_ALLOCATIONS.read().await;
    let gateway = TestGateway::with_resp(&["--resp-max-active", "1", "--admission-wait", "0ms"]).await;
    let mut slow = RawResp::connect(gateway.resp_addr()).await;
    let mut other = RawResp::connect(gateway.resp_addr()).await;
    // A 64 MiB SET holds the only slot for a while.
    let value = vec![b'v'; 64 << 20];
    slow.send(&encode(&[b"SET", b"big", &value])).await;
    let mut active = None;
    for _ in 0..400 {
        active = gateway.metric("pgvs3_admission_active{protocol=\"resp\"}").await;
        if active == Some(1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(active, Some(1.0), "the big SET is being served");
    // Both commands of a pipelined batch are answered, in order, with the error.
    other
        .send(&[encode(&[b"PING"]), encode(&[b"GET", b"big"])].concat())
        .await;
    for _ in 0..2 {
        let reply = other.reply().await.unwrap();
        assert!(reply.error().starts_with("BUSY"), "{reply:?}");
    }
    assert_eq!(slow.reply().await.unwrap(), Value::Simple("OK".into()));
    assert_eq!(other.command(&["STRLEN", "big"]).await, Value::Int(64 << 20));
    assert_eq!(
        gateway
            .metric("pgvs3_admission_rejected_total{protocol=\"resp\",reason=\"timed_out\"}")
            .await,
        Some(1.0)
    );
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_and_reads_arriving_together_from_many_connections_share_round_trips() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut connections = Vec::new();
    for _ in 0..32 {
        connections.push(RawResp::connect(gateway.resp_addr()).await);
    }
    // Every connection's SET goes out before any reply is read.
    for (i, connection) in connections.iter_mut().enumerate() {
        connection
            .send(&encode(&[b"SET", format!("k{i}").as_bytes(), b"v"]))
            .await;
    }
    for connection in &mut connections {
        assert_eq!(connection.reply().await.unwrap(), Value::Simple("OK".into()));
    }
    let batches = gateway
        .metric("pgvs3_resp_group_committed_batches_total")
        .await
        .unwrap();
    let commits = gateway.metric("pgvs3_resp_group_commits_total").await.unwrap();
    assert_eq!(batches, 32.0);
    assert!(commits < batches, "32 connections' writes took {commits} commits");
    let mut check = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(check.command(&["DBSIZE"]).await, Value::Int(32));

    // Reads that arrive together share statements the same way, and each gets its own keys.
    for (i, connection) in connections.iter_mut().enumerate() {
        let other = (i + 1) % 32;
        connection
            .send(&encode(&[
                b"MGET",
                format!("k{i}").as_bytes(),
                format!("k{other}").as_bytes(),
                b"absent",
            ]))
            .await;
    }
    for connection in &mut connections {
        assert_eq!(
            connection.reply().await.unwrap(),
            Value::Array(vec![Value::bulk("v"), Value::bulk("v"), Value::Nil])
        );
    }
    let read_batches = gateway.metric("pgvs3_resp_group_read_batches_total").await.unwrap();
    let reads = gateway.metric("pgvs3_resp_group_reads_total").await.unwrap();
    assert_eq!(read_batches, 32.0);
    assert!(reads < read_batches, "32 connections' reads took {reads} statements");
    gateway.stop().await;
}

/// Batches that only overwrite (plain SET, MSET) skip loading and send BEGIN, their locks and
/// their writes in one go. Large values among them still become chunked bodies inside the
/// transaction, and overwritten bodies are replaced whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overwrites_arriving_together_keep_large_and_small_values_whole() {
    let gateway = TestGateway::with_resp(&[]).await;
    let value = |i: usize, round: usize| -> Vec<u8> {
        // Every third value is chunked (beyond the 64 KiB inline limit).
        let size = if i.is_multiple_of(3) { 200 * 1024 + i } else { 100 + i };
        (0..size).map(|at| (at * 7 + i * 13 + round * 31) as u8).collect()
    };
    let mut connections = Vec::new();
    for _ in 0..24 {
        connections.push(RawResp::connect(gateway.resp_addr()).await);
    }
    for round in 0..2 {
        for (i, connection) in connections.iter_mut().enumerate() {
            let key = format!("k{}", i % 12);
            let request = if i.is_multiple_of(2) {
                encode(&[b"SET", key.as_bytes(), &value(i, round)])
            } else {
                encode(&[
                    b"MSET",
                    key.as_bytes(),
                    &value(i, round),
                    format!("m{i}").as_bytes(),
                    b"x",
                ])
            };
            connection.send(&request).await;
        }
        for connection in &mut connections {
            assert_eq!(connection.reply().await.unwrap(), Value::Simple("OK".into()));
        }
    }
    let mut check = RawResp::connect(gateway.resp_addr()).await;
    // 12 shared keys plus the 12 MSET-only keys.
    assert_eq!(check.command(&["DBSIZE"]).await, Value::Int(24));
    for key in 0..12 {
        // Two connections wrote each key in each round; the last round's value of one of them
        // is what the key holds, whole.
        let got = check.command(&["GET", &format!("k{key}")]).await;
        let candidates = [value(key, 1), value(key + 12, 1)];
        assert!(
            candidates.iter().any(|candidate| got == Value::Bulk(candidate.clone())),
            "k{key} holds neither of the values written last"
        );
    }
    let commits = gateway.metric("pgvs3_resp_group_commits_total").await.unwrap();
    let batches = gateway
        .metric("pgvs3_resp_group_committed_batches_total")
        .await
        .unwrap();
    assert_eq!(batches, 48.0);
    assert!(commits < batches, "48 overwrites took {commits} commits");
    gateway.stop().await;
}

/// OBJECT ENCODING of a string is the one Redis would hold it in, which depends on how it was
/// written, not only on its bytes: `raw` once changed in place (APPEND to an existing string,
/// SETRANGE, SETBIT, BITFIELD, BITOP's destination, PFADD) until SET writes it whole again,
/// never `int` from INCRBYFLOAT; COPY and RENAME keep it. Compared with redis-server 7.0.15.
#[tokio::test]
async fn string_encodings_follow_how_the_string_was_written_as_in_redis() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb"]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            // type/string's "SETRANGE against integer-encoded key".
            "SET k 1234",
            "OBJECT ENCODING k",
            "SETRANGE k 0 2",
            "OBJECT ENCODING k",
            "GET k",
            "SET k 1234",
            "SETRANGE k 1 3",
            "OBJECT ENCODING k",
            "SET k 1234",
            "OBJECT ENCODING k",
            "SET k 1234",
            "SETRANGE k 5 2",
            "OBJECT ENCODING k",
            "SETRANGE fresh 0 7",
            "OBJECT ENCODING fresh",
            // APPEND to a missing key is a SET; to an existing one a change in place.
            "APPEND a 12",
            "OBJECT ENCODING a",
            "APPEND a 3",
            "OBJECT ENCODING a",
            "EXPIRE a 100",
            "OBJECT ENCODING a",
            "COPY a a2",
            "OBJECT ENCODING a2",
            "RENAME a2 a3",
            "OBJECT ENCODING a3",
            "INCR a",
            "OBJECT ENCODING a",
            "SET s 1",
            "SETBIT s 7 1",
            "OBJECT ENCODING s",
            "BITFIELD b SET u8 0 1",
            "OBJECT ENCODING b",
            "BITOP AND d s s",
            "OBJECT ENCODING d",
            "PFADD h x",
            "OBJECT ENCODING h",
            "INCRBYFLOAT f 1",
            "OBJECT ENCODING f",
            "INCRBYFLOAT f 0.5",
            "OBJECT ENCODING f",
            "SET long 12345678901234567890123",
            "OBJECT ENCODING long",
            "APPEND long 4",
            "OBJECT ENCODING long",
            "GETSET long 5",
            "OBJECT ENCODING long",
            // In one transaction: the marks of changed strings go with unmarked writes.
            "MULTI",
            "SET t1 10",
            "APPEND t2 10",
            "APPEND t2 1",
            "SET t3 10",
            "APPEND t3 1",
            "SET t3 10",
            "EXEC",
            "OBJECT ENCODING t1",
            "OBJECT ENCODING t2",
            "OBJECT ENCODING t3",
        ],
    )
    .await;

    // The mark is RESP's alone: an S3 reader sees the bytes and no metadata of it, and an S3
    // PUT writes the string whole.
    let head = |key: &'static str| gateway.client.head_object().bucket("resp").key(key).send();
    let (changed, whole) = (head("a3").await.unwrap(), head("t1").await.unwrap());
    assert_eq!(changed.content_length(), Some(3));
    assert_eq!(changed.metadata(), whole.metadata());
    assert_eq!(changed.content_type(), whole.content_type());
    gateway
        .client
        .put_object()
        .bucket("resp")
        .key("a3")
        .body(ByteStream::from_static(b"42"))
        .send()
        .await
        .unwrap();
    assert_eq!(ours.command(&["OBJECT", "ENCODING", "a3"]).await, Value::bulk("int"));
}

/// COPY's DB option as Redis reads it: the client's own database is as if none were named,
/// one not configured is Redis's out-of-range error; another (a bucket of its own) is refused.
#[tokio::test]
async fn copy_to_a_database_answers_as_redis_where_it_can() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb", "--resp-databases", "1=second"]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            "SET src v",
            "COPY src dst DB 0",
            "GET dst",
            "COPY src dst DB 0",
            "COPY src dst db 0 REPLACE",
            "COPY src src DB 0",
            "COPY missing missing",
            "COPY src dst DB notanumber",
            "COPY src dst DB 99999999999",
            "COPY src dst DB",
            "COPY src dst DB 0 NOPE",
            "COPY src dst DB -1",
            "COPY src dst DB 99",
            // A runtime error: inside MULTI it is queued, and answered by EXEC.
            "MULTI",
            "COPY src dst DB 99",
            "EXEC",
        ],
    )
    .await;
    assert_eq!(
        ours.command(&["COPY", "src", "dst", "DB", "1"]).await.error(),
        "ERR COPY to another database is not supported by pgvs3: each database is its own bucket"
    );
    assert_eq!(ours.command(&["SELECT", "1"]).await, Value::Simple("OK".into()));
    assert_eq!(ours.command(&["EXISTS", "dst"]).await, Value::Int(0));
}
