//! The gateways' Deployment: its pod template, container, probes and environment.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapEnvSource, Container, ContainerPort, EnvFromSource, EnvVar, EnvVarSource, HTTPGetAction,
    Lifecycle, LifecycleHandler, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SeccompProfile, SecretKeySelector as CoreSecretKeySelector, SecurityContext, SleepAction, TopologySpreadConstraint,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::volumes::volumes;
use super::{
    CHECKSUM_ANNOTATION, CONTAINER, DATABASE_URL_KEY, config_map_name, database_secret_name, labels, meta, pool_name,
    ports, selector_labels,
};
use crate::crd::{
    DEFAULT_REPLICAS, GatewayPool, OJS_TOKEN_KEY, PodOverrides, ROOT_ACCESS_KEY_KEY, ROOT_SECRET_KEY_KEY,
};
use crate::origin_cache::ca_bundle::Mounted;

/// Non-root user of the gateway image (distroless "nonroot").
const GATEWAY_UID: i64 = 65532;
/// How long a terminating gateway keeps serving before SIGTERM (see the container's preStop).
const PRE_STOP_SECONDS: i64 = 5;

fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(CoreSecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn env(pool: &GatewayPool) -> Vec<EnvVar> {
    let master_key = pool.spec.master_key_ref(&pool_name(pool));
    let mut env = vec![
        secret_env(DATABASE_URL_KEY, &database_secret_name(pool), DATABASE_URL_KEY),
        secret_env("PGVS3_MASTER_KEY", &master_key.name, &master_key.key),
    ];
    if let Some(secret) = pool.spec.protocols.ojs_token_secret() {
        env.push(secret_env("PGVS3_OJS_TOKEN", secret, OJS_TOKEN_KEY));
    }
    if let Some(root) = &pool.spec.root_key_secret_ref {
        env.push(secret_env("PGVS3_ROOT_ACCESS_KEY", &root.name, ROOT_ACCESS_KEY_KEY));
        env.push(secret_env("PGVS3_ROOT_SECRET_KEY", &root.name, ROOT_SECRET_KEY_KEY));
    }
    env
}

/// Probes use the admin port by name, so they follow `adminPort`.
fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("admin".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Probe::default()
    }
}

fn default_resources() -> ResourceRequirements {
    // CPU requests are what an autoscaler's utilization target is measured against.
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity("250m".into())),
            ("memory".to_string(), Quantity("256Mi".into())),
        ])),
        limits: Some(BTreeMap::from([("memory".to_string(), Quantity("1Gi".into()))])),
        ..ResourceRequirements::default()
    }
}

