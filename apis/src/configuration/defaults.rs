//! Upstream's built-in defaults for every `slo-controller-config` key (upstream
//! `pkg/util/sloconfig` and the noderesource plugins' config handlers). A key's
//! effective value is `default ← clusterStrategy ← matching nodeStrategy`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::types::{
    CPUNormalizationCfg, CPUNormalizationStrategy, CalculatePolicy, ColocationCfg,
    ColocationStrategy, ResourceAmplificationCfg, ResourceAmplificationStrategy,
};
use crate::extension::QoSClass;
use crate::slo::v1alpha1::{
    AggregatePolicy, BlkIOQOS, BlkIOQOSCfg, CPUBurstConfig, CPUBurstPolicy, CPUBurstStrategy,
    CPUEvictPolicy, CPUQOS, CPUQOSCfg, CPUQOSPolicy, CPUSuppressPolicy, ExtensionsMap, MemoryQOS,
    MemoryQOSCfg, NETQOSPolicy, NetworkQOS, NetworkQOSCfg, NodeMemoryCollectPolicy, NodeSLOSpec,
    ResctrlQOS, ResctrlQOSCfg, ResourceQOS, ResourceQOSPolicies, ResourceQOSStrategy,
    ResourceThresholdStrategy, SystemStrategy,
};

/// Default colocation strategy: disabled, 300 s aggregation reported every
/// 60 s over 5/10/30 minute windows, 60 % CPU and 65 % memory reclaim
/// thresholds computed from usage, 15 min degrade time, 300 s forced update,
/// 0.1 diff threshold, mid capped at 100 % with no unallocated or static share,
/// and no batch caps.
pub fn default_colocation_strategy() -> ColocationStrategy {
    ColocationStrategy {
        enable: Some(false),
        metric_aggregate_duration_seconds: Some(300),
        metric_report_interval_seconds: Some(60),
        // Go writes metav1.Duration values in this form.
        metric_aggregate_policy: Some(AggregatePolicy {
            durations: vec!["5m0s".into(), "10m0s".into(), "30m0s".into()],
        }),
        metric_memory_collect_policy: Some(NodeMemoryCollectPolicy::UsageWithoutPageCache),
        cpu_reclaim_threshold_percent: Some(60),
        cpu_calculate_policy: Some(CalculatePolicy::Usage),
        memory_reclaim_threshold_percent: Some(65),
        memory_calculate_policy: Some(CalculatePolicy::Usage),
        degrade_time_minutes: Some(15),
        update_time_threshold_seconds: Some(300),
        resource_diff_threshold: Some(0.1),
        mid_reclaim_mode: None,
        mid_cpu_threshold_percent: Some(100),
        mid_memory_threshold_percent: Some(100),
        mid_unallocated_percent: Some(0),
        mid_static_cpu_reserved_percent: Some(0),
        mid_static_memory_reserved_percent: Some(0),
        batch_cpu_threshold_percent: None,
        batch_memory_threshold_percent: None,
        extensions: BTreeMap::new(),
    }
}

/// Default `colocation-config`: the default strategy and no node configs.
pub fn default_colocation_cfg() -> ColocationCfg {
    ColocationCfg {
        strategy: default_colocation_strategy(),
        node_configs: Vec::new(),
    }
}

/// Default threshold strategy: disabled, suppress BE above 65 % CPU with the
/// cpuset policy, evict above 70 % memory, CPU eviction by real limit.
pub fn default_resource_threshold_strategy() -> ResourceThresholdStrategy {
    ResourceThresholdStrategy {
        enable: Some(false),
        cpu_suppress_threshold_percent: Some(65),
        cpu_suppress_policy: Some(CPUSuppressPolicy::CPUSet),
        memory_evict_threshold_percent: Some(70),
        cpu_evict_policy: Some(CPUEvictPolicy::EvictByRealLimit),
        ..Default::default()
    }
}

/// Recommended CPU QoS of a class; `None` for classes without one (LSE, none).
pub fn default_cpu_qos(qos: QoSClass) -> Option<CPUQOS> {
    let (group_identity, core_expeller) = match qos {
        QoSClass::LSR | QoSClass::LS => (2, true),
        QoSClass::BE => (-1, false),
        QoSClass::System => (0, false),
        QoSClass::LSE | QoSClass::None => return None,
    };
    Some(CPUQOS {
        group_identity: Some(group_identity),
        // cpu.idle would pin cpu.shares to the minimum, fighting the kubelet.
        sched_idle: Some(0),
        core_expeller: Some(core_expeller),
    })
}

