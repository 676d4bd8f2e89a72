//! S3 object lock on the wire: the `x-amz-object-lock-*` headers of writes, the lock headers of
//! reads, and the bucket lock configuration, retention and legal hold operations.

use std::time::SystemTime;

use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::context::RequestContext;
use super::wire::{fail, timestamp, to_system_time};
use crate::store::{DefaultRetention, LockConfig, LockMode, ObjectHead, RequestedLock, Retention, RetentionPeriod};

fn invalid_argument(message: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidArgument, message.to_owned())
}

fn malformed_xml() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::MalformedXML,
        "The XML you provided was not well-formed or did not validate against our published schema.",
    )
}

/// The lock a write asks for: `x-amz-object-lock-mode` with `-retain-until-date` (both or
/// neither) and `-legal-hold`, checked as S3 checks them.
pub(super) fn requested_lock(
    mode: &Option<ObjectLockMode>,
    until: &Option<Timestamp>,
    legal_hold: &Option<ObjectLockLegalHoldStatus>,
) -> S3Result<RequestedLock> {
    let retention = match (mode, to_system_time(until)) {
        (None, None) => None,
        (Some(mode), Some(until)) => {
            let mode = LockMode::parse(mode.as_str()).ok_or_else(|| invalid_argument("Unknown wormMode directive."))?;
            if until <= SystemTime::now() {
                return Err(invalid_argument("The retain until date must be in the future!"));
            }
            Some(Retention { mode, until })
        }
        _ => {
            return Err(invalid_argument(
                "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be supplied",
            ));
        }
    };
    let legal_hold = legal_hold
        .as_ref()
        .map(|status| legal_hold_on(status.as_str()))
        .transpose()
        .map_err(|_| invalid_argument("Legal Hold must be either of 'ON' or 'OFF'"))?;
    Ok(RequestedLock { retention, legal_hold })
}

fn legal_hold_on(status: &str) -> Result<bool, ()> {
    match status {
        "ON" => Ok(true),
        "OFF" => Ok(false),
        _ => Err(()),
    }
}

/// The lock headers of a GET or HEAD answer: the version's retention and legal hold.
pub(super) fn lock_fields(
    head: &ObjectHead,
) -> (
    Option<ObjectLockMode>,
    Option<Timestamp>,
    Option<ObjectLockLegalHoldStatus>,
) {
    let retention = head.meta.retention.as_ref();
    (
        retention.map(|r| ObjectLockMode::from(r.mode.as_str().to_owned())),
        retention.map(|r| timestamp(r.until)),
        head.meta
            .legal_hold
            .map(|on| ObjectLockLegalHoldStatus::from(if on { "ON" } else { "OFF" }.to_owned())),
    )
}

/// A bucket's lock configuration from its XML, as S3 validates it.
fn lock_config(xml: &ObjectLockConfiguration) -> S3Result<LockConfig> {
    if xml.object_lock_enabled.as_ref().map(|e| e.as_str()) != Some(ObjectLockEnabled::ENABLED) {
        return Err(malformed_xml());
    }
    let Some(rule) = &xml.rule else {
        return Ok(LockConfig::default());
    };
    let Some(default) = &rule.default_retention else {
        return Err(malformed_xml());
    };
    let mode = default
        .mode
        .as_ref()
        .and_then(|mode| LockMode::parse(mode.as_str()))
        .ok_or_else(malformed_xml)?;
    let positive = |n: i32| {
        u32::try_from(n)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| invalid_argument("Default retention period must be a positive integer value"))
    };
    let period = match (default.days, default.years) {
        (Some(days), None) => RetentionPeriod::Days(positive(days)?),
        (None, Some(years)) => RetentionPeriod::Years(positive(years)?),
        _ => return Err(malformed_xml()),
    };
    Ok(LockConfig {
        default: Some(DefaultRetention { mode, period }),
    })
}

fn lock_config_xml(config: &LockConfig) -> ObjectLockConfiguration {
    ObjectLockConfiguration {
        object_lock_enabled: Some(ObjectLockEnabled::from_static(ObjectLockEnabled::ENABLED)),
        rule: config.default.map(|default| {
            let (days, years) = match default.period {
                RetentionPeriod::Days(days) => (Some(days as i32), None),
                RetentionPeriod::Years(years) => (None, Some(years as i32)),
            };
            ObjectLockRule {
                default_retention: Some(s3s::dto::DefaultRetention {
                    mode: Some(ObjectLockRetentionMode::from(default.mode.as_str().to_owned())),
                    days,
                    years,
                }),
            }
        }),
    }
}

/// `x-amz-bypass-governance-retention`: the request may remove or weaken a GOVERNANCE
/// retention. The access check required `s3:BypassGovernanceRetention` of it (authorize.rs):
/// the bucket's owner has it, a policy may grant or deny it.
pub(super) fn bypasses_governance(header: &Option<bool>) -> bool {
    header.unwrap_or(false)
}

pub(super) async fn put_object_lock_configuration(
    cx: RequestContext<'_>,
    req: S3Request<PutObjectLockConfigurationInput>,
) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
    if req.input.token.is_some() {
        return Err(s3s::s3_error!(NotImplemented, "Object lock tokens are not supported"));
    }
    let config = lock_config(req.input.object_lock_configuration.as_ref().ok_or_else(malformed_xml)?)?;
    let bucket = &cx.bucket;
    bucket.set_object_lock(&config).await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
}

pub(super) async fn get_object_lock_configuration(
    cx: RequestContext<'_>,
    req: S3Request<GetObjectLockConfigurationInput>,
) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
    let bucket = &cx.bucket;
    let config = bucket.object_lock().map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(GetObjectLockConfigurationOutput {
        object_lock_configuration: Some(lock_config_xml(config)),
    }))
}

