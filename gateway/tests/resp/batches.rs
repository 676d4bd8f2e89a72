//! Typed writes coalesced into one SQL call (resp/coalesce.rs, issue 39): a pipeline (or many
//! connections' batches sharing a commit) of LPUSHes, pops, HSETs or ZADDs on one key runs as
//! one call, and each command still gets the reply, and the error, it would have got alone.

use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::{RawResp, Value, encode};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Sends `commands` in one write (one pipeline, so one batch) and reads their replies.
async fn pipeline(con: &mut RawResp, commands: &[Vec<String>]) -> Vec<Value> {
    let mut bytes = Vec::new();
    for command in commands {
        let args: Vec<&[u8]> = command.iter().map(|arg| arg.as_bytes()).collect();
        bytes.extend(encode(&args));
    }
    con.send(&bytes).await;
    let mut replies = Vec::new();
    for _ in commands {
        replies.push(con.reply().await.expect("a reply"));
    }
    replies
}

fn words(text: &str) -> Vec<String> {
    text.split(' ').map(str::to_owned).collect()
}

async fn coalesced(gateway: &TestGateway) -> f64 {
    gateway
        .metric("pgvs3_resp_coalesced_commands_total")
        .await
        .expect("the coalescing metric")
}

#[tokio::test]
async fn a_pipeline_of_pushes_and_pops_is_one_call_each_in_order() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let before = coalesced(&gateway).await;
    let pushes: Vec<Vec<String>> = (0..16).map(|i| words(&format!("LPUSH hot e{i}"))).collect();
    let replies = pipeline(&mut con, &pushes).await;
    // Each push answers the length after its own element: 1, 2, ... 16.
    assert_eq!(replies, (1..=16).map(Value::Int).collect::<Vec<_>>());
    let listed = con.command(&["LRANGE", "hot", "0", "-1"]).await;
    let newest_first: Vec<Value> = (0..16).rev().map(|i| Value::bulk(&format!("e{i}"))).collect();
    assert_eq!(listed, Value::Array(newest_first));

    // Mixed ends and a count: pushes of several elements, then pops past the end.
    let commands = [
        "RPUSH hot r0 r1",
        "RPUSH hot r2",
        "RPOP hot",
        "RPOP hot",
        "LPOP hot",
        "LPOP hot 2",
        "LPOP hot",
    ]
    .map(words);
    let replies = pipeline(&mut con, &commands).await;
    assert_eq!(
        replies,
        [
            Value::Int(18),
            Value::Int(19),
            Value::bulk("r2"),
            Value::bulk("r1"),
            Value::bulk("e15"),
            Value::Array(vec![Value::bulk("e14"), Value::bulk("e13")]),
            Value::bulk("e12"),
        ]
    );
    // 13 elements are left: 13 pops and 2 more find nothing.
    let pops: Vec<Vec<String>> = (0..15).map(|_| words("RPOP hot")).collect();
    let replies = pipeline(&mut con, &pops).await;
    let mut expected: Vec<Value> = ["r0"].into_iter().map(Value::bulk).collect();
    expected.extend((0..12).map(|i| Value::bulk(&format!("e{i}"))));
    expected.extend([Value::Nil, Value::Nil]);
    assert_eq!(replies, expected);
    assert_eq!(con.command(&["EXISTS", "hot"]).await, Value::Int(0));
    // 15 pushes, 1 + 1 + 14 pops ran inside another command's call.
    assert!(coalesced(&gateway).await - before >= 31.0);
}

