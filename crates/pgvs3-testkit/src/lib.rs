//! Shared test harness: one throwaway PostgreSQL per test binary (started by the same launcher
//! as the embedded default), a fresh database per test, and gateways started in-process. The
//! gateway's, the operator's and e2e's test binaries use it as `common`
//! (`use pgvs3_testkit as common;`).

pub mod certs;
pub mod events;
pub mod faults;
pub mod oidc;
pub mod ojs;
pub mod raw;
pub mod receiver;
pub mod resp;
pub mod s3;

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

pub const ROOT_ACCESS_KEY: &str = "PGVS3TESTROOTKEY0001";
pub const ROOT_SECRET_KEY: &str = "test-root-secret-key-0123456789";
pub const MASTER_KEY: &str = "integration-test-master-key";

struct Cluster {
    socket_dir: String,
    port: u16,
}

/// The cluster lives on a thread of its own that never ends: the server is tied to the thread
/// that started it and stops when the test process exits.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        remove_stale_clusters();
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let data_dir = shared_cluster_dir();
            let _ = std::fs::remove_dir_all(&data_dir);
            let server = runtime
                .block_on(EmbeddedPostgres::start(EmbeddedOptions {
                    data_dir,
                    pg_bin: None,
                    memory_budget: Some(1 << 30),
                    // Test binaries run side by side, each with clusters of its own.
                    shared_buffers: Some(32 << 20),
                    tls: None,
                }))
                .expect("start the test PostgreSQL");
            let config = server.connect_config();
            let socket_dir = match &config.get_hosts()[0] {
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
                tokio_postgres::config::Host::Tcp(host) => host.clone(),
            };
            sender
                .send(Cluster {
                    socket_dir,
                    port: server.port(),
                })
                .unwrap();
            // Keep the server (and the runtime that owns its child handle) for the process's life.
            let _keep = (server, runtime);
            loop {
                std::thread::park();
            }
        });
        receiver.recv().expect("test PostgreSQL thread")
    })
}

/// The data dir of this process's shared cluster (the one [`fresh_database`] creates databases on).
pub fn shared_cluster_dir() -> PathBuf {
    std::env::temp_dir().join(format!("pgvs3-test-{}-shared", std::process::id()))
}

/// Where a test cluster listens: its Unix socket directory and port.
pub struct ClusterAddress {
    pub socket_dir: String,
    pub port: u16,
}

impl ClusterAddress {
    fn of(server: &EmbeddedPostgres) -> ClusterAddress {
        let socket_dir = match &server.connect_config().get_hosts()[0] {
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            tokio_postgres::config::Host::Tcp(host) => host.clone(),
        };
        ClusterAddress {
            socket_dir,
            port: server.port(),
        }
    }

    pub fn url(&self, database: &str) -> String {
        format!(
            "host={} port={} user=pgvs3 dbname={database}",
            self.socket_dir, self.port
        )
    }

    /// Stops WAL replay on this standby: while the primary goes on writing, the standby falls
    /// further behind every moment, measured from the last commit it replayed.
    pub async fn pause_replay(&self) -> PausedReplay {
        let (client, connection) = tokio_postgres::connect(&self.url("postgres"), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client.execute("SELECT pg_wal_replay_pause()", &[]).await.unwrap();
        PausedReplay(client)
    }
}

/// A standby whose replay [`ClusterAddress::pause_replay`] stopped.
pub struct PausedReplay(tokio_postgres::Client);

impl PausedReplay {
    pub async fn resume(self) {
        self.0.execute("SELECT pg_wal_replay_resume()", &[]).await.unwrap();
    }
}

/// A dedicated primary and its hot standby (`pg_basebackup -R`), kept on a thread of their own
/// like the shared cluster.
pub fn primary_and_standby(name: &str) -> (ClusterAddress, ClusterAddress) {
    let (sender, receiver) = std::sync::mpsc::channel();
    let base = std::env::temp_dir().join(format!("pgvs3-test-{}-pair-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let options = |dir: &str| EmbeddedOptions {
            data_dir: base.join(dir),
            pg_bin: None,
            memory_budget: Some(1 << 30),
            shared_buffers: Some(32 << 20),
            tls: None,
        };
        let primary = runtime
            .block_on(EmbeddedPostgres::start(options("primary")))
            .expect("start the primary");
        let standby = runtime
            .block_on(EmbeddedPostgres::start_standby(options("standby"), &primary))
            .expect("start the standby");
        sender
            .send((ClusterAddress::of(&primary), ClusterAddress::of(&standby)))
            .unwrap();
        let _keep = (primary, standby, runtime);
        loop {
            std::thread::park();
        }
    });
    receiver.recv().expect("cluster pair thread")
}

/// A cluster of its own that also accepts TLS (ssl=on) on 127.0.0.1 with `server`'s
/// certificate, for the sslmode tests.
pub fn tls_cluster(name: &str, server: &certs::Issued) -> ClusterAddress {
    own_cluster(&format!("tls-{name}"), Some((server.cert.clone(), server.key.clone())))
}

