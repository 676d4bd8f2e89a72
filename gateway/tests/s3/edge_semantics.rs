//! S3 semantics at the edges a conformance suite probes: conditional writes with `*` and with an
//! ETag, ListBuckets paging, a retried CompleteMultipartUpload, part-copy ranges past the
//! source's end, empty `delimiter` and `continuation-token` parameters, the tag count on HEAD,
//! and the Content-Type of an object stored without one. Each as AWS S3 documents it.

use pgvs3_testkit as common;

use aws_sdk_s3::primitives::ByteStream;
use common::TestGateway;
use common::s3::{completion, put_object, put_request, refusal, start_upload, upload_part};

#[tokio::test]
async fn conditional_writes_with_a_star_or_an_etag_are_evaluated() {
    let gw = TestGateway::with_sample_object().await;
    let s3 = &gw.client;
    let put = |key: &'static str, body: &'static [u8]| {
        s3.put_object()
            .bucket("bkt")
            .key(key)
            .body(ByteStream::from_static(body))
    };

    // If-Match: * replaces only an object that exists; it never creates one.
    let refused = put("absent", b"x").if_match("*").send().await.unwrap_err();
    assert_eq!(refusal(&refused), (404, "NoSuchKey".into()));
    assert!(
        s3.head_object().bucket("bkt").key("absent").send().await.is_err(),
        "nothing was created"
    );
    let replaced = put("there", b"replaced").if_match("*").send().await.unwrap();
    let replaced_etag = replaced.e_tag.unwrap();

    // If-None-Match: <etag> writes unless the stored object has that ETag.
    let refused = put("there", b"again")
        .if_none_match(&replaced_etag)
        .send()
        .await
        .unwrap_err();
    assert_eq!(refusal(&refused), (412, "PreconditionFailed".into()));
    let got = s3.get_object().bucket("bkt").key("there").send().await.unwrap();
    assert_eq!(got.body.collect().await.unwrap().to_vec(), b"replaced");
    put("there", b"newer")
        .if_none_match("\"0123456789abcdef0123456789abcdef\"")
        .send()
        .await
        .unwrap();
    put("fresh", b"created")
        .if_none_match("\"0123456789abcdef0123456789abcdef\"")
        .send()
        .await
        .unwrap();
    let got = s3.get_object().bucket("bkt").key("fresh").send().await.unwrap();
    assert_eq!(got.body.collect().await.unwrap().to_vec(), b"created");
}

#[tokio::test]
async fn list_buckets_pages_by_max_buckets_and_continuation_token() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    let names = ["page-a", "page-b", "page-c", "page-d", "page-e"];
    for name in names {
        s3.create_bucket().bucket(name).send().await.unwrap();
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..10 {
        let page = s3
            .list_buckets()
            .max_buckets(2)
            .set_continuation_token(token.clone())
            .send()
            .await
            .unwrap();
        assert!(page.buckets().len() <= 2);
        seen.extend(page.buckets().iter().filter_map(|b| b.name.clone()));
        token = page.continuation_token;
        if token.is_none() {
            break;
        }
    }
    assert_eq!(seen, names);
    let refused = s3.list_buckets().max_buckets(0).send().await.unwrap_err();
    assert_eq!(refusal(&refused), (400, "InvalidArgument".into()));
}

#[tokio::test]
async fn a_retried_completion_answers_with_the_object_it_made() {
    let gw = TestGateway::with_sample_object().await;
    let s3 = &gw.client;
    let upload_id = start_upload(s3, "bkt", "assembled").await;
    let etag = upload_part(s3, "bkt", "assembled", &upload_id, 1, b"the only part").await;
    let parts = completion(&[(1, &etag)]);
    let complete = || {
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("assembled")
            .upload_id(&upload_id)
            .multipart_upload(parts.clone())
            .send()
    };
    let first = complete().await.unwrap();
    let again = complete().await.unwrap();
    assert_eq!(first.e_tag, again.e_tag);
    assert!(first.e_tag.unwrap().ends_with("-1\""));

    // Once the key holds another object, the upload is simply gone.
    put_object(s3, "bkt", "assembled", b"overwritten").await;
    let gone = complete().await.unwrap_err();
    assert_eq!(refusal(&gone), (404, "NoSuchUpload".into()));
}

