//! The real-apiserver tier: the `pgvs3-operator` process, as the chart's ServiceAccount, against
//! etcd + kube-apiserver + kube-controller-manager, a real PostgreSQL and real `pgvs3` gateway
//! processes; the generated credentials are used with aws-sdk-s3. Ignored (and reported as not
//! run) without `PGVS3_KUBE_ASSETS`; `.ci/apiserver-tier.sh` runs it.
//!
//! One control plane and one operator serve every scenario; each scenario has its namespace.

use crate::control_plane;
use pgvs3_testkit as common;

use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use control_plane::{
    ControlPlane, Gateway, Operator, apply, database_parts, eventually, gateways_ready, primary_pool, put,
    scenario_bound, secret_text, served_pool, wait,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use pgvs3_operator::crd::{Bucket, GatewayPool};
use serde_json::json;

/// A Bucket name longer than a label value may be (63).
const LABEL_OVERFLOW: &str = "a-bucket-whose-name-is-longer-than-any-label-value-may-be-seventy";

#[test]
#[ignore = "the real-apiserver tier: needs PGVS3_KUBE_ASSETS (.ci/apiserver-tier.sh)"]
fn apiserver_tier() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(tier());
}

async fn tier() {
    // OpenShift's default: changing an owner reference takes `delete` on the child, and
    // `blockOwnerDeletion` takes `update` on the owner's finalizers (defect 5).
    let plane = ControlPlane::start(
        "tier",
        "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
    )
    .await;
    // Pools get ServiceMonitors (and the operator watches them) when the API is served.
    plane.install_service_monitor_crd();
    // An admin lets tenant-b's Buckets adopt the root-owned bucket `marked` (and tries `resp`).
    let operator = Operator::start_with(
        &plane,
        "tier-operator",
        None,
        ("pgvs3-operator", 15),
        &[
            ("PGVS3_OPERATOR_ADOPTABLE_BUCKETS", "tenant-b/marked,tenant-b/resp"),
            // namespace_deletion: a catalog that never answers is given up this soon.
            ("PGVS3_OPERATOR_CLEANUP_GRACE", "5"),
            // black_hole_database: a database that never answers is given up on this soon.
            ("PGVS3_OPERATOR_CATALOG_TIMEOUT", "3"),
        ],
    );
    let plane = std::sync::Arc::new(plane);
    let scenarios: Vec<(&str, tokio::task::JoinHandle<()>)> = vec![
        ("pool_and_buckets", tokio::spawn(pool_and_buckets(plane.clone()))),
        ("cel_rejections", tokio::spawn(cel_rejections(plane.clone()))),
        ("namespace_deletion", tokio::spawn(namespace_deletion(plane.clone()))),
        ("database_errors", tokio::spawn(database_errors(plane.clone()))),
        ("black_hole_database", tokio::spawn(black_hole_database(plane.clone()))),
        ("orphan_readoption", tokio::spawn(orphan_readoption(plane.clone()))),
        ("adoption_races", tokio::spawn(adoption_races(plane.clone()))),
        ("children_refused", tokio::spawn(children_refused(plane.clone()))),
        ("pool_lifecycle", tokio::spawn(pool_lifecycle(plane.clone()))),
        ("invalid_bucket_name", tokio::spawn(invalid_bucket_name(plane.clone()))),
        ("tenancy", tokio::spawn(tenancy(plane.clone()))),
        ("tls_bucket_secret", tokio::spawn(tls_bucket_secret(plane.clone()))),
        ("namespace_teardown", tokio::spawn(namespace_teardown(plane.clone()))),
        ("pool_in_use", tokio::spawn(pool_in_use(plane.clone()))),
        ("pool_day_two", tokio::spawn(pool_day_two(plane.clone()))),
        (
            "autoscaling_handover",
            tokio::spawn(autoscaling_handover(plane.clone())),
        ),
        (
            "service_monitor_restored",
            tokio::spawn(service_monitor_restored(plane.clone())),
        ),
        (
            "requests_in_the_audit_log",
            tokio::spawn(requests_in_the_audit_log(plane.clone())),
        ),
    ];
    let mut failed = Vec::new();
    for (name, scenario) in scenarios {
        match tokio::time::timeout(scenario_bound(), scenario).await {
            Ok(Ok(())) => eprintln!("scenario {name}: ok"),
            Ok(Err(panic)) => failed.push(format!("{name}: {panic}")),
            Err(_) => failed.push(format!("{name}: timed out")),
        }
    }
    if !failed.is_empty() {
        eprintln!("--- operator log ---\n{}", operator.process.log_text());
        panic!(
            "scenarios failed (control plane in {}): {failed:#?}",
            plane.run_dir.display()
        );
    }
}

/// The Bucket fields that map onto the gateway's features (notifications, a key limited to
/// prefixes, a DuckLake's ATTACH string), on a control plane of their own so they can be run
/// alone: `cargo test -p pgvs3-operator --test operator -- --ignored bucket_gateway_features`.
#[test]
#[ignore = "the real-apiserver tier: needs PGVS3_KUBE_ASSETS (.ci/apiserver-tier.sh)"]
fn bucket_gateway_features() {
    run_on_own_plane("features", bucket_features);
}

/// Objects the operator did not make are never taken over (review finding 1), on a control plane
/// of its own: `cargo test -p pgvs3-operator --test operator -- --ignored foreign_objects`.
#[test]
#[ignore = "the real-apiserver tier: needs PGVS3_KUBE_ASSETS (.ci/apiserver-tier.sh)"]
fn foreign_objects() {
    run_on_own_plane("foreign", foreign_objects_untouched);
}

/// Runs `scenario` on a control plane and an operator of its own, named `name`; on failure
/// prints the operator's log.
fn run_on_own_plane<Fut>(name: &str, scenario: fn(std::sync::Arc<ControlPlane>) -> Fut)
where
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let plane = ControlPlane::start(name, "").await;
            let operator = Operator::start(&plane, &format!("{name}-operator"), None, ("pgvs3-operator", 15));
            let running = tokio::spawn(scenario(std::sync::Arc::new(plane)));
            match tokio::time::timeout(scenario_bound(), running).await {
                Ok(Ok(())) => {}
                failed => {
                    eprintln!("--- operator log ---\n{}", operator.process.log_text());
                    panic!("{name}: {failed:?}");
                }
            }
        });
}

/// An application's Secret named like a Bucket's credentials, and a ConfigMap named like a
/// pool's, are left exactly as they were (no keys merged in, no owner reference, so no garbage
/// collection with the resource); the resource says `ResourceExists` naming the object, with a
/// Warning Event. A Bucket and an OriginCache of one name each get their own Secret.
async fn foreign_objects_untouched(plane: std::sync::Arc<ControlPlane>) {
    let ns = "foreign";
    let client = namespace(&plane, ns).await;
    let (url, _gateway) = served_pool(&plane, &client, ns).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), ns);
    let app_secret = apply(
        &secrets,
        "db-credentials",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-credentials"},
               "stringData": {"password": "the app's"}}),
    )
    .await;
    apply(
        &buckets,
        "db",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "db"},
               "spec": {"gatewayPoolRef": "objects"}}),
    )
    .await;
    let message = eventually(wait(), "Bucket db ResourceExists", || async {
        let (status, reason, message) = condition(&buckets.get("db").await.ok()?, "Ready")?;
        (status == "False" && reason == "ResourceExists").then_some(message)
    })
    .await;
    assert!(message.contains("Secret db-credentials"), "{message}");
    assert!(
        events_of(&client, ns, "db")
            .await
            .iter()
            .any(|(type_, reason, _)| type_ == "Warning" && reason == "ResourceExists")
    );
    let untouched = |secret: &Secret| {
        secret.owner_references().is_empty() && secret.data.as_ref().unwrap().keys().collect::<Vec<_>>() == ["password"]
    };
    let secret = secrets.get("db-credentials").await.unwrap();
    assert!(untouched(&secret), "{secret:?}");
    assert_eq!(secret.resource_version(), app_secret.resource_version());
    buckets.delete("db", &DeleteParams::default()).await.unwrap();
    eventually(wait(), "Bucket db gone", || async {
        buckets.get_opt("db").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(untouched(&secrets.get("db-credentials").await.unwrap()));

    // A pool named like the application's ConfigMap's stem.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    apply(
        &config_maps,
        "app-config",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config"}, "data": {"k": "v"}}),
    )
    .await;
    primary_pool(&client, ns, "app", &url).await;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    let message = eventually(wait(), "pool app ResourceExists", || async {
        let (status, reason, message) = pool_ready(&pools.get("app").await.ok()?)?;
        (status == "False" && reason == "ResourceExists").then_some(message)
    })
    .await;
    assert!(message.contains("ConfigMap app-config"), "{message}");
    let config = config_maps.get("app-config").await.unwrap();
    assert!(config.owner_references().is_empty(), "{config:?}");
    assert_eq!(config.data.unwrap().keys().collect::<Vec<_>>(), ["k"]);
    pools.delete("app", &DeleteParams::default()).await.unwrap();

    // A Bucket and an OriginCache named alike: two Secrets, each owned by its resource.
    apply(
        &secrets,
        "origin",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "origin"},
               "stringData": {"AWS_ACCESS_KEY_ID": "ORIGINKEY", "AWS_SECRET_ACCESS_KEY": "origin-secret"}}),
    )
    .await;
    let bucket = apply(
        &buckets,
        "x",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "x"},
               "spec": {"gatewayPoolRef": "objects"}}),
    )
    .await;
    let caches: Api<pgvs3_operator::crd::OriginCache> = Api::namespaced(client.clone(), ns);
    let cache = apply(
        &caches,
        "x",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "OriginCache", "metadata": {"name": "x"},
               "spec": {"gatewayPoolRef": "objects", "credentialsSecretRef": "origin", "bucket": "x-mirror",
                        "mode": "WriteThrough",
                        "origin": {"endpoint": "http://origin.example:9000", "bucket": "upstream"}}}),
    )
    .await;
    bucket_ready(&buckets, "x").await;
    let owned_by = |name: &'static str, uid: String| {
        let secrets = secrets.clone();
        async move {
            eventually(wait(), &format!("Secret {name} owned by {uid}"), || async {
                let secret = secrets.get_opt(name).await.ok()??;
                secret
                    .owner_references()
                    .iter()
                    .any(|r| r.uid == uid && r.controller == Some(true))
                    .then_some(())
            })
            .await
        }
    };
    owned_by("x-credentials", bucket.uid().unwrap()).await;
    owned_by("x-cache-credentials", cache.uid().unwrap()).await;
    let cache = eventually(wait(), "OriginCache x Ready", || async {
        let cache = caches.get("x").await.ok()?;
        let ready = cache
            .status
            .clone()?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (ready.status == "True").then_some(cache)
    })
    .await;
    assert_eq!(
        cache.status.unwrap().secret_name.as_deref(),
        Some("x-cache-credentials")
    );

    // A Terminating Bucket whose cleanup fails (the pool's login names no role) says so.
    apply(
        &secrets,
        "login",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "login"},
               "stringData": {"username": "no-such-role", "password": "unused-with-trust-auth"}}),
    )
    .await;
    buckets.delete("x", &DeleteParams::default()).await.unwrap();
    let message = eventually(wait(), "Bucket x CleanupFailed", || async {
        let (status, reason, message) = condition(&buckets.get("x").await.ok()?, "Ready")?;
        (status == "False" && reason == "CleanupFailed").then_some(message)
    })
    .await;
    assert!(message.contains("no-such-role"), "{message}");
    assert!(
        events_of(&client, ns, "x")
            .await
            .iter()
            .any(|(type_, reason, _)| type_ == "Warning" && reason == "CleanupFailed")
    );
}

