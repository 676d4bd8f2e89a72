//! RESP: clients issue random commands over a few keys through redis-rs — strings with and
//! without a TTL, expiry changes, lists, sets, hashes, TYPE, EXISTS, TTL, WATCH/MULTI/EXEC and
//! BLPOP — and
//! each key's history is checked against Redis's semantics for one key: its value, its type and
//! its expiry deadline. A deadline is known only to within the interval of the command that set
//! it, widened by [`TOLERANCE`]: a command in that window may see the key or not, one clearly
//! after it must find the key gone, whatever type the key has and whatever table holds it.
//!
//! [`run_hot`] is the hot-key workload (issue 39): many clients sharing a few connections, so
//! that their commands arrive pipelined and share commits and coalesced calls, push, pop and
//! read two keys, mostly lists.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use redis::aio::MultiplexedConnection;

use super::checker::Model;
use super::recorder::{Op, Outcome, Recorder};
use super::schedule::{Bounds, Schedule, join};

/// How far the server's clock and request timing may put an expiry from where the client's
/// interval says it is (microseconds).
pub const TOLERANCE: u64 = 100_000;

const KEYS: [&str; 3] = ["h0", "h1", "h2"];

#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Cmd {
    /// SET, with PX milliseconds.
    Set(String, Option<u64>),
    Get,
    Del,
    Type,
    Exists,
    /// PEXPIRE milliseconds (sent as EXPIRE seconds when whole).
    Expire(u64),
    Persist,
    /// PTTL, or TTL (in seconds) when false.
    Ttl {
        millis: bool,
    },
    LPush(String),
    LPop,
    RPop,
    LRange,
    LLen,
    SAdd(String),
    SMembers,
    HSet(String, String),
    HGet(String),
    HDel(String),
    HGetAll,
    /// WATCH k; GET k; MULTI; SET k value; EXEC.
    Txn(String),
    /// BLPOP with this timeout in milliseconds.
    BLPop(u64),
    /// A script ([`ROTATE`]): LPOP the list's head, RPUSH this value, answer the head.
    Rotate(String),
    /// The same script with its key not declared ([`ROTATE_ON_THE_WAY`]): a run first uses it
    /// on the way, and borrows it from the working set when it can (resp/working_set/run.rs),
    /// to be checked at the run's next round trip.
    RotateOnTheWay(String),
}

/// [`Cmd::Rotate`]'s script. Pipelined by the clients sharing a connection, runs of it share a
/// batch and a commit (`Scripts::run_pipeline`), each answered as if it ran alone.
const ROTATE: &str = "local head = redis.call('LPOP', KEYS[1]) redis.call('RPUSH', KEYS[1], ARGV[1]) return head";

/// [`Cmd::RotateOnTheWay`]'s script: the key is ARGV[2].
const ROTATE_ON_THE_WAY: &str =
    "local head = redis.call('LPOP', ARGV[2]) redis.call('RPUSH', ARGV[2], ARGV[1]) return head";

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Call {
    pub key: String,
    pub cmd: Cmd,
}

impl fmt::Debug for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = &self.key;
        match &self.cmd {
            Cmd::Set(v, None) => write!(f, "SET {k} {v}"),
            Cmd::Set(v, Some(px)) => write!(f, "SET {k} {v} PX {px}"),
            Cmd::Get => write!(f, "GET {k}"),
            Cmd::Del => write!(f, "DEL {k}"),
            Cmd::Type => write!(f, "TYPE {k}"),
            Cmd::Exists => write!(f, "EXISTS {k}"),
            Cmd::Expire(ms) if ms % 1000 == 0 => write!(f, "EXPIRE {k} {}", ms / 1000),
            Cmd::Expire(ms) => write!(f, "PEXPIRE {k} {ms}"),
            Cmd::Persist => write!(f, "PERSIST {k}"),
            Cmd::Ttl { millis: true } => write!(f, "PTTL {k}"),
            Cmd::Ttl { millis: false } => write!(f, "TTL {k}"),
            Cmd::LPush(e) => write!(f, "LPUSH {k} {e}"),
            Cmd::LPop => write!(f, "LPOP {k}"),
            Cmd::RPop => write!(f, "RPOP {k}"),
            Cmd::LRange => write!(f, "LRANGE {k} 0 -1"),
            Cmd::LLen => write!(f, "LLEN {k}"),
            Cmd::SAdd(m) => write!(f, "SADD {k} {m}"),
            Cmd::SMembers => write!(f, "SMEMBERS {k}"),
            Cmd::HSet(field, v) => write!(f, "HSET {k} {field} {v}"),
            Cmd::HGet(field) => write!(f, "HGET {k} {field}"),
            Cmd::HDel(field) => write!(f, "HDEL {k} {field}"),
            Cmd::HGetAll => write!(f, "HGETALL {k}"),
            Cmd::Txn(v) => write!(f, "WATCH {k}; GET {k}; MULTI; SET {k} {v}; EXEC"),
            Cmd::BLPop(ms) => write!(f, "BLPOP {k} {}", *ms as f64 / 1000.0),
            Cmd::Rotate(v) => write!(f, "EVAL rotate 1 {k} {v}"),
            Cmd::RotateOnTheWay(v) => write!(f, "EVAL rotate-on-the-way 0 {v} {k}"),
        }
    }
}

