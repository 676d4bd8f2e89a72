//! A redis-server 7.0.15 started for a test, on 127.0.0.1 and a free port, without persistence,
//! and the comparison of its replies with pgvs3's to the same commands, computed live: the one
//! way every RESP test that answers "as Redis does" checks it.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{RawResp, encode};

pub struct LiveRedis {
    child: Child,
    addr: SocketAddr,
}

impl LiveRedis {
    pub async fn start() -> LiveRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
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
        crate::eventually(Duration::from_secs(10), "redis-server accepting", || async move {
            tokio::net::TcpStream::connect(addr).await.ok().map(drop)
        })
        .await;
        LiveRedis { child, addr }
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
