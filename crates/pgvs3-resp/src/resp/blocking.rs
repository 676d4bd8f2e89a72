//! Blocking pops (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BZPOPMIN, BZPOPMAX) and XREAD/XREADGROUP
//! BLOCK: a blocked client tries its command, then waits to be told that one of its keys got
//! elements — on any gateway of the database, by NOTIFY `pgvs3_resp` (sent at commit by the SQL
//! functions that add elements), which one LISTEN connection per gateway hands to the clients
//! blocked on that key here. The same connection listens to `pgvs3_pubsub` for pub/sub
//! (pubsub.rs); PUBLISH goes out on a pooled connection.
//!
//! Pops are served in turn, as Redis serves the clients blocked on a key: a notification wakes
//! the longest-waiting one, which, once served (or having found nothing), wakes the next; so two
//! clients blocked on one key are served in the order they blocked, each from what the other
//! left (type/list's and type/zset's `BLMPOP/BZMPOP with multiple blocked clients`). Readers of
//! streams (XREAD, XREADGROUP) take nothing from one another and are all woken at once. The
//! order is this gateway's: clients blocked on other gateways race with them.
//!
//! A notification is what wakes a blocked client while the LISTEN connection works: a key
//! getting elements or being made (RENAME, COPY, RESTORE, a STORE; functions/resp_keys.sql
//! `resp_key_ready`) sends one. Its periodic attempt is a fallback for what may have been
//! missed: every `--resp-block-poll` while no LISTEN connection works, and otherwise only
//! after [`LISTENING_RECHECK`] (with jitter, so that thousands of blocked clients do not
//! come back in one burst): idle blocked clients cost the database next to nothing. Losing
//! the connection wakes every blocked client (each then tries at the short interval), and so
//! does opening one again, since notifications in between told nobody. A connection whose
//! server stopped answering (a stopped backend, a path that drops its packets) counts as lost
//! once a round trip on it goes unanswered (`--pg-probe-interval`, `--pg-probe-timeout`): it
//! would otherwise leave blocked clients to their fallback, and this gateway deaf to the
//! others, until TCP gave up.
//!
//! While it waits, a blocked client costs a registration here and its connection's task: no
//! admission slot and no database connection (it takes both again for each attempt), so
//! hundreds of waiting workers leave the gateway to everyone else, as redis-server does. Their
//! number is bounded by `--resp-max-clients`, as Redis's by `maxclients`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::Notify;

use super::codec::Reply;
use super::command::{KeyCommand, Spec, parse_float};
use super::connection::{BUSY, Connection, store_error};
use super::pubsub::PubSub;
use super::typed::Typed;
use crate::pg::connections::{Dedicated, session_settings};
use crate::store::{Access, Family, KeyType, ListOp, StreamOp, TypedRow};

/// How long to wait before opening a lost LISTEN connection again.
const LISTEN_RETRY: Duration = Duration::from_secs(1);
const LISTEN_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a blocked client waits for a notification, while the LISTEN connection works,
/// before it tries again all the same (between three quarters and five quarters of it).
/// Only a safety net: nothing is known to go unnotified.
const LISTENING_RECHECK: Duration = Duration::from_secs(60);

/// The blocked clients of this gateway, by key. (Keys of every bucket: a key of the same name
/// in another database only costs a blocked client one more attempt.)
#[derive(Default)]
pub struct Wakeups {
    blocked: Mutex<Blocked>,
    next_id: AtomicU64,
    /// The LISTEN connection works: notifications wake blocked clients.
    listening: AtomicBool,
}

#[derive(Default)]
struct Blocked {
    /// In the order the clients blocked.
    by_key: HashMap<String, Vec<Registered>>,
    clients: usize,
}

struct Registered {
    id: u64,
    /// A pop, woken in turn; else a stream reader, woken with every notification.
    in_turn: bool,
    woken: Arc<Notify>,
    turn: Arc<AtomicU8>,
}

