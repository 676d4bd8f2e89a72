//! A raw RESP client, for what redis-rs will not send or hides: malformed frames, exact error
//! texts, RESP3 frame types, and whether the server closed the connection.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub mod live;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// `$-1`, `*-1` or RESP3's `_`.
    Nil,
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Double(String),
    /// RESP3's out-of-band `>` frame (pub/sub messages).
    Push(Vec<Value>),
    /// RESP3's `#t` / `#f`.
    Bool(bool),
    /// RESP3's `(` big number.
    BigNumber(String),
    /// RESP3's `=` verbatim string: its format, a colon and its text.
    Verbatim(Vec<u8>),
    /// RESP3's `~` set.
    Set(Vec<Value>),
}

impl Value {
    pub fn bulk(text: &str) -> Value {
        Value::Bulk(text.as_bytes().to_vec())
    }

    pub fn error(&self) -> &str {
        match self {
            Value::Error(text) => text,
            other => panic!("expected an error, got {other:?}"),
        }
    }
}

pub struct RawResp {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// Encodes a command as clients do: an array of bulk strings.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

impl RawResp {
    pub async fn connect(addr: SocketAddr) -> RawResp {
        RawResp {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Sends one command and returns its reply.
    pub async fn command(&mut self, args: &[&str]) -> Value {
        let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
        self.send(&encode(&args)).await;
        self.reply().await.expect("a reply before the connection closed")
    }

    /// The next reply; `None` when the server closed the connection first.
    pub async fn reply(&mut self) -> Option<Value> {
        loop {
            if let Some((value, used)) = parse(&self.buf) {
                self.buf.drain(..used);
                return Some(value);
            }
            // Read into the heap buffer: a stack array here would sit in every caller's future.
            self.buf.reserve(64 * 1024);
            let read = tokio::time::timeout(Duration::from_secs(30), self.stream.read_buf(&mut self.buf))
                .await
                .expect("a reply within 30 s");
            if matches!(read, Ok(0) | Err(_)) {
                return None;
            }
        }
    }

    /// Whether the server closes the connection (after any replies still to come).
    pub async fn closed(&mut self) -> bool {
        loop {
            match tokio::time::timeout(Duration::from_secs(10), self.stream.read_buf(&mut self.buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }
}

fn line(buf: &[u8]) -> Option<(&str, usize)> {
    let end = buf.windows(2).position(|pair| pair == b"\r\n")?;
    Some((std::str::from_utf8(&buf[1..end]).unwrap(), end + 2))
}

fn parse(buf: &[u8]) -> Option<(Value, usize)> {
    let (text, used) = line(buf)?;
    let value = match buf[0] {
        b'+' => Value::Simple(text.to_owned()),
        b'-' => Value::Error(text.to_owned()),
        b':' => Value::Int(text.parse().unwrap()),
        b',' => Value::Double(text.to_owned()),
        b'_' => Value::Nil,
        b'#' => Value::Bool(text == "t"),
        b'(' => Value::BigNumber(text.to_owned()),
        b'$' | b'=' => {
            let len: i64 = text.parse().unwrap();
            if len < 0 {
                return Some((Value::Nil, used));
            }
            let end = used + len as usize;
            if buf.len() < end + 2 {
                return None;
            }
            let data = buf[used..end].to_vec();
            let value = if buf[0] == b'=' {
                Value::Verbatim(data)
            } else {
                Value::Bulk(data)
            };
            return Some((value, end + 2));
        }
        b'*' | b'%' | b'>' | b'~' => {
            let count: i64 = text.parse().unwrap();
            if count < 0 {
                return Some((Value::Nil, used));
            }
            let items = if buf[0] == b'%' { count * 2 } else { count };
            let mut at = used;
            let mut values = Vec::new();
            for _ in 0..items {
                let (value, len) = parse(&buf[at..])?;
                values.push(value);
                at += len;
            }
            let value = if buf[0] == b'%' {
                let mut pairs = Vec::new();
                let mut values = values.into_iter();
                while let (Some(key), Some(value)) = (values.next(), values.next()) {
                    pairs.push((key, value));
                }
                Value::Map(pairs)
            } else if buf[0] == b'>' {
                Value::Push(values)
            } else if buf[0] == b'~' {
                Value::Set(values)
            } else {
                Value::Array(values)
            };
            return Some((value, at));
        }
        other => panic!("unexpected reply type {:?}", other as char),
    };
    Some((value, used))
}
