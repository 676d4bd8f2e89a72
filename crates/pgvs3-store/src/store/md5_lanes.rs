//! MD5 of many values at once: the blocks of up to eight values side by side in the lanes of
//! AVX2 registers.
//!
//! A RESP string's S3 ETag is the MD5 of its value, and MD5 is serial: each 64-byte block needs
//! the state the one before left, so one value hashes at ~640 MB/s on this project's machines
//! whatever the CPU offers. Eight values are eight independent chains, though, and one AVX2
//! instruction advances all eight (MinIO's md5-simd does the same for concurrent uploads): a
//! write batch's values, in memory together, are hashed by [`digests`] at ~4.4 GB/s for eight.
//! A value alone, and every value on a CPU without AVX2 (or off x86-64), goes through md-5's
//! scalar compressor.
//!
//! Uploads were hashed this way too, on one thread shared by every upload (session 44): the
//! gateway's CPU per 10 MiB PUT fell by 40 %, but under a loaded machine that one thread was a
//! single share of the CPU for all uploads, and a client with a 3-second low-speed limit
//! (pyarrow's) gave up on an upload part twice in CI. Each upload hashes its own body on a
//! blocking thread of its own again (bodies.rs `BodyDigest`); docs/benchmarks.md has the figures.

use std::sync::LazyLock;

/// Values hashed side by side: the 32-bit lanes of a 256-bit register.
const LANES: usize = 8;
const BLOCK: usize = 64;
const INIT: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

/// How blocks are compressed: eight lanes at a time where the CPU has AVX2.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kernel {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Kernel {
    fn detect() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            return Kernel::Avx2;
        }
        Kernel::Scalar
    }
}

/// The MD5 of each of `messages`, their blocks eight messages at a time where the CPU has AVX2:
/// for values that are hashed together anyway (a RESP write batch's values, whose S3 ETags they
/// are).
pub fn digests(messages: &[&[u8]]) -> Vec<[u8; 16]> {
    digests_by(messages, Kernel::detect())
}

fn digests_by(messages: &[&[u8]], kernel: Kernel) -> Vec<[u8; 16]> {
    let mut states = vec![INIT; messages.len()];
    let blocks = messages.iter().map(|message| message.as_chunks::<BLOCK>().0).collect();
    compress_blocks(&mut states, blocks, kernel);
    messages
        .iter()
        .zip(states)
        .map(|(message, state)| finish(state, message))
        .collect()
}

/// Compresses each message's whole `blocks` into its state: eight messages at a time in AVX2
/// lanes, a message left alone by md-5's function.
fn compress_blocks(states: &mut [[u32; 4]], blocks: Vec<&[[u8; BLOCK]]>, kernel: Kernel) {
    let mut pending: Vec<(usize, &[[u8; BLOCK]])> = blocks
        .into_iter()
        .enumerate()
        .filter(|(_, blocks)| !blocks.is_empty())
        .collect();
    while !pending.is_empty() {
        match kernel {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 if pending.len() > 1 => {
                let group = pending.len().min(LANES);
                let count = pending[..group]
                    .iter()
                    .map(|(_, blocks)| blocks.len())
                    .min()
                    .unwrap_or(0);
                // Lanes without a message of their own hash the first one's blocks again, and
                // are thrown away.
                let mut lanes = [INIT; LANES];
                let mut data = [pending[0].1; LANES];
                for (lane, (index, blocks)) in pending[..group].iter().enumerate() {
                    lanes[lane] = states[*index];
                    data[lane] = &blocks[..count];
                }
                avx2::compress_lanes(&mut lanes, &data, count);
                for (lane, (index, blocks)) in pending[..group].iter_mut().enumerate() {
                    states[*index] = lanes[lane];
                    *blocks = &blocks[count..];
                }
                pending.retain(|(_, blocks)| !blocks.is_empty());
            }
            _ => {
                for (index, blocks) in pending.drain(..) {
                    md5::block_api::compress(&mut states[index], blocks);
                }
            }
        }
    }
}