/// A pop's turn: none, given (woken, not yet tried), taken (an attempt runs).
const IDLE: u8 = 0;
const GIVEN: u8 = 1;
const TAKEN: u8 = 2;

impl Blocked {
    /// Wakes the first client in turn on `key` after the one numbered `after` (from the
    /// first with `None`), and with `after` `None` every stream reader.
    fn wake(&self, key: &str, after: Option<u64>) {
        let Some(waiters) = self.by_key.get(key) else {
            return;
        };
        let start = after.map_or(0, |after| {
            waiters
                .iter()
                .position(|waiter| waiter.id == after)
                .map_or(0, |at| at + 1)
        });
        if after.is_none() {
            for waiter in waiters.iter().filter(|waiter| !waiter.in_turn) {
                waiter.woken.notify_one();
            }
        }
        if let Some(next) = waiters[start..].iter().find(|waiter| waiter.in_turn) {
            next.turn.store(GIVEN, Ordering::Release);
            next.woken.notify_one();
        }
    }
}

/// A blocked client's registration: woken when one of its keys gets elements; gone on drop,
/// however the client's wait ends.
pub struct Waiter {
    wakeups: Arc<Wakeups>,
    id: u64,
    keys: Vec<String>,
    woken: Arc<Notify>,
    turn: Arc<AtomicU8>,
}

impl Waiter {
    /// Returns once one of the keys got elements since the last return (or since the
    /// registration): a wakeup between an attempt and this wait is not lost.
    pub async fn woken(&self) {
        self.woken.notified().await;
    }

    /// Before an attempt: takes the turn if it was given.
    pub fn take_turn(&self) {
        let _ = self
            .turn
            .compare_exchange(GIVEN, TAKEN, Ordering::AcqRel, Ordering::Acquire);
    }

    /// After an attempt that found nothing: hands on a turn it took (the notification may have
    /// been for the same name in another database, or what it told of taken by then by a
    /// client not blocked), keeping one given meanwhile.
    pub fn found_nothing(&self) {
        if self
            .turn
            .compare_exchange(TAKEN, IDLE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.pass_on(&self.wakeups.lock());
        }
    }

    /// After it was served: what it left may serve the next client, whether or not it had the
    /// turn.
    pub fn served(&self) {
        self.turn.store(IDLE, Ordering::Release);
        self.pass_on(&self.wakeups.lock());
    }

