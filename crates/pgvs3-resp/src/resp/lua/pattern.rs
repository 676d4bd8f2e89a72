//! Lua 5.1's pattern matching (`string.find`, `match`, `gmatch`, `gsub`), ported from its
//! `lstrlib.c` so that it can be stopped. The C matcher backtracks without bound
//! (`string.find(string.rep('a', 40), string.rep('a*', 40) .. 'b')` runs for hours) and the
//! interpreter's hook cannot fire inside it; this one counts its steps in the run's
//! [`Bounds`], which looks at the time limit and SCRIPT KILL every 4,096 of them. The results and
//! error texts are 5.1's; two differences: nesting deeper than [`MAX_DEPTH`] is
//! `pattern too complex` (5.1 overflows the C stack there), and what `gsub` builds is bounded by
//! the script's memory limit (5.1 builds it in the interpreter's memory).

use mlua::{Lua, MultiValue, Value};

use super::library::{self, Bounds, LibraryError, LibraryResult};

const ESCAPE: u8 = b'%';
const SPECIALS: &[u8] = b"^$*+?.([%-";
const MAX_CAPTURES: usize = 32;
/// Deepest recursion of one match (each level is a pattern item that backtracks).
const MAX_DEPTH: usize = 10_000;

/// Replaces the string library's four matching functions.
pub fn install(lua: &Lua, string: &mlua::Table, bounds: &std::rc::Rc<Bounds>) -> mlua::Result<()> {
    string.raw_set(
        "find",
        library::bounded_function(lua, bounds, |lua, args, bounds| find(lua, &args, bounds, true))?,
    )?;
    string.raw_set(
        "match",
        library::bounded_function(lua, bounds, |lua, args, bounds| find(lua, &args, bounds, false))?,
    )?;
    let shared = std::rc::Rc::clone(bounds);
    string.raw_set(
        "gmatch",
        library::function(lua, move |lua, args| gmatch(lua, args, &shared))?,
    )?;
    string.raw_set("gsub", library::bounded_function(lua, bounds, gsub)?)?;
    Ok(())
}

#[derive(Clone, Copy)]
enum Capture {
    Unfinished,
    Position,
    Length(usize),
}

struct Matcher<'a> {
    subject: &'a [u8],
    /// Up to its first NUL, as 5.1 reads a pattern (a C string).
    pattern: &'a [u8],
    bounds: &'a Bounds,
    captures: Vec<(usize, Capture)>,
    depth: usize,
}

type Step = Result<Option<usize>, LibraryError>;

/// A 5.1 character class (`%a`, `%d`, ...), upper case negating it; any other byte itself.
fn class_matches(c: u8, class: u8) -> bool {
    let matched = match class.to_ascii_lowercase() {
        b'a' => c.is_ascii_alphabetic(),
        b'c' => c.is_ascii_control(),
        b'd' => c.is_ascii_digit(),
        b'l' => c.is_ascii_lowercase(),
        b'p' => c.is_ascii_punctuation(),
        b's' => matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'),
        b'u' => c.is_ascii_uppercase(),
        b'w' => c.is_ascii_alphanumeric(),
        b'x' => c.is_ascii_hexdigit(),
        b'z' => c == 0,
        _ => return class == c,
    };
    if class.is_ascii_lowercase() { matched } else { !matched }
}

