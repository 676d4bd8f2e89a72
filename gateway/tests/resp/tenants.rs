//! Tenancy: two access keys, each owning one RESP database's bucket, on one gateway. Neither
//! sees, changes or runs the other's functions and scripts, learns the other's key names from
//! keyspace events or BCAST invalidations, hears or counts the other's channels, lists, acts
//! on or redirects invalidations to the other's connections, or runs the gateway-wide commands
//! that are the root key's (CLIENT PAUSE, CONFIG SET tracking-table-max-keys, ACL
//! USERS/LIST/LOG); rights follow the catalog on open connections. Each test here failed before
//! these rules.

use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::live::{LiveRedis, same_lines};
use common::resp::{RawResp, Value, encode};

/// Tenant A owns database 0's bucket (`resp`), tenant B database 1's (`tenant-b`).
const A: (&str, &str) = ("TENANTAKEY", "TENANTAKEY-secret");
const B: (&str, &str) = ("TENANTBKEY", "TENANTBKEY-secret");

async fn two_tenants(extra: &[&str]) -> TestGateway {
    let mut args = vec!["--resp-databases", "1=tenant-b"];
    args.extend_from_slice(extra);
    let gateway = TestGateway::with_resp(&args).await;
    let catalog = gateway.gateway.store.catalog();
    for (key, secret) in [A, B] {
        catalog
            .put_access_key(&pgvs3_gateway::store::NewAccessKey {
                access_key: key.into(),
                secret: secret.into(),
                is_root: false,
                read_only: false,
                description: String::new(),
            })
            .await
            .unwrap();
    }
    let sql = gateway.sql().await;
    for (bucket, key) in [("resp", A.0), ("tenant-b", B.0)] {
        sql.execute("UPDATE pgvs3.buckets SET owner = $1 WHERE name = $2", &[&key, &bucket])
            .await
            .unwrap();
    }
    catalog.reload_now().await.unwrap();
    gateway
}

/// A connection signed in as `key`, on its own database.
async fn tenant(gateway: &TestGateway, (key, secret): (&str, &str)) -> RawResp {
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["AUTH", key, secret]).await, ok());
    if key == B.0 {
        assert_eq!(raw.command(&["SELECT", "1"]).await, ok());
    }
    raw
}

fn ok() -> Value {
    Value::Simple("OK".into())
}

fn bulk(text: &str) -> Value {
    Value::bulk(text)
}

fn library(answer: &str) -> String {
    format!("#!lua name=shared\nredis.register_function('whoami', function() return '{answer}' end)")
}

/// Libraries are per keyspace: B loads, replaces, deletes and flushes its own, and A's stay
/// A's, callable and listed by A alone. Before, B's LOAD REPLACE changed what A's FCALL ran.
#[tokio::test]
async fn function_libraries_are_per_keyspace() {
    let gateway = two_tenants(&[]).await;
    let mut a = tenant(&gateway, A).await;
    let mut b = tenant(&gateway, B).await;
    assert_eq!(a.command(&["FUNCTION", "LOAD", &library("a")]).await, bulk("shared"));
    // B sees none, and calls none of A's.
    assert_eq!(b.command(&["FUNCTION", "LIST"]).await, Value::Array(vec![]));
    assert_eq!(
        b.command(&["FCALL", "whoami", "0"]).await,
        Value::Error("ERR Function not found".into())
    );
    let Value::Bulk(dump) = b.command(&["FUNCTION", "DUMP"]).await else {
        panic!("FUNCTION DUMP answers a payload");
    };
    assert!(!String::from_utf8_lossy(&dump).contains("whoami"));
    // The same name is free in B's keyspace; REPLACE and DELETE there leave A's alone.
    assert_eq!(b.command(&["FUNCTION", "LOAD", &library("b")]).await, bulk("shared"));
    assert_eq!(
        b.command(&["FUNCTION", "LOAD", "REPLACE", &library("b2")]).await,
        bulk("shared")
    );
    assert_eq!(b.command(&["FCALL", "whoami", "0"]).await, bulk("b2"));
    assert_eq!(a.command(&["FCALL", "whoami", "0"]).await, bulk("a"));
    assert_eq!(b.command(&["FUNCTION", "DELETE", "shared"]).await, ok());
    assert_eq!(b.command(&["FUNCTION", "FLUSH"]).await, ok());
    assert_eq!(
        a.command(&["FCALL_RO", "whoami", "0"]).await.error(),
        "ERR Can not execute a script with write flag using *_ro command."
    );
    assert_eq!(a.command(&["FCALL", "whoami", "0"]).await, bulk("a"));
    let Value::Array(listed) = a.command(&["FUNCTION", "LIST", "WITHCODE"]).await else {
        panic!("FUNCTION LIST answers an array");
    };
    assert_eq!(listed.len(), 1);
    // Another tenant's database is not B's to select, read or change.
    assert_eq!(
        b.command(&["SELECT", "0"]).await.error(),
        "NOPERM this user has no permissions to access this database's bucket"
    );
    let mut b = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(b.command(&["AUTH", B.0, B.1]).await, ok());
    for command in [
        &["FUNCTION", "LIST"][..],
        &["FUNCTION", "FLUSH"],
        &["FCALL", "whoami", "0"],
    ] {
        assert_eq!(
            b.command(command).await.error(),
            "NOPERM this user has no permissions to access this database's bucket",
            "{command:?}"
        );
    }
    assert_eq!(a.command(&["FCALL", "whoami", "0"]).await, bulk("a"));
}

