//! Conditional requests: the HTTP preconditions of reads (RFC 7232, as S3 applies them) and
//! the compare-and-swap conditions of writes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{ObjectHead, StoreError, StoreResult};

/// An entity-tag condition: `*` or one ETag (compared without quotes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtagCondition {
    Any,
    Tag(String),
}

impl EtagCondition {
    fn matches(&self, etag: &str) -> bool {
        match self {
            EtagCondition::Any => true,
            EtagCondition::Tag(tag) => tag.trim_matches('"') == etag,
        }
    }
}

/// The preconditions of a GET or HEAD.
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    pub if_match: Option<EtagCondition>,
    pub if_none_match: Option<EtagCondition>,
    pub if_modified_since: Option<SystemTime>,
    pub if_unmodified_since: Option<SystemTime>,
}

impl Preconditions {
    /// S3's order: a passing If-Match overrides If-Unmodified-Since, and a failing
    /// If-None-Match (the ETag differs) overrides If-Modified-Since. Dates compare at the
    /// one-second resolution of Last-Modified.
    pub fn check(&self, head: &ObjectHead) -> StoreResult<()> {
        let modified = whole_seconds(head.last_modified);
        match (&self.if_match, self.if_unmodified_since) {
            (Some(condition), _) if !condition.matches(&head.etag) => return Err(StoreError::PreconditionFailed),
            (None, Some(since)) if modified > whole_seconds(since) => return Err(StoreError::PreconditionFailed),
            _ => {}
        }
        let not_modified = || StoreError::NotModified {
            etag: head.etag.clone(),
            last_modified: head.last_modified,
        };
        match (&self.if_none_match, self.if_modified_since) {
            (Some(condition), _) if condition.matches(&head.etag) => Err(not_modified()),
            (None, Some(since)) if modified <= whole_seconds(since) => Err(not_modified()),
            _ => Ok(()),
        }
    }
}

/// A copy answers every failed source precondition with 412, never 304.
pub fn as_copy_source_error(err: StoreError) -> StoreError {
    match err {
        StoreError::NotModified { .. } => StoreError::PreconditionFailed,
        other => other,
    }
}

fn whole_seconds(time: SystemTime) -> Duration {
    Duration::from_secs(time.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs())
}

/// When a write may replace what is stored under its key; checked atomically with the write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WriteCondition {
    #[default]
    Always,
    /// `If-None-Match: *`: only when no object exists under the key.
    IfAbsent,
    /// `If-Match: <etag>`: only when the stored object has this ETag (`*`: any object).
    IfMatch(String),
    /// `If-None-Match: <etag>`: unless the stored object has this ETag.
    IfNoneMatch(String),
}

impl WriteCondition {
    pub fn if_match(etag: &str) -> WriteCondition {
        WriteCondition::IfMatch(etag.trim_matches('"').to_owned())
    }

    pub fn if_none_match(etag: &str) -> WriteCondition {
        WriteCondition::IfNoneMatch(etag.trim_matches('"').to_owned())
    }
}

/// The conditions of a delete, on the key's current version (S3's conditional deletes):
/// `If-Match`, `x-amz-if-match-last-modified-time` and `x-amz-if-match-size`, or a DeleteObjects
/// entry's `ETag`, `LastModifiedTime` and `Size`. Checked under the current version's lock, in
/// the transaction that deletes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteCondition {
    pub if_match: Option<EtagCondition>,
    pub last_modified: Option<SystemTime>,
    pub size: Option<u64>,
}

/// What a delete's conditions are checked against: the current version as stored.
pub struct CurrentVersion<'a> {
    pub etag: &'a str,
    pub size: u64,
    pub last_modified: SystemTime,
}

impl DeleteCondition {
    pub fn is_unconditional(&self) -> bool {
        self == &DeleteCondition::default()
    }

