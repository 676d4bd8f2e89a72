//! BITOP, BITFIELD and BITFIELD_RO over the wire: every reply, value and error compared byte
//! for byte with a redis-server 7.0.15 started for the test (pgvs3-testkit's resp::live), in MULTI and in
//! scripts too; COMMAND's view of them; redis-rs reading BITFIELD's nils.

use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::{RawResp, Value};

use common::resp::live::{LiveRedis, same_bytes, same_lines, same_replies};

#[tokio::test]
async fn bitop_answers_as_redis_server() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    for (key, value) in [
        (&b"a"[..], &b"\x01\x02\xff\xff"[..]),
        (b"b", b"\x01\x02\xff"),
        (b"c", b"\xaa\x00\xff\x55\x80"),
        (b"empty", b""),
        // Integer-encoded in Redis.
        (b"one", b"1"),
        (b"two", b"2"),
    ] {
        same_bytes(&mut ours, &mut theirs, &[b"SET", key, value]).await;
    }
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            "BITOP AND d a b",
            "GET d",
            "BITOP OR d a b c",
            "GET d",
            "BITOP XOR d a b c",
            "GET d",
            "BITOP NOT d c",
            "GET d",
            "BITOP and d a",
            "GET d",
            "BITOP Or d a",
            "GET d",
            "BITOP xor d a",
            "GET d",
            // Missing keys are streams of zeros.
            "BITOP AND d missing a",
            "GET d",
            "BITOP OR d missing a missing2",
            "GET d",
            "BITOP XOR d missing a",
            "GET d",
            "BITOP XOR d one two one",
            "GET d",
            "BITOP AND d empty a",
            "GET d",
            // An empty result deletes the destination.
            "BITOP NOT d empty",
            "EXISTS d",
            "BITOP OR d missing missing2",
            "EXISTS d",
            "BITOP OR d missing",
            "EXISTS d",
            // The destination is also a source, and loses its TTL.
            "SET s abc EX 100",
            "BITOP NOT s s",
            "GET s",
            "TTL s",
            // A source of another type is refused, whatever else is missing; a destination of
            // another type is replaced.
            "RPUSH list x",
            "BITOP XOR d a b list missing",
            "BITOP AND list a",
            "TYPE list",
            "GET list",
            "HSET hash f v",
            "BITOP NOT hash missing",
            "EXISTS hash",
            "BITOP NAND d a",
            "BITOP NOT d a b",
            "BITOP NOT d",
            "BITOP AND d",
            "BITOP",
        ],
    )
    .await;
    // Long values (past Redis's word-at-a-time fast path), many sources.
    let long: Vec<u8> = (0..3000u32).map(|n| (n * 7 + n / 5) as u8).collect();
    let other: Vec<u8> = (0..2048u32).map(|n| (n * 13 + 1) as u8).collect();
    same_bytes(&mut ours, &mut theirs, &[b"SET", b"long", &long]).await;
    same_bytes(&mut ours, &mut theirs, &[b"SET", b"other", &other]).await;
    for op in ["AND", "OR", "XOR"] {
        same_lines(
            &mut ours,
            &mut theirs,
            &[
                &format!("BITOP {op} d long other a long c other b"),
                "GET d",
                "BITCOUNT d",
            ],
        )
        .await;
    }
    same_lines(&mut ours, &mut theirs, &["BITOP NOT d long", "GET d"]).await;
}