async fn bucket_features(plane: std::sync::Arc<ControlPlane>) {
    let ns = "lakes";
    // New Buckets get `<namespace>-<name>-<hash>` (crd::default_bucket_name).
    let named = |name: &str| pgvs3_operator::crd::default_bucket_name(ns, name);
    let client = namespace(&plane, ns).await;
    let (url, gateway) = served_pool(&plane, &client, ns).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let catalog = sql(&url).await;
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), ns);
    let bucket = |name: &str, spec: serde_json::Value| json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": name}, "spec": spec});

    // Notifications: a PUT under the rule's prefix through the gateway enqueues one job in the
    // rule's OJS queue, in the write's transaction; a PUT elsewhere enqueues none.
    apply(
        &buckets,
        "uploads",
        bucket(
            "uploads",
            json!({"gatewayPoolRef": "objects", "notifications": [
                {"id": "csv", "target": "arn:pgvs3:ojs:::csv-uploads", "events": ["s3:ObjectCreated:*"],
                 "prefix": "in/", "suffix": ".csv"}]}),
        ),
    )
    .await;
    bucket_ready(&buckets, "uploads").await;
    let uploads = secrets.get("uploads-credentials").await.unwrap();
    put(&gateway, &uploads, "in/a.csv").await.unwrap();
    put(&gateway, &uploads, "out/b.csv").await.unwrap();
    let jobs: Vec<(String, serde_json::Value)> = catalog
        .query("SELECT type, envelope FROM ojs.jobs WHERE queue = 'csv-uploads'", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get("type"), row.get("envelope")))
        .collect();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].0, "s3.object.created");
    let record = jobs[0].1["args"].to_string();
    assert!(
        record.contains("in/a.csv") && record.contains(&named("uploads")),
        "{record}"
    );

    // A webhook target the database does not know: Ready says so, and nothing is written; once
    // the target is registered, the next look provisions the Bucket.
    apply(
        &buckets,
        "hooked",
        bucket(
            "hooked",
            json!({"gatewayPoolRef": "objects", "notifications": [
                {"target": "arn:pgvs3:webhook:::audit", "events": ["s3:ObjectRemoved:*"]}]}),
        ),
    )
    .await;
    let (_, _, message) = eventually(wait(), "Bucket hooked refused for its target", || async {
        let hooked = buckets.get("hooked").await.ok()?;
        condition(&hooked, "Ready")
            .filter(|(status, reason, _)| status == "False" && reason == "NotificationTargetUnknown")
    })
    .await;
    assert!(message.contains("arn:pgvs3:webhook:::audit"), "{message}");
    assert_eq!(
        bucket_owner(&catalog, &named("hooked")).await,
        None,
        "nothing half written"
    );
    catalog
        .execute("SELECT pgvs3.put_webhook_target('audit', 'http://127.0.0.1:9/')", &[])
        .await
        .unwrap();
    bucket_ready(&buckets, "hooked").await;
    let stored: serde_json::Value = catalog
        .query_one(
            "SELECT notifications FROM pgvs3.buckets WHERE name = $1",
            &[&named("hooked")],
        )
        .await
        .unwrap()
        .get("notifications");
    assert_eq!(stored["rules"][0]["webhook"], "audit", "{stored}");
    assert_eq!(stored["rules"][0]["id"], "notification-1", "{stored}");

    // A key limited to a prefix: it writes, reads and lists under it, and is AccessDenied
    // anywhere else in its own bucket.
    apply(
        &buckets,
        "scoped",
        bucket(
            "scoped",
            json!({"gatewayPoolRef": "objects", "accessPrefixes": ["team/"]}),
        ),
    )
    .await;
    bucket_ready(&buckets, "scoped").await;
    let scoped = secrets.get("scoped-credentials").await.unwrap();
    put(&gateway, &scoped, "team/a").await.unwrap();
    let refused = put(&gateway, &scoped, "other/b").await.unwrap_err();
    assert!(refused.contains("AccessDenied"), "{refused}");
    let s3 = gateway.client(
        &secret_text(&scoped, "AWS_ACCESS_KEY_ID"),
        &secret_text(&scoped, "AWS_SECRET_ACCESS_KEY"),
    );
    let read = s3.get_object().bucket(named("scoped")).key("team/a").send().await;
    assert!(read.is_ok(), "{read:?}");
    let listed = s3
        .list_objects_v2()
        .bucket(named("scoped"))
        .prefix("team/")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.key_count(), Some(1));
    let everything = s3.list_objects_v2().bucket(named("scoped")).send().await.unwrap_err();
    assert_eq!(everything.into_service_error().meta().code(), Some("AccessDenied"));
    // Dropping the prefixes detaches the policy: the key owns its whole bucket again.
    apply(
        &buckets,
        "scoped",
        bucket("scoped", json!({"gatewayPoolRef": "objects"})),
    )
    .await;
    eventually(wait(), "the key's policy detached", || async {
        put(&gateway, &scoped, "other/b").await.ok()
    })
    .await;

    // A DuckLake: the Secret's ATTACH names the bucket's files at the pool's endpoint, with the
    // Bucket's own key, and the catalog database without credentials of its own.
    apply(
        &buckets,
        "lake",
        bucket(
            "lake",
            json!({"gatewayPoolRef": "objects", "ducklake": {"enabled": true, "alias": "sales"}}),
        ),
    )
    .await;
    bucket_ready(&buckets, "lake").await;
    let lake = secrets.get("lake-credentials").await.unwrap();
    let attach = secret_text(&lake, "DUCKLAKE_ATTACH");
    let (host, port, database, _) = database_parts(&url);
    for expected in [
        format!("DATA_PATH 's3://{}/'", named("lake")),
        "ENDPOINT 'objects.lakes.svc:9000'".to_string(),
        format!("KEY_ID '{}'", secret_text(&lake, "AWS_ACCESS_KEY_ID")),
        format!("SECRET '{}'", secret_text(&lake, "AWS_SECRET_ACCESS_KEY")),
        format!("ducklake:postgres:host={host} port={port} dbname={database} sslmode=prefer"),
        "AS sales (".to_string(),
    ] {
        assert!(attach.contains(&expected), "{expected} in {attach}");
    }
    assert!(!attach.contains("password"), "{attach}");
    assert_eq!(secret_text(&lake, "DUCKLAKE_CATALOG_SECRET"), "login");
    // Disabled again, the Secret drops it.
    apply(&buckets, "lake", bucket("lake", json!({"gatewayPoolRef": "objects"}))).await;
    eventually(wait(), "DUCKLAKE_ATTACH removed", || async {
        let lake = secrets.get("lake-credentials").await.ok()?;
        (!lake.data?.contains_key("DUCKLAKE_ATTACH")).then_some(())
    })
    .await;
}

/// The `(status, reason, message)` of a condition of a Bucket.
fn condition(bucket: &Bucket, type_: &str) -> Option<(String, String, String)> {
    let status = bucket.status.as_ref()?;
    let c = status.conditions.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn namespace(plane: &ControlPlane, name: &str) -> Client {
    plane.kubectl(&["create", "namespace", name]);
    plane.admin.clone()
}

async fn bucket_ready(buckets: &Api<Bucket>, name: &str) -> Bucket {
    eventually(wait(), &format!("Bucket {name} Ready"), || async {
        let bucket = buckets.get(name).await.ok()?;
        (condition(&bucket, "Ready")?.0 == "True").then_some(bucket)
    })
    .await
}

async fn bucket_owner(sql: &tokio_postgres::Client, name: &str) -> Option<Option<String>> {
    sql.query_opt("SELECT owner FROM pgvs3.buckets WHERE name = $1", &[&name])
        .await
        .unwrap()
        .map(|row| row.get("owner"))
}

async fn sql(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The audit log's requests made as the operator's ServiceAccount, each once.
fn operator_requests(plane: &ControlPlane) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(plane.run_dir.join("audit.log")).unwrap();
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| {
            // A watch is logged when its response starts; it completes only when it ends.
            (event["stage"] == "ResponseComplete" || (event["verb"] == "watch" && event["stage"] == "ResponseStarted"))
                && event["user"]["username"] == "system:serviceaccount:pgvs3-system:pgvs3-operator"
        })
        .collect()
}

/// What the operator asks of the API server, from the audit log: its User-Agent, and no
/// request repeated per reconcile for what it already knows (a 404 DELETE of an HPA the pool
/// never had, a read of the ServiceMonitor CRD).
async fn requests_in_the_audit_log(plane: std::sync::Arc<ControlPlane>) {
    let ns = "audited";
    let client = namespace(&plane, ns).await;
    let url = common::fresh_database().await;
    primary_pool(&client, ns, "objects", &url).await;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    let status_patches = || {
        operator_requests(&plane)
            .into_iter()
            .filter(|e| {
                e["verb"] == "patch"
                    && e["objectRef"]["namespace"] == ns
                    && e["objectRef"]["resource"] == "gatewaypools"
                    && e["objectRef"]["subresource"] == "status"
            })
            .count()
    };
    eventually(wait(), "the pool's first status", || async {
        (status_patches() > 0).then_some(())
    })
    .await;
    // Each annotation change is a watch event, so a reconcile (and a status patch).
    for round in 0..3 {
        let before = status_patches();
        pools
            .patch(
                "objects",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"test/round": round.to_string()}}})),
            )
            .await
            .unwrap();
        eventually(wait(), "a reconcile of the annotated pool", || async {
            (status_patches() > before).then_some(())
        })
        .await;
    }

    // A Bucket gets its finalizer by patch (no gateway migrated this database's catalog, so it
    // goes no further; removing the finalizer is asserted in bucket.rs).
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), ns);
    apply(
        &buckets,
        "logged",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "logged"},
               "spec": {"gatewayPoolRef": "objects"}}),
    )
    .await;
    eventually(wait(), "the Bucket's finalizer", || async {
        (!buckets.get("logged").await.ok()?.finalizers().is_empty()).then_some(())
    })
    .await;

    let requests = operator_requests(&plane);
    assert!(
        requests.len() > 10,
        "{} operator requests in the audit log",
        requests.len()
    );
    let agents: std::collections::BTreeSet<&str> = requests
        .iter()
        .map(|e| e["userAgent"].as_str().unwrap_or_default())
        .collect();
    assert!(
        agents.iter().all(|agent| agent.starts_with("pgvs3-operator/")),
        "User-Agents of the operator's requests: {agents:?}"
    );
    // Every write of its own names the field manager, Events' included.
    let unnamed: Vec<&str> = requests
        .iter()
        .filter(|e| e["verb"] == "patch" || (e["verb"] == "create" && e["objectRef"]["resource"] == "events"))
        .map(|e| e["requestURI"].as_str().unwrap_or_default())
        .filter(|uri| !uri.contains("fieldManager=pgvs3-operator"))
        .collect();
    assert!(unnamed.is_empty(), "patches without the field manager: {unnamed:?}");
    // No watch of every Secret in the cluster: those it writes are selected by its
    // `managed-by` label, those resources refer to by `pgvs3.io/reload=true`.
    let secret_watches: Vec<&str> = requests
        .iter()
        .filter(|e| e["verb"] == "watch" && e["objectRef"]["resource"] == "secrets")
        .map(|e| e["requestURI"].as_str().unwrap_or_default())
        .collect();
    let selecting = |selector: &str| secret_watches.iter().filter(|uri| uri.contains(selector)).count();
    let own = selecting("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dpgvs3-operator");
    let reloaded = selecting("labelSelector=pgvs3.io%2Freload%3Dtrue");
    assert!(
        own >= 2 && reloaded >= 2 && own + reloaded == secret_watches.len(),
        "Secret watches: {secret_watches:#?}"
    );
    let secret_lists: Vec<&str> = requests
        .iter()
        .filter(|e| e["verb"] == "list" && e["objectRef"]["resource"] == "secrets")
        .map(|e| e["requestURI"].as_str().unwrap_or_default())
        .filter(|uri| !uri.contains("labelSelector="))
        .collect();
    assert!(secret_lists.is_empty(), "unselected Secret lists: {secret_lists:#?}");
    // Nor of every Deployment, PodDisruptionBudget, HPA or ServiceMonitor: only the pools'
    // children, by the `managed-by` label (review finding 6).
    let unselected: Vec<&str> = requests
        .iter()
        .filter(|e| {
            matches!(e["verb"].as_str(), Some("watch" | "list"))
                && matches!(
                    e["objectRef"]["resource"].as_str(),
                    Some("deployments" | "poddisruptionbudgets" | "horizontalpodautoscalers" | "servicemonitors")
                )
        })
        .map(|e| e["requestURI"].as_str().unwrap_or_default())
        .filter(|uri| !uri.contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dpgvs3-operator"))
        .collect();
    assert!(unselected.is_empty(), "unselected watches of children: {unselected:#?}");
    let hpa_deletes = requests
        .iter()
        .filter(|e| {
            e["verb"] == "delete"
                && e["objectRef"]["resource"] == "horizontalpodautoscalers"
                && e["objectRef"]["namespace"] == ns
        })
        .count();
    assert!(
        hpa_deletes <= 1,
        "{hpa_deletes} HPA DELETEs over 4 reconciles of a pool without one"
    );
    let crd_reads: Vec<&str> = requests
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "customresourcedefinitions")
        .map(|e| e["requestURI"].as_str().unwrap_or_default())
        .collect();
    assert!(crd_reads.is_empty(), "the operator read CRDs: {crd_reads:?}");
    // The log covers the whole tier, which can outlast the recheck interval on a loaded
    // machine: what must hold is that no two discoveries come closer than it.
    let mut discoveries: Vec<k8s_openapi::jiff::Timestamp> = requests
        .iter()
        .filter(|e| e["requestURI"] == "/apis/monitoring.coreos.com/v1")
        .map(|e| e["requestReceivedTimestamp"].as_str().unwrap().parse().unwrap())
        .collect();
    discoveries.sort();
    let recheck =
        k8s_openapi::jiff::SignedDuration::try_from(pgvs3_operator::context::SERVICE_MONITOR_RECHECK).unwrap();
    let early: Vec<_> = discoveries
        .windows(2)
        .filter(|pair| pair[1].duration_since(pair[0]) < recheck)
        .collect();
    assert!(
        !discoveries.is_empty() && early.is_empty(),
        "ServiceMonitor discoveries within its recheck interval of the one before: {early:?} (all: {discoveries:?})"
    );
}

