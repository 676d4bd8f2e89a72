//! Presigned URLs (query-string SigV4) made by aws-sdk-s3's presigner and sent as plain HTTP:
//! PUT, GET, HEAD and DELETE work within their expiry; expired or tampered URLs are refused.

use pgvs3_testkit as common;

use std::time::{Duration, SystemTime};

use aws_sdk_s3::presigning::{PresignedRequest, PresigningConfig};
use common::TestGateway;
use common::raw::{self, RawResponse};

async fn send(gw: &TestGateway, presigned: &PresignedRequest, body: &[u8]) -> RawResponse {
    let uri: http::Uri = presigned.uri().parse().unwrap();
    let mut headers: Vec<(String, String)> = presigned
        .headers()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    headers.push(("host".into(), uri.authority().unwrap().to_string()));
    headers.push(("content-length".into(), body.len().to_string()));
    let path = uri.path_and_query().unwrap().as_str();
    raw::send(gw.gateway.s3_addr, presigned.method(), path, &headers, body).await
}

fn valid_for(secs: u64) -> PresigningConfig {
    PresigningConfig::expires_in(Duration::from_secs(secs)).unwrap()
}

#[tokio::test]
async fn presigned_urls_put_get_head_and_delete() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("pre").send().await.unwrap();
    let body = b"uploaded through a presigned URL";

    let put = s3
        .put_object()
        .bucket("pre")
        .key("a b/c.txt")
        .presigned(valid_for(300))
        .await
        .unwrap();
    let answer = send(&gw, &put, body).await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    let get = s3
        .get_object()
        .bucket("pre")
        .key("a b/c.txt")
        .presigned(valid_for(300))
        .await
        .unwrap();
    let answer = send(&gw, &get, b"").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body.as_bytes(), body);

    let head = s3
        .head_object()
        .bucket("pre")
        .key("a b/c.txt")
        .presigned(valid_for(300))
        .await
        .unwrap();
    let answer = send(&gw, &head, b"").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-length"), Some(body.len().to_string().as_str()));

    let delete = s3
        .delete_object()
        .bucket("pre")
        .key("a b/c.txt")
        .presigned(valid_for(300))
        .await
        .unwrap();
    assert_eq!(send(&gw, &delete, b"").await.status, 204);
    let gone = send(&gw, &get, b"").await;
    assert_eq!((gone.status, gone.code()), (404, Some("NoSuchKey")));
}

#[tokio::test]
async fn expired_and_tampered_presigned_urls_are_refused() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("pre").send().await.unwrap();
    s3.put_object()
        .bucket("pre")
        .key("k")
        .body(aws_sdk_s3::primitives::ByteStream::from_static(b"secret"))
        .send()
        .await
        .unwrap();

    // Signed two minutes ago, valid for one.
    let expired = PresigningConfig::builder()
        .start_time(SystemTime::now() - Duration::from_secs(120))
        .expires_in(Duration::from_secs(60))
        .build()
        .unwrap();
    let get = s3.get_object().bucket("pre").key("k").presigned(expired).await.unwrap();
    let answer = send(&gw, &get, b"").await;
    assert_eq!(
        (answer.status, answer.code()),
        (403, Some("AccessDenied")),
        "{}",
        answer.body
    );
    // As AWS words it: when the URL ran out, and the server's clock (review of session 31).
    let uri: http::Uri = get.uri().parse().unwrap();
    let query = uri.query().unwrap();
    let stamp = query.split('&').find_map(|p| p.strip_prefix("X-Amz-Date=")).unwrap();
    assert!(
        answer
            .body
            .contains("<Message>Request has expired</Message><X-Amz-Expires>60</X-Amz-Expires><Expires>"),
        "{}",
        answer.body
    );
    let element = |name: &str| {
        let start = answer.body.find(&format!("<{name}>")).unwrap() + name.len() + 2;
        let end = answer.body[start..].find('<').unwrap() + start;
        answer.body[start..end].to_owned()
    };
    // 60 s after the signing time, in ISO 8601.
    let expires = element("Expires");
    let compact = expires.replace(['-', ':'], "");
    assert_eq!(compact.len(), 16, "{expires}");
    let signed_secs = |text: &str| -> u64 {
        let n = |range: std::ops::Range<usize>| text[range].parse::<u64>().unwrap();
        n(9..11) * 3600 + n(11..13) * 60 + n(13..15)
    };
    assert_eq!(
        (signed_secs(&compact) + 86_400 - signed_secs(stamp)) % 86_400,
        60,
        "{stamp} + 60 s is {expires}"
    );
    let server_time = element("ServerTime");
    assert!(
        server_time.ends_with('Z') && server_time > expires,
        "{server_time} after {expires}"
    );

    let put = s3
        .put_object()
        .bucket("pre")
        .key("k")
        .presigned(valid_for(60))
        .await
        .unwrap();
    let uri = put.uri().to_owned();
    let at = uri.find("X-Amz-Signature=").unwrap() + "X-Amz-Signature=".len();
    let flipped = if &uri[at..=at] == "0" { "1" } else { "0" };
    let tampered_uri = format!("{}{flipped}{}", &uri[..at], &uri[at + 1..]);
    let uri: http::Uri = tampered_uri.parse().unwrap();
    let headers = vec![
        ("host".to_owned(), uri.authority().unwrap().to_string()),
        ("content-length".to_owned(), "5".to_owned()),
    ];
    let answer = raw::send(
        gw.gateway.s3_addr,
        "PUT",
        uri.path_and_query().unwrap().as_str(),
        &headers,
        b"evil!",
    )
    .await;
    assert_eq!(
        (answer.status, answer.code()),
        (403, Some("SignatureDoesNotMatch")),
        "{}",
        answer.body
    );

    // A signature that is not hex at all is one that does not match, as S3 answers (s3s:
    // 400 InvalidRequest).
    let garbled = format!("{}zz{}", &put.uri()[..at], &put.uri()[at + 2..]);
    let uri: http::Uri = garbled.parse().unwrap();
    let answer = raw::send(
        gw.gateway.s3_addr,
        "PUT",
        uri.path_and_query().unwrap().as_str(),
        &headers,
        b"evil!",
    )
    .await;
    assert_eq!(
        (answer.status, answer.code()),
        (403, Some("SignatureDoesNotMatch")),
        "{}",
        answer.body
    );

    // A URL for one key does not open another.
    let other = s3
        .get_object()
        .bucket("pre")
        .key("k")
        .presigned(valid_for(60))
        .await
        .unwrap();
    let moved = other.uri().replacen("/pre/k?", "/pre/other?", 1);
    let uri: http::Uri = moved.parse().unwrap();
    let headers = vec![("host".to_owned(), uri.authority().unwrap().to_string())];
    let answer = raw::send(
        gw.gateway.s3_addr,
        "GET",
        uri.path_and_query().unwrap().as_str(),
        &headers,
        b"",
    )
    .await;
    assert_eq!(answer.code(), Some("SignatureDoesNotMatch"), "{}", answer.body);

    let still = s3.get_object().bucket("pre").key("k").send().await.unwrap();
    assert_eq!(still.body.collect().await.unwrap().into_bytes().as_ref(), b"secret");
}

