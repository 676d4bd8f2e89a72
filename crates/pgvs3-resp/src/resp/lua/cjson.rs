//! Redis's `cjson` library (lua-cjson 2.1.0 as Redis embeds it): `cjson.encode`, `cjson.decode`,
//! `cjson.null`, `cjson.new` and the settings (`config.rs`), with Redis's defaults and lua-cjson's
//! error texts.
//!
//! - Encoding: a table whose keys are all positive integers is an array (holes are `null`; one
//!   whose largest index is over twice its count and over 10 is refused as excessively sparse),
//!   any other table an object, the empty table `{}`. Numbers are written as `%.14g` (NaN and
//!   infinities refused), strings with `/` escaped as lua-cjson does, `nil` and `cjson.null` as
//!   `null`. Tables nest at most 1,000 deep (a table that contains itself stops there).
//! - Decoding: `null` is `cjson.null` (a light userdata, so that it survives in tables), `\u`
//!   escapes (surrogate pairs included) become UTF-8, numbers are what C's strtod reads; 1,000
//!   levels at most.

mod config;

use std::cell::Cell;
use std::rc::Rc;

use mlua::{LightUserData, Lua, MultiValue, Table, Value};

use self::config::{Config, DEPTH_CAP, InvalidNumbers};
use super::library::{self, Bounds, LibraryError, LibraryResult};

/// The settings of a `cjson` table (`cjson.encode_max_depth(n)` and the like).
pub struct Settings(config::Shared);

impl Settings {
    /// Back to Redis's defaults.
    pub fn reset(&self) {
        self.0.set(Config::default());
    }
}

/// The `cjson` table, with settings of its own.
pub fn library(lua: &Lua, bounds: &Rc<Bounds>) -> mlua::Result<(Table, Settings)> {
    let cjson = lua.create_table()?;
    let config = Rc::new(Cell::new(Config::default()));
    let settings = Rc::clone(&config);
    let encode = move |lua: &Lua, args, bounds: &Bounds| encode_args(lua, args, bounds, settings.get());
    cjson.raw_set("encode", library::bounded_function(lua, bounds, encode)?)?;
    let settings = Rc::clone(&config);
    let decode = move |lua: &Lua, args, bounds: &Bounds| decode_args(lua, args, bounds, settings.get());
    cjson.raw_set("decode", library::bounded_function(lua, bounds, decode)?)?;
    config::install(lua, &cjson, &config)?;
    let fresh = Rc::clone(bounds);
    let new = library::function(lua, move |lua, _| {
        Ok(MultiValue::from_vec(vec![Value::Table(library(lua, &fresh)?.0)]))
    })?;
    cjson.raw_set("new", new)?;
    cjson.raw_set("null", null())?;
    cjson.raw_set("_NAME", "cjson")?;
    cjson.raw_set("_VERSION", "2.1.0")?;
    Ok((cjson, Settings(config)))
}

/// `cjson.null`: the NULL light userdata, as lua-cjson's.
fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

fn is_null(value: &Value) -> bool {
    matches!(value, Value::LightUserData(data) if data.0.is_null())
}

fn encode_args(lua: &Lua, args: MultiValue, bounds: &Bounds, config: Config) -> LibraryResult {
    let [value] = exactly_one(args, "encode")?;
    let mut out = Output {
        bytes: Vec::new(),
        bounds,
        config,
    };
    encode(&value, 0, &mut out)?;
    let out = out.bytes;
    Ok(MultiValue::from_vec(vec![Value::String(lua.create_string(out)?)]))
}

fn decode_args(lua: &Lua, args: MultiValue, bounds: &Bounds, config: Config) -> LibraryResult {
    if args.len() != 1 {
        return Err(library::argument_error(1, "decode", "expected 1 argument"));
    }
    let text = library::string_argument(lua, &args, 1, "decode")?;
    let value = Decoder {
        lua,
        bounds,
        config,
        text: &text,
        at: 0,
        depth: 0,
    }
    .document()?;
    Ok(MultiValue::from_vec(vec![value]))
}

