//! Bucket policies as S3 evaluates them, with aws-sdk-s3, boto3 and raw unsigned HTTP:
//! Put/Get/DeleteBucketPolicy and GetBucketPolicyStatus, MalformedPolicy for bad documents,
//! prefix-limited grants to a second access key (Deny over Allow), an owner's explicit Deny
//! (which cannot lock it out of the policy itself), anonymous access to a public bucket and
//! its refusals (AccessDenied, NoSuchBucket), and the condition keys.

use pgvs3_testkit as common;

use aws_sdk_s3::Client;
use common::TestGateway;
use common::s3::{BOTO3_ROOT_BOB_ANON, add_key, copy_request, get, list, put, unsigned};

async fn put_policy(gw: &TestGateway, bucket: &str, policy: &str) -> Result<(), (String, String)> {
    gw.client
        .put_bucket_policy()
        .bucket(bucket)
        .policy(policy)
        .send()
        .await
        .map(|_| ())
        .map_err(|err| {
            let err = err.into_service_error();
            (
                err.meta().code().unwrap_or_default().to_owned(),
                err.meta().message().unwrap_or_default().to_owned(),
            )
        })
}

async fn delete(client: &Client, bucket: &str, key: &str) -> Result<(), String> {
    client
        .delete_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map(|_| ())
        .map_err(|err| err.into_service_error().meta().code().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn policies_are_put_read_back_reported_and_deleted() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("pol").send().await.unwrap();
    let missing = gw.client.get_bucket_policy().bucket("pol").send().await.unwrap_err();
    assert_eq!(missing.into_service_error().meta().code(), Some("NoSuchBucketPolicy"));
    let status = gw
        .client
        .get_bucket_policy_status()
        .bucket("pol")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status.into_service_error().meta().code(), Some("NoSuchBucketPolicy"));

    let public = r#"{"Version":"2012-10-17","Statement":[{"Sid":"PublicRead","Effect":"Allow","Principal":"*","Action":["s3:GetObject"],"Resource":["arn:aws:s3:::pol/*"]}]}"#;
    put_policy(&gw, "pol", public).await.unwrap();
    let got = gw.client.get_bucket_policy().bucket("pol").send().await.unwrap();
    assert_eq!(got.policy(), Some(public));
    let status = gw.client.get_bucket_policy_status().bucket("pol").send().await.unwrap();
    assert_eq!(status.policy_status().and_then(|s| s.is_public()), Some(true));

    let narrowed = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pol/*","Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}]}"#;
    put_policy(&gw, "pol", narrowed).await.unwrap();
    let status = gw.client.get_bucket_policy_status().bucket("pol").send().await.unwrap();
    assert_eq!(status.policy_status().and_then(|s| s.is_public()), Some(false));

    gw.client.delete_bucket_policy().bucket("pol").send().await.unwrap();
    let gone = gw.client.get_bucket_policy().bucket("pol").send().await.unwrap_err();
    assert_eq!(gone.into_service_error().meta().code(), Some("NoSuchBucketPolicy"));
    gw.stop().await;
}

#[tokio::test]
async fn malformed_policies_are_refused_with_s3s_messages() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("pol").send().await.unwrap();
    add_key(&gw, "BOBKEY").await;
    let statement = |body: &str| format!(r#"{{"Version":"2012-10-17","Statement":[{{{body}}}]}}"#);
    let cases = [
        (
            "not json".to_owned(),
            "Policies must be valid JSON and the first byte must be '{'",
        ),
        (
            statement(r#""Effect":"Allow","Principal":"*","Action":"s3:Teleport","Resource":"arn:aws:s3:::pol/*""#),
            "Policy has invalid action",
        ),
        (
            statement(r#""Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*""#),
            "Policy has invalid resource",
        ),
        (
            statement(
                r#""Effect":"Allow","Principal":{"AWS":["arn:aws:iam::123456789012:user/NOSUCHKEY"]},"Action":"s3:GetObject","Resource":"arn:aws:s3:::pol/*""#,
            ),
            "Invalid principal in policy",
        ),
        (
            statement(r#""Effect":"Allow","Principal":"*","Action":"s3:ListBucket","Resource":"arn:aws:s3:::pol/key""#),
            "Action does not apply to any resource(s) in statement",
        ),
        (
            statement(r#""Effect":"Perhaps","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pol/*""#),
            "Invalid effect: Perhaps",
        ),
        (
            statement(r#""Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::pol/*""#),
            "Missing required field Principal",
        ),
        // IAM supports NotPrincipal with Deny only (Ceph's s3-tests
        // test_bucket_policy_allow_notprincipal); before: 501 NotImplemented.
        (
            statement(
                r#""Effect":"Allow","NotPrincipal":{"AWS":"BOBKEY"},"Action":"s3:ListBucket","Resource":"arn:aws:s3:::pol""#,
            ),
            "Invalid principal in policy",
        ),
    ];
    let huge = statement(&format!(
        r#""Sid":"{}","Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pol/*""#,
        "x".repeat(21 * 1024)
    ));
    let nested = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let cases = cases.into_iter().chain([
        (huge, "Policy exceeds the maximum allowed document size."),
        (nested, "Policies must be valid JSON and the first byte must be '{'"),
        (
            format!("{{\"Statement\":{}}}", "[".repeat(5_000)),
            "Policies must be valid JSON and the first byte must be '{'",
        ),
    ]);
    for (policy, message) in cases {
        assert_eq!(
            put_policy(&gw, "pol", &policy).await,
            Err(("MalformedPolicy".to_owned(), message.to_owned())),
            "{}",
            &policy[..policy.len().min(200)]
        );
    }
    // Valid IAM pgvs3 does not evaluate is NotImplemented, never silently half-applied.
    let not_principal = statement(
        r#""Effect":"Deny","NotPrincipal":{"AWS":"BOBKEY"},"Action":"s3:ListBucket","Resource":"arn:aws:s3:::pol""#,
    );
    assert_eq!(
        put_policy(&gw, "pol", &not_principal).await.unwrap_err().0,
        "NotImplemented"
    );
    let request_tag = statement(
        r#""Effect":"Deny","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::pol/*","Condition":{"StringEquals":{"s3:RequestObjectTag/secret":"yes"}}"#,
    );
    assert_eq!(
        put_policy(&gw, "pol", &request_tag).await.unwrap_err().0,
        "NotImplemented"
    );
    // The existing object's tags are evaluated (tests/s3_object_tag_policy.rs).
    let existing_tag = statement(
        r#""Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pol/*","Condition":{"StringEquals":{"s3:ExistingObjectTag/secret":"yes"}}"#,
    );
    put_policy(&gw, "pol", &existing_tag).await.unwrap();
    // The access key form and the IAM user form of an existing key both name it.
    let bob = statement(
        r#""Effect":"Allow","Principal":{"AWS":["BOBKEY","arn:aws:iam::000000000000:user/BOBKEY"]},"Action":"s3:*","Resource":["arn:aws:s3:::pol","arn:aws:s3:::pol/*"]"#,
    );
    put_policy(&gw, "pol", &bob).await.unwrap();
    let missing = put_policy(&gw, "nope", &bob).await.unwrap_err();
    assert_eq!(missing.0, "NoSuchBucket");
    gw.stop().await;
}

#[tokio::test]
async fn a_second_key_gets_what_the_policy_grants_and_deny_wins() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("team").send().await.unwrap();
    for key in ["public/a", "public/secret.txt", "private/a", "uploads/old"] {
        put(&gw.client, "team", key).await.unwrap();
    }
    let bob = add_key(&gw, "BOBKEY").await;
    let carol = add_key(&gw, "CAROLKEY").await;
    // Without a policy a key that does not own the bucket gets nothing.
    assert_eq!(get(&bob, "team", "public/a").await, Err("AccessDenied".into()));

    let policy = r#"{"Version":"2012-10-17","Statement":[
        {"Sid":"ReadPublic","Effect":"Allow","Principal":{"AWS":"arn:aws:iam::000000000000:user/BOBKEY"},
         "Action":"s3:Get*","Resource":"arn:aws:s3:::team/public/*"},
        {"Sid":"ListPublic","Effect":"Allow","Principal":{"AWS":["BOBKEY"]},"Action":"s3:ListBucket",
         "Resource":"arn:aws:s3:::team","Condition":{"StringLike":{"s3:prefix":"public/*"}}},
        {"Sid":"Upload","Effect":"Allow","Principal":{"AWS":"BOBKEY"},"Action":"s3:PutObject",
         "Resource":"arn:aws:s3:::team/uploads/*"},
        {"Sid":"NoSecrets","Effect":"Deny","Principal":{"AWS":"BOBKEY"},"Action":"s3:*",
         "Resource":"arn:aws:s3:::team/public/secret*"}]}"#;
    put_policy(&gw, "team", policy).await.unwrap();

    assert_eq!(get(&bob, "team", "public/a").await, Ok(()));
    assert_eq!(
        get(&bob, "team", "public/secret.txt").await,
        Err("AccessDenied".into()),
        "Deny over Allow"
    );
    assert_eq!(get(&bob, "team", "private/a").await, Err("AccessDenied".into()));
    // Without s3:ListBucket (granted to bob only with a prefix condition), a missing key is
    // AccessDenied, not NoSuchKey, as S3 answers it.
    assert_eq!(get(&bob, "team", "public/none").await, Err("AccessDenied".into()));
    assert_eq!(list(&bob, "team", Some("public/")).await, Ok(2));
    assert_eq!(list(&bob, "team", Some("private/")).await, Err("AccessDenied".into()));
    assert_eq!(list(&bob, "team", None).await, Err("AccessDenied".into()));
    assert_eq!(put(&bob, "team", "uploads/new").await, Ok(()));
    assert_eq!(put(&bob, "team", "public/b").await, Err("AccessDenied".into()));
    assert_eq!(delete(&bob, "team", "uploads/new").await, Err("AccessDenied".into()));
    let head = bob.head_object().bucket("team").key("public/a").send().await;
    assert!(head.is_ok(), "HEAD needs s3:GetObject, which Get* grants");
    // The policy is bob's, not carol's; the owner (root) keeps everything the Deny does not name.
    assert_eq!(get(&carol, "team", "public/a").await, Err("AccessDenied".into()));
    assert_eq!(get(&gw.client, "team", "public/secret.txt").await, Ok(()));
    // A copy needs s3:GetObject on its source: bob copies a granted key into his own bucket.
    bob.create_bucket().bucket("bobs").send().await.unwrap();
    let copy = |source: &'static str| copy_request(&bob, "bobs", "copy", source).send();
    assert!(copy("team/public/a").await.is_ok());
    let refused = copy("team/private/a").await.unwrap_err();
    assert_eq!(refused.into_service_error().meta().code(), Some("AccessDenied"));
    // Bob's grant does not reach the policy itself.
    let read = bob.get_bucket_policy().bucket("team").send().await.unwrap_err();
    assert_eq!(read.into_service_error().meta().code(), Some("AccessDenied"));
    gw.stop().await;
}

#[tokio::test]
async fn an_explicit_deny_binds_the_owner_but_never_locks_it_out_of_the_policy() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("locked").send().await.unwrap();
    for key in ["keep", "tmp/a", "tmp/b"] {
        put(&gw.client, "locked", key).await.unwrap();
    }
    let bob = add_key(&gw, "BOBKEY").await;
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Principal":"*",
        "Action":["s3:DeleteObject","s3:PutBucketPolicy","s3:DeleteBucketPolicy","s3:GetBucketPolicy"],
        "Resource":["arn:aws:s3:::locked","arn:aws:s3:::locked/keep*"]},
        {"Effect":"Allow","Principal":{"AWS":"BOBKEY"},"Action":"s3:DeleteObject","Resource":"arn:aws:s3:::locked/tmp/a"}]}"#;
    put_policy(&gw, "locked", policy).await.unwrap();
    assert_eq!(delete(&gw.client, "locked", "keep").await, Err("AccessDenied".into()));
    assert_eq!(get(&gw.client, "locked", "keep").await, Ok(()));
    // DeleteObjects decides each key as its own DeleteObject would be decided.
    let many = |keys: &[&str]| {
        let objects = keys
            .iter()
            .map(|key| {
                aws_sdk_s3::types::ObjectIdentifier::builder()
                    .key(*key)
                    .build()
                    .unwrap()
            })
            .collect();
        aws_sdk_s3::types::Delete::builder()
            .set_objects(Some(objects))
            .build()
            .unwrap()
    };
    let outcome = gw
        .client
        .delete_objects()
        .bucket("locked")
        .delete(many(&["keep", "tmp/b"]))
        .send()
        .await
        .unwrap();
    let refused: Vec<_> = outcome.errors().iter().map(|e| (e.key(), e.code())).collect();
    assert_eq!(refused, [(Some("keep"), Some("AccessDenied"))]);
    assert_eq!(get(&gw.client, "locked", "tmp/b").await, Err("NoSuchKey".into()));
    let outcome = bob
        .delete_objects()
        .bucket("locked")
        .delete(many(&["tmp/a", "keep"]))
        .send()
        .await
        .unwrap();
    let deleted: Vec<_> = outcome.deleted().iter().map(|d| d.key()).collect();
    assert_eq!(deleted, [Some("tmp/a")]);
    assert_eq!(outcome.errors().len(), 1);
    assert_eq!(get(&gw.client, "locked", "keep").await, Ok(()));
    // The owner still reads, replaces and deletes the policy that denies it.
    gw.client.get_bucket_policy().bucket("locked").send().await.unwrap();
    gw.client.delete_bucket_policy().bucket("locked").send().await.unwrap();
    assert_eq!(delete(&gw.client, "locked", "keep").await, Ok(()));
    gw.stop().await;
}

#[tokio::test]
async fn anonymous_requests_get_what_a_public_policy_allows_and_s3s_errors_otherwise() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("site").send().await.unwrap();
    gw.client.create_bucket().bucket("closed").send().await.unwrap();
    put(&gw.client, "site", "index.html").await.unwrap();
    put(&gw.client, "closed", "k").await.unwrap();

    // Before any policy: unsigned requests are refused.
    let refused = unsigned(&gw, "GET", "/site/index.html", b"").await;
    assert_eq!((refused.status, refused.code()), (403, Some("AccessDenied")));

    let policy = r#"{"Version":"2012-10-17","Statement":[
        {"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::site/*"},
        {"Effect":"Allow","Principal":{"AWS":"*"},"Action":"s3:ListBucket","Resource":"arn:aws:s3:::site"}]}"#;
    put_policy(&gw, "site", policy).await.unwrap();

    let read = unsigned(&gw, "GET", "/site/index.html", b"").await;
    assert_eq!((read.status, read.body.as_str()), (200, "data"));
    let head = unsigned(&gw, "HEAD", "/site/index.html", b"").await;
    assert_eq!(head.status, 200);
    let listed = unsigned(&gw, "GET", "/site?list-type=2", b"").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(listed.body.contains("<Key>index.html</Key>"), "{}", listed.body);
    // Everyone may list, so a missing key is NoSuchKey.
    let missing = unsigned(&gw, "GET", "/site/nothing", b"").await;
    assert_eq!((missing.status, missing.code()), (404, Some("NoSuchKey")));

    for (method, path, status, code) in [
        ("PUT", "/site/new", 403, "AccessDenied"),
        ("DELETE", "/site/index.html", 403, "AccessDenied"),
        ("GET", "/site?policy", 403, "AccessDenied"),
        ("GET", "/closed/k", 403, "AccessDenied"),
        ("GET", "/no-such-bucket/k", 404, "NoSuchBucket"),
        ("GET", "/", 403, "AccessDenied"),
        ("PUT", "/brand-new-bucket", 403, "AccessDenied"),
    ] {
        let body: &[u8] = if method == "PUT" { b"x" } else { b"" };
        let refused = unsigned(&gw, method, path, body).await;
        assert_eq!(
            (refused.status, refused.code()),
            (status, Some(code)),
            "{method} {path}: {}",
            refused.body
        );
    }
    // Still there, and no bucket was made.
    assert_eq!(get(&gw.client, "site", "index.html").await, Ok(()));
    assert!(gw.client.head_bucket().bucket("brand-new-bucket").send().await.is_err());
    gw.stop().await;
}

#[tokio::test]
async fn condition_keys_narrow_and_widen_grants() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("cond").send().await.unwrap();
    put(&gw.client, "cond", "k").await.unwrap();
    let bob = add_key(&gw, "BOBKEY").await;
    let cases = [
        // aws:SourceIp: the tests connect from 127.0.0.1.
        (r#"{"IpAddress":{"aws:SourceIp":["127.0.0.0/8"]}}"#, true),
        (r#"{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}"#, false),
        (r#"{"NotIpAddress":{"aws:SourceIp":"10.0.0.0/8"}}"#, true),
        // aws:SecureTransport: this listener is plaintext.
        (r#"{"Bool":{"aws:SecureTransport":"true"}}"#, false),
        (r#"{"Bool":{"aws:SecureTransport":"false"}}"#, true),
        // aws:CurrentTime.
        (r#"{"DateLessThan":{"aws:CurrentTime":"2000-01-01T00:00:00Z"}}"#, false),
        (
            r#"{"DateGreaterThan":{"aws:CurrentTime":"2000-01-01T00:00:00Z"}}"#,
            true,
        ),
        // A key the request does not carry: false, unless negated or IfExists.
        (r#"{"StringEquals":{"s3:x-amz-acl":"public-read"}}"#, false),
        (r#"{"StringNotEquals":{"s3:x-amz-acl":"public-read"}}"#, true),
        (r#"{"StringEqualsIfExists":{"s3:x-amz-acl":"public-read"}}"#, true),
        (r#"{"Null":{"s3:x-amz-acl":"true"}}"#, true),
        (r#"{"StringEquals":{"aws:username":"BOBKEY"}}"#, true),
    ];
    for (condition, allowed) in cases {
        let policy = format!(
            r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Principal":{{"AWS":"BOBKEY"}},"Action":"s3:GetObject","Resource":"arn:aws:s3:::cond/*","Condition":{condition}}}]}}"#
        );
        put_policy(&gw, "cond", &policy).await.unwrap();
        let expected = if allowed {
            Ok(())
        } else {
            Err("AccessDenied".to_owned())
        };
        assert_eq!(get(&bob, "cond", "k").await, expected, "{condition}");
    }
    // s3:max-keys and s3:delimiter on listings.
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"BOBKEY"},"Action":"s3:ListBucket","Resource":"arn:aws:s3:::cond","Condition":{"NumericLessThanEquals":{"s3:max-keys":"10"},"StringEquals":{"s3:delimiter":"/"}}}]}"#;
    put_policy(&gw, "cond", policy).await.unwrap();
    let small = bob
        .list_objects_v2()
        .bucket("cond")
        .max_keys(5)
        .delimiter("/")
        .send()
        .await;
    assert!(small.is_ok(), "{small:?}");
    let big = bob
        .list_objects_v2()
        .bucket("cond")
        .max_keys(50)
        .delimiter("/")
        .send()
        .await
        .unwrap_err();
    assert_eq!(big.into_service_error().meta().code(), Some("AccessDenied"));
    gw.stop().await;
}

/// AWS's server-access-log delivery policy (a `Service` principal, `ArnLike` on
/// `aws:SourceArn`, `aws:SourceAccount`) is taken (it was 501 NotImplemented for `ArnLike`) and
/// allows no request of the S3 front: none is the logging service's, and none carries
/// `aws:SourceArn`, so on a key's request the `Arn*` operators see it absent, as IAM does.
#[tokio::test]
async fn the_log_delivery_policy_is_taken_and_arn_conditions_see_no_source() {
    let gw = TestGateway::start().await;
    for bucket in ["logs", "src"] {
        gw.client.create_bucket().bucket(bucket).send().await.unwrap();
    }
    let bob = add_key(&gw, "BOBKEY").await;
    let delivery = r#"{"Version":"2012-10-17","Statement":[{"Sid":"S3ServerAccessLogsPolicy","Effect":"Allow",
        "Principal":{"Service":"logging.s3.amazonaws.com"},"Action":["s3:PutObject"],"Resource":"arn:aws:s3:::logs/log/*",
        "Condition":{"ArnLike":{"aws:SourceArn":"arn:aws:s3:::src"},"StringEquals":{"aws:SourceAccount":"123456789012"}}}]}"#;
    put_policy(&gw, "logs", delivery).await.unwrap();
    let status = gw
        .client
        .get_bucket_policy_status()
        .bucket("logs")
        .send()
        .await
        .unwrap();
    assert_eq!(status.policy_status().and_then(|s| s.is_public()), Some(false));
    assert_eq!(put(&bob, "logs", "log/x").await, Err("AccessDenied".to_owned()));
    put(&gw.client, "logs", "log/x").await.unwrap();
    let cases = [
        (r#"{"ArnLike":{"aws:SourceArn":"arn:aws:s3:::*"}}"#, false),
        (r#"{"ArnEquals":{"aws:SourceArn":"arn:aws:s3:::src"}}"#, false),
        (r#"{"ArnNotLike":{"aws:SourceArn":"arn:aws:s3:::src"}}"#, true),
        (r#"{"ArnNotEquals":{"aws:SourceArn":"arn:aws:s3:::src"}}"#, true),
        (r#"{"ArnEqualsIfExists":{"aws:SourceArn":"arn:aws:s3:::src"}}"#, true),
        (r#"{"ArnLikeIfExists":{"aws:SourceArn":"arn:aws:s3:::other"}}"#, true),
    ];
    for (condition, allowed) in cases {
        let policy = format!(
            r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Principal":{{"AWS":"BOBKEY"}},"Action":"s3:GetObject","Resource":"arn:aws:s3:::logs/*","Condition":{condition}}}]}}"#
        );
        put_policy(&gw, "logs", &policy).await.unwrap();
        let expected = if allowed {
            Ok(())
        } else {
            Err("AccessDenied".to_owned())
        };
        assert_eq!(get(&bob, "logs", "log/x").await, expected, "{condition}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn boto3_puts_a_policy_and_reads_a_public_bucket_unsigned() {
    let gw = TestGateway::start().await;
    add_key(&gw, "BOBKEY").await;
    let script = [
        BOTO3_ROOT_BOB_ANON,
        r#"
root.create_bucket(Bucket="pub")
root.put_object(Bucket="pub", Key="docs/a.txt", Body=b"hello")
assert code(lambda: anon.get_object(Bucket="pub", Key="docs/a.txt")) == "AccessDenied"
policy = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject"], "Resource": "arn:aws:s3:::pub/docs/*"},
    {"Effect": "Allow", "Principal": {"AWS": ["BOBKEY"]}, "Action": "s3:PutObject", "Resource": "arn:aws:s3:::pub/docs/*"},
    {"Effect": "Deny", "Principal": {"AWS": "BOBKEY"}, "Action": "s3:PutObject", "Resource": "arn:aws:s3:::pub/docs/locked*"}]}
root.put_bucket_policy(Bucket="pub", Policy=json.dumps(policy))
assert json.loads(root.get_bucket_policy(Bucket="pub")["Policy"]) == policy
assert root.get_bucket_policy_status(Bucket="pub")["PolicyStatus"]["IsPublic"] is True
assert anon.get_object(Bucket="pub", Key="docs/a.txt")["Body"].read() == b"hello"
assert anon.head_object(Bucket="pub", Key="docs/a.txt")["ContentLength"] == 5
assert code(lambda: anon.put_object(Bucket="pub", Key="docs/b.txt", Body=b"x")) == "AccessDenied"
assert code(lambda: anon.list_objects_v2(Bucket="pub")) == "AccessDenied"
bob.put_object(Bucket="pub", Key="docs/from-bob.txt", Body=b"bob")
assert (c := code(lambda: bob.put_object(Bucket="pub", Key="docs/locked.txt", Body=b"x"))) == "AccessDenied", c
assert (c := code(lambda: bob.put_object(Bucket="pub", Key="other.txt", Body=b"x"))) == "AccessDenied", c
assert code(lambda: root.put_bucket_policy(Bucket="pub", Policy="{")) == "MalformedPolicy"
root.delete_bucket_policy(Bucket="pub")
assert code(lambda: anon.get_object(Bucket="pub", Key="docs/a.txt")) == "AccessDenied"
assert code(lambda: root.get_bucket_policy(Bucket="pub")) == "NoSuchBucketPolicy"
print("boto3 policy ok")
"#,
    ]
    .concat();
    gw.python_passes(&script, "boto3 policy ok").await;
    gw.stop().await;
}

#[tokio::test]
async fn a_public_access_block_refuses_and_restricts_public_policies() {
    use aws_sdk_s3::types::PublicAccessBlockConfiguration;
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("guarded").send().await.unwrap();
    put(&gw.client, "guarded", "k").await.unwrap();
    let bob = add_key(&gw, "BOBKEY").await;
    let missing = gw
        .client
        .get_public_access_block()
        .bucket("guarded")
        .send()
        .await
        .unwrap_err();
    let missing = missing.into_service_error();
    assert_eq!(missing.meta().code(), Some("NoSuchPublicAccessBlockConfiguration"));

    let block = |policy: bool, restrict: bool| {
        PublicAccessBlockConfiguration::builder()
            .block_public_acls(true)
            .ignore_public_acls(false)
            .block_public_policy(policy)
            .restrict_public_buckets(restrict)
            .build()
    };
    let set = |config: PublicAccessBlockConfiguration| {
        gw.client
            .put_public_access_block()
            .bucket("guarded")
            .public_access_block_configuration(config)
            .send()
    };
    set(block(true, false)).await.unwrap();
    let got = gw
        .client
        .get_public_access_block()
        .bucket("guarded")
        .send()
        .await
        .unwrap();
    assert_eq!(got.public_access_block_configuration(), Some(&block(true, false)));

    let public = r#"{"Version":"2012-10-17","Statement":[
        {"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::guarded/*"},
        {"Effect":"Allow","Principal":{"AWS":"BOBKEY"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::guarded/*"}]}"#;
    assert_eq!(put_policy(&gw, "guarded", public).await.unwrap_err().0, "AccessDenied");
    let private = r#"{"Version":"2012-10-17","Statement":[
        {"Effect":"Allow","Principal":{"AWS":"BOBKEY"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::guarded/*"}]}"#;
    put_policy(&gw, "guarded", private).await.unwrap();

    // Without BlockPublicPolicy the public policy goes in; RestrictPublicBuckets then stops
    // its grant to everyone (anonymous refused) and keeps the grant naming bob.
    set(block(false, false)).await.unwrap();
    put_policy(&gw, "guarded", public).await.unwrap();
    assert_eq!(unsigned(&gw, "GET", "/guarded/k", b"").await.status, 200);
    set(block(false, true)).await.unwrap();
    let refused = unsigned(&gw, "GET", "/guarded/k", b"").await;
    assert_eq!((refused.status, refused.code()), (403, Some("AccessDenied")));
    assert_eq!(get(&bob, "guarded", "k").await, Ok(()));

    gw.client
        .delete_public_access_block()
        .bucket("guarded")
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned(&gw, "GET", "/guarded/k", b"").await.status, 200);
    gw.stop().await;
}

/// Hostile: a grant to everyone "from" `0.0.0.0/0` (or another condition that pins no one) is
/// public, as AWS counts it. With every Block Public Access setting on, it is refused; put
/// without BlockPublicPolicy, GetBucketPolicyStatus says so and RestrictPublicBuckets keeps
/// anonymous requests out. (Before: accepted, `IsPublic=false`, anonymous GET 200.)
#[tokio::test]
async fn conditions_that_pin_no_one_do_not_hide_a_public_policy() {
    use aws_sdk_s3::types::PublicAccessBlockConfiguration;
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("walled").send().await.unwrap();
    put(&gw.client, "walled", "k").await.unwrap();
    let set = |policy: bool, restrict: bool| {
        gw.client
            .put_public_access_block()
            .bucket("walled")
            .public_access_block_configuration(
                PublicAccessBlockConfiguration::builder()
                    .block_public_acls(true)
                    .ignore_public_acls(true)
                    .block_public_policy(policy)
                    .restrict_public_buckets(restrict)
                    .build(),
            )
            .send()
    };
    set(true, true).await.unwrap();
    let grant = |condition: &str| {
        format!(
            r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::walled/*","Condition":{condition}}}]}}"#
        )
    };
    let everywhere = grant(r#"{"IpAddress":{"aws:SourceIp":"0.0.0.0/0"}}"#);
    for pins_no_one in [
        everywhere.clone(),
        grant(r#"{"IpAddress":{"aws:SourceIp":["127.0.0.1/32","0.0.0.0/1","128.0.0.0/1"]}}"#),
        grant(r#"{"StringLike":{"aws:userid":"*"}}"#),
        grant(r#"{"StringEquals":{"aws:username":"anyone"}}"#),
    ] {
        assert_eq!(
            put_policy(&gw, "walled", &pins_no_one).await.unwrap_err().0,
            "AccessDenied",
            "{pins_no_one}"
        );
    }
    // Pinned to one address: not public, so BlockPublicPolicy lets it in.
    put_policy(
        &gw,
        "walled",
        &grant(r#"{"IpAddress":{"aws:SourceIp":"192.0.2.7/32"}}"#),
    )
    .await
    .unwrap();

    set(false, true).await.unwrap();
    put_policy(&gw, "walled", &everywhere).await.unwrap();
    let status = gw
        .client
        .get_bucket_policy_status()
        .bucket("walled")
        .send()
        .await
        .unwrap();
    assert_eq!(status.policy_status().and_then(|s| s.is_public()), Some(true));
    let refused = unsigned(&gw, "GET", "/walled/k", b"").await;
    assert_eq!((refused.status, refused.code()), (403, Some("AccessDenied")));
    set(false, false).await.unwrap();
    assert_eq!(unsigned(&gw, "GET", "/walled/k", b"").await.status, 200);
    gw.stop().await;
}