/// A reply, normalised (set members and hash fields sorted).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    Ok,
    Nil,
    Int(i64),
    Bulk(String),
    Status(String),
    Array(Vec<String>),
    WrongType,
    /// EXEC ran; the GET inside the WATCH saw this.
    Committed(Option<String>),
    /// EXEC answered nil.
    Aborted,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    Str(String),
    List(VecDeque<String>),
    Set(BTreeSet<String>),
    Hash(BTreeMap<String, String>),
}

/// One key: its value (none: absent) and the window its expiry deadline lies in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Key {
    pub value: Option<Value>,
    pub expiry: Option<(u64, u64)>,
}

impl Key {
    /// The states the key may be in when `op` takes effect: alive if that can be before the
    /// deadline, gone if it can be after it.
    fn at(&self, op: &Op<Call, Reply>) -> Vec<Key> {
        let Some((earliest, latest)) = self.expiry else {
            return vec![self.clone()];
        };
        let mut states = Vec::new();
        if op.call < latest {
            states.push(self.clone());
        }
        if op.end() > earliest {
            states.push(Key::default());
        }
        states
    }

    /// The deadline `ms` after `op` took effect, as a window.
    fn deadline(op: &Op<Call, Reply>, ms: u64) -> (u64, u64) {
        let after = ms * 1000;
        (
            (op.call + after).saturating_sub(TOLERANCE),
            op.end().saturating_add(after + TOLERANCE),
        )
    }

    /// What a TTL (PTTL: `millis`) of a live key whose deadline lies in `window` answers: the
    /// recorded answer when it is the time from some instant of `op` to some instant of the
    /// window, give or take one unit of the reply (TTL rounds to the second); else a reply no
    /// server gives, which fails the step.
    fn ttl(op: &Op<Call, Reply>, (earliest, latest): (u64, u64), millis: bool) -> Reply {
        let unit: i64 = if millis { 1_000 } else { 1_000_000 };
        match op.output() {
            Some(&Reply::Int(left)) if left >= 0 => {
                let (least, most) = (earliest as i64 - op.end() as i64, latest as i64 - op.call as i64);
                if left * unit + unit >= least && left * unit - unit <= most {
                    Reply::Int(left)
                } else {
                    Reply::Status(format!("a TTL within {least}..{most} us"))
                }
            }
            _ => Reply::Status("a TTL of zero or more".into()),
        }
    }

