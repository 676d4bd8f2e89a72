//! A small RESP2 client for the keyspace pages: a session's one connection to the gateway's own
//! RESP listener, authenticated with the session's access key and secret (`AUTH <key> <secret>`),
//! so the gateway's RESP authorization decides as it does for any client. The connection is
//! kept with the session because pgvs3's SCAN cursors belong to the connection that issued them. Every reply is read within a byte budget, an element count and a nesting depth, and
//! every exchange within a deadline: a hostile or merely huge value cannot make the console
//! hold more than [`MAX_REPLY_BYTES`].

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The most one reply may hold; a page asking for more is refused with a message.
pub const MAX_REPLY_BYTES: usize = 4 << 20;
/// Elements of one reply (arrays nested included).
const MAX_ELEMENTS: usize = 100_000;
const MAX_DEPTH: usize = 8;
/// A connection, its AUTH and one exchange each must finish within this.
const DEADLINE: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Status(String),
    /// The server's error text, as Redis writes it (`NOPERM ...`, `WRONGTYPE ...`).
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    pub fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// A bulk or status as text (lossy: values may be binary).
    pub fn text(&self) -> Option<String> {
        match self {
            Reply::Bulk(Some(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
            Reply::Status(text) => Some(text.clone()),
            Reply::Int(n) => Some(n.to_string()),
            _ => None,
        }
    }

    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(items)) => items,
            _ => &[],
        }
    }

    /// The server's refusal, if this reply is one.
    pub fn error(&self) -> Option<&str> {
        match self {
            Reply::Error(text) => Some(text),
            _ => None,
        }
    }
}

pub struct Resp {
    stream: BufReader<TcpStream>,
    /// An exchange failed part way: what the stream holds next is unknown, so it is not reused.
    broken: bool,
}

/// A session's RESP connection: opened on first use, on the database last selected, replaced
/// when an exchange broke it; it closes when the session ends.
#[derive(Default)]
pub struct Held(tokio::sync::Mutex<Option<(String, Resp)>>);

impl Held {
    /// The connection, on database `db` (a number), authenticated as the key.
    pub async fn get(
        &self,
        addr: SocketAddr,
        access_key: &str,
        secret: &str,
        db: &str,
    ) -> Result<tokio::sync::MappedMutexGuard<'_, Resp>, String> {
        let mut slot = self.0.lock().await;
        if slot.as_ref().is_some_and(|(_, resp)| resp.broken) {
            *slot = None;
        }
        let (selected, resp) = match &mut *slot {
            Some(open) => open,
            empty => empty.insert(("0".to_owned(), Resp::connect(addr, access_key, secret).await?)),
        };
        if selected != db {
            if let Some(err) = resp.call(&[b"SELECT", db.as_bytes()]).await?.error() {
                return Err(err.to_owned());
            }
            *selected = db.to_owned();
        }
        Ok(tokio::sync::MutexGuard::map(slot, |slot| {
            &mut slot.as_mut().expect("opened above").1
        }))
    }
}

