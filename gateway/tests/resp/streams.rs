//! RESP streams over the wire with redis-rs (and redis-cli): XADD, XRANGE, XREAD (blocking,
//! woken across gateways), XDEL, XTRIM, XSETID and XINFO answer as Redis 7 does, with its error
//! texts, and the keyspace commands, expiry, WATCH and pipelines cover streams as the other types.

use crate::redis_rs;
use pgvs3_testkit as common;

use std::time::Duration;

use common::TestGateway;
use common::resp::{RawResp, Value};
use redis::aio::MultiplexedConnection;
use redis_rs::{connect, error, gateways_woken_by_notify, query, woken_by_xadd};

/// An entry as redis-rs reads XRANGE's: its ID and its fields and values.
type Entry = (String, Vec<String>);

async fn range(con: &mut MultiplexedConnection, args: &[&str]) -> Vec<Entry> {
    query(con, args).await
}

fn ids(entries: &[Entry]) -> Vec<&str> {
    entries.iter().map(|(id, _)| id.as_str()).collect()
}

/// An XREAD reply as redis-rs reads it: per stream its name and entries.
type Streams = Vec<(String, Vec<Entry>)>;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";
const TOO_SMALL: &str = "ERR The ID specified in XADD is equal or smaller than the target stream top item";

#[tokio::test]
async fn xadd_xrange_and_xlen_answer_as_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;

    assert_eq!(query::<String>(&mut con, &["XADD", "s", "1-1", "a", "1"]).await, "1-1");
    assert_eq!(
        query::<String>(&mut con, &["XADD", "s", "1-*", "b", "2", "c", "3"]).await,
        "1-2"
    );
    assert_eq!(
        query::<String>(&mut con, &["XADD", "s", "5", "d", "4"]).await,
        "5-0",
        "an incomplete ID has seq 0"
    );
    assert_eq!(query::<String>(&mut con, &["XADD", "s", "5-*", "e", "5"]).await, "5-1");
    assert_eq!(query::<String>(&mut con, &["XADD", "s", "7-*", "f", "6"]).await, "7-0");
    // `*`: the database's clock in milliseconds, after the last ID.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let auto: String = query(&mut con, &["XADD", "s", "*", "g", "7"]).await;
    let (ms, seq) = auto.split_once('-').unwrap();
    let ms: u64 = ms.parse().unwrap();
    assert!(ms.abs_diff(now) < 60_000, "{auto} is about now ({now})");
    assert_eq!(seq, "0");
    let next: String = query(&mut con, &["XADD", "s", "*", "h", "8"]).await;
    assert!(next > auto || next.len() > auto.len(), "{next} after {auto}");
    assert_eq!(query::<i64>(&mut con, &["XLEN", "s"]).await, 7);
    assert_eq!(query::<i64>(&mut con, &["XLEN", "nostream"]).await, 0);

    let all = range(&mut con, &["XRANGE", "s", "-", "+"]).await;
    assert_eq!(ids(&all)[..5], ["1-1", "1-2", "5-0", "5-1", "7-0"]);
    assert_eq!(all[1].1, ["b", "2", "c", "3"], "fields and values in the order given");
    // Incomplete IDs: a start at seq 0, an end at the greatest seq.
    assert_eq!(
        ids(&range(&mut con, &["XRANGE", "s", "1", "5"]).await),
        ["1-1", "1-2", "5-0", "5-1"]
    );
    assert_eq!(
        ids(&range(&mut con, &["XRANGE", "s", "(1-1", "(5-1"]).await),
        ["1-2", "5-0"]
    );
    assert_eq!(
        ids(&range(&mut con, &["XRANGE", "s", "(1", "5-0"]).await),
        ["1-1", "1-2", "5-0"]
    );
    assert_eq!(
        ids(&range(&mut con, &["XRANGE", "s", "-", "+", "COUNT", "2"]).await),
        ["1-1", "1-2"]
    );
    assert_eq!(
        ids(&range(&mut con, &["XRANGE", "s", "5", "1"]).await),
        Vec::<&str>::new()
    );
    assert_eq!(
        ids(&range(&mut con, &["XREVRANGE", "s", "5", "-", "COUNT", "3"]).await),
        ["5-1", "5-0", "1-2"]
    );
    assert_eq!(
        ids(&range(&mut con, &["XREVRANGE", "s", "(5-1", "(1-1"]).await),
        ["5-0", "1-2"]
    );
    assert_eq!(
        range(&mut con, &["XRANGE", "nostream", "-", "+"]).await,
        Vec::<Entry>::new()
    );
    // COUNT 0 of an existing stream: the null array, as Redis answers.
    let zero: redis::Value = query(&mut con, &["XRANGE", "s", "-", "+", "COUNT", "0"]).await;
    assert_eq!(zero, redis::Value::Nil);

    // NOMKSTREAM: nothing made.
    let none: Option<String> = query(&mut con, &["XADD", "nostream", "NOMKSTREAM", "*", "a", "1"]).await;
    assert_eq!(none, None);
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "nostream"]).await, 0);
    let added: String = query(&mut con, &["XADD", "s", "NOMKSTREAM", "*", "a", "1"]).await;
    assert!(added > next || added.len() > next.len(), "{added} after {next}");
    assert_eq!(query::<i64>(&mut con, &["XLEN", "s"]).await, 8);
}

