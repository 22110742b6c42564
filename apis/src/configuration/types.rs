//! The JSON shapes of each `slo-controller-config` key (upstream
//! `apis/configuration/slo_controller_config.go`).
//!
//! Node-level entries (`nodeStrategies[]`, `nodeConfigs[]`) carry their
//! strategy inline next to `name` and `nodeSelector`, as upstream's embedded Go
//! structs do; here that is `#[serde(flatten)]`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};

use crate::slo::v1alpha1::{
    AggregatePolicy, CPUBurstStrategy, HostApplicationSpec, NodeMemoryCollectPolicy,
    ResourceQOSStrategy, ResourceThresholdStrategy, SystemStrategy,
};
use crate::wire_enum::wire_enum;

/// Identifies a node-level entry and the nodes it applies to (upstream
/// `NodeCfgProfile`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCfgProfile {
    /// A handle for tools; uniqueness is only enforced when asked for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// An absent selector matches no node; an empty one matches every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
}

// ---------------------------------------------------------------------------
// colocation-config
// ---------------------------------------------------------------------------

wire_enum! {
    /// How batch (or mid) allocatable is derived from the higher-priority pods.
    pub enum CalculatePolicy open {
        /// From their usage: unused requests are over-committed (the default).
        Usage = "usage",
        /// From their requests: nothing is over-committed.
        Request = "request",
        /// From max(usage, request) per pod.
        MaxUsageRequest = "maxUsageRequest",
    }
}

wire_enum! {
    /// How mid-tier resources are computed.
    pub enum MidReclaimMode open {
        /// A fixed share of the node (`midStatic*ReservedPercent`).
        Static = "static",
    }
}

/// Colocation (batch and mid resource) strategy (upstream `ColocationStrategy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ColocationStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_aggregate_duration_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_report_interval_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_aggregate_policy: Option<AggregatePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_memory_collect_policy: Option<NodeMemoryCollectPolicy>,
    /// Share (percent) of node CPU that prod pods may be assumed to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_reclaim_threshold_percent: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_calculate_policy: Option<CalculatePolicy>,
    /// Share (percent) of node memory that prod pods may be assumed to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_reclaim_threshold_percent: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_calculate_policy: Option<CalculatePolicy>,
    /// Batch resources are zeroed when the NodeMetric is older than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degrade_time_minutes: Option<i64>,
    /// Node extended resources are rewritten at least this often.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_time_threshold_seconds: Option<i64>,
    /// Relative change of a resource that forces a node update, in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_diff_threshold: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mid_reclaim_mode: Option<MidReclaimMode>,
    /// Cap of mid CPU, in percent of node allocatable.
    #[serde(
        rename = "midCPUThresholdPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub mid_cpu_threshold_percent: Option<i64>,
    /// Cap of mid memory, in percent of node allocatable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mid_memory_threshold_percent: Option<i64>,
    /// Share (percent) of unallocated prod resources added to mid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mid_unallocated_percent: Option<i64>,
    /// Static mid CPU, in percent of node capacity (static mode).
    #[serde(
        rename = "midStaticCPUReservedPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub mid_static_cpu_reserved_percent: Option<i64>,
    /// Static mid memory, in percent of node capacity (static mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mid_static_memory_reserved_percent: Option<i64>,
    /// Cap of batch CPU, in percent of node total; no cap when unset.
    #[serde(
        rename = "batchCPUThresholdPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub batch_cpu_threshold_percent: Option<i64>,
    /// Cap of batch memory, in percent of node total; no cap when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_memory_threshold_percent: Option<i64>,
    /// Third-party extension fields (upstream `ColocationStrategyExtender`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extensions: BTreeMap<String, serde_json::Value>,
}

/// The `colocation-config` key (upstream `ColocationCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ColocationCfg {
    #[serde(flatten)]
    pub strategy: ColocationStrategy,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_configs: Vec<NodeColocationCfg>,
}

/// A node-level colocation strategy (upstream `NodeColocationCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeColocationCfg {
    #[serde(flatten)]
    pub profile: NodeCfgProfile,
    #[serde(flatten)]
    pub strategy: ColocationStrategy,
}

// ---------------------------------------------------------------------------
// resource-threshold-config, resource-qos-config, cpu-burst-config, system-config
// ---------------------------------------------------------------------------

/// The `resource-threshold-config` key (upstream `ResourceThresholdCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceThresholdCfg {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_strategy: Option<ResourceThresholdStrategy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_strategies: Vec<NodeResourceThresholdStrategy>,
}

/// A node-level threshold strategy (upstream `NodeResourceThresholdStrategy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeResourceThresholdStrategy {
    #[serde(flatten)]
    pub profile: NodeCfgProfile,
    #[serde(flatten)]
    pub strategy: ResourceThresholdStrategy,
}

/// The `resource-qos-config` key (upstream `ResourceQOSCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQOSCfg {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_strategy: Option<ResourceQOSStrategy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_strategies: Vec<NodeResourceQOSStrategy>,
}

