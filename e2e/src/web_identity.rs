//! STS's web identity exchange as an AWS SDK's web identity provider makes it: the token in
//! `AWS_WEB_IDENTITY_TOKEN_FILE` (read anew at every exchange: the kubelet rotates it), role
//! `AWS_ROLE_ARN`, an unsigned form POST of `AssumeRoleWithWebIdentity` to the STS endpoint, and
//! the session's temporary credentials with their expiry. It is a credentials provider for
//! aws-sdk-s3 (whose identity cache asks again before the expiry) and the load generator's
//! session credentials, and signs `GetCallerIdentity` with a session.
//!
//! Made by hand rather than with aws-config's provider: aws-config (and the aws-sdk-sts it
//! builds on) are not in the workspace's dependencies, and the exchange is one form POST.

use std::path::PathBuf;
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_credential_types::provider::{self, ProvideCredentials, error::CredentialsError};
use aws_sigv4::http_request::{SignableBody, SigningSettings};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use crate::loadgen::s3;

/// Answers larger than this are not STS's.
const MAX_ANSWER: usize = 64 << 10;

/// A role to assume with a web identity token.
#[derive(Debug, Clone)]
pub struct WebIdentity {
    /// STS's endpoint (pgvs3's S3 endpoint).
    pub endpoint: String,
    pub region: String,
    pub role_arn: String,
    pub token_file: PathBuf,
    pub session_name: String,
    /// The CA an `https://` endpoint's certificate chains to.
    pub ca_cert: Option<PathBuf>,
}

impl WebIdentity {
    /// From the environment every AWS SDK reads: `AWS_ROLE_ARN`, `AWS_WEB_IDENTITY_TOKEN_FILE`,
    /// `AWS_ROLE_SESSION_NAME` (optional), the STS endpoint `AWS_ENDPOINT_URL_STS` (else
    /// `AWS_ENDPOINT_URL`), `AWS_REGION` and the CA `AWS_CA_BUNDLE` (optional).
    pub fn from_env() -> Result<WebIdentity, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let required = |name: &str| var(name).ok_or_else(|| format!("{name} is not set"));
        Ok(WebIdentity {
            endpoint: var("AWS_ENDPOINT_URL_STS")
                .or_else(|| var("AWS_ENDPOINT_URL"))
                .ok_or("neither AWS_ENDPOINT_URL_STS nor AWS_ENDPOINT_URL is set")?,
            region: var("AWS_REGION").unwrap_or_else(|| "us-east-1".into()),
            role_arn: required("AWS_ROLE_ARN")?,
            token_file: required("AWS_WEB_IDENTITY_TOKEN_FILE")?.into(),
            session_name: var("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| "pgvs3-e2e".into()),
            ca_cert: var("AWS_CA_BUNDLE").map(PathBuf::from),
        })
    }

    fn url(&self) -> String {
        format!("{}/", self.endpoint.trim_end_matches('/'))
    }

    /// POSTs `form` to STS (signed by `identity` when given) and returns the answer's body, or
    /// "`<action>`: `<status>` `<Code>`: `<Message>`" when STS refused.
    async fn call(
        &self,
        action: &str,
        form: &[(&str, &str)],
        identity: Option<&Credentials>,
    ) -> Result<String, String> {
        let body = {
            let mut body = form_urlencoded::Serializer::new(String::new());
            body.append_pair("Action", action).append_pair("Version", "2011-06-15");
            for (name, value) in form {
                body.append_pair(name, value);
            }
            Bytes::from(body.finish())
        };
        let mut request = http::Request::post(self.url())
            .header("content-type", "application/x-www-form-urlencoded; charset=utf-8")
            .body(Full::new(body.clone()))
            .map_err(|e| format!("{action}: {e}"))?;
        if let Some(credentials) = identity {
            let identity = credentials.clone().into();
            s3::sign_request(
                &mut request,
                SignableBody::Bytes(&body),
                &identity,
                &self.region,
                "sts",
                SigningSettings::default(),
            )?;
        }
        let http = s3::http_client(self.ca_cert.as_deref())?;
        let answer = http
            .request(request)
            .await
            .map_err(|e| format!("{action}: connection: {e}"))?;
        let status = answer.status();
        let body = http_body_util::Limited::new(answer.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| format!("{action}: body: {e}"))?
            .to_bytes();
        let body = String::from_utf8_lossy(&body).into_owned();
        if !status.is_success() {
            return Err(format!(
                "{action}: {} {}: {}",
                status.as_u16(),
                element(&body, "Code").unwrap_or("-"),
                unescape(element(&body, "Message").unwrap_or("-"))
            ));
        }
        Ok(body)
    }

    /// Exchanges the token for a session of the role.
    pub async fn assume(&self) -> Result<Credentials, String> {
        const ACTION: &str = "AssumeRoleWithWebIdentity";
        let token = std::fs::read_to_string(&self.token_file)
            .map_err(|e| format!("{ACTION}: the token {}: {e}", self.token_file.display()))?;
        let form = [
            ("RoleArn", self.role_arn.as_str()),
            ("RoleSessionName", self.session_name.as_str()),
            ("WebIdentityToken", token.trim()),
        ];
        let body = self.call(ACTION, &form, None).await?;
        let field = |name: &str| element(&body, name).ok_or_else(|| format!("{ACTION}: no {name} in the answer"));
        let expiration = field("Expiration")?;
        let expiration =
            aws_smithy_types::DateTime::from_str(expiration, aws_smithy_types::date_time::Format::DateTime)
                .ok()
                .and_then(|at| SystemTime::try_from(at).ok())
                .ok_or_else(|| format!("{ACTION}: Expiration {expiration:?}"))?;
        Ok(Credentials::new(
            field("AccessKeyId")?,
            field("SecretAccessKey")?,
            Some(field("SessionToken")?.to_owned()),
            Some(expiration),
            "WebIdentityToken",
        ))
    }

    /// `GetCallerIdentity` signed with `session`: the caller's ARN.
    pub async fn caller_arn(&self, session: &Credentials) -> Result<String, String> {
        let body = self.call("GetCallerIdentity", &[], Some(session)).await?;
        element(&body, "Arn")
            .map(str::to_owned)
            .ok_or_else(|| format!("GetCallerIdentity: no Arn in {body}"))
    }
}

impl ProvideCredentials for WebIdentity {
    fn provide_credentials<'a>(&'a self) -> provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        provider::future::ProvideCredentials::new(async move {
            self.assume().await.map_err(CredentialsError::provider_error)
        })
    }
}

/// The text of the first `<name>` element of an STS answer (keys, base64 tokens, ARNs, times
/// and codes need no unescaping; messages go through [`unescape`]).
fn element<'a>(body: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = body.find(&open)? + open.len();
    let end = start + body[start..].find(&format!("</{name}>"))?;
    Some(&body[start..end])
}

/// An error message's text, its XML entities (as `&apos;`) resolved.
fn unescape(text: &str) -> String {
    text.replace("&apos;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}
