//! Bucket notifications into OJS queues, in the transaction of the write: configured with
//! aws-sdk-s3, consumed by an OJS worker over HTTP. One job per committed event (PUT, multipart
//! completion, RESP SET, DELETE, delete markers, permanent version deletes), none for a write
//! that did not commit (a failed conditional PUT) or for keys the filter leaves out; the job's
//! args are the S3 event record as AWS shapes it. Webhook targets (`arn:pgvs3:webhook:::<name>`)
//! get the same records POSTed from the outbox to a real receiver, at least once; pub/sub channel
//! targets (`arn:pgvs3:pubsub:::<channel>`) publish them at the commit to redis-rs subscribers
//! on every gateway of the database.

mod access;

use pgvs3_testkit as common;
use pgvs3_testkit::receiver;

use std::time::Duration;

use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::operation::put_bucket_notification_configuration::PutBucketNotificationConfigurationError;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketVersioningStatus, Event, QueueConfiguration};
use common::events::{configure, drain, event, queue_rule, try_configure};
use common::ojs::Ojs;
use common::s3::{
    completion, copy_request, error_code, http_status, put_object, put_request, read_object, set_versioning,
};
use common::{TestGateway, eventually};
use futures::StreamExt;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn committed_writes_enqueue_one_job_each() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    let ojs = Ojs::of(&gw);
    s3.create_bucket().bucket("inbox").send().await.unwrap();
    let empty = s3
        .get_bucket_notification_configuration()
        .bucket("inbox")
        .send()
        .await
        .unwrap();
    assert!(empty.queue_configurations().is_empty());
    configure(
        s3,
        "inbox",
        vec![
            queue_rule("csv", "ingest", &["s3:ObjectCreated:*"], "incoming/", ".csv"),
            queue_rule("gone", "cleanup", &["s3:ObjectRemoved:*"], "", ""),
        ],
    )
    .await;
    let stored = s3
        .get_bucket_notification_configuration()
        .bucket("inbox")
        .send()
        .await
        .unwrap();
    let rules = stored.queue_configurations();
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].queue_arn(), "arn:pgvs3:ojs:::ingest");
    assert_eq!(rules[0].events(), &[Event::from("s3:ObjectCreated:*")]);

    let put = put_object(s3, "inbox", "incoming/day 1.csv", b"a,b\n1,2\n").await;
    // Filtered out: another suffix, another prefix.
    for key in ["incoming/notes.txt", "archive/old.csv"] {
        put_object(s3, "inbox", key, b"x").await;
    }
    // A write that does not commit enqueues nothing.
    let refused = put_request(s3, "inbox", "incoming/day 1.csv", b"again")
        .if_none_match("*")
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&refused), 412);
    // A multipart completion.
    let upload = s3
        .create_multipart_upload()
        .bucket("inbox")
        .key("incoming/big.csv")
        .send()
        .await
        .unwrap();
    let upload_id = upload.upload_id().unwrap();
    let part = s3
        .upload_part()
        .bucket("inbox")
        .key("incoming/big.csv")
        .upload_id(upload_id)
        .part_number(1)
        .body(ByteStream::from_static(b"c,d\n"))
        .send()
        .await
        .unwrap();
    s3.complete_multipart_upload()
        .bucket("inbox")
        .key("incoming/big.csv")
        .upload_id(upload_id)
        .multipart_upload(completion(&[(1, part.e_tag().unwrap())]))
        .send()
        .await
        .unwrap();

    let created = drain(&ojs, "ingest").await;
    let events: Vec<_> = created.iter().map(event).collect();
    assert_eq!(
        events,
        vec![
            ("s3.object.created", "ObjectCreated:Put", "incoming/day+1.csv"),
            (
                "s3.object.created",
                "ObjectCreated:CompleteMultipartUpload",
                "incoming/big.csv"
            ),
        ]
    );
    let record = &created[0]["args"][0];
    assert_eq!(record["eventVersion"], "2.1");
    assert_eq!(record["s3"]["bucket"]["name"], "inbox");
    assert_eq!(record["s3"]["bucket"]["arn"], "arn:aws:s3:::inbox");
    assert_eq!(record["s3"]["configurationId"], "csv");
    assert_eq!(record["s3"]["object"]["size"], 8);
    assert_eq!(
        format!("\"{}\"", record["s3"]["object"]["eTag"].as_str().unwrap()),
        put.e_tag().unwrap()
    );
    assert!(record["s3"]["object"]["sequencer"].as_str().unwrap().len() == 16);
    assert!(drain(&ojs, "cleanup").await.is_empty(), "nothing removed yet");

    s3.delete_object()
        .bucket("inbox")
        .key("archive/old.csv")
        .send()
        .await
        .unwrap();
    // Deleting a missing key changes nothing and raises nothing.
    s3.delete_object()
        .bucket("inbox")
        .key("never/was")
        .send()
        .await
        .unwrap();
    let removed = drain(&ojs, "cleanup").await;
    let events: Vec<_> = removed.iter().map(event).collect();
    assert_eq!(
        events,
        vec![("s3.object.removed", "ObjectRemoved:Delete", "archive/old.csv")]
    );

    // Removing the rules stops the jobs.
    configure(s3, "inbox", vec![]).await;
    put_object(s3, "inbox", "incoming/day 2.csv", b"x").await;
    assert!(drain(&ojs, "ingest").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn versioned_deletes_raise_markers_and_version_removals() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    let ojs = Ojs::of(&gw);
    s3.create_bucket().bucket("kept").send().await.unwrap();
    set_versioning(s3, "kept", BucketVersioningStatus::Enabled).await;
    configure(
        s3,
        "kept",
        vec![queue_rule(
            "all",
            "events",
            &["s3:ObjectCreated:Put", "s3:ObjectRemoved:*"],
            "",
            "",
        )],
    )
    .await;
    let v1 = put_object(s3, "kept", "doc", b"1").await.version_id.unwrap();
    let v2 = put_object(s3, "kept", "doc", b"2").await.version_id.unwrap();
    let marker = s3.delete_object().bucket("kept").key("doc").send().await.unwrap();
    // Removing the marker brings v2 back (a move, not an event); then v1 goes for good.
    s3.delete_object()
        .bucket("kept")
        .key("doc")
        .version_id(marker.version_id().unwrap())
        .send()
        .await
        .unwrap();
    s3.delete_object()
        .bucket("kept")
        .key("doc")
        .version_id(&v1)
        .send()
        .await
        .unwrap();
    let jobs = drain(&ojs, "events").await;
    let seen: Vec<(String, Option<String>)> = jobs
        .iter()
        .map(|job| {
            let record = &job["args"][0];
            (
                record["eventName"].as_str().unwrap().to_owned(),
                record["s3"]["object"]["versionId"].as_str().map(str::to_owned),
            )
        })
        .collect();
    let marker_id = marker.version_id().unwrap().to_owned();
    assert_eq!(
        seen,
        vec![
            ("ObjectCreated:Put".to_owned(), Some(v1.clone())),
            ("ObjectCreated:Put".to_owned(), Some(v2.clone())),
            ("ObjectRemoved:DeleteMarkerCreated".to_owned(), Some(marker_id.clone())),
            ("ObjectRemoved:Delete".to_owned(), Some(marker_id)),
            ("ObjectRemoved:Delete".to_owned(), Some(v1)),
        ]
    );
    let read = s3.get_object().bucket("kept").key("doc").send().await.unwrap();
    assert_eq!(read.version_id.as_deref(), Some(v2.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn destinations_other_than_ojs_queues_are_refused() {
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    s3.create_bucket().bucket("elsewhere").send().await.unwrap();
    let foreign = try_configure(
        s3,
        "elsewhere",
        vec![
            QueueConfiguration::builder()
                .queue_arn("arn:aws:sqs:us-east-1:123456789012:q")
                .events(Event::from("s3:ObjectCreated:*"))
                .build()
                .unwrap(),
        ],
    )
    .await
    .unwrap_err();
    assert_eq!(error_code(&foreign), "InvalidArgument");
    let stored = s3
        .get_bucket_notification_configuration()
        .bucket("elsewhere")
        .send()
        .await
        .unwrap();
    assert!(stored.queue_configurations().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resp_writes_raise_the_same_events() {
    let gw = TestGateway::with_resp(&[]).await;
    let ojs = Ojs::of(&gw);
    // RESP database 0 is the bucket `resp`.
    configure(
        &gw.client,
        "resp",
        vec![queue_rule(
            "keys",
            "keys",
            &["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
            "session:",
            "",
        )],
    )
    .await;
    let client = redis::Client::open(format!("redis://{}/", gw.resp_addr())).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SET")
        .arg("session:1")
        .arg("alice")
        .query_async(&mut con)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("other")
        .arg("x")
        .query_async(&mut con)
        .await
        .unwrap();
    let _: i64 = redis::cmd("DEL").arg("session:1").query_async(&mut con).await.unwrap();
    let events: Vec<(String, String)> = drain(&ojs, "keys")
        .await
        .iter()
        .map(|job| {
            let (_, name, key) = event(job);
            (name.to_owned(), key.to_owned())
        })
        .collect();
    assert_eq!(
        events,
        vec![
            ("ObjectCreated:Put".to_owned(), "session%3A1".to_owned()),
            ("ObjectRemoved:Delete".to_owned(), "session%3A1".to_owned()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifecycle_expirations_are_their_own_events() {
    use aws_sdk_s3::types::{BucketLifecycleConfiguration, ExpirationStatus, LifecycleExpiration, LifecycleRule};
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    let ojs = Ojs::of(&gw);
    s3.create_bucket().bucket("aging").send().await.unwrap();
    configure(
        s3,
        "aging",
        vec![queue_rule("expired", "expired", &["s3:LifecycleExpiration:*"], "", "")],
    )
    .await;
    put_object(s3, "aging", "tmp/a", b"a").await;
    s3.put_bucket_lifecycle_configuration()
        .bucket("aging")
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .rules(
                    LifecycleRule::builder()
                        .id("tmp")
                        .status(ExpirationStatus::Enabled)
                        .filter(aws_sdk_s3::types::LifecycleRuleFilter::builder().prefix("tmp/").build())
                        .expiration(LifecycleExpiration::builder().days(1).build())
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    gw.sql()
        .await
        .execute(
            "UPDATE s3p.objects SET last_modified = last_modified - interval '3 days'",
            &[],
        )
        .await
        .unwrap();
    // A client's DELETE is not a lifecycle event; the expiration is.
    assert!(drain(&ojs, "expired").await.is_empty());
    assert_eq!(gw.gateway.store.apply_lifecycle(100).await.unwrap().expired, 1);
    let jobs = drain(&ojs, "expired").await;
    let events: Vec<_> = jobs.iter().map(event).collect();
    assert_eq!(
        events,
        vec![("s3.lifecycle.expiration", "LifecycleExpiration:Delete", "tmp/a")]
    );
}

/// Asserts a configuration was refused as AWS refuses one naming a destination it cannot use.
fn assert_invalid_destination(refused: &SdkError<PutBucketNotificationConfigurationError>) {
    assert_eq!(error_code(refused), "InvalidArgument");
    let message = refused.as_service_error().and_then(|e| e.meta().message());
    assert!(
        message.is_some_and(|m| m.starts_with("Unable to validate the following destination configurations")),
        "{refused:?}"
    );
}

fn webhook_rule(id: &str, target: &str, events: &[&str]) -> QueueConfiguration {
    QueueConfiguration::builder()
        .id(id)
        .queue_arn(format!("arn:pgvs3:webhook:::{target}"))
        .set_events(Some(events.iter().map(|e| Event::from(*e)).collect()))
        .build()
        .unwrap()
}

/// The records delivered so far, as (eventName, key), in the order they arrived (which, for
/// deliveries posted in one batch, is not the order of their commits).
fn delivered(receiver: &receiver::Receiver) -> Vec<(String, String)> {
    receiver
        .received()
        .iter()
        .map(|d| {
            let record = &d.json()["Records"][0];
            (
                record["eventName"].as_str().unwrap().to_string(),
                record["s3"]["object"]["key"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhook_targets_get_each_committed_event_signed_and_after_an_outage() {
    let gw = TestGateway::with_args(
        common::fresh_database().await,
        &[
            "--webhook-poll",
            "50ms",
            "--webhook-backoff",
            "100ms",
            "--webhook-max-backoff",
            "400ms",
        ],
    )
    .await;
    let s3 = &gw.client;
    let sql = gw.sql().await;
    let mut receiver = receiver::Receiver::start().await;
    s3.create_bucket().bucket("hooked").send().await.unwrap();
    // A target that is not registered is an invalid destination, as AWS says of an unknown queue.
    let unknown = try_configure(s3, "hooked", vec![webhook_rule("w", "audit", &["s3:ObjectCreated:*"])])
        .await
        .unwrap_err();
    assert_invalid_destination(&unknown);
    sql.execute(
        "SELECT pgvs3.put_webhook_target('audit', $1, 'target-secret')",
        &[&receiver.url("/s3-events")],
    )
    .await
    .unwrap();
    configure(
        s3,
        "hooked",
        vec![webhook_rule(
            "w",
            "audit",
            &["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
        )],
    )
    .await;
    let stored = s3
        .get_bucket_notification_configuration()
        .bucket("hooked")
        .send()
        .await
        .unwrap();
    assert_eq!(
        stored.queue_configurations()[0].queue_arn(),
        "arn:pgvs3:webhook:::audit"
    );

    put_object(s3, "hooked", "data/a.csv", b"a,b\n").await;
    // Not committed: no delivery owed.
    let refused = put_request(s3, "hooked", "data/a.csv", b"again")
        .if_none_match("*")
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&refused), 412);
    copy_request(s3, "hooked", "data/b.csv", "hooked/data/a.csv")
        .send()
        .await
        .unwrap();
    let first = eventually(Duration::from_secs(10), "two deliveries", || async {
        (receiver.received().len() >= 2).then(|| receiver.received())
    })
    .await;
    // A batch of deliveries is posted concurrently, so arrival order is not commit order (nor is
    // it at AWS): the sequencer orders events of one key, and the copy's key is another.
    let mut arrived = delivered(&receiver);
    arrived.sort();
    assert_eq!(
        arrived,
        vec![
            ("ObjectCreated:Copy".to_string(), "data/b.csv".to_string()),
            ("ObjectCreated:Put".to_string(), "data/a.csv".to_string()),
        ]
    );
    let put = first
        .iter()
        .find(|d| d.header("x-pgvs3-event-type") == "s3:ObjectCreated:Put")
        .expect("the PUT's delivery");
    assert!(first.iter().all(|d| receiver::signed_by(d, "x-pgvs3", "target-secret")));
    let record = &put.json()["Records"][0];
    assert_eq!(record["s3"]["bucket"]["name"], "hooked");
    assert_eq!(record["s3"]["configurationId"], "w");
    assert_eq!(record["s3"]["object"]["size"], 4);

    // Down for a while: the writes commit at once, their deliveries wait; none is lost.
    receiver.stop().await;
    for n in 0..4 {
        put_object(s3, "hooked", &format!("later/{n}.csv"), b"x").await;
    }
    s3.delete_object()
        .bucket("hooked")
        .key("data/a.csv")
        .send()
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the owed deliveries failing", || async {
        let failing: i64 = sql
            .query_one("SELECT count(*) FROM pgvs3.outbox WHERE attempts >= 1", &[])
            .await
            .unwrap()
            .get("count");
        (failing == 5).then_some(())
    })
    .await;
    receiver.restart().await;
    eventually(
        Duration::from_secs(15),
        "everything delivered after the outage",
        || async {
            let owed: i64 = sql
                .query_one("SELECT count(*) FROM pgvs3.outbox", &[])
                .await
                .unwrap()
                .get("count");
            (owed == 0).then_some(())
        },
    )
    .await;
    let mut after: Vec<_> = delivered(&receiver).into_iter().skip(2).collect();
    after.sort();
    assert_eq!(
        after,
        vec![
            ("ObjectCreated:Put".to_string(), "later/0.csv".to_string()),
            ("ObjectCreated:Put".to_string(), "later/1.csv".to_string()),
            ("ObjectCreated:Put".to_string(), "later/2.csv".to_string()),
            ("ObjectCreated:Put".to_string(), "later/3.csv".to_string()),
            ("ObjectRemoved:Delete".to_string(), "data/a.csv".to_string()),
        ]
    );

    // A dropped target owes nothing more, and writes still succeed.
    let dropped: bool = sql
        .query_one("SELECT pgvs3.drop_webhook_target('audit') AS dropped", &[])
        .await
        .unwrap()
        .get("dropped");
    assert!(dropped);
    put_object(s3, "hooked", "data/c.csv", b"x").await;
    let owed: i64 = sql
        .query_one("SELECT count(*) FROM pgvs3.outbox", &[])
        .await
        .unwrap()
        .get("count");
    assert_eq!(owed, 0);
}

fn channel_rule(arn: &str) -> QueueConfiguration {
    QueueConfiguration::builder()
        .id("feed")
        .queue_arn(arn)
        .events(Event::from("s3:ObjectCreated:*"))
        .build()
        .unwrap()
}

/// A redis-rs subscriber to `channel` on `gateway`, and its message stream.
async fn subscriber(gateway: &TestGateway, channel: &str) -> impl futures::Stream<Item = redis::Msg> + Unpin {
    let client = redis::Client::open(format!("redis://{}/", gateway.resp_addr())).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe(channel).await.unwrap();
    pubsub.into_on_message()
}

/// The next message's (eventName, key) and record, skipping the warm-up messages.
async fn next_event(messages: &mut (impl futures::Stream<Item = redis::Msg> + Unpin)) -> (String, String, Value) {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .expect("a message within 10 s")
            .expect("the subscription is open");
        if message.get_payload_bytes() == b"warm-up" {
            continue;
        }
        assert_eq!(message.get_channel_name(), "s3:feed");
        let body: Value = serde_json::from_slice(message.get_payload_bytes()).unwrap();
        let record = body["Records"][0].clone();
        assert_eq!(body["Records"].as_array().unwrap().len(), 1, "{body}");
        return (
            record["eventName"].as_str().unwrap().to_owned(),
            record["s3"]["object"]["key"].as_str().unwrap().to_owned(),
            record,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pubsub_channel_targets_reach_subscribers_of_every_gateway_once_per_commit() {
    let url = common::fresh_database().await;
    let resp_on = ["--resp-addr", "127.0.0.1:0"];
    let first = TestGateway::with_args(url.clone(), &resp_on).await;
    let second = TestGateway::with_args(url, &resp_on).await;
    let s3 = &first.client;
    s3.create_bucket().bucket("feed").send().await.unwrap();
    // A channel ARN naming no channel is an invalid destination.
    let empty = try_configure(s3, "feed", vec![channel_rule("arn:pgvs3:pubsub:::")])
        .await
        .unwrap_err();
    assert_invalid_destination(&empty);
    configure(s3, "feed", vec![channel_rule("arn:pgvs3:pubsub:::s3:feed")]).await;
    let stored = s3
        .get_bucket_notification_configuration()
        .bucket("feed")
        .send()
        .await
        .unwrap();
    assert_eq!(
        stored.queue_configurations()[0].queue_arn(),
        "arn:pgvs3:pubsub:::s3:feed"
    );

    let mut on_first = subscriber(&first, "s3:feed").await;
    let mut on_second = subscriber(&second, "s3:feed").await;
    // Both gateways' LISTEN connections are up once a PUBLISH reaches both subscribers (a
    // message sent while a gateway's connection is still starting is missed, as Redis misses
    // messages to a subscriber that is not connected).
    let mut publisher = redis::Client::open(format!("redis://{}/", first.resp_addr()))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut warmed = [false, false];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while warmed != [true, true] {
        let _: i64 = redis::cmd("PUBLISH")
            .arg("s3:feed")
            .arg("warm-up")
            .query_async(&mut publisher)
            .await
            .unwrap();
        for (seen, messages) in warmed.iter_mut().zip([&mut on_first, &mut on_second]) {
            if !*seen {
                *seen = tokio::time::timeout(Duration::from_millis(500), messages.next())
                    .await
                    .is_ok_and(|message| message.is_some());
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pub/sub up on both gateways within 20 s"
        );
    }

    let put = put_object(s3, "feed", "in/a.csv", b"a,b\n").await;
    // Not committed: nothing published.
    let refused = put_request(s3, "feed", "in/a.csv", b"again")
        .if_none_match("*")
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&refused), 412);
    // Messages come in commit order, so once this one arrives, a message of the refused PUT
    // (had it committed) would have arrived before it.
    put_object(s3, "feed", "in/b.csv", b"b").await;
    for messages in [&mut on_first, &mut on_second] {
        let (name, key, record) = next_event(messages).await;
        assert_eq!((name.as_str(), key.as_str()), ("ObjectCreated:Put", "in/a.csv"));
        assert_eq!(record["s3"]["bucket"]["name"], "feed");
        assert_eq!(record["s3"]["configurationId"], "feed");
        assert_eq!(record["s3"]["object"]["size"], 4);
        assert_eq!(
            format!("\"{}\"", record["s3"]["object"]["eTag"].as_str().unwrap()),
            put.e_tag().unwrap()
        );
        let (name, key, _) = next_event(messages).await;
        assert_eq!((name.as_str(), key.as_str()), ("ObjectCreated:Put", "in/b.csv"));
    }
    // Nothing else was published: a last marker is the next message on both.
    let _: i64 = redis::cmd("PUBLISH")
        .arg("s3:feed")
        .arg("{\"Records\": [{\"eventName\": \"end\", \"s3\": {\"object\": {\"key\": \"-\"}}}]}")
        .query_async(&mut publisher)
        .await
        .unwrap();
    for messages in [&mut on_first, &mut on_second] {
        assert_eq!(next_event(messages).await.0, "end");
    }
}

/// The worker of docs/events.md's worked example, run as the page shows it (its Python block read
/// from the page): one uploaded CSV becomes one Parquet file and one acknowledged job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_worked_example_converts_each_uploaded_csv_to_parquet() {
    let page = include_str!("../../../docs/events.md");
    let start = page
        .find("```python\n# worker.py")
        .expect("the worked example's worker")
        + "```python\n".len();
    let worker = &page[start..start + page[start..].find("```").unwrap()];
    let gw = TestGateway::start().await;
    let s3 = &gw.client;
    let ojs = Ojs::of(&gw);
    s3.create_bucket().bucket("uploads").send().await.unwrap();
    configure(
        s3,
        "uploads",
        vec![queue_rule(
            "csv-to-parquet",
            "csv-to-parquet",
            &["s3:ObjectCreated:*"],
            "incoming/",
            ".csv",
        )],
    )
    .await;
    put_object(s3, "uploads", "incoming/day 1.csv", b"city,temp\nOslo,3\nLima,19\n").await;
    let script = std::env::temp_dir().join(format!("pgvs3-test-{}-worker.py", std::process::id()));
    std::fs::write(&script, worker).unwrap();
    let driver = format!(
        "import runpy\nworker = runpy.run_path({:?})\nassert worker['work_one']()\nassert not worker['work_one']()\nprint('done')",
        script.display().to_string()
    );
    let output = tokio::process::Command::new("python3")
        .args(["-c", &driver])
        .env("OJS_URL", format!("http://{}", ojs.addr))
        .env("S3_URL", gw.endpoint())
        .env("AWS_ACCESS_KEY_ID", common::ROOT_ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", common::ROOT_SECRET_KEY)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .output()
        .await
        .expect("python3 (scripts/test puts the clients' venv, with boto3, pyarrow and requests, first on PATH)");
    let _ = std::fs::remove_file(&script);
    assert!(
        output.status.success() && String::from_utf8_lossy(&output.stdout).contains("done"),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let parquet = read_object(s3, "uploads", "parquet/day 1.parquet").await;
    assert!(
        parquet.starts_with(b"PAR1") && parquet.ends_with(b"PAR1"),
        "a Parquet file"
    );
    let ids: Vec<String> = gw
        .sql()
        .await
        .query("SELECT id FROM ojs.jobs WHERE queue = 'csv-to-parquet'", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get("id"))
        .collect();
    assert_eq!(ids.len(), 1, "one upload, one job");
    let (_, job) = ojs.get(&format!("/ojs/v1/jobs/{}", ids[0])).await;
    assert_eq!(job["job"]["state"], "completed", "{job}");
    assert_eq!(job["job"]["result"]["parquet"], "parquet/day 1.parquet", "{job}");
    // The Parquet file is outside the rule's prefix: writing it raised no job.
    assert!(drain(&ojs, "csv-to-parquet").await.is_empty());
}

/// A rule naming the queue `queue` of OJS tenant `tenant` (`arn:pgvs3:ojs::<tenant>:<queue>`).
fn tenant_queue_rule(tenant: &str, queue: &str) -> QueueConfiguration {
    QueueConfiguration::builder()
        .id("tenant")
        .queue_arn(format!("arn:pgvs3:ojs::{tenant}:{queue}"))
        .events(Event::from("s3:ObjectCreated:*"))
        .build()
        .unwrap()
}

/// A bucket's events are jobs of its owner's OJS tenant (the owning access key's id; `default`
/// for the root key's): a non-root key's rule `arn:pgvs3:ojs:::billing` fills its own tenant's
/// share of `billing`, whose depth bound its uploads may pass (the write and its event are never
/// refused) while the root key's producer still enqueues there, and it may name no other tenant.
/// Fails before: the key's three uploads were three `default` jobs, past the bound of 2, and the
/// root key's producer got 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bucket_owners_events_are_its_own_tenants_jobs_and_never_fill_anothers_queue() {
    let gw = TestGateway::start().await;
    let ojs = Ojs::of(&gw);
    let catalog = gw.gateway.store.catalog();
    catalog
        .put_access_key(&pgvs3_gateway::store::NewAccessKey {
            access_key: "ALICEKEY".into(),
            secret: "ALICEKEY-secret".into(),
            is_root: false,
            read_only: false,
            description: String::new(),
        })
        .await
        .unwrap();
    let alice = gw.client_for("ALICEKEY", "ALICEKEY-secret");
    alice.create_bucket().bucket("alices").send().await.unwrap();
    let (status, body) = ojs
        .call(
            "PUT",
            "/ojs/v1/admin/queues/billing/config",
            Some(serde_json::json!({ "backpressure": { "max_depth": 2 } })),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    // Another tenant's queue cannot be named, `default`'s included; its own can.
    for foreign in ["default", "BOBKEY"] {
        let refused = try_configure(&alice, "alices", vec![tenant_queue_rule(foreign, "billing")])
            .await
            .unwrap_err();
        assert_invalid_destination(&refused);
    }
    configure(&alice, "alices", vec![tenant_queue_rule("ALICEKEY", "billing")]).await;
    configure(
        &alice,
        "alices",
        vec![queue_rule("bills", "billing", &["s3:ObjectCreated:*"], "", "")],
    )
    .await;
    let stored = alice
        .get_bucket_notification_configuration()
        .bucket("alices")
        .send()
        .await
        .unwrap();
    assert_eq!(stored.queue_configurations()[0].queue_arn(), "arn:pgvs3:ojs:::billing");

    // Three uploads past the bound of 2: each write succeeds and raises its job, in ALICEKEY's
    // tenant; the root key's producer (tenant `default`) is not refused.
    for n in 0..3 {
        put_object(&alice, "alices", &format!("invoice-{n}"), b"due").await;
    }
    let job = serde_json::json!({ "type": "bill", "args": [], "options": { "queue": "billing" } });
    let (status, body) = ojs.post("/ojs/v1/jobs", job.clone()).await;
    assert_eq!(status, 201, "the root key's producer is not refused: {body}");
    let tenant = ojs.as_tenant("ALICEKEY");
    let (status, full) = tenant.post("/ojs/v1/jobs", job).await;
    assert_eq!(
        (status, full["error"]["code"].as_str()),
        (429, Some("QUEUE_FULL")),
        "ALICEKEY's events count against its own bound: {full}"
    );
    let roots = drain(&ojs, "billing").await;
    assert_eq!(roots.len(), 1, "default's share holds its own job alone: {roots:?}");
    assert_eq!(roots[0]["type"], "bill");
    let alices = drain(&tenant, "billing").await;
    let keys: Vec<&str> = alices.iter().map(|job| event(job).2).collect();
    assert_eq!(keys, ["invoice-0", "invoice-1", "invoice-2"]);
    assert!(
        alices.iter().all(|job| job["meta"]["tenant_id"] == "ALICEKEY"),
        "{alices:?}"
    );

    // The root key's buckets may send their events to any tenant.
    gw.client.create_bucket().bucket("roots").send().await.unwrap();
    configure(&gw.client, "roots", vec![tenant_queue_rule("globex", "feed")]).await;
    put_object(&gw.client, "roots", "for-globex", b"x").await;
    assert!(drain(&ojs, "feed").await.is_empty());
    let globex = drain(&ojs.as_tenant("globex"), "feed").await;
    assert_eq!(
        globex.iter().map(|job| event(job).2).collect::<Vec<_>>(),
        ["for-globex"]
    );

    // A rule put while the root key owned the bucket follows the bucket to its new owner: it
    // is resolved at each event, not when it was put.
    let sql = gw.sql().await;
    sql.execute("UPDATE pgvs3.buckets SET owner = 'ALICEKEY' WHERE name = 'roots'", &[])
        .await
        .unwrap();
    put_object(&gw.client, "roots", "now-alices", b"x").await;
    assert!(drain(&ojs.as_tenant("globex"), "feed").await.is_empty());
    let moved = drain(&tenant, "feed").await;
    assert_eq!(moved.iter().map(|job| event(job).2).collect::<Vec<_>>(), ["now-alices"]);
    gw.stop().await;
}

/// A deleted key's buckets are left to the root key, and the rules that delivered into the key's
/// own tenant (its OJS queues, its RESP channels) go with the key: resolved against the root key
/// at each event, they would send the bucket's events into `default`'s queues and channels under
/// names the key chose. Webhook rules (targets the administrator registered) stay. Fails
/// before: every rule stayed, and the tenantless `billing` rule, resolved against no owner, made
/// the upload after the deletion a job of `default`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_keys_buckets_send_nothing_into_the_root_tenant() {
    let gw = TestGateway::start().await;
    let ojs = Ojs::of(&gw);
    let alice = common::s3::add_key(&gw, "ALICEKEY").await;
    alice.create_bucket().bucket("alices").send().await.unwrap();
    gw.sql()
        .await
        .execute("SELECT pgvs3.put_webhook_target('audit', 'http://127.0.0.1:9/')", &[])
        .await
        .unwrap();
    configure(
        &alice,
        "alices",
        vec![
            queue_rule("bills", "billing", &["s3:ObjectCreated:*"], "", ""),
            channel_rule("arn:pgvs3:pubsub:::s3:feed"),
            webhook_rule("audit", "audit", &["s3:ObjectRemoved:*"]),
        ],
    )
    .await;
    put_object(&alice, "alices", "before", b"x").await;
    let alices = drain(&ojs.as_tenant("ALICEKEY"), "billing").await;
    assert_eq!(alices.iter().map(|job| event(job).2).collect::<Vec<_>>(), ["before"]);

    assert!(gw.gateway.store.catalog().delete_access_key("ALICEKEY").await.unwrap());
    let kept = gw
        .client
        .get_bucket_notification_configuration()
        .bucket("alices")
        .send()
        .await
        .unwrap();
    let arns: Vec<&str> = kept
        .queue_configurations()
        .iter()
        .map(|rule| rule.queue_arn())
        .collect();
    assert_eq!(arns, ["arn:pgvs3:webhook:::audit"]);
    put_object(&gw.client, "alices", "after", b"x").await;
    assert!(drain(&ojs, "billing").await.is_empty(), "no job in default's queue");
    assert!(drain(&ojs.as_tenant("ALICEKEY"), "billing").await.is_empty());
    gw.stop().await;
}
