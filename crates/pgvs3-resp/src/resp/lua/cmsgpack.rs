//! Redis's `cmsgpack` library (lua-cmsgpack 0.4.0 as Redis embeds it): `pack`, `unpack`,
//! `unpack_one` and `unpack_limit`, byte for byte.
//!
//! - Packing: integral numbers take the smallest integer format, others a float32 when exact and
//!   a float64 otherwise; strings the smallest str format; a table whose keys are exactly 1..n is
//!   an array (the empty table too), any other a map. Past 16 levels of tables a table is packed
//!   as nil (lua-cmsgpack's guard against tables that contain themselves); functions and other
//!   values too.
//! - Unpacking: every MessagePack type but bin and the extension types (refused as Redis
//!   refuses them, `Bad data format in input.`); uint64 is a double. Nesting is
//!   bounded at 1,000 levels (lua-cmsgpack recurses without a bound) and counts are checked
//!   against the bytes left before anything is allocated.

use mlua::{Lua, MultiValue, Table, Value};

use std::rc::Rc;

use super::library::{self, Bounds, LibraryError, LibraryResult};

/// lua-cmsgpack's LUACMSGPACK_MAX_NESTING: deeper tables are packed as nil.
const PACK_NESTING: usize = 16;
/// How deep unpacking goes before refusing the input.
const UNPACK_NESTING: usize = 1000;
/// Most values one call returns: Lua 5.1's C stack holds about 8,000.
const MAX_RESULTS: usize = 7_999;

const MISSING: &str = "Missing bytes in input.";
const BAD_FORMAT: &str = "Bad data format in input.";

/// The `cmsgpack` table.
pub fn library(lua: &Lua, bounds: &Rc<Bounds>) -> mlua::Result<Table> {
    let cmsgpack = lua.create_table()?;
    cmsgpack.raw_set("pack", library::bounded_function(lua, bounds, pack_args)?)?;
    for (name, mode) in [
        ("unpack", Mode::All),
        ("unpack_one", Mode::One),
        ("unpack_limit", Mode::Limit),
    ] {
        let unpack = move |lua: &Lua, args, bounds: &Bounds| unpack_args(lua, args, mode, bounds);
        cmsgpack.raw_set(name, library::bounded_function(lua, bounds, unpack)?)?;
    }
    cmsgpack.raw_set("_NAME", "cmsgpack")?;
    cmsgpack.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    cmsgpack.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    cmsgpack.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(cmsgpack)
}

fn pack_args(lua: &Lua, args: MultiValue, bounds: &Bounds) -> LibraryResult {
    if args.is_empty() {
        return Err(LibraryError::raise(
            "bad argument #0 to 'pack' (MessagePack pack needs input.)",
        ));
    }
    let mut out = Vec::new();
    for value in &args {
        pack(value, 0, &mut out, bounds)?;
    }
    Ok(MultiValue::from_vec(vec![Value::String(lua.create_string(out)?)]))
}

fn too_long(max_output: usize) -> LibraryError {
    LibraryError::raise(format!(
        "MessagePack pack: the result would exceed the script's memory limit ({max_output} bytes)"
    ))
}

/// Packs one value (`level` tables deep) onto `out`.
fn pack(value: &Value, level: usize, out: &mut Vec<u8>, bounds: &Bounds) -> Result<(), LibraryError> {
    match value {
        Value::Boolean(true) => out.push(0xc3),
        Value::Boolean(false) => out.push(0xc2),
        Value::Integer(number) => pack_number(*number as f64, out),
        Value::Number(number) => pack_number(*number, out),
        Value::String(text) => {
            let text = text.as_bytes();
            match text.len() {
                length @ 0..32 => out.push(0xa0 | length as u8),
                length @ 32..=0xff => out.extend_from_slice(&[0xd9, length as u8]),
                length @ 0x100..=0xffff => {
                    out.push(0xda);
                    out.extend_from_slice(&(length as u16).to_be_bytes());
                }
                length => {
                    out.push(0xdb);
                    out.extend_from_slice(&(length as u32).to_be_bytes());
                }
            }
            out.extend_from_slice(&text);
        }
        Value::Table(table) if level < PACK_NESTING => library::deeper(|| pack_table(table, level, out, bounds))?,
        _ => out.push(0xc0),
    }
    if out.len() > bounds.max_output {
        return Err(too_long(bounds.max_output));
    }
    bounds.step()
}

