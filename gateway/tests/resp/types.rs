//! RESP's typed keys over the wire with redis-rs: hashes (and the keyspace they share with
//! strings), with Redis's replies and error texts, expiry, WATCH, pipelines and the S3 view.

use crate::redis_rs;
use pgvs3_testkit as common;

use std::time::Duration;

use common::TestGateway;
use common::resp::live::{LiveRedis, same_replies};
use common::resp::{RawResp, Value, encode};
use redis_rs::{connect, error, query};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[tokio::test]
async fn hash_commands_answer_as_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;

    assert_eq!(
        query::<i64>(&mut con, &["HSET", "h", "a", "1", "b", "2", "a", "3"]).await,
        2
    );
    assert_eq!(
        query::<String>(&mut con, &["HGET", "h", "a"]).await,
        "3",
        "the last value wins"
    );
    assert_eq!(query::<i64>(&mut con, &["HSET", "h", "a", "4", "c", "5"]).await, 1);
    assert_eq!(query::<String>(&mut con, &["HMSET", "h", "d", "6"]).await, "OK");
    assert_eq!(query::<Option<String>>(&mut con, &["HGET", "h", "missing"]).await, None);
    assert_eq!(query::<Option<String>>(&mut con, &["HGET", "nohash", "a"]).await, None);
    assert_eq!(
        query::<Vec<Option<String>>>(&mut con, &["HMGET", "h", "a", "zz", "c"]).await,
        vec![Some("4".into()), None, Some("5".into())]
    );
    assert_eq!(
        query::<Vec<Option<String>>>(&mut con, &["HMGET", "nohash", "a", "b"]).await,
        vec![None, None]
    );
    assert_eq!(query::<i64>(&mut con, &["HLEN", "h"]).await, 4);
    assert_eq!(query::<i64>(&mut con, &["HLEN", "nohash"]).await, 0);
    let all: std::collections::BTreeMap<String, String> = query(&mut con, &["HGETALL", "h"]).await;
    assert_eq!(all.len(), 4);
    assert_eq!(all["b"], "2");
    let mut keys: Vec<String> = query(&mut con, &["HKEYS", "h"]).await;
    keys.sort();
    assert_eq!(keys, ["a", "b", "c", "d"]);
    let mut values: Vec<String> = query(&mut con, &["HVALS", "h"]).await;
    values.sort();
    assert_eq!(values, ["2", "4", "5", "6"]);
    assert_eq!(query::<i64>(&mut con, &["HEXISTS", "h", "a"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["HEXISTS", "h", "zz"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["HSTRLEN", "h", "a"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["HSTRLEN", "h", "zz"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["HSETNX", "h", "a", "x"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["HSETNX", "h", "e", "x"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["HDEL", "h", "e", "zz", "d"]).await, 2);

    // HINCRBY and HINCRBYFLOAT.
    assert_eq!(query::<i64>(&mut con, &["HINCRBY", "h", "n", "5"]).await, 5);
    assert_eq!(query::<i64>(&mut con, &["HINCRBY", "h", "n", "-7"]).await, -2);
    assert_eq!(
        query::<String>(&mut con, &["HINCRBYFLOAT", "h", "f", "10.5"]).await,
        "10.5"
    );
    assert_eq!(
        query::<String>(&mut con, &["HINCRBYFLOAT", "h", "f", "0.1"]).await,
        "10.6"
    );
    assert_eq!(
        query::<String>(&mut con, &["HINCRBYFLOAT", "h", "n", "1.5"]).await,
        "-0.5"
    );
    assert_eq!(
        query::<String>(&mut con, &["HINCRBYFLOAT", "h", "f", "-10.6"]).await,
        "0"
    );

    // HRANDFIELD: one, distinct up to the size, repeats with a negative count, with values.
    let one: String = query(&mut con, &["HRANDFIELD", "h"]).await;
    assert!(all.contains_key(&one) || ["n", "f"].contains(&one.as_str()), "{one}");
    let distinct: Vec<String> = query(&mut con, &["HRANDFIELD", "h", "100"]).await;
    assert_eq!(distinct.len(), 5);
    let repeated: Vec<String> = query(&mut con, &["HRANDFIELD", "h", "-20"]).await;
    assert_eq!(repeated.len(), 20);
    let with_values: Vec<String> = query(&mut con, &["HRANDFIELD", "h", "2", "WITHVALUES"]).await;
    assert_eq!(with_values.len(), 4);
    assert_eq!(query::<Vec<String>>(&mut con, &["HRANDFIELD", "h", "0"]).await.len(), 0);
    assert_eq!(query::<Option<String>>(&mut con, &["HRANDFIELD", "nohash"]).await, None);
    assert_eq!(
        query::<Vec<String>>(&mut con, &["HRANDFIELD", "nohash", "3"])
            .await
            .len(),
        0
    );

    // HSCAN walks every field, page by page, and MATCH filters.
    for i in 0..25 {
        query::<i64>(&mut con, &["HSET", "big", &format!("field:{i}"), &i.to_string()]).await;
    }
    let mut cursor = "0".to_owned();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..100 {
        let (next, page): (String, Vec<String>) = query(&mut con, &["HSCAN", "big", &cursor, "COUNT", "7"]).await;
        for pair in page.chunks(2) {
            seen.insert(pair[0].clone());
        }
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 25);
    let (_, page): (String, Vec<String>) =
        query(&mut con, &["HSCAN", "big", "0", "MATCH", "field:1*", "COUNT", "100"]).await;
    assert_eq!(page.len(), 2 * 11, "field:1 and field:10..19");

    // Deleting the last field deletes the key.
    assert_eq!(query::<i64>(&mut con, &["HSET", "tiny", "only", "1"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["HDEL", "tiny", "only"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "tiny"]).await, 0);
    assert_eq!(query::<String>(&mut con, &["TYPE", "tiny"]).await, "none");
}

#[tokio::test]
async fn hash_errors_are_redis_texts() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    query::<String>(&mut con, &["SET", "s", "text"]).await;
    query::<i64>(
        &mut con,
        &["HSET", "h", "text", "abc", "big", "9223372036854775807", "inf", "1e5"],
    )
    .await;

    // WRONGTYPE both ways.
    for args in [
        &["HSET", "s", "f", "v"][..],
        &["HGET", "s", "f"],
        &["HGETALL", "s"],
        &["HLEN", "s"],
        &["HINCRBY", "s", "f", "1"],
        &["HSCAN", "s", "0"],
    ] {
        assert_eq!(error(&mut con, args).await, WRONGTYPE, "{args:?}");
    }
    for args in [
        &["GET", "h"][..],
        &["APPEND", "h", "x"],
        &["INCR", "h"],
        &["STRLEN", "h"],
        &["SET", "h", "x", "GET"],
        &["GETDEL", "h"],
        &["SETRANGE", "h", "0", "x"],
    ] {
        assert_eq!(error(&mut con, args).await, WRONGTYPE, "{args:?}");
    }
    assert_eq!(
        query::<Vec<Option<String>>>(&mut con, &["MGET", "s", "h"]).await,
        vec![Some("text".into()), None],
        "MGET answers nil for a key that is not a string"
    );

    // Arity.
    for (args, name) in [
        (&["HSET", "h", "f"][..], "hset"),
        (&["HSET", "h", "f", "v", "g"], "hset"),
        (&["HMSET", "h", "f", "v", "g"], "hmset"),
        (&["HGET", "h"], "hget"),
        (&["HLEN"], "hlen"),
        (&["HINCRBY", "h", "f"], "hincrby"),
    ] {
        assert_eq!(
            error(&mut con, args).await,
            format!("ERR wrong number of arguments for '{name}' command")
        );
    }

    // Numbers.
    assert_eq!(
        error(&mut con, &["HINCRBY", "h", "text", "1"]).await,
        "ERR hash value is not an integer"
    );
    assert_eq!(
        error(&mut con, &["HINCRBY", "h", "big", "1"]).await,
        "ERR increment or decrement would overflow"
    );
    assert_eq!(
        error(&mut con, &["HINCRBY", "h", "f", "x"]).await,
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        error(&mut con, &["HINCRBYFLOAT", "h", "text", "1"]).await,
        "ERR hash value is not a float"
    );
    assert_eq!(
        error(&mut con, &["HINCRBYFLOAT", "h", "f", "x"]).await,
        "ERR value is not a valid float"
    );
    assert_eq!(
        error(&mut con, &["HINCRBYFLOAT", "h", "f", "+inf"]).await,
        "ERR value is NaN or Infinity"
    );
    assert_eq!(
        query::<String>(&mut con, &["HINCRBYFLOAT", "h", "inf", "0.5"]).await,
        "100000.5"
    );
    assert!(
        error(&mut con, &["HRANDFIELD", "h", "-9223372036854770000"])
            .await
            .starts_with("ERR value is out of range")
    );
    assert_eq!(
        error(&mut con, &["HRANDFIELD", "h", "1", "WITHSCORES"]).await,
        "ERR syntax error"
    );
    // The hash is unchanged by the refusals.
    assert_eq!(
        query::<String>(&mut con, &["HGET", "h", "big"]).await,
        "9223372036854775807"
    );
}

#[tokio::test]
async fn the_keyspace_commands_work_across_types() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb"]).await;
    let mut con = connect(&gateway).await;
    query::<String>(&mut con, &["SET", "str", "v"]).await;
    query::<i64>(&mut con, &["HSET", "hash", "f", "v", "g", "w"]).await;

    assert_eq!(query::<String>(&mut con, &["TYPE", "str"]).await, "string");
    assert_eq!(query::<String>(&mut con, &["TYPE", "hash"]).await, "hash");
    assert_eq!(query::<String>(&mut con, &["TYPE", "nothing"]).await, "none");
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "str", "hash", "nothing"]).await, 2);
    assert_eq!(query::<i64>(&mut con, &["DBSIZE"]).await, 2);
    assert_eq!(
        query::<String>(&mut con, &["OBJECT", "ENCODING", "hash"]).await,
        "listpack"
    );
    assert_eq!(
        query::<String>(&mut con, &["OBJECT", "ENCODING", "str"]).await,
        "embstr"
    );

    // SCAN sees both, and TYPE filters.
    let (_, keys): (String, Vec<String>) = query(&mut con, &["SCAN", "0", "COUNT", "100"]).await;
    assert_eq!(keys, ["hash", "str"]);
    let (_, keys): (String, Vec<String>) = query(&mut con, &["SCAN", "0", "TYPE", "hash"]).await;
    assert_eq!(keys, ["hash"]);
    let (_, keys): (String, Vec<String>) = query(&mut con, &["SCAN", "0", "TYPE", "string"]).await;
    assert_eq!(keys, ["str"]);
    let (_, keys): (String, Vec<String>) = query(&mut con, &["SCAN", "0", "TYPE", "list"]).await;
    assert!(keys.is_empty());
    let mut all: Vec<String> = query(&mut con, &["KEYS", "*"]).await;
    all.sort();
    assert_eq!(all, ["hash", "str"]);
    let random: String = query(&mut con, &["RANDOMKEY"]).await;
    assert!(random == "hash" || random == "str");

    // RENAME and COPY move elements; onto a key of another type they replace it.
    assert_eq!(query::<String>(&mut con, &["RENAME", "hash", "moved"]).await, "OK");
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "hash"]).await, 0);
    assert_eq!(query::<String>(&mut con, &["HGET", "moved", "g"]).await, "w");
    assert_eq!(query::<i64>(&mut con, &["RENAMENX", "moved", "str"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["COPY", "moved", "copy"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["COPY", "moved", "str"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["COPY", "moved", "str", "REPLACE"]).await, 1);
    assert_eq!(query::<String>(&mut con, &["TYPE", "str"]).await, "hash");
    assert_eq!(query::<i64>(&mut con, &["HSET", "copy", "f", "changed"]).await, 0);
    assert_eq!(
        query::<String>(&mut con, &["HGET", "moved", "f"]).await,
        "v",
        "a copy is its own"
    );
    assert_eq!(error(&mut con, &["RENAME", "nothing", "x"]).await, "ERR no such key");
    // A string over a hash: SET replaces it, RENAME of a string onto it too.
    assert_eq!(query::<String>(&mut con, &["SET", "copy", "now a string"]).await, "OK");
    assert_eq!(query::<String>(&mut con, &["TYPE", "copy"]).await, "string");
    assert_eq!(error(&mut con, &["HLEN", "copy"]).await, WRONGTYPE);
    query::<String>(&mut con, &["RENAME", "copy", "moved"]).await;
    assert_eq!(query::<String>(&mut con, &["GET", "moved"]).await, "now a string");
    assert_eq!(query::<i64>(&mut con, &["DEL", "str", "moved"]).await, 2);
    assert_eq!(query::<i64>(&mut con, &["DBSIZE"]).await, 0);

    query::<i64>(&mut con, &["HSET", "h2", "f", "v"]).await;
    assert_eq!(query::<String>(&mut con, &["FLUSHDB"]).await, "OK");
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "h2"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["HLEN", "h2"]).await, 0);
}

