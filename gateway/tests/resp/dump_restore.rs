//! DUMP and RESTORE with Redis's payload, both ways with a redis-server 7.0.15 started for the
//! test (pgvs3-testkit's resp::live): what redis-server dumps (its integer, LZF, listpack, intset and
//! quicklist encodings) restores here, and what pgvs3 dumps restores there, with the same
//! contents read back (streams too, with their groups, PELs and consumers, and the same bytes
//! where no time is in them); RESTORE's options and errors as redis-server answers them. Also OBJECT
//! HELP and FREQ.

use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::{RawResp, Value, encode};

use common::resp::live::{LiveRedis, same_replies};

async fn call(server: &mut RawResp, args: &[&[u8]]) -> Value {
    server.send(&encode(args)).await;
    server.reply().await.expect("a reply")
}

async fn dump(server: &mut RawResp, key: &str) -> Vec<u8> {
    match call(server, &[b"DUMP", key.as_bytes()]).await {
        Value::Bulk(payload) => payload,
        other => panic!("DUMP {key}: {other:?}"),
    }
}

/// Fills the same keys on a server: every encoding redis-server 7.0 dumps.
async fn fill(server: &mut RawResp) {
    let long = "abc".repeat(200);
    let many: Vec<String> = (0..600)
        .map(|n| format!("element-{n}-{}", "x".repeat(n % 50)))
        .collect();
    let mut commands: Vec<Vec<String>> = vec![
        vec!["SET".into(), "int".into(), "12345".into()],
        vec!["SET".into(), "negative".into(), "-70000".into()],
        vec!["SET".into(), "text".into(), "hello world".into()],
        vec!["SET".into(), "compressible".into(), long],
        vec![
            "RPUSH".into(),
            "small-list".into(),
            "a".into(),
            "1".into(),
            "-300".into(),
            "70000".into(),
            "b".into(),
        ],
        vec![
            "SADD".into(),
            "ints".into(),
            "1".into(),
            "2".into(),
            "-5".into(),
            "100000".into(),
        ],
        vec!["SADD".into(), "names".into(), "a".into(), "b".into(), "c".into()],
        vec![
            "ZADD".into(),
            "small-zset".into(),
            "1".into(),
            "a".into(),
            "2.5".into(),
            "b".into(),
            "-inf".into(),
            "c".into(),
        ],
        vec![
            "HSET".into(),
            "small-hash".into(),
            "f".into(),
            "v".into(),
            "n".into(),
            "12".into(),
        ],
    ];
    let mut big_list = vec!["RPUSH".to_owned(), "big-list".to_owned()];
    big_list.extend(many.iter().cloned());
    let mut big_set = vec!["SADD".to_owned(), "big-set".to_owned()];
    big_set.extend(many.iter().cloned());
    let mut big_zset = vec!["ZADD".to_owned(), "big-zset".to_owned()];
    let mut big_hash = vec!["HSET".to_owned(), "big-hash".to_owned()];
    for (n, member) in many.iter().enumerate() {
        big_zset.extend([format!("{}.25", n), member.clone()]);
        big_hash.extend([member.clone(), n.to_string()]);
    }
    commands.extend([big_list, big_set, big_zset, big_hash]);
    for command in commands {
        let words: Vec<&[u8]> = command.iter().map(|word| word.as_bytes()).collect();
        assert!(!matches!(call(server, &words).await, Value::Error(_)), "{command:?}");
    }
}

const KEYS: &[&str] = &[
    "int",
    "negative",
    "text",
    "compressible",
    "small-list",
    "ints",
    "names",
    "small-zset",
    "small-hash",
    "big-list",
    "big-set",
    "big-zset",
    "big-hash",
];

/// What both must answer the same for the restored keys (sets and hashes in a fixed order).
async fn same_contents(ours: &mut RawResp, theirs: &mut RawResp) {
    for &key in KEYS {
        same_replies(ours, theirs, &[&["TYPE", key], &["PTTL", key]]).await;
        let read: &[&str] = match key {
            "int" | "negative" | "text" | "compressible" => &["GET", key],
            "small-list" | "big-list" => &["LRANGE", key, "0", "-1"],
            "ints" | "names" | "big-set" => &["SORT", key, "ALPHA"],
            "small-zset" | "big-zset" => &["ZRANGE", key, "0", "-1", "WITHSCORES"],
            _ => &[
                "HMGET",
                key,
                "f",
                "n",
                "element-7-xxxxxxx",
                "element-599-xxxxxxxxx",
                "nope",
            ],
        };
        same_replies(ours, theirs, &[read, &["STRLEN", key], &["HLEN", key]]).await;
    }
}

