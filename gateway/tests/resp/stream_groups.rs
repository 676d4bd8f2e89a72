//! Stream consumer groups over the wire with redis-rs (and redis-py): XGROUP, XREADGROUP
//! (blocking, woken across gateways), XACK, XPENDING, XCLAIM, XAUTOCLAIM and XINFO GROUPS /
//! CONSUMERS answer as Redis 7 does, with its error texts, and the keyspace commands,
//! transactions and WATCH cover groups as they cover the stream.

use crate::redis_rs;
use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::{RawResp, Value};
use redis::aio::MultiplexedConnection;
use redis_rs::{connect, error, gateways_woken_by_notify, query, woken_by_xadd};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

/// An entry as the replies hold it: `[id, [f, id]]` (every test adds `f` = its ID).
fn entry(id: &str) -> Value {
    Value::Array(vec![
        Value::bulk(id),
        Value::Array(vec![Value::bulk("f"), Value::bulk(id)]),
    ])
}

fn ids(ids: &[&str]) -> Value {
    Value::Array(ids.iter().map(|id| Value::bulk(id)).collect())
}

/// XREADGROUP's reply for one stream.
fn read(stream: &str, entries: Vec<Value>) -> Value {
    Value::Array(vec![Value::Array(vec![Value::bulk(stream), Value::Array(entries)])])
}

/// A RESP2 map: its fields and values in one array.
fn fields(fields: Vec<(&str, Value)>) -> Value {
    Value::Array(
        fields
            .into_iter()
            .flat_map(|(name, value)| [Value::bulk(name), value])
            .collect(),
    )
}

async fn add(con: &mut MultiplexedConnection, stream: &str, entries: &[&str]) {
    for id in entries {
        query::<String>(con, &["XADD", stream, id, "f", id]).await;
    }
}