#[tokio::test]
async fn bitfield_answers_as_redis_server() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            // Redis's unit's cases.
            "BITFIELD bits SET i8 0 -100",
            "BITFIELD bits SET i8 0 101",
            "BITFIELD bits GET i8 0",
            "BITFIELD bits set i8 0 255 set i8 0 100 get i8 0",
            "BITFIELD ubits set u8 0 255 incrby u8 0 100 get u8 0",
            "BITFIELD abc set u8 #0 65 set u8 #1 66 set u8 #2 67",
            "GET abc",
            "BITFIELD n SET u8 #0 10",
            "BITFIELD n INCRBY u8 #0 100 INCRBY u8 #0 100",
            "BITFIELD w SET u8 #0 100",
            "BITFIELD w OVERFLOW WRAP INCRBY u8 #0 257 GET u8 #0 overflow wrap incrby u8 #0 255 get u8 #0",
            "BITFIELD w OVERFLOW SAT INCRBY u8 #0 257 GET u8 #0 overflow sat incrby u8 #0 -255 get u8 #0",
            "BITFIELD w SET u8 #0 100",
            "BITFIELD w OVERFLOW SAT INCRBY i8 #0 257 GET i8 #0 OVERFLOW SAT INCRBY i8 #0 -255 GET i8 #0",
            "SET one 1",
            "BITFIELD one GET u1 0",
            "BITFIELD mystring SET i8 0 10 SET i8 64 10 INCRBY i8 10 99900",
            "GET mystring",
            // FAIL answers nil and writes nothing; a key created for writes that all failed
            // stays, as long as they would have made it.
            "BITFIELD f OVERFLOW FAIL SET u8 0 300 SET i4 4 8 INCRBY u2 0 1",
            "GET f",
            "BITFIELD f OVERFLOW FAIL INCRBY u2 0 3 INCRBY u2 0 1 OVERFLOW WRAP INCRBY u2 0 1",
            "BITFIELD g OVERFLOW FAIL SET u8 16 256",
            "GET g",
            "STRLEN g",
            // Negative values into unsigned fields are C's uint64_t.
            "BITFIELD u SET u8 0 -1 OVERFLOW SAT SET u8 0 -1 GET u8 0 OVERFLOW FAIL SET u8 0 -1",
            // The widest types, their limits and C's wrapping.
            "BITFIELD big SET i64 0 -1 GET u63 0 GET u63 1 GET i64 0 GET i63 1",
            "BITFIELD big SET i64 0 9223372036854775807 INCRBY i64 0 1 INCRBY i64 0 -9223372036854775808",
            "BITFIELD big OVERFLOW SAT SET i64 0 9223372036854775807 INCRBY i64 0 1 INCRBY i64 0 -9223372036854775808 INCRBY i64 0 -9223372036854775808",
            "BITFIELD big OVERFLOW FAIL INCRBY i64 0 -9223372036854775808 INCRBY i64 0 -1 GET i64 0",
            "BITFIELD big SET u63 64 9223372036854775807 INCRBY u63 64 1 OVERFLOW SAT INCRBY u63 64 -9223372036854775808",
            "GET big",
            // Far below a wide signed type's minimum, SAT saturates to its maximum in Redis.
            "BITFIELD q OVERFLOW SAT SET i63 0 -8832428087321081264 SET i8 64 -200 SET i62 72 -9223372036854775808",
            "BITFIELD q GET i63 0 GET i8 64 GET i62 72",
            "BITFIELD big SET i1 200 -1 GET i1 200 GET u1 200 SET i1 200 1 GET i1 200 SET u1 3 5 GET u1 3",
            "BITFIELD big SET i13 1003 -4000 GET i13 1003 INCRBY u7 1001 -1 GET u16 #62",
            "STRLEN big",
            // Reads past the end are zeros; with only reads a missing key is not created, and
            // a key with no operation at all answers an empty array.
            "BITFIELD big GET u8 100000 GET i64 4294967231",
            "BITFIELD missing GET u8 0 GET i64 64",
            "EXISTS missing",
            "BITFIELD missing",
            "BITFIELD missing OVERFLOW SAT",
            "EXISTS missing",
            // Growing keeps the TTL.
            "SET t x EX 100",
            "BITFIELD t SET u8 100 1",
            "STRLEN t",
            "TTL t",
            // Case: subcommands and modes any case, types lowercase only.
            "bitfield bits get i8 0 Get I8 0",
            "BITFIELD bits Overflow Fail SET i8 0 1",
            // Errors, in Redis's order (the type before the offset before the value), before
            // the key's type is looked at.
            "BITFIELD bits GET",
            "BITFIELD bits GET i8",
            "BITFIELD bits SET i8 0",
            "BITFIELD bits INCRBY i8 0",
            "BITFIELD bits OVERFLOW",
            "BITFIELD bits OVERFLOW up GET i8 0",
            "BITFIELD bits FOO i8 0",
            "BITFIELD bits GET u64 0",
            "BITFIELD bits GET i65 0",
            "BITFIELD bits GET i0 0",
            "BITFIELD bits GET i08 0",
            "BITFIELD bits GET x8 0",
            "BITFIELD bits GET i 0",
            "BITFIELD bits GET i8 -1",
            "BITFIELD bits GET i8 4294967296",
            "BITFIELD bits GET i8 4294967295",
            "BITFIELD bits GET i8 #536870912",
            "BITFIELD bits GET i8 #536870911",
            "BITFIELD bits GET i8 ##1",
            "BITFIELD bits GET i8 1.5",
            "BITFIELD bits SET u64 x y",
            "BITFIELD bits SET u8 x y",
            "BITFIELD bits SET u8 0 y",
            "BITFIELD bits SET u8 0 9223372036854775808",
            "BITFIELD bits GET i8 0 SET u8 0",
            "BITFIELD",
            // Another type: WRONGTYPE, even with nothing to do, and after the arguments.
            "RPUSH list x",
            "BITFIELD list GET u8 0",
            "BITFIELD list SET u8 0 1",
            "BITFIELD list",
            "BITFIELD list GET u64 0",
            // BITFIELD_RO: reads only.
            "BITFIELD_RO bits GET i8 0 GET u4 #1",
            "BITFIELD_RO bits",
            "BITFIELD_RO missing GET u8 0",
            "BITFIELD_RO bits SET u8 0 100 GET u8 0",
            "BITFIELD_RO bits INCRBY u8 0 1",
            "BITFIELD_RO bits GET u8 0 SET u8 0",
            "BITFIELD_RO bits GET u64 0 SET u8 0 1",
            "BITFIELD_RO list GET u8 0",
            "BITFIELD_RO list SET u8 0 1",
            "BITFIELD_RO",
            "GET bits",
        ],
    )
    .await;
}

