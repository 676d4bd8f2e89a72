//! A client cannot fill the gateway's log: refused requests and malformed bodies, the client's
//! faults, log nothing at the default level (the binary as it runs, its stderr read whole).

use pgvs3_testkit as common;

use std::process::Stdio;
use std::time::{Duration, SystemTime};

use common::raw::{Signer, send, sha256_hex};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

#[tokio::test]
async fn client_faults_log_nothing_at_the_default_level() {
    let database_url = common::fresh_database().await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_pgvs3"))
        .args([
            "serve",
            "--s3-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
            "--resp-addr",
            "off",
            "--ojs-addr",
            "127.0.0.1:0",
            "--master-key",
            "log-volume-test-master-key",
            "--database-url",
            &database_url,
        ])
        .env("PGVS3_ROOT_ACCESS_KEY", common::ROOT_ACCESS_KEY)
        .env("PGVS3_ROOT_SECRET_KEY", common::ROOT_SECRET_KEY)
        .env_remove("PGVS3_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let log = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let endpoint = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("serve printed its endpoint");
            if line.starts_with("pgvs3 S3 endpoint:") {
                return line;
            }
        }
    })
    .await
    .expect("serve starts within a minute");
    let addr: std::net::SocketAddr = endpoint
        .split_whitespace()
        .find_map(|word| word.strip_prefix("http://"))
        .unwrap()
        .trim_end_matches(')')
        .trim_end_matches('/')
        .parse()
        .unwrap();

    for i in 0..20 {
        let anonymous = send(
            addr,
            "GET",
            &format!("/bkt/key-{i}"),
            &[("host".into(), "x".into())],
            b"",
        )
        .await;
        // No such bucket: S3 says so (404) before it would refuse the anonymous request.
        assert_eq!(anonymous.status, 404);
    }
    let signer = Signer {
        access_key: common::ROOT_ACCESS_KEY.into(),
        secret_key: common::ROOT_SECRET_KEY.into(),
        host: addr.to_string(),
    };
    let mut headers = signer.sign("PUT", "/bkt", &[], &sha256_hex(b""), SystemTime::now());
    headers.push(("content-length".into(), "0".into()));
    assert_eq!(send(addr, "PUT", "/bkt", &headers, b"").await.status, 200);
    // A malformed body with a marker that would show if s3s logged the body whole.
    let marker = "MALFORMED-BODY-MARKER";
    let body = format!("<Delete><Object><Key>{}</Key></Object>", marker.repeat(500));
    for _ in 0..5 {
        let mut headers = signer.sign(
            "POST",
            "/bkt?delete",
            &[],
            &sha256_hex(body.as_bytes()),
            SystemTime::now(),
        );
        headers.push(("content-length".into(), body.len().to_string()));
        let response = send(addr, "POST", "/bkt?delete", &headers, body.as_bytes()).await;
        assert_eq!(response.code(), Some("MalformedXML"), "{}", response.body);
    }
    let unknown = signer.sign("GET", "/bkt?website", &[], &sha256_hex(b""), SystemTime::now());
    assert_eq!(send(addr, "GET", "/bkt?website", &unknown, b"").await.status, 501);

    let pid = child.id().unwrap() as i32;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    let log = tokio::time::timeout(Duration::from_secs(10), log)
        .await
        .unwrap()
        .unwrap();
    let errors: Vec<&str> = log.lines().filter(|line| line.contains("ERROR")).collect();
    assert!(
        errors.is_empty(),
        "client faults logged at ERROR:\n{}",
        errors.join("\n")
    );
    assert!(!log.contains(marker), "a request body reached the log");
}
