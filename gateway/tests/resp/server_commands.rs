//! The server commands the Redis test suite and client libraries use around the data:
//! FLUSHALL, FUNCTION FLUSH, CONFIG SET of encoding parameters, INFO's memory, stats and CPU
//! sections and commandstats, MEMORY USAGE, CLIENT LIST's fields, CLIENT KILL, REPLY, UNBLOCK and
//! PAUSE, EXPIRE's combined options, COMMAND's introspection, CONFIG RESETSTAT and INFO's
//! errorstats, MONITOR's lines of script calls, each answered as Redis 7 answers it.

use crate::redis_rs;
use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::live::{LiveRedis, same_lines};
use common::resp::{RawResp, Value, encode};

fn ok() -> Value {
    Value::Simple("OK".into())
}

#[tokio::test]
async fn flushall_empties_every_database_and_function_flush_is_accepted() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb", "--resp-databases", "1=second"]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["SET", "a", "0"]).await, ok());
    assert_eq!(raw.command(&["SELECT", "1"]).await, ok());
    assert_eq!(raw.command(&["SET", "b", "1"]).await, ok());
    assert_eq!(raw.command(&["FLUSHALL", "LATER"]).await.error(), "ERR syntax error");
    assert_eq!(
        raw.command(&["DBSIZE"]).await,
        Value::Int(1),
        "a refused FLUSHALL flushes nothing"
    );
    assert_eq!(raw.command(&["FLUSHALL"]).await, ok());
    assert_eq!(raw.command(&["DBSIZE"]).await, Value::Int(0));
    assert_eq!(raw.command(&["SELECT", "0"]).await, ok());
    assert_eq!(raw.command(&["DBSIZE"]).await, Value::Int(0));
    assert_eq!(raw.command(&["FLUSHALL", "ASYNC"]).await, ok());

    assert_eq!(raw.command(&["FUNCTION", "FLUSH"]).await, ok());
    assert_eq!(raw.command(&["FUNCTION", "FLUSH", "SYNC"]).await, ok());
    assert_eq!(raw.command(&["FUNCTION", "LIST"]).await, Value::Array(vec![]));

    let refused = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(refused.resp_addr()).await;
    assert_eq!(raw.command(&["SET", "kept", "v"]).await, ok());
    assert_eq!(
        raw.command(&["FLUSHALL"]).await.error(),
        "ERR FLUSHALL is disabled on this server (start pgvs3 with --resp-flushdb)"
    );
    assert_eq!(raw.command(&["DBSIZE"]).await, Value::Int(1));
}

#[tokio::test]
async fn config_set_takes_encoding_parameters_and_info_has_the_standard_sections() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        raw.command(&[
            "CONFIG",
            "SET",
            "list-max-ziplist-size",
            "4",
            "set-max-intset-entries",
            "64"
        ])
        .await,
        ok()
    );
    // A parameter pgvs3 knows but takes from its flags is refused saying so.
    assert_eq!(
        raw.command(&["CONFIG", "SET", "maxmemory", "1"]).await.error(),
        "ERR CONFIG SET failed (possibly related to argument 'maxmemory') - it is not supported by pgvs3: \
         it is configured by its flags (see docs/resp-compatibility.md)"
    );
    // `save ""` (no snapshots) is what pgvs3 is, as Redis's own test units set it; a schedule
    // of snapshots is not.
    assert_eq!(raw.command(&["CONFIG", "SET", "save", ""]).await, ok());
    assert_eq!(
        raw.command(&["CONFIG", "SET", "save", "900 1"]).await.error(),
        "ERR CONFIG SET failed (possibly related to argument 'save') - it is not supported by pgvs3: \
         it is configured by its flags (see docs/resp-compatibility.md)"
    );
    assert_eq!(
        raw.command(&["CONFIG", "SET", "list-max-ziplist-size"]).await.error(),
        "ERR wrong number of arguments for 'config|set' command"
    );

    let Value::Bulk(info) = raw.command(&["INFO"]).await else {
        panic!("INFO is a bulk string")
    };
    let info = String::from_utf8(info).unwrap();
    for section in ["# Server", "# Clients", "# Memory", "# Stats", "# CPU", "# Keyspace"] {
        assert!(info.contains(section), "{section} in {info}");
    }
    assert!(info.contains("mem_allocator:mimalloc\r\n"));
    let field = |name: &str| -> f64 {
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("{name} in {info}"))
            .parse()
            .unwrap()
    };
    assert!(field("used_memory") > 1e6, "a gateway uses megabytes");
    assert!(
        field("total_commands_processed") >= 3.0,
        "the commands above were counted"
    );
    assert!(field("total_connections_received") >= 1.0);
    assert!(field("used_cpu_user") > 0.0);
    // pgvs3 has no MIGRATE, so never a socket cached for one (dump.tcl waits for 0).
    assert_eq!(field("migrate_cached_sockets"), 0.0);
    let Value::Bulk(memory) = raw.command(&["INFO", "memory"]).await else {
        panic!("INFO memory")
    };
    let memory = String::from_utf8(memory).unwrap();
    assert!(memory.contains("# Memory") && !memory.contains("# Server"), "{memory}");
}

