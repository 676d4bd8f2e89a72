//! CLIENT TRACKING (client-side caching): RESP3 invalidation pushes through redis-rs, the RESP2
//! redirect to a `__redis__:invalidate` subscriber, BCAST prefixes, NOLOOP, OPTIN/OPTOUT with
//! CLIENT CACHING, the report commands and errors compared with a live redis-server, the bounded
//! table, invalidations across two gateways of one database, and redis-py's client-side cache.

use pgvs3_testkit as common;

use std::time::Duration;

use common::TestGateway;
use common::resp::{RawResp, Value};

use crate::redis_rs;
use common::resp::live::{LiveRedis, same_lines};

fn bulk(text: &str) -> Value {
    Value::bulk(text)
}

fn ok() -> Value {
    Value::Simple("OK".into())
}

/// The next frame a connection gets unasked (a push, or a RESP2 message).
async fn next_push(client: &mut RawResp) -> Value {
    tokio::time::timeout(Duration::from_secs(20), client.reply())
        .await
        .expect("the invalidation arrives within 20 s")
        .expect("the connection stays open")
}

/// The next push redis-rs got, an invalidation (within 20 s): its data.
async fn next_invalidation(received: &mut tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>) -> Vec<redis::Value> {
    let push = tokio::time::timeout(Duration::from_secs(20), received.recv())
        .await
        .expect("an invalidation within 20 s")
        .expect("the connection stays open");
    assert_eq!(push.kind, redis::PushKind::Invalidate, "{push:?}");
    push.data
}

fn invalidate(keys: &[&str]) -> Value {
    Value::Push(vec![
        bulk("invalidate"),
        Value::Array(keys.iter().map(|key| bulk(key)).collect()),
    ])
}

/// A RESP2 redirect message on `__redis__:invalidate`, its keys sorted.
fn redirected(message: Value) -> Vec<String> {
    let Value::Array(parts) = message else {
        panic!("a message, got {message:?}")
    };
    assert_eq!(parts[..2], [bulk("message"), bulk("__redis__:invalidate")]);
    let Value::Array(keys) = &parts[2] else {
        panic!("keys, got {:?}", parts[2])
    };
    let mut keys: Vec<String> = keys
        .iter()
        .map(|key| match key {
            Value::Bulk(key) => String::from_utf8_lossy(key).into_owned(),
            other => panic!("{other:?}"),
        })
        .collect();
    keys.sort();
    keys
}

/// redis-rs in RESP3 (the tests' `open` helper with a push channel): a key read is invalidated
/// once when another client (or the client itself) changes it, a key not read is not, and a
/// FLUSHDB invalidates everything (a null). Keys are written before tracking starts: a write's
/// invalidation that arrives after a later read of its key is one too many (see
/// docs/resp-compatibility.md), which the order of the pushes below would not tell apart.
#[tokio::test]
async fn redis_rs_gets_invalidation_pushes_for_the_keys_it_read() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb"]).await;
    let (pushes, mut received) = tokio::sync::mpsc::unbounded_channel();
    let mut tracker = redis_rs::open_with_pushes(&redis_rs::client(&gateway, "?protocol=resp3"), pushes).await;
    let mut writer = redis_rs::connect(&gateway).await;
    let _: () = redis_rs::query(&mut writer, &["MSET", "read", "1", "unread", "1", "fence", "1"]).await;
    let _: () = redis_rs::query(&mut tracker, &["CLIENT", "TRACKING", "ON"]).await;
    let value: String = redis_rs::query(&mut tracker, &["GET", "read"]).await;
    assert_eq!(value, "1");
    let _: String = redis_rs::query(&mut tracker, &["GET", "fence"]).await;
    let keys = |key: &str| {
        vec![redis::Value::Array(vec![redis::Value::BulkString(
            key.as_bytes().to_vec(),
        )])]
    };
    // Written before the key read is: had it been told, it would come first.
    let _: () = redis_rs::query(&mut writer, &["SET", "unread", "2"]).await;
    let _: () = redis_rs::query(&mut writer, &["SET", "read", "2"]).await;
    assert_eq!(next_invalidation(&mut received).await, keys("read"));
    // Told once: the next change of the key, not read again, is not told (the fence's change,
    // committed after it, comes first).
    let _: () = redis_rs::query(&mut writer, &["SET", "read", "3"]).await;
    let _: () = redis_rs::query(&mut writer, &["SET", "fence", "2"]).await;
    assert_eq!(next_invalidation(&mut received).await, keys("fence"));
    // Read again, it is told again, of the client's own write too.
    let _: String = redis_rs::query(&mut tracker, &["GET", "read"]).await;
    let _: () = redis_rs::query(&mut tracker, &["SET", "read", "mine"]).await;
    assert_eq!(next_invalidation(&mut received).await, keys("read"));
    let _: String = redis_rs::query(&mut tracker, &["GET", "read"]).await;
    let _: () = redis_rs::query(&mut writer, &["FLUSHDB"]).await;
    assert_eq!(next_invalidation(&mut received).await, vec![redis::Value::Nil]);
}

