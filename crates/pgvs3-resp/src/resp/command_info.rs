//! COMMAND and its subcommands: what the command table says about each command, in the shapes
//! Redis 7.0 answers (COMMAND INFO's ten fields, COMMAND DOCS's map, COMMAND GETKEYS's key
//! positions), for the clients that route or hint by them (cluster clients read arity, flags and
//! the key range; redis-cli reads DOCS).

use bytes::Bytes;

use super::codec::Reply;
use super::command::{self, COMMANDS, Spec};
use super::glob;

pub fn command(args: &[Bytes]) -> Reply {
    let Some(subcommand) = args.get(1) else {
        return Reply::Array(COMMANDS.iter().map(info).collect());
    };
    let names = || {
        args[2..]
            .iter()
            .map(|name| String::from_utf8_lossy(name).to_ascii_lowercase())
    };
    match subcommand.to_ascii_lowercase().as_slice() {
        b"count" => Reply::Integer(COMMANDS.len() as i64),
        b"list" => list(&args[2..]),
        b"info" if args.len() == 2 => Reply::Array(COMMANDS.iter().map(info).collect()),
        b"info" => Reply::Array(
            names()
                .map(|name| command::lookup(&name).map_or(Reply::Nil, info))
                .collect(),
        ),
        // Unknown names are left out, as Redis leaves them out.
        b"docs" if args.len() == 2 => Reply::Map(COMMANDS.iter().map(docs).collect()),
        b"docs" => Reply::Map(names().filter_map(|name| command::lookup(&name)).map(docs).collect()),
        b"getkeys" | b"getkeysandflags" if args.len() < 4 => Reply::error(format!(
            "ERR wrong number of arguments for 'command|{}' command",
            String::from_utf8_lossy(subcommand).to_ascii_lowercase()
        )),
        b"getkeys" => get_keys(&args[2..], |key, _| Reply::bulk(key.clone())),
        b"getkeysandflags" => get_keys(&args[2..], |key, flags| {
            Reply::Array(vec![
                Reply::bulk(key.clone()),
                Reply::Array(flags.iter().map(|flag| Reply::Status((*flag).to_owned())).collect()),
            ])
        }),
        _ => Reply::error(format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            String::from_utf8_lossy(subcommand)
        )),
    }
}

/// COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]; there are no
/// modules.
fn list(filter: &[Bytes]) -> Reply {
    let keep: Box<dyn Fn(&Spec) -> bool> = match filter {
        [] => Box::new(|_| true),
        [filterby, kind, value] if filterby.eq_ignore_ascii_case(b"filterby") => {
            match kind.to_ascii_lowercase().as_slice() {
                b"module" => Box::new(|_| false),
                b"aclcat" => {
                    let category = format!("@{}", String::from_utf8_lossy(value).to_ascii_lowercase());
                    Box::new(move |spec| acl_categories(spec).contains(&category.as_str()))
                }
                b"pattern" => Box::new(|spec| glob::matches(value, spec.name.as_bytes())),
                _ => return command::syntax_error(),
            }
        }
        _ => return command::syntax_error(),
    };
    Reply::Array(
        COMMANDS
            .iter()
            .filter(|spec| keep(spec))
            .map(|spec| Reply::text(spec.name))
            .collect(),
    )
}

/// COMMAND GETKEYS: the checks and error texts of Redis's `getKeysSubcommandImpl`, in its order.
/// `answer` gets each key and its flags.
fn get_keys(command_args: &[Bytes], answer: impl Fn(&Bytes, &[&str]) -> Reply) -> Reply {
    let name = String::from_utf8_lossy(&command_args[0]).to_ascii_lowercase();
    let Some(spec) = command::lookup(&name) else {
        return Reply::error("ERR Invalid command specified");
    };
    if spec.first_key == 0 && !spec.flags.contains(&"movablekeys") {
        return Reply::error("ERR The command has no key arguments");
    }
    if !spec.arity_ok(command_args.len()) {
        return Reply::error("ERR Invalid number of arguments specified for command");
    }
    let positions = key_positions(spec, command_args);
    if positions.is_empty() && !spec.flags.contains(&"no_mandatory_keys") {
        return Reply::error("ERR Invalid arguments specified for command");
    }
    Reply::Array(
        positions
            .into_iter()
            .map(|at| answer(&command_args[at], key_flags_at(spec, command_args, at)))
            .collect(),
    )
}

