//! The events a write batch's commands emit, recorded as they run from each command and its
//! reply, and packed into the message its commit sends (see the parent module).

use super::*;
/// One event: its class, its name, its key, and the client whose command caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Event {
    class: u16,
    name: &'static str,
    key: String,
    writer: u64,
}

/// What a key held, as far as the batch knows: whether it exists, and with a TTL.
#[derive(Debug, Clone, Copy)]
struct Held {
    exists: bool,
    ttl: bool,
}

/// The events of one write batch, recorded as its commands run, sent with its commit.
pub struct Recorder {
    flags: Flags,
    /// This gateway and the client of the command being recorded (see [`Writers`]).
    token: u64,
    pub writer: u64,
    events: Vec<Event>,
    /// The keys as the commands so far left them (first seen as the batch loaded them).
    held: HashMap<String, Held>,
    /// Typed keys an element was removed from since the events were last settled: `del`
    /// follows when they are gone (see [`Recorder::settle`]).
    removed_from: Vec<String>,
    /// Stream consumers (key, group, consumer) a command of the batch names that did not exist
    /// before it ran: the first command that creates one says `xgroup-createconsumer`.
    new_consumers: HashSet<(String, Bytes, Bytes)>,
}

impl Recorder {
    /// `None` when the keyspace emits nothing and is not tracked: the batch then runs as it
    /// always does.
    pub fn new(flags: Flags, token: u64) -> Option<Recorder> {
        (flags.emits() || flags.tracked()).then(|| Recorder {
            flags,
            token,
            writer: 0,
            events: Vec::new(),
            held: HashMap::new(),
            removed_from: Vec::new(),
            new_consumers: HashSet::new(),
        })
    }

    /// Notes what the command's keys hold before it runs (for keys the batch has not seen).
    pub fn before(&mut self, command: &KeyCommand, batch: &KvBatch) {
        for key in command.keys() {
            self.held.entry(key.clone()).or_insert_with(|| match batch.get(key) {
                Some(entry) => Held {
                    exists: true,
                    ttl: entry.expires_at.is_some(),
                },
                None => Held {
                    exists: false,
                    ttl: false,
                },
            });
        }
    }

    /// Before commands run: the stream consumers that XREADGROUP, XCLAIM and XAUTOCLAIM name
    /// and that do not exist yet (they create them, and Redis says `xgroup-createconsumer`),
    /// read in the batch with XINFO CONSUMERS. Only batches that record events pay for it.
    pub async fn look_up_consumers(&mut self, commands: &[&KeyCommand], batch: &mut KvBatch) -> StoreResult<()> {
        for command in commands {
            let KeyCommand::Typed(typed) = command else { continue };
            let call = &typed.call;
            if !matches!(call.op(), "xreadgroup" | "xclaim" | "xautoclaim") {
                continue;
            }
            let (Some(group), Some(consumer)) = (call.args.first(), call.args.get(1)) else {
                continue;
            };
            for key in &call.keys {
                let args = [
                    Bytes::from_static(b"XINFO"),
                    Bytes::from_static(b"CONSUMERS"),
                    Bytes::copy_from_slice(key.as_bytes()),
                    group.clone(),
                ];
                let Ok(Some(info)) = KeyCommand::parse("xinfo", &args) else {
                    continue;
                };
                let replies = crate::resp::keys::apply_all(&[&info], batch, false).await?;
                // A missing key or group answers an error: the command fails too, creating none.
                if let Some(Reply::Array(consumers)) = replies.first()
                    && !consumers.iter().any(|known| names(known, consumer))
                {
                    self.new_consumers
                        .insert((key.clone(), group.clone(), consumer.clone()));
                }
            }
        }
        Ok(())
    }