    fn kind(&self) -> &'static str {
        match self.value {
            None => "none",
            Some(Value::Str(_)) => "string",
            Some(Value::List(_)) => "list",
            Some(Value::Set(_)) => "set",
            Some(Value::Hash(_)) => "hash",
        }
    }

    /// Redis's reply to `op` in this state and the state after it.
    fn apply(mut self, op: &Op<Call, Reply>) -> (Reply, Key) {
        let wrong = |key: Key| (Reply::WrongType, key);
        match &op.input.cmd {
            Cmd::Set(v, px) => {
                let expiry = px.map(|ms| Key::deadline(op, ms));
                (
                    Reply::Ok,
                    Key {
                        value: Some(Value::Str(v.clone())),
                        expiry,
                    },
                )
            }
            Cmd::Get => match &self.value {
                None => (Reply::Nil, self),
                Some(Value::Str(v)) => (Reply::Bulk(v.clone()), self),
                Some(_) => wrong(self),
            },
            Cmd::Del => match self.value {
                None => (Reply::Int(0), self),
                Some(_) => (Reply::Int(1), Key::default()),
            },
            Cmd::Type => (Reply::Status(self.kind().into()), self),
            Cmd::Exists => (Reply::Int(self.value.is_some() as i64), self),
            Cmd::Ttl { millis } => {
                let reply = match (&self.value, self.expiry) {
                    (None, _) => Reply::Int(-2),
                    (Some(_), None) => Reply::Int(-1),
                    (Some(_), Some(window)) => Key::ttl(op, window, *millis),
                };
                (reply, self)
            }
            Cmd::Expire(ms) => match self.value {
                None => (Reply::Int(0), self),
                Some(_) => {
                    self.expiry = Some(Key::deadline(op, *ms));
                    (Reply::Int(1), self)
                }
            },
            Cmd::Persist => match (&self.value, self.expiry) {
                (Some(_), Some(_)) => {
                    self.expiry = None;
                    (Reply::Int(1), self)
                }
                _ => (Reply::Int(0), self),
            },
            Cmd::LPush(e) => match &mut self.value {
                None => (
                    Reply::Int(1),
                    Key {
                        value: Some(Value::List(VecDeque::from([e.clone()]))),
                        expiry: None,
                    },
                ),
                Some(Value::List(list)) => {
                    list.push_front(e.clone());
                    (Reply::Int(list.len() as i64), self)
                }
                Some(_) => wrong(self),
            },
            Cmd::LRange => match &self.value {
                None => (Reply::Array(Vec::new()), self),
                Some(Value::List(list)) => (Reply::Array(list.iter().cloned().collect()), self),
                Some(_) => wrong(self),
            },
            Cmd::LLen => match &self.value {
                None => (Reply::Int(0), self),
                Some(Value::List(list)) => (Reply::Int(list.len() as i64), self),
                Some(_) => wrong(self),
            },
            Cmd::SAdd(m) => match &mut self.value {
                None => (
                    Reply::Int(1),
                    Key {
                        value: Some(Value::Set(BTreeSet::from([m.clone()]))),
                        expiry: None,
                    },
                ),
                Some(Value::Set(set)) => (Reply::Int(set.insert(m.clone()) as i64), self),
                Some(_) => wrong(self),
            },
            Cmd::SMembers => match &self.value {
                None => (Reply::Array(Vec::new()), self),
                Some(Value::Set(set)) => (Reply::Array(set.iter().cloned().collect()), self),
                Some(_) => wrong(self),
            },
            Cmd::HSet(field, v) => match &mut self.value {
                None => (
                    Reply::Int(1),
                    Key {
                        value: Some(Value::Hash(BTreeMap::from([(field.clone(), v.clone())]))),
                        expiry: None,
                    },
                ),
                Some(Value::Hash(hash)) => (Reply::Int(hash.insert(field.clone(), v.clone()).is_none() as i64), self),
                Some(_) => wrong(self),
            },
            Cmd::HGet(field) => match &self.value {
                None => (Reply::Nil, self),
                Some(Value::Hash(hash)) => (hash.get(field).map_or(Reply::Nil, |v| Reply::Bulk(v.clone())), self),
                Some(_) => wrong(self),
            },
            Cmd::HDel(field) => match &mut self.value {
                None => (Reply::Int(0), self),
                Some(Value::Hash(hash)) => {
                    let removed = hash.remove(field).is_some();
                    // Redis has no empty hashes: the last field's HDEL deletes the key.
                    if hash.is_empty() {
                        self = Key::default();
                    }
                    (Reply::Int(removed as i64), self)
                }
                Some(_) => wrong(self),
            },
            Cmd::HGetAll => match &self.value {
                None => (Reply::Array(Vec::new()), self),
                Some(Value::Hash(hash)) => (
                    Reply::Array(hash.iter().map(|(f, v)| format!("{f}={v}")).collect()),
                    self,
                ),
                Some(_) => wrong(self),
            },
            Cmd::BLPop(_) | Cmd::LPop | Cmd::RPop => match &mut self.value {
                None => (Reply::Nil, self),
                Some(Value::List(list)) => {
                    let head = match op.input.cmd {
                        Cmd::RPop => list.pop_back(),
                        _ => list.pop_front(),
                    }
                    .expect("lists are never empty");
                    if list.is_empty() {
                        self = Key::default();
                    }
                    (Reply::Bulk(head), self)
                }
                Some(_) => wrong(self),
            },
            Cmd::Rotate(v) | Cmd::RotateOnTheWay(v) => match &mut self.value {
                None => (
                    Reply::Nil,
                    Key {
                        value: Some(Value::List(VecDeque::from([v.clone()]))),
                        expiry: None,
                    },
                ),
                Some(Value::List(list)) => {
                    let head = list.pop_front().expect("lists are never empty");
                    if list.is_empty() {
                        // The pop emptied the list, which deleted the key (and its TTL): the
                        // push makes a new one.
                        self = Key {
                            value: Some(Value::List(VecDeque::from([v.clone()]))),
                            expiry: None,
                        };
                    } else {
                        list.push_back(v.clone());
                    }
                    (Reply::Bulk(head), self)
                }
                Some(_) => wrong(self),
            },
            Cmd::Txn(v) => {
                let seen = match &self.value {
                    None => None,
                    Some(Value::Str(s)) => Some(s.clone()),
                    Some(_) => return wrong(self),
                };
                let after = Key {
                    value: Some(Value::Str(v.clone())),
                    expiry: None,
                };
                (Reply::Committed(seen), after)
            }
        }
    }
}

