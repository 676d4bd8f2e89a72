//! Plans that hold from the first request (issue 39): on tables never analyzed (autovacuum off,
//! as on a fresh data directory before autovacuum first runs), after bulk loads, the work a
//! pop, an add or a read does stays bounded by what it returns, not by the size of the key or
//! by what earlier pops and trims deleted. Asserted on PostgreSQL's own counters of index
//! entries read, never on times. A transaction holding an old snapshot stands for the busy
//! server's concurrent readers: while one may see deleted rows, their index entries are walked
//! again by every scan that starts before them.

use crate::redis_rs;
use pgvs3_testkit as common;

use std::time::Duration;

use common::TestGateway;
use redis_rs::{connect, query};

/// Index scans, index entries read and index pages visited on `table`'s indexes, rows
/// inserted and deleted, and whether it was ever analyzed: PostgreSQL's cumulative statistics.
#[derive(Debug, Clone, Copy)]
struct Counters {
    scans: i64,
    entries: i64,
    pages: i64,
    inserted: i64,
    deleted: i64,
    analyzed: i64,
}

async fn counters(sql: &tokio_postgres::Client, table: &str) -> Counters {
    counters_in(sql, "pgvs3", table).await
}

/// [`counters`] of a table of another schema (a namespace's `objects`).
async fn counters_in(sql: &tokio_postgres::Client, schema: &str, table: &str) -> Counters {
    let row = sql
        .query_one(
            "SELECT (SELECT coalesce(sum(idx_scan), 0)::bigint FROM pg_stat_user_indexes i WHERE i.relid = t.relid) AS scans,
                    (SELECT coalesce(sum(idx_tup_read), 0)::bigint FROM pg_stat_user_indexes i WHERE i.relid = t.relid) AS entries,
                    (SELECT coalesce(sum(idx_blks_hit + idx_blks_read), 0)::bigint
                       FROM pg_statio_user_indexes i WHERE i.relid = t.relid) AS pages,
                    n_tup_ins, n_tup_del, analyze_count + autoanalyze_count AS analyzed
               FROM pg_stat_user_tables t WHERE schemaname = $1 AND relname = $2",
            &[&schema, &table],
        )
        .await
        .unwrap();
    Counters {
        scans: row.get("scans"),
        entries: row.get("entries"),
        pages: row.get("pages"),
        inserted: row.get("n_tup_ins"),
        deleted: row.get("n_tup_del"),
        analyzed: row.get("analyzed"),
    }
}

/// The counters once `done` says the gateway's backends reported what was sent: each reports
/// its statistics within seconds of going idle, all it has at once.
async fn counters_when(
    sql: &tokio_postgres::Client,
    table: &str,
    what: &str,
    done: impl Fn(&Counters) -> bool,
) -> Counters {
    counters_in_when(sql, "pgvs3", table, what, done).await
}

/// [`counters_when`] of a table of another schema.
async fn counters_in_when(
    sql: &tokio_postgres::Client,
    schema: &str,
    table: &str,
    what: &str,
    done: impl Fn(&Counters) -> bool,
) -> Counters {
    common::eventually(Duration::from_secs(30), what, || async {
        let now = counters_in(sql, schema, table).await;
        done(&now).then_some(now)
    })
    .await
}

/// A gateway whose typed-key tables autovacuum leaves alone (so none is analyzed during the
/// test), and a SQL session to it.
async fn never_analyzed() -> (TestGateway, tokio_postgres::Client) {
    let gateway = TestGateway::with_resp(&[]).await;
    let sql = gateway.sql().await;
    for table in [
        "resp_keys",
        "resp_hash",
        "resp_set",
        "resp_list",
        "resp_zset",
        "resp_stream",
        "resp_stream_entry",
    ] {
        sql.batch_execute(&format!("ALTER TABLE pgvs3.{table} SET (autovacuum_enabled = off)"))
            .await
            .unwrap();
        assert_eq!(counters(&sql, table).await.analyzed, 0, "{table} is never analyzed");
    }
    (gateway, sql)
}

