//! Redis's HyperLogLog string (hyperloglog.c, Redis 7): the `HYLL` header, the sparse and
//! dense encodings, the same hash, and the same in-place sparse updates, so that the bytes a
//! PFADD leaves are the bytes redis-server leaves for the same elements (GET, SET and DUMP of
//! them interoperate) and PFCOUNT estimates exactly as it does.

/// Registers: 2^14, 6 bits each in the dense encoding.
const P: u32 = 14;
const Q: u32 = 64 - P;
pub const REGISTERS: usize = 1 << P;
const REGISTER_MAX: u8 = 63;
pub const HEADER: usize = 16;
/// A dense HLL's length, exactly.
pub const DENSE_SIZE: usize = HEADER + (REGISTERS * 6).div_ceil(8);
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
/// Redis's `hll-sparse-max-bytes` default: a sparse HLL that would grow past it turns dense.
const SPARSE_MAX_BYTES: usize = 3000;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;
/// Longer strings are not read: no valid HLL is this long (a dense one is [`DENSE_SIZE`], a
/// sparse one at most a byte a register past its header).
pub const MAX_HLL_BYTES: u64 = 32 * 1024;

pub const CORRUPTED: &str = "INVALIDOBJ Corrupted HLL object detected";
pub const NOT_AN_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";

