//! The command table (names, arities, flags, key ranges; COMMAND answers from it in
//! `command_info.rs`) and parsing of key commands into typed requests, with Redis's own error
//! texts for bad arguments.

use bytes::Bytes;

use super::codec::{MAX_BULK_LEN, Reply};
use super::commands::strings::StringCommand;
use super::typed::Typed;

/// What COMMAND INFO reports, and what the arity check uses: a positive arity is exact, a
/// negative one a minimum (both count the command name).
pub struct Spec {
    pub name: &'static str,
    pub arity: i64,
    pub flags: &'static [&'static str],
    pub first_key: i64,
    pub last_key: i64,
    pub step: i64,
}

const fn spec(name: &'static str, arity: i64, flags: &'static [&'static str], keys: (i64, i64, i64)) -> Spec {
    Spec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
    }
}

const R: &[&str] = &["readonly", "fast"];
const W: &[&str] = &["write", "denyoom"];
const C: &[&str] = &["fast", "loading", "stale"];
const PUBSUB: &[&str] = &["pubsub", "noscript", "loading", "stale"];
/// PUBLISH and SPUBLISH, which scripts may call (BullMQ's scripts do).
const PUBLISH: &[&str] = &["pubsub", "loading", "stale", "fast"];
/// EVAL and its kin: their keys are found by their numkeys argument (`movablekeys`).
const SCRIPT: &[&str] = &[
    "noscript",
    "stale",
    "skip_monitor",
    "may_replicate",
    "no_mandatory_keys",
    "movablekeys",
];
const SCRIPT_RO: &[&str] = &[
    "readonly",
    "noscript",
    "stale",
    "skip_monitor",
    "no_mandatory_keys",
    "movablekeys",
];
/// Commands whose keys follow a numkeys argument or a STREAMS keyword (`movablekeys`).
const MOVABLE_READ: &[&str] = &["readonly", "movablekeys"];
const MOVABLE_STORE: &[&str] = &["write", "denyoom", "movablekeys"];
const MOVABLE_BLOCKING: &[&str] = &["write", "blocking", "movablekeys"];
const NONE: (i64, i64, i64) = (0, 0, 0);
const ONE: (i64, i64, i64) = (1, 1, 1);
const TWO: (i64, i64, i64) = (1, 2, 1);
const ALL: (i64, i64, i64) = (1, -1, 1);
const PAIRS: (i64, i64, i64) = (1, -1, 2);
/// OBJECT's key, after its subcommand.
const TWO_ONLY: (i64, i64, i64) = (2, 2, 1);

/// Commands whose first argument is a subcommand, which Redis names `command|subcommand` (in
/// CLIENT LIST's `cmd=`, and in ACL's denials: [`Spec::full_name`] is the one place that knows).
const CONTAINERS: &[&str] = &[
    "acl", "client", "command", "config", "function", "memory", "object", "pubsub", "script", "xgroup", "xinfo",
];

impl Spec {
    /// The command's name as Redis names a call of it (CLIENT LIST's `cmd=`): a container's
    /// with its subcommand, `client|list`.
    pub fn full_name(&self, subcommand: Option<&[u8]>) -> String {
        match subcommand {
            Some(sub) if CONTAINERS.contains(&self.name) => {
                format!("{}|{}", self.name, String::from_utf8_lossy(sub).to_ascii_lowercase())
            }
            _ => self.name.to_owned(),
        }
    }
}

