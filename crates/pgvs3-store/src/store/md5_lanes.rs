//! MD5 for many uploads at once: one hashing thread runs the blocks of up to eight bodies side
//! by side in the lanes of AVX2 registers.
//!
//! S3 makes a single PUT's ETag the MD5 of its body, and MD5 is serial: each 64-byte block
//! needs the state the one before left, so one body hashes at ~640 MB/s on this project's
//! machines whatever the CPU offers, and it was half the gateway's CPU on a 10 MiB PUT. Eight
//! bodies are eight independent chains, though, and one AVX2 instruction advances all eight
//! (MinIO's md5-simd does the same for the same reason): ~7× the bytes per CPU second when
//! uploads overlap. A body alone is hashed by the scalar compressor (md-5's), as before.
//!
//! A [`Md5Stream`] hands its body's pieces to the hashing thread in order and waits for the
//! digest at the end. At most [`PIECES_IN_FLIGHT`] pieces of one stream wait for the thread, so
//! a thread that falls behind slows its uploads down instead of holding their bodies in memory.
//! Without AVX2 (or off x86-64) the thread hashes each body with the scalar compressor.
//!
//! Values that are in memory together (a RESP write batch's, whose S3 ETags their MD5s are)
//! are hashed side by side on the caller's thread by [`digests`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// Bodies hashed side by side: the 32-bit lanes of a 256-bit register.
const LANES: usize = 8;
/// Pieces of one stream queued for the hashing thread at most.
const PIECES_IN_FLIGHT: usize = 16;
const BLOCK: usize = 64;
const INIT: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

/// The hashing thread has gone (it never stops while the process runs; a panic would).
#[derive(Debug)]
pub struct Stopped;

/// One body's MD5, computed on the shared hashing thread.
pub struct Md5Stream {
    id: u64,
    engine: Sender<Message>,
    in_flight: Arc<Semaphore>,
    finished: bool,
}

impl Md5Stream {
    /// A new body's stream, on the process's hashing thread (started on first use).
    pub fn start() -> Md5Stream {
        Engine::shared().stream()
    }

    /// Hashes `piece` after the pieces before it; waits while the stream has
    /// [`PIECES_IN_FLIGHT`] pieces queued.
    pub async fn update(&self, piece: Bytes) -> Result<(), Stopped> {
        let permit = Arc::clone(&self.in_flight).acquire_owned().await.map_err(|_| Stopped)?;
        self.engine
            .send(Message::Piece(self.id, piece, permit))
            .map_err(|_| Stopped)
    }

    /// The MD5 of every piece given.
    pub async fn finish(mut self) -> Result<[u8; 16], Stopped> {
        let (done, digest) = oneshot::channel();
        self.finished = true;
        self.engine.send(Message::Finish(self.id, done)).map_err(|_| Stopped)?;
        digest.await.map_err(|_| Stopped)
    }
}

impl Drop for Md5Stream {
    /// An upload abandoned before its end (the client went away): the thread forgets it.
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.engine.send(Message::Forget(self.id));
        }
    }
}

enum Message {
    Piece(u64, Bytes, OwnedSemaphorePermit),
    Finish(u64, oneshot::Sender<[u8; 16]>),
    Forget(u64),
}

/// The hashing thread's door.
struct Engine {
    kernel: Kernel,
    thread: Mutex<Thread>,
    next_id: AtomicU64,
}

struct Thread {
    sender: Sender<Message>,
    handle: std::thread::JoinHandle<()>,
}

impl Thread {
    fn spawn(kernel: Kernel) -> Thread {
        let (sender, receiver) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("pgvs3-md5".into())
            .spawn(move || run(&receiver, kernel))
            .expect("spawn the MD5 thread");
        Thread { sender, handle }
    }
}

impl Engine {
    fn shared() -> &'static Engine {
        static ENGINE: OnceLock<Engine> = OnceLock::new();
        ENGINE.get_or_init(|| Engine::new(Kernel::detect()))
    }

    fn new(kernel: Kernel) -> Engine {
        Engine {
            kernel,
            thread: Mutex::new(Thread::spawn(kernel)),
            next_id: AtomicU64::new(0),
        }
    }

    fn stream(&self) -> Md5Stream {
        let mut thread = self.thread.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A thread that ended panicked (it runs while any sender lives, and this one holds
        // one): the uploads it had failed, later ones get a new thread.
        if thread.handle.is_finished() {
            *thread = Thread::spawn(self.kernel);
        }
        Md5Stream {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            engine: thread.sender.clone(),
            in_flight: Arc::new(Semaphore::new(PIECES_IN_FLIGHT)),
            finished: false,
        }
    }
}

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

/// A body the thread knows: its hash, the pieces waiting, and who waits for its digest.
struct Body {
    hash: Hash,
    queued: Vec<(Bytes, OwnedSemaphorePermit)>,
    done: Option<oneshot::Sender<[u8; 16]>>,
}

