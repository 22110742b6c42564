//! Prometheus metrics of the states informer and the NodeMetric reporter.
//! Names follow upstream where upstream has the metric
//! (`koordlet_kubelet_request_duration_seconds`,
//! `koordlet_node_metric_node_usage`, `koordlet_node_metric_system_usage`,
//! `koordlet_node_priority_resource_reclaimable`,
//! `koordlet_node_resource_priority_reclaimable_status`).

use std::time::Duration;

use koord_common::MetricsRegistry;
use koord_common::metrics::FloatGauge;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

type Labels = Vec<(String, String)>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn kubelet_request_histogram() -> Histogram {
    // 1ms .. 4s, as upstream.
    Histogram::new(exponential_buckets(0.001, 4.0, 7))
}

/// Upstream's unit label values.
pub const UNIT_CORE: &str = "core";
pub const UNIT_BYTE: &str = "byte";

/// Handles to the registered metrics; cheap to clone.
#[derive(Clone)]
pub struct StatesMetrics {
    node_name: String,
    kubelet_request_duration: HistogramFamily,
    pods_sync_errors: Family<Labels, Counter>,
    node_metric_reports: Family<Labels, Counter>,
    node_usage: Family<Labels, FloatGauge>,
    system_usage: Family<Labels, FloatGauge>,
    priority_reclaimable: Family<Labels, FloatGauge>,
    priority_reclaimable_status: Family<Labels, FloatGauge>,
}

impl StatesMetrics {
    /// Creates and registers the metrics under the component prefix.
    pub fn register(registry: &MetricsRegistry, node_name: &str) -> Self {
        let metrics = Self::unregistered(node_name);
        registry.register_component(|r| {
            r.register(
                "kubelet_request_duration_seconds",
                "kubelet http request duration in seconds",
                metrics.kubelet_request_duration.clone(),
            );
            r.register(
                "pods_sync_errors",
                "failed pod syncs from the kubelet, pods file or API server, by source",
                metrics.pods_sync_errors.clone(),
            );
            r.register(
                "node_metric_reports",
                "NodeMetric status reports, by result",
                metrics.node_metric_reports.clone(),
            );
            r.register(
                "node_metric_node_usage",
                "the node usage reported in the NodeMetric",
                metrics.node_usage.clone(),
            );
            r.register(
                "node_metric_system_usage",
                "the system usage reported in the NodeMetric",
                metrics.system_usage.clone(),
            );
            r.register(
                "node_priority_resource_reclaimable",
                "the node reclaimable of different priorities resources updated by koordinator",
                metrics.priority_reclaimable.clone(),
            );
            r.register(
                "node_resource_priority_reclaimable_status",
                "status of node reclaimable of different priorities resources updated by koordinator",
                metrics.priority_reclaimable_status.clone(),
            );
        });
        metrics
    }

    /// Metrics that are recorded but served nowhere (tests, tools).
    pub fn unregistered(node_name: &str) -> Self {
        Self {
            node_name: node_name.to_string(),
            kubelet_request_duration: HistogramFamily::new_with_constructor(
                kubelet_request_histogram,
            ),
            pods_sync_errors: Family::default(),
            node_metric_reports: Family::default(),
            node_usage: Family::default(),
            system_usage: Family::default(),
            priority_reclaimable: Family::default(),
            priority_reclaimable_status: Family::default(),
        }
    }

    /// Records the prod reclaimable estimate as upstream does: the values
    /// and status 0, or zeros and status 1 when the estimate failed.
    pub fn set_prod_reclaimable(&self, reclaimable: Option<(f64, f64)>) {
        let priority = apis::extension::PriorityClass::Prod.as_str();
        let (cpu_cores, memory_bytes) = reclaimable.unwrap_or_default();
        for (resource, unit, value) in [
            ("cpu", UNIT_CORE, cpu_cores),
            ("memory", UNIT_BYTE, memory_bytes),
        ] {
            let mut labels = self.usage_labels(resource, unit);
            labels.insert(1, ("priority".to_string(), priority.to_string()));
            self.priority_reclaimable.get_or_create(&labels).set(value);
        }
        let status = vec![
            ("node".to_string(), self.node_name.clone()),
            ("priority".to_string(), priority.to_string()),
        ];
        self.priority_reclaimable_status
            .get_or_create(&status)
            .set(if reclaimable.is_some() { 0.0 } else { 1.0 });
    }