/// A node-level resource QoS strategy (upstream `NodeResourceQOSStrategy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeResourceQOSStrategy {
    #[serde(flatten)]
    pub profile: NodeCfgProfile,
    #[serde(flatten)]
    pub strategy: ResourceQOSStrategy,
}

/// The `cpu-burst-config` key (upstream `CPUBurstCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CPUBurstCfg {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_strategy: Option<CPUBurstStrategy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_strategies: Vec<NodeCPUBurstCfg>,
}

/// A node-level CPU burst strategy (upstream `NodeCPUBurstCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeCPUBurstCfg {
    #[serde(flatten)]
    pub profile: NodeCfgProfile,
    #[serde(flatten)]
    pub strategy: CPUBurstStrategy,
}

/// The `system-config` key (upstream `SystemCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SystemCfg {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_strategy: Option<SystemStrategy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_strategies: Vec<NodeSystemStrategy>,
}

/// A node-level system strategy (upstream `NodeSystemStrategy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSystemStrategy {
    #[serde(flatten)]
    pub profile: NodeCfgProfile,
    #[serde(flatten)]
    pub strategy: SystemStrategy,
}

// ---------------------------------------------------------------------------
// host-application-config
// ---------------------------------------------------------------------------

/// The `host-application-config` key (upstream `HostApplicationCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostApplicationCfg {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applications: Vec<HostApplicationSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_configs: Vec<NodeHostApplicationCfg>,
}

/// Host applications of the matching nodes; replaces the cluster list there
/// (upstream `NodeHostApplicationCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeHostApplicationCfg {
    #[serde(flatten)]
    pub profile: NodeCfgProfile,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applications: Vec<HostApplicationSpec>,
}

// ---------------------------------------------------------------------------
// cpu-normalization-config
// ---------------------------------------------------------------------------

/// CPU normalization strategy (upstream `CPUNormalizationStrategy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CPUNormalizationStrategy {
    /// False removes the ratio from nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Ratio of CPU models missing from `ratioModel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_ratio: Option<f64>,
    /// Ratios keyed by the CPU model name koordlet reports.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ratio_model: BTreeMap<String, ModelRatioCfg>,
}

/// Normalization ratios of one CPU model by hyper-threading and turbo state
/// (upstream `ModelRatioCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelRatioCfg {
    /// Neither hyper-threading nor turbo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hyper_thread_enabled_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turbo_enabled_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hyper_thread_turbo_enabled_ratio: Option<f64>,
}

/// The `cpu-normalization-config` key (upstream `CPUNormalizationCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CPUNormalizationCfg {
    #[serde(flatten)]
    pub strategy: CPUNormalizationStrategy,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_configs: Vec<NodeCPUNormalizationCfg>,
}

/// A node-level CPU normalization strategy (upstream `NodeCPUNormalizationCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeCPUNormalizationCfg {
    #[serde(flatten)]
    pub profile: NodeCfgProfile,
    #[serde(flatten)]
    pub strategy: CPUNormalizationStrategy,
}

// ---------------------------------------------------------------------------
// resource-amplification-config
// ---------------------------------------------------------------------------

/// Resource amplification strategy (upstream `ResourceAmplificationStrategy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAmplificationStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Ratio (at least 1) by which each resource's allocatable is amplified.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_amplification_ratio: BTreeMap<String, f64>,
}

/// The `resource-amplification-config` key (upstream `ResourceAmplificationCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAmplificationCfg {
    #[serde(flatten)]
    pub strategy: ResourceAmplificationStrategy,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_configs: Vec<NodeResourceAmplificationCfg>,
}

/// A node-level amplification strategy (upstream `NodeResourceAmplificationCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeResourceAmplificationCfg {
    #[serde(flatten)]
    pub profile: NodeCfgProfile,
    #[serde(flatten)]
    pub strategy: ResourceAmplificationStrategy,
}

// ---------------------------------------------------------------------------
// Third-party extension configs
// ---------------------------------------------------------------------------

/// Configuration of third-party NodeSLO extensions (upstream `ExtensionCfgMap`).
///
/// As with `ExtensionsMap`, upstream's `json:",inline"` tag is ignored by Go,
/// so the map sits under the Go field name `Object`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtensionCfgMap {
    #[serde(rename = "Object", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub object: BTreeMap<String, ExtensionCfg>,
}

/// One extension's cluster and node strategies (upstream `ExtensionCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionCfg {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_strategy: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_strategies: Vec<NodeExtensionStrategy>,
}

/// One extension's node-level strategy (upstream `NodeExtensionStrategy`); the
/// strategy sits under the Go field name `NodeStrategy` for the same reason.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeExtensionStrategy {
    #[serde(flatten)]
    pub profile: NodeCfgProfile,
    #[serde(
        rename = "NodeStrategy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub node_strategy: Option<serde_json::Value>,
}
