//! STS AssumeRoleWithWebIdentity on the S3 endpoint: ServiceAccount-style tokens signed in the
//! test (keys made with the openssl CLI: RSA 2048 for RS256, P-256 for ES256) become temporary
//! credentials that aws-sdk-s3 and boto3 use within their role's policy, on every gateway of
//! the database at once; hostile, foreign and stale tokens are refused with STS's codes.

use pgvs3_testkit as common;

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_s3::config::Credentials;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::presigning::PresigningConfig;
use common::TestGateway;
use common::oidc;
use common::raw::{self, RawResponse};
use hmac::{KeyInit, Mac};
use pgvs3_catalog::sts::{self, Trust};
use serde_json::{Value, json};

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
const READER: &str = "system:serviceaccount:apps:reader";

/// A cluster's signing keys, made with openssl: an RSA key (`rsa`), a P-256 key (`ec`), and
/// an RSA key the cluster never published (`stranger`).
struct Cluster {
    dir: PathBuf,
}

impl Cluster {
    fn new() -> Cluster {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pgvs3-sts-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
        oidc::rsa_key(&path("rsa.pem"));
        oidc::rsa_key(&path("stranger.pem"));
        oidc::openssl(
            &[
                "ecparam",
                "-name",
                "prime256v1",
                "-genkey",
                "-noout",
                "-out",
                &path("ec.pem"),
            ],
            b"",
        );
        oidc::openssl(
            &["rsa", "-in", &path("rsa.pem"), "-pubout", "-out", &path("rsa.pub")],
            b"",
        );
        Cluster { dir }
    }

    fn key(&self, name: &str) -> String {
        self.dir.join(format!("{name}.pem")).to_string_lossy().into_owned()
    }

    /// The key set the API server would publish at /openid/v1/jwks.
    fn jwks(&self) -> Value {
        let spki = oidc::openssl(&["ec", "-in", &self.key("ec"), "-pubout", "-outform", "DER"], b"");
        let point = &spki[spki.len() - 65..];
        json!({"keys": [
            oidc::rsa_jwk(&self.key("rsa"), "rsa-1"),
            {"use": "sig", "kty": "EC", "kid": "ec-1", "alg": "ES256", "crv": "P-256",
             "x": oidc::b64url(&point[1..33]), "y": oidc::b64url(&point[33..])}
        ]})
    }

