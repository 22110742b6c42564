//! The advisor's Prometheus metrics, with upstream's names and labels:
//! `koordlet_node_used_cpu_cores{node}`, `koordlet_node_used_memory_bytes{node}`,
//! `koordlet_pod_psi{...}` and `koordlet_container_psi{...}`.

use std::sync::Arc;

use koord_common::MetricsRegistry;
use koord_common::metrics::FloatGauge;
use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::family::Family;

use super::PodMeta;
use super::parse::PsiByResource;
use crate::metriccache::{MetricKind, PsiDegree, PsiResource, PsiWindow, Sample};

type Labels = Vec<(String, String)>;
type GaugeFamily = Family<Labels, FloatGauge>;

/// Who a PSI reading belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PsiOwner {
    pub pod_uid: String,
    pub pod_name: String,
    pub pod_namespace: String,
    /// Container name and ID; `None` for the pod cgroup itself.
    pub container: Option<(String, String)>,
}

impl PsiOwner {
    pub fn pod(pod: &PodMeta) -> Self {
        Self {
            pod_uid: pod.uid.to_string(),
            pod_name: pod.name.clone(),
            pod_namespace: pod.namespace.clone(),
            container: None,
        }
    }

    pub fn container(pod: &PodMeta, name: &str, id: &Arc<str>) -> Self {
        Self {
            container: Some((name.to_string(), id.to_string())),
            ..Self::pod(pod)
        }
    }
}

/// Labels of one PSI gauge. The owner's labels are shared by the gauges of
/// that owner (18 per cgroup), the rest are static strings, so a node with
/// hundreds of containers keeps thousands of series without thousands of
/// label strings. Encoded in upstream's label order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PsiLabels {
    /// `node`, [`container_id`, `container_name`,] `pod_uid`, `pod_name`, `pod_namespace`.
    owner: Arc<[(&'static str, Arc<str>)]>,
    resource: &'static str,
    window: &'static str,
    degree: &'static str,
    full_supported: bool,
}

impl EncodeLabelSet for PsiLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder<'_>) -> Result<(), std::fmt::Error> {
        self.owner.as_ref().encode(encoder)?;
        let full_supported = if self.full_supported { "true" } else { "false" };
        [
            ("psi_resource_type", self.resource),
            ("psi_precision", self.window),
            ("psi_degree", self.degree),
            ("cpu_full_supported", full_supported),
        ]
        .encode(encoder)
    }
}

type PsiFamily = Family<PsiLabels, FloatGauge>;

/// Exports PSI gauges; each round replaces the previous round's series so
/// departed pods disappear (as upstream resets its vectors).
#[derive(Clone, Default)]
pub struct PsiRecorder {
    node: Arc<str>,
    pod_psi: PsiFamily,
    container_psi: PsiFamily,
}

fn pair(key: &str, value: &str) -> (String, String) {
    (key.to_string(), value.to_string())
}

impl PsiRecorder {
    fn owner_labels(&self, owner: &PsiOwner) -> Arc<[(&'static str, Arc<str>)]> {
        let mut labels = Vec::with_capacity(6);
        labels.push(("node", Arc::clone(&self.node)));
        if let Some((name, id)) = &owner.container {
            labels.push(("container_id", Arc::from(id.as_str())));
            labels.push(("container_name", Arc::from(name.as_str())));
        }
        labels.push(("pod_uid", Arc::from(owner.pod_uid.as_str())));
        labels.push(("pod_name", Arc::from(owner.pod_name.as_str())));
        labels.push(("pod_namespace", Arc::from(owner.pod_namespace.as_str())));
        labels.into()
    }

    pub fn replace_all(&self, readings: &[(PsiOwner, PsiByResource)]) {
        self.pod_psi.clear();
        self.container_psi.clear();
        for (owner, psi) in readings {
            let owner_labels = self.owner_labels(owner);
            let family = if owner.container.is_some() {
                &self.container_psi
            } else {
                &self.pod_psi
            };
            for resource in PsiResource::ALL {
                let stats = psi.get(resource);
                let full_supported = stats.full.is_some();
                let lines = [
                    (PsiDegree::Some, Some(stats.some)),
                    (PsiDegree::Full, stats.full),
                ];
                for (degree, line) in lines {
                    let Some(line) = line else { continue };
                    for window in PsiWindow::ALL {
                        let value = match window {
                            PsiWindow::Avg10 => line.avg10,
                            PsiWindow::Avg60 => line.avg60,
                            PsiWindow::Avg300 => line.avg300,
                        };
                        let labels = PsiLabels {
                            owner: Arc::clone(&owner_labels),
                            resource: resource.as_str(),
                            window: window.as_str(),
                            degree: degree.as_str(),
                            full_supported,
                        };
                        family.get_or_create(&labels).set(value);
                    }
                }
            }
        }
    }
}

/// Gauges the metrics advisor updates every round.
#[derive(Clone, Default)]
pub struct AdvisorMetrics {
    node: String,
    node_used_cpu: GaugeFamily,
    node_used_memory: GaugeFamily,
    psi: PsiRecorder,
}

impl AdvisorMetrics {
    /// Registers the gauges under the component prefix (`koordlet_`).
    pub fn register(registry: &MetricsRegistry, node_name: &str) -> Self {
        let metrics = Self {
            node: node_name.to_string(),
            psi: PsiRecorder {
                node: Arc::from(node_name),
                ..PsiRecorder::default()
            },
            ..Self::default()
        };
        registry.register_component(|r| {
            r.register(
                "node_used_cpu_cores",
                "Number of cpu cores used by node in realtime",
                metrics.node_used_cpu.clone(),
            );
            r.register(
                "node_used_memory_bytes",
                "Memory used by node in realtime",
                metrics.node_used_memory.clone(),
            );
            r.register(
                "container_psi",
                "Container psi collected by koordlet",
                metrics.psi.container_psi.clone(),
            );
            r.register(
                "pod_psi",
                "Pod psi collected by koordlet",
                metrics.psi.pod_psi.clone(),
            );
        });
        metrics
    }