    fn pass_on(&self, blocked: &Blocked) {
        for key in &self.keys {
            blocked.wake(key, Some(self.id));
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut blocked = self.wakeups.lock();
        // A turn it had and did not use (its timeout passed, it was killed): the next one's.
        if self.turn.load(Ordering::Acquire) != IDLE {
            self.pass_on(&blocked);
        }
        blocked.clients -= 1;
        for key in &self.keys {
            if let Some(waiters) = blocked.by_key.get_mut(key) {
                waiters.retain(|waiter| waiter.id != self.id);
                if waiters.is_empty() {
                    blocked.by_key.remove(key);
                }
            }
        }
    }
}

impl Wakeups {
    /// Starts the gateway's LISTEN connection (given a database to listen on), re-opened
    /// whenever it is lost. A standby cannot LISTEN, but refuses blocking commands (writes)
    /// anyway.
    pub fn start(database: Option<Dedicated>, pubsub: Arc<PubSub>) -> Arc<Wakeups> {
        let wakeups = Arc::new(Wakeups::default());
        if let Some(database) = database {
            let wakeups = Arc::clone(&wakeups);
            tokio::spawn(async move {
                // Whether a failure was logged since a connection last listened: while the
                // database is away, or is a standby (until promoted), every attempt fails, and
                // saying so once is enough.
                let mut said = false;
                loop {
                    let ended = listen(&database, &wakeups, &pubsub).await;
                    pubsub.set_listener(None);
                    // Nothing tells the blocked clients now: each tries again, then at
                    // `--resp-block-poll` until a connection listens again.
                    if wakeups.listening.swap(false, Ordering::AcqRel) {
                        wakeups.wake_all();
                        said = false;
                    }
                    if let Err(err) = ended {
                        let error = format!("{err:#}");
                        if said {
                            tracing::debug!(error, "RESP LISTEN connection: still reconnecting");
                        } else {
                            tracing::warn!(error, "RESP LISTEN connection lost; reconnecting");
                            said = true;
                        }
                    }
                    tokio::time::sleep(LISTEN_RETRY).await;
                }
            });
        }
        wakeups
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Blocked> {
        self.blocked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a client blocked on `keys`, before its first attempt, so that no wakeup after
    /// that attempt is missed. `in_turn`: a pop, served in turn (see the module's doc).
    pub fn register(self: &Arc<Self>, keys: &[String], in_turn: bool) -> Waiter {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let woken = Arc::new(Notify::new());
        let turn = Arc::new(AtomicU8::new(IDLE));
        let mut keys = keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        let mut blocked = self.lock();
        blocked.clients += 1;
        for key in &keys {
            blocked.by_key.entry(key.clone()).or_default().push(Registered {
                id,
                in_turn,
                woken: Arc::clone(&woken),
                turn: Arc::clone(&turn),
            });
        }
        drop(blocked);
        Waiter {
            wakeups: Arc::clone(self),
            id,
            keys,
            woken,
            turn,
        }
    }

    /// When a client blocked now, having found nothing, tries again unless woken: soon while
    /// no LISTEN connection works (`poll`, `--resp-block-poll`), else after about
    /// [`LISTENING_RECHECK`].
    pub fn recheck_after(&self, poll: Duration) -> Duration {
        if !self.listening.load(Ordering::Acquire) {
            return poll;
        }
        // Three quarters to five quarters of it, drawn per wait.
        let draw = std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), Instant::now());
        let quarters = 3.0 + (draw % 1024) as f64 / 512.0;
        LISTENING_RECHECK.mul_f64(quarters / 4.0).max(poll)
    }

    /// Clients blocked now (INFO's `blocked_clients`).
    pub fn blocked_clients(&self) -> usize {
        self.lock().clients
    }

    /// Wakes the clients blocked on `key`: the first pop in turn, every stream reader.
    fn wake(&self, key: &str) {
        self.lock().wake(key, None);
    }

