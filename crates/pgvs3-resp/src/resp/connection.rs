//! One client connection: reads whatever requests have arrived, runs them in order — a run of
//! key reads as one statement, a run of key writes as one transaction — and writes all their
//! replies back in one go.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tracing::Instrument;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::RespServer;
use super::clients::Registration;
use super::codec::{Reply, RequestParser};
use super::command::{self, KeyCommand, Spec, wrong_arity};
use super::commands::pubsub::is_subscription;
use super::commands::transactions::{self, Fingerprint, MultiQueue, Queued, WatchRegistration};
use super::execute::Run;
use super::pubsub::{Audience, Mailbox, Readable};
use crate::bucket::Keyspace;
use crate::http_server::Shutdown;
use crate::store::{Access, CommitSent, Principal, StoreError};

/// Requests taken from the input buffer per batch: bounds the replies held in memory.
const MAX_BATCH: usize = 1024;
/// The input buffer's initial size, and the room it gets when full.
const READ_SIZE: usize = 16 * 1024;
/// Input a connection may buffer without drawing on the buffer budget: ordinary requests and
/// pipelines never reach it.
const UNBUDGETED_INPUT: usize = 1024 * 1024;
/// How long a batch runs on after its client's input ended (a half-closed client still reads
/// the answers) before it is dropped and its statement cancelled as a gone client's.
const EOF_GRACE: std::time::Duration = std::time::Duration::from_secs(2);
/// What a client whose request does not fit the buffer budget gets before the connection is
/// closed (as Redis closes a client beyond its query buffer limit).
const INPUT_OVER_BUDGET: &str =
    "OOM command not allowed: the request does not fit in the server's buffer budget now, retry later";

const READONLY: &str = "READONLY You can't write against a read only replica.";
pub(crate) const BUSY: &str = "BUSY the server is overloaded, try again later";
const NOAUTH: &str = "NOAUTH Authentication required.";
/// AUTH as a user whose channel rules do not allow what the connection listens to: refused
/// (Redis keeps a client's subscriptions across AUTH unchecked; here they would go on in the
/// new user's namespace, beyond its rules).
const SUBSCRIBED_BEYOND_RULES: &str = "NOPERM this user has no permissions to access one of the channels this connection is subscribed to: unsubscribe (or RESET) before AUTH as this user";
pub(crate) const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
/// AUTH with temporary (STS) credentials: refused, they are good only with their session token.
pub(crate) const STS_REFUSED: &str =
    "WRONGPASS temporary (STS) credentials need their session token, which AUTH cannot carry: use a static access key";