impl Model for Key {
    type Input = Call;
    type Output = Reply;

    fn step(&self, op: &Op<Call, Reply>) -> Vec<Key> {
        let mut next = Vec::new();
        for before in self.at(op) {
            // An aborted transaction changed nothing, whatever the key held.
            if matches!(op.input.cmd, Cmd::Txn(_)) && op.output() == Some(&Reply::Aborted) {
                next.push(before);
                continue;
            }
            let (reply, after) = before.clone().apply(op);
            match op.output() {
                Some(output) if *output == reply => next.push(after),
                Some(_) => {}
                // Lost: it took effect (or, for a transaction, may have aborted).
                None => {
                    if matches!(op.input.cmd, Cmd::Txn(_)) {
                        next.push(before);
                    }
                    next.push(after);
                }
            }
        }
        next.dedup();
        next
    }

    fn changes_nothing(op: &Op<Call, Reply>) -> bool {
        matches!(
            op.input.cmd,
            Cmd::Get
                | Cmd::Type
                | Cmd::Exists
                | Cmd::Ttl { .. }
                | Cmd::LRange
                | Cmd::LLen
                | Cmd::SMembers
                | Cmd::HGet(_)
                | Cmd::HGetAll
        ) || matches!(op.output(), Some(Reply::WrongType | Reply::Aborted))
    }
}

/// Runs `clients` clients against the RESP endpoint at `addr` within `bounds`; the history.
pub async fn run(addr: std::net::SocketAddr, clients: usize, bounds: &Bounds) -> Vec<Op<Call, Reply>> {
    run_with(addr, clients, clients, bounds, random_call).await
}

/// The hot-key workload: `clients` clients over a quarter as many connections.
pub async fn run_hot(addr: std::net::SocketAddr, clients: usize, bounds: &Bounds) -> Vec<Op<Call, Reply>> {
    run_with(addr, clients, clients.div_ceil(4), bounds, hot_call).await
}

/// `clients` clients over `connections` connections: a connection's clients' commands go out
/// pipelined (redis-rs multiplexes them).
async fn run_with(
    addr: std::net::SocketAddr,
    clients: usize,
    connections: usize,
    bounds: &Bounds,
    calls: fn(&mut StdRng, usize, usize) -> Call,
) -> Vec<Op<Call, Reply>> {
    let recorder = Arc::new(Recorder::new(std::time::Instant::now()));
    // Pauses up to 40 ms: long enough for TTLs of a few hundred milliseconds to run out between
    // one command on a key and the next.
    let schedule = Schedule::new(clients, bounds, Duration::from_millis(40));
    let mut tasks = tokio::task::JoinSet::new();
    let mut shared = Vec::new();
    for _ in 0..connections {
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
        shared.push(
            redis::Client::open(format!("redis://{addr}/"))
                .unwrap()
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .unwrap(),
        );
    }
    for client in 0..clients {
        let (recorder, schedule) = (recorder.clone(), schedule.clone());
        let mut rng = bounds.rng("resp", client);
        let mut con = shared[client % connections].clone();
        tasks.spawn(async move {
            let mut n = 0;
            while let Some(ops) = schedule.round(&mut rng).await {
                for _ in 0..ops {
                    n += 1;
                    let call = calls(&mut rng, client, n);
                    recorder.record(client, call.clone(), send(&mut con, &call)).await;
                }
            }
        });
    }
    join(tasks).await;
    recorder.history()
}