#[tokio::test]
async fn client_list_kill_and_reply() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut me = RawResp::connect(gateway.resp_addr()).await;
    let mut other = RawResp::connect(gateway.resp_addr()).await;
    let Value::Int(other_id) = other.command(&["CLIENT", "ID"]).await else {
        panic!("CLIENT ID")
    };
    let Value::Bulk(list) = me.command(&["CLIENT", "LIST"]).await else {
        panic!("CLIENT LIST")
    };
    let list = String::from_utf8(list).unwrap();
    let line = list
        .lines()
        .find(|line| line.starts_with(&format!("id={other_id} ")))
        .unwrap_or_else(|| panic!("the other client in {list}"));
    for field in [
        "addr=",
        "laddr=",
        "fd=",
        "flags=N",
        "db=0",
        "multi=-1",
        "qbuf=",
        "omem=",
        "tot-mem=",
        "cmd=client",
    ] {
        assert!(line.contains(field), "{field} in {line}");
    }

    // CLIENT KILL by ID answers how many went; the killed connection is closed.
    assert_eq!(
        me.command(&["CLIENT", "KILL", "ID", &other_id.to_string()]).await,
        Value::Int(1)
    );
    assert!(other.closed().await, "the killed client's connection is closed");
    assert_eq!(me.command(&["CLIENT", "KILL", "ID", "999999"]).await, Value::Int(0));
    assert_eq!(
        me.command(&["CLIENT", "KILL", "ID", "0"]).await.error(),
        "ERR client-id should be greater than 0"
    );
    assert_eq!(me.command(&["CLIENT", "KILL", "TYPE", "pubsub"]).await, Value::Int(0));
    assert_eq!(
        me.command(&["CLIENT", "KILL", "1.2.3.4:5"]).await.error(),
        "ERR No such client"
    );
    // SKIPME yes (the default) spares the caller.
    assert_eq!(me.command(&["CLIENT", "KILL", "TYPE", "normal"]).await, Value::Int(0));
    assert_eq!(me.command(&["PING"]).await, Value::Simple("PONG".into()));

    // CLIENT REPLY OFF silences everything until ON; SKIP silences itself and the next reply.
    me.send(&encode(&[b"CLIENT", b"REPLY", b"OFF"])).await;
    me.send(&encode(&[b"SET", b"quiet", b"1"])).await;
    assert_eq!(
        me.command(&["CLIENT", "REPLY", "ON"]).await,
        ok(),
        "the first reply after OFF is ON's"
    );
    assert_eq!(
        me.command(&["GET", "quiet"]).await,
        Value::bulk("1"),
        "the silenced SET ran"
    );
    me.send(&encode(&[b"CLIENT", b"REPLY", b"SKIP"])).await;
    me.send(&encode(&[b"SET", b"skipped", b"2"])).await;
    assert_eq!(me.command(&["GET", "skipped"]).await, Value::bulk("2"));
    assert_eq!(
        me.command(&["CLIENT", "REPLY", "MAYBE"]).await.error(),
        "ERR syntax error"
    );
}

/// CLIENT LIST's and CLIENT KILL's options as redis-server 7.0.15 answers them (compared with
/// the same inputs): a bare CLIENT KILL is an arity error, not a filter that matches everyone,
/// and CLIENT LIST ID lists only the clients named.
#[tokio::test]
async fn client_list_and_kill_take_redis_options() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut me = RawResp::connect(gateway.resp_addr()).await;
    let mut first = RawResp::connect(gateway.resp_addr()).await;
    let mut second = RawResp::connect(gateway.resp_addr()).await;
    let id = |reply: Value| match reply {
        Value::Int(id) => id.to_string(),
        other => panic!("CLIENT ID: {other:?}"),
    };
    let first_id = id(first.command(&["CLIENT", "ID"]).await);
    let second_id = id(second.command(&["CLIENT", "ID"]).await);

    assert_eq!(
        me.command(&["CLIENT", "KILL"]).await.error(),
        "ERR wrong number of arguments for 'client|kill' command"
    );
    assert_eq!(first.command(&["PING"]).await, Value::Simple("PONG".into()));
    assert_eq!(second.command(&["PING"]).await, Value::Simple("PONG".into()));

    let ids = |reply: Value| match reply {
        Value::Bulk(text) => String::from_utf8(text)
            .unwrap()
            .lines()
            .map(|line| line.split(' ').next().unwrap().trim_start_matches("id=").to_owned())
            .collect::<Vec<_>>(),
        other => panic!("CLIENT LIST: {other:?}"),
    };
    assert_eq!(
        ids(me.command(&["CLIENT", "LIST", "ID", &first_id]).await),
        std::slice::from_ref(&first_id)
    );
    assert_eq!(
        ids(me
            .command(&["CLIENT", "LIST", "ID", &second_id, "999999", &first_id, "0", "-5"])
            .await),
        [second_id.clone(), first_id.clone()],
        "the clients named that exist, in the order given"
    );
    assert_eq!(ids(me.command(&["CLIENT", "LIST", "TYPE", "normal"]).await).len(), 3);
    assert_eq!(ids(me.command(&["CLIENT", "LIST", "TYPE", "pubsub"]).await).len(), 0);
    for (args, error) in [
        (&["CLIENT", "LIST", "ID"][..], "ERR syntax error"),
        (&["CLIENT", "LIST", "ID", "abc"], "ERR Invalid client ID"),
        (
            &["CLIENT", "LIST", "ID", &first_id, "TYPE", "normal"],
            "ERR Invalid client ID",
        ),
        (
            &["CLIENT", "LIST", "TYPE", "normal", "ID", &first_id],
            "ERR syntax error",
        ),
        (&["CLIENT", "LIST", "TYPE"], "ERR syntax error"),
        (&["CLIENT", "LIST", "TYPE", "bogus"], "ERR Unknown client type 'bogus'"),
        (&["CLIENT", "LIST", "FOO"], "ERR syntax error"),
        (
            &["CLIENT", "KILL", "ID", "abc", "TYPE"],
            "ERR client-id should be greater than 0",
        ),
        (
            &["CLIENT", "KILL", "ID", "-1"],
            "ERR client-id should be greater than 0",
        ),
        (&["CLIENT", "KILL", "ID", "1", "ID"], "ERR syntax error"),
        (&["CLIENT", "KILL", "TYPE", "bogus"], "ERR Unknown client type 'bogus'"),
        (
            &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "maybe"],
            "ERR syntax error",
        ),
        (&["CLIENT", "KILL", "USER", "nobody"], "ERR No such user 'nobody'"),
        (&["CLIENT", "KILL", "FOO", "bar"], "ERR syntax error"),
        (&["CLIENT", "KILL", "nonsense"], "ERR No such client"),
    ] {
        assert_eq!(me.command(args).await.error(), error, "{args:?}");
    }
    // Nothing above closed anyone.
    assert_eq!(ids(me.command(&["CLIENT", "LIST"]).await).len(), 3);
    assert_eq!(
        me.command(&["CLIENT", "KILL", "ADDR", "1.2.3.4:5", "LADDR", "x"]).await,
        Value::Int(0)
    );
    assert_eq!(
        me.command(&["CLIENT", "KILL", "USER", "default", "ID", &first_id])
            .await,
        Value::Int(1)
    );
    assert!(first.closed().await, "the client killed by ID is closed");
    assert_eq!(second.command(&["PING"]).await, Value::Simple("PONG".into()));
}

