//! Issue 34 step 2's leftovers, with boto3: a read after a delete answers as S3 documents it
//! (the current version a delete marker: 404 with `x-amz-delete-marker: true` and the marker's
//! `x-amz-version-id`; the marker named by id: 405 with the header and its `Last-Modified`; a
//! key that is simply gone: no `x-amz-delete-marker` at all, S3 never sends it as false), and a
//! CompleteMultipartUpload whose part list repeats a part number is refused with
//! InvalidPartOrder (the list must be strictly ascending), the upload still completable.

use pgvs3_testkit as common;

use common::TestGateway;

const DELETE_MARKERS: &str = r#"
import os, boto3, botocore
url = os.environ["AWS_ENDPOINT_URL"]
s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                  aws_access_key_id=os.environ["AK"], aws_secret_access_key=os.environ["SK"])

def refused(call, **args):
    try:
        call(**args)
    except botocore.exceptions.ClientError as err:
        meta = err.response["ResponseMetadata"]
        return meta["HTTPStatusCode"], err.response["Error"]["Code"], meta["HTTPHeaders"]
    raise AssertionError("expected a refusal")

s3.create_bucket(Bucket="ver")
s3.put_bucket_versioning(Bucket="ver", VersioningConfiguration={"Status": "Enabled"})
s3.put_object(Bucket="ver", Key="k", Body=b"one")
marker = s3.delete_object(Bucket="ver", Key="k")["VersionId"]

for call in (s3.head_object, s3.get_object):
    status, _, headers = refused(call, Bucket="ver", Key="k")
    assert status == 404, (call, status)
    assert headers.get("x-amz-delete-marker") == "true", (call, headers)
    assert headers.get("x-amz-version-id") == marker, (call, headers)
    status, _, headers = refused(call, Bucket="ver", Key="k", VersionId=marker)
    assert status == 405, (call, status)
    assert headers.get("x-amz-delete-marker") == "true", (call, headers)
    assert headers.get("x-amz-version-id") == marker, (call, headers)
    assert "last-modified" in headers, (call, headers)
code = refused(s3.get_object, Bucket="ver", Key="k")[1]
assert code == "NoSuchKey", code
code = refused(s3.get_object, Bucket="ver", Key="k", VersionId=marker)[1]
assert code == "MethodNotAllowed", code

# A key never written in a versioned bucket, and a deleted key in a plain one: a bare 404.
status, _, headers = refused(s3.head_object, Bucket="ver", Key="never")
assert status == 404 and "x-amz-delete-marker" not in headers, headers
s3.create_bucket(Bucket="plain")
s3.put_object(Bucket="plain", Key="k", Body=b"one")
s3.delete_object(Bucket="plain", Key="k")
for call in (s3.head_object, s3.get_object):
    status, _, headers = refused(call, Bucket="plain", Key="k")
    assert status == 404 and "x-amz-delete-marker" not in headers, (call, headers)
print("delete markers ok")
"#;

#[tokio::test]
async fn reads_after_a_delete_name_the_delete_marker_as_s3_does() {
    let gw = TestGateway::start().await;
    gw.python_passes(DELETE_MARKERS, "delete markers ok").await;
    gw.stop().await;
}

const REPEATED_PARTS: &str = r#"
import os, boto3, botocore
url = os.environ["AWS_ENDPOINT_URL"]
s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                  aws_access_key_id=os.environ["AK"], aws_secret_access_key=os.environ["SK"])
s3.create_bucket(Bucket="mpu")
upload = s3.create_multipart_upload(Bucket="mpu", Key="k")["UploadId"]
first = s3.upload_part(Bucket="mpu", Key="k", UploadId=upload, PartNumber=1, Body=b"a" * (5 << 20))["ETag"]
second = s3.upload_part(Bucket="mpu", Key="k", UploadId=upload, PartNumber=2, Body=b"b")["ETag"]
one, two = {"PartNumber": 1, "ETag": first}, {"PartNumber": 2, "ETag": second}
for parts in ([one, one, two], [one, two, two], [two, one]):
    try:
        s3.complete_multipart_upload(Bucket="mpu", Key="k", UploadId=upload, MultipartUpload={"Parts": parts})
        raise AssertionError(("completed", parts))
    except botocore.exceptions.ClientError as err:
        assert err.response["ResponseMetadata"]["HTTPStatusCode"] == 400, err.response
        assert err.response["Error"]["Code"] == "InvalidPartOrder", (parts, err.response["Error"])
s3.complete_multipart_upload(Bucket="mpu", Key="k", UploadId=upload, MultipartUpload={"Parts": [one, two]})
assert s3.head_object(Bucket="mpu", Key="k")["ContentLength"] == (5 << 20) + 1
print("repeated parts ok")
"#;

#[tokio::test]
async fn a_repeated_part_number_in_complete_multipart_upload_is_invalid_part_order() {
    let gw = TestGateway::start().await;
    gw.python_passes(REPEATED_PARTS, "repeated parts ok").await;
    gw.stop().await;
}
