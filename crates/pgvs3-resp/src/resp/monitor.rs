//! MONITOR: every command this gateway runs, as Redis prints it to its monitors
//! (`+1339518083.107412 [0 127.0.0.1:60866] "keys" "*"`), to each client that asked. A
//! monitor's lines wait in a bounded feed (`--resp-pubsub-output-limit`, as a subscriber's
//! messages): one that falls behind past it is disconnected, as Redis disconnects a client past
//! its output buffer limit, so a slow monitor never grows the gateway's memory.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};

use super::codec::Reply;
use super::command::Spec;
use super::connection::Connection;

impl Connection {
    /// MONITOR: from now on this client gets this gateway's commands. The root key only (and
    /// a user ACL rules allow `monitor`, checked before): the lines show every key's commands
    /// and data.
    pub(crate) fn start_monitor(&mut self) -> Reply {
        if let Err(reply) = self.root_only("monitor") {
            return reply;
        }
        if self.monitor.is_none() {
            self.monitor = Some(self.server.monitors.add(self.server.settings.pubsub.output_limit));
        }
        Reply::OK
    }
}

/// The monitors of this gateway.
#[derive(Default)]
pub(crate) struct Monitors {
    feeds: Mutex<Vec<Weak<Feed>>>,
    /// How many feeds the list holds (some perhaps of gone clients): none, nothing to format.
    count: AtomicUsize,
}

/// One monitor's lines not yet written.
pub(crate) struct Feed {
    state: Mutex<State>,
    arrived: tokio::sync::Notify,
    limit: usize,
}

#[derive(Default)]
struct State {
    lines: Vec<Bytes>,
    bytes: usize,
    overflowed: bool,
}

impl Monitors {
    /// A new monitor, its lines bounded to `limit` bytes.
    pub(crate) fn add(&self, limit: usize) -> Arc<Feed> {
        let feed = Arc::new(Feed {
            state: Mutex::default(),
            arrived: tokio::sync::Notify::new(),
            limit,
        });
        let mut feeds = self.feeds.lock().expect("monitors lock");
        feeds.push(Arc::downgrade(&feed));
        self.count.store(feeds.len(), Ordering::Relaxed);
        feed
    }

    /// Hands a command to every monitor: `args` as the client sent them, run in database `db`
    /// by the client at `addr`. Admin commands (CONFIG, ACL, MONITOR) are not shown, nor
    /// AUTH's and HELLO's credentials, as in Redis.
    pub(crate) fn feed(&self, spec: &Spec, db: u32, addr: impl FnOnce() -> String, args: &[Bytes]) {
        if !self.watched() || spec.flags.contains(&"admin") {
            return;
        }
        self.feed_lines(&[line(spec, db, &addr(), args)]);
    }

    /// Whether any client monitors (perhaps one gone since): else there is nothing to format.
    pub(crate) fn watched(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Hands lines made by [`script_line`] (or `feed`) to every monitor, in order.
    pub(crate) fn feed_lines(&self, lines: &[Bytes]) {
        if lines.is_empty() {
            return;
        }
        let mut feeds = self.feeds.lock().expect("monitors lock");
        feeds.retain(|feed| match feed.upgrade() {
            Some(feed) => {
                for line in lines {
                    feed.push(line);
                }
                true
            }
            None => false,
        });
        self.count.store(feeds.len(), Ordering::Relaxed);
    }
}

impl Feed {
    fn push(&self, line: &Bytes) {
        {
            let mut state = self.state.lock().expect("monitor feed lock");
            if state.overflowed {
                return;
            }
            if state.bytes + line.len() > self.limit {
                state.overflowed = true;
                state.lines = Vec::new();
                state.bytes = 0;
            } else {
                state.bytes += line.len();
                state.lines.push(line.clone());
            }
        }
        self.arrived.notify_one();
    }

    /// Resolves once lines arrived (at once if some came since the last take).
    pub(crate) async fn arrived(&self) {
        self.arrived.notified().await;
    }

    pub(crate) fn overflowed(&self) -> bool {
        self.state.lock().expect("monitor feed lock").overflowed
    }