#[tokio::test]
async fn expire_combines_xx_with_gt_and_lt() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["SET", "k", "v"]).await, ok());
    // XX: only with a TTL, so nothing happens to a persistent key, with GT or LT alike.
    assert_eq!(raw.command(&["EXPIRE", "k", "100", "XX", "GT"]).await, Value::Int(0));
    assert_eq!(raw.command(&["EXPIRE", "k", "100", "XX", "LT"]).await, Value::Int(0));
    assert_eq!(raw.command(&["TTL", "k"]).await, Value::Int(-1));
    // LT alone on a persistent key sets it (no TTL counts as infinite).
    assert_eq!(raw.command(&["EXPIRE", "k", "100", "LT"]).await, Value::Int(1));
    assert_eq!(raw.command(&["EXPIRE", "k", "50", "XX", "GT"]).await, Value::Int(0));
    assert_eq!(raw.command(&["EXPIRE", "k", "200", "XX", "GT"]).await, Value::Int(1));
    assert_eq!(raw.command(&["EXPIRE", "k", "300", "XX", "LT"]).await, Value::Int(0));
    assert_eq!(raw.command(&["EXPIRE", "k", "150", "XX", "LT"]).await, Value::Int(1));
    let Value::Int(ttl) = raw.command(&["TTL", "k"]).await else {
        panic!("TTL")
    };
    assert!((140..=150).contains(&ttl), "{ttl}");
    assert_eq!(
        raw.command(&["EXPIRE", "k", "10", "NX", "GT"]).await.error(),
        "ERR NX and XX, GT or LT options at the same time are not compatible"
    );
}

/// The INFO fields clients and exporters read: `cluster_enabled` (redis-py's own test suite
/// reads it first), `loading` (ioredis's ready check), `connected_clients`, and Redis 7's
/// `total_error_replies`, as redis-server 7.0.15 answers and counts them.
#[tokio::test]
async fn info_has_the_fields_clients_and_exporters_read() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(
        raw.command(&["INFO", "cluster"]).await,
        Value::bulk("# Cluster\r\ncluster_enabled:0\r\n")
    );
    raw.command(&["FOO"]).await.error();
    raw.command(&["SET", "s", "x"]).await;
    raw.command(&["INCR", "s"]).await.error();
    let Value::Bulk(info) = raw.command(&["INFO"]).await else {
        panic!("INFO is a bulk string")
    };
    let info = String::from_utf8(info).unwrap();
    let field = |name: &str| -> String {
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("{name} in {info}"))
            .to_owned()
    };
    for (name, value) in [
        ("cluster_enabled", "0"),
        ("loading", "0"),
        ("connected_clients", "1"),
        ("redis_mode", "standalone"),
        ("total_error_replies", "2"),
        ("unexpected_error_replies", "0"),
    ] {
        assert_eq!(field(name), value, "{name}");
    }
    assert_eq!(field("process_id"), std::process::id().to_string());
}

/// INFO commandstats counts each command's calls, its calls refused before they ran (wrong
/// arity) and its calls answered with an error (a syntax error, a wrong type), and
/// `total_commands_processed` leaves the refused out, as redis-server 7.0.15 counts them on the
/// same commands. Plain INFO leaves the section out, as Redis's `default` does. Counts only:
/// the times are not asserted.
#[tokio::test]
async fn info_commandstats_counts_calls_rejections_and_failures() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let mut info = async |section: &str| -> String {
        let Value::Bulk(info) = raw.command(&["INFO", section]).await else {
            panic!("INFO is a bulk string")
        };
        String::from_utf8(info).unwrap()
    };
    let processed = |info: &str| -> u64 {
        info.lines()
            .find_map(|line| line.strip_prefix("total_commands_processed:"))
            .unwrap_or_else(|| panic!("total_commands_processed in {info}"))
            .trim()
            .parse()
            .unwrap()
    };
    let before = processed(&info("stats").await);
    assert!(!info("default").await.contains("Commandstats"));
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["SET", "a", "1"]).await, ok());
    assert_eq!(raw.command(&["SET", "s", "x"]).await, ok());
    raw.command(&["SET", "s", "x", "NX", "XX"]).await.error();
    assert_eq!(raw.command(&["INCR", "a"]).await, Value::Int(2));
    raw.command(&["INCR", "s"]).await.error();
    raw.command(&["GET"]).await.error();
    raw.command(&["NOSUCHCOMMAND"]).await.error();
    let Value::Bulk(stats) = raw.command(&["INFO", "commandstats"]).await else {
        panic!("INFO commandstats is a bulk string")
    };
    let stats = String::from_utf8(stats).unwrap();
    assert!(stats.starts_with("# Commandstats\r\n"), "{stats}");
    // Each line without its times: `calls=…,rejected_calls=…,failed_calls=…`.
    let counts = |name: &str| -> String {
        let line = stats
            .lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{name}:")))
            .unwrap_or_else(|| panic!("cmdstat_{name} in {stats}"));
        line.split(',')
            .filter(|field| !field.starts_with("usec"))
            .collect::<Vec<_>>()
            .join(",")
    };
    assert_eq!(counts("set"), "calls=3,rejected_calls=0,failed_calls=1");
    assert_eq!(counts("incr"), "calls=2,rejected_calls=0,failed_calls=1");
    assert_eq!(counts("get"), "calls=0,rejected_calls=1,failed_calls=0");
    assert!(
        stats.contains("cmdstat_get:calls=0,usec=0,usec_per_call=0.00,"),
        "{stats}"
    );
    assert!(!stats.contains("nosuchcommand"), "{stats}");
    // The two INFOs, the five calls that ran and this connection's INFO: not the two refused.
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let Value::Bulk(after) = raw.command(&["INFO", "stats"]).await else {
        panic!("INFO stats")
    };
    assert_eq!(processed(&String::from_utf8(after).unwrap()) - before, 2 + 5 + 1);
}

