//! TLS end to end with real clients and a CA made in the test: S3 over HTTPS (aws-sdk-s3 and
//! boto3; another CA refused), OJS over HTTPS with HTTP/1.1 and HTTP/2 by ALPN, the admin port
//! with client certificates, RESP over TLS (redis-rs and `redis-cli --tls`), a certificate
//! rotated on disk, the handshake inside the first-request deadline, a plaintext twin, an upload
//! refused over HTTP/2 answered without a stream reset; and the gateway's PostgreSQL connections
//! in each sslmode against a server with ssl=on.

use pgvs3_testkit as common;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use common::certs::{Issued, TestCa};
use common::s3::put_object;
use common::{ROOT_ACCESS_KEY, ROOT_SECRET_KEY, TestGateway, eventually, fresh_database};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Empty};
use pgvs3_gateway::request_body::DRAIN_BYTES;
use pgvs3_gateway::serve::RunningGateway;
use pgvs3_pgtls::rustls;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LIMIT: Duration = Duration::from_secs(10);

fn tls_flags(server: &Issued) -> Vec<String> {
    vec![
        "--tls-cert".into(),
        server.cert.display().to_string(),
        "--tls-key".into(),
        server.key.display().to_string(),
    ]
}

async fn gateway(flags: &[String]) -> TestGateway {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    TestGateway::with_args(fresh_database().await, &flags).await
}