    /// Wakes every blocked client: notifications may have been missed (a new LISTEN connection).
    fn wake_all(&self) {
        for waiters in self.lock().by_key.values() {
            for waiter in waiters {
                waiter.woken.notify_one();
            }
        }
    }
}

async fn listen(database: &Dedicated, wakeups: &Arc<Wakeups>, pubsub: &PubSub) -> anyhow::Result<()> {
    let (client, mut connection) = tokio::time::timeout(
        LISTEN_CONNECT_TIMEOUT,
        session_settings(&database.config).connect(database.connections.tls()),
    )
    .await
    .map_err(|_| anyhow::anyhow!("no connection within {LISTEN_CONNECT_TIMEOUT:?}"))??;
    let driver_wakeups = Arc::clone(wakeups);
    // Unbounded: the driver must never wait, or the reads of large messages on this same
    // connection would never complete. Payloads are small (under 8,000 bytes).
    let (published, payloads) = tokio::sync::mpsc::unbounded_channel();
    let driver = database.connections.spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            let tokio_postgres::AsyncMessage::Notification(notification) = message? else {
                continue;
            };
            if notification.channel() == "pgvs3_pubsub" {
                let _ = published.send(notification.payload().to_owned());
            } else if let Some((_bucket, key)) = notification.payload().split_once(' ') {
                driver_wakeups.wake(key);
            }
        }
        anyhow::Ok(())
    });
    let stop_driver = driver.abort_handle();
    let client = Arc::new(client);
    let session = async {
        let backend = client
            .query_one("SELECT pg_is_in_recovery() AS standby, pg_backend_pid() AS pid", &[])
            .await?;
        if backend.get::<_, bool>("standby") {
            anyhow::bail!("a standby cannot LISTEN");
        }
        client.batch_execute("LISTEN pgvs3_resp; LISTEN pgvs3_pubsub").await?;
        // Elements added while no connection listened told nobody. Listening first: a client
        // woken here waits long for the next notification.
        wakeups.listening.store(true, Ordering::Release);
        wakeups.wake_all();
        pubsub.set_listener(Some(backend.get("pid")));
        // The keyspaces' tracking marks named the lost connection's backend: marked again,
        // beside the deliveries (a mark may wait long for a lock).
        let remark = async {
            if let Err(err) = pubsub.mark_tracked(true).await {
                tracing::warn!(error = ?err, "CLIENT TRACKING: keyspaces not marked tracked again");
            }
        };
        let dispatch = async {
            tokio::join!(remark, pubsub.dispatch(&client, payloads));
        };
        tokio::select! {
            ended = driver => ended??,
            () = dispatch => {}
        }
        Ok(())
    };
    let ended = tokio::select! {
        ended = session => ended,
        silent = database.liveness.lost(&client) => Err(silent),
    };
    // A server that stopped answering would hold the connection open until TCP gave up, and
    // the statements waiting on it (a tracking mark, a large message's read) with it.
    stop_driver.abort();
    ended
}

/// What a blocked client does when an attempt after its first answers an error.
#[derive(Debug)]
pub enum Retry {
    /// Wait on: nothing it may take is there.
    Wait,
    /// Answer this.
    Answer(Reply),
    /// Try at once again, with the keys that may still serve it.
    Attempt(Typed),
}

/// Redis's reply to XREADGROUP ... BLOCK when its stream is deleted or no longer a stream.
pub const STREAM_GONE: &str = "UNBLOCKED the stream key no longer exists";
/// ... and when its group is destroyed (the stream there).
pub const GROUP_GONE: &str = "NOGROUP the consumer group this client was blocked on no longer exists";

/// Decides what a blocked client does after `error` from an attempt after its first, given
/// what its keys hold now (`None`: nothing, `Some(None)`: a string). Redis serves a blocked
/// client only from a key that, when it is woken, holds the type it waits on (a list for BLPOP,
/// a sorted set for BZPOPMIN, a stream for XREAD): a key another client deleted or made a
/// string meanwhile is no error, the client waits on (and is served by its other keys). Only
/// BLMOVE's destination of the wrong type, once its source has elements, answers WRONGTYPE; and
/// XREADGROUP is unblocked with Redis 7's errors when its stream or group is gone.
pub fn after_error(typed: &Typed, error: &str, holds: impl Fn(&str) -> Option<Option<KeyType>>) -> Retry {
    let answer = || Retry::Answer(Reply::Error(error.to_owned()));
    let wanted = match typed.call.family() {
        Family::List => KeyType::List,
        Family::Zset => KeyType::Zset,
        Family::Stream | Family::StreamGroup => KeyType::Stream,
        _ => return answer(),
    };
    let keys = &typed.call.keys;
    let wrong = |key: &str| holds(key).is_some_and(|kind| kind != Some(wanted));
    if typed.call.family() == Family::StreamGroup {
        if !(error.starts_with("NOGROUP") || error.starts_with("WRONGTYPE")) {
            return answer();
        }
        let streams = keys.iter().all(|key| holds(key) == Some(Some(wanted)));
        return Retry::Answer(Reply::error(if streams { GROUP_GONE } else { STREAM_GONE }));
    }
    if !error.starts_with("WRONGTYPE") {
        return answer();
    }
    if typed.call.is(ListOp::Lmove) {
        // keys: {source, destination}.
        return match (wrong(&keys[0]), keys.iter().any(|key| wrong(key))) {
            (true, _) => Retry::Wait,
            (false, true) => answer(),
            // Changed back meanwhile.
            (false, false) => Retry::Attempt(typed.clone()),
        };
    }
    let kept: Vec<usize> = (0..keys.len()).filter(|at| !wrong(&keys[*at])).collect();
    if kept.is_empty() {
        return Retry::Wait;
    }
    let mut attempt = typed.clone();
    attempt.call.keys = kept.iter().map(|at| keys[*at].clone()).collect();
    if typed.call.is(StreamOp::Xread) {
        // ints: {count, then (mode, ms, seq) per stream}.
        let ints = &typed.call.ints;
        attempt.call.ints = std::iter::once(ints[0])
            .chain(kept.iter().flat_map(|at| ints[1 + 3 * at..4 + 3 * at].iter().copied()))
            .collect();
    }
    Retry::Attempt(attempt)
}

