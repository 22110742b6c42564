//! Controller metrics under upstream's names. Upstream registers them
//! without the `koord_manager` prefix and as plain counters without a
//! `_total` suffix; they are exposed here as gauges so the names match
//! exactly (`rate()` over them works the same).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use koord_common::metrics::MetricsRegistry;

type Labels = Vec<(String, String)>;

/// The metrics the controllers record.
#[derive(Clone, Default)]
pub struct ControllerMetrics {
    node_resource_reconcile: Family<Labels, Gauge>,
    node_resource_run_plugin: Family<Labels, Gauge>,
    nodemetric_reconcile: Family<Labels, Gauge>,
    nodeslo_reconcile: Family<Labels, Gauge>,
    extended_allocatable: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    slo_config_rejected: Family<Labels, Gauge>,
    colocation_profile_pods: Family<Labels, Counter>,
    is_leader: Gauge,
}

fn status_labels(succeeded: bool, reason: &str) -> Labels {
    vec![
        (
            "status".to_owned(),
            if succeeded { "succeeded" } else { "failed" }.to_owned(),
        ),
        ("reason".to_owned(), reason.to_owned()),
    ]
}

impl ControllerMetrics {
    /// Creates and registers the metrics.
    pub fn register(registry: &MetricsRegistry) -> Self {
        let metrics = ControllerMetrics::default();
        registry.register_root(|root| {
            root.register(
                "slo_controller_node_resource_reconcile_count",
                "the status count of reconciling node resource",
                metrics.node_resource_reconcile.clone(),
            );
            root.register(
                "slo_controller_node_resource_run_plugin_status",
                "the status count of running node resource plugins",
                metrics.node_resource_run_plugin.clone(),
            );
            root.register(
                "slo_controller_nodemetric_reconcile_count",
                "the status count of reconciling NodeMetric",
                metrics.nodemetric_reconcile.clone(),
            );
            root.register(
                "slo_controller_nodeslo_reconcile_count",
                "the status count of reconciling NodeSLO",
                metrics.nodeslo_reconcile.clone(),
            );
            root.register(
                "slo_controller_node_extended_resource_allocatable_internal",
                "the internal allocatable of node extended resources which may not be updated at the node status",
                metrics.extended_allocatable.clone(),
            );
            root.register(
                "koordinator_manager_is_leader",
                "Gauge the leader of koordinator-manager",
                metrics.is_leader.clone(),
            );
        });
        registry.register_component(|component| {
            component.register(
                "slo_config_rejected",
                "Versions of the slo-controller-config ConfigMap refused as invalid",
                metrics.slo_config_rejected.clone(),
            );
            component.register(
                "colocation_profile_pods",
                "Pods the colocationprofile controller handled, by result",
                metrics.colocation_profile_pods.clone(),
            );
        });
        metrics
    }

    pub fn node_resource(&self, succeeded: bool, reason: &str) {
        self.node_resource_reconcile
            .get_or_create(&status_labels(succeeded, reason))
            .inc();
    }

    /// One run of a node resource plugin's `stage` (upstream labels:
    /// plugin, status, reason).
    pub fn node_resource_plugin(&self, plugin: &str, succeeded: bool, stage: &str) {
        let mut labels = vec![("plugin".to_owned(), plugin.to_owned())];
        labels.extend(status_labels(succeeded, stage));
        self.node_resource_run_plugin.get_or_create(&labels).inc();
    }

    pub fn node_metric(&self, succeeded: bool, reason: &str) {
        self.nodemetric_reconcile
            .get_or_create(&status_labels(succeeded, reason))
            .inc();
    }

    pub fn node_slo(&self, succeeded: bool, reason: &str) {
        self.nodeslo_reconcile
            .get_or_create(&status_labels(succeeded, reason))
            .inc();
    }

    /// Records a computed amount (`unit`: `integer` for cores, `byte`).
    pub fn allocatable(&self, node: &str, resource: &str, unit: &str, value: f64) {
        self.extended_allocatable
            .get_or_create(&vec![
                ("node".to_owned(), node.to_owned()),
                ("resource".to_owned(), resource.to_owned()),
                ("unit".to_owned(), unit.to_owned()),
            ])
            .set(value);
    }

    /// Drops the per-node series of a node that is gone.
    pub fn forget_node(&self, node: &str, resources: &[&str]) {
        for resource in resources {
            for unit in ["integer", "byte"] {
                self.extended_allocatable.remove(&vec![
                    ("node".to_owned(), node.to_owned()),
                    ("resource".to_owned(), (*resource).to_owned()),
                    ("unit".to_owned(), unit.to_owned()),
                ]);
            }
        }
    }

    pub fn config_rejected(&self, name: &str) {
        self.slo_config_rejected
            .get_or_create(&vec![("configmap".to_owned(), name.to_owned())])
            .inc();
    }

    /// Adds `count` pods with `result` (patched, patchFailed, unchanged,
    /// rateLimited, skipped, invalidProfile) to the colocationprofile counter.
    pub fn count_colocation_profile_pods(&self, result: &str, count: usize) {
        if count > 0 {
            self.colocation_profile_pods
                .get_or_create(&vec![("result".to_owned(), result.to_owned())])
                .inc_by(count as u64);
        }
    }

    pub fn set_leader(&self, leader: bool) {
        self.is_leader.set(i64::from(leader));
    }
}
