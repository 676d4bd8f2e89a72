//! What Redis's C libraries share, written here for their Rust twins (`cjson`, `cmsgpack`,
//! `bit`, `struct`): their installation as globals, their functions' argument checks and error
//! texts as the Lua C API words them, how their errors reach the script, and the stack their
//! recursion runs on.

use std::cell::Cell;
use std::rc::Rc;

use mlua::{Lua, MultiValue, Value};
#[cfg(test)]
use mlua::{LuaOptions, StdLib};

/// What a script may change of the libraries (through their functions, their tables being
/// read-only): put back before each run of an interpreter.
pub struct Settings {
    cjson: super::cjson::Settings,
}

impl Settings {
    pub fn reset(&self) {
        self.cjson.reset();
    }
}

/// Redis's libraries as globals.
pub fn install(lua: &Lua, bounds: &Rc<Bounds>) -> mlua::Result<Settings> {
    let globals = lua.globals();
    let (cjson, cjson_settings) = super::cjson::library(lua, bounds)?;
    globals.raw_set("cjson", cjson)?;
    globals.raw_set("cmsgpack", super::cmsgpack::library(lua, bounds)?)?;
    globals.raw_set("bit", super::bit::library(lua)?)?;
    globals.raw_set("struct", super::lua_struct::library(lua)?)?;
    super::pattern::install(lua, &globals.raw_get("string")?, bounds)?;
    Ok(Settings { cjson: cjson_settings })
}

/// What bounds one call's native work. The bytes an encoder writes: tables shared many times
/// over could make them unbounded (the script's memory limit would refuse the string anyway).
/// And its time: the interpreter's hook runs between Lua instructions only, and one call may
/// go through a memory limit's worth of values (a table shared 10 times on each of 10 levels took
/// 11 s to reach 64 MiB of JSON in a debug build), so every 4,096 values it looks at whether
/// the script must stop (SCRIPT KILL, its time limit).
pub struct Bounds {
    pub max_output: usize,
    stop: Box<dyn Fn() -> Option<String>>,
    steps: Cell<u64>,
}

impl Bounds {
    pub fn new(max_output: usize, stop: impl Fn() -> Option<String> + 'static) -> Rc<Self> {
        Rc::new(Bounds {
            max_output,
            stop: Box::new(stop),
            steps: Cell::new(0),
        })
    }

    /// One value more; an error once the script must stop (the run then ends as stopped).
    pub fn step(&self) -> Result<(), LibraryError> {
        self.advance(1)
    }

    /// `work` steps more (a step is about the work of one value, or of 64 bytes compared).
    pub fn advance(&self, work: usize) -> Result<(), LibraryError> {
        let before = self.steps.get();
        let after = before.saturating_add(work as u64);
        self.steps.set(after);
        if before / 4096 != after / 4096
            && let Some(why) = (self.stop)()
        {
            return Err(LibraryError::Raise(why));
        }
        Ok(())
    }
}

/// Runs one level of a library's recursion (nested tables, up to 1,000 levels as Redis allows):
/// a level takes a few hundred bytes of stack in a debug build, more than a script thread's
/// 2 MiB hold at that depth, so the stack is extended on the heap when it runs low.
pub fn deeper<R>(level: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(64 * 1024, 1024 * 1024, level)
}

/// An interpreter with the libraries alone, for their tests; a panic in a library is not caught
/// by `pcall` there but fails the test.
#[cfg(test)]
pub fn with_libraries(max_output: usize) -> Lua {
    let options = LuaOptions::new().catch_rust_panics(false);
    let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, options).unwrap();
    install(&lua, &Bounds::new(max_output, || None)).unwrap();
    lua
}

/// The error a library function raises in a one-line chunk, as a script calling it from its
/// line 1 catches it with `pcall`, without the `user_script:1: ` that the position adds.
#[cfg(test)]
pub fn raised(lua: &Lua, chunk: &str) -> String {
    let chunk = format!("local ok, err = pcall(function() {chunk} end) assert(not ok) return tostring(err)");
    let raised: String = lua.load(chunk).set_name("@user_script").eval().unwrap();
    let text = raised
        .split_once(LIBRARY_RAISED)
        .map_or(raised.as_str(), |(_, text)| text);
    let text = text.lines().next().unwrap_or_default();
    // The marker's line field, then the message.
    let text = text.split_once(':').map_or(text, |(_line, text)| text);
    text.strip_prefix("user_script:1: ").unwrap_or(text).to_owned()
}

