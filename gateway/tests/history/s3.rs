//! S3: clients write, read, copy and delete a few keys of a versioned bucket through aws-sdk-s3
//! — with and without a version id, conditionally (If-None-Match, If-Match) and by multipart
//! upload — and each key's history is checked against its version history: which versions
//! exist, in which order, and so which is current. The same model checks a bucket with object
//! lock (versions written under retention or legal hold, deletes of them refused, a bypass of
//! GOVERNANCE retention by a key allowed to and by one that is not), a Suspended bucket (null
//! versions replaced, null delete markers) and lifecycle expiry running among the writes
//! (`s3_lifecycle`). Apart from that, clients list a bucket page
//! by page (small max-keys, sending start-after along with the continuation token in the ways
//! clients do) while others write and delete its keys: a listing must hold every key that
//! existed throughout it and no key that never existed.

use std::collections::HashMap;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketVersioningStatus, ObjectLockLegalHold, ObjectLockLegalHoldStatus, ObjectLockMode, VersioningConfiguration,
};
use rand::Rng;
use rand::rngs::StdRng;

use super::checker::Model;
use super::recorder::{Op, Outcome, Recorder};
use super::schedule::{Bounds, Schedule, join};
use crate::common::s3::{completion, http_status};

/// An ETag no version has: a condition on it must fail.
pub const WRONG_ETAG: &str = "\"00000000000000000000000000000000\"";

#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Cmd {
    Put(String),
    PutIfNoneMatch(String),
    /// PUT body with If-Match: etag.
    PutIfMatch(String, String),
    Get,
    GetVersion(String),
    Delete,
    DeleteVersion(String),
    DeleteIfMatch(String),
    /// CopyObject from this key's version to the key; the source's body as clients know it
    /// (none: a delete marker). A copy reads its source before it writes, so a source deleted
    /// meanwhile may still be copied: only the body is checked.
    CopyVersion(String, Option<String>),
    /// Create, one part of this body, complete.
    Multipart(String),
    /// PUT under object lock: a retention a day long, or a legal hold.
    PutLocked(String, Lock),
    /// DELETE of a version with `x-amz-bypass-governance-retention: true`, by a key that may
    /// bypass GOVERNANCE retention (true) or one a policy denies it (false).
    DeleteVersionBypass(String, bool),
    /// PutObjectLegalHold OFF on a version.
    ReleaseHold(String),
    /// The current version's timestamps moved days back, as if it had been written then
    /// (every key's at once: an operation on every key).
    Age,
    /// A lifecycle pass (current versions expire after a day) over the bucket: run once, it
    /// is an operation on every key.
    Expire,
    /// The bucket's versioning set Suspended (true) or Enabled: an operation on every key.
    Versioning(bool),
}

/// The object lock a version is written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lock {
    Governance,
    Compliance,
    LegalHold,
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
            Cmd::Put(body) => write!(f, "PUT {k} body={body}"),
            Cmd::PutIfNoneMatch(body) => write!(f, "PUT {k} body={body} If-None-Match: *"),
            Cmd::PutIfMatch(body, etag) => write!(f, "PUT {k} body={body} If-Match: {etag}"),
            Cmd::Get => write!(f, "GET {k}"),
            Cmd::GetVersion(v) => write!(f, "GET {k}?versionId={v}"),
            Cmd::Delete => write!(f, "DELETE {k}"),
            Cmd::DeleteVersion(v) => write!(f, "DELETE {k}?versionId={v}"),
            Cmd::DeleteIfMatch(etag) => write!(f, "DELETE {k} If-Match: {etag}"),
            Cmd::CopyVersion(v, _) => write!(f, "COPY {k}?versionId={v} -> {k}"),
            Cmd::Multipart(body) => write!(f, "MULTIPART {k} body={body}"),
            Cmd::PutLocked(body, lock) => write!(f, "PUT {k} body={body} lock={lock:?}"),
            Cmd::DeleteVersionBypass(v, allowed) => write!(
                f,
                "DELETE {k}?versionId={v} bypassing GOVERNANCE ({})",
                if *allowed { "allowed" } else { "denied" }
            ),
            Cmd::ReleaseHold(v) => write!(f, "LEGAL-HOLD OFF {k}?versionId={v}"),
            Cmd::Age => write!(f, "AGE ({k})"),
            Cmd::Expire => write!(f, "LIFECYCLE PASS ({k})"),
            Cmd::Versioning(suspended) => write!(
                f,
                "VERSIONING {} ({k})",
                if *suspended { "Suspended" } else { "Enabled" }
            ),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// A new version (PUT, copy, multipart completion).
    Written {
        version: String,
        etag: String,
    },
    Body {
        version: String,
        body: String,
    },
    /// 404 (NoSuchKey, NoSuchVersion).
    NotFound,
    /// 405: the version is a delete marker.
    MethodNotAllowed,
    /// 204; the delete marker a DELETE without a version id made.
    Deleted {
        marker: Option<String>,
    },
    /// 412.
    PreconditionFailed,
    /// Any other 4xx: refused, nothing done.
    Refused(u16, String),
    /// An operation that answers nothing more (a legal hold set, an age, a lifecycle pass).
    Done,
}

