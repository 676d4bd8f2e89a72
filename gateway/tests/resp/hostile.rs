//! RESP under hostile input: frames that once crashed a connection task, Redis's protocol
//! limits (before and after AUTH), a huge request dribbled in small writes, expiries and other
//! numbers at the edge of i64, and connections that never speak or never AUTH.

use pgvs3_testkit as common;

use std::time::Duration;

use common::TestGateway;
use common::resp::{RawResp, Value, encode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PONG: fn() -> Value = || Value::Simple("PONG".into());
const OK: fn() -> Value = || Value::Simple("OK".into());

/// Sends `bytes` on a fresh connection; returns the reply and whether the server then closed.
async fn refused(raw: &mut RawResp, bytes: &[u8]) -> (String, bool) {
    raw.send(bytes).await;
    let reply = raw.reply().await.expect("an error before closing");
    (reply.error().to_owned(), raw.closed().await)
}

/// The clients CLIENT LIST shows.
async fn client_count(raw: &mut RawResp) -> usize {
    match raw.command(&["CLIENT", "LIST"]).await {
        Value::Bulk(list) => String::from_utf8(list).unwrap().lines().count(),
        other => panic!("CLIENT LIST: {other:?}"),
    }
}

#[tokio::test]
async fn empty_and_negative_multibulk_counts_are_skipped_as_redis_does() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    for frame in [
        &b"*0\r\n"[..],
        b"*-1\r\n",
        b"*-10\r\n",
        b"*-9223372036854775808\r\n",
        b"\r\n",
    ] {
        raw.send(frame).await;
        assert_eq!(
            raw.command(&["PING"]).await,
            PONG(),
            "after {:?}",
            String::from_utf8_lossy(frame)
        );
    }
    // All at once, around a real command, split inside the empty ones.
    let pipeline = [&b"*0\r\n*-1\r\n"[..], &encode(&[b"ECHO", b"x"]), b"*-3\r\n*0\r\n"].concat();
    for byte in pipeline.chunks(1) {
        raw.send(byte).await;
    }
    assert_eq!(raw.command(&["PING"]).await, Value::bulk("x"), "ECHO's reply first");
    assert_eq!(raw.reply().await, Some(PONG()));
}

#[tokio::test]
async fn protocol_errors_answer_redis_texts_and_close() {
    let gateway = TestGateway::with_resp(&[]).await;
    let long_number = "1".repeat(70 * 1024);
    let too_long_count = format!("*{long_number}");
    let too_long_len = format!("*1\r\n${long_number}");
    let cases: [(&[u8], &str); 10] = [
        (b"*1\r\n$-2\r\n", "ERR Protocol error: invalid bulk length"),
        (
            b"*1\r\n$9223372036854775807\r\n",
            "ERR Protocol error: invalid bulk length",
        ),
        (
            b"*1\r\n$99999999999999999999\r\n",
            "ERR Protocol error: invalid bulk length",
        ),
        (b"*3000000000\r\n", "ERR Protocol error: invalid multibulk length"),
        // Numbers as Redis's string2ll reads them: no plus sign, no leading zero.
        (b"*+1\r\n$4\r\nPING\r\n", "ERR Protocol error: invalid multibulk length"),
        (b"*01\r\n$4\r\nPING\r\n", "ERR Protocol error: invalid multibulk length"),
        (b"*1\r\n$+4\r\nPING\r\n", "ERR Protocol error: invalid bulk length"),
        (
            b"*2\r\n$4\r\nECHO\r\nx\r\n",
            "ERR Protocol error: expected '$', got 'x'",
        ),
        (
            too_long_count.as_bytes(),
            "ERR Protocol error: too big mbulk count string",
        ),
        (too_long_len.as_bytes(), "ERR Protocol error: too big bulk count string"),
    ];
    for (bytes, expected) in cases {
        let mut raw = RawResp::connect(gateway.resp_addr()).await;
        let (reply, closed) = refused(&mut raw, bytes).await;
        let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(40)]).into_owned();
        assert_eq!(reply, expected, "{shown:?}");
        assert!(closed, "{shown:?} closes the connection");
    }
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["PING"]).await, PONG());
}