    /// How many of `commands` (at least one) may run together before [`Recorder::settle`]:
    /// up to a command on a key that an earlier one of them may have emptied. That command
    /// must know whether it was (Redis says `del` as the element goes, and `new` when a
    /// command makes the key again): `RPUSH l a`, `LPOP l`, `RPUSH l b` in one batch say
    /// `rpush`, `lpop`, `del`, `new`, `rpush`. Batches that publish no events run whole.
    pub fn run_length(&self, commands: &[&KeyCommand]) -> usize {
        if !self.flags.emits() {
            return commands.len();
        }
        let mut emptied: HashSet<&String> = HashSet::new();
        for (at, command) in commands.iter().enumerate() {
            if command.keys().iter().any(|key| emptied.contains(key)) {
                return at;
            }
            if let KeyCommand::Typed(typed) = command
                && removes(typed.call.op())
            {
                emptied.extend(&typed.call.keys);
            }
        }
        commands.len()
    }

    /// Whether `command` works on a key an element left since the events were last settled:
    /// a script settles them before it runs (see [`Recorder::run_length`]).
    pub fn unsettled(&self, command: &KeyCommand) -> bool {
        self.flags.emits() && command.keys().iter().any(|key| self.removed_from.contains(key))
    }

    /// Says `del` for the typed keys that elements left since the last time and are gone now
    /// (loaded again to see, when events are published: an invalidation needs no `del`), right
    /// after the key's last event; the keys then no longer exist for the commands after.
    /// The typed keys of `ran` (the commands run since the last time) are loaded again with
    /// them, for the commands after that work on them in memory. Answers the keys loaded.
    pub async fn settle(&mut self, batch: &mut KvBatch, ran: &[&KeyCommand]) -> StoreResult<Vec<String>> {
        let mut removed = std::mem::take(&mut self.removed_from);
        if !self.flags.emits() {
            removed.clear();
        }
        removed.sort_unstable();
        removed.dedup();
        let mut keys = removed.clone();
        for command in ran {
            if let KeyCommand::Typed(typed) = command {
                keys.extend(typed.call.keys.iter().cloned());
            }
        }
        if keys.is_empty() {
            return Ok(keys);
        }
        keys.sort_unstable();
        keys.dedup();
        batch.reload(&keys).await?;
        for key in &removed {
            if batch.get(key).is_none()
                && let Some(last) = self.events.iter().rposition(|event| event.key == *key)
            {
                let writer = self.events[last].writer;
                self.events.insert(
                    last + 1,
                    Event {
                        class: GENERIC,
                        name: "del",
                        key: key.clone(),
                        writer,
                    },
                );
                self.held.insert(
                    key.clone(),
                    Held {
                        exists: false,
                        ttl: false,
                    },
                );
            }
        }
        Ok(keys)
    }

    fn held(&self, key: &str) -> Held {
        self.held.get(key).copied().unwrap_or(Held {
            exists: false,
            ttl: false,
        })
    }

    /// Redis says `new` as a command adds a key, before the command's own event.
    fn added(&mut self, key: &str) {
        self.events.push(Event {
            class: NEW,
            name: "new",
            key: key.to_owned(),
            writer: self.writer,
        });
        self.held.insert(
            key.to_owned(),
            Held {
                exists: true,
                ttl: false,
            },
        );
    }

    pub(super) fn emit(&mut self, class: u16, name: &'static str, key: &str) {
        if !self.held(key).exists && !matches!(name, "del" | "rename_from") {
            self.added(key);
        }
        self.events.push(Event {
            class,
            name,
            key: key.to_owned(),
            writer: self.writer,
        });
        let held = self.held.entry(key.to_owned()).or_insert(Held {
            exists: false,
            ttl: false,
        });
        match name {
            "del" | "rename_from" => {
                *held = Held {
                    exists: false,
                    ttl: false,
                }
            }
            "expire" => {
                *held = Held {
                    exists: true,
                    ttl: true,
                }
            }
            "persist" | "set" => {
                *held = Held {
                    exists: true,
                    ttl: false,
                }
            }
            _ => held.exists = true,
        }
    }

    /// A command that stores its result at `destination` (answering how many elements or
    /// bytes it stored): its event when it stored any, else `del` of the destination it
    /// deleted (an empty result deletes it), as Redis's store commands say.
    fn stored(&mut self, class: u16, name: &'static str, destination: &str, reply: &Reply) {
        if is_true(reply) {
            self.emit(class, name, destination);
        } else if self.held(destination).exists {
            self.emit(GENERIC, "del", destination);
        }
    }