/// A stream entry as redis-rs reads it: its ID, fields and values.
type Entry = (String, Vec<String>);

/// A snapshot taken now and held: rows deleted from here on stay visible to it.
async fn old_snapshot(gateway: &TestGateway) -> tokio_postgres::Client {
    let reader = gateway.sql().await;
    reader
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pgvs3.resp_keys")
        .await
        .unwrap();
    reader
}

#[tokio::test]
async fn list_pops_read_their_elements_only() {
    const LEN: usize = 20_000;
    const POPS: i64 = 100;
    let (gateway, sql) = never_analyzed().await;
    let mut con = connect(&gateway).await;
    // A bulk push of 20,000, 1,000 per command.
    for chunk in 0..LEN / 1000 {
        let mut args = vec!["RPUSH".to_string(), "q".into()];
        args.extend((chunk * 1000..(chunk + 1) * 1000).map(|i| i.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        query::<i64>(&mut con, &args).await;
    }
    let _reader = old_snapshot(&gateway).await;
    let before = counters_when(&sql, "resp_list", "the push's statistics", |c| c.inserted == LEN as i64).await;

    for i in 0..POPS {
        assert_eq!(query::<String>(&mut con, &["LPOP", "q"]).await, i.to_string());
        assert_eq!(
            query::<String>(&mut con, &["RPOP", "q"]).await,
            (LEN as i64 - 1 - i).to_string()
        );
    }
    let after = counters_when(&sql, "resp_list", "the pops' statistics", |c| {
        c.deleted == before.deleted + 2 * POPS
    })
    .await;
    let (scans, entries) = (after.scans - before.scans, after.entries - before.entries);
    // One index scan per pop, reading the popped element: a few, whatever the length and
    // however many pops went before (today 2 scans and 1 entry per pop; before layout v33 a
    // pop was a join of the list with itself, 20,000 scans, and read every element popped
    // before it).
    assert!(
        scans <= 4 * 2 * POPS && entries <= 4 * 2 * POPS,
        "{scans} index scans and {entries} index entries read for {} pops of a list of {LEN}",
        2 * POPS
    );
    assert_eq!(after.analyzed, 0, "resp_list was never analyzed");

    // The ends stay right for pushes after pops, and LINSERT, LTRIM and LRANGE agree.
    assert_eq!(
        query::<i64>(&mut con, &["LPUSH", "q", "head"]).await,
        LEN as i64 - 2 * POPS + 1
    );
    assert_eq!(
        query::<i64>(&mut con, &["RPUSH", "q", "tail"]).await,
        LEN as i64 - 2 * POPS + 2
    );
    assert_eq!(
        query::<i64>(&mut con, &["LINSERT", "q", "BEFORE", "head", "first"]).await,
        LEN as i64 - 2 * POPS + 3
    );
    assert_eq!(query::<String>(&mut con, &["LTRIM", "q", "0", "2"]).await, "OK");
    assert_eq!(
        query::<Vec<String>>(&mut con, &["LRANGE", "q", "0", "-1"]).await,
        ["first", "head", POPS.to_string().as_str()]
    );
    assert_eq!(query::<String>(&mut con, &["RPOP", "q"]).await, POPS.to_string());
    assert_eq!(query::<i64>(&mut con, &["RPUSH", "q", "last"]).await, 3);
    assert_eq!(
        query::<Vec<String>>(&mut con, &["LPOP", "q", "5"]).await,
        ["first", "head", "last"]
    );
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "q"]).await, 0);
}

