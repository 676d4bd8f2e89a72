//! Keyspace notifications (`notify-keyspace-events`): which events a keyspace emits, the events
//! each executed key command emits, and their way to every gateway's subscribers.
//!
//! The setting is the keyspace's, kept in `pgvs3.resp_keyspace_events` (migration 0039) and
//! cached by each gateway; CONFIG SET tells every gateway through the pub/sub NOTIFY channel
//! (a message of kind [`SETTING`]), and a gateway whose LISTEN connection was lost forgets what
//! it cached (it may have missed a change).
//!
//! A write batch whose keyspace emits events records them as its commands run ([`Recorder`]),
//! from each command and its reply, and sends them all with its commit as one message of kind
//! [`EVENTS`] through `pgvs3.resp_notify` (functions/resp_pubsub.sql): NOTIFY is
//! transactional, so the events reach the gateways only once the writes are committed, in
//! commit order. There each gateway hands them to its subscribers of `__keyspace@<db>__:<key>`
//! and `__keyevent@<db>__:<event>` for every database that maps to the keyspace's bucket, as
//! pub/sub messages: into the same bounded mailboxes, so a slow subscriber is disconnected
//! (`--resp-pubsub-output-limit`), never buffered without bound.
//!
//! The same message carries CLIENT TRACKING's invalidations (tracking.rs): while a gateway has
//! tracking clients for a keyspace, every gateway's batches on it record the keys they change
//! (whatever the setting) and send them with their commit, in a message that also says which
//! events to publish and which client wrote each key (for NOLOOP).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use bytes::Bytes;

use super::codec::Reply;
use super::command::KeyCommand;
use super::commands::strings::{Condition, GetExTtl, SetTtl, StringCommand};
use crate::store::{Catalog, KvBatch, StoreResult};

mod recorder;

pub use recorder::Recorder;

/// Kinds of pub/sub payload (the first byte of the channel the database carries, beside
/// pubsub.rs's plain and shard channels): a batch's events, and a keyspace's new setting.
pub(crate) const EVENTS: u8 = b'm';
pub(crate) const SETTING: u8 = b'k';
/// A keyspace's trackers changed (functions/resp_pubsub.sql `resp_track`): read again whether
/// it is tracked.
pub(crate) const TRACKERS: u8 = b'T';
/// A keyspace was flushed while tracked: every tracking client forgets all its keys.
pub(crate) const FLUSHED: u8 = b'f';

const KEYSPACE: u16 = 1 << 0;
const KEYEVENT: u16 = 1 << 1;
const GENERIC: u16 = 1 << 2;
const STRING: u16 = 1 << 3;
const LIST: u16 = 1 << 4;
const SET: u16 = 1 << 5;
const HASH: u16 = 1 << 6;
const ZSET: u16 = 1 << 7;
const EXPIRED: u16 = 1 << 8;
const EVICTED: u16 = 1 << 9;
const STREAM: u16 = 1 << 10;
const KEY_MISS: u16 = 1 << 11;
const MODULE: u16 = 1 << 13;
const NEW: u16 = 1 << 14;
/// Not a Redis letter: some gateway has CLIENT TRACKING clients for the keyspace, so its
/// writes record the keys they change (never stored, never shown).
const TRACKED: u16 = 1 << 15;
/// The kinds byte of a message that carries invalidations: each event says whether it is
/// published and who wrote it.
const WITH_WRITERS: u8 = 0x80;
/// `A`: every class but key misses and new keys, as in Redis.
const ALL: u16 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// Redis's text for a setting with a letter it does not know.
pub(crate) const INVALID_FLAGS: &str = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.";

/// A keyspace's `notify-keyspace-events`, as Redis's flag bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags(u16);