/// One version of a key. Its strings are shared: the checker copies version lists at every
/// write it linearizes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Version {
    /// `?…` while unknown (written by an operation that got no answer).
    pub id: Arc<str>,
    /// `None`: a delete marker.
    pub body: Option<Arc<str>>,
    /// `None` when unknown.
    pub etag: Option<Arc<str>>,
    /// Old enough for the lifecycle rule to expire it.
    pub aged: bool,
    pub lock: Option<Lock>,
}

impl Version {
    /// Whether a delete of this version must be refused (`bypass`: GOVERNANCE bypassed).
    fn locked(&self, bypass: bool) -> bool {
        match self.lock {
            None => false,
            Some(Lock::Governance) => !bypass,
            Some(Lock::Compliance | Lock::LegalHold) => true,
        }
    }
}

/// One key of a versioned bucket: its versions, oldest first; the last is current.
///
/// The search clones, hashes and compares a state at every step, and a key's history grows to
/// hundreds of versions: the versions are a shared list, newest first, each node carrying the
/// hash of the list up to it, so a write it linearizes costs one node, not a copy and a rehash of
/// the whole list (which made a hard history's 200,000-step budget take 7 minutes).
#[derive(Clone, Default)]
pub struct Versions {
    newest: Option<Arc<Node>>,
    /// The bucket is Suspended: a write whose answer did not name its version made the null
    /// one.
    suspended: bool,
}

struct Node {
    version: Version,
    older: Option<Arc<Node>>,
    /// This version's own hash, kept for rebuilding the newer part of a list.
    own: u64,
    /// The hash of this version and every older one, in order.
    hash: u64,
}

impl Drop for Node {
    /// Iteratively: a recursive drop of a long list would overflow the stack.
    fn drop(&mut self) {
        let mut older = self.older.take();
        while let Some(node) = older {
            older = match Arc::try_unwrap(node) {
                Ok(mut node) => node.older.take(),
                Err(_) => None,
            };
        }
    }
}

impl PartialEq for Versions {
    fn eq(&self, other: &Versions) -> bool {
        let (mut a, mut b) = (&self.newest, &other.newest);
        loop {
            match (a, b) {
                (None, None) => return true,
                _ if self.suspended != other.suspended => return false,
                (Some(x), Some(y)) if Arc::ptr_eq(x, y) => return true,
                (Some(x), Some(y)) if x.hash == y.hash && x.version == y.version => (a, b) = (&x.older, &y.older),
                _ => return false,
            }
        }
    }
}

impl Eq for Versions {}

impl Hash for Versions {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.newest.as_ref().map_or(0, |node| node.hash));
        self.suspended.hash(state);
    }
}

impl fmt::Debug for Versions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = if self.suspended { "Suspended" } else { "Versions" };
        f.debug_tuple(name).field(&self.oldest_first()).finish()
    }
}

impl Versions {
    /// Newest first.
    fn iter(&self) -> impl Iterator<Item = &Version> {
        std::iter::successors(self.newest.as_deref(), |node| node.older.as_deref()).map(|node| &node.version)
    }

    fn oldest_first(&self) -> Vec<Version> {
        let mut versions: Vec<Version> = self.iter().cloned().collect();
        versions.reverse();
        versions
    }

    /// With `version` the newest; a null version replaces the null one there was.
    fn with(&self, version: Version) -> Versions {
        let older = match &*version.id {
            "null" => self.without("null"),
            _ => self.clone(),
        };
        older.pushed(version)
    }

    fn pushed(&self, version: Version) -> Versions {
        let mut hasher = DefaultHasher::new();
        version.hash(&mut hasher);
        let own = hasher.finish();
        let older_hash = self.newest.as_ref().map_or(0, |node| node.hash);
        Versions {
            newest: Some(Arc::new(Node {
                version,
                older: self.newest.clone(),
                own,
                hash: (older_hash.rotate_left(5) ^ own).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            })),
            suspended: self.suspended,
        }
    }

    /// Without the versions named `id`.
    fn without(&self, id: &str) -> Versions {
        self.edited(id, |_| None)
    }

    /// With the versions named `id` as `edit` makes them (`None`: removed): the versions older
    /// than the oldest of them are shared, only the newer ones are rebuilt (deletes mostly name
    /// one of the newest).
    fn edited(&self, id: &str, edit: impl Fn(&Version) -> Option<Version>) -> Versions {
        let nodes: Vec<&Node> = std::iter::successors(self.newest.as_deref(), |node| node.older.as_deref()).collect();
        let Some(oldest) = nodes.iter().rposition(|node| *node.version.id == *id) else {
            return self.clone();
        };
        let kept = Versions {
            newest: nodes[oldest].older.clone(),
            suspended: self.suspended,
        };
        nodes[..=oldest].iter().rev().fold(kept, |list, node| {
            if *node.version.id != *id {
                return list.pushed_node(node);
            }
            match edit(&node.version) {
                Some(version) => list.pushed(version),
                None => list,
            }
        })
    }

    /// `node`'s version on top, its hash kept.
    fn pushed_node(&self, node: &Node) -> Versions {
        let older_hash = self.newest.as_ref().map_or(0, |newest| newest.hash);
        Versions {
            newest: Some(Arc::new(Node {
                version: node.version.clone(),
                older: self.newest.clone(),
                own: node.own,
                hash: (older_hash.rotate_left(5) ^ node.own).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            })),
            suspended: self.suspended,
        }
    }

