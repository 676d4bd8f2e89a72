//! S3 object lock (layout v13): a bucket's lock configuration (`pgvs3.buckets.object_lock`), a
//! version's retention and legal hold (in its `meta`, keys `rt` and `lh`, so they move with the
//! version between `objects` and `versions`), and the rules S3 applies when they change. That a
//! protected version is never removed is not decided here: every statement that removes a
//! version for good checks `pgvs3.object_locked` (functions/objects.sql) as it deletes.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio_postgres::types::Json;

use super::objects::ObjectMeta;
use super::{BucketInfo, Store, StoreError, StoreResult};

/// How a retention protects its version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockMode {
    /// Removable before its date by a request that bypasses governance retention.
    #[serde(rename = "GOVERNANCE")]
    Governance,
    /// Removable by no one before its date, and never shortened.
    #[serde(rename = "COMPLIANCE")]
    Compliance,
}

impl LockMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Governance => "GOVERNANCE",
            LockMode::Compliance => "COMPLIANCE",
        }
    }

    pub fn parse(text: &str) -> Option<LockMode> {
        match text {
            "GOVERNANCE" => Some(LockMode::Governance),
            "COMPLIANCE" => Some(LockMode::Compliance),
            _ => None,
        }
    }
}

/// A version's retention: protected in `mode` until `until`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Retention {
    #[serde(rename = "m")]
    pub mode: LockMode,
    /// RFC 3339, in UTC: PostgreSQL compares it as a timestamptz (`pgvs3.object_locked`).
    #[serde(rename = "u", with = "rfc3339")]
    pub until: SystemTime,
}

impl Retention {
    fn active(&self, now: SystemTime) -> bool {
        self.until > now
    }
}

mod rfc3339 {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};
    use time::OffsetDateTime;
    use time::format_description::well_known::Rfc3339;

    pub fn serialize<S: Serializer>(time: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
        let text = OffsetDateTime::from(*time)
            .format(&Rfc3339)
            .map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(&text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SystemTime, D::Error> {
        let text = String::deserialize(deserializer)?;
        OffsetDateTime::parse(&text, &Rfc3339)
            .map(SystemTime::from)
            .map_err(serde::de::Error::custom)
    }
}

/// A bucket's object lock configuration: enabled, with this default retention for new
/// versions, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<DefaultRetention>,
}

/// The retention a new version gets when its request names none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultRetention {
    pub mode: LockMode,
    #[serde(flatten)]
    pub period: RetentionPeriod,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetentionPeriod {
    Days(u32),
    Years(u32),
}

impl DefaultRetention {
    /// The retention of a version written at `now`. A year is 365 days, as S3 counts it.
    pub fn retention_from(&self, now: SystemTime) -> Retention {
        let days = match self.period {
            RetentionPeriod::Days(days) => u64::from(days),
            RetentionPeriod::Years(years) => u64::from(years) * 365,
        };
        Retention {
            mode: self.mode,
            until: now + Duration::from_secs(days * 86_400),
        }
    }
}

/// The lock a write asks for with its `x-amz-object-lock-*` headers. A copy gets the lock its
/// own request asks for, never its source's.
#[derive(Debug, Clone, Default)]
pub struct RequestedLock {
    pub retention: Option<Retention>,
    pub legal_hold: Option<bool>,
}

impl RequestedLock {
    /// Sets the lock of a new version's metadata to this one.
    pub fn apply(self, meta: &mut ObjectMeta) {
        meta.retention = self.retention;
        meta.legal_hold = self.legal_hold;
    }
}

/// What S3 answers a lock request on a bucket without object lock.
pub fn lock_missing() -> StoreError {
    StoreError::InvalidRequest("Bucket is missing Object Lock Configuration".into())
}

impl BucketInfo {
    /// The lock of a new version: the request's own retention and legal hold, else the
    /// bucket's default retention. A lock on a bucket without object lock is refused.
    pub fn lock_new_version(&self, meta: &mut ObjectMeta) -> StoreResult<()> {
        let Some(config) = &self.object_lock else {
            return match meta.retention.is_some() || meta.legal_hold.is_some() {
                true => Err(lock_missing()),
                false => Ok(()),
            };
        };
        if meta.retention.is_none()
            && let Some(default) = &config.default
        {
            meta.retention = Some(default.retention_from(SystemTime::now()));
        }
        Ok(())
    }
}

/// The SQL of object lock in one namespace.
#[derive(Debug)]
pub(super) struct LockSql {
    /// Whether a version object lock protects exists: why a delete removed nothing.
    protected: String,
}

impl LockSql {
    pub(super) fn new(ns: &str) -> LockSql {
        LockSql {
            protected: format!(
                "SELECT 1 FROM {ns}.objects WHERE bucket_id = $1 AND key = $2 AND coalesce(version_id, 'null') = $3
                    AND pgvs3.object_locked(meta, $4)
                 UNION ALL
                 SELECT 1 FROM {ns}.versions WHERE bucket_id = $1 AND key = $2 AND version_id = $3
                    AND pgvs3.object_locked(meta, $4)"
            ),
        }
    }
}

