//! Who may configure a bucket's notifications, checked where the rules are written: its owner, a
//! root key, or a key a bucket policy grants `s3:PutBucketNotification` /
//! `s3:GetBucketNotification` (as on AWS; an explicit Deny wins), whose rules still send the
//! events into the owner's OJS tenant alone; and a key's PutBucketNotificationConfiguration
//! racing the deletion of that key, which must leave no queue or channel rule on the bucket the
//! root key then owns. The races are made, not hoped for: a transaction of the test holds what
//! one side waits for, and the next step goes once PostgreSQL shows that side waiting.

use pgvs3_testkit as common;

use std::time::Duration;

use aws_sdk_s3::Client;
use common::events::{configure, drain, event, queue_rule, try_configure};
use common::ojs::Ojs;
use common::s3::{add_key, error_code, once, put_object};
use common::{TestGateway, await_statement_wait, statement_waits};

use super::{assert_invalid_destination, channel_rule, tenant_queue_rule, webhook_rule};

async fn put_policy(owner: &Client, bucket: &str, statements: &str) {
    owner
        .put_bucket_policy()
        .bucket(bucket)
        .policy(format!(r#"{{"Version":"2012-10-17","Statement":[{statements}]}}"#))
        .send()
        .await
        .unwrap();
}

/// The S3 error code of a GetBucketNotificationConfiguration ("" when it succeeded).
async fn get_code(s3: &Client, bucket: &str) -> String {
    match s3.get_bucket_notification_configuration().bucket(bucket).send().await {
        Ok(_) => String::new(),
        Err(err) => error_code(&err),
    }
}

/// The queue ARNs of the bucket's rules, as the root key reads them.
async fn arns(gw: &TestGateway, bucket: &str) -> Vec<String> {
    let config = gw
        .client
        .get_bucket_notification_configuration()
        .bucket(bucket)
        .send()
        .await
        .unwrap();
    config
        .queue_configurations()
        .iter()
        .map(|rule| rule.queue_arn().to_owned())
        .collect()
}

/// As on AWS, a bucket policy granting `s3:PutBucketNotification` and
/// `s3:GetBucketNotification` lets another key put and read the bucket's rules; a key it does
/// not name is refused, and an explicit Deny wins over the Allow. The granted key's rules send
/// the events into the owner's tenant (it may name no other, its own included; on a root key's
/// bucket only `default`). Fails before: the actions granted nothing, BOBKEY was AccessDenied.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bucket_policy_grants_notification_configuration_as_aws_does() {
    let gw = TestGateway::start().await;
    let ojs = Ojs::of(&gw);
    let alice = add_key(&gw, "ALICEKEY").await;
    let bob = add_key(&gw, "BOBKEY").await;
    let carol = add_key(&gw, "CAROLKEY").await;
    alice.create_bucket().bucket("alices").send().await.unwrap();
    let rules = || vec![queue_rule("bills", "billing", &["s3:ObjectCreated:*"], "", "")];

    // No policy: another key may neither put nor read the rules.
    let refused = try_configure(&bob, "alices", rules()).await.unwrap_err();
    assert_eq!(error_code(&refused), "AccessDenied");
    assert_eq!(get_code(&bob, "alices").await, "AccessDenied");

    let grant = r#"{"Effect":"Allow","Principal":{"AWS":"BOBKEY"},
                    "Action":["s3:PutBucketNotification","s3:GetBucketNotification"],
                    "Resource":"arn:aws:s3:::alices"}"#;
    put_policy(&alice, "alices", grant).await;
    configure(&bob, "alices", rules()).await;
    let stored = bob
        .get_bucket_notification_configuration()
        .bucket("alices")
        .send()
        .await
        .unwrap();
    assert_eq!(stored.queue_configurations()[0].queue_arn(), "arn:pgvs3:ojs:::billing");
    // A key the policy does not name is refused both.
    let refused = try_configure(&carol, "alices", rules()).await.unwrap_err();
    assert_eq!(error_code(&refused), "AccessDenied");
    assert_eq!(get_code(&carol, "alices").await, "AccessDenied");

    // BOBKEY's rule sends ALICEKEY's events into ALICEKEY's tenant; BOBKEY may not send them
    // into its own, nor into `default`.
    for foreign in ["BOBKEY", "default"] {
        let refused = try_configure(&bob, "alices", vec![tenant_queue_rule(foreign, "billing")])
            .await
            .unwrap_err();
        assert_invalid_destination(&refused);
    }
    put_object(&alice, "alices", "invoice", b"due").await;
    assert!(drain(&ojs.as_tenant("BOBKEY"), "billing").await.is_empty());
    assert!(drain(&ojs, "billing").await.is_empty());
    let jobs = drain(&ojs.as_tenant("ALICEKEY"), "billing").await;
    assert_eq!(jobs.iter().map(|job| event(job).2).collect::<Vec<_>>(), ["invoice"]);

    // An explicit Deny of the put wins over the Allow; the read stays allowed.
    let deny = r#"{"Effect":"Deny","Principal":{"AWS":"BOBKEY"},"Action":"s3:PutBucketNotification",
                   "Resource":"arn:aws:s3:::alices"}"#;
    put_policy(&alice, "alices", &format!("{grant},{deny}")).await;
    let refused = try_configure(&bob, "alices", vec![]).await.unwrap_err();
    assert_eq!(error_code(&refused), "AccessDenied");
    assert_eq!(get_code(&bob, "alices").await, "");
    assert_eq!(arns(&gw, "alices").await, ["arn:pgvs3:ojs:::billing"]);

    // On a root key's bucket a granted key may name `default`, the owner's tenant, and no
    // other (the root key itself may: notifications::a_bucket_owners_events_...).
    gw.client.create_bucket().bucket("roots").send().await.unwrap();
    let grant = r#"{"Effect":"Allow","Principal":{"AWS":"BOBKEY"},"Action":"s3:PutBucketNotification",
                    "Resource":"arn:aws:s3:::roots"}"#;
    put_policy(&gw.client, "roots", grant).await;
    let refused = try_configure(&bob, "roots", vec![tenant_queue_rule("globex", "feed")])
        .await
        .unwrap_err();
    assert_invalid_destination(&refused);
    configure(&bob, "roots", vec![tenant_queue_rule("default", "feed")]).await;
    put_object(&gw.client, "roots", "for-default", b"x").await;
    assert!(drain(&ojs.as_tenant("globex"), "feed").await.is_empty());
    let jobs = drain(&ojs, "feed").await;
    assert_eq!(jobs.iter().map(|job| event(job).2).collect::<Vec<_>>(), ["for-default"]);
    gw.stop().await;
}

