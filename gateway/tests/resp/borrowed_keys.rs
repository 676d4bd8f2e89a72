//! Keys a script first uses on the way, borrowed (resp/working_set/run.rs `RunSet::borrow`):
//! answered from the working set's value, or taken as absent where that call of the script has
//! lately found its key absent, without a load; locked and checked when the run sends its next
//! round trip. A key that is not as borrowed (changed, made, held by another transaction) fails
//! the check, and the run starts over in the database: its replies are the database's.

use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::{RawResp, Value};

use super::working_set::metric;

/// A hash named by ARGV[1] (not declared), its field `n` set to ARGV[2] and read back.
const SET_AND_GET: &str = "redis.call('HSET', ARGV[1], 'n', ARGV[2]) return redis.call('HGET', ARGV[1], 'n')";
const GET: &str = "return redis.call('HGET', ARGV[1], 'n')";

/// `script` under a comment `tag`: another script, whose call sites have learned nothing (a
/// site whose run missed loads its keys for its next runs, working_set/sites.rs).
fn tagged(tag: &str, script: &str) -> String {
    format!("-- {tag}\n{script}")
}
const CARD: &str = "return redis.call('ZCARD', ARGV[1])";
const INCR: &str = "return redis.call('HINCRBY', ARGV[1], 'n', 1)";

async fn eval(con: &mut RawResp, script: &str, argv: &[&str]) -> Value {
    let mut args = vec!["EVAL", script, "0"];
    args.extend(argv);
    con.command(&args).await
}

/// Once `key` (given a TTL that runs out at once, or already) is gone as clients see it.
async fn gone(gateway: &TestGateway, key: &str) {
    common::eventually(
        std::time::Duration::from_secs(10),
        &format!("{key} expired"),
        || async {
            let mut con = RawResp::connect(gateway.resp_addr()).await;
            (con.command(&["EXISTS", key]).await == Value::Int(0)).then_some(())
        },
    )
    .await;
}

async fn borrowed(gateway: &TestGateway) -> f64 {
    metric(gateway, "pgvs3_resp_borrowed_keys_total").await
}

async fn misses(gateway: &TestGateway) -> f64 {
    metric(gateway, "pgvs3_resp_speculation_misses_total").await
}

#[tokio::test]
async fn a_kept_value_is_borrowed_and_a_changed_one_answers_as_the_database() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(eval(&mut con, SET_AND_GET, &["job:1", "a"]).await, Value::bulk("a"));
    // Kept in the working set by that run: the next runs borrow it.
    assert_eq!(borrowed(&gateway).await, 0.0);
    assert_eq!(eval(&mut con, SET_AND_GET, &["job:1", "b"]).await, Value::bulk("b"));
    assert_eq!(eval(&mut con, GET, &["job:1"]).await, Value::bulk("b"));
    assert_eq!(borrowed(&gateway).await, 2.0);
    assert_eq!(misses(&gateway).await, 0.0);

    // A client's write gives the key a new version; the working set still holds the old one,
    // which the next run borrows: its check fails, and it runs again in the database.
    assert_eq!(con.command(&["HSET", "job:1", "n", "c"]).await, Value::Int(0));
    assert_eq!(eval(&mut con, GET, &["job:1"]).await, Value::bulk("c"));
    assert_eq!(misses(&gateway).await, 1.0);
    // That run left the value at its new version: borrowed again, and right.
    assert_eq!(eval(&mut con, SET_AND_GET, &["job:1", "d"]).await, Value::bulk("d"));
    assert_eq!(misses(&gateway).await, 1.0);

    // The site that missed loads its key for its next runs: no borrow there.
    let before = borrowed(&gateway).await;
    assert_eq!(eval(&mut con, GET, &["job:1"]).await, Value::bulk("d"));
    assert_eq!(borrowed(&gateway).await, before);

    // Deleted underneath: a borrowed value of a key that is gone is no answer.
    assert_eq!(con.command(&["DEL", "job:1"]).await, Value::Int(1));
    assert_eq!(eval(&mut con, &tagged("deleted", GET), &["job:1"]).await, Value::Nil);
    assert_eq!(misses(&gateway).await, 2.0);

    // Expired underneath (a TTL set by a client, which does not change its version): a value
    // borrowed at that version fails the check once the key is past its TTL.
    assert_eq!(eval(&mut con, SET_AND_GET, &["job:2", "e"]).await, Value::bulk("e"));
    assert_eq!(con.command(&["PEXPIRE", "job:2", "1"]).await, Value::Int(1));
    gone(&gateway, "job:2").await;
    let before = misses(&gateway).await;
    assert_eq!(eval(&mut con, &tagged("expired", GET), &["job:2"]).await, Value::Nil);
    assert_eq!(misses(&gateway).await, before + 1.0);
    assert_eq!(con.command(&["EXISTS", "job:2"]).await, Value::Int(0));
}

