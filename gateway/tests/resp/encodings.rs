//! OBJECT ENCODING of hashes, sets and sorted sets, and the encoding parameters behind it, as a
//! redis-server 7.0.15 started for the test (pgvs3-testkit's resp::live) answers after the same commands:
//! a key's small encoding (`listpack`, `intset`) until a write passes a limit, the large one
//! (`hashtable`, `skiplist`) from then on whatever it shrinks to, CONFIG SET's limits taking
//! effect for later writes, and the commands that make a key (*STORE, ZRANGESTORE, RESTORE,
//! COPY, RENAME) judging or keeping it as Redis does.

use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::{RawResp, Value, encode};

use common::resp::live::{LiveRedis, same_lines};

/// Small limits, so that a few elements pass them.
const LIMITS: &[&str] = &[
    "CONFIG SET hash-max-ziplist-entries 4 hash-max-listpack-value 8",
    "CONFIG SET set-max-intset-entries 4",
    "CONFIG SET zset-max-ziplist-entries 4 zset-max-listpack-value 8",
    "CONFIG GET hash-max-listpack-entries",
    "CONFIG GET hash-max-ziplist-value",
    "CONFIG GET set-max-intset-entries",
    "CONFIG GET zset-max-listpack-entries",
    "CONFIG GET zset-max-ziplist-value",
];

#[tokio::test]
async fn object_encoding_follows_the_limits_as_redis_server() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_lines(&mut ours, &mut theirs, LIMITS).await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            // Hashes: by entries, and by field and value length; shrinking keeps hashtable.
            "HSET h a 1 b 2",
            "OBJECT ENCODING h",
            "HSET h c 3 d 4",
            "OBJECT ENCODING h",
            "HSET h e 5",
            "OBJECT ENCODING h",
            "HDEL h e d c b",
            "OBJECT ENCODING h",
            "HSET long-value f 123456789",
            "OBJECT ENCODING long-value",
            "HSET long-field fieldname v",
            "OBJECT ENCODING long-field",
            // HSETNX judges its arguments only when it sets the field.
            "HSETNX nx f 1",
            "HSETNX nx f 123456789",
            "OBJECT ENCODING nx",
            "HINCRBY incr f 1",
            "OBJECT ENCODING incr",
            "HINCRBY incr f 123456789",
            "OBJECT ENCODING incr",
            "HINCRBYFLOAT incrfloat f 1.5",
            "OBJECT ENCODING incrfloat",
            // Deleted and made again: small again.
            "DEL h",
            "HSET h a 1",
            "OBJECT ENCODING h",
            // Sets: integers as Redis's intset takes them, up to the count.
            "SADD s 1 2 3",
            "OBJECT ENCODING s",
            "SADD s 4",
            "OBJECT ENCODING s",
            "SADD s 5",
            "OBJECT ENCODING s",
            "SREM s 5 4 3",
            "OBJECT ENCODING s",
            "SADD text 1 a",
            "OBJECT ENCODING text",
            "SADD padded 01",
            "OBJECT ENCODING padded",
            "SADD plus +1",
            "OBJECT ENCODING plus",
            "SADD extremes -9223372036854775808 9223372036854775807",
            "OBJECT ENCODING extremes",
            "SADD past 9223372036854775808",
            "OBJECT ENCODING past",
            "SADD small 1 2",
            "SADD small 2",
            "OBJECT ENCODING small",
            "SMOVE extremes moved 9223372036854775807",
            "OBJECT ENCODING moved",
            "SMOVE text moved a",
            "OBJECT ENCODING moved",
            // *STORE builds its destination as an intset, member by member.
            "SADD t 1 2 3 4 5 6",
            "OBJECT ENCODING t",
            "SINTERSTORE inter t s",
            "OBJECT ENCODING inter",
            "SUNIONSTORE union t s",
            "OBJECT ENCODING union",
            "SDIFFSTORE diff t s",
            "OBJECT ENCODING diff",
            "SUNIONSTORE mixed s text",
            "OBJECT ENCODING mixed",
            // Sorted sets: by entries and member length.
            "ZADD z 1 a 2 b",
            "OBJECT ENCODING z",
            "ZADD z 3 c 4 d",
            "OBJECT ENCODING z",
            "ZADD z 5 e",
            "OBJECT ENCODING z",
            "ZREM z e d c",
            "OBJECT ENCODING z",
            "ZADD long 1 abcdefghi",
            "OBJECT ENCODING long",
            "ZADD xx 1 a",
            // XX adds nothing, so the long member changes nothing.
            "ZADD xx XX 1 abcdefghi",
            "OBJECT ENCODING xx",
            "ZADD xx 2 a 3 b 4 c 5 d",
            "OBJECT ENCODING xx",
            "ZINCRBY incrz 1 a",
            "OBJECT ENCODING incrz",
            // *STORE and ZRANGESTORE judge the result by what it holds.
            "ZUNIONSTORE zunion 2 z incrz",
            "OBJECT ENCODING zunion",
            "ZUNIONSTORE zbig 2 xx z",
            "OBJECT ENCODING zbig",
            "ZINTERSTORE zinter 2 xx z",
            "OBJECT ENCODING zinter",
            "ZDIFFSTORE zdiff 1 z",
            "OBJECT ENCODING zdiff",
            "ZRANGESTORE zr z 0 -1",
            "OBJECT ENCODING zr",
            "ZRANGESTORE zr xx 0 -1",
            "OBJECT ENCODING zr",
            "ZRANGESTORE zr xx 0 1",
            "OBJECT ENCODING zr",
            "ZADD zlong 1 abcdefghi 2 b",
            "ZRANGESTORE zr zlong 0 -1",
            "OBJECT ENCODING zr",
            "GEOADD geo 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
            "OBJECT ENCODING geo",
            "GEOSEARCHSTORE geostore geo FROMLONLAT 15 37 BYRADIUS 200 km",
            "OBJECT ENCODING geostore",
            // COPY and RENAME keep the encoding of a key that shrank.
            "COPY z zcopy",
            "OBJECT ENCODING zcopy",
            "COPY s scopy",
            "OBJECT ENCODING scopy",
            "COPY h hcopy",
            "OBJECT ENCODING hcopy",
            "RENAME s srenamed",
            "OBJECT ENCODING srenamed",
            "RENAME z zrenamed",
            "OBJECT ENCODING zrenamed",
            // Lists are quicklist in 7.0, streams stream.
            "RPUSH list a",
            "OBJECT ENCODING list",
            "XADD stream 1-1 f v",
            "OBJECT ENCODING stream",
            "OBJECT ENCODING nothing",
        ],
    )
    .await;
}

