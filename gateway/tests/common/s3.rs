//! S3 calls the access-control tests share: a second access key and its client, object calls
//! that answer the S3 error code of a refusal, and unsigned requests.

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;

use super::TestGateway;
use super::raw::{self, RawResponse};

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
    client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from_static(b"data"))
        .send()
        .await
        .map(|_| ())
        .map_err(|err| err.into_service_error().meta().code().unwrap_or_default().to_owned())
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
        .map_err(|err| err.into_service_error().meta().code().unwrap_or_default().to_owned())
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
        .map_err(|err| err.into_service_error().meta().code().unwrap_or_default().to_owned())
}

/// An unsigned (anonymous) request, as a browser or `curl` sends it.
pub async fn unsigned(gw: &TestGateway, method: &str, path: &str, body: &[u8]) -> RawResponse {
    let headers = vec![
        ("host".to_owned(), gw.gateway.s3_addr.to_string()),
        ("content-length".to_owned(), body.len().to_string()),
    ];
    raw::send(gw.gateway.s3_addr, method, path, &headers, body).await
}
