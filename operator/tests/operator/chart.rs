//! The Helm chart as helm renders it: the values schema, the leader-election/replica rule, the
//! optional objects (PDB, monitors, NetworkPolicy) and namespaced RBAC with `watchNamespace` /
//! `watchNamespaces`.
//! Ignored (reported as not run) without helm; `.ci/apiserver-tier.sh` runs it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn helm() -> PathBuf {
    std::env::var_os("PGVS3_HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/pgvs3-tools/helm"))
}

fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/pgvs3-operator")
}

/// `helm <verb> <chart> --set …`: success and combined output.
fn helm_run(verb: &[&str], sets: &[&str]) -> (bool, String) {
    let mut command = Command::new(helm());
    command
        .args(verb)
        .arg(chart_dir())
        .args(["--namespace", "pgvs3-system"]);
    for set in sets {
        command.args(["--set", set]);
    }
    let output = command.output().expect("running helm (PGVS3_HELM)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// The rendered objects; panics with helm's output when rendering fails.
fn render(sets: &[&str]) -> Vec<Value> {
    let (ok, text) = helm_run(&["template", "pgvs3-operator"], sets);
    assert!(ok, "helm template {sets:?} failed:\n{text}");
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    documents.into_iter().filter(|d| !d.is_null()).collect()
}

fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_string())
        .collect()
}

fn only<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let mut found = objects.iter().filter(|o| o["kind"] == kind);
    let object = found
        .next()
        .unwrap_or_else(|| panic!("no {kind} in {:?}", kinds(objects)));
    assert!(found.next().is_none(), "more than one {kind}");
    object
}

#[test]
#[ignore = "needs helm (PGVS3_HELM; .ci/apiserver-tier.sh)"]
fn the_values_schema_refuses_bad_values() {
    for (set, field) in [
        ("replicaCount=abc", "/replicaCount"),
        ("replicaCount=0", "/replicaCount"),
        ("logFormat=xml", "/logFormat"),
        ("metrics.port=70000", "/metrics/port"),
        ("watchNamespace=Not_A_Namespace", "/watchNamespace"),
        ("watchNamespaces={team,Not_A_Namespace}", "/watchNamespaces/1"),
        ("replicaCont=2", "replicaCont"),
        (
            "podDisruptionBudget.maxUnavailable=abc",
            "/podDisruptionBudget/maxUnavailable",
        ),
        (
            "podDisruptionBudget.maxUnavailable=-1",
            "/podDisruptionBudget/maxUnavailable",
        ),
        (
            "podDisruptionBudget.maxUnavailable=150%",
            "/podDisruptionBudget/maxUnavailable",
        ),
        ("priorityClassName=a b", "/priorityClassName"),
        ("priorityClassName=High", "/priorityClassName"),
    ] {
        for verb in [&["lint", "--strict"][..], &["template", "pgvs3-operator"][..]] {
            let (ok, text) = helm_run(verb, &[set]);
            assert!(!ok, "helm {verb:?} --set {set} passed:\n{text}");
            assert!(
                text.contains(field),
                "helm {verb:?} --set {set} does not name {field}:\n{text}"
            );
        }
    }
    let (ok, text) = helm_run(&["lint", "--strict"], &[]);
    assert!(ok, "{text}");
    for good in [
        "podDisruptionBudget.maxUnavailable=0",
        "podDisruptionBudget.maxUnavailable=25%",
        "priorityClassName=system-cluster-critical",
    ] {
        let (ok, text) = helm_run(&["lint", "--strict"], &[good]);
        assert!(ok, "--set {good}: {text}");
    }
}

#[test]
#[ignore = "needs helm (PGVS3_HELM; .ci/apiserver-tier.sh)"]
fn without_leader_election_the_chart_runs_one_replica() {
    // Refused by the values schema, so by `helm lint` too (a template's `fail` is only
    // reported as information by lint).
    for verb in [&["lint", "--strict"][..], &["template", "pgvs3-operator"][..]] {
        let (ok, text) = helm_run(verb, &["leaderElection.enabled=false"]);
        assert!(
            !ok,
            "helm {verb:?}: two replicas without leader election passed:\n{text}"
        );
        assert!(text.contains("/replicaCount"), "{text}");
    }

    let objects = render(&["leaderElection.enabled=false", "replicaCount=1"]);
    let deployment = only(&objects, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "PGVS3_OPERATOR_NO_LEADER_ELECTION")
    );
    // One replica: no PDB (it would block every drain) and no Lease permissions.
    let kinds = kinds(&objects);
    assert!(!kinds.contains(&"PodDisruptionBudget".to_string()), "{kinds:?}");
    assert!(
        !objects
            .iter()
            .any(|o| o["metadata"]["name"].as_str().unwrap().ends_with("leader-election"))
    );
}