#[tokio::test]
async fn ids_are_never_reused_after_deletes_and_trims() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    for id in ["1-1", "2-1", "3-1"] {
        query::<String>(&mut con, &["XADD", "s", id, "f", "v"]).await;
    }
    assert_eq!(query::<i64>(&mut con, &["XDEL", "s", "3-1", "3-1", "9-9"]).await, 1);
    assert_eq!(error(&mut con, &["XADD", "s", "3-1", "f", "v"]).await, TOO_SMALL);
    assert_eq!(error(&mut con, &["XADD", "s", "2-5", "f", "v"]).await, TOO_SMALL);
    assert_eq!(query::<String>(&mut con, &["XADD", "s", "3-*", "f", "v"]).await, "3-2");
    // Trimmed empty, the stream stays with its last ID.
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "s", "MAXLEN", "0"]).await, 3);
    assert_eq!(query::<i64>(&mut con, &["XLEN", "s"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "s"]).await, 1);
    assert_eq!(query::<String>(&mut con, &["TYPE", "s"]).await, "stream");
    assert_eq!(error(&mut con, &["XADD", "s", "3-2", "f", "v"]).await, TOO_SMALL);
    assert_eq!(query::<String>(&mut con, &["XADD", "s", "3-*", "f", "v"]).await, "3-3");

    // The greatest ID: nothing can follow it.
    let max = "18446744073709551615-18446744073709551615";
    assert_eq!(query::<String>(&mut con, &["XADD", "s", max, "f", "v"]).await, max);
    let exhausted = "ERR The stream has exhausted the last possible ID, unable to add more items";
    assert_eq!(error(&mut con, &["XADD", "s", "*", "f", "v"]).await, exhausted);
    assert_eq!(
        error(&mut con, &["XADD", "s", "18446744073709551615-*", "f", "v"]).await,
        exhausted
    );
    assert_eq!(ids(&range(&mut con, &["XRANGE", "s", "(3-3", "+"]).await), [max]);
    assert_eq!(
        error(&mut con, &["XRANGE", "s", &format!("({max}"), "+"]).await,
        "ERR invalid start ID for the interval"
    );
    assert_eq!(
        error(&mut con, &["XRANGE", "s", "-", "(0-0"]).await,
        "ERR invalid end ID for the interval"
    );
    // `0-*` on a new stream: 0-1.
    assert_eq!(query::<String>(&mut con, &["XADD", "t", "0-*", "f", "v"]).await, "0-1");
}

#[tokio::test]
async fn trimming_by_length_and_by_id() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    for i in 1..=10 {
        query::<String>(&mut con, &["XADD", "s", &format!("{i}-0"), "n", &i.to_string()]).await;
    }
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "s", "MAXLEN", "=", "8"]).await, 2);
    assert_eq!(
        ids(&range(&mut con, &["XRANGE", "s", "-", "+", "COUNT", "1"]).await),
        ["3-0"]
    );
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "s", "MAXLEN", "5"]).await, 3);
    assert_eq!(query::<i64>(&mut con, &["XLEN", "s"]).await, 5);
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "s", "MINID", "8"]).await, 2);
    assert_eq!(
        ids(&range(&mut con, &["XRANGE", "s", "-", "+"]).await),
        ["8-0", "9-0", "10-0"]
    );
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "s", "MINID", "=", "1"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "nostream", "MAXLEN", "0"]).await, 0);

    // XADD trims after adding: MAXLEN keeps the newest.
    for i in 11..=14 {
        query::<String>(
            &mut con,
            &["XADD", "s", "MAXLEN", "=", "3", &format!("{i}-0"), "n", "x"],
        )
        .await;
    }
    assert_eq!(
        ids(&range(&mut con, &["XRANGE", "s", "-", "+"]).await),
        ["12-0", "13-0", "14-0"]
    );
    query::<String>(&mut con, &["XADD", "s", "MINID", "14", "15-0", "n", "x"]).await;
    assert_eq!(
        ids(&range(&mut con, &["XRANGE", "s", "-", "+"]).await),
        ["14-0", "15-0"]
    );
    query::<String>(&mut con, &["XADD", "s", "MAXLEN", "0", "16-0", "n", "x"]).await;
    assert_eq!(query::<i64>(&mut con, &["XLEN", "s"]).await, 0);
    // An empty stream exists: NOMKSTREAM adds to it.
    query::<String>(
        &mut con,
        &[
            "XADD",
            "s",
            "NOMKSTREAM",
            "MAXLEN",
            "~",
            "5",
            "LIMIT",
            "0",
            "*",
            "n",
            "x",
        ],
    )
    .await;
    assert_eq!(query::<i64>(&mut con, &["XLEN", "s"]).await, 1);
}

async fn set_node_entries(con: &mut MultiplexedConnection, value: &str) {
    let _: () = query(con, &["CONFIG", "SET", "stream-node-max-entries", value]).await;
}

/// `count` XADDs to `key` with `*` IDs, in one pipeline.
fn xadds(key: &str, count: usize) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for i in 0..count {
        pipe.cmd("XADD").arg(key).arg("*").arg("f").arg(i).ignore();
    }
    pipe
}