/// The script cache and SCRIPT KILL are per tenant: B neither finds, flushes nor kills A's.
#[tokio::test]
async fn scripts_are_per_tenant() {
    let gateway = two_tenants(&["--resp-script-time-limit", "120s"]).await;
    let mut a = tenant(&gateway, A).await;
    let mut b = tenant(&gateway, B).await;
    let Value::Bulk(sha) = a.command(&["SCRIPT", "LOAD", "return 'a'"]).await else {
        panic!("SCRIPT LOAD answers the SHA1");
    };
    let sha = String::from_utf8(sha).unwrap();
    assert_eq!(
        b.command(&["SCRIPT", "EXISTS", &sha]).await,
        Value::Array(vec![Value::Int(0)])
    );
    assert_eq!(
        b.command(&["EVALSHA", &sha, "0"]).await.error(),
        "NOSCRIPT No matching script. Please use EVAL."
    );
    assert_eq!(b.command(&["SCRIPT", "FLUSH"]).await, ok());
    assert_eq!(a.command(&["EVALSHA", &sha, "0"]).await, bulk("a"));

    // A's looping script: B's SCRIPT KILL and FUNCTION KILL find nothing running.
    let mut runner = tenant(&gateway, A).await;
    let running = tokio::spawn(async move { runner.command(&["EVAL", "while true do end", "0"]).await });
    // A's own FUNCTION KILL answers BUSY once the script runs (without stopping it).
    loop {
        let reply = a.command(&["FUNCTION", "KILL"]).await;
        if reply.error().starts_with("BUSY") {
            break;
        }
        assert_eq!(reply.error(), "NOTBUSY No scripts in execution right now.");
        tokio::task::yield_now().await;
    }
    for kill in ["SCRIPT", "FUNCTION"] {
        assert_eq!(
            b.command(&[kill, "KILL"]).await.error(),
            "NOTBUSY No scripts in execution right now."
        );
    }
    assert!(!running.is_finished());
    assert_eq!(a.command(&["SCRIPT", "KILL"]).await, ok());
    let answer = running.await.unwrap();
    assert!(answer.error().contains("Script killed by user"), "{answer:?}");
}

/// The next pub/sub message a subscriber (RESP2 or RESP3) gets: (channel, payload).
async fn message(subscriber: &mut RawResp) -> (String, String) {
    let Some(Value::Array(parts) | Value::Push(parts)) = subscriber.reply().await else {
        panic!("a message");
    };
    let text = |value: &Value| match value {
        Value::Bulk(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        other => panic!("{other:?}"),
    };
    let n = parts.len();
    (text(&parts[n - 2]), text(&parts[n - 1]))
}

/// Keyspace events reach the subscribers whose key may read their database: B's pattern that
/// matches every database's events gets B's own, never A's key names.
#[tokio::test]
async fn keyspace_events_reach_only_readers_of_their_database() {
    let gateway = two_tenants(&[]).await;
    let mut a = tenant(&gateway, A).await;
    let mut b = tenant(&gateway, B).await;
    assert_eq!(
        a.command(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]).await,
        ok()
    );
    assert_eq!(
        b.command(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]).await,
        ok()
    );
    let mut b_listens = tenant(&gateway, B).await;
    b_listens.command(&["PSUBSCRIBE", "__key*__:*"]).await;
    let mut a_listens = tenant(&gateway, A).await;
    a_listens.command(&["PSUBSCRIBE", "__key*__:*"]).await;
    assert_eq!(a.command(&["SET", "a-secret-name", "1"]).await, ok());
    assert_eq!(b.command(&["SET", "b-own", "1"]).await, ok());
    // Events go out in commit order: A's first, had B been sent it.
    assert_eq!(
        message(&mut b_listens).await,
        ("__keyspace@1__:b-own".to_owned(), "set".to_owned())
    );
    assert_eq!(
        message(&mut a_listens).await,
        ("__keyspace@0__:a-secret-name".to_owned(), "set".to_owned())
    );
}