impl Flags {
    /// Redis's `keyspaceEventsStringToFlags`: `None` for a letter it does not know.
    pub fn parse(text: &[u8]) -> Option<Flags> {
        let mut flags = 0;
        for letter in text {
            flags |= match letter {
                b'A' => ALL,
                b'g' => GENERIC,
                b'$' => STRING,
                b'l' => LIST,
                b's' => SET,
                b'h' => HASH,
                b'z' => ZSET,
                b'x' => EXPIRED,
                b'e' => EVICTED,
                b'K' => KEYSPACE,
                b'E' => KEYEVENT,
                b't' => STREAM,
                b'm' => KEY_MISS,
                b'd' => MODULE,
                b'n' => NEW,
                _ => return None,
            };
        }
        Some(Flags(flags))
    }

    /// Those of them this server does not emit, with why (`None`: all are kept).
    pub fn unsupported(self) -> Option<&'static str> {
        if self.0 & KEY_MISS != 0 {
            return Some(
                "key-miss events ('m') are not supported by pgvs3: reads do not publish (see docs/resp-compatibility.md)",
            );
        }
        None
    }

    /// Redis's `keyspaceEventsFlagsToString`, what CONFIG GET shows.
    pub fn text(self) -> String {
        let mut text = String::new();
        if self.0 & ALL == ALL {
            text.push('A');
        } else {
            for (bit, letter) in [
                (GENERIC, 'g'),
                (STRING, '$'),
                (LIST, 'l'),
                (SET, 's'),
                (HASH, 'h'),
                (ZSET, 'z'),
                (EXPIRED, 'x'),
                (EVICTED, 'e'),
                (STREAM, 't'),
                (MODULE, 'd'),
                (NEW, 'n'),
            ] {
                if self.0 & bit != 0 {
                    text.push(letter);
                }
            }
        }
        for (bit, letter) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
            if self.0 & bit != 0 {
                text.push(letter);
            }
        }
        text
    }

    /// The text kept in the database: [`Flags::text`], but with `n` beside `A` (which Redis's
    /// text leaves out, though the setting keeps it).
    fn stored(self) -> String {
        let mut text = self.text();
        if self.0 & ALL == ALL && self.0 & NEW != 0 {
            text.push('n');
        }
        text
    }

    /// Whether any event is published: a class, and a channel kind (K or E), as Redis needs both.
    pub fn emits(self) -> bool {
        self.0 & (KEYSPACE | KEYEVENT) != 0 && self.0 & !(KEYSPACE | KEYEVENT | TRACKED) != 0
    }

    /// Whether writes must send the keys they change (CLIENT TRACKING somewhere in the fleet).
    pub fn tracked(self) -> bool {
        self.0 & TRACKED != 0
    }

    fn tracking(self, tracked: bool) -> Flags {
        match tracked {
            true => Flags(self.0 | TRACKED),
            false => Flags(self.0 & !TRACKED),
        }
    }

    fn has(self, class: u16) -> bool {
        self.0 & class != 0
    }
}

/// Each keyspace's setting as this gateway knows it, by bucket.
pub struct KeyspaceEvents {
    catalog: std::sync::Arc<Catalog>,
    known: Mutex<Known>,
    /// This gateway, in the invalidations its batches send (NOLOOP tells its own clients' writes
    /// by it): random, as client ids are per gateway.
    pub token: u64,
}

#[derive(Default)]
struct Known {
    flags: HashMap<String, Flags>,
    /// Whether each keyspace is tracked (`pgvs3.resp_tracked`), cached apart: a setting's
    /// change does not tell it.
    tracked: HashMap<String, bool>,
    /// Counts the times what is cached was forgotten or changed: a load that began before
    /// must not store what it read.
    generation: u64,
}

