//! MD5 of many bodies at once: the blocks of up to eight bodies side by side in the lanes of
//! AVX2 registers.
//!
//! S3 makes a PUT's ETag the MD5 of its body (a RESP string's too), and MD5 is serial: each
//! 64-byte block needs the state the one before left, so one body hashes at ~640 MB/s on this
//! project's machines whatever the CPU offers, about half the gateway's CPU on a 10 MiB PUT.
//! Eight bodies are eight independent chains, though, and one AVX2 instruction advances all
//! eight (MinIO's md5-simd does the same for the same reason): ~4.4 GB/s for eight here.
//! A body alone, and every body on a CPU without AVX2 (or off x86-64), goes through md-5's
//! scalar compressor.
//!
//! Two ways in:
//! - [`digests`]: values in memory together (a RESP write batch's, whose S3 ETags they are).
//! - [`Md5Stream`]: an upload's body, piece by piece, on the upload's own blocking thread.
//!   Every few pieces that thread hashes what its stream has queued *and* what other open
//!   streams have queued, side by side. There is no hashing thread of its own: in session 44
//!   one thread hashed every upload, and on a loaded machine that one thread was one share of
//!   the CPU for all of them (a client with a 3-second low-speed limit, pyarrow's, gave up on
//!   an upload part twice in CI). Here each upload still brings its own thread, as when each
//!   hashed only its own body, and the threads take turns at the shared work.

use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

/// Bodies hashed side by side: the 32-bit lanes of a 256-bit register.
const LANES: usize = 8;
const BLOCK: usize = 64;
const INIT: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
/// A stream's pieces queued before its thread hashes them (with whatever others have queued):
/// enough that other uploads' threads have queued some of theirs meanwhile, so that the lanes
/// fill.
const HASH_AT: usize = 8;
/// A stream's pieces queued at most: past it, while another thread hashes the stream, its own
/// thread waits (and so does its upload) instead of holding more of the body in memory.
const QUEUED_AT_MOST: usize = 16;

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

    /// Bodies compressed at once.
    fn width(self) -> usize {
        match self {
            Kernel::Scalar => 1,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => LANES,
        }
    }
}

/// The MD5 of each of `messages`, their blocks eight messages at a time where the CPU has AVX2:
/// for values that are hashed together anyway (a RESP write batch's values, whose S3 ETags they
/// are).
pub fn digests(messages: &[&[u8]]) -> Vec<[u8; 16]> {
    digests_by(messages, Kernel::detect())
}

fn digests_by(messages: &[&[u8]], kernel: Kernel) -> Vec<[u8; 16]> {
    let mut hashes: Vec<Hash> = messages.iter().map(|_| Hash::new()).collect();
    let jobs = hashes
        .iter_mut()
        .zip(messages)
        .map(|(hash, message)| Job {
            hash,
            pieces: std::slice::from_ref(message),
        })
        .collect();
    compress_jobs(jobs, kernel);
    hashes.into_iter().map(Hash::finish).collect()
}

/// One body's hash so far: the MD5 state after its whole blocks, and the bytes of the block it
/// is in.
struct Hash {
    state: [u32; 4],
    partial: [u8; BLOCK],
    partial_len: usize,
    length: u64,
}

impl Hash {
    fn new() -> Hash {
        Hash {
            state: INIT,
            partial: [0; BLOCK],
            partial_len: 0,
            length: 0,
        }
    }

    /// Takes the start of `data` into the partial block (compressing it once full) and answers
    /// what is left: empty, or starting at a block boundary.
    fn absorb<'a>(&mut self, data: &'a [u8]) -> &'a [u8] {
        self.length += data.len() as u64;
        if self.partial_len == 0 {
            return data;
        }
        let take = (BLOCK - self.partial_len).min(data.len());
        self.partial[self.partial_len..self.partial_len + take].copy_from_slice(&data[..take]);
        self.partial_len += take;
        if self.partial_len == BLOCK {
            md5::block_api::compress(&mut self.state, &[self.partial]);
            self.partial_len = 0;
        }
        &data[take..]
    }

    /// Keeps `tail` (shorter than a block, after whole blocks) for the next piece. A piece that
    /// ended inside the partial block has no tail and left that block as it is.
    fn keep(&mut self, tail: &[u8]) {
        if tail.is_empty() {
            return;
        }
        self.partial[..tail.len()].copy_from_slice(tail);
        self.partial_len = tail.len();
    }

    /// MD5's padding (a 1 bit, zeros, the length in bits), then the digest.
    fn finish(mut self) -> [u8; 16] {
        let bits = self.length.wrapping_mul(8);
        self.partial[self.partial_len] = 0x80;
        self.partial[self.partial_len + 1..].fill(0);
        if self.partial_len >= BLOCK - 8 {
            md5::block_api::compress(&mut self.state, &[self.partial]);
            self.partial = [0; BLOCK];
        }
        self.partial[BLOCK - 8..].copy_from_slice(&bits.to_le_bytes());
        md5::block_api::compress(&mut self.state, &[self.partial]);
        let mut digest = [0; 16];
        for (bytes, word) in digest.chunks_exact_mut(4).zip(self.state) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
        digest
    }
}