#[tokio::test]
async fn bit_commands_run_in_multi_and_scripts_as_in_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_replies(
        &mut ours,
        &mut theirs,
        &[
            &["MULTI"],
            &["BITFIELD", "m", "SET", "u8", "0", "200", "INCRBY", "u8", "0", "100"],
            &["SET", "src", "pgvs3"],
            &["BITOP", "NOT", "dst", "m"],
            &["BITOP", "XOR", "dst2", "dst", "src"],
            &["BITFIELD_RO", "dst2", "GET", "u16", "0"],
            &["RPUSH", "list", "x"],
            &["BITFIELD", "list", "GET", "u8", "0"],
            &["EXEC"],
            &["GET", "dst2"],
            &[
                "EVAL",
                "return redis.call('bitfield', KEYS[1], 'overflow', 'fail', 'incrby', 'u4', 0, ARGV[1], 'get', 'u4', 0)",
                "1",
                "s",
                "9",
            ],
            &[
                "EVAL",
                "return redis.call('bitfield', KEYS[1], 'overflow', 'fail', 'incrby', 'u4', 0, ARGV[1], 'get', 'u4', 0)",
                "1",
                "s",
                "9",
            ],
            &[
                "EVAL",
                "redis.call('bitop', 'or', KEYS[1], KEYS[2], KEYS[3]); return redis.call('get', KEYS[1])",
                "3",
                "or",
                "s",
                "src",
            ],
            &[
                "EVAL_RO",
                "return redis.call('bitfield_ro', KEYS[1], 'get', 'i8', 0, 'get', 'u4', '#3')",
                "1",
                "src",
            ],
            &["EVAL", "return redis.pcall('bitfield', KEYS[1], 'get', 'u64', 0)", "1", "s"],
            &["EVAL", "return redis.pcall('bitop', 'and', KEYS[1], KEYS[2])", "2", "d", "list"],
        ],
    )
    .await;
    // A write from a read-only script is refused (Redis adds the script's name to the text).
    for server in [&mut ours, &mut theirs] {
        let refused = server
            .command(&[
                "EVAL_RO",
                "return redis.call('bitfield', KEYS[1], 'get', 'u8', 0)",
                "1",
                "s",
            ])
            .await;
        assert!(
            refused
                .error()
                .starts_with("ERR Write commands are not allowed from read-only scripts."),
            "{refused:?}"
        );
    }

    // redis-rs reads BITFIELD's nils and integers.
    let client = redis::Client::open(format!("redis://{}/", gateway.resp_addr())).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let answers: Vec<Option<i64>> = redis::cmd("BITFIELD")
        .arg("rs")
        .arg(&[
            "SET", "i8", "0", "-128", "OVERFLOW", "FAIL", "INCRBY", "i8", "0", "-1", "GET", "i8", "0",
        ])
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(answers, [Some(0), None, Some(-128)]);
    let (len, value): (i64, Vec<u8>) = redis::pipe()
        .atomic()
        .cmd("BITOP")
        .arg(&["NOT", "rs2", "rs"])
        .cmd("GET")
        .arg("rs2")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!((len, value), (1, vec![0x7f]));
}

#[tokio::test]
async fn command_describes_bitop_and_bitfield_as_redis_does() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            "COMMAND INFO bitop bitfield_ro",
            "COMMAND GETKEYS BITOP AND d a b",
            "COMMAND GETKEYSANDFLAGS BITOP AND d a b",
            "COMMAND GETKEYSANDFLAGS BITFIELD k GET u8 0 OVERFLOW SAT GET i4 4",
            "COMMAND GETKEYSANDFLAGS BITFIELD k GET u8 0 SET u8 0 1",
            "COMMAND GETKEYSANDFLAGS BITFIELD k GET u8",
            "COMMAND GETKEYSANDFLAGS BITFIELD_RO k GET u8 0",
        ],
    )
    .await;
    // The same names (Redis lists them in its hash table's order).
    for command in [
        &["COMMAND", "LIST", "FILTERBY", "PATTERN", "bit*"][..],
        &["COMMAND", "LIST", "FILTERBY", "ACLCAT", "bitmap"],
    ] {
        let sorted = |reply: Value| match reply {
            Value::Array(mut names) => {
                names.sort_by_key(|name| format!("{name:?}"));
                names
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(
            sorted(ours.command(command).await),
            sorted(theirs.command(command).await),
            "{command:?}"
        );
    }
    // BITFIELD's fields but the key spec, where Redis adds a note.
    let info = |reply: Value| match reply {
        Value::Array(mut commands) => match commands.remove(0) {
            Value::Array(fields) => fields[..8].to_vec(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    let command = ["COMMAND", "INFO", "bitfield"];
    assert_eq!(info(ours.command(&command).await), info(theirs.command(&command).await));
}
