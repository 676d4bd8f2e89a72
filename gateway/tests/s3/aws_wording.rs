//! What real clients read in an answer, as AWS gives it: the message of an error s3s raises
//! itself (clients print "Unknown" without one), a 416's `ActualObjectSize` and
//! `RangeRequested` (how aws-c-s3 recognises an empty object), and refusals AWS makes that
//! were once accepted (`x-amz-mp-object-size`, an unknown `encoding-type`).

use pgvs3_testkit as common;

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::EncodingType;
use common::s3::{completion, put_object, refusal, start_upload, upload_part};
use common::{ROOT_ACCESS_KEY, TestGateway};

#[tokio::test]
async fn errors_s3s_raises_carry_aws_messages() {
    let gw = TestGateway::with_sample_object().await;
    let forged = gw.client_for(ROOT_ACCESS_KEY, "wrong-secret");
    let refused = forged.get_object().bucket("bkt").key("there").send().await.unwrap_err();
    assert_eq!(refusal(&refused), (403, "SignatureDoesNotMatch".into()));
    assert_eq!(
        refused.message(),
        Some(
            "The request signature we calculated does not match the signature you provided. \
             Check your key and signing method."
        )
    );

    let refused = gw
        .client
        .put_object()
        .bucket("bkt")
        .key("k".repeat(1025))
        .send()
        .await
        .unwrap_err();
    assert_eq!(refusal(&refused), (400, "KeyTooLongError".into()));
    assert_eq!(refused.message(), Some("Your key is too long"));

    let refused = gw.client.head_bucket().bucket("Bad_Bucket").send().await.unwrap_err();
    // A HEAD's answer has no body: its code and message are not read.
    assert_eq!(common::s3::http_status(&refused), 400);
    let refused = gw
        .client
        .list_objects_v2()
        .bucket("Bad_Bucket")
        .send()
        .await
        .unwrap_err();
    assert_eq!(refusal(&refused), (400, "InvalidBucketName".into()));
    assert_eq!(refused.message(), Some("The specified bucket is not valid."));
    gw.stop().await;
}

/// The raw body of a refusal the SDK read.
fn body_of<E>(err: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>) -> String {
    let body = err
        .raw_response()
        .expect("an answer")
        .body()
        .bytes()
        .expect("a buffered body");
    String::from_utf8_lossy(body).into_owned()
}

