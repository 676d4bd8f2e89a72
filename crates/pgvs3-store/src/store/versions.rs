//! S3 versioning on the layout of v12 (migrations/0012_versioning.sql): the current version of
//! a key is its row in `<ns>.objects` (its `version_id`, NULL for the null version), the
//! noncurrent versions and delete markers are rows of `<ns>.versions`. Writes need nothing from
//! here: the object row's upsert takes the version columns, and a trigger keeps the version it
//! replaces (so concurrent writers each keep exactly the row they replaced). This module reads
//! versions, writes delete markers, deletes versions (retiring their bodies explicitly, since
//! deleting a version row retires nothing by itself) and lists them.

use std::time::SystemTime;

use bytes::Bytes;
use tokio_postgres::types::Json;

use super::bodies::{locate, stored_body};
use super::conditions::DeleteCondition;
use super::error::retry_conflicts;
use super::listing::{ListRequest, Window, prefix_successor};
use super::objects::{ObjectHead, ObjectMeta, ObjectRead, ReadOptions, check_delete_condition, check_key};
use super::{BucketInfo, Store, StoreError, StoreResult};

/// A bucket's versioning state, once it was ever enabled (S3 never returns to "unversioned").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versioning {
    Enabled,
    Suspended,
}

impl Versioning {
    pub fn as_str(self) -> &'static str {
        match self {
            Versioning::Enabled => "Enabled",
            Versioning::Suspended => "Suspended",
        }
    }

    pub fn parse(text: &str) -> anyhow::Result<Versioning> {
        match text {
            "Enabled" => Ok(Versioning::Enabled),
            "Suspended" => Ok(Versioning::Suspended),
            other => anyhow::bail!("unknown versioning state {other:?}"),
        }
    }
}

/// The locks every writer of a key's versions holds until it commits, taken before it draws a
/// version number, so that a key's versions are numbered in the order they commit. A write that
/// drew its number before a concurrent delete marker drew its own, and committed after it, would
/// be current with the lower number: the next delete of a newer version would then promote the
/// marker over it (the key reads as deleted, as a linearizability history caught). They are RESP's
/// key locks (store/kv.rs) in RESP's order, the keyspace's shared and then the key's, so S3 and
/// RESP writers of one key take turns, and a RESP batch that holds its keyspace exclusively
/// excludes them too. `$1` the bucket id (RESP's lock takes it as int4), `$2` the key.
///
/// Before both, the bucket's write lock shared (pgvs3.bucket_held's, which a write then takes
/// again): DeleteBucket takes the write lock and then the keyspace lock, both exclusively, so a
/// writer that held the keyspace and only then asked for the write lock (bucket_held, in the
/// row's statement) could wait for a DeleteBucket that waits for it: a deadlock. The nesting
/// orders them (each subquery's row is made before the one around it).
pub(super) const KEY_LOCKS: &str = "SELECT pg_advisory_xact_lock(($1::int8)::int4, hashtext($2::text))
                                      FROM (SELECT pg_advisory_xact_lock_shared(-($1::int8))
                                              FROM (SELECT pg_advisory_xact_lock_shared(-1, ($1::int8)::int4)) bucket) keyspace";

/// The version id of a sequence number: 16 hex digits, so ids sort like the versions they
/// name and a listing's version-id marker says where it stands.
const VERSION_ID: &str = "lpad(to_hex(seq), 16, '0')";