fn https_s3(addr: std::net::SocketAddr, ca_pem: &[u8]) -> aws_sdk_s3::Client {
    use aws_smithy_http_client::tls::{self, TlsContext, TrustStore, rustls_provider::CryptoMode};
    let trust = TrustStore::empty().with_pem_certificate(ca_pem.to_vec());
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .tls_context(TlsContext::builder().with_trust_store(trust).build().unwrap())
        .build_https();
    let config = aws_sdk_s3::Config::builder()
        .behavior_version_latest()
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .endpoint_url(format!("https://{addr}"))
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            ROOT_ACCESS_KEY,
            ROOT_SECRET_KEY,
            None,
            None,
            "test",
        ))
        .force_path_style(true)
        .http_client(http)
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// A rustls client trusting `ca_pem`, offering `alpn`, with a client certificate if given.
fn client_config(ca_pem: &[u8], alpn: &[&[u8]], client: Option<&Issued>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in pgvs3_pgtls::pem_certs(ca_pem).unwrap() {
        roots.add(cert).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(pgvs3_pgtls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        Some(issued) => builder
            .with_client_auth_cert(
                pgvs3_pgtls::read_certs(&issued.cert).unwrap(),
                pgvs3_pgtls::read_key(&issued.key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|name| name.to_vec()).collect();
    Arc::new(config)
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

async fn tls_connect(addr: std::net::SocketAddr, config: Arc<rustls::ClientConfig>) -> std::io::Result<Tls> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    tokio_rustls::TlsConnector::from(config).connect(name, tcp).await
}

/// GET `path` over HTTP/1.1 on an open TLS connection; (status, body).
async fn http1_get(
    sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    path: &str,
) -> hyper::Result<(u16, String)> {
    let request = http::Request::get(path)
        .header("host", "localhost")
        .body(Empty::new())
        .unwrap();
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

async fn http1(stream: Tls) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let (sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

fn peer_certificate(stream: &Tls) -> CertificateDer<'static> {
    stream.get_ref().1.peer_certificates().unwrap()[0].clone().into_owned()
}

#[tokio::test]
async fn s3_over_https_trusts_the_ca_refuses_another_and_keeps_a_plaintext_twin() {
    let ca = TestCa::new("s3");
    let server = ca.issue("server", "localhost", "DNS:localhost,IP:127.0.0.1");
    let mut flags = tls_flags(&server);
    flags.extend(["--s3-plaintext-addr".into(), "127.0.0.1:0".into()]);
    let gw = gateway(&flags).await;
    let s3 = https_s3(gw.gateway.s3_addr, &ca.ca_pem());
    s3.create_bucket().bucket("tls").send().await.unwrap();
    let small = common::noise(4096, 1);
    let large = common::noise(3 << 20, 2);
    for (key, body) in [("small", &small), ("large", &large)] {
        put_object(&s3, "tls", key, body.clone()).await;
        let got = s3.get_object().bucket("tls").key(key).send().await.unwrap();
        assert_eq!(&got.body.collect().await.unwrap().into_bytes()[..], &body[..], "{key}");
    }

    let other = TestCa::new("s3-other");
    let refused = https_s3(gw.gateway.s3_addr, &other.ca_pem())
        .list_buckets()
        .send()
        .await;
    let error = format!(
        "{:?}",
        refused.expect_err("a server certificate from another CA is refused")
    );
    assert!(
        error.contains("certificate") || error.contains("UnknownIssuer"),
        "{error}"
    );
    assert!(
        gw.client.list_buckets().send().await.is_err(),
        "plain HTTP on the TLS port gets no answer"
    );

    // The plaintext twin serves the same store, for clients not moved yet.
    let twin = gw.gateway.s3_plaintext_addr.expect("the plaintext twin");
    let plain = {
        let mut gateway_view = common::s3_client(&gw.gateway, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)
            .config()
            .to_builder();
        gateway_view.set_endpoint_url(Some(format!("http://{twin}")));
        aws_sdk_s3::Client::from_conf(gateway_view.build())
    };
    let got = plain.get_object().bucket("tls").key("small").send().await.unwrap();
    assert_eq!(&got.body.collect().await.unwrap().into_bytes()[..], &small[..]);
}

#[tokio::test]
async fn boto3_over_https_with_the_test_ca() {
    let ca = TestCa::new("boto3");
    let server = ca.issue("server", "localhost", "DNS:localhost,IP:127.0.0.1");
    let gw = gateway(&tls_flags(&server)).await;
    let script = r#"
import os, sys
import boto3, botocore.exceptions
from botocore.config import Config

def client(verify):
    return boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1", verify=verify,
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
s3 = client(sys.argv[2])
s3.create_bucket(Bucket="boto")
s3.put_object(Bucket="boto", Key="k", Body=b"over tls")
assert s3.get_object(Bucket="boto", Key="k")["Body"].read() == b"over tls"
try:
    client(sys.argv[3]).list_buckets()
    raise SystemExit("another CA should be refused")
except botocore.exceptions.SSLError:
    pass
print("boto3 tls ok")
"#;
    let other = TestCa::new("boto3-other");
    let output = tokio::process::Command::new("python3")
        .args(["-c", script])
        .arg(format!("https://localhost:{}", gw.gateway.s3_addr.port()))
        .arg(ca.ca_cert())
        .arg(other.ca_cert())
        .env("AWS_ACCESS_KEY_ID", ROOT_ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", ROOT_SECRET_KEY)
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env_remove("AWS_CA_BUNDLE")
        .env_remove("AWS_PROFILE")
        .output()
        .await
        .expect("python3 (scripts/test installs boto3)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("boto3 tls ok"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn ojs_over_https_by_alpn_and_admin_only_with_a_client_certificate() {
    let ca = TestCa::new("ojs");
    let server = ca.issue("server", "localhost", "DNS:localhost");
    let client = ca.issue("client", "scraper", "DNS:scraper");
    let mut flags = tls_flags(&server);
    flags.extend(["--admin-tls-client-ca".into(), ca.ca_cert().display().to_string()]);
    let gw = gateway(&flags).await;
    let ojs = gw.gateway.ojs_addr.unwrap();

    // HTTP/1.1 when the client offers only that.
    let stream = tls_connect(ojs, client_config(&ca.ca_pem(), &[b"http/1.1"], None))
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let mut sender = http1(stream).await;
    let (status, body) = http1_get(&mut sender, "/ojs/manifest").await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("specversion") || body.contains("version"), "{body}");

    // HTTP/2 when offered first.
    let stream = tls_connect(ojs, client_config(&ca.ca_pem(), &[b"h2", b"http/1.1"], None))
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let request = http::Request::get("https://localhost/ojs/v1/health")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);

    // The admin port: a client certificate from the CA, or nothing.
    let admin = gw.gateway.admin_addr;
    let stream = tls_connect(admin, client_config(&ca.ca_pem(), &[], Some(&client)))
        .await
        .unwrap();
    let mut sender = http1(stream).await;
    assert_eq!(http1_get(&mut sender, "/healthz").await.unwrap().0, 200);
    // TLS 1.3 ends the client's handshake before the server has checked it: the refusal comes
    // as an alert on the first exchange.
    let refused = match tls_connect(admin, client_config(&ca.ca_pem(), &[], None)).await {
        Err(_) => true,
        Ok(stream) => http1_get(&mut http1(stream).await, "/healthz").await.is_err(),
    };
    assert!(refused, "the admin port answered a client without a certificate");
    let stranger_ca = TestCa::new("ojs-stranger");
    let stranger = stranger_ca.issue("client", "stranger", "DNS:stranger");
    let refused = match tls_connect(admin, client_config(&ca.ca_pem(), &[], Some(&stranger))).await {
        Err(_) => true,
        Ok(stream) => http1_get(&mut http1(stream).await, "/healthz").await.is_err(),
    };
    assert!(refused, "the admin port answered a certificate from another CA");
}

/// The console speaks HTTP/1.1 only: offered `h2` first (as every browser does), its TLS
/// listener must not pick it, or the browser would speak HTTP/2 to a server that cannot.
#[tokio::test]
async fn the_console_over_tls_offers_only_http1() {
    let ca = TestCa::new("console");
    let server = ca.issue("server", "localhost", "DNS:localhost");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let console: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut flags = tls_flags(&server);
    flags.extend(["--console-addr".into(), console.to_string()]);
    let _gw = gateway(&flags).await;
    let stream = tls_connect(console, client_config(&ca.ca_pem(), &[b"h2", b"http/1.1"], None))
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let mut sender = http1(stream).await;
    let (status, body) = http1_get(&mut sender, "/login").await.unwrap();
    assert_eq!(status, 200, "{body}");
}

/// `--admin-tls-client-ca` with a plaintext admin listener would ask no one for a certificate:
/// the gateway refuses to start rather than run the admin port open.
#[tokio::test]
async fn a_client_ca_for_a_plaintext_admin_listener_is_refused_at_start() {
    let ca = TestCa::new("admin-plain");
    let server = ca.issue("server", "localhost", "DNS:localhost");
    let mut flags = tls_flags(&server);
    flags.extend([
        "--admin-tls-client-ca".into(),
        ca.ca_cert().display().to_string(),
        "--tls-plaintext".into(),
        "admin".into(),
    ]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let refused = RunningGateway::start(&common::serve_args(&fresh_database().await, &flags)).await;
    let err = format!("{:#}", refused.err().expect("the gateway refuses to start"));
    assert!(
        err.contains("--admin-tls-client-ca") && err.contains("--tls-plaintext admin"),
        "{err}"
    );
}

#[tokio::test]
async fn resp_over_tls_with_redis_rs_and_redis_cli() {
    let ca = TestCa::new("resp");
    let server = ca.issue("server", "localhost", "DNS:localhost,IP:127.0.0.1");
    let mut flags = tls_flags(&server);
    flags.extend(["--resp-addr".into(), "127.0.0.1:0".into()]);
    let gw = gateway(&flags).await;
    let addr = gw.resp_addr();

    let client = redis::Client::build_with_tls(
        format!("rediss://localhost:{}", addr.port()),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca.ca_pem()),
        },
    )
    .unwrap();
    let mut connection = tokio::time::timeout(LIMIT, client.get_multiplexed_async_connection())
        .await
        .expect("connect in time")
        .unwrap();
    let () = redis::cmd("SET")
        .arg("greeting")
        .arg("over tls")
        .query_async(&mut connection)
        .await
        .unwrap();
    let value: String = redis::cmd("GET")
        .arg("greeting")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(value, "over tls");

    // Asynchronous: the gateway answers on this test's runtime.
    let cli = |args: &[&str]| {
        let mut command = tokio::process::Command::new("redis-cli");
        // Without a terminal on stdin redis-cli would wait to read from it.
        command
            .args(["-h", "127.0.0.1", "-p", &addr.port().to_string()])
            .args(args)
            .stdin(std::process::Stdio::null());
        async move { command.output().await.expect("redis-cli") }
    };
    let ca_path = ca.ca_cert().display().to_string();
    let output = cli(&["--tls", "--cacert", &ca_path, "--sni", "localhost", "GET", "greeting"]).await;
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "over tls", "{output:?}");
    let other = TestCa::new("resp-other");
    let other_path = other.ca_cert().display().to_string();
    let output = cli(&["--tls", "--cacert", &other_path, "GET", "greeting"]).await;
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("over tls"),
        "another CA is refused: {output:?}"
    );
}

#[tokio::test]
async fn a_certificate_rotated_on_disk_is_served_to_new_connections() {
    let ca = TestCa::new("rotate");
    let first = ca.issue("first", "localhost", "DNS:localhost");
    let second = ca.issue("second", "localhost", "DNS:localhost");
    let live = ca.issue("live", "localhost", "DNS:localhost");
    let gw = gateway(&tls_flags(&live)).await;
    let admin = gw.gateway.admin_addr;
    // Full handshakes only: a resumed session shows the certificate of the session it resumes,
    // whichever ticket the client's cache hands out (once the startup certificate's).
    let mut full = Arc::unwrap_or_clone(client_config(&ca.ca_pem(), &[], None));
    full.resumption = rustls::client::Resumption::disabled();
    let config = Arc::new(full);
    let der = |issued: &Issued| pgvs3_pgtls::pem_certs(&issued.cert_pem()).unwrap().remove(0);
    let started_with = der(&live);

    // As a Secret volume does it: new files renamed over the served ones.
    let replace = |with: &Issued| {
        for (from, to) in [(&with.cert, &live.cert), (&with.key, &live.key)] {
            let staged = to.with_extension("staged");
            std::fs::copy(from, &staged).unwrap();
            std::fs::rename(&staged, to).unwrap();
        }
    };
    replace(&first);
    let before = tls_connect(admin, Arc::clone(&config)).await.unwrap();
    let served_before = peer_certificate(&before);
    let mut kept = http1(before).await;
    replace(&second);
    eventually(LIMIT, "the rotated certificate served", || {
        let config = Arc::clone(&config);
        let wanted = der(&second);
        async move {
            let stream = tls_connect(admin, config).await.ok()?;
            (peer_certificate(&stream) == wanted).then_some(())
        }
    })
    .await;
    assert!(served_before == der(&first) || served_before == started_with);
    assert_eq!(
        http1_get(&mut kept, "/healthz").await.unwrap().0,
        200,
        "a connection from before the rotation goes on"
    );

    // A pair that does not load (a key of another certificate) leaves the current one served.
    std::fs::copy(&first.key, &live.key).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let stream = tls_connect(admin, Arc::clone(&config)).await.unwrap();
    assert_eq!(peer_certificate(&stream), der(&second));
}

#[tokio::test]
async fn the_tls_handshake_counts_inside_the_first_request_deadline() {
    let ca = TestCa::new("deadline");
    let server = ca.issue("server", "localhost", "DNS:localhost");
    let mut flags = tls_flags(&server);
    // The harness reads metrics over plain HTTP.
    flags.extend(
        [
            "--http-first-request-timeout",
            "1s",
            "--resp-addr",
            "127.0.0.1:0",
            "--resp-first-byte-timeout",
            "1s",
            "--tls-plaintext",
            "admin",
        ]
        .map(String::from),
    );
    let gw = gateway(&flags).await;

    // No handshake at all: closed at the deadline.
    let started = tokio::time::Instant::now();
    let mut silent = TcpStream::connect(gw.gateway.s3_addr).await.unwrap();
    let mut sink = [0u8; 64];
    let read = tokio::time::timeout(LIMIT, silent.read(&mut sink))
        .await
        .expect("closed in time");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );

    // A handshake and then nothing: closed too, at the same deadline.
    let started = tokio::time::Instant::now();
    let mut idle = tls_connect(gw.gateway.s3_addr, client_config(&ca.ca_pem(), &[], None))
        .await
        .unwrap();
    let read = tokio::time::timeout(LIMIT, idle.read(&mut sink))
        .await
        .expect("closed in time");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let refused = gw
        .metric("pgvs3_http_connections_refused_total{reason=\"first_request_timeout\",server=\"s3\"}")
        .await;
    assert_eq!(refused, Some(2.0));

    // RESP: the handshake is inside --resp-first-byte-timeout.
    let started = tokio::time::Instant::now();
    let mut silent = TcpStream::connect(gw.resp_addr()).await.unwrap();
    let read = tokio::time::timeout(LIMIT, silent.read(&mut sink))
        .await
        .expect("closed in time");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    // A plaintext command on the TLS port gets no plaintext answer.
    let mut plain = TcpStream::connect(gw.resp_addr()).await.unwrap();
    plain.write_all(b"PING\r\n").await.unwrap();
    let read = tokio::time::timeout(LIMIT, plain.read(&mut sink))
        .await
        .expect("closed in time");
    assert!(!matches!(read, Ok(n) if sink[..n].starts_with(b"+PONG")), "{read:?}");

    // Garbage instead of a ClientHello ends the connection at once.
    let mut garbage = TcpStream::connect(gw.gateway.s3_addr).await.unwrap();
    garbage.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let read = tokio::time::timeout(LIMIT, garbage.read(&mut sink))
        .await
        .expect("closed in time");
    assert!(
        !matches!(read, Ok(n) if n > 0 && sink[..n].starts_with(b"HTTP/")),
        "{read:?}"
    );
}

