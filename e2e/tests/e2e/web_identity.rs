//! Session credentials from a web identity token, as the node tier's pods and the session bench
//! use them, against an in-process gateway: `pgvs3-web-identity` (aws-sdk-s3 with nothing but
//! the environment of a Bucket's identity ConfigMap) and `pgvs3-loadgen s3 --role-arn`. The
//! issuer's RSA key is made with the openssl CLI and the token signed with it, as a cluster's
//! API server would.

use pgvs3_testkit as common;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use common::oidc;
use pgvs3_catalog::sts::{self, Trust};
use serde_json::{Value, json};

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
const ROLE_ARN: &str = "arn:aws:iam::000000000000:role/ledger";

/// An issuer's signing key in a directory of its own, and the tokens it signs there.
struct Issuer {
    dir: PathBuf,
}

impl Issuer {
    fn new(name: &str) -> Issuer {
        let dir = std::env::temp_dir().join(format!("pgvs3-web-identity-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        oidc::rsa_key(&dir.join("key.pem").to_string_lossy());
        Issuer { dir }
    }

    fn key(&self) -> String {
        self.dir.join("key.pem").to_string_lossy().into_owned()
    }

    /// The key set the API server publishes at /openid/v1/jwks.
    fn jwks(&self) -> Value {
        json!({"keys": [oidc::rsa_jwk(&self.key(), "k1")]})
    }

    /// A projected token of ServiceAccount apps/`account` for audience pgvs3, in a file.
    fn token_file(&self, account: &str) -> PathBuf {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let claims = json!({"iss": ISSUER, "sub": format!("system:serviceaccount:apps:{account}"), "aud": ["pgvs3"],
            "iat": now, "nbf": now, "exp": now + 600,
            "kubernetes.io": {"namespace": "apps", "serviceaccount": {"name": account, "uid": "u"}}});
        let input = oidc::signing_input(&json!({"alg": "RS256", "kid": "k1"}), &claims);
        let signature = oidc::sign_sha256(&self.key(), &input);
        let path = self.dir.join(account);
        std::fs::write(&path, format!("{input}.{}", oidc::b64url(&signature))).unwrap();
        path
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The issuer registered, role `ledger` (ServiceAccount apps/app may assume it; s3:* on bucket
/// `ledger`), and the bucket, the root's.
async fn setup(gw: &common::TestGateway, issuer: &Issuer) {
    let sql = gw.sql().await;
    sts::put_oidc_issuer(&sql, ISSUER, &issuer.jwks()).await.unwrap();
    let trust = Trust {
        issuer: ISSUER.into(),
        audience: sts::DEFAULT_AUDIENCE.into(),
        subjects: vec!["system:serviceaccount:apps:app".into()],
        service_account_uids: None,
    };
    let policy = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*",
        "Resource": ["arn:aws:s3:::ledger", "arn:aws:s3:::ledger/*"]}]});
    sts::put_role(&sql, "ledger", &trust, &policy, 3600).await.unwrap();
    gw.client.create_bucket().bucket("ledger").send().await.unwrap();
}

/// `pgvs3-web-identity` with the environment of ledger's identity ConfigMap and `token`.
async fn web_identity(gw: &common::TestGateway, token: &Path) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_pgvs3-web-identity"))
        .env_clear()
        .env("AWS_ROLE_ARN", ROLE_ARN)
        .env("AWS_WEB_IDENTITY_TOKEN_FILE", token)
        .env("AWS_ENDPOINT_URL", gw.endpoint())
        .env("AWS_ENDPOINT_URL_STS", gw.endpoint())
        .env("AWS_REGION", "us-east-1")
        .env("BUCKET_NAME", "ledger")
        .output()
        .await
        .unwrap()
}

#[tokio::test]
async fn aws_sdk_s3_with_only_a_token_uses_its_bucket_and_another_account_is_refused() {
    let gw = common::TestGateway::start().await;
    let issuer = Issuer::new("sdk");
    setup(&gw, &issuer).await;

    let output = web_identity(&gw, &issuer.token_file("app")).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        stdout.trim(),
        "written-by-aws-sdk-s3 arn:aws:sts::000000000000:assumed-role/ledger/pgvs3-e2e"
    );
    let object = gw
        .client
        .get_object()
        .bucket("ledger")
        .key("from-aws-sdk-s3.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(
        &object.body.collect().await.unwrap().into_bytes()[..],
        b"written-by-aws-sdk-s3"
    );

    let output = web_identity(&gw, &issuer.token_file("other")).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{}", String::from_utf8_lossy(&output.stdout));
    assert!(
        stderr.contains("AssumeRoleWithWebIdentity: 403 AccessDenied"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_loadgen_signs_every_request_with_the_session_of_its_token() {
    let gw = common::TestGateway::start().await;
    let issuer = Issuer::new("loadgen");
    setup(&gw, &issuer).await;
    let json = issuer.dir.join("cases.ndjson");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_pgvs3-loadgen"))
        .args([
            "s3",
            "--endpoint",
            &gw.endpoint(),
            "--bucket",
            "ledger",
            "--ops",
            "put,get",
        ])
        .args([
            "--keys",
            "3",
            "--workers",
            "2",
            "--requests",
            "6",
            "--role-arn",
            ROLE_ARN,
        ])
        .arg("--web-identity-token-file")
        .arg(issuer.token_file("app"))
        .arg("--json")
        .arg(&json)
        // the root's key in the environment too: --role-arn's session is what signs
        .env("AWS_ACCESS_KEY_ID", common::ROOT_ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", common::ROOT_SECRET_KEY)
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let records: Vec<Value> = std::fs::read_to_string(&json)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(records.len(), 2);
    for record in &records {
        assert_eq!(record["result"]["samples"], 6, "{record}");
        assert_eq!(record["config"]["session_credentials"], true, "{record}");
        // a session's key (ASIA…), not a static one
        let key = record["config"]["target"]["access_key"].as_str().unwrap();
        assert!(key.starts_with("ASIA"), "{record}");
    }
}
