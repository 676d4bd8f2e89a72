//! RESP pub/sub over the wire: SUBSCRIBE and its kin with Redis's replies (RESP2 and RESP3
//! push frames), subscribe-mode refusals, messages across two gateways of one database (large
//! ones too), pattern subscriptions, PUBSUB introspection, a slow subscriber cut off, and the
//! typed-keyspace fast path for strings staying correct across gateways.

use crate::redis_rs::connect;
use pgvs3_testkit as common;

use std::time::Duration;

use common::TestGateway;
use common::resp::{RawResp, Value, encode};
use futures::StreamExt;

fn bulk(text: &str) -> Value {
    Value::bulk(text)
}

fn frame(kind: &str, channel: &str, count: i64) -> Value {
    Value::Array(vec![bulk(kind), bulk(channel), Value::Int(count)])
}

async fn two_gateways(extra: &[&str]) -> (TestGateway, TestGateway) {
    let url = common::fresh_database().await;
    let mut args = vec!["--resp-addr", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let first = TestGateway::with_args(url.clone(), &args).await;
    let second = TestGateway::with_args(url, &args).await;
    (first, second)
}

/// Publishes until the subscriber (on any gateway) got one: a subscription made on another
/// gateway is live at once, but the first publish may race the LISTEN connection's start.
async fn publish_until_received(
    publisher: &mut RawResp,
    subscriber: &mut RawResp,
    channel: &str,
    message: &str,
) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        publisher.command(&["PUBLISH", channel, message]).await;
        if let Ok(Some(got)) = tokio::time::timeout(Duration::from_millis(500), subscriber.reply()).await {
            // Repeats of this publish that were under way: left for the caller to skip.
            return got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "a published message arrives within 20 s"
        );
    }
}

/// Reads until a reply other than `skip` comes.
async fn next_other(subscriber: &mut RawResp, skip: &Value) -> Value {
    loop {
        let got = subscriber.reply().await.expect("a message");
        if &got != skip {
            return got;
        }
    }
}

#[tokio::test]
async fn messages_reach_subscribers_of_every_gateway() {
    let (first, second) = two_gateways(&[]).await;
    let mut subscriber = RawResp::connect(first.resp_addr()).await;
    assert_eq!(
        subscriber.command(&["SUBSCRIBE", "news", "sport"]).await,
        frame("subscribe", "news", 1)
    );
    assert_eq!(subscriber.reply().await.unwrap(), frame("subscribe", "sport", 2));
    let mut publisher = RawResp::connect(second.resp_addr()).await;
    let message = publish_until_received(&mut publisher, &mut subscriber, "news", "hello").await;
    assert_eq!(
        message,
        Value::Array(vec![bulk("message"), bulk("news"), bulk("hello")])
    );
    // Later ones, in order, and none for a channel nobody subscribed to.
    for n in 0..20 {
        publisher.command(&["PUBLISH", "weather", "rain"]).await;
        publisher.command(&["PUBLISH", "sport", &format!("goal {n}")]).await;
    }
    for n in 0..20 {
        let got = if n == 0 {
            next_other(&mut subscriber, &message).await
        } else {
            subscriber.reply().await.unwrap()
        };
        assert_eq!(
            got,
            Value::Array(vec![bulk("message"), bulk("sport"), bulk(&format!("goal {n}"))])
        );
    }

    // PUBLISH counts the subscribers of the gateway that served it.
    let mut local = RawResp::connect(first.resp_addr()).await;
    assert_eq!(local.command(&["PUBLISH", "news", "local"]).await, Value::Int(1));
    assert_eq!(publisher.command(&["PUBLISH", "news", "remote"]).await, Value::Int(0));
    assert_eq!(
        subscriber.reply().await.unwrap(),
        Value::Array(vec![bulk("message"), bulk("news"), bulk("local")])
    );
    assert_eq!(
        subscriber.reply().await.unwrap(),
        Value::Array(vec![bulk("message"), bulk("news"), bulk("remote")])
    );
    assert_eq!(
        local.command(&["PUBSUB", "NUMSUB", "news", "nothing"]).await,
        Value::Array(vec![bulk("news"), Value::Int(1), bulk("nothing"), Value::Int(0)])
    );
    assert_eq!(
        local.command(&["PUBSUB", "CHANNELS"]).await,
        Value::Array(vec![bulk("news"), bulk("sport")])
    );
    assert_eq!(
        local.command(&["PUBSUB", "CHANNELS", "n*"]).await,
        Value::Array(vec![bulk("news")])
    );
    assert_eq!(local.command(&["PUBSUB", "NUMPAT"]).await, Value::Int(0));

    // A 100 KiB message (beyond NOTIFY's 8,000 bytes) arrives whole, between small ones.
    let large: String = (0..100 * 1024).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    publisher.command(&["PUBLISH", "news", "before"]).await;
    publisher.command(&["PUBLISH", "news", &large]).await;
    publisher.command(&["PUBLISH", "news", "after"]).await;
    for expected in ["before", large.as_str(), "after"] {
        assert_eq!(
            subscriber.reply().await.unwrap(),
            Value::Array(vec![bulk("message"), bulk("news"), bulk(expected)])
        );
    }
}

