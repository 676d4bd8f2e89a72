//! Bucket CORS as S3 does it: Put/Get/DeleteBucketCors with aws-sdk-s3 and boto3, rules S3
//! refuses, unsigned preflights matched (or refused with S3's 403) against the rules, the
//! Access-Control-* headers on real signed responses, and a real browser (headless Chromium)
//! on another origin doing a `fetch()` PUT and GET of presigned URLs. Without chromium the
//! browser test says "browser tier not run" and passes, unless PGVS3_REQUIRE_BROWSER=1 (what a
//! CI that installs chromium sets) makes that a failure.

use pgvs3_testkit as common;

use std::time::Duration;

use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::types::{CorsConfiguration, CorsRule};
use common::TestGateway;
use common::raw::{self, RawResponse};
use common::s3::put_object;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> CorsRule {
    let mut rule = CorsRule::builder().set_allowed_origins(Some(origins.iter().map(|s| s.to_string()).collect()));
    for method in methods {
        rule = rule.allowed_methods(*method);
    }
    for header in headers {
        rule = rule.allowed_headers(*header);
    }
    rule.expose_headers("ETag").max_age_seconds(600).build().unwrap()
}

async fn put_cors(gw: &TestGateway, bucket: &str, rules: Vec<CorsRule>) -> Result<(), String> {
    let config = CorsConfiguration::builder()
        .set_cors_rules(Some(rules))
        .build()
        .unwrap();
    gw.client
        .put_bucket_cors()
        .bucket(bucket)
        .cors_configuration(config)
        .send()
        .await
        .map(|_| ())
        .map_err(|err| err.into_service_error().meta().code().unwrap_or_default().to_owned())
}

/// An unsigned request (what a browser sends for a preflight).
async fn unsigned(gw: &TestGateway, method: &str, path: &str, extra: &[(&str, &str)]) -> RawResponse {
    let mut headers = vec![("host".to_owned(), gw.gateway.s3_addr.to_string())];
    headers.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    raw::send(gw.gateway.s3_addr, method, path, &headers, b"").await
}

#[tokio::test]
async fn cors_rules_are_put_read_back_refused_when_bad_and_deleted() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("web").send().await.unwrap();
    let missing = gw.client.get_bucket_cors().bucket("web").send().await.unwrap_err();
    assert_eq!(
        missing.into_service_error().meta().code(),
        Some("NoSuchCORSConfiguration")
    );

    let rules = vec![
        rule(&["https://*.example.com"], &["GET", "HEAD"], &[]),
        rule(&["http://app.test"], &["PUT", "POST", "DELETE"], &["*"]),
    ];
    put_cors(&gw, "web", rules.clone()).await.unwrap();
    let got = gw.client.get_bucket_cors().bucket("web").send().await.unwrap();
    assert_eq!(got.cors_rules(), rules.as_slice());

    assert_eq!(
        put_cors(&gw, "web", vec![rule(&["*"], &["PATCH"], &[])]).await,
        Err("InvalidRequest".into())
    );
    assert_eq!(
        put_cors(&gw, "web", vec![rule(&["http://*.*.test"], &["GET"], &[])]).await,
        Err("InvalidRequest".into())
    );
    assert_eq!(put_cors(&gw, "nope", rules.clone()).await, Err("NoSuchBucket".into()));
    // The refused puts left the rules as they were.
    let got = gw.client.get_bucket_cors().bucket("web").send().await.unwrap();
    assert_eq!(got.cors_rules().len(), 2);

    gw.client.delete_bucket_cors().bucket("web").send().await.unwrap();
    let gone = gw.client.get_bucket_cors().bucket("web").send().await.unwrap_err();
    assert_eq!(gone.into_service_error().meta().code(), Some("NoSuchCORSConfiguration"));
    gw.stop().await;
}

