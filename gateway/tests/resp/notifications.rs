//! Keyspace notifications (`notify-keyspace-events`): the events of each command family
//! compared with a live redis-server 7.0.15's, the setting's texts, events across two gateways,
//! a slow subscriber cut off, redis-py's keyspace subscription, and the stream class's events.

use pgvs3_testkit as common;

use std::time::Duration;

use common::TestGateway;
use common::resp::{RawResp, Value, encode};

use common::resp::live::LiveRedis;

fn bulk(text: &str) -> Value {
    Value::bulk(text)
}

fn text(value: &Value) -> String {
    match value {
        Value::Bulk(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        other => format!("{other:?}"),
    }
}

/// A subscriber of every keyspace and keyevent channel of database 0.
async fn subscriber(addr: std::net::SocketAddr) -> RawResp {
    let mut subscriber = RawResp::connect(addr).await;
    assert_eq!(
        subscriber.command(&["PSUBSCRIBE", "__key*@0__:*"]).await,
        Value::Array(vec![bulk("psubscribe"), bulk("__key*@0__:*"), Value::Int(1)])
    );
    subscriber
}

/// The (channel, message) pairs a subscriber gets until the events of `SET <marker> x`.
async fn events_until(subscriber: &mut RawResp, marker: &str) -> Vec<(String, String)> {
    let mut events = Vec::new();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), subscriber.reply())
            .await
            .expect("the events arrive within 20 s")
            .expect("the subscriber stays connected");
        let Value::Array(parts) = message else {
            panic!("a pmessage, got {message:?}");
        };
        let (channel, message) = (text(&parts[2]), text(&parts[3]));
        if channel.ends_with(&format!(":{marker}")) || message == marker {
            if channel.starts_with("__keyevent") {
                return events;
            }
            continue;
        }
        events.push((channel, message));
    }
}

/// Sends `commands` in one write (one pipeline, so one batch of pgvs3's) and reads their
/// replies.
async fn pipeline(server: &mut RawResp, commands: &[&[&str]]) -> Vec<Value> {
    let mut bytes = Vec::new();
    for command in commands {
        let args: Vec<&[u8]> = command.iter().map(|arg| arg.as_bytes()).collect();
        bytes.extend(encode(&args));
    }
    server.send(&bytes).await;
    let mut replies = Vec::new();
    for _ in commands {
        replies.push(server.reply().await.expect("a reply"));
    }
    replies
}

/// Runs `commands` on both servers (`pipelined`: in one write), then compares what their
/// subscribers got.
async fn same_events(
    ours: &mut RawResp,
    redis: &mut RawResp,
    our_events: &mut RawResp,
    redis_events: &mut RawResp,
    (family, pipelined): (&str, bool),
    commands: &[&[&str]],
) {
    let replies = match pipelined {
        true => pipeline(redis, commands)
            .await
            .into_iter()
            .zip(pipeline(ours, commands).await)
            .collect(),
        false => {
            let mut replies = Vec::new();
            for command in commands {
                replies.push((redis.command(command).await, ours.command(command).await));
            }
            replies
        }
    };
    for (command, (theirs, got)) in commands.iter().zip(replies) {
        // The same outcome (not always the same bytes: stream ids, error wording).
        assert_eq!(
            matches!(got, Value::Error(_)),
            matches!(theirs, Value::Error(_)),
            "{family}: {command:?}: {got:?} vs {theirs:?}"
        );
    }
    let marker = format!("marker:{family}");
    redis.command(&["SET", &marker, "x"]).await;
    ours.command(&["SET", &marker, "x"]).await;
    let theirs = events_until(redis_events, &marker).await;
    let got = events_until(our_events, &marker).await;
    assert_eq!(got, theirs, "{family}: the events");
    assert!(!theirs.is_empty(), "{family}: Redis emitted events");
}

