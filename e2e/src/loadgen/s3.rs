//! S3 cases for the load generator: a keep-alive HTTP client that signs every request with
//! SigV4 (as real clients do), and the operations with their verification.

use std::sync::Arc;
use std::time::SystemTime;

use aws_sigv4::http_request::{PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings, sign};
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::Outcome;

/// Where the load goes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Target {
    pub endpoint: String,
    /// The CA that signed an `https://` endpoint's certificate (PEM).
    #[serde(skip)]
    pub ca_cert: Option<std::path::PathBuf>,
    pub region: String,
    pub access_key: String,
    #[serde(skip)]
    pub secret_key: String,
    /// A session's token (temporary credentials from STS), sent as `x-amz-security-token`.
    #[serde(skip)]
    pub session_token: Option<String>,
    pub bucket: String,
    /// Whether the bucket gets versioning Enabled when it is created.
    pub versioning: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Get,
    Head,
    Range,
    Put,
    Overwrite,
    Delete,
    List,
}

/// One case: an operation on objects of one size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Case {
    pub operation: Operation,
    pub size: u64,
    /// Distinct keys the case cycles through.
    pub keys: u64,
    /// Every request hits key 0.
    pub shared_key: bool,
    /// Reads walk the keys in order, so no key is read twice until all have been.
    pub unique_reads: bool,
    /// Bytes per ranged read.
    pub range_size: u64,
    pub prefix: String,
}

/// The TLS settings of an `https://` endpoint: the roots in `ca_cert` (none without one).
fn tls_config(ca_cert: Option<&std::path::Path>) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    if let Some(path) = ca_cert {
        for cert in CertificateDer::pem_file_iter(path).map_err(|e| format!("{}: {e}", path.display()))? {
            let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
            roots.add(cert).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())
        .map(|config| config.with_root_certificates(roots).with_no_client_auth())
}

/// A keep-alive HTTP/1.1 client for `http://` and `https://` endpoints.
pub type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The client of an endpoint: `http://` goes straight to TCP, `https://` through rustls,
/// trusting `ca_cert`.
pub fn http_client(ca_cert: Option<&std::path::Path>) -> Result<HttpClient, String> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls_config(ca_cert)?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    Ok(Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1024)
        .build(connector))
}

/// Signs `request` with SigV4 for `service` (its body as `body` says): the headers it carries
/// are signed, `x-amz-security-token` added when `identity` is a session's.
pub fn sign_request(
    request: &mut http::Request<Full<Bytes>>,
    body: SignableBody<'_>,
    identity: &Identity,
    region: &str,
    service: &str,
    settings: SigningSettings,
) -> Result<(), String> {
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(identity)
        .region(region)
        .name(service)
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .map_err(|e| format!("signing: {e}"))?
        .into();
    let uri = request.uri().to_string();
    let signed_headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let signable = SignableRequest::new(
        request.method().as_str(),
        uri.as_str(),
        signed_headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        body,
    )
    .map_err(|e| format!("signing: {e}"))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| format!("signing: {e}"))?
        .into_parts();
    instructions.apply_to_request_http1x(request);
    Ok(())
}

pub struct S3Client {
    http: HttpClient,
    target: Target,
    identity: Identity,
}

impl S3Client {
    pub fn new(target: Target) -> S3Client {
        let http = http_client(target.ca_cert.as_deref()).unwrap_or_else(|err| panic!("--ca-cert: {err}"));
        let credentials = aws_credential_types::Credentials::new(
            &target.access_key,
            &target.secret_key,
            target.session_token.clone(),
            None,
            "pgvs3-loadgen",
        );
        S3Client {
            http,
            identity: credentials.into(),
            target,
        }
    }

    fn object_path(&self, key: &str) -> String {
        format!("/{}/{key}", self.target.bucket)
    }

    /// Sends one signed request and reads the whole response body.
    async fn send(
        &self,
        method: &str,
        path_and_query: &str,
        body: Bytes,
        headers: &[(&str, String)],
    ) -> Result<(http::StatusCode, http::HeaderMap, Bytes), String> {
        let response = self.request(method, path_and_query, body, headers).await?;
        let (parts, incoming) = response.into_parts();
        let bytes = incoming.collect().await.map_err(|e| format!("body: {e}"))?.to_bytes();
        Ok((parts.status, parts.headers, bytes))
    }

    /// GETs an object (or a range of it, answered with `status`) and compares the body with
    /// `expected` frame by frame as it arrives: nothing is copied, so the client's own cost
    /// stays out of the latency of large reads.
    async fn get_verified(&self, path: &str, headers: &[(&str, String)], status: u16, expected: &[u8]) -> Outcome {
        let response = match self.request("GET", path, Bytes::new(), headers).await {
            Ok(response) => response,
            Err(kind) => return Outcome::Error(kind),
        };
        let (parts, mut incoming) = response.into_parts();
        if parts.status.as_u16() != status {
            let body = incoming.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
            return status_error(parts.status, &body);
        }
        let mut offset = 0;
        while let Some(frame) = incoming.frame().await {
            let frame = match frame {
                Ok(frame) => frame,
                Err(e) => return Outcome::Error(format!("body: {e}")),
            };
            if let Ok(data) = frame.into_data() {
                let end = offset + data.len();
                if expected.get(offset..end) != Some(&data[..]) {
                    return Outcome::Error("wrong bytes".into());
                }
                offset = end;
            }
        }
        if offset != expected.len() {
            return Outcome::Error("wrong size".into());
        }
        Outcome::Ok { bytes: offset as u64 }
    }