impl Matcher<'_> {
    fn at(&self, i: usize) -> u8 {
        self.pattern.get(i).copied().unwrap_or(0)
    }

    /// The subject's byte at `s`, NUL at its end (as 5.1 reads past it).
    fn subject_at(&self, s: usize) -> u8 {
        self.subject.get(s).copied().unwrap_or(0)
    }

    /// Where the single-character class at `p` ends.
    fn class_end(&self, mut p: usize) -> Result<usize, LibraryError> {
        let c = self.at(p);
        p += 1;
        match c {
            ESCAPE => {
                if p >= self.pattern.len() {
                    return Err(LibraryError::raise("malformed pattern (ends with '%')"));
                }
                Ok(p + 1)
            }
            b'[' => {
                if self.at(p) == b'^' {
                    p += 1;
                }
                loop {
                    if p >= self.pattern.len() {
                        return Err(LibraryError::raise("malformed pattern (missing ']')"));
                    }
                    let c = self.at(p);
                    p += 1;
                    if c == ESCAPE && p < self.pattern.len() {
                        p += 1;
                    }
                    if self.at(p) == b']' {
                        return Ok(p + 1);
                    }
                }
            }
            _ => Ok(p),
        }
    }

    /// `[set]` from `p` (its `[`) to `end` (its `]`).
    fn bracket_matches(&self, c: u8, mut p: usize, end: usize) -> bool {
        let mut found = true;
        if self.at(p + 1) == b'^' {
            found = false;
            p += 1;
        }
        p += 1;
        while p < end {
            if self.at(p) == ESCAPE {
                p += 1;
                if class_matches(c, self.at(p)) {
                    return found;
                }
            } else if self.at(p + 1) == b'-' && p + 2 < end {
                if self.at(p) <= c && c <= self.at(p + 2) {
                    return found;
                }
                p += 2;
            } else if self.at(p) == c {
                return found;
            }
            p += 1;
        }
        !found
    }

    fn single_matches(&self, s: usize, p: usize, class_end: usize) -> bool {
        if s >= self.subject.len() {
            return false;
        }
        let c = self.subject[s];
        match self.at(p) {
            b'.' => true,
            ESCAPE => class_matches(c, self.at(p + 1)),
            b'[' => self.bracket_matches(c, p, class_end - 1),
            literal => literal == c,
        }
    }

    /// 5.1's `match`: where a match of the pattern from `p` at subject position `s` ends.
    fn matches(&mut self, s: usize, p: usize) -> Step {
        self.bounds.step()?;
        if self.depth >= MAX_DEPTH {
            return Err(LibraryError::raise("pattern too complex"));
        }
        self.depth += 1;
        let end = library::deeper(|| self.matches_here(s, p));
        self.depth -= 1;
        end
    }

    fn matches_here(&mut self, mut s: usize, mut p: usize) -> Step {
        loop {
            if p >= self.pattern.len() {
                return Ok(Some(s));
            }
            match self.at(p) {
                b'(' if self.at(p + 1) == b')' => return self.start_capture(s, p + 2, Capture::Position),
                b'(' => return self.start_capture(s, p + 1, Capture::Unfinished),
                b')' => return self.end_capture(s, p + 1),
                b'$' if p + 1 == self.pattern.len() => {
                    return Ok((s == self.subject.len()).then_some(s));
                }
                ESCAPE if self.at(p + 1) == b'b' => {
                    let Some(after) = self.balance(s, p + 2)? else {
                        return Ok(None);
                    };
                    s = after;
                    p += 4;
                    continue;
                }
                ESCAPE if self.at(p + 1) == b'f' => {
                    p += 2;
                    if self.at(p) != b'[' {
                        return Err(LibraryError::raise("missing '[' after '%f' in pattern"));
                    }
                    let class_end = self.class_end(p)?;
                    let previous = if s == 0 { 0 } else { self.subject_at(s - 1) };
                    if self.bracket_matches(previous, p, class_end - 1)
                        || !self.bracket_matches(self.subject_at(s), p, class_end - 1)
                    {
                        return Ok(None);
                    }
                    p = class_end;
                    continue;
                }
                ESCAPE if self.at(p + 1).is_ascii_digit() => {
                    let Some(after) = self.match_capture(s, self.at(p + 1))? else {
                        return Ok(None);
                    };
                    s = after;
                    p += 2;
                    continue;
                }
                _ => {}
            }
            let class_end = self.class_end(p)?;
            let single = self.single_matches(s, p, class_end);
            match self.at(class_end) {
                b'?' if class_end < self.pattern.len() => {
                    if single && let Some(end) = self.matches(s + 1, class_end + 1)? {
                        return Ok(Some(end));
                    }
                    p = class_end + 1;
                }
                b'*' if class_end < self.pattern.len() => return self.max_expand(s, p, class_end),
                b'+' if class_end < self.pattern.len() => {
                    return match single {
                        true => self.max_expand(s + 1, p, class_end),
                        false => Ok(None),
                    };
                }
                b'-' if class_end < self.pattern.len() => return self.min_expand(s, p, class_end),
                _ => {
                    if !single {
                        return Ok(None);
                    }
                    s += 1;
                    p = class_end;
                }
            }
        }
    }

    fn max_expand(&mut self, s: usize, p: usize, class_end: usize) -> Step {
        let mut count = 0;
        while self.single_matches(s + count, p, class_end) {
            count += 1;
            if count.is_multiple_of(64) {
                self.bounds.step()?;
            }
        }
        loop {
            if let Some(end) = self.matches(s + count, class_end + 1)? {
                return Ok(Some(end));
            }
            if count == 0 {
                return Ok(None);
            }
            count -= 1;
        }
    }

    fn min_expand(&mut self, mut s: usize, p: usize, class_end: usize) -> Step {
        loop {
            if let Some(end) = self.matches(s, class_end + 1)? {
                return Ok(Some(end));
            }
            if !self.single_matches(s, p, class_end) {
                return Ok(None);
            }
            s += 1;
        }
    }

    fn start_capture(&mut self, s: usize, p: usize, what: Capture) -> Step {
        if self.captures.len() >= MAX_CAPTURES {
            return Err(LibraryError::raise("too many captures"));
        }
        self.captures.push((s, what));
        let end = self.matches(s, p)?;
        if end.is_none() {
            self.captures.pop();
        }
        Ok(end)
    }

    fn end_capture(&mut self, s: usize, p: usize) -> Step {
        let Some(open) = self
            .captures
            .iter()
            .rposition(|(_, capture)| matches!(capture, Capture::Unfinished))
        else {
            return Err(LibraryError::raise("invalid pattern capture"));
        };
        self.captures[open].1 = Capture::Length(s - self.captures[open].0);
        let end = self.matches(s, p)?;
        if end.is_none() {
            self.captures[open].1 = Capture::Unfinished;
        }
        Ok(end)
    }

    fn match_capture(&mut self, s: usize, digit: u8) -> Step {
        let index = (digit as usize).wrapping_sub(b'1' as usize);
        let (start, length) = match self.captures.get(index) {
            Some(&(start, Capture::Length(length))) => (start, length),
            // A position's length reads as huge in 5.1: it matches nothing.
            Some((_, Capture::Position)) => return Ok(None),
            _ => return Err(LibraryError::raise("invalid capture index")),
        };
        let captured = &self.subject[start..start + length];
        self.bounds.advance(length / 64)?;
        Ok(self.subject[s.min(self.subject.len())..]
            .starts_with(captured)
            .then_some(s + length))
    }

    fn balance(&mut self, s: usize, p: usize) -> Step {
        if p + 1 >= self.pattern.len() {
            return Err(LibraryError::raise("unbalanced pattern"));
        }
        let (open, close) = (self.at(p), self.at(p + 1));
        if self.subject_at(s) != open || s >= self.subject.len() {
            return Ok(None);
        }
        let mut depth = 1;
        for (i, &c) in self.subject.iter().enumerate().skip(s + 1) {
            if i % 64 == 0 {
                self.bounds.step()?;
            }
            if c == close {
                depth -= 1;
                if depth == 0 {
                    return Ok(Some(i + 1));
                }
            } else if c == open {
                depth += 1;
            }
        }
        Ok(None)
    }

    /// Capture `i` (or the whole match `start..end` when there are none) as 5.1 pushes it.
    fn capture(&self, lua: &Lua, i: usize, start: usize, end: usize) -> Result<Value, LibraryError> {
        if i >= self.captures.len() {
            return match i {
                0 => Ok(Value::String(lua.create_string(&self.subject[start..end])?)),
                _ => Err(LibraryError::raise("invalid capture index")),
            };
        }
        match self.captures[i] {
            (_, Capture::Unfinished) => Err(LibraryError::raise("unfinished capture")),
            (at, Capture::Position) => Ok(Value::Integer((at + 1) as _)),
            (at, Capture::Length(length)) => Ok(Value::String(lua.create_string(&self.subject[at..at + length])?)),
        }
    }

    /// The captures (or the whole match when `whole` and there are none).
    fn captures(&self, lua: &Lua, start: usize, end: usize, whole: bool) -> Result<Vec<Value>, LibraryError> {
        let count = if self.captures.is_empty() && whole {
            1
        } else {
            self.captures.len()
        };
        (0..count).map(|i| self.capture(lua, i, start, end)).collect()
    }
}

