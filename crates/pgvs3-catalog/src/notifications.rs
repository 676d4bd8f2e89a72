//! Bucket notification rules as the catalog stores them (`pgvs3.buckets.notifications`, read by
//! the event triggers of functions/objects.sql) and as both writers build them: S3's
//! PutBucketNotificationConfiguration and the operator's Bucket `notifications`. The rule's
//! shape (its destination ARN, its events, unique ids) is checked here; what only the database
//! knows (the bucket, a webhook target being registered) by `pgvs3.put_bucket_notifications`,
//! which also installs the namespace's event triggers.

use std::fmt;

use serde::{Deserialize, Serialize};
use tokio_postgres::GenericClient;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Json;

use crate::{ErrorKind, Refusal, Refusals, Result, classify};

/// A bucket's notification configuration as stored: the SQL trigger reads these field names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notifications {
    pub rules: Vec<NotificationRule>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotificationRule {
    pub id: String,
    /// The OJS queue each event's job goes to (empty for a webhook target's rule).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub queue: String,
    /// The OJS tenant whose queue that is, when the ARN names one (`arn:pgvs3:ojs::<tenant>:<queue>`);
    /// empty: the bucket owner's. Only the root key's buckets may name another tenant's
    /// (`pgvs3.put_bucket_notifications` checks it; the event trigger resolves it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    /// The webhook target (`pgvs3.webhook_targets`) each event is delivered to, instead of a queue.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub webhook: String,
    /// The RESP pub/sub channel each event is published to, instead of a queue.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub channel: String,
    /// S3 event names or `<family>:*` patterns, e.g. `s3:ObjectCreated:*`.
    pub events: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub suffix: String,
}

/// The events pgvs3 raises, and the patterns that select them.
pub const EVENTS: &[&str] = &[
    "s3:ObjectCreated:*",
    "s3:ObjectCreated:Put",
    "s3:ObjectCreated:Post",
    "s3:ObjectCreated:Copy",
    "s3:ObjectCreated:CompleteMultipartUpload",
    "s3:ObjectRemoved:*",
    "s3:ObjectRemoved:Delete",
    "s3:ObjectRemoved:DeleteMarkerCreated",
    "s3:LifecycleExpiration:*",
    "s3:LifecycleExpiration:Delete",
    "s3:LifecycleExpiration:DeleteMarkerCreated",
];

/// S3's limit on notification configurations per bucket.
pub const MAX_RULES: usize = 100;

/// Why a configuration was refused before it reached the database. Each caller answers it in
/// its own terms (S3 error codes, a Bucket's status condition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleError {
    /// Not `arn:pgvs3:ojs:::<queue>` (or `arn:pgvs3:ojs::<tenant>:<queue>`),
    /// `arn:pgvs3:webhook:::<target>` nor `arn:pgvs3:pubsub:::<channel>`.
    UnknownDestination(String),
    /// A rule without events.
    NoEvents,
    /// An event pgvs3 does not raise.
    UnsupportedEvent(String),
    /// Two rules with one id.
    DuplicateId(String),
    /// More than [`MAX_RULES`] rules.
    TooManyRules,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleError::UnknownDestination(arn) => write!(
                f,
                "Unable to validate the following destination configurations: {arn} \
                 (destinations are arn:pgvs3:ojs:::<queue>, arn:pgvs3:ojs::<tenant>:<queue>, \
                 arn:pgvs3:webhook:::<target> or arn:pgvs3:pubsub:::<channel>)"
            ),
            RuleError::NoEvents => f.write_str("a notification configuration needs at least one event"),
            RuleError::UnsupportedEvent(name) => write!(f, "The event {name} is not raised by pgvs3"),
            RuleError::DuplicateId(_) => {
                f.write_str("Configuration id must be unique within the notification configuration")
            }
            RuleError::TooManyRules => write!(f, "A bucket can have at most {MAX_RULES} notification configurations"),
        }
    }
}

impl std::error::Error for RuleError {}

/// An OJS queue's ARN up to its account field, which names the queue's tenant (empty: the bucket
/// owner's).
const QUEUE_ARN: &str = "arn:pgvs3:ojs::";
const WEBHOOK_ARN: &str = "arn:pgvs3:webhook:::";
const CHANNEL_ARN: &str = "arn:pgvs3:pubsub:::";

/// The longest channel a rule may name. Redis puts no limit on a channel; this one keeps a rule
/// (and each event's NOTIFY payload, which carries the channel) small.
pub const MAX_CHANNEL: usize = 256;

