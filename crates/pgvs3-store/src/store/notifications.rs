//! Bucket notifications (layout v13): a bucket's rules (`pgvs3.buckets.notifications`), each
//! naming an OJS queue of this database, a registered webhook target (layout v17) or a RESP
//! pub/sub channel (layout v20, published at the commit), the events
//! it wants and a key prefix and suffix. The rules' shape and their one write path,
//! `pgvs3.put_bucket_notifications` (layout v21, shared with the operator's Bucket
//! `notifications`), are `pgvs3_catalog::notifications`'. The events themselves are raised in SQL
//! (`pgvs3.object_event`, functions/objects.sql), inside the transaction of the write, so each
//! committed event is exactly one job, one delivery owed to the target's webhook outbox
//! (functions/events.sql, delivered at least once by gateway/src/webhooks.rs), or one message
//! published at the commit.

use pgvs3_catalog::ErrorKind;
use pgvs3_catalog::notifications::Caller;
pub use pgvs3_catalog::notifications::{MAX_RULES, NotificationRule, Notifications, RuleError};
use tokio_postgres::types::Json;

use super::{BucketInfo, Principal, Store, StoreError, StoreResult};

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
            .get::<_, Option<Json<Notifications>>>("notifications")
            .map(|Json(rules)| rules)
            .unwrap_or_default())
    }

    /// Replaces a bucket's notification rules (none removes them) for `caller`, whose request
    /// was authorized against `bucket` as this gateway has it: the database refuses it
    /// (AccessDenied) when the bucket has changed owner since, unless `caller` is a root key,
    /// and sends a rule's events into the owner's OJS tenant only. The namespace's event
    /// triggers are installed in the same transaction, so the first write after the answer
    /// already raises its event.
    pub(crate) async fn set_notifications(
        &self,
        caller: &Principal,
        bucket: &BucketInfo,
        rules: &Notifications,
    ) -> StoreResult<()> {
        let client = self.client().await?;
        let caller = Caller {
            access_key: &caller.access_key,
            authorized_owner: bucket.owner.as_deref(),
        };
        pgvs3_catalog::notifications::put_bucket_notifications_as(&**client, &bucket.name, rules, caller)
            .await
            .map_err(|err| match err.kind() {
                ErrorKind::NoSuchBucket => {
                    self.catalog.forget_bucket(&bucket.name);
                    StoreError::NoSuchBucket
                }
                ErrorKind::AccessDenied => StoreError::AccessDenied,
                ErrorKind::UnknownDestination => StoreError::InvalidArgument(err.message()),
                ErrorKind::Refused => StoreError::NotImplemented(err.message()),
                _ => StoreError::from(err.into_source()),
            })
    }
}