pub struct Connection {
    pub(crate) server: Arc<RespServer>,
    /// This client's CLIENT LIST entry and --resp-max-clients slot, freed when the connection
    /// is dropped however its task ends.
    pub(crate) registration: Registration,
    pub(crate) accepted: Instant,
    /// Since when the client has been without AUTH (accept, or its last RESET).
    pub(crate) unauthenticated_since: Instant,
    pub(crate) principal: Option<Principal>,
    /// The ACL user: `default`, or the access key AUTH named; its rules, and the catalog
    /// version they were read at (checked before each batch: see `refresh_user`).
    pub(crate) username: String,
    pub(crate) user: Arc<super::acl::User>,
    pub(crate) acl_version: i64,
    /// How many times ACL DELUSER had deleted the user when the connection signed in: one more
    /// since (here or on another gateway, whatever SETUSER did before or after) closes the
    /// connection, as Redis closes a deleted user's connections. (`default` cannot be deleted.)
    pub(crate) acl_deletions: i64,
    /// The admission slot of the batch running now; a blocked client gives it back while it
    /// waits.
    pub(crate) admitted: Option<crate::admission::Admitted>,
    pub(crate) db: u32,
    pub(crate) resp3: bool,
    pub(crate) multi: Option<MultiQueue>,
    pub(crate) multi_failed: bool,
    /// The EXEC being answered failed as a whole (its transaction cancelled, rolled back or of
    /// unknown outcome): its array of errors is counted as a failed call.
    pub(crate) transaction_failed: bool,
    pub(crate) watched: Vec<(u32, String, Fingerprint)>,
    /// Where `watched` stands in PostgreSQL (store/kv/watch.rs).
    pub(crate) watch_registration: WatchRegistration,
    pub(crate) cursors: HashMap<u64, String>,
    pub(crate) next_cursor: u64,
    pub(crate) quit: bool,
    /// The batch's replies passed `--resp-output-limit`: the connection closes without them.
    pub(crate) over_limit: bool,
    /// The buffer budget the batch's large replies hold until they are written.
    pub(crate) reply_memory: Vec<crate::admission::Reservation>,
    /// CLIENT REPLY: whether replies are sent.
    pub(crate) reply_mode: ReplyMode,
    /// Pub/sub: where this connection's messages wait, once it has subscribed, and what it is
    /// subscribed to (all empty: not in subscribe mode).
    pub(crate) mailbox: Option<Arc<Mailbox>>,
    /// The keyspaces whose events and BCAST invalidations reach this client, as its key's rights
    /// were when last looked at ([`Connection::refresh_readable`]).
    pub(crate) readable: Readable,
    pub(crate) channels: HashSet<Bytes>,
    pub(crate) patterns: HashSet<Bytes>,
    pub(crate) shard_channels: HashSet<Bytes>,
    /// MONITOR: the lines of this gateway's commands waiting for this client.
    pub(crate) monitor: Option<Arc<super::monitor::Feed>>,
    /// CLIENT TRACKING: this connection's options, while it tracks (`commands/tracking.rs`).
    pub(crate) tracking: Option<super::commands::tracking::ClientTracking>,
    /// The client is gone (its connection reset, or its input ended `EOF_GRACE` ago, or a
    /// blocked client's input ended): no command of the batch starts any more.
    pub(crate) peer_gone: Arc<AtomicBool>,
    /// Whether the running command's COMMIT went out (store/kv/commit_sent.rs; its writes'
    /// time limits tell it, `deadline.rs`): a gone client's command is dropped (its statement
    /// cancelled) only before.
    pub(crate) commit: CommitSent,
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

/// CLIENT REPLY's modes. SKIP drops its own reply and the next command's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplyMode {
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
            username: "default".into(),
            user: super::acl::unnarrowed(),
            acl_version: i64::MIN,
            acl_deletions: 0,
            admitted: None,
            db: 0,
            resp3: false,
            multi: None,
            multi_failed: false,
            transaction_failed: false,
            watched: Vec::new(),
            watch_registration: Default::default(),
            cursors: HashMap::new(),
            next_cursor: 1,
            quit: false,
            over_limit: false,
            reply_memory: Vec::new(),
            reply_mode: ReplyMode::On,
            mailbox: None,
            readable: Readable::default(),
            channels: HashSet::new(),
            patterns: HashSet::new(),
            shard_channels: HashSet::new(),
            monitor: None,
            tracking: None,
            peer_gone: Arc::default(),
            commit: CommitSent::default(),
        }
    }

    pub(crate) fn subscribed(&self) -> bool {
        !(self.channels.is_empty() && self.patterns.is_empty() && self.shard_channels.is_empty())
    }

    /// Whether pushes may come to the inbox (pub/sub messages, invalidations).
    fn listening(&self) -> bool {
        self.subscribed() || self.tracking.is_some() || self.resp3
    }

    /// Writes `output`; false when the client is gone, or (a subscriber) let its messages pile
    /// up past `--resp-pubsub-output-limit` while this write waited.
    async fn write_out<S: AsyncWrite + Unpin>(&self, stream: &mut S, output: &[u8]) -> bool {
        let Some(mailbox) = self.mailbox.as_ref().filter(|_| self.listening()) else {
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
        // A keyspace event the client's key may no longer read (its rights changed since the
        // event was queued) is not sent.
        for delivery in mailbox
            .take()
            .into_iter()
            .filter(|delivery| delivery.allowed(&self.readable))
        {
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
        let mut catalog_version = self.server.buckets.catalog().watch_version();
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
            // The parsed requests hold a handle per argument beyond the input's bytes: in the
            // budget too, so that a batch of requests of many (even empty) arguments is.
            let handles: usize = requests
                .iter()
                .map(|args: &Vec<Bytes>| args.len() * size_of::<Bytes>())
                .sum();
            if handles > 0 && !input_budget.cover(input.capacity() + parser.held_bytes() + handles) {
                Reply::error(INPUT_OVER_BUDGET).encode(self.resp3, &mut output);
                if stream.write_all(&output).await.is_ok() {
                    close_after_error(&mut stream).await;
                }
                break;
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
                let mailbox = self.mailbox.clone().filter(|_| self.listening());
                let mail = async {
                    match &mailbox {
                        Some(mailbox) => mailbox.arrived().await,
                        None => std::future::pending().await,
                    }
                };
                let principal = self.principal.is_some();
                let catalog_moved = async {
                    match principal {
                        true => catalog_version.changed().await.ok(),
                        false => std::future::pending().await,
                    }
                };
                let monitor = self.monitor.clone();
                let monitored = async {
                    match &monitor {
                        Some(feed) => feed.arrived().await,
                        None => std::future::pending().await,
                    }
                };
                let read = tokio::select! {
                    read = read => read,
                    // A monitor that fell behind past its limit is closed (see monitor.rs).
                    () = monitored => {
                        let Some(feed) = monitor else { continue };
                        if !write_monitored(&mut stream, &feed, &mut output).await {
                            break;
                        }
                        continue;
                    }
                    () = mail => {
                        // Rights judged as the catalog stands now, before anything is sent.
                        if !self.follow_catalog().await {
                            break;
                        }
                        if !self.take_mail(&mut output) || !self.write_out(&mut stream, &output).await {
                            break;
                        }
                        output.clear();
                        continue;
                    }
                    // Idle (a subscriber often is): the catalog's changes apply at once.
                    Some(()) = catalog_moved => {
                        if !self.follow_catalog().await {
                            break;
                        }
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
                let admitted = match requests.iter().all(|args| allowed_busy(args)) {
                    true => Ok(None),
                    false => self.server.admission.admit().await.map(Some),
                };
                match admitted {
                    Ok(admitted) => {
                        self.admitted = admitted;
                        let span = self.batch_span(&requests);
                        let blocks = requests.iter().any(|args| is_blocking(args));
                        // Meanwhile the client's further input is buffered, and its going
                        // away ends the batch: the commands that have not started never do
                        // (`handle` looks before each), and the running one is dropped, its
                        // statement cancelled, so a disconnected client holds no backend;
                        // unless its COMMIT went out: then its outcome is waited for, so that
                        // what follows a commit (this gateway's tracking clients told of its
                        // keys) is never cut. A reset is gone at once; an end of input (which
                        // may be a half-close: `nc -N`, socat) gives the batch `EOF_GRACE`
                        // first, as Redis runs the commands it read before the EOF and still
                        // answers them. A blocked client is gone at EOF (as Redis frees it)
                        // and at shutdown.
                        let ended = {
                            let (gone, commit) = (Arc::clone(&self.peer_gone), self.commit.clone());
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
                                let waiting = !gone.load(Ordering::Relaxed);
                                tokio::select! {
                                    biased;
                                    () = &mut handling => break gone.load(Ordering::Relaxed),
                                    read = stream.read_buf(&mut input), if waiting && input_ended.is_none() && input.len() < UNBUDGETED_INPUT => {
                                        match read {
                                            Ok(0) if !blocks => {
                                                input_ended = Some(tokio::time::Instant::now() + EOF_GRACE);
                                            }
                                            Ok(0) | Err(_) => gone.store(true, Ordering::Relaxed),
                                            Ok(_) => {}
                                        }
                                    }
                                    () = grace_over, if waiting => gone.store(true, Ordering::Relaxed),
                                    _ = shutdown.wait(), if waiting && blocks => gone.store(true, Ordering::Relaxed),
                                }
                                if gone.load(Ordering::Relaxed) && !commit.is_sent() {
                                    break true;
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
            // A subscriber's messages that came meanwhile go after the replies, unless its
            // rights changed meanwhile so that it closes (after the replies).
            let closing = self.quit || !self.follow_catalog().await;
            self.quit = closing;
            if !(closing || self.take_mail(&mut output)) || !self.write_out(&mut stream, &output).await {
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

    pub(crate) fn id(&self) -> u64 {
        self.registration.id()
    }

    /// This client's address, as MONITOR shows it.
    fn addr(&self) -> String {
        self.server
            .clients
            .addr(self.id())
            .map_or_else(String::new, |addr| addr.to_string())
    }

    /// This client's CLIENT LIST line, for ACL LOG.
    pub(crate) fn client_info(&self) -> String {
        self.server
            .clients
            .line(self.id())
            .map(|line| line.trim_end().to_owned())
            .unwrap_or_default()
    }

    /// Reads the user's rules again after the catalog version moved (an ACL change here or on
    /// another gateway, or a key's), and its key: false when the key is gone or disabled, or
    /// the user was deleted since the connection signed in (ACL DELUSER: Redis closes a deleted
    /// user's connections; here the user would otherwise go on with all its key may do, or with
    /// the rules of the user made again under its name). A database that does not answer keeps
    /// the rules known, to be read again next time.
    async fn refresh_user(&mut self) -> bool {
        let catalog = self.server.buckets.catalog();
        if self.username != "default" {
            match catalog.access_key(&self.username).await {
                Ok(Some(key)) => self.principal = Some(key.principal()),
                Ok(None) => return false,
                Err(_) => return true,
            }
        }
        match self.server.acl.stored(catalog, &self.username).await {
            Ok((stored, _)) if stored.deletions != self.acl_deletions => false,
            Ok((stored, version)) => {
                self.user = stored.rules.unwrap_or_else(super::acl::unnarrowed);
                self.acl_version = version;
                true
            }
            Err(_) => true,
        }
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
        // The last command's spec (none: unknown) and first argument, named at the end.
        let mut last: Option<(Option<&'static Spec>, Option<Bytes>)> = None;
        for args in requests {
            if self.quit || self.over_limit || self.peer_gone.load(Ordering::Relaxed) {
                break;
            }
            self.commit.clear();
            // Each command is checked against the rules as they stand when it comes, as Redis
            // checks it against its user's present rules (a comparison while the catalog
            // version stays). Its access key deleted or disabled, its rules dropped (ACL
            // DELUSER), or a channel it listens to revoked: the commands before were answered,
            // this one and the rest are not, and the connection closes, as Redis closes the
            // connections of a deleted user.
            if !Box::pin(self.follow_catalog()).await {
                self.quit = true;
                break;
            }
            // The parser never yields an empty request; nothing to answer if one came.
            let Some(name) = args.first() else { continue };
            let name = String::from_utf8_lossy(name).to_ascii_lowercase();
            let spec = command::lookup(&name);
            last = Some((spec, args.get(1).cloned()));
            if self.tracking.is_some() {
                self.tracking_command_starts(&name);
            }
            let key_command = match self.admit(&name, spec, &args) {
                Err(Refusal::Before(reply)) => {
                    self.flush(&mut run, out).await;
                    self.reject(spec, reply, out);
                    continue;
                }
                // Bad arguments: as in Redis, a call that failed (not one refused before it ran);
                // inside MULTI it is queued, and its error is its part of EXEC's reply.
                Err(Refusal::Arguments(reply)) => {
                    let spec = spec.expect("parsed commands are known");
                    if self.multi.is_some() && queues_in_multi(spec) {
                        if refused_by_lookup(&reply) {
                            // Redis finds these in its command table, before queueing.
                            self.multi_failed = true;
                            self.reject(Some(spec), reply, out);
                        } else {
                            self.queue(
                                Queued::Failed(reply, spec),
                                (request_size(&args), args.len()),
                                spec,
                                out,
                            );
                        }
                    } else {
                        self.flush(&mut run, out).await;
                        self.finish(spec, Duration::ZERO, reply, out);
                    }
                    continue;
                }
                Ok(admitted) => admitted,
            };
            let spec = spec.expect("admitted commands are known");
            self.server.monitors.feed(spec, self.db, || self.addr(), &args);
            if self.server.pause.active() && !self.passes_pause(spec, &args) {
                self.flush(&mut run, out).await;
                if let Err(reply) = self.wait_out_pause(spec).await {
                    self.reject(Some(spec), reply, out);
                    continue;
                }
            }
            if self.tracking.is_some() {
                self.remember_reads(spec, key_command.as_ref());
            }
            if self.multi.is_some() && queues_in_multi(spec) {
                let size = (request_size(&args), args.len());
                let queued = match key_command {
                    Some(command) => Queued::Key(command, spec),
                    None => match transactions::refusal(spec, &args, self.server.settings.databases.len()) {
                        Some(reply) => {
                            self.multi_failed = true;
                            self.reject(Some(spec), reply, out);
                            continue;
                        }
                        None => Queued::Other(args, spec),
                    },
                };
                self.queue(queued, size, spec, out);
                continue;
            }
            match key_command {
                Some(KeyCommand::Typed(typed)) if typed.blocking.is_some() => {
                    self.flush(&mut run, out).await;
                    let started = Instant::now();
                    let reply = self.block(&typed, spec).await;
                    self.set_client(|info| info.blocked = None);
                    self.finish(spec, started.elapsed(), reply, out);
                }
                Some(command) => {
                    if !run.scripts.is_empty() {
                        self.flush(&mut run, out).await;
                    }
                    run.write |= spec.is_write();
                    run.commands.push((command, spec));
                }
                // A client's consecutive scripts run in one batch (execute.rs), unless it
                // tracks keys: what a script reads is remembered as it runs, by the options of
                // the command that ran it.
                None if runs_pipelined(spec) && self.tracking.is_none() => {
                    if !run.commands.is_empty() {
                        self.flush(&mut run, out).await;
                    }
                    match self.pipelined_script(spec, &args).await {
                        Ok(step) => run.scripts.push((step, spec)),
                        Err(reply) => {
                            self.flush(&mut run, out).await;
                            self.finish(spec, Duration::ZERO, reply, out);
                        }
                    }
                    if run.scripts.len() >= super::execute::MAX_PIPELINED_SCRIPTS {
                        self.flush(&mut run, out).await;
                    }
                }
                None if is_subscription(spec.name) => {
                    self.flush(&mut run, out).await;
                    if matches!(spec.name, "subscribe" | "psubscribe" | "ssubscribe") {
                        self.refresh_readable().await;
                    }
                    let started = Instant::now();
                    self.subscription(spec.name, &args[1..], out);
                    self.count(spec, started.elapsed(), &Reply::OK);
                }
                None => {
                    self.flush(&mut run, out).await;
                    // What CLIENT LIST and CLIENT INFO show of the client running them (only
                    // CLIENT's own calls: the registry's lock is the gateway's, shared by all).
                    if spec.name == "client" {
                        let (full_name, bytes) = (spec.full_name(args.get(1).map(|sub| &sub[..])), encoded_size(&args));
                        self.set_client(|info| {
                            info.last_command = full_name;
                            info.query_bytes = bytes;
                        });
                    }
                    let started = Instant::now();
                    let reply = Box::pin(self.other_command(spec, &args)).await;
                    self.finish(spec, started.elapsed(), reply, out);
                }
            }
        }
        self.flush(&mut run, out).await;
        let (db, resp) = (self.db, if self.resp3 { 3 } else { 2 });
        let queued = self.multi.as_ref().map_or(-1, |multi| multi.commands.len() as i64);
        let last_command = last.map(|(spec, sub)| match spec {
            Some(spec) => spec.full_name(sub.as_deref()),
            None => "unknown".to_owned(),
        });
        self.set_client(|info| {
            info.last_active = Instant::now();
            if let Some(last_command) = last_command {
                info.last_command = last_command;
            }
            info.query_bytes = 0;
            info.db = db;
            info.resp = resp;
            info.queued = queued;
        });
    }

    /// Queues a command inside MULTI (answering QUEUED), or refuses it when the queue is full,
    /// which fails the transaction. `(bytes, args)`: what its request holds ([`request_size`])
    /// and its count of arguments.
    fn queue(&mut self, queued: Queued, (bytes, args): (usize, usize), spec: &'static Spec, out: &mut BytesMut) {
        let pushed = self.multi.as_mut().map(|multi| multi.push(queued, bytes, args));
        match pushed {
            Some(Err(reply)) => {
                self.multi_failed = true;
                self.reject(Some(spec), reply, out);
            }
            _ => self.emit(Reply::Simple("QUEUED"), out),
        }
    }

    /// Waits while CLIENT PAUSE holds `spec` (every command with ALL; with WRITE, those that
    /// may write: write commands, EVAL/EVALSHA, PUBLISH, EXEC), without the batch's admission
    /// slot, so that a paused client keeps no other from being served.
    async fn wait_out_pause(&mut self, spec: &'static Spec) -> Result<(), Reply> {
        let writes = spec.is_write()
            || matches!(
                spec.name,
                "eval" | "evalsha" | "fcall" | "publish" | "spublish" | "exec"
            );
        self.admitted = None;
        self.server.pause.wait(writes).await;
        self.admitted = Some(
            self.server
                .admission
                .admit_again()
                .await
                .map_err(|_| Reply::error(BUSY))?,
        );
        Ok(())
    }

    /// Checks what every command needs before it runs (known, arity, auth, writable, parsable)
    /// and parses key commands. A refusal before it runs marks an open MULTI as failed, as in
    /// Redis (EXEC answers EXECABORT); bad arguments do not (Redis finds them when it runs).
    fn admit(
        &mut self,
        name: &str,
        spec: Option<&'static Spec>,
        args: &[Bytes],
    ) -> Result<Option<KeyCommand>, Refusal> {
        let checked = (|| {
            let Some(spec) = spec else {
                return Err(command::unknown_command(args));
            };
            if !spec.arity_ok(args.len()) {
                return Err(wrong_arity(name));
            }
            if self.principal.is_none() && !spec.flags.contains(&"no_auth") {
                return Err(Reply::error(NOAUTH));
            }
            if let Some(Err(denied)) = (!self.user.unrestricted()).then(|| self.user.check(spec, args)) {
                let context = if self.multi.is_some() { "multi" } else { "toplevel" };
                self.server
                    .acl
                    .log_denied(&denied, context, &self.username, self.client_info());
                if spec.name == "exec" {
                    // A refused EXEC discards the transaction, as Redis's `execCommandAbort`.
                    self.multi = None;
                    self.multi_failed = false;
                    self.unwatch_all();
                    let Reply::Error(error) = denied.reply() else {
                        unreachable!("a denial is an error")
                    };
                    return Err(Reply::error(format!(
                        "EXECABORT Transaction discarded because of: {error}"
                    )));
                }
                return Err(denied.reply());
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
            Ok(())
        })();
        match checked {
            Ok(()) => {
                // SORT's own refusal of BY and GET patterns to a user without access to every
                // key comes when it runs, as sort.c's: a failed call, which inside MULTI is
                // queued and answers its part of EXEC's reply, the transaction not failed.
                if let Some(spec) = spec
                    && !self.user.unrestricted()
                {
                    self.user.check_sort(spec, args).map_err(Refusal::Arguments)?;
                }
                let mut command = KeyCommand::parse(name, args).map_err(Refusal::Arguments)?;
                if let Some(command) = command.as_mut() {
                    let databases = &self.server.settings.databases;
                    command
                        .resolve_copy_db(self.db, |db| databases.contains_key(&db))
                        .map_err(Refusal::Arguments)?;
                }
                Ok(command)
            }
            Err(reply) => {
                if self.multi.is_some() {
                    self.multi_failed = true;
                }
                Err(Refusal::Before(reply))
            }
        }
    }

    /// Answers a command that ran, taking `took`.
    pub(crate) fn finish(&mut self, spec: &'static Spec, took: Duration, reply: Reply, out: &mut BytesMut) {
        let transaction_failed = std::mem::take(&mut self.transaction_failed);
        self.count_outcome(spec, took, &reply, transaction_failed);
        self.emit(reply, out);
    }

    /// Answers a command refused before it ran (`None`: one that does not exist): Redis's
    /// `rejected_calls`, which `total_commands_processed` leaves out.
    fn reject(&mut self, spec: Option<&'static Spec>, reply: Reply, out: &mut BytesMut) {
        self.server.stats.rejected(spec, error_text(&reply));
        self.record(spec.map_or("unknown", |spec| spec.name), &reply);
        self.emit(reply, out);
    }

    /// Encodes a reply, unless CLIENT REPLY turned replies off or skips this one. A reply cut
    /// at the output limit, or one that takes the batch's replies past it, ends the connection
    /// (see `close_over_limit`).
    pub(crate) fn emit(&mut self, reply: Reply, out: &mut BytesMut) {
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

    /// Counts a command that ran (INFO's stats and commandstats, the metrics).
    pub(crate) fn count(&self, spec: &'static Spec, took: Duration, reply: &Reply) {
        self.count_outcome(spec, took, reply, false);
    }

    /// `transaction_failed`: an EXEC whose transaction failed as a whole, whose array of errors
    /// counts as a failed call (its errors under `ERR` in errorstats).
    fn count_outcome(&self, spec: &'static Spec, took: Duration, reply: &Reply, transaction_failed: bool) {
        let error = match reply.is_error() {
            true => Some(error_text(reply)),
            false => transaction_failed.then_some("ERR"),
        };
        self.server.stats.called(spec, took, error);
        self.record_status(spec.name, error.is_some());
    }

    /// The request metric and the batch span's status of one reply.
    fn record(&self, operation: &str, reply: &Reply) {
        self.record_status(operation, reply.is_error());
    }

    fn record_status(&self, operation: &str, failed: bool) {
        let status = if failed { "error" } else { "ok" };
        if failed {
            failed_span();
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

    /// The key this connection acts as: whose tenant its scripts, functions and clients are.
    pub(crate) fn principal(&self) -> &Principal {
        self.principal.as_ref().expect("authenticated before any key command")
    }

    /// Whether this connection acts as the root (admin) key: the one that may run what acts on
    /// the whole gateway or on every tenant (CLIENT PAUSE, MONITOR, ACL's users, ...).
    pub(crate) fn is_root(&self) -> bool {
        self.principal.as_ref().is_some_and(|principal| principal.is_root)
    }

    /// Refuses `command` (`monitor`, `client|pause`) to any key but the root key, with Redis's
    /// NOPERM text.
    pub(crate) fn root_only(&self, command: &str) -> Result<(), Reply> {
        match self.is_root() {
            true => Ok(()),
            false => Err(Reply::error(format!(
                "NOPERM this user has no permissions to run the '{command}' command"
            ))),
        }
    }

    /// The clients this connection may see and act on (CLIENT LIST, KILL, UNBLOCK): every one
    /// for the root key (`None`), else those of its own user, so that no tenant lists or closes
    /// another's connections.
    pub(crate) fn own_clients(&self) -> Option<&str> {
        (!self.is_root()).then_some(self.username.as_str())
    }

    /// Database `db` as a keyspace this connection may use as `access` says: its one
    /// authorization for a batch.
    pub(crate) async fn keyspace_of(&self, db: u32, access: Access) -> Result<Keyspace, Reply> {
        let bucket = &self.server.settings.databases[&db];
        self.server
            .buckets
            .open(self.principal(), bucket, access)
            .await
            .and_then(|bucket| bucket.keyspace())
            .map_err(store_error)
    }

    pub(crate) async fn keyspace(&self, access: Access) -> Result<Keyspace, Reply> {
        self.keyspace_of(self.db, access).await
    }

    /// Looks again at which keyspaces this connection's key may read (every one for the root
    /// key), for the keyspace events and invalidations it gets from now on: before it
    /// subscribes, turns tracking on, or signs in as another key.
    pub(crate) async fn refresh_readable(&mut self) {
        let readable = match self.principal.as_ref() {
            Some(principal) if principal.is_root => Readable::All,
            Some(_) => {
                let mut buckets = Vec::new();
                for db in self.server.settings.databases.keys() {
                    if let Ok(keyspace) = self.keyspace_of(*db, Access::Read).await {
                        buckets.push(keyspace.bucket().to_owned());
                    }
                }
                Readable::Buckets(Arc::new(buckets))
            }
            None => Readable::default(),
        };
        self.readable = readable;
        if let Some(mailbox) = &self.mailbox {
            mailbox.set_audience(self.audience());
        }
    }

    /// Whose messages this client gets (see [`Audience`]).
    pub(crate) fn audience(&self) -> Audience {
        Audience {
            readable: self.readable.clone(),
            namespace: self.channel_namespace(),
        }
    }

    /// The namespace of this connection's plain and shard channels: the root key's (empty: the
    /// names as given) or its own access key's, so that no tenant hears or counts another's
    /// messages (docs/resp-compatibility.md, Tenancy).
    pub(crate) fn channel_namespace(&self) -> Bytes {
        match self.principal {
            Some(_) if !self.is_root() => Bytes::copy_from_slice(self.username.as_bytes()),
            _ => Bytes::new(),
        }
    }

    /// After the catalog version moved (a key's, a bucket's or ACL rules' change, here or on
    /// another gateway), at the connection's next command or message, or at once while it
    /// waits: its user's rules and key again, the keyspaces whose events and invalidations it
    /// gets, and its subscriptions against its channel rules. False when it must close: its
    /// key is gone or disabled, or it listens to a channel or pattern its rules no longer
    /// allow (Redis disconnects such a subscriber). Costs nothing while the version stays.
    pub(crate) async fn follow_catalog(&mut self) -> bool {
        if self.principal.is_none() || self.acl_version == self.server.buckets.catalog().version() {
            return true;
        }
        if !self.refresh_user().await {
            return false;
        }
        self.refresh_rights().await;
        self.keeps_subscriptions(&self.user).is_ok()
    }

    /// Looks again at what the connection's deliveries may carry: the keyspaces whose events
    /// and invalidations it gets, and whose connections its tracking's REDIRECT may reach.
    async fn refresh_rights(&mut self) {
        self.refresh_readable().await;
        if self.tracking.is_some() {
            let owner = self.own_clients().map(str::to_owned);
            self.server
                .pubsub
                .tracking
                .set_rights(self.id(), self.readable.clone(), owner);
        }
    }

    /// Whether this connection's subscriptions may go on under `rules` (its user's after a
    /// change, or those of the user AUTH signs in as), as SUBSCRIBE, SSUBSCRIBE and PSUBSCRIBE
    /// would judge them.
    pub(crate) fn keeps_subscriptions(&self, rules: &super::acl::User) -> Result<(), Reply> {
        match rules.unrestricted() || rules.may_listen(&self.channels, &self.shard_channels, &self.patterns) {
            true => Ok(()),
            false => Err(Reply::error(SUBSCRIBED_BEYOND_RULES)),
        }
    }

    /// After AUTH (or HELLO's AUTH) signed this connection in, `tenant` the channel namespace
    /// it had before. As in Redis, its subscriptions and tracking go on; what they deliver is
    /// the new user's: its subscriptions are in its namespace (a channel name is per tenant,
    /// and the names stay the client's), its events and invalidations are of what its key may
    /// read, its REDIRECT must be one of its connections (else it is broken, as if that client
    /// were gone), and a client of its tracking redirected to this one that is not its own
    /// gets nothing more here (tracking.rs looks at the owner at each invalidation). A tracking
    /// client that became another tenant forgets the keys it read as the other and is told
    /// to drop its whole cache: nothing the other tenant writes reaches it any more.
    pub(crate) async fn signed_in(&mut self, tenant: Bytes) {
        if self.mailbox.is_none() {
            return;
        }
        self.refresh_rights().await;
        if self.tracking.is_some() && tenant != self.channel_namespace() {
            self.server.pubsub.tracking.forget(self.id());
        }
    }
}

impl Connection {
    /// What runs during a CLIENT PAUSE ALL, unlike in Redis: AUTH (a client can always sign in,
    /// as the root key, to end the pause) and the root key's CLIENT UNPAUSE, so that no pause
    /// holds the gateway until it ends.
    fn passes_pause(&self, spec: &Spec, args: &[Bytes]) -> bool {
        spec.name == "auth"
            || (spec.name == "client"
                && args.get(1).is_some_and(|sub| sub.eq_ignore_ascii_case(b"unpause"))
                && self.is_root())
    }
}

/// Why `admit` did not let a command run: Redis counts the two apart (INFO commandstats'
/// `rejected_calls` and `failed_calls`).
enum Refusal {
    /// Unknown, wrong arity, not authenticated, not allowed here.
    Before(Reply),
    /// Its arguments do not parse.
    Arguments(Reply),
}

/// Whether `spec` is queued inside MULTI rather than run (the commands that shape the
/// transaction itself run at once).
/// The scripts a client's pipeline runs in one batch: EVAL, EVALSHA, FCALL and their
/// read-only forms.
fn runs_pipelined(spec: &Spec) -> bool {
    matches!(
        spec.name,
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro"
    )
}

fn queues_in_multi(spec: &Spec) -> bool {
    !matches!(spec.name, "exec" | "discard" | "multi" | "watch" | "quit" | "reset")
}

/// An unknown subcommand or a subcommand's wrong arity, which the parsers of container
/// commands (OBJECT, MEMORY, ...) find: Redis's command lookup refuses them before the command
/// runs, so inside MULTI they fail the transaction.
fn refused_by_lookup(reply: &Reply) -> bool {
    matches!(reply, Reply::Error(error)
        if error.starts_with("ERR unknown subcommand") || error.starts_with("ERR wrong number of arguments"))
}

/// What a request's arguments hold in memory: their bytes and each one's handle (an empty
/// argument costs its handle, so a request of a million empty ones is 32 MB, not 0).
/// An error reply's text (`ERR ...`); empty for other replies.
fn error_text(reply: &Reply) -> &str {
    match reply {
        Reply::Error(text) => text,
        _ => "",
    }
}

/// A request's size as RESP sends it (`*<n>`, then `$<len>` and the bytes of each argument).
fn encoded_size(args: &[Bytes]) -> usize {
    let header = |count: usize| count.to_string().len() + 3;
    header(args.len()) + args.iter().map(|arg| header(arg.len()) + arg.len() + 2).sum::<usize>()
}

fn request_size(args: &[Bytes]) -> usize {
    args.iter().map(|arg| arg.len() + size_of::<Bytes>()).sum()
}

/// AUTH and HELLO are answered without an admission slot, never `BUSY`: Redis flags them
/// `allow_busy` (served while a script keeps the server busy), and a client whose AUTH fails
/// gives up connecting, often reporting wrong credentials, which would turn an overload into
/// an outage for every new connection. Their work is a (cached) key lookup, and connections are
/// bounded by `--resp-max-clients` and, before AUTH, by the small request limits.
fn allowed_busy(args: &[Bytes]) -> bool {
    args.first()
        .is_some_and(|name| name.eq_ignore_ascii_case(b"auth") || name.eq_ignore_ascii_case(b"hello"))
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

/// Store failures as Redis error texts.
pub(crate) fn store_error(err: StoreError) -> Reply {
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
        StoreError::CommitUnknown(why) => {
            failed_span();
            tracing::warn!(error = %why, "RESP write's outcome unknown: the connection was lost after COMMIT");
            super::deadline::outcome_unknown("the connection to the database was lost before its answer")
        }
        other => {
            failed_span();
            tracing::warn!(error = %other, "RESP command failed");
            Reply::error(format!("ERR {other}"))
        }
    }
}

/// Marks the batch's span failed: before a failure's log line, which carries the span's status.
fn failed_span() {
    tracing::Span::current().record("status", "error");
}

/// Writes a monitor's waiting lines until none are left; false when the client is gone or fell
/// behind past its limit, also while a write waits for it to read (so a monitor that stops
/// reading is closed, not waited for).
async fn write_monitored<S: AsyncWrite + Unpin>(
    stream: &mut S,
    feed: &super::monitor::Feed,
    output: &mut BytesMut,
) -> bool {
    loop {
        if !feed.take(output) {
            return false;
        }
        if output.is_empty() {
            return true;
        }
        let write = stream.write_all(output);
        futures::pin_mut!(write);
        loop {
            tokio::select! {
                written = &mut write => {
                    if written.is_err() {
                        return false;
                    }
                    break;
                }
                () = feed.arrived() => {
                    if feed.overflowed() {
                        return false;
                    }
                }
            }
        }
        output.clear();
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
pub(crate) struct InputBudget {
    budget: crate::admission::BufferBudget,
    held: Vec<crate::admission::Reservation>,
    reserved: usize,
}

impl InputBudget {
    pub(crate) fn new(budget: crate::admission::BufferBudget) -> InputBudget {
        InputBudget {
            budget,
            held: Vec::new(),
            reserved: 0,
        }
    }

    /// Makes sure an input buffer of `capacity` bytes is covered; false when the budget cannot
    /// cover it now.
    pub(crate) fn cover(&mut self, capacity: usize) -> bool {
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

/// Subscriptions end with the connection, however it ends.
impl Drop for Connection {
    fn drop(&mut self) {
        self.stop_tracking();
        self.unsubscribe_all();
        self.unwatch_all();
    }
}
