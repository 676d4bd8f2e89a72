//! MULTI, EXEC, DISCARD, WATCH, UNWATCH: a queue of commands run as one transaction, and the
//! keys whose change since WATCH makes EXEC answer the null array.

use std::time::{Instant, SystemTime};

use bytes::Bytes;

use super::generic::Wide;
use crate::resp::codec::Reply;
use crate::resp::command::{self, KeyCommand, Spec};
use crate::resp::connection::{Connection, InputBudget, store_error};
use crate::resp::script::{self, Step};
use crate::store::{Access, KvEntry, Watches};

/// A WATCHed key as it was: its version (ETag, last modified) and expiry, or absent.
pub(crate) type Fingerprint = Option<(Option<(String, SystemTime)>, Option<SystemTime>)>;

/// Where a connection's WATCHed keys stand in PostgreSQL (store/kv/watch.rs). Registered,
/// EXEC fails on any write of them since WATCH; else it compares what they hold
/// ([`Fingerprint`]), which misses a key written and then written back.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchRegistration {
    #[default]
    Nothing,
    Registered(Watches),
    /// A key could not be registered (a gateway on a hot standby): values are compared.
    Unavailable,
}

pub(crate) fn fingerprint(entry: Option<&KvEntry>) -> Fingerprint {
    entry.map(|entry| (entry.version.clone(), entry.expires_at))
}

