//! Server-side encryption as S3 does it, with aws-sdk-s3: SSE-C (inline, chunked, ranged,
//! multipart and copied objects; a missing, wrong or needless key refused), SSE-S3 by request
//! and as a bucket's default (Put/Get/DeleteBucketEncryption), SSE-KMS refused — and in every
//! case the bytes PostgreSQL holds are not the plaintext.

use pgvs3_testkit as common;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    CompletedMultipartUpload, CompletedPart, ServerSideEncryption, ServerSideEncryptionByDefault,
    ServerSideEncryptionConfiguration, ServerSideEncryptionRule,
};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::TestGateway;
use common::s3::{completion, copy_request, error_code, http_status, put_object, put_request};
use md5::{Digest, Md5};

/// Text that would be found in the database if a body were stored as sent.
const MARKER: &str = "pgvs3-plaintext-marker ";

fn plaintext(len: usize) -> Vec<u8> {
    MARKER.bytes().cycle().take(len).collect()
}

struct Key {
    key: String,
    md5: String,
}

fn customer_key(byte: u8) -> Key {
    let raw = [byte; 32];
    Key {
        key: BASE64.encode(raw),
        md5: BASE64.encode(Md5::digest(raw)),
    }
}

/// Requests that carry an SSE-C key's three headers.
trait WithKey {
    fn with_key(self, key: &Key) -> Self;
}

macro_rules! with_key_on {
    ($($builder:ty),*) => {$(
        impl WithKey for $builder {
            fn with_key(self, key: &Key) -> Self {
                self.sse_customer_algorithm("AES256")
                    .sse_customer_key(&key.key)
                    .sse_customer_key_md5(&key.md5)
            }
        }
    )*};
}

with_key_on!(
    aws_sdk_s3::operation::put_object::builders::PutObjectFluentBuilder,
    aws_sdk_s3::operation::get_object::builders::GetObjectFluentBuilder,
    aws_sdk_s3::operation::head_object::builders::HeadObjectFluentBuilder,
    aws_sdk_s3::operation::create_multipart_upload::builders::CreateMultipartUploadFluentBuilder,
    aws_sdk_s3::operation::upload_part::builders::UploadPartFluentBuilder,
    aws_sdk_s3::operation::get_object_attributes::builders::GetObjectAttributesFluentBuilder
);

async fn put_c(s3: &Client, key: &str, body: Vec<u8>, customer: &Key) {
    let out = put_request(s3, "sealed", key, body)
        .with_key(customer)
        .send()
        .await
        .unwrap();
    assert_eq!(out.sse_customer_algorithm(), Some("AES256"));
    assert_eq!(out.sse_customer_key_md5(), Some(customer.md5.as_str()));
}

async fn get_c(s3: &Client, key: &str, customer: &Key, range: Option<&str>) -> Vec<u8> {
    let out = s3
        .get_object()
        .bucket("sealed")
        .key(key)
        .set_range(range.map(str::to_owned))
        .with_key(customer)
        .send()
        .await
        .unwrap();
    assert_eq!(out.sse_customer_key_md5(), Some(customer.md5.as_str()));
    out.body.collect().await.unwrap().into_bytes().to_vec()
}

/// Whether any stored chunk or inline body holds the marker text.
async fn plaintext_stored(gw: &TestGateway) -> bool {
    let db = gw.sql().await;
    let row = db
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM s3p.chunks WHERE position(convert_to($1, 'UTF8') IN data) > 0)
                 OR EXISTS (SELECT 1 FROM s3p.objects WHERE position(convert_to($1, 'UTF8') IN inline) > 0) AS found",
            &[&MARKER],
        )
        .await
        .unwrap();
    row.get("found")
}