    /// Whether the delete may go on. With no current version, `If-Match` fails as S3's does
    /// (404 NoSuchKey: there is nothing to match); the time and size conditions alone let the
    /// delete go on (S3 answers 204). Times compare at the one-second resolution clients read
    /// Last-Modified with.
    pub fn check(&self, current: Option<CurrentVersion<'_>>) -> StoreResult<()> {
        let Some(current) = current else {
            return match self.if_match {
                Some(_) => Err(StoreError::NoSuchKey),
                None => Ok(()),
            };
        };
        let holds = self.if_match.as_ref().is_none_or(|tag| tag.matches(current.etag))
            && self.size.is_none_or(|size| size == current.size)
            && self
                .last_modified
                .is_none_or(|at| whole_seconds(at) == whole_seconds(current.last_modified));
        if holds {
            Ok(())
        } else {
            Err(StoreError::PreconditionFailed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ObjectMeta;

    fn head(etag: &str, at: u64) -> ObjectHead {
        ObjectHead {
            version_id: None,
            size: 1,
            etag: etag.into(),
            last_modified: UNIX_EPOCH + Duration::from_millis(at * 1000 + 500),
            meta: ObjectMeta::default(),
        }
    }

    #[test]
    fn delete_conditions_hold_only_on_the_current_version_they_name() {
        let at = UNIX_EPOCH + Duration::from_millis(100_500);
        let current = || {
            Some(CurrentVersion {
                etag: "abc",
                size: 7,
                last_modified: at,
            })
        };
        let tag = |t: &str| Some(EtagCondition::Tag(format!("\"{t}\"")));
        assert!(DeleteCondition::default().is_unconditional());
        assert!(DeleteCondition::default().check(None).is_ok());
        let matching = DeleteCondition {
            if_match: tag("abc"),
            size: Some(7),
            last_modified: Some(UNIX_EPOCH + Duration::from_secs(100)),
        };
        assert!(matching.check(current()).is_ok());
        assert!(matches!(matching.check(None), Err(StoreError::NoSuchKey)));
        for wrong in [
            DeleteCondition {
                if_match: tag("abd"),
                ..matching.clone()
            },
            DeleteCondition {
                size: Some(8),
                ..matching.clone()
            },
            DeleteCondition {
                last_modified: Some(UNIX_EPOCH + Duration::from_secs(101)),
                ..matching.clone()
            },
        ] {
            assert!(
                matches!(wrong.check(current()), Err(StoreError::PreconditionFailed)),
                "{wrong:?}"
            );
        }
        let any = DeleteCondition {
            if_match: Some(EtagCondition::Any),
            ..Default::default()
        };
        assert!(any.check(current()).is_ok());
        assert!(matches!(any.check(None), Err(StoreError::NoSuchKey)));
        let size_only = DeleteCondition {
            size: Some(1),
            ..Default::default()
        };
        assert!(size_only.check(None).is_ok());
    }

    #[test]
    fn preconditions_follow_s3_precedence() {
        let object = head("abc", 100);
        let at = |secs| Some(UNIX_EPOCH + Duration::from_secs(secs));
        let tag = |t: &str| Some(EtagCondition::Tag(format!("\"{t}\"")));
        let check = |p: Preconditions| p.check(&object);
        assert!(check(Preconditions::default()).is_ok());
        assert!(matches!(
            check(Preconditions {
                if_match: tag("zzz"),
                ..Default::default()
            }),
            Err(StoreError::PreconditionFailed)
        ));
        // If-Match true wins over a failing If-Unmodified-Since.
        assert!(
            check(Preconditions {
                if_match: tag("abc"),
                if_unmodified_since: at(50),
                ..Default::default()
            })
            .is_ok()
        );
        assert!(matches!(
            check(Preconditions {
                if_unmodified_since: at(99),
                ..Default::default()
            }),
            Err(StoreError::PreconditionFailed)
        ));
        // Same second as Last-Modified counts as not modified since.
        assert!(
            check(Preconditions {
                if_unmodified_since: at(100),
                ..Default::default()
            })
            .is_ok()
        );
        assert!(matches!(
            check(Preconditions {
                if_none_match: Some(EtagCondition::Any),
                ..Default::default()
            }),
            Err(StoreError::NotModified { .. })
        ));
        assert!(matches!(
            check(Preconditions {
                if_modified_since: at(100),
                ..Default::default()
            }),
            Err(StoreError::NotModified { .. })
        ));
        assert!(
            check(Preconditions {
                if_modified_since: at(99),
                ..Default::default()
            })
            .is_ok()
        );
        // If-None-Match false (ETag differs) wins over a true If-Modified-Since.
        assert!(
            check(Preconditions {
                if_none_match: tag("zzz"),
                if_modified_since: at(200),
                ..Default::default()
            })
            .is_ok()
        );
    }
}