#[tokio::test]
async fn each_command_family_emits_the_events_redis_emits() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    for server in [&mut ours, &mut theirs] {
        assert_eq!(
            server
                .command(&["CONFIG", "SET", "notify-keyspace-events", "KEA"])
                .await,
            Value::Simple("OK".into())
        );
    }
    let mut our_events = subscriber(gateway.resp_addr()).await;
    let mut redis_events = redis.connect().await;
    redis_events.command(&["PSUBSCRIBE", "__key*@0__:*"]).await;

    let families: &[(&str, &[&[&str]])] = &[
        (
            "strings",
            &[
                &["SET", "a", "1"],
                &["SET", "a", "2", "EX", "100"],
                &["SET", "a", "5", "KEEPTTL"],
                &["SETNX", "a", "3"],
                &["SETNX", "b", "1"],
                &["MSET", "c", "1", "d", "2"],
                &["MSETNX", "c", "1", "e", "2"],
                &["MSETNX", "i", "1", "j", "2"],
                &["INCR", "c"],
                &["INCRBY", "c", "5"],
                &["DECR", "c"],
                &["DECRBY", "c", "2"],
                &["INCRBYFLOAT", "c", "1.5"],
                &["INCR", "d2"],
                &["APPEND", "d", "x"],
                &["SETRANGE", "d", "0", "yy"],
                &["SETRANGE", "d", "0", ""],
                &["GETSET", "d", "z"],
                &["GETDEL", "d"],
                &["GETDEL", "d"],
                &["SET", "e", "v", "NX"],
                &["SET", "e", "w", "XX", "GET"],
                &["SET", "e", "w", "NX", "GET"],
                &["SET", "f", "v", "NX", "GET"],
                &["GETEX", "e", "PERSIST"],
                &["SET", "g", "1", "EX", "100"],
                &["GETEX", "g", "PERSIST"],
                &["GETEX", "g", "EX", "50"],
                &["GETEX", "nothing", "EX", "50"],
                &["SETBIT", "bits", "3", "1"],
                &["PSETEX", "h", "100000", "v"],
                &["SETEX", "h", "100", "v"],
                &["INCR", "a2"],
                &["INCR", "a"],
                &["HSET", "wrong", "f", "v"],
                &["INCR", "wrong"],
            ],
        ),
        (
            "generic",
            &[
                &["SET", "k1", "v"],
                &["SET", "k2", "v"],
                &["DEL", "k1", "k2", "nothing"],
                &["DEL", "k1"],
                &["SET", "r", "v"],
                &["RENAME", "r", "r2"],
                &["RENAMENX", "r2", "r3"],
                &["SET", "r4", "x"],
                &["RENAMENX", "r3", "r4"],
                &["RENAME", "r3", "r4"],
                &["COPY", "r4", "c1"],
                &["COPY", "r4", "c1"],
                &["EXPIRE", "r4", "100"],
                &["EXPIRE", "r4", "100", "NX"],
                &["PERSIST", "r4"],
                &["PERSIST", "r4"],
                &["PEXPIRE", "r4", "-1"],
                &["EXPIRE", "missing", "10"],
                &["UNLINK", "c1", "missing"],
                &["HSET", "th", "f", "v"],
                &["RENAME", "th", "th2"],
                &["COPY", "th2", "th3"],
            ],
        ),
        (
            "hash",
            &[
                &["HSET", "hh", "a", "1", "b", "2"],
                &["HMSET", "hh", "a", "1"],
                &["HSETNX", "hh", "a", "3"],
                &["HSETNX", "hh", "c", "3"],
                &["HINCRBY", "hh", "a", "2"],
                &["HINCRBYFLOAT", "hh", "a", "0.5"],
                &["HDEL", "hh", "a", "zz"],
                &["HDEL", "hh", "zz"],
                &["HDEL", "hh", "b", "c"],
                &["HDEL", "hh", "b"],
            ],
        ),
        (
            "list",
            &[
                &["RPUSH", "l", "a", "b", "c", "d", "e"],
                &["LPUSH", "l", "z"],
                &["LPUSHX", "nolist", "x"],
                &["RPUSHX", "l", "f"],
                &["LINSERT", "l", "BEFORE", "a", "y"],
                &["LINSERT", "l", "BEFORE", "nope", "y"],
                &["LSET", "l", "0", "q"],
                &["LPOP", "l"],
                &["RPOP", "l", "2"],
                &["LPOP", "nolist"],
                &["LREM", "l", "1", "y"],
                &["LREM", "l", "1", "nope"],
                &["LTRIM", "l", "0", "1"],
                &["LMOVE", "l", "l2", "LEFT", "RIGHT"],
                &["RPOPLPUSH", "l", "l2"],
                &["LPOP", "l2", "5"],
                &["RPUSH", "l3", "x", "y"],
                &["BLPOP", "l3", "1"],
                &["BRPOP", "l3", "1"],
                &["RPUSH", "l4", "x", "y"],
                &["LMPOP", "1", "l4", "RIGHT", "COUNT", "5"],
                &["RPUSH", "l5", "x"],
                &["LTRIM", "l5", "1", "0"],
            ],
        ),
        (
            "set",
            &[
                &["SADD", "s", "a", "b", "c"],
                &["SADD", "s", "a"],
                &["SREM", "s", "a", "zz"],
                &["SREM", "s", "zz"],
                &["SMOVE", "s", "s2", "b"],
                &["SMOVE", "s", "s2", "nope"],
                &["SINTERSTORE", "d", "s2", "s2"],
                &["SUNIONSTORE", "d2", "nothing"],
                &["SADD", "d3", "x"],
                &["SDIFFSTORE", "d3", "nothing"],
                &["SPOP", "s2"],
                &["SPOP", "s2"],
                &["SADD", "s3", "x"],
                &["SPOP", "s3", "3"],
            ],
        ),
        (
            "zset",
            &[
                &["ZADD", "z", "1", "a", "2", "b"],
                &["ZADD", "z", "3", "a"],
                &["ZADD", "z", "NX", "5", "a"],
                &["ZINCRBY", "z", "1", "b"],
                &["ZADD", "z", "INCR", "1", "b"],
                &["ZADD", "z", "NX", "INCR", "1", "b"],
                &["ZREM", "z", "a", "zz"],
                &["ZREM", "z", "zz"],
                &["ZPOPMIN", "z"],
                &["ZADD", "z2", "1", "a", "2", "b", "3", "c", "4", "d"],
                &["ZREMRANGEBYSCORE", "z2", "0", "1"],
                &["ZREMRANGEBYRANK", "z2", "0", "0"],
                &["ZREMRANGEBYLEX", "z2", "-", "+"],
                &["ZADD", "z3", "1", "x", "2", "y"],
                &["ZUNIONSTORE", "z4", "1", "z3"],
                &["ZINTERSTORE", "z4", "2", "z3", "nothing"],
                &["ZRANGESTORE", "z5", "z3", "0", "-1"],
                &["ZPOPMAX", "z3"],
                &["BZPOPMIN", "z3", "1"],
                &["ZADD", "z6", "1", "x"],
                &["ZMPOP", "1", "z6", "MAX"],
                &["ZADD", "z7", "XX", "1", "x"],
                &["ZADD", "z7", "XX", "GT", "CH", "1", "x"],
            ],
        ),
        (
            "stream",
            &[
                &["XADD", "x", "1-1", "a", "1"],
                &["XADD", "x", "2-1", "b", "2"],
                &["XADD", "x", "3-1", "c", "3"],
                &["XGROUP", "CREATE", "x", "g", "0"],
                &["XGROUP", "CREATECONSUMER", "x", "g", "c1"],
                &["XGROUP", "CREATECONSUMER", "x", "g", "c1"],
                &["XGROUP", "DELCONSUMER", "x", "g", "c1"],
                &["XGROUP", "SETID", "x", "g", "$"],
                &["XDEL", "x", "1-1"],
                &["XDEL", "x", "9-9"],
                &["XTRIM", "x", "MAXLEN", "1"],
                &["XTRIM", "x", "MAXLEN", "1"],
                &["XGROUP", "DESTROY", "x", "g"],
                &["XGROUP", "DESTROY", "x", "g"],
                &["XSETID", "x", "5-1"],
            ],
        ),
        (
            "bitmap",
            &[
                &["SET", "ba", "abc"],
                &["SET", "bb", "xy"],
                &["BITOP", "AND", "bd", "ba", "bb"],
                &["BITOP", "OR", "bd", "ba", "nothing"],
                &["BITOP", "NOT", "bd2", "nothing"],
                &["BITOP", "AND", "bd", "nothing"],
                &["HSET", "bh", "f", "v"],
                &["BITOP", "XOR", "bh", "ba"],
                &["BITOP", "XOR", "bd", "bb", "bh", "ba"],
                &["BITOP", "NOT", "bd", "nothing", "ba"],
                &["BITFIELD", "bf", "SET", "u8", "0", "1"],
                &["BITFIELD", "bf", "SET", "u8", "0", "1", "GET", "u8", "0"],
                &["BITFIELD", "bf", "INCRBY", "u8", "0", "0"],
                &["BITFIELD", "bf", "INCRBY", "u8", "0", "256"],
                &["BITFIELD", "bf", "SET", "u8", "100", "0"],
                &["BITFIELD", "bf", "OVERFLOW", "SAT", "INCRBY", "u8", "0", "255"],
                &["BITFIELD", "bf", "OVERFLOW", "SAT", "INCRBY", "u8", "0", "255"],
                &["BITFIELD", "bf", "OVERFLOW", "FAIL", "INCRBY", "u8", "0", "1"],
                &["BITFIELD", "bf2", "OVERFLOW", "FAIL", "SET", "u8", "0", "300"],
                &["BITFIELD", "bf3", "GET", "u8", "0"],
                &["BITFIELD_RO", "bf", "GET", "u8", "0"],
                &["BITFIELD", "bh", "SET", "u8", "0", "1"],
                &["MULTI"],
                &["BITFIELD", "bf", "SET", "i8", "0", "-1"],
                &["BITOP", "NOT", "bm", "bf"],
                &["EXEC"],
            ],
        ),
        (
            "transactions and scripts",
            &[
                &["MULTI"],
                &["SET", "m", "1"],
                &["INCR", "m"],
                &["RPUSH", "ml", "a"],
                &["LPOP", "ml"],
                &["DEL", "m"],
                &["EXEC"],
                &[
                    "EVAL",
                    "redis.call('SET', KEYS[1], 'v') redis.call('HSET', KEYS[2], 'f', 'v') redis.call('HDEL', KEYS[2], 'f') redis.call('DEL', KEYS[1]) return 1",
                    "2",
                    "e1",
                    "e2",
                ],
            ],
        ),
    ];
    // New-key events (not in `A`): added keys say `new` before the command's event.
    let new_keys: &[&[&str]] = &[
        &["CONFIG", "SET", "notify-keyspace-events", "KEAn"],
        &["SET", "n1", "v", "EX", "100"],
        &["SET", "n1", "w"],
        &["MSET", "n2", "v", "n1", "x"],
        &["INCR", "n3"],
        &["RENAME", "n3", "n4"],
        &["RENAME", "n4", "n2"],
        &["COPY", "n2", "n5"],
        &["COPY", "n2", "n5", "REPLACE"],
        &["HSET", "n6", "f", "v"],
        &["HSET", "n6", "g", "v"],
        &["RPUSH", "n7", "a", "b"],
        &["LMOVE", "n7", "n8", "LEFT", "RIGHT"],
        &["SADD", "n9", "a", "b"],
        &["SMOVE", "n9", "n10", "a"],
        &["ZADD", "n11", "INCR", "1", "a"],
        &["SINTERSTORE", "n12", "n9"],
        &["XADD", "n13", "1-1", "f", "v"],
        &["XGROUP", "CREATE", "n14", "g", "$", "MKSTREAM"],
        &["BITOP", "NOT", "n15", "n2"],
        &["BITFIELD", "n16", "OVERFLOW", "FAIL", "SET", "u2", "0", "9"],
        &["BITFIELD", "n17", "SET", "u2", "0", "1"],
        &["DEL", "n1", "n2"],
        &["SET", "n1", "again"],
    ];
    // SORT ... STORE `sortstore`, GEORADIUS ... STORE `georadiusstore`, GEOSEARCHSTORE
    // `geosearchstore`; an empty result deletes the destination (`del`).
    let stores: &[&[&str]] = &[
        &["RPUSH", "s:list", "3", "1", "2"],
        &["SORT", "s:list", "STORE", "s:sorted"],
        &["SORT", "s:list", "STORE", "s:sorted"],
        &["SORT", "s:none", "STORE", "s:sorted"],
        &["SORT", "s:none", "STORE", "s:sorted"],
        &[
            "GEOADD",
            "s:geo",
            "13.361389",
            "38.115556",
            "Palermo",
            "15.087269",
            "37.502669",
            "Catania",
        ],
        &["GEORADIUS", "s:geo", "15", "37", "200", "km", "STORE", "s:near"],
        &[
            "GEORADIUSBYMEMBER",
            "s:geo",
            "Palermo",
            "300",
            "km",
            "STOREDIST",
            "s:dist",
        ],
        &[
            "GEOSEARCHSTORE",
            "s:found",
            "s:geo",
            "FROMLONLAT",
            "15",
            "37",
            "BYRADIUS",
            "200",
            "km",
        ],
        &[
            "GEOSEARCHSTORE",
            "s:found",
            "s:geo",
            "FROMLONLAT",
            "0",
            "0",
            "BYRADIUS",
            "1",
            "km",
        ],
        &["GEORADIUS", "s:geo", "0", "0", "1", "km", "STORE", "s:near"],
        &["GEORADIUS", "s:geo", "0", "0", "1", "km", "STORE", "s:near"],
    ];
    // Keys emptied and made again within one batch of pgvs3's (a pipeline, a transaction, a
    // script): `del` as the last element goes, `new` as the next command makes the key again,
    // each command's events in order, as Redis emits them command by command.
    let refilled: &[&[&str]] = &[
        &["RPUSH", "rf:l", "a"],
        &["LPOP", "rf:l"],
        &["RPUSH", "rf:l", "b"],
        &["RPUSH", "rf:l", "c"],
        &["LPOP", "rf:l"],
        &["LPOP", "rf:l"],
        &["LPOP", "rf:l"],
        &["DEL", "rf:l"],
        &["RPUSH", "rf:l", "d"],
        &["SADD", "rf:s", "a"],
        &["SREM", "rf:s", "a"],
        &["SET", "rf:s", "x"],
        &["HSET", "rf:h", "f", "v"],
        &["HDEL", "rf:h", "f"],
        &["HSET", "rf:h", "g", "v"],
        &["LPUSH", "rf:m", "x"],
        &["LMOVE", "rf:m", "rf:m2", "LEFT", "RIGHT"],
        &["RPUSH", "rf:m", "y"],
        &["ZADD", "rf:z", "1", "a"],
        &["ZPOPMIN", "rf:z"],
        &["ZADD", "rf:z", "2", "b"],
        &["TYPE", "rf:z"],
        &["SADD", "rf:t", "a", "b"],
        &["SREM", "rf:t", "a"],
        &["SADD", "rf:t", "c"],
    ];
    let refilled_in_transactions: &[&[&str]] = &[
        &["MULTI"],
        &["RPUSH", "rt:l", "a"],
        &["LPOP", "rt:l"],
        &["RPUSH", "rt:l", "b"],
        &["EXEC"],
        &[
            "EVAL",
            "redis.call('RPUSH', KEYS[1], 'a') redis.call('LPOP', KEYS[1]) redis.call('RPUSH', KEYS[1], 'b') redis.call('HSET', KEYS[2], 'f', 'v') redis.call('HDEL', KEYS[2], 'f') redis.call('DEL', KEYS[2]) return 1",
            "2",
            "rt:e",
            "rt:h",
        ],
    ];
    // XADD's trim says `xtrim` after `xadd` when it removed entries (in a pipeline, XADDs with
    // `*` and the same options run as one call: each still says its own).
    let xadd_trims: &[&[&str]] = &[
        &["XADD", "xt", "MAXLEN", "2", "*", "a", "1"],
        &["XADD", "xt", "MAXLEN", "2", "*", "a", "2"],
        &["XADD", "xt", "MAXLEN", "2", "*", "a", "3"],
        &["XADD", "xt", "MAXLEN", "2", "*", "a", "4"],
        &["XADD", "xt", "MAXLEN", "=", "5", "*", "b", "1"],
        &["XADD", "xt", "MINID", "0-1", "*", "c", "1"],
        &["XADD", "xt", "MINID", "=", "99999999999999", "*", "c", "2"],
        &["XADD", "xt", "MINID", "99999999999999", "*", "c", "3"],
        &["XADD", "xt", "MINID", "99999999999999", "*", "c", "4"],
        &["XADD", "xt", "MAXLEN", "1", "*", "d", "1"],
        &["XADD", "xt", "MAXLEN", "1", "*", "d", "2"],
        &["XADD", "xt", "MAXLEN", "0", "*", "d", "3"],
        &["XADD", "xt:none", "NOMKSTREAM", "MAXLEN", "0", "*", "e", "1"],
        &["XADD", "xt:2", "MAXLEN", "1", "1-1", "f", "1"],
        &["XADD", "xt:2", "MAXLEN", "1", "2-1", "f", "2"],
    ];
    let families = [
        families,
        &[
            ("new keys", new_keys),
            ("store commands", stores),
            ("refilled in a pipeline", refilled),
            ("refilled in transactions and scripts", refilled_in_transactions),
            ("xadd trims in a pipeline", xadd_trims),
            ("xadd trims", xadd_trims),
        ],
    ]
    .concat();
    for (family, commands) in families {
        same_events(
            &mut ours,
            &mut theirs,
            &mut our_events,
            &mut redis_events,
            (family, family.ends_with("in a pipeline")),
            commands,
        )
        .await;
    }
}

