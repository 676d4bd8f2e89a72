//! Redis's `cjson` library (lua-cjson 2.1.0 as Redis embeds it): `cjson.encode`, `cjson.decode`
//! and `cjson.null`, with its defaults and its error texts.
//!
//! - Encoding: a table whose keys are all positive integers is an array (holes are `null`; one
//!   whose largest index is over twice its count and over 10 is refused as excessively sparse),
//!   any other table an object, the empty table `{}`. Numbers are written as `%.14g` (NaN and
//!   infinities refused), strings with `/` escaped as lua-cjson does, `nil` and `cjson.null` as
//!   `null`. Tables nest at most 1,000 deep (a table that contains itself stops there).
//! - Decoding: `null` is `cjson.null` (a light userdata, so that it survives in tables), `\u`
//!   escapes (surrogate pairs included) become UTF-8, numbers doubles; 1,000 levels at most.

use mlua::{LightUserData, Lua, MultiValue, Table, Value};

use super::{LibraryError, LibraryResult};

/// lua-cjson's `encode_max_depth` and `decode_max_depth` defaults.
const MAX_DEPTH: usize = 1000;

/// The `cjson` table.
/// `max_output` bounds what `encode` writes: tables shared many times over could make it
/// unbounded (the script's memory limit, which it is, would refuse the string anyway).
pub fn library(lua: &Lua, max_output: usize) -> mlua::Result<Table> {
    let cjson = lua.create_table()?;
    cjson.raw_set(
        "encode",
        super::function(lua, move |lua, args| encode_args(lua, args, max_output))?,
    )?;
    cjson.raw_set("decode", super::function(lua, decode_args)?)?;
    cjson.raw_set("null", null())?;
    cjson.raw_set("_NAME", "cjson")?;
    cjson.raw_set("_VERSION", "2.1.0")?;
    Ok(cjson)
}

/// `cjson.null`: the NULL light userdata, as lua-cjson's.
fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

fn is_null(value: &Value) -> bool {
    matches!(value, Value::LightUserData(data) if data.0.is_null())
}

fn encode_args(lua: &Lua, args: MultiValue, max_output: usize) -> LibraryResult {
    let [value] = exactly_one(args, "encode")?;
    let mut out = Output {
        bytes: Vec::new(),
        max: max_output,
    };
    encode(&value, 0, &mut out)?;
    let out = out.bytes;
    Ok(MultiValue::from_vec(vec![Value::String(lua.create_string(out)?)]))
}

fn decode_args(lua: &Lua, args: MultiValue) -> LibraryResult {
    if args.len() != 1 {
        return Err(super::argument_error(1, "decode", "expected 1 argument"));
    }
    let text = super::string_argument(lua, &args, 1, "decode")?;
    let value = Decoder {
        lua,
        text: &text,
        at: 0,
        depth: 0,
    }
    .document()?;
    Ok(MultiValue::from_vec(vec![value]))
}

fn exactly_one(args: MultiValue, name: &str) -> Result<[Value; 1], LibraryError> {
    <[Value; 1]>::try_from(args.into_vec()).map_err(|_| super::argument_error(1, name, "expected 1 argument"))
}

/// What `encode` wrote so far, and how much it may write.
struct Output {
    bytes: Vec<u8>,
    max: usize,
}

