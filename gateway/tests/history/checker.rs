//! Linearizability of one object's history against its sequential model (Wing & Gong's search
//! with Lowe's memoisation, as in Knossos and Porcupine): is there an order of the operations,
//! each taking effect at one instant between its invocation and its response, in which the
//! model gives every recorded answer? Operations without an answer may take effect at any time
//! after their invocation, or never. Plus the minimiser that cuts a failing history down to a
//! short one that still fails, to print.

use std::collections::HashSet;
use std::fmt::{Debug, Write};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::time::Instant;

use super::recorder::{Answer, Op};

/// The sequential specification of one object (an S3 key, a RESP key).
pub trait Model: Clone + Eq + Hash + Send + Sync {
    type Input: Clone + Debug + Send + Sync;
    type Output: Clone + Debug + Send + Sync;

    /// The states this one may move to when `op` takes effect, given its recorded output (any
    /// output when none was recorded); empty when that output is impossible from here. More
    /// than one when the model is uncertain (an expiry deadline that may or may not have passed).
    fn step(&self, op: &Op<Self::Input, Self::Output>) -> Vec<Self>;

    /// Whether `op` leaves every state as it was (a read, a refused write): dropping it from a
    /// failing history cannot make the failure up.
    fn changes_nothing(op: &Op<Self::Input, Self::Output>) -> bool;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    Violation,
    /// The search ran out of its step budget.
    Undecided,
}

/// Whether `ops` (in invocation order) is linearizable from `initial`, within `budget` search steps.
pub fn check<M: Model>(initial: &M, ops: &[Op<M::Input, M::Output>], budget: u64) -> Verdict {
    let mut search = Search {
        ops,
        done: vec![0; ops.len().div_ceil(64)],
        pending: ops
            .iter()
            .filter(|op| matches!(op.answer, Answer::Returned { .. }))
            .count(),
        memo: HashSet::default(),
        steps: 0,
        budget,
    };
    // The search recurses once per linearized operation: give it a stack for long histories.
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(256 << 20)
            .spawn_scoped(scope, || match search.explore(initial) {
                Some(true) => Verdict::Linearizable,
                Some(false) => Verdict::Violation,
                None => Verdict::Undecided,
            })
            .unwrap()
            .join()
            .unwrap()
    })
}

/// The memo's hasher: a multiply-rotate over words (as rustc's FxHasher). The default SipHash,
/// resistant to chosen keys the checker never meets, was the largest cost of a search step.
#[derive(Default)]
struct WordHasher(u64);

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

struct Search<'a, M: Model> {
    ops: &'a [Op<M::Input, M::Output>],
    /// Bit i: operation i is linearized.
    done: Vec<u64>,
    /// Answered operations not yet linearized (lost ones need not be).
    pending: usize,
    /// (linearized set, state) pairs already explored without success.
    memo: HashSet<(Vec<u64>, M), BuildHasherDefault<WordHasher>>,
    steps: u64,
    budget: u64,
}

impl<M: Model> Search<'_, M> {
    fn is_done(&self, i: usize) -> bool {
        self.done[i / 64] & (1 << (i % 64)) != 0
    }

    fn flip(&mut self, i: usize) {
        self.done[i / 64] ^= 1 << (i % 64);
        if matches!(self.ops[i].answer, Answer::Returned { .. }) {
            if self.is_done(i) {
                self.pending -= 1;
            } else {
                self.pending += 1;
            }
        }
    }

    /// `Some(found)`, or `None` when the budget ran out.
    fn explore(&mut self, state: &M) -> Option<bool> {
        if self.pending == 0 {
            return Some(true);
        }
        if !self.memo.insert((self.done.clone(), state.clone())) {
            return Some(false);
        }
        self.steps += 1;
        if self.steps > self.budget {
            return None;
        }
        // The next operation may be any pending one invoked before every other pending one
        // returned: none of them precedes it in real time.
        let first = self.done.iter().position(|word| *word != u64::MAX).unwrap_or(0) * 64;
        let mut horizon = u64::MAX;
        let mut candidates = Vec::new();
        for i in first..self.ops.len() {
            if self.ops[i].call > horizon {
                break;
            }
            if !self.is_done(i) {
                horizon = horizon.min(self.ops[i].end());
                candidates.push(i);
            }
        }
        candidates.retain(|&i| self.ops[i].call <= horizon);
        // A read that agrees with the state can be taken now without losing a linearization:
        // any order that takes it later stays valid with it moved here, since it changes no
        // state and nothing it precedes in real time is taken yet. So no branch. Only a read: a
        // write that changes nothing here (a SET of the value the key holds) may change the
        // state where a valid order takes it later.
        for &i in &candidates {
            if M::changes_nothing(&self.ops[i])
                && let [next] = state.step(&self.ops[i]).as_slice()
                && next == state
            {
                self.flip(i);
                let found = self.explore(state);
                self.flip(i);
                return found;
            }
        }
        for i in candidates {
            for next in state.step(&self.ops[i]) {
                self.flip(i);
                let found = self.explore(&next);
                self.flip(i);
                if found != Some(false) {
                    return found;
                }
            }
        }
        Some(false)
    }
}