#[tokio::test]
async fn dump_and_restore_with_redis_server() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;

    // redis-server's payloads restored here.
    fill(&mut theirs).await;
    for key in KEYS {
        let payload = dump(&mut theirs, key).await;
        assert_eq!(
            call(&mut ours, &[b"RESTORE", key.as_bytes(), b"0", &payload]).await,
            Value::Simple("OK".into()),
            "{key}"
        );
    }
    same_contents(&mut ours, &mut theirs).await;

    // pgvs3's payloads restored there (over what it had), with a TTL.
    for key in KEYS {
        let payload = dump(&mut ours, key).await;
        assert_eq!(
            call(&mut theirs, &[b"RESTORE", key.as_bytes(), b"0", &payload, b"REPLACE"]).await,
            Value::Simple("OK".into()),
            "{key}"
        );
    }
    same_contents(&mut ours, &mut theirs).await;
    let payload = dump(&mut ours, "big-zset").await;
    for server in [&mut ours, &mut theirs] {
        assert_eq!(
            call(server, &[b"RESTORE", b"timed", b"100000", &payload]).await,
            Value::Simple("OK".into())
        );
        let Value::Int(ttl) = call(server, &[b"PTTL", b"timed"]).await else {
            panic!("a TTL")
        };
        assert!((90_000..=100_000).contains(&ttl), "{ttl}");
        // Already expired (absolute, in the past): nothing is created, a replaced key is gone.
        assert_eq!(
            call(
                server,
                &[b"RESTORE", b"timed", b"1000", &payload, b"ABSTTL", b"REPLACE"]
            )
            .await,
            Value::Simple("OK".into())
        );
        assert_eq!(call(server, &[b"EXISTS", b"timed"]).await, Value::Int(0));
    }

    // Options and errors as redis-server answers them.
    let mut corrupted = payload.clone();
    corrupted[3] ^= 0xff;
    let mut newer = payload.clone();
    let at = newer.len() - 10;
    newer[at] = 11;
    for args in [
        &[&b"RESTORE"[..], b"text", b"0", &payload][..],
        &[b"RESTORE", b"fresh", b"0", &corrupted],
        &[b"RESTORE", b"fresh", b"0", &newer],
        &[b"RESTORE", b"fresh", b"0", b"short"],
        &[b"RESTORE", b"fresh", b"-1", &payload],
        &[b"RESTORE", b"fresh", b"x", &payload],
        &[b"RESTORE", b"fresh", b"0", &payload, b"IDLETIME", b"-1"],
        &[b"RESTORE", b"fresh", b"0", &payload, b"FREQ", b"256"],
        &[b"RESTORE", b"fresh", b"0", &payload, b"FREQ", b"1", b"IDLETIME", b"1"],
        &[b"RESTORE", b"fresh", b"0", &payload, b"BOGUS"],
        &[b"RESTORE", b"fresh", b"0", &payload, b"IDLETIME", b"5"],
        &[b"RESTORE", b"fresh2", b"0", &payload, b"FREQ", b"5", b"REPLACE"],
        &[b"DUMP", b"missing"],
        &[b"OBJECT", b"HELP"],
        &[b"OBJECT", b"HELP", b"x"],
        &[b"OBJECT", b"FREQ", b"fresh"],
        &[b"OBJECT", b"FREQ", b"missing"],
        &[b"OBJECT", b"REFCOUNT", b"fresh"],
        &[b"OBJECT", b"NOPE", b"fresh"],
    ] {
        let theirs = call(&mut theirs, args).await;
        assert_eq!(
            call(&mut ours, args).await,
            theirs,
            "{:?}",
            String::from_utf8_lossy(args[0])
        );
    }
    same_replies(&mut ours, &mut theirs, &[&["ZRANGE", "fresh", "0", "3", "WITHSCORES"]]).await;
}

