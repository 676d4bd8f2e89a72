//! Redis Functions: FUNCTION LOAD/LIST/DELETE/FLUSH/STATS/KILL/DUMP/RESTORE/HELP, FCALL and
//! FCALL_RO.
//!
//! A library is kept in PostgreSQL (`pgvs3.resp_function_libraries`, migration 0035), so it
//! survives restarts and every gateway of the fleet sees it at once; FCALL reads its library
//! from there each time (one indexed row), so no gateway can call a stale copy. Libraries belong
//! to a keyspace (the database's bucket, layout v55), as Redis's to a server: every subcommand
//! and FCALL act on the connection's database's alone, reading them takes a key that may read
//! it and changing them one that may write it, so that no tenant sees, replaces or runs
//! another's. The Lua engine
//! is the one EVAL runs (`script.rs`, `lua.rs`): a library runs as a chunk that holds its code
//! as a function, with the globals Redis gives a library while it loads (`redis` with
//! `register_function`) and, once loaded, a function's (see [`RUNTIME`]), followed by the call
//! of the function asked for (or, at LOAD, by the return of what the library registered). DUMP and RESTORE carry the
//! libraries' code in Redis's payload (`rdb.rs`), so libraries move between Redis and pgvs3.

use bytes::Bytes;

use crate::resp::codec::{Reply, split_args};
use crate::resp::command::{Spec, parse_integer, wrong_arity};
use crate::resp::commands::rdb;
use crate::resp::connection::{Connection, store_error};
use crate::resp::glob;
use crate::resp::script::{Request, Step};
use crate::store::{Access, FunctionLibrary, LibraryPolicy, LibraryRefusal, RegisteredFunction};

/// The largest library FUNCTION LOAD takes (as EVAL's largest script).
const MAX_LIBRARY_BYTES: usize = 1024 * 1024;
/// Most libraries a keyspace keeps, and functions one library registers.
const MAX_LIBRARIES: i64 = 1000;
const MAX_FUNCTIONS: usize = 1000;
/// Longest library or function name.
const MAX_NAME: usize = 256;
/// The flags `redis.register_function` takes (Redis 7.0's). Only `no-writes` changes anything
/// here: a gateway has no memory limit to be out of, no replica lag to be stale by, no cluster.
const FLAGS: &[&str] = &[
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

const BAD_LIBRARY_NAME: &str =
    "ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// What replaces a library's `#!lua` line, so that its code keeps its line numbers: the start
/// of a function (`__library`) that holds the code. [`RUNTIME`] follows the code, so the code
/// sees none of its locals.
const OPENING: &str = "local __library = function(...) ";

/// After a library's code: `redis.register_function` and the globals the code runs with, as
/// Redis 7.0 gives them. While the code runs (the library loads) its globals are `redis` alone,
/// with `register_function`, `log`, the `LOG_*` levels and the version (anything else is a
/// nonexistent global variable, `math` and `redis.call` included); once it has run they are
/// the script globals, whose `redis` has no `register_function`; neither may be changed
/// (`Attempt to modify a readonly table`). The chunk's `...` is the runner's way to set a
/// function's globals (lua.rs). The arguments of `register_function` are read as Redis's
/// function_lua.c reads them, in its order, with its errors.
const RUNTIME: &str = r##"
end
local __set_environment = ...
local __fns, __registered, __known, __loading = {}, {}, { KNOWN_FLAGS }, true
local function __fail(text) error({ err = "ERR " .. text }) end
local function __refuse() error("Attempt to modify a readonly table", 2) end
local function __missing(name) error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 3) end
local function __string(value)
    if type(value) == "string" or type(value) == "number" then return tostring(value) end
