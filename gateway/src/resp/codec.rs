//! RESP framing: requests in (arrays of bulk strings, or inline lines as telnet sends them) with
//! strict limits, replies out in RESP2 or RESP3.
//!
//! Clients only ever send arrays of bulk strings, so the request side is a small parser that
//! refuses anything oversized before allocating for it; replies are a handful of types.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Redis's `proto-max-bulk-len` default: the largest value a client may send.
pub const MAX_BULK_LEN: usize = 512 * 1024 * 1024;
/// Redis's limit on an inline (telnet-style) request line.
pub const MAX_INLINE_LEN: usize = 64 * 1024;
/// Redis accepts up to 1,048,576 arguments per command as a multibulk length sanity bound.
pub const MAX_ARGS: usize = 1024 * 1024;
/// How far ahead of the received bytes the input buffer grows for a large bulk.
const MAX_RESERVE: usize = 4 * 1024 * 1024;
/// Headers (`*<n>`, `$<n>`) are short; a longer one is garbage.
const MAX_HEADER_LEN: usize = 32;

/// A request that breaks the protocol: Redis answers with this text and closes the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl ProtocolError {
    fn new(detail: &str) -> ProtocolError {
        ProtocolError(format!("ERR Protocol error: {detail}"))
    }
}

/// Parses one complete request from the front of `buf`, consuming it. `Ok(None)` means more
/// bytes are needed; `buf` is left untouched then.
pub fn parse_request(buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    loop {
        let Some(&first) = buf.first() else {
            return Ok(None);
        };
        if first != b'*' {
            match parse_inline(buf)? {
                Some(args) if args.is_empty() => continue,
                other => return Ok(other),
            }
        }
        return parse_multibulk(buf);
    }
}

/// Where the line starting at `from` ends (the index of its `\r`), if it is complete.
fn line_end(buf: &[u8], from: usize, limit: usize) -> Result<Option<usize>, ()> {
    let window = &buf[from..buf.len().min(from + limit + 2)];
    match window.windows(2).position(|pair| pair == b"\r\n") {
        Some(at) => Ok(Some(from + at)),
        None if window.len() >= limit + 2 => Err(()),
        None => Ok(None),
    }
}

fn parse_number(digits: &[u8]) -> Option<i64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn parse_multibulk(buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let invalid_count = || ProtocolError::new("invalid multibulk length");
    let Some(end) = line_end(buf, 1, MAX_HEADER_LEN).map_err(|()| invalid_count())? else {
        return Ok(None);
    };
    let count = parse_number(&buf[1..end]).ok_or_else(invalid_count)?;
    if count > MAX_ARGS as i64 {
        return Err(invalid_count());
    }
    let mut at = end + 2;
    if count <= 0 {
        buf.advance(at);
        return Ok(Some(Vec::new()));
    }
    // First pass: find where every argument lies without copying, so a half-arrived request
    // costs nothing but the scan.
    let mut spans = Vec::with_capacity((count as usize).min(1024));
    for _ in 0..count {
        let Some(&marker) = buf.get(at) else {
            return Ok(None);
        };
        if marker != b'$' {
            return Err(ProtocolError::new(&format!("expected '$', got '{}'", marker as char)));
        }
        let invalid_len = || ProtocolError::new("invalid bulk length");
        let Some(end) = line_end(buf, at + 1, MAX_HEADER_LEN).map_err(|()| invalid_len())? else {
            return Ok(None);
        };
        let len = parse_number(&buf[at + 1..end]).ok_or_else(invalid_len)?;
        if !(0..=MAX_BULK_LEN as i64).contains(&len) {
            return Err(invalid_len());
        }
        let start = end + 2;
        let stop = start + len as usize;
        if buf.len() < stop + 2 {
            // Room for the bulk in large steps, but never more than a step ahead of the bytes
            // that actually arrived: a header alone does not get 512 MiB allocated.
            buf.reserve((stop + 2 - buf.len()).min(MAX_RESERVE));
            return Ok(None);
        }
        if &buf[stop..stop + 2] != b"\r\n" {
            return Err(invalid_len());
        }
        spans.push((start, stop));
        at = stop + 2;
    }
    let frame = buf.split_to(at).freeze();
    Ok(Some(
        spans
            .into_iter()
            .map(|(start, stop)| frame.slice(start..stop))
            .collect(),
    ))
}

