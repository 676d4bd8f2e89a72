//! `s3:ExistingObjectTag/<tag>` in bucket and key policies, as S3 evaluates it: against the
//! tags of the object (of the version named) a request acts on, read with the object's row; a
//! grant on a tag opens tagged objects only (and closes again once the tag changes), a Deny on a
//! tag binds a key the policy otherwise allows, and requests acting on no existing object
//! (PutObject) see the key absent.

use pgvs3_testkit as common;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketVersioningStatus, Tag, Tagging};
use common::TestGateway;
use common::s3::{add_key, copy_request, error_code, get, put, set_versioning, unsigned};

/// Puts `key` with `tagging` (`share=yes`); returns its version id.
async fn put_tagged(client: &Client, bucket: &str, key: &str, tagging: &str) -> Option<String> {
    let mut put = client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from_static(b"data"));
    if !tagging.is_empty() {
        put = put.tagging(tagging);
    }
    put.send().await.unwrap().version_id().map(str::to_owned)
}

fn tagging(key: &str, value: &str) -> Tagging {
    Tagging::builder()
        .tag_set(Tag::builder().key(key).value(value).build().unwrap())
        .build()
        .unwrap()
}

async fn set_tag(client: &Client, bucket: &str, key: &str, tag: (&str, &str)) -> Result<(), String> {
    client
        .put_object_tagging()
        .bucket(bucket)
        .key(key)
        .tagging(tagging(tag.0, tag.1))
        .send()
        .await
        .map(|_| ())
        .map_err(|err| error_code(&err))
}

async fn tags_of(
    client: &Client,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> Result<Vec<(String, String)>, String> {
    let got = client
        .get_object_tagging()
        .bucket(bucket)
        .key(key)
        .set_version_id(version.map(str::to_owned))
        .send()
        .await
        .map_err(|err| error_code(&err))?;
    Ok(got
        .tag_set()
        .iter()
        .map(|tag| (tag.key().to_owned(), tag.value().to_owned()))
        .collect())
}

/// HEAD answers have no body: a refusal is known by its status alone.
async fn head(client: &Client, bucket: &str, key: &str, version: Option<&str>) -> Result<(), u16> {
    client
        .head_object()
        .bucket(bucket)
        .key(key)
        .set_version_id(version.map(str::to_owned))
        .send()
        .await
        .map(|_| ())
        .map_err(|err| err.raw_response().map_or(0, |raw| raw.status().as_u16()))
}

async fn get_version(client: &Client, bucket: &str, key: &str, version: &str) -> Result<(), String> {
    client
        .get_object()
        .bucket(bucket)
        .key(key)
        .version_id(version)
        .send()
        .await
        .map(|_| ())
        .map_err(|err| error_code(&err))
}

#[tokio::test]
async fn a_grant_on_a_tag_opens_tagged_objects_only() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("shelf").send().await.unwrap();
    put_tagged(&gw.client, "shelf", "shared", "share=yes").await;
    put_tagged(&gw.client, "shelf", "plain", "").await;
    put_tagged(&gw.client, "shelf", "revoked", "share=yes&team=a").await;
    put_tagged(&gw.client, "shelf", "mine", "share=yes").await;
    let bob = add_key(&gw, "BOBKEY").await;
    let policy = r#"{"Version":"2012-10-17","Statement":[
        {"Effect":"Allow","Principal":{"AWS":"BOBKEY"},
         "Action":["s3:GetObject","s3:GetObjectTagging","s3:PutObjectTagging","s3:PutObject"],
         "Resource":"arn:aws:s3:::shelf/*",
         "Condition":{"StringEquals":{"s3:ExistingObjectTag/share":"yes"}}},
        {"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::shelf/*",
         "Condition":{"StringEquals":{"s3:ExistingObjectTag/public":"yes"}}}]}"#;
    gw.client
        .put_bucket_policy()
        .bucket("shelf")
        .policy(policy)
        .send()
        .await
        .unwrap();

    get(&bob, "shelf", "shared").await.unwrap();
    head(&bob, "shelf", "shared", None).await.unwrap();
    assert_eq!(
        tags_of(&bob, "shelf", "shared", None).await,
        Ok(vec![("share".into(), "yes".into())])
    );
    assert_eq!(get(&bob, "shelf", "plain").await, Err("AccessDenied".into()));
    assert_eq!(head(&bob, "shelf", "plain", None).await, Err(403));
    assert_eq!(tags_of(&bob, "shelf", "plain", None).await, Err("AccessDenied".into()));
    // A missing object has no tags: no permission, so 403 (S3 decides before it looks).
    assert_eq!(get(&bob, "shelf", "missing").await, Err("AccessDenied".into()));
    // PutObject acts on no existing object: the key is absent and StringEquals does not match.
    assert_eq!(put(&bob, "shelf", "new").await, Err("AccessDenied".into()));

    // The owner changes a tag: the grant closes.
    get(&bob, "shelf", "revoked").await.unwrap();
    set_tag(&gw.client, "shelf", "revoked", ("share", "no")).await.unwrap();
    assert_eq!(get(&bob, "shelf", "revoked").await, Err("AccessDenied".into()));

    // A tag write is decided on the tags it replaces: bob may untag what is shared, once.
    set_tag(&bob, "shelf", "mine", ("share", "no")).await.unwrap();
    assert_eq!(
        set_tag(&bob, "shelf", "mine", ("share", "yes")).await,
        Err("AccessDenied".into())
    );
    assert_eq!(
        tags_of(&gw.client, "shelf", "mine", None).await,
        Ok(vec![("share".into(), "no".into())]),
        "the refused write changed nothing"
    );
    assert_eq!(
        set_tag(&bob, "shelf", "plain", ("share", "yes")).await,
        Err("AccessDenied".into())
    );

    // Anonymous readers get what the tag grants to everyone, and nothing else.
    put_tagged(&gw.client, "shelf", "poster", "public=yes").await;
    let read = unsigned(&gw, "GET", "/shelf/poster", b"").await;
    assert_eq!((read.status, read.body.as_str()), (200, "data"));
    let refused = unsigned(&gw, "GET", "/shelf/shared", b"").await;
    assert_eq!((refused.status, refused.code()), (403, Some("AccessDenied")));
    let refused = unsigned(&gw, "HEAD", "/shelf/plain", b"").await;
    assert_eq!(refused.status, 403);

    // The owner is not narrowed by a grant to another key.
    get(&gw.client, "shelf", "plain").await.unwrap();
    gw.stop().await;
}