#[tokio::test]
async fn a_hash_is_hidden_from_s3() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    query::<i64>(&mut con, &["HSET", "profile", "name", "ada"]).await;
    query::<String>(&mut con, &["SET", "plain", "v"]).await;
    let listed = gateway.client.list_objects_v2().bucket("resp").send().await.unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|object| object.key()).collect();
    assert_eq!(keys, ["plain"], "S3 lists strings only");
    let got = gateway.client.get_object().bucket("resp").key("profile").send().await;
    assert!(got.is_err(), "a hash is no S3 object");
}

#[tokio::test]
async fn hashes_expire() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    query::<i64>(&mut con, &["HSET", "h", "f", "v"]).await;
    assert_eq!(query::<i64>(&mut con, &["TTL", "h"]).await, -1);
    assert_eq!(query::<i64>(&mut con, &["EXPIRE", "h", "100"]).await, 1);
    let ttl: i64 = query(&mut con, &["TTL", "h"]).await;
    assert!((99..=100).contains(&ttl), "{ttl}");
    assert_eq!(query::<i64>(&mut con, &["PERSIST", "h"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["TTL", "h"]).await, -1);
    // Writing to a hash keeps its TTL, as in Redis.
    assert_eq!(query::<i64>(&mut con, &["PEXPIRE", "h", "300"]).await, 1);
    query::<i64>(&mut con, &["HSET", "h", "g", "w"]).await;
    assert!(query::<i64>(&mut con, &["PTTL", "h"]).await > 0);
    common::eventually(Duration::from_secs(10), "the hash expires", || {
        let mut con = con.clone();
        async move { (query::<i64>(&mut con, &["EXISTS", "h"]).await == 0).then_some(()) }
    })
    .await;
    assert_eq!(query::<Option<String>>(&mut con, &["HGET", "h", "f"]).await, None);
    assert_eq!(query::<i64>(&mut con, &["HLEN", "h"]).await, 0);
    // A new hash of that name starts empty.
    assert_eq!(query::<i64>(&mut con, &["HSET", "h", "x", "1"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["HLEN", "h"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["TTL", "h"]).await, -1);
    // An expiry in the past deletes at once.
    assert_eq!(query::<i64>(&mut con, &["EXPIRE", "h", "-1"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "h"]).await, 0);
}

#[tokio::test]
async fn watch_sees_a_change_to_a_hash() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    query::<i64>(&mut con, &["HSET", "h", "f", "1"]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["WATCH", "h"]).await, Value::Simple("OK".into()));
    query::<i64>(&mut con, &["HINCRBY", "h", "f", "1"]).await;
    raw.command(&["MULTI"]).await;
    raw.command(&["HSET", "h", "f", "100"]).await;
    assert_eq!(raw.command(&["EXEC"]).await, Value::Nil, "the transaction aborts");
    assert_eq!(query::<String>(&mut con, &["HGET", "h", "f"]).await, "2");

    // Unchanged, it runs; the hash commands and string commands of one EXEC see each other.
    assert_eq!(raw.command(&["WATCH", "h"]).await, Value::Simple("OK".into()));
    raw.command(&["MULTI"]).await;
    raw.command(&["HSET", "h", "g", "x"]).await;
    raw.command(&["SET", "s", "1"]).await;
    raw.command(&["HLEN", "h"]).await;
    raw.command(&["GET", "h"]).await;
    raw.command(&["DEL", "h"]).await;
    raw.command(&["HLEN", "h"]).await;
    assert_eq!(
        raw.command(&["EXEC"]).await,
        Value::Array(vec![
            Value::Int(1),
            Value::Simple("OK".into()),
            Value::Int(2),
            Value::Error(WRONGTYPE.into()),
            Value::Int(1),
            Value::Int(0),
        ])
    );
}

#[tokio::test]
async fn a_pipeline_of_hsets_is_one_commit() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    query::<i64>(&mut con, &["HSET", "warm", "f", "v"]).await;
    let commits = gateway.metric("pgvs3_resp_group_commits_total").await.unwrap();
    let mut pipe = redis::pipe();
    for i in 0..50 {
        pipe.cmd("HSET").arg("pipelined").arg(format!("f{i}")).arg(i);
    }
    pipe.cmd("HINCRBY").arg("pipelined").arg("f1").arg(10);
    pipe.cmd("HLEN").arg("pipelined");
    let replies: Vec<i64> = pipe.query_async(&mut con).await.unwrap();
    assert_eq!(replies[..50], [1; 50]);
    assert_eq!(replies[50..], [11, 50]);
    let after = gateway.metric("pgvs3_resp_group_commits_total").await.unwrap();
    assert_eq!(after - commits, 1.0, "the 51 writes shared one transaction");
}

fn sorted(mut members: Vec<String>) -> Vec<String> {
    members.sort();
    members
}

