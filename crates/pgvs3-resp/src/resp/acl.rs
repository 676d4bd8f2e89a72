//! ACL users as Redis 7.0 has them, mapped onto access keys: a RESP user is an access key (its
//! name the key's id, its password the key's secret), or `default` (`AUTH <password>`, or no
//! AUTH where none is needed), which acts as the root key. ACL SETUSER's rules only narrow: what
//! a command may do is what the key's own rights (bucket ownership, key policy, read-only) allow
//! *and* what the user's rules allow. A user no rule narrowed is `on ~* &* +@all`.
//!
//! The rules are kept in PostgreSQL (`pgvs3.resp_acl_users`), so they survive restarts and hold
//! for the whole fleet: a change moves the catalog version, every gateway learns of it by the
//! catalog's NOTIFY, and each connection compares that version before each command it runs,
//! reading its user's rules again when it moved (see `Connection::refresh_user`). ACL DELUSER
//! counts each user's deletions (`pgvs3.resp_acl_deletions`); a connection remembers the count
//! when it signs in and is closed once it moved, as Redis closes a deleted user's connections,
//! even when the user got rules again, or got rules and lost them, between two of its looks.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::codec::Reply;
use super::command::{COMMANDS, Spec};
use super::command_info;
use super::glob;
use crate::store::{Catalog, StoreError};

/// Most users the fleet keeps rules for (rows of `pgvs3.resp_acl_users`).
pub(crate) const MAX_USERS: i64 = 10_000;
/// Most command rules (`+get`, `-@write`, ...) one user keeps.
pub(crate) const MAX_COMMAND_RULES: usize = 1_000;
/// Most key and channel patterns one user keeps, and the longest pattern.
pub(crate) const MAX_PATTERNS: usize = 1_000;
const MAX_PATTERN_BYTES: usize = 1024;
/// ACL LOG's length (Redis's `acllog-max-len` default), and how long a repeated denial counts
/// into the entry before it (as Redis groups them).
const LOG_ENTRIES: usize = 128;
const LOG_GROUPING: Duration = Duration::from_secs(60);

/// ACL CAT's categories, in Redis's order.
pub(crate) const CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

#[derive(Debug, Clone, PartialEq)]
struct KeyPattern {
    pattern: String,
    read: bool,
    write: bool,
}

/// One user's rules.
#[derive(Debug, Clone)]
pub(crate) struct User {
    pub(crate) enabled: bool,
    /// By the command's place in [`COMMANDS`].
    allowed: Vec<bool>,
    /// Subcommands (or first arguments) allowed or denied apart from their command.
    exceptions: Vec<(usize, String, bool)>,
    /// The command rules as given, from the last `+@all`/`-@all` on: GETUSER's `commands`.
    command_rules: Vec<String>,
    all_keys: bool,
    keys: Vec<KeyPattern>,
    all_channels: bool,
    channels: Vec<String>,
    /// Nothing narrowed (kept by `apply`): the per-command check is skipped.
    everything: bool,
}

/// Why a command may not run, with the argument at fault.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Denied {
    /// The command (`get`, or `config|set`).
    Command(String),
    Key(Bytes),
    Channel(Bytes),
}

impl Denied {
    /// The error a client gets.
    pub(crate) fn reply(&self) -> Reply {
        Reply::error(match self {
            Denied::Command(name) => format!("NOPERM this user has no permissions to run the '{name}' command"),
            Denied::Key(_) => "NOPERM this user has no permissions to access one of the keys used as arguments".into(),
            Denied::Channel(_) => {
                "NOPERM this user has no permissions to access one of the channels used as arguments".into()
            }
        })
    }

    /// The error a script's `redis.call` raises, as Redis words it.
    pub(crate) fn script_reply(&self) -> Reply {
        Reply::error(match self {
            Denied::Command(_) => "ERR The user executing the script can't run this command or subcommand",
            Denied::Key(_) => {
                "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments"
            }
            Denied::Channel(_) => {
                "ERR The user executing the script can't publish to the channel mentioned in the command"
            }
        })
    }