/// Pieces of one body to hash, in order, into its hash (borrowed: no copy, no allocation).
struct Job<'a, P> {
    hash: &'a mut Hash,
    pieces: &'a [P],
}

/// Where a job is: the whole blocks of its current piece not yet compressed (never empty while
/// it has a lane), the piece's tail after them, and the pieces after it.
struct Cursor<'a, P> {
    hash: &'a mut Hash,
    blocks: &'a [[u8; BLOCK]],
    tail: &'a [u8],
    pieces: std::slice::Iter<'a, P>,
}

impl<'a, P: AsRef<[u8]>> Cursor<'a, P> {
    fn start(job: Job<'a, P>) -> Option<Cursor<'a, P>> {
        let mut cursor = Cursor {
            hash: job.hash,
            blocks: &[],
            tail: &[],
            pieces: job.pieces.iter(),
        };
        cursor.next_blocks().then_some(cursor)
    }

    /// Once the current blocks are compressed: keeps the piece's tail and moves on to the next
    /// piece with whole blocks. False when the job is done (its last tail kept).
    fn next_blocks(&mut self) -> bool {
        while self.blocks.is_empty() {
            self.hash.keep(self.tail);
            self.tail = &[];
            let Some(piece) = self.pieces.next() else {
                return false;
            };
            (self.blocks, self.tail) = self.hash.absorb(piece.as_ref()).as_chunks::<BLOCK>();
        }
        true
    }
}

/// Compresses every job's pieces into its hash: up to eight jobs at a time in AVX2 lanes, a
/// job that runs out of blocks giving its lane to the next one, so the lanes stay full while
/// eight have blocks; a job left alone goes through md-5's function.
fn compress_jobs<P: AsRef<[u8]>>(jobs: Vec<Job<'_, P>>, kernel: Kernel) {
    let mut waiting = jobs.into_iter();
    let mut active: Vec<Cursor<P>> = Vec::with_capacity(LANES);
    loop {
        while active.len() < kernel.width() {
            let Some(job) = waiting.next() else { break };
            active.extend(Cursor::start(job));
        }
        match kernel {
            _ if active.is_empty() => return,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 if active.len() > 1 => {
                let count = active.iter().map(|cursor| cursor.blocks.len()).min().unwrap_or(0);
                // Lanes without a job of their own hash the first one's blocks again, and are
                // thrown away.
                let mut states = [INIT; LANES];
                let mut data = [active[0].blocks; LANES];
                for (lane, cursor) in active.iter().enumerate() {
                    states[lane] = cursor.hash.state;
                    data[lane] = &cursor.blocks[..count];
                }
                avx2::compress_lanes(&mut states, &data, count);
                for (lane, cursor) in active.iter_mut().enumerate() {
                    cursor.hash.state = states[lane];
                    cursor.blocks = &cursor.blocks[count..];
                }
            }
            _ => {
                for cursor in &mut active {
                    md5::block_api::compress(&mut cursor.hash.state, cursor.blocks);
                    cursor.blocks = &[];
                }
            }
        }
        active.retain_mut(Cursor::next_blocks);
    }
}

/// A body's MD5, piece by piece, hashed beside other open streams' bodies. Used from a
/// blocking thread (it hashes, and may wait).
pub struct Md5Stream {
    lane: Arc<Lane>,
    open: &'static Registry,
    kernel: Kernel,
}

/// Another thread that was hashing the stream panicked: its state is gone.
#[derive(Debug)]
pub struct Lost;

/// A stream as the threads share it.
struct Lane {
    state: Mutex<LaneState>,
    /// Signalled when a thread gives back the stream's hash (or loses it).
    returned: Condvar,
}

struct LaneState {
    /// `None` while a thread hashes the stream's queued pieces it took (the stream is claimed).
    hash: Option<Hash>,
    queued: Vec<Bytes>,
    lost: bool,
}

/// Open streams, each until its [`Md5Stream`] is finished or dropped: the process's one
/// ([`OPEN`]), or a test's own.
struct Registry {
    streams: Mutex<Vec<Arc<Lane>>>,
}

static OPEN: Registry = Registry {
    streams: Mutex::new(Vec::new()),
};

/// A lock whose holder panicked is still taken: the data behind these locks is consistent
/// between statements (a claim that panicked marks its streams lost, see [`Claim`]).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Md5Stream {
    pub fn open() -> Md5Stream {
        Md5Stream::open_in(&OPEN)
    }

