//! Numbered SQL migrations that build the storage layout, the layout version they record, and
//! the function files (`migrations/functions/*.sql`) re-applied after them.
//!
//! Numbered migrations are history: each runs once, in order, and is never edited. The current
//! definition of every function lives in one function file per area, written `CREATE OR
//! REPLACE`, and is applied after the migrations in the same transaction, under the same
//! advisory lock, when the file's digest differs from the one recorded in
//! `pgvs3.function_files`. Many gateways starting at once therefore apply a file at most once,
//! and a gateway whose files are unchanged applies nothing.
//!
//! Rolling upgrades: a gateway only ever applies its files to a database at its own layout
//! version (it migrates an older one first, and refuses a newer one), and a change to a function
//! file comes with a numbered migration that bumps [`LAYOUT_VERSION`] (the test
//! `function_files_are_pinned_to_the_layout_version` enforces it). So an older gateway never
//! overwrites newer functions. As with any migration, a function must stay callable the way the
//! gateways still running the previous layout call it until they are replaced.

use anyhow::Context;
use deadpool_postgres::Pool;
use sha2::{Digest, Sha256};

/// Layout version this gateway reads and writes.
pub const LAYOUT_VERSION: i32 = 29;

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
    (
        11,
        "function_files",
        include_str!("../../migrations/0011_function_files.sql"),
    ),
    (12, "versioning", include_str!("../../migrations/0012_versioning.sql")),
    (
        13,
        "object_lock_lifecycle",
        include_str!("../../migrations/0013_object_lock_lifecycle.sql"),
    ),
    (14, "resp_types", include_str!("../../migrations/0014_resp_types.sql")),
    (
        15,
        "bucket_access",
        include_str!("../../migrations/0015_bucket_access.sql"),
    ),
    (
        16,
        "encryption_key_policies",
        include_str!("../../migrations/0016_encryption_key_policies.sql"),
    ),
    (
        17,
        "events_outbox",
        include_str!("../../migrations/0017_events_outbox.sql"),
    ),
    (
        18,
        "resp_typed_pubsub",
        include_str!("../../migrations/0018_resp_typed_pubsub.sql"),
    ),
    (19, "acls", include_str!("../../migrations/0019_acls.sql")),
    (
        20,
        "events_pubsub",
        include_str!("../../migrations/0020_events_pubsub.sql"),
    ),
    (
        21,
        "control_api_notifications_key_policies",
        include_str!("../../migrations/0021_control_api_notifications_key_policies.sql"),
    ),
    (
        22,
        "resp_streams",
        include_str!("../../migrations/0022_resp_streams.sql"),
    ),
    (
        23,
        "cache_bucket_events",
        include_str!("../../migrations/0023_cache_bucket_events.sql"),
    ),
    (
        24,
        "versions_in_quotas_and_pages",
        include_str!("../../migrations/0024_versions_in_quotas_and_pages.sql"),
    ),
    (25, "ojs_tenants", include_str!("../../migrations/0025_ojs_tenants.sql")),
    (
        26,
        "access_key_secret",
        include_str!("../../migrations/0026_access_key_secret.sql"),
    ),
    (
        27,
        "resp_stream_groups",
        include_str!("../../migrations/0027_resp_stream_groups.sql"),
    ),
    (
        28,
        "resp_stream_wakeups",
        include_str!("../../migrations/0028_resp_stream_wakeups.sql"),
    ),
    (
        29,
        "resp_linear_hset",
        include_str!("../../migrations/0029_resp_linear_hset.sql"),
    ),
];

/// The function files, in the order they are applied. Every function they define already exists
/// once the migrations have run (or is new), so the order only matters for new functions that
/// call each other.
const FUNCTION_FILES: &[(&str, &str)] = &[
    ("objects", include_str!("../../migrations/functions/objects.sql")),
    ("catalog", include_str!("../../migrations/functions/catalog.sql")),
    ("quotas", include_str!("../../migrations/functions/quotas.sql")),
    ("cache", include_str!("../../migrations/functions/cache.sql")),
    ("ojs", include_str!("../../migrations/functions/ojs.sql")),
    ("resp_keys", include_str!("../../migrations/functions/resp_keys.sql")),
    ("resp_hash", include_str!("../../migrations/functions/resp_hash.sql")),
    ("resp_set", include_str!("../../migrations/functions/resp_set.sql")),
    ("resp_zset", include_str!("../../migrations/functions/resp_zset.sql")),
    ("resp_list", include_str!("../../migrations/functions/resp_list.sql")),
    (
        "resp_stream",
        include_str!("../../migrations/functions/resp_stream.sql"),
    ),
    (
        "resp_stream_group",
        include_str!("../../migrations/functions/resp_stream_group.sql"),
    ),
    // Before events.sql, whose pgvs3.publish_object_event calls pgvs3.resp_notify.
    (
        "resp_pubsub",
        include_str!("../../migrations/functions/resp_pubsub.sql"),
    ),
    ("events", include_str!("../../migrations/functions/events.sql")),
];

fn digest(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

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
    // The database is at this gateway's layout version now (a newer one was refused above).
    let recorded: std::collections::HashMap<String, String> = tx
        .query("SELECT name, digest FROM pgvs3.function_files", &[])
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    for (name, sql) in FUNCTION_FILES {
        let digest = digest(sql);
        if recorded.get(*name) == Some(&digest) {
            continue;
        }
        tx.batch_execute(sql)
            .await
            .with_context(|| format!("function file functions/{name}.sql"))?;
        tx.execute(
            "INSERT INTO pgvs3.function_files (name, digest) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE SET digest = EXCLUDED.digest, applied_at = now()",
            &[name, &digest],
        )
        .await?;
        tracing::info!(file = name, "applied function file");
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The digest of all function files as of [`LAYOUT_VERSION`]. Two gateways of one layout
    /// version must apply the same functions, or each would overwrite the other's at startup:
    /// when this test fails, add a numbered migration (it may hold only a comment saying which
    /// functions changed), bump `LAYOUT_VERSION`, and update both constants here.
    const PINNED: (i32, &str) = (29, "093df7a2cf45a6cd7b3bf1cdb1aa55755063140df7a01385bf52926ba85d1c09");

    #[test]
    fn function_files_are_pinned_to_the_layout_version() {
        let all: String = FUNCTION_FILES
            .iter()
            .map(|(name, sql)| format!("{name}\n{sql}"))
            .collect();
        assert_eq!(
            (LAYOUT_VERSION, digest(&all).as_str()),
            PINNED,
            "the function files changed: add a numbered migration and bump LAYOUT_VERSION (see PINNED)"
        );
    }

    #[test]
    fn migrations_are_numbered_in_order() {
        for (index, (version, ..)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*version as usize, index + 1);
        }
        assert_eq!(MIGRATIONS.last().map(|(version, ..)| *version), Some(LAYOUT_VERSION));
    }
}
