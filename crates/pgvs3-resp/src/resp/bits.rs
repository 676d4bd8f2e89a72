//! Bit operations on string values (SETBIT, GETBIT, BITCOUNT, BITPOS), as Redis counts bits:
//! bit 0 is the most significant bit of byte 0.

use bytes::{Bytes, BytesMut};

/// A BITCOUNT/BITPOS range: byte or bit indices, negative ones counting from the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BitRange {
    pub start: i64,
    pub end: Option<i64>,
    /// Indices count bits (`BIT`) rather than bytes (`BYTE`, the default).
    pub bits: bool,
}

/// The bit at `offset` (0 beyond the value's end).
pub fn get(value: &[u8], offset: u64) -> bool {
    let byte = (offset / 8) as usize;
    value.get(byte).is_some_and(|b| b & (0x80 >> (offset % 8)) != 0)
}

/// `value` with the bit at `offset` set to `bit`, grown with zero bytes as needed, and the bit
/// it had.
pub fn set(value: &[u8], offset: u64, bit: bool) -> (Bytes, bool) {
    let byte = (offset / 8) as usize;
    let mut out = BytesMut::from(value);
    if out.len() <= byte {
        out.resize(byte + 1, 0);
    }
    let mask = 0x80u8 >> (offset % 8);
    let old = out[byte] & mask != 0;
    if bit {
        out[byte] |= mask;
    } else {
        out[byte] &= !mask;
    }
    (out.freeze(), old)
}

/// The inclusive span `start..=end` selects among `len` units (bytes of GETRANGE, bytes or
/// bits of BITCOUNT and BITPOS), as Redis resolves it: negative indexes count from the end, then
/// both are clamped into the value. `None` when it selects nothing.
pub fn clamp(start: i64, end: i64, len: i64) -> Option<(i64, i64)> {
    let start = if start < 0 { (start + len).max(0) } else { start };
    let end = if end < 0 { (end + len).max(0) } else { end }.min(len - 1);
    (len > 0 && start <= end).then_some((start, end))
}

/// Whether both ends count from the end and the range is reversed (`-1 -2`). GETRANGE and
/// BITCOUNT answer such a range empty before clamping (clamped, `-6 -7` of a 6-byte value would
/// select its first byte); Redis 7.0's BITPOS does not, and clamps it.
pub fn reversed_from_end(start: i64, end: i64) -> bool {
    start < 0 && end < 0 && start > end
}

fn span(range: BitRange, len: i64) -> Option<(i64, i64)> {
    clamp(range.start, range.end.unwrap_or(len - 1), len)
}

/// BITCOUNT: the set bits of `value`, or of the part `range` selects.
pub fn count(value: &[u8], range: Option<BitRange>) -> i64 {
    let Some(range) = range else {
        return value.iter().map(|b| b.count_ones() as i64).sum();
    };
    if range.end.is_some_and(|end| reversed_from_end(range.start, end)) {
        return 0;
    }
    if range.bits {
        let Some((start, end)) = span(range, value.len() as i64 * 8) else {
            return 0;
        };
        return (start..=end).filter(|bit| get(value, *bit as u64)).count() as i64;
    }
    match span(range, value.len() as i64) {
        Some((start, end)) => value[start as usize..=end as usize]
            .iter()
            .map(|b| b.count_ones() as i64)
            .sum(),
        None => 0,
    }
}