/// FLUSHALL tells a tracking client once (one null), as Redis's flush does, however many
/// databases it empties (it told once per database). The fence: a key read after the flush and
/// written then is told next; a second null, queued with the first, would come before it.
#[tokio::test]
async fn flushall_tells_a_tracking_client_once() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb", "--resp-databases", "1=second,2=third"]).await;
    let (pushes, mut received) = tokio::sync::mpsc::unbounded_channel();
    let mut tracker = redis_rs::open_with_pushes(&redis_rs::client(&gateway, "?protocol=resp3"), pushes).await;
    let mut writer = redis_rs::connect(&gateway).await;
    let _: () = redis_rs::query(&mut writer, &["SET", "read", "1"]).await;
    let _: () = redis_rs::query(&mut tracker, &["CLIENT", "TRACKING", "ON"]).await;
    let _: String = redis_rs::query(&mut tracker, &["GET", "read"]).await;
    let _: () = redis_rs::query(&mut writer, &["FLUSHALL"]).await;
    assert_eq!(next_invalidation(&mut received).await, vec![redis::Value::Nil]);
    let fence: Option<String> = redis_rs::query(&mut tracker, &["GET", "fence"]).await;
    assert_eq!(fence, None);
    let _: () = redis_rs::query(&mut writer, &["SET", "fence", "1"]).await;
    assert_eq!(
        next_invalidation(&mut received).await,
        vec![redis::Value::Array(vec![redis::Value::BulkString(b"fence".to_vec())])]
    );
}

