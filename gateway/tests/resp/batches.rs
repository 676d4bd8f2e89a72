//! Typed writes coalesced into one SQL call (resp/coalesce.rs, issue 39): a pipeline (or many
//! connections' batches sharing a commit) of LPUSHes, pops, HSETs, ZADDs, XADDs, SADDs, SREMs,
//! SPOPs, HDELs, ZREMs or ZPOPMINs on one key runs as one call, and each command still gets
//! the reply, and the error, it would have got alone.

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

/// The ID an XADD answered, as a pair to compare.
fn stream_id(reply: &Value) -> (u64, u64) {
    let Value::Bulk(id) = reply else {
        panic!("an ID, got {reply:?}")
    };
    let id = String::from_utf8_lossy(id);
    let (ms, seq) = id.split_once('-').expect("ms-seq");
    (ms.parse().unwrap(), seq.parse().unwrap())
}

/// A pipeline of XADDs with `*` IDs on one stream is one call: each command answers its own
/// entry's ID, in order, each entry holds its own fields, each command's MAXLEN is honoured as
/// if they ran one after another, and each emits its own `xadd` event.
#[tokio::test]
async fn a_pipeline_of_xadds_answers_each_its_own_id_and_trims_and_tells_per_command() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    con.command(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]).await;
    let mut subscriber = RawResp::connect(gateway.resp_addr()).await;
    subscriber.command(&["SUBSCRIBE", "__keyevent@0__:xadd"]).await;
    con.command(&["SET", "text", "x"]).await;
    let before = coalesced(&gateway).await;
    let mut commands: Vec<Vec<String>> = (0..10).map(|i| words(&format!("XADD s * n {i} m x{i}"))).collect();
    commands.extend((10..15).map(|i| words(&format!("XADD s MAXLEN 8 * n {i}"))));
    commands.extend((0..2).map(|_| words("XADD none NOMKSTREAM * n 0")));
    commands.extend((0..2).map(|_| words("XADD text * n 0")));
    let replies = pipeline(&mut con, &commands).await;
    let ids: Vec<(u64, u64)> = replies[..15].iter().map(stream_id).collect();
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "increasing: {ids:?}");
    assert_eq!(replies[15..17], [Value::Nil, Value::Nil]);
    assert_eq!(replies[17..], vec![Value::Error(WRONGTYPE.into()); 2]);

    // Each trim kept 8: the last 8 entries, with their own fields.
    assert_eq!(con.command(&["XLEN", "s"]).await, Value::Int(8));
    let Value::Array(entries) = con.command(&["XRANGE", "s", "-", "+"]).await else {
        panic!("entries")
    };
    let kept: Vec<(u64, u64)> = entries
        .iter()
        .map(|entry| match entry {
            Value::Array(parts) => stream_id(&parts[0]),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kept, ids[7..]);
    assert_eq!(
        entries[0],
        Value::Array(vec![
            replies[7].clone(),
            Value::Array(["n", "7", "m", "x7"].into_iter().map(Value::bulk).collect())
        ])
    );
    assert_eq!(
        entries[7],
        Value::Array(vec![
            replies[14].clone(),
            Value::Array(["n", "14"].into_iter().map(Value::bulk).collect())
        ])
    );
    // The stream counts every entry added, and a new `*` ID follows the last.
    let Value::Array(info) = con.command(&["XINFO", "STREAM", "s"]).await else {
        panic!("XINFO")
    };
    let added = info
        .chunks(2)
        .find(|pair| pair[0] == Value::bulk("entries-added"))
        .map(|pair| pair[1].clone());
    assert_eq!(added, Some(Value::Int(15)));
    let next = con.command(&["XADD", "s", "*", "n", "15"]).await;
    assert!(stream_id(&next) > ids[14]);
    // 9 + 4 XADDs ran inside another's call, and one of each NOMKSTREAM and WRONGTYPE pair.
    assert!(coalesced(&gateway).await - before >= 15.0);

    // One `xadd` event per command that added an entry (16), none for the others.
    for i in 0..16 {
        let event = tokio::time::timeout(std::time::Duration::from_secs(20), subscriber.reply())
            .await
            .expect("the events arrive within 20 s")
            .expect("a message");
        assert_eq!(
            event,
            Value::Array(vec![
                Value::bulk("message"),
                Value::bulk("__keyevent@0__:xadd"),
                Value::bulk("s")
            ]),
            "event {i}"
        );
    }
    con.command(&["XADD", "marker", "*", "n", "0"]).await;
    let event = subscriber.reply().await.expect("a message");
    assert_eq!(
        event,
        Value::Array(vec![
            Value::bulk("message"),
            Value::bulk("__keyevent@0__:xadd"),
            Value::bulk("marker")
        ]),
        "no more events of s"
    );
}