/// Whether `text` is a version id this layout can have issued (or `null`).
pub fn valid_version_id(text: &str) -> bool {
    text == "null" || text.len() == 16 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What a delete did in a versioned bucket.
#[derive(Debug, Clone, Default)]
pub struct DeleteOutcome {
    /// The version the delete created (a delete marker) or removed.
    pub version_id: Option<String>,
    /// Whether that version is a delete marker.
    pub delete_marker: bool,
}

/// One entry of ListObjectVersions.
#[derive(Debug, Clone)]
pub struct VersionEntry {
    pub key: String,
    pub version_id: String,
    pub is_latest: bool,
    pub delete_marker: bool,
    pub size: u64,
    pub etag: String,
    pub last_modified: SystemTime,
}

#[derive(Debug, Default)]
pub struct VersionsPage {
    pub entries: Vec<VersionEntry>,
    pub common_prefixes: Vec<String>,
    /// Where the next page starts (key-marker, version-id-marker), when there is one.
    pub next: Option<(String, Option<String>)>,
}

/// ListObjectVersions' request.
pub struct VersionsRequest {
    pub list: ListRequest,
    pub version_id_marker: Option<String>,
}

/// The version SQL of one namespace.
#[derive(Debug)]
pub(super) struct VersionSql {
    lock_key: String,
    read: String,
    latest_noncurrent: String,
    archive_current: String,
    marker: String,
    committed_versioning: String,
    drop_null: String,
    delete_current: String,
    delete_noncurrent: String,
    promote: String,
    page: String,
    /// `page` under `$6` too: the end of the listed prefix.
    page_below: String,
    null_seq: String,
    current_meta: String,
    noncurrent_meta: String,
    patch_current: String,
    patch_noncurrent: String,
}

impl VersionSql {
    pub(super) fn new(ns: &str) -> VersionSql {
        VersionSql {
            // Taken first by every transaction that deletes one of the key's versions or writes a
            // delete marker: without it, a delete of the newest version promotes the next one from
            // `versions` into `objects` while a concurrent delete of that very version looks for
            // it in one table, then the other, and finds it in neither (or the two deadlock).
            lock_key: KEY_LOCKS.to_owned(),
            // Both tables in one statement, so one snapshot: a read that found another version
            // current must still find this one when a concurrent delete of the current version
            // promotes it from `versions` into `objects` (looked up in `versions` by a second
            // statement, it was in neither).
            read: format!(
                "SELECT size, etag, last_modified, meta, inline, body_id, is_delete_marker
                   FROM {ns}.versions WHERE bucket_id = $1 AND key = $2 AND version_id = $3
                 UNION ALL
                 SELECT size, etag, last_modified, meta, inline, body_id, false
                   FROM {ns}.objects WHERE bucket_id = $1 AND key = $2 AND coalesce(version_id, 'null') = $3
                    AND (expires_at IS NULL OR expires_at > now())
                 LIMIT 1"
            ),
            latest_noncurrent: format!(
                "SELECT version_id, is_delete_marker FROM {ns}.versions WHERE bucket_id = $1 AND key = $2
                  ORDER BY coalesce(version_seq, -1) DESC LIMIT 1"
            ),
            archive_current: archive_current_sql(ns),
            // A delete marker: in an Enabled bucket with a new id, in a Suspended one as `null`.
            marker: format!(
                "INSERT INTO {ns}.versions (bucket_id, key, version_id, version_seq, is_delete_marker, size, etag, last_modified)
                 SELECT $1, $2, CASE WHEN $3 THEN {VERSION_ID} ELSE 'null' END, seq, true, 0, '', clock_timestamp()
                   FROM (SELECT nextval('{ns}.version_seqs') AS seq) s
                 RETURNING version_id"
            ),
            // The bucket's versioning as committed, not as this gateway's catalog has it (a
            // Suspended bucket's delete destroys null versions an Enabled one keeps), held until
            // the delete commits: a change of the state waits for it.
            committed_versioning: "SELECT versioning FROM pgvs3.buckets WHERE id = $1 FOR SHARE".to_owned(),
            // Never a version object lock protects (should one be found in a Suspended bucket).
            drop_null: format!(
                "WITH dropped AS (DELETE FROM {ns}.versions WHERE bucket_id = $1 AND key = $2 AND version_id = 'null'
                                    AND NOT pgvs3.object_locked(meta, false)
                                  RETURNING body_id)
                 INSERT INTO {ns}.retired_bodies (body_id) SELECT body_id FROM dropped WHERE body_id IS NOT NULL
                 ON CONFLICT DO NOTHING"
            ),
            // Removing a version for good: never one object lock protects (`$4`: the request
            // bypasses governance retention).
            delete_current: format!(
                "DELETE FROM {ns}.objects WHERE bucket_id = $1 AND key = $2 AND version_id IS NOT DISTINCT FROM $3
                    AND NOT pgvs3.object_locked(meta, $4)"
            ),
            delete_noncurrent: delete_noncurrent_sql(ns),
            promote: promote_sql(ns),
            page: page_sql(ns, ""),
            page_below: page_sql(ns, "AND key < $6"),
            // One version's metadata, locked for a change (`$3` NULL: the current version).
            // With the database's clock (`now`), which retention is judged by, as
            // `pgvs3.object_locked` judges it: not the gateway's.
            current_meta: format!(
                "SELECT meta, now() AS now FROM {ns}.objects WHERE bucket_id = $1 AND key = $2
                    AND ($3::text IS NULL OR coalesce(version_id, 'null') = $3)
                    AND (expires_at IS NULL OR expires_at > now())
                  FOR UPDATE"
            ),
            noncurrent_meta: format!(
                "SELECT meta, is_delete_marker, now() AS now FROM {ns}.versions WHERE bucket_id = $1 AND key = $2 AND version_id = $3
                  FOR UPDATE"
            ),
            // `$4` the meta key replaced, `$5` its new value (`{{}}` removes it).
            patch_current: format!(
                "UPDATE {ns}.objects SET meta = (meta - $4::text) || $5::jsonb
                  WHERE bucket_id = $1 AND key = $2 AND ($3::text IS NULL OR coalesce(version_id, 'null') = $3)"
            ),
            patch_noncurrent: format!(
                "UPDATE {ns}.versions SET meta = (meta - $4::text) || $5::jsonb
                  WHERE bucket_id = $1 AND key = $2 AND version_id = $3"
            ),
            null_seq: format!(
                "SELECT coalesce(version_seq, -1) AS seq FROM {ns}.objects WHERE bucket_id = $1 AND key = $2 AND version_id IS NULL
                 UNION ALL
                 SELECT coalesce(version_seq, -1) FROM {ns}.versions WHERE bucket_id = $1 AND key = $2 AND version_id = 'null'
                 LIMIT 1"
            ),
        }
    }
}