/// XPENDING's extended form as (ID, consumer, idle ms, deliveries).
async fn pending(raw: &mut RawResp, args: &[&str]) -> Vec<(String, String, i64, i64)> {
    let Value::Array(rows) = raw.command(args).await else {
        panic!("{args:?}")
    };
    let text = |value: &Value| match value {
        Value::Bulk(bytes) => String::from_utf8(bytes.clone()).unwrap(),
        other => panic!("{other:?}"),
    };
    rows.iter()
        .map(|row| match row {
            Value::Array(row) => match &row[..] {
                [id, consumer, Value::Int(idle), Value::Int(deliveries)] => {
                    (text(id), text(consumer), *idle, *deliveries)
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        })
        .collect()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test]
async fn a_group_delivers_each_entry_once_until_it_is_acknowledged() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    add(&mut con, "s", &["1-1", "2-1", "3-1"]).await;
    assert_eq!(
        query::<String>(&mut con, &["XGROUP", "CREATE", "s", "g", "0"]).await,
        "OK"
    );

    assert_eq!(
        raw.command(&["XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">"])
            .await,
        read("s", vec![entry("1-1"), entry("2-1")])
    );
    assert_eq!(
        raw.command(&["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", ">"])
            .await,
        read("s", vec![entry("3-1")]),
        "the next consumer gets what the group has not delivered"
    );
    assert_eq!(
        raw.command(&["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", ">"])
            .await,
        Value::Nil,
        "nothing new"
    );
    assert_eq!(
        raw.command(&["XPENDING", "s", "g"]).await,
        Value::Array(vec![
            Value::Int(3),
            Value::bulk("1-1"),
            Value::bulk("3-1"),
            Value::Array(vec![
                Value::Array(vec![Value::bulk("alice"), Value::bulk("2")]),
                Value::Array(vec![Value::bulk("bob"), Value::bulk("1")]),
            ]),
        ])
    );

    assert_eq!(query::<i64>(&mut con, &["XACK", "s", "g", "1-1", "9-9"]).await, 1);
    assert_eq!(
        query::<i64>(&mut con, &["XACK", "s", "g", "1-1"]).await,
        0,
        "acknowledged once"
    );
    let alice = pending(&mut raw, &["XPENDING", "s", "g", "-", "+", "10", "alice"]).await;
    assert_eq!(alice.len(), 1, "{alice:?}");
    assert_eq!(
        (alice[0].0.as_str(), alice[0].1.as_str(), alice[0].3),
        ("2-1", "alice", 1)
    );
    assert!((0..60_000).contains(&alice[0].2), "idle {}", alice[0].2);
    assert_eq!(
        pending(&mut raw, &["XPENDING", "s", "g", "(2-1", "+", "10"])
            .await
            .len(),
        1,
        "an exclusive start"
    );
    assert_eq!(
        pending(&mut raw, &["XPENDING", "s", "g", "-", "+", "10", "nobody"]).await,
        []
    );

    // An ID reads the consumer's own pending entries again, each delivered once more.
    assert_eq!(
        raw.command(&["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0"])
            .await,
        read("s", vec![entry("2-1")])
    );
    assert_eq!(
        pending(&mut raw, &["XPENDING", "s", "g", "-", "+", "10", "alice"]).await[0].3,
        2
    );
    assert_eq!(query::<i64>(&mut con, &["XACK", "s", "g", "2-1", "3-1"]).await, 2);
    assert_eq!(
        raw.command(&["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0"])
            .await,
        read("s", vec![]),
        "an empty history still names the stream"
    );
    assert_eq!(
        raw.command(&["XPENDING", "s", "g"]).await,
        Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Nil])
    );
}

#[tokio::test]
async fn xclaim_moves_entries_idle_long_enough() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    add(&mut con, "s", &["1-1", "2-1"]).await;
    query::<String>(&mut con, &["XGROUP", "CREATE", "s", "g", "0"]).await;
    raw.command(&["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">"])
        .await;

    assert_eq!(
        raw.command(&["XCLAIM", "s", "g", "bob", "3600000", "1-1"]).await,
        Value::Array(vec![]),
        "delivered just now"
    );
    // Delivered two hours ago, as far as the group knows (no waiting): alice claims her own
    // entry with IDLE, and JUSTID leaves its delivery count alone.
    assert_eq!(
        raw.command(&["XCLAIM", "s", "g", "alice", "0", "1-1", "IDLE", "7200000", "JUSTID"])
            .await,
        ids(&["1-1"])
    );
    let before = pending(&mut raw, &["XPENDING", "s", "g", "-", "+", "10"]).await;
    assert_eq!((before[0].1.as_str(), before[0].3), ("alice", 1));
    assert!(before[0].2 >= 7_200_000, "idle {}", before[0].2);
    assert_eq!(
        pending(&mut raw, &["XPENDING", "s", "g", "IDLE", "3600000", "-", "+", "10"])
            .await
            .len(),
        1,
        "IDLE filters"
    );

    assert_eq!(
        raw.command(&["XCLAIM", "s", "g", "bob", "3600000", "1-1", "2-1"]).await,
        Value::Array(vec![entry("1-1")]),
        "only the idle one"
    );
    let after = pending(&mut raw, &["XPENDING", "s", "g", "-", "+", "10"]).await;
    assert_eq!((after[0].1.as_str(), after[0].3), ("bob", 2));
    assert!(after[0].2 < 3_600_000, "delivered again now: idle {}", after[0].2);
    assert_eq!(after[1].1, "alice");

    // TIME sets the delivery time, RETRYCOUNT the count.
    let an_hour_ago = (now_ms() - 3_600_000).to_string();
    let claimed = [
        "XCLAIM",
        "s",
        "g",
        "carol",
        "0",
        "2-1",
        "TIME",
        &an_hour_ago,
        "RETRYCOUNT",
        "5",
        "JUSTID",
    ];
    assert_eq!(raw.command(&claimed).await, ids(&["2-1"]));
    let carol = pending(&mut raw, &["XPENDING", "s", "g", "-", "+", "10", "carol"]).await;
    assert_eq!((carol[0].0.as_str(), carol[0].3), ("2-1", 5));
    assert!(carol[0].2 >= 3_600_000, "idle {}", carol[0].2);

    // FORCE makes an entry never delivered pending; LASTID moves the group on.
    add(&mut con, "s", &["3-1"]).await;
    assert_eq!(
        raw.command(&["XCLAIM", "s", "g", "dan", "0", "3-1"]).await,
        Value::Array(vec![])
    );
    assert_eq!(
        raw.command(&[
            "XCLAIM", "s", "g", "dan", "0", "3-1", "FORCE", "JUSTID", "LASTID", "9-0"
        ])
        .await,
        ids(&["3-1"])
    );
    assert_eq!(
        pending(&mut raw, &["XPENDING", "s", "g", "3-1", "3-1", "1"]).await[0].1,
        "dan"
    );
    assert_eq!(
        raw.command(&["XREADGROUP", "GROUP", "g", "dan", "STREAMS", "s", ">"])
            .await,
        Value::Nil,
        "the group's last delivered ID is 9-0"
    );

    // An entry deleted from the stream leaves the PEL when claimed.
    query::<i64>(&mut con, &["XDEL", "s", "3-1"]).await;
    assert_eq!(
        raw.command(&["XCLAIM", "s", "g", "bob", "0", "3-1"]).await,
        Value::Array(vec![])
    );
    assert_eq!(pending(&mut raw, &["XPENDING", "s", "g", "3-1", "3-1", "1"]).await, []);
}

#[tokio::test]
async fn xautoclaim_walks_the_pending_entries_with_a_cursor() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    add(&mut con, "s", &["1-1", "2-1", "3-1", "4-1", "5-1"]).await;
    query::<String>(&mut con, &["XGROUP", "CREATE", "s", "g", "0"]).await;
    raw.command(&["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">"])
        .await;
    let aged = [
        "XCLAIM", "s", "g", "alice", "0", "1-1", "2-1", "4-1", "IDLE", "7200000", "JUSTID",
    ];
    assert_eq!(raw.command(&aged).await, ids(&["1-1", "2-1", "4-1"]));

    assert_eq!(
        raw.command(&["XAUTOCLAIM", "s", "g", "bob", "3600000", "0-0", "COUNT", "2"])
            .await,
        Value::Array(vec![
            Value::bulk("3-1"),
            Value::Array(vec![entry("1-1"), entry("2-1")]),
            Value::Array(vec![]),
        ]),
        "two claimed; the cursor is the next pending entry"
    );
    assert_eq!(
        raw.command(&["XAUTOCLAIM", "s", "g", "bob", "3600000", "3-1", "COUNT", "2"])
            .await,
        Value::Array(vec![
            Value::bulk("0-0"),
            Value::Array(vec![entry("4-1")]),
            Value::Array(vec![])
        ]),
        "3-1 and 5-1 are not idle; the walk is over"
    );
    let held = pending(&mut raw, &["XPENDING", "s", "g", "-", "+", "10", "bob"]).await;
    let held: Vec<(&str, i64)> = held.iter().map(|(id, _, _, count)| (id.as_str(), *count)).collect();
    assert_eq!(held, [("1-1", 2), ("2-1", 2), ("4-1", 2)]);

    // Deleted entries are dropped from the PEL and listed.
    query::<i64>(&mut con, &["XDEL", "s", "3-1"]).await;
    assert_eq!(
        raw.command(&["XAUTOCLAIM", "s", "g", "carol", "0", "0-0", "COUNT", "10", "JUSTID"])
            .await,
        Value::Array(vec![
            Value::bulk("0-0"),
            ids(&["1-1", "2-1", "4-1", "5-1"]),
            ids(&["3-1"]),
        ])
    );
    assert_eq!(
        raw.command(&["XPENDING", "s", "g"]).await,
        Value::Array(vec![
            Value::Int(4),
            Value::bulk("1-1"),
            Value::bulk("5-1"),
            Value::Array(vec![Value::Array(vec![Value::bulk("carol"), Value::bulk("4")])]),
        ])
    );
}

#[tokio::test]
async fn noack_and_deleted_entries_in_the_history() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    add(&mut con, "s", &["1-1", "2-1"]).await;
    query::<String>(&mut con, &["XGROUP", "CREATE", "s", "g", "0"]).await;
    assert_eq!(
        raw.command(&["XREADGROUP", "GROUP", "g", "c", "NOACK", "STREAMS", "s", ">"])
            .await,
        read("s", vec![entry("1-1"), entry("2-1")])
    );
    assert_eq!(
        raw.command(&["XPENDING", "s", "g"]).await,
        Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Nil]),
        "NOACK leaves nothing pending"
    );
    add(&mut con, "s", &["3-1", "4-1"]).await;
    raw.command(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"])
        .await;
    query::<i64>(&mut con, &["XDEL", "s", "3-1"]).await;
    assert_eq!(
        raw.command(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0"])
            .await,
        read(
            "s",
            vec![Value::Array(vec![Value::bulk("3-1"), Value::Nil]), entry("4-1")]
        ),
        "a deleted entry comes back with nil fields, as in Redis"
    );
}

#[tokio::test]
async fn xinfo_reports_groups_and_consumers() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    add(&mut con, "s", &["1-1", "2-1", "3-1"]).await;
    query::<String>(&mut con, &["XGROUP", "CREATE", "s", "g", "0"]).await;
    let group = |consumers, pending, last: &str, read: Value, lag: Value| {
        fields(vec![
            ("name", Value::bulk("g")),
            ("consumers", Value::Int(consumers)),
            ("pending", Value::Int(pending)),
            ("last-delivered-id", Value::bulk(last)),
            ("entries-read", read),
            ("lag", lag),
        ])
    };
    assert_eq!(
        raw.command(&["XINFO", "GROUPS", "s"]).await,
        Value::Array(vec![group(0, 0, "0-0", Value::Nil, Value::Int(3))])
    );
    raw.command(&["XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">"])
        .await;
    assert_eq!(
        raw.command(&["XINFO", "GROUPS", "s"]).await,
        Value::Array(vec![group(1, 1, "1-1", Value::Int(1), Value::Int(2))])
    );
    assert_eq!(
        query::<String>(&mut con, &["XGROUP", "SETID", "s", "g", "$"]).await,
        "OK"
    );
    assert_eq!(
        raw.command(&["XINFO", "GROUPS", "s"]).await,
        Value::Array(vec![group(1, 1, "3-1", Value::Nil, Value::Int(0))])
    );
    let setid = ["XGROUP", "SETID", "s", "g", "0", "ENTRIESREAD", "0"];
    assert_eq!(query::<String>(&mut con, &setid).await, "OK");
    assert_eq!(
        raw.command(&["XINFO", "GROUPS", "s"]).await,
        Value::Array(vec![group(1, 1, "0-0", Value::Int(0), Value::Int(3))])
    );

    let Value::Array(consumers) = raw.command(&["XINFO", "CONSUMERS", "s", "g"]).await else {
        panic!()
    };
    let [c] = &consumers[..] else { panic!("{consumers:?}") };
    let Value::Array(c) = c else { panic!("{c:?}") };
    assert_eq!(
        &c[..4],
        [
            Value::bulk("name"),
            Value::bulk("c"),
            Value::bulk("pending"),
            Value::Int(1)
        ]
    );
    assert!(
        matches!(&c[4..], [idle, Value::Int(0..60_000), inactive, Value::Int(0..60_000)]
        if *idle == Value::bulk("idle") && *inactive == Value::bulk("inactive")),
        "{c:?}"
    );

    assert_eq!(
        query::<i64>(&mut con, &["XGROUP", "CREATECONSUMER", "s", "g", "d"]).await,
        1
    );
    assert_eq!(
        query::<i64>(&mut con, &["XGROUP", "CREATECONSUMER", "s", "g", "d"]).await,
        0
    );
    let Value::Array(consumers) = raw.command(&["XINFO", "CONSUMERS", "s", "g"]).await else {
        panic!()
    };
    let Value::Array(d) = &consumers[1] else { panic!() };
    assert_eq!(
        &d[..4],
        [
            Value::bulk("name"),
            Value::bulk("d"),
            Value::bulk("pending"),
            Value::Int(0)
        ]
    );
    assert_eq!(d[7], Value::Int(-1), "d never read anything: {d:?}");
    assert_eq!(
        query::<i64>(&mut con, &["XGROUP", "DELCONSUMER", "s", "g", "c"]).await,
        1,
        "its pending count"
    );
    assert_eq!(
        query::<i64>(&mut con, &["XGROUP", "DELCONSUMER", "s", "g", "c"]).await,
        0
    );
    assert_eq!(
        raw.command(&["XPENDING", "s", "g"]).await,
        Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Nil]),
        "its entries went with it"
    );

    query::<String>(&mut con, &["XGROUP", "CREATE", "s", "h", "$", "ENTRIESREAD", "3"]).await;
    let Value::Array(info) = raw.command(&["XINFO", "STREAM", "s"]).await else {
        panic!()
    };
    let groups = info.iter().position(|field| *field == Value::bulk("groups")).unwrap();
    assert_eq!(info[groups + 1], Value::Int(2));
    assert_eq!(query::<i64>(&mut con, &["XGROUP", "DESTROY", "s", "g"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["XGROUP", "DESTROY", "s", "g"]).await, 0);
    let Value::Array(groups) = raw.command(&["XINFO", "GROUPS", "s"]).await else {
        panic!()
    };
    assert_eq!(groups.len(), 1);
}

#[tokio::test]
async fn group_errors_are_redis_texts() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    add(&mut con, "s", &["1-1"]).await;
    query::<String>(&mut con, &["SET", "str", "v"]).await;
    query::<String>(&mut con, &["XGROUP", "CREATE", "s", "g", "$"]).await;
    let nogroup = "NOGROUP No such consumer group 'nog' for key name 's'";
    let cases: &[(&[&str], &str)] = &[
        (
            &["XGROUP", "CREATE", "nokey", "g", "$"],
            "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
        ),
        (
            &["XGROUP", "CREATE", "s", "g", "$"],
            "BUSYGROUP Consumer Group name already exists",
        ),
        (&["XGROUP", "CREATE", "str", "g", "$"], WRONGTYPE),
        (&["XGROUP", "CREATE", "s", "g2", "1-x"], INVALID_ID),
        (
            &["XGROUP", "CREATE", "s", "g2", "$", "ENTRIESREAD", "-2"],
            "ERR value for ENTRIESREAD must be positive or -1",
        ),
        (
            &["XGROUP", "CREATE", "s", "g2", "$", "BOGUS"],
            "ERR unknown subcommand or wrong number of arguments for 'CREATE'. Try XGROUP HELP.",
        ),
        (
            &["XGROUP", "FOO", "s", "g"],
            "ERR unknown subcommand 'FOO'. Try XGROUP HELP.",
        ),
        (
            &["XGROUP", "CREATE", "s"],
            "ERR wrong number of arguments for 'xgroup|create' command",
        ),
        (&["XGROUP", "SETID", "s", "nog", "$"], nogroup),
        (&["XGROUP", "CREATECONSUMER", "s", "nog", "c"], nogroup),
        (&["XGROUP", "DELCONSUMER", "s", "nog", "c"], nogroup),
        (&["XINFO", "CONSUMERS", "s", "nog"], nogroup),
        (
            &["XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">"],
            "NOGROUP No such key 's' or consumer group 'nog' in XREADGROUP with GROUP option",
        ),
        (
            &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "nokey", ">", ">"],
            "NOGROUP No such key 'nokey' or consumer group 'g' in XREADGROUP with GROUP option",
        ),
        (&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "str", ">"], WRONGTYPE),
        (
            &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "t", ">"],
            "ERR Unbalanced 'xreadgroup' list of streams: for each stream key an ID or '>' must be specified.",
        ),
        (
            &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "$"],
            "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
        ),
        (
            &["XREADGROUP", "COUNT", "1", "NOACK", "STREAMS", "s", ">"],
            "ERR Missing GROUP option for XREADGROUP",
        ),
        (
            &["XPENDING", "s", "nog"],
            "NOGROUP No such key 's' or consumer group 'nog'",
        ),
        (
            &["XPENDING", "nokey", "g"],
            "NOGROUP No such key 'nokey' or consumer group 'g'",
        ),
        (&["XPENDING", "s", "g", "-", "+"], "ERR syntax error"),
        (
            &["XPENDING", "s", "g", "-", "+", "x"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["XCLAIM", "s", "nog", "c", "0", "1-1"],
            "NOGROUP No such key 's' or consumer group 'nog'",
        ),
        (
            &["XCLAIM", "s", "g", "c", "x", "1-1"],
            "ERR Invalid min-idle-time argument for XCLAIM",
        ),
        (
            &["XCLAIM", "s", "g", "c", "0", "1-1", "BOGUS"],
            "ERR Unrecognized XCLAIM option 'BOGUS'",
        ),
        (
            &["XCLAIM", "s", "g", "c", "0", "1-1", "IDLE", "x"],
            "ERR Invalid IDLE option argument for XCLAIM",
        ),
        (
            &["XAUTOCLAIM", "s", "g", "c", "0", "0-0", "COUNT", "0"],
            "ERR COUNT must be > 0",
        ),
        (&["XAUTOCLAIM", "s", "g", "c", "0", "0-0", "BOGUS"], "ERR syntax error"),
        (
            &["XAUTOCLAIM", "s", "nog", "c", "0", "0-0"],
            "NOGROUP No such key 's' or consumer group 'nog'",
        ),
        (&["XACK", "s", "g", "bad"], INVALID_ID),
        (&["XACK", "str", "g", "1-1"], WRONGTYPE),
    ];
    for (args, expected) in cases {
        assert_eq!(error(&mut con, args).await, *expected, "{args:?}");
    }
    assert_eq!(query::<i64>(&mut con, &["XACK", "nokey", "g", "1-1"]).await, 0);
    let help: Vec<String> = query(&mut con, &["XGROUP", "HELP"]).await;
    assert!(help[0].starts_with("XGROUP <subcommand>"), "{help:?}");
    // None of the errors made a group, a consumer or a stream.
    let groups: Vec<redis::Value> = query(&mut con, &["XINFO", "GROUPS", "s"]).await;
    assert_eq!(groups.len(), 1);
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "nokey", "t"]).await, 0);
}