#[tokio::test]
async fn zadd_to_a_large_sorted_set_reads_its_members_only() {
    const SIZE: usize = 20_000;
    const ADDS: i64 = 200;
    let (gateway, sql) = never_analyzed().await;
    let mut con = connect(&gateway).await;
    for chunk in 0..SIZE / 1000 {
        let mut args = vec!["ZADD".to_string(), "z".into()];
        for i in chunk * 1000..(chunk + 1) * 1000 {
            args.push(i.to_string());
            args.push(format!("m{i}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(query::<i64>(&mut con, &args).await, 1000);
    }
    let before = counters_when(&sql, "resp_zset", "the load's statistics", |c| {
        c.inserted == SIZE as i64
    })
    .await;

    for i in 0..ADDS {
        let (score, member) = (format!("{}.5", i), format!("n{i}"));
        assert_eq!(query::<i64>(&mut con, &["ZADD", "z", &score, &member]).await, 1);
    }
    let after = counters_when(&sql, "resp_zset", "the adds' statistics", |c| {
        c.inserted == SIZE as i64 + ADDS
    })
    .await;
    // A probe of the member and an insert per ZADD, a few index pages each (before layout
    // v33, a join that read the whole set; index pages count what an index condition walks
    // past, which index entries read do not).
    let (entries, pages) = (after.entries - before.entries, after.pages - before.pages);
    assert!(
        entries <= 4 * ADDS && pages <= 20 * ADDS,
        "{entries} index entries read and {pages} index pages visited for {ADDS} ZADDs to a set of {SIZE}"
    );
    assert_eq!(after.analyzed, 0, "resp_zset was never analyzed");
    assert_eq!(query::<i64>(&mut con, &["ZCARD", "z"]).await, SIZE as i64 + ADDS);
    assert_eq!(
        query::<i64>(&mut con, &["ZADD", "z", "CH", "7", "n3", "8", "m3"]).await,
        2
    );
    assert_eq!(
        query::<Vec<String>>(&mut con, &["ZRANGE", "z", "3", "5", "BYSCORE"]).await,
        ["m4", "n4", "m5"]
    );
}

#[tokio::test]
async fn stream_reads_after_a_trim_skip_the_trimmed_entries() {
    const LEN: usize = 20_000;
    const KEPT: usize = 10;
    const READS: i64 = 20;
    let (gateway, sql) = never_analyzed().await;
    let mut con = connect(&gateway).await;
    for chunk in 0..LEN / 1000 {
        let mut pipe = redis::pipe();
        for i in chunk * 1000..(chunk + 1) * 1000 {
            pipe.cmd("XADD").arg("s").arg(format!("{}-1", i + 1)).arg("f").arg(i);
        }
        let ids: Vec<String> = pipe.query_async(&mut con).await.unwrap();
        assert_eq!(ids.len(), 1000);
    }
    let _reader = old_snapshot(&gateway).await;
    assert_eq!(
        query::<i64>(&mut con, &["XTRIM", "s", "MAXLEN", &KEPT.to_string()]).await,
        (LEN - KEPT) as i64
    );
    let before = counters_when(&sql, "resp_stream_entry", "the trim's statistics", |c| {
        c.deleted == (LEN - KEPT) as i64
    })
    .await;

    let first = format!("{}-1", LEN - KEPT + 1);
    for _ in 0..READS {
        let range: Vec<Entry> = query(&mut con, &["XRANGE", "s", "-", "+", "COUNT", "2"]).await;
        assert_eq!(range[0].0, first);
        let read: Vec<(String, Vec<Entry>)> = query(&mut con, &["XREAD", "COUNT", "2", "STREAMS", "s", "0"]).await;
        assert_eq!(read[0].1[0].0, first);
    }
    let after = counters_when(&sql, "resp_stream_entry", "the reads' statistics", |c| {
        c.scans >= before.scans + 2 * READS
    })
    .await;
    let entries = after.entries - before.entries;
    // Each read starts at the stream's first entry (before layout v33, at the first trimmed
    // one: 19,990 index entries per read while any snapshot could still see them).
    assert!(
        entries <= 4 * 2 * 2 * READS,
        "{entries} index entries read by {} reads of 2 entries after a trim of {}",
        2 * READS,
        LEN - KEPT
    );
    assert_eq!(after.analyzed, 0, "resp_stream_entry was never analyzed");

    // Trimming again from the bound, and MINID, keep Redis's answers.
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "s", "MAXLEN", "5"]).await, 5);
    assert_eq!(
        query::<i64>(&mut con, &["XTRIM", "s", "MINID", &format!("{}-1", LEN - 1)]).await,
        3
    );
    let rest: Vec<Entry> = query(&mut con, &["XRANGE", "s", "-", "+"]).await;
    let ids: Vec<&str> = rest.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, [format!("{}-1", LEN - 1), format!("{LEN}-1")]);
    assert_eq!(query::<i64>(&mut con, &["XLEN", "s"]).await, 2);
}

