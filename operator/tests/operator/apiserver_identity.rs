//! Workload identity on the real API server (issue 37, the operator's half): the API server's
//! service-account issuer and keys published into the pool's catalog, also after a key is
//! added; a Bucket's role and ConfigMap written, updated, restored and deleted with it; a
//! token replayed after its ServiceAccount's deletion (and recreation) refused; a
//! namespaceSelector followed as namespaces are labelled and unlabelled. A
//! control plane of its own, so it runs alone:
//! `cargo test --workspace --locked --test operator -- --ignored workload_identity`.

use crate::control_plane::{ControlPlane, Operator, apply, eventually, scenario_bound, served_pool, wait};
use pgvs3_testkit as common;

use std::sync::Arc;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use pgvs3_catalog::sts;
use pgvs3_operator::crd::Bucket;
use serde_json::{Value, json};

#[test]
#[ignore = "the real-apiserver tier: needs PGVS3_KUBE_ASSETS (.ci/apiserver-tier.sh)"]
fn workload_identity() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let plane = ControlPlane::start("identity", "").await;
            let operator = Operator::start(&plane, "identity-operator", None, ("pgvs3-operator", 15));
            let scenario = tokio::spawn(scenario(Arc::new(plane)));
            match tokio::time::timeout(scenario_bound(), scenario).await {
                Ok(Ok(())) => {}
                failed => {
                    eprintln!("--- operator log ---\n{}", operator.process.log_text());
                    panic!("workload_identity: {failed:?}");
                }
            }
        });
}

/// A JSON document the API server serves at `path` (as its admin).
async fn served(client: &Client, path: &str) -> Value {
    let text = client
        .request_text(http::Request::get(path).body(Vec::new()).unwrap())
        .await
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The key set the catalog has for `issuer`.
async fn published(catalog: &tokio_postgres::Client, issuer: &str) -> Option<Value> {
    let row = catalog
        .query_opt(
            "SELECT jwks FROM pgvs3.oidc_issuer_jwks($1) WHERE jwks IS NOT NULL",
            &[&issuer],
        )
        .await
        .ok()??;
    Some(row.get::<_, tokio_postgres::types::Json<Value>>("jwks").0)
}

async fn role(catalog: &tokio_postgres::Client, name: &str) -> Option<sts::Role> {
    sts::list_roles(catalog)
        .await
        .unwrap()
        .into_iter()
        .find(|role| role.name == name)
}

/// AssumeRoleWithWebIdentity of role `role` with `token` on the gateway at `port`.
async fn assume(port: u16, role: &str, token: &str) -> common::raw::RawResponse {
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    // Percent-encoded: the ARN's `:` and `/` (a token is URL-safe already).
    let encode = |text: &str| {
        text.bytes()
            .map(|byte| match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (byte as char).to_string(),
                _ => format!("%{byte:02X}"),
            })
            .collect::<String>()
    };
    let body = format!(
        "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleSessionName=apiserver&RoleArn={}&WebIdentityToken={}",
        encode(&sts::role_arn(role)),
        encode(token)
    );
    let headers = [
        ("host".to_owned(), addr.to_string()),
        (
            "content-type".to_owned(),
            "application/x-www-form-urlencoded".to_owned(),
        ),
        ("content-length".to_owned(), body.len().to_string()),
    ];
    common::raw::send(addr, "POST", "/", &headers, body.as_bytes()).await
}

/// A token the API server issues for ServiceAccount `name` (TokenRequest, audience `pgvs3`).
async fn token_of(accounts: &Api<ServiceAccount>, name: &str) -> String {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![sts::DEFAULT_AUDIENCE.to_string()],
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
}

/// The ServiceAccount UIDs role `name`'s trust pins.
async fn pinned(catalog: &tokio_postgres::Client, name: &str) -> Option<Vec<String>> {
    role(catalog, name).await?.trust.service_account_uids
}