impl KeyspaceEvents {
    pub fn new(catalog: std::sync::Arc<Catalog>) -> KeyspaceEvents {
        use std::hash::{BuildHasher, Hasher};
        KeyspaceEvents {
            catalog,
            known: Mutex::default(),
            token: std::collections::hash_map::RandomState::new().build_hasher().finish(),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `bucket`'s setting, with whether it is tracked: cached, or read from the database once.
    pub async fn flags(&self, bucket: &str) -> StoreResult<Flags> {
        let (generation, flags, tracked) = {
            let known = self.known();
            let (flags, tracked) = (known.flags.get(bucket).copied(), known.tracked.get(bucket).copied());
            if let (Some(flags), Some(tracked)) = (flags, tracked) {
                return Ok(flags.tracking(tracked));
            }
            (known.generation, flags, tracked)
        };
        let flags = match flags {
            Some(flags) => flags,
            None => self
                .catalog
                .keyspace_events(bucket)
                .await?
                .and_then(|text| Flags::parse(text.as_bytes()))
                .unwrap_or_default(),
        };
        let tracked = match tracked {
            Some(tracked) => tracked,
            None => self.catalog.keyspace_tracked(bucket).await?,
        };
        let mut known = self.known();
        if known.generation == generation {
            known.flags.insert(bucket.to_owned(), flags);
            known.tracked.insert(bucket.to_owned(), tracked);
        }
        Ok(flags.tracking(tracked))
    }

    /// A keyspace's trackers changed: read again whether it is tracked. `tracked` when this
    /// gateway knows (it marked the keyspace itself).
    pub(crate) fn trackers_changed(&self, bucket: &[u8], tracked: Option<bool>) {
        let Ok(bucket) = std::str::from_utf8(bucket) else {
            return;
        };
        let mut known = self.known();
        // A load that began before may have read the old state: it must not store it (a
        // keyspace taken as untracked would send no invalidations until told again).
        known.generation += 1;
        match tracked {
            Some(tracked) => known.tracked.insert(bucket.to_owned(), tracked),
            None => known.tracked.remove(bucket),
        };
    }

    /// CONFIG SET: stores the setting and tells every gateway (this one included, through its
    /// LISTEN connection; until then this one knows it already).
    pub async fn set(&self, bucket: &str, flags: Flags) -> StoreResult<()> {
        let mut channel = vec![SETTING];
        channel.extend_from_slice(bucket.as_bytes());
        let stored = flags.stored();
        self.catalog
            .set_keyspace_events(bucket, &stored, &channel, super::pubsub::INLINE_LIMIT)
            .await?;
        self.changed(bucket.as_bytes(), stored.as_bytes());
        Ok(())
    }

    /// A keyspace's setting changed (told by the gateway that changed it).
    pub(crate) fn changed(&self, bucket: &[u8], flags: &[u8]) {
        let (Ok(bucket), Some(flags)) = (std::str::from_utf8(bucket), Flags::parse(flags)) else {
            return;
        };
        self.known().flags.insert(bucket.to_owned(), flags);
    }

    /// The LISTEN connection was lost or opened again: changes may have been missed.
    pub(crate) fn forget(&self) {
        let mut known = self.known();
        known.flags.clear();
        known.tracked.clear();
        known.generation += 1;
    }
}

/// Who ran a batch's commands: this gateway ([`KeyspaceEvents::token`]) and each command's
/// client, as the invalidations name them (CLIENT TRACKING's NOLOOP).
pub struct Writers<'a> {
    pub token: u64,
    pub clients: &'a [u64],
}

/// Runs a write batch's `commands` (`keys::apply_all`) and commits it, with their events when
/// its keyspace's `flags` emit any or the keys they changed when it is tracked: the one place a
/// batch of key commands records them (scripts record theirs command by command, script.rs). A
/// batch that publishes events must have its keys loaded (not a blind overwrite): some events
/// depend on what the keys held; the keys a batch changes do not. Such a batch runs in runs
/// ([`Recorder::run_length`]): a command on a key that an earlier one may have emptied waits
/// until the recorder has seen whether it did.
pub async fn apply_and_commit(
    flags: Flags,
    commands: &[&KeyCommand],
    writers: Writers<'_>,
    mut batch: KvBatch,
) -> StoreResult<(Vec<Reply>, Changed)> {
    let Some(mut recorder) = Recorder::new(flags, writers.token) else {
        let replies = super::keys::apply_all(commands, &mut batch, true).await?;
        batch.commit().await?;
        return Ok((replies, Changed::default()));
    };
    recorder.look_up_consumers(commands, &mut batch).await?;
    for command in commands {
        recorder.before(command, &batch);
    }
    let mut replies = Vec::with_capacity(commands.len());
    while replies.len() < commands.len() {
        let start = replies.len();
        let run = &commands[start..start + recorder.run_length(&commands[start..])];
        // Not committed with a last typed run: the events go out with the commit.
        let run_replies = super::keys::apply_all(run, &mut batch, false).await?;
        for (at, (command, reply)) in run.iter().zip(&run_replies).enumerate() {
            recorder.writer = writers.clients.get(start + at).copied().unwrap_or_default();
            recorder.after(command, reply);
        }
        replies.extend(run_replies);
        if replies.len() < commands.len() {
            recorder.settle(&mut batch, run).await?;
        }
    }
    let changed = recorder.finish(&mut batch).await?;
    batch.commit().await?;
    Ok((replies, changed))
}

/// The keys a committed batch of a tracked keyspace changed, each with its writer: this
/// gateway's tracking clients are told of them before the batch's replies go out
/// (tracking.rs); the other gateways by the batch's message.
#[derive(Debug, Default)]
pub struct Changed(Vec<(String, u64)>);

impl Changed {
    pub fn tell(&self, tracking: &super::tracking::Tracking, bucket: &str) {
        if !self.0.is_empty() {
            tracking.invalidate(
                bucket.as_bytes(),
                true,
                self.0.iter().map(|(key, writer)| (key.as_bytes(), *writer)),
            );
        }
    }
}

/// One event as a gateway receives it.
struct ReceivedEvent<'a> {
    published: bool,
    name: &'a [u8],
    key: &'a [u8],
    writer: u64,
}

