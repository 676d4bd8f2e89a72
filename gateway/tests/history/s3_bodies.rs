//! S3 large bodies and copies in the database: bodies of 1.06 to 1.56 MiB (written in batches
//! of a MiB, each committed on its own, the last with the object's row) PUT to and deleted from
//! source keys of an unversioned bucket, copied from them to destination keys by CopyObject
//! and by UploadPartCopy (a one-part upload completed) while they change, and read whole. A
//! read must see a body some write made, all of it (the bytes are checked, not just a
//! name), or none; a copy must carry a body its source had at some instant of it.
//!
//! A copy is two operations, with its interval: a read of its source (the body it carried,
//! told by the ETag the copy answered: the MD5 of the bytes it copied) and a write of its
//! destination. Each key's history is checked against its one current body.

use std::collections::HashMap;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use md5::{Digest, Md5};
use rand::Rng;

use super::checker::Model;
use super::recorder::{Answer, Op, Outcome, Recorder};
use super::schedule::{Bounds, Schedule, join};
use crate::common::s3::{completion, http_status};

/// The keys written and deleted, and the keys copied to.
pub const SOURCES: [&str; 2] = ["s0", "s1"];
pub const DESTINATIONS: [&str; 2] = ["d0", "d1"];

#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Cmd {
    /// PUT the body named this (see [`body`]).
    Put(String),
    Get,
    Delete,
    /// A copy of `source` to this key, by UploadPartCopy (`part`) or CopyObject.
    CopyFrom {
        source: String,
        part: bool,
    },
    /// The read of this key by a copy to `destination`.
    CopiedTo {
        destination: String,
        part: bool,
    },
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Call {
    pub key: String,
    pub cmd: Cmd,
}

impl fmt::Debug for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = &self.key;
        let how = |part: &bool| if *part { "UploadPartCopy" } else { "CopyObject" };
        match &self.cmd {
            Cmd::Put(name) => write!(f, "PUT {k} body={name}"),
            Cmd::Get => write!(f, "GET {k}"),
            Cmd::Delete => write!(f, "DELETE {k}"),
            Cmd::CopyFrom { source, part } => write!(f, "{} {source} -> {k} (its write)", how(part)),
            Cmd::CopiedTo { destination, part } => write!(f, "{} {k} -> {destination} (its read)", how(part)),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    Written,
    /// A GET's body, by the name it was written with.
    Body(String),
    /// Bytes that are no body any client wrote (their length and first bytes), or a copy's
    /// ETag that is no body's.
    Garbled(usize, String),
    Deleted,
    /// 404.
    NotFound,
    /// A copy carried the body named this.
    Copied(String),
    /// The connection was refused: nothing sent, nothing done.
    NotSent,
}

/// The body named `name`: the name, `|`, then bytes that do not compress, 1.06 to 1.56 MiB in
/// all (more than one batch of a MiB, no more: a debug gateway on a loaded machine is slow),
/// the same for the same name.
pub fn body(name: &str) -> Vec<u8> {
    let mut hasher = DefaultHasher::new();
    name.hash(&mut hasher);
    let seed = hasher.finish();
    let size = (1088 << 10) + (seed % (512 << 10)) as usize;
    let mut body = format!("{name}|").into_bytes();
    body.extend(crate::common::noise(size - body.len(), seed));
    body
}

/// The name of a body that [`body`] made, if these bytes are all of it.
fn name_of(bytes: &[u8]) -> Option<String> {
    let end = bytes.iter().take(64).position(|b| *b == b'|')?;
    let name = std::str::from_utf8(&bytes[..end]).ok()?;
    (body(name) == bytes).then(|| name.to_owned())
}

fn garbled(bytes: &[u8]) -> Reply {
    Reply::Garbled(
        bytes.len(),
        String::from_utf8_lossy(&bytes[..bytes.len().min(24)]).into_owned(),
    )
}

/// One key: its current body, if it has one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Object {
    current: Option<Body>,
    /// Writes taken so far (see `s3_reads::Object`: a write always changes the state).
    writes: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Body {
    Named(Arc<str>),
    /// Written by a copy that got no answer: some body of its source, named by the first
    /// read that sees it.
    Unknown,
}

impl Object {
    fn written(&self, current: Option<Body>) -> Object {
        Object {
            current,
            writes: self.writes + 1,
        }
    }

    /// A read (a GET, a copy's) that saw `name`.
    fn seen(&self, name: &str) -> Vec<Object> {
        match &self.current {
            Some(Body::Named(current)) if **current == *name => vec![self.clone()],
            Some(Body::Unknown) => vec![Object {
                current: Some(Body::Named(name.into())),
                writes: self.writes,
            }],
            _ => vec![],
        }
    }
}

impl Model for Object {
    type Input = Call;
    type Output = Reply;

