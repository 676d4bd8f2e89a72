//! Redis's `bit` library (LuaBitOp 1.0.2): 32-bit operations on Lua numbers. Arguments are
//! reduced to 32 bits the way LuaBitOp reduces them (rounded, then taken modulo 2^32) and
//! results are signed 32-bit numbers, so `bit.tobit(0xffffffff) == -1`.

use mlua::{Lua, MultiValue, Table, Value};

use super::library::{self, LibraryError, LibraryResult};

type Unary = (&'static str, fn(i32) -> i32);
type Fold = (&'static str, fn(i32, i32) -> i32);
type Shift = (&'static str, fn(i32, u32) -> i32);

/// The `bit` table.
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let bit = lua.create_table()?;
    let unary: [Unary; 3] = [("tobit", |x| x), ("bnot", |x| !x), ("bswap", i32::swap_bytes)];
    for (name, operation) in unary {
        bit.raw_set(
            name,
            library::function(lua, move |lua, args| {
                Ok(result(operation(argument(lua, &args, 0, name)?)))
            })?,
        )?;
    }
    let folds: [Fold; 3] = [("band", |a, b| a & b), ("bor", |a, b| a | b), ("bxor", |a, b| a ^ b)];
    for (name, operation) in folds {
        bit.raw_set(
            name,
            library::function(lua, move |lua, args| {
                let mut value = argument(lua, &args, 0, name)?;
                for position in 1..args.len() {
                    value = operation(value, argument(lua, &args, position, name)?);
                }
                Ok(result(value))
            })?,
        )?;
    }
    // The shift count is taken modulo 32, as LuaBitOp does.
    let shifts: [Shift; 5] = [
        ("lshift", |x, n| ((x as u32) << n) as i32),
        ("rshift", |x, n| ((x as u32) >> n) as i32),
        ("arshift", |x, n| x >> n),
        ("rol", |x, n| (x as u32).rotate_left(n) as i32),
        ("ror", |x, n| (x as u32).rotate_right(n) as i32),
    ];
    for (name, operation) in shifts {
        bit.raw_set(
            name,
            library::function(lua, move |lua, args| {
                let value = argument(lua, &args, 0, name)?;
                let count = argument(lua, &args, 1, name)? as u32 & 31;
                Ok(result(operation(value, count)))
            })?,
        )?;
    }
    bit.raw_set("tohex", library::function(lua, tohex)?)?;
    Ok(bit)
}

/// `bit.tohex(x [, n])`: the low `n` (default 8, at most 8) hex digits, upper case when `n` is
/// negative.
fn tohex(lua: &Lua, args: MultiValue) -> LibraryResult {
    let value = argument(lua, &args, 0, "tohex")? as u32;
    let digits = match args.get(1) {
        None | Some(Value::Nil) => 8,
        Some(_) => argument(lua, &args, 1, "tohex")?,
    };
    let width = digits.unsigned_abs().min(8) as usize;
    let text = if digits < 0 {
        format!("{value:08X}")
    } else {
        format!("{value:08x}")
    };
    let text = &text[8 - width..];
    Ok(MultiValue::from_vec(vec![Value::String(lua.create_string(text)?)]))
}

fn result(value: i32) -> MultiValue {
    MultiValue::from_vec(vec![Value::Number(f64::from(value))])
}

/// Argument `position` (from 0) as LuaBitOp's `barg` reads it: a number (or a numeric string),
/// reduced to 32 bits by adding 2^52 + 2^51 and keeping the low word of the double.
fn argument(lua: &Lua, args: &MultiValue, position: usize, name: &str) -> Result<i32, LibraryError> {
    library::number_argument(lua, args, position + 1, name).map(to_bit)
}

fn to_bit(number: f64) -> i32 {
    (number + ((3_u64 << 51) as f64)).to_bits() as u32 as i32
}

#[cfg(test)]
mod tests {
    #[test]
    fn computes_as_luabitop_does() {
        let lua = super::super::library::with_libraries(1 << 20);
        let chunk = r#"
            assert(bit.tobit(0xffffffff) == -1 and bit.tobit(2^32 + 5) == 5 and bit.tobit(1.5) == 2)
            assert(bit.band(0x12345678, 0xff) == 0x78 and bit.bor(1, 2, 4) == 7 and bit.bxor(7, 2) == 5)
            assert(bit.bnot(0) == -1 and bit.lshift(1, 31) == -2147483648 and bit.lshift(1, 33) == 2)
            assert(bit.rshift(-1, 28) == 15 and bit.arshift(-256, 4) == -16)
            assert(bit.rol(0x12345678, 8) == 0x34567812 and bit.ror(0x12345678, 8) == 0x78123456)
            assert(bit.bswap(0x12345678) == 0x78563412 and bit.band("12", 4) == 4)
            assert(bit.tohex(-1) == "ffffffff" and bit.tohex(255, 2) == "ff" and bit.tohex(255, -4) == "00FF")
            assert(bit.tohex(0x12345678, 12) == "12345678")
            return "ok"
        "#;
        assert_eq!(lua.load(chunk).eval::<String>().unwrap(), "ok");
        assert_eq!(
            super::super::library::raised(&lua, "bit.band()"),
            "bad argument #1 to 'band' (number expected, got no value)"
        );
    }
}
