//! Bucket quotas through aws-sdk-s3: a PUT, copy or multipart completion that would take a
//! bucket past its byte or object limit gets MinIO's 400 `XMinioAdminBucketQuotaExceeded` and
//! leaves nothing behind; deletes and shrinking overwrites always go through; the usage the
//! catalog keeps matches the objects; concurrent writers cannot overshoot.

use pgvs3_testkit as common;

use aws_sdk_s3::Client;
use common::s3::{completion, copy_request, put_request, refusal, start_upload, upload_part};
use common::{TestGateway, noise};
use pgvs3_gateway::store::BucketQuota;

const QUOTA_ERROR: &str = "XMinioAdminBucketQuotaExceeded";

async fn put(s3: &Client, bucket: &str, key: &str, body: Vec<u8>) -> Result<(), (u16, String)> {
    put_request(s3, bucket, key, body)
        .send()
        .await
        .map(|_| ())
        .map_err(|err| refusal(&err))
}

async fn exists(s3: &Client, bucket: &str, key: &str) -> bool {
    s3.head_object().bucket(bucket).key(key).send().await.is_ok()
}

async fn quota(gw: &TestGateway, bucket: &str) -> BucketQuota {
    gw.gateway
        .store
        .catalog()
        .bucket_quota(bucket)
        .await
        .unwrap()
        .expect("the bucket has a quota")
}

/// What the objects table holds for the bucket, counted the slow way.
async fn counted(gw: &TestGateway, bucket: &str) -> (i64, i64) {
    let row = gw
        .sql()
        .await
        .query_one(
            "SELECT coalesce(sum(o.size), 0)::bigint AS bytes, count(o.key) AS objects
               FROM pgvs3.buckets b LEFT JOIN s3p.objects o ON o.bucket_id = b.id WHERE b.name = $1",
            &[&bucket],
        )
        .await
        .unwrap();
    (row.get("bytes"), row.get("objects"))
}

async fn set_quota(gw: &TestGateway, bucket: &str, max_bytes: Option<i64>, max_objects: Option<i64>) {
    gw.gateway
        .store
        .catalog()
        .set_bucket_quota(bucket, max_bytes, max_objects)
        .await
        .unwrap();
}

#[tokio::test]
async fn puts_past_the_byte_limit_are_refused_and_leave_nothing() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("capped").send().await.unwrap();
    s3.create_bucket().bucket("free").send().await.unwrap();
    set_quota(&gw, "capped", Some(10_000), None).await;

    put(s3, "capped", "a", noise(4096, 1)).await.unwrap();
    put(s3, "capped", "b", noise(4096, 2)).await.unwrap();
    let refused = put(s3, "capped", "c", noise(4096, 3)).await.unwrap_err();
    assert_eq!(refused, (400, QUOTA_ERROR.to_string()));
    assert!(!exists(s3, "capped", "c").await);

    // A chunked body (past the inline limit) is refused at commit: its chunks go with it.
    let chunks_before: i64 = gw
        .sql()
        .await
        .query_one("SELECT count(*) FROM s3p.chunks", &[])
        .await
        .unwrap()
        .get("count");
    let big = put(s3, "capped", "big", noise(300_000, 4)).await.unwrap_err();
    assert_eq!(big.1, QUOTA_ERROR);
    assert!(!exists(s3, "capped", "big").await);
    let chunks_after: i64 = gw
        .sql()
        .await
        .query_one("SELECT count(*) FROM s3p.chunks", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(chunks_after, chunks_before, "a refused body leaves no chunks");

    // Exactly up to the limit is allowed; an overwrite counts only its growth.
    put(s3, "capped", "b", noise(4096 + 1808, 5)).await.unwrap();
    assert_eq!(counted(&gw, "capped").await, (10_000, 2));
    put(s3, "capped", "b", noise(4097 + 1808, 6)).await.unwrap_err();
    put(s3, "capped", "b", noise(100, 7)).await.unwrap();
    s3.delete_object().bucket("capped").key("a").send().await.unwrap();
    put(s3, "capped", "c", noise(9_000, 8)).await.unwrap();

    let usage = quota(&gw, "capped").await;
    assert_eq!((usage.used_bytes, usage.used_objects), counted(&gw, "capped").await);
    assert_eq!(usage.max_bytes, Some(10_000));

    // Other buckets in the same namespace are not limited by it.
    put(s3, "free", "big", noise(300_000, 9)).await.unwrap();
    assert_eq!(gw.gateway.store.catalog().bucket_quota("free").await.unwrap(), None);
}

#[tokio::test]
async fn the_object_limit_refuses_new_keys_but_not_overwrites() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("few").send().await.unwrap();
    set_quota(&gw, "few", None, Some(2)).await;
    put(s3, "few", "one", b"1".to_vec()).await.unwrap();
    put(s3, "few", "two", b"2".to_vec()).await.unwrap();
    assert_eq!(put(s3, "few", "three", b"3".to_vec()).await.unwrap_err().1, QUOTA_ERROR);
    put(s3, "few", "two", noise(50_000, 1)).await.unwrap();
    s3.delete_object().bucket("few").key("one").send().await.unwrap();
    put(s3, "few", "three", b"3".to_vec()).await.unwrap();
    assert_eq!(quota(&gw, "few").await.used_objects, 2);
    assert_eq!(counted(&gw, "few").await, (50_001, 2));
}

