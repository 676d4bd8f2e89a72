//! RESP framing: requests in (arrays of bulk strings, or inline lines as telnet sends them) with
//! Redis's limits and error texts, replies out in RESP2 or RESP3.
//!
//! Clients only ever send arrays of bulk strings, so the request side is a small parser that
//! refuses anything oversized before allocating for it, and that remembers how far it got in a
//! request still arriving, so every byte is looked at once however the request is split.
//! Replies are a handful of types.

use bytes::{BufMut, Bytes, BytesMut};

use super::command::parse_integer;

/// Redis's `proto-max-bulk-len` default: the largest value a client may send.
pub const MAX_BULK_LEN: usize = 512 * 1024 * 1024;
/// Redis's `PROTO_INLINE_MAX_SIZE`: the longest inline request, and the longest header line
/// (`*<n>`, `$<n>`) waited for.
pub const MAX_INLINE_LEN: usize = 64 * 1024;
/// Arguments per command. Redis 7 allows up to INT_MAX; pgvs3 keeps the 1,048,576 of earlier
/// Redis versions, so that the parsed arguments of one request (32 bytes each, beyond the
/// input they came from) stay bounded.
pub const MAX_ARGS: usize = 1024 * 1024;
/// Before AUTH (when AUTH is required) Redis takes at most 10 arguments of 16 KiB each, so that
/// a client without the password cannot make the server hold much.
pub const UNAUTHENTICATED_MAX_ARGS: i64 = 10;
pub const UNAUTHENTICATED_MAX_BULK_LEN: i64 = 16 * 1024;
/// How far ahead of the received bytes the input buffer grows for a large bulk.
const MAX_RESERVE: usize = 4 * 1024 * 1024;

/// A request that breaks the protocol: Redis answers with this text and closes the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl ProtocolError {
    fn new(detail: &str) -> ProtocolError {
        ProtocolError(format!("ERR Protocol error: {detail}"))
    }
}

/// A multibulk request of which only the first part has arrived. Offsets are into the input
/// buffer, whose front stays put until the request is complete and taken out whole.
#[derive(Debug)]
struct Partial {
    /// Arguments still to come.
    remaining: usize,
    /// Where the next argument's `$<len>` line starts.
    at: usize,
    /// Where the arguments found so far lie.
    spans: Vec<(usize, usize)>,
}

/// Parses the requests of one connection from its input buffer, keeping its place in a
/// request that has not fully arrived: a request split into many reads costs a scan of each
/// byte once, not a scan from its start on every read.
///
/// The caller only appends to the buffer between calls; the parser alone consumes from it.
#[derive(Debug, Default)]
pub struct RequestParser {
    partial: Option<Partial>,
    /// Where the search for the end of the current line resumes: the bytes before it are
    /// known not to end it.
    scanned: usize,
}

impl RequestParser {
    /// Memory the request in progress holds beyond the input buffer itself.
    pub fn held_bytes(&self) -> usize {
        self.partial
            .as_ref()
            .map_or(0, |partial| partial.spans.capacity() * size_of::<(usize, usize)>())
    }