/// Recommended resctrl QoS of a class: the whole LLC (BE: the first 30 %) and
/// full memory bandwidth; `None` for classes without one.
pub fn default_resctrl_qos(qos: QoSClass) -> Option<ResctrlQOS> {
    let cat_range_end = match qos {
        QoSClass::LSR | QoSClass::LS | QoSClass::System => 100,
        QoSClass::BE => 30,
        QoSClass::LSE | QoSClass::None => return None,
    };
    Some(ResctrlQOS {
        cat_range_start_percent: Some(0),
        cat_range_end_percent: Some(cat_range_end),
        mba_percent: Some(100),
    })
}

/// Recommended memory QoS of a class: memcg protection off, async reclaim at
/// 95 % with a 20 permill gap (SYSTEM: off), min watermark adjusted -25 for
/// LSR/LS and +50 for BE; `None` for classes without one.
pub fn default_memory_qos(qos: QoSClass) -> Option<MemoryQOS> {
    let (wmark_ratio, wmark_scale_permill, wmark_min_adj) = match qos {
        QoSClass::LSR | QoSClass::LS => (95, 20, -25),
        QoSClass::BE => (95, 20, 50),
        QoSClass::System => (0, 50, 0),
        QoSClass::LSE | QoSClass::None => return None,
    };
    Some(MemoryQOS {
        min_limit_percent: Some(0),
        low_limit_percent: Some(0),
        throttling_percent: Some(0),
        wmark_ratio: Some(wmark_ratio),
        wmark_scale_permill: Some(wmark_scale_permill),
        wmark_min_adj: Some(wmark_min_adj),
        priority_enable: Some(0),
        priority: Some(0),
        oom_kill_group: Some(0),
        ..Default::default()
    })
}

/// Default policies: group identity for CPU, tc for network.
pub fn default_resource_qos_policies() -> ResourceQOSPolicies {
    ResourceQOSPolicies {
        cpu_policy: Some(CPUQOSPolicy::GroupIdentity),
        net_qos_policy: Some(NETQOSPolicy::Tc),
    }
}

fn default_class_qos(qos: QoSClass) -> ResourceQOS {
    ResourceQOS {
        cpu_qos: Some(CPUQOSCfg {
            enable: Some(false),
            cpu_qos: default_cpu_qos(qos).unwrap_or_default(),
        }),
        memory_qos: Some(MemoryQOSCfg {
            enable: Some(false),
            memory_qos: default_memory_qos(qos).unwrap_or_default(),
        }),
        blkio_qos: Some(BlkIOQOSCfg {
            enable: Some(false),
            blkio_qos: none_blkio_qos(),
        }),
        resctrl_qos: Some(ResctrlQOSCfg {
            enable: Some(false),
            resctrl_qos: default_resctrl_qos(qos).unwrap_or_default(),
        }),
        network_qos: Some(NetworkQOSCfg {
            enable: Some(false),
            network_qos: none_network_qos(),
        }),
    }
}

/// Default resource QoS: every feature disabled, recommended values for
/// LSR/LS/BE/SYSTEM, and only block IO for the root cgroup.
pub fn default_resource_qos_strategy() -> ResourceQOSStrategy {
    ResourceQOSStrategy {
        policies: Some(default_resource_qos_policies()),
        lsr_class: Some(default_class_qos(QoSClass::LSR)),
        ls_class: Some(default_class_qos(QoSClass::LS)),
        be_class: Some(default_class_qos(QoSClass::BE)),
        system_class: Some(default_class_qos(QoSClass::System)),
        cgroup_root: Some(cgroup_root_none_qos()),
    }
}

fn cgroup_root_none_qos() -> ResourceQOS {
    ResourceQOS {
        blkio_qos: Some(BlkIOQOSCfg {
            enable: Some(false),
            blkio_qos: none_blkio_qos(),
        }),
        ..Default::default()
    }
}

/// CPU QoS values that switch the feature off.
pub fn none_cpu_qos() -> CPUQOS {
    CPUQOS {
        group_identity: Some(0),
        sched_idle: Some(0),
        core_expeller: Some(false),
    }
}

/// Resctrl values that switch the feature off (whole LLC, full bandwidth).
pub fn none_resctrl_qos() -> ResctrlQOS {
    ResctrlQOS {
        cat_range_start_percent: Some(0),
        cat_range_end_percent: Some(100),
        mba_percent: Some(100),
    }
}

/// Memory QoS values that switch every knob off.
pub fn none_memory_qos() -> MemoryQOS {
    MemoryQOS {
        min_limit_percent: Some(0),
        low_limit_percent: Some(0),
        throttling_percent: Some(0),
        wmark_ratio: Some(0),
        wmark_scale_permill: Some(50),
        wmark_min_adj: Some(0),
        priority_enable: Some(0),
        priority: Some(0),
        oom_kill_group: Some(0),
        ..Default::default()
    }
}