#[tokio::test]
async fn sse_c_objects_open_only_with_their_key_and_are_never_stored_as_sent() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("sealed").send().await.unwrap();
    let (right, wrong) = (customer_key(1), customer_key(2));

    // Inline (small) and chunked (compressible, several chunks) bodies.
    let small = plaintext(100);
    let large = plaintext(300_000);
    put_c(s3, "small", small.clone(), &right).await;
    put_c(s3, "large", large.clone(), &right).await;
    assert_eq!(get_c(s3, "small", &right, None).await, small);
    assert_eq!(get_c(s3, "large", &right, None).await, large);
    assert_eq!(
        get_c(s3, "large", &right, Some("bytes=8000-20000")).await,
        large[8000..=20000].to_vec(),
        "a range across chunk boundaries decrypts exactly"
    );
    assert!(!plaintext_stored(&gw).await, "the database holds only ciphertext");

    // Without the key: 400; with another: 403; HEAD likewise.
    let missing = s3.get_object().bucket("sealed").key("large").send().await.unwrap_err();
    assert_eq!(
        (http_status(&missing), error_code(&missing).as_str()),
        (400, "InvalidRequest")
    );
    let other = s3
        .get_object()
        .bucket("sealed")
        .key("large")
        .with_key(&wrong)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (http_status(&other), error_code(&other).as_str()),
        (403, "AccessDenied")
    );
    let head = s3.head_object().bucket("sealed").key("small").send().await.unwrap_err();
    assert_eq!(http_status(&head), 400);
    let head = s3
        .head_object()
        .bucket("sealed")
        .key("small")
        .with_key(&right)
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(100));
    assert_eq!(head.sse_customer_algorithm(), Some("AES256"));

    // A key whose MD5 does not match, or that is not 256 bits: 400, nothing stored.
    let bad_md5 = put_request(s3, "sealed", "bad", b"x")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&right.key)
        .sse_customer_key_md5(&wrong.md5)
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&bad_md5), "InvalidArgument");
    let short = [3u8; 16];
    let short_key = put_request(s3, "sealed", "bad", b"x")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(BASE64.encode(short))
        .sse_customer_key_md5(BASE64.encode(Md5::digest(short)))
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&short_key), "InvalidArgument");
    assert!(s3.head_object().bucket("sealed").key("bad").send().await.is_err());

    // A plaintext object refuses a key it does not need.
    put_object(s3, "sealed", "plain", b"plain").await;
    let needless = s3
        .get_object()
        .bucket("sealed")
        .key("plain")
        .with_key(&right)
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&needless), "InvalidRequest");

    // Copy: the source opens with its key; the copy is encrypted as its own request says.
    let copied = copy_request(s3, "sealed", "copy", "sealed/large")
        .copy_source_sse_customer_algorithm("AES256")
        .copy_source_sse_customer_key(&right.key)
        .copy_source_sse_customer_key_md5(&right.md5)
        .server_side_encryption(ServerSideEncryption::Aes256)
        .send()
        .await
        .unwrap();
    assert_eq!(copied.server_side_encryption(), Some(&ServerSideEncryption::Aes256));
    let copy = s3.get_object().bucket("sealed").key("copy").send().await.unwrap();
    assert_eq!(copy.server_side_encryption(), Some(&ServerSideEncryption::Aes256));
    assert_eq!(copy.body.collect().await.unwrap().into_bytes().to_vec(), large);
    let no_source_key = copy_request(s3, "sealed", "copy2", "sealed/large")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&no_source_key), "InvalidRequest");
    assert!(!plaintext_stored(&gw).await);

    // SSE-KMS: there is no KMS.
    let kms = put_request(s3, "sealed", "kms", b"x")
        .server_side_encryption(ServerSideEncryption::AwsKms)
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&kms), "NotImplemented");
    gw.stop().await;
}