end
local function __register(...)
    if not __loading then
        -- Said where it was called from, as Redis says it. This sandbox has no `debug`:
        -- `error` names that line at level 4 (under `pcall`, the sandbox's Lua `pcall` and
        -- this function).
        local _, where = pcall(error, "", 4)
        error({ err = "ERR redis.register_function can only be called on FUNCTION LOAD command",
                line = tonumber(string.match(where, ":(%d+): $")) })
    end
    local argc, a, b = select("#", ...), ...
    if argc < 1 or argc > 2 then __fail("wrong number of arguments to redis.register_function") end
    local name, callback, flags, description
    if argc == 2 then
        name = __string(a)
        if not name then __fail("first argument to redis.register_function must be a string") end
        if type(b) ~= "function" then __fail("second argument to redis.register_function must be a function") end
        callback = b
    elseif type(a) ~= "table" then
        __fail("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).")
    else
        for key, value in pairs(a) do
            if type(key) ~= "string" and type(key) ~= "number" then
                __fail("named argument key given to redis.register_function is not a string")
            end
            key = string.lower(tostring(key))
            if key == "function_name" then
                name = __string(value)
                if not name then __fail("function_name argument given to redis.register_function must be a string") end
            elseif key == "description" then
                description = __string(value)
                if not description then __fail("description argument given to redis.register_function must be a string") end
            elseif key == "callback" then
                if type(value) ~= "function" then __fail("callback argument given to redis.register_function must be a function") end
                callback = value
            elseif key == "flags" then
                if type(value) ~= "table" then
                    __fail("flags argument to redis.register_function must be a table representing function flags")
                end
                flags = {}
                local j = 1
                while value[j] ~= nil do
                    local flag = __string(value[j])
                    flag = flag and __known[string.lower(flag)]
                    if not flag then __fail("unknown flag given") end
                    flags[#flags + 1] = flag
                    j = j + 1
                end
            else
                __fail("unknown argument given to redis.register_function")
            end
        end
        if not name then __fail("redis.register_function must get a function name argument") end
        if not callback then __fail("redis.register_function must get a callback argument") end
    end
    if #name == 0 or #name > MAX_NAME or string.find(name, "[^%w_]") then error({ err = "BAD_NAME" }) end
    if __fns[name] then __fail("Function already exists in the library") end
    if #__registered >= MAX_FUNCTIONS then __fail("a pgvs3 library registers at most MAX_FUNCTIONS functions") end
    __fns[name] = callback
    __registered[#__registered + 1] = { name, table.concat(flags or {}, " "), description or false }
end
local __api_fields = {
    register_function = __register, log = redis.log, LOG_DEBUG = redis.LOG_DEBUG, LOG_VERBOSE = redis.LOG_VERBOSE,
    LOG_NOTICE = redis.LOG_NOTICE, LOG_WARNING = redis.LOG_WARNING, REDIS_VERSION = redis.REDIS_VERSION,
    REDIS_VERSION_NUM = redis.REDIS_VERSION_NUM,
}
local __api = setmetatable({}, {
    __index = function(_, name)
        local value = __api_fields[name]
        if value == nil then __missing(name) end
        return value
    end,
    __newindex = __refuse,
    __metatable = false,
})
local __globals = _G
__set_environment(__library, setmetatable({}, {
    __index = function(_, name)
        if __loading then
            if name == "redis" then return __api end
            __missing(name)
        end
        local value = rawget(__globals, name)
        if value == nil then __missing(name) end
        return value
    end,
    __newindex = __refuse,
    __metatable = false,
}))
__library()
__loading = false
"##;

/// The chunk that runs a library: [`OPENING`], its code, [`RUNTIME`], then `epilogue`.
fn chunk(code: &str, epilogue: &str) -> Bytes {
    let runtime = RUNTIME
        .replace("BAD_NAME", BAD_LIBRARY_NAME)
        .replace("MAX_NAME", &MAX_NAME.to_string())
        .replace("MAX_FUNCTIONS", &MAX_FUNCTIONS.to_string())
        .replace(
            "KNOWN_FLAGS",
            &FLAGS
                .iter()
                .map(|flag| format!("[\"{flag}\"] = \"{flag}\""))
                .collect::<Vec<_>>()
                .join(", "),
        );
    // The `#!lua` line is replaced, its newline kept.
    let body = code.find('\n').map_or("", |newline| &code[newline..]);
    Bytes::from(format!("{OPENING}{body}{runtime}{epilogue}"))
}

/// The library's name from its `#!lua name=<name>` line, read as Redis's
/// functionExtractLibMetaData reads it (split as `sdssplitargs` splits, so `name="x"` is `x`),
/// with its errors in its order.
fn library_name(code: &str) -> Result<String, Reply> {
    if !code.starts_with("#!") {
        return Err(Reply::error("ERR Missing library metadata"));
    }
    let invalid = || Reply::error("ERR Invalid library metadata");
    let line = &code[..code.find('\n').ok_or_else(invalid)?];
    let parts = split_args(line.as_bytes())
        .filter(|parts| !parts.is_empty())
        .ok_or_else(invalid)?;
    let engine = String::from_utf8_lossy(&parts[0][2..]);
    let mut name = None;
    for part in &parts[1..] {
        let part = String::from_utf8_lossy(part);
        match part.get(..5) {
            Some(prefix) if prefix.eq_ignore_ascii_case("name=") => {
                if name.is_some() {
                    return Err(Reply::error(
                        "ERR Invalid metadata value, name argument was given multiple times",
                    ));
                }
                name = Some(part[5..].to_owned());
            }
            _ => return Err(Reply::error(format!("ERR Invalid metadata value given: {part}"))),
        }
    }
    let name = name.ok_or_else(|| Reply::error("ERR Library name was not given"))?;
    if !valid_name(&name) {
        return Err(Reply::error(BAD_LIBRARY_NAME));
    }
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(Reply::error(format!("ERR Engine '{engine}' not found")));
    }
    Ok(name)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}

/// What LOAD's run of a library answered: the functions it registered, or Redis's error.
fn registered(reply: Reply) -> Result<Vec<RegisteredFunction>, Reply> {
    let text = |reply: &Reply| match reply {
        Reply::Bulk(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    };
    match reply {
        Reply::Error(error) => Err(Reply::Error(
            match error.strip_prefix("ERR Error compiling script (new function): ") {
                Some(message) => format!("ERR Error compiling function: {message}"),
                None => format!("ERR Error registering functions: {error}"),
            },
        )),
        Reply::Array(entries) if entries.is_empty() => Err(Reply::error("ERR No functions registered")),
        Reply::Array(entries) => Ok(entries
            .iter()
            .filter_map(|entry| match entry {
                Reply::Array(fields) if fields.len() == 3 => Some(RegisteredFunction {
                    name: text(&fields[0])?,
                    flags: text(&fields[1])?.split_whitespace().map(str::to_owned).collect(),
                    description: text(&fields[2]),
                }),
                _ => None,
            })
            .collect()),
        _ => Err(Reply::error("ERR No functions registered")),
    }
}

fn library_reply(library: &FunctionLibrary, with_code: bool) -> Reply {
    let functions = library
        .functions
        .iter()
        .map(|function| {
            Reply::Map(vec![
                (Reply::text("name"), Reply::bulk(function.name.clone())),
                (
                    Reply::text("description"),
                    function.description.clone().map_or(Reply::Nil, Reply::bulk),
                ),
                (
                    Reply::text("flags"),
                    // Status strings, each once, in Redis's order of them (its set of flags).
                    Reply::Array(
                        FLAGS
                            .iter()
                            .filter(|known| function.flags.iter().any(|flag| flag == *known))
                            .map(|flag| Reply::Status((*flag).to_owned()))
                            .collect(),
                    ),
                ),
            ])
        })
        .collect();
    let mut fields = vec![
        (Reply::text("library_name"), Reply::bulk(library.name.clone())),
        (Reply::text("engine"), Reply::text("LUA")),
        (Reply::text("functions"), Reply::Array(functions)),
    ];
    if with_code {
        fields.push((Reply::text("library_code"), Reply::bulk(library.code.clone())));
    }
    Reply::Map(fields)
}

/// A refusal's text that LOAD and RESTORE word alike.
fn refused(refusal: LibraryRefusal) -> Reply {
    match refusal {
        LibraryRefusal::Exists(name) => Reply::error(format!("ERR Library '{name}' already exists")),
        LibraryRefusal::FunctionExists(function) => Reply::error(format!("ERR Function {function} already exists")),
        LibraryRefusal::TooMany => Reply::error(format!("ERR pgvs3 keeps at most {MAX_LIBRARIES} function libraries")),
    }
}

/// Redis's `addReplySubcommandSyntaxError`: too many arguments for a subcommand whose arity
/// allows more.
fn subcommand_syntax_error(subcommand: &[u8]) -> Reply {
    Reply::error(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
        String::from_utf8_lossy(subcommand)
    ))
}

/// FUNCTION HELP: Redis 7.0.15's text.
fn help() -> Reply {
    let lines = [
        "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "LOAD [REPLACE] <FUNCTION CODE>",
        "    Create a new library with the given library name and code.",
        "DELETE <LIBRARY NAME>",
        "    Delete the given library.",
        "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
        "    Return general information on all the libraries:",
        "    * Library name",
        "    * The engine used to run the Library",
        "    * Library description",
        "    * Functions list",
        "    * Library code (if WITHCODE is given)",
        "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
        "STATS",
        "    Return information about the current function running:",
        "    * Function name",
        "    * Command used to run the function",
        "    * Duration in MS that the function is running",
        "    If no function is running, return nil",
        "    In addition, returns a list of available engines.",
        "KILL",
        "    Kill the current running function.",
        "FLUSH [ASYNC|SYNC]",
        "    Delete all the libraries.",
        "    When called without the optional mode argument, the behavior is determined by the",
        "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
        "    * ASYNC: Asynchronously flush the libraries.",
        "    * SYNC: Synchronously flush the libraries.",
        "DUMP",
        "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
        "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
        "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
        "    control how to handle existing libraries (default APPEND):",
        "    * FLUSH: delete all existing libraries.",
        "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
        "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
        "      libraries with the new libraries (notice that even on this option there is a chance of failure",
        "      in case of functions name collision with another library).",
        "HELP",
        "    Prints this help.",
    ];
    Reply::Array(lines.iter().map(|line| Reply::Status((*line).to_owned())).collect())
}

impl Connection {
    pub(crate) async fn functions_command(&mut self, spec: &'static Spec, args: &[Bytes]) -> Reply {
        match spec.name {
            "fcall" | "fcall_ro" => self.fcall(spec.name == "fcall_ro", args).await,
            _ => self.function(args).await.unwrap_or_else(|reply| reply),
        }
    }

    async fn function(&mut self, args: &[Bytes]) -> Result<Reply, Reply> {
        let subcommand = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        let catalog = self.server.buckets.catalog();
        match (subcommand.as_str(), &args[2..]) {
            ("load", [options @ .., code]) => {
                let mut policy = LibraryPolicy::Append;
                for option in options {
                    if !option.eq_ignore_ascii_case(b"replace") {
                        return Err(Reply::error(format!(
                            "ERR Unknown option given: {}",
                            String::from_utf8_lossy(option)
                        )));
                    }
                    policy = LibraryPolicy::Replace;
                }
                self.load(code, policy).await
            }
            ("load", _) => Err(wrong_arity("function|load")),
            ("list", options) => {
                let (mut with_code, mut pattern) = (false, None);
                let mut options = options.iter();
                while let Some(option) = options.next() {
                    // Each option once, as Redis takes them.
                    if option.eq_ignore_ascii_case(b"withcode") && !with_code {
                        with_code = true;
                    } else if option.eq_ignore_ascii_case(b"libraryname") && pattern.is_none() {
                        let given = options
                            .next()
                            .ok_or_else(|| Reply::error("ERR library name argument was not given"))?;
                        pattern = Some(given.clone());
                    } else {
                        return Err(Reply::error(format!(
                            "ERR Unknown argument {}",
                            String::from_utf8_lossy(option)
                        )));
                    }
                }
                let libraries = catalog
                    .function_libraries(self.readable_functions().await?)
                    .await
                    .map_err(store_error)?;
                Ok(Reply::Array(
                    libraries
                        .iter()
                        .filter(|library| {
                            pattern
                                .as_ref()
                                .is_none_or(|p| glob::matches(p, library.name.as_bytes()))
                        })
                        .map(|library| library_reply(library, with_code))
                        .collect(),
                ))
            }
            ("delete", [name]) => {
                let keyspace = self.may_change_functions().await?;
                let name = String::from_utf8_lossy(name);
                match catalog
                    .delete_function_library(keyspace, &name)
                    .await
                    .map_err(store_error)?
                {
                    true => Ok(Reply::OK),
                    false => Err(Reply::error("ERR Library not found")),
                }
            }
            ("delete", _) => Err(wrong_arity("function|delete")),
            ("flush", mode) => {
                let mode_ok = match mode {
                    [] => true,
                    [mode] => mode.eq_ignore_ascii_case(b"sync") || mode.eq_ignore_ascii_case(b"async"),
                    _ => return Err(subcommand_syntax_error(&args[1])),
                };
                if !mode_ok {
                    return Err(Reply::error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"));
                }
                let keyspace = self.may_change_functions().await?;
                catalog.flush_function_libraries(keyspace).await.map_err(store_error)?;
                Ok(Reply::OK)
            }
            ("stats", []) => {
                let libraries = catalog
                    .function_libraries(self.readable_functions().await?)
                    .await
                    .map_err(store_error)?;
                let functions: usize = libraries.iter().map(|library| library.functions.len()).sum();
                // What runs now runs on some gateway of the fleet: this one does not know.
                Ok(Reply::Map(vec![
                    (Reply::text("running_script"), Reply::Nil),
                    (
                        Reply::text("engines"),
                        Reply::Map(vec![(
                            Reply::text("LUA"),
                            Reply::Map(vec![
                                (Reply::text("libraries_count"), Reply::Integer(libraries.len() as i64)),
                                (Reply::text("functions_count"), Reply::Integer(functions as i64)),
                            ]),
                        )]),
                    ),
                ]))
            }
            ("kill", []) => Ok(self.server.scripts.kill(true, self.principal())),
            ("dump", []) => {
                let libraries = catalog
                    .function_libraries(self.readable_functions().await?)
                    .await
                    .map_err(store_error)?;
                Ok(Reply::bulk(rdb::dump_functions(
                    libraries.iter().map(|library| library.code.as_str()),
                )))
            }
            ("restore", [payload]) => self.restore(payload, LibraryPolicy::Append).await,
            ("restore", [payload, policy]) => {
                let policy = match policy.to_ascii_lowercase().as_slice() {
                    b"append" => LibraryPolicy::Append,
                    b"replace" => LibraryPolicy::Replace,
                    b"flush" => LibraryPolicy::Flush,
                    _ => {
                        return Err(Reply::error(
                            "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
                        ));
                    }
                };
                self.restore(payload, policy).await
            }
            ("restore", []) => Err(wrong_arity("function|restore")),
            ("restore", _) => Err(subcommand_syntax_error(&args[1])),
            ("help", []) => Ok(help()),
            ("stats" | "kill" | "dump" | "help", _) => Err(wrong_arity(&format!("function|{subcommand}"))),
            _ => Err(Reply::error(format!(
                "ERR unknown subcommand '{}'. Try FUNCTION HELP.",
                String::from_utf8_lossy(&args[1])
            ))),
        }
    }

    /// LIST, STATS and DUMP read the libraries of the connection's database: they take a key
    /// that may read it. The keyspace's bucket id.
    async fn readable_functions(&self) -> Result<i64, Reply> {
        self.keyspace(Access::Read).await.map(|keyspace| keyspace.bucket_id())
    }

    /// LOAD, DELETE, FLUSH and RESTORE change what every client of the keyspace runs: they
    /// take a key that may write to the connection's database, and a primary. The keyspace's
    /// bucket id.
    async fn may_change_functions(&self) -> Result<i64, Reply> {
        self.keyspace(Access::Write).await.map(|keyspace| keyspace.bucket_id())
    }

    async fn load(&mut self, code: &Bytes, policy: LibraryPolicy) -> Result<Reply, Reply> {
        let keyspace = self.may_change_functions().await?;
        let library = self.compile(code).await?;
        let name = library.name.clone();
        self.store(keyspace, &[library], policy)
            .await?
            .map_err(|refusal| match refusal {
                LibraryRefusal::Exists(name) => Reply::error(format!("ERR Library '{name}' already exists")),
                other => refused(other),
            })?;
        Ok(Reply::bulk(name))
    }

    /// FUNCTION RESTORE: the payload's libraries, each checked as LOAD checks it, stored all or
    /// none as `policy` says, with Redis 7.0.15's errors: a library or function twice in the
    /// payload as LOAD words it, one already there as its RESTORE does.
    async fn restore(&mut self, payload: &Bytes, policy: LibraryPolicy) -> Result<Reply, Reply> {
        let codes = rdb::restore_functions(payload).map_err(Reply::error)?;
        if codes.len() as i64 > MAX_LIBRARIES {
            return Err(refused(LibraryRefusal::TooMany));
        }
        let keyspace = self.may_change_functions().await?;
        let mut libraries: Vec<FunctionLibrary> = Vec::with_capacity(codes.len());
        for code in &codes {
            let library = self.compile(code).await?;
            if libraries.iter().any(|other| other.name == library.name) {
                return Err(Reply::error(format!("ERR Library '{}' already exists", library.name)));
            }
            let taken = library.functions.iter().find(|function| {
                libraries.iter().any(|other| {
                    other
                        .functions
                        .iter()
                        .any(|theirs| theirs.name.eq_ignore_ascii_case(&function.name))
                })
            });
            if let Some(function) = taken {
                return Err(Reply::error(format!("ERR Function {} already exists", function.name)));
            }
            libraries.push(library);
        }
        self.store(keyspace, &libraries, policy)
            .await?
            .map_err(|refusal| match refusal {
                LibraryRefusal::Exists(name) => Reply::error(format!("ERR Library {name} already exists")),
                other => refused(other),
            })?;
        Ok(Reply::OK)
    }

    /// A library's code checked and run as LOAD does (bounds, header, then the run that
    /// registers its functions), with Redis's errors.
    async fn compile(&mut self, code: &Bytes) -> Result<FunctionLibrary, Reply> {
        if code.len() > MAX_LIBRARY_BYTES {
            return Err(Reply::error(format!(
                "ERR pgvs3 takes function libraries of at most {MAX_LIBRARY_BYTES} bytes"
            )));
        }
        let code =
            std::str::from_utf8(code).map_err(|_| Reply::error("ERR pgvs3 takes function libraries in UTF-8 text"))?;
        let name = library_name(code)?;
        let reply = self
            .server
            .scripts
            .evaluate_alone(chunk(code, "return __registered"), &self.principal().access_key)
            .await;
        Ok(FunctionLibrary {
            name,
            code: code.to_owned(),
            functions: registered(reply)?,
        })
    }

    async fn store(
        &self,
        keyspace: i64,
        libraries: &[FunctionLibrary],
        policy: LibraryPolicy,
    ) -> Result<Result<(), LibraryRefusal>, Reply> {
        self.server
            .buckets
            .catalog()
            .put_function_libraries(keyspace, libraries, policy, MAX_LIBRARIES)
            .await
            .map_err(store_error)
    }

    async fn fcall(&mut self, read_only_call: bool, args: &[Bytes]) -> Reply {
        let steps = match self.fcall_request(read_only_call, args).await {
            Ok(request) => [Step::Script(request)],
            Err(reply) => return reply,
        };
        match self.run_scripted(&steps, &[], None).await {
            Ok(mut replies) => replies.pop().unwrap_or(Reply::Nil),
            Err(reply) => reply,
        }
    }

    /// FCALL's or FCALL_RO's run of its function, as a script's (what MULTI queues of it).
    pub(crate) async fn fcall_request(&mut self, read_only_call: bool, args: &[Bytes]) -> Result<Request, Reply> {
        let numkeys = match parse_integer(&args[2]) {
            None => return Err(Reply::error("ERR Bad number of keys provided")),
            Some(numkeys) if numkeys < 0 => return Err(Reply::error("ERR Number of keys can't be negative")),
            Some(numkeys) if numkeys as u64 > (args.len() - 3) as u64 => {
                return Err(Reply::error("ERR Number of keys can't be greater than number of args"));
            }
            Some(numkeys) => numkeys as usize,
        };
        let Some(name) = std::str::from_utf8(&args[1]).ok().filter(|name| valid_name(name)) else {
            return Err(Reply::error("ERR Function not found"));
        };
        let keyspace = self.readable_functions().await?;
        let library = match self.server.buckets.catalog().function_library_of(keyspace, name).await {
            Ok(Some(library)) => library,
            Ok(None) => return Err(Reply::error("ERR Function not found")),
            Err(err) => return Err(store_error(err)),
        };
        // Function names are case-insensitive across libraries, as Redis's dictionary of them.
        let Some(function) = library
            .functions
            .iter()
            .find(|function| function.name.eq_ignore_ascii_case(name))
        else {
            return Err(Reply::error("ERR Function not found"));
        };
        let name = function.name.as_str();
        let no_writes = function.flags.iter().any(|flag| flag == "no-writes");
        if read_only_call && !no_writes {
            return Err(Reply::error(
                "ERR Can not execute a script with write flag using *_ro command.",
            ));
        }
        let (keys, argv) = args[3..].split_at(numkeys);
        let body = chunk(&library.code, &format!("return __fns[\"{name}\"](KEYS, ARGV)"));
        Ok(
            Request::function(name, body, keys.to_vec(), argv.to_vec(), read_only_call || no_writes)
                .called_by(self.caller())
                .run_for(&self.principal().access_key),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_headers_are_read_with_redis_errors() {
        assert_eq!(library_name("#!lua name=lib_1\nx").unwrap(), "lib_1");
        assert_eq!(
            library_name("return 1").unwrap_err(),
            Reply::error("ERR Missing library metadata")
        );
        assert_eq!(
            library_name("#!js name=x\n").unwrap_err(),
            Reply::error("ERR Engine 'js' not found")
        );
        assert_eq!(
            library_name("#!lua name=x foo=bar\n").unwrap_err(),
            Reply::error("ERR Invalid metadata value given: foo=bar")
        );
        assert_eq!(
            library_name("#!lua\n").unwrap_err(),
            Reply::error("ERR Library name was not given")
        );
        assert_eq!(
            library_name("#! name=x\n").unwrap_err(),
            Reply::error("ERR Engine '' not found")
        );
        assert_eq!(
            library_name("#!lua name=x name=y\n").unwrap_err(),
            Reply::error("ERR Invalid metadata value, name argument was given multiple times")
        );
        assert_eq!(
            library_name("#!lua name=lib-2\n").unwrap_err(),
            Reply::error(BAD_LIBRARY_NAME)
        );
        assert!(library_name(&format!("#!lua name={}\n", "a".repeat(MAX_NAME + 1))).is_err());
        // Split as `sdssplitargs` splits: quotes group; `name=` and the engine in any case.
        assert_eq!(library_name("#!lua name=\"foo\"\nx").unwrap(), "foo");
        assert_eq!(library_name("#!LUA NAME=foo \nx").unwrap(), "foo");
        assert_eq!(
            library_name("#!lua name=x").unwrap_err(),
            Reply::error("ERR Invalid library metadata")
        );
        assert_eq!(
            library_name("#!lua name=\"x\nx").unwrap_err(),
            Reply::error("ERR Invalid library metadata")
        );
        // The name is checked before the engine.
        assert_eq!(
            library_name("#!js name=a-b\n").unwrap_err(),
            Reply::error(BAD_LIBRARY_NAME)
        );
    }

    #[test]
    fn the_chunk_keeps_the_library_line_numbers() {
        let chunk = chunk("#!lua name=x\nline2\nline3", "return __registered");
        let text = String::from_utf8(chunk.to_vec()).unwrap();
        let lines: Vec<&str> = text.split('\n').collect();
        assert_eq!(lines[0], OPENING);
        assert_eq!(lines[1], "line2");
        assert_eq!(lines[2], "line3");
        assert_eq!(lines[3], "end");
        assert!(text.ends_with("__loading = false\nreturn __registered"));
        for flag in FLAGS {
            assert!(text.contains(&format!("[\"{flag}\"] = \"{flag}\"")));
        }
    }
}