/// MEMORY USAGE estimates a key from its stored sizes (nil for a missing key, Redis's errors
/// for bad SAMPLES), through redis-rs; a hash of equal-sized fields samples to the size of all
/// of them. MEMORY's other subcommands answer or are refused as docs/resp-compatibility.md says.
#[tokio::test]
async fn memory_usage_estimates_from_stored_sizes() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = redis_rs::connect(&gateway).await;
    let usage = async |con: &mut redis::aio::MultiplexedConnection, args: &[&str]| -> Option<i64> {
        redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(args)
            .query_async(con)
            .await
            .unwrap()
    };
    let _: () = redis::cmd("SET")
        .arg("s")
        .arg("x".repeat(1000))
        .query_async(&mut con)
        .await
        .unwrap();
    // The key's row: 28 bytes of PostgreSQL's row header and pointer, the key, the value.
    assert_eq!(usage(&mut con, &["s"]).await, Some(28 + 1 + 1000));
    assert_eq!(usage(&mut con, &["missing"]).await, None);
    for field in 0..100 {
        let _: () = redis::cmd("HSET")
            .arg("h")
            .arg(format!("field{field:03}"))
            .arg("v".repeat(100))
            .query_async(&mut con)
            .await
            .unwrap();
    }
    let all = usage(&mut con, &["h", "SAMPLES", "0"]).await.unwrap();
    // Each field's bytes (8 + 100) are stored, with the rows' own overhead on top.
    assert!(all > 100 * 108, "{all}");
    assert_eq!(usage(&mut con, &["h"]).await, Some(all));
    assert_eq!(usage(&mut con, &["h", "SAMPLES", "3"]).await, Some(all));

    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    for (args, error) in [
        (&["MEMORY", "USAGE", "h", "SAMPLES", "-1"][..], "ERR syntax error"),
        (
            &["MEMORY", "USAGE", "h", "SAMPLES", "x"],
            "ERR value is not an integer or out of range",
        ),
        (&["MEMORY", "USAGE", "h", "SAMPLES"], "ERR syntax error"),
        (&["MEMORY", "USAGE", "h", "FOO", "1"], "ERR syntax error"),
        (
            &["MEMORY", "USAGE"],
            "ERR wrong number of arguments for 'memory|usage' command",
        ),
        (&["MEMORY"], "ERR wrong number of arguments for 'memory' command"),
        (&["MEMORY", "FOO"], "ERR unknown subcommand 'FOO'. Try MEMORY HELP."),
    ] {
        assert_eq!(raw.command(args).await.error(), error, "{args:?}");
    }
    assert_eq!(raw.command(&["MEMORY", "PURGE"]).await, ok());
    assert!(
        raw.command(&["MEMORY", "STATS"])
            .await
            .error()
            .starts_with("ERR MEMORY STATS is not supported")
    );
    let Value::Array(help) = raw.command(&["MEMORY", "HELP"]).await else {
        panic!("MEMORY HELP is an array")
    };
    assert!(help.contains(&Value::Simple("USAGE <key> [SAMPLES <count>]".into())));
}

/// CLIENT UNBLOCK wakes a client blocked in BLPOP on this gateway: with TIMEOUT (the default)
/// it answers what its timeout would (nil), with ERROR Redis's `UNBLOCKED` error; a client that
/// is not blocked answers 0. INFO's `blocked_clients` counts the client while it waits.
/// CLIENT NO-EVICT and NO-TOUCH take ON or OFF, as Redis.
#[tokio::test]
async fn client_unblock_wakes_a_blocked_blpop() {
    let gateway = TestGateway::with_resp(&[]).await;
    let con = redis_rs::connect(&gateway).await;
    for (reason, answer) in [
        (None, Value::Nil),
        (Some("TIMEOUT"), Value::Nil),
        (
            Some("ERROR"),
            Value::Error("UNBLOCKED client unblocked via CLIENT UNBLOCK".into()),
        ),
    ] {
        let mut blocked = RawResp::connect(gateway.resp_addr()).await;
        let Value::Int(id) = blocked.command(&["CLIENT", "ID"]).await else {
            panic!("CLIENT ID is an integer")
        };
        let waiting = tokio::spawn(async move { blocked.command(&["BLPOP", "nothing", "0"]).await });
        common::eventually(
            std::time::Duration::from_secs(10),
            "CLIENT UNBLOCK finds the client blocked",
            || {
                let mut con = con.clone();
                async move {
                    let info: String = redis::cmd("INFO").arg("clients").query_async(&mut con).await.unwrap();
                    if !info.contains("blocked_clients:1\r\n") {
                        return None;
                    }
                    let mut unblock = redis::cmd("CLIENT");
                    unblock.arg("UNBLOCK").arg(id);
                    if let Some(reason) = reason {
                        unblock.arg(reason);
                    }
                    let unblocked: i64 = unblock.query_async(&mut con).await.unwrap();
                    (unblocked == 1).then_some(())
                }
            },
        )
        .await;
        assert_eq!(waiting.await.unwrap(), answer, "{reason:?}");
    }
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(raw.command(&["CLIENT", "UNBLOCK", "99999"]).await, Value::Int(0));
    for (args, error) in [
        (
            &["CLIENT", "UNBLOCK", "x"][..],
            "ERR value is not an integer or out of range",
        ),
        (
            &["CLIENT", "UNBLOCK", "1", "foo"],
            "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR",
        ),
        (
            &["CLIENT", "UNBLOCK"],
            "ERR wrong number of arguments for 'client|unblock' command",
        ),
        (&["CLIENT", "NO-EVICT", "maybe"], "ERR syntax error"),
        (&["CLIENT", "NO-TOUCH", "maybe"], "ERR syntax error"),
    ] {
        assert_eq!(raw.command(args).await.error(), error, "{args:?}");
    }
    assert_eq!(raw.command(&["CLIENT", "NO-EVICT", "on"]).await, ok());
    assert_eq!(raw.command(&["CLIENT", "NO-TOUCH", "OFF"]).await, ok());
}

