//! The Lua 5.1 interpreter a script runs in: Redis's sandbox (its libraries only, globals
//! protected), the `redis` table, the conversions between Lua values and replies, and the bounds
//! (memory, time, calls) that stop a hostile script.
//!
//! A script runs on a thread of its own (tokio's blocking pool): the interpreter cannot yield in
//! the middle of a loop, and a script that computes for seconds must not hold a runtime thread.
//! Its `redis.call`s are made on that thread, each run against the script's batch to its end
//! (`Calls`); see `script.rs`.
//!
//! An interpreter runs many scripts, one after another, as Redis's one interpreter does: its
//! globals, the libraries and the string metatable are read-only (the prelude), so a script
//! cannot leave anything in them for the next, and what a run may change is set again before
//! each (`RunState`: the calls, the stop and deadline, the protocol, the log's count, cjson's
//! settings; `KEYS` and `ARGV`). Each blocking thread keeps the interpreter of its last run
//! (`IDLE`), with the bodies it loaded: making one and loading a job queue's scripts into it
//! was a sixth of the gateway's samples under BullMQ (the libraries, the prelude, undumping
//! tens of kilobytes of bytecode with 5.1's verifier, and a full collection on drop). One that
//! was stopped (killed, out of time or memory) is dropped, never reused. A body is compiled
//! once per gateway (`compiled`) and loaded once per interpreter.
//!
//! Redis's C libraries `cjson`, `cmsgpack`, `bit` and `struct` are written in Rust (the
//! submodules), to behave as Redis's do, and so is Lua's pattern matching (`pattern`), which
//! must be stoppable.

mod bit;
mod cjson;
mod cmsgpack;
mod compiled;
mod library;
mod lua_struct;
mod pattern;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlua::{ChunkMode, HookTriggers, Lua, LuaOptions, StdLib, Table, Value, VmState};
use sha1::{Digest, Sha1};

use super::codec::{Reply, format_score};

/// Where a script's `redis.call`s go: each is made on the interpreter's own thread, one at a
/// time, and answers its reply.
pub type Calls = Box<dyn FnMut(Vec<Bytes>) -> Reply>;

/// How far one script may go.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub time: Duration,
    pub memory: usize,
}

/// Most `redis.call`s one script makes: each may be a database round trip.
const MAX_CALLS: u64 = 100_000;
/// Most bytes of arguments one script passes to its calls, all calls together: what a script
/// writes is held in memory until it commits.
const MAX_CALL_BYTES: u64 = 256 * 1024 * 1024;
/// VM instructions between two looks at the clock and at SCRIPT KILL.
const HOOK_EVERY: u32 = 10_000;
/// Deepest nesting of tables a reply may have (a table may even contain itself); past it the
/// reply nests Redis's error for a Lua stack that ran out.
const MAX_DEPTH: usize = 64;

/// Why a script was stopped from outside its own code.
#[derive(Debug, Default)]
pub struct Stop {
    /// 0: not stopped; else one of the reasons below.
    reason: AtomicU8,
}

const KILLED: u8 = 1;
const SHUTTING_DOWN: u8 = 2;