#[tokio::test]
async fn groups_go_with_their_stream() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb"]).await;
    let mut con = connect(&gateway).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    add(&mut con, "s", &["1-1"]).await;
    query::<String>(&mut con, &["XGROUP", "CREATE", "s", "g", "0"]).await;
    raw.command(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"])
        .await;
    let one_pending = Value::Array(vec![
        Value::Int(1),
        Value::bulk("1-1"),
        Value::bulk("1-1"),
        Value::Array(vec![Value::Array(vec![Value::bulk("c"), Value::bulk("1")])]),
    ]);
    let none_pending = Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Nil]);

    // RENAME moves the groups and their PEL; COPY copies them.
    query::<String>(&mut con, &["RENAME", "s", "t"]).await;
    assert_eq!(raw.command(&["XPENDING", "t", "g"]).await, one_pending);
    assert_eq!(
        raw.command(&["XPENDING", "s", "g"]).await,
        Value::Error("NOGROUP No such key 's' or consumer group 'g'".into())
    );
    assert_eq!(query::<i64>(&mut con, &["COPY", "t", "u"]).await, 1);
    assert_eq!(raw.command(&["XPENDING", "u", "g"]).await, one_pending);
    assert_eq!(query::<i64>(&mut con, &["XACK", "u", "g", "1-1"]).await, 1);
    assert_eq!(
        raw.command(&["XPENDING", "t", "g"]).await,
        one_pending,
        "the copy is apart"
    );

    // DEL ends them: a stream of the same name starts with none.
    assert_eq!(query::<i64>(&mut con, &["DEL", "t"]).await, 1);
    add(&mut con, "t", &["1-1"]).await;
    assert_eq!(
        query::<String>(&mut con, &["XGROUP", "CREATE", "t", "g", "0"]).await,
        "OK"
    );
    assert_eq!(raw.command(&["XPENDING", "t", "g"]).await, none_pending);

    // MKSTREAM makes an empty stream; SET over a stream ends its groups too.
    let mkstream = ["XGROUP", "CREATE", "new", "g", "$", "MKSTREAM"];
    assert_eq!(query::<String>(&mut con, &mkstream).await, "OK");
    assert_eq!(query::<i64>(&mut con, &["XLEN", "new"]).await, 0);
    assert_eq!(query::<String>(&mut con, &["TYPE", "new"]).await, "stream");
    query::<String>(&mut con, &["SET", "new", "v"]).await;
    query::<i64>(&mut con, &["DEL", "new"]).await;
    assert_eq!(query::<String>(&mut con, &mkstream).await, "OK");

    query::<String>(&mut con, &["FLUSHDB"]).await;
    add(&mut con, "u", &["1-1"]).await;
    assert_eq!(
        query::<String>(&mut con, &["XGROUP", "CREATE", "u", "g", "0"]).await,
        "OK"
    );
}