/// Where a command's keys are among its arguments (the name at 0): the table's first/last/step
/// range, or, for the commands with movable keys, where their numkeys argument or STREAMS
/// keyword puts them. A count that does not fit the arguments gives no keys, as in Redis.
pub(crate) fn key_positions(spec: &Spec, args: &[Bytes]) -> Vec<usize> {
    let argc = args.len() as i64;
    // Keys counted by the argument at `count_at`, following it; STORE commands also name
    // their destination first.
    let counted = |count_at: usize, destination: bool| -> Vec<usize> {
        let count = args
            .get(count_at)
            .and_then(|arg| command::parse_integer(arg))
            .unwrap_or(0);
        let available = argc - count_at as i64 - 1;
        if count < 1 || count > available {
            return Vec::new();
        }
        let first = count_at + 1;
        let keys = first..first + count as usize;
        if destination {
            std::iter::once(1).chain(keys).collect()
        } else {
            keys.collect()
        }
    };
    match spec.name {
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" => counted(2, false),
        "zunionstore" | "zinterstore" | "zdiffstore" => counted(2, true),
        "zunion" | "zinter" | "zdiff" | "zintercard" | "sintercard" | "zmpop" | "lmpop" => counted(1, false),
        "bzmpop" | "blmpop" => counted(2, false),
        "sort" => std::iter::once(1).chain(sort_store(args)).collect(),
        // The key, and a STORE (or STOREDIST) destination.
        "georadius" | "georadiusbymember" => {
            let store = args
                .iter()
                .skip(2)
                .position(|arg| arg.eq_ignore_ascii_case(b"store") || arg.eq_ignore_ascii_case(b"storedist"))
                .map(|at| at + 3)
                .filter(|at| *at < args.len());
            std::iter::once(1).chain(store).collect()
        }
        "xread" | "xreadgroup" => {
            let Some(streams) = args.iter().position(|arg| arg.eq_ignore_ascii_case(b"streams")) else {
                return Vec::new();
            };
            // The first half of what follows (rounded down, as Redis's key spec reads it).
            let half = (args.len() - streams - 1) / 2;
            (streams + 1..streams + 1 + half).collect()
        }
        _ => {
            let last = if spec.last_key < 0 {
                argc + spec.last_key
            } else {
                spec.last_key
            };
            (spec.first_key..=last.min(argc - 1))
                .step_by(spec.step.max(1) as usize)
                .filter(|at| *at > 0)
                .map(|at| at as usize)
                .collect()
        }
    }
}

/// Where SORT's STORE destination is, as Redis's `sortGetKeys` finds it: LIMIT, GET and BY
/// skip their arguments, and the last STORE counts.
fn sort_store(args: &[Bytes]) -> Option<usize> {
    let mut store = None;
    let mut i = 2;
    while i < args.len() {
        match args[i].to_ascii_lowercase().as_slice() {
            b"limit" => i += 2,
            b"get" | b"by" => i += 1,
            b"store" if i + 1 < args.len() => store = Some(i + 1),
            _ => {}
        }
        i += 1;
    }
    store
}

/// The key-spec flags of a command's keys (COMMAND INFO's key specs), by the broad kind of
/// access: read, removal, or read-and-update. Redis distinguishes finer cases per key (SET's
/// key is `OW update`, LMOVE's destination `RW insert`); [`key_flags_at`] does for the
/// commands whose keys differ.
pub(crate) fn key_flags(spec: &Spec) -> &'static [&'static str] {
    match spec.name {
        "del" | "unlink" => &["RM", "delete"],
        "bitfield" => &["RW", "access", "update", "variable_flags"],
        // A script may do anything with its keys: Redis assumes the worst too.
        "eval" | "evalsha" | "fcall" => &["RW", "access", "update"],
        _ if spec.is_write() => &["RW", "access", "update"],
        _ => &["RO", "access"],
    }
}