    pub fn observe_kubelet_request(&self, path: &str, code: &str, elapsed: Duration) {
        let labels = vec![
            ("verb".to_string(), "get".to_string()),
            ("path".to_string(), path.to_string()),
            ("code".to_string(), code.to_string()),
        ];
        self.kubelet_request_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    pub fn count_pods_sync_error(&self, source: &str) {
        self.pods_sync_errors
            .get_or_create(&vec![("source".to_string(), source.to_string())])
            .inc();
    }

    pub fn count_node_metric_report(&self, result: &str) {
        self.node_metric_reports
            .get_or_create(&vec![("result".to_string(), result.to_string())])
            .inc();
    }

    /// Replaces the reported usage gauges (stale series are dropped first, as upstream does).
    pub fn set_reported_usage(&self, node: Option<(f64, f64)>, system: Option<(f64, f64)>) {
        for (family, usage) in [(&self.node_usage, node), (&self.system_usage, system)] {
            family.clear();
            if let Some((cpu_cores, memory_bytes)) = usage {
                family
                    .get_or_create(&self.usage_labels("cpu", UNIT_CORE))
                    .set(cpu_cores);
                family
                    .get_or_create(&self.usage_labels("memory", UNIT_BYTE))
                    .set(memory_bytes);
            }
        }
    }

    fn usage_labels(&self, resource: &str, unit: &str) -> Labels {
        vec![
            ("node".to_string(), self.node_name.clone()),
            ("resource".to_string(), resource.to_string()),
            ("unit".to_string(), unit.to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_use_upstream_names_and_labels() {
        let registry = MetricsRegistry::new("koordlet");
        let metrics = StatesMetrics::register(&registry, "node-a");
        metrics.observe_kubelet_request("/pods/", "200", Duration::from_millis(3));
        metrics.count_pods_sync_error("kubelet");
        metrics.set_reported_usage(Some((1.5, 1024.0)), None);
        let body = registry.encode().unwrap();
        assert!(
            body.contains(
                "koordlet_kubelet_request_duration_seconds_count{verb=\"get\",path=\"/pods/\",code=\"200\"} 1"
            ),
            "{body}"
        );
        assert!(
            body.contains("koordlet_pods_sync_errors_total{source=\"kubelet\"} 1"),
            "{body}"
        );
        assert!(
            body.contains(
                "koordlet_node_metric_node_usage{node=\"node-a\",resource=\"cpu\",unit=\"core\"} 1.5"
            ),
            "{body}"
        );
        assert!(
            !body.contains("koordlet_node_metric_system_usage{"),
            "{body}"
        );

        metrics.set_prod_reclaimable(Some((0.75, 2048.0)));
        let body = registry.encode().unwrap();
        assert!(
            body.contains(
                "koordlet_node_priority_resource_reclaimable{node=\"node-a\",priority=\"koord-prod\",resource=\"cpu\",unit=\"core\"} 0.75"
            ),
            "{body}"
        );
        assert!(
            body.contains(
                "koordlet_node_resource_priority_reclaimable_status{node=\"node-a\",priority=\"koord-prod\"} 0"
            ),
            "{body}"
        );
        metrics.set_prod_reclaimable(None);
        let body = registry.encode().unwrap();
        assert!(
            body.contains(
                "koordlet_node_resource_priority_reclaimable_status{node=\"node-a\",priority=\"koord-prod\"} 1"
            ),
            "{body}"
        );
    }
}
