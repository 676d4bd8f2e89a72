//! The gateway as the console reaches it: S3 clients signing with a session's key (aws-sdk-s3,
//! which the gateway already builds: SigV4 and presigning without new code or crates).

use aws_sdk_s3::config::{Credentials, Region, SharedHttpClient};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

pub struct Gateway {
    http: SharedHttpClient,
    /// The loopback URL of the S3 endpoint.
    internal: String,
    /// The URL browsers use (presigned URLs name it).
    pub public: String,
    region: String,
    /// The RESP listener, plaintext on loopback, if the console can reach one.
    pub resp: Option<std::net::SocketAddr>,
    /// The OJS listener with the operator's token (root-key sessions only).
    pub ojs: Option<crate::ojs::Ojs>,
    /// The gateway's in-process answers for admin sessions.
    pub admin: Option<std::sync::Arc<dyn crate::Admin>>,
    /// The admin listener (fleet page).
    pub admin_listener: Option<std::net::SocketAddr>,
}

/// Why a sign-in failed.
pub enum SignIn {
    Refused,
    Unreachable(String),
}

impl Gateway {
    pub fn new(internal: String, public: String, region: String, resp: Option<std::net::SocketAddr>) -> Gateway {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        Gateway {
            http,
            internal,
            public,
            region,
            resp,
            ojs: None,
            admin: None,
            admin_listener: None,
        }
    }

    /// What admin (root-key) sessions reach: the OJS listener, and the check that makes one.
    pub fn admin(
        mut self,
        ojs: Option<crate::ojs::Ojs>,
        admin: Option<std::sync::Arc<dyn crate::Admin>>,
        admin_listener: Option<std::net::SocketAddr>,
    ) -> Gateway {
        self.ojs = ojs;
        self.admin = admin;
        self.admin_listener = admin_listener;
        self
    }

    /// Whether a signed-in key is the root key (asked of the gateway in-process).
    pub async fn is_root(&self, access_key: &str) -> bool {
        match &self.admin {
            Some(admin) => admin.is_root(access_key.to_owned()).await,
            None => false,
        }
    }

    fn client(&self, endpoint: &str, access_key: &str, secret: &str) -> aws_sdk_s3::Client {
        let config = aws_sdk_s3::Config::builder()
            .behavior_version_latest()
            .region(Region::new(self.region.clone()))
            .endpoint_url(endpoint)
            .force_path_style(true)
            .credentials_provider(Credentials::new(access_key, secret, None, None, "pgvs3-console"))
            .http_client(self.http.clone())
            .build();
        aws_sdk_s3::Client::from_conf(config)
    }

    /// The key's two clients (loopback, presigning), once the gateway has taken its signature.
    pub async fn sign_in(
        &self,
        access_key: &str,
        secret: &str,
    ) -> Result<(aws_sdk_s3::Client, aws_sdk_s3::Client), SignIn> {
        let s3 = self.client(&self.internal, access_key, secret);
        match s3.list_buckets().send().await {
            Ok(_) => {}
            Err(SdkError::ServiceError(err)) => match err.err().code() {
                // A key the gateway knows but that may not list buckets still signs in: it sees
                // what its rights let it see.
                Some("AccessDenied") => {}
                _ => return Err(SignIn::Refused),
            },
            Err(err) => return Err(SignIn::Unreachable(describe(&err))),
        }
        Ok((s3, self.client(&self.public, access_key, secret)))
    }
}

/// The gateway's answer in words: its S3 error code and message, or why it was not reached.
pub fn describe<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    err: &SdkError<E, R>,
) -> String {
    match err {
        SdkError::ServiceError(service) => {
            let err = service.err();
            match (err.code(), err.message()) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => code.to_owned(),
                _ => "the gateway refused the request".to_owned(),
            }
        }
        SdkError::TimeoutError(_) => "the gateway did not answer in time".to_owned(),
        SdkError::DispatchFailure(_) => "the gateway could not be reached".to_owned(),
        _ => format!("unexpected answer from the gateway: {err}"),
    }
}