/// Two passes over the table, one to tell an array from a map and count, one to pack: holding
/// its pairs between them would take a Lua reference each, and a big table (the Tcl suite's
/// 100,000 keys) runs out of them.
fn pack_table(table: &Table, level: usize, out: &mut Vec<u8>, bounds: &Bounds) -> Result<(), LibraryError> {
    let (mut count, mut largest, mut array) = (0_usize, 0.0_f64, true);
    for pair in table.pairs::<Value, Value>() {
        let index = match pair?.0 {
            Value::Integer(index) => index as f64,
            Value::Number(index) => index,
            _ => f64::NAN,
        };
        if !(index >= 1.0 && index.fract() == 0.0) {
            array = false;
        }
        largest = largest.max(index);
        count += 1;
    }
    // Keys are distinct, so positive integer keys up to `count` are exactly 1..count.
    if array && largest == count as f64 {
        header(out, count, 0x90, 0xdc);
        for index in 1..=count {
            pack(&table.raw_get::<Value>(index)?, level + 1, out, bounds)?;
        }
    } else {
        header(out, count, 0x80, 0xde);
        for pair in table.pairs::<Value, Value>() {
            let (key, value) = pair?;
            pack(&key, level + 1, out, bounds)?;
            pack(&value, level + 1, out, bounds)?;
        }
    }
    Ok(())
}

/// An array or map header: the fix form up to 15, then 16- and 32-bit counts.
fn header(out: &mut Vec<u8>, count: usize, fix: u8, wide: u8) {
    match count {
        0..16 => out.push(fix | count as u8),
        16..=0xffff => {
            out.push(wide);
            out.extend_from_slice(&(count as u16).to_be_bytes());
        }
        _ => {
            out.push(wide + 1);
            out.extend_from_slice(&(count as u32).to_be_bytes());
        }
    }
}

fn pack_number(number: f64, out: &mut Vec<u8>) {
    // lua-cmsgpack's IS_INT64_EQUIVALENT, without C's undefined cast past 2^63.
    let integral = number.is_finite()
        && number.fract() == 0.0
        && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&number);
    if integral {
        pack_integer(number as i64, out);
    } else if f64::from(number as f32) == number || number.is_infinite() {
        out.push(0xca);
        out.extend_from_slice(&(number as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&number.to_be_bytes());
    }
}