    fn step(&self, op: &Op<Call, Reply>) -> Vec<Object> {
        let unchanged = || vec![self.clone()];
        match (&op.input.cmd, op.output()) {
            (_, Some(Reply::NotSent)) => unchanged(),
            (Cmd::Put(name), None | Some(Reply::Written)) => {
                vec![self.written(Some(Body::Named(name.as_str().into())))]
            }
            (Cmd::Delete, None | Some(Reply::Deleted)) => vec![self.written(None)],
            (Cmd::Get | Cmd::CopiedTo { .. }, None) => unchanged(),
            (Cmd::Get | Cmd::CopiedTo { .. }, Some(Reply::NotFound)) if self.current.is_none() => unchanged(),
            (Cmd::Get, Some(Reply::Body(name))) | (Cmd::CopiedTo { .. }, Some(Reply::Copied(name))) => self.seen(name),
            (Cmd::CopyFrom { .. }, None) => vec![self.clone(), self.written(Some(Body::Unknown))],
            (Cmd::CopyFrom { .. }, Some(Reply::Copied(name))) => {
                vec![self.written(Some(Body::Named(name.as_str().into())))]
            }
            // The source was missing: nothing written.
            (Cmd::CopyFrom { .. }, Some(Reply::NotFound)) => unchanged(),
            _ => vec![],
        }
    }

    fn changes_nothing(op: &Op<Call, Reply>) -> bool {
        matches!(op.input.cmd, Cmd::Get | Cmd::CopiedTo { .. }) || op.output() == Some(&Reply::NotSent)
    }
}

/// The bodies written so far, by their MD5 (hex): what a copy's ETag names.
type Written = Arc<Mutex<HashMap<String, String>>>;

/// Runs `clients` clients on the keys of the unversioned bucket `bucket` into `recorder`, each
/// operation with a client `connect` makes.
pub async fn run(
    recorder: &Arc<Recorder<Call, Reply>>,
    connect: impl Fn() -> Client + Clone + Send + 'static,
    bucket: &str,
    clients: usize,
    bounds: &Bounds,
) {
    let schedule = Schedule::new(clients, bounds, Duration::from_millis(20));
    let written: Written = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    for id in 0..clients {
        let (recorder, schedule, written) = (recorder.clone(), schedule.clone(), written.clone());
        let (connect, bucket) = (connect.clone(), bucket.to_owned());
        let mut rng = bounds.rng("s3-bodies", id);
        tasks.spawn(async move {
            let mut n = 0;
            while let Some(ops) = schedule.round(&mut rng).await {
                for _ in 0..ops {
                    n += 1;
                    let source = SOURCES[rng.random_range(0..SOURCES.len())].to_owned();
                    let destination = DESTINATIONS[rng.random_range(0..DESTINATIONS.len())].to_owned();
                    let roll = rng.random_range(0..100);
                    let call = |key: &String, cmd| Call { key: key.clone(), cmd };
                    let s3 = connect();
                    if roll >= 70 {
                        let part = rng.random_bool(0.5);
                        let read = call(
                            &source,
                            Cmd::CopiedTo {
                                destination: destination.clone(),
                                part,
                            },
                        );
                        let write = call(
                            &destination,
                            Cmd::CopyFrom {
                                source: source.clone(),
                                part,
                            },
                        );
                        let copy = copy(&s3, &bucket, &source, &destination, part, &written);
                        recorder.record_each(id, vec![read, write], copy).await;
                        continue;
                    }
                    let call = match roll {
                        0..30 => call(&source, Cmd::Put(format!("c{id}.{n}"))),
                        30..40 => call(&source, Cmd::Delete),
                        40..55 => call(&source, Cmd::Get),
                        _ => call(&destination, Cmd::Get),
                    };
                    recorder
                        .record(id, call.clone(), send(&s3, &bucket, &call, &written))
                        .await;
                }
            }
        });
    }
    join(tasks).await;
}

/// A GET of every key by client `client`, one after another (what is there at the end).
pub async fn read_all(recorder: &Recorder<Call, Reply>, client: usize, s3: &Client, bucket: &str) {
    for key in SOURCES.iter().chain(&DESTINATIONS) {
        let call = Call {
            key: (*key).to_owned(),
            cmd: Cmd::Get,
        };
        let written = Written::default();
        recorder
            .record(client, call.clone(), send(s3, bucket, &call, &written))
            .await;
    }
}

