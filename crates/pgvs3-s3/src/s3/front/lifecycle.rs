//! S3 lifecycle on the wire: Put/Get/DeleteBucketLifecycleConfiguration with S3's validation,
//! and the `x-amz-expiration` header of reads. Transitions need storage classes pgvs3 does not
//! have: a rule asking for one is refused, never stored as if it would run.

use std::time::{Duration, SystemTime};

use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::context::RequestContext;
use super::wire::{fail, timestamp, to_system_time};
use crate::store::{self, Lifecycle, NoncurrentExpiration, RuleFilter};

/// S3's limit on rules per configuration.
const MAX_RULES: usize = 1000;

fn invalid_argument(message: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidArgument, message.to_owned())
}

fn malformed_xml() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::MalformedXML,
        "The XML you provided was not well-formed or did not validate against our published schema.",
    )
}

/// `x-amz-expiration`: `expiry-date="<HTTP date>", rule-id="<id>"`.
pub(super) fn expiration_header((at, rule): (SystemTime, &str)) -> String {
    let mut date = Vec::new();
    let _ = timestamp(at).format(TimestampFormat::HttpDate, &mut date);
    format!(
        "expiry-date=\"{}\", rule-id=\"{}\"",
        String::from_utf8_lossy(&date),
        rule.replace('"', "")
    )
}

fn positive_days(days: i32, action: &str) -> S3Result<u32> {
    u32::try_from(days)
        .ok()
        .filter(|days| *days > 0)
        .ok_or_else(|| invalid_argument(&format!("'Days' for {action} action must be a positive integer")))
}

/// A filter's tags; a key named twice is refused as S3 refuses it.
fn tags_of(tags: &[Tag]) -> S3Result<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    for tag in tags {
        let key = tag.key.clone().ok_or_else(malformed_xml)?;
        if out.insert(key, tag.value.clone().unwrap_or_default()).is_some() {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidRequest,
                "Duplicate Tag Keys are not allowed.",
            ));
        }
    }
    Ok(out)
}

fn rule_filter(rule: &LifecycleRule) -> S3Result<RuleFilter> {
    let Some(filter) = &rule.filter else {
        // The legacy rule-level Prefix: S3 requires a Filter without it.
        return Ok(RuleFilter {
            prefix: rule.prefix.clone().ok_or_else(malformed_xml)?,
            ..RuleFilter::default()
        });
    };
    if rule.prefix.is_some() {
        return Err(malformed_xml());
    }
    let set = [
        filter.and.is_some(),
        filter.prefix.is_some(),
        filter.tag.is_some(),
        filter.object_size_greater_than.is_some(),
        filter.object_size_less_than.is_some(),
    ];
    if set.iter().filter(|set| **set).count() > 1 {
        return Err(malformed_xml());
    }
    let mut out = RuleFilter {
        prefix: filter.prefix.clone().unwrap_or_default(),
        size_greater_than: filter.object_size_greater_than,
        size_less_than: filter.object_size_less_than,
        ..RuleFilter::default()
    };
    if let Some(tag) = &filter.tag {
        out.tags = tags_of(std::slice::from_ref(tag))?;
    }
    if let Some(and) = &filter.and {
        // `And` joins two or more conditions (S3's schema): one alone is a plain filter.
        let conditions = usize::from(and.prefix.is_some())
            + and.tags.as_ref().map_or(0, Vec::len)
            + usize::from(and.object_size_greater_than.is_some())
            + usize::from(and.object_size_less_than.is_some());
        if conditions < 2 {
            return Err(malformed_xml());
        }
        out.prefix = and.prefix.clone().unwrap_or_default();
        out.tags = tags_of(and.tags.as_deref().unwrap_or_default())?;
        out.size_greater_than = and.object_size_greater_than;
        out.size_less_than = and.object_size_less_than;
    }
    if let (Some(min), Some(max)) = (out.size_greater_than, out.size_less_than)
        && min >= max
    {
        return Err(invalid_argument(
            "ObjectSizeGreaterThan must be less than ObjectSizeLessThan",
        ));
    }
    Ok(out)
}