    /// An element left a typed key, which goes when it was the last.
    fn removed(&mut self, class: u16, name: &'static str, key: &str) {
        self.emit(class, name, key);
        self.removed_from.push(key.to_owned());
    }

    /// Records the events of a command that ran with `reply`, as Redis 7.0 emits them.
    pub fn after(&mut self, command: &KeyCommand, reply: &Reply) {
        if matches!(reply, Reply::Error(_) | Reply::OverLimit(_)) {
            return;
        }
        use KeyCommand::*;
        match command {
            Str(string) => self.string(string, reply),
            Del(keys) => {
                for key in keys {
                    if self.held(key).exists {
                        self.emit(GENERIC, "del", key);
                    }
                }
            }
            Expire { key, .. } if is_true(reply) => {
                // An expiry in the past deleted the key.
                let name = if expired_now(command) { "del" } else { "expire" };
                self.emit(GENERIC, name, key);
            }
            Persist(key) if is_true(reply) => self.emit(GENERIC, "persist", key),
            Rename { from, to, .. } if from != to && (matches!(reply, Reply::Simple(_)) || is_true(reply)) => {
                let ttl = self.held(from).ttl;
                // The destination (replaced when it existed) is added before either event.
                self.added(to);
                self.emit(GENERIC, "rename_from", from);
                self.emit(GENERIC, "rename_to", to);
                self.held.insert(to.clone(), Held { exists: true, ttl });
            }
            Copy { to, .. } if is_true(reply) => {
                // Added (replaced when it existed), as RENAME's destination.
                self.added(to);
                self.emit(GENERIC, "copy_to", to)
            }
            Typed(typed) => self.typed(typed, reply),
            Family(family) => self.family(family, reply),
            _ => {}
        }
    }

    fn string(&mut self, command: &StringCommand, reply: &Reply) {
        use StringCommand::*;
        match command {
            Set {
                key,
                condition,
                get,
                ttl,
                ..
            } => {
                let performed = match (condition, get) {
                    (None, _) => true,
                    (Some(_), false) => !matches!(reply, Reply::Nil),
                    (Some(Condition::Absent), true) => !self.held(key).exists,
                    (Some(Condition::Present), true) => self.held(key).exists,
                };
                if performed {
                    self.emit(STRING, "set", key);
                    if let SetTtl::Expire(_) = ttl {
                        self.emit(GENERIC, "expire", key);
                    }
                }
            }
            SetNx(key, _) if is_true(reply) => self.emit(STRING, "set", key),
            MSet(pairs) => pairs.iter().for_each(|(key, _)| self.emit(STRING, "set", key)),
            MSetNx(pairs) if is_true(reply) => pairs.iter().for_each(|(key, _)| self.emit(STRING, "set", key)),
            GetSet(key, _) => self.emit(STRING, "set", key),
            GetDel(key) if !matches!(reply, Reply::Nil) => self.emit(GENERIC, "del", key),
            GetEx(key, ttl) if !matches!(reply, Reply::Nil) => match ttl {
                GetExTtl::Unchanged => {}
                GetExTtl::Persist if self.held(key).ttl => self.emit(GENERIC, "persist", key),
                GetExTtl::Persist => {}
                GetExTtl::Expire(_) if self.held.get(key).is_some_and(|held| held.exists) => {
                    // GETEX with a time in the past deletes the key.
                    self.emit(GENERIC, "expire", key)
                }
                GetExTtl::Expire(_) => {}
            },
            Append(key, _) => self.emit(STRING, "append", key),
            SetRange(key, _, value) if !value.is_empty() => self.emit(STRING, "setrange", key),
            IncrBy(key, _) => self.emit(STRING, "incrby", key),
            IncrByFloat(key, _) => self.emit(STRING, "incrbyfloat", key),
            SetBit { key, .. } => self.emit(STRING, "setbit", key),
            _ => {}
        }
    }

    /// Whether the call's consumer of `key` (its first two arguments, group and consumer) was
    /// new to the batch (see [`Recorder::look_up_consumers`]): it exists from now on.
    fn consumer_created(&mut self, key: &str, call: &crate::store::TypedCall) -> bool {
        match (call.args.first(), call.args.get(1)) {
            (Some(group), Some(consumer)) => {
                self.new_consumers
                    .remove(&(key.to_owned(), group.clone(), consumer.clone()))
            }
            _ => false,
        }
    }