    fn find(&self, id: &str) -> Option<&Version> {
        self.iter().find(|v| *v.id == *id)
    }

    fn current_object(&self) -> Option<&Version> {
        self.iter().next().filter(|v| v.body.is_some())
    }

    /// Whether the current object's ETag may be `etag`: `Some(answer)`, or `None` when unknown.
    fn current_matches(&self, etag: &str) -> Option<bool> {
        match self.current_object() {
            None => Some(false),
            Some(Version { etag: None, .. }) => None,
            Some(Version { etag: Some(e), .. }) => Some(**e == *etag),
        }
    }

    /// The new version `op` wrote with `body`, as its answer names it (unnamed: the null
    /// version in a Suspended bucket, else one to be named by the first read that sees it).
    fn written(&self, op: &Op<Call, Reply>, body: Option<String>) -> Version {
        let (id, etag) = match op.output() {
            Some(Reply::Written { version, etag }) => (version.as_str().into(), Some(etag.as_str().into())),
            Some(Reply::Deleted { marker: Some(id) }) => (id.as_str().into(), None),
            _ if self.suspended => ("null".into(), None),
            _ => (format!("?c{}@{}", op.client, op.call).into(), None),
        };
        let lock = match &op.input.cmd {
            Cmd::PutLocked(_, lock) => Some(*lock),
            _ => None,
        };
        Version {
            id,
            body: body.map(Arc::from),
            etag,
            aged: false,
            lock,
        }
    }

    /// A delete of version `id` (GOVERNANCE bypassed or not) answered `out`.
    fn delete_version(&self, id: &str, bypass: bool, out: Option<&Reply>) -> Vec<Versions> {
        let locked = self.find(id).is_some_and(|v| v.locked(bypass));
        match (out, locked) {
            (None, false) => vec![self.without(id)],
            // Deleting a version that is not there succeeds too.
            (Some(Reply::Deleted { .. }), false) => vec![self.without(id)],
            (None, true) => vec![self.clone()],
            // Object lock refuses it: 403 AccessDenied, nothing removed.
            (Some(Reply::Refused(403, _)), true) => vec![self.clone()],
            _ => vec![],
        }
    }
}

impl Model for Versions {
    type Input = Call;
    type Output = Reply;

