//! Short runs of every load case against in-process gateways: the load generator's requests are
//! accepted, its verification passes, nothing errors, and what it claims to have done is what
//! the gateway saw. (A smoke, not a measurement: no performance is asserted.)

use pgvs3_testkit as common;

use std::sync::Arc;
use std::time::Duration;

use pgvs3_e2e::loadgen::{self, Budget, cache, capacity, ojs, requests, resp, s3};
use pgvs3_gateway::store::{CacheMode, Origin};
use sha2::Digest;

fn budget(requests: u64) -> Budget {
    Budget {
        workers: 4,
        warmup: Duration::ZERO,
        duration: None,
        requests: Some(requests),
        timeout: Duration::from_secs(30),
    }
}

fn s3_client(gw: &common::TestGateway, bucket: &str) -> Arc<s3::S3Client> {
    Arc::new(s3::S3Client::new(s3::Target {
        endpoint: gw.endpoint(),
        ca_cert: None,
        region: "us-east-1".into(),
        access_key: common::ROOT_ACCESS_KEY.into(),
        secret_key: common::ROOT_SECRET_KEY.into(),
        session_token: None,
        bucket: bucket.into(),
        versioning: false,
    }))
}

fn s3_case(operation: s3::Operation, size: u64) -> s3::Case {
    s3::Case {
        operation,
        size,
        keys: 10,
        shared_key: false,
        unique_reads: operation == s3::Operation::Get,
        range_size: 1000,
        prefix: format!("{operation:?}-{size}/"),
    }
}

