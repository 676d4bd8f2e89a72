//! The console tests' harness: one throwaway PostgreSQL per test binary (started as the
//! gateway's own tests start theirs), a fresh database, gateway and console per test, a plain
//! HTTP client that shows exactly what the console answered, and a WebDriver client.

#![allow(dead_code)] // the HTTP and browser tests use different parts

pub mod front;
pub mod webdriver;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{Credentials, Region};
use clap::Parser;
use pgvs3_gateway::config::ServeArgs;
use pgvs3_gateway::pg::embedded::{EmbeddedOptions, EmbeddedPostgres};
use pgvs3_gateway::serve::RunningGateway;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const ROOT_ACCESS_KEY: &str = "PGVS3CONSOLEROOT0001";
pub const ROOT_SECRET_KEY: &str = "console-root-secret-0123456789";
pub const OJS_TOKEN: &str = "console-ojs-operator-token";

/// The test cluster's Unix socket directory and port; the server lives on a thread of its own
/// and stops when the test process exits.
fn cluster() -> &'static (String, u16) {
    static CLUSTER: OnceLock<(String, u16)> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let data_dir: PathBuf = std::env::temp_dir().join(format!("pgvs3-test-{}-console", std::process::id()));
            let _ = std::fs::remove_dir_all(&data_dir);
            let server = runtime
                .block_on(EmbeddedPostgres::start(EmbeddedOptions {
                    data_dir,
                    pg_bin: None,
                    memory_budget: Some(1 << 30),
                    shared_buffers: Some(32 << 20),
                    tls: None,
                }))
                .expect("start the test PostgreSQL");
            let socket_dir = match &server.connect_config().get_hosts()[0] {
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
                tokio_postgres::config::Host::Tcp(host) => host.clone(),
            };
            sender.send((socket_dir, server.port())).unwrap();
            let _keep = (server, runtime);
            loop {
                std::thread::park();
            }
        });
        receiver.recv().expect("test PostgreSQL thread")
    })
}