    /// Parses the next request from the front of `buf` and consumes it. `Ok(None)` means more
    /// bytes are needed. A request is never empty: empty ones (`*0`, `*-1`, a blank line) are
    /// consumed and skipped, as Redis does. `unauthenticated` applies Redis's limits for a
    /// client that must still AUTH.
    pub fn parse(&mut self, buf: &mut BytesMut, unauthenticated: bool) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        loop {
            if self.partial.is_none() {
                let Some(&first) = buf.first() else {
                    return Ok(None);
                };
                let started = if first == b'*' {
                    self.start_multibulk(buf, unauthenticated)?
                } else {
                    self.inline(buf)?
                };
                match started {
                    Start::NeedMore => return Ok(None),
                    Start::Empty => continue,
                    Start::Inline(args) => return Ok(Some(args)),
                    Start::Multibulk => {}
                }
            }
            return self.continue_multibulk(buf, unauthenticated);
        }
    }

    /// Consumes `len` bytes from the front of `buf`: every offset kept is reset.
    fn consume(&mut self, buf: &mut BytesMut, len: usize) -> Bytes {
        self.scanned = 0;
        self.partial = None;
        buf.split_to(len).freeze()
    }

    /// Where the line that starts at `from` has its `end` byte, if it has arrived; past
    /// [`MAX_INLINE_LEN`] bytes without it, `too_long` is the error.
    fn line_end(&mut self, buf: &[u8], from: usize, end: u8, too_long: &str) -> Result<Option<usize>, ProtocolError> {
        let start = self.scanned.max(from);
        match buf[start..].iter().position(|&byte| byte == end) {
            Some(found) => Ok(Some(start + found)),
            None if buf.len() - from > MAX_INLINE_LEN => Err(ProtocolError::new(too_long)),
            None => {
                self.scanned = buf.len();
                Ok(None)
            }
        }
    }

    /// A `<marker><number>\r\n` line at `from`, as Redis reads it: up to its `\r`, with one
    /// more byte (the `\n`) arrived after it. Returns the number text's end and the next line's
    /// start.
    fn header(&mut self, buf: &[u8], from: usize, too_long: &str) -> Result<Option<(usize, usize)>, ProtocolError> {
        match self.line_end(buf, from, b'\r', too_long)? {
            Some(end) if end + 2 <= buf.len() => Ok(Some((end, end + 2))),
            _ => Ok(None),
        }
    }

    fn start_multibulk(&mut self, buf: &mut BytesMut, unauthenticated: bool) -> Result<Start, ProtocolError> {
        let Some((end, next)) = self.header(buf, 0, "too big mbulk count string")? else {
            return Ok(Start::NeedMore);
        };
        let count = parse_integer(&buf[1..end])
            .filter(|&count| count <= MAX_ARGS as i64)
            .ok_or_else(|| ProtocolError::new("invalid multibulk length"))?;
        if unauthenticated && count > UNAUTHENTICATED_MAX_ARGS {
            return Err(ProtocolError::new("unauthenticated multibulk length"));
        }
        if count <= 0 {
            self.consume(buf, next);
            return Ok(Start::Empty);
        }
        self.partial = Some(Partial {
            remaining: count as usize,
            at: next,
            spans: Vec::with_capacity((count as usize).min(1024)),
        });
        Ok(Start::Multibulk)
    }

    fn continue_multibulk(
        &mut self,
        buf: &mut BytesMut,
        unauthenticated: bool,
    ) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        loop {
            let partial = self.partial.as_ref().expect("a multibulk request in progress");
            let at = partial.at;
            if partial.remaining == 0 {
                break;
            }
            let Some((end, start)) = self.header(buf, at, "too big bulk count string")? else {
                return Ok(None);
            };
            if buf[at] != b'$' {
                return Err(ProtocolError::new(&format!("expected '$', got '{}'", buf[at] as char)));
            }
            let invalid_len = || ProtocolError::new("invalid bulk length");
            let len = parse_integer(&buf[at + 1..end])
                .filter(|len| (0..=MAX_BULK_LEN as i64).contains(len))
                .ok_or_else(invalid_len)?;
            if unauthenticated && len > UNAUTHENTICATED_MAX_BULK_LEN {
                return Err(ProtocolError::new("unauthenticated bulk length"));
            }
            let stop = start + len as usize;
            if buf.len() < stop + 2 {
                // Room for the bulk in large steps, but never more than a step ahead of the
                // bytes that actually arrived: a header alone does not get 512 MiB allocated.
                buf.reserve((stop + 2 - buf.len()).min(MAX_RESERVE));
                return Ok(None);
            }
            // Stricter than Redis, which skips the two bytes unseen: a bulk longer than it
            // said is refused rather than read as the start of the next request.
            if &buf[stop..stop + 2] != b"\r\n" {
                return Err(invalid_len());
            }
            let partial = self.partial.as_mut().expect("a multibulk request in progress");
            partial.spans.push((start, stop));
            partial.remaining -= 1;
            partial.at = stop + 2;
        }
        let partial = self.partial.take().expect("a multibulk request in progress");
        let frame = self.consume(buf, partial.at);
        Ok(Some(
            partial
                .spans
                .into_iter()
                .map(|(start, stop)| frame.slice(start..stop))
                .collect(),
        ))
    }

    fn inline(&mut self, buf: &mut BytesMut) -> Result<Start, ProtocolError> {
        let Some(newline) = self.line_end(buf, 0, b'\n', "too big inline request")? else {
            return Ok(Start::NeedMore);
        };
        let line = self.consume(buf, newline + 1);
        let line = &line[..newline];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match split_args(line) {
            None => Err(ProtocolError::new("unbalanced quotes in request")),
            Some(args) if args.is_empty() => Ok(Start::Empty),
            Some(args) => Ok(Start::Inline(args)),
        }
    }
}

