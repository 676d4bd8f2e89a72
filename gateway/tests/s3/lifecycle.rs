//! S3 lifecycle with aws-sdk-s3: configurations stored and checked as S3 does, the
//! `x-amz-expiration` header, and the maintenance pass applying the rules in bounded batches —
//! a backlog larger than one batch drains over several passes; current versions expire (deleted,
//! or behind a delete marker when versioned), noncurrent versions beyond the newest kept go, lone
//! delete markers go, incomplete uploads are aborted, and object lock protects what it locks.
//! Objects are aged by moving their timestamps back in the database: lifecycle counts days.

use pgvs3_testkit as common;

use std::time::{Duration, SystemTime};

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::DateTime;
use aws_sdk_s3::types::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, BucketVersioningStatus, CompletedMultipartUpload,
    CompletedPart, ExpirationStatus, LifecycleExpiration, LifecycleRule, LifecycleRuleAndOperator, LifecycleRuleFilter,
    NoncurrentVersionExpiration, ObjectLockMode, Tag, Tagging, Transition, TransitionStorageClass,
};
use common::TestGateway;
use common::s3::{error_code, head_object, http_status, put_object, put_request, set_versioning};
use pgvs3_gateway::store::LifecycleStats;

fn rule(id: &str, prefix: &str) -> aws_sdk_s3::types::builders::LifecycleRuleBuilder {
    LifecycleRule::builder()
        .id(id)
        .status(ExpirationStatus::Enabled)
        .filter(LifecycleRuleFilter::builder().prefix(prefix).build())
}

fn expire_after(days: i32) -> LifecycleExpiration {
    LifecycleExpiration::builder().days(days).build()
}

async fn set_rules(s3: &Client, bucket: &str, rules: Vec<LifecycleRule>) {
    s3.put_bucket_lifecycle_configuration()
        .bucket(bucket)
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .set_rules(Some(rules))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
}

async fn put(s3: &Client, bucket: &str, key: &str) -> Option<String> {
    put_object(s3, bucket, key, b"data").await.version_id
}

/// Moves every timestamp of `bucket` three days back.
async fn age(gw: &TestGateway, bucket: &str) {
    let sql = gw.sql().await;
    for table in ["objects", "versions"] {
        sql.execute(
            &format!(
                "UPDATE s3p.{table} SET last_modified = last_modified - interval '3 days'
                  WHERE bucket_id = (SELECT id FROM pgvs3.buckets WHERE name = $1)"
            ),
            &[&bucket],
        )
        .await
        .unwrap();
    }
    sql.execute(
        "UPDATE s3p.uploads SET initiated = initiated - interval '3 days'
          WHERE bucket_id = (SELECT id FROM pgvs3.buckets WHERE name = $1)",
        &[&bucket],
    )
    .await
    .unwrap();
}

