//! CLIENT TRACKING (Redis's client-side caching): which clients of this gateway track which
//! keys, and the invalidation messages they get when those keys change on any gateway.
//!
//! The keys come from the fleet's write batches: while this gateway has tracking clients it
//! marks its keyspaces tracked in the database (`pgvs3.resp_track`, by its LISTEN connection's
//! backend, so a gateway that dies stops counting), and every gateway's batches on a tracked
//! keyspace send the keys they change with their commit (notify.rs); the LISTEN connection
//! hands the other gateways' here, and this gateway's own batches tell it as they commit,
//! before their replies. A connection that does not track costs nothing on its commands: it is not
//! in these tables, and untracked keyspaces send nothing.
//!
//! As in Redis: a tracking client in the default mode is told about the keys it read (its
//! read-only commands' keys, remembered before the command runs, so that a change committed
//! while it reads is never missed), once per key until it reads it again; in BCAST mode about
//! every changed key under its prefixes. The table of remembered keys holds at most
//! `tracking-table-max-keys` keys on this gateway; past it, keys are dropped and their clients
//! told, as if the keys changed. Invalidations go to the client (RESP3 pushes) or to the client
//! it redirects to (RESP3 pushes, or RESP2 messages on `__redis__:invalidate` to a subscriber),
//! through the same bounded mailboxes as pub/sub messages.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::clients::Clients;
use super::codec::Reply;
use super::pubsub::{Delivery, Readable};

/// Redis's default `tracking-table-max-keys`.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// A tracking client's options (CLIENT TRACKING ON ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mode {
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// The client its invalidations go to (0: itself).
    pub redirect: u64,
    pub prefixes: Vec<Bytes>,
}

impl Mode {
    /// Reads CLIENT TRACKING's options (after ON/OFF), with Redis's errors and in its order;
    /// `exists` tells whether a REDIRECT's client exists.
    pub fn parse(options: &[Bytes], exists: impl Fn(u64) -> bool) -> Result<Mode, Reply> {
        let mut mode = Mode::default();
        let mut i = 0;
        while i < options.len() {
            let more = i + 1 < options.len();
            match options[i].to_ascii_lowercase().as_slice() {
                b"redirect" if more => {
                    i += 1;
                    if mode.redirect != 0 {
                        return Err(Reply::error("ERR A client can only redirect to a single other client"));
                    }
                    let Some(id) = super::command::parse_integer(&options[i]) else {
                        return Err(super::command::not_an_integer());
                    };
                    if !u64::try_from(id).is_ok_and(&exists) {
                        return Err(Reply::error("ERR The client ID you want redirect to does not exist"));
                    }
                    mode.redirect = id as u64;
                }
                b"bcast" => mode.bcast = true,
                b"optin" => mode.optin = true,
                b"optout" => mode.optout = true,
                b"noloop" => mode.noloop = true,
                b"prefix" if more => {
                    i += 1;
                    mode.prefixes.push(options[i].clone());
                }
                _ => return Err(super::command::syntax_error()),
            }
            i += 1;
        }
        Ok(mode)
    }

    /// Whether a read by the client is remembered, after CLIENT CACHING `caching` (given for
    /// this command).
    pub fn remembers(&self, caching: bool) -> bool {
        // OPTIN: only with CACHING YES given; OPTOUT: unless CACHING NO was given.
        let chosen = match (self.optin, self.optout) {
            (true, _) => caching,
            (_, true) => !caching,
            _ => true,
        };
        !self.bcast && chosen
    }
}

/// Redis's checks of CLIENT TRACKING ON against the client's present mode (`current`), in its
/// order.
pub fn check_on(mode: &Mode, current: Option<&Mode>) -> Result<(), Reply> {
    if !mode.bcast && !mode.prefixes.is_empty() {
        return Err(Reply::error("ERR PREFIX option requires BCAST mode to be enabled"));
    }
    if let Some(current) = current
        && current.bcast != mode.bcast
    {
        return Err(Reply::error(
            "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.",
        ));
    }
    if mode.bcast && (mode.optin || mode.optout) {
        return Err(Reply::error("ERR OPTIN and OPTOUT are not compatible with BCAST"));
    }
    if mode.optin && mode.optout {
        return Err(Reply::error("ERR You can't specify both OPTIN mode and OPTOUT mode"));
    }
    if let Some(current) = current
        && ((mode.optin && current.optout) || (mode.optout && current.optin))
    {
        return Err(Reply::error(
            "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.",
        ));
    }
    if mode.bcast {
        let existing = current.map_or(&[][..], |current| &current.prefixes[..]);
        for (at, prefix) in mode.prefixes.iter().enumerate() {
            if let Some(collision) = existing.iter().find(|old| overlaps(old, prefix)) {
                return Err(Reply::error(format!(
                    "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                    String::from_utf8_lossy(prefix),
                    String::from_utf8_lossy(collision)
                )));
            }
            if let Some(other) = mode.prefixes[at + 1..].iter().find(|other| overlaps(prefix, other)) {
                return Err(Reply::error(format!(
                    "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                    String::from_utf8_lossy(prefix),
                    String::from_utf8_lossy(other)
                )));
            }
        }
    }
    Ok(())
}

