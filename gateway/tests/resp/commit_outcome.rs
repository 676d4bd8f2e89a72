//! A write's answer tells what became of it even when its COMMIT hangs. The cluster requires a
//! synchronous standby that does not exist, so every COMMIT waits, on the wire and unanswered,
//! until the test lifts the requirement: past `--resp-write-timeout` such a write is not
//! answered "cancelled" (the cancel would not undo it: PostgreSQL commits locally), but waits
//! for its COMMIT and answers what it did; past `--resp-commit-timeout` it answers that its
//! outcome is unknown. Checked for plain writes (group commit), MULTI/EXEC (shared and WATCHed)
//! and scripts.

use pgvs3_testkit as common;

use std::time::Duration;

use common::TestGateway;
use common::resp::{RawResp, Value, encode};
use tokio::io::AsyncWriteExt;

/// The cluster's requirement of a synchronous standby, held and lifted; `sql` is a superuser
/// connection to its `postgres` database.
struct SyncRep {
    url: String,
    sql: tokio_postgres::Client,
}

async fn connect(url: &str, application: &str) -> tokio_postgres::Client {
    let (client, connection) =
        tokio_postgres::connect(&format!("{url} application_name={application}"), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    client
}

impl SyncRep {
    async fn on(cluster: &common::ClusterAddress) -> SyncRep {
        let url = cluster.url("postgres");
        let sql = connect(&url, "test").await;
        sql.batch_execute("CREATE TABLE probe (n int)").await.unwrap();
        SyncRep { url, sql }
    }

    /// Makes every commit wait; returns once one does (the reload reaches every process
    /// asynchronously): a probe transaction per try, writing WAL, kept open once it waits.
    async fn hold(&self) -> tokio_postgres::Client {
        // Two statements: ALTER SYSTEM runs outside any transaction block.
        self.sql
            .batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'nosuch'")
            .await
            .unwrap();
        self.sql.batch_execute("SELECT pg_reload_conf()").await.unwrap();
        common::eventually(Duration::from_secs(20), "commits to wait for the standby", || async {
            let probe = connect(&self.url, "probe").await;
            let committed = tokio::time::timeout(
                Duration::from_millis(200),
                probe.execute("INSERT INTO probe VALUES (1)", &[]),
            )
            .await;
            if committed.is_ok() {
                return None;
            }
            (self.waiting("postgres").await > 0).then_some(probe)
        })
        .await
    }

    async fn release(&self) {
        self.sql
            .batch_execute("ALTER SYSTEM RESET synchronous_standby_names")
            .await
            .unwrap();
        self.sql.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    }

    /// Backends of `database` waiting in their COMMIT for the standby.
    async fn waiting(&self, database: &str) -> i64 {
        self.sql
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event = 'SyncRep'",
                &[&database],
            )
            .await
            .unwrap()
            .get("count")
    }

    /// Waits until a backend of `database` waits in its COMMIT.
    async fn commit_waits(&self, database: &str) {
        common::eventually(Duration::from_secs(20), "the write's COMMIT to wait", || async {
            (self.waiting(database).await > 0).then_some(())
        })
        .await;
    }
}

/// A gateway with RESP on database `name` of `cluster` (made here), with `extra` flags.
async fn gateway(
    cluster: &common::ClusterAddress,
    sql: &tokio_postgres::Client,
    name: &str,
    extra: &[&str],
) -> TestGateway {
    sql.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
    let mut args = vec!["--resp-addr", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    TestGateway::with_args(cluster.url(name), &args).await
}

/// One write and what it answers once its COMMIT completes: `commands` pipelined, the reply
/// of the last one `answer` (those before it `before`), and `check` then answering `state`.
struct Case {
    commands: &'static [&'static [&'static str]],
    before: &'static [&'static str],
    answer: Value,
    check: &'static [&'static str],
    state: Value,
}

const INCR_SCRIPT: &str = "return redis.call('INCR', KEYS[1])";

fn pipeline(commands: &[&[&str]]) -> Vec<u8> {
    commands
        .iter()
        .flat_map(|command| encode(&command.iter().map(|arg| arg.as_bytes()).collect::<Vec<_>>()))
        .collect()
}

