//! Validation of a parsed `slo-controller-config`, reporting every problem at
//! once with its path, e.g.
//! `resource-threshold-config.nodeStrategies[1].cpuSuppressThresholdPercent: must be within [0,100]`.
//!
//! The checks are those of upstream's ConfigMap admission webhook (the
//! `validate` tags on the API types, node selector and overlap checks, network
//! QoS checks) plus the ranges upstream's NodeSLO CRD schema enforces (so a
//! valid config never renders a NodeSLO the API server rejects), the CPU
//! normalization ratio range and the amplification ratio floor. Deliberate
//! differences from upstream:
//! - an upper bound set without its lower bound (e.g. only
//!   `memoryEvictThresholdPercent`) is accepted; koordlet derives the lower one;
//! - network QoS percentages and quantities are summed separately, and the
//!   quantity total is only checked when `system-config` gives a bandwidth;
//! - values of enum-like fields that upstream does not define are reported.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::SloControllerConfig;
use super::selector::{is_empty_selector, label_selector_matches, validate_label_selector};
use super::types::{
    CPUNormalizationStrategy, ColocationStrategy, NodeCfgProfile, ResourceAmplificationStrategy,
    SystemCfg,
};
use super::{
    COLOCATION_CONFIG_KEY, CPU_BURST_CONFIG_KEY, CPU_LATENCY_PROTECTION_CONFIG_KEY,
    CPU_NORMALIZATION_CONFIG_KEY, CPULatencyProtectionCfg, CPULatencyProtectionCfgError,
    HOST_APPLICATION_CONFIG_KEY, RESOURCE_AMPLIFICATION_CONFIG_KEY, RESOURCE_QOS_CONFIG_KEY,
    RESOURCE_THRESHOLD_CONFIG_KEY, SYSTEM_CONFIG_KEY,
};
use crate::extension::{GoDuration, PriorityClass, QoSClass, QuantityValue};
use crate::slo::v1alpha1::{
    CPUBurstStrategy, HostApplicationSpec, IOCfg, ResourceQOS, ResourceQOSStrategy,
    ResourceThresholdStrategy, SystemStrategy,
};
use crate::wire_enum::WireEnum;

/// Valid range of a CPU normalization ratio.
pub const CPU_NORMALIZATION_RATIO_RANGE: std::ops::RangeInclusive<f64> = 1.0..=5.0;

/// One problem, with the path of the offending field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationError {
    /// `<configmap key>.<json path>`, e.g. `cpu-burst-config.clusterStrategy.policy`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in a configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} problem(s) in slo-controller-config: {}", .errors.len(), join(.errors))]
pub struct ValidationErrors {
    pub errors: Vec<ValidationError>,
}

