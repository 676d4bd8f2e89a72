//! lua-cjson's settings and the functions that read and change them (`cjson.encode_max_depth`,
//! `encode_sparse_array`, `encode_number_precision`, `encode_invalid_numbers`,
//! `decode_invalid_numbers`, `decode_max_depth`, `encode_keep_buffer`), with their defaults
//! as Redis builds lua-cjson and their argument errors. Each cjson table (`cjson.new()` makes
//! another) has its own; the global table's are put back before each run (lua.rs), so a
//! change lasts for the script.

use std::cell::Cell;
use std::rc::Rc;

use mlua::{Lua, MultiValue, Table, Value};

use super::super::library::{self, LibraryError, LibraryResult};

/// The deepest nesting either way whatever the settings say (they may lower it): each level
/// holds a few of mlua's references to Lua values, of which it has about 8,000 (past them it
/// panics; 10,000 levels did), and native stack, grown on the heap outside the memory limit.
pub const DEPTH_CAP: i64 = 1000;

/// What `encode_invalid_numbers` says to do with NaN and infinities.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum InvalidNumbers {
    Refuse,
    Write,
    Null,
}

#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub sparse_convert: bool,
    pub sparse_ratio: i64,
    pub sparse_safe: i64,
    pub encode_max_depth: i64,
    pub decode_max_depth: i64,
    pub precision: i64,
    pub keep_buffer: bool,
    pub encode_invalid: InvalidNumbers,
    pub decode_invalid: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            precision: 14,
            keep_buffer: true,
            encode_invalid: InvalidNumbers::Refuse,
            decode_invalid: true,
        }
    }
}

pub type Shared = Rc<Cell<Config>>;

/// Adds the setting functions of one cjson table.
pub fn install(lua: &Lua, cjson: &Table, config: &Shared) -> mlua::Result<()> {
    let setting = |name: &'static str, arguments: usize, apply: fn(&Lua, &MultiValue, &mut Config) -> LibraryResult| {
        let config = Rc::clone(config);
        library::function(lua, move |lua, args| {
            if args.len() > arguments {
                return Err(library::argument_error(arguments + 1, name, "found too many arguments"));
            }
            let mut current = config.get();
            let answer = apply(lua, &args, &mut current)?;
            config.set(current);
            Ok(answer)
        })
    };
    cjson.raw_set(
        "encode_max_depth",
        setting("encode_max_depth", 1, |lua, args, config| {
            let depth = integer(lua, args, 1, "encode_max_depth", 1, i64::from(i32::MAX))?;
            config.encode_max_depth = depth.unwrap_or(config.encode_max_depth);
            Ok(numbers(&[config.encode_max_depth]))
        })?,
    )?;
    cjson.raw_set(
        "decode_max_depth",
        setting("decode_max_depth", 1, |lua, args, config| {
            let depth = integer(lua, args, 1, "decode_max_depth", 1, i64::from(i32::MAX))?;
            config.decode_max_depth = depth.unwrap_or(config.decode_max_depth);
            Ok(numbers(&[config.decode_max_depth]))
        })?,
    )?;
    cjson.raw_set(
        "encode_number_precision",
        setting("encode_number_precision", 1, |lua, args, config| {
            let precision = integer(lua, args, 1, "encode_number_precision", 1, 14)?;
            config.precision = precision.unwrap_or(config.precision);
            Ok(numbers(&[config.precision]))
        })?,
    )?;
    cjson.raw_set(
        "encode_sparse_array",
        setting("encode_sparse_array", 3, |lua, args, config| {
            if let Some(convert) = switch(lua, args, 1, "encode_sparse_array")? {
                config.sparse_convert = convert;
            }
            let max = i64::from(i32::MAX);
            config.sparse_ratio = integer(lua, args, 2, "encode_sparse_array", 0, max)?.unwrap_or(config.sparse_ratio);
            config.sparse_safe = integer(lua, args, 3, "encode_sparse_array", 0, max)?.unwrap_or(config.sparse_safe);
            let mut answer = numbers(&[config.sparse_ratio, config.sparse_safe]);
            answer.push_front(Value::Boolean(config.sparse_convert));
            Ok(answer)
        })?,
    )?;
    cjson.raw_set(
        "encode_keep_buffer",
        setting("encode_keep_buffer", 1, |lua, args, config| {
            // Only lua-cjson's buffer reuse: nothing to change here but the answer.
            if let Some(keep) = switch(lua, args, 1, "encode_keep_buffer")? {
                config.keep_buffer = keep;
            }
            Ok(MultiValue::from_vec(vec![Value::Boolean(config.keep_buffer)]))
        })?,
    )?;
    cjson.raw_set(
        "decode_invalid_numbers",
        setting("decode_invalid_numbers", 1, |lua, args, config| {
            if let Some(decode) = switch(lua, args, 1, "decode_invalid_numbers")? {
                config.decode_invalid = decode;
            }
            Ok(MultiValue::from_vec(vec![Value::Boolean(config.decode_invalid)]))
        })?,
    )?;
    cjson.raw_set(
        "encode_invalid_numbers",
        setting("encode_invalid_numbers", 1, |lua, args, config| {
            config.encode_invalid = match args.front() {
                None | Some(Value::Nil) => config.encode_invalid,
                Some(Value::Boolean(false)) => InvalidNumbers::Refuse,
                Some(Value::Boolean(true)) => InvalidNumbers::Write,
                Some(_) => match option(lua, args, 1, "encode_invalid_numbers", &["off", "on", "null"])? {
                    0 => InvalidNumbers::Refuse,
                    1 => InvalidNumbers::Write,
                    _ => InvalidNumbers::Null,
                },
            };
            let answer = match config.encode_invalid {
                InvalidNumbers::Refuse => Value::Boolean(false),
                InvalidNumbers::Write => Value::Boolean(true),
                InvalidNumbers::Null => Value::String(lua.create_string("null")?),
            };
            Ok(MultiValue::from_vec(vec![answer]))
        })?,
    )?;
    Ok(())
}

