//! Every catalog interaction is bounded in time (operator/src/database.rs): a database that
//! accepts connections and never answers fails as unreachable within the catalog timeout, and
//! a statement stuck behind a lock is stopped by the server, saying so; and one namespace's
//! resources cannot take every reconcile slot of a controller.

use std::time::Duration;

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
