//! Every catalog interaction is bounded in time (operator/src/database.rs): a database that
//! accepts connections and never answers fails as unreachable within the catalog timeout, and
//! a statement stuck behind a lock is stopped by the server, saying so; and one namespace's
//! resources cannot take every reconcile slot of a controller. [`Stall`] stops a database from
//! answering at a chosen statement (the cleanups' tests in bucket.rs and origin_cache.rs).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use pgvs3_operator::context::{Context, Error, NAMESPACE_SHARE};
use pgvs3_operator::database::{self, Connection};
use pgvs3_operator::metrics::Metrics;
use pgvs3_pgtls::{PgTls, SslMode};
use pgvs3_testkit as common;
use tokio_postgres::error::SqlState;

use crate::control_plane::{black_hole, database_parts};
use crate::mock::FakeApi;

fn connection(host: &str, port: u16, database: &str, user: &str, timeout: Duration) -> Connection {
    Connection {
        host: host.to_string(),
        port,
        database: database.to_string(),
        user: user.to_string(),
        password: "unused".to_string(),
        ssl_mode: SslMode::Disable,
        tls: PgTls::new(SslMode::Disable, Vec::new(), None).unwrap(),
        timeout,
    }
}

#[tokio::test]
async fn a_database_that_never_answers_fails_as_unreachable_within_the_timeout() {
    let (port, held) = black_hole().await;
    let connection = connection("127.0.0.1", port, "catalog", "operator", Duration::from_secs(1));
    let asked = database::within(&connection, async {
        let client = database::connect(&connection).await?;
        client.simple_query("SELECT 1").await?;
        Ok(())
    });
    // Only a guard against a hang (a test binary that never ends): the bound is the 1 s above.
    let error = tokio::time::timeout(Duration::from_secs(120), asked)
        .await
        .expect("the catalog call was not bounded")
        .unwrap_err();
    assert!(
        matches!(error, Error::CatalogTimeout { .. }) && database::unreachable(&error),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        format!("catalog at 127.0.0.1:{port}/catalog as operator: the database did not answer within 1s")
    );
    held.abort();
}

#[tokio::test]
async fn a_statement_behind_a_lock_is_stopped_by_the_server() {
    let url = common::fresh_database().await;
    let (host, port, database, user) = database_parts(&url);
    let (holder, driver) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(driver);
    holder.batch_execute("CREATE TABLE held ()").await.unwrap();
    holder
        .batch_execute("BEGIN; LOCK TABLE held IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    // lock_timeout is half the catalog timeout: the server's answer comes first, by 5 s.
    let connection = connection(&host, port, &database, &user, Duration::from_secs(10));
    let client = database::connect(&connection).await.unwrap();
    let error = database::within(&connection, async {
        Ok(client.simple_query("SELECT * FROM held").await?)
    })
    .await
    .unwrap_err();
    assert!(
        matches!(&error, Error::Catalog(err) if err.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)),
        "{error:?}"
    );
    assert!(!database::unreachable(&error), "the database answered: {error}");
    holder.batch_execute("ROLLBACK").await.unwrap();
}

#[tokio::test]
async fn one_namespace_holds_at_most_its_share_of_a_controllers_slots() {
    let (client, _fake) = FakeApi::start();
    let ctx = Context::new(client, Metrics::default());
    let held: Vec<_> = (0..NAMESPACE_SHARE)
        .map(|_| {
            ctx.namespace_slot("Bucket", "flooded")
                .expect("a slot within the share")
        })
        .collect();
    assert!(ctx.namespace_slot("Bucket", "flooded").is_none(), "beyond its share");
    assert!(
        ctx.namespace_slot("Bucket", "other").is_some(),
        "another namespace's own share"
    );
    assert!(
        ctx.namespace_slot("OriginCache", "flooded").is_some(),
        "another controller's"
    );
    drop(held);
    assert!(
        ctx.namespace_slot("Bucket", "flooded").is_some(),
        "released with its reconcile"
    );
}

/// A TCP proxy to the test cluster that forwards everything until the client sends bytes that
/// contain `marker` (a statement's text: tokio-postgres sends it in the clear): those are never
/// forwarded, and nothing more is, either way, as if the database's host froze right then. The
/// client can only give up on it (a timeout); once it closes, the proxy closes the server side,
/// and the server rolls back whatever the session had open.
pub struct Stall {
    /// The database (as `database_url` names it) through the proxy: TCP, with the cluster's password.
    pub url: String,
    stalled: Arc<AtomicBool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Stall {
    pub async fn start(database_url: &str, marker: &'static str) -> Stall {
        let (_, port, database, _) = database_parts(database_url);
        let password = common::faults::password_of(&common::shared_cluster_dir());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_port = listener.local_addr().unwrap().port();
        let stalled = Arc::new(AtomicBool::new(false));
        let seen = stalled.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, port, marker.as_bytes(), seen.clone()));
            }
        });
        Stall {
            url: common::faults::tcp_url(proxy_port, &password, &database),
            stalled,
            accept,
        }
    }

    /// Whether a client sent the marker (and has been stalled since).
    pub fn stalled(&self) -> bool {
        self.stalled.load(Ordering::SeqCst)
    }
}

impl Drop for Stall {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(mut client: TcpStream, port: u16, marker: &'static [u8], stalled: Arc<AtomicBool>) {
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.split();
    let (mut from_server, mut to_server) = server.split();
    let (mut up, mut down) = (vec![0; 16 << 10], vec![0; 16 << 10]);
    // The last bytes sent on, so that a marker split across two reads is found.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        tokio::select! {
            read = from_client.read(&mut up) => {
                let Ok(n @ 1..) = read else { return };
                tail.extend_from_slice(&up[..n]);
                if tail.windows(marker.len()).any(|window| window == marker) {
                    stalled.store(true, Ordering::SeqCst);
                    break;
                }
                tail.drain(..tail.len().saturating_sub(marker.len()));
                if to_server.write_all(&up[..n]).await.is_err() {
                    return;
                }
            }
            read = from_server.read(&mut down) => {
                let Ok(n @ 1..) = read else { return };
                if to_client.write_all(&down[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
    // Stalled: what the client sends is dropped, what the server says (it may end an idle
    // session) is never read, and both sockets stay open until the client closes its own.
    while let Ok(1..) = from_client.read(&mut up).await {}
}