#[tokio::test]
async fn copy_of_a_list_keeps_its_length() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    assert_eq!(query::<i64>(&mut con, &["RPUSH", "src", "a", "b", "c"]).await, 3);
    assert_eq!(query::<i64>(&mut con, &["COPY", "src", "dst"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["LLEN", "dst"]).await, 3);
    assert_eq!(
        query::<Vec<String>>(&mut con, &["LRANGE", "dst", "0", "-1"]).await,
        ["a", "b", "c"]
    );
    assert_eq!(query::<String>(&mut con, &["RPOP", "dst"]).await, "c");
    assert_eq!(query::<i64>(&mut con, &["LPUSH", "dst", "z"]).await, 3);
    assert_eq!(
        query::<Vec<String>>(&mut con, &["LRANGE", "dst", "0", "-1"]).await,
        ["z", "a", "b"]
    );
    assert_eq!(query::<i64>(&mut con, &["LLEN", "src"]).await, 3);
}

#[tokio::test]
async fn entries_added_below_a_trim_after_xsetid_are_read() {
    // XSETID may set an emptied stream's last ID below what a trim removed; entries added after
    // it lie below the stream's first possible ID, which XSETID therefore starts over.
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    for id in ["5-1", "6-1", "7-1"] {
        query::<String>(&mut con, &["XADD", "s", id, "f", "v"]).await;
    }
    assert_eq!(query::<i64>(&mut con, &["XTRIM", "s", "MAXLEN", "0"]).await, 3);
    assert_eq!(query::<String>(&mut con, &["XSETID", "s", "1-1"]).await, "OK");
    assert_eq!(
        query::<String>(&mut con, &["XADD", "s", "2-1", "f", "back"]).await,
        "2-1"
    );
    let range: Vec<Entry> = query(&mut con, &["XRANGE", "s", "-", "+"]).await;
    assert_eq!(range, [("2-1".to_string(), vec!["f".to_string(), "back".to_string()])]);
    let read: Vec<(String, Vec<Entry>)> = query(&mut con, &["XREAD", "STREAMS", "s", "0"]).await;
    assert_eq!(read[0].1[0].0, "2-1");
}

