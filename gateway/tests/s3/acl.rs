//! ACLs and object ownership as S3 answers them, with aws-sdk-s3 across keys, boto3 and raw
//! unsigned HTTP: BucketOwnerEnforced (the default) refusing ACLs with S3's codes, the ownership
//! controls round trip, canned ACLs and grant headers giving one key's objects and buckets to
//! another key, to every signed key and to everyone, object writers owning what they write, a
//! policy's Deny over an ACL grant, and the public access block's two ACL settings.

use pgvs3_testkit as common;

use aws_sdk_s3::Client;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketCannedAcl, ObjectCannedAcl, ObjectOwnership, OwnershipControls, OwnershipControlsRule,
    PublicAccessBlockConfiguration,
};
use common::s3::{
    BOTO3_ROOT_BOB_ANON, add_key, completion, copy_request, get, list, put, put_object, put_request, unsigned,
};
use common::{ROOT_ACCESS_KEY, TestGateway};

const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";

/// The S3 error code of a refused call.
fn code<E: ProvideErrorMetadata, R>(err: SdkError<E, R>) -> String {
    err.code().unwrap_or_default().to_owned()
}

/// A bucket made by `client` with the object ownership `ownership`.
async fn bucket_with(client: &Client, bucket: &str, ownership: ObjectOwnership) {
    client
        .create_bucket()
        .bucket(bucket)
        .object_ownership(ownership)
        .send()
        .await
        .unwrap();
}

async fn put_acl(client: &Client, bucket: &str, key: &str, acl: ObjectCannedAcl) -> Result<(), String> {
    put_request(client, bucket, key, b"data")
        .acl(acl)
        .send()
        .await
        .map(|_| ())
        .map_err(code)
}

async fn ownership(client: &Client, bucket: &str) -> Result<String, String> {
    client
        .get_bucket_ownership_controls()
        .bucket(bucket)
        .send()
        .await
        .map(|out| {
            out.ownership_controls().unwrap().rules()[0]
                .object_ownership()
                .as_str()
                .to_owned()
        })
        .map_err(code)
}

#[tokio::test]
async fn bucket_owner_enforced_is_the_default_and_refuses_acls_with_s3s_codes() {
    let gw = TestGateway::start().await;
    let c = &gw.client;
    c.create_bucket().bucket("enf").send().await.unwrap();
    assert_eq!(ownership(c, "enf").await.as_deref(), Ok("BucketOwnerEnforced"));
    let public_bucket = c
        .create_bucket()
        .bucket("enf2")
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(public_bucket), "InvalidBucketAclWithObjectOwnership");
    c.create_bucket()
        .bucket("enf3")
        .acl(BucketCannedAcl::Private)
        .send()
        .await
        .unwrap();

    assert_eq!(
        put_acl(c, "enf", "k", ObjectCannedAcl::PublicRead).await.unwrap_err(),
        "AccessControlListNotSupported"
    );
    put_acl(c, "enf", "k", ObjectCannedAcl::BucketOwnerFullControl)
        .await
        .unwrap();
    put_acl(c, "enf", "k", ObjectCannedAcl::Private).await.unwrap();
    let granted = put_request(c, "enf", "g", b"x")
        .grant_read(format!("uri=\"{ALL_USERS}\""))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(granted), "AccessControlListNotSupported");
    let bucket_acl = c
        .put_bucket_acl()
        .bucket("enf")
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(bucket_acl), "AccessControlListNotSupported");
    let object_acl = c
        .put_object_acl()
        .bucket("enf")
        .key("k")
        .acl(ObjectCannedAcl::PublicRead)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(object_acl), "AccessControlListNotSupported");
    // The owner's full control is what it already has: accepted.
    c.put_object_acl()
        .bucket("enf")
        .key("k")
        .acl(ObjectCannedAcl::BucketOwnerFullControl)
        .send()
        .await
        .unwrap();

    let acl = c.get_object_acl().bucket("enf").key("k").send().await.unwrap();
    assert_eq!(acl.owner().and_then(|o| o.id()), Some(ROOT_ACCESS_KEY));
    let [grant] = acl.grants() else { panic!("{acl:?}") };
    assert_eq!(grant.permission().map(|p| p.as_str()), Some("FULL_CONTROL"));
    assert_eq!(grant.grantee().and_then(|g| g.id()), Some(ROOT_ACCESS_KEY));
    assert_eq!(
        unsigned(&gw, "GET", "/enf/k", b"").await.status,
        403,
        "no ACL makes an object public while ACLs are disabled"
    );
    gw.stop().await;
}

