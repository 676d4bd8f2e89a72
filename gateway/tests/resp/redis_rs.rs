//! redis-rs calls the RESP test modules share: a connection to a gateway's RESP endpoint, a
//! command from its words, its reply, and its error as Redis writes it. (Kept out of
//! pgvs3-testkit, which would otherwise depend on redis-rs.)

use std::time::Duration;

use redis::aio::MultiplexedConnection;

use pgvs3_testkit::TestGateway;
use pgvs3_testkit::resp::{RawResp, Value};

/// A redis-rs client for the gateway's RESP endpoint; `query` like `?protocol=resp3`, or empty.
pub fn client(gateway: &TestGateway, query: &str) -> redis::Client {
    redis::Client::open(format!("redis://{}/{query}", gateway.resp_addr())).unwrap()
}

pub async fn connect(gateway: &TestGateway) -> MultiplexedConnection {
    open(&client(gateway, "")).await
}

/// A connection of `client` that waits for its replies as long as a test may take: redis-rs
/// gives up on a reply after 500 ms (and on connecting after 1 s) by default, which a loaded
/// machine exceeds (a long script, bulk loads, CI's test binaries side by side). The tests
/// check answers, not latency.
pub async fn open(client: &redis::Client) -> MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_secs(60)))
        .set_connection_timeout(Some(Duration::from_secs(20)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// [`open`], with the connection's pushes (RESP3: pub/sub messages, invalidations) sent to
/// `pushes`.
pub async fn open_with_pushes(
    client: &redis::Client,
    pushes: tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
) -> MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_secs(60)))
        .set_connection_timeout(Some(Duration::from_secs(20)))
        .set_push_sender(pushes);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

pub fn command(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd
}

/// The command's reply; a panic naming the command when it fails.
pub async fn query<T: redis::FromRedisValue>(con: &mut MultiplexedConnection, args: &[&str]) -> T {
    command(args)
        .query_async(con)
        .await
        .unwrap_or_else(|err| panic!("{args:?}: {err}"))
}

/// The error a command answers, as Redis writes it: code, then detail.
pub async fn error(con: &mut MultiplexedConnection, args: &[&str]) -> String {
    match command(args).query_async::<redis::Value>(con).await {
        Err(err) => format!("{} {}", err.code().unwrap_or("?"), err.detail().unwrap_or("")),
        Ok(value) => panic!("{args:?}: expected an error, got {value:?}"),
    }
}

/// Sends `request`, a blocking XREAD or XREADGROUP of `stream`, on `blocked`, then adds entries
/// to `stream` from `adder` until it answers: with the gateways' `--resp-block-poll` at 60 s,
/// an answer within the deadline is a wakeup. Returns the IDs added and the first entry ID of
/// the answer, whose one stream must be `stream`.
pub async fn woken_by_xadd(
    blocked: &mut RawResp,
    adder: &mut MultiplexedConnection,
    request: &[&str],
    stream: &str,
) -> (Vec<String>, String) {
    let request: Vec<&[u8]> = request.iter().map(|arg| arg.as_bytes()).collect();
    blocked.send(&pgvs3_testkit::resp::encode(&request)).await;
    let mut added = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let woken = loop {
        assert!(std::time::Instant::now() < deadline, "{request:?} was never woken");
        let id: String = query(adder, &["XADD", stream, "*", "n", &added.len().to_string()]).await;
        added.push(id);
        if let Ok(reply) = tokio::time::timeout(Duration::from_millis(200), blocked.reply()).await {
            break reply.expect("a reply");
        }
    };
    let Value::Array(streams) = woken else {
        panic!("{woken:?}")
    };
    let Value::Array(stream_and_entries) = &streams[0] else {
        panic!("{streams:?}")
    };
    assert_eq!(stream_and_entries[0], Value::bulk(stream));
    let Value::Array(entries) = &stream_and_entries[1] else {
        panic!("{stream_and_entries:?}")
    };
    let Value::Array(entry) = &entries[0] else {
        panic!("{entries:?}")
    };
    let Value::Bulk(id) = &entry[0] else {
        panic!("{entry:?}")
    };
    (added, String::from_utf8(id.clone()).unwrap())
}

/// Two gateways on one fresh database whose blocked clients are woken only by NOTIFY
/// (`--resp-block-poll` at 60 s), for [`woken_by_xadd`].
pub async fn gateways_woken_by_notify() -> (TestGateway, TestGateway) {
    let url = pgvs3_testkit::fresh_database().await;
    let args = ["--resp-addr", "127.0.0.1:0", "--resp-block-poll", "60s"];
    let first = TestGateway::with_args(url.clone(), &args).await;
    (first, TestGateway::with_args(url, &args).await)
}
