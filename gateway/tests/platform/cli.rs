//! The `pgvs3` binary as a user runs it: the embedded default, admin commands next to a running
//! server, health and metrics endpoints, signals, and a clear error without PostgreSQL.

use pgvs3_testkit as common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_pgvs3");

fn data_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pgvs3-test-{}-cli-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

struct Served {
    child: Child,
    s3: String,
    admin: String,
    /// The OJS base URL (`http://addr/ojs/v1`), when OJS is on.
    ojs: Option<String>,
}

/// Starts `pgvs3 serve` on ephemeral ports and reads the addresses it prints.
async fn serve(data_dir: &Path) -> Served {
    serve_with_env(data_dir, &[]).await
}

async fn serve_with_env(data_dir: &Path, env: &[(&str, &str)]) -> Served {
    let mut command = serve_command(data_dir);
    command.envs(env.iter().copied());
    started(command).await.0
}

/// `pgvs3 serve` on ephemeral ports with the tests' root key.
fn serve_command(data_dir: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .args([
            "serve",
            "--s3-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
            "--resp-addr",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(data_dir)
        .env("PGVS3_OJS_ADDR", "127.0.0.1:0")
        // Test binaries run side by side, each with clusters of its own.
        .env("PGVS3_PG_SHARED_BUFFERS", "32MB")
        .env("PGVS3_ROOT_ACCESS_KEY", common::ROOT_ACCESS_KEY)
        .env("PGVS3_ROOT_SECRET_KEY", common::ROOT_SECRET_KEY)
        // The tests' origins listen on loopback.
        .env("PGVS3_ORIGIN_ALLOW_LOCAL_ADDRESSES", "true")
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Spawns a serve and reads its stdout up to the S3 endpoint line; returns the server and the
/// lines printed before that one.
async fn started(mut command: Command) -> (Served, Vec<String>) {
    let mut child = command.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut before = Vec::new();
    let line = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("serve printed its endpoint");
            if line.starts_with("pgvs3 S3 endpoint:") {
                return line;
            }
            before.push(line);
        }
    })
    .await
    .expect("serve starts within a minute");
    let mut urls = line.split_whitespace().filter(|w| w.starts_with("http://"));
    let s3 = urls.next().unwrap().trim_end_matches(')').to_owned();
    let admin = urls
        .next()
        .unwrap()
        .trim_end_matches(')')
        .trim_end_matches("/metrics")
        .to_owned();
    let ojs = urls.next().map(str::to_owned);
    (Served { child, s3, admin, ojs }, before)
}

fn client(endpoint: &str, access_key: &str, secret_key: &str) -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version_latest()
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            access_key, secret_key, None, None, "test",
        ))
        .force_path_style(true)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

async fn http_get(base: &str, path: &str) -> (u16, String) {
    http_get_with(base, path, "").await
}

/// A GET with `headers` (whole `name: value\r\n` lines) besides the host.
async fn http_get_with(base: &str, path: &str, headers: &str) -> (u16, String) {
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\n{headers}connection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let status = raw.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (
        status,
        raw.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default(),
    )
}

async fn pgvs3(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().await.unwrap()
}

async fn terminate(mut served: Served) {
    let pid = served.child.id().unwrap() as i32;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(60), served.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "serve exits cleanly on SIGTERM: {status}");
}