#[tokio::test]
async fn copies_and_multipart_completions_past_the_limit_are_refused() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("source").send().await.unwrap();
    s3.create_bucket().bucket("capped").send().await.unwrap();
    put(s3, "source", "big", noise(200_000, 1)).await.unwrap();
    set_quota(&gw, "capped", Some(12 << 20), None).await;

    let copy = |key: &'static str| copy_request(s3, "capped", key, "source/big").send();
    copy("copied").await.expect("a copy within the limit succeeds");
    set_quota(&gw, "capped", Some(300_000), None).await;
    let refused = copy("copied-again").await.unwrap_err();
    assert_eq!(refusal(&refused), (400, QUOTA_ERROR.to_string()));
    assert!(!exists(s3, "capped", "copied-again").await);

    // Parts are not counted until completion; the completion is what gets refused, and the
    // upload survives it so the client can still abort (or complete once there is room).
    let upload_id = start_upload(s3, "capped", "assembled").await;
    let first = noise(5 << 20, 2);
    let etag = upload_part(s3, "capped", "assembled", &upload_id, 1, &first).await;
    let completion = completion(&[(1, &etag)]);
    let complete = || {
        s3.complete_multipart_upload()
            .bucket("capped")
            .key("assembled")
            .upload_id(&upload_id)
            .multipart_upload(completion.clone())
            .send()
    };
    let refused = complete().await.unwrap_err();
    assert_eq!(refusal(&refused), (400, QUOTA_ERROR.to_string()));
    assert!(!exists(s3, "capped", "assembled").await);
    let parts = s3
        .list_parts()
        .bucket("capped")
        .key("assembled")
        .upload_id(&upload_id)
        .send()
        .await
        .unwrap();
    assert_eq!(parts.parts().len(), 1, "the refused upload keeps its parts");

    set_quota(&gw, "capped", Some(6 << 20), None).await;
    complete().await.unwrap();
    assert_eq!(counted(&gw, "capped").await, (200_000 + (5 << 20), 2));
    let usage = quota(&gw, "capped").await;
    assert_eq!((usage.used_bytes, usage.used_objects), counted(&gw, "capped").await);
}

#[tokio::test]
async fn a_first_quota_counts_existing_objects_and_a_lowered_one_only_lets_the_bucket_shrink() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("full").send().await.unwrap();
    for i in 0..5 {
        put(s3, "full", &format!("k{i}"), noise(1000, i)).await.unwrap();
    }
    set_quota(&gw, "full", Some(3000), Some(10)).await;
    let usage = quota(&gw, "full").await;
    assert_eq!((usage.used_bytes, usage.used_objects), (5000, 5));

    assert_eq!(put(s3, "full", "k9", b"x".to_vec()).await.unwrap_err().1, QUOTA_ERROR);
    s3.delete_object().bucket("full").key("k0").send().await.unwrap();
    put(s3, "full", "k1", noise(10, 1)).await.unwrap();
    assert_eq!(quota(&gw, "full").await.used_bytes, 3010);

    // Removing the quota lifts it; setting it again counts afresh.
    set_quota(&gw, "full", None, None).await;
    assert_eq!(gw.gateway.store.catalog().bucket_quota("full").await.unwrap(), None);
    put(s3, "full", "k9", noise(10_000, 9)).await.unwrap();
    set_quota(&gw, "full", Some(1 << 20), None).await;
    assert_eq!(quota(&gw, "full").await.used_bytes, 13_010);

    // Dropping the bucket drops its quota with it.
    for key in ["k1", "k2", "k3", "k4", "k9"] {
        s3.delete_object().bucket("full").key(key).send().await.unwrap();
    }
    s3.delete_bucket().bucket("full").send().await.unwrap();
    let left: i64 = gw
        .sql()
        .await
        .query_one("SELECT count(*) FROM pgvs3.bucket_quotas", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(left, 0);
}

#[tokio::test]
async fn concurrent_writers_cannot_overshoot_the_limit() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("race").send().await.unwrap();
    set_quota(&gw, "race", None, Some(5)).await;
    let keys: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    let writes = keys
        .iter()
        .zip(0..)
        .map(|(key, seed)| put(s3, "race", key, noise(2048, seed)));
    let outcomes = futures::future::join_all(writes).await;
    let accepted = outcomes.iter().filter(|o| o.is_ok()).count();
    assert_eq!(accepted, 5);
    assert!(
        outcomes
            .iter()
            .filter_map(|o| o.as_ref().err())
            .all(|(_, code)| code == QUOTA_ERROR)
    );
    assert_eq!(counted(&gw, "race").await, (5 * 2048, 5));
}

#[tokio::test]
async fn quotas_are_refused_for_cache_buckets_missing_buckets_and_negative_limits() {
    let gw = TestGateway::start().await;
    let catalog = gw.gateway.store.catalog();
    assert!(matches!(
        catalog.set_bucket_quota("nowhere", Some(1), None).await,
        Err(pgvs3_gateway::store::StoreError::NoSuchBucket)
    ));
    gw.client.create_bucket().bucket("plain").send().await.unwrap();
    assert!(matches!(
        catalog.set_bucket_quota("plain", Some(-1), None).await,
        Err(pgvs3_gateway::store::StoreError::InvalidArgument(_))
    ));
    gw.sql()
        .await
        .execute("SELECT pgvs3.ensure_bucket('cached', NULL, 's3w')", &[])
        .await
        .unwrap();
    assert!(matches!(
        catalog.set_bucket_quota("cached", Some(1), None).await,
        Err(pgvs3_gateway::store::StoreError::InvalidArgument(_))
    ));
}
