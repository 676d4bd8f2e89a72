//! One client connection: reads whatever requests have arrived, runs them in order — a run of
//! key reads as one statement, a run of key writes as one transaction — and writes all their
//! replies back in one go.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tracing::Instrument;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::blocking::Retry;
use super::clients::Registration;
use super::codec::{Reply, RequestParser};
use super::command::{self, KeyCommand, Spec, syntax_error, wrong_arity};
use super::pubsub::Mailbox;
use super::script::{self, Step};
use super::{RespServer, command_info, glob, keys};
use crate::bucket::Keyspace;
use crate::http_server::Shutdown;
use crate::store::{Access, KvEntry, Principal, StoreError, TypedRow};

/// Requests taken from the input buffer per batch: bounds the replies held in memory.
const MAX_BATCH: usize = 1024;
const SCAN_DEFAULT_COUNT: i64 = 10;
const KEYS_PAGE: i64 = 1000;
/// Open SCAN cursors kept per connection.
const MAX_CURSORS: usize = 256;
/// The input buffer's initial size, and the room it gets when full.
const READ_SIZE: usize = 16 * 1024;
/// Input a connection may buffer without drawing on the buffer budget: ordinary requests and
/// pipelines never reach it.
const UNBUDGETED_INPUT: usize = 1024 * 1024;
/// A read's reply the database may send without its memory reserved from the buffer budget
/// (about twice this as a datum: see `TypedCall::reply_limit`).
const UNBUDGETED_REPLY: i64 = 1024 * 1024;
/// What a read gets whose reply does not fit in the buffer budget now.
const REPLY_OVER_BUDGET: &str =
    "OOM command not allowed: the reply does not fit in the server's buffer budget now, retry later";
/// How long a batch runs on after its client's input ended (a half-closed client still reads
/// the answers) before it is dropped and its statement cancelled as a gone client's.
const EOF_GRACE: std::time::Duration = std::time::Duration::from_secs(2);
/// What a client whose request does not fit the buffer budget gets before the connection is
/// closed (as Redis closes a client beyond its query buffer limit).
const INPUT_OVER_BUDGET: &str =
    "OOM command not allowed: the request does not fit in the server's buffer budget now, retry later";

const READONLY: &str = "READONLY You can't write against a read only replica.";
const BUSY: &str = "BUSY the server is overloaded, try again later";
const NOAUTH: &str = "NOAUTH Authentication required.";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
/// AUTH with temporary (STS) credentials: refused, they are good only with their session token.
const STS_REFUSED: &str =
    "WRONGPASS temporary (STS) credentials need their session token, which AUTH cannot carry: use a static access key";

/// A WATCHed key as it was: its version (ETag, last modified) and expiry, or absent.
type Fingerprint = Option<(Option<(String, SystemTime)>, Option<SystemTime>)>;

fn fingerprint(entry: Option<&KvEntry>) -> Fingerprint {
    entry.map(|entry| (entry.version.clone(), entry.expires_at))
}

enum Queued {
    Key(KeyCommand, &'static Spec),
    Other(Vec<Bytes>, &'static Spec),
}

/// Commands one MULTI may queue, and their bytes (arguments, plus [`QUEUED_OVERHEAD`] each).
const MAX_QUEUED: usize = 100_000;
const MAX_QUEUED_BYTES: usize = 512 * 1024 * 1024;
/// What a queued command costs besides its arguments' bytes (its parsed form).
const QUEUED_OVERHEAD: usize = 256;

/// A MULTI's queued commands. A queue outlives the input it came in, so it is bounded in
/// count and bytes, and its bytes beyond [`UNBUDGETED_INPUT`] are held against the buffer
/// budget, as large input is.
struct MultiQueue {
    commands: Vec<Queued>,
    bytes: usize,
    budget: InputBudget,
}

impl MultiQueue {
    fn new(budget: crate::admission::BufferBudget) -> MultiQueue {
        MultiQueue {
            commands: Vec::new(),
            bytes: 0,
            budget: InputBudget::new(budget),
        }
    }

    /// Queues a command whose arguments take `size` bytes, or refuses it with the error it
    /// answers (which fails the transaction, as an error while queueing does in Redis).
    fn push(&mut self, queued: Queued, size: usize) -> Result<(), Reply> {
        let bytes = self.bytes + size + QUEUED_OVERHEAD;
        if self.commands.len() >= MAX_QUEUED || bytes > MAX_QUEUED_BYTES {
            return Err(Reply::error(format!(
                "ERR MULTI queue full: at most {MAX_QUEUED} commands and {MAX_QUEUED_BYTES} bytes per transaction"
            )));
        }
        if !self.budget.cover(bytes) {
            return Err(Reply::error(
                "OOM command not allowed: the MULTI queue does not fit in the server's buffer budget now, retry later",
            ));
        }
        self.bytes = bytes;
        self.commands.push(queued);
        Ok(())
    }
}

/// A run of consecutive key commands, executed together: as one statement when all of them
/// read, else as one transaction (reads then see the writes before them, as they would in
/// Redis, and the whole run costs one commit).
#[derive(Default)]
struct Run {
    write: bool,
    commands: Vec<(KeyCommand, &'static Spec)>,
}

pub struct Connection {
    server: Arc<RespServer>,
    /// This client's CLIENT LIST entry and --resp-max-clients slot, freed when the connection
    /// is dropped however its task ends.
    registration: Registration,
    accepted: Instant,
    /// Since when the client has been without AUTH (accept, or its last RESET).
    unauthenticated_since: Instant,
    principal: Option<Principal>,
    /// The admission slot of the batch running now; a blocked client gives it back while it
    /// waits.
    admitted: Option<crate::admission::Admitted>,
    db: u32,
    resp3: bool,
    multi: Option<MultiQueue>,
    multi_failed: bool,
    watched: Vec<(u32, String, Fingerprint)>,
    cursors: HashMap<u64, String>,
    next_cursor: u64,
    quit: bool,
    /// The batch's replies passed `--resp-output-limit`: the connection closes without them.
    over_limit: bool,
    /// The buffer budget the batch's large replies hold until they are written.
    reply_memory: Vec<crate::admission::Reservation>,
    /// CLIENT REPLY: whether replies are sent.
    reply_mode: ReplyMode,
    /// Pub/sub: where this connection's messages wait, once it has subscribed, and what it is
    /// subscribed to (all empty: not in subscribe mode).
    mailbox: Option<Arc<Mailbox>>,
    channels: HashSet<Bytes>,
    patterns: HashSet<Bytes>,
    shard_channels: HashSet<Bytes>,
}

/// What a RESP2 client in subscribe mode may still send, with Redis's refusal of the rest.
const SUBSCRIBE_MODE: &[&str] = &[
    "subscribe",
    "psubscribe",
    "ssubscribe",
    "unsubscribe",
    "punsubscribe",
    "sunsubscribe",
    "ping",
    "quit",
    "reset",
];
const STANDBY_PUBSUB: &str = "ERR pub/sub is not available on a standby gateway: NOTIFY does not reach a hot standby; use a gateway of the primary";

/// CLIENT REPLY's modes. SKIP drops its own reply and the next command's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplyMode {
    On,
    Off,
    SkipThisAndNext,
    SkipNext,
}

impl Connection {
    pub fn new(server: Arc<RespServer>, registration: Registration) -> Connection {
        let principal = (!server.settings.require_auth).then(|| server.root.clone());
        Connection {
            server,
            registration,
            accepted: Instant::now(),
            unauthenticated_since: Instant::now(),
            principal,
            admitted: None,
            db: 0,
            resp3: false,
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
            cursors: HashMap::new(),
            next_cursor: 1,
            quit: false,
            over_limit: false,
            reply_memory: Vec::new(),
            reply_mode: ReplyMode::On,
            mailbox: None,
            channels: HashSet::new(),
            patterns: HashSet::new(),
            shard_channels: HashSet::new(),
        }
    }

    fn subscribed(&self) -> bool {
        !(self.channels.is_empty() && self.patterns.is_empty() && self.shard_channels.is_empty())
    }

    /// Writes `output`; false when the client is gone, or (a subscriber) let its messages pile
    /// up past `--resp-pubsub-output-limit` while this write waited.
    async fn write_out<S: AsyncWrite + Unpin>(&self, stream: &mut S, output: &[u8]) -> bool {
        let Some(mailbox) = self.mailbox.as_ref().filter(|_| self.subscribed()) else {
            return stream.write_all(output).await.is_ok();
        };
        let write = stream.write_all(output);
        futures::pin_mut!(write);
        loop {
            tokio::select! {
                written = &mut write => return written.is_ok(),
                () = mailbox.arrived() => {
                    if mailbox.overflowed() {
                        return false;
                    }
                }
            }
        }
    }

    /// Encodes the messages waiting for this subscriber; false when it overflowed.
    fn take_mail(&self, out: &mut BytesMut) -> bool {
        let Some(mailbox) = &self.mailbox else {
            return true;
        };
        if mailbox.overflowed() {
            return false;
        }
        for delivery in mailbox.take() {
            delivery.reply().encode(self.resp3, out);
        }
        true
    }

    /// Serves the connection on `stream`: a socket, or a TLS session on one.
    pub async fn run<S: AsyncRead + AsyncWrite + Unpin>(mut self, mut stream: S, mut shutdown: Shutdown) {
        let mut input = BytesMut::with_capacity(READ_SIZE);
        let mut output = BytesMut::with_capacity(16 * 1024);
        let mut input_budget = InputBudget::new(self.server.buffers.clone());
        let mut parser = RequestParser::default();
        let mut received = false;
        loop {
            let mut requests = Vec::new();
            let mut broken = None;
            while requests.len() < MAX_BATCH {
                // Before AUTH, requests run one at a time, as in Redis: the one after AUTH is
                // parsed with the limits of an authenticated client.
                let unauthenticated = self.principal.is_none();
                match parser.parse(&mut input, unauthenticated) {
                    Ok(Some(request)) => requests.push(request),
                    Ok(None) => break,
                    Err(err) => {
                        broken = Some(err);
                        break;
                    }
                }
                if unauthenticated {
                    break;
                }
            }
            if requests.is_empty() && broken.is_none() {
                // The parser grows the buffer ahead of a large request's bytes; that memory must
                // be in the budget before the bytes are read.
                if input.len() == input.capacity() {
                    // Room for the read, so that reading never grows the buffer unaccounted.
                    input.reserve(READ_SIZE);
                }
                if !input_budget.cover(input.capacity() + parser.held_bytes()) {
                    Reply::error(INPUT_OVER_BUDGET).encode(self.resp3, &mut output);
                    if stream.write_all(&output).await.is_ok() {
                        close_after_error(&mut stream).await;
                    }
                    break;
                }
                let Some(deadline) = self.read_deadline(received) else {
                    // Out of time to send the first byte or to AUTH: closed without a word,
                    // as Redis closes a client past its `timeout`.
                    break;
                };
                let read = async {
                    match deadline {
                        Some(deadline) => tokio::time::timeout_at(deadline.into(), stream.read_buf(&mut input))
                            .await
                            .unwrap_or(Ok(0)),
                        None => stream.read_buf(&mut input).await,
                    }
                };
                let mailbox = self.mailbox.clone().filter(|_| self.subscribed());
                let mail = async {
                    match &mailbox {
                        Some(mailbox) => mailbox.arrived().await,
                        None => std::future::pending().await,
                    }
                };
                let read = tokio::select! {
                    read = read => read,
                    () = mail => {
                        if !self.take_mail(&mut output) || !self.write_out(&mut stream, &output).await {
                            break;
                        }
                        output.clear();
                        continue;
                    }
                    _ = shutdown.wait() => break,
                    _ = self.registration.killed() => break,
                };
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        received = true;
                        continue;
                    }
                }
            }
            if !requests.is_empty() {
                match self.server.admission.admit().await {
                    Ok(admitted) => {
                        self.admitted = Some(admitted);
                        let span = self.batch_span(&requests);
                        let blocks = requests.iter().any(|args| is_blocking(args));
                        // Meanwhile the client's further input is buffered, and its going
                        // away ends the batch: dropped, its statement is cancelled, so a
                        // disconnected client holds no backend. A reset ends it at once; an
                        // end of input (which may be a half-close: `nc -N`, socat) gives the
                        // batch `EOF_GRACE` first, as Redis runs the commands it read before
                        // the EOF and still answers them. A blocked client is freed at EOF
                        // (as in Redis) and by shutdown.
                        let ended = {
                            let handling = self.handle(requests, &mut output).instrument(span);
                            futures::pin_mut!(handling);
                            let mut input_ended: Option<tokio::time::Instant> = None;
                            loop {
                                let grace_over = async {
                                    match input_ended {
                                        Some(deadline) => tokio::time::sleep_until(deadline).await,
                                        None => std::future::pending().await,
                                    }
                                };
                                tokio::select! {
                                    biased;
                                    () = &mut handling => break false,
                                    read = stream.read_buf(&mut input), if input_ended.is_none() && input.len() < UNBUDGETED_INPUT => {
                                        match read {
                                            Ok(0) if !blocks => {
                                                input_ended = Some(tokio::time::Instant::now() + EOF_GRACE);
                                            }
                                            Ok(0) | Err(_) => break true,
                                            Ok(_) => {}
                                        }
                                    }
                                    () = grace_over => break true,
                                    _ = shutdown.wait(), if blocks => break true,
                                }
                            }
                        };
                        if ended {
                            break;
                        }
                        self.admitted = None;
                    }
                    // Every command of the batch gets an answer, so replies stay paired.
                    Err(_) => {
                        for _ in &requests {
                            Reply::error(BUSY).encode(self.resp3, &mut output);
                        }
                    }
                }
            }
            if self.over_limit {
                self.close_over_limit(output.len());
                break;
            }
            // Redis answers the requests before a protocol error, then the error, then closes.
            if let Some(err) = &broken {
                Reply::Error(err.0.clone()).encode(self.resp3, &mut output);
            }
            // A subscriber's messages that came meanwhile go after the replies.
            if !self.take_mail(&mut output) || !self.write_out(&mut stream, &output).await {
                break;
            }
            output.clear();
            // A large reply's buffer is let go once it is sent, and its budget with it.
            if output.capacity() > UNBUDGETED_INPUT {
                output = BytesMut::with_capacity(16 * 1024);
            }
            self.reply_memory.clear();
            if broken.is_some() {
                close_after_error(&mut stream).await;
                break;
            }
            if self.quit {
                break;
            }
            // The batch's requests are gone; what the buffer still holds is all the input there
            // is. A large buffer left empty is let go, so an idle connection holds no budget.
            if input.is_empty() && input.capacity() > UNBUDGETED_INPUT {
                input = BytesMut::with_capacity(READ_SIZE);
            }
            input_budget.release_beyond(input.capacity() + parser.held_bytes());
        }
    }