/// The RESP2 redirect mode (a subscriber of `__redis__:invalidate` gets the invalidations of
/// the client that redirects to it), BCAST with prefixes, NOLOOP in both modes, and OPTIN /
/// OPTOUT with CLIENT CACHING, as Redis's unit/tracking drives them.
#[tokio::test]
async fn redirect_bcast_noloop_and_optin_work_as_in_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let addr = gateway.resp_addr();
    let mut redirection = RawResp::connect(addr).await;
    let Value::Int(redirect) = redirection.command(&["CLIENT", "ID"]).await else {
        panic!()
    };
    let redirect = redirect.to_string();
    redirection.command(&["SUBSCRIBE", "__redis__:invalidate"]).await;
    let mut tracker = RawResp::connect(addr).await;
    let mut other = RawResp::connect(addr).await;

    // Default mode: the key read, not the key only written.
    assert_eq!(
        tracker
            .command(&["CLIENT", "TRACKING", "on", "REDIRECT", &redirect])
            .await,
        ok()
    );
    assert_eq!(
        tracker.command(&["CLIENT", "GETREDIR"]).await,
        Value::Int(redirect.parse().unwrap())
    );
    tracker.command(&["SET", "a", "1"]).await;
    tracker.command(&["SET", "b", "1"]).await;
    tracker.command(&["GET", "a"]).await;
    tracker.command(&["INCR", "b"]).await;
    tracker.command(&["INCR", "a"]).await;
    assert_eq!(redirected(next_push(&mut redirection).await), ["a"]);
    assert_eq!(tracker.command(&["CLIENT", "TRACKING", "off"]).await, ok());

    // BCAST with prefixes: every changed key under them, one message per prefix.
    tracker
        .command(&[
            "CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", &redirect, "PREFIX", "a:", "PREFIX", "b:",
        ])
        .await;
    tracker.command(&["MULTI"]).await;
    for key in ["a:1", "a:2", "b:1", "b:2", "c:1"] {
        tracker.command(&["INCR", key]).await;
    }
    tracker.command(&["EXEC"]).await;
    let mut keys = redirected(next_push(&mut redirection).await);
    keys.extend(redirected(next_push(&mut redirection).await));
    keys.sort();
    assert_eq!(keys, ["a:1", "a:2", "b:1", "b:2"]);
    // Adding a prefix keeps the others.
    tracker
        .command(&[
            "CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", &redirect, "PREFIX", "c:",
        ])
        .await;
    let Value::Map(info) = tracker.command(&["HELLO", "3"]).await else {
        panic!()
    };
    assert!(info.contains(&(bulk("proto"), Value::Int(3))));
    assert_eq!(
        tracker.command(&["CLIENT", "TRACKINGINFO"]).await,
        Value::Map(vec![
            (bulk("flags"), Value::Array(vec![bulk("on"), bulk("bcast")])),
            (bulk("redirect"), Value::Int(redirect.parse().unwrap())),
            (bulk("prefixes"), Value::Array(vec![bulk("a:"), bulk("b:"), bulk("c:")])),
        ])
    );
    tracker.command(&["HELLO", "2"]).await;
    other.command(&["INCR", "c:1234"]).await;
    assert_eq!(redirected(next_push(&mut redirection).await), ["c:1234"]);

    // NOLOOP: the client's own writes are not told, in the default mode and in BCAST.
    tracker.command(&["CLIENT", "TRACKING", "off"]).await;
    tracker
        .command(&["CLIENT", "TRACKING", "on", "REDIRECT", &redirect, "NOLOOP"])
        .await;
    tracker.command(&["MGET", "otherkey1", "loopkey", "otherkey2"]).await;
    other.command(&["SET", "otherkey1", "1"]).await;
    tracker.command(&["SET", "loopkey", "1"]).await;
    other.command(&["SET", "otherkey2", "1"]).await;
    assert_eq!(redirected(next_push(&mut redirection).await), ["otherkey1"]);
    assert_eq!(redirected(next_push(&mut redirection).await), ["otherkey2"]);
    tracker.command(&["CLIENT", "TRACKING", "off"]).await;
    tracker
        .command(&["CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", &redirect, "NOLOOP"])
        .await;
    other.command(&["SET", "otherkey1", "1"]).await;
    tracker.command(&["SET", "loopkey", "1"]).await;
    other.command(&["SET", "otherkey2", "1"]).await;
    assert_eq!(redirected(next_push(&mut redirection).await), ["otherkey1"]);
    assert_eq!(redirected(next_push(&mut redirection).await), ["otherkey2"]);

    // OPTIN: only the reads after CLIENT CACHING yes; OPTOUT: all but those after CACHING no.
    tracker.command(&["CLIENT", "TRACKING", "off"]).await;
    tracker
        .command(&["CLIENT", "TRACKING", "on", "OPTIN", "REDIRECT", &redirect])
        .await;
    tracker.command(&["GET", "notcached"]).await;
    assert_eq!(tracker.command(&["CLIENT", "CACHING", "yes"]).await, ok());
    tracker.command(&["GET", "cached"]).await;
    other.command(&["SET", "notcached", "1"]).await;
    other.command(&["SET", "cached", "1"]).await;
    assert_eq!(redirected(next_push(&mut redirection).await), ["cached"]);
    tracker.command(&["CLIENT", "TRACKING", "off"]).await;
    tracker
        .command(&["CLIENT", "TRACKING", "on", "OPTOUT", "REDIRECT", &redirect])
        .await;
    assert_eq!(tracker.command(&["CLIENT", "CACHING", "no"]).await, ok());
    tracker.command(&["GET", "notcached"]).await;
    tracker.command(&["GET", "cached"]).await;
    other.command(&["SET", "notcached", "2"]).await;
    other.command(&["SET", "cached", "2"]).await;
    assert_eq!(redirected(next_push(&mut redirection).await), ["cached"]);
}