#[tokio::test]
async fn the_setting_reads_and_fails_as_in_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    for value in ["KEA", "g$lshzxetdK", "Ex", "Kgh", "EAK", "", "KEq", "x y"] {
        for command in [
            &["CONFIG", "SET", "notify-keyspace-events", value][..],
            &["CONFIG", "GET", "notify-keyspace-events"],
        ] {
            assert_eq!(
                ours.command(command).await,
                theirs.command(command).await,
                "{command:?}"
            );
        }
    }
    // Key-miss events are refused, saying why.
    for value in ["KEm", "Am"] {
        let reply = ours.command(&["CONFIG", "SET", "notify-keyspace-events", value]).await;
        assert!(
            reply
                .error()
                .starts_with("ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - "),
            "{reply:?}"
        );
        assert!(reply.error().contains("not supported by pgvs3"), "{reply:?}");
    }
}

/// The stream class alone (`t`), as Redis's notify-keyspace-events documents it: XADD `xadd`,
/// XDEL `xdel`, XTRIM `xtrim`, XSETID `xsetid`, XGROUP's subcommands `xgroup-create`,
/// `xgroup-createconsumer` (and from the consumers XREADGROUP, XCLAIM and XAUTOCLAIM create),
/// `xgroup-delconsumer`, `xgroup-destroy` and `xgroup-setid`; nothing
/// for commands that change nothing or for other types' writes. Compared with redis-server.
#[tokio::test]
async fn stream_events_are_published_as_redis_publishes_them() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    for server in [&mut ours, &mut theirs] {
        assert_eq!(
            server
                .command(&["CONFIG", "SET", "notify-keyspace-events", "KEt"])
                .await,
            Value::Simple("OK".into())
        );
    }
    let mut our_events = subscriber(gateway.resp_addr()).await;
    let mut redis_events = subscriber_of(&redis).await;
    let commands: &[&[&str]] = &[
        &["SET", "s", "1"],
        &["HSET", "h", "f", "v"],
        &["XADD", "x", "1-1", "a", "1"],
        &["XADD", "x", "NOMKSTREAM", "2-1", "b", "2"],
        &["XADD", "missing", "NOMKSTREAM", "*", "b", "2"],
        &["XGROUP", "CREATE", "x", "g", "0"],
        &["XGROUP", "CREATE", "x", "g", "0"],
        &["XGROUP", "CREATE", "y", "g2", "$", "MKSTREAM"],
        &["XGROUP", "CREATECONSUMER", "x", "g", "alice"],
        &["XGROUP", "CREATECONSUMER", "x", "g", "alice"],
        &["XGROUP", "DELCONSUMER", "x", "g", "alice"],
        &["XGROUP", "SETID", "x", "g", "1-1"],
        // Consumers XREADGROUP, XCLAIM and XAUTOCLAIM create: `xgroup-createconsumer`.
        &["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "x", ">"],
        &["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "x", ">"],
        &["XCLAIM", "x", "g", "mike", "0", "2-1"],
        &["XAUTOCLAIM", "x", "g", "bob", "0", "0"],
        &["XAUTOCLAIM", "x", "g", "carol", "0", "0"],
        &["XDEL", "x", "1-1", "7-7"],
        &["XDEL", "x", "7-7"],
        &["XADD", "x", "3-1", "c", "3"],
        &["XTRIM", "x", "MAXLEN", "1"],
        &["XTRIM", "x", "MAXLEN", "5"],
        &["XSETID", "x", "9-1"],
        &["XGROUP", "DESTROY", "x", "g"],
        &["XGROUP", "DESTROY", "x", "g"],
        &["DEL", "y"],
        &["XADD", "marker", "1-1", "m", "1"],
    ];
    for command in commands {
        let theirs = theirs.command(command).await;
        let got = ours.command(command).await;
        assert_eq!(
            matches!(got, Value::Error(_)),
            matches!(theirs, Value::Error(_)),
            "{command:?}: {got:?} vs {theirs:?}"
        );
    }
    let want = stream_events_until_marker(&mut redis_events).await;
    assert_eq!(stream_events_until_marker(&mut our_events).await, want);
    // What the documentation lists, each seen (DEL is generic: not in the class).
    for name in [
        "xadd",
        "xgroup-create",
        "xgroup-createconsumer",
        "xgroup-delconsumer",
        "xgroup-setid",
        "xdel",
        "xtrim",
        "xsetid",
        "xgroup-destroy",
    ] {
        assert!(want.iter().any(|(_, event)| event == name), "{name}: {want:?}");
    }
}

async fn subscriber_of(redis: &LiveRedis) -> RawResp {
    let mut subscriber = redis.connect().await;
    subscriber.command(&["PSUBSCRIBE", "__key*@0__:*"]).await;
    subscriber
}

/// The (key, event) pairs of the `__keyspace` channel until the XADD of `marker`, checking
/// that each has its `__keyevent` twin.
async fn stream_events_until_marker(subscriber: &mut RawResp) -> Vec<(String, String)> {
    let mut events: Vec<(String, String)> = Vec::new();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), subscriber.reply())
            .await
            .expect("the events arrive within 20 s")
            .expect("the subscriber stays connected");
        let Value::Array(parts) = message else {
            panic!("a pmessage, got {message:?}");
        };
        let (channel, message) = (text(&parts[2]), text(&parts[3]));
        if let Some(key) = channel.strip_prefix("__keyspace@0__:") {
            if key == "marker" {
                return events;
            }
            events.push((key.to_owned(), message));
        } else {
            let event = channel.strip_prefix("__keyevent@0__:").expect("a keyevent channel");
            let last = events.last().expect("the keyspace event first");
            assert_eq!((last.0.as_str(), last.1.as_str()), (message.as_str(), event));
        }
    }
}

