//! Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, the script cache, and the run
//! of scripts (and of the key commands queued with them in MULTI) against one batch.
//!
//! A script's `redis.call`s run the very code a client's commands run: they are parsed by the
//! command table and applied by `keys::apply_all` to the script's batch, one transaction for the
//! whole script, which holds the locks of every key it touches until it commits: no client sees
//! half a script (readers see the committed state before or after it), and two scripts on the
//! same keys run one after the other, as in Redis.
//!
//! The batch begins with the declared keys (KEYS) locked, as any write batch: scripts on
//! different keys run side by side and their commits share WAL flushes. Holding the whole
//! keyspace for every script instead serialized them, each commit waiting for the one before:
//! from 8 connections on distinct keys, 125 scripts/s that way, 776/s with their keys locked
//! (573/s with undeclared keys locked on the way), where plain INCRs reach about 1,100/s (debug
//! build, 2 busy cores). A script may also touch keys it did not declare (Redis allows it
//! outside a cluster): they are locked when first used, without waiting (`KvBatch::try_lock`),
//! since waiting out of the sorted order could deadlock. When one is held elsewhere, the run is
//! rolled back and starts over holding the keyspace exclusively, which no lock can then stand in
//! the way of (its scripts run again from the start: they only act through the batch).
//!
//! A script that raises an error keeps the writes it made before (Redis does not roll back
//! either); one that is stopped (SCRIPT KILL, the time or memory limit) or whose database fails
//! is rolled back whole, where Redis would have kept half of it.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use sha1::{Digest, Sha1};

use super::acl::Caller;
use super::codec::Reply;
use super::command::{self, KeyCommand, Spec, wrong_arity};
use super::commands::generic::Wide;
use super::commands::pubsub::STANDBY_PUBSUB;
use super::keys;
use super::lua::{self, Limits, Outcome, Stop};
use super::monitor::{self, Monitors};
use super::notify::Recorder;
use super::pubsub::PubSub;
use super::working_set::{Borrowing, CallSite, RunSet, WorkingSet};
use crate::bucket::Keyspace;
use crate::metrics::Metrics;
use crate::store::{CommitSent, KvBatch, Principal, StoreError, StoreResult, Watches};

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";
/// The largest script EVAL and SCRIPT LOAD take.
const MAX_SCRIPT_BYTES: usize = 1024 * 1024;
/// The cache holds at most this many scripts and bytes; past either, the oldest go (a client
/// then gets NOSCRIPT from EVALSHA and sends EVAL again, as client libraries do).
const CACHE_SCRIPTS: usize = 1000;
const CACHE_BYTES: usize = 32 * 1024 * 1024;
/// How long FUNCTION LOAD's run of a library may take (Redis's `LOAD_TIMEOUT_MS`, whatever
/// its script time limit): a library's top level only registers functions.
const LOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);
/// How long a batch of a client's pipelined scripts runs before it commits: past it, a
/// further script in the batch saves a commit (about a millisecond) and makes the other
/// clients of its keys wait a script longer.
const PIPELINED_BATCH_TIME: std::time::Duration = std::time::Duration::from_millis(50);

pub fn is_script(name: &str) -> bool {
    matches!(name, "eval" | "evalsha" | "eval_ro" | "evalsha_ro")
}

/// The scripts this gateway knows (each gateway its own: they are not in the database) and
/// those running now. Both are per tenant (the access key a client acts as): a key's SCRIPT
/// LOAD, EXISTS and FLUSH see its own cache entries alone, and its SCRIPT KILL and FUNCTION KILL
/// stop its own runs alone (the root key's stop every tenant's), so that no tenant can learn of,
/// flush or kill another's scripts.
pub struct Scripts {
    cache: Mutex<Cache>,
    running: Mutex<Vec<Runner>>,
    limits: Limits,
    /// Interpreters that may run at once. Each holds a blocking thread and up to the memory
    /// limit, and a runaway one a core until its time limit: without a bound, as many scripts
    /// as clients would take the gateway's CPUs and memory from everything else.
    interpreters: Arc<tokio::sync::Semaphore>,
    /// How long a script waits for an interpreter before it is answered BUSY.
    busy_wait: std::time::Duration,
    /// Where the messages scripts PUBLISH go once their run commits.
    pubsub: Arc<PubSub>,
    /// The gateway's monitors, shown the calls of runs that commit.
    monitors: Arc<Monitors>,
    /// The values of typed keys runs left, for the next runs' calls (none: every call runs
    /// in the database at once).
    working_set: Option<Arc<WorkingSet>>,
    metrics: Metrics,
}

/// A run on the list of those running.
struct Runner {
    stop: Arc<Stop>,
    /// A function's (FUNCTION KILL's), or an EVAL script's (SCRIPT KILL's).
    function: bool,
    /// The access key it runs for.
    tenant: String,
}

/// Cached scripts by tenant (access key) and SHA1. The bounds are the gateway's, shared: a
/// tenant that loads many scripts can push another's out, which then costs that one's client
/// an EVAL after NOSCRIPT, as client libraries do.
#[derive(Default)]
struct Cache {
    scripts: HashMap<(String, String), Bytes>,
    /// Oldest first.
    order: VecDeque<(String, String)>,
    bytes: usize,
}

/// An EVAL or EVALSHA, parsed.
#[derive(Clone)]
pub struct Request {
    body: Bytes,
    /// Where the Lua code starts: after a `#!lua` line.
    code_start: usize,
    /// The script's SHA1, or the function's name (FCALL).
    sha: String,
    /// A Redis Function's run (FCALL), not a script's.
    function: bool,
    keys: Vec<Bytes>,
    argv: Vec<Bytes>,
    /// EVAL_RO, or a `#!lua flags=no-writes` script.
    read_only: bool,
    /// Whose permissions its calls are checked against (none: a user no rule narrowed).
    caller: Option<Caller>,
    /// The access key it runs for (whose SCRIPT KILL or FUNCTION KILL stops it).
    tenant: String,
}

