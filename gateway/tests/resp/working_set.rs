//! Speculated script calls (resp/working_set, issue 39): a script's typed calls answered from
//! the gateway's working set give the replies, and leave the keys, that the same calls run in
//! the database one by one give; a value the database no longer holds is caught by the check
//! at commit, and the script runs again.

use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::{RawResp, Value};

/// A small deterministic generator (xorshift64*), so that a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

const FIELDS: &[&str] = &["f1", "f2", "f3", "f4"];
const MEMBERS: &[&str] = &["m1", "m2", "m3", "m4", "m5"];
const VALUES: &[&str] = &["a", "b", "7", "-3", "10"];

/// One call of a random script: its Lua text, on KEYS[1] (a hash), KEYS[2] (a list), KEYS[3] (a
/// set), KEYS[4] (a sorted set) or KEYS[5] (a stream), with arguments from small pools so that
/// calls meet each other's elements. Only deterministic commands (no SPOP, no random reads).
fn random_call(rng: &mut Rng) -> String {
    let f = |rng: &mut Rng| rng.pick(FIELDS).to_owned();
    let m = |rng: &mut Rng| rng.pick(MEMBERS).to_owned();
    let v = |rng: &mut Rng| rng.pick(VALUES).to_owned();
    let args: Vec<String> = match rng.below(30) {
        0 => vec!["HSET".into(), "1".into(), f(rng), v(rng), f(rng), v(rng)],
        1 => vec!["HMSET".into(), "1".into(), f(rng), v(rng)],
        2 => vec!["HGET".into(), "1".into(), f(rng)],
        3 => vec!["HMGET".into(), "1".into(), f(rng), f(rng), f(rng)],
        4 => vec![
            "HINCRBY".into(),
            "1".into(),
            f(rng),
            (rng.below(7) as i64 - 3).to_string(),
        ],
        5 => vec!["HDEL".into(), "1".into(), f(rng), f(rng)],
        6 => vec!["HGETALL".into(), "1".into()],
        7 => vec!["HEXISTS".into(), "1".into(), f(rng)],
        8 => vec!["HLEN".into(), "1".into()],
        9 => vec!["HSETNX".into(), "1".into(), f(rng), v(rng)],
        10 => vec!["LPUSH".into(), "2".into(), m(rng), m(rng)],
        11 => vec!["RPUSH".into(), "2".into(), m(rng)],
        12 => vec!["RPOPLPUSH".into(), "2".into(), "KEYS[2]".into()],
        13 => vec!["LREM".into(), "2".into(), (rng.below(5) as i64 - 2).to_string(), m(rng)],
        14 => vec!["LLEN".into(), "2".into()],
        15 => vec!["LRANGE".into(), "2".into(), "0".into(), "-1".into()],
        16 => vec!["LPOP".into(), "2".into()],
        17 => vec!["SADD".into(), "3".into(), m(rng), m(rng)],
        18 => vec!["SREM".into(), "3".into(), m(rng)],
        19 => vec!["SCARD".into(), "3".into()],
        20 => vec!["SISMEMBER".into(), "3".into(), m(rng)],
        21 => vec!["ZADD".into(), "4".into(), rng.below(5).to_string(), m(rng)],
        22 => vec!["ZREM".into(), "4".into(), m(rng)],
        23 => vec!["ZCARD".into(), "4".into()],
        24 => vec![
            "ZRANGEBYSCORE".into(),
            "4".into(),
            "1".into(),
            "+inf".into(),
            "LIMIT".into(),
            "0".into(),
            "2".into(),
        ],
        25 => vec!["ZSCORE".into(), "4".into(), m(rng)],
        26 => vec![
            "ZRANGE".into(),
            "4".into(),
            "0".into(),
            "-1".into(),
            "WITHSCORES".into(),
        ],
        27 => vec![
            "XADD".into(),
            "5".into(),
            "MAXLEN".into(),
            "~".into(),
            "100".into(),
            "*".into(),
            "f".into(),
            v(rng),
        ],
        28 => vec!["XLEN".into(), "5".into()],
        _ => vec!["XTRIM".into(), "5".into(), "MAXLEN".into(), "~".into(), "100".into()],
    };
    // The second word is the key's place in KEYS; the rest are literal arguments.
    let mut words = vec![args[0].clone(), format!("KEYS[{}]", args[1])];
    words.extend(args[2..].iter().cloned());
    lua_call(&words)
}

/// A `redis.pcall` of `words`, a command and its arguments: `KEYS[n]` as such, the others
/// literal strings.
fn lua_call(words: &[String]) -> String {
    let mut lua = format!("redis.pcall('{}'", words[0]);
    for word in &words[1..] {
        match word.starts_with("KEYS[") {
            true => lua.push_str(&format!(", {word}")),
            false => lua.push_str(&format!(", '{word}'")),
        }
    }
    lua.push(')');
    lua
}

/// One call of a random script on KEYS[4] (a sorted set) or KEYS[5] (a stream): see
/// `zset_and_stream_calls_of_every_form_answer_as_calls_run_one_by_one`. Scores include -0,
/// the infinities and a float with no short decimal form; an ID given may be too small.
fn random_zset_or_stream_call(rng: &mut Rng) -> String {
    let words = |words: &[&str]| words.iter().map(|word| (*word).to_owned()).collect::<Vec<String>>();
    let m = |rng: &mut Rng| rng.pick(MEMBERS).to_owned();
    let score = |rng: &mut Rng| {
        rng.pick(&["0", "-0", "1", "2.5", "3", "-7", "0.1", "-inf", "+inf"])
            .to_owned()
    };
    let bound = |rng: &mut Rng| {
        rng.pick(&["-inf", "+inf", "0", "(0", "1", "(1", "2.5", "(3", "3", "-7"])
            .to_owned()
    };
    let lex = |rng: &mut Rng| rng.pick(&["-", "+", "[m1", "(m2", "[m3", "(m5", "[m"]).to_owned();
    let rank = |rng: &mut Rng| (rng.below(9) as i64 - 4).to_string();
    let args = match rng.below(35) {
        0..=2 => {
            let flags = rng.pick(&[
                "", "NX", "XX", "GT", "LT", "CH", "XX GT CH", "NX CH", "LT CH", "INCR", "XX INCR", "GT INCR",
            ]);
            let mut args = words(&["ZADD", "4"]);
            args.extend(flags.split_whitespace().map(str::to_owned));
            let pairs = if flags.contains("INCR") { 1 } else { 1 + rng.below(3) };
            for _ in 0..pairs {
                args.extend([score(rng), m(rng)]);
            }
            args
        }
        3 => vec!["ZINCRBY".into(), "4".into(), score(rng), m(rng)],
        4 => vec!["ZREM".into(), "4".into(), m(rng), m(rng)],
        5 => words(&["ZCARD", "4"]),
        6 => vec!["ZSCORE".into(), "4".into(), m(rng)],
        7 => vec!["ZMSCORE".into(), "4".into(), m(rng), m(rng)],
        8 => vec!["ZRANK".into(), "4".into(), m(rng)],
        9 => vec!["ZREVRANK".into(), "4".into(), m(rng), "WITHSCORE".into()],
        10 => vec![
            "ZRANGEBYSCORE".into(),
            "4".into(),
            bound(rng),
            bound(rng),
            "WITHSCORES".into(),
            "LIMIT".into(),
            rank(rng),
            rank(rng),
        ],
        11 => vec![
            "ZREVRANGEBYSCORE".into(),
            "4".into(),
            bound(rng),
            bound(rng),
            "WITHSCORES".into(),
        ],
        12 => vec!["ZRANGE".into(), "4".into(), rank(rng), rank(rng), "WITHSCORES".into()],
        13 => vec![
            "ZRANGE".into(),
            "4".into(),
            bound(rng),
            bound(rng),
            "BYSCORE".into(),
            "REV".into(),
            "LIMIT".into(),
            rank(rng),
            rank(rng),
        ],
        14 => vec![
            "ZREVRANGE".into(),
            "4".into(),
            rank(rng),
            rank(rng),
            "WITHSCORES".into(),
        ],
        15 => vec!["ZCOUNT".into(), "4".into(), bound(rng), bound(rng)],
        16 => vec!["ZLEXCOUNT".into(), "4".into(), lex(rng), lex(rng)],
        17 => vec!["ZRANGEBYLEX".into(), "4".into(), lex(rng), lex(rng)],
        18 => vec!["ZREMRANGEBYSCORE".into(), "4".into(), bound(rng), bound(rng)],
        19 => vec!["ZREMRANGEBYRANK".into(), "4".into(), rank(rng), rank(rng)],
        20 => vec!["ZREMRANGEBYLEX".into(), "4".into(), lex(rng), lex(rng)],
        21 => vec!["ZPOPMIN".into(), "4".into(), rng.below(3).to_string()],
        22 => words(&["ZPOPMAX", "4"]),
        23..=25 => {
            let trim = rng.pick(&[
                "",
                "MAXLEN ~ 4",
                "MAXLEN 3",
                "MAXLEN ~ 2 LIMIT 3",
                "MAXLEN ~ 1 LIMIT 0",
                "MINID ~ 0-1",
                "NOMKSTREAM",
            ]);
            let id = rng.pick(&["*", "*", "*", "1-*", "99999999999999-*"]);
            let mut args = words(&["XADD", "5"]);
            args.extend(trim.split_whitespace().map(str::to_owned));
            args.extend(words(&[id, "f", "v"]));
            args
        }
        26 => words(&["XLEN", "5"]),
        27 => vec![
            "XTRIM".into(),
            "5".into(),
            "MAXLEN".into(),
            "~".into(),
            rng.below(6).to_string(),
        ],
        28 => vec!["XTRIM".into(), "5".into(), "MAXLEN".into(), rng.below(6).to_string()],
        29 => vec![
            "XTRIM".into(),
            "5".into(),
            "MINID".into(),
            "~".into(),
            rng.pick(&["0-1", "1-5"]).into(),
        ],
        30 => vec![
            "XTRIM".into(),
            "5".into(),
            "MINID".into(),
            rng.pick(&["1-0", "1-3", "1-4"]).into(),
        ],
        31 => words(&["XDEL", "5", "1-0"]),
        // Run in the database, after the calls the run owes on the key.
        32 => words(&["EXPIRE", "4", "1000"]),
        33 => words(&["DEL", "4"]),
        // A member past `zset-max-listpack-value` (64): the large encoding.
        _ => vec![
            "ZADD".into(),
            "4".into(),
            score(rng),
            "a member longer than sixty-four bytes, which no listpack of the default limits takes".into(),
        ],
    };
    let mut words = vec![args[0].clone(), format!("KEYS[{}]", args[1])];
    words.extend(args[2..].iter().cloned());
    lua_call(&words)
}