/// CLIENT PAUSE WRITE holds this gateway's writes (not its reads) until CLIENT UNPAUSE;
/// CLIENT PAUSE ALL (the default mode) holds every command until its timeout; Redis 7.0.15's
/// errors for a bad timeout or mode.
#[tokio::test]
async fn client_pause_holds_writes_or_everything_until_unpaused_or_over() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut admin = RawResp::connect(gateway.resp_addr()).await;
    let mut reader = RawResp::connect(gateway.resp_addr()).await;
    let mut writer = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(admin.command(&["SET", "k", "before"]).await, ok());
    assert_eq!(admin.command(&["CLIENT", "PAUSE", "60000", "WRITE"]).await, ok());
    let write = tokio::spawn(async move { writer.command(&["SET", "k", "after"]).await });
    assert_eq!(reader.command(&["GET", "k"]).await, Value::bulk("before"));
    assert!(!write.is_finished(), "a write waits out CLIENT PAUSE WRITE");
    assert_eq!(admin.command(&["CLIENT", "UNPAUSE"]).await, ok());
    assert_eq!(write.await.unwrap(), ok());
    assert_eq!(reader.command(&["GET", "k"]).await, Value::bulk("after"));

    let paused = std::time::Instant::now();
    assert_eq!(admin.command(&["CLIENT", "PAUSE", "300"]).await, ok());
    assert_eq!(reader.command(&["GET", "k"]).await, Value::bulk("after"));
    assert!(
        paused.elapsed() >= std::time::Duration::from_millis(300),
        "a read waits out CLIENT PAUSE ALL"
    );

    for (args, error) in [
        (
            &["CLIENT", "PAUSE", "x"][..],
            "ERR timeout is not an integer or out of range",
        ),
        (&["CLIENT", "PAUSE", "-1"], "ERR timeout is negative"),
        (
            &["CLIENT", "PAUSE", "10", "foo"],
            "ERR CLIENT PAUSE mode must be WRITE or ALL",
        ),
        (
            &["CLIENT", "PAUSE"],
            "ERR wrong number of arguments for 'client|pause' command",
        ),
        (
            &["CLIENT", "UNPAUSE", "x"],
            "ERR wrong number of arguments for 'client|unpause' command",
        ),
    ] {
        assert_eq!(admin.command(args).await.error(), error, "{args:?}");
    }
}

/// CONFIG GET answers the parameters clients ask for, by glob pattern, as redis-server 7.0.15
/// names them; values stand for what the gateway does (no eviction, no snapshots). Redis
/// answers in its own table's order; this answers in pgvs3's.
#[tokio::test]
async fn config_get_answers_what_clients_ask_for() {
    let gateway = TestGateway::with_resp(&["--resp-databases", "3=other"]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let pairs = |pairs: &[&str]| Value::Array(pairs.iter().map(|text| Value::bulk(text)).collect());
    assert_eq!(
        raw.command(&["CONFIG", "GET", "maxmemory-policy"]).await,
        pairs(&["maxmemory-policy", "noeviction"])
    );
    assert_eq!(
        raw.command(&["CONFIG", "GET", "databases", "appendonly"]).await,
        pairs(&["databases", "4", "appendonly", "no"])
    );
    assert_eq!(
        raw.command(&["CONFIG", "GET", "maxmemory*"]).await,
        pairs(&[
            "maxmemory",
            "0",
            "maxmemory-policy",
            "noeviction",
            "maxmemory-samples",
            "5",
            "maxmemory-clients",
            "0"
        ])
    );
    assert_eq!(raw.command(&["CONFIG", "GET", "nothing-such"]).await, pairs(&[]));
    // Tools' reads answered with Redis 7's defaults (redis-server 7.0.15's values), and what
    // stands for durability here.
    assert_eq!(
        raw.command(&["CONFIG", "GET", "slowlog-max-len", "appendfsync"]).await,
        pairs(&["appendfsync", "always", "slowlog-max-len", "128"])
    );
    // An encoding parameter that decides OBJECT ENCODING reads back as set (encodings.rs);
    // one that changes nothing here as Redis's default.
    assert_eq!(
        raw.command(&[
            "CONFIG",
            "SET",
            "hash-max-listpack-entries",
            "1024",
            "list-compress-depth",
            "2"
        ])
        .await,
        ok()
    );
    assert_eq!(
        raw.command(&["CONFIG", "GET", "hash-max-listpack-entries", "list-compress-depth"])
            .await,
        pairs(&["hash-max-listpack-entries", "1024", "list-compress-depth", "0"])
    );
    // An unknown one gets Redis's text.
    assert_eq!(
        raw.command(&["CONFIG", "SET", "nothing-such", "1"]).await.error(),
        "ERR Unknown option or number of arguments for CONFIG SET - 'nothing-such'"
    );
}

/// TOUCH answers as redis-server 7.0.15: the keys that exist, a key named twice counted twice.
#[tokio::test]
async fn touch_counts_the_keys_that_exist() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    raw.command(&["SET", "a", "1"]).await;
    raw.command(&["RPUSH", "l", "x"]).await;
    assert_eq!(raw.command(&["TOUCH", "a", "nosuch", "a", "l"]).await, Value::Int(3));
    assert_eq!(
        raw.command(&["TOUCH"]).await.error(),
        "ERR wrong number of arguments for 'touch' command"
    );
}