    fn step(&self, op: &Op<Call, Reply>) -> Vec<Versions> {
        let out = op.output();
        let unchanged = || vec![self.clone()];
        let refused = matches!(out, Some(Reply::Refused(..)));
        // A new version is the null one exactly when the bucket is Suspended.
        let made = match (&op.input.cmd, out) {
            (Cmd::DeleteVersion(_) | Cmd::DeleteVersionBypass(..), _) => None,
            (_, Some(Reply::Written { version, .. } | Reply::Deleted { marker: Some(version) })) => Some(version),
            _ => None,
        };
        if made.is_some_and(|version| (version == "null") != self.suspended) {
            return vec![];
        }
        match &op.input.cmd {
            Cmd::Put(body) | Cmd::Multipart(body) | Cmd::PutLocked(body, _) => match out {
                None | Some(Reply::Written { .. }) => vec![self.with(self.written(op, Some(body.clone())))],
                _ => vec![],
            },
            Cmd::PutIfNoneMatch(body) | Cmd::PutIfMatch(body, _) => {
                let holds = match &op.input.cmd {
                    Cmd::PutIfMatch(_, etag) => self.current_matches(etag),
                    _ => Some(self.current_object().is_none()),
                };
                let written = || self.with(self.written(op, Some(body.clone())));
                match (out, holds) {
                    // 409 ConditionalRequestConflict: a concurrent write won; nothing done.
                    (Some(Reply::Refused(409, _)), _) => unchanged(),
                    (None, Some(true)) => vec![self.clone(), written()],
                    (None, None) => vec![self.clone(), written()],
                    (None, Some(false)) => unchanged(),
                    (Some(Reply::Written { .. }), Some(true) | None) => vec![written()],
                    (Some(Reply::PreconditionFailed), Some(false) | None) => unchanged(),
                    // If-Match on a key without a current object: 404 NoSuchKey.
                    (Some(Reply::NotFound), _) if self.current_object().is_none() => unchanged(),
                    _ => vec![],
                }
            }
            Cmd::Get => match (out, self.current_object()) {
                (None, _) => unchanged(),
                (Some(Reply::NotFound), None) => unchanged(),
                (Some(Reply::Body { version, body }), Some(current))
                    if current.body.as_deref() == Some(body.as_str()) =>
                {
                    self.seen(version)
                }
                _ => vec![],
            },
            Cmd::GetVersion(id) => match (out, self.iter().find(|v| *v.id == **id)) {
                (None, _) => unchanged(),
                (Some(Reply::NotFound), None) => unchanged(),
                (Some(Reply::MethodNotAllowed), Some(Version { body: None, .. })) => unchanged(),
                (Some(Reply::Body { body, .. }), Some(v)) if v.body.as_deref() == Some(body.as_str()) => unchanged(),
                _ => vec![],
            },
            Cmd::Delete => match out {
                None | Some(Reply::Deleted { .. }) => vec![self.with(self.written(op, None))],
                _ => vec![],
            },
            Cmd::DeleteVersion(id) => self.delete_version(id, false, out),
            Cmd::DeleteVersionBypass(id, true) => self.delete_version(id, true, out),
            // The bypass needs s3:BypassGovernanceRetention, whatever the version's lock.
            Cmd::DeleteVersionBypass(..) => match out {
                None | Some(Reply::Refused(403, _)) => unchanged(),
                _ => vec![],
            },
            Cmd::ReleaseHold(id) => {
                let released = || {
                    self.edited(id, |v| {
                        Some(Version {
                            lock: v.lock.filter(|lock| *lock != Lock::LegalHold),
                            ..v.clone()
                        })
                    })
                };
                match (out, self.find(id)) {
                    (None, _) => vec![self.clone(), released()],
                    (Some(Reply::Done), Some(v)) if v.body.is_some() => vec![released()],
                    (Some(Reply::NotFound), None) => unchanged(),
                    // A delete marker holds no lock.
                    (Some(Reply::MethodNotAllowed | Reply::Refused(..)), Some(v)) if v.body.is_none() => unchanged(),
                    _ => vec![],
                }
            }
            Cmd::Age => {
                let aged = match self.iter().next() {
                    Some(current) => self.edited(&current.id.clone(), |v| {
                        Some(Version {
                            aged: true,
                            ..v.clone()
                        })
                    }),
                    None => self.clone(),
                };
                match out {
                    None => vec![self.clone(), aged],
                    Some(Reply::Done) => vec![aged],
                    _ => vec![],
                }
            }
            Cmd::Versioning(suspended) => {
                let set = Versions {
                    newest: self.newest.clone(),
                    suspended: *suspended,
                };
                match out {
                    None => vec![self.clone(), set],
                    Some(Reply::Done) => vec![set],
                    _ => vec![],
                }
            }
            // A pass may run before or after any write it overlaps: it expires the current
            // version if that is old enough when it does, or leaves it; never a younger one.
            Cmd::Expire => match (out, self.current_object()) {
                (None | Some(Reply::Done), Some(current)) if current.aged => {
                    let marker = Version {
                        id: format!("?lifecycle@{}", op.call).into(),
                        body: None,
                        etag: None,
                        aged: false,
                        lock: None,
                    };
                    vec![self.clone(), self.with(marker)]
                }
                (None | Some(Reply::Done), _) => unchanged(),
                _ => vec![],
            },
            Cmd::DeleteIfMatch(etag) => {
                let holds = self.current_matches(etag);
                let deleted = || self.with(self.written(op, None));
                match (out, holds) {
                    // Refusing the header outright is allowed; ignoring it is not.
                    _ if refused => unchanged(),
                    (None, Some(false)) => unchanged(),
                    (None, _) => vec![self.clone(), deleted()],
                    (Some(Reply::Deleted { .. }), Some(true) | None) => vec![deleted()],
                    (Some(Reply::PreconditionFailed), Some(false) | None) => unchanged(),
                    (Some(Reply::NotFound), _) if self.current_object().is_none() => unchanged(),
                    _ => vec![],
                }
            }
            Cmd::CopyVersion(_, body) => match (out, body) {
                (None, Some(body)) => vec![self.clone(), self.with(self.written(op, Some(body.clone())))],
                (Some(Reply::Written { .. }), Some(body)) => vec![self.with(self.written(op, Some(body.clone())))],
                (None, None) | (Some(Reply::NotFound | Reply::Refused(..) | Reply::MethodNotAllowed), _) => unchanged(),
                _ => vec![],
            },
        }
    }

    fn changes_nothing(op: &Op<Call, Reply>) -> bool {
        matches!(op.input.cmd, Cmd::Get | Cmd::GetVersion(_))
            || matches!(
                op.output(),
                Some(Reply::PreconditionFailed | Reply::NotFound | Reply::MethodNotAllowed | Reply::Refused(..))
            )
    }
}

impl Versions {
    /// A read saw the current version as `id`: consistent if that is its id, or its id is
    /// unknown yet (then it is this one from now on).
    fn seen(&self, id: &str) -> Vec<Versions> {
        let Some(current) = self.iter().next() else {
            return vec![];
        };
        if *current.id == *id {
            vec![self.clone()]
        } else if current.id.starts_with('?') && !self.iter().any(|v| *v.id == *id) {
            let older = Versions {
                newest: self.newest.as_ref().and_then(|node| node.older.clone()),
                suspended: self.suspended,
            };
            vec![older.with(Version {
                id: id.into(),
                ..current.clone()
            })]
        } else {
            vec![]
        }
    }
}

/// What clients know of a key's versions (ids and ETags from answers), to name them in requests.
type Known = Arc<Mutex<HashMap<String, Vec<Named>>>>;

/// A version as clients know it: id, ETag, body (none: a delete marker).
#[derive(Clone)]
struct Named {
    id: String,
    etag: String,
    body: Option<String>,
}

/// What else the clients of a versioned bucket do besides plain writes, reads and deletes.
#[derive(Clone)]
pub enum Mix {
    Plain,
    /// Writes and deletes conditional on the current version (If-None-Match, If-Match).
    Conditional,
    /// The bucket has object lock: versions written under retention or legal hold, holds
    /// released, deletes of versions with and without the bypass; `denied` signs with a key
    /// a policy denies s3:BypassGovernanceRetention.
    Locked {
        denied: Client,
    },
    /// Each key gets two versions while the bucket is Enabled, then it is Suspended, and
    /// clients switch it between Suspended and Enabled.
    Suspended,
    /// Keys aged and lifecycle passes run among the writes.
    Lifecycle(super::s3_lifecycle::Lifecycle),
}