fn exactly_one(args: MultiValue, name: &str) -> Result<[Value; 1], LibraryError> {
    <[Value; 1]>::try_from(args.into_vec()).map_err(|_| library::argument_error(1, name, "expected 1 argument"))
}

/// What `encode` wrote so far, and how much it may write.
struct Output<'a> {
    bytes: Vec<u8>,
    bounds: &'a Bounds,
    config: Config,
}

impl Output<'_> {
    fn push(&mut self, byte: u8) {
        self.bytes.push(byte);
    }

    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    fn check(&self) -> Result<(), LibraryError> {
        if self.bytes.len() > self.bounds.max_output {
            return Err(LibraryError::raise(format!(
                "Cannot serialise: the text would exceed the script's memory limit ({} bytes)",
                self.bounds.max_output
            )));
        }
        self.bounds.step()
    }
}

fn refuse(what: &Value, why: &str) -> LibraryError {
    LibraryError::raise(format!("Cannot serialise {}: {why}", lua_type_name(what)))
}

/// Lua's own name of a value's type (mlua calls a light userdata "lightuserdata").
fn lua_type_name(value: &Value) -> &'static str {
    match value {
        Value::LightUserData(_) => "userdata",
        Value::Integer(_) => "number",
        other => other.type_name(),
    }
}

fn encode(value: &Value, depth: usize, out: &mut Output<'_>) -> Result<(), LibraryError> {
    library::deeper(|| encode_level(value, depth, out))
}

fn encode_level(value: &Value, depth: usize, out: &mut Output<'_>) -> Result<(), LibraryError> {
    match value {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(_) if is_null(value) => out.extend_from_slice(b"null"),
        Value::Boolean(true) => out.extend_from_slice(b"true"),
        Value::Boolean(false) => out.extend_from_slice(b"false"),
        Value::Integer(number) => encode_number(*number as f64, value, out)?,
        Value::Number(number) => encode_number(*number, value, out)?,
        Value::String(text) => encode_string(&text.as_bytes(), out),
        Value::Table(table) => {
            let depth = depth + 1;
            if depth as i64 > out.config.encode_max_depth.min(DEPTH_CAP) {
                return Err(LibraryError::raise(format!(
                    "Cannot serialise, excessive nesting ({depth})"
                )));
            }
            match array_length(table, &out.config)? {
                Some(length) if length > 0 => {
                    out.push(b'[');
                    for i in 1..=length {
                        if i > 1 {
                            out.push(b',');
                        }
                        encode(&table.raw_get::<Value>(i)?, depth, out)?;
                    }
                    out.push(b']');
                }
                _ => {
                    out.push(b'{');
                    let mut first = true;
                    for pair in table.pairs::<Value, Value>() {
                        let (key, item) = pair?;
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        match &key {
                            Value::String(text) => encode_string(&text.as_bytes(), out),
                            Value::Integer(_) | Value::Number(_) => {
                                out.push(b'"');
                                encode(&key, depth, out)?;
                                out.push(b'"');
                            }
                            other => return Err(refuse(other, "table key must be a number or string")),
                        }
                        out.push(b':');
                        encode(&item, depth, out)?;
                    }
                    out.push(b'}');
                }
            }
        }
        other => return Err(refuse(other, "type not supported")),
    }
    out.check()
}

/// lua-cjson's `lua_array_length`: the largest index if every key is a positive integer,
/// `None` for an object; an array mostly made of holes is refused.
fn array_length(table: &Table, config: &Config) -> Result<Option<usize>, LibraryError> {
    let (mut largest, mut items) = (0.0_f64, 0_usize);
    for pair in table.pairs::<Value, Value>() {
        let (key, _) = pair?;
        let index = match key {
            Value::Integer(index) => index as f64,
            Value::Number(index) => index,
            _ => return Ok(None),
        };
        if index < 1.0 || index.floor() != index {
            return Ok(None);
        }
        largest = largest.max(index);
        items += 1;
    }
    let sparse = config.sparse_ratio > 0
        && largest > (items as f64) * config.sparse_ratio as f64
        && largest > config.sparse_safe as f64;
    if sparse {
        if config.sparse_convert {
            return Ok(None);
        }
        return Err(LibraryError::raise("Cannot serialise table: excessively sparse array"));
    }
    Ok(Some(largest as usize))
}