/// The hashing thread: takes everything that arrived, hashes what is queued once it is worth
/// it ([`ripe`]), answers finished streams, and waits for more.
fn run(receiver: &Receiver<Message>, kernel: Kernel) {
    let mut bodies: HashMap<u64, Body> = HashMap::new();
    while let Ok(first) = receiver.recv() {
        take(&mut bodies, first);
        while let Ok(message) = receiver.try_recv() {
            take(&mut bodies, message);
        }
        if ripe(&bodies, kernel) {
            hash_queued(&mut bodies, kernel);
        }
        let finished: Vec<u64> = bodies
            .iter()
            .filter(|(_, body)| body.done.is_some())
            .map(|(id, _)| *id)
            .collect();
        for id in finished {
            let body = bodies.remove(&id).expect("a finished body");
            if let Some(done) = body.done {
                let _ = done.send(body.hash.finish());
            }
        }
    }
}

/// Whether to hash what is queued now. The thread is much faster than uploads arrive, so,
/// woken for every piece, it would mostly find one stream's piece and hash it alone. It waits
/// instead until the lanes can be filled (a stream queued for each), or a stream has half its
/// pieces in flight queued (it could soon wait for the thread: a stream stops at
/// [`PIECES_IN_FLIGHT`], well before this), or one waits for its digest. A stream's queue never
/// holds more than its pieces in flight, so nothing waits for long or without bound.
fn ripe(bodies: &HashMap<u64, Body>, kernel: Kernel) -> bool {
    if kernel == Kernel::Scalar {
        return true;
    }
    let mut queued = 0;
    for body in bodies.values() {
        if body.done.is_some() || body.queued.len() >= PIECES_IN_FLIGHT / 2 {
            return true;
        }
        queued += usize::from(!body.queued.is_empty());
    }
    queued >= LANES
}

fn take(bodies: &mut HashMap<u64, Body>, message: Message) {
    match message {
        Message::Piece(id, piece, permit) => body(bodies, id).queued.push((piece, permit)),
        Message::Finish(id, done) => body(bodies, id).done = Some(done),
        Message::Forget(id) => {
            bodies.remove(&id);
        }
    }
}

/// Stream `id`'s body, new at its first message.
fn body(bodies: &mut HashMap<u64, Body>, id: u64) -> &mut Body {
    bodies.entry(id).or_insert_with(|| Body {
        hash: Hash::new(),
        queued: Vec::new(),
        done: None,
    })
}

/// Hashes every queued piece, in order within each stream: round after round, each stream's
/// next piece, their whole blocks side by side.
fn hash_queued(bodies: &mut HashMap<u64, Body>, kernel: Kernel) {
    let mut streams: Vec<&mut Body> = bodies.values_mut().filter(|body| !body.queued.is_empty()).collect();
    let mut queues: Vec<_> = streams
        .iter_mut()
        .map(|body| std::mem::take(&mut body.queued).into_iter())
        .collect();
    loop {
        // Each stream's next piece; its permit goes back when the round is done.
        let mut round: Vec<(&mut Hash, Bytes, OwnedSemaphorePermit)> = streams
            .iter_mut()
            .zip(queues.iter_mut())
            .filter_map(|(body, queue)| queue.next().map(|(piece, permit)| (&mut body.hash, piece, permit)))
            .collect();
        if round.is_empty() {
            return;
        }
        let mut pieces: Vec<(&mut Hash, &[u8])> = round
            .iter_mut()
            .map(|(hash, piece, _)| (&mut **hash, &piece[..]))
            .collect();
        hash_pieces(&mut pieces, kernel);
    }
}

/// The MD5 of each of `messages`, their blocks eight messages at a time where the CPU has AVX2:
/// for values that are hashed together anyway (a RESP write batch's values, whose S3 ETags they
/// are).
pub fn digests(messages: &[&[u8]]) -> Vec<[u8; 16]> {
    let mut hashes: Vec<Hash> = messages.iter().map(|_| Hash::new()).collect();
    let mut pieces: Vec<(&mut Hash, &[u8])> = hashes.iter_mut().zip(messages.iter().copied()).collect();
    hash_pieces(&mut pieces, Kernel::detect());
    hashes.into_iter().map(Hash::finish).collect()
}