#[tokio::test]
async fn a_call_that_finds_its_key_absent_takes_the_next_as_absent_and_a_present_one_is_caught() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    // Two loads find the call's key absent; from the third run on it is taken so unloaded.
    for key in ["z:1", "z:2"] {
        assert_eq!(eval(&mut con, CARD, &[key]).await, Value::Int(0));
    }
    assert_eq!(borrowed(&gateway).await, 0.0);
    assert_eq!(eval(&mut con, CARD, &["z:3"]).await, Value::Int(0));
    assert_eq!(borrowed(&gateway).await, 1.0);

    // The guess is wrong for a key that exists: the check fails, the run answers the database's.
    assert_eq!(con.command(&["ZADD", "z:4", "1", "a", "2", "b"]).await, Value::Int(2));
    assert_eq!(eval(&mut con, CARD, &["z:4"]).await, Value::Int(2));
    assert_eq!(misses(&gateway).await, 1.0);
    // And the call is doubted: the next absent keys are loaded again, not guessed.
    let after_miss = borrowed(&gateway).await;
    for key in ["z:5", "z:6", "z:7"] {
        assert_eq!(eval(&mut con, CARD, &[key]).await, Value::Int(0));
    }
    assert_eq!(borrowed(&gateway).await, after_miss);

    // A write on a key taken as absent makes it, checked absent first.
    let add = "redis.call('ZADD', ARGV[1], 1, 'x') return redis.call('ZCARD', ARGV[1])";
    for key in ["y:1", "y:2", "y:3"] {
        assert_eq!(eval(&mut con, add, &[key]).await, Value::Int(1));
    }
    assert!(borrowed(&gateway).await > after_miss, "y:3 taken as absent");
    assert_eq!(
        con.command(&["ZRANGE", "y:3", "0", "-1", "WITHSCORES"]).await,
        Value::Array(vec![Value::bulk("x"), Value::bulk("1")])
    );
    // Made meanwhile by a client: the guess fails, and the database's ZADD answers.
    assert_eq!(con.command(&["ZADD", "y:4", "5", "x", "6", "w"]).await, Value::Int(2));
    assert_eq!(eval(&mut con, add, &["y:4"]).await, Value::Int(2));
    assert_eq!(
        con.command(&["ZRANGE", "y:4", "0", "-1", "WITHSCORES"]).await,
        Value::Array(vec![
            Value::bulk("x"),
            Value::bulk("1"),
            Value::bulk("w"),
            Value::bulk("6")
        ])
    );
    // A string of the name is not absent either.
    let add = tagged("string", add);
    for key in ["y:5", "y:6"] {
        assert_eq!(eval(&mut con, &add, &[key]).await, Value::Int(1));
    }
    assert_eq!(con.command(&["SET", "y:7", "text"]).await, Value::Simple("OK".into()));
    let before = misses(&gateway).await;
    let wrong = eval(&mut con, &add, &["y:7"]).await;
    assert!(
        matches!(&wrong, Value::Error(text) if text.starts_with("WRONGTYPE")),
        "{wrong:?}"
    );
    assert_eq!(con.command(&["GET", "y:7"]).await, Value::bulk("text"));
    assert_eq!(misses(&gateway).await, before + 1.0);
}

/// A lock taken the way job queues take one: made with a TTL where absent, read back.
const TAKE_LOCK: &str = "if redis.call('EXISTS', ARGV[1]) == 0 then redis.call('SET', ARGV[1], ARGV[2], 'PX', 60000) end return redis.call('GET', ARGV[1])";

