//! A short run of every S3 load case against an in-process gateway: the load generator's
//! requests are accepted, its verification passes, and nothing errors. (A smoke, not a
//! measurement: no performance is asserted.)

#[path = "../../gateway/tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use pgvs3_e2e::loadgen::{self, Budget, s3};

#[tokio::test]
async fn every_s3_case_runs_clean_against_a_gateway() {
    let gw = common::TestGateway::start().await;
    let client = Arc::new(s3::S3Client::new(s3::Target {
        endpoint: gw.endpoint(),
        region: "us-east-1".into(),
        access_key: common::ROOT_ACCESS_KEY.into(),
        secret_key: common::ROOT_SECRET_KEY.into(),
        bucket: "smoke".into(),
    }));
    let budget = Budget {
        workers: 4,
        warmup: Duration::ZERO,
        duration: None,
        requests: Some(40),
        timeout: Duration::from_secs(30),
    };
    use s3::Operation::*;
    for size in [4096, 100_000] {
        for operation in [Put, Overwrite, Get, Range, Head, List, Delete] {
            let case = s3::Case {
                operation,
                size,
                keys: 10,
                shared_key: false,
                unique_reads: operation == Get,
                range_size: 1000,
                prefix: format!("{operation:?}-{size}/"),
            };
            let runner = Arc::new(s3::Runner::new(Arc::clone(&client), case));
            runner.prepare(4).await.unwrap();
            let summary = loadgen::run(budget, {
                let runner = Arc::clone(&runner);
                move |worker, sequence| {
                    let runner = Arc::clone(&runner);
                    async move { runner.once(worker, sequence).await }
                }
            })
            .await;
            assert!(summary.errors.is_empty(), "{operation:?} {size}: {:?}", summary.errors);
            assert_eq!(summary.samples, 40, "{operation:?} {size}");
            if matches!(operation, Get | Put | Overwrite) {
                assert_eq!(summary.bytes, 40 * size, "{operation:?} {size}: every byte verified");
            }
        }
    }
    gw.stop().await;
}