/// Runs `clients` clients on keys `keys` of the versioned bucket `bucket`, `mix` among their
/// operations; the history.
pub async fn run_versions(
    client: &Client,
    bucket: &str,
    keys: &[&str],
    mix: Mix,
    clients: usize,
    bounds: &Bounds,
) -> Vec<Op<Call, Reply>> {
    let recorder = Arc::new(Recorder::new(std::time::Instant::now()));
    let known: Known = Arc::default();
    let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    if let Mix::Suspended = mix {
        for key in &keys {
            for n in 0..2 {
                let call = Call {
                    key: key.clone(),
                    cmd: Cmd::Put(format!("enabled.{key}.{n}")),
                };
                let output = recorder.record(0, call.clone(), send(client, bucket, &call)).await;
                assert!(output.is_some(), "{call:?} answered");
                learn(&known, &call, output);
            }
        }
        let suspend = on_every_key(&keys, &Cmd::Versioning(true));
        let suspended = recorder
            .record_all(0, suspend, set_versioning(client, bucket, true))
            .await;
        assert!(suspended.is_some(), "the bucket is Suspended");
    }
    let schedule = Schedule::new(clients, bounds, Duration::from_millis(5));
    let mut tasks = tokio::task::JoinSet::new();
    for id in 0..clients {
        let (recorder, schedule, known, mix) = (recorder.clone(), schedule.clone(), known.clone(), mix.clone());
        let (s3, bucket, keys) = (client.clone(), bucket.to_owned(), keys.clone());
        let mut rng = bounds.rng("s3-versions", id);
        tasks.spawn(async move {
            let mut n = 0;
            while let Some(ops) = schedule.round(&mut rng).await {
                for _ in 0..ops {
                    n += 1;
                    let key = keys[rng.random_range(0..keys.len())].clone();
                    let cmd = random_cmd(&mut rng, &known, &key, format!("c{id}.{n}"), &mix);
                    let call = Call { key, cmd };
                    let output = match (&call.cmd, &mix) {
                        (Cmd::Age, Mix::Lifecycle(lifecycle)) => {
                            let calls = on_every_key(&keys, &call.cmd);
                            recorder.record_all(id, calls, lifecycle.age()).await
                        }
                        (Cmd::Expire, Mix::Lifecycle(lifecycle)) => {
                            let calls = on_every_key(&keys, &call.cmd);
                            recorder.record_all(id, calls, lifecycle.pass()).await
                        }
                        (Cmd::Versioning(suspended), _) => {
                            let calls = on_every_key(&keys, &call.cmd);
                            recorder
                                .record_all(id, calls, set_versioning(&s3, &bucket, *suspended))
                                .await
                        }
                        (Cmd::DeleteVersionBypass(_, false), Mix::Locked { denied }) => {
                            recorder.record(id, call.clone(), send(denied, &bucket, &call)).await
                        }
                        _ => recorder.record(id, call.clone(), send(&s3, &bucket, &call)).await,
                    };
                    learn(&known, &call, output);
                }
            }
        });
    }
    join(tasks).await;
    recorder.history()
}

/// A bucket-wide operation as one on each key.
fn on_every_key(keys: &[String], cmd: &Cmd) -> Vec<Call> {
    keys.iter()
        .map(|key| Call {
            key: key.clone(),
            cmd: cmd.clone(),
        })
        .collect()
}

async fn set_versioning(s3: &Client, bucket: &str, suspended: bool) -> Outcome<Reply> {
    let status = if suspended {
        BucketVersioningStatus::Suspended
    } else {
        BucketVersioningStatus::Enabled
    };
    let set = s3
        .put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(VersioningConfiguration::builder().status(status).build())
        .send()
        .await;
    set.map_or_else(refusal, |_| Outcome::Answered(Reply::Done))
}