/// BCAST tracking tells a client of the keys of databases its key may read alone.
#[tokio::test]
async fn bcast_tracking_is_per_keyspace() {
    let gateway = two_tenants(&[]).await;
    let mut a = tenant(&gateway, A).await;
    let mut b = tenant(&gateway, B).await;
    let mut tracker = tenant(&gateway, B).await;
    assert!(matches!(tracker.command(&["HELLO", "3"]).await, Value::Map(_)));
    assert_eq!(tracker.command(&["CLIENT", "TRACKING", "ON", "BCAST"]).await, ok());
    assert_eq!(a.command(&["SET", "a-secret-name", "1"]).await, ok());
    assert_eq!(b.command(&["SET", "b-own", "1"]).await, ok());
    let Some(Value::Push(push)) = tracker.reply().await else {
        panic!("an invalidation");
    };
    assert_eq!(push, vec![bulk("invalidate"), Value::Array(vec![bulk("b-own")])]);
}

fn denied(command: &str) -> String {
    format!("NOPERM this user has no permissions to run the '{command}' command")
}

/// What acts on the whole gateway is the root key's; CLIENT LIST, KILL and UNBLOCK reach a
/// tenant's own connections alone; a pause lets AUTH and the root key's UNPAUSE through.
#[tokio::test]
async fn gateway_wide_commands_are_the_root_key_s() {
    let gateway = two_tenants(&[]).await;
    let mut a = tenant(&gateway, A).await;
    let mut b = tenant(&gateway, B).await;
    for (command, name) in [
        (&["CLIENT", "PAUSE", "100000", "ALL"][..], "client|pause"),
        (&["CLIENT", "UNPAUSE"], "client|unpause"),
        (&["CONFIG", "SET", "tracking-table-max-keys", "0"], "config|set"),
        (&["CONFIG", "RESETSTAT"], "config|resetstat"),
        (&["ACL", "USERS"], "acl|users"),
        (&["ACL", "LIST"], "acl|list"),
        (&["ACL", "LOG", "RESET"], "acl|log"),
    ] {
        assert_eq!(b.command(command).await.error(), denied(name), "{command:?}");
    }
    let Value::Int(a_id) = a.command(&["CLIENT", "ID"]).await else {
        panic!("an id");
    };
    let a_id = a_id.to_string();
    let Value::Bulk(list) = b.command(&["CLIENT", "LIST"]).await else {
        panic!("CLIENT LIST answers text");
    };
    let list = String::from_utf8(list).unwrap();
    assert_eq!(list.lines().count(), 1, "{list}");
    assert!(list.contains(&format!("user={}", B.0)), "{list}");
    assert_eq!(b.command(&["CLIENT", "LIST", "ID", &a_id]).await, bulk(""));
    // A blocked: B cannot wake or close it; the root key can.
    let mut blocked = tenant(&gateway, A).await;
    let Value::Int(blocked_id) = blocked.command(&["CLIENT", "ID"]).await else {
        panic!("an id");
    };
    let blocked_id = blocked_id.to_string();
    let waiting = tokio::spawn(async move { blocked.command(&["BLPOP", "nothing", "0"]).await });
    let mut root = RawResp::connect(gateway.resp_addr()).await;
    // Until it blocks, neither wakes it; once it does, B asks first each time and gets 0.
    loop {
        assert_eq!(b.command(&["CLIENT", "UNBLOCK", &blocked_id]).await, Value::Int(0));
        assert_eq!(b.command(&["CLIENT", "KILL", "ID", &blocked_id]).await, Value::Int(0));
        if root.command(&["CLIENT", "UNBLOCK", &blocked_id]).await == Value::Int(1) {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(b.command(&["CLIENT", "KILL", "ID", &a_id]).await, Value::Int(0));
    assert_eq!(waiting.await.unwrap(), Value::Nil);
    assert_eq!(a.command(&["PING"]).await, Value::Simple("PONG".into()));
    // The longest pause: AUTH and the root key's UNPAUSE still run.
    assert_eq!(
        root.command(&["CLIENT", "PAUSE", "9223372036854775807", "ALL"]).await,
        ok()
    );
    let mut late = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(late.command(&["AUTH", A.0, A.1]).await, ok());
    assert_eq!(root.command(&["CLIENT", "UNPAUSE"]).await, ok());
    assert_eq!(late.command(&["PING"]).await, Value::Simple("PONG".into()));
}

/// CLIENT SETINFO takes what Redis 7.2 takes (no spaces, newlines or other special
/// characters), at most 512 bytes: no forged CLIENT LIST lines.
#[tokio::test]
async fn client_setinfo_values_are_checked() {
    let gateway = two_tenants(&[]).await;
    let mut b = tenant(&gateway, B).await;
    for (attribute, value) in [
        ("lib-name", "x\nid=1 addr=forged"),
        ("lib-ver", "1 2"),
        ("LIB-NAME", "\u{7f}"),
    ] {
        assert_eq!(
            b.command(&["CLIENT", "SETINFO", attribute, value]).await.error(),
            format!("ERR {attribute} cannot contain spaces, newlines or special characters.")
        );
    }
    let long = "x".repeat(513);
    for command in [
        &["CLIENT", "SETINFO", "lib-name", &long][..],
        &["CLIENT", "SETNAME", &long],
    ] {
        assert_eq!(
            b.command(command).await.error(),
            "ERR pgvs3 takes client names, lib-name and lib-ver of at most 512 bytes"
        );
    }
    assert_eq!(b.command(&["CLIENT", "SETINFO", "lib-name", &long[..512]]).await, ok());
    assert_eq!(b.command(&["CLIENT", "SETINFO", "lib-ver", "7.2.0"]).await, ok());
}

/// SORT's BY (with a pattern) and GET read keys no key pattern judged: a user without access
/// to every key is refused them with Redis 7.0's errors.
#[tokio::test]
async fn sort_by_and_get_need_every_key() {
    let gateway = two_tenants(&[]).await;
    let mut root = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        root.command(&["ACL", "SETUSER", B.0, "resetkeys", "~list*"]).await,
        ok()
    );
    let mut b = tenant(&gateway, B).await;
    assert_eq!(b.command(&["RPUSH", "list", "2", "1"]).await, Value::Int(2));
    assert_eq!(
        b.command(&["SORT", "list", "BY", "weight_*"]).await.error(),
        "ERR BY option of SORT denied due to insufficient ACL permissions."
    );
    assert_eq!(
        b.command(&["SORT_RO", "list", "GET", "#"]).await.error(),
        "ERR GET option of SORT denied due to insufficient ACL permissions."
    );
    // BY without a pattern reads nothing else.
    assert_eq!(
        b.command(&["SORT", "list", "BY", "nosort"]).await,
        Value::Array(vec![bulk("2"), bulk("1")])
    );
    assert_eq!(
        b.command(&["SORT", "list"]).await,
        Value::Array(vec![bulk("1"), bulk("2")])
    );
    // The refusal comes when SORT runs (sort.c), not before: inside MULTI SORT is queued, and
    // its error is its part of EXEC's reply, the rest of the transaction run, as redis-server's.
    let redis = LiveRedis::start().await;
    let mut theirs = redis.connect().await;
    let password = format!(">{}", B.1);
    assert_eq!(
        theirs
            .command(&["ACL", "SETUSER", B.0, "on", &password, "~list*", "+@all"])
            .await,
        ok()
    );
    assert_eq!(theirs.command(&["AUTH", B.0, B.1]).await, ok());
    assert_eq!(b.command(&["DEL", "list"]).await, Value::Int(1));
    same_lines(
        &mut b,
        &mut theirs,
        &[
            "RPUSH list 2 1",
            "MULTI",
            "SORT list GET #",
            "SORT_RO list BY weight_*",
            "RPUSH list 3",
            "SORT list",
            "EXEC",
            "SORT list GET #",
        ],
    )
    .await;
}

/// An unknown command's error quotes its arguments up to 128 bytes, as redis-server 7.0's
/// processCommand: not every one of 100,000.
#[tokio::test]
async fn unknown_command_errors_are_short() {
    let gateway = two_tenants(&[]).await;
    let mut b = tenant(&gateway, B).await;
    assert_eq!(
        b.command(&["NOSUCH", "a", "b"]).await.error(),
        "ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' "
    );
    let hundred = "y".repeat(100);
    let mut args = vec!["NOSUCH"];
    args.extend(std::iter::repeat_n(hundred.as_str(), 100_000));
    let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
    b.send(&encode(&args)).await;
    let reply = b.reply().await.unwrap();
    // The first argument whole (103 bytes quoted), then the 25 bytes left of the 128.
    assert_eq!(
        reply.error(),
        format!(
            "ERR unknown command 'NOSUCH', with args beginning with: '{hundred}' '{}' ",
            "y".repeat(25)
        )
    );
}

/// A MULTI queue counts each argument's handle, and holds at most 4 Mi arguments: queued
/// commands of a million empty arguments each fill it.
#[tokio::test]
async fn multi_queues_count_their_arguments() {
    // Hundreds of MiB of requests and queue: not while a test measures the process's peak.
    let _large = crate::LARGE_ALLOCATIONS.read().await;
    let gateway = two_tenants(&[]).await;
    let mut b = tenant(&gateway, B).await;
    assert_eq!(b.command(&["MULTI"]).await, ok());
    let mut request = b"*1000000\r\n$4\r\nPING\r\n".to_vec();
    for _ in 1..1_000_000 {
        request.extend_from_slice(b"$0\r\n\r\n");
    }
    for _ in 0..4 {
        b.send(&request).await;
        assert_eq!(b.reply().await.unwrap(), Value::Simple("QUEUED".into()));
    }
    b.send(&request).await;
    assert_eq!(
        b.reply().await.unwrap().error(),
        "ERR MULTI queue full: at most 100000 commands, 4194304 arguments and 536870912 bytes per transaction"
    );
    assert_eq!(
        b.command(&["EXEC"]).await.error(),
        "EXECABORT Transaction discarded because of previous errors."
    );
}

/// PUBLISH takes messages up to `--resp-max-message` (1 MiB): a larger one is refused before
/// it is encoded and sent through PostgreSQL to every gateway (one of 150 MB held every other
/// tenant's publishes, keyspace events and wakeups for most of a minute).
#[tokio::test]
async fn publish_messages_are_bounded() {
    let gateway = two_tenants(&[]).await;
    let mut b = tenant(&gateway, B).await;
    let largest = "m".repeat(1024 * 1024);
    assert_eq!(b.command(&["PUBLISH", "news", &largest]).await, Value::Int(0));
    let over = format!("{largest}m");
    for publish in ["PUBLISH", "SPUBLISH"] {
        assert_eq!(
            b.command(&[publish, "news", &over]).await.error(),
            "ERR message longer than 1048576 bytes (--resp-max-message)"
        );
    }
}

fn client_id(reply: Value) -> String {
    match reply {
        Value::Int(id) => id.to_string(),
        other => panic!("CLIENT ID answers an integer: {other:?}"),
    }
}

/// CLIENT TRACKING's REDIRECT names one of the caller's own connections: another tenant's id
/// answers Redis's error for an id that does not exist, so the other's connection never gets
/// the caller's invalidations (nor does the caller learn that the id exists).
#[tokio::test]
async fn tracking_redirects_to_own_connections_only() {
    let gateway = two_tenants(&[]).await;
    let mut a = tenant(&gateway, A).await;
    let mut b = tenant(&gateway, B).await;
    let mut b_own = tenant(&gateway, B).await;
    let a_id = client_id(a.command(&["CLIENT", "ID"]).await);
    let b_own_id = client_id(b_own.command(&["CLIENT", "ID"]).await);
    assert_eq!(
        b.command(&["CLIENT", "TRACKING", "ON", "BCAST", "REDIRECT", &a_id])
            .await
            .error(),
        "ERR The client ID you want redirect to does not exist"
    );
    assert_eq!(b.command(&["CLIENT", "GETREDIR"]).await, Value::Int(-1));
    assert_eq!(
        b.command(&["CLIENT", "TRACKING", "ON", "BCAST", "REDIRECT", &b_own_id])
            .await,
        ok()
    );
    assert_eq!(
        b.command(&["CLIENT", "GETREDIR"]).await,
        Value::Int(b_own_id.parse().unwrap())
    );
}

/// A connection signed in again as another tenant's key takes nothing of the first tenant's
/// deliveries with it. A tracking client's REDIRECT to it is broken, as if it were gone (the
/// tracker gets `tracking-redir-broken`); a subscriber's channels are the new tenant's, by
/// HELLO's AUTH as by AUTH's, and AUTH is refused while it listens to a channel the new user's
/// rules do not allow; a tracking client that became another tenant is told to drop its cache
/// and hears no more of the first tenant's keys. Before, the redirect target went on getting
/// A's invalidations as B, HELLO 3 AUTH kept A's channels, and a tracker kept A's keys.
#[tokio::test]
async fn signing_in_as_another_tenant_leaves_the_first_tenant_s_deliveries() {
    let gateway = two_tenants(&[]).await;
    let mut a = tenant(&gateway, A).await;
    let mut target = tenant(&gateway, A).await;
    assert!(matches!(target.command(&["HELLO", "3"]).await, Value::Map(_)));
    let target_id = client_id(target.command(&["CLIENT", "ID"]).await);
    let mut tracker = tenant(&gateway, A).await;
    assert!(matches!(tracker.command(&["HELLO", "3"]).await, Value::Map(_)));
    assert_eq!(
        tracker
            .command(&["CLIENT", "TRACKING", "ON", "REDIRECT", &target_id])
            .await,
        ok()
    );
    assert_eq!(tracker.command(&["GET", "a-secret-name"]).await, Value::Nil);
    let mut turned = tenant(&gateway, A).await;
    assert!(matches!(turned.command(&["HELLO", "3"]).await, Value::Map(_)));
    assert_eq!(turned.command(&["CLIENT", "TRACKING", "ON"]).await, ok());
    assert_eq!(turned.command(&["GET", "a-secret-name"]).await, Value::Nil);
    for connection in [&mut target, &mut turned] {
        assert_eq!(connection.command(&["AUTH", B.0, B.1]).await, ok());
    }
    // The tracker that became B's drops what it cached as A's.
    assert_eq!(
        turned.reply().await,
        Some(Value::Push(vec![bulk("invalidate"), Value::Nil]))
    );
    assert_eq!(a.command(&["SET", "a-secret-name", "1"]).await, ok());
    // Told as the SET committed, before its reply: had B's connections been sent A's key name,
    // it would come before these replies.
    assert_eq!(target.command(&["PING"]).await, Value::Simple("PONG".into()));
    assert_eq!(turned.command(&["PING"]).await, Value::Simple("PONG".into()));
    assert_eq!(
        tracker.reply().await,
        Some(Value::Push(vec![
            bulk("tracking-redir-broken"),
            Value::Int(target_id.parse().unwrap())
        ]))
    );
    // A RESP3 subscriber signed in as B by HELLO: B's `orders`, no longer A's.
    let mut listener = tenant(&gateway, A).await;
    assert!(matches!(listener.command(&["HELLO", "3"]).await, Value::Map(_)));
    listener.command(&["SUBSCRIBE", "orders"]).await;
    assert!(matches!(
        listener.command(&["HELLO", "3", "AUTH", B.0, B.1]).await,
        Value::Map(_)
    ));
    let mut b = tenant(&gateway, B).await;
    assert_eq!(a.command(&["PUBLISH", "orders", "a-1"]).await, Value::Int(0));
    assert_eq!(b.command(&["PUBLISH", "orders", "b-1"]).await, Value::Int(1));
    assert_eq!(message(&mut listener).await, ("orders".to_owned(), "b-1".to_owned()));
    // A's rules no longer allow `orders`: signing in as A is refused, and it stays B's.
    let mut root = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        root.command(&["ACL", "SETUSER", A.0, "resetchannels", "&news"]).await,
        ok()
    );
    assert_eq!(
        listener.command(&["AUTH", A.0, A.1]).await.error(),
        "NOPERM this user has no permissions to access one of the channels this connection is subscribed to: unsubscribe (or RESET) before AUTH as this user"
    );
    assert_eq!(b.command(&["PUBLISH", "orders", "b-2"]).await, Value::Int(1));
    assert_eq!(message(&mut listener).await, ("orders".to_owned(), "b-2".to_owned()));
}