/// The flags of the key at `args[at]` (GETKEYSANDFLAGS, and what the ACL checks of it), as
/// Redis 7.0's key specs and `*GetKeys` functions give them: SET overwrites its key unless GET
/// reads it first (`setGetKeys`), MSET overwrites each; a move takes from its source and
/// inserts into its destination; SORT reads its key and overwrites its STORE destination;
/// BITOP only writes its destination and reads its sources; BITFIELD only reads its key when it
/// has no SET or INCRBY (`bitfieldGetKeys`, a malformed one counting as a write); the others'
/// keys as [`key_flags`].
pub(crate) fn key_flags_at(spec: &Spec, args: &[Bytes], at: usize) -> &'static [&'static str] {
    match spec.name {
        "set" if args.iter().skip(3).any(|arg| arg.eq_ignore_ascii_case(b"get")) => &["RW", "access", "update"],
        "set" | "mset" | "setex" | "psetex" => &["OW", "update"],
        "msetnx" | "setnx" => &["OW", "insert"],
        "lmove" | "blmove" | "rpoplpush" | "brpoplpush" | "smove" if at == 1 => &["RW", "access", "delete"],
        "lmove" | "blmove" | "rpoplpush" | "brpoplpush" | "smove" => &["RW", "insert"],
        "sort" if at == 1 => &["RO", "access"],
        "sort" => &["OW", "update"],
        "bitop" if at == 2 => &["OW", "update"],
        "bitop" => &["RO", "access"],
        "bitfield" if bitfield_reads_only(args) => &["RO", "access"],
        "bitfield" => &["RW", "access", "update"],
        _ => key_flags(spec),
    }
}

fn bitfield_reads_only(args: &[Bytes]) -> bool {
    let mut i = 2;
    while i < args.len() {
        let remaining = args.len() - i - 1;
        match args[i].to_ascii_lowercase().as_slice() {
            b"get" if remaining >= 2 => i += 3,
            b"overflow" if remaining >= 1 => i += 2,
            _ => return false,
        }
    }
    true
}

/// The command's group, as COMMAND DOCS and the ACL categories name it.
fn group(name: &str) -> &'static str {
    match name {
        "hset" | "hmset" | "hsetnx" | "hget" | "hmget" | "hdel" | "hexists" | "hlen" | "hstrlen" | "hgetall"
        | "hkeys" | "hvals" | "hincrby" | "hincrbyfloat" | "hrandfield" | "hscan" => "hash",
        "setbit" | "getbit" | "bitcount" | "bitpos" | "bitop" | "bitfield" | "bitfield_ro" => "bitmap",
        "ping" | "echo" | "auth" | "hello" | "select" | "client" | "quit" | "reset" => "connection",
        "multi" | "exec" | "discard" | "watch" | "unwatch" => "transactions",
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "script" | "function" | "fcall" | "fcall_ro" => "scripting",
        "subscribe" | "psubscribe" | "ssubscribe" | "unsubscribe" | "punsubscribe" | "sunsubscribe" | "publish"
        | "spublish" | "pubsub" => "pubsub",
        "info" | "config" | "command" | "time" | "dbsize" | "flushdb" | "flushall" | "memory" | "acl" | "monitor" => {
            "server"
        }
        "object" | "del" | "unlink" | "exists" | "touch" | "expire" | "pexpire" | "expireat" | "pexpireat"
        | "expiretime" | "pexpiretime" | "ttl" | "pttl" | "persist" | "type" | "rename" | "renamenx" | "copy"
        | "scan" | "keys" | "randomkey" => "generic",
        "lpush" | "rpush" | "lpushx" | "rpushx" | "lpop" | "rpop" | "llen" | "lindex" | "lrange" | "lset"
        | "linsert" | "lrem" | "ltrim" | "lpos" | "lmove" | "rpoplpush" | "blpop" | "brpop" | "blmove"
        | "brpoplpush" | "lmpop" | "blmpop" => "list",
        "sadd" | "srem" | "smembers" | "sismember" | "smismember" | "scard" | "spop" | "srandmember" | "smove"
        | "sinter" | "sunion" | "sdiff" | "sinterstore" | "sunionstore" | "sdiffstore" | "sintercard" | "sscan" => {
            "set"
        }
        "sort" | "sort_ro" | "dump" | "restore" => "generic",
        "pfadd" | "pfcount" | "pfmerge" => "hyperloglog",
        _ if name.starts_with("geo") => "geo",
        _ if name.starts_with('x') => "stream",
        _ if name.starts_with('z') || name.starts_with("bz") => "sorted-set",
        _ => "string",
    }
}

