//! Bucket notification rules put with aws-sdk-s3, and the jobs they enqueue read back as an OJS
//! worker reads them.

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::operation::put_bucket_notification_configuration::{
    PutBucketNotificationConfigurationError, PutBucketNotificationConfigurationOutput,
};
use aws_sdk_s3::types::{
    Event, FilterRule, FilterRuleName, NotificationConfiguration, NotificationConfigurationFilter, QueueConfiguration,
    S3KeyFilter,
};
use serde_json::Value;

use super::ojs::Ojs;

/// A rule sending `events` of keys with `prefix` and `suffix` (empty: any) to an OJS queue.
pub fn queue_rule(id: &str, queue: &str, events: &[&str], prefix: &str, suffix: &str) -> QueueConfiguration {
    let mut filter = S3KeyFilter::builder();
    if !prefix.is_empty() {
        filter = filter.filter_rules(FilterRule::builder().name(FilterRuleName::Prefix).value(prefix).build());
    }
    if !suffix.is_empty() {
        filter = filter.filter_rules(FilterRule::builder().name(FilterRuleName::Suffix).value(suffix).build());
    }
    QueueConfiguration::builder()
        .id(id)
        .queue_arn(format!("arn:pgvs3:ojs:::{queue}"))
        .set_events(Some(events.iter().map(|e| Event::from(*e)).collect()))
        .filter(NotificationConfigurationFilter::builder().key(filter.build()).build())
        .build()
        .unwrap()
}

/// Puts `rules` as the bucket's notification configuration.
pub async fn configure(s3: &Client, bucket: &str, rules: Vec<QueueConfiguration>) {
    try_configure(s3, bucket, rules).await.unwrap();
}

/// Puts `rules` as the bucket's notification configuration; the answer, for tests of refusals.
pub async fn try_configure(
    s3: &Client,
    bucket: &str,
    rules: Vec<QueueConfiguration>,
) -> Result<PutBucketNotificationConfigurationOutput, SdkError<PutBucketNotificationConfigurationError, HttpResponse>> {
    s3.put_bucket_notification_configuration()
        .bucket(bucket)
        .notification_configuration(
            NotificationConfiguration::builder()
                .set_queue_configurations(Some(rules))
                .build(),
        )
        .send()
        .await
}

/// Every job waiting in `queue`, fetched (and acknowledged) by one worker, in order.
pub async fn drain(ojs: &Ojs, queue: &str) -> Vec<Value> {
    let mut jobs = Vec::new();
    while let Some(job) = ojs.fetch(queue, "test-worker").await {
        let (status, body) = ojs
            .post("/ojs/v1/workers/ack", serde_json::json!({ "job_id": job["id"] }))
            .await;
        assert_eq!(status, 200, "{body}");
        jobs.push(job);
        assert!(jobs.len() < 100, "more jobs than events");
    }
    jobs
}

/// A job's type, and its S3 event record's event name and (URL-encoded) key.
pub fn event(job: &Value) -> (&str, &str, &str) {
    let record = &job["args"][0];
    (
        job["type"].as_str().unwrap(),
        record["eventName"].as_str().unwrap(),
        record["s3"]["object"]["key"].as_str().unwrap(),
    )
}