    /// Commands on hashes, lists, sets, sorted sets and streams, by their SQL operation.
    fn typed(&mut self, typed: &crate::resp::typed::Typed, reply: &Reply) {
        let call = &typed.call;
        let removals = self.removed_from.len();
        self.typed_events(call, reply);
        // XADD's trim, after its entry went in.
        if let crate::resp::typed::Shape::Stream(crate::resp::commands::stream::Reading::Id(trimmed)) = &typed.shape
            && trimmed.get()
        {
            self.emit(STREAM, "xtrim", &call.keys[0]);
        }
        debug_assert!(
            self.removed_from.len() == removals || removes(call.op()),
            "`removes` lists {}",
            call.op()
        );
    }

    fn typed_events(&mut self, call: &crate::store::TypedCall, reply: &Reply) {
        let key = call.keys.first().cloned().unwrap_or_default();
        let positive = matches!(reply, Reply::Integer(n) if *n > 0);
        let popped = !matches!(reply, Reply::Nil | Reply::NilArray) && !is_empty_array(reply);
        let op = call.op();
        let class = match call.family() {
            crate::store::Family::Hash => HASH,
            crate::store::Family::List => LIST,
            crate::store::Family::Set => SET,
            crate::store::Family::Zset => ZSET,
            _ => STREAM,
        };
        match op {
            "hset" | "hincrby" | "hincrbyfloat" | "lset" | "xsetid" | "xgroup_create" | "xgroup_setid"
            | "xgroup_delconsumer" => self.emit(class, event_name(op), &key),
            "hsetnx" | "sadd" | "lpushx" | "rpushx" | "linsert" | "xgroup_createconsumer" | "xgroup_destroy"
                if positive =>
            {
                if op == "xgroup_createconsumer" {
                    self.consumer_created(&key, call);
                }
                self.emit(class, event_name(op), &key)
            }
            "xreadgroup" | "xclaim" | "xautoclaim" => {
                for key in &call.keys {
                    if self.consumer_created(key, call) {
                        self.emit(STREAM, "xgroup-createconsumer", key);
                    }
                }
            }
            "lpush" | "rpush" => self.emit(class, op, &key),
            "xadd" if !matches!(reply, Reply::Nil) => self.emit(class, op, &key),
            "xdel" | "xtrim" if positive => self.emit(class, op, &key),
            "hdel" | "srem" | "zrem" | "lrem" | "zremrangebyscore" | "zremrangebyrank" | "zremrangebylex"
                if positive =>
            {
                self.removed(class, event_name(op), &key)
            }
            "ltrim" => self.removed(class, op, &key),
            "lpop" | "rpop" | "spop" | "zpopmin" | "zpopmax" if popped => self.removed(class, op, &key),
            "blpop" | "brpop" | "bzpopmin" | "bzpopmax" | "lmpop" | "zmpop" if popped => {
                // The reply names the key popped from first.
                let from = match reply {
                    Reply::Array(items) => match items.first() {
                        Some(Reply::Bulk(key)) => String::from_utf8_lossy(key).into_owned(),
                        _ => key,
                    },
                    _ => key,
                };
                self.removed(class, pop_event(op, call), &from)
            }
            "lmove" if popped => {
                let to = call.keys.get(1).cloned().unwrap_or_default();
                let (from_left, to_left) = (call.ints.first() == Some(&Some(1)), call.ints.get(1) == Some(&Some(1)));
                self.emit(LIST, if to_left { "lpush" } else { "rpush" }, &to);
                self.removed(LIST, if from_left { "lpop" } else { "rpop" }, &key);
            }
            "smove" if is_true(reply) => {
                let to = call.keys.get(1).cloned().unwrap_or_default();
                self.removed(SET, "srem", &key);
                self.emit(SET, "sadd", &to);
            }
            "zadd" => {
                // INCR answers nil when a condition stopped it; otherwise the set changed
                // unless nothing was added or updated (told apart only by CH: emitted alike).
                // A missing key that nothing was added to (XX) was not made: Redis is silent.
                let incr = call.ints.get(5) == Some(&Some(1));
                let nx = call.ints.first() == Some(&Some(1));
                if incr && !matches!(reply, Reply::Nil) {
                    self.emit(ZSET, "zincr", &key);
                } else if !incr && (positive || (!nx && self.held(&key).exists)) {
                    self.emit(ZSET, "zadd", &key);
                }
            }
            "zincrby" => self.emit(ZSET, "zincr", &key),
            "sinterstore" | "sunionstore" | "sdiffstore" | "zunionstore" | "zinterstore" | "zdiffstore"
            | "zrangestore" => self.stored(class, event_name(op), &key, reply),
            _ => {}
        }
    }