fn join(errors: &[ValidationError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Switches of the checks upstream makes optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidationOptions {
    /// Node entries must have a name, unique within their key (upstream flag
    /// `--node-strategy-name-need-check`, off by default).
    pub require_node_strategy_names: bool,
}

impl SloControllerConfig {
    /// Validates with upstream's default options.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        self.validate_with(&ValidationOptions::default())
    }

    /// Validates every key present, collecting all problems.
    pub fn validate_with(&self, options: &ValidationOptions) -> Result<(), ValidationErrors> {
        let mut errors = Vec::new();
        let webhook_profiles = ProfileRules {
            selector_required: true,
            check_overlap: true,
            require_names: options.require_node_strategy_names,
        };
        let lenient_profiles = ProfileRules {
            selector_required: false,
            check_overlap: false,
            require_names: false,
        };

        if let Some(cfg) = &self.colocation {
            let key = COLOCATION_CONFIG_KEY;
            Checker::new(&mut errors, key.into()).colocation_strategy(&cfg.strategy);
            for (i, node) in cfg.node_configs.iter().enumerate() {
                Checker::new(&mut errors, format!("{key}.nodeConfigs[{i}]"))
                    .colocation_strategy(&node.strategy);
            }
            let profiles: Vec<_> = cfg.node_configs.iter().map(|n| &n.profile).collect();
            Checker::new(&mut errors, key.into()).profiles(
                "nodeConfigs",
                &profiles,
                &webhook_profiles,
            );
        }

        if let Some(cfg) = &self.resource_threshold {
            let key = RESOURCE_THRESHOLD_CONFIG_KEY;
            if let Some(strategy) = &cfg.cluster_strategy {
                Checker::new(&mut errors, format!("{key}.clusterStrategy"))
                    .threshold_strategy(strategy);
            }
            for (i, node) in cfg.node_strategies.iter().enumerate() {
                Checker::new(&mut errors, format!("{key}.nodeStrategies[{i}]"))
                    .threshold_strategy(&node.strategy);
            }
            let profiles: Vec<_> = cfg.node_strategies.iter().map(|n| &n.profile).collect();
            Checker::new(&mut errors, key.into()).profiles(
                "nodeStrategies",
                &profiles,
                &webhook_profiles,
            );
        }

        if let Some(cfg) = &self.resource_qos {
            let key = RESOURCE_QOS_CONFIG_KEY;
            if let Some(strategy) = &cfg.cluster_strategy {
                let total = self.system.as_ref().and_then(cluster_bandwidth);
                Checker::new(&mut errors, format!("{key}.clusterStrategy"))
                    .qos_strategy(strategy, total);
            }
            for (i, node) in cfg.node_strategies.iter().enumerate() {
                let total = self
                    .system
                    .as_ref()
                    .and_then(|system| node_bandwidth(system, &node.profile));
                Checker::new(&mut errors, format!("{key}.nodeStrategies[{i}]"))
                    .qos_strategy(&node.strategy, total);
            }
            let profiles: Vec<_> = cfg.node_strategies.iter().map(|n| &n.profile).collect();
            Checker::new(&mut errors, key.into()).profiles(
                "nodeStrategies",
                &profiles,
                &webhook_profiles,
            );
        }

        if let Some(cfg) = &self.cpu_burst {
            let key = CPU_BURST_CONFIG_KEY;
            if let Some(strategy) = &cfg.cluster_strategy {
                Checker::new(&mut errors, format!("{key}.clusterStrategy"))
                    .cpu_burst_strategy(strategy);
            }
            for (i, node) in cfg.node_strategies.iter().enumerate() {
                Checker::new(&mut errors, format!("{key}.nodeStrategies[{i}]"))
                    .cpu_burst_strategy(&node.strategy);
            }
            let profiles: Vec<_> = cfg.node_strategies.iter().map(|n| &n.profile).collect();
            Checker::new(&mut errors, key.into()).profiles(
                "nodeStrategies",
                &profiles,
                &webhook_profiles,
            );
        }

        if let Some(cfg) = &self.system {
            let key = SYSTEM_CONFIG_KEY;
            if let Some(strategy) = &cfg.cluster_strategy {
                Checker::new(&mut errors, format!("{key}.clusterStrategy"))
                    .system_strategy(strategy);
            }
            for (i, node) in cfg.node_strategies.iter().enumerate() {
                Checker::new(&mut errors, format!("{key}.nodeStrategies[{i}]"))
                    .system_strategy(&node.strategy);
            }
            let profiles: Vec<_> = cfg.node_strategies.iter().map(|n| &n.profile).collect();
            Checker::new(&mut errors, key.into()).profiles(
                "nodeStrategies",
                &profiles,
                &webhook_profiles,
            );
        }

        if let Some(cfg) = &self.host_application {
            let key = HOST_APPLICATION_CONFIG_KEY;
            Checker::new(&mut errors, key.into()).host_applications(&cfg.applications);
            for (i, node) in cfg.node_configs.iter().enumerate() {
                Checker::new(&mut errors, format!("{key}.nodeConfigs[{i}]"))
                    .host_applications(&node.applications);
            }
            let profiles: Vec<_> = cfg.node_configs.iter().map(|n| &n.profile).collect();
            Checker::new(&mut errors, key.into()).profiles(
                "nodeConfigs",
                &profiles,
                &lenient_profiles,
            );
        }

        if let Some(cfg) = &self.cpu_normalization {
            let key = CPU_NORMALIZATION_CONFIG_KEY;
            Checker::new(&mut errors, key.into()).cpu_normalization_strategy(&cfg.strategy);
            for (i, node) in cfg.node_configs.iter().enumerate() {
                Checker::new(&mut errors, format!("{key}.nodeConfigs[{i}]"))
                    .cpu_normalization_strategy(&node.strategy);
            }
            let profiles: Vec<_> = cfg.node_configs.iter().map(|n| &n.profile).collect();
            Checker::new(&mut errors, key.into()).profiles(
                "nodeConfigs",
                &profiles,
                &lenient_profiles,
            );
        }

        if let Some(cfg) = &self.resource_amplification {
            let key = RESOURCE_AMPLIFICATION_CONFIG_KEY;
            Checker::new(&mut errors, key.into()).amplification_strategy(&cfg.strategy);
            for (i, node) in cfg.node_configs.iter().enumerate() {
                Checker::new(&mut errors, format!("{key}.nodeConfigs[{i}]"))
                    .amplification_strategy(&node.strategy);
            }
            let profiles: Vec<_> = cfg.node_configs.iter().map(|n| &n.profile).collect();
            Checker::new(&mut errors, key.into()).profiles(
                "nodeConfigs",
                &profiles,
                &lenient_profiles,
            );
        }

        // (ours) Kept among the other keys, so parsed here: an invalid
        // strategy is refused at admission like any upstream key, instead of
        // only being skipped by the NodeSLO controller.
        match CPULatencyProtectionCfg::from_other_keys(&self.other_keys) {
            Ok(Some(cfg)) => {
                let profiles: Vec<_> = cfg.node_strategies.iter().map(|n| &n.profile).collect();
                Checker::new(&mut errors, CPU_LATENCY_PROTECTION_CONFIG_KEY.into()).profiles(
                    "nodeStrategies",
                    &profiles,
                    &webhook_profiles,
                );
            }
            Ok(None) => {}
            Err(CPULatencyProtectionCfgError::Value(err)) => errors.push(ValidationError {
                path: CPU_LATENCY_PROTECTION_CONFIG_KEY.into(),
                message: err.to_string(),
            }),
            Err(CPULatencyProtectionCfgError::Strategy { path, message }) => {
                errors.push(ValidationError {
                    path: format!("{CPU_LATENCY_PROTECTION_CONFIG_KEY}.{path}"),
                    message,
                })
            }
        }

        if errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors { errors })
        }
    }
}