/// ALICEKEY's put of a queue and a channel rule, waiting for the bucket's row while the
/// deletion of ALICEKEY (uncommitted) holds it: once the deletion commits, the bucket is the
/// root key's and the put, authorized while ALICEKEY owned it, is refused with AccessDenied.
/// BOBKEY's put holding its bucket's row (it waits for a webhook target the test holds) while
/// BOBKEY is deleted: the put answers 200 and the deletion, which waited for it, drops its queue
/// rule (the webhook rule stays, as v68 keeps those). Either way no rule into the root tenant is
/// left, and an upload raises no job in `default`'s queue. Fails before: both puts answered 200
/// and their queue rules stayed on the root key's buckets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_put_racing_its_keys_deletion_leaves_no_rule_into_the_root_tenant() {
    let gw = TestGateway::start().await;
    let ojs = Ojs::of(&gw);
    let alice = once(&add_key(&gw, "ALICEKEY").await);
    let bob = once(&add_key(&gw, "BOBKEY").await);
    alice.create_bucket().bucket("alices").send().await.unwrap();
    bob.create_bucket().bucket("bobs").send().await.unwrap();
    let holder = gw.sql().await;
    let watcher = gw.sql().await;
    holder
        .execute("SELECT pgvs3.put_webhook_target('audit', 'http://127.0.0.1:9/')", &[])
        .await
        .unwrap();

    // The deletion first: the put waits for it, and finds the root key the owner.
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute("SELECT pgvs3.delete_access_key('ALICEKEY')", &[])
        .await
        .unwrap();
    let put = tokio::spawn(async move {
        let rules = vec![
            queue_rule("bills", "billing", &["s3:ObjectCreated:*"], "", ""),
            channel_rule("arn:pgvs3:pubsub:::s3:feed"),
        ];
        try_configure(&alice, "alices", rules)
            .await
            .map_err(|err| error_code(&err))
    });
    await_statement_wait(&watcher, "%put_bucket_notifications%").await;
    holder.batch_execute("COMMIT").await.unwrap();
    assert_eq!(put.await.unwrap().map(drop), Err("AccessDenied".to_owned()));
    assert!(arns(&gw, "alices").await.is_empty());

    // The put first: it holds the bucket's row while it waits for the webhook target; the
    // deletion either waits for it (and drops what it wrote) or answers at once.
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute(
            "SELECT 1 FROM pgvs3.webhook_targets WHERE name = 'audit' FOR UPDATE",
            &[],
        )
        .await
        .unwrap();
    let put = tokio::spawn(async move {
        let rules = vec![
            queue_rule("bills", "billing", &["s3:ObjectCreated:*"], "", ""),
            webhook_rule("audit", "audit", &["s3:ObjectRemoved:*"]),
        ];
        try_configure(&bob, "bobs", rules).await.map_err(|err| error_code(&err))
    });
    await_statement_wait(&watcher, "%put_bucket_notifications%").await;
    let deleter = gw.sql().await;
    let delete = tokio::spawn(async move {
        deleter
            .query_one("SELECT pgvs3.delete_access_key('BOBKEY') AS deleted", &[])
            .await
            .unwrap()
            .get::<_, bool>("deleted")
    });
    while !delete.is_finished() && !statement_waits(&watcher, "%delete_access_key%").await {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    holder.batch_execute("COMMIT").await.unwrap();
    assert!(put.await.unwrap().is_ok(), "the put committed before the deletion");
    assert!(delete.await.unwrap());
    assert_eq!(arns(&gw, "bobs").await, ["arn:pgvs3:webhook:::audit"]);

    for bucket in ["alices", "bobs"] {
        put_object(&gw.client, bucket, "after", b"x").await;
    }
    assert!(drain(&ojs, "billing").await.is_empty(), "no job in default's queue");
    gw.stop().await;
}