/// A failing history cut down to what shows the failure: the operations after the latest
/// quiescent point (no operation spans it) from which the rest still fails, whatever state the
/// operations before it may have left — those states are shown instead of them — up to the
/// earliest quiescent point at which the history already fails, without the operations that
/// change nothing (reads). Each cut is sound: the short history fails only if the whole one does.
pub struct Minimal<M: Model> {
    /// The states the operations before the short history may have left.
    pub start: Vec<M>,
    /// Operations before the short history.
    pub skipped: usize,
    pub ops: Vec<Op<M::Input, M::Output>>,
}

/// Indices at which no operation spans the cut (every earlier one returned before the next began).
fn quiescent_cuts<I, O>(ops: &[Op<I, O>]) -> Vec<usize> {
    let mut cuts = vec![0];
    let mut latest_end = 0;
    for (i, op) in ops.iter().enumerate().skip(1) {
        latest_end = latest_end.max(ops[i - 1].end());
        if latest_end < op.call {
            cuts.push(i);
        }
    }
    cuts.push(ops.len());
    cuts
}

/// Every state a linearization of `ops` (all answered) may end in; `None` past the budget.
fn finals<M: Model>(from: &M, ops: &[Op<M::Input, M::Output>], budget: u64) -> Option<HashSet<M>> {
    fn walk<M: Model>(
        state: &M,
        ops: &[Op<M::Input, M::Output>],
        done: &mut Vec<bool>,
        seen: &mut HashSet<(Vec<bool>, M)>,
        out: &mut HashSet<M>,
        budget: &mut u64,
    ) -> bool {
        if done.iter().all(|d| *d) {
            out.insert(state.clone());
            return true;
        }
        if !seen.insert((done.clone(), state.clone())) {
            return true;
        }
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        let horizon = (0..ops.len())
            .filter(|i| !done[*i])
            .map(|i| ops[i].end())
            .min()
            .unwrap_or(u64::MAX);
        for i in 0..ops.len() {
            if done[i] || ops[i].call > horizon {
                continue;
            }
            for next in state.step(&ops[i]) {
                done[i] = true;
                let within = walk(&next, ops, done, seen, out, budget);
                done[i] = false;
                if !within {
                    return false;
                }
            }
        }
        true
    }
    let mut out = HashSet::new();
    let mut budget = budget;
    walk(
        from,
        ops,
        &mut vec![false; ops.len()],
        &mut HashSet::new(),
        &mut out,
        &mut budget,
    )
    .then_some(out)
}

/// Whether `ops` fails from every one of `starts`.
fn fails_from<M: Model>(starts: &[M], ops: &[Op<M::Input, M::Output>], budget: u64) -> bool {
    starts
        .iter()
        .all(|start| check(start, ops, budget) == Verdict::Violation)
}

/// See [`Minimal`]; `ops` must fail from `initial`.
pub fn minimise<M: Model>(initial: &M, ops: &[Op<M::Input, M::Output>], budget: u64, deadline: Instant) -> Minimal<M> {
    let cuts = quiescent_cuts(ops);
    // The earliest cut at which the history already fails (a failing prefix that ends at a
    // quiescent point stays failing when longer, so this is a binary search).
    let (mut low, mut high) = (0, cuts.len() - 1);
    while low < high && Instant::now() < deadline {
        let middle = (low + high) / 2;
        if check(initial, &ops[..cuts[middle]], budget) == Verdict::Violation {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    let end = cuts[high];
    // The states each earlier cut may be in, cut by cut, while they stay few.
    let mut reachable: Vec<(usize, Vec<M>)> = vec![(0, vec![initial.clone()])];
    for pair in cuts[..high].windows(2) {
        let (from, to) = (pair[0], pair[1]);
        let mut states = HashSet::new();
        let mut known = true;
        for state in &reachable.last().unwrap().1 {
            match finals(state, &ops[from..to], budget) {
                Some(found) => states.extend(found),
                None => known = false,
            }
        }
        if !known || states.is_empty() || states.len() > 32 || Instant::now() > deadline {
            break;
        }
        reachable.push((to, states.into_iter().collect()));
    }
    let (skipped, start) = reachable
        .iter()
        .rev()
        .find(|(at, starts)| Instant::now() > deadline || fails_from(starts, &ops[*at..end], budget))
        .cloned()
        .unwrap_or((0, vec![initial.clone()]));
    let mut short = ops[skipped..end].to_vec();
    let mut at = 0;
    while at < short.len() && Instant::now() < deadline {
        if M::changes_nothing(&short[at]) {
            let mut without = short.clone();
            without.remove(at);
            if fails_from(&start, &without, budget) {
                short = without;
                continue;
            }
        }
        at += 1;
    }
    Minimal {
        start,
        skipped,
        ops: short,
    }
}

/// One line per operation: client, interval in milliseconds since the run began, input, answer.
pub fn render<I: Debug, O: Debug>(ops: &[Op<I, O>]) -> String {
    let mut out = String::new();
    for op in ops {
        let ms = |us: u64| us as f64 / 1000.0;
        match &op.answer {
            Answer::Returned { at, output } => writeln!(
                out,
                "  c{:<2} {:>10.3} .. {:>10.3} ms  {:?}  =>  {:?}",
                op.client,
                ms(op.call),
                ms(*at),
                op.input,
                output
            ),
            Answer::Lost(why) => writeln!(
                out,
                "  c{:<2} {:>10.3} .. {:>10} ms  {:?}  =>  ? ({why})",
                op.client,
                ms(op.call),
                "?",
                op.input
            ),
        }
        .unwrap();
    }
    out
}