/// A stream's IDs differ between runs (the clock): an entry ID in a reply is replaced by `ID`.
fn without_ids(value: Value) -> Value {
    match value {
        Value::Bulk(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            match text.split_once('-') {
                Some((ms, seq))
                    if ms.len() >= 13 && ms.bytes().all(|b| b.is_ascii_digit()) && seq.parse::<u64>().is_ok() =>
                {
                    Value::bulk("ID")
                }
                _ => Value::Bulk(bytes),
            }
        }
        Value::Array(items) => Value::Array(items.into_iter().map(without_ids).collect()),
        other => other,
    }
}

async fn eval(con: &mut RawResp, script: &str, keys: &[String]) -> Value {
    let count = keys.len().to_string();
    let mut args = vec!["EVAL", script, &count];
    args.extend(keys.iter().map(String::as_str));
    con.command(&args).await
}

pub(crate) async fn metric(gateway: &TestGateway, name: &str) -> f64 {
    gateway
        .metric(name)
        .await
        .unwrap_or_else(|| panic!("{name} is exported"))
}

#[tokio::test]
async fn speculated_calls_answer_as_calls_run_one_by_one() {
    runs_agree(random_call, &[], &[], 60).await;
}

/// The sorted set and stream commands in the forms their predictors tell apart (ZADD's flags
/// and INCR, ranges by rank, score and lex with exclusive and infinite bounds, REV and LIMIT,
/// XADD's and XTRIM's trims, IDs given), on stream nodes of 3 entries, so that trims meet
/// node boundaries. The keys are first made outside scripts, so that runs load them (zset.rs
/// and stream.rs LOAD): a sorted set with ties and infinities, and a stream of 7 entries in 3
/// nodes, one of them less one entry.
#[tokio::test]
async fn zset_and_stream_calls_of_every_form_answer_as_calls_run_one_by_one() {
    runs_agree(
        random_zset_or_stream_call,
        &[("stream-node-max-entries", "3"), ("zset-max-listpack-entries", "4")],
        &[
            (
                "ZADD",
                3,
                &["1", "m1", "2.5", "m2", "-0", "m3", "+inf", "m4", "0", "m5"],
            ),
            ("XADD", 4, &["1-1", "f", "v"]),
            ("XADD", 4, &["1-2", "f", "v"]),
            ("XADD", 4, &["1-3", "f", "v"]),
            ("XADD", 4, &["1-4", "f", "v"]),
            ("XADD", 4, &["1-5", "f", "v"]),
            ("XADD", 4, &["1-6", "f", "v"]),
            ("XADD", 4, &["1-7", "f", "v"]),
            ("XDEL", 4, &["1-2"]),
        ],
        150,
    )
    .await;
}

/// A gateway with the working set and one without it, on one database, and a connection to each.
async fn two_gateways() -> (TestGateway, TestGateway, RawResp, RawResp) {
    let speculating = TestGateway::with_resp(&[]).await;
    let plain = TestGateway::with_args(
        speculating.database_url.clone(),
        &["--resp-addr", "127.0.0.1:0", "--resp-working-set", "0"],
    )
    .await;
    let a = RawResp::connect(speculating.resp_addr()).await;
    let b = RawResp::connect(plain.resp_addr()).await;
    (speculating, plain, a, b)
}