async fn fresh_database() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (socket_dir, port) = cluster();
    let name = format!("console{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let admin = format!("host={socket_dir} port={port} user=pgvs3 dbname=postgres");
    let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
    format!("host={socket_dir} port={port} user=pgvs3 dbname={name}")
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// A gateway with its console, on a database of their own.
pub struct Stack {
    pub gateway: RunningGateway,
    pub console: SocketAddr,
    /// The root key's S3 client: what the tests check the console's work with.
    pub root: Client,
    /// The front the browser reaches S3 through, when the test asked for one.
    pub s3_front: Option<front::Front>,
    /// The database's connection string.
    database: String,
}

/// A gateway on `database`, on loopback ports of its own.
async fn gateway_on(database: &str) -> RunningGateway {
    let cli = Cli::parse_from([
        "pgvs3",
        "--database-url",
        database,
        "--master-key",
        "console-test-master-key",
        "--s3-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--ojs-addr",
        "127.0.0.1:0",
        "--ojs-token",
        OJS_TOKEN,
        "--resp-addr",
        "127.0.0.1:0",
        "--root-access-key",
        ROOT_ACCESS_KEY,
        "--root-secret-key",
        ROOT_SECRET_KEY,
        "--pool-size",
        "8",
        "--maintenance-interval",
        "1h",
        // A cache bucket of the health page's test has its origin on loopback.
        "--origin-allow-local-addresses",
        "true",
    ]);
    Box::pin(RunningGateway::start(&cli.serve))
        .await
        .expect("gateway starts")
}

impl Stack {
    pub async fn start() -> Stack {
        Stack::start_with(false).await
    }

    /// A stack whose console names a [`front::Front`] of the S3 listener in presigned URLs.
    pub async fn start_with_s3_front() -> Stack {
        Stack::start_with(true).await
    }

    async fn start_with(s3_front: bool) -> Stack {
        let database = fresh_database().await;
        let gateway = gateway_on(&database).await;
        let s3_front = match s3_front {
            true => Some(front::Front::start(gateway.s3_addr).await),
            false => None,
        };
        let args = pgvs3_console::ConsoleArgs {
            console_addr: Some("127.0.0.1:0".parse().unwrap()),
            console_s3_url: s3_front.as_ref().map(|front| format!("http://{}", front.addr)),
            console_session_idle: Duration::from_secs(1800),
        };
        // As `pgvs3 serve` builds it.
        let front = pgvs3_console::Gateway::loopback(gateway.s3_addr, None, "us-east-1".into(), None)
            .with_resp(gateway.resp_addr.unwrap(), None, false)
            .with_ojs(
                gateway.ojs_addr.unwrap(),
                None,
                false,
                Some(std::sync::Arc::new(|| Some(OJS_TOKEN.to_owned()))),
            )
            .with_admin(std::sync::Arc::new(pgvs3_gateway::serve::ConsoleAdmin {
                catalog: gateway.store.catalog().clone(),
                pool: gateway.store.pool().clone(),
            }))
            .with_admin_listener(gateway.admin_addr, false);
        let console = pgvs3_console::start(&args, front, std::future::pending())
            .await
            .expect("console starts")
            .expect("--console-addr is set");
        let root = s3_client(gateway.s3_addr, ROOT_ACCESS_KEY, ROOT_SECRET_KEY);
        Stack {
            gateway,
            console: console.addr,
            root,
            s3_front,
            database,
        }
    }

    /// Another gateway of this stack's database (no console): a fleet of two.
    pub async fn second_gateway(&self) -> RunningGateway {
        gateway_on(&self.database).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.console)
    }

    /// `redis-cli` against the gateway's RESP listener (on loopback without a password it acts
    /// as the root key): its output, trimmed.
    pub async fn redis(&self, args: &[&str]) -> String {
        let port = self.gateway.resp_addr.expect("RESP is on").port().to_string();
        let output = tokio::process::Command::new("redis-cli")
            // RESP needs AUTH by default (`--resp-auth key`): the root key, as an operator would.
            .args(["-h", "127.0.0.1", "-p", &port, "--no-auth-warning"])
            .args(["--user", ROOT_ACCESS_KEY, "--pass", ROOT_SECRET_KEY])
            .args(args)
            .output()
            .await
            .expect("redis-cli runs");
        assert!(output.status.success(), "redis-cli {args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// An OJS request with the operator's token: status and JSON answer.
    pub async fn ojs(&self, method: &str, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        let auth = format!("Bearer {OJS_TOKEN}");
        let answer = http(
            self.gateway.ojs_addr.unwrap(),
            method,
            path,
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/openjobspec+json"),
            ],
            &body.to_string(),
        )
        .await;
        (answer.status, serde_json::from_str(&answer.body).unwrap_or_default())
    }

    /// A further key (`read_only` or not) with secret `<key>-secret`.
    pub async fn add_key(&self, key: &str, read_only: bool) {
        self.gateway
            .store
            .catalog()
            .put_access_key(&pgvs3_gateway::store::NewAccessKey {
                access_key: key.into(),
                secret: format!("{key}-secret"),
                is_root: false,
                read_only,
                description: String::new(),
            })
            .await
            .unwrap();
    }

    /// A console session of the root key.
    pub async fn sign_in_root(&self) -> Visitor {
        Visitor::sign_in(self.console, ROOT_ACCESS_KEY, ROOT_SECRET_KEY).await
    }

    /// A new access key (its secret `<key>-secret`, as [`Stack::add_key`] makes it) and a
    /// console session of it.
    pub async fn sign_in_new_key(&self, key: &str, read_only: bool) -> Visitor {
        self.add_key(key, read_only).await;
        Visitor::sign_in(self.console, key, &format!("{key}-secret")).await
    }

    /// Runs SQL on the stack's database as the gateway's user (what a test cannot do through a
    /// listener: a row of a gateway that is not running).
    pub async fn sql(&self, statements: &str) {
        let (client, connection) = tokio_postgres::connect(&self.database, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client.batch_execute(statements).await.unwrap();
    }

    /// The column `value` of `query`'s one row, as text.
    pub async fn sql_value(&self, query: &str) -> String {
        let (client, connection) = tokio_postgres::connect(&self.database, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client.query_one(query, &[]).await.unwrap().get("value")
    }
}

pub fn s3_client(addr: SocketAddr, access_key: &str, secret_key: &str) -> Client {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version_latest()
        .region(Region::new("us-east-1"))
        .endpoint_url(format!("http://{addr}"))
        .credentials_provider(Credentials::new(access_key, secret_key, None, None, "test"))
        .force_path_style(true)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(config)
}

/// An HTTP answer exactly as it came.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// Lower-case names; repeated headers joined by "\n".
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }

    /// `name=value` of a Set-Cookie this answer carries, with its attributes.
    pub fn set_cookie(&self, name: &str) -> Option<&str> {
        self.header("set-cookie")
            .lines()
            .find(|line| line.starts_with(&format!("{name}=")))
    }
}

/// One HTTP/1.1 request on a connection of its own.
pub async fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).await.unwrap();
    // Until the declared length (chromedriver keeps the connection open), else the close.
    let read = async {
        let mut raw = Vec::new();
        let mut chunk = [0u8; 16384];
        loop {
            let n = stream.read(&mut chunk).await.unwrap();
            if n == 0 {
                return raw;
            }
            raw.extend_from_slice(&chunk[..n]);
            if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok());
                if length.is_some_and(|length| raw.len() >= end + 4 + length) {
                    return raw;
                }
            }
        }
    };
    let raw = tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("an answer within 60 s");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete answer");
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let mut headers: HashMap<String, String> = HashMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').unwrap();
        headers
            .entry(name.trim().to_ascii_lowercase())
            .and_modify(|joined| {
                joined.push('\n');
                joined.push_str(value.trim());
            })
            .or_insert_with(|| value.trim().to_owned());
    }
    let body = if headers.get("transfer-encoding").is_some_and(|te| te == "chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Answer { status, headers, body }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

/// The value of `<input name="{field}" value="...">` or `<meta name="{field}" content="...">`.
pub fn field(page: &str, name: &str) -> String {
    for marker in [
        format!("name=\"{name}\" value=\""),
        format!("name=\"{name}\" content=\""),
    ] {
        if let Some(start) = page.find(&marker) {
            let rest = &page[start + marker.len()..];
            return rest[..rest.find('"').unwrap()].to_owned();
        }
    }
    panic!("no {name} in the page:\n{page}")
}

/// A signed-in visitor over plain HTTP: its session cookie and CSRF token.
pub struct Visitor {
    pub console: SocketAddr,
    pub cookie: String,
    pub csrf: String,
}

pub fn form_body(pairs: &[(&str, &str)]) -> String {
    let mut body = form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs {
        body.append_pair(key, value);
    }
    body.finish()
}

/// Signs in the way a browser does: the form (and its login cookie), then the post.
pub async fn sign_in_answer(console: SocketAddr, access_key: &str, secret: &str, extra_cookie: Option<&str>) -> Answer {
    let form = http(console, "GET", "/login", &[], "").await;
    let login = form.set_cookie("pgvs3_login").expect("a login cookie");
    let login = login.split(';').next().unwrap().to_owned();
    let cookie = match extra_cookie {
        Some(extra) => format!("{login}; {extra}"),
        None => login,
    };
    let origin = format!("http://{console}");
    let body = form_body(&[
        ("_login", &field(&form.body, "_login")),
        ("access_key", access_key),
        ("secret_key", secret),
    ]);
    http(
        console,
        "POST",
        "/login",
        &[
            ("Cookie", &cookie),
            ("Origin", &origin),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        &body,
    )
    .await
}

impl Visitor {
    pub async fn sign_in(console: SocketAddr, access_key: &str, secret: &str) -> Visitor {
        let answer = sign_in_answer(console, access_key, secret, None).await;
        assert_eq!(answer.status, 303, "sign-in: {}", answer.body);
        let cookie = answer
            .set_cookie("pgvs3_session")
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned();
        let page = http(console, "GET", "/buckets", &[("Cookie", &cookie)], "").await;
        Visitor {
            console,
            csrf: field(&page.body, "csrf-token"),
            cookie,
        }
    }

    pub async fn get(&self, path: &str) -> Answer {
        http(self.console, "GET", path, &[("Cookie", &self.cookie)], "").await
    }

    /// A change as the console's own form sends it (Origin, cookie, token).
    pub async fn post(&self, path: &str, pairs: &[(&str, &str)]) -> Answer {
        let origin = format!("http://{}", self.console);
        let mut pairs = pairs.to_vec();
        pairs.push(("_csrf", &self.csrf));
        self.post_as(path, &origin, &form_body(&pairs)).await
    }

    /// A change with the Origin and body given as they are.
    pub async fn post_as(&self, path: &str, origin: &str, body: &str) -> Answer {
        http(
            self.console,
            "POST",
            path,
            &[
                ("Cookie", &self.cookie),
                ("Origin", origin),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            body,
        )
        .await
    }

    /// The page a change redirected to, with its flash message.
    pub async fn follow(&self, answer: &Answer) -> Answer {
        assert_eq!(answer.status, 303, "a change redirects: {}", answer.body);
        self.get(answer.header("location")).await
    }

    /// Posts a change and follows its redirect: the page it lands on.
    pub async fn change(&self, path: &str, pairs: &[(&str, &str)]) -> String {
        self.follow(&self.post(path, pairs).await).await.body
    }
}
