//! A raw HTTP/1.1 client with SigV4 signing, for requests no SDK will send: wrong hashes,
//! lying Content-Length, bodies cut off mid-way.

use std::time::{Duration, SystemTime};

use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `<Code>` of an S3 XML error body.
    pub fn code(&self) -> Option<&str> {
        let start = self.body.find("<Code>")? + "<Code>".len();
        let end = self.body[start..].find("</Code>")? + start;
        Some(&self.body[start..end])
    }
}

pub struct Signer {
    pub access_key: String,
    pub secret_key: String,
    pub host: String,
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// `YYYYMMDD'T'HHMMSS'Z'` for a time.
pub fn amz_date(time: SystemTime) -> String {
    let secs = time.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

impl Signer {
    /// Signs a request (path already URI-encoded; query parameters already in canonical form) and returns its headers.
    /// `payload_hash` is what goes into `x-amz-content-sha256`; `date` lets tests lie about time.
    pub fn sign(
        &self,
        method: &str,
        path: &str,
        extra: &[(&str, String)],
        payload_hash: &str,
        date: SystemTime,
    ) -> Vec<(String, String)> {
        let stamp = amz_date(date);
        let day = &stamp[..8];
        let mut headers: Vec<(String, String)> = vec![
            ("host".into(), self.host.clone()),
            ("x-amz-content-sha256".into(), payload_hash.into()),
            ("x-amz-date".into(), stamp.clone()),
        ];
        headers.extend(extra.iter().map(|(n, v)| (n.to_ascii_lowercase(), v.clone())));
        headers.sort();
        let canonical_headers: String = headers.iter().map(|(n, v)| format!("{n}:{}\n", v.trim())).collect();
        let signed: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
        let signed = signed.join(";");
        let (uri, query) = path.split_once('?').unwrap_or((path, ""));
        let mut params: Vec<String> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| if p.contains('=') { p.to_owned() } else { format!("{p}=") })
            .collect();
        params.sort();
        let query = params.join("&");
        let canonical = format!("{method}\n{uri}\n{query}\n{canonical_headers}\n{signed}\n{payload_hash}");
        let scope = format!("{day}/us-east-1/s3/aws4_request");
        let signature = self.signature(&stamp, &scope, &canonical);
        headers.push((
            "authorization".into(),
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
                self.access_key
            ),
        ));
        headers
    }

    /// A presigned (query-string SigV4) path for `path` signed at `date`, with `expires` as its
    /// `X-Amz-Expires` verbatim: the SDKs refuse to make the out-of-range ones tests need.
    pub fn presign(&self, method: &str, path: &str, expires: &str, date: SystemTime) -> String {
        let stamp = amz_date(date);
        let day = &stamp[..8];
        let scope = format!("{day}/us-east-1/s3/aws4_request");
        let encode = |text: &str| -> String {
            text.bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
                    _ => format!("%{b:02X}"),
                })
                .collect()
        };
        let query = format!(
            "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={}&X-Amz-Date={stamp}&X-Amz-Expires={}&X-Amz-SignedHeaders=host",
            encode(&format!("{}/{scope}", self.access_key)),
            encode(expires)
        );
        let canonical = format!(
            "{method}\n{path}\n{query}\nhost:{}\n\nhost\nUNSIGNED-PAYLOAD",
            self.host
        );
        let signature = self.signature(&stamp, &scope, &canonical);
        format!("{path}?{query}&X-Amz-Signature={signature}")
    }

    /// The SigV4 signature of a canonical request made at `stamp` in `scope`.
    fn signature(&self, stamp: &str, scope: &str, canonical: &str) -> String {
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
            sha256_hex(canonical.as_bytes())
        );
        let mut key = hmac(format!("AWS4{}", self.secret_key).as_bytes(), &stamp[..8]);
        for part in ["us-east-1", "s3", "aws4_request"] {
            key = hmac(&key, part);
        }
        hex::encode(hmac(&key, &to_sign))
    }
}

/// Sends one request on a fresh connection and reads the whole response.
pub async fn send(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> RawResponse {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    read_response(&mut stream).await
}

/// Reads the response to the end of the connection.
pub async fn read_response(stream: &mut TcpStream) -> RawResponse {
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("response in time")
        .unwrap();
    parse_response(&raw)
}

/// Reads one response whose body's length it declares, and leaves the connection open (a
/// server may go on reading the request it answered early).
pub async fn read_one_response(stream: &mut TcpStream) -> RawResponse {
    let mut raw = Vec::new();
    let read = async {
        loop {
            if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = parse_response(&raw[..end]);
                let length: usize = head
                    .header("content-length")
                    .and_then(|length| length.parse().ok())
                    .expect("a declared length");
                if raw.len() >= end + 4 + length {
                    return parse_response(&raw[..end + 4 + length]);
                }
            }
            let mut buf = [0; 8192];
            let n = stream.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "the connection closed within a response: {}",
                String::from_utf8_lossy(&raw)
            );
            raw.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("response in time")
}

fn parse_response(raw: &[u8]) -> RawResponse {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    RawResponse {
        status,
        headers,
        body: body.to_owned(),
    }
}