    /// A JWT of `header` and `claims`, signed as its `alg` says with key `key` (`none`: no
    /// signature; HS256: an HMAC keyed with the RSA public key's PEM, the confusion attack).
    fn token(&self, header: &Value, claims: &Value, key: &str) -> String {
        let input = oidc::signing_input(header, claims);
        let signature = match header["alg"].as_str().unwrap() {
            "none" => Vec::new(),
            "HS256" => {
                let public = std::fs::read(self.dir.join("rsa.pub")).unwrap();
                let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&public).unwrap();
                mac.update(input.as_bytes());
                mac.finalize().into_bytes().to_vec()
            }
            "ES256" => der_to_fixed(&oidc::sign_sha256(&self.key(key), &input)),
            _ => oidc::sign_sha256(&self.key(key), &input),
        };
        format!("{input}.{}", oidc::b64url(&signature))
    }

    /// A projected ServiceAccount token of `subject`, RS256.
    fn service_account(&self, subject: &str) -> String {
        self.token(
            &json!({"alg": "RS256", "kid": "rsa-1"}),
            &claims(subject, "pgvs3", 0),
            "rsa",
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An ECDSA signature from DER (what openssl writes) to JWS's fixed r || s.
fn der_to_fixed(der: &[u8]) -> Vec<u8> {
    let mut at = 2;
    let mut fixed = Vec::new();
    for _ in 0..2 {
        assert_eq!(der[at], 2, "an INTEGER");
        let len = der[at + 1] as usize;
        let int = &der[at + 2..at + 2 + len];
        let int = &int[int.len().saturating_sub(32)..];
        fixed.extend(std::iter::repeat_n(0, 32 - int.len()));
        fixed.extend_from_slice(int);
        at += 2 + len;
    }
    fixed
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// A token's claims as the API server writes them, its times shifted by `shift` seconds.
fn claims(subject: &str, audience: &str, shift: i64) -> Value {
    let now = now() + shift;
    json!({"iss": ISSUER, "sub": subject, "aud": [audience], "exp": now + 3600, "iat": now, "nbf": now,
           "kubernetes.io": {"namespace": "apps", "serviceaccount": {"name": "reader", "uid": "u"}}})
}

/// Registers the cluster and a role `reader` that the ServiceAccount apps/reader may assume,
/// reading and writing bucket `data` only.
async fn setup(gw: &TestGateway, cluster: &Cluster) {
    let sql = gw.sql().await;
    sts::put_oidc_issuer(&sql, ISSUER, &cluster.jwks()).await.unwrap();
    put_reader(&sql, None).await;
    for bucket in ["data", "other"] {
        gw.client.create_bucket().bucket(bucket).send().await.unwrap();
    }
}

/// Writes role `reader`: apps/reader may assume it (of the ServiceAccount UIDs `uids` when
/// given, as the operator pins them), reading and writing bucket `data` only.
async fn put_reader(sql: &tokio_postgres::Client, uids: Option<&[&str]>) {
    let trust = Trust {
        issuer: ISSUER.into(),
        audience: sts::DEFAULT_AUDIENCE.into(),
        subjects: vec![READER.into()],
        service_account_uids: uids.map(|uids| uids.iter().map(|uid| uid.to_string()).collect()),
    };
    let policy = json!({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:ListBucket"],
         "Resource": ["arn:aws:s3:::data", "arn:aws:s3:::data/*"]}]});
    sts::put_role(sql, "reader", &trust, &policy, 7200).await.unwrap();
}

async fn assume_at(addr: std::net::SocketAddr, params: &[(&str, &str)]) -> RawResponse {
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.append_pair("Action", "AssumeRoleWithWebIdentity");
    form.append_pair("Version", "2011-06-15");
    for (name, value) in params {
        form.append_pair(name, value);
    }
    let body = form.finish();
    let headers = [
        ("host".to_owned(), addr.to_string()),
        (
            "content-type".to_owned(),
            "application/x-www-form-urlencoded; charset=utf-8".to_owned(),
        ),
        ("content-length".to_owned(), body.len().to_string()),
    ];
    raw::send(addr, "POST", "/", &headers, body.as_bytes()).await
}

async fn assume(gw: &TestGateway, token: &str, extra: &[(&str, &str)]) -> RawResponse {
    let mut params = vec![
        ("RoleArn", "arn:aws:iam::000000000000:role/reader"),
        ("RoleSessionName", "test-session"),
        ("WebIdentityToken", token),
    ];
    params.extend_from_slice(extra);
    assume_at(gw.gateway.s3_addr, &params).await
}

fn field<'a>(body: &'a str, name: &str) -> &'a str {
    let open = format!("<{name}>");
    let start = body.find(&open).unwrap_or_else(|| panic!("{name} in {body}")) + open.len();
    let end = body[start..].find(&format!("</{name}>")).unwrap() + start;
    &body[start..end]
}

struct Issued {
    access_key: String,
    secret: String,
    token: String,
}

fn issued(answer: &RawResponse) -> Issued {
    assert_eq!(answer.status, 200, "{}", answer.body);
    Issued {
        access_key: field(&answer.body, "AccessKeyId").to_owned(),
        secret: field(&answer.body, "SecretAccessKey").to_owned(),
        token: field(&answer.body, "SessionToken").to_owned(),
    }
}

fn session_client(
    addr: std::net::SocketAddr,
    access_key: &str,
    secret: &str,
    token: Option<&str>,
) -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version_latest()
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .endpoint_url(format!("http://{addr}"))
        .credentials_provider(Credentials::new(
            access_key,
            secret,
            token.map(str::to_owned),
            None,
            "sts",
        ))
        .force_path_style(true)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