/// `~` trims whole nodes only, as Redis's radix tree of listpacks: a node takes
/// `stream-node-max-entries` entries (deleted ones count), and goes whole or not at all; LIMIT
/// counts the entries of whole nodes. Every number here is redis-server 7.0.15's.
#[tokio::test]
async fn approximate_trims_remove_whole_nodes_as_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    set_node_entries(&mut con, "10").await;
    let _: () = xadds("x", 100).query_async(&mut con).await.unwrap();
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "x", "MAXLEN", "66"]).await, 34);
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "x", "MAXLEN", "=", "55"]).await, 11);
    // The oldest node holds 5 now: without it 50 are left, and the next would leave 40 < 44.
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "x", "MAXLEN", "~", "44"]).await, 5);
    assert_eq!(query::<i64>(&mut con, &["XLEN", "x"]).await, 50);
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "x", "MAXLEN", "~", "40"]).await, 10);

    // LIMIT: no more than 30 entries of whole nodes (3 nodes of 10) per XADD.
    let _: () = xadds("y", 100).query_async(&mut con).await.unwrap();
    for expected in [71, 62] {
        query::<String>(
            &mut con,
            &["XADD", "y", "MAXLEN", "~", "55", "LIMIT", "30", "*", "f", "v"],
        )
        .await;
        assert_eq!(query::<i64>(&mut con, &["XLEN", "y"]).await, expected);
    }
    // LIMIT 0: no limit.
    assert_eq!(
        query::<i64>(&mut con, &["XTRIM", "y", "MAXLEN", "~", "0", "LIMIT", "0"]).await,
        62
    );

    // Without LIMIT, `~` removes at most 100 nodes' worth.
    set_node_entries(&mut con, "1").await;
    let _: () = xadds("z", 102).query_async(&mut con).await.unwrap();
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "z", "MAXLEN", "~", "1"]).await, 100);
    assert_eq!(query::<i64>(&mut con, &["XLEN", "z"]).await, 2);
    // An exact trim has no limit.
    let _: () = xadds("z", 200).query_async(&mut con).await.unwrap();
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "z", "MAXLEN", "1"]).await, 201);

    set_node_entries(&mut con, "2").await;
    let _: () = xadds("w", 3).query_async(&mut con).await.unwrap();
    assert_eq!(
        query::<i64>(&mut con, &["XTRIM", "w", "MAXLEN", "~", "0", "LIMIT", "1"]).await,
        0
    );
    assert_eq!(
        query::<i64>(&mut con, &["XTRIM", "w", "MAXLEN", "~", "0", "LIMIT", "2"]).await,
        2
    );

    // XDEL: a node left empty goes; deleted entries still count against a node's size.
    set_node_entries(&mut con, "3").await;
    for i in 1..=6 {
        query::<String>(&mut con, &["XADD", "v", &format!("{i}-0"), "f", "v"]).await;
    }
    assert_eq!(query::<i64>(&mut con, &["XDEL", "v", "1-0", "2-0", "3-0"]).await, 3);
    query::<String>(&mut con, &["XADD", "v", "7-0", "f", "v"]).await;
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "v", "MAXLEN", "~", "1"]).await, 3);
    for i in 8..=10 {
        query::<String>(&mut con, &["XADD", "v", &format!("{i}-0"), "f", "v"]).await;
    }
    // MINID: a node goes when its last ID is below the threshold.
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "v", "MINID", "~", "9"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "v", "MINID", "~", "10"]).await, 3);
    query::<String>(&mut con, &["XADD", "v", "11-0", "f", "v"]).await;
    assert_eq!(query::<i64>(&mut con, &["XDEL", "v", "11-0"]).await, 1);
    for i in 12..=13 {
        query::<String>(&mut con, &["XADD", "v", &format!("{i}-0"), "f", "v"]).await;
    }
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "v", "MAXLEN", "~", "1"]).await, 2);
    assert_eq!(ids(&range(&mut con, &["XRANGE", "v", "-", "+"]).await), ["13-0"]);

    // COPY keeps the nodes, as Redis copies the listpacks.
    for i in 14..=15 {
        query::<String>(&mut con, &["XADD", "v", &format!("{i}-0"), "f", "v"]).await;
    }
    assert_eq!(query::<i64>(&mut con, &["COPY", "v", "u"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "u", "MAXLEN", "~", "0"]).await, 3);

    assert_eq!(
        query::<Vec<String>>(&mut con, &["CONFIG", "GET", "stream-node-max-entries"]).await,
        ["stream-node-max-entries", "3"]
    );
    assert_eq!(
        error(&mut con, &["CONFIG", "SET", "stream-node-max-entries", "-1"]).await,
        "ERR CONFIG SET failed (possibly related to argument 'stream-node-max-entries') - argument must be between 0 \
         and 9223372036854775807 inclusive"
    );
}