fn encode_string(text: &[u8], out: &mut Output<'_>) {
    out.push(b'"');
    for &byte in text {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\x08' => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\x0c' => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{byte:04x}").as_bytes()),
            _ => out.push(byte),
        }
    }
    out.push(b'"');
}

/// A number as lua-cjson writes it: `%.<precision>g`; NaN and infinities as
/// `encode_invalid_numbers` says.
fn encode_number(number: f64, value: &Value, out: &mut Output<'_>) -> Result<(), LibraryError> {
    if !number.is_finite() {
        match out.config.encode_invalid {
            InvalidNumbers::Refuse => return Err(refuse(value, "must not be NaN or Inf")),
            InvalidNumbers::Null => {
                out.extend_from_slice(b"null");
                return Ok(());
            }
            InvalidNumbers::Write if number.is_nan() => {
                out.extend_from_slice(b"nan");
                return Ok(());
            }
            InvalidNumbers::Write => {}
        }
    }
    let text = format_g(number, out.config.precision as i32);
    out.extend_from_slice(text.as_bytes());
    Ok(())
}

/// C's `%.<precision>g` (`%.14g` is lua-cjson's default, and Lua 5.1's own).
pub fn format_g(number: f64, precision: i32) -> String {
    if number.is_infinite() {
        return if number > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if number == 0.0 {
        return if number.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let scientific = format!("{:.*e}", (precision - 1) as usize, number);
    let (mantissa, exponent) = scientific.split_once('e').expect("{:e} writes an exponent");
    let exponent: i32 = exponent.parse().expect("{:e} writes an integer exponent");
    if !(-4..precision).contains(&exponent) {
        let mantissa = trim_fraction(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        let decimals = (precision - 1 - exponent) as usize;
        trim_fraction(&format!("{number:.decimals$}")).to_owned()
    }
}

fn trim_fraction(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

/// A JSON token's kind, named as lua-cjson names it in its errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    ObjectBegin,
    ObjectEnd,
    ArrayBegin,
    ArrayEnd,
    String,
    Number,
    Boolean,
    Null,
    Colon,
    Comma,
    End,
    /// A malformed token: lua-cjson names the problem where a token's name would be.
    Error(&'static str),
}

impl Token {
    fn name(self) -> &'static str {
        match self {
            Token::ObjectBegin => "T_OBJ_BEGIN",
            Token::ObjectEnd => "T_OBJ_END",
            Token::ArrayBegin => "T_ARR_BEGIN",
            Token::ArrayEnd => "T_ARR_END",
            Token::String => "T_STRING",
            Token::Number => "T_NUMBER",
            Token::Boolean => "T_BOOLEAN",
            Token::Null => "T_NULL",
            Token::Colon => "T_COLON",
            Token::Comma => "T_COMMA",
            Token::End => "T_END",
            Token::Error(problem) => problem,
        }
    }
}

/// A token read, with its value and where it starts.
struct Read {
    token: Token,
    at: usize,
    value: Value,
}

struct Decoder<'a> {
    lua: &'a Lua,
    bounds: &'a Bounds,
    config: Config,
    text: &'a [u8],
    at: usize,
    depth: usize,
}

impl Decoder<'_> {
    fn document(&mut self) -> Result<Value, LibraryError> {
        let first = self.next()?;
        let value = self.value(first)?;
        let end = self.next()?;
        if end.token != Token::End {
            return Err(expected("the end", &end));
        }
        Ok(value)
    }

    fn value(&mut self, read: Read) -> Result<Value, LibraryError> {
        self.bounds.step()?;
        match read.token {
            Token::String | Token::Number | Token::Boolean | Token::Null => Ok(read.value),
            Token::ObjectBegin => library::deeper(|| self.object(&read)),
            Token::ArrayBegin => library::deeper(|| self.array(&read)),
            _ => Err(expected("value", &read)),
        }
    }

    fn descend(&mut self, read: &Read) -> Result<(), LibraryError> {
        self.depth += 1;
        if self.depth as i64 > self.config.decode_max_depth.min(DEPTH_CAP) {
            return Err(LibraryError::raise(format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth,
                read.at + 1
            )));
        }
        Ok(())
    }

    fn object(&mut self, open: &Read) -> Result<Value, LibraryError> {
        self.container(
            open,
            Token::ObjectEnd,
            "comma or object end",
            |decoder, read, table, _| {
                if read.token != Token::String {
                    return Err(expected("object key string", &read));
                }
                let colon = decoder.next()?;
                if colon.token != Token::Colon {
                    return Err(expected("colon", &colon));
                }
                let item = decoder.next()?;
                Ok(table.raw_set(read.value, decoder.value(item)?)?)
            },
        )
    }

    fn array(&mut self, open: &Read) -> Result<Value, LibraryError> {
        self.container(
            open,
            Token::ArrayEnd,
            "comma or array end",
            |decoder, read, table, index| Ok(table.raw_set(index, decoder.value(read)?)?),
        )
    }

    /// An object or an array: members separated by commas up to `end`; `member` reads one from
    /// its first token into the table (the `index`th).
    fn container(
        &mut self,
        open: &Read,
        end: Token,
        after_member: &str,
        mut member: impl FnMut(&mut Self, Read, &Table, usize) -> Result<(), LibraryError>,
    ) -> Result<Value, LibraryError> {
        self.descend(open)?;
        let table = self.lua.create_table()?;
        let mut read = self.next()?;
        if read.token != end {
            for index in 1.. {
                member(self, read, &table, index)?;
                let after = self.next()?;
                match after.token {
                    Token::Comma => read = self.next()?,
                    token if token == end => break,
                    _ => return Err(expected(after_member, &after)),
                }
            }
        }
        self.depth -= 1;
        Ok(Value::Table(table))
    }

    /// The next token; a malformed one is an error naming what was found, as lua-cjson's.
    fn next(&mut self) -> Result<Read, LibraryError> {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.text.get(self.at) {
            self.at += 1;
        }
        let at = self.at;
        let read = |token, value| Read { token, at, value };
        // lua-cjson's text ends at its first NUL.
        let Some(&byte) = self.text.get(at).filter(|byte| **byte != 0) else {
            return Ok(read(Token::End, Value::Nil));
        };
        let single = match byte {
            b'{' => Some(Token::ObjectBegin),
            b'}' => Some(Token::ObjectEnd),
            b'[' => Some(Token::ArrayBegin),
            b']' => Some(Token::ArrayEnd),
            b':' => Some(Token::Colon),
            b',' => Some(Token::Comma),
            _ => None,
        };
        if let Some(token) = single {
            self.at += 1;
            return Ok(read(token, Value::Nil));
        }
        match byte {
            // lua-cjson reads a string's error where it is found, not where the string starts.
            b'"' => Ok(match self.string(at) {
                Ok(text) => read(Token::String, Value::String(self.lua.create_string(text)?)),
                Err((problem, at)) => Read {
                    token: Token::Error(problem),
                    at,
                    value: Value::Nil,
                },
            }),
            _ => {
                for (word, token, value) in [
                    (&b"true"[..], Token::Boolean, Value::Boolean(true)),
                    (b"false", Token::Boolean, Value::Boolean(false)),
                    (b"null", Token::Null, null()),
                ] {
                    if self.text[at..].starts_with(word) {
                        self.at += word.len();
                        return Ok(read(token, value));
                    }
                }
                // With `decode_invalid_numbers` on (Redis's default) what strtod reads is a
                // number: hex, leading zeros, a `+` sign, `inf`, `nan`; off, JSON's numbers only.
                let rest = &self.text[at..];
                let starts_number = matches!(byte, b'-' | b'0'..=b'9');
                let invalid = invalid_json_number(rest);
                if !self.config.decode_invalid && starts_number && invalid {
                    return Ok(read(Token::Error("invalid number"), Value::Nil));
                }
                if !(starts_number || self.config.decode_invalid && invalid) {
                    return Ok(read(Token::Error("invalid token"), Value::Nil));
                }
                Ok(match strtod(rest) {
                    Some((number, length)) => {
                        self.at += length;
                        read(Token::Number, Value::Number(number))
                    }
                    None => read(Token::Error("invalid number"), Value::Nil),
                })
            }
        }
    }

    fn string(&mut self, at: usize) -> Result<Vec<u8>, (&'static str, usize)> {
        let mut out = Vec::new();
        let mut i = at + 1;
        loop {
            match self.text.get(i) {
                None | Some(0) => return Err(("unexpected end of string", i)),
                Some(b'"') => break,
                Some(b'\\') => {
                    let escape = self.text.get(i + 1).copied();
                    let plain = match escape {
                        Some(b'"') => b'"',
                        Some(b'\\') => b'\\',
                        Some(b'/') => b'/',
                        Some(b'b') => b'\x08',
                        Some(b'f') => b'\x0c',
                        Some(b'n') => b'\n',
                        Some(b'r') => b'\r',
                        Some(b't') => b'\t',
                        Some(b'u') => {
                            let (character, used) =
                                unicode_escape(&self.text[i..]).ok_or(("invalid unicode escape code", i))?;
                            let mut buffer = [0; 4];
                            out.extend_from_slice(character.encode_utf8(&mut buffer).as_bytes());
                            i += used;
                            continue;
                        }
                        _ => return Err(("invalid escape code", i)),
                    };
                    out.push(plain);
                    i += 2;
                }
                Some(&byte) => {
                    out.push(byte);
                    i += 1;
                }
            }
        }
        self.at = i + 1;
        Ok(out)
    }
}