/// The current version becomes noncurrent; its body moves with it, and retire_body
/// (an AFTER trigger, which sees this statement's insert) keeps it.
fn archive_current_sql(ns: &str) -> String {
    format!(
        "WITH gone AS (DELETE FROM {ns}.objects WHERE bucket_id = $1 AND key = $2
                        AND ($3 OR version_id IS NOT NULL) RETURNING *)
         {archive}",
        archive = archive_sql(ns),
    )
}

/// The rows `gone` deleted from `objects`, kept as noncurrent versions.
fn archive_sql(ns: &str) -> String {
    format!(
        "INSERT INTO {ns}.versions (bucket_id, key, version_id, version_seq, size, etag, last_modified, meta, inline, body_id)
         SELECT bucket_id, key, coalesce(version_id, 'null'), version_seq, size, etag, last_modified, meta, inline, body_id
           FROM gone"
    )
}

fn delete_noncurrent_sql(ns: &str) -> String {
    format!(
        "WITH dropped AS (DELETE FROM {ns}.versions WHERE bucket_id = $1 AND key = $2 AND version_id = $3
                            AND NOT pgvs3.object_locked(meta, $4)
                          RETURNING body_id, is_delete_marker),
              retired AS (INSERT INTO {ns}.retired_bodies (body_id)
                          SELECT body_id FROM dropped WHERE body_id IS NOT NULL ON CONFLICT DO NOTHING)
         SELECT is_delete_marker FROM dropped"
    )
}

/// With no current version left, the newest noncurrent one becomes current, unless it
/// is a delete marker (the key then reads as deleted). A current version a concurrent
/// PUT created meanwhile stays current (the conflict waits for it), and the noncurrent
/// one stays where it is; the row is locked so a concurrent removal (lifecycle) either
/// completes first or waits.
fn promote_sql(ns: &str) -> String {
    format!(
        "WITH top AS (SELECT * FROM {ns}.versions WHERE bucket_id = $1 AND key = $2
                       AND NOT EXISTS (SELECT 1 FROM {ns}.objects WHERE bucket_id = $1 AND key = $2)
                     ORDER BY coalesce(version_seq, -1) DESC LIMIT 1 FOR UPDATE),
              placed AS (INSERT INTO {ns}.objects (bucket_id, key, size, etag, last_modified, meta, inline,
                                                   body_id, version_id, version_seq)
                         SELECT bucket_id, key, size, etag, last_modified, meta, inline, body_id,
                                nullif(version_id, 'null'), version_seq
                           FROM top WHERE NOT is_delete_marker
                         ON CONFLICT (bucket_id, key) DO NOTHING
                         RETURNING coalesce(version_id, 'null') AS version_id)
         DELETE FROM {ns}.versions v USING placed
          WHERE v.bucket_id = $1 AND v.key = $2 AND v.version_id = placed.version_id"
    )
}