/// A cluster of its own, for a test that changes server-wide settings.
pub fn cluster_of_its_own(name: &str) -> ClusterAddress {
    own_cluster(&format!("own-{name}"), None)
}

/// A dedicated cluster, kept on a thread of its own like the shared one.
fn own_cluster(dir: &str, tls: Option<(PathBuf, PathBuf)>) -> ClusterAddress {
    let (sender, receiver) = std::sync::mpsc::channel();
    let data_dir = std::env::temp_dir().join(format!("pgvs3-test-{}-{dir}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let server = runtime
            .block_on(EmbeddedPostgres::start(EmbeddedOptions {
                data_dir,
                pg_bin: None,
                memory_budget: Some(1 << 30),
                shared_buffers: Some(32 << 20),
                tls,
            }))
            .expect("start the cluster");
        sender.send(ClusterAddress::of(&server)).unwrap();
        let _keep = (server, runtime);
        loop {
            std::thread::park();
        }
    });
    receiver.recv().expect("cluster thread")
}

/// Data dirs of earlier test processes: their servers stopped when those processes ended.
fn remove_stale_clusters() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("pgvs3-test-").and_then(|rest| rest.split('-').next()) else {
            continue;
        };
        let Ok(pid) = pid.parse::<i32>() else { continue };
        // SAFETY: kill with signal 0 only checks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        if !alive && pgvs3_gateway::pg::embedded::running_cluster(&entry.path()).is_none() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Polls `check` until it yields a value, for at most `limit`: replication and promotion are
/// asynchronous, and this bounds how long they may take.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The single `bigint` a query answers (a `count(*)`, a sum, a version).
pub async fn query_count(
    sql: &tokio_postgres::Client,
    query: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> i64 {
    let row = sql
        .query_one(query, params)
        .await
        .unwrap_or_else(|err| panic!("{query}: {err}"));
    // Whatever the column is called (`count`, `sum`, …), there must be only one.
    let [column] = row.columns() else {
        panic!("{query}: answers {} columns, not one", row.columns().len());
    };
    row.get(column.name())
}

/// How many statements of the test database wait for a lock now: a test that queues writers
/// behind a transaction it holds waits for this count before it lets them go.
pub async fn lock_waiters(sql: &tokio_postgres::Client) -> i64 {
    query_count(
        sql,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        &[],
    )
    .await
}

/// Whether a backend running a statement like `query` (a LIKE pattern of its text) waits for a
/// lock now.
pub async fn statement_waits(sql: &tokio_postgres::Client, query: &str) -> bool {
    query_count(
        sql,
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1",
        &[&query],
    )
    .await
        > 0
}

/// Waits until a backend running a statement like `query` waits for a lock: a test that makes a
/// request wait behind a transaction it holds lets the next step go only then.
pub async fn await_statement_wait(sql: &tokio_postgres::Client, query: &str) {
    eventually(
        Duration::from_secs(30),
        &format!("a statement like {query} to wait for a lock"),
        || async { statement_waits(sql, query).await.then_some(()) },
    )
    .await
}

/// A new empty database on the test cluster; returns its connection string.
pub async fn fresh_database() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let cluster = cluster();
    let name = format!("t{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let admin = format!(
        "host={} port={} user=pgvs3 dbname=postgres",
        cluster.socket_dir, cluster.port
    );
    let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
    format!(
        "host={} port={} user=pgvs3 dbname={name}",
        cluster.socket_dir, cluster.port
    )
}

#[derive(Parser)]
struct TestCli {
    #[command(flatten)]
    serve: ServeArgs,
}

pub fn serve_args(database_url: &str, extra: &[&str]) -> ServeArgs {
    let mut argv = vec![
        "pgvs3",
        "--database-url",
        database_url,
        "--master-key",
        MASTER_KEY,
        "--admin-addr",
        "127.0.0.1:0",
        "--ojs-addr",
        "127.0.0.1:0",
        "--root-access-key",
        ROOT_ACCESS_KEY,
        "--root-secret-key",
        ROOT_SECRET_KEY,
    ];
    // Webhook receivers of the tests listen on 127.0.0.1, which deliveries may not reach by
    // default; a test of that refusal names its own networks.
    for (flag, default) in [
        ("--s3-addr", "127.0.0.1:0"),
        ("--maintenance-interval", "1h"),
        ("--webhook-allow-networks", "127.0.0.0/8"),
        // Origins of the tests' cache buckets are gateways on 127.0.0.1, which caches may not
        // reach by default; a test of that refusal passes `false`.
        ("--origin-allow-local-addresses", "true"),
        ("--pool-size", "16"),
        // The tests' clients do not AUTH or send a token unless a test of that says so.
        ("--resp-auth", "none"),
        ("--ojs-auth", "none"),
    ] {
        if !extra.contains(&flag) {
            argv.extend_from_slice(&[flag, default]);
        }
    }
    // RESP is off unless a test turns it on: its database-0 bucket would show in every listing.
    if !extra.contains(&"--resp-addr") {
        argv.extend_from_slice(&["--resp-addr", "off"]);
    }
    argv.extend_from_slice(extra);
    TestCli::parse_from(argv).serve
}