#[tokio::test]
async fn a_refused_range_names_the_range_and_the_object_size() {
    let gw = TestGateway::with_sample_object().await;
    put_object(&gw.client, "bkt", "empty", Vec::new()).await;
    for (key, range, size) in [("empty", "bytes=0-", 0), ("there", "bytes=20-30", 10)] {
        let refused = gw
            .client
            .get_object()
            .bucket("bkt")
            .key(key)
            .range(range)
            .send()
            .await
            .unwrap_err();
        assert_eq!(refusal(&refused), (416, "InvalidRange".into()), "{key}");
        let body = body_of(&refused);
        assert!(
            body.contains(&format!("<ActualObjectSize>{size}</ActualObjectSize>")),
            "{body}"
        );
        assert!(
            body.contains(&format!("<RangeRequested>{range}</RangeRequested>")),
            "{body}"
        );
        let content_type = refused.raw_response().unwrap().headers().get("content-type");
        assert_eq!(content_type, Some("application/xml"), "{key}");
        assert!(
            refused
                .raw_response()
                .unwrap()
                .headers()
                .get("x-pgvs3-actual-object-size")
                .is_none(),
            "the size rides on the body only"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_completion_whose_parts_miss_the_declared_size_completes_nothing() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("mpsize").send().await.unwrap();
    let upload = start_upload(s3, "mpsize", "sized").await;
    let part = upload_part(s3, "mpsize", "sized", &upload, 1, b"eleven byte").await;
    for declared in [10, 12] {
        let refused = s3
            .complete_multipart_upload()
            .bucket("mpsize")
            .key("sized")
            .upload_id(&upload)
            .multipart_upload(completion(&[(1, &part)]))
            .mpu_object_size(declared)
            .send()
            .await
            .unwrap_err();
        assert_eq!(refusal(&refused), (400, "InvalidRequest".into()), "{declared}");
        assert_eq!(
            refused.message(),
            Some(
                format!(
                    "The provided 'x-amz-mp-object-size' header value {declared} does not match what was computed: 11"
                )
                .as_str()
            )
        );
    }
    let refused = s3
        .complete_multipart_upload()
        .bucket("mpsize")
        .key("sized")
        .upload_id(&upload)
        .multipart_upload(completion(&[(1, &part)]))
        .mpu_object_size(-1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(refusal(&refused), (400, "InvalidRequest".into()));
    assert!(
        s3.head_object().bucket("mpsize").key("sized").send().await.is_err(),
        "nothing completed"
    );
    let parts = s3
        .list_parts()
        .bucket("mpsize")
        .key("sized")
        .upload_id(&upload)
        .send()
        .await
        .expect("the upload is still there");
    assert_eq!(parts.parts().len(), 1);
    s3.complete_multipart_upload()
        .bucket("mpsize")
        .key("sized")
        .upload_id(&upload)
        .multipart_upload(completion(&[(1, &part)]))
        .mpu_object_size(11)
        .send()
        .await
        .unwrap();
    assert_eq!(common::s3::read_object(s3, "mpsize", "sized").await, b"eleven byte");
    gw.stop().await;
}

#[tokio::test]
async fn an_unknown_encoding_type_is_refused() {
    let gw = TestGateway::with_sample_object().await;
    let s3 = &gw.client;
    let bogus = || EncodingType::from("bogus");
    let expected = (400, "InvalidArgument".to_owned());
    let message = Some("Invalid Encoding Method specified in Request");
    let refused = s3
        .list_objects()
        .bucket("bkt")
        .encoding_type(bogus())
        .send()
        .await
        .unwrap_err();
    assert_eq!((refusal(&refused), refused.message()), (expected.clone(), message));
    let refused = s3
        .list_objects_v2()
        .bucket("bkt")
        .encoding_type(bogus())
        .send()
        .await
        .unwrap_err();
    assert_eq!((refusal(&refused), refused.message()), (expected.clone(), message));
    let refused = s3
        .list_object_versions()
        .bucket("bkt")
        .encoding_type(bogus())
        .send()
        .await
        .unwrap_err();
    assert_eq!((refusal(&refused), refused.message()), (expected.clone(), message));
    let refused = s3
        .list_multipart_uploads()
        .bucket("bkt")
        .encoding_type(bogus())
        .send()
        .await
        .unwrap_err();
    assert_eq!((refusal(&refused), refused.message()), (expected, message));
    // `url` still encodes.
    let listed = s3
        .list_objects_v2()
        .bucket("bkt")
        .encoding_type(EncodingType::Url)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.contents().len(), 1);
    gw.stop().await;
}

/// Review of session 31: AWS names the missing key in a `NoSuchKey` and the missing bucket in a
/// `NoSuchBucket` (`<Key>`, `<BucketName>`, after the message); ours named neither.
#[tokio::test]
async fn missing_keys_and_buckets_are_named_in_their_errors() {
    let gw = TestGateway::with_sample_object().await;
    let signer = common::raw::Signer {
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: common::ROOT_SECRET_KEY.into(),
        host: gw.gateway.s3_addr.to_string(),
    };
    let get = |path: &'static str| {
        let headers = signer.sign(
            "GET",
            path,
            &[],
            &common::raw::sha256_hex(b""),
            std::time::SystemTime::now(),
        );
        let addr = gw.gateway.s3_addr;
        async move { common::raw::send(addr, "GET", path, &headers, b"").await }
    };
    let missing = get("/bkt/not%20here").await;
    assert_eq!(
        (missing.status, missing.code()),
        (404, Some("NoSuchKey")),
        "{}",
        missing.body
    );
    assert!(
        missing.body.contains("</Message><Key>not here</Key><RequestId>"),
        "{}",
        missing.body
    );
    for path in ["/nobucket/k", "/nobucket"] {
        let missing = get(path).await;
        assert_eq!(
            (missing.status, missing.code()),
            (404, Some("NoSuchBucket")),
            "{path}: {}",
            missing.body
        );
        assert!(
            missing.body.contains("<BucketName>nobucket</BucketName>"),
            "{path}: {}",
            missing.body
        );
    }
    // The SDK reads the same answers.
    let err = gw
        .client
        .get_object()
        .bucket("bkt")
        .key("gone")
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("NoSuchKey"));
    gw.stop().await;
}