/// A blocking command's timeout in seconds (0: forever), as Redis reads it.
pub fn timeout(arg: &[u8]) -> Result<Option<Duration>, Reply> {
    let seconds = parse_float(arg)
        .filter(|seconds| seconds.is_finite())
        .ok_or_else(|| Reply::error("ERR timeout is not a float or out of range"))?;
    if seconds < 0.0 {
        return Err(Reply::error("ERR timeout is negative"));
    }
    Ok((seconds > 0.0).then(|| Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX)))
}

/// A blocked client's reply to `CLIENT UNBLOCK <id> ERROR`, as Redis's.
const UNBLOCKED: &str = "UNBLOCKED client unblocked via CLIENT UNBLOCK";

impl Connection {
    /// A blocking pop or XREAD BLOCK: tries, and until it finds something or its timeout
    /// passes, waits to be told that one of its keys got elements (or, as a fallback, for
    /// [`Wakeups::recheck_after`]), then tries again. It waits without its admission slot
    /// (and without a database connection), and takes a slot again for each attempt: blocked
    /// clients must not keep the others, among them the one that would push their element,
    /// from being served.
    pub(crate) async fn block(&mut self, typed: &super::typed::Typed, spec: &'static Spec) -> Reply {
        let deadline = typed
            .blocking
            .flatten()
            .and_then(|timeout| Instant::now().checked_add(timeout));
        let in_turn = matches!(typed.call.family(), Family::List | Family::Zset);
        let waiter = self.server.wakeups.register(&typed.call.keys, in_turn);
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
        // Blocked for CLIENT UNBLOCK (which takes it back) from its registration, as INFO's
        // `blocked_clients` counts it: a client that waits for that count and then unblocks it
        // finds it blocked even while its first attempt runs (which then answers as a
        // timeout would, when it found nothing).
        let unblock = std::sync::Arc::new(super::clients::Unblock::default());
        self.set_client(|info| info.blocked = Some(std::sync::Arc::clone(&unblock)));
        loop {
            if self.admitted.is_none() {
                match self.server.admission.admit_again().await {
                    Ok(admitted) => self.admitted = Some(admitted),
                    Err(_) => return Reply::error(BUSY),
                }
            }
            waiter.take_turn();
            let command = [(KeyCommand::Typed(Box::new(attempt)), spec)];
            let reply = match self.execute(&command, spec.is_write(), &[], None).await {
                Ok(mut replies) => replies.pop().unwrap_or(Reply::Nil),
                Err(reply) => reply,
            };
            attempt = typed.clone();
            match reply {
                Reply::Nil | Reply::NilArray => {
                    nothing = Some(reply);
                    checks = 0;
                    waiter.found_nothing();
                }
                // An error after the first attempt: what its keys hold decides (blocking.rs).
                Reply::Error(error) if nothing.is_some() => match self.after_error(&typed, &error).await {
                    Retry::Wait => waiter.found_nothing(),
                    Retry::Answer(reply) => {
                        waiter.served();
                        return reply;
                    }
                    // Bounded: the keys may change under each look.
                    Retry::Attempt(again) if checks < 3 => {
                        checks += 1;
                        attempt = again;
                        continue;
                    }
                    Retry::Attempt(_) => waiter.found_nothing(),
                },
                reply => {
                    waiter.served();
                    return reply;
                }
            }
            let reply = nothing.clone().expect("set by an attempt that found nothing");
            self.admitted = None;
            let poll = Instant::now() + self.server.wakeups.recheck_after(self.server.settings.block_poll);
            let wake_at = deadline.map_or(poll, |deadline| deadline.min(poll));

            tokio::select! {
                () = waiter.woken() => {}
                () = tokio::time::sleep_until(wake_at.into()) => {}
                () = self.registration.killed() => return reply,
                error = unblock.woken() => {
                    return match error {
                        true => Reply::error(UNBLOCKED),
                        false => reply,
                    };
                }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::typed::Shape;
    use crate::store::StreamGroupOp;

    const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

    fn types(strings: &[&'static str]) -> impl Fn(&str) -> Option<Option<KeyType>> {
        move |key| match key {
            key if strings.contains(&key) => Some(None),
            "stream" => Some(Some(KeyType::Stream)),
            _ => None,
        }
    }

    #[test]
    fn a_key_of_another_type_is_passed_over() {
        let keys = |keys: &[&str]| keys.iter().map(|key| key.to_string()).collect::<Vec<_>>();
        let pop = Typed::new(ListOp::Blpop, keys(&["a", "b"]), &[], Shape::BlockPop);
        let Retry::Attempt(attempt) = after_error(&pop, WRONGTYPE, types(&["a"])) else {
            panic!("b may still serve it")
        };
        assert_eq!(attempt.call.keys, ["b"]);
        assert!(matches!(after_error(&pop, WRONGTYPE, types(&["a", "b"])), Retry::Wait));
        // XREAD drops the stream's position with it: {count, (mode, ms, seq) per stream}.
        let read = Typed::new(StreamOp::Xread, keys(&["a", "b"]), &[], Shape::Bulks).ints(&[
            Some(10),
            Some(0),
            Some(1),
            Some(2),
            Some(0),
            Some(3),
            Some(4),
        ]);
        let Retry::Attempt(attempt) = after_error(&read, WRONGTYPE, types(&["a"])) else {
            panic!("b may still serve it")
        };
        assert_eq!(attempt.call.ints, [Some(10), Some(0), Some(3), Some(4)]);
        // BLMOVE: a wrong-typed source waits, a wrong-typed destination answers.
        let lmove = Typed::new(ListOp::Lmove, keys(&["src", "dst"]), &[], Shape::Bulk);
        assert!(matches!(after_error(&lmove, WRONGTYPE, types(&["src"])), Retry::Wait));
        assert!(
            matches!(after_error(&lmove, WRONGTYPE, types(&["dst"])), Retry::Answer(Reply::Error(e)) if e == WRONGTYPE)
        );
    }

    #[test]
    fn xreadgroup_is_unblocked_when_its_stream_or_group_goes() {
        let group = |key: &str| Typed::new(StreamGroupOp::Xreadgroup, vec![key.to_owned()], &[], Shape::Bulks);
        let answer = |retry| match retry {
            Retry::Answer(Reply::Error(text)) => text,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            answer(after_error(&group("stream"), "NOGROUP x", types(&[]))),
            GROUP_GONE
        );
        assert_eq!(
            answer(after_error(&group("gone"), "NOGROUP x", types(&[]))),
            STREAM_GONE
        );
        assert_eq!(answer(after_error(&group("s"), WRONGTYPE, types(&["s"]))), STREAM_GONE);
        assert_eq!(
            answer(after_error(&group("stream"), "ERR other", types(&[]))),
            "ERR other"
        );
    }
}