#[tokio::test]
async fn errors_and_counts_stay_per_command_in_a_coalesced_call() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    con.command(&["SET", "text", "x"]).await;
    let commands = [
        "LPUSH text a",
        "LPUSH text b",
        "RPOP text",
        "RPOP text",
        "HSET text f v",
        "HSET text g v",
        "RPOP missing",
        "RPOP missing",
    ]
    .map(words);
    let replies = pipeline(&mut con, &commands).await;
    let wrongtype = Value::Error(WRONGTYPE.into());
    assert_eq!(replies[..6], vec![wrongtype; 6]);
    assert_eq!(replies[6..], [Value::Nil, Value::Nil]);

    // HSET counts the fields its own pairs added; HMSET answers OK.
    let commands = [
        "HSET h f1 1",
        "HSET h f1 2",
        "HMSET h f2 3",
        "HSET h f2 4 f3 5 f3 6",
        "HINCRBY h f1 1",
        "HSET h f4 7",
    ]
    .map(words);
    let replies = pipeline(&mut con, &commands).await;
    assert_eq!(
        replies,
        [
            Value::Int(1),
            Value::Int(0),
            Value::Simple("OK".into()),
            Value::Int(1),
            Value::Int(3),
            Value::Int(1),
        ]
    );
    let values = con.command(&["HMGET", "h", "f1", "f2", "f3", "f4"]).await;
    assert_eq!(
        values,
        Value::Array(["3", "4", "6", "7"].into_iter().map(Value::bulk).collect())
    );

    // ZADD counts its own pairs (with CH, changed scores too); other options run alone.
    let commands = [
        "ZADD z 1 a 2 b",
        "ZADD z 3 a",
        "ZADD z CH 4 a",
        "ZADD z CH 4 a 5 c",
        "ZADD z NX 9 a 6 d",
        "ZADD text 1 a",
    ]
    .map(words);
    let replies = pipeline(&mut con, &commands).await;
    assert_eq!(
        replies,
        [
            Value::Int(2),
            Value::Int(0),
            Value::Int(1),
            Value::Int(1),
            Value::Int(1),
            Value::Error(WRONGTYPE.into()),
        ]
    );
    let members = con.command(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]).await;
    assert_eq!(
        members,
        Value::Array(
            ["b", "2", "a", "4", "c", "5", "d", "6"]
                .into_iter()
                .map(Value::bulk)
                .collect()
        )
    );
}

/// Many connections' pushes and pops on one list share commits and calls: every element pushed
/// is popped exactly once, and each connection's pushes answer increasing lengths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_on_one_list_lose_and_repeat_nothing() {
    let gateway = TestGateway::with_resp(&[]).await;
    const CONNECTIONS: usize = 16;
    const EACH: usize = 40;
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..CONNECTIONS {
        let addr = gateway.resp_addr();
        tasks.spawn(async move {
            let mut con = RawResp::connect(addr).await;
            let mut popped = Vec::new();
            for round in 0..EACH / 4 {
                let mut commands: Vec<Vec<String>> = (0..4)
                    .map(|i| words(&format!("LPUSH shared c{c}.{}", round * 4 + i)))
                    .collect();
                commands.extend((0..2).map(|_| words("RPOP shared")));
                let replies = pipeline(&mut con, &commands).await;
                let lengths: Vec<i64> = replies[..4]
                    .iter()
                    .map(|reply| match reply {
                        Value::Int(n) => *n,
                        other => panic!("LPUSH answered {other:?}"),
                    })
                    .collect();
                assert!(lengths.windows(2).all(|pair| pair[0] < pair[1]), "{lengths:?}");
                for reply in &replies[4..] {
                    match reply {
                        Value::Bulk(bytes) => popped.push(String::from_utf8(bytes.clone()).unwrap()),
                        Value::Nil => {}
                        other => panic!("RPOP answered {other:?}"),
                    }
                }
            }
            popped
        });
    }
    let mut popped: Vec<String> = tasks.join_all().await.into_iter().flatten().collect();
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    loop {
        match con.command(&["RPOP", "shared"]).await {
            Value::Bulk(bytes) => popped.push(String::from_utf8(bytes).unwrap()),
            Value::Nil => break,
            other => panic!("RPOP answered {other:?}"),
        }
    }
    let total = popped.len();
    popped.sort();
    popped.dedup();
    assert_eq!(popped.len(), total, "an element was popped twice");
    assert_eq!(total, CONNECTIONS * EACH, "an element was lost");
}