#[tokio::test]
async fn transactions_and_watch_cover_groups() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    add(&mut con, "s", &["1-1"]).await;
    query::<String>(&mut con, &["XGROUP", "CREATE", "s", "g", "0"]).await;

    assert_eq!(raw.command(&["MULTI"]).await, Value::Simple("OK".into()));
    for command in [
        &["XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"][..],
        &["XACK", "s", "g", "1-1"],
        &["XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"],
        &["XPENDING", "s", "g"],
    ] {
        assert_eq!(raw.command(command).await, Value::Simple("QUEUED".into()));
    }
    assert_eq!(
        raw.command(&["EXEC"]).await,
        Value::Array(vec![
            read("s", vec![entry("1-1")]),
            Value::Int(1),
            Value::Nil,
            Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Nil]),
        ]),
        "in MULTI a BLOCK does not wait"
    );

    // A pipeline: each command sees the one before.
    add(&mut con, "s", &["2-1"]).await;
    let (delivered, acked): (redis::Value, i64) = redis::pipe()
        .cmd("XREADGROUP")
        .arg(&["GROUP", "g", "c", "STREAMS", "s", ">"])
        .cmd("XACK")
        .arg(&["s", "g", "2-1"])
        .query_async(&mut con)
        .await
        .unwrap();
    assert_ne!(delivered, redis::Value::Nil);
    assert_eq!(acked, 1);

    // A new group is a change of the key for WATCH.
    assert_eq!(raw.command(&["WATCH", "s"]).await, Value::Simple("OK".into()));
    query::<String>(&mut con, &["XGROUP", "CREATE", "s", "other", "$"]).await;
    raw.command(&["MULTI"]).await;
    raw.command(&["XLEN", "s"]).await;
    assert_eq!(raw.command(&["EXEC"]).await, Value::Nil);
}