/// What the report commands answer and the options' errors, compared with redis-server.
#[tokio::test]
async fn tracking_reports_and_errors_answer_as_redis_does() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            "CLIENT TRACKINGINFO",
            "CLIENT GETREDIR",
            "CLIENT CACHING yes",
            "CLIENT TRACKING off",
            "CLIENT TRACKING maybe",
            "CLIENT TRACKING on NOSUCH",
            "CLIENT TRACKING on PREFIX a",
            "CLIENT TRACKING on BCAST OPTIN",
            "CLIENT TRACKING on OPTIN OPTOUT",
            "CLIENT TRACKING on REDIRECT notanumber",
            "CLIENT TRACKING on REDIRECT 999999",
            "CLIENT TRACKING on BCAST PREFIX foo PREFIX foobar",
            "CLIENT TRACKING on OPTIN NOLOOP",
            "CLIENT TRACKINGINFO",
            "CLIENT GETREDIR",
            "CLIENT CACHING no",
            "CLIENT CACHING maybe",
            "CLIENT CACHING yes",
            "CLIENT TRACKINGINFO",
            "CLIENT TRACKING on OPTOUT",
            "CLIENT TRACKING on BCAST",
            "CLIENT TRACKING off",
            "CLIENT TRACKING on OPTOUT",
            "CLIENT CACHING no",
            "CLIENT TRACKINGINFO",
            "CLIENT TRACKING off",
            "CLIENT TRACKING on BCAST PREFIX abc",
            "CLIENT TRACKING on BCAST PREFIX ab",
            "CLIENT TRACKINGINFO",
            "CLIENT TRACKING off",
            "CONFIG SET tracking-table-max-keys notanumber",
            "CONFIG SET tracking-table-max-keys 10",
            "CONFIG GET tracking-table-max-keys",
        ],
    )
    .await;
}

/// `tracking-table-max-keys`: past it, keys are dropped from the table and their readers
/// told, as if they changed; a key dropped so is not told again.
#[tokio::test]
async fn the_tracking_table_is_bounded() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut tracker = RawResp::connect(gateway.resp_addr()).await;
    tracker.command(&["HELLO", "3"]).await;
    assert_eq!(
        tracker
            .command(&["CONFIG", "SET", "tracking-table-max-keys", "2"])
            .await,
        ok()
    );
    tracker.command(&["CLIENT", "TRACKING", "on"]).await;
    assert_eq!(
        tracker.command(&["MGET", "k1", "k2", "k3"]).await,
        Value::Array(vec![Value::Nil, Value::Nil, Value::Nil])
    );
    let Value::Push(push) = next_push(&mut tracker).await else {
        panic!()
    };
    let Value::Array(dropped) = &push[1] else { panic!() };
    assert_eq!(dropped.len(), 1);
    let dropped = dropped[0].clone();
    let kept: Vec<&str> = ["k1", "k2", "k3"]
        .into_iter()
        .filter(|key| bulk(key) != dropped)
        .collect();
    // The dropped key's change is not told; the kept keys' are.
    let mut other = RawResp::connect(gateway.resp_addr()).await;
    let Value::Bulk(dropped) = dropped else { panic!() };
    other
        .command(&["SET", std::str::from_utf8(&dropped).unwrap(), "1"])
        .await;
    for key in &kept {
        other.command(&["SET", key, "1"]).await;
    }
    for key in &kept {
        assert_eq!(next_push(&mut tracker).await, invalidate(&[key]));
    }
    assert_eq!(
        tracker.command(&["CONFIG", "GET", "tracking-table-max-keys"]).await,
        Value::Map(vec![(bulk("tracking-table-max-keys"), bulk("2"))])
    );
}