fn rule_from(rule: &LifecycleRule) -> S3Result<store::LifecycleRule> {
    let id = rule.id.clone().unwrap_or_default();
    if id.len() > 255 {
        return Err(invalid_argument("ID length should not exceed allowed limit of 255"));
    }
    let enabled = match rule.status.as_str() {
        ExpirationStatus::ENABLED => true,
        ExpirationStatus::DISABLED => false,
        _ => return Err(malformed_xml()),
    };
    let transitions = rule.transitions.as_deref().unwrap_or_default();
    let noncurrent_transitions = rule.noncurrent_version_transitions.as_deref().unwrap_or_default();
    // A transition is checked as S3 checks it before it is refused: a client that sent a bad
    // one hears what is wrong with it (400), not only that pgvs3 has no other storage class.
    for transition in transitions {
        transition_from(transition)?;
    }
    for transition in noncurrent_transitions {
        if transition.storage_class.is_none() {
            return Err(malformed_xml());
        }
        if transition.noncurrent_days.ok_or_else(malformed_xml)? < 0 {
            return Err(invalid_argument(
                "'NoncurrentDays' for NoncurrentVersionTransition action must be a nonnegative integer",
            ));
        }
    }
    if !transitions.is_empty() || !noncurrent_transitions.is_empty() {
        return Err(S3Error::with_message(
            S3ErrorCode::NotImplemented,
            "Lifecycle transitions are not implemented: pgvs3 has one storage class",
        ));
    }
    let filter = rule_filter(rule)?;
    let expiration = rule
        .expiration
        .as_ref()
        .map(|expiration| expiration_from(expiration, &filter))
        .transpose()?;
    let noncurrent = rule
        .noncurrent_version_expiration
        .as_ref()
        .map(noncurrent_from)
        .transpose()?;
    let abort_incomplete_after_days = match &rule.abort_incomplete_multipart_upload {
        None => None,
        Some(abort) => {
            if !filter.tags.is_empty() {
                return Err(invalid_argument(
                    "AbortIncompleteMultipartUpload cannot be specified with Tags.",
                ));
            }
            Some(positive_days(
                abort.days_after_initiation.ok_or_else(malformed_xml)?,
                "AbortIncompleteMultipartUpload",
            )?)
        }
    };
    if expiration.is_none() && noncurrent.is_none() && abort_incomplete_after_days.is_none() {
        return Err(invalid_argument("At least one action needs to be specified in a rule"));
    }
    Ok(store::LifecycleRule {
        id,
        enabled,
        filter,
        expiration,
        noncurrent,
        abort_incomplete_after_days,
        rule_prefix: rule.filter.is_none() && rule.prefix.is_some(),
    })
}

/// A lifecycle `Date`, in seconds since the epoch: S3 takes midnight GMT only.
fn midnight(date: &Timestamp) -> S3Result<i64> {
    let at = to_system_time(&Some(date.clone())).ok_or_else(malformed_xml)?;
    let secs = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    if secs % 86_400 != 0 {
        return Err(invalid_argument("'Date' must be at midnight GMT"));
    }
    Ok(secs as i64)
}

/// A rule's Transition, as S3 validates it: a storage class, and exactly one of Days (zero or
/// more) and Date (at midnight GMT).
fn transition_from(transition: &Transition) -> S3Result<()> {
    if transition.storage_class.is_none() {
        return Err(malformed_xml());
    }
    match (transition.days, &transition.date) {
        (Some(days), None) if days < 0 => Err(invalid_argument(
            "'Days' for Transition action must be a nonnegative integer",
        )),
        (Some(_), None) => Ok(()),
        (None, Some(date)) => midnight(date).map(drop),
        _ => Err(malformed_xml()),
    }
}

