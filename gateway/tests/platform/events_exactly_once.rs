//! Exactly one job per committed event, under the faults that break "after the write"
//! notification systems: the gateway killed with SIGKILL after its commit and before its answer,
//! a client cutting its upload off mid-body, writes refused by a quota or a precondition,
//! concurrent overwrites of one key (one job per version, the `sequencer` in commit order, the
//! order read from PostgreSQL's WAL), multipart uploads (one job, at completion), and the jobs
//! seen by a worker on another gateway and by a gateway on a hot standby after replay.

use pgvs3_testkit as common;

use std::process::Stdio;
use std::time::{Duration, SystemTime};

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketVersioningStatus, CompletedMultipartUpload, CompletedPart};
use common::events::{configure, drain, event, queue_rule};
use common::ojs::Ojs;
use common::raw::{Signer, sha256_hex};
use common::s3::{http_status, put_object, put_request, set_versioning};
use common::{ROOT_ACCESS_KEY, ROOT_SECRET_KEY, TestGateway, eventually};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

async fn connect(url: &str, application_name: &str) -> tokio_postgres::Client {
    let url = format!("{url} application_name={application_name}");
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// `pgvs3 serve` as a process on `database_url` (ephemeral ports, RESP off); the child and its
/// S3 address, read from what it prints.
async fn serve_process(database_url: &str) -> (tokio::process::Child, std::net::SocketAddr) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_pgvs3"))
        .args([
            "serve",
            "--s3-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
            "--ojs-addr",
            "127.0.0.1:0",
            "--resp-addr",
            "off",
            "--maintenance-interval",
            "1h",
            "--master-key",
            common::MASTER_KEY,
            "--database-url",
            database_url,
        ])
        .env("PGVS3_ROOT_ACCESS_KEY", ROOT_ACCESS_KEY)
        .env("PGVS3_ROOT_SECRET_KEY", ROOT_SECRET_KEY)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let endpoint = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("serve printed its endpoint");
            if line.starts_with("pgvs3 S3 endpoint:") {
                return line;
            }
        }
    })
    .await
    .expect("serve starts within a minute");
    let addr = endpoint
        .split_whitespace()
        .find_map(|word| word.strip_prefix("http://"))
        .unwrap()
        .trim_end_matches(['/', ')'])
        .parse()
        .unwrap();
    // The rest of its output is not read; keep the pipe open so it never blocks on a write.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, addr)
}

/// A signed PUT written to a fresh connection, its answer left unread.
async fn unanswered_put(addr: std::net::SocketAddr, path: &str, body: &[u8]) -> tokio::net::TcpStream {
    let signer = Signer {
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: ROOT_SECRET_KEY.into(),
        host: addr.to_string(),
    };
    let headers = signer.sign("PUT", path, &[], &sha256_hex(body), SystemTime::now());
    let mut request = format!("PUT {path} HTTP/1.1\r\ncontent-length: {}\r\n", body.len());
    for (name, value) in &headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    stream
}

/// Backends of this database waiting for a synchronous standby's acknowledgement of their
/// commit (the commit record is flushed; the transaction is not visible yet) while holding locks
/// on both `relations`: a transaction that wrote to all of them.
async fn waiting_commits(sql: &tokio_postgres::Client, relations: &[&str]) -> i64 {
    sql.query_one(
        "SELECT count(*) FROM pg_stat_activity a
          WHERE a.datname = current_database() AND a.wait_event = 'SyncRep'
            AND (SELECT count(DISTINCT l.relation) FROM pg_locks l
                  WHERE l.pid = a.pid AND l.relation = ANY (SELECT to_regclass(r)::oid FROM unnest($1::text[]) r))
                = cardinality($1::text[])",
        &[&relations],
    )
    .await
    .unwrap()
    .get("count")
}