/// XREADGROUP BLOCK 0 ... `>` of a new group is woken by the entries added after it began,
/// the first one first.
async fn xreadgroup_is_woken(blocked: &mut RawResp, adder: &mut MultiplexedConnection, stream: &str) {
    query::<String>(adder, &["XGROUP", "CREATE", stream, "g", "$", "MKSTREAM"]).await;
    let request = ["XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", stream, ">"];
    let (added, first) = woken_by_xadd(blocked, adder, &request, stream).await;
    assert_eq!(first, added[0], "the group had delivered nothing");
}

#[tokio::test]
async fn xreadgroup_block_is_woken_by_xadd_from_another_connection_and_gateway() {
    let (first, second) = gateways_woken_by_notify().await;

    let mut blocked = RawResp::connect(first.resp_addr()).await;
    let mut same_gateway = connect(&first).await;
    xreadgroup_is_woken(&mut blocked, &mut same_gateway, "local").await;
    let mut other_gateway = connect(&second).await;
    xreadgroup_is_woken(&mut blocked, &mut other_gateway, "remote").await;
    // The blocked read recorded what it delivered.
    let Value::Array(summary) = blocked.command(&["XPENDING", "remote", "g"]).await else {
        panic!()
    };
    assert!(matches!(summary[0], Value::Int(n) if n >= 1), "{summary:?}");
}