pub static COMMANDS: &[Spec] = &[
    spec("get", 2, R, ONE),
    spec("set", -3, W, ONE),
    spec("mget", -2, R, ALL),
    spec("mset", -3, W, PAIRS),
    spec("msetnx", -3, W, PAIRS),
    spec("setnx", 3, W, ONE),
    spec("setex", 4, W, ONE),
    spec("psetex", 4, W, ONE),
    spec("getset", 3, W, ONE),
    spec("getdel", 2, W, ONE),
    spec("getex", -2, W, ONE),
    spec("append", 3, W, ONE),
    spec("strlen", 2, R, ONE),
    spec("getrange", 4, R, ONE),
    spec("substr", 4, R, ONE),
    spec("setrange", 4, W, ONE),
    spec("incr", 2, W, ONE),
    spec("decr", 2, W, ONE),
    spec("incrby", 3, W, ONE),
    spec("decrby", 3, W, ONE),
    spec("incrbyfloat", 3, W, ONE),
    spec("setbit", 4, W, ONE),
    spec("getbit", 3, R, ONE),
    spec("bitcount", -2, R, ONE),
    spec("bitpos", -3, R, ONE),
    // The destination and the sources, after the operation.
    spec("bitop", -4, W, (2, -1, 1)),
    spec("bitfield", -2, W, ONE),
    spec("bitfield_ro", -2, R, ONE),
    spec("lcs", -3, R, TWO),
    spec("hset", -4, W, ONE),
    spec("hmset", -4, W, ONE),
    spec("hsetnx", 4, W, ONE),
    spec("hget", 3, R, ONE),
    spec("hmget", -3, R, ONE),
    spec("hdel", -3, &["write", "fast"], ONE),
    spec("hexists", 3, R, ONE),
    spec("hlen", 2, R, ONE),
    spec("hstrlen", 3, R, ONE),
    spec("hgetall", 2, &["readonly"], ONE),
    spec("hkeys", 2, &["readonly"], ONE),
    spec("hvals", 2, &["readonly"], ONE),
    spec("hincrby", 4, W, ONE),
    spec("hincrbyfloat", 4, W, ONE),
    spec("hrandfield", -2, &["readonly"], ONE),
    spec("hscan", -3, &["readonly"], ONE),
    spec("sadd", -3, W, ONE),
    spec("srem", -3, &["write", "fast"], ONE),
    spec("smembers", 2, &["readonly"], ONE),
    spec("sismember", 3, R, ONE),
    spec("smismember", -3, R, ONE),
    spec("scard", 2, R, ONE),
    spec("spop", -2, &["write", "fast"], ONE),
    spec("srandmember", -2, &["readonly"], ONE),
    spec("smove", 4, &["write", "fast"], TWO),
    spec("sinter", -2, &["readonly"], ALL),
    spec("sunion", -2, &["readonly"], ALL),
    spec("sdiff", -2, &["readonly"], ALL),
    spec("sinterstore", -3, W, ALL),
    spec("sunionstore", -3, W, ALL),
    spec("sdiffstore", -3, W, ALL),
    spec("sintercard", -3, MOVABLE_READ, NONE),
    spec("sscan", -3, &["readonly"], ONE),
    spec("zadd", -4, W, ONE),
    spec("zincrby", 4, W, ONE),
    spec("zrem", -3, &["write", "fast"], ONE),
    spec("zscore", 3, R, ONE),
    spec("zmscore", -3, R, ONE),
    spec("zcard", 2, R, ONE),
    spec("zrank", -3, R, ONE),
    spec("zrevrank", -3, R, ONE),
    spec("zcount", 4, R, ONE),
    spec("zlexcount", 4, R, ONE),
    spec("zrange", -4, &["readonly"], ONE),
    spec("zrangestore", -5, &["write", "denyoom"], TWO),
    spec("zrevrange", -4, &["readonly"], ONE),
    spec("zrangebyscore", -4, &["readonly"], ONE),
    spec("zrevrangebyscore", -4, &["readonly"], ONE),
    spec("zrangebylex", -4, &["readonly"], ONE),
    spec("zrevrangebylex", -4, &["readonly"], ONE),
    spec("zremrangebyrank", 4, &["write"], ONE),
    spec("zremrangebyscore", 4, &["write"], ONE),
    spec("zremrangebylex", 4, &["write"], ONE),
    spec("zpopmin", -2, &["write", "fast"], ONE),
    spec("zpopmax", -2, &["write", "fast"], ONE),
    spec("zunionstore", -4, MOVABLE_STORE, ONE),
    spec("zinterstore", -4, MOVABLE_STORE, ONE),
    spec("zscan", -3, &["readonly"], ONE),
    spec("lpush", -3, &["write", "denyoom", "fast"], ONE),
    spec("rpush", -3, &["write", "denyoom", "fast"], ONE),
    spec("lpushx", -3, &["write", "denyoom", "fast"], ONE),
    spec("rpushx", -3, &["write", "denyoom", "fast"], ONE),
    spec("lpop", -2, &["write", "fast"], ONE),
    spec("rpop", -2, &["write", "fast"], ONE),
    spec("llen", 2, R, ONE),
    spec("lindex", 3, &["readonly"], ONE),
    spec("lrange", 4, &["readonly"], ONE),
    spec("lset", 4, &["write", "denyoom"], ONE),
    spec("linsert", 5, &["write", "denyoom"], ONE),
    spec("lrem", 4, &["write"], ONE),
    spec("ltrim", 4, &["write"], ONE),
    spec("lpos", -3, &["readonly"], ONE),
    spec("lmove", 5, &["write", "denyoom"], TWO),
    spec("rpoplpush", 3, &["write", "denyoom"], TWO),
    // Redis 7.0 refuses these from scripts (`noscript`); BLMPOP and BZMPOP run there without
    // waiting, as inside MULTI.
    spec("blpop", -3, &["write", "noscript", "blocking"], (1, -2, 1)),
    spec("brpop", -3, &["write", "noscript", "blocking"], (1, -2, 1)),
    spec("blmove", 6, &["write", "denyoom", "noscript", "blocking"], TWO),
    spec("brpoplpush", 4, &["write", "denyoom", "noscript", "blocking"], TWO),
    spec("bzpopmin", -3, &["write", "noscript", "blocking", "fast"], (1, -2, 1)),
    spec("bzpopmax", -3, &["write", "noscript", "blocking", "fast"], (1, -2, 1)),
    spec("xadd", -5, &["write", "denyoom", "fast"], ONE),
    spec("xlen", 2, R, ONE),
    spec("xrange", -4, &["readonly"], ONE),
    spec("xrevrange", -4, &["readonly"], ONE),
    spec("xdel", -3, &["write", "fast"], ONE),
    spec("xtrim", -4, &["write"], ONE),
    spec("xsetid", -3, &["write", "denyoom", "fast"], ONE),
    spec("xread", -4, &["readonly", "blocking", "movablekeys"], NONE),
    spec("xinfo", -2, &["readonly"], TWO_ONLY),
    // XREADGROUP moves its group's last delivered ID: a write.
    spec("xgroup", -2, &["write"], TWO_ONLY),
    spec("xreadgroup", -7, MOVABLE_BLOCKING, NONE),
    spec("xack", -4, &["write", "fast"], ONE),
    spec("xpending", -3, &["readonly"], ONE),
    spec("xclaim", -6, &["write", "fast"], ONE),
    spec("xautoclaim", -6, &["write", "fast"], ONE),
    spec("object", -2, &["readonly"], TWO_ONLY),
    // MEMORY USAGE is a key command; its other subcommands are the server's.
    spec("memory", -2, &["readonly"], TWO_ONLY),
    spec("del", -2, &["write"], ALL),
    spec("unlink", -2, &["write", "fast"], ALL),
    spec("exists", -2, R, ALL),
    spec("touch", -2, R, ALL),
    spec("expire", -3, &["write", "fast"], ONE),
    spec("pexpire", -3, &["write", "fast"], ONE),
    spec("expireat", -3, &["write", "fast"], ONE),
    spec("pexpireat", -3, &["write", "fast"], ONE),
    spec("expiretime", 2, R, ONE),
    spec("pexpiretime", 2, R, ONE),
    spec("ttl", 2, R, ONE),
    spec("pttl", 2, R, ONE),
    spec("persist", 2, &["write", "fast"], ONE),
    spec("type", 2, R, ONE),
    spec("rename", 3, &["write"], TWO),
    spec("renamenx", 3, &["write", "fast"], TWO),
    spec("copy", -3, W, TWO),
    spec("scan", -2, &["readonly"], NONE),
    spec("keys", 2, &["readonly"], NONE),
    spec("randomkey", 1, &["readonly"], NONE),
    spec("dbsize", 1, R, NONE),
    spec("flushdb", -1, &["write"], NONE),
    spec("flushall", -1, &["write"], NONE),
    spec("function", -2, &["noscript"], NONE),
    spec("ping", -1, C, NONE),
    spec("echo", 2, C, NONE),
    spec("auth", -2, &["noscript", "loading", "stale", "fast", "no_auth"], NONE),
    spec("hello", -1, &["noscript", "loading", "stale", "fast", "no_auth"], NONE),
    spec("select", 2, C, NONE),
    spec("client", -2, &["noscript", "loading", "stale"], NONE),
    spec("info", -1, &["loading", "stale"], NONE),
    spec("config", -2, &["admin", "loading", "stale"], NONE),
    spec("acl", -2, &["admin", "noscript", "loading", "stale"], NONE),
    spec("monitor", 1, &["admin", "noscript", "loading", "stale"], NONE),
    spec("command", -1, &["loading", "stale"], NONE),
    spec("time", 1, C, NONE),
    spec("quit", -1, &["fast", "no_auth"], NONE),
    spec("reset", 1, &["fast", "no_auth"], NONE),
    spec("multi", 1, C, NONE),
    spec("exec", 1, &["noscript", "loading", "stale"], NONE),
    spec("discard", 1, C, NONE),
    spec("watch", -2, C, ALL),
    spec("unwatch", 1, C, NONE),
    spec("zrandmember", -2, R, ONE),
    spec("zunion", -3, MOVABLE_READ, NONE),
    spec("zinter", -3, MOVABLE_READ, NONE),
    spec("zdiff", -3, MOVABLE_READ, NONE),
    spec("zintercard", -3, MOVABLE_READ, NONE),
    spec("zdiffstore", -4, MOVABLE_STORE, ONE),
    spec("zmpop", -4, &["write", "movablekeys"], NONE),
    spec("bzmpop", -5, MOVABLE_BLOCKING, NONE),
    spec("lmpop", -4, &["write", "movablekeys"], NONE),
    spec("blmpop", -5, MOVABLE_BLOCKING, NONE),
    spec("eval", -3, SCRIPT, NONE),
    spec("evalsha", -3, SCRIPT, NONE),
    spec("eval_ro", -3, SCRIPT_RO, NONE),
    spec("evalsha_ro", -3, SCRIPT_RO, NONE),
    spec("script", -2, &["noscript"], NONE),
    spec("fcall", -3, SCRIPT, NONE),
    spec("fcall_ro", -3, SCRIPT_RO, NONE),
    spec("subscribe", -2, PUBSUB, NONE),
    spec("psubscribe", -2, PUBSUB, NONE),
    spec("ssubscribe", -2, PUBSUB, NONE),
    spec("unsubscribe", -1, PUBSUB, NONE),
    spec("punsubscribe", -1, PUBSUB, NONE),
    spec("sunsubscribe", -1, PUBSUB, NONE),
    spec("publish", 3, PUBLISH, NONE),
    spec("spublish", 3, PUBLISH, NONE),
    spec("pubsub", -2, PUBSUB, NONE),
    spec("sort", -2, MOVABLE_STORE, ONE),
    spec("sort_ro", -2, MOVABLE_READ, ONE),
    spec("pfadd", -2, &["write", "denyoom", "fast"], ONE),
    spec("pfcount", -2, &["readonly", "may_replicate"], ALL),
    spec("pfmerge", -2, W, ALL),
    spec("geoadd", -5, W, ONE),
    spec("geopos", -2, R, ONE),
    spec("geohash", -2, R, ONE),
    spec("geodist", -4, R, ONE),
    spec("georadius", -6, MOVABLE_STORE, ONE),
    spec("georadius_ro", -6, &["readonly"], ONE),
    spec("georadiusbymember", -5, MOVABLE_STORE, ONE),
    spec("georadiusbymember_ro", -5, &["readonly"], ONE),
    spec("geosearch", -7, &["readonly"], ONE),
    spec("geosearchstore", -8, W, TWO),
    spec("dump", 2, &["readonly"], ONE),
    spec("restore", -4, W, ONE),
];

