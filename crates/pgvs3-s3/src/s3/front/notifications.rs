//! Bucket notifications on the wire: Put/GetBucketNotificationConfiguration. Queue
//! configurations name an OJS queue of this database (`arn:pgvs3:ojs:::<queue>`, the bucket
//! owner's tenant's, or `arn:pgvs3:ojs::<tenant>:<queue>`) or, as MinIO
//! puts every target among its queues, a registered webhook target
//! (`arn:pgvs3:webhook:::<name>`) or a RESP pub/sub channel (`arn:pgvs3:pubsub:::<channel>`);
//! topics, Lambda functions and EventBridge have no counterpart here and are refused, never
//! stored as if they would fire.

use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::context::RequestContext;
use super::wire::fail;
use crate::store::{MAX_NOTIFICATION_RULES, NotificationRule, Notifications, RuleError};

fn invalid_argument(message: String) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidArgument, message)
}

/// A refused rule as S3 answers it.
fn refused(err: RuleError) -> S3Error {
    match err {
        RuleError::NoEvents => S3Error::with_message(
            S3ErrorCode::MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema.",
        ),
        RuleError::UnsupportedEvent(_) => S3Error::with_message(S3ErrorCode::NotImplemented, err.to_string()),
        RuleError::UnknownDestination(_) | RuleError::DuplicateId(_) | RuleError::TooManyRules => {
            invalid_argument(err.to_string())
        }
    }
}

fn rule_from(n: usize, config: &QueueConfiguration) -> S3Result<NotificationRule> {
    let (mut prefix, mut suffix) = (None, None);
    let rules = config
        .filter
        .as_ref()
        .and_then(|filter| filter.key.as_ref())
        .and_then(|key| key.filter_rules.as_ref());
    for rule in rules.into_iter().flatten() {
        let name = rule.name.as_ref().map(|name| name.as_str().to_ascii_lowercase());
        let slot = match name.as_deref() {
            Some("prefix") => &mut prefix,
            Some("suffix") => &mut suffix,
            _ => {
                return Err(invalid_argument(
                    "filter rule name must be either prefix or suffix".into(),
                ));
            }
        };
        if slot.is_some() {
            return Err(invalid_argument(
                "Cannot specify more than one prefix rule in a filter.".into(),
            ));
        }
        *slot = Some(rule.value.clone().unwrap_or_default());
    }
    let events: Vec<&str> = config.events.iter().map(|event| event.as_ref()).collect();
    NotificationRule::new(
        config.id.clone().unwrap_or_else(|| format!("notification-{}", n + 1)),
        config.queue_arn.as_str(),
        &events,
        prefix.unwrap_or_default(),
        suffix.unwrap_or_default(),
    )
    .map_err(refused)
}

fn rules_from(config: &NotificationConfiguration) -> S3Result<Notifications> {
    let unsupported = [
        config.topic_configurations.as_ref().is_some_and(|t| !t.is_empty()),
        config
            .lambda_function_configurations
            .as_ref()
            .is_some_and(|l| !l.is_empty()),
        config.event_bridge_configuration.is_some(),
    ];
    if unsupported.iter().any(|set| *set) {
        return Err(S3Error::with_message(
            S3ErrorCode::NotImplemented,
            "Only queue configurations (OJS queues, arn:pgvs3:ojs:::<queue>) are supported",
        ));
    }
    let queues = config.queue_configurations.as_deref().unwrap_or_default();
    // Checked before parsing each, so a huge list costs nothing more.
    if queues.len() > MAX_NOTIFICATION_RULES {
        return Err(refused(RuleError::TooManyRules));
    }
    let rules = queues
        .iter()
        .enumerate()
        .map(|(n, queue)| rule_from(n, queue))
        .collect::<S3Result<_>>()?;
    Notifications::new(rules).map_err(refused)
}

fn queue_xml(rule: &NotificationRule) -> QueueConfiguration {
    let mut filter_rules = Vec::new();
    for (name, value) in [("prefix", &rule.prefix), ("suffix", &rule.suffix)] {
        if !value.is_empty() {
            filter_rules.push(FilterRule {
                name: Some(FilterRuleName::from(name.to_owned())),
                value: Some(value.clone()),
            });
        }
    }
    let filter = match filter_rules.is_empty() {
        true => None,
        false => Some(NotificationConfigurationFilter {
            key: Some(S3KeyFilter {
                filter_rules: Some(filter_rules),
            }),
        }),
    };
    QueueConfiguration {
        id: Some(rule.id.clone()),
        queue_arn: rule.arn(),
        events: rule.events.iter().map(|event| Event::from(event.clone())).collect(),
        filter,
    }
}