    /// When the next read must have brought something: `Some(None)` for never, `None` when
    /// that time is already past. A new connection has `--resp-first-byte-timeout` for its
    /// first byte, and a client that must AUTH has `--resp-auth-timeout` for that (from accept
    /// or RESET; checked before each read, so a client busy with refused commands is cut off
    /// too); besides, `--resp-idle-timeout` (off by default, as Redis's `timeout`) per read.
    fn read_deadline(&self, received: bool) -> Option<Option<Instant>> {
        let settings = &self.server.settings;
        let first_byte = settings
            .first_byte_timeout
            .filter(|_| !received)
            .map(|limit| self.accepted + limit);
        let auth = settings
            .auth_timeout
            .filter(|_| self.principal.is_none())
            .map(|limit| self.unauthenticated_since + limit);
        let now = Instant::now();
        let fixed = first_byte.into_iter().chain(auth).min();
        if fixed.is_some_and(|deadline| deadline <= now) {
            return None;
        }
        let idle = settings.idle_timeout.map(|limit| now + limit);
        Some(fixed.into_iter().chain(idle).min())
    }

    fn id(&self) -> u64 {
        self.registration.id()
    }

    /// One span per batch (a round trip of pipelined commands), named after its command when
    /// it holds one.
    fn batch_span(&self, requests: &[Vec<Bytes>]) -> tracing::Span {
        let span = crate::telemetry::request_span("resp", None);
        let operation = match requests {
            [only] => String::from_utf8_lossy(only.first().map_or(&b""[..], |name| name)).to_ascii_uppercase(),
            _ => "PIPELINE".to_owned(),
        };
        crate::telemetry::name_operation(&span, "RESP", &operation);
        span.record("bucket", self.bucket());
        span.record("status", "ok");
        span
    }

    /// Runs a batch of requests, encoding their replies in order.
    async fn handle(&mut self, requests: Vec<Vec<Bytes>>, out: &mut BytesMut) {
        let mut run = Run::default();
        let mut last_command = "NULL";
        for args in requests {
            if self.quit || self.over_limit {
                break;
            }
            // The parser never yields an empty request; nothing to answer if one came.
            let Some(name) = args.first() else { continue };
            let name = String::from_utf8_lossy(name).to_ascii_lowercase();
            let spec = command::lookup(&name);
            last_command = spec.map_or("unknown", |spec| spec.name);
            let key_command = match self.admit(&name, spec, &args) {
                Err(reply) => {
                    self.flush(&mut run, out).await;
                    self.finish(spec, reply, out);
                    continue;
                }
                Ok(admitted) => admitted,
            };
            let spec = spec.expect("admitted commands are known");
            let queueing = !matches!(spec.name, "exec" | "discard" | "multi" | "watch" | "quit" | "reset");
            if let (true, Some(_)) = (queueing, &self.multi) {
                let size = args.iter().map(Bytes::len).sum();
                let queued = match key_command {
                    Some(command) => Queued::Key(command, spec),
                    None if matches!(spec.name, "select" | "auth" | "hello" | "client")
                        || is_subscription(spec.name) =>
                    {
                        self.multi_failed = true;
                        let reply = Reply::error(format!(
                            "ERR {} inside MULTI is not supported",
                            spec.name.to_uppercase()
                        ));
                        self.finish(Some(spec), reply, out);
                        continue;
                    }
                    None => Queued::Other(args, spec),
                };
                let pushed = self.multi.as_mut().map(|multi| multi.push(queued, size));
                match pushed {
                    Some(Err(reply)) => {
                        self.multi_failed = true;
                        self.finish(Some(spec), reply, out);
                    }
                    _ => self.emit(Reply::Simple("QUEUED"), out),
                }
                continue;
            }
            match key_command {
                Some(KeyCommand::Typed(typed)) if typed.blocking.is_some() => {
                    self.flush(&mut run, out).await;
                    let reply = self.block(&typed, spec).await;
                    self.finish(Some(spec), reply, out);
                }
                Some(command) => {
                    run.write |= spec.is_write();
                    run.commands.push((command, spec));
                }
                None if is_subscription(spec.name) => {
                    self.flush(&mut run, out).await;
                    self.count(spec.name, &Reply::OK);
                    self.subscription(spec.name, &args[1..], out);
                }
                None => {
                    self.flush(&mut run, out).await;
                    let reply = Box::pin(self.other_command(spec, &args)).await;
                    self.finish(Some(spec), reply, out);
                }
            }
        }
        self.flush(&mut run, out).await;
        let (db, resp) = (self.db, if self.resp3 { 3 } else { 2 });
        let queued = self.multi.as_ref().map_or(-1, |multi| multi.commands.len() as i64);
        self.set_client(|info| {
            info.last_active = Instant::now();
            info.last_command = last_command;
            info.db = db;
            info.resp = resp;
            info.queued = queued;
        });
    }