pub fn lookup(name: &str) -> Option<&'static Spec> {
    COMMANDS.iter().find(|spec| spec.name == name)
}

impl Spec {
    pub fn arity_ok(&self, args: usize) -> bool {
        let args = args as i64;
        if self.arity >= 0 {
            args == self.arity
        } else {
            args >= -self.arity
        }
    }

    pub fn is_write(&self) -> bool {
        self.flags.contains(&"write")
    }
}

pub fn syntax_error() -> Reply {
    Reply::error("ERR syntax error")
}

pub fn not_an_integer() -> Reply {
    Reply::error("ERR value is not an integer or out of range")
}

/// COPY with `DB` naming another database (or any, from a script): each database is a bucket.
pub fn copy_across_databases() -> Reply {
    Reply::error("ERR COPY to another database is not supported by pgvs3: each database is its own bucket")
}

pub fn wrong_arity(name: &str) -> Reply {
    Reply::error(format!("ERR wrong number of arguments for '{name}' command"))
}

/// Redis's text for an unknown command: the name cut at 128 bytes, then the arguments, quoted,
/// until they fill 128 bytes (Redis's processCommand: each cut to what is left of the 128, none
/// after), so that a request of many arguments gets a short error.
pub fn unknown_command(args: &[Bytes]) -> Reply {
    const LIMIT: usize = 128;
    let name = &args[0][..args[0].len().min(LIMIT)];
    let mut quoted: Vec<u8> = Vec::new();
    for arg in &args[1..] {
        if quoted.len() >= LIMIT {
            break;
        }
        let room = LIMIT - quoted.len();
        quoted.push(b'\'');
        quoted.extend_from_slice(&arg[..arg.len().min(room)]);
        quoted.extend_from_slice(b"' ");
    }
    Reply::Error(format!(
        "ERR unknown command '{}', with args beginning with: {}",
        String::from_utf8_lossy(name),
        String::from_utf8_lossy(&quoted)
    ))
}