/// Plain and shard channels are per tenant (access key): A's and B's `orders` are two
/// channels, each hearing its own tenant's PUBLISH and SPUBLISH, and PUBSUB counts a tenant's
/// own subscribers. The root key publishes in its own namespace and sees every tenant's counts.
#[tokio::test]
async fn channels_are_per_tenant() {
    let gateway = two_tenants(&[]).await;
    let mut a_listens = tenant(&gateway, A).await;
    let mut b_listens = tenant(&gateway, B).await;
    a_listens.command(&["SUBSCRIBE", "orders"]).await;
    a_listens.command(&["PSUBSCRIBE", "ord*"]).await;
    b_listens.command(&["SUBSCRIBE", "orders"]).await;
    b_listens.command(&["SSUBSCRIBE", "shard-orders"]).await;
    let mut a = tenant(&gateway, A).await;
    let mut b = tenant(&gateway, B).await;
    let mut root = RawResp::connect(gateway.resp_addr()).await;
    // Each PUBLISH counts, and reaches, its own tenant's subscribers alone.
    assert_eq!(b.command(&["PUBLISH", "orders", "b-1"]).await, Value::Int(1));
    assert_eq!(root.command(&["PUBLISH", "orders", "root-1"]).await, Value::Int(0));
    assert_eq!(a.command(&["SPUBLISH", "shard-orders", "a-shard"]).await, Value::Int(0));
    assert_eq!(a.command(&["PUBLISH", "orders", "a-1"]).await, Value::Int(2));
    assert_eq!(b.command(&["SPUBLISH", "shard-orders", "b-shard"]).await, Value::Int(1));
    // Published in that order: had A's subscribers heard B's or the root key's, those first.
    assert_eq!(message(&mut a_listens).await, ("orders".to_owned(), "a-1".to_owned()));
    assert_eq!(message(&mut a_listens).await, ("orders".to_owned(), "a-1".to_owned()));
    assert_eq!(message(&mut b_listens).await, ("orders".to_owned(), "b-1".to_owned()));
    assert_eq!(
        message(&mut b_listens).await,
        ("shard-orders".to_owned(), "b-shard".to_owned())
    );
    // Introspection: a tenant's own subscribers; the root key's, every tenant's.
    let numsub = |count: i64| Value::Array(vec![bulk("orders"), Value::Int(count)]);
    assert_eq!(b.command(&["PUBSUB", "NUMSUB", "orders"]).await, numsub(1));
    assert_eq!(a.command(&["PUBSUB", "NUMSUB", "orders"]).await, numsub(1));
    assert_eq!(root.command(&["PUBSUB", "NUMSUB", "orders"]).await, numsub(2));
    assert_eq!(b.command(&["PUBSUB", "NUMPAT"]).await, Value::Int(0));
    assert_eq!(a.command(&["PUBSUB", "NUMPAT"]).await, Value::Int(1));
    assert_eq!(root.command(&["PUBSUB", "NUMPAT"]).await, Value::Int(1));
    assert_eq!(a.command(&["PUBSUB", "SHARDCHANNELS"]).await, Value::Array(vec![]));
    assert_eq!(
        b.command(&["PUBSUB", "SHARDCHANNELS"]).await,
        Value::Array(vec![bulk("shard-orders")])
    );
    assert_eq!(
        b.command(&["PUBSUB", "SHARDNUMSUB", "shard-orders"]).await,
        Value::Array(vec![bulk("shard-orders"), Value::Int(1)])
    );
    assert_eq!(
        a.command(&["PUBSUB", "SHARDNUMSUB", "shard-orders"]).await,
        Value::Array(vec![bulk("shard-orders"), Value::Int(0)])
    );
    assert_eq!(
        root.command(&["PUBSUB", "CHANNELS"]).await,
        Value::Array(vec![bulk("orders")])
    );
    // An ACL channel pattern judges the tenant's own channel names (B's subscriber listens to
    // both `orders` and `shard-orders`: it stays).
    assert_eq!(
        root.command(&["ACL", "SETUSER", B.0, "resetchannels", "&*orders"])
            .await,
        ok()
    );
    assert_eq!(b.command(&["PUBLISH", "orders", "b-2"]).await, Value::Int(1));
    assert_eq!(
        b.command(&["PUBLISH", "news", "x"]).await.error(),
        "NOPERM this user has no permissions to access one of the channels used as arguments"
    );
    assert_eq!(message(&mut b_listens).await, ("orders".to_owned(), "b-2".to_owned()));
}

