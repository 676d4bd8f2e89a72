//! S3 calls the tests share, so each test reads as what it checks: object writes, reads, copies
//! and multipart uploads through aws-sdk-s3, bucket versioning, what a refusal answered (HTTP
//! status, S3 error code), a second access key and its client, the access-control object calls
//! that answer a refusal's code, the boto3 clients of the access-control scripts, and unsigned
//! requests.

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::copy_object::builders::CopyObjectFluentBuilder;
use aws_sdk_s3::operation::head_object::HeadObjectOutput;
use aws_sdk_s3::operation::put_object::PutObjectOutput;
use aws_sdk_s3::operation::put_object::builders::PutObjectFluentBuilder;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketVersioningStatus, CompletedMultipartUpload, CompletedPart, VersioningConfiguration};

use super::TestGateway;
use super::raw::{self, RawResponse};

/// A PutObject of `body` to `bucket/key`, for the caller to add conditions or headers and send.
pub fn put_request(client: &Client, bucket: &str, key: &str, body: impl Into<Vec<u8>>) -> PutObjectFluentBuilder {
    client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body.into()))
}

/// Writes `body` to `bucket/key`; the answer (ETag, version id). Panics naming the key if refused.
pub async fn put_object(client: &Client, bucket: &str, key: &str, body: impl Into<Vec<u8>>) -> PutObjectOutput {
    put_request(client, bucket, key, body)
        .send()
        .await
        .unwrap_or_else(|err| panic!("PUT {bucket}/{key}: {err:?}"))
}

/// Writes `body` to `bucket/key`; the new object's ETag. Panics naming the key if refused.
pub async fn put_etag(client: &Client, bucket: &str, key: &str, body: impl Into<Vec<u8>>) -> String {
    put_object(client, bucket, key, body)
        .await
        .e_tag
        .expect("a PUT answers an ETag")
}

/// A CopyObject of `source` (`bucket/key`) to `bucket/key`, for the caller to add conditions and send.
pub fn copy_request(client: &Client, bucket: &str, key: &str, source: &str) -> CopyObjectFluentBuilder {
    client.copy_object().bucket(bucket).key(key).copy_source(source)
}

/// The metadata of `bucket/key`. Panics naming the key if the HEAD is refused.
pub async fn head_object(client: &Client, bucket: &str, key: &str) -> HeadObjectOutput {
    client
        .head_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|err| panic!("HEAD {bucket}/{key}: {err:?}"))
}

/// Starts a multipart upload of `bucket/key`; its upload id.
pub async fn start_upload(client: &Client, bucket: &str, key: &str) -> String {
    client
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|err| panic!("upload of {bucket}/{key}: {err:?}"))
        .upload_id
        .expect("an upload id")
}

/// Uploads part `number` of an upload; the part's ETag. Panics naming the part if refused.
pub async fn upload_part(
    client: &Client,
    bucket: &str,
    key: &str,
    upload_id: &str,
    number: i32,
    body: &[u8],
) -> String {
    client
        .upload_part()
        .bucket(bucket)
        .key(key)
        .upload_id(upload_id)
        .part_number(number)
        .body(ByteStream::from(body.to_vec()))
        .send()
        .await
        .unwrap_or_else(|err| panic!("part {number} of {bucket}/{key}: {err:?}"))
        .e_tag
        .expect("a part's ETag")
}

/// The part list of a completion: (part number, ETag) in the order given.
pub fn completion(parts: &[(i32, &str)]) -> CompletedMultipartUpload {
    CompletedMultipartUpload::builder()
        .set_parts(Some(
            parts
                .iter()
                .map(|(number, etag)| CompletedPart::builder().part_number(*number).e_tag(*etag).build())
                .collect(),
        ))
        .build()
}

/// The whole body of `bucket/key`. Panics naming the key if the read is refused.
pub async fn read_object(client: &Client, bucket: &str, key: &str) -> Vec<u8> {
    read_body(client, bucket, key, None).await
}

/// The whole body of version `version` of `bucket/key`. Panics naming it if the read is refused.
pub async fn read_version(client: &Client, bucket: &str, key: &str, version: &str) -> Vec<u8> {
    read_body(client, bucket, key, Some(version)).await
}

async fn read_body(client: &Client, bucket: &str, key: &str, version: Option<&str>) -> Vec<u8> {
    client
        .get_object()
        .bucket(bucket)
        .key(key)
        .set_version_id(version.map(str::to_owned))
        .send()
        .await
        .unwrap_or_else(|err| panic!("GET {bucket}/{key} (version {version:?}): {err:?}"))
        .body
        .collect()
        .await
        .unwrap()
        .to_vec()
}