#[tokio::test]
async fn preflights_are_answered_unsigned_from_the_rules_and_real_responses_carry_the_headers() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("web").send().await.unwrap();
    gw.client.create_bucket().bucket("plain").send().await.unwrap();
    put_cors(
        &gw,
        "web",
        vec![
            rule(&["http://*.app.test"], &["PUT", "GET"], &["content-*", "x-amz-*"]),
            rule(&["*"], &["GET"], &[]),
        ],
    )
    .await
    .unwrap();

    let ok = unsigned(
        &gw,
        "OPTIONS",
        "/web/some/key",
        &[
            ("origin", "http://my.app.test"),
            ("access-control-request-method", "PUT"),
            ("access-control-request-headers", "Content-Type, X-Amz-Date"),
        ],
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.header("access-control-allow-origin"), Some("http://my.app.test"));
    assert_eq!(ok.header("access-control-allow-methods"), Some("PUT, GET"));
    assert_eq!(
        ok.header("access-control-allow-headers"),
        Some("content-type, x-amz-date")
    );
    assert_eq!(ok.header("access-control-expose-headers"), Some("ETag"));
    assert_eq!(ok.header("access-control-max-age"), Some("600"));
    assert_eq!(ok.header("access-control-allow-credentials"), Some("true"));
    assert!(ok.header("vary").is_some_and(|v| v.contains("Origin")));

    // Any origin may GET (the second rule): S3 answers `*` then.
    let any = unsigned(
        &gw,
        "OPTIONS",
        "/web/k",
        &[("origin", "http://elsewhere"), ("access-control-request-method", "GET")],
    )
    .await;
    assert_eq!(any.status, 200);
    assert_eq!(any.header("access-control-allow-origin"), Some("*"));

    for (path, origin, method, headers, status, code) in [
        ("/web/k", "http://elsewhere", "PUT", "", 403, "AccessForbidden"),
        (
            "/web/k",
            "http://my.app.test",
            "PUT",
            "authorization",
            403,
            "AccessForbidden",
        ),
        ("/web/k", "http://my.app.test", "DELETE", "", 403, "AccessForbidden"),
        ("/plain/k", "http://my.app.test", "GET", "", 403, "AccessForbidden"),
        ("/missing/k", "http://my.app.test", "GET", "", 404, "NoSuchBucket"),
    ] {
        let mut extra = vec![("origin", origin), ("access-control-request-method", method)];
        if !headers.is_empty() {
            extra.push(("access-control-request-headers", headers));
        }
        let refused = unsigned(&gw, "OPTIONS", path, &extra).await;
        assert_eq!(
            (refused.status, refused.code()),
            (status, Some(code)),
            "{path} {method} {headers}"
        );
        assert!(refused.header("access-control-allow-origin").is_none());
        if code == "AccessForbidden" && path.starts_with("/web") {
            assert!(
                refused.body.contains("CORSResponse: This CORS request is not allowed"),
                "{}",
                refused.body
            );
        }
    }
    let no_origin = unsigned(&gw, "OPTIONS", "/web/k", &[("access-control-request-method", "GET")]).await;
    assert_eq!((no_origin.status, no_origin.code()), (400, Some("BadRequest")));

    // A real (signed) request from an allowed origin gets the headers; from another, none.
    put_object(&gw.client, "web", "k", b"v").await;
    let get = gw
        .signed("GET", "/web/k", &[("origin", "http://my.app.test")], b"")
        .await;
    assert_eq!(get.status, 200);
    assert_eq!(get.header("access-control-allow-origin"), Some("http://my.app.test"));
    assert_eq!(get.header("access-control-expose-headers"), Some("ETag"));
    let put = gw
        .signed("PUT", "/web/k2", &[("origin", "http://other.test")], b"x")
        .await;
    assert_eq!(put.status, 200);
    assert!(
        put.header("access-control-allow-origin").is_none(),
        "PUT is not allowed from that origin"
    );
    // Refusals too: a browser must be able to read why (here a bad signature, refused before
    // the request is routed).
    let forged = unsigned(
        &gw,
        "GET",
        "/web/k",
        &[
            ("origin", "http://my.app.test"),
            ("x-amz-date", "20260101T000000Z"),
            ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=nobody/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00",
            ),
        ],
    )
    .await;
    assert_eq!(forged.status, 403, "{}", forged.body);
    assert_eq!(forged.header("access-control-allow-origin"), Some("http://my.app.test"));
    let plain = gw.signed("GET", "/web/k", &[], b"").await;
    assert!(
        plain.header("access-control-allow-origin").is_none(),
        "no Origin, no CORS headers"
    );
    gw.stop().await;
}

