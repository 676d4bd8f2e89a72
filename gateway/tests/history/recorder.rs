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
        self.origin.elapsed().as_micros() as u64
    }

    /// Runs `request` as client `client`'s operation `input` and records it; the answer, if any.
    pub async fn record<F>(&self, client: usize, input: I, request: F) -> Option<O>
    where
        F: Future<Output = Outcome<O>>,
    {
        let call = self.now();
        let outcome = request.await;
        let (answer, output) = match outcome {
            Outcome::Answered(output) => (
                Answer::Returned {
                    at: self.now(),
                    output: output.clone(),
                },
                Some(output),
            ),
            Outcome::Unknown(why) => (Answer::Lost(why), None),
        };
        self.ops.lock().unwrap().push(Op {
            client,
            call,
            input,
            answer,
        });
        output
    }

    /// Every operation recorded so far, in invocation order.
    pub fn history(&self) -> Vec<Op<I, O>> {
        let mut ops = self.ops.lock().unwrap().clone();
        ops.sort_by_key(|op| op.call);
        ops
    }
}
