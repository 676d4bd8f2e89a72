//! The storage layout as the migration runner builds it: function files re-applied only when
//! they change, an upgraded database ending with the same functions as a fresh one, and the
//! committed `gateway/schema.sql` matching what a fresh migration produces.

use pgvs3_testkit as common;

use std::collections::BTreeMap;

use pgvs3_gateway::pg::migrate;

/// Migrations 0001–0010 as the layout-v10 gateway ran them (before function files existed).
const LAYOUT_V10: &[(i32, &str, &str)] = &[
    (1, "layout_v1", include_str!("../../migrations/0001_layout_v1.sql")),
    (2, "multipart", include_str!("../../migrations/0002_multipart.sql")),
    (3, "ojs", include_str!("../../migrations/0003_ojs.sql")),
    (
        4,
        "origin_cache",
        include_str!("../../migrations/0004_origin_cache.sql"),
    ),
    (
        5,
        "ojs_workflows",
        include_str!("../../migrations/0005_ojs_workflows.sql"),
    ),
    (
        6,
        "ojs_inline_timestamps",
        include_str!("../../migrations/0006_ojs_inline_timestamps.sql"),
    ),
    (
        7,
        "bucket_quotas",
        include_str!("../../migrations/0007_bucket_quotas.sql"),
    ),
    (
        8,
        "ojs_events_nested_workflows",
        include_str!("../../migrations/0008_ojs_events_nested_workflows.sql"),
    ),
    (
        9,
        "cache_range_lru",
        include_str!("../../migrations/0009_cache_range_lru.sql"),
    ),
    (
        10,
        "cache_keep_uploaded_bodies",
        include_str!("../../migrations/0010_cache_keep_uploaded_bodies.sql"),
    ),
];