#[tokio::test]
async fn every_s3_case_runs_clean_against_a_gateway() {
    let gw = common::TestGateway::start().await;
    let client = s3_client(&gw, "smoke");
    use s3::Operation::*;
    for size in [4096, 100_000] {
        for operation in [Put, Overwrite, Get, Range, Head, List, Delete] {
            let runner = Arc::new(s3::Runner::new(Arc::clone(&client), s3_case(operation, size)));
            runner.prepare(4).await.unwrap();
            let summary = loadgen::run(budget(40), requests(runner)).await;
            assert!(summary.errors.is_empty(), "{operation:?} {size}: {:?}", summary.errors);
            assert_eq!(summary.samples, 40, "{operation:?} {size}");
            if matches!(operation, Get | Put | Overwrite) {
                assert_eq!(summary.bytes, 40 * size, "{operation:?} {size}: every byte verified");
            }
        }
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_read_of_other_bytes_is_an_error_not_a_sample() {
    let gw = common::TestGateway::start().await;
    let client = s3_client(&gw, "smoke");
    let runner = s3::Runner::new(Arc::clone(&client), s3_case(s3::Operation::Get, 4096));
    runner.prepare(4).await.unwrap();
    // The same keys now expected to hold other bytes of the same size.
    let other = loadgen::payload(8192).slice(4096..);
    let expecting_other = Arc::new(s3::Runner::with_payload(
        client,
        s3_case(s3::Operation::Get, 4096),
        other,
    ));
    let summary = loadgen::run(budget(10), requests(expecting_other)).await;
    assert_eq!(summary.samples, 0);
    assert_eq!(summary.errors.get("wrong bytes"), Some(&10));
    gw.stop().await;
}

#[tokio::test]
async fn every_resp_case_runs_clean_and_incr_counts_every_command() {
    let gw = common::TestGateway::with_resp(&[]).await;
    let url = format!("redis://{}", gw.resp_addr());
    for pipeline in [1, 8] {
        for operation in [
            resp::Operation::Set,
            resp::Operation::Get,
            resp::Operation::Mget,
            resp::Operation::Incr,
        ] {
            let case = resp::Case {
                operation,
                size: 1000,
                keys: 10,
                pipeline,
                mget_keys: 3,
                prefix: format!("smoke:{operation:?}:{pipeline}:"),
            };
            let runner = resp::Runner::connect(&url, 4, case).await.unwrap();
            runner.prepare().await.unwrap();
            let summary = loadgen::run(budget(20), requests(Arc::new(runner))).await;
            assert!(
                summary.errors.is_empty(),
                "{operation:?} P{pipeline}: {:?}",
                summary.errors
            );
            assert_eq!(
                (summary.samples, summary.items),
                (20, 20 * pipeline),
                "{operation:?} P{pipeline}"
            );
            let values_per_command = match operation {
                resp::Operation::Incr => 0,
                resp::Operation::Mget => 3,
                _ => 1,
            };
            assert_eq!(
                summary.bytes,
                20 * pipeline * values_per_command * 1000,
                "{operation:?} P{pipeline}"
            );
        }
        // The counters' sum is the number of INCRs the load generator counted.
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> = (0..10).map(|i| format!("smoke:Incr:{pipeline}:{i:08}")).collect();
        let counts: Vec<Option<u64>> = redis::cmd("MGET")
            .arg(&keys)
            .query_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(counts.into_iter().flatten().sum::<u64>(), 20 * pipeline);
    }
    gw.stop().await;
}

fn ojs_case(operation: ojs::Operation, prefill: u64) -> ojs::Case {
    ojs::Case {
        operation,
        args_size: 100,
        batch: 10,
        prefill,
        queue: format!("smoke-{operation:?}").to_lowercase(),
    }
}

#[tokio::test]
async fn every_ojs_case_runs_clean_and_a_drained_queue_is_an_error() {
    let gw = common::TestGateway::start().await;
    let base = format!("http://{}/ojs/v1", gw.gateway.ojs_addr.expect("OJS listener"));
    for operation in [ojs::Operation::Enqueue, ojs::Operation::Batch, ojs::Operation::Cycle] {
        let runner = ojs::Runner::new(&base, ojs_case(operation, 40));
        runner.prepare().await.unwrap();
        let summary = loadgen::run(budget(40), requests(Arc::new(runner))).await;
        assert!(summary.errors.is_empty(), "{operation:?}: {:?}", summary.errors);
        let items = if operation == ojs::Operation::Batch { 400 } else { 40 };
        assert_eq!((summary.samples, summary.items), (40, items), "{operation:?}");
    }
    let sql = gw.sql().await;
    let counts: Vec<(String, String, i64)> = sql
        .query(
            "SELECT queue, state::text AS state, count(*) AS jobs FROM ojs.jobs WHERE queue LIKE 'smoke-%'
              GROUP BY 1, 2 ORDER BY 1, 2",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get("queue"), row.get("state"), row.get("jobs")))
        .collect();
    let expected = [
        ("smoke-batch", "available", 400),
        ("smoke-cycle", "completed", 40),
        ("smoke-enqueue", "available", 40),
    ];
    assert_eq!(
        counts,
        expected.map(|(q, s, n)| (q.to_owned(), s.to_owned(), n)).to_vec()
    );
    // Five more fetches than jobs: the extra ones find the queue empty.
    let runner = ojs::Runner::new(&base, ojs_case(ojs::Operation::Cycle, 10));
    let summary = loadgen::run(budget(5), requests(Arc::new(runner))).await;
    assert_eq!(summary.samples, 0);
    assert_eq!(summary.errors.get("queue drained (raise --prefill)"), Some(&5));
    gw.stop().await;
}

async fn origin_gets(origin: &common::TestGateway) -> f64 {
    origin
        .metric("pgvs3_requests_total{operation=\"GetObject\",protocol=\"s3\",status=\"200\"}")
        .await
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cache_cases_read_cold_once_from_the_origin_and_warm_never() {
    let origin = common::TestGateway::start().await;
    let cache_gw = common::TestGateway::start().await;
    let origin_client = s3_client(&origin, "origin-data");
    origin_client.ensure_bucket().await.unwrap();
    let settings = Origin {
        endpoint: origin.endpoint(),
        region: "us-east-1".into(),
        origin_bucket: "origin-data".into(),
        access_key: common::ROOT_ACCESS_KEY.into(),
        secret_key: common::ROOT_SECRET_KEY.into(),
        path_style: true,
        mode: CacheMode::WriteBack,
        ttl: Duration::from_secs(3600),
        negative_ttl: Duration::ZERO,
        fill_concurrency: 8,
        size_limit: None,
        write_back_threshold: 1 << 20,
        range_chunk: 64 << 10,
    };
    let catalog = cache_gw.gateway.store.catalog();
    catalog.put_origin("cached", &settings).await.unwrap();
    let cache_client = s3_client(&cache_gw, "cached");
    let size = 200_000;

    let cold = cache::Runner::new(Arc::clone(&cache_client), cache::Operation::ColdGet, size, 6);
    let cold_budget = cold.prepare(&origin_client, budget(1000)).await.unwrap();
    let gets_before = origin_gets(&origin).await;
    let summary = loadgen::run(cold_budget, cold.op()).await;
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!((summary.samples, summary.bytes), (6, 6 * size), "each key read once");
    assert_eq!(
        origin_gets(&origin).await - gets_before,
        6.0,
        "every cold read went to the origin"
    );

    let warm = cache::Runner::new(Arc::clone(&cache_client), cache::Operation::WarmGet, size, 6);
    let warm_budget = warm.prepare(&origin_client, budget(30)).await.unwrap();
    let gets_before = origin_gets(&origin).await;
    let summary = loadgen::run(warm_budget, warm.op()).await;
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!((summary.samples, summary.bytes), (30, 30 * size));
    assert_eq!(
        origin_gets(&origin).await,
        gets_before,
        "warm reads never reach the origin"
    );

    let put = cache::Runner::new(cache_client, cache::Operation::WriteBackPut, 2 << 20, 4);
    let put_budget = put.prepare(&origin_client, budget(8)).await.unwrap();
    let summary = loadgen::run(put_budget, put.op()).await;
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(summary.samples, 8);
    cache_gw.stop().await;
    origin.stop().await;
}

#[tokio::test]
async fn capacity_snapshots_see_the_writes_of_a_case() {
    let gw = common::TestGateway::start().await;
    let client = s3_client(&gw, "capacity");
    let probe = capacity::Probe::connect(capacity::Sources {
        database_url: gw.database_url.clone(),
        metrics_url: Some(format!("http://{}/metrics", gw.gateway.admin_addr)),
        gateway_pid: Some(std::process::id()),
        drain_command: Some("true".into()),
    })
    .await
    .unwrap();
    let before = probe.snapshot().await.unwrap();
    let runner = Arc::new(s3::Runner::new(client, s3_case(s3::Operation::Put, 1 << 20)));
    runner.prepare(4).await.unwrap();
    let summary = loadgen::run(budget(10), requests(runner)).await;
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    let footprint = probe.after(before).await.unwrap();
    let (before, after) = (&footprint.before, &footprint.after);
    assert!(
        after.wal_position - before.wal_position >= 10 << 20,
        "10 MiB of bodies went through the WAL"
    );
    let grown: i64 = after
        .relations
        .iter()
        .map(|(name, size)| size - before.relations.get(name).unwrap_or(&0))
        .sum();
    assert!(grown >= 10 << 20, "the relations grew by the bodies' size: {grown}");
    assert!(after.gateway_rss_bytes.is_some_and(|rss| rss > 0));
    assert!(
        after
            .pool
            .keys()
            .any(|series| series.starts_with("pgvs3_db_pool_max_connections")),
        "{:?}",
        after.pool
    );
    assert!(footprint.after_drain.is_some());
    assert!(footprint.describe().contains("WAL"));
    gw.stop().await;
}

#[tokio::test]
async fn the_binary_puts_and_reads_back_a_payload_file_and_records_ndjson() {
    let gw = common::TestGateway::start().await;
    let work = std::env::temp_dir().join(format!("pgvs3-loadgen-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let fixture = work.join("fixture.bin");
    let bytes = common::noise(300_000, 7);
    std::fs::write(&fixture, &bytes).unwrap();
    let json = work.join("cases.ndjson");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_pgvs3-loadgen"))
        .args([
            "s3",
            "--endpoint",
            &gw.endpoint(),
            "--bucket",
            "files",
            "--ops",
            "put,get",
        ])
        .args(["--keys", "3", "--workers", "2", "--requests", "6", "--payload-file"])
        .arg(&fixture)
        .arg("--json")
        .arg(&json)
        .env("AWS_ACCESS_KEY_ID", common::ROOT_ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", common::ROOT_SECRET_KEY)
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let records: Vec<serde_json::Value> = std::fs::read_to_string(&json)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let cases: Vec<&str> = records.iter().map(|r| r["case"].as_str().unwrap()).collect();
    assert_eq!(cases, ["s3 put fixture.bin", "s3 get fixture.bin"]);
    // The paired gate compares these hashes: they must be the file's.
    let file_sha256 = hex::encode(sha2::Sha256::digest(&bytes));
    for record in &records {
        assert_eq!(record["result"]["bytes"], 6 * bytes.len() as u64, "{record}");
        assert_eq!(record["config"]["case"]["size"], bytes.len() as u64);
        assert_eq!(record["config"]["payload_sha256"], file_sha256.as_str());
    }
    // The objects hold the file's bytes.
    let object = gw
        .client
        .get_object()
        .bucket("files")
        .key("get-fixture.bin/00000000")
        .send()
        .await
        .unwrap();
    assert_eq!(object.body.collect().await.unwrap().into_bytes(), bytes);
    std::fs::remove_dir_all(&work).unwrap();
    gw.stop().await;
}