#[tokio::test]
async fn ownership_controls_are_put_read_back_and_deleted() {
    let gw = TestGateway::start().await;
    let c = &gw.client;
    bucket_with(c, "own", ObjectOwnership::ObjectWriter).await;
    assert_eq!(ownership(c, "own").await.as_deref(), Ok("ObjectWriter"));
    let controls = |ownership: ObjectOwnership| {
        OwnershipControls::builder()
            .rules(
                OwnershipControlsRule::builder()
                    .object_ownership(ownership)
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap()
    };
    c.put_bucket_ownership_controls()
        .bucket("own")
        .ownership_controls(controls(ObjectOwnership::BucketOwnerPreferred))
        .send()
        .await
        .unwrap();
    assert_eq!(ownership(c, "own").await.as_deref(), Ok("BucketOwnerPreferred"));
    c.put_bucket_acl()
        .bucket("own")
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    // A bucket whose ACL grants anything cannot go back to ACLs disabled.
    let enforce = c
        .put_bucket_ownership_controls()
        .bucket("own")
        .ownership_controls(controls(ObjectOwnership::BucketOwnerEnforced))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(enforce), "InvalidBucketAclWithObjectOwnership");
    c.put_bucket_acl()
        .bucket("own")
        .acl(BucketCannedAcl::Private)
        .send()
        .await
        .unwrap();
    c.put_bucket_ownership_controls()
        .bucket("own")
        .ownership_controls(controls(ObjectOwnership::BucketOwnerEnforced))
        .send()
        .await
        .unwrap();
    assert_eq!(ownership(c, "own").await.as_deref(), Ok("BucketOwnerEnforced"));

    c.delete_bucket_ownership_controls().bucket("own").send().await.unwrap();
    assert_eq!(ownership(c, "own").await.unwrap_err(), "OwnershipControlsNotFoundError");
    // Without ownership controls a bucket takes ACLs, as S3's ObjectWriter.
    put_acl(c, "own", "k", ObjectCannedAcl::PublicRead).await.unwrap();
    assert_eq!(unsigned(&gw, "GET", "/own/k", b"").await.status, 200);
    gw.stop().await;
}

/// S3 resets a bucket's ACL when its owner re-creates it in us-east-1 (answered 200 there): to
/// what the re-create asks for, private if nothing.
#[tokio::test]
async fn re_creating_ones_own_bucket_resets_its_acl() {
    let gw = TestGateway::start().await;
    let c = &gw.client;
    let all_users_grants = |c: Client| async move {
        let acl = c.get_bucket_acl().bucket("open").send().await.unwrap();
        acl.grants()
            .iter()
            .filter(|grant| grant.grantee().and_then(|g| g.uri()) == Some(ALL_USERS))
            .count()
    };
    c.create_bucket()
        .bucket("open")
        .object_ownership(ObjectOwnership::ObjectWriter)
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    assert_eq!(all_users_grants(c.clone()).await, 1);
    c.create_bucket().bucket("open").send().await.unwrap();
    assert_eq!(all_users_grants(c.clone()).await, 0, "reset to private");
    c.create_bucket()
        .bucket("open")
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    assert_eq!(all_users_grants(c.clone()).await, 1, "the re-create's own ACL");
    gw.stop().await;
}