/// Bad frames in a row, from connections that then go away, leave no CLIENT LIST entry and no
/// --resp-max-clients slot behind (they used to panic their task, which kept both).
#[tokio::test]
async fn bad_frames_leak_no_client_slots() {
    let gateway = TestGateway::with_resp(&["--resp-max-clients", "4"]).await;
    for _ in 0..20 {
        let mut raw = RawResp::connect(gateway.resp_addr()).await;
        raw.send(b"*0\r\n*-1\r\n*-10\r\n*1\r\n$-2\r\n").await;
        assert!(raw.closed().await, "a bad frame closes the connection");
    }
    // Closed connections leave the registry as soon as their tasks notice.
    let mut raw = common::eventually(Duration::from_secs(10), "a free client slot", || async {
        let mut raw = RawResp::connect(gateway.resp_addr()).await;
        (raw.command(&["PING"]).await == PONG()).then_some(raw)
    })
    .await;
    let mut others = Vec::new();
    for _ in 0..3 {
        let mut other = RawResp::connect(gateway.resp_addr()).await;
        assert_eq!(other.command(&["PING"]).await, PONG());
        others.push(other);
    }
    assert_eq!(client_count(&mut raw).await, 4);
    drop(others);
    let mut count = 4;
    for _ in 0..200 {
        count = client_count(&mut raw).await;
        if count == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(count, 1, "only this client is left");
}

#[tokio::test]
async fn before_auth_requests_are_limited_as_in_redis() {
    let gateway = TestGateway::with_resp(&["--resp-password", "secret"]).await;
    let addr = gateway.resp_addr();
    let mut raw = RawResp::connect(addr).await;
    let (reply, closed) = refused(&mut raw, b"*11\r\n").await;
    assert_eq!(reply, "ERR Protocol error: unauthenticated multibulk length");
    assert!(closed);
    let mut raw = RawResp::connect(addr).await;
    let (reply, closed) = refused(&mut raw, b"*1\r\n$16385\r\n").await;
    assert_eq!(reply, "ERR Protocol error: unauthenticated bulk length");
    assert!(closed);
    // Within the limits, a command is refused for want of AUTH and the connection stays.
    let mut raw = RawResp::connect(addr).await;
    let ten: Vec<&[u8]> = std::iter::once(&b"MGET"[..]).chain([&b"k"[..]; 9]).collect();
    raw.send(&encode(&ten)).await;
    assert_eq!(raw.reply().await.unwrap().error(), "NOAUTH Authentication required.");
    raw.send(&encode(&[b"ECHO", &vec![b'e'; 16384]])).await;
    assert_eq!(raw.reply().await.unwrap().error(), "NOAUTH Authentication required.");
    // AUTH and, in the same write, what only an authenticated client may send: the request
    // after AUTH is read with the limits of an authenticated client, as in Redis.
    let value = vec![b'v'; 100_000];
    let many: Vec<&[u8]> = std::iter::once(&b"MGET"[..]).chain([&b"big"[..]; 50]).collect();
    let pipeline = [
        encode(&[b"AUTH", b"secret"]),
        encode(&[b"SET", b"big", &value]),
        encode(&many),
    ]
    .concat();
    raw.send(&pipeline).await;
    assert_eq!(raw.reply().await, Some(Value::Simple("OK".into())));
    assert_eq!(raw.reply().await, Some(Value::Simple("OK".into())));
    assert_eq!(raw.reply().await, Some(Value::Array(vec![Value::Bulk(value); 50])));
    // RESET takes the client back to before AUTH, and to its limits.
    assert_eq!(raw.command(&["RESET"]).await, Value::Simple("RESET".into()));
    let (reply, closed) = refused(&mut raw, &encode(&many)).await;
    assert_eq!(reply, "ERR Protocol error: unauthenticated multibulk length");
    assert!(closed);
}

/// A 640,000-key MGET sent in 512-byte writes: parsed in one pass over its bytes (it used to be
/// parsed again from its start on every read, seconds of CPU), and answered right.
#[tokio::test]
async fn a_huge_request_in_small_writes_is_parsed_once() {
    // Its peak (640,000 keys, the request, their parse and the reply) is large and all in this
    // process: never beside the test that measures the process's peak.
    let _large = crate::LARGE_ALLOCATIONS.read().await;
    const KEYS: usize = 640_000;
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["SET", "k7", "seven"]).await, Value::Simple("OK".into()));
    assert_eq!(
        raw.command(&["SET", "k639999", "last"]).await,
        Value::Simple("OK".into())
    );
    drop(raw);

    let keys: Vec<String> = (0..KEYS).map(|i| format!("k{i}")).collect();
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(keys.iter().map(|key| key.as_bytes()));
    let request = encode(&args);
    let mut expected = format!("*{KEYS}\r\n").into_bytes();
    for i in 0..KEYS {
        expected.extend_from_slice(match i {
            7 => b"$5\r\nseven\r\n",
            639_999 => b"$4\r\nlast\r\n",
            _ => b"$-1\r\n",
        });
    }

    let stream = tokio::net::TcpStream::connect(gateway.resp_addr()).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut read, mut write) = stream.into_split();
    let writer = tokio::spawn(async move {
        for piece in request.chunks(512) {
            write.write_all(piece).await.unwrap();
        }
        write
    });
    let mut reply = vec![0; expected.len()];
    tokio::time::timeout(Duration::from_secs(120), read.read_exact(&mut reply))
        .await
        .expect("the reply within 120 s")
        .unwrap();
    assert!(reply == expected, "the MGET's reply");
    let _write = writer.await.unwrap();
}

#[tokio::test]
async fn expiries_beyond_i64_are_refused_and_keep_the_key() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let invalid = |name: &str| format!("ERR invalid expire time in '{name}' command");
    raw.command(&["SET", "k", "v"]).await;
    for args in [
        &["EXPIRE", "k", "9223370399119966"][..],
        &["EXPIRE", "k", "9223372036854776"],
        &["EXPIRE", "k", "-9223372036854776"],
        &["PEXPIRE", "k", "9223372036854770000"],
        &["EXPIREAT", "k", "9223372036854776"],
        &["SET", "k", "v", "EX", "9223372036854776"],
        &["SET", "k", "v", "PX", "9223372036854775807"],
        &["SET", "k", "v", "EXAT", "9223372036854776"],
        &["SET", "k", "v", "EX", "0"],
        &["SET", "k", "v", "PX", "-1"],
        &["GETEX", "k", "EX", "9223372036854776"],
        &["GETEX", "k", "PX", "9223372036854775000"],
        &["GETEX", "k", "PXAT", "0"],
        &["SETEX", "k", "9223372036854776", "v"],
        &["PSETEX", "k", "9223372036854775000", "v"],
    ] {
        let name = args[0].to_ascii_lowercase();
        assert_eq!(raw.command(args).await.error(), invalid(&name), "{args:?}");
        assert_eq!(
            raw.command(&["GET", "k"]).await,
            Value::bulk("v"),
            "{args:?} keeps the key"
        );
        assert_eq!(
            raw.command(&["TTL", "k"]).await,
            Value::Int(-1),
            "{args:?} keeps no TTL"
        );
    }
    // Far but within i64 milliseconds: Redis takes these, and so does pgvs3.
    for args in [
        &["EXPIRE", "k", "9223370399119"][..],
        &["PEXPIREAT", "k", "9223372036854775807"],
        &["SET", "k", "v", "PXAT", "9223372036854775807"],
        &["GETEX", "k", "EXAT", "9223372036854775"],
    ] {
        raw.command(args).await;
        assert_eq!(
            raw.command(&["GET", "k"]).await,
            Value::bulk("v"),
            "{args:?} keeps the key"
        );
        let Value::Int(ttl) = raw.command(&["TTL", "k"]).await else {
            panic!("TTL");
        };
        assert!(ttl > 200_000 * 365 * 86_400, "{args:?}: TTL {ttl}");
        raw.command(&["PERSIST", "k"]).await;
    }
    // A past expiry deletes the key, as in Redis.
    assert_eq!(raw.command(&["EXPIRE", "k", "-9223372036854775"]).await, Value::Int(1));
    assert_eq!(raw.command(&["EXISTS", "k"]).await, Value::Int(0));
}

