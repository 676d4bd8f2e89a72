//! S3 object lock with aws-sdk-s3, as AWS S3 behaves: buckets created with object lock (and so
//! versioned for good), default retention, retention and legal hold set on versions, and the
//! enforcement: a protected version is removed by no request — the root key's included — and
//! by no reaper pass, a GOVERNANCE retention only with the bypass header, a COMPLIANCE one never
//! shortened; delete markers still work; errors as S3 answers them.

use pgvs3_testkit as common;

use std::time::{Duration, SystemTime};

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::DateTime;
use aws_sdk_s3::types::{
    BucketVersioningStatus, DefaultRetention, ObjectLockConfiguration, ObjectLockEnabled, ObjectLockLegalHold,
    ObjectLockLegalHoldStatus, ObjectLockMode, ObjectLockRetention, ObjectLockRetentionMode, ObjectLockRule,
    VersioningConfiguration,
};
use common::s3::{
    copy_request, error_code, head_object, http_status, put_object, put_request, read_version, set_versioning,
};
use common::{TestGateway, noise};

fn in_days(days: u64) -> DateTime {
    DateTime::from(SystemTime::now() + Duration::from_secs(days * 86_400))
}

/// A retention of `mode` until `until`.
fn retention_until(mode: ObjectLockRetentionMode, until: DateTime) -> ObjectLockRetention {
    ObjectLockRetention::builder()
        .mode(mode)
        .retain_until_date(until)
        .build()
}