    /// ACL DRYRUN's answer.
    pub(crate) fn dry_run(&self) -> String {
        match self {
            Denied::Command(name) => format!("This user has no permissions to run the '{name}' command"),
            Denied::Key(key) => format!(
                "This user has no permissions to access the '{}' key",
                String::from_utf8_lossy(key)
            ),
            Denied::Channel(channel) => format!(
                "This user has no permissions to access the '{}' channel",
                String::from_utf8_lossy(channel)
            ),
        }
    }

    /// ACL LOG's reason and object.
    fn logged(&self) -> (&'static str, String) {
        match self {
            Denied::Command(name) => ("command", name.clone()),
            Denied::Key(key) => ("key", String::from_utf8_lossy(key).into_owned()),
            Denied::Channel(channel) => ("channel", String::from_utf8_lossy(channel).into_owned()),
        }
    }
}

/// A user no rule narrowed: everything its key may do.
static FULL: LazyLock<Arc<User>> = LazyLock::new(|| Arc::new(User::full()));

/// A user no rule narrowed, shared.
pub(crate) fn unnarrowed() -> Arc<User> {
    Arc::clone(&FULL)
}

impl User {
    /// What ACL SETUSER starts a new user from, and `reset` returns to: off, nothing allowed.
    pub(crate) fn blank() -> User {
        User {
            enabled: false,
            allowed: vec![false; COMMANDS.len()],
            exceptions: Vec::new(),
            command_rules: vec!["-@all".into()],
            all_keys: false,
            keys: Vec::new(),
            all_channels: false,
            channels: Vec::new(),
            everything: false,
        }
    }

    pub(crate) fn full() -> User {
        User {
            enabled: true,
            allowed: vec![true; COMMANDS.len()],
            exceptions: Vec::new(),
            command_rules: vec!["+@all".into()],
            all_keys: true,
            keys: Vec::new(),
            all_channels: true,
            channels: Vec::new(),
            everything: true,
        }
    }

    /// Reads a stored description back (see [`User::describe`]).
    pub(crate) fn parse(description: &str) -> Result<User, String> {
        let mut user = User::blank();
        for rule in description.split(' ').filter(|rule| !rule.is_empty()) {
            user.apply(rule)?;
        }
        Ok(user)
    }

    /// Whether nothing is narrowed: the check can be skipped.
    pub(crate) fn unrestricted(&self) -> bool {
        self.everything
    }

    /// Applies one ACL SETUSER rule; the error is Redis's text for a bad one.
    pub(crate) fn apply(&mut self, rule: &str) -> Result<(), String> {
        let applied = self.try_apply(rule);
        self.everything = self.all_keys
            && self.all_channels
            && self.exceptions.is_empty()
            && self.allowed.iter().all(|allowed| *allowed);
        applied.map_err(|reason| {
            // A password is not echoed back.
            let shown = match rule.chars().next() {
                Some(first @ ('>' | '<' | '#' | '!')) => format!("{first}..."),
                _ => rule.to_owned(),
            };
            format!("ERR Error in ACL SETUSER modifier '{shown}': {reason}")
        })
    }