fn string_arg(lua: &Lua, args: &MultiValue, position: usize, function: &str) -> Result<Vec<u8>, LibraryError> {
    library::string_argument(lua, args, position, function)
}

/// An optional integer argument (`luaL_optinteger`): absent or nil is `default`.
fn optional_integer(
    lua: &Lua,
    args: &MultiValue,
    position: usize,
    function: &str,
    default: i64,
) -> Result<i64, LibraryError> {
    match args.get(position - 1) {
        None | Some(Value::Nil) => Ok(default),
        Some(_) => Ok(library::number_argument(lua, args, position, function)? as i64),
    }
}

/// A pattern as 5.1 reads it: up to its first NUL.
fn c_string(pattern: &[u8]) -> &[u8] {
    &pattern[..pattern.iter().position(|&b| b == 0).unwrap_or(pattern.len())]
}

/// `string.find` (`find`) and `string.match`.
fn find(lua: &Lua, args: &MultiValue, bounds: &Bounds, find: bool) -> LibraryResult {
    let name = if find { "find" } else { "match" };
    let subject = string_arg(lua, args, 1, name)?;
    let whole_pattern = string_arg(lua, args, 2, name)?;
    let length = subject.len() as i64;
    let init = optional_integer(lua, args, 3, name, 1)?;
    let init = if init < 0 { (init + length + 1).max(0) } else { init };
    let init = (init - 1).clamp(0, length) as usize;
    let plain = args
        .get(3)
        .is_some_and(|flag| !matches!(flag, Value::Nil | Value::Boolean(false)));
    let pattern = c_string(&whole_pattern);
    if find && (plain || !pattern.iter().any(|b| SPECIALS.contains(b))) {
        return Ok(match plain_find(&subject[init..], &whole_pattern, bounds)? {
            Some(at) => MultiValue::from_vec(vec![
                Value::Integer((init + at + 1) as _),
                Value::Integer((init + at + whole_pattern.len()) as _),
            ]),
            None => MultiValue::from_vec(vec![Value::Nil]),
        });
    }
    let (anchored, pattern) = match pattern.first() {
        Some(b'^') => (true, &pattern[1..]),
        _ => (false, pattern),
    };
    let mut matcher = Matcher {
        subject: &subject,
        pattern,
        bounds,
        captures: Vec::new(),
        depth: 0,
    };
    let mut start = init;
    loop {
        matcher.captures.clear();
        if let Some(end) = matcher.matches(start, 0)? {
            let mut values = Vec::new();
            if find {
                values.push(Value::Integer((start + 1) as _));
                values.push(Value::Integer(end as _));
                values.extend(matcher.captures(lua, start, end, false)?);
            } else {
                values.extend(matcher.captures(lua, start, end, true)?);
            }
            return Ok(MultiValue::from_vec(values));
        }
        start += 1;
        if start > subject.len() || anchored {
            return Ok(MultiValue::from_vec(vec![Value::Nil]));
        }
    }
}

