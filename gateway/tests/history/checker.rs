//! Linearizability of one object's history against its sequential model (Wing & Gong's search
//! with Lowe's memoisation, as in Knossos and Porcupine): is there an order of the operations,
//! each taking effect at one instant between its invocation and its response, in which the
//! model gives every recorded answer? Operations without an answer may take effect at any time
//! after their invocation, or never. Plus the minimiser that shrinks a failing history to a
//! small failing sub-history to print.

use std::collections::HashSet;
use std::fmt::{Debug, Write};
use std::hash::Hash;
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

    /// Values `op` brings into being (a written value, a new version id).
    fn writes(op: &Op<Self::Input, Self::Output>) -> Vec<String>;

    /// Values `op` names or observes: a sub-history is only shown if each was brought into
    /// being by one of its operations, so a minimal failure never rests on a dropped write.
    fn reads(op: &Op<Self::Input, Self::Output>) -> Vec<String>;
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
        pending: ops.iter().filter(|op| matches!(op.answer, Answer::Returned { .. })).count(),
        memo: HashSet::new(),
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

struct Search<'a, M: Model> {
    ops: &'a [Op<M::Input, M::Output>],
    /// Bit i: operation i is linearized.
    done: Vec<u64>,
    /// Answered operations not yet linearized (lost ones need not be).
    pending: usize,
    /// (linearized set, state) pairs already explored without success.
    memo: HashSet<(Vec<u64>, M)>,
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
        for i in candidates {
            if self.ops[i].call > horizon {
                continue;
            }
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

/// Whether every value the operations name that some operation of the whole history brought
/// into being (`known`) was brought into being by one of them.
fn self_contained<M: Model>(ops: &[Op<M::Input, M::Output>], known: &HashSet<String>) -> bool {
    let written: HashSet<String> = ops.iter().flat_map(M::writes).collect();
    ops.iter()
        .flat_map(M::reads)
        .all(|value| written.contains(&value) || !known.contains(&value))
}

/// A small sub-history of the failing `ops` that still fails: the shortest failing prefix, then
/// chunks and single operations dropped while it keeps failing (until `deadline`).
pub fn minimise<M: Model>(
    initial: &M,
    ops: &[Op<M::Input, M::Output>],
    budget: u64,
    deadline: Instant,
) -> Vec<Op<M::Input, M::Output>> {
    let known: HashSet<String> = ops.iter().flat_map(M::writes).collect();
    let fails = |ops: &[Op<M::Input, M::Output>]| {
        self_contained::<M>(ops, &known) && check(initial, ops, budget) == Verdict::Violation
    };
    let mut failing = ops.to_vec();
    // Failures show up at the end of a prefix: search for the shortest one.
    let (mut low, mut high) = (1, failing.len());
    while low < high && Instant::now() < deadline {
        let middle = (low + high) / 2;
        if fails(&failing[..middle]) {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    if fails(&failing[..high]) {
        failing.truncate(high);
    }
    let mut chunk = failing.len().div_ceil(2);
    while chunk >= 1 && Instant::now() < deadline {
        let mut at = 0;
        while at < failing.len() && Instant::now() < deadline {
            let mut without = failing[..at].to_vec();
            without.extend_from_slice(&failing[(at + chunk).min(failing.len())..]);
            if !without.is_empty() && fails(&without) {
                failing = without;
            } else {
                at += chunk;
            }
        }
        if chunk == 1 {
            break;
        }
        chunk = chunk.div_ceil(2).min(chunk - 1);
    }
    failing
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