    fn try_apply(&mut self, rule: &str) -> Result<(), String> {
        let lower = rule.to_ascii_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "allkeys" | "~*" => {
                self.all_keys = true;
                self.keys.clear();
            }
            "resetkeys" => {
                self.all_keys = false;
                self.keys.clear();
            }
            "allchannels" | "&*" => {
                self.all_channels = true;
                self.channels.clear();
            }
            "resetchannels" => {
                self.all_channels = false;
                self.channels.clear();
            }
            "allcommands" | "+@all" => self.all_commands(true),
            "nocommands" | "-@all" => self.all_commands(false),
            "reset" => *self = User::blank(),
            // Payload sanitizing (RESTORE) and selectors: nothing to keep.
            "sanitize-payload" | "skip-sanitize-payload" | "clearselectors" => {}
            "nopass" | "resetpass" => return Err(PASSWORDS.into()),
            _ if rule.starts_with(['>', '<', '#', '!']) => return Err(PASSWORDS.into()),
            _ if rule.starts_with('(') => return Err("pgvs3 does not support selectors".into()),
            _ if rule.starts_with('~') || rule.starts_with('%') => self.key_pattern(rule)?,
            _ if rule.starts_with('&') => {
                if self.all_channels {
                    return Err("Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels".into());
                }
                let pattern = checked_pattern(&rule[1..])?;
                if !self.channels.contains(&pattern) {
                    self.patterns_room()?;
                    self.channels.push(pattern);
                }
            }
            _ if lower.starts_with("+@") || lower.starts_with("-@") => {
                let category = format!("@{}", &lower[2..]);
                if !CATEGORIES.contains(&&lower[2..]) {
                    return Err(UNKNOWN.into());
                }
                let allow = lower.starts_with('+');
                self.rules_room()?;
                for (at, spec) in COMMANDS.iter().enumerate() {
                    if command_info::acl_categories(spec).contains(&category.as_str()) {
                        self.set_command(at, allow);
                    }
                }
                self.command_rules.push(lower);
            }
            _ if lower.starts_with('+') || lower.starts_with('-') => {
                let allow = lower.starts_with('+');
                let mut parts = lower[1..].splitn(3, '|');
                let name = parts.next().unwrap_or_default();
                let sub = parts.next();
                if parts.next().is_some() {
                    return Err("Allowing first-arg of a subcommand is not supported".into());
                }
                let at = COMMANDS.iter().position(|spec| spec.name == name);
                self.rules_room()?;
                match (at, sub) {
                    (Some(_), Some("")) => return Err(UNKNOWN.into()),
                    (Some(at), Some(sub)) => {
                        self.exceptions
                            .retain(|(known, name, _)| !(*known == at && name == sub));
                        self.exceptions.push((at, sub.to_owned(), allow));
                    }
                    (Some(at), None) => self.set_command(at, allow),
                    // Denying a Redis command pgvs3 does not have changes nothing; allowing one
                    // is refused as Redis refuses an unknown command.
                    (None, _) if !allow && !name.is_empty() => {}
                    (None, _) => return Err(UNKNOWN.into()),
                }
                self.command_rules.push(lower);
            }
            _ => return Err("Syntax error".into()),
        }
        Ok(())
    }

    fn all_commands(&mut self, allow: bool) {
        self.allowed.fill(allow);
        self.exceptions.clear();
        self.command_rules = vec![if allow { "+@all" } else { "-@all" }.into()];
    }

    fn set_command(&mut self, at: usize, allow: bool) {
        self.allowed[at] = allow;
        self.exceptions.retain(|(known, _, _)| *known != at);
    }

    fn rules_room(&self) -> Result<(), String> {
        match self.command_rules.len() < MAX_COMMAND_RULES {
            true => Ok(()),
            false => Err(format!("a pgvs3 user has at most {MAX_COMMAND_RULES} command rules")),
        }
    }

    fn patterns_room(&self) -> Result<(), String> {
        match self.keys.len() + self.channels.len() < MAX_PATTERNS {
            true => Ok(()),
            false => Err(format!(
                "a pgvs3 user has at most {MAX_PATTERNS} key and channel patterns"
            )),
        }
    }

    /// `~pattern`, `%R~pattern`, `%W~pattern`, `%RW~pattern`.
    fn key_pattern(&mut self, rule: &str) -> Result<(), String> {
        let (flags, pattern) = match rule.strip_prefix('%') {
            Some(rest) => rest.split_once('~').ok_or("Syntax error")?,
            None => ("RW", &rule[1..]),
        };
        let (mut read, mut write) = (false, false);
        for flag in flags.chars() {
            match flag.to_ascii_uppercase() {
                'R' => read = true,
                'W' => write = true,
                _ => return Err("Syntax error".into()),
            }
        }
        if !(read || write) {
            return Err("Syntax error".into());
        }
        if self.all_keys {
            return Err("Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns".into());
        }
        let pattern = checked_pattern(pattern)?;
        if pattern == "*" && read && write {
            self.all_keys = true;
            self.keys.clear();
            return Ok(());
        }
        match self.keys.iter_mut().find(|known| known.pattern == pattern) {
            Some(known) => {
                known.read |= read;
                known.write |= write;
            }
            None => {
                self.patterns_room()?;
                self.keys.push(KeyPattern { pattern, read, write });
            }
        }
        Ok(())
    }

    /// The command rules, as GETUSER's `commands`.
    pub(crate) fn commands(&self) -> String {
        self.command_rules.join(" ")
    }

    /// The key patterns, as GETUSER's `keys`.
    pub(crate) fn keys(&self) -> String {
        if self.all_keys {
            return "~*".into();
        }
        let described: Vec<String> = self
            .keys
            .iter()
            .map(|key| {
                let flags = match (key.read, key.write) {
                    (true, false) => "%R",
                    (false, true) => "%W",
                    _ => "",
                };
                format!("{flags}~{}", key.pattern)
            })
            .collect();
        described.join(" ")
    }

    /// The channel patterns, as GETUSER's `channels`.
    pub(crate) fn channels(&self) -> String {
        if self.all_channels {
            return "&*".into();
        }
        let described: Vec<String> = self.channels.iter().map(|channel| format!("&{channel}")).collect();
        described.join(" ")
    }

    /// The whole user as ACL LIST's line shows it after the name (no password: it is the key's
    /// secret), which [`User::parse`] reads back.
    pub(crate) fn describe(&self) -> String {
        let mut parts = vec![if self.enabled { "on" } else { "off" }.to_owned()];
        let keys = self.keys();
        if !keys.is_empty() {
            parts.push(keys);
        }
        if !self.all_channels {
            parts.push("resetchannels".into());
        }
        let channels = self.channels();
        if !channels.is_empty() {
            parts.push(channels);
        }
        parts.push(self.commands());
        parts.join(" ")
    }

    /// Whether this user may run `args` (`spec` its command): the command, its keys (read or
    /// written, as the command uses them), its channels.
    /// SORT's BY (with a `*` pattern) and GET read keys the command's key specs do not name,
    /// so its key patterns cannot judge them: as Redis 7.0's sortCommandGeneric, they are for a
    /// user with read access to every key alone, with its error (not an ACL denial: not logged).
    pub(crate) fn check_sort(&self, spec: &'static Spec, args: &[Bytes]) -> Result<(), Reply> {
        if !matches!(spec.name, "sort" | "sort_ro")
            || self.all_keys
            || self.keys.iter().any(|pattern| pattern.read && pattern.pattern == "*")
        {
            return Ok(());
        }
        let mut j = 2;
        while j + 1 < args.len() {
            let option = args[j].to_ascii_lowercase();
            match option.as_slice() {
                b"by" if args[j + 1].contains(&b'*') => {
                    return Err(Reply::error(
                        "ERR BY option of SORT denied due to insufficient ACL permissions.",
                    ));
                }
                b"get" => {
                    return Err(Reply::error(
                        "ERR GET option of SORT denied due to insufficient ACL permissions.",
                    ));
                }
                // LIMIT's two numbers are skipped with it, as SORT reads them.
                b"limit" => j += 2,
                b"by" | b"store" => j += 1,
                _ => {}
            }
            j += 1;
        }
        Ok(())
    }

    /// Whether the user may still listen to these channels, shard channels and patterns, as
    /// SUBSCRIBE, SSUBSCRIBE and PSUBSCRIBE judge them: Redis disconnects a subscriber revoked
    /// of one (`ACLKillPubsubClientsIfNeeded`).
    pub(crate) fn may_listen<'a>(
        &self,
        channels: impl IntoIterator<Item = &'a Bytes>,
        shard_channels: impl IntoIterator<Item = &'a Bytes>,
        patterns: impl IntoIterator<Item = &'a Bytes>,
    ) -> bool {
        let by_glob = |channel: &Bytes| {
            self.channels
                .iter()
                .any(|pattern| glob::matches(pattern.as_bytes(), channel))
        };
        self.all_channels
            || (channels.into_iter().chain(shard_channels).all(by_glob)
                && patterns
                    .into_iter()
                    .all(|written| self.channels.iter().any(|pattern| pattern.as_bytes() == &written[..])))
    }

    pub(crate) fn check(&self, spec: &'static Spec, args: &[Bytes]) -> Result<(), Denied> {
        if spec.flags.contains(&"no_auth") {
            // AUTH, HELLO, QUIT, RESET: always allowed, as in Redis.
            return Ok(());
        }
        let at = COMMANDS
            .iter()
            .position(|known| std::ptr::eq(known, spec))
            .unwrap_or_default();
        let exception = match self.exceptions.is_empty() {
            true => None,
            false => args.get(1).and_then(|sub| {
                let sub = String::from_utf8_lossy(sub).to_ascii_lowercase();
                self.exceptions
                    .iter()
                    .find(|(known, name, _)| *known == at && *name == sub)
                    .map(|(_, _, allow)| *allow)
            }),
        };
        if !exception.unwrap_or(self.allowed[at]) {
            // A container's denial names `command|subcommand`, as Redis names the call.
            return Err(Denied::Command(spec.full_name(args.get(1).map(|sub| &sub[..]))));
        }
        if !self.all_keys {
            for at in command_info::key_positions(spec, args) {
                // As Redis's `ACLSelectorCheckKey`: an accessed key is read, an updated,
                // inserted or deleted one written.
                let flags = command_info::key_flags_at(spec, args, at);
                let read = flags.contains(&"access");
                let write = flags.iter().any(|flag| matches!(*flag, "update" | "insert" | "delete"));
                let key = &args[at];
                let allowed = self.keys.iter().any(|pattern| {
                    (pattern.read || !read)
                        && (pattern.write || !write)
                        && glob::matches(pattern.pattern.as_bytes(), key)
                });
                if !allowed {
                    return Err(Denied::Key(key.clone()));
                }
            }
        }
        if !self.all_channels {
            let (channels, literal): (&[Bytes], bool) = match spec.name {
                "publish" | "spublish" => (&args[1..2.min(args.len())], false),
                "subscribe" | "ssubscribe" => (&args[1..], false),
                // A pattern must be one of the user's, as it is written (Redis 7.0).
                "psubscribe" => (&args[1..], true),
                _ => (&[], false),
            };
            for channel in channels {
                let allowed = self.channels.iter().any(|pattern| match literal {
                    true => pattern.as_bytes() == &channel[..],
                    false => glob::matches(pattern.as_bytes(), channel),
                });
                if !allowed {
                    return Err(Denied::Channel(channel.clone()));
                }
            }
        }
        Ok(())
    }
}