fn bulks(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|item| Value::bulk(item)).collect())
}

fn statuses(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|item| Value::Simple((*item).into())).collect())
}

/// Answers and error texts compared with redis-server 7.0.15.
#[tokio::test]
async fn command_getkeys_info_and_docs_answer_as_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    for (command, keys) in [
        (&["GET", "a"][..], &["a"][..]),
        (&["MSET", "a", "1", "b", "2"], &["a", "b"]),
        (&["BLPOP", "a", "b", "0"], &["a", "b"]),
        (&["EVAL", "return 1", "2", "a", "b", "c"], &["a", "b"]),
        // More keys than arguments: none, and EVAL may have none.
        (&["EVAL", "return 1", "5", "a"], &[]),
        (&["ZUNIONSTORE", "d", "2", "a", "b"], &["d", "a", "b"]),
        (&["ZINTER", "2", "a", "b", "WITHSCORES"], &["a", "b"]),
        (&["BLMPOP", "0", "2", "a", "b", "LEFT"], &["a", "b"]),
        (&["XREAD", "COUNT", "2", "STREAMS", "a", "b", "0", "0"], &["a", "b"]),
        (&["XREAD", "STREAMS", "a", "b", "0"], &["a"]),
        (&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"], &["s"]),
        (&["OBJECT", "ENCODING", "k"], &["k"]),
    ] {
        let mut args = vec!["COMMAND", "GETKEYS"];
        args.extend_from_slice(command);
        assert_eq!(raw.command(&args).await, bulks(keys), "{command:?}");
    }
    for (args, error) in [
        (
            &["COMMAND", "GETKEYS", "GET"][..],
            "ERR wrong number of arguments for 'command|getkeys' command",
        ),
        (&["COMMAND", "GETKEYS", "NOSUCH", "a"], "ERR Invalid command specified"),
        (
            &["COMMAND", "GETKEYS", "PING", "x"],
            "ERR The command has no key arguments",
        ),
        (
            &["COMMAND", "GETKEYS", "GET", "a", "b"],
            "ERR Invalid number of arguments specified for command",
        ),
        (
            &["COMMAND", "GETKEYS", "ZUNIONSTORE", "d", "0", "a"],
            "ERR Invalid arguments specified for command",
        ),
        (
            &["COMMAND", "GETKEYS", "XREAD", "COUNT", "1", "STREAMS", "a"],
            "ERR Invalid arguments specified for command",
        ),
    ] {
        assert_eq!(raw.command(args).await.error(), error, "{args:?}");
    }
    assert_eq!(
        raw.command(&["COMMAND", "GETKEYSANDFLAGS", "DEL", "a", "b"]).await,
        Value::Array(vec![
            Value::Array(vec![Value::bulk("a"), statuses(&["RM", "delete"])]),
            Value::Array(vec![Value::bulk("b"), statuses(&["RM", "delete"])]),
        ])
    );
    assert_eq!(
        raw.command(&["COMMAND", "GETKEYSANDFLAGS", "GET", "a"]).await,
        Value::Array(vec![Value::Array(vec![Value::bulk("a"), statuses(&["RO", "access"])])])
    );

    // Redis 7's ten fields; cluster clients read arity, flags and the key range.
    let Value::Array(info) = raw.command(&["COMMAND", "INFO", "get", "zunionstore"]).await else {
        panic!()
    };
    let Value::Array(get) = &info[0] else { panic!() };
    assert_eq!(get.len(), 10);
    assert_eq!(
        &get[..7],
        &[
            Value::bulk("get"),
            Value::Int(2),
            statuses(&["readonly", "fast"]),
            Value::Int(1),
            Value::Int(1),
            Value::Int(1),
            statuses(&["@read", "@string", "@fast"]),
        ]
    );
    let Value::Array(specs) = &get[8] else { panic!() };
    assert_eq!(specs.len(), 1, "{specs:?}");
    let Value::Array(zunionstore) = &info[1] else { panic!() };
    assert_eq!(
        &zunionstore[..7],
        &[
            Value::bulk("zunionstore"),
            Value::Int(-4),
            statuses(&["write", "denyoom", "movablekeys"]),
            Value::Int(1),
            Value::Int(1),
            Value::Int(1),
            statuses(&["@write", "@sortedset", "@slow"]),
        ]
    );

    // DOCS: the commands asked for that exist; an empty answer only for unknown names.
    assert_eq!(
        raw.command(&["COMMAND", "DOCS", "get", "nosuch"]).await,
        Value::Array(vec![
            Value::bulk("get"),
            Value::Array(vec![Value::bulk("group"), Value::bulk("string")]),
        ])
    );
    assert_eq!(raw.command(&["COMMAND", "DOCS", "nosuch"]).await, Value::Array(vec![]));
    let Value::Int(count) = raw.command(&["COMMAND", "COUNT"]).await else {
        panic!()
    };
    let Value::Array(docs) = raw.command(&["COMMAND", "DOCS"]).await else {
        panic!()
    };
    assert_eq!(docs.len() as i64, 2 * count);
    let Value::Array(list) = raw.command(&["COMMAND", "LIST"]).await else {
        panic!()
    };
    assert_eq!(list.len() as i64, count);
    assert_eq!(
        raw.command(&["COMMAND", "LIST", "FILTERBY", "PATTERN", "xs*"]).await,
        bulks(&["xsetid"])
    );
    let Value::Array(streams) = raw.command(&["COMMAND", "LIST", "FILTERBY", "ACLCAT", "stream"]).await else {
        panic!()
    };
    assert!(streams.contains(&Value::bulk("xread")) && !streams.contains(&Value::bulk("get")));
    assert_eq!(
        raw.command(&["COMMAND", "LIST", "FILTERBY", "MODULE", "x"]).await,
        Value::Array(vec![])
    );
    assert_eq!(
        raw.command(&["COMMAND", "LIST", "FILTERBY", "OTHER", "x"])
            .await
            .error(),
        "ERR syntax error"
    );
    assert_eq!(
        raw.command(&["COMMAND", "LIST", "BOGUS"]).await.error(),
        "ERR syntax error"
    );
}

