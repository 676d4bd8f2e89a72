//! MULTI/EXEC runs every queued command's effects in queue order at one point in time, as
//! Redis's EXEC does: keyspace-wide commands (FLUSHDB, FLUSHALL, KEYS, SCAN, DBSIZE, RANDOMKEY),
//! scripts and functions inside EXEC's transaction in their place, and nothing of a transaction
//! that fails. Compared live with redis-server.

use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::live::{LiveRedis, same_bytes, same_lines, same_replies};
use common::resp::{RawResp, Value};

/// The brief's faults: writes queued after FLUSHDB were lost (it ran after the commit), and
/// KEYS, SCAN, DBSIZE and RANDOMKEY answered for the state after the whole transaction.
#[tokio::test]
async fn keyspace_wide_commands_run_in_their_queue_position() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb"]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            "SET old 1",
            "MULTI",
            "SET a 1",
            "FLUSHDB",
            "SET b 2",
            "HSET h f v",
            "EXEC",
            "DBSIZE",
            "EXISTS old a b h",
            "MULTI",
            "SET a 1",
            "FLUSHALL",
            "SET c 3",
            "EXEC",
            "DBSIZE",
            "EXISTS a b h c",
            "MULTI",
            "KEYS *",
            "SCAN 0",
            "DEL c",
            "KEYS *",
            "SCAN 0 MATCH c",
            "RANDOMKEY",
            "SET b 2",
            "KEYS *",
            "SCAN 0 TYPE string",
            "RANDOMKEY",
            "EXEC",
            "MULTI",
            "DBSIZE",
            "DEL b",
            "DBSIZE",
            "EXEC",
            "SET x 0",
            "MULTI",
            "EVAL redis.call('SET','x','1') 0",
            "FLUSHDB",
            "EVAL redis.call('SET','y','1') 0",
            "DBSIZE",
            "EXEC",
            "EXISTS x y",
            "GET y",
        ],
    )
    .await;
}

/// A transaction that fails runs nothing of itself: not a queued FLUSHDB (WATCH, EXECABORT).
#[tokio::test]
async fn a_failed_transaction_flushes_nothing() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb"]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    let mut our_other = RawResp::connect(gateway.resp_addr()).await;
    let mut their_other = redis.connect().await;
    same_lines(
        &mut ours,
        &mut theirs,
        &["SET kept 1", "WATCH w", "MULTI", "SET a 1", "FLUSHDB"],
    )
    .await;
    same_lines(&mut our_other, &mut their_other, &["SET w changed"]).await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            "EXEC",
            "DBSIZE",
            "MULTI",
            "FLUSHDB",
            "NOSUCHCOMMAND",
            "EXEC",
            "DBSIZE",
            "GET kept",
        ],
    )
    .await;
}

/// What pgvs3 cannot run in EXEC's transaction and whose effect the commands queued with it
/// would see is refused while queueing, which fails the transaction as Redis does with an error
/// found then (EXECABORT), rather than run out of order.
#[tokio::test]
async fn commands_that_cannot_run_in_order_are_refused_in_multi() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb", "--resp-databases", "1=one"]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    for (command, error) in [
        (
            &["CONFIG", "SET", "hash-max-listpack-entries", "1"][..],
            "ERR CONFIG SET inside MULTI is not supported: the commands queued with it would not see the keyspace parameter it sets",
        ),
        (
            &["CONFIG", "SET", "notify-keyspace-events", "KEA"][..],
            "ERR CONFIG SET inside MULTI is not supported: the commands queued with it would not see the keyspace parameter it sets",
        ),
        (
            &["FLUSHALL"][..],
            "ERR FLUSHALL inside MULTI is not supported: FLUSHALL of several databases cannot be one transaction (use FLUSHDB in each)",
        ),
        (
            &["FUNCTION", "FLUSH"][..],
            "ERR FUNCTION FLUSH inside MULTI is not supported: the FCALLs queued with it would not see the library it changes",
        ),
        (
            &["SCRIPT", "FLUSH"][..],
            "ERR SCRIPT FLUSH inside MULTI is not supported: the EVALSHAs queued with it would not see the scripts it drops",
        ),
    ] {
        assert_eq!(raw.command(&["SET", "k", "before"]).await, Value::Simple("OK".into()));
        assert_eq!(raw.command(&["MULTI"]).await, Value::Simple("OK".into()));
        assert_eq!(
            raw.command(&["SET", "k", "inside"]).await,
            Value::Simple("QUEUED".into())
        );
        assert_eq!(raw.command(command).await.error(), error);
        assert_eq!(
            raw.command(&["EXEC"]).await.error(),
            "EXECABORT Transaction discarded because of previous errors."
        );
        assert_eq!(raw.command(&["GET", "k"]).await, Value::bulk("before"));
    }
    // CONFIG SET of a parameter no queued command reads runs after the transaction, and
    // CONFIG GET; order-independent commands too.
    assert_eq!(raw.command(&["MULTI"]).await, Value::Simple("OK".into()));
    raw.command(&["CONFIG", "GET", "hash-max-listpack-entries"]).await;
    raw.command(&["PING"]).await;
    raw.command(&["ECHO", "e"]).await;
    let Value::Array(replies) = raw.command(&["EXEC"]).await else {
        panic!("EXEC answers an array");
    };
    assert_eq!(replies[1..], [Value::Simple("PONG".into()), Value::bulk("e")]);
}