/// A bucket the key creates while the key is deleted: its creation holds the key's row (the
/// foreign key's share lock) and, in the same transaction, configures a queue rule. The
/// deletion waits for it and then drops the rule with the key's others. Fails before (layout
/// v72): the deletion looked for the key's buckets before it waited, found none, and its DELETE
/// left the new bucket to the root key with its rule into the root tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bucket_created_while_its_key_is_deleted_keeps_no_rule_into_the_root_tenant() {
    let gw = TestGateway::start().await;
    add_key(&gw, "CAROLKEY").await;
    let holder = gw.sql().await;
    let watcher = gw.sql().await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute("SELECT pgvs3.ensure_bucket('carols', 'CAROLKEY')", &[])
        .await
        .unwrap();
    holder
        .execute(
            "SELECT pgvs3.put_bucket_notifications('carols', $1::text::jsonb, 'CAROLKEY', 'CAROLKEY')",
            &[&r#"[{"id": "bills", "queue": "billing", "events": ["s3:ObjectCreated:*"]}]"#],
        )
        .await
        .unwrap();
    let deleter = gw.sql().await;
    let delete = tokio::spawn(async move {
        deleter
            .query_one("SELECT pgvs3.delete_access_key('CAROLKEY') AS deleted", &[])
            .await
            .unwrap()
            .get::<_, bool>("deleted")
    });
    await_statement_wait(&watcher, "%delete_access_key%").await;
    holder.batch_execute("COMMIT").await.unwrap();
    assert!(delete.await.unwrap());
    assert!(
        arns(&gw, "carols").await.is_empty(),
        "a rule into the root tenant stayed"
    );
    gw.stop().await;
}
