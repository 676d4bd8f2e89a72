//! Pub/sub across every gateway of a database: who is subscribed to what on this gateway, and
//! the delivery of published messages to them.
//!
//! PUBLISH calls `pgvs3.resp_publish` (functions/resp_pubsub.sql), which sends NOTIFY
//! `pgvs3_pubsub` with the message inline, or with the id of a `resp_messages` row when it is
//! too large for a NOTIFY payload. It runs on a connection of the gateway's pool, not on the
//! LISTEN connection, so that a large or slow publish holds up no delivery (of messages,
//! keyspace events, invalidations, wakeups) and no other client's publish; one client's
//! publishes still commit, and so arrive, in order, since a connection runs its commands one
//! after another and each PUBLISH answers once committed. Every gateway's LISTEN connection (blocking.rs) hands the
//! payloads here in order; a row is read by id before the payloads after it, so a
//! subscriber sees one publisher's messages in the order they were published. Each subscribed
//! connection has a [`Mailbox`] bounded in bytes: one that would grow beyond
//! `--resp-pubsub-output-limit` is marked overflowed and its connection closes, as Redis closes
//! a pub/sub client past its `client-output-buffer-limit`.
//!
//! Plain and shard channels are per tenant: a channel's name is in the namespace of the
//! publisher's access key, and reaches the subscribers of the same name in the same namespace
//! (the root key's is the names as given, which bucket notifications of its buckets publish
//! to). Keyspace events go to the subscribers of any namespace that may read their keyspace.
//! Matching runs under a read lock: PUBLISH's counts and PUBSUB run beside a delivery, and only
//! (un)subscribing waits for one.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use base64::Engine;
use bytes::Bytes;

use super::codec::Reply;
use super::glob;
use super::notify::{self, KeyspaceEvents};
use super::tracking::Tracking;
use crate::pg::checkout::checkout;

const UNAVAILABLE: &str = "ERR pub/sub is unavailable: this gateway has no LISTEN connection to the database now";

/// A NOTIFY payload must stay under 8,000 bytes; larger messages go by row.
pub(crate) const INLINE_LIMIT: i32 = 7000;
/// How long PUBLISH waits for the LISTEN connection (at startup, or while it is re-opened).
const CONNECTION_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// Kinds of channel, as the first byte of the channel the database carries: the root key's
/// channels (the name follows), and a tenant's (a byte of length, the access key, the name).
const PLAIN: u8 = b'c';
const SHARD: u8 = b's';
const TENANT_PLAIN: u8 = b'C';
const TENANT_SHARD: u8 = b'S';
/// Longest channel name SUBSCRIBE, SSUBSCRIBE, PUBLISH and SPUBLISH take: a keyspace channel of
/// the longest key (1,024 bytes) fits.
pub(crate) const MAX_CHANNEL: usize = 2048;

/// The limits of pub/sub clients, from the command line.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes of messages a subscriber may have waiting before it is disconnected.
    pub output_limit: usize,
    /// Channels, patterns and shard channels one connection may subscribe to.
    pub max_subscriptions: usize,
    /// Longest channel pattern PSUBSCRIBE takes.
    pub max_pattern: usize,
    /// Patterns one connection may subscribe to (every message is matched against each).
    pub max_patterns: usize,
    /// Largest message PUBLISH and SPUBLISH take.
    pub max_message: usize,
}

/// A message for one subscriber.
pub enum Delivery {
    Message {
        shard: bool,
        channel: Bytes,
        message: Bytes,
        /// A keyspace event's keyspace: judged again if the client's rights changed since.
        bucket: Option<Bytes>,
    },
    Pattern {
        pattern: Bytes,
        channel: Bytes,
        message: Bytes,
        bucket: Option<Bytes>,
    },
    /// CLIENT TRACKING's invalidation of keys (`None`: all of them), as a RESP3 push or, to a
    /// RESP2 subscriber it is redirected to, a `message` (tracking.rs).
    Invalidate { keys: Option<Vec<Bytes>>, message: bool },
    /// A tracking client's REDIRECT client is gone (RESP3's `tracking-redir-broken`).
    RedirectBroken(u64),
}