/// A batch's events as a gateway receives them (see [`Recorder::pack`]).
pub(crate) struct Received<'a> {
    pub bucket: &'a [u8],
    kinds: u16,
    /// The gateway that sent them, when it named their writers.
    pub token: Option<u64>,
    events: Vec<ReceivedEvent<'a>>,
}

impl<'a> Received<'a> {
    pub(crate) fn unpack(message: &'a [u8]) -> Option<Received<'a>> {
        fn take<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
            let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            let part = rest.get(4..4usize.checked_add(len)?)?;
            *rest = &rest[4 + len..];
            Some(part)
        }
        fn number(rest: &mut &[u8]) -> Option<u64> {
            let value = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
            *rest = &rest[8..];
            Some(value)
        }
        let (&kinds, mut rest) = message.split_first()?;
        let bucket = take(&mut rest)?;
        let with_writers = kinds & WITH_WRITERS != 0;
        let token = match with_writers {
            true => Some(number(&mut rest)?),
            false => None,
        };
        let mut events = Vec::new();
        while !rest.is_empty() {
            let published = match with_writers {
                true => {
                    let (&published, after) = rest.split_first()?;
                    rest = after;
                    published != 0
                }
                false => true,
            };
            let name = take(&mut rest)?;
            let key = take(&mut rest)?;
            let writer = match with_writers {
                true => number(&mut rest)?,
                false => 0,
            };
            events.push(ReceivedEvent {
                published,
                name,
                key,
                writer,
            });
        }
        Some(Received {
            bucket,
            kinds: u16::from(kinds & !WITH_WRITERS),
            token,
            events,
        })
    }

