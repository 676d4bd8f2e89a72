//! Numbered SQL migrations that build the storage layout, and the layout version they record.

use anyhow::Context;
use deadpool_postgres::Pool;

/// Layout version this gateway reads and writes.
pub const LAYOUT_VERSION: i32 = 10;

const MIGRATIONS: &[(i32, &str, &str)] = &[
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

/// Any fixed number works; it only has to be the same for every gateway of one database.
const MIGRATION_LOCK: i64 = 0x7067_7673_335f_6d67; // "pgvs3_mg"

/// Brings the layout to [`LAYOUT_VERSION`]. Idempotent, and safe when many gateways start at
/// once: they serialize on an advisory lock, and each migration commits with its version row.
pub async fn migrate(pool: &Pool) -> anyhow::Result<i32> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS pgvs3;
         CREATE TABLE IF NOT EXISTS pgvs3.layout (
             version    int PRIMARY KEY,
             name       text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         );",
    )
    .await?;
    let current: i32 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM pgvs3.layout", &[])
        .await?
        .get(0);
    anyhow::ensure!(
        current <= LAYOUT_VERSION,
        "the database has layout v{current}, newer than this gateway's v{LAYOUT_VERSION}: upgrade the gateway"
    );
    for (version, name, sql) in MIGRATIONS.iter().filter(|(version, ..)| *version > current) {
        tx.batch_execute(sql)
            .await
            .with_context(|| format!("migration {version:04} ({name})"))?;
        tx.execute(
            "INSERT INTO pgvs3.layout (version, name) VALUES ($1, $2)",
            &[version, name],
        )
        .await?;
        tracing::info!(version, name, "applied migration");
    }
    tx.commit().await?;
    Ok(LAYOUT_VERSION)
}

/// The layout version recorded in the database (0 when none).
pub async fn current_version(pool: &Pool) -> anyhow::Result<i32> {
    let client = pool.get().await?;
    let exists: bool = client
        .query_one("SELECT to_regclass('pgvs3.layout') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        return Ok(0);
    }
    Ok(client
        .query_one("SELECT coalesce(max(version), 0) FROM pgvs3.layout", &[])
        .await?
        .get(0))
}