/// A rule's Expiration, as S3 validates it: exactly one of Days, Date (at midnight GMT) and
/// ExpiredObjectDeleteMarker (which no tag filter may go with).
fn expiration_from(expiration: &LifecycleExpiration, filter: &RuleFilter) -> S3Result<store::Expiration> {
    let marker = expiration.expired_object_delete_marker.unwrap_or(false);
    let date = expiration.date.as_ref().map(midnight).transpose()?;
    let days = expiration
        .days
        .map(|days| positive_days(days, "Expiration"))
        .transpose()?;
    let actions = usize::from(days.is_some()) + usize::from(date.is_some()) + usize::from(marker);
    if actions != 1 && !(actions == 0 && expiration.expired_object_delete_marker == Some(false)) {
        return Err(malformed_xml());
    }
    if marker && !filter.tags.is_empty() {
        return Err(invalid_argument(
            "ExpiredObjectDeleteMarker cannot be specified with object tags",
        ));
    }
    Ok(store::Expiration {
        days,
        date,
        expired_delete_marker: marker,
    })
}

/// A rule's NoncurrentVersionExpiration: its days, and how many newer versions it keeps (1–100).
fn noncurrent_from(noncurrent: &NoncurrentVersionExpiration) -> S3Result<NoncurrentExpiration> {
    Ok(NoncurrentExpiration {
        days: positive_days(
            noncurrent.noncurrent_days.ok_or_else(malformed_xml)?,
            "NoncurrentVersionExpiration",
        )?,
        newer_versions: noncurrent
            .newer_noncurrent_versions
            .map(|n| {
                u32::try_from(n)
                    .ok()
                    .filter(|n| (1..=100).contains(n))
                    .ok_or_else(|| invalid_argument("NewerNoncurrentVersions must be between 1 and 100"))
            })
            .transpose()?,
    })
}

/// A lifecycle configuration from its XML, as S3 validates it. Rules without an ID get one.
fn lifecycle_from(xml: &BucketLifecycleConfiguration) -> S3Result<Lifecycle> {
    if xml.rules.is_empty() || xml.rules.len() > MAX_RULES {
        return Err(malformed_xml());
    }
    let mut rules = Vec::with_capacity(xml.rules.len());
    for (n, rule) in xml.rules.iter().enumerate() {
        let mut rule = rule_from(rule)?;
        if rule.id.is_empty() {
            rule.id = format!("rule-{}", n + 1);
        }
        if rules.iter().any(|r: &store::LifecycleRule| r.id == rule.id) {
            return Err(invalid_argument(
                "Rule ID must be unique. Found same ID for more than one rule",
            ));
        }
        rules.push(rule);
    }
    Ok(Lifecycle { rules })
}

fn tag(key: &str, value: &str) -> Tag {
    Tag {
        key: Some(key.to_owned()),
        value: Some(value.to_owned()),
    }
}

fn filter_xml(filter: &RuleFilter) -> LifecycleRuleFilter {
    let conditions = usize::from(!filter.prefix.is_empty())
        + filter.tags.len()
        + usize::from(filter.size_greater_than.is_some())
        + usize::from(filter.size_less_than.is_some());
    if conditions > 1 {
        return LifecycleRuleFilter {
            and: Some(LifecycleRuleAndOperator {
                prefix: (!filter.prefix.is_empty()).then(|| filter.prefix.clone()),
                tags: (!filter.tags.is_empty()).then(|| filter.tags.iter().map(|(k, v)| tag(k, v)).collect()),
                object_size_greater_than: filter.size_greater_than,
                object_size_less_than: filter.size_less_than,
            }),
            ..Default::default()
        };
    }
    // One condition, or none (every object: an empty Prefix, as it was most likely sent).
    LifecycleRuleFilter {
        prefix: Some(filter.prefix.clone()).filter(|_| conditions == 0 || !filter.prefix.is_empty()),
        tag: filter.tags.iter().next().map(|(k, v)| tag(k, v)),
        object_size_greater_than: filter.size_greater_than,
        object_size_less_than: filter.size_less_than,
        ..Default::default()
    }
}

