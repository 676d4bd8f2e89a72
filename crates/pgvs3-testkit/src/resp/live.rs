//! A redis-server 7.0.15 started for a test, on 127.0.0.1 and a free port, without persistence,
//! and the comparison of its replies with pgvs3's to the same commands, computed live: the one
//! way every RESP test that answers "as Redis does" checks it.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{RawResp, Value, encode};

pub struct LiveRedis {
    child: Child,
    addr: SocketAddr,
}

impl LiveRedis {
    /// A server of this test's own. The port is free when chosen, not when redis-server binds
    /// it: another test's server (or gateway) may take it in between, and then this child exits
    /// while the server answering on the port is the other test's, whose commands (a FLUSHALL,
    /// a DEL) reach this test's keys (a CI failure: a key gone in the middle of a
    /// transaction). So the server must answer with this child's pid, or another port is tried.
    pub async fn start() -> LiveRedis {
        for _ in 0..10 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            if let Some(live) = LiveRedis::start_on(port).await {
                return live;
            }
        }
        panic!("redis-server did not start on any of 10 free ports");
    }

    /// A server on `port` once it answers there with its own pid; `None` when it exited (the
    /// port was taken) or another server answers there.
    pub async fn start_on(port: u16) -> Option<LiveRedis> {
        let mut child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (7.0.15) on the PATH");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if child.try_wait().expect("redis-server's status").is_some() {
                return None;
            }
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                let info = RawResp::connect(addr).await.command(&["INFO", "server"]).await;
                let pid = match &info {
                    Value::Bulk(text) => String::from_utf8_lossy(text)
                        .lines()
                        .find_map(|line| line.strip_prefix("process_id:")?.trim().parse::<u32>().ok()),
                    _ => None,
                };
                if pid == Some(child.id()) {
                    return Some(LiveRedis { child, addr });
                }
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "redis-server accepting within 10s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn connect(&self) -> RawResp {
        RawResp::connect(self.addr).await
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for LiveRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `args` (any bytes) to both servers and asserts the replies are the same. `expected`
/// is the reference: redis-server, or another gateway.
pub async fn same_bytes(ours: &mut RawResp, expected: &mut RawResp, args: &[&[u8]]) {
    let command = encode(args);
    for server in [&mut *ours, &mut *expected] {
        server.send(&command).await;
    }
    let theirs = expected.reply().await;
    assert_eq!(
        ours.reply().await,
        theirs,
        "{:?}",
        args.iter().map(|arg| String::from_utf8_lossy(arg)).collect::<Vec<_>>()
    );
}

/// [`same_bytes`] for each command, of words that are text.
pub async fn same_replies(ours: &mut RawResp, expected: &mut RawResp, commands: &[&[&str]]) {
    for command in commands {
        let args: Vec<&[u8]> = command.iter().map(|arg| arg.as_bytes()).collect();
        same_bytes(ours, expected, &args).await;
    }
}

/// [`same_replies`] for commands written as lines of words (no word with a space in it).
pub async fn same_lines(ours: &mut RawResp, expected: &mut RawResp, lines: &[&str]) {
    for line in lines {
        let words: Vec<&str> = line.split_ascii_whitespace().collect();
        same_replies(ours, expected, &[&words]).await;
    }
}