#[tokio::test]
async fn config_set_changes_later_writes_only_as_redis_server() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            // Redis 7.0.15's defaults.
            "CONFIG GET hash-max-ziplist-entries",
            "CONFIG GET hash-max-listpack-value",
            "CONFIG GET set-max-intset-entries",
            "CONFIG GET zset-max-ziplist-entries",
            "CONFIG GET zset-max-listpack-value",
            "HSET h a 1 b 2 c 3",
            "SADD s 1 2 3",
            "ZADD z 1 a 2 b 3 c",
            // A lower limit leaves the keys as they are until a write.
            "CONFIG SET hash-max-listpack-entries 2 set-max-intset-entries 2 zset-max-listpack-entries 2",
            "OBJECT ENCODING h",
            "OBJECT ENCODING s",
            "OBJECT ENCODING z",
            // Updating a field counts; adding a set member or sorted set member already there does not.
            "HSET h a 2",
            "OBJECT ENCODING h",
            "SADD s 1",
            "OBJECT ENCODING s",
            "ZADD z 5 a",
            "OBJECT ENCODING z",
            "SADD s 4",
            "OBJECT ENCODING s",
            "ZADD z 4 d",
            "OBJECT ENCODING z",
            // A higher one converts nothing back.
            "CONFIG SET hash-max-listpack-entries 512 set-max-intset-entries 512 zset-max-listpack-entries 128",
            "OBJECT ENCODING h",
            "OBJECT ENCODING s",
            "OBJECT ENCODING z",
            // No small encoding at all.
            "CONFIG SET zset-max-listpack-entries 0",
            "ZADD zero 1 a",
            "OBJECT ENCODING zero",
            "CONFIG SET zset-max-listpack-entries 128",
            // Values: memory units, and Redis's refusals.
            "CONFIG SET hash-max-listpack-value 1k",
            "CONFIG GET hash-max-listpack-value",
            "CONFIG SET zset-max-ziplist-value 2KB",
            "CONFIG GET zset-max-ziplist-value",
            "CONFIG SET zset-max-ziplist-value 0010",
            "CONFIG GET zset-max-listpack-value",
            "CONFIG SET hash-max-listpack-value -5",
            "CONFIG SET hash-max-listpack-value 5x",
            "CONFIG SET hash-max-listpack-value 99999999999999999999",
            "CONFIG SET hash-max-listpack-entries -1",
            "CONFIG SET hash-max-listpack-entries 0010",
            "CONFIG SET hash-max-listpack-entries 1k",
            "CONFIG SET set-max-intset-entries 99999999999999999999",
            "CONFIG GET hash-max-listpack-entries",
            "CONFIG GET hash-max-listpack-value",
        ],
    )
    .await;
}

async fn call(server: &mut RawResp, args: &[&[u8]]) -> Value {
    server.send(&encode(args)).await;
    server.reply().await.expect("a reply")
}