/// GatewayPool → Deployment, Service, master key Secret; Buckets of each access mode and
/// deletion policy, their keys used against a gateway process; a defaulted name too long for S3.
async fn pool_and_buckets(plane: std::sync::Arc<ControlPlane>) {
    let ns = "team";
    let client = namespace(&plane, ns).await;
    let url = common::fresh_database().await;
    let pool = primary_pool(&client, ns, "objects", &url).await;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment = eventually(wait(), "the pool's Deployment", || async {
        deployments.get_opt("objects").await.unwrap()
    })
    .await;
    assert_eq!(deployment.spec.as_ref().unwrap().replicas, Some(2));
    let owner = &deployment.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("GatewayPool", pool.uid().unwrap().as_str())
    );
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let service = eventually(wait(), "the pool's Service", || async {
        services.get_opt("objects").await.unwrap()
    })
    .await;
    let ports: Vec<i32> = service.spec.unwrap().ports.unwrap().iter().map(|p| p.port).collect();
    assert!(ports.contains(&9000), "{ports:?}");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let master = eventually(wait(), "the pool's master key Secret", || async {
        secrets.get_opt("objects-pgvs3-master-key").await.unwrap()
    })
    .await;
    let master_key = secret_text(&master, "masterKey");
    assert!(master_key.len() >= 32, "a generated master key");
    // kube-controller-manager's Deployment controller acts on what the operator applied.
    eventually(wait(), "a ReplicaSet of the pool", || async {
        let replica_sets = plane.kubectl(&["get", "replicasets", "-n", ns, "-o", "name"]);
        replica_sets.contains("replicaset.apps/objects-").then_some(())
    })
    .await;

    let gateway = Gateway::start(&plane.run_dir, "team", &url, &master_key).await;
    let catalog = sql(&url).await;
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), ns);
    for (name, spec) in [
        (
            "photos",
            json!({"gatewayPoolRef": "objects", "deletionPolicy": "Delete"}),
        ),
        (
            "archive",
            json!({"gatewayPoolRef": "objects", "bucketName": "team-archive", "access": "ReadOnly"}),
        ),
        (
            "limited",
            json!({"gatewayPoolRef": "objects", "quota": {"maxBytes": 10}}),
        ),
        (
            // `team-` and this name are 68 characters: no valid bucket name as they are.
            "a-bucket-name-long-enough-to-overflow-the-sixty-three-limit",
            json!({"gatewayPoolRef": "objects"}),
        ),
        (
            // 65 characters: no label value either (defect 7).
            LABEL_OVERFLOW,
            json!({"gatewayPoolRef": "objects"}),
        ),
    ] {
        apply(
            &buckets,
            name,
            json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": name}, "spec": spec}),
        )
        .await;
    }

    // In the catalog, but no gateway of the pool is available yet: not Ready, and says why.
    let message = eventually(wait(), "Bucket photos waiting for its pool", || async {
        let (status, reason, message) = condition(&buckets.get("photos").await.ok()?, "Ready")?;
        (status == "False" && reason == "PoolNotReady").then_some(message)
    })
    .await;
    assert!(
        message.contains("is in the catalog") && message.contains("GatewayPool objects is not Ready (Progressing"),
        "{message}"
    );
    gateways_ready(&client, ns, "objects").await;

    // Read-write with deletion policy Delete.
    let photos = bucket_ready(&buckets, "photos").await;
    let status = photos.status.clone().unwrap();
    // A default name: namespace, name and a hash of both.
    let photos_name = pgvs3_operator::crd::default_bucket_name("team", "photos");
    assert!(photos_name.starts_with("team-photos-"), "{photos_name}");
    assert_eq!(status.bucket_name.as_ref(), Some(&photos_name));
    assert_eq!(status.endpoint.as_deref(), Some("http://objects.team.svc:9000"));
    let credentials = secrets.get("photos-credentials").await.unwrap();
    assert_eq!(credentials.owner_references()[0].uid, photos.uid().unwrap());
    let key_id = secret_text(&credentials, "AWS_ACCESS_KEY_ID");
    assert_eq!(status.access_key_id.as_deref(), Some(key_id.as_str()));
    put(&gateway, &credentials, "a.txt").await.unwrap();
    assert_eq!(bucket_owner(&catalog, &photos_name).await, Some(Some(key_id.clone())));

    // Read-only: the key reads the bucket but cannot write it.
    bucket_ready(&buckets, "archive").await;
    let archive = secrets.get("archive-credentials").await.unwrap();
    let refused = put(&gateway, &archive, "x").await.unwrap_err();
    assert!(refused.contains("AccessDenied"), "{refused}");
    let reader = gateway.client(
        &secret_text(&archive, "AWS_ACCESS_KEY_ID"),
        &secret_text(&archive, "AWS_SECRET_ACCESS_KEY"),
    );
    let listed = reader.list_objects_v2().bucket("team-archive").send().await;
    assert!(listed.is_ok(), "a read-only key lists: {listed:?}");

    // The quota, enforced by the gateway: 5 bytes fit, 20 more do not.
    bucket_ready(&buckets, "limited").await;
    let limited = secrets.get("limited-credentials").await.unwrap();
    put(&gateway, &limited, "small").await.unwrap();
    let over = gateway
        .client(
            &secret_text(&limited, "AWS_ACCESS_KEY_ID"),
            &secret_text(&limited, "AWS_SECRET_ACCESS_KEY"),
        )
        .put_object()
        .bucket(pgvs3_operator::crd::default_bucket_name("team", "limited"))
        .key("large")
        .body(ByteStream::from_static(&[b'x'; 20]))
        .send()
        .await
        .unwrap_err();
    let over = format!("{:?}", over.into_service_error());
    assert!(over.contains("BucketQuotaExceeded"), "{over}");

    // An OriginCache: its catalog row holds the spec and the origin's credentials.
    apply(
        &secrets,
        "origin",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "origin"},
               "stringData": {"AWS_ACCESS_KEY_ID": "ORIGINKEY", "AWS_SECRET_ACCESS_KEY": "origin-secret"}}),
    )
    .await;
    let caches: Api<pgvs3_operator::crd::OriginCache> = Api::namespaced(client.clone(), ns);
    apply(
        &caches,
        "mirror",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "OriginCache", "metadata": {"name": "mirror"},
               "spec": {"gatewayPoolRef": "objects", "credentialsSecretRef": "origin", "bucket": "team-mirror",
                        "mode": "WriteThrough",
                        "origin": {"endpoint": "http://origin.example:9000", "bucket": "upstream"}}}),
    )
    .await;
    eventually(wait(), "the OriginCache Ready", || async {
        let cache = caches.get("mirror").await.ok()?;
        let ready = cache.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        (ready.status == "True").then_some(())
    })
    .await;
    let row = catalog
        .query_one(
            "SELECT o.endpoint, o.origin_bucket, o.access_key, o.mode FROM pgvs3.origins o
             JOIN pgvs3.buckets b ON b.id = o.bucket_id WHERE b.name = 'team-mirror'",
            &[],
        )
        .await
        .unwrap();
    let row: (String, String, String, String) = (
        row.get("endpoint"),
        row.get("origin_bucket"),
        row.get("access_key"),
        row.get("mode"),
    );
    assert_eq!(
        row,
        (
            "http://origin.example:9000".to_string(),
            "upstream".to_string(),
            "ORIGINKEY".to_string(),
            "write-through".to_string()
        )
    );

    // Defect 2: the defaulted name is derived (valid, hashed), not refused by the catalog.
    let long = bucket_ready(&buckets, "a-bucket-name-long-enough-to-overflow-the-sixty-three-limit").await;
    let derived = long.status.unwrap().bucket_name.unwrap();
    assert!(
        derived.len() <= 63 && derived.starts_with("team-a-bucket-name-long"),
        "{derived}"
    );
    assert!(pgvs3_operator::crd::valid_bucket_name(&derived), "{derived}");
    let long_secret = secrets
        .get("a-bucket-name-long-enough-to-overflow-the-sixty-three-limit-credentials")
        .await
        .unwrap();
    put(&gateway, &long_secret, "k").await.unwrap();

    // Issue 31, defect 7: a name longer than a label value still gets its Secret and status.
    bucket_ready(&buckets, LABEL_OVERFLOW).await;
    let overflow = secrets.get(&format!("{LABEL_OVERFLOW}-credentials")).await.unwrap();
    let label = &overflow.labels()["pgvs3.io/bucket"];
    assert!(label.len() <= 63 && label.starts_with("a-bucket-whose-name"), "{label}");
    put(&gateway, &overflow, "k").await.unwrap();

    // Defect 5 for a Bucket's Secret: orphaned with its Bucket, re-adopted by the new one.
    let long_name = "a-bucket-name-long-enough-to-overflow-the-sixty-three-limit";
    let long_secret_name = format!("{long_name}-credentials");
    buckets.delete(long_name, &DeleteParams::orphan()).await.unwrap();
    eventually(wait(), "the Secret orphaned", || async {
        let secret = secrets.get(&long_secret_name).await.ok()?;
        (buckets.get_opt(long_name).await.unwrap().is_none() && secret.owner_references().is_empty()).then_some(())
    })
    .await;
    apply(
        &buckets,
        long_name,
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": long_name},
               "spec": {"gatewayPoolRef": "objects"}}),
    )
    .await;
    let again = bucket_ready(&buckets, long_name).await;
    let readopted = eventually(wait(), "the Secret re-adopted", || async {
        let secret = secrets.get(&long_secret_name).await.ok()?;
        (secret.owner_references().first()?.uid == again.uid().unwrap()).then_some(secret)
    })
    .await;
    put(&gateway, &readopted, "after-readoption").await.unwrap();

    // Deletion policies: Delete drops the bucket and revokes the key; Retain keeps the bucket
    // (held by the custodian key of the Bucket's namespace and name) and revokes the key.
    buckets.delete("photos", &DeleteParams::default()).await.unwrap();
    buckets.delete("archive", &DeleteParams::default()).await.unwrap();
    eventually(wait(), "both Buckets gone", || async {
        let left = buckets.list(&Default::default()).await.unwrap();
        (!left
            .items
            .iter()
            .any(|b| b.name_any() == "photos" || b.name_any() == "archive"))
        .then_some(())
    })
    .await;
    assert_eq!(bucket_owner(&catalog, &photos_name).await, None, "Delete dropped it");
    let custodian = bucket_owner(&catalog, "team-archive").await.flatten();
    assert!(
        custodian.as_deref().is_some_and(|key| key.starts_with("PGVS3R")),
        "Retain kept it, held for team/archive: {custodian:?}"
    );
    let keys: i64 = catalog
        .query_one(
            "SELECT count(*) AS keys FROM pgvs3.access_keys WHERE access_key = ANY($1)",
            &[&vec![key_id, secret_text(&archive, "AWS_ACCESS_KEY_ID")]],
        )
        .await
        .unwrap()
        .get("keys");
    assert_eq!(keys, 0, "both keys revoked");
    // The credentials Secrets go with their Buckets (garbage collection by owner reference).
    eventually(wait(), "the credentials Secrets collected", || async {
        (secrets.get_opt("photos-credentials").await.unwrap().is_none()
            && secrets.get_opt("archive-credentials").await.unwrap().is_none())
        .then_some(())
    })
    .await;

    // The web console switched on: its address for the gateways, a container port and a
    // Service port `console` (9091: 9090 is the admin port's).
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    pools
        .patch(
            "objects",
            &PatchParams::apply("pgvs3-tests"),
            &Patch::Merge(json!({"spec": {"console": {"enabled": true}}})),
        )
        .await
        .unwrap();
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    eventually(
        wait(),
        "the console in the ConfigMap, the Deployment and the Service",
        || async {
            let config = configs.get("objects-config").await.ok()?.data?;
            let deployment = deployments.get("objects").await.ok()?;
            let container = &deployment.spec?.template.spec?.containers[0];
            let container_port = container
                .ports
                .iter()
                .flatten()
                .any(|p| p.name.as_deref() == Some("console") && p.container_port == 9091);
            let service = services.get("objects").await.ok()?;
            let service_port = service
                .spec?
                .ports?
                .iter()
                .any(|p| p.name.as_deref() == Some("console") && p.port == 9091);
            (config.get("PGVS3_CONSOLE_ADDR").map(String::as_str) == Some("0.0.0.0:9091")
                && container_port
                && service_port)
                .then_some(())
        },
    )
    .await;

    // The admin port (/metrics, /readyz) only on a ClusterIP Service of its own (review
    // finding 5), never on the clients' Service.
    let port_names = |service: &Service| -> Vec<String> {
        let ports = service.spec.as_ref().unwrap().ports.as_ref().unwrap();
        ports.iter().map(|p| p.name.clone().unwrap()).collect()
    };
    let admin = services.get("objects-admin").await.unwrap();
    assert_eq!(port_names(&admin), ["admin"]);
    assert_eq!(admin.spec.as_ref().unwrap().type_.as_deref(), Some("ClusterIP"));
    let clients = services.get("objects").await.unwrap();
    assert!(!port_names(&clients).contains(&"admin".to_string()), "{clients:?}");
}