/// lua-cjson's `json_is_invalid_number`: a number JSON does not allow (a `+` sign, hex, a
/// leading zero, `inf`, `nan`).
fn invalid_json_number(text: &[u8]) -> bool {
    if text.first() == Some(&b'+') {
        return true;
    }
    let text = text.strip_prefix(b"-").unwrap_or(text);
    match text {
        [b'0', next, ..] => next.eq_ignore_ascii_case(&b'x') || next.is_ascii_digit(),
        [first, ..] if *first <= b'9' => false,
        _ => starts_with_ignoring_case(text, b"inf") || starts_with_ignoring_case(text, b"nan"),
    }
}

fn starts_with_ignoring_case(text: &[u8], prefix: &[u8]) -> bool {
    text.len() >= prefix.len() && text[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// C's `strtod` (what lua-cjson reads numbers with): the number at the start of `text` and how
/// many bytes it took. Decimal with an optional fraction and exponent, hexadecimal (`0x1.8p3`),
/// `inf`, `infinity` and `nan` (with an optional `(chars)`), each after an optional sign.
fn strtod(text: &[u8]) -> Option<(f64, usize)> {
    let (sign, start) = match text.first() {
        Some(b'-') => (-1.0, 1),
        Some(b'+') => (1.0, 1),
        _ => (1.0, 0),
    };
    let rest = &text[start..];
    if starts_with_ignoring_case(rest, b"infinity") {
        return Some((sign * f64::INFINITY, start + 8));
    }
    if starts_with_ignoring_case(rest, b"inf") {
        return Some((sign * f64::INFINITY, start + 3));
    }
    if starts_with_ignoring_case(rest, b"nan") {
        let mut end = start + 3;
        if text.get(end) == Some(&b'(') {
            let inner = run(&text[end + 1..], |byte| byte.is_ascii_alphanumeric() || byte == b'_');
            if text.get(end + 1 + inner) == Some(&b')') {
                end += inner + 2;
            }
        }
        return Some((f64::NAN, end));
    }
    let radix = if starts_with_ignoring_case(rest, b"0x") { 16 } else { 10 };
    let digits_from = if radix == 16 { start + 2 } else { start };
    let is_digit = |byte: u8| char::from(byte).is_digit(radix);
    let whole = run(&text[digits_from..], is_digit);
    let point = digits_from + whole;
    let fraction = if text.get(point) == Some(&b'.') {
        run(&text[point + 1..], is_digit)
    } else {
        0
    };
    if whole + fraction == 0 {
        // "0x" without hex digits: strtod reads the 0 alone.
        return (radix == 16).then_some((0.0, start + 1));
    }
    let mut end = point;
    if text.get(point) == Some(&b'.') {
        end += 1 + fraction;
    }
    let (power, used) = exponent(&text[end..], if radix == 16 { b'p' } else { b'e' });
    let value = if radix == 16 {
        let digit = |byte: &u8| f64::from(char::from(*byte).to_digit(16).unwrap_or(0));
        let mut value = text[digits_from..point]
            .iter()
            .fold(0.0, |value, byte| value * 16.0 + digit(byte));
        let mut scale = 1.0 / 16.0;
        for byte in text.get(point + 1..point + 1 + fraction).unwrap_or_default() {
            value += digit(byte) * scale;
            scale /= 16.0;
        }
        value * 2f64.powi(power)
    } else {
        let part = |from: usize, count: usize| {
            let digits = text.get(from..from + count).unwrap_or_default();
            std::str::from_utf8(digits).unwrap_or("")
        };
        format!("0{}.{}0e{power}", part(digits_from, whole), part(point + 1, fraction))
            .parse()
            .ok()?
    };
    Some((sign * value, end + used))
}

/// How many bytes at the start of `text` satisfy `wanted`.
fn run(text: &[u8], wanted: impl Fn(u8) -> bool) -> usize {
    text.iter().take_while(|byte| wanted(**byte)).count()
}

/// An exponent (`e` or `p`, an optional sign, digits) at the start of `text`: its value and
/// length, or nothing when it has no digits (strtod then stops before the letter).
fn exponent(text: &[u8], letter: u8) -> (i32, usize) {
    if !text.first().is_some_and(|first| first.eq_ignore_ascii_case(&letter)) {
        return (0, 0);
    }
    let signed = usize::from(matches!(text.get(1), Some(b'+' | b'-')));
    let count = run(&text[1 + signed..], |byte| byte.is_ascii_digit());
    if count == 0 {
        return (0, 0);
    }
    let digits = std::str::from_utf8(&text[1 + signed..1 + signed + count]).unwrap_or("0");
    // Past any double's range either way: the clamp keeps the arithmetic in bounds.
    let value = digits.parse::<i32>().unwrap_or(i32::MAX).min(100_000);
    (
        if text.get(1) == Some(&b'-') { -value } else { value },
        1 + signed + count,
    )
}

/// `\uXXXX`, or a surrogate pair `\uD8xx\uDCxx`, at the start of `text`: the character and how
/// many bytes it took.
fn unicode_escape(text: &[u8]) -> Option<(char, usize)> {
    let hex = |from: usize| -> Option<u32> {
        let digits = text.get(from..from + 4)?;
        u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    let first = hex(2)?;
    match first {
        0xD800..=0xDBFF => {
            if text.get(6..8)? != b"\\u" {
                return None;
            }
            let second = hex(8)?;
            if !(0xDC00..=0xDFFF).contains(&second) {
                return None;
            }
            char::from_u32(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)).map(|c| (c, 12))
        }
        0xDC00..=0xDFFF => None,
        _ => char::from_u32(first).map(|c| (c, 6)),
    }
}

fn expected(what: &str, found: &Read) -> LibraryError {
    LibraryError::raise(format!(
        "Expected {what} but found {} at character {}",
        found.token.name(),
        found.at + 1
    ))
}

#[cfg(test)]
mod tests {
    use mlua::Lua;

    fn lua() -> Lua {
        super::super::library::with_libraries(1 << 20)
    }

    /// What a chunk returns, as a string.
    fn eval(lua: &Lua, chunk: &str) -> String {
        lua.load(chunk).eval::<mlua::String>().unwrap().to_string_lossy()
    }

    /// The error a chunk raises, as the script would catch it with pcall.
    use super::super::library::raised;

    #[test]
    fn encodes_as_redis_cjson_does() {
        let lua = lua();
        for (chunk, json) in [
            ("return cjson.encode({})", "{}"),
            ("return cjson.encode({1, 2, 'three'})", r#"[1,2,"three"]"#),
            ("return cjson.encode({a = {b = true}})", r#"{"a":{"b":true}}"#),
            ("return cjson.encode({[1] = 'x', [3] = 'z'})", r#"["x",null,"z"]"#),
            ("return cjson.encode({[2] = 'two'})", r#"[null,"two"]"#),
            ("return cjson.encode({[1.5] = 'x'})", r#"{"1.5":"x"}"#),
            ("return cjson.encode(cjson.null)", "null"),
            ("return cjson.encode(nil)", "null"),
            (
                "return cjson.encode('a/b\"c\\\\\\n\\1\\127é')",
                "\"a\\/b\\\"c\\\\\\n\\u0001\\u007fé\"",
            ),
            ("return cjson.encode(0.1)", "0.1"),
            ("return cjson.encode(1/3)", "0.33333333333333"),
            ("return cjson.encode(1e15)", "1e+15"),
            ("return cjson.encode(123456789012346)", "1.2345678901235e+14"),
            ("return cjson.encode(12345678901234)", "12345678901234"),
            ("return cjson.encode(-0.00001)", "-1e-05"),
            ("return cjson.encode(false)", "false"),
        ] {
            assert_eq!(eval(&lua, chunk), json, "{chunk}");
        }
    }

    #[test]
    fn refuses_what_redis_cjson_refuses() {
        let lua = lua();
        for (chunk, error) in [
            ("cjson.encode(0/0)", "Cannot serialise number: must not be NaN or Inf"),
            (
                "cjson.encode({math.huge})",
                "Cannot serialise number: must not be NaN or Inf",
            ),
            (
                "cjson.encode(print or function() end)",
                "Cannot serialise function: type not supported",
            ),
            (
                "cjson.encode({[true] = 1})",
                "Cannot serialise boolean: table key must be a number or string",
            ),
            (
                "cjson.encode({[11] = 1})",
                "Cannot serialise table: excessively sparse array",
            ),
            (
                "local t = {} t[1] = t cjson.encode(t)",
                "Cannot serialise, excessive nesting (1001)",
            ),
            ("cjson.encode()", "bad argument #1 to 'encode' (expected 1 argument)"),
            ("cjson.decode('')", "Expected value but found T_END at character 1"),
            (
                "cjson.decode('x')",
                "Expected value but found invalid token at character 1",
            ),
            (
                "cjson.decode('[1,]')",
                "Expected value but found T_ARR_END at character 4",
            ),
            (
                "cjson.decode('{\"a\" 1}')",
                "Expected colon but found T_NUMBER at character 6",
            ),
            (
                "cjson.decode('{1:2}')",
                "Expected object key string but found T_NUMBER at character 2",
            ),
            (
                "cjson.decode('[1 2]')",
                "Expected comma or array end but found T_NUMBER at character 4",
            ),
            (
                "cjson.decode('{\"a\":1 ]')",
                "Expected comma or object end but found T_ARR_END at character 8",
            ),
            (
                "cjson.decode('1 2')",
                "Expected the end but found T_NUMBER at character 3",
            ),
            (
                "cjson.decode('\"abc')",
                "Expected value but found unexpected end of string at character 5",
            ),
            (
                "cjson.decode('\"\\\\q\"')",
                "Expected value but found invalid escape code at character 2",
            ),
            (
                "cjson.decode('\"\\\\ud800\"')",
                "Expected value but found invalid unicode escape code at character 2",
            ),
            (
                "cjson.decode('[-]')",
                "Expected value but found invalid number at character 2",
            ),
            (
                "cjson.decode('1e')",
                "Expected the end but found invalid token at character 2",
            ),
            (
                "cjson.decode('0x')",
                "Expected the end but found invalid token at character 2",
            ),
            (
                "cjson.decode(string.rep('[', 1001))",
                "Found too many nested data structures (1001) at character 1001",
            ),
            (
                "cjson.decode({})",
                "bad argument #1 to 'decode' (string expected, got table)",
            ),
        ] {
            assert_eq!(raised(&lua, chunk), error, "{chunk}");
        }
    }

    #[test]
    fn decodes_as_redis_cjson_does() {
        let lua = lua();
        let chunk = r#"
            local t = cjson.decode([[{"a":[1,2.5,-3e2,null,true],"b":{},"c":"\u00e9\ud83d\ude00\/\n","d":null}]])
            assert(t.a[1] == 1 and t.a[2] == 2.5 and t.a[3] == -300 and t.a[4] == cjson.null and t.a[5] == true)
            assert(#t.a == 5 and next(t.b) == nil and t.d == cjson.null)
            assert(t.c == "\195\169\240\159\152\128/\n")
            return cjson.encode(cjson.decode('[[[]],{"k":[{}]}]'))
        "#;
        assert_eq!(eval(&lua, chunk), r#"[[{}],{"k":[{}]}]"#);
        // 999 objects deep each way: each level holds a key as well (mlua's references run out
        // near 8,000).
        let objects = "local t = {} local at = t for i = 1, 999 do at.a = {} at = at.a end \
            return #cjson.encode(cjson.decode(cjson.encode(t)))";
        assert_eq!(eval(&lua, objects), (5 * 999 + 2 + 999).to_string());
        // Redis turns lua-cjson's decode_invalid_numbers on: strtod reads what it can.
        let numbers = "local t = cjson.decode('[01, 0x10, +1, -.5, 1., 0x1.8p1, -inf, Infinity, 1e400]') \
            return table.concat({t[1], t[2], t[3], t[4], t[5], t[6], tostring(t[7]), tostring(t[8]), tostring(t[9])}, ' ')";
        assert_eq!(eval(&lua, numbers), "1 16 1 -0.5 1 3 -inf inf inf");
        let nan = "local n = cjson.decode('[nan(1), NaN]') return tostring(n[1] ~= n[1] and n[2] ~= n[2])";
        assert_eq!(eval(&lua, nan), "true");
        let nul = "return cjson.encode(cjson.decode('[1]\\0garbage'))";
        assert_eq!(eval(&lua, nul), "[1]", "the text ends at a NUL");
        let deep = "return cjson.encode(cjson.decode(string.rep('[', 1000) .. string.rep(']', 1000)))";
        assert_eq!(
            eval(&lua, deep).len(),
            2 * 999 + 2,
            "1,000 levels decode (the innermost `[]` is `{{}}`)"
        );
    }

    #[test]
    fn a_text_longer_than_the_bound_is_refused() {
        let lua = super::super::library::with_libraries(1000);
        let error = raised(
            &lua,
            "local s = string.rep('x', 100) cjson.encode({s, s, s, s, s, s, s, s, s, s})",
        );
        assert_eq!(
            error,
            "Cannot serialise: the text would exceed the script's memory limit (1000 bytes)"
        );
    }

    #[test]
    fn formats_like_c_percent_g() {
        for (number, text) in [
            (100.0, "100"),
            (1e14, "1e+14"),
            (99999999999999.0, "99999999999999"),
            (0.0001, "0.0001"),
            (0.00012345, "0.00012345"),
            (-2.5e-300, "-2.5e-300"),
            (1.7976931348623157e308, "1.7976931348623e+308"),
        ] {
            assert_eq!(super::format_g(number, 14), text);
        }
    }
}