async fn put_code(client: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<(), String> {
    client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(b"hello".to_vec().into())
        .send()
        .await
        .map(|_| ())
        .map_err(|err| err.into_service_error().code().unwrap_or("?").to_owned())
}

#[tokio::test]
async fn a_service_account_token_becomes_credentials_for_its_bucket() {
    let gw = TestGateway::start().await;
    let cluster = Cluster::new();
    setup(&gw, &cluster).await;
    let addr = gw.gateway.s3_addr;

    let answer = assume(&gw, &cluster.service_account(READER), &[("DurationSeconds", "900")]).await;
    let session = issued(&answer);
    assert!(
        answer
            .body
            .contains("xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"")
    );
    assert_eq!(field(&answer.body, "SubjectFromWebIdentityToken"), READER);
    assert_eq!(field(&answer.body, "Audience"), "pgvs3");
    assert_eq!(field(&answer.body, "Provider"), ISSUER);
    assert_eq!(
        field(&answer.body, "Arn"),
        "arn:aws:sts::000000000000:assumed-role/reader/test-session"
    );
    assert!(session.access_key.starts_with("ASIA") && session.access_key.len() == 20);
    let expiration = time::OffsetDateTime::parse(
        field(&answer.body, "Expiration"),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let left = expiration.unix_timestamp() - now();
    assert!((840..=905).contains(&left), "900 s asked, {left} s given");

    // Within the role's policy, with aws-sdk-s3: its bucket, not another.
    let s3 = session_client(addr, &session.access_key, &session.secret, Some(&session.token));
    put_code(&s3, "data", "from-pod").await.unwrap();
    let got = s3.get_object().bucket("data").key("from-pod").send().await.unwrap();
    assert_eq!(got.body.collect().await.unwrap().into_bytes().as_ref(), b"hello");
    let listed = s3.list_objects_v2().bucket("data").send().await.unwrap();
    assert_eq!(listed.key_count(), Some(1));
    assert_eq!(put_code(&s3, "other", "x").await, Err("AccessDenied".into()));
    let delete = s3
        .delete_object()
        .bucket("data")
        .key("from-pod")
        .send()
        .await
        .unwrap_err();
    assert_eq!(delete.into_service_error().code(), Some("AccessDenied"));
    let create = s3.create_bucket().bucket("mine").send().await.unwrap_err();
    assert_eq!(create.into_service_error().code(), Some("AccessDenied"));

    // The session's key is nothing without its token, or with another.
    let tokenless = session_client(addr, &session.access_key, &session.secret, None);
    assert_eq!(put_code(&tokenless, "data", "x").await, Err("InvalidToken".into()));
    let forged = session_client(addr, &session.access_key, &session.secret, Some("forged"));
    assert_eq!(put_code(&forged, "data", "x").await, Err("InvalidToken".into()));

    // A presigned URL carries the token in X-Amz-Security-Token.
    let presigned = s3
        .get_object()
        .bucket("data")
        .key("from-pod")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).unwrap())
        .await
        .unwrap();
    assert!(presigned.uri().contains("X-Amz-Security-Token="));
    let uri: http::Uri = presigned.uri().parse().unwrap();
    let path = uri.path_and_query().unwrap().as_str();
    let answer = raw::send(addr, "GET", path, &[("host".into(), addr.to_string())], b"").await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "hello"));
    // Signed by the session's key and secret, but without its token: refused.
    let tokenless_url = tokenless
        .get_object()
        .bucket("data")
        .key("from-pod")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).unwrap())
        .await
        .unwrap();
    let uri: http::Uri = tokenless_url.uri().parse().unwrap();
    let path = uri.path_and_query().unwrap().as_str();
    let answer = raw::send(addr, "GET", path, &[("host".into(), addr.to_string())], b"").await;
    assert_eq!(
        (answer.status, answer.code()),
        (400, Some("InvalidToken")),
        "{}",
        answer.body
    );

    // An ES256 token of the cluster's EC key works as well.
    let es256 = cluster.token(
        &json!({"alg": "ES256", "kid": "ec-1"}),
        &claims(READER, "pgvs3", 0),
        "ec",
    );
    issued(&assume(&gw, &es256, &[]).await);

    assert!(gw.metric("pgvs3_sts_assumed_total{role=\"reader\"}").await >= Some(2.0));
}

