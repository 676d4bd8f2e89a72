//! Browser uploads (POST Object) as S3 answers them: boto3's presigned POST policies (SigV4 and
//! SigV2) with `${filename}`, the 204/201/303 answers with the stored key, conditions refused
//! with 403 or EntityTooLarge/EntityTooSmall, settings pgvs3 does not keep refused; and the
//! form bounded before s3s reads it (Content-Length required, the size limit, the bucket, the
//! buffer budget reserved only once the form may write), unsigned forms to a private bucket
//! refused before their file is read.

use pgvs3_testkit as common;

use std::time::Duration;

use common::TestGateway;
use common::raw;
use tokio::io::AsyncWriteExt;

/// The scripts' imports and helpers: `post` sends a form as a browser does, `code` reads an
/// error's code.
const HELPERS: &str = r#"
import json, os, re, uuid, urllib.request, urllib.error, boto3, botocore
from botocore.config import Config
url = os.environ["AWS_ENDPOINT_URL"]

def client(signature):
    return boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id=os.environ["AK"], aws_secret_access_key=os.environ["SK"],
                        config=Config(signature_version=signature))

def post(target, fields, filename, content):
    boundary = uuid.uuid4().hex
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
                 f'Content-Type: text/plain\r\n\r\n'.encode() + content + b'\r\n')
    parts.append(f'--{boundary}--\r\n'.encode())
    request = urllib.request.Request(target, data=b"".join(parts), method="POST",
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args):
            return None
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request) as response:
            return response.status, response.read().decode(), response.headers
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), err.headers

def code(body):
    found = re.search(r"<Code>([^<]*)</Code>", body)
    return found.group(1) if found else None
"#;

const CLIENT: &str = r#"
def keys(s3):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket="web").get("Contents", []))

root = client("s3v4")
root.create_bucket(Bucket="web")
for signature in ["s3v4", "s3"]:
    s3 = client(signature)
    root_prefix = f"{signature}/"
    conditions = [["starts-with", "$key", root_prefix], ["content-length-range", 2, 100]]
    form = s3.generate_presigned_post("web", root_prefix + "${filename}", Conditions=conditions, ExpiresIn=600)

    # 204 by default, with the object's ETag and Location; ${filename} is the file's name.
    status, body, headers = post(form["url"], form["fields"], "hello world.txt", b"hello world")
    assert status == 204, (signature, status, body)
    key = root_prefix + "hello world.txt"
    head = root.head_object(Bucket="web", Key=key)
    assert headers["ETag"] == head["ETag"], (headers["ETag"], head["ETag"])
    assert headers["Location"].endswith("/web/" + root_prefix + "hello%20world.txt"), headers["Location"]
    assert root.get_object(Bucket="web", Key=key)["Body"].read() == b"hello world"

    # Conditions: too large, too small (400), a key outside the prefix (403); nothing stored.
    before = keys(root)
    status, body, _ = post(form["url"], form["fields"], "big.txt", b"x" * 101)
    assert (status, code(body)) == (400, "EntityTooLarge"), (status, body)
    status, body, _ = post(form["url"], form["fields"], "small.txt", b"x")
    assert (status, code(body)) == (400, "EntityTooSmall"), (status, body)
    outside = dict(form["fields"], key="elsewhere/${filename}")
    status, body, _ = post(form["url"], outside, "a.txt", b"abc")
    assert (status, code(body)) == (403, "AccessDenied"), (status, body)
    assert "Policy Condition failed" in body, body
    # A field the policy does not name is refused; a tampered signature is refused.
    status, body, _ = post(form["url"], dict(form["fields"], **{"x-amz-meta-extra": "1"}), "a.txt", b"abc")
    assert (status, code(body)) == (403, "AccessDenied"), (status, body)
    signature_field = "x-amz-signature" if signature == "s3v4" else "signature"
    tampered = dict(form["fields"], **{signature_field: "0" * 64 if signature == "s3v4" else "AAAA"})
    status, body, _ = post(form["url"], tampered, "a.txt", b"abc")
    assert status == 403 and code(body) == "SignatureDoesNotMatch", (status, body)
    assert keys(root) == before, (keys(root), before)