#[tokio::test]
async fn xread_reads_after_ids_from_many_streams() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    for id in ["1-0", "2-0", "3-0"] {
        query::<String>(&mut con, &["XADD", "a", id, "f", id]).await;
    }
    query::<String>(&mut con, &["XADD", "b", "5-0", "g", "x"]).await;

    let read: Streams = query(&mut con, &["XREAD", "STREAMS", "a", "b", "nostream", "1", "0-0", "0"]).await;
    assert_eq!(read.len(), 2, "only streams with entries: {read:?}");
    assert_eq!(read[0].0, "a");
    assert_eq!(ids(&read[0].1), ["2-0", "3-0"]);
    assert_eq!(read[0].1[0].1, ["f", "2-0"]);
    assert_eq!(read[1].0, "b");
    assert_eq!(ids(&read[1].1), ["5-0"]);
    let read: Streams = query(&mut con, &["XREAD", "COUNT", "1", "STREAMS", "a", "b", "-", "-"]).await;
    assert_eq!(ids(&read[0].1), ["1-0"]);
    assert_eq!(ids(&read[1].1), ["5-0"]);
    // `+`: the last entry (Redis 7.4).
    let read: Streams = query(&mut con, &["XREAD", "STREAMS", "a", "+"]).await;
    assert_eq!(ids(&read[0].1), ["3-0"]);
    // Nothing after: the null array; `$` without BLOCK never has anything.
    let nothing: redis::Value = query(&mut con, &["XREAD", "STREAMS", "a", "b", "3-0", "$"]).await;
    assert_eq!(nothing, redis::Value::Nil);
    let nothing: redis::Value = query(&mut con, &["XREAD", "COUNT", "0", "STREAMS", "nostream", "0"]).await;
    assert_eq!(nothing, redis::Value::Nil);

    // RESP3: a map of streams; RESP2: an array of [name, entries].
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let entry = Value::Array(vec![
        Value::bulk("5-0"),
        Value::Array(vec![Value::bulk("g"), Value::bulk("x")]),
    ]);
    assert_eq!(
        raw.command(&["XREAD", "STREAMS", "b", "0"]).await,
        Value::Array(vec![Value::Array(vec![
            Value::bulk("b"),
            Value::Array(vec![entry.clone()])
        ])])
    );
    raw.command(&["HELLO", "3"]).await;
    assert_eq!(
        raw.command(&["XREAD", "STREAMS", "b", "0"]).await,
        Value::Map(vec![(Value::bulk("b"), Value::Array(vec![entry]))])
    );
    assert_eq!(raw.command(&["XREAD", "STREAMS", "b", "5"]).await, Value::Nil);
}

#[tokio::test]
async fn xinfo_reports_a_stream() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    for id in ["1-1", "2-1", "3-1"] {
        query::<String>(&mut con, &["XADD", "s", id, "f", id]).await;
    }
    query::<i64>(&mut con, &["XDEL", "s", "2-1"]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let entry = |id: &str| {
        Value::Array(vec![
            Value::bulk(id),
            Value::Array(vec![Value::bulk("f"), Value::bulk(id)]),
        ])
    };
    let info = |fields: Vec<(&str, Value)>| {
        Value::Array(
            fields
                .into_iter()
                .flat_map(|(name, value)| [Value::bulk(name), value])
                .collect(),
        )
    };
    assert_eq!(
        raw.command(&["XINFO", "STREAM", "s"]).await,
        info(vec![
            ("length", Value::Int(2)),
            ("radix-tree-keys", Value::Int(1)),
            ("radix-tree-nodes", Value::Int(2)),
            ("last-generated-id", Value::bulk("3-1")),
            ("max-deleted-entry-id", Value::bulk("2-1")),
            ("entries-added", Value::Int(3)),
            ("recorded-first-entry-id", Value::bulk("1-1")),
            ("groups", Value::Int(0)),
            ("first-entry", entry("1-1")),
            ("last-entry", entry("3-1")),
        ])
    );
    assert_eq!(
        raw.command(&["XINFO", "STREAM", "s", "FULL", "COUNT", "1"]).await,
        info(vec![
            ("length", Value::Int(2)),
            ("radix-tree-keys", Value::Int(1)),
            ("radix-tree-nodes", Value::Int(2)),
            ("last-generated-id", Value::bulk("3-1")),
            ("max-deleted-entry-id", Value::bulk("2-1")),
            ("entries-added", Value::Int(3)),
            ("recorded-first-entry-id", Value::bulk("1-1")),
            ("entries", Value::Array(vec![entry("1-1")])),
            ("groups", Value::Array(vec![])),
        ])
    );
    // Emptied by XTRIM (which, as in Redis, leaves max-deleted-entry-id alone).
    query::<i64>(&mut con, &["XTRIM", "s", "MAXLEN", "0"]).await;
    assert_eq!(
        raw.command(&["XINFO", "STREAM", "s"]).await,
        info(vec![
            ("length", Value::Int(0)),
            ("radix-tree-keys", Value::Int(0)),
            ("radix-tree-nodes", Value::Int(1)),
            ("last-generated-id", Value::bulk("3-1")),
            ("max-deleted-entry-id", Value::bulk("2-1")),
            ("entries-added", Value::Int(3)),
            ("recorded-first-entry-id", Value::bulk("0-0")),
            ("groups", Value::Int(0)),
            ("first-entry", Value::Nil),
            ("last-entry", Value::Nil),
        ])
    );
    // No consumer groups exist.
    assert_eq!(raw.command(&["XINFO", "GROUPS", "s"]).await, Value::Array(vec![]));
    assert_eq!(
        raw.command(&["XINFO", "CONSUMERS", "s", "g"]).await,
        Value::Error("NOGROUP No such consumer group 'g' for key name 's'".into())
    );
    assert_eq!(
        raw.command(&["XINFO", "STREAM", "nostream"]).await,
        Value::Error("ERR no such key".into())
    );
    assert_eq!(
        raw.command(&["XINFO", "GROUPS", "nostream"]).await,
        Value::Error("ERR no such key".into())
    );
}