/// Random MULTI blocks of key commands mixed with the keyspace-wide ones (KEYS and SCAN with a
/// pattern naming one key, so that their order is Redis's too) and scripts: every reply, and
/// the keyspace after each block, as redis-server's.
#[tokio::test]
async fn random_transactions_answer_as_redis_does() {
    use rand::{Rng, SeedableRng};
    let gateway = TestGateway::with_resp(&["--resp-flushdb"]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(32);
    let keys = ["a", "b", "c"];
    for _ in 0..40 {
        let mut lines = vec!["MULTI".to_owned()];
        for _ in 0..rng.random_range(1..8) {
            let key = keys[rng.random_range(0..keys.len())];
            lines.push(match rng.random_range(0..12) {
                0 => format!("SET {key} {}", rng.random_range(0..100)),
                1 => format!("DEL {key}"),
                2 => format!("HSET {key} f {}", rng.random_range(0..100)),
                3 => format!("INCR {key}"),
                4 => "FLUSHDB".to_owned(),
                5 => "DBSIZE".to_owned(),
                6 => format!("KEYS {key}"),
                7 => format!("SCAN 0 MATCH {key} COUNT 100"),
                8 => format!("EXISTS {}", keys.join(" ")),
                9 => format!("EVAL redis.call('SET',KEYS[1],'s') 1 {key}"),
                10 => format!("TYPE {key}"),
                _ => "PING".to_owned(),
            });
        }
        lines.push("EXEC".to_owned());
        lines.push("DBSIZE".to_owned());
        lines.extend(keys.iter().map(|key| format!("TYPE {key}")));
        for line in &lines {
            let words: Vec<&[u8]> = line.split_ascii_whitespace().map(str::as_bytes).collect();
            same_bytes(&mut ours, &mut theirs, &words).await;
        }
    }
}

/// A Lua loop that runs until 50 ms have passed by TIME: past a TTL set just before it.
const BUSY: &str = "local t = redis.call('TIME') local start = t[1] * 1000000 + t[2] \
                    repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start > 50000";

/// A script judges every key at one instant, as Redis 7.0 freezes its clock for a script: a
/// hash whose TTL the script set and ran past is still there for all its calls (it expires
/// after). Before, typed calls read the clock afresh: HGET found nothing, HSET made a new hash
/// without the TTL, which never expired. Compared live (PTTL aside: Redis 7.0 counts it by the
/// running clock, pgvs3 by the script's).
#[tokio::test]
async fn a_script_judges_expiry_at_one_instant() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    let script = format!(
        "redis.call('HSET', KEYS[1], 'f', 'v') redis.call('PEXPIRE', KEYS[1], '20') {BUSY} \
         return {{redis.call('TYPE', KEYS[1])['ok'], redis.call('EXISTS', KEYS[1]), \
                  redis.call('HGET', KEYS[1], 'f'), redis.call('HLEN', KEYS[1]), \
                  redis.call('HSET', KEYS[1], 'g', '1'), redis.call('HLEN', KEYS[1]), \
                  redis.call('SADD', 'other', 'm'), redis.call('SCARD', 'other')}}"
    );
    same_bytes(&mut ours, &mut theirs, &[b"EVAL", script.as_bytes(), b"1", b"sh"]).await;
    // The TTL the script set stays: the hash is not made again without it.
    let Value::Int(ttl) = ours.command(&["PTTL", "sh"]).await else {
        panic!("PTTL answers an integer");
    };
    assert!(ttl <= 20, "{ttl}");
}

/// The live Redis a comparison runs against is the test's own: a server started on a port
/// another server holds is refused (before, it exited, and the test compared against the other
/// test's server, whose commands reached its keys: this file's expiry test failed in CI with
/// its hash gone from "Redis" mid-transaction).
#[tokio::test]
async fn a_live_redis_on_a_taken_port_is_refused() {
    let first = LiveRedis::start().await;
    assert!(LiveRedis::start_on(first.addr().port()).await.is_none());
    let second = LiveRedis::start().await;
    assert_ne!(first.addr(), second.addr());
    let mut client = first.connect().await;
    assert_eq!(client.command(&["PING"]).await, Value::Simple("PONG".into()));
}

