//! Redis's "server" group: INFO, CONFIG, COMMAND, TIME, DBSIZE, FLUSHDB, FLUSHALL and MEMORY (but
//! USAGE, a key command). FUNCTION is `commands/functions.rs`.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::resp::codec::Reply;
use crate::resp::command::{self, Spec, syntax_error, wrong_arity};
use crate::resp::connection::{Connection, store_error};
use crate::resp::notify::{Flags, INVALID_FLAGS};
use crate::resp::{command_info, glob};
use crate::store::{Access, EncodingParameter};

/// The Redis version pgvs3 reports: the command set it follows.
pub(crate) const REDIS_VERSION: &str = "7.0.0";

impl Connection {
    pub(crate) async fn server_command(&mut self, spec: &'static Spec, args: &[Bytes]) -> Reply {
        match spec.name {
            "time" => time_reply(),
            "command" => command_info::command(args),
            "config" => self.config(args).await,
            "info" => self.info(args).await,
            "dbsize" => match self.keyspace(Access::Read).await {
                Ok(keyspace) => keyspace
                    .count()
                    .await
                    .map_or_else(store_error, |(keys, _)| Reply::Integer(keys)),
                Err(reply) => reply,
            },
            "flushdb" => {
                if let Err(reply) = self.flush_allowed(spec, args) {
                    return reply;
                }
                match self.keyspace(Access::Write).await {
                    Ok(keyspace) => match keyspace.flush().await {
                        Ok(()) => {
                            self.flushed(&[keyspace.bucket()]).await;
                            Reply::OK
                        }
                        Err(err) => store_error(err),
                    },
                    Err(reply) => reply,
                }
            }
            "flushall" => {
                if let Err(reply) = self.flush_allowed(spec, args) {
                    return reply;
                }
                // Every database this server maps, one after the other (each its own statement);
                // tracking clients are told once, of those that were flushed.
                let mut flushed = Vec::new();
                let mut refused = None;
                for db in self.server.settings.databases.keys() {
                    let outcome = match self.keyspace_of(*db, Access::Write).await {
                        Ok(keyspace) => keyspace.flush().await.map_err(store_error),
                        Err(reply) => Err(reply),
                    };
                    match outcome {
                        Ok(()) => flushed.push(self.server.settings.databases[db].as_str()),
                        Err(reply) => {
                            refused = Some(reply);
                            break;
                        }
                    }
                }
                if !flushed.is_empty() {
                    self.flushed(&flushed).await;
                }
                refused.unwrap_or(Reply::OK)
            }
            "memory" => memory_command(args),
            other => unreachable!("{other} is not a server command"),
        }
    }

    /// Whether FLUSHDB or FLUSHALL (`spec`) may run with `args`, else its error.
    pub(crate) fn flush_allowed(&self, spec: &Spec, args: &[Bytes]) -> Result<(), Reply> {
        if !flush_mode_ok(args) {
            return Err(syntax_error());
        }
        if !self.server.settings.flushdb {
            return Err(Reply::error(format!(
                "ERR {} is disabled on this server (start pgvs3 with --resp-flushdb)",
                spec.name.to_uppercase()
            )));
        }
        Ok(())
    }

    /// After a flush that committed (FLUSHDB, FLUSHALL, alone or in EXEC): a tracked
    /// keyspace's tracking clients are told to forget every key. The flush answers OK whatever
    /// comes of telling them, as Redis answers a flush that happened: an error would tell the
    /// client that nothing was flushed (and stopped FLUSHALL before its other databases). A
    /// failure is logged: this gateway's clients were told before it, but those of the others
    /// that missed it keep what they cached of the keyspace until told of its keys again.
    pub(crate) async fn flushed(&self, buckets: &[&str]) {
        if let Err(why) = self.server.pubsub.flushed(buckets).await {
            tracing::warn!(error = ?why, ?buckets, "a flush's invalidation was not sent to the other gateways");
        }
    }