async fn two_gateways(extra: &[&str]) -> (TestGateway, TestGateway) {
    let url = common::fresh_database().await;
    let mut args = vec!["--resp-addr", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let first = TestGateway::with_args(url.clone(), &args).await;
    let second = TestGateway::with_args(url, &args).await;
    (first, second)
}

#[tokio::test]
async fn a_write_on_one_gateway_is_notified_on_another_in_commit_order() {
    let (a, b) = two_gateways(&[]).await;
    let mut on_a = RawResp::connect(a.resp_addr()).await;
    let mut on_b = RawResp::connect(b.resp_addr()).await;
    // Set on A, the setting is B's too.
    assert_eq!(
        on_b.command(&["CONFIG", "GET", "notify-keyspace-events"]).await,
        Value::Array(vec![bulk("notify-keyspace-events"), bulk("")])
    );
    on_a.command(&["CONFIG", "SET", "notify-keyspace-events", "Kg$"]).await;
    common::eventually(Duration::from_secs(20), "B knows the setting", || {
        let addr = b.resp_addr();
        async move {
            let mut on_b = RawResp::connect(addr).await;
            let got = on_b.command(&["CONFIG", "GET", "notify-keyspace-events"]).await;
            (got == Value::Array(vec![bulk("notify-keyspace-events"), bulk("g$K")])).then_some(())
        }
    })
    .await;
    let mut events = subscriber(b.resp_addr()).await;
    // The subscription is live at once; A's LISTEN connection may still be starting: the
    // first event is awaited with retries.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        on_a.command(&["SET", "first", "1"]).await;
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(500), events.reply()).await {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the first event within 20 s");
    }
    on_a.command(&["DEL", "first"]).await;
    // Drain the retries' events: until the DEL's.
    loop {
        let Some(Value::Array(parts)) = events.reply().await else {
            panic!("a pmessage");
        };
        if text(&parts[3]) == "del" {
            break;
        }
    }
    // Two writers on A and one on B, each key's events in its commands' order.
    let mut on_a2 = RawResp::connect(a.resp_addr()).await;
    for n in 0..30 {
        let key = format!("k{}", n % 3);
        let writer = match n % 3 {
            0 => &mut on_a,
            1 => &mut on_a2,
            _ => &mut on_b,
        };
        writer.command(&["SET", &key, "v"]).await;
        writer.command(&["INCR", "counter"]).await;
        writer.command(&["DEL", &key]).await;
    }
    let mut got = Vec::new();
    while got.len() < 90 {
        let Some(Value::Array(parts)) = events.reply().await else {
            panic!("a pmessage");
        };
        got.push((text(&parts[2]), text(&parts[3])));
    }
    let mut want = Vec::new();
    for n in 0..30 {
        let key = format!("__keyspace@0__:k{}", n % 3);
        want.push((key.clone(), "set".to_owned()));
        want.push(("__keyspace@0__:counter".to_owned(), "incrby".to_owned()));
        want.push((key, "del".to_owned()));
    }
    assert_eq!(got, want);
    // Off again: nothing more is sent.
    on_b.command(&["CONFIG", "SET", "notify-keyspace-events", ""]).await;
    common::eventually(Duration::from_secs(20), "A knows the setting", || {
        let addr = a.resp_addr();
        async move {
            let mut on_a = RawResp::connect(addr).await;
            let got = on_a.command(&["CONFIG", "GET", "notify-keyspace-events"]).await;
            (got == Value::Array(vec![bulk("notify-keyspace-events"), bulk("")])).then_some(())
        }
    })
    .await;
    on_a.command(&["SET", "quiet", "1"]).await;
    assert_eq!(
        events.command(&["PING"]).await,
        Value::Array(vec![bulk("pong"), bulk("")])
    );
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(1), events.reply())
            .await
            .ok()
            .flatten(),
        None,
        "no event after the setting was cleared"
    );
}