/// The gateway dies (SIGKILL) after its PUT's commit record is flushed and before the commit
/// returned to it, so before it could answer: the object and its one job are there once the
/// commit completes, and a new gateway's worker gets exactly that job. The window is made
/// deterministic the honest way: the cluster requires a synchronous standby that does not
/// exist, so every commit waits, flushed, for an acknowledgement until the test lifts the
/// requirement; nothing in the gateway knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_killed_between_commit_and_answer_leaves_exactly_one_job() {
    let cluster = common::cluster_of_its_own("events-kill");
    let url = cluster.url("postgres");
    let (mut child, addr) = serve_process(&url).await;
    let s3 = common::s3_client_at(addr, ROOT_ACCESS_KEY, ROOT_SECRET_KEY);
    s3.create_bucket().bucket("landing").send().await.unwrap();
    configure(
        &s3,
        "landing",
        vec![queue_rule("all", "after-kill", &["s3:ObjectCreated:*"], "", "")],
    )
    .await;
    let sql = connect(&url, "test").await;
    sql.batch_execute("CREATE TABLE probe (n int)").await.unwrap();
    // Two statements: ALTER SYSTEM runs outside any transaction block.
    sql.batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
        .await
        .unwrap();
    sql.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    // The requirement is in force once a commit waits on it (the reload reaches every process
    // asynchronously): a probe transaction per try, writing WAL (a commit that wrote none does
    // not wait), kept open once it waits.
    let _waiting_probe = eventually(Duration::from_secs(20), "commits to wait for the standby", || async {
        let probe = connect(&url, "probe").await;
        let committed = tokio::time::timeout(
            Duration::from_millis(200),
            probe.execute("INSERT INTO probe VALUES (1)", &[]),
        )
        .await;
        if committed.is_ok() {
            return None;
        }
        let waiting: i64 = sql
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'probe' AND wait_event = 'SyncRep'",
                &[],
            )
            .await
            .unwrap()
            .get("count");
        (waiting > 0).then_some(probe)
    })
    .await;
    let mut stream = unanswered_put(addr, "/landing/report.csv", b"a,b\n1,2\n").await;
    eventually(
        Duration::from_secs(20),
        "the PUT's transaction (object and job) to wait in its commit",
        || async { (waiting_commits(&sql, &["s3p.objects", "ojs.jobs"]).await == 1).then_some(()) },
    )
    .await;
    let visible: i64 = sql
        .query_one("SELECT count(*) FROM s3p.objects WHERE key = 'report.csv'", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(visible, 0, "the commit has not returned yet");
    common::faults::kill9(child.id().unwrap() as i32);
    child.wait().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the dead gateway's connection closes");
    assert!(
        answer.is_empty(),
        "the client got no answer: {}",
        String::from_utf8_lossy(&answer)
    );

    sql.batch_execute("ALTER SYSTEM RESET synchronous_standby_names")
        .await
        .unwrap();
    sql.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    eventually(Duration::from_secs(20), "the waiting commit to complete", || async {
        let present: i64 = sql
            .query_one("SELECT count(*) FROM s3p.objects WHERE key = 'report.csv'", &[])
            .await
            .unwrap()
            .get("count");
        (present == 1).then_some(())
    })
    .await;
    let after = TestGateway::on(url).await;
    let jobs = drain(&Ojs::of(&after), "after-kill").await;
    let events: Vec<_> = jobs.iter().map(event).collect();
    assert_eq!(events, vec![("s3.object.created", "ObjectCreated:Put", "report.csv")]);
    after.stop().await;
}

/// A PUT cut off mid-body, one refused by the bucket's quota and one refused by its
/// precondition commit nothing, so enqueue nothing; the PUT after them enqueues its one job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_that_do_not_commit_enqueue_nothing() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    let ojs = Ojs::of(&gw);
    s3.create_bucket().bucket("capped").send().await.unwrap();
    configure(
        s3,
        "capped",
        vec![queue_rule("all", "uploads", &["s3:ObjectCreated:*"], "", "")],
    )
    .await;
    gw.gateway
        .store
        .catalog()
        .set_bucket_quota("capped", Some(600_000), None)
        .await
        .unwrap();

    // 1 MiB announced, 300 KiB sent, then the client stops sending (FIN): the gateway's answer
    // (or its closing the connection) comes after whatever it did with the request.
    let signer = Signer {
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: ROOT_SECRET_KEY.into(),
        host: gw.gateway.s3_addr.to_string(),
    };
    let headers = signer.sign("PUT", "/capped/cut", &[], "UNSIGNED-PAYLOAD", SystemTime::now());
    let mut stream = tokio::net::TcpStream::connect(gw.gateway.s3_addr).await.unwrap();
    let mut request = format!("PUT /capped/cut HTTP/1.1\r\ncontent-length: {}\r\n", 1 << 20);
    for (name, value) in &headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.write_all(&common::noise(300 << 10, 1)).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .expect("the gateway is done with the cut request within 30 s");
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");

    let over = put_request(s3, "capped", "too-big", common::noise(700_000, 2))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        over.as_service_error().and_then(|e| e.meta().code()),
        Some("XMinioAdminBucketQuotaExceeded")
    );
    put_object(s3, "capped", "kept", b"1").await;
    let refused = put_request(s3, "capped", "kept", b"2")
        .if_none_match("*")
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&refused), 412);
    put_object(s3, "capped", "last", b"3").await;

    let jobs = drain(&ojs, "uploads").await;
    let keys: Vec<_> = jobs.iter().map(|job| event(job).2).collect();
    assert_eq!(keys, vec!["kept", "last"]);
    for key in ["cut", "too-big"] {
        assert!(
            s3.head_object().bucket("capped").key(key).send().await.is_err(),
            "{key}"
        );
    }
    gw.stop().await;
}