/// The Bucket names ServiceAccount `app`: its token assumes the role while it exists; deleted,
/// its unexpired token is refused; recreated under the same name (a new UID), the old token
/// stays refused and the new account's works. The operator pins the UIDs in the role's trust
/// and watches ServiceAccounts; the gateway checks the token's `kubernetes.io` →
/// `serviceaccount` → `uid`.
async fn replayed_after_deletion(
    client: &Client,
    catalog: &tokio_postgres::Client,
    ns: &str,
    role_name: &str,
    port: u16,
) {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let create = || async {
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some("app".into()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        accounts
            .create(&PostParams::default(), &account)
            .await
            .unwrap()
            .metadata
            .uid
            .unwrap()
    };
    let first = create().await;
    eventually(wait(), "the first account's UID pinned", || async {
        (pinned(catalog, role_name).await? == [first.clone()]).then_some(())
    })
    .await;
    let old = token_of(&accounts, "app").await;
    let answer = assume(port, role_name, &old).await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    accounts.delete("app", &DeleteParams::default()).await.unwrap();
    eventually(wait(), "no UID pinned once the account is deleted", || async {
        pinned(catalog, role_name).await?.is_empty().then_some(())
    })
    .await;
    let answer = assume(port, role_name, &old).await;
    assert_eq!(
        (answer.status, answer.code()),
        (403, Some("AccessDenied")),
        "a deleted account's token: {}",
        answer.body
    );

    let second = create().await;
    assert_ne!(first, second);
    eventually(wait(), "the recreated account's UID pinned", || async {
        (pinned(catalog, role_name).await? == [second.clone()]).then_some(())
    })
    .await;
    let answer = assume(port, role_name, &old).await;
    assert_eq!(
        (answer.status, answer.code()),
        (403, Some("AccessDenied")),
        "the old account's token after its name was reused: {}",
        answer.body
    );
    let answer = assume(port, role_name, &token_of(&accounts, "app").await).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}

/// A Bucket that names ServiceAccount `reports` of every namespace labelled `team=data`: the
/// role's subjects (and pinned UIDs) follow the namespaces as they are labelled and
/// unlabelled; a token of a namespace no longer selected is refused.
async fn selected_by_namespace_labels(
    plane: &ControlPlane,
    client: &Client,
    catalog: &tokio_postgres::Client,
    port: u16,
) {
    for namespace in ["reports-a", "reports-b"] {
        plane.kubectl(&["create", "namespace", namespace]);
        plane.kubectl(&["-n", namespace, "create", "serviceaccount", "reports"]);
    }
    plane.kubectl(&["label", "namespace", "reports-a", "team=data"]);
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), "apps");
    apply(
        &buckets,
        "shared",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "shared"},
               "spec": {"gatewayPoolRef": "objects", "workloadIdentity": {"serviceAccounts": [
                   {"name": "reports", "namespaceSelector": {"matchLabels": {"team": "data"}}}]}}}),
    )
    .await;
    let role_name = "k8s.apps.shared";
    let subjects = |namespaces: &[&str]| {
        namespaces
            .iter()
            .map(|namespace| sts::service_account_subject(namespace, "reports"))
            .collect::<Vec<_>>()
    };
    let trusted = |expected: Vec<String>| async move {
        let trust = role(catalog, role_name).await?.trust;
        (trust.subjects == expected && trust.service_account_uids.as_ref().map(Vec::len) == Some(expected.len()))
            .then_some(())
    };
    eventually(wait(), "the labelled namespace's account trusted", || {
        trusted(subjects(&["reports-a"]))
    })
    .await;
    let a: Api<ServiceAccount> = Api::namespaced(client.clone(), "reports-a");
    let b: Api<ServiceAccount> = Api::namespaced(client.clone(), "reports-b");
    let (token_a, token_b) = (token_of(&a, "reports").await, token_of(&b, "reports").await);
    assert_eq!(assume(port, role_name, &token_a).await.status, 200);
    let answer = assume(port, role_name, &token_b).await;
    assert_eq!(
        answer.code(),
        Some("AccessDenied"),
        "an unlabelled namespace: {}",
        answer.body
    );

    plane.kubectl(&["label", "namespace", "reports-b", "team=data"]);
    eventually(wait(), "a namespace labelled later trusted", || {
        trusted(subjects(&["reports-a", "reports-b"]))
    })
    .await;
    assert_eq!(assume(port, role_name, &token_b).await.status, 200);

    plane.kubectl(&["label", "namespace", "reports-a", "team-"]);
    eventually(wait(), "an unlabelled namespace no longer trusted", || {
        trusted(subjects(&["reports-b"]))
    })
    .await;
    let answer = assume(port, role_name, &token_a).await;
    assert_eq!(answer.code(), Some("AccessDenied"), "{}", answer.body);

    buckets.delete("shared", &DeleteParams::default()).await.unwrap();
    eventually(wait(), "the shared Bucket's role deleted", || async {
        role(catalog, role_name).await.is_none().then_some(())
    })
    .await;
}

