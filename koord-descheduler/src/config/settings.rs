//! A loaded configuration as the decision cores read it: each profile
//! reduced to its plugins and their converted, defaulted settings.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::types::*;

/// A loaded, defaulted and validated configuration.
#[derive(Clone, Debug)]
pub struct Configuration {
    /// The file as upstream would see it after defaulting (plugin args
    /// included), for `--write-config-to`.
    pub file: DeschedulerConfiguration,
    pub profiles: Vec<Profile>,
}

/// One profile, reduced to what the cores read.
#[derive(Clone, Debug)]
pub struct Profile {
    pub name: String,
    pub node_selector: Option<LabelSelector>,
    pub plugins: Plugins,
    /// Present when `LowNodeLoad` is an enabled balance plugin.
    pub low_node_load: Option<LowNodeLoadConfig>,
    pub migration_controller: MigrationControllerArgs,
}

impl Profile {
    /// Enabled plugin names of every extension point, for the start-up log.
    pub fn enabled_plugins(&self) -> Vec<String> {
        let mut names: Vec<String> = [
            &self.plugins.deschedule,
            &self.plugins.balance,
            &self.plugins.evict,
            &self.plugins.filter,
        ]
        .into_iter()
        .flat_map(|set| set.enabled.iter().map(|plugin| plugin.name.clone()))
        .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// LowNodeLoad's settings after upstream's conversion: the top-level
/// thresholds become the first pool, `__default_node_pool__`.
#[derive(Clone, Debug, PartialEq)]
pub struct LowNodeLoadConfig {
    pub paused: bool,
    pub dry_run: bool,
    /// Validated to be non-negative.
    pub number_of_nodes: i32,
    pub node_metric_expiration_seconds: Option<i64>,
    pub evictable_namespaces: Option<Namespaces>,
    pub pod_selectors: Vec<LabelSelector>,
    pub node_fit: bool,
    pub detector_cache_timeout: Duration,
    pub node_pools: Vec<NodePoolConfig>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NodePoolConfig {
    pub name: String,
    pub node_selector: Option<LabelSelector>,
    pub use_deviation_thresholds: bool,
    pub low_thresholds: ResourceThresholds,
    pub high_thresholds: ResourceThresholds,
    pub prod_low_thresholds: ResourceThresholds,
    pub prod_high_thresholds: ResourceThresholds,
    pub resource_weights: ResourceWeights,
    pub anomaly_condition: Option<AnomalyCondition>,
}

/// A pool's anomaly condition with its defaults applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnomalyCondition {
    pub timeout: Duration,
    pub consecutive_abnormalities: u32,
    pub consecutive_normalities: u32,
}