/// A client blocked in XREAD on a stream is woken (by NOTIFY alone, from another gateway) by
/// a pipeline of XADDs coalesced into one call.
#[tokio::test]
async fn a_coalesced_run_of_xadds_wakes_a_blocked_xread() {
    let (first, second) = crate::redis_rs::gateways_woken_by_notify().await;
    let mut blocked = RawResp::connect(first.resp_addr()).await;
    let mut adder = RawResp::connect(second.resp_addr()).await;
    let request: Vec<&[u8]> = ["XREAD", "BLOCK", "0", "STREAMS", "woken", "$"]
        .iter()
        .map(|arg| arg.as_bytes())
        .collect();
    blocked.send(&encode(&request)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut added = Vec::new();
    let woken = loop {
        assert!(std::time::Instant::now() < deadline, "the XREAD was never woken");
        let commands: Vec<Vec<String>> = (0..3).map(|i| words(&format!("XADD woken * n {i}"))).collect();
        added.extend(pipeline(&mut adder, &commands).await);
        if let Ok(reply) = tokio::time::timeout(std::time::Duration::from_millis(200), blocked.reply()).await {
            break reply.expect("a reply");
        }
    };
    let Value::Array(streams) = woken else {
        panic!("{woken:?}")
    };
    let Value::Array(stream) = &streams[0] else {
        panic!("{streams:?}")
    };
    let Value::Array(entries) = &stream[1] else {
        panic!("{stream:?}")
    };
    let Value::Array(entry) = &entries[0] else {
        panic!("{entries:?}")
    };
    assert!(added.contains(&entry[0]), "{:?} is one of {added:?}", entry[0]);
}

/// What the model of one key holds (the sorted set's members by name, with their scores).
#[derive(Debug, Clone, PartialEq)]
enum Held {
    Missing,
    Text,
    Set(std::collections::BTreeSet<String>),
    Zset(std::collections::BTreeMap<String, i64>),
    Hash(std::collections::BTreeMap<String, i64>),
}

/// A reply, as the model and the gateway's are compared: `Member` is SPOP's, any one member of
/// the set (or nil when it is empty).
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Int(i64),
    Nil,
    Ok,
    WrongType,
    Bulks(Vec<String>),
    Member(Option<String>),
}

fn answer(value: &redis::Value) -> Answer {
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).unwrap();
    match value {
        redis::Value::Int(n) => Answer::Int(*n),
        redis::Value::Nil => Answer::Nil,
        redis::Value::Okay => Answer::Ok,
        redis::Value::BulkString(bytes) => Answer::Bulks(vec![text(bytes)]),
        redis::Value::Array(items) => Answer::Bulks(
            items
                .iter()
                .map(|item| match item {
                    redis::Value::BulkString(bytes) => text(bytes),
                    other => panic!("an array of strings, got {other:?}"),
                })
                .collect(),
        ),
        redis::Value::ServerError(err) if err.code() == "WRONGTYPE" => Answer::WrongType,
        other => panic!("unexpected reply {other:?}"),
    }
}

/// The commands' model, run one after another on one key (Redis 7.0's answers, RESP2).
struct Model {
    held: Held,
}