#[tokio::test]
async fn the_embedded_default_serves_s3_and_admin_commands_work_beside_it() {
    let dir = data_dir("embedded");
    let served = serve(&dir).await;
    let root = client(&served.s3, common::ROOT_ACCESS_KEY, common::ROOT_SECRET_KEY);
    root.create_bucket().bucket("laptop").send().await.unwrap();
    root.put_object()
        .bucket("laptop")
        .key("hello.txt")
        .body(ByteStream::from_static(b"hello"))
        .send()
        .await
        .unwrap();

    let (status, body) = http_get(&served.admin, "/healthz").await;
    assert_eq!((status, body.trim()), (200, "ok"));
    let (status, body) = http_get(&served.admin, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (ready["ready"].as_bool(), ready["role"].as_str()),
        (Some(true), Some("primary"))
    );
    let (_, metrics) = http_get(&served.admin, "/metrics").await;
    assert!(
        metrics.contains(r#"pgvs3_requests_total{operation="PutObject",protocol="s3",status="200"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains("pgvs3_request_duration_seconds_bucket"));
    assert!(metrics.contains("pgvs3_db_pool_connections{state=\"idle\"}"));

    // Admin commands reach the running server's database through the data dir.
    let dir_arg = dir.to_str().unwrap();
    let created = pgvs3(&[
        "admin",
        "--data-dir",
        dir_arg,
        "key",
        "create",
        "--access-key",
        "CLIKEY",
        "--secret-key",
        "cli-secret",
    ])
    .await;
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let listed = pgvs3(&["admin", "--data-dir", dir_arg, "key", "list"]).await;
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listed.contains("CLIKEY") && listed.contains(common::ROOT_ACCESS_KEY),
        "{listed}"
    );
    // The database flags also go after the subcommand.
    let after = pgvs3(&["admin", "key", "list", "--data-dir", dir_arg]).await;
    assert!(after.status.success(), "{}", String::from_utf8_lossy(&after.stderr));
    assert_eq!(String::from_utf8_lossy(&after.stdout), listed);
    // A disabled key is listed as such until it is enabled again.
    let disabled_column = |listing: &str| {
        let header = listing.lines().next().unwrap_or_default();
        let at = header.find("DISABLED").expect("a DISABLED column");
        let row = listing
            .lines()
            .find(|line| line.starts_with("CLIKEY"))
            .expect("CLIKEY listed");
        row[at..].split_whitespace().next().unwrap_or_default().to_owned()
    };
    assert_eq!(disabled_column(&listed), "false", "{listed}");
    for (command, state) in [("disable", "true"), ("enable", "false")] {
        let changed = pgvs3(&["admin", "--data-dir", dir_arg, "key", command, "CLIKEY"]).await;
        assert!(changed.status.success(), "{}", String::from_utf8_lossy(&changed.stderr));
        let listing = pgvs3(&["admin", "--data-dir", dir_arg, "key", "list"]).await;
        let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
        assert_eq!(disabled_column(&listing), state, "after {command}: {listing}");
    }
    // STS for plain installs: an issuer's key set, then a role its ServiceAccount may assume.
    let jwks = dir.join("jwks.json");
    std::fs::write(&jwks, r#"{"keys":[{"kty":"RSA","kid":"k","n":"AQAB","e":"AQAB"}]}"#).unwrap();
    let policy = dir.join("role-policy.json");
    std::fs::write(
        &policy,
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::laptop/*"}]}"#,
    )
    .unwrap();
    let issuer = "https://kubernetes.default.svc";
    let jwks_arg = jwks.to_str().unwrap();
    let put = pgvs3(&[
        "admin",
        "--data-dir",
        dir_arg,
        "oidc-issuer",
        "put",
        "--issuer",
        issuer,
        "--jwks-file",
        jwks_arg,
    ])
    .await;
    assert!(put.status.success(), "{}", String::from_utf8_lossy(&put.stderr));
    let role = [
        "admin",
        "--data-dir",
        dir_arg,
        "role",
        "create",
        "laptop-reader",
        "--issuer",
        issuer,
        "--subject",
        "system:serviceaccount:apps:*",
        "--policy-file",
        policy.to_str().unwrap(),
    ];
    let created_role = pgvs3(&role).await;
    assert_eq!(
        String::from_utf8_lossy(&created_role.stdout).trim(),
        "AWS_ROLE_ARN=arn:aws:iam::000000000000:role/laptop-reader",
        "{}",
        String::from_utf8_lossy(&created_role.stderr)
    );
    std::fs::write(&policy, r#"{"Statement":[{"Effect":"Allow"}]}"#).unwrap();
    let refused = pgvs3(&role).await;
    assert!(
        !refused.status.success(),
        "a policy the gateways cannot read is refused"
    );
    let roles = pgvs3(&["admin", "--data-dir", dir_arg, "role", "list"]).await;
    let roles = String::from_utf8_lossy(&roles.stdout).into_owned();
    assert!(
        roles.contains("laptop-reader") && roles.contains("system:serviceaccount:apps:*"),
        "{roles}"
    );
    let deleted = pgvs3(&["admin", "--data-dir", dir_arg, "role", "delete", "laptop-reader"]).await;
    assert!(deleted.status.success(), "{}", String::from_utf8_lossy(&deleted.stderr));
    let roles = pgvs3(&["admin", "--data-dir", dir_arg, "role", "list"]).await;
    assert!(!String::from_utf8_lossy(&roles.stdout).contains("laptop-reader"));
    let cli = client(&served.s3, "CLIKEY", "cli-secret");
    assert!(cli.list_buckets().send().await.unwrap().buckets().is_empty());
    let denied = cli
        .get_object()
        .bucket("laptop")
        .key("hello.txt")
        .send()
        .await
        .unwrap_err();
    assert_eq!(denied.into_service_error().meta().code(), Some("AccessDenied"));
    // A policy of its own narrows the key (the running gateway hears of it by NOTIFY).
    let policy = dir.join("read-only.json");
    let read_only = r#"{"Statement":{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::*"}}"#;
    std::fs::write(&policy, read_only).unwrap();
    let attached = pgvs3(&[
        "admin",
        "--data-dir",
        dir_arg,
        "key",
        "policy",
        "CLIKEY",
        "--file",
        policy.to_str().unwrap(),
    ])
    .await;
    assert!(
        attached.status.success(),
        "{}",
        String::from_utf8_lossy(&attached.stderr)
    );
    let shown = pgvs3(&["admin", "--data-dir", dir_arg, "key", "policy", "CLIKEY"]).await;
    assert_eq!(String::from_utf8_lossy(&shown.stdout).trim(), read_only);
    common::eventually(Duration::from_secs(10), "the policy to narrow the key", || async {
        let refused = cli.create_bucket().bucket("cli-narrowed").send().await.err()?;
        (refused.into_service_error().meta().code() == Some("AccessDenied")).then_some(())
    })
    .await;
    let cleared = pgvs3(&["admin", "--data-dir", dir_arg, "key", "policy", "CLIKEY", "--clear"]).await;
    assert!(cleared.status.success(), "{}", String::from_utf8_lossy(&cleared.stderr));
    common::eventually(Duration::from_secs(10), "the key to be an owner again", || async {
        cli.create_bucket().bucket("cli-owned").send().await.ok()
    })
    .await;
    let deleted = pgvs3(&["admin", "--data-dir", dir_arg, "key", "delete", "CLIKEY"]).await;
    assert!(deleted.status.success());
    // The gateway hears of the catalog change by NOTIFY (and would by its poll, within a second).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let refused = loop {
        match cli.list_buckets().send().await {
            Err(err) => break err,
            Ok(_) if tokio::time::Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
            Ok(_) => panic!("a deleted key still works after 10 s"),
        }
    };
    assert_eq!(refused.into_service_error().meta().code(), Some("InvalidAccessKeyId"));
    // A quota set from the command line binds the running server at once.
    let quota = pgvs3(&[
        "admin",
        "--data-dir",
        dir_arg,
        "quota",
        "--bucket",
        "laptop",
        "--max-bytes",
        "1KiB",
    ])
    .await;
    assert!(quota.status.success(), "{}", String::from_utf8_lossy(&quota.stderr));
    assert_eq!(
        String::from_utf8_lossy(&quota.stdout),
        "laptop: 5 of 1024 bytes, 1 of unlimited objects\n"
    );
    let over = root
        .put_object()
        .bucket("laptop")
        .key("big.bin")
        .body(ByteStream::from(vec![0u8; 1020]))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        over.into_service_error().meta().code(),
        Some("XMinioAdminBucketQuotaExceeded")
    );
    let shown = pgvs3(&["admin", "--data-dir", dir_arg, "quota", "--bucket", "laptop"]).await;
    assert_eq!(
        String::from_utf8_lossy(&shown.stdout),
        String::from_utf8_lossy(&quota.stdout),
        "without limits the command only shows"
    );
    let lifted = pgvs3(&[
        "admin",
        "--data-dir",
        dir_arg,
        "quota",
        "--bucket",
        "laptop",
        "--remove",
    ])
    .await;
    assert_eq!(String::from_utf8_lossy(&lifted.stdout), "laptop: no quota\n");
    let maintenance = pgvs3(&["admin", "--data-dir", dir_arg, "maintenance", "--run-once"]).await;
    assert!(
        maintenance.status.success(),
        "{}",
        String::from_utf8_lossy(&maintenance.stderr)
    );

    terminate(served).await;
    assert!(
        pgvs3_gateway::pg::embedded::running_cluster(&dir).is_none(),
        "PostgreSQL stopped with the gateway"
    );

    // A second start on the same data dir keeps the data and the root key.
    let served = serve(&dir).await;
    let root = client(&served.s3, common::ROOT_ACCESS_KEY, common::ROOT_SECRET_KEY);
    let out = root
        .get_object()
        .bucket("laptop")
        .key("hello.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(out.body.collect().await.unwrap().into_bytes().as_ref(), b"hello");
    terminate(served).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn version_and_a_missing_postgresql_give_one_line_answers() {
    let version = pgvs3(&["--version"]).await;
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("pgvs3 {}", env!("CARGO_PKG_VERSION"))
    );
    let dir = data_dir("nopg");
    let missing = pgvs3(&[
        "serve",
        "--pg-bin",
        "/nonexistent/bin",
        "--data-dir",
        dir.to_str().unwrap(),
    ])
    .await;
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("pgvs3: ") && last.contains("apt-get install postgresql"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A first start that fails once its root key exists (here: the S3 port is taken) names the
/// flag to change and shows no secret; the next start that gets ready shows the key, framed,
/// once, and the key works.
#[tokio::test]
async fn a_generated_root_key_is_shown_once_the_gateway_is_ready() {
    let dir = data_dir("rootkey");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    let failed = Command::new(BIN)
        .args([
            "serve",
            "--s3-addr",
            &taken_addr,
            "--admin-addr",
            "127.0.0.1:0",
            "--resp-addr",
            "off",
        ])
        .args(["--ojs-addr", "off", "--data-dir"])
        .arg(&dir)
        .env_remove("PGVS3_ROOT_ACCESS_KEY")
        .env_remove("PGVS3_ROOT_SECRET_KEY")
        .output()
        .await
        .unwrap();
    assert!(!failed.status.success());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains(&taken_addr) && stderr.contains("--s3-addr"),
        "the error names the address and its flag: {stderr}"
    );
    let stdout = String::from_utf8_lossy(&failed.stdout);
    assert!(
        !stdout.contains("AWS_SECRET_ACCESS_KEY"),
        "a failed start showed the secret: {stdout}"
    );
    drop(taken);

    let generated = |dir: &Path| {
        let mut command = serve_command(dir);
        command
            .env_remove("PGVS3_ROOT_ACCESS_KEY")
            .env_remove("PGVS3_ROOT_SECRET_KEY");
        command
    };
    let (served, printed) = started(generated(&dir)).await;
    let value = |name: &str| {
        printed
            .iter()
            .find_map(|line| line.trim().strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} shown: {printed:#?}"))
            .to_owned()
    };
    let (access_key, secret) = (value("AWS_ACCESS_KEY_ID="), value("AWS_SECRET_ACCESS_KEY="));
    let framed = printed.iter().filter(|line| line.starts_with("=====")).count();
    assert_eq!(framed, 2, "the key is framed apart from other lines: {printed:#?}");
    let root = client(&served.s3, &access_key, &secret);
    root.create_bucket().bucket("first").send().await.unwrap();
    // With default flags RESP and OJS take the same key, on loopback too.
    let resp_line = format!("RESP: AUTH {access_key} {secret}");
    assert!(printed.iter().any(|line| line.trim() == resp_line), "{printed:#?}");
    let bearer = format!("{access_key}:{secret}");
    let ojs_line = format!("OJS:  Authorization: Bearer {bearer}");
    assert!(printed.iter().any(|line| line.trim() == ojs_line), "{printed:#?}");
    let credentials_work = |served: &Served, printed: &[String]| {
        let resp_addr = printed
            .iter()
            .find_map(|line| line.strip_prefix("pgvs3 RESP endpoint: redis://"))
            .expect("the RESP endpoint line")
            .parse()
            .unwrap();
        let ojs = served.ojs.clone().expect("the OJS endpoint");
        let (key, bearer) = (access_key.clone(), bearer.clone());
        async move {
            let mut raw = common::resp::RawResp::connect(resp_addr).await;
            assert_eq!(raw.command(&["PING"]).await.error(), "NOAUTH Authentication required.");
            assert_eq!(
                raw.command(&["EVAL", "return 1", "0"]).await.error(),
                "NOAUTH Authentication required."
            );
            assert_eq!(
                raw.command(&["AUTH", &key, "wrong"]).await.error(),
                "WRONGPASS invalid username-password pair or user is disabled."
            );
            let secret = bearer.split_once(':').unwrap().1.to_owned();
            assert_eq!(
                raw.command(&["AUTH", &key, &secret]).await,
                common::resp::Value::Simple("OK".into())
            );
            assert_eq!(raw.command(&["PING"]).await, common::resp::Value::Simple("PONG".into()));
            let base = ojs.trim_end_matches("/ojs/v1");
            assert_eq!(http_get(base, "/ojs/v1/queues").await.0, 401);
            let authorized = format!("authorization: Bearer {bearer}\r\n");
            assert_eq!(http_get_with(base, "/ojs/v1/queues", &authorized).await.0, 200);
            // The manifest stays open, as with --ojs-token.
            assert_eq!(http_get(base, "/ojs/manifest").await.0, 200);
        }
    };
    credentials_work(&served, &printed).await;
    terminate(served).await;

    // A restart keeps the credentials, and shows them no more.
    let (served, printed) = started(generated(&dir)).await;
    assert!(
        !printed
            .iter()
            .any(|line| line.contains("AWS_SECRET_ACCESS_KEY") || line.contains("Bearer")),
        "shown once only: {printed:#?}"
    );
    credentials_work(&served, &printed).await;
    terminate(served).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An admin command where no data dir is says which one it looked for, and creates nothing.
#[tokio::test]
async fn admin_without_a_data_dir_names_it_and_creates_nothing() {
    let dir = data_dir("nodir");
    for args in [
        vec!["admin", "key", "list", "--data-dir", dir.to_str().unwrap()],
        vec!["admin", "--data-dir", dir.to_str().unwrap(), "key", "create"],
    ] {
        let out = pgvs3(&args).await;
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("no pgvs3 data dir at {}", dir.display())) && stderr.contains("--data-dir"),
            "{args:?}: {stderr}"
        );
        assert!(!dir.exists(), "{args:?} created {}", dir.display());
    }
    // The default data dir is relative to where the command runs.
    let cwd = data_dir("nodir-cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let out = Command::new(BIN)
        .args(["admin", "key", "list"])
        .current_dir(&cwd)
        .env_remove("PGVS3_DATA_DIR")
        .env_remove("PGVS3_DATABASE_URL")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&cwd.join(".pgvs3").display().to_string()), "{stderr}");
    assert!(!cwd.join(".pgvs3").exists());
    std::fs::remove_dir_all(&cwd).unwrap();
}

/// A root key the catalog would refuse (too short, a character outside its set, an empty
/// secret) stops `serve` before anything is created, with a message that says what a valid key
/// looks like and never shows the secret. (An access key `AK` initialised the whole cluster,
/// then died on the catalog's constraint.)
#[tokio::test]
async fn serve_refuses_an_invalid_root_key_before_creating_anything() {
    let dir = data_dir("badroot");
    for (access_key, secret, names) in [
        ("AK", common::ROOT_SECRET_KEY, "3 to 128 characters"),
        ("ROOT KEY/1", common::ROOT_SECRET_KEY, "3 to 128 characters"),
        (common::ROOT_ACCESS_KEY, "", "secret key"),
        (common::ROOT_ACCESS_KEY, "line\nbreak-secret", "control characters"),
    ] {
        let out = serve_command(&dir)
            .env("PGVS3_ROOT_ACCESS_KEY", access_key)
            .env("PGVS3_ROOT_SECRET_KEY", secret)
            .output()
            .await
            .unwrap();
        assert!(!out.status.success(), "{access_key:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("pgvs3: ") && last.contains(names) && last.contains("PGVS3_ROOT_"),
            "{access_key:?}: {stderr}"
        );
        assert!(
            secret.is_empty() || !stderr.contains(secret),
            "the secret was shown: {stderr}"
        );
        assert!(!dir.exists(), "{access_key:?}: {} was created", dir.display());
    }
}

#[tokio::test]
async fn an_explicit_database_needs_a_master_key() {
    let out = pgvs3(&["serve", "--database-url", "postgres://nobody@127.0.0.1:1/x"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("PGVS3_MASTER_KEY"));
}

/// `admin origin` manages cache buckets beside a running serve; a write-back acknowledged just
/// before a kill -9 (its origin unreachable, so it cannot have been uploaded yet) reaches the
/// origin after a restart.
/// A secret taken from the environment never shows in `--help` (clap prints an env
/// variable's value there unless told not to): the database URL carries a password.
#[tokio::test]
async fn help_never_shows_secrets_from_the_environment() {
    const SECRET: &str = "sekrit-in-the-env";
    for args in [&["serve", "--help"][..], &["admin", "origin", "put", "--help"]] {
        let out = Command::new(BIN)
            .args(args)
            .env("PGVS3_DATABASE_URL", format!("postgres://pgvs3:{SECRET}@db/pgvs3"))
            .env("PGVS3_MASTER_KEY", SECRET)
            .env("PGVS3_ROOT_SECRET_KEY", SECRET)
            .env("PGVS3_RESP_PASSWORD", SECRET)
            .env("PGVS3_OJS_TOKEN", SECRET)
            .env("PGVS3_OJS_TENANT_TOKENS", format!("tenant={SECRET}"))
            .env("PGVS3_ORIGIN_SECRET_KEY", SECRET)
            .output()
            .await
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && help.contains("--database-url"),
            "{args:?}: {help}"
        );
        assert!(!help.contains(SECRET), "{args:?} shows a secret: {help}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn origin_commands_work_and_a_write_back_survives_kill_9() {
    let origin = common::TestGateway::start().await;
    origin
        .client
        .create_bucket()
        .bucket("origin-data")
        .send()
        .await
        .unwrap();
    let dir = data_dir("origin");
    let dir_arg = dir.display().to_string();
    let mut served = serve(&dir).await;
    let put_origin = |endpoint: String, verify: bool| {
        let dir_arg = dir_arg.clone();
        async move {
            let mut args = vec![
                "admin".to_owned(),
                "--data-dir".into(),
                dir_arg,
                "origin".into(),
                "put".into(),
                "--bucket".into(),
                "cached".into(),
                "--endpoint".into(),
                endpoint,
                "--origin-bucket".into(),
                "origin-data".into(),
                "--access-key".into(),
                common::ROOT_ACCESS_KEY.into(),
                "--secret-key".into(),
                common::ROOT_SECRET_KEY.into(),
                "--write-back-threshold".into(),
                "1MiB".into(),
                // The test's origin listens on loopback.
                "--origin-allow-local-addresses".into(),
            ];
            if !verify {
                args.push("--no-verify".into());
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            pgvs3(&args).await
        }
    };
    let dead = "http://127.0.0.1:9".to_owned();
    let refused = put_origin(dead.clone(), true).await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("checking origin bucket origin-data"), "{stderr}");
    assert!(put_origin(dead, false).await.status.success());
    let listed = pgvs3(&["admin", "--data-dir", &dir_arg, "origin", "list"]).await;
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("cached") && listed.contains("write-back") && listed.contains("127.0.0.1:9/origin-data"),
        "{listed}"
    );

    let body = common::noise(2 << 20, 9);
    let cache = client(&served.s3, common::ROOT_ACCESS_KEY, common::ROOT_SECRET_KEY);
    cache
        .put_object()
        .bucket("cached")
        .key("late.bin")
        .body(aws_sdk_s3::primitives::ByteStream::from(body.clone()))
        .send()
        .await
        .unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(served.child.id().unwrap() as i32, libc::SIGKILL) };
    served.child.wait().await.unwrap();

    let served = serve(&dir).await;
    assert!(put_origin(origin.endpoint(), true).await.status.success());
    let mut uploaded = None;
    for _ in 0..300 {
        if let Ok(output) = origin
            .client
            .get_object()
            .bucket("origin-data")
            .key("late.bin")
            .send()
            .await
        {
            uploaded = Some(output.body.collect().await.unwrap().to_vec());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        uploaded.as_deref(),
        Some(&body[..]),
        "the acknowledged body reached the origin"
    );

    let deleted = pgvs3(&[
        "admin",
        "--data-dir",
        &dir_arg,
        "origin",
        "delete",
        "--bucket",
        "cached",
    ])
    .await;
    assert!(deleted.status.success(), "{}", String::from_utf8_lossy(&deleted.stderr));
    let listed = pgvs3(&["admin", "--data-dir", &dir_arg, "origin", "list"]).await;
    assert!(!String::from_utf8_lossy(&listed.stdout).contains("cached"));
    terminate(served).await;
    origin.stop().await;
}

/// A stand-in OpenTelemetry collector: accepts OTLP/HTTP JSON exports and keeps every span.
struct Collector {
    url: String,
    spans: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
}

impl Collector {
    async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let spans = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = std::sync::Arc::clone(&spans);
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let kept = std::sync::Arc::clone(&kept);
                let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let kept = std::sync::Arc::clone(&kept);
                    async move {
                        use http_body_util::BodyExt;
                        assert_eq!(request.uri().path(), "/v1/traces");
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        let export: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        let mut kept = kept.lock().unwrap();
                        for resource in export["resourceSpans"].as_array().into_iter().flatten() {
                            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                                kept.extend(scope["spans"].as_array().into_iter().flatten().cloned());
                            }
                        }
                        Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                            bytes::Bytes::from_static(b"{}"),
                        )))
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                );
            }
        });
        Collector { url, spans }
    }

    /// Waits (bounded) until a span of `trace_id` named `name` has arrived.
    async fn span(&self, trace_id: &str, name: &str) -> serde_json::Value {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let found = self
                    .spans
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|span| span["traceId"] == trace_id && span["name"] == name)
                    .cloned();
                if let Some(span) = found {
                    return span;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "span {name} of trace {trace_id} within 30 s: got {:#?}",
                self.spans.lock().unwrap()
            )
        })
    }
}

/// An attribute's value as text, whatever its OTLP JSON type.
fn attribute(span: &serde_json::Value, key: &str) -> Option<String> {
    let value = &span["attributes"].as_array()?.iter().find(|kv| kv["key"] == key)?["value"];
    let value = value.as_object()?.values().next()?;
    Some(value.as_str().map_or_else(|| value.to_string(), str::to_owned))
}

#[tokio::test]
async fn traces_reach_an_otlp_collector_under_the_clients_trace() {
    let collector = Collector::start().await;
    let dir = data_dir("otlp");
    let served = serve_with_env(
        &dir,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
    .await;
    let s3 = client(&served.s3, common::ROOT_ACCESS_KEY, common::ROOT_SECRET_KEY);
    s3.create_bucket().bucket("traced").send().await.unwrap();

    // The client's own trace (W3C traceparent): the gateway's spans must join it.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let body = vec![7u8; 100_000];
    s3.put_object()
        .bucket("traced")
        .key("object")
        .body(ByteStream::from(body.clone()))
        .customize()
        .mutate_request(move |request| {
            request
                .headers_mut()
                .insert("traceparent", format!("00-{trace_id}-{client_span}-01"));
        })
        .send()
        .await
        .unwrap();

    let request = collector.span(trace_id, "S3 PutObject").await;
    assert_eq!(request["parentSpanId"], client_span, "{request:#}");
    assert_eq!(attribute(&request, "protocol").as_deref(), Some("s3"), "{request:#}");
    assert_eq!(attribute(&request, "operation").as_deref(), Some("PutObject"));
    assert_eq!(attribute(&request, "bucket").as_deref(), Some("traced"));
    assert_eq!(attribute(&request, "status").as_deref(), Some("200"));
    assert_eq!(attribute(&request, "bytes_in"), Some(body.len().to_string()));
    // A server span (OTLP's SPAN_KIND_SERVER is 2).
    assert_eq!(request["kind"], 2, "{request:#}");

    let store = collector.span(trace_id, "store put_object").await;
    assert_eq!(store["parentSpanId"], request["spanId"], "{store:#}");
    assert_eq!(attribute(&store, "db.system").as_deref(), Some("postgresql"));

    // A request without trace context starts a trace of its own.
    s3.head_object().bucket("traced").key("object").send().await.unwrap();
    let head = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let found = collector
                .spans
                .lock()
                .unwrap()
                .iter()
                .find(|span| span["name"] == "S3 HeadObject")
                .cloned();
            if let Some(span) = found {
                return span;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the HEAD's span arrives");
    assert_ne!(head["traceId"], trace_id);
    assert!(head["parentSpanId"].as_str().is_none_or(str::is_empty), "{head:#}");

    terminate(served).await;
    let _ = std::fs::remove_dir_all(&dir);
}