#[tokio::test]
async fn a_deny_on_a_tag_binds_a_key_the_policy_otherwise_allows_version_by_version() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("vault").send().await.unwrap();
    set_versioning(&gw.client, "vault", BucketVersioningStatus::Enabled).await;
    put_tagged(&gw.client, "vault", "memo", "").await;
    put_tagged(&gw.client, "vault", "plans", "classification=secret").await;
    let secret = put_tagged(&gw.client, "vault", "doc", "classification=secret")
        .await
        .unwrap();
    let public = put_tagged(&gw.client, "vault", "doc", "classification=public")
        .await
        .unwrap();
    let bob = add_key(&gw, "BOBKEY").await;
    let policy = r#"{"Version":"2012-10-17","Statement":[
        {"Effect":"Allow","Principal":{"AWS":"BOBKEY"},"Action":"s3:*",
         "Resource":["arn:aws:s3:::vault","arn:aws:s3:::vault/*"]},
        {"Effect":"Deny","Principal":{"AWS":"BOBKEY"},
         "Action":["s3:GetObject","s3:GetObjectVersion","s3:GetObjectVersionTagging","s3:DeleteObjectVersionTagging"],
         "Resource":"arn:aws:s3:::vault/*",
         "Condition":{"StringEquals":{"s3:ExistingObjectTag/classification":"secret"}}}]}"#;
    gw.client
        .put_bucket_policy()
        .bucket("vault")
        .policy(policy)
        .send()
        .await
        .unwrap();

    get(&bob, "vault", "memo").await.unwrap();
    assert_eq!(get(&bob, "vault", "plans").await, Err("AccessDenied".into()));
    assert_eq!(head(&bob, "vault", "plans", None).await, Err(403));
    // The bucket policy allows the rest: listing, and a missing key is a plain 404.
    assert_eq!(get(&bob, "vault", "missing").await, Err("NoSuchKey".into()));
    // The current version is public, the older one secret: each is decided on its own tags.
    get(&bob, "vault", "doc").await.unwrap();
    get_version(&bob, "vault", "doc", &public).await.unwrap();
    assert_eq!(
        get_version(&bob, "vault", "doc", &secret).await,
        Err("AccessDenied".into())
    );
    assert_eq!(head(&bob, "vault", "doc", Some(&secret)).await, Err(403));
    assert_eq!(
        tags_of(&bob, "vault", "doc", Some(&secret)).await,
        Err("AccessDenied".into())
    );
    assert_eq!(
        tags_of(&bob, "vault", "doc", Some(&public)).await,
        Ok(vec![("classification".into(), "public".into())])
    );
    let untag = bob
        .delete_object_tagging()
        .bucket("vault")
        .key("doc")
        .version_id(&secret)
        .send()
        .await
        .map_err(|err| error_code(&err));
    assert_eq!(untag.map(|_| ()), Err("AccessDenied".into()));
    assert_eq!(
        tags_of(&gw.client, "vault", "doc", Some(&secret)).await,
        Ok(vec![("classification".into(), "secret".into())])
    );
    // Tagging the current version secret closes it too.
    set_tag(&gw.client, "vault", "memo", ("classification", "secret"))
        .await
        .unwrap();
    assert_eq!(get(&bob, "vault", "memo").await, Err("AccessDenied".into()));
    // A copy's source row is not read before the copy is decided: with a Deny on a tag for
    // GetObject, the tags count as matching and the copy is refused (fail-closed).
    let copy = copy_request(&bob, "vault", "copied", &format!("vault/doc?versionId={public}"))
        .send()
        .await
        .map_err(|err| error_code(&err));
    assert_eq!(copy.map(|_| ()), Err("AccessDenied".into()));
    gw.stop().await;
}