/// Rights follow the catalog on connections already signed in, also idle ones: a subscriber
/// whose key loses a database stops getting its keyspace events at once, one revoked of a
/// channel it listens to is disconnected (as Redis disconnects it), and one whose key is
/// disabled is closed without sending anything.
#[tokio::test]
async fn rights_follow_the_catalog_on_open_connections() {
    let gateway = two_tenants(&[]).await;
    let mut a = tenant(&gateway, A).await;
    assert_eq!(
        a.command(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]).await,
        ok()
    );
    let mut b = tenant(&gateway, B).await;
    assert_eq!(
        b.command(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]).await,
        ok()
    );
    let mut b_listens = tenant(&gateway, B).await;
    b_listens.command(&["PSUBSCRIBE", "__key*__:*"]).await;
    b_listens.command(&["SUBSCRIBE", "b-chan"]).await;
    // B's database goes to A: B's subscriber, which sends nothing, no longer hears of it.
    let sql = gateway.sql().await;
    sql.execute("UPDATE pgvs3.buckets SET owner = $1 WHERE name = 'tenant-b'", &[&A.0])
        .await
        .unwrap();
    let catalog = gateway.gateway.store.catalog();
    catalog.reload_now().await.unwrap();
    assert_eq!(a.command(&["SELECT", "1"]).await, ok());
    assert_eq!(a.command(&["SET", "a-secret-name", "1"]).await, ok());
    assert_eq!(b.command(&["PUBLISH", "b-chan", "after"]).await, Value::Int(1));
    assert_eq!(message(&mut b_listens).await, ("b-chan".to_owned(), "after".to_owned()));
    // A's channels narrowed below one it listens to: its subscriber is closed.
    let mut narrowed = tenant(&gateway, A).await;
    narrowed.command(&["SUBSCRIBE", "news"]).await;
    narrowed.command(&["SUBSCRIBE", "other"]).await;
    let mut root = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        root.command(&["ACL", "SETUSER", A.0, "resetchannels", "&other"]).await,
        ok()
    );
    // Closed when it learns of the change, at the latest before this message is sent to it.
    let counted = a.command(&["PUBLISH", "other", "x"]).await;
    assert!(matches!(counted, Value::Int(0 | 1)), "{counted:?}");
    assert_eq!(narrowed.reply().await, None);
    // B's key disabled: its idle subscriber is closed.
    assert!(catalog.set_access_key_disabled(B.0, true).await.unwrap());
    catalog.reload_now().await.unwrap();
    assert_eq!(b_listens.reply().await, None);
}