#[tokio::test]
async fn boto3_puts_and_reads_cors_rules() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("web").send().await.unwrap();
    let script = r#"
import os, boto3, botocore
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1",
                  aws_access_key_id=os.environ["AK"], aws_secret_access_key=os.environ["SK"])
rules = [{"AllowedOrigins": ["http://a.test"], "AllowedMethods": ["GET", "PUT"], "AllowedHeaders": ["*"],
          "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 30}]
s3.put_bucket_cors(Bucket="web", CORSConfiguration={"CORSRules": rules})
got = s3.get_bucket_cors(Bucket="web")["CORSRules"]
assert got == rules, got
try:
    s3.put_bucket_cors(Bucket="web", CORSConfiguration={"CORSRules": [{"AllowedOrigins": ["*"], "AllowedMethods": ["TRACE"]}]})
    raise SystemExit("TRACE was accepted")
except botocore.exceptions.ClientError as err:
    assert err.response["Error"]["Code"] == "InvalidRequest", err.response
s3.delete_bucket_cors(Bucket="web")
try:
    s3.get_bucket_cors(Bucket="web")
    raise SystemExit("rules still there")
except botocore.exceptions.ClientError as err:
    assert err.response["Error"]["Code"] == "NoSuchCORSConfiguration", err.response
print("boto3 cors ok")
"#;
    gw.python_passes(script, "boto3 cors ok").await;
    gw.stop().await;
}

async fn bind() -> (u16, tokio::net::TcpListener) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    (listener.local_addr().unwrap().port(), listener)
}

/// The test page: a presigned PUT and GET with `fetch()`, the outcome POSTed back to the page's
/// own origin as JSON.
fn browser_page(put: &str, get: &str) -> String {
    format!(
        r#"<!doctype html><html><body><script>
(async () => {{
  let result;
  try {{
    const put = await fetch({put:?}, {{method: "PUT", body: "hello from the browser", headers: {{"Content-Type": "text/plain"}}}});
    const etag = put.headers.get("ETag");
    const get = await fetch({get:?});
    result = {{put: put.status, etag, get: get.status, body: await get.text()}};
  }} catch (err) {{
    result = {{error: String(err)}};
  }}
  await fetch("/result", {{method: "POST", body: JSON.stringify(result)}});
}})();
</script></body></html>"#
    )
}

/// Serves `page` at `/` on `listener`, has headless Chromium load it, and returns what the
/// page POSTs to `/result` (within a minute).
async fn run_page(
    chromium: &str,
    profile: &std::path::Path,
    page: String,
    listener: tokio::net::TcpListener,
) -> serde_json::Value {
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        let mut sender = Some(sender);
        while let Ok((mut stream, _)) = listener.accept().await {
            let (head, body) = read_request(&mut stream).await;
            let reply = match head.starts_with("POST /result") {
                true => {
                    if let Some(sender) = sender.take() {
                        let _ = sender.send(body);
                    }
                    String::new()
                }
                false => page.clone(),
            };
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        }
    });
    let mut browser = tokio::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-dev-shm-usage",
            &format!("--user-data-dir={}", profile.display()),
            "--virtual-time-budget=20000",
            "--dump-dom",
            &url,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(60), receiver)
        .await
        .expect("the page reports within a minute")
        .expect("the page server is up");
    let _ = tokio::time::timeout(Duration::from_secs(30), browser.wait()).await;
    let _ = browser.kill().await;
    server.abort();
    serde_json::from_str(&outcome).unwrap()
}