fn random_call(rng: &mut StdRng, client: usize, n: usize) -> Call {
    let key = KEYS[rng.random_range(0..KEYS.len())].to_owned();
    // Every written value is unique, so a read names the write it saw.
    let value = format!("c{client}.{n}");
    let field = format!("f{}", rng.random_range(0..2));
    // Weighted towards what meets at an expiry: short TTLs, new keys of other types made over
    // them, expiry changes, and reads of the type, the TTL and the value — of strings, and of
    // hashes and lists, whose reads run in SQL functions rather than on a loaded row.
    let cmd = match rng.random_range(0..100) {
        0..12 => Cmd::Set(value, rng.random_bool(0.7).then(|| rng.random_range(100..400))),
        12..20 => Cmd::Get,
        20..22 => Cmd::Del,
        22..28 => Cmd::Type,
        28..31 => Cmd::Exists,
        31..34 => Cmd::Ttl {
            millis: rng.random_bool(0.7),
        },
        34..46 => Cmd::Expire(if rng.random_bool(0.3) {
            100_000
        } else {
            rng.random_range(100..800)
        }),
        46..49 => Cmd::Persist,
        49..56 => Cmd::LPush(value),
        56..61 => Cmd::LRange,
        61..65 => Cmd::LLen,
        65..69 => Cmd::SAdd(value),
        69..71 => Cmd::SMembers,
        71..77 => Cmd::HSet(field, value),
        77..83 => Cmd::HGet(field),
        83..85 => Cmd::HDel(field),
        85..87 => Cmd::HGetAll,
        87 => Cmd::Rotate(value),
        88 => Cmd::RotateOnTheWay(value),
        89..95 => Cmd::Txn(value),
        _ => Cmd::BLPop(rng.random_range(1..4) * 100),
    };
    Call { key, cmd }
}

/// Two hot keys, mostly pushes and pops from both ends and scripts that pop and push; now and
/// then a hash made (or refused as WRONGTYPE) on the same key, a read of the whole list, or a
/// DEL.
fn hot_call(rng: &mut StdRng, client: usize, n: usize) -> Call {
    let key = ["q0", "q1"][rng.random_range(0..2)].to_owned();
    let value = format!("c{client}.{n}");
    let cmd = match rng.random_range(0..100) {
        0..35 => Cmd::LPush(value),
        35..55 => Cmd::RPop,
        55..63 => Cmd::LPop,
        63..69 => Cmd::Rotate(value),
        69..75 => Cmd::RotateOnTheWay(value),
        75..82 => Cmd::LRange,
        82..89 => Cmd::HSet(format!("f{}", rng.random_range(0..2)), value),
        89..93 => Cmd::HGetAll,
        93..97 => Cmd::Type,
        _ => Cmd::Del,
    };
    Call { key, cmd }
}

