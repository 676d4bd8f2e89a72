//! The real `redis-cli` (Debian's redis-tools) against the gateway: one-shot commands,
//! commands read from stdin, RESP3, `--scan`, and `--pipe` mass insert.

use pgvs3_testkit as common;

use std::process::Stdio;

use common::TestGateway;
use common::resp::encode;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// Runs redis-cli against the gateway with `args`, feeding `stdin`; returns stdout.
async fn redis_cli(gateway: &TestGateway, args: &[&str], stdin: &[u8]) -> String {
    let addr = gateway.resp_addr();
    let mut child = Command::new("redis-cli")
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("redis-cli is installed (scripts/test installs it; or apt-get install redis-tools)");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).await.unwrap();
    drop(input);
    let output = child.wait_with_output().await.unwrap();
    assert!(
        output.status.success(),
        "redis-cli {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test]
async fn one_shot_commands_and_errors() {
    let gateway = TestGateway::with_resp(&[]).await;
    assert_eq!(redis_cli(&gateway, &["SET", "k", "v"], b"").await, "OK\n");
    assert_eq!(redis_cli(&gateway, &["GET", "k"], b"").await, "v\n");
    assert_eq!(redis_cli(&gateway, &["INCR", "n"], b"").await, "1\n");
    assert_eq!(redis_cli(&gateway, &["MGET", "k", "nope", "n"], b"").await, "v\n\n1\n");
    // redis-cli prints an error reply followed by an empty line when not on a terminal.
    assert_eq!(
        redis_cli(&gateway, &["INCR", "k"], b"").await,
        "ERR value is not an integer or out of range\n\n"
    );
    assert_eq!(redis_cli(&gateway, &["PING"], b"").await, "PONG\n");
    assert_eq!(redis_cli(&gateway, &["DBSIZE"], b"").await, "2\n");
    assert_eq!(
        redis_cli(&gateway, &["-3", "HELLO", "3"], b"").await.lines().next(),
        Some("server redis")
    );
    assert_eq!(redis_cli(&gateway, &["-3", "GET", "nope"], b"").await, "\n");
}

#[tokio::test]
async fn commands_from_stdin_and_scan() {
    let gateway = TestGateway::with_resp(&[]).await;
    let script =
        b"SET user:1 alice\nSET user:2 bob\nSET other x\nAPPEND user:1 !\nGET user:1\nEXPIRE other 100\nTTL other\n";
    assert_eq!(
        redis_cli(&gateway, &[], script).await,
        "OK\nOK\nOK\n6\nalice!\n1\n100\n"
    );
    let scanned = redis_cli(&gateway, &["--scan", "--pattern", "user:*"], b"").await;
    let mut keys: Vec<&str> = scanned.lines().collect();
    keys.sort();
    assert_eq!(keys, vec!["user:1", "user:2"]);
}

#[tokio::test]
async fn pipe_mode_mass_insert() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut input = Vec::new();
    for i in 0..10_000 {
        let key = format!("mass:{i}");
        let value = format!("value-{i}");
        input.extend(encode(&[b"SET", key.as_bytes(), value.as_bytes()]));
    }
    let report = redis_cli(&gateway, &["--pipe"], &input).await;
    assert!(report.contains("errors: 0, replies: 10000"), "{report}");
    assert_eq!(redis_cli(&gateway, &["DBSIZE"], b"").await, "10000\n");
    assert_eq!(redis_cli(&gateway, &["GET", "mass:9999"], b"").await, "value-9999\n");
}