const PASSWORDS: &str = "pgvs3 users authenticate with their access key's secret (or --resp-password for 'default'): passwords are not set with ACL SETUSER";
const UNKNOWN: &str = "Unknown command or category name in ACL";

fn checked_pattern(pattern: &str) -> Result<String, String> {
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(format!("a pgvs3 pattern has at most {MAX_PATTERN_BYTES} bytes"));
    }
    // The stored description separates rules by spaces.
    if pattern.chars().any(char::is_whitespace) {
        return Err("pgvs3 patterns may not contain spaces".into());
    }
    Ok(pattern.to_owned())
}

/// One ACL LOG entry.
struct Entry {
    count: u64,
    reason: &'static str,
    context: &'static str,
    object: String,
    username: String,
    at: Instant,
    client_info: String,
}

/// The rules of the fleet's users as this gateway last read them, and this gateway's ACL LOG.
pub(crate) struct Acl {
    users: RwLock<Arc<Users>>,
    /// One reload at a time: the connections that find the version moved wait for it.
    reload: tokio::sync::Mutex<()>,
    log: Mutex<VecDeque<Entry>>,
}

struct Users {
    /// The catalog version read before these rules were.
    version: i64,
    users: HashMap<String, Stored>,
}

/// A user as this gateway last read it.
#[derive(Clone, Default)]
pub(crate) struct Stored {
    /// `None`: no rule narrows the user (never given any, or ACL DELUSER deleted them).
    pub(crate) rules: Option<Arc<User>>,
    /// How many times ACL DELUSER deleted the user.
    pub(crate) deletions: i64,
}