#[tokio::test]
async fn set_commands_answer_as_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    assert_eq!(query::<i64>(&mut con, &["SADD", "s", "a", "b", "c", "a"]).await, 3);
    assert_eq!(query::<i64>(&mut con, &["SADD", "s", "c", "d"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["SCARD", "s"]).await, 4);
    assert_eq!(query::<i64>(&mut con, &["SCARD", "none"]).await, 0);
    assert_eq!(sorted(query(&mut con, &["SMEMBERS", "s"]).await), ["a", "b", "c", "d"]);
    assert_eq!(query::<Vec<String>>(&mut con, &["SMEMBERS", "none"]).await.len(), 0);
    assert_eq!(query::<i64>(&mut con, &["SISMEMBER", "s", "a"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["SISMEMBER", "s", "z"]).await, 0);
    assert_eq!(
        query::<Vec<i64>>(&mut con, &["SMISMEMBER", "s", "a", "z", "d"]).await,
        [1, 0, 1]
    );
    assert_eq!(query::<i64>(&mut con, &["SREM", "s", "d", "z"]).await, 1);
    query::<i64>(&mut con, &["SADD", "t", "b", "c", "x"]).await;
    query::<i64>(&mut con, &["SADD", "u", "c", "y"]).await;
    assert_eq!(sorted(query(&mut con, &["SINTER", "s", "t"]).await), ["b", "c"]);
    assert_eq!(sorted(query(&mut con, &["SINTER", "s", "t", "u"]).await), ["c"]);
    assert_eq!(query::<Vec<String>>(&mut con, &["SINTER", "s", "none"]).await.len(), 0);
    assert_eq!(
        sorted(query(&mut con, &["SUNION", "s", "t", "none"]).await),
        ["a", "b", "c", "x"]
    );
    assert_eq!(sorted(query(&mut con, &["SDIFF", "s", "t"]).await), ["a"]);
    assert_eq!(query::<Vec<String>>(&mut con, &["SDIFF", "s", "s"]).await.len(), 0);
    assert_eq!(query::<i64>(&mut con, &["SINTERCARD", "2", "s", "t"]).await, 2);
    assert_eq!(
        query::<i64>(&mut con, &["SINTERCARD", "2", "s", "t", "LIMIT", "1"]).await,
        1
    );
    assert_eq!(
        error(&mut con, &["SINTERCARD", "0", "s"]).await,
        "ERR numkeys should be greater than 0"
    );
    assert_eq!(query::<i64>(&mut con, &["SUNIONSTORE", "dest", "s", "t"]).await, 4);
    assert_eq!(
        sorted(query(&mut con, &["SMEMBERS", "dest"]).await),
        ["a", "b", "c", "x"]
    );
    // A *STORE destination of another type is replaced; an empty result deletes it.
    query::<String>(&mut con, &["SET", "str", "v"]).await;
    assert_eq!(query::<i64>(&mut con, &["SINTERSTORE", "str", "s", "t"]).await, 2);
    assert_eq!(query::<String>(&mut con, &["TYPE", "str"]).await, "set");
    assert_eq!(query::<i64>(&mut con, &["SDIFFSTORE", "str", "s", "s"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "str"]).await, 0);

    assert_eq!(query::<i64>(&mut con, &["SMOVE", "s", "moved", "a"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["SMOVE", "s", "moved", "a"]).await, 0);
    assert_eq!(query::<Vec<String>>(&mut con, &["SMEMBERS", "moved"]).await, ["a"]);
    let one: String = query(&mut con, &["SRANDMEMBER", "s"]).await;
    assert!(["b", "c"].contains(&one.as_str()));
    assert_eq!(
        query::<Vec<String>>(&mut con, &["SRANDMEMBER", "s", "10"]).await.len(),
        2
    );
    assert_eq!(
        query::<Vec<String>>(&mut con, &["SRANDMEMBER", "s", "-10"]).await.len(),
        10
    );
    assert_eq!(query::<Option<String>>(&mut con, &["SRANDMEMBER", "none"]).await, None);
    let popped: Vec<String> = query(&mut con, &["SPOP", "s", "5"]).await;
    assert_eq!(sorted(popped), ["b", "c"]);
    assert_eq!(
        query::<i64>(&mut con, &["EXISTS", "s"]).await,
        0,
        "popped empty, the set is gone"
    );
    assert_eq!(query::<Option<String>>(&mut con, &["SPOP", "s"]).await, None);
    assert_eq!(
        query::<Option<String>>(&mut con, &["SPOP", "moved"]).await,
        Some("a".into())
    );

    for i in 0..30 {
        query::<i64>(&mut con, &["SADD", "big", &format!("m{i}")]).await;
    }
    let mut cursor = "0".to_owned();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..100 {
        let (next, page): (String, Vec<String>) = query(&mut con, &["SSCAN", "big", &cursor, "COUNT", "8"]).await;
        seen.extend(page);
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 30);

    // Errors.
    query::<i64>(&mut con, &["HSET", "h", "f", "v"]).await;
    for args in [
        &["SADD", "h", "a"][..],
        &["SMEMBERS", "h"],
        &["SINTER", "t", "h"],
        &["SMOVE", "t", "h", "b"],
        &["SUNIONSTORE", "dest", "t", "h"],
    ] {
        assert_eq!(error(&mut con, args).await, WRONGTYPE, "{args:?}");
    }
    assert_eq!(error(&mut con, &["GET", "t"]).await, WRONGTYPE);
    assert_eq!(
        error(&mut con, &["SADD", "t"]).await,
        "ERR wrong number of arguments for 'sadd' command"
    );
    assert_eq!(
        error(&mut con, &["SPOP", "t", "-1"]).await,
        "ERR value is out of range, must be positive"
    );
    // Expiry applies to sets too.
    assert_eq!(query::<i64>(&mut con, &["PEXPIRE", "t", "200"]).await, 1);
    common::eventually(Duration::from_secs(10), "the set expires", || {
        let mut con = con.clone();
        async move { (query::<i64>(&mut con, &["SCARD", "t"]).await == 0).then_some(()) }
    })
    .await;
    assert_eq!(query::<String>(&mut con, &["TYPE", "t"]).await, "none");
}

/// A member named twice in one ZADD: each pair applies in turn, as redis-server 7.0.15 answers
/// (one statement for all pairs must still see the score the earlier pair left).
#[tokio::test]
async fn zadd_applies_a_repeated_member_pair_by_pair() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let cases: [(&[&str], i64); 10] = [
        (&["ZADD", "a", "CH", "1", "x", "2", "x", "1", "x"], 3),
        (&["ZADD", "b", "GT", "CH", "5", "x", "3", "x", "7", "x"], 2),
        (&["ZADD", "b", "GT", "CH", "5", "x", "9", "x", "8", "x"], 1),
        (&["ZADD", "c", "XX", "1", "x", "2", "x"], 0),
        (&["ZADD", "c", "NX", "CH", "3", "x", "2", "x"], 1),
        (&["ZADD", "c", "NX", "CH", "3", "x", "2", "x"], 0),
        (&["ZADD", "d", "LT", "CH", "5", "x", "7", "x", "3", "x", "4", "x"], 2),
        (&["ZADD", "e", "1", "x", "1", "x", "1", "x"], 1),
        (&["ZADD", "e", "CH", "1", "x", "2", "x"], 1),
        (
            &["ZADD", "c", "XX", "CH", "1", "x", "5", "x", "6", "x", "7", "nobody"],
            3,
        ),
    ];
    for (command, expected) in cases {
        assert_eq!(query::<i64>(&mut con, command).await, expected, "{command:?}");
    }
    for (key, score) in [("a", 1.0), ("b", 9.0), ("c", 6.0), ("d", 3.0), ("e", 2.0)] {
        assert_eq!(query::<f64>(&mut con, &["ZSCORE", key, "x"]).await, score, "{key}");
    }
    assert_eq!(query::<i64>(&mut con, &["ZCARD", "c"]).await, 1);
}

#[tokio::test]
async fn sorted_set_commands_answer_as_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    assert_eq!(
        query::<i64>(&mut con, &["ZADD", "z", "1", "a", "2", "b", "3", "c"]).await,
        3
    );
    assert_eq!(query::<i64>(&mut con, &["ZADD", "z", "2.5", "b", "4", "d"]).await, 1);
    assert_eq!(
        query::<i64>(&mut con, &["ZADD", "z", "CH", "2", "b", "5", "e"]).await,
        2
    );
    assert_eq!(
        query::<i64>(&mut con, &["ZADD", "z", "NX", "9", "a", "6", "f"]).await,
        1
    );
    assert_eq!(
        query::<i64>(&mut con, &["ZADD", "z", "XX", "CH", "1.5", "a", "7", "new"]).await,
        1
    );
    assert_eq!(
        query::<i64>(&mut con, &["ZADD", "z", "GT", "CH", "1", "a", "8", "f"]).await,
        1
    );
    assert_eq!(query::<i64>(&mut con, &["ZADD", "z", "LT", "CH", "9", "c"]).await, 0);
    assert_eq!(query::<f64>(&mut con, &["ZADD", "z", "INCR", "10", "a"]).await, 11.5);
    assert_eq!(
        query::<Option<f64>>(&mut con, &["ZADD", "z", "NX", "INCR", "1", "a"]).await,
        None
    );
    assert_eq!(query::<f64>(&mut con, &["ZINCRBY", "z", "-10", "a"]).await, 1.5);
    assert_eq!(query::<f64>(&mut con, &["ZINCRBY", "z", "2", "fresh"]).await, 2.0);
    assert_eq!(query::<i64>(&mut con, &["ZREM", "z", "fresh", "nothing"]).await, 1);
    // z: a 1.5, b 2, c 3, d 4, e 5, f 8
    assert_eq!(query::<Option<f64>>(&mut con, &["ZSCORE", "z", "b"]).await, Some(2.0));
    assert_eq!(query::<Option<f64>>(&mut con, &["ZSCORE", "z", "zz"]).await, None);
    assert_eq!(
        query::<Vec<Option<f64>>>(&mut con, &["ZMSCORE", "z", "a", "zz", "f"]).await,
        [Some(1.5), None, Some(8.0)]
    );
    assert_eq!(query::<i64>(&mut con, &["ZCARD", "z"]).await, 6);
    assert_eq!(query::<Option<i64>>(&mut con, &["ZRANK", "z", "c"]).await, Some(2));
    assert_eq!(query::<Option<i64>>(&mut con, &["ZREVRANK", "z", "c"]).await, Some(3));
    assert_eq!(query::<Option<i64>>(&mut con, &["ZRANK", "z", "zz"]).await, None);
    assert_eq!(query::<i64>(&mut con, &["ZCOUNT", "z", "2", "5"]).await, 4);
    assert_eq!(query::<i64>(&mut con, &["ZCOUNT", "z", "(2", "(5"]).await, 2);
    assert_eq!(query::<i64>(&mut con, &["ZCOUNT", "z", "-inf", "+inf"]).await, 6);

    let reader = con.clone();
    let range = |args: &[&str]| {
        let mut con = reader.clone();
        let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            query::<Vec<String>>(&mut con, &args).await
        }
    };
    assert_eq!(range(&["ZRANGE", "z", "0", "2"]).await, ["a", "b", "c"]);
    assert_eq!(range(&["ZRANGE", "z", "-2", "-1"]).await, ["e", "f"]);
    assert_eq!(
        range(&["ZRANGE", "z", "0", "1", "WITHSCORES"]).await,
        ["a", "1.5", "b", "2"]
    );
    assert_eq!(range(&["ZRANGE", "z", "0", "1", "REV"]).await, ["f", "e"]);
    assert_eq!(range(&["ZRANGE", "z", "2", "(5", "BYSCORE"]).await, ["b", "c", "d"]);
    assert_eq!(
        range(&["ZRANGE", "z", "5", "2", "BYSCORE", "REV", "LIMIT", "1", "2"]).await,
        ["d", "c"]
    );
    assert_eq!(
        range(&["ZRANGEBYSCORE", "z", "(1.5", "3", "WITHSCORES"]).await,
        ["b", "2", "c", "3"]
    );
    assert_eq!(
        range(&["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "4", "10"]).await,
        ["e", "f"]
    );
    assert_eq!(range(&["ZREVRANGEBYSCORE", "z", "+inf", "4"]).await, ["f", "e", "d"]);
    assert_eq!(range(&["ZREVRANGE", "z", "0", "0", "WITHSCORES"]).await, ["f", "8"]);
    assert_eq!(range(&["ZRANGE", "z", "5", "1"]).await.len(), 0);
    assert_eq!(range(&["ZRANGE", "none", "0", "-1"]).await.len(), 0);

    // By lex, on equal scores.
    query::<i64>(
        &mut con,
        &["ZADD", "lex", "0", "a", "0", "b", "0", "c", "0", "d", "0", "e"],
    )
    .await;
    assert_eq!(range(&["ZRANGEBYLEX", "lex", "-", "[c"]).await, ["a", "b", "c"]);
    assert_eq!(range(&["ZRANGEBYLEX", "lex", "(a", "(c"]).await, ["b"]);
    assert_eq!(range(&["ZREVRANGEBYLEX", "lex", "+", "[d"]).await, ["e", "d"]);
    assert_eq!(
        range(&["ZRANGE", "lex", "[b", "+", "BYLEX", "LIMIT", "1", "2"]).await,
        ["c", "d"]
    );
    assert_eq!(query::<i64>(&mut con, &["ZLEXCOUNT", "lex", "[b", "[d"]).await, 3);
    assert_eq!(query::<i64>(&mut con, &["ZREMRANGEBYLEX", "lex", "[a", "(c"]).await, 2);
    assert_eq!(query::<i64>(&mut con, &["ZREMRANGEBYRANK", "lex", "0", "0"]).await, 1);
    assert_eq!(
        query::<i64>(&mut con, &["ZREMRANGEBYSCORE", "lex", "-inf", "inf"]).await,
        2
    );
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "lex"]).await, 0);

    // Stores.
    assert_eq!(
        query::<i64>(&mut con, &["ZRANGESTORE", "top", "z", "0", "2", "REV"]).await,
        3
    );
    assert_eq!(range(&["ZRANGE", "top", "0", "-1"]).await, ["d", "e", "f"]);
    query::<i64>(&mut con, &["SADD", "plain", "a", "f"]).await;
    assert_eq!(
        query::<i64>(&mut con, &["ZUNIONSTORE", "u", "2", "z", "plain", "WEIGHTS", "2", "10"]).await,
        6
    );
    assert_eq!(query::<Option<f64>>(&mut con, &["ZSCORE", "u", "a"]).await, Some(13.0));
    assert_eq!(
        query::<i64>(&mut con, &["ZINTERSTORE", "i", "2", "z", "plain", "AGGREGATE", "MAX"]).await,
        2
    );
    assert_eq!(
        range(&["ZRANGE", "i", "0", "-1", "WITHSCORES"]).await,
        ["a", "1.5", "f", "8"]
    );

    // Pops.
    assert_eq!(
        query::<(String, f64)>(&mut con, &["ZPOPMIN", "top"]).await,
        ("d".into(), 4.0)
    );
    assert_eq!(range(&["ZPOPMAX", "top", "5"]).await, ["f", "8", "e", "5"]);
    assert_eq!(query::<Vec<String>>(&mut con, &["ZPOPMIN", "top"]).await.len(), 0);
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "top"]).await, 0);

    let (cursor, page): (String, Vec<String>) = query(&mut con, &["ZSCAN", "z", "0", "COUNT", "100"]).await;
    assert_eq!(cursor, "0");
    assert_eq!(page[..2], ["a".to_owned(), "1.5".to_owned()]);

    // Errors.
    for (args, text) in [
        (&["ZADD", "z", "x", "a"][..], "ERR value is not a valid float"),
        (&["ZADD", "z", "1", "a", "2"], "ERR syntax error"),
        (
            &["ZADD", "z", "NX", "XX", "1", "a"],
            "ERR XX and NX options at the same time are not compatible",
        ),
        (
            &["ZADD", "z", "GT", "LT", "1", "a"],
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ),
        (
            &["ZADD", "z", "INCR", "1", "a", "2", "b"],
            "ERR INCR option supports a single increment-element pair",
        ),
        (&["ZCOUNT", "z", "x", "1"], "ERR min or max is not a float"),
        (
            &["ZRANGEBYLEX", "z", "a", "[b"],
            "ERR min or max not valid string range item",
        ),
        (
            &["ZRANGE", "z", "0", "1", "LIMIT", "0", "1"],
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ),
        (
            &["ZRANGE", "z", "x", "1"],
            "ERR value is not an integer or out of range",
        ),
        (&["ZADD", "z"], "ERR wrong number of arguments for 'zadd' command"),
        (
            &["ZUNIONSTORE", "u", "0", "z"],
            "ERR at least 1 input key is needed for 'zunionstore' command",
        ),
    ] {
        assert_eq!(error(&mut con, args).await, text, "{args:?}");
    }
    query::<f64>(&mut con, &["ZADD", "z", "INCR", "+inf", "infinite"]).await;
    assert_eq!(
        error(&mut con, &["ZINCRBY", "z", "-inf", "infinite"]).await,
        "ERR resulting score is not a number (NaN)"
    );
    query::<String>(&mut con, &["SET", "str", "v"]).await;
    for args in [
        &["ZADD", "str", "1", "a"][..],
        &["ZRANGE", "str", "0", "-1"],
        &["ZUNIONSTORE", "u", "1", "str"],
    ] {
        assert_eq!(error(&mut con, args).await, WRONGTYPE, "{args:?}");
    }
    assert_eq!(error(&mut con, &["SADD", "z", "a"]).await, WRONGTYPE);

    // Expiry.
    assert_eq!(query::<i64>(&mut con, &["PEXPIRE", "z", "200"]).await, 1);
    common::eventually(Duration::from_secs(10), "the sorted set expires", || {
        let mut con = con.clone();
        async move { (query::<i64>(&mut con, &["ZCARD", "z"]).await == 0).then_some(()) }
    })
    .await;
}

/// LMOVE (RPOPLPUSH) of a list's only element onto itself leaves the list as it was, its TTL
/// included, as in Redis, whose LMOVE pushes before it looks whether the source emptied; the pop
/// deleted the key, and the push made a new one without the TTL. As commands, and from a script
/// (whose write goes set-based). Compared live.
#[tokio::test]
async fn an_lmove_of_a_lists_only_element_onto_itself_keeps_its_ttl() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    // The LLEN loads the list into the run's working set, so that the RPOPLPUSH is predicted
    // and written set-based (a run's first call on a key runs in the database).
    let script = "redis.call('LLEN', KEYS[1]) return redis.call('RPOPLPUSH', KEYS[1], KEYS[1])";
    same_replies(
        &mut ours,
        &mut theirs,
        &[
            &["RPUSH", "l", "a"],
            &["EXPIREAT", "l", "4102444800"],
            &["RPOPLPUSH", "l", "l"],
            &["EXPIRETIME", "l"],
            &["LMOVE", "l", "l", "LEFT", "RIGHT"],
            &["EXPIRETIME", "l"],
            &["EVAL", script, "1", "l"],
            &["EXPIRETIME", "l"],
            &["LRANGE", "l", "0", "-1"],
        ],
    )
    .await;
}