/// 8 clients each overwrite one key 10 times in a versioned bucket: 80 versions, 80 jobs, one
/// per version, and ordered by `sequencer` they are in the order their transactions committed,
/// as PostgreSQL's WAL records the commits (pg_walinspect), the last one being the version a
/// GET reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_overwrites_enqueue_one_job_per_version_in_commit_order() {
    const CLIENTS: usize = 8;
    const PUTS: usize = 10;
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("hot").send().await.unwrap();
    set_versioning(s3, "hot", BucketVersioningStatus::Enabled).await;
    configure(
        s3,
        "hot",
        vec![queue_rule("all", "overwrites", &["s3:ObjectCreated:*"], "", "")],
    )
    .await;
    let sql = gw.sql().await;
    sql.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        .await
        .unwrap();
    let start: String = sql
        .query_one("SELECT pg_current_wal_lsn()::text AS lsn", &[])
        .await
        .unwrap()
        .get("lsn");
    let mut writers = tokio::task::JoinSet::new();
    for client in 0..CLIENTS {
        let s3 = s3.clone();
        writers.spawn(async move {
            let mut versions = Vec::new();
            for put in 0..PUTS {
                let written = put_object(&s3, "hot", "shared.csv", format!("{client},{put}\n")).await;
                versions.push(written.version_id.unwrap());
            }
            versions
        });
    }
    let mut written: Vec<String> = writers.join_all().await.into_iter().flatten().collect();
    written.sort();

    // Each job's writing transaction (the xmin of its row: the job was inserted by the PUT's
    // transaction) and the position of that transaction's commit record in the WAL.
    let rows = sql
        .query(
            "WITH commits AS (
                 SELECT xid, row_number() OVER (ORDER BY start_lsn) AS position
                   FROM pg_get_wal_records_info_till_end_of_wal($1::text::pg_lsn)
                  WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT')
             SELECT c.position, j.envelope -> 'args' -> 0 AS args
               FROM ojs.jobs j LEFT JOIN commits c ON c.xid = j.xmin
              WHERE j.queue = 'overwrites'",
            &[&start],
        )
        .await
        .unwrap();
    let mut jobs: Vec<(i64, Value)> = rows
        .iter()
        .map(|row| {
            let position: Option<i64> = row.get("position");
            (
                position.expect("the job's transaction committed in the WAL read"),
                row.get("args"),
            )
        })
        .collect();
    assert_eq!(jobs.len(), CLIENTS * PUTS, "one job per committed PUT");
    let mut versions: Vec<String> = jobs
        .iter()
        .map(|(_, record)| record["s3"]["object"]["versionId"].as_str().unwrap().to_owned())
        .collect();
    versions.sort();
    assert_eq!(versions, written, "one job per version, each version once");
    jobs.sort_by_key(|(position, _)| *position);
    let sequencers: Vec<&str> = jobs
        .iter()
        .map(|(_, record)| record["s3"]["object"]["sequencer"].as_str().unwrap())
        .collect();
    for pair in sequencers.windows(2) {
        assert!(pair[0] < pair[1], "sequencers in commit order: {sequencers:?}");
    }
    let current = s3.get_object().bucket("hot").key("shared.csv").send().await.unwrap();
    assert_eq!(
        current.version_id(),
        jobs.last().unwrap().1["s3"]["object"]["versionId"].as_str()
    );
    gw.stop().await;
}

