//! Strategy merging and per-node strategy selection.
//!
//! Upstream merges by marshalling the overlay to JSON and unmarshalling it onto
//! a copy of the base, so: a field the overlay leaves unset keeps the base
//! value, nested objects merge field by field, maps merge key by key (values
//! replaced), and lists and scalars are replaced. [`Merge`] implements exactly
//! that, without the JSON round trip.
//!
//! A node's effective strategy is `default ← clusterStrategy ← the first
//! nodeStrategy whose nodeSelector matches the node's labels`; entries with an
//! absent or malformed selector are skipped, as upstream does.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::defaults::{
    default_colocation_strategy, default_cpu_burst_strategy, default_cpu_normalization_cfg,
    default_resource_amplification_cfg, default_resource_qos_strategy,
    default_resource_threshold_strategy, default_system_strategy,
};
use super::selector::label_selector_matches;
use super::types::{
    CPUBurstCfg, CPUNormalizationCfg, CPUNormalizationStrategy, CalculatePolicy, ColocationCfg,
    ColocationStrategy, HostApplicationCfg, MidReclaimMode, ModelRatioCfg, NodeCfgProfile,
    ResourceAmplificationCfg, ResourceAmplificationStrategy, ResourceQOSCfg, ResourceThresholdCfg,
    SystemCfg,
};
use crate::slo::v1alpha1::{
    AggregatePolicy, BlkIOQOS, BlkIOQOSCfg, CPUBurstConfig, CPUBurstPolicy, CPUBurstStrategy,
    CPUEvictPolicy, CPUQOS, CPUQOSCfg, CPUQOSPolicy, CPUSuppressPolicy, ExtensionsMap,
    HostApplicationSpec, MemoryQOS, MemoryQOSCfg, NETQOSPolicy, NetworkQOS, NetworkQOSCfg,
    NodeMemoryCollectPolicy, ResctrlQOS, ResctrlQOSCfg, ResourceQOS, ResourceQOSPolicies,
    ResourceQOSStrategy, ResourceThresholdStrategy, SystemStrategy,
};

/// Overlays one configuration value onto another, upstream's way.
pub trait Merge {
    /// Applies every field `overlay` sets onto `self`.
    fn merge_from(&mut self, overlay: &Self);
}

/// `base` with `overlay` applied, leaving both untouched.
pub fn merged<T: Merge + Clone>(base: &T, overlay: &T) -> T {
    let mut out = base.clone();
    out.merge_from(overlay);
    out
}

impl<T: Merge + Clone> Merge for Option<T> {
    fn merge_from(&mut self, overlay: &Self) {
        match (self.as_mut(), overlay) {
            (_, None) => {}
            (None, Some(value)) => *self = Some(value.clone()),
            (Some(base), Some(value)) => base.merge_from(value),
        }
    }
}

/// Lists are replaced when the overlay has any element (Go omits empty ones).
impl<T: Clone> Merge for Vec<T> {
    fn merge_from(&mut self, overlay: &Self) {
        if !overlay.is_empty() {
            self.clone_from(overlay);
        }
    }
}

/// Maps merge key by key; a value of the overlay replaces the base's.
impl<V: Clone> Merge for BTreeMap<String, V> {
    fn merge_from(&mut self, overlay: &Self) {
        for (key, value) in overlay {
            self.insert(key.clone(), value.clone());
        }
    }
}

macro_rules! merge_by_replacing {
    ($($ty:ty),+ $(,)?) => {
        $(impl Merge for $ty {
            fn merge_from(&mut self, overlay: &Self) {
                self.clone_from(overlay);
            }
        })+
    };
}

merge_by_replacing!(
    bool,
    i32,
    i64,
    f64,
    Quantity,
    IntOrString,
    CPUQOSPolicy,
    NETQOSPolicy,
    CPUSuppressPolicy,
    CPUEvictPolicy,
    CPUBurstPolicy,
    NodeMemoryCollectPolicy,
    CalculatePolicy,
    MidReclaimMode,
);

macro_rules! merge_fields {
    ($($ty:ty { $($field:ident),+ $(,)? })+) => {
        $(impl Merge for $ty {
            fn merge_from(&mut self, overlay: &Self) {
                $( self.$field.merge_from(&overlay.$field); )+
            }
        })+
    };
}