/// Builds the same streams on a server, in nodes of 3 entries: `s` with entries of other fields,
/// one deleted, a group whose PEL two consumers hold and a group that read nothing; `plain`
/// with a group and no consumer (nothing in it depends on the time).
async fn fill_streams(server: &mut RawResp) {
    let long = "a value long enough for the node to be LZF-compressed ".repeat(3);
    let commands: &[&[&str]] = &[
        &["CONFIG", "SET", "stream-node-max-entries", "3"],
        &["XADD", "s", "1-1", "f", "1", "g", "v"],
        &["XADD", "s", "1-2", "f", "2", "g", "w"],
        &["XADD", "s", "2-0", "other", "x"],
        &["XADD", "s", "3-0", "f", "12345678901", "g", &long],
        &["XADD", "s", "4-0", "f", "-7", "g", "z"],
        &["XADD", "s", "5-0", "f", "5", "g", "5"],
        &["XADD", "s", "6-0", "f", "6", "g", "6"],
        &["XDEL", "s", "5-0"],
        &["XGROUP", "CREATE", "s", "grp", "0"],
        &["XGROUP", "CREATE", "s", "late", "$"],
        &["XREADGROUP", "GROUP", "grp", "alice", "COUNT", "2", "STREAMS", "s", ">"],
        &["XREADGROUP", "GROUP", "grp", "bob", "COUNT", "2", "STREAMS", "s", ">"],
        &["XACK", "s", "grp", "1-2"],
        &["XGROUP", "CREATECONSUMER", "s", "grp", "idle"],
        &["XADD", "plain", "10-1", "name", "a", "n", "1"],
        &["XADD", "plain", "10-2", "name", "b", "n", "-300"],
        &["XADD", "plain", "11-0", "name", "c", "n", "70000", "extra", &long],
        &["XADD", "plain", "12-0", "name", "d", "n", "4"],
        &["XGROUP", "CREATE", "plain", "readers", "10-2"],
        &["XGROUP", "CREATE", "plain", "123", "$"],
        &["CONFIG", "SET", "stream-node-max-entries", "100"],
    ];
    for command in commands {
        let words: Vec<&[u8]> = command.iter().map(|word| word.as_bytes()).collect();
        assert!(!matches!(call(server, &words).await, Value::Error(_)), "{command:?}");
    }
}

/// A reply without the fields one side has and the other not, wherever they are: pgvs3's
/// `active-time` (Redis 7.2's, not 7.0's) and the radix tree's sizes (pgvs3 counts nodes of 100).
fn comparable(value: Value) -> Value {
    const LEFT_OUT: &[&[u8]] = &[b"active-time", b"radix-tree-keys", b"radix-tree-nodes"];
    match value {
        Value::Array(items) => {
            let mut kept = Vec::new();
            let mut items = items.into_iter();
            while let Some(item) = items.next() {
                if matches!(&item, Value::Bulk(name) if LEFT_OUT.contains(&name.as_slice())) {
                    items.next();
                    continue;
                }
                kept.push(comparable(item));
            }
            Value::Array(kept)
        }
        other => other,
    }
}

async fn same_streams(ours: &mut RawResp, theirs: &mut RawResp) {
    for key in ["s", "plain"] {
        for command in [
            &[&b"XINFO"[..], b"STREAM", key.as_bytes(), b"FULL"][..],
            &[b"XRANGE", key.as_bytes(), b"-", b"+"],
            &[b"XLEN", key.as_bytes()],
            &[b"XPENDING", key.as_bytes(), b"grp"],
            &[b"XINFO", b"GROUPS", key.as_bytes()],
        ] {
            let expected = comparable(call(theirs, command).await);
            assert_eq!(
                comparable(call(ours, command).await),
                expected,
                "{key}: {:?}",
                String::from_utf8_lossy(command[0])
            );
        }
    }
}

/// Redis's crc64 (Jones), to seal a payload changed on purpose.
fn crc64(data: &[u8]) -> u64 {
    let mut crc = 0u64;
    for byte in data {
        crc ^= u64::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x95ac_9329_ac4b_c9b5
            } else {
                crc >> 1
            };
        }
    }
    crc
}

