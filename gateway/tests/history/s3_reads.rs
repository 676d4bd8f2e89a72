//! S3 small reads under many clients: GETs and HEADs of a few keys of an unversioned bucket,
//! bodies of 4 KiB (kept in the object row: a read is one statement), among PUTs and DELETEs of
//! the same keys. Each key's history is checked against its one current body: a read must see
//! the body of a write that may be the latest one at some instant of the read, whole, with its
//! own ETag.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use md5::{Digest, Md5};
use rand::Rng;

use super::checker::Model;
use super::recorder::{Op, Outcome, Recorder};
use super::schedule::{Bounds, Schedule, join};
use crate::common::s3::http_status;

/// A body's size: a small object, stored in its row.
const BODY_SIZE: usize = 4096;

#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Cmd {
    /// PUT the body named this (see [`body`]).
    Put(String),
    Get,
    Head,
    Delete,
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Call {
    pub key: String,
    pub cmd: Cmd,
}

impl fmt::Debug for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = &self.key;
        match &self.cmd {
            Cmd::Put(name) => write!(f, "PUT {k} body={name}"),
            Cmd::Get => write!(f, "GET {k}"),
            Cmd::Head => write!(f, "HEAD {k}"),
            Cmd::Delete => write!(f, "DELETE {k}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    Written,
    /// A GET's body, by the name it was written with.
    Body(String),
    /// A GET's body that is no body any client wrote (its length and first bytes).
    Garbled(usize, String),
    /// A HEAD's ETag (without quotes) and length.
    Head {
        etag: String,
        size: i64,
    },
    Deleted,
    /// 404.
    NotFound,
}

/// The 4 KiB body named `name`: the name, then dashes.
pub fn body(name: &str) -> Vec<u8> {
    let mut body = name.as_bytes().to_vec();
    body.resize(BODY_SIZE, b'-');
    body
}

/// The name of a body that [`body`] made, if it is one.
fn name_of(bytes: &[u8]) -> Option<String> {
    let name = std::str::from_utf8(bytes).ok()?.trim_end_matches('-');
    (bytes.len() == BODY_SIZE && body(name) == bytes).then(|| name.to_owned())
}

fn etag_of(name: &str) -> String {
    hex::encode(Md5::digest(body(name)))
}

/// One key of an unversioned bucket: the name of its current body, if it has one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Object {
    current: Option<Arc<str>>,
    /// Writes taken so far: a write always changes the state, even a DELETE of a missing key,
    /// because the search takes at once any operation that leaves the state as it is (right for
    /// a read, wrong for a write that matters only later, after a PUT).
    writes: u32,
}

impl Model for Object {
    type Input = Call;
    type Output = Reply;

    fn step(&self, op: &Op<Call, Reply>) -> Vec<Object> {
        let out = op.output();
        let unchanged = || vec![self.clone()];
        let current = self.current.as_deref();
        let written = |current: Option<Arc<str>>| Object {
            current,
            writes: self.writes + 1,
        };
        match (&op.input.cmd, out) {
            (Cmd::Put(name), None | Some(Reply::Written)) => vec![written(Some(name.as_str().into()))],
            (Cmd::Delete, None | Some(Reply::Deleted)) => vec![written(None)],
            (Cmd::Get | Cmd::Head, None) => unchanged(),
            (Cmd::Get | Cmd::Head, Some(Reply::NotFound)) if current.is_none() => unchanged(),
            (Cmd::Get, Some(Reply::Body(name))) if current == Some(name.as_str()) => unchanged(),
            (Cmd::Head, Some(Reply::Head { etag, size }))
                if current.is_some_and(|name| *etag == etag_of(name)) && *size == BODY_SIZE as i64 =>
            {
                unchanged()
            }
            _ => vec![],
        }
    }

    fn changes_nothing(op: &Op<Call, Reply>) -> bool {
        matches!(op.input.cmd, Cmd::Get | Cmd::Head)
    }
}

/// Runs `clients` clients on keys `keys` of the unversioned bucket `bucket`, mostly reading;
/// the history.
pub async fn run(
    client: &Client,
    bucket: &str,
    keys: &[&str],
    clients: usize,
    bounds: &Bounds,
) -> Vec<Op<Call, Reply>> {
    let recorder = Arc::new(Recorder::new(std::time::Instant::now()));
    let schedule = Schedule::new(clients, bounds, Duration::from_millis(2));
    let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    let mut tasks = tokio::task::JoinSet::new();
    for id in 0..clients {
        let (recorder, schedule) = (recorder.clone(), schedule.clone());
        let (s3, bucket, keys) = (client.clone(), bucket.to_owned(), keys.clone());
        let mut rng = bounds.rng("s3-small-reads", id);
        tasks.spawn(async move {
            let mut n = 0;
            while let Some(ops) = schedule.round(&mut rng).await {
                for _ in 0..ops {
                    n += 1;
                    let key = keys[rng.random_range(0..keys.len())].clone();
                    let cmd = match rng.random_range(0..100) {
                        0..15 => Cmd::Put(format!("c{id}.{n}")),
                        15..20 => Cmd::Delete,
                        20..40 => Cmd::Head,
                        _ => Cmd::Get,
                    };
                    let call = Call { key, cmd };
                    recorder.record(id, call.clone(), send(&s3, &bucket, &call)).await;
                }
            }
        });
    }
    join(tasks).await;
    recorder.history()
}

/// A 404 is an answer; any other failure leaves the outcome unknown (a 503 while PostgreSQL is
/// away: the write may or may not have happened).
fn refusal<E>(err: aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>) -> Outcome<Reply> {
    match http_status(&err) {
        404 => Outcome::Answered(Reply::NotFound),
        status => Outcome::Unknown(format!("status {status}")),
    }
}

async fn send(s3: &Client, bucket: &str, call: &Call) -> Outcome<Reply> {
    let key = call.key.as_str();
    match &call.cmd {
        Cmd::Put(name) => {
            let put = s3
                .put_object()
                .bucket(bucket)
                .key(key)
                .body(ByteStream::from(body(name)));
            match put.send().await {
                Ok(_) => Outcome::Answered(Reply::Written),
                Err(err) => refusal(err),
            }
        }
        Cmd::Delete => match s3.delete_object().bucket(bucket).key(key).send().await {
            Ok(_) => Outcome::Answered(Reply::Deleted),
            Err(err) => refusal(err),
        },
        Cmd::Head => match s3.head_object().bucket(bucket).key(key).send().await {
            Ok(out) => Outcome::Answered(Reply::Head {
                etag: out.e_tag().unwrap_or_default().trim_matches('"').to_owned(),
                size: out.content_length().unwrap_or(-1),
            }),
            Err(err) => refusal(err),
        },
        Cmd::Get => match s3.get_object().bucket(bucket).key(key).send().await {
            Ok(out) => match out.body.collect().await {
                Ok(bytes) => {
                    let bytes = bytes.into_bytes();
                    Outcome::Answered(match name_of(&bytes) {
                        Some(name) => Reply::Body(name),
                        None => Reply::Garbled(
                            bytes.len(),
                            String::from_utf8_lossy(&bytes[..bytes.len().min(32)]).into_owned(),
                        ),
                    })
                }
                Err(err) => Outcome::Unknown(format!("body: {err}")),
            },
            Err(err) => refusal(err),
        },
    }
}