async fn keys(s3: &Client, bucket: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut token = None;
    loop {
        let page = s3
            .list_objects_v2()
            .bucket(bucket)
            .set_continuation_token(token)
            .send()
            .await
            .unwrap();
        keys.extend(page.contents().iter().filter_map(|o| o.key.clone()));
        token = page.next_continuation_token;
        if token.is_none() {
            return keys;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn configurations_are_kept_and_checked() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("cfg").send().await.unwrap();
    let none = s3
        .get_bucket_lifecycle_configuration()
        .bucket("cfg")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&none), "NoSuchLifecycleConfiguration");
    set_rules(
        s3,
        "cfg",
        vec![
            rule("logs", "logs/").expiration(expire_after(30)).build().unwrap(),
            rule("uploads", "")
                .abort_incomplete_multipart_upload(
                    AbortIncompleteMultipartUpload::builder()
                        .days_after_initiation(2)
                        .build(),
                )
                .build()
                .unwrap(),
        ],
    )
    .await;
    let rules = s3
        .get_bucket_lifecycle_configuration()
        .bucket("cfg")
        .send()
        .await
        .unwrap()
        .rules
        .unwrap();
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].id.as_deref(), Some("logs"));
    assert_eq!(rules[0].expiration.as_ref().unwrap().days, Some(30));
    assert_eq!(rules[0].filter.as_ref().unwrap().prefix.as_deref(), Some("logs/"));
    assert_eq!(
        rules[1]
            .abort_incomplete_multipart_upload
            .as_ref()
            .unwrap()
            .days_after_initiation,
        Some(2)
    );

    // GET and HEAD say when a rule will expire the object, rounded to midnight UTC.
    put(s3, "cfg", "logs/today").await;
    let head = head_object(s3, "cfg", "logs/today").await;
    let expiration = head.expiration.expect("x-amz-expiration");
    assert!(expiration.contains("rule-id=\"logs\""), "{expiration}");
    assert!(expiration.contains("00:00:00 GMT"), "{expiration}");
    put(s3, "cfg", "other").await;
    let head = head_object(s3, "cfg", "other").await;
    assert_eq!(head.expiration, None);

    // What S3 refuses, pgvs3 refuses: duplicate ids, a rule with no action, transitions.
    let twice = s3
        .put_bucket_lifecycle_configuration()
        .bucket("cfg")
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .rules(rule("a", "x").expiration(expire_after(1)).build().unwrap())
                .rules(rule("a", "y").expiration(expire_after(1)).build().unwrap())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&twice), "InvalidArgument");
    let transition = s3
        .put_bucket_lifecycle_configuration()
        .bucket("cfg")
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .rules(
                    rule("cold", "")
                        .transitions(
                            Transition::builder()
                                .days(30)
                                .storage_class(TransitionStorageClass::Glacier)
                                .build(),
                        )
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&transition), "NotImplemented");
    // The refused configurations left the stored one alone.
    let kept = s3
        .get_bucket_lifecycle_configuration()
        .bucket("cfg")
        .send()
        .await
        .unwrap();
    assert_eq!(kept.rules().len(), 2);

    s3.delete_bucket_lifecycle().bucket("cfg").send().await.unwrap();
    let gone = s3
        .get_bucket_lifecycle_configuration()
        .bucket("cfg")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&gone), "NoSuchLifecycleConfiguration");
}