/// Redis 7.0's per-key flags where one command's keys differ (its key specs and `setGetKeys`,
/// `sortGetKeys`): what introspection-2's GETKEYSANDFLAGS test asks, compared live.
#[tokio::test]
async fn getkeysandflags_tell_keys_apart_as_redis_does() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = common::resp::live::LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    common::resp::live::same_lines(
        &mut ours,
        &mut theirs,
        &[
            "COMMAND GETKEYSANDFLAGS set k1 v1",
            "COMMAND GETKEYSANDFLAGS set k1 v1 NX GET",
            "COMMAND GETKEYSANDFLAGS set k1 v1 EX 10",
            "COMMAND GETKEYSANDFLAGS setnx k1 v1",
            "COMMAND GETKEYSANDFLAGS setex k1 10 v1",
            "COMMAND GETKEYSANDFLAGS mset k1 v1 k2 v2",
            "COMMAND GETKEYSANDFLAGS msetnx k1 v1 k2 v2",
            "COMMAND GETKEYSANDFLAGS LMOVE k1 k2 left right",
            "COMMAND GETKEYSANDFLAGS BLMOVE k1 k2 left right 0",
            "COMMAND GETKEYSANDFLAGS RPOPLPUSH k1 k2",
            "COMMAND GETKEYSANDFLAGS SMOVE k1 k2 m",
            "COMMAND GETKEYSANDFLAGS sort k1 store k2",
            "COMMAND GETKEYSANDFLAGS sort k1 by store get store",
            "COMMAND GETKEYSANDFLAGS sort k1 store k2 limit 0 1 store k3",
            "COMMAND GETKEYSANDFLAGS sort k1 store",
            "COMMAND GETKEYSANDFLAGS getset k1 v1",
            "COMMAND GETKEYS sort k1 get store store k2",
        ],
    )
    .await;
}

/// CLIENT INFO and CLIENT LIST show the command running as Redis names it (`client|info`) and
/// its request still in the query buffer (`qbuf=26`, the Tcl suite's figure for CLIENT LIST),
/// and the last command of an idle client by its full name.
#[tokio::test]
async fn client_list_shows_the_running_command_and_its_request() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut me = RawResp::connect(gateway.resp_addr()).await;
    let mut other = RawResp::connect(gateway.resp_addr()).await;
    let Value::Int(other_id) = other.command(&["CLIENT", "ID"]).await else {
        panic!("CLIENT ID")
    };
    let Value::Bulk(info) = me.command(&["CLIENT", "INFO"]).await else {
        panic!("CLIENT INFO")
    };
    let info = String::from_utf8(info).unwrap();
    assert!(info.contains(" qbuf=26 "), "{info}");
    assert!(info.contains(" cmd=client|info "), "{info}");
    let Value::Bulk(list) = me.command(&["CLIENT", "LIST"]).await else {
        panic!("CLIENT LIST")
    };
    let list = String::from_utf8(list).unwrap();
    let mine = list
        .lines()
        .find(|line| line.contains(" qbuf=26 "))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(mine.contains(" cmd=client|list "), "{mine}");
    let theirs = list
        .lines()
        .find(|line| line.starts_with(&format!("id={other_id} ")))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        theirs.contains(" qbuf=0 ") && theirs.contains(" cmd=client|id "),
        "{theirs}"
    );
}

/// MONITOR shows a script's calls after the EVAL or FCALL that ran them, as the Lua client's
/// (`[0 lua] "set" "foo" "bar"`), as Redis shows them.
#[tokio::test]
async fn monitor_shows_the_calls_of_scripts_and_functions() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut monitor = RawResp::connect(gateway.resp_addr()).await;
    let mut client = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(monitor.command(&["MONITOR"]).await, ok());
    let line = |reply: Option<Value>| match reply {
        Some(Value::Simple(line)) => line,
        other => panic!("a monitor line, not {other:?}"),
    };
    client
        .command(&["EVAL", "redis.call('set', KEYS[1], ARGV[1])", "1", "foo", "bar"])
        .await;
    let eval = line(monitor.reply().await);
    assert!(
        eval.contains("\"EVAL\" \"redis.call('set', KEYS[1], ARGV[1])\" \"1\" \"foo\" \"bar\""),
        "{eval}"
    );
    let call = line(monitor.reply().await);
    assert!(call.ends_with(" [0 lua] \"set\" \"foo\" \"bar\""), "{call}");
    let library = "#!lua name=test\nredis.register_function('test', function() return redis.call('get', 'foo') end)";
    assert_eq!(
        client.command(&["FUNCTION", "LOAD", library]).await,
        Value::bulk("test")
    );
    assert!(line(monitor.reply().await).contains("\"FUNCTION\" \"LOAD\""));
    assert_eq!(client.command(&["FCALL", "test", "0"]).await, Value::bulk("bar"));
    assert!(line(monitor.reply().await).ends_with("\"FCALL\" \"test\" \"0\""));
    let call = line(monitor.reply().await);
    assert!(call.ends_with(" [0 lua] \"get\" \"foo\""), "{call}");
}