fn data(config_map: &ConfigMap, key: &str) -> String {
    config_map
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .cloned()
        .unwrap_or_default()
}

async fn scenario(plane: Arc<ControlPlane>) {
    let ns = "apps";
    plane.kubectl(&["create", "namespace", ns]);
    let client = plane.admin.clone();
    // The gateway's migrations give the catalog the STS tables and functions.
    let (url, gateway) = served_pool(&plane, &client, ns).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let (catalog, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);

    // The API server's issuer and keys reach the pool's catalog.
    let issuer = served(&client, "/.well-known/openid-configuration").await["issuer"]
        .as_str()
        .unwrap()
        .to_string();
    let keys = served(&client, "/openid/v1/jwks").await;
    assert_eq!(keys["keys"].as_array().map(Vec::len), Some(1), "{keys}");
    eventually(wait(), "the API server's keys in the catalog", || async {
        (published(&catalog, &issuer).await? == keys).then_some(())
    })
    .await;

    // A Bucket for two ServiceAccounts: its role (trust: the issuer, audience pgvs3, their
    // subjects; policy: its bucket, read-only) and its ConfigMap; the static key stays.
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), ns);
    let bucket = |identity: Value| {
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "photos"},
               "spec": {"gatewayPoolRef": "objects", "workloadIdentity": identity}})
    };
    apply(
        &buckets,
        "photos",
        bucket(
            json!({"serviceAccounts": [{"name": "app"}, {"name": "*", "namespace": "batch"}], "access": "ReadOnly"}),
        ),
    )
    .await;
    let name = "k8s.apps.photos";
    let arn = sts::role_arn(name);
    let written = eventually(wait(), "the Bucket's role", || async { role(&catalog, name).await }).await;
    assert_eq!(written.trust.issuer, issuer);
    assert_eq!(written.trust.audience, "pgvs3");
    assert_eq!(
        written.trust.subjects,
        ["system:serviceaccount:apps:app", "system:serviceaccount:batch:*"]
    );
    assert_eq!(written.max_session_seconds, 3600);
    let policy = written.policy.to_string();
    let bucket_name = pgvs3_operator::crd::default_bucket_name("apps", "photos");
    assert!(
        policy.contains(&format!("arn:aws:s3:::{bucket_name}/*"))
            && !policy.contains("s3:*")
            && !policy.contains("\"*\""),
        "{policy}"
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let config_map = eventually(wait(), "the Bucket's ConfigMap", || async {
        config_maps.get_opt("photos-identity").await.unwrap()
    })
    .await;
    assert_eq!(data(&config_map, "AWS_ROLE_ARN"), arn);
    assert_eq!(data(&config_map, "AWS_ENDPOINT_URL"), "http://objects.apps.svc:9000");
    assert_eq!(
        data(&config_map, "AWS_ENDPOINT_URL_STS"),
        "http://objects.apps.svc:9000"
    );
    assert_eq!(data(&config_map, "AWS_ENDPOINT_URL_S3"), "http://objects.apps.svc:9000");
    assert_eq!(data(&config_map, "AWS_REGION"), "us-east-1");
    assert_eq!(data(&config_map, "AWS_DEFAULT_REGION"), "us-east-1");
    assert_eq!(data(&config_map, "BUCKET_NAME"), bucket_name);
    assert_eq!(
        data(&config_map, "AWS_WEB_IDENTITY_TOKEN_FILE"),
        "/var/run/secrets/pgvs3.io/serviceaccount/token"
    );
    let bucket_uid = buckets.get("photos").await.unwrap().metadata.uid.unwrap();
    let owner = &config_map.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        (bucket_uid.as_str(), Some(true))
    );
    eventually(wait(), "the Bucket Ready with its role ARN", || async {
        let status = buckets.get("photos").await.ok()?.status?;
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (ready && status.role_arn.as_deref() == Some(arn.as_str()) && status.secret_name.is_some()).then_some(())
    })
    .await;
    assert!(secrets.get_opt("photos-credentials").await.unwrap().is_some());

    replayed_after_deletion(&client, &catalog, ns, name, gateway.s3_port).await;
    selected_by_namespace_labels(&plane, &client, &catalog, gateway.s3_port).await;

    // Edited: read-write, longer sessions, no static key: the role follows, the Secret goes.
    apply(
        &buckets,
        "photos",
        bucket(json!({"serviceAccounts": [{"name": "app"}], "maxSessionSeconds": 7200, "staticKey": false})),
    )
    .await;
    let updated = eventually(wait(), "the role updated", || async {
        role(&catalog, name)
            .await
            .filter(|role| role.max_session_seconds == 7200)
    })
    .await;
    assert_eq!(updated.trust.subjects, ["system:serviceaccount:apps:app"]);
    assert!(updated.policy.to_string().contains("\"s3:*\""), "{}", updated.policy);
    eventually(wait(), "the credentials Secret deleted", || async {
        secrets
            .get_opt("photos-credentials")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    eventually(wait(), "no secretName in the status", || async {
        buckets
            .get("photos")
            .await
            .ok()?
            .status?
            .secret_name
            .is_none()
            .then_some(())
    })
    .await;

    // A deleted ConfigMap is put back.
    config_maps
        .delete("photos-identity", &DeleteParams::default())
        .await
        .unwrap();
    eventually(wait(), "the ConfigMap restored", || async {
        config_maps.get_opt("photos-identity").await.unwrap()
    })
    .await;

    // Workload identity unset: role and ConfigMap removed.
    buckets
        .patch(
            "photos",
            &PatchParams::apply("pgvs3-tests").force(),
            &Patch::Apply(
                json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "photos"},
                                 "spec": {"gatewayPoolRef": "objects"}}),
            ),
        )
        .await
        .unwrap();
    eventually(wait(), "the role deleted", || async {
        role(&catalog, name).await.is_none().then_some(())
    })
    .await;
    eventually(wait(), "the ConfigMap deleted", || async {
        config_maps
            .get_opt("photos-identity")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    eventually(wait(), "the static key back", || async {
        secrets.get_opt("photos-credentials").await.unwrap()
    })
    .await;

    // Set again, then the Bucket deleted: its role goes with it.
    apply(
        &buckets,
        "photos",
        bucket(json!({"serviceAccounts": [{"name": "app"}]})),
    )
    .await;
    eventually(wait(), "the role written again", || async {
        role(&catalog, name).await
    })
    .await;
    buckets.delete("photos", &DeleteParams::default()).await.unwrap();
    eventually(wait(), "the Bucket gone", || async {
        buckets.get_opt("photos").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(role(&catalog, name).await.is_none(), "the role outlived its Bucket");

    // The API server gets a second service-account key (a rotation's first half): the catalog
    // gets both within the operator's refresh. Last: a restarted API server of this kit may
    // serve watches from a stale cache for a while ("Too large resource version"), which the
    // checks above, made through the controllers' watches, would wait on; the issuer is read
    // with plain GETs.
    let run_dir = plane.run_dir.clone();
    let new_key = run_dir.join("sa-rotated.key");
    let new_pub = run_dir.join("sa-rotated.pub");
    crate::control_plane::run(std::process::Command::new("openssl").args([
        "genrsa",
        "-out",
        new_key.to_str().unwrap(),
        "2048",
    ]));
    crate::control_plane::run(std::process::Command::new("openssl").args([
        "rsa",
        "-in",
        new_key.to_str().unwrap(),
        "-pubout",
        "-out",
        new_pub.to_str().unwrap(),
    ]));
    let mut argv = plane.kill_apiserver();
    argv.push(format!("--service-account-key-file={}", new_pub.display()));
    plane.restart_apiserver(&argv).await;
    let rotated = served(&client, "/openid/v1/jwks").await;
    assert_eq!(rotated["keys"].as_array().map(Vec::len), Some(2), "{rotated}");
    eventually(wait(), "both keys in the catalog", || async {
        (published(&catalog, &issuer).await? == rotated).then_some(())
    })
    .await;
}