    /// Checks what every command needs before it runs (known, arity, auth, writable, parsable)
    /// and parses key commands. An error marks an open MULTI as failed, as in Redis.
    fn admit(&mut self, name: &str, spec: Option<&'static Spec>, args: &[Bytes]) -> Result<Option<KeyCommand>, Reply> {
        let result = (|| {
            let Some(spec) = spec else {
                return Err(command::unknown_command(args));
            };
            if !spec.arity_ok(args.len()) {
                return Err(wrong_arity(name));
            }
            if self.principal.is_none() && !spec.flags.contains(&"no_auth") {
                return Err(Reply::error(NOAUTH));
            }
            if !self.resp3 && self.subscribed() && !SUBSCRIBE_MODE.contains(&spec.name) {
                return Err(Reply::error(format!(
                    "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                    spec.name
                )));
            }
            if spec.is_write() && self.server.replica.is_standby() {
                return Err(Reply::error(READONLY));
            }
            if spec.flags.contains(&"readonly")
                && let Some(lag) = self.server.replica.too_far_behind()
            {
                // Redis's own refusal of stale reads (replica-serve-stale-data no).
                return Err(Reply::error(format!(
                    "MASTERDOWN this replica is {:.1} s behind its primary (limit {:.1} s); read from another replica",
                    lag.as_secs_f64(),
                    self.server.replica.limit().unwrap_or_default().as_secs_f64()
                )));
            }
            KeyCommand::parse(name, args)
        })();
        if result.is_err() && self.multi.is_some() {
            self.multi_failed = true;
        }
        result
    }

    fn finish(&mut self, spec: Option<&'static Spec>, reply: Reply, out: &mut BytesMut) {
        self.count(spec.map_or("unknown", |spec| spec.name), &reply);
        self.emit(reply, out);
    }

    /// Encodes a reply, unless CLIENT REPLY turned replies off or skips this one. A reply cut
    /// at the output limit, or one that takes the batch's replies past it, ends the connection
    /// (see `close_over_limit`).
    fn emit(&mut self, reply: Reply, out: &mut BytesMut) {
        match self.reply_mode {
            ReplyMode::On if reply.is_cut() => self.over_limit = true,
            ReplyMode::On => {
                reply.encode(self.resp3, out);
                if self.server.settings.output_limit.is_some_and(|limit| out.len() > limit) {
                    self.over_limit = true;
                }
            }
            ReplyMode::Off => {}
            ReplyMode::SkipThisAndNext => self.reply_mode = ReplyMode::SkipNext,
            ReplyMode::SkipNext => self.reply_mode = ReplyMode::On,
        }
    }

    /// What Redis does to a normal client past its `client-output-buffer-limit`: the client
    /// is closed, its pending replies dropped, with a log line.
    fn close_over_limit(&self, pending: usize) {
        self.server.metrics.resp_output_limit_closed.inc();
        tracing::warn!(
            client = self.id(),
            pending_bytes = pending,
            limit = self.server.settings.output_limit.unwrap_or_default(),
            "RESP client closed for overcoming of output buffer limits (--resp-output-limit)"
        );
    }

    /// Bytes the batch's replies may still take after `out`.
    fn output_room(&self, out: &BytesMut) -> i64 {
        match self.server.settings.output_limit {
            Some(limit) => i64::try_from(limit.saturating_sub(out.len())).unwrap_or(i64::MAX),
            None => i64::MAX,
        }
    }

    /// A read whose reply was cut at its share of the limit or at [`UNBUDGETED_REPLY`], read
    /// again alone once the memory it takes is reserved from the buffer budget: cut at what is
    /// left of the limit, or `-OOM` while the budget cannot cover it.
    async fn read_again(
        &mut self,
        mut command: KeyCommand,
        spec: &'static Spec,
        cut: crate::store::Cut,
        out: &BytesMut,
    ) -> Reply {
        let room = self.output_room(out);
        if cut.least_reply_bytes() > room as u64 {
            return Reply::OverLimit(Some(cut));
        }
        let Some(reservation) = self.server.buffers.try_reserve(cut.memory_bytes(), "resp_reply") else {
            return Reply::error(REPLY_OVER_BUDGET);
        };
        self.reply_memory.push(reservation);
        command.limit_reply(room);
        Box::pin(self.execute(&[(command, spec)], false, &[]))
            .await
            .map_or_else(|reply| reply, |mut replies| replies.pop().unwrap_or(Reply::Nil))
    }

    fn count(&self, operation: &str, reply: &Reply) {
        self.server.commands_processed.fetch_add(1, Relaxed);
        let status = if reply.is_error() { "error" } else { "ok" };
        if reply.is_error() {
            self.server.error_replies.fetch_add(1, Relaxed);
            tracing::Span::current().record("status", status);
        }
        self.server
            .metrics
            .requests
            .with_label_values(&["resp", operation, status])
            .inc();
    }

    fn bucket(&self) -> &str {
        &self.server.settings.databases[&self.db]
    }

    fn principal(&self) -> &Principal {
        self.principal.as_ref().expect("authenticated before any key command")
    }

    /// Database `db` as a keyspace this connection may use as `access` says: its one
    /// authorization for a batch.
    async fn keyspace_of(&self, db: u32, access: Access) -> Result<Keyspace, Reply> {
        let bucket = &self.server.settings.databases[&db];
        self.server
            .buckets
            .open(self.principal(), bucket, access)
            .await
            .and_then(|bucket| bucket.keyspace())
            .map_err(store_error)
    }

    async fn keyspace(&self, access: Access) -> Result<Keyspace, Reply> {
        self.keyspace_of(self.db, access).await
    }

    /// Executes a pending run of key commands and encodes their replies.
    async fn flush(&mut self, run: &mut Run, out: &mut BytesMut) {
        if run.commands.is_empty() {
            return;
        }
        let mut commands = std::mem::take(&mut run.commands);
        let write = std::mem::take(&mut run.write);
        // The run's replies share what is left of the limit, each cut in the database past its
        // share, so that a pipeline of whole-collection reads cannot fill the memory. A read's
        // reply is besides cut at `UNBUDGETED_REPLY`: a larger one is read again alone, within
        // the buffer budget. (A write's is not: it must not run twice.)
        let share = self.output_room(out) / commands.len() as i64;
        for (command, spec) in &mut commands {
            command.limit_reply(match spec.is_write() {
                true => share,
                false => share.min(UNBUDGETED_REPLY),
            });
        }
        let replies = Box::pin(self.execute(&commands, write, &[]))
            .await
            .unwrap_or_else(|reply| vec![reply; commands.len()]);
        for ((command, spec), reply) in commands.into_iter().zip(replies) {
            let reply = match reply {
                Reply::OverLimit(Some(cut)) if !spec.is_write() && !self.over_limit => {
                    self.read_again(command, spec, cut, out).await
                }
                reply => reply,
            };
            self.finish(Some(spec), reply, out);
        }
    }

