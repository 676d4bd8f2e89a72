//! A key's own policy (an IAM identity policy attached with `pgvs3 admin key policy`): it
//! narrows what the key may do — its own buckets included, down to one prefix or to reads —
//! with an explicit Deny winning, and never grants beyond what the key had (another key's
//! bucket stays closed). Detached, the key is an owner again.

use pgvs3_testkit as common;

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::types::{Delete, ObjectCannedAcl, ObjectIdentifier, ObjectOwnership};
use common::TestGateway;
use common::s3::{add_key, copy_request, get, list, put, put_request};

const TEAM_ONLY: &str = r#"{"Version":"2012-10-17","Statement":[
  {"Effect":"Allow","Action":["s3:GetObject","s3:PutObject","s3:DeleteObject"],"Resource":"arn:aws:s3:::bobs/team/*"},
  {"Effect":"Allow","Action":"s3:ListBucket","Resource":"arn:aws:s3:::bobs",
   "Condition":{"StringLike":{"s3:prefix":"team/*"}}},
  {"Effect":"Deny","Action":"s3:DeleteObject","Resource":"arn:aws:s3:::bobs/team/keep*"}]}"#;

#[tokio::test]
async fn a_key_policy_narrows_a_key_to_what_it_allows() {
    let gw = TestGateway::start().await;
    let catalog = gw.gateway.store.catalog();
    let bob = add_key(&gw, "BOBKEY").await;
    let carol = add_key(&gw, "CAROLKEY").await;
    bob.create_bucket().bucket("bobs").send().await.unwrap();
    carol.create_bucket().bucket("carols").send().await.unwrap();
    put(&bob, "bobs", "other/before").await.unwrap();
    put(&carol, "carols", "c").await.unwrap();

    assert!(catalog.set_key_policy("BOBKEY", Some(TEAM_ONLY)).await.unwrap());
    // Inside the prefix: writes, reads, listing, deletes (but not what Deny keeps).
    put(&bob, "bobs", "team/a").await.unwrap();
    put(&bob, "bobs", "team/keep-me").await.unwrap();
    get(&bob, "bobs", "team/a").await.unwrap();
    assert_eq!(list(&bob, "bobs", Some("team/")).await, Ok(2));
    // Outside it, even in the key's own bucket: AccessDenied.
    assert_eq!(put(&bob, "bobs", "other/b").await, Err("AccessDenied".into()));
    assert_eq!(get(&bob, "bobs", "other/before").await, Err("AccessDenied".into()));
    assert_eq!(list(&bob, "bobs", None).await, Err("AccessDenied".into()));
    let tagging = bob.get_bucket_tagging().bucket("bobs").send().await.unwrap_err();
    assert_eq!(tagging.into_service_error().meta().code(), Some("AccessDenied"));
    let create = bob.create_bucket().bucket("bobs-second").send().await.unwrap_err();
    assert_eq!(create.into_service_error().meta().code(), Some("AccessDenied"));
    // A copy needs the source allowed too.
    copy_request(&bob, "bobs", "team/copy", "bobs/team/a")
        .send()
        .await
        .unwrap();
    let copy = copy_request(&bob, "bobs", "team/stolen", "bobs/other/before")
        .send()
        .await
        .unwrap_err();
    assert_eq!(copy.into_service_error().meta().code(), Some("AccessDenied"));
    // DeleteObjects decides key by key.
    let ids = ["team/a", "team/keep-me", "other/before"]
        .map(|key| ObjectIdentifier::builder().key(key).build().unwrap())
        .to_vec();
    let deleted = bob
        .delete_objects()
        .bucket("bobs")
        .delete(Delete::builder().set_objects(Some(ids)).build().unwrap())
        .send()
        .await
        .unwrap();
    let removed: Vec<&str> = deleted.deleted().iter().filter_map(|d| d.key()).collect();
    assert_eq!(removed, ["team/a"]);
    let refused: Vec<(&str, &str)> = deleted
        .errors()
        .iter()
        .map(|e| (e.key().unwrap_or_default(), e.code().unwrap_or_default()))
        .collect();
    assert_eq!(
        refused,
        [("team/keep-me", "AccessDenied"), ("other/before", "AccessDenied")]
    );
    let kept = gw.client.list_objects_v2().bucket("bobs").send().await.unwrap();
    assert_eq!(
        kept.contents().len(),
        3,
        "team/keep-me, team/copy and other/before remain"
    );

    // A policy only narrows: allowing everything does not open another key's bucket.
    let everything = r#"{"Statement":{"Effect":"Allow","Action":"s3:*","Resource":"*"}}"#;
    assert!(catalog.set_key_policy("BOBKEY", Some(everything)).await.unwrap());
    put(&bob, "bobs", "other/now").await.unwrap();
    assert_eq!(get(&bob, "carols", "c").await, Err("AccessDenied".into()));
    assert_eq!(put(&bob, "carols", "x").await, Err("AccessDenied".into()));
    // Carol, without a policy, is an owner as before.
    put(&carol, "carols", "d").await.unwrap();

    // Detached: an owner again.
    assert!(catalog.set_key_policy("BOBKEY", None).await.unwrap());
    assert_eq!(list(&bob, "bobs", None).await, Ok(4));
    bob.create_bucket().bucket("bobs-second").send().await.unwrap();
    gw.stop().await;
}