merge_fields! {
    CPUQOS { group_identity, sched_idle, core_expeller }
    CPUQOSCfg { enable, cpu_qos }
    MemoryQOS {
        min_limit_percent, low_limit_percent, throttling_percent, wmark_ratio,
        wmark_scale_permill, wmark_min_adj, priority_enable, priority, oom_kill_group,
        page_cache_enable, page_cache_limit_percent, page_cache_limit_size,
        page_cache_reclaim_sync,
    }
    MemoryQOSCfg { enable, memory_qos }
    BlkIOQOS { blocks }
    BlkIOQOSCfg { enable, blkio_qos }
    ResctrlQOS { cat_range_start_percent, cat_range_end_percent, mba_percent }
    ResctrlQOSCfg { enable, resctrl_qos }
    NetworkQOS { ingress_request, ingress_limit, egress_request, egress_limit }
    NetworkQOSCfg { enable, network_qos }
    ResourceQOS { cpu_qos, memory_qos, blkio_qos, resctrl_qos, network_qos }
    ResourceQOSPolicies { cpu_policy, net_qos_policy }
    ResourceQOSStrategy { policies, lsr_class, ls_class, be_class, system_class, cgroup_root }
    ResourceThresholdStrategy {
        enable, cpu_suppress_threshold_percent, cpu_suppress_min_percent, cpu_suppress_policy,
        memory_evict_threshold_percent, memory_evict_lower_percent,
        memory_allocatable_evict_threshold_percent, memory_allocatable_evict_lower_percent,
        cpu_evict_be_satisfaction_upper_percent, cpu_evict_be_satisfaction_lower_percent,
        cpu_evict_be_usage_threshold_percent, cpu_evict_time_window_seconds,
        cpu_evict_threshold_percent, cpu_evict_lower_percent,
        cpu_allocatable_evict_threshold_percent, cpu_allocatable_evict_lower_percent,
        cpu_evict_policy, evict_enabled_priority_threshold, allocatable_evict_priority_threshold,
    }
    CPUBurstConfig { policy, cpu_burst_percent, cfs_quota_burst_percent, cfs_quota_burst_period_seconds }
    CPUBurstStrategy { cpu_burst_config, share_pool_threshold_percent }
    SystemStrategy {
        min_free_kbytes_factor, watermark_scale_factor, memcg_reap_back_ground,
        sched_group_identity_enabled, sched_idle_saver_wmark, sched_features,
        page_cache_limit_enabled, total_network_bandwidth,
    }
    ExtensionsMap { object }
    AggregatePolicy { durations }
    ColocationStrategy {
        enable, metric_aggregate_duration_seconds, metric_report_interval_seconds,
        metric_aggregate_policy, metric_memory_collect_policy, cpu_reclaim_threshold_percent,
        cpu_calculate_policy, memory_reclaim_threshold_percent, memory_calculate_policy,
        degrade_time_minutes, update_time_threshold_seconds, resource_diff_threshold,
        mid_reclaim_mode, mid_cpu_threshold_percent, mid_memory_threshold_percent,
        mid_unallocated_percent, mid_static_cpu_reserved_percent,
        mid_static_memory_reserved_percent, batch_cpu_threshold_percent,
        batch_memory_threshold_percent, extensions,
    }
    ModelRatioCfg { base_ratio, hyper_thread_enabled_ratio, turbo_enabled_ratio, hyper_thread_turbo_enabled_ratio }
    CPUNormalizationStrategy { enable, default_ratio, ratio_model }
    ResourceAmplificationStrategy { enable, resource_amplification_ratio }
}

/// Whether a node entry applies to a node: its selector is present, well
/// formed and matches (upstream skips entries whose selector does not parse,
/// and an absent selector selects nothing).
pub fn profile_matches(profile: &NodeCfgProfile, node_labels: &BTreeMap<String, String>) -> bool {
    profile
        .node_selector
        .as_ref()
        .is_some_and(|selector| selector_matches(selector, node_labels))
}

fn selector_matches(selector: &LabelSelector, node_labels: &BTreeMap<String, String>) -> bool {
    label_selector_matches(selector, node_labels).unwrap_or(false)
}

/// `default ← cluster ← first matching node entry`.
fn resolve<'a, T, N>(
    default: T,
    cluster: Option<&T>,
    nodes: &'a [N],
    parts: impl Fn(&'a N) -> (&'a NodeCfgProfile, &'a T),
    node_labels: &BTreeMap<String, String>,
) -> T
where
    T: Merge + Clone + 'a,
{
    let mut strategy = default;
    if let Some(cluster) = cluster {
        strategy.merge_from(cluster);
    }
    let matching = nodes
        .iter()
        .map(parts)
        .find(|(profile, _)| profile_matches(profile, node_labels));
    if let Some((_, node_strategy)) = matching {
        strategy.merge_from(node_strategy);
    }
    strategy
}

