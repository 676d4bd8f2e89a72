//! The history of one run: every operation a client invoked, when (monotonic microseconds
//! since the run began), what it was answered, and when — or that no answer came (the
//! connection dropped, the gateway died, a 5xx), in which case the operation may or may not
//! have taken effect and the checker treats it as indeterminate.

use std::future::Future;
use std::sync::Mutex;
use std::time::Instant;

/// One invocation and its response.
#[derive(Clone, Debug)]
pub struct Op<I, O> {
    pub client: usize,
    /// Microseconds since the run began, taken just before the request was sent.
    pub call: u64,
    pub input: I,
    pub answer: Answer<O>,
}

#[derive(Clone, Debug)]
pub enum Answer<O> {
    /// Answered at `at` (microseconds since the run began).
    Returned { at: u64, output: O },
    /// No answer to judge, and why: the operation may or may not have taken effect.
    Lost(String),
}

impl<I, O> Op<I, O> {
    /// The end of the interval the operation may have taken effect in (indeterminate: never ends).
    pub fn end(&self) -> u64 {
        match self.answer {
            Answer::Returned { at, .. } => at,
            Answer::Lost(_) => u64::MAX,
        }
    }

    /// The recorded output; `None` for an indeterminate operation.
    pub fn output(&self) -> Option<&O> {
        match &self.answer {
            Answer::Returned { output, .. } => Some(output),
            Answer::Lost(_) => None,
        }
    }
}

/// What a client made of an answer: a reply the model can judge, or none at all.
pub enum Outcome<O> {
    Answered(O),
    /// Why there is no answer to judge (shown in the failure report).
    Unknown(String),
}

pub struct Recorder<I, O> {
    origin: Instant,
    ops: Mutex<Vec<Op<I, O>>>,
}

impl<I: Clone, O: Clone> Recorder<I, O> {
    pub fn new(origin: Instant) -> Recorder<I, O> {
        Recorder {
            origin,
            ops: Mutex::new(Vec::new()),
        }
    }

    pub fn now(&self) -> u64 {
        self.at(Instant::now())
    }

    /// `instant` in the history's time.
    pub fn at(&self, instant: Instant) -> u64 {
        instant.saturating_duration_since(self.origin).as_micros() as u64
    }

    /// Runs `request` as client `client`'s operation `input` and records it; the answer, if any.
    pub async fn record<F>(&self, client: usize, input: I, request: F) -> Option<O>
    where
        F: Future<Output = Outcome<O>>,
    {
        self.record_all(client, vec![input], request).await
    }

    /// Runs `request`, one request that is an operation on several objects (a lifecycle pass
    /// over a bucket), and records it as client `client`'s operation `inputs` on each of them,
    /// all with the same interval and answer; the answer, if any.
    pub async fn record_all<F>(&self, client: usize, inputs: Vec<I>, request: F) -> Option<O>
    where
        F: Future<Output = Outcome<O>>,
    {
        let count = inputs.len();
        let each = async {
            match request.await {
                Outcome::Answered(output) => (0..count).map(|_| Outcome::Answered(output.clone())).collect(),
                Outcome::Unknown(why) => (0..count).map(|_| Outcome::Unknown(why.clone())).collect(),
            }
        };
        self.record_each(client, inputs, each).await.pop().flatten()
    }

    /// Runs `request`, one request that is an operation on each of several objects with an
    /// outcome of its own on each (a copy: a read of its source, a write of its destination),
    /// and records them as client `client`'s operations `inputs`, with the same interval; the
    /// answers.
    pub async fn record_each<F>(&self, client: usize, inputs: Vec<I>, request: F) -> Vec<Option<O>>
    where
        F: Future<Output = Vec<Outcome<O>>>,
    {
        let call = self.now();
        let outcomes = request.await;
        let at = self.now();
        let mut ops = self.ops.lock().unwrap();
        let mut outputs = Vec::new();
        for (input, outcome) in inputs.into_iter().zip(outcomes) {
            let answer = match outcome {
                Outcome::Answered(output) => {
                    outputs.push(Some(output.clone()));
                    Answer::Returned { at, output }
                }
                Outcome::Unknown(why) => {
                    outputs.push(None);
                    Answer::Lost(why)
                }
            };
            ops.push(Op {
                client,
                call,
                input,
                answer,
            });
        }
        outputs
    }

    /// Every operation recorded so far, in invocation order.
    pub fn history(&self) -> Vec<Op<I, O>> {
        let mut ops = self.ops.lock().unwrap().clone();
        ops.sort_by_key(|op| op.call);
        ops
    }
}