/// Functions added by layout v11 (they did not exist before it).
/// Functions added since layout v10: by v11 (the control API), v12 (versioning), v13 (object
/// lock, lifecycle, notifications), v14 (RESP data types), v17 (the webhook outbox), v20
/// (notifications to pub/sub channels), v21 (the control API's key policies and notification
/// rules), v22 (RESP streams), v23 (cache buckets' notifications, job dependencies), v26 (an
/// access key's sealed secret), v27 (RESP stream consumer groups) and v28 (RESP stream
/// wakeups, and touching typed keys only when they change).
const NEW_SINCE_V10: &[&str] = &[
    "ojs.add_dependencies(text,text[])",
    "ojs.bounded_depth(text,text,bigint)",
    "ojs.delivery_json(pgvs3.outbox)",
    "ojs.dependency_settled()",
    "ojs.ensure_webhook_trigger()",
    "ojs.event_json(text,bigint,text,timestamp with time zone,text,text,jsonb)",
    "ojs.event_matches(text[],text)",
    "ojs.event_webhooks()",
    "ojs.key_name(text)",
    "ojs.key_tenant(text)",
    "ojs.resolve_dependencies(text)",
    "ojs.tenant_key(text,text)",
    "ojs.webhook_json(ojs.webhooks)",
    "ojs.workflow_cancel_leftovers(text)",
    "ojs.workflow_cancelled(text)",
    "ojs.workflow_leftovers(text[])",
    "ojs.workflow_sweep(text[],boolean)",
    "ojs.workflow_sweep_marked(integer)",
    "ojs.workflow_tenant_of_jobs()",
    "pgvs3.access_key_secret(text)",
    "pgvs3.bucket_held(bigint)",
    "pgvs3.bucket_owner(text)",
    "pgvs3.bucket_to_drop(text)",
    "pgvs3.cache_write_event(bigint,text,text,bigint,text)",
    "pgvs3.delete_oidc_issuer(text)",
    "pgvs3.delete_role(text)",
    "pgvs3.drop_webhook_target(text)",
    "pgvs3.emit_object_event(bigint,text,text,bigint,text,text)",
    "pgvs3.ensure_event_triggers(text)",
    "pgvs3.ensure_versions(text)",
    "pgvs3.event_key(text)",
    "pgvs3.keep_version()",
    "pgvs3.list_roles()",
    "pgvs3.object_event()",
    "pgvs3.object_locked(jsonb,boolean)",
    "pgvs3.oidc_issuer_jwks(text)",
    "pgvs3.origin_secret(text)",
    "pgvs3.owe_object_event(text,text,jsonb)",
    "pgvs3.publish_object_event(text,jsonb)",
    "pgvs3.put_bucket_notifications(text,jsonb)",
    "pgvs3.put_bucket_notifications(text,jsonb,text,text)",
    "pgvs3.put_oidc_issuer(text,jsonb)",
    "pgvs3.put_role(text,jsonb,jsonb,integer)",
    "pgvs3.put_webhook_target(text,text,text)",
    "pgvs3.raise_owed_event(bigint,text,jsonb)",
    "pgvs3.replace_null_version()",
    "pgvs3.resp_apply_begin(bigint,text,\"char\",boolean,boolean,boolean)",
    "pgvs3.resp_apply_end(bigint,text,\"char\",boolean,boolean,boolean,boolean,bigint,bigint)",
    "pgvs3.resp_batch_notify(bytea,bytea,integer)",
    "pgvs3.resp_bump(bigint,text)",
    "pgvs3.resp_check(bigint,text[],text[],text[],\"char\",boolean)",
    "pgvs3.resp_clear(bigint,text,boolean)",
    "pgvs3.resp_create(bigint,text,\"char\")",
    "pgvs3.resp_decimal(bytea)",
    "pgvs3.resp_encodings(bigint)",
    "pgvs3.resp_expect(boolean)",
    "pgvs3.resp_fits(bigint,text,\"char\")",
    "pgvs3.resp_grown(bigint,text,\"char\",bytea[],bigint)",
    "pgvs3.resp_hash(text,bigint,text[],text[],bytea[],bigint[],double precision[])",
    "pgvs3.resp_hash_apply(bigint,text,boolean,boolean,boolean,bigint,bigint,bytea[],bytea[],bytea[],bytea[],bytea[],bytea[],bytea[])",
    "pgvs3.resp_hash_apply(bigint,text[],boolean[],boolean[],boolean[],boolean[],bigint[],bigint[],text[],bytea[],bytea[],text[],bytea[],bytea[],bytea[],text[],bytea[],bytea[])",
    "pgvs3.resp_hash_set(bigint,text,bytea[],boolean)",
    "pgvs3.resp_hash_values(bigint,text,bytea[])",
    "pgvs3.resp_hold_keyspace(bigint,boolean)",
    "pgvs3.resp_int(bytea)",
    "pgvs3.resp_key_ready()",
    "pgvs3.resp_keys(text,bigint,text[],text[],bytea[],bigint[],double precision[])",
    "pgvs3.resp_keys_begin(bigint,text[],\"char\",boolean[],boolean[],boolean[])",
    "pgvs3.resp_keys_end(bigint,text[],\"char\",boolean[],boolean[],boolean[],boolean[],bigint[],bigint[])",
    "pgvs3.resp_large(bigint,text)",
    "pgvs3.resp_list(text,bigint,text[],text[],bytea[],bigint[],double precision[])",
    "pgvs3.resp_list_apply(bigint,text,boolean,boolean,bigint,bigint,bigint,bigint[],bytea[],bigint[],bytea[],bigint,bigint,bigint)",
    "pgvs3.resp_list_at(bigint,text,bigint)",
    "pgvs3.resp_list_pop(bigint,text,boolean,bigint)",
    "pgvs3.resp_list_push(bigint,text,boolean,bytea[])",
    "pgvs3.resp_list_shrink(bigint,text,bigint,bigint,bigint)",
    "pgvs3.resp_mark_typed()",
    "pgvs3.resp_notify(bytea,bytea,integer)",
    "pgvs3.resp_now()",
    "pgvs3.resp_object_event()",
    "pgvs3.resp_publish(bytea,bytea,integer)",
    "pgvs3.resp_set(text,bigint,text[],text[],bytea[],bigint[],double precision[])",
    "pgvs3.resp_set_apply(bigint,text,boolean,boolean,boolean,bigint,bigint,bytea[],bytea[])",
    "pgvs3.resp_set_apply(bigint,text[],boolean[],boolean[],boolean[],boolean[],bigint[],bigint[],text[],bytea[],text[],bytea[])",
    "pgvs3.resp_settle(bigint,text)",
    "pgvs3.resp_small_limits(bigint,\"char\")",
    "pgvs3.resp_stream(text,bigint,text[],text[],bytea[],bigint[],double precision[])",
    "pgvs3.resp_stream_append(bigint,text,bigint[],bigint[],bytea[],bigint[],bigint[])",
    "pgvs3.resp_stream_append_nodes(bigint,text,bigint[],bigint[])",
    "pgvs3.resp_stream_apply(bigint,text,boolean,bigint,bigint,bigint,bigint,bigint,bigint,bigint,bigint,bigint,bigint[],bigint[],bytea[],bigint[],bigint[],bigint[],bigint[],bigint[],bigint[],bigint)",
    "pgvs3.resp_stream_counter(pgvs3.resp_stream,bigint,bigint,bigint,bigint)",
    "pgvs3.resp_stream_entries(bigint,text,bigint[],bigint[],bytea[],bigint[],bigint[])",
    "pgvs3.resp_stream_first(bigint,text)",
    "pgvs3.resp_stream_flat(pgvs3.resp_stream_entry[])",
    "pgvs3.resp_stream_gone()",
    "pgvs3.resp_stream_group(text,bigint,text[],text[],bytea[],bigint[],double precision[])",
    "pgvs3.resp_stream_groups_full(pgvs3.resp_stream,bigint)",
    "pgvs3.resp_stream_id(bigint,bigint)",
    "pgvs3.resp_stream_lag(pgvs3.resp_stream,bigint,bigint,pgvs3.resp_stream_group)",
    "pgvs3.resp_stream_max()",
    "pgvs3.resp_stream_min()",
    "pgvs3.resp_stream_next_id(bigint,bigint,bigint,bigint,bigint)",
    "pgvs3.resp_stream_now()",
    "pgvs3.resp_stream_range(bigint,text,bigint,bigint,bigint,bigint,boolean,bigint)",
    "pgvs3.resp_stream_successor(bigint,bigint)",
    "pgvs3.resp_stream_tombstone_after(pgvs3.resp_stream,bigint,bigint,bigint,bigint)",
    "pgvs3.resp_stream_trim(bigint,text,boolean,bigint,bigint,bigint,boolean)",
    "pgvs3.resp_touch(bigint,text,\"char\")",
    "pgvs3.resp_track(text,boolean,integer)",
    "pgvs3.resp_track(text,boolean,integer,integer)",
    "pgvs3.resp_tracked(text)",
    "pgvs3.resp_type(bigint,text)",
    "pgvs3.resp_typed_conflict()",
    "pgvs3.resp_wake(bigint,text)",
    "pgvs3.resp_watch(bigint,bigint,text[])",
    "pgvs3.resp_watch_objects(text)",
    "pgvs3.resp_watched_write()",
    "pgvs3.resp_wrongtype()",
    "pgvs3.resp_zadd_steps(bigint,text,bytea[],double precision[],bigint[])",
    "pgvs3.resp_zrange(bigint,text,bigint[],double precision[],bytea[])",
    "pgvs3.resp_zset(text,bigint,text[],text[],bytea[],bigint[],double precision[])",
    "pgvs3.resp_zset_apply(bigint,text,boolean,boolean,boolean,bigint,bigint,bytea[],double precision[],bytea[],double precision[],double precision[],bytea[],double precision[])",
    "pgvs3.resp_zset_apply(bigint,text[],boolean[],boolean[],boolean[],boolean[],bigint[],bigint[],text[],bytea[],double precision[],text[],bytea[],double precision[],double precision[],text[],bytea[],double precision[])",
    "pgvs3.retry_dead_deliveries(text)",
    "pgvs3.set_key_policy(text,text)",
    "pgvs3.settle_write_back(bigint,text,bigint,text)",
    "pgvs3.sts_open_session(text,bytea,bytea,text,text,text,integer)",
    "pgvs3.sts_reap_sessions(interval)",
    "pgvs3.sts_role(text)",
    "pgvs3.sts_session(text)",
    "pgvs3.uuid_v7()",
    "pgvs3.versioning_now(bigint)",
];
/// v10 functions a later layout changed on purpose: v12 (versioning) keeps bodies that moved to
/// `versions`, counts versions as content, and gives new namespaces their versions table; v13
/// (object lock) refuses to force-drop a bucket holding locked versions;
/// v23 raises the event a superseded cache write still owed; v24 counts every version in bucket quotas;
/// v52 keys OJS workers and rate-limit keys by tenant; v67 holds a cache bucket for its removal as
/// DeleteBucket holds a bucket, and drops it as DeleteBucket does, and a deleted key's buckets lose
/// the notification rules into its tenant (v68); v72 marks a stopped workflow whose jobs another
/// transaction held, for the sweeps.
const CHANGED_SINCE_V10: &[&str] = &[
    "ojs.cron_json(ojs.cron)",
    "ojs.rate_limit_json(ojs.rate_limits)",
    "ojs.worker_json(ojs.workers)",
    "ojs.workflow_cancel_members(text)",
    "pgvs3.count_bucket_usage()",
    "pgvs3.delete_access_key(text)",
    "pgvs3.drop_bucket(text,boolean)",
    "pgvs3.drop_origin(text,boolean)",
    "pgvs3.enqueue_write_back()",
    "pgvs3.ensure_namespace(text,text)",
    "pgvs3.put_origin(text,text,text,text,text,bytea,text,boolean,integer,integer,integer,bigint,bigint,integer)",
    "pgvs3.retire_body()",
    "pgvs3.set_bucket_quota(text,bigint,bigint)",
];