async fn put(s3: &Client, bucket: &str, key: &str, body: Vec<u8>) -> String {
    put_object(s3, bucket, key, body)
        .await
        .version_id
        .expect("a locked bucket is versioned")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn locked_versions_survive_every_delete() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket()
        .bucket("vault")
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    let versioning = s3.get_bucket_versioning().bucket("vault").send().await.unwrap();
    assert_eq!(versioning.status, Some(BucketVersioningStatus::Enabled));
    let config = s3.get_object_lock_configuration().bucket("vault").send().await.unwrap();
    let config = config.object_lock_configuration.unwrap();
    assert_eq!(config.object_lock_enabled, Some(ObjectLockEnabled::Enabled));
    assert!(config.rule.is_none());
    // Versioning stays Enabled under object lock.
    let suspend = s3
        .put_bucket_versioning()
        .bucket("vault")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Suspended)
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&suspend), "InvalidBucketState");

    // A COMPLIANCE version: 300 kB, so it has a chunked body for the reaper to look at.
    let body = noise(300_000, 7);
    let compliance = put_request(s3, "vault", "backup.vbk", body.clone())
        .object_lock_mode(ObjectLockMode::Compliance)
        .object_lock_retain_until_date(in_days(2))
        .send()
        .await
        .unwrap()
        .version_id
        .unwrap();
    let head = head_object(s3, "vault", "backup.vbk").await;
    assert_eq!(head.object_lock_mode, Some(ObjectLockMode::Compliance));
    assert!(head.object_lock_retain_until_date.is_some());
    // Removing it is refused for every key, root included, with or without the bypass.
    for bypass in [false, true] {
        let refused = s3
            .delete_object()
            .bucket("vault")
            .key("backup.vbk")
            .version_id(&compliance)
            .bypass_governance_retention(bypass)
            .send()
            .await
            .unwrap_err();
        assert_eq!(error_code(&refused), "AccessDenied");
    }
    // A COMPLIANCE retention is never shortened nor weakened to GOVERNANCE.
    for (mode, days) in [
        (ObjectLockRetentionMode::Compliance, 1),
        (ObjectLockRetentionMode::Governance, 3),
    ] {
        let shortened = s3
            .put_object_retention()
            .bucket("vault")
            .key("backup.vbk")
            .version_id(&compliance)
            .bypass_governance_retention(true)
            .retention(retention_until(mode, in_days(days)))
            .send()
            .await
            .unwrap_err();
        assert_eq!(error_code(&shortened), "AccessDenied");
    }
    // ... but it can be extended.
    s3.put_object_retention()
        .bucket("vault")
        .key("backup.vbk")
        .version_id(&compliance)
        .retention(retention_until(ObjectLockRetentionMode::Compliance, in_days(5)))
        .send()
        .await
        .unwrap();
    let retention = s3
        .get_object_retention()
        .bucket("vault")
        .key("backup.vbk")
        .version_id(&compliance)
        .send()
        .await
        .unwrap()
        .retention
        .unwrap();
    assert_eq!(retention.mode, Some(ObjectLockRetentionMode::Compliance));
    let until = SystemTime::try_from(retention.retain_until_date.unwrap()).unwrap();
    assert!(until > SystemTime::now() + Duration::from_secs(4 * 86_400));

    // A plain DELETE still writes a delete marker; the locked version stays readable by id.
    let marker = s3
        .delete_object()
        .bucket("vault")
        .key("backup.vbk")
        .send()
        .await
        .unwrap();
    assert_eq!(marker.delete_marker, Some(true));
    assert_eq!(read_version(s3, "vault", "backup.vbk", &compliance).await, body);
    // DeleteObjects reports the locked version as an error and removes nothing.
    let batch = s3
        .delete_objects()
        .bucket("vault")
        .delete(
            aws_sdk_s3::types::Delete::builder()
                .objects(
                    aws_sdk_s3::types::ObjectIdentifier::builder()
                        .key("backup.vbk")
                        .version_id(&compliance)
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(batch.errors().len(), 1, "{batch:?}");
    assert_eq!(batch.errors()[0].code(), Some("AccessDenied"));
    // The reaper frees nothing of it, and a forced drop of the bucket is refused.
    let reaped = gw.gateway.store.reap_retired(Duration::ZERO).await.unwrap();
    assert_eq!(reaped.bodies, 0, "{reaped:?}");
    let sql = gw.sql().await;
    let forced = sql
        .query_one("SELECT pgvs3.drop_bucket('vault', true)", &[])
        .await
        .unwrap_err();
    let message = forced
        .as_db_error()
        .map(|db| db.message().to_owned())
        .unwrap_or_default();
    assert!(message.contains("object lock"), "{forced:?}");
    assert_eq!(read_version(s3, "vault", "backup.vbk", &compliance).await, body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn governance_default_retention_and_legal_hold() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("plain").send().await.unwrap();
    // Object lock needs versioning Enabled first; lock headers need object lock.
    let config = ObjectLockConfiguration::builder()
        .object_lock_enabled(ObjectLockEnabled::Enabled)
        .rule(
            ObjectLockRule::builder()
                .default_retention(
                    DefaultRetention::builder()
                        .mode(ObjectLockRetentionMode::Governance)
                        .days(1)
                        .build(),
                )
                .build(),
        )
        .build();
    let refused = s3
        .put_object_lock_configuration()
        .bucket("plain")
        .object_lock_configuration(config.clone())
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&refused), "InvalidBucketState");
    let missing = s3
        .get_object_lock_configuration()
        .bucket("plain")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&missing), "ObjectLockConfigurationNotFoundError");
    let headers = put_request(s3, "plain", "k", b"x")
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&headers), "InvalidRequest");
    put_object(s3, "plain", "k", b"x").await;
    let retention = s3
        .get_object_retention()
        .bucket("plain")
        .key("k")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&retention), "InvalidRequest");

    // Enabled on an existing versioned bucket, with a default GOVERNANCE retention of a day.
    set_versioning(s3, "plain", BucketVersioningStatus::Enabled).await;
    s3.put_object_lock_configuration()
        .bucket("plain")
        .object_lock_configuration(config)
        .send()
        .await
        .unwrap();
    let rule = s3
        .get_object_lock_configuration()
        .bucket("plain")
        .send()
        .await
        .unwrap()
        .object_lock_configuration
        .unwrap()
        .rule
        .unwrap()
        .default_retention
        .unwrap();
    assert_eq!(rule.mode, Some(ObjectLockRetentionMode::Governance));
    assert_eq!(rule.days, Some(1));

    let defaulted = put(s3, "plain", "report.csv", b"a,b\n".to_vec()).await;
    let retention = s3
        .get_object_retention()
        .bucket("plain")
        .key("report.csv")
        .send()
        .await
        .unwrap()
        .retention
        .unwrap();
    assert_eq!(retention.mode, Some(ObjectLockRetentionMode::Governance));
    let until = SystemTime::try_from(retention.retain_until_date.unwrap()).unwrap();
    let day = Duration::from_secs(86_400);
    assert!(until > SystemTime::now() + day - Duration::from_secs(300) && until <= SystemTime::now() + day);
    // The version written before object lock has no retention.
    let none = s3
        .get_object_retention()
        .bucket("plain")
        .key("k")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&none), "NoSuchObjectLockConfiguration");

    // GOVERNANCE: refused without the bypass, shortened and removed with it.
    let refused = s3
        .delete_object()
        .bucket("plain")
        .key("report.csv")
        .version_id(&defaulted)
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&refused), "AccessDenied");
    let shorter = retention_until(
        ObjectLockRetentionMode::Governance,
        DateTime::from(SystemTime::now() + Duration::from_secs(3600)),
    );
    let refused = s3
        .put_object_retention()
        .bucket("plain")
        .key("report.csv")
        .retention(shorter.clone())
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&refused), "AccessDenied");
    s3.put_object_retention()
        .bucket("plain")
        .key("report.csv")
        .retention(shorter)
        .bypass_governance_retention(true)
        .send()
        .await
        .unwrap();

    // A legal hold protects whatever the retention, bypass or not, until it is lifted.
    s3.put_object_legal_hold()
        .bucket("plain")
        .key("report.csv")
        .version_id(&defaulted)
        .legal_hold(
            ObjectLockLegalHold::builder()
                .status(ObjectLockLegalHoldStatus::On)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let hold = s3
        .get_object_legal_hold()
        .bucket("plain")
        .key("report.csv")
        .send()
        .await
        .unwrap()
        .legal_hold
        .unwrap();
    assert_eq!(hold.status, Some(ObjectLockLegalHoldStatus::On));
    let held = s3
        .delete_object()
        .bucket("plain")
        .key("report.csv")
        .version_id(&defaulted)
        .bypass_governance_retention(true)
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&held), "AccessDenied");
    s3.put_object_legal_hold()
        .bucket("plain")
        .key("report.csv")
        .legal_hold(
            ObjectLockLegalHold::builder()
                .status(ObjectLockLegalHoldStatus::Off)
                .build(),
        )
        .send()
        .await
        .unwrap();
    s3.delete_object()
        .bucket("plain")
        .key("report.csv")
        .version_id(&defaulted)
        .bypass_governance_retention(true)
        .send()
        .await
        .unwrap();
    let gone = s3
        .head_object()
        .bucket("plain")
        .key("report.csv")
        .version_id(&defaulted)
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&gone), 404);

    // A copy gets its own request's lock (here the default), never its source's legal hold.
    let source = put_request(s3, "plain", "held", b"h")
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .send()
        .await
        .unwrap();
    assert!(source.version_id.is_some());
    copy_request(s3, "plain", "copy", "plain/held").send().await.unwrap();
    let copy = head_object(s3, "plain", "copy").await;
    assert_eq!(copy.object_lock_legal_hold_status, None);
    assert_eq!(copy.object_lock_mode, Some(ObjectLockMode::Governance));
}