#[tokio::test]
async fn a_string_command_takes_a_key_as_absent_and_its_write_is_checked_first() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    for key in ["lock:1", "lock:2"] {
        assert_eq!(eval(&mut con, TAKE_LOCK, &[key, "t"]).await, Value::bulk("t"));
    }
    assert_eq!(borrowed(&gateway).await, 0.0);
    // Taken as absent without a load: EXISTS answered from the batch, the SET written at commit
    // behind the check.
    assert_eq!(
        eval(&mut con, TAKE_LOCK, &["lock:3", "mine"]).await,
        Value::bulk("mine")
    );
    assert_eq!(borrowed(&gateway).await, 1.0);
    assert_eq!(con.command(&["GET", "lock:3"]).await, Value::bulk("mine"));
    let ttl = con.command(&["PTTL", "lock:3"]).await;
    assert!(matches!(ttl, Value::Int(ms) if ms > 50_000 && ms <= 60_000), "{ttl:?}");
    assert_eq!(misses(&gateway).await, 0.0);

    // Held by another: the guess fails at the check, and the run answers the holder's token
    // without writing over it.
    assert_eq!(
        con.command(&["SET", "lock:4", "theirs"]).await,
        Value::Simple("OK".into())
    );
    assert_eq!(
        eval(&mut con, TAKE_LOCK, &["lock:4", "mine"]).await,
        Value::bulk("theirs")
    );
    assert_eq!(misses(&gateway).await, 1.0);
    assert_eq!(con.command(&["GET", "lock:4"]).await, Value::bulk("theirs"));

    // A typed key of the name that expired (its row may still be there): absent, and the
    // string written over it replaces it.
    let take = tagged("expired hash", TAKE_LOCK);
    for key in ["lock:5", "lock:6"] {
        assert_eq!(eval(&mut con, &take, &[key, "t"]).await, Value::bulk("t"));
    }
    assert_eq!(con.command(&["HSET", "lock:7", "f", "v"]).await, Value::Int(1));
    assert_eq!(con.command(&["PEXPIRE", "lock:7", "1"]).await, Value::Int(1));
    gone(&gateway, "lock:7").await;
    let before = borrowed(&gateway).await;
    assert_eq!(eval(&mut con, &take, &["lock:7", "new"]).await, Value::bulk("new"));
    assert_eq!(borrowed(&gateway).await, before + 1.0);
    assert_eq!(con.command(&["TYPE", "lock:7"]).await, Value::Simple("string".into()));
    assert_eq!(con.command(&["GET", "lock:7"]).await, Value::bulk("new"));
    let sql = gateway.sql().await;
    let typed_rows: i64 = sql
        .query_one("SELECT count(*) AS n FROM pgvs3.resp_keys WHERE key = 'lock:7'", &[])
        .await
        .unwrap()
        .get("n");
    assert_eq!(typed_rows, 0, "the expired hash's row is gone");
    assert_eq!(misses(&gateway).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_borrowed_key_held_by_another_transaction_fails_its_check_and_the_run_starts_over() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(eval(&mut con, INCR, &["job:1"]).await, Value::Int(1));
    // Another transaction holds the key's lock while the value is kept: the run's check cannot
    // take it, and the run starts over without speculation (where the key, contended again,
    // makes it hold the whole keyspace; the holder is no writer of pgvs3's, so nothing waits).
    let holder = gateway.sql().await;
    holder
        .batch_execute(
            "BEGIN; SELECT pg_advisory_xact_lock(id::int4, hashtext('job:1')) FROM pgvs3.buckets WHERE name = 'resp'",
        )
        .await
        .unwrap();
    let addr = gateway.resp_addr();
    let run = tokio::spawn(async move {
        let mut con = RawResp::connect(addr).await;
        eval(&mut con, INCR, &["job:1"]).await
    });
    common::eventually(std::time::Duration::from_secs(10), "the check failed", || async {
        (misses(&gateway).await >= 1.0).then_some(())
    })
    .await;
    holder.batch_execute("COMMIT").await.unwrap();
    assert_eq!(run.await.unwrap(), Value::Int(2));
    assert_eq!(con.command(&["HGET", "job:1", "n"]).await, Value::bulk("2"));
}