#[tokio::test]
async fn foreign_stale_and_hostile_tokens_are_refused_with_sts_codes() {
    let gw = TestGateway::start().await;
    let cluster = Cluster::new();
    setup(&gw, &cluster).await;
    let rs = json!({"alg": "RS256", "kid": "rsa-1"});
    let mut unknown_issuer = claims(READER, "pgvs3", 0);
    unknown_issuer["iss"] = json!("https://evil.example");
    let mut nested = claims(READER, "pgvs3", 0);
    nested["deep"] = serde_json::from_str(&format!("{}1{}", "[".repeat(40), "]".repeat(40))).unwrap();
    let huge_header = json!({"alg": "RS256", "kid": "rsa-1", "pad": "x".repeat(20_000)});
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (
            "another ServiceAccount",
            cluster.service_account("system:serviceaccount:apps:writer"),
            403,
            "AccessDenied",
        ),
        (
            "another namespace",
            cluster.service_account("system:serviceaccount:other:reader"),
            403,
            "AccessDenied",
        ),
        (
            "expired",
            cluster.token(&rs, &claims(READER, "pgvs3", -7200), "rsa"),
            400,
            "ExpiredTokenException",
        ),
        (
            "not yet valid",
            cluster.token(&rs, &claims(READER, "pgvs3", 3600), "rsa"),
            400,
            "InvalidIdentityToken",
        ),
        (
            "wrong audience",
            cluster.token(&rs, &claims(READER, "vault", 0), "rsa"),
            400,
            "InvalidIdentityToken",
        ),
        (
            "unknown issuer",
            cluster.token(&rs, &unknown_issuer, "rsa"),
            400,
            "InvalidIdentityToken",
        ),
        (
            "bad signature",
            cluster.token(&rs, &claims(READER, "pgvs3", 0), "stranger"),
            400,
            "InvalidIdentityToken",
        ),
        (
            "alg none",
            cluster.token(&json!({"alg": "none", "kid": "rsa-1"}), &claims(READER, "pgvs3", 0), ""),
            400,
            "InvalidIdentityToken",
        ),
        (
            "HS256 with the public key",
            cluster.token(
                &json!({"alg": "HS256", "kid": "rsa-1"}),
                &claims(READER, "pgvs3", 0),
                "",
            ),
            400,
            "InvalidIdentityToken",
        ),
        (
            "ES256 naming the RSA key",
            cluster.token(
                &json!({"alg": "ES256", "kid": "rsa-1"}),
                &claims(READER, "pgvs3", 0),
                "ec",
            ),
            400,
            "InvalidIdentityToken",
        ),
        (
            "kid not found",
            cluster.token(
                &json!({"alg": "RS256", "kid": "gone"}),
                &claims(READER, "pgvs3", 0),
                "rsa",
            ),
            400,
            "InvalidIdentityToken",
        ),
        (
            "huge header",
            cluster.token(&huge_header, &claims(READER, "pgvs3", 0), "rsa"),
            400,
            "InvalidIdentityToken",
        ),
        (
            "deeply nested JSON",
            cluster.token(&rs, &nested, "rsa"),
            400,
            "InvalidIdentityToken",
        ),
        ("not a JWT", "garbage".to_owned(), 400, "InvalidIdentityToken"),
    ];
    for (what, token, status, code) in &cases {
        let answer = assume(&gw, token, &[]).await;
        assert_eq!(
            (answer.status, answer.code()),
            (*status, Some(*code)),
            "{what}: {}",
            answer.body
        );
        assert!(
            answer
                .body
                .contains("<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">")
        );
    }
    // A good token, the request around it refused: (what, RoleArn, RoleSessionName,
    // DurationSeconds, status, code).
    let good = cluster.service_account(READER);
    let (reader, absent) = (sts::role_arn("reader"), sts::role_arn("absent"));
    let (reader, absent) = (reader.as_str(), absent.as_str());
    let requests = [
        ("below 900 s", reader, "ok", Some("899"), 400, "ValidationError"),
        (
            "over the role's maximum",
            reader,
            "ok",
            Some("7201"),
            400,
            "ValidationError",
        ),
        (
            "a duration not a number",
            reader,
            "ok",
            Some("x"),
            400,
            "ValidationError",
        ),
        (
            "a one-character session name",
            absent,
            "s",
            None,
            400,
            "ValidationError",
        ),
        (
            "not a role ARN",
            "arn:aws:s3:::data",
            "ok",
            None,
            400,
            "ValidationError",
        ),
        ("no such role", absent, "ok", None, 403, "AccessDenied"),
    ];
    for (what, arn, session, duration, status, code) in requests {
        let mut params = vec![
            ("RoleArn", arn),
            ("RoleSessionName", session),
            ("WebIdentityToken", &good),
        ];
        params.extend(duration.map(|duration| ("DurationSeconds", duration)));
        let answer = assume_at(gw.gateway.s3_addr, &params).await;
        assert_eq!(
            (answer.status, answer.code()),
            (status, Some(code)),
            "{what}: {}",
            answer.body
        );
    }
    assert!(gw.metric("pgvs3_sts_refused_total{reason=\"signature\"}").await >= Some(1.0));
    assert!(gw.metric("pgvs3_sts_refused_total{reason=\"algorithm\"}").await >= Some(3.0));

    // A key rotated out of the set: its tokens stop working, the new key's start.
    let session = issued(&assume(&gw, &good, &[]).await);
    let mut rotated = cluster.jwks();
    rotated["keys"].as_array_mut().unwrap().remove(0);
    let sql = gw.sql().await;
    sts::put_oidc_issuer(&sql, ISSUER, &rotated).await.unwrap();
    assert_eq!(assume(&gw, &good, &[]).await.code(), Some("InvalidIdentityToken"));
    let es256 = cluster.token(
        &json!({"alg": "ES256", "kid": "ec-1"}),
        &claims(READER, "pgvs3", 0),
        "ec",
    );
    issued(&assume(&gw, &es256, &[]).await);

    // Deleting the role ends its sessions on the gateway, and its tokens assume nothing.
    let s3 = session_client(
        gw.gateway.s3_addr,
        &session.access_key,
        &session.secret,
        Some(&session.token),
    );
    put_code(&s3, "data", "before").await.unwrap();
    sts::delete_role(&sql, "reader").await.unwrap();
    common::eventually(
        Duration::from_secs(10),
        "the deleted role's session refused",
        || async { (put_code(&s3, "data", "after").await == Err("InvalidAccessKeyId".into())).then_some(()) },
    )
    .await;
    assert_eq!(assume(&gw, &es256, &[]).await.code(), Some("AccessDenied"));
}