/// How a library function fails.
pub enum LibraryError {
    /// An error the script sees, as the C library words it (`luaL_error`: after the caller's
    /// position).
    Raise(String),
    /// An error the interpreter raises inside the C function (`table index is nil`): no position.
    Unpositioned(String),
    /// The interpreter's own failure (out of memory above all).
    Lua(mlua::Error),
}

impl LibraryError {
    pub fn raise(text: impl Into<String>) -> Self {
        LibraryError::Raise(text.into())
    }
}

impl From<mlua::Error> for LibraryError {
    fn from(err: mlua::Error) -> Self {
        LibraryError::Lua(err)
    }
}

pub type LibraryResult = Result<MultiValue, LibraryError>;

/// `bad argument #<position> to '<function>' (<message>)`, as `luaL_argerror` words it.
pub fn argument_error(position: usize, function: &str, message: &str) -> LibraryError {
    LibraryError::raise(format!("bad argument #{position} to '{function}' ({message})"))
}

/// A library function's argument `position` (from 1) as `luaL_checklstring` takes it: a
/// string, or a number as Lua writes it.
pub fn string_argument(lua: &Lua, args: &MultiValue, position: usize, function: &str) -> Result<Vec<u8>, LibraryError> {
    let value = args.get(position - 1).cloned();
    let type_name = value.as_ref().map_or("no value", Value::type_name);
    match value {
        Some(Value::String(text)) => Ok(text.as_bytes().to_vec()),
        Some(number @ (Value::Integer(_) | Value::Number(_))) => Ok(lua
            .coerce_string(number)?
            .map(|text| text.as_bytes().to_vec())
            .unwrap_or_default()),
        _ => Err(argument_error(
            position,
            function,
            &format!("string expected, got {type_name}"),
        )),
    }
}

/// A library function's argument `position` (from 1) as `luaL_checknumber` takes it: a number,
/// or a string that reads as one.
pub fn number_argument(lua: &Lua, args: &MultiValue, position: usize, function: &str) -> Result<f64, LibraryError> {
    let value = args.get(position - 1).cloned().unwrap_or(Value::Nil);
    let type_name = if args.len() < position {
        "no value"
    } else {
        value.type_name()
    };
    lua.coerce_number(value)?
        .ok_or_else(|| argument_error(position, function, &format!("number expected, got {type_name}")))
}

/// A library function from its native part. Its error is raised as `redis.call`'s are, marked
/// with [`LIBRARY_RAISED`] and the caller's line (mlua raises a Rust function's error as a
/// userdata carrying a traceback), and the prelude hands the script the string Redis's C
/// libraries raise: the message after the position of the caller, as `luaL_error` writes it.
pub fn function(
    lua: &Lua,
    native: impl Fn(&Lua, MultiValue) -> LibraryResult + 'static,
) -> mlua::Result<mlua::Function> {
    lua.create_function(move |lua, args: MultiValue| {
        let (text, positioned) = match native(lua, args) {
            Ok(values) => return Ok(values),
            Err(LibraryError::Raise(text)) => (text, true),
            Err(LibraryError::Unpositioned(text)) => (text, false),
            // Lua's own text for it, which the prelude turns into the memory limit's abort.
            Err(LibraryError::Lua(mlua::Error::MemoryError(_))) => ("not enough memory".to_owned(), false),
            Err(LibraryError::Lua(err)) => return Err(err),
        };
        // Level 1 is the caller: a line of the script, or nothing for a C function (pcall).
        let caller = lua
            .inspect_stack(1, |frame| {
                Some((frame.source().short_src?.into_owned(), frame.current_line()?))
            })
            .flatten();
        let (line, position) = match caller {
            Some((source, line)) if positioned => (line.to_string(), format!("{source}:{line}: ")),
            Some((_, line)) => (line.to_string(), String::new()),
            None => (String::new(), String::new()),
        };
        Err(mlua::Error::runtime(format!("{LIBRARY_RAISED}{line}:{position}{text}")))
    })
}

/// A library function whose native part needs the call's [`Bounds`].
pub fn bounded_function(
    lua: &Lua,
    bounds: &Rc<Bounds>,
    native: impl Fn(&Lua, MultiValue, &Bounds) -> LibraryResult + 'static,
) -> mlua::Result<mlua::Function> {
    let bounds = Rc::clone(bounds);
    function(lua, move |lua, args| native(lua, args, &bounds))
}