/// How the start of a request went.
enum Start {
    NeedMore,
    /// A request without arguments, consumed; Redis answers nothing.
    Empty,
    Inline(Vec<Bytes>),
    /// A multibulk request is under way.
    Multibulk,
}

/// Splits a line into arguments as Redis's `sdssplitargs` does (an inline request, a function
/// library's `#!lua` line): whitespace separates;
/// double quotes group, with `\xHH`, `\n`, `\r`, `\t`, `\b`, `\a` and `\<any>` escapes; single
/// quotes group, with `\'`; a quote may open mid-argument, and a closing quote must be followed
/// by whitespace or the end. As in C, a NUL byte ends the line.
pub(crate) fn split_args(line: &[u8]) -> Option<Vec<Bytes>> {
    let byte = |i: usize| line.get(i).copied().unwrap_or(0);
    let space = |byte: u8| matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while byte(i) != 0 && space(byte(i)) {
            i += 1;
        }
        if byte(i) == 0 {
            return Some(args);
        }
        let mut arg = Vec::new();
        let mut quote = None;
        loop {
            let current = byte(i);
            match quote {
                Some(b'"') => match current {
                    0 => return None,
                    b'\\'
                        if byte(i + 1) == b'x'
                            && byte(i + 2).is_ascii_hexdigit()
                            && byte(i + 3).is_ascii_hexdigit() =>
                    {
                        let hex = |at: usize| (byte(at) as char).to_digit(16).unwrap_or(0) as u8;
                        arg.push(hex(i + 2) * 16 + hex(i + 3));
                        i += 3;
                    }
                    b'\\' if byte(i + 1) != 0 => {
                        i += 1;
                        arg.push(match byte(i) {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        });
                    }
                    b'"' => {
                        if byte(i + 1) != 0 && !space(byte(i + 1)) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    other => arg.push(other),
                },
                Some(_) => match current {
                    0 => return None,
                    b'\\' if byte(i + 1) == b'\'' => {
                        i += 1;
                        arg.push(b'\'');
                    }
                    b'\'' => {
                        if byte(i + 1) != 0 && !space(byte(i + 1)) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    other => arg.push(other),
                },
                None => match current {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => break,
                    b'"' | b'\'' => quote = Some(current),
                    other => arg.push(other),
                },
            }
            i += 1;
        }
        args.push(Bytes::from(arg));
    }
}

/// A reply. RESP2 flattens maps into arrays and doubles into bulk strings, as Redis does.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Simple(&'static str),
    Status(String),
    Error(String),
    Integer(i64),
    Bulk(Bytes),
    /// The null bulk string (`$-1` / `_`).
    Nil,
    /// The null array (`*-1` / `_`), e.g. EXEC after a WATCH failed.
    NilArray,
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
    /// Pairs (a member and its score, a field and its value): each an array of two in RESP3,
    /// one flat array in RESP2, as Redis answers ZRANGE WITHSCORES and HRANDFIELD WITHVALUES.
    Pairs(Vec<(Reply, Reply)>),
    /// Values by key: a map in RESP3, an array of `[key, value]` arrays in RESP2, as Redis
    /// answers XREAD.
    Keyed(Vec<(Reply, Reply)>),
    Double(f64),
    /// RESP3's boolean (`#t`/`#f`), an integer (1 or 0) in RESP2: a script's Lua boolean
    /// after `redis.setresp(3)`.
    Boolean(bool),
    /// RESP3's big number (`(`), a bulk string in RESP2: a script's `{big_number = ...}`.
    BigNumber(String),
    /// RESP3's verbatim string (`=`, its three-letter format first), a bulk string of the
    /// text in RESP2: a script's `{verbatim_string = {format = ..., string = ...}}`.
    Verbatim(String, Bytes),
    /// RESP3's set (`~`), an array in RESP2: a script's `{set = ...}`.
    Set(Vec<Reply>),
    /// An out-of-band frame (pub/sub): `>` in RESP3, a plain array in RESP2.
    Push(Vec<Reply>),
    /// A reply larger than the limit it was read with, cut before it was read whole (with the
    /// size of what the database left out; `None`: gathered in the gateway, KEYS). Never
    /// sent: read again within `--resp-output-limit` where it may fit, else its connection is
    /// closed instead, as Redis closes a client past its `client-output-buffer-limit`.
    OverLimit(Option<crate::store::Cut>),
}

