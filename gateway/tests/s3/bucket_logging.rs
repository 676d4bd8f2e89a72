//! S3 server access logging, with boto3: Put/GetBucketLogging round trips (SimplePrefix,
//! PartitionedPrefix, TargetGrants), the refusals S3 answers (a missing target, another
//! owner's target, grants on a BucketOwnerEnforced target, a bad PartitionDateSource, a key
//! that does not own the source), and records delivered to the target bucket as log objects
//! named `TargetPrefix YYYY-mm-DD-HH-MM-SS-UniqueString`, each line S3's 26 fields in order,
//! parsed as Ceph's s3-tests parse them. Two gateways on one database deliver every record
//! exactly once.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_s3::operation::RequestId;
use pgvs3_testkit as common;

use common::s3::{BOTO3_ROOT_BOB_ANON, add_key};
use common::{TestGateway, eventually};

/// Helpers of the scripts below: `records(prefix, want)` waits until the log objects under
/// `prefix` in `logs` hold lines that `want` accepts, and answers the parsed lines.
const RECORDS: &str = r#"
import re, shlex, time
FIELDS = ["BucketOwner", "BucketName", "RequestDateTime", "RemoteIP", "Requester", "RequestID",
          "Operation", "Key", "RequestURI", "HTTPStatus", "ErrorCode", "BytesSent", "ObjectSize",
          "TotalTime", "TurnAroundTime", "Referrer", "UserAgent", "VersionID", "HostID", "SigVersion",
          "CipherSuite", "AuthType", "HostHeader", "TLSVersion", "AccessPointARN", "ACLRequired"]
def parse(line):
    chunks = shlex.split(line.replace("[", '"').replace("]", '"'))
    assert len(chunks) == 26, (len(chunks), line)
    return dict(zip(FIELDS, chunks))
def log_lines(bucket, prefix):
    lines, keys = [], []
    for page in root.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for entry in page.get("Contents", []):
            keys.append(entry["Key"])
            body = root.get_object(Bucket=bucket, Key=entry["Key"])["Body"].read().decode()
            lines.extend(parse(line) for line in body.splitlines())
    return keys, lines
def records(bucket, prefix, want):
    deadline = time.time() + 60
    while True:
        keys, lines = log_lines(bucket, prefix)
        if want(lines):
            return keys, lines
        assert time.time() < deadline, ("records not delivered", lines)
        time.sleep(0.2)
"#;

const DELIVERED: &str = r#"
import datetime
root.create_bucket(Bucket="src")
root.create_bucket(Bucket="logs")
assert "LoggingEnabled" not in root.get_bucket_logging(Bucket="src")
root.put_bucket_logging(Bucket="src", BucketLoggingStatus={
    "LoggingEnabled": {"TargetBucket": "logs", "TargetPrefix": "log/"}})
assert root.get_bucket_logging(Bucket="src")["LoggingEnabled"] == {"TargetBucket": "logs", "TargetPrefix": "log/"}