    fn open_in(open: &'static Registry) -> Md5Stream {
        let lane = Arc::new(Lane {
            state: Mutex::new(LaneState {
                hash: Some(Hash::new()),
                queued: Vec::new(),
                lost: false,
            }),
            returned: Condvar::new(),
        });
        lock(&open.streams).push(Arc::clone(&lane));
        Md5Stream {
            lane,
            open,
            kernel: Kernel::detect(),
        }
    }

    /// Hashes `piece` after the pieces given before it: queued, and once [`HASH_AT`] are,
    /// hashed with whatever other streams have queued. While another thread hashes this
    /// stream, waits only once [`QUEUED_AT_MOST`] pieces are queued.
    pub fn give(&self, piece: Bytes) {
        if piece.is_empty() {
            return;
        }
        let mut state = lock(&self.lane.state);
        state.queued.push(piece);
        if state.queued.len() < HASH_AT {
            return;
        }
        while state.hash.is_none() && !state.lost && state.queued.len() >= QUEUED_AT_MOST {
            state = self.lane.returned.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        if state.hash.is_none() {
            // Claimed by another thread (which takes the queue once it gives the stream back),
            // or lost ([`Md5Stream::finish`] tells).
            return;
        }
        drop(state);
        hash_together(&self.lane, self.open, self.kernel);
    }

    /// The MD5 of every piece given.
    pub fn finish(self) -> Result<[u8; 16], Lost> {
        loop {
            let mut state = lock(&self.lane.state);
            while state.hash.is_none() && !state.lost {
                state = self.lane.returned.wait(state).unwrap_or_else(PoisonError::into_inner);
            }
            if state.lost {
                return Err(Lost);
            }
            if state.queued.is_empty() {
                let hash = state.hash.take().expect("an unclaimed stream has its hash");
                return Ok(hash.finish());
            }
            drop(state);
            hash_together(&self.lane, self.open, self.kernel);
        }
    }
}

impl Drop for Md5Stream {
    fn drop(&mut self) {
        lock(&self.open.streams).retain(|lane| !Arc::ptr_eq(lane, &self.lane));
    }
}

/// Claims `own` (when no other thread has) and up to seven other open streams with pieces
/// queued, hashes their queued pieces side by side, and gives the streams back.
fn hash_together(own: &Arc<Lane>, open: &Registry, kernel: Kernel) {
    let mut claim = Claim { streams: Vec::new() };
    claim.take(own, lock(&own.state));
    if claim.streams.is_empty() {
        return;
    }
    for lane in lock(&open.streams).iter() {
        if claim.streams.len() == kernel.width() {
            break;
        }
        // A stream whose lock is held is being given a piece or given back: passed over now,
        // its own thread hashes it soon.
        if !Arc::ptr_eq(lane, own)
            && let Ok(state) = lane.state.try_lock()
        {
            claim.take(lane, state);
        }
    }
    let jobs = claim
        .streams
        .iter_mut()
        .map(|claimed| Job {
            hash: &mut claimed.hash,
            pieces: &claimed.pieces,
        })
        .collect();
    compress_jobs(jobs, kernel);
    claim.give_back();
}

/// Streams a thread has taken to hash: each one's hash and the pieces it had queued.
struct Claim {
    streams: Vec<Claimed>,
}

struct Claimed {
    lane: Arc<Lane>,
    hash: Hash,
    pieces: Vec<Bytes>,
}

impl Claim {
    /// Takes the stream when it is not claimed and has pieces queued.
    fn take(&mut self, lane: &Arc<Lane>, mut state: MutexGuard<'_, LaneState>) {
        if state.queued.is_empty() {
            return;
        }
        if let Some(hash) = state.hash.take() {
            self.streams.push(Claimed {
                lane: Arc::clone(lane),
                hash,
                pieces: std::mem::take(&mut state.queued),
            });
        }
    }