impl Reply {
    pub const OK: Reply = Reply::Simple("OK");

    pub fn error(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    pub fn bulk(data: impl Into<Bytes>) -> Reply {
        Reply::Bulk(data.into())
    }

    pub fn text(text: &str) -> Reply {
        Reply::Bulk(Bytes::copy_from_slice(text.as_bytes()))
    }

    pub fn bool(value: bool) -> Reply {
        Reply::Integer(i64::from(value))
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Whether the reply is, or holds (EXEC's), a reply cut at the output limit.
    pub fn is_cut(&self) -> bool {
        match self {
            Reply::OverLimit(_) => true,
            Reply::Array(items) => items.iter().any(Reply::is_cut),
            _ => false,
        }
    }

    pub fn encode(&self, resp3: bool, out: &mut BytesMut) {
        match self {
            Reply::Simple(text) => line(out, b'+', text.as_bytes()),
            Reply::Status(text) => line(out, b'+', text.as_bytes()),
            // An error text never spans lines: a newline would end the frame early.
            Reply::Error(text) => line(out, b'-', text.replace(['\r', '\n'], " ").as_bytes()),
            Reply::Integer(value) => line(out, b':', value.to_string().as_bytes()),
            Reply::Bulk(data) => {
                line(out, b'$', data.len().to_string().as_bytes());
                out.put_slice(data);
                out.put_slice(b"\r\n");
            }
            Reply::Nil if resp3 => out.put_slice(b"_\r\n"),
            Reply::Nil => out.put_slice(b"$-1\r\n"),
            Reply::NilArray if resp3 => out.put_slice(b"_\r\n"),
            Reply::NilArray => out.put_slice(b"*-1\r\n"),
            Reply::Push(items) if resp3 => {
                line(out, b'>', items.len().to_string().as_bytes());
                for item in items {
                    item.encode(resp3, out);
                }
            }
            Reply::Array(items) | Reply::Push(items) => {
                line(out, b'*', items.len().to_string().as_bytes());
                for item in items {
                    item.encode(resp3, out);
                }
            }
            Reply::Keyed(pairs) if !resp3 => {
                line(out, b'*', pairs.len().to_string().as_bytes());
                for (key, value) in pairs {
                    out.put_slice(b"*2\r\n");
                    key.encode(resp3, out);
                    value.encode(resp3, out);
                }
            }
            Reply::Map(pairs) | Reply::Keyed(pairs) => {
                if resp3 {
                    line(out, b'%', pairs.len().to_string().as_bytes());
                } else {
                    line(out, b'*', (pairs.len() * 2).to_string().as_bytes());
                }
                for (key, value) in pairs {
                    key.encode(resp3, out);
                    value.encode(resp3, out);
                }
            }
            Reply::Pairs(pairs) => {
                let len = if resp3 { pairs.len() } else { pairs.len() * 2 };
                line(out, b'*', len.to_string().as_bytes());
                for (first, second) in pairs {
                    if resp3 {
                        out.put_slice(b"*2\r\n");
                    }
                    first.encode(resp3, out);
                    second.encode(resp3, out);
                }
            }
            Reply::Boolean(value) if resp3 => line(out, b'#', if *value { b"t" } else { b"f" }),
            Reply::Boolean(value) => Reply::Integer(i64::from(*value)).encode(resp3, out),
            Reply::BigNumber(digits) if resp3 => line(out, b'(', digits.as_bytes()),
            Reply::BigNumber(digits) => Reply::text(digits).encode(resp3, out),
            Reply::Verbatim(format, text) if resp3 => {
                line(out, b'=', (format.len() + 1 + text.len()).to_string().as_bytes());
                out.put_slice(format.as_bytes());
                out.put_u8(b':');
                out.put_slice(text);
                out.put_slice(b"\r\n");
            }
            Reply::Verbatim(_, text) => Reply::Bulk(text.clone()).encode(resp3, out),
            Reply::Set(items) => {
                line(out, if resp3 { b'~' } else { b'*' }, items.len().to_string().as_bytes());
                for item in items {
                    item.encode(resp3, out);
                }
            }
            Reply::Double(value) if resp3 => line(out, b',', format_score(*value).as_bytes()),
            Reply::Double(value) => Reply::text(&format_score(*value)).encode(resp3, out),
            // Its connection closes without it (see `is_cut`).
            Reply::OverLimit(_) => {}
        }
    }
}

fn line(out: &mut BytesMut, marker: u8, text: &[u8]) {
    out.reserve(text.len() + 3);
    out.put_u8(marker);
    out.put_slice(text);
    out.put_slice(b"\r\n");
}

/// Formats a double reply as Redis 7.0's `addReplyDouble` does (scores of ZSCORE, ZRANGE
/// WITHSCORES, ZINCRBY, ..., in RESP2 and RESP3): C's `%.17g`, so 0.1 is `0.10000000000000001`
/// and 1e300 `1.0000000000000001e+300`; infinities `inf`/`-inf`.
pub fn format_score(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // 17 significant digits, rounded once; the exponent after rounding picks the style.
    let scientific = format!("{value:.16e}");
    let (mantissa, exponent) = scientific.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("{:e}'s exponent is a number");
    if !(-4..17).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{}e{sign}{:02}", strip_fraction_zeros(mantissa), exponent.abs());
    }
    let decimals = usize::try_from(16 - exponent).expect("exponent below 17");
    strip_fraction_zeros(&format!("{value:.decimals$}")).to_owned()
}

/// `%g` drops trailing zeros of the fraction, and the point when nothing is left of it.
fn strip_fraction_zeros(text: &str) -> &str {
    match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.'),
        false => text,
    }
}

/// Formats a float as Redis does for INCRBYFLOAT: shortest round-trip form, no exponent, no
/// trailing `.0`.
pub fn format_double(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let text = format!("{value}");
    match text.strip_suffix(".0") {
        Some(integer) => integer.to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &[u8]) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        RequestParser::default().parse(&mut BytesMut::from(input), false)
    }