fn random_cmd(rng: &mut StdRng, known: &Known, key: &str, body: String, mix: &Mix) -> Cmd {
    let versions = known.lock().unwrap().get(key).cloned().unwrap_or_default();
    // Half the time one of the two newest: deleting the current version while others delete
    // older ones is where promotion races live.
    let pick = |rng: &mut StdRng| {
        let from = if rng.random_bool(0.5) {
            versions.len().saturating_sub(2)
        } else {
            0
        };
        versions[rng.random_range(from..versions.len())].clone()
    };
    let roll = rng.random_range(0..100);
    let etag = |rng: &mut StdRng| {
        if rng.random_bool(0.3) {
            WRONG_ETAG.to_owned()
        } else {
            pick(rng).etag
        }
    };
    let conditional = matches!(mix, Mix::Conditional);
    if versions.is_empty() && !matches!(roll, 0..40 | 46..54) {
        // Until a version of the key is known, whatever would name one writes one instead.
        return Cmd::Put(body);
    }
    match (mix, roll) {
        (Mix::Locked { .. }, 0..30) => {
            let lock = [Lock::Governance, Lock::Compliance, Lock::LegalHold][rng.random_range(0..3)];
            Cmd::PutLocked(body, lock)
        }
        (Mix::Locked { .. }, 62..68) => Cmd::ReleaseHold(pick(rng).id),
        (Mix::Locked { .. }, 80..90) => Cmd::DeleteVersionBypass(pick(rng).id, rng.random_bool(0.6)),
        // Passes in place of most deletes, and ages seldom (an age the search may place
        // between a write and a pass lets the pass expire what the write made).
        (Mix::Lifecycle(_), 32..35) => Cmd::Age,
        (Mix::Lifecycle(_), 54..62 | 68..80) => Cmd::Expire,
        (Mix::Suspended, 50..54) => Cmd::Versioning(rng.random_bool(0.5)),
        (_, 0..24) => Cmd::Put(body),
        (_, 24..32) => Cmd::Multipart(body),
        (_, 32..40) if conditional => Cmd::PutIfNoneMatch(body),
        (_, 32..40) => Cmd::Get,
        (_, 40..46) if conditional => Cmd::PutIfMatch(body, etag(rng)),
        (_, 40..54) => Cmd::Get,
        (_, 54..62) => Cmd::Delete,
        (_, 62..68) => Cmd::GetVersion(pick(rng).id),
        (_, 68..74) if conditional => Cmd::DeleteIfMatch(etag(rng)),
        (_, 68..94) => Cmd::DeleteVersion(pick(rng).id),
        _ => match pick(rng) {
            // `null` names whichever null version there is when the copy reads it, not the
            // one whose body the client knows: read it instead.
            source if source.id == "null" => Cmd::GetVersion(source.id),
            source => Cmd::CopyVersion(source.id, source.body),
        },
    }
}

fn learn(known: &Known, call: &Call, output: Option<Reply>) {
    let mut known = known.lock().unwrap();
    let versions = known.entry(call.key.clone()).or_default();
    let body = match &call.cmd {
        Cmd::Put(body)
        | Cmd::PutIfNoneMatch(body)
        | Cmd::PutIfMatch(body, _)
        | Cmd::Multipart(body)
        | Cmd::PutLocked(body, _) => Some(body.clone()),
        Cmd::CopyVersion(_, body) => body.clone(),
        _ => None,
    };
    match (&call.cmd, output) {
        (_, Some(Reply::Written { version, etag })) => versions.push(Named {
            id: version,
            etag,
            body,
        }),
        (Cmd::DeleteVersion(id) | Cmd::DeleteVersionBypass(id, _), Some(Reply::Deleted { .. })) => {
            versions.retain(|v| &v.id != id)
        }
        (Cmd::Delete | Cmd::DeleteIfMatch(_), Some(Reply::Deleted { marker: Some(id) })) => versions.push(Named {
            id,
            etag: WRONG_ETAG.into(),
            body: None,
        }),
        _ => {}
    }
}

/// What a refusal tells: a 4xx is an answer (nothing done), anything else leaves it unknown.
pub fn refusal<E: ProvideErrorMetadata + fmt::Debug>(err: SdkError<E, HttpResponse>) -> Outcome<Reply> {
    match http_status(&err) {
        404 => Outcome::Answered(Reply::NotFound),
        405 => Outcome::Answered(Reply::MethodNotAllowed),
        412 => Outcome::Answered(Reply::PreconditionFailed),
        status @ 400..=499 => Outcome::Answered(Reply::Refused(status, err.code().unwrap_or("").to_owned())),
        0 => Outcome::Unknown(format!("no answer: {err}")),
        status => Outcome::Unknown(format!("{status} {}", err.code().unwrap_or(""))),
    }
}

fn written(version: Option<&str>, etag: Option<&str>) -> Outcome<Reply> {
    Outcome::Answered(Reply::Written {
        version: version.unwrap_or("null").to_owned(),
        etag: etag.unwrap_or("").to_owned(),
    })
}

