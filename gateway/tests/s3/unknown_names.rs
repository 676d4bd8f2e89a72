//! Unknown access keys and bucket names are answered from the catalog's negative cache: a
//! client sending made-up names costs the database one query per name until the catalog
//! reloads, and a key or bucket created afterwards works at once.

use pgvs3_testkit as common;

use common::TestGateway;
use common::s3::add_key;

/// Database lookups of `kind` that found nothing, as the gateway's /metrics counts them.
async fn missing_lookups(gw: &TestGateway, kind: &str) -> f64 {
    let line = format!(r#"pgvs3_catalog_lookups_total{{kind="{kind}",result="missing"}}"#);
    gw.metric(&line).await.unwrap_or(0.0)
}

#[tokio::test]
async fn unknown_access_keys_cost_one_catalog_query_per_name() {
    // With polling off, no reload forgets the misses while the test runs.
    let gw = TestGateway::with_args(common::fresh_database().await, &["--catalog-poll", "1h"]).await;
    // The start's own catalog changes (the root key) reach the catalog by a reload of their
    // own, which forgets misses: have it now, not amid the requests.
    gw.gateway.store.catalog().refresh().await.unwrap();
    let names = ["RANDOMKEYAAAA", "RANDOMKEYBBBB", "RANDOMKEYCCCC"];
    // Each name's requests follow one another, well inside the misses' 3-second life.
    for name in names {
        for round in 0..4 {
            let refused = gw.client_for(name, "x").list_buckets().send().await.unwrap_err();
            assert_eq!(
                refused.into_service_error().meta().code(),
                Some("InvalidAccessKeyId"),
                "{name}, round {round}"
            );
        }
    }
    assert_eq!(missing_lookups(&gw, "access_key").await, names.len() as f64);
    gw.stop().await;
}

#[tokio::test]
async fn a_key_or_bucket_created_after_a_miss_works_on_its_next_request() {
    let gw = TestGateway::with_args(common::fresh_database().await, &["--catalog-poll", "1h"]).await;
    let late = gw.client_for("LATEKEY", "LATEKEY-secret");
    let refused = late.list_buckets().send().await.unwrap_err();
    assert_eq!(refused.into_service_error().meta().code(), Some("InvalidAccessKeyId"));
    assert_eq!(missing_lookups(&gw, "access_key").await, 1.0);
    add_key(&gw, "LATEKEY").await;
    late.list_buckets().send().await.expect("the key works at once");
    // The key's own catalog change reaches this catalog by a reload of its own (NOTIFY), which
    // forgets misses: have it now, not amid the bucket's two requests below.
    gw.gateway.store.catalog().refresh().await.unwrap();

    for _ in 0..2 {
        let missing = gw
            .client
            .get_object()
            .bucket("latebucket")
            .key("k")
            .send()
            .await
            .unwrap_err();
        assert_eq!(missing.into_service_error().meta().code(), Some("NoSuchBucket"));
    }
    assert_eq!(
        missing_lookups(&gw, "bucket").await,
        1.0,
        "the second request was answered from memory"
    );
    gw.client.create_bucket().bucket("latebucket").send().await.unwrap();
    gw.client
        .head_bucket()
        .bucket("latebucket")
        .send()
        .await
        .expect("the bucket works at once");
    gw.stop().await;
}

/// A miss lasts until the catalog reloads: a key created elsewhere (another gateway, whose
/// NOTIFY reloads this catalog on a primary, or the poll on a standby) is found after it.
#[tokio::test]
async fn a_reload_forgets_the_misses() {
    let gw = TestGateway::with_args(common::fresh_database().await, &["--catalog-poll", "1h"]).await;
    let catalog = gw.gateway.store.catalog();
    assert!(catalog.access_key("ELSEWHERE").await.unwrap().is_none());
    assert!(catalog.bucket("elsewhere").await.is_err());
    let master_key = pgvs3_gateway::master_key::MasterKey::from_text(common::MASTER_KEY);
    let other = pgvs3_gateway::store::Catalog::load(gw.gateway.store.pool().clone(), master_key)
        .await
        .unwrap();
    other
        .put_access_key(&pgvs3_gateway::store::NewAccessKey {
            access_key: "ELSEWHERE".into(),
            secret: "elsewhere-secret".into(),
            is_root: false,
            read_only: false,
            description: String::new(),
        })
        .await
        .unwrap();
    other
        .create_bucket(
            &other
                .access_key(common::ROOT_ACCESS_KEY)
                .await
                .unwrap()
                .expect("the root key")
                .principal(),
            "elsewhere",
            &Default::default(),
        )
        .await
        .unwrap();
    catalog.reload_now().await.unwrap();
    assert!(catalog.access_key("ELSEWHERE").await.unwrap().is_some());
    assert!(catalog.bucket("elsewhere").await.is_ok());
    gw.stop().await;
}

/// A key granted in the same transaction that hands it a bucket (the operator's provisioning of a
/// Bucket that adopts the bucket its predecessor retained: the new key put, the custodian
/// revoked, the bucket adopted) is decided on that bucket as the transaction left it, at its
/// first request through a gateway whose catalog has not reloaded since, the NOTIFY still on
/// its way: the key is read from a newer snapshot than the cached bucket row, which names the
/// previous owner and refused the key (AccessDenied for a Bucket that said Ready, a CI failure
/// in the operator's tier). A catalog loaded apart from the gateway has no LISTEN connection
/// and no poll: it is such a gateway's, deterministically.
#[tokio::test]
async fn a_key_read_from_the_database_is_decided_on_buckets_as_new_as_itself() {
    let gw = TestGateway::with_args(common::fresh_database().await, &["--catalog-poll", "1h"]).await;
    let master_key = pgvs3_gateway::master_key::MasterKey::from_text(common::MASTER_KEY);
    let catalog = pgvs3_gateway::store::Catalog::load(gw.gateway.store.pool().clone(), master_key.clone())
        .await
        .unwrap();
    let custodian = add_key(&gw, "CUSTODIANKEY").await;
    custodian.create_bucket().bucket("handed").send().await.unwrap();
    catalog.reload_now().await.unwrap();
    let before = catalog.cached_bucket("handed").expect("cached by the reload");
    assert_eq!(before.owner.as_deref(), Some("CUSTODIANKEY"));

    let sql = gw.sql().await;
    sql.batch_execute("BEGIN").await.unwrap();
    sql.execute(
        "SELECT pgvs3.put_access_key($1, $2, false, false, 'Bucket team/handed')",
        &[&"SUCCESSORKEY", &master_key.seal("successor-secret")],
    )
    .await
    .unwrap();
    sql.execute("SELECT pgvs3.delete_access_key('CUSTODIANKEY')", &[])
        .await
        .unwrap();
    sql.execute("SELECT pgvs3.adopt_bucket('handed', 'SUCCESSORKEY')", &[])
        .await
        .unwrap();
    sql.batch_execute("COMMIT").await.unwrap();

    // The signature check's lookup, then the access check's bucket (`resolve_bucket` reads the
    // cached row first).
    let key = catalog.access_key("SUCCESSORKEY").await.unwrap().expect("granted");
    assert_eq!(key.secret, "successor-secret");
    let bucket = catalog.cached_bucket("handed").expect("the bucket");
    assert_eq!(
        bucket.owner.as_deref(),
        Some("SUCCESSORKEY"),
        "the bucket as the key's own transaction left it, not the cached row of before"
    );
    assert!(
        catalog.access_key("CUSTODIANKEY").await.unwrap().is_none(),
        "the key revoked with it is gone as well"
    );

    // Through the gateway itself (whose NOTIFY may or may not have come): the key works.
    let successor = gw.client_for("SUCCESSORKEY", "successor-secret");
    common::s3::put_request(&successor, "handed", "first", b"at once".to_vec())
        .send()
        .await
        .expect("the successor's first PUT");
    gw.stop().await;
}

/// A flood of made-up access keys cannot take the data pool from signed requests: their lookups
/// (before any signature check) run a few at a time, the rest wait briefly or are answered 503.
/// Made deterministic by holding `access_keys` locked, so every lookup that starts holds its
/// pool connection until the test lets go: the signed requests must still find connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_unknown_keys_leaves_connections_for_signed_requests() {
    let gw = TestGateway::with_args(
        common::fresh_database().await,
        &[
            "--catalog-poll",
            "1h",
            "--pool-size",
            "4",
            "--pg-pool-wait-timeout",
            "1s",
        ],
    )
    .await;
    gw.gateway.store.catalog().refresh().await.unwrap();
    gw.client.create_bucket().bucket("busy").send().await.unwrap();
    // The lock below holds up every read of `access_keys`, not only the flood's lookups: a
    // catalog reload waiting on it holds a pool connection too, outside the lookups' bound. The
    // bucket's creation changed the catalog, and its reload (NOTIFY's, or the listener's or
    // the poll's first, late on a loaded machine) could come after the lock: three of the four
    // connections then waited, or all four with two such reloads, and every signed PUT waited
    // out its second for a connection (503, a CI failure). Have that reload now: reloads run one
    // at a time, so once this returns none is running, the cache has the bucket's version and
    // later refreshes read only the version row (asserted below: no reload waits).
    gw.gateway.store.catalog().refresh().await.unwrap();
    let holder = gw.sql().await;
    holder
        .batch_execute("BEGIN; LOCK TABLE pgvs3.access_keys IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();

    let flooding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut flood = Vec::new();
    let addr = gw.gateway.s3_addr;
    for task in 0..16 {
        let flooding = flooding.clone();
        flood.push(tokio::spawn(async move {
            let mut round = 0;
            while flooding.load(std::sync::atomic::Ordering::Relaxed) {
                // A new key id each time: the negative cache absorbs none of them.
                let stranger = common::s3_client_at(addr, &format!("FLOOD{task:02}X{round:06}"), "x");
                let _ = stranger.list_buckets().send().await;
                round += 1;
            }
        }));
    }
    let watcher = gw.sql().await;
    // The gateway's statements waiting for the lock: lookups of one key, and catalog reloads.
    let waiting_on = |pattern: &'static str| {
        let watcher = &watcher;
        async move {
            watcher
                .query_one(
                    "SELECT count(*) AS waiting FROM pg_stat_activity
                      WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1",
                    &[&pattern],
                )
                .await
                .unwrap()
                .get::<_, i64>("waiting")
        }
    };
    const LOOKUPS: &str = "%FROM pgvs3.access_keys WHERE access_key = $1%";
    const RELOADS: &str = "%FROM pgvs3.access_keys WHERE NOT disabled%";
    let mut waiting = 0;
    for _ in 0..3000 {
        waiting = waiting_on(LOOKUPS).await;
        if waiting >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(waiting >= 2, "the flood's lookups came to wait ({waiting})");

    for round in 0..5 {
        let key = format!("k{round}");
        common::s3::put_request(&gw.client, "busy", &key, b"signed".to_vec())
            .send()
            .await
            .unwrap_or_else(|err| panic!("signed PUT {round} amid the flood: {err:?}"));
        let body = common::s3::read_object(&gw.client, "busy", &key).await;
        assert_eq!(body, b"signed");
    }
    // The bound itself: the flood's lookups hold two connections, no more, and nothing else
    // waits on the lock.
    assert_eq!(waiting_on(LOOKUPS).await, 2, "lookups of unknown keys waiting");
    assert_eq!(waiting_on(RELOADS).await, 0, "catalog reloads waiting");
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    holder.batch_execute("ROLLBACK").await.unwrap();
    for task in flood {
        task.await.unwrap();
    }
    gw.stop().await;
}