/// One piece of each of some bodies: the start of each completes its partial block, the whole
/// blocks after it run eight bodies at a time, and the rest waits in the partial block.
fn hash_pieces(pieces: &mut [(&mut Hash, &[u8])], kernel: Kernel) {
    let mut pending: Vec<(usize, &[[u8; BLOCK]])> = Vec::with_capacity(pieces.len());
    let mut tails: Vec<&[u8]> = Vec::with_capacity(pieces.len());
    for (index, (hash, data)) in pieces.iter_mut().enumerate() {
        let data: &[u8] = data;
        let (blocks, tail) = hash.absorb(data).as_chunks::<BLOCK>();
        if !blocks.is_empty() {
            pending.push((index, blocks));
        }
        tails.push(tail);
    }
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
                // Lanes without a body of their own hash the first one's blocks again, and are
                // thrown away.
                let mut states = [INIT; LANES];
                let mut data = [pending[0].1; LANES];
                for (lane, (index, blocks)) in pending[..group].iter().enumerate() {
                    states[lane] = pieces[*index].0.state;
                    data[lane] = &blocks[..count];
                }
                avx2::compress_lanes(&mut states, &data, count);
                for (lane, (index, blocks)) in pending[..group].iter_mut().enumerate() {
                    pieces[*index].0.state = states[lane];
                    *blocks = &blocks[count..];
                }
                pending.retain(|(_, blocks)| !blocks.is_empty());
            }
            _ => {
                for (index, blocks) in pending.drain(..) {
                    md5::block_api::compress(&mut pieces[index].0.state, blocks);
                }
            }
        }
    }
    for ((hash, _), tail) in pieces.iter_mut().zip(tails) {
        hash.keep(tail);
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
    use futures::FutureExt as _;
    use md5::{Digest as _, Md5};
    use rand::rngs::StdRng;
    use rand::{Rng, RngCore, SeedableRng};

    use super::*;

    fn md5_of(data: &[u8]) -> [u8; 16] {
        Md5::digest(data).into()
    }

    /// Lengths around the padding's edges (55/56 bytes into a block) and block boundaries,
    /// then random ones up to 300 KiB.
    fn bodies(rng: &mut StdRng) -> Vec<Vec<u8>> {
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

    /// `body` in pieces of random sizes, empty ones and single bytes among them.
    fn pieces(rng: &mut StdRng, body: &[u8]) -> Vec<Bytes> {
        let mut pieces = Vec::new();
        let mut at = 0;
        while at < body.len() {
            let len = match rng.random_range(0..10) {
                0 => 0,
                1 => 1,
                2 => rng.random_range(1..130),
                _ => rng.random_range(1..40_000),
            };
            let end = (at + len).min(body.len());
            pieces.push(Bytes::copy_from_slice(&body[at..end]));
            at = end;
        }
        pieces
    }

    /// Many bodies hashed at once through one thread, each cut its own way, some abandoned
    /// half-way: every finished one has the digest md-5 gives it alone.
    async fn hashes_as_md5_does(kernel: Kernel, seed: u64) {
        let engine = Engine::new(kernel);
        let mut rng = StdRng::seed_from_u64(seed);
        let mut uploads = Vec::new();
        for (n, body) in bodies(&mut rng).into_iter().enumerate() {
            let pieces = pieces(&mut rng, &body);
            let stream = engine.stream();
            let abandoned = n % 7 == 3;
            uploads.push(tokio::spawn(async move {
                for (i, piece) in pieces.into_iter().enumerate() {
                    if abandoned && i == 2 {
                        return None;
                    }
                    stream.update(piece).await.expect("the thread runs");
                    if i % 3 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                Some((stream.finish().await.expect("a digest"), md5_of(&body)))
            }));
        }
        let mut finished = 0;
        for upload in uploads {
            if let Some((digest, expected)) = upload.await.expect("the upload task") {
                assert_eq!(hex::encode(digest), hex::encode(expected));
                finished += 1;
            }
        }
        assert!(finished >= 20, "{finished} bodies finished");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn bodies_hashed_side_by_side_have_their_own_md5() {
        if Kernel::detect() == Kernel::Scalar {
            eprintln!("not run: this CPU has no AVX2 (the scalar test covers the thread)");
            return;
        }
        for seed in 0..4 {
            hashes_as_md5_does(Kernel::detect(), seed).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn bodies_hashed_one_at_a_time_have_their_own_md5() {
        hashes_as_md5_does(Kernel::Scalar, 7).await;
    }

    /// Values hashed together, of lengths around the padding's edges and many blocks long,
    /// fewer and more than the lanes: each has its own MD5.
    #[test]
    fn values_hashed_together_each_have_their_own_md5() {
        let mut rng = StdRng::seed_from_u64(5);
        for count in [0, 1, 2, 7, 8, 9, 33] {
            let values = bodies(&mut rng);
            let values: Vec<&[u8]> = values.iter().take(count).map(Vec::as_slice).collect();
            let digests = digests(&values);
            assert_eq!(digests.len(), values.len());
            for (value, digest) in values.iter().zip(digests) {
                assert_eq!(digest, md5_of(value), "{} bytes among {count}", value.len());
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

    /// A stream with at most [`PIECES_IN_FLIGHT`] pieces queued: the next waits for the thread.
    #[tokio::test]
    async fn a_stream_queues_a_bounded_number_of_pieces() {
        let engine = Engine::new(Kernel::detect());
        let stream = engine.stream();
        let permits: Vec<_> = (0..PIECES_IN_FLIGHT)
            .map(|_| Arc::clone(&stream.in_flight).try_acquire_owned().expect("a free slot"))
            .collect();
        let blocked = stream.update(Bytes::from_static(b"x")).now_or_never();
        assert!(blocked.is_none(), "a piece went past a full queue");
        drop(permits);
        stream.update(Bytes::from_static(b"abc")).await.expect("queued");
        assert_eq!(stream.finish().await.expect("a digest"), md5_of(b"abc"));
    }
}