/// PutObject, CopyObject and CompleteMultipartUpload answer `x-amz-expiration` as GET and HEAD
/// do when a rule will expire what they wrote, tag filters matched against the written tags.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_answer_when_a_rule_will_expire_them() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("exp").send().await.unwrap();
    set_rules(
        s3,
        "exp",
        vec![
            rule("logs", "logs/").expiration(expire_after(7)).build().unwrap(),
            LifecycleRule::builder()
                .id("tagged")
                .status(ExpirationStatus::Enabled)
                .filter(
                    LifecycleRuleFilter::builder()
                        .tag(Tag::builder().key("tier").value("scratch").build().unwrap())
                        .build(),
                )
                .expiration(expire_after(1))
                .build()
                .unwrap(),
        ],
    )
    .await;

    let written = put_object(s3, "exp", "logs/a", b"data").await;
    let written = written.expiration.expect("PutObject's x-amz-expiration");
    assert!(written.contains("rule-id=\"logs\""), "{written}");
    assert_eq!(head_object(s3, "exp", "logs/a").await.expiration, Some(written));

    let untouched = put_object(s3, "exp", "data/a", b"data").await;
    assert_eq!(untouched.expiration, None);
    let tagged = put_request(s3, "exp", "data/b", b"data")
        .tagging("tier=scratch")
        .send()
        .await
        .unwrap();
    let tagged = tagged.expiration.expect("a tag filter matches the written tags");
    assert!(tagged.contains("rule-id=\"tagged\""), "{tagged}");

    let copied = s3
        .copy_object()
        .bucket("exp")
        .key("logs/copy")
        .copy_source("exp/data/a")
        .send()
        .await
        .unwrap();
    let copied = copied.expiration.expect("CopyObject's x-amz-expiration");
    assert!(copied.contains("rule-id=\"logs\""), "{copied}");
    assert_eq!(head_object(s3, "exp", "logs/copy").await.expiration, Some(copied));
    // A copy keeps its source's tags unless told otherwise: the tag rule still applies.
    let copy_of_tagged = s3
        .copy_object()
        .bucket("exp")
        .key("data/c")
        .copy_source("exp/data/b")
        .send()
        .await
        .unwrap();
    assert!(
        copy_of_tagged
            .expiration
            .is_some_and(|e| e.contains("rule-id=\"tagged\""))
    );

    let upload = s3
        .create_multipart_upload()
        .bucket("exp")
        .key("logs/big")
        .send()
        .await
        .unwrap();
    let upload_id = upload.upload_id.unwrap();
    let part = s3
        .upload_part()
        .bucket("exp")
        .key("logs/big")
        .upload_id(&upload_id)
        .part_number(1)
        .body(b"part".to_vec().into())
        .send()
        .await
        .unwrap();
    let completed = s3
        .complete_multipart_upload()
        .bucket("exp")
        .key("logs/big")
        .upload_id(&upload_id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag.unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let completed = completed
        .expiration
        .expect("CompleteMultipartUpload's x-amz-expiration");
    assert_eq!(head_object(s3, "exp", "logs/big").await.expiration, Some(completed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expiration_drains_a_backlog_in_batches() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("logs").send().await.unwrap();
    for n in 0..250 {
        put(s3, "logs", &format!("logs/{n:04}")).await;
    }
    for n in 0..3 {
        put(s3, "logs", &format!("keep/{n}")).await;
    }
    s3.create_multipart_upload()
        .bucket("logs")
        .key("logs/big")
        .send()
        .await
        .unwrap();
    set_rules(
        s3,
        "logs",
        vec![
            rule("logs", "logs/")
                .expiration(expire_after(1))
                .abort_incomplete_multipart_upload(
                    AbortIncompleteMultipartUpload::builder()
                        .days_after_initiation(1)
                        .build(),
                )
                .build()
                .unwrap(),
        ],
    )
    .await;
    let store = &gw.gateway.store;
    // Nothing is old enough yet.
    assert_eq!(store.apply_lifecycle(100).await.unwrap().expired, 0);
    age(&gw, "logs").await;
    let mut passes = Vec::new();
    loop {
        let stats = store.apply_lifecycle(100).await.unwrap();
        passes.push(stats.expired);
        if stats.expired == 0 {
            break;
        }
        if passes.len() == 1 {
            assert_eq!(stats.uploads_aborted, 1);
        }
    }
    assert_eq!(passes, vec![100, 100, 50, 0]);
    assert_eq!(keys(s3, "logs").await, vec!["keep/0", "keep/1", "keep/2"]);
    let uploads = s3.list_multipart_uploads().bucket("logs").send().await.unwrap();
    assert!(uploads.uploads().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn versioned_rules_keep_newer_versions_and_remove_lone_markers() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("ver").send().await.unwrap();
    set_versioning(s3, "ver", BucketVersioningStatus::Enabled).await;
    let mut doc = Vec::new();
    for _ in 0..4 {
        doc.push(put(s3, "ver", "doc").await.unwrap());
    }
    put(s3, "ver", "old/report").await.unwrap();
    let gone = put(s3, "ver", "gone").await.unwrap();
    s3.delete_object().bucket("ver").key("gone").send().await.unwrap();
    set_rules(
        s3,
        "ver",
        vec![
            rule("doc", "doc")
                .noncurrent_version_expiration(
                    NoncurrentVersionExpiration::builder()
                        .noncurrent_days(1)
                        .newer_noncurrent_versions(1)
                        .build(),
                )
                .build()
                .unwrap(),
            rule("gone", "gone")
                .noncurrent_version_expiration(NoncurrentVersionExpiration::builder().noncurrent_days(1).build())
                .build()
                .unwrap(),
            rule("old", "old/").expiration(expire_after(1)).build().unwrap(),
            rule("markers", "")
                .expiration(
                    LifecycleExpiration::builder()
                        .expired_object_delete_marker(true)
                        .build(),
                )
                .build()
                .unwrap(),
        ],
    )
    .await;
    age(&gw, "ver").await;
    let store = &gw.gateway.store;
    let first = store.apply_lifecycle(1000).await.unwrap();
    // doc: two of its three noncurrent versions (the newest is kept); gone: its only data.
    assert_eq!(first.noncurrent_deleted, 3, "{first:?}");
    assert_eq!(first.expired, 1, "old/report is hidden behind a delete marker");
    // gone's marker became lone in this pass (the marker rule comes last) and went with it.
    assert_eq!(first.delete_markers_removed, 1, "{first:?}");
    let versions = s3.list_object_versions().bucket("ver").send().await.unwrap();
    let doc_versions: Vec<&str> = versions
        .versions()
        .iter()
        .filter(|v| v.key() == Some("doc"))
        .filter_map(|v| v.version_id())
        .collect();
    assert_eq!(doc_versions, vec![doc[3].as_str(), doc[2].as_str()]);
    assert!(versions.versions().iter().all(|v| v.key() != Some("gone")));
    assert!(
        versions.delete_markers().iter().all(|m| m.key() != Some("gone")),
        "{gone}"
    );
    // old/report's data stays as a noncurrent version behind its marker.
    assert!(versions.delete_markers().iter().any(|m| m.key() == Some("old/report")));
    assert!(versions.versions().iter().any(|v| v.key() == Some("old/report")));
    assert_eq!(keys(s3, "ver").await, vec!["doc"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifecycle_never_removes_a_locked_version() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket()
        .bucket("vault")
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    let locked = put_request(s3, "vault", "db.bak", b"v1")
        .object_lock_mode(ObjectLockMode::Compliance)
        .object_lock_retain_until_date(DateTime::from(SystemTime::now() + Duration::from_secs(86_400 * 10)))
        .send()
        .await
        .unwrap()
        .version_id
        .unwrap();
    let unlocked = put(s3, "vault", "db.bak").await.unwrap();
    put(s3, "vault", "db.bak").await.unwrap();
    set_rules(
        s3,
        "vault",
        vec![
            rule("noncurrent", "")
                .noncurrent_version_expiration(NoncurrentVersionExpiration::builder().noncurrent_days(1).build())
                .build()
                .unwrap(),
        ],
    )
    .await;
    age(&gw, "vault").await;
    let stats = gw.gateway.store.apply_lifecycle(1000).await.unwrap();
    assert_eq!(
        stats.noncurrent_deleted, 1,
        "only the unlocked noncurrent version: {stats:?}"
    );
    let read = s3
        .get_object()
        .bucket("vault")
        .key("db.bak")
        .version_id(&locked)
        .send()
        .await
        .unwrap();
    assert_eq!(read.body.collect().await.unwrap().to_vec(), b"v1");
    let removed = s3
        .head_object()
        .bucket("vault")
        .key("db.bak")
        .version_id(&unlocked)
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&removed), 404);
}

/// Issue 34: a rule given the legacy rule-level `Prefix` (no `Filter`) comes back as it was sent
/// — before, it came back as `Filter.Prefix`, and infrastructure-as-code tools saw a change on
/// every plan. A rule with a `Filter` still comes back with one.
#[tokio::test]
#[allow(deprecated)]
async fn a_rule_level_prefix_comes_back_as_it_was_sent() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("legacy").send().await.unwrap();
    let legacy = LifecycleRule::builder()
        .id("old")
        .status(ExpirationStatus::Enabled)
        .prefix("old/")
        .expiration(expire_after(7))
        .build()
        .unwrap();
    set_rules(
        s3,
        "legacy",
        vec![legacy, rule("new", "new/").expiration(expire_after(7)).build().unwrap()],
    )
    .await;
    let rules = s3
        .get_bucket_lifecycle_configuration()
        .bucket("legacy")
        .send()
        .await
        .unwrap()
        .rules
        .unwrap();
    assert_eq!(rules[0].prefix.as_deref(), Some("old/"));
    assert!(rules[0].filter.is_none(), "{:?}", rules[0].filter);
    assert_eq!(rules[1].prefix, None);
    assert_eq!(rules[1].filter.as_ref().unwrap().prefix.as_deref(), Some("new/"));
    gw.stop().await;
}

/// The body of `key`'s current version, or the error code.
async fn body(s3: &Client, bucket: &str, key: &str) -> Result<Vec<u8>, String> {
    match s3.get_object().bucket(bucket).key(key).send().await {
        Ok(read) => Ok(read.body.collect().await.unwrap().into_bytes().to_vec()),
        Err(err) => Err(error_code(&err)),
    }
}

/// A transaction holding `sql` (a lock the pass takes on `key` of `bucket`, `$1` and `$2`),
/// and the pass waiting for it: `meanwhile` runs, then the transaction ends and the pass goes on.
async fn pass_waiting_on(
    gw: &TestGateway,
    sql: &str,
    bucket: &str,
    key: &str,
    meanwhile: impl Future<Output = ()>,
) -> LifecycleStats {
    let holder = gw.sql().await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder.execute(sql, &[&bucket, &key]).await.unwrap();
    let watch = gw.sql().await;
    let go_on = async {
        common::eventually(
            Duration::from_secs(30),
            "the pass waiting for the held lock",
            || async { (common::lock_waiters(&watch).await == 1).then_some(()) },
        )
        .await;
        meanwhile.await;
        holder.batch_execute("COMMIT").await.unwrap();
    };
    let (stats, ()) = tokio::join!(gw.gateway.store.apply_lifecycle(1000), go_on);
    stats.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expiry_spares_a_version_written_after_the_pass_picked_it() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    for (bucket, state) in [
        ("suspended", BucketVersioningStatus::Suspended),
        ("enabled", BucketVersioningStatus::Enabled),
    ] {
        s3.create_bucket().bucket(bucket).send().await.unwrap();
        set_versioning(s3, bucket, state).await;
        put_object(s3, bucket, "a", b"old a").await;
        put_object(s3, bucket, "b", b"old b").await;
        set_rules(
            s3,
            bucket,
            vec![rule("all", "").expiration(expire_after(1)).build().unwrap()],
        )
        .await;
        age(&gw, bucket).await;
        // The pass picks a and b, then waits for the key locks of a (every writer of a key's
        // versions takes them, store/versions.rs): b is written meanwhile, and acknowledged.
        let key_locks = "SELECT pg_advisory_xact_lock(id::int4, hashtext($2::text)) FROM pgvs3.buckets WHERE name = $1";
        let write_b = async {
            put_object(s3, bucket, "b", b"new b").await;
        };
        let stats = pass_waiting_on(&gw, key_locks, bucket, "a", write_b).await;
        assert_eq!(stats.expired, 1, "{bucket}: a alone: {stats:?}");
        assert_eq!(body(s3, bucket, "a").await, Err("NoSuchKey".into()), "{bucket}");
        // Not deleted for good (Suspended), nor hidden behind a marker (Enabled).
        assert_eq!(body(s3, bucket, "b").await, Ok(b"new b".to_vec()), "{bucket}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expiry_checks_the_rule_again_on_what_it_deletes() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("scratch").send().await.unwrap();
    for key in ["a", "b"] {
        put_request(s3, "scratch", key, b"data")
            .tagging("tier=scratch")
            .send()
            .await
            .unwrap();
    }
    let scratch = LifecycleRule::builder()
        .id("scratch")
        .status(ExpirationStatus::Enabled)
        .filter(
            LifecycleRuleFilter::builder()
                .tag(Tag::builder().key("tier").value("scratch").build().unwrap())
                .build(),
        )
        .expiration(expire_after(1))
        .build()
        .unwrap();
    set_rules(s3, "scratch", vec![scratch]).await;
    age(&gw, "scratch").await;
    // The pass's delete waits for a's row; b is tagged out of the rule meanwhile.
    let row_lock = "SELECT 1 FROM s3p.objects
                     WHERE bucket_id = (SELECT id FROM pgvs3.buckets WHERE name = $1) AND key = $2 FOR UPDATE";
    let retag_b = async {
        s3.put_object_tagging()
            .bucket("scratch")
            .key("b")
            .tagging(
                Tagging::builder()
                    .tag_set(Tag::builder().key("tier").value("keep").build().unwrap())
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    };
    let stats = pass_waiting_on(&gw, row_lock, "scratch", "a", retag_b).await;
    assert_eq!(stats.expired, 1, "a alone: {stats:?}");
    assert_eq!(keys(s3, "scratch").await, vec!["b"]);
}

fn tag(key: &str, value: &str) -> Tag {
    Tag::builder().key(key).value(value).build().unwrap()
}

fn filtered(id: &str, filter: LifecycleRuleFilter) -> LifecycleRule {
    LifecycleRule::builder()
        .id(id)
        .status(ExpirationStatus::Enabled)
        .filter(filter)
        .expiration(expire_after(1))
        .build()
        .unwrap()
}

fn and(and: aws_sdk_s3::types::builders::LifecycleRuleAndOperatorBuilder) -> LifecycleRuleFilter {
    LifecycleRuleFilter::builder().and(and.build()).build()
}

/// The status and code S3 refuses `rule` with.
async fn refusal(s3: &Client, bucket: &str, rule: LifecycleRule) -> (u16, String) {
    let err = s3
        .put_bucket_lifecycle_configuration()
        .bucket(bucket)
        .lifecycle_configuration(BucketLifecycleConfiguration::builder().rules(rule).build().unwrap())
        .send()
        .await
        .unwrap_err();
    (http_status(&err), error_code(&err))
}

/// Filters as S3 takes them: a Filter unless the rule has the rule-level Prefix, holding exactly
/// one of Prefix, Tag, a size bound and And, And joining two or more conditions with no tag key
/// twice; they come back as they were sent. A transition is
/// checked as S3 checks it (a Date at midnight GMT) before pgvs3 refuses it as not implemented.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn filters_and_transitions_are_checked_as_s3_checks_them() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("filters").send().await.unwrap();
    let both = LifecycleRuleFilter::builder()
        .prefix("days1/")
        .tag(tag("tom", "sawyer"))
        .build();
    assert_eq!(
        refusal(s3, "filters", filtered("both", both)).await,
        (400, "MalformedXML".into())
    );
    let size_and_prefix = LifecycleRuleFilter::builder()
        .prefix("")
        .object_size_greater_than(2000)
        .build();
    assert_eq!(
        refusal(s3, "filters", filtered("size", size_and_prefix)).await,
        (400, "MalformedXML".into())
    );
    let twice = and(LifecycleRuleAndOperator::builder()
        .tags(tag("k", "v"))
        .tags(tag("k", "w")));
    assert_eq!(
        refusal(s3, "filters", filtered("twice", twice)).await,
        (400, "InvalidRequest".into())
    );
    let unfiltered = LifecycleRule::builder()
        .id("unfiltered")
        .status(ExpirationStatus::Enabled)
        .expiration(expire_after(1))
        .build()
        .unwrap();
    assert_eq!(
        refusal(s3, "filters", unfiltered).await,
        (400, "MalformedXML".into()),
        "S3 requires a Filter of a rule without the rule-level Prefix"
    );
    let alone = and(LifecycleRuleAndOperator::builder().tags(tag("k", "v")));
    assert_eq!(
        refusal(s3, "filters", filtered("alone", alone)).await,
        (400, "MalformedXML".into())
    );
    // boto sends `'Date': '20220927'` as that many seconds after the epoch: not at midnight.
    let off_midnight = rule("cold", "")
        .transitions(
            Transition::builder()
                .date(DateTime::from_secs(20_220_927))
                .storage_class(TransitionStorageClass::Glacier)
                .build(),
        )
        .build()
        .unwrap();
    assert_eq!(
        refusal(s3, "filters", off_midnight).await,
        (400, "InvalidArgument".into())
    );

    let sent = vec![
        filtered(
            "tag",
            LifecycleRuleFilter::builder().tag(tag("tier", "scratch")).build(),
        ),
        filtered(
            "big",
            LifecycleRuleFilter::builder().object_size_greater_than(2000).build(),
        ),
        filtered(
            "small",
            LifecycleRuleFilter::builder().object_size_less_than(10).build(),
        ),
        filtered(
            "tags",
            and(LifecycleRuleAndOperator::builder()
                .tags(tag("a", "1"))
                .tags(tag("b", "2"))),
        ),
        filtered(
            "all",
            and(LifecycleRuleAndOperator::builder()
                .prefix("logs/")
                .tags(tag("a", "1"))
                .object_size_greater_than(10)
                .object_size_less_than(100)),
        ),
    ];
    set_rules(s3, "filters", sent.clone()).await;
    let got = s3
        .get_bucket_lifecycle_configuration()
        .bucket("filters")
        .send()
        .await
        .unwrap()
        .rules
        .unwrap();
    let filters = |rules: &[LifecycleRule]| rules.iter().map(|r| r.filter.clone()).collect::<Vec<_>>();
    assert_eq!(filters(&got), filters(&sent));
}

/// The pass applies tag and size filters to each object or version as it is when the pass runs:
/// sizes strictly above or below the bound, every tag of the filter among the object's current
/// tags (tags set after the write count, tags removed no longer do), a noncurrent version
/// judged by its own tags.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_pass_applies_tag_and_size_filters() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("sized").send().await.unwrap();
    set_rules(
        s3,
        "sized",
        vec![
            filtered(
                "big",
                and(LifecycleRuleAndOperator::builder()
                    .prefix("size/")
                    .object_size_greater_than(2000)),
            ),
            filtered(
                "small",
                and(LifecycleRuleAndOperator::builder()
                    .prefix("size/")
                    .object_size_less_than(10)),
            ),
            filtered(
                "scratch",
                and(LifecycleRuleAndOperator::builder()
                    .prefix("tag/")
                    .tags(tag("tier", "scratch"))
                    .tags(tag("team", "a"))),
            ),
        ],
    )
    .await;
    for (key, size) in [("size/2000", 2000), ("size/2001", 2001), ("size/9", 9), ("size/10", 10)] {
        let written = put_object(s3, "sized", key, vec![b'x'; size]).await;
        let rule = written.expiration.as_deref().and_then(|e| e.split("rule-id=").nth(1));
        let want = match size {
            2001 => Some("\"big\""),
            9 => Some("\"small\""),
            _ => None,
        };
        assert_eq!(rule, want, "{key}");
    }
    let both = "tier=scratch&team=a";
    put_request(s3, "sized", "tag/both", b"x".to_vec())
        .tagging(both)
        .send()
        .await
        .unwrap();
    put_request(s3, "sized", "tag/one", b"x".to_vec())
        .tagging("tier=scratch")
        .send()
        .await
        .unwrap();
    put_request(s3, "sized", "tag/dropped", b"x".to_vec())
        .tagging(both)
        .send()
        .await
        .unwrap();
    put(s3, "sized", "tag/later").await;
    put_request(s3, "sized", "other/both", b"x".to_vec())
        .tagging(both)
        .send()
        .await
        .unwrap();
    s3.delete_object_tagging()
        .bucket("sized")
        .key("tag/dropped")
        .send()
        .await
        .unwrap();
    s3.put_object_tagging()
        .bucket("sized")
        .key("tag/later")
        .tagging(
            Tagging::builder()
                .tag_set(tag("tier", "scratch"))
                .tag_set(tag("team", "a"))
                .tag_set(tag("extra", "kept"))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    age(&gw, "sized").await;
    let stats = gw.gateway.store.apply_lifecycle(1000).await.unwrap();
    assert_eq!(stats.expired, 4, "{stats:?}");
    assert_eq!(
        keys(s3, "sized").await,
        vec!["other/both", "size/10", "size/2000", "tag/dropped", "tag/one"]
    );

    // Versioned: a noncurrent version goes by its own tags, whatever the current one has.
    s3.create_bucket().bucket("kept").send().await.unwrap();
    set_versioning(s3, "kept", BucketVersioningStatus::Enabled).await;
    let mut doc = Vec::new();
    for tagging in [Some("tier=scratch"), None, Some("tier=scratch")] {
        let mut write = put_request(s3, "kept", "doc", b"x".to_vec());
        if let Some(tagging) = tagging {
            write = write.tagging(tagging);
        }
        doc.push(write.send().await.unwrap().version_id.unwrap());
    }
    set_rules(
        s3,
        "kept",
        vec![
            LifecycleRule::builder()
                .id("scratch")
                .status(ExpirationStatus::Enabled)
                .filter(LifecycleRuleFilter::builder().tag(tag("tier", "scratch")).build())
                .noncurrent_version_expiration(NoncurrentVersionExpiration::builder().noncurrent_days(1).build())
                .build()
                .unwrap(),
        ],
    )
    .await;
    age(&gw, "kept").await;
    let stats = gw.gateway.store.apply_lifecycle(1000).await.unwrap();
    assert_eq!(stats.noncurrent_deleted, 1, "{stats:?}");
    let versions = s3.list_object_versions().bucket("kept").send().await.unwrap();
    let left: Vec<&str> = versions.versions().iter().filter_map(|v| v.version_id()).collect();
    assert_eq!(left, vec![doc[2].as_str(), doc[1].as_str()]);
}