#[tokio::test]
async fn stream_errors_are_redis_texts() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    query::<String>(&mut con, &["XADD", "s", "1-1", "a", "1"]).await;
    query::<String>(&mut con, &["SET", "str", "v"]).await;
    let cases: &[(&[&str], &str)] = &[
        (
            &["XADD", "s", "0-0", "a", "1"],
            "ERR The ID specified in XADD must be greater than 0-0",
        ),
        (
            &["XADD", "t", "0", "a", "1"],
            "ERR The ID specified in XADD must be greater than 0-0",
        ),
        (&["XADD", "s", "1-1", "a", "1"], TOO_SMALL),
        (
            &["XADD", "s", "*", "a"],
            "ERR wrong number of arguments for 'xadd' command",
        ),
        (
            &["XADD", "s", "*", "a", "1", "b"],
            "ERR wrong number of arguments for 'xadd' command",
        ),
        (&["XADD", "s", "abc", "a", "1"], INVALID_ID),
        (&["XADD", "s", "-", "a", "1"], INVALID_ID),
        (&["XADD", "s", "1-2-*", "a", "1"], INVALID_ID),
        (&["XADD", "s", "18446744073709551616-1", "a", "1"], INVALID_ID),
        (
            &["XADD", "s", "MAXLEN", "=", "1", "LIMIT", "5", "*", "a", "1"],
            "ERR syntax error, LIMIT cannot be used without the special ~ option",
        ),
        (
            &["XADD", "s", "MAXLEN", "-1", "*", "a", "1"],
            "ERR The MAXLEN argument must be >= 0.",
        ),
        (
            &["XADD", "s", "MAXLEN", "1", "MINID", "5", "*", "a", "1"],
            "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
        ),
        (
            &["XADD", "s", "MAXLEN", "x", "*", "a", "1"],
            "ERR value is not an integer or out of range",
        ),
        (&["XADD", "str", "*", "a", "1"], WRONGTYPE),
        (&["XADD"], "ERR wrong number of arguments for 'xadd' command"),
        (&["XLEN", "str"], WRONGTYPE),
        (&["XLEN"], "ERR wrong number of arguments for 'xlen' command"),
        (&["XRANGE", "s", "(-", "+"], INVALID_ID),
        (&["XRANGE", "s", "x", "+"], INVALID_ID),
        (&["XRANGE", "s", "-", "+", "COUNT"], "ERR syntax error"),
        (&["XRANGE", "s", "-", "+", "LIMIT", "1"], "ERR syntax error"),
        (
            &["XRANGE", "s", "-", "+", "COUNT", "x"],
            "ERR value is not an integer or out of range",
        ),
        (&["XRANGE", "str", "-", "+"], WRONGTYPE),
        (
            &["XREVRANGE", "s", "+"],
            "ERR wrong number of arguments for 'xrevrange' command",
        ),
        (&["XDEL", "s", "-"], INVALID_ID),
        (&["XDEL", "str", "1-1"], WRONGTYPE),
        (&["XTRIM", "s", "foo", "1"], "ERR syntax error"),
        (&["XTRIM", "s"], "ERR wrong number of arguments for 'xtrim' command"),
        (
            &["XTRIM", "s", "MAXLEN", "1", "LIMIT", "-1"],
            "ERR The LIMIT argument must be >= 0.",
        ),
        (&["XTRIM", "s", "MINID", "+"], INVALID_ID),
        (
            &["XREAD", "STREAMS", "s"],
            "ERR wrong number of arguments for 'xread' command",
        ),
        (
            &["XREAD", "STREAMS", "s", "t", "0"],
            "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
        ),
        (
            &["XREAD", "COUNT", "1", "STREAMS", "s", ">"],
            "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
        ),
        (
            &["XREAD", "BLOCK", "-1", "STREAMS", "s", "0"],
            "ERR timeout is negative",
        ),
        (
            &["XREAD", "BLOCK", "abc", "STREAMS", "s", "0"],
            "ERR timeout is not an integer or out of range",
        ),
        (
            &["XREAD", "COUNT", "abc", "STREAMS", "s", "0"],
            "ERR value is not an integer or out of range",
        ),
        (&["XREAD", "FOO", "1", "STREAMS", "s", "0"], "ERR syntax error"),
        (&["XREAD", "COUNT", "1", "s", "0"], "ERR syntax error"),
        (&["XREAD", "STREAMS", "s", "x"], INVALID_ID),
        (&["XREAD", "STREAMS", "str", "0"], WRONGTYPE),
        (&["XINFO", "STREAM", "str"], WRONGTYPE),
        (&["XINFO", "FOO", "s"], "ERR unknown subcommand 'FOO'. Try XINFO HELP."),
        (
            &["XINFO", "STREAM"],
            "ERR wrong number of arguments for 'xinfo|stream' command",
        ),
        (&["XINFO", "STREAM", "s", "FULLER"], "ERR syntax error"),
        // A stream is no string, list or hash.
        (&["GET", "s"], WRONGTYPE),
        (&["LPUSH", "s", "x"], WRONGTYPE),
        (&["HGET", "s", "a"], WRONGTYPE),
    ];
    for (args, expected) in cases {
        assert_eq!(error(&mut con, args).await, *expected, "{args:?}");
    }
    // None of the errors changed the stream.
    assert_eq!(ids(&range(&mut con, &["XRANGE", "s", "-", "+"]).await), ["1-1"]);
}

