//! Lifecycle expiry running during a versioned bucket's history: the bucket has one rule
//! (current versions expire a day after they were written), a client ages a key's current
//! version by moving its timestamps days back in the database (as the lifecycle tests do:
//! lifecycle counts days) — every key's at once, so that a pass finds several due and expires
//! them one after another, a while after it picked them — and another runs a lifecycle pass. The model (`s3::Versions`) lets a
//! pass hide an aged current version behind a delete marker, or leave it; never a version
//! written or made current after the pass picked what it expires.

use std::sync::Arc;

use aws_sdk_s3::Client;
use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, ExpirationStatus, LifecycleExpiration, LifecycleRule, LifecycleRuleFilter,
};
use pgvs3_gateway::store::Store;

use super::recorder::Outcome;
use super::s3::Reply;
use crate::common::TestGateway;

/// What ages keys and runs passes over one bucket.
#[derive(Clone)]
pub struct Lifecycle {
    store: Store,
    sql: Arc<tokio_postgres::Client>,
    bucket: String,
}

impl Lifecycle {
    /// Gives `bucket` its rule.
    pub async fn on(gateway: &TestGateway, client: &Client, bucket: &str) -> Lifecycle {
        let rule = LifecycleRule::builder()
            .id("expire")
            .status(ExpirationStatus::Enabled)
            .filter(LifecycleRuleFilter::builder().prefix("").build())
            .expiration(LifecycleExpiration::builder().days(1).build())
            .build()
            .unwrap();
        client
            .put_bucket_lifecycle_configuration()
            .bucket(bucket)
            .lifecycle_configuration(BucketLifecycleConfiguration::builder().rules(rule).build().unwrap())
            .send()
            .await
            .unwrap();
        Lifecycle {
            store: gateway.gateway.store.clone(),
            sql: Arc::new(gateway.sql().await),
            bucket: bucket.to_owned(),
        }
    }

    /// Moves the timestamps of the bucket's current versions three days back (one statement).
    pub async fn age(&self) -> Outcome<Reply> {
        let aged = self
            .sql
            .execute(
                "UPDATE s3p.objects SET last_modified = last_modified - interval '3 days'
                  WHERE bucket_id = (SELECT id FROM pgvs3.buckets WHERE name = $1)",
                &[&self.bucket],
            )
            .await;
        match aged {
            Ok(_) => Outcome::Answered(Reply::Done),
            Err(err) => Outcome::Unknown(format!("age: {err}")),
        }
    }

    /// One lifecycle pass, as the maintenance loop runs it.
    pub async fn pass(&self) -> Outcome<Reply> {
        match self.store.apply_lifecycle(1000).await {
            Ok(_) => Outcome::Answered(Reply::Done),
            Err(err) => Outcome::Unknown(format!("lifecycle pass: {err}")),
        }
    }
}