async fn send(s3: &Client, bucket: &str, call: &Call) -> Outcome<Reply> {
    let key = call.key.as_str();
    let put = |body: &str| {
        s3.put_object()
            .bucket(bucket)
            .key(key)
            .body(ByteStream::from(body.as_bytes().to_vec()))
    };
    let read = |version: Option<&str>| {
        s3.get_object()
            .bucket(bucket)
            .key(key)
            .set_version_id(version.map(str::to_owned))
    };
    let delete = |version: Option<&str>| {
        s3.delete_object()
            .bucket(bucket)
            .key(key)
            .set_version_id(version.map(str::to_owned))
    };
    let put_result = match &call.cmd {
        Cmd::Put(body) => put(body).send().await,
        Cmd::PutLocked(body, lock) => {
            let until =
                aws_sdk_s3::primitives::DateTime::from(std::time::SystemTime::now() + Duration::from_secs(86_400));
            let request = match lock {
                Lock::Governance => put(body).object_lock_mode(ObjectLockMode::Governance),
                Lock::Compliance => put(body).object_lock_mode(ObjectLockMode::Compliance),
                Lock::LegalHold => put(body).object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On),
            };
            match lock {
                Lock::LegalHold => request.send().await,
                _ => request.object_lock_retain_until_date(until).send().await,
            }
        }
        Cmd::ReleaseHold(version) => {
            let released = s3
                .put_object_legal_hold()
                .bucket(bucket)
                .key(key)
                .version_id(version)
                .legal_hold(
                    ObjectLockLegalHold::builder()
                        .status(ObjectLockLegalHoldStatus::Off)
                        .build(),
                )
                .send()
                .await;
            return released.map_or_else(refusal, |_| Outcome::Answered(Reply::Done));
        }
        Cmd::Age | Cmd::Expire | Cmd::Versioning(_) => unreachable!("run_versions runs {call:?} apart"),
        Cmd::PutIfNoneMatch(body) => put(body).if_none_match("*").send().await,
        Cmd::PutIfMatch(body, etag) => put(body).if_match(etag).send().await,
        Cmd::Get | Cmd::GetVersion(_) => {
            let version = match &call.cmd {
                Cmd::GetVersion(v) => Some(v.as_str()),
                _ => None,
            };
            return match read(version).send().await {
                Ok(out) => {
                    let version = out.version_id().unwrap_or("null").to_owned();
                    match out.body.collect().await {
                        Ok(bytes) => Outcome::Answered(Reply::Body {
                            version,
                            body: String::from_utf8_lossy(&bytes.into_bytes()).into_owned(),
                        }),
                        Err(err) => Outcome::Unknown(format!("body: {err}")),
                    }
                }
                Err(err) => refusal(err),
            };
        }
        Cmd::Delete | Cmd::DeleteVersion(_) | Cmd::DeleteIfMatch(_) | Cmd::DeleteVersionBypass(..) => {
            let request = match &call.cmd {
                Cmd::DeleteVersion(v) => delete(Some(v)),
                Cmd::DeleteVersionBypass(v, _) => delete(Some(v)).bypass_governance_retention(true),
                Cmd::DeleteIfMatch(etag) => delete(None).if_match(etag),
                _ => delete(None),
            };
            return match request.send().await {
                Ok(out) => Outcome::Answered(Reply::Deleted {
                    marker: out.version_id().map(str::to_owned),
                }),
                Err(err) => refusal(err),
            };
        }
        Cmd::CopyVersion(source, _) => {
            let result = s3
                .copy_object()
                .bucket(bucket)
                .key(key)
                .copy_source(format!("{bucket}/{key}?versionId={source}"))
                .send()
                .await;
            return match result {
                Ok(out) => written(out.version_id(), out.copy_object_result().and_then(|r| r.e_tag())),
                Err(err) => refusal(err),
            };
        }
        Cmd::Multipart(body) => return multipart(s3, bucket, key, body).await,
    };
    match put_result {
        Ok(out) => written(out.version_id(), out.e_tag()),
        Err(err) => refusal(err),
    }
}

/// A one-part multipart upload; the completion is the operation that matters (an upload that
/// fails before it wrote nothing).
async fn multipart(s3: &Client, bucket: &str, key: &str, body: &str) -> Outcome<Reply> {
    let upload = match s3.create_multipart_upload().bucket(bucket).key(key).send().await {
        Ok(out) => out.upload_id.unwrap_or_default(),
        Err(err) => return refusal(err),
    };
    let part = s3
        .upload_part()
        .bucket(bucket)
        .key(key)
        .upload_id(&upload)
        .part_number(1)
        .body(ByteStream::from(body.as_bytes().to_vec()))
        .send()
        .await;
    let etag = match part {
        Ok(out) => out.e_tag.unwrap_or_default(),
        Err(err) => return refusal(err),
    };
    let completed = s3
        .complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(&upload)
        .multipart_upload(completion(&[(1, &etag)]))
        .send()
        .await;
    match completed {
        Ok(out) => written(out.version_id(), out.e_tag()),
        Err(err) => refusal(err),
    }
}

// --- listings ---