#[tokio::test]
async fn list_commands_answer_as_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    assert_eq!(query::<i64>(&mut con, &["RPUSH", "l", "a", "b", "c"]).await, 3);
    assert_eq!(query::<i64>(&mut con, &["LPUSH", "l", "y", "z"]).await, 5);
    assert_eq!(
        query::<Vec<String>>(&mut con, &["LRANGE", "l", "0", "-1"]).await,
        ["z", "y", "a", "b", "c"]
    );
    assert_eq!(query::<i64>(&mut con, &["LPUSHX", "none", "a"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["RPUSHX", "l", "d"]).await, 6);
    assert_eq!(query::<i64>(&mut con, &["LLEN", "l"]).await, 6);
    assert_eq!(query::<i64>(&mut con, &["LLEN", "none"]).await, 0);
    assert_eq!(
        query::<Vec<String>>(&mut con, &["LRANGE", "l", "-3", "100"]).await,
        ["b", "c", "d"]
    );
    assert_eq!(
        query::<Vec<String>>(&mut con, &["LRANGE", "l", "4", "2"]).await.len(),
        0
    );
    assert_eq!(
        query::<Option<String>>(&mut con, &["LINDEX", "l", "1"]).await,
        Some("y".into())
    );
    assert_eq!(
        query::<Option<String>>(&mut con, &["LINDEX", "l", "-1"]).await,
        Some("d".into())
    );
    assert_eq!(query::<Option<String>>(&mut con, &["LINDEX", "l", "99"]).await, None);
    assert_eq!(query::<String>(&mut con, &["LSET", "l", "-2", "C"]).await, "OK");
    assert_eq!(
        error(&mut con, &["LSET", "l", "99", "x"]).await,
        "ERR index out of range"
    );
    assert_eq!(error(&mut con, &["LSET", "none", "0", "x"]).await, "ERR no such key");
    assert_eq!(query::<String>(&mut con, &["LPOP", "l"]).await, "z");
    assert_eq!(query::<String>(&mut con, &["RPOP", "l"]).await, "d");
    assert_eq!(query::<Vec<String>>(&mut con, &["LPOP", "l", "2"]).await, ["y", "a"]);
    assert_eq!(query::<Option<String>>(&mut con, &["LPOP", "none"]).await, None);
    let missing: redis::Value = query(&mut con, &["LPOP", "none", "2"]).await;
    assert_eq!(missing, redis::Value::Nil, "a count on a missing list: the null array");
    // l: b C
    assert_eq!(query::<i64>(&mut con, &["LINSERT", "l", "BEFORE", "C", "x"]).await, 3);
    assert_eq!(query::<i64>(&mut con, &["LINSERT", "l", "AFTER", "C", "w"]).await, 4);
    assert_eq!(
        query::<i64>(&mut con, &["LINSERT", "l", "AFTER", "nothing", "w"]).await,
        -1
    );
    assert_eq!(query::<i64>(&mut con, &["LINSERT", "none", "AFTER", "a", "w"]).await, 0);
    // Many inserts at one place: the positions run out of room and the list is renumbered.
    for i in 0..30 {
        query::<i64>(&mut con, &["LINSERT", "l", "BEFORE", "C", &format!("i{i}")]).await;
    }
    let all: Vec<String> = query(&mut con, &["LRANGE", "l", "0", "-1"]).await;
    assert_eq!(all.len(), 34);
    assert_eq!(all[..3], ["b", "x", "i0"]);
    assert_eq!(all[31..], ["i29", "C", "w"]);
    assert_eq!(query::<String>(&mut con, &["LTRIM", "l", "1", "-3"]).await, "OK");
    assert_eq!(query::<i64>(&mut con, &["LLEN", "l"]).await, 31);
    query::<String>(&mut con, &["LTRIM", "l", "0", "0"]).await;
    assert_eq!(query::<Vec<String>>(&mut con, &["LRANGE", "l", "0", "-1"]).await, ["x"]);

    query::<i64>(&mut con, &["RPUSH", "r", "a", "b", "a", "c", "a"]).await;
    assert_eq!(query::<Option<i64>>(&mut con, &["LPOS", "r", "a"]).await, Some(0));
    assert_eq!(
        query::<Option<i64>>(&mut con, &["LPOS", "r", "a", "RANK", "2"]).await,
        Some(2)
    );
    assert_eq!(
        query::<Option<i64>>(&mut con, &["LPOS", "r", "a", "RANK", "-1"]).await,
        Some(4)
    );
    assert_eq!(
        query::<Vec<i64>>(&mut con, &["LPOS", "r", "a", "COUNT", "0"]).await,
        [0, 2, 4]
    );
    assert_eq!(
        query::<Vec<i64>>(&mut con, &["LPOS", "r", "a", "COUNT", "2", "RANK", "-1"]).await,
        [4, 2]
    );
    assert_eq!(
        query::<Vec<i64>>(&mut con, &["LPOS", "r", "a", "COUNT", "0", "MAXLEN", "3"]).await,
        [0, 2]
    );
    assert_eq!(query::<Option<i64>>(&mut con, &["LPOS", "r", "zz"]).await, None);
    assert!(
        error(&mut con, &["LPOS", "r", "a", "RANK", "0"])
            .await
            .starts_with("ERR RANK can't be zero")
    );
    assert_eq!(query::<i64>(&mut con, &["LREM", "r", "-2", "a"]).await, 2);
    assert_eq!(
        query::<Vec<String>>(&mut con, &["LRANGE", "r", "0", "-1"]).await,
        ["a", "b", "c"]
    );
    assert_eq!(query::<i64>(&mut con, &["LREM", "r", "0", "a"]).await, 1);

    assert_eq!(
        query::<String>(&mut con, &["LMOVE", "r", "dst", "LEFT", "RIGHT"]).await,
        "b"
    );
    assert_eq!(query::<String>(&mut con, &["RPOPLPUSH", "r", "dst"]).await, "c");
    assert_eq!(
        query::<Vec<String>>(&mut con, &["LRANGE", "dst", "0", "-1"]).await,
        ["c", "b"]
    );
    assert_eq!(
        query::<i64>(&mut con, &["EXISTS", "r"]).await,
        0,
        "the emptied source is gone"
    );
    assert_eq!(
        query::<Option<String>>(&mut con, &["RPOPLPUSH", "r", "dst"]).await,
        None
    );
    assert_eq!(
        query::<String>(&mut con, &["LMOVE", "dst", "dst", "RIGHT", "LEFT"]).await,
        "b",
        "rotation"
    );
    assert_eq!(
        query::<Vec<String>>(&mut con, &["LRANGE", "dst", "0", "-1"]).await,
        ["b", "c"]
    );

    query::<String>(&mut con, &["SET", "str", "v"]).await;
    for args in [
        &["LPUSH", "str", "a"][..],
        &["LRANGE", "str", "0", "-1"],
        &["LMOVE", "dst", "str", "LEFT", "LEFT"],
    ] {
        assert_eq!(error(&mut con, args).await, WRONGTYPE, "{args:?}");
    }
    assert_eq!(error(&mut con, &["GET", "dst"]).await, WRONGTYPE);
    assert_eq!(
        error(&mut con, &["LPOP", "dst", "-1"]).await,
        "ERR value is out of range, must be positive"
    );
    assert_eq!(
        error(&mut con, &["LINDEX", "dst", "x"]).await,
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        error(&mut con, &["LPUSH", "dst"]).await,
        "ERR wrong number of arguments for 'lpush' command"
    );
    assert_eq!(query::<String>(&mut con, &["TYPE", "dst"]).await, "list");

    assert_eq!(query::<i64>(&mut con, &["PEXPIRE", "dst", "200"]).await, 1);
    common::eventually(Duration::from_secs(10), "the list expires", || {
        let mut con = con.clone();
        async move { (query::<i64>(&mut con, &["LLEN", "dst"]).await == 0).then_some(()) }
    })
    .await;
    assert_eq!(
        query::<i64>(&mut con, &["RPUSH", "dst", "fresh"]).await,
        1,
        "a new list after expiry"
    );
}

#[tokio::test]
async fn strings_and_typed_commands_in_one_pipeline_see_each_other() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("SET").arg("k").arg("v");
    pipe.cmd("HSET").arg("k").arg("f").arg("v");
    pipe.cmd("DEL").arg("k");
    pipe.cmd("HSET").arg("k").arg("f").arg("v");
    pipe.cmd("GET").arg("k");
    pipe.cmd("TYPE").arg("k");
    pipe.cmd("SET").arg("k").arg("again");
    pipe.cmd("HLEN").arg("k");
    pipe.cmd("GET").arg("k");
    let replies: Vec<redis::Value> = pipe.query_async(&mut con).await.unwrap();
    let wrongtype = |value: &redis::Value| matches!(value, redis::Value::ServerError(err) if err.code() == "WRONGTYPE");
    assert_eq!(replies[0], redis::Value::Okay);
    assert!(wrongtype(&replies[1]), "{:?}", replies[1]);
    assert_eq!(replies[2], redis::Value::Int(1));
    assert_eq!(replies[3], redis::Value::Int(1));
    assert!(wrongtype(&replies[4]), "{:?}", replies[4]);
    assert_eq!(replies[5], redis::Value::SimpleString("hash".into()));
    assert_eq!(replies[6], redis::Value::Okay);
    assert!(wrongtype(&replies[7]), "{:?}", replies[7]);
    assert_eq!(replies[8], redis::Value::BulkString(b"again".to_vec()));
}

#[tokio::test]
async fn resp3_answers_maps_pairs_and_doubles() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    raw.command(&["HELLO", "3"]).await;
    raw.command(&["HSET", "h", "f", "v"]).await;
    assert_eq!(
        raw.command(&["HGETALL", "h"]).await,
        Value::Map(vec![(Value::bulk("f"), Value::bulk("v"))])
    );
    assert_eq!(
        raw.command(&["HRANDFIELD", "h", "1", "WITHVALUES"]).await,
        Value::Array(vec![Value::Array(vec![Value::bulk("f"), Value::bulk("v")])])
    );
    raw.command(&["ZADD", "z", "1.5", "a", "2", "b"]).await;
    assert_eq!(raw.command(&["ZSCORE", "z", "a"]).await, Value::Double("1.5".into()));
    assert_eq!(
        raw.command(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]).await,
        Value::Array(vec![
            Value::Array(vec![Value::bulk("a"), Value::Double("1.5".into())]),
            Value::Array(vec![Value::bulk("b"), Value::Double("2".into())]),
        ])
    );
    assert_eq!(
        raw.command(&["ZPOPMIN", "z"]).await,
        Value::Array(vec![Value::bulk("a"), Value::Double("1.5".into())])
    );
    // RESP2: flat.
    let mut raw2 = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        raw2.command(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]).await,
        Value::Array(vec![Value::bulk("b"), Value::bulk("2")])
    );
}

/// Waits until a blocked client's first attempt has committed (its empty pop is one group
/// commit), so that what follows must wake it.
async fn wait_for_attempt(gateway: &TestGateway, commits_before: f64) {
    common::eventually(Duration::from_secs(10), "the blocked pop's first attempt", || async {
        let commits = gateway.metric("pgvs3_resp_group_commits_total").await.unwrap_or(0.0);
        (commits > commits_before).then_some(())
    })
    .await;
}

#[tokio::test]
async fn blocking_pops_are_woken_by_pushes_from_other_gateways() {
    let url = common::fresh_database().await;
    // Without NOTIFY a blocked client would only try again after 60 s: a reply within the
    // test's deadline is a wakeup.
    let args = ["--resp-addr", "127.0.0.1:0", "--resp-block-poll", "60s"];
    let first = TestGateway::with_args(url.clone(), &args).await;
    let second = TestGateway::with_args(url, &args).await;
    let mut pusher = connect(&second).await;

    let mut blocked = RawResp::connect(first.resp_addr()).await;
    let before = first.metric("pgvs3_resp_group_commits_total").await.unwrap_or(0.0);
    blocked
        .send(&common::resp::encode(&[b"BLPOP", b"empty", b"jobs", b"0"]))
        .await;
    wait_for_attempt(&first, before).await;
    assert_eq!(query::<i64>(&mut pusher, &["RPUSH", "jobs", "job-1"]).await, 1);
    let woken = tokio::time::timeout(Duration::from_secs(10), blocked.reply())
        .await
        .expect("woken");
    assert_eq!(
        woken,
        Some(Value::Array(vec![Value::bulk("jobs"), Value::bulk("job-1")]))
    );
    assert_eq!(query::<i64>(&mut pusher, &["EXISTS", "jobs"]).await, 0, "popped");

    let before = first.metric("pgvs3_resp_group_commits_total").await.unwrap_or(0.0);
    blocked
        .send(&common::resp::encode(&[b"BZPOPMIN", b"scores", b"0"]))
        .await;
    wait_for_attempt(&first, before).await;
    query::<i64>(&mut pusher, &["ZADD", "scores", "2", "b", "1", "a"]).await;
    let woken = tokio::time::timeout(Duration::from_secs(10), blocked.reply())
        .await
        .expect("woken");
    assert_eq!(
        woken,
        Some(Value::Array(vec![
            Value::bulk("scores"),
            Value::bulk("a"),
            Value::bulk("1")
        ]))
    );

    let before = first.metric("pgvs3_resp_group_commits_total").await.unwrap_or(0.0);
    blocked
        .send(&common::resp::encode(&[
            b"BLMOVE", b"src", b"dst", b"LEFT", b"RIGHT", b"0",
        ]))
        .await;
    wait_for_attempt(&first, before).await;
    query::<i64>(&mut pusher, &["LPUSH", "src", "moved"]).await;
    let woken = tokio::time::timeout(Duration::from_secs(10), blocked.reply())
        .await
        .expect("woken");
    assert_eq!(woken, Some(Value::bulk("moved")));
    assert_eq!(
        query::<Vec<String>>(&mut pusher, &["LRANGE", "dst", "0", "-1"]).await,
        ["moved"]
    );
}

