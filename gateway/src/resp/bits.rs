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

/// The inclusive span `range` selects among `len` units, as Redis resolves it; `None` when
/// empty.
fn span(range: BitRange, len: i64) -> Option<(i64, i64)> {
    let mut start = range.start;
    let mut end = range.end.unwrap_or(len - 1);
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0).min(len - 1);
    (len > 0 && start <= end).then_some((start, end))
}

/// BITCOUNT: the set bits of `value`, or of the part `range` selects.
pub fn count(value: &[u8], range: Option<BitRange>) -> i64 {
    let Some(range) = range else {
        return value.iter().map(|b| b.count_ones() as i64).sum();
    };
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
}