/// The `(status, reason, message)` of a pool's Ready condition.
fn pool_ready(pool: &GatewayPool) -> Option<(String, String, String)> {
    let c = pool.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until the pool's Deployment, Service, ConfigMap and PodDisruptionBudget name `uid` as
/// their controller.
async fn children_owned_by(client: &Client, ns: &str, pool: &str, uid: &str) {
    let owner = |refs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference]| {
        refs.iter().any(|r| r.uid == uid && r.controller == Some(true))
    };
    eventually(wait(), &format!("{pool}'s children owned by {uid}"), || async {
        let deployment = Api::<Deployment>::namespaced(client.clone(), ns)
            .get_opt(pool)
            .await
            .ok()??;
        let service = Api::<Service>::namespaced(client.clone(), ns)
            .get_opt(pool)
            .await
            .ok()??;
        let config = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_opt(&format!("{pool}-config"))
            .await
            .ok()??;
        let budget = Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
            .get_opt(pool)
            .await
            .ok()??;
        (owner(deployment.owner_references())
            && owner(service.owner_references())
            && owner(config.owner_references())
            && owner(budget.owner_references()))
        .then_some(())
    })
    .await;
}

/// Waits until the operator has written nothing in `ns` for a second.
async fn quiet(plane: &ControlPlane, ns: &str) {
    let writes = || {
        operator_requests(plane)
            .iter()
            .filter(|e| {
                e["objectRef"]["namespace"] == ns && !matches!(e["verb"].as_str(), Some("get" | "list" | "watch"))
            })
            .count()
    };
    let deadline = tokio::time::Instant::now() + wait();
    let mut last = writes();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = writes();
        if now == last {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the operator done with {ns} within {:?}",
            wait()
        );
        last = now;
    }
}

/// Defect 5: a pool deleted with orphan propagation and created again re-adopts its children,
/// under `OwnerReferencesPermissionEnforcement` and the chart's RBAC.
async fn orphan_readoption(plane: std::sync::Arc<ControlPlane>) {
    let ns = "adopt";
    let client = namespace(&plane, ns).await;
    let url = common::fresh_database().await;
    let first = primary_pool(&client, ns, "objects", &url).await;
    children_owned_by(&client, ns, "objects", &first.uid().unwrap()).await;
    // No waiting for the operator to be done with the new pool: a reconcile still running when
    // the orphaning delete lands (one the Deployment's status updates started, on the cached
    // pool) must not put back the owner reference the collector removed (adoption_races).
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    pools.delete("objects", &DeleteParams::orphan()).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    eventually(wait(), "the children orphaned", || async {
        let deployment = deployments.get_opt("objects").await.ok()??;
        (pools.get_opt("objects").await.unwrap().is_none() && deployment.owner_references().is_empty()).then_some(())
    })
    .await;
    let second = primary_pool(&client, ns, "objects", &url).await;
    assert_ne!(first.uid(), second.uid());
    children_owned_by(&client, ns, "objects", &second.uid().unwrap()).await;
    let pool = eventually(wait(), "the new pool's status", || async {
        let pool = pools.get("objects").await.ok()?;
        pool_ready(&pool).map(|_| pool)
    })
    .await;
    let (_, reason, message) = pool_ready(&pool).unwrap();
    assert_eq!(reason, "Progressing", "{message}");
}

/// The garbage collector's races with a reconcile whose copy of its resource predates an
/// orphaning delete (`kube_ops::apply`): an owner reference the collector removed after the
/// child was read is not written back (the write is conditional on the version read), and an
/// orphan is not adopted by an owner that is being deleted (read fresh, not from the cache).
/// The owner here is a ConfigMap held by a finalizer of the test's, so the deletion stays.
async fn adoption_races(plane: std::sync::Arc<ControlPlane>) {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use pgvs3_operator::context::Error;
    use pgvs3_operator::kube_ops;

    let ns = "adoption-races";
    let client = namespace(&plane, ns).await;
    let owners: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let new_owner = || async {
        owners.delete("owner", &DeleteParams::default()).await.ok();
        eventually(wait(), "the old owner gone", || async {
            owners.get_opt("owner").await.unwrap().is_none().then_some(())
        })
        .await;
        apply(
            &owners,
            "owner",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "owner", "finalizers": ["test.pgvs3.io/hold"]}}),
        )
        .await;
        owners.get("owner").await.unwrap()
    };
    let child = |owner: &ConfigMap| {
        let mut child: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "child", "namespace": ns, "labels": {
                "app.kubernetes.io/managed-by": kube_ops::FIELD_MANAGER, "pgvs3.io/bucket": "owner"}},
            "stringData": {"key": "value"}}))
        .unwrap();
        child.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: owner.uid().unwrap(),
            controller: Some(true),
            block_owner_deletion: None,
        }]);
        child
    };
    let release = || async {
        owners
            .patch(
                "owner",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
    };
    let owner_uids = || async {
        let child = secrets.get("child").await.unwrap();
        child
            .owner_references()
            .iter()
            .map(|r| r.uid.clone())
            .collect::<Vec<_>>()
    };

    let first = new_owner().await;
    kube_ops::apply(&secrets, &child(&first)).await.unwrap();
    assert_eq!(owner_uids().await, vec![first.uid().unwrap()]);

    // The collector's orphaning lands between the read and the write: the write is refused,
    // and judged again it is an orphan whose owner is being deleted.
    let read = secrets.get("child").await.unwrap();
    owners.delete("owner", &DeleteParams::orphan()).await.unwrap();
    secrets
        .patch(
            "child",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": null}})),
        )
        .await
        .unwrap();
    let refused = kube_ops::apply_judged(&secrets, &child(&first), "Secret", Some(read)).await;
    assert!(
        matches!(&refused, Err(Error::Kube(kube::Error::Api(status))) if status.code == 409),
        "{refused:?}"
    );
    assert_eq!(owner_uids().await, Vec::<String>::new());
    let again = kube_ops::apply(&secrets, &child(&first)).await;
    assert!(matches!(&again, Err(Error::OwnerGone(_))), "{again:?}");
    assert_eq!(owner_uids().await, Vec::<String>::new());
    release().await;

    // A new owner of the same name adopts the orphan.
    let second = new_owner().await;
    assert_ne!(first.uid(), second.uid());
    kube_ops::apply(&secrets, &child(&second)).await.unwrap();
    assert_eq!(owner_uids().await, vec![second.uid().unwrap()]);
    release().await;
}

/// Defect 5's second half: a child the API server refuses (422 from validation, 403 from a
/// ResourceQuota) still gives the pool a status, naming the child and the server's message.
async fn children_refused(plane: std::sync::Arc<ControlPlane>) {
    let url = common::fresh_database().await;
    let invalid_ns = "refused-invalid";
    let client = namespace(&plane, invalid_ns).await;
    primary_pool(&client, invalid_ns, "objects", &url).await;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), invalid_ns);
    // The CRD takes any quantities; the Deployment's validation refuses requests over limits.
    pools
        .patch(
            "objects",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}})),
        )
        .await
        .unwrap();
    let message = eventually(wait(), "the pool says its Deployment was refused", || async {
        let (status, reason, message) = pool_ready(&pools.get("objects").await.ok()?)?;
        (status == "False" && reason == "ApplyFailed").then_some(message)
    })
    .await;
    assert!(
        message.starts_with("Deployment objects: ")
            && message.contains("must be less than or equal to cpu limit")
            && message.contains("422"),
        "{message}"
    );

    let quota_ns = "refused-quota";
    let client = namespace(&plane, quota_ns).await;
    plane.kubectl_stdin(
        &["apply", "-n", quota_ns, "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-deployments"},
                "spec": {"hard": {"count/deployments.apps": "0"}}})
        .to_string(),
    );
    // Enforced once kube-controller-manager has computed the quota's usage.
    eventually(wait(), "the quota in force", || async {
        let used = plane.kubectl(&[
            "get",
            "resourcequota",
            "no-deployments",
            "-n",
            quota_ns,
            "-o",
            "jsonpath={.status.used}",
        ]);
        used.contains("count/deployments.apps").then_some(())
    })
    .await;
    primary_pool(&client, quota_ns, "objects", &url).await;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), quota_ns);
    let message = eventually(wait(), "the pool says its Deployment was forbidden", || async {
        let (status, reason, message) = pool_ready(&pools.get("objects").await.ok()?)?;
        (status == "False" && reason == "ApplyFailed").then_some(message)
    })
    .await;
    assert!(
        message.starts_with("Deployment objects: ") && message.contains("exceeded quota") && message.contains("403"),
        "{message}"
    );
    // What was applied before the refusal stays.
    let services: Api<Service> = Api::namespaced(client.clone(), quota_ns);
    assert!(services.get_opt("objects").await.unwrap().is_some());
}