# success_action_status 201: the PostResponse names the stored key and its ETag.
form = root.generate_presigned_post("web", "created/${filename}",
                                    Fields={"success_action_status": "201"},
                                    Conditions=[{"success_action_status": "201"}], ExpiresIn=600)
status, body, headers = post(form["url"], form["fields"], "c.txt", b"created")
assert status == 201, (status, body)
etag = root.head_object(Bucket="web", Key="created/c.txt")["ETag"]
assert "<Key>created/c.txt</Key>" in body and "<Bucket>web</Bucket>" in body, body
assert f"<ETag>{etag.replace(chr(34), '&quot;')}</ETag>" in body, (body, etag)

# success_action_redirect: 303 to the page with the bucket, the stored key and the ETag.
form = root.generate_presigned_post("web", "redirected/${filename}",
                                    Fields={"success_action_redirect": "http://app.example/done?from=form"},
                                    Conditions=[{"success_action_redirect": "http://app.example/done?from=form"}],
                                    ExpiresIn=600)
status, body, headers = post(form["url"], form["fields"], "r.txt", b"redirect")
assert status == 303, (status, body)
location = headers["Location"]
assert location.startswith("http://app.example/done?from=form&bucket=web&key=redirected%2Fr.txt&etag="), location

# An expired policy is refused before the file is read.
form = root.generate_presigned_post("web", "late", ExpiresIn=-10)
status, body, _ = post(form["url"], form["fields"], "l.txt", b"late")
assert (status, code(body)) == (403, "AccessDenied"), (status, body)

# Settings pgvs3 does not keep are refused, never stored without them; SSE-S3 is kept.
form = root.generate_presigned_post("web", "public", Fields={"acl": "public-read"},
                                    Conditions=[{"acl": "public-read"}], ExpiresIn=600)
status, body, _ = post(form["url"], form["fields"], "p.txt", b"public")
assert (status, code(body)) == (400, "AccessControlListNotSupported"), (status, body)
form = root.generate_presigned_post("web", "sse", Fields={"x-amz-server-side-encryption": "AES256"},
                                    Conditions=[{"x-amz-server-side-encryption": "AES256"}], ExpiresIn=600)
status, body, _ = post(form["url"], form["fields"], "s.txt", b"secret")
assert status == 204, (status, body)
assert root.head_object(Bucket="web", Key="sse")["ServerSideEncryption"] == "AES256"
form = root.generate_presigned_post("web", "kms", Fields={"x-amz-server-side-encryption": "aws:kms"},
                                    Conditions=[{"x-amz-server-side-encryption": "aws:kms"}], ExpiresIn=600)
status, body, _ = post(form["url"], form["fields"], "k.txt", b"secret")
assert (status, code(body)) == (501, "NotImplemented"), (status, body)
assert "public" not in keys(root) and "kms" not in keys(root), keys(root)
# Checksum fields are checked as PutObject's headers are: a wrong one is refused and nothing is
# stored; a right one is kept and answered.
import base64, hashlib
summed = base64.b64encode(hashlib.sha256(b"summed").digest()).decode()
wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
for value, expected in [(wrong, (400, "BadDigest")), (summed, (204, None))]:
    form = root.generate_presigned_post("web", "summed", Fields={"x-amz-checksum-sha256": value},
                                        Conditions=[{"x-amz-checksum-sha256": value}], ExpiresIn=600)
    status, body, _ = post(form["url"], form["fields"], "s.txt", b"summed")
    assert (status, code(body)) == expected, (status, body)
    if status == 400:
        assert "summed" not in keys(root), keys(root)
head = root.head_object(Bucket="web", Key="summed", ChecksumMode="ENABLED")
assert head.get("ChecksumSHA256") == summed, head
# A private acl is what every object has: accepted.
form = root.generate_presigned_post("web", "private", Fields={"acl": "private"},
                                    Conditions=[{"acl": "private"}], ExpiresIn=600)
status, body, _ = post(form["url"], form["fields"], "p.txt", b"private")
assert status == 204, (status, body)
# Where the bucket takes ACLs (BucketOwnerPreferred), the form's acl is the object's ACL.
root.create_bucket(Bucket="web-acl", ObjectOwnership="BucketOwnerPreferred")
form = root.generate_presigned_post("web-acl", "public", Fields={"acl": "public-read"},
                                    Conditions=[{"acl": "public-read"}], ExpiresIn=600)