/// A trust that pins its ServiceAccounts' UIDs (the operator's roles do) refuses a token of
/// the right subject whose ServiceAccount is gone: deleted, or deleted and recreated under the
/// same name (a new UID); and a token without the claim.
#[tokio::test]
async fn a_token_of_a_deleted_service_account_is_refused_once_its_uid_is_unpinned() {
    let gw = TestGateway::start().await;
    let cluster = Cluster::new();
    setup(&gw, &cluster).await;
    let sql = gw.sql().await;
    let token_of = |uid: Option<&str>| {
        let mut claims = claims(READER, "pgvs3", 0);
        match uid {
            Some(uid) => claims["kubernetes.io"]["serviceaccount"]["uid"] = json!(uid),
            None => drop(claims.as_object_mut().unwrap().remove("kubernetes.io")),
        }
        cluster.token(&json!({"alg": "RS256", "kid": "rsa-1"}), &claims, "rsa")
    };
    let (old, new, claimless) = (token_of(Some("uid-1")), token_of(Some("uid-2")), token_of(None));

    put_reader(&sql, Some(&["uid-1"])).await;
    issued(&assume(&gw, &old, &[]).await);
    for (token, what) in [(&new, "another UID"), (&claimless, "no uid claim")] {
        let answer = assume(&gw, token, &[]).await;
        assert_eq!(
            (answer.status, answer.code()),
            (403, Some("AccessDenied")),
            "{what}: {}",
            answer.body
        );
    }

    // Recreated under the same name: the new account's tokens only.
    put_reader(&sql, Some(&["uid-2"])).await;
    let answer = assume(&gw, &old, &[]).await;
    assert_eq!(
        (answer.status, answer.code()),
        (403, Some("AccessDenied")),
        "{}",
        answer.body
    );
    issued(&assume(&gw, &new, &[]).await);

    // Deleted: none.
    put_reader(&sql, Some(&[])).await;
    assert_eq!(assume(&gw, &new, &[]).await.code(), Some("AccessDenied"));
    assert!(gw.metric("pgvs3_sts_refused_total{reason=\"subject\"}").await >= Some(4.0));
}