fn checksum(deployment: &Deployment) -> String {
    let template = deployment.spec.as_ref().unwrap().template.metadata.as_ref().unwrap();
    template.annotations.as_ref().unwrap()["pgvs3.io/config-checksum"].clone()
}

/// A pool on CloudNativePG cluster `db` from creation to deletion: waiting for its `-rw`
/// Service, Ready once it exists, an image and replicas update rolled into the Deployment, a
/// scale that does not roll the pods, a rotated password (its Secret labelled
/// `pgvs3.io/reload`) that does, at once; deleted, its children are collected and its master
/// key stays.
async fn pool_lifecycle(plane: std::sync::Arc<ControlPlane>) {
    let ns = "lifecycle";
    let client = namespace(&plane, ns).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let credentials = |password: &str| {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "db-app", "labels": {"pgvs3.io/reload": "true"}},
               "stringData": {"username": "app", "password": password}})
    };
    apply(&secrets, "db-app", credentials("first")).await;
    // CloudNativePG's CA Secret: a pool on a cluster verifies the server against it by default.
    apply(
        &secrets,
        "db-ca",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-ca"},
               "stringData": {"ca.crt": "-----BEGIN CERTIFICATE-----\n"}}),
    )
    .await;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    let pool = |spec: serde_json::Value| json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool", "metadata": {"name": "objects"}, "spec": spec});
    // No kubelet: pods never become ready, so with no replicas the pool can be Ready.
    apply(
        &pools,
        "objects",
        pool(json!({"postgres": {"clusterName": "db"}, "replicas": 0})),
    )
    .await;
    let ready = |expected: &'static str| {
        let pools = pools.clone();
        async move {
            eventually(wait(), &format!("the pool {expected}"), || async {
                let (status, reason, message) = pool_ready(&pools.get("objects").await.ok()?)?;
                (format!("{status} {reason}") == expected).then_some(message)
            })
            .await
        }
    };
    let message = ready("False DatabaseUnavailable").await;
    assert_eq!(message, "PostgreSQL Service db-rw does not exist");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    assert!(
        deployments.get_opt("objects").await.unwrap().is_none(),
        "no gateways meanwhile"
    );
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    apply(
        &services,
        "db-rw",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db-rw"},
               "spec": {"ports": [{"port": 5432}]}}),
    )
    .await;
    let message = ready("True Available").await;
    assert_eq!(message, "0 gateways available on db-rw");

    // Update: a new image and more replicas roll the Deployment's spec.
    apply(
        &pools,
        "objects",
        pool(json!({"postgres": {"clusterName": "db"}, "replicas": 3, "image": "registry.example/pgvs3:v2"})),
    )
    .await;
    let rolled = eventually(wait(), "the Deployment updated", || async {
        let deployment = deployments.get("objects").await.ok()?;
        let spec = deployment.spec.as_ref()?;
        let image = spec.template.spec.as_ref()?.containers[0].image.clone()?;
        (spec.replicas == Some(3) && image == "registry.example/pgvs3:v2").then_some(deployment)
    })
    .await;
    assert_eq!(ready("False Progressing").await, "0 of 3 gateways available");
    // Scale: replicas only, the pods' template (its checksum) unchanged.
    apply(
        &pools,
        "objects",
        pool(json!({"postgres": {"clusterName": "db"}, "replicas": 1, "image": "registry.example/pgvs3:v2"})),
    )
    .await;
    let scaled = eventually(wait(), "the Deployment scaled", || async {
        let deployment = deployments.get("objects").await.ok()?;
        (deployment.spec.as_ref()?.replicas == Some(1)).then_some(deployment)
    })
    .await;
    assert_eq!(checksum(&scaled), checksum(&rolled), "scaling does not roll the pods");
    // Rotation: the labelled Secret is watched, so within a reconcile (not the 5-minute resync).
    apply(&secrets, "db-app", credentials("second")).await;
    eventually(wait(), "the rotated password rolls the pods", || async {
        let deployment = deployments.get("objects").await.ok()?;
        (checksum(&deployment) != checksum(&rolled)).then_some(())
    })
    .await;

    // Delete: garbage collection takes the children; the master key stays.
    pools.delete("objects", &DeleteParams::default()).await.unwrap();
    eventually(wait(), "the pool's children collected", || async {
        let gone = deployments.get_opt("objects").await.ok()?.is_none()
            && services.get_opt("objects").await.ok()?.is_none()
            && Api::<ConfigMap>::namespaced(client.clone(), ns)
                .get_opt("objects-config")
                .await
                .ok()?
                .is_none();
        gone.then_some(())
    })
    .await;
    assert!(secrets.get_opt("db-pgvs3-master-key").await.unwrap().is_some());
}

/// An explicit bucket name the CRD's rules let through but the catalog refuses (a reserved
/// prefix CEL does not list): `InvalidSpec` once, no retries until the spec changes, and the
/// Bucket still deletable.
async fn invalid_bucket_name(plane: std::sync::Arc<ControlPlane>) {
    let ns = "invalid";
    let client = namespace(&plane, ns).await;
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), ns);
    apply(
        &buckets,
        "reserved",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "reserved"},
               "spec": {"gatewayPoolRef": "objects", "bucketName": "amzn-s3-demo-bucket"}}),
    )
    .await;
    let message = eventually(wait(), "the Bucket's InvalidSpec", || async {
        let (status, reason, message) = condition(&buckets.get("reserved").await.ok()?, "Ready")?;
        (status == "False" && reason == "InvalidSpec").then_some(message)
    })
    .await;
    assert!(
        message.contains("\"amzn-s3-demo-bucket\" is not a valid S3 bucket name"),
        "{message}"
    );
    let status_writes = || {
        operator_requests(&plane)
            .iter()
            .filter(|e| {
                e["objectRef"]["namespace"] == ns
                    && e["objectRef"]["resource"] == "buckets"
                    && e["objectRef"]["subresource"] == "status"
            })
            .count()
    };
    // A failing reconcile's backoff (2 s, doubling) would retry twice in this window, each
    // writing the status; what is allowed is the first write and the identical one of the
    // reconcile its own watch event triggers.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let writes = status_writes();
    assert!((1..=2).contains(&writes), "{writes} status writes: no retries");
    buckets.delete("reserved", &DeleteParams::default()).await.unwrap();
    eventually(wait(), "the Bucket deleted", || async {
        buckets.get_opt("reserved").await.unwrap().is_none().then_some(())
    })
    .await;
}

/// Specs the CRDs' schema and CEL rules refuse, server-side (defect 1's empty references too).
async fn cel_rejections(plane: std::sync::Arc<ControlPlane>) {
    let ns = "cel";
    namespace(&plane, ns).await;
    let refused = |manifest: serde_json::Value, expected: &str| {
        let (ok, text) = plane.kubectl_status(&["apply", "--server-side", "-n", ns, "-f", "-"], &manifest.to_string());
        assert!(
            !ok && text.contains(expected),
            "{manifest}\nexpected {expected:?}, got: {text}"
        );
    };
    let bucket = |spec: serde_json::Value| json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "b"}, "spec": spec});
    refused(bucket(json!({"gatewayPoolRef": ""})), "spec.gatewayPoolRef");
    refused(
        bucket(json!({"gatewayPoolRef": "p", "bucketName": "a..b"})),
        "must not contain '..'",
    );
    refused(
        bucket(json!({"gatewayPoolRef": "p", "bucketName": "10.0.0.1"})),
        "nor be an IP address",
    );
    refused(
        bucket(json!({"gatewayPoolRef": "p", "bucketName": "xn--abc"})),
        "reserved prefix",
    );
    refused(
        bucket(json!({"gatewayPoolRef": "p", "bucketName": "UPPER"})),
        "spec.bucketName",
    );
    refused(
        bucket(json!({"gatewayPoolRef": "p", "quota": {"maxBytes": -1}})),
        "spec.quota.maxBytes",
    );
    let cache = |pool: &str, secret: &str| {
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "OriginCache", "metadata": {"name": "c"},
               "spec": {"gatewayPoolRef": pool, "credentialsSecretRef": secret, "bucket": "cache",
                        "origin": {"endpoint": "http://origin.example", "bucket": "o"}}})
    };
    refused(cache("", "creds"), "spec.gatewayPoolRef");
    refused(cache("p", ""), "spec.credentialsSecretRef");
    let pool = |spec: serde_json::Value| json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool", "metadata": {"name": "p"}, "spec": spec});
    refused(
        pool(json!({"postgres": {"clusterName": "db"}, "replicas": 2,
                    "autoscaling": {"minReplicas": 1, "maxReplicas": 3}})),
        "set either replicas or autoscaling, not both",
    );
    refused(
        pool(json!({"postgres": {"clusterName": "db", "host": "h"}})),
        "set exactly one of clusterName or host",
    );
    // The console on the admin port's default, or on S3's: two listeners on one port.
    for console in [
        json!({"enabled": true, "port": 9090}),
        json!({"enabled": true, "port": 9000}),
    ] {
        refused(
            pool(json!({"postgres": {"clusterName": "db"}, "console": console})),
            "console.port must differ from adminPort and the enabled protocols' ports",
        );
    }
    refused(
        pool(json!({"postgres": {"clusterName": "db"}, "protocols": {"ojs": {"enabled": true, "port": 8080}}})),
        "an enabled OJS endpoint needs ojsTokenSecretRef",
    );
    // A pool's own name becomes its Service's: a DNS label (review finding 3).
    for name in ["gw.prod".to_string(), "p".repeat(64)] {
        refused(
            json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool", "metadata": {"name": name},
                   "spec": {"postgres": {"clusterName": "db"}}}),
            "a GatewayPool's name names its Services",
        );
    }
    refused(
        pool(json!({"postgres": {"clusterName": "db"}, "region": "r".repeat(64)})),
        "spec.region",
    );
    refused(
        pool(json!({"postgres": {"clusterName": "db"}, "image": "i".repeat(1025)})),
        "spec.image",
    );
    refused(
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "OriginCache", "metadata": {"name": "c"},
               "spec": {"gatewayPoolRef": "p", "credentialsSecretRef": "creds", "bucket": "cache",
                        "origin": {"endpoint": "http://origin.example", "bucket": "o".repeat(256)}}}),
        "spec.origin.bucket",
    );
    // Immutability is checked against the stored object.
    plane.kubectl_stdin(
        &["apply", "--server-side", "-n", ns, "-f", "-"],
        &bucket(json!({"gatewayPoolRef": "p", "bucketName": "first-name"})).to_string(),
    );
    refused(
        bucket(json!({"gatewayPoolRef": "p", "bucketName": "second-name"})),
        "bucketName is immutable",
    );
    refused(
        bucket(json!({"gatewayPoolRef": "q", "bucketName": "first-name"})),
        "gatewayPoolRef is immutable",
    );
}

