//! redis-rs calls the RESP test binaries share: a connection to a gateway's RESP endpoint, a
//! command from its words, its reply, and its error as Redis writes it. (Kept out of `common`,
//! which other crates include without depending on redis-rs.)

#![allow(dead_code)] // each test binary uses a different part

use redis::aio::MultiplexedConnection;

use crate::common::TestGateway;

/// A redis-rs client for the gateway's RESP endpoint; `query` like `?protocol=resp3`, or empty.
pub fn client(gateway: &TestGateway, query: &str) -> redis::Client {
    redis::Client::open(format!("redis://{}/{query}", gateway.resp_addr())).unwrap()
}

pub async fn connect(gateway: &TestGateway) -> MultiplexedConnection {
    client(gateway, "").get_multiplexed_async_connection().await.unwrap()
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
