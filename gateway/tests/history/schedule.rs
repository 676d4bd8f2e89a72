//! How the clients of a run interleave, FoundationDB-style: seeded, randomised, bounded. Every
//! client has its own generator derived from the run's seed, so the operations each issues
//! replay from the seed; the clients meet at a barrier every round and then issue one to three
//! operations each after a random pause, so operations overlap often and in varying ways. (The
//! exact interleaving still depends on the machine; the seed fixes what is asked, not when.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Barrier;

/// The run's seed and bounds, from the environment (see docs/history-checker.md).
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub seed: u64,
    /// Operations each workload issues at most.
    pub ops: usize,
    /// How long each workload issues operations at most.
    pub seconds: u64,
    /// Inject faults (PostgreSQL killed -9 mid-run) where the workload supports it.
    pub faults: bool,
}

impl Bounds {
    /// `default_seconds` applies unless `PGVS3_HISTORY_SECONDS` is set.
    pub fn from_env(default_seconds: u64) -> Bounds {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let seed = var("PGVS3_HISTORY_SEED").map_or_else(
            || {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    % 1_000_000_007
            },
            |v| v.parse().expect("PGVS3_HISTORY_SEED is a number"),
        );
        let number = |name: &str, default: u64| var(name).map_or(default, |v| v.parse().expect(name));
        Bounds {
            seed,
            ops: number("PGVS3_HISTORY_OPS", 100_000) as usize,
            seconds: number("PGVS3_HISTORY_SECONDS", default_seconds),
            faults: var("PGVS3_HISTORY_FAULTS").is_some_and(|v| v != "0"),
        }
    }

    /// The generator of client `client` of `workload`.
    pub fn rng(&self, workload: &str, client: usize) -> StdRng {
        let salt = workload
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
        StdRng::seed_from_u64(self.seed ^ salt.rotate_left(17) ^ (client as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
}

/// The rounds the clients of one run share.
#[derive(Clone)]
pub struct Schedule {
    barrier: Arc<Barrier>,
    stop: Arc<AtomicBool>,
    deadline: Instant,
    /// Rounds left, counted by the barrier's leader.
    rounds: Arc<std::sync::atomic::AtomicUsize>,
    max_pause: Duration,
}

impl Schedule {
    pub fn new(clients: usize, bounds: &Bounds, max_pause: Duration) -> Schedule {
        Schedule {
            barrier: Arc::new(Barrier::new(clients)),
            stop: Arc::new(AtomicBool::new(false)),
            deadline: Instant::now() + Duration::from_secs(bounds.seconds),
            // Two operations per client and round on average.
            rounds: Arc::new((bounds.ops / (2 * clients)).max(1).into()),
            max_pause,
        }
    }

    /// Waits for the other clients; how many operations to issue this round (`None`: the run is over).
    pub async fn round(&self, rng: &mut StdRng) -> Option<usize> {
        if self.barrier.wait().await.is_leader() {
            let left = self.rounds.fetch_sub(1, Ordering::Relaxed);
            if left <= 1 || Instant::now() >= self.deadline {
                self.stop.store(true, Ordering::Relaxed);
            }
        }
        // Everyone reads the leader's decision only after it made it.
        self.barrier.wait().await;
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        self.pause(rng).await;
        Some(rng.random_range(1..=3))
    }

    /// A random pause before an operation: what shifts one client's requests against another's.
    pub async fn pause(&self, rng: &mut StdRng) {
        let micros = rng.random_range(0..=self.max_pause.as_micros() as u64);
        tokio::time::sleep(Duration::from_micros(micros)).await;
    }
}

/// Waits for every client; the first one that panics ends the run with its panic (the others
/// would wait for it at the barrier forever).
pub async fn join(mut clients: tokio::task::JoinSet<()>) {
    while let Some(done) = clients.join_next().await {
        if let Err(err) = done {
            clients.abort_all();
            std::panic::resume_unwind(err.into_panic());
        }
    }
}