/// Two gateways on one database: a key read through gateway A is invalidated when a client of
/// gateway B writes it (a command, a transaction, a script), a FLUSHDB on B invalidates
/// everything on A, and a tracking client whose REDIRECT disconnected is told it is broken.
#[tokio::test]
async fn invalidations_reach_the_tracking_clients_of_every_gateway() {
    let url = common::fresh_database().await;
    let args = ["--resp-addr", "127.0.0.1:0", "--resp-flushdb"];
    let a = TestGateway::with_args(url.clone(), &args).await;
    let b = TestGateway::with_args(url, &args).await;
    let mut writer = RawResp::connect(b.resp_addr()).await;
    // Written before tracking starts (see the first test).
    writer.command(&["SET", "k", "1"]).await;
    writer.command(&["HSET", "h", "f", "v"]).await;
    let mut tracker = RawResp::connect(a.resp_addr()).await;
    tracker.command(&["HELLO", "3"]).await;
    assert_eq!(tracker.command(&["CLIENT", "TRACKING", "on"]).await, ok());
    assert_eq!(tracker.command(&["GET", "k"]).await, bulk("1"));
    assert_eq!(tracker.command(&["HGET", "h", "f"]).await, bulk("v"));
    writer.command(&["SET", "k", "2"]).await;
    assert_eq!(next_push(&mut tracker).await, invalidate(&["k"]));
    writer.command(&["HDEL", "h", "f"]).await;
    assert_eq!(next_push(&mut tracker).await, invalidate(&["h"]));
    // A transaction and a script on B.
    assert_eq!(
        tracker.command(&["MGET", "k", "t"]).await,
        Value::Array(vec![bulk("2"), Value::Nil])
    );
    writer.command(&["MULTI"]).await;
    writer.command(&["INCR", "k"]).await;
    writer.command(&["EXEC"]).await;
    assert_eq!(next_push(&mut tracker).await, invalidate(&["k"]));
    writer
        .command(&["EVAL", "return redis.call('SET', KEYS[1], 'x')", "1", "t"])
        .await;
    assert_eq!(next_push(&mut tracker).await, invalidate(&["t"]));
    writer.command(&["FLUSHDB"]).await;
    assert_eq!(
        next_push(&mut tracker).await,
        Value::Push(vec![bulk("invalidate"), Value::Nil])
    );

    // A redirect to a client that is gone: a RESP3 client is told, and TRACKINGINFO says so.
    let mut redirection = RawResp::connect(a.resp_addr()).await;
    let Value::Int(redirect) = redirection.command(&["CLIENT", "ID"]).await else {
        panic!()
    };
    redirection.command(&["SUBSCRIBE", "__redis__:invalidate"]).await;
    tracker
        .command(&["CLIENT", "TRACKING", "on", "REDIRECT", &redirect.to_string()])
        .await;
    tracker.command(&["GET", "k"]).await;
    drop(redirection);
    writer.command(&["SET", "k", "3"]).await;
    assert_eq!(
        next_push(&mut tracker).await,
        Value::Push(vec![bulk("tracking-redir-broken"), Value::Int(redirect)])
    );
    let Value::Map(info) = tracker.command(&["CLIENT", "TRACKINGINFO"]).await else {
        panic!()
    };
    assert_eq!(
        info[0],
        (bulk("flags"), Value::Array(vec![bulk("on"), bulk("broken_redirect")]))
    );
}

/// A script remembers its declared keys for its tracking client once it calls a read-only
/// command, as Redis 7.0 does (EVAL, EVAL_RO and FCALL alike): none when it only writes or
/// calls no read command, and not the keys its calls name beyond them.
#[tokio::test]
async fn a_script_remembers_its_declared_keys_once_it_reads() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut writer = RawResp::connect(gateway.resp_addr()).await;
    // Written before tracking starts (see the first test).
    assert_eq!(
        writer
            .command(&["MSET", "key1", "1", "key2", "1", "key3", "1", "key4", "1", "key5", "1"])
            .await,
        ok()
    );
    let mut tracker = RawResp::connect(gateway.resp_addr()).await;
    tracker.command(&["HELLO", "3"]).await;
    assert_eq!(tracker.command(&["CLIENT", "TRACKING", "on"]).await, ok());
    // Writes key3 only: nothing is remembered.
    assert_eq!(
        tracker
            .command(&["EVAL", "redis.call('set', 'key3', 'bar')", "2", "key1", "key2"])
            .await,
        Value::Nil
    );
    assert_eq!(writer.command(&["MSET", "key1", "2", "key2", "2"]).await, ok());
    // Reads key3, declares key1 and key2: the declared keys are remembered, key3 is not.
    assert_eq!(
        tracker
            .command(&["EVAL", "return redis.call('get', 'key3')", "2", "key1", "key2"])
            .await,
        bulk("bar")
    );
    // Had key3 been remembered (or the first script's keys), its invalidation would come first.
    assert_eq!(writer.command(&["SET", "key3", "2"]).await, ok());
    assert_eq!(writer.command(&["MSET", "key2", "3", "key1", "3"]).await, ok());
    assert_eq!(invalidated(&mut tracker, 2).await, ["key1", "key2"]);
    // EVAL_RO calling no read command remembers nothing; a function that reads remembers its
    // declared key, not the one it reads.
    assert_eq!(
        tracker
            .command(&["EVAL_RO", "return redis.call('ping')", "2", "key4", "key5"])
            .await,
        Value::Simple("PONG".into())
    );
    let library = "#!lua name=reads\nredis.register_function{function_name='read5', callback=function(keys) return redis.call('get', 'key5') end, flags={'no-writes'}}";
    tracker.command(&["FUNCTION", "LOAD", "REPLACE", library]).await;
    assert_eq!(tracker.command(&["FCALL_RO", "read5", "1", "key4"]).await, bulk("1"));
    assert_eq!(writer.command(&["SET", "key5", "2"]).await, ok());
    assert_eq!(writer.command(&["SET", "key4", "2"]).await, ok());
    assert_eq!(next_push(&mut tracker).await, invalidate(&["key4"]));
}