status, body, _ = post(form["url"], form["fields"], "p.txt", b"public")
assert status == 204, (status, body)
grants = root.get_object_acl(Bucket="web-acl", Key="public")["Grants"]
assert {(g["Grantee"].get("URI"), g["Permission"]) for g in grants if g["Grantee"]["Type"] == "Group"} == {
    ("http://acs.amazonaws.com/groups/global/AllUsers", "READ")}, grants
print("post object ok")
"#;

#[tokio::test]
async fn boto3_presigned_posts_upload_as_s3_answers_them() {
    let gw = TestGateway::start().await;
    gw.python_passes(&format!("{HELPERS}{CLIENT}"), "post object ok").await;
    gw.stop().await;
}

fn form(boundary: &str, file: &[u8]) -> Vec<u8> {
    keyed_form(boundary, "anonymous", "f", file)
}

/// A form whose `key` field is `key` and whose file part is named `filename`.
fn keyed_form(boundary: &str, key: &str, filename: &str, file: &[u8]) -> Vec<u8> {
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\n{key}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(file);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    body
}

fn form_headers(length: Option<usize>) -> Vec<(String, String)> {
    let mut headers = vec![
        ("host".to_owned(), "localhost".to_owned()),
        (
            "content-type".to_owned(),
            "multipart/form-data; boundary=BND".to_owned(),
        ),
    ];
    match length {
        Some(length) => headers.push(("content-length".to_owned(), length.to_string())),
        None => headers.push(("transfer-encoding".to_owned(), "chunked".to_owned())),
    }
    headers
}