/// Redis's `stringCheckPrefix`: one is a prefix of the other.
fn overlaps(a: &[u8], b: &[u8]) -> bool {
    let shorter = a.len().min(b.len());
    a[..shorter] == b[..shorter]
}

/// A tracking client of this gateway.
struct Tracker {
    mode: Mode,
    /// The keyspaces whose changes BCAST may tell it of.
    readable: Readable,
    /// The user whose connections its REDIRECT may reach (`None`: any, the root key's), as
    /// CLIENT TRACKING checked it; looked at again at each invalidation, so that a redirect
    /// client signed in as another key since is as gone (`tracking-redir-broken`).
    owner: Option<String>,
    /// Its REDIRECT's client was gone when an invalidation was due (TRACKINGINFO's
    /// `broken_redirect`).
    broken: bool,
}

/// See [`Tracking::totals`].
pub struct Totals {
    pub clients: usize,
    pub keys: usize,
    pub items: usize,
    pub prefixes: usize,
}

#[derive(Default)]
struct State {
    trackers: HashMap<u64, Tracker>,
    /// Remembered keys by keyspace (bucket) and key: the default-mode clients that read them.
    /// A client that stopped tracking is dropped from a key's list when the key changes.
    keys: HashMap<String, HashMap<Bytes, Vec<u64>>>,
    remembered: usize,
}

impl State {
    /// Drops keys past `max` (0: no limit) and answers the invalidations of their readers, as
    /// if the keys changed.
    fn over_limit(&mut self, max: usize) -> Vec<Invalidation> {
        let mut due = Vec::new();
        while max > 0 && self.remembered > max {
            // Any key: Redis drops random ones.
            let Some((bucket, table)) = self.keys.iter_mut().find(|(_, table)| !table.is_empty()) else {
                break;
            };
            let Some(key) = table.keys().next().cloned() else { break };
            let bucket = bucket.clone();
            let readers = self
                .keys
                .get_mut(&bucket)
                .and_then(|table| table.remove(&key))
                .unwrap_or_default();
            self.remembered -= 1;
            for reader in readers {
                if self.trackers.get(&reader).is_some_and(|tracker| !tracker.mode.bcast) {
                    due.push((reader, Some(vec![key.clone()])));
                }
            }
        }
        due
    }
}

/// This gateway's tracking clients and the keys they read.
pub struct Tracking {
    state: Mutex<State>,
    max_keys: AtomicUsize,
    /// What a mailbox may hold (`--resp-pubsub-output-limit`): invalidations wait with the
    /// messages, under the same limit.
    output_limit: usize,
    /// Where the clients' (and their redirects') mailboxes are found.
    clients: Arc<Clients>,
    /// Whether this gateway's keyspaces are marked tracked in the database; held while they
    /// are marked or unmarked, so that the marks follow the trackers in order.
    pub(crate) marked: tokio::sync::Mutex<bool>,
}

/// One invalidation for one tracking client: the keys, or `None` for all of them (a flush).
type Invalidation = (u64, Option<Vec<Bytes>>);