    /// Signs and sends one request; the answer's body is left to the caller.
    async fn request(
        &self,
        method: &str,
        path_and_query: &str,
        body: Bytes,
        headers: &[(&str, String)],
    ) -> Result<http::Response<hyper::body::Incoming>, String> {
        let uri = format!("{}{path_and_query}", self.target.endpoint);
        let mut request = http::Request::builder().method(method).uri(&uri);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let mut request = request
            .body(Full::new(body.clone()))
            .map_err(|e| format!("request: {e}"))?;
        let mut settings = SigningSettings::default();
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let signable_body = if body.is_empty() {
            SignableBody::Bytes(&[])
        } else {
            SignableBody::UnsignedPayload
        };
        sign_request(
            &mut request,
            signable_body,
            &self.identity,
            &self.target.region,
            "s3",
            settings,
        )?;
        self.http.request(request).await.map_err(|e| format!("connection: {e}"))
    }

    /// Creates the bucket; one that already exists is fine. A server that says "slow down"
    /// (503) is given time, as in [`S3Client::put_patiently`].
    pub async fn ensure_bucket(&self) -> anyhow::Result<()> {
        let path = format!("/{}", self.target.bucket);
        let mut attempt = 0;
        let (status, _, body) = loop {
            let answer = self
                .send("PUT", &path, Bytes::new(), &[])
                .await
                .map_err(anyhow::Error::msg)?;
            if answer.0 != http::StatusCode::SERVICE_UNAVAILABLE || attempt == SETUP_ATTEMPTS {
                break answer;
            }
            attempt += 1;
            tokio::time::sleep(setup_backoff(attempt)).await;
        };
        // Some servers (rclone) answer BucketAlreadyExists for a bucket of the same owner; a bucket
        // that really is someone else's fails the case's first request instead. A role's session
        // may not create buckets (pgvs3 refuses it even one its policy grants s3:* on): a bucket
        // it can HEAD is there for it.
        let text = String::from_utf8_lossy(&body);
        let owned = text.contains("BucketAlreadyOwnedByYou") || text.contains("BucketAlreadyExists");
        let usable = status == http::StatusCode::FORBIDDEN
            && self.target.session_token.is_some()
            && self
                .send("HEAD", &path, Bytes::new(), &[])
                .await
                .is_ok_and(|(status, ..)| status.is_success());
        anyhow::ensure!(
            status.is_success() || owned || usable,
            "creating bucket {path}: {status} {}",
            text
        );
        if self.target.versioning {
            let config = Bytes::from_static(
                b"<VersioningConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Status>Enabled</Status></VersioningConfiguration>",
            );
            let (status, _, body) = self
                .send("PUT", &format!("{path}?versioning"), config, &[])
                .await
                .map_err(anyhow::Error::msg)?;
            anyhow::ensure!(
                status.is_success(),
                "enabling versioning on {path}: {status} {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(())
    }

    pub async fn put(&self, key: &str, body: Bytes) -> Outcome {
        let len = body.len() as u64;
        match self.send("PUT", &self.object_path(key), body, &[]).await {
            Ok((status, ..)) if status.is_success() => Outcome::Ok { bytes: len },
            Ok((status, _, body)) => status_error(status, &body),
            Err(kind) => Outcome::Error(kind),
        }
    }
}

/// Setup requests (bucket, seeded objects) retry a 503 this many times: a gateway that is
/// shedding load must not fail a run before it starts measuring.
const SETUP_ATTEMPTS: u32 = 16;

/// 100 ms, 200 ms, ... at most 2 s (about 25 s in all), each with up to half again of jitter so
/// that seeders turned away together do not come back together.
fn setup_backoff(attempt: u32) -> std::time::Duration {
    let base = (100u64 << attempt.min(5)).min(2000);
    // A fresh RandomState is randomly keyed: its hash of anything is a random number.
    let random = std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), attempt);
    let jitter = random % (base / 2 + 1);
    std::time::Duration::from_millis(base + jitter)
}

impl S3Client {
    /// A PUT for setup: a 503 (SlowDown, a full connection cap) or a reset connection is retried
    /// with backoff.
    async fn put_patiently(&self, key: &str, body: Bytes) -> Outcome {
        let mut attempt = 0;
        loop {
            let outcome = self.put(key, body.clone()).await;
            // A connection beyond the server's cap may be reset before its 503 is read.
            let shed =
                matches!(&outcome, Outcome::Error(kind) if kind.starts_with("503") || kind.starts_with("connection"));
            if !shed || attempt == SETUP_ATTEMPTS {
                return outcome;
            }
            attempt += 1;
            tokio::time::sleep(setup_backoff(attempt)).await;
        }
    }
}