#[tokio::test]
async fn blocking_pops_time_out_and_check_their_arguments() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let started = std::time::Instant::now();
    let reply: redis::Value = query(&mut con, &["BLPOP", "nothing", "0.3"]).await;
    assert_eq!(reply, redis::Value::Nil);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    let reply: redis::Value = query(&mut con, &["BRPOPLPUSH", "nothing", "dst", "0.1"]).await;
    assert_eq!(reply, redis::Value::Nil);
    // Something there: no waiting, first key with elements wins.
    query::<i64>(&mut con, &["RPUSH", "b", "1", "2"]).await;
    assert_eq!(
        query::<Vec<String>>(&mut con, &["BRPOP", "a", "b", "0"]).await,
        ["b", "2"]
    );
    assert_eq!(error(&mut con, &["BLPOP", "b", "-1"]).await, "ERR timeout is negative");
    assert_eq!(
        error(&mut con, &["BLPOP", "b", "soon"]).await,
        "ERR timeout is not a float or out of range"
    );
    assert_eq!(
        error(&mut con, &["BLPOP", "b"]).await,
        "ERR wrong number of arguments for 'blpop' command"
    );
    query::<String>(&mut con, &["SET", "s", "v"]).await;
    assert_eq!(error(&mut con, &["BLPOP", "s", "0"]).await, WRONGTYPE);
    // Inside MULTI a blocking pop does not block.
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    raw.command(&["MULTI"]).await;
    raw.command(&["BLPOP", "nothing", "0"]).await;
    raw.command(&["BLPOP", "b", "0"]).await;
    assert_eq!(
        raw.command(&["EXEC"]).await,
        Value::Array(vec![Value::Nil, Value::Array(vec![Value::bulk("b"), Value::bulk("1")])])
    );
    // A blocked client that goes away leaves nothing behind; the next one still works.
    let mut gone = RawResp::connect(gateway.resp_addr()).await;
    gone.send(&common::resp::encode(&[b"BLPOP", b"later", b"0"])).await;
    drop(gone);
    common::eventually(Duration::from_secs(10), "the closed client is gone", || {
        let mut con = con.clone();
        async move {
            let list: String = query(&mut con, &["CLIENT", "LIST"]).await;
            (list.lines().count() <= 2).then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn the_reaper_deletes_expired_typed_keys_and_their_elements() {
    let gateway = TestGateway::with_args(
        common::fresh_database().await,
        &["--resp-addr", "127.0.0.1:0", "--maintenance-interval", "100ms"],
    )
    .await;
    let mut con = connect(&gateway).await;
    query::<i64>(&mut con, &["HSET", "h", "a", "1", "b", "2"]).await;
    query::<i64>(&mut con, &["RPUSH", "l", "x"]).await;
    query::<i64>(&mut con, &["SADD", "kept", "m"]).await;
    query::<i64>(&mut con, &["PEXPIRE", "h", "50"]).await;
    query::<i64>(&mut con, &["PEXPIRE", "l", "50"]).await;
    let sql = gateway.sql().await;
    common::eventually(Duration::from_secs(15), "expired typed keys reaped", || {
        let sql = &sql;
        async move {
            let row = sql
                .query_one(
                    "SELECT (SELECT count(*) FROM pgvs3.resp_keys) AS keys, (SELECT count(*) FROM pgvs3.resp_hash) AS hash,
                            (SELECT count(*) FROM pgvs3.resp_list) AS list",
                    &[],
                )
                .await
                .unwrap();
            let counts: (i64, i64, i64) = (row.get("keys"), row.get("hash"), row.get("list"));
            (counts == (1, 0, 0)).then_some(())
        }
    })
    .await;
    assert_eq!(query::<i64>(&mut con, &["SCARD", "kept"]).await, 1);
}

#[tokio::test]
async fn multi_key_pops_answer_as_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let bulk = Value::bulk;
    raw.command(&["RPUSH", "l2", "a", "b", "c"]).await;
    assert_eq!(
        raw.command(&["LMPOP", "2", "l1", "l2", "LEFT"]).await,
        Value::Array(vec![bulk("l2"), Value::Array(vec![bulk("a")])])
    );
    assert_eq!(
        raw.command(&["LMPOP", "2", "l1", "l2", "RIGHT", "COUNT", "5"]).await,
        Value::Array(vec![bulk("l2"), Value::Array(vec![bulk("c"), bulk("b")])])
    );
    assert_eq!(
        raw.command(&["LMPOP", "1", "l2", "LEFT"]).await,
        Value::Nil,
        "emptied and deleted"
    );
    assert_eq!(
        raw.command(&["LMPOP", "0", "l2", "LEFT"]).await.error(),
        "ERR numkeys should be greater than 0"
    );
    assert_eq!(
        raw.command(&["LMPOP", "x", "l2", "LEFT"]).await.error(),
        "ERR numkeys should be greater than 0"
    );
    assert_eq!(
        raw.command(&["LMPOP", "2", "l2", "LEFT"]).await.error(),
        "ERR syntax error"
    );
    assert_eq!(
        raw.command(&["LMPOP", "1", "l2", "UP"]).await.error(),
        "ERR syntax error"
    );
    assert_eq!(
        raw.command(&["LMPOP", "1", "l2", "LEFT", "COUNT", "0"]).await.error(),
        "ERR count should be greater than 0"
    );
    assert_eq!(
        raw.command(&["LMPOP", "1"]).await.error(),
        "ERR wrong number of arguments for 'lmpop' command"
    );
    raw.command(&["SET", "s", "v"]).await;
    assert_eq!(raw.command(&["LMPOP", "1", "s", "LEFT"]).await.error(), WRONGTYPE);

    raw.command(&["ZADD", "z", "1", "a", "2", "b", "3", "c"]).await;
    assert_eq!(
        raw.command(&["ZMPOP", "1", "z", "MAX", "COUNT", "2"]).await,
        Value::Array(vec![
            bulk("z"),
            Value::Array(vec![
                Value::Array(vec![bulk("c"), bulk("3")]),
                Value::Array(vec![bulk("b"), bulk("2")]),
            ])
        ])
    );
    assert_eq!(
        raw.command(&["ZMPOP", "2", "none", "z", "MIN"]).await,
        Value::Array(vec![
            bulk("z"),
            Value::Array(vec![Value::Array(vec![bulk("a"), bulk("1")])])
        ])
    );
    assert_eq!(raw.command(&["ZMPOP", "1", "z", "MIN"]).await, Value::Nil);
    assert_eq!(raw.command(&["ZMPOP", "1", "s", "MIN"]).await.error(), WRONGTYPE);

    // The blocking forms: at once when there is something, else woken by a push.
    assert_eq!(raw.command(&["BLMPOP", "0.1", "1", "nolist", "LEFT"]).await, Value::Nil);
    let mut pusher = RawResp::connect(gateway.resp_addr()).await;
    raw.send(&common::resp::encode(&[b"BZMPOP", b"0", b"1", b"later", b"MIN"]))
        .await;
    // Until the pop waits, an add may come first: either way the pop gets it.
    pusher.command(&["ZADD", "later", "5", "m"]).await;
    let woken = tokio::time::timeout(Duration::from_secs(10), raw.reply())
        .await
        .expect("woken");
    assert_eq!(
        woken,
        Some(Value::Array(vec![
            bulk("later"),
            Value::Array(vec![Value::Array(vec![bulk("m"), bulk("5")])])
        ]))
    );
}

/// INFO's `blocked_clients`.
async fn blocked_clients(raw: &mut RawResp) -> usize {
    let Value::Bulk(info) = raw.command(&["INFO", "clients"]).await else {
        panic!("INFO is a bulk string")
    };
    let info = String::from_utf8(info).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("blocked_clients:"))
        .unwrap()
        .parse()
        .unwrap()
}

/// Clients blocked on the same keys are served in the order they blocked, each from what the
/// ones before it left, as Redis serves them (its type/list and type/zset units' `BLMPOP/BZMPOP
/// with multiple blocked clients`), compared live with redis-server 7.0.15.
#[tokio::test]
async fn blocked_clients_are_served_in_the_order_they_blocked_as_redis_does() {
    let gateway = TestGateway::with_resp(&["--resp-block-poll", "60s"]).await;
    let redis = LiveRedis::start().await;
    let pops: [&[&str]; 2] = [
        &[
            "BLMPOP 0 2 l1 l2 LEFT COUNT 1",
            "BLMPOP 0 2 l1 l2 RIGHT COUNT 10",
            "BLMPOP 0 2 l1 l2 LEFT COUNT 10",
            "BLMPOP 0 2 l1 l2 RIGHT COUNT 1",
            "MULTI",
            "LPUSH l1 a b c d e",
            "LPUSH l2 1 2 3 4 5",
            "EXEC",
            "LPUSH l2 1 2 3",
        ],
        &[
            "BZMPOP 0 2 z1 z2 MIN COUNT 1",
            "BZMPOP 0 2 z1 z2 MAX COUNT 10",
            "BZMPOP 0 2 z1 z2 MIN COUNT 10",
            "BZMPOP 0 2 z1 z2 MAX COUNT 1",
            "MULTI",
            "ZADD z1 1 a 2 b 3 c 4 d 5 e",
            "ZADD z2 1 a 2 b 3 c 4 d 5 e",
            "EXEC",
            "ZADD z2 1 a 2 b 3 c",
        ],
    ];
    for lines in pops {
        // Four clients block; a transaction serves three; a last push the fourth.
        let (blocking, pushes) = lines.split_at(4);
        let (transaction, last) = pushes.split_at(4);
        let mut replies = Vec::new();
        for addr in [gateway.resp_addr(), redis.addr()] {
            let mut pusher = RawResp::connect(addr).await;
            let mut blocked = Vec::new();
            for line in blocking {
                let mut client = RawResp::connect(addr).await;
                let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
                client.send(&encode(&args)).await;
                blocked.push(client);
                // Blocked before the next one blocks.
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                while blocked_clients(&mut pusher).await != blocked.len() {
                    assert!(std::time::Instant::now() < deadline, "{line} blocked within 30 s");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            let mut served = Vec::new();
            let (first, fourth) = blocked.split_at_mut(3);
            for (lines, clients) in [(transaction, first), (last, fourth)] {
                for line in lines {
                    pusher.command(&line.split(' ').collect::<Vec<_>>()).await;
                }
                for client in clients {
                    served.push(client.reply().await);
                }
            }
            replies.push(served);
        }
        assert_eq!(replies[0], replies[1], "{lines:?}");
    }
    // A move from a missing list answers nil (BLMOVE blocks until its timeout) whatever its
    // destination holds: Redis looks the destination up once the source has an element.
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    common::resp::live::same_lines(
        &mut ours,
        &mut theirs,
        &[
            "SET str x",
            "LMOVE nolist str LEFT LEFT",
            "RPOPLPUSH nolist str",
            "BLMOVE nolist str LEFT LEFT 0.01",
            "BRPOPLPUSH nolist str 0.01",
            "RPUSH l a",
            "LMOVE l str LEFT LEFT",
            "LRANGE l 0 -1",
        ],
    )
    .await;
}

#[tokio::test]
async fn sorted_set_combinations_answer_as_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let bulk = Value::bulk;
    raw.command(&["ZADD", "a", "1", "x", "2", "y", "3", "z"]).await;
    raw.command(&["ZADD", "b", "10", "y", "20", "z", "30", "w"]).await;
    raw.command(&["SADD", "s", "x", "w"]).await;
    assert_eq!(
        raw.command(&["ZUNION", "2", "a", "b", "WITHSCORES"]).await,
        Value::Array(["x", "1", "y", "12", "z", "23", "w", "30"].map(bulk).to_vec())
    );
    assert_eq!(
        raw.command(&["ZINTER", "2", "a", "b", "WEIGHTS", "2", "1", "AGGREGATE", "MAX"])
            .await,
        Value::Array(vec![bulk("y"), bulk("z")])
    );
    assert_eq!(
        raw.command(&["ZINTER", "2", "a", "s", "WITHSCORES"]).await,
        Value::Array(["x", "2"].map(bulk).to_vec()),
        "a set's members score 1"
    );
    assert_eq!(
        raw.command(&["ZDIFF", "2", "a", "b", "WITHSCORES"]).await,
        Value::Array(["x", "1"].map(bulk).to_vec())
    );
    assert_eq!(raw.command(&["ZDIFF", "3", "a", "b", "s"]).await, Value::Array(vec![]));
    assert_eq!(raw.command(&["ZDIFFSTORE", "d", "2", "b", "a"]).await, Value::Int(1));
    assert_eq!(
        raw.command(&["ZRANGE", "d", "0", "-1", "WITHSCORES"]).await,
        Value::Array(["w", "30"].map(bulk).to_vec())
    );
    assert_eq!(raw.command(&["ZINTERCARD", "2", "a", "b"]).await, Value::Int(2));
    assert_eq!(
        raw.command(&["ZINTERCARD", "2", "a", "b", "LIMIT", "1"]).await,
        Value::Int(1)
    );
    assert_eq!(raw.command(&["ZINTERCARD", "2", "a", "missing"]).await, Value::Int(0));
    // redis-server 7.0.15's texts: ZINTERCARD checks numkeys as ZUNION does, not as SINTERCARD.
    assert_eq!(
        raw.command(&["ZINTERCARD", "0", "a"]).await.error(),
        "ERR at least 1 input key is needed for 'zintercard' command"
    );
    assert_eq!(
        raw.command(&["ZINTERCARD", "3", "a", "b"]).await.error(),
        "ERR syntax error"
    );
    assert_eq!(
        raw.command(&["ZINTERCARD", "1", "a", "LIMIT", "-1"]).await.error(),
        "ERR LIMIT can't be negative"
    );
    // Redis 7.0.15 answers the same to a LIMIT that is not a number.
    assert_eq!(
        raw.command(&["ZINTERCARD", "1", "a", "LIMIT", "a"]).await.error(),
        "ERR LIMIT can't be negative"
    );
    assert_eq!(
        raw.command(&["ZDIFF", "2", "a", "b", "WEIGHTS", "1", "1"])
            .await
            .error(),
        "ERR syntax error"
    );
    assert_eq!(
        raw.command(&["ZUNION", "0", "a"]).await.error(),
        "ERR at least 1 input key is needed for 'zunion' command"
    );
    raw.command(&["SET", "str", "v"]).await;
    assert_eq!(raw.command(&["ZUNION", "2", "a", "str"]).await.error(), WRONGTYPE);

    // ZRANK WITHSCORE, ZRANDMEMBER, HSCAN NOVALUES.
    assert_eq!(
        raw.command(&["ZRANK", "a", "y", "WITHSCORE"]).await,
        Value::Array(vec![Value::Int(1), bulk("2")])
    );
    assert_eq!(
        raw.command(&["ZREVRANK", "a", "y", "WITHSCORE"]).await,
        Value::Array(vec![Value::Int(1), bulk("2")])
    );
    assert_eq!(raw.command(&["ZRANK", "a", "nope", "WITHSCORE"]).await, Value::Nil);
    assert_eq!(
        raw.command(&["ZRANK", "a", "y", "WITHSCORES"]).await.error(),
        "ERR syntax error"
    );
    let Value::Bulk(member) = raw.command(&["ZRANDMEMBER", "a"]).await else {
        panic!("a member")
    };
    assert!([&b"x"[..], b"y", b"z"].contains(&&member[..]));
    let Value::Array(all) = raw.command(&["ZRANDMEMBER", "a", "5", "WITHSCORES"]).await else {
        panic!("pairs")
    };
    assert_eq!(all.len(), 6, "three distinct members with their scores");
    let Value::Array(repeats) = raw.command(&["ZRANDMEMBER", "a", "-7"]).await else {
        panic!("members")
    };
    assert_eq!(repeats.len(), 7);
    assert_eq!(raw.command(&["ZRANDMEMBER", "nothing"]).await, Value::Nil);
    assert_eq!(
        raw.command(&["ZRANDMEMBER", "nothing", "3"]).await,
        Value::Array(vec![])
    );
    assert_eq!(raw.command(&["ZRANDMEMBER", "str"]).await.error(), WRONGTYPE);
    raw.command(&["HSET", "h", "f1", "v1", "f2", "v2"]).await;
    assert_eq!(
        raw.command(&["HSCAN", "h", "0", "NOVALUES"]).await,
        Value::Array(vec![bulk("0"), Value::Array(vec![bulk("f1"), bulk("f2")])])
    );
    assert_eq!(
        raw.command(&["HSCAN", "h", "0", "MATCH", "*2", "NOVALUES"]).await,
        Value::Array(vec![bulk("0"), Value::Array(vec![bulk("f2")])])
    );
}

/// Waits until `key`, given a short TTL, has expired (the reaper does not run: the test
/// gateways' maintenance interval is an hour, and the rows are checked to be still there).
async fn expired(con: &mut redis::aio::MultiplexedConnection, key: &str) {
    common::eventually(Duration::from_secs(10), "the key expires", || {
        let mut con = con.clone();
        async move { (query::<i64>(&mut con, &["EXISTS", key]).await == 0).then_some(()) }
    })
    .await;
}

/// The rows under `key`, live or not: (typed rows, string rows).
async fn rows(gateway: &TestGateway, key: &str) -> (i64, i64) {
    let sql = gateway.sql().await;
    let namespace: String = sql
        .query_one("SELECT namespace FROM pgvs3.buckets WHERE name = 'resp'", &[])
        .await
        .unwrap()
        .get("namespace");
    let row = sql
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM pgvs3.resp_keys WHERE key = $1) AS typed,
                        (SELECT count(*) FROM {namespace}.objects WHERE key = $1) AS strings"
            ),
            &[&key],
        )
        .await
        .unwrap();
    (row.get("typed"), row.get("strings"))
}