impl Default for Acl {
    fn default() -> Acl {
        Acl {
            users: RwLock::new(Arc::new(Users {
                version: i64::MIN,
                users: HashMap::new(),
            })),
            reload: tokio::sync::Mutex::new(()),
            log: Mutex::default(),
        }
    }
}

impl Acl {
    /// `name`'s rules and the catalog version they are current for; a user no rule narrowed is
    /// [`User::full`]. Read again from the database when the catalog version moved.
    pub(crate) async fn user(&self, catalog: &Catalog, name: &str) -> Result<(Arc<User>, i64), StoreError> {
        let (stored, version) = self.stored(catalog, name).await?;
        Ok((stored.rules.unwrap_or_else(unnarrowed), version))
    }

    /// `name`'s stored rules and deletions, and the catalog version they are current for: a
    /// connection tells by them that the user it signed in as was deleted.
    pub(crate) async fn stored(&self, catalog: &Catalog, name: &str) -> Result<(Stored, i64), StoreError> {
        let users = self.current(catalog).await?;
        Ok((users.users.get(name).cloned().unwrap_or_default(), users.version))
    }

    async fn current(&self, catalog: &Catalog) -> Result<Arc<Users>, StoreError> {
        let fresh = |users: &Arc<Users>| users.version == catalog.version();
        let users = Arc::clone(&self.users.read().expect("acl lock"));
        if fresh(&users) {
            return Ok(users);
        }
        let _reloading = self.reload.lock().await;
        let users = Arc::clone(&self.users.read().expect("acl lock"));
        if fresh(&users) {
            return Ok(users);
        }
        let version = catalog.version();
        let rows = catalog.resp_acl_users().await?;
        let users = rows
            .into_iter()
            .map(|row| {
                let rules = row.rules.map(|rules| {
                    Arc::new(User::parse(&rules).unwrap_or_else(|err| {
                        // Fails closed: a user whose rules do not read may do nothing.
                        tracing::warn!(
                            user = row.name,
                            error = err,
                            "RESP ACL rules that do not parse; the user may run nothing"
                        );
                        User::blank()
                    }))
                });
                let stored = Stored {
                    rules,
                    deletions: row.deletions,
                };
                (row.name, stored)
            })
            .collect();
        let users = Arc::new(Users { version, users });
        *self.users.write().expect("acl lock") = Arc::clone(&users);
        Ok(users)
    }