    pub fn psi_recorder(&self) -> PsiRecorder {
        self.psi.clone()
    }

    /// Sets the node gauges from a round's samples (when present).
    pub fn record_round(&self, samples: &[Sample]) {
        let labels = vec![pair("node", &self.node)];
        for sample in samples {
            match sample.key.kind {
                MetricKind::NodeCpuUsage => {
                    self.node_used_cpu.get_or_create(&labels).set(sample.value);
                }
                MetricKind::NodeMemoryUsage => {
                    self.node_used_memory
                        .get_or_create(&labels)
                        .set(sample.value);
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metriccache::SeriesKey;
    use crate::metricsadvisor::parse::{PsiLine, PsiStats};
    use apis::extension::{PriorityClass, QoSClass};
    use std::time::UNIX_EPOCH;

    fn pod() -> PodMeta {
        PodMeta {
            uid: "uid-1".into(),
            namespace: "ns".into(),
            name: "web".into(),
            qos: QoSClass::LS,
            kube_qos: crate::system::cgroup::QosTier::Burstable,
            priority: PriorityClass::Prod,
            containers: vec![],
        }
    }

    #[test]
    fn node_usage_and_psi_use_upstream_names_and_labels() {
        let registry = MetricsRegistry::new("koordlet");
        let metrics = AdvisorMetrics::register(&registry, "node-a");
        metrics.record_round(&[
            Sample::new(SeriesKey::node(MetricKind::NodeCpuUsage), UNIX_EPOCH, 1.25),
            Sample::new(
                SeriesKey::node(MetricKind::NodeMemoryUsage),
                UNIX_EPOCH,
                2048.0,
            ),
        ]);
        let line = PsiLine {
            avg10: 1.5,
            avg60: 0.5,
            avg300: 0.25,
            total_us: 1,
        };
        let psi = PsiByResource {
            cpu: PsiStats {
                some: line,
                full: None,
            },
            memory: PsiStats {
                some: line,
                full: Some(line),
            },
            io: PsiStats {
                some: line,
                full: Some(line),
            },
        };
        let owner = PsiOwner::container(&pod(), "main", &Arc::from("containerd://abc"));
        metrics
            .psi_recorder()
            .replace_all(&[(PsiOwner::pod(&pod()), psi), (owner, psi)]);

        let body = registry.encode().unwrap();
        assert!(
            body.contains("koordlet_node_used_cpu_cores{node=\"node-a\"} 1.25"),
            "{body}"
        );
        assert!(
            body.contains("koordlet_node_used_memory_bytes{node=\"node-a\"} 2048.0"),
            "{body}"
        );
        assert!(body.contains(
            "koordlet_pod_psi{node=\"node-a\",pod_uid=\"uid-1\",pod_name=\"web\",pod_namespace=\"ns\",psi_resource_type=\"cpu\",psi_precision=\"avg10\",psi_degree=\"some\",cpu_full_supported=\"false\"} 1.5"
        ), "{body}");
        assert!(body.contains(
            "koordlet_container_psi{node=\"node-a\",container_id=\"containerd://abc\",container_name=\"main\",pod_uid=\"uid-1\",pod_name=\"web\",pod_namespace=\"ns\",psi_resource_type=\"mem\",psi_precision=\"avg300\",psi_degree=\"full\",cpu_full_supported=\"true\"} 0.25"
        ), "{body}");
        // No full series for cpu when the kernel does not report it.
        assert!(
            !body.contains("psi_resource_type=\"cpu\",psi_precision=\"avg10\",psi_degree=\"full\"")
        );

        // A round without the pod removes its series.
        metrics.psi_recorder().replace_all(&[]);
        let body = registry.encode().unwrap();
        assert!(!body.contains("koordlet_pod_psi{"), "{body}");
    }
}