    /// The lines waiting, appended to `out`; false when the monitor fell behind past its limit.
    pub(crate) fn take(&self, out: &mut BytesMut) -> bool {
        let mut state = self.state.lock().expect("monitor feed lock");
        if state.overflowed {
            return false;
        }
        for line in std::mem::take(&mut state.lines) {
            out.put_slice(&line);
        }
        state.bytes = 0;
        true
    }
}

/// The line of a script's `redis.call`, which Redis shows as the Lua client's
/// (`+1339518083.107412 [0 lua] "set" "foo" "bar"`); none for an admin command, as `feed`.
pub(crate) fn script_line(spec: &Spec, db: u32, args: &[Bytes]) -> Option<Bytes> {
    (!spec.flags.contains(&"admin")).then(|| line(spec, db, "lua", args))
}

/// Redis's monitor line: time, database, client, then each argument quoted as `sdscatrepr`
/// quotes it; AUTH's arguments and HELLO's after AUTH are `(redacted)`.
fn line(spec: &Spec, db: u32, addr: &str, args: &[Bytes]) -> Bytes {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let mut out = BytesMut::with_capacity(64 + args.iter().map(Bytes::len).sum::<usize>());
    out.put_slice(format!("+{}.{:06} [{db} {addr}]", now.as_secs(), now.subsec_micros()).as_bytes());
    let redacted_from = match spec.name {
        "auth" => 1,
        "hello" => args
            .iter()
            .position(|arg| arg.eq_ignore_ascii_case(b"auth"))
            .map_or(args.len(), |at| at + 1),
        _ => args.len(),
    };
    let redacted_to = match spec.name {
        "hello" => (redacted_from + 2).min(args.len()),
        _ => args.len(),
    };
    for (at, arg) in args.iter().enumerate() {
        out.put_u8(b' ');
        match (redacted_from..redacted_to).contains(&at) {
            true => out.put_slice(b"\"(redacted)\""),
            false => quote(arg, &mut out),
        }
    }
    out.put_slice(b"\r\n");
    out.freeze()
}

/// `sdscatrepr`: in double quotes, `\` `"` and control characters escaped, other bytes outside
/// printable ASCII as `\xHH`.
fn quote(arg: &[u8], out: &mut BytesMut) {
    out.put_u8(b'"');
    for &byte in arg {
        match byte {
            b'\\' | b'"' => {
                out.put_u8(b'\\');
                out.put_u8(byte);
            }
            b'\n' => out.put_slice(b"\\n"),
            b'\r' => out.put_slice(b"\\r"),
            b'\t' => out.put_slice(b"\\t"),
            0x07 => out.put_slice(b"\\a"),
            0x08 => out.put_slice(b"\\b"),
            b' '..=b'~' => out.put_u8(byte),
            _ => out.put_slice(format!("\\x{byte:02x}").as_bytes()),
        }
    }
    out.put_u8(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_quoted_and_redacted_as_redis_prints_them() {
        let spec = crate::resp::command::lookup("set").unwrap();
        let args = [
            Bytes::from("set"),
            Bytes::from("a b"),
            Bytes::from_static(b"x\"y\nz\x01\xff"),
        ];
        let text = String::from_utf8_lossy(&line(spec, 0, "127.0.0.1:1", &args)).into_owned();
        assert!(
            text.ends_with(" [0 127.0.0.1:1] \"set\" \"a b\" \"x\\\"y\\nz\\x01\\xff\"\r\n"),
            "{text}"
        );
        let hello = crate::resp::command::lookup("hello").unwrap();
        let args = ["hello", "3", "auth", "u", "p", "setname", "n"].map(Bytes::from);
        let text = String::from_utf8_lossy(&line(hello, 0, "a", &args)).into_owned();
        assert!(
            text.ends_with("\"hello\" \"3\" \"auth\" \"(redacted)\" \"(redacted)\" \"setname\" \"n\"\r\n"),
            "{text}"
        );
    }

    #[test]
    fn a_feed_past_its_limit_overflows_and_holds_nothing() {
        let monitors = Monitors::default();
        let feed = monitors.add(100);
        let spec = crate::resp::command::lookup("get").unwrap();
        for _ in 0..10 {
            monitors.feed(spec, 0, || "a".into(), &[Bytes::from("get"), Bytes::from("k")]);
        }
        let mut out = BytesMut::new();
        assert!(!feed.take(&mut out));
        assert!(out.is_empty());
        assert_eq!(feed.state.lock().unwrap().lines.len(), 0);
    }
}