/// One HTTP/1.1 request's head and body (bounded: the page's requests are small).
async fn read_request(stream: &mut tokio::net::TcpStream) -> (String, String) {
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return (String::new(), String::new()),
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
        if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if request.len() > 65_536 {
            return (String::new(), String::new());
        }
    };
    let head = String::from_utf8_lossy(&request[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0)
        .min(65_536);
    while request.len() < head_end + length {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    (head, String::from_utf8_lossy(&request[head_end..]).into_owned())
}

#[tokio::test]
async fn a_browser_on_another_origin_puts_and_gets_through_presigned_urls() {
    let Some(chromium) = ["chromium", "chromium-browser"].into_iter().find(|name| {
        std::process::Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        assert!(
            std::env::var_os("PGVS3_REQUIRE_BROWSER").is_none(),
            "browser tier not run: chromium is not installed, and PGVS3_REQUIRE_BROWSER is set"
        );
        eprintln!("browser tier not run: chromium is not installed (apt-get install chromium)");
        return;
    };
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("web").send().await.unwrap();
    let presign = || PresigningConfig::expires_in(Duration::from_secs(300)).unwrap();
    let put_url = gw
        .client
        .put_object()
        .bucket("web")
        .key("from-browser.txt")
        .presigned(presign())
        .await
        .unwrap();
    let get_url = gw
        .client
        .get_object()
        .bucket("web")
        .key("from-browser.txt")
        .presigned(presign())
        .await
        .unwrap();
    let page = browser_page(put_url.uri(), get_url.uri());
    let profile = std::env::temp_dir().join(format!("pgvs3-chromium-{}", std::process::id()));

    // Without CORS rules the browser must refuse the gateway's answers (the fetch rejects).
    let (_, listener) = bind().await;
    let refused = run_page(chromium, &profile, page.clone(), listener).await;
    assert!(
        refused["error"].is_string(),
        "no CORS rules, yet the browser was let through: {refused}"
    );

    // With a rule for the page's origin (a fresh page server: its own port, its own origin).
    let (page_port, listener) = bind().await;
    let origin = format!("http://127.0.0.1:{page_port}");
    put_cors(&gw, "web", vec![rule(&[&origin], &["PUT", "GET"], &["*"])])
        .await
        .unwrap();
    let outcome = run_page(chromium, &profile, page, listener).await;
    assert_eq!(outcome["put"], 200, "{outcome}");
    assert_eq!(outcome["get"], 200, "{outcome}");
    assert_eq!(outcome["body"], "hello from the browser", "{outcome}");
    assert!(
        outcome["etag"].as_str().is_some_and(|etag| etag.len() > 2),
        "ETag exposed: {outcome}"
    );
    let stored = gw
        .client
        .get_object()
        .bucket("web")
        .key("from-browser.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(
        &stored.body.collect().await.unwrap().into_bytes()[..],
        b"hello from the browser"
    );
    let _ = std::fs::remove_dir_all(&profile);
    gw.stop().await;
}

#[tokio::test]
async fn preflights_find_the_bucket_of_a_virtual_host_style_request() {
    let gw = TestGateway::with_args(common::fresh_database().await, &["--s3-domain", "s3.pgvs3.test"]).await;
    gw.client.create_bucket().bucket("web").send().await.unwrap();
    put_cors(&gw, "web", vec![rule(&["http://app.test"], &["GET"], &[])])
        .await
        .unwrap();
    let port = gw.gateway.s3_addr.port();
    let preflight = |host: String, path: &'static str| {
        let headers = vec![
            ("host".to_owned(), host),
            ("origin".to_owned(), "http://app.test".to_owned()),
            ("access-control-request-method".to_owned(), "GET".to_owned()),
        ];
        let addr = gw.gateway.s3_addr;
        async move { raw::send(addr, "OPTIONS", path, &headers, b"").await }
    };
    let hosted = preflight(format!("web.s3.pgvs3.test:{port}"), "/some/key").await;
    assert_eq!(hosted.status, 200, "{}", hosted.body);
    assert_eq!(hosted.header("access-control-allow-origin"), Some("http://app.test"));
    // The base domain alone is path style: the first segment names the bucket.
    let path_style = preflight(format!("s3.pgvs3.test:{port}"), "/web/some/key").await;
    assert_eq!(path_style.status, 200, "{}", path_style.body);
    let other = preflight(format!("other.s3.pgvs3.test:{port}"), "/web/k").await;
    assert_eq!((other.status, other.code()), (404, Some("NoSuchBucket")));
    gw.stop().await;
}