#[tokio::test]
async fn a_subscriber_that_does_not_read_events_is_disconnected() {
    let _large = crate::LARGE_ALLOCATIONS.read().await;
    let gateway = TestGateway::with_resp(&["--resp-pubsub-output-limit", "1MiB"]).await;
    let mut writer = RawResp::connect(gateway.resp_addr()).await;
    writer
        .command(&["CONFIG", "SET", "notify-keyspace-events", "KEA"])
        .await;
    let mut slow = RawResp::connect(gateway.resp_addr()).await;
    slow.command(&["PSUBSCRIBE", "*"]).await;
    // 100 keys of 1,000 bytes a command: about 200 KB of events each. Bounded: 2,000 commands
    // (400 MB of events) at most; the socket buffers take some megabytes, then the 1 MiB limit.
    let mut sent = 0;
    let cut = loop {
        let keys: Vec<String> = (0..100).map(|n| format!("{n:0>1000}")).collect();
        let mut command = vec!["MSET"];
        for key in &keys {
            command.push(key);
            command.push("v");
        }
        assert_eq!(writer.command(&command).await, Value::Simple("OK".into()));
        sent += 1;
        if writer.command(&["PUBSUB", "NUMPAT"]).await == Value::Int(0) {
            break true;
        }
        if sent >= 2000 {
            break false;
        }
    };
    assert!(cut, "the slow subscriber is still subscribed after {sent} commands");
    let ended = tokio::time::timeout(Duration::from_secs(30), async { while slow.reply().await.is_some() {} }).await;
    assert!(ended.is_ok(), "the connection was closed");
}