#[tokio::test]
async fn sse_c_multipart_parts_need_the_uploads_key() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("sealed").send().await.unwrap();
    let (right, wrong) = (customer_key(7), customer_key(8));
    let upload = s3
        .create_multipart_upload()
        .bucket("sealed")
        .key("big")
        .with_key(&right)
        .send()
        .await
        .unwrap();
    let upload_id = upload.upload_id().unwrap();
    let first = plaintext(5 << 20);
    let second = plaintext(1 << 20);
    let part = |number: i32, body: Vec<u8>, key: Option<&Key>| {
        let request = s3
            .upload_part()
            .bucket("sealed")
            .key("big")
            .upload_id(upload_id)
            .part_number(number)
            .body(ByteStream::from(body));
        match key {
            Some(key) => request.with_key(key),
            None => request,
        }
        .send()
    };
    let without = part(2, second.clone(), None).await.unwrap_err();
    assert_eq!(error_code(&without), "InvalidRequest");
    let other = part(2, second.clone(), Some(&wrong)).await.unwrap_err();
    assert_eq!(error_code(&other), "AccessDenied");
    let one = part(1, first.clone(), Some(&right)).await.unwrap();
    let two = part(2, second.clone(), Some(&right)).await.unwrap();
    let parts = [(1, one.e_tag().unwrap()), (2, two.e_tag().unwrap())]
        .into_iter()
        .map(|(n, etag)| CompletedPart::builder().part_number(n).e_tag(etag).build())
        .collect();
    s3.complete_multipart_upload()
        .bucket("sealed")
        .key("big")
        .upload_id(upload_id)
        .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(parts)).build())
        .send()
        .await
        .unwrap();
    let whole = [first.clone(), second.clone()].concat();
    assert_eq!(get_c(s3, "big", &right, None).await, whole);
    let across = format!("bytes={}-{}", (5 << 20) - 100, (5 << 20) + 100);
    assert_eq!(
        get_c(s3, "big", &right, Some(&across)).await,
        whole[(5 << 20) - 100..=(5 << 20) + 100].to_vec(),
        "a range across two parts decrypts each with its own body's counters"
    );
    assert!(!plaintext_stored(&gw).await);
    gw.stop().await;
}

#[tokio::test]
async fn a_buckets_default_encryption_seals_new_objects_with_sse_s3() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("sealed").send().await.unwrap();
    let none = s3.get_bucket_encryption().bucket("sealed").send().await.unwrap_err();
    assert_eq!(error_code(&none), "ServerSideEncryptionConfigurationNotFoundError");
    put_object(s3, "sealed", "before", plaintext(64)).await;
    assert!(
        plaintext_stored(&gw).await,
        "without encryption the body is stored as sent"
    );
    s3.delete_object().bucket("sealed").key("before").send().await.unwrap();

    let configuration = |algorithm: ServerSideEncryption| {
        ServerSideEncryptionConfiguration::builder()
            .rules(
                ServerSideEncryptionRule::builder()
                    .apply_server_side_encryption_by_default(
                        ServerSideEncryptionByDefault::builder()
                            .sse_algorithm(algorithm)
                            .build()
                            .unwrap(),
                    )
                    .build(),
            )
            .build()
            .unwrap()
    };
    let kms = s3
        .put_bucket_encryption()
        .bucket("sealed")
        .server_side_encryption_configuration(configuration(ServerSideEncryption::AwsKms))
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&kms), "NotImplemented");
    s3.put_bucket_encryption()
        .bucket("sealed")
        .server_side_encryption_configuration(configuration(ServerSideEncryption::Aes256))
        .send()
        .await
        .unwrap();
    let got = s3.get_bucket_encryption().bucket("sealed").send().await.unwrap();
    let rule = &got.server_side_encryption_configuration().unwrap().rules()[0];
    assert_eq!(
        rule.apply_server_side_encryption_by_default().unwrap().sse_algorithm(),
        &ServerSideEncryption::Aes256
    );

    for (key, len) in [("inline", 1000), ("chunked", 200_000)] {
        let put = put_object(s3, "sealed", key, plaintext(len)).await;
        assert_eq!(put.server_side_encryption(), Some(&ServerSideEncryption::Aes256));
        let got = s3.get_object().bucket("sealed").key(key).send().await.unwrap();
        assert_eq!(got.server_side_encryption(), Some(&ServerSideEncryption::Aes256));
        assert_eq!(
            got.e_tag().unwrap(),
            format!("\"{}\"", hex::encode(Md5::digest(plaintext(len))))
        );
        assert_eq!(got.body.collect().await.unwrap().into_bytes().to_vec(), plaintext(len));
    }
    assert!(!plaintext_stored(&gw).await);
    // A copy within the bucket is sealed again (the source's chunks are its own bodies').
    copy_request(s3, "sealed", "copied", "sealed/chunked")
        .send()
        .await
        .unwrap();
    let copy = s3.get_object().bucket("sealed").key("copied").send().await.unwrap();
    assert_eq!(
        copy.body.collect().await.unwrap().into_bytes().to_vec(),
        plaintext(200_000)
    );

    s3.delete_bucket_encryption().bucket("sealed").send().await.unwrap();
    let none = s3.get_bucket_encryption().bucket("sealed").send().await.unwrap_err();
    assert_eq!(error_code(&none), "ServerSideEncryptionConfigurationNotFoundError");
    let after = put_object(s3, "sealed", "after", b"after").await;
    assert_eq!(after.server_side_encryption(), None);
    // Objects sealed before still open.
    let old = s3.get_object().bucket("sealed").key("inline").send().await.unwrap();
    assert_eq!(old.body.collect().await.unwrap().into_bytes().to_vec(), plaintext(1000));
    gw.stop().await;
}