    fn text(input: &[u8]) -> String {
        parse(input).unwrap_err().0
    }

    #[test]
    fn multibulk_requests_parse_whole_or_not_at_all() {
        let full = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        assert_eq!(
            parse(full).unwrap().unwrap(),
            vec![Bytes::from("GET"), Bytes::from("k")]
        );
        for cut in 1..full.len() {
            let mut buf = BytesMut::from(&full[..cut]);
            assert_eq!(
                RequestParser::default().parse(&mut buf, false).unwrap(),
                None,
                "cut at {cut}"
            );
            assert_eq!(buf.len(), cut);
        }
    }

    #[test]
    fn empty_requests_are_skipped() {
        for input in [&b"*0\r\n"[..], b"*-1\r\n", b"*-10\r\n", b"\r\n", b"  \n"] {
            let mut buf = BytesMut::from(input);
            assert_eq!(RequestParser::default().parse(&mut buf, false).unwrap(), None);
            assert!(buf.is_empty(), "{input:?} is consumed");
        }
        assert_eq!(
            parse(b"*0\r\n*-1\r\nPING\r\n").unwrap().unwrap(),
            vec![Bytes::from("PING")]
        );
    }

    #[test]
    fn malformed_and_oversized_frames_are_refused() {
        assert_eq!(text(b"*x\r\n"), "ERR Protocol error: invalid multibulk length");
        assert_eq!(text(b"*+1\r\n"), "ERR Protocol error: invalid multibulk length");
        assert_eq!(
            text(b"*99999999999\r\n"),
            "ERR Protocol error: invalid multibulk length"
        );
        assert_eq!(text(b"*1\r\n:1\r\n"), "ERR Protocol error: expected '$', got ':'");
        assert_eq!(text(b"*1\r\n$536870913\r\n"), "ERR Protocol error: invalid bulk length");
        assert_eq!(text(b"*1\r\n$-2\r\n"), "ERR Protocol error: invalid bulk length");
        assert_eq!(text(b"*1\r\n$1\r\nab\r\n"), "ERR Protocol error: invalid bulk length");
        assert_eq!(
            text(&vec![b'a'; MAX_INLINE_LEN + 1]),
            "ERR Protocol error: too big inline request"
        );
        let mut count = b"*".to_vec();
        count.resize(MAX_INLINE_LEN + 2, b'1');
        assert_eq!(text(&count), "ERR Protocol error: too big mbulk count string");
        let mut len = b"*1\r\n$".to_vec();
        len.resize(MAX_INLINE_LEN + 8, b'1');
        assert_eq!(text(&len), "ERR Protocol error: too big bulk count string");
        assert_eq!(text(b"GET \"k\n"), "ERR Protocol error: unbalanced quotes in request");
        assert_eq!(
            text(b"GET \"k\"x\n"),
            "ERR Protocol error: unbalanced quotes in request"
        );
    }