impl ResourceThresholdCfg {
    /// The effective threshold strategy of a node with these labels.
    pub fn strategy_for_node(
        &self,
        node_labels: &BTreeMap<String, String>,
    ) -> ResourceThresholdStrategy {
        resolve(
            default_resource_threshold_strategy(),
            self.cluster_strategy.as_ref(),
            &self.node_strategies,
            |n| (&n.profile, &n.strategy),
            node_labels,
        )
    }
}

impl ResourceQOSCfg {
    /// The effective resource QoS strategy of a node with these labels.
    pub fn strategy_for_node(&self, node_labels: &BTreeMap<String, String>) -> ResourceQOSStrategy {
        resolve(
            default_resource_qos_strategy(),
            self.cluster_strategy.as_ref(),
            &self.node_strategies,
            |n| (&n.profile, &n.strategy),
            node_labels,
        )
    }
}

impl CPUBurstCfg {
    /// The effective CPU burst strategy of a node with these labels.
    pub fn strategy_for_node(&self, node_labels: &BTreeMap<String, String>) -> CPUBurstStrategy {
        resolve(
            default_cpu_burst_strategy(),
            self.cluster_strategy.as_ref(),
            &self.node_strategies,
            |n| (&n.profile, &n.strategy),
            node_labels,
        )
    }
}

impl SystemCfg {
    /// The effective system strategy of a node with these labels (a node's
    /// bandwidth annotation, which wins over this, is applied by the caller).
    pub fn strategy_for_node(&self, node_labels: &BTreeMap<String, String>) -> SystemStrategy {
        resolve(
            default_system_strategy(),
            self.cluster_strategy.as_ref(),
            &self.node_strategies,
            |n| (&n.profile, &n.strategy),
            node_labels,
        )
    }
}

impl CPUNormalizationCfg {
    /// The effective CPU normalization strategy of a node with these labels.
    pub fn strategy_for_node(
        &self,
        node_labels: &BTreeMap<String, String>,
    ) -> CPUNormalizationStrategy {
        resolve(
            default_cpu_normalization_cfg().strategy,
            Some(&self.strategy),
            &self.node_configs,
            |n| (&n.profile, &n.strategy),
            node_labels,
        )
    }
}

impl ResourceAmplificationCfg {
    /// The effective amplification strategy of a node with these labels.
    pub fn strategy_for_node(
        &self,
        node_labels: &BTreeMap<String, String>,
    ) -> ResourceAmplificationStrategy {
        resolve(
            default_resource_amplification_cfg().strategy,
            Some(&self.strategy),
            &self.node_configs,
            |n| (&n.profile, &n.strategy),
            node_labels,
        )
    }
}

impl HostApplicationCfg {
    /// The host applications of a node: those of the first matching node
    /// config, else the cluster list (lists are not merged).
    pub fn applications_for_node(
        &self,
        node_labels: &BTreeMap<String, String>,
    ) -> &[HostApplicationSpec] {
        self.node_configs
            .iter()
            .find(|config| profile_matches(&config.profile, node_labels))
            .map_or(&self.applications, |config| &config.applications)
    }
}

impl ColocationCfg {
    /// The effective colocation strategy of a node with these labels, before
    /// node metadata overrides ([`apply_node_colocation_overrides`]).
    ///
    /// As upstream, a cluster strategy that fails
    /// [`is_colocation_strategy_valid`] after merging with the defaults is
    /// `None` (the caller keeps its previous configuration), and a node
    /// entry that fails it falls back to the cluster strategy.
    pub fn strategy_for_node(
        &self,
        node_labels: &BTreeMap<String, String>,
    ) -> Option<ColocationStrategy> {
        let cluster = merged(&default_colocation_strategy(), &self.strategy);
        if !is_colocation_strategy_valid(&cluster) {
            return None;
        }
        let node_strategy = self
            .node_configs
            .iter()
            .find(|config| profile_matches(&config.profile, node_labels))
            .map(|config| merged(&cluster, &config.strategy))
            .filter(is_colocation_strategy_valid);
        Some(node_strategy.unwrap_or(cluster))
    }
}