/// The seed of a random run: `PGVS3_WORKING_SET_SEED`, else `default`; printed, to replay it.
fn seed(default: u64) -> u64 {
    let seed = std::env::var("PGVS3_WORKING_SET_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(default);
    eprintln!("seed {seed} (PGVS3_WORKING_SET_SEED replays it)");
    seed
}

/// A differential test's set-up: a gateway that speculates and one that does not, on one
/// database, a connection to each (`a`, `b`), the random generator, and the keys the scripts
/// run on, each of `names` under the prefix `a` (run through `a`) and `b` (through `b`).
struct Differential {
    speculating: TestGateway,
    plain: TestGateway,
    a: RawResp,
    b: RawResp,
    rng: Rng,
    keys_a: Vec<String>,
    keys_b: Vec<String>,
}

/// Sets up a differential test (see [`Differential`]), seeded by `seed(default_seed)`: the
/// encoding parameters of `config` set (small limits, so that runs pass them), and the keys
/// `made` first, on both sides, by commands outside scripts through the plain gateway (a
/// command, the key's place among `names`, its other arguments), so that runs load them.
async fn differential(
    default_seed: u64,
    names: &[&str],
    config: &[(&str, &str)],
    made: &[(&str, usize, &[&str])],
) -> Differential {
    let (speculating, plain, mut a, mut b) = two_gateways().await;
    let rng = Rng(seed(default_seed) | 1);
    for (name, value) in config {
        assert_eq!(
            a.command(&["CONFIG", "SET", name, value]).await,
            Value::Simple("OK".to_owned())
        );
    }
    let keys = |prefix: &str| -> Vec<String> { names.iter().map(|name| format!("{prefix}:{name}")).collect() };
    let (keys_a, keys_b) = (keys("a"), keys("b"));
    for keys in [&keys_a, &keys_b] {
        for (name, at, rest) in made {
            let mut command = vec![*name, keys[*at].as_str()];
            command.extend(rest.iter());
            let answer = b.command(&command).await;
            assert!(!matches!(answer, Value::Error(_)), "{command:?}: {answer:?}");
        }
    }
    Differential {
        speculating,
        plain,
        a,
        b,
        rng,
        keys_a,
        keys_b,
    }
}

impl Differential {
    /// One round: a script of the calls `first` (words, `KEYS[n]` as such) and up to ten of
    /// `random_call`'s, run on both sides, which must answer the same (but for a stream's IDs,
    /// which follow the clock), with no answer of the working set missed so far. Answers the
    /// script, for the messages of later checks.
    async fn run(&mut self, round: u64, first: &[&str], random_call: fn(&mut Rng) -> String) -> String {
        let calls: Vec<String> = first
            .iter()
            .map(|call| lua_call(&call.split(' ').map(str::to_owned).collect::<Vec<_>>()))
            .chain((0..1 + self.rng.below(10)).map(|_| random_call(&mut self.rng)))
            .collect();
        let script = format!("return {{{}}}", calls.join(", "));
        let (got, want) = (
            eval(&mut self.a, &script, &self.keys_a).await,
            eval(&mut self.b, &script, &self.keys_b).await,
        );
        assert_eq!(without_ids(got), without_ids(want), "round {round}: {script}");
        assert_eq!(
            metric(&self.speculating, "pgvs3_resp_speculation_misses_total").await,
            0.0,
            "round {round}: {script}"
        );
        script
    }

    /// After a round (`script`), each hash or set holds the same on both sides, read by `read`
    /// (see [`small_key_state`]).
    async fn small_keys_agree(&mut self, round: u64, script: &str, read: &str) {
        for (key_a, key_b) in self.keys_a.iter().zip(&self.keys_b) {
            assert_eq!(
                small_key_state(&mut self.b, read, key_a).await,
                small_key_state(&mut self.b, read, key_b).await,
                "round {round}: {key_a}; {script}"
            );
        }
    }
}

/// Runs each of `scripts` on `key` through `a` (the speculating gateway's connection) after a
/// WATCH of the key by `watcher`, and checks that its calls were answered from the working set
/// and that it moved the key's version (its row's, read by `sql`, and a MULTI of `read` on it
/// failing) as `touched` says.
async fn runs_touch(
    speculating: &TestGateway,
    a: &mut RawResp,
    watcher: &mut RawResp,
    key: &str,
    read: &str,
    scripts: &[(&str, bool)],
) {
    let sql = speculating.sql().await;
    let key = vec![key.to_owned()];
    let version = || async {
        sql.query_one("SELECT version FROM pgvs3.resp_keys WHERE key = $1", &[&key[0]])
            .await
            .unwrap()
            .get::<_, i64>("version")
    };
    for (script, touched) in scripts {
        assert_eq!(
            watcher.command(&["WATCH", &key[0]]).await,
            Value::Simple("OK".to_owned())
        );
        let speculated = metric(speculating, "pgvs3_resp_speculated_calls_total").await;
        let before = version().await;
        eval(a, script, &key).await;
        assert_eq!(version().await != before, *touched, "{script}: the version");
        assert!(metric(speculating, "pgvs3_resp_speculated_calls_total").await > speculated);
        assert_eq!(watcher.command(&["MULTI"]).await, Value::Simple("OK".to_owned()));
        assert_eq!(
            watcher.command(&[read, &key[0]]).await,
            Value::Simple("QUEUED".to_owned())
        );
        let exec = watcher.command(&["EXEC"]).await;
        assert_eq!(exec == Value::Nil, *touched, "{script}: {exec:?}");
    }
}

/// Runs `fleeting` (two calls, which make `key` and empty it) through `a`, both answered from the
/// working set, with the reply `reply`: the key is left with no row, and a WATCH of it by
/// `watcher` sees the write.
async fn made_and_emptied(
    speculating: &TestGateway,
    a: &mut RawResp,
    watcher: &mut RawResp,
    key: &str,
    fleeting: &str,
    reply: Value,
) {
    let key = vec![key.to_owned()];
    assert_eq!(
        watcher.command(&["WATCH", &key[0]]).await,
        Value::Simple("OK".to_owned())
    );
    let speculated = metric(speculating, "pgvs3_resp_speculated_calls_total").await;
    assert_eq!(eval(a, fleeting, &key).await, reply);
    assert!(metric(speculating, "pgvs3_resp_speculated_calls_total").await >= speculated + 2.0);
    assert_eq!(watcher.command(&["MULTI"]).await, Value::Simple("OK".to_owned()));
    assert_eq!(
        watcher.command(&["EXISTS", &key[0]]).await,
        Value::Simple("QUEUED".to_owned())
    );
    assert_eq!(watcher.command(&["EXEC"]).await, Value::Nil);
    assert_eq!(a.command(&["EXISTS", &key[0]]).await, Value::Int(0));
}

/// What key `key` (the `at`th of a script's five) holds, read without a working set: its
/// elements (a set's sorted, a stream's count), encoding, and whether it has a TTL.
async fn key_state(con: &mut RawResp, key: &str, at: usize) -> (Value, Value, bool) {
    let elements = match at {
        0 => con.command(&["HGETALL", key]).await,
        1 => con.command(&["LRANGE", key, "0", "-1"]).await,
        2 => match con.command(&["SMEMBERS", key]).await {
            Value::Array(mut items) => {
                items.sort_by_key(|item| format!("{item:?}"));
                Value::Array(items)
            }
            other => other,
        },
        3 => con.command(&["ZRANGE", key, "0", "-1", "WITHSCORES"]).await,
        _ => con.command(&["XLEN", key]).await,
    };
    let encoding = con.command(&["OBJECT", "ENCODING", key]).await;
    let ttl = con.command(&["TTL", key]).await;
    (elements, encoding, matches!(ttl, Value::Int(seconds) if seconds > 0))
}

/// Random scripts of `random_call`s run on a gateway that speculates and on one that does not
/// (one database, `config` set in it, and the keys `made` first by commands outside scripts:
/// a name, the key's place among `keys`, the other arguments) answer the same and leave the
/// same after every run, and no answer of the working set missed.
async fn runs_agree(
    random_call: fn(&mut Rng) -> String,
    config: &[(&str, &str)],
    made: &[(&str, usize, &[&str])],
    rounds: u64,
) {
    let mut d = differential(0x5eed_3939_u64, &["h", "l", "s", "z", "x"], config, made).await;
    for round in 0..rounds {
        let script = d.run(round, &[], random_call).await;
        // What each run left in the database, read by the gateway without a working set.
        for at in 0..d.keys_a.len() {
            assert_eq!(
                key_state(&mut d.b, &d.keys_a[at], at).await,
                key_state(&mut d.b, &d.keys_b[at], at).await,
                "round {round}: {}; {script}",
                d.keys_a[at]
            );
        }
    }
    // Calls were answered from the working set, and every answer held.
    assert!(metric(&d.speculating, "pgvs3_resp_speculated_calls_total").await > 0.0);
    assert_eq!(metric(&d.speculating, "pgvs3_resp_speculation_misses_total").await, 0.0);
    assert_eq!(metric(&d.plain, "pgvs3_resp_speculated_calls_total").await, 0.0);
}

#[tokio::test]
async fn a_value_the_database_no_longer_holds_is_caught_by_a_write_and_the_script_runs_again() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let key = vec!["job:1".to_owned()];
    let set = "redis.call('HSET', KEYS[1], 'attempts', '1') return redis.call('HGET', KEYS[1], 'attempts')";
    assert_eq!(eval(&mut con, set, &key).await, Value::bulk("1"));
    let incr = "return redis.call('HINCRBY', KEYS[1], 'attempts', 1)";
    // Now held in the working set: answered from it, and the write checked at commit.
    let speculated = metric(&gateway, "pgvs3_resp_speculated_calls_total").await;
    assert_eq!(eval(&mut con, incr, &key).await, Value::Int(2));
    assert!(metric(&gateway, "pgvs3_resp_speculated_calls_total").await > speculated);

    // Changed underneath without a new version (no writer of pgvs3 does that; a hand edit or a
    // bug would): the working set's value is wrong, the write's check catches it, and the run
    // starts over in the database. (A read is answered from the value the key's version vouches
    // for, and is not sent: working_set/mod.rs.)
    let sql = gateway.sql().await;
    sql.execute(
        "UPDATE pgvs3.resp_hash SET value = '10' WHERE key = 'job:1' AND field = 'attempts'",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(eval(&mut con, incr, &key).await, Value::Int(11));
    assert_eq!(metric(&gateway, "pgvs3_resp_speculation_misses_total").await, 1.0);

    // A client's own write gives the key a new version: the working set's value is not used.
    assert_eq!(eval(&mut con, incr, &key).await, Value::Int(12));
    assert_eq!(con.command(&["HSET", "job:1", "attempts", "20"]).await, Value::Int(0));
    let get = "return redis.call('HGET', KEYS[1], 'attempts')";
    assert_eq!(eval(&mut con, get, &key).await, Value::bulk("20"));
    assert_eq!(eval(&mut con, incr, &key).await, Value::Int(21));
    assert_eq!(metric(&gateway, "pgvs3_resp_speculation_misses_total").await, 1.0);

    // A field a run only overwrites is checked too: a script's hash writes go as one write of
    // what they changed (pgvs3.resp_hash_apply), each row only where it still holds the value
    // the run found. Replayed, this HSET would have answered 0 either way and written over the
    // edit unseen.
    sql.execute(
        "UPDATE pgvs3.resp_hash SET value = 'edited' WHERE key = 'job:1' AND field = 'attempts'",
        &[],
    )
    .await
    .unwrap();
    let overwrite = "return redis.call('HSET', KEYS[1], 'attempts', '30')";
    assert_eq!(eval(&mut con, overwrite, &key).await, Value::Int(0));
    assert_eq!(metric(&gateway, "pgvs3_resp_speculation_misses_total").await, 2.0);
    assert_eq!(con.command(&["HGET", "job:1", "attempts"]).await, Value::bulk("30"));
}

#[tokio::test]
async fn a_key_made_again_is_never_taken_for_its_former_self() {
    // A key deleted and made again, or renamed over, holds a version no state of that name
    // had before (layout v78): the working set's value of the old one is not taken for it.
    // (Before, both started at version 1: the script was answered from the old value, the
    // check caught it, and the run started over: one miss each.)
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let key = vec!["job:1".to_owned()];
    let get = "return redis.call('HGET', KEYS[1], 'state')";
    assert_eq!(con.command(&["HSET", "job:1", "state", "old"]).await, Value::Int(1));
    assert_eq!(eval(&mut con, get, &key).await, Value::bulk("old"));
    assert_eq!(eval(&mut con, get, &key).await, Value::bulk("old"));

    assert_eq!(con.command(&["DEL", "job:1"]).await, Value::Int(1));
    assert_eq!(con.command(&["HSET", "job:1", "state", "new"]).await, Value::Int(1));
    assert_eq!(eval(&mut con, get, &key).await, Value::bulk("new"));

    assert_eq!(con.command(&["HSET", "job:2", "state", "moved"]).await, Value::Int(1));
    assert_eq!(
        con.command(&["RENAME", "job:2", "job:1"]).await,
        Value::Simple("OK".into())
    );
    assert_eq!(eval(&mut con, get, &key).await, Value::bulk("moved"));
    assert_eq!(metric(&gateway, "pgvs3_resp_speculation_misses_total").await, 0.0);

    // And the versions themselves: every state of the name had its own.
    let sql = gateway.sql().await;
    let mut seen = std::collections::HashSet::new();
    assert_eq!(con.command(&["HSET", "job:3", "a", "1"]).await, Value::Int(1));
    for step in [
        "HSET job:1 a 1",
        "DEL job:1",
        "HSET job:1 a 1",
        "HSET job:1 b 2",
        "RENAME job:3 job:1",
    ] {
        let words: Vec<&str> = step.split(' ').collect();
        con.command(&words).await;
        let version: Option<i64> = sql
            .query_opt("SELECT version FROM pgvs3.resp_keys WHERE key = 'job:1'", &[])
            .await
            .unwrap()
            .map(|row| row.get("version"));
        if let Some(version) = version {
            assert!(seen.insert(version), "{step}: version {version} again");
        }
    }
    assert_eq!(seen.len(), 4, "four states of job:1 had a version");
}

const ELEMENTS: &[&str] = &["a", "b", "c", "1"];
/// Integers and not, so that sets are intsets and large ones, whose SMEMBERS orders differ.
const SET_MEMBERS: &[&str] = &["1", "2", "10", "-0", "0", "x"];

/// One call of a random script on lists (KEYS[1], KEYS[2]) and sets (KEYS[3], KEYS[4]), every
/// form the working set predicts (resp/working_set/list.rs, set.rs) and its edges: counts,
/// indexes and ranges on both sides of the lists' ends, moves within one key and between two.
fn random_list_or_set_call(rng: &mut Rng) -> String {
    let list = |rng: &mut Rng| format!("KEYS[{}]", 1 + rng.below(2));
    let set = |rng: &mut Rng| format!("KEYS[{}]", 3 + rng.below(2));
    let e = |rng: &mut Rng| rng.pick(ELEMENTS).to_owned();
    let m = |rng: &mut Rng| rng.pick(SET_MEMBERS).to_owned();
    let small = |rng: &mut Rng, below: u64| (rng.below(2 * below + 1) as i64 - below as i64).to_string();
    let side = |rng: &mut Rng| rng.pick(&["LEFT", "RIGHT"]).to_owned();
    let words: Vec<String> = match rng.below(20) {
        0 => vec!["LPUSH".into(), list(rng), e(rng), e(rng)],
        1 => vec!["RPUSH".into(), list(rng), e(rng)],
        2 => vec![rng.pick(&["LPUSHX", "RPUSHX"]).into(), list(rng), e(rng)],
        3 => vec![rng.pick(&["LPOP", "RPOP"]).into(), list(rng)],
        4 => vec![rng.pick(&["LPOP", "RPOP"]).into(), list(rng), rng.below(4).to_string()],
        5 => vec!["RPOPLPUSH".into(), list(rng), list(rng)],
        6 => vec!["LMOVE".into(), list(rng), list(rng), side(rng), side(rng)],
        7 => vec!["LREM".into(), list(rng), small(rng, 2), e(rng)],
        8 => vec!["LINDEX".into(), list(rng), small(rng, 5)],
        9 => vec!["LRANGE".into(), list(rng), small(rng, 5), small(rng, 5)],
        10 => vec!["LLEN".into(), list(rng)],
        11 | 12 => vec!["SADD".into(), set(rng), m(rng), m(rng)],
        13 => vec!["SREM".into(), set(rng), m(rng), m(rng)],
        14 => vec!["SCARD".into(), set(rng)],
        15 => vec!["SISMEMBER".into(), set(rng), m(rng)],
        16 => vec!["SMISMEMBER".into(), set(rng), m(rng), m(rng), m(rng)],
        _ => vec!["SMEMBERS".into(), set(rng)],
    };
    lua_call(&words)
}

#[tokio::test]
async fn speculated_list_and_set_calls_answer_as_calls_run_one_by_one() {
    let (speculating, _plain, mut a, mut b) = two_gateways().await;
    let seed = seed(0x5e75_3939_u64);
    let mut rng = Rng(seed | 1);
    let keys = |prefix: &str| -> Vec<String> {
        ["l1", "l2", "s1", "s2"]
            .iter()
            .map(|key| format!("{prefix}:{key}"))
            .collect()
    };
    let (keys_a, keys_b) = (keys("a"), keys("b"));
    // Keys made outside scripts, which a run loads (list.rs and set.rs LOAD) before it
    // predicts their calls: a list, an intset (SMEMBERS by number) and a large set.
    for keys in [&keys_a, &keys_b] {
        for command in [
            &["RPUSH", &keys[0], "a", "b", "c", "1", "a"][..],
            &["SADD", &keys[2], "10", "2", "1"],
            &["SADD", &keys[3], "x", "1"],
        ] {
            assert!(matches!(b.command(command).await, Value::Int(_)), "{command:?}");
        }
    }
    let mut total = 0;
    for round in 0..80 {
        // First the loads, then reads of the loaded values in their orders, whatever the seed.
        let calls: Vec<String> = match round {
            0 => vec!["LLEN KEYS[1]", "SCARD KEYS[3]", "SCARD KEYS[4]"],
            1 => vec!["LRANGE KEYS[1] 0 -1", "SMEMBERS KEYS[3]", "SMEMBERS KEYS[4]"],
            _ => vec![],
        }
        .into_iter()
        .map(|call| lua_call(&call.split(' ').map(str::to_owned).collect::<Vec<_>>()))
        .chain((0..1 + rng.below(12)).map(|_| random_list_or_set_call(&mut rng)))
        .collect();
        total += calls.len();
        let script = format!("return {{{}}}", calls.join(", "));
        let (got, want) = (
            eval(&mut a, &script, &keys_a).await,
            eval(&mut b, &script, &keys_b).await,
        );
        assert_eq!(got, want, "round {round}: {script}");
    }
    // The keys hold the same, read by the gateway without a working set, in its order.
    for at in 0..4 {
        let read = |key: &String| -> Vec<String> {
            match at {
                0 | 1 => vec!["LRANGE".into(), key.clone(), "0".into(), "-1".into()],
                _ => vec!["SMEMBERS".into(), key.clone()],
            }
        };
        let (wa, wb) = (read(&keys_a[at]), read(&keys_b[at]));
        let wa: Vec<&str> = wa.iter().map(String::as_str).collect();
        let wb: Vec<&str> = wb.iter().map(String::as_str).collect();
        assert_eq!(b.command(&wa).await, b.command(&wb).await, "{wa:?}");
    }
    // Replies are the same whether predicted or run again: what fails a wrong prediction is
    // the check, counted as a miss. Most calls were predicted (all but SMEMBERS of a set whose
    // encoding the run does not know).
    let speculated = metric(&speculating, "pgvs3_resp_speculated_calls_total").await;
    assert!(
        speculated > total as f64 / 2.0,
        "{speculated} of {total} calls predicted"
    );
    assert_eq!(metric(&speculating, "pgvs3_resp_speculation_misses_total").await, 0.0);
}

/// Values of hash fields: integers for HINCRBY, and one past `hash-max-listpack-value` (64).
const HASH_VALUES: &[&str] = &[
    "1",
    "7",
    "-3",
    "x",
    "a value longer than sixty-four bytes, which no listpack of the default limits takes",
];

/// One call of a random script on two hashes (KEYS[1] made in the script, KEYS[2] made before
/// with a TTL): every write the working set predicts, reads between them, HDELs of every field
/// (a run empties a hash and may make it again), EXPIRE and DEL (run in the database, which the
/// run's owed writes must go ahead of).
fn random_hash_call(rng: &mut Rng) -> String {
    let key = |rng: &mut Rng| format!("KEYS[{}]", 1 + rng.below(2));
    let f = |rng: &mut Rng| rng.pick(&["f1", "f2", "f3", "f4", "f5"]).to_owned();
    // The long value one time in twelve: hashes stay small long enough to show their order.
    let v = |rng: &mut Rng| match rng.below(12) {
        0 => HASH_VALUES[HASH_VALUES.len() - 1].to_owned(),
        _ => rng.pick(&HASH_VALUES[..HASH_VALUES.len() - 1]).to_owned(),
    };
    let words: Vec<String> = match rng.below(18) {
        0..=2 => vec!["HSET".into(), key(rng), f(rng), v(rng), f(rng), v(rng)],
        3 => vec!["HMSET".into(), key(rng), f(rng), v(rng)],
        4 => vec!["HSETNX".into(), key(rng), f(rng), v(rng)],
        5 | 6 => vec![
            "HINCRBY".into(),
            key(rng),
            f(rng),
            (rng.below(7) as i64 - 3).to_string(),
        ],
        7 | 8 => vec!["HDEL".into(), key(rng), f(rng), f(rng)],
        9 => vec![
            "HDEL".into(),
            key(rng),
            "f1".into(),
            "f2".into(),
            "f3".into(),
            "f4".into(),
            "f5".into(),
        ],
        10 => vec!["HGETALL".into(), key(rng)],
        11 => vec!["HMGET".into(), key(rng), f(rng), f(rng)],
        12 => vec!["HLEN".into(), key(rng)],
        13 => vec!["EXPIRE".into(), key(rng), "1000".into()],
        14 => vec!["DEL".into(), key(rng)],
        15 => vec!["HEXISTS".into(), key(rng), f(rng)],
        16 => vec!["EXISTS".into(), key(rng)],
        _ => vec!["TYPE".into(), key(rng)],
    };
    lua_call(&words)
}

/// A CONFIG SET of an encoding's limits changes how the next writes encode a key, without
/// moving its version: a value the working set kept from before is not taken for it (its
/// limits are the old ones), so the order HGETALL answers after a write that crosses the new
/// limit is the large encoding's, as Redis converts the hash at that write.
#[tokio::test]
async fn a_hash_kept_from_before_a_config_set_of_its_limits_is_not_answered_by_the_old_ones() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let key = vec!["job:3".to_owned()];
    let make = "redis.call('HSET', KEYS[1], 'z', '1', 'a', '2') return redis.call('HGETALL', KEYS[1])";
    let small = Value::Array(vec![
        Value::bulk("z"),
        Value::bulk("1"),
        Value::bulk("a"),
        Value::bulk("2"),
    ]);
    assert_eq!(eval(&mut con, make, &key).await, small);
    assert_eq!(
        eval(&mut con, make, &key).await,
        small,
        "kept, and answered in the small order"
    );
    assert_eq!(
        con.command(&["CONFIG", "SET", "hash-max-listpack-entries", "2"]).await,
        Value::Simple("OK".into())
    );
    let grow = "redis.call('HSET', KEYS[1], 'm', '3') return redis.call('HKEYS', KEYS[1])";
    let large = Value::Array(vec![Value::bulk("a"), Value::bulk("m"), Value::bulk("z")]);
    assert_eq!(eval(&mut con, grow, &key).await, large);
    assert_eq!(
        con.command(&["OBJECT", "ENCODING", "job:3"]).await,
        Value::bulk("hashtable")
    );
}

