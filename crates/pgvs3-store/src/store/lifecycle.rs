//! S3 lifecycle (layout v13): a bucket's rules (`pgvs3.buckets.lifecycle`) and their execution
//! by the maintenance leader, in bounded batches per rule and action: current versions expire
//! (deleted, or hidden behind a delete marker in a versioned bucket), noncurrent versions and
//! lone delete markers go, incomplete multipart uploads are aborted. Nothing object lock
//! protects is ever removed: the statements check `pgvs3.object_locked` as they delete.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio_postgres::types::{Json, ToSql};

use super::error::retry_conflicts;
use super::versions::KEY_LOCKS;
use super::{BucketInfo, Store, StoreError, StoreResult, Versioning};

/// A bucket's lifecycle configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Lifecycle {
    pub rules: Vec<LifecycleRule>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LifecycleRule {
    pub id: String,
    pub enabled: bool,
    #[serde(default)]
    pub filter: RuleFilter,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration: Option<Expiration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noncurrent: Option<NoncurrentExpiration>,
    /// Days after which an incomplete multipart upload is aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_incomplete_after_days: Option<u32>,
    /// The rule was given the legacy rule-level `Prefix` rather than a `Filter`: it is answered
    /// as it was sent, so tools that compare what they sent see no difference.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rule_prefix: bool,
}

/// Which objects a rule applies to: all of its conditions hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RuleFilter {
    #[serde(default)]
    pub prefix: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_greater_than: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_less_than: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Expiration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<u32>,
    /// Midnight UTC, as S3 requires, in seconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<i64>,
    /// Remove delete markers that are the only version left of their key.
    #[serde(default)]
    pub expired_delete_marker: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NoncurrentExpiration {
    pub days: u32,
    /// How many of the newest noncurrent versions are kept whatever their age.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newer_versions: Option<u32>,
}

const DAY: u64 = 86_400;

/// Removals per rule and action in one maintenance pass: each is one bounded statement (or as
/// many delete markers), and a larger backlog drains over the following passes.
pub const LIFECYCLE_BATCH: i64 = 1000;

/// The midnight UTC at or after `time`, as S3 rounds expiry times.
fn next_midnight(time: SystemTime) -> SystemTime {
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs.div_ceil(DAY) * DAY)
}

/// The latest time an object written at it must have been written to be `days` old by S3's
/// count at `now`: S3 adds the days to the creation time and rounds up to midnight UTC.
fn written_by(now: SystemTime, days: u32) -> SystemTime {
    let secs = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
    let midnight = secs / DAY * DAY;
    SystemTime::UNIX_EPOCH + Duration::from_secs(midnight.saturating_sub(u64::from(days) * DAY))
}

impl RuleFilter {
    fn matches(&self, key: &str, size: u64, tags: &BTreeMap<String, String>) -> bool {
        key.starts_with(&self.prefix)
            && self.tags.iter().all(|(k, v)| tags.get(k) == Some(v))
            && self.size_greater_than.is_none_or(|min| size as i64 > min)
            && self.size_less_than.is_none_or(|max| (size as i64) < max)
    }
}

impl Lifecycle {
    /// When the current version of `key` (`size` bytes, written at `written`, tagged `tags`)
    /// expires and by which rule: the `x-amz-expiration` of writes and reads (the earliest of
    /// the rules that apply).
    pub fn expiry(
        &self,
        key: &str,
        size: u64,
        written: SystemTime,
        tags: &BTreeMap<String, String>,
    ) -> Option<(SystemTime, &str)> {
        self.rules
            .iter()
            .filter(|rule| rule.enabled && rule.filter.matches(key, size, tags))
            .filter_map(|rule| {
                let expiration = rule.expiration.as_ref()?;
                let at = match (expiration.days, expiration.date) {
                    (Some(days), _) => next_midnight(written + Duration::from_secs(u64::from(days) * DAY)),
                    (None, Some(date)) => SystemTime::UNIX_EPOCH + Duration::from_secs(date.max(0) as u64),
                    (None, None) => return None,
                };
                Some((at, rule.id.as_str()))
            })
            .min_by_key(|(at, _)| *at)
    }
}