fn rule_xml(rule: &store::LifecycleRule) -> LifecycleRule {
    LifecycleRule {
        id: Some(rule.id.clone()),
        status: ExpirationStatus::from_static(if rule.enabled {
            ExpirationStatus::ENABLED
        } else {
            ExpirationStatus::DISABLED
        }),
        filter: (!rule.rule_prefix).then(|| filter_xml(&rule.filter)),
        expiration: rule.expiration.as_ref().map(|e| LifecycleExpiration {
            days: e.days.map(|d| d as i32),
            date: e
                .date
                .map(|secs| timestamp(SystemTime::UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64))),
            expired_object_delete_marker: e.expired_delete_marker.then_some(true),
        }),
        noncurrent_version_expiration: rule.noncurrent.as_ref().map(|n| NoncurrentVersionExpiration {
            noncurrent_days: Some(n.days as i32),
            newer_noncurrent_versions: n.newer_versions.map(|n| n as i32),
        }),
        abort_incomplete_multipart_upload: rule.abort_incomplete_after_days.map(|days| {
            AbortIncompleteMultipartUpload {
                days_after_initiation: Some(days as i32),
            }
        }),
        prefix: rule.rule_prefix.then(|| rule.filter.prefix.clone()),
        transitions: None,
        noncurrent_version_transitions: None,
    }
}

pub(super) async fn put_bucket_lifecycle_configuration(
    cx: RequestContext<'_>,
    req: S3Request<PutBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
    let xml = req.input.lifecycle_configuration.as_ref().ok_or_else(malformed_xml)?;
    let lifecycle = lifecycle_from(xml)?;
    let bucket = &cx.bucket;
    bucket
        .set_lifecycle(Some(&lifecycle))
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutBucketLifecycleConfigurationOutput::default()))
}

pub(super) async fn get_bucket_lifecycle_configuration(
    cx: RequestContext<'_>,
    req: S3Request<GetBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
    let bucket = &cx.bucket;
    let lifecycle = bucket.lifecycle().map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
        rules: Some(lifecycle.rules.iter().map(rule_xml).collect()),
        ..Default::default()
    }))
}