impl NotificationRule {
    /// A rule sending `events` under `prefix` and with `suffix` to the destination `arn`. The
    /// queue's name and the webhook target's registration are the database's to check.
    pub fn new(id: String, arn: &str, events: &[&str], prefix: String, suffix: String) -> Result<Self, RuleError> {
        // A queue name holds no ':' (the database checks its shape), a tenant may.
        let (tenant, queue, webhook, channel) = if let Some((tenant, queue)) = arn
            .strip_prefix(QUEUE_ARN)
            .and_then(|rest| rest.rsplit_once(':'))
            .filter(|(tenant, _)| tenant.is_empty() || valid_tenant(tenant))
        {
            (tenant, queue, "", "")
        } else if let Some(name) = arn.strip_prefix(WEBHOOK_ARN).filter(|name| valid_target_name(name)) {
            ("", "", name, "")
        } else if let Some(channel) = arn.strip_prefix(CHANNEL_ARN).filter(|channel| valid_channel(channel)) {
            ("", "", "", channel)
        } else {
            return Err(RuleError::UnknownDestination(arn.to_owned()));
        };
        if queue.is_empty() && webhook.is_empty() && channel.is_empty() {
            return Err(RuleError::UnknownDestination(arn.to_owned()));
        }
        if events.is_empty() {
            return Err(RuleError::NoEvents);
        }
        if let Some(unsupported) = events.iter().find(|event| !EVENTS.contains(event)) {
            return Err(RuleError::UnsupportedEvent((*unsupported).to_owned()));
        }
        Ok(NotificationRule {
            id,
            queue: queue.to_owned(),
            tenant: tenant.to_owned(),
            webhook: webhook.to_owned(),
            channel: channel.to_owned(),
            events: events.iter().map(|event| (*event).to_owned()).collect(),
            prefix,
            suffix,
        })
    }

    /// The rule's destination ARN, as it was put.
    pub fn arn(&self) -> String {
        if !self.webhook.is_empty() {
            format!("{WEBHOOK_ARN}{}", self.webhook)
        } else if !self.channel.is_empty() {
            format!("{CHANNEL_ARN}{}", self.channel)
        } else {
            format!("{QUEUE_ARN}{}:{}", self.tenant, self.queue)
        }
    }
}

/// A channel a rule may name: any text a SUBSCRIBE can name, but no control characters, since a
/// channel is also written into XML answers and logs.
fn valid_channel(channel: &str) -> bool {
    (1..=MAX_CHANNEL).contains(&channel.len()) && !channel.chars().any(char::is_control)
}

/// An OJS tenant as `X-OJS-Tenant` takes it: 1 to 128 printable ASCII characters, no spaces.
fn valid_tenant(tenant: &str) -> bool {
    (1..=128).contains(&tenant.len()) && tenant.bytes().all(|b| b.is_ascii_graphic())
}

/// A webhook target's name as `pgvs3.webhook_targets` accepts it.
fn valid_target_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl Notifications {
    /// A configuration of `rules`: at most [`MAX_RULES`], each id once.
    pub fn new(rules: Vec<NotificationRule>) -> Result<Self, RuleError> {
        if rules.len() > MAX_RULES {
            return Err(RuleError::TooManyRules);
        }
        for (n, rule) in rules.iter().enumerate() {
            if rules[..n].iter().any(|other| other.id == rule.id) {
                return Err(RuleError::DuplicateId(rule.id.clone()));
            }
        }
        Ok(Notifications { rules })
    }
}

/// Who puts a bucket's rules through S3: the key that asks and the owner its request was
/// authorized against.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// The signing key ('' when unsigned).
    pub access_key: &'a str,
    /// The bucket's owner as the request's authorization saw it (`None`: the root key). The
    /// caller's own key when it owns the bucket.
    pub authorized_owner: Option<&'a str>,
}

/// Replaces the bucket's notification rules (none removes them), as the control API (the
/// operator): no caller to check. A missing bucket is [`ErrorKind::NoSuchBucket`]; an
/// unregistered webhook target or a queue name OJS refuses, [`ErrorKind::UnknownDestination`];
/// a cache bucket, [`ErrorKind::Refused`].
pub async fn put_bucket_notifications(client: &impl GenericClient, bucket: &str, rules: &Notifications) -> Result<()> {
    put(client, bucket, rules, None).await
}

/// [`put_bucket_notifications`] for a key's request (layout v71): unless `caller` is a root
/// key, a bucket whose owner is no longer the one the request was authorized against is
/// [`ErrorKind::AccessDenied`], and a rule may name only the owner's OJS tenant.
pub async fn put_bucket_notifications_as(
    client: &impl GenericClient,
    bucket: &str,
    rules: &Notifications,
    caller: Caller<'_>,
) -> Result<()> {
    put(client, bucket, rules, Some(caller)).await
}