#[tokio::test]
async fn numbers_at_the_edges_get_redis_texts() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let not_integer = "ERR value is not an integer or out of range";
    raw.command(&["SET", "n", "9223372036854775807"]).await;
    assert_eq!(
        raw.command(&["INCR", "n"]).await.error(),
        "ERR increment or decrement would overflow"
    );
    assert_eq!(
        raw.command(&["DECRBY", "n", "-9223372036854775808"]).await.error(),
        "ERR decrement would overflow"
    );
    assert_eq!(
        raw.command(&["INCRBY", "n", "9223372036854775808"]).await.error(),
        not_integer
    );
    assert_eq!(raw.command(&["GET", "n"]).await, Value::bulk("9223372036854775807"));
    assert_eq!(
        raw.command(&["INCRBYFLOAT", "f", "inf"]).await.error(),
        "ERR increment would produce NaN or Infinity"
    );
    assert_eq!(
        raw.command(&["INCRBYFLOAT", "f", "1e400"]).await.error(),
        "ERR value is not a valid float"
    );
    assert_eq!(
        raw.command(&["INCRBYFLOAT", "f", "nan"]).await.error(),
        "ERR value is not a valid float"
    );
    raw.command(&["SET", "f", "1e308"]).await;
    assert_eq!(
        raw.command(&["INCRBYFLOAT", "f", "1e308"]).await.error(),
        "ERR increment would produce NaN or Infinity"
    );
    raw.command(&["SET", "s", "hello"]).await;
    assert_eq!(
        raw.command(&["SETRANGE", "s", "-1", "x"]).await.error(),
        "ERR offset is out of range"
    );
    for offset in ["536870912", "9223372036854775807"] {
        assert_eq!(
            raw.command(&["SETRANGE", "s", offset, "x"]).await.error(),
            "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
        );
    }
    assert_eq!(
        raw.command(&["SETRANGE", "s", "9223372036854775807", ""]).await,
        Value::Int(5)
    );
    assert_eq!(
        raw.command(&["GETRANGE", "s", "-9223372036854775808", "9223372036854775807"])
            .await,
        Value::bulk("hello")
    );
    assert_eq!(
        raw.command(&["GETRANGE", "s", "9223372036854775807", "-9223372036854775808"])
            .await,
        Value::bulk("")
    );
    for db in ["9223372036854775807", "-1", "4294967296"] {
        assert_eq!(
            raw.command(&["SELECT", db]).await.error(),
            "ERR DB index is out of range"
        );
    }
    assert_eq!(
        raw.command(&["SELECT", "99999999999999999999"]).await.error(),
        not_integer
    );
    assert!(matches!(
        raw.command(&["SCAN", "0", "COUNT", "9223372036854775807"]).await,
        Value::Array(_)
    ));
    assert_eq!(
        raw.command(&["SCAN", "0", "COUNT", "-9223372036854775808"])
            .await
            .error(),
        "ERR syntax error"
    );
    assert_eq!(raw.command(&["SCAN", "-1"]).await.error(), "ERR invalid cursor");
    assert_eq!(
        raw.command(&["HELLO", "9223372036854775807"]).await.error(),
        "NOPROTO unsupported protocol version"
    );
    assert_eq!(
        raw.command(&["PING", "a", "b"]).await.error(),
        "ERR wrong number of arguments for 'ping' command"
    );
    assert_eq!(raw.command(&["PING"]).await, PONG());
}