impl Resp {
    /// Connects and authenticates; a refused AUTH is the gateway's error text.
    pub async fn connect(addr: SocketAddr, access_key: &str, secret: &str) -> Result<Resp, String> {
        let stream = tokio::time::timeout(DEADLINE, TcpStream::connect(addr))
            .await
            .map_err(|_| "the RESP listener did not answer in time".to_owned())?
            .map_err(|err| format!("the RESP listener could not be reached: {err}"))?;
        let mut resp = Resp {
            stream: BufReader::new(stream),
            broken: false,
        };
        let auth = resp.call(&[b"AUTH", access_key.as_bytes(), secret.as_bytes()]).await?;
        match auth.error() {
            Some(err) => Err(err.to_owned()),
            None => Ok(resp),
        }
    }

    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut replies = self.pipeline(&[args.iter().map(|arg| arg.to_vec()).collect()]).await?;
        Ok(replies.pop().unwrap_or(Reply::Bulk(None)))
    }

    /// Sends the commands at once and reads their replies, in order.
    pub async fn pipeline(&mut self, commands: &[Vec<Vec<u8>>]) -> Result<Vec<Reply>, String> {
        let mut out = Vec::new();
        for args in commands {
            out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
            for arg in args {
                out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
                out.extend_from_slice(arg);
                out.extend_from_slice(b"\r\n");
            }
        }
        let exchange = async {
            self.stream
                .get_mut()
                .write_all(&out)
                .await
                .map_err(|err| format!("the RESP connection failed: {err}"))?;
            let mut replies = Vec::with_capacity(commands.len());
            for _ in commands {
                let mut budget = Budget {
                    bytes: MAX_REPLY_BYTES,
                    elements: MAX_ELEMENTS,
                };
                replies.push(self.read(&mut budget, 0).await?);
            }
            Ok(replies)
        };
        let result = tokio::time::timeout(DEADLINE, exchange)
            .await
            .map_err(|_| "the RESP listener did not answer in time".to_owned())
            .flatten();
        self.broken |= result.is_err();
        result
    }

    /// One header line, within the budget.
    async fn line(&mut self, budget: &mut Budget) -> Result<String, String> {
        let mut line = Vec::new();
        let limit = budget.bytes.min(64 * 1024) as u64;
        (&mut self.stream)
            .take(limit + 2)
            .read_until(b'\n', &mut line)
            .await
            .map_err(|err| format!("the RESP connection failed: {err}"))?;
        if !line.ends_with(b"\r\n") {
            return Err(too_large());
        }
        budget.spend(line.len())?;
        line.truncate(line.len() - 2);
        String::from_utf8(line).map_err(|_| "the RESP listener sent a malformed reply".to_owned())
    }

    fn read<'a>(
        &'a mut self,
        budget: &'a mut Budget,
        depth: usize,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Reply, String>> + Send + 'a>> {
        Box::pin(async move {
            let line = self.line(budget).await?;
            let malformed = || "the RESP listener sent a malformed reply".to_owned();
            let (kind, rest) = line.split_at_checked(1).ok_or_else(malformed)?;
            let number = || rest.parse::<i64>().map_err(|_| malformed());
            match kind {
                "+" => Ok(Reply::Status(rest.to_owned())),
                "-" => Ok(Reply::Error(rest.to_owned())),
                ":" => Ok(Reply::Int(number()?)),
                "$" => {
                    let Ok(length) = usize::try_from(number()?) else {
                        return Ok(Reply::Bulk(None));
                    };
                    budget.spend(length + 2)?;
                    let mut bytes = vec![0; length + 2];
                    self.stream
                        .read_exact(&mut bytes)
                        .await
                        .map_err(|err| format!("the RESP connection failed: {err}"))?;
                    bytes.truncate(length);
                    Ok(Reply::Bulk(Some(bytes)))
                }
                "*" => {
                    let Ok(count) = usize::try_from(number()?) else {
                        return Ok(Reply::Array(None));
                    };
                    if depth >= MAX_DEPTH || count > budget.elements {
                        return Err(too_large());
                    }
                    budget.elements -= count;
                    let mut items = Vec::with_capacity(count.min(1024));
                    for _ in 0..count {
                        items.push(self.read(budget, depth + 1).await?);
                    }
                    Ok(Reply::Array(Some(items)))
                }
                _ => Err(malformed()),
            }
        })
    }
}

struct Budget {
    bytes: usize,
    elements: usize,
}

impl Budget {
    fn spend(&mut self, bytes: usize) -> Result<(), String> {
        self.bytes = self.bytes.checked_sub(bytes).ok_or_else(too_large)?;
        Ok(())
    }
}

fn too_large() -> String {
    format!(
        "the answer is larger than the console shows at once ({} MiB); use a RESP client for it",
        MAX_REPLY_BYTES >> 20
    )
}