put = root.put_object(Bucket="src", Key="dir/a b", Body=b"hello")
put_id = put["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
got = root.get_object(Bucket="src", Key="dir/a b")
assert got["Body"].read() == b"hello"
get_id = got["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
assert code(lambda: root.head_object(Bucket="src", Key="missing")) == "404"
assert code(lambda: root.get_object(Bucket="src", Key="missing")) == "NoSuchKey"
root.list_objects_v2(Bucket="src")
assert code(lambda: bob.get_object(Bucket="src", Key="dir/a b")) == "AccessDenied"

# The last request's record is the newest; delivered oldest first, so the others are in too.
keys, lines = records("logs", "log/", lambda lines: any(l["Requester"] == "BOBKEY" for l in lines))
for key in keys:
    assert re.fullmatch(r"log/\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d-[0-9A-F]{16}", key), key
by_id = {line["RequestID"]: line for line in lines}
assert all(line["BucketName"] == "src" for line in lines), lines
assert all(line["BucketOwner"] == os.environ["AK"] for line in lines), lines

line = by_id[put_id]
assert line["Operation"] == "REST.PUT.OBJECT", line
assert line["Key"] == "dir/a%20b", line
assert line["RequestURI"].startswith("PUT /src/dir/a%20b"), line
assert line["RequestURI"].endswith(" HTTP/1.1"), line
assert (line["HTTPStatus"], line["ErrorCode"], line["ObjectSize"]) == ("200", "-", "5"), line
assert line["Requester"] == os.environ["AK"], line
assert line["RemoteIP"] == "127.0.0.1", line
assert "Boto3" in line["UserAgent"] or "botocore" in line["UserAgent"], line
assert (line["SigVersion"], line["AuthType"]) == ("SigV4", "AuthHeader"), line
assert line["HostHeader"] == url.split("//")[1], line
assert line["VersionID"] == "-" and line["AccessPointARN"] == "-", line
when = datetime.datetime.strptime(line["RequestDateTime"], "%d/%b/%Y:%H:%M:%S %z")
assert abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) < 120, when
assert int(line["TotalTime"]) >= int(line["TurnAroundTime"]) >= 0, line

line = by_id[get_id]
assert (line["Operation"], line["HTTPStatus"], line["BytesSent"], line["ObjectSize"]) == \
    ("REST.GET.OBJECT", "200", "5", "5"), line
missing = [l for l in lines if l["Key"] == "missing"]
assert sorted((l["Operation"], l["HTTPStatus"], l["ErrorCode"]) for l in missing) == \
    [("REST.GET.OBJECT", "404", "NoSuchKey"), ("REST.HEAD.OBJECT", "404", "NoSuchKey")], missing
assert any(l["Operation"] == "REST.GET.BUCKET" and l["Key"] == "-" for l in lines), lines
denied = [l for l in lines if l["Requester"] == "BOBKEY"]
assert [(l["HTTPStatus"], l["ErrorCode"]) for l in denied] == [("403", "AccessDenied")], denied

# Logging off: nothing more is logged. Records are delivered oldest first, so once a later
# record of another bucket is in, one of src's would be too.
root.put_bucket_logging(Bucket="src", BucketLoggingStatus={})
assert "LoggingEnabled" not in root.get_bucket_logging(Bucket="src")
root.put_object(Bucket="src", Key="after-off", Body=b"x")
root.create_bucket(Bucket="other")
root.put_bucket_logging(Bucket="other", BucketLoggingStatus={
    "LoggingEnabled": {"TargetBucket": "logs", "TargetPrefix": "other/"}})
root.put_object(Bucket="other", Key="later", Body=b"x")
records("logs", "other/", lambda lines: any(l["Key"] == "later" for l in lines))
keys, lines = log_lines("logs", "log/")
assert not any(l["Key"] == "after-off" for l in lines), lines
print("delivered ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn access_logs_are_delivered_as_s3_writes_them() {
    let gw = TestGateway::start().await;
    add_key(&gw, "BOBKEY").await;
    gw.python_passes(&format!("{BOTO3_ROOT_BOB_ANON}{RECORDS}{DELIVERED}"), "delivered ok")
        .await;
    gw.stop().await;
}

const CONFIGURATIONS: &str = r#"
root.create_bucket(Bucket="src")
root.create_bucket(Bucket="logs")
bob.create_bucket(Bucket="bobs")
def logging(bucket, enabled, client=root):
    return code(lambda: client.put_bucket_logging(Bucket=bucket, BucketLoggingStatus={"LoggingEnabled": enabled}))

assert logging("src", {"TargetBucket": "nowhere", "TargetPrefix": "x/"}) == "InvalidTargetBucketForLogging"
assert logging("src", {"TargetBucket": "bobs", "TargetPrefix": "x/"}) == "InvalidTargetBucketForLogging"
assert logging("bobs", {"TargetBucket": "logs", "TargetPrefix": "x/"}) == "InvalidTargetBucketForLogging"
assert logging("src", {"TargetBucket": "logs", "TargetPrefix": "x/"}, client=bob) == "AccessDenied"
assert code(lambda: bob.get_bucket_logging(Bucket="src")) == "AccessDenied"
assert code(lambda: root.put_bucket_logging(Bucket="nosuch", BucketLoggingStatus={
    "LoggingEnabled": {"TargetBucket": "logs", "TargetPrefix": "x/"}})) == "NoSuchBucket"
bad_source = {"TargetBucket": "logs", "TargetPrefix": "x/",
              "TargetObjectKeyFormat": {"PartitionedPrefix": {"PartitionDateSource": "kaboom"}}}
assert logging("src", bad_source) == "MalformedXML"
grant = {"Grantee": {"Type": "CanonicalUser", "ID": "BOBKEY"}, "Permission": "READ"}
with_grants = {"TargetBucket": "logs", "TargetPrefix": "x/", "TargetGrants": [grant]}
assert logging("src", with_grants) == "AccessControlListNotSupported"

for enabled in ({"TargetBucket": "logs", "TargetPrefix": "s/", "TargetObjectKeyFormat": {"SimplePrefix": {}}},
                {"TargetBucket": "logs", "TargetPrefix": "p/",
                 "TargetObjectKeyFormat": {"PartitionedPrefix": {"PartitionDateSource": "EventTime"}}},
                {"TargetBucket": "logs", "TargetPrefix": "p/",
                 "TargetObjectKeyFormat": {"PartitionedPrefix": {"PartitionDateSource": "DeliveryTime"}}}):
    assert logging("src", enabled) is None
    got = root.get_bucket_logging(Bucket="src")["LoggingEnabled"]
    assert got == enabled, (got, enabled)

# Grants on a target whose ACLs are on: kept, answered, and the log objects' ACL.
root.put_bucket_ownership_controls(Bucket="logs", OwnershipControls={"Rules": [{"ObjectOwnership": "ObjectWriter"}]})
assert logging("src", with_grants) is None
got = root.get_bucket_logging(Bucket="src")["LoggingEnabled"]["TargetGrants"]
assert [(g["Grantee"]["ID"], g["Permission"]) for g in got] == [("BOBKEY", "READ")], got
root.put_object(Bucket="src", Key="granted", Body=b"x")
keys, lines = records("logs", "x/", lambda lines: any(l["Key"] == "granted" for l in lines))
assert bob.get_object(Bucket="logs", Key=keys[0])["Body"].read()

# PartitionedPrefix: SourceAccountId/SourceRegion/SourceBucket/YYYY/MM/DD/ under the prefix.
assert logging("src", {"TargetBucket": "logs", "TargetPrefix": "q/",
    "TargetObjectKeyFormat": {"PartitionedPrefix": {"PartitionDateSource": "EventTime"}}}) is None
root.put_object(Bucket="src", Key="partitioned", Body=b"x")
keys, _ = records("logs", "q/", lambda lines: any(l["Key"] == "partitioned" for l in lines))
ak = os.environ["AK"]
assert all(re.fullmatch(rf"q/{ak}/us-east-1/src/(\d{{4}})/(\d\d)/(\d\d)/\1-\2-\3-00-00-00-[0-9A-F]{{16}}", k) for k in keys), keys

# A bucket may log to itself; the log objects' own writes are not logged.
assert logging("logs", {"TargetBucket": "logs", "TargetPrefix": "self/"}) is None
root.put_object(Bucket="logs", Key="own", Body=b"x")
keys, lines = records("logs", "self/", lambda lines: any(l["Key"] == "own" for l in lines))
assert not any(l["Key"].startswith("self/") and l["Operation"] == "REST.PUT.OBJECT" for l in lines), lines
print("configurations ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bucket_logging_configurations_are_checked_and_kept() {
    let gw = TestGateway::start().await;
    add_key(&gw, "BOBKEY").await;
    gw.python_passes(
        &format!("{BOTO3_ROOT_BOB_ANON}{RECORDS}{CONFIGURATIONS}"),
        "configurations ok",
    )
    .await;
    gw.stop().await;
}

/// Two gateways on one database, both queueing and delivering: every request's record is in
/// exactly one log object, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_deliver_each_record_once() {
    let first = TestGateway::start().await;
    let second = TestGateway::on(first.database_url.clone()).await;
    let s3 = &first.client;
    s3.create_bucket().bucket("src").send().await.unwrap();
    s3.create_bucket().bucket("logs").send().await.unwrap();
    s3.put_bucket_logging()
        .bucket("src")
        .bucket_logging_status(
            aws_sdk_s3::types::BucketLoggingStatus::builder()
                .logging_enabled(
                    aws_sdk_s3::types::LoggingEnabled::builder()
                        .target_bucket("logs")
                        .target_prefix("log/")
                        .build()
                        .unwrap(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    // The second gateway learns the configuration with its catalog.
    second.gateway.store.catalog().refresh().await.unwrap();
    let mut expected = Vec::new();
    for n in 0..60 {
        let client = if n % 2 == 0 { &first.client } else { &second.client };
        let put = client
            .put_object()
            .bucket("src")
            .key(format!("k{n}"))
            .body(aws_sdk_s3::primitives::ByteStream::from_static(b"x"))
            .send()
            .await
            .unwrap();
        expected.push(put.request_id().expect("a request id").to_owned());
    }
    let seen: HashMap<String, usize> = eventually(Duration::from_secs(60), "every record delivered", || async {
        let listed = s3.list_objects_v2().bucket("logs").prefix("log/").send().await.ok()?;
        let mut seen = HashMap::new();
        for object in listed.contents() {
            let body = s3
                .get_object()
                .bucket("logs")
                .key(object.key()?)
                .send()
                .await
                .ok()?
                .body
                .collect()
                .await
                .ok()?
                .into_bytes();
            for line in String::from_utf8_lossy(&body).lines() {
                // The seventh word: the time (`[06/Feb/2019:00:00:38 +0000]`) is two.
                let id = line.split(' ').nth(6)?.to_owned();
                *seen.entry(id).or_insert(0) += 1;
            }
        }
        expected.iter().all(|id| seen.contains_key(id)).then_some(seen)
    })
    .await;
    for id in &expected {
        assert_eq!(seen[id], 1, "request {id} logged once");
    }
    assert_eq!(seen.len(), expected.len(), "no other records: {seen:?}");
    second.stop().await;
    first.stop().await;
}