impl Tracking {
    pub fn new(output_limit: usize, clients: Arc<Clients>) -> Tracking {
        Tracking {
            state: Mutex::default(),
            max_keys: AtomicUsize::new(DEFAULT_MAX_KEYS),
            output_limit,
            clients,
            marked: tokio::sync::Mutex::new(false),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `tracking-table-max-keys` (0: no limit).
    pub fn max_keys(&self) -> usize {
        self.max_keys.load(Ordering::Relaxed)
    }

    /// CONFIG SET tracking-table-max-keys: this gateway's table, trimmed to it at once.
    pub fn set_max_keys(&self, max: usize) {
        self.max_keys.store(max, Ordering::Relaxed);
        let due = self.state().over_limit(max);
        self.send(due);
    }

    /// INFO's counts of this gateway's table, as Redis's: tracking clients, remembered keys,
    /// their (key, reader) items, and the distinct BCAST prefixes.
    pub fn totals(&self) -> Totals {
        let state = self.state();
        let prefixes: std::collections::HashSet<&Bytes> = state
            .trackers
            .values()
            .filter(|tracker| tracker.mode.bcast)
            .flat_map(|tracker| &tracker.mode.prefixes)
            .collect();
        Totals {
            clients: state.trackers.len(),
            keys: state.remembered,
            items: state.keys.values().flat_map(|table| table.values()).map(Vec::len).sum(),
            prefixes: prefixes.len(),
        }
    }

    /// Whether any client of this gateway tracks.
    pub fn any(&self) -> bool {
        !self.state().trackers.is_empty()
    }

    /// The client's mode, when it tracks (for CLIENT TRACKING's checks).
    pub fn mode(&self, id: u64) -> Option<Mode> {
        self.state().trackers.get(&id).map(|tracker| tracker.mode.clone())
    }

    /// CLIENT TRACKING ON (checked): its options replace the last ones, but BCAST prefixes add
    /// up, as in Redis.
    /// Client `id` tracks as `mode` says; in BCAST mode, the keys of `readable` keyspaces.
    pub fn enable(&self, id: u64, mut mode: Mode, readable: Readable, owner: Option<String>) {
        let mut state = self.state();
        if mode.bcast {
            if mode.prefixes.is_empty() {
                mode.prefixes.push(Bytes::new());
            }
            if let Some(old) = state.trackers.get(&id) {
                let mut prefixes = old.mode.prefixes.clone();
                prefixes.extend(
                    mode.prefixes
                        .into_iter()
                        .filter(|prefix| !old.mode.prefixes.contains(prefix)),
                );
                mode.prefixes = prefixes;
            }
        }
        state.trackers.insert(
            id,
            Tracker {
                mode,
                readable,
                owner,
                broken: false,
            },
        );
    }

    /// Client `id`'s key may read `readable` now, and redirect to `owner`'s connections (its
    /// rights changed, or it signed in as another key): BCAST tells it of those keyspaces, and
    /// its REDIRECT must be `owner`'s, from now on.
    pub fn set_rights(&self, id: u64, readable: Readable, owner: Option<String>) {
        if let Some(tracker) = self.state().trackers.get_mut(&id) {
            tracker.readable = readable;
            tracker.owner = owner;
        }
    }

    /// Client `id` signed in as another tenant's key: the keys it read as the other are
    /// forgotten (their changes are no longer its to hear of), and it is told to forget all it
    /// cached (a null invalidation, as after a flush), which it read as the other.
    pub fn forget(&self, id: u64) {
        {
            let mut state = self.state();
            let mut dropped = 0;
            for table in state.keys.values_mut() {
                table.retain(|_, readers| {
                    readers.retain(|reader| *reader != id);
                    let empty = readers.is_empty();
                    dropped += usize::from(empty);
                    !empty
                });
            }
            state.remembered -= dropped;
        }
        self.send(vec![(id, None)]);
    }

    /// CLIENT TRACKING OFF, or the connection ended.
    pub fn disable(&self, id: u64) {
        self.state().trackers.remove(&id);
    }

    /// CLIENT TRACKINGINFO's flags, redirect and prefixes.
    pub fn info(&self, id: u64, caching: bool) -> Reply {
        let state = self.state();
        let Some(tracker) = state.trackers.get(&id) else {
            return info_reply(vec!["off"], -1, Vec::new());
        };
        let mode = &tracker.mode;
        let mut flags = vec!["on"];
        for (set, flag) in [
            (mode.bcast, "bcast"),
            (mode.optin, "optin"),
            (mode.optin && caching, "caching-yes"),
            (mode.optout, "optout"),
            (mode.optout && caching, "caching-no"),
            (mode.noloop, "noloop"),
            (tracker.broken, "broken_redirect"),
        ] {
            if set {
                flags.push(flag);
            }
        }
        let mut prefixes = mode.prefixes.clone();
        prefixes.sort();
        info_reply(flags, mode.redirect as i64, prefixes)
    }

    /// Remembers that client `id` read `keys` of `bucket`; past the table's limit, drops keys
    /// (and tells their clients) until it is within it again.
    pub fn remember<'k>(&self, id: u64, bucket: &str, keys: impl IntoIterator<Item = &'k [u8]>) {
        let max = self.max_keys();
        let due = {
            let mut state = self.state();
            let state = &mut *state;
            let table = state.keys.entry(bucket.to_owned()).or_default();
            for key in keys {
                let readers = table.entry(Bytes::copy_from_slice(key)).or_default();
                if readers.is_empty() {
                    state.remembered += 1;
                }
                if !readers.contains(&id) {
                    readers.push(id);
                }
            }
            state.over_limit(max)
        };
        self.send(due);
    }

    /// Keys of `bucket` changed (each with its writer, `from_here` when the writers are clients
    /// of this gateway): the clients that read them, and the BCAST clients whose prefixes they
    /// are under, are told. This gateway's own batches tell it as they commit, before their
    /// replies (so a read after a write here is never told of that write); the other gateways'
    /// come by the LISTEN connection.
    pub fn invalidate<'k>(&self, bucket: &[u8], from_here: bool, changed: impl Iterator<Item = (&'k [u8], u64)>) {
        let due = {
            let mut state = self.state();
            let state = &mut *state;
            if state.trackers.is_empty() && state.remembered == 0 {
                return;
            }
            let bucket = String::from_utf8_lossy(bucket);
            let mut due: Vec<Invalidation> = Vec::new();
            // BCAST: per client and prefix, the keys in the order they came, once each.
            let mut broadcast: Vec<((u64, usize), Vec<Bytes>)> = Vec::new();
            let mut seen: HashSet<&[u8]> = HashSet::new();
            for (key, writer) in changed {
                let own = |id: u64| from_here && writer == id;
                if let Some(readers) = state.keys.get_mut(bucket.as_ref()).and_then(|table| table.remove(key)) {
                    state.remembered -= 1;
                    for reader in readers {
                        match state.trackers.get(&reader) {
                            Some(tracker) if !tracker.mode.bcast && (!tracker.mode.noloop || !own(reader)) => {
                                due.push((reader, Some(vec![Bytes::copy_from_slice(key)])));
                            }
                            _ => {}
                        }
                    }
                }
                let first = seen.insert(key);
                for (id, tracker) in &state.trackers {
                    if !tracker.mode.bcast
                        || (tracker.mode.noloop && own(*id))
                        || !tracker.readable.allows(bucket.as_bytes())
                    {
                        continue;
                    }
                    for (at, prefix) in tracker.mode.prefixes.iter().enumerate() {
                        if !key.starts_with(prefix) {
                            continue;
                        }
                        let slot = match broadcast.iter().position(|(to, _)| *to == (*id, at)) {
                            Some(slot) => slot,
                            None => {
                                broadcast.push(((*id, at), Vec::new()));
                                broadcast.len() - 1
                            }
                        };
                        let keys = &mut broadcast[slot].1;
                        if first || !keys.iter().any(|known| known[..] == *key) {
                            keys.push(Bytes::copy_from_slice(key));
                        }
                    }
                }
            }
            due.extend(broadcast.into_iter().map(|((id, _), keys)| (id, Some(keys))));
            due
        };
        self.send(due);
    }

    /// A tracked keyspace was flushed, or this gateway may have missed invalidations (its
    /// LISTEN connection was lost): every tracking client forgets all its keys (Redis's null
    /// invalidation), and the table is emptied.
    pub fn invalidate_all(&self) {
        let due = {
            let mut state = self.state();
            state.keys.clear();
            state.remembered = 0;
            state.trackers.keys().map(|id| (*id, None)).collect()
        };
        self.send(due);
    }

    /// Hands each invalidation to its client's mailbox, or its redirect's (see the module's
    /// comment); a redirect that is gone marks the client and, in RESP3, tells it.
    fn send(&self, due: Vec<Invalidation>) {
        let clients = &self.clients;
        if due.is_empty() {
            return;
        }
        let mut broken = Vec::new();
        for (id, keys) in due {
            let Some((redirect, owner)) = self
                .state()
                .trackers
                .get(&id)
                .map(|tracker| (tracker.mode.redirect, tracker.owner.clone()))
            else {
                continue;
            };
            if redirect == 0 {
                if let Some((Some(mailbox), 3, _)) = clients.inbox(id, None) {
                    mailbox.push(Delivery::Invalidate { keys, message: false }, self.output_limit);
                }
                continue;
            }
            match clients.inbox(redirect, owner.as_deref()) {
                None => {
                    broken.push(id);
                    if let Some((Some(mailbox), 3, _)) = clients.inbox(id, None) {
                        mailbox.push(Delivery::RedirectBroken(redirect), self.output_limit);
                    }
                }
                Some((Some(mailbox), 3, _)) => {
                    mailbox.push(Delivery::Invalidate { keys, message: false }, self.output_limit)
                }
                Some((Some(mailbox), _, true)) => {
                    mailbox.push(Delivery::Invalidate { keys, message: true }, self.output_limit)
                }
                // A RESP2 client that is not subscribed can be sent nothing, as in Redis.
                Some(_) => {}
            }
        }
        let mut state = self.state();
        for id in broken {
            if let Some(tracker) = state.trackers.get_mut(&id) {
                tracker.broken = true;
            }
        }
    }
}