/// A hash a run made is answered from the working set by the next run, HGETALL included (its
/// order is its encoding's, which the database judged at the commit); a look at the key by a
/// generic command (EXISTS, TYPE, TTL) leaves the run's value of it.
#[tokio::test]
async fn a_hash_a_run_made_is_answered_from_the_working_set_after_a_look_at_it() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let key = vec!["job:2".to_owned()];
    let make = "redis.call('HSET', KEYS[1], 'z', '1', 'a', '2') return 1";
    assert_eq!(eval(&mut con, make, &key).await, Value::Int(1));
    let speculated = metric(&gateway, "pgvs3_resp_speculated_calls_total").await;
    let read = "redis.call('EXISTS', KEYS[1]) redis.call('TYPE', KEYS[1]) \
                local all = redis.call('HGETALL', KEYS[1]) redis.call('TTL', KEYS[1]) \
                return {all, redis.call('HMGET', KEYS[1], 'a', 'z')}";
    let expected = Value::Array(vec![
        Value::Array(vec![
            Value::bulk("z"),
            Value::bulk("1"),
            Value::bulk("a"),
            Value::bulk("2"),
        ]),
        Value::Array(vec![Value::bulk("2"), Value::bulk("1")]),
    ]);
    // A run with a write, so that it speculates.
    let read_and_write = format!("redis.call('SET', 'other', '1') {read}");
    assert_eq!(eval(&mut con, &read_and_write, &key).await, expected);
    assert!(
        metric(&gateway, "pgvs3_resp_speculated_calls_total").await >= speculated + 2.0,
        "HGETALL and HMGET answered from the working set"
    );
    assert_eq!(metric(&gateway, "pgvs3_resp_speculation_misses_total").await, 0.0);
}