    fn give_back(mut self) {
        for claimed in self.streams.drain(..) {
            lock(&claimed.lane.state).hash = Some(claimed.hash);
            claimed.lane.returned.notify_all();
        }
    }
}

impl Drop for Claim {
    /// Streams not given back (the hashing panicked) are lost: their threads stop waiting and
    /// their uploads fail, instead of hanging.
    fn drop(&mut self) {
        for claimed in self.streams.drain(..) {
            lock(&claimed.lane.state).lost = true;
            claimed.lane.returned.notify_all();
        }
    }
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

    /// A registry of a test's own, so that no other test's streams are claimed with its own.
    fn registry() -> &'static Registry {
        Box::leak(Box::new(Registry {
            streams: Mutex::new(Vec::new()),
        }))
    }

    /// `body` cut into pieces of random lengths, some of whole blocks.
    fn pieces(rng: &mut StdRng, body: &[u8]) -> Vec<Bytes> {
        let mut pieces = Vec::new();
        let mut at = 0;
        while at < body.len() {
            let len = match rng.random_range(0..4) {
                0 => BLOCK * rng.random_range(1..40),
                _ => rng.random_range(1..5_000),
            }
            .min(body.len() - at);
            pieces.push(Bytes::copy_from_slice(&body[at..at + len]));
            at += len;
        }
        pieces
    }

    /// Twelve bodies streamed at once from threads of their own, in pieces of random lengths:
    /// the threads hash each other's queued pieces side by side, and each body gets its own MD5.
    #[test]
    fn streams_hashed_side_by_side_each_get_their_own_md5() {
        let open = registry();
        let barrier = Arc::new(std::sync::Barrier::new(12));
        let threads: Vec<_> = (0..12u64)
            .map(|seed| {
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    let mut rng = StdRng::seed_from_u64(100 + seed);
                    let mut body = vec![0; rng.random_range(0..400_000)];
                    rng.fill_bytes(&mut body);
                    let pieces = pieces(&mut rng, &body);
                    let stream = Md5Stream::open_in(open);
                    barrier.wait();
                    for piece in pieces {
                        stream.give(piece);
                    }
                    (stream.finish().expect("nothing panicked"), md5_of(&body), body.len())
                })
            })
            .collect();
        for thread in threads {
            let (streamed, expected, len) = thread.join().unwrap();
            assert_eq!(streamed, expected, "a body of {len} bytes");
        }
        assert!(lock(&open.streams).is_empty(), "finished streams leave the registry");
    }

    /// A stream's thread that reaches its turn hashes the pieces another stream has queued,
    /// and that stream's digest still covers every piece in order.
    #[test]
    fn a_stream_hashes_the_pieces_another_has_queued() {
        let open = registry();
        let mut rng = StdRng::seed_from_u64(7);
        let bodies: Vec<Vec<u8>> = (0..2)
            .map(|_| {
                let mut body = vec![0; 3 * HASH_AT * 1000];
                rng.fill_bytes(&mut body);
                body
            })
            .collect();
        let (quiet, busy) = (Md5Stream::open_in(open), Md5Stream::open_in(open));
        let quiet_pieces: Vec<Bytes> = bodies[0].chunks(1000).map(Bytes::copy_from_slice).collect();
        for piece in &quiet_pieces[..HASH_AT - 1] {
            quiet.give(piece.clone());
        }
        assert_eq!(lock(&quiet.lane.state).queued.len(), HASH_AT - 1);
        for piece in bodies[1].chunks(1000).take(HASH_AT) {
            busy.give(Bytes::copy_from_slice(piece));
        }
        let state = lock(&quiet.lane.state);
        assert!(state.queued.is_empty() && state.hash.as_ref().is_some_and(|hash| hash.length == 7_000));
        drop(state);
        for piece in &quiet_pieces[HASH_AT - 1..] {
            quiet.give(piece.clone());
        }
        for piece in bodies[1].chunks(1000).skip(HASH_AT) {
            busy.give(Bytes::copy_from_slice(piece));
        }
        assert_eq!(quiet.finish().unwrap(), md5_of(&bodies[0]));
        assert_eq!(busy.finish().unwrap(), md5_of(&bodies[1]));
    }

    /// A claim dropped before it gave its streams back (a thread that panicked while hashing):
    /// the stream's owner learns it at once instead of waiting for ever.
    #[test]
    fn a_stream_whose_claim_was_lost_fails_instead_of_hanging() {
        let open = registry();
        let stream = Md5Stream::open_in(open);
        stream.give(Bytes::from_static(b"queued"));
        let mut claim = Claim { streams: Vec::new() };
        claim.take(&stream.lane, lock(&stream.lane.state));
        assert_eq!(claim.streams.len(), 1);
        drop(claim);
        assert!(stream.finish().is_err());
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