/// Where `needle` first occurs in `haystack`, as 5.1's `lmemfind` (the empty needle at 0).
fn plain_find(haystack: &[u8], needle: &[u8], bounds: &Bounds) -> Result<Option<usize>, LibraryError> {
    let Some((&first, _)) = needle.split_first() else {
        return Ok(Some(0));
    };
    if needle.len() > haystack.len() {
        return Ok(None);
    }
    let last_start = haystack.len() - needle.len();
    for (at, _) in haystack[..=last_start].iter().enumerate().filter(|(_, b)| **b == first) {
        bounds.advance(1 + needle.len() / 64)?;
        if haystack[at..].starts_with(needle) {
            return Ok(Some(at));
        }
    }
    Ok(None)
}

/// `string.gmatch`: an iterator over the matches' captures.
fn gmatch(lua: &Lua, args: MultiValue, bounds: &std::rc::Rc<Bounds>) -> LibraryResult {
    let subject = string_arg(lua, &args, 1, "gmatch")?;
    let pattern = c_string(&string_arg(lua, &args, 2, "gmatch")?).to_vec();
    let next = std::cell::Cell::new(0usize);
    let bounds = std::rc::Rc::clone(bounds);
    let iterator = library::function(lua, move |lua, _| {
        let mut matcher = Matcher {
            subject: &subject,
            pattern: &pattern,
            bounds: &bounds,
            captures: Vec::new(),
            depth: 0,
        };
        let mut start = next.get();
        while start <= subject.len() {
            matcher.captures.clear();
            if let Some(end) = matcher.matches(start, 0)? {
                next.set(if end == start { end + 1 } else { end });
                return Ok(MultiValue::from_vec(matcher.captures(lua, start, end, true)?));
            }
            start += 1;
        }
        next.set(start);
        Ok(MultiValue::new())
    })?;
    Ok(MultiValue::from_vec(vec![Value::Function(iterator)]))
}