/// A key that expired is gone for every command at once, whatever table held it: a key of
/// another type made under its name is what every later command sees, and an EXPIRE, PERSIST,
/// RENAME or COPY never brings the expired value back (the reaper has not run).
#[tokio::test]
async fn an_expired_key_never_comes_back_over_a_new_key_of_another_type() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let makers: [(&str, &[&str]); 5] = [
        ("list", &["LPUSH", "KEY", "a"]),
        ("hash", &["HSET", "KEY", "f", "a"]),
        ("set", &["SADD", "KEY", "a"]),
        ("zset", &["ZADD", "KEY", "1", "a"]),
        ("stream", &["XADD", "KEY", "1-1", "f", "a"]),
    ];
    let make = |maker: &[&str], key: &str| -> Vec<String> {
        maker
            .iter()
            .map(|arg| {
                if *arg == "KEY" {
                    key.to_owned()
                } else {
                    (*arg).to_owned()
                }
            })
            .collect()
    };
    for (type_name, maker) in makers {
        // A typed key made where a string expired: EXPIRE and PERSIST reach the new key only.
        let key = format!("over-string-{type_name}");
        query::<String>(&mut con, &["SET", &key, "old", "PX", "100"]).await;
        expired(&mut con, &key).await;
        let args = make(maker, &key);
        query::<redis::Value>(&mut con, &args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        assert_eq!(query::<i64>(&mut con, &["EXPIRE", &key, "100"]).await, 1);
        assert_eq!(query::<String>(&mut con, &["TYPE", &key]).await, type_name, "{key}");
        assert_eq!(error(&mut con, &["GET", &key]).await, WRONGTYPE, "{key}");
        assert_eq!(query::<i64>(&mut con, &["PERSIST", &key]).await, 1);
        assert_eq!(query::<String>(&mut con, &["TYPE", &key]).await, type_name, "{key}");
        assert_eq!(query::<i64>(&mut con, &["DBSIZE"]).await, 1, "{key}");
        assert_eq!(rows(&gateway, &key).await, (1, 0), "{key}: the expired string went");
        query::<i64>(&mut con, &["DEL", &key]).await;

        // A string written where a typed key expired: the typed row goes with it.
        let key = format!("under-string-{type_name}");
        let args = make(maker, &key);
        query::<redis::Value>(&mut con, &args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        query::<i64>(&mut con, &["PEXPIRE", &key, "100"]).await;
        expired(&mut con, &key).await;
        assert_eq!(rows(&gateway, &key).await, (1, 0), "{key}: not reaped");
        // (A SET that reads the key first: a blind one deletes typed rows of any name anyway.)
        assert_eq!(
            query::<Option<String>>(&mut con, &["SET", &key, "new", "GET"]).await,
            None
        );
        assert_eq!(query::<i64>(&mut con, &["EXPIRE", &key, "100"]).await, 1);
        assert_eq!(query::<i64>(&mut con, &["PERSIST", &key]).await, 1);
        assert_eq!(query::<String>(&mut con, &["TYPE", &key]).await, "string", "{key}");
        assert_eq!(query::<i64>(&mut con, &["DBSIZE"]).await, 1, "{key}");
        assert_eq!(rows(&gateway, &key).await, (0, 1), "{key}: the expired typed key went");
        // Deleting the string over S3 leaves nothing behind.
        gateway
            .client
            .delete_object()
            .bucket("resp")
            .key(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(query::<String>(&mut con, &["TYPE", &key]).await, "none", "{key}");

        // RENAME and COPY of a typed key onto an expired string.
        let (source, target) = (format!("source-{type_name}"), format!("target-{type_name}"));
        query::<String>(&mut con, &["SET", &target, "old", "PX", "100"]).await;
        let args = make(maker, &source);
        query::<redis::Value>(&mut con, &args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        expired(&mut con, &target).await;
        let _: () = query(&mut con, &["RENAME", &source, &target]).await;
        assert_eq!(query::<i64>(&mut con, &["EXPIRE", &target, "100"]).await, 1);
        assert_eq!(query::<String>(&mut con, &["TYPE", &target]).await, type_name);
        query::<String>(&mut con, &["SET", &source, "old", "PX", "100"]).await;
        expired(&mut con, &source).await;
        assert_eq!(query::<i64>(&mut con, &["COPY", &target, &source]).await, 1);
        assert_eq!(query::<i64>(&mut con, &["PERSIST", &source]).await, 1);
        assert_eq!(query::<String>(&mut con, &["TYPE", &source]).await, type_name);
        assert_eq!(rows(&gateway, &source).await, (1, 0));
        query::<i64>(&mut con, &["DEL", &source, &target]).await;
    }
    // A typed key of one type over an expired one of another.
    query::<i64>(&mut con, &["HSET", "h", "f", "v"]).await;
    query::<i64>(&mut con, &["PEXPIRE", "h", "100"]).await;
    expired(&mut con, "h").await;
    assert_eq!(query::<i64>(&mut con, &["SADD", "h", "m"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["EXPIRE", "h", "100"]).await, 1);
    assert_eq!(query::<String>(&mut con, &["TYPE", "h"]).await, "set");
    assert_eq!(error(&mut con, &["HLEN", "h"]).await, WRONGTYPE);
}

/// Every key command treats an expired key that the reaper has not deleted yet as absent, for
/// strings and every type.
#[tokio::test]
async fn an_expired_key_is_absent_to_every_key_command_before_it_is_reaped() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let makers: [&[&str]; 6] = [
        &["SET", "string", "v"],
        &["RPUSH", "list", "a"],
        &["HSET", "hash", "f", "a"],
        &["SADD", "set", "a"],
        &["ZADD", "zset", "1", "a"],
        &["XADD", "stream", "1-1", "f", "a"],
    ];
    for maker in makers {
        query::<redis::Value>(&mut con, maker).await;
    }
    let keys = ["string", "list", "hash", "set", "zset", "stream"];
    for key in keys {
        assert_eq!(query::<i64>(&mut con, &["PEXPIRE", key, "100"]).await, 1);
    }
    for key in keys {
        expired(&mut con, key).await;
    }
    for key in keys {
        assert_ne!(rows(&gateway, key).await, (0, 0), "{key} is not reaped yet");
        assert_eq!(query::<String>(&mut con, &["TYPE", key]).await, "none", "{key}");
        assert_eq!(query::<i64>(&mut con, &["TTL", key]).await, -2, "{key}");
        assert_eq!(query::<i64>(&mut con, &["PTTL", key]).await, -2, "{key}");
        assert_eq!(query::<i64>(&mut con, &["EXPIRE", key, "100"]).await, 0, "{key}");
        assert_eq!(query::<i64>(&mut con, &["PERSIST", key]).await, 0, "{key}");
        assert_eq!(error(&mut con, &["RENAME", key, "elsewhere"]).await, "ERR no such key");
        assert_eq!(
            error(&mut con, &["RENAMENX", key, "elsewhere"]).await,
            "ERR no such key"
        );
        assert_eq!(query::<i64>(&mut con, &["COPY", key, "elsewhere"]).await, 0, "{key}");
        assert_eq!(query::<i64>(&mut con, &["DEL", key]).await, 0, "{key}");
        assert_eq!(
            query::<Option<String>>(&mut con, &["OBJECT", "ENCODING", key]).await,
            None
        );
    }
    assert_eq!(
        query::<i64>(&mut con, &["EXISTS", "string", "list", "hash", "set", "zset", "stream"]).await,
        0
    );
    assert_eq!(query::<i64>(&mut con, &["DBSIZE"]).await, 0);
    assert_eq!(
        query::<Vec<String>>(&mut con, &["KEYS", "*"]).await,
        Vec::<String>::new()
    );
    let (cursor, found): (String, Vec<String>) = query(&mut con, &["SCAN", "0", "COUNT", "100"]).await;
    assert_eq!((cursor.as_str(), found), ("0", Vec::<String>::new()));
    assert_eq!(query::<Option<String>>(&mut con, &["RANDOMKEY"]).await, None);
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "elsewhere"]).await, 0);
}