#[tokio::test]
async fn a_key_policy_on_a_tag_narrows_the_key_in_its_own_bucket() {
    let gw = TestGateway::start().await;
    let catalog = gw.gateway.store.catalog();
    let bob = add_key(&gw, "BOBKEY").await;
    bob.create_bucket().bucket("bobs").send().await.unwrap();
    put_tagged(&bob, "bobs", "open", "share=yes").await;
    put_tagged(&bob, "bobs", "closed", "").await;
    put_tagged(&bob, "bobs", "locked", "share=yes&lock=on").await;
    let policy = r#"{"Version":"2012-10-17","Statement":[
        {"Effect":"Allow","Action":["s3:GetObject","s3:PutObject","s3:PutObjectTagging"],"Resource":"arn:aws:s3:::bobs/*",
         "Condition":{"StringEqualsIfExists":{"s3:ExistingObjectTag/share":"yes"}}},
        {"Effect":"Deny","Action":"s3:*","Resource":"arn:aws:s3:::bobs/*",
         "Condition":{"StringEquals":{"s3:ExistingObjectTag/lock":"on"}}}]}"#;
    assert!(catalog.set_key_policy("BOBKEY", Some(policy)).await.unwrap());

    get(&bob, "bobs", "open").await.unwrap();
    // IfExists: an object without the tag is allowed; one with another value is not.
    get(&bob, "bobs", "closed").await.unwrap();
    set_tag(&bob, "bobs", "closed", ("share", "no")).await.unwrap();
    assert_eq!(get(&bob, "bobs", "closed").await, Err("AccessDenied".into()));
    assert_eq!(get(&bob, "bobs", "locked").await, Err("AccessDenied".into()));
    assert_eq!(
        set_tag(&bob, "bobs", "locked", ("lock", "off")).await,
        Err("AccessDenied".into())
    );
    // PutObject has no existing object: IfExists allows it, the Deny does not apply.
    put(&bob, "bobs", "new").await.unwrap();
    get(&bob, "bobs", "new").await.unwrap();
    gw.stop().await;
}