fn pack_integer(number: i64, out: &mut Vec<u8>) {
    match number {
        0..=127 => out.push(number as u8),
        128..=0xff => out.extend_from_slice(&[0xcc, number as u8]),
        0x100..=0xffff => {
            out.push(0xcd);
            out.extend_from_slice(&(number as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xce);
            out.extend_from_slice(&(number as u32).to_be_bytes());
        }
        0x1_0000_0000.. => {
            out.push(0xcf);
            out.extend_from_slice(&(number as u64).to_be_bytes());
        }
        -32..=-1 => out.push(number as i8 as u8),
        -128..=-33 => out.extend_from_slice(&[0xd0, number as i8 as u8]),
        -32_768..=-129 => {
            out.push(0xd1);
            out.extend_from_slice(&(number as i16).to_be_bytes());
        }
        -2_147_483_648..=-32_769 => {
            out.push(0xd2);
            out.extend_from_slice(&(number as i32).to_be_bytes());
        }
        _ => {
            out.push(0xd3);
            out.extend_from_slice(&number.to_be_bytes());
        }
    }
}

#[derive(Clone, Copy)]
enum Mode {
    /// `unpack(s)`: every value.
    All,
    /// `unpack_one(s [, offset])`: the next offset, then one value.
    One,
    /// `unpack_limit(s, limit [, offset])`: the next offset, then up to `limit` values.
    Limit,
}

fn unpack_args(lua: &Lua, args: MultiValue, mode: Mode, bounds: &Bounds) -> LibraryResult {
    let name = match mode {
        Mode::All => "unpack",
        Mode::One => "unpack_one",
        Mode::Limit => "unpack_limit",
    };
    let input = library::string_argument(lua, &args, 1, name)?;
    // luaL_optinteger when there is a default, luaL_checkinteger when not.
    let integer = |position: usize, default: Option<i64>| -> Result<i64, LibraryError> {
        match (args.get(position - 1), default) {
            (None | Some(Value::Nil), Some(default)) => Ok(default),
            _ => Ok(library::number_argument(lua, &args, position, name)? as i64),
        }
    };
    let (limit, offset) = match mode {
        Mode::All => (0, 0),
        Mode::One => (1, integer(2, Some(0))?),
        Mode::Limit => (integer(2, None)?, integer(3, Some(0))?),
    };
    // lua-cmsgpack decodes everything when neither a limit nor an offset is given.
    let all = limit == 0 && offset == 0;
    if offset < 0 || limit < 0 {
        return Err(LibraryError::raise(format!(
            "Invalid request to unpack with offset of {offset} and limit of {}.",
            input.len()
        )));
    }
    if offset as u64 > input.len() as u64 {
        return Err(LibraryError::raise(format!(
            "Start offset {offset} greater than input length {}.",
            input.len()
        )));
    }
    let mut reader = Reader {
        lua,
        bounds,
        input: &input,
        at: offset as usize,
    };
    let mut values = Vec::new();
    while reader.at < input.len() && (all || (values.len() as i64) < limit) {
        if values.len() == MAX_RESULTS {
            return Err(LibraryError::raise("too many results to unpack"));
        }
        values.push(reader.value(0)?);
    }
    if !all {
        let next = if reader.at == input.len() { -1 } else { reader.at as i64 };
        values.insert(0, Value::Integer(next));
    }
    Ok(MultiValue::from_vec(values))
}

struct Reader<'a> {
    lua: &'a Lua,
    bounds: &'a Bounds,
    input: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], LibraryError> {
        let end = self.at.checked_add(count).filter(|end| *end <= self.input.len());
        let end = end.ok_or_else(|| LibraryError::raise(MISSING))?;
        let taken = &self.input[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], LibraryError> {
        Ok(self.take(N)?.try_into().expect("take returns N bytes"))
    }

    fn length(&mut self, width: usize) -> Result<usize, LibraryError> {
        Ok(match width {
            1 => usize::from(self.fixed::<1>()?[0]),
            2 => usize::from(u16::from_be_bytes(self.fixed()?)),
            _ => u32::from_be_bytes(self.fixed()?) as usize,
        })
    }

    fn value(&mut self, depth: usize) -> Result<Value, LibraryError> {
        self.bounds.step()?;
        let [tag] = self.fixed::<1>()?;
        let number = |number: f64| Ok(Value::Number(number));
        match tag {
            0x00..=0x7f => number(f64::from(tag)),
            0xe0..=0xff => number(f64::from(tag as i8)),
            0xcc => number(f64::from(self.fixed::<1>()?[0])),
            0xcd => number(f64::from(u16::from_be_bytes(self.fixed()?))),
            0xce => number(f64::from(u32::from_be_bytes(self.fixed()?))),
            0xcf => number(u64::from_be_bytes(self.fixed()?) as f64),
            0xd0 => number(f64::from(self.fixed::<1>()?[0] as i8)),
            0xd1 => number(f64::from(i16::from_be_bytes(self.fixed()?))),
            0xd2 => number(f64::from(i32::from_be_bytes(self.fixed()?))),
            0xd3 => number(i64::from_be_bytes(self.fixed()?) as f64),
            0xca => number(f64::from(f32::from_be_bytes(self.fixed()?))),
            0xcb => number(f64::from_be_bytes(self.fixed()?)),
            0xc0 => Ok(Value::Nil),
            0xc2 => Ok(Value::Boolean(false)),
            0xc3 => Ok(Value::Boolean(true)),
            0xa0..=0xbf => self.string(usize::from(tag & 0x1f)),
            0xd9 => {
                let length = self.length(1)?;
                self.string(length)
            }
            0xda => {
                let length = self.length(2)?;
                self.string(length)
            }
            0xdb => {
                let length = self.length(4)?;
                self.string(length)
            }
            0x90..=0x9f => library::deeper(|| self.array(usize::from(tag & 0x0f), depth)),
            0xdc => {
                let count = self.length(2)?;
                library::deeper(|| self.array(count, depth))
            }
            0xdd => {
                let count = self.length(4)?;
                library::deeper(|| self.array(count, depth))
            }
            0x80..=0x8f => library::deeper(|| self.map(usize::from(tag & 0x0f), depth)),
            0xde => {
                let count = self.length(2)?;
                library::deeper(|| self.map(count, depth))
            }
            0xdf => {
                let count = self.length(4)?;
                library::deeper(|| self.map(count, depth))
            }
            _ => Err(LibraryError::raise(BAD_FORMAT)),
        }
    }

    fn string(&mut self, length: usize) -> Result<Value, LibraryError> {
        let text = self.take(length)?;
        Ok(Value::String(self.lua.create_string(text)?))
    }

    /// A table of `items` values: each takes a byte at least, so a count the input cannot hold
    /// is refused before anything is made.
    fn table(&self, items: usize, depth: usize) -> Result<Table, LibraryError> {
        if items > self.input.len() - self.at {
            return Err(LibraryError::raise(MISSING));
        }
        if depth >= UNPACK_NESTING {
            return Err(LibraryError::raise(format!(
                "MessagePack input nested deeper than {UNPACK_NESTING} levels"
            )));
        }
        Ok(self.lua.create_table()?)
    }

    fn array(&mut self, count: usize, depth: usize) -> Result<Value, LibraryError> {
        let table = self.table(count, depth)?;
        for index in 1..=count {
            table.raw_set(index, self.value(depth + 1)?)?;
        }
        Ok(Value::Table(table))
    }

    fn map(&mut self, count: usize, depth: usize) -> Result<Value, LibraryError> {
        let table = self.table(count.saturating_mul(2), depth)?;
        for _ in 0..count {
            let key = self.value(depth + 1)?;
            let value = self.value(depth + 1)?;
            match &key {
                Value::Nil => return Err(LibraryError::Unpositioned("table index is nil".into())),
                Value::Number(number) if number.is_nan() => {
                    return Err(LibraryError::Unpositioned("table index is NaN".into()));
                }
                _ => table.raw_set(key, value)?,
            }
        }
        Ok(Value::Table(table))
    }
}