/// Channel names are at most 2,048 bytes (a keyspace channel of the longest key fits), for
/// SUBSCRIBE, SSUBSCRIBE, PUBLISH and SPUBLISH alike, and a connection holds at most
/// `--resp-max-patterns` patterns: each message is matched against every pattern.
#[tokio::test]
async fn channels_and_patterns_are_bounded() {
    let gateway = two_tenants(&["--resp-max-patterns", "2"]).await;
    let mut b = tenant(&gateway, B).await;
    let longest = "c".repeat(2048);
    let over = format!("{longest}c");
    let too_long = "ERR channel longer than 2048 bytes";
    for publish in ["PUBLISH", "SPUBLISH"] {
        assert_eq!(b.command(&[publish, &longest, "m"]).await, Value::Int(0));
        assert_eq!(b.command(&[publish, &over, "m"]).await.error(), too_long);
    }
    let mut listens = tenant(&gateway, B).await;
    for subscribe in ["SUBSCRIBE", "SSUBSCRIBE"] {
        assert_eq!(listens.command(&[subscribe, &over]).await.error(), too_long);
    }
    let Value::Array(confirmed) = listens.command(&["SUBSCRIBE", &longest]).await else {
        panic!("a confirmation");
    };
    assert_eq!(confirmed[1], bulk(&longest));
    listens.send(&encode(&[&b"PSUBSCRIBE"[..], b"p1", b"p2", b"p3"])).await;
    for (pattern, count) in [("p1", 2), ("p2", 3)] {
        assert_eq!(
            listens.reply().await.unwrap(),
            Value::Array(vec![bulk("psubscribe"), bulk(pattern), Value::Int(count)])
        );
    }
    assert_eq!(
        listens.reply().await.unwrap().error(),
        "ERR max number of patterns per connection reached (2, --resp-max-patterns)"
    );
    assert_eq!(b.command(&["PUBLISH", &longest, "m"]).await, Value::Int(1));
    assert_eq!(message(&mut listens).await, (longest, "m".to_owned()));
}