/// v10 triggers a later layout changed on purpose: v54 revalidates clean write-backs when the
/// origin's credentials change too.
const TRIGGERS_CHANGED_SINCE_V10: &[&str] = &["pgvs3.origins origins_revalidate_clean_write_backs"];

/// v10 functions a later layout dropped: v44 renders jobs in the gateway (`ojs.job_json`).
const DROPPED_SINCE_V10: &[&str] = &["ojs.job_json(ojs.jobs)"];

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    // Names print schema-qualified whatever the user's default search path holds.
    client.batch_execute("SET search_path = pg_catalog").await.unwrap();
    client
}

async fn run_migrate(url: &str) -> i32 {
    let pool = pgvs3_gateway::pg::pool(url.parse().unwrap(), 1).unwrap();
    migrate::migrate(&pool).await.unwrap()
}

/// Every function of the layout's schemas, by signature, with its full definition.
async fn functions(sql: &tokio_postgres::Client) -> BTreeMap<String, String> {
    sql.query(
        "SELECT p.oid::regprocedure::text AS signature, pg_get_functiondef(p.oid) AS definition
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname IN ('pgvs3', 'ojs', 's3p', 's3w', 's3c')",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| (row.get("signature"), row.get("definition")))
    .collect()
}

/// Every trigger of the layout, with its definition.
async fn triggers(sql: &tokio_postgres::Client) -> BTreeMap<String, String> {
    sql.query(
        "SELECT t.tgrelid::regclass::text || ' ' || t.tgname AS name, pg_get_triggerdef(t.oid) AS definition
           FROM pg_trigger t WHERE NOT t.tgisinternal",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| (row.get("name"), row.get("definition")))
    .collect()
}

/// The row version of every function: `CREATE OR REPLACE` writes a new one even when nothing
/// in the definition changed.
async fn function_row_versions(sql: &tokio_postgres::Client) -> BTreeMap<String, String> {
    sql.query(
        "SELECT p.oid::regprocedure::text AS signature, p.xmin::text AS xmin
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname IN ('pgvs3', 'ojs')",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| (row.get("signature"), row.get("xmin")))
    .collect()
}

/// A database the layout-v10 gateway migrated, upgraded by this one, has the functions and
/// triggers of a freshly migrated database, and every function it had before is unchanged:
/// the function files hold exactly the latest definitions the migrations left behind.
#[tokio::test]
async fn an_upgraded_database_has_the_functions_of_a_fresh_one() {
    let old_url = common::fresh_database().await;
    let old = connect(&old_url).await;
    old.batch_execute(
        "CREATE SCHEMA pgvs3;
         CREATE TABLE pgvs3.layout (version int PRIMARY KEY, name text NOT NULL,
                                    applied_at timestamptz NOT NULL DEFAULT now());",
    )
    .await
    .unwrap();
    for (version, name, sql) in LAYOUT_V10 {
        let tx =
            format!("BEGIN; {sql}\n; INSERT INTO pgvs3.layout (version, name) VALUES ({version}, '{name}'); COMMIT;");
        old.batch_execute(&tx).await.unwrap();
    }
    let before = functions(&old).await;
    let triggers_before = triggers(&old).await;
    assert!(before.len() > 30, "the v10 layout has its functions: {}", before.len());

    assert_eq!(run_migrate(&old_url).await, migrate::LAYOUT_VERSION);
    let upgraded = functions(&old).await;
    for (signature, definition) in &before {
        if DROPPED_SINCE_V10.contains(&signature.as_str()) {
            assert_eq!(upgraded.get(signature), None, "{signature} is dropped");
            continue;
        }
        if CHANGED_SINCE_V10.contains(&signature.as_str()) {
            assert_ne!(
                upgraded.get(signature),
                Some(definition),
                "{signature} is the newer layout's"
            );
            continue;
        }
        assert_eq!(
            upgraded.get(signature),
            Some(definition),
            "{signature} changed by the function files"
        );
    }
    let added: Vec<&str> = upgraded
        .keys()
        .filter(|signature| !before.contains_key(*signature))
        .map(String::as_str)
        .collect();
    assert_eq!(added, NEW_SINCE_V10);
    let triggers_after = triggers(&old).await;
    for (name, definition) in &triggers_before {
        match TRIGGERS_CHANGED_SINCE_V10.contains(&name.as_str()) {
            true => assert!(
                triggers_after.get(name).is_some_and(|after| after != definition),
                "{name} is the newer layout's"
            ),
            false => assert_eq!(
                triggers_after.get(name),
                Some(definition),
                "every v10 trigger is still there"
            ),
        }
    }

    let fresh_url = common::fresh_database().await;
    run_migrate(&fresh_url).await;
    let fresh = connect(&fresh_url).await;
    assert_eq!(functions(&fresh).await, upgraded);
    assert_eq!(
        triggers(&fresh).await,
        triggers_after,
        "upgraded and fresh have the same triggers"
    );
}

/// Re-running the migration with unchanged files rewrites no function; a file whose recorded
/// digest differs is re-applied, and only that file.
#[tokio::test]
async fn unchanged_function_files_are_not_applied_again() {
    let url = common::fresh_database().await;
    run_migrate(&url).await;
    let sql = connect(&url).await;
    let files: Vec<(String, String)> = sql
        .query("SELECT name, digest FROM pgvs3.function_files ORDER BY name", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get("name"), row.get("digest")))
        .collect();
    let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "cache",
            "catalog",
            "events",
            "objects",
            "ojs",
            "quotas",
            "resp_hash",
            "resp_keys",
            "resp_list",
            "resp_pubsub",
            "resp_set",
            "resp_stream",
            "resp_stream_group",
            "resp_zset",
            "sts"
        ]
    );
    let versions = function_row_versions(&sql).await;

    run_migrate(&url).await;
    assert_eq!(function_row_versions(&sql).await, versions, "nothing re-applied");

    sql.execute(
        "UPDATE pgvs3.function_files SET digest = 'stale' WHERE name = 'quotas'",
        &[],
    )
    .await
    .unwrap();
    run_migrate(&url).await;
    let after = function_row_versions(&sql).await;
    let rewritten: Vec<&str> = after
        .iter()
        .filter(|(signature, xmin)| versions.get(*signature) != Some(*xmin))
        .map(|(signature, _)| signature.as_str())
        .collect();
    assert_eq!(
        rewritten,
        [
            "pgvs3.count_bucket_usage()",
            "pgvs3.set_bucket_quota(text,bigint,bigint)"
        ]
    );
    let digest: String = sql
        .query_one("SELECT digest FROM pgvs3.function_files WHERE name = 'quotas'", &[])
        .await
        .unwrap()
        .get("digest");
    assert_eq!(
        Some(&digest),
        files.iter().find(|(name, _)| name == "quotas").map(|(_, d)| d)
    );
}

