//! Redis's `struct` library (Roberto Ierusalimschy's lua_struct 0.2, as Redis embeds it):
//! `struct.pack`, `struct.unpack` and `struct.size` of binary records, with the sizes and the
//! little-endian order of the x86-64 build Redis ships (`h` 2 bytes, `i` 4, `l` and `T` 8).
//!
//! A format is a list of options: `>` `<` (byte order), `!n` (largest alignment, default 1,
//! `!` alone 8), `x` (a zero byte), `b`/`B` `h`/`H` `l`/`L` `T` `i`/`I[n]` (signed/unsigned
//! integers, `n` bytes up to 32), `f` `d` (float, double), `c[n]` (`n` bytes of a string; `c0`
//! the whole string when packing, the length read just before when unpacking), `s` (a
//! zero-terminated string), spaces ignored.

use mlua::{Lua, MultiValue, Table, Value};

use super::library::{self, LibraryError, LibraryResult, argument_error, number_argument, string_argument};

/// lua_struct's MAXINTSIZE.
const MAX_INT_SIZE: usize = 32;
/// lua_struct's MAXALIGN on x86-64, what `!` alone sets.
const MAX_ALIGN: usize = 8;
/// Most values one `unpack` returns: Lua 5.1's C stack holds about 8,000.
const MAX_RESULTS: usize = 7_999;

/// The `struct` table.
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    table.raw_set("pack", library::function(lua, pack)?)?;
    table.raw_set("unpack", library::function(lua, unpack)?)?;
    table.raw_set("size", library::function(lua, size)?)?;
    Ok(table)
}

/// Byte order and alignment, as the format has set them so far.
struct Header {
    big_endian: bool,
    align: usize,
}

impl Default for Header {
    fn default() -> Self {
        Header {
            big_endian: false,
            align: 1,
        }
    }
}

/// A format being read, with the name of the function for its errors.
struct Format<'a> {
    text: &'a [u8],
    at: usize,
    function: &'static str,
}

impl<'a> Format<'a> {
    fn new(text: &'a [u8], function: &'static str) -> Self {
        Format { text, at: 0, function }
    }

    fn next(&mut self) -> Option<u8> {
        let option = *self.text.get(self.at)?;
        self.at += 1;
        Some(option)
    }

    /// The number after an option, or `default` when there is none.
    fn number(&mut self, default: usize) -> Result<usize, LibraryError> {
        if !self.text.get(self.at).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut number: usize = 0;
        while let Some(&digit) = self.text.get(self.at).filter(|digit| digit.is_ascii_digit()) {
            number = number
                .checked_mul(10)
                .and_then(|number| number.checked_add(usize::from(digit - b'0')))
                .filter(|number| *number <= i32::MAX as usize)
                .ok_or_else(|| LibraryError::raise("integral size overflow"))?;
            self.at += 1;
        }
        Ok(number)
    }

    /// lua_struct's `optsize`: the bytes an option takes (0 for the control options and `s`).
    fn size(&mut self, option: u8) -> Result<usize, LibraryError> {
        Ok(match option {
            b'b' | b'B' | b'x' => 1,
            b'h' | b'H' => 2,
            b'f' => 4,
            b'l' | b'L' | b'T' | b'd' => 8,
            b'c' => self.number(1)?,
            b'i' | b'I' => {
                let size = self.number(4)?;
                if size > MAX_INT_SIZE {
                    return Err(LibraryError::raise(format!(
                        "integral size {size} is larger than limit of {MAX_INT_SIZE}"
                    )));
                }
                size
            }
            _ => 0,
        })
    }

    /// The control options (`>`, `<`, `!n`, space); anything else is not an option.
    fn control(&mut self, option: u8, header: &mut Header) -> Result<(), LibraryError> {
        match option {
            b' ' => {}
            b'>' => header.big_endian = true,
            b'<' => header.big_endian = false,
            b'!' => {
                let align = self.number(MAX_ALIGN)?;
                if !align.is_power_of_two() {
                    return Err(LibraryError::raise(format!("alignment {align} is not a power of 2")));
                }
                header.align = align;
            }
            _ => {
                return Err(argument_error(
                    1,
                    self.function,
                    &format!("invalid format option '{}'", char::from(option)),
                ));
            }
        }
        Ok(())
    }
}

/// Padding before an item of `size` bytes at `position`.
fn padding(position: usize, header: &Header, option: u8, size: usize) -> usize {
    if size == 0 || option == b'c' {
        return 0;
    }
    let size = size.min(header.align);
    (size - (position & (size - 1))) & (size - 1)
}

