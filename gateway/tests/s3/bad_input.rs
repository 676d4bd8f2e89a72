//! Bad input gets the error S3 returns, and loses nothing: no partial object is ever visible.

use pgvs3_testkit as common;

use std::time::{Duration, SystemTime};

use common::raw::{RawResponse, Signer, send, sha256_hex};
use common::s3::{copy_request, put_object, put_request};
use common::{ROOT_ACCESS_KEY, ROOT_SECRET_KEY, TestGateway};
use tokio::io::AsyncWriteExt;

fn signer(gw: &TestGateway, secret: &str) -> Signer {
    Signer {
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: secret.into(),
        host: gw.gateway.s3_addr.to_string(),
    }
}

fn with_length(mut headers: Vec<(String, String)>, len: usize) -> Vec<(String, String)> {
    headers.push(("content-length".into(), len.to_string()));
    headers
}

async fn exists(gw: &TestGateway, bucket: &str, key: &str) -> bool {
    gw.client.head_object().bucket(bucket).key(key).send().await.is_ok()
}

#[tokio::test]
async fn unsigned_and_badly_signed_requests_are_refused() {
    let gw = TestGateway::with_sample_object().await;
    let anonymous = send(
        gw.gateway.s3_addr,
        "GET",
        "/bkt/there",
        &[("host".into(), "x".into())],
        b"",
    )
    .await;
    assert_eq!((anonymous.status, anonymous.code()), (403, Some("AccessDenied")));
    assert!(anonymous.header("x-amz-request-id").is_some_and(|id| !id.is_empty()));

    let headers = signer(&gw, "wrong-secret").sign("GET", "/bkt/there", &[], &sha256_hex(b""), SystemTime::now());
    let forged = send(gw.gateway.s3_addr, "GET", "/bkt/there", &headers, b"").await;
    assert_eq!((forged.status, forged.code()), (403, Some("SignatureDoesNotMatch")));

    let stale = SystemTime::now() - Duration::from_secs(3600);
    let headers = signer(&gw, ROOT_SECRET_KEY).sign("GET", "/bkt/there", &[], &sha256_hex(b""), stale);
    let late = send(gw.gateway.s3_addr, "GET", "/bkt/there", &headers, b"").await;
    assert_eq!((late.status, late.code()), (403, Some("RequestTimeTooSkewed")));
    // AWS's wording, not s3s's ("request time is too far from server time").
    assert!(
        late.body
            .contains("<Message>The difference between the request time and the current time is too large.</Message>"),
        "{}",
        late.body
    );

    let mut headers = signer(&gw, ROOT_SECRET_KEY).sign("GET", "/bkt/there", &[], &sha256_hex(b""), SystemTime::now());
    headers.retain(|(name, _)| name != "x-amz-date");
    let undated = send(gw.gateway.s3_addr, "GET", "/bkt/there", &headers, b"").await;
    assert_eq!(
        (undated.status, undated.code()),
        (403, Some("AccessDenied")),
        "{}",
        undated.body
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_payload_that_does_not_match_its_signed_hash_is_not_stored() {
    let gw = TestGateway::with_sample_object().await;
    let headers = signer(&gw, ROOT_SECRET_KEY).sign(
        "PUT",
        "/bkt/tampered",
        &[],
        &sha256_hex(b"what was signed"),
        SystemTime::now(),
    );
    let response = send(
        gw.gateway.s3_addr,
        "PUT",
        "/bkt/tampered",
        &with_length(headers, 13),
        b"what was sent",
    )
    .await;
    assert_eq!(
        (response.status, response.code()),
        (400, Some("XAmzContentSHA256Mismatch")),
        "{}",
        response.body
    );
    assert!(!exists(&gw, "bkt", "tampered").await);

    // The same over the chunked path (a body larger than the inline limit).
    let big = vec![7u8; 200_000];
    let headers =
        signer(&gw, ROOT_SECRET_KEY).sign("PUT", "/bkt/tampered-big", &[], &sha256_hex(b"x"), SystemTime::now());
    let response = send(
        gw.gateway.s3_addr,
        "PUT",
        "/bkt/tampered-big",
        &with_length(headers, big.len()),
        &big,
    )
    .await;
    assert_eq!(response.code(), Some("XAmzContentSHA256Mismatch"));
    assert!(!exists(&gw, "bkt", "tampered-big").await);
    let chunks: i64 = gw
        .sql()
        .await
        .query_one("SELECT count(*) FROM s3p.chunks", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(chunks, 0, "the rejected body's chunks were rolled back");
    gw.stop().await;
}

#[tokio::test]
async fn bad_content_md5_and_checksums_are_rejected() {
    let gw = TestGateway::with_sample_object().await;
    let wrong_md5 = content_md5(b"something else");
    let response = gw
        .signed("PUT", "/bkt/md5", &[("content-md5", &wrong_md5)], b"payload")
        .await;
    assert_eq!((response.status, response.code()), (400, Some("BadDigest")));
    let response = gw
        .signed("PUT", "/bkt/md5", &[("content-md5", "not base64!")], b"payload")
        .await;
    assert_eq!((response.status, response.code()), (400, Some("InvalidDigest")));
    let right = content_md5(b"payload");
    assert_eq!(
        gw.signed("PUT", "/bkt/md5", &[("content-md5", &right)], b"payload")
            .await
            .status,
        200
    );
    let response = gw
        .signed(
            "PUT",
            "/bkt/sha",
            &[("x-amz-checksum-sha256", &content_md5(b"x"))],
            b"payload",
        )
        .await;
    assert_eq!((response.status, response.code()), (400, Some("BadDigest")));
    assert!(!exists(&gw, "bkt", "sha").await);
    gw.stop().await;
}

#[tokio::test]
async fn malformed_requests_get_s3_errors() {
    let gw = TestGateway::with_sample_object().await;
    let long_key = "k".repeat(1025);
    let response = gw.signed("PUT", &format!("/bkt/{long_key}"), &[], b"x").await;
    assert_eq!((response.status, response.code()), (400, Some("KeyTooLongError")));
    let ok_key = "k".repeat(1024);
    assert_eq!(gw.signed("PUT", &format!("/bkt/{ok_key}"), &[], b"x").await.status, 200);

    let response = gw
        .signed("POST", "/bkt?delete", &[], b"<Delete><Object><Key>there</Key></Object>")
        .await;
    assert_eq!(
        (response.status, response.code()),
        (400, Some("MalformedXML")),
        "{}",
        response.body
    );
    assert!(exists(&gw, "bkt", "there").await, "a malformed batch deletes nothing");

    let response = gw.signed("PUT", "/Bad_Bucket", &[], b"").await;
    assert_eq!((response.status, response.code()), (400, Some("InvalidBucketName")));

    // S3 ignores a Range header it cannot parse; pgvs3 (through s3s) refuses it instead, which
    // no client relies on either way (docs/s3-compatibility.md).
    for malformed in ["bytes=7-3", "bytes=abc", "lines=1-2"] {
        let response = gw.signed("GET", "/bkt/there", &[("range", malformed)], b"").await;
        assert_eq!(
            (response.status, response.code()),
            (400, Some("InvalidArgument")),
            "{malformed}"
        );
    }
    let response = gw.signed("GET", "/bkt/there", &[("range", "bytes=20-")], b"").await;
    assert_eq!((response.status, response.code()), (416, Some("InvalidRange")));
    let response = gw.signed("GET", "/bkt/missing", &[], b"").await;
    assert_eq!((response.status, response.code()), (404, Some("NoSuchKey")));
    assert!(response.body.contains("<RequestId>"), "{}", response.body);
    gw.stop().await;
}

#[tokio::test]
async fn a_body_shorter_than_its_content_length_stores_nothing() {
    let gw = TestGateway::with_sample_object().await;
    for (key, declared, sent) in [
        ("short-inline", 1000usize, 400usize),
        ("short-chunked", 500_000, 300_000),
    ] {
        let body = vec![1u8; sent];
        let path = format!("/bkt/{key}");
        let headers = signer(&gw, ROOT_SECRET_KEY).sign("PUT", &path, &[], "UNSIGNED-PAYLOAD", SystemTime::now());
        let mut stream = tokio::net::TcpStream::connect(gw.gateway.s3_addr).await.unwrap();
        let mut request = format!("PUT {path} HTTP/1.1\r\ncontent-length: {declared}\r\n");
        for (name, value) in &headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        stream.write_all(&body).await.unwrap();
        stream.shutdown().await.unwrap();
        let response = common::raw::read_response(&mut stream).await;
        assert!(
            response.status == 0 || response.status == 400,
            "{key}: {}",
            response.status
        );
        assert!(!exists(&gw, "bkt", key).await, "{key} must not exist");
    }
    let sql = gw.sql().await;
    let (objects, chunks) = wait_for_rollback(&sql).await;
    assert_eq!(
        (objects, chunks),
        (1, 0),
        "only the setup object; no chunk of the cut body"
    );
    gw.stop().await;
}

/// The server notices a dead client asynchronously; wait (bounded) for its transaction to end.
async fn wait_for_rollback(sql: &tokio_postgres::Client) -> (i64, i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let busy: i64 = sql
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%' OR query LIKE 'COPY%' AND state = 'active' AND datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get("count");
        if busy == 0 || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let objects: i64 = sql
        .query_one("SELECT count(*) FROM s3p.objects", &[])
        .await
        .unwrap()
        .get("count");
    let chunks: i64 = sql
        .query_one("SELECT count(*) FROM s3p.chunks", &[])
        .await
        .unwrap()
        .get("count");
    (objects, chunks)
}

#[tokio::test]
async fn a_client_that_disconnects_mid_upload_leaves_nothing_behind() {
    let gw = TestGateway::with_sample_object().await;
    let headers = signer(&gw, ROOT_SECRET_KEY).sign("PUT", "/bkt/cut", &[], "UNSIGNED-PAYLOAD", SystemTime::now());
    let mut stream = tokio::net::TcpStream::connect(gw.gateway.s3_addr).await.unwrap();
    let mut request = format!("PUT /bkt/cut HTTP/1.1\r\ncontent-length: {}\r\n", 10 << 20);
    for (name, value) in &headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.write_all(&vec![9u8; 3 << 20]).await.unwrap();
    drop(stream);
    let sql = gw.sql().await;
    let (objects, chunks) = wait_for_rollback(&sql).await;
    assert_eq!((objects, chunks), (1, 0));
    assert!(!exists(&gw, "bkt", "cut").await);
    // The gateway is still healthy and its pool is not poisoned by the aborted COPY.
    for i in 0..20 {
        put_object(&gw.client, "bkt", &format!("after-{i}"), vec![1u8; 100_000]).await;
    }
    gw.stop().await;
}

#[tokio::test]
async fn virtual_host_style_requests_address_the_bucket_by_host_name() {
    let gw = TestGateway::with_args(common::fresh_database().await, &["--s3-domain", "s3.pgvs3.test"]).await;
    gw.client.create_bucket().bucket("vhost").send().await.unwrap();
    let signer = Signer {
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: ROOT_SECRET_KEY.into(),
        host: "vhost.s3.pgvs3.test".into(),
    };
    let body = b"by host name";
    let headers = with_length(
        signer.sign("PUT", "/dir/file.txt", &[], &sha256_hex(body), SystemTime::now()),
        body.len(),
    );
    let put = send(gw.gateway.s3_addr, "PUT", "/dir/file.txt", &headers, body).await;
    assert_eq!(put.status, 200, "{}", put.body);
    let headers = signer.sign("GET", "/dir/file.txt", &[], &sha256_hex(b""), SystemTime::now());
    let got = send(gw.gateway.s3_addr, "GET", "/dir/file.txt", &headers, b"").await;
    assert_eq!((got.status, got.body.as_str()), (200, "by host name"));
    // Path style keeps working on the same gateway.
    let out = gw
        .client
        .get_object()
        .bucket("vhost")
        .key("dir/file.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(out.body.collect().await.unwrap().into_bytes().as_ref(), body);
    gw.stop().await;
}

/// A client error, without anything of PostgreSQL's text: no 500 for anything a client sends.
fn assert_client_error(response: &RawResponse, what: &str) {
    assert!(
        (400..500).contains(&response.status),
        "{what}: {} {}",
        response.status,
        response.body
    );
    for internal in ["database", "0x00", "UTF8", "SQLSTATE", "byte sequence"] {
        assert!(!response.body.contains(internal), "{what}: {}", response.body);
    }
}

/// A request as sent: method, path and query, extra headers, body.
type Probe<'a> = (&'a str, String, Vec<(&'a str, &'a str)>, &'a [u8]);

#[tokio::test]
async fn a_nul_character_anywhere_is_a_client_error_that_names_no_database() {
    let gw = TestGateway::with_sample_object().await;
    let upload = gw
        .client
        .create_multipart_upload()
        .bucket("bkt")
        .key("multi")
        .send()
        .await
        .unwrap();
    let upload_id = upload.upload_id().unwrap();
    // A continuation token is opaque, but a forged one can decode to a NUL.
    let forged_token = {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("ka\0b")
    };
    let requests: Vec<Probe> = vec![
        ("PUT", "/bkt/a%00b".into(), vec![], b"x"),
        ("GET", "/bkt/a%00b".into(), vec![], b""),
        ("DELETE", "/bkt/a%00b".into(), vec![], b""),
        ("GET", "/bkt?list-type=2&prefix=a%00".into(), vec![], b""),
        ("GET", "/bkt?list-type=2&start-after=a%00".into(), vec![], b""),
        ("GET", "/bkt?delimiter=%00".into(), vec![], b""),
        ("GET", "/bkt?marker=%00".into(), vec![], b""),
        (
            "GET",
            format!("/bkt?continuation-token={forged_token}&list-type=2"),
            vec![],
            b"",
        ),
        ("GET", "/bkt?key-marker=%00&uploads".into(), vec![], b""),
        ("GET", "/bkt?uploads&upload-id-marker=%00".into(), vec![], b""),
        (
            "PUT",
            "/bkt/copy".into(),
            vec![("x-amz-copy-source", "/bkt/th%00ere")],
            b"",
        ),
        ("PUT", "/bkt/tagged".into(), vec![("x-amz-tagging", "a=%00")], b"x"),
        (
            "PUT",
            format!("/bkt/multi?partNumber=1&uploadId={upload_id}%00"),
            vec![],
            b"x",
        ),
        (
            "PUT",
            "/bkt/there?tagging".into(),
            vec![],
            b"<Tagging><TagSet><Tag><Key>k</Key><Value>a&#0;b</Value></Tag></TagSet></Tagging>",
        ),
    ];
    for (method, path, extra, body) in &requests {
        let response = gw.signed(method, path, extra, body).await;
        assert_client_error(&response, &format!("{method} {path}"));
    }
    let rows: i64 = gw
        .sql()
        .await
        .query_one("SELECT count(*) FROM s3p.objects", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(rows, 1, "only the setup object");
    gw.stop().await;
}

#[tokio::test]
async fn user_metadata_over_two_kibibytes_is_refused() {
    let gw = TestGateway::with_sample_object().await;
    // 2 KiB of names and values, counted without the x-amz-meta- prefix, as S3 counts them.
    let fits = "v".repeat(2048 - "name".len());
    let over = "v".repeat(2049 - "name".len());
    let put = |value: &str| {
        put_request(&gw.client, "bkt", "meta", b"x")
            .metadata("name", value)
            .send()
    };
    let refused = put(&over).await.unwrap_err();
    assert_eq!(refused.raw_response().map(|r| r.status().as_u16()), Some(400));
    assert_eq!(refused.into_service_error().meta().code(), Some("MetadataTooLarge"));
    assert!(!exists(&gw, "bkt", "meta").await);
    put(&fits).await.unwrap();

    let multipart = gw
        .client
        .create_multipart_upload()
        .bucket("bkt")
        .key("meta-multi")
        .metadata("name", &over)
        .send()
        .await
        .unwrap_err();
    assert_eq!(multipart.into_service_error().meta().code(), Some("MetadataTooLarge"));
    let copy = copy_request(&gw.client, "bkt", "meta-copy", "bkt/there")
        .metadata_directive(aws_sdk_s3::types::MetadataDirective::Replace)
        .metadata("name", &over)
        .send()
        .await
        .unwrap_err();
    assert_eq!(copy.into_service_error().meta().code(), Some("MetadataTooLarge"));
    assert!(!exists(&gw, "bkt", "meta-copy").await);
    gw.stop().await;
}

#[tokio::test]
async fn a_multi_object_delete_without_a_digest_is_refused() {
    let gw = TestGateway::with_sample_object().await;
    let body = b"<Delete><Object><Key>there</Key></Object></Delete>";
    let response = gw.signed("POST", "/bkt?delete", &[], body).await;
    assert_eq!(
        (response.status, response.code()),
        (400, Some("InvalidRequest")),
        "{}",
        response.body
    );
    assert!(response.body.contains("Content-MD5"), "{}", response.body);
    assert!(exists(&gw, "bkt", "there").await, "nothing was deleted");
    let with_md5 = gw
        .signed("POST", "/bkt?delete", &[("content-md5", &content_md5(body))], body)
        .await;
    assert_eq!(with_md5.status, 200, "{}", with_md5.body);
    assert!(!exists(&gw, "bkt", "there").await);
    gw.stop().await;
}

/// A GET of the setup object by a presigned URL with this `X-Amz-Expires`, signed now.
async fn presigned_get(gw: &TestGateway, expires: &str) -> RawResponse {
    let path = signer(gw, ROOT_SECRET_KEY).presign("GET", "/bkt/there", expires, SystemTime::now());
    let headers = vec![("host".to_owned(), gw.gateway.s3_addr.to_string())];
    send(gw.gateway.s3_addr, "GET", &path, &headers, b"").await
}

#[tokio::test]
async fn presigned_urls_valid_for_more_than_a_week_are_refused() {
    let gw = TestGateway::with_sample_object().await;
    let week = presigned_get(&gw, "604800").await;
    assert_eq!((week.status, week.body.as_str()), (200, "0123456789"));
    let longer = presigned_get(&gw, "604801").await;
    assert_eq!(
        (longer.status, longer.code()),
        (400, Some("AuthorizationQueryParametersError")),
        "{}",
        longer.body
    );
    assert!(longer.body.contains("less than a week"), "{}", longer.body);
    gw.stop().await;
}

/// s3s refuses these itself, as a missing field (400 InvalidRequest), before any hook of the
/// gateway's runs: this needs `auth::presigned_expiry` called ahead of s3s in `s3/mod.rs`.
#[tokio::test]
async fn negative_or_non_numeric_presigned_expiries_get_the_s3_answer() {
    let gw = TestGateway::with_sample_object().await;
    for (expires, message) in [
        ("-7", "X-Amz-Expires must be non-negative"),
        ("soon", "X-Amz-Expires should be a number"),
    ] {
        let response = presigned_get(&gw, expires).await;
        assert_eq!(
            (response.status, response.code()),
            (400, Some("AuthorizationQueryParametersError")),
            "{expires}: {}",
            response.body
        );
        assert!(response.body.contains(message), "{expires}: {}", response.body);
    }
    gw.stop().await;
}

/// Needs `s3/domains.rs` as the endpoint's host parser (`s3/mod.rs`).
#[tokio::test]
async fn a_base_domain_matches_a_host_header_with_a_port() {
    let gw = TestGateway::with_args(common::fresh_database().await, &["--s3-domain", "s3.pgvs3.test"]).await;
    gw.client.create_bucket().bucket("vhost").send().await.unwrap();
    let host = format!("vhost.s3.pgvs3.test:{}", gw.gateway.s3_addr.port());
    let signer = Signer {
        access_key: ROOT_ACCESS_KEY.into(),
        secret_key: ROOT_SECRET_KEY.into(),
        host: host.clone(),
    };
    let body = b"by host name and port";
    let headers = with_length(
        signer.sign("PUT", "/file.txt", &[], &sha256_hex(body), SystemTime::now()),
        body.len(),
    );
    let put = send(gw.gateway.s3_addr, "PUT", "/file.txt", &headers, body).await;
    assert_eq!(put.status, 200, "{}", put.body);
    let got = gw
        .client
        .get_object()
        .bucket("vhost")
        .key("file.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(got.body.collect().await.unwrap().into_bytes().as_ref(), body);
    // A host that is not under the base (here a plain name with a port) is path style.
    let local = Signer {
        host: format!("localhost:{}", gw.gateway.s3_addr.port()),
        ..signer
    };
    let headers = local.sign("GET", "/vhost/file.txt", &[], &sha256_hex(b""), SystemTime::now());
    let got = send(gw.gateway.s3_addr, "GET", "/vhost/file.txt", &headers, b"").await;
    assert_eq!((got.status, got.body.as_bytes()), (200, &body[..]), "{}", got.body);
    gw.stop().await;
}

/// The `Content-MD5` value of a body (not in the shared harness: the e2e and operator tests
/// that include it have no MD5 crate).
fn content_md5(data: &[u8]) -> String {
    use base64::Engine;
    use md5::Digest;
    base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(data))
}