#[tokio::test]
async fn a_part_copy_range_past_the_source_end_is_invalid_range() {
    let gw = TestGateway::with_sample_object().await;
    let s3 = &gw.client;
    let upload_id = start_upload(s3, "bkt", "copy-target").await;
    let copy = |range: &'static str| {
        s3.upload_part_copy()
            .bucket("bkt")
            .key("copy-target")
            .upload_id(&upload_id)
            .part_number(1)
            .copy_source("bkt/there")
            .copy_source_range(range)
            .send()
    };
    let refused = copy("bytes=5-10").await.unwrap_err();
    assert_eq!(refusal(&refused), (416, "InvalidRange".into()));
    copy("bytes=5-9").await.unwrap();
}

#[tokio::test]
async fn empty_listing_parameters_and_the_tag_count_on_head() {
    let gw = TestGateway::with_sample_object().await;
    let listed = gw
        .signed("GET", "/bkt?list-type=2&delimiter=&continuation-token=", &[], b"")
        .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(listed.body.contains("<Key>there</Key>"), "{}", listed.body);
    assert!(
        !listed.body.contains("<Delimiter>"),
        "an empty delimiter is not echoed: {}",
        listed.body
    );
    let v1 = gw.signed("GET", "/bkt?delimiter=", &[], b"").await;
    assert_eq!(v1.status, 200, "{}", v1.body);
    assert!(!v1.body.contains("<Delimiter>"), "{}", v1.body);

    put_request(&gw.client, "bkt", "tagged", b"t")
        .tagging("colour=blue&size=large")
        .send()
        .await
        .unwrap();
    let head = gw.signed("HEAD", "/bkt/tagged", &[], b"").await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("x-amz-tagging-count"), Some("2"));
    let untagged = gw.signed("HEAD", "/bkt/there", &[], b"").await;
    assert_eq!(untagged.header("x-amz-tagging-count"), None);
}

/// Issue 34: an object stored without a Content-Type (a PutObject without the header, a
/// multipart upload created without one, a CopyObject REPLACE without one) is answered
/// `binary/octet-stream`, as S3 does; before, GET and HEAD sent no Content-Type at all.
#[tokio::test]
async fn an_object_stored_without_a_content_type_is_binary_octet_stream() {
    let gw = TestGateway::with_sample_object().await;
    let put = gw.signed("PUT", "/bkt/untyped", &[], b"bytes").await;
    assert_eq!(put.status, 200, "{}", put.body);
    let got = gw.signed("GET", "/bkt/untyped", &[], b"").await;
    assert_eq!(got.header("content-type"), Some("binary/octet-stream"));
    let head = gw
        .client
        .head_object()
        .bucket("bkt")
        .key("untyped")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_type(), Some("binary/octet-stream"));
    gw.client
        .copy_object()
        .bucket("bkt")
        .key("replaced")
        .copy_source("bkt/there")
        .metadata_directive(aws_sdk_s3::types::MetadataDirective::Replace)
        .send()
        .await
        .unwrap();
    let head = gw
        .client
        .head_object()
        .bucket("bkt")
        .key("replaced")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_type(), Some("binary/octet-stream"));
    let s3 = &gw.client;
    let upload_id = start_upload(s3, "bkt", "assembled-untyped").await;
    let etag = upload_part(s3, "bkt", "assembled-untyped", &upload_id, 1, b"one part").await;
    s3.complete_multipart_upload()
        .bucket("bkt")
        .key("assembled-untyped")
        .upload_id(&upload_id)
        .multipart_upload(completion(&[(1, &etag)]))
        .send()
        .await
        .unwrap();
    let got = gw.signed("GET", "/bkt/assembled-untyped", &[], b"").await;
    assert_eq!(got.header("content-type"), Some("binary/octet-stream"), "multipart");
    let typed = gw
        .client
        .put_object()
        .bucket("bkt")
        .key("typed")
        .content_type("text/plain")
        .body(ByteStream::from_static(b"t"))
        .send()
        .await;
    typed.unwrap();
    let head = gw.client.head_object().bucket("bkt").key("typed").send().await.unwrap();
    assert_eq!(head.content_type(), Some("text/plain"), "a given type is kept");
    gw.stop().await;
}