#[tokio::test]
async fn silent_and_unauthenticated_connections_are_closed() {
    let gateway = TestGateway::with_resp(&[
        "--resp-first-byte-timeout",
        "300ms",
        "--resp-auth-timeout",
        "1s",
        "--resp-password",
        "secret",
    ])
    .await;
    let addr = gateway.resp_addr();
    let mut talking = RawResp::connect(addr).await;
    assert_eq!(talking.command(&["AUTH", "secret"]).await, Value::Simple("OK".into()));
    // Silent from the start: closed after the first-byte timeout.
    let mut silent = RawResp::connect(addr).await;
    assert!(silent.closed().await, "a silent connection is closed");
    // Talking but never authenticating, even when busy: closed after the AUTH timeout.
    let mut unauthenticated = RawResp::connect(addr).await;
    let mut refusals = 0;
    loop {
        unauthenticated.send(&encode(&[b"GET", b"k"])).await;
        match unauthenticated.reply().await {
            Some(reply) => {
                assert_eq!(reply.error(), "NOAUTH Authentication required.");
                refusals += 1;
                assert!(refusals < 1000, "still open after {refusals} refusals");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            None => break,
        }
    }
    // The authenticated client is idle well past both and stays (no idle timeout by default).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(talking.command(&["PING"]).await, PONG());
    let mut count = 0;
    for _ in 0..200 {
        count = client_count(&mut talking).await;
        if count == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(count, 1, "closed connections leave CLIENT LIST");
}

/// The `name:value` field of INFO `section` as a number.
async fn info_field(raw: &mut RawResp, section: &str, name: &str) -> i64 {
    let Value::Bulk(info) = raw.command(&["INFO", section]).await else {
        panic!("INFO is a bulk string")
    };
    let info = String::from_utf8(info).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("{name} in {info}"))
        .parse()
        .unwrap()
}

/// The id of the first entry of XREAD's reply `[[stream, [[id, fields]...]]...]`.
fn first_entry_id(streams: &[Value]) -> String {
    let Some(Value::Array(stream)) = streams.first() else {
        panic!("{streams:?}")
    };
    let Some(Value::Array(entries)) = stream.get(1) else {
        panic!("{stream:?}")
    };
    match entries.first() {
        Some(Value::Array(entry)) => match entry.first() {
            Some(Value::Bulk(id)) => String::from_utf8(id.clone()).unwrap(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn hundreds_of_blocked_clients_hold_no_slot_and_no_database_connection() {
    // The harness's pool of 16 gives 32 admission slots and 64 places to wait for one; a 60 s
    // poll means every waiter below is served by a wakeup.
    let gateway = TestGateway::with_resp(&["--resp-password", "secret", "--resp-block-poll", "60s"]).await;
    let addr = gateway.resp_addr();
    let ok = || Value::Simple("OK".into());
    let mut pusher = RawResp::connect(addr).await;
    assert_eq!(pusher.command(&["AUTH", "secret"]).await, ok());
    assert_eq!(
        pusher.command(&["XGROUP", "CREATE", "gs", "g", "$", "MKSTREAM"]).await,
        ok()
    );
    // 320 waiters, every blocking family: (how many, the command with `{n}` for the waiter).
    let families: [(usize, &str); 5] = [
        (128, "BLPOP jobs 0"),
        (32, "BLMOVE moves moved LEFT RIGHT 0"),
        (64, "BZPOPMIN zjobs 0"),
        (32, "XREAD BLOCK 0 STREAMS s $"),
        (64, "XREADGROUP GROUP g c{n} COUNT 1 BLOCK 0 STREAMS gs >"),
    ];
    let mut waiters: Vec<(usize, RawResp)> = Vec::new();
    for (family, (count, command)) in families.iter().enumerate() {
        for n in 0..*count {
            let mut raw = RawResp::connect(addr).await;
            // Served although every slot's worth of clients before it is blocked.
            assert_eq!(
                raw.command(&["AUTH", "secret"]).await,
                ok(),
                "AUTH of waiter {}",
                waiters.len()
            );
            let command = command.replace("{n}", &n.to_string());
            let args: Vec<&[u8]> = command.split(' ').map(str::as_bytes).collect();
            raw.send(&encode(&args)).await;
            waiters.push((family, raw));
            // Each blocks before the next arrives, as clients that come apart: AUTH takes no
            // admission slot, so nothing else paces them, and 320 first attempts sent at once
            // are more than the 32 slots and 64 places to wait take (the rest are answered BUSY,
            // as admission means them to be).
            let blocked = waiters.len() as i64;
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while info_field(&mut pusher, "clients", "blocked_clients").await != blocked {
                assert!(
                    std::time::Instant::now() < deadline,
                    "waiter {blocked} blocked within 30 s"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    let total = waiters.len() as i64;
    // Waiting, they cost no statement and no connection of their own.
    let sql = gateway.sql().await;
    let busy = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND state <> 'idle'";
    let sql_ref = &sql;
    common::eventually(
        Duration::from_secs(10),
        "no statement runs for the waiters",
        move || async move { (common::query_count(sql_ref, busy, &[]).await == 0).then_some(()) },
    )
    .await;
    let connections = common::query_count(
        &sql,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
        &[],
    )
    .await;
    eprintln!("{total} blocked clients; the gateway's database connections: {connections}");
    assert!(
        connections <= 16 + 8,
        "{connections} database connections for {total} waiters"
    );
    // Everyone else is served, the pushes that wake them included.
    let mut other = RawResp::connect(addr).await;
    assert_eq!(other.command(&["AUTH", "secret"]).await, ok());
    assert_eq!(other.command(&["SET", "k", "v"]).await, ok());
    let jobs: Vec<String> = (0..128).map(|n| format!("job{n}")).collect();
    let mut push = vec!["RPUSH", "jobs"];
    push.extend(jobs.iter().map(String::as_str));
    assert_eq!(pusher.command(&push).await, Value::Int(128));
    for n in 0..32 {
        pusher.command(&["LPUSH", "moves", &format!("m{n}")]).await;
    }
    let mut zadd = vec!["ZADD".to_owned(), "zjobs".to_owned()];
    for n in 0..64 {
        zadd.extend([n.to_string(), format!("z{n}")]);
    }
    let zadd: Vec<&str> = zadd.iter().map(String::as_str).collect();
    assert_eq!(pusher.command(&zadd).await, Value::Int(64));
    let Value::Bulk(entry) = pusher.command(&["XADD", "s", "*", "f", "v"]).await else {
        panic!("XADD answers the id")
    };
    for n in 0..64 {
        pusher.command(&["XADD", "gs", "*", "n", &n.to_string()]).await;
    }
    // Exactly once: every element to one waiter (the stream entry to every XREAD).
    let mut got: Vec<Vec<String>> = vec![Vec::new(); families.len()];
    for (family, raw) in &mut waiters {
        let reply = raw.reply().await.expect("woken");
        let item = match (*family, reply) {
            (0 | 2, Value::Array(items)) => match &items[1] {
                Value::Bulk(item) => String::from_utf8(item.clone()).unwrap(),
                other => panic!("{other:?}"),
            },
            (1, Value::Bulk(item)) => String::from_utf8(item).unwrap(),
            (3 | 4, Value::Array(streams)) => first_entry_id(&streams),
            (family, other) => panic!("family {family}: {other:?}"),
        };
        got[*family].push(item);
    }
    let sorted = |mut items: Vec<String>| {
        items.sort();
        items
    };
    let mut expected_jobs = jobs.clone();
    expected_jobs.sort();
    assert_eq!(sorted(got[0].clone()), expected_jobs);
    assert_eq!(
        sorted(got[1].clone()),
        sorted((0..32).map(|n| format!("m{n}")).collect())
    );
    assert_eq!(
        sorted(got[2].clone()),
        sorted((0..64).map(|n| format!("z{n}")).collect())
    );
    let entry = String::from_utf8(entry).unwrap();
    assert!(got[3].iter().all(|read| *read == entry), "{:?}", got[3]);
    got[4].sort();
    got[4].dedup();
    assert_eq!(got[4].len(), 64, "each group entry to one consumer");
    assert_eq!(info_field(&mut other, "clients", "blocked_clients").await, 0);
}

/// Waits (at most 60 s) until this gateway has `count` blocked clients.
async fn wait_for_blocked(raw: &mut RawResp, count: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while info_field(raw, "clients", "blocked_clients").await != count as i64 {
        assert!(
            std::time::Instant::now() < deadline,
            "{count} clients blocked within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn idle_blocked_clients_cost_no_transactions_while_notifications_work() {
    // A short poll: clients that tried again every `--resp-block-poll` while the LISTEN
    // connection works would commit 5 attempts a second each.
    let gateway = TestGateway::with_resp(&["--resp-block-poll", "200ms"]).await;
    let addr = gateway.resp_addr();
    let mut other = RawResp::connect(addr).await;
    const CLIENTS: usize = 40;
    let mut waiters = Vec::new();
    for n in 0..CLIENTS {
        let mut raw = RawResp::connect(addr).await;
        let key = format!("idle{n}");
        raw.send(&encode(&[b"BLPOP", key.as_bytes(), b"0"])).await;
        waiters.push(raw);
    }
    wait_for_blocked(&mut other, CLIENTS).await;
    // Counted over windows of 2 s (10 polls' worth): the gateway's LISTEN connection may open
    // after the clients blocked (a loaded machine), and its opening has each try once; from
    // then on a window sees next to none. Polling clients would commit ~400 in every one.
    let attempts = "pgvs3_resp_group_committed_batches_total";
    let mut windows = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let before = gateway.metric(attempts).await.unwrap_or(0.0);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = gateway.metric(attempts).await.unwrap_or(0.0);
        windows.push(after - before);
        // A quarter of one attempt per client in 10 polls' worth: polling is 40 times that.
        if after - before < CLIENTS as f64 / 4.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{CLIENTS} idle blocked clients kept trying: write batches per 2 s {windows:?}"
        );
    }
    eprintln!("{CLIENTS} idle blocked clients: write batches per 2 s {windows:?}");
    // One more, woken by a list moved into place (Redis's dbAdd signals it), within a timeout
    // shorter than the untold attempt: only the notification can serve it.
    let mut renamed = RawResp::connect(addr).await;
    renamed.send(&encode(&[b"BLPOP", b"target", b"20"])).await;
    wait_for_blocked(&mut other, CLIENTS + 1).await;
    assert_eq!(other.command(&["RPUSH", "source", "moved"]).await, Value::Int(1));
    assert_eq!(other.command(&["RENAME", "source", "target"]).await, OK());
    assert_eq!(
        renamed.reply().await,
        Some(Value::Array(vec![Value::bulk("target"), Value::bulk("moved")]))
    );
    // And every one is still served by a push at once.
    for (n, raw) in waiters.iter_mut().enumerate() {
        let key = format!("idle{n}");
        assert_eq!(other.command(&["RPUSH", &key, "x"]).await, Value::Int(1));
        assert_eq!(
            raw.reply().await,
            Some(Value::Array(vec![Value::bulk(&key), Value::bulk("x")]))
        );
    }
}

/// Times of one operation at three sizes, each double the one before, grow as linear work
/// does: loose (linear work is 2x per doubling, quadratic 4x; the machine may be busy).
fn assert_grows_linearly(what: &str, times: &[f64]) {
    let per_doubling = (times[2] / times[0]).sqrt();
    eprintln!("{what}: {times:.3?} s, {per_doubling:.2}x per doubling");
    assert!(per_doubling < 3.5, "{what}: {per_doubling:.2}x per doubling: {times:?}");
}

#[tokio::test]
async fn hset_time_grows_linearly_with_its_fields() {
    // Commands of tens of thousands of arguments: not beside the test that measures the peak.
    let _large = crate::LARGE_ALLOCATIONS.read().await;
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let mut times = Vec::new();
    for fields in [10_000usize, 20_000, 40_000] {
        let key = format!("h{fields}");
        let pairs: Vec<String> = (0..fields)
            .flat_map(|n| [format!("field{n}"), format!("v{n}")])
            .collect();
        let mut args: Vec<&[u8]> = vec![b"HSET", key.as_bytes()];
        args.extend(pairs.iter().map(|arg| arg.as_bytes()));
        let started = std::time::Instant::now();
        raw.send(&encode(&args)).await;
        assert_eq!(raw.reply().await, Some(Value::Int(fields as i64)));
        times.push(started.elapsed().as_secs_f64());
    }
    // Quadratic work (it was) is 4x per doubling.
    assert_grows_linearly("HSET of 10k, 20k, 40k fields", &times);
}

#[tokio::test]
async fn stream_restore_time_grows_linearly_with_its_entries() {
    // Commands of tens of thousands of arguments: not beside the test that measures the peak.
    let _large = crate::LARGE_ALLOCATIONS.read().await;
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let value = "v".repeat(512);
    let mut times = Vec::new();
    for entries in [5_000usize, 10_000, 20_000] {
        let key = format!("s{entries}");
        // One pipeline of XADDs (the gateway may run them as one call), then the stream's
        // DUMP restored under another name: one call with every entry.
        let mut pipeline = Vec::new();
        for n in 0..entries {
            pipeline.extend(encode(&[
                b"XADD",
                key.as_bytes(),
                b"*",
                format!("f{n}").as_bytes(),
                value.as_bytes(),
            ]));
        }
        raw.send(&pipeline).await;
        for _ in 0..entries {
            assert!(matches!(raw.reply().await, Some(Value::Bulk(_))));
        }
        let Value::Bulk(payload) = raw.command(&["DUMP", &key]).await else {
            panic!("DUMP of {key}")
        };
        let copy = format!("copy{entries}");
        let started = std::time::Instant::now();
        raw.send(&encode(&[b"RESTORE", copy.as_bytes(), b"0", &payload])).await;
        assert_eq!(raw.reply().await, Some(OK()));
        times.push(started.elapsed().as_secs_f64());
        assert_eq!(raw.command(&["XLEN", &copy]).await, Value::Int(entries as i64));
        // The last entry, whole: its fields were cut from the right place in the arguments.
        let last = raw.command(&["XREVRANGE", &copy, "+", "-", "COUNT", "1"]).await;
        let expected = Value::Array(vec![Value::bulk(&format!("f{}", entries - 1)), Value::bulk(&value)]);
        match &last {
            Value::Array(items) if items.len() == 1 => match &items[0] {
                Value::Array(entry) => assert_eq!(entry.get(1), Some(&expected), "{last:?}"),
                other => panic!("XREVRANGE's entry: {other:?}"),
            },
            other => panic!("XREVRANGE: {other:?}"),
        }
    }
    // Quadratic work (a slice of the arguments per entry was) is 4x per doubling.
    assert_grows_linearly("RESTORE of 5k, 10k, 20k entries", &times);
}

#[tokio::test]
async fn zadd_time_grows_linearly_with_its_members() {
    // Commands of tens of thousands of arguments: not beside the test that measures the peak.
    let _large = crate::LARGE_ALLOCATIONS.read().await;
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let mut times = Vec::new();
    for members in [10_000usize, 20_000, 40_000] {
        let key = format!("z{members}");
        let pairs: Vec<String> = (0..members)
            .flat_map(|n| [format!("{}", n % 97), format!("member{n}")])
            .collect();
        let mut args: Vec<&[u8]> = vec![b"ZADD", key.as_bytes()];
        args.extend(pairs.iter().map(|arg| arg.as_bytes()));
        let started = std::time::Instant::now();
        raw.send(&encode(&args)).await;
        assert_eq!(raw.reply().await, Some(Value::Int(members as i64)));
        times.push(started.elapsed().as_secs_f64());
    }
    // Quadratic work (it was) is 4x per doubling.
    assert_grows_linearly("ZADD of 10k, 20k, 40k members", &times);
}

/// The backend (pid) of the statement waiting on a lock, once there is one.
async fn lock_waiter(watch: &tokio_postgres::Client) -> i32 {
    common::eventually(Duration::from_secs(10), "a statement waiting on the lock", || async {
        watch
            .query_opt(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .map(|row| row.get::<_, i32>("pid"))
    })
    .await
}

/// Until backend `pid` is gone from pg_stat_activity (its connection closed).
async fn backend_gone(watch: &tokio_postgres::Client, pid: i32) {
    common::eventually(
        Duration::from_secs(10),
        "the abandoned statement's backend gone",
        || async {
            let left =
                common::query_count(watch, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", &[&pid]).await;
            (left == 0).then_some(())
        },
    )
    .await;
}

/// A client that goes away while its command runs in PostgreSQL (here: waits on a lock, as a
/// huge command would run) has the statement cancelled: its backend is gone at once instead of
/// running to the end, and its write never lands.
#[tokio::test]
async fn a_disconnected_clients_statement_is_cancelled() {
    let gateway = TestGateway::with_resp(&[]).await;
    let (lock, watch) = (gateway.sql().await, gateway.sql().await);
    lock.batch_execute("BEGIN; LOCK TABLE pgvs3.resp_zset IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    raw.send(&encode(&[b"ZADD", b"z", b"1", b"a"])).await;
    let pid = lock_waiter(&watch).await;
    drop(raw);
    backend_gone(&watch, pid).await;
    lock.batch_execute("ROLLBACK").await.unwrap();
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["ZCARD", "z"]).await, Value::Int(0));
    assert_eq!(raw.command(&["ZADD", "z", "1", "a"]).await, Value::Int(1));
}

/// A client that sends its commands and then half-closes (`nc -N`, socat, a script's
/// `shutdown(SHUT_WR)`) still reads: as in Redis, the commands it sent before the end of its
/// input run and are answered, not cancelled as a gone client's.
#[tokio::test]
async fn a_half_closed_client_gets_its_commands_run_and_answered() {
    let gateway = TestGateway::with_resp(&[]).await;
    for round in 0..10 {
        let mut socket = tokio::net::TcpStream::connect(gateway.resp_addr()).await.unwrap();
        let key = format!("half-closed-{round}");
        let mut pipeline = encode(&[b"SET", key.as_bytes(), b"v"]);
        pipeline.extend_from_slice(&encode(&[b"ZADD", b"z", b"1", key.as_bytes()]));
        pipeline.extend_from_slice(&encode(&[b"GET", key.as_bytes()]));
        socket.write_all(&pipeline).await.unwrap();
        socket.shutdown().await.unwrap();
        let mut answers = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answers))
            .await
            .expect("the gateway answers and closes")
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&answers),
            "+OK\r\n:1\r\n$1\r\nv\r\n",
            "round {round}"
        );
    }
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["ZCARD", "z"]).await, Value::Int(10));
}

/// `--resp-read-timeout` and `--resp-write-timeout`: a command past its limit answers an error,
/// and its statement is cancelled (its backend gone, its write rolled back).
#[tokio::test]
async fn commands_past_their_time_limit_are_cancelled() {
    let gateway = TestGateway::with_resp(&["--resp-read-timeout", "1s", "--resp-write-timeout", "1s"]).await;
    let (lock, watch) = (gateway.sql().await, gateway.sql().await);
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["ZADD", "z", "1", "a"]).await, Value::Int(1));
    lock.batch_execute("BEGIN; LOCK TABLE pgvs3.resp_zset IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    for (command, flag) in [
        (&["ZADD", "z", "2", "b"][..], "--resp-write-timeout"),
        (&["ZCARD", "z"], "--resp-read-timeout"),
    ] {
        let started = std::time::Instant::now();
        let reply = raw.command(command).await;
        assert_eq!(
            reply.error(),
            format!("ERR command timed out after 1 s ({flag}) and was cancelled"),
            "{command:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(10), "{command:?}");
    }
    common::eventually(Duration::from_secs(10), "no statement waiting on the lock", || async {
        (common::lock_waiters(&watch).await == 0).then_some(())
    })
    .await;
    lock.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(raw.command(&["ZCARD", "z"]).await, Value::Int(1));
}

/// Connections whose writes share one commit do not each have their own fate: a write answered
/// "cancelled" at its time limit must never commit, and one whose shared batch commits must
/// not be answered "cancelled". Here C's batch waits on a lock past the limit (cancelled);
/// A's and B's writes, queued behind it, then share the next batch, which is still waiting
/// when A's own deadline passes (B's is later) and commits once the lock goes.
#[tokio::test]
async fn a_write_answered_cancelled_never_commits() {
    let limit = Duration::from_secs(2);
    let gateway = TestGateway::with_resp(&["--resp-write-timeout", "2s"]).await;
    let (lock, watch) = (gateway.sql().await, gateway.sql().await);
    let mut check = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(check.command(&["ZADD", "z", "0", "first"]).await, Value::Int(1));
    lock.batch_execute("BEGIN; LOCK TABLE pgvs3.resp_zset IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let t0 = tokio::time::Instant::now();
    let mut writers = Vec::new();
    for (member, after) in [("c", 0), ("a", 500), ("b", 1500)] {
        tokio::time::sleep_until(t0 + Duration::from_millis(after)).await;
        let mut raw = RawResp::connect(gateway.resp_addr()).await;
        raw.send(&encode(&[b"ZADD", b"z", b"1", member.as_bytes()])).await;
        if member == "c" {
            lock_waiter(&watch).await;
        }
        writers.push((member, raw));
    }
    // Past A's deadline (its batch started before it, when C's was cancelled at about 2 s),
    // before the batch's own (about 4 s).
    tokio::time::sleep_until(t0 + Duration::from_millis(500) + limit + Duration::from_millis(300)).await;
    lock.batch_execute("ROLLBACK").await.unwrap();
    let cancelled = "ERR command timed out after 2 s (--resp-write-timeout) and was cancelled";
    let mut answers = Vec::new();
    for (member, mut raw) in writers {
        let reply = raw.reply().await.expect("a reply");
        let score = check.command(&["ZSCORE", "z", member]).await;
        match &reply {
            Value::Int(1) => assert_eq!(score, Value::Bulk(b"1".to_vec()), "{member} answered 1"),
            Value::Error(error) if error == cancelled => assert_eq!(score, Value::Nil, "{member} answered cancelled"),
            other => panic!("{member}: {other:?}"),
        }
        answers.push((member, reply));
    }
    assert!(t0.elapsed() < Duration::from_secs(10));
    // C's batch ran alone past the limit; what the others got depends on the scheduling, but
    // never a cancellation that committed (checked above).
    assert_eq!(answers[0].1.error(), cancelled, "{answers:?}");
}

/// A MULTI queue is bounded: at most 100,000 commands (the next one is refused and fails the
/// transaction, as an error while queueing does in Redis), and its bytes beyond 1 MiB come
/// out of the buffer budget (given back when the transaction ends).
#[tokio::test]
async fn multi_queues_are_bounded_in_count_and_bytes() {
    let _large = crate::LARGE_ALLOCATIONS.read().await;
    let gateway = TestGateway::with_resp(&["--buffer-budget", "40MiB"]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["MULTI"]).await, OK());
    // In pipelines of 1,000, each read back before the next: one of 100,000 would fill both
    // sockets' buffers (the client not reading its replies while it sends) and stall.
    let pipeline: Vec<u8> = (0..1000).flat_map(|_| encode(&[b"INCR", b"n"])).collect();
    for _ in 0..100 {
        raw.send(&pipeline).await;
        for _ in 0..1000 {
            assert_eq!(raw.reply().await, Some(Value::Simple("QUEUED".into())));
        }
    }
    let refused = raw.command(&["INCR", "n"]).await;
    assert_eq!(
        refused.error(),
        "ERR MULTI queue full: at most 100000 commands, 4194304 arguments and 536870912 bytes per transaction"
    );
    assert_eq!(
        raw.command(&["EXEC"]).await.error(),
        "EXECABORT Transaction discarded because of previous errors."
    );
    assert_eq!(raw.command(&["GET", "n"]).await, Value::Nil);

    // 1 MiB values: the queue passes its 1 MiB allowance and the 40 MiB budget.
    let value = vec![b'v'; 1024 * 1024];
    assert_eq!(raw.command(&["MULTI"]).await, OK());
    let mut errors = Vec::new();
    for n in 0..48 {
        let key = format!("big{n}");
        raw.send(&encode(&[b"SET", key.as_bytes(), &value])).await;
        match raw.reply().await.expect("a reply") {
            Value::Simple(queued) if queued == "QUEUED" => {}
            other => errors.push(other.error().to_owned()),
        }
    }
    assert!(!errors.is_empty(), "48 MiB queued against a 40 MiB budget");
    assert!(
        errors[0].starts_with("OOM command not allowed: the MULTI queue"),
        "{errors:?}"
    );
    assert_eq!(
        raw.command(&["EXEC"]).await.error(),
        "EXECABORT Transaction discarded because of previous errors."
    );
    // The budget is back: a transaction that fits runs.
    assert_eq!(raw.command(&["MULTI"]).await, OK());
    for n in 0..4 {
        let key = format!("big{n}");
        raw.send(&encode(&[b"SET", key.as_bytes(), &value])).await;
        assert_eq!(raw.reply().await, Some(Value::Simple("QUEUED".into())));
    }
    assert_eq!(raw.command(&["EXEC"]).await, Value::Array(vec![OK(); 4]));
}

/// This process's resident set and its peak since [`reset_peak_rss`] (the gateway runs in it).
/// WATCHed keys are bounded per connection (each is a registration row until EXEC, DISCARD,
/// UNWATCH or the connection's end): past 100,000 WATCH is refused and watches nothing more,
/// the keys already watched still guard EXEC, and UNWATCH makes room again.
#[tokio::test]
async fn watched_keys_are_bounded_per_connection() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let mut other = RawResp::connect(gateway.resp_addr()).await;
    let keys: Vec<String> = (0..50_000).map(|n| format!("w{n}")).collect();
    for half in [&keys[..25_000], &keys[25_000..]] {
        let mut watch = vec!["WATCH"];
        watch.extend(half.iter().map(String::as_str));
        assert_eq!(raw.command(&watch).await, OK());
        assert_eq!(raw.command(&watch).await, OK(), "repeats count, and are allowed");
    }
    let refused = raw.command(&["WATCH", "one-more"]).await;
    assert_eq!(
        refused.error(),
        "ERR WATCH limit reached: at most 100000 keys watched per connection until EXEC, DISCARD or UNWATCH"
    );
    // What was watched before the refusal still guards EXEC; the refused key does not.
    assert_eq!(other.command(&["SET", "one-more", "x"]).await, OK());
    assert_eq!(raw.command(&["MULTI"]).await, OK());
    assert_eq!(raw.command(&["SET", "done", "1"]).await, Value::Simple("QUEUED".into()));
    assert_eq!(raw.command(&["EXEC"]).await, Value::Array(vec![OK()]));
    assert_eq!(raw.command(&["WATCH", "w49999"]).await, OK());
    assert_eq!(other.command(&["SET", "w49999", "x"]).await, OK());
    assert_eq!(raw.command(&["MULTI"]).await, OK());
    assert_eq!(raw.command(&["SET", "done", "2"]).await, Value::Simple("QUEUED".into()));
    assert_eq!(raw.command(&["EXEC"]).await, Value::Nil);
    assert_eq!(raw.command(&["GET", "done"]).await, Value::Bulk(b"1".to_vec()));
}

fn rss_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    kib * 1024
}

fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting the peak resident set");
}