pub(super) async fn put_bucket_notification_configuration(
    cx: RequestContext<'_>,
    req: S3Request<PutBucketNotificationConfigurationInput>,
) -> S3Result<S3Response<PutBucketNotificationConfigurationOutput>> {
    let rules = rules_from(&req.input.notification_configuration)?;
    cx.bucket
        .set_notifications(&cx.principal, &rules)
        .await
        .map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(PutBucketNotificationConfigurationOutput::default()))
}

pub(super) async fn get_bucket_notification_configuration(
    cx: RequestContext<'_>,
    req: S3Request<GetBucketNotificationConfigurationInput>,
) -> S3Result<S3Response<GetBucketNotificationConfigurationOutput>> {
    let bucket = &cx.bucket;
    let rules = bucket.notifications().await.map_err(|e| fail(&req, e))?;
    Ok(S3Response::new(GetBucketNotificationConfigurationOutput {
        queue_configurations: (!rules.rules.is_empty()).then(|| rules.rules.iter().map(queue_xml).collect()),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(arn: &str, events: &[&str]) -> QueueConfiguration {
        QueueConfiguration {
            id: Some("r".into()),
            queue_arn: arn.into(),
            events: events.iter().map(|e| Event::from((*e).to_owned())).collect(),
            filter: None,
        }
    }

    fn code(config: NotificationConfiguration) -> String {
        rules_from(&config).unwrap_err().code().as_str().to_owned()
    }

    #[test]
    fn configurations_are_checked() {
        let good = NotificationConfiguration {
            queue_configurations: Some(vec![queue("arn:pgvs3:ojs:::uploads", &["s3:ObjectCreated:*"])]),
            ..Default::default()
        };
        let rules = rules_from(&good).unwrap();
        assert_eq!(rules.rules[0].queue, "uploads");
        assert_eq!(queue_xml(&rules.rules[0]).queue_arn, "arn:pgvs3:ojs:::uploads");
        let hook = NotificationConfiguration {
            queue_configurations: Some(vec![queue("arn:pgvs3:webhook:::audit", &["s3:ObjectCreated:*"])]),
            ..Default::default()
        };
        let rules = rules_from(&hook).unwrap();
        assert_eq!(
            (rules.rules[0].queue.as_str(), rules.rules[0].webhook.as_str()),
            ("", "audit")
        );
        assert_eq!(queue_xml(&rules.rules[0]).queue_arn, "arn:pgvs3:webhook:::audit");
        let channel = NotificationConfiguration {
            queue_configurations: Some(vec![queue("arn:pgvs3:pubsub:::s3:uploads", &["s3:ObjectCreated:*"])]),
            ..Default::default()
        };
        let rules = rules_from(&channel).unwrap();
        assert_eq!(rules.rules[0].channel, "s3:uploads");
        assert_eq!(queue_xml(&rules.rules[0]).queue_arn, "arn:pgvs3:pubsub:::s3:uploads");
        let long = format!(
            "arn:pgvs3:pubsub:::{}",
            "c".repeat(pgvs3_catalog::notifications::MAX_CHANNEL + 1)
        );
        for bad in ["arn:pgvs3:pubsub:::", "arn:pgvs3:pubsub:::a\nb", long.as_str()] {
            let config = NotificationConfiguration {
                queue_configurations: Some(vec![queue(bad, &["s3:ObjectCreated:*"])]),
                ..Default::default()
            };
            assert_eq!(code(config), "InvalidArgument", "{bad:?}");
        }
        let foreign = NotificationConfiguration {
            queue_configurations: Some(vec![queue("arn:aws:sqs:us-east-1:1:q", &["s3:ObjectCreated:*"])]),
            ..Default::default()
        };
        assert_eq!(code(foreign), "InvalidArgument");
        let restore = NotificationConfiguration {
            queue_configurations: Some(vec![queue("arn:pgvs3:ojs:::q", &["s3:ObjectRestore:*"])]),
            ..Default::default()
        };
        assert_eq!(code(restore), "NotImplemented");
        let twice = NotificationConfiguration {
            queue_configurations: Some(vec![
                queue("arn:pgvs3:ojs:::a", &["s3:ObjectCreated:*"]),
                queue("arn:pgvs3:ojs:::b", &["s3:ObjectCreated:*"]),
            ]),
            ..Default::default()
        };
        assert_eq!(code(twice), "InvalidArgument");
        let topic = NotificationConfiguration {
            topic_configurations: Some(vec![TopicConfiguration {
                events: vec![Event::from("s3:ObjectCreated:*".to_owned())],
                filter: None,
                id: None,
                topic_arn: "arn:aws:sns:us-east-1:1:t".into(),
            }]),
            ..Default::default()
        };
        assert_eq!(code(topic), "NotImplemented");
    }
}