    /// The keys the batch changed, each with its writer (0: unknown), for invalidation.
    pub(crate) fn changed(&self) -> impl Iterator<Item = (&'a [u8], u64)> + '_ {
        self.events.iter().map(|event| (event.key, event.writer))
    }

    /// The (channel, message) pairs to deliver for a database numbered `db`, the keyspace
    /// channel's first, as Redis sends them.
    pub(crate) fn deliveries(&self, db: u32) -> Vec<(Bytes, Bytes)> {
        let mut out = Vec::with_capacity(self.events.len() * 2);
        for ReceivedEvent { name, key, .. } in self.events.iter().filter(|event| event.published) {
            if self.kinds & KEYSPACE != 0 {
                let mut channel = format!("__keyspace@{db}__:").into_bytes();
                channel.extend_from_slice(key);
                out.push((Bytes::from(channel), Bytes::copy_from_slice(name)));
            }
            if self.kinds & KEYEVENT != 0 {
                let mut channel = format!("__keyevent@{db}__:").into_bytes();
                channel.extend_from_slice(name);
                out.push((Bytes::from(channel), Bytes::copy_from_slice(key)));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_and_show_as_redis_does() {
        for (given, shown) in [
            ("", ""),
            ("KEA", "AKE"),
            ("Kx", "xK"),
            ("E$lshzxetg", "g$lshzxetE"),
            ("g$lshzxetdK", "AK"),
            ("KEm", "KEm"),
        ] {
            assert_eq!(
                Flags::parse(given.as_bytes()).map(Flags::text).as_deref(),
                Some(shown),
                "{given}"
            );
        }
        assert_eq!(Flags::parse(b"KEq"), None);
        let with_new = Flags::parse(b"KEAn").unwrap();
        assert_eq!(with_new.text(), "AKE");
        assert_eq!(Flags::parse(with_new.stored().as_bytes()), Some(with_new));
        assert!(!Flags::parse(b"K").unwrap().emits());
        assert!(!Flags::parse(b"A").unwrap().emits());
        assert!(Flags::parse(b"Kg").unwrap().emits());
    }

    #[test]
    fn events_pack_and_unpack() {
        let mut recorder = Recorder::new(Flags::parse(b"KEA").unwrap(), 7).unwrap();
        recorder.emit(STRING, "set", "a");
        recorder.emit(GENERIC, "del", "b:c");
        let message = recorder.pack("bucket").unwrap();
        let received = Received::unpack(&message).unwrap();
        assert_eq!(received.bucket, b"bucket");
        let got: Vec<(String, String)> = received
            .deliveries(2)
            .into_iter()
            .map(|(c, m)| {
                (
                    String::from_utf8(c.to_vec()).unwrap(),
                    String::from_utf8(m.to_vec()).unwrap(),
                )
            })
            .collect();
        let want = [
            ("__keyspace@2__:a", "set"),
            ("__keyevent@2__:set", "a"),
            ("__keyspace@2__:b:c", "del"),
            ("__keyevent@2__:del", "b:c"),
        ];
        assert_eq!(got, want.map(|(c, m)| (c.to_owned(), m.to_owned())));
    }

    /// A tracked keyspace's message has every event (their keys invalidate) with its writer and
    /// the gateway's token, and publishes only the classes the setting emits.
    #[test]
    fn a_tracked_keyspace_sends_every_changed_key_with_its_writer() {
        let flags = Flags::parse(b"Kh").unwrap().tracking(true);
        let mut recorder = Recorder::new(flags, 42).unwrap();
        recorder.writer = 7;
        recorder.emit(STRING, "set", "a");
        recorder.writer = 8;
        recorder.emit(HASH, "hset", "h");
        let message = recorder.pack("bucket").unwrap();
        let received = Received::unpack(&message).unwrap();
        assert_eq!(received.token, Some(42));
        let changed: Vec<(&[u8], u64)> = received.changed().collect();
        // `new` before each command's own event, as Redis says it.
        assert_eq!(changed, [(&b"a"[..], 7), (b"a", 7), (b"h", 8), (b"h", 8)]);
        let published: Vec<(Bytes, Bytes)> = received.deliveries(0);
        assert_eq!(
            published,
            [(Bytes::from_static(b"__keyspace@0__:h"), Bytes::from_static(b"hset"))]
        );
        // Tracked, with no events set: the keys still go, nothing is published.
        let mut recorder = Recorder::new(Flags::default().tracking(true), 1).unwrap();
        recorder.emit(STRING, "set", "a");
        let message = recorder.pack("bucket").unwrap();
        assert!(Received::unpack(&message).unwrap().deliveries(0).is_empty());
        assert!(Recorder::new(Flags::default(), 1).is_none());
    }
}