impl Stop {
    /// SCRIPT KILL (or the script's client gone).
    pub fn kill(&self) {
        let _ = self
            .reason
            .compare_exchange(0, KILLED, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The gateway shuts down: the script must not hold it up.
    pub fn shut_down(&self) {
        self.reason.store(SHUTTING_DOWN, Ordering::Relaxed);
    }

    fn reason(&self) -> u8 {
        self.reason.load(Ordering::Relaxed)
    }
}

/// How a run ended.
pub enum Outcome {
    /// The script's reply (an error reply included: its writes before it stay, as in Redis).
    Reply(Reply),
    /// Stopped: killed, out of time or memory. Nothing it wrote may stay.
    Aborted(Reply),
}

/// Replaces a script's whole `redis` library and protects the globals. Runs once per
/// interpreter, with the native functions as its arguments; returns the function that runs a
/// script and turns whatever it raises into an error table (`{err=..., line=...}`).
const PRELUDE: &str = r##"
local call, native_pcall, setresp, sha1hex, log, stopped, set_environment = ...
local type, tostring, error, select, match, byte, raw_pcall, raw_xpcall, raw_resume =
    type, tostring, error, select, string.match, string.byte, pcall, xpcall, coroutine.resume
local raw_setmetatable, raw_getmetatable, raw_rawset, raw_rawget, raw_next, raw_pairs =
    setmetatable, getmetatable, rawset, rawget, next, pairs
local raw_loadstring, raw_load = loadstring, load

-- An error reply redis.call raised, as the table Redis raises: {err = reply, line = line}.
local function raised_reply(raised)
    if type(raised) ~= "userdata" then return nil end
    local line, text = match(tostring(raised), "\1pgvs3:(%d*):([^\n]*)")
    if not text then return nil end
    return { err = text, line = line ~= "" and line or nil }
end

-- An error a library function (cjson, cmsgpack, bit, struct) raised: its text, and the line
-- of the script that called it.
local function library_error(raised)
    if type(raised) ~= "userdata" then return nil end
    local line, text = match(tostring(raised), "\2pgvs3:(%d*):([^\n]*)")
    return text, line ~= "" and line or nil
end

-- A script stopped from outside cannot go on by catching the error that stops it; one that
-- catches an error reply sees its table (pcall its message, below), one that catches a
-- library's error its text.
local function caught(ok, raised, ...)
    local why = stopped()
    if why then error(why, 0) end
    if ok then return ok, raised, ... end
    return ok, raised_reply(raised) or (library_error(raised)) or raised, ...
end
-- Redis 7's own pcall (luaRedisPcall) gives an error table's message, not the table, as
-- Redis 6 gave the text.
local function caught_message(ok, raised, ...)
    if ok then return caught(ok, raised, ...) end
    local _, caught_error = caught(ok, raised)
    if type(caught_error) == "table" and type(raw_rawget(caught_error, "err")) == "string" then
        return ok, raw_rawget(caught_error, "err")
    end
    return ok, caught_error
end
pcall = function(...) return caught_message(raw_pcall(...)) end
-- The handler of an error the hook raised runs with the hook off (Lua 5.1 turns it off while
-- the hook runs, and the error leaves from inside it), so a handler that loops would never be
-- stopped: once the script must stop, the script's handler is not run at all.
xpcall = function(f, handler)
    if type(handler) ~= "function" then return caught(raw_xpcall(f, handler)) end
    return caught(raw_xpcall(f, function(raised)
        if stopped() then return raised end
        return handler(raised)
    end))
end
coroutine.resume = function(...) return caught(raw_resume(...)) end

redis = {
    LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
    REPL_NONE = 0, REPL_AOF = 1, REPL_SLAVE = 2, REPL_REPLICA = 2, REPL_ALL = 3,
    REDIS_VERSION = "7.0.0", REDIS_VERSION_NUM = 0x070000,
}
redis.call = call
redis.pcall = native_pcall
function redis.error_reply(text)
    if type(text) ~= "string" then error("wrong number or type of arguments", 2) end
    return { err = text }
end
function redis.status_reply(text)
    if type(text) ~= "string" then error("wrong number or type of arguments", 2) end
    return { ok = text }
end
redis.sha1hex = sha1hex
redis.log = log
redis.setresp = setresp
function redis.set_repl(_) end
function redis.replicate_commands() return true end

-- Not in Redis 7 either: files, and the functions that reach or change a function's globals.
loadfile, dofile, print, setfenv, getfenv, newproxy = nil, nil, nil, nil, nil, nil

-- Read-only tables, as Redis 7 makes the globals, the libraries and the string metatable: a
-- script sees each through an empty proxy that reads through to it and refuses writes.
-- `rawget`, `next` and `pairs` see through a proxy too; `rawset` and `setmetatable` refuse it.
local READONLY = "Attempt to modify a readonly table"
local backing = raw_setmetatable({}, { __mode = "k" })
local function refuse() error(READONLY, 2) end
local function readonly(t, newindex)
    local proxy = raw_setmetatable({}, { __index = t, __newindex = newindex or refuse, __metatable = false })
    backing[proxy] = t
    return proxy
end
for _, name in ipairs({ "string", "table", "math", "coroutine", "redis", "cjson", "cmsgpack", "bit", "struct" }) do
    _G[name] = readonly(_G[name])
end
local string_meta = raw_getmetatable("")
string_meta.__index = string
local string_meta_proxy = readonly(string_meta)
function getmetatable(...)
    local t = ...
    if type(t) == "string" then return string_meta_proxy end
    if backing[t] then return nil end
    return raw_getmetatable(...)
end
function setmetatable(t, ...)
    if backing[t] then error(READONLY, 0) end
    return raw_setmetatable(t, ...)
end
function rawset(t, ...)
    if backing[t] then error(READONLY, 0) end
    return raw_rawset(t, ...)
end
function rawget(t, ...) return raw_rawget(backing[t] or t, ...) end
function next(t, ...) return raw_next(backing[t] or t, ...) end
function pairs(t)
    if backing[t] then return next, t, nil end
    return raw_pairs(t)
end

-- Redis's Lua parses every chunk as text, never loading bytecode: a binary chunk's first byte
-- (ESC) is an unexpected symbol. A space before it has 5.1's parser take the chunk as text,
-- with the same error on the same line.
local function as_text(piece)
    if type(piece) == "string" and byte(piece, 1) == 27 then return " " .. piece end
    return piece
end
local function bad_argument(position, name, expected, count, value)
    local got = count < position and "no value" or type(value)
    error("bad argument #" .. position .. " to '" .. name .. "' (" .. expected .. " expected, got " .. got .. ")", 3)
end

-- The globals: new ones are refused, as are changes to those there are.
local globals = _G
local env = readonly(globals, function(_, name)
    if raw_rawget(globals, name) ~= nil then error(READONLY, 2) end
    error("Script attempted to create global variable '" .. tostring(name) .. "'", 2)
end)
globals._G = env
raw_setmetatable(globals, {
    __index = function(_, name)
        error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end,
    __metatable = false,
})
-- What is loaded runs with the script's globals.
local function loaded(f, ...)
    if f then set_environment(f, env) end
    return f, ...
end
function loadstring(...)
    local text, name = ...
    if type(text) ~= "string" and type(text) ~= "number" then bad_argument(1, "loadstring", "string", select("#", ...), text) end
    return loaded(raw_loadstring(as_text(text), name or text))
end
function load(...)
    local reader, name = ...
    if type(reader) ~= "function" then bad_argument(1, "load", "function", select("#", ...), reader) end
    local first = true
    return loaded(raw_load(function()
        local piece = reader()
        if first then first = false return as_text(piece) end
        return piece
    end, name))
end

-- The name of the chunk that runs (see `Chunk`): where an error was raised is read from it.
local chunk
local function as_error(raised)
    if type(raised) == "table" and type(raised.err) == "string" then return raised end
    local reply = raised_reply(raised)
    if reply then return reply end
    local text, line = library_error(raised)
    -- A library function that ran out of memory raises Lua's own text for it.
    if text == "not enough memory" then return { err = "ERR " .. text, memory = true } end
    if text then return { err = "ERR " .. text, line = line } end
    text = tostring(raised)
    return { err = "ERR " .. text, line = match(text, "^" .. chunk .. ":(%d+):") }
end
return function(script, name)
    chunk = name
    set_environment(script, env)
    local run = script
    -- A function library's chunk sets its code's globals itself (commands/functions.rs).
    if name == "user_function" then run = function() return script(set_environment) end end
    local ok, result = raw_xpcall(run, as_error)
    if ok then return result end
    -- Out of memory (the handler is not called for it) or an error in the handler.
    if type(result) ~= "table" then
        return nil, { err = "ERR " .. tostring(result), memory = result == "not enough memory" }
    end
    return nil, result
end
"##;

/// What runs: an EVAL script (named by its SHA1 in errors) or a Redis Function (by its
/// name). Each names its chunk as Redis does, `@user_script` and `@user_function`, so an error
/// says where it was raised in Redis's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chunk<'a> {
    Script {
        sha: &'a str,
    },
    Function {
        name: &'a str,
    },
    /// FUNCTION LOAD's run of a library: Redis words its errors without where they were
    /// raised (`Error registering functions: <message>`).
    Library,
}

impl Chunk<'_> {
    fn name(self) -> &'static str {
        match self {
            Chunk::Script { .. } => "user_script",
            Chunk::Function { .. } | Chunk::Library => "user_function",
        }
    }

    /// What an error names after ` script: `.
    fn called(self) -> String {
        match self {
            Chunk::Script { sha } => sha.to_owned(),
            Chunk::Function { name } => name.to_owned(),
            Chunk::Library => String::new(),
        }
    }
}

/// Runs a script to its end; `calls` makes its `redis.call`s.
pub fn run(
    source: &[u8],
    chunk: Chunk<'_>,
    keys: &[Bytes],
    argv: &[Bytes],
    limits: Limits,
    stop: &Arc<Stop>,
    calls: Calls,
) -> Outcome {
    let kept = IDLE
        .with_borrow_mut(Option::take)
        .filter(|kept| kept.max_output == limits.memory);
    let mut interpreter = match kept {
        Some(kept) => kept,
        None => match Interpreter::new(limits.memory) {
            Ok(interpreter) => interpreter,
            Err(err) => {
                return Outcome::Aborted(Reply::error(format!("ERR could not start the Lua interpreter: {err}")));
            }
        },
    };
    interpreter.begin(limits, stop, calls);
    let script = Script {
        source,
        chunk,
        keys,
        argv,
    };
    let outcome = interpreter.run(&script, limits, stop);
    if matches!(outcome, Outcome::Reply(_)) && interpreter.rest() {
        IDLE.set(Some(interpreter));
    }
    outcome
}

thread_local! {
    /// The interpreter of this thread's last run, for its next (a blocking thread of tokio's
    /// pool runs one script at a time).
    static IDLE: RefCell<Option<Interpreter>> = const { RefCell::new(None) };
}