fn sealed(mut body: Vec<u8>) -> Vec<u8> {
    body.extend_from_slice(&10u16.to_le_bytes());
    let crc = crc64(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

#[tokio::test]
async fn streams_dump_and_restore_with_redis_server() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;

    // The same commands, the same payload: a stream whose payload holds no time (no consumer)
    // and no deleted entry.
    fill_streams(&mut ours).await;
    fill_streams(&mut theirs).await;
    assert_eq!(dump(&mut ours, "plain").await, dump(&mut theirs, "plain").await);

    // redis-server's payloads restored here: the same streams, times (delivery, seen) included.
    for key in ["s", "plain"] {
        let payload = dump(&mut theirs, key).await;
        assert_eq!(
            call(&mut ours, &[b"RESTORE", key.as_bytes(), b"0", &payload, b"REPLACE"]).await,
            Value::Simple("OK".into()),
            "{key}"
        );
    }
    same_streams(&mut ours, &mut theirs).await;
    // Nodes as Redis had them: the next entry goes into a new node of `s` (3-0's was full).
    for server in [&mut ours, &mut theirs] {
        call(server, &[b"XADD", b"s", b"7-0", b"f", b"7"]).await;
    }
    // pgvs3's payloads restored there, over what it had.
    for key in ["s", "plain"] {
        let payload = dump(&mut ours, key).await;
        assert_eq!(
            call(&mut theirs, &[b"RESTORE", key.as_bytes(), b"0", &payload, b"REPLACE"]).await,
            Value::Simple("OK".into()),
            "{key}"
        );
    }
    same_streams(&mut ours, &mut theirs).await;

    // A Redis 5 payload (type 15: no entries added, no entries read; an entry deleted, a trim),
    // from Redis's own stream-cgroups tests: the same stream both sides.
    let legacy: &[u8] = b"\x0F\x01\x10\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\xC3\x40\x4A\x40\x57\x16\x57\x00\x00\x00\x23\x00\x02\x01\x04\x01\x01\x01\x84\x64\x61\x74\x61\x05\x00\x01\x03\x01\x00\x20\x01\x03\x81\x61\x02\x04\x20\x0A\x00\x01\x40\x0A\x00\x62\x60\x0A\x00\x02\x40\x0A\x00\x63\x60\x0A\x40\x22\x01\x81\x64\x20\x0A\x40\x39\x20\x0A\x00\x65\x60\x0A\x00\x05\x40\x0A\x00\x66\x20\x0A\x00\xFF\x02\x06\x00\x02\x02\x67\x31\x05\x00\x04\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x01\x03\x63\x31\x31\x3E\xF7\x83\x43\x7A\x01\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x02\x67\x32\x00\x00\x00\x00\x09\x00\x3D\x52\xEF\x68\x67\x52\x1D\xFA";
    for server in [&mut ours, &mut theirs] {
        assert_eq!(
            call(server, &[b"RESTORE", b"x", b"0", legacy]).await,
            Value::Simple("OK".into())
        );
    }
    let full: &[&[u8]] = &[b"XINFO", b"STREAM", b"x", b"FULL"];
    let expected = comparable(call(&mut theirs, full).await);
    assert_eq!(comparable(call(&mut ours, full).await), expected);

    // Hostile payloads: each truncation (sealed again) answers as redis-server does; each bit
    // flipped (sealed again) answers an error or a stream, and the connection goes on.
    let payload = dump(&mut ours, "s").await;
    let body = &payload[..payload.len() - 10];
    for cut in (0..body.len()).step_by(7) {
        let truncated = sealed(body[..cut].to_vec());
        let args: &[&[u8]] = &[b"RESTORE", b"hostile", b"0", &truncated, b"REPLACE"];
        let expected = call(&mut theirs, args).await;
        assert_eq!(call(&mut ours, args).await, expected, "cut at {cut}");
    }
    for at in (0..body.len()).step_by(3) {
        let mut flipped = body.to_vec();
        flipped[at] ^= 0x10;
        let reply = call(&mut ours, &[b"RESTORE", b"hostile", b"0", &sealed(flipped), b"REPLACE"]).await;
        assert!(
            reply == Value::Simple("OK".into()) || reply == Value::Error("ERR Bad data format".into()),
            "flipped at {at}: {reply:?}"
        );
    }
    assert_eq!(call(&mut ours, &[b"PING"]).await, Value::Simple("PONG".into()));
}