/// A SigV2 request (as botocore's `s3` signer and s3cmd sign them) whose `Date` is unreadable or
/// far from now, signed correctly: S3 answers 403 AccessDenied / RequestTimeTooSkewed (Ceph's
/// s3-tests `test_bad_date_*_aws2`); s3s checked no SigV2 date, so the request was served.
const SIGV2_DATES: &str = r#"
import base64, email.utils, hashlib, hmac, os, re, urllib.request, urllib.error
url = os.environ["AWS_ENDPOINT_URL"]

def get(date):
    string_to_sign = f"GET\n\n\n{date}\n/bkt/"
    signature = base64.b64encode(hmac.new(os.environ["SK"].encode(), string_to_sign.encode(), hashlib.sha1).digest()).decode()
    request = urllib.request.Request(url + "/bkt/", headers={"Date": date, "Authorization": f"AWS {os.environ['AK']}:{signature}"})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, None
    except urllib.error.HTTPError as err:
        found = re.search(r"<Code>([^<]*)</Code>", err.read().decode())
        return err.code, found.group(1) if found else None

assert get(email.utils.formatdate(usegmt=True)) == (200, None)
for date, expected in [("Bad Date", (403, "AccessDenied")),
                       ("Tue, 07 Jul 2010 21:53:04 GMT", (403, "RequestTimeTooSkewed")),
                       ("Tue, 07 Jul 2030 21:53:04 GMT", (403, "RequestTimeTooSkewed")),
                       ("Tue, 07 Jul 1950 21:53:04 GMT", (403, "AccessDenied"))]:
    assert get(date) == expected, (date, get(date))
print("sigv2 dates ok")
"#;

#[tokio::test]
async fn sigv2_requests_with_a_bad_date_are_refused_as_s3_refuses_them() {
    let gw = TestGateway::with_sample_object().await;
    gw.python_passes(SIGV2_DATES, "sigv2 dates ok").await;
    gw.stop().await;
}

/// Issue 34: ListObjects (v1) answers its `Prefix` as it was sent, `encoding-type=url` or not, as
/// S3 does: boto3 asks every v1 listing for `encoding-type=url` and decodes the keys, `Marker`,
/// `NextMarker` and `Delimiter` but not `Prefix` (botocore's `decode_list_object`), so an
/// encoded prefix reached the caller as `a%20b/`. The keys are encoded only when asked.
#[tokio::test]
async fn list_objects_v1_answers_its_prefix_as_sent_and_encodes_keys_only_when_asked() {
    let gw = TestGateway::with_sample_object().await;
    put_object(&gw.client, "bkt", "a b/c+d", b"x".to_vec()).await;
    let plain = gw.signed("GET", "/bkt?prefix=a%20b%2F", &[], b"").await;
    assert_eq!(plain.status, 200, "{}", plain.body);
    assert!(plain.body.contains("<Prefix>a b/</Prefix>"), "{}", plain.body);
    assert!(plain.body.contains("<Key>a b/c+d</Key>"), "{}", plain.body);
    let encoded = gw
        .signed("GET", "/bkt?encoding-type=url&prefix=a%20b%2F", &[], b"")
        .await;
    assert_eq!(encoded.status, 200, "{}", encoded.body);
    assert!(encoded.body.contains("<Prefix>a b/</Prefix>"), "{}", encoded.body);
    assert!(encoded.body.contains("<Key>a%20b/c%2Bd</Key>"), "{}", encoded.body);
    gw.stop().await;
}