#[tokio::test]
async fn subscribe_mode_follows_redis() {
    let gateway = TestGateway::with_args(common::fresh_database().await, &["--resp-addr", "127.0.0.1:0"]).await;
    let mut client = RawResp::connect(gateway.resp_addr()).await;
    // Unsubscribing from nothing.
    assert_eq!(
        client.command(&["UNSUBSCRIBE"]).await,
        Value::Array(vec![bulk("unsubscribe"), Value::Nil, Value::Int(0)])
    );
    assert_eq!(
        client.command(&["PUNSUBSCRIBE"]).await,
        Value::Array(vec![bulk("punsubscribe"), Value::Nil, Value::Int(0)])
    );
    assert_eq!(client.command(&["SUBSCRIBE", "a"]).await, frame("subscribe", "a", 1));
    assert_eq!(client.command(&["SUBSCRIBE", "a"]).await, frame("subscribe", "a", 1));
    assert_eq!(
        client.command(&["PSUBSCRIBE", "a*"]).await,
        frame("psubscribe", "a*", 2)
    );
    // In RESP2 subscribe mode only the subscription commands, PING, QUIT and RESET run.
    assert_eq!(
        client.command(&["GET", "k"]).await,
        Value::Error(
            "ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
                .into()
        )
    );
    assert_eq!(
        client.command(&["PING"]).await,
        Value::Array(vec![bulk("pong"), bulk("")])
    );
    assert_eq!(
        client.command(&["PING", "hi"]).await,
        Value::Array(vec![bulk("pong"), bulk("hi")])
    );
    assert_eq!(
        client.command(&["UNSUBSCRIBE", "b"]).await,
        frame("unsubscribe", "b", 2)
    );
    assert_eq!(client.command(&["UNSUBSCRIBE"]).await, frame("unsubscribe", "a", 1));
    assert_eq!(
        client.command(&["PUNSUBSCRIBE", "a*"]).await,
        frame("punsubscribe", "a*", 0)
    );
    // Out of subscribe mode: commands run again.
    assert_eq!(client.command(&["GET", "k"]).await, Value::Nil);

    // RESET leaves subscribe mode too; a message after it is not delivered.
    assert_eq!(client.command(&["SUBSCRIBE", "c"]).await, frame("subscribe", "c", 1));
    assert_eq!(client.command(&["RESET"]).await, Value::Simple("RESET".into()));
    assert_eq!(client.command(&["PUBLISH", "c", "x"]).await, Value::Int(0));
    assert_eq!(client.command(&["PING"]).await, Value::Simple("PONG".into()));

    // Bounds: pattern length.
    let long = "p".repeat(2000);
    assert_eq!(
        client.command(&["PSUBSCRIBE", &long]).await,
        Value::Error("ERR pattern longer than 1024 bytes (--resp-max-pattern)".into())
    );
    assert_eq!(
        client.command(&["PUBSUB", "NOPE"]).await,
        Value::Error("ERR unknown subcommand or wrong number of arguments for 'NOPE'. Try PUBSUB HELP.".into())
    );
    assert_eq!(
        client.command(&["PUBLISH", "c"]).await,
        Value::Error("ERR wrong number of arguments for 'publish' command".into())
    );

    // RESP3: subscription replies and messages are push frames, and every command runs.
    let mut resp3 = RawResp::connect(gateway.resp_addr()).await;
    assert!(matches!(resp3.command(&["HELLO", "3"]).await, Value::Map(_)));
    assert_eq!(
        resp3.command(&["SUBSCRIBE", "r3"]).await,
        Value::Push(vec![bulk("subscribe"), bulk("r3"), Value::Int(1)])
    );
    assert_eq!(resp3.command(&["GET", "k"]).await, Value::Nil);
    assert_eq!(resp3.command(&["PING"]).await, Value::Simple("PONG".into()));
    let message = publish_until_received(&mut client, &mut resp3, "r3", "pushed").await;
    assert_eq!(message, Value::Push(vec![bulk("message"), bulk("r3"), bulk("pushed")]));
    // Repeats of that publish cannot come after this reply: PUBLISH answers once sent.
    assert_eq!(client.command(&["PUBLISH", "r3", "last"]).await, Value::Int(1));
    assert_eq!(
        next_other(&mut resp3, &message).await,
        Value::Push(vec![bulk("message"), bulk("r3"), bulk("last")])
    );
    // Shard channels are apart from plain ones.
    assert_eq!(
        resp3.command(&["SSUBSCRIBE", "s1"]).await,
        Value::Push(vec![bulk("ssubscribe"), bulk("s1"), Value::Int(1)])
    );
    assert_eq!(client.command(&["SPUBLISH", "s1", "sharded"]).await, Value::Int(1));
    assert_eq!(
        resp3.reply().await.unwrap(),
        Value::Push(vec![bulk("smessage"), bulk("s1"), bulk("sharded")])
    );
}