/// A write that found a key alive before it expired and commits after the expiry is ordered
/// before it, so a read that meets the key past its expiry while such a write holds the key
/// must wait for it and answer what it wrote, not "absent" and then the key back. For strings
/// and typed keys, read on a loaded row (GET, TYPE) or in the SQL functions (HGET, LRANGE, LLEN,
/// and HGET of a string: WRONGTYPE). The writer is this test's own transaction, holding the
/// key's locks as a write batch does and making the key persistent (as PERSIST would); the
/// history checker found the race (`resp_key_histories_are_linearizable`).
#[tokio::test]
async fn a_read_past_an_expiry_waits_for_the_write_that_found_the_key_alive() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let observer = gateway.sql().await;
    let (bucket_id, namespace) = resp_bucket(&observer).await;
    let strings = format!("{namespace}.objects");
    let bulk = Value::bulk;
    let cases: [(&[&str], &[&str], Value); 6] = [
        (&["HSET", "h1", "f", "a"], &["HGET", "h1", "f"], bulk("a")),
        (
            &["RPUSH", "l1", "x"],
            &["LRANGE", "l1", "0", "-1"],
            Value::Array(vec![bulk("x")]),
        ),
        (&["RPUSH", "l2", "x", "y"], &["LLEN", "l2"], Value::Int(2)),
        (&["HSET", "h2", "f", "a"], &["TYPE", "h2"], Value::Simple("hash".into())),
        (&["SET", "s1", "v"], &["GET", "s1"], bulk("v")),
        (
            &["SET", "s2", "v"],
            &["HGET", "s2", "f"],
            Value::Error(WRONGTYPE.into()),
        ),
    ];
    for (make, read, expected) in cases {
        let key = make[1];
        let table = match make[0] {
            "SET" => strings.as_str(),
            _ => "pgvs3.resp_keys",
        };
        query::<redis::Value>(&mut con, make).await;
        assert_eq!(query::<i64>(&mut con, &["PEXPIRE", key, "300"]).await, 1);
        // The writer: the key's locks as a write batch holds them, then its change.
        let mut writer = gateway.sql().await;
        let write = writer.transaction().await.unwrap();
        lock_as_a_writer(&write, bucket_id, key).await;
        let persist = format!("UPDATE {table} SET expires_at = NULL WHERE bucket_id = $1 AND key = $2");
        assert_eq!(write.execute(&persist, &[&bucket_id, &key]).await.unwrap(), 1);
        let expired =
            format!("SELECT expires_at <= clock_timestamp() AS expired FROM {table} WHERE bucket_id = $1 AND key = $2");
        common::eventually(Duration::from_secs(10), "the key expires", || {
            let (observer, expired) = (&observer, &expired);
            async move {
                let row = observer.query_one(expired, &[&bucket_id, &key]).await.unwrap();
                row.get::<_, bool>("expired").then_some(())
            }
        })
        .await;
        let mut reader = RawResp::connect(gateway.resp_addr()).await;
        let read_args: Vec<String> = read.iter().map(|arg| (*arg).to_owned()).collect();
        let reading = tokio::spawn(async move {
            let args: Vec<&str> = read_args.iter().map(String::as_str).collect();
            reader.command(&args).await
        });
        // The read either waits for the writer (its lock request shows) or answers at once.
        loop {
            let waiting: bool = observer
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                                       AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
                            AS waiting",
                    &[],
                )
                .await
                .unwrap()
                .get("waiting");
            if waiting || reading.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        write.commit().await.unwrap();
        assert_eq!(reading.await.unwrap(), expected, "{read:?}");
        assert_eq!(query::<i64>(&mut con, &["TTL", key]).await, -1, "{key} kept");
    }
}

/// A write batch loads its keys again after its typed commands ran: a key it found alive at
/// its first load stays alive to it, and a PERSIST of that key after them is kept even when
/// the key's deadline passed in between (it used to answer 1 and be lost: the batch changed
/// only rows live by its later clock). The typed command is held up by this test's lock on its
/// list until the string's deadline has passed.
#[tokio::test]
async fn a_persist_after_a_typed_command_in_one_batch_is_kept() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    query::<String>(&mut con, &["SET", "s", "v", "PX", "3000"]).await;
    query::<i64>(&mut con, &["RPUSH", "l", "a"]).await;
    let observer = gateway.sql().await;
    let mut blocker = gateway.sql().await;
    let block = blocker.transaction().await.unwrap();
    block
        .execute("SELECT 1 FROM pgvs3.resp_keys WHERE key = 'l' FOR UPDATE", &[])
        .await
        .unwrap();
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    for args in [&["MULTI"][..], &["RPUSH", "l", "b"], &["PERSIST", "s"]] {
        raw.command(args).await;
    }
    let exec = tokio::spawn(async move { raw.command(&["EXEC"]).await });
    common::eventually(Duration::from_secs(10), "the batch waits for the list", || {
        let observer = &observer;
        async move { (common::lock_waiters(observer).await > 0).then_some(()) }
    })
    .await;
    let namespace: String = observer
        .query_one("SELECT namespace FROM pgvs3.buckets WHERE name = 'resp'", &[])
        .await
        .unwrap()
        .get("namespace");
    let deadline_passed =
        format!("SELECT expires_at <= clock_timestamp() AS passed FROM {namespace}.objects WHERE key = 's'");
    let (observer, deadline_passed) = (&observer, &deadline_passed);
    let passed = move || async move {
        let row = observer.query_one(deadline_passed, &[]).await.unwrap();
        row.get::<_, bool>("passed")
    };
    assert!(!passed().await, "the batch loaded the string before its deadline");
    common::eventually(Duration::from_secs(10), "the deadline passes", || async {
        passed().await.then_some(())
    })
    .await;
    block.commit().await.unwrap();
    assert_eq!(exec.await.unwrap(), Value::Array(vec![Value::Int(2), Value::Int(1)]));
    assert_eq!(query::<i64>(&mut con, &["TTL", "s"]).await, -1, "kept");
    assert_eq!(query::<String>(&mut con, &["GET", "s"]).await, "v");
}

/// A read of several keys waits for each key's writers in turn; a key it waited for that then
/// expired again, past a new deadline, needs a new wait: a second writer may have found it
/// alive before that deadline and not have committed. Here `s0` is past its expiry; writer 1
/// gives it a new one and commits while the read waits for it; the read then meets `s1` past
/// its expiry and waits for writer 3 on `s1`; meanwhile writer 2 takes `s0` alive, the new
/// deadline passes, and writer 2 makes `s0` persistent. The read must wait for writer 2 and
/// answer its value; it used to answer nil, with `s0` back after it (found by reading the code
/// after `resp_key_histories_are_linearizable`'s failures).
#[tokio::test]
async fn a_read_waits_again_for_a_key_past_a_new_deadline() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    query::<String>(&mut con, &["SET", "s0", "v", "PX", "600000"]).await;
    query::<String>(&mut con, &["SET", "s1", "w", "PX", "600000"]).await;
    let observer = gateway.sql().await;
    let (bucket_id, namespace) = resp_bucket(&observer).await;
    let set_deadline = format!(
        "UPDATE {namespace}.objects SET expires_at = clock_timestamp() + $3::float8 * interval '1 second'
          WHERE bucket_id = $1 AND key = $2"
    );
    let lapsed = format!(
        "SELECT expires_at <= clock_timestamp() AS lapsed FROM {namespace}.objects WHERE bucket_id = $1 AND key = $2"
    );
    let until_lapsed = |key: &'static str| {
        let (observer, lapsed) = (&observer, &lapsed);
        common::eventually(Duration::from_secs(20), key, move || async move {
            let row = observer.query_one(lapsed, &[&bucket_id, &key]).await.unwrap();
            row.get::<_, bool>("lapsed").then_some(())
        })
    };
    // The read waits on an advisory lock, or has answered.
    let waits_or_answered = |reading: &tokio::task::JoinHandle<Value>| {
        let finished = reading.is_finished();
        let observer = &observer;
        async move {
            let waiting: bool = observer
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted) AS waiting",
                    &[],
                )
                .await
                .unwrap()
                .get("waiting");
            (waiting || finished).then_some(())
        }
    };
    // A writer: a transaction holding the key's locks as a write batch does.
    let gateway = &gateway;
    let lock = |key: &'static str| async move {
        let writer = gateway.sql().await;
        writer.batch_execute("BEGIN").await.unwrap();
        lock_as_a_writer(&writer, bucket_id, key).await;
        writer
    };
    observer
        .execute(&set_deadline, &[&bucket_id, &"s0", &-1.0f64])
        .await
        .unwrap();
    observer
        .execute(&set_deadline, &[&bucket_id, &"s1", &2.0f64])
        .await
        .unwrap();
    let writer_1 = lock("s0").await;
    writer_1
        .execute(&set_deadline, &[&bucket_id, &"s0", &4.0f64])
        .await
        .unwrap();

    let mut reader = RawResp::connect(gateway.resp_addr()).await;
    let reading = tokio::spawn(async move { reader.command(&["MGET", "s0", "s1"]).await });
    common::eventually(Duration::from_secs(10), "the read waits for writer 1", || {
        waits_or_answered(&reading)
    })
    .await;
    assert!(
        !reading.is_finished(),
        "a read past an expiry waits for the key's writer"
    );
    let writer_3 = lock("s1").await;
    until_lapsed("s1").await;
    writer_1.batch_execute("COMMIT").await.unwrap();
    // The read now meets s0 alive and s1 past its expiry, and waits for writer 3.
    common::eventually(Duration::from_secs(10), "the read waits for writer 3", || {
        waits_or_answered(&reading)
    })
    .await;
    let writer_2 = lock("s0").await;
    until_lapsed("s0").await;
    writer_2
        .execute(
            &format!("UPDATE {namespace}.objects SET expires_at = NULL WHERE bucket_id = $1 AND key = 's0'"),
            &[&bucket_id],
        )
        .await
        .unwrap();
    writer_3.batch_execute("COMMIT").await.unwrap();
    common::eventually(
        Duration::from_secs(10),
        "the read waits for writer 2 (or answered)",
        || waits_or_answered(&reading),
    )
    .await;
    writer_2.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        reading.await.unwrap(),
        Value::Array(vec![Value::bulk("v"), Value::Nil]),
        "s0 was alive for writer 2, whose write came after the read's first wait"
    );
    assert_eq!(query::<String>(&mut con, &["GET", "s0"]).await, "v");
}

/// The id and namespace of the `resp` bucket (database 0's).
async fn resp_bucket(sql: &tokio_postgres::Client) -> (i64, String) {
    let bucket = sql
        .query_one("SELECT id, namespace FROM pgvs3.buckets WHERE name = 'resp'", &[])
        .await
        .unwrap();
    (bucket.get("id"), bucket.get("namespace"))
}

/// Takes `key`'s locks in the open transaction of `sql` in the order a write batch takes them
/// (store/kv.rs): the keyspace's shared, then the key's.
async fn lock_as_a_writer(sql: &impl tokio_postgres::GenericClient, bucket_id: i64, key: &str) {
    sql.execute("SELECT pg_advisory_xact_lock_shared(-$1::int8)", &[&bucket_id])
        .await
        .unwrap();
    sql.execute(
        "SELECT pg_advisory_xact_lock($1::int4, hashtext($2))",
        &[&(bucket_id as i32), &key],
    )
    .await
    .unwrap();
}