/// Block IO QoS without any block.
pub fn none_blkio_qos() -> BlkIOQOS {
    BlkIOQOS::default()
}

/// Network QoS with every bound 0 (no limit).
pub fn none_network_qos() -> NetworkQOS {
    NetworkQOS {
        ingress_request: Some(IntOrString::Int(0)),
        ingress_limit: Some(IntOrString::Int(0)),
        egress_request: Some(IntOrString::Int(0)),
        egress_limit: Some(IntOrString::Int(0)),
    }
}

/// All features of a class switched off; for [`QoSClass::None`] the root
/// cgroup form, which only has block IO.
pub fn none_resource_qos(qos: QoSClass) -> ResourceQOS {
    if qos == QoSClass::None {
        return cgroup_root_none_qos();
    }
    ResourceQOS {
        cpu_qos: Some(CPUQOSCfg {
            enable: Some(false),
            cpu_qos: none_cpu_qos(),
        }),
        memory_qos: Some(MemoryQOSCfg {
            enable: Some(false),
            memory_qos: none_memory_qos(),
        }),
        blkio_qos: Some(BlkIOQOSCfg {
            enable: Some(false),
            blkio_qos: none_blkio_qos(),
        }),
        resctrl_qos: Some(ResctrlQOSCfg {
            enable: Some(false),
            resctrl_qos: none_resctrl_qos(),
        }),
        network_qos: Some(NetworkQOSCfg {
            enable: Some(false),
            network_qos: none_network_qos(),
        }),
    }
}

/// Policies of the all-off strategy (the same as the defaults).
pub fn none_resource_qos_policies() -> ResourceQOSPolicies {
    default_resource_qos_policies()
}

/// Resource QoS with every feature of every class switched off.
pub fn none_resource_qos_strategy() -> ResourceQOSStrategy {
    ResourceQOSStrategy {
        policies: Some(none_resource_qos_policies()),
        lsr_class: Some(none_resource_qos(QoSClass::LSR)),
        ls_class: Some(none_resource_qos(QoSClass::LS)),
        be_class: Some(none_resource_qos(QoSClass::BE)),
        system_class: Some(none_resource_qos(QoSClass::System)),
        cgroup_root: Some(none_resource_qos(QoSClass::None)),
    }
}

/// Default CPU burst settings: policy none, 1000 % burst, CFS quota raised up
/// to 300 % without time limit (-1).
pub fn default_cpu_burst_config() -> CPUBurstConfig {
    CPUBurstConfig {
        policy: Some(CPUBurstPolicy::None),
        cpu_burst_percent: Some(1000),
        cfs_quota_burst_percent: Some(300),
        cfs_quota_burst_period_seconds: Some(-1),
    }
}

/// Default CPU burst strategy: [`default_cpu_burst_config`] and a 50 % share
/// pool threshold.
pub fn default_cpu_burst_strategy() -> CPUBurstStrategy {
    CPUBurstStrategy {
        cpu_burst_config: default_cpu_burst_config(),
        share_pool_threshold_percent: Some(50),
    }
}

/// Default system strategy: nothing set except a zero total network bandwidth.
pub fn default_system_strategy() -> SystemStrategy {
    SystemStrategy {
        total_network_bandwidth: Some(Quantity("0".into())),
        ..Default::default()
    }
}

/// Default CPU normalization: disabled, no model ratios.
pub fn default_cpu_normalization_cfg() -> CPUNormalizationCfg {
    CPUNormalizationCfg {
        strategy: CPUNormalizationStrategy {
            enable: Some(false),
            ..Default::default()
        },
        node_configs: Vec::new(),
    }
}

/// Default resource amplification: disabled.
pub fn default_resource_amplification_cfg() -> ResourceAmplificationCfg {
    ResourceAmplificationCfg {
        strategy: ResourceAmplificationStrategy {
            enable: Some(false),
            ..Default::default()
        },
        node_configs: Vec::new(),
    }
}

/// The NodeSLO spec koordlet falls back to before any NodeSLO exists: every
/// strategy at its default, an empty extensions map, no host applications.
pub fn default_node_slo_spec() -> NodeSLOSpec {
    NodeSLOSpec {
        resource_used_threshold_with_be: Some(default_resource_threshold_strategy()),
        resource_qos_strategy: Some(default_resource_qos_strategy()),
        cpu_burst_strategy: Some(default_cpu_burst_strategy()),
        system_strategy: Some(default_system_strategy()),
        extensions: Some(ExtensionsMap::default()),
        host_applications: Vec::new(),
    }
}