#[tokio::test]
async fn pattern_subscriptions_with_redis_rs() {
    let (first, second) = two_gateways(&[]).await;
    let client = redis::Client::open(format!("redis://{}/", first.resp_addr())).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.psubscribe("orders.*").await.unwrap();
    pubsub.subscribe("orders.eu").await.unwrap();
    let mut publisher = connect(&second).await;
    let mut messages = pubsub.on_message();
    // Until the first arrives (the other gateway's LISTEN connection may still be starting).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let first_message = loop {
        let _: i64 = redis::cmd("PUBLISH")
            .arg("orders.us")
            .arg("o-1")
            .query_async(&mut publisher)
            .await
            .unwrap();
        if let Ok(Some(message)) = tokio::time::timeout(Duration::from_millis(500), messages.next()).await {
            break message;
        }
        assert!(tokio::time::Instant::now() < deadline, "a message arrives within 20 s");
    };
    assert_eq!(first_message.get_channel_name(), "orders.us");
    assert_eq!(first_message.get_pattern::<String>().unwrap(), "orders.*");
    assert_eq!(first_message.get_payload_bytes(), b"o-1");
    // Drain repeats of the first publish, then one that matches both subscriptions.
    let _: i64 = redis::cmd("PUBLISH")
        .arg("orders.eu")
        .arg("o-2")
        .query_async(&mut publisher)
        .await
        .unwrap();
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .unwrap()
            .unwrap();
        if message.get_payload_bytes() == b"o-2" {
            kinds.push(message.from_pattern());
        }
    }
    kinds.sort();
    assert_eq!(kinds, [false, true], "one by channel, one by pattern");
}

#[tokio::test]
async fn a_subscriber_that_does_not_read_is_disconnected() {
    let _large = crate::LARGE_ALLOCATIONS.read().await;
    let gateway = TestGateway::with_args(
        common::fresh_database().await,
        &["--resp-addr", "127.0.0.1:0", "--resp-pubsub-output-limit", "1MiB"],
    )
    .await;
    let mut slow = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        slow.command(&["SUBSCRIBE", "firehose"]).await,
        frame("subscribe", "firehose", 1)
    );
    let mut publisher = connect(&gateway).await;
    let message = vec![b'x'; 64 * 1024];
    // The socket buffers take some megabytes; beyond them and the 1 MiB limit the gateway
    // closes the connection. Bounded: 4,000 messages of 64 KiB (250 MiB) at most.
    let mut published = 0;
    let closed = loop {
        let receivers: i64 = redis::cmd("PUBLISH")
            .arg("firehose")
            .arg(&message)
            .query_async(&mut publisher)
            .await
            .unwrap();
        published += 1;
        if receivers == 0 {
            break true;
        }
        if published >= 4000 {
            break false;
        }
    };
    assert!(
        closed,
        "the slow subscriber is still subscribed after {published} messages"
    );
    assert!(published > 10, "cut off after only {published} messages");
    // Its connection is closed: reading drains what was sent, then ends.
    let ended = tokio::time::timeout(Duration::from_secs(30), async { while slow.reply().await.is_some() {} }).await;
    assert!(ended.is_ok(), "the connection was closed");
}