    /// Adds a denial (or a failed AUTH: reason `auth`) to ACL LOG, counted into a like entry
    /// of the last minute.
    pub(crate) fn log(
        &self,
        reason: &'static str,
        context: &'static str,
        object: String,
        username: &str,
        client_info: String,
    ) {
        let mut log = self.log.lock().expect("acl log lock");
        let now = Instant::now();
        let like = log.iter().position(|entry| {
            entry.reason == reason
                && entry.context == context
                && entry.object == object
                && entry.username == username
                && now.duration_since(entry.at) < LOG_GROUPING
        });
        let entry = match like.and_then(|at| log.remove(at)) {
            Some(mut entry) => {
                entry.count += 1;
                entry.at = now;
                entry.client_info = client_info;
                entry
            }
            None => Entry {
                count: 1,
                reason,
                context,
                object,
                username: username.to_owned(),
                at: now,
                client_info,
            },
        };
        log.push_front(entry);
        log.truncate(LOG_ENTRIES);
    }

    /// A denial, as [`Acl::log`] takes it.
    pub(crate) fn log_denied(&self, denied: &Denied, context: &'static str, username: &str, client_info: String) {
        let (reason, object) = denied.logged();
        self.log(reason, context, object, username, client_info);
    }

    pub(crate) fn reset_log(&self) {
        self.log.lock().expect("acl log lock").clear();
    }