/// Defect 1: resources that can never be provisioned (their pool does not exist) carry the
/// finalizer, yet deleting their namespace completes. So it does when their pool exists (and
/// is held for them) but its database never answers: their cleanup gives up once the pool is
/// being deleted too and the grace (`PGVS3_OPERATOR_CLEANUP_GRACE`, 5 s in this tier) passed.
async fn namespace_deletion(plane: std::sync::Arc<ControlPlane>) {
    let ns = "doomed";
    let client = namespace(&plane, ns).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    apply(
        &secrets,
        "login",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "login"},
               "stringData": {"username": "nobody", "password": "never-sent"}}),
    )
    .await;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    apply(
        &pools,
        "unreachable",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool", "metadata": {"name": "unreachable"},
               "spec": {"role": "Primary", "postgres": {"host": "127.0.0.1", "port": 1, "secretRef": "login",
                        "sslMode": "disable", "sendPasswordToUnverifiedServer": true}}}),
    )
    .await;
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), ns);
    apply(
        &buckets,
        "stuck",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "stuck"},
               "spec": {"gatewayPoolRef": "unreachable"}}),
    )
    .await;
    eventually(wait(), "the Bucket says its catalog does not answer", || async {
        let ready = condition(&buckets.get("stuck").await.ok()?, "Ready")?;
        (ready.1 == "CatalogUnavailable").then_some(())
    })
    .await;
    apply(
        &buckets,
        "orphan",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "orphan"},
               "spec": {"gatewayPoolRef": "ghost"}}),
    )
    .await;
    plane.kubectl_stdin(
        &["apply", "--server-side", "-n", ns, "-f", "-"],
        &json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "OriginCache", "metadata": {"name": "cache"},
                "spec": {"gatewayPoolRef": "ghost", "credentialsSecretRef": "creds", "bucket": "doomed-cache",
                         "origin": {"endpoint": "http://origin.example", "bucket": "o"}}})
        .to_string(),
    );
    let waiting = eventually(wait(), "the Bucket says its pool is missing", || async {
        let bucket = buckets.get("orphan").await.ok()?;
        let ready = condition(&bucket, "Ready")?;
        (ready.1 == "PoolNotFound").then_some(bucket)
    })
    .await;
    assert_eq!(waiting.finalizers(), ["pgvs3.io/bucket-cleanup"]);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.delete(ns, &DeleteParams::default()).await.unwrap();
    eventually(wait(), "the namespace is deleted", || async {
        namespaces.get_opt(ns).await.unwrap().is_none().then_some(())
    })
    .await;
}

/// Issue 31 item 8: a TLS pool's Bucket Secret names an `https://` endpoint and carries the CA
/// to trust it (`ca.crt` of the pool's TLS Secret), never the pool's key.
async fn tls_bucket_secret(plane: std::sync::Arc<ControlPlane>) {
    let ns = "tlsbucket";
    let client = namespace(&plane, ns).await;
    let url = common::fresh_database().await;
    primary_pool(&client, ns, "objects", &url).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let ca = "-----BEGIN CERTIFICATE-----\nthe issuer\n-----END CERTIFICATE-----\n";
    apply(
        &secrets,
        "objects-tls",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "objects-tls"},
               "type": "kubernetes.io/tls",
               "stringData": {"tls.crt": "-----BEGIN CERTIFICATE-----\n", "tls.key": "-----BEGIN EC PRIVATE KEY-----\n", "ca.crt": ca}}),
    )
    .await;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    pools
        .patch(
            "objects",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"tls": {"secretRef": "objects-tls"}}})),
        )
        .await
        .unwrap();
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), ns);
    apply(
        &buckets,
        "photos",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "photos"},
               "spec": {"gatewayPoolRef": "objects"}}),
    )
    .await;
    let credentials = eventually(wait(), "the Bucket's Secret with the pool's CA", || async {
        let secret = secrets.get_opt("photos-credentials").await.unwrap()?;
        secret.data.as_ref()?.contains_key("ca.crt").then_some(secret)
    })
    .await;
    assert_eq!(secret_text(&credentials, "ca.crt"), ca);
    assert!(secret_text(&credentials, "AWS_ENDPOINT_URL").starts_with("https://"));
    let keys: Vec<&String> = credentials.data.as_ref().unwrap().keys().collect();
    assert!(
        keys.iter().all(|key| !key.starts_with("tls.")),
        "only the CA, never the pool's certificate or key: {keys:?}"
    );
}

/// Deleting a namespace deletes its pool and the pool's Secrets alongside its Buckets and
/// OriginCaches. The pool and the Secrets of its database are held (finalizer
/// `pgvs3.io/in-use`) until their cleanups ran: the Delete Bucket's bucket is dropped, the
/// Retain Bucket's kept for a Bucket of the same namespace and name, the cache bucket dropped,
/// every key revoked. Before (issue 31 item 8), the pool went first: the keys were revoked
/// through the operator's memory of the pool's last connection, and the buckets left as they
/// were.
async fn namespace_teardown(plane: std::sync::Arc<ControlPlane>) {
    let ns = "teardown";
    let client = namespace(&plane, ns).await;
    let (url, _gateway) = served_pool(&plane, &client, ns).await;
    let catalog = sql(&url).await;
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), ns);
    let mut keys = Vec::new();
    for (name, policy) in [("data", "Retain"), ("scratch", "Delete")] {
        let bucket = json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": name},
                            "spec": {"gatewayPoolRef": "objects", "deletionPolicy": policy}});
        apply(&buckets, name, bucket).await;
        let ready = bucket_ready(&buckets, name).await;
        keys.push(ready.status.unwrap().access_key_id.unwrap());
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    apply(
        &secrets,
        "origin",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "origin"},
               "stringData": {"AWS_ACCESS_KEY_ID": "ORIGINKEY", "AWS_SECRET_ACCESS_KEY": "origin-secret"}}),
    )
    .await;
    let caches: Api<pgvs3_operator::crd::OriginCache> = Api::namespaced(client.clone(), ns);
    apply(
        &caches,
        "mirror",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "OriginCache", "metadata": {"name": "mirror"},
               "spec": {"gatewayPoolRef": "objects", "credentialsSecretRef": "origin", "bucket": "teardown-mirror",
                        "origin": {"endpoint": "http://origin.example:9000", "bucket": "upstream"}}}),
    )
    .await;
    eventually(wait(), "the OriginCache Ready", || async {
        let cache = caches.get("mirror").await.ok()?;
        let ready = cache.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        (ready.status == "True").then_some(())
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.delete(ns, &DeleteParams::default()).await.unwrap();
    eventually(wait(), "the namespace is deleted", || async {
        namespaces.get_opt(ns).await.unwrap().is_none().then_some(())
    })
    .await;
    let left: i64 = catalog
        .query_one(
            "SELECT count(*) AS keys FROM pgvs3.access_keys WHERE access_key = ANY($1)",
            &[&keys],
        )
        .await
        .unwrap()
        .get("keys");
    assert_eq!(
        left, 0,
        "keys of Buckets deleted with their namespace still active: {keys:?}"
    );
    let scratch = pgvs3_operator::crd::default_bucket_name(ns, "scratch");
    assert_eq!(bucket_owner(&catalog, &scratch).await, None, "Delete dropped {scratch}");
    let data = pgvs3_operator::crd::default_bucket_name(ns, "data");
    let custodian = bucket_owner(&catalog, &data).await.flatten();
    assert!(
        custodian.as_deref().is_some_and(|key| key.starts_with("PGVS3R")),
        "Retain kept {data}, held for teardown/data: {custodian:?}"
    );
    assert_eq!(
        bucket_owner(&catalog, "teardown-mirror").await,
        None,
        "the cache bucket dropped"
    );
}

/// A pool some Bucket refers to is not deleted until that Bucket is: it says which in its
/// status, and the Secret of its database credentials is held with it (`pgvs3.io/in-use`).
/// Once the Bucket's cleanup dropped its bucket, the pool goes and the Secret is released.
async fn pool_in_use(plane: std::sync::Arc<ControlPlane>) {
    let ns = "inuse";
    let client = namespace(&plane, ns).await;
    let (url, _gateway) = served_pool(&plane, &client, ns).await;
    let catalog = sql(&url).await;
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), ns);
    apply(
        &buckets,
        "photos",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "photos"},
               "spec": {"gatewayPoolRef": "objects", "deletionPolicy": "Delete"}}),
    )
    .await;
    bucket_ready(&buckets, "photos").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let held = |secret: &Secret| secret.finalizers().iter().any(|f| f == "pgvs3.io/in-use");
    eventually(wait(), "the pool's credentials Secret held", || async {
        held(&secrets.get("login").await.ok()?).then_some(())
    })
    .await;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    pools.delete("objects", &DeleteParams::default()).await.unwrap();
    let message = eventually(wait(), "the pool says what it waits for", || async {
        let (status, reason, message) = pool_ready(&pools.get("objects").await.ok()?)?;
        (status == "False" && reason == "InUse").then_some(message)
    })
    .await;
    assert!(message.contains("Bucket photos"), "{message}");
    eventually(wait(), "an Event saying so", || async {
        let events = events_of(&client, ns, "objects").await;
        events
            .iter()
            .any(|(_, reason, note)| reason == "InUse" && note.contains("Bucket photos"))
            .then_some(())
    })
    .await;
    buckets.delete("photos", &DeleteParams::default()).await.unwrap();
    eventually(wait(), "the pool gone once its Bucket is", || async {
        pools.get_opt("objects").await.unwrap().is_none().then_some(())
    })
    .await;
    let photos = pgvs3_operator::crd::default_bucket_name(ns, "photos");
    assert_eq!(
        bucket_owner(&catalog, &photos).await,
        None,
        "the Bucket's cleanup dropped it"
    );
    eventually(wait(), "the credentials Secret released", || async {
        (!held(&secrets.get("login").await.ok()?)).then_some(())
    })
    .await;
}

/// Defect 3: a catalog that cannot be reached, or refuses, is reported with its cause: the
/// server tried and the database's own message.
async fn database_errors(plane: std::sync::Arc<ControlPlane>) {
    let ns = "dberr";
    let client = namespace(&plane, ns).await;
    let url = common::fresh_database().await;
    let (host, port, _, user) = database_parts(&url);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    apply(
        &secrets,
        "login",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "login"},
               "stringData": {"username": user, "password": "x"}}),
    )
    .await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    for (pool, postgres) in [
        (
            "refused",
            json!({"host": "127.0.0.1", "port": closed, "secretRef": "login", "sendPasswordToUnverifiedServer": true}),
        ),
        (
            "nodb",
            json!({"host": host, "port": port, "database": "no_such_db", "secretRef": "login", "sendPasswordToUnverifiedServer": true}),
        ),
    ] {
        apply(
            &pools,
            pool,
            json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool", "metadata": {"name": pool},
                   "spec": {"role": "Primary", "postgres": postgres}}),
        )
        .await;
    }
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), ns);
    for pool in ["refused", "nodb"] {
        apply(
            &buckets,
            pool,
            json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": pool},
                   "spec": {"gatewayPoolRef": pool}}),
        )
        .await;
    }
    let message = |name: &'static str| {
        let buckets = buckets.clone();
        async move {
            eventually(wait(), &format!("Bucket {name} CatalogUnavailable"), || async {
                let bucket = buckets.get(name).await.ok()?;
                let ready = condition(&bucket, "Ready")?;
                (ready.1 == "CatalogUnavailable").then_some(ready.2)
            })
            .await
        }
    };
    let refused = message("refused").await;
    assert!(
        refused.contains(&format!("127.0.0.1:{closed}")) && refused.contains("refused"),
        "the host tried and why: {refused}"
    );
    let nodb = message("nodb").await;
    assert!(
        nodb.contains("database \"no_such_db\" does not exist") && nodb.contains("3D000"),
        "the database's message: {nodb}"
    );
}