#[tokio::test]
async fn a_redis_py_consumer_works_through_a_group() {
    let gateway = TestGateway::with_resp(&[]).await;
    let addr = gateway.resp_addr();
    let script = r#"
import sys, redis
r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]), decode_responses=True)
r.xadd("jobs", {"task": "a"}, id="1-1")
r.xadd("jobs", {"task": "b"}, id="2-1")
r.xgroup_create("jobs", "workers", id="0")
done = []
while True:
    batch = r.xreadgroup("workers", "w1", {"jobs": ">"}, count=1, block=100)
    if not batch:
        break
    for _, entries in batch:
        for entry_id, fields in entries:
            done.append(fields["task"])
            r.xack("jobs", "workers", entry_id)
info = r.xinfo_groups("jobs")[0]
print(",".join(done), r.xpending("jobs", "workers")["pending"], info["last-delivered-id"], info["lag"])
"#;
    let output = tokio::process::Command::new("python3")
        .args(["-c", script, &addr.ip().to_string(), &addr.port().to_string()])
        .output()
        .await
        .expect("python3 with redis-py (scripts/test puts the clients' venv first on PATH)");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8(output.stdout).unwrap(), "a,b 0 2-1 0\n");
}

#[tokio::test]
async fn xinfo_stream_full_lists_the_groups() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    add(&mut con, "s", &["1-1", "2-1"]).await;
    query::<String>(&mut con, &["XGROUP", "CREATE", "s", "g", "0"]).await;
    raw.command(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"])
        .await;
    // A delivery time to compare: TIME sets it.
    raw.command(&["XCLAIM", "s", "g", "c", "0", "1-1", "TIME", "1000", "JUSTID"])
        .await;
    let started = now_ms();

    let info = raw.command(&["XINFO", "STREAM", "s", "FULL", "COUNT", "1"]).await;
    let Value::Array(info) = info else { panic!("{info:?}") };
    let at = info.iter().position(|field| *field == Value::bulk("groups")).unwrap();
    let Value::Array(groups) = &info[at + 1] else {
        panic!("{info:?}")
    };
    let [Value::Array(group)] = &groups[..] else {
        panic!("{groups:?}")
    };
    let Value::Array(expected) = fields(vec![
        ("name", Value::bulk("g")),
        ("last-delivered-id", Value::bulk("2-1")),
        ("entries-read", Value::Int(2)),
        ("lag", Value::Int(0)),
        ("pel-count", Value::Int(2)),
        (
            "pending",
            Value::Array(vec![Value::Array(vec![
                Value::bulk("1-1"),
                Value::bulk("c"),
                Value::Int(1000),
                Value::Int(1),
            ])]),
        ),
    ]) else {
        panic!()
    };
    assert_eq!(group[..12], expected[..]);
    let Value::Array(consumers) = &group[13] else {
        panic!("{group:?}")
    };
    let [Value::Array(consumer)] = &consumers[..] else {
        panic!("{consumers:?}")
    };
    assert_eq!(consumer[..2], [Value::bulk("name"), Value::bulk("c")]);
    for (at, name) in [(2, "seen-time"), (4, "active-time")] {
        assert_eq!(consumer[at], Value::bulk(name));
        assert!(
            matches!(consumer[at + 1], Value::Int(time) if (started - 60_000..=started + 60_000).contains(&time)),
            "{consumer:?}"
        );
    }
    assert_eq!(
        consumer[6..],
        [
            Value::bulk("pel-count"),
            Value::Int(2),
            Value::bulk("pending"),
            Value::Array(vec![Value::Array(vec![
                Value::bulk("1-1"),
                Value::Int(1000),
                Value::Int(1)
            ])]),
        ]
    );
}