impl Model {
    /// Runs `command` (words, its key second); `popped` is the member the gateway's SPOP
    /// answered, which the model takes when it is one of the set's.
    fn run(&mut self, command: &[String], popped: &Answer) -> Answer {
        use std::collections::{BTreeMap, BTreeSet};
        let args = &command[2..];
        let name = command[0].as_str();
        let wanted = match name {
            "SADD" | "SREM" | "SPOP" => "set",
            "ZADD" | "ZREM" | "ZPOPMIN" | "ZPOPMAX" => "zset",
            "HSET" | "HDEL" | "HINCRBY" => "hash",
            _ => "any",
        };
        let kind = match &self.held {
            Held::Missing => "none",
            Held::Text => "string",
            Held::Set(_) => "set",
            Held::Zset(_) => "zset",
            Held::Hash(_) => "hash",
        };
        if wanted != "any" && kind != "none" && kind != wanted {
            return Answer::WrongType;
        }
        if kind == "none" {
            self.held = match wanted {
                "set" => Held::Set(BTreeSet::new()),
                "zset" => Held::Zset(BTreeMap::new()),
                "hash" => Held::Hash(BTreeMap::new()),
                _ => Held::Missing,
            };
        }
        let reply = match (name, &mut self.held) {
            ("SET", held) => {
                *held = Held::Text;
                Answer::Ok
            }
            ("DEL", held) => {
                let existed = *held != Held::Missing;
                *held = Held::Missing;
                Answer::Int(existed.into())
            }
            ("SADD", Held::Set(set)) => Answer::Int(args.iter().filter(|m| set.insert((*m).clone())).count() as i64),
            ("SREM", Held::Set(set)) => Answer::Int(args.iter().filter(|m| set.remove(*m)).count() as i64),
            ("SPOP", Held::Set(set)) => match popped {
                Answer::Member(Some(member)) if set.remove(member) => Answer::Member(Some(member.clone())),
                _ if set.is_empty() => Answer::Member(None),
                _ => Answer::Member(Some(format!("one of {set:?}"))),
            },
            ("ZADD", Held::Zset(zset)) => Answer::Int(
                args.chunks(2)
                    .filter(|pair| zset.insert(pair[1].clone(), pair[0].parse().unwrap()).is_none())
                    .count() as i64,
            ),
            ("ZREM", Held::Zset(zset)) => Answer::Int(args.iter().filter(|m| zset.remove(*m).is_some()).count() as i64),
            ("ZPOPMIN" | "ZPOPMAX", Held::Zset(zset)) => {
                let count: usize = args.first().map_or(1, |count| count.parse().unwrap());
                let mut order: Vec<(i64, String)> = zset.iter().map(|(m, s)| (*s, m.clone())).collect();
                order.sort();
                if name == "ZPOPMAX" {
                    order.reverse();
                }
                let mut flat = Vec::new();
                for (score, member) in order.into_iter().take(count) {
                    zset.remove(&member);
                    flat.extend([member, score.to_string()]);
                }
                Answer::Bulks(flat)
            }
            ("HSET", Held::Hash(hash)) => Answer::Int(
                args.chunks(2)
                    .filter(|pair| hash.insert(pair[0].clone(), pair[1].parse().unwrap()).is_none())
                    .count() as i64,
            ),
            ("HDEL", Held::Hash(hash)) => Answer::Int(args.iter().filter(|f| hash.remove(*f).is_some()).count() as i64),
            ("HINCRBY", Held::Hash(hash)) => {
                let value = hash.entry(args[0].clone()).or_insert(0);
                *value += args[1].parse::<i64>().unwrap();
                Answer::Int(*value)
            }
            (name, held) => panic!("the model has no {name} on {held:?}"),
        };
        // Redis has no empty sets, sorted sets or hashes.
        let empty = match &self.held {
            Held::Set(set) => set.is_empty(),
            Held::Zset(zset) => zset.is_empty(),
            Held::Hash(hash) => hash.is_empty(),
            _ => false,
        };
        if empty {
            self.held = Held::Missing;
        }
        reply
    }
}