impl Delivery {
    fn size(&self) -> usize {
        match self {
            Delivery::Message { channel, message, .. } => channel.len() + message.len() + 32,
            Delivery::Pattern {
                pattern,
                channel,
                message,
                ..
            } => pattern.len() + channel.len() + message.len() + 40,
            Delivery::Invalidate { keys, .. } => super::tracking::size(keys),
            Delivery::RedirectBroken(_) => 48,
        }
    }

    /// Whether a client that may read `readable` may be sent it.
    pub fn allowed(&self, readable: &Readable) -> bool {
        match self {
            Delivery::Message { bucket, .. } | Delivery::Pattern { bucket, .. } => {
                bucket.as_ref().is_none_or(|bucket| readable.allows(bucket))
            }
            _ => true,
        }
    }

    /// The push frame (a plain array in RESP2) that carries it.
    pub fn reply(self) -> Reply {
        match self {
            Delivery::Message {
                shard,
                channel,
                message,
                ..
            } => Reply::Push(vec![
                Reply::Bulk(Bytes::from_static(if shard { b"smessage" } else { b"message" })),
                Reply::Bulk(channel),
                Reply::Bulk(message),
            ]),
            Delivery::Pattern {
                pattern,
                channel,
                message,
                ..
            } => Reply::Push(vec![
                Reply::Bulk(Bytes::from_static(b"pmessage")),
                Reply::Bulk(pattern),
                Reply::Bulk(channel),
                Reply::Bulk(message),
            ]),
            Delivery::Invalidate { keys, message } => super::tracking::invalidation_reply(keys, message),
            Delivery::RedirectBroken(id) => {
                Reply::Push(vec![Reply::text("tracking-redir-broken"), Reply::Integer(id as i64)])
            }
        }
    }
}

/// The keyspaces (buckets) whose keyspace events and BCAST invalidations a client may get,
/// since they name their keys: every one for the root key, else those its key may read (when it
/// subscribed, turned tracking on or signed in), so that no tenant learns another's key names.
#[derive(Debug, Clone)]
pub enum Readable {
    All,
    Buckets(Arc<Vec<String>>),
}

impl Default for Readable {
    /// None: what a client gets before its key's rights are known.
    fn default() -> Self {
        Readable::Buckets(Arc::default())
    }
}

impl Readable {
    pub fn allows(&self, bucket: &[u8]) -> bool {
        match self {
            Readable::All => true,
            Readable::Buckets(buckets) => buckets.iter().any(|known| known.as_bytes() == bucket),
        }
    }
}

/// Whose messages a client gets: the keyspaces whose events it may read, and the namespace of
/// its plain and shard channels (empty: the root key's).
#[derive(Debug, Clone, Default)]
pub struct Audience {
    pub readable: Readable,
    pub namespace: Bytes,
}

/// What waits for one subscribed connection.
#[derive(Default)]
pub struct Mailbox {
    queue: Mutex<(VecDeque<Delivery>, usize)>,
    overflowed: AtomicBool,
    arrived: tokio::sync::Notify,
    audience: Mutex<Audience>,
}

/// Shown in a client's entry (its size, not its messages).
impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queue = self.queue.lock().expect("mailbox lock");
        f.debug_struct("Mailbox")
            .field("waiting", &queue.0.len())
            .field("bytes", &queue.1)
            .finish()
    }
}

impl Mailbox {
    pub(crate) fn set_audience(&self, audience: Audience) {
        *self.audience.lock().expect("mailbox lock") = audience;
    }

    /// Whether a message for `to` is this client's.
    fn reached_by(&self, to: To) -> bool {
        let audience = self.audience.lock().expect("mailbox lock");
        match to {
            To::Namespace(namespace) => audience.namespace == namespace,
            To::Readers(bucket) => audience.readable.allows(bucket),
        }
    }