fn parse_inline(buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let newline = buf.iter().take(MAX_INLINE_LEN + 1).position(|&byte| byte == b'\n');
    let Some(newline) = newline else {
        if buf.len() > MAX_INLINE_LEN {
            return Err(ProtocolError::new("too big inline request"));
        }
        return Ok(None);
    };
    let line = buf.split_to(newline + 1);
    let line = line.strip_suffix(b"\n").unwrap_or(&line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    split_inline(line)
        .map(Some)
        .ok_or_else(|| ProtocolError::new("unbalanced quotes in request"))
}

/// Splits an inline line into arguments as redis-cli and Redis do: whitespace separates, and
/// double or single quotes group (double quotes with `\"`, `\\`, `\n`, `\r`, `\t`, `\xHH`).
fn split_inline(line: &[u8]) -> Option<Vec<Bytes>> {
    let mut args = Vec::new();
    let mut i = 0;
    while i < line.len() {
        if line[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let mut arg = Vec::new();
        match line[i] {
            quote @ (b'"' | b'\'') => {
                i += 1;
                loop {
                    let &byte = line.get(i)?;
                    i += 1;
                    if byte == quote {
                        if line.get(i).is_some_and(|next| !next.is_ascii_whitespace()) {
                            return None;
                        }
                        break;
                    }
                    if byte == b'\\' && quote == b'"' {
                        let &escaped = line.get(i)?;
                        i += 1;
                        arg.push(match escaped {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'x' if i + 1 < line.len() => {
                                let hex = std::str::from_utf8(&line[i..i + 2]).ok();
                                match hex.and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
                                    Some(value) => {
                                        i += 2;
                                        value
                                    }
                                    None => b'x',
                                }
                            }
                            other => other,
                        });
                    } else {
                        arg.push(byte);
                    }
                }
            }
            _ => {
                while i < line.len() && !line[i].is_ascii_whitespace() {
                    arg.push(line[i]);
                    i += 1;
                }
            }
        }
        args.push(Bytes::from(arg));
    }
    Some(args)
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
    Double(f64),
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
            Reply::Array(items) => {
                line(out, b'*', items.len().to_string().as_bytes());
                for item in items {
                    item.encode(resp3, out);
                }
            }
            Reply::Map(pairs) => {
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
            Reply::Double(value) if resp3 => line(out, b',', format_double(*value).as_bytes()),
            Reply::Double(value) => Reply::text(&format_double(*value)).encode(resp3, out),
        }
    }
}

fn line(out: &mut BytesMut, marker: u8, text: &[u8]) {
    out.reserve(text.len() + 3);
    out.put_u8(marker);
    out.put_slice(text);
    out.put_slice(b"\r\n");
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
        parse_request(&mut BytesMut::from(input))
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
            assert_eq!(parse_request(&mut buf).unwrap(), None, "cut at {cut}");
            assert_eq!(buf.len(), cut);
        }
    }

    #[test]
    fn malformed_and_oversized_frames_are_refused() {
        let text = |input: &[u8]| parse(input).unwrap_err().0;
        assert_eq!(text(b"*x\r\n"), "ERR Protocol error: invalid multibulk length");
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
        assert_eq!(text(b"GET \"k\n"), "ERR Protocol error: unbalanced quotes in request");
    }

    #[test]
    fn inline_requests_split_like_redis() {
        let args = parse(b"SET \"a b\" 'c d' \"\\x41\\n\"\r\n").unwrap().unwrap();
        assert_eq!(
            args,
            vec![
                Bytes::from("SET"),
                Bytes::from("a b"),
                Bytes::from("c d"),
                Bytes::from("A\n")
            ]
        );
        assert_eq!(parse(b"\r\n\r\nPING\n").unwrap().unwrap(), vec![Bytes::from("PING")]);
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
        assert_eq!(format_double(10.0), "10");
        assert_eq!(format_double(10.5), "10.5");
    }
}