#[tokio::test]
async fn every_gateway_of_the_database_accepts_a_session_until_it_expires() {
    let first = TestGateway::start().await;
    let cluster = Cluster::new();
    setup(&first, &cluster).await;
    let second = TestGateway::on(first.database_url.clone()).await;
    let token = cluster.service_account(READER);

    let session = issued(&assume(&first, &token, &[]).await);
    let on_second = session_client(
        second.gateway.s3_addr,
        &session.access_key,
        &session.secret,
        Some(&session.token),
    );
    put_code(&on_second, "data", "via-second").await.unwrap();
    let on_first = session_client(
        first.gateway.s3_addr,
        &session.access_key,
        &session.secret,
        Some(&session.token),
    );
    on_first
        .get_object()
        .bucket("data")
        .key("via-second")
        .send()
        .await
        .unwrap();

    // Expired (as the database's clock says), before the second gateway has seen it.
    let stale = issued(&assume(&first, &token, &[]).await);
    let sql = first.sql().await;
    sql.execute(
        "UPDATE pgvs3.sts_sessions SET expires_at = now() - interval '1 second' WHERE access_key = $1",
        &[&stale.access_key],
    )
    .await
    .unwrap();
    let expired = session_client(
        second.gateway.s3_addr,
        &stale.access_key,
        &stale.secret,
        Some(&stale.token),
    );
    assert_eq!(put_code(&expired, "data", "late").await, Err("ExpiredToken".into()));
    // Reaped an hour after expiry; then the key is unknown.
    sql.execute(
        "UPDATE pgvs3.sts_sessions SET expires_at = now() - interval '2 hours' WHERE access_key = $1",
        &[&stale.access_key],
    )
    .await
    .unwrap();
    assert_eq!(first.gateway.store.catalog().reap_sessions().await.unwrap(), 1);
    let third = TestGateway::on(first.database_url.clone()).await;
    let reaped = session_client(
        third.gateway.s3_addr,
        &stale.access_key,
        &stale.secret,
        Some(&stale.token),
    );
    assert_eq!(
        put_code(&reaped, "data", "later").await,
        Err("InvalidAccessKeyId".into())
    );
}

/// boto3: the STS client's AssumeRoleWithWebIdentity, then the SDK's own web identity provider
/// driven by AWS_ROLE_ARN / AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ENDPOINT_URL for STS and S3.
#[tokio::test]
async fn boto3_assumes_the_role_from_its_environment() {
    let gw = TestGateway::start().await;
    let cluster = Cluster::new();
    setup(&gw, &cluster).await;
    let token_file = cluster.dir.join("token");
    std::fs::write(&token_file, cluster.service_account(READER)).unwrap();
    let script = format!(
        r#"
import os, boto3
token = open({token:?}).read()
sts = boto3.client("sts", region_name="us-east-1", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                   aws_access_key_id="x", aws_secret_access_key="x")
out = sts.assume_role_with_web_identity(RoleArn="arn:aws:iam::000000000000:role/reader",
                                        RoleSessionName="boto", WebIdentityToken=token, DurationSeconds=900)
c = out["Credentials"]
assert out["SubjectFromWebIdentityToken"] == {reader:?}, out
s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                  aws_access_key_id=c["AccessKeyId"], aws_secret_access_key=c["SecretAccessKey"],
                  aws_session_token=c["SessionToken"])
s3.put_object(Bucket="data", Key="boto", Body=b"b")
# GetCallerIdentity, signed with service sts: the root key, then the session.
root = boto3.client("sts", region_name="us-east-1", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                    aws_access_key_id=os.environ["AK"], aws_secret_access_key=os.environ["SK"])
assert root.get_caller_identity()["Arn"] == "arn:aws:iam::000000000000:root"
me = boto3.client("sts", region_name="us-east-1", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                  aws_access_key_id=c["AccessKeyId"], aws_secret_access_key=c["SecretAccessKey"],
                  aws_session_token=c["SessionToken"]).get_caller_identity()
assert me["Arn"] == "arn:aws:sts::000000000000:assumed-role/reader/boto", me
assert me["Account"] == "000000000000", me
forged = boto3.client("sts", region_name="us-east-1", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                      aws_access_key_id=c["AccessKeyId"], aws_secret_access_key=c["SecretAccessKey"],
                      aws_session_token="forged")
try:
    forged.get_caller_identity()
    raise SystemExit("a forged session token was accepted")
except forged.exceptions.ClientError as err:
    assert err.response["Error"]["Code"] == "InvalidClientTokenId", err.response
for name in ("AK", "SK"):
    os.environ.pop(name, None)
os.environ.update(AWS_ROLE_ARN="arn:aws:iam::000000000000:role/reader", AWS_WEB_IDENTITY_TOKEN_FILE={token:?},
                  AWS_ROLE_SESSION_NAME="env", AWS_DEFAULT_REGION="us-east-1")
for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
    os.environ.pop(name, None)
session = boto3.session.Session()
assert session.get_credentials().method == "assume-role-with-web-identity", session.get_credentials().method
env_s3 = session.client("s3")
assert env_s3.get_object(Bucket="data", Key="boto")["Body"].read() == b"b"
try:
    env_s3.put_object(Bucket="other", Key="x", Body=b"x")
    raise SystemExit("another bucket was writable")
except env_s3.exceptions.ClientError as err:
    assert err.response["Error"]["Code"] == "AccessDenied", err.response
print("done")
"#,
        token = token_file.to_string_lossy(),
        reader = READER,
    );
    gw.python_passes(&script, "done").await;
}