/// Issue 34: a GOVERNANCE retention changed to COMPLIANCE needs the bypass header, as S3
/// answers (Ceph's s3-tests `test_object_lock_changing_mode_from_governance_without_bypass`:
/// 403 AccessDenied); before, the change went through. Extending it in the same mode does not.
#[tokio::test]
async fn governance_becomes_compliance_only_with_the_bypass() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket()
        .bucket("locked")
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    put(s3, "locked", "k", b"locked".to_vec()).await;
    let set = |mode: ObjectLockRetentionMode, days: u64, bypass: bool| {
        s3.put_object_retention()
            .bucket("locked")
            .key("k")
            .retention(retention_until(mode, in_days(days)))
            .set_bypass_governance_retention(bypass.then_some(true))
            .send()
    };
    set(ObjectLockRetentionMode::Governance, 1, false).await.unwrap();
    let refused = set(ObjectLockRetentionMode::Compliance, 2, false).await.unwrap_err();
    assert_eq!(
        (http_status(&refused), error_code(&refused).as_str()),
        (403, "AccessDenied")
    );
    set(ObjectLockRetentionMode::Governance, 2, false).await.unwrap();
    set(ObjectLockRetentionMode::Compliance, 2, true).await.unwrap();
    let kept = s3
        .get_object_retention()
        .bucket("locked")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(
        kept.retention().and_then(|retention| retention.mode()),
        Some(&ObjectLockRetentionMode::Compliance)
    );
    gw.stop().await;
}