#[tokio::test]
async fn grants_give_one_keys_objects_and_bucket_to_another_key() {
    let gw = TestGateway::start().await;
    let alice = add_key(&gw, "ALICEKEY").await;
    let bob = add_key(&gw, "BOBKEY").await;
    bucket_with(&alice, "shared", ObjectOwnership::ObjectWriter).await;
    put_request(&alice, "shared", "for-bob", b"hello bob")
        .grant_read("id=\"BOBKEY\"")
        .send()
        .await
        .unwrap();
    put(&alice, "shared", "private").await.unwrap();

    // READ on the object: Bob reads it, and nothing else.
    let body = bob.get_object().bucket("shared").key("for-bob").send().await.unwrap();
    assert_eq!(&body.body.collect().await.unwrap().into_bytes()[..], b"hello bob");
    bob.head_object().bucket("shared").key("for-bob").send().await.unwrap();
    assert_eq!(get(&bob, "shared", "private").await.unwrap_err(), "AccessDenied");
    // Without READ on the bucket a missing key is AccessDenied, as S3 answers.
    assert_eq!(get(&bob, "shared", "missing").await.unwrap_err(), "AccessDenied");
    assert_eq!(put(&bob, "shared", "for-bob").await.unwrap_err(), "AccessDenied");
    assert_eq!(list(&bob, "shared", None).await.unwrap_err(), "AccessDenied");
    let acl = bob.get_object_acl().bucket("shared").key("for-bob").send().await;
    assert_eq!(code(acl.unwrap_err()), "AccessDenied");
    // An unknown key cannot be granted anything.
    let unknown = alice
        .put_object_acl()
        .bucket("shared")
        .key("for-bob")
        .grant_read("id=\"NOSUCHKEY\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(unknown), "InvalidArgument");
    let by_email = alice
        .put_object_acl()
        .bucket("shared")
        .key("for-bob")
        .grant_read("emailAddress=\"bob@example.com\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(by_email), "UnresolvableGrantByEmailAddress");

    // WRITE and READ on the bucket: Bob lists and puts, and owns what he writes.
    alice
        .put_bucket_acl()
        .bucket("shared")
        .grant_write("id=\"BOBKEY\"")
        .grant_read("id=\"BOBKEY\"")
        .send()
        .await
        .unwrap();
    assert_eq!(list(&bob, "shared", None).await, Ok(2));
    // Listings name the objects' owner (Alice's bucket, Alice's objects), not the key asking.
    let listed = bob
        .list_objects_v2()
        .bucket("shared")
        .fetch_owner(true)
        .send()
        .await
        .unwrap();
    let owners: Vec<_> = listed
        .contents()
        .iter()
        .map(|o| o.owner().and_then(|o| o.id()))
        .collect();
    assert_eq!(owners, [Some("ALICEKEY"); 2]);
    let versions = bob.list_object_versions().bucket("shared").send().await.unwrap();
    let owners: Vec<_> = versions
        .versions()
        .iter()
        .map(|v| v.owner().and_then(|o| o.id()))
        .collect();
    assert_eq!(owners, [Some("ALICEKEY"); 2]);
    assert_eq!(get(&bob, "shared", "missing").await.unwrap_err(), "NoSuchKey");
    put(&bob, "shared", "from-bob").await.unwrap();
    let acl = bob
        .get_object_acl()
        .bucket("shared")
        .key("from-bob")
        .send()
        .await
        .unwrap();
    assert_eq!(acl.owner().and_then(|o| o.id()), Some("BOBKEY"));
    // The bucket's owner keeps its objects, whoever wrote them.
    get(&alice, "shared", "from-bob").await.unwrap();
    // Bob's bucket ACL rights do not reach the bucket's own ACL or its other settings.
    let bucket_acl = bob.get_bucket_acl().bucket("shared").send().await.unwrap_err();
    assert_eq!(code(bucket_acl), "AccessDenied");
    let policy = bob.get_bucket_policy().bucket("shared").send().await.unwrap_err();
    assert_eq!(code(policy), "AccessDenied");
    bob.delete_object()
        .bucket("shared")
        .key("from-bob")
        .send()
        .await
        .unwrap();
    let got = alice.get_bucket_acl().bucket("shared").send().await.unwrap();
    assert_eq!(got.owner().and_then(|o| o.id()), Some("ALICEKEY"));
    assert_eq!(got.grants().len(), 2);
    gw.stop().await;
}

#[tokio::test]
async fn public_and_authenticated_grants_reach_anonymous_and_signed_requests() {
    let gw = TestGateway::start().await;
    let c = &gw.client;
    let bob = add_key(&gw, "BOBKEY").await;
    bucket_with(c, "web", ObjectOwnership::BucketOwnerPreferred).await;
    put_acl(c, "web", "index.html", ObjectCannedAcl::PublicRead)
        .await
        .unwrap();
    put_acl(c, "web", "members.html", ObjectCannedAcl::AuthenticatedRead)
        .await
        .unwrap();
    put(c, "web", "secret.html").await.unwrap();

    let anonymous = |path: &'static str| unsigned(&gw, "GET", path, b"");
    let page = anonymous("/web/index.html").await;
    assert_eq!((page.status, page.body.as_str()), (200, "data"));
    assert_eq!(unsigned(&gw, "HEAD", "/web/index.html", b"").await.status, 200);
    assert_eq!(anonymous("/web/members.html").await.status, 403);
    assert_eq!(anonymous("/web/secret.html").await.status, 403);
    assert_eq!(anonymous("/web?list-type=2").await.status, 403);
    assert_eq!(unsigned(&gw, "PUT", "/web/new", b"x").await.status, 403);
    get(&bob, "web", "members.html").await.unwrap();
    get(&bob, "web", "index.html").await.unwrap();
    assert_eq!(get(&bob, "web", "secret.html").await.unwrap_err(), "AccessDenied");

    // A public-read bucket lists to everyone; its objects stay their own ACLs'.
    c.put_bucket_acl()
        .bucket("web")
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    let listing = anonymous("/web?list-type=2").await;
    assert_eq!(listing.status, 200, "{}", listing.body);
    assert!(listing.body.contains("<Key>secret.html</Key>"), "{}", listing.body);
    assert_eq!(anonymous("/web/secret.html").await.status, 403);
    assert_eq!(anonymous("/web/missing").await.status, 404);
    assert_eq!(list(&bob, "web", None).await, Ok(3));

    // PutObjectAcl makes an object public and private again.
    c.put_object_acl()
        .bucket("web")
        .key("secret.html")
        .acl(ObjectCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous("/web/secret.html").await.status, 200);
    c.put_object_acl()
        .bucket("web")
        .key("secret.html")
        .acl(ObjectCannedAcl::Private)
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous("/web/secret.html").await.status, 403);
    gw.stop().await;
}

#[tokio::test]
async fn copies_and_multipart_uploads_get_the_acl_their_request_asks_for() {
    let gw = TestGateway::start().await;
    let c = &gw.client;
    bucket_with(c, "copies", ObjectOwnership::ObjectWriter).await;
    put_acl(c, "copies", "public", ObjectCannedAcl::PublicRead)
        .await
        .unwrap();
    // A copy never takes its source's ACL.
    copy_request(c, "copies", "copy", "copies/public").send().await.unwrap();
    assert_eq!(unsigned(&gw, "GET", "/copies/copy", b"").await.status, 403);
    copy_request(c, "copies", "copy-public", "copies/public")
        .acl(ObjectCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned(&gw, "GET", "/copies/copy-public", b"").await.status, 200);

    let upload = c
        .create_multipart_upload()
        .bucket("copies")
        .key("big")
        .acl(ObjectCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    let id = upload.upload_id().unwrap();
    let part = c
        .upload_part()
        .bucket("copies")
        .key("big")
        .upload_id(id)
        .part_number(1)
        .body(ByteStream::from_static(b"parts"))
        .send()
        .await
        .unwrap();
    c.complete_multipart_upload()
        .bucket("copies")
        .key("big")
        .upload_id(id)
        .multipart_upload(completion(&[(1, part.e_tag().unwrap())]))
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned(&gw, "GET", "/copies/big", b"").await.body, "parts");

    // In a versioned bucket an ACL belongs to one version.
    c.put_bucket_versioning()
        .bucket("copies")
        .versioning_configuration(
            aws_sdk_s3::types::VersioningConfiguration::builder()
                .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let first = put_object(c, "copies", "v", b"one").await;
    put(c, "copies", "v").await.unwrap();
    let first = first.version_id().unwrap();
    c.put_object_acl()
        .bucket("copies")
        .key("v")
        .version_id(first)
        .acl(ObjectCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    let old = unsigned(&gw, "GET", &format!("/copies/v?versionId={first}"), b"").await;
    assert_eq!((old.status, old.body.as_str()), (200, "one"));
    assert_eq!(unsigned(&gw, "GET", "/copies/v", b"").await.status, 403);
    gw.stop().await;
}

/// With ACLs disabled S3 takes a write's ACL only when it comes to the bucket owner's full
/// control: `bucket-owner-full-control` from anyone, `private` from the bucket's owner only (from
/// another key it would grant that key alone). Ceph's s3-tests
/// `test_create_bucket_bucket_owner_enforced`.
#[tokio::test]
async fn another_keys_private_acl_is_refused_while_acls_are_disabled() {
    let gw = TestGateway::start().await;
    let c = &gw.client;
    let bob = add_key(&gw, "BOBKEY").await;
    c.create_bucket().bucket("enf").send().await.unwrap();
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"BOBKEY"},"Action":["s3:PutObject","s3:PutObjectAcl","s3:GetObjectAcl"],"Resource":"arn:aws:s3:::enf/*"}]}"#;
    c.put_bucket_policy().bucket("enf").policy(policy).send().await.unwrap();
    assert_eq!(
        put_acl(&bob, "enf", "private", ObjectCannedAcl::Private).await,
        Err("AccessControlListNotSupported".to_owned())
    );
    let refused = bob
        .create_multipart_upload()
        .bucket("enf")
        .key("private")
        .acl(ObjectCannedAcl::Private)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(refused), "AccessControlListNotSupported");
    put_acl(&bob, "enf", "full", ObjectCannedAcl::BucketOwnerFullControl)
        .await
        .unwrap();
    put(&bob, "enf", "none").await.unwrap();
    put_acl(c, "enf", "owners", ObjectCannedAcl::Private).await.unwrap();
    for key in ["full", "none", "owners"] {
        let acl = bob.get_object_acl().bucket("enf").key(key).send().await.unwrap();
        assert_eq!(acl.owner().and_then(|o| o.id()), Some(ROOT_ACCESS_KEY), "{key}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_policy_deny_beats_an_acl_grant() {
    let gw = TestGateway::start().await;
    let c = &gw.client;
    let bob = add_key(&gw, "BOBKEY").await;
    let carol = add_key(&gw, "CAROLKEY").await;
    bucket_with(c, "deny", ObjectOwnership::BucketOwnerPreferred).await;
    put_acl(c, "deny", "k", ObjectCannedAcl::AuthenticatedRead)
        .await
        .unwrap();
    get(&bob, "deny", "k").await.unwrap();
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Principal":{"AWS":"BOBKEY"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::deny/*"}]}"#;
    c.put_bucket_policy()
        .bucket("deny")
        .policy(policy)
        .send()
        .await
        .unwrap();
    assert_eq!(get(&bob, "deny", "k").await.unwrap_err(), "AccessDenied");
    get(&carol, "deny", "k").await.unwrap();
    gw.stop().await;
}