/// Total bandwidth the cluster strategy's network requests must fit in.
fn cluster_bandwidth(system: &SystemCfg) -> Option<i128> {
    quantity_units(system.cluster_strategy.as_ref()?)
}

/// Total bandwidth of a QoS node strategy: the system node strategy with the
/// same selector, or the cluster strategy's when system-config has no node
/// strategies (upstream's pairing).
fn node_bandwidth(system: &SystemCfg, profile: &NodeCfgProfile) -> Option<i128> {
    if system.node_strategies.is_empty() {
        return cluster_bandwidth(system);
    }
    system
        .node_strategies
        .iter()
        .find(|node| node.profile.node_selector == profile.node_selector)
        .and_then(|node| quantity_units(&node.strategy))
}

fn quantity_units(strategy: &SystemStrategy) -> Option<i128> {
    let quantity = strategy.total_network_bandwidth.as_ref()?;
    QuantityValue::parse(&quantity.0)
        .ok()
        .map(|v| i128::from(v.value()))
}

/// Which node-profile checks apply to a key.
struct ProfileRules {
    /// The selector must be present and non-empty (webhook-checked keys).
    selector_required: bool,
    /// No two entries may select a common node (webhook-checked keys).
    check_overlap: bool,
    require_names: bool,
}

struct Checker<'a> {
    errors: &'a mut Vec<ValidationError>,
    path: String,
}

impl<'a> Checker<'a> {
    fn new(errors: &'a mut Vec<ValidationError>, path: String) -> Self {
        Checker { errors, path }
    }

    fn at(&self, field: &str) -> String {
        if field.is_empty() {
            self.path.clone()
        } else {
            format!("{}.{field}", self.path)
        }
    }

    fn fail(&mut self, field: &str, message: impl Into<String>) {
        let path = self.at(field);
        self.errors.push(ValidationError {
            path,
            message: message.into(),
        });
    }

    fn within(&mut self, field: &str, value: Option<i64>, min: i64, max: i64) {
        if let Some(value) = value
            && !(min..=max).contains(&value)
        {
            self.fail(field, format!("must be within [{min},{max}], got {value}"));
        }
    }

    fn at_least(&mut self, field: &str, value: Option<i64>, min: i64) {
        if let Some(value) = value
            && value < min
        {
            self.fail(field, format!("must be >= {min}, got {value}"));
        }
    }

    fn above(&mut self, field: &str, value: Option<i64>, bound: i64) {
        if let Some(value) = value
            && value <= bound
        {
            self.fail(field, format!("must be > {bound}, got {value}"));
        }
    }