#[tokio::test]
async fn key_policies_are_identity_policies_and_not_for_the_root_key() {
    let gw = TestGateway::start().await;
    let catalog = gw.gateway.store.catalog();
    add_key(&gw, "BOBKEY").await;
    let with_principal =
        r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}}"#;
    let err = catalog
        .set_key_policy("BOBKEY", Some(with_principal))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("should not specify a principal"), "{err}");
    let bad_action = r#"{"Statement":{"Effect":"Allow","Action":"s3:Fly","Resource":"*"}}"#;
    assert!(catalog.set_key_policy("BOBKEY", Some(bad_action)).await.is_err());
    let fine = r#"{"Statement":{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}}"#;
    assert!(
        !catalog
            .set_key_policy(common::ROOT_ACCESS_KEY, Some(fine))
            .await
            .unwrap()
    );
    assert!(!catalog.set_key_policy("NOSUCHKEY", Some(fine)).await.unwrap());
    // The root key is untouched: it still creates buckets.
    gw.client.create_bucket().bucket("rooted").send().await.unwrap();
    gw.stop().await;
}

/// A key can sign its first request before a gateway's catalog has reloaded for it (the key is
/// then looked up on its own, outside a reload): its policy must narrow it from that first
/// request, not from the reload. A catalog of its own, with no notification listener, learns
/// the key only by that lookup.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_looked_up_before_the_catalog_reloads_is_held_to_its_policy() {
    let gw = TestGateway::start().await;
    let master_key = pgvs3_gateway::master_key::MasterKey::from_text(common::MASTER_KEY);
    let apart = pgvs3_gateway::store::Catalog::load(gw.gateway.store.pool().clone(), master_key)
        .await
        .unwrap();
    assert!(!apart.has_access_rules(), "no bucket or key has rules yet");
    add_key(&gw, "DAVEKEY").await;
    let catalog = gw.gateway.store.catalog();
    assert!(catalog.set_key_policy("DAVEKEY", Some(TEAM_ONLY)).await.unwrap());
    let dave = apart.access_key("DAVEKEY").await.unwrap().expect("the key exists");
    assert!(dave.policy.is_some());
    assert!(
        apart.has_access_rules(),
        "a key with a policy, learnt outside a reload, must switch the access checks on"
    );
}

/// "allowed", or the S3 error code of a refused call.
fn outcome<T, E: ProvideErrorMetadata, R>(result: Result<T, SdkError<E, R>>) -> String {
    match result {
        Ok(_) => "allowed".to_owned(),
        Err(err) => err.code().unwrap_or_default().to_owned(),
    }
}

/// Hostile: a key allowed only `s3:PutObject` must not set an ACL on what it writes (a canned
/// ACL or a grant header, on PutObject, CopyObject and CreateMultipartUpload): AWS requires
/// `s3:PutObjectAcl` too. (Before: `x-amz-acl: public-read` went through.) The same holds for
/// a bucket policy's grant to another key.
#[tokio::test]
async fn writing_an_object_with_an_acl_needs_put_object_acl() {
    let gw = TestGateway::start().await;
    let catalog = gw.gateway.store.catalog();
    let bob = add_key(&gw, "BOBKEY").await;
    let carol = add_key(&gw, "CAROLKEY").await;
    bob.create_bucket()
        .bucket("bobs")
        .object_ownership(ObjectOwnership::ObjectWriter)
        .send()
        .await
        .unwrap();
    put(&bob, "bobs", "source").await.unwrap();
    let write_only = r#"{"Version":"2012-10-17","Statement":[
      {"Effect":"Allow","Action":["s3:PutObject","s3:GetObject"],"Resource":"arn:aws:s3:::bobs/*"}]}"#;
    assert!(catalog.set_key_policy("BOBKEY", Some(write_only)).await.unwrap());
    let all_users = "uri=\"http://acs.amazonaws.com/groups/global/AllUsers\"";
    let attempts = |client: aws_sdk_s3::Client| async move {
        let canned = put_request(&client, "bobs", "public", b"x".to_vec())
            .acl(ObjectCannedAcl::PublicRead)
            .send()
            .await;
        let granted = put_request(&client, "bobs", "granted", b"x".to_vec())
            .grant_read(all_users)
            .send()
            .await;
        let copied = copy_request(&client, "bobs", "copied", "bobs/source")
            .acl(ObjectCannedAcl::PublicRead)
            .send()
            .await;
        let multipart = client
            .create_multipart_upload()
            .bucket("bobs")
            .key("parts")
            .acl(ObjectCannedAcl::PublicRead)
            .send()
            .await;
        [outcome(canned), outcome(granted), outcome(copied), outcome(multipart)]
    };
    assert_eq!(attempts(bob.clone()).await, ["AccessDenied"; 4]);
    // Without an ACL the same writes go through.
    put(&bob, "bobs", "plain").await.unwrap();
    copy_request(&bob, "bobs", "copy", "bobs/source").send().await.unwrap();
    // With s3:PutObjectAcl allowed as well, they all do.
    let with_acl = r#"{"Version":"2012-10-17","Statement":[
      {"Effect":"Allow","Action":["s3:PutObject","s3:GetObject","s3:PutObjectAcl"],"Resource":"arn:aws:s3:::bobs/*"}]}"#;
    assert!(catalog.set_key_policy("BOBKEY", Some(with_acl)).await.unwrap());
    assert_eq!(attempts(bob.clone()).await, ["allowed"; 4]);

    // A bucket policy granting carol only s3:PutObject (and reads) in bob's bucket.
    assert!(catalog.set_key_policy("BOBKEY", None).await.unwrap());
    let carol_writes = r#"{"Version":"2012-10-17","Statement":[
      {"Effect":"Allow","Principal":{"AWS":"CAROLKEY"},"Action":["s3:PutObject","s3:GetObject"],"Resource":"arn:aws:s3:::bobs/*"}]}"#;
    bob.put_bucket_policy()
        .bucket("bobs")
        .policy(carol_writes)
        .send()
        .await
        .unwrap();
    put(&carol, "bobs", "by-carol").await.unwrap();
    assert_eq!(attempts(carol.clone()).await, ["AccessDenied"; 4]);
    gw.stop().await;
}