pub struct TestGateway {
    pub gateway: RunningGateway,
    pub database_url: String,
    pub client: Client,
}

impl TestGateway {
    pub async fn start() -> TestGateway {
        TestGateway::on(fresh_database().await).await
    }

    pub async fn on(database_url: String) -> TestGateway {
        TestGateway::with_args(database_url, &[]).await
    }

    pub async fn with_args(database_url: String, extra: &[&str]) -> TestGateway {
        // Boxed: the start future is large, and tests pin theirs on the stack.
        let gateway = Box::pin(RunningGateway::start(&serve_args(&database_url, extra)))
            .await
            .expect("gateway starts");
        let client = s3_client(&gateway, ROOT_ACCESS_KEY, ROOT_SECRET_KEY);
        TestGateway {
            gateway,
            database_url,
            client,
        }
    }

    /// A gateway with bucket `bkt` holding `there` (ten bytes, `0123456789`).
    pub async fn with_sample_object() -> TestGateway {
        let gw = TestGateway::start().await;
        gw.client.create_bucket().bucket("bkt").send().await.unwrap();
        gw.client
            .put_object()
            .bucket("bkt")
            .key("there")
            .body(aws_sdk_s3::primitives::ByteStream::from_static(b"0123456789"))
            .send()
            .await
            .unwrap();
        gw
    }

    /// Sends a raw request signed by the root key (with `body`'s hash and length), for what no
    /// SDK sends.
    pub async fn signed(&self, method: &str, path: &str, extra: &[(&str, &str)], body: &[u8]) -> raw::RawResponse {
        let signer = raw::Signer {
            access_key: ROOT_ACCESS_KEY.into(),
            secret_key: ROOT_SECRET_KEY.into(),
            host: self.gateway.s3_addr.to_string(),
        };
        let extra: Vec<(&str, String)> = extra.iter().map(|(n, v)| (*n, (*v).to_owned())).collect();
        let mut headers = signer.sign(
            method,
            path,
            &extra,
            &raw::sha256_hex(body),
            std::time::SystemTime::now(),
        );
        headers.push(("content-length".into(), body.len().to_string()));
        raw::send(self.gateway.s3_addr, method, path, &headers, body).await
    }

    /// The value of the first line of the gateway's /metrics starting with `line_start`.
    pub async fn metric(&self, line_start: &str) -> Option<f64> {
        let host = self.gateway.admin_addr.to_string();
        let response = raw::send(
            self.gateway.admin_addr,
            "GET",
            "/metrics",
            &[("host".into(), host)],
            b"",
        )
        .await;
        response
            .body
            .lines()
            .find(|l| l.starts_with(line_start))?
            .rsplit(' ')
            .next()?
            .parse()
            .ok()
    }

    /// Runs a Python script (boto3 and the other clients come from the venv scripts/test puts
    /// first on PATH) with the endpoint in `AWS_ENDPOINT_URL` and the root key in `AK`/`SK`;
    /// the script passes when it exits 0 and prints `done`.
    pub async fn python_passes(&self, script: &str, done: &str) {
        let output = tokio::process::Command::new("python3")
            .args(["-c", script])
            .env("AWS_ENDPOINT_URL", self.endpoint())
            .env("AK", ROOT_ACCESS_KEY)
            .env("SK", ROOT_SECRET_KEY)
            .output()
            .await
            .expect("python3 (scripts/test puts the clients' venv first on PATH)");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains(done),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.gateway.s3_addr)
    }

    /// A gateway with the RESP endpoint on (an ephemeral port) and `extra` flags.
    pub async fn with_resp(extra: &[&str]) -> TestGateway {
        let mut args = vec!["--resp-addr", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        TestGateway::with_args(fresh_database().await, &args).await
    }

    pub fn resp_addr(&self) -> std::net::SocketAddr {
        self.gateway.resp_addr.expect("the RESP endpoint is on")
    }

    pub fn client_for(&self, access_key: &str, secret_key: &str) -> Client {
        s3_client(&self.gateway, access_key, secret_key)
    }

    pub async fn stop(self) -> String {
        self.gateway.shutdown().await.expect("clean shutdown");
        self.database_url
    }

    /// A direct connection to the gateway's database, to look at the layout underneath.
    pub async fn sql(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.database_url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    }
}

pub fn s3_client(gateway: &RunningGateway, access_key: &str, secret_key: &str) -> Client {
    s3_client_at(gateway.s3_addr, access_key, secret_key)
}

/// A client of the S3 endpoint at `addr` (a gateway running in-process or as a process).
pub fn s3_client_at(addr: std::net::SocketAddr, access_key: &str, secret_key: &str) -> Client {
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

/// Deterministic bytes that do not compress (so chunks are stored raw).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

pub fn sha256(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}