fn pack(lua: &Lua, mut args: MultiValue) -> LibraryResult {
    let text = string_argument(lua, &args, 1, "pack")?;
    // lua_struct pushes a nil after the arguments: a missing one is "nil", not "no value".
    args.push_back(Value::Nil);
    let mut format = Format::new(&text, "pack");
    let mut header = Header::default();
    let mut out = Vec::new();
    let mut argument = 2;
    while let Some(option) = format.next() {
        let size = format.size(option)?;
        out.resize(out.len() + padding(out.len(), &header, option, size), 0);
        match option {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let number = number_argument(lua, &args, argument, "pack")?;
                argument += 1;
                // lua_struct's conversion: negative numbers through the signed type.
                let mut value = if number < 0.0 {
                    number as i64 as u64
                } else {
                    number as u64
                };
                let mut bytes = vec![0; size];
                for byte in bytes.iter_mut() {
                    *byte = value as u8;
                    value = value.checked_shr(8).unwrap_or(0);
                }
                if header.big_endian {
                    bytes.reverse();
                }
                out.extend_from_slice(&bytes);
            }
            b'x' => out.push(0),
            b'f' | b'd' => {
                let number = number_argument(lua, &args, argument, "pack")?;
                argument += 1;
                let bytes = match (option, header.big_endian) {
                    (b'f', true) => (number as f32).to_be_bytes().to_vec(),
                    (b'f', false) => (number as f32).to_le_bytes().to_vec(),
                    (_, true) => number.to_be_bytes().to_vec(),
                    (_, false) => number.to_le_bytes().to_vec(),
                };
                out.extend_from_slice(&bytes);
            }
            b'c' | b's' => {
                let string = string_argument(lua, &args, argument, "pack")?;
                argument += 1;
                let size = if size == 0 { string.len() } else { size };
                if string.len() < size {
                    // lua_struct names the argument after this one.
                    return Err(argument_error(argument, "pack", "string too short"));
                }
                out.extend_from_slice(&string[..size]);
                if option == b's' {
                    out.push(0);
                }
            }
            _ => format.control(option, &mut header)?,
        }
    }
    Ok(MultiValue::from_vec(vec![Value::String(lua.create_string(out)?)]))
}

fn unpack(lua: &Lua, args: MultiValue) -> LibraryResult {
    let text = string_argument(lua, &args, 1, "unpack")?;
    let data = string_argument(lua, &args, 2, "unpack")?;
    let start = match args.get(2) {
        None | Some(Value::Nil) => 1.0,
        Some(_) => number_argument(lua, &args, 3, "unpack")?,
    };
    if start < 1.0 {
        return Err(argument_error(3, "unpack", "offset must be 1 or greater"));
    }
    let mut position = start as usize - 1;
    let mut format = Format::new(&text, "unpack");
    let mut header = Header::default();
    let mut values: Vec<Value> = Vec::new();
    let too_short = || argument_error(2, "unpack", "data string too short");
    while let Some(option) = format.next() {
        let mut size = format.size(option)?;
        position += padding(position, &header, option, size);
        if size > data.len() || position > data.len() - size {
            return Err(too_short());
        }
        if values.len() >= MAX_RESULTS {
            return Err(LibraryError::raise("too many results"));
        }
        let field = &data[position..position + size];
        match option {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let signed = option.is_ascii_lowercase();
                values.push(Value::Number(integer(field, header.big_endian, signed)));
            }
            b'x' => {}
            b'f' => {
                let bytes: [u8; 4] = field.try_into().expect("f is 4 bytes");
                let number = if header.big_endian {
                    f32::from_be_bytes(bytes)
                } else {
                    f32::from_le_bytes(bytes)
                };
                values.push(Value::Number(f64::from(number)));
            }
            b'd' => {
                let bytes: [u8; 8] = field.try_into().expect("d is 8 bytes");
                let number = if header.big_endian {
                    f64::from_be_bytes(bytes)
                } else {
                    f64::from_le_bytes(bytes)
                };
                values.push(Value::Number(number));
            }
            b'c' => {
                if size == 0 {
                    let previous = match values.pop() {
                        Some(Value::Number(number)) => number,
                        Some(Value::Integer(number)) => number as f64,
                        _ => return Err(LibraryError::raise("format 'c0' needs a previous size")),
                    };
                    size = previous as usize;
                    if size > data.len() || position > data.len() - size {
                        return Err(too_short());
                    }
                }
                values.push(Value::String(lua.create_string(&data[position..position + size])?));
            }
            b's' => {
                let Some(length) = data[position..].iter().position(|byte| *byte == 0) else {
                    return Err(LibraryError::raise("unfinished string in data"));
                };
                size = length + 1;
                values.push(Value::String(lua.create_string(&data[position..position + length])?));
            }
            _ => format.control(option, &mut header)?,
        }
        position += size;
    }
    values.push(Value::Number((position + 1) as f64));
    Ok(MultiValue::from_vec(values))
}