impl Request {
    /// A run of a Redis Function (FCALL): `body` is the chunk `commands/functions.rs` builds
    /// around its library's code; `name` stands where an EVAL error names the script's SHA1,
    /// as Redis names the function.
    pub fn function(name: &str, body: Bytes, keys: Vec<Bytes>, argv: Vec<Bytes>, read_only: bool) -> Request {
        Request {
            body,
            code_start: 0,
            sha: name.to_owned(),
            function: true,
            keys,
            argv,
            read_only,
            caller: None,
            tenant: String::new(),
        }
    }

    /// The request with its calls checked against `caller`'s permissions.
    pub(crate) fn called_by(self, caller: Option<Caller>) -> Request {
        Request { caller, ..self }
    }

    /// The request run for access key `tenant`.
    pub(crate) fn run_for(self, tenant: &str) -> Request {
        Request {
            tenant: tenant.to_owned(),
            ..self
        }
    }
}

/// One thing a batch of scripts runs, in order.
pub enum Step {
    Key(KeyCommand, &'static Spec),
    Script(Request),
    /// A keyspace-wide command of MULTI (its batch then holds the whole keyspace).
    Wide(Wide),
    /// A command answered before the run: one that failed before it could run (its error), or
    /// MULTI's SCRIPT LOAD (its sha), loaded while EXEC builds its steps so that the EVALSHAs
    /// queued after it find the script, as in Redis (the script cache is not in the database).
    Answered(Reply),
}

impl Step {
    fn keys(&self) -> Vec<String> {
        match self {
            Step::Key(command, _) => command.keys().into_iter().cloned().collect(),
            // Declared keys that are not valid store keys fail when a call uses them.
            Step::Script(request) => request.keys.iter().filter_map(|key| command::key(key).ok()).collect(),
            Step::Wide(_) | Step::Answered(_) => Vec::new(),
        }
    }

    fn writes(&self) -> bool {
        match self {
            Step::Key(_, spec) => spec.is_write(),
            Step::Script(request) => !request.read_only,
            Step::Wide(wide) => wide.writes(),
            Step::Answered(_) => false,
        }
    }
}

/// The client a run's scripts run for.
#[derive(Debug, Clone)]
pub struct RunBy {
    /// Its id: the writer their invalidations name.
    pub id: u64,
    /// It tracks keys (CLIENT TRACKING, default mode, and this command's reads are
    /// remembered): a script's declared keys are remembered for it once the script calls a
    /// read-only command, as Redis 7.0 does (see `Session::remember_declared`).
    pub remembers_reads: bool,
    /// The namespace of its channels, which its PUBLISH calls publish to (pubsub.rs).
    pub channels: Bytes,
    /// Its database: MONITOR shows a script's calls as `[<db> lua]`.
    pub db: u32,
}

/// Whether steps need a write batch (a read-only batch takes no lock).
pub fn writes(steps: &[Step]) -> bool {
    steps.iter().any(Step::writes)
}

/// Takes a running script off the list when its run ends, however it ends (a dropped
/// connection included: the script is then stopped).
struct Running<'a> {
    scripts: &'a Scripts,
    stop: Arc<Stop>,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.stop.kill();
        let mut running = self
            .scripts
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        running.retain(|runner| !Arc::ptr_eq(&runner.stop, &self.stop));
    }
}

fn sha1_hex(body: &[u8]) -> String {
    hex::encode(Sha1::digest(body))
}

fn too_large() -> Reply {
    Reply::error(format!("ERR pgvs3 takes scripts of at most {MAX_SCRIPT_BYTES} bytes"))
}

impl Scripts {
    pub fn new(
        limits: Limits,
        interpreters: usize,
        busy_wait: std::time::Duration,
        pubsub: Arc<PubSub>,
        monitors: Arc<Monitors>,
        working_set: Option<Arc<WorkingSet>>,
        metrics: Metrics,
    ) -> Scripts {
        Scripts {
            working_set,
            metrics,
            cache: Mutex::default(),
            running: Mutex::default(),
            limits,
            interpreters: Arc::new(tokio::sync::Semaphore::new(interpreters.max(1))),
            busy_wait,
            pubsub,
            monitors,
        }
    }

    /// Stops every running script: the gateway shuts down (each is rolled back, and its
    /// client answered, before the connections drain).
    pub fn shut_down(&self) {
        let running = self.running.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for runner in running.iter() {
            runner.stop.shut_down();
        }
    }