#[tokio::test]
async fn keys_are_looked_up_alone_in_a_bucket_of_many() {
    // A statement naming several keys as an array (a load of MGET's keys, a typed call's
    // check of its keys' types, the string keys among them, a set command's live sources, a
    // script's key versions) runs on a generic plan after its fifth execution, made without
    // the array; on a table never analyzed PostgreSQL takes a bucket for a handful of rows
    // and, with `key = ANY($2)`, read the whole bucket's index entries for each (layout v75
    // and before). Each key is looked up by itself now: the entries read follow the keys
    // named, not the bucket's size.
    const KEYS: usize = 2_000;
    const ROUNDS: usize = 200;
    let (gateway, sql) = never_analyzed().await;
    let mut con = connect(&gateway).await;
    assert_eq!(query::<String>(&mut con, &["SET", "seed", "0"]).await, "OK");
    let namespace: String = sql
        .query_one(
            "SELECT b.namespace FROM pgvs3.buckets b WHERE EXISTS (SELECT 1 FROM pg_tables t
                WHERE t.schemaname = b.namespace AND t.tablename = 'objects') LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get("namespace");
    sql.batch_execute(&format!(
        "ALTER TABLE \"{namespace}\".objects SET (autovacuum_enabled = off)"
    ))
    .await
    .unwrap();
    for chunk in 0..KEYS / 500 {
        let mut mset = redis::cmd("MSET");
        let mut hashes = redis::pipe();
        for i in chunk * 500..(chunk + 1) * 500 {
            mset.arg(format!("s{i}")).arg(i);
            hashes.cmd("HSET").arg(format!("h{i}")).arg("f").arg(i).ignore();
        }
        let () = mset.query_async(&mut con).await.unwrap();
        let () = hashes.query_async(&mut con).await.unwrap();
    }
    let typed_before = counters_when(&sql, "resp_keys", "the hashes' statistics", |c| {
        c.inserted == KEYS as i64
    })
    .await;
    let strings_before = counters_in_when(&sql, &namespace, "objects", "the strings' statistics", |c| {
        c.inserted == KEYS as i64 + 1
    })
    .await;

    let script = "redis.call('HSET', KEYS[1], 'e', ARGV[1]) return redis.call('HGET', KEYS[1], 'e')";
    for i in 0..ROUNDS {
        let (s, next, h) = (format!("s{i}"), format!("s{}", i + 1), format!("h{i}"));
        let got: Vec<Option<String>> = query(&mut con, &["MGET", &s, &next, &h, "absent"]).await;
        assert_eq!(got, [Some(i.to_string()), Some((i + 1).to_string()), None, None]);
        assert_eq!(query::<i64>(&mut con, &["HSET", &h, "g", "x"]).await, 1);
        assert_eq!(query::<i64>(&mut con, &["SCARD", "no-such-set"]).await, 0);
        let round = i.to_string();
        assert_eq!(
            query::<String>(&mut con, &["EVAL", script, "1", &h, &round]).await,
            round
        );
        // A new key of each kind per round: the statistics below wait for them.
        assert_eq!(query::<i64>(&mut con, &["SADD", &format!("new{i}"), "m"]).await, 1);
        assert_eq!(query::<String>(&mut con, &["SET", &format!("t{i}"), "v"]).await, "OK");
    }
    let typed = counters_when(&sql, "resp_keys", "the rounds' statistics", |c| {
        c.inserted == typed_before.inserted + ROUNDS as i64
    })
    .await;
    let strings = counters_in_when(&sql, &namespace, "objects", "the rounds' statistics", |c| {
        c.inserted == strings_before.inserted + ROUNDS as i64
    })
    .await;
    let typed_entries = typed.entries - typed_before.entries;
    let string_entries = strings.entries - strings_before.entries;
    // Each round names about ten keys in all (reading each a few times over its statements);
    // one read of the bucket is 2,000 entries.
    assert!(
        typed_entries <= 40 * ROUNDS as i64 && string_entries <= 40 * ROUNDS as i64,
        "{typed_entries} entries of resp_keys' indexes and {string_entries} of objects' read by \
         {ROUNDS} rounds in a bucket of {KEYS} strings and {KEYS} hashes"
    );
    assert_eq!(typed.analyzed, 0, "resp_keys was never analyzed");
    assert_eq!(strings.analyzed, 0, "objects was never analyzed");
}