/// Interpreters alive in the process, running or kept idle by their threads.
static ALIVE: AtomicUsize = AtomicUsize::new(0);
/// Most interpreters kept idle (with what they loaded) beyond those running: tokio's blocking
/// pool may have many threads, and each would keep one.
const MAX_KEPT: usize = 16;
/// Garbage an interpreter may hold between runs before a full collection. A run's memory
/// limit counts from what the interpreter holds as it starts, garbage included, and garbage
/// collected during the run is room the run did not pay for: this bounds that room.
const MAX_LEFTOVER: usize = 1 << 20;
/// Most memory an idle interpreter keeps: its libraries, the functions of the bodies it
/// loaded and their text (a body of comments is large text and a small function); past it,
/// it is dropped.
const MAX_AT_REST: usize = 8 << 20;
/// Most bodies one interpreter keeps loaded; past it, it forgets them all.
const MAX_LOADED: usize = 64;

/// One Lua interpreter with Redis's libraries, the `redis` table and the bounds in place, and
/// the bodies it loaded. Its native functions are made once and read the run's state.
struct Interpreter {
    // Declared before `lua`: values of the interpreter go before it.
    /// The prelude's function that runs a script (see [`PRELUDE`]).
    runner: mlua::Function,
    /// Bodies loaded, by what names them (a script's SHA1, a function's name): the chunk's
    /// name, the body, its function.
    loaded: HashMap<String, (&'static str, Vec<u8>, mlua::Function)>,
    /// The bytes of the bodies in `loaded`.
    loaded_bytes: usize,
    lua: Lua,
    state: Rc<RunState>,
    cjson: library::Settings,
    /// The limit on the output of the libraries' encoders: the memory limit it was made for.
    max_output: usize,
    /// Memory held after its last full collection.
    at_rest: usize,
}

/// What a run runs.
struct Script<'a> {
    source: &'a [u8],
    chunk: Chunk<'a>,
    keys: &'a [Bytes],
    argv: &'a [Bytes],
}

/// What the native functions of an interpreter reach, set for each run.
struct RunState {
    stop: RefCell<Arc<Stop>>,
    deadline: Cell<Instant>,
    limit: Cell<Duration>,
    calls: RefCell<Option<Calls>>,
    /// Calls made, and the bytes of their arguments.
    count: Cell<u64>,
    bytes: Cell<u64>,
    /// The protocol the calls answer in (`redis.setresp`).
    protocol: Cell<u8>,
    /// Bytes `redis.log` wrote.
    logged: Cell<usize>,
}

impl RunState {
    fn stopped(&self) -> Option<String> {
        stopped(&self.stop.borrow(), self.deadline.get(), self.limit.get())
    }

    fn resp3(&self) -> bool {
        self.protocol.get() == 3
    }
}

impl Interpreter {
    /// The base library (with coroutines, as in 5.1), table, string, math, and Redis's cjson,
    /// cmsgpack, bit and struct. No io, os, package (require) or debug.
    fn new(max_output: usize) -> mlua::Result<Interpreter> {
        let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, LuaOptions::new())?;
        let state = Rc::new(RunState {
            stop: RefCell::new(Arc::default()),
            deadline: Cell::new(Instant::now()),
            limit: Cell::new(Duration::ZERO),
            calls: RefCell::new(None),
            count: Cell::new(0),
            bytes: Cell::new(0),
            protocol: Cell::new(2),
            logged: Cell::new(0),
        });
        let library_state = Rc::clone(&state);
        let bounds = library::Bounds::new(max_output, move || library_state.stopped());
        let cjson = library::install(&lua, &bounds)?;
        let hook_state = Rc::clone(&state);
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| match hook_state.stopped() {
                Some(why) => Err(mlua::Error::runtime(why)),
                None => Ok(VmState::Continue),
            },
        )?;
        let check_state = Rc::clone(&state);
        let stopped_fn = lua.create_function(move |_, ()| Ok(check_state.stopped()))?;
        let (call, pcall) = native_calls(&lua, &state)?;
        let setresp = set_protocol(&lua, &state)?;
        let sha1hex = library::function(&lua, sha1hex)?;
        let log = script_log(&lua, &state)?;
        let set_environment =
            lua.create_function(|_, (function, env): (mlua::Function, Table)| function.set_environment(env))?;
        let runner: mlua::Function = lua
            .load(&PRELUDE_CODE[..])
            .set_name("=prelude")
            .set_mode(ChunkMode::Binary)
            .call((call, pcall, setresp, sha1hex, log, stopped_fn, set_environment))?;
        let at_rest = lua.used_memory();
        // Counted as it is made: its drop counts it out.
        ALIVE.fetch_add(1, Ordering::Relaxed);
        Ok(Interpreter {
            runner,
            loaded: HashMap::new(),
            loaded_bytes: 0,
            lua,
            state,
            cjson,
            max_output,
            at_rest,
        })
    }

    /// Sets what the next run's native functions reach.
    fn begin(&mut self, limits: Limits, stop: &Arc<Stop>, calls: Calls) {
        let state = &self.state;
        *state.stop.borrow_mut() = Arc::clone(stop);
        state.deadline.set(Instant::now() + limits.time);
        state.limit.set(limits.time);
        *state.calls.borrow_mut() = Some(calls);
        state.count.set(0);
        state.bytes.set(0);
        state.protocol.set(2);
        state.logged.set(0);
        self.cjson.reset();
    }

    /// Runs the script [`Interpreter::begin`] set up, to its end.
    fn run(&mut self, script: &Script<'_>, limits: Limits, stop: &Arc<Stop>) -> Outcome {
        let deadline = self.state.deadline.get();
        let chunk = script.chunk;
        let result = self.call(script, limits);
        // The calls hold the run's session, which goes back to its owner with the result.
        drop(self.state.calls.borrow_mut().take());
        *self.state.stop.borrow_mut() = Arc::default();
        // A script that ended by itself keeps its result, even if SCRIPT KILL or its deadline
        // came after the last look; one that failed because it was stopped is undone.
        let failed = !matches!(result, Ok(ref reply) if !reply.is_error());
        if failed && let Some(why) = stopped(stop, deadline, limits.time) {
            if chunk == Chunk::Library && stop.reason() != KILLED && stop.reason() != SHUTTING_DOWN {
                // FUNCTION LOAD words it after `Error registering functions: ` (commands/functions.rs).
                return Outcome::Aborted(Reply::error("ERR FUNCTION LOAD timeout"));
            }
            return Outcome::Aborted(Reply::error(why));
        }
        match result {
            Ok(reply) => Outcome::Reply(reply),
            Err(mlua::Error::MemoryError(_)) => Outcome::Aborted(out_of_memory(limits)),
            Err(err) => Outcome::Aborted(Reply::error(format!("ERR Error running script: {err}"))),
        }
    }

    fn call(&mut self, script: &Script<'_>, limits: Limits) -> mlua::Result<Reply> {
        let Script {
            source,
            chunk,
            keys,
            argv,
        } = *script;
        // From what the interpreter holds now: its libraries, the bodies it loaded and any
        // garbage of earlier runs (at most `MAX_LEFTOVER`) are not the script's to pay for.
        self.lua
            .set_memory_limit(limits.memory.saturating_add(self.lua.used_memory()))?;
        let globals = self.lua.globals();
        let footprint = [keys, argv]
            .iter()
            .flat_map(|items| items.iter())
            .map(|item| FOOTPRINT_EACH + 2 * item.len())
            .sum::<usize>()
            + 2 * FOOTPRINT_EACH;
        within_limit_unprotected(&self.lua, footprint, || {
            globals.raw_set("KEYS", strings(&self.lua, keys)?)?;
            globals.raw_set("ARGV", strings(&self.lua, argv)?)
        })?;
        let script = match self.function(source, chunk) {
            Ok(script) => script,
            Err(mlua::Error::SyntaxError { message, .. }) => {
                return Ok(Reply::error(format!(
                    "ERR Error compiling script (new function): {message}"
                )));
            }
            Err(err) => return Err(err),
        };
        let (value, raised): (Value, Value) = self.runner.call((script, chunk.name()))?;
        Ok(match raised {
            Value::Table(raised) if raised.raw_get::<bool>("memory").unwrap_or(false) => {
                return Err(mlua::Error::MemoryError(String::new()));
            }
            Value::Table(raised) => error_reply(&raised, chunk),
            _ => to_reply(&value, self.state.resp3(), 0),
        })
    }

    /// The function of a body: the one this interpreter loaded before, else loaded now. (FUNCTION
    /// LOAD's library runs are loaded every time, each is run once; and so are bodies past a
    /// quarter of `MAX_AT_REST`, whose text would be kept.)
    fn function(&mut self, source: &[u8], chunk: Chunk<'_>) -> mlua::Result<mlua::Function> {
        let named = match chunk {
            Chunk::Script { sha } => sha,
            Chunk::Function { name } => name,
            Chunk::Library => return script_function(&self.lua, source, chunk),
        };
        if let Some((kept_chunk, body, function)) = self.loaded.get(named)
            && *kept_chunk == chunk.name()
            && body[..] == *source
        {
            return Ok(function.clone());
        }
        let function = script_function(&self.lua, source, chunk)?;
        if source.len() > MAX_AT_REST / 4 {
            return Ok(function);
        }
        if self.loaded.len() >= MAX_LOADED || self.loaded_bytes + source.len() > MAX_AT_REST / 4 {
            self.loaded.clear();
            self.loaded_bytes = 0;
        }
        let kept = (chunk.name(), source.to_vec(), function.clone());
        if let Some((_, replaced, _)) = self.loaded.insert(named.to_owned(), kept) {
            self.loaded_bytes -= replaced.len();
        }
        self.loaded_bytes += source.len();
        Ok(function)
    }

    /// After a run that ended by itself: collects its garbage once there is enough of it, and
    /// answers whether the interpreter may be kept for the next run.
    fn rest(&mut self) -> bool {
        if self.lua.used_memory() > self.at_rest.saturating_add(MAX_LEFTOVER) {
            if self.lua.gc_collect().is_err() {
                return false;
            }
            self.at_rest = self.lua.used_memory();
        }
        self.at_rest + self.loaded_bytes <= MAX_AT_REST && ALIVE.load(Ordering::Relaxed) <= MAX_KEPT
    }
}