pub(super) fn deployment(pool: &GatewayPool, checksum: String, origin_cas: &[Mounted]) -> Deployment {
    let spec = &pool.spec;
    let mut overrides = spec.pod_template.clone().unwrap_or_default();
    let mut pod_labels = labels(pool);
    pod_labels.extend(overrides.labels.take().unwrap_or_default());
    let mut annotations = overrides.annotations.take().unwrap_or_default();
    annotations.insert(CHECKSUM_ANNOTATION.into(), checksum);
    let selector = LabelSelector {
        match_labels: Some(selector_labels(pool)),
        ..LabelSelector::default()
    };
    let (mounts, volumes): (Vec<VolumeMount>, Vec<Volume>) = volumes(pool, origin_cas).into_iter().unzip();
    Deployment {
        metadata: meta(pool, pool_name(pool)),
        spec: Some(DeploymentSpec {
            // With an autoscaler the HPA owns the replica count; leaving it out of the applied
            // object keeps server-side apply from fighting it.
            replicas: match spec.autoscaling {
                Some(_) => None,
                None => Some(spec.replicas.unwrap_or(DEFAULT_REPLICAS)),
            },
            selector: selector.clone(),
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(0)),
                    max_surge: Some(IntOrString::Int(1)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec(container(pool, mounts), volumes, &selector, overrides)),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// The pod: one gateway container, non-root, spread over zones and hosts, placed as the pool's
/// `podTemplate` asks.
fn pod_spec(container: Container, volumes: Vec<Volume>, selector: &LabelSelector, overrides: PodOverrides) -> PodSpec {
    let spread = |topology_key: &str| TopologySpreadConstraint {
        max_skew: 1,
        topology_key: topology_key.into(),
        when_unsatisfiable: "ScheduleAnyway".into(),
        label_selector: Some(selector.clone()),
        ..TopologySpreadConstraint::default()
    };
    PodSpec {
        containers: vec![container],
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        // Longer than the pre-stop pause plus the gateway's drain (30 s) so
        // in-flight requests finish.
        termination_grace_period_seconds: Some(PRE_STOP_SECONDS + 45),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(GATEWAY_UID),
            run_as_group: Some(GATEWAY_UID),
            fs_group: Some(GATEWAY_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        topology_spread_constraints: Some(vec![
            spread("topology.kubernetes.io/zone"),
            spread("kubernetes.io/hostname"),
        ]),
        node_selector: overrides.node_selector,
        tolerations: overrides.tolerations,
        affinity: overrides.affinity,
        priority_class_name: overrides.priority_class_name,
        volumes: Some(volumes),
        ..PodSpec::default()
    }
}

/// The gateway container: its ports, settings (the ConfigMap), Secrets (by reference), probes
/// and a locked-down security context.
fn container(pool: &GatewayPool, mounts: Vec<VolumeMount>) -> Container {
    let spec = &pool.spec;
    Container {
        name: CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.clone(),
        args: Some(vec!["serve".into()]),
        ports: Some(
            ports(pool)
                .into_iter()
                .map(|(name, port)| ContainerPort {
                    name: Some(name.into()),
                    container_port: port,
                    protocol: Some("TCP".into()),
                    ..ContainerPort::default()
                })
                .collect(),
        ),
        env_from: Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: config_map_name(pool),
                optional: Some(false),
            }),
            ..EnvFromSource::default()
        }]),
        env: Some(env(pool)),
        // The log's tail becomes the termination message of a gateway that exits with an
        // error: the pool's status quotes it (why its gateways cannot start).
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        readiness_probe: Some(probe("/readyz", 5, 3)),
        // A terminating pod leaves its Service's endpoints only once kube-proxy on every node
        // has caught up; until then new connections still arrive. The gateway stops accepting
        // at SIGTERM, so it is sent after this pause (the node tier's rolling update under load
        // lost 1-7 requests in 68-177 without it).
        lifecycle: Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction {
                    seconds: PRE_STOP_SECONDS,
                }),
                ..LifecycleHandler::default()
            }),
            ..Lifecycle::default()
        }),
        liveness_probe: Some(probe("/healthz", 10, 6)),
        resources: Some(spec.resources.clone().unwrap_or_else(default_resources)),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(mounts),
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{env_value, primary};
    use super::super::{Inputs, build, spec_refusal};
    use super::*;

    #[test]
    fn an_enabled_ojs_endpoint_takes_its_token_from_the_secret() {
        let mut pool = primary();
        pool.spec.protocols.ojs_token_secret_ref = Some("jobs-token".into());
        let deployment = |pool: &GatewayPool| build(pool, &Inputs::default()).deployment;
        assert!(
            env_value(&deployment(&pool), "PGVS3_OJS_TOKEN").is_none(),
            "OJS off: no token"
        );
        pool.spec.protocols.ojs.enabled = true;
        let token = env_value(&deployment(&pool), "PGVS3_OJS_TOKEN").unwrap();
        let reference = token.value_from.unwrap().secret_key_ref.unwrap();
        assert_eq!(
            (reference.name.as_str(), reference.key.as_str()),
            ("jobs-token", "token")
        );
        assert_eq!(token.value, None, "the token never appears in the pod spec");
    }
    #[test]
    fn pods_run_non_root_on_a_read_only_root_spread_over_zones_and_hosts() {
        let objects = build(&primary(), &Inputs::default());
        let pod = objects.deployment.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.security_context.unwrap().run_as_non_root, Some(true));
        let container = &pod.containers[0].security_context.clone().unwrap();
        assert_eq!(container.read_only_root_filesystem, Some(true));
        assert_eq!(container.allow_privilege_escalation, Some(false));
        let keys: Vec<_> = pod
            .topology_spread_constraints
            .unwrap()
            .into_iter()
            .map(|t| t.topology_key)
            .collect();
        assert_eq!(keys, vec!["topology.kubernetes.io/zone", "kubernetes.io/hostname"]);
        let probe = pod.containers[0].readiness_probe.clone().unwrap().http_get.unwrap();
        assert_eq!(probe.path.as_deref(), Some("/readyz"));
        assert_eq!(probe.port, IntOrString::String("admin".into()));
    }
    #[test]
    fn a_root_key_secret_reaches_the_gateways_by_reference_only() {
        let none = build(&primary(), &Inputs::default());
        assert!(env_value(&none.deployment, "PGVS3_ROOT_ACCESS_KEY").is_none());
        let mut pool = primary();
        pool.spec.root_key_secret_ref = Some(crate::crd::RootKeySecretRef {
            name: "root-key".into(),
        });
        let objects = build(&pool, &Inputs::default());
        for (name, key) in [
            ("PGVS3_ROOT_ACCESS_KEY", ROOT_ACCESS_KEY_KEY),
            ("PGVS3_ROOT_SECRET_KEY", ROOT_SECRET_KEY_KEY),
        ] {
            let var = env_value(&objects.deployment, name).unwrap();
            assert_eq!(var.value, None);
            let reference = var.value_from.unwrap().secret_key_ref.unwrap();
            assert_eq!((reference.name.as_str(), reference.key.as_str()), ("root-key", key));
        }
        pool.spec.root_key_secret_ref.as_mut().unwrap().name = "Not_A_Name".into();
        assert_eq!(
            spec_refusal(&pool).as_deref(),
            Some(r#"rootKeySecretRef.name "Not_A_Name" is not a valid object name"#)
        );
    }
}