#[tokio::test]
async fn the_keyspace_commands_work_on_streams() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb"]).await;
    let mut con = connect(&gateway).await;
    query::<String>(&mut con, &["XADD", "s", "1-1", "f", "v"]).await;
    query::<String>(&mut con, &["SET", "str", "v"]).await;
    assert_eq!(query::<String>(&mut con, &["TYPE", "s"]).await, "stream");
    assert_eq!(query::<String>(&mut con, &["OBJECT", "ENCODING", "s"]).await, "stream");
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "s", "str", "none"]).await, 2);
    assert_eq!(query::<i64>(&mut con, &["DBSIZE"]).await, 2);
    let (_, keys): (String, Vec<String>) = query(&mut con, &["SCAN", "0", "TYPE", "stream"]).await;
    assert_eq!(keys, ["s"]);

    // RENAME carries entries and the last ID; COPY makes an independent stream.
    assert_eq!(query::<String>(&mut con, &["RENAME", "s", "moved"]).await, "OK");
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "s"]).await, 0);
    assert_eq!(error(&mut con, &["XADD", "moved", "1-1", "f", "v"]).await, TOO_SMALL);
    assert_eq!(query::<i64>(&mut con, &["COPY", "moved", "copy"]).await, 1);
    query::<String>(&mut con, &["XADD", "copy", "2-0", "g", "w"]).await;
    assert_eq!(query::<i64>(&mut con, &["XLEN", "moved"]).await, 1, "a copy is its own");
    assert_eq!(query::<i64>(&mut con, &["XLEN", "copy"]).await, 2);
    query::<i64>(&mut con, &["XDEL", "moved", "1-1"]).await;
    assert_eq!(query::<i64>(&mut con, &["COPY", "moved", "str", "REPLACE"]).await, 1);
    assert_eq!(query::<String>(&mut con, &["TYPE", "str"]).await, "stream");
    assert_eq!(
        error(&mut con, &["XADD", "str", "1-1", "f", "v"]).await,
        TOO_SMALL,
        "an empty stream's copy keeps its last ID"
    );
    // SET replaces a stream, as any key.
    assert_eq!(query::<String>(&mut con, &["SET", "copy", "x"]).await, "OK");
    assert_eq!(query::<String>(&mut con, &["TYPE", "copy"]).await, "string");
    assert_eq!(query::<i64>(&mut con, &["DEL", "moved", "copy"]).await, 2);
    assert_eq!(query::<i64>(&mut con, &["XLEN", "moved"]).await, 0);
    // A new stream of a deleted one's name starts over.
    assert_eq!(
        query::<String>(&mut con, &["XADD", "moved", "1-1", "f", "v"]).await,
        "1-1"
    );

    query::<String>(&mut con, &["FLUSHDB"]).await;
    assert_eq!(query::<i64>(&mut con, &["DBSIZE"]).await, 0);
    assert_eq!(query::<i64>(&mut con, &["XLEN", "moved"]).await, 0);
}

#[tokio::test]
async fn streams_expire() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    query::<String>(&mut con, &["XADD", "s", "5-5", "f", "v"]).await;
    assert_eq!(query::<i64>(&mut con, &["PEXPIRE", "s", "300"]).await, 1);
    query::<String>(&mut con, &["XADD", "s", "*", "g", "w"]).await;
    assert!(query::<i64>(&mut con, &["PTTL", "s"]).await > 0, "XADD keeps the TTL");
    common::eventually(Duration::from_secs(10), "the stream expires", || {
        let mut con = con.clone();
        async move { (query::<i64>(&mut con, &["EXISTS", "s"]).await == 0).then_some(()) }
    })
    .await;
    assert_eq!(query::<i64>(&mut con, &["XLEN", "s"]).await, 0);
    assert_eq!(range(&mut con, &["XRANGE", "s", "-", "+"]).await, Vec::<Entry>::new());
    let nothing: redis::Value = query(&mut con, &["XREAD", "STREAMS", "s", "0"]).await;
    assert_eq!(nothing, redis::Value::Nil);
    // A new stream of that name: its IDs start over, without a TTL.
    assert_eq!(query::<String>(&mut con, &["XADD", "s", "1-1", "f", "v"]).await, "1-1");
    assert_eq!(query::<i64>(&mut con, &["TTL", "s"]).await, -1);
}