/// A namespace whose pool's database accepts connections and never answers (`nc -lk 5432`), with
/// more Buckets on it than the controller has slots: each Bucket says the database did not
/// answer within the catalog timeout (3 s in this tier), another namespace's Bucket still
/// becomes Ready meanwhile, and the namespace's deletion completes once the cleanup grace has
/// passed. Unbounded, the hung reconciles held every slot and the finalizers forever.
async fn black_hole_database(plane: std::sync::Arc<ControlPlane>) {
    let (port, _held) = control_plane::black_hole().await;
    let ns = "blackhole";
    let client = namespace(&plane, ns).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    apply(
        &secrets,
        "login",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "login"},
               "stringData": {"username": "nobody", "password": "never-answered"}}),
    )
    .await;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    apply(
        &pools,
        "frozen",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool", "metadata": {"name": "frozen"},
               "spec": {"role": "Primary", "postgres": {"host": "127.0.0.1", "port": port, "secretRef": "login",
                        "sslMode": "disable", "sendPasswordToUnverifiedServer": true}}}),
    )
    .await;
    let buckets: Api<Bucket> = Api::namespaced(client.clone(), ns);
    let names: Vec<String> = (0..6).map(|i| format!("hung-{i}")).collect();
    for name in &names {
        apply(
            &buckets,
            name,
            json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": name},
                   "spec": {"gatewayPoolRef": "frozen"}}),
        )
        .await;
    }
    let bystander = "bystander";
    let bystander_client = namespace(&plane, bystander).await;
    let (_url, _gateway) = served_pool(&plane, &bystander_client, bystander).await;
    let served: Api<Bucket> = Api::namespaced(bystander_client.clone(), bystander);
    apply(
        &served,
        "data",
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "data"},
               "spec": {"gatewayPoolRef": "objects"}}),
    )
    .await;
    bucket_ready(&served, "data").await;
    for name in &names {
        let message = eventually(
            wait(),
            &format!("Bucket {name} says its database does not answer"),
            || async {
                let ready = condition(&buckets.get(name).await.ok()?, "Ready")?;
                (ready.1 == "CatalogUnavailable").then_some(ready.2)
            },
        )
        .await;
        assert!(
            message.contains(&format!("127.0.0.1:{port}")) && message.contains("did not answer within 3s"),
            "the status says which database did not answer, and in how long: {message}"
        );
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.delete(ns, &DeleteParams::default()).await.unwrap();
    eventually(wait(), "the namespace is deleted", || async {
        namespaces.get_opt(ns).await.unwrap().is_none().then_some(())
    })
    .await;
}

/// A Bucket's `(type, reason)` Events, from the API server.
async fn events_of(client: &Client, ns: &str, name: &str) -> Vec<(String, String, String)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// Issue 31, defect 1: Buckets of one namespace may not take over the RESP keyspace, a bucket
/// the root key owns (unless an admin marked it adoptable for that namespace), or a bucket
/// another namespace's Bucket retained; each refusal is a condition and a Warning Event, and
/// deleting the refused Bucket under `Delete` drops nothing. A Bucket of the same namespace and
/// name adopts what its predecessor retained.
async fn tenancy(plane: std::sync::Arc<ControlPlane>) {
    let tenant_a_data = pgvs3_operator::crd::default_bucket_name("tenant-a", "data");
    let url = common::fresh_database().await;
    let catalog = sql(&url).await;
    // Two namespaces' pools on one database (one master key, as docs/operator.md asks).
    let a = "tenant-a";
    let client = namespace(&plane, a).await;
    primary_pool(&client, a, "objects", &url).await;
    gateways_ready(&client, a, "objects").await;
    let secrets_a: Api<Secret> = Api::namespaced(client.clone(), a);
    let master = eventually(wait(), "tenant-a's master key", || async {
        secrets_a.get_opt("objects-pgvs3-master-key").await.unwrap()
    })
    .await;
    let master_key = secret_text(&master, "masterKey");
    let b = "tenant-b";
    namespace(&plane, b).await;
    let secrets_b: Api<Secret> = Api::namespaced(client.clone(), b);
    apply(
        &secrets_b,
        "objects-pgvs3-master-key",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "objects-pgvs3-master-key"},
               "stringData": {"masterKey": master_key}}),
    )
    .await;
    primary_pool(&client, b, "objects", &url).await;
    gateways_ready(&client, b, "objects").await;
    // The RESP keyspace `resp` as a gateway serving RESP creates it (owned by the root key;
    // this tier's gateway process serves S3 only), and two buckets an admin made with the
    // root key.
    let gateway = Gateway::start(&plane.run_dir, "tenancy", &url, &master_key).await;
    for name in ["resp", "root-made", "marked"] {
        catalog
            .execute("SELECT pgvs3.ensure_bucket($1)", &[&name])
            .await
            .unwrap();
    }

    // tenant-a's Bucket, retained when deleted.
    let buckets_a: Api<Bucket> = Api::namespaced(client.clone(), a);
    let bucket = |name: &str, spec: serde_json::Value| json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "Bucket", "metadata": {"name": name}, "spec": spec});
    apply(&buckets_a, "data", bucket("data", json!({"gatewayPoolRef": "objects"}))).await;
    bucket_ready(&buckets_a, "data").await;
    let first = secrets_a.get("data-credentials").await.unwrap();
    put(&gateway, &first, "kept.txt").await.unwrap();
    buckets_a.delete("data", &DeleteParams::default()).await.unwrap();
    eventually(wait(), "tenant-a's Bucket gone", || async {
        buckets_a.get_opt("data").await.unwrap().is_none().then_some(())
    })
    .await;
    let custodian = bucket_owner(&catalog, tenant_a_data.as_str()).await.flatten().unwrap();
    assert!(custodian.starts_with("PGVS3R"), "{custodian}");

    // tenant-b reaches for all of them, under deletionPolicy Delete.
    let buckets_b: Api<Bucket> = Api::namespaced(client.clone(), b);
    let grabs = [
        ("grab-resp", "resp", "BucketNotAdoptable"),
        ("grab-root", "root-made", "BucketNotAdoptable"),
        ("grab-a", tenant_a_data.as_str(), "BucketOwnedElsewhere"),
    ];
    for (name, target, _) in grabs {
        apply(
            &buckets_b,
            name,
            bucket(
                name,
                json!({"gatewayPoolRef": "objects", "bucketName": target, "deletionPolicy": "Delete"}),
            ),
        )
        .await;
    }
    for (name, target, expected) in grabs {
        let message = eventually(wait(), &format!("{name} refused"), || async {
            let (status, reason, message) = condition(&buckets_b.get(name).await.ok()?, "Ready")?;
            (status == "False" && reason == expected).then_some(message)
        })
        .await;
        assert!(message.contains(target), "{message}");
        let events = eventually(wait(), &format!("{name}'s Warning Event"), || async {
            let events = events_of(&client, b, name).await;
            events
                .iter()
                .any(|(type_, reason, _)| type_ == "Warning" && reason == expected)
                .then_some(events)
        })
        .await;
        assert!(!events.iter().any(|(_, reason, _)| reason == "Adopted"), "{events:?}");
    }
    assert_eq!(
        bucket_owner(&catalog, "resp").await,
        Some(None),
        "the RESP keyspace stays the root's"
    );
    assert_eq!(bucket_owner(&catalog, "root-made").await, Some(None));
    assert_eq!(
        bucket_owner(&catalog, tenant_a_data.as_str()).await,
        Some(Some(custodian.clone()))
    );
    // Deleting the refused Buckets drops nothing.
    for (name, _, _) in grabs {
        buckets_b.delete(name, &DeleteParams::default()).await.unwrap();
    }
    eventually(wait(), "tenant-b's Buckets gone", || async {
        buckets_b
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    for target in ["resp", "root-made", tenant_a_data.as_str()] {
        assert!(bucket_owner(&catalog, target).await.is_some(), "{target} still exists");
    }

    // The admin's mark: tenant-b may adopt `marked` (but never `resp`, though marked too).
    apply(
        &buckets_b,
        "legacy",
        bucket("legacy", json!({"gatewayPoolRef": "objects", "bucketName": "marked"})),
    )
    .await;
    bucket_ready(&buckets_b, "legacy").await;
    let legacy = secrets_b.get("legacy-credentials").await.unwrap();
    assert_eq!(
        bucket_owner(&catalog, "marked").await,
        Some(Some(secret_text(&legacy, "AWS_ACCESS_KEY_ID")))
    );
    apply(
        &buckets_b,
        "marked-resp",
        bucket(
            "marked-resp",
            json!({"gatewayPoolRef": "objects", "bucketName": "resp"}),
        ),
    )
    .await;
    eventually(wait(), "marked-resp refused", || async {
        let (status, reason, _) = condition(&buckets_b.get("marked-resp").await.ok()?, "Ready")?;
        (status == "False" && reason == "BucketNotAdoptable").then_some(())
    })
    .await;

    // tenant-a's Bucket of the same name, created again, adopts what its predecessor retained.
    apply(&buckets_a, "data", bucket("data", json!({"gatewayPoolRef": "objects"}))).await;
    bucket_ready(&buckets_a, "data").await;
    let again = secrets_a.get("data-credentials").await.unwrap();
    let key = secret_text(&again, "AWS_ACCESS_KEY_ID");
    assert_ne!(key, secret_text(&first, "AWS_ACCESS_KEY_ID"));
    assert_eq!(bucket_owner(&catalog, tenant_a_data.as_str()).await, Some(Some(key)));
    let events = events_of(&client, a, "data").await;
    assert!(events.iter().any(|(_, reason, _)| reason == "Adopted"), "{events:?}");
    let custodians: i64 = catalog
        .query_one(
            "SELECT count(*) AS keys FROM pgvs3.access_keys WHERE access_key = $1",
            &[&custodian],
        )
        .await
        .unwrap()
        .get("keys");
    assert_eq!(custodians, 0, "the custodian key is gone with its bucket");
    let reader = gateway.client(
        &secret_text(&again, "AWS_ACCESS_KEY_ID"),
        &secret_text(&again, "AWS_SECRET_ACCESS_KEY"),
    );
    let kept = eventually(wait(), "the retained object read with the new key", || async {
        let object = reader
            .get_object()
            .bucket(tenant_a_data.as_str())
            .key("kept.txt")
            .send()
            .await
            .ok()?;
        Some(object.body.collect().await.unwrap().into_bytes())
    })
    .await;
    assert_eq!(kept.as_ref(), b"hello");
}

/// Issue 31, defects 2, 3, 4 and 7 on a pool: the CA Secret mounted without its private key;
/// a password no connection string can hold verbatim, passed so the gateway reads it as is;
/// gateways that cannot start named in the pool's status; a Service port edited by hand put
/// back without wedging the rest; children with `blockOwnerDeletion`; empty references refused.
async fn pool_day_two(plane: std::sync::Arc<ControlPlane>) {
    let ns = "daytwo";
    let client = namespace(&plane, ns).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let password = r"it's a \ pass'word";
    apply(
        &secrets,
        "db-app",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-app"},
               "stringData": {"username": "app user", "password": password}}),
    )
    .await;
    // CloudNativePG's CA Secret holds the CA's private key too.
    apply(
        &secrets,
        "db-ca",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-ca"},
               "stringData": {"ca.crt": "-----BEGIN CERTIFICATE-----\n", "ca.key": "-----BEGIN EC PRIVATE KEY-----\n"}}),
    )
    .await;
    apply(
        &Api::<Service>::namespaced(client.clone(), ns),
        "db-rw",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db-rw"},
               "spec": {"ports": [{"port": 5432}]}}),
    )
    .await;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    let pool = |replicas: i32| {
        json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool", "metadata": {"name": "objects"},
               "spec": {"postgres": {"clusterName": "db"}, "replicas": replicas}})
    };
    let created = apply(&pools, "objects", pool(2)).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment = eventually(wait(), "the pool's Deployment", || async {
        deployments.get_opt("objects").await.unwrap()
    })
    .await;

    // Defect 7: owner references block the owner's foreground deletion.
    let owner = &deployment.owner_references()[0];
    assert_eq!(owner.uid, created.uid().unwrap());
    assert_eq!(owner.block_owner_deletion, Some(true), "{owner:?}");

    // Defect 2: only ca.crt of the CA Secret is mounted.
    let pod = deployment.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let ca = pod.volumes.iter().flatten().find(|v| v.name == "postgres-ca").unwrap();
    let items: Vec<&str> = ca
        .secret
        .as_ref()
        .unwrap()
        .items
        .iter()
        .flatten()
        .map(|i| i.key.as_str())
        .collect();
    assert_eq!(items, ["ca.crt"]);

    // Defect 3: the connection string comes whole from a Secret, its values quoted as libpq
    // reads them; no `$(VAR)` pasting of a password into it.
    let container = &pod.containers[0];
    let env = container.env.as_ref().unwrap();
    assert!(
        env.iter()
            .all(|e| !e.value.as_deref().unwrap_or_default().contains("$(")),
        "{env:?}"
    );
    let url_ref = env
        .iter()
        .find(|e| e.name == "PGVS3_DATABASE_URL")
        .and_then(|e| e.value_from.as_ref()?.secret_key_ref.clone())
        .expect("PGVS3_DATABASE_URL from a Secret");
    let url_secret = secrets.get(&url_ref.name).await.unwrap();
    assert_eq!(url_secret.owner_references()[0].uid, created.uid().unwrap());
    let url = secret_text(&url_secret, &url_ref.key);
    // The TLS settings name the CA file only a gateway pod has; the rest as libpq reads it.
    let tls = " sslmode=verify-full sslrootcert=/etc/pgvs3/postgres-ca/ca.crt";
    let config: tokio_postgres::Config = url
        .strip_suffix(tls)
        .unwrap_or_else(|| panic!("{url}"))
        .parse()
        .unwrap_or_else(|err| panic!("{url}: {err}"));
    assert_eq!(config.get_password(), Some(password.as_bytes()), "{url}");
    assert_eq!(config.get_user(), Some("app user"));

    // Defect 3: a gateway that cannot start makes the pool say so (the kubelet's report,
    // written here as the kubelet would: no kubelet runs in this tier).
    let pods = eventually(wait(), "the pool's pods", || async {
        let pods = plane.kubectl(&["get", "pods", "-n", ns, "-o", "name"]);
        let names: Vec<String> = pods.lines().map(|l| l.trim_start_matches("pod/").to_string()).collect();
        (!names.is_empty()).then_some(names)
    })
    .await;
    let crash = json!({"status": {"containerStatuses": [{
        "name": "gateway", "image": "ghcr.io/pgvs3/pgvs3", "imageID": "", "ready": false, "restartCount": 4,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s restarting failed container"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                     "message": "Error: invalid --database-url: invalid connection string",
                                     "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"}}
    }]}});
    plane.kubectl(&[
        "patch",
        "pod",
        &pods[0],
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &crash.to_string(),
    ]);
    let message = eventually(wait(), "the pool says its gateways cannot start", || async {
        let (status, reason, message) = pool_ready(&pools.get("objects").await.ok()?)?;
        (status == "False" && reason == "GatewaysFailing").then_some(message)
    })
    .await;
    assert!(
        message.contains("CrashLoopBackOff") && message.contains("invalid --database-url"),
        "{message}"
    );

    // Defect 4: the s3 port edited by hand. The operator puts it back, and the next change
    // (a scale) still reaches the Deployment.
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let service = eventually(wait(), "the pool's Service", || async {
        services.get_opt("objects").await.unwrap()
    })
    .await;
    let s3 = service
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .position(|p| p.name.as_deref() == Some("s3"))
        .unwrap();
    plane.kubectl(&[
        "patch",
        "service",
        "objects",
        "-n",
        ns,
        "--type=json",
        "-p",
        &json!([{"op": "replace", "path": format!("/spec/ports/{s3}/port"), "value": 9100}]).to_string(),
    ]);
    apply(&pools, "objects", pool(3)).await;
    eventually(wait(), "the scale reaches the Deployment", || async {
        let deployment = deployments.get("objects").await.ok()?;
        (deployment.spec?.replicas == Some(3)).then_some(())
    })
    .await;
    eventually(wait(), "the Service's port put back", || async {
        let service = services.get("objects").await.ok()?;
        let ports: Vec<(String, i32)> = service
            .spec?
            .ports?
            .into_iter()
            .map(|p| (p.name.unwrap_or_default(), p.port))
            .collect();
        (ports.contains(&("s3".to_string(), 9000)) && !ports.iter().any(|(_, port)| *port == 9100)).then_some(())
    })
    .await;
    let (_, reason, message) = pool_ready(&pools.get("objects").await.unwrap()).unwrap();
    assert_ne!(reason, "ApplyFailed", "{message}");

    // Item 8: the pool's root key from a Secret. Missing, the pool says so; there, both halves
    // reach the gateways from it (by reference, never as values).
    let mut with_root = pool(3);
    with_root["spec"]["rootKeySecretRef"] = json!({"name": "root-key"});
    apply(&pools, "objects", with_root).await;
    eventually(wait(), "the pool waiting for its root key Secret", || async {
        let (_, reason, message) = pool_ready(&pools.get("objects").await.ok()?)?;
        (reason == "CredentialsUnavailable" && message == "root key Secret root-key does not exist").then_some(())
    })
    .await;
    apply(
        &secrets,
        "root-key",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "root-key"},
               "stringData": {"AWS_ACCESS_KEY_ID": "ADMINKEY", "AWS_SECRET_ACCESS_KEY": "admin-secret"}}),
    )
    .await;
    eventually(wait(), "the root key in the gateways' environment", || async {
        let deployment = deployments.get("objects").await.ok()?;
        let env = deployment.spec?.template.spec?.containers[0].env.clone()?;
        let from = |name: &str| {
            let var = env.iter().find(|e| e.name == name)?;
            let reference = var.value_from.as_ref()?.secret_key_ref.as_ref()?;
            (var.value.is_none()).then(|| (reference.name.clone(), reference.key.clone()))
        };
        (from("PGVS3_ROOT_ACCESS_KEY")? == ("root-key".into(), "AWS_ACCESS_KEY_ID".into())
            && from("PGVS3_ROOT_SECRET_KEY")? == ("root-key".into(), "AWS_SECRET_ACCESS_KEY".into()))
            .then_some(())
    })
    .await;

    // Defect 7: empty references are refused by the CRD's schema.
    for (field, spec) in [
        (
            "caSecretRef",
            json!({"postgres": {"host": "db.example", "secretRef": "db-app", "caSecretRef": ""}}),
        ),
        (
            "secretRef",
            json!({"postgres": {"host": "db.example", "secretRef": ""}}),
        ),
        ("host", json!({"postgres": {"host": "", "secretRef": "db-app"}})),
        ("clusterName", json!({"postgres": {"clusterName": ""}})),
        (
            "name",
            json!({"postgres": {"clusterName": "db"}, "masterKeySecretRef": {"name": ""}}),
        ),
        (
            "ojsTokenSecretRef",
            json!({"postgres": {"clusterName": "db"}, "protocols": {"ojsTokenSecretRef": ""}}),
        ),
        (
            "rootKeySecretRef.name",
            json!({"postgres": {"clusterName": "db"}, "rootKeySecretRef": {"name": ""}}),
        ),
    ] {
        let manifest = json!({"apiVersion": "pgvs3.io/v1alpha1", "kind": "GatewayPool",
                              "metadata": {"name": "empty", "namespace": ns}, "spec": spec});
        let (ok, text) = plane.kubectl_status(&["apply", "-f", "-"], &manifest.to_string());
        assert!(!ok, "an empty {field} was admitted: {text}");
        assert!(text.contains(field) && text.contains("should be at least 1"), "{text}");
    }
}