/// The keys of the next invalidation pushes, until `count` keys came (one push or several),
/// sorted.
async fn invalidated(client: &mut RawResp, count: usize) -> Vec<String> {
    let mut keys = Vec::new();
    while keys.len() < count {
        let Value::Push(parts) = next_push(client).await else {
            panic!("an invalidation push")
        };
        let [kind, Value::Array(named)] = &parts[..] else {
            panic!("an invalidation push: {parts:?}")
        };
        assert_eq!(*kind, bulk("invalidate"));
        for key in named {
            let Value::Bulk(key) = key else {
                panic!("a key: {key:?}")
            };
            keys.push(String::from_utf8_lossy(key).into_owned());
        }
    }
    keys.sort();
    keys
}

/// redis-py's client-side cache (`cache_config`, RESP3): a value read once is served from the
/// cache, and a write through another client (here on another gateway of the database)
/// invalidates it, so a later read sees the new value. (redis-py turns its cache on only for
/// servers that report 7.4 or later: the script lowers that bound, pgvs3 reporting 7.0.15.)
#[tokio::test]
async fn redis_py_client_side_cache_sees_other_clients_writes() {
    let url = common::fresh_database().await;
    let args = ["--resp-addr", "127.0.0.1:0"];
    let a = TestGateway::with_args(url.clone(), &args).await;
    let b = TestGateway::with_args(url, &args).await;
    let script = format!(
        r#"
import time
import redis
from redis.cache import CacheConfig
from redis.connection import CacheProxyConnection
# redis-py caches only for servers that say they are Redis 7.4 or later; pgvs3 says 7.0.15.
CacheProxyConnection.MIN_ALLOWED_VERSION = "7.0.0"
cached = redis.Redis(host="{a_host}", port={a_port}, protocol=3, cache_config=CacheConfig())
writer = redis.Redis(host="{b_host}", port={b_port})
writer.set("k", "v1")
assert cached.get("k") == b"v1"
cache = cached.get_cache()
assert cache.size == 1, cache.size
# Served from the cache: a change the server was not asked about is not seen.
assert cached.get("k") == b"v1"
writer.set("k", "v2")
# The invalidation comes by push: redis-py reads it before the next cached read.
for _ in range(200):
    value = cached.get("k")
    if value == b"v2":
        break
    time.sleep(0.05)
assert value == b"v2", value
print("done")
"#,
        a_host = a.resp_addr().ip(),
        a_port = a.resp_addr().port(),
        b_host = b.resp_addr().ip(),
        b_port = b.resp_addr().port(),
    );
    a.python_passes(&script, "done").await;
}