/// Everything on its own bucket but bypassing GOVERNANCE retention.
const NO_BYPASS: &str = r#"{"Version":"2012-10-17","Statement":[
  {"Effect":"Allow","Action":"s3:*","Resource":["arn:aws:s3:::gov","arn:aws:s3:::gov/*"]},
  {"Effect":"Deny","Action":"s3:BypassGovernanceRetention","Resource":"arn:aws:s3:::gov/*"}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bypassing_governance_needs_its_permission() {
    let gw = TestGateway::start().await;
    let dave = common::s3::add_key(&gw, "DAVEKEY").await;
    dave.create_bucket()
        .bucket("gov")
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    let governed = || {
        put_request(&dave, "gov", "ledger", b"v1")
            .object_lock_mode(ObjectLockMode::Governance)
            .object_lock_retain_until_date(in_days(10))
            .send()
    };
    let version = governed().await.unwrap().version_id.unwrap();
    assert!(
        gw.gateway
            .store
            .catalog()
            .set_key_policy("DAVEKEY", Some(NO_BYPASS))
            .await
            .unwrap()
    );
    // As on AWS: the header asks for s3:BypassGovernanceRetention, which the key is denied,
    // whatever its s3:DeleteObjectVersion and s3:PutObjectRetention allow.
    let refused = dave
        .delete_object()
        .bucket("gov")
        .key("ledger")
        .version_id(&version)
        .bypass_governance_retention(true)
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&refused), "AccessDenied");
    let shorter = retention_until(
        ObjectLockRetentionMode::Governance,
        DateTime::from(SystemTime::now() + Duration::from_secs(3600)),
    );
    let refused = dave
        .put_object_retention()
        .bucket("gov")
        .key("ledger")
        .version_id(&version)
        .retention(shorter.clone())
        .bypass_governance_retention(true)
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&refused), "AccessDenied");
    let batch = dave
        .delete_objects()
        .bucket("gov")
        .bypass_governance_retention(true)
        .delete(
            aws_sdk_s3::types::Delete::builder()
                .objects(
                    aws_sdk_s3::types::ObjectIdentifier::builder()
                        .key("ledger")
                        .version_id(&version)
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let codes: Vec<&str> = batch.errors().iter().filter_map(|e| e.code()).collect();
    assert_eq!(codes, ["AccessDenied"]);
    assert!(batch.deleted().is_empty());
    let kept = read_version(&gw.client, "gov", "ledger", &version).await;
    assert_eq!(kept, b"v1");
    // Without the header the key keeps what its policy allows (a longer retention, a marker).
    dave.put_object_retention()
        .bucket("gov")
        .key("ledger")
        .version_id(&version)
        .retention(retention_until(ObjectLockRetentionMode::Governance, in_days(20)))
        .send()
        .await
        .unwrap();
    // The bucket's owner without a policy (the root key here) may bypass.
    gw.client
        .put_object_retention()
        .bucket("gov")
        .key("ledger")
        .version_id(&version)
        .retention(shorter)
        .bypass_governance_retention(true)
        .send()
        .await
        .unwrap();
    gw.client
        .delete_object()
        .bucket("gov")
        .key("ledger")
        .version_id(&version)
        .bypass_governance_retention(true)
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ttl_from_before_versioning_never_removes_a_version() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    let sql = gw.sql().await;
    s3.create_bucket().bucket("ttl").send().await.unwrap();
    put_object(s3, "ttl", "k", b"kept").await;
    // What RESP's `SET k v EX 3600` leaves in an unversioned bucket.
    let expire_in = |seconds: f64| {
        let sql = &sql;
        async move {
            sql.execute(
                "UPDATE s3p.objects SET expires_at = now() + make_interval(secs => $1) WHERE key = 'k'",
                &[&seconds],
            )
            .await
            .unwrap()
        }
    };
    assert_eq!(expire_in(3600.0).await, 1);
    set_versioning(s3, "ttl", BucketVersioningStatus::Enabled).await;
    let expiring = "SELECT count(*) FROM s3p.objects WHERE expires_at IS NOT NULL";
    assert_eq!(
        common::query_count(&sql, expiring, &[]).await,
        0,
        "versions do not expire"
    );
    s3.put_object_lock_configuration()
        .bucket("ttl")
        .object_lock_configuration(
            ObjectLockConfiguration::builder()
                .object_lock_enabled(ObjectLockEnabled::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    s3.put_object_legal_hold()
        .bucket("ttl")
        .key("k")
        .version_id("null")
        .legal_hold(
            ObjectLockLegalHold::builder()
                .status(ObjectLockLegalHoldStatus::On)
                .build(),
        )
        .send()
        .await
        .unwrap();
    // An expiry a RESP write racing the change of versioning set anyway, now past: the reaper
    // leaves the version (and its legal hold) alone.
    assert_eq!(expire_in(-1.0).await, 1);
    let reaped = gw.gateway.store.reap_retired(Duration::ZERO).await.unwrap();
    assert_eq!(reaped.expired_objects, 0, "{reaped:?}");
    assert_eq!(
        common::query_count(&sql, "SELECT count(*) FROM s3p.objects WHERE key = 'k'", &[]).await,
        1
    );
}