/// What a hash or set holds as the gateway without a working set reads it: its elements by
/// `read` (HGETALL, SMEMBERS), in its encoding's order (a small hash's in the order its fields
/// were added, an intset's by number), the encoding, and whether it has a TTL.
async fn small_key_state(con: &mut RawResp, read: &str, key: &str) -> (Value, Value, bool) {
    let elements = con.command(&[read, key]).await;
    let encoding = con.command(&["OBJECT", "ENCODING", key]).await;
    let ttl = con.command(&["TTL", key]).await;
    (elements, encoding, matches!(ttl, Value::Int(seconds) if seconds > 0))
}

#[tokio::test]
async fn speculated_hash_writes_leave_what_the_calls_leave() {
    // A small limit: the large encoding answers in byte order.
    let mut d = differential(
        0x4a54_3939_u64,
        &["h1", "h2"],
        &[("hash-max-listpack-entries", "4")],
        &[("HSET", 1, &["f2", "1", "f1", "x"]), ("EXPIRE", 1, &["1000"])],
    )
    .await;
    for round in 0..150 {
        // First a field removed and set again in one run, which goes last in the small
        // encoding's order, whatever the seed: a write loads the key into the working set,
        // and the next run's calls are answered from it.
        let first: &[&str] = match round {
            0 => &["HSET KEYS[2] f4 w"],
            1 => &["HDEL KEYS[2] f2", "HSET KEYS[2] f2 y f3 z", "HGETALL KEYS[2]"],
            _ => &[],
        };
        let script = d.run(round, first, random_hash_call).await;
        // What each run left in the database, read without a working set.
        d.small_keys_agree(round, &script, "HGETALL").await;
    }
    let Differential {
        speculating,
        plain: _plain,
        mut a,
        mut b,
        keys_a,
        ..
    } = d;
    assert!(metric(&speculating, "pgvs3_resp_speculated_calls_total").await > 100.0);
    assert_eq!(metric(&speculating, "pgvs3_resp_speculation_misses_total").await, 0.0);

    // A run's hash write moves the key's version, as WATCH sees it, even when it writes the
    // value the field had (Redis signals the key all the same).
    let set = "return redis.call('HSET', KEYS[1], 'w', 'same')";
    eval(&mut a, set, &keys_a[..1]).await;
    let mut watcher = RawResp::connect(speculating.resp_addr()).await;
    runs_touch(&speculating, &mut a, &mut watcher, &keys_a[0], "HLEN", &[(set, true)]).await;
    assert_eq!(eval(&mut a, set, &keys_a[..1]).await, Value::Int(0));

    // A key that changes type within a run: its owed writes keep their order (a hash's are
    // not written set-based then), and the run ends with what the calls one by one leave.
    let key = vec!["a:shifting".to_owned()];
    let shifting = "return {redis.call('HSET', KEYS[1], 'f', 'v'), redis.call('HDEL', KEYS[1], 'f'), \
                    redis.call('ZADD', KEYS[1], 1, 'm'), redis.call('ZREM', KEYS[1], 'm'), \
                    redis.call('HSET', KEYS[1], 'g', 'w'), redis.call('HSET', KEYS[1], 'h', 'x')}";
    let misses = metric(&speculating, "pgvs3_resp_speculation_misses_total").await;
    assert_eq!(eval(&mut a, shifting, &key).await, Value::Array(vec![Value::Int(1); 6]));
    assert_eq!(
        metric(&speculating, "pgvs3_resp_speculation_misses_total").await,
        misses
    );
    assert_eq!(
        b.command(&["HGETALL", &key[0]]).await,
        Value::Array(vec![
            Value::bulk("g"),
            Value::bulk("w"),
            Value::bulk("h"),
            Value::bulk("x")
        ])
    );

    // A key a run makes and empties leaves no row, and its WATCHes still see the write.
    let fleeting = "redis.call('HSET', KEYS[1], 'f', 'v') return redis.call('HDEL', KEYS[1], 'f')";
    made_and_emptied(
        &speculating,
        &mut a,
        &mut watcher,
        "a:fleeting",
        fleeting,
        Value::Int(1),
    )
    .await;
}

