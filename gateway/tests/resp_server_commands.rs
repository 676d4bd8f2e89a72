//! The server commands the Redis test suite and client libraries use around the data:
//! FLUSHALL, FUNCTION FLUSH, CONFIG SET of encoding parameters, INFO's memory, stats and CPU
//! sections, CLIENT LIST's fields, CLIENT KILL and CLIENT REPLY, and EXPIRE's combined options,
//! each answered as Redis 7 answers it.

mod common;

use common::TestGateway;
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
    assert!(
        raw.command(&["FUNCTION", "LOAD", "#!lua name=x\n"])
            .await
            .error()
            .starts_with("ERR FUNCTION LOAD is not supported")
    );

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
    assert_eq!(
        raw.command(&["CONFIG", "SET", "maxmemory", "1"]).await.error(),
        "ERR Unknown option or number of arguments for CONFIG SET - 'maxmemory'"
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