/// Upstream's sanity check of a merged colocation strategy: positive periods
/// and thresholds, percentages of the mid tier within 0..=100.
pub fn is_colocation_strategy_valid(strategy: &ColocationStrategy) -> bool {
    let at_least = |value: Option<i64>, min: i64| value.is_none_or(|v| v >= min);
    let percent = |value: Option<i64>| value.is_none_or(|v| (0..=100).contains(&v));
    at_least(strategy.metric_aggregate_duration_seconds, 1)
        && at_least(strategy.metric_report_interval_seconds, 1)
        && at_least(strategy.cpu_reclaim_threshold_percent, 0)
        && at_least(strategy.mid_static_cpu_reserved_percent, 0)
        && at_least(strategy.memory_reclaim_threshold_percent, 0)
        && at_least(strategy.mid_static_memory_reserved_percent, 0)
        && at_least(strategy.degrade_time_minutes, 1)
        && at_least(strategy.update_time_threshold_seconds, 1)
        && strategy.resource_diff_threshold.is_none_or(|v| v > 0.0)
        && strategy
            .metric_memory_collect_policy
            .as_ref()
            .is_none_or(|policy| !policy.as_str().is_empty())
        && percent(strategy.mid_cpu_threshold_percent)
        && percent(strategy.mid_memory_threshold_percent)
        && percent(strategy.mid_unallocated_percent)
        && at_least(strategy.batch_cpu_threshold_percent, 0)
        && at_least(strategy.batch_memory_threshold_percent, 0)
}

/// Node annotation: a JSON [`ColocationStrategy`] overriding the config for
/// this node.
pub const ANNOTATION_NODE_COLOCATION_STRATEGY: &str = "node.koordinator.sh/colocation-strategy";
/// Node label: CPU reclaim ratio (a float; ×100 gives the percent threshold).
pub const LABEL_CPU_RECLAIM_RATIO: &str = "node.koordinator.sh/cpu-reclaim-ratio";
/// Node label: memory reclaim ratio (a float; ×100 gives the percent threshold).
pub const LABEL_MEMORY_RECLAIM_RATIO: &str = "node.koordinator.sh/memory-reclaim-ratio";
/// Node label: static mid CPU ratio (a float; ×100 gives the percent).
pub const LABEL_MID_STATIC_CPU_RESERVED_RATIO: &str =
    "node.koordinator.sh/mid-static-cpu-reserved-ratio";
/// Node label: static mid memory ratio (a float; ×100 gives the percent).
pub const LABEL_MID_STATIC_MEMORY_RESERVED_RATIO: &str =
    "node.koordinator.sh/mid-static-memory-reserved-ratio";

/// Applies a node's own colocation settings, which win over the ConfigMap:
/// the [`ANNOTATION_NODE_COLOCATION_STRATEGY`] JSON, then the reclaim and
/// static-mid ratio labels. A malformed annotation or label is ignored, as
/// upstream does; the annotation's parse error is returned for logging.
pub fn apply_node_colocation_overrides(
    strategy: &mut ColocationStrategy,
    node_labels: &BTreeMap<String, String>,
    node_annotations: &BTreeMap<String, String>,
) -> Result<(), serde_json::Error> {
    let mut annotation_result = Ok(());
    if let Some(raw) = node_annotations.get(ANNOTATION_NODE_COLOCATION_STRATEGY) {
        match serde_json::from_str::<ColocationStrategy>(raw) {
            Ok(overlay) => strategy.merge_from(&overlay),
            Err(error) => annotation_result = Err(error),
        }
    }
    let ratio_percent = |key: &str| -> Option<i64> {
        let ratio: f64 = node_labels.get(key)?.parse().ok()?;
        // Go truncates toward zero when converting to int64.
        (ratio.is_finite() && ratio >= 0.0).then_some((ratio * 100.0) as i64)
    };
    if let Some(percent) = ratio_percent(LABEL_CPU_RECLAIM_RATIO) {
        strategy.cpu_reclaim_threshold_percent = Some(percent);
    }
    if let Some(percent) = ratio_percent(LABEL_MEMORY_RECLAIM_RATIO) {
        strategy.memory_reclaim_threshold_percent = Some(percent);
    }
    if let Some(percent) = ratio_percent(LABEL_MID_STATIC_CPU_RESERVED_RATIO) {
        strategy.mid_static_cpu_reserved_percent = Some(percent);
    }
    if let Some(percent) = ratio_percent(LABEL_MID_STATIC_MEMORY_RESERVED_RATIO) {
        strategy.mid_static_memory_reserved_percent = Some(percent);
    }
    annotation_result
}