    /// Runs key commands as one batch: one statement for reads, one transaction for writes.
    /// When a `watched` key changed since WATCH, nothing runs and the error is the null array
    /// EXEC answers with.
    async fn execute(
        &self,
        commands: &[(KeyCommand, &'static Spec)],
        write: bool,
        watched: &[(String, Fingerprint)],
    ) -> Result<Vec<Reply>, Reply> {
        self.within(write, self.execute_now(commands, write, watched)).await?
    }

    /// Database work of a command, within its class's time limit (`--resp-read-timeout`,
    /// `--resp-write-timeout`). Past it the work is dropped, which cancels its statement (a
    /// shared commit only once every client waiting for it is gone).
    async fn within<T>(&self, write: bool, work: impl Future<Output = T>) -> Result<T, Reply> {
        let settings = &self.server.settings;
        let (limit, flag) = match write {
            true => (settings.write_timeout, "--resp-write-timeout"),
            false => (settings.read_timeout, "--resp-read-timeout"),
        };
        let Some(limit) = limit else {
            return Ok(work.await);
        };
        tokio::time::timeout(limit, work).await.map_err(|_| {
            Reply::error(format!(
                "ERR command timed out after {} s ({flag}) and was cancelled",
                limit.as_secs_f64()
            ))
        })
    }

    async fn execute_now(
        &self,
        commands: &[(KeyCommand, &'static Spec)],
        write: bool,
        watched: &[(String, Fingerprint)],
    ) -> Result<Vec<Reply>, Reply> {
        let keyspace = self.keyspace(if write { Access::Write } else { Access::Read }).await?;
        if write && watched.is_empty() {
            // Shares a transaction with other connections' writes.
            let commands = commands.iter().map(|(command, _)| command.clone()).collect();
            return self
                .server
                .group_commit
                .submit(&keyspace, commands)
                .await
                .map_err(store_error);
        }
        if !write
            && watched.is_empty()
            && commands
                .iter()
                .all(|(command, _)| matches!(command, KeyCommand::Typed(_)))
        {
            // Typed reads need nothing loaded: their calls are the one round trip.
            let typed: Vec<&super::typed::Typed> = commands
                .iter()
                .filter_map(|(command, _)| match command {
                    KeyCommand::Typed(typed) => Some(&**typed),
                    _ => None,
                })
                .collect();
            let calls: Vec<_> = typed.iter().map(|typed| &typed.call).collect();
            let rows = keyspace.typed_read(&calls).await.map_err(store_error)?;
            return Ok(typed.iter().zip(rows).map(|(typed, row)| typed.reply(row)).collect());
        }
        let mut keys: Vec<String> = commands
            .iter()
            .flat_map(|(command, _)| command.keys())
            .chain(watched.iter().map(|(key, _)| key))
            .cloned()
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let batch = if write {
            keyspace.write(&keys).await
        } else if watched.is_empty() {
            // Shares a statement with other connections' reads.
            self.server.group_commit.load(&keyspace, keys).await
        } else {
            keyspace.read(&keys).await
        };
        let mut batch = batch.map_err(store_error)?;
        if watched.iter().any(|(key, seen)| fingerprint(batch.get(key)) != *seen) {
            batch.rollback().await.map_err(store_error)?;
            return Err(Reply::NilArray);
        }
        let commands: Vec<&KeyCommand> = commands.iter().map(|(command, _)| command).collect();
        let replies = keys::apply_all(&commands, &mut batch, true)
            .await
            .map_err(store_error)?;
        batch.commit().await.map_err(store_error)?;
        Ok(replies)
    }

    /// Runs scripts (and key commands queued with them) in one batch: see `script.rs`. A
    /// `watched` key that changed since WATCH answers the null array, as [`Self::execute`].
    async fn run_scripted(&self, steps: &[Step], watched: &[(String, Fingerprint)]) -> Result<Vec<Reply>, Reply> {
        let standby = self.server.replica.is_standby();
        let write = !standby && script::writes(steps);
        let keyspace = self.keyspace(if write { Access::Write } else { Access::Read }).await?;
        let watched_keys: Vec<String> = watched.iter().map(|(key, _)| key.clone()).collect();
        let unchanged =
            |batch: &crate::store::KvBatch| watched.iter().all(|(key, seen)| fingerprint(batch.get(key)) == *seen);
        match self
            .server
            .scripts
            .run(&keyspace, steps, write, standby, &watched_keys, unchanged)
            .await
        {
            Ok(Some(replies)) => Ok(replies),
            Ok(None) => Err(Reply::NilArray),
            Err(err) => Err(store_error(err)),
        }
    }

    /// A blocking pop or XREAD BLOCK: tries, and until it finds something or its timeout
    /// passes, waits to be told that one of its keys got elements (or `--resp-block-poll`),
    /// then tries again. It waits without its admission slot (and without a database
    /// connection), and takes a slot again for each attempt: blocked clients must not keep the
    /// others, among them the one that would push their element, from being served.
    async fn block(&mut self, typed: &super::typed::Typed, spec: &'static Spec) -> Reply {
        let deadline = typed
            .blocking
            .flatten()
            .and_then(|timeout| Instant::now().checked_add(timeout));
        let waiter = self.server.wakeups.register(&typed.call.keys);
        let typed = match super::stream::last_ids_call(typed) {
            // Read after registering: an entry added in between wakes this client.
            Some(last_ids) => match self.typed_read(&last_ids).await {
                Ok(row) => super::stream::after_last_ids(typed, &row),
                Err(reply) => return reply,
            },
            None => typed.clone(),
        };
        // What an attempt that found nothing answered (the first attempt's, when it waits).
        let mut nothing: Option<Reply> = None;
        let mut attempt = typed.clone();
        let mut checks = 0;
        loop {
            if self.admitted.is_none() {
                match self.server.admission.admit_again().await {
                    Ok(admitted) => self.admitted = Some(admitted),
                    Err(_) => return Reply::error(BUSY),
                }
            }
            let command = [(KeyCommand::Typed(Box::new(attempt)), spec)];
            let reply = match self.execute(&command, spec.is_write(), &[]).await {
                Ok(mut replies) => replies.pop().unwrap_or(Reply::Nil),
                Err(reply) => reply,
            };
            attempt = typed.clone();
            match reply {
                Reply::Nil | Reply::NilArray => {
                    nothing = Some(reply);
                    checks = 0;
                }
                // An error after the first attempt: what its keys hold decides (blocking.rs).
                Reply::Error(error) if nothing.is_some() => match self.after_error(&typed, &error).await {
                    Retry::Wait => {}
                    Retry::Answer(reply) => return reply,
                    // Bounded: the keys may change under each look.
                    Retry::Attempt(again) if checks < 3 => {
                        checks += 1;
                        attempt = again;
                        continue;
                    }
                    Retry::Attempt(_) => {}
                },
                reply => return reply,
            }
            let reply = nothing.clone().expect("set by an attempt that found nothing");
            self.admitted = None;
            let poll = Instant::now() + self.server.settings.block_poll;
            let wake_at = deadline.map_or(poll, |deadline| deadline.min(poll));
            tokio::select! {
                () = waiter.woken() => {}
                () = tokio::time::sleep_until(wake_at.into()) => {}
                () = self.registration.killed() => return reply,
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return reply;
            }
        }
    }

    /// What a blocked client does after `error` from a later attempt: looks at what its keys
    /// hold now, when the error may come from a key another client changed.
    async fn after_error(&self, typed: &super::typed::Typed, error: &str) -> Retry {
        if !(error.starts_with("WRONGTYPE") || error.starts_with("NOGROUP")) {
            return Retry::Answer(Reply::Error(error.to_owned()));
        }
        let batch = match self.keyspace(Access::Read).await {
            Ok(keyspace) => keyspace.read(&typed.call.keys).await.map_err(store_error),
            Err(reply) => Err(reply),
        };
        match batch {
            Ok(batch) => super::blocking::after_error(typed, error, |key| {
                batch.get(key).map(|entry| match entry.value {
                    crate::store::KvValue::Typed(kind) => Some(kind),
                    _ => None,
                })
            }),
            Err(reply) => Retry::Answer(reply),
        }
    }

    /// One typed read, its row as the SQL answered it.
    async fn typed_read(&self, typed: &super::typed::Typed) -> Result<TypedRow, Reply> {
        let keyspace = self.keyspace(Access::Read).await?;
        let row = keyspace.typed_read(&[&typed.call]).await.map_err(store_error)?.pop();
        match row.unwrap_or_default() {
            TypedRow { err: Some(err), .. } => Err(Reply::Error(err)),
            row => Ok(row),
        }
    }

    /// Everything that is not a key command.
    async fn other_command(&mut self, spec: &'static Spec, args: &[Bytes]) -> Reply {
        match spec.name {
            // A RESP2 subscriber's PING answers in the shape of its messages.
            "ping" if !self.resp3 && self.subscribed() => Reply::Array(vec![
                Reply::text("pong"),
                Reply::Bulk(args.get(1).cloned().unwrap_or_default()),
            ]),
            "ping" => match args {
                [_] => Reply::Simple("PONG"),
                [_, message] => Reply::Bulk(message.clone()),
                _ => wrong_arity("ping"),
            },
            "echo" => Reply::Bulk(args[1].clone()),
            "publish" | "spublish" if self.server.replica.is_standby() => Reply::error(STANDBY_PUBSUB),
            "publish" | "spublish" => {
                match self
                    .server
                    .pubsub
                    .publish(spec.name == "spublish", &args[1], &args[2])
                    .await
                {
                    Ok(receivers) => Reply::Integer(receivers),
                    Err(reply) => reply,
                }
            }
            "pubsub" => self.pubsub_introspection(args),
            "time" => time_reply(),
            "quit" => {
                self.quit = true;
                Reply::OK
            }
            "reset" => {
                self.unsubscribe_all();
                self.multi = None;
                self.multi_failed = false;
                self.watched.clear();
                self.cursors.clear();
                self.db = 0;
                self.resp3 = false;
                if self.server.settings.require_auth {
                    self.principal = None;
                    self.unauthenticated_since = Instant::now();
                }
                self.set_client(|info| info.name.clear());
                Reply::Simple("RESET")
            }
            "auth" => match args {
                [_, password] => self.authenticate(None, password).await,
                [_, user, password] => self.authenticate(Some(user), password).await,
                _ => syntax_error(),
            },
            "hello" => self.hello(args).await,
            "select" => match command::parse_integer(&args[1]) {
                None => command::not_an_integer(),
                Some(db) if u32::try_from(db).is_ok_and(|db| self.server.settings.databases.contains_key(&db)) => {
                    self.db = db as u32;
                    Reply::OK
                }
                Some(_) => Reply::error("ERR DB index is out of range"),
            },
            "client" => self.client(args),
            "command" => command_info::command(args),
            "config" => config_command(args, &self.config_parameters()),
            "info" => self.info(args).await,
            "multi" => {
                if self.multi.is_some() {
                    return Reply::error("ERR MULTI calls can not be nested");
                }
                self.multi = Some(MultiQueue::new(self.server.buffers.clone()));
                self.multi_failed = false;
                Reply::OK
            }
            "discard" => {
                if self.multi.take().is_none() {
                    return Reply::error("ERR DISCARD without MULTI");
                }
                self.watched.clear();
                Reply::OK
            }
            "exec" => self.exec().await,
            "watch" => {
                if self.multi.is_some() {
                    return Reply::error("ERR WATCH inside MULTI is not allowed");
                }
                let keys: Result<Vec<String>, Reply> = args[1..].iter().map(command::key).collect();
                let keys = match keys {
                    Ok(keys) => keys,
                    Err(reply) => return reply,
                };
                let keyspace = match self.keyspace(Access::Read).await {
                    Ok(keyspace) => keyspace,
                    Err(reply) => return reply,
                };
                match keyspace.read(&keys).await {
                    Ok(batch) => {
                        for key in keys {
                            let seen = fingerprint(batch.get(&key));
                            self.watched.push((self.db, key, seen));
                        }
                        Reply::OK
                    }
                    Err(err) => store_error(err),
                }
            }
            "unwatch" => {
                self.watched.clear();
                Reply::OK
            }
            "dbsize" => match self.keyspace(Access::Read).await {
                Ok(keyspace) => keyspace
                    .count()
                    .await
                    .map_or_else(store_error, |(keys, _)| Reply::Integer(keys)),
                Err(reply) => reply,
            },
            "randomkey" => match self.keyspace(Access::Read).await {
                Ok(keyspace) => keyspace
                    .random_key()
                    .await
                    .map_or_else(store_error, |key| key.map_or(Reply::Nil, Reply::bulk)),
                Err(reply) => reply,
            },
            "flushdb" => {
                if !flush_mode_ok(args) {
                    return syntax_error();
                }
                if !self.server.settings.flushdb {
                    return Reply::error("ERR FLUSHDB is disabled on this server (start pgvs3 with --resp-flushdb)");
                }
                match self.keyspace(Access::Write).await {
                    Ok(keyspace) => keyspace.flush().await.map_or_else(store_error, |()| Reply::OK),
                    Err(reply) => reply,
                }
            }
            "flushall" => {
                if !flush_mode_ok(args) {
                    return syntax_error();
                }
                if !self.server.settings.flushdb {
                    return Reply::error("ERR FLUSHALL is disabled on this server (start pgvs3 with --resp-flushdb)");
                }
                // Every database this server maps, one after the other (each its own statement).
                for db in self.server.settings.databases.keys() {
                    let flushed = match self.keyspace_of(*db, Access::Write).await {
                        Ok(keyspace) => keyspace.flush().await.map_err(store_error),
                        Err(reply) => Err(reply),
                    };
                    if let Err(reply) = flushed {
                        return reply;
                    }
                }
                Reply::OK
            }
            "function" => function_command(args),
            "eval" | "evalsha" | "eval_ro" | "evalsha_ro" => {
                let steps = match self.server.scripts.request(spec.name, args) {
                    Ok(request) => [Step::Script(request)],
                    Err(reply) => return reply,
                };
                match self.run_scripted(&steps, &[]).await {
                    Ok(mut replies) => replies.pop().unwrap_or(Reply::Nil),
                    Err(reply) => reply,
                }
            }
            "script" => self.server.scripts.command(args),
            // XGROUP HELP and XINFO HELP (the other subcommands are key commands).
            "xgroup" => super::stream_group::help(),
            "xinfo" => super::stream::help(),
            "keys" => self.keys(&args[1]).await,
            "scan" => self.scan(args).await,
            other => unreachable!("{other} is in the command table but not handled"),
        }
    }

    async fn exec(&mut self) -> Reply {
        let Some(MultiQueue { commands: queued, .. }) = self.multi.take() else {
            return Reply::error("ERR EXEC without MULTI");
        };
        let watched = std::mem::take(&mut self.watched);
        if std::mem::take(&mut self.multi_failed) {
            return Reply::error("EXECABORT Transaction discarded because of previous errors.");
        }
        // Keys watched in other databases are checked on their own (not under the batch's lock).
        let mut here = Vec::new();
        for (db, key, seen) in watched {
            if db == self.db {
                here.push((key, seen));
                continue;
            }
            let keyspace = match self.keyspace_of(db, Access::Read).await {
                Ok(keyspace) => keyspace,
                Err(reply) => return reply,
            };
            match keyspace.read(std::slice::from_ref(&key)).await {
                Ok(batch) if fingerprint(batch.get(&key)) == seen => {}
                Ok(_) => return Reply::NilArray,
                Err(err) => return store_error(err),
            }
        }
        let mut commands: Vec<(KeyCommand, &'static Spec)> = queued
            .iter()
            .filter_map(|queued| match queued {
                Queued::Key(command, spec) => Some((command.clone(), *spec)),
                Queued::Other(..) => None,
            })
            .collect();
        // EXEC's reply is one: its parts share the output limit.
        if let Some(limit) = self.server.settings.output_limit {
            let share = i64::try_from(limit / commands.len().max(1)).unwrap_or(i64::MAX);
            for (command, _) in &mut commands {
                command.limit_reply(share);
            }
        }
        let write = commands.iter().any(|(_, spec)| spec.is_write());
        let scripted = queued
            .iter()
            .any(|queued| matches!(queued, Queued::Other(_, spec) if script::is_script(spec.name)));
        let mut key_replies = if scripted {
            // Scripts and key commands in their order, in one transaction.
            let steps: Vec<Step> = queued
                .iter()
                .filter_map(|queued| match queued {
                    Queued::Key(command, spec) => Some(Step::Key(command.clone(), spec)),
                    Queued::Other(args, spec) if script::is_script(spec.name) => {
                        Some(match self.server.scripts.request(spec.name, args) {
                            Ok(request) => Step::Script(request),
                            Err(reply) => Step::Failed(reply),
                        })
                    }
                    Queued::Other(..) => None,
                })
                .collect();
            match self.run_scripted(&steps, &here).await {
                Ok(replies) => replies,
                Err(Reply::NilArray) => return Reply::NilArray,
                Err(reply) => vec![reply; steps.len()],
            }
        } else if commands.is_empty() && here.is_empty() {
            Vec::new()
        } else {
            match self.execute(&commands, write, &here).await {
                Ok(replies) => replies,
                Err(Reply::NilArray) => return Reply::NilArray,
                Err(reply) => vec![reply; commands.len()],
            }
        }
        .into_iter();
        let mut replies = Vec::with_capacity(queued.len());
        for queued in queued {
            let reply = match queued {
                Queued::Other(args, spec) if !script::is_script(spec.name) => {
                    let reply = Box::pin(self.other_command(spec, &args)).await;
                    self.count(spec.name, &reply);
                    reply
                }
                Queued::Key(_, spec) | Queued::Other(_, spec) => {
                    let reply = key_replies.next().expect("one reply per key command and script");
                    self.count(spec.name, &reply);
                    reply
                }
            };
            replies.push(reply);
        }
        Reply::Array(replies)
    }

    async fn authenticate(&mut self, user: Option<&Bytes>, password: &Bytes) -> Reply {
        match self.check_credentials(user, password).await {
            Ok(principal) => {
                self.principal = Some(principal);
                Reply::OK
            }
            Err(reply) => reply,
        }
    }

    async fn check_credentials(&self, user: Option<&Bytes>, password: &Bytes) -> Result<Principal, Reply> {
        let configured = self.server.settings.password.as_deref();
        match user.map(|user| &user[..]) {
            None | Some(b"default") => match configured {
                Some(configured) if constant_time_eq(configured.as_bytes(), password) => Ok(self.server.root.clone()),
                None if user.is_none() => Err(Reply::error(
                    "ERR AUTH <password> called without any password configured for the default user. \
                     Are you sure your configuration is correct?",
                )),
                _ => Err(Reply::error(WRONGPASS)),
            },
            Some(access_key) => {
                let access_key = String::from_utf8_lossy(access_key);
                match self.server.buckets.catalog().access_key(&access_key).await {
                    // AUTH cannot carry a session token, without which temporary credentials
                    // are not to be used (docs/resp-compatibility.md).
                    Ok(Some(key)) if key.session.is_some() => Err(Reply::error(STS_REFUSED)),
                    Ok(Some(key)) if constant_time_eq(key.secret.as_bytes(), password) => Ok(key.principal()),
                    Ok(_) => Err(Reply::error(WRONGPASS)),
                    Err(err) => Err(store_error(err)),
                }
            }
        }
    }

    async fn hello(&mut self, args: &[Bytes]) -> Reply {
        let mut protocol = if self.resp3 { 3 } else { 2 };
        if let Some(version) = args.get(1) {
            protocol = match command::parse_integer(version) {
                Some(version @ (2 | 3)) => version,
                Some(_) => return Reply::error("NOPROTO unsupported protocol version"),
                None => return Reply::error("ERR Protocol version is not an integer or out of range"),
            };
        }
        let mut name = None;
        let mut i = 2;
        while i < args.len() {
            let option = args[i].to_ascii_lowercase();
            match option.as_slice() {
                b"auth" if i + 2 < args.len() => {
                    match self.check_credentials(Some(&args[i + 1]), &args[i + 2]).await {
                        Ok(principal) => self.principal = Some(principal),
                        Err(reply) => return reply,
                    }
                    i += 3;
                }
                b"setname" if i + 1 < args.len() => {
                    name = Some(args[i + 1].clone());
                    i += 2;
                }
                _ => {
                    return Reply::error(format!(
                        "ERR Syntax error in HELLO option '{}'",
                        String::from_utf8_lossy(&args[i])
                    ));
                }
            }
        }
        if self.principal.is_none() {
            return Reply::error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
                 HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
                 select the RESP protocol version at the same time",
            );
        }
        if let Some(name) = name {
            let reply = self.set_name(&name);
            if reply.is_error() {
                return reply;
            }
        }
        self.resp3 = protocol == 3;
        let role = if self.server.replica.is_standby() {
            "replica"
        } else {
            "master"
        };
        Reply::Map(vec![
            (Reply::text("server"), Reply::text("redis")),
            (Reply::text("version"), Reply::text(REDIS_VERSION)),
            (Reply::text("proto"), Reply::Integer(protocol)),
            (Reply::text("id"), Reply::Integer(self.id() as i64)),
            (Reply::text("mode"), Reply::text("standalone")),
            (Reply::text("role"), Reply::text(role)),
            (Reply::text("modules"), Reply::Array(Vec::new())),
        ])
    }

    fn set_client(&self, update: impl FnOnce(&mut super::clients::ClientInfo)) {
        self.server.clients.update(self.id(), update);
    }

    fn set_name(&self, name: &[u8]) -> Reply {
        if name.iter().any(|&byte| !(b'!'..=b'~').contains(&byte)) {
            return Reply::error("ERR Client names cannot contain spaces, newlines or special characters.");
        }
        let name = String::from_utf8_lossy(name).into_owned();
        self.set_client(|info| info.name = name);
        Reply::OK
    }

    fn client(&mut self, args: &[Bytes]) -> Reply {
        let subcommand = args[1].to_ascii_lowercase();
        match (subcommand.as_slice(), args.len()) {
            (b"id", 2) => Reply::Integer(self.id() as i64),
            (b"setname", 3) => self.set_name(&args[2]),
            (b"getname", 2) => self
                .server
                .clients
                .name(self.id())
                .map_or(Reply::Nil, |name| Reply::text(&name)),
            (b"list", _) => self.client_list(&args[2..]),
            (b"info", 2) => self
                .server
                .clients
                .line(self.id())
                .map_or(Reply::Nil, |line| Reply::text(&line)),
            (b"setinfo", 4) => {
                let value = String::from_utf8_lossy(&args[3]).into_owned();
                match args[2].to_ascii_lowercase().as_slice() {
                    b"lib-name" => self.set_client(|info| info.lib_name = value),
                    b"lib-ver" => self.set_client(|info| info.lib_version = value),
                    _ => {
                        return Reply::error(format!(
                            "ERR Unrecognized option '{}'",
                            String::from_utf8_lossy(&args[2])
                        ));
                    }
                }
                Reply::OK
            }
            (b"no-evict" | b"no-touch", 3) => Reply::OK,
            (b"reply", 3) => match args[2].to_ascii_lowercase().as_slice() {
                b"on" => {
                    self.reply_mode = ReplyMode::On;
                    Reply::OK
                }
                // These two answer nothing, the mode already applying to their own reply.
                b"off" => {
                    self.reply_mode = ReplyMode::Off;
                    Reply::OK
                }
                b"skip" => {
                    self.reply_mode = ReplyMode::SkipThisAndNext;
                    Reply::OK
                }
                _ => syntax_error(),
            },
            // Redis's arity for the subcommand (which would otherwise be an empty filter that
            // matches every client).
            (b"kill", 2) => wrong_arity("client|kill"),
            (b"kill", 3) => {
                // The old form: CLIENT KILL addr:port.
                let filter = super::clients::KillFilter {
                    addr: Some(String::from_utf8_lossy(&args[2]).into_owned()),
                    ..Default::default()
                };
                match self.server.clients.kill(&filter) {
                    0 => Reply::error("ERR No such client"),
                    _ => Reply::OK,
                }
            }
            (b"kill", _) => match self.kill_filter(&args[2..]) {
                Ok(filter) => Reply::Integer(self.server.clients.kill(&filter) as i64),
                Err(reply) => reply,
            },
            (b"id" | b"setname" | b"getname" | b"info" | b"setinfo" | b"no-evict" | b"no-touch" | b"reply", _) => {
                wrong_arity(&format!("client|{}", String::from_utf8_lossy(&subcommand)))
            }
            _ => Reply::error(format!(
                "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                String::from_utf8_lossy(&args[1])
            )),
        }
    }

    /// CLIENT LIST's options, as Redis 7 reads them: `TYPE <type>`, or `ID <id> [<id> ...]`
    /// (the clients among them that exist, in the order given).
    fn client_list(&self, options: &[Bytes]) -> Reply {
        let clients = &self.server.clients;
        match options {
            [] => Reply::text(&clients.list()),
            [option, kind] if option.eq_ignore_ascii_case(b"type") => match client_type(kind) {
                // Every client of pgvs3 is a normal one.
                Ok(normal) => Reply::text(&if normal { clients.list() } else { String::new() }),
                Err(reply) => reply,
            },
            [option, ids @ ..] if option.eq_ignore_ascii_case(b"id") && !ids.is_empty() => {
                let mut text = String::new();
                for id in ids {
                    let Some(id) = command::parse_integer(id) else {
                        return Reply::error("ERR Invalid client ID");
                    };
                    if let Some(line) = u64::try_from(id).ok().and_then(|id| clients.line(id)) {
                        text.push_str(&line);
                    }
                }
                Reply::text(&text)
            }
            _ => syntax_error(),
        }
    }

    /// CLIENT KILL's filters (`ID`, `ADDR`, `LADDR`, `TYPE`, `USER`, `MAXAGE`, `SKIPME`), in
    /// pairs, read in order as Redis reads them (so the first bad one is the error).
    fn kill_filter(&self, args: &[Bytes]) -> Result<super::clients::KillFilter, Reply> {
        let mut filter = super::clients::KillFilter {
            skip: Some(self.id()),
            ..Default::default()
        };
        for pair in args.chunks(2) {
            let [option, value] = pair else {
                return Err(syntax_error());
            };
            let text = String::from_utf8_lossy(value).into_owned();
            match option.to_ascii_lowercase().as_slice() {
                b"id" => {
                    let id = command::parse_integer(value)
                        .and_then(|id| u64::try_from(id).ok())
                        .filter(|id| *id > 0)
                        .ok_or_else(|| Reply::error("ERR client-id should be greater than 0"))?;
                    filter.id = Some(id);
                }
                b"addr" => filter.addr = Some(text),
                b"laddr" => filter.laddr = Some(text),
                b"maxage" => {
                    let age = command::parse_integer(value)
                        .and_then(|age| u64::try_from(age).ok())
                        .ok_or_else(command::not_an_integer)?;
                    filter.max_age = Some(age);
                }
                b"type" => filter.other_type = !client_type(value)?,
                // Every connection acts as Redis's `default` user (CLIENT LIST's `user=`).
                b"user" if text == "default" => {}
                b"user" => return Err(Reply::error(format!("ERR No such user '{text}'"))),
                b"skipme" => match text.to_ascii_lowercase().as_str() {
                    "yes" => filter.skip = Some(self.id()),
                    "no" => filter.skip = None,
                    _ => return Err(syntax_error()),
                },
                _ => return Err(syntax_error()),
            }
        }
        Ok(filter)
    }

    async fn info(&self, args: &[Bytes]) -> Reply {
        let wanted: Vec<String> = args[1..]
            .iter()
            .map(|arg| String::from_utf8_lossy(arg).to_ascii_lowercase())
            .collect();
        let show = |section: &str| {
            wanted.is_empty()
                || wanted
                    .iter()
                    .any(|w| w == section || w == "all" || w == "everything" || w == "default")
        };
        let mut text = String::new();
        if show("server") {
            let uptime = self.server.started.elapsed().as_secs();
            text.push_str(&format!(
                "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\n\
                 redis_mode:standalone\r\npgvs3_version:{}\r\nos:{} {}\r\narch_bits:64\r\nprocess_id:{}\r\n\
                 tcp_port:{}\r\nuptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\n\r\n",
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::env::consts::ARCH,
                std::process::id(),
                self.server.port,
                uptime / 86_400,
            ));
        }
        if show("clients") {
            let connected = self.server.clients.len();
            text.push_str(&format!(
                "# Clients\r\nconnected_clients:{connected}\r\ncluster_connections:0\r\nmaxclients:{}\r\n\
                 blocked_clients:{}\r\ntracking_clients:0\r\n\r\n",
                self.server.settings.max_clients,
                self.server.wakeups.blocked_clients()
            ));
        }
        if show("memory") {
            let used = resident_bytes();
            text.push_str(&format!(
                "# Memory\r\nused_memory:{used}\r\nused_memory_human:{:.2}M\r\nused_memory_rss:{used}\r\n\
                 maxmemory:0\r\nmaxmemory_policy:noeviction\r\nmem_allocator:mimalloc\r\n\r\n",
                used as f64 / (1024.0 * 1024.0)
            ));
        }
        if show("persistence") {
            // Every write is durable at its reply (PostgreSQL's commit): nothing loads, nothing
            // waits for a save. Clients (ioredis's ready check) read `loading`.
            text.push_str(
                "# Persistence\r\nloading:0\r\nasync_loading:0\r\nrdb_changes_since_last_save:0\r\n\
                 rdb_bgsave_in_progress:0\r\nrdb_last_bgsave_status:ok\r\naof_enabled:0\r\n\
                 aof_rewrite_in_progress:0\r\n\r\n",
            );
        }
        if show("stats") {
            text.push_str(&format!(
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\
                 expired_keys:0\r\nevicted_keys:0\r\ntotal_error_replies:{}\r\nunexpected_error_replies:0\r\n\r\n",
                self.server.clients.total_registered(),
                self.server.commands_processed.load(Relaxed),
                self.server.error_replies.load(Relaxed),
            ));
        }
        if show("cpu") {
            let (system, user) = cpu_seconds();
            text.push_str(&format!(
                "# CPU\r\nused_cpu_sys:{system:.6}\r\nused_cpu_user:{user:.6}\r\n\r\n"
            ));
        }
        if show("replication") {
            let role = if self.server.replica.is_standby() {
                "slave"
            } else {
                "master"
            };
            text.push_str(&format!(
                "# Replication\r\nrole:{role}\r\nconnected_slaves:0\r\nmaster_repl_offset:0\r\n\r\n"
            ));
        }
        if show("cluster") {
            text.push_str("# Cluster\r\ncluster_enabled:0\r\n\r\n");
        }
        if show("keyspace") {
            text.push_str("# Keyspace\r\n");
            for db in self.server.settings.databases.keys() {
                let Ok(keyspace) = self.keyspace_of(*db, Access::Read).await else {
                    continue;
                };
                if let Ok((keys, expires)) = keyspace.count().await
                    && keys > 0
                {
                    text.push_str(&format!("db{db}:keys={keys},expires={expires},avg_ttl=0\r\n"));
                }
            }
        }
        // Redis puts a blank line between sections, none after the last.
        if text.ends_with("\r\n\r\n") {
            text.truncate(text.len() - 2);
        }
        Reply::text(&text)
    }

    /// What CONFIG GET shows: the parameters client libraries and tools ask for (redis-cli,
    /// BullMQ's `maxmemory-policy` check, ...), with what stands for them here.
    fn config_parameters(&self) -> Vec<(&'static str, String)> {
        let settings = &self.server.settings;
        let databases = settings.databases.keys().max().map_or(1, |last| last + 1);
        let script_ms = settings.script.time.as_millis().to_string();
        let idle = settings.idle_timeout.map_or(0, |timeout| timeout.as_secs());
        let pubsub = settings.pubsub.output_limit;
        let normal = settings.output_limit.unwrap_or(0);
        vec![
            ("databases", databases.to_string()),
            ("maxclients", settings.max_clients.to_string()),
            ("timeout", idle.to_string()),
            ("port", self.server.port.to_string()),
            ("maxmemory", "0".into()),
            ("maxmemory-policy", "noeviction".into()),
            // Every write is durable at its reply (PostgreSQL): no snapshots, no AOF.
            ("save", String::new()),
            ("appendonly", "no".into()),
            ("notify-keyspace-events", String::new()),
            ("proto-max-bulk-len", (512 * 1024 * 1024).to_string()),
            ("busy-reply-threshold", script_ms.clone()),
            ("lua-time-limit", script_ms),
            ("cluster-enabled", "no".into()),
            (
                "client-output-buffer-limit",
                format!("normal {normal} 0 0 slave 268435456 67108864 60 pubsub {pubsub} {pubsub} 0"),
            ),
        ]
    }

    async fn keys(&self, pattern: &[u8]) -> Reply {
        self.within(false, self.keys_now(pattern))
            .await
            .unwrap_or_else(|reply| reply)
    }

    async fn keys_now(&self, pattern: &[u8]) -> Reply {
        let prefix = glob::literal_prefix(pattern);
        let keyspace = match self.keyspace(Access::Read).await {
            Ok(keyspace) => keyspace,
            Err(reply) => return reply,
        };
        let mut after = String::new();
        let mut found = Vec::new();
        // Bytes of the reply so far: past the output limit it is not gathered further.
        let mut bytes = 0;
        loop {
            let page = keyspace.scan(&after, &prefix, KEYS_PAGE).await;
            let page = match page {
                Ok(page) => page,
                Err(err) => return store_error(err),
            };
            let done = (page.len() as i64) < KEYS_PAGE;
            if let Some((last, _)) = page.last() {
                after = last.clone();
            }
            found.extend(
                page.into_iter()
                    .filter(|(key, _)| glob::matches(pattern, key.as_bytes()))
                    .inspect(|(key, _)| bytes += key.len() + 5)
                    .map(|(key, _)| Reply::bulk(key)),
            );
            if self.server.settings.output_limit.is_some_and(|limit| bytes > limit) {
                return Reply::OverLimit(None);
            }
            if done {
                return Reply::Array(found);
            }
        }
    }

    /// SCAN walks keys in order; a cursor names where the previous page ended. Cursors are
    /// numbers (clients parse them) kept per connection.
    async fn scan(&mut self, args: &[Bytes]) -> Reply {
        let after = match command::parse_integer(&args[1]) {
            Some(0) => String::new(),
            Some(cursor) => match self.cursors.remove(&(cursor as u64)) {
                Some(after) => after,
                None => return Reply::error("ERR invalid cursor"),
            },
            None => return Reply::error("ERR invalid cursor"),
        };
        let mut pattern: Option<&[u8]> = None;
        let mut count = SCAN_DEFAULT_COUNT;
        // SCAN ... TYPE: `None` for every key, else the type's name ("string" for strings).
        let mut wanted_type: Option<Vec<u8>> = None;
        let mut i = 2;
        while i < args.len() {
            let Some(value) = args.get(i + 1) else {
                return syntax_error();
            };
            match args[i].to_ascii_lowercase().as_slice() {
                b"match" => pattern = Some(value),
                b"count" => match command::parse_integer(value) {
                    Some(n) if n >= 1 => count = n.min(100_000),
                    Some(_) => return syntax_error(),
                    None => return command::not_an_integer(),
                },
                b"type" => wanted_type = Some(value.to_ascii_lowercase()),
                _ => return syntax_error(),
            }
            i += 2;
        }
        let prefix = pattern.map(glob::literal_prefix).unwrap_or_default();
        let keyspace = match self.keyspace(Access::Read).await {
            Ok(keyspace) => keyspace,
            Err(reply) => return reply,
        };
        let page = match self.within(false, keyspace.scan(&after, &prefix, count)).await {
            Ok(Ok(page)) => page,
            Ok(Err(err)) => return store_error(err),
            Err(reply) => return reply,
        };
        let next = match page.last() {
            Some((last, _)) if page.len() as i64 == count => {
                if self.cursors.len() >= MAX_CURSORS {
                    let oldest = *self.cursors.keys().min().expect("not empty");
                    self.cursors.remove(&oldest);
                }
                let cursor = self.next_cursor;
                self.next_cursor += 1;
                self.cursors.insert(cursor, last.clone());
                cursor
            }
            _ => 0,
        };
        let keys = page
            .into_iter()
            .filter(|(key, typed)| {
                let name = typed.map_or("string", |typed| typed.name());
                wanted_type.as_ref().is_none_or(|wanted| wanted == name.as_bytes())
                    && pattern.is_none_or(|pattern| glob::matches(pattern, key.as_bytes()))
            })
            .map(|(key, _)| Reply::bulk(key))
            .collect();
        Reply::Array(vec![Reply::text(&next.to_string()), Reply::Array(keys)])
    }
}

/// Whether a request is a blocking pop or XREAD BLOCK (its batch may wait long; see
/// `Connection::run`).
fn is_blocking(args: &[Bytes]) -> bool {
    let name = args.first().map_or(&b""[..], |name| name);
    super::stream::blocks(args)
        || [
            "blpop",
            "brpop",
            "blmove",
            "brpoplpush",
            "bzpopmin",
            "bzpopmax",
            "blmpop",
            "bzmpop",
        ]
        .iter()
        .any(|blocking| name.eq_ignore_ascii_case(blocking.as_bytes()))
}

/// FLUSHDB's and FLUSHALL's one optional argument, SYNC or ASYNC (both flush at once here).
fn flush_mode_ok(args: &[Bytes]) -> bool {
    match args {
        [_] => true,
        [_, mode] => mode.eq_ignore_ascii_case(b"sync") || mode.eq_ignore_ascii_case(b"async"),
        _ => false,
    }
}

/// TIME: the server's clock, in seconds and microseconds.
pub(super) fn time_reply() -> Reply {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    Reply::Array(vec![
        Reply::text(&now.as_secs().to_string()),
        Reply::text(&now.subsec_micros().to_string()),
    ])
}

/// FUNCTION: pgvs3 runs EVAL scripts but no functions: FLUSH and LIST answer as a
/// server without any does; loading one is refused.
fn function_command(args: &[Bytes]) -> Reply {
    match (args[1].to_ascii_lowercase().as_slice(), args.len()) {
        (b"flush", 2) => Reply::OK,
        (b"flush", 3) if args[2].eq_ignore_ascii_case(b"sync") || args[2].eq_ignore_ascii_case(b"async") => Reply::OK,
        (b"flush", _) => syntax_error(),
        (b"list", _) => Reply::Array(Vec::new()),
        _ => Reply::error(format!(
            "ERR FUNCTION {} is not supported by pgvs3 (it runs EVAL scripts, not functions)",
            String::from_utf8_lossy(&args[1]).to_uppercase()
        )),
    }
}

/// Redis's parameters that only choose in-memory encodings (listpack, intset and quicklist
/// sizes) or defragmentation: they change no behaviour a client can see, and pgvs3 keeps
/// values in PostgreSQL, so CONFIG SET accepts them and changes nothing.
const ENCODING_PARAMETERS: &[&str] = &[
    "hash-max-listpack-entries",
    "hash-max-listpack-value",
    "hash-max-ziplist-entries",
    "hash-max-ziplist-value",
    "list-max-listpack-size",
    "list-max-ziplist-size",
    "list-compress-depth",
    "set-max-intset-entries",
    "set-max-listpack-entries",
    "set-max-listpack-value",
    "zset-max-listpack-entries",
    "zset-max-listpack-value",
    "zset-max-ziplist-entries",
    "zset-max-ziplist-value",
    "stream-node-max-bytes",
    "stream-node-max-entries",
    "activedefrag",
    "lazyfree-lazy-user-del",
    "lazyfree-lazy-user-flush",
];

/// CONFIG GET answers the parameters of `parameters` that one of its glob patterns names.
fn config_command(args: &[Bytes], parameters: &[(&'static str, String)]) -> Reply {
    match args[1].to_ascii_lowercase().as_slice() {
        b"get" if args.len() >= 3 => {
            let patterns: Vec<Vec<u8>> = args[2..].iter().map(|pattern| pattern.to_ascii_lowercase()).collect();
            Reply::Map(
                parameters
                    .iter()
                    .filter(|(name, _)| patterns.iter().any(|pattern| glob::matches(pattern, name.as_bytes())))
                    .map(|(name, value)| (Reply::text(name), Reply::bulk(value.clone())))
                    .collect(),
            )
        }
        b"get" => wrong_arity("config|get"),
        b"set" if args.len() >= 4 && args.len().is_multiple_of(2) => {
            for pair in args[2..].chunks(2) {
                let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                if !ENCODING_PARAMETERS.contains(&name.as_str()) {
                    return Reply::error(format!(
                        "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                    ));
                }
            }
            Reply::OK
        }
        b"set" => wrong_arity("config|set"),
        _ => Reply::error(format!(
            "ERR CONFIG {} is not supported by pgvs3 (it is configured by its flags)",
            String::from_utf8_lossy(&args[1]).to_uppercase()
        )),
    }
}

/// The gateway process's resident memory (INFO's used_memory: the process holds no dataset,
/// so this is what it uses), from /proc; 0 where there is none.
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// The process's system and user CPU time in seconds.
fn cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage fills the struct it is given and has no other effect.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return (0.0, 0.0);
        }
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (seconds(usage.ru_stime), seconds(usage.ru_utime))
}

/// The Redis version pgvs3 reports: the command set it follows.
/// A client type of CLIENT LIST and CLIENT KILL: true for `normal`, false for the types no
/// pgvs3 client has (`master`, `replica`/`slave`, `pubsub`: subscribers count as normal), and
/// Redis's error for any other.
fn client_type(name: &[u8]) -> Result<bool, Reply> {
    match name.to_ascii_lowercase().as_slice() {
        b"normal" => Ok(true),
        b"master" | b"replica" | b"slave" | b"pubsub" => Ok(false),
        _ => Err(Reply::error(format!(
            "ERR Unknown client type '{}'",
            String::from_utf8_lossy(name)
        ))),
    }
}

const REDIS_VERSION: &str = "7.0.0";

fn constant_time_eq(expected: &[u8], given: &[u8]) -> bool {
    expected.len() == given.len() && expected.iter().zip(given).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
}

/// Store failures as Redis error texts.
fn store_error(err: StoreError) -> Reply {
    match err {
        StoreError::ReadOnly => Reply::error(READONLY),
        StoreError::AccessDenied => {
            Reply::error("NOPERM this user has no permissions to access this database's bucket")
        }
        StoreError::NoSuchBucket => Reply::error("ERR the bucket of this database does not exist"),
        StoreError::KeyTooLong => Reply::error("ERR invalid key: pgvs3 keys are at most 1024 bytes"),
        // Redis's own answer when a write would go past `maxmemory`.
        StoreError::QuotaExceeded(_) => {
            Reply::error("OOM command not allowed: the bucket of this database is at its quota")
        }
        // The operator's mistake, not the client's: said plainly, not logged per command.
        err @ StoreError::NotAKeyspace(_) => Reply::error(format!("ERR {err}")),
        other => {
            tracing::warn!(error = %other, "RESP command failed");
            Reply::error(format!("ERR {other}"))
        }
    }
}

/// How long a connection closing on an error keeps reading what the client still sends.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// Closes a connection whose error reply was just written without losing that reply: closing a
/// socket with unread input makes the kernel reset the connection, and a client still sending
/// (a large request) would see the reset instead of the error. So: end our side, then read and
/// drop the client's remaining input until it ends its side, for a short while at most.
async fn close_after_error<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let mut sink = vec![0u8; 64 * 1024];
    let drain = async { while matches!(stream.read(&mut sink).await, Ok(read) if read > 0) {} };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// The share of a connection's input buffer (or MULTI queue) that is held against the
/// process's buffer budget: everything beyond [`UNBUDGETED_INPUT`].
struct InputBudget {
    budget: crate::admission::BufferBudget,
    held: Vec<crate::admission::Reservation>,
    reserved: usize,
}

impl InputBudget {
    fn new(budget: crate::admission::BufferBudget) -> InputBudget {
        InputBudget {
            budget,
            held: Vec::new(),
            reserved: 0,
        }
    }

    /// Makes sure an input buffer of `capacity` bytes is covered; false when the budget cannot
    /// cover it now.
    fn cover(&mut self, capacity: usize) -> bool {
        let needed = capacity.saturating_sub(UNBUDGETED_INPUT);
        if needed <= self.reserved {
            return true;
        }
        match self.budget.try_reserve((needed - self.reserved) as u64, "resp_request") {
            Some(reservation) => {
                self.held.push(reservation);
                self.reserved = needed;
                true
            }
            None => false,
        }
    }

    /// Gives the budget back once the buffer is within the allowance again.
    fn release_beyond(&mut self, capacity: usize) {
        if capacity <= UNBUDGETED_INPUT {
            self.held.clear();
            self.reserved = 0;
        }
    }
}

fn is_subscription(name: &str) -> bool {
    matches!(
        name,
        "subscribe" | "psubscribe" | "ssubscribe" | "unsubscribe" | "punsubscribe" | "sunsubscribe"
    )
}

/// Subscriptions end with the connection, however it ends.
impl Drop for Connection {
    fn drop(&mut self) {
        self.unsubscribe_all();
    }
}

impl Connection {
    /// SUBSCRIBE and its kin: one reply per channel or pattern, as Redis sends them.
    fn subscription(&mut self, name: &'static str, targets: &[Bytes], out: &mut BytesMut) {
        let pubsub = Arc::clone(&self.server.pubsub);
        let id = self.id();
        let subscribing = matches!(name, "subscribe" | "psubscribe" | "ssubscribe");
        if subscribing && self.server.replica.is_standby() {
            self.emit(Reply::error(STANDBY_PUBSUB), out);
            return;
        }
        // Confirmations are pushes (in RESP2 too): sent whatever CLIENT REPLY says, as
        // redis-server 7.0 sends them; the command still uses up a SKIP.
        if self.reply_mode == ReplyMode::SkipNext {
            self.reply_mode = ReplyMode::On;
        }
        let shard = matches!(name, "ssubscribe" | "sunsubscribe");
        let mailbox = Arc::clone(self.mailbox.get_or_insert_with(Arc::default));
        let all: Vec<Bytes>;
        let targets = match targets {
            [] if !subscribing => {
                all = match name {
                    "unsubscribe" => self.channels.iter().cloned().collect(),
                    "punsubscribe" => self.patterns.iter().cloned().collect(),
                    _ => self.shard_channels.iter().cloned().collect(),
                };
                if all.is_empty() {
                    // Redis's answer names no channel and counts what is left.
                    let count = match shard {
                        true => self.shard_channels.len(),
                        false => self.channels.len() + self.patterns.len(),
                    };
                    Reply::Push(vec![Reply::text(name), Reply::Nil, Reply::Integer(count as i64)])
                        .encode(self.resp3, out);
                    return;
                }
                &all[..]
            }
            targets => targets,
        };
        let limits = pubsub.limits;
        for target in targets {
            if subscribing && !self.has_subscription(name, target) {
                if self.channels.len() + self.patterns.len() + self.shard_channels.len() >= limits.max_subscriptions {
                    self.emit(
                        Reply::error(format!(
                            "ERR max number of subscriptions per connection reached ({}, --resp-max-subscriptions)",
                            limits.max_subscriptions
                        )),
                        out,
                    );
                    continue;
                }
                if name == "psubscribe" && target.len() > limits.max_pattern {
                    self.emit(
                        Reply::error(format!(
                            "ERR pattern longer than {} bytes (--resp-max-pattern)",
                            limits.max_pattern
                        )),
                        out,
                    );
                    continue;
                }
            }
            match name {
                "subscribe" if self.channels.insert(target.clone()) => pubsub.subscribe(false, target, id, &mailbox),
                "ssubscribe" if self.shard_channels.insert(target.clone()) => {
                    pubsub.subscribe(true, target, id, &mailbox)
                }
                "psubscribe" if self.patterns.insert(target.clone()) => pubsub.psubscribe(target, id, &mailbox),
                "unsubscribe" if self.channels.remove(target) => pubsub.unsubscribe(false, target, id),
                "sunsubscribe" if self.shard_channels.remove(target) => pubsub.unsubscribe(true, target, id),
                "punsubscribe" if self.patterns.remove(target) => pubsub.punsubscribe(target, id),
                _ => {}
            }
            let count = if shard {
                self.shard_channels.len()
            } else {
                self.channels.len() + self.patterns.len()
            };
            Reply::Push(vec![
                Reply::text(name),
                Reply::Bulk(target.clone()),
                Reply::Integer(count as i64),
            ])
            .encode(self.resp3, out);
        }
        if !self.subscribed() {
            // Messages that came before the last unsubscription are not for it any more.
            self.mailbox = None;
        }
        let counts = [self.channels.len(), self.patterns.len(), self.shard_channels.len()];
        self.set_client(|info| info.subscriptions = counts);
    }

    fn has_subscription(&self, name: &str, target: &Bytes) -> bool {
        match name {
            "subscribe" => self.channels.contains(target),
            "psubscribe" => self.patterns.contains(target),
            _ => self.shard_channels.contains(target),
        }
    }

    fn unsubscribe_all(&mut self) {
        let pubsub = &self.server.pubsub;
        let id = self.registration.id();
        for channel in self.channels.drain() {
            pubsub.unsubscribe(false, &channel, id);
        }
        for channel in self.shard_channels.drain() {
            pubsub.unsubscribe(true, &channel, id);
        }
        for pattern in self.patterns.drain() {
            pubsub.punsubscribe(&pattern, id);
        }
        self.mailbox = None;
    }

    /// PUBSUB CHANNELS / NUMSUB / NUMPAT / SHARDCHANNELS / SHARDNUMSUB: this gateway's
    /// subscribers (those of other gateways are not known here).
    fn pubsub_introspection(&self, args: &[Bytes]) -> Reply {
        let pubsub = &self.server.pubsub;
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        match (sub.as_str(), &args[2..]) {
            ("channels" | "shardchannels", [] | [_]) => Reply::Array(
                pubsub
                    .channels(sub == "shardchannels", args.get(2).map(|pattern| &pattern[..]))
                    .into_iter()
                    .map(Reply::Bulk)
                    .collect(),
            ),
            ("numsub" | "shardnumsub", channels) => Reply::Array(
                channels
                    .iter()
                    .flat_map(|channel| {
                        [
                            Reply::Bulk(channel.clone()),
                            Reply::Integer(pubsub.numsub(sub == "shardnumsub", channel)),
                        ]
                    })
                    .collect(),
            ),
            ("numpat", []) => Reply::Integer(pubsub.numpat()),
            ("help", []) => Reply::Array(
                [
                    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "CHANNELS [<pattern>]",
                    "NUMPAT",
                    "NUMSUB [<channel> ...]",
                    "SHARDCHANNELS [<pattern>]",
                    "SHARDNUMSUB [<channel> ...]",
                    "HELP",
                ]
                .into_iter()
                .map(|line| Reply::Status(line.to_owned()))
                .collect(),
            ),
            _ => Reply::error(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
                String::from_utf8_lossy(&args[1])
            )),
        }
    }
}