/// RESP has no key to open an encrypted object with: a key an S3 client stored with SSE
/// answers an error (never ciphertext), others around it answer as before; a bucket with
/// default encryption is no RESP database at all.
#[tokio::test]
async fn resp_refuses_to_read_encrypted_objects() {
    let gw = TestGateway::with_resp(&[]).await;
    let client = redis::Client::open(format!("redis://{}/", gw.resp_addr())).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("SET")
        .arg("plain")
        .arg("value")
        .query_async::<()>(&mut con)
        .await
        .unwrap();
    put_request(&gw.client, "resp", "sealed", plaintext(50))
        .server_side_encryption(ServerSideEncryption::Aes256)
        .send()
        .await
        .unwrap();
    let (plain, sealed): (redis::RedisResult<String>, redis::RedisResult<String>) = (
        redis::cmd("GET").arg("plain").query_async(&mut con).await,
        redis::cmd("GET").arg("sealed").query_async(&mut con).await,
    );
    assert_eq!(plain.unwrap(), "value");
    let refused = sealed.unwrap_err().to_string();
    assert!(refused.contains("server-side encryption"), "{refused}");
    let strlen: i64 = redis::cmd("STRLEN").arg("sealed").query_async(&mut con).await.unwrap();
    assert_eq!(strlen, 50);
    // Overwritten over RESP, the key is a plain string again.
    redis::cmd("SET")
        .arg("sealed")
        .arg("mine")
        .query_async::<()>(&mut con)
        .await
        .unwrap();
    let now: String = redis::cmd("GET").arg("sealed").query_async(&mut con).await.unwrap();
    assert_eq!(now, "mine");
    gw.stop().await;
}