/// Versions in listing order (key, newest first) from `$2` (the key marker): that key's versions
/// placed below `$4` (the version marker's place), then later keys, all at or above `$3` (the
/// listed prefix) and, in the `below` form, under `$6` (the prefix's end). Each of the four
/// branches walks its index in the listing's order and stops at `$5` rows, so a page costs at
/// most four windows of rows whatever lies before or after it (one `OR` of the two conditions
/// over both tables sorted every version from the marker on, a key's million versions too).
fn page_sql(ns: &str, below: &str) -> String {
    let object = "key, coalesce(version_id, 'null') AS version_id, coalesce(version_seq, -1) AS seq,
                  false AS is_delete_marker, size, etag, last_modified, true AS current";
    let version = "key, version_id, coalesce(version_seq, -1) AS seq,
                   is_delete_marker, size, etag, last_modified, false AS current";
    let live = "(expires_at IS NULL OR expires_at > now())";
    format!(
        "SELECT key, version_id, seq, is_delete_marker, size, etag, last_modified, current FROM (
             (SELECT {object} FROM {ns}.objects
               WHERE bucket_id = $1 AND key = $2 AND key >= $3 {below} AND coalesce(version_seq, -1) < $4 AND {live})
             UNION ALL
             (SELECT {version} FROM {ns}.versions
               WHERE bucket_id = $1 AND key = $2 AND key >= $3 {below} AND coalesce(version_seq, -1) < $4
               ORDER BY coalesce(version_seq, -1) DESC LIMIT $5)
             UNION ALL
             (SELECT {object} FROM {ns}.objects
               WHERE bucket_id = $1 AND key > $2 AND key >= $3 {below} AND {live}
               ORDER BY key LIMIT $5)
             UNION ALL
             (SELECT {version} FROM {ns}.versions
               WHERE bucket_id = $1 AND key > $2 AND key >= $3 {below}
               ORDER BY key, coalesce(version_seq, -1) DESC LIMIT $5)) v
          ORDER BY key, seq DESC LIMIT $5"
    )
}

/// Where the next page query of a version listing starts: versions of key `from` whose place
/// is below `below`, then later keys; `latest_seen` is the key whose latest version is listed.
struct VersionsFrom {
    from: String,
    below: i64,
    latest_seen: Option<String>,
}

/// A page row as the entry of `key`. A key's first entry is its latest version: its current
/// one, or (none being current) the newest delete marker; `latest_seen` is the key whose first
/// entry came last.
fn version_entry(row: &tokio_postgres::Row, key: String, latest_seen: &mut Option<String>) -> VersionEntry {
    let current: bool = row.get("current");
    let is_latest = latest_seen.as_deref() != Some(key.as_str());
    *latest_seen = Some(key.clone());
    VersionEntry {
        version_id: row.get("version_id"),
        delete_marker: row.get("is_delete_marker"),
        size: row.get::<_, i64>("size") as u64,
        etag: row.get("etag"),
        last_modified: row.get("last_modified"),
        is_latest: is_latest && (current || row.get::<_, bool>("is_delete_marker")),
        key,
    }
}

/// The most rows one page query fetches.
const PAGE_ROWS: i64 = 1001;