    /// Whether the client is in `view` (`None`: every namespace, the root key's view).
    fn in_view(&self, view: Option<&[u8]>) -> bool {
        view.is_none_or(|namespace| self.reached_by(To::Namespace(namespace)))
    }

    pub(crate) fn push(&self, delivery: Delivery, limit: usize) {
        let mut queue = self.queue.lock().expect("mailbox lock");
        let size = delivery.size();
        if queue.1 + size > limit {
            // The connection closes; what it has not read is dropped with it.
            self.overflowed.store(true, Ordering::Relaxed);
            queue.0.clear();
            queue.1 = 0;
        } else {
            queue.0.push_back(delivery);
            queue.1 += size;
        }
        drop(queue);
        self.arrived.notify_one();
    }

    /// Everything waiting, oldest first.
    pub fn take(&self) -> VecDeque<Delivery> {
        let mut queue = self.queue.lock().expect("mailbox lock");
        queue.1 = 0;
        std::mem::take(&mut queue.0)
    }

    pub fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Relaxed)
    }

    /// Returns once something arrived (or the mailbox overflowed) since the last call.
    pub async fn arrived(&self) {
        self.arrived.notified().await
    }
}

type Subscribers = HashMap<u64, Arc<Mailbox>>;

/// Whom a message is for: a namespace's subscribers (a PUBLISH), or those of every namespace
/// that may read a keyspace (its keyspace events).
#[derive(Clone, Copy)]
enum To<'a> {
    Namespace(&'a [u8]),
    Readers(&'a [u8]),
}

/// A channel as the database carries it: its kind, then the name (the root key's), or the
/// namespace's length, the namespace and the name (a tenant's).
fn tagged(shard: bool, namespace: &[u8], channel: &[u8]) -> Vec<u8> {
    let mut tagged = Vec::with_capacity(channel.len() + namespace.len() + 2);
    match (namespace.is_empty(), shard) {
        (true, false) => tagged.push(PLAIN),
        (true, true) => tagged.push(SHARD),
        (false, shard) => {
            tagged.push(if shard { TENANT_SHARD } else { TENANT_PLAIN });
            // Access keys are at most 128 bytes.
            tagged.push(namespace.len() as u8);
            tagged.extend_from_slice(namespace);
        }
    }
    tagged.extend_from_slice(channel);
    tagged
}

#[derive(Default)]
struct Registry {
    /// By kind byte and channel.
    channels: HashMap<(u8, Bytes), Subscribers>,
    patterns: HashMap<Bytes, Subscribers>,
}

/// This gateway's subscriptions, and its connection to publish through.
pub struct PubSub {
    registry: RwLock<Registry>,
    /// The LISTEN connection's backend (its pid), while it is up: CLIENT TRACKING's marks name
    /// it.
    listener: tokio::sync::watch::Sender<Option<i32>>,
    /// The gateway's pool, which PUBLISH and the other messages go out through.
    store: crate::store::Store,
    /// Whether a LISTEN connection was ever up: only one opened after a lost one can have
    /// missed invalidations.
    listened: std::sync::atomic::AtomicBool,
    pub limits: Limits,
    /// Keyspace notifications: each keyspace's setting, which changes come this way too.
    pub events: Arc<KeyspaceEvents>,
    /// This gateway's databases and their buckets: a keyspace's events go to the channels of
    /// each database that maps to its bucket.
    databases: Vec<(u32, String)>,
    /// CLIENT TRACKING's clients and keys: the other gateways' invalidations come this way
    /// (tracking.rs).
    pub tracking: Arc<Tracking>,
}

impl PubSub {
    pub fn new(
        limits: Limits,
        events: Arc<KeyspaceEvents>,
        databases: Vec<(u32, String)>,
        tracking: Arc<Tracking>,
        store: crate::store::Store,
    ) -> PubSub {
        PubSub {
            registry: RwLock::default(),
            listener: tokio::sync::watch::Sender::new(None),
            store,
            listened: std::sync::atomic::AtomicBool::new(false),
            tracking,
            limits,
            events,
            databases,
        }
    }

    const PUBLISH: &str = "SELECT pgvs3.resp_publish($1, $2, $3)";

    pub(super) fn set_listener(&self, listener: Option<i32>) {
        // Lost or opened again: a keyspace's setting may have changed meanwhile, untold, and
        // invalidations may have been missed: tracking clients forget every key. Not at the
        // first opening: a client that turned tracking on before it has read nothing tracked
        // yet (its OK waits for the connection, commands/tracking.rs), and a null invalidation
        // would only empty a cache it was told to keep.
        let first = listener.is_some() && !self.listened.swap(true, std::sync::atomic::Ordering::SeqCst);
        self.events.forget();
        if !first {
            self.tracking.invalidate_all();
        }
        self.listener.send_replace(listener);
    }

    /// The LISTEN connection's backend, waiting for one a while (at startup, or while it is
    /// re-opened).
    async fn listener(&self) -> Option<i32> {
        let mut connection = self.listener.subscribe();
        let up = tokio::time::timeout(CONNECTION_WAIT, connection.wait_for(Option::is_some)).await;
        up.ok().and_then(|up| up.ok().and_then(|up| *up))
    }

    /// Marks this gateway's keyspaces tracked in the database while it has tracking clients,
    /// and unmarks them when it has none (`pgvs3.resp_track`, naming the LISTEN connection's
    /// backend). `again`: the marks are gone with a lost LISTEN connection. On a pooled
    /// connection, not the LISTEN connection: the mark's DDL may wait long for the writers of a
    /// namespace's objects table, during which the LISTEN connection must still answer its
    /// liveness probe (else it is given up, and opened again to wait for the same lock).
    pub(super) async fn mark_tracked(&self, again: bool) -> Result<(), Reply> {
        let mut marked = self.tracking.marked.lock().await;
        if again {
            *marked = false;
        }
        let wanted = self.tracking.any();
        if *marked == wanted {
            return Ok(());
        }
        let Some(listener) = self.listener().await else {
            return Err(Reply::error(UNAVAILABLE));
        };
        let failed = |err: &dyn std::fmt::Display| Reply::error(format!("ERR CLIENT TRACKING: {err}"));
        let client = checkout(self.store.pool()).await.map_err(|err| failed(&err))?;
        let mut buckets: Vec<&String> = self.databases.iter().map(|(_, bucket)| bucket).collect();
        buckets.sort_unstable();
        buckets.dedup();
        for bucket in buckets {
            client
                .execute(
                    "SELECT pgvs3.resp_track($1, $2, $3, $4)",
                    &[bucket, &wanted, &INLINE_LIMIT, &listener],
                )
                .await
                .map_err(|err| failed(&err))?;
            // Known here at once (the others read it again when told).
            self.events.trackers_changed(bucket.as_bytes(), wanted.then_some(true));
        }
        *marked = wanted;
        Ok(())
    }

    /// Sends a message to `namespace`'s channel on every gateway of the database; answers how
    /// many subscribers of this gateway it reaches (those of other gateways get it too,
    /// uncounted).
    pub async fn publish(&self, namespace: &[u8], shard: bool, channel: &[u8], message: &[u8]) -> Result<i64, Reply> {
        // Checked before anything is encoded or sent: every gateway would read it back.
        check_channel(channel)?;
        if message.len() > self.limits.max_message {
            return Err(Reply::error(format!(
                "ERR message longer than {} bytes (--resp-max-message)",
                self.limits.max_message
            )));
        }
        self.send(&tagged(shard, namespace, channel), message).await?;
        Ok(self.receivers(namespace, shard, channel))
    }

    /// Keyspaces were flushed (FLUSHDB: one; FLUSHALL: each this server maps): every
    /// gateway's tracking clients forget all their keys (after the flush committed), told once
    /// per flush as Redis tells them (one null, however many databases FLUSHALL emptied). This
    /// gateway's table is emptied even when no one tracks now, as Redis's flush empties its
    /// table: keys read by clients that have since turned tracking off would otherwise be told
    /// of later writes once they track again.
    pub async fn flushed(&self, buckets: &[&str]) -> Result<(), Reply> {
        // This gateway's clients at once (before the reply); the others by one message, which
        // names this gateway so that it is not applied here twice. A gateway that gets it
        // forgets every key whichever keyspace it names: the first tracked one is enough.
        // A keyspace whose flags cannot be read may be tracked: told all the same (a null too
        // many costs a tracking client a re-read; one too few, stale values).
        self.tracking.invalidate_all();
        let Some(first) = buckets.first() else {
            return Ok(());
        };
        let mut named = None;
        for bucket in buckets {
            match self.events.flags(bucket).await {
                Ok(flags) if flags.tracked() => {
                    named = Some(bucket);
                    break;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, bucket, "a flushed keyspace's tracking flags unread: telling the other gateways");
                    named = named.or(Some(first));
                }
            }
        }
        let Some(bucket) = named else {
            return Ok(());
        };
        let mut tagged = vec![notify::FLUSHED];
        tagged.extend_from_slice(bucket.as_bytes());
        self.send(&tagged, &self.events.token.to_be_bytes()).await
    }

    /// Sends a message on `tagged` (a channel after its kind) through the database to every
    /// gateway, on a pooled connection. Refused while this gateway has no LISTEN connection: its
    /// own subscribers, whom the reply counts, would not get the message.
    async fn send(&self, tagged: &[u8], message: &[u8]) -> Result<(), Reply> {
        if self.listener().await.is_none() {
            return Err(Reply::error(UNAVAILABLE));
        }
        let failed = |err: &dyn std::fmt::Display| Reply::error(format!("ERR publish failed: {err}"));
        let client = checkout(self.store.pool()).await.map_err(|err| failed(&err))?;
        let statement = client.prepare_cached(Self::PUBLISH).await.map_err(|err| failed(&err))?;
        client
            .execute(&statement, &[&tagged, &message, &INLINE_LIMIT])
            .await
            .map_err(|err| failed(&err))?;
        Ok(())
    }

    /// This gateway's subscribers that a message to `namespace`'s `channel` reaches.
    pub fn receivers(&self, namespace: &[u8], shard: bool, channel: &[u8]) -> i64 {
        let registry = self.registry.read().expect("pubsub lock");
        let kind = if shard { SHARD } else { PLAIN };
        let to = To::Namespace(namespace);
        let direct = registry
            .channels
            .get(&(kind, Bytes::copy_from_slice(channel)))
            .map_or(0, |subscribers| count(subscribers, |mailbox| mailbox.reached_by(to)));
        let patterns: usize = if shard {
            0
        } else {
            registry
                .patterns
                .iter()
                .filter(|(pattern, _)| glob::matches(pattern, channel))
                .map(|(_, subscribers)| count(subscribers, |mailbox| mailbox.reached_by(to)))
                .sum()
        };
        (direct + patterns) as i64
    }

    pub fn subscribe(&self, shard: bool, channel: &Bytes, id: u64, mailbox: &Arc<Mailbox>) {
        let kind = if shard { SHARD } else { PLAIN };
        let mut registry = self.registry.write().expect("pubsub lock");
        registry
            .channels
            .entry((kind, channel.clone()))
            .or_default()
            .insert(id, Arc::clone(mailbox));
    }

    pub fn unsubscribe(&self, shard: bool, channel: &Bytes, id: u64) {
        let kind = if shard { SHARD } else { PLAIN };
        let mut registry = self.registry.write().expect("pubsub lock");
        let key = (kind, channel.clone());
        if let Some(subscribers) = registry.channels.get_mut(&key) {
            subscribers.remove(&id);
            if subscribers.is_empty() {
                registry.channels.remove(&key);
            }
        }
    }

    pub fn psubscribe(&self, pattern: &Bytes, id: u64, mailbox: &Arc<Mailbox>) {
        let mut registry = self.registry.write().expect("pubsub lock");
        registry
            .patterns
            .entry(pattern.clone())
            .or_default()
            .insert(id, Arc::clone(mailbox));
    }

    pub fn punsubscribe(&self, pattern: &Bytes, id: u64) {
        let mut registry = self.registry.write().expect("pubsub lock");
        if let Some(subscribers) = registry.patterns.get_mut(pattern) {
            subscribers.remove(&id);
            if subscribers.is_empty() {
                registry.patterns.remove(pattern);
            }
        }
    }

    /// PUBSUB CHANNELS / SHARDCHANNELS: this gateway's channels with subscribers in `view`
    /// (a namespace; `None`: every one).
    pub fn channels(&self, view: Option<&[u8]>, shard: bool, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let kind = if shard { SHARD } else { PLAIN };
        let registry = self.registry.read().expect("pubsub lock");
        let mut channels: Vec<Bytes> = registry
            .channels
            .iter()
            .filter(|((k, channel), subscribers)| {
                *k == kind
                    && pattern.is_none_or(|pattern| glob::matches(pattern, channel))
                    && subscribers.values().any(|mailbox| mailbox.in_view(view))
            })
            .map(|((_, channel), _)| channel.clone())
            .collect();
        channels.sort();
        channels
    }

    /// PUBSUB NUMSUB / SHARDNUMSUB: a channel's subscribers in `view` on this gateway.
    pub fn numsub(&self, view: Option<&[u8]>, shard: bool, channel: &Bytes) -> i64 {
        let kind = if shard { SHARD } else { PLAIN };
        let registry = self.registry.read().expect("pubsub lock");
        registry
            .channels
            .get(&(kind, channel.clone()))
            .map_or(0, |subscribers| {
                count(subscribers, |mailbox| mailbox.in_view(view)) as i64
            })
    }

    /// PUBSUB NUMPAT: patterns subscribed to in `view` on this gateway.
    pub fn numpat(&self, view: Option<&[u8]>) -> i64 {
        let registry = self.registry.read().expect("pubsub lock");
        registry
            .patterns
            .values()
            .filter(|subscribers| subscribers.values().any(|mailbox| mailbox.in_view(view)))
            .count() as i64
    }

    /// INFO's `pubsub_channels` and `pubsub_patterns`: every namespace's, on this gateway.
    pub fn totals(&self) -> (usize, usize) {
        let registry = self.registry.read().expect("pubsub lock");
        let plain = registry.channels.keys().filter(|(kind, _)| *kind == PLAIN).count();
        (plain, registry.patterns.len())
    }

    /// Hands one published message to its subscribers here.
    fn deliver(&self, tagged: &[u8], message: Bytes) {
        let Some((&kind, channel)) = tagged.split_first() else {
            return;
        };
        match kind {
            notify::EVENTS => self.deliver_events(&message),
            notify::SETTING => self.events.changed(channel, &message),
            notify::TRACKERS => self.events.trackers_changed(channel, None),
            notify::FLUSHED if message[..] != self.events.token.to_be_bytes() => self.tracking.invalidate_all(),
            notify::FLUSHED => {}
            PLAIN | SHARD => self.deliver_to(kind, Bytes::copy_from_slice(channel), message, To::Namespace(&[])),
            TENANT_PLAIN | TENANT_SHARD => {
                let Some((&length, rest)) = channel.split_first() else {
                    return;
                };
                let Some((namespace, channel)) = rest.split_at_checked(length as usize) else {
                    return;
                };
                let kind = if kind == TENANT_PLAIN { PLAIN } else { SHARD };
                self.deliver_to(kind, Bytes::copy_from_slice(channel), message, To::Namespace(namespace));
            }
            // A kind of a newer gateway's: not this one's to deliver.
            _ => {}
        }
    }

    /// A write batch's keyspace events, to the subscribers of each database of its bucket.
    fn deliver_events(&self, message: &[u8]) {
        let Some(received) = notify::Received::unpack(message) else {
            return;
        };
        // This gateway's own batches told its clients as they committed.
        if received.token != Some(self.events.token) {
            self.tracking.invalidate(received.bucket, false, received.changed());
        }
        for (db, _) in self
            .databases
            .iter()
            .filter(|(_, name)| name.as_bytes() == received.bucket)
        {
            for (channel, message) in received.deliveries(*db) {
                self.deliver_to(PLAIN, channel, message, To::Readers(received.bucket));
            }
        }
    }

    /// Hands a message to the subscribers of `channel` and of the patterns it matches that it
    /// is for.
    fn deliver_to(&self, kind: u8, channel: Bytes, message: Bytes, to: To) {
        let limit = self.limits.output_limit;
        let bucket = match to {
            To::Readers(bucket) => Some(Bytes::copy_from_slice(bucket)),
            To::Namespace(_) => None,
        };
        let registry = self.registry.read().expect("pubsub lock");
        let reaches = |mailbox: &&Arc<Mailbox>| mailbox.reached_by(to);
        if let Some(subscribers) = registry.channels.get(&(kind, channel.clone())) {
            for mailbox in subscribers.values().filter(reaches) {
                mailbox.push(
                    Delivery::Message {
                        shard: kind == SHARD,
                        channel: channel.clone(),
                        message: message.clone(),
                        bucket: bucket.clone(),
                    },
                    limit,
                );
            }
        }
        if kind == PLAIN {
            for (pattern, subscribers) in &registry.patterns {
                if glob::matches(pattern, &channel) {
                    for mailbox in subscribers.values().filter(reaches) {
                        mailbox.push(
                            Delivery::Pattern {
                                pattern: pattern.clone(),
                                channel: channel.clone(),
                                message: message.clone(),
                                bucket: bucket.clone(),
                            },
                            limit,
                        );
                    }
                }
            }
        }
    }

    /// Delivers the payloads of NOTIFY `pgvs3_pubsub` in order until the LISTEN connection
    /// ends; large messages are read through `client` (that connection).
    pub(super) async fn dispatch(
        &self,
        client: &tokio_postgres::Client,
        mut payloads: tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        let base64 = base64::engine::general_purpose::STANDARD;
        while let Some(payload) = payloads.recv().await {
            if let Some(inline) = payload.strip_prefix('i') {
                let Some((channel, message)) = inline.split_once(' ') else {
                    continue;
                };
                if let (Ok(channel), Ok(message)) = (base64.decode(channel), base64.decode(message)) {
                    self.deliver(&channel, Bytes::from(message));
                }
            } else if let Some(id) = payload.strip_prefix('r').and_then(|id| id.parse::<i64>().ok()) {
                // A row trimmed before it was read (over a minute late) is lost, as a message
                // to a disconnected Redis subscriber is.
                match client
                    .query_opt("SELECT channel, message FROM pgvs3.resp_messages WHERE id = $1", &[&id])
                    .await
                {
                    Ok(Some(row)) => {
                        let channel: Vec<u8> = row.get("channel");
                        let message: Vec<u8> = row.get("message");
                        self.deliver(&channel, Bytes::from(message));
                    }
                    Ok(None) => {}
                    Err(_) => return,
                }
            }
        }
    }
}

fn count(subscribers: &Subscribers, counted: impl Fn(&Arc<Mailbox>) -> bool) -> usize {
    subscribers.values().filter(|mailbox| counted(mailbox)).count()
}

/// Refuses a channel name over [`MAX_CHANNEL`] bytes.
pub(crate) fn check_channel(channel: &[u8]) -> Result<(), Reply> {
    match channel.len() > MAX_CHANNEL {
        true => Err(Reply::error(format!("ERR channel longer than {MAX_CHANNEL} bytes"))),
        false => Ok(()),
    }
}
