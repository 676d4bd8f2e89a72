//! Gateways on a primary and on its hot standby: the standby gateway serves reads, refuses
//! writes with S3's AccessDenied, reports its role, and accepts writes after a promotion
//! without a restart.

mod common;

use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
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
        writer
            .client
            .put_object()
            .bucket("shared")
            .key(key)
            .body(ByteStream::from(body.clone()))
            .send()
            .await
            .unwrap();
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
    let refused = reader
        .client
        .put_object()
        .bucket("shared")
        .key("new")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await;
    let refused = refused.unwrap_err().into_service_error();
    assert_eq!(refused.meta().code(), Some("AccessDenied"));
    assert!(
        refused.meta().message().unwrap_or_default().contains("read-only"),
        "{refused:?}"
    );
    let big = reader
        .client
        .put_object()
        .bucket("shared")
        .key("new-big")
        .body(ByteStream::from(large.clone()))
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

    reader.stop().await;
    writer.stop().await;
}

#[tokio::test]
async fn lost_database_connections_fail_cleanly_and_are_replaced() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("loss").send().await.unwrap();
    let body = noise(200_000, 3);
    gw.client
        .put_object()
        .bucket("loss")
        .key("obj")
        .body(ByteStream::from(body.clone()))
        .send()
        .await
        .unwrap();
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
        .get(0);
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
    let writer = TestGateway::on(primary.url("postgres")).await;
    let reader = TestGateway::with_args(standby.url("postgres"), &["--max-replication-lag", "1s"]).await;
    writer.client.create_bucket().bucket("lagging").send().await.unwrap();
    let put = |key: &'static str| {
        writer
            .client
            .put_object()
            .bucket("lagging")
            .key(key)
            .body(ByteStream::from_static(b"v"))
            .send()
    };
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
    reader.stop().await;
    writer.stop().await;
}