#[tokio::test]
async fn string_writes_replace_typed_keys_made_on_another_gateway() {
    // Gateway A serves strings first (its namespace has no typed keys yet), then gateway B
    // makes the bucket's first typed keys: A's loads and blind SETs must see them.
    let (a, b) = two_gateways(&[]).await;
    let mut on_a = connect(&a).await;
    let mut on_b = connect(&b).await;
    let _: () = redis::cmd("SET")
        .arg("s")
        .arg("v")
        .query_async(&mut on_a)
        .await
        .unwrap();
    let got: Option<String> = redis::cmd("GET").arg("s").query_async(&mut on_a).await.unwrap();
    assert_eq!(got.as_deref(), Some("v"));
    let _: i64 = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("1")
        .query_async(&mut on_b)
        .await
        .unwrap();
    let _: i64 = redis::cmd("RPUSH")
        .arg("l")
        .arg("x")
        .query_async(&mut on_b)
        .await
        .unwrap();
    // A read on A sees the hash (WRONGTYPE), not a missing key.
    let wrong = redis::cmd("GET")
        .arg("h")
        .query_async::<Option<String>>(&mut on_a)
        .await
        .unwrap_err();
    assert!(wrong.to_string().contains("WRONGTYPE"), "{wrong}");
    let kind: String = redis::cmd("TYPE").arg("l").query_async(&mut on_a).await.unwrap();
    assert_eq!(kind, "list");
    // A blind SET on A replaces the hash: one key of that name, a string.
    let _: () = redis::cmd("SET")
        .arg("h")
        .arg("now a string")
        .query_async(&mut on_a)
        .await
        .unwrap();
    let kind: String = redis::cmd("TYPE").arg("h").query_async(&mut on_b).await.unwrap();
    assert_eq!(kind, "string");
    // DBSIZE counts objects and typed keys: a hash left behind the string would make it 4.
    let size: i64 = redis::cmd("DBSIZE").query_async(&mut on_b).await.unwrap();
    assert_eq!(size, 3, "s, h and l, each once");
    let fields = redis::cmd("HGET")
        .arg("h")
        .arg("f")
        .query_async::<Option<String>>(&mut on_b)
        .await;
    assert!(fields.unwrap_err().to_string().contains("WRONGTYPE"));
    let _: () = redis::cmd("DEL").arg("h").query_async(&mut on_b).await.unwrap();
    let exists: i64 = redis::cmd("EXISTS").arg("h").query_async(&mut on_a).await.unwrap();
    assert_eq!(exists, 0, "no typed key left behind the string");
    // And a loading write (INCR) on A over B's list answers WRONGTYPE.
    let wrong = redis::cmd("INCR")
        .arg("l")
        .query_async::<i64>(&mut on_a)
        .await
        .unwrap_err();
    assert!(wrong.to_string().contains("WRONGTYPE"), "{wrong}");
}

/// Subscription confirmations and messages are pushes, not replies: CLIENT REPLY OFF does not
/// silence them, in RESP3 or RESP2, as redis-server 7.0.15 answers.
#[tokio::test]
async fn client_reply_off_does_not_silence_pushes() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut publisher = RawResp::connect(gateway.resp_addr()).await;
    for (protocol, push) in [("3", true), ("2", false)] {
        let mut raw = RawResp::connect(gateway.resp_addr()).await;
        raw.command(&["HELLO", protocol]).await;
        raw.send(&encode(&[b"CLIENT", b"REPLY", b"OFF"])).await;
        raw.send(&encode(&[b"SUBSCRIBE", b"ch"])).await;
        let frame = |items: Vec<Value>| if push { Value::Push(items) } else { Value::Array(items) };
        assert_eq!(
            raw.reply().await,
            Some(frame(vec![Value::bulk("subscribe"), Value::bulk("ch"), Value::Int(1)])),
            "RESP{protocol}"
        );
        // Until the subscriber is the only one (the previous round's is gone).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while publisher.command(&["PUBLISH", "ch", "hi"]).await != Value::Int(1) {
            assert!(std::time::Instant::now() < deadline, "one subscriber within 10 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            raw.reply().await,
            Some(frame(vec![
                Value::bulk("message"),
                Value::bulk("ch"),
                Value::bulk("hi")
            ])),
            "RESP{protocol}"
        );
    }
}