/// An expired key is invalidated when the reaper deletes it (its statement sends the keys of a
/// tracked keyspace, whatever its notifications setting), and no `expired` event is published
/// for a keyspace whose setting asks for none.
#[tokio::test]
async fn an_expired_key_is_invalidated_by_the_reaper() {
    let gateway = TestGateway::with_resp(&["--maintenance-interval", "200ms"]).await;
    let mut writer = RawResp::connect(gateway.resp_addr()).await;
    writer.command(&["SET", "short", "v", "PX", "5000"]).await;
    writer.command(&["SET", "kept", "v"]).await;
    let mut subscriber = RawResp::connect(gateway.resp_addr()).await;
    subscriber.command(&["PSUBSCRIBE", "*"]).await;
    let mut tracker = RawResp::connect(gateway.resp_addr()).await;
    tracker.command(&["HELLO", "3"]).await;
    tracker.command(&["CLIENT", "TRACKING", "on"]).await;
    assert_eq!(
        tracker.command(&["MGET", "short", "kept"]).await,
        Value::Array(vec![bulk("v"), bulk("v")])
    );
    assert_eq!(next_push(&mut tracker).await, invalidate(&["short"]));
    // The subscriber got nothing of it: the next message it gets is this one.
    writer.command(&["PUBLISH", "after", "x"]).await;
    assert_eq!(
        next_push(&mut subscriber).await,
        Value::Array(vec![bulk("pmessage"), bulk("*"), bulk("after"), bulk("x")])
    );
}

/// A RESP3 client that only said HELLO 3 gets the invalidations redirected to it as they come,
/// with CLIENT REPLY OFF too (pushes are not replies), as Redis's unit/tracking `RESP3 based
/// basic redirect invalidation with client reply off` checks. (Its inbox opened only with a
/// subscription or its own tracking: the push waited for its next command.)
#[tokio::test]
async fn a_resp3_redirect_target_gets_pushes_with_replies_off() {
    let gateway = TestGateway::with_resp(&[]).await;
    let addr = gateway.resp_addr();
    let mut target = RawResp::connect(addr).await;
    target.command(&["HELLO", "3"]).await;
    let Value::Int(target_id) = target.command(&["CLIENT", "ID"]).await else {
        panic!("a client id")
    };
    let mut tracker = RawResp::connect(addr).await;
    let mut writer = RawResp::connect(addr).await;
    assert_eq!(
        tracker
            .command(&["CLIENT", "TRACKING", "on", "REDIRECT", &target_id.to_string()])
            .await,
        ok()
    );
    assert_eq!(writer.command(&["SET", "foo", "bar"]).await, ok());
    assert_eq!(tracker.command(&["GET", "foo"]).await, bulk("bar"));
    // Sent without waiting for an answer: with replies off there is none.
    target.send(b"*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$3\r\nOFF\r\n").await;
    assert_eq!(writer.command(&["SET", "foo", "bar2"]).await, ok());
    assert_eq!(next_push(&mut target).await, invalidate(&["foo"]));
    // Nothing else was pushed or answered meanwhile: the next frame is CLIENT REPLY ON's.
    assert_eq!(target.command(&["CLIENT", "REPLY", "ON"]).await, ok());
    assert_eq!(target.command(&["PING"]).await, Value::Simple("PONG".into()));
}

