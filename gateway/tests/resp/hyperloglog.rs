//! PFADD, PFCOUNT and PFMERGE over the wire: the values are redis-server 7.0.15's own bytes
//! (sparse and dense) and the counts its counts, compared live (see pgvs3-testkit's resp::live).

use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::{RawResp, Value, encode};

use common::resp::live::{LiveRedis, same_replies};

async fn both(ours: &mut RawResp, theirs: &mut RawResp, words: &[String]) {
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    same_replies(ours, theirs, &[&words[..]]).await;
}

fn pfadd(key: &str, elements: std::ops::Range<u32>) -> Vec<String> {
    ["PFADD".to_owned(), key.to_owned()]
        .into_iter()
        .chain(elements.map(|n| format!("element:{n}")))
        .collect()
}

#[tokio::test]
async fn hyperloglog_values_and_counts_are_redis_server_s() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    // Sparse, then dense past 3000 bytes: every reply and every value the same.
    for start in (0..5000).step_by(250) {
        both(&mut ours, &mut theirs, &pfadd("h", start..start + 250)).await;
        same_replies(&mut ours, &mut theirs, &[&["GET", "h"], &["STRLEN", "h"]]).await;
    }
    both(&mut ours, &mut theirs, &pfadd("h", 0..100)).await;
    both(&mut ours, &mut theirs, &pfadd("small", 4900..5100)).await;
    both(&mut ours, &mut theirs, &pfadd("other", 20_000..20_040)).await;
    same_replies(
        &mut ours,
        &mut theirs,
        &[
            &["GET", "small"],
            &["PFADD", "empty"],
            &["PFADD", "empty"],
            &["GET", "empty"],
            // Merged into a sparse destination, and into a dense one (before any PFCOUNT:
            // redis-server writes the count it computes into the value, pgvs3 does not).
            &["PFMERGE", "sparse", "small", "other"],
            &["GET", "sparse"],
            &["PFMERGE", "dense", "small", "h"],
            &["GET", "dense"],
            &["PFMERGE", "small", "other"],
            &["GET", "small"],
            &["PFMERGE", "created"],
            &["GET", "created"],
            &["PFCOUNT", "h"],
            &["PFCOUNT", "small"],
            &["PFCOUNT", "sparse"],
            &["PFCOUNT", "dense"],
            &["PFCOUNT", "empty"],
            &["PFCOUNT", "missing"],
            &["PFCOUNT", "h", "small", "missing", "other"],
            // Not an HLL.
            &["SET", "text", "hello"],
            &["PFADD", "text", "a"],
            &["PFCOUNT", "text"],
            &["PFCOUNT", "h", "text"],
            &["PFMERGE", "h", "text"],
            &["SET", "int", "12345"],
            &["PFCOUNT", "int"],
            &["RPUSH", "list", "a"],
            &["PFADD", "list", "a"],
            &["PFCOUNT", "list"],
            &["PFMERGE", "out", "list"],
            &["PFADD"],
        ],
    )
    .await;
    // redis-server's value (its count cached by PFCOUNT) SET here counts and grows the same.
    let Value::Bulk(from_redis) = theirs.command(&["GET", "h"]).await else {
        panic!("an HLL value")
    };
    ours.send(&encode(&[b"SET", b"h", &from_redis])).await;
    assert_eq!(ours.reply().await, Some(Value::Simple("OK".into())));
    same_replies(&mut ours, &mut theirs, &[&["PFCOUNT", "h"], &["GET", "h"]]).await;
    both(&mut ours, &mut theirs, &pfadd("h", 7000..7100)).await;
    same_replies(&mut ours, &mut theirs, &[&["GET", "h"], &["PFCOUNT", "h"]]).await;

    // A sparse HLL whose opcodes cover fewer registers than it has: corrupted, in both.
    let mut corrupt = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80".to_vec();
    corrupt.extend_from_slice(&[0x7f, 0x7f]);
    for server in [&mut ours, &mut theirs] {
        server.send(&encode(&[b"SET", b"corrupt", &corrupt])).await;
        assert_eq!(server.reply().await, Some(Value::Simple("OK".into())));
    }
    same_replies(
        &mut ours,
        &mut theirs,
        &[
            &["PFCOUNT", "corrupt"],
            &["PFCOUNT", "corrupt", "h"],
            &["PFMERGE", "x", "corrupt"],
        ],
    )
    .await;
}