fn info_reply(flags: Vec<&str>, redirect: i64, prefixes: Vec<Bytes>) -> Reply {
    Reply::Map(vec![
        (
            Reply::text("flags"),
            Reply::Array(flags.into_iter().map(Reply::text).collect()),
        ),
        (Reply::text("redirect"), Reply::Integer(redirect)),
        (
            Reply::text("prefixes"),
            Reply::Array(prefixes.into_iter().map(Reply::Bulk).collect()),
        ),
    ])
}

/// The frame of an invalidation: a RESP3 push `invalidate`, or a RESP2 pub/sub message on
/// `__redis__:invalidate`; the keys, or null for all of them.
pub fn invalidation_reply(keys: Option<Vec<Bytes>>, message: bool) -> Reply {
    let keys = match keys {
        Some(keys) => Reply::Array(keys.into_iter().map(Reply::Bulk).collect()),
        None => Reply::Nil,
    };
    match message {
        true => Reply::Push(vec![Reply::text("message"), Reply::text("__redis__:invalidate"), keys]),
        false => Reply::Push(vec![Reply::text("invalidate"), keys]),
    }
}

/// What a mailbox's invalidations hold of the pub/sub output limit.
pub fn size(keys: &Option<Vec<Bytes>>) -> usize {
    keys.as_ref()
        .map_or(0, |keys| keys.iter().map(|key| key.len() + 16).sum())
        + 48
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<Bytes> {
        text.split_whitespace()
            .map(|word| Bytes::copy_from_slice(word.as_bytes()))
            .collect()
    }

    #[test]
    fn options_are_read_and_checked_as_redis_does() {
        let exists = |id: u64| id == 7;
        assert_eq!(
            Mode::parse(&words("REDIRECT 7 BCAST PREFIX a: PREFIX b: NOLOOP"), exists),
            Ok(Mode {
                bcast: true,
                noloop: true,
                redirect: 7,
                prefixes: words("a: b:"),
                ..Mode::default()
            })
        );
        let error = |text: &str| match Mode::parse(&words(text), exists).and_then(|mode| check_on(&mode, None)) {
            Err(Reply::Error(error)) => error,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            error("REDIRECT 8"),
            "ERR The client ID you want redirect to does not exist"
        );
        assert_eq!(
            error("REDIRECT 7 REDIRECT 7"),
            "ERR A client can only redirect to a single other client"
        );
        assert_eq!(error("PREFIX a"), "ERR PREFIX option requires BCAST mode to be enabled");
        assert_eq!(
            error("BCAST OPTIN"),
            "ERR OPTIN and OPTOUT are not compatible with BCAST"
        );
        assert_eq!(
            error("OPTIN OPTOUT"),
            "ERR You can't specify both OPTIN mode and OPTOUT mode"
        );
        assert_eq!(error("NOSUCH"), "ERR syntax error");
        assert_eq!(error("REDIRECT"), "ERR syntax error");
        assert_eq!(
            error("BCAST PREFIX foo PREFIX foobar"),
            "ERR Prefix 'foo' overlaps with another provided prefix 'foobar'. Prefixes for a single client must not overlap."
        );
        let current = Mode::parse(&words("BCAST PREFIX abc"), exists).unwrap();
        let mode = Mode::parse(&words("BCAST PREFIX ab"), exists).unwrap();
        assert_eq!(
            check_on(&mode, Some(&current)),
            Err(Reply::error(
                "ERR Prefix 'ab' overlaps with an existing prefix 'abc'. Prefixes for a single client must not overlap."
            ))
        );
    }

    #[test]
    fn a_key_is_invalidated_once_for_its_readers_and_the_table_is_bounded() {
        let tracking = Tracking::new(1 << 20, Arc::default());
        tracking.enable(1, Mode::default(), Readable::All, None);
        tracking.remember(1, "b", [&b"k"[..], b"j"]);
        assert_eq!(tracking.state().remembered, 2);
        tracking.invalidate(b"b", false, [(&b"k"[..], 0)].into_iter());
        assert_eq!(tracking.state().remembered, 1);
        // Another keyspace's key of the same name is another key.
        tracking.invalidate(b"other", false, [(&b"j"[..], 0)].into_iter());
        assert_eq!(tracking.state().remembered, 1);
        tracking.set_max_keys(2);
        tracking.remember(1, "b", [&b"x"[..], b"y", b"z"]);
        assert_eq!(tracking.state().remembered, 2);
        tracking.invalidate_all();
        assert_eq!(tracking.state().remembered, 0);
    }
}