#[tokio::test]
async fn watch_sees_a_change_to_a_stream() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    query::<String>(&mut con, &["XADD", "s", "1-1", "f", "v"]).await;
    for change in [
        &["XADD", "s", "*", "f", "v"][..],
        &["XDEL", "s", "1-1"],
        &["XTRIM", "s", "MAXLEN", "0"],
    ] {
        let mut raw = RawResp::connect(gateway.resp_addr()).await;
        assert_eq!(raw.command(&["WATCH", "s"]).await, Value::Simple("OK".into()));
        query::<redis::Value>(&mut con, change).await;
        raw.command(&["MULTI"]).await;
        raw.command(&["XADD", "s", "*", "from", "multi"]).await;
        assert_eq!(
            raw.command(&["EXEC"]).await,
            Value::Nil,
            "{change:?} aborts the transaction"
        );
    }
    assert_eq!(
        query::<i64>(&mut con, &["XLEN", "s"]).await,
        0,
        "nothing from the aborted ones"
    );

    // Unchanged, it runs, and the commands of one EXEC see each other.
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    raw.command(&["WATCH", "s"]).await;
    raw.command(&["MULTI"]).await;
    // (After the `*` IDs above, which are now.)
    let id = "99999999999999-1";
    raw.command(&["XADD", "s", id, "a", "1"]).await;
    raw.command(&["XLEN", "s"]).await;
    raw.command(&["XREAD", "BLOCK", "0", "STREAMS", "s", id]).await;
    raw.command(&["XRANGE", "s", "99999999999999", "+"]).await;
    assert_eq!(
        raw.command(&["EXEC"]).await,
        Value::Array(vec![
            Value::bulk(id),
            Value::Int(1),
            // Inside MULTI, XREAD BLOCK does not block.
            Value::Nil,
            Value::Array(vec![Value::Array(vec![
                Value::bulk(id),
                Value::Array(vec![Value::bulk("a"), Value::bulk("1")])
            ])]),
        ])
    );
}

#[tokio::test]
async fn a_pipeline_of_xadds_is_one_commit() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    query::<String>(&mut con, &["XADD", "warm", "*", "f", "v"]).await;
    let commits = gateway.metric("pgvs3_resp_group_commits_total").await.unwrap();
    let mut pipe = redis::pipe();
    for i in 1..=50 {
        pipe.cmd("XADD").arg("events").arg(format!("{i}-0")).arg("n").arg(i);
    }
    pipe.cmd("XADD")
        .arg("events")
        .arg("MAXLEN")
        .arg("40")
        .arg("51-0")
        .arg("n")
        .arg(51);
    let replies: Vec<String> = pipe.query_async(&mut con).await.unwrap();
    assert_eq!(replies[0], "1-0");
    assert_eq!(replies[50], "51-0");
    let after = gateway.metric("pgvs3_resp_group_commits_total").await.unwrap();
    assert_eq!(after - commits, 1.0, "the 51 XADDs shared one transaction");
    assert_eq!(query::<i64>(&mut con, &["XLEN", "events"]).await, 40);
    assert_eq!(
        ids(&range(&mut con, &["XRANGE", "events", "-", "+", "COUNT", "1"]).await),
        ["12-0"]
    );
}

#[tokio::test]
async fn xread_block_times_out_or_answers_at_once() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let started = std::time::Instant::now();
    let reply: redis::Value = query(&mut con, &["XREAD", "BLOCK", "300", "STREAMS", "nostream", "$"]).await;
    assert_eq!(reply, redis::Value::Nil);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    // Entries there: no waiting.
    query::<String>(&mut con, &["XADD", "s", "1-1", "f", "v"]).await;
    let read: Streams = query(&mut con, &["XREAD", "BLOCK", "0", "STREAMS", "nostream", "s", "0", "0"]).await;
    assert_eq!(read.len(), 1);
    assert_eq!(ids(&read[0].1), ["1-1"]);
    let read: Streams = query(&mut con, &["XREAD", "BLOCK", "0", "STREAMS", "s", "+"]).await;
    assert_eq!(ids(&read[0].1), ["1-1"]);
}

/// XREAD BLOCK 0 ... `$` is woken by an entry added after it began (none existed at `$`).
async fn xread_is_woken(blocked: &mut RawResp, adder: &mut MultiplexedConnection, stream: &str) {
    let request = ["XREAD", "BLOCK", "0", "STREAMS", stream, "$"];
    let (added, first) = woken_by_xadd(blocked, adder, &request, stream).await;
    assert!(added.contains(&first), "{first} is one of {added:?}");
}

#[tokio::test]
async fn xread_block_is_woken_by_xadd_from_another_connection_and_gateway() {
    let (first, second) = gateways_woken_by_notify().await;

    let mut blocked = RawResp::connect(first.resp_addr()).await;
    let mut same_gateway = connect(&first).await;
    xread_is_woken(&mut blocked, &mut same_gateway, "local").await;
    let mut other_gateway = connect(&second).await;
    xread_is_woken(&mut blocked, &mut other_gateway, "remote").await;
}