#[tokio::test]
async fn the_public_access_block_refuses_and_ignores_public_acls() {
    let gw = TestGateway::start().await;
    let c = &gw.client;
    let bob = add_key(&gw, "BOBKEY").await;
    bucket_with(c, "pab", ObjectOwnership::BucketOwnerPreferred).await;
    put_acl(c, "pab", "public", ObjectCannedAcl::PublicRead).await.unwrap();
    put_request(c, "pab", "bobs", b"x")
        .grant_read("id=\"BOBKEY\"")
        .send()
        .await
        .unwrap();
    let block = |block_acls: bool, ignore_acls: bool| {
        PublicAccessBlockConfiguration::builder()
            .block_public_acls(block_acls)
            .ignore_public_acls(ignore_acls)
            .build()
    };

    c.put_public_access_block()
        .bucket("pab")
        .public_access_block_configuration(block(true, false))
        .send()
        .await
        .unwrap();
    assert_eq!(
        put_acl(c, "pab", "other", ObjectCannedAcl::PublicRead)
            .await
            .unwrap_err(),
        "AccessDenied"
    );
    let bucket_acl = c
        .put_bucket_acl()
        .bucket("pab")
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(bucket_acl), "AccessDenied");
    put_acl(c, "pab", "other", ObjectCannedAcl::Private).await.unwrap();
    // BlockPublicAcls only refuses new public ACLs: the one already there still counts.
    assert_eq!(unsigned(&gw, "GET", "/pab/public", b"").await.status, 200);

    c.put_public_access_block()
        .bucket("pab")
        .public_access_block_configuration(block(false, true))
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned(&gw, "GET", "/pab/public", b"").await.status, 403);
    // A grant to a key is not public: IgnorePublicAcls leaves it.
    get(&bob, "pab", "bobs").await.unwrap();
    c.delete_public_access_block().bucket("pab").send().await.unwrap();
    assert_eq!(unsigned(&gw, "GET", "/pab/public", b"").await.status, 200);
    gw.stop().await;
}