fn numbers(values: &[i64]) -> MultiValue {
    values.iter().map(|value| Value::Number(*value as f64)).collect()
}

/// lua-cjson's `json_integer_option`: nothing when the argument is absent; out of range is
/// refused naming argument #1 whatever its position, as lua-cjson does.
fn integer(
    lua: &Lua,
    args: &MultiValue,
    position: usize,
    name: &str,
    min: i64,
    max: i64,
) -> Result<Option<i64>, LibraryError> {
    if matches!(args.get(position - 1), None | Some(Value::Nil)) {
        return Ok(None);
    }
    let value = library::number_argument(lua, args, position, name)? as i64;
    if !(min..=max).contains(&value) {
        return Err(library::argument_error(
            1,
            name,
            &format!("expected integer between {min} and {max}"),
        ));
    }
    Ok(Some(value))
}

/// lua-cjson's boolean settings: `true`/`false` or `"on"`/`"off"`; nothing when absent.
fn switch(lua: &Lua, args: &MultiValue, position: usize, name: &str) -> Result<Option<bool>, LibraryError> {
    match args.get(position - 1) {
        None | Some(Value::Nil) => Ok(None),
        Some(Value::Boolean(on)) => Ok(Some(*on)),
        Some(_) => Ok(Some(option(lua, args, position, name, &["off", "on"])? == 1)),
    }
}

/// `luaL_checkoption`: the index of the argument among `options`.
fn option(lua: &Lua, args: &MultiValue, position: usize, name: &str, options: &[&str]) -> Result<usize, LibraryError> {
    let text = library::string_argument(lua, args, position, name)?;
    options
        .iter()
        .position(|option| option.as_bytes() == text)
        .ok_or_else(|| {
            let text = String::from_utf8_lossy(&text);
            library::argument_error(position, name, &format!("invalid option '{text}'"))
        })
}

#[cfg(test)]
mod tests {
    use super::super::super::library::{raised, with_libraries};

    fn eval(lua: &mlua::Lua, chunk: &str) -> String {
        lua.load(chunk).eval::<mlua::String>().unwrap().to_string_lossy()
    }

    #[test]
    fn settings_change_what_cjson_does() {
        for (chunk, answer) in [
            ("return tostring(cjson.encode_max_depth())", "1000"),
            (
                "cjson.encode_number_precision(3) return cjson.encode({1/3, 12345})",
                "[0.333,1.23e+04]",
            ),
            (
                "cjson.encode_sparse_array(true) return cjson.encode({[20] = 1})",
                r#"{"20":1}"#,
            ),
            (
                "cjson.encode_sparse_array(false, 0) return cjson.encode({[3] = 1})",
                "[null,null,1]",
            ),
            (
                "cjson.encode_invalid_numbers(true) return cjson.encode({0/0, 1/0, -1/0})",
                "[nan,inf,-inf]",
            ),
            (
                "cjson.encode_invalid_numbers('null') return cjson.encode({0/0})",
                "[null]",
            ),
            ("cjson.encode_max_depth(2) return cjson.encode({{1}})", "[[1]]"),
            ("return tostring(cjson.encode_invalid_numbers('null'))", "null"),
            (
                "local convert, ratio, safe = cjson.encode_sparse_array('on', 3, 4) \
                 return tostring(convert) .. ' ' .. ratio .. ' ' .. safe",
                "true 3 4",
            ),
            (
                "local c = cjson.new() c.encode_max_depth(1) return cjson.encode_max_depth() .. ' ' .. c.encode_max_depth()",
                "1000 1",
            ),
        ] {
            assert_eq!(eval(&with_libraries(1 << 20), chunk), answer, "{chunk}");
        }
        for (chunk, error) in [
            (
                "cjson.encode_max_depth(2) cjson.encode({{{1}}})",
                "Cannot serialise, excessive nesting (3)",
            ),
            (
                "cjson.decode_max_depth(2) cjson.decode('[[[1]]]')",
                "Found too many nested data structures (3) at character 3",
            ),
            (
                "cjson.decode_invalid_numbers(false) cjson.decode('0x10')",
                "Expected value but found invalid number at character 1",
            ),
            (
                "cjson.decode_invalid_numbers(false) cjson.decode('+1')",
                "Expected value but found invalid token at character 1",
            ),
            (
                "cjson.encode_max_depth(0)",
                "bad argument #1 to 'encode_max_depth' (expected integer between 1 and 2147483647)",
            ),
            (
                "cjson.encode_max_depth(1, 2)",
                "bad argument #2 to 'encode_max_depth' (found too many arguments)",
            ),
            (
                "cjson.encode_invalid_numbers('bogus')",
                "bad argument #1 to 'encode_invalid_numbers' (invalid option 'bogus')",
            ),
            (
                "cjson.encode_sparse_array(true, -1)",
                "bad argument #1 to 'encode_sparse_array' (expected integer between 0 and 2147483647)",
            ),
        ] {
            assert_eq!(raised(&with_libraries(1 << 20), chunk), error, "{chunk}");
        }
        // Past 1,000 levels nothing nests, whatever the setting.
        let deep = "cjson.decode_max_depth(2^31 - 1) cjson.decode(string.rep('[', 1001))";
        assert_eq!(
            raised(&with_libraries(1 << 20), deep),
            "Found too many nested data structures (1001) at character 1001"
        );
    }
}