/// `string.gsub`.
fn gsub(lua: &Lua, args: MultiValue, bounds: &Bounds) -> LibraryResult {
    let subject = string_arg(lua, &args, 1, "gsub")?;
    let whole_pattern = string_arg(lua, &args, 2, "gsub")?;
    let replacement = args.get(2).cloned().unwrap_or(Value::Nil);
    let replacement = match replacement {
        Value::String(_) | Value::Integer(_) | Value::Number(_) => {
            Replacement::Text(string_arg(lua, &args, 3, "gsub")?)
        }
        Value::Table(table) => Replacement::Table(table),
        Value::Function(function) => Replacement::Function(function),
        _ => {
            return Err(library::argument_error(3, "gsub", "string/function/table expected"));
        }
    };
    let max = optional_integer(lua, &args, 4, "gsub", subject.len() as i64 + 1)?;
    let pattern = c_string(&whole_pattern);
    let (anchored, pattern) = match pattern.first() {
        Some(b'^') => (true, &pattern[1..]),
        _ => (false, pattern),
    };
    let mut matcher = Matcher {
        subject: &subject,
        pattern,
        bounds,
        captures: Vec::new(),
        depth: 0,
    };
    let mut out = Vec::new();
    let (mut at, mut count) = (0, 0i64);
    while count < max {
        matcher.captures.clear();
        let end = matcher.matches(at, 0)?;
        if let Some(end) = end {
            count += 1;
            replacement.add(lua, &matcher, at, end, &mut out)?;
        }
        match end {
            Some(end) if end > at => at = end,
            _ if at < subject.len() => {
                out.push(subject[at]);
                at += 1;
            }
            _ => break,
        }
        if out.len() > bounds.max_output {
            return Err(LibraryError::Lua(mlua::Error::MemoryError(String::new())));
        }
        if anchored {
            break;
        }
    }
    out.extend_from_slice(&subject[at..]);
    Ok(MultiValue::from_vec(vec![
        Value::String(lua.create_string(&out)?),
        Value::Integer(count as _),
    ]))
}

enum Replacement {
    Text(Vec<u8>),
    Table(mlua::Table),
    Function(mlua::Function),
}