/// How a lister sends start-after on the pages after the first (S3 applies it to the first
/// page only: the continuation token alone says where a page resumes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resend {
    /// Not at all (aws-sdk, boto3).
    Never,
    /// The first page's start-after again.
    Original,
    /// The continuation token, as minio-py sends it.
    Token,
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub enum ListCmd {
    Put,
    Delete,
    List {
        start_after: Option<String>,
        max_keys: i32,
        resend: Resend,
    },
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ListCall {
    /// Empty for a listing.
    pub key: String,
    pub cmd: ListCmd,
}

impl fmt::Debug for ListCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cmd {
            ListCmd::Put => write!(f, "PUT {}", self.key),
            ListCmd::Delete => write!(f, "DELETE {}", self.key),
            ListCmd::List {
                start_after,
                max_keys,
                resend,
            } => write!(
                f,
                "LIST max-keys={max_keys} start-after={start_after:?} (later pages: start-after {resend:?})"
            ),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ListReply {
    Done,
    Pages(Vec<Vec<String>>),
}

/// Writers put and delete keys `keys` of (unversioned) `bucket` while listers list it.
pub async fn run_listings(
    client: &Client,
    bucket: &str,
    keys: &[String],
    clients: usize,
    bounds: &Bounds,
) -> Vec<Op<ListCall, ListReply>> {
    let recorder = Arc::new(Recorder::new(std::time::Instant::now()));
    let schedule = Schedule::new(clients, bounds, Duration::from_millis(5));
    let mut tasks = tokio::task::JoinSet::new();
    for id in 0..clients {
        let (recorder, schedule) = (recorder.clone(), schedule.clone());
        let (s3, bucket, keys) = (client.clone(), bucket.to_owned(), keys.to_vec());
        let mut rng = bounds.rng("s3-listings", id);
        tasks.spawn(async move {
            while let Some(ops) = schedule.round(&mut rng).await {
                for _ in 0..ops {
                    let key = keys[rng.random_range(0..keys.len())].clone();
                    let call = match rng.random_range(0..10) {
                        0..5 => ListCall { key, cmd: ListCmd::Put },
                        5..7 => ListCall {
                            key,
                            cmd: ListCmd::Delete,
                        },
                        _ => ListCall {
                            key: String::new(),
                            cmd: ListCmd::List {
                                start_after: rng.random_bool(0.3).then_some(key),
                                max_keys: rng.random_range(1..=4),
                                resend: [Resend::Never, Resend::Original, Resend::Token][rng.random_range(0..3)],
                            },
                        },
                    };
                    recorder
                        .record(id, call.clone(), send_listing(&s3, &bucket, &call))
                        .await;
                }
            }
        });
    }
    join(tasks).await;
    recorder.history()
}

async fn send_listing(s3: &Client, bucket: &str, call: &ListCall) -> Outcome<ListReply> {
    let (start_after, max_keys, resend) = match &call.cmd {
        ListCmd::Put => {
            let put = s3
                .put_object()
                .bucket(bucket)
                .key(&call.key)
                .body(ByteStream::from_static(b"x"))
                .send()
                .await;
            return put.map_or_else(refusal_of_listing, |_| Outcome::Answered(ListReply::Done));
        }
        ListCmd::Delete => {
            let delete = s3.delete_object().bucket(bucket).key(&call.key).send().await;
            return delete.map_or_else(refusal_of_listing, |_| Outcome::Answered(ListReply::Done));
        }
        ListCmd::List {
            start_after,
            max_keys,
            resend,
        } => (start_after, *max_keys, *resend),
    };
    let mut pages = Vec::new();
    let mut token: Option<String> = None;
    // Bounded: a listing of the few keys there are needs far fewer pages.
    for _ in 0..1000 {
        let after = match (&token, resend) {
            (None, _) | (Some(_), Resend::Original) => start_after.clone(),
            (Some(_), Resend::Never) => None,
            (Some(token), Resend::Token) => Some(token.clone()),
        };
        let page = s3
            .list_objects_v2()
            .bucket(bucket)
            .max_keys(max_keys)
            .set_start_after(after)
            .set_continuation_token(token.clone())
            .send()
            .await;
        let page = match page {
            Ok(page) => page,
            Err(err) => return refusal_of_listing(err),
        };
        pages.push(
            page.contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_owned))
                .collect(),
        );
        match page.next_continuation_token() {
            Some(next) if page.is_truncated() == Some(true) => token = Some(next.to_owned()),
            _ => return Outcome::Answered(ListReply::Pages(pages)),
        }
    }
    Outcome::Unknown("a listing that never ended".into())
}

fn refusal_of_listing<E: ProvideErrorMetadata + fmt::Debug>(err: SdkError<E, HttpResponse>) -> Outcome<ListReply> {
    match http_status(&err) {
        0 => Outcome::Unknown(format!("no answer: {err}")),
        status => Outcome::Unknown(format!("{status} {}", err.code().unwrap_or(""))),
    }
}

/// Every listing that misses a key which existed throughout it, or holds a key that did not
/// exist at any time during it, lists a key twice or out of order: a minimal history for each
/// (the listing and the writes of the key in question).
pub fn check_listings(ops: &[Op<ListCall, ListReply>]) -> Vec<Vec<Op<ListCall, ListReply>>> {
    let mut failures = Vec::new();
    for listing in ops {
        let (ListCmd::List { start_after, .. }, Some(ListReply::Pages(pages))) = (&listing.input.cmd, listing.output())
        else {
            continue;
        };
        let listed: Vec<&String> = pages.iter().flatten().collect();
        let on = |key: &str| -> Vec<Op<ListCall, ListReply>> {
            ops.iter().filter(|op| op.input.key == key).cloned().collect()
        };
        if listed.windows(2).any(|pair| pair[0] >= pair[1]) {
            failures.push(vec![listing.clone()]);
            continue;
        }
        let mut keys: Vec<&String> = ops
            .iter()
            .map(|op| &op.input.key)
            .filter(|k| !k.is_empty())
            .chain(listed.iter().copied())
            .collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let writes = on(key);
            let after = start_after.as_ref().is_none_or(|after| key > after);
            let present = listed.contains(&key);
            // Put (acknowledged) before the listing began, and no delete that may have taken
            // effect between that put and the listing's end.
            let stable = writes.iter().any(|put| {
                put.input.cmd == ListCmd::Put
                    && put.output().is_some()
                    && put.end() < listing.call
                    && !writes.iter().any(|delete| {
                        delete.input.cmd == ListCmd::Delete && delete.call < listing.end() && delete.end() > put.call
                    })
            });
            let ever = writes
                .iter()
                .any(|put| put.input.cmd == ListCmd::Put && put.call < listing.end());
            if (after && stable && !present) || (present && (!after || !ever)) {
                let mut history: Vec<_> = writes.into_iter().filter(|op| op.call < listing.end()).collect();
                // The last acknowledged put before the listing and what came after it.
                if let Some(last) = history
                    .iter()
                    .rposition(|op| op.input.cmd == ListCmd::Put && op.end() < listing.call)
                {
                    history.drain(..last);
                }
                history.push(listing.clone());
                history.sort_by_key(|op| op.call);
                failures.push(history);
            }
        }
    }
    failures
}