const CHUNK: usize = 64 << 10;
static ZEROS: [u8; CHUNK] = [0; CHUNK];

/// How far a client got with an [`Upload`].
#[derive(Default)]
struct UploadProgress {
    /// The client took the whole body (its end included).
    ended: AtomicBool,
    /// The client let go of the body: sent, or given up when its stream was reset.
    dropped: AtomicBool,
}

/// A request body of zeros, `left` chunks of 64 KiB, handed out as fast as the client takes them.
struct Upload {
    left: usize,
    /// Its length is declared (content-length), or it is sent without one.
    declared: bool,
    progress: Arc<UploadProgress>,
}

impl Body for Upload {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.left == 0 {
            this.progress.ended.store(true, Ordering::SeqCst);
            return Poll::Ready(None);
        }
        this.left -= 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&ZEROS)))))
    }

    fn size_hint(&self) -> SizeHint {
        if self.declared {
            SizeHint::with_exact((self.left * CHUNK) as u64)
        } else {
            SizeHint::default()
        }
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        self.progress.dropped.store(true, Ordering::SeqCst);
    }
}

/// An anonymous PUT of `bytes` into `bucket` over an HTTP/2 connection: its status, and how far
/// the body got once the client let go of it.
async fn refused_put(
    sender: &mut hyper::client::conn::http2::SendRequest<Upload>,
    bucket: &str,
    bytes: u64,
    declared: bool,
) -> (u16, Arc<UploadProgress>) {
    let progress = Arc::new(UploadProgress::default());
    let body = Upload {
        left: usize::try_from(bytes).unwrap() / CHUNK,
        declared,
        progress: Arc::clone(&progress),
    };
    let request = http::Request::put(format!("https://localhost/{bucket}/key"))
        .body(body)
        .unwrap();
    let response = sender.send_request(request).await.expect("an answer");
    let status = response.status().as_u16();
    response.into_body().collect().await.expect("the whole answer");
    eventually(LIMIT, "the client done with the request body", || {
        let dropped = progress.dropped.load(Ordering::SeqCst);
        async move { dropped.then_some(()) }
    })
    .await;
    (status, progress)
}