/// A session copying out of another bucket is held to that bucket's policy too (a Deny there
/// refuses it, as it refuses a static key); and sessions do not turn off the access checks'
/// fast path that static keys take while no bucket or key has rules.
#[tokio::test]
async fn a_session_copy_obeys_the_source_buckets_deny_and_sessions_keep_the_fast_path() {
    let gw = TestGateway::start().await;
    let cluster = Cluster::new();
    setup(&gw, &cluster).await;
    let catalog = gw.gateway.store.catalog();
    let session = issued(&assume(&gw, &cluster.service_account(READER), &[]).await);
    let s3 = session_client(
        gw.gateway.s3_addr,
        &session.access_key,
        &session.secret,
        Some(&session.token),
    );
    put_code(&s3, "data", "mine").await.unwrap();
    assert!(
        !catalog.has_access_rules(),
        "a session's role policy turned the access checks on for every static key"
    );

    // The role may read `other` too; `other`'s policy denies reading it to everyone.
    let sql = gw.sql().await;
    let trust = Trust {
        issuer: ISSUER.into(),
        audience: sts::DEFAULT_AUDIENCE.into(),
        subjects: vec![READER.into()],
        service_account_uids: None,
    };
    let policy = json!({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"],
         "Resource": ["arn:aws:s3:::data/*", "arn:aws:s3:::other/*"]}]});
    sts::put_role(&sql, "reader", &trust, &policy, 7200).await.unwrap();
    common::s3::put_object(&gw.client, "other", "secret", b"s".to_vec()).await;
    let copy = |source: &'static str| {
        let s3 = s3.clone();
        async move {
            s3.copy_object()
                .bucket("data")
                .key("copy")
                .copy_source(source)
                .send()
                .await
                .map(|_| ())
                .map_err(|err| err.into_service_error().code().unwrap_or("?").to_owned())
        }
    };
    common::eventually(Duration::from_secs(10), "the role's new policy", || async {
        copy("other/secret").await.ok()
    })
    .await;
    gw.client
        .put_bucket_policy()
        .bucket("other")
        .policy(
            json!({"Version": "2012-10-17", "Statement": [
                {"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::other/*"}]})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    common::eventually(Duration::from_secs(10), "the source's Deny applied", || async {
        (copy("other/secret").await == Err("AccessDenied".into())).then_some(())
    })
    .await;
    assert_eq!(copy("data/mine").await, Ok(()), "a source without a Deny");
}