    #[test]
    fn unauthenticated_clients_get_redis_limits() {
        let unauthenticated = |input: &[u8]| RequestParser::default().parse(&mut BytesMut::from(input), true);
        assert_eq!(
            unauthenticated(b"*11\r\n").unwrap_err().0,
            "ERR Protocol error: unauthenticated multibulk length"
        );
        assert_eq!(
            unauthenticated(b"*1\r\n$16385\r\n").unwrap_err().0,
            "ERR Protocol error: unauthenticated bulk length"
        );
        assert_eq!(unauthenticated(b"*10\r\n$16384\r\n").unwrap(), None);
        assert_eq!(parse(b"*11\r\n$16385\r\n").unwrap(), None);
    }

    #[test]
    fn inline_requests_split_like_redis() {
        let args = parse(b"SET \"a b\" 'c d' \"\\x41\\n\" 'it\\'s' x\"y z\"\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            args,
            vec![
                Bytes::from("SET"),
                Bytes::from("a b"),
                Bytes::from("c d"),
                Bytes::from("A\n"),
                Bytes::from("it's"),
                Bytes::from("xy z"),
            ]
        );
        assert_eq!(parse(b"\r\n\r\nPING\n").unwrap().unwrap(), vec![Bytes::from("PING")]);
        assert_eq!(parse(b"\"\" ''\n").unwrap().unwrap(), vec![Bytes::new(), Bytes::new()]);
    }

    /// A large request fed a few bytes at a time is scanned once: the parser's place is kept.
    #[test]
    fn a_request_arriving_in_pieces_is_scanned_once() {
        let keys: Vec<String> = (0..20_000).map(|i| format!("key{i}")).collect();
        let frame = encode(&keys);
        let mut parser = RequestParser::default();
        let mut buf = BytesMut::new();
        let mut parsed = None;
        for piece in frame.chunks(16) {
            assert!(parsed.is_none(), "complete before its last byte");
            buf.extend_from_slice(piece);
            parsed = parser.parse(&mut buf, false).unwrap();
        }
        let parsed = parsed.expect("complete at its last byte");
        assert_eq!(parsed.len(), keys.len());
        assert!(parsed.iter().zip(&keys).all(|(arg, key)| arg == key.as_bytes()));
        assert!(buf.is_empty());
        assert_eq!(parser.held_bytes(), 0);
    }