/// Clients increment one counter, some through a script that borrows it (not declared), some
/// through HINCRBY, some through a script that declares it, at once: as one counter, each
/// increment answers a value no other did, and together they answer 1..=N (a linearizable
/// counter's history).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn increments_through_borrowed_and_locked_keys_are_one_counter() {
    const CLIENTS: usize = 6;
    const EACH: usize = 40;
    let gateway = TestGateway::with_resp(&[]).await;
    let addr = gateway.resp_addr();
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        tasks.push(tokio::spawn(async move {
            let mut con = RawResp::connect(addr).await;
            let mut seen = Vec::with_capacity(EACH);
            for _ in 0..EACH {
                let reply = match client % 3 {
                    0 => eval(&mut con, INCR, &["counter"]).await,
                    1 => con.command(&["HINCRBY", "counter", "n", "1"]).await,
                    _ => {
                        let declared = "return redis.call('HINCRBY', KEYS[1], 'n', 1)";
                        con.command(&["EVAL", declared, "1", "counter"]).await
                    }
                };
                match reply {
                    Value::Int(n) => seen.push(n),
                    other => panic!("client {client}: {other:?}"),
                }
            }
            seen
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort_unstable();
    let expected: Vec<i64> = (1..=(CLIENTS * EACH) as i64).collect();
    assert_eq!(all, expected);
    let mut con = RawResp::connect(addr).await;
    assert_eq!(
        con.command(&["HGET", "counter", "n"]).await,
        Value::bulk(&(CLIENTS * EACH).to_string())
    );
    // Runs borrowed the counter: checked, or caught changed (a miss).
    let (borrowed, misses) = (borrowed(&gateway).await, misses(&gateway).await);
    assert!(borrowed + misses > 0.0, "borrowed {borrowed}, misses {misses}");
    eprintln!("borrowed {borrowed}, misses {misses}");
}

/// A job queue's lock: taken with a TTL by one script, released by another only while it holds
/// the taker's token.
const TAKE: &str = "redis.call('SET', ARGV[1], ARGV[2], 'PX', ARGV[3]) return 1";
const RELEASE: &str = "if redis.call('GET', ARGV[1]) == ARGV[2] then redis.call('DEL', ARGV[1]) return 1 end return 0";
const LEFT: &str = "return redis.call('PTTL', ARGV[1])";

#[tokio::test]
async fn a_string_a_run_wrote_is_borrowed_by_the_next_and_checked_by_its_content() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    // The run that takes the lock keeps the string; the one that releases it borrows it.
    assert_eq!(eval(&mut con, TAKE, &["lock:1", "t1", "60000"]).await, Value::Int(1));
    let before = borrowed(&gateway).await;
    assert_eq!(eval(&mut con, RELEASE, &["lock:1", "t1"]).await, Value::Int(1));
    assert_eq!(borrowed(&gateway).await, before + 1.0);
    assert_eq!(con.command(&["EXISTS", "lock:1"]).await, Value::Int(0));
    // Released: nothing kept of it, the next release loads it (absent) and answers 0.
    let release = tagged("released", RELEASE);
    assert_eq!(eval(&mut con, &release, &["lock:1", "t1"]).await, Value::Int(0));
    assert_eq!(misses(&gateway).await, 0.0);

    // Taken over underneath (a client's SET, which the working set does not see): the
    // borrowed token fails the check, and the release answers as the database holds it.
    assert_eq!(eval(&mut con, TAKE, &["lock:2", "t2", "60000"]).await, Value::Int(1));
    assert_eq!(
        con.command(&["SET", "lock:2", "theirs"]).await,
        Value::Simple("OK".into())
    );
    assert_eq!(eval(&mut con, RELEASE, &["lock:2", "t2"]).await, Value::Int(0));
    assert_eq!(misses(&gateway).await, 1.0);
    assert_eq!(con.command(&["GET", "lock:2"]).await, Value::bulk("theirs"));

    // Its TTL changed underneath: the check compares the expiry too.
    assert_eq!(eval(&mut con, TAKE, &["lock:3", "t3", "60000"]).await, Value::Int(1));
    assert_eq!(con.command(&["PEXPIRE", "lock:3", "500000"]).await, Value::Int(1));
    let left = eval(&mut con, LEFT, &["lock:3"]).await;
    assert!(matches!(left, Value::Int(ms) if ms > 60_000), "{left:?}");
    assert_eq!(misses(&gateway).await, 2.0);

    // Past its TTL: not borrowed (the batch's clock judges it), loaded and found gone.
    assert_eq!(eval(&mut con, TAKE, &["lock:4", "t4", "50"]).await, Value::Int(1));
    gone(&gateway, "lock:4").await;
    let release = tagged("expired", RELEASE);
    assert_eq!(eval(&mut con, &release, &["lock:4", "t4"]).await, Value::Int(0));
    assert_eq!(misses(&gateway).await, 2.0);
}

/// A command whose statements reach its keys before the batch commits (RENAME of a typed key
/// moves its elements in SQL) does not borrow them: taken as absent, the destination would be
/// written by the run before its check, which would then find it present and fail every run.
#[tokio::test]
async fn a_command_that_runs_its_own_statements_loads_its_keys() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let rename = "redis.call('HSET', KEYS[1], 'f', 'v') return redis.call('RENAME', KEYS[1], ARGV[1])";
    for n in 1..=4 {
        let to = format!("moved:{n}");
        assert_eq!(
            con.command(&["EVAL", rename, "1", "job", &to]).await,
            Value::Simple("OK".into())
        );
        assert_eq!(con.command(&["HGET", &to, "f"]).await, Value::bulk("v"));
    }
    assert_eq!(misses(&gateway).await, 0.0);
    // A later RENAME onto a key an earlier call of the run took as absent sends the check first.
    // (The hash is made outside the script: a write the run owes on it would send the check
    // ahead of the RENAME anyway.)
    let take_then_rename =
        "local was = redis.call('EXISTS', ARGV[1]) redis.call('RENAME', KEYS[1], ARGV[1]) return was";
    for n in 1..=4 {
        let to = format!("renamed:{n}");
        assert_eq!(con.command(&["HSET", "job", "f", "w"]).await, Value::Int(1));
        assert_eq!(
            con.command(&["EVAL", take_then_rename, "1", "job", &to]).await,
            Value::Int(0)
        );
        assert_eq!(con.command(&["HGET", &to, "f"]).await, Value::bulk("w"));
    }
    assert_eq!(misses(&gateway).await, 0.0);
    assert!(borrowed(&gateway).await >= 1.0, "the EXISTS took its key as absent");
}