/// Issue 34: encryption that can be enforced and is said as S3 says it. The standard "deny
/// unencrypted PutObject" policy (`s3:x-amz-server-side-encryption`, StringNotEquals and Null)
/// installs and refuses a plain upload (before: 501 on the condition key); a policy on the SSE-C
/// algorithm, the grant and object lock keys installs too. UploadPart and UploadPartCopy of an
/// SSE-S3 upload answer `x-amz-server-side-encryption: AES256` (before: nothing), and so does
/// its completion (before session 28: nothing). A GET or HEAD
/// that asks for an encryption is 400 InvalidArgument, as S3 answers (before: served).
#[tokio::test]
async fn encryption_can_be_enforced_by_policy_and_is_said_on_parts_and_refused_on_reads() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("enc").send().await.unwrap();
    let deny_unencrypted = r#"{"Version":"2012-10-17","Statement":[
      {"Sid":"DenyWrongEncryption","Effect":"Deny","Principal":"*","Action":"s3:PutObject",
       "Resource":"arn:aws:s3:::enc/*",
       "Condition":{"StringNotEquals":{"s3:x-amz-server-side-encryption":"AES256"}}},
      {"Sid":"DenyUnencrypted","Effect":"Deny","Principal":"*","Action":"s3:PutObject",
       "Resource":"arn:aws:s3:::enc/*",
       "Condition":{"Null":{"s3:x-amz-server-side-encryption":"true"}}}]}"#;
    s3.put_bucket_policy()
        .bucket("enc")
        .policy(deny_unencrypted)
        .send()
        .await
        .unwrap();
    let plain = put_request(s3, "enc", "plain", b"plain".to_vec())
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&plain), "AccessDenied");
    put_request(s3, "enc", "sealed", b"sealed".to_vec())
        .server_side_encryption(ServerSideEncryption::Aes256)
        .send()
        .await
        .unwrap();
    let other_keys = r#"{"Version":"2012-10-17","Statement":[
      {"Effect":"Deny","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::enc/c/*",
       "Condition":{"StringNotEquals":{"s3:x-amz-server-side-encryption-customer-algorithm":"AES256"}}},
      {"Effect":"Deny","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::enc/g/*",
       "Condition":{"StringLike":{"s3:x-amz-grant-read":"*AllUsers*","s3:x-amz-grant-full-control":"*"}}},
      {"Effect":"Deny","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::enc/l/*",
       "Condition":{"StringEquals":{"s3:object-lock-mode":"GOVERNANCE"}}}]}"#;
    s3.put_bucket_policy()
        .bucket("enc")
        .policy(other_keys)
        .send()
        .await
        .unwrap();
    let unsealed = put_request(s3, "enc", "c/plain", b"x".to_vec())
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&unsealed), "AccessDenied");
    s3.delete_bucket_policy().bucket("enc").send().await.unwrap();

    // Parts of an SSE-S3 upload say so.
    put_object(s3, "enc", "source", plaintext(6 << 20)).await;
    let upload = s3
        .create_multipart_upload()
        .bucket("enc")
        .key("parts")
        .server_side_encryption(ServerSideEncryption::Aes256)
        .send()
        .await
        .unwrap();
    let upload_id = upload.upload_id().unwrap();
    let part = s3
        .upload_part()
        .bucket("enc")
        .key("parts")
        .upload_id(upload_id)
        .part_number(1)
        .body(ByteStream::from(plaintext(5 << 20)))
        .send()
        .await
        .unwrap();
    assert_eq!(part.server_side_encryption(), Some(&ServerSideEncryption::Aes256));
    let copied = s3
        .upload_part_copy()
        .bucket("enc")
        .key("parts")
        .upload_id(upload_id)
        .part_number(2)
        .copy_source("enc/source")
        .send()
        .await
        .unwrap();
    assert_eq!(copied.server_side_encryption(), Some(&ServerSideEncryption::Aes256));
    // A plain upload's parts say nothing.
    let plain_upload = s3
        .create_multipart_upload()
        .bucket("enc")
        .key("plain-parts")
        .send()
        .await
        .unwrap();
    let plain_part = s3
        .upload_part()
        .bucket("enc")
        .key("plain-parts")
        .upload_id(plain_upload.upload_id().unwrap())
        .part_number(1)
        .body(ByteStream::from(plaintext(64)))
        .send()
        .await
        .unwrap();
    assert_eq!(plain_part.server_side_encryption(), None);
    // So do the completions: S3 answers the object's SSE-S3 there too (Ceph's s3-tests
    // test_copy_part_enc[*-sse-s3-*]), a completion retried after it succeeded included.
    let complete = |key: &'static str, upload_id: String, parts: Vec<(i32, String)>| async move {
        let parts: Vec<(i32, &str)> = parts.iter().map(|(n, etag)| (*n, etag.as_str())).collect();
        s3.complete_multipart_upload()
            .bucket("enc")
            .key(key)
            .upload_id(upload_id)
            .multipart_upload(completion(&parts))
            .send()
            .await
            .unwrap()
            .server_side_encryption
    };
    let sealed_parts = vec![
        (1, part.e_tag().unwrap().to_owned()),
        (2, copied.copy_part_result().unwrap().e_tag().unwrap().to_owned()),
    ];
    for _ in 0..2 {
        let answered = complete("parts", upload_id.to_owned(), sealed_parts.clone()).await;
        assert_eq!(answered, Some(ServerSideEncryption::Aes256));
    }
    let plain_parts = vec![(1, plain_part.e_tag().unwrap().to_owned())];
    let answered = complete("plain-parts", plain_upload.upload_id().unwrap().to_owned(), plain_parts).await;
    assert_eq!(answered, None);

    // Reads that ask for an encryption are refused.
    let ask = |req: &mut aws_sdk_s3::config::http::HttpRequest| {
        req.headers_mut().insert("x-amz-server-side-encryption", "AES256");
    };
    let get = s3
        .get_object()
        .bucket("enc")
        .key("sealed")
        .customize()
        .mutate_request(ask)
        .send()
        .await
        .unwrap_err();
    assert_eq!((http_status(&get), error_code(&get).as_str()), (400, "InvalidArgument"));
    let head = s3
        .head_object()
        .bucket("enc")
        .key("sealed")
        .customize()
        .mutate_request(ask)
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&head), 400);
    let got = s3.get_object().bucket("enc").key("sealed").send().await.unwrap();
    assert_eq!(got.server_side_encryption(), Some(&ServerSideEncryption::Aes256));
    gw.stop().await;
}