/// A presigned URL carries the operation it was signed for and nothing more: an `x-amz-*` header
/// its signature does not cover is refused as S3 refuses it (403 AccessDenied "There were headers
/// present in the request which were not signed"), so an upload URL cannot become a copy of an
/// object the signer may read, nor lock what it writes.
#[tokio::test]
async fn presigned_urls_refuse_headers_they_did_not_sign() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("pre").send().await.unwrap();
    s3.put_object()
        .bucket("pre")
        .key("payroll.csv")
        .body(b"secret".to_vec().into())
        .send()
        .await
        .unwrap();
    let upload = s3
        .put_object()
        .bucket("pre")
        .key("uploads/u1")
        .presigned(valid_for(300))
        .await
        .unwrap();
    let uri: http::Uri = upload.uri().parse().unwrap();
    let path = uri.path_and_query().unwrap().as_str();
    let base = vec![
        ("host".to_owned(), uri.authority().unwrap().to_string()),
        ("content-length".to_owned(), "0".to_owned()),
    ];
    for (name, value) in [
        ("x-amz-copy-source", "/pre/payroll.csv"),
        ("x-amz-object-lock-mode", "COMPLIANCE"),
        ("x-amz-meta-owner", "mallory"),
    ] {
        let mut headers = base.clone();
        headers.push((name.to_owned(), value.to_owned()));
        let answer = raw::send(gw.gateway.s3_addr, "PUT", path, &headers, b"").await;
        assert_eq!(
            (answer.status, answer.code()),
            (403, Some("AccessDenied")),
            "{name}: {}",
            answer.body
        );
        assert!(
            answer
                .body
                .contains("headers present in the request which were not signed"),
            "{}",
            answer.body
        );
    }
    let missing = s3.head_object().bucket("pre").key("uploads/u1").send().await;
    assert!(missing.is_err(), "nothing was written or copied");

    // The URL as signed still works.
    let answer = send(&gw, &upload, b"mine").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let got = s3.get_object().bucket("pre").key("uploads/u1").send().await.unwrap();
    assert_eq!(got.body.collect().await.unwrap().into_bytes().as_ref(), b"mine");
    gw.stop().await;
}

/// SigV2 does not sign the sub-resources that select newer operations (`retention`,
/// `legal-hold`, ...): a SigV2 presigned upload URL with `&retention` added would verify and lock
/// the object instead. Such a request needs SigV4; the URL as signed still uploads.
const SIGV2_UNSIGNED: &str = r#"
import base64, hashlib, hmac, os, re, time, urllib.parse, urllib.request, urllib.error
url = os.environ["AWS_ENDPOINT_URL"]
expires = str(int(time.time()) + 300)
string_to_sign = f"PUT\n\napplication/octet-stream\n{expires}\n/bkt/locked"
signature = base64.b64encode(hmac.new(os.environ["SK"].encode(), string_to_sign.encode(), hashlib.sha1).digest()).decode()
query = urllib.parse.urlencode({"AWSAccessKeyId": os.environ["AK"], "Expires": expires, "Signature": signature})

def put(extra, body):
    request = urllib.request.Request(f"{url}/bkt/locked?{query}{extra}", data=body, method="PUT", headers={"Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, None
    except urllib.error.HTTPError as err:
        found = re.search(r"<Code>([^<]*)</Code>", err.read().decode())
        return err.code, found.group(1) if found else None

retention = b'<Retention><Mode>COMPLIANCE</Mode><RetainUntilDate>2099-01-01T00:00:00Z</RetainUntilDate></Retention>'
assert put("&retention", retention) == (403, "AccessDenied"), put("&retention", retention)
assert put("&legal-hold", b'<LegalHold><Status>ON</Status></LegalHold>') == (403, "AccessDenied")
assert put("", b"plain") == (200, None), put("", b"plain")
print("sigv2 unsigned ok")
"#;

#[tokio::test]
async fn sigv2_urls_cannot_name_sub_resources_they_do_not_sign() {
    let gw = TestGateway::with_sample_object().await;
    gw.python_passes(SIGV2_UNSIGNED, "sigv2 unsigned ok").await;
    gw.stop().await;
}