    fn known<E: WireEnum>(&mut self, field: &str, value: Option<&E>) {
        if let Some(value) = value
            && !value.is_known()
        {
            let allowed = E::KNOWN_VALUES
                .iter()
                .map(|v| format!("{v:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            self.fail(
                field,
                format!("{:?} is not one of {allowed}", value.as_str()),
            );
        }
    }

    /// `upper` must exceed `lower` when both are set; `lower` alone is refused.
    /// Messages name the sibling field by its own name.
    fn ordered(
        &mut self,
        (upper_field, upper): (&str, Option<i64>),
        (lower_field, lower): (&str, Option<i64>),
    ) {
        let last = |field: &str| field.rsplit('.').next().unwrap_or(field).to_owned();
        match (upper, lower) {
            (Some(upper), Some(lower)) if upper <= lower => {
                let message = format!(
                    "must be greater than {} ({lower}), got {upper}",
                    last(lower_field)
                );
                self.fail(upper_field, message);
            }
            (None, Some(_)) => {
                let message = format!("is set but {} is not", last(upper_field));
                self.fail(lower_field, message);
            }
            _ => {}
        }
    }

    fn colocation_strategy(&mut self, s: &ColocationStrategy) {
        self.at_least(
            "metricAggregateDurationSeconds",
            s.metric_aggregate_duration_seconds,
            1,
        );
        self.at_least(
            "metricReportIntervalSeconds",
            s.metric_report_interval_seconds,
            1,
        );
        if let Some(policy) = &s.metric_aggregate_policy {
            for (i, duration) in policy.durations.iter().enumerate() {
                if let Err(error) = GoDuration::parse(duration) {
                    self.fail(
                        &format!("metricAggregatePolicy.durations[{i}]"),
                        error.to_string(),
                    );
                }
            }
        }
        self.known(
            "metricMemoryCollectPolicy",
            s.metric_memory_collect_policy.as_ref(),
        );
        self.at_least(
            "cpuReclaimThresholdPercent",
            s.cpu_reclaim_threshold_percent,
            0,
        );
        self.known("cpuCalculatePolicy", s.cpu_calculate_policy.as_ref());
        self.at_least(
            "memoryReclaimThresholdPercent",
            s.memory_reclaim_threshold_percent,
            0,
        );
        self.known("memoryCalculatePolicy", s.memory_calculate_policy.as_ref());
        self.at_least("degradeTimeMinutes", s.degrade_time_minutes, 1);
        self.at_least(
            "updateTimeThresholdSeconds",
            s.update_time_threshold_seconds,
            1,
        );
        if let Some(value) = s.resource_diff_threshold
            && !(value > 0.0 && value <= 1.0)
        {
            self.fail(
                "resourceDiffThreshold",
                format!("must be within (0,1], got {value}"),
            );
        }
        self.known("midReclaimMode", s.mid_reclaim_mode.as_ref());
        self.within(
            "midCPUThresholdPercent",
            s.mid_cpu_threshold_percent,
            0,
            100,
        );
        self.within(
            "midMemoryThresholdPercent",
            s.mid_memory_threshold_percent,
            0,
            100,
        );
        self.within("midUnallocatedPercent", s.mid_unallocated_percent, 0, 100);
        self.within(
            "midStaticCPUReservedPercent",
            s.mid_static_cpu_reserved_percent,
            0,
            100,
        );
        self.within(
            "midStaticMemoryReservedPercent",
            s.mid_static_memory_reserved_percent,
            0,
            100,
        );
        self.at_least("batchCPUThresholdPercent", s.batch_cpu_threshold_percent, 0);
        self.at_least(
            "batchMemoryThresholdPercent",
            s.batch_memory_threshold_percent,
            0,
        );
    }

    fn threshold_strategy(&mut self, s: &ResourceThresholdStrategy) {
        self.within(
            "cpuSuppressThresholdPercent",
            s.cpu_suppress_threshold_percent,
            0,
            100,
        );
        self.within("cpuSuppressMinPercent", s.cpu_suppress_min_percent, 0, 100);
        self.known("cpuSuppressPolicy", s.cpu_suppress_policy.as_ref());

        self.within(
            "memoryEvictThresholdPercent",
            s.memory_evict_threshold_percent,
            0,
            100,
        );
        self.within(
            "memoryEvictLowerPercent",
            s.memory_evict_lower_percent,
            0,
            100,
        );
        self.ordered(
            (
                "memoryEvictThresholdPercent",
                s.memory_evict_threshold_percent,
            ),
            ("memoryEvictLowerPercent", s.memory_evict_lower_percent),
        );

        let memory_allocatable_upper = s.memory_allocatable_evict_threshold_percent;
        let memory_allocatable_lower = s.memory_allocatable_evict_lower_percent;
        self.at_least(
            "memoryAllocatableEvictThresholdPercent",
            memory_allocatable_upper,
            0,
        );
        self.at_least(
            "memoryAllocatableEvictLowerPercent",
            memory_allocatable_lower,
            0,
        );
        self.ordered(
            (
                "memoryAllocatableEvictThresholdPercent",
                memory_allocatable_upper,
            ),
            (
                "memoryAllocatableEvictLowerPercent",
                memory_allocatable_lower,
            ),
        );

        let satisfaction_upper = s.cpu_evict_be_satisfaction_upper_percent;
        let satisfaction_lower = s.cpu_evict_be_satisfaction_lower_percent;
        self.within(
            "cpuEvictBESatisfactionUpperPercent",
            satisfaction_upper,
            0,
            100,
        );
        self.within(
            "cpuEvictBESatisfactionLowerPercent",
            satisfaction_lower,
            0,
            100,
        );
        self.ordered(
            ("cpuEvictBESatisfactionUpperPercent", satisfaction_upper),
            ("cpuEvictBESatisfactionLowerPercent", satisfaction_lower),
        );
        self.within(
            "cpuEvictBEUsageThresholdPercent",
            s.cpu_evict_be_usage_threshold_percent,
            0,
            100,
        );
        self.above(
            "cpuEvictTimeWindowSeconds",
            s.cpu_evict_time_window_seconds,
            0,
        );

        self.within(
            "cpuEvictThresholdPercent",
            s.cpu_evict_threshold_percent,
            0,
            100,
        );
        self.within("cpuEvictLowerPercent", s.cpu_evict_lower_percent, 0, 100);
        self.ordered(
            ("cpuEvictThresholdPercent", s.cpu_evict_threshold_percent),
            ("cpuEvictLowerPercent", s.cpu_evict_lower_percent),
        );

        let cpu_allocatable_upper = s.cpu_allocatable_evict_threshold_percent;
        let cpu_allocatable_lower = s.cpu_allocatable_evict_lower_percent;
        self.at_least(
            "cpuAllocatableEvictThresholdPercent",
            cpu_allocatable_upper,
            0,
        );
        self.at_least("cpuAllocatableEvictLowerPercent", cpu_allocatable_lower, 0);
        self.ordered(
            ("cpuAllocatableEvictThresholdPercent", cpu_allocatable_upper),
            ("cpuAllocatableEvictLowerPercent", cpu_allocatable_lower),
        );

        self.known("cpuEvictPolicy", s.cpu_evict_policy.as_ref());
        self.within(
            "allocatableEvictPriorityThreshold",
            s.allocatable_evict_priority_threshold.map(i64::from),
            0,
            7999,
        );
    }

    fn qos_strategy(&mut self, s: &ResourceQOSStrategy, total_bandwidth: Option<i128>) {
        if let Some(policies) = &s.policies {
            self.known("policies.cpuPolicy", policies.cpu_policy.as_ref());
            self.known("policies.netQOSPolicy", policies.net_qos_policy.as_ref());
        }
        let classes = [
            ("lsrClass", &s.lsr_class),
            ("lsClass", &s.ls_class),
            ("beClass", &s.be_class),
            ("systemClass", &s.system_class),
            ("cgroupRoot", &s.cgroup_root),
        ];
        for (name, class) in classes {
            if let Some(class) = class {
                self.class_qos(name, class);
            }
        }
        // Upstream sums the requests of the pod classes only.
        let pod_classes = [&s.lsr_class, &s.ls_class, &s.be_class];
        self.network_totals(&pod_classes, total_bandwidth);
    }

    fn class_qos(&mut self, class: &str, q: &ResourceQOS) {
        if let Some(cpu) = &q.cpu_qos {
            let cpu = &cpu.cpu_qos;
            self.within(
                &format!("{class}.cpuQOS.groupIdentity"),
                cpu.group_identity,
                -1,
                2,
            );
            self.within(&format!("{class}.cpuQOS.schedIdle"), cpu.sched_idle, 0, 1);
        }
        if let Some(memory) = &q.memory_qos {
            let m = &memory.memory_qos;
            let field = |name: &str| format!("{class}.memoryQOS.{name}");
            self.within(&field("minLimitPercent"), m.min_limit_percent, 0, 100);
            self.within(&field("lowLimitPercent"), m.low_limit_percent, 0, 100);
            self.within(&field("throttlingPercent"), m.throttling_percent, 0, 100);
            self.within(&field("wmarkRatio"), m.wmark_ratio, 0, 100);
            self.within(&field("wmarkScalePermill"), m.wmark_scale_permill, 1, 1000);
            self.within(&field("wmarkMinAdj"), m.wmark_min_adj, -25, 50);
            self.within(&field("priorityEnable"), m.priority_enable, 0, 1);
            self.within(&field("priority"), m.priority, 0, 12);
            self.within(&field("oomKillGroup"), m.oom_kill_group, 0, 1);
            self.within(
                &field("pageCacheLimitPercent"),
                m.page_cache_limit_percent,
                0,
                100,
            );
        }
        if let Some(blkio) = &q.blkio_qos {
            for (i, block) in blkio.blkio_qos.blocks.iter().enumerate() {
                let prefix = format!("{class}.blkioQOS.blocks[{i}]");
                self.known(&format!("{prefix}.type"), block.block_type.as_ref());
                self.io_cfg(&format!("{prefix}.ioCfg"), &block.io_cfg);
            }
        }
        if let Some(resctrl) = &q.resctrl_qos {
            let r = &resctrl.resctrl_qos;
            let start = format!("{class}.resctrlQOS.catRangeStartPercent");
            let end = format!("{class}.resctrlQOS.catRangeEndPercent");
            self.within(&start, r.cat_range_start_percent, 0, 100);
            self.within(&end, r.cat_range_end_percent, 0, 100);
            self.ordered(
                (&end, r.cat_range_end_percent),
                (&start, r.cat_range_start_percent),
            );
            self.within(
                &format!("{class}.resctrlQOS.mbaPercent"),
                r.mba_percent,
                0,
                100,
            );
        }
        if let Some(network) = &q.network_qos {
            let n = &network.network_qos;
            let bounds = [
                ("ingressRequest", &n.ingress_request),
                ("ingressLimit", &n.ingress_limit),
                ("egressRequest", &n.egress_request),
                ("egressLimit", &n.egress_limit),
            ];
            for (name, value) in bounds {
                self.percent_or_quantity(&format!("{class}.networkQOS.{name}"), value.as_ref());
            }
        }
    }

    fn io_cfg(&mut self, prefix: &str, io: &IOCfg) {
        let field = |name: &str| format!("{prefix}.{name}");
        self.at_least(&field("readIOPS"), io.read_iops, 0);
        self.at_least(&field("writeIOPS"), io.write_iops, 0);
        self.at_least(&field("readBPS"), io.read_bps, 0);
        self.at_least(&field("writeBPS"), io.write_bps, 0);
        self.within(&field("ioWeightPercent"), io.io_weight_percent, 1, 100);
        self.within(
            &field("readLatencyPercent"),
            io.read_latency_percent,
            0,
            100,
        );
        self.within(
            &field("writeLatencyPercent"),
            io.write_latency_percent,
            0,
            100,
        );
        self.at_least(&field("modelReadBPS"), io.model_read_bps, 1);
        self.at_least(&field("modelWriteBPS"), io.model_write_bps, 1);
        self.at_least(&field("modelReadSeqIOPS"), io.model_read_seq_iops, 1);
        self.at_least(&field("modelWriteSeqIOPS"), io.model_write_seq_iops, 1);
        self.at_least(&field("modelReadRandIOPS"), io.model_read_rand_iops, 1);
        self.at_least(&field("modelWriteRandIOPS"), io.model_write_rand_iops, 1);
    }

    fn percent_or_quantity(&mut self, field: &str, value: Option<&IntOrString>) {
        match value {
            Some(IntOrString::Int(percent)) if !(0..=100).contains(percent) => self.fail(
                field,
                format!("must be a percentage within [0,100] or a quantity, got {percent}"),
            ),
            Some(IntOrString::String(text)) => {
                if let Err(error) = QuantityValue::parse(text) {
                    self.fail(
                        field,
                        format!("must be a percentage or a quantity: {error}"),
                    );
                }
            }
            _ => {}
        }
    }

    /// Requests of the pod classes use one form, and their totals fit: at most
    /// 100 % as percentages, at most the node bandwidth as quantities.
    fn network_totals(&mut self, classes: &[&Option<ResourceQOS>], total_bandwidth: Option<i128>) {
        let networks: Vec<_> = classes
            .iter()
            .filter_map(|class| class.as_ref()?.network_qos.as_ref())
            .map(|cfg| &cfg.network_qos)
            .collect();
        let ingress: Vec<IntOrString> = networks
            .iter()
            .filter_map(|n| n.ingress_request.clone())
            .collect();
        let egress: Vec<IntOrString> = networks
            .iter()
            .filter_map(|n| n.egress_request.clone())
            .collect();
        let all = ingress.iter().chain(&egress);
        let has_percent = all.clone().any(|v| matches!(v, IntOrString::Int(_)));
        let has_quantity = all.clone().any(|v| matches!(v, IntOrString::String(_)));
        if has_percent && has_quantity {
            self.fail(
                "",
                "network QoS requests mix percentages and quantities; use one form",
            );
            return;
        }
        for (direction, values) in [("ingressRequest", &ingress), ("egressRequest", &egress)] {
            let percent: i64 = values
                .iter()
                .filter_map(|v| match v {
                    IntOrString::Int(p) => Some(i64::from(*p)),
                    IntOrString::String(_) => None,
                })
                .sum();
            if percent > 100 {
                self.fail(
                    "",
                    format!("{direction} of lsrClass, lsClass and beClass add up to {percent}%, more than 100%"),
                );
            }
            let Some(total) = total_bandwidth.filter(|total| *total > 0) else {
                continue;
            };
            let quantity: i128 = values
                .iter()
                .filter_map(|v| match v {
                    IntOrString::String(text) => QuantityValue::parse(text).ok(),
                    IntOrString::Int(_) => None,
                })
                .map(|v| i128::from(v.value()))
                .sum();
            if quantity > total {
                self.fail(
                    "",
                    format!("{direction} of lsrClass, lsClass and beClass add up to {quantity}, more than the total network bandwidth {total}"),
                );
            }
        }
    }

    fn cpu_burst_strategy(&mut self, s: &CPUBurstStrategy) {
        let c = &s.cpu_burst_config;
        self.known("policy", c.policy.as_ref());
        self.within("cpuBurstPercent", c.cpu_burst_percent, 1, 10000);
        self.at_least("cfsQuotaBurstPercent", c.cfs_quota_burst_percent, 100);
        self.at_least(
            "cfsQuotaBurstPeriodSeconds",
            c.cfs_quota_burst_period_seconds,
            -1,
        );
        self.within(
            "sharePoolThresholdPercent",
            s.share_pool_threshold_percent,
            0,
            100,
        );
    }

    fn system_strategy(&mut self, s: &SystemStrategy) {
        self.above("minFreeKbytesFactor", s.min_free_kbytes_factor, 0);
        if let Some(value) = s.watermark_scale_factor
            && !(1..=400).contains(&value)
        {
            self.fail(
                "watermarkScaleFactor",
                format!("must be within (0,400], got {value}"),
            );
        }
        self.within("memcgReapBackGround", s.memcg_reap_back_ground, 0, 1);
        self.within("pageCacheLimitEnabled", s.page_cache_limit_enabled, 0, 1);
        if let Some(quantity) = &s.total_network_bandwidth {
            match QuantityValue::parse(&quantity.0) {
                Ok(value) if value < 0 => {
                    self.fail(
                        "totalNetworkBandwidth",
                        format!("must not be negative, got {}", quantity.0),
                    );
                }
                Ok(_) => {}
                Err(error) => self.fail("totalNetworkBandwidth", error.to_string()),
            }
        }
    }

    fn host_applications(&mut self, applications: &[HostApplicationSpec]) {
        for (i, app) in applications.iter().enumerate() {
            let prefix = format!("applications[{i}]");
            if !app.qos.is_empty() && app.qos.parse::<QoSClass>().is_err() {
                self.fail(
                    &format!("{prefix}.qos"),
                    format!("{:?} is not a Koordinator QoS class", app.qos),
                );
            }
            if !app.priority.is_empty() && app.priority.parse::<PriorityClass>().is_err() {
                self.fail(
                    &format!("{prefix}.priority"),
                    format!("{:?} is not a Koordinator priority class", app.priority),
                );
            }
            if let Some(path) = &app.cgroup_path {
                self.known(&format!("{prefix}.cgroupPath.base"), path.base.as_ref());
            }
        }
    }

    fn ratio(&mut self, field: &str, value: Option<f64>) {
        if let Some(value) = value
            && !CPU_NORMALIZATION_RATIO_RANGE.contains(&value)
        {
            self.fail(field, format!("must be within [1.0,5.0], got {value}"));
        }
    }

    fn cpu_normalization_strategy(&mut self, s: &CPUNormalizationStrategy) {
        self.ratio("defaultRatio", s.default_ratio);
        for (model, ratios) in &s.ratio_model {
            let field = |name: &str| format!("ratioModel[{model:?}].{name}");
            self.ratio(&field("baseRatio"), ratios.base_ratio);
            self.ratio(
                &field("hyperThreadEnabledRatio"),
                ratios.hyper_thread_enabled_ratio,
            );
            self.ratio(&field("turboEnabledRatio"), ratios.turbo_enabled_ratio);
            self.ratio(
                &field("hyperThreadTurboEnabledRatio"),
                ratios.hyper_thread_turbo_enabled_ratio,
            );
        }
    }

    fn amplification_strategy(&mut self, s: &ResourceAmplificationStrategy) {
        for (resource, ratio) in &s.resource_amplification_ratio {
            // NaN fails too.
            if ratio.is_nan() || *ratio < 1.0 {
                self.fail(
                    &format!("resourceAmplificationRatio[{resource:?}]"),
                    format!("must be >= 1, got {ratio}"),
                );
            }
        }
    }

    /// Checks the node entries of one key (`list` is `nodeStrategies` or
    /// `nodeConfigs`).
    fn profiles(&mut self, list: &str, profiles: &[&NodeCfgProfile], rules: &ProfileRules) {
        let mut valid: Vec<(usize, &LabelSelector)> = Vec::new();
        for (i, profile) in profiles.iter().enumerate() {
            let entry = format!("{list}[{i}]");
            match &profile.node_selector {
                Some(selector) if rules.selector_required && is_empty_selector(selector) => {
                    self.fail(&format!("{entry}.nodeSelector"), "must not be empty");
                }
                Some(selector) => match validate_label_selector(selector) {
                    Ok(()) => valid.push((i, selector)),
                    Err(error) => self.fail(&format!("{entry}.nodeSelector"), error.to_string()),
                },
                None if rules.selector_required => {
                    self.fail(&format!("{entry}.nodeSelector"), "must not be empty");
                }
                None => {}
            }
        }
        if rules.require_names {
            let mut first_use: BTreeMap<&str, usize> = BTreeMap::new();
            for (i, profile) in profiles.iter().enumerate() {
                let field = format!("{list}[{i}].name");
                if profile.name.is_empty() {
                    self.fail(&field, "must not be empty");
                } else if let Some(first) = first_use.get(profile.name.as_str()) {
                    self.fail(
                        &field,
                        format!("{:?} is also the name of {list}[{first}]", profile.name),
                    );
                } else {
                    first_use.insert(&profile.name, i);
                }
            }
        }
        if rules.check_overlap {
            self.overlaps(list, &valid);
        }
    }

    /// Upstream's overlap check: label sets generated from each selector must
    /// not be matched by two entries.
    fn overlaps(&mut self, list: &str, selectors: &[(usize, &LabelSelector)]) {
        let mut reported: BTreeSet<Vec<usize>> = BTreeSet::new();
        for labels in selectors
            .iter()
            .flat_map(|(_, selector)| sample_labels(selector))
        {
            let matching: Vec<usize> = selectors
                .iter()
                .filter(|(_, selector)| label_selector_matches(selector, &labels).unwrap_or(false))
                .map(|(index, _)| *index)
                .collect();
            if matching.len() > 1 && reported.insert(matching.clone()) {
                let entries = matching
                    .iter()
                    .map(|i| format!("{list}[{i}]"))
                    .collect::<Vec<_>>()
                    .join(", ");
                self.fail(
                    list,
                    format!("{entries} select the same nodes, e.g. one labelled {labels:?}"),
                );
            }
        }
    }
}

/// The label sets upstream derives from a selector to probe for overlaps:
/// its `matchLabels`, plus for expression `k` with values the value at
/// `n mod len(values)` in the n-th set; as many sets as the product of the
/// value counts.
fn sample_labels(selector: &LabelSelector) -> Vec<BTreeMap<String, String>> {
    let expressions = selector.match_expressions.as_deref().unwrap_or_default();
    let count = expressions
        .iter()
        .map(|e| e.values.as_ref().map_or(0, Vec::len))
        .filter(|len| *len > 0)
        .fold(1usize, |acc, len| acc.saturating_mul(len))
        // A pathological selector must not blow up validation.
        .min(4096);
    (0..count)
        .map(|n| {
            let mut labels = selector.match_labels.clone().unwrap_or_default();
            for expression in expressions {
                if let Some(values) = expression.values.as_ref().filter(|v| !v.is_empty()) {
                    labels.insert(expression.key.clone(), values[n % values.len()].clone());
                }
            }
            labels
        })
        .collect()
}