/// A PUBLISH that is slow in the database (here: one whose large message's row insert waits
/// on a lock another session holds, as a huge message would take its time) holds up neither
/// another client's PUBLISH nor the delivery of its message: publishes go out on pooled
/// connections, not on the LISTEN connection that delivers. (When they shared it, the second
/// PUBLISH and every delivery queued behind the first until the lock went.)
#[tokio::test]
async fn a_slow_publish_does_not_hold_up_other_messages() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut subscriber = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        subscriber.command(&["SUBSCRIBE", "fast"]).await,
        frame("subscribe", "fast", 1)
    );
    let mut other = RawResp::connect(gateway.resp_addr()).await;
    let first = publish_until_received(&mut other, &mut subscriber, "fast", "ready").await;

    let (lock, watch) = (gateway.sql().await, gateway.sql().await);
    lock.batch_execute("BEGIN; LOCK TABLE pgvs3.resp_messages IN EXCLUSIVE MODE")
        .await
        .unwrap();
    let mut slow = RawResp::connect(gateway.resp_addr()).await;
    let large = "x".repeat(64 * 1024);
    slow.send(&encode(&[b"PUBLISH", b"slow", large.as_bytes()])).await;
    common::eventually(
        Duration::from_secs(10),
        "the large publish waiting on the lock",
        || async {
            let waiting = common::query_count(
                &watch,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND query LIKE '%resp_publish%'",
                &[],
            )
            .await;
            (waiting == 1).then_some(())
        },
    )
    .await;

    // While it waits: the other client's PUBLISH is answered and its message delivered. (The
    // time limit only turns a hang, the old behaviour, into a failure.)
    let delivered = tokio::time::timeout(Duration::from_secs(30), async {
        assert_eq!(other.command(&["PUBLISH", "fast", "not held up"]).await, Value::Int(1));
        next_other(&mut subscriber, &first).await
    })
    .await
    .expect("a publish and its delivery do not wait for another client's slow publish");
    assert_eq!(
        delivered,
        Value::Array(vec![bulk("message"), bulk("fast"), bulk("not held up")])
    );
    assert_eq!(common::lock_waiters(&watch).await, 1, "the large publish still waits");

    lock.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(slow.reply().await, Some(Value::Int(0)));
}

/// One client's pipelined PUBLISHes reach a subscriber in the order they were sent, small ones
/// (inline in the NOTIFY) and large ones (by row) alike, though each may take another pooled
/// connection: a connection runs its commands one after another, each answered once committed.
#[tokio::test]
async fn pipelined_publishes_arrive_in_order() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut subscriber = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        subscriber.command(&["SUBSCRIBE", "seq"]).await,
        frame("subscribe", "seq", 1)
    );
    let mut publisher = RawResp::connect(gateway.resp_addr()).await;
    let first = publish_until_received(&mut publisher, &mut subscriber, "seq", "ready").await;

    // Every 50th message is past NOTIFY's payload limit and goes by row.
    let message = |n: usize| match n % 50 {
        49 => format!("{n:08}{}", "y".repeat(10_000)),
        _ => format!("{n:08}"),
    };
    let mut pipeline = Vec::new();
    for n in 0..1000 {
        pipeline.extend(encode(&[b"PUBLISH", b"seq", message(n).as_bytes()]));
    }
    publisher.send(&pipeline).await;
    for _ in 0..1000 {
        assert_eq!(publisher.reply().await, Some(Value::Int(1)));
    }
    for n in 0..1000 {
        let got = match n {
            0 => next_other(&mut subscriber, &first).await,
            _ => subscriber.reply().await.expect("a message"),
        };
        assert_eq!(
            got,
            Value::Array(vec![bulk("message"), bulk("seq"), bulk(&message(n))]),
            "message {n}"
        );
    }
}