#[tokio::test]
async fn an_upload_refused_over_http2_gets_its_answer_without_a_stream_reset() {
    let ca = TestCa::new("h2-refused");
    let server = ca.issue("server", "localhost", "DNS:localhost,IP:127.0.0.1");
    let gw = gateway(&tls_flags(&server)).await;
    let s3 = gw.gateway.s3_addr;
    https_s3(s3, &ca.ca_pem())
        .create_bucket()
        .bucket("private")
        .send()
        .await
        .unwrap();
    // curl 7.88 reported the reset (exit 92) instead of the answer it had received, on 10 of
    // 10 PUTs of 10 MB: waiting for `100 Continue` (curl's default for large uploads), and with
    // `Expect:` off, sending its body at once. Run without blocking: the gateway serves from
    // this test's runtime.
    let upload = ca.ca_cert().with_file_name("upload");
    std::fs::File::create(&upload).unwrap().set_len(10 << 20).unwrap();
    for expect in ["Expect: 100-continue", "Expect:"] {
        for _ in 0..10 {
            let output = tokio::process::Command::new("curl")
                .args(["-sS", "--http2", "--max-time", "60", "-o", "/dev/null"])
                .args(["-w", "%{http_code} %{http_version}", "-H", expect])
                .arg("--cacert")
                .arg(ca.ca_cert())
                .arg("-T")
                .arg(&upload)
                .arg(format!("https://localhost:{}/private/key", s3.port()))
                .arg("--resolve")
                .arg(format!("localhost:{}:127.0.0.1", s3.port()))
                .output()
                .await
                .expect("curl runs");
            assert_eq!(
                String::from_utf8_lossy(&output.stdout),
                "403 2",
                "curl with {expect:?} ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }

    let stream = tls_connect(s3, client_config(&ca.ca_pem(), &[b"h2"], None))
        .await
        .unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);

    // The 403 comes before the body is read. The gateway then reads the rest, so the client
    // sends its whole body and the stream ends cleanly (it used to be reset after the answer:
    // 4 MiB is well past the 1 MiB the client may send before the gateway reads).
    for declared in [true, false] {
        let (status, progress) = refused_put(&mut sender, "private", 4 << 20, declared).await;
        assert_eq!(status, 403);
        assert!(
            progress.ended.load(Ordering::SeqCst),
            "the stream was reset before the client could send its body (declared length: {declared})"
        );
    }

    // Beyond the drain limit the stream is reset, after the answer: at once when the declared
    // length says so, else once the limit is read.
    for declared in [true, false] {
        let started = std::time::Instant::now();
        let (status, progress) = refused_put(&mut sender, "private", DRAIN_BYTES + (4 << 20), declared).await;
        assert_eq!(status, 403);
        assert!(
            !progress.ended.load(Ordering::SeqCst),
            "a body past the drain limit was read to its end (declared length: {declared})"
        );
        eprintln!("past the limit, declared length {declared}: {:?}", started.elapsed());
    }

    // The connection goes on serving.
    let (status, _) = refused_put(&mut sender, "private", CHUNK as u64, true).await;
    assert_eq!(status, 403);
}

// --- PostgreSQL ---

/// The sslmode tests' server: its own cluster with ssl=on, a CA that knows client
/// certificates, and a login that needs a password over TCP.
struct TlsPostgres {
    ca: TestCa,
    other_ca: TestCa,
    client: Issued,
    port: u16,
    admin: tokio_postgres::Client,
}

async fn tls_postgres(name: &str) -> TlsPostgres {
    let ca = TestCa::new("pg");
    // Named for `localhost` only: 127.0.0.1 is the wrong host name for verify-full.
    let server = ca.issue("server", "localhost", "DNS:localhost");
    let client = ca.issue("client", "tls", "DNS:tls");
    let cluster = common::tls_cluster(name, &server);
    let (admin, connection) = tokio_postgres::connect(&cluster.url("postgres"), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    for statement in [
        "CREATE ROLE tls LOGIN SUPERUSER PASSWORD 'tls-secret'".to_owned(),
        "CREATE DATABASE tls OWNER tls".to_owned(),
        format!("ALTER SYSTEM SET ssl_ca_file = '{}'", ca.ca_cert().display()),
        "SELECT pg_reload_conf()".to_owned(),
    ] {
        admin.batch_execute(&statement).await.unwrap();
    }
    TlsPostgres {
        ca,
        other_ca: TestCa::new("pg-other"),
        client,
        port: cluster.port,
        admin,
    }
}

impl TlsPostgres {
    fn url(&self, host: &str, params: &str) -> String {
        format!(
            "postgres://tls:tls-secret@{host}:{}/tls?application_name=sslmode-test&{params}",
            self.port
        )
    }

    /// Connects as the gateway does; whether the session is encrypted, and the client's DN.
    async fn session(&self, url: &str) -> anyhow::Result<(bool, Option<String>)> {
        let (config, tls) = pgvs3_pgtls::parse(url)?;
        let (client, connection) = config.connect(tls).await?;
        tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT ssl, client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await?;
        Ok((row.get("ssl"), row.get("client_dn")))
    }
}

#[tokio::test]
async fn every_sslmode_against_postgres_with_ssl_on() {
    let pg = tls_postgres("sslmodes").await;
    let ca = pg.ca.ca_cert().display().to_string();
    let other = pg.other_ca.ca_cert().display().to_string();
    let cases: Vec<(&str, String, Option<bool>)> = vec![
        ("127.0.0.1", "sslmode=disable".into(), Some(false)),
        ("127.0.0.1", "sslmode=prefer".into(), Some(true)),
        ("127.0.0.1", String::new(), Some(true)),
        // require without a root certificate checks nothing; with one, the chain (as libpq).
        ("127.0.0.1", "sslmode=require".into(), Some(true)),
        ("127.0.0.1", format!("sslmode=require&sslrootcert={other}"), None),
        // verify-ca: the chain, not the name.
        ("127.0.0.1", format!("sslmode=verify-ca&sslrootcert={ca}"), Some(true)),
        ("127.0.0.1", format!("sslmode=verify-ca&sslrootcert={other}"), None),
        ("localhost", format!("sslmode=verify-full&sslrootcert={ca}"), Some(true)),
        ("127.0.0.1", format!("sslmode=verify-full&sslrootcert={ca}"), None),
        ("localhost", format!("sslmode=verify-full&sslrootcert={other}"), None),
    ];
    for (host, params, encrypted) in &cases {
        let url = pg.url(host, params);
        match (pg.session(&url).await, encrypted) {
            (Ok((ssl, _)), Some(wanted)) => assert_eq!(ssl, *wanted, "{url}"),
            (Err(_), None) => {}
            (outcome, _) => panic!("{url}: {outcome:?}"),
        }
    }
    let error = pg
        .session(&pg.url("127.0.0.1", &format!("sslmode=verify-full&sslrootcert={ca}")))
        .await
        .unwrap_err();
    assert!(format!("{error:#}").contains("not valid for name"), "{error:#}");

    // A client certificate, as CloudNativePG's streaming users present one.
    let with_cert = format!(
        "sslmode=verify-full&sslrootcert={ca}&sslcert={}&sslkey={}",
        pg.client.cert.display(),
        pg.client.key.display()
    );
    let (ssl, dn) = pg.session(&pg.url("localhost", &with_cert)).await.unwrap();
    assert!(ssl);
    assert!(
        dn.is_some_and(|dn| dn.contains("CN=tls")),
        "the server saw the client certificate"
    );

    // A server without TLS (the harness's shared cluster): prefer falls back to plaintext,
    // require refuses.
    let plain: tokio_postgres::Config = fresh_database().await.parse().unwrap();
    let (socket, connection) = plain.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let role = format!("tls_plain_{}", std::process::id());
    socket
        .batch_execute(&format!("CREATE ROLE {role} LOGIN PASSWORD 'plain-secret'"))
        .await
        .unwrap();
    let plain_url = |mode: &str| {
        format!(
            "postgres://{role}:plain-secret@127.0.0.1:{}/postgres?sslmode={mode}",
            plain.get_ports()[0]
        )
    };
    assert!(!pg.session(&plain_url("prefer")).await.unwrap().0);
    let error = pg.session(&plain_url("require")).await.unwrap_err();
    assert!(format!("{error:#}").contains("does not support TLS"), "{error:#}");
}

#[tokio::test]
async fn the_gateway_connects_with_verify_full_and_refuses_the_wrong_host_name() {
    let pg = tls_postgres("gateway").await;
    let ca = pg.ca.ca_cert().display().to_string();
    // Pool, LISTEN connection and migrations all over verified TLS.
    let url = pg
        .url("localhost", &format!("sslmode=verify-full&sslrootcert={ca}"))
        .replace("application_name=sslmode-test&", "");
    let gw = TestGateway::with_args(url.clone(), &[]).await;
    gw.client.create_bucket().bucket("verified").send().await.unwrap();
    let sessions = eventually(LIMIT, "the gateway's pool and LISTEN connections", || {
        let admin = &pg.admin;
        async move {
            let rows = admin
                .query(
                    "SELECT s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
                     WHERE a.application_name = 'pgvs3' AND a.datname = 'tls'",
                    &[],
                )
                .await
                .unwrap();
            (rows.len() >= 2).then_some(rows)
        }
    })
    .await;
    assert!(
        sessions.iter().all(|row| row.get::<_, bool>("ssl")),
        "every gateway session is encrypted"
    );
    gw.stop().await;

    // The wrong host name: the start fails at once with the reason, instead of retrying.
    let wrong = url.replace("@localhost:", "@127.0.0.1:");
    let started = tokio::time::Instant::now();
    let refused = RunningGateway::start(&common::serve_args(&wrong, &[])).await;
    let error = format!(
        "{:#}",
        refused.err().expect("a certificate for another name is refused")
    );
    assert!(error.contains("certificate"), "{error}");
    assert!(started.elapsed() < LIMIT, "{:?}", started.elapsed());
}