/// WATCH answers once the writers under way on its keys are done: a transaction that holds
/// a key's lock as WATCH registers it may have written the key's row before the registration
/// existed (no mark), so it must commit before the WATCH reads, and count as before it; had
/// WATCH answered first, EXEC would miss a write that left the key as it found it (set and
/// deleted again).
#[tokio::test]
async fn watch_waits_for_the_writers_under_way_on_its_keys() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let _: String = query(&mut con, &["SET", "other", "x"]).await;
    let (writer, watch) = (gateway.sql().await, gateway.sql().await);
    let (bucket_id, _) = resp_bucket(&writer).await;
    writer.batch_execute("BEGIN").await.unwrap();
    lock_as_a_writer(&writer, bucket_id, "k").await;
    let mut watcher = RawResp::connect(gateway.resp_addr()).await;
    watcher.send(&common::resp::encode(&[b"WATCH", b"k"])).await;
    common::eventually(Duration::from_secs(10), "WATCH waiting for the writer", || async {
        (common::lock_waiters(&watch).await > 0).then_some(())
    })
    .await;
    writer.batch_execute("COMMIT").await.unwrap();
    assert_eq!(watcher.reply().await, Some(Value::Simple("OK".into())));
    // Nothing wrote k since: EXEC runs.
    for (args, reply) in [
        (&["MULTI"][..], Value::Simple("OK".into())),
        (&["SET", "k", "1"], Value::Simple("QUEUED".into())),
        (&["EXEC"], Value::Array(vec![Value::Simple("OK".into())])),
    ] {
        assert_eq!(watcher.command(args).await, reply, "{args:?}");
    }
}

/// A client INFO counts as blocked is blocked for CLIENT UNBLOCK too, even while its first
/// attempt still runs (here held on its key's lock): Redis's tests wait for
/// `blocked_clients`, then unblock. Unblocked, it answers what its timeout would.
#[tokio::test]
async fn client_unblock_finds_a_client_info_counts_as_blocked() {
    let gateway = TestGateway::with_resp(&[]).await;
    let writer = gateway.sql().await;
    let (bucket_id, _) = resp_bucket(&writer).await;
    writer.batch_execute("BEGIN").await.unwrap();
    lock_as_a_writer(&writer, bucket_id, "l").await;
    let mut blocked = RawResp::connect(gateway.resp_addr()).await;
    let Value::Int(id) = blocked.command(&["CLIENT", "ID"]).await else {
        panic!("CLIENT ID")
    };
    blocked.send(&encode(&[b"BLPOP", b"l", b"0"])).await;
    let mut admin = RawResp::connect(gateway.resp_addr()).await;
    let watch = gateway.sql().await;
    common::eventually(
        Duration::from_secs(10),
        "BLPOP's first attempt waiting for the lock",
        || async { (common::lock_waiters(&watch).await > 0).then_some(()) },
    )
    .await;
    assert_eq!(blocked_clients(&mut admin).await, 1);
    let id = id.to_string();
    assert_eq!(admin.command(&["CLIENT", "UNBLOCK", &id]).await, Value::Int(1));
    writer.batch_execute("COMMIT").await.unwrap();
    assert_eq!(blocked.reply().await, Some(Value::Nil));
    assert_eq!(admin.command(&["CLIENT", "UNBLOCK", &id]).await, Value::Int(0));
}

/// Whether a blocked client still has no reply after half a second (five of its attempts at
/// a 100 ms `--resp-block-poll`).
async fn still_blocked(blocked: &mut RawResp) -> bool {
    tokio::time::timeout(Duration::from_millis(500), blocked.reply())
        .await
        .is_err()
}

/// A blocked client is served only from a key that holds, when it is woken, the type it waits
/// on, as in Redis: a key made a string meanwhile leaves it blocked (or served by its other
/// keys), where it used to answer WRONGTYPE. Compared with redis-server 7.0.15.
#[tokio::test]
async fn a_blocked_pop_waits_on_when_its_key_changes_type() {
    // A short poll: the blocked clients look at their keys often, not only when woken.
    let gateway = TestGateway::with_resp(&["--resp-block-poll", "100ms"]).await;
    let mut con = connect(&gateway).await;
    let mut blocked = RawResp::connect(gateway.resp_addr()).await;

    blocked.send(&common::resp::encode(&[b"BLPOP", b"k", b"0"])).await;
    assert!(still_blocked(&mut blocked).await);
    // Pushed (which wakes it), then replaced by a string, in one transaction.
    let mut tx = RawResp::connect(gateway.resp_addr()).await;
    for args in [
        &["MULTI"][..],
        &["RPUSH", "k", "x"],
        &["DEL", "k"],
        &["SET", "k", "foo"],
    ] {
        tx.command(args).await;
    }
    assert_eq!(
        tx.command(&["EXEC"]).await,
        Value::Array(vec![Value::Int(1), Value::Int(1), Value::Simple("OK".into())])
    );
    assert!(still_blocked(&mut blocked).await, "a string is no list to pop from");
    query::<i64>(&mut con, &["DEL", "k"]).await;
    query::<i64>(&mut con, &["RPUSH", "k", "y"]).await;
    let reply = tokio::time::timeout(Duration::from_secs(10), blocked.reply())
        .await
        .expect("served");
    assert_eq!(reply, Some(Value::Array(vec![Value::bulk("k"), Value::bulk("y")])));

    // Of its keys, the one that became a string is passed over; another serves it.
    blocked
        .send(&common::resp::encode(&[b"BZPOPMIN", b"a", b"b", b"0"]))
        .await;
    assert!(still_blocked(&mut blocked).await);
    query::<String>(&mut con, &["SET", "a", "foo"]).await;
    query::<i64>(&mut con, &["ZADD", "b", "1", "m"]).await;
    let reply = tokio::time::timeout(Duration::from_secs(10), blocked.reply())
        .await
        .expect("served");
    assert_eq!(
        reply,
        Some(Value::Array(vec![Value::bulk("b"), Value::bulk("m"), Value::bulk("1")]))
    );

    // XREAD waits on a stream made a string, and is served when it is a stream again.
    query::<String>(&mut con, &["XADD", "s", "1-1", "f", "v"]).await;
    blocked
        .send(&common::resp::encode(&[
            b"XREAD", b"BLOCK", b"0", b"STREAMS", b"s", b"$",
        ]))
        .await;
    assert!(still_blocked(&mut blocked).await);
    query::<i64>(&mut con, &["DEL", "s"]).await;
    query::<String>(&mut con, &["SET", "s", "foo"]).await;
    assert!(still_blocked(&mut blocked).await);
    query::<i64>(&mut con, &["DEL", "s"]).await;
    query::<String>(&mut con, &["XADD", "s", "2-1", "f", "w"]).await;
    let reply = tokio::time::timeout(Duration::from_secs(10), blocked.reply())
        .await
        .expect("served");
    let Some(Value::Array(streams)) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(streams.len(), 1);

    // BLMOVE whose destination is a string when its source gets an element: WRONGTYPE, and
    // the element stays, as in Redis.
    blocked
        .send(&common::resp::encode(&[
            b"BLMOVE", b"src", b"dst", b"LEFT", b"RIGHT", b"0",
        ]))
        .await;
    assert!(still_blocked(&mut blocked).await);
    query::<String>(&mut con, &["SET", "dst", "foo"]).await;
    query::<i64>(&mut con, &["RPUSH", "src", "a"]).await;
    let reply = tokio::time::timeout(Duration::from_secs(10), blocked.reply())
        .await
        .expect("answered");
    assert_eq!(reply, Some(Value::Error(WRONGTYPE.into())));
    assert_eq!(
        query::<Vec<String>>(&mut con, &["LRANGE", "src", "0", "-1"]).await,
        ["a"]
    );
}

/// WATCH sees a typed key changed only when a command changed it, as Redis signals keys: a
/// write that changes nothing (SADD of a member already there, SREM of a missing one, a no-op
/// SMOVE, HSETNX of a set field, ZADD of the same score) does not abort EXEC; real changes do,
/// HSET of the same value included. Each case compared with redis-server 7.0.15.
#[tokio::test]
async fn watch_ignores_writes_that_change_nothing() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut watcher = RawResp::connect(gateway.resp_addr()).await;
    type Case<'a> = (&'a [&'a [&'a str]], &'a str, &'a [&'a str], bool);
    let cases: &[Case] = &[
        (&[&["SADD", "d", "a"]], "d", &["SADD", "d", "a"], false),
        (&[&["SADD", "d", "a"]], "d", &["SADD", "d", "b"], true),
        (&[&["SADD", "d", "a"]], "d", &["SREM", "d", "zz"], false),
        (&[&["SADD", "d", "a"]], "d", &["SMOVE", "d", "e", "zz"], false),
        (&[&["SADD", "d", "a"]], "d", &["SMOVE", "d", "d", "a"], false),
        (
            &[&["SADD", "d", "a"], &["SADD", "e", "a"]],
            "e",
            &["SMOVE", "d", "e", "a"],
            false,
        ),
        (
            &[&["SADD", "d", "a", "b"], &["SADD", "e", "a"]],
            "d",
            &["SMOVE", "d", "e", "a"],
            true,
        ),
        (&[&["SADD", "d", "a", "b"]], "e", &["SMOVE", "d", "e", "a"], true),
        (&[&["HSET", "d", "f", "v"]], "d", &["HSETNX", "d", "f", "w"], false),
        (&[&["HSET", "d", "f", "v"]], "d", &["HSETNX", "d", "g", "w"], true),
        (&[&["HSET", "d", "f", "v"]], "d", &["HDEL", "d", "zz"], false),
        (&[&["HSET", "d", "f", "v"]], "d", &["HSET", "d", "f", "v"], true),
        (&[&["ZADD", "d", "1", "a"]], "d", &["ZADD", "d", "1", "a"], false),
        (&[&["ZADD", "d", "1", "a"]], "d", &["ZREM", "d", "zz"], false),
        (&[&["RPUSH", "d", "a"]], "d", &["LREM", "d", "0", "zz"], false),
        (&[&["RPUSH", "d", "a"]], "d", &["LSET", "d", "0", "a"], true),
    ];
    for (setup, watched, change, aborts) in cases {
        query::<i64>(&mut con, &["DEL", "d", "e"]).await;
        for args in *setup {
            query::<redis::Value>(&mut con, args).await;
        }
        assert_eq!(watcher.command(&["WATCH", watched]).await, Value::Simple("OK".into()));
        query::<redis::Value>(&mut con, change).await;
        watcher.command(&["MULTI"]).await;
        watcher.command(&["PING"]).await;
        let exec = watcher.command(&["EXEC"]).await;
        assert_eq!(
            exec == Value::Nil,
            *aborts,
            "WATCH {watched}, then {change:?}: {exec:?}"
        );
    }
}

/// Scores as redis-server 7.0.15 prints them (`addReplyDouble`: C's `%.17g`), in RESP2 and
/// RESP3 replies, WITHSCORES, ZSCAN and scripts; INCRBYFLOAT keeps its own format.
#[tokio::test]
async fn scores_print_as_redis_7_0_prints_doubles() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let cases = [
        ("a", "0.1", "0.10000000000000001"),
        ("b", "1e300", "1.0000000000000001e+300"),
        ("c", "3", "3"),
        ("d", "1.5", "1.5"),
        ("e", "1e17", "1e+17"),
        ("f", "123456789012345678", "1.2345678901234568e+17"),
        ("g", "1e-5", "1.0000000000000001e-05"),
        ("h", "1e16", "10000000000000000"),
        ("i", "0.0001", "0.0001"),
        ("j", "-2.5e-7", "-2.4999999999999999e-07"),
        ("k", "-inf", "-inf"),
        ("l", "12345.678", "12345.678"),
        ("m", "5e-324", "4.9406564584124654e-324"),
    ];
    for (member, score, printed) in cases {
        raw.command(&["ZADD", "s", score, member]).await;
        assert_eq!(
            raw.command(&["ZSCORE", "s", member]).await,
            Value::bulk(printed),
            "{score}"
        );
    }
    assert_eq!(
        raw.command(&["ZRANGE", "s", "0", "1", "WITHSCORES"]).await,
        Value::Array(["k", "-inf", "j", "-2.4999999999999999e-07"].map(Value::bulk).to_vec())
    );
    assert_eq!(
        raw.command(&["ZINCRBY", "s", "0.1", "a"]).await,
        Value::bulk("0.20000000000000001")
    );
    assert_eq!(
        raw.command(&["ZSCAN", "s", "0", "MATCH", "b", "COUNT", "100"]).await,
        Value::Array(vec![
            Value::bulk("0"),
            Value::Array(["b", "1.0000000000000001e+300"].map(Value::bulk).to_vec())
        ])
    );
    assert_eq!(
        raw.command(&["EVAL", "return redis.call('ZSCORE', KEYS[1], 'a')", "1", "s"])
            .await,
        Value::bulk("0.20000000000000001")
    );
    raw.command(&["SET", "n", "1.5"]).await;
    assert_eq!(raw.command(&["INCRBYFLOAT", "n", "0.1"]).await, Value::bulk("1.6"));
    raw.command(&["HELLO", "3"]).await;
    assert_eq!(
        raw.command(&["ZSCORE", "s", "b"]).await,
        Value::Double("1.0000000000000001e+300".into())
    );
}