/// Integers as Redis reads them (`string2ll`): optional minus, no plus, no spaces, no leading
/// zeros, within i64.
pub fn parse_integer(arg: &[u8]) -> Option<i64> {
    let digits = arg.strip_prefix(b"-").unwrap_or(arg);
    let canonical = !digits.is_empty()
        && digits.iter().all(u8::is_ascii_digit)
        && (digits == b"0" && arg.len() == 1 || digits[0] != b'0');
    if !canonical {
        return None;
    }
    std::str::from_utf8(arg).ok()?.parse().ok()
}

pub fn integer(arg: &[u8]) -> Result<i64, Reply> {
    parse_integer(arg).ok_or_else(not_an_integer)
}

/// Floats as INCRBYFLOAT reads them (Redis's `string2ld`): no spaces, no NaN, no number too
/// large to represent; `inf` spelled out is a float (the increment then fails as infinite).
pub fn parse_float(arg: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?;
    if text.is_empty() || text.trim() != text {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    let spelled_infinite = || {
        let unsigned = text.trim_start_matches(['+', '-']);
        unsigned.eq_ignore_ascii_case("inf") || unsigned.eq_ignore_ascii_case("infinity")
    };
    (value.is_finite() || value.is_infinite() && spelled_infinite()).then_some(value)
}

/// A key as the store holds it: UTF-8 text (an S3 key), at most 1024 bytes, no NUL.
pub fn key(arg: &Bytes) -> Result<String, Reply> {
    let text = std::str::from_utf8(arg)
        .map_err(|_| Reply::error("ERR invalid key: pgvs3 keys are UTF-8 text (they are S3 object keys)"))?;
    if text.len() > 1024 || text.contains('\0') {
        return Err(Reply::error(
            "ERR invalid key: pgvs3 keys are at most 1024 bytes and contain no NUL (they are S3 object keys)",
        ));
    }
    Ok(text.to_owned())
}

pub(crate) fn keys(args: &[Bytes]) -> Result<Vec<String>, Reply> {
    args.iter().map(key).collect()
}

/// When a key expires, as a command states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Milliseconds from now.
    In(i64),
    /// Unix time in milliseconds.
    At(i64),
}