/// A 404 is an answer, and so is a connection refused (no gateway listening: nothing was
/// sent); any other failure leaves the outcome unknown (a 503, a gateway gone mid-request: the
/// write may or may not have happened).
fn refusal<E: fmt::Debug>(
    err: aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> Outcome<Reply> {
    match http_status(&err) {
        404 => Outcome::Answered(Reply::NotFound),
        0 if format!("{err:?}").contains("ConnectionRefused") => Outcome::Answered(Reply::NotSent),
        status => Outcome::Unknown(format!("status {status}: {err}")),
    }
}

/// Bodies cut short while the gateway was killed (between the read's call and its answer, as
/// `kills` has them): no answer to judge after all. Any other body cut short stays a failure.
pub fn excuse_cut_bodies(ops: &mut [Op<Call, Reply>], kills: &[u64]) {
    for op in ops {
        if let Answer::Returned {
            at,
            output: Reply::Garbled(_, why),
        } = &op.answer
            && why.starts_with(CUT_SHORT)
            && kills.iter().any(|kill| (op.call..=*at).contains(kill))
        {
            op.answer = Answer::Lost(why.clone());
        }
    }
}

/// How a body cut short is told.
const CUT_SHORT: &str = "body cut short";

async fn send(s3: &Client, bucket: &str, call: &Call, written: &Written) -> Outcome<Reply> {
    let key = call.key.as_str();
    match &call.cmd {
        Cmd::Put(name) => {
            let bytes = body(name);
            let md5 = hex::encode(Md5::digest(&bytes));
            written.lock().unwrap().insert(md5, name.clone());
            let put = s3.put_object().bucket(bucket).key(key).body(ByteStream::from(bytes));
            match put.send().await {
                Ok(_) => Outcome::Answered(Reply::Written),
                Err(err) => refusal(err),
            }
        }
        Cmd::Delete => match s3.delete_object().bucket(bucket).key(key).send().await {
            Ok(_) => Outcome::Answered(Reply::Deleted),
            Err(err) => refusal(err),
        },
        Cmd::Get => match s3.get_object().bucket(bucket).key(key).send().await {
            Ok(out) => match out.body.collect().await {
                Ok(bytes) => {
                    let bytes = bytes.into_bytes();
                    Outcome::Answered(name_of(&bytes).map_or_else(|| garbled(&bytes), Reply::Body))
                }
                // The gateway found the body incomplete (unless it was killed meanwhile:
                // `excuse_cut_bodies`).
                Err(err) => Outcome::Answered(Reply::Garbled(0, format!("{CUT_SHORT}: {err}"))),
            },
            Err(err) => refusal(err),
        },
        Cmd::CopyFrom { .. } | Cmd::CopiedTo { .. } => unreachable!("copies run as two operations: {call:?}"),
    }
}

/// The body an ETag (quoted MD5) names, as a copy's answer.
fn copied(written: &Written, etag: Option<&str>) -> Reply {
    let etag = etag.unwrap_or_default().trim_matches('"');
    match written.lock().unwrap().get(etag) {
        Some(name) => Reply::Copied(name.clone()),
        None => Reply::Garbled(0, format!("ETag {etag}")),
    }
}

/// Copies `source` to `destination`: the outcomes of its read and of its write.
async fn copy(
    s3: &Client,
    bucket: &str,
    source: &str,
    destination: &str,
    part: bool,
    written: &Written,
) -> Vec<Outcome<Reply>> {
    let from = format!("{bucket}/{source}");
    let same = |outcome: Outcome<Reply>| match outcome {
        Outcome::Answered(reply) => vec![Outcome::Answered(reply.clone()), Outcome::Answered(reply)],
        Outcome::Unknown(why) => vec![Outcome::Unknown(why.clone()), Outcome::Unknown(why)],
    };
    if !part {
        let copied_object = s3
            .copy_object()
            .bucket(bucket)
            .key(destination)
            .copy_source(from)
            .send()
            .await;
        return same(match copied_object {
            Ok(out) => Outcome::Answered(copied(written, out.copy_object_result().and_then(|r| r.e_tag()))),
            Err(err) => refusal(err),
        });
    }
    let upload = match s3
        .create_multipart_upload()
        .bucket(bucket)
        .key(destination)
        .send()
        .await
    {
        Ok(out) => out.upload_id.unwrap_or_default(),
        // Nothing read, nothing written.
        Err(err) => return same(refusal(err)),
    };
    let copied_part = s3
        .upload_part_copy()
        .bucket(bucket)
        .key(destination)
        .upload_id(&upload)
        .part_number(1)
        .copy_source(from)
        .send()
        .await;
    let (read, etag) = match copied_part {
        Ok(out) => {
            let etag = out
                .copy_part_result()
                .and_then(|r| r.e_tag())
                .unwrap_or_default()
                .to_owned();
            (copied(written, Some(&etag)), etag)
        }
        Err(err) => return same(refusal(err)),
    };
    let completed = s3
        .complete_multipart_upload()
        .bucket(bucket)
        .key(destination)
        .upload_id(&upload)
        .multipart_upload(completion(&[(1, &etag)]))
        .send()
        .await;
    let write = match completed {
        Ok(_) => Outcome::Answered(read.clone()),
        Err(err) => Outcome::Unknown(format!("completion: {err}")),
    };
    vec![Outcome::Answered(read), write]
}