/// The digest of `message` from the state its whole blocks left: its last partial block with
/// MD5's padding (a 1 bit, zeros, the length in bits).
fn finish(mut state: [u32; 4], message: &[u8]) -> [u8; 16] {
    let tail = message.as_chunks::<BLOCK>().1;
    let mut block = [0; BLOCK];
    block[..tail.len()].copy_from_slice(tail);
    block[tail.len()] = 0x80;
    if tail.len() >= BLOCK - 8 {
        md5::block_api::compress(&mut state, &[block]);
        block = [0; BLOCK];
    }
    let bits = (message.len() as u64).wrapping_mul(8);
    block[BLOCK - 8..].copy_from_slice(&bits.to_le_bytes());
    md5::block_api::compress(&mut state, &[block]);
    let mut digest = [0; 16];
    for (bytes, word) in digest.chunks_exact_mut(4).zip(state) {
        bytes.copy_from_slice(&word.to_le_bytes());
    }
    digest
}

/// The round constants: the integer part of 2^32 × |sin(i + 1)| (RFC 1321, 3.4).
static ROUND_CONSTANTS: LazyLock<[u32; 64]> =
    LazyLock::new(|| std::array::from_fn(|i| ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32));

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! MD5's compression of eight independent blocks at once: lane `l` of every register holds
    //! stream `l`'s word.

    use std::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_and_si256, _mm256_loadu_si256, _mm256_or_si256, _mm256_permute2x128_si256,
        _mm256_set1_epi32, _mm256_setr_epi32, _mm256_slli_epi32, _mm256_srli_epi32, _mm256_storeu_si256,
        _mm256_unpackhi_epi32, _mm256_unpackhi_epi64, _mm256_unpacklo_epi32, _mm256_unpacklo_epi64, _mm256_xor_si256,
    };

    use super::{BLOCK, LANES, ROUND_CONSTANTS};

    /// Compresses `count` blocks of each lane's `data` into its state.
    pub(super) fn compress_lanes(states: &mut [[u32; 4]; LANES], data: &[&[[u8; BLOCK]]; LANES], count: usize) {
        assert!(std::is_x86_feature_detected!("avx2"), "the AVX2 kernel needs AVX2");
        assert!(data.iter().all(|blocks| blocks.len() >= count));
        let constants = &*ROUND_CONSTANTS;
        // SAFETY: the CPU has AVX2, checked above.
        unsafe { compress(states, data, count, constants) }
    }

    #[target_feature(enable = "avx2")]
    fn compress(states: &mut [[u32; 4]; LANES], data: &[&[[u8; BLOCK]]; LANES], count: usize, k: &[u32; 64]) {
        let lanes = |word: usize| {
            let w = |lane: usize| states[lane][word] as i32;
            _mm256_setr_epi32(w(0), w(1), w(2), w(3), w(4), w(5), w(6), w(7))
        };
        let (mut a, mut b, mut c, mut d) = (lanes(0), lanes(1), lanes(2), lanes(3));
        for block in 0..count {
            let m = words(data, block);
            let (aa, bb, cc, dd) = (a, b, c, d);
            macro_rules! step {
                ($f:ident, $a:ident, $b:ident, $c:ident, $d:ident, $i:expr, $word:expr, $s:literal) => {
                    let sum = _mm256_add_epi32(
                        _mm256_add_epi32($a, $f($b, $c, $d)),
                        _mm256_add_epi32(m[$word], _mm256_set1_epi32(k[$i] as i32)),
                    );
                    $a = _mm256_add_epi32(
                        $b,
                        _mm256_or_si256(
                            _mm256_slli_epi32::<$s>(sum),
                            _mm256_srli_epi32::<{ 32 - $s }>(sum),
                        ),
                    );
                };
            }
            macro_rules! round {
                ($f:ident, $first:literal, $word:expr, [$s0:literal, $s1:literal, $s2:literal, $s3:literal]) => {
                    for j in 0..4 {
                        let i = $first + 4 * j;
                        step!($f, a, b, c, d, i, $word(i), $s0);
                        step!($f, d, a, b, c, i + 1, $word(i + 1), $s1);
                        step!($f, c, d, a, b, i + 2, $word(i + 2), $s2);
                        step!($f, b, c, d, a, i + 3, $word(i + 3), $s3);
                    }
                };
            }
            round!(mix_f, 0, |i: usize| i, [7, 12, 17, 22]);
            round!(mix_g, 16, |i: usize| (5 * i + 1) % 16, [5, 9, 14, 20]);
            round!(mix_h, 32, |i: usize| (3 * i + 5) % 16, [4, 11, 16, 23]);
            round!(mix_i, 48, |i: usize| (7 * i) % 16, [6, 10, 15, 21]);
            a = _mm256_add_epi32(a, aa);
            b = _mm256_add_epi32(b, bb);
            c = _mm256_add_epi32(c, cc);
            d = _mm256_add_epi32(d, dd);
        }
        for (word, register) in [a, b, c, d].into_iter().enumerate() {
            let mut out = [0u32; LANES];
            // SAFETY: `out` is 32 writable bytes; the store needs no alignment.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast::<__m256i>(), register) };
            for (state, value) in states.iter_mut().zip(out) {
                state[word] = value;
            }
        }
    }

    /// The sixteen message words of block `block` of every lane: register `w` holds word `w`
    /// of lanes 0 to 7. Each half block (eight words) of each lane is loaded whole and the eight
    /// of them transposed.
    #[target_feature(enable = "avx2")]
    fn words(data: &[&[[u8; BLOCK]]; LANES], block: usize) -> [__m256i; 16] {
        let half = |offset: usize| {
            let rows: [__m256i; LANES] = std::array::from_fn(|lane| {
                let bytes = &data[lane][block][offset..offset + 32];
                // SAFETY: `bytes` is 32 readable bytes; the load needs no alignment.
                unsafe { _mm256_loadu_si256(bytes.as_ptr().cast::<__m256i>()) }
            });
            transpose(rows)
        };
        let (low, high) = (half(0), half(32));
        std::array::from_fn(|word| if word < 8 { low[word] } else { high[word - 8] })
    }

    /// An 8×8 transpose of 32-bit elements: row `r`'s element `c` becomes row `c`'s element `r`.
    #[target_feature(enable = "avx2")]
    fn transpose(r: [__m256i; 8]) -> [__m256i; 8] {
        // Pairs of rows interleaved, then pairs of pairs, then the 128-bit halves exchanged.
        let t0 = _mm256_unpacklo_epi32(r[0], r[1]);
        let t1 = _mm256_unpackhi_epi32(r[0], r[1]);
        let t2 = _mm256_unpacklo_epi32(r[2], r[3]);
        let t3 = _mm256_unpackhi_epi32(r[2], r[3]);
        let t4 = _mm256_unpacklo_epi32(r[4], r[5]);
        let t5 = _mm256_unpackhi_epi32(r[4], r[5]);
        let t6 = _mm256_unpacklo_epi32(r[6], r[7]);
        let t7 = _mm256_unpackhi_epi32(r[6], r[7]);
        let u0 = _mm256_unpacklo_epi64(t0, t2);
        let u1 = _mm256_unpackhi_epi64(t0, t2);
        let u2 = _mm256_unpacklo_epi64(t1, t3);
        let u3 = _mm256_unpackhi_epi64(t1, t3);
        let u4 = _mm256_unpacklo_epi64(t4, t6);
        let u5 = _mm256_unpackhi_epi64(t4, t6);
        let u6 = _mm256_unpacklo_epi64(t5, t7);
        let u7 = _mm256_unpackhi_epi64(t5, t7);
        [
            _mm256_permute2x128_si256::<0x20>(u0, u4),
            _mm256_permute2x128_si256::<0x20>(u1, u5),
            _mm256_permute2x128_si256::<0x20>(u2, u6),
            _mm256_permute2x128_si256::<0x20>(u3, u7),
            _mm256_permute2x128_si256::<0x31>(u0, u4),
            _mm256_permute2x128_si256::<0x31>(u1, u5),
            _mm256_permute2x128_si256::<0x31>(u2, u6),
            _mm256_permute2x128_si256::<0x31>(u3, u7),
        ]
    }

    /// F(b, c, d) = (b ∧ c) ∨ (¬b ∧ d), as d ⊕ (b ∧ (c ⊕ d)).
    #[target_feature(enable = "avx2")]
    fn mix_f(b: __m256i, c: __m256i, d: __m256i) -> __m256i {
        _mm256_xor_si256(d, _mm256_and_si256(b, _mm256_xor_si256(c, d)))
    }

    /// G(b, c, d) = (b ∧ d) ∨ (c ∧ ¬d), as c ⊕ (d ∧ (b ⊕ c)).
    #[target_feature(enable = "avx2")]
    fn mix_g(b: __m256i, c: __m256i, d: __m256i) -> __m256i {
        _mm256_xor_si256(c, _mm256_and_si256(d, _mm256_xor_si256(b, c)))
    }

    #[target_feature(enable = "avx2")]
    fn mix_h(b: __m256i, c: __m256i, d: __m256i) -> __m256i {
        _mm256_xor_si256(_mm256_xor_si256(b, c), d)
    }

    /// I(b, c, d) = c ⊕ (b ∨ ¬d).
    #[target_feature(enable = "avx2")]
    fn mix_i(b: __m256i, c: __m256i, d: __m256i) -> __m256i {
        _mm256_xor_si256(c, _mm256_or_si256(b, _mm256_xor_si256(d, _mm256_set1_epi32(-1))))
    }
}