/// With the one admission slot held (by a write whose COMMIT waits), other commands are
/// answered `BUSY`, but AUTH is answered: Redis serves AUTH while busy, and a client takes a
/// failed AUTH for wrong credentials. What differs goes to `wrong`.
async fn overloaded_auth(gateway: &TestGateway, wrong: &mut Vec<String>) {
    let mut other = RawResp::connect(gateway.resp_addr()).await;
    let get = other.command(&["GET", "s"]).await;
    if get != Value::Error("BUSY the server is overloaded, try again later".into()) {
        wrong.push(format!("GET while the slot is held: {get:?}"));
    }
    let auth = other
        .command(&["AUTH", common::ROOT_ACCESS_KEY, common::ROOT_SECRET_KEY])
        .await;
    if auth != Value::Simple("OK".into()) {
        wrong.push(format!("AUTH while overloaded: {auth:?}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_whose_commit_hangs_past_its_time_limit_answers_what_it_did() {
    let limit = Duration::from_secs(1);
    let cluster = common::cluster_of_its_own("resp-commit-wait");
    let syncrep = SyncRep::on(&cluster).await;
    let gateway = gateway(
        &cluster,
        &syncrep.sql,
        "waited",
        &[
            "--resp-write-timeout",
            "1s",
            "--resp-commit-timeout",
            "60s",
            "--resp-max-active",
            "1",
        ],
    )
    .await;
    let mut check = RawResp::connect(gateway.resp_addr()).await;
    // The bucket, the script and the keys' first writes, before any commit waits.
    assert_eq!(check.command(&["EVAL", INCR_SCRIPT, "1", "warm"]).await, Value::Int(1));
    let ok = || Value::Simple("OK".into());
    let cases = [
        Case {
            commands: &[&["SET", "s", "v"]],
            before: &[],
            answer: ok(),
            check: &["GET", "s"],
            state: Value::bulk("v"),
        },
        Case {
            commands: &[&["INCR", "n"]],
            before: &[],
            answer: Value::Int(1),
            check: &["GET", "n"],
            state: Value::bulk("1"),
        },
        Case {
            commands: &[&["LPUSH", "l", "a"]],
            before: &[],
            answer: Value::Int(1),
            check: &["LLEN", "l"],
            state: Value::Int(1),
        },
        // Shared with other connections' writes (group commit).
        Case {
            commands: &[&["MULTI"], &["INCR", "m"], &["INCR", "m"], &["EXEC"]],
            before: &["OK", "QUEUED", "QUEUED"],
            answer: Value::Array(vec![Value::Int(1), Value::Int(2)]),
            check: &["GET", "m"],
            state: Value::bulk("2"),
        },
        // A transaction of its own.
        Case {
            commands: &[&["WATCH", "w"], &["MULTI"], &["INCR", "w"], &["EXEC"]],
            before: &["OK", "OK", "QUEUED"],
            answer: Value::Array(vec![Value::Int(1)]),
            check: &["GET", "w"],
            state: Value::bulk("1"),
        },
        Case {
            commands: &[&["EVAL", INCR_SCRIPT, "1", "e"]],
            before: &[],
            answer: Value::Int(1),
            check: &["GET", "e"],
            state: Value::bulk("1"),
        },
    ];
    // Every case is tried, and what went wrong told together.
    let mut wrong = Vec::new();
    for case in cases {
        let probe = syncrep.hold().await;
        let mut raw = RawResp::connect(gateway.resp_addr()).await;
        let sent = tokio::time::Instant::now();
        raw.send(&pipeline(case.commands)).await;
        syncrep.commit_waits("waited").await;
        if case.check[1] == "s" {
            overloaded_auth(&gateway, &mut wrong).await;
        }
        // Past the write time limit, the COMMIT still waiting.
        tokio::time::sleep_until(sent + limit + Duration::from_millis(500)).await;
        syncrep.release().await;
        // A pipeline's replies go out together.
        for status in case.before {
            assert_eq!(
                raw.reply().await,
                Some(Value::Simple((*status).into())),
                "{:?}",
                case.commands
            );
        }
        let answer = raw.reply().await.expect("an answer");
        let state = check.command(case.check).await;
        if (&answer, &state) != (&case.answer, &case.state) {
            wrong.push(format!("{:?}: answered {answer:?}, then {state:?}", case.commands));
        }
        drop(probe);
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_whose_commit_hangs_past_the_commit_limit_answers_outcome_unknown() {
    let cluster = common::cluster_of_its_own("resp-commit-unknown");
    let syncrep = SyncRep::on(&cluster).await;
    let gateway = gateway(
        &cluster,
        &syncrep.sql,
        "unknown",
        &["--resp-write-timeout", "1s", "--resp-commit-timeout", "1s"],
    )
    .await;
    let mut check = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(check.command(&["EVAL", INCR_SCRIPT, "1", "warm"]).await, Value::Int(1));
    let unknown = "ERR outcome unknown: the write's COMMIT was sent but it had no answer within 1 s \
                   (--resp-commit-timeout); it may or may not have been applied";
    let multi: &[&[&str]] = &[&["MULTI"], &["INCR", "m"], &["EXEC"]];
    let mut wrong = Vec::new();
    // The script last: one whose COMMIT hangs once had no bound at all.
    for (commands, key) in [
        (&[&["INCR", "n"][..]][..], "n"),
        (multi, "m"),
        (&[&["EVAL", INCR_SCRIPT, "1", "e"][..]][..], "e"),
    ] {
        let probe = syncrep.hold().await;
        let mut raw = RawResp::connect(gateway.resp_addr()).await;
        raw.send(&pipeline(commands)).await;
        syncrep.commit_waits("unknown").await;
        let mut answer = raw.reply().await.expect("an answer");
        if commands == multi {
            assert_eq!(raw.reply().await, Some(Value::Simple("QUEUED".into())));
            answer = match raw.reply().await {
                Some(Value::Array(mut replies)) if replies.len() == 1 => replies.remove(0),
                other => panic!("EXEC: {other:?}"),
            };
        }
        if answer != Value::Error(unknown.into()) {
            wrong.push(format!("{commands:?}: {answer:?}"));
        }
        syncrep.release().await;
        // Unknown, and rightly not "cancelled": the COMMIT the gateway gave up on landed.
        common::eventually(Duration::from_secs(20), "the write to land", || async {
            let mut check = RawResp::connect(gateway.resp_addr()).await;
            (check.command(&["GET", key]).await == Value::bulk("1")).then_some(())
        })
        .await;
        drop(probe);
    }
    // The EXEC whose transaction failed as a whole is counted as failed.
    let exec =
        |status: &str| format!("pgvs3_requests_total{{operation=\"exec\",protocol=\"resp\",status=\"{status}\"}}");
    let counted = (gateway.metric(&exec("error")).await, gateway.metric(&exec("ok")).await);
    if counted != (Some(1.0), None) {
        wrong.push(format!("EXEC counted (error, ok): {counted:?}"));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// A client gone while its write's COMMIT waits: the COMMIT's outcome is waited for, not cut,
/// so this gateway's tracking clients are still told of the keys it changed; the commands it
/// queued after it never start. Before, the reset dropped the batch mid-COMMIT: the write
/// landed, and the tracking client, never told, kept the old value cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gone_client_s_write_whose_commit_went_out_is_finished_and_nothing_after_starts() {
    let cluster = common::cluster_of_its_own("resp-gone-commit");
    let syncrep = SyncRep::on(&cluster).await;
    let gateway = gateway(&cluster, &syncrep.sql, "gone", &[]).await;
    let mut check = RawResp::connect(gateway.resp_addr()).await;
    assert_eq!(check.command(&["EVAL", INCR_SCRIPT, "1", "t"]).await, Value::Int(1));
    let mut tracker = RawResp::connect(gateway.resp_addr()).await;
    assert!(matches!(tracker.command(&["HELLO", "3"]).await, Value::Map(_)));
    assert_eq!(
        tracker.command(&["CLIENT", "TRACKING", "ON"]).await,
        Value::Simple("OK".into())
    );
    assert_eq!(tracker.command(&["GET", "t"]).await, Value::bulk("1"));
    let probe = syncrep.hold().await;
    let mut gone = tokio::net::TcpStream::connect(gateway.resp_addr()).await.unwrap();
    // A reply it leaves unread makes its close a reset: the gateway's next read fails at once.
    gone.write_all(&pipeline(&[&["PING"]])).await.unwrap();
    gone.peek(&mut [0u8; 1]).await.unwrap();
    gone.write_all(&pipeline(&[&["EVAL", INCR_SCRIPT, "1", "t"], &["SET", "after", "v"]]))
        .await
        .unwrap();
    syncrep.commit_waits("gone").await;
    drop(gone);
    syncrep.release().await;
    assert_eq!(
        tracker.reply().await,
        Some(Value::Push(vec![
            Value::bulk("invalidate"),
            Value::Array(vec![Value::bulk("t")])
        ]))
    );
    assert_eq!(check.command(&["GET", "t"]).await, Value::bulk("2"));
    assert_eq!(check.command(&["EXISTS", "after"]).await, Value::Int(0));
    drop(probe);
}
