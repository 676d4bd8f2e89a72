//! Bucket notifications (layout v13): a bucket's rules (`pgvs3.buckets.notifications`), each
//! naming an OJS queue of this database, a registered webhook target (layout v17) or a RESP
//! pub/sub channel (layout v20), the events it wants and a key prefix and suffix. The events
//! themselves are raised in SQL (`pgvs3.object_event`, functions/objects.sql), inside the
//! transaction of the write, so each committed event is exactly one job, one delivery owed to
//! the target's webhook outbox (functions/events.sql, delivered at least once by
//! gateway/src/webhooks.rs), or one message published at the commit.

use serde::{Deserialize, Serialize};
use tokio_postgres::types::Json;

use super::{BucketInfo, Store, StoreError, StoreResult};

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

/// Where a rule sends its events, as its ARN names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination<'a> {
    /// An OJS queue of this database: `arn:pgvs3:ojs:::<queue>`.
    Queue(&'a str),
    /// A webhook target registered with `pgvs3.put_webhook_target`: `arn:pgvs3:webhook:::<name>`.
    Webhook(&'a str),
    /// A RESP pub/sub channel of this database's gateways: `arn:pgvs3:pubsub:::<channel>`.
    Channel(&'a str),
}

/// The longest channel a rule may name. Redis puts no limit on a channel; this one keeps a rule
/// (and the message's NOTIFY payload, which carries the channel) small.
pub const MAX_CHANNEL: usize = 256;

impl<'a> Destination<'a> {
    /// The destination an ARN names, or None when it names nothing pgvs3 can deliver to.
    pub fn of_arn(arn: &'a str) -> Option<Destination<'a>> {
        if let Some(queue) = arn.strip_prefix("arn:pgvs3:ojs:::") {
            crate::ojs::envelope::is_valid_queue(queue).then_some(Destination::Queue(queue))
        } else if let Some(name) = arn.strip_prefix("arn:pgvs3:webhook:::") {
            let valid = (1..=64).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
            valid.then_some(Destination::Webhook(name))
        } else if let Some(channel) = arn.strip_prefix("arn:pgvs3:pubsub:::") {
            // Any text a SUBSCRIBE can name, but no control characters: a channel is also
            // written into XML and logs.
            let valid = (1..=MAX_CHANNEL).contains(&channel.len()) && !channel.chars().any(char::is_control);
            valid.then_some(Destination::Channel(channel))
        } else {
            None
        }
    }

    /// A rule sending its events here (id, events and filter left empty).
    pub fn rule(self) -> NotificationRule {
        let mut rule = NotificationRule::default();
        match self {
            Destination::Queue(queue) => rule.queue = queue.to_owned(),
            Destination::Webhook(name) => rule.webhook = name.to_owned(),
            Destination::Channel(channel) => rule.channel = channel.to_owned(),
        }
        rule
    }
}

impl NotificationRule {
    pub fn destination(&self) -> Destination<'_> {
        if !self.webhook.is_empty() {
            Destination::Webhook(&self.webhook)
        } else if !self.channel.is_empty() {
            Destination::Channel(&self.channel)
        } else {
            Destination::Queue(&self.queue)
        }
    }

    /// The rule's destination ARN, as it was put.
    pub fn arn(&self) -> String {
        match self.destination() {
            Destination::Queue(queue) => format!("arn:pgvs3:ojs:::{queue}"),
            Destination::Webhook(name) => format!("arn:pgvs3:webhook:::{name}"),
            Destination::Channel(channel) => format!("arn:pgvs3:pubsub:::{channel}"),
        }
    }
}

impl Store {
    /// A bucket's notification rules, read from the database (not the catalog cache: a
    /// configuration just put is read back as put).
    pub(crate) async fn notifications(&self, bucket: &BucketInfo) -> StoreResult<Notifications> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT notifications FROM pgvs3.buckets WHERE id = $1", &[&bucket.id])
            .await?
            .ok_or(StoreError::NoSuchBucket)?;
        Ok(row
            .get::<_, Option<Json<Notifications>>>(0)
            .map(|Json(rules)| rules)
            .unwrap_or_default())
    }

    /// Replaces a bucket's notification rules (none removes them). The namespace's event
    /// triggers are installed in the same transaction, so the first write after the answer
    /// already raises its event.
    pub(crate) async fn set_notifications(&self, bucket: &BucketInfo, rules: &Notifications) -> StoreResult<()> {
        let stored = (!rules.rules.is_empty()).then_some(Json(rules));
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let targets: Vec<&str> = rules
            .rules
            .iter()
            .filter(|rule| !rule.webhook.is_empty())
            .map(|rule| rule.webhook.as_str())
            .collect();
        if !targets.is_empty() {
            // Locked so that a target is not dropped between this check and the commit.
            let found: Vec<String> = tx
                .query(
                    "SELECT name FROM pgvs3.webhook_targets WHERE name = ANY($1) FOR KEY SHARE",
                    &[&targets],
                )
                .await?
                .iter()
                .map(|row| row.get(0))
                .collect();
            if let Some(missing) = targets.iter().find(|name| !found.iter().any(|f| f == *name)) {
                return Err(StoreError::InvalidArgument(format!(
                    "Unable to validate the following destination configurations: arn:pgvs3:webhook:::{missing} \
                     (no such webhook target; register it with pgvs3.put_webhook_target)"
                )));
            }
        }
        if stored.is_some() {
            tx.execute("SELECT pgvs3.ensure_event_triggers($1)", &[&bucket.namespace])
                .await?;
        }
        let updated = tx
            .execute(
                "UPDATE pgvs3.buckets SET notifications = $2 WHERE id = $1",
                &[&bucket.id, &stored],
            )
            .await?;
        if updated == 0 {
            self.catalog.forget_bucket(&bucket.name);
            return Err(StoreError::NoSuchBucket);
        }
        tx.commit().await?;
        Ok(())
    }
}