#[cfg(test)]
mod tests {
    use mlua::Lua;

    fn lua() -> Lua {
        super::super::library::with_libraries(1 << 20)
    }

    /// The bytes `cmsgpack.pack` writes for a Lua expression.
    fn packed(lua: &Lua, expression: &str) -> Vec<u8> {
        let chunk = format!("return cmsgpack.pack({expression})");
        lua.load(chunk).eval::<mlua::String>().unwrap().as_bytes().to_vec()
    }

    use super::super::library::raised;

    #[test]
    fn packs_as_redis_cmsgpack_does() {
        let lua = lua();
        for (expression, bytes) in [
            ("nil, true, false", vec![0xc0, 0xc3, 0xc2]),
            (
                "0, 127, 128, 255, 256",
                vec![0x00, 0x7f, 0xcc, 0x80, 0xcc, 0xff, 0xcd, 0x01, 0x00],
            ),
            ("65536", vec![0xce, 0x00, 0x01, 0x00, 0x00]),
            ("4294967296", vec![0xcf, 0, 0, 0, 1, 0, 0, 0, 0]),
            ("-1, -32, -33, -129", vec![0xff, 0xe0, 0xd0, 0xdf, 0xd1, 0xff, 0x7f]),
            ("-2147483648", vec![0xd2, 0x80, 0, 0, 0]),
            (
                "-2147483649",
                vec![0xd3, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff],
            ),
            ("1.5", vec![0xca, 0x3f, 0xc0, 0x00, 0x00]),
            ("0.1", vec![0xcb, 0x3f, 0xb9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a]),
            ("'abc'", vec![0xa3, b'a', b'b', b'c']),
            ("{}", vec![0x90]),
            ("{1, 'a'}", vec![0x92, 0x01, 0xa1, b'a']),
            ("{[2] = 1}", vec![0x81, 0x02, 0x01]),
            ("{k = false}", vec![0x81, 0xa1, b'k', 0xc2]),
            ("print or function() end", vec![0xc0]),
        ] {
            assert_eq!(packed(&lua, expression), bytes, "{expression}");
        }
        let text = packed(&lua, "string.rep('x', 32)");
        assert_eq!(text[..2], [0xd9, 32]);
        let text = packed(&lua, "string.rep('x', 256)");
        assert_eq!(text[..3], [0xda, 0x01, 0x00]);
        let array = packed(
            &lua,
            "(function() local t = {} for i = 1, 16 do t[i] = i end return t end)()",
        );
        assert_eq!(array[..3], [0xdc, 0x00, 0x10]);
        // Past 16 levels a table is nil: a table that holds itself packs in 16 levels.
        let itself = packed(&lua, "(function() local t = {} t[1] = t return t end)()");
        assert_eq!(itself, [vec![0x91; 16], vec![0xc0]].concat());
    }