/// ACL categories in Redis's order: the data type's, then read/write, speed, blocking.
pub(crate) fn acl_categories(spec: &Spec) -> Vec<&'static str> {
    let flag = |name: &str| spec.flags.contains(&name);
    let mut categories = Vec::new();
    let group = group(spec.name);
    if group == "generic" {
        categories.push("@keyspace");
    }
    if flag("readonly") && group != "scripting" {
        categories.push("@read");
    }
    if flag("write") && group != "scripting" {
        categories.push("@write");
    }
    categories.extend(match group {
        "set" => Some("@set"),
        "sorted-set" => Some("@sortedset"),
        "list" => Some("@list"),
        "hash" => Some("@hash"),
        "string" => Some("@string"),
        "bitmap" => Some("@bitmap"),
        "stream" => Some("@stream"),
        "pubsub" => Some("@pubsub"),
        "hyperloglog" => Some("@hyperloglog"),
        "geo" => Some("@geo"),
        _ => None,
    });
    if flag("admin") {
        categories.push("@admin");
    }
    categories.push(if flag("fast") { "@fast" } else { "@slow" });
    if flag("blocking") {
        categories.push("@blocking");
    }
    // Redis's @dangerous: the admin commands, and those that may take long on a large keyspace
    // or replace data wholesale.
    if flag("admin")
        || matches!(
            spec.name,
            "flushall" | "flushdb" | "info" | "keys" | "sort" | "sort_ro" | "restore"
        )
    {
        categories.push("@dangerous");
    }
    categories.extend(match group {
        "connection" => Some("@connection"),
        "transactions" => Some("@transaction"),
        "scripting" => Some("@scripting"),
        _ => None,
    });
    categories
}

/// One key spec for the table's key range, or an `unknown` one for movable keys (Redis's own
/// form for specs it cannot describe), so clients that read specs find them well formed.
/// BITOP's destination and sources are two, as in Redis.
fn key_specs(spec: &Spec) -> Reply {
    let movable = spec.flags.contains(&"movablekeys");
    if spec.first_key == 0 && !movable {
        return Reply::Array(Vec::new());
    }
    let text = |text: &str| Reply::text(text);
    let search = |kind: &str, fields: Vec<(Reply, Reply)>| {
        Reply::Map(vec![(text("type"), text(kind)), (text("spec"), Reply::Map(fields))])
    };
    // Keys from the argument at `index` to `last` (counted from there, or from the end when
    // negative), every `step`.
    let range = |flags: &[&str], index: i64, last: i64, step: i64| {
        let flags = flags.iter().map(|flag| Reply::Status((*flag).to_owned())).collect();
        Reply::Map(vec![
            (text("flags"), Reply::Array(flags)),
            (
                text("begin_search"),
                search("index", vec![(text("index"), Reply::Integer(index))]),
            ),
            (
                text("find_keys"),
                search(
                    "range",
                    vec![
                        (text("lastkey"), Reply::Integer(last)),
                        (text("keystep"), Reply::Integer(step)),
                        (text("limit"), Reply::Integer(0)),
                    ],
                ),
            ),
        ])
    };
    if spec.name == "bitop" {
        return Reply::Array(vec![
            range(&["OW", "update"], 2, 0, 1),
            range(&["RO", "access"], 3, -1, 1),
        ]);
    }
    if movable && spec.first_key == 0 {
        let flags = key_flags(spec)
            .iter()
            .map(|flag| Reply::Status((*flag).to_owned()))
            .collect();
        return Reply::Array(vec![Reply::Map(vec![
            (text("flags"), Reply::Array(flags)),
            (text("begin_search"), search("unknown", Vec::new())),
            (text("find_keys"), search("unknown", Vec::new())),
        ])]);
    }
    let last = if spec.last_key < 0 {
        spec.last_key
    } else {
        spec.last_key - spec.first_key
    };
    Reply::Array(vec![range(key_flags(spec), spec.first_key, last, spec.step)])
}

/// COMMAND INFO's ten fields: name, arity, flags, first key, last key, step, ACL categories,
/// tips (none), key specs, subcommands (not described: their arities are checked by each
/// container command itself).
fn info(spec: &Spec) -> Reply {
    let statuses = |words: &[&str]| Reply::Array(words.iter().map(|word| Reply::Status((*word).to_owned())).collect());
    Reply::Array(vec![
        Reply::text(spec.name),
        Reply::Integer(spec.arity),
        statuses(spec.flags),
        Reply::Integer(spec.first_key),
        Reply::Integer(spec.last_key),
        Reply::Integer(spec.step),
        statuses(&acl_categories(spec)),
        Reply::Array(Vec::new()),
        key_specs(spec),
        Reply::Array(Vec::new()),
    ])
}

/// COMMAND DOCS's entry: the group only; there are no summaries or argument lists to offer.
fn docs(spec: &Spec) -> (Reply, Reply) {
    (
        Reply::text(spec.name),
        Reply::Map(vec![(Reply::text("group"), Reply::text(group(spec.name)))]),
    )
}