#[tokio::test]
async fn redis_cli_reads_streams() {
    let gateway = TestGateway::with_resp(&[]).await;
    let addr = gateway.resp_addr();
    let cli = async |args: &[&str]| {
        // Async: the gateway runs on this test's runtime.
        let output = tokio::process::Command::new("redis-cli")
            .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
            .args(args)
            .output()
            .await
            .expect("redis-cli is installed (scripts/test installs it; or apt-get install redis-tools)");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!(cli(&["XADD", "s", "1-1", "temperature", "36"]).await, "1-1\n");
    assert_eq!(cli(&["XADD", "s", "2-1", "temperature", "37"]).await, "2-1\n");
    assert_eq!(
        cli(&["XRANGE", "s", "-", "+", "COUNT", "1"]).await,
        "1-1\ntemperature\n36\n"
    );
    assert_eq!(
        cli(&["XREAD", "STREAMS", "s", "1-1"]).await,
        "s\n2-1\ntemperature\n37\n"
    );
    assert_eq!(cli(&["TYPE", "s"]).await, "stream\n");
    assert_eq!(cli(&["XADD", "s", "1-1", "a", "b"]).await, format!("{TOO_SMALL}\n\n"));
}

/// XSETID and XINFO HELP, each answer compared with redis-server 7.0.15.
#[tokio::test]
async fn xsetid_sets_the_last_id_as_redis_and_xinfo_has_help() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let ok = || Value::Simple("OK".into());
    // XINFO STREAM's last ID, greatest deleted ID and entries added.
    async fn ids_and_added(raw: &mut RawResp, key: &str) -> (Value, Value, Value) {
        let Value::Array(info) = raw.command(&["XINFO", "STREAM", key]).await else {
            panic!()
        };
        let field = |name: &str| {
            let at = info.iter().position(|value| *value == Value::bulk(name)).unwrap();
            info[at + 1].clone()
        };
        (
            field("last-generated-id"),
            field("max-deleted-entry-id"),
            field("entries-added"),
        )
    }
    assert_eq!(raw.command(&["XSETID", "s", "5-0"]).await.error(), "ERR no such key");
    assert_eq!(raw.command(&["XADD", "s", "5-1", "f", "v"]).await, Value::bulk("5-1"));
    assert_eq!(raw.command(&["XADD", "s", "6-0", "f", "v"]).await, Value::bulk("6-0"));
    for (args, error) in [
        (
            &["XSETID", "s", "5-9"][..],
            "ERR The ID specified in XSETID is smaller than the target stream top item",
        ),
        (
            &["XSETID", "s", "6-0", "ENTRIESADDED", "1"],
            "ERR The entries_added specified in XSETID is smaller than the target stream length",
        ),
        (
            &["XSETID", "s", "6-0", "ENTRIESADDED", "-1"],
            "ERR entries_added must be positive",
        ),
        (
            &["XSETID", "s", "10-0", "MAXDELETEDID", "11-0"],
            "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
        ),
        (&["XSETID", "s", "30", "BOGUS"], "ERR syntax error"),
        (&["XSETID", "s", "30", "ENTRIESADDED"], "ERR syntax error"),
        (&["XSETID", "s", "-"], INVALID_ID),
        (&["XSETID", "s"], "ERR wrong number of arguments for 'xsetid' command"),
    ] {
        assert_eq!(raw.command(args).await.error(), error, "{args:?}");
    }
    assert_eq!(
        ids_and_added(&mut raw, "s").await,
        (Value::bulk("6-0"), Value::bulk("0-0"), Value::Int(2)),
        "a refused XSETID changes nothing"
    );
    assert_eq!(
        raw.command(&["XSETID", "s", "10-0", "MAXDELETEDID", "9-0", "ENTRIESADDED", "7"])
            .await,
        ok()
    );
    assert_eq!(
        ids_and_added(&mut raw, "s").await,
        (Value::bulk("10-0"), Value::bulk("9-0"), Value::Int(7))
    );
    // XADD continues after the ID set.
    assert_eq!(
        raw.command(&["XADD", "s", "10-0", "f", "v"]).await.error(),
        "ERR The ID specified in XADD is equal or smaller than the target stream top item"
    );
    assert_eq!(raw.command(&["XADD", "s", "10-1", "f", "v"]).await, Value::bulk("10-1"));

    // An emptied stream: no top item bounds the ID, and Redis 7.0 does not compare it with
    // the greatest deleted ID.
    assert_eq!(raw.command(&["XADD", "e", "1-0", "f", "v"]).await, Value::bulk("1-0"));
    assert_eq!(raw.command(&["XDEL", "e", "1-0"]).await, Value::Int(1));
    assert_eq!(raw.command(&["XSETID", "e", "0-5"]).await, ok());
    assert_eq!(
        ids_and_added(&mut raw, "e").await,
        (Value::bulk("0-5"), Value::bulk("1-0"), Value::Int(1))
    );
    assert_eq!(raw.command(&["XSETID", "e", "2", "ENTRIESADDED", "0"]).await, ok());
    assert_eq!(
        ids_and_added(&mut raw, "e").await,
        (Value::bulk("2-0"), Value::bulk("1-0"), Value::Int(0))
    );
    assert_eq!(raw.command(&["SET", "n", "1"]).await, ok());
    assert_eq!(raw.command(&["XSETID", "n", "1-0"]).await.error(), WRONGTYPE);

    let Value::Array(help) = raw.command(&["XINFO", "HELP"]).await else {
        panic!()
    };
    assert_eq!(help.len(), 9);
    assert_eq!(
        help[0],
        Value::Simple("XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:".into())
    );
    assert_eq!(
        raw.command(&["XINFO", "HELP", "x"]).await.error(),
        "ERR wrong number of arguments for 'xinfo|help' command"
    );
}