/// Only a key's first use in a run borrows it: one the run loaded and a typed call changed in
/// the database since is loaded again, even where the call's site would take it as absent
/// (the batch's stale slot would answer otherwise than the database, and an absent check pass).
#[tokio::test]
async fn a_key_the_run_loaded_is_loaded_again_not_borrowed() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let empty_then_look = "redis.call('HDEL', ARGV[1], 'f') return redis.call('EXISTS', ARGV[2])";
    for n in 1..=2 {
        let hash = format!("h:{n}");
        assert_eq!(con.command(&["HSET", &hash, "f", "v"]).await, Value::Int(1));
        let fresh = format!("fresh:{n}");
        assert_eq!(eval(&mut con, empty_then_look, &[&hash, &fresh]).await, Value::Int(0));
    }
    assert_eq!(con.command(&["HSET", "h:3", "f", "v"]).await, Value::Int(1));
    assert_eq!(eval(&mut con, empty_then_look, &["h:3", "h:3"]).await, Value::Int(0));
    assert_eq!(misses(&gateway).await, 0.0);
}

/// A command whose statements go out with the batch's string changes so far (RENAME of a typed
/// key, on keys of its own) sends the check of every borrowed key first: a SET to a key taken
/// as absent would otherwise reach the database unlocked and make the check fail.
#[tokio::test]
async fn string_writes_to_borrowed_keys_wait_for_their_check() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let script = "local was = redis.call('EXISTS', ARGV[1]) redis.call('SET', ARGV[1], 'tok') \
        redis.call('RENAME', KEYS[1], KEYS[2]) return was";
    for n in 1..=4 {
        assert_eq!(con.command(&["HSET", "from", "f", "v"]).await, Value::Int(1));
        let lock = format!("lock:{n}");
        assert_eq!(
            con.command(&["EVAL", script, "2", "from", "to", &lock]).await,
            Value::Int(0)
        );
        assert_eq!(con.command(&["GET", &lock]).await, Value::bulk("tok"));
    }
    assert_eq!(misses(&gateway).await, 0.0);
    assert!(borrowed(&gateway).await >= 1.0, "lock:3 and lock:4 taken as absent");
}

/// A command naming one key twice borrows it once.
#[tokio::test]
async fn a_key_named_twice_is_borrowed_once() {
    let gateway = TestGateway::with_resp(&[]).await;
    let mut con = RawResp::connect(gateway.resp_addr()).await;
    let both = "return redis.call('MGET', ARGV[1], ARGV[1])";
    for key in ["none:1", "none:2"] {
        assert_eq!(
            eval(&mut con, both, &[key]).await,
            Value::Array(vec![Value::Nil, Value::Nil])
        );
    }
    assert_eq!(eval(&mut con, TAKE, &["lock:1", "t1", "60000"]).await, Value::Int(1));
    assert_eq!(
        eval(&mut con, both, &["lock:1"]).await,
        Value::Array(vec![Value::bulk("t1"), Value::bulk("t1")])
    );
    assert_eq!(misses(&gateway).await, 0.0);
}