    fn family(&mut self, command: &crate::resp::commands::family::FamilyCommand, reply: &Reply) {
        use crate::resp::commands::bitmap::Bitmap;
        use crate::resp::commands::family::FamilyCommand;
        use crate::resp::commands::geo::Geo;
        use crate::resp::commands::hyperloglog::Pf;
        match command {
            FamilyCommand::Pf(Pf::Add { key, .. }) if is_true(reply) => self.emit(STRING, "pfadd", key),
            FamilyCommand::Pf(Pf::Merge { keys }) => {
                let key = keys[0].clone();
                self.emit(STRING, "pfadd", &key)
            }
            FamilyCommand::Geo(Geo::Add { key, .. }) => self.emit(ZSET, "zadd", key),
            FamilyCommand::Bitmap(Bitmap::Op { destination, .. }) => self.stored(STRING, "set", destination, reply),
            FamilyCommand::Sort(sort) => {
                if let Some(destination) = sort.destination() {
                    self.stored(LIST, "sortstore", destination, reply);
                }
            }
            FamilyCommand::Geo(Geo::Search(search)) => {
                if let Some((destination, event)) = search.stored_at() {
                    self.stored(ZSET, event, destination, reply);
                }
            }
            FamilyCommand::Bitmap(Bitmap::Field { key, outcome, .. }) => {
                if outcome.changed() {
                    self.emit(STRING, "setbit", key);
                } else if outcome.created() {
                    // Created, but every write failed (OVERFLOW FAIL): `new` alone.
                    self.added(key);
                }
            }
            FamilyCommand::Dumped(dumped) if matches!(reply, Reply::Simple(_)) => {
                if let Some(key) = dumped.keys().first() {
                    let key = (*key).clone();
                    self.emit(GENERIC, "restore", &key);
                }
            }
            _ => {}
        }
    }

    /// Settles the last events (`del` for the typed keys left empty) and has the events go out
    /// with the batch's commit; answers the keys changed, for this gateway's tracking clients.
    pub async fn finish(mut self, batch: &mut KvBatch) -> StoreResult<Changed> {
        self.settle(batch, &[]).await?;
        // Sent empty when there is nothing to send: the batch's commit is marked as a RESP
        // batch's all the same, so that its writes raise no S3-write events (the keyspace
        // publishes or is tracked: its S3 writes are watched, functions/resp_pubsub.sql).
        let mut channel = vec![EVENTS];
        channel.extend_from_slice(b"events");
        let message = self.pack(batch.bucket_name()).unwrap_or_default();
        batch.notify_at_commit(channel, message, crate::resp::pubsub::INLINE_LIMIT);
        let changed = match self.flags.tracked() {
            true => self.events.into_iter().map(|event| (event.key, event.writer)).collect(),
            false => Vec::new(),
        };
        Ok(Changed(changed))
    }

