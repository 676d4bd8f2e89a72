//! `pgvs3-web-identity`: aws-sdk-s3 in a pod with nothing but its ServiceAccount's token and the
//! environment of its Bucket's identity ConfigMap (`AWS_ROLE_ARN`, `AWS_WEB_IDENTITY_TOKEN_FILE`,
//! `AWS_ENDPOINT_URL*`, `AWS_REGION`, `BUCKET_NAME`; the CA in `AWS_CA_BUNDLE`). The SDK's
//! credentials come from the web identity exchange (`pgvs3_e2e::web_identity`), as an
//! application's would; it PUTs an object into the bucket, GETs it back, and calls STS
//! `GetCallerIdentity` with the session. Prints "`<body read back>` `<caller ARN>`"; any error
//! (a refused exchange included) is printed with its causes and exits 1. The node tier runs it
//! (e2e/node-tier/scenario.sh).

use aws_sdk_s3::error::DisplayErrorContext;
use aws_smithy_http_client::tls::{self, TlsContext, TrustStore, rustls_provider::CryptoMode};
use pgvs3_e2e::web_identity::WebIdentity;

const BODY: &str = "written-by-aws-sdk-s3";

#[tokio::main]
async fn main() {
    if let Err(err) = run().await {
        eprintln!("pgvs3-web-identity: {err}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), String> {
    let identity = WebIdentity::from_env()?;
    let bucket = std::env::var("BUCKET_NAME").map_err(|_| "BUCKET_NAME is not set")?;
    let endpoint = std::env::var("AWS_ENDPOINT_URL_S3").unwrap_or_else(|_| identity.endpoint.clone());
    let mut trust = TrustStore::empty();
    if let Some(ca) = &identity.ca_cert {
        trust = trust.with_pem_certificate(std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?);
    }
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .tls_context(
            TlsContext::builder()
                .with_trust_store(trust)
                .build()
                .map_err(|e| e.to_string())?,
        )
        .build_https();
    let config = aws_sdk_s3::Config::builder()
        .behavior_version_latest()
        .region(aws_sdk_s3::config::Region::new(identity.region.clone()))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(identity.clone())
        .http_client(http)
        .build();
    let s3 = aws_sdk_s3::Client::from_conf(config);
    s3.put_object()
        .bucket(&bucket)
        .key("from-aws-sdk-s3.txt")
        .body(BODY.as_bytes().to_vec().into())
        .send()
        .await
        .map_err(|e| format!("PutObject: {}", DisplayErrorContext(&e)))?;
    let object = s3
        .get_object()
        .bucket(&bucket)
        .key("from-aws-sdk-s3.txt")
        .send()
        .await
        .map_err(|e| format!("GetObject: {}", DisplayErrorContext(&e)))?;
    let body = object
        .body
        .collect()
        .await
        .map_err(|e| format!("GetObject: body: {e}"))?;
    let body = String::from_utf8_lossy(&body.into_bytes()).into_owned();
    // A session of its own for STS: the S3 client's is inside its identity cache.
    let session = identity.assume().await?;
    let arn = identity.caller_arn(&session).await?;
    println!("{body} {arn}");
    Ok(())
}