    /// Puts a run for access key `tenant` on the list of those running (`function`: a
    /// function's, or a library's load), until the returned guard is dropped.
    fn start(&self, function: bool, tenant: &str) -> Running<'_> {
        let stop = Arc::new(Stop::default());
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(Runner {
                stop: Arc::clone(&stop),
                function,
                tenant: tenant.to_owned(),
            });
        Running { scripts: self, stop }
    }

    /// SCRIPT KILL (`functions` false) or FUNCTION KILL by `by`: stops every EVAL script, or
    /// every function, running on this gateway for `by`'s tenant (for any, by the root key)
    /// (Redis runs one at a time). Each is rolled back, so killing one that wrote is safe, where
    /// Redis answers UNKILLABLE. When only the other kind runs, Redis's BUSY names the other
    /// KILL; another tenant's runs are not there to this one.
    pub fn kill(&self, functions: bool, by: &Principal) -> Reply {
        let running = self.running.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut visible = running
            .iter()
            .filter(|runner| by.is_root || runner.tenant == by.access_key)
            .peekable();
        if visible.peek().is_none() {
            return Reply::error("NOTBUSY No scripts in execution right now.");
        }
        let mut killed = false;
        for runner in visible.filter(|runner| runner.function == functions) {
            runner.stop.kill();
            killed = true;
        }
        match (killed, functions) {
            (true, _) => Reply::OK,
            (false, true) => {
                Reply::error("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.")
            }
            (false, false) => {
                Reply::error("BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.")
            }
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Caches a script of access key `tenant`'s; returns its SHA1.
    fn remember(&self, tenant: &str, body: &Bytes) -> String {
        let sha = sha1_hex(body);
        let entry = (tenant.to_owned(), sha.clone());
        let mut cache = self.cache();
        if !cache.scripts.contains_key(&entry) {
            cache.scripts.insert(entry.clone(), body.clone());
            cache.order.push_back(entry);
            cache.bytes += body.len();
            while cache.scripts.len() > CACHE_SCRIPTS || cache.bytes > CACHE_BYTES {
                let Some(oldest) = cache.order.pop_front() else { break };
                if let Some(gone) = cache.scripts.remove(&oldest) {
                    cache.bytes -= gone.len();
                }
            }
        }
        sha
    }

    /// Parses EVAL, EVALSHA and their _RO forms (arity checked), run for access key `tenant`
    /// (EVALSHA finds its scripts alone).
    pub fn request(&self, name: &str, args: &[Bytes], tenant: &str) -> Result<Request, Reply> {
        let (body, sha) = if name.starts_with("evalsha") {
            let sha = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
            let body = self.cache().scripts.get(&(tenant.to_owned(), sha.clone())).cloned();
            (body.ok_or_else(|| Reply::error(NOSCRIPT))?, sha)
        } else {
            if args[1].len() > MAX_SCRIPT_BYTES {
                return Err(too_large());
            }
            let sha = self.remember(tenant, &args[1]);
            (args[1].clone(), sha)
        };
        let numkeys = command::parse_integer(&args[2]).ok_or_else(command::not_an_integer)?;
        if numkeys < 0 {
            return Err(Reply::error("ERR Number of keys can't be negative"));
        }
        let rest = &args[3..];
        if numkeys as u64 > rest.len() as u64 {
            return Err(Reply::error("ERR Number of keys can't be greater than number of args"));
        }
        let (code_start, no_writes) = shebang(&body)?;
        let (keys, argv) = rest.split_at(numkeys as usize);
        Ok(Request {
            code_start,
            sha,
            function: false,
            keys: keys.to_vec(),
            argv: argv.to_vec(),
            read_only: no_writes || name.ends_with("_ro"),
            body,
            caller: None,
            tenant: tenant.to_owned(),
        })
    }

    /// SCRIPT LOAD / EXISTS / FLUSH / KILL / HELP, by `by` (on its tenant's scripts).
    pub fn command(&self, args: &[Bytes], by: &Principal) -> Reply {
        let subcommand = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        let tenant = &by.access_key;
        match (subcommand.as_str(), &args[2..]) {
            ("load", [body]) if body.len() > MAX_SCRIPT_BYTES => too_large(),
            ("load", [body]) => Reply::text(&self.remember(tenant, body)),
            ("exists", shas) if !shas.is_empty() => {
                let cache = self.cache();
                Reply::Array(
                    shas.iter()
                        .map(|sha| {
                            let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                            Reply::bool(cache.scripts.contains_key(&(tenant.clone(), sha)))
                        })
                        .collect(),
                )
            }
            ("flush", [] | [_]) => {
                let mode_ok = args
                    .get(2)
                    .is_none_or(|mode| mode.eq_ignore_ascii_case(b"sync") || mode.eq_ignore_ascii_case(b"async"));
                if !mode_ok {
                    return Reply::error("ERR SCRIPT FLUSH only support SYNC|ASYNC option");
                }
                let mut cache = self.cache();
                cache.order.retain(|(owner, _)| owner != tenant);
                let gone: Vec<(String, String)> = cache
                    .scripts
                    .keys()
                    .filter(|(owner, _)| owner == tenant)
                    .cloned()
                    .collect();
                for entry in gone {
                    if let Some(body) = cache.scripts.remove(&entry) {
                        cache.bytes -= body.len();
                    }
                }
                Reply::OK
            }
            ("kill", []) => self.kill(false, by),
            ("help", []) => Reply::Array(
                [
                    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "EXISTS <sha1> [<sha1> ...]",
                    "FLUSH [ASYNC|SYNC]",
                    "KILL",
                    "LOAD <script>",
                    "HELP",
                ]
                .into_iter()
                .map(|line| Reply::Status(line.to_owned()))
                .collect(),
            ),
            ("load" | "exists" | "flush" | "kill" | "help", _) => wrong_arity(&format!("script|{subcommand}")),
            _ => Reply::error(format!(
                "ERR unknown subcommand '{}'. Try SCRIPT HELP.",
                String::from_utf8_lossy(&args[1])
            )),
        }
    }

    /// Runs a client's pipelined scripts (each a [`Step::Script`], or [`Step::Answered`]) in
    /// one batch, so that they share their keys' locks and loads, their working set share and
    /// one commit, where each used to pay its own (a job queue's worker sends a script per job
    /// it finishes, all on the same few keys). Each is still answered as if it ran alone: a
    /// script stopped (SCRIPT KILL, a limit, its database gone) answers its own error, and the
    /// scripts before it run again in a batch of their own (nothing of theirs was committed or
    /// answered), those after it in the next. A batch whose scripts have run for
    /// [`PIPELINED_BATCH_TIME`] commits after the one running then, and the rest go on in
    /// the next: its keys' other clients wait for one batch, not for a pipeline of slow
    /// scripts.
    pub async fn run_pipeline(
        &self,
        keyspace: &Keyspace,
        steps: &[Step],
        standby: bool,
        client: RunBy,
    ) -> StoreResult<Vec<Reply>> {
        let mut replies: Vec<Option<Reply>> = vec![None; steps.len()];
        let mut start = 0;
        while start < steps.len() {
            // The steps up to the next one answered already (a stopped one).
            let end = (start..steps.len())
                .find(|&i| replies[i].is_some())
                .unwrap_or(steps.len());
            if start == end {
                start += 1;
                continue;
            }
            let segment = &steps[start..end];
            let write = !standby && writes(segment);
            let cut = Some(PIPELINED_BATCH_TIME);
            let ran = self
                .run(
                    keyspace,
                    segment,
                    write,
                    standby,
                    &[],
                    None,
                    &|_| true,
                    client.clone(),
                    cut,
                )
                .await?;
            match ran {
                Ran::Done(Some(done)) => {
                    self.metrics.resp_script_batches.inc();
                    self.metrics.resp_batched_scripts.inc_by(done.len() as u64);
                    let ran = done.len();
                    for (slot, reply) in replies[start..].iter_mut().zip(done) {
                        *slot = Some(reply);
                    }
                    start += ran;
                }
                Ran::Done(None) => unreachable!("a run without WATCHed keys is always accepted"),
                Ran::Stopped { at, reply } => replies[start + at] = Some(reply),
            }
        }
        Ok(replies.into_iter().map(|reply| reply.unwrap_or(Reply::Nil)).collect())
    }

    /// Runs `steps` in order in one batch of `keyspace` (a write batch holding the keyspace
    /// when `write`), then commits, or tells which script was stopped (SCRIPT KILL, a limit,
    /// its database gone), the batch rolled back. `accept` sees the batch first, with `watched`
    /// loaded (and `watches`, their registration, taken back): when it refuses (a WATCHed key
    /// changed), nothing runs and the answer is `Ran::Done(None)`. On a standby gateway
    /// (`standby`), scripts' writes are refused as any write is. `client` runs them (the writer
    /// their invalidations name, and whose reads are remembered). With `cut_after`, the batch
    /// commits once its steps have run that long, and answers the replies of those that ran.
    #[allow(clippy::too_many_arguments)]
    pub async fn run(
        &self,
        keyspace: &Keyspace,
        steps: &[Step],
        write: bool,
        standby: bool,
        watched: &[String],
        watches: Option<Watches>,
        accept: &(dyn Fn(&KvBatch) -> bool + Sync),
        client: RunBy,
        cut_after: Option<std::time::Duration>,
    ) -> StoreResult<Ran> {
        let mut keys: Vec<String> = steps
            .iter()
            .flat_map(Step::keys)
            .chain(watched.iter().cloned())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        // A read-only script locks its keys too (without writing), so that its calls, each a
        // statement of its own, see one moment, as a script does in Redis; a standby cannot.
        // A keyspace-wide command sees every key: no other writer may come between it and the
        // run's other steps.
        let wide = steps.iter().any(|step| matches!(step, Step::Wide(_)));
        let locking = match (standby, wide) {
            (true, _) => Locking::None,
            (false, false) => Locking::Keys,
            (false, true) => Locking::Keyspace,
        };
        let run = Run {
            keyspace,
            steps,
            keys: &keys,
            write,
            standby,
            watches,
            client,
            cut_after,
        };
        // A run speculates (see working_set) when it writes: a run that only reads has no
        // transaction of its own to check its calls in.
        let mut speculate = write && !standby && self.working_set.is_some();
        let mut locking = locking;
        loop {
            // Boxed: a run's future is large (its session, the script's calls), and it starts over.
            match Box::pin(self.attempt(&run, locking, speculate, accept)).await {
                Ok(Attempt::Done(ran)) => return Ok(ran),
                Ok(Attempt::Contended) if locking == Locking::Keyspace => {
                    unreachable!("no key lock is held elsewhere while the keyspace is held")
                }
                Ok(Attempt::Contended) => locking = Locking::Keyspace,
                // A call answered otherwise than the working set predicted: the run was rolled
                // back, and starts over with every call run in the database.
                Err(StoreError::Mispredicted) if speculate => {
                    self.metrics.resp_speculation_misses.inc();
                    speculate = false;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// One run of `steps`: see [`Scripts::run`].
    async fn attempt(
        &self,
        run: &Run<'_>,
        locking: Locking,
        speculate: bool,
        accept: &(dyn Fn(&KvBatch) -> bool + Sync),
    ) -> StoreResult<Attempt> {
        let Run {
            keyspace,
            steps,
            keys,
            write,
            standby,
            watches,
            ref client,
            cut_after,
        } = *run;
        let mut batch = match locking {
            Locking::None => keyspace.read(keys).await?,
            Locking::Keys if write => keyspace.write(keys).await?,
            Locking::Keys => keyspace.read_locked(keys).await?,
            Locking::Keyspace if write => keyspace.write_all(keys).await?,
            Locking::Keyspace => keyspace.read_locked_all(keys).await?,
        };
        let untouched = match watches {
            Some(watches) => batch.watches_untouched(watches).await?,
            None => true,
        };
        if !untouched || !accept(&batch) {
            batch.rollback().await?;
            return Ok(Attempt::Done(Ran::Done(None)));
        }
        let recorder = match locking {
            Locking::None => None,
            _ => Recorder::new(
                self.pubsub.events.flags(keyspace.bucket()).await?,
                self.pubsub.events.token,
            )
            .map(|mut recorder| {
                recorder.writer = client.id;
                recorder
            }),
        };
        // Keyspace events are recorded around each call as it runs (recorder.rs): not with
        // calls answered before they run.
        let speculation = match (&self.working_set, speculate && recorder.is_none()) {
            (Some(set), true) => Some(RunSet::new(Arc::clone(set), batch.bucket_id())),
            _ => None,
        };
        let mut session = Session {
            speculation,
            working_set: self.working_set.clone(),
            borrowed: HashSet::new(),
            script: None,
            calls: 0,
            borrow_sites: Vec::new(),
            channels: client.channels.clone(),
            recorder,
            reader: client.remembers_reads.then_some(client.id),
            declared: Vec::new(),
            batch,
            loaded: keys.iter().cloned().collect(),
            stale: HashSet::new(),
            lock_more: locking == Locking::Keys,
            contended: false,
            standby,
            failure: None,
            reply_limit: i64::try_from(self.limits.memory).unwrap_or(i64::MAX),
            pubsub: Arc::clone(&self.pubsub),
            published: Vec::new(),
            published_bytes: 0,
            monitored: self.monitors.watched().then(|| (client.db, Vec::new())),
        };
        let mut replies = Vec::with_capacity(steps.len());
        let started = std::time::Instant::now();
        for (at, step) in steps.iter().enumerate() {
            let reply = match step {
                Step::Answered(reply) => reply.clone(),
                Step::Key(command, _) => session.apply(command).await?,
                Step::Wide(wide) => {
                    if let Some(speculation) = &mut session.speculation {
                        speculation.flush(&mut session.batch).await?;
                        speculation.forget_all();
                    }
                    let reply = wide.run(&mut session.batch).await?;
                    if wide.writes() {
                        // FLUSHDB: the batch holds every key as absent, as the database has it.
                        session.stale.clear();
                    }
                    reply
                }
                Step::Script(request) => {
                    session.declared = request.keys.clone();
                    session.script = Some(request.sha.clone());
                    session.calls = 0;
                    let (back, outcome) = self.evaluate(session, request).await;
                    // Without its session the run's batch is gone, rolled back with its
                    // connection.
                    let Some(back) = back else {
                        let (Outcome::Reply(reply) | Outcome::Aborted(reply)) = outcome;
                        return Ok(Attempt::Done(Ran::Stopped { at, reply }));
                    };
                    session = back;
                    session.script = None;
                    if let Some(err) = session.failure.take() {
                        if matches!(err, StoreError::Mispredicted) {
                            session.doubt_borrows();
                            // Rolled back, and the connection kept for the run's next attempt.
                            session.batch.rollback().await?;
                        }
                        return Err(err);
                    }
                    if session.contended {
                        session.batch.rollback().await?;
                        return Ok(Attempt::Contended);
                    }
                    match outcome {
                        Outcome::Reply(reply) => reply,
                        Outcome::Aborted(reply) => {
                            session.batch.rollback().await?;
                            return Ok(Attempt::Done(Ran::Stopped { at, reply }));
                        }
                    }
                }
            };
            replies.push(reply);
            if cut_after.is_some_and(|limit| started.elapsed() >= limit) {
                break;
            }
        }
        let changed = match session.recorder.take() {
            Some(recorder) => recorder.finish(&mut session.batch).await?,
            None => Default::default(),
        };
        match session.speculation.take() {
            Some(speculation) => {
                let committed = Box::pin(speculation.commit(session.batch)).await;
                if let Some(set) = &session.working_set {
                    match &committed {
                        Ok(_) => set.sites.committed(&session.borrow_sites),
                        Err(StoreError::Mispredicted) => set.sites.doubt(&session.borrow_sites),
                        Err(_) => {}
                    }
                }
                let (confirmed, borrowed) = committed?;
                self.metrics.resp_speculated_calls.inc_by(confirmed);
                self.metrics.resp_borrowed_keys.inc_by(borrowed);
            }
            None => {
                // What it wrote of short strings, kept for the runs after it to borrow.
                let bucket = session.batch.bucket_id();
                let strings = self
                    .working_set
                    .as_ref()
                    .map(|_| WorkingSet::changed_strings(&session.batch));
                session.batch.commit().await?;
                if let (Some(set), Some(strings)) = (&self.working_set, strings) {
                    set.keep_strings(bucket, strings);
                }
            }
        }
        changed.tell(&self.pubsub.tracking, keyspace.bucket());
        if let Some((_, lines)) = session.monitored {
            self.monitors.feed_lines(&lines);
        }
        // Sent once the writes they tell of are committed, so that a subscriber reading the
        // keys on a message sees them (as in Redis, where no one reads before the script ends).
        for (shard, channel, message) in session.published {
            if let Err(reply) = self.pubsub.publish(&session.channels, shard, &channel, &message).await {
                tracing::warn!(error = ?reply, "a script's PUBLISH was not sent");
            }
        }
        Ok(Attempt::Done(Ran::Done(Some(replies))))
    }

    /// Runs code that makes no `redis.call` (FUNCTION LOAD's run of a library, which only
    /// registers its functions) in an interpreter of its own, bounded as scripts are (and at
    /// most `LOAD_TIMEOUT`) and stoppable by SCRIPT KILL / FUNCTION KILL, and returns what it
    /// returned or raised.
    pub async fn evaluate_alone(&self, body: Bytes, tenant: &str) -> Reply {
        let interpreter = tokio::time::timeout(self.busy_wait, Arc::clone(&self.interpreters).acquire_owned()).await;
        let Ok(Ok(interpreter)) = interpreter else {
            return Reply::error(
                "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
            );
        };
        let running = self.start(true, tenant);
        let stop = Arc::clone(&running.stop);
        let limits = Limits {
            time: self.limits.time.min(LOAD_TIMEOUT),
            ..self.limits
        };
        let outcome = tokio::task::spawn_blocking(move || {
            let _interpreter = interpreter;
            // No call has anywhere to go.
            let calls: lua::Calls = Box::new(|_| Reply::error("ERR the script's connection went away"));
            lua::run(&body, lua::Chunk::Library, &[], &[], limits, &stop, calls)
        })
        .await;
        drop(running);
        match outcome {
            Ok(Outcome::Reply(reply) | Outcome::Aborted(reply)) => reply,
            Err(err) => {
                tracing::error!(error = %err, "a Lua interpreter thread failed");
                Reply::error("ERR the script's interpreter failed")
            }
        }
    }

    /// Runs one script in an interpreter on a blocking thread, which makes the script's calls
    /// itself, each run to its end there (`Handle::block_on`) with the run's session, which goes
    /// to that thread and comes back (`None`: the interpreter's thread failed, and the session,
    /// with its batch, is gone). A call answered without a round trip (from the working set)
    /// then costs no switch between threads; before, every call went to the connection's task
    /// and its reply back, two wake-ups of a sleeping thread each (BullMQ: ~26 calls a job,
    /// inside the queue keys' locks; docs/benchmarks.md, session 46).
    async fn evaluate(&self, session: Session, request: &Request) -> (Option<Session>, Outcome) {
        // Waiting here holds the run's key locks, which is safe: a running script never waits
        // for a lock (keys it did not declare are only tried), so it always ends and frees its
        // interpreter.
        let interpreter = tokio::time::timeout(self.busy_wait, Arc::clone(&self.interpreters).acquire_owned()).await;
        let Ok(Ok(interpreter)) = interpreter else {
            return (
                Some(session),
                Outcome::Aborted(Reply::error(
                    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
                )),
            );
        };
        // Dropped (the run's client gone, say), it kills the script, which then ends at its
        // next look at the stop: its thread never commits, and the session it holds is
        // dropped with it, which rolls the batch back.
        let running = self.start(request.function, &request.tenant);
        let stop = Arc::clone(&running.stop);
        let limits = self.limits;
        let script = request.clone();
        let runtime = tokio::runtime::Handle::current();
        // What the task's work runs in, carried to the calls: the COMMIT signal of the
        // connection's time limits, and the request's span.
        let commit = CommitSent::current();
        let span = tracing::Span::current();
        let interpreter = tokio::task::spawn_blocking(move || {
            // Held until the interpreter ends, even if its client is gone.
            let _interpreter = interpreter;
            let _span = span.enter();
            let session = Rc::new(RefCell::new(session));
            let calls: lua::Calls = {
                let (session, stop) = (Rc::clone(&session), Arc::clone(&stop));
                let (read_only, caller) = (script.read_only, script.caller.clone());
                Box::new(move |args| {
                    let mut session = session.borrow_mut();
                    let call = session.call(&args, read_only, caller.as_ref());
                    let reply = match &commit {
                        Some(commit) => runtime.block_on(commit.scope(call)),
                        None => runtime.block_on(call),
                    };
                    // The script is not told why (its reply would be lost): the run ends with
                    // the store's error, or starts over.
                    if session.failure.is_some() || session.contended {
                        stop.kill();
                    }
                    reply
                })
            };
            let chunk = match script.function {
                true => lua::Chunk::Function { name: &script.sha },
                false => lua::Chunk::Script { sha: &script.sha },
            };
            let outcome = lua::run(
                &script.body[script.code_start..],
                chunk,
                &script.keys,
                &script.argv,
                limits,
                &stop,
                calls,
            );
            // The interpreter, and the calls with it, is gone: the session is this thread's.
            (Rc::into_inner(session).map(RefCell::into_inner), outcome)
        });
        let outcome = interpreter.await.unwrap_or_else(|err| {
            tracing::error!(error = %err, "a Lua interpreter thread failed");
            (
                None,
                Outcome::Aborted(Reply::error("ERR the script's interpreter failed")),
            )
        });
        drop(running);
        outcome
    }
}

/// XREAD and XREADGROUP called from a script with BLOCK: Redis refuses them when its option
/// parser reaches BLOCK (so an earlier bad option keeps its own error, which the command's
/// parser gives), naming the command as the script spelled it.
fn block_option_refused(spec: &Spec, args: &[Bytes]) -> Option<Reply> {
    let group = match spec.name {
        "xread" => false,
        "xreadgroup" => true,
        _ => return None,
    };
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        match args[i].to_ascii_uppercase().as_slice() {
            b"BLOCK" if more > 0 => {
                return Some(Reply::error(format!(
                    "ERR {} command is not allowed with BLOCK option from scripts",
                    String::from_utf8_lossy(&args[0])
                )));
            }
            b"COUNT" if more > 0 => i += 2,
            b"GROUP" if group && more >= 2 => i += 3,
            b"NOACK" if group => i += 1,
            _ => return None,
        }
    }
    None
}

/// A `#!lua` first line: where the code starts after it, and whether it says `no-writes`.
fn shebang(body: &[u8]) -> Result<(usize, bool), Reply> {
    if !body.starts_with(b"#!") {
        return Ok((0, false));
    }
    // The newline stays with the code, so that its line numbers are the script's.
    let end = body.iter().position(|&byte| byte == b'\n').unwrap_or(body.len());
    let line = String::from_utf8_lossy(&body[2..end]);
    let mut parts = line.split_whitespace();
    let engine = parts.next().unwrap_or_default();
    if engine != "lua" {
        return Err(Reply::error(format!(
            "ERR Unexpected engine in script shebang: {engine}"
        )));
    }
    let mut no_writes = false;
    for part in parts {
        let Some(flags) = part.strip_prefix("flags=") else {
            return Err(Reply::error(format!("ERR Unknown lua shebang option: {part}")));
        };
        for flag in flags.split(',').filter(|flag| !flag.is_empty()) {
            match flag {
                "no-writes" => no_writes = true,
                "allow-oom" | "allow-stale" | "no-cluster" | "allow-cross-slot-keys" => {}
                other => return Err(Reply::error(format!("ERR Unexpected flag in script shebang: {other}"))),
            }
        }
    }
    Ok((end, no_writes))
}

/// What a run's batch locks as it begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Locking {
    /// Nothing (a standby).
    None,
    /// The declared keys; others as they are used.
    Keys,
    /// The whole keyspace.
    Keyspace,
}

/// What [`Scripts::run`] runs, for each attempt.
struct Run<'a> {
    keyspace: &'a Keyspace,
    steps: &'a [Step],
    keys: &'a [String],
    /// Whether the steps may write (else the keys are locked as a read's, see
    /// `Keyspace::read_locked`).
    write: bool,
    standby: bool,
    /// The registration of the WATCHed keys among `keys`, taken back under their locks.
    watches: Option<Watches>,
    client: RunBy,
    /// How long the steps may run before the batch commits those that ran.
    cut_after: Option<std::time::Duration>,
}

/// How a batch of steps ended.
pub enum Ran {
    /// Committed, with the reply of each step that ran (all, unless cut after a time); `None`:
    /// not run (a WATCHed key changed).
    Done(Option<Vec<Reply>>),
    /// The script at `at` was stopped, with `reply`, and the batch rolled back.
    Stopped { at: usize, reply: Reply },
}

enum Attempt {
    Done(Ran),
    /// A key the run had to lock on the way is held by another transaction.
    Contended,
}

/// The batch of a run and what it knows of its keys.
struct Session {
    batch: KvBatch,
    /// The run's share of the working set, when it speculates.
    speculation: Option<RunSet>,
    /// The gateway's working set, when it has one: what the run's loads teach it of where
    /// scripts find their keys absent, and what the run borrowed keeps or doubts
    /// (working_set/sites.rs).
    working_set: Option<Arc<WorkingSet>>,
    /// Keys the run borrowed from the working set's values (`RunSet::borrow_kept`): its typed
    /// calls know them, its batch holds nothing of them (another command on one loads it).
    borrowed: HashSet<String>,
    /// The running script's SHA1 (or function name), and the calls it made so far: where each
    /// call is in it.
    script: Option<String>,
    calls: u32,
    /// Where the run borrowed keys: doubted if the run misses.
    borrow_sites: Vec<CallSite>,
    /// The keyspace events of the run's commands, when its keyspace emits any (notify.rs).
    recorder: Option<Recorder>,
    /// The tracking client whose reads are remembered (see [`RunBy`]).
    reader: Option<u64>,
    /// The keys the running script declares, until a read-only call remembers them.
    declared: Vec<Bytes>,
    loaded: HashSet<String>,
    /// Keys a typed command changed in the database since they were loaded.
    stale: HashSet<String>,
    /// Keys first used on the way must be locked (a write batch holding only its keys).
    lock_more: bool,
    /// One of them is held elsewhere: the run must start over.
    contended: bool,
    standby: bool,
    /// The database failed: the run ends with this, rolled back.
    failure: Option<StoreError>,
    /// A reply larger than the script's memory could never reach it: cut in the database.
    reply_limit: i64,
    pubsub: Arc<PubSub>,
    /// The namespace of the client's channels.
    channels: Bytes,
    /// PUBLISH and SPUBLISH calls (shard, channel, message), sent when the run commits; their
    /// bytes are held to the script's memory limit.
    published: Vec<(bool, Bytes, Bytes)>,
    published_bytes: i64,
    /// When the gateway had monitors as the run started: the run's database and the MONITOR
    /// lines of its calls, shown once it commits (a run that starts over shows its calls once).
    monitored: Option<(u32, Vec<Bytes>)>,
}

impl Session {
    /// A key command, on its keys as they are now (loaded first when the run has not seen them,
    /// or a typed command changed them in the database since).
    async fn apply(&mut self, command: &KeyCommand) -> StoreResult<Reply> {
        // A typed command runs in its family's SQL, which reads its keys there: what the batch
        // holds of a key a typed command changed is reloaded only for a command that reads it
        // here (a string or generic one). A script's run of typed calls on its queue's keys
        // (BullMQ: ~9 of a job's ~26) took a reload's round trip each under the keys' locks.
        let typed = matches!(command, KeyCommand::Typed(_));
        if !typed && let Some(speculation) = &mut self.speculation {
            // Calls answered but not sent must reach the database before a command that
            // reloads their keys; and what the command does to its keys, the run's values
            // do not follow. One that only looks at them (EXISTS, TYPE, TTL, ...) leaves the
            // values as they are: forgotten, they were out of the working set for the rest of
            // the run and the runs after (BullMQ's EXISTS of a job's hash before its HMGET
            // sent the HMGET and the job's next calls to the database).
            // A borrowed key is checked (and locked) first, then loaded as any other, where the
            // command needs it loaded or sends statements of its own.
            let keys = command.keys();
            if speculation.owes(&keys) || speculation.borrows(&keys, command.stays_in_batch()) {
                Box::pin(speculation.flush(&mut self.batch)).await?;
            }
            if !command.only_looks() {
                speculation.forget(keys);
            }
        }
        if !typed {
            for key in command.keys() {
                self.borrowed.remove(key);
            }
        }
        let mut missing: Vec<String> = command
            .keys()
            .into_iter()
            .filter(|key| {
                !self.loaded.contains(*key) && !self.borrowed.contains(*key) || !typed && self.stale.contains(*key)
            })
            .cloned()
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if self.lock_more && !missing.is_empty() && (typed || command.stays_in_batch()) {
            self.borrow(command, typed, &mut missing);
        }
        if !missing.is_empty() {
            let unlocked: Vec<String> = match self.lock_more {
                true => missing
                    .iter()
                    .filter(|key| !self.loaded.contains(*key))
                    .cloned()
                    .collect(),
                false => Vec::new(),
            };
            if !self.batch.try_lock_and_reload(&unlocked, &missing).await? {
                self.contended = true;
                return Ok(Reply::error("ERR the script's keys are busy; it runs again"));
            }
            self.learn_absent(command, &unlocked);
            for key in missing {
                self.stale.remove(&key);
                self.loaded.insert(key);
            }
        }
        if let Some(recorder) = &mut self.recorder {
            if recorder.unsettled(command) {
                // Loaded again: fresh for the commands after.
                for key in recorder.settle(&mut self.batch, &[]).await? {
                    self.stale.remove(&key);
                }
            }
            recorder.look_up_consumers(&[command], &mut self.batch).await?;
            recorder.before(command, &self.batch);
        }
        let reply = match (command, &mut self.speculation) {
            (KeyCommand::Typed(typed), Some(speculation)) => {
                // Boxed: its round trip's futures are large, and a script's calls nest deep.
                Box::pin(speculation.call(typed, &mut self.batch, &self.stale)).await?
            }
            _ => keys::apply_all(&[command], &mut self.batch, false)
                .await?
                .into_iter()
                .next()
                .unwrap_or(Reply::Nil),
        };
        if let KeyCommand::Typed(typed) = command {
            self.stale.extend(typed.call.keys.iter().cloned());
        }
        if let Some(recorder) = &mut self.recorder {
            recorder.after(command, &reply);
        }
        Ok(reply)
    }

    /// Where key `at` of the running script's current call is in the script (see
    /// working_set/sites.rs); `None` outside a script.
    fn call_site(&self, at: usize) -> Option<CallSite> {
        Some(CallSite {
            bucket: self.batch.bucket_id(),
            script: self.script.clone()?,
            call: self.calls,
            key: u8::try_from(at).ok()?,
        })
    }

    /// Borrows what it can of a command's `missing` keys, which then need no load
    /// (working_set/sites.rs says where): a typed command a value kept in the working set
    /// (`RunSet::borrow_kept`; its calls know the key, the batch holds nothing of it), any other
    /// a short string a run left there (`RunSet::borrow_string`; the batch holds it, as if
    /// loaded); any command the key as absent where this call of the script found its key
    /// absent lately (the batch holds it so).
    fn borrow(&mut self, command: &KeyCommand, typed: bool, missing: &mut Vec<String>) {
        let keys = command.keys();
        let sites: Vec<Option<CallSite>> = (0..keys.len()).map(|at| self.call_site(at)).collect();
        let (Some(speculation), Some(set)) = (&mut self.speculation, &self.working_set) else {
            return;
        };
        let encodings = self.batch.encodings().map(str::to_owned);
        missing.retain(|key| {
            // Only a key's first use: one loaded (and stale, to load again) is the batch's.
            if self.loaded.contains(key) {
                return true;
            }
            let Some(site) = keys
                .iter()
                .position(|named| *named == key)
                .and_then(|at| sites[at].as_ref())
            else {
                return true;
            };
            let borrowing = set.sites.borrowing(site);
            let kept = borrowing != Borrowing::Nothing
                && match typed {
                    true => speculation.borrow_kept(key, encodings.as_deref()),
                    false => speculation.borrow_string(key, &mut self.batch),
                };
            let absent = !kept && borrowing == Borrowing::KeptOrAbsent && self.batch.assume_absent(key);
            if absent {
                speculation.borrow_absent(key);
            }
            match (kept && typed, kept || absent) {
                (true, _) => {
                    self.borrowed.insert(key.clone());
                }
                (false, true) => {
                    self.loaded.insert(key.clone());
                }
                (false, false) => return true,
            }
            self.borrow_sites.push(site.clone());
            false
        });
    }

    /// The run missed: the sites it borrowed at load their keys for a while (a miss may have
    /// other causes; the sites are doubted all the same).
    fn doubt_borrows(&self) {
        if let Some(set) = &self.working_set {
            set.sites.doubt(&self.borrow_sites);
        }
    }

    /// Teaches the working set whether the keys of a command first used on the way
    /// (`first_used`, just loaded) were absent, for the script's call that used them.
    fn learn_absent(&self, command: &KeyCommand, first_used: &[String]) {
        let Some(set) = &self.working_set else {
            return;
        };
        for (at, key) in command.keys().into_iter().enumerate() {
            if first_used.contains(key)
                && let Some(site) = self.call_site(at)
            {
                set.sites.learn(site, self.batch.get(key).is_none());
            }
        }
    }

    /// The script's first read-only call remembers its declared keys for the tracking client,
    /// before it reads (as a client's own reads are, commands/tracking.rs): Redis 7.0 tracks a
    /// script's declared keys once it calls a read command, and none for a script that only
    /// writes (its unit/tracking "Tracking only occurs for scripts when a command calls a
    /// read-only command"; 7.2 remembers the keys the calls read instead).
    fn remember_declared(&mut self, spec: &Spec) {
        if let Some(reader) = self.reader
            && spec.flags.contains(&"readonly")
            && !self.declared.is_empty()
        {
            let declared = std::mem::take(&mut self.declared);
            self.pubsub
                .tracking
                .remember(reader, self.batch.bucket_name(), declared.iter().map(|key| &key[..]));
        }
    }

    /// A `redis.call` from a script: checked as Redis checks a script's commands, then run as
    /// the same command from a client would be. A blocking pop does not wait (as in Redis).
    async fn call(&mut self, args: &[Bytes], read_only: bool, caller: Option<&Caller>) -> Reply {
        if self.failure.is_some() || self.contended {
            return Reply::error("ERR this script's run is over (it fails or runs again)");
        }
        self.calls += 1;
        let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        let Some(spec) = command::lookup(&name) else {
            return Reply::error("ERR Unknown Redis command called from script");
        };
        if !spec.arity_ok(args.len()) {
            return Reply::error("ERR Wrong number of args calling Redis command from script");
        }
        if spec.flags.contains(&"noscript") {
            return Reply::error("ERR This Redis command is not allowed from script");
        }
        if let Some(refusal) = block_option_refused(spec, args) {
            return refusal;
        }
        if let Some(Err(reply)) = caller.map(|caller| caller.check(spec, args)) {
            return reply;
        }
        if spec.is_write() && self.standby {
            return Reply::error("READONLY You can't write against a read only replica.");
        }
        if spec.is_write() && read_only {
            return Reply::error("ERR Write commands are not allowed from read-only scripts.");
        }
        self.remember_declared(spec);
        if let Some((db, lines)) = &mut self.monitored {
            lines.extend(monitor::script_line(spec, *db, args));
        }
        match KeyCommand::parse(&name, args) {
            Err(reply) => reply,
            Ok(Some(mut command)) => match self.apply(command.limit_reply(self.reply_limit)).await {
                Ok(Reply::OverLimit(_)) => Reply::error(format!(
                    "ERR the reply is larger than the script's memory ({} bytes, --resp-script-max-memory)",
                    self.reply_limit
                )),
                Ok(reply) => reply,
                Err(err) => {
                    let reply = Reply::error(format!("ERR {err}"));
                    self.failure = Some(err);
                    reply
                }
            },
            Ok(None) => match (spec.name, args) {
                ("publish" | "spublish", _) if read_only => {
                    Reply::error("ERR Write commands are not allowed from read-only scripts.")
                }
                ("publish" | "spublish", _) if self.standby => Reply::error(STANDBY_PUBSUB),
                ("publish" | "spublish", [_, channel, message]) => {
                    if let Err(reply) = super::pubsub::check_channel(channel) {
                        return reply;
                    }
                    let bytes = (channel.len() + message.len()) as i64;
                    if self.published_bytes + bytes > self.reply_limit {
                        return Reply::error(format!(
                            "ERR the script's published messages are larger than its memory ({} bytes, --resp-script-max-memory)",
                            self.reply_limit
                        ));
                    }
                    self.published_bytes += bytes;
                    let shard = spec.name == "spublish";
                    self.published.push((shard, channel.clone(), message.clone()));
                    Reply::Integer(self.pubsub.receivers(&self.channels, shard, channel))
                }
                ("ping", [_]) => Reply::Simple("PONG"),
                ("ping" | "echo", [_, message]) => Reply::Bulk(message.clone()),
                ("time", _) => super::commands::server::time_reply(),
                _ => Reply::error(format!(
                    "ERR pgvs3 does not run {} from scripts (only key commands, PUBLISH, SPUBLISH, PING, ECHO and TIME)",
                    spec.name.to_uppercase()
                )),
            },
        }
    }
}