/// What one lifecycle pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LifecycleStats {
    /// Current versions deleted (unversioned buckets) or hidden behind a delete marker.
    pub expired: u64,
    pub noncurrent_deleted: u64,
    pub delete_markers_removed: u64,
    pub uploads_aborted: u64,
}

impl LifecycleStats {
    fn total(&self) -> u64 {
        self.expired + self.noncurrent_deleted + self.delete_markers_removed + self.uploads_aborted
    }
}

/// The bind parameters of a rule's filter: `$2` prefix, `$3` tags (jsonb containment), `$4`
/// and `$5` the exclusive size bounds.
const FILTER: &str = "starts_with(key, $2) AND coalesce(meta->'tg', '{}') @> $3 AND size > $4 AND size < $5";

impl Store {
    /// Sets (or, `None`, removes) a bucket's lifecycle configuration.
    pub(crate) async fn set_lifecycle(&self, bucket: &BucketInfo, lifecycle: Option<&Lifecycle>) -> StoreResult<()> {
        let client = self.client().await?;
        let updated = client
            .execute(
                "UPDATE pgvs3.buckets SET lifecycle = $2 WHERE id = $1",
                &[&bucket.id, &lifecycle.map(Json)],
            )
            .await?;
        if updated == 0 {
            self.catalog.forget_bucket(&bucket.name);
            return Err(StoreError::NoSuchBucket);
        }
        self.catalog
            .refresh()
            .await
            .map_err(|err| StoreError::Unavailable(err.to_string()))?;
        Ok(())
    }

    /// One lifecycle pass over every bucket that has rules, doing at most `batch` removals per
    /// rule and action (a backlog drains over the following passes). The bucket's state is
    /// read from the database, not the catalog cache.
    pub async fn apply_lifecycle(&self, batch: i64) -> StoreResult<LifecycleStats> {
        let mut stats = LifecycleStats::default();
        let names: Vec<String> = {
            let client = self.client().await?;
            client
                .query(
                    "SELECT name FROM pgvs3.buckets WHERE lifecycle IS NOT NULL ORDER BY id",
                    &[],
                )
                .await?
                .iter()
                .map(|row| row.get("name"))
                .collect()
        };
        for name in names {
            let bucket = match self.catalog.bucket(&name).await {
                Ok(bucket) => bucket,
                Err(StoreError::NoSuchBucket) => continue,
                Err(err) => return Err(err),
            };
            if bucket.origin.is_some() {
                continue;
            }
            let client = self.client().await?;
            let row = client
                .query_opt(
                    "SELECT lifecycle, versioning FROM pgvs3.buckets WHERE id = $1",
                    &[&bucket.id],
                )
                .await?;
            let Some(row) = row else { continue };
            let Some(Json(lifecycle)) = row.get::<_, Option<Json<Lifecycle>>>("lifecycle") else {
                continue;
            };
            let versioning = row
                .get::<_, Option<&str>>("versioning")
                .map(Versioning::parse)
                .transpose()
                .map_err(|err| StoreError::Unavailable(err.to_string()))?;
            drop(client);
            for rule in lifecycle.rules.iter().filter(|rule| rule.enabled) {
                self.apply_rule(&bucket, versioning, rule, batch, &mut stats).await?;
            }
        }
        if stats.total() > 0 {
            tracing::info!(?stats, "lifecycle pass");
        }
        Ok(stats)
    }

