//! Gateways on a primary and on its hot standby: the standby gateway serves reads, refuses
//! writes with S3's AccessDenied, reports its role, and accepts writes after a promotion
//! without a restart.

use pgvs3_testkit as common;

use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use common::s3::{put_object, put_request};
use common::{TestGateway, eventually, noise, primary_and_standby};

async fn admin_get(gw: &TestGateway, path: &str) -> common::raw::RawResponse {
    let host = gw.gateway.admin_addr.to_string();
    common::raw::send(gw.gateway.admin_addr, "GET", path, &[("host".into(), host)], b"").await
}

#[tokio::test]
async fn a_standby_gateway_serves_reads_refuses_writes_and_takes_writes_after_promotion() {
    let (primary, standby) = primary_and_standby("fleet");
    let resp_on = ["--resp-addr", "127.0.0.1:0"];
    let writer = TestGateway::with_args(primary.url("postgres"), &resp_on).await;
    let reader = TestGateway::with_args(
        standby.url("postgres"),
        &["--require-role", "standby", "--resp-addr", "127.0.0.1:0"],
    )
    .await;

    writer.client.create_bucket().bucket("shared").send().await.unwrap();
    let small = noise(1000, 1);
    let large = noise(300_000, 2);
    for (key, body) in [("small", &small), ("large", &large)] {
        put_object(&writer.client, "shared", key, body.clone()).await;
    }

    // Reads on the standby see the primary's writes once replayed.
    for (key, body) in [("small", &small), ("large", &large)] {
        let got = eventually(Duration::from_secs(20), "replication of the object", || async {
            let out = reader.client.get_object().bucket("shared").key(key).send().await.ok()?;
            Some(out.body.collect().await.ok()?.into_bytes())
        })
        .await;
        assert!(got.as_ref() == body.as_slice(), "{key}");
    }
    let listed = reader.client.list_objects_v2().bucket("shared").send().await.unwrap();
    assert_eq!(listed.key_count(), Some(2));

    // Writes are refused with S3's error, and nothing hangs or half-writes.
    let refused = put_request(&reader.client, "shared", "new", b"x").send().await;
    let refused = refused.unwrap_err().into_service_error();
    assert_eq!(refused.meta().code(), Some("AccessDenied"));
    assert!(
        refused.meta().message().unwrap_or_default().contains("read-only"),
        "{refused:?}"
    );
    let big = put_request(&reader.client, "shared", "new-big", large.clone())
        .send()
        .await;
    assert_eq!(
        big.unwrap_err().into_service_error().meta().code(),
        Some("AccessDenied")
    );
    let delete = reader.client.delete_object().bucket("shared").key("small").send().await;
    assert_eq!(
        delete.unwrap_err().into_service_error().meta().code(),
        Some("AccessDenied")
    );
    let create = reader.client.create_bucket().bucket("another").send().await;
    assert_eq!(
        create.unwrap_err().into_service_error().meta().code(),
        Some("AccessDenied")
    );

    // RESP on the standby: reads replay from the primary, writes get Redis's READONLY.
    let mut primary_resp = common::resp::RawResp::connect(writer.resp_addr()).await;
    assert_eq!(
        primary_resp.command(&["SET", "greeting", "hello"]).await,
        common::resp::Value::Simple("OK".into())
    );
    let mut standby_resp = common::resp::RawResp::connect(reader.resp_addr()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while standby_resp.command(&["GET", "greeting"]).await != common::resp::Value::bulk("hello") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "replication of the RESP key within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = standby_resp.command(&["SET", "greeting", "changed"]).await;
    assert_eq!(refused.error(), "READONLY You can't write against a read only replica.");
    // A script on the standby runs as EVAL_RO would: it reads, and its writes are refused.
    let read = "return redis.call('GET', KEYS[1])";
    assert_eq!(
        standby_resp.command(&["EVAL", read, "1", "greeting"]).await,
        common::resp::Value::bulk("hello")
    );
    let write = "return redis.call('SET', KEYS[1], 'by script')";
    let refused = standby_resp.command(&["EVAL", write, "1", "greeting"]).await;
    assert!(
        refused
            .error()
            .starts_with("READONLY You can't write against a read only replica. script: "),
        "{refused:?}"
    );

    // OJS on the standby: a write is refused as retryable, since a promotion (or the client's
    // next gateway) takes it.
    let ojs = common::ojs::Ojs::of(&reader);
    let job = serde_json::json!({ "type": "fleet.task", "args": [] });
    let (status, refused) = ojs.post("/ojs/v1/jobs", job.clone()).await;
    assert_eq!(status, 503, "{refused}");
    assert_eq!(refused["error"]["code"], "read_only", "{refused}");
    assert_eq!(refused["error"]["retryable"], true, "{refused}");

    let ready = admin_get(&reader, "/readyz").await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert!(ready.body.contains(r#""role":"standby""#), "{}", ready.body);
    let metrics = admin_get(&reader, "/metrics").await;
    assert!(
        metrics.body.contains("pgvs3_replication_lag_seconds"),
        "{}",
        metrics.body
    );
    let primary_ready = admin_get(&writer, "/readyz").await;
    assert!(primary_ready.body.contains(r#""role":"primary""#));

    // Promote the standby: the same gateway takes writes without a restart, and since it was
    // required to sit on a standby it now reports itself unready.
    let sql = reader.sql().await;
    sql.execute("SELECT pg_promote()", &[]).await.unwrap();
    eventually(Duration::from_secs(30), "writes after promotion", || async {
        let put = reader
            .client
            .put_object()
            .bucket("shared")
            .key("after")
            .body(ByteStream::from_static(b"promoted"));
        put.send().await.ok()
    })
    .await;
    let ready = admin_get(&reader, "/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert!(ready.body.contains(r#""role":"primary""#), "{}", ready.body);
    // The same OJS write the standby refused as retryable is taken now.
    let (status, taken) = ojs.post("/ojs/v1/jobs", job).await;
    assert_eq!(status, 201, "{taken}");
    // RESP on the same gateway takes writes too, on the connection it already had.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while standby_resp.command(&["SET", "greeting", "promoted"]).await != common::resp::Value::Simple("OK".into()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "RESP writes after promotion within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        standby_resp.command(&["GET", "greeting"]).await,
        common::resp::Value::bulk("promoted")
    );

    reader.stop().await;
    writer.stop().await;
}

#[tokio::test]
async fn lost_database_connections_fail_cleanly_and_are_replaced() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("loss").send().await.unwrap();
    let body = noise(200_000, 3);
    put_object(&gw.client, "loss", "obj", body.clone()).await;
    // Warm the pool so several connections exist, then cut every one of them, as a restart or
    // failover of PostgreSQL would.
    let reads = (0..8).map(|_| gw.client.get_object().bucket("loss").key("obj").send());
    for read in futures::future::join_all(reads).await {
        read.unwrap();
    }
    let sql = gw.sql().await;
    let cut: i64 = sql
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
              WHERE datname = current_database() AND application_name = 'pgvs3'",
            &[],
        )
        .await
        .unwrap()
        .get("count");
    assert!(cut >= 1, "the gateway's connections were found");

    // Each request either succeeds on a fresh connection or fails with a retryable 503 —
    // never a 500, never a hang — and the gateway recovers without a restart.
    let signer = common::raw::Signer {
        access_key: common::ROOT_ACCESS_KEY.into(),
        secret_key: common::ROOT_SECRET_KEY.into(),
        host: gw.gateway.s3_addr.to_string(),
    };
    let mut statuses = Vec::new();
    for _ in 0..20 {
        let headers = signer.sign(
            "GET",
            "/loss/obj",
            &[],
            &common::raw::sha256_hex(b""),
            std::time::SystemTime::now(),
        );
        let response = common::raw::send(gw.gateway.s3_addr, "GET", "/loss/obj", &headers, b"").await;
        assert!(
            matches!(response.status, 200 | 503),
            "{} {}",
            response.status,
            response.body
        );
        if response.status == 200 {
            assert_eq!(response.header("content-length"), Some(body.len().to_string().as_str()));
        }
        statuses.push(response.status);
    }
    assert_eq!(statuses.last(), Some(&200), "recovered: {statuses:?}");
    let out = gw.client.get_object().bucket("loss").key("obj").send().await.unwrap();
    assert!(out.body.collect().await.unwrap().into_bytes().as_ref() == body.as_slice());
    gw.stop().await;
}

#[tokio::test]
async fn a_standby_too_far_behind_refuses_reads_until_replay_catches_up() {
    let (primary, standby) = primary_and_standby("lag");
    let writer = TestGateway::with_args(primary.url("postgres"), &["--resp-addr", "127.0.0.1:0"]).await;
    let reader = TestGateway::with_args(
        standby.url("postgres"),
        &["--max-replication-lag", "1s", "--resp-addr", "127.0.0.1:0"],
    )
    .await;
    // Written before the object below, so it has replayed once the object has.
    let mut primary_resp = common::resp::RawResp::connect(writer.resp_addr()).await;
    assert_eq!(
        primary_resp.command(&["SET", "first", "v"]).await,
        common::resp::Value::Simple("OK".into())
    );
    writer.client.create_bucket().bucket("lagging").send().await.unwrap();
    let put = |key: &'static str| put_request(&writer.client, "lagging", key, b"v").send();
    put("first").await.unwrap();
    let read = || async {
        match reader.client.get_object().bucket("lagging").key("first").send().await {
            Ok(_) => 200,
            Err(err) => err.raw_response().map(|r| r.status().as_u16()).unwrap_or(0),
        }
    };
    eventually(Duration::from_secs(30), "the standby to serve the object", || async {
        (read().await == 200).then_some(())
    })
    .await;

    let replay = standby.pause_replay().await;
    put("second").await.unwrap();
    eventually(Duration::from_secs(30), "reads to be refused", || async {
        (read().await == 503).then_some(())
    })
    .await;
    let err = reader.client.head_bucket().bucket("lagging").send().await.unwrap_err();
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(503));
    // RESP refuses reads the way a Redis replica with replica-serve-stale-data off does, while
    // commands that touch no data still answer.
    let mut resp = common::resp::RawResp::connect(reader.resp_addr()).await;
    let stale = resp.command(&["GET", "first"]).await;
    assert!(stale.error().starts_with("MASTERDOWN "), "{stale:?}");
    assert_eq!(
        resp.command(&["PING"]).await,
        common::resp::Value::Simple("PONG".into())
    );
    let ready = admin_get(&reader, "/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert!(
        ready.body.contains("\"max_replication_lag_seconds\":1.0"),
        "{}",
        ready.body
    );

    replay.resume().await;
    eventually(Duration::from_secs(30), "reads once replay caught up", || async {
        (read().await == 200).then_some(())
    })
    .await;
    assert_eq!(admin_get(&reader, "/readyz").await.status, 200);
    assert_eq!(resp.command(&["GET", "first"]).await, common::resp::Value::bulk("v"));
    reader.stop().await;
    writer.stop().await;
}

/// A standby cut off from its primary receives nothing, so it has nothing unreplayed: it used
/// to report zero lag and serve reads of any age. Its lag now counts from the moment it was last
/// seen streaming.
#[tokio::test]
async fn a_standby_cut_off_from_its_primary_refuses_reads_beyond_the_lag_limit() {
    let (primary, standby) = primary_and_standby("cutoff");
    let writer = TestGateway::on(primary.url("postgres")).await;
    let reader = TestGateway::with_args(
        standby.url("postgres"),
        &["--max-replication-lag", "1s", "--resp-addr", "127.0.0.1:0"],
    )
    .await;
    writer.client.create_bucket().bucket("cut").send().await.unwrap();
    put_request(&writer.client, "cut", "obj", b"v0").send().await.unwrap();
    let read = || async {
        match reader.client.get_object().bucket("cut").key("obj").send().await {
            Ok(_) => 200,
            Err(err) => err.raw_response().map(|r| r.status().as_u16()).unwrap_or(0),
        }
    };
    eventually(Duration::from_secs(30), "the standby to serve the object", || async {
        (read().await == 200).then_some(())
    })
    .await;
    // Current while it streams, however idle the primary.
    assert_eq!(admin_get(&reader, "/readyz").await.status, 200);

    // The primary goes away at once, as a crash or a cut would take it.
    common::faults::kill9(postmaster_pid("cutoff", "primary"));
    eventually(Duration::from_secs(30), "reads to be refused", || async {
        (read().await == 503).then_some(())
    })
    .await;
    let mut resp = common::resp::RawResp::connect(reader.resp_addr()).await;
    let stale = resp.command(&["GET", "anything"]).await;
    assert!(stale.error().starts_with("MASTERDOWN "), "{stale:?}");
    let ready = admin_get(&reader, "/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    let body: serde_json::Value = serde_json::from_str(&ready.body).unwrap();
    assert!(
        body["replication_lag_seconds"].as_f64().unwrap() > 1.0,
        "{}",
        ready.body
    );
    reader.stop().await;
    writer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reaper_drains_a_backlog_larger_than_its_batches() {
    let gw = TestGateway::with_args(
        common::fresh_database().await,
        &["--resp-addr", "127.0.0.1:0", "--maintenance-interval", "1h"],
    )
    .await;
    let store = &gw.gateway.store;
    // 40 chunked bodies retired by overwrites: more than the 16 a reaper batch takes.
    gw.client.create_bucket().bucket("churn").send().await.unwrap();
    let puts = (0..40).map(|i| {
        let client = gw.client.clone();
        async move {
            for seed in [i, i + 1000] {
                put_object(&client, "churn", &format!("object-{i}"), noise(100_000, seed)).await;
            }
        }
    });
    futures::future::join_all(puts).await;
    // 2,500 RESP keys with a 1 ms expiry, pipelined: more than the 1,000 a batch deletes.
    let mut resp = common::resp::RawResp::connect(gw.resp_addr()).await;
    let mut pipeline = Vec::new();
    for i in 0..2500 {
        let key = format!("session:{i}");
        pipeline.extend_from_slice(
            format!(
                "*5\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\nv\r\n$2\r\nPX\r\n$1\r\n1\r\n",
                key.len()
            )
            .as_bytes(),
        );
    }
    resp.send(&pipeline).await;
    for _ in 0..2500 {
        assert_eq!(resp.reply().await, Some(common::resp::Value::Simple("OK".into())));
    }
    assert_eq!(
        resp.command(&["DBSIZE"]).await,
        common::resp::Value::Int(0),
        "expired at once"
    );
    let (retired, _) = store.reaper_backlog().await.unwrap();
    assert_eq!(retired, 40);

    let reaped = store.reap_retired(Duration::ZERO).await.unwrap();
    assert_eq!(reaped.bodies, 40, "{reaped:?}");
    assert!(reaped.chunks >= 40 * 12, "every chunk of every body: {reaped:?}");
    assert_eq!(reaped.expired_objects, 2500, "{reaped:?}");
    // Drained in one pass: nothing is left, and the live objects are whole.
    assert_eq!(store.reaper_backlog().await.unwrap(), (0, 0));
    let again = store.reap_retired(Duration::ZERO).await.unwrap();
    assert_eq!(again, Default::default());
    let sql = gw.sql().await;
    let expired_rows: i64 = sql
        .query_one("SELECT count(*) FROM s3p.objects WHERE expires_at IS NOT NULL", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(expired_rows, 0);
    for i in [0, 39] {
        let object = gw
            .client
            .get_object()
            .bucket("churn")
            .key(format!("object-{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(object.body.collect().await.unwrap().to_vec(), noise(100_000, i + 1000));
    }
    gw.stop().await;
}

/// The postmaster's pid, from the data dir of a server started by `primary_and_standby`.
fn postmaster_pid(pair: &str, server: &str) -> i32 {
    let pid_file = std::env::temp_dir()
        .join(format!("pgvs3-test-{}-pair-{pair}", std::process::id()))
        .join(server)
        .join("pg")
        .join("postmaster.pid");
    let text = std::fs::read_to_string(&pid_file).unwrap();
    text.lines().next().unwrap().trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_lost_mid_put_leaves_no_partial_object_anywhere() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (primary, standby) = primary_and_standby("crash");
    let writer = TestGateway::on(primary.url("postgres")).await;
    let reader = TestGateway::on(standby.url("postgres")).await;
    writer.client.create_bucket().bucket("torn").send().await.unwrap();
    let whole = noise(300_000, 5);
    put_object(&writer.client, "torn", "whole", whole.clone()).await;
    eventually(Duration::from_secs(20), "replication of the whole object", || async {
        reader
            .client
            .head_object()
            .bucket("torn")
            .key("whole")
            .send()
            .await
            .ok()
    })
    .await;

    // A 32 MiB upload of which only the first 8 MiB arrive before the primary goes down.
    let total = 32 << 20;
    let body = noise(total, 6);
    let signer = common::raw::Signer {
        access_key: common::ROOT_ACCESS_KEY.into(),
        secret_key: common::ROOT_SECRET_KEY.into(),
        host: writer.gateway.s3_addr.to_string(),
    };
    let headers = signer.sign(
        "PUT",
        "/torn/partial",
        &[("content-length", total.to_string())],
        "UNSIGNED-PAYLOAD",
        std::time::SystemTime::now(),
    );
    let mut upload = tokio::net::TcpStream::connect(writer.gateway.s3_addr).await.unwrap();
    let mut head = "PUT /torn/partial HTTP/1.1\r\n".to_owned();
    for (name, value) in &headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    upload.write_all(head.as_bytes()).await.unwrap();
    upload.write_all(&body[..8 << 20]).await.unwrap();
    // Wait until the body is going into PostgreSQL: its first batches are written ahead of
    // the row, under a lease (issue 30 item 2: a body is written in 1 MiB batches, the last
    // with the object's row). Those batches commit without waiting for their WAL (issue 40:
    // only the last, synchronous commit acknowledges anything), so a crash may take them with
    // it; wait until the standby has them, so that what the lease and the reaper do with a
    // crashed upload's batches is seen below.
    let standby_sql = reader.sql().await;
    eventually(
        Duration::from_secs(20),
        "the upload's first batches written and replicated",
        || async {
            let leased: i64 = standby_sql
                .query_one(
                    "SELECT count(*) FROM s3p.retired_bodies r WHERE retired_at > now()
                    AND EXISTS (SELECT 1 FROM s3p.chunks c WHERE c.body_id = r.body_id)",
                    &[],
                )
                .await
                .ok()?
                .get("count");
            (leased > 0).then_some(())
        },
    )
    .await;

    // Immediate shutdown: what PostgreSQL sees when its host is lost.
    // SAFETY: signalling a server process this test started.
    unsafe { libc::kill(postmaster_pid("crash", "primary"), libc::SIGQUIT) };

    // The client hears an error, or the connection closes: never a 200, never a hang.
    let answer = tokio::time::timeout(Duration::from_secs(60), async {
        let _ = upload.write_all(&body[8 << 20..]).await;
        let mut answer = Vec::new();
        let _ = upload.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    })
    .await
    .expect("the interrupted upload ends within a minute");
    assert!(!answer.starts_with("HTTP/1.1 2"), "{answer}");

    // The standby never saw the object, only the one committed before.
    let status = match reader.client.head_object().bucket("torn").key("partial").send().await {
        Ok(_) => 200,
        Err(err) => err.raw_response().map(|r| r.status().as_u16()).unwrap_or(0),
    };
    assert_eq!(status, 404);
    // Promoted, it has no trace of the body either: no chunk belongs to no object.
    standby_sql.execute("SELECT pg_promote()", &[]).await.unwrap();
    eventually(Duration::from_secs(30), "promotion", || async {
        let in_recovery: bool = standby_sql
            .query_one("SELECT pg_is_in_recovery() AS in_recovery", &[])
            .await
            .ok()?
            .get("in_recovery");
        (!in_recovery).then_some(())
    })
    .await;
    // The batches written before the crash belong to no object: they are leased, and the
    // reaper takes them once the lease (15 minutes) has run out. Run out here by dating it back.
    let orphans = || async {
        let row = standby_sql
            .query_one(
                "SELECT count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM s3p.retired_bodies r WHERE r.body_id = c.body_id))
                          AS unretired,
                        count(*) AS orphans
                   FROM s3p.chunks c WHERE NOT EXISTS (SELECT 1 FROM s3p.objects o WHERE o.body_id = c.body_id)",
                &[],
            )
            .await
            .unwrap();
        (row.get::<_, i64>("unretired"), row.get::<_, i64>("orphans"))
    };
    let (unleased, leased) = orphans().await;
    assert_eq!(unleased, 0, "every chunk without an object is leased");
    assert!(
        leased > 0,
        "the crashed upload's batches wait for their lease to run out"
    );
    standby_sql
        .execute(
            "UPDATE s3p.retired_bodies SET retired_at = now() - interval '1 hour'",
            &[],
        )
        .await
        .unwrap();
    reader.gateway.store.reap_retired(Duration::ZERO).await.unwrap();
    assert_eq!(orphans().await, (0, 0), "the reaper took them once the lease ran out");
    let listed = reader.client.list_objects_v2().bucket("torn").send().await.unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["whole"]);
    let got = reader
        .client
        .get_object()
        .bucket("torn")
        .key("whole")
        .send()
        .await
        .unwrap();
    assert!(got.body.collect().await.unwrap().into_bytes().as_ref() == whole.as_slice());
    reader.stop().await;
    tokio::time::timeout(Duration::from_secs(60), writer.stop())
        .await
        .expect("a gateway whose database is gone still stops");
}

#[tokio::test]
async fn a_standby_gateway_started_before_the_root_key_has_replayed_waits_for_it() {
    let (primary, standby) = primary_and_standby("rootkey");
    let connect = |url: String| async move {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    };
    // A primary gateway's start migrates the layout, then creates the root key. With the key
    // taken away again and replay paused once that has replayed, the standby shows the moment
    // between the two.
    TestGateway::with_args(primary.url("postgres"), &[]).await.stop().await;
    let primary_sql = connect(primary.url("postgres")).await;
    primary_sql
        .execute("DELETE FROM pgvs3.access_keys WHERE is_root", &[])
        .await
        .unwrap();
    let standby_sql = connect(standby.url("postgres")).await;
    eventually(Duration::from_secs(30), "the root key's deletion to replay", || async {
        let row = standby_sql
            .query_one("SELECT count(*) AS roots FROM pgvs3.access_keys WHERE is_root", &[])
            .await
            .ok()?;
        (row.get::<_, i64>("roots") == 0).then_some(())
    })
    .await;
    let replay = standby.pause_replay().await;
    let writer = TestGateway::with_args(primary.url("postgres"), &[]).await;

    let standby_url = standby.url("postgres");
    let reader = tokio::spawn(async move { TestGateway::with_args(standby_url, &["--require-role", "standby"]).await });
    // The standby gateway has looked for the root key, and cannot have found it.
    eventually(
        Duration::from_secs(30),
        "the standby gateway to look for the root key",
        || async {
            let row = standby_sql
                .query_one(
                    "SELECT count(*) AS looking FROM pg_stat_activity
                  WHERE pid <> pg_backend_pid() AND query LIKE '%FROM pgvs3.access_keys WHERE is_root%'",
                    &[],
                )
                .await
                .ok()?;
            (row.get::<_, i64>("looking") > 0).then_some(())
        },
    )
    .await;
    replay.resume().await;
    let reader = reader
        .await
        .expect("the standby gateway starts once the root key has replayed");
    let buckets = reader.client.list_buckets().send().await.unwrap();
    assert!(buckets.buckets().is_empty());
    reader.stop().await;
    writer.stop().await;
}