impl Store {
    /// Sets a bucket's versioning state.
    pub(crate) async fn set_versioning(&self, bucket: &BucketInfo, state: Versioning) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // The bucket's RESP keyspace lock, exclusively (store/kv.rs): the change waits for every
        // RESP write batch under way, which judged TTLs by the versioning its load read, and
        // those after it wait for the change. So a batch's judgement holds until its commit,
        // and the expiries cleared below include every TTL set while the bucket was unversioned.
        tx.execute("SELECT pg_advisory_xact_lock(-$1::int8)", &[&bucket.id])
            .await?;
        let updated = tx
            .execute(
                "UPDATE pgvs3.buckets SET versioning = $2 WHERE id = $1",
                &[&bucket.id, &state.as_str()],
            )
            .await
            .map_err(|err| {
                match err.code() {
                // object_lock_keeps_versioning (layout v13).
                Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION) => StoreError::InvalidBucketState(
                    "An Object Lock configuration is present on this bucket, so the versioning state cannot be changed."
                        .into(),
                ),
                _ => StoreError::from(err),
            }
            })?;
        if updated == 0 {
            self.catalog.forget_bucket(&bucket.name);
            return Err(StoreError::NoSuchBucket);
        }
        // A version never expires (the reaper would delete it for good, object lock or not): the
        // keys a RESP TTL (set while the bucket was unversioned) gave one keep it no longer, and
        // those already expired go now, as the reaper would have deleted them.
        let ns = &bucket.namespace;
        tx.execute(
            &format!(
                "WITH gone AS (DELETE FROM \"{ns}\".objects WHERE bucket_id = $1 AND expires_at <= now())
                 UPDATE \"{ns}\".objects SET expires_at = NULL WHERE bucket_id = $1 AND expires_at > now()"
            ),
            &[&bucket.id],
        )
        .await?;
        tx.commit().await?;
        // Reloaded now, not at the next NOTIFY or poll: this gateway's next request (often the
        // client's GetBucketVersioning) sees the change, and a reload of an older snapshot
        // still in flight cannot put the old state back (the catalog keeps the newest).
        self.catalog
            .refresh()
            .await
            .map_err(|err| StoreError::Unavailable(err.to_string()))?;
        Ok(())
    }

    /// A read of version `version_id` that was not the current one when the read looked: its
    /// head and body (or the span `options` select), wherever it is now.
    pub(super) async fn read_noncurrent(
        &self,
        bucket: &BucketInfo,
        key: &str,
        version_id: &str,
        options: &ReadOptions,
        with_body: bool,
    ) -> StoreResult<ObjectRead> {
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.versions.read).await?;
        let row = client
            .query_opt(&statement, &[&bucket.id, &key, &version_id])
            .await?
            .ok_or(StoreError::NoSuchVersion)?;
        if row.get::<_, bool>("is_delete_marker") {
            return Err(StoreError::DeleteMarker {
                version_id: version_id.to_owned(),
                allowed: false,
                last_modified: row.get("last_modified"),
            });
        }
        let head = ObjectHead {
            version_id: Some(version_id.to_owned()),
            ..ObjectHead::from_row(&row)
        };
        let body_id: Option<i64> = row.get("body_id");
        let multipart = head.meta.parts.is_some();
        let (head, span, partial) = locate(&client, &bucket.sql, head, body_id, options).await?;
        let key = self.object_key(&head, options)?;
        let inline: Option<Vec<u8>> = row.get("inline");
        let size = head.size;
        let body = stored_body(
            self,
            client,
            &bucket.sql,
            inline.map(Bytes::from),
            body_id,
            size,
            multipart,
            span,
            with_body,
            key,
        )
        .await?;
        Ok(ObjectRead {
            head,
            span,
            partial,
            body,
        })
    }

    /// Why a key without a current version reads as missing in a versioned bucket: a delete
    /// marker as its latest version (S3 names it in the 404), or nothing.
    pub(super) async fn missing_key(&self, bucket: &BucketInfo, key: &str) -> StoreError {
        let latest = async {
            let client = self.client().await?;
            let statement = client.prepare_cached(&bucket.sql.versions.latest_noncurrent).await?;
            StoreResult::Ok(client.query_opt(&statement, &[&bucket.id, &key]).await?)
        };
        match latest.await {
            Ok(Some(row)) if row.get::<_, bool>("is_delete_marker") => StoreError::DeleteMarker {
                version_id: row.get("version_id"),
                allowed: true,
                last_modified: None,
            },
            Ok(_) => StoreError::NoSuchKey,
            Err(err) => err,
        }
    }

    /// DELETE without a version id in a versioned bucket, if `condition` holds on the current
    /// version: the current version becomes noncurrent behind a new delete marker (Enabled); in
    /// a Suspended bucket a null current version and any noncurrent null version go, and the
    /// marker is the null version. Which of the two is the bucket's state as committed.
    pub(crate) async fn delete_versioned(
        &self,
        bucket: &BucketInfo,
        key: &str,
        condition: &DeleteCondition,
    ) -> StoreResult<DeleteOutcome> {
        check_key(key)?;
        retry_conflicts(|| self.write_delete_marker(bucket, key, condition)).await
    }

    async fn write_delete_marker(
        &self,
        bucket: &BucketInfo,
        key: &str,
        condition: &DeleteCondition,
    ) -> StoreResult<DeleteOutcome> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(&bucket.sql.versions.lock_key, &[&bucket.id, &key]).await?;
        if !check_delete_condition(&tx, bucket, key, condition).await? {
            return Ok(DeleteOutcome {
                version_id: None,
                delete_marker: false,
            });
        }
        let version_id = self.mark_deleted(&tx, bucket, key).await?;
        tx.commit().await?;
        Ok(DeleteOutcome {
            version_id: Some(version_id),
            delete_marker: true,
        })
    }

    /// The delete marker of `key` in `tx`, which holds the key's locks ([`KEY_LOCKS`]), as the
    /// bucket's committed versioning state makes it; answers its version id.
    pub(super) async fn mark_deleted(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        bucket: &BucketInfo,
        key: &str,
    ) -> StoreResult<String> {
        let sql = &bucket.sql.versions;
        let Some(row) = tx.query_opt(&sql.committed_versioning, &[&bucket.id]).await? else {
            self.catalog.forget_bucket(&bucket.name);
            return Err(StoreError::NoSuchBucket);
        };
        let enabled = match row.get::<_, Option<&str>>("versioning").map(Versioning::parse) {
            Some(Ok(state)) => state == Versioning::Enabled,
            Some(Err(err)) => return Err(StoreError::Corrupt(err.to_string())),
            // Versioning is never turned off: a catalog that saw it on saw this bucket's row.
            None => return Err(StoreError::Corrupt(format!("bucket {} is not versioned", bucket.name))),
        };
        // Enabled: any current version is kept; Suspended: only a versioned one (a null current
        // version is deleted, its body retired by the trigger).
        tx.execute(&sql.archive_current, &[&bucket.id, &key, &enabled]).await?;
        if !enabled {
            tx.execute(&sql.delete_current, &[&bucket.id, &key, &None::<String>, &false])
                .await?;
            tx.execute(&sql.drop_null, &[&bucket.id, &key]).await?;
        }
        Ok(tx
            .query_one(&sql.marker, &[&bucket.id, &key, &enabled])
            .await?
            .get("version_id"))
    }

    /// DELETE of one version, for good; the next newest version becomes current if the current
    /// one went (or a delete marker that hid it). A version object lock protects stays, and the
    /// request is refused (`bypass_governance`: a GOVERNANCE retention does not protect).
    /// Whatever deletes of the key's other versions run at once, each one acknowledged is done:
    /// they take the key's lock in turn.
    pub(crate) async fn delete_version(
        &self,
        bucket: &BucketInfo,
        key: &str,
        version_id: &str,
        bypass_governance: bool,
    ) -> StoreResult<DeleteOutcome> {
        check_key(key)?;
        retry_conflicts(|| self.remove_version(bucket, key, version_id, bypass_governance)).await
    }

    async fn remove_version(
        &self,
        bucket: &BucketInfo,
        key: &str,
        version_id: &str,
        bypass_governance: bool,
    ) -> StoreResult<DeleteOutcome> {
        let sql = &bucket.sql.versions;
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(&sql.lock_key, &[&bucket.id, &key]).await?;
        let current = (version_id != "null").then_some(version_id);
        let bypass = &bypass_governance;
        // Under the key's lock the version stays in the table it is found in: only a write of
        // the key (which moves the current version to `versions` first) runs beside this, and
        // a current version it replaced is found by the second statement, after the first
        // waited for that write.
        let deleted_current = tx
            .execute(&sql.delete_current, &[&bucket.id, &key, &current, bypass])
            .await?
            > 0;
        let marker = if deleted_current {
            false
        } else {
            let row = tx
                .query_opt(&sql.delete_noncurrent, &[&bucket.id, &key, &version_id, bypass])
                .await?;
            // Nothing removed: no such version, or one object lock protects (checked even if
            // this gateway has not yet seen the bucket's lock turned on).
            if row.is_none()
                && self
                    .version_protected(&tx, bucket, key, version_id, bypass_governance)
                    .await?
            {
                return Err(StoreError::ObjectLocked);
            }
            row.is_some_and(|row| row.get::<_, bool>("is_delete_marker"))
        };
        // Promoting only moves a version: no object event (functions/objects.sql).
        tx.execute("SELECT set_config('pgvs3.events', 'off', true)", &[])
            .await?;
        tx.execute(&sql.promote, &[&bucket.id, &key]).await?;
        tx.commit().await?;
        Ok(DeleteOutcome {
            version_id: Some(version_id.to_owned()),
            delete_marker: marker,
        })
    }

    /// One page of ListObjectVersions: keys in order, each key's versions newest first.
    pub(crate) async fn list_versions(
        &self,
        bucket: &BucketInfo,
        request: &VersionsRequest,
    ) -> StoreResult<VersionsPage> {
        let list = &request.list;
        let mut page = VersionsPage::default();
        let max = list.max_keys.min(1000);
        if max == 0 {
            return Ok(page);
        }
        let delimiter = list.delimiter.as_deref().filter(|d| !d.is_empty());
        let client = self.client().await?;
        let Some(VersionsFrom {
            mut from,
            mut below,
            mut latest_seen,
        }) = self.versions_from(bucket, &client, request, delimiter).await?
        else {
            return Ok(page);
        };
        // Bounds: at or above the prefix (`$3`), and under its end where it has one.
        let end = (!list.prefix.is_empty())
            .then(|| prefix_successor(&list.prefix))
            .flatten();
        let statement = client
            .prepare_cached(match end {
                Some(_) => &bucket.sql.versions.page_below,
                None => &bucket.sql.versions.page,
            })
            .await?;
        let mut window = Window::new((max as i64 + 1).clamp(64, PAGE_ROWS));
        loop {
            let limit = window.rows();
            let rows = match &end {
                Some(end) => {
                    client
                        .query(&statement, &[&bucket.id, &from, &list.prefix, &below, &limit, end])
                        .await?
                }
                None => {
                    client
                        .query(&statement, &[&bucket.id, &from, &list.prefix, &below, &limit])
                        .await?
                }
            };
            let exhausted = (rows.len() as i64) < limit;
            for row in &rows {
                let key: String = row.get("key");
                let common = delimiter.and_then(|delimiter| {
                    key[list.prefix.len()..]
                        .find(delimiter)
                        .map(|at| &key[..list.prefix.len() + at + delimiter.len()])
                });
                // The keys under a common prefix come together: the first rolls up, the rest skip.
                if common.is_some() && page.common_prefixes.last().map(String::as_str) == common {
                    continue;
                }
                if page.entries.len() + page.common_prefixes.len() == max {
                    page.next = Some((last_marker(&page), last_version(&page)));
                    return Ok(page);
                }
                match common {
                    Some(common) => page.common_prefixes.push(common.to_owned()),
                    None => page.entries.push(version_entry(row, key, &mut latest_seen)),
                }
            }
            if exhausted {
                return Ok(page);
            }
            // Resume after the last row read; past the whole of a common prefix in one jump.
            let last = rows.last().expect("a full window has rows");
            let last_key: String = last.get("key");
            match page.common_prefixes.last() {
                Some(common) if last_key.starts_with(common.as_str()) => match prefix_successor(common) {
                    Some(next) => {
                        from = next;
                        below = i64::MAX;
                        window.jumped();
                    }
                    None => return Ok(page),
                },
                _ => {
                    below = last.get("seq");
                    from = last_key;
                    window.walked();
                }
            }
        }
    }

    /// Where a listing of versions starts: after the key marker's versions older than the
    /// version marker, or after the whole key (no version marker). A marker that is a common
    /// prefix resumes after everything under it. `None`: nothing comes after it.
    async fn versions_from(
        &self,
        bucket: &BucketInfo,
        client: &deadpool_postgres::Object,
        request: &VersionsRequest,
        delimiter: Option<&str>,
    ) -> StoreResult<Option<VersionsFrom>> {
        let list = &request.list;
        let mut from = list.start_after.clone().unwrap_or_default();
        let mut below: i64 = -2;
        // Resuming inside a key: its newest version was on an earlier page.
        let mut latest_seen: Option<String> = None;
        if let Some(marker) = request.version_id_marker.as_deref().filter(|_| !from.is_empty()) {
            match self.version_seq(bucket, client, &from, marker).await? {
                Some(seq) => {
                    below = seq;
                    latest_seen = Some(from.clone());
                }
                // The null version named by the marker was deleted since that page: its place
                // is unknown, so the key's versions are listed again from its newest. A version
                // listed twice is harmless to a client emptying a bucket; one skipped is not.
                None => below = i64::MAX,
            }
        }
        if let Some(delimiter) = delimiter
            && from.starts_with(&list.prefix)
            && from[list.prefix.len()..].ends_with(delimiter)
        {
            match prefix_successor(&from) {
                Some(next) => {
                    from = next;
                    below = i64::MAX;
                }
                None => return Ok(None),
            }
        }
        Ok(Some(VersionsFrom {
            from,
            below,
            latest_seen,
        }))
    }

    /// Sets (`None`: removes) the metadata field `field` of one version, current (`version_id`
    /// `None`, or its id) or noncurrent, in a transaction holding its row, once `allowed` agrees
    /// with the metadata it has now (and the database's time now). Tags and object lock of a
    /// version change this way.
    pub(super) async fn patch_version_meta(
        &self,
        bucket: &BucketInfo,
        key: &str,
        version_id: Option<&str>,
        field: &str,
        value: Option<serde_json::Value>,
        allowed: impl FnOnce(&ObjectMeta, SystemTime) -> StoreResult<()>,
    ) -> StoreResult<()> {
        check_key(key)?;
        let sql = &bucket.sql.versions;
        let replacement = match value {
            Some(value) => serde_json::json!({ field: value }),
            None => serde_json::json!({}),
        };
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // A named version is looked for in `objects`, then in `versions`: the key's lock keeps a
        // concurrent delete from moving it between the two lookups.
        if version_id.is_some() {
            tx.execute(&sql.lock_key, &[&bucket.id, &key]).await?;
        }
        let (row, current) = match tx
            .query_opt(&sql.current_meta, &[&bucket.id, &key, &version_id])
            .await?
        {
            Some(row) => (row, true),
            None => {
                let Some(version) = version_id else {
                    return Err(self.missing_key(bucket, key).await);
                };
                let row = tx
                    .query_opt(&sql.noncurrent_meta, &[&bucket.id, &key, &version])
                    .await?
                    .ok_or(StoreError::NoSuchVersion)?;
                if row.get::<_, bool>("is_delete_marker") {
                    return Err(StoreError::DeleteMarker {
                        version_id: version.to_owned(),
                        allowed: false,
                        last_modified: None,
                    });
                }
                (row, false)
            }
        };
        allowed(&row.get::<_, Json<ObjectMeta>>("meta").0, row.get("now"))?;
        let statement = if current {
            &sql.patch_current
        } else {
            &sql.patch_noncurrent
        };
        tx.execute(statement, &[&bucket.id, &key, &version_id, &field, &Json(&replacement)])
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The place of `version_id` among the versions of `key` (for a marker). A version id holds
    /// its place; the null version's is looked up (`None`: there is no null version now).
    async fn version_seq(
        &self,
        bucket: &BucketInfo,
        client: &deadpool_postgres::Object,
        key: &str,
        version_id: &str,
    ) -> StoreResult<Option<i64>> {
        if version_id != "null" {
            if !valid_version_id(version_id) {
                return Err(StoreError::InvalidArgument("Invalid version id specified".into()));
            }
            return i64::from_str_radix(version_id, 16)
                .map(Some)
                .map_err(|_| StoreError::InvalidArgument("Invalid version id specified".into()));
        }
        let statement = client.prepare_cached(&bucket.sql.versions.null_seq).await?;
        let row = client.query_opt(&statement, &[&bucket.id, &key]).await?;
        Ok(row.map(|row| row.get("seq")))
    }
}

fn last_marker(page: &VersionsPage) -> String {
    let entry = page.entries.last().map(|e| e.key.clone());
    let prefix = page.common_prefixes.last().cloned();
    match (entry, prefix) {
        (Some(key), Some(prefix)) => key.max(prefix),
        (Some(key), None) => key,
        (None, Some(prefix)) => prefix,
        (None, None) => String::new(),
    }
}

/// The version-id marker of a cut page: the last entry's, unless a common prefix came last.
fn last_version(page: &VersionsPage) -> Option<String> {
    let last_key = page.entries.last()?;
    let after_prefix = page.common_prefixes.last().is_some_and(|prefix| prefix > &last_key.key);
    (!after_prefix).then(|| last_key.version_id.clone())
}