    async fn apply_rule(
        &self,
        bucket: &BucketInfo,
        versioning: Option<Versioning>,
        rule: &LifecycleRule,
        batch: i64,
        stats: &mut LifecycleStats,
    ) -> StoreResult<()> {
        let now = SystemTime::now();
        let filter = &rule.filter;
        // One transaction for the rule's statements, marked so that the events they raise are
        // LifecycleExpiration ones (functions/objects.sql).
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.batch_execute("SET LOCAL pgvs3.event_source = 'lifecycle'").await?;
        let pass = RulePass {
            bucket,
            tx: &tx,
            filter,
            tags: Json(&filter.tags),
            above: filter.size_greater_than.unwrap_or(-1),
            below: filter.size_less_than.unwrap_or(i64::MAX),
            batch,
            now,
        };
        if let Some(expiration) = &rule.expiration {
            self.expire_current(&pass, versioning, expiration, stats).await?;
        }
        if let Some(noncurrent) = &rule.noncurrent {
            expire_noncurrent(&pass, noncurrent, stats).await?;
        }
        if let Some(days) = rule.abort_incomplete_after_days {
            abort_incomplete(&pass, days, stats).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// A rule's expiration of current versions (deleted, or made noncurrent behind a delete
    /// marker in a versioned bucket), and of delete markers left alone.
    async fn expire_current(
        &self,
        pass: &RulePass<'_, '_>,
        versioning: Option<Versioning>,
        expiration: &Expiration,
        stats: &mut LifecycleStats,
    ) -> StoreResult<()> {
        let ns = &pass.bucket.namespace;
        let cutoff = match (expiration.days, expiration.date) {
            (Some(days), _) => Some(written_by(pass.now, days)),
            (None, Some(date)) if SystemTime::UNIX_EPOCH + Duration::from_secs(date.max(0) as u64) <= pass.now => {
                Some(pass.now)
            }
            _ => None,
        };
        if let Some(cutoff) = cutoff {
            let filter = [
                &pass.bucket.id as &(dyn ToSql + Sync),
                &pass.filter.prefix,
                &pass.tags,
                &pass.above,
                &pass.below,
            ];
            let due = format!(
                "SELECT key FROM \"{ns}\".objects WHERE bucket_id = $1 AND {FILTER} AND last_modified <= $6
                    AND (expires_at IS NULL OR expires_at > now())
                  ORDER BY key LIMIT $7"
            );
            match versioning {
                None => {
                    // One statement, whose conditions a row written meanwhile is checked against
                    // as it is now: a later write, or a tag change out of the rule, keeps its row;
                    // so does a row a versioned write made, and any row once the bucket is
                    // versioned (not as the pass read it).
                    let delete = format!(
                        "DELETE FROM \"{ns}\".objects WHERE bucket_id = $1 AND key = ANY(ARRAY({due}))
                            AND {FILTER} AND last_modified <= $6 AND (expires_at IS NULL OR expires_at > now())
                            AND version_seq IS NULL
                            AND EXISTS (SELECT 1 FROM pgvs3.buckets WHERE id = $1 AND versioning IS NULL)"
                    );
                    let params = [&filter[..], &[&cutoff as &(dyn ToSql + Sync), &pass.batch]].concat();
                    stats.expired += pass.tx.execute(&delete, &params).await?;
                }
                Some(_) => {
                    // Each version picked is expired in a transaction of its own, which holds the
                    // key's locks: only if it is still current (not one written since) and still
                    // matches the rule (its tags may have changed).
                    let due = due.replacen("SELECT key", "SELECT key, version_seq, etag, last_modified", 1);
                    let params = [&filter[..], &[&cutoff as &(dyn ToSql + Sync), &pass.batch]].concat();
                    let picked: Vec<Picked> = pass
                        .tx
                        .query(&due, &params)
                        .await?
                        .iter()
                        .map(|row| Picked {
                            key: row.get("key"),
                            version_seq: row.get("version_seq"),
                            etag: row.get("etag"),
                            last_modified: row.get("last_modified"),
                        })
                        .collect();
                    let still_due = format!(
                        "SELECT 1 FROM \"{ns}\".objects WHERE bucket_id = $1 AND key = $6 AND {FILTER}
                            AND version_seq IS NOT DISTINCT FROM $7 AND etag = $8 AND last_modified = $9
                            AND (expires_at IS NULL OR expires_at > now())
                          FOR UPDATE"
                    );
                    for version in &picked {
                        let params: Vec<&(dyn ToSql + Sync)> = [
                            &filter[..],
                            &[
                                &version.key as &(dyn ToSql + Sync),
                                &version.version_seq,
                                &version.etag,
                                &version.last_modified,
                            ],
                        ]
                        .concat();
                        let expired =
                            retry_conflicts(|| self.expire_version(pass.bucket, &version.key, &still_due, &params));
                        if expired.await? {
                            stats.expired += 1;
                        }
                    }
                }
            }
        }
        if expiration.expired_delete_marker {
            // A delete marker is "expired" when it is the only version its key has left.
            let lone_markers = format!(
                "DELETE FROM \"{ns}\".versions v WHERE (v.bucket_id, v.key, v.version_id) IN (
                     SELECT m.bucket_id, m.key, m.version_id FROM \"{ns}\".versions m
                      WHERE m.bucket_id = $1 AND starts_with(m.key, $2) AND m.is_delete_marker
                        AND NOT EXISTS (SELECT 1 FROM \"{ns}\".objects o WHERE o.bucket_id = m.bucket_id AND o.key = m.key)
                        AND NOT EXISTS (SELECT 1 FROM \"{ns}\".versions x WHERE x.bucket_id = m.bucket_id
                                           AND x.key = m.key AND x.version_id <> m.version_id)
                      LIMIT $3)"
            );
            stats.delete_markers_removed += pass
                .tx
                .execute(&lone_markers, &[&pass.bucket.id, &pass.filter.prefix, &pass.batch])
                .await?;
        }
        Ok(())
    }
}

impl Store {
    /// Hides the current version of `key` behind a delete marker (in a Suspended bucket, deletes
    /// a null one) as a lifecycle expiration, if `still_due` (with `params`) finds it still the
    /// version picked and still under the rule once the key's locks are held.
    async fn expire_version(
        &self,
        bucket: &BucketInfo,
        key: &str,
        still_due: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.batch_execute("SET LOCAL pgvs3.event_source = 'lifecycle'").await?;
        tx.execute(KEY_LOCKS, &[&bucket.id, &key]).await?;
        if tx.query_opt(still_due, params).await?.is_none() {
            return Ok(false);
        }
        self.mark_deleted(&tx, bucket, key).await?;
        tx.commit().await?;
        Ok(true)
    }
}

/// A current version a rule found due, as it was when picked.
struct Picked {
    key: String,
    version_seq: Option<i64>,
    etag: String,
    last_modified: SystemTime,
}

/// What the statements of one rule's pass over a bucket share: its transaction and filter.
struct RulePass<'a, 't> {
    bucket: &'a BucketInfo,
    tx: &'a deadpool_postgres::Transaction<'t>,
    filter: &'a RuleFilter,
    tags: Json<&'a BTreeMap<String, String>>,
    /// The filter's size bounds, exclusive (none: -1 and `i64::MAX`).
    above: i64,
    below: i64,
    batch: i64,
    now: SystemTime,
}

/// A rule's expiration of noncurrent versions.
async fn expire_noncurrent(
    pass: &RulePass<'_, '_>,
    noncurrent: &NoncurrentExpiration,
    stats: &mut LifecycleStats,
) -> StoreResult<()> {
    let ns = &pass.bucket.namespace;
    // A version's noncurrent age runs from when the next newer version was written;
    // the newest `newer_versions` noncurrent versions of each key stay.
    let cutoff = written_by(pass.now, noncurrent.days);
    let keep = i64::from(noncurrent.newer_versions.unwrap_or(0));
    let expire = format!(
        "WITH every AS (
             SELECT key, coalesce(version_id, 'null') AS version_id, coalesce(version_seq, -1) AS seq,
                    last_modified, true AS in_objects, meta, size, false AS is_delete_marker
               FROM \"{ns}\".objects WHERE bucket_id = $1 AND starts_with(key, $2)
             UNION ALL
             SELECT key, version_id, coalesce(version_seq, -1), last_modified, false, meta, size, is_delete_marker
               FROM \"{ns}\".versions WHERE bucket_id = $1 AND starts_with(key, $2)),
         ranked AS (
             SELECT *, row_number() OVER w AS place, lag(last_modified) OVER w AS noncurrent_since
               FROM every WINDOW w AS (PARTITION BY key ORDER BY in_objects DESC, seq DESC)),
         due AS (
             SELECT key, version_id FROM ranked
              WHERE place > 1 + $7::bigint AND noncurrent_since <= $6 AND NOT in_objects
                AND (is_delete_marker OR (coalesce(meta->'tg', '{{}}') @> $3 AND size > $4 AND size < $5))
              LIMIT $8),
         dropped AS (
             DELETE FROM \"{ns}\".versions v USING due
              WHERE v.bucket_id = $1 AND v.key = due.key AND v.version_id = due.version_id
                AND NOT pgvs3.object_locked(v.meta, false)
             RETURNING v.body_id),
         retired AS (
             INSERT INTO \"{ns}\".retired_bodies (body_id)
             SELECT body_id FROM dropped WHERE body_id IS NOT NULL ON CONFLICT DO NOTHING)
         SELECT count(*) AS deleted FROM dropped"
    );
    let row = pass
        .tx
        .query_one(
            &expire,
            &[
                &pass.bucket.id,
                &pass.filter.prefix,
                &pass.tags,
                &pass.above,
                &pass.below,
                &cutoff,
                &keep,
                &pass.batch,
            ],
        )
        .await?;
    stats.noncurrent_deleted += row.get::<_, i64>("deleted") as u64;
    Ok(())
}

/// A rule's abort of multipart uploads started more than `days` ago.
async fn abort_incomplete(pass: &RulePass<'_, '_>, days: u32, stats: &mut LifecycleStats) -> StoreResult<()> {
    let ns = &pass.bucket.namespace;
    let started_by = pass.now - Duration::from_secs(u64::from(days) * DAY);
    let abort = format!(
        "DELETE FROM \"{ns}\".uploads WHERE upload_id = ANY(ARRAY(
             SELECT upload_id FROM \"{ns}\".uploads
              WHERE bucket_id = $1 AND starts_with(key, $2) AND initiated <= $3 LIMIT $4))
         RETURNING upload_id"
    );
    let uploads: Vec<i64> = pass
        .tx
        .query(
            &abort,
            &[&pass.bucket.id, &pass.filter.prefix, &started_by, &pass.batch],
        )
        .await?
        .iter()
        .map(|row| row.get("upload_id"))
        .collect();
    pass.tx
        .execute(&pass.bucket.sql.multipart.drop_parts, &[&uploads])
        .await?;
    stats.uploads_aborted += uploads.len() as u64;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_rounds_up_to_midnight_utc_as_s3_does() {
        let day = Duration::from_secs(DAY);
        // 2026-12-01T10:00:00Z, one day: 2026-12-03T00:00:00Z.
        let written = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_119_200);
        let lifecycle = Lifecycle {
            rules: vec![LifecycleRule {
                id: "logs".into(),
                enabled: true,
                filter: RuleFilter {
                    prefix: "logs/".into(),
                    ..RuleFilter::default()
                },
                expiration: Some(Expiration {
                    days: Some(1),
                    ..Expiration::default()
                }),
                ..LifecycleRule::default()
            }],
        };
        let untagged = BTreeMap::new();
        let (at, rule) = lifecycle.expiry("logs/a", 1, written, &untagged).unwrap();
        assert_eq!(rule, "logs");
        assert_eq!(at, SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_256_000));
        assert!(at > written + day);
        assert!(lifecycle.expiry("data/a", 1, written, &untagged).is_none());
        // An object counts as `days` old once midnight after written + days has passed.
        assert!(written <= written_by(at, 1));
        assert!(written > written_by(at - Duration::from_secs(1), 1));
    }

    #[test]
    fn filters_need_every_condition() {
        let filter = RuleFilter {
            prefix: "p/".into(),
            tags: [("k".to_owned(), "v".to_owned())].into(),
            size_greater_than: Some(10),
            size_less_than: Some(100),
        };
        let tagged: BTreeMap<String, String> = [("k".to_owned(), "v".to_owned())].into();
        assert!(filter.matches("p/x", 50, &tagged));
        assert!(!filter.matches("q/x", 50, &tagged));
        assert!(!filter.matches("p/x", 10, &tagged));
        assert!(!filter.matches("p/x", 100, &tagged));
        assert!(!filter.matches("p/x", 50, &BTreeMap::new()));
    }
}