impl Output {
    fn push(&mut self, byte: u8) {
        self.bytes.push(byte);
    }

    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    fn check(&self) -> Result<(), LibraryError> {
        if self.bytes.len() > self.max {
            return Err(LibraryError::raise(format!(
                "Cannot serialise: the text would exceed the script's memory limit ({} bytes)",
                self.max
            )));
        }
        Ok(())
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

fn encode(value: &Value, depth: usize, out: &mut Output) -> Result<(), LibraryError> {
    super::deeper(|| encode_level(value, depth, out))
}

fn encode_level(value: &Value, depth: usize, out: &mut Output) -> Result<(), LibraryError> {
    match value {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(_) if is_null(value) => out.extend_from_slice(b"null"),
        Value::Boolean(true) => out.extend_from_slice(b"true"),
        Value::Boolean(false) => out.extend_from_slice(b"false"),
        Value::Integer(number) => out.extend_from_slice(format_g14(*number as f64).as_bytes()),
        Value::Number(number) => {
            if !number.is_finite() {
                return Err(refuse(value, "must not be NaN or Inf"));
            }
            out.extend_from_slice(format_g14(*number).as_bytes());
        }
        Value::String(text) => encode_string(&text.as_bytes(), out),
        Value::Table(table) => {
            let depth = depth + 1;
            if depth > MAX_DEPTH {
                return Err(LibraryError::raise(format!(
                    "Cannot serialise, excessive nesting ({depth})"
                )));
            }
            match array_length(table)? {
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
fn array_length(table: &Table) -> Result<Option<usize>, LibraryError> {
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
    if largest > items as f64 * 2.0 && largest > 10.0 {
        return Err(LibraryError::raise("Cannot serialise table: excessively sparse array"));
    }
    Ok(Some(largest as usize))
}

fn encode_string(text: &[u8], out: &mut Output) {
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

/// C's `%.14g`, lua-cjson's number format (and Lua 5.1's own).
pub fn format_g14(number: f64) -> String {
    const PRECISION: i32 = 14;
    if number == 0.0 {
        return if number.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let scientific = format!("{:.*e}", (PRECISION - 1) as usize, number);
    let (mantissa, exponent) = scientific.split_once('e').expect("{:e} writes an exponent");
    let exponent: i32 = exponent.parse().expect("{:e} writes an integer exponent");
    if !(-4..PRECISION).contains(&exponent) {
        let mantissa = trim_fraction(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        let decimals = (PRECISION - 1 - exponent) as usize;
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
        match read.token {
            Token::String | Token::Number | Token::Boolean | Token::Null => Ok(read.value),
            Token::ObjectBegin => super::deeper(|| self.object(&read)),
            Token::ArrayBegin => super::deeper(|| self.array(&read)),
            _ => Err(expected("value", &read)),
        }
    }

    fn descend(&mut self, read: &Read) -> Result<(), LibraryError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
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
        let Some(&byte) = self.text.get(at) else {
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
            b'"' => Ok(match self.string(at) {
                Ok(text) => read(Token::String, Value::String(self.lua.create_string(text)?)),
                Err(problem) => read(Token::Error(problem), Value::Nil),
            }),
            b'-' | b'0'..=b'9' => Ok(match self.number(at) {
                Some(number) => read(Token::Number, Value::Number(number)),
                None => read(Token::Error("invalid number"), Value::Nil),
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
                Ok(read(Token::Error("invalid token"), Value::Nil))
            }
        }
    }

    /// A number as strtod reads it; leading zeros and hexadecimal are refused, as lua-cjson does.
    fn number(&mut self, at: usize) -> Option<f64> {
        let text = self.text;
        let digits = |mut i: usize| {
            while text.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            i
        };
        let mut end = at + usize::from(text[at] == b'-');
        let integer_start = end;
        end = digits(end);
        if end == integer_start {
            return None;
        }
        if text[integer_start] == b'0' && end > integer_start + 1
            || text.get(end).is_some_and(|b| *b == b'x' || *b == b'X')
        {
            return None;
        }
        if text.get(end) == Some(&b'.') {
            end = digits(end + 1);
        }
        if let Some(b'e' | b'E') = text.get(end) {
            let mut exponent = end + 1;
            if let Some(b'+' | b'-') = text.get(exponent) {
                exponent += 1;
            }
            let exponent_end = digits(exponent);
            if exponent_end > exponent {
                end = exponent_end;
            }
        }
        let number = std::str::from_utf8(&text[at..end])
            .ok()
            .and_then(|number| number.trim_end_matches('.').parse::<f64>().ok())?;
        self.at = end;
        Some(number)
    }

    fn string(&mut self, at: usize) -> Result<Vec<u8>, &'static str> {
        let mut out = Vec::new();
        let mut i = at + 1;
        loop {
            match self.text.get(i) {
                None | Some(0) => return Err("unexpected end of string"),
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
                                unicode_escape(&self.text[i..]).ok_or("invalid unicode escape code")?;
                            let mut buffer = [0; 4];
                            out.extend_from_slice(character.encode_utf8(&mut buffer).as_bytes());
                            i += used;
                            continue;
                        }
                        _ => return Err("invalid escape code"),
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
        super::super::with_libraries(1 << 20)
    }

    /// What a chunk returns, as a string.
    fn eval(lua: &Lua, chunk: &str) -> String {
        lua.load(chunk).eval::<mlua::String>().unwrap().to_string_lossy()
    }

    /// The error a chunk raises, as the script would catch it with pcall.
    fn raised(lua: &Lua, chunk: &str) -> String {
        eval(
            lua,
            &format!("local ok, err = pcall(function() {chunk} end) assert(not ok) return err"),
        )
    }

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
                "Expected value but found unexpected end of string at character 1",
            ),
            (
                "cjson.decode('\"\\\\q\"')",
                "Expected value but found invalid escape code at character 1",
            ),
            (
                "cjson.decode('\"\\\\ud800\"')",
                "Expected value but found invalid unicode escape code at character 1",
            ),
            (
                "cjson.decode('[01]')",
                "Expected value but found invalid number at character 2",
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
        let deep = "return cjson.encode(cjson.decode(string.rep('[', 1000) .. string.rep(']', 1000)))";
        assert_eq!(
            eval(&lua, deep).len(),
            2 * 999 + 2,
            "1,000 levels decode (the innermost `[]` is `{{}}`)"
        );
    }

    #[test]
    fn a_text_longer_than_the_bound_is_refused() {
        let lua = super::super::with_libraries(1000);
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
            assert_eq!(super::format_g14(number), text);
        }
    }
}
