//! The `descheduler/v1alpha2` configuration file as upstream writes it: the
//! JSON/YAML field names of `DeschedulerConfiguration`, its profiles and the
//! args of the plugins this crate reads (`LowNodeLoadArgs`,
//! `MigrationControllerArgs`). Decoding is strict, as upstream's codec is:
//! an unknown or repeated field is an error.

use std::collections::BTreeMap;

use apis::extension::duration::GoDuration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};

/// The `apiVersion` upstream reads.
pub const API_VERSION: &str = "descheduler/v1alpha2";
pub const KIND: &str = "DeschedulerConfiguration";
pub const LOW_NODE_LOAD: &str = "LowNodeLoad";
pub const MIGRATION_CONTROLLER: &str = "MigrationController";

/// The typed args of one profile's known plugins, by index in `pluginConfig`.
#[derive(Clone, Debug, Default)]
pub(crate) struct DecodedArgs {
    pub low_node_load: Option<LowNodeLoadArgs>,
    pub migration_controller: Option<MigrationControllerArgs>,
}

/// Resource name → percentage (upstream `ResourceThresholds`, a float map).
pub type ResourceThresholds = BTreeMap<String, f64>;

/// Resource name → weight.
pub type ResourceWeights = BTreeMap<String, i64>;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeschedulerConfiguration {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default)]
    pub leader_election: LeaderElectionConfiguration,
    #[serde(default)]
    pub client_connection: ClientConnectionConfiguration,
    /// `DebuggingConfiguration`, inlined upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_profiling: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_contention_profiling: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthz_bind_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_bind_address: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero_duration")]
    pub descheduling_interval: GoDuration,
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<DeschedulerProfile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_no_of_pods_to_evict_per_node: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_no_of_pods_to_evict_per_namespace: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_no_of_pods_to_evict_total: Option<u32>,
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn is_zero_duration(value: &GoDuration) -> bool {
    value.as_nanos() == 0
}

/// component-base `LeaderElectionConfiguration` (v1alpha1).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElectionConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_elect: Option<bool>,
    #[serde(default, skip_serializing_if = "is_zero_duration")]
    pub lease_duration: GoDuration,
    #[serde(default, skip_serializing_if = "is_zero_duration")]
    pub renew_deadline: GoDuration,
    #[serde(default, skip_serializing_if = "is_zero_duration")]
    pub retry_period: GoDuration,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_lock: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_namespace: String,
}

/// component-base `ClientConnectionConfiguration` (v1alpha1).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientConnectionConfiguration {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kubeconfig: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub accept_content_types: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub content_type: String,
    #[serde(default)]
    pub qps: f32,
    #[serde(default)]
    pub burst: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeschedulerProfile {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugin_config: Vec<PluginConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<Plugins>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plugins {
    #[serde(default)]
    pub deschedule: PluginSet,
    #[serde(default)]
    pub balance: PluginSet,
    #[serde(default)]
    pub evict: PluginSet,
    #[serde(default)]
    pub filter: PluginSet,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSet {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enabled: Vec<Plugin>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<Plugin>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plugin {
    #[serde(default)]
    pub name: String,
}

impl Plugin {
    pub fn named(name: &str) -> Self {
        Plugin {
            name: name.to_string(),
        }
    }
}

/// One plugin's args; the ones this crate knows are decoded into
/// [`PluginArgs`] when the file is loaded, the others are kept as written.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginConfig {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<serde_json::Value>,
}

/// `PriorityThreshold`: a priority value or the name of a PriorityClass.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriorityThreshold {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<i32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// Included or excluded namespaces (at most one of the two lists).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Namespaces {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

/// `LowNodeLoadArgs` (v1alpha2).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LowNodeLoadArgs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number_of_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_metric_expiration_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evictable_namespaces: Option<Namespaces>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_selectors: Vec<LowNodeLoadPodSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_fit: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_deviation_thresholds: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_thresholds: Option<ResourceThresholds>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_thresholds: Option<ResourceThresholds>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prod_high_thresholds: Option<ResourceThresholds>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prod_low_thresholds: Option<ResourceThresholds>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_weights: Option<ResourceWeights>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anomaly_condition: Option<LoadAnomalyCondition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detector_cache_timeout: Option<GoDuration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_pools: Vec<LowNodeLoadNodePool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LowNodeLoadNodePool {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub use_deviation_thresholds: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_thresholds: Option<ResourceThresholds>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_thresholds: Option<ResourceThresholds>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prod_high_thresholds: Option<ResourceThresholds>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prod_low_thresholds: Option<ResourceThresholds>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_weights: Option<ResourceWeights>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anomaly_condition: Option<LoadAnomalyCondition>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LowNodeLoadPodSelector {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadAnomalyCondition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
    #[serde(default)]
    pub consecutive_abnormalities: u32,
    #[serde(default)]
    pub consecutive_normalities: u32,
}

/// `Float64OrString` (evictQPS): `10`, `0.5` or `"10"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FloatOrString {
    Float(f64),
    String(String),
}

impl FloatOrString {
    /// The number; a string that is not one counts as 0 (upstream `FloatValue`).
    pub fn float_value(&self) -> f64 {
        match self {
            FloatOrString::Float(value) => *value,
            FloatOrString::String(text) => text.trim().parse().unwrap_or(0.0),
        }
    }
}

/// `MigrationObjectLimiter`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MigrationObjectLimiter {
    #[serde(default)]
    pub duration: GoDuration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_migrating: Option<IntOrString>,
    #[serde(default)]
    pub burst: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArbitrationArgs {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<GoDuration>,
}

/// `MigrationControllerArgs` (v1alpha2).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MigrationControllerArgs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_reconciles: Option<i32>,
    #[serde(default)]
    pub evict_failed_bare_pods: bool,
    #[serde(default)]
    pub evict_all_bare_pods: bool,
    #[serde(default)]
    pub evict_local_storage_pods: bool,
    #[serde(default)]
    pub evict_system_critical_pods: bool,
    #[serde(default)]
    pub ignore_pvc_pods: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_threshold: Option<PriorityThreshold>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Namespaces>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub node_fit: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_selector: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_eviction_gates: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_migrating_globally: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_migrating_per_node: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_migrating_per_namespace: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_migrating_per_workload: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable_per_workload: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_check_expected_replicas: Option<bool>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub object_limiters: BTreeMap<String, MigrationObjectLimiter>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub default_job_mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_job_ttl: Option<GoDuration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scheduler_names: Vec<String>,
    #[serde(default, rename = "evictQPS", skip_serializing_if = "Option::is_none")]
    pub evict_qps: Option<FloatOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evict_burst: Option<i32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub eviction_policy: String,
    /// `metav1.DeleteOptions`, kept as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_delete_options: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arbitration_args: Option<ArbitrationArgs>,
}