pub(super) async fn put_object_retention(
    cx: RequestContext<'_>,
    req: S3Request<PutObjectRetentionInput>,
) -> S3Result<S3Response<PutObjectRetentionOutput>> {
    let input = &req.input;
    // An empty <Retention/> removes the retention (governance bypass permitting).
    let retention = match &input.retention {
        Some(ObjectLockRetention {
            mode: Some(mode),
            retain_until_date: Some(until),
        }) => Some(Retention {
            mode: LockMode::parse(mode.as_str()).ok_or_else(malformed_xml)?,
            until: to_system_time(&Some(until.clone())).ok_or_else(malformed_xml)?,
        }),
        Some(ObjectLockRetention {
            mode: None,
            retain_until_date: None,
        }) => None,
        _ => return Err(malformed_xml()),
    };
    let bucket = &cx.bucket;
    bucket
        .set_retention(
            &input.key,
            input.version_id.as_deref(),
            retention,
            bypasses_governance(&input.bypass_governance_retention),
        )
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutObjectRetentionOutput::default()))
}

pub(super) async fn get_object_retention(
    cx: RequestContext<'_>,
    req: S3Request<GetObjectRetentionInput>,
) -> S3Result<S3Response<GetObjectRetentionOutput>> {
    let input = &req.input;
    let bucket = &cx.bucket;
    let retention = bucket
        .retention(&input.key, input.version_id.as_deref())
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(GetObjectRetentionOutput {
        retention: Some(ObjectLockRetention {
            mode: Some(ObjectLockRetentionMode::from(retention.mode.as_str().to_owned())),
            retain_until_date: Some(timestamp(retention.until)),
        }),
    }))
}

pub(super) async fn put_object_legal_hold(
    cx: RequestContext<'_>,
    req: S3Request<PutObjectLegalHoldInput>,
) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
    let input = &req.input;
    let on = input
        .legal_hold
        .as_ref()
        .and_then(|hold| hold.status.as_ref())
        .ok_or_else(malformed_xml)
        .and_then(|status| legal_hold_on(status.as_str()).map_err(|_| malformed_xml()))?;
    let bucket = &cx.bucket;
    bucket
        .set_legal_hold(&input.key, input.version_id.as_deref(), on)
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
}

pub(super) async fn get_object_legal_hold(
    cx: RequestContext<'_>,
    req: S3Request<GetObjectLegalHoldInput>,
) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
    let input = &req.input;
    let bucket = &cx.bucket;
    let on = bucket
        .legal_hold(&input.key, input.version_id.as_deref())
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(GetObjectLegalHoldOutput {
        legal_hold: Some(ObjectLockLegalHold {
            status: Some(ObjectLockLegalHoldStatus::from(
                if on { "ON" } else { "OFF" }.to_owned(),
            )),
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xml(mode: &str, days: Option<i32>, years: Option<i32>) -> ObjectLockConfiguration {
        ObjectLockConfiguration {
            object_lock_enabled: Some(ObjectLockEnabled::from_static(ObjectLockEnabled::ENABLED)),
            rule: Some(ObjectLockRule {
                default_retention: Some(s3s::dto::DefaultRetention {
                    mode: Some(ObjectLockRetentionMode::from(mode.to_owned())),
                    days,
                    years,
                }),
            }),
        }
    }

    fn code(result: S3Result<LockConfig>) -> String {
        result.unwrap_err().code().as_str().to_owned()
    }

    #[test]
    fn lock_configurations_are_checked_as_s3_checks_them() {
        let config = lock_config(&xml("GOVERNANCE", Some(3), None)).unwrap();
        assert_eq!(lock_config(&lock_config_xml(&config)).unwrap(), config);
        assert_eq!(code(lock_config(&xml("GOVERNANCE", Some(1), Some(1)))), "MalformedXML");
        assert_eq!(code(lock_config(&xml("GOVERNANCE", None, None))), "MalformedXML");
        assert_eq!(code(lock_config(&xml("FOREVER", Some(1), None))), "MalformedXML");
        assert_eq!(code(lock_config(&xml("COMPLIANCE", Some(0), None))), "InvalidArgument");
        assert_eq!(code(lock_config(&xml("COMPLIANCE", None, Some(-1)))), "InvalidArgument");
        let disabled = ObjectLockConfiguration {
            object_lock_enabled: None,
            rule: None,
        };
        assert_eq!(code(lock_config(&disabled)), "MalformedXML");
    }

    #[test]
    fn write_headers_come_in_pairs() {
        let mode = Some(ObjectLockMode::from("GOVERNANCE".to_owned()));
        let later = Some(timestamp(SystemTime::now() + std::time::Duration::from_secs(60)));
        let earlier = Some(timestamp(SystemTime::now() - std::time::Duration::from_secs(60)));
        assert!(requested_lock(&mode, &later, &None).unwrap().retention.is_some());
        let code = |r: S3Result<RequestedLock>| r.unwrap_err().code().as_str().to_owned();
        assert_eq!(code(requested_lock(&mode, &None, &None)), "InvalidArgument");
        assert_eq!(code(requested_lock(&None, &later, &None)), "InvalidArgument");
        assert_eq!(code(requested_lock(&mode, &earlier, &None)), "InvalidArgument");
        let bad_mode = Some(ObjectLockMode::from("WORM".to_owned()));
        assert_eq!(code(requested_lock(&bad_mode, &later, &None)), "InvalidArgument");
        let hold = Some(ObjectLockLegalHoldStatus::from("ON".to_owned()));
        assert_eq!(requested_lock(&None, &None, &hold).unwrap().legal_hold, Some(true));
    }
}