    /// ACL LOG [count]: the newest entries first, in Redis's fields.
    pub(crate) fn log_reply(&self, count: usize) -> Reply {
        let log = self.log.lock().expect("acl log lock");
        Reply::Array(
            log.iter()
                .take(count)
                .map(|entry| {
                    let field = |name: &str, value: Reply| (Reply::text(name), value);
                    Reply::Map(vec![
                        field("count", Reply::Integer(entry.count as i64)),
                        field("reason", Reply::text(entry.reason)),
                        field("context", Reply::text(entry.context)),
                        field("object", Reply::text(&entry.object)),
                        field("username", Reply::text(&entry.username)),
                        field("age-seconds", Reply::Double(entry.at.elapsed().as_secs_f64())),
                        field("client-info", Reply::text(&entry.client_info)),
                    ])
                })
                .collect(),
        )
    }
}

/// What a script checks its `redis.call`s against: its caller's user.
#[derive(Clone)]
pub(crate) struct Caller {
    pub(crate) user: Arc<User>,
    pub(crate) username: String,
    pub(crate) client_info: String,
    pub(crate) acl: Arc<Acl>,
}

impl Caller {
    /// Checks a script's call, logging a denial (context `lua`).
    pub(crate) fn check(&self, spec: &'static Spec, args: &[Bytes]) -> Result<(), Reply> {
        self.user.check(spec, args).map_err(|denied| {
            self.acl
                .log_denied(&denied, "lua", &self.username, self.client_info.clone());
            denied.script_reply()
        })?;
        self.user.check_sort(spec, args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_description_reads_back_as_the_same_user() {
        let mut user = User::blank();
        for rule in [
            "on",
            "~foo*",
            "%R~bar*",
            "&chan*",
            "+get",
            "+set",
            "-@dangerous",
            "+config|get",
        ] {
            user.apply(rule).unwrap();
        }
        let description = user.describe();
        assert_eq!(
            description,
            "on ~foo* %R~bar* resetchannels &chan* -@all +get +set -@dangerous +config|get"
        );
        assert_eq!(User::parse(&description).unwrap().describe(), description);
        assert_eq!(User::full().describe(), "on ~* &* +@all");
        assert!(User::full().unrestricted());
        assert!(!user.unrestricted());
    }

    #[test]
    fn bad_rules_get_redis_errors() {
        let mut user = User::full();
        assert_eq!(
            user.apply("nosuchrule").unwrap_err(),
            "ERR Error in ACL SETUSER modifier 'nosuchrule': Syntax error"
        );
        assert_eq!(
            user.apply("+nosuch").unwrap_err(),
            "ERR Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL"
        );
        assert!(user.apply("~foo").unwrap_err().contains("Try 'resetkeys'"));
        assert!(
            user.apply(">secret")
                .unwrap_err()
                .starts_with("ERR Error in ACL SETUSER modifier '>...'")
        );
    }
}