/// CONFIG RESETSTAT zeroes the counts, and INFO's `errorstats` counts error replies by code
/// (in INFO's default sections), as redis-server 7.0.15 does: the same commands on both, then
/// the same `errorstats` section, `total_error_replies` and failed calls.
#[tokio::test]
async fn resetstat_and_errorstats_count_as_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            "SET s v",
            "NOSUCHCOMMAND",
            "CONFIG RESETSTAT extra",
            "CONFIG RESETSTAT",
            "LPUSH s x",
            "INCR s",
            "XREADGROUP GROUP g c STREAMS nostream >",
            "NOSUCHCOMMAND",
            "GET s",
        ],
    )
    .await;
    for server in [&mut ours, &mut theirs] {
        let Value::Bulk(info) = server.command(&["INFO"]).await else {
            panic!("INFO")
        };
        let info = String::from_utf8(info).unwrap();
        let errorstats = info
            .split("\r\n\r\n")
            .find(|section| section.starts_with("# Errorstats"));
        assert_eq!(
            errorstats,
            Some("# Errorstats\r\nerrorstat_ERR:count=2\r\nerrorstat_NOGROUP:count=1\r\nerrorstat_WRONGTYPE:count=1"),
            "{info}"
        );
        assert!(info.contains("\r\ntotal_error_replies:4\r\n"), "{info}");
        let Value::Bulk(commandstats) = server.command(&["INFO", "commandstats"]).await else {
            panic!("INFO commandstats")
        };
        let commandstats = String::from_utf8(commandstats).unwrap();
        assert!(
            commandstats.contains("cmdstat_lpush:calls=1,") && commandstats.contains("failed_calls=1\r\n"),
            "{commandstats}"
        );
        assert!(!commandstats.contains("cmdstat_set:"), "{commandstats}");
    }
}

/// CONFIG SET refuses a parameter given twice and Redis's immutable ones with Redis's texts, and
/// CONFIG GET answers `replicaof`, `slaveof`, `maxmemory-clients` and the hidden `key-load-delay`
/// (only when named) as redis-server 7.0.15 does; compared live.
#[tokio::test]
async fn config_refuses_and_answers_as_redis() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            "CONFIG SET maxmemory 10000001 maxmemory 10000002",
            "CONFIG SET hash-max-listpack-entries 1 HASH-MAX-LISTPACK-ENTRIES 2",
            "CONFIG SET daemonize yes",
            "CONFIG SET databases 2",
            "CONFIG SET hash-max-listpack-entries 1 io-threads 2",
            "CONFIG GET hash-max-listpack-entries",
            "CONFIG GET replicaof",
            "CONFIG GET slaveof",
            "CONFIG GET maxmemory-clients",
            "CONFIG GET key-load-delay",
            "CONFIG GET key-load-*",
            "CONFIG GET_XX",
            "CONFIG|GET GET_XX",
        ],
    )
    .await;
    for server in [&mut ours, &mut theirs] {
        let Value::Bulk(info) = server.command(&["INFO"]).await else {
            panic!("INFO")
        };
        let info = String::from_utf8(info).unwrap();
        assert!(
            info.contains("\r\nlazyfree_pending_objects:0\r\n") && info.contains("\r\nlazyfreed_objects:0\r\n"),
            "{info}"
        );
    }
    let Value::Array(bind) = ours.command(&["CONFIG", "GET", "bind"]).await else {
        panic!("CONFIG GET bind")
    };
    assert_eq!(bind, [Value::bulk("bind"), Value::bulk("127.0.0.1")]);
}

/// A flush that committed answers OK, as Redis's flush that happened, even when the tracking
/// clients of other gateways cannot be told of it: here the message that tells them fails (the
/// function that sends it is missing). Before, FLUSHDB answered the failure, so the client
/// believed nothing was flushed, and FLUSHALL stopped at its first database, leaving the others
/// unflushed. This gateway's own tracking clients are told all the same.
#[tokio::test]
async fn a_flush_that_committed_answers_ok_when_tracking_clients_cannot_be_told() {
    let gateway = TestGateway::with_resp(&["--resp-flushdb", "--resp-databases", "1=second"]).await;
    let mut raw = RawResp::connect(gateway.resp_addr()).await;
    let mut tracker = RawResp::connect(gateway.resp_addr()).await;
    assert!(matches!(tracker.command(&["HELLO", "3"]).await, Value::Map(_)));
    assert_eq!(tracker.command(&["CLIENT", "TRACKING", "ON"]).await, ok());
    let sql = gateway.sql().await;
    sql.batch_execute("ALTER FUNCTION pgvs3.resp_publish(bytea, bytea, integer) RENAME TO resp_publish_gone")
        .await
        .unwrap();
    let set_in_both = async |raw: &mut RawResp| {
        for db in ["1", "0"] {
            assert_eq!(raw.command(&["SELECT", db]).await, ok());
            assert_eq!(raw.command(&["SET", "k", "v"]).await, ok());
        }
    };
    set_in_both(&mut raw).await;
    assert_eq!(tracker.command(&["GET", "k"]).await, Value::bulk("v"));
    assert_eq!(raw.command(&["FLUSHDB"]).await, ok());
    assert_eq!(raw.command(&["DBSIZE"]).await, Value::Int(0));
    assert_eq!(
        tracker.reply().await,
        Some(Value::Push(vec![Value::bulk("invalidate"), Value::Nil]))
    );
    set_in_both(&mut raw).await;
    assert_eq!(raw.command(&["FLUSHALL"]).await, ok());
    assert_eq!(raw.command(&["DBSIZE"]).await, Value::Int(0));
    assert_eq!(raw.command(&["SELECT", "1"]).await, ok());
    assert_eq!(
        raw.command(&["DBSIZE"]).await,
        Value::Int(0),
        "FLUSHALL flushed database 1 too"
    );
}
