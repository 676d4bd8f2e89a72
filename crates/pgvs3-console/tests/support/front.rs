//! A TCP front for the gateway's S3 listener, named in the presigned URLs the console hands the
//! browser (`--console-s3-url`), so a test can make one part upload fail as a network does: the
//! connection dropped after the request head, or the request held unanswered. Each request gets a
//! gateway connection of its own (`Connection: close`), so each is seen here.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// Close the browser's connection once its request head is in: a network error.
    Drop,
    /// Never forward nor answer the request (the browser's connection stays open).
    Hold,
}

#[derive(Default)]
struct State {
    /// Part number → the fault its next part PUT meets.
    faults: Vec<(u32, Fault)>,
    /// The part numbers of the part PUTs that arrived, in order.
    parts: Vec<u32>,
}

pub struct Front {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl Front {
    pub async fn start(upstream: SocketAddr) -> Front {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream, shared.clone()));
            }
        });
        Front { addr, state }
    }

    /// The next PUT of part `part` meets `fault` (once).
    pub fn fail(&self, part: u32, fault: Fault) {
        self.state.lock().unwrap().faults.push((part, fault));
    }

    /// The part numbers of the part PUTs seen since the last call.
    pub fn take_parts(&self) -> Vec<u32> {
        std::mem::take(&mut self.state.lock().unwrap().parts)
    }

    pub fn parts(&self) -> Vec<u32> {
        self.state.lock().unwrap().parts.clone()
    }
}

/// `PUT /bucket/key?…partNumber=N…` → N.
fn part_number(request_line: &str) -> Option<u32> {
    let target = request_line.strip_prefix("PUT ")?;
    let query = target.split_once('?')?.1.split(' ').next()?;
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("partNumber="))
        .and_then(|n| n.parse().ok())
}

async fn relay(mut client: TcpStream, upstream: SocketAddr, state: Arc<Mutex<State>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let end = loop {
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if head.len() > 64 * 1024 {
            return;
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    let fault = part_number(text.lines().next().unwrap_or("")).and_then(|part| {
        let mut state = state.lock().unwrap();
        state.parts.push(part);
        let at = state.faults.iter().position(|(p, _)| *p == part)?;
        Some(state.faults.remove(at).1)
    });
    match fault {
        Some(Fault::Drop) => return,
        Some(Fault::Hold) => {
            // The connection open and nothing of the body read, until the test's runtime ends.
            let _open = client;
            std::future::pending::<()>().await;
            return;
        }
        None => {}
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let mut rewritten: String = text
        .trim_end_matches("\r\n")
        .split("\r\n")
        .filter(|line| !line.to_ascii_lowercase().starts_with("connection:"))
        .map(|line| format!("{line}\r\n"))
        .collect();
    rewritten.push_str("Connection: close\r\n\r\n");
    if server.write_all(rewritten.as_bytes()).await.is_err() || server.write_all(&head[end..]).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}