#[tokio::test]
async fn forms_are_bounded_before_they_are_read_and_unsigned_ones_refused() {
    let database = common::fresh_database().await;
    let gw = TestGateway::with_args(database, &["--s3-post-max-size", "256KiB", "--buffer-budget", "1MiB"]).await;
    gw.client.create_bucket().bucket("private").send().await.unwrap();
    gw.client.create_bucket().bucket("open").send().await.unwrap();
    let anyone_writes = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::open/*"}]}"#;
    gw.client
        .put_bucket_policy()
        .bucket("open")
        .policy(anyone_writes)
        .send()
        .await
        .unwrap();
    let addr = gw.gateway.s3_addr;
    let missing = |response: &raw::RawResponse| (response.status, response.code().map(str::to_owned));

    // No Content-Length (a chunked form): S3's 411.
    let body = form("BND", b"data");
    let chunked = [
        format!("{:x}\r\n", body.len()).into_bytes(),
        body.clone(),
        b"\r\n0\r\n\r\n".to_vec(),
    ]
    .concat();
    let response = raw::send(addr, "POST", "/private", &form_headers(None), &chunked).await;
    assert_eq!(
        missing(&response),
        (411, Some("MissingContentLength".into())),
        "{}",
        response.body
    );

    // Over the size limit: refused on its headers (the body is never sent here).
    let response = raw::send(addr, "POST", "/private", &form_headers(Some(10 << 20)), b"").await;
    assert_eq!(
        missing(&response),
        (400, Some("EntityTooLarge".into())),
        "{}",
        response.body
    );

    // Forms of 200 KiB to a bucket whose policy may let anyone write, each holding its size
    // from the 1 MiB budget (once its fields are in) while s3s waits for the rest of it: as many
    // as fit are held, the next is turned away with SlowDown once its fields are in, and those
    // held are then read whole and stored (the policy lets anyone s3:PutObject, which is what
    // AWS decides a form upload as) with every byte of the budget returned.
    let big = form("BND", &vec![b'x'; 200 << 10]);
    let held_each = big.len() as f64;
    let fit = (1 << 20) / big.len();
    let head = |length: usize| {
        let mut head = "POST /open HTTP/1.1\r\n".to_owned();
        for (name, value) in form_headers(Some(length)) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head + "connection: close\r\n\r\n"
    };
    let mut held = Vec::new();
    for count in 1..=fit {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(head(big.len()).as_bytes()).await.unwrap();
        stream.write_all(&big[..big.len() / 2]).await.unwrap();
        held.push(stream);
        common::eventually(Duration::from_secs(10), "the form's reservation", || async {
            let in_use = gw.metric("pgvs3_buffer_bytes_in_use").await?;
            (in_use >= held_each * count as f64).then_some(())
        })
        .await;
    }
    let mut turned_away = tokio::net::TcpStream::connect(addr).await.unwrap();
    turned_away.write_all(head(big.len()).as_bytes()).await.unwrap();
    turned_away.write_all(&big[..big.len() / 2]).await.unwrap();
    let response = raw::read_response(&mut turned_away).await;
    assert_eq!(missing(&response), (503, Some("SlowDown".into())), "{}", response.body);
    for mut stream in held {
        stream.write_all(&big[big.len() / 2..]).await.unwrap();
        let response = raw::read_response(&mut stream).await;
        assert_eq!(response.status, 204, "{}", response.body);
    }
    let stored = gw
        .client
        .get_object()
        .bucket("open")
        .key("anonymous")
        .send()
        .await
        .unwrap();
    assert_eq!(stored.body.collect().await.unwrap().into_bytes().len(), 200 << 10);
    common::eventually(Duration::from_secs(10), "every reservation returned", || async {
        (gw.metric("pgvs3_buffer_bytes_in_use").await? == 0.0).then_some(())
    })
    .await;

    // An unsigned form within bounds: AccessDenied, nothing stored.
    let body = form("BND", b"data");
    let response = raw::send(addr, "POST", "/private", &form_headers(Some(body.len())), &body).await;
    assert_eq!(
        missing(&response),
        (403, Some("AccessDenied".into())),
        "{}",
        response.body
    );
    let listed = gw.client.list_objects_v2().bucket("private").send().await.unwrap();
    assert_eq!(listed.contents().len(), 0);
    gw.stop().await;
}

/// Issue 30 item 4: forms that have shown no credential hold no byte of the shared buffer
/// budget. Anonymous forms declaring 3 MiB each, with a 12 MiB budget, trickle towards a
/// bucket that does not exist (answered NoSuchBucket on their headers) and a private one
/// (answered AccessDenied once their fields are in, before their file is read): none holds
/// budget, and a RESP request over 1 MiB, which takes from the same budget, is still served.
/// Before, each held its length from the budget for as long as its client took.
#[tokio::test]
async fn anonymous_forms_hold_no_buffer_budget_before_they_may_write() {
    let gw = TestGateway::with_resp(&["--s3-post-max-size", "4MiB", "--buffer-budget", "12MiB"]).await;
    gw.client.create_bucket().bucket("private").send().await.unwrap();
    let addr = gw.gateway.s3_addr;
    let body = form("BND", &vec![b'x'; 3 << 20]);
    let fields_end = body.windows(4).rposition(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut trickling = Vec::new();
    for i in 0..8 {
        let bucket = if i % 2 == 0 { "missing" } else { "private" };
        let mut head = format!("POST /{bucket} HTTP/1.1\r\n");
        for (name, value) in form_headers(Some(body.len())) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(format!("{head}\r\n").as_bytes()).await.unwrap();
        // The fields and the first 64 KiB of the file, then a byte now and then.
        stream.write_all(&body[..fields_end + (64 << 10)]).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), raw::read_one_response(&mut stream))
            .await
            .expect("answered before the file is read");
        let expected = if i % 2 == 0 {
            (404, Some("NoSuchBucket"))
        } else {
            (403, Some("AccessDenied"))
        };
        assert_eq!((answer.status, answer.code()), expected, "{}", answer.body);
        trickling.push(stream);
    }
    for stream in &mut trickling {
        let _ = stream.write_all(b"x").await;
    }
    assert_eq!(gw.metric("pgvs3_buffer_bytes_in_use").await, Some(0.0));
    let mut resp = common::resp::RawResp::connect(gw.resp_addr()).await;
    let value = vec![b'v'; 2 << 20];
    resp.send(&common::resp::encode(&[
        b"SET".as_slice(),
        b"large".as_slice(),
        value.as_slice(),
    ]))
    .await;
    assert_eq!(resp.reply().await, Some(common::resp::Value::Simple("OK".into())));
    gw.stop().await;
}

/// Issue 30: a form's `acl` field needs `s3:PutObjectAcl` as the `x-amz-acl` header does (a key
/// allowed only `s3:PutObject` made its form uploads public); without an ACL the same form is
/// stored, and with `s3:PutObjectAcl` allowed as well the ACL is kept.
#[tokio::test]
async fn a_forms_acl_field_needs_put_object_acl() {
    let gw = TestGateway::start().await;
    let catalog = gw.gateway.store.catalog();
    let bob = common::s3::add_key(&gw, "BOBKEY").await;
    bob.create_bucket()
        .bucket("bobs")
        .object_ownership(aws_sdk_s3::types::ObjectOwnership::ObjectWriter)
        .send()
        .await
        .unwrap();
    let policy = |actions: &str| {
        format!(
            r#"{{"Version":"2012-10-17","Statement":[
              {{"Effect":"Allow","Action":[{actions}],"Resource":"arn:aws:s3:::bobs/*"}}]}}"#
        )
    };
    let script = |key: &str, acl: Option<&str>| {
        let (fields, conditions) = match acl {
            Some(acl) => (format!(r#"{{"acl": "{acl}"}}"#), format!(r#"[{{"acl": "{acl}"}}]"#)),
            None => ("{}".to_owned(), "[]".to_owned()),
        };
        format!(
            r#"{HELPERS}
bob = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                   aws_access_key_id="BOBKEY", aws_secret_access_key="BOBKEY-secret")
form = bob.generate_presigned_post("bobs", "{key}", Fields={fields}, Conditions={conditions}, ExpiresIn=600)
status, body, _ = post(form["url"], form["fields"], "f.txt", b"form")
print("outcome", status, code(body))
"#
        )
    };
    let write_only = policy(r#""s3:PutObject","s3:GetObject""#);
    assert!(catalog.set_key_policy("BOBKEY", Some(&write_only)).await.unwrap());
    gw.python_passes(&script("public", Some("public-read")), "outcome 403 AccessDenied")
        .await;
    gw.python_passes(&script("plain", None), "outcome 204 None").await;
    assert!(bob.head_object().bucket("bobs").key("public").send().await.is_err());
    let with_acl = policy(r#""s3:PutObject","s3:GetObject","s3:PutObjectAcl""#);
    assert!(catalog.set_key_policy("BOBKEY", Some(&with_acl)).await.unwrap());
    gw.python_passes(&script("public", Some("public-read")), "outcome 204 None")
        .await;
    let grants = gw
        .client
        .get_object_acl()
        .bucket("bobs")
        .key("public")
        .send()
        .await
        .unwrap();
    assert!(
        grants.grants().iter().any(|grant| grant
            .grantee()
            .and_then(|grantee| grantee.uri())
            .is_some_and(|uri| uri.ends_with("/global/AllUsers"))),
        "{grants:?}"
    );
    gw.stop().await;
}

/// Issue 34: a form whose policy's `expiration` is not ISO 8601 (Python's `str(datetime)`,
/// `2030-01-01 12:00:00.123456+00:00`, as Ceph's s3-tests `test_post_object_invalid_date_format`
/// sends) is 400 InvalidPolicyDocument, as S3 answers; the same policy dated
/// `2030-01-01T12:00:00.000Z` stores the file. (s3s reads the date as RFC 3339, which takes any
/// separator, so the form was stored.)
const EXPIRATION: &str = r#"
import base64, hashlib, hmac
from datetime import datetime, timedelta, timezone
boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id=os.environ["AK"],
             aws_secret_access_key=os.environ["SK"]).create_bucket(Bucket="web")
expires = datetime.now(timezone.utc) + timedelta(hours=1)

def signed_form(expiration):
    document = {"expiration": expiration, "conditions": [{"bucket": "web"}, ["starts-with", "$key", ""]]}
    policy = base64.b64encode(json.dumps(document).encode()).decode()
    signature = base64.b64encode(hmac.new(os.environ["SK"].encode(), policy.encode(), hashlib.sha1).digest()).decode()
    return {"key": "dated", "AWSAccessKeyId": os.environ["AK"], "policy": policy, "signature": signature}

status, body, _ = post(url + "/web", signed_form(str(expires)), "d.txt", b"dated")
assert (status, code(body)) == (400, "InvalidPolicyDocument"), (status, body)
status, body, _ = post(url + "/web", signed_form(expires.strftime("%Y-%m-%dT%H:%M:%S.000Z")), "d.txt", b"dated")
assert status == 204, (status, body)
print("expiration ok")
"#;

#[tokio::test]
async fn a_policy_expiration_that_is_not_iso_8601_is_refused() {
    let gw = TestGateway::start().await;
    gw.python_passes(&format!("{HELPERS}{EXPIRATION}"), "expiration ok")
        .await;
    gw.stop().await;
}

/// Issue 34: a form's policy is checked on the key the file is stored as, `${filename}` replaced
/// (s3-tests' `test_post_object_set_key_from_filename`: key `${filename}`, a condition
/// `starts-with $key foo`, a file `foo.txt`: 204); before, s3s checked the literal
/// `${filename}`, so such a form was refused with 403.
const FILENAME_POLICY: &str = r#"
root = client("s3v4")
root.create_bucket(Bucket="named")
for signature in ["s3v4", "s3"]:
    form = client(signature).generate_presigned_post(
        "named", "${filename}", Conditions=[["starts-with", "$key", "foo"]], ExpiresIn=600)
    status, body, _ = post(form["url"], form["fields"], "foo.txt", b"from a file name")
    assert status == 204, (signature, status, body)
    assert root.get_object(Bucket="named", Key="foo.txt")["Body"].read() == b"from a file name"
    root.delete_object(Bucket="named", Key="foo.txt")
    status, body, _ = post(form["url"], form["fields"], "bar.txt", b"elsewhere")
    assert (status, code(body)) == (403, "AccessDenied"), (signature, status, body)
    assert "Policy Condition failed" in body, body
    assert root.list_objects_v2(Bucket="named").get("KeyCount") == 0
# In a longer key, and with the 201 answer naming the stored key.
form = root.generate_presigned_post("named", "in/${filename}", Fields={"success_action_status": "201"},
                                    Conditions=[["starts-with", "$key", "in/ok-"], {"success_action_status": "201"}],
                                    ExpiresIn=600)
status, body, _ = post(form["url"], form["fields"], "ok-1.txt", b"one")
assert status == 201 and "<Key>in/ok-1.txt</Key>" in body, (status, body)
status, body, _ = post(form["url"], form["fields"], "no.txt", b"no")
assert (status, code(body)) == (403, "AccessDenied"), (status, body)
assert [o["Key"] for o in root.list_objects_v2(Bucket="named")["Contents"]] == ["in/ok-1.txt"]
print("filename policy ok")
"#;

#[tokio::test]
async fn a_forms_policy_is_checked_on_the_key_with_its_file_name() {
    let gw = TestGateway::start().await;
    gw.python_passes(&format!("{HELPERS}{FILENAME_POLICY}"), "filename policy ok")
        .await;
    gw.stop().await;
}

/// Review of session 28, item 1: an anonymous form to a bucket with any policy reserved its
/// declared length from the buffer budget, whatever the policy let anyone do, and could then
/// send a byte every ~19 s for ever (four forms held the default budget). A public-read bucket
/// that lets anyone write only under `uploads/`: forms to other keys are refused once their
/// fields are in, holding nothing; one whose key is `uploads/${filename}` is decided on the key
/// its file name makes and stored; and one that may write but trickles, never idle for the
/// body idle timeout, is cut off at its total time with S3's 400 RequestTimeout, its
/// reservation returned and nothing stored.
#[tokio::test]
async fn anonymous_forms_reserve_only_where_they_may_write_and_must_arrive_in_time() {
    let args = [
        "--s3-post-max-size",
        "4MiB",
        "--buffer-budget",
        "12MiB",
        "--http-body-idle-timeout",
        "2s",
    ];
    let gw = TestGateway::with_args(common::fresh_database().await, &args).await;
    gw.client.create_bucket().bucket("public").send().await.unwrap();
    let policy = r#"{"Version":"2012-10-17","Statement":[
        {"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::public/*"},
        {"Effect":"Allow","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::public/uploads/*"}]}"#;
    gw.client
        .put_bucket_policy()
        .bucket("public")
        .policy(policy)
        .send()
        .await
        .unwrap();
    let addr = gw.gateway.s3_addr;
    let head = |length: usize| {
        let mut head = "POST /public HTTP/1.1\r\n".to_owned();
        for (name, value) in form_headers(Some(length)) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head + "\r\n"
    };

    // Forms of 3 MiB to keys no rule lets anyone write: refused before their file is read.
    let big = keyed_form("BND", "secret", "f", &vec![b'x'; 3 << 20]);
    let fields_end = big.windows(4).rposition(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut refused = Vec::new();
    for _ in 0..6 {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(head(big.len()).as_bytes()).await.unwrap();
        stream.write_all(&big[..fields_end + (64 << 10)]).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(10), raw::read_one_response(&mut stream))
            .await
            .expect("answered before the file is read");
        assert_eq!(
            (answer.status, answer.code()),
            (403, Some("AccessDenied")),
            "{}",
            answer.body
        );
        refused.push(stream);
    }
    assert_eq!(gw.metric("pgvs3_buffer_bytes_in_use").await, Some(0.0));
    drop(refused);

    // A form without a key field before its file names nothing it may write.
    let keyless = [
        b"--BND\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n".as_slice(),
        &vec![b'x'; 200 << 10],
        b"\r\n--BND--\r\n",
    ]
    .concat();
    let response = raw::send(addr, "POST", "/public", &form_headers(Some(keyless.len())), &keyless).await;
    assert_eq!(
        (response.status, response.code()),
        (400, Some("InvalidArgument")),
        "{}",
        response.body
    );

    // `${filename}` is replaced before the gate decides: `uploads/photo.jpg` may be written.
    let upload = keyed_form("BND", "uploads/${filename}", "photo.jpg", &vec![b'y'; 200 << 10]);
    let response = raw::send(addr, "POST", "/public", &form_headers(Some(upload.len())), &upload).await;
    assert_eq!(response.status, 204, "{}", response.body);
    let stored = gw
        .client
        .head_object()
        .bucket("public")
        .key("uploads/photo.jpg")
        .send()
        .await
        .unwrap();
    assert_eq!(stored.content_length(), Some(200 << 10));

    // A form that may write, sending a byte every half second after its fields: held no longer
    // than its total time (2 s idle timeout + 200 KiB at 64 KiB/s).
    let slow = keyed_form("BND", "uploads/slow", "f", &vec![b'z'; 200 << 10]);
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head(slow.len()).as_bytes()).await.unwrap();
    stream.write_all(&slow[..fields_end + 1024]).await.unwrap();
    common::eventually(Duration::from_secs(10), "the form's reservation", || async {
        (gw.metric("pgvs3_buffer_bytes_in_use").await? >= slow.len() as f64).then_some(())
    })
    .await;
    let mut sent = fields_end + 1024;
    let trickled = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            tokio::select! {
                readable = stream.readable() => break readable.unwrap(),
                () = tokio::time::sleep(Duration::from_millis(500)) => {
                    stream.write_all(&slow[sent..sent + 1]).await.unwrap();
                    sent += 1;
                }
            }
        }
    })
    .await;
    assert!(trickled.is_ok(), "a trickling form is answered");
    let answer = raw::read_one_response(&mut stream).await;
    assert_eq!(
        (answer.status, answer.code()),
        (400, Some("RequestTimeout")),
        "{}",
        answer.body
    );
    assert!(
        answer.body.contains("Idle connections will be closed."),
        "{}",
        answer.body
    );
    common::eventually(Duration::from_secs(10), "the reservation returned", || async {
        (gw.metric("pgvs3_buffer_bytes_in_use").await? == 0.0).then_some(())
    })
    .await;
    let missing = gw
        .client
        .head_object()
        .bucket("public")
        .key("uploads/slow")
        .send()
        .await;
    assert!(missing.is_err(), "nothing of the trickled form was stored");

    // One that stops sending is answered as S3 answers a stalled body too (s3s's was 400
    // InvalidRequest "failed to read file stream").
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head(slow.len()).as_bytes()).await.unwrap();
    stream.write_all(&slow[..fields_end + 1024]).await.unwrap();
    let answer = raw::read_one_response(&mut stream).await;
    assert_eq!(
        (answer.status, answer.code()),
        (400, Some("RequestTimeout")),
        "{}",
        answer.body
    );
    gw.stop().await;
}