/// BITPOS: the position of the first bit equal to `bit` in the part `range` selects (all of
/// `value` without one), or -1. Looking for a 0 without an explicit end, the value counts as
/// padded with zeros, so a value of all ones answers the first bit past its end, as in Redis.
pub fn position(value: &[u8], bit: bool, range: Option<BitRange>) -> i64 {
    let range = range.unwrap_or(BitRange {
        start: 0,
        end: None,
        bits: false,
    });
    let bit_len = value.len() as i64 * 8;
    let span = if range.bits {
        span(range, bit_len)
    } else {
        span(range, value.len() as i64).map(|(start, end)| (start * 8, end * 8 + 7))
    };
    let Some((first, last)) = span else {
        // An empty key holds no ones; its (padded) first zero is bit 0.
        return if value.is_empty() && !bit { 0 } else { -1 };
    };
    if let Some(found) = (first..=last).find(|at| get(value, *at as u64) == bit) {
        return found;
    }
    if !bit && range.end.is_none() { last + 1 } else { -1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(range: (i64, i64)) -> Option<BitRange> {
        Some(BitRange {
            start: range.0,
            end: Some(range.1),
            bits: false,
        })
    }

    #[test]
    fn bits_count_from_the_most_significant_bit() {
        let (value, old) = set(b"", 7, true);
        assert_eq!((&value[..], old), (&[0x01][..], false));
        let (value, old) = set(&value, 7, false);
        assert_eq!((&value[..], old), (&[0x00][..], true));
        assert!(get(b"\x80", 0) && !get(b"\x80", 1) && !get(b"\x80", 100));
        let (grown, _) = set(b"a", 23, true);
        assert_eq!(grown.len(), 3);
    }

    #[test]
    fn bitcount_and_bitpos_match_redis_examples() {
        // The examples of Redis's documentation.
        assert_eq!(count(b"foobar", None), 26);
        assert_eq!(count(b"foobar", bytes((0, 0))), 4);
        assert_eq!(count(b"foobar", bytes((1, 1))), 6);
        assert_eq!(
            count(
                b"foobar",
                Some(BitRange {
                    start: 5,
                    end: Some(30),
                    bits: true
                })
            ),
            17
        );
        assert_eq!(count(b"foobar", bytes((-2, -1))), 7);
        assert_eq!(count(b"foobar", bytes((3, 1))), 0);
        assert_eq!(position(b"\xff\xf0\x00", false, None), 12);
        assert_eq!(
            position(
                b"\x00\xff\xf0",
                true,
                bytes((0, -1)).map(|r| BitRange { end: None, ..r })
            ),
            8
        );
        assert_eq!(
            position(
                b"\x00\xff\xf0",
                true,
                bytes((2, -1)).map(|r| BitRange { end: None, ..r })
            ),
            16
        );
        assert_eq!(
            position(
                b"\x00\xff\xf0",
                true,
                Some(BitRange {
                    start: 7,
                    end: Some(15),
                    bits: true
                })
            ),
            8
        );
        assert_eq!(position(b"\x00\x00\x00", true, None), -1);
        assert_eq!(position(b"\xff\xff\xff", false, None), 24, "padded with zeros");
        assert_eq!(position(b"\xff\xff\xff", false, bytes((0, -1))), -1, "an explicit end");
        assert_eq!(position(b"", false, None), 0);
        assert_eq!(position(b"", true, None), -1);
    }

    #[test]
    fn ranges_resolve_as_redis_7_resolves_them() {
        // (start, end) on "foobar": BITCOUNT by bytes and by bits, BITPOS of a 1 and of a 0 by
        // bytes, BITPOS of a 1 by bits, as redis-server 7.0.15 answered them.
        let table = [
            ((-6, -7), [0, 0, 1, 0, -1]),
            ((-7, -8), [0, 0, 1, 0, -1]),
            ((-1, -2), [0, 0, -1, -1, -1]),
            ((5, 3), [0, 0, -1, -1, -1]),
            ((-100, -100), [4, 0, 1, 0, -1]),
            ((-100, -7), [4, 23, 1, 0, 1]),
            ((0, -7), [4, 23, 1, 0, 1]),
            ((-7, 0), [4, 0, 1, 0, -1]),
            ((7, 8), [0, 0, -1, -1, -1]),
            ((-6, -6), [4, 1, 1, 0, 42]),
            ((-2, -1), [7, 1, 33, 32, 46]),
            ((10, -100), [0, 0, -1, -1, -1]),
        ];
        for ((start, end), expected) in table {
            let range = |bits| {
                Some(BitRange {
                    start,
                    end: Some(end),
                    bits,
                })
            };
            let got = [
                count(b"foobar", range(false)),
                count(b"foobar", range(true)),
                position(b"foobar", true, range(false)),
                position(b"foobar", false, range(false)),
                position(b"foobar", true, range(true)),
            ];
            assert_eq!(got, expected, "{start} {end}");
        }
    }
}