#[test]
#[ignore = "needs helm (PGVS3_HELM; .ci/apiserver-tier.sh)"]
fn defaults_are_restricted_with_a_pdb_and_a_startup_probe() {
    let objects = render(&[]);
    let kinds = kinds(&objects);
    for absent in ["PodMonitor", "ServiceMonitor", "NetworkPolicy"] {
        assert!(
            !kinds.contains(&absent.to_string()),
            "{absent} on by default: {kinds:?}"
        );
    }
    let pdb = only(&objects, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    let pod = &only(&objects, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        only(&objects, "Deployment")["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(
        pod["securityContext"],
        json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
               "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let container = &pod["containers"][0];
    assert_eq!(
        container["securityContext"],
        json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
               "capabilities": {"drop": ["ALL"]}})
    );
    assert_eq!(container["startupProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["startupProbe"]["failureThreshold"], 30);

    // Security contexts are values.
    let objects = render(&[
        "podSecurityContext.runAsUser=1000",
        "podSecurityContext.runAsGroup=1000",
    ]);
    let pod = &only(&objects, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsUser"], 1000);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
}

#[test]
#[ignore = "needs helm (PGVS3_HELM; .ci/apiserver-tier.sh)"]
fn monitors_and_network_policy_when_asked() {
    let objects = render(&[
        "monitoring.podMonitor.enabled=true",
        "monitoring.serviceMonitor.enabled=true",
        "monitoring.serviceMonitor.interval=30s",
        "networkPolicy.enabled=true",
    ]);
    let selector = &only(&objects, "Deployment")["spec"]["selector"]["matchLabels"];
    let pod_monitor = only(&objects, "PodMonitor");
    assert_eq!(&pod_monitor["spec"]["selector"]["matchLabels"], selector);
    assert_eq!(pod_monitor["spec"]["podMetricsEndpoints"][0]["port"], "http-metrics");
    let service_monitor = only(&objects, "ServiceMonitor");
    assert_eq!(service_monitor["spec"]["endpoints"][0]["interval"], "30s");
    let policy = only(&objects, "NetworkPolicy");
    assert_eq!(&policy["spec"]["podSelector"]["matchLabels"], selector);
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], "http-metrics");

    let (ok, text) = helm_run(
        &["template", "pgvs3-operator"],
        &[
            "monitoring.serviceMonitor.enabled=true",
            "metrics.service.enabled=false",
        ],
    );
    assert!(!ok && text.contains("needs metrics.service.enabled"), "{text}");
}

/// The operator's environment variable `name` in the rendered Deployment.
fn operator_env(objects: &[Value], name: &str) -> Option<String> {
    let container = &only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    let env = container["env"].as_array()?;
    let found = env.iter().find(|e| e["name"] == name)?;
    Some(found["value"].as_str()?.to_string())
}

/// A list of namespaces: a Role and RoleBinding in each (the rules of the one-namespace form),
/// nothing cluster-wide, and the operator told to watch exactly those (`watchNamespace`, the
/// older one-namespace value, merged in).
#[test]
#[ignore = "needs helm (PGVS3_HELM; .ci/apiserver-tier.sh)"]
fn watched_namespaces_get_a_role_each_and_nothing_cluster_wide() {
    let objects = render(&["watchNamespaces={team-a,team-b}", "watchNamespace=team-c"]);
    let kinds = kinds(&objects);
    assert!(
        !kinds.iter().any(|k| k.starts_with("Cluster")),
        "cluster-wide RBAC with watchNamespaces: {kinds:?}"
    );
    let single = render(&["watchNamespace=team"]);
    let single_rules = &single
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["namespace"] == "team")
        .unwrap()["rules"];
    for namespace in ["team-a", "team-b", "team-c"] {
        let in_namespace = |kind: &str| {
            objects
                .iter()
                .find(|o| o["kind"] == kind && o["metadata"]["namespace"] == namespace)
                .unwrap_or_else(|| panic!("no {kind} in {namespace}: {kinds:?}"))
        };
        let role = in_namespace("Role");
        assert_eq!(&role["rules"], single_rules, "{namespace}");
        let binding = in_namespace("RoleBinding");
        assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
        assert_eq!(binding["subjects"][0]["namespace"], "pgvs3-system");
    }
    assert_eq!(
        operator_env(&objects, "PGVS3_OPERATOR_WATCH_NAMESPACE").as_deref(),
        Some("team-a,team-b,team-c")
    );
    assert_eq!(operator_env(&render(&[]), "PGVS3_OPERATOR_WATCH_NAMESPACE"), None);
}

#[test]
#[ignore = "needs helm (PGVS3_HELM; .ci/apiserver-tier.sh)"]
fn a_watched_namespace_gets_roles_not_cluster_roles() {
    let objects = render(&["watchNamespace=team"]);
    let kinds = kinds(&objects);
    assert!(
        !kinds.iter().any(|k| k.starts_with("Cluster")),
        "cluster-wide RBAC with watchNamespace: {kinds:?}"
    );
    let operator_role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["namespace"] == "team")
        .expect("a Role in the watched namespace");
    let binding = objects
        .iter()
        .find(|o| o["kind"] == "RoleBinding" && o["metadata"]["namespace"] == "team")
        .expect("a RoleBinding in the watched namespace");
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["roleRef"]["name"], operator_role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["namespace"], "pgvs3-system");
    // The same rules as the cluster-wide role, but for what only a ClusterRole can grant: the
    // service-account issuer's URLs (a watched namespace relies on the cluster's default grant)
    // and namespaces (a Bucket's namespaceSelector, refused with watchNamespace).
    let cluster = render(&[]);
    let cluster_rules = only(&cluster, "ClusterRole")["rules"].as_array().unwrap().clone();
    let (cluster_only, objects): (Vec<_>, Vec<_>) = cluster_rules
        .into_iter()
        .partition(|rule| rule.get("nonResourceURLs").is_some() || rule["resources"] == json!(["namespaces"]));
    assert_eq!(operator_role["rules"], Value::Array(objects));
    assert_eq!(
        cluster_only,
        [
            json!({"nonResourceURLs": ["/.well-known/openid-configuration", "/openid/v1/jwks"], "verbs": ["get"]}),
            json!({"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}),
        ]
    );
}