    #[test]
    fn unpacks_what_it_packs_and_what_msgpack_writers_write() {
        let lua = lua();
        let chunk = r#"
            local a, b, c, d = cmsgpack.unpack(cmsgpack.pack({x = {1, 2, {y = "z"}}, n = -7.25}, "s", 3, false))
            assert(a.x[1] == 1 and a.x[3].y == "z" and a.n == -7.25 and b == "s" and c == 3 and d == false)
            -- str8, str16, uint64, int64, float64, map16 as JavaScript's msgpackr writes them
            local s, s16, big, neg, f, m = cmsgpack.unpack(
                "\217\3abc" .. "\218\0\2hi" .. "\207\0\0\0\1\0\0\0\0" .. "\211\255\255\255\255\255\255\255\254"
                .. "\203\63\185\153\153\153\153\153\154" .. "\222\0\1\161k\192")
            assert(s == "abc" and s16 == "hi" and big == 4294967296 and neg == -2 and f == 0.1)
            assert(next(m) == nil)
            -- 999 maps deep, each holding its key while its value is read
            local deep = cmsgpack.unpack(string.rep("\129\161a", 999) .. "\1")
            for i = 1, 998 do deep = deep.a end
            assert(deep.a == 1)
            local offset, one = cmsgpack.unpack_one(cmsgpack.pack(1, 2))
            local last, two = cmsgpack.unpack_one(cmsgpack.pack(1, 2), offset)
            local next_at, x, y = cmsgpack.unpack_limit(cmsgpack.pack(5, 6, 7), 2)
            assert(offset == 1 and one == 1 and last == -1 and two == 2 and next_at == 2 and x == 5 and y == 6)
            return "ok"
        "#;
        assert_eq!(lua.load(chunk).eval::<String>().unwrap(), "ok");
    }

    #[test]
    fn refuses_malformed_input_with_redis_errors() {
        let lua = lua();
        for (chunk, error) in [
            ("cmsgpack.unpack('\\205\\1')", "Missing bytes in input."),
            ("cmsgpack.unpack('\\193')", "Bad data format in input."),
            ("cmsgpack.unpack('\\212\\1\\1')", "Bad data format in input."),
            ("cmsgpack.unpack('\\196\\2hi')", "Bad data format in input."),
            (
                "cmsgpack.unpack('\\221\\255\\255\\255\\255')",
                "Missing bytes in input.",
            ),
            ("cmsgpack.unpack('\\129\\192\\1')", "table index is nil"),
            (
                "cmsgpack.unpack(string.rep('\\145', 1001) .. '\\192')",
                "MessagePack input nested deeper than 1000 levels",
            ),
            (
                "cmsgpack.unpack(string.rep('\\192', 8000))",
                "too many results to unpack",
            ),
            (
                "cmsgpack.unpack_one('\\1', 2)",
                "Start offset 2 greater than input length 1.",
            ),
            (
                "cmsgpack.pack()",
                "bad argument #0 to 'pack' (MessagePack pack needs input.)",
            ),
            (
                "cmsgpack.unpack()",
                "bad argument #1 to 'unpack' (string expected, got no value)",
            ),
        ] {
            assert_eq!(raised(&lua, chunk), error, "{chunk}");
        }
        let bounded = super::super::library::with_libraries(1000);
        let error = raised(&bounded, "local s = string.rep('x', 600) cmsgpack.pack({s, s})");
        assert_eq!(
            error,
            "MessagePack pack: the result would exceed the script's memory limit (1000 bytes)"
        );
    }
}