fn status_error(status: http::StatusCode, body: &[u8]) -> Outcome {
    let text = String::from_utf8_lossy(body);
    let code = text
        .split("<Code>")
        .nth(1)
        .and_then(|rest| rest.split("</Code>").next())
        .unwrap_or("");
    Outcome::Error(format!("{} {code}", status.as_u16()).trim().to_owned())
}

/// A case bound to a client and its expected bytes.
pub struct Runner {
    client: Arc<S3Client>,
    case: Case,
    payload: Bytes,
}

impl Runner {
    /// A runner whose objects hold the generated payload of the case's size.
    pub fn new(client: Arc<S3Client>, case: Case) -> Runner {
        let payload = super::payload(case.size);
        Runner::with_payload(client, case, payload)
    }

    /// A runner whose objects hold `payload` (e.g. a fixture file's bytes); `case.size` must be
    /// its length.
    pub fn with_payload(client: Arc<S3Client>, case: Case, payload: Bytes) -> Runner {
        debug_assert_eq!(case.size, payload.len() as u64);
        Runner { client, case, payload }
    }

    pub fn key(&self, index: u64) -> String {
        format!("{}{index:08}", self.case.prefix)
    }

    /// Writes the objects a read case reads, through this runner's endpoint.
    pub async fn prepare(&self, concurrency: usize) -> anyhow::Result<()> {
        self.prepare_via(&self.client, concurrency).await
    }

    /// Writes the objects a read case reads through `seeder`, another endpoint: e.g. straight
    /// to a cache's origin, so that the cache's reads of them start cold.
    pub async fn prepare_via(&self, seeder: &S3Client, concurrency: usize) -> anyhow::Result<()> {
        if matches!(self.case.operation, Operation::Put | Operation::Overwrite) {
            return self.client.ensure_bucket().await;
        }
        seeder.ensure_bucket().await?;
        use futures::StreamExt;
        let keys = if self.case.shared_key { 1 } else { self.case.keys };
        let results: Vec<Outcome> = futures::stream::iter(0..keys)
            .map(|index| async move { seeder.put_patiently(&self.key(index), self.payload.clone()).await })
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        if let Some(Outcome::Error(kind)) = results.into_iter().find(|o| matches!(o, Outcome::Error(_))) {
            anyhow::bail!("preparing {keys} objects: {kind}");
        }
        Ok(())
    }

    fn pick(&self, worker: usize, sequence: u64) -> u64 {
        if self.case.shared_key {
            0
        } else if self.case.unique_reads {
            sequence % self.case.keys
        } else {
            (worker as u64 * 7919 + sequence * 104_729) % self.case.keys
        }
    }
}

impl super::Request for Runner {
    async fn once(&self, worker: usize, sequence: u64) -> Outcome {
        let key = self.key(self.pick(worker, sequence));
        let client = &self.client;
        match self.case.operation {
            Operation::Put => {
                client
                    .put(&self.key(sequence % self.case.keys.max(1)), self.payload.clone())
                    .await
            }
            Operation::Overwrite => client.put(&key, self.payload.clone()).await,
            Operation::Get => {
                client
                    .get_verified(&client.object_path(&key), &[], 200, &self.payload)
                    .await
            }
            Operation::Range => {
                let length = self.case.range_size.min(self.case.size).max(1);
                let start = (sequence * 7_368_787) % (self.case.size - length + 1);
                let range = format!("bytes={start}-{}", start + length - 1);
                let expected = &self.payload[start as usize..(start + length) as usize];
                client
                    .get_verified(&client.object_path(&key), &[("range", range)], 206, expected)
                    .await
            }
            Operation::Head => match client.send("HEAD", &client.object_path(&key), Bytes::new(), &[]).await {
                Ok((status, headers, _)) if status.is_success() => {
                    let length = headers
                        .get("content-length")
                        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                    if length == Some(self.case.size) {
                        Outcome::Ok { bytes: 0 }
                    } else {
                        Outcome::Error("wrong content-length".into())
                    }
                }
                Ok((status, _, body)) => status_error(status, &body),
                Err(kind) => Outcome::Error(kind),
            },
            Operation::Delete => match client
                .send("DELETE", &client.object_path(&key), Bytes::new(), &[])
                .await
            {
                Ok((status, ..)) if status.is_success() => Outcome::Ok { bytes: 0 },
                Ok((status, _, body)) => status_error(status, &body),
                Err(kind) => Outcome::Error(kind),
            },
            Operation::List => {
                let query = format!(
                    "/{}?list-type=2&prefix={}&max-keys=1000",
                    client.target.bucket, self.case.prefix
                );
                match client.send("GET", &query, Bytes::new(), &[]).await {
                    Ok((status, _, body)) if status.is_success() && body.starts_with(b"<?xml") => Outcome::Ok {
                        bytes: body.len() as u64,
                    },
                    Ok((status, _, body)) => status_error(status, &body),
                    Err(kind) => Outcome::Error(kind),
                }
            }
        }
    }
}