pub(super) async fn delete_bucket_lifecycle(
    cx: RequestContext<'_>,
    req: S3Request<DeleteBucketLifecycleInput>,
) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
    let bucket = &cx.bucket;
    bucket.set_lifecycle(None).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(DeleteBucketLifecycleOutput::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str) -> LifecycleRule {
        LifecycleRule {
            id: Some(id.into()),
            status: ExpirationStatus::from_static(ExpirationStatus::ENABLED),
            filter: Some(LifecycleRuleFilter {
                prefix: Some("logs/".into()),
                ..Default::default()
            }),
            expiration: Some(LifecycleExpiration {
                days: Some(30),
                ..Default::default()
            }),
            abort_incomplete_multipart_upload: None,
            noncurrent_version_expiration: None,
            noncurrent_version_transitions: None,
            prefix: None,
            transitions: None,
        }
    }

    fn code(rules: Vec<LifecycleRule>) -> String {
        lifecycle_from(&BucketLifecycleConfiguration { rules })
            .unwrap_err()
            .code()
            .as_str()
            .to_owned()
    }

    #[test]
    fn rules_round_trip_and_are_checked_as_s3_checks_them() {
        let mut tagged = rule("tagged");
        tagged.filter = Some(LifecycleRuleFilter {
            and: Some(LifecycleRuleAndOperator {
                prefix: Some("p/".into()),
                tags: Some(vec![tag("k", "v")]),
                object_size_greater_than: Some(10),
                object_size_less_than: None,
            }),
            ..Default::default()
        });
        tagged.noncurrent_version_expiration = Some(NoncurrentVersionExpiration {
            noncurrent_days: Some(7),
            newer_noncurrent_versions: Some(2),
        });
        let mut big = rule("big");
        big.filter = Some(LifecycleRuleFilter {
            object_size_greater_than: Some(2000),
            ..Default::default()
        });
        let lifecycle = lifecycle_from(&BucketLifecycleConfiguration {
            rules: vec![rule("logs"), tagged, big],
        })
        .unwrap();
        let again = lifecycle_from(&BucketLifecycleConfiguration {
            rules: lifecycle.rules.iter().map(rule_xml).collect(),
        })
        .unwrap();
        assert_eq!(again, lifecycle);

        assert_eq!(code(vec![rule("a"), rule("a")]), "InvalidArgument");
        let mut zero = rule("z");
        zero.expiration.as_mut().unwrap().days = Some(0);
        assert_eq!(code(vec![zero]), "InvalidArgument");
        let mut empty = rule("e");
        empty.expiration = None;
        assert_eq!(code(vec![empty]), "InvalidArgument");
        let mut both = rule("b");
        both.expiration.as_mut().unwrap().expired_object_delete_marker = Some(true);
        assert_eq!(code(vec![both]), "MalformedXML");
        let mut noon = rule("n");
        noon.expiration = Some(LifecycleExpiration {
            date: Some(timestamp(SystemTime::UNIX_EPOCH + Duration::from_secs(43_200))),
            ..Default::default()
        });
        assert_eq!(code(vec![noon]), "InvalidArgument");
        let transition = |days: Option<i32>, secs: Option<u64>| {
            let mut rule = rule("t");
            rule.transitions = Some(vec![Transition {
                days,
                date: secs.map(|secs| timestamp(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))),
                storage_class: Some(TransitionStorageClass::from_static(TransitionStorageClass::GLACIER)),
            }]);
            rule
        };
        assert_eq!(code(vec![transition(Some(30), None)]), "NotImplemented");
        assert_eq!(code(vec![transition(None, Some(86_400 * 19_000))]), "NotImplemented");
        // boto reads `'Date': '20220927'` as seconds since the epoch: not at midnight.
        assert_eq!(code(vec![transition(None, Some(20_220_927))]), "InvalidArgument");
        assert_eq!(code(vec![transition(Some(-1), None)]), "InvalidArgument");
        assert_eq!(code(vec![transition(Some(1), Some(0))]), "MalformedXML");
        let mut classless = transition(Some(30), None);
        classless.transitions.as_mut().unwrap()[0].storage_class = None;
        assert_eq!(code(vec![classless]), "MalformedXML");
        let filtered = |and: LifecycleRuleAndOperator| {
            let mut rule = rule("f");
            rule.filter = Some(LifecycleRuleFilter {
                and: Some(and),
                ..Default::default()
            });
            rule
        };
        let twice = filtered(LifecycleRuleAndOperator {
            tags: Some(vec![tag("k", "v"), tag("k", "w")]),
            ..Default::default()
        });
        assert_eq!(code(vec![twice]), "InvalidRequest");
        let alone = filtered(LifecycleRuleAndOperator {
            tags: Some(vec![tag("k", "v")]),
            ..Default::default()
        });
        assert_eq!(code(vec![alone]), "MalformedXML");
        let mut unfiltered = rule("u");
        unfiltered.filter = None;
        assert_eq!(code(vec![unfiltered]), "MalformedXML");
        let tags_only = filtered(LifecycleRuleAndOperator {
            tags: Some(vec![tag("k", "v"), tag("l", "w")]),
            ..Default::default()
        });
        assert!(lifecycle_from(&BucketLifecycleConfiguration { rules: vec![tags_only] }).is_ok());
        assert_eq!(code(vec![]), "MalformedXML");
    }
}