/// Issue 34: GetObjectAttributes as S3 answers it: `x-amz-version-id` names the version read
/// (the latest, or the one `versionId` asks for), the ETag is unquoted, and an SSE-C object's
/// attributes are read with its key (400 without). Before: no version id, a quoted ETag, and
/// the key was ignored, so an SSE-C object's attributes could not be read at all.
#[tokio::test]
async fn get_object_attributes_names_the_version_unquoted_and_opens_sse_c_objects() {
    use aws_sdk_s3::types::{BucketVersioningStatus, ObjectAttributes, VersioningConfiguration};
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("sealed").send().await.unwrap();
    s3.put_bucket_versioning()
        .bucket("sealed")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let first = put_object(s3, "sealed", "plain", b"one".to_vec()).await;
    let second = put_object(s3, "sealed", "plain", b"two!".to_vec()).await;
    let attributes = |version: Option<&str>| {
        s3.get_object_attributes()
            .bucket("sealed")
            .key("plain")
            .set_version_id(version.map(str::to_owned))
            .object_attributes(ObjectAttributes::Etag)
            .object_attributes(ObjectAttributes::ObjectSize)
            .send()
    };
    let latest = attributes(None).await.unwrap();
    assert!(second.version_id().is_some());
    assert_eq!(latest.version_id(), second.version_id());
    assert_eq!(latest.e_tag(), second.e_tag().map(|etag| etag.trim_matches('"')));
    assert_eq!(latest.object_size(), Some(4));
    let older = attributes(first.version_id()).await.unwrap();
    assert_eq!(older.version_id(), first.version_id());
    assert_eq!(older.object_size(), Some(3));

    let customer = customer_key(7);
    put_c(s3, "secret", plaintext(100), &customer).await;
    let of_secret = || {
        s3.get_object_attributes()
            .bucket("sealed")
            .key("secret")
            .object_attributes(ObjectAttributes::ObjectSize)
    };
    let without = of_secret().send().await.unwrap_err();
    assert_eq!(http_status(&without), 400);
    let with = of_secret().with_key(&customer).send().await.unwrap();
    assert_eq!(with.object_size(), Some(100));
    gw.stop().await;
}
