//! SORT and SORT_RO over the wire, each reply compared with redis-server 7.0.15's reply to the
//! same command (run live, see pgvs3-testkit's resp::live).

use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::Value;

use common::resp::live::{LiveRedis, same_replies};

#[tokio::test]
async fn sort_answers_as_redis_server() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = common::resp::RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_replies(
        &mut ours,
        &mut theirs,
        &[
            &["RPUSH", "nums", "3", "1", "2", "10"],
            &["SORT", "nums"],
            &["SORT", "nums", "DESC"],
            &["SORT", "nums", "ALPHA"],
            &["SORT", "nums", "ALPHA", "DESC"],
            &["SORT", "nums", "LIMIT", "1", "2"],
            &["SORT", "nums", "LIMIT", "-5", "2"],
            &["SORT", "nums", "LIMIT", "2", "-1"],
            &["SORT", "nums", "LIMIT", "10", "2"],
            &["SORT", "nums", "LIMIT", "0", "0"],
            &["SORT_RO", "nums", "DESC", "LIMIT", "0", "3"],
            // BY without a `*`: not sorted; a list keeps its order (DESC reverses it).
            &["SORT", "nums", "BY", "nosort"],
            &["SORT", "nums", "BY", "nosort", "DESC"],
            &["SORT", "nums", "BY", "nosort", "LIMIT", "1", "2"],
            &["SORT", "nums", "BY", "nosort", "DESC", "LIMIT", "1", "2"],
            // Weights from string keys; a missing one weighs 0, ties by the element.
            &["MSET", "w_3", "30", "w_1", "10", "w_2", "20", "w_10", "5"],
            &["SORT", "nums", "BY", "w_*"],
            &["SORT", "nums", "BY", "w_*", "DESC", "LIMIT", "0", "2"],
            &["SORT", "nums", "BY", "missing_*"],
            &[
                "SORT",
                "nums",
                "BY",
                "w_*",
                "GET",
                "#",
                "GET",
                "w_*",
                "GET",
                "missing_*",
                "GET",
                "nostar",
            ],
            // Hash fields.
            &["HSET", "h_1", "f", "d", "g", "1"],
            &["HSET", "h_2", "f", "b"],
            &["HSET", "h_3", "f", "c"],
            &["HSET", "h_10", "f", "a"],
            &[
                "SORT", "nums", "BY", "h_*->f", "ALPHA", "GET", "h_*->f", "GET", "#", "GET", "h_*->g",
            ],
            &["SORT", "nums", "BY", "h_*->f", "GET", "h_*->f"],
            &["SORT", "nums", "BY", "h_*->g", "GET", "#"],
            // A field of a string, a string by a hash's name: nil.
            &["SORT", "nums", "BY", "w_*", "GET", "w_*->f", "GET", "h_*"],
            // Sorted sets: in their order without sorting.
            &["ZADD", "z", "1", "x", "2", "y", "0", "w", "2", "a"],
            &["SORT", "z", "BY", "nosort"],
            &["SORT", "z", "BY", "nosort", "DESC"],
            &["SORT", "z", "BY", "nosort", "LIMIT", "1", "2"],
            &["SORT", "z", "BY", "nosort", "DESC", "LIMIT", "1", "2"],
            &["SORT", "z", "ALPHA"],
            &["SORT", "z"],
            // Sets; one without sorting is stored sorted (as redis-server stores it).
            &["SADD", "s", "b", "a", "c", "10"],
            &["SORT", "s", "ALPHA", "DESC"],
            &["SORT", "s", "BY", "nosort", "STORE", "dst"],
            &["LRANGE", "dst", "0", "-1"],
            // STORE: a list replacing whatever was there, without its TTL; nothing deletes it.
            &["SET", "dst", "string", "EX", "100"],
            &[
                "SORT",
                "nums",
                "BY",
                "w_*",
                "GET",
                "#",
                "GET",
                "missing_*",
                "STORE",
                "dst",
            ],
            &["TYPE", "dst"],
            &["TTL", "dst"],
            &["LRANGE", "dst", "0", "-1"],
            &["SORT", "missing", "STORE", "dst"],
            &["EXISTS", "dst"],
            &["SORT", "missing"],
            &["SORT", "nums", "STORE", "nums"],
            &["LRANGE", "nums", "0", "-1"],
            // Errors.
            &["RPUSH", "bad", "1", "x"],
            &["SORT", "bad"],
            &["SORT", "bad", "BY", "nosort"],
            &["SORT", "s"],
            &["SET", "str", "x"],
            &["SORT", "str"],
            &["SORT", "nums", "LIMIT", "1"],
            &["SORT", "nums", "LIMIT", "a", "1"],
            &["SORT", "nums", "FOO"],
            &["SORT", "nums", "GET"],
            &["SORT_RO", "nums", "STORE", "x"],
            &["SORT"],
            &["RPUSH", "odd", " 1.5", "1e3", "-inf", "0x", ""],
            &["SORT", "odd"],
            &["RPUSH", "odd2", " 1.5", "1e3", "-inf", ""],
            &["SORT", "odd2"],
            &["SORT", "odd2", "DESC"],
            &["MSET", "wbad_1", "x"],
            &["SORT", "nums", "BY", "wbad_*"],
        ],
    )
    .await;
}