impl Replacement {
    /// 5.1's `add_value`: what replaces the match `start..end`.
    fn add(
        &self,
        lua: &Lua,
        matcher: &Matcher<'_>,
        start: usize,
        end: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), LibraryError> {
        let value = match self {
            Replacement::Text(text) => {
                let mut i = 0;
                while i < text.len() {
                    let c = text[i];
                    i += 1;
                    if c != ESCAPE {
                        out.push(c);
                        continue;
                    }
                    let next = text.get(i).copied().unwrap_or(0);
                    i += 1;
                    match next {
                        b'0' => out.extend_from_slice(&matcher.subject[start..end]),
                        b'1'..=b'9' => {
                            let capture = matcher.capture(lua, (next - b'1') as usize, start, end)?;
                            out.extend_from_slice(
                                &lua.coerce_string(capture)?
                                    .map(|s| s.as_bytes().to_vec())
                                    .unwrap_or_default(),
                            );
                        }
                        other => out.push(other),
                    }
                }
                return Ok(());
            }
            Replacement::Table(table) => table.get::<Value>(matcher.capture(lua, 0, start, end)?)?,
            Replacement::Function(function) => {
                let captures = matcher.captures(lua, start, end, true)?;
                function.call::<Value>(MultiValue::from_vec(captures))?
            }
        };
        match value {
            Value::Nil | Value::Boolean(false) => out.extend_from_slice(&matcher.subject[start..end]),
            Value::String(text) => out.extend_from_slice(&text.as_bytes()),
            number @ (Value::Integer(_) | Value::Number(_)) => out.extend_from_slice(
                &lua.coerce_string(number)?
                    .map(|s| s.as_bytes().to_vec())
                    .unwrap_or_default(),
            ),
            other => {
                return Err(LibraryError::raise(format!(
                    "invalid replacement value (a {})",
                    other.type_name()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use mlua::{Lua, LuaOptions, StdLib};

    use super::super::library;

    /// What a chunk answers, or the text of the error it raises (without its position).
    fn answer(lua: &Lua, chunk: &str) -> String {
        let wrapped = format!(
            "local r = {{pcall(function() {chunk} end)}} \
             if not r[1] then return 'false|' .. tostring(r[2]) end \
             for i = 1, 6 do r[i] = tostring(r[i]) end return table.concat(r, '|', 1, 6)"
        );
        let text: String = lua.load(wrapped).eval().unwrap();
        match text.strip_prefix("false|") {
            Some(error) => {
                let first = error.lines().next().unwrap_or_default();
                format!("error: {}", first.rsplit(": ").next().unwrap_or(first))
            }
            None => text,
        }
    }

    /// The port answers every call as the C matcher does (a bare interpreter, side by side).
    #[test]
    fn answers_as_lua_5_1_does() {
        let bare = Lua::new_with(StdLib::STRING | StdLib::TABLE, LuaOptions::new()).unwrap();
        let ported = library::with_libraries(1 << 20);
        let calls = [
            "return string.find('hello world', 'o w')",
            "return string.find('hello world', 'o', 6)",
            "return string.find('hello', 'l', -2)",
            "return string.find('hello', 'l', -100)",
            "return string.find('hello', '', 10)",
            "return string.find('hello', '', 6)",
            "return string.find('a.b', '.', 1, true)",
            "return string.find('a+b', '+', 1, true)",
            "return string.find('hello', '(l+)(o)')",
            "return string.find('hello', '()ll()')",
            "return string.find('x = 10', '^(%w+)%s*=%s*(%d+)$')",
            "return string.match('  trim me  ', '^%s*(.-)%s*$')",
            "return string.match('key=value', '(%w+)=(%w+)')",
            "return string.match('2024-01-05', '(%d+)-(%d+)-(%d+)')",
            "return string.match('hello', '.-(l)')",
            "return string.match('THE (quick) fox', '%((%a+)%)')",
            "return string.match('f(a(b)c)d', '%b()')",
            "return string.match('THE (quick) fox', '%f[%a]%a+', 5)",
            "return string.match('abcabc', '(abc)%1')",
            "return string.match('abab', '()(a)%2')",
            "return string.match('a]b', '[]]')",
            "return string.match('a-b', '[a%-]+')",
            "return string.match('x^y', '[%^x]+')",
            "return string.match('hello', '[^aeiou]+')",
            "return string.match('A1_b', '[%w_]+')",
            "return string.match('\\0abc', '%z(a)')",
            "return string.match('a$b', 'a$b')",
            "return string.match('ab', 'a?b?c?$')",
            "return string.match('aaa', 'a-$')",
            "return string.match('a\\0b', 'a\\0c')",
            "return string.match('hello', '%u')",
            "return string.match('Hello', '%U+')",
            "return string.match('   x', '%S')",
            "return string.match('x', 'x', 5)",
            "return string.match('abc', '^b')",
            "return string.match('abc', 'b', -1)",
            "return string.gsub('hello world', 'o', '0')",
            "return string.gsub('hello world', '(o)', '[%1%0]', 1)",
            "return string.gsub('abc', '', '-')",
            "return string.gsub('abc', '^', '>')",
            "return string.gsub('abc', '%w', {a = 1, b = true})",
            "return string.gsub('abc', '%w', function(c) if c == 'b' then return nil end return c:upper() end)",
            "return string.gsub('a b', '(%w)', '%2')",
            "return string.gsub('a', 'a', '%')",
            "return string.gsub('a', 'a', '%x')",
            "return string.gsub('a b c', '()(%a)', '%1')",
            "return string.gsub('abc', '%w', function() return {} end)",
            "return string.gsub('abc', 'b', 5)",
            "return string.gsub('abc', 'b', nil)",
            "return string.gsub('abcabc', 'b', 'x', 0)",
            "return string.find('a', '%')",
            "return string.find('a', '[a')",
            "return string.find('a', '[a%')",
            "return string.find('a', '(a')",
            "return string.find('a', 'a)')",
            "return string.find('a', '%1')",
            "return string.find('a', '(a)%2')",
            "return string.find('a', '%b')",
            "return string.find('a', '%fa')",
            "return string.find('a', string.rep('(a)', 33))",
            "return string.find(nil, 'a')",
            "return string.find('a')",
            "return string.find(12345, 3)",
            "return ('hello'):find('l')",
            "return ('x'):rep(3):match('(x+)')",
        ];
        let gmatches = [
            "local t = {} for k, v in string.gmatch('a=1, b=2', '(%w+)=(%w+)') do t[#t + 1] = k .. v end return table.concat(t, ';')",
            "local t = {} for w in string.gmatch('one two  three', '%a+') do t[#t + 1] = w end return table.concat(t, ';')",
            "local t = {} for w in string.gmatch('abc', '') do t[#t + 1] = '[' .. w .. ']' end return table.concat(t, ';')",
            "local t = {} for p in string.gmatch('abc', '()') do t[#t + 1] = p end return table.concat(t, ';')",
            "local t = {} for w in string.gmatch('^a^b', '^%a') do t[#t + 1] = w end return table.concat(t, ';')",
            "local f = string.gmatch('ab', '%a') return f(), f(), f(), f()",
        ];
        for chunk in calls.iter().chain(gmatches.iter()) {
            assert_eq!(answer(&ported, chunk), answer(&bare, chunk), "{chunk}");
        }
    }

    /// Hostile: a pattern that backtracks for hours in C stops when the script must.
    #[test]
    fn a_pathological_pattern_stops_when_the_script_must() {
        let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, LuaOptions::new()).unwrap();
        library::install(&lua, &library::Bounds::new(1 << 30, || Some("ERR stop now".into()))).unwrap();
        for call in [
            "string.find(string.rep('a', 40), string.rep('a*', 40) .. 'b')",
            "string.match(string.rep('a', 40), string.rep('a-', 40) .. 'b')",
            "string.gsub(string.rep('a', 40), string.rep('a?', 40) .. 'b', '')",
            "string.gmatch(string.rep('a', 40), string.rep('.*', 40) .. 'b')()",
            "string.find(string.rep('a', 1e6), string.rep('a', 1e5) .. 'b', 1, true)",
        ] {
            let raised = answer(&lua, &format!("return {call}"));
            assert_eq!(raised, "error: ERR stop now", "{call}");
        }
    }
}