/// MULTI/EXEC judges every key at one instant too, keyspace-wide commands included: a TTL
/// that passes while EXEC runs (here a script's busy loop) does not expire the key for the
/// commands after it. Compared live.
#[tokio::test]
async fn a_transaction_judges_expiry_at_one_instant() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb"]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    for server in [&mut ours, &mut theirs] {
        server.command(&["HSET", "h", "f", "v"]).await;
        server.command(&["MULTI"]).await;
        server.command(&["PEXPIRE", "h", "1"]).await;
        server.command(&["EVAL", BUSY, "0"]).await;
        for command in [
            &["TYPE", "h"][..],
            &["HGET", "h", "f"],
            &["HLEN", "h"],
            &["KEYS", "*"],
            &["DBSIZE"],
            &["RANDOMKEY"],
            &["EXISTS", "h"],
        ] {
            server.command(command).await;
        }
    }
    same_lines(&mut ours, &mut theirs, &["EXEC"]).await;
}

/// As Redis's SETBIT, which signals a key modified only when it changed it: a SETBIT that
/// leaves the bit as it was (and the string as long) does not fail a WATCHing EXEC; one that
/// changes it does. Compared live.
#[tokio::test]
async fn an_unchanged_setbit_does_not_fail_a_watching_exec() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    let mut our_other = RawResp::connect(gateway.resp_addr()).await;
    let mut their_other = redis.connect().await;
    // Unchanged; changed; a 0 past the end, which grows the string.
    for setbit in ["SETBIT b 7 1", "SETBIT b 6 1", "SETBIT b 100 0"] {
        same_lines(
            &mut ours,
            &mut theirs,
            &["DEL b", "SETBIT b 7 1", "WATCH b", "MULTI", "SET x 1"],
        )
        .await;
        same_lines(&mut our_other, &mut their_other, &[setbit]).await;
        same_lines(&mut ours, &mut theirs, &["EXEC"]).await;
    }
}

/// SCRIPT LOAD inside MULTI takes effect in its queue position, as in Redis: the EVALSHA queued
/// after it runs the script. Before, EVALSHA looked the script up while EXEC built its steps,
/// before the SCRIPT LOAD ran after the commit, and answered NOSCRIPT. Compared live.
#[tokio::test]
async fn script_load_in_multi_serves_the_evalshas_after_it() {
    const GET: &str = "return redis.call('GET', KEYS[1])";
    const SHA: &str = "d3c21d0c2b9ca22f82737626a27bcaf5d288f99f";
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_replies(
        &mut ours,
        &mut theirs,
        &[
            &["MULTI"],
            &["SET", "k", "v"],
            &["EVALSHA", SHA, "1", "k"],
            &["SCRIPT", "LOAD", GET],
            &["SCRIPT", "EXISTS", SHA],
            &["EVALSHA", SHA, "1", "k"],
            &["EVALSHA_RO", SHA, "1", "k"],
            &["EXEC"],
            &["EVALSHA", SHA, "1", "k"],
        ],
    )
    .await;
}

/// Nothing of a transaction that fails as a whole runs: not the commands that run after its
/// commit (PUBLISH here), which answer its error as its key commands do. Its write waits on a
/// lock past `--resp-write-timeout` and is rolled back; before, the PUBLISH was still sent.
#[tokio::test]
async fn a_failed_transaction_publishes_nothing() {
    let gateway = TestGateway::with_resp(&["--resp-write-timeout", "1s"]).await;
    let lock = gateway.sql().await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let mut subscriber = RawResp::connect(gateway.resp_addr()).await;
    subscriber.command(&["SUBSCRIBE", "ch"]).await;
    assert_eq!(raw.command(&["ZADD", "z", "1", "a"]).await, Value::Int(1));
    lock.batch_execute("BEGIN; LOCK TABLE pgvs3.resp_zset IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    for command in [&["MULTI"][..], &["ZADD", "z", "2", "b"], &["PUBLISH", "ch", "inside"]] {
        raw.command(command).await;
    }
    let cancelled = Value::Error("ERR command timed out after 1 s (--resp-write-timeout) and was cancelled".into());
    assert_eq!(
        raw.command(&["EXEC"]).await,
        Value::Array(vec![cancelled.clone(), cancelled])
    );
    lock.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(raw.command(&["ZCARD", "z"]).await, Value::Int(1));
    // The subscriber's next message is this one: "inside" was never sent.
    assert_eq!(raw.command(&["PUBLISH", "ch", "after"]).await, Value::Int(1));
    assert_eq!(
        subscriber.reply().await,
        Some(Value::Array(vec![
            Value::bulk("message"),
            Value::bulk("ch"),
            Value::bulk("after")
        ]))
    );
}