/// XREADGROUP ... BLOCK whose group is destroyed, or whose stream is deleted or replaced by a
/// string, is unblocked with redis-server 7.0.15's errors (compared with the same commands);
/// XGROUP SETID or DELCONSUMER leave it blocked. A short `--resp-block-poll` makes the gateway
/// look again soon: nothing wakes a blocked client when a key goes.
#[tokio::test]
async fn xreadgroup_block_is_unblocked_when_its_group_or_stream_goes() {
    let gateway = TestGateway::with_resp(&["--resp-block-poll", "100ms"]).await;
    let mut con = connect(&gateway).await;
    let request: &[&[u8]] = &[
        b"XREADGROUP",
        b"GROUP",
        b"g",
        b"c",
        b"BLOCK",
        b"0",
        b"STREAMS",
        b"s",
        b">",
    ];
    let cases: [(&[&str], &str); 4] = [
        (
            &["XGROUP", "DESTROY", "s", "g"],
            "NOGROUP the consumer group this client was blocked on no longer exists",
        ),
        (&["DEL", "s"], "UNBLOCKED the stream key no longer exists"),
        (&["SET", "s", "foo"], "UNBLOCKED the stream key no longer exists"),
        (&["RENAME", "s", "t"], "UNBLOCKED the stream key no longer exists"),
    ];
    for (change, answer) in cases {
        let _: redis::Value = query(&mut con, &["DEL", "s", "t"]).await;
        let _: () = query(&mut con, &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]).await;
        let mut blocked = RawResp::connect(gateway.resp_addr()).await;
        blocked.send(&common::resp::encode(request)).await;
        // Still blocked after its first attempts, and after changes Redis does not unblock on.
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(300), blocked.reply())
                .await
                .is_err(),
            "{change:?}: blocked"
        );
        let _: () = query(&mut con, &["XGROUP", "SETID", "s", "g", "0"]).await;
        let _: i64 = query(&mut con, &["XGROUP", "DELCONSUMER", "s", "g", "c"]).await;
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(300), blocked.reply())
                .await
                .is_err(),
            "{change:?}: still blocked"
        );
        let _: redis::Value = query(&mut con, change).await;
        let reply = tokio::time::timeout(std::time::Duration::from_secs(10), blocked.reply())
            .await
            .expect("unblocked");
        assert_eq!(reply, Some(Value::Error(answer.to_owned())), "{change:?}");
    }

    // The change wakes the blocked client, on another gateway too: with `--resp-block-poll`
    // at 60 s, an answer within the deadline is a wakeup.
    let (first, second) = gateways_woken_by_notify().await;
    let mut con = connect(&second).await;
    for (change, answer) in cases {
        let _: redis::Value = query(&mut con, &["DEL", "s", "t"]).await;
        let _: () = query(&mut con, &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]).await;
        let before = first.metric("pgvs3_resp_group_commits_total").await.unwrap_or(0.0);
        let mut blocked = RawResp::connect(first.resp_addr()).await;
        blocked.send(&common::resp::encode(request)).await;
        common::eventually(std::time::Duration::from_secs(10), "the first attempt", || async {
            let commits = first.metric("pgvs3_resp_group_commits_total").await.unwrap_or(0.0);
            (commits > before).then_some(())
        })
        .await;
        let _: redis::Value = query(&mut con, change).await;
        let reply = tokio::time::timeout(std::time::Duration::from_secs(10), blocked.reply())
            .await
            .expect("woken");
        assert_eq!(
            reply,
            Some(Value::Error(answer.to_owned())),
            "{change:?} on another gateway"
        );
    }
}
