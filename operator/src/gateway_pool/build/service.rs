//! The objects around the gateways' Deployment: their Service, PodDisruptionBudget, optional
//! HorizontalPodAutoscaler and ServiceMonitor.

use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec, MetricTarget,
    ResourceMetricSource,
};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

use super::{ADMIN_PORT, meta, pool_name, ports, selector_labels};
use crate::crd::GatewayPool;

/// The clients' Service `<pool>`, of `service.type` (a LoadBalancer, often): the protocols'
/// ports (and the console's), never the admin port's `/metrics` and `/readyz`.
pub(super) fn service(pool: &GatewayPool) -> Service {
    let mut metadata = meta(pool, pool_name(pool));
    metadata.annotations = pool.spec.service.annotations.clone();
    let ports = ports(pool)
        .into_iter()
        .filter(|(name, _)| *name != ADMIN_PORT)
        .collect();
    with_ports(pool, metadata, format!("{:?}", pool.spec.service.type_), ports)
}

/// The admin port's own ClusterIP Service, for the ServiceMonitor and in-cluster checks.
pub(super) fn admin_service(pool: &GatewayPool) -> Service {
    let metadata = meta(pool, admin_service_name(pool));
    with_ports(
        pool,
        metadata,
        "ClusterIP".into(),
        vec![(ADMIN_PORT, pool.spec.admin_port)],
    )
}

/// `<pool>-admin`; for a pool named longer than 57 characters (a Service name is at most 63)
/// its first 57 characters, then `-admin`.
pub fn admin_service_name(pool: &GatewayPool) -> String {
    let name: String = pool_name(pool).chars().take(57).collect();
    format!("{name}-{ADMIN_PORT}")
}

fn with_ports(pool: &GatewayPool, metadata: ObjectMeta, type_: String, ports: Vec<(&str, i32)>) -> Service {
    Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(type_),
            selector: Some(selector_labels(pool)),
            ports: Some(
                ports
                    .into_iter()
                    .map(|(name, port)| ServicePort {
                        name: Some(name.into()),
                        port,
                        target_port: Some(IntOrString::String(name.into())),
                        protocol: Some("TCP".into()),
                        app_protocol: Some(if name == "resp" { "redis" } else { "http" }.into()),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

pub(super) fn pod_disruption_budget(pool: &GatewayPool) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: meta(pool, pool_name(pool)),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(pool)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}

pub(super) fn autoscaler(pool: &GatewayPool) -> Option<HorizontalPodAutoscaler> {
    let autoscaling = pool.spec.autoscaling.as_ref()?;
    Some(HorizontalPodAutoscaler {
        metadata: meta(pool, pool_name(pool)),
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".into()),
                kind: "Deployment".into(),
                name: pool_name(pool),
            },
            min_replicas: Some(autoscaling.min_replicas),
            max_replicas: autoscaling.max_replicas,
            metrics: Some(vec![MetricSpec {
                type_: "Resource".into(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".into(),
                    target: MetricTarget {
                        type_: "Utilization".into(),
                        average_utilization: Some(autoscaling.target_cpu_utilization_percentage),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }]),
            ..HorizontalPodAutoscalerSpec::default()
        }),
        ..HorizontalPodAutoscaler::default()
    })
}

pub fn service_monitor_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("monitoring.coreos.com", "v1", "ServiceMonitor"),
        "servicemonitors",
    )
}

pub(super) fn service_monitor(pool: &GatewayPool) -> DynamicObject {
    let mut object = DynamicObject::new(&pool_name(pool), &service_monitor_resource());
    object.metadata = meta(pool, pool_name(pool));
    object.data = serde_json::json!({
        "spec": {
            "selector": { "matchLabels": selector_labels(pool) },
            // Only the admin Service has this port.
            "endpoints": [{ "port": ADMIN_PORT, "path": "/metrics", "interval": "30s" }],
        }
    });
    object
}

#[cfg(test)]
mod tests {
    use super::super::tests::primary;
    use super::super::{Inputs, build};
    use crate::crd::Autoscaling;

    #[test]
    fn autoscaling_makes_an_hpa_and_leaves_replicas_to_it() {
        let mut pool = primary();
        pool.spec.autoscaling = Some(Autoscaling {
            min_replicas: 2,
            max_replicas: 7,
            target_cpu_utilization_percentage: 60,
        });
        let objects = build(&pool, &Inputs::default());
        assert_eq!(objects.deployment.spec.unwrap().replicas, None);
        let hpa = objects.autoscaler.unwrap().spec.unwrap();
        assert_eq!((hpa.min_replicas, hpa.max_replicas), (Some(2), 7));
        assert_eq!(hpa.scale_target_ref.name, "p");
        let metrics = hpa.metrics.unwrap();
        assert_eq!(
            metrics[0].resource.as_ref().unwrap().target.average_utilization,
            Some(60)
        );
    }
    #[test]
    fn service_monitor_only_when_its_crd_exists() {
        let inputs = Inputs {
            service_monitor_crd: true,
            ..Inputs::default()
        };
        let monitor = build(&primary(), &inputs).service_monitor.unwrap();
        assert_eq!(monitor.types.unwrap().kind, "ServiceMonitor");
        assert_eq!(monitor.data["spec"]["endpoints"][0]["port"], "admin");
    }

    #[test]
    fn the_admin_port_has_a_cluster_ip_service_of_its_own() {
        let objects = build(&primary(), &Inputs::default());
        let names = |service: &k8s_openapi::api::core::v1::Service| -> Vec<String> {
            let ports = service.spec.as_ref().unwrap().ports.as_ref().unwrap();
            ports.iter().map(|port| port.name.clone().unwrap()).collect()
        };
        assert!(!names(&objects.service).contains(&"admin".to_string()));
        assert_eq!(names(&objects.admin_service), ["admin"]);
        assert_eq!(objects.admin_service.metadata.name.as_deref(), Some("p-admin"));
        assert_eq!(objects.admin_service.spec.unwrap().type_.as_deref(), Some("ClusterIP"));
        let mut long = primary();
        long.metadata.name = Some("p".repeat(63));
        assert_eq!(super::admin_service_name(&long), format!("{}-admin", "p".repeat(57)));
    }
}