#[tokio::test]
async fn zunion_takes_an_expired_key_of_another_type_for_absent() {
    // A read names it without deleting it: it is absent all the same, as in Redis.
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = connect(&gateway).await;
    assert_eq!(query::<i64>(&mut con, &["ZADD", "z", "1", "a"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["HSET", "h", "f", "v"]).await, 1);
    assert_eq!(query::<i64>(&mut con, &["PEXPIRE", "h", "1"]).await, 1);
    common::eventually(Duration::from_secs(10), "h to expire", || async {
        let mut con = connect(&gateway).await;
        (query::<i64>(&mut con, &["EXISTS", "h"]).await == 0).then_some(())
    })
    .await;
    assert_eq!(query::<Vec<String>>(&mut con, &["ZUNION", "2", "z", "h"]).await, ["a"]);
    assert_eq!(
        query::<Vec<String>>(&mut con, &["ZINTER", "2", "z", "h"]).await,
        Vec::<String>::new()
    );
    assert_eq!(query::<Vec<String>>(&mut con, &["ZDIFF", "2", "z", "h"]).await, ["a"]);
}

#[tokio::test]
async fn removals_and_lookups_of_members_read_those_members() {
    // HDEL, SREM, ZREM, ZMSCORE (and the pops and range removals) name members as an array; on
    // a table never analyzed the generic plan of `member = ANY(args)` walked every member of
    // the key for each (layout v75 and before: 20,000 index entries per HDEL of one field).
    const SIZE: usize = 20_000;
    const ROUNDS: usize = 100;
    let (gateway, sql) = never_analyzed().await;
    let mut con = connect(&gateway).await;
    for chunk in 0..SIZE / 1000 {
        let (mut hset, mut sadd, mut zadd) = (redis::cmd("HSET"), redis::cmd("SADD"), redis::cmd("ZADD"));
        hset.arg("h");
        sadd.arg("s");
        zadd.arg("z");
        for i in chunk * 1000..(chunk + 1) * 1000 {
            hset.arg(format!("f{i}")).arg("v");
            sadd.arg(format!("m{i}"));
            zadd.arg(i).arg(format!("m{i}"));
        }
        let added: (i64, i64, i64) = redis::pipe()
            .add_command(hset)
            .add_command(sadd)
            .add_command(zadd)
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(added, (1000, 1000, 1000));
    }
    let tables = ["resp_hash", "resp_set", "resp_zset"];
    let mut before = Vec::new();
    for table in tables {
        before.push(counters_when(&sql, table, "the loads' statistics", |c| c.inserted == SIZE as i64).await);
    }

    for i in 0..ROUNDS {
        let (field, member, later) = (format!("f{i}"), format!("m{i}"), format!("m{}", i + 500));
        assert_eq!(query::<i64>(&mut con, &["HDEL", "h", &field, "nope"]).await, 1);
        assert_eq!(query::<i64>(&mut con, &["SREM", "s", &member, "nope"]).await, 1);
        assert_eq!(query::<i64>(&mut con, &["ZREM", "z", &member, "nope"]).await, 1);
        assert_eq!(
            query::<Vec<Option<f64>>>(&mut con, &["ZMSCORE", "z", &later, "nope"]).await,
            [Some((i + 500) as f64), None]
        );
        assert_eq!(
            query::<Vec<i64>>(&mut con, &["SMISMEMBER", "s", &later, &member]).await,
            [1, 0]
        );
        assert_eq!(
            query::<Vec<Option<String>>>(&mut con, &["HMGET", "h", &field, "f999"]).await,
            [None, Some("v".into())]
        );
    }
    // Each round's removals show in the statistics: they wait for them.
    for (table, before) in tables.iter().zip(&before) {
        let after = counters_when(&sql, table, "the rounds' statistics", |c| {
            c.deleted == before.deleted + ROUNDS as i64
        })
        .await;
        let entries = after.entries - before.entries;
        assert!(
            entries <= 20 * ROUNDS as i64,
            "{entries} index entries of {table} read by {ROUNDS} rounds of removals and lookups in keys of {SIZE}"
        );
        assert_eq!(after.analyzed, 0, "{table} was never analyzed");
    }
    assert_eq!(query::<i64>(&mut con, &["HLEN", "h"]).await, (SIZE - ROUNDS) as i64);
    assert_eq!(query::<i64>(&mut con, &["SCARD", "s"]).await, (SIZE - ROUNDS) as i64);
    assert_eq!(
        query::<Vec<String>>(&mut con, &["ZPOPMIN", "z", "2"]).await,
        [
            format!("m{ROUNDS}"),
            ROUNDS.to_string(),
            format!("m{}", ROUNDS + 1),
            (ROUNDS + 1).to_string()
        ]
    );
    assert_eq!(query::<i64>(&mut con, &["ZREMRANGEBYRANK", "z", "0", "1"]).await, 2);
    assert_eq!(
        query::<i64>(&mut con, &["ZCARD", "z"]).await,
        (SIZE - ROUNDS - 4) as i64
    );
}

#[tokio::test]
async fn set_combinations_read_their_sources_only() {
    // SUNION, SINTER and SDIFF of two sets of 100 among 200 such sets in the bucket, tables
    // never analyzed: each reads its two sources (layout v76 and before: about 1,400 index
    // entries a command, the other sets' members among them).
    const SETS: usize = 200;
    const ROUNDS: usize = 50;
    let (gateway, sql) = never_analyzed().await;
    let mut con = connect(&gateway).await;
    let mut load = redis::pipe();
    for k in 0..SETS {
        let mut sadd = redis::cmd("SADD");
        sadd.arg(format!("s{k}"));
        for i in 0..100 {
            sadd.arg(format!("m{}", i + k));
        }
        load.add_command(sadd).ignore();
    }
    let () = load.query_async(&mut con).await.unwrap();
    let before = counters_when(&sql, "resp_set", "the load's statistics", |c| {
        c.inserted == (SETS * 100) as i64
    })
    .await;

    for i in 0..ROUNDS {
        let (a, b) = (format!("s{i}"), format!("s{}", i + 1));
        assert_eq!(query::<Vec<String>>(&mut con, &["SUNION", &a, &b]).await.len(), 101);
        assert_eq!(query::<Vec<String>>(&mut con, &["SINTER", &a, &b, &a]).await.len(), 99);
        assert_eq!(
            query::<Vec<String>>(&mut con, &["SDIFF", &a, &b]).await,
            [format!("m{i}")]
        );
        // A marker the statistics below wait for.
        assert_eq!(query::<i64>(&mut con, &["SADD", &format!("new{i}"), "m"]).await, 1);
    }
    let after = counters_when(&sql, "resp_set", "the rounds' statistics", |c| {
        c.inserted == before.inserted + ROUNDS as i64
    })
    .await;
    let entries = after.entries - before.entries;
    // Each command reads its two sources' 200 members (a source named twice is read once).
    assert!(
        entries <= 3 * 250 * ROUNDS as i64,
        "{entries} index entries of resp_set read by {ROUNDS} rounds of SUNION, SINTER and SDIFF"
    );
    assert_eq!(after.analyzed, 0, "resp_set was never analyzed");
}

/// A statement that names its keys through `rows_of_keys` keeps one generic plan on a table
/// never analyzed: PostgreSQL does not plan its executions one by one. (Before, a plan made for
/// one execution's one key looked cheaper than the generic plan's guess of ten: a typed read's
/// expired-key check was planned again at every HGET, 470 µs a plan, more than the rest of the
/// read; session 38.) Counted by PostgreSQL itself: `pg_prepared_statements` says how many
/// generic and custom plans each of the connection's prepared statements ran on.
#[tokio::test]
async fn statements_naming_their_keys_keep_one_generic_plan() {
    let (gateway, sql) = never_analyzed().await;
    let mut con = connect(&gateway).await;
    for key in ["h1", "h2", "h3"] {
        let _: i64 = query(&mut con, &["HSET", key, "f", "v"]).await;
    }
    let bucket: i64 = sql
        .query_one("SELECT DISTINCT bucket_id FROM pgvs3.resp_keys", &[])
        .await
        .unwrap()
        .get("bucket_id");
    let rows = pgvs3_store::store::key_probes::rows_of_keys("pgvs3.resp_keys", "r", "$1", "$2");
    let statement = sql
        .prepare(&format!("SELECT r.key, r.version FROM {rows}"))
        .await
        .unwrap();
    for round in 0..20 {
        let keys = vec![format!("h{}", round % 3 + 1)];
        let found = sql.query(&statement, &[&bucket, &keys]).await.unwrap();
        assert_eq!(found.len(), 1, "round {round}");
    }
    let plans = sql
        .query_one(
            // The statement itself, not this query (whose text names it too).
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements
              WHERE statement LIKE '%) AS wanted,%' AND statement NOT LIKE '%pg_prepared_statements%'",
            &[],
        )
        .await
        .unwrap();
    let (generic, custom): (i64, i64) = (plans.get("generic_plans"), plans.get("custom_plans"));
    // PostgreSQL plans the first five executions for their parameters, then compares.
    assert!(custom <= 5, "{custom} custom plans, {generic} generic");
    assert_eq!(generic + custom, 20);
}