    /// The batch's events for [`Received`]: the K and E bits, the bucket, then each event's name
    /// and key, of the classes the keyspace emits. A tracked keyspace's message has every event
    /// (their keys are the keys changed), with [`WITH_WRITERS`] and this gateway's token after
    /// the bucket, and each event led by whether it is published and followed by its writer.
    /// `None` when there is nothing to send.
    pub(super) fn pack(&self, bucket: &str) -> Option<Vec<u8>> {
        let kinds = (self.flags.0 & (KEYSPACE | KEYEVENT)) as u8;
        let published = |event: &Event| self.flags.emits() && self.flags.has(event.class);
        if !self.flags.tracked() {
            let events: Vec<&Event> = self.events.iter().filter(|event| published(event)).collect();
            if events.is_empty() {
                return None;
            }
            let mut message = vec![kinds];
            put(&mut message, bucket.as_bytes());
            for event in events {
                put(&mut message, event.name.as_bytes());
                put(&mut message, event.key.as_bytes());
            }
            return Some(message);
        }
        if self.events.is_empty() {
            return None;
        }
        let mut message = vec![kinds | WITH_WRITERS];
        put(&mut message, bucket.as_bytes());
        message.extend_from_slice(&self.token.to_be_bytes());
        for event in &self.events {
            message.push(u8::from(published(event)));
            put(&mut message, event.name.as_bytes());
            put(&mut message, event.key.as_bytes());
            message.extend_from_slice(&event.writer.to_be_bytes());
        }
        Some(message)
    }
}

fn put(message: &mut Vec<u8>, part: &[u8]) {
    message.extend_from_slice(&(part.len() as u32).to_be_bytes());
    message.extend_from_slice(part);
}

/// The operations that take elements out of a key, which goes with its last element (those
/// [`Recorder::typed`] records with [`Recorder::removed`]).
fn removes(op: &str) -> bool {
    matches!(
        op,
        "hdel"
            | "srem"
            | "zrem"
            | "lrem"
            | "zremrangebyscore"
            | "zremrangebyrank"
            | "zremrangebylex"
            | "ltrim"
            | "lpop"
            | "rpop"
            | "spop"
            | "zpopmin"
            | "zpopmax"
            | "blpop"
            | "brpop"
            | "bzpopmin"
            | "bzpopmax"
            | "lmpop"
            | "zmpop"
            | "lmove"
            | "smove"
    )
}

/// Redis's event names where they differ from the operation's.
fn event_name(op: &'static str) -> &'static str {
    match op {
        "hsetnx" => "hset",
        "lpushx" => "lpush",
        "rpushx" => "rpush",
        "xgroup_create" => "xgroup-create",
        "xgroup_setid" => "xgroup-setid",
        "xgroup_destroy" => "xgroup-destroy",
        "xgroup_createconsumer" => "xgroup-createconsumer",
        "xgroup_delconsumer" => "xgroup-delconsumer",
        op => op,
    }
}

/// The event of a blocking or multi-key pop: the plain pop's from that end.
fn pop_event(op: &str, call: &crate::store::TypedCall) -> &'static str {
    match op {
        "blpop" => "lpop",
        "brpop" => "rpop",
        "bzpopmin" => "zpopmin",
        "bzpopmax" => "zpopmax",
        "lmpop" if call.ints.first() == Some(&Some(1)) => "lpop",
        "lmpop" => "rpop",
        _ if call.ints.first() == Some(&Some(0)) => "zpopmin",
        _ => "zpopmax",
    }
}

/// Whether an XINFO CONSUMERS entry is `consumer`'s.
fn names(entry: &Reply, consumer: &[u8]) -> bool {
    match entry {
        Reply::Map(fields) | Reply::Pairs(fields) => fields.iter().any(|(field, value)| {
            matches!(field, Reply::Bulk(name) if name[..] == b"name"[..])
                && matches!(value, Reply::Bulk(name) if name[..] == *consumer)
        }),
        _ => false,
    }
}

fn is_true(reply: &Reply) -> bool {
    matches!(reply, Reply::Integer(n) if *n > 0) || matches!(reply, Reply::Simple("OK"))
}

fn is_empty_array(reply: &Reply) -> bool {
    matches!(reply, Reply::Array(items) if items.is_empty()) || matches!(reply, Reply::Pairs(items) if items.is_empty())
}

/// EXPIRE with a time already past (it deletes the key, as Redis does, and says `del`).
fn expired_now(command: &KeyCommand) -> bool {
    match command {
        KeyCommand::Expire { when, .. } => {
            crate::resp::keys::at(std::time::SystemTime::now(), *when) <= std::time::SystemTime::now()
        }
        _ => false,
    }
}