    fn encode(args: &[impl AsRef<[u8]>]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.as_ref().len()).as_bytes());
            out.extend_from_slice(arg.as_ref());
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// Every request that can be parsed from `input` fed in `pieces`, and the error if
        /// one ends it. Checks on the way that the parser never consumes more than it was given.
        fn parse_all(input: &[u8], cuts: &[usize], unauthenticated: bool) -> (Vec<Vec<Bytes>>, Option<ProtocolError>) {
            let mut parser = RequestParser::default();
            let mut buf = BytesMut::new();
            let mut requests = Vec::new();
            let mut fed = 0;
            let mut consumed = 0;
            let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut % (input.len() + 1)).collect();
            cuts.push(input.len());
            cuts.sort_unstable();
            for cut in cuts {
                buf.extend_from_slice(&input[fed..cut]);
                fed = cut;
                loop {
                    let before = buf.len();
                    let result = parser.parse(&mut buf, unauthenticated);
                    assert!(buf.len() <= before, "the parser only consumes");
                    consumed += before - buf.len();
                    assert!(consumed <= fed, "consumed {consumed} of {fed} bytes");
                    match result {
                        Ok(Some(request)) => {
                            assert!(!request.is_empty(), "no empty request is yielded");
                            requests.push(request);
                        }
                        Ok(None) => break,
                        Err(err) => return (requests, Some(err)),
                    }
                }
            }
            (requests, None)
        }

        fn command() -> impl Strategy<Value = Vec<Vec<u8>>> {
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..8)
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

            /// Arbitrary bytes, in arbitrary pieces: no panic, and the outcome does not
            /// depend on how the bytes were split.
            #[test]
            fn arbitrary_bytes_never_panic(
                input in prop::collection::vec(any::<u8>(), 0..512),
                cuts in prop::collection::vec(any::<usize>(), 0..16),
                unauthenticated in any::<bool>(),
            ) {
                let whole = parse_all(&input, &[], unauthenticated);
                let split = parse_all(&input, &cuts, unauthenticated);
                prop_assert_eq!(whole, split);
            }

            /// Bytes that look like RESP (its markers, digits, CR and LF), where the parser's
            /// interesting states are.
            #[test]
            fn resp_like_bytes_never_panic(
                input in prop::collection::vec(prop::sample::select(&b"*$\r\n-0123456789 \"'xX"[..]), 0..256),
                cuts in prop::collection::vec(any::<usize>(), 0..16),
                unauthenticated in any::<bool>(),
            ) {
                let whole = parse_all(&input, &[], unauthenticated);
                let split = parse_all(&input, &cuts, unauthenticated);
                prop_assert_eq!(whole, split);
            }

            /// Valid commands, pipelined and split anywhere, parse to themselves.
            #[test]
            fn valid_frames_split_anywhere_parse_the_same(
                commands in prop::collection::vec(command(), 1..6),
                cuts in prop::collection::vec(any::<usize>(), 0..24),
            ) {
                let input: Vec<u8> = commands.iter().flat_map(|args| encode(args)).collect();
                let (requests, error) = parse_all(&input, &cuts, false);
                prop_assert_eq!(error, None);
                let expected: Vec<Vec<Bytes>> = commands
                    .iter()
                    .map(|args| args.iter().map(|arg| Bytes::copy_from_slice(arg)).collect())
                    .collect();
                prop_assert_eq!(requests, expected);
            }
        }
    }

    #[test]
    fn replies_encode_per_protocol() {
        let encode = |reply: Reply, resp3| {
            let mut out = BytesMut::new();
            reply.encode(resp3, &mut out);
            out
        };
        assert_eq!(&encode(Reply::Nil, false)[..], b"$-1\r\n");
        assert_eq!(&encode(Reply::Nil, true)[..], b"_\r\n");
        let map = Reply::Map(vec![(Reply::text("a"), Reply::Integer(1))]);
        assert_eq!(&encode(map.clone(), false)[..], b"*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(&encode(map, true)[..], b"%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(&encode(Reply::Double(3.5), true)[..], b",3.5\r\n");
        assert_eq!(&encode(Reply::Double(0.1), true)[..], b",0.10000000000000001\r\n");
        assert_eq!(format_double(10.0), "10");
        assert_eq!(format_double(10.5), "10.5");
    }
}