impl Store {
    /// Turns object lock on (or changes its default retention). S3 allows it only on a bucket
    /// whose versioning is Enabled; once on, it stays on.
    pub(crate) async fn set_object_lock(&self, bucket: &BucketInfo, config: &LockConfig) -> StoreResult<()> {
        let client = self.client().await?;
        let updated = client
            .execute(
                "UPDATE pgvs3.buckets SET object_lock = $2 WHERE id = $1 AND versioning = 'Enabled'",
                &[&bucket.id, &Json(config)],
            )
            .await?;
        if updated == 0 {
            let exists = client
                .query_opt("SELECT 1 FROM pgvs3.buckets WHERE id = $1", &[&bucket.id])
                .await?
                .is_some();
            if !exists {
                self.catalog.forget_bucket(&bucket.name);
                return Err(StoreError::NoSuchBucket);
            }
            return Err(StoreError::InvalidBucketState(
                "Versioning must be 'Enabled' on the bucket to apply a Object Lock configuration".into(),
            ));
        }
        self.catalog
            .refresh()
            .await
            .map_err(|err| StoreError::Unavailable(err.to_string()))?;
        Ok(())
    }

    /// Sets (or, `None`, removes) a version's retention, as S3 allows: a COMPLIANCE retention
    /// is only ever extended; a GOVERNANCE one is shortened, removed or changed to another
    /// mode (COMPLIANCE too, as S3 refuses that without the bypass) only by a request that
    /// bypasses governance retention.
    pub(crate) async fn set_retention(
        &self,
        bucket: &BucketInfo,
        key: &str,
        version_id: Option<&str>,
        retention: Option<Retention>,
        bypass_governance: bool,
    ) -> StoreResult<()> {
        if bucket.object_lock.is_none() {
            return Err(lock_missing());
        }
        let value = retention
            .as_ref()
            .map(serde_json::to_value)
            .transpose()
            .map_err(|err| StoreError::InvalidArgument(err.to_string()))?;
        // Judged by the database's clock, as `pgvs3.object_locked` judges what a retention
        // protects: a gateway whose clock runs ahead must not find one over that still holds.
        self.patch_version_meta(bucket, key, version_id, "rt", value, |meta, now| {
            if let Some(new) = &retention
                && !new.active(now)
            {
                return Err(StoreError::InvalidArgument(
                    "The retain until date must be in the future!".into(),
                ));
            }
            let Some(old) = meta.retention.as_ref().filter(|old| old.active(now)) else {
                return Ok(());
            };
            let kept = retention
                .as_ref()
                .is_some_and(|new| new.until >= old.until && new.mode == old.mode);
            match (kept, old.mode) {
                (true, _) => Ok(()),
                (false, LockMode::Governance) if bypass_governance => Ok(()),
                (false, _) => Err(StoreError::ObjectLocked),
            }
        })
        .await
    }

    /// Puts a legal hold on a version or lifts it.
    pub(crate) async fn set_legal_hold(
        &self,
        bucket: &BucketInfo,
        key: &str,
        version_id: Option<&str>,
        on: bool,
    ) -> StoreResult<()> {
        if bucket.object_lock.is_none() {
            return Err(lock_missing());
        }
        self.patch_version_meta(
            bucket,
            key,
            version_id,
            "lh",
            Some(serde_json::Value::Bool(on)),
            |_, _| Ok(()),
        )
        .await
    }

    /// Whether `version_id` of `key` exists and object lock keeps it from being removed by a
    /// request that does (or does not) bypass governance retention.
    pub(super) async fn version_protected(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        bucket: &BucketInfo,
        key: &str,
        version_id: &str,
        bypass_governance: bool,
    ) -> StoreResult<bool> {
        let rows = tx
            .query(
                &bucket.sql.lock.protected,
                &[&bucket.id, &key, &version_id, &bypass_governance],
            )
            .await?;
        Ok(!rows.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_is_kept_as_rfc3339_postgresql_reads() {
        let retention = Retention {
            mode: LockMode::Compliance,
            until: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        };
        let json = serde_json::to_value(&retention).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"m": "COMPLIANCE", "u": "2027-01-15T08:00:00Z"})
        );
        assert_eq!(serde_json::from_value::<Retention>(json).unwrap(), retention);
    }

    #[test]
    fn default_retention_counts_days_and_years_of_365_days() {
        let now = SystemTime::UNIX_EPOCH;
        let days = DefaultRetention {
            mode: LockMode::Governance,
            period: RetentionPeriod::Days(2),
        };
        assert_eq!(days.retention_from(now).until, now + Duration::from_secs(2 * 86_400));
        let years = DefaultRetention {
            mode: LockMode::Compliance,
            period: RetentionPeriod::Years(1),
        };
        assert_eq!(years.retention_from(now).until, now + Duration::from_secs(365 * 86_400));
        assert_eq!(
            serde_json::to_value(LockConfig { default: Some(years) }).unwrap(),
            serde_json::json!({"default": {"mode": "COMPLIANCE", "years": 1}})
        );
    }
}
