//! DUMP and RESTORE with Redis's payload, both ways with a redis-server 7.0.15 started for the
//! test (pgvs3-testkit's resp::live): what redis-server dumps (its integer, LZF, listpack, intset and
//! quicklist encodings) restores here, and what pgvs3 dumps restores there, with the same
//! contents read back; RESTORE's options and errors as redis-server answers them. Also OBJECT
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

    // A stream is refused with a reason.
    call(&mut ours, &[b"XADD", b"stream", b"*", b"f", b"v"]).await;
    let refused = call(&mut ours, &[b"DUMP", b"stream"]).await;
    assert!(
        refused
            .error()
            .starts_with("ERR DUMP of a stream is not supported by pgvs3"),
        "{refused:?}"
    );
}