/// SORT inside MULTI sees what the transaction wrote before it, its STORE is seen after it,
/// and SORT in a script looks up keys the script did not name.
#[tokio::test]
async fn sort_in_transactions_and_scripts() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = common::resp::RawResp::connect(gateway.resp_addr()).await;
    raw.command(&["RPUSH", "l", "a", "b", "c"]).await;
    assert_eq!(raw.command(&["MULTI"]).await, Value::Simple("OK".into()));
    for command in [
        &["MSET", "w_a", "3", "w_b", "1", "w_c", "2"][..],
        &["SORT", "l", "BY", "w_*", "STORE", "out"],
        &["LRANGE", "out", "0", "-1"],
    ] {
        assert_eq!(raw.command(command).await, Value::Simple("QUEUED".into()));
    }
    assert_eq!(
        raw.command(&["EXEC"]).await,
        Value::Array(vec![
            Value::Simple("OK".into()),
            Value::Int(3),
            Value::Array(vec![Value::bulk("b"), Value::bulk("c"), Value::bulk("a")]),
        ])
    );
    assert_eq!(
        raw.command(&[
            "EVAL",
            "return redis.call('SORT', KEYS[1], 'BY', 'w_*', 'DESC')",
            "1",
            "l"
        ])
        .await,
        Value::Array(vec![Value::bulk("a"), Value::bulk("c"), Value::bulk("b")])
    );
}

/// BY and GET lookups are bounded before they are made; the refusal says why.
#[tokio::test]
async fn sort_lookups_are_bounded() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = common::resp::RawResp::connect(gateway.resp_addr()).await;
    let elements: Vec<String> = (0..34_000).map(|n| n.to_string()).collect();
    let mut push = vec!["RPUSH", "big"];
    push.extend(elements.iter().map(String::as_str));
    assert_eq!(raw.command(&push).await, Value::Int(34_000));
    let refused = raw
        .command(&["SORT", "big", "BY", "nosort", "GET", "a_*", "GET", "b_*", "GET", "c_*"])
        .await;
    assert!(
        refused
            .error()
            .starts_with("ERR SORT would look up 102000 keys or fields"),
        "{refused:?}"
    );
    // Within the bound with LIMIT.
    assert_eq!(
        raw.command(&["SORT", "big", "LIMIT", "0", "2", "GET", "#", "GET", "a_*"])
            .await,
        Value::Array(vec![Value::bulk("0"), Value::Nil, Value::bulk("1"), Value::Nil])
    );
}