/// A bucket notification rule to a channel publishes in the namespace of the bucket's owner:
/// B's subscribers of `feed` get B's bucket's events, A's and the root key's do not.
#[tokio::test]
async fn bucket_notifications_publish_in_the_owner_s_namespace() {
    let gateway = two_tenants(&[]).await;
    let sql = gateway.sql().await;
    sql.execute(
        r#"SELECT pgvs3.put_bucket_notifications('tenant-b', '[{"id": "feed", "channel": "feed", "events": ["s3:ObjectCreated:*"]}]')"#,
        &[],
    )
    .await
    .unwrap();
    gateway.gateway.store.catalog().reload_now().await.unwrap();
    let mut b_listens = tenant(&gateway, B).await;
    b_listens.command(&["SUBSCRIBE", "feed"]).await;
    let mut a_listens = tenant(&gateway, A).await;
    a_listens.command(&["SUBSCRIBE", "feed"]).await;
    let mut root_listens = RawResp::connect(gateway.resp_addr()).await;
    root_listens.command(&["SUBSCRIBE", "feed"]).await;
    gateway
        .client_for(B.0, B.1)
        .put_object()
        .bucket("tenant-b")
        .key("b-object")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap();
    let (channel, event) = message(&mut b_listens).await;
    assert_eq!(channel, "feed");
    assert!(event.contains("\"b-object\""), "{event}");
    // Had A's or the root key's subscriber been sent B's event, it would come before these.
    let mut a = tenant(&gateway, A).await;
    assert_eq!(a.command(&["PUBLISH", "feed", "a-own"]).await, Value::Int(1));
    assert_eq!(message(&mut a_listens).await, ("feed".to_owned(), "a-own".to_owned()));
    let mut root = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(root.command(&["PUBLISH", "feed", "root-own"]).await, Value::Int(1));
    assert_eq!(
        message(&mut root_listens).await,
        ("feed".to_owned(), "root-own".to_owned())
    );
}