/// INFO tells the tracking table as Redis's unit/tracking `Tracking info is correct` reads it:
/// tracking clients (clients section), remembered keys, their items and BCAST prefixes (stats).
#[tokio::test]
async fn info_counts_the_tracking_table() {
    let gateway = TestGateway::with_resp(&[]).await;
    let addr = gateway.resp_addr();
    let mut writer = RawResp::connect(addr).await;
    assert_eq!(writer.command(&["MSET", "key1", "1", "key2", "2"]).await, ok());
    let mut reader = RawResp::connect(addr).await;
    reader.command(&["HELLO", "3"]).await;
    assert_eq!(reader.command(&["CLIENT", "TRACKING", "on"]).await, ok());
    reader.command(&["GET", "key1"]).await;
    reader.command(&["GET", "key2"]).await;
    let mut broadcast = RawResp::connect(addr).await;
    broadcast.command(&["HELLO", "3"]).await;
    assert_eq!(
        broadcast
            .command(&["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "prefix:"])
            .await,
        ok()
    );
    let field = |info: &str, name: &str| -> String {
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("INFO has {name}: {info}"))
            .to_owned()
    };
    let Value::Bulk(info) = writer.command(&["INFO"]).await else {
        panic!("INFO's text")
    };
    let info = String::from_utf8(info).unwrap();
    assert_eq!(field(&info, "tracking_clients"), "2");
    assert_eq!(field(&info, "tracking_total_keys"), "2");
    assert_eq!(field(&info, "tracking_total_items"), "2");
    assert_eq!(field(&info, "tracking_total_prefixes"), "1");
    // A changed key is told and forgotten.
    assert_eq!(writer.command(&["SET", "key1", "3"]).await, ok());
    assert_eq!(next_push(&mut reader).await, invalidate(&["key1"]));
    let Value::Bulk(info) = writer.command(&["INFO", "stats"]).await else {
        panic!("INFO's text")
    };
    let info = String::from_utf8(info).unwrap();
    assert_eq!(field(&info, "tracking_total_keys"), "1");
}

/// Turning tracking on creates the keyspace's S3 watch (a trigger on its namespace's objects
/// table), which waits for a writer holding that table. The wait leaves the LISTEN connection
/// alone: its liveness probe keeps being answered, so it is not given up and opened again (which
/// lost the messages published meanwhile, failed the CLIENT TRACKING ON, and issued the DDL again
/// on the new connection to be given up once more, for as long as the writer held the table).
/// Once the table is free the mark takes effect: S3 writes of a key read are invalidated.
#[tokio::test]
async fn a_tracking_mark_waiting_for_a_writer_leaves_the_listen_connection_alone() {
    const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
    let gateway = TestGateway::with_resp(&["--pg-probe-interval", "250ms", "--pg-probe-timeout", "1s"]).await;
    let mut subscriber = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        subscriber.command(&["SUBSCRIBE", "ch"]).await,
        Value::Array(vec![bulk("subscribe"), bulk("ch"), Value::Int(1)])
    );
    let mut other = RawResp::connect(gateway.resp_addr()).await;
    let (writer, watch) = (gateway.sql().await, gateway.sql().await);
    let namespace: String = watch
        .query_one("SELECT namespace FROM pgvs3.buckets WHERE name = 'resp'", &[])
        .await
        .unwrap()
        .get("namespace");
    writer
        .batch_execute(&format!("BEGIN; LOCK TABLE {namespace}.objects IN ROW EXCLUSIVE MODE"))
        .await
        .unwrap();
    let mut tracker = RawResp::connect(gateway.resp_addr()).await;
    tracker.command(&["HELLO", "3"]).await;
    tracker
        .send(&common::resp::encode(&[b"CLIENT", b"TRACKING", b"ON"]))
        .await;
    common::eventually(
        Duration::from_secs(10),
        "the tracking mark waiting on the lock",
        || async {
            let waiting = common::query_count(
                &watch,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND query LIKE '%resp_track%'",
                &[],
            )
            .await;
            (waiting == 1).then_some(())
        },
    )
    .await;
    // The scenario is a wait past the probe's timeout: CLIENT TRACKING ON still waits for the
    // mark (it failed with the connection given up).
    let answered = tokio::time::timeout(3 * PROBE_TIMEOUT, tracker.reply()).await;
    assert!(
        answered.is_err(),
        "CLIENT TRACKING ON answered while its mark waits: {answered:?}"
    );
    // A message published now is delivered (the time limit only turns a loss into a failure).
    assert_eq!(other.command(&["PUBLISH", "ch", "during"]).await, Value::Int(1));
    let delivered = tokio::time::timeout(Duration::from_secs(10), subscriber.reply())
        .await
        .expect("the message published while the mark waits is delivered");
    assert_eq!(
        delivered,
        Some(Value::Array(vec![bulk("message"), bulk("ch"), bulk("during")]))
    );
    assert_eq!(common::lock_waiters(&watch).await, 1, "the mark still waits");

    writer.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(tracker.reply().await, Some(ok()));
    assert_eq!(tracker.command(&["GET", "k"]).await, Value::Nil);
    gateway
        .client
        .put_object()
        .bucket("resp")
        .key("k")
        .body(aws_sdk_s3::primitives::ByteStream::from_static(b"v"))
        .send()
        .await
        .unwrap();
    assert_eq!(next_push(&mut tracker).await, invalidate(&["k"]));
}