#[cfg(test)]
mod tests {
    use md5::{Digest as _, Md5};
    use rand::rngs::StdRng;
    use rand::{Rng, RngCore, SeedableRng};

    use super::*;

    fn md5_of(data: &[u8]) -> [u8; 16] {
        Md5::digest(data).into()
    }

    /// Lengths around the padding's edges (55/56 bytes into a block) and block boundaries,
    /// then random ones up to 300 KiB.
    fn values(rng: &mut StdRng) -> Vec<Vec<u8>> {
        let edges = [0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 8120, 65_536];
        let random: Vec<usize> = (0..17).map(|_| rng.random_range(0..300_000)).collect();
        edges
            .into_iter()
            .chain(random)
            .map(|len| {
                let mut body = vec![0; len];
                rng.fill_bytes(&mut body);
                body
            })
            .collect()
    }

    /// Values hashed together, of lengths around the padding's edges and many blocks long,
    /// fewer and more than the lanes, by either kernel: each has its own MD5.
    #[test]
    fn values_hashed_together_each_have_their_own_md5() {
        let mut rng = StdRng::seed_from_u64(5);
        for kernel in [Kernel::Scalar, Kernel::detect()] {
            for count in [0, 1, 2, 7, 8, 9, 33] {
                let values = values(&mut rng);
                let values: Vec<&[u8]> = values.iter().take(count).map(Vec::as_slice).collect();
                let digests = digests_by(&values, kernel);
                assert_eq!(digests.len(), values.len());
                for (value, digest) in values.iter().zip(digests) {
                    assert_eq!(digest, md5_of(value), "{kernel:?}: {} bytes among {count}", value.len());
                }
            }
        }
    }

    /// The eight-lane compression against md-5's, lane by lane, over one block and several.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn eight_lanes_compress_as_the_scalar_function() {
        if Kernel::detect() == Kernel::Scalar {
            eprintln!("not run: this CPU has no AVX2");
            return;
        }
        let mut rng = StdRng::seed_from_u64(11);
        for count in [1, 2, 5] {
            let blocks: Vec<Vec<[u8; BLOCK]>> = (0..LANES)
                .map(|_| (0..count).map(|_| std::array::from_fn(|_| rng.random())).collect())
                .collect();
            let start: [[u32; 4]; LANES] = std::array::from_fn(|_| std::array::from_fn(|_| rng.random()));
            let mut lanes = start;
            let data: [&[[u8; BLOCK]]; LANES] = std::array::from_fn(|lane| blocks[lane].as_slice());
            avx2::compress_lanes(&mut lanes, &data, count);
            for lane in 0..LANES {
                let mut scalar = start[lane];
                md5::block_api::compress(&mut scalar, &blocks[lane]);
                assert_eq!(lanes[lane], scalar, "lane {lane}, {count} blocks");
            }
        }
    }
}