/// An integer field as lua_struct reads it: the last 8 bytes count, and a signed one is
/// sign-extended from its top bit.
fn integer(field: &[u8], big_endian: bool, signed: bool) -> f64 {
    let mut bytes = field.to_vec();
    if !big_endian {
        bytes.reverse();
    }
    let value = bytes.iter().fold(0_u64, |value, byte| (value << 8) | u64::from(*byte));
    if !signed {
        return value as f64;
    }
    let mask = u64::MAX
        .checked_shl((field.len() * 8).saturating_sub(1) as u32)
        .unwrap_or(0);
    let value = if value & mask != 0 { value | mask } else { value };
    value as i64 as f64
}

fn size(lua: &Lua, args: MultiValue) -> LibraryResult {
    let text = string_argument(lua, &args, 1, "size")?;
    let mut format = Format::new(&text, "size");
    let mut header = Header::default();
    let mut position = 0_usize;
    while let Some(option) = format.next() {
        let size = format.size(option)?;
        position += padding(position, &header, option, size);
        if option == b's' {
            return Err(argument_error(1, "size", "option 's' has no fixed size"));
        }
        if option == b'c' && size == 0 {
            return Err(argument_error(1, "size", "option 'c0' has no fixed size"));
        }
        if !option.is_ascii_alphanumeric() {
            format.control(option, &mut header)?;
        }
        position += size;
    }
    Ok(MultiValue::from_vec(vec![Value::Number(position as f64)]))
}

#[cfg(test)]
mod tests {
    #[test]
    fn packs_and_unpacks_as_lua_struct_does() {
        let lua = super::super::library::with_libraries(1 << 20);
        let chunk = r#"
            assert(struct.pack(">I2", 258) == "\1\2" and struct.pack("<I2", 258) == "\2\1")
            assert(struct.pack("i", -2) == "\254\255\255\255" and struct.pack(">b", -1) == "\255")
            assert(struct.pack("!4 b i", 1, 2) == "\1\0\0\0\2\0\0\0" and struct.size("!4 b i") == 8)
            assert(struct.pack("b i", 1, 2) == "\1\2\0\0\0" and struct.size("bhilTfd") == 35)
            assert(struct.pack("c3", "abcdef") == "abc" and struct.pack("c0s", "ab", "cd") == "abcd\0")
            assert(struct.pack(">d", 1.5) == "\63\248\0\0\0\0\0\0" and struct.pack("<f", 1.5) == "\0\0\192\63")
            local a, b, c, d, next_at = struct.unpack(">h I3 s d", "\255\254\0\1\0hi\0\63\248\0\0\0\0\0\0")
            assert(a == -2 and b == 256 and c == "hi" and d == 1.5 and next_at == 17)
            local name, after = struct.unpack("B c0", "\3abcz")
            assert(name == "abc" and after == 5)
            local x, at = struct.unpack("b", "\1\2\3", 3)
            assert(x == 3 and at == 4)
            assert(struct.unpack("<i8", struct.pack("<i8", -5)) == -5)
            return "ok"
        "#;
        assert_eq!(lua.load(chunk).eval::<String>().unwrap(), "ok");
    }

    #[test]
    fn refuses_what_lua_struct_refuses() {
        let lua = super::super::library::with_libraries(1 << 20);
        for (chunk, error) in [
            (
                "struct.pack('q', 1)",
                "bad argument #1 to 'pack' (invalid format option 'q')",
            ),
            ("struct.pack('i33', 1)", "integral size 33 is larger than limit of 32"),
            ("struct.pack('!3 i', 1)", "alignment 3 is not a power of 2"),
            ("struct.pack('i99999999999', 1)", "integral size overflow"),
            (
                "struct.pack('i')",
                "bad argument #2 to 'pack' (number expected, got nil)",
            ),
            (
                "struct.pack('c5', 'abc')",
                "bad argument #3 to 'pack' (string too short)",
            ),
            (
                "struct.unpack('i', 'abc')",
                "bad argument #2 to 'unpack' (data string too short)",
            ),
            ("struct.unpack('s', 'abc')", "unfinished string in data"),
            ("struct.unpack('c0', 'abc')", "format 'c0' needs a previous size"),
            (
                "struct.unpack('b', 'a', 0)",
                "bad argument #3 to 'unpack' (offset must be 1 or greater)",
            ),
            (
                "struct.size('s')",
                "bad argument #1 to 'size' (option 's' has no fixed size)",
            ),
        ] {
            assert_eq!(super::super::library::raised(&lua, chunk), error, "{chunk}");
        }
    }
}