impl Drop for Interpreter {
    fn drop(&mut self) {
        ALIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The bytecode of the script and function bodies this gateway ran. One for the process:
/// bytecode belongs to the interpreter's build, not to an interpreter, and a body is the same
/// code whoever runs it (each run still has its own globals and libraries).
static COMPILED: LazyLock<compiled::Compiled> = LazyLock::new(compiled::Compiled::default);

/// The function of a script's or a Redis Function's chunk: loaded from its bytecode when the
/// same body ran before, else compiled from its text and its bytecode kept. (FUNCTION LOAD's
/// library runs are compiled every time: each is run once.)
fn script_function(lua: &Lua, source: &[u8], chunk: Chunk<'_>) -> mlua::Result<mlua::Function> {
    let name = chunk.name();
    let cached = chunk != Chunk::Library;
    if cached && let Some(bytecode) = COMPILED.get(name, source) {
        return lua
            .load(&bytecode[..])
            .set_name(format!("@{name}"))
            .set_mode(ChunkMode::Binary)
            .into_function();
    }
    let function = lua
        .load(as_text(source).as_ref())
        .set_name(format!("@{name}"))
        .set_mode(ChunkMode::Text)
        .into_function()?;
    if cached {
        COMPILED.keep(name, source, function.dump(false));
    }
    Ok(function)
}

/// The prelude's bytecode, compiled once for every interpreter.
static PRELUDE_CODE: LazyLock<Vec<u8>> = LazyLock::new(|| {
    Lua::new()
        .load(PRELUDE)
        .set_name("=prelude")
        .into_function()
        .expect("the prelude compiles")
        .dump(false)
});

/// A script's body as Redis's Lua parses every chunk: as text. Lua 5.1 would load one that
/// starts with ESC (`\x1bLua`) as bytecode, which is not verified and can read and write the
/// process's memory; Redis's parser takes that ESC for an unexpected symbol. A space before it
/// has 5.1's parser do the same, with the same error on the same line (the prelude does this
/// for `loadstring` and `load`).
fn as_text(source: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    match source.first() {
        Some(0x1b) => std::borrow::Cow::Owned([b" ", source].concat()),
        _ => std::borrow::Cow::Borrowed(source),
    }
}

/// Why the script must stop now, if it must.
fn stopped(stop: &Stop, deadline: Instant, limit: Duration) -> Option<String> {
    if stop.reason() == KILLED {
        Some("ERR Script killed by user with SCRIPT KILL... (pgvs3 rolled its writes back)".to_owned())
    } else if stop.reason() == SHUTTING_DOWN {
        Some("ERR Script killed: the gateway is shutting down; its writes were rolled back".to_owned())
    } else if Instant::now() >= deadline {
        Some(format!(
            "ERR Script killed: it ran longer than {} ms (--resp-script-time-limit); its writes were rolled back",
            limit.as_millis()
        ))
    } else {
        None
    }
}

fn out_of_memory(limits: Limits) -> Reply {
    Reply::error(format!(
        "ERR Script killed: it used more than {} bytes of memory (--resp-script-max-memory); its writes were rolled back",
        limits.memory
    ))
}

/// `redis.sha1hex(text)`: one argument, read as `lua_tolstring` reads it (a string, a number as
/// Lua writes it, anything else as empty), as Redis's `luaRedisSha1hexCommand`.
fn sha1hex(lua: &Lua, args: mlua::MultiValue) -> library::LibraryResult {
    let [value] = &args.into_vec()[..] else {
        return Err(library::LibraryError::Unpositioned("wrong number of arguments".into()));
    };
    let text = match value {
        Value::String(_) | Value::Integer(_) | Value::Number(_) => lua
            .coerce_string(value.clone())?
            .map(|text| text.as_bytes().to_vec())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    let digest = lua.create_string(hex::encode(Sha1::digest(&text)))?;
    Ok(mlua::MultiValue::from_vec(vec![Value::String(digest)]))
}

/// The longest message `redis.log` writes, as Redis's log truncates a line (`LOG_MAX_LEN`).
const MAX_LOG_LINE: usize = 1024;
/// Most bytes of messages one script writes with `redis.log`; the rest are dropped, and one
/// line says so. Redis has no such bound: one script logging in a loop wrote 50 MiB.
const MAX_LOG_BYTES: usize = 64 * 1024;
/// Most bytes of script messages the whole gateway writes in one second; past it they are
/// dropped until the next second, however many scripts log.
const MAX_LOG_BYTES_PER_SECOND: usize = 1024 * 1024;

/// `redis.log`: to the gateway's log, bounded per line, per script and per second.
fn script_log(lua: &Lua, state: &Rc<RunState>) -> mlua::Result<mlua::Function> {
    let state = Rc::clone(state);
    lua.create_function(move |lua, (level, message): (i64, mlua::Variadic<Value>)| {
        let written = &state.logged;
        if written.get() > MAX_LOG_BYTES {
            return Ok(());
        }
        let mut text = Vec::new();
        for part in message {
            let Some(part) = lua.coerce_string(part).ok().flatten() else {
                continue;
            };
            if !text.is_empty() {
                text.push(b' ');
            }
            text.extend_from_slice(&part.as_bytes()[..part.as_bytes().len().min(MAX_LOG_LINE)]);
            if text.len() >= MAX_LOG_LINE {
                break;
            }
        }
        text.truncate(MAX_LOG_LINE);
        written.set(written.get() + text.len());
        if written.get() > MAX_LOG_BYTES {
            tracing::warn!(
                target: "pgvs3::resp::script",
                "this script logged more than {MAX_LOG_BYTES} bytes; its further messages are dropped"
            );
            return Ok(());
        }
        if !log_rate_allows(text.len()) {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&text);
        match level {
            0 | 1 => tracing::debug!(target: "pgvs3::resp::script", "{text}"),
            2 => tracing::info!(target: "pgvs3::resp::script", "{text}"),
            _ => tracing::warn!(target: "pgvs3::resp::script", "{text}"),
        }
        Ok(())
    })
}

/// Whether the gateway's scripts may log `bytes` more in this second.
fn log_rate_allows(bytes: usize) -> bool {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    static WINDOW: std::sync::Mutex<(u64, usize)> = std::sync::Mutex::new((0, 0));
    let second = START.get_or_init(Instant::now).elapsed().as_secs();
    let mut window = WINDOW.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if window.0 != second {
        *window = (second, 0);
    }
    window.1 += bytes;
    window.1 <= MAX_LOG_BYTES_PER_SECOND
}

/// `redis.call` and `redis.pcall`: each sends its command to the connection's task and converts
/// the reply. They are native functions, so that a script's `return redis.call(...)` (a tail
/// call) keeps the script's frame and its line. `redis.pcall` returns an error reply as an error
/// table; `redis.call` raises it, marked with [`RAISED`] and the script's line, which the
/// prelude turns back into the table Redis raises.
fn native_calls(lua: &Lua, state: &Rc<RunState>) -> mlua::Result<(mlua::Function, mlua::Function)> {
    let raising = Rc::clone(state);
    let call = lua.create_function(move |lua, args: mlua::Variadic<Value>| match raising.send(&args) {
        Reply::Error(text) => Err(raised(lua, &text)),
        reply => within_limit_unprotected(lua, footprint(&reply), || to_lua(lua, &reply, raising.resp3())),
    })?;
    let answering = Rc::clone(state);
    let pcall = lua.create_function(move |lua, args: mlua::Variadic<Value>| {
        let reply = answering.send(&args);
        within_limit_unprotected(lua, footprint(&reply), || to_lua(lua, &reply, answering.resp3()))
    })?;
    Ok((call, pcall))
}

/// Runs `convert` (Lua values made from a call's reply, or KEYS and ARGV) with the interpreter's
/// memory limit lifted when they surely fit under it: what they take at most (`footprint`, see
/// [`FOOTPRINT_EACH`]) with what the interpreter holds, and room for that to grow by half (Lua
/// doubles its string table, a pointer for each string, as strings are made), is within the
/// limit. Under a limit mlua makes every string it creates and every table field it sets in a
/// protected call, and Lua 5.1 allocates a closure for each (with the garbage they leave, a
/// tenth of a BullMQ job's gateway time); values that could pass the limit are made under it,
/// each allocation checked. No script code runs while the limit is lifted.
fn within_limit_unprotected<R>(
    lua: &Lua,
    footprint: usize,
    convert: impl FnOnce() -> mlua::Result<R>,
) -> mlua::Result<R> {
    let used = lua.used_memory();
    let limit = lua.set_memory_limit(0)?;
    // Back on the way out, however `convert` ends.
    let _restore = RestoreLimit { lua, limit };
    if limit != 0 && used.saturating_add(used / 2).saturating_add(footprint) > limit {
        lua.set_memory_limit(limit)?;
    }
    convert()
}

/// Sets the interpreter's memory limit back to `limit` when dropped.
struct RestoreLimit<'a> {
    lua: &'a Lua,
    limit: usize,
}

impl Drop for RestoreLimit<'_> {
    fn drop(&mut self) {
        // Fails only without a memory state, which an interpreter made by `Lua::new` has.
        let _ = self.lua.set_memory_limit(self.limit);
    }
}

/// What Lua 5.1 takes at most for a string or table of a reply, besides twice its bytes: a
/// string's header (24 bytes) and terminator, a table's header (64) and its slots (16 in its
/// array part, 40 in its hash part, for up to two per element: a map's key and value), with a
/// RESP3 tag's table and string beside, each rounded up by the allocator.
const FOOTPRINT_EACH: usize = 256;

/// The most memory the Lua value of `reply` takes (see [`FOOTPRINT_EACH`]).
fn footprint(reply: &Reply) -> usize {
    let pairs = |pairs: &[(Reply, Reply)]| -> usize {
        pairs
            .iter()
            .map(|(first, second)| FOOTPRINT_EACH + footprint(first) + footprint(second))
            .sum()
    };
    FOOTPRINT_EACH
        + match reply {
            Reply::Simple(text) => 2 * text.len(),
            Reply::Status(text) | Reply::Error(text) | Reply::BigNumber(text) => 2 * text.len(),
            Reply::Bulk(bytes) => 2 * bytes.len(),
            Reply::Verbatim(format, text) => FOOTPRINT_EACH + 2 * (format.len() + text.len()),
            Reply::Integer(_)
            | Reply::Nil
            | Reply::NilArray
            | Reply::Double(_)
            | Reply::Boolean(_)
            | Reply::OverLimit(_) => FOOTPRINT_EACH,
            Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => items.iter().map(footprint).sum(),
            Reply::Map(items) | Reply::Pairs(items) | Reply::Keyed(items) => pairs(items),
        }
}

/// An error reply raised from a native function, at the line of the script that called it
/// (level 0 is the function, 1 its caller), as the prelude reads it back (see [`RAISED`]).
fn raised(lua: &Lua, text: &str) -> mlua::Error {
    let line = lua.inspect_stack(1, |frame| frame.current_line()).flatten();
    let line = line.map_or_else(String::new, |line| line.to_string());
    mlua::Error::runtime(format!("{RAISED}{line}:{text}"))
}

/// `redis.setresp(2 or 3)`: the protocol the script's calls answer in from then on (RESP3's
/// maps, doubles, nulls, ... become Lua values as Redis 7.0's `redisProtocolToLuaType` makes
/// them) and how its Lua booleans are returned. The version is read as `lua_tonumber` reads it
/// (anything but a number is 0), with Redis's `luaSetResp` errors.
fn set_protocol(lua: &Lua, state: &Rc<RunState>) -> mlua::Result<mlua::Function> {
    let state = Rc::clone(state);
    lua.create_function(move |lua, args: mlua::MultiValue| {
        let args = args.into_vec();
        let [version] = &args[..] else {
            return Err(raised(lua, "ERR redis.setresp() requires one argument."));
        };
        let version = match version {
            Value::Integer(number) => *number as f64,
            Value::Number(number) => *number,
            Value::String(text) => text
                .to_str()
                .ok()
                .and_then(|text| text.trim().parse().ok())
                .unwrap_or(0.0),
            _ => 0.0,
        };
        // C's conversion to int truncates.
        match version.trunc() {
            2.0 => state.protocol.set(2),
            3.0 => state.protocol.set(3),
            _ => return Err(raised(lua, "ERR RESP version must be 2 or 3.")),
        }
        Ok(())
    })
}

/// Marks an error reply `redis.call` raises (the prelude's pattern spells it `\1pgvs3:`).
const RAISED: &str = "\u{1}pgvs3:";

impl RunState {
    /// Sends a call of the script to where the run's calls go.
    fn send(&self, args: &[Value]) -> Reply {
        let args = match arguments(args) {
            Ok(args) => args,
            Err(reply) => return reply,
        };
        self.count.set(self.count.get() + 1);
        self.bytes
            .set(self.bytes.get() + args.iter().map(|arg| arg.len() as u64).sum::<u64>());
        if self.count.get() > MAX_CALLS {
            return Reply::error(format!("ERR a script may make at most {MAX_CALLS} calls"));
        }
        if self.bytes.get() > MAX_CALL_BYTES {
            return Reply::error(format!(
                "ERR a script may pass at most {MAX_CALL_BYTES} bytes of arguments to its calls"
            ));
        }
        // Never borrowed twice: no Lua runs while a call is made.
        match self.calls.borrow_mut().as_mut() {
            Some(calls) => calls(args),
            None => Reply::error("ERR the script's connection went away"),
        }
    }
}

/// A command's arguments from Lua: strings as they are, numbers as Redis writes them.
fn arguments(args: &[Value]) -> Result<Vec<Bytes>, Reply> {
    if args.is_empty() {
        return Err(Reply::error(
            "ERR Please specify at least one argument for this redis lib call",
        ));
    }
    args.iter()
        .map(|arg| match arg {
            Value::String(text) => Ok(Bytes::copy_from_slice(&text.as_bytes())),
            Value::Integer(number) => Ok(Bytes::from(number.to_string())),
            Value::Number(number) => Ok(Bytes::from(number_text(*number))),
            _ => Err(Reply::error(
                "ERR Lua redis lib command arguments must be strings or integers",
            )),
        })
        .collect()
}

/// A Lua number as text: integers without a fraction, others in their shortest exact form.
fn number_text(number: f64) -> String {
    if number.fract() == 0.0 && number.abs() < 1e15 {
        format!("{}", number as i64)
    } else {
        format!("{number}")
    }
}

fn strings(lua: &Lua, items: &[Bytes]) -> mlua::Result<Table> {
    let table = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        table.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(table)
}

/// A reply as Lua sees it, as Redis 7.0's `redisProtocolToLuaType` converts what the command
/// answered in the script's protocol. Both: integers are numbers, bulk strings strings, status
/// and error replies tables with an `ok` or `err` field, arrays tables. RESP2 (`resp3` false):
/// nil is false, maps flattened, doubles and big numbers strings, booleans 1 or 0. RESP3: nil
/// is nil, booleans booleans, a map `{map = {key = value}}`, a set `{set = {member = true}}`, a
/// double `{double = number}`, a big number `{big_number = text}`, a verbatim string
/// `{verbatim_string = {format = ..., string = ...}}`.
fn to_lua(lua: &Lua, reply: &Reply, resp3: bool) -> mlua::Result<Value> {
    let array = |items: &mut dyn Iterator<Item = mlua::Result<Value>>, len: usize| -> mlua::Result<Value> {
        let table = lua.create_table_with_capacity(len, 0)?;
        for (i, item) in items.enumerate() {
            table.raw_set(i + 1, item?)?;
        }
        Ok(Value::Table(table))
    };
    let tagged = |tag: &str, value: Value| -> mlua::Result<Value> {
        let table = lua.create_table_with_capacity(0, 1)?;
        table.raw_set(tag, value)?;
        Ok(Value::Table(table))
    };
    Ok(match reply {
        Reply::Simple(text) => Value::Table(lua.create_table_from([("ok", *text)])?),
        Reply::Status(text) => Value::Table(lua.create_table_from([("ok", text.as_str())])?),
        Reply::Error(text) => Value::Table(lua.create_table_from([("err", text.as_str())])?),
        // (`Session::call` words it as an error first.)
        Reply::OverLimit(_) => Value::Table(lua.create_table_from([("err", "ERR the reply is too large")])?),
        Reply::Integer(number) => Value::Number(*number as f64),
        Reply::Bulk(bytes) => Value::String(lua.create_string(bytes)?),
        Reply::Nil | Reply::NilArray if resp3 => Value::Nil,
        Reply::Nil | Reply::NilArray => Value::Boolean(false),
        Reply::Double(number) if resp3 => tagged("double", Value::Number(*number))?,
        Reply::Double(number) => Value::String(lua.create_string(format_score(*number))?),
        Reply::Boolean(value) if resp3 => Value::Boolean(*value),
        Reply::Boolean(value) => Value::Number(f64::from(u8::from(*value))),
        Reply::BigNumber(digits) if resp3 => tagged("big_number", Value::String(lua.create_string(digits)?))?,
        Reply::BigNumber(digits) => Value::String(lua.create_string(digits)?),
        Reply::Verbatim(format, text) if resp3 => {
            let verbatim = lua.create_table_with_capacity(0, 2)?;
            verbatim.raw_set("string", lua.create_string(text)?)?;
            verbatim.raw_set("format", lua.create_string(format)?)?;
            tagged("verbatim_string", Value::Table(verbatim))?
        }
        Reply::Verbatim(_, text) => Value::String(lua.create_string(text)?),
        Reply::Set(members) if resp3 => {
            let set = lua.create_table_with_capacity(0, members.len())?;
            for member in members {
                // (A nil member cannot be a key: Redis's lua_settable raises; none is sent.)
                let member = to_lua(lua, member, resp3)?;
                if !matches!(member, Value::Nil) {
                    set.raw_set(member, true)?;
                }
            }
            tagged("set", Value::Table(set))?
        }
        Reply::Map(pairs) | Reply::Keyed(pairs) if resp3 => {
            let map = lua.create_table_with_capacity(0, pairs.len())?;
            for (key, value) in pairs {
                let key = to_lua(lua, key, resp3)?;
                if !matches!(key, Value::Nil) {
                    map.raw_set(key, to_lua(lua, value, resp3)?)?;
                }
            }
            tagged("map", Value::Table(map))?
        }
        Reply::Array(items) | Reply::Push(items) | Reply::Set(items) => {
            array(&mut items.iter().map(|item| to_lua(lua, item, resp3)), items.len())?
        }
        // RESP3's pairs are arrays of two; RESP2's (and a map's) one flat array.
        Reply::Pairs(pairs) if resp3 => array(
            &mut pairs
                .iter()
                .map(|(first, second)| array(&mut [first, second].into_iter().map(|item| to_lua(lua, item, resp3)), 2)),
            pairs.len(),
        )?,
        Reply::Map(pairs) | Reply::Pairs(pairs) => array(
            &mut pairs
                .iter()
                .flat_map(|(key, value)| [key, value])
                .map(|item| to_lua(lua, item, resp3)),
            pairs.len() * 2,
        )?,
        // RESP2's XREAD: `[key, entries]` arrays.
        Reply::Keyed(pairs) => array(
            &mut pairs
                .iter()
                .map(|(key, value)| array(&mut [key, value].into_iter().map(|item| to_lua(lua, item, resp3)), 2)),
            pairs.len(),
        )?,
    })
}

/// What a script returns, as a reply (Redis 7.0's `luaReplyToRedisReply`): numbers are
/// truncated to integers; true is 1 and false nil, or (`resp3`, after `redis.setresp(3)`)
/// RESP3 booleans; nil is nil; a table with `err`, `ok`, `double`, `big_number`,
/// `verbatim_string`, `map` or `set` (looked for in that order) that reply, another table an
/// array of its items up to the first nil. Each is sent in the client's protocol.
fn to_reply(value: &Value, resp3: bool, depth: usize) -> Reply {
    match value {
        Value::Nil => Reply::Nil,
        Value::Boolean(value) if resp3 => Reply::Boolean(*value),
        Value::Boolean(false) => Reply::Nil,
        Value::Boolean(true) => Reply::Integer(1),
        Value::Integer(number) => Reply::Integer(*number),
        Value::Number(number) => Reply::Integer(*number as i64),
        Value::String(text) => Reply::Bulk(Bytes::copy_from_slice(&text.as_bytes())),
        Value::Table(table) => {
            let field = |name: &str| table.raw_get::<Value>(name).unwrap_or(Value::Nil);
            if let Value::String(error) = field("err") {
                return Reply::Error(error.to_string_lossy());
            }
            if let Value::String(status) = field("ok") {
                return Reply::Status(status.to_string_lossy().replace(['\r', '\n'], " "));
            }
            if let Value::Integer(_) | Value::Number(_) = field("double") {
                return Reply::Double(table.raw_get::<f64>("double").unwrap_or_default());
            }
            if let Value::String(digits) = field("big_number") {
                return Reply::BigNumber(digits.to_string_lossy().replace(['\r', '\n'], " "));
            }
            if let Value::Table(verbatim) = field("verbatim_string")
                && let Ok(Value::String(format)) = verbatim.raw_get::<Value>("format")
                && let Ok(Value::String(text)) = verbatim.raw_get::<Value>("string")
            {
                // Redis writes the format's first three bytes.
                let format: String = format.to_string_lossy().chars().chain("   ".chars()).take(3).collect();
                return Reply::Verbatim(format, Bytes::copy_from_slice(&text.as_bytes()));
            }
            if depth >= MAX_DEPTH {
                return Reply::error("ERR reached lua stack limit");
            }
            if let Value::Table(map) = field("map") {
                return Reply::Map(
                    map.pairs::<Value, Value>()
                        .filter_map(Result::ok)
                        .map(|(key, value)| (to_reply(&key, resp3, depth + 1), to_reply(&value, resp3, depth + 1)))
                        .collect(),
                );
            }
            if let Value::Table(set) = field("set") {
                return Reply::Set(
                    set.pairs::<Value, Value>()
                        .filter_map(Result::ok)
                        .map(|(member, _)| to_reply(&member, resp3, depth + 1))
                        .collect(),
                );
            }
            let mut items = Vec::new();
            for i in 1.. {
                match table.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(item) => items.push(to_reply(&item, resp3, depth + 1)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    }
}

/// What a script raised, as Redis 7 words it: the error, then where it was raised.
fn error_reply(raised: &Table, chunk: Chunk<'_>) -> Reply {
    let text = raised
        .raw_get::<Option<mlua::String>>("err")
        .ok()
        .flatten()
        .map_or_else(|| "ERR unknown error".to_owned(), |text| text.to_string_lossy());
    let line = raised.raw_get::<Value>("line").ok().and_then(|line| match line {
        Value::Integer(line) => Some(line.to_string()),
        Value::Number(line) => Some((line as i64).to_string()),
        Value::String(line) => Some(line.to_string_lossy()),
        _ => None,
    });
    match line {
        Some(line) if chunk != Chunk::Library => Reply::Error(format!(
            "{text} script: {}, on @{}:{line}.",
            chunk.called(),
            chunk.name()
        )),
        _ => Reply::Error(text),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Mutex;

    use super::*;

    /// Counts the bytes the log gets.
    #[derive(Clone, Default)]
    struct Counted(Arc<Mutex<usize>>);

    impl Write for Counted {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            *self.0.lock().unwrap() += buf.len();
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The bytes of log one run of `source` writes.
    fn logged_by(source: &str) -> usize {
        let counted = Counted::default();
        let writer = counted.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(tracing::Level::DEBUG)
            .finish();
        let reply = tracing::subscriber::with_default(subscriber, || run_alone(source));
        assert!(matches!(reply, Reply::Nil), "{source}: {reply:?}");
        *counted.0.lock().unwrap()
    }

    /// One run of `source` as `chunk`, with `memory` its limit, and no calls to make.
    fn run_as(source: &str, chunk: Chunk<'_>, memory: usize, stop: &Arc<Stop>) -> Outcome {
        let limits = Limits {
            time: Duration::from_secs(60),
            memory,
        };
        let calls: Calls = Box::new(|_| Reply::error("ERR no calls in this test"));
        run(source.as_bytes(), chunk, &[], &[], limits, stop, calls)
    }

    /// The reply of one run of `source` as `chunk`.
    fn answer(source: &str, chunk: Chunk<'_>) -> Reply {
        match run_as(source, chunk, 64 << 20, &Arc::new(Stop::default())) {
            Outcome::Reply(reply) | Outcome::Aborted(reply) => reply,
        }
    }

    fn run_alone(source: &str) -> Reply {
        answer(source, Chunk::Script { sha: "sha" })
    }

    /// A body's second run loads the bytecode its first compiled, and behaves as the first: the
    /// same result, and an error raised in a nested function names the same chunk and line.
    #[test]
    fn a_body_run_again_from_its_bytecode_answers_as_from_its_text() {
        let source = "local t = {}\nlocal function f(n)\n  if n > 2 then error('deep ' .. n) end\n  return f(n + 1)\nend\nreturn f(0)\n";
        assert!(COMPILED.get("user_script", source.as_bytes()).is_none());
        let first = run_alone(source);
        assert!(COMPILED.get("user_script", source.as_bytes()).is_some());
        let second = run_alone(source);
        assert_eq!(format!("{first:?}"), format!("{second:?}"));
        assert!(format!("{second:?}").contains("user_script:3: deep 3"), "{second:?}");

        let adds = "local s = 0\nfor i = 1, 10 do s = s + i end\nreturn {s, 'x' .. s}\n";
        let first = run_alone(adds);
        let second = run_alone(adds);
        assert_eq!(format!("{first:?}"), format!("{second:?}"));
        assert!(format!("{second:?}").contains("55"), "{second:?}");

        // A syntax error is not kept: it is reported at every run.
        let broken = "return 1 +";
        for _ in 0..2 {
            let reply = run_alone(broken);
            assert!(format!("{reply:?}").contains("Error compiling script"), "{reply:?}");
        }
        assert!(COMPILED.get("user_script", broken.as_bytes()).is_none());
    }

    /// Which interpreter this thread keeps for its next run, if any.
    fn kept() -> Option<*const RunState> {
        IDLE.with_borrow(|idle| idle.as_ref().map(|interpreter| Rc::as_ptr(&interpreter.state)))
    }

    /// An interpreter runs script after script: what a run may change (its protocol, cjson's
    /// settings, its log's count, KEYS and ARGV) is put back before the next, globals stay
    /// shut, and one that was stopped is dropped, not kept.
    #[test]
    fn a_kept_interpreter_gives_each_run_a_clean_start() {
        assert!(matches!(run_alone("return 1"), Reply::Integer(1)));
        let first = kept().expect("the interpreter is kept");
        assert!(matches!(run_alone("return 2"), Reply::Integer(2)));
        assert_eq!(kept(), Some(first), "the same interpreter ran both");

        let resp3 = run_alone("redis.setresp(3) return true");
        assert!(matches!(resp3, Reply::Boolean(true)), "{resp3:?}");
        let resp2 = run_alone("return true");
        assert!(matches!(resp2, Reply::Integer(1)), "{resp2:?}");

        let shallow = run_alone("cjson.encode_max_depth(1) return cjson.encode({{1}})");
        assert!(
            format!("{shallow:?}").contains("Cannot serialise, excessive nesting"),
            "{shallow:?}"
        );
        let deep = run_alone("return cjson.encode({{1}})");
        assert!(matches!(&deep, Reply::Bulk(json) if &json[..] == b"[[1]]"), "{deep:?}");

        let made = run_alone("leftover = 1 return 1");
        assert!(
            format!("{made:?}").contains("Script attempted to create global variable"),
            "{made:?}"
        );
        let read = run_alone("return leftover");
        assert!(
            format!("{read:?}").contains("nonexistent global variable 'leftover'"),
            "{read:?}"
        );
        let changed = run_alone("KEYS[1] = 'x' return #KEYS");
        assert!(matches!(changed, Reply::Integer(1)), "{changed:?}");
        assert!(matches!(run_alone("return #KEYS"), Reply::Integer(0)));

        assert!(
            logged_by("for i = 1, 1000 do redis.log(redis.LOG_WARNING, string.rep('x', 600)) end") > MAX_LOG_BYTES / 2
        );
        assert!(
            logged_by("redis.log(redis.LOG_WARNING, 'once more')") > 0,
            "a new run's log has its own bound"
        );

        let stop = Arc::new(Stop::default());
        stop.kill();
        let killed = run_as("while true do end", Chunk::Script { sha: "loop" }, 64 << 20, &stop);
        assert!(matches!(killed, Outcome::Aborted(_)));
        assert_eq!(kept(), None, "a stopped interpreter is not kept");
        assert!(matches!(run_alone("return 3"), Reply::Integer(3)));
        assert!(kept().is_some());
    }

    /// A body is kept loaded by what names it, and run only while the body is the same: a
    /// library loaded again (FUNCTION LOAD REPLACE) keeps its functions' names, and a script's
    /// SHA1 is the client's word.
    #[test]
    fn a_name_kept_loaded_runs_its_new_body() {
        let function = Chunk::Function { name: "same" };
        let script = Chunk::Script { sha: "same" };
        assert!(matches!(answer("return 1", function), Reply::Integer(1)));
        assert!(matches!(answer("return 1", function), Reply::Integer(1)));
        assert!(matches!(answer("return 2", function), Reply::Integer(2)));
        assert!(matches!(answer("return 3", script), Reply::Integer(3)));
        let raised = answer("error('here')", function);
        assert!(format!("{raised:?}").contains("user_function:1: here"), "{raised:?}");
        let raised = answer("error('here')", script);
        assert!(format!("{raised:?}").contains("user_script:1: here"), "{raised:?}");

        // Hostile: large bodies of comments, each a small function, are not kept as text.
        let loaded_bytes = || IDLE.with_borrow(|idle| idle.as_ref().map(|interpreter| interpreter.loaded_bytes));
        let large = format!("{}\nreturn 4", "-- padding\n".repeat(MAX_AT_REST / 40));
        assert!(matches!(
            answer(&large, Chunk::Script { sha: "large" }),
            Reply::Integer(4)
        ));
        assert!(loaded_bytes().is_some_and(|bytes| bytes < 100), "{:?}", loaded_bytes());
        for n in 0..20 {
            let body = format!("{}\nreturn {n}", "-- padding\n".repeat(MAX_AT_REST / 100));
            let sha = format!("many{n}");
            assert!(matches!(answer(&body, Chunk::Script { sha: &sha }), Reply::Integer(got) if got == n));
            assert!(
                loaded_bytes().is_some_and(|bytes| bytes <= MAX_AT_REST / 4),
                "{:?}",
                loaded_bytes()
            );
        }
    }

    /// A run's memory limit counts from what the interpreter holds as it starts: the garbage
    /// of the runs before it is collected once past `MAX_LEFTOVER`, so a run never gets more
    /// room than that beyond its limit.
    #[test]
    fn garbage_left_by_earlier_runs_gives_a_run_no_room_past_its_limit() {
        let alone = |source: &str| {
            run_as(
                source,
                Chunk::Script { sha: "sha" },
                8 << 20,
                &Arc::new(Stop::default()),
            )
        };
        for _ in 0..3 {
            // Five megabytes live at its end, garbage once it returns.
            let garbage = alone("local t = {} for i = 1, 5 do t[i] = string.rep('g', 1e6) .. i end return #t");
            assert!(matches!(garbage, Outcome::Reply(Reply::Integer(5))), "{:?}", kept());
            let at_rest = IDLE.with_borrow(|idle| {
                let interpreter = idle.as_ref().expect("kept");
                interpreter.lua.used_memory().saturating_sub(interpreter.at_rest)
            });
            assert!(at_rest <= MAX_LEFTOVER, "{at_rest} bytes of garbage kept");
            let kept_live = alone("local t = {} for i = 1, 10 do t[i] = string.rep('y', 1e6) .. i end return #t");
            assert!(matches!(kept_live, Outcome::Aborted(ref reply) if format!("{reply:?}").contains("memory")));
        }
    }

    /// Hostile: a script logging in a loop wrote 50 MiB from one EVAL. A line is cut at
    /// Redis's 1,024 bytes and a script's lines stop at their bound.
    #[test]
    fn a_script_logs_within_its_bounds() {
        let one_line = logged_by("redis.log(redis.LOG_WARNING, string.rep('y', 1e6), 'and more')");
        assert!(one_line < MAX_LOG_LINE + 200, "{one_line}");
        let looping = logged_by("for i = 1, 100000 do redis.log(redis.LOG_WARNING, string.rep('x', 600)) end");
        assert!(looping < MAX_LOG_BYTES + 16 * 1024, "{looping}");
        assert!(looping > MAX_LOG_BYTES / 2, "{looping}");
    }
}
