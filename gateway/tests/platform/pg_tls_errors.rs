//! Why the gateway cannot connect to PostgreSQL, said so a person can act on it: a certificate
//! of an unknown CA (naming the sslrootcert used), for another host name (naming the one asked
//! for), expired; and `channel_binding=require`, which pgvs3 cannot meet. Each stops the start
//! at once instead of retrying for a minute.

use pgvs3_testkit as common;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::certs::{Issued, TestCa};
use common::{eventually, fresh_database};
use pgvs3_gateway::serve::RunningGateway;

/// Well under the minute of retries a reachable-later server gets.
const LIMIT: Duration = Duration::from_secs(10);

/// A server with ssl=on presenting `server`, and a login that needs a password over TCP.
async fn tls_server(name: &str, server: &Issued) -> u16 {
    let cluster = common::tls_cluster(name, server);
    let (admin, connection) = tokio_postgres::connect(&cluster.url("postgres"), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    for statement in [
        "CREATE ROLE tls LOGIN SUPERUSER PASSWORD 'tls-secret'",
        "CREATE DATABASE tls OWNER tls",
    ] {
        admin.batch_execute(statement).await.unwrap();
    }
    cluster.port
}

fn url(host: &str, port: u16, params: &str) -> String {
    format!("postgres://tls:tls-secret@{host}:{port}/tls?{params}")
}

/// The start's error, which must come at once.
async fn refused(url: &str) -> String {
    let started = tokio::time::Instant::now();
    let outcome = RunningGateway::start(&common::serve_args(url, &[])).await;
    let error = format!("{:#}", outcome.err().unwrap_or_else(|| panic!("{url} is refused")));
    assert!(started.elapsed() < LIMIT, "{url}: {:?}: {error}", started.elapsed());
    error
}

#[tokio::test]
async fn an_unknown_ca_and_a_wrong_host_name_are_named() {
    let ca = TestCa::new("pg-errors");
    let port = tls_server("errors", &ca.issue("server", "localhost", "DNS:localhost")).await;
    let other = TestCa::new("pg-errors-other");
    let other_file = other.ca_cert().display().to_string();

    let error = refused(&url(
        "localhost",
        port,
        &format!("sslmode=verify-full&sslrootcert={other_file}"),
    ))
    .await;
    assert!(error.contains("unknown CA"), "{error}");
    assert!(error.contains(&format!("sslrootcert ({other_file})")), "{error}");

    let ca_file = ca.ca_cert().display().to_string();
    let error = refused(&url(
        "127.0.0.1",
        port,
        &format!("sslmode=verify-full&sslrootcert={ca_file}"),
    ))
    .await;
    assert!(error.contains("host name mismatch"), "{error}");
    assert!(
        error.contains("\"127.0.0.1\"") && error.contains("it names localhost"),
        "{error}"
    );

    // SCRAM over TLS, but not channel-bound.
    let error = refused(&url(
        "localhost",
        port,
        &format!("sslmode=verify-full&sslrootcert={ca_file}&channel_binding=require"),
    ))
    .await;
    assert!(error.contains("channel_binding=require"), "{error}");
}

#[tokio::test]
async fn an_expired_certificate_is_named() {
    let ca = TestCa::new("pg-expired");
    let valid = ca.issue("server", "localhost", "DNS:localhost");
    // Valid for no time at all (notAfter = notBefore = now): expired a second later.
    let output = Command::new("openssl")
        .current_dir(&ca.dir)
        .args([
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-out",
            "expired.crt",
            "-days",
            "0",
            "-extfile",
            "server.ext",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // Its notAfter is a whole second no later than now: once the clock is past that second,
    // it is expired (webpki refuses only after notAfter).
    let unix_secs = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let minted = unix_secs();
    let expired = Issued {
        cert: ca.dir.join("expired.crt"),
        key: valid.key,
    };
    let port = tls_server("expired", &expired).await;
    eventually(LIMIT, "the certificate's last second to pass", || async {
        (unix_secs() > minted).then_some(())
    })
    .await;
    let ca_file = ca.ca_cert().display().to_string();
    let error = refused(&url(
        "localhost",
        port,
        &format!("sslmode=verify-full&sslrootcert={ca_file}"),
    ))
    .await;
    assert!(error.contains("expired at"), "{error}");
}

#[tokio::test]
async fn channel_binding_required_of_a_trust_server_is_refused_at_once() {
    // The harness's cluster: Unix socket, trust authentication, no TLS.
    let error = refused(&format!("{} channel_binding=require", fresh_database().await)).await;
    assert!(
        error.contains("channel_binding=require") && error.contains("channel_binding=prefer"),
        "{error}"
    );
}