async fn put(
    client: &impl GenericClient,
    bucket: &str,
    rules: &Notifications,
    caller: Option<Caller<'_>>,
) -> Result<()> {
    const REFUSALS: Refusals = &[
        (Refusal::Code(SqlState::NO_DATA_FOUND), ErrorKind::NoSuchBucket),
        (Refusal::Code(SqlState::INSUFFICIENT_PRIVILEGE), ErrorKind::AccessDenied),
        (Refusal::Hint("UnknownDestination"), ErrorKind::UnknownDestination),
        (Refusal::Code(SqlState::FEATURE_NOT_SUPPORTED), ErrorKind::Refused),
    ];
    let rules = Json(&rules.rules);
    match caller {
        None => {
            client
                .execute("SELECT pgvs3.put_bucket_notifications($1, $2)", &[&bucket, &rules])
                .await
        }
        Some(caller) => {
            client
                .execute(
                    "SELECT pgvs3.put_bucket_notifications($1, $2, $3, $4)",
                    &[&bucket, &rules, &caller.access_key, &caller.authorized_owner],
                )
                .await
        }
    }
    .map_err(classify(REFUSALS))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(arn: &str, events: &[&str]) -> Result<NotificationRule, RuleError> {
        NotificationRule::new("r".into(), arn, events, String::new(), String::new())
    }

    #[test]
    fn destinations_are_queues_webhook_targets_or_channels() {
        let queue = rule("arn:pgvs3:ojs:::uploads", &["s3:ObjectCreated:*"]).unwrap();
        assert_eq!((queue.queue.as_str(), queue.webhook.as_str()), ("uploads", ""));
        assert_eq!(queue.arn(), "arn:pgvs3:ojs:::uploads");
        let tenants = rule("arn:pgvs3:ojs::acme:corp:uploads", &["s3:ObjectCreated:*"]).unwrap();
        assert_eq!(
            (tenants.tenant.as_str(), tenants.queue.as_str()),
            ("acme:corp", "uploads")
        );
        assert_eq!(tenants.arn(), "arn:pgvs3:ojs::acme:corp:uploads");
        let hook = rule("arn:pgvs3:webhook:::audit", &["s3:ObjectRemoved:*"]).unwrap();
        assert_eq!((hook.queue.as_str(), hook.webhook.as_str()), ("", "audit"));
        assert_eq!(hook.arn(), "arn:pgvs3:webhook:::audit");
        let channel = rule("arn:pgvs3:pubsub:::uploads:new", &["s3:ObjectCreated:*"]).unwrap();
        assert_eq!(
            (
                channel.queue.as_str(),
                channel.webhook.as_str(),
                channel.channel.as_str()
            ),
            ("", "", "uploads:new")
        );
        assert_eq!(channel.arn(), "arn:pgvs3:pubsub:::uploads:new");
        let too_long = format!("arn:pgvs3:pubsub:::{}", "c".repeat(MAX_CHANNEL + 1));
        for foreign in [
            "arn:aws:sqs:us-east-1:1:q",
            "arn:pgvs3:ojs:::",
            "arn:pgvs3:ojs::acme",
            "arn:pgvs3:ojs::a b:q",
            "arn:pgvs3:webhook:::a b",
            "arn:pgvs3:pubsub:::",
            "arn:pgvs3:pubsub:::a\nb",
            too_long.as_str(),
        ] {
            assert_eq!(
                rule(foreign, &["s3:ObjectCreated:*"]),
                Err(RuleError::UnknownDestination(foreign.into()))
            );
        }
    }

    #[test]
    fn events_must_be_ones_pgvs3_raises() {
        assert_eq!(rule("arn:pgvs3:ojs:::q", &[]), Err(RuleError::NoEvents));
        assert_eq!(
            rule("arn:pgvs3:ojs:::q", &["s3:ObjectCreated:Put", "s3:ObjectRestore:*"]),
            Err(RuleError::UnsupportedEvent("s3:ObjectRestore:*".into()))
        );
    }

    #[test]
    fn ids_are_unique_and_rules_bounded() {
        let one = rule("arn:pgvs3:ojs:::q", &["s3:ObjectCreated:*"]).unwrap();
        assert_eq!(
            Notifications::new(vec![one.clone(), one.clone()]),
            Err(RuleError::DuplicateId("r".into()))
        );
        let many = (0..=MAX_RULES)
            .map(|n| NotificationRule {
                id: n.to_string(),
                ..one.clone()
            })
            .collect();
        assert_eq!(Notifications::new(many), Err(RuleError::TooManyRules));
    }

    #[test]
    fn rules_are_stored_with_the_field_names_the_trigger_reads() {
        let stored = serde_json::to_value(rule("arn:pgvs3:ojs:::q", &["s3:ObjectCreated:*"]).unwrap()).unwrap();
        assert_eq!(
            stored,
            serde_json::json!({"id": "r", "queue": "q", "events": ["s3:ObjectCreated:*"]})
        );
        let stored = serde_json::to_value(rule("arn:pgvs3:ojs::acme:q", &["s3:ObjectCreated:*"]).unwrap()).unwrap();
        assert_eq!(
            stored,
            serde_json::json!({"id": "r", "queue": "q", "tenant": "acme", "events": ["s3:ObjectCreated:*"]})
        );
    }
}