/// Marks an error a library function raises (the prelude's pattern spells it `\2pgvs3:`).
const LIBRARY_RAISED: &str = "\u{2}pgvs3:";

#[cfg(test)]
mod tests {
    use mlua::{Lua, LuaOptions, StdLib, Value};

    /// Bytes from a fixed-seed generator, drawn mostly from what the decoders look at.
    struct Bytes(u64);

    impl Bytes {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }

        fn string(&mut self, alphabet: &[u8]) -> Vec<u8> {
            let length = self.next() % 48;
            (0..length)
                .map(|_| match self.next() % 4 {
                    0 => self.next() as u8,
                    _ => alphabet[(self.next() as usize) % alphabet.len()],
                })
                .collect()
        }
    }

    /// Whatever the input, a decoder answers values or raises a Lua error: it never panics
    /// (a panic would cross into the interpreter and abort the script's thread).
    #[test]
    fn decoders_survive_arbitrary_input() {
        let lua = super::with_libraries(1 << 20);
        let json = b"{}[]:,\"\\u0123456789abcdefxXpPeE.+-truefalsenullinfnan \t\n\0";
        let msgpack = b"\x00\x7f\x80\x8f\x90\x9f\xa0\xbf\xc0\xc2\xc3\xca\xcb\xcc\xcd\xce\xcf\xd0\xd3\xd9\xda\xdb\xdc\xdd\xde\xdf\xff";
        let format = b"<>!x bBhHlLTiIfdcs0123456789 ";
        let attempt: mlua::Function = lua
            .load(
                "local json, msgpack, format, data = ... \
                 pcall(cjson.decode, json) pcall(cmsgpack.unpack, msgpack) \
                 pcall(cmsgpack.unpack_limit, msgpack, 3, 1) pcall(struct.unpack, format, data) \
                 pcall(struct.pack, format, 1, 'ab', 2.5) pcall(struct.size, format) return true",
            )
            .into_function()
            .unwrap();
        let mut bytes = Bytes(7);
        for _ in 0..20_000 {
            let inputs: Vec<Value> = [json.as_slice(), msgpack, format, msgpack]
                .iter()
                .map(|alphabet| Value::String(lua.create_string(bytes.string(alphabet)).unwrap()))
                .collect();
            let done: bool = attempt.call(mlua::MultiValue::from_vec(inputs)).unwrap();
            assert!(done);
        }
    }

    /// A long encode or decode looks at whether the script must stop, which the interpreter's
    /// hook cannot do in the middle of a native call.
    #[test]
    fn long_native_work_stops_when_the_script_must() {
        let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, LuaOptions::new()).unwrap();
        super::install(&lua, &super::Bounds::new(1 << 30, || Some("ERR stop now".into()))).unwrap();
        let wide = "local t = {} for i = 1, 5000 do t[i] = i end";
        for call in [
            "cjson.encode(t)",
            "cmsgpack.pack(t)",
            "cjson.decode(cjson_text)",
            "cmsgpack.unpack(msgpack_text)",
        ] {
            let chunk = format!(
                "local cjson_text, msgpack_text = ... {wide} local ok, err = pcall(function() return {call} end) \
                 return tostring(err)"
            );
            let json = format!("[{}]", vec!["1"; 5000].join(","));
            let msgpack = [vec![0xdc, 0x13, 0x88], vec![0x01; 5000]].concat();
            let raised: String = lua
                .load(chunk)
                .set_name("@user_script")
                .call((lua.create_string(&json).unwrap(), lua.create_string(&msgpack).unwrap()))
                .unwrap();
            assert!(raised.contains("user_script:1: ERR stop now"), "{call}: {raised}");
        }
        // Below 4,096 values nothing looks.
        let small: String = lua.load("return cjson.encode({1, 2, 3})").eval().unwrap();
        assert_eq!(small, "[1,2,3]");
    }

    #[test]
    fn the_libraries_are_the_globals_redis_has() {
        let lua: Lua = super::with_libraries(1 << 20);
        let names: String = lua
            .load("return table.concat({type(cjson), type(cmsgpack), type(bit), type(struct), type(cjson.null)}, ' ')")
            .eval()
            .unwrap();
        assert_eq!(names, "table table table table userdata");
    }
}