#[tokio::test]
async fn boto3_puts_and_reads_acls() {
    let gw = TestGateway::start().await;
    add_key(&gw, "BOBKEY").await;
    let script = [
        BOTO3_ROOT_BOB_ANON,
        r#"
root.create_bucket(Bucket="boto-acl", ObjectOwnership="BucketOwnerPreferred")
root.put_object(Bucket="boto-acl", Key="pub.txt", Body=b"hi", ACL="public-read")
acl = root.get_object_acl(Bucket="boto-acl", Key="pub.txt")
assert acl["Owner"]["ID"] == os.environ["AK"], acl
grants = sorted((g["Grantee"]["Type"], g["Grantee"].get("ID") or g["Grantee"].get("URI"), g["Permission"]) for g in acl["Grants"])
assert grants == [("CanonicalUser", os.environ["AK"], "FULL_CONTROL"),
                  ("Group", "http://acs.amazonaws.com/groups/global/AllUsers", "READ")], grants
assert anon.get_object(Bucket="boto-acl", Key="pub.txt")["Body"].read() == b"hi"
assert code(lambda: anon.list_objects_v2(Bucket="boto-acl")) == "AccessDenied"
owner = root.get_bucket_acl(Bucket="boto-acl")["Owner"]
root.put_bucket_acl(Bucket="boto-acl", AccessControlPolicy={
    "Owner": owner,
    "Grants": [
        {"Grantee": {"Type": "CanonicalUser", "ID": owner["ID"]}, "Permission": "FULL_CONTROL"},
        {"Grantee": {"Type": "CanonicalUser", "ID": "BOBKEY"}, "Permission": "READ"},
        {"Grantee": {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"}, "Permission": "READ"},
    ]})
got = root.get_bucket_acl(Bucket="boto-acl")["Grants"]
assert {(g["Grantee"].get("ID") or g["Grantee"].get("URI"), g["Permission"]) for g in got} == {
    (owner["ID"], "FULL_CONTROL"), ("BOBKEY", "READ"),
    ("http://acs.amazonaws.com/groups/global/AllUsers", "READ")}, got
assert [o["Key"] for o in anon.list_objects_v2(Bucket="boto-acl")["Contents"]] == ["pub.txt"]
assert [o["Key"] for o in bob.list_objects_v2(Bucket="boto-acl")["Contents"]] == ["pub.txt"]
assert code(lambda: bob.put_object(Bucket="boto-acl", Key="x", Body=b"x")) == "AccessDenied"
assert code(lambda: root.put_bucket_acl(Bucket="boto-acl", AccessControlPolicy={"Owner": owner, "Grants": [
    {"Grantee": {"Type": "AmazonCustomerByEmail", "EmailAddress": "a@example.com"}, "Permission": "READ"}]})) == "UnresolvableGrantByEmailAddress"
print("boto3 acl ok")
"#,
    ]
    .concat();
    gw.python_passes(&script, "boto3 acl ok").await;
    gw.stop().await;
}

/// Issue 34: `--s3-default-object-ownership ObjectWriter` makes a bucket created without
/// `x-amz-object-ownership` take ACLs, as buckets made on MinIO or Ceph do: CreateBucket with a
/// canned ACL, PutBucketAcl and a public object ACL work, and GetBucketOwnershipControls says
/// ObjectWriter. A request's own `x-amz-object-ownership` still wins. (By default the same
/// CreateBucket is 400 InvalidBucketAclWithObjectOwnership, as AWS answers since 2023.)
#[tokio::test]
async fn a_server_wide_default_ownership_lets_acl_era_tools_work() {
    let database = common::fresh_database().await;
    let gw = TestGateway::with_args(database, &["--s3-default-object-ownership", "ObjectWriter"]).await;
    let s3 = &gw.client;
    s3.create_bucket()
        .bucket("legacy")
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    let ownership = s3
        .get_bucket_ownership_controls()
        .bucket("legacy")
        .send()
        .await
        .unwrap();
    let rules = ownership
        .ownership_controls()
        .map(|controls| controls.rules())
        .unwrap_or_default();
    assert_eq!(rules[0].object_ownership(), &ObjectOwnership::ObjectWriter);
    s3.put_bucket_acl()
        .bucket("legacy")
        .acl(BucketCannedAcl::Private)
        .send()
        .await
        .unwrap();
    put_request(s3, "legacy", "k", b"public".to_vec())
        .acl(ObjectCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned(&gw, "GET", "/legacy/k", b"").await.status, 200);
    // A bucket that asks for BucketOwnerEnforced gets it.
    let enforced = s3
        .create_bucket()
        .bucket("modern")
        .object_ownership(ObjectOwnership::BucketOwnerEnforced)
        .acl(BucketCannedAcl::PublicRead)
        .send()
        .await
        .unwrap_err();
    assert_eq!(enforced.code(), Some("InvalidBucketAclWithObjectOwnership"));
    gw.stop().await;
}

/// Issue 34: upload listings name an upload's Owner (the owner of the object it will complete)
/// and its Initiator (the key that created it), as S3 does — before, ListMultipartUploads had no
/// `<Initiator>` and both listings named the key asking as Owner (and ListParts as Initiator).
#[tokio::test]
async fn upload_listings_name_the_uploads_owner_and_initiator() {
    let gw = TestGateway::start().await;
    let alice = add_key(&gw, "ALICEKEY").await;
    let bob = add_key(&gw, "BOBKEY").await;
    bucket_with(&alice, "uploads", ObjectOwnership::BucketOwnerPreferred).await;
    alice
        .put_bucket_acl()
        .bucket("uploads")
        .grant_write("id=\"BOBKEY\"")
        .grant_read("id=\"BOBKEY\"")
        .send()
        .await
        .unwrap();
    let start = |client: &Client, key: &'static str, acl: Option<ObjectCannedAcl>| {
        let request = client.create_multipart_upload().bucket("uploads").key(key).set_acl(acl);
        async move { request.send().await.unwrap().upload_id.unwrap() }
    };
    let by_alice = start(&alice, "by-alice", None).await;
    start(&bob, "by-bob", None).await;
    let handed_over = start(&bob, "handed-over", Some(ObjectCannedAcl::BucketOwnerFullControl)).await;

    let parties = |owner: Option<&aws_sdk_s3::types::Owner>, initiator: Option<&aws_sdk_s3::types::Initiator>| {
        (
            owner.and_then(|o| o.id()).map(str::to_owned),
            initiator.and_then(|i| i.id()).map(str::to_owned),
        )
    };
    let named = |owner: &str, initiator: &str| (Some(owner.to_owned()), Some(initiator.to_owned()));
    for lister in [&alice, &bob] {
        let listed = lister.list_multipart_uploads().bucket("uploads").send().await.unwrap();
        let got: Vec<_> = listed
            .uploads()
            .iter()
            .map(|u| (u.key().unwrap().to_owned(), parties(u.owner(), u.initiator())))
            .collect();
        assert_eq!(
            got,
            [
                ("by-alice".to_owned(), named("ALICEKEY", "ALICEKEY")),
                ("by-bob".to_owned(), named("BOBKEY", "BOBKEY")),
                ("handed-over".to_owned(), named("ALICEKEY", "BOBKEY")),
            ]
        );
    }
    let parts = |client: &Client, key: &'static str, id: &str| {
        let request = client.list_parts().bucket("uploads").key(key).upload_id(id);
        async move {
            let out = request.send().await.unwrap();
            parties(out.owner(), out.initiator())
        }
    };
    assert_eq!(
        parts(&alice, "handed-over", &handed_over).await,
        named("ALICEKEY", "BOBKEY")
    );
    assert_eq!(parts(&bob, "by-alice", &by_alice).await, named("ALICEKEY", "ALICEKEY"));
    gw.stop().await;
}