#[tokio::test]
async fn a_sorted_set_a_run_makes_wakes_the_client_blocked_on_it() {
    // A long block poll: only a notification can wake the pop within the reply's bound (the
    // default poll would wake it without one).
    let gateway = TestGateway::with_resp(&["--resp-block-poll", "60s"]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let mut blocked = RawResp::connect(gateway.resp_addr()).await;
    blocked
        .send(&common::resp::encode(&[b"BZPOPMIN", b"marker", b"0"]))
        .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !matches!(con.command(&["INFO", "clients"]).await,
                    Value::Bulk(info) if String::from_utf8_lossy(&info).contains("blocked_clients:1"))
    {
        assert!(std::time::Instant::now() < deadline, "the BZPOPMIN did not block");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The key is known absent to the run: the ZADD is answered from the working set and
    // written set-based at commit, which makes the key and so wakes the pop.
    let speculated = metric(&gateway, "pgvs3_resp_speculated_calls_total").await;
    let add = "return redis.call('ZADD', KEYS[1], 5, 'job')";
    assert_eq!(eval(&mut con, add, &["marker".to_owned()]).await, Value::Int(1));
    assert!(metric(&gateway, "pgvs3_resp_speculated_calls_total").await > speculated);
    assert_eq!(
        blocked.reply().await,
        Some(Value::Array(vec![
            Value::bulk("marker"),
            Value::bulk("job"),
            Value::bulk("5")
        ]))
    );
}

/// One call of a random script on two streams (KEYS[1] made before with a TTL, an entry
/// deleted and nodes of 3, KEYS[2] made in scripts): XADDs with IDs by the clock and given,
/// trims by length and by ID, exact and `~`, with LIMIT, in XADD and XTRIM, NOMKSTREAM, and the
/// calls the working set does not predict, run in the database after the run's owed writes
/// (XDEL, XRANGE, EXPIRE, DEL).
fn random_stream_call(rng: &mut Rng) -> String {
    let key = |rng: &mut Rng| format!("KEYS[{}]", 1 + rng.below(2));
    let words = |words: &[&str]| words.iter().map(|word| (*word).to_owned()).collect::<Vec<String>>();
    let words = match rng.below(24) {
        0..=9 => {
            let trim = rng.pick(&[
                "",
                "",
                "MAXLEN ~ 4",
                "MAXLEN 5",
                "MAXLEN 2",
                "MAXLEN 0",
                "MAXLEN ~ 2 LIMIT 3",
                "MAXLEN ~ 1 LIMIT 0",
                "MINID ~ 99999999999999-2",
                "MINID 99999999999999-4",
                "NOMKSTREAM",
                "NOMKSTREAM MAXLEN ~ 3",
            ]);
            let id = rng.pick(&["*", "*", "*", "*", "3-*", "5-2", "99999999999999-*"]);
            let mut args = vec!["XADD".to_owned(), key(rng)];
            args.extend(trim.split_whitespace().map(str::to_owned));
            args.extend(words(&[id, "f", rng.pick(&["a", "b"])]));
            if rng.below(3) == 0 {
                args.extend(words(&["g", "c"]));
            }
            args
        }
        10 | 11 => vec![
            "XTRIM".into(),
            key(rng),
            "MAXLEN".into(),
            rng.pick(&["~", "="]).into(),
            rng.below(7).to_string(),
        ],
        12 => vec![
            "XTRIM".into(),
            key(rng),
            "MAXLEN".into(),
            "~".into(),
            rng.below(4).to_string(),
            "LIMIT".into(),
            rng.below(5).to_string(),
        ],
        13 => vec![
            "XTRIM".into(),
            key(rng),
            "MINID".into(),
            rng.pick(&["~", "="]).into(),
            rng.pick(&["1-4", "3-0", "6", "99999999999999-1"]).into(),
        ],
        14 | 15 => vec!["XLEN".into(), key(rng)],
        16 => vec!["XDEL".into(), key(rng), rng.pick(&["1-3", "1-5", "3-0", "5-2"]).into()],
        17 => vec![
            "XRANGE".into(),
            key(rng),
            "-".into(),
            "+".into(),
            "COUNT".into(),
            "2".into(),
        ],
        18 => vec!["EXPIRE".into(), key(rng), "1000".into()],
        19 => vec!["DEL".into(), key(rng)],
        _ => vec!["XADD".into(), key(rng), "*".into(), "f".into(), "v".into()],
    };
    lua_call(&words)
}

/// An ID as the test compares it: given ones as they are, the clock's (which differ between
/// the two gateways) as `ID`.
fn id_text(ms: i64, seq: i64) -> String {
    let unflip = |half: i64| (half as u64) ^ (1 << 63);
    match unflip(ms) {
        ms if (1_000_000_000_000..99_999_999_999_999).contains(&ms) => "ID".to_owned(),
        ms => format!("{ms}-{}", unflip(seq)),
    }
}

/// What a stream holds, read without a working set and from its rows: XINFO STREAM FULL (its
/// entries, last ID, greatest deleted ID, entries added, first entry, length), its TTL, and its
/// header and node rows (the first possible ID; each node's first and last ID, given, live).
async fn stream_state(con: &mut RawResp, sql: &tokio_postgres::Client, key: &str) -> (Value, bool, Vec<String>) {
    let info = without_ids(con.command(&["XINFO", "STREAM", key, "FULL"]).await);
    let ttl = con.command(&["TTL", key]).await;
    let mut rows = Vec::new();
    for row in sql
        .query(
            "SELECT last_ms, last_seq, deleted_ms, deleted_seq, added, length, first_ms, first_seq
               FROM pgvs3.resp_stream WHERE key = $1",
            &[&key],
        )
        .await
        .unwrap()
    {
        let id = |ms: &str, seq: &str| id_text(row.get(ms), row.get(seq));
        rows.push(format!(
            "stream last {} deleted {} added {} length {} first {}",
            id("last_ms", "last_seq"),
            id("deleted_ms", "deleted_seq"),
            row.get::<_, i64>("added"),
            row.get::<_, i64>("length"),
            id("first_ms", "first_seq"),
        ));
    }
    for row in sql
        .query(
            "SELECT ms, seq, last_ms, last_seq, given, live FROM pgvs3.resp_stream_node WHERE key = $1 ORDER BY ms, seq",
            &[&key],
        )
        .await
        .unwrap()
    {
        rows.push(format!(
            "node {} to {} given {} live {}",
            id_text(row.get("ms"), row.get("seq")),
            id_text(row.get("last_ms"), row.get("last_seq")),
            row.get::<_, i64>("given"),
            row.get::<_, i64>("live"),
        ));
    }
    (info, matches!(ttl, Value::Int(seconds) if seconds > 0), rows)
}

#[tokio::test]
async fn speculated_stream_writes_leave_what_the_calls_leave() {
    // Nodes of 3, so that runs' trims remove whole nodes and part of one.
    let mut d = differential(
        0x57e4_3939_u64,
        &["x1", "x2"],
        &[("stream-node-max-entries", "3")],
        &[
            ("XADD", 0, &["1-1", "f", "v"]),
            ("XADD", 0, &["1-2", "f", "v"]),
            ("XADD", 0, &["1-3", "f", "v"]),
            ("XADD", 0, &["1-4", "f", "v"]),
            ("XADD", 0, &["1-5", "f", "v"]),
            ("XADD", 0, &["1-6", "f", "v"]),
            ("XADD", 0, &["1-7", "f", "v"]),
            ("XDEL", 0, &["1-2"]),
            ("EXPIRE", 0, &["1000"]),
        ],
    )
    .await;
    let sql = d.speculating.sql().await;
    for round in 0..150 {
        let script = d.run(round, &[], random_stream_call).await;
        for (key_a, key_b) in d.keys_a.iter().zip(&d.keys_b) {
            assert_eq!(
                stream_state(&mut d.b, &sql, key_a).await,
                stream_state(&mut d.b, &sql, key_b).await,
                "round {round}: {key_a}; {script}"
            );
        }
    }
    let Differential {
        speculating,
        plain: _plain,
        mut a,
        keys_a,
        ..
    } = d;
    assert!(metric(&speculating, "pgvs3_resp_speculated_calls_total").await > 100.0);
    assert_eq!(metric(&speculating, "pgvs3_resp_speculation_misses_total").await, 0.0);

    // A run's XADD moves the stream's version, as WATCH sees it; a trim that removes nothing
    // does not.
    let add = "return redis.call('XADD', KEYS[1], '*', 'f', 'v')";
    let nothing = "return redis.call('XTRIM', KEYS[1], 'MAXLEN', '1000')";
    eval(&mut a, add, &keys_a[..1]).await;
    let mut watcher = RawResp::connect(speculating.resp_addr()).await;
    runs_touch(
        &speculating,
        &mut a,
        &mut watcher,
        &keys_a[0],
        "XLEN",
        &[(nothing, false), (add, true)],
    )
    .await;
    assert_eq!(metric(&speculating, "pgvs3_resp_speculation_misses_total").await, 0.0);
}

#[tokio::test]
async fn a_stream_entry_a_run_adds_wakes_the_client_blocked_on_it() {
    // Blocked clients woken only by NOTIFY: their fallback poll at 60 s.
    let gateway = TestGateway::with_resp(&["--resp-block-poll", "60s"]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let mut blocked = RawResp::connect(gateway.resp_addr()).await;
    let key = vec!["events".to_owned()];
    assert!(matches!(
        con.command(&["XADD", "events", "1-1", "f", "v"]).await,
        Value::Bulk(_)
    ));
    // A run loads the stream into the working set; the next one's XADD is answered from it.
    let add = "return redis.call('XADD', KEYS[1], 'MAXLEN', '~', '100', '*', 'job', 'done')";
    eval(&mut con, add, &key).await;
    blocked
        .send(&common::resp::encode(&[
            b"XREAD", b"BLOCK", b"0", b"STREAMS", b"events", b"$",
        ]))
        .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !matches!(con.command(&["INFO", "clients"]).await,
                    Value::Bulk(info) if String::from_utf8_lossy(&info).contains("blocked_clients:1"))
    {
        assert!(std::time::Instant::now() < deadline, "the XREAD did not block");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let speculated = metric(&gateway, "pgvs3_resp_speculated_calls_total").await;
    let Value::Bulk(id) = eval(&mut con, add, &key).await else {
        panic!("XADD answers an ID");
    };
    assert!(metric(&gateway, "pgvs3_resp_speculated_calls_total").await > speculated);
    let woken = tokio::time::timeout(std::time::Duration::from_secs(10), blocked.reply())
        .await
        .expect("the XREAD is woken");
    assert_eq!(
        woken,
        Some(Value::Array(vec![Value::Array(vec![
            Value::bulk("events"),
            Value::Array(vec![Value::Array(vec![
                Value::Bulk(id),
                Value::Array(vec![Value::bulk("job"), Value::bulk("done")])
            ])])
        ])]))
    );
}

#[tokio::test]
async fn a_stream_node_the_database_no_longer_holds_is_caught_by_the_runs_write() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let key = vec!["events".to_owned()];
    // Made by a run, which knows no node size for it (stream-node-max-entries): the working
    // set does not keep it, and the next run loads it, nodes and all.
    let add = "return redis.call('XADD', KEYS[1], '*', 'f', 'v')";
    for _ in 0..3 {
        assert!(matches!(eval(&mut con, add, &key).await, Value::Bulk(_)));
    }
    // The tail node changed underneath without a new version (a hand edit): the run's XADD,
    // answered from the working set, goes as one write of what it changed
    // (pgvs3.resp_stream_apply), which checks the node it gives the entry to, and the run
    // starts over in the database. Replayed, the XADD would have answered its ID all the same.
    let sql = gateway.sql().await;
    sql.execute(
        "UPDATE pgvs3.resp_stream_node SET given = given + 1 WHERE key = 'events'",
        &[],
    )
    .await
    .unwrap();
    assert!(matches!(eval(&mut con, add, &key).await, Value::Bulk(_)));
    assert_eq!(metric(&gateway, "pgvs3_resp_speculation_misses_total").await, 1.0);
    assert_eq!(con.command(&["XLEN", "events"]).await, Value::Int(4));
}

#[tokio::test]
async fn a_node_size_set_since_a_run_kept_the_stream_gives_its_entries_to_nodes_of_the_new_size() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let key = vec!["events".to_owned()];
    assert!(matches!(
        con.command(&["XADD", "events", "1-1", "f", "v"]).await,
        Value::Bulk(_)
    ));
    let add = "return redis.call('XADD', KEYS[1], '*', 'f', 'v')";
    eval(&mut con, add, &key).await;
    // CONFIG SET moves no key's version, but the working set keeps a value under the setting
    // of the encoding parameters it was loaded by (working_set/run.rs `kept_as`): the next run
    // does not take the stream with its nodes of 100, loads it again, and gives the entries to
    // nodes of 2, as the calls one by one do. (A CONFIG SET within a run, after its load, is
    // caught by the stream write's check of the node size it gave entries by.)
    assert_eq!(
        con.command(&["CONFIG", "SET", "stream-node-max-entries", "2"]).await,
        Value::Simple("OK".to_owned())
    );
    let three = "redis.call('XADD', KEYS[1], '*', 'f', 'v') redis.call('XADD', KEYS[1], '*', 'f', 'v') \
                 return redis.call('XADD', KEYS[1], '*', 'f', 'v')";
    assert!(matches!(eval(&mut con, three, &key).await, Value::Bulk(_)));
    assert_eq!(metric(&gateway, "pgvs3_resp_speculation_misses_total").await, 0.0);
    let sql = gateway.sql().await;
    let given: Vec<i64> = sql
        .query(
            "SELECT given FROM pgvs3.resp_stream_node WHERE key = 'events' ORDER BY ms, seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get("given"))
        .collect();
    assert_eq!(given, vec![2, 2, 1]);
}

/// One call of a random script on two lists (KEYS[1] made before with a TTL, KEYS[2] made in
/// scripts): every write the working set predicts, with counts and on both ends, moves between
/// the two and onto one, LREM from the head, the tail and all, and the calls it does not
/// predict, run in the database after the run's owed writes (LSET, LINSERT, LTRIM, EXPIRE, DEL).
fn random_list_write_call(rng: &mut Rng) -> String {
    let key = |rng: &mut Rng| format!("KEYS[{}]", 1 + rng.below(2));
    let e = |rng: &mut Rng| rng.pick(ELEMENTS).to_owned();
    let side = |rng: &mut Rng| rng.pick(&["LEFT", "RIGHT"]).to_owned();
    let words: Vec<String> = match rng.below(24) {
        0..=2 => vec!["LPUSH".into(), key(rng), e(rng), e(rng)],
        3..=5 => vec!["RPUSH".into(), key(rng), e(rng)],
        6 => vec![rng.pick(&["LPUSHX", "RPUSHX"]).into(), key(rng), e(rng), e(rng)],
        7 | 8 => vec![rng.pick(&["LPOP", "RPOP"]).into(), key(rng)],
        9 => vec![rng.pick(&["LPOP", "RPOP"]).into(), key(rng), rng.below(4).to_string()],
        10 | 11 => vec!["RPOPLPUSH".into(), key(rng), key(rng)],
        12 => vec!["LMOVE".into(), key(rng), key(rng), side(rng), side(rng)],
        13 | 14 => vec!["LREM".into(), key(rng), (rng.below(5) as i64 - 2).to_string(), e(rng)],
        15 => vec!["LSET".into(), key(rng), rng.pick(&["0", "-1", "1"]).into(), e(rng)],
        16 => vec![
            "LINSERT".into(),
            key(rng),
            rng.pick(&["BEFORE", "AFTER"]).into(),
            e(rng),
            e(rng),
        ],
        17 => vec!["LTRIM".into(), key(rng), rng.below(2).to_string(), "-2".into()],
        18 => vec!["EXPIRE".into(), key(rng), "1000".into()],
        19 => vec!["DEL".into(), key(rng)],
        20 => vec!["LLEN".into(), key(rng)],
        _ => vec!["LRANGE".into(), key(rng), "0".into(), "-1".into()],
    };
    lua_call(&words)
}

/// What a list holds, read without a working set: its elements, length, encoding and whether
/// it has a TTL; and its rows, checked: every position inside the bounds, the elements in the
/// order of their positions, as many as the length says.
async fn list_state(con: &mut RawResp, sql: &tokio_postgres::Client, key: &str) -> (Value, Value, Value, bool) {
    let elements = con.command(&["LRANGE", key, "0", "-1"]).await;
    let len = con.command(&["LLEN", key]).await;
    let encoding = con.command(&["OBJECT", "ENCODING", key]).await;
    let ttl = con.command(&["TTL", key]).await;
    let bounds = sql
        .query(
            "SELECT length, list_head, list_tail FROM pgvs3.resp_keys WHERE key = $1",
            &[&key],
        )
        .await
        .unwrap();
    let rows = sql
        .query(
            "SELECT pos, value FROM pgvs3.resp_list WHERE key = $1 ORDER BY pos",
            &[&key],
        )
        .await
        .unwrap();
    let values = Value::Array(
        rows.iter()
            .map(|row| Value::Bulk(row.get::<_, Vec<u8>>("value")))
            .collect(),
    );
    assert_eq!(values, elements, "{key}: the rows in the order of their positions");
    match bounds.first() {
        None => assert!(rows.is_empty(), "{key}: rows of no key"),
        Some(bounds) => {
            let (head, tail): (i64, i64) = (bounds.get("list_head"), bounds.get("list_tail"));
            assert_eq!(bounds.get::<_, i64>("length"), rows.len() as i64, "{key}: length");
            for row in &rows {
                let pos: i64 = row.get("pos");
                assert!((head..=tail).contains(&pos), "{key}: {pos} outside {head}..={tail}");
            }
        }
    }
    (
        elements,
        len,
        encoding,
        matches!(ttl, Value::Int(seconds) if seconds > 0),
    )
}

#[tokio::test]
async fn speculated_list_writes_leave_what_the_calls_leave() {
    let mut d = differential(
        0x7157_3939_u64,
        &["l1", "l2"],
        &[],
        &[("RPUSH", 0, &["a", "b", "c", "1", "a"]), ("EXPIRE", 0, &["1000"])],
    )
    .await;
    let sql = d.speculating.sql().await;
    for round in 0..150 {
        let script = d.run(round, &[], random_list_write_call).await;
        for (key_a, key_b) in d.keys_a.iter().zip(&d.keys_b) {
            assert_eq!(
                list_state(&mut d.b, &sql, key_a).await,
                list_state(&mut d.b, &sql, key_b).await,
                "round {round}: {key_a}; {script}"
            );
        }
    }
    let Differential {
        speculating,
        plain: _plain,
        mut a,
        mut b,
        ..
    } = d;
    assert!(metric(&speculating, "pgvs3_resp_speculated_calls_total").await > 100.0);
    assert_eq!(metric(&speculating, "pgvs3_resp_speculation_misses_total").await, 0.0);

    // A run's list write moves the key's version (which tells another gateway's working set
    // its value is old), as WATCH sees it; a run whose writes change nothing does not.
    let key = "a:watched";
    assert_eq!(b.command(&["RPUSH", key, "a", "b"]).await, Value::Int(2));
    let change = "return redis.call('RPOPLPUSH', KEYS[1], KEYS[1])";
    let nothing = "return {redis.call('LREM', KEYS[1], 0, 'z'), redis.call('LPOP', KEYS[1], 0)}";
    eval(&mut a, "return redis.call('LLEN', KEYS[1])", &[key.to_owned()]).await;
    let mut watcher = RawResp::connect(speculating.resp_addr()).await;
    runs_touch(
        &speculating,
        &mut a,
        &mut watcher,
        key,
        "LLEN",
        &[(nothing, false), (change, true)],
    )
    .await;
    assert_eq!(
        b.command(&["LRANGE", key, "0", "-1"]).await,
        Value::Array(vec![Value::bulk("b"), Value::bulk("a")])
    );

    // A key a run makes and empties leaves no row, and its WATCHes still see the write.
    let fleeting = "redis.call('LPUSH', KEYS[1], 'x') return redis.call('RPOP', KEYS[1])";
    made_and_emptied(
        &speculating,
        &mut a,
        &mut watcher,
        "a:fleeting",
        fleeting,
        Value::bulk("x"),
    )
    .await;
    assert_eq!(metric(&speculating, "pgvs3_resp_speculation_misses_total").await, 0.0);
}

/// One call of a random script on two sets (KEYS[1] made before as an intset with a TTL,
/// KEYS[2] made in scripts): SADDs and SREMs of one to three members, integers five times in
/// six (an intset lasts long enough to pass its entry limit) and else members that are no
/// integer (which make it large), SREMs of every member (a run empties a set and may make it
/// again), reads between them, and the calls not predicted, run in the database after the run's
/// owed writes (SMOVE, SUNIONSTORE, EXPIRE, DEL).
fn random_set_write_call(rng: &mut Rng) -> String {
    const INTEGERS: &[&str] = &["1", "2", "3", "10", "-0", "7"];
    let key = |rng: &mut Rng| format!("KEYS[{}]", 1 + rng.below(2));
    let m = |rng: &mut Rng| match rng.below(6) {
        0 => rng.pick(&["x", "y"]).to_owned(),
        _ => rng.pick(INTEGERS).to_owned(),
    };
    let some = |rng: &mut Rng, command: &str| -> Vec<String> {
        let mut words = vec![command.to_owned(), key(rng)];
        words.extend((0..1 + rng.below(3)).map(|_| m(rng)));
        words
    };
    let words: Vec<String> = match rng.below(20) {
        0..=5 => some(rng, "SADD"),
        6..=8 => some(rng, "SREM"),
        9 => {
            let mut words = vec!["SREM".to_owned(), key(rng), "x".to_owned(), "y".to_owned()];
            words.extend(INTEGERS.iter().map(|member| member.to_string()));
            words
        }
        10 => vec!["SCARD".into(), key(rng)],
        11 => vec!["SISMEMBER".into(), key(rng), m(rng)],
        12 => vec!["SMISMEMBER".into(), key(rng), m(rng), m(rng)],
        13 | 14 => vec!["SMEMBERS".into(), key(rng)],
        15 => vec!["SMOVE".into(), key(rng), key(rng), m(rng)],
        16 => vec!["SUNIONSTORE".into(), "KEYS[2]".into(), "KEYS[1]".into()],
        17 => vec!["EXPIRE".into(), key(rng), "1000".into()],
        18 => vec!["DEL".into(), key(rng)],
        _ => some(rng, "SADD"),
    };
    lua_call(&words)
}

#[tokio::test]
async fn speculated_set_writes_leave_what_the_calls_leave() {
    // A small intset limit, so that runs pass it.
    let mut d = differential(
        0x5e75_3940_u64,
        &["s1", "s2"],
        &[("set-max-intset-entries", "4"), ("set-max-listpack-entries", "4")],
        &[("SADD", 0, &["10", "2", "1"]), ("EXPIRE", 0, &["1000"])],
    )
    .await;
    for round in 0..150 {
        // First, whatever the seed: a set made, emptied and made again in one run; then an
        // intset a member that is no integer makes large, kept large when it goes; then one
        // past its entry limit.
        let first: &[&str] = match round {
            0 => &["SCARD KEYS[1]", "SADD KEYS[2] 5", "SREM KEYS[2] 5", "SADD KEYS[2] 6 5"],
            1 => &[
                "SREM KEYS[1] 1",
                "SADD KEYS[1] 1 x",
                "SREM KEYS[1] x",
                "SMEMBERS KEYS[1]",
            ],
            2 => &["SADD KEYS[2] 1 2 3", "SREM KEYS[2] 1 2 3 5 6", "SMEMBERS KEYS[2]"],
            _ => &[],
        };
        let script = d.run(round, first, random_set_write_call).await;
        d.small_keys_agree(round, &script, "SMEMBERS").await;
    }
    let Differential {
        speculating,
        plain: _plain,
        mut a,
        mut b,
        ..
    } = d;
    assert!(metric(&speculating, "pgvs3_resp_speculated_calls_total").await > 100.0);

    // A run's set write moves the key's version, as WATCH sees it, even when it removes a
    // member and adds it back (Redis signals the key all the same); a run whose writes change
    // nothing does not.
    let key = "a:watched";
    assert_eq!(b.command(&["SADD", key, "1", "2"]).await, Value::Int(2));
    let change = "return {redis.call('SREM', KEYS[1], '2'), redis.call('SADD', KEYS[1], '2')}";
    let nothing = "return {redis.call('SADD', KEYS[1], '1'), redis.call('SREM', KEYS[1], '9')}";
    eval(&mut a, "return redis.call('SCARD', KEYS[1])", &[key.to_owned()]).await;
    let mut watcher = RawResp::connect(speculating.resp_addr()).await;
    runs_touch(
        &speculating,
        &mut a,
        &mut watcher,
        key,
        "SCARD",
        &[(nothing, false), (change, true)],
    )
    .await;
    assert_eq!(
        b.command(&["SMEMBERS", key]).await,
        Value::Array(vec![Value::bulk("1"), Value::bulk("2")])
    );

    // A key a run makes and empties leaves no row, and its WATCHes still see the write.
    let fleeting = "redis.call('SADD', KEYS[1], 'x') return redis.call('SREM', KEYS[1], 'x')";
    made_and_emptied(
        &speculating,
        &mut a,
        &mut watcher,
        "a:fleeting",
        fleeting,
        Value::Int(1),
    )
    .await;
    assert_eq!(metric(&speculating, "pgvs3_resp_speculation_misses_total").await, 0.0);
}

#[tokio::test]
async fn a_set_member_the_database_no_longer_holds_is_caught_by_the_runs_write() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let key = vec!["ids".to_owned()];
    let count = "return redis.call('SCARD', KEYS[1])";
    assert_eq!(con.command(&["SADD", "ids", "1", "2", "3"]).await, Value::Int(3));
    assert_eq!(eval(&mut con, count, &key).await, Value::Int(3));
    // A member removed underneath without a new version (a hand edit): the run's SREM,
    // answered 1 from the working set, goes as one write (pgvs3.resp_set_apply), which checks
    // each member it removes is there, and the run starts over in the database.
    let sql = gateway.sql().await;
    sql.execute("DELETE FROM pgvs3.resp_set WHERE key = 'ids' AND member = '3'", &[])
        .await
        .unwrap();
    let remove = "return redis.call('SREM', KEYS[1], '3')";
    assert_eq!(eval(&mut con, remove, &key).await, Value::Int(0));
    assert_eq!(metric(&gateway, "pgvs3_resp_speculation_misses_total").await, 1.0);

    // A member added underneath: the run's SADD of it, answered 1, is checked to add it.
    assert_eq!(eval(&mut con, count, &key).await, Value::Int(2));
    sql.execute(
        "INSERT INTO pgvs3.resp_set (bucket_id, key, member)
             SELECT bucket_id, key, '9' FROM pgvs3.resp_keys WHERE key = 'ids'",
        &[],
    )
    .await
    .unwrap();
    let add = "return {redis.call('SADD', KEYS[1], '9'), redis.call('SCARD', KEYS[1])}";
    assert_eq!(
        eval(&mut con, add, &key).await,
        Value::Array(vec![Value::Int(0), Value::Int(3)])
    );
    assert_eq!(metric(&gateway, "pgvs3_resp_speculation_misses_total").await, 2.0);
    assert_eq!(
        con.command(&["SMEMBERS", "ids"]).await,
        Value::Array(vec![Value::bulk("1"), Value::bulk("2"), Value::bulk("9")])
    );
}

/// Waits until the gateway counts `n` blocked clients.
async fn blocked_clients(con: &mut RawResp, n: usize) {
    let want = format!("blocked_clients:{n}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !matches!(con.command(&["INFO", "clients"]).await,
                    Value::Bulk(info) if String::from_utf8_lossy(&info).contains(&want))
    {
        assert!(std::time::Instant::now() < deadline, "no {want}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_list_a_run_pushes_to_wakes_the_clients_blocked_on_it() {
    // Blocked clients woken only by NOTIFY: their fallback poll at 60 s.
    let gateway = TestGateway::with_resp(&["--resp-block-poll", "60s"]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let mut popping = RawResp::connect(gateway.resp_addr()).await;
    let mut moving = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(con.command(&["RPUSH", "wait", "j1", "j2"]).await, Value::Int(2));
    let keys = vec!["wait".to_owned(), "queue".to_owned(), "active".to_owned()];
    // A run loads the lists into the working set (`queue` and `active` known absent).
    let load = "return {redis.call('LLEN', KEYS[1]), redis.call('LLEN', KEYS[2]), redis.call('LLEN', KEYS[3])}";
    eval(&mut con, load, &keys).await;
    popping.send(&common::resp::encode(&[b"BLPOP", b"queue", b"0"])).await;
    moving
        .send(&common::resp::encode(&[b"BRPOPLPUSH", b"active", b"done", b"0"]))
        .await;
    blocked_clients(&mut con, 2).await;
    // The pushes are answered from the working set and written set-based at commit.
    let speculated = metric(&gateway, "pgvs3_resp_speculated_calls_total").await;
    let run = "return {redis.call('RPUSH', KEYS[2], 'job'), redis.call('RPOPLPUSH', KEYS[1], KEYS[3])}";
    assert_eq!(
        eval(&mut con, run, &keys).await,
        Value::Array(vec![Value::Int(1), Value::bulk("j2")])
    );
    assert!(metric(&gateway, "pgvs3_resp_speculated_calls_total").await >= speculated + 2.0);
    for (client, woken) in [
        (
            &mut popping,
            Value::Array(vec![Value::bulk("queue"), Value::bulk("job")]),
        ),
        (&mut moving, Value::bulk("j2")),
    ] {
        let reply = tokio::time::timeout(std::time::Duration::from_secs(10), client.reply())
            .await
            .expect("the blocked client is woken");
        assert_eq!(reply, Some(woken));
    }
    assert_eq!(
        con.command(&["LRANGE", "done", "0", "-1"]).await,
        Value::Array(vec![Value::bulk("j2")])
    );
    assert_eq!(con.command(&["EXISTS", "queue", "active"]).await, Value::Int(0));
    assert_eq!(metric(&gateway, "pgvs3_resp_speculation_misses_total").await, 0.0);
}

#[tokio::test]
async fn a_list_element_the_database_no_longer_holds_is_caught_by_the_runs_write() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let key = vec!["wait".to_owned()];
    assert_eq!(con.command(&["RPUSH", "wait", "a", "b", "c"]).await, Value::Int(3));
    eval(&mut con, "return redis.call('LLEN', KEYS[1])", &key).await;
    // The head element changed underneath without a new version (a hand edit): the run's LPOP,
    // answered `a` from the working set, goes as one write (pgvs3.resp_list_apply), which
    // checks the element it deletes, and the run starts over in the database.
    let sql = gateway.sql().await;
    sql.execute(
        "UPDATE pgvs3.resp_list SET value = 'z' WHERE key = 'wait' AND value = 'a'",
        &[],
    )
    .await
    .unwrap();
    let pop = "return redis.call('LPOP', KEYS[1])";
    assert_eq!(eval(&mut con, pop, &key).await, Value::bulk("z"));
    assert_eq!(metric(&gateway, "pgvs3_resp_speculation_misses_total").await, 1.0);
    assert_eq!(
        con.command(&["LRANGE", "wait", "0", "-1"]).await,
        Value::Array(vec![Value::bulk("b"), Value::bulk("c")])
    );

    // An element added underneath past the tail, the length and bound following, without a
    // new version: the elements the run removes are as it found them, but not the list's
    // length and bounds, which the write checks too.
    eval(&mut con, "return redis.call('LLEN', KEYS[1])", &key).await;
    sql.batch_execute(
        "INSERT INTO pgvs3.resp_list (bucket_id, key, pos, value)
             SELECT bucket_id, key, list_tail + 1048576, 'd' FROM pgvs3.resp_keys WHERE key = 'wait';
         UPDATE pgvs3.resp_keys SET length = length + 1, list_tail = list_tail + 1048576 WHERE key = 'wait'",
    )
    .await
    .unwrap();
    let pop_and_count = "return {redis.call('LPOP', KEYS[1]), redis.call('LLEN', KEYS[1])}";
    assert_eq!(
        eval(&mut con, pop_and_count, &key).await,
        Value::Array(vec![Value::bulk("b"), Value::Int(2)])
    );
    assert_eq!(metric(&gateway, "pgvs3_resp_speculation_misses_total").await, 2.0);
}

#[tokio::test]
async fn an_lmove_onto_a_key_whose_calls_are_replayed_is_replayed_on_both_sides() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let keys = vec!["from".to_owned(), "to".to_owned()];
    assert_eq!(con.command(&["RPUSH", "from", "x", "x", "x"]).await, Value::Int(3));
    eval(&mut con, "return redis.call('LLEN', KEYS[1])", &keys).await;
    // `to` is a hash, then no key, then a list within the run: its calls are replayed in
    // order (another family's owed write), and so is the RPOPLPUSH, whose pop from `from` must
    // then not be written set-based as well.
    let run = "return {redis.call('HSET', KEYS[2], 'f', 'v'), redis.call('HDEL', KEYS[2], 'f'), \
               redis.call('RPOPLPUSH', KEYS[1], KEYS[2])}";
    let speculated = metric(&gateway, "pgvs3_resp_speculated_calls_total").await;
    assert_eq!(
        eval(&mut con, run, &keys).await,
        Value::Array(vec![Value::Int(1), Value::Int(1), Value::bulk("x")])
    );
    assert!(metric(&gateway, "pgvs3_resp_speculated_calls_total").await >= speculated + 3.0);
    assert_eq!(
        con.command(&["LRANGE", "from", "0", "-1"]).await,
        Value::Array(vec![Value::bulk("x"), Value::bulk("x")])
    );
    assert_eq!(
        con.command(&["LRANGE", "to", "0", "-1"]).await,
        Value::Array(vec![Value::bulk("x")])
    );
    assert_eq!(metric(&gateway, "pgvs3_resp_speculation_misses_total").await, 0.0);
}