/// Redis's MurmurHash64A, seed 0xadc83b19.
fn murmur64a(key: &[u8]) -> u64 {
    const M: u64 = 0xc6a4a7935bd1e995;
    const R: u32 = 47;
    let mut h: u64 = 0xadc8_3b19u64 ^ (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for chunk in &mut chunks {
        let mut k = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate() {
            h ^= u64::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element falls in and the length of its hash's run of zeros plus one.
fn pattern(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

fn dense_get(registers: &[u8], index: usize) -> u8 {
    let byte = index * 6 / 8;
    let fb = (index * 6) & 7;
    let b0 = u16::from(registers[byte]);
    let b1 = u16::from(registers.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> fb) | (b1 << (8 - fb))) & u16::from(REGISTER_MAX)) as u8
}

fn dense_set(registers: &mut [u8], index: usize, value: u8) {
    let byte = index * 6 / 8;
    let fb = (index * 6) & 7;
    let v = u16::from(value);
    registers[byte] &= !((u16::from(REGISTER_MAX) << fb) as u8);
    registers[byte] |= (v << fb) as u8;
    if let Some(next) = registers.get_mut(byte + 1) {
        *next &= !((u16::from(REGISTER_MAX) >> (8 - fb)) as u8);
        *next |= (v >> (8 - fb)) as u8;
    }
}

enum Op {
    Zero(usize),
    XZero(usize),
    Val(u8, usize),
}

/// The sparse opcode at `at`: `(op, its length in bytes)`.
fn opcode(sparse: &[u8], at: usize) -> Option<(Op, usize)> {
    let byte = *sparse.get(at)?;
    Some(match byte & 0xc0 {
        0x00 => (Op::Zero(usize::from(byte & 0x3f) + 1), 1),
        0x40 => {
            let low = *sparse.get(at + 1)?;
            (Op::XZero(((usize::from(byte & 0x3f) << 8) | usize::from(low)) + 1), 2)
        }
        _ => (Op::Val(((byte >> 2) & 0x1f) + 1, usize::from(byte & 3) + 1), 1),
    })
}

fn val(value: u8, len: usize) -> u8 {
    0x80 | ((value - 1) << 2) | (len as u8 - 1)
}

/// A zero run of `len` (at most [`XZERO_MAX_LEN`]) as its opcode.
fn zeros(out: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        let l = len - 1;
        out.extend_from_slice(&[0x40 | (l >> 8) as u8, (l & 0xff) as u8]);
    } else {
        out.push((len - 1) as u8);
    }
}

/// An HLL string, valid as far as its header goes (Redis's `isHLLObjectOrReply`).
pub struct Hll(Vec<u8>);

impl Hll {
    /// A new empty HLL: sparse, all registers one XZERO run, the cached count 0.
    pub fn empty() -> Hll {
        let mut bytes = b"HYLL".to_vec();
        bytes.extend_from_slice(&[SPARSE, 0, 0, 0]);
        bytes.extend_from_slice(&[0; 8]);
        zeros(&mut bytes, XZERO_MAX_LEN);
        Hll(bytes)
    }

    /// A string's bytes as an HLL; `None` when it is not one.
    pub fn from_bytes(bytes: &[u8]) -> Option<Hll> {
        let valid = bytes.len() >= HEADER
            && &bytes[..4] == b"HYLL"
            && bytes[4] <= SPARSE
            && (bytes[4] != DENSE || bytes.len() == DENSE_SIZE);
        valid.then(|| Hll(bytes.to_vec()))
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    fn dense(&self) -> bool {
        self.0[4] == DENSE
    }

    pub fn invalidate_cache(&mut self) {
        self.0[15] |= 0x80;
    }

    /// The cached count, when valid.
    pub fn cached(&self) -> Option<u64> {
        (self.0[15] & 0x80 == 0).then(|| u64::from_le_bytes(self.0[8..16].try_into().expect("8 bytes")))
    }

    /// Adds an element: whether a register changed; `Err` for a corrupted sparse HLL.
    pub fn add(&mut self, element: &[u8]) -> Result<bool, ()> {
        let (index, count) = pattern(element);
        self.set(index, count)
    }

    fn set(&mut self, index: usize, count: u8) -> Result<bool, ()> {
        if self.dense() {
            let registers = &mut self.0[HEADER..];
            if count > dense_get(registers, index) {
                dense_set(registers, index, count);
                return Ok(true);
            }
            return Ok(false);
        }
        self.sparse_set(index, count)
    }

    /// Redis's `hllSparseSet`, step by step: the same splits, the same merges, the same
    /// promotion to dense.
    fn sparse_set(&mut self, index: usize, count: u8) -> Result<bool, ()> {
        if count > VAL_MAX_VALUE {
            return self.promote(index, count);
        }
        let end = self.0.len();
        let mut p = HEADER;
        let mut first = 0usize;
        let mut prev: Option<usize> = None;
        let mut found = None;
        while p < end {
            let (op, oplen) = opcode(&self.0, p).ok_or(())?;
            let span = match op {
                Op::Zero(len) | Op::XZero(len) | Op::Val(_, len) => len,
            };
            if index < first + span {
                found = Some((op, oplen, span));
                break;
            }
            prev = Some(p);
            p += oplen;
            first += span;
        }
        let (op, oplen, span) = found.ok_or(())?;
        let last = first + span - 1;
        match op {
            Op::Val(old, _) if old >= count => return Ok(false),
            Op::Val(_, 1) | Op::Zero(1) => {
                self.0[p] = val(count, 1);
                self.merge(prev.unwrap_or(HEADER));
                return Ok(true);
            }
            _ => {}
        }
        let mut seq = Vec::with_capacity(5);
        match op {
            Op::Zero(_) | Op::XZero(_) => {
                if index != first {
                    zeros(&mut seq, index - first);
                }
                seq.push(val(count, 1));
                if index != last {
                    zeros(&mut seq, last - index);
                }
            }
            Op::Val(current, _) => {
                if index != first {
                    seq.push(val(current, index - first));
                }
                seq.push(val(count, 1));
                if index != last {
                    seq.push(val(current, last - index));
                }
            }
        }
        if seq.len() > oplen && self.0.len() + seq.len() - oplen > SPARSE_MAX_BYTES {
            return self.promote(index, count);
        }
        self.0.splice(p..p + oplen, seq);
        self.merge(prev.unwrap_or(HEADER));
        Ok(true)
    }

    /// Step 4 of `hllSparseSet`: merges adjacent VAL opcodes of one value, scanning up to five
    /// opcodes from `p`.
    fn merge(&mut self, mut p: usize) {
        let mut scan = 5;
        while p < self.0.len() && scan > 0 {
            scan -= 1;
            let byte = self.0[p];
            if byte & 0xc0 == 0x40 {
                p += 2;
                continue;
            }
            if byte & 0xc0 == 0 {
                p += 1;
                continue;
            }
            if let Some(&next) = self.0.get(p + 1)
                && next & 0x80 != 0
            {
                let (v1, l1) = (((byte >> 2) & 0x1f) + 1, usize::from(byte & 3) + 1);
                let (v2, l2) = (((next >> 2) & 0x1f) + 1, usize::from(next & 3) + 1);
                if v1 == v2 && l1 + l2 <= VAL_MAX_LEN {
                    self.0[p + 1] = val(v1, l1 + l2);
                    self.0.remove(p);
                    continue;
                }
            }
            p += 1;
        }
    }

    fn promote(&mut self, index: usize, count: u8) -> Result<bool, ()> {
        self.densify()?;
        let registers = &mut self.0[HEADER..];
        if count > dense_get(registers, index) {
            dense_set(registers, index, count);
        }
        Ok(true)
    }

    /// Redis's `hllSparseToDense`: the header (and its cached count) kept.
    fn densify(&mut self) -> Result<(), ()> {
        if self.dense() {
            return Ok(());
        }
        let registers = self.registers().ok_or(())?;
        let mut dense = self.0[..HEADER].to_vec();
        dense[4] = DENSE;
        dense.resize(DENSE_SIZE, 0);
        for (index, value) in registers.iter().enumerate() {
            if *value != 0 {
                dense_set(&mut dense[HEADER..], index, *value);
            }
        }
        self.0 = dense;
        Ok(())
    }

    /// Every register's value; `None` for a corrupted sparse HLL.
    pub fn registers(&self) -> Option<Vec<u8>> {
        if self.dense() {
            return Some(
                (0..REGISTERS)
                    .map(|index| dense_get(&self.0[HEADER..], index))
                    .collect(),
            );
        }
        let mut registers = Vec::with_capacity(REGISTERS);
        let mut p = HEADER;
        while p < self.0.len() {
            let (op, oplen) = opcode(&self.0, p)?;
            match op {
                Op::Zero(len) | Op::XZero(len) => registers.resize(registers.len() + len, 0),
                Op::Val(value, len) => registers.resize(registers.len() + len, value),
            }
            if registers.len() > REGISTERS {
                return None;
            }
            p += oplen;
        }
        (registers.len() == REGISTERS).then_some(registers)
    }

    /// PFMERGE's writing of `max` into this HLL (dense first when `dense`): register by
    /// register, as Redis writes them, so that a sparse result has Redis's bytes.
    pub fn merge_registers(&mut self, max: &[u8], dense: bool) -> Result<(), ()> {
        if dense {
            self.densify()?;
        }
        for (index, value) in max.iter().enumerate() {
            if *value != 0 {
                self.set(index, *value)?;
            }
        }
        self.invalidate_cache();
        Ok(())
    }

    pub fn is_dense(&self) -> bool {
        self.dense()
    }
}

/// Redis's estimate from registers (Ertl's improved estimator, as `hllCount`).
pub fn count(registers: &[u8]) -> u64 {
    let m = REGISTERS as f64;
    let mut histogram = [0u32; 64];
    for value in registers {
        histogram[usize::from(*value) & 63] += 1;
    }
    let mut z = m * tau((m - f64::from(histogram[Q as usize + 1])) / m);
    for j in (1..=Q as usize).rev() {
        z += f64::from(histogram[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histogram[0]) / m);
    const ALPHA_INF: f64 = 0.721_347_520_444_481_7;
    (ALPHA_INF * m * m / z).round() as u64
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if previous == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if previous == z {
            return z / 3.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_hll_is_redis_s() {
        // redis-server 7.0.15: PFADD k, then GET k.
        let mut empty = Hll::empty();
        empty.invalidate_cache();
        assert_eq!(
            empty.into_bytes(),
            b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x7f\xff".to_vec()
        );
        assert_eq!(count(&Hll::empty().registers().unwrap()), 0);
    }

    #[test]
    fn dense_registers_round_trip() {
        let mut registers = vec![0u8; DENSE_SIZE - HEADER];
        for index in [0, 1, 2, 3, 4, 5, 16382, 16383] {
            dense_set(&mut registers, index, (index % 63) as u8 + 1);
        }
        for index in [0, 1, 2, 3, 4, 5, 16382, 16383] {
            assert_eq!(dense_get(&registers, index), (index % 63) as u8 + 1);
        }
        assert_eq!(dense_get(&registers, 6), 0);
    }
}
