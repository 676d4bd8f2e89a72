//! The origin cache tier against a real origin (another pgvs3 gateway on its own database):
//! read-through fills, single flight, ranges, freshness, negative caching, write-through and
//! write-back, deletes, listing, eviction, origin failures and bad credentials, and the bucket
//! notifications of a cache bucket's writes. Origin requests are counted from the origin's own
//! metrics.

mod events;
mod eviction;
mod origin;
mod paths;
mod races;
mod reads;
mod write_back;

use pgvs3_testkit as common;

use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use common::events::{configure, drain, event, queue_rule};
use common::ojs::Ojs;
use common::s3::{
    completion, copy_request, find_object, head_object, http_status, put_etag, put_object, put_request, read_object,
    start_upload, upload_part,
};
use common::{ROOT_ACCESS_KEY, ROOT_SECRET_KEY, TestGateway, noise, query_count};
use pgvs3_gateway::store::{CacheMode, Origin};

const ORIGIN_BUCKET: &str = "origin-data";
const CACHE: &str = "cached";
/// The tests' origins listen on loopback.
const LOCAL_ORIGINS: pgvs3_gateway::cache::addresses::OriginAddresses =
    pgvs3_gateway::cache::addresses::OriginAddresses { allow_local: true };

/// An origin gateway with its bucket, and a cache gateway (own database) in front of it.
struct Pair {
    origin: TestGateway,
    cache: TestGateway,
}

fn origin_settings(origin: &TestGateway, mode: CacheMode) -> Origin {
    Origin {
        endpoint: origin.endpoint(),
        region: "us-east-1".into(),
        origin_bucket: ORIGIN_BUCKET.into(),
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: ROOT_SECRET_KEY.into(),
        path_style: true,
        mode,
        ttl: Duration::from_secs(3600),
        negative_ttl: Duration::ZERO,
        fill_concurrency: 8,
        size_limit: None,
        write_back_threshold: 1 << 20,
        range_chunk: 64 << 10,
    }
}

impl Pair {
    async fn start(mode: CacheMode) -> Pair {
        Pair::start_with(|origin| origin_settings(origin, mode)).await
    }

    async fn start_with(settings: impl FnOnce(&TestGateway) -> Origin) -> Pair {
        Pair::start_with_args(settings, &[]).await
    }

    /// `cache_args`: further flags of the cache gateway.
    async fn start_with_args(settings: impl FnOnce(&TestGateway) -> Origin, cache_args: &[&str]) -> Pair {
        let origin = TestGateway::start().await;
        origin
            .client
            .create_bucket()
            .bucket(ORIGIN_BUCKET)
            .send()
            .await
            .unwrap();
        let cache = TestGateway::with_args(common::fresh_database().await, cache_args).await;
        let settings = settings(&origin);
        cache
            .gateway
            .store
            .catalog()
            .put_origin(CACHE, &settings)
            .await
            .unwrap();
        Pair { origin, cache }
    }

    /// Successful GETs the origin has served so far.
    async fn origin_gets(&self) -> f64 {
        origin_requests(&self.origin, "GetObject", 200).await
    }

    async fn put_at_origin(&self, key: &str, body: Vec<u8>) {
        put_object(&self.origin.client, ORIGIN_BUCKET, key, body).await;
    }

    async fn origin_has(&self, key: &str) -> Option<Vec<u8>> {
        find_object(&self.origin.client, ORIGIN_BUCKET, key).await
    }

    async fn stop(self) {
        self.cache.stop().await;
        self.origin.stop().await;
    }
}

async fn origin_requests(origin: &TestGateway, operation: &str, status: u16) -> f64 {
    origin
        .metric(&format!(
            "pgvs3_requests_total{{operation=\"{operation}\",protocol=\"s3\",status=\"{status}\"}}"
        ))
        .await
        .unwrap_or(0.0)
}

async fn status_of_get(client: &Client, bucket: &str, key: &str) -> (u16, Option<String>) {
    match client.get_object().bucket(bucket).key(key).send().await {
        Ok(output) => {
            output.body.collect().await.unwrap();
            (200, None)
        }
        Err(err) => {
            use aws_sdk_s3::error::ProvideErrorMetadata;
            (http_status(&err), err.code().map(str::to_owned))
        }
    }
}

/// Waits (bounded, by the shared poller) until `check` holds; the condition is what the test
/// asserts.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    common::eventually(Duration::from_secs(15), what, || {
        let done = check();
        async move { done.await.then_some(()) }
    })
    .await
}

async fn range(client: &Client, key: &str, range: &str) -> (Option<String>, Vec<u8>) {
    let output = client
        .get_object()
        .bucket(CACHE)
        .key(key)
        .range(range)
        .send()
        .await
        .unwrap();
    (
        output.content_range.clone(),
        output.body.collect().await.unwrap().to_vec(),
    )
}

/// Waits for the fill of `key` to commit (it finishes after the client has its bytes).
async fn filled(cache: &TestGateway, key: &str) {
    let sql = cache.sql().await;
    eventually("the fill to commit", || async {
        query_count(&sql, "SELECT count(*) FROM s3c.objects WHERE key = $1", &[&key]).await == 1
    })
    .await;
}

/// Ages every entry of the cache bucket past its TTL.
async fn expire_entries(cache: &TestGateway) {
    cache
        .sql()
        .await
        .execute("UPDATE s3c.objects SET validated_at = now() - interval '1 day'", &[])
        .await
        .unwrap();
}

/// Waits until the upload worker has marked `key`'s write-back body clean.
async fn uploaded(cache: &TestGateway, key: &str) {
    let sql = cache.sql().await;
    eventually("the upload to settle", || async {
        query_count(
            &sql,
            "SELECT count(*) FROM s3w.objects WHERE key = $1 AND origin_etag IS NOT NULL",
            &[&key],
        )
        .await
            == 1
    })
    .await;
}

/// Every S3 request the origin has answered, whatever its operation and status.
async fn origin_requests_total(origin: &TestGateway) -> f64 {
    let admin = origin.gateway.admin_addr;
    let response = common::raw::send(admin, "GET", "/metrics", &[("host".into(), admin.to_string())], b"").await;
    response
        .body
        .lines()
        .filter(|line| line.starts_with("pgvs3_requests_total{") && line.contains("protocol=\"s3\""))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn head_status(client: &Client, key: &str) -> Result<i64, u16> {
    match client.head_object().bucket(CACHE).key(key).send().await {
        Ok(head) => Ok(head.content_length.unwrap_or(-1)),
        Err(err) => Err(http_status(&err)),
    }
}

async fn range_status(client: &Client, key: &str, range: &str) -> Result<Vec<u8>, u16> {
    match client.get_object().bucket(CACHE).key(key).range(range).send().await {
        Ok(output) => Ok(output.body.collect().await.unwrap().to_vec()),
        Err(err) => Err(http_status(&err)),
    }
}

/// Ages every entry and range chunk of the cache by `age` (an SQL interval).
async fn age_entries(cache: &TestGateway, age: &str) {
    let sql = cache.sql().await;
    for table in ["s3c.objects", "s3c.ranges"] {
        sql.execute(
            &format!("UPDATE {table} SET validated_at = now() - $1::text::interval"),
            &[&age],
        )
        .await
        .unwrap();
    }
}