pub(crate) enum Queued {
    Key(KeyCommand, &'static Spec),
    Other(Vec<Bytes>, &'static Spec),
    /// A command whose arguments did not parse: its error is its part of EXEC's reply, as Redis
    /// finds such errors when the command runs.
    Failed(Reply, &'static Spec),
}

/// Commands one MULTI may queue, their arguments, and their bytes (arguments with their
/// handles, plus [`QUEUED_OVERHEAD`] each).
const MAX_QUEUED: usize = 100_000;
const MAX_QUEUED_ARGS: usize = 4 * 1024 * 1024;
const MAX_QUEUED_BYTES: usize = 512 * 1024 * 1024;
/// What a queued command costs besides its arguments' bytes (its parsed form).
const QUEUED_OVERHEAD: usize = 256;

/// Keys one connection may WATCH at once (repeats count). Each is a row in
/// `pgvs3.resp_watches` and an entry EXEC checks, kept until EXEC, DISCARD, UNWATCH or the
/// connection's end: without a bound, one client could grow both without end.
const MAX_WATCHED: usize = 100_000;

/// A MULTI's queued commands. A queue outlives the input it came in, so it is bounded in
/// count and bytes, and its bytes beyond [`UNBUDGETED_INPUT`] are held against the buffer
/// budget, as large input is.
pub(crate) struct MultiQueue {
    pub(crate) commands: Vec<Queued>,
    bytes: usize,
    args: usize,
    budget: InputBudget,
}

impl MultiQueue {
    pub(crate) fn new(budget: crate::admission::BufferBudget) -> MultiQueue {
        MultiQueue {
            commands: Vec::new(),
            bytes: 0,
            args: 0,
            budget: InputBudget::new(budget),
        }
    }

    /// Queues a command of `args` arguments that take `size` bytes, or refuses it with the
    /// error it answers (which fails the transaction, as an error while queueing does in Redis).
    pub(crate) fn push(&mut self, queued: Queued, size: usize, args: usize) -> Result<(), Reply> {
        let bytes = self.bytes + size + QUEUED_OVERHEAD;
        let all_args = self.args + args;
        if self.commands.len() >= MAX_QUEUED || bytes > MAX_QUEUED_BYTES || all_args > MAX_QUEUED_ARGS {
            return Err(Reply::error(format!(
                "ERR MULTI queue full: at most {MAX_QUEUED} commands, {MAX_QUEUED_ARGS} arguments and {MAX_QUEUED_BYTES} bytes per transaction"
            )));
        }
        if !self.budget.cover(bytes) {
            return Err(Reply::error(
                "OOM command not allowed: the MULTI queue does not fit in the server's buffer budget now, retry later",
            ));
        }
        self.bytes = bytes;
        self.args = all_args;
        self.commands.push(queued);
        Ok(())
    }
}

impl Connection {
    pub(crate) fn multi(&mut self) -> Reply {
        if self.multi.is_some() {
            return Reply::error("ERR MULTI calls can not be nested");
        }
        self.multi = Some(MultiQueue::new(self.server.buffers.clone()));
        self.multi_failed = false;
        Reply::OK
    }

    pub(crate) fn discard(&mut self) -> Reply {
        if self.multi.take().is_none() {
            return Reply::error("ERR DISCARD without MULTI");
        }
        self.unwatch_all();
        Reply::OK
    }

    /// Forgets the WATCHed keys; their registration goes in the background.
    pub(crate) fn unwatch_all(&mut self) {
        self.watched.clear();
        if let WatchRegistration::Registered(watches) = std::mem::take(&mut self.watch_registration) {
            self.drop_registration(watches);
        }
    }

    fn drop_registration(&self, watches: Watches) {
        // A connection dropped as the runtime shuts down leaves it to the maintenance pass.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.server.buckets.store().clone();
        runtime.spawn(async move {
            if let Err(err) = store.kv_unwatch(watches.token).await {
                // Left for the maintenance pass, which drops registrations a day old.
                tracing::warn!(error = %err, "WATCH registration not dropped");
            }
        });
    }

    /// Registers `keys` (see [`WatchRegistration`]) before they are read.
    async fn register_watch(&mut self, keyspace: &crate::bucket::Keyspace, keys: &[String]) -> Result<(), Reply> {
        let token = match self.watch_registration {
            WatchRegistration::Unavailable => return Ok(()),
            WatchRegistration::Registered(watches) => watches.token,
            WatchRegistration::Nothing if self.server.replica.is_standby() => {
                self.watch_registration = WatchRegistration::Unavailable;
                return Ok(());
            }
            // Random across gateways and connections.
            WatchRegistration::Nothing => {
                use std::hash::{BuildHasher, Hasher};
                std::collections::hash_map::RandomState::new().build_hasher().finish() as i64
            }
        };
        let added = keyspace.watch(token, keys).await.map_err(store_error)?;
        self.watch_registration = match (self.watch_registration, added) {
            (_, None) => {
                if let WatchRegistration::Registered(watches) = self.watch_registration {
                    self.drop_registration(watches);
                }
                WatchRegistration::Unavailable
            }
            (WatchRegistration::Registered(watches), Some(added)) => WatchRegistration::Registered(Watches {
                token,
                keys: watches.keys + added,
            }),
            (_, Some(added)) => WatchRegistration::Registered(Watches { token, keys: added }),
        };
        Ok(())
    }

    pub(crate) async fn watch(&mut self, args: &[Bytes]) -> Reply {
        if self.multi.is_some() {
            return Reply::error("ERR WATCH inside MULTI is not allowed");
        }
        let keys: Result<Vec<String>, Reply> = args[1..].iter().map(command::key).collect();
        let keys = match keys {
            Ok(keys) => keys,
            Err(reply) => return reply,
        };
        if self.watched.len() + keys.len() > MAX_WATCHED {
            return Reply::error(format!(
                "ERR WATCH limit reached: at most {MAX_WATCHED} keys watched per connection until EXEC, DISCARD or UNWATCH"
            ));
        }
        let keyspace = match self.keyspace(Access::Read).await {
            Ok(keyspace) => keyspace,
            Err(reply) => return reply,
        };
        if let Err(reply) = self.register_watch(&keyspace, &keys).await {
            return reply;
        }
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

    pub(crate) fn unwatch(&mut self) -> Reply {
        self.unwatch_all();
        Reply::OK
    }

    pub(crate) async fn exec(&mut self) -> Reply {
        let watches = match std::mem::take(&mut self.watch_registration) {
            WatchRegistration::Registered(watches) => Some(watches),
            WatchRegistration::Nothing | WatchRegistration::Unavailable => None,
        };
        let mut consumed = false;
        let reply = self.exec_queued(watches, &mut consumed).await;
        if let (Some(watches), false) = (watches, consumed) {
            self.drop_registration(watches);
        }
        reply
    }

    /// EXEC, the registration of its WATCHed keys being `watches`: `consumed` once a batch that
    /// took it back has committed.
    async fn exec_queued(&mut self, watches: Option<Watches>, consumed: &mut bool) -> Reply {
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
                Queued::Other(..) | Queued::Failed(..) => None,
            })
            .collect();
        // EXEC's reply is one: its parts share the output limit.
        let share = self
            .server
            .settings
            .output_limit
            .map(|limit| limit / queued.len().max(1));
        if let Some(share) = share {
            let share = i64::try_from(share).unwrap_or(i64::MAX);
            for (command, _) in &mut commands {
                command.limit_reply(share);
            }
        }
        let write = commands.iter().any(|(_, spec)| spec.is_write());
        let in_run = queued
            .iter()
            .any(|queued| matches!(queued, Queued::Other(args, spec) if runs_in_transaction(spec, args)));
        let started = Instant::now();
        // A failed transaction's error, which every queued command answers: none of it runs.
        let mut failed = None;
        let mut key_replies = if in_run {
            // Scripts, keyspace-wide commands and key commands in their order, in one
            // transaction.
            let mut steps = Vec::with_capacity(queued.len());
            for queued in &queued {
                let step = match queued {
                    Queued::Key(command, spec) => Step::Key(command.clone(), spec),
                    Queued::Other(args, spec) if runs_in_transaction(spec, args) => self.step(spec, args, share).await,
                    Queued::Other(..) | Queued::Failed(..) => continue,
                };
                steps.push(step);
            }
            match self.run_scripted(&steps, &here, watches).await {
                Ok(replies) => {
                    *consumed = true;
                    replies
                }
                Err(Reply::NilArray) => return Reply::NilArray,
                Err(reply) => {
                    self.transaction_failed = true;
                    failed = Some(reply.clone());
                    vec![reply; steps.len()]
                }
            }
        } else if commands.is_empty() && here.is_empty() && watches.is_none() {
            Vec::new()
        } else {
            match self.execute_transaction(&commands, write, &here, watches).await {
                Ok(replies) => {
                    *consumed = true;
                    replies
                }
                Err(Reply::NilArray) => return Reply::NilArray,
                Err(reply) => {
                    self.transaction_failed = true;
                    failed = Some(reply.clone());
                    vec![reply; commands.len()]
                }
            }
        }
        .into_iter();
        // The steps ran as one transaction: each is counted its share.
        let share = started.elapsed() / key_replies.len().max(1) as u32;
        let mut replies = Vec::with_capacity(queued.len());
        for queued in queued {
            let reply = match queued {
                Queued::Failed(reply, spec) => {
                    self.count(spec, std::time::Duration::ZERO, &reply);
                    reply
                }
                // Commands whose effects no other command of the transaction sees nor changes
                // (see `refusal`): after it, in their order; not after a failed one.
                Queued::Other(args, spec) if !runs_in_transaction(spec, &args) => {
                    let started = Instant::now();
                    let reply = match &failed {
                        Some(reply) => reply.clone(),
                        None => Box::pin(self.other_command(spec, &args)).await,
                    };
                    self.count(spec, started.elapsed(), &reply);
                    reply
                }
                Queued::Key(_, spec) | Queued::Other(_, spec) => {
                    let reply = key_replies.next().expect("one reply per step");
                    self.count(spec, share, &reply);
                    match spec.name {
                        "scan" => self.scan_reply(reply),
                        // Committed: OK whatever comes of telling the tracking clients, and the
                        // keyspace is the selected database's (no lookup that could fail).
                        "flushdb" | "flushall" if reply == Reply::OK => {
                            let bucket = self.server.settings.databases[&self.db].clone();
                            self.flushed(&[&bucket]).await;
                            Reply::OK
                        }
                        _ => reply,
                    }
                }
            };
            replies.push(reply);
        }
        Reply::Array(replies)
    }
}

/// Whether a command that is not a key command runs as a step of EXEC's transaction, in its
/// queue position: scripts, functions, the keyspace-wide commands and SCRIPT LOAD (which the
/// EVALSHAs after it see).
fn runs_in_transaction(spec: &Spec, args: &[Bytes]) -> bool {
    script::is_script(spec.name)
        || (spec.name == "script" && args.get(1).is_some_and(|sub| sub.eq_ignore_ascii_case(b"load")))
        || matches!(
            spec.name,
            "fcall" | "fcall_ro" | "keys" | "scan" | "dbsize" | "randomkey" | "flushdb" | "flushall"
        )
}

/// Why a command that is not a key command is refused inside MULTI (which fails the
/// transaction: EXEC answers EXECABORT), if it is. Redis runs every queued command at EXEC's
/// point in time, in order; pgvs3 runs key commands, scripts, functions and keyspace-wide
/// commands in EXEC's transaction ([`runs_in_transaction`]), and the rest after it, so the rest
/// must be commands no other queued command sees the effect of (PING, ECHO, TIME, INFO,
/// PUBLISH, CONFIG GET...). Those whose effect others would see are refused here.
/// `databases`: how many databases the server maps.
pub(crate) fn refusal(spec: &Spec, args: &[Bytes], databases: usize) -> Option<Reply> {
    let subcommand = || args.get(1).map(|sub| String::from_utf8_lossy(sub).to_ascii_lowercase());
    let why = match spec.name {
        "select" | "auth" | "hello" | "client" | "monitor" => "",
        name if super::pubsub::is_subscription(name) => "",
        "flushall" if databases > 1 => {
            ": FLUSHALL of several databases cannot be one transaction (use FLUSHDB in each)"
        }
        "config" if super::server::sets_keyspace_parameter(args) => {
            ": the commands queued with it would not see the keyspace parameter it sets"
        }
        "function" if matches!(subcommand().as_deref(), Some("load" | "delete" | "flush" | "restore")) => {
            ": the FCALLs queued with it would not see the library it changes"
        }
        "script" if subcommand().as_deref() == Some("flush") => {
            ": the EVALSHAs queued with it would not see the scripts it drops"
        }
        _ => return None,
    };
    let name = match spec.name {
        "config" | "function" | "script" => format!(
            "{} {}",
            spec.name.to_uppercase(),
            subcommand().unwrap_or_default().to_uppercase()
        ),
        name => name.to_uppercase(),
    };
    Some(Reply::error(format!("ERR {name} inside MULTI is not supported{why}")))
}

impl Connection {
    /// The step of EXEC's run of a queued script, function, keyspace-wide command or SCRIPT LOAD
    /// ([`runs_in_transaction`]); `output_limit`, its share of EXEC's output limit.
    async fn step(&mut self, spec: &'static Spec, args: &[Bytes], output_limit: Option<usize>) -> Step {
        let step = match spec.name {
            "fcall" | "fcall_ro" => self
                .fcall_request(spec.name == "fcall_ro", args)
                .await
                .map(Step::Script),
            "keys" => Ok(Step::Wide(Wide::Keys(args[1].clone(), output_limit))),
            "scan" => self.scan_request(args).map(|request| Step::Wide(Wide::Scan(request))),
            "dbsize" => Ok(Step::Wide(Wide::DbSize)),
            "randomkey" => Ok(Step::Wide(Wide::RandomKey)),
            "flushdb" | "flushall" => self.flush_allowed(spec, args).map(|()| Step::Wide(Wide::FlushDb)),
            "script" => Ok(Step::Answered(self.server.scripts.command(args, self.principal()))),
            _ => self
                .server
                .scripts
                .request(spec.name, args, &self.principal().access_key)
                .map(|request| Step::Script(request.called_by(self.caller()))),
        };
        step.unwrap_or_else(Step::Answered)
    }
}