/// Parts and an aborted upload raise nothing; the completion raises one job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_multipart_upload_enqueues_one_job_at_completion() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    let ojs = Ojs::of(&gw);
    s3.create_bucket().bucket("parts").send().await.unwrap();
    configure(
        s3,
        "parts",
        vec![queue_rule(
            "all",
            "multipart",
            &["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
            "",
            "",
        )],
    )
    .await;
    let part_size = 5 << 20;
    let mut uploads = Vec::new();
    for key in ["kept.bin", "abandoned.bin"] {
        let upload = s3
            .create_multipart_upload()
            .bucket("parts")
            .key(key)
            .send()
            .await
            .unwrap();
        let id = upload.upload_id().unwrap().to_owned();
        let mut parts = Vec::new();
        for number in 1..=2 {
            let body = common::noise(if number == 1 { part_size } else { 1000 }, number as u64);
            let part = s3
                .upload_part()
                .bucket("parts")
                .key(key)
                .upload_id(&id)
                .part_number(number)
                .body(ByteStream::from(body))
                .send()
                .await
                .unwrap();
            parts.push(
                CompletedPart::builder()
                    .part_number(number)
                    .e_tag(part.e_tag().unwrap())
                    .build(),
            );
        }
        uploads.push((key, id, parts));
    }
    assert!(drain(&ojs, "multipart").await.is_empty(), "parts raise nothing");
    let (_, abandoned, _) = &uploads[1];
    s3.abort_multipart_upload()
        .bucket("parts")
        .key("abandoned.bin")
        .upload_id(abandoned)
        .send()
        .await
        .unwrap();
    assert!(drain(&ojs, "multipart").await.is_empty(), "an abort raises nothing");
    let (key, id, parts) = uploads.swap_remove(0);
    let completed = s3
        .complete_multipart_upload()
        .bucket("parts")
        .key(key)
        .upload_id(&id)
        .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(parts)).build())
        .send()
        .await
        .unwrap();
    let jobs = drain(&ojs, "multipart").await;
    let events: Vec<_> = jobs.iter().map(event).collect();
    assert_eq!(
        events,
        vec![("s3.object.created", "ObjectCreated:CompleteMultipartUpload", "kept.bin")]
    );
    let object = &jobs[0]["args"][0]["s3"]["object"];
    assert_eq!(object["size"], part_size + 1000);
    assert_eq!(
        format!("\"{}\"", object["eTag"].as_str().unwrap()),
        completed.e_tag().unwrap()
    );
    gw.stop().await;
}

/// The job a PUT on one gateway enqueued is fetched and acknowledged by a worker on another
/// gateway of the database, and a gateway on a hot standby shows it, then its completion, once
/// replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_reach_a_worker_on_another_gateway_and_a_standby_gateway_after_replay() {
    let (primary, standby) = common::primary_and_standby("events");
    let writer = TestGateway::on(primary.url("postgres")).await;
    let worker = TestGateway::on(primary.url("postgres")).await;
    let reader = TestGateway::with_args(standby.url("postgres"), &["--require-role", "standby"]).await;
    let s3 = &writer.client;
    s3.create_bucket().bucket("shared").send().await.unwrap();
    configure(
        s3,
        "shared",
        vec![queue_rule("csv", "csv-to-parquet", &["s3:ObjectCreated:*"], "", ".csv")],
    )
    .await;
    put_object(s3, "shared", "in/day 1.csv", b"a,b\n1,2\n").await;
    let id: String = writer
        .sql()
        .await
        .query_one("SELECT id FROM ojs.jobs WHERE queue = 'csv-to-parquet'", &[])
        .await
        .unwrap()
        .get("id");

    let on_standby = Ojs::of(&reader);
    let state_on_standby = |wanted: &'static str| {
        let on_standby = on_standby.clone();
        let id = id.clone();
        async move {
            eventually(Duration::from_secs(30), "the standby to show the job", || async {
                let (status, body) = on_standby.get(&format!("/ojs/v1/jobs/{id}")).await;
                (status == 200 && body["job"]["state"] == wanted).then_some(body)
            })
            .await
        }
    };
    let replayed = state_on_standby("available").await;
    assert_eq!(
        event(&replayed["job"]),
        ("s3.object.created", "ObjectCreated:Put", "in/day+1.csv")
    );

    let elsewhere = Ojs::of(&worker);
    let fetched = elsewhere
        .fetch("csv-to-parquet", "worker-b")
        .await
        .expect("the other gateway's worker gets the job");
    assert_eq!(fetched["id"], id.as_str());
    let (status, acked) = elsewhere
        .post(
            &format!("/ojs/v1/jobs/{id}/ack"),
            serde_json::json!({ "result": { "parquet": "out/day 1.parquet" } }),
        )
        .await;
    assert_eq!(status, 200, "{acked}");
    assert!(
        Ojs::of(&writer).fetch("csv-to-parquet", "worker-a").await.is_none(),
        "one job, taken once"
    );
    let (_, read) = Ojs::of(&writer).get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(read["job"]["state"], "completed");
    state_on_standby("completed").await;
    for gateway in [writer, worker, reader] {
        gateway.stop().await;
    }
}
