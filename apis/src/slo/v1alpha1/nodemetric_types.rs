//! NodeMetric: resource usage koordlet reports for its node and the pods on it
//! (upstream `nodemetric_types.go`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use super::resources::ResourceMap;
use super::slo_extension::ExtensionsMap;
use crate::extension::{PriorityClass, QoSClass};
use crate::wire_enum::wire_enum;

wire_enum! {
    /// How node memory usage is computed.
    pub enum NodeMemoryCollectPolicy open listed {
        /// Usage excluding the page cache (the default).
        UsageWithoutPageCache = "usageWithoutPageCache",
        /// Usage including the active (hot) page cache.
        UsageWithHotPageCache = "usageWithHotPageCache",
        /// Usage including the whole page cache.
        UsageWithPageCache = "usageWithPageCache",
    }
}

/// Usage of the node as a whole (upstream `NodeMetricInfo`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetricInfo {
    /// Total usage of the node.
    #[serde(default, skip_serializing_if = "ResourceMap::is_empty")]
    pub node_usage: ResourceMap,
    /// Node usage aggregated over the configured windows, once enough samples exist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregated_node_usages: Vec<AggregatedUsage>,
    /// Usage of system daemons and the kernel: node usage minus pods and host applications.
    #[serde(default, skip_serializing_if = "ResourceMap::is_empty")]
    pub system_usage: ResourceMap,
    /// System usage aggregated over the configured windows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregated_system_usages: Vec<AggregatedUsage>,
    /// Usage per NUMA node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numa_usages: Vec<NUMAUsage>,
}

/// Usage of one NUMA node (upstream `NUMAUsage`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NUMAUsage {
    /// Required, as in upstream's schema.
    #[serde(rename = "numaNodeID")]
    pub numa_node_id: i32,
    #[serde(default, skip_serializing_if = "ResourceMap::is_empty")]
    pub node_usage: ResourceMap,
    #[serde(default, skip_serializing_if = "ResourceMap::is_empty")]
    pub system_usage: ResourceMap,
}

/// Usage statistics over one window (upstream `AggregatedUsage`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregatedUsage {
    /// Keyed by aggregation type: `avg`, `p50`, `p90`, `p95`, `p99`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub usage: BTreeMap<String, ResourceMap>,
    /// The window, as a Go duration string such as `"5m0s"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
}

/// Usage of one pod (upstream `PodMetricInfo`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMetricInfo {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "ResourceMap::is_empty")]
    pub pod_usage: ResourceMap,
    /// Koordinator priority class name of the pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub priority: String,
    /// Koordinator QoS class name of the pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub qos: String,
    /// Third-party extensions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<ExtensionsMap>,
}

impl PodMetricInfo {
    /// The QoS class; [`QoSClass::None`] when empty or unknown.
    pub fn qos_class(&self) -> QoSClass {
        QoSClass::from_name(&self.qos)
    }

    /// The priority class; [`PriorityClass::None`] when empty or unknown.
    pub fn priority_class(&self) -> PriorityClass {
        PriorityClass::from_name(&self.priority)
    }
}

/// Usage of one out-of-band application (upstream `HostApplicationMetricInfo`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostApplicationMetricInfo {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "ResourceMap::is_empty")]
    pub usage: ResourceMap,
    /// Koordinator priority class name of the application.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub priority: String,
    /// Koordinator QoS class name of the application.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub qos: String,
}

/// How koordlet collects and reports metrics (upstream `NodeMetricCollectPolicy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetricCollectPolicy {
    /// Aggregation window of the reported usage, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate_duration_seconds: Option<i64>,
    /// Report period, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_interval_seconds: Option<i64>,
    /// Windows of the aggregated node usages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_aggregate_policy: Option<AggregatePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_memory_collect_policy: Option<NodeMemoryCollectPolicy>,
}

/// Aggregation windows (upstream `AggregatePolicy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregatePolicy {
    /// Go duration strings such as `"5m"` or `"5m0s"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub durations: Vec<String>,
}

/// Reclaimable resources of a priority band (upstream `ReclaimableMetric`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimableMetric {
    #[serde(default, skip_serializing_if = "ResourceMap::is_empty")]
    pub resource: ResourceMap,
}

/// Predicted peak usage of a priority band (upstream `PeakMetric`); already
/// includes system usage and the safety margin.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeakMetric {
    #[serde(default, skip_serializing_if = "ResourceMap::is_empty")]
    pub resource: ResourceMap,
}

/// Observed usage of the node and its pods (upstream `NodeMetricStatus`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetricStatus {
    /// When koordlet last updated this object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_metric: Option<NodeMetricInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods_metric: Vec<PodMetricInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_application_metric: Vec<HostApplicationMetricInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prod_reclaimable_metric: Option<ReclaimableMetric>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prod_peak_metric: Option<PeakMetric>,
}

/// Desired collection policy of one node's metrics (upstream `NodeMetricSpec`).
/// The NodeMetric is named after its node.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
#[kube(
    group = "slo.koordinator.sh",
    version = "v1alpha1",
    kind = "NodeMetric",
    doc = "NodeMetric holds the resource usage koordlet reports for one node; it is named after the node.",
    plural = "nodemetrics",
    singular = "nodemetric",
    status = "NodeMetricStatus",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetricSpec {
    /// Upstream's Go field is `CollectPolicy`; the JSON key is `metricCollectPolicy`.
    #[serde(
        rename = "metricCollectPolicy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub collect_policy: Option<NodeMetricCollectPolicy>,
}

/// The wire fields of [`NodeMetricSpec`]; a separate type so that `spec: null`
/// (upstream's sample leaves the spec empty) is accepted.
#[derive(Deserialize)]
struct NodeMetricSpecFields {
    #[serde(rename = "metricCollectPolicy", default)]
    collect_policy: Option<NodeMetricCollectPolicy>,
}

impl<'de> Deserialize<'de> for NodeMetricSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = Option::<NodeMetricSpecFields>::deserialize(deserializer)?;
        Ok(Self {
            collect_policy: fields.and_then(|fields| fields.collect_policy),
        })
    }
}