/// Runs of one command on one key, as a client (or many at once) would send them: each run
/// 1 to 6 of the same command with a few of a handful of members, now and then a SET or DEL
/// of the key between runs (WRONGTYPE for the typed commands after it, or a key of another
/// type).
fn random_runs(rng: &mut rand::rngs::StdRng, key: &str, commands: usize) -> Vec<Vec<String>> {
    use rand::Rng;
    const NAMES: [&str; 14] = [
        "SADD", "SADD", "SREM", "SPOP", "ZADD", "ZADD", "ZREM", "ZPOPMIN", "ZPOPMAX", "HSET", "HSET", "HDEL",
        "HINCRBY", "SET",
    ];
    let mut out = Vec::new();
    while out.len() < commands {
        let name = NAMES[rng.random_range(0..NAMES.len())];
        for _ in 0..rng.random_range(1..=6) {
            let mut command = vec![name.to_owned(), key.to_owned()];
            let member = |rng: &mut rand::rngs::StdRng| format!("m{}", rng.random_range(0..6));
            match name {
                "SET" => {
                    command = vec![
                        if rng.random_bool(0.5) { "SET" } else { "DEL" }.to_owned(),
                        key.to_owned(),
                    ]
                }
                "SPOP" => {}
                "ZPOPMIN" | "ZPOPMAX" => {
                    if rng.random_bool(0.5) {
                        command.push(rng.random_range(0..3).to_string());
                    }
                }
                "ZADD" | "HSET" => {
                    for _ in 0..rng.random_range(1..=3) {
                        let (score, member) = (rng.random_range(0..4).to_string(), member(rng));
                        match name {
                            "ZADD" => command.extend([score, member]),
                            _ => command.extend([member, score]),
                        }
                    }
                }
                "HINCRBY" => command.extend([member(rng), rng.random_range(-2..3).to_string()]),
                _ => command.extend((0..rng.random_range(1..=3)).map(|_| member(rng))),
            }
            if command[0] == "SET" {
                command.push("text".to_owned());
            }
            out.push(command);
        }
    }
    out
}

/// What the key holds, read back.
async fn stored(con: &mut redis::aio::MultiplexedConnection, key: &str) -> Held {
    use crate::redis_rs::query;
    let kind: String = query(con, &["TYPE", key]).await;
    match kind.as_str() {
        "none" => Held::Missing,
        "string" => Held::Text,
        "set" => Held::Set(
            query::<Vec<String>>(con, &["SMEMBERS", key])
                .await
                .into_iter()
                .collect(),
        ),
        "zset" => Held::Zset(
            query::<Vec<(String, i64)>>(con, &["ZRANGE", key, "0", "-1", "WITHSCORES"])
                .await
                .into_iter()
                .collect(),
        ),
        "hash" => Held::Hash(
            query::<Vec<(String, i64)>>(con, &["HGETALL", key])
                .await
                .into_iter()
                .collect(),
        ),
        other => panic!("TYPE {other}"),
    }
}

