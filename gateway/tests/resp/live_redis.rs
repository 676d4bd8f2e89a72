//! A redis-server 7.0.15 started for a test, on 127.0.0.1 and a free port, without persistence:
//! the families compare their replies with its replies to the same commands, computed live.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pgvs3_testkit as common;

use common::resp::RawResp;

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
        common::eventually(Duration::from_secs(10), "redis-server accepting", || async move {
            tokio::net::TcpStream::connect(addr).await.ok().map(drop)
        })
        .await;
        LiveRedis { child, addr }
    }

    pub async fn connect(&self) -> RawResp {
        RawResp::connect(self.addr).await
    }
}

impl Drop for LiveRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends each command to both servers and asserts the replies are the same.
pub async fn same_replies(ours: &mut RawResp, redis: &mut RawResp, commands: &[&[&str]]) {
    for command in commands {
        let theirs = redis.command(command).await;
        assert_eq!(ours.command(command).await, theirs, "{command:?}");
    }
}

/// [`same_replies`] for commands written as lines of words (no word with a space in it).
pub async fn same_lines(ours: &mut RawResp, redis: &mut RawResp, lines: &[&str]) {
    for line in lines {
        let words: Vec<&str> = line.split_ascii_whitespace().collect();
        same_replies(ours, redis, &[&words]).await;
    }
}