/// The whole body of `bucket/key`, or `None` when there is none (a 404). Panics on other refusals.
pub async fn find_object(client: &Client, bucket: &str, key: &str) -> Option<Vec<u8>> {
    match client.get_object().bucket(bucket).key(key).send().await {
        Ok(output) => Some(output.body.collect().await.unwrap().to_vec()),
        Err(err) if http_status(&err) == 404 => None,
        Err(err) => panic!("GET {bucket}/{key}: {err:?}"),
    }
}

/// Turns versioning of `bucket` on (`Enabled`) or off (`Suspended`).
pub async fn set_versioning(client: &Client, bucket: &str, status: BucketVersioningStatus) {
    client
        .put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(VersioningConfiguration::builder().status(status).build())
        .send()
        .await
        .unwrap_or_else(|err| panic!("versioning of {bucket}: {err:?}"));
}

/// The S3 error code of a refusal; the whole error when it carries none (no answer came back).
/// `client` without the SDK's retries, which would hide a request failed by a deadlock (a 500)
/// behind its retry's answer.
pub fn once(client: &Client) -> Client {
    Client::from_conf(
        client
            .config()
            .to_builder()
            .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
            .build(),
    )
}

pub fn error_code<E: ProvideErrorMetadata + std::fmt::Debug>(err: &SdkError<E, HttpResponse>) -> String {
    err.code().map_or_else(|| format!("{err:?}"), str::to_owned)
}

/// The HTTP status of a refusal; 0 when no answer came back.
pub fn http_status<E>(err: &SdkError<E, HttpResponse>) -> u16 {
    err.raw_response().map_or(0, |response| response.status().as_u16())
}

/// A refusal's HTTP status and S3 error code.
pub fn refusal<E: ProvideErrorMetadata + std::fmt::Debug>(err: &SdkError<E, HttpResponse>) -> (u16, String) {
    (http_status(err), error_code(err))
}

/// The HTTP status a call was answered with: 200 when it succeeded.
pub fn answered_status<O, E>(result: &Result<O, SdkError<E, HttpResponse>>) -> u16 {
    result.as_ref().err().map_or(200, http_status)
}

/// A non-root access key `key` (secret `<key>-secret`) and a client signing with it.
pub async fn add_key(gw: &TestGateway, key: &str) -> Client {
    gw.gateway
        .store
        .catalog()
        .put_access_key(&pgvs3_gateway::store::NewAccessKey {
            access_key: key.into(),
            secret: format!("{key}-secret"),
            is_root: false,
            read_only: false,
            description: String::new(),
        })
        .await
        .unwrap();
    gw.client_for(key, &format!("{key}-secret"))
}

/// The call's S3 error code when it is refused.
pub async fn put(client: &Client, bucket: &str, key: &str) -> Result<(), String> {
    put_request(client, bucket, key, b"data")
        .send()
        .await
        .map(|_| ())
        .map_err(|err| error_code(&err))
}

/// The call's S3 error code when it is refused.
pub async fn get(client: &Client, bucket: &str, key: &str) -> Result<(), String> {
    client
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map(|_| ())
        .map_err(|err| error_code(&err))
}

/// The call's S3 error code when it is refused.
pub async fn list(client: &Client, bucket: &str, prefix: Option<&str>) -> Result<usize, String> {
    client
        .list_objects_v2()
        .bucket(bucket)
        .set_prefix(prefix.map(str::to_owned))
        .send()
        .await
        .map(|out| out.contents().len())
        .map_err(|err| error_code(&err))
}

/// What the boto3 scripts of the access-control tests start with: clients `root` (the keys in
/// AK and SK), `bob` (the key `add_key(gw, "BOBKEY")` makes) and `anon` (unsigned), and
/// `code(call)`, the S3 error code the call is refused with (None when it succeeds).
pub const BOTO3_ROOT_BOB_ANON: &str = r#"
import json, os, boto3, botocore
from botocore import UNSIGNED
from botocore.config import Config
url = os.environ["AWS_ENDPOINT_URL"]
root = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                    aws_access_key_id=os.environ["AK"], aws_secret_access_key=os.environ["SK"])
bob = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                   aws_access_key_id="BOBKEY", aws_secret_access_key="BOBKEY-secret")
anon = boto3.client("s3", endpoint_url=url, region_name="us-east-1", config=Config(signature_version=UNSIGNED))
def code(call):
    try:
        call()
    except botocore.exceptions.ClientError as err:
        return err.response["Error"]["Code"]
    return None
"#;

/// An unsigned (anonymous) request, as a browser or `curl` sends it.
pub async fn unsigned(gw: &TestGateway, method: &str, path: &str, body: &[u8]) -> RawResponse {
    let headers = vec![
        ("host".to_owned(), gw.gateway.s3_addr.to_string()),
        ("content-length".to_owned(), body.len().to_string()),
    ];
    raw::send(gw.gateway.s3_addr, method, path, &headers, body).await
}