/// A database with a newer layout is refused, and keeps its functions.
#[tokio::test]
async fn a_newer_layout_is_refused() {
    let url = common::fresh_database().await;
    run_migrate(&url).await;
    let sql = connect(&url).await;
    sql.batch_execute(
        "INSERT INTO pgvs3.layout (version, name) VALUES (1000, 'from_the_future');
         UPDATE pgvs3.function_files SET digest = 'newer'",
    )
    .await
    .unwrap();
    let versions = function_row_versions(&sql).await;
    let pool = pgvs3_gateway::pg::pool(url.parse().unwrap(), 1).unwrap();
    let refused = migrate::migrate(&pool).await.unwrap_err().to_string();
    assert!(refused.contains("newer than this gateway"), "{refused}");
    assert_eq!(function_row_versions(&sql).await, versions);
}

/// The layout as `pg_dump --schema-only` prints it, without what differs between runs or
/// installations (the version banner, session settings, psql's restrict keys).
fn normalized(dump: &str) -> String {
    let mut out = String::from(
        "-- The whole pgvs3 storage layout: `pg_dump --schema-only --no-owner --no-privileges` of a\n\
         -- freshly migrated database (PostgreSQL 15). Generated by `just schema`; CI checks it is\n\
         -- current. Read it, never apply it: migrations and function files build the layout.\n",
    );
    let mut blank = false;
    for line in dump.lines() {
        let noise = line.starts_with("-- Dumped ")
            || line.starts_with("SET ")
            || line.starts_with("SELECT pg_catalog.set_config")
            || line.starts_with("\\restrict")
            || line.starts_with("\\unrestrict");
        if noise || (line.is_empty() && blank) {
            continue;
        }
        blank = line.is_empty();
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `gateway/schema.sql` is what a fresh migration produces (`PGVS3_WRITE_SCHEMA=1` rewrites it:
/// `just schema`).
#[tokio::test]
async fn schema_sql_is_current() {
    let url = common::fresh_database().await;
    run_migrate(&url).await;
    let pg_bin = pgvs3_gateway::pg::embedded::find_pg_bin(None).unwrap();
    let dump = tokio::process::Command::new(pg_bin.join("pg_dump"))
        .args(["--schema-only", "--no-owner", "--no-privileges", "--dbname", &url])
        .output()
        .await
        .unwrap();
    assert!(dump.status.success(), "{}", String::from_utf8_lossy(&dump.stderr));
    let generated = normalized(&String::from_utf8(dump.stdout).unwrap());
    let committed_path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema.sql");
    if std::env::var_os("PGVS3_WRITE_SCHEMA").is_some() {
        std::fs::write(committed_path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(committed_path).unwrap_or_default();
    assert!(
        committed == generated,
        "gateway/schema.sql drifted from the migrations: run `just schema` and commit it"
    );
}

/// The kind of a control call's refusal.
async fn catalog_version(sql: &tokio_postgres::Client) -> i64 {
    sql.query_one("SELECT version FROM pgvs3.catalog_version", &[])
        .await
        .unwrap()
        .get("version")
}

fn kind<T>(result: Result<T, pgvs3_catalog::Error>) -> pgvs3_catalog::ErrorKind {
    match result {
        Ok(_) => panic!("the catalog accepted the call"),
        Err(err) => err.kind(),
    }
}

/// A cache bucket's settings for the control API tests.
fn origin<'a>(bucket: &'a str, endpoint: &'a str, sealed_secret: &'a [u8]) -> pgvs3_catalog::OriginSettings<'a> {
    pgvs3_catalog::OriginSettings {
        bucket,
        endpoint,
        origin_bucket: "remote",
        region: "us-east-1",
        access_key: "origin-key",
        sealed_secret,
        cache_mode: "write-back",
        path_style: true,
        ttl_seconds: 60,
        negative_ttl_seconds: 0,
        fill_concurrency: 8,
        size_limit_bytes: None,
        write_back_threshold: 8 << 20,
        range_chunk_bytes: 1 << 20,
    }
}

/// The typed control client against the real functions: each refusal comes back as its kind,
/// and a catalog older than the client's layout is `CatalogOutdated`.
#[tokio::test]
async fn the_control_api_refuses_with_typed_errors() {
    use pgvs3_catalog::notifications::{
        Caller, NotificationRule, Notifications, put_bucket_notifications, put_bucket_notifications_as,
    };
    use pgvs3_catalog::{ErrorKind, ORDINARY_NAMESPACE};

    let url = common::fresh_database().await;
    run_migrate(&url).await;
    let sql = connect(&url).await;

    let refused = pgvs3_catalog::ensure_bucket(&sql, "Not_A_Bucket", None, ORDINARY_NAMESPACE).await;
    assert_eq!(kind(refused), ErrorKind::InvalidBucketName);
    let bucket = pgvs3_catalog::ensure_bucket(&sql, "plain", None, ORDINARY_NAMESPACE)
        .await
        .unwrap();
    assert!(bucket.created);
    let again = pgvs3_catalog::ensure_bucket(&sql, "plain", None, ORDINARY_NAMESPACE)
        .await
        .unwrap();
    assert_eq!((again.id, again.created), (bucket.id, false));
    assert_eq!(pgvs3_catalog::bucket_owner(&sql, "plain").await.unwrap(), Some(None));
    assert_eq!(pgvs3_catalog::bucket_owner(&sql, "absent").await.unwrap(), None);

    let key = pgvs3_catalog::AccessKey {
        id: "owner-key",
        sealed_secret: b"sealed",
        is_root: false,
        read_only: false,
        description: "",
    };
    pgvs3_catalog::put_access_key(&sql, &key).await.unwrap();
    assert!(pgvs3_catalog::adopt_bucket(&sql, "plain", "owner-key").await.unwrap());
    assert_eq!(
        pgvs3_catalog::bucket_owner(&sql, "plain").await.unwrap(),
        Some(Some("owner-key".to_string()))
    );

    let no_bucket = pgvs3_catalog::set_bucket_quota(&sql, "absent", Some(1), None).await;
    assert_eq!(kind(no_bucket), ErrorKind::NoSuchBucket);
    let negative = pgvs3_catalog::set_bucket_quota(&sql, "plain", Some(-1), None).await;
    assert_eq!(kind(negative), ErrorKind::Refused);

    // Layout v21: a key's own policy; re-attaching the same document changes no row (every
    // gateway would reload its catalog otherwise), and the root key never gets one.
    let policy = r#"{"Version":"2012-10-17","Statement":[]}"#;
    assert!(
        pgvs3_catalog::set_key_policy(&sql, "owner-key", Some(policy))
            .await
            .unwrap()
    );
    let version = catalog_version(&sql).await;
    assert!(
        pgvs3_catalog::set_key_policy(&sql, "owner-key", Some(policy))
            .await
            .unwrap()
    );
    assert_eq!(catalog_version(&sql).await, version, "an unchanged policy is no update");
    assert!(!pgvs3_catalog::set_key_policy(&sql, "absent-key", None).await.unwrap());

    // Notification rules: what only the database knows is checked there, for every writer.
    let rules = |arn: &str| {
        let rule = NotificationRule::new("r".into(), arn, &["s3:ObjectCreated:*"], String::new(), String::new());
        Notifications::new(vec![rule.unwrap()]).unwrap()
    };
    let absent = put_bucket_notifications(&sql, "absent", &rules("arn:pgvs3:ojs:::q")).await;
    assert_eq!(kind(absent), ErrorKind::NoSuchBucket);
    let unregistered = put_bucket_notifications(&sql, "plain", &rules("arn:pgvs3:webhook:::nobody")).await;
    assert_eq!(kind(unregistered), ErrorKind::UnknownDestination);
    let bad_queue = put_bucket_notifications(&sql, "plain", &rules("arn:pgvs3:ojs:::Not_A_Queue")).await;
    assert_eq!(kind(bad_queue), ErrorKind::UnknownDestination);
    // Layout v71: S3's form refuses a caller whose request saw another owner than the bucket
    // has now (the root key's, when it was authorized; `owner-key` adopted it since).
    let stale = Caller {
        access_key: "owner-key",
        authorized_owner: None,
    };
    let stale = put_bucket_notifications_as(&sql, "plain", &rules("arn:pgvs3:ojs:::q"), stale).await;
    assert_eq!(kind(stale), ErrorKind::AccessDenied);
    put_bucket_notifications(&sql, "plain", &rules("arn:pgvs3:ojs:::q"))
        .await
        .unwrap();
    let installed: i64 = sql
        .query_one(
            "SELECT count(*) FROM pg_trigger WHERE tgname IN ('objects_event', 'versions_event')
               AND tgrelid IN ('s3p.objects'::regclass, 's3p.versions'::regclass)",
            &[],
        )
        .await
        .unwrap()
        .get("count");
    assert_eq!(installed, 2, "the namespace's event triggers");
    let version = catalog_version(&sql).await;
    put_bucket_notifications(&sql, "plain", &rules("arn:pgvs3:ojs:::q"))
        .await
        .unwrap();
    assert_eq!(catalog_version(&sql).await, version, "unchanged rules are no update");

    sql.execute(
        "INSERT INTO s3p.objects (bucket_id, key, size, etag, inline) VALUES ($1, 'k', 1, 'e', '\\x00')",
        &[&bucket.id],
    )
    .await
    .unwrap();
    let not_empty = pgvs3_catalog::drop_bucket(&sql, "plain", false).await;
    assert_eq!(kind(not_empty), ErrorKind::BucketNotEmpty);

    let master_key = pgvs3_gateway::master_key::MasterKey::from_text("layout-test");
    let sealed = pgvs3_catalog::seal_origin_secret(&sql, "cache", &master_key, "origin-secret")
        .await
        .unwrap();
    let over_ordinary = pgvs3_catalog::put_origin(&sql, &origin("plain", "http://127.0.0.1:9", &sealed)).await;
    assert_eq!(kind(over_ordinary), ErrorKind::Refused);
    let bad_endpoint = pgvs3_catalog::put_origin(&sql, &origin("cache", "ftp://nowhere", &sealed)).await;
    assert_eq!(kind(bad_endpoint), ErrorKind::InvalidSetting);
    let cache_id = pgvs3_catalog::put_origin(&sql, &origin("cache", "http://127.0.0.1:9", &sealed))
        .await
        .unwrap();
    // A cache bucket's rules see the writes made through it (functions/cache.sql).
    put_bucket_notifications(&sql, "cache", &rules("arn:pgvs3:ojs:::q"))
        .await
        .unwrap();
    let triggers: i64 = sql
        .query_one(
            "SELECT count(*) FROM pg_trigger WHERE tgname IN ('objects_event', 'versions_event')
                AND tgrelid IN ('s3w.objects'::regclass, 's3w.versions'::regclass)",
            &[],
        )
        .await
        .unwrap()
        .get("count");
    assert_eq!(triggers, 2);
    // Layout v26: an access key's seal is reused the same way, so that an unchanged put of the
    // key (an operator's resync) is no update.
    let key_seal = pgvs3_catalog::seal_access_key_secret(&sql, "sealed-key", &master_key, "key-secret")
        .await
        .unwrap();
    let sealed_key = pgvs3_catalog::AccessKey {
        id: "sealed-key",
        sealed_secret: &key_seal,
        is_root: false,
        read_only: false,
        description: "",
    };
    pgvs3_catalog::put_access_key(&sql, &sealed_key).await.unwrap();
    let version = catalog_version(&sql).await;
    let resealed = pgvs3_catalog::seal_access_key_secret(&sql, "sealed-key", &master_key, "key-secret")
        .await
        .unwrap();
    assert_eq!(resealed, key_seal);
    pgvs3_catalog::put_access_key(&sql, &sealed_key).await.unwrap();
    assert_eq!(catalog_version(&sql).await, version, "an unchanged key is no update");
    let rotated = pgvs3_catalog::seal_access_key_secret(&sql, "sealed-key", &master_key, "rotated")
        .await
        .unwrap();
    assert_eq!(master_key.open(&rotated).unwrap(), "rotated");

    // The stored seal is reused while it opens to the same secret; another secret is sealed anew.
    let reused = pgvs3_catalog::seal_origin_secret(&sql, "cache", &master_key, "origin-secret")
        .await
        .unwrap();
    assert_eq!(reused, sealed);
    let other = pgvs3_catalog::seal_origin_secret(&sql, "cache", &master_key, "rotated")
        .await
        .unwrap();
    assert_ne!(other, sealed);
    assert_eq!(master_key.open(&other).unwrap(), "rotated");

    // A body written to the cache bucket waits for its upload: dropping it is refused.
    sql.execute(
        "INSERT INTO s3w.objects (bucket_id, key, size, etag, inline) VALUES ($1, 'k', 1, 'e', '\\x00')",
        &[&cache_id],
    )
    .await
    .unwrap();
    let pending = pgvs3_catalog::drop_origin(&sql, "cache", false).await;
    assert_eq!(kind(pending), ErrorKind::PendingWriteBack);
    assert!(pgvs3_catalog::drop_origin(&sql, "cache", true).await.unwrap());
    assert!(!pgvs3_catalog::drop_origin(&sql, "cache", true).await.unwrap());
    assert!(pgvs3_catalog::drop_bucket(&sql, "plain", true).await.unwrap());
    assert!(pgvs3_catalog::delete_access_key(&sql, "owner-key").await.unwrap());

    // A catalog from before layout v11 has no pgvs3.bucket_owner.
    sql.batch_execute("DROP FUNCTION pgvs3.bucket_owner(text)")
        .await
        .unwrap();
    let outdated = pgvs3_catalog::bucket_owner(&sql, "plain").await;
    assert_eq!(kind(outdated), ErrorKind::CatalogOutdated);
}

/// The STS control API the operator and `pgvs3 admin` write through: an issuer's key set is
/// upserted and replaced (its version moves only when the set changes), a role is upserted
/// without touching an unchanged row, and deleting it ends its sessions.
#[tokio::test]
async fn the_sts_control_api_upserts_replaces_and_deletes() {
    use pgvs3_catalog::ErrorKind;
    use pgvs3_catalog::sts::{self, Trust};
    use serde_json::json;

    let url = common::fresh_database().await;
    run_migrate(&url).await;
    let sql = connect(&url).await;
    let issuer = "https://kubernetes.default.svc.cluster.local";
    let keys_version = async |sql: &tokio_postgres::Client| -> (serde_json::Value, i64) {
        let row = sql
            .query_one("SELECT jwks, version FROM pgvs3.oidc_issuer_jwks($1)", &[&issuer])
            .await
            .unwrap();
        (row.get("jwks"), row.get("version"))
    };

    let first = json!({"keys": [{"kty": "RSA", "kid": "one", "n": "AQAB", "e": "AQAB"}]});
    sts::put_oidc_issuer(&sql, issuer, &first).await.unwrap();
    assert_eq!(keys_version(&sql).await, (first.clone(), 1));
    sts::put_oidc_issuer(&sql, issuer, &first).await.unwrap();
    assert_eq!(keys_version(&sql).await.1, 1, "the same set again changes nothing");
    let rotated = json!({"keys": [{"kty": "EC", "kid": "two", "crv": "P-256", "x": "AA", "y": "AA"}]});
    sts::put_oidc_issuer(&sql, issuer, &rotated).await.unwrap();
    assert_eq!(keys_version(&sql).await, (rotated, 2), "a rotation replaces the set");
    for bad in [json!({}), json!({"keys": {}}), json!([1])] {
        assert_eq!(
            kind(sts::put_oidc_issuer(&sql, issuer, &bad).await),
            ErrorKind::Refused,
            "{bad}"
        );
    }

    let trust = Trust {
        issuer: issuer.into(),
        audience: sts::DEFAULT_AUDIENCE.into(),
        subjects: vec![sts::service_account_subject("apps", "reader")],
        service_account_uids: None,
    };
    let policy = json!({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/*"}]});
    sts::put_role(&sql, "reader", &trust, &policy, 3600).await.unwrap();
    let before = catalog_version(&sql).await;
    sts::put_role(&sql, "reader", &trust, &policy, 3600).await.unwrap();
    assert_eq!(
        catalog_version(&sql).await,
        before,
        "an unchanged role is not rewritten"
    );
    sts::put_role(&sql, "reader", &trust, &policy, 7200).await.unwrap();
    assert!(
        catalog_version(&sql).await > before,
        "a changed role reaches every gateway"
    );
    let roles = sts::list_roles(&sql).await.unwrap();
    assert_eq!(roles.len(), 1);
    assert_eq!(
        (
            roles[0].name.as_str(),
            &roles[0].trust,
            &roles[0].policy,
            roles[0].max_session_seconds
        ),
        ("reader", &trust, &policy, 7200)
    );
    let refused = sts::put_role(&sql, "reader", &trust, &json!({"Version": "2012-10-17"}), 3600).await;
    assert_eq!(kind(refused), ErrorKind::Refused);
    let refused = sts::put_role(&sql, "reader", &trust, &policy, 60).await;
    assert_eq!(kind(refused), ErrorKind::InvalidSetting);
    let refused = sts::put_role(&sql, "no spaces", &trust, &policy, 3600).await;
    assert_eq!(kind(refused), ErrorKind::InvalidSetting);

    // A session of the role, then the role deleted: the session is gone with it.
    sql.execute(
        "SELECT pgvs3.sts_open_session('ASIAAAAAAAAAAAAAAAAA', '\\x00', sha256('t'), 'reader', 'sub', 's', 900)",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(sts::list_roles(&sql).await.unwrap()[0].live_sessions, 1);
    sts::delete_role(&sql, "reader").await.unwrap();
    sts::delete_role(&sql, "reader").await.unwrap();
    assert!(sts::list_roles(&sql).await.unwrap().is_empty());
    let sessions: i64 = sql
        .query_one("SELECT count(*) FROM pgvs3.sts_sessions", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(sessions, 0, "deleting a role ends its sessions");
    assert!(sts::delete_oidc_issuer(&sql, issuer).await.unwrap());
    assert!(!sts::delete_oidc_issuer(&sql, issuer).await.unwrap());
}

/// Where an overwrite's triggers on a namespace's `objects` would drop a replaced body that a
/// noncurrent version still holds. PostgreSQL fires the triggers of one event in name order, so
/// the order is the triggers' names: `objects_keep_version` (pgvs3.keep_version) moves the
/// replaced row into `versions` before `objects_retire_body` (pgvs3.retire_body) looks there
/// for the body; the other way round, the body is retired (and the reaper deletes its chunks)
/// while the noncurrent version still points at it. Every retiring trigger of an UPDATE must
/// fire after every keeping one, whatever they are named.
async fn retired_before_kept(sql: &impl tokio_postgres::GenericClient) -> (usize, Vec<String>) {
    // tgtype: 1 FOR EACH ROW, 2 BEFORE, 16 UPDATE. `name` compares bytewise, as the firing does.
    let rows = sql
        .query(
            "SELECT n.nspname::text AS namespace, t.tgname::text AS name, t.tgfoid::regproc::text AS function,
                    (t.tgtype & 2) <> 0 AS before
               FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE c.relname = 'objects' AND NOT t.tgisinternal AND (t.tgtype & 1) <> 0 AND (t.tgtype & 16) <> 0
                AND t.tgfoid IN ('pgvs3.keep_version'::regproc, 'pgvs3.retire_body'::regproc)",
            &[],
        )
        .await
        .unwrap();
    let triggers: Vec<(String, String, bool, bool)> = rows
        .iter()
        .map(|row| {
            (
                row.get("namespace"),
                row.get("name"),
                row.get::<_, String>("function") == "pgvs3.keep_version",
                row.get("before"),
            )
        })
        .collect();
    let mut pairs = 0;
    let mut wrong = Vec::new();
    for (namespace, keep, _, keep_before) in triggers.iter().filter(|t| t.2) {
        for (_, retire, _, retire_before) in triggers.iter().filter(|t| !t.2 && &t.0 == namespace) {
            pairs += 1;
            let fires_first = (*keep_before && !*retire_before)
                || (keep_before == retire_before && keep.as_bytes() < retire.as_bytes());
            if !fires_first {
                wrong.push(format!("{namespace}.objects: {retire} fires before {keep}"));
            }
        }
    }
    (pairs, wrong)
}

#[tokio::test]
async fn a_versioned_overwrite_keeps_the_replaced_version_before_its_body_is_retired() {
    let url = common::fresh_database().await;
    run_migrate(&url).await;
    let mut sql = connect(&url).await;
    let (pairs, wrong) = retired_before_kept(&sql).await;
    assert!(
        pairs > 0,
        "no namespace has both triggers: the layout changed, check this test"
    );
    assert_eq!(wrong, Vec::<String>::new());
    // The check sees a rename that changes the order (rolled back).
    let tx = sql.transaction().await.unwrap();
    tx.batch_execute("ALTER TRIGGER objects_keep_version ON s3p.objects RENAME TO objects_version_kept")
        .await
        .unwrap();
    let (_, wrong) = retired_before_kept(&tx).await;
    assert_eq!(
        wrong,
        ["s3p.objects: objects_retire_body fires before objects_version_kept"]
    );
    tx.rollback().await.unwrap();
}

/// The numbered migrations before the one named `name` (`NNNN_name.sql`), in order, read from
/// disk: a database at the layout just before it, whatever number it is given.
fn migrations_before(name: &str) -> Vec<(i32, String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations");
    let mut files: Vec<(i32, String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let path = entry.unwrap().path();
            let stem = path.file_stem()?.to_str()?.to_string();
            let (number, name) = stem.split_once('_')?;
            let number = number.parse().ok()?;
            Some((number, name.to_string(), std::fs::read_to_string(&path).unwrap()))
        })
        .collect();
    files.sort_by_key(|(number, ..)| *number);
    let at = files
        .iter()
        .position(|(_, file, _)| file == name)
        .expect("the migration exists");
    files.truncate(at);
    files
}

/// Layout v52 keys OJS workers and rate-limit keys by tenant: rows made before it go to the
/// tenants whose jobs use them (keyed `tenant name`), keeping an operator's directives and a key's
/// limits and window there, with each tenant's active count its own; rows no job uses stay
/// `default`'s, whose names with a space take the `default name` form. A job's rate key becomes
/// its tenant's, so the trigger that gives a slot back releases that tenant's slot only.
#[tokio::test]
async fn ojs_workers_and_rate_limits_made_before_tenants_go_to_the_tenants_that_use_them() {
    let url = common::fresh_database().await;
    let sql = connect(&url).await;
    sql.batch_execute(
        "CREATE SCHEMA pgvs3;
         CREATE TABLE pgvs3.layout (version int PRIMARY KEY, name text NOT NULL,
                                    applied_at timestamptz NOT NULL DEFAULT now());",
    )
    .await
    .unwrap();
    for (version, name, migration) in migrations_before("ojs_tenant_workers_rate_limits") {
        let tx = format!(
            "BEGIN; {migration}\n; INSERT INTO pgvs3.layout (version, name) VALUES ({version}, '{name}'); COMMIT;"
        );
        sql.batch_execute(&tx).await.unwrap();
    }
    sql.batch_execute(
        "INSERT INTO ojs.workers (id, state, directive) VALUES
             ('w-acme', 'running', 'terminate'), ('w-shared', 'running', 'quiet'), ('w-idle', 'quiet', NULL),
             ('my worker', 'running', 'quiet'), ('idle worker', 'running', NULL);
         INSERT INTO ojs.rate_limits (key, concurrency, rate, rate_period_ms, active, window_start, window_count) VALUES
             ('k', 3, 10, 60000, 2, now(), 4), ('lonely', 1, NULL, NULL, 0, '-infinity', 0);
         INSERT INTO ojs.jobs (id, queue, type, state, max_attempts, envelope, run_at, visibility_ms, worker_id,
                               tenant, rate_key) VALUES
             ('j1', 'q', 't', 'active', 3, '{}', now(), 1000, 'w-acme', 'acme', 'k'),
             ('j2', 'q', 't', 'active', 3, '{}', now(), 1000, 'w-shared', 'globex', 'k'),
             ('j3', 'q', 't', 'completed', 3, '{}', now(), 1000, 'w-shared', 'acme', NULL),
             ('j4', 'q', 't', 'available', 3, '{}', now(), 1000, 'my worker', 'globex', 'k');",
    )
    .await
    .unwrap();

    run_migrate(&url).await;
    let workers: Vec<(String, String, Option<String>)> = sql
        .query(
            "SELECT id, ojs.worker_json(w) ->> 'tenant_id' AS tenant, directive FROM ojs.workers w ORDER BY id COLLATE \"C\"",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get("id"), row.get("tenant"), row.get("directive")))
        .collect();
    let worker = |id: &str, tenant: &str, directive: Option<&str>| {
        (id.to_string(), tenant.to_string(), directive.map(String::from))
    };
    assert_eq!(
        workers,
        [
            worker("acme w-acme", "acme", Some("terminate")),
            worker("acme w-shared", "acme", Some("quiet")),
            worker("default idle worker", "default", None),
            worker("globex my worker", "globex", Some("quiet")),
            worker("globex w-shared", "globex", Some("quiet")),
            worker("w-idle", "default", None),
        ]
    );
    let limits = async || -> Vec<(String, i32, i32, i32)> {
        sql.query(
            "SELECT key, coalesce(concurrency, 0) AS concurrency, active, window_count FROM ojs.rate_limits
             ORDER BY key COLLATE \"C\"",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| {
            (
                row.get("key"),
                row.get("concurrency"),
                row.get("active"),
                row.get("window_count"),
            )
        })
        .collect()
    };
    let limit =
        |key: &str, active: i32, window: i32| (key.to_string(), if key == "lonely" { 1 } else { 3 }, active, window);
    // Each tenant's window starts as full as the shared one was.
    assert_eq!(
        limits().await,
        [limit("acme k", 1, 4), limit("globex k", 1, 4), limit("lonely", 0, 0)]
    );
    let keys: Vec<String> = sql
        .query(
            "SELECT rate_key FROM ojs.jobs WHERE rate_key IS NOT NULL ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get("rate_key"))
        .collect();
    assert_eq!(keys, ["acme k", "globex k", "globex k"]);

    sql.execute("UPDATE ojs.jobs SET state = 'completed' WHERE id = 'j2'", &[])
        .await
        .unwrap();
    assert_eq!(
        limits().await,
        [limit("acme k", 1, 4), limit("globex k", 0, 4), limit("lonely", 0, 0)],
        "globex's finished job gave back globex's slot"
    );
}

/// Layout v58 gives each OJS workflow a tenant: one made before it goes to the tenant of its jobs,
/// or, when its members are all nested workflows, of theirs (up to the outermost of four
/// levels); one whose jobs are all gone is `default`'s.
#[tokio::test]
async fn ojs_workflows_made_before_tenants_go_to_the_tenant_of_their_jobs() {
    let url = common::fresh_database().await;
    let sql = connect(&url).await;
    sql.batch_execute(
        "CREATE SCHEMA pgvs3;
         CREATE TABLE pgvs3.layout (version int PRIMARY KEY, name text NOT NULL,
                                    applied_at timestamptz NOT NULL DEFAULT now());",
    )
    .await
    .unwrap();
    for (version, name, migration) in migrations_before("ojs_tenant_workflows_and_depth") {
        let tx = format!(
            "BEGIN; {migration}\n; INSERT INTO pgvs3.layout (version, name) VALUES ({version}, '{name}'); COMMIT;"
        );
        sql.batch_execute(&tx).await.unwrap();
    }
    sql.batch_execute(
        "INSERT INTO ojs.workflows (id, type, state, jobs_total, parent_id, parent_step) VALUES
             ('acme-group', 'group', 'running', 1, NULL, NULL),
             ('outer', 'group', 'running', 1, NULL, NULL),
             ('middle', 'chain', 'running', 1, 'outer', 0),
             ('inner', 'group', 'running', 1, 'middle', 0),
             ('reaped', 'chain', 'completed', 1, NULL, NULL),
             ('plain', 'group', 'running', 1, NULL, NULL);
         INSERT INTO ojs.jobs (id, queue, type, state, max_attempts, envelope, run_at, visibility_ms,
                               workflow_id, workflow_step, tenant) VALUES
             ('j1', 'q', 't', 'available', 3, '{}', now(), 1000, 'acme-group', 0, 'acme'),
             ('j2', 'q', 't', 'available', 3, '{}', now(), 1000, 'inner', 0, 'globex'),
             ('j3', 'q', 't', 'available', 3, '{}', now(), 1000, 'plain', 0, 'default');",
    )
    .await
    .unwrap();

    run_migrate(&url).await;
    let tenants: Vec<(String, String)> = sql
        .query("SELECT id, tenant FROM ojs.workflows ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get("id"), row.get("tenant")))
        .collect();
    assert_eq!(
        tenants,
        [
            ("acme-group", "acme"),
            ("inner", "globex"),
            ("middle", "globex"),
            ("outer", "globex"),
            ("plain", "default"),
            ("reaped", "default"),
        ]
        .map(|(id, tenant)| (id.to_string(), tenant.to_string()))
    );
}

/// Gateways of layout v84 write a script run's hashes, sorted sets and sets one key a call;
/// through a rolling upgrade those calls still apply (layout v85 writes every key of a round
/// trip in one call, and the one-key forms go through it).
#[tokio::test]
async fn the_one_key_element_writes_of_layout_v84_gateways_still_apply() {
    let url = common::fresh_database().await;
    run_migrate(&url).await;
    let sql = connect(&url).await;
    let bucket = pgvs3_catalog::ensure_bucket(&sql, "v84", None, pgvs3_catalog::ORDINARY_NAMESPACE)
        .await
        .unwrap()
        .id;
    let applied = |statement: &'static str| {
        let sql = &sql;
        async move {
            let row = sql.query_one(statement, &[&bucket]).await.unwrap();
            row.get::<_, bool>("applied")
        }
    };
    let version = || async {
        sql.query_one(
            "SELECT version FROM pgvs3.resp_keys WHERE bucket_id = $1 AND key = 'h'",
            &[&bucket],
        )
        .await
        .unwrap()
        .get::<_, i64>("version")
    };
    // A hash made with a field, then the field changed from the value found.
    assert!(
        applied(
            "SELECT pgvs3.resp_hash_apply($1, 'h', false, false, false, 1, 1, '{}', '{}', '{}', '{}', '{}',
                                          '{f}', '{v}') AS applied"
        )
        .await
    );
    let made = version().await;
    assert!(
        applied(
            "SELECT pgvs3.resp_hash_apply($1, 'h', true, false, true, 1, 1, '{}', '{}', '{f}', '{v}', '{w}',
                                          '{}', '{}') AS applied"
        )
        .await
    );
    let value: Vec<u8> = sql
        .query_one(
            "SELECT value FROM pgvs3.resp_hash WHERE bucket_id = $1 AND key = 'h' AND field = 'f'",
            &[&bucket],
        )
        .await
        .unwrap()
        .get("value");
    assert_eq!(value, b"w");
    assert!(version().await > made, "a changed hash's version moves");
    // A field not as found: nothing written, the call says so.
    assert!(
        !applied(
            "SELECT pgvs3.resp_hash_apply($1, 'h', true, false, true, 1, 1, '{}', '{}', '{f}', '{v}', '{x}',
                                          '{}', '{}') AS applied"
        )
        .await
    );
    // A sorted set and a set made; a member that is no integer makes the set large.
    assert!(
        applied(
            "SELECT pgvs3.resp_zset_apply($1, 'z', false, false, false, 1, 1, '{}', '{}', '{}', '{}', '{}',
                                          '{m}', '{1.5}') AS applied"
        )
        .await
    );
    assert!(applied("SELECT pgvs3.resp_set_apply($1, 's', false, false, false, 1, 1, '{}', '{x}') AS applied").await);
    let rows = sql
        .query(
            "SELECT key, type::text AS type, large FROM pgvs3.resp_keys WHERE bucket_id = $1 ORDER BY key",
            &[&bucket],
        )
        .await
        .unwrap();
    let keys: Vec<(String, String, Option<bool>)> = rows
        .iter()
        .map(|row| (row.get("key"), row.get("type"), row.get("large")))
        .collect();
    assert_eq!(
        keys,
        [
            ("h".to_owned(), "h".to_owned(), Some(false)),
            ("s".to_owned(), "s".to_owned(), Some(true)),
            ("z".to_owned(), "z".to_owned(), Some(false)),
        ]
    );
}