/// RESTORE judges the key by what it holds, as Redis's RDB load does, whatever the encoding of
/// the key dumped; every gateway reads the same encoding from PostgreSQL.
#[tokio::test]
async fn restore_judges_by_contents_and_every_gateway_answers_the_same() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            "CONFIG SET hash-max-listpack-entries 2 set-max-intset-entries 2 zset-max-listpack-entries 2",
            "HSET h a 1 b 2 c 3",
            "HDEL h c",
            "SADD s 1 2 3",
            "SREM s 3",
            "ZADD z 1 a 2 b 3 c",
            "ZREM z c",
            "OBJECT ENCODING h",
        ],
    )
    .await;
    for key in ["h", "s", "z"] {
        for server in [&mut ours, &mut theirs] {
            let Value::Bulk(payload) = call(server, &[b"DUMP", key.as_bytes()]).await else {
                panic!("DUMP {key}")
            };
            let restored = format!("{key}-restored");
            assert_eq!(
                call(server, &[b"RESTORE", restored.as_bytes(), b"0", &payload]).await,
                Value::Simple("OK".into())
            );
        }
        let restored = format!("{key}-restored");
        same_lines(
            &mut ours,
            &mut theirs,
            &[
                &format!("OBJECT ENCODING {key}"),
                &format!("OBJECT ENCODING {restored}"),
            ],
        )
        .await;
    }
    // A second gateway on the same database: the marks are the database's, and so are the
    // limits.
    let other = TestGateway::with_args(gateway.database_url.clone(), &["--resp-addr", "127.0.0.1:0"]).await;
    let mut second = RawResp::connect(other.resp_addr()).await;
    same_lines(
        &mut second,
        &mut ours,
        &[
            "OBJECT ENCODING h",
            "OBJECT ENCODING h-restored",
            "CONFIG GET set-max-intset-entries",
        ],
    )
    .await;
}

/// The order a small key answers in is its encoding's, as in Redis: a `listpack` hash's fields
/// in the order they were first added (a field deleted and set again at the end; an update in
/// place), through HGETALL, HKEYS, HVALS, HSCAN (whole, cursor 0), COPY, DUMP and RESTORE; an
/// `intset`'s members in numeric order (SMEMBERS, SSCAN). SPOP with a count that leaves at most
/// a fifth of it rebuilds the set, `intset` again when what is left fits one.
#[tokio::test]
async fn small_keys_answer_in_the_order_of_their_encoding_as_redis_server() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            "HSET h zz 1 b 2 a 3 zz 4 m 5",
            "HGETALL h",
            "HSET h b 6 c 7",
            "HDEL h a",
            "HSET h a 8 0 9",
            "HINCRBY h n 1",
            "HSETNX h _ 1",
            "HKEYS h",
            "HVALS h",
            "HGETALL h",
            "HSCAN h 0 COUNT 2",
            "HSCAN h 0 MATCH [a-m]",
            "COPY h h2",
            "HGETALL h2",
            "MULTI",
            "HSET t y 1 x 2",
            "HSET t w 3 y 4",
            "EXEC",
            "HGETALL t",
            "RENAME t t2",
            "HKEYS t2",
            "SADD s 10 9 -1 100 2",
            "SMEMBERS s",
            "SSCAN s 0 COUNT 2",
            "OBJECT ENCODING s",
            "SADD big 10 9 -1 100 2 x",
            "OBJECT ENCODING big",
            "SREM big x",
            "OBJECT ENCODING big",
            // LPOP's arity, as Redis words it.
            "LPOP l 1 1",
            "RPOP l 2 2",
        ],
    )
    .await;
    // SPOP with counts (what it pops is random, how many it leaves decides), of a hashtable
    // of integers: leaving 2 of 11 (more than a fifth of 9) pops one by one and keeps the
    // hashtable, leaving 1 rebuilds an intset; under a limit of 2 members, leaving 3 of 18
    // rebuilds a hashtable, leaving 2 an intset.
    for (members, count, limit) in [(12, 9, 512), (12, 10, 512), (19, 15, 2), (19, 16, 2)] {
        let mut add = vec!["SADD".to_owned(), "p".to_owned(), "a".to_owned()];
        add.extend((1..members).map(|member| member.to_string()));
        let add: Vec<&str> = add.iter().map(String::as_str).collect();
        let limit = limit.to_string();
        let commands: [&[&str]; 4] = [
            &["DEL", "p"],
            &["CONFIG", "SET", "set-max-intset-entries", &limit],
            &add,
            &["SREM", "p", "a"],
        ];
        common::resp::live::same_replies(&mut ours, &mut theirs, &commands).await;
        for server in [&mut ours, &mut theirs] {
            server.command(&["SPOP", "p", &count.to_string()]).await;
        }
        same_lines(&mut ours, &mut theirs, &["SCARD p", "OBJECT ENCODING p"]).await;
    }
    // A hash dumped by either restores in its order on both.
    let mut payloads = Vec::new();
    for server in [&mut ours, &mut theirs] {
        let Value::Bulk(payload) = call(server, &[b"DUMP", b"h"]).await else {
            panic!("DUMP h")
        };
        payloads.push(payload);
    }
    for (key, payload) in ["h3", "h4"].into_iter().zip(&payloads) {
        for server in [&mut ours, &mut theirs] {
            let restored = call(server, &[b"RESTORE", key.as_bytes(), b"0", payload]).await;
            assert_eq!(restored, Value::Simple("OK".into()));
        }
    }
    same_lines(
        &mut ours,
        &mut theirs,
        &["HGETALL h3", "HGETALL h4", "OBJECT ENCODING h3"],
    )
    .await;
}