/// The options of EXPIRE and its kin, as Redis 7 combines them: NX or XX, and GT or LT (XX
/// combines with GT or LT; NX with neither).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExpireCondition {
    /// NX (`Some(false)`: only a key without a TTL) or XX (`Some(true)`: only one with a TTL).
    pub has_ttl: Option<bool>,
    /// GT or LT: only when the new expiry is later (`Greater`) or earlier than the current one;
    /// a key without a TTL counts as never expiring.
    pub compare: Option<std::cmp::Ordering>,
}

impl ExpireCondition {
    pub fn allows(&self, current: Option<std::time::SystemTime>, new: std::time::SystemTime) -> bool {
        if self.has_ttl.is_some_and(|wanted| wanted != current.is_some()) {
            return false;
        }
        match (self.compare, current) {
            (None, _) => true,
            (Some(std::cmp::Ordering::Greater), current) => current.is_some_and(|current| new > current),
            (Some(_), current) => current.is_none_or(|current| new < current),
        }
    }
}

/// A command on keys: runs against the keys of a batch (see `keys.rs`).
#[derive(Debug, Clone)]
pub enum KeyCommand {
    /// GET, SET, INCR, ...: `commands/strings.rs`.
    Str(StringCommand),
    Del(Vec<String>),
    Exists(Vec<String>),
    Expire {
        key: String,
        when: Expiry,
        condition: ExpireCondition,
    },
    ExpireTime {
        key: String,
        millis: bool,
    },
    Ttl {
        key: String,
        millis: bool,
    },
    Persist(String),
    Type(String),
    Rename {
        from: String,
        to: String,
        only_new: bool,
    },
    Copy {
        from: String,
        to: String,
        replace: bool,
        /// `DB n`: the destination's database, until [`KeyCommand::resolve_copy_db`] finds it
        /// is the command's own.
        db: Option<i64>,
    },
    /// OBJECT ENCODING, FREQ, IDLETIME or REFCOUNT.
    Object {
        key: String,
        subcommand: ObjectInfo,
    },
    /// MEMORY USAGE: `samples` elements of a collection sampled (0: all of them).
    MemoryUsage {
        key: String,
        samples: i64,
    },
    /// A command on a hash, set, sorted set or list: run in SQL (see `typed.rs`).
    Typed(Box<Typed>),
    /// SORT, HyperLogLog, GEO, DUMP and RESTORE, BITOP and BITFIELD (`commands/family.rs`).
    Family(Box<super::commands::family::FamilyCommand>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectInfo {
    Encoding,
    Freq,
    IdleTime,
    RefCount,
}

impl KeyCommand {
    /// COPY's `DB n` from a client in database `current`, where `exists` says which databases
    /// are configured: the client's own database is as if none were named; one not configured
    /// answers Redis's error; another is refused, as each database is its own bucket and a
    /// batch works in one. (A script's COPY keeps its `DB`, refused when it runs.)
    pub fn resolve_copy_db(&mut self, current: u32, exists: impl Fn(u32) -> bool) -> Result<(), Reply> {
        let KeyCommand::Copy { db, .. } = self else {
            return Ok(());
        };
        match db.map(u32::try_from) {
            None => Ok(()),
            Some(Ok(index)) if index == current => {
                *db = None;
                Ok(())
            }
            Some(Ok(index)) if exists(index) => Err(copy_across_databases()),
            Some(_) => Err(Reply::error("ERR DB index is out of range")),
        }
    }

    /// Has a typed command's reply cut in the database when it would take more than `bytes`
    /// (see `TypedCall::reply_limit`); string commands' replies are bounded by their values.
    pub fn limit_reply(&mut self, bytes: i64) -> &mut KeyCommand {
        if let KeyCommand::Typed(typed) = self {
            typed.call.reply_limit = Some(bytes);
        }
        self
    }

    /// The keys the command reads or writes.
    pub fn keys(&self) -> Vec<&String> {
        use KeyCommand::*;
        match self {
            Str(command) => command.keys(),
            Expire { key, .. }
            | ExpireTime { key, .. }
            | Ttl { key, .. }
            | Persist(key)
            | Type(key)
            | Object { key, .. }
            | MemoryUsage { key, .. } => vec![key],
            Typed(typed) => typed.call.keys.iter().collect(),
            Family(command) => command.keys(),
            Del(keys) | Exists(keys) => keys.iter().collect(),
            Rename { from, to, .. } | Copy { from, to, .. } => vec![from, to],
        }
    }

    /// Whether the command reads only what its keys are (there, their type, TTL, encoding or
    /// size) and changes nothing of them.
    pub fn only_looks(&self) -> bool {
        use KeyCommand::*;
        matches!(
            self,
            Exists(_) | Type(_) | Ttl { .. } | ExpireTime { .. } | Object { .. } | MemoryUsage { .. }
        )
    }

    /// Whether the command works in its batch alone on keys the batch holds as strings or
    /// absent: no statement of its own reaches them before the batch's commit. Not RENAME or
    /// COPY (a typed source moves to the destination in SQL), the families' commands (SORT ...
    /// STORE, RESTORE, GEO*, ...), nor a typed command.
    pub fn stays_in_batch(&self) -> bool {
        use KeyCommand::*;
        !matches!(self, Rename { .. } | Copy { .. } | Family(_) | Typed(_))
    }

    /// Whether the command only overwrites its keys, never looking at what they hold or held:
    /// a batch of such commands needs nothing loaded before it runs.
    pub fn overwrites_blindly(&self) -> bool {
        matches!(self, KeyCommand::Str(command) if command.overwrites_blindly())
    }

    /// Parses a key command; `Ok(None)` when `name` is not one. The arity is already checked.
    pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<KeyCommand>, Reply> {
        use KeyCommand::*;
        let arg = |i: usize| &args[i];
        let command = match name {
            "del" | "unlink" => Del(keys(&args[1..])?),
            // TOUCH counts as EXISTS does; there is no access time to update.
            "exists" | "touch" => Exists(keys(&args[1..])?),
            "expire" | "pexpire" | "expireat" | "pexpireat" => parse_expire(name, args)?,
            "expiretime" | "pexpiretime" => ExpireTime {
                key: key(arg(1))?,
                millis: name == "pexpiretime",
            },
            "ttl" | "pttl" => Ttl {
                key: key(arg(1))?,
                millis: name == "pttl",
            },
            "persist" => Persist(key(arg(1))?),
            "type" => Type(key(arg(1))?),
            "rename" | "renamenx" => Rename {
                from: key(arg(1))?,
                to: key(arg(2))?,
                only_new: name == "renamenx",
            },
            "copy" => {
                let (mut replace, mut db) = (false, None);
                // In order, the first bad option answering, as Redis's `copyCommand` reads them.
                let mut options = args[3..].iter();
                while let Some(option) = options.next() {
                    if option.eq_ignore_ascii_case(b"replace") {
                        replace = true;
                    } else if option.eq_ignore_ascii_case(b"db")
                        && let Some(index) = options.next()
                    {
                        // Redis's `getIntFromObjectOrReply`: a C int.
                        let index = integer(index)?;
                        if i32::try_from(index).is_err() {
                            return Err(Reply::error(
                                "ERR value is out of range, value must between -2147483648 and 2147483647",
                            ));
                        }
                        db = Some(index);
                    } else {
                        return Err(syntax_error());
                    }
                }
                Copy {
                    from: key(arg(1))?,
                    to: key(arg(2))?,
                    replace,
                    db,
                }
            }
            "object" => {
                let subcommand = match (arg(1).to_ascii_lowercase().as_slice(), args.len()) {
                    (b"encoding", 3) => ObjectInfo::Encoding,
                    (b"freq", 3) => ObjectInfo::Freq,
                    (b"idletime", 3) => ObjectInfo::IdleTime,
                    (b"refcount", 3) => ObjectInfo::RefCount,
                    // OBJECT HELP names no key (`commands/object.rs`).
                    (b"help", 2) => return Ok(None),
                    (b"encoding" | b"freq" | b"idletime" | b"refcount" | b"help", _) => {
                        return Err(wrong_arity(&format!(
                            "object|{}",
                            String::from_utf8_lossy(arg(1)).to_ascii_lowercase()
                        )));
                    }
                    _ => {
                        return Err(Reply::error(format!(
                            "ERR unknown subcommand '{}'. Try OBJECT HELP.",
                            String::from_utf8_lossy(arg(1))
                        )));
                    }
                };
                Object {
                    key: key(arg(2))?,
                    subcommand,
                }
            }
            "memory" if arg(1).eq_ignore_ascii_case(b"usage") => {
                let samples = match args {
                    [_, _] => return Err(wrong_arity("memory|usage")),
                    [_, _, _] => 5,
                    [_, _, _, option, count] if option.eq_ignore_ascii_case(b"samples") => match parse_integer(count) {
                        None => return Err(not_an_integer()),
                        Some(count) if count < 0 => return Err(syntax_error()),
                        Some(count) => count,
                    },
                    _ => return Err(syntax_error()),
                };
                MemoryUsage {
                    key: key(arg(2))?,
                    samples,
                }
            }
            // MEMORY's other subcommands (`commands/server.rs`).
            "memory" => return Ok(None),
            _ => {
                if let Some(command) = StringCommand::parse(name, args)? {
                    return Ok(Some(Str(command)));
                }
                match super::commands::family::FamilyCommand::parse(name, args)? {
                    Some(command) => Family(Box::new(command)),
                    None => return Ok(super::typed::parse(name, args)?.map(|typed| Typed(Box::new(typed)))),
                }
            }
        };
        Ok(Some(command))
    }
}

pub(crate) fn invalid_expire_time(command: &str) -> Reply {
    Reply::error(format!("ERR invalid expire time in '{command}' command"))
}

/// Milliseconds since the Unix epoch, against which Redis checks that an expiry can be added
/// to now.
pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

/// EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT, checked as Redis's `expireGenericCommand` does:
/// options first, then the amount, which may be zero or negative (the key is deleted) but must
/// not overflow when converted to milliseconds or, for a relative one, added to now.
fn parse_expire(name: &str, args: &[Bytes]) -> Result<KeyCommand, Reply> {
    let condition = parse_expire_condition(&args[3..])?;
    let amount = integer(&args[2])?;
    let invalid = || invalid_expire_time(name);
    let (absolute, scale) = match name {
        "expire" => (false, 1000),
        "pexpire" => (false, 1),
        "expireat" => (true, 1000),
        _ => (true, 1),
    };
    let millis = amount.checked_mul(scale).ok_or_else(invalid)?;
    let when = if absolute {
        Expiry::At(millis)
    } else {
        now_millis().checked_add(millis).ok_or_else(invalid)?;
        Expiry::In(millis)
    };
    Ok(KeyCommand::Expire {
        key: key(&args[1])?,
        when,
        condition,
    })
}

fn parse_expire_condition(options: &[Bytes]) -> Result<ExpireCondition, Reply> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in options {
        match option.to_ascii_lowercase().as_slice() {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"gt" => gt = true,
            b"lt" => lt = true,
            _ => {
                return Err(Reply::error(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(option)
                )));
            }
        }
    }
    if nx && (xx || gt || lt) {
        return Err(Reply::error(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(Reply::error(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    Ok(ExpireCondition {
        has_ttl: (nx || xx).then_some(xx),
        compare: gt
            .then_some(std::cmp::Ordering::Greater)
            .or(lt.then_some(std::cmp::Ordering::Less)),
    })
}

/// Whether a value of `len` bytes is within Redis's string limit.
pub fn within_string_limit(len: u64) -> bool {
    len <= MAX_BULK_LEN as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_as_redis_reads_them() {
        assert_eq!(parse_integer(b"42"), Some(42));
        assert_eq!(parse_integer(b"-7"), Some(-7));
        assert_eq!(parse_integer(b"0"), Some(0));
        for bad in [
            &b"+1"[..],
            b"01",
            b"-0",
            b" 1",
            b"1.0",
            b"",
            b"-",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_integer(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