async fn send(con: &mut MultiplexedConnection, call: &Call) -> Outcome<Reply> {
    let k = call.key.as_str();
    let words: Vec<String> = match &call.cmd {
        Cmd::Txn(v) => return transaction(con, k, v).await,
        Cmd::Set(v, None) => vec!["SET".into(), k.into(), v.clone()],
        Cmd::Set(v, Some(px)) => vec!["SET".into(), k.into(), v.clone(), "PX".into(), px.to_string()],
        Cmd::Expire(ms) if ms % 1000 == 0 => vec!["EXPIRE".into(), k.into(), (ms / 1000).to_string()],
        Cmd::Expire(ms) => vec!["PEXPIRE".into(), k.into(), ms.to_string()],
        Cmd::LPush(e) => vec!["LPUSH".into(), k.into(), e.clone()],
        Cmd::SAdd(m) => vec!["SADD".into(), k.into(), m.clone()],
        Cmd::HSet(f, v) => vec!["HSET".into(), k.into(), f.clone(), v.clone()],
        Cmd::HGet(f) => vec!["HGET".into(), k.into(), f.clone()],
        Cmd::HDel(f) => vec!["HDEL".into(), k.into(), f.clone()],
        Cmd::LRange => vec!["LRANGE".into(), k.into(), "0".into(), "-1".into()],
        Cmd::BLPop(ms) => vec!["BLPOP".into(), k.into(), (*ms as f64 / 1000.0).to_string()],
        Cmd::Rotate(v) => vec!["EVAL".into(), ROTATE.into(), "1".into(), k.into(), v.clone()],
        Cmd::RotateOnTheWay(v) => vec!["EVAL".into(), ROTATE_ON_THE_WAY.into(), "0".into(), v.clone(), k.into()],
        other => {
            let name = match other {
                Cmd::Get => "GET",
                Cmd::Del => "DEL",
                Cmd::Type => "TYPE",
                Cmd::Exists => "EXISTS",
                Cmd::Persist => "PERSIST",
                Cmd::Ttl { millis: true } => "PTTL",
                Cmd::Ttl { millis: false } => "TTL",
                Cmd::LLen => "LLEN",
                Cmd::LPop => "LPOP",
                Cmd::RPop => "RPOP",
                Cmd::SMembers => "SMEMBERS",
                _ => "HGETALL",
            };
            vec![name.into(), k.into()]
        }
    };
    let mut cmd = redis::cmd(&words[0]);
    for word in &words[1..] {
        cmd.arg(word);
    }
    match cmd.query_async::<redis::Value>(con).await {
        Ok(value) => Outcome::Answered(normalise(&call.cmd, value)),
        Err(err) => refusal(err),
    }
}

/// WRONGTYPE is an answer; any other error leaves the command's effect unknown.
fn refusal(err: redis::RedisError) -> Outcome<Reply> {
    if err.code() == Some("WRONGTYPE") {
        Outcome::Answered(Reply::WrongType)
    } else {
        Outcome::Unknown(err.to_string())
    }
}

fn text(value: &redis::Value) -> String {
    match value {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

fn normalise(cmd: &Cmd, value: redis::Value) -> Reply {
    match (cmd, value) {
        (_, redis::Value::Okay) => Reply::Ok,
        (_, redis::Value::Nil) => Reply::Nil,
        (_, redis::Value::Int(n)) => Reply::Int(n),
        (_, redis::Value::SimpleString(s)) => Reply::Status(s),
        (Cmd::BLPop(_), redis::Value::Array(pair)) if pair.len() == 2 => Reply::Bulk(text(&pair[1])),
        (Cmd::HGetAll, redis::Value::Array(items)) => {
            let mut pairs: Vec<String> = items
                .chunks(2)
                .map(|pair| format!("{}={}", text(&pair[0]), pair.get(1).map(text).unwrap_or_default()))
                .collect();
            pairs.sort();
            Reply::Array(pairs)
        }
        (cmd, redis::Value::Array(items)) => {
            let mut items: Vec<String> = items.iter().map(text).collect();
            if *cmd == Cmd::SMembers {
                items.sort();
            }
            Reply::Array(items)
        }
        (_, other) => Reply::Bulk(text(&other)),
    }
}

async fn transaction(con: &mut MultiplexedConnection, k: &str, v: &str) -> Outcome<Reply> {
    if let Err(err) = redis::cmd("WATCH").arg(k).query_async::<()>(con).await {
        return Outcome::Unknown(err.to_string());
    }
    let seen = match redis::cmd("GET").arg(k).query_async::<Option<String>>(con).await {
        Ok(seen) => seen,
        Err(err) => {
            let _ = redis::cmd("UNWATCH").query_async::<()>(con).await;
            return refusal(err);
        }
    };
    match redis::pipe()
        .atomic()
        .cmd("SET")
        .arg(k)
        .arg(v)
        .query_async::<redis::Value>(con)
        .await
    {
        Ok(redis::Value::Nil) => Outcome::Answered(Reply::Aborted),
        Ok(_) => Outcome::Answered(Reply::Committed(seen)),
        Err(err) => Outcome::Unknown(err.to_string()),
    }
}