/// A static key sent with a session token is refused, as AWS refuses a long-term key with one:
/// S3 `InvalidToken`, STS `InvalidClientTokenId`; and GetCallerIdentity's signature errors are
/// STS's XML (boto3 parses their codes), not S3's.
#[tokio::test]
async fn a_static_key_with_a_session_token_and_bad_signatures_are_refused_in_each_apis_terms() {
    let gw = TestGateway::start().await;
    gw.client.create_bucket().bucket("data").send().await.unwrap();
    let with_token = session_client(
        gw.gateway.s3_addr,
        common::ROOT_ACCESS_KEY,
        common::ROOT_SECRET_KEY,
        Some("a-token-of-nobody"),
    );
    assert_eq!(put_code(&with_token, "data", "x").await, Err("InvalidToken".into()));
    let script = r#"
import os, boto3
def code(**kwargs):
    client = boto3.client("sts", region_name="us-east-1", endpoint_url=os.environ["AWS_ENDPOINT_URL"], **kwargs)
    try:
        client.get_caller_identity()
        return "OK"
    except client.exceptions.ClientError as err:
        return err.response["Error"]["Code"]
ak, sk = os.environ["AK"], os.environ["SK"]
assert code(aws_access_key_id=ak, aws_secret_access_key=sk) == "OK"
got = code(aws_access_key_id=ak, aws_secret_access_key=sk, aws_session_token="a-token-of-nobody")
assert got == "InvalidClientTokenId", got
got = code(aws_access_key_id=ak, aws_secret_access_key="wrong")
assert got == "SignatureDoesNotMatch", got
got = code(aws_access_key_id="NOSUCHKEY0000", aws_secret_access_key="wrong")
assert got == "InvalidClientTokenId", got
print("done")
"#;
    gw.python_passes(script, "done").await;
}

/// The role is read only for a token that verified: a forged token is refused as a token
/// (`InvalidIdentityToken`) whether its role exists or not, so an unauthenticated caller
/// learns nothing of the roles and costs no role read.
#[tokio::test]
async fn a_forged_token_is_refused_before_its_role_is_looked_at() {
    let gw = TestGateway::start().await;
    let cluster = Cluster::new();
    setup(&gw, &cluster).await;
    let forged = cluster.token(
        &json!({"alg": "RS256", "kid": "rsa-1"}),
        &claims(READER, "pgvs3", 0),
        "stranger",
    );
    for role in ["reader", "absent"] {
        let arn = sts::role_arn(role);
        let answer = assume_at(
            gw.gateway.s3_addr,
            &[
                ("RoleArn", &arn),
                ("RoleSessionName", "ok"),
                ("WebIdentityToken", &forged),
            ],
        )
        .await;
        assert_eq!(
            (answer.status, answer.code()),
            (400, Some("InvalidIdentityToken")),
            "role {role}: {}",
            answer.body
        );
    }
}

/// A session acts for the account that owns its role's buckets: its CreateBucket of a bucket
/// its role may create answers `BucketAlreadyOwnedByYou`, as AWS answers an account re-creating
/// its own bucket (tools and SDK helpers "ensure" their bucket this way). A bucket its role may
/// not create stays `AccessDenied`, and sessions still create none.
#[tokio::test]
async fn a_sessions_create_bucket_of_its_own_bucket_is_bucket_already_owned_by_you() {
    let gw = TestGateway::start().await;
    let cluster = Cluster::new();
    setup(&gw, &cluster).await;
    let sql = gw.sql().await;
    let trust = Trust {
        issuer: ISSUER.into(),
        audience: sts::DEFAULT_AUDIENCE.into(),
        subjects: vec![READER.into()],
        service_account_uids: None,
    };
    let policy = json!({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "s3:*", "Resource": ["arn:aws:s3:::data", "arn:aws:s3:::data/*",
                                                          "arn:aws:s3:::fresh", "arn:aws:s3:::fresh/*"]}]});
    sts::put_role(&sql, "reader", &trust, &policy, 7200).await.unwrap();
    let session = issued(&assume(&gw, &cluster.service_account(READER), &[]).await);
    let s3 = session_client(
        gw.gateway.s3_addr,
        &session.access_key,
        &session.secret,
        Some(&session.token),
    );
    let create = |bucket: &'static str| {
        let s3 = s3.clone();
        async move {
            s3.create_bucket()
                .bucket(bucket)
                .send()
                .await
                .map(|_| ())
                .map_err(|err| err.into_service_error().code().unwrap_or("?").to_owned())
        }
    };
    assert_eq!(create("data").await, Err("BucketAlreadyOwnedByYou".into()));
    // Not the role's: refused before whether it exists is told.
    assert_eq!(create("other").await, Err("AccessDenied".into()));
    assert_eq!(create("nowhere").await, Err("AccessDenied".into()));
    // The role's, but absent: sessions own no bucket, so they make none.
    assert_eq!(create("fresh").await, Err("AccessDenied".into()));
    let listed = gw.client.list_buckets().send().await.unwrap();
    let names: Vec<&str> = listed.buckets().iter().filter_map(|b| b.name()).collect();
    assert_eq!(names, ["data", "other"]);
}