/// Sends `command key element...` with the elements in commands of 100, each answered.
async fn fill(raw: &mut RawResp, command: &[&[u8]], elements: &[Vec<u8>]) {
    for chunk in elements.chunks(100) {
        let mut args: Vec<&[u8]> = command.to_vec();
        args.extend(chunk.iter().map(Vec::as_slice));
        raw.send(&encode(&args)).await;
        let reply = raw.reply().await.expect("a reply");
        assert!(matches!(reply, Value::Int(_)), "{reply:?}");
    }
}

/// `count` distinct elements of `size` bytes, each starting with its number.
fn elements(count: usize, size: usize, seed: u64) -> Vec<Vec<u8>> {
    (0..count)
        .map(|n| {
            let mut element = format!("{n:08}").into_bytes();
            element.extend(common::noise(size - 8, seed + n as u64));
            element
        })
        .collect()
}

/// Whether `args` (sent on a fresh connection) gets its connection closed without a reply.
async fn closed_without_reply(gateway: &TestGateway, args: &[&str]) -> bool {
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
    raw.send(&encode(&args)).await;
    raw.reply().await.is_none()
}

#[tokio::test]
async fn replies_past_the_output_limit_close_the_connection_as_redis_does() {
    let gateway = TestGateway::with_resp(&["--resp-output-limit", "1MiB"]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    match raw.command(&["CONFIG", "GET", "client-output-buffer-limit"]).await {
        Value::Array(pair) => assert_eq!(
            pair[1],
            Value::bulk("normal 1048576 0 0 slave 268435456 67108864 60 pubsub 33554432 33554432 0")
        ),
        other => panic!("CONFIG GET: {other:?}"),
    }
    // 4,000 elements of 1,000 bytes: about 4 MB as a reply, in every collection type.
    let members = elements(4000, 1000, 1);
    fill(&mut raw, &[b"RPUSH", b"list"], &members).await;
    fill(&mut raw, &[b"SADD", b"set"], &members).await;
    let pairs: Vec<Vec<u8>> = members
        .iter()
        .enumerate()
        .flat_map(|(n, member)| [n.to_string().into_bytes(), member.clone()])
        .collect();
    fill(&mut raw, &[b"ZADD", b"zset"], &pairs).await;
    fill(&mut raw, &[b"HSET", b"hash"], &pairs).await;
    for member in &members {
        raw.send(&encode(&[b"XADD", b"stream", b"*", b"f", member])).await;
    }
    for _ in &members {
        assert!(matches!(raw.reply().await, Some(Value::Bulk(_))));
    }
    for command in [
        &["LRANGE", "list", "0", "-1"][..],
        &["SMEMBERS", "set"],
        &["SUNION", "set", "set"],
        &["ZRANGE", "zset", "0", "-1"],
        &["HGETALL", "hash"],
        &["HVALS", "hash"],
        &["XRANGE", "stream", "-", "+"],
        &["EVAL", "return 1", "0"],
    ] {
        let closed = closed_without_reply(&gateway, command).await;
        assert_eq!(closed, command[0] != "EVAL", "{command:?}");
    }
    // In MULTI, and in a pipeline whose replies together pass the limit (Redis too counts
    // what one read's commands answer before it writes).
    let mut multi = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(multi.command(&["MULTI"]).await, OK());
    assert_eq!(
        multi.command(&["LRANGE", "list", "0", "-1"]).await,
        Value::Simple("QUEUED".into())
    );
    multi.send(&encode(&[b"EXEC"])).await;
    assert_eq!(multi.reply().await, None, "EXEC of a reply past the limit");
    let mut pipelined = RawResp::connect(gateway.resp_addr()).await;
    let half = [
        encode(&[b"LRANGE", b"list", b"0", b"599"]),
        encode(&[b"LRANGE", b"list", b"0", b"599"]),
    ]
    .concat();
    pipelined.send(&half).await;
    assert_eq!(pipelined.reply().await, None, "two replies of 600 KB pipelined");

    // Just under the limit the reply arrives whole and exact: 1,039 elements of 1,000 bytes
    // are 1,048,358 bytes of reply; 1,040 are 1,049,367.
    let mut under = RawResp::connect(gateway.resp_addr()).await;
    let expected: Vec<Value> = members[..1039]
        .iter()
        .map(|member| Value::Bulk(member.clone()))
        .collect();
    assert_eq!(
        under.command(&["LRANGE", "list", "0", "1038"]).await,
        Value::Array(expected)
    );
    assert!(closed_without_reply(&gateway, &["LRANGE", "list", "0", "1039"]).await);
    // The others were not disturbed, and the limit is counted per batch.
    assert_eq!(raw.command(&["LLEN", "list"]).await, Value::Int(4000));
    assert_eq!(
        under.command(&["LINDEX", "list", "3999"]).await,
        Value::Bulk(members[3999].clone())
    );
    assert!(gateway.metric("pgvs3_resp_client_output_limit_closed_total").await >= Some(10.0));
}

#[tokio::test]
async fn a_huge_whole_collection_reply_never_comes_into_memory() {
    // Alone among the tests that hold tens of MiB: the peak below is the whole process's.
    let _alone = crate::LARGE_ALLOCATIONS.write().await;
    let gateway = TestGateway::with_resp(&["--resp-output-limit", "1MiB"]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    // 160 MiB of list: 1,280 elements of 128 KiB (incompressible), 16 MiB a command.
    let element_size = 128 * 1024;
    for batch in 0..10 {
        let chunk = elements(128, element_size, batch * 1000);
        let mut args: Vec<&[u8]> = vec![b"RPUSH", b"big"];
        args.extend(chunk.iter().map(Vec::as_slice));
        raw.send(&encode(&args)).await;
        assert!(matches!(raw.reply().await, Some(Value::Int(_))));
    }
    let before = rss_bytes("VmRSS:");
    reset_peak_rss();
    assert!(closed_without_reply(&gateway, &["LRANGE", "big", "0", "-1"]).await);
    let grown = rss_bytes("VmHWM:").saturating_sub(before);
    // Read whole, the reply would take 160 MiB at least (before, 450 MiB and more).
    assert!(
        grown < 48 << 20,
        "the gateway grew by {} MiB for a reply past a 1 MiB limit",
        grown >> 20
    );
    assert_eq!(raw.command(&["LLEN", "big"]).await, Value::Int(1280));
}

#[tokio::test]
async fn a_large_reply_is_read_within_the_buffer_budget() {
    let _large = crate::LARGE_ALLOCATIONS.read().await;
    let gateway = TestGateway::with_resp(&["--buffer-budget", "10MiB"]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    // Replies of about 3 MB and 4 MB: past the 1 MiB a reply may take without budget, so each
    // reserves about three times its size (the row, its elements, their encoding).
    let members = elements(4000, 1000, 7);
    fill(&mut raw, &[b"RPUSH", b"three"], &members[..3000]).await;
    fill(&mut raw, &[b"RPUSH", b"four"], &members).await;
    let expected: Vec<Value> = members[..3000]
        .iter()
        .map(|member| Value::Bulk(member.clone()))
        .collect();
    // Twice: the first reply's budget is given back once it is written.
    for _ in 0..2 {
        assert_eq!(
            raw.command(&["LRANGE", "three", "0", "-1"]).await,
            Value::Array(expected.clone())
        );
    }
    assert_eq!(
        raw.command(&["LRANGE", "four", "0", "-1"]).await.error(),
        "OOM command not allowed: the reply does not fit in the server's buffer budget now, retry later"
    );
    // Refused, not closed; and what fits is still served.
    assert_eq!(raw.command(&["LLEN", "four"]).await, Value::Int(4000));
    assert_eq!(
        raw.command(&["LRANGE", "four", "0", "0"]).await,
        Value::Array(vec![Value::Bulk(members[0].clone())])
    );
    assert_eq!(
        gateway
            .metric("pgvs3_buffer_budget_exhausted_total{use=\"resp_reply\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(gateway.metric("pgvs3_buffer_bytes_in_use").await, Some(0.0));
}

/// An index or count of -2^63 on a list answers as Redis does (nil, an empty array, every match
/// removed from the tail); the list functions computed past bigint's range and answered
/// `ERR database error: bigint out of range`.
#[tokio::test]
async fn list_indexes_at_the_end_of_the_integer_range_answer_as_redis() {
    const MIN: &str = "-9223372036854775808";
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(con.command(&["RPUSH", "l", "x", "y", "x", "z"]).await, Value::Int(4));
    assert_eq!(con.command(&["LINDEX", "l", MIN]).await, Value::Nil);
    assert_eq!(con.command(&["LRANGE", "l", "1", MIN]).await, Value::Array(Vec::new()));
    assert_eq!(
        con.command(&["LSET", "l", MIN, "w"]).await,
        Value::Error("ERR index out of range".into())
    );
    assert_eq!(con.command(&["LREM", "l", MIN, "x"]).await, Value::Int(2));
    assert_eq!(
        con.command(&["LRANGE", "l", "0", "-1"]).await,
        Value::Array(vec![Value::bulk("y"), Value::bulk("z")])
    );
}

/// ZRANGE to rank 2^63 - 1 answers the whole set, as Redis; its count passed bigint's range in
/// the sorted-set function (`ERR database error: bigint out of range`).
#[tokio::test]
async fn a_rank_range_to_the_end_of_the_integer_range_answers_the_whole_set() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(con.command(&["ZADD", "z", "1", "a", "2", "b"]).await, Value::Int(2));
    assert_eq!(
        con.command(&["ZRANGE", "z", "0", "9223372036854775807"]).await,
        Value::Array(vec![Value::bulk("a"), Value::bulk("b")])
    );
}