/// Issue 34: an ACL with no grants revokes the owner's own grant too, and S3 answers it back
/// empty (s3-tests' `test_bucket_acl_revoke_all`); before, it was taken as private and answered
/// with the owner's FULL_CONTROL. The owner keeps its ACL rights and can restore it. Once the
/// bucket is BucketOwnerEnforced again, an object another key wrote under ObjectWriter is
/// answered as the bucket owner's with the owner's full control alone (before: its writer and
/// the ACL it had).
#[tokio::test]
async fn an_empty_acl_revokes_the_owners_grant_and_enforced_objects_are_the_bucket_owners() {
    use aws_sdk_s3::types::{AccessControlPolicy, Owner};
    let gw = TestGateway::start().await;
    let alice = add_key(&gw, "ALICEKEY").await;
    let bob = add_key(&gw, "BOBKEY").await;
    bucket_with(&alice, "revoke", ObjectOwnership::ObjectWriter).await;
    put(&alice, "revoke", "k").await.unwrap();
    let nobody = || {
        AccessControlPolicy::builder()
            .owner(Owner::builder().id("ALICEKEY").build())
            .set_grants(Some(vec![]))
            .build()
    };
    type Grants = Vec<(Option<String>, Option<String>)>;
    let of = |grants: &[aws_sdk_s3::types::Grant]| -> Grants {
        grants
            .iter()
            .map(|g| {
                let grantee = g.grantee().and_then(|g| g.id().or(g.uri())).map(str::to_owned);
                (grantee, g.permission().map(|p| p.as_str().to_owned()))
            })
            .collect()
    };
    let owner_full = || vec![(Some("ALICEKEY".to_owned()), Some("FULL_CONTROL".to_owned()))];

    alice
        .put_bucket_acl()
        .bucket("revoke")
        .access_control_policy(nobody())
        .send()
        .await
        .unwrap();
    let got = alice.get_bucket_acl().bucket("revoke").send().await.unwrap();
    assert_eq!(of(got.grants()), Grants::new());
    assert_eq!(got.owner().and_then(|o| o.id()), Some("ALICEKEY"));
    alice
        .put_object_acl()
        .bucket("revoke")
        .key("k")
        .access_control_policy(nobody())
        .send()
        .await
        .unwrap();
    let got = alice.get_object_acl().bucket("revoke").key("k").send().await.unwrap();
    assert_eq!(of(got.grants()), Grants::new());
    // The owner still holds its ACLs, and private brings its grant back.
    alice
        .put_bucket_acl()
        .bucket("revoke")
        .acl(BucketCannedAcl::Private)
        .send()
        .await
        .unwrap();
    let got = alice.get_bucket_acl().bucket("revoke").send().await.unwrap();
    assert_eq!(of(got.grants()), owner_full());

    // Bob writes (and owns) an object under ObjectWriter...
    alice
        .put_bucket_acl()
        .bucket("revoke")
        .grant_write("id=\"BOBKEY\"")
        .send()
        .await
        .unwrap();
    put_acl(&bob, "revoke", "from-bob", ObjectCannedAcl::PublicRead)
        .await
        .unwrap();
    let got = alice
        .get_object_acl()
        .bucket("revoke")
        .key("from-bob")
        .send()
        .await
        .unwrap();
    assert_eq!(got.owner().and_then(|o| o.id()), Some("BOBKEY"));
    // ...until the bucket's owner enforces ownership: then it is the bucket owner's.
    alice
        .put_bucket_acl()
        .bucket("revoke")
        .acl(BucketCannedAcl::Private)
        .send()
        .await
        .unwrap();
    alice
        .put_bucket_ownership_controls()
        .bucket("revoke")
        .ownership_controls(
            OwnershipControls::builder()
                .rules(
                    OwnershipControlsRule::builder()
                        .object_ownership(ObjectOwnership::BucketOwnerEnforced)
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let got = alice
        .get_object_acl()
        .bucket("revoke")
        .key("from-bob")
        .send()
        .await
        .unwrap();
    assert_eq!(got.owner().and_then(|o| o.id()), Some("ALICEKEY"));
    assert_eq!(of(got.grants()), owner_full());
    assert_eq!(unsigned(&gw, "GET", "/revoke/from-bob", b"").await.status, 403);
    gw.stop().await;
}