    async fn info(&self, args: &[Bytes]) -> Reply {
        let wanted: Vec<String> = args[1..]
            .iter()
            .map(|arg| String::from_utf8_lossy(arg).to_ascii_lowercase())
            .collect();
        // As Redis: no argument is `default`, which leaves out `commandstats`; `all` and
        // `everything` name every section.
        let show = |section: &str| {
            let default = section != "commandstats";
            (wanted.is_empty() && default)
                || wanted
                    .iter()
                    .any(|w| w == section || w == "all" || w == "everything" || (w == "default" && default))
        };
        let mut text = String::new();
        if show("server") {
            text.push_str(&self.info_server());
        }
        if show("clients") {
            let connected = self.server.clients.len();
            text.push_str(&format!(
                "# Clients\r\nconnected_clients:{connected}\r\ncluster_connections:0\r\nmaxclients:{}\r\n\
                 blocked_clients:{}\r\ntracking_clients:{}\r\n\r\n",
                self.server.settings.max_clients,
                self.server.wakeups.blocked_clients(),
                self.server.pubsub.tracking.totals().clients,
            ));
        }
        if show("memory") {
            let used = resident_bytes();
            // `lazyfree_*`: a key is deleted by PostgreSQL in its command's transaction; the
            // gateway frees nothing in the background.
            text.push_str(&format!(
                "# Memory\r\nused_memory:{used}\r\nused_memory_human:{:.2}M\r\nused_memory_rss:{used}\r\n\
                 maxmemory:0\r\nmaxmemory_policy:noeviction\r\nmem_allocator:mimalloc\r\nlazyfree_pending_objects:0\r\n\r\n",
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
            text.push_str(&self.info_stats().await);
        }
        if show("cpu") {
            let (system, user) = cpu_seconds();
            text.push_str(&format!(
                "# CPU\r\nused_cpu_sys:{system:.6}\r\nused_cpu_user:{user:.6}\r\n\r\n"
            ));
        }
        if show("replication") {
            text.push_str(&self.info_replication());
        }
        if show("commandstats") {
            text.push_str(&self.server.stats.section());
            text.push_str("\r\n");
        }
        if show("errorstats") {
            text.push_str(&self.server.stats.error_section());
            text.push_str("\r\n");
        }
        if show("cluster") {
            text.push_str("# Cluster\r\ncluster_enabled:0\r\n\r\n");
        }
        if show("keyspace") {
            text.push_str(&self.info_keyspace().await);
        }
        // Redis puts a blank line between sections, none after the last.
        if text.ends_with("\r\n\r\n") {
            text.truncate(text.len() - 2);
        }
        Reply::text(&text)
    }

    /// INFO's `server` section.
    fn info_server(&self) -> String {
        let mut text = String::new();
        let uptime = self.server.started.elapsed().as_secs();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let executable = std::env::current_exe().unwrap_or_default();
        text.push_str(&format!(
            "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\n\
             redis_mode:standalone\r\npgvs3_version:{}\r\nos:{} {}\r\narch_bits:64\r\nprocess_id:{}\r\n\
             run_id:{}\r\ntcp_port:{}\r\nserver_time_usec:{}\r\nuptime_in_seconds:{uptime}\r\n\
             uptime_in_days:{}\r\nhz:10\r\nconfigured_hz:10\r\nexecutable:{}\r\nconfig_file:\r\n\
             io_threads_active:0\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH,
            std::process::id(),
            run_id(),
            self.server.addr.port(),
            now.as_micros(),
            uptime / 86_400,
            executable.display(),
        ));
        text
    }

    /// INFO's `replication` section: a standby gateway is a replica.
    fn info_replication(&self) -> String {
        let mut text = String::new();
        let role = if self.server.replica.is_standby() {
            "slave"
        } else {
            "master"
        };
        text.push_str(&format!(
            "# Replication\r\nrole:{role}\r\nconnected_slaves:0\r\nmaster_failover_state:no-failover\r\n\
             master_replid:{}\r\nmaster_repl_offset:0\r\nsecond_repl_offset:-1\r\nrepl_backlog_active:0\r\n\r\n",
            run_id()
        ));
        text
    }

    /// INFO's `stats` section.
    async fn info_stats(&self) -> String {
        let mut text = String::new();
        // The fleet's count for this gateway's databases (0 should the database not answer).
        let buckets: Vec<&str> = self.server.settings.databases.values().map(String::as_str).collect();
        let expired = self.server.buckets.catalog().expired_keys(&buckets).await.unwrap_or(0);
        // CLIENT TRACKING's table is this gateway's (each gateway remembers its own clients' reads).
        let tracking = self.server.pubsub.tracking.totals();
        let (pubsub_channels, pubsub_patterns) = self.server.pubsub.totals();
        // `migrate_cached_sockets`: pgvs3 has no MIGRATE, so no socket is ever cached for one.
        text.push_str(&format!(
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\
             expired_keys:{expired}\r\nevicted_keys:0\r\npubsub_channels:{}\r\npubsub_patterns:{}\r\n\
             migrate_cached_sockets:0\r\n\
             tracking_total_keys:{}\r\ntracking_total_items:{}\r\ntracking_total_prefixes:{}\r\n\
             unexpected_error_replies:0\r\ntotal_error_replies:{}\r\nlazyfreed_objects:0\r\n\r\n",
            self.server.clients.total_registered(),
            self.server.stats.processed(),
            pubsub_channels,
            pubsub_patterns,
            tracking.keys,
            tracking.items,
            tracking.prefixes,
            self.server.stats.error_replies(),
        ));
        text
    }

    /// INFO's `keyspace` section: each database that has keys.
    async fn info_keyspace(&self) -> String {
        let mut text = String::new();
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
        text
    }

    /// CONFIG. `notify-keyspace-events` and the encoding parameters are settings of the
    /// database's keyspace, for every gateway (resp/notify.rs): CONFIG GET needs the right to
    /// read there (no tenant reads another's settings), CONFIG SET of them the right to write.
    /// `tracking-table-max-keys` is this gateway's, for every tenant: the root key's alone to set.
    async fn config(&mut self, args: &[Bytes]) -> Reply {
        if args[1].eq_ignore_ascii_case(b"resetstat") {
            // The counts are the gateway's, every tenant's: the root key's to reset.
            return match (args.len(), self.root_only("config|resetstat")) {
                (2, Ok(())) => {
                    self.server.stats.reset();
                    Reply::OK
                }
                (2, Err(reply)) => reply,
                _ => wrong_arity("config|resetstat"),
            };
        }
        let events = &self.server.pubsub.events;
        let bucket = match self.keyspace(Access::Read).await {
            Ok(keyspace) => keyspace.bucket().to_owned(),
            Err(reply) => return reply,
        };
        let bucket = &bucket;
        let flags = match events.flags(bucket).await {
            Ok(flags) => flags,
            Err(err) => return store_error(err),
        };
        let encodings = match self.server.buckets.catalog().encoding_parameters(bucket).await {
            Ok(values) => values,
            Err(err) => return store_error(err),
        };
        let mut set = Changes::default();
        let reply = config_command(args, &self.config_parameters(flags, &encodings), &mut set);
        if let (Reply::Simple("OK"), Some(max)) = (&reply, set.tracking_table_max_keys) {
            if let Err(reply) = self.root_only("config|set") {
                return reply;
            }
            self.server.pubsub.tracking.set_max_keys(max);
        }
        if let (Reply::Simple("OK"), Some(flags)) = (&reply, set.events) {
            let keyspace = match self.keyspace(Access::Write).await {
                Ok(keyspace) => keyspace,
                Err(reply) => return reply,
            };
            if let Err(err) = events.set(keyspace.bucket(), flags).await {
                return store_error(err);
            }
        }
        if matches!(reply, Reply::Simple("OK")) && !set.encodings.is_empty() {
            let keyspace = match self.keyspace(Access::Write).await {
                Ok(keyspace) => keyspace,
                Err(reply) => return reply,
            };
            let catalog = self.server.buckets.catalog();
            if let Err(err) = catalog.set_encoding_parameters(keyspace.bucket(), &set.encodings).await {
                return store_error(err);
            }
        }
        reply
    }

    /// What CONFIG GET shows: the parameters client libraries and tools ask for (redis-cli,
    /// BullMQ's `maxmemory-policy` check, ...), with what stands for them here; `encodings`
    /// the keyspace's encoding parameters in [`EncodingParameter::ALL`]'s order.
    fn config_parameters(&self, events: Flags, encodings: &[i64]) -> Vec<(&'static str, String)> {
        let settings = &self.server.settings;
        let databases = settings.databases.keys().max().map_or(1, |last| last + 1);
        let script_ms = settings.script.time.as_millis().to_string();
        let idle = settings.idle_timeout.map_or(0, |timeout| timeout.as_secs());
        let pubsub = settings.pubsub.output_limit;
        let normal = settings.output_limit.unwrap_or(0);
        [
            ("databases", databases.to_string()),
            ("maxclients", settings.max_clients.to_string()),
            ("timeout", idle.to_string()),
            ("port", self.server.addr.port().to_string()),
            ("bind", self.server.addr.ip().to_string()),
            // There is no replication to configure (see Replicas): Redis's empty values.
            ("replicaof", String::new()),
            ("slaveof", String::new()),
            ("maxmemory", "0".into()),
            ("maxmemory-policy", "noeviction".into()),
            // Every write is durable at its reply (PostgreSQL): no snapshots, no AOF.
            ("save", String::new()),
            ("appendonly", "no".into()),
            ("notify-keyspace-events", events.text()),
            // This gateway's table (CLIENT TRACKING): set here, for this gateway.
            (
                "tracking-table-max-keys",
                self.server.pubsub.tracking.max_keys().to_string(),
            ),
            ("proto-max-bulk-len", (512 * 1024 * 1024).to_string()),
            ("busy-reply-threshold", script_ms.clone()),
            ("lua-time-limit", script_ms),
            ("cluster-enabled", "no".into()),
            (
                "client-output-buffer-limit",
                format!("normal {normal} 0 0 slave 268435456 67108864 60 pubsub {pubsub} {pubsub} 0"),
            ),
            // Each write is committed by PostgreSQL before its reply: as with `appendfsync always`.
            ("appendfsync", "always".into()),
            // Redis's defaults, for tools that read them; pgvs3 keeps no slow log, latency
            // monitor or eviction sampling, and evicts nothing.
            ("slowlog-log-slower-than", "10000".into()),
            ("slowlog-max-len", "128".into()),
            ("latency-monitor-threshold", "0".into()),
            ("maxmemory-samples", "5".into()),
            ("maxmemory-clients", "0".into()),
            ("hz", "10".into()),
            ("io-threads", "1".into()),
            ("replica-read-only", "yes".into()),
        ]
        .into_iter()
        .chain(KEPT_ENCODING_PARAMETERS.iter().map(|(name, parameter, _)| {
            let at = EncodingParameter::ALL.iter().position(|known| known == parameter);
            (
                *name,
                at.and_then(|at| encodings.get(at))
                    .map_or_else(String::new, i64::to_string),
            )
        }))
        .chain(
            ENCODING_PARAMETERS
                .iter()
                .map(|(name, default)| (*name, (*default).to_owned())),
        )
        .collect()
    }
}

/// INFO's `run_id` (and `master_replid`): 40 hex digits that change with each start of the
/// gateway, as Redis's do, so a tool can tell a restart.
fn run_id() -> &'static str {
    static RUN_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    RUN_ID.get_or_init(|| {
        let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let seed = format!("{}:{}", std::process::id(), started.as_nanos());
        hex::encode(<sha1::Sha1 as sha1::Digest>::digest(seed.as_bytes()))
    })
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
pub(crate) fn time_reply() -> Reply {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    Reply::Array(vec![
        Reply::text(&now.as_secs().to_string()),
        Reply::text(&now.subsec_micros().to_string()),
    ])
}

/// MEMORY's subcommands but USAGE (a key command, `keys.rs`): the gateway keeps no dataset
/// in memory, so PURGE has nothing to give back and DOCTOR nothing to diagnose; STATS and
/// MALLOC-STATS describe Redis's allocator, which there is none of here.
fn memory_command(args: &[Bytes]) -> Reply {
    match (args[1].to_ascii_lowercase().as_slice(), args.len()) {
        (b"purge", 2) => Reply::OK,
        (b"doctor", 2) => Reply::text(
            "pgvs3 keeps its values in PostgreSQL, not in the gateway's memory: there is nothing to \
             diagnose here (INFO memory shows the gateway process).",
        ),
        (b"help", 2) => Reply::Array(
            [
                "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DOCTOR",
                "    Return memory problems reports.",
                "PURGE",
                "    Attempt to purge dirty pages for reclamation by the allocator.",
                "USAGE <key> [SAMPLES <count>]",
                "    Return the bytes <key> and its value take as stored in PostgreSQL. Collections are",
                "    sampled up to <count> elements (default: 5, 0 means sample all).",
                "HELP",
                "    Prints this help.",
            ]
            .into_iter()
            .map(Reply::Simple)
            .collect(),
        ),
        (b"stats" | b"malloc-stats", 2) => Reply::error(format!(
            "ERR MEMORY {} is not supported by pgvs3: values live in PostgreSQL, not in an allocator \
             (INFO memory shows the gateway process)",
            String::from_utf8_lossy(&args[1]).to_uppercase()
        )),
        (b"purge" | b"doctor" | b"help" | b"stats" | b"malloc-stats", _) => wrong_arity(&format!(
            "memory|{}",
            String::from_utf8_lossy(&args[1]).to_ascii_lowercase()
        )),
        _ => Reply::error(format!(
            "ERR unknown subcommand '{}'. Try MEMORY HELP.",
            String::from_utf8_lossy(&args[1])
        )),
    }
}

/// Whether a CONFIG command sets a parameter kept per keyspace (an encoding parameter, or
/// `notify-keyspace-events`): what the commands after it do depends on it, so inside MULTI it
/// cannot run apart from EXEC's transaction.
pub(crate) fn sets_keyspace_parameter(args: &[Bytes]) -> bool {
    args.len() > 2
        && args[1].eq_ignore_ascii_case(b"set")
        && args[2..].iter().step_by(2).any(|name| {
            name.eq_ignore_ascii_case(b"notify-keyspace-events")
                || KEPT_ENCODING_PARAMETERS
                    .iter()
                    .any(|(known, _, _)| name.eq_ignore_ascii_case(known.as_bytes()))
        })
}

/// Redis's encoding parameters that decide what OBJECT ENCODING answers for a hash, set or
/// sorted set, and where a stream's `~` trims stop (its nodes' size), kept per keyspace in PostgreSQL (so the same for every gateway, as
/// `notify-keyspace-events`): each name (7.0's, and its ziplist alias of Redis 6), what it
/// sets, and whether it takes a memory value (`1kb`) rather than an integer (Redis's
/// MEMORY_CONFIG and INTEGER_CONFIG, config.c).
const KEPT_ENCODING_PARAMETERS: &[(&str, EncodingParameter, bool)] = &[
    ("hash-max-listpack-entries", EncodingParameter::HashEntries, false),
    ("hash-max-ziplist-entries", EncodingParameter::HashEntries, false),
    ("hash-max-listpack-value", EncodingParameter::HashValue, true),
    ("hash-max-ziplist-value", EncodingParameter::HashValue, true),
    ("set-max-intset-entries", EncodingParameter::SetEntries, false),
    ("zset-max-listpack-entries", EncodingParameter::ZsetEntries, false),
    ("zset-max-ziplist-entries", EncodingParameter::ZsetEntries, false),
    ("zset-max-listpack-value", EncodingParameter::ZsetValue, true),
    ("zset-max-ziplist-value", EncodingParameter::ZsetValue, true),
    ("stream-node-max-entries", EncodingParameter::StreamEntries, false),
];

/// Redis's other parameters that only choose in-memory encodings (list node sizes, 7.2's
/// listpack sets) or defragmentation, with Redis 7's defaults: they change nothing a client can
/// see here (a list is always `quicklist` in 7.0), so CONFIG SET accepts them and changes
/// nothing, and CONFIG GET answers the defaults. `stream-node-max-bytes` too: a stream's nodes
/// here are bounded by `stream-node-max-entries` alone (see docs/resp-compatibility.md).
const ENCODING_PARAMETERS: &[(&str, &str)] = &[
    ("list-max-listpack-size", "-2"),
    ("list-max-ziplist-size", "-2"),
    ("list-compress-depth", "0"),
    ("set-max-listpack-entries", "128"),
    ("set-max-listpack-value", "64"),
    ("stream-node-max-bytes", "4096"),
    ("activedefrag", "no"),
    ("lazyfree-lazy-user-del", "no"),
    ("lazyfree-lazy-user-flush", "no"),
];

/// Redis's reasons for refusing a value of a size parameter (config.c numericParseString,
/// numericBoundaryCheck for a range of 0 to LONG_MAX).
const NOT_AN_INTEGER: &str = "argument couldn't be parsed into an integer";
const NOT_IN_RANGE: &str = "argument must be between 0 and 9223372036854775807 inclusive";

/// What a CONFIG SET changes, once all its pairs are checked.
#[derive(Default)]
struct Changes {
    /// A keyspace notifications setting to store.
    events: Option<Flags>,
    tracking_table_max_keys: Option<usize>,
    /// Encoding parameters to store, each as its last pair set it.
    encodings: Vec<(EncodingParameter, i64)>,
}

/// CONFIG GET answers the parameters of `parameters` that one of its glob patterns names.
/// Redis 7.0.15's parameters CONFIG SET refuses as immutable (`can't set immutable config`).
const IMMUTABLE_PARAMETERS: &[&str] = &[
    "aclfile",
    "always-show-logo",
    "aof_rewrite_cpulist",
    "appenddirname",
    "appendfilename",
    "bgsave_cpulist",
    "bio_cpulist",
    "cluster-config-file",
    "cluster-enabled",
    "cluster-port",
    "daemonize",
    "databases",
    "disable-thp",
    "enable-debug-command",
    "enable-module-command",
    "enable-protected-configs",
    "io-threads",
    "io-threads-do-reads",
    "logfile",
    "pidfile",
    "rdbchecksum",
    "replicaof",
    "server_cpulist",
    "set-proc-title",
    "slaveof",
    "socket-mark-id",
    "supervised",
    "syslog-enabled",
    "syslog-facility",
    "syslog-ident",
    "tcp-backlog",
    "unixsocket",
    "unixsocketperm",
];

/// Redis's hidden parameters that CONFIG GET answers only when named, not by a pattern, with
/// what stands for them here: nothing is loaded, so no key waits to load.
const HIDDEN_PARAMETERS: &[(&str, &str)] = &[("key-load-delay", "0")];

/// CONFIG SET checks every pair before any is set, into `changes`.
fn config_command(args: &[Bytes], parameters: &[(&'static str, String)], changes: &mut Changes) -> Reply {
    match args[1].to_ascii_lowercase().as_slice() {
        b"get" if args.len() >= 3 => {
            let patterns: Vec<Vec<u8>> = args[2..].iter().map(|pattern| pattern.to_ascii_lowercase()).collect();
            let hidden = HIDDEN_PARAMETERS
                .iter()
                .filter(|(name, _)| patterns.iter().any(|pattern| pattern == name.as_bytes()));
            Reply::Map(
                parameters
                    .iter()
                    .filter(|(name, _)| patterns.iter().any(|pattern| glob::matches(pattern, name.as_bytes())))
                    .map(|(name, value)| (Reply::text(name), Reply::bulk(value.clone())))
                    .chain(hidden.map(|(name, value)| (Reply::text(name), Reply::text(value))))
                    .collect(),
            )
        }
        b"get" => wrong_arity("config|get"),
        b"set" if args.len() >= 4 && args.len().is_multiple_of(2) => {
            // Redis checks every name before any value: immutable, then given twice.
            let pairs: Vec<&[Bytes]> = args[2..].chunks(2).collect();
            for (at, pair) in pairs.iter().enumerate() {
                let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                let why = if IMMUTABLE_PARAMETERS.contains(&name.as_str()) {
                    "can't set immutable config"
                } else if pairs[..at]
                    .iter()
                    .any(|earlier| earlier[0].eq_ignore_ascii_case(&pair[0]))
                {
                    "duplicate parameter"
                } else {
                    continue;
                };
                return Reply::error(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{}') - {why}",
                    String::from_utf8_lossy(&pair[0])
                ));
            }
            for pair in pairs {
                let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                let failed = |why: &str| {
                    Reply::error(format!(
                        "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                    ))
                };
                if ENCODING_PARAMETERS.iter().any(|(encoding, _)| *encoding == name) {
                    continue;
                }
                // `save ""` (no RDB snapshots) is what pgvs3 is: every write is durable in
                // PostgreSQL at its reply and nothing is snapshotted, so it changes nothing (CONFIG
                // GET answers it already). Redis's test units set it before they start.
                if name == "save" && pair[1].is_empty() {
                    continue;
                }
                if let Some((_, parameter, memory)) = KEPT_ENCODING_PARAMETERS.iter().find(|(kept, ..)| *kept == name) {
                    let value = if *memory {
                        memory_value(&pair[1]).ok_or_else(|| failed("argument must be a memory value"))
                    } else {
                        command::parse_integer(&pair[1]).ok_or_else(|| failed(NOT_AN_INTEGER))
                    };
                    let value = match value {
                        Ok(value) if value >= 0 => value,
                        Ok(_) => return failed(NOT_IN_RANGE),
                        Err(reply) => return reply,
                    };
                    changes.encodings.retain(|(set, _)| set != parameter);
                    changes.encodings.push((*parameter, value));
                    continue;
                }
                if name == "notify-keyspace-events" {
                    let Some(flags) = Flags::parse(&pair[1]) else {
                        return failed(INVALID_FLAGS);
                    };
                    if let Some(why) = flags.unsupported() {
                        return failed(why);
                    }
                    changes.events = Some(flags);
                    continue;
                }
                if name == "tracking-table-max-keys" {
                    let Some(max) = command::parse_integer(&pair[1]) else {
                        return failed(NOT_AN_INTEGER);
                    };
                    let Ok(max) = usize::try_from(max) else {
                        return failed(NOT_IN_RANGE);
                    };
                    changes.tracking_table_max_keys = Some(max);
                    continue;
                }
                // In the shape of Redis's refusal of a value (clients and Redis's tests match
                // `CONFIG SET failed`).
                if parameters.iter().any(|(known, _)| *known == name) {
                    return failed(
                        "it is not supported by pgvs3: it is configured by its flags (see docs/resp-compatibility.md)",
                    );
                }
                return Reply::error(format!(
                    "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                ));
            }
            Reply::OK
        }
        b"set" => wrong_arity("config|set"),
        // Redis's other subcommands.
        b"rewrite" | b"help" => Reply::error(format!(
            "ERR CONFIG {} is not supported by pgvs3 (it is configured by its flags)",
            String::from_utf8_lossy(&args[1]).to_uppercase()
        )),
        _ => Reply::error(format!(
            "ERR unknown subcommand '{}'. Try CONFIG HELP.",
            String::from_utf8_lossy(&args[1])
        )),
    }
}

/// A memory value as Redis's `memtoull` reads it: digits and an optional unit (`b`, `k`, `kb`,
/// `m`, `mb`, `g`, `gb`, in any case), `None` for anything else. Like `strtoull` it saturates
/// past u64's range and the product wraps; read as a signed number, as Redis's CONFIG SET
/// then reads it, such a value is negative and fails its range check.
fn memory_value(text: &[u8]) -> Option<i64> {
    let digits = text.iter().take_while(|byte| byte.is_ascii_digit()).count();
    let multiplier: u64 = match text[digits..].to_ascii_lowercase().as_slice() {
        b"" | b"b" => 1,
        b"k" => 1000,
        b"kb" => 1024,
        b"m" => 1000 * 1000,
        b"mb" => 1024 * 1024,
        b"g" => 1000 * 1000 * 1000,
        b"gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    let number = text[..digits]
        .iter()
        .try_fold(0u64, |sum, digit| {
            sum.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
        })
        .unwrap_or(u64::MAX);
    Some(number.wrapping_mul(multiplier) as i64)
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