#[tokio::test]
async fn redis_py_subscribes_to_keyspace_events() {
    let gateway = TestGateway::with_resp(&[]).await;
    let addr = gateway.resp_addr();
    let python = format!(
        r#"
import redis, time
r = redis.Redis(host="{}", port={})
r.config_set("notify-keyspace-events", "KEhg")
print(r.config_get("notify-keyspace-events"))
p = r.pubsub()
p.psubscribe("__keyspace@0__:user:*")
assert p.get_message(timeout=5)["type"] == "psubscribe"
got = []
deadline = time.time() + 20
# The first write is repeated until its event comes (the LISTEN connection may be starting).
while not got and time.time() < deadline:
    r.hset("user:1", "name", "ada")
    message = p.get_message(timeout=0.5)
    if message and message["data"] == b"hset":
        got.append((message["channel"].decode(), "hset"))
r.hdel("user:1", "name")
while len(got) < 3 and time.time() < deadline:
    message = p.get_message(timeout=1)
    if message and message["data"] != b"hset":
        got.append((message["channel"].decode(), message["data"].decode()))
print(got[:3])
"#,
        addr.ip(),
        addr.port()
    );
    let output = tokio::process::Command::new("python3")
        .args(["-c", &python])
        .output()
        .await
        .expect("python3 (scripts/test puts the clients' venv first on PATH)");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "{'notify-keyspace-events': 'ghKE'}\n[('__keyspace@0__:user:1', 'hset'), ('__keyspace@0__:user:1', 'hdel'), ('__keyspace@0__:user:1', 'del')]\n",
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn expired_keys_are_notified_once_by_the_reaper_of_the_fleet() {
    let (a, b) = two_gateways(&["--maintenance-interval", "200ms"]).await;
    let mut on_a = RawResp::connect(a.resp_addr()).await;
    on_a.command(&["CONFIG", "SET", "notify-keyspace-events", "Ex"]).await;
    // A subscriber on each gateway: each must get each key's event once.
    let mut events = Vec::new();
    for gateway in [&a, &b] {
        let mut subscriber = RawResp::connect(gateway.resp_addr()).await;
        subscriber.command(&["SUBSCRIBE", "__keyevent@0__:expired"]).await;
        events.push(subscriber);
    }
    let mut want = Vec::new();
    for n in 0..20 {
        let key = format!("ttl:{n}");
        match n % 3 {
            0 => on_a.command(&["SET", &key, "v", "PX", "300"]).await,
            1 => on_a.command(&["HSET", &key, "f", "v"]).await,
            _ => on_a.command(&["RPUSH", &key, "v"]).await,
        };
        if n % 3 != 0 {
            on_a.command(&["PEXPIRE", &key, "300"]).await;
        }
        want.push(key);
    }
    // Not expiring, and not notified.
    on_a.command(&["SET", "kept", "v", "EX", "1000"]).await;
    for subscriber in &mut events {
        let mut got = Vec::new();
        while got.len() < want.len() {
            let message = tokio::time::timeout(Duration::from_secs(30), subscriber.reply())
                .await
                .expect("the expired events within 30 s")
                .expect("connected");
            let Value::Array(parts) = message else {
                panic!("a message, got {message:?}");
            };
            if text(&parts[0]) == "message" {
                assert_eq!(text(&parts[1]), "__keyevent@0__:expired");
                got.push(text(&parts[2]));
            }
        }
        got.sort();
        let mut want = want.clone();
        want.sort();
        assert_eq!(got, want);
        // Once: no further event comes.
        assert_eq!(
            subscriber.command(&["PING"]).await,
            Value::Array(vec![bulk("pong"), bulk("")])
        );
        let more = tokio::time::timeout(Duration::from_millis(1500), subscriber.reply()).await;
        assert!(more.is_err(), "a second event: {more:?}");
    }
    // INFO counts them, for the fleet.
    for gateway in [&a, &b] {
        let mut client = RawResp::connect(gateway.resp_addr()).await;
        let info = text(&client.command(&["INFO", "stats"]).await);
        assert!(info.contains("\r\nexpired_keys:20\r\n"), "{info}");
    }
}

/// S3 writes to the keyspace a database maps to are what a RESP SET or DEL of the key would be:
/// PutObject, CopyObject and CompleteMultipartUpload emit `set` (after `new` for a new key),
/// DeleteObject and DeleteObjects `del`; a tagging change emits nothing; a RESP write's events
/// are its own, not doubled. A tracking client is told of the S3 writes of the keys it read.
#[tokio::test]
async fn s3_writes_emit_set_and_del_and_invalidate_tracked_keys() {
    use aws_sdk_s3::primitives::ByteStream;
    use aws_sdk_s3::types::{Delete, ObjectIdentifier, Tag, Tagging};
    use common::s3::{completion, upload_part};
    let gateway = TestGateway::with_resp(&[]).await;
    let s3 = &gateway.client;
    let mut client = RawResp::connect(gateway.resp_addr()).await;
    client
        .command(&["CONFIG", "SET", "notify-keyspace-events", "KEAn"])
        .await;
    let mut events = subscriber(gateway.resp_addr()).await;
    let put = async |key: &str, body: &'static [u8]| {
        s3.put_object()
            .bucket("resp")
            .key(key)
            .body(ByteStream::from_static(body))
            .send()
            .await
            .unwrap();
    };
    put("a", b"1").await;
    put("a", b"2").await;
    s3.copy_object()
        .bucket("resp")
        .key("b")
        .copy_source("resp/a")
        .send()
        .await
        .unwrap();
    s3.put_object_tagging()
        .bucket("resp")
        .key("a")
        .tagging(
            Tagging::builder()
                .tag_set(Tag::builder().key("t").value("v").build().unwrap())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    s3.delete_object().bucket("resp").key("a").send().await.unwrap();
    let upload = s3
        .create_multipart_upload()
        .bucket("resp")
        .key("c")
        .send()
        .await
        .unwrap();
    let upload_id = upload.upload_id().unwrap();
    let part = upload_part(s3, "resp", "c", upload_id, 1, b"part").await;
    s3.complete_multipart_upload()
        .bucket("resp")
        .key("c")
        .upload_id(upload_id)
        .multipart_upload(completion(&[(1, &part)]))
        .send()
        .await
        .unwrap();
    s3.delete_objects()
        .bucket("resp")
        .delete(
            Delete::builder()
                .objects(ObjectIdentifier::builder().key("b").build().unwrap())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    // A RESP write: its own events, once.
    client.command(&["APPEND", "c", "x"]).await;
    client.command(&["SET", "marker:s3", "x"]).await;
    let got = events_until(&mut events, "marker:s3").await;
    let want: Vec<(String, String)> = [
        ("a", "new"),
        ("a", "set"),
        ("a", "set"),
        ("b", "new"),
        ("b", "set"),
        ("a", "del"),
        ("c", "new"),
        ("c", "set"),
        ("b", "del"),
        ("c", "append"),
    ]
    .iter()
    .flat_map(|(key, event)| {
        [
            (format!("__keyspace@0__:{key}"), event.to_string()),
            (format!("__keyevent@0__:{event}"), key.to_string()),
        ]
    })
    .collect();
    assert_eq!(got, want);

    // CLIENT TRACKING: the keys a client read are invalidated by S3 writes.
    let mut tracker = RawResp::connect(gateway.resp_addr()).await;
    tracker.command(&["HELLO", "3"]).await;
    tracker.command(&["CLIENT", "TRACKING", "on"]).await;
    assert_eq!(tracker.command(&["GET", "c"]).await, bulk("partx"));
    put("c", b"3").await;
    let invalidate = |key: &str| Value::Push(vec![bulk("invalidate"), Value::Array(vec![bulk(key)])]);
    let next = async |tracker: &mut RawResp| {
        tokio::time::timeout(Duration::from_secs(20), tracker.reply())
            .await
            .expect("the invalidation arrives within 20 s")
            .expect("the connection stays open")
    };
    assert_eq!(next(&mut tracker).await, invalidate("c"));
    assert_eq!(tracker.command(&["GET", "c"]).await, bulk("3"));
    s3.delete_object().bucket("resp").key("c").send().await.unwrap();
    assert_eq!(next(&mut tracker).await, invalidate("c"));
}