/// Pipelines of random runs of SADD, SREM, SPOP, ZADD, ZREM, ZPOPMIN/ZPOPMAX, HSET, HDEL and
/// HINCRBY on one key (coalesced, resp/coalesce.rs), with SET and DEL between runs making
/// WRONGTYPEs and keys of other types: every reply, and what the key holds after each
/// pipeline, is what the commands run one after another give (a model of Redis's answers).
/// Then the same with keyspace events published, whose batches run removals apart.
#[tokio::test]
async fn pipelined_runs_on_one_key_answer_and_store_as_run_one_by_one() {
    use rand::SeedableRng;
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = crate::redis_rs::connect(&gateway).await;
    let before = coalesced(&gateway).await;
    let seed = std::env::var("PGVS3_MODEL_SEED").map_or(39, |seed| seed.parse().unwrap());
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for (round, events) in [(0, ""), (1, ""), (2, ""), (3, "KEA")].into_iter() {
        let _: () = crate::redis_rs::query(&mut con, &["CONFIG", "SET", "notify-keyspace-events", events]).await;
        let key = format!("hot{round}");
        let mut model = Model { held: Held::Missing };
        for pipeline_at in 0..6 {
            let commands = random_runs(&mut rng, &key, 40);
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for command in &commands {
                pipe.add_command(crate::redis_rs::command(
                    &command.iter().map(String::as_str).collect::<Vec<_>>(),
                ));
            }
            let replies: Vec<redis::Value> = pipe.query_async(&mut con).await.expect("the pipeline");
            for (at, (command, reply)) in commands.iter().zip(&replies).enumerate() {
                let mut got = answer(reply);
                if command[0] == "SPOP" {
                    got = match got {
                        Answer::Nil => Answer::Member(None),
                        Answer::Bulks(member) => Answer::Member(member.into_iter().next()),
                        other => other,
                    };
                }
                let expected = model.run(command, &got);
                assert_eq!(
                    got, expected,
                    "seed {seed}, round {round}, pipeline {pipeline_at}, command {at} {command:?} of {commands:?}"
                );
            }
            assert_eq!(
                stored(&mut con, &key).await,
                model.held,
                "seed {seed}, round {round}, after pipeline {pipeline_at}: {commands:?}"
            );
        }
    }
    assert!(coalesced(&gateway).await > before, "some runs were coalesced");
}

/// A client blocked in BZPOPMIN (on another gateway, woken by NOTIFY alone) while pipelines of
/// ZADDs and ZPOPMINs on its key run coalesced: it is woken, and every member added is popped
/// once, by it or by a ZPOPMIN.
#[tokio::test]
async fn a_blocked_bzpopmin_is_woken_beside_coalesced_zpopmins() {
    let (first, second) = crate::redis_rs::gateways_woken_by_notify().await;
    let mut blocked = RawResp::connect(first.resp_addr()).await;
    let mut con = RawResp::connect(second.resp_addr()).await;
    let request: Vec<&[u8]> = ["BZPOPMIN", "zq", "0"].iter().map(|arg| arg.as_bytes()).collect();
    blocked.send(&encode(&request)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (mut added, mut popped) = (Vec::new(), Vec::new());
    let take = |reply: &Value, popped: &mut Vec<Value>| match reply {
        Value::Array(pair) if pair.is_empty() => {}
        Value::Array(pair) => popped.push(pair[0].clone()),
        other => panic!("ZPOPMIN answered {other:?}"),
    };
    // Each pipeline adds three members and its two ZPOPMINs take two: one is left for the
    // BZPOPMIN once it waits (or, before, for the next pipeline's ZPOPMINs).
    let woken = loop {
        assert!(std::time::Instant::now() < deadline, "the BZPOPMIN was never woken");
        let round = added.len();
        let mut commands: Vec<Vec<String>> = (0..3)
            .map(|i| words(&format!("ZADD zq {} m{}", round + i, round + i)))
            .collect();
        commands.extend((0..2).map(|_| words("ZPOPMIN zq")));
        added.extend((0..3).map(|i| Value::bulk(&format!("m{}", round + i))));
        let replies = pipeline(&mut con, &commands).await;
        assert_eq!(replies[..3], [Value::Int(1), Value::Int(1), Value::Int(1)]);
        for reply in &replies[3..] {
            take(reply, &mut popped);
        }
        if let Ok(reply) = tokio::time::timeout(std::time::Duration::from_millis(200), blocked.reply()).await {
            break reply.expect("a reply");
        }
    };
    let Value::Array(woken) = woken else {
        panic!("{woken:?}")
    };
    assert_eq!(woken[0], Value::bulk("zq"));
    popped.push(woken[1].clone());
    // What is left.
    loop {
        match con.command(&["ZPOPMIN", "zq"]).await {
            Value::Array(pair) if pair.is_empty() => break,
            reply => take(&reply, &mut popped),
        }
    }
    popped.sort_by_key(|member| format!("{member:?}"));
    added.sort_by_key(|member| format!("{member:?}"));
    assert_eq!(popped, added, "each member popped once");
}