/// Issue 31, defect 5: switching a 3-gateway pool to autoscaling keeps 3 gateways: the
/// operator's apply stops setting `replicas` without the API server resetting it to 1.
async fn autoscaling_handover(plane: std::sync::Arc<ControlPlane>) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let ns = "handover";
    let client = namespace(&plane, ns).await;
    let url = common::fresh_database().await;
    primary_pool(&client, ns, "objects", &url).await;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    pools
        .patch(
            "objects",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    eventually(wait(), "3 replicas", || async {
        (deployments.get("objects").await.ok()?.spec?.replicas == Some(3)).then_some(())
    })
    .await;
    // Every replica count the Deployment has from now on.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorder = {
        let seen = seen.clone();
        let stream = watcher(
            deployments.clone(),
            watcher::Config::default().fields("metadata.name=objects"),
        )
        .applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(deployment)) = stream.next().await {
                seen.lock().unwrap().push(deployment.spec.and_then(|s| s.replicas));
            }
        })
    };
    eventually(wait(), "the watch started", || async {
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    pools
        .patch(
            "objects",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": null, "autoscaling": {"minReplicas": 1, "maxReplicas": 5}}})),
        )
        .await
        .unwrap();
    let hpas: Api<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
    eventually(wait(), "the HPA, and the operator's apply without replicas", || async {
        hpas.get_opt("objects").await.ok()??;
        let deployment = deployments.get("objects").await.ok()?;
        let applies_replicas = deployment.metadata.managed_fields.iter().flatten().any(|entry| {
            entry.manager.as_deref() == Some("pgvs3-operator")
                && entry.operation.as_deref() == Some("Apply")
                && entry
                    .fields_v1
                    .as_ref()
                    .is_some_and(|f| f.0.pointer("/f:spec/f:replicas").is_some())
        });
        (!applies_replicas).then_some(())
    })
    .await;
    quiet(&plane, ns).await;
    recorder.abort();
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|replicas| *replicas == Some(3)),
        "replica counts seen: {seen:?}"
    );
    assert_eq!(
        deployments.get("objects").await.unwrap().spec.unwrap().replicas,
        Some(3)
    );
}

/// Issue 31, defect 7: a deleted ServiceMonitor is put back at once (it is watched), not at
/// the next resync. The pool has no replicas, so it is Ready and not looked at again soon.
async fn service_monitor_restored(plane: std::sync::Arc<ControlPlane>) {
    let ns = "monitored";
    let client = namespace(&plane, ns).await;
    let url = common::fresh_database().await;
    primary_pool(&client, ns, "objects", &url).await;
    let pools: Api<GatewayPool> = Api::namespaced(client.clone(), ns);
    pools
        .patch(
            "objects",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    eventually(wait(), "the pool Ready", || async {
        let (status, _, _) = pool_ready(&pools.get("objects").await.ok()?)?;
        (status == "True").then_some(())
    })
    .await;
    let monitors: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &pgvs3_operator::gateway_pool::build::service_monitor_resource(),
    );
    let first = eventually(wait(), "the ServiceMonitor", || async {
        monitors.get_opt("objects").await.unwrap()
    })
    .await;
    quiet(&plane, ns).await;
    monitors.delete("objects", &DeleteParams::default()).await.unwrap();
    let again = eventually(wait(), "the ServiceMonitor put back", || async {
        monitors.get_opt("objects").await.unwrap()
    })
    .await;
    assert_ne!(first.uid(), again.uid());
}
