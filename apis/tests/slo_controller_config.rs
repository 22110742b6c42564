//! The `slo-controller-config` ConfigMap: parsing and writing every key,
//! upstream's defaults, validation with paths, and per-node strategy merging.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use apis::configuration::*;
use apis::extension::QoSClass;
use apis::slo::v1alpha1::*;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

fn complete_configmap_data() -> BTreeMap<String, String> {
    let path = format!(
        "{}/tests/fixtures/slo/slo-controller-config.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let configmap: ConfigMap = apis::yaml::from_str(
        &std::fs::read_to_string(path).unwrap(),
        &apis::yaml::Limits::CONFIG,
    )
    .unwrap();
    assert_eq!(
        configmap.metadata.name.as_deref(),
        Some(DEFAULT_SLO_CONTROLLER_CONFIG_NAME)
    );
    assert_eq!(
        configmap.metadata.namespace.as_deref(),
        Some(DEFAULT_CONFIG_NAMESPACE)
    );
    configmap.data.unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn data(pairs: &[(&str, Value)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// ---------------------------------------------------------------------------
// Parsing and writing
// ---------------------------------------------------------------------------

#[test]
fn complete_configmap_parses_every_key() {
    let data = complete_configmap_data();
    assert_eq!(data.len(), ALL_CONFIG_KEYS.len());
    let config = SloControllerConfig::from_configmap_data(&data).unwrap();

    let colocation = config.colocation.as_ref().unwrap();
    assert_eq!(colocation.strategy.enable, Some(true));
    assert_eq!(
        colocation.strategy.cpu_calculate_policy,
        Some(CalculatePolicy::MaxUsageRequest)
    );
    assert_eq!(
        colocation.strategy.mid_reclaim_mode,
        Some(MidReclaimMode::Static)
    );
    assert_eq!(
        colocation.strategy.mid_static_cpu_reserved_percent,
        Some(10)
    );
    assert_eq!(colocation.strategy.batch_memory_threshold_percent, Some(85));
    assert_eq!(
        colocation.strategy.extensions["yarn-share"],
        json!({"enable": true})
    );
    assert_eq!(colocation.node_configs[0].profile.name, "gpu-pool");
    assert_eq!(
        colocation.node_configs[0].strategy.resource_diff_threshold,
        Some(0.2)
    );
    assert_eq!(colocation.node_configs[1].strategy.enable, Some(false));

    let threshold = config.resource_threshold.as_ref().unwrap();
    let cluster = threshold.cluster_strategy.as_ref().unwrap();
    assert_eq!(cluster.cpu_evict_be_usage_threshold_percent, Some(90));
    assert_eq!(
        threshold.node_strategies[0].strategy.cpu_suppress_policy,
        Some(CPUSuppressPolicy::CfsQuota)
    );
    let exists = &threshold.node_strategies[1]
        .profile
        .node_selector
        .as_ref()
        .unwrap()
        .match_expressions;
    assert_eq!(exists.as_ref().unwrap()[0].operator, "Exists");

    let qos = config.resource_qos.as_ref().unwrap();
    let be = qos
        .cluster_strategy
        .as_ref()
        .unwrap()
        .be_class
        .as_ref()
        .unwrap();
    assert_eq!(
        be.blkio_qos.as_ref().unwrap().blkio_qos.blocks[1]
            .io_cfg
            .write_bps,
        Some(204800000)
    );
    assert_eq!(
        qos.node_strategies[0]
            .strategy
            .be_class
            .as_ref()
            .unwrap()
            .memory_qos
            .as_ref()
            .unwrap()
            .memory_qos
            .wmark_ratio,
        Some(90)
    );

    let burst = config.cpu_burst.as_ref().unwrap();
    assert_eq!(
        burst.node_strategies[0]
            .strategy
            .cpu_burst_config
            .cfs_quota_burst_percent,
        Some(400)
    );
    let system = config.system.as_ref().unwrap();
    assert_eq!(
        system
            .cluster_strategy
            .as_ref()
            .unwrap()
            .total_network_bandwidth,
        Some(Quantity("10G".into()))
    );
    let host = config.host_application.as_ref().unwrap();
    assert_eq!(
        host.node_configs[0].applications[0].name,
        "hadoop-nodemanager"
    );
    let normalization = config.cpu_normalization.as_ref().unwrap();
    let model =
        &normalization.strategy.ratio_model["Intel(R) Xeon(R) Platinum 8369B CPU @ 2.90GHz"];
    assert_eq!(model.hyper_thread_turbo_enabled_ratio, Some(1.3));
    let amplification = config.resource_amplification.as_ref().unwrap();
    assert_eq!(
        amplification.strategy.resource_amplification_ratio["cpu"],
        1.5
    );
    assert_eq!(amplification.node_configs[0].strategy.enable, Some(false));
    assert!(config.other_keys.is_empty());

    assert_eq!(config.validate(), Ok(()));
}

#[test]
fn complete_configmap_round_trips_field_for_field() {
    let data = complete_configmap_data();
    let config = SloControllerConfig::from_configmap_data(&data).unwrap();
    let written = config.to_configmap_data().unwrap();
    assert_eq!(
        written.keys().collect::<Vec<_>>(),
        data.keys().collect::<Vec<_>>()
    );
    for (key, original) in &data {
        let original: Value = serde_json::from_str(original).unwrap();
        let ours: Value = serde_json::from_str(&written[key]).unwrap();
        assert_eq!(ours, original, "{key} changed when written back");
    }
    assert_eq!(
        SloControllerConfig::from_configmap_data(&written).unwrap(),
        config
    );
}

#[test]
fn malformed_keys_are_typed_errors_naming_the_key() {
    let mut data = complete_configmap_data();
    data.insert(
        RESOURCE_QOS_CONFIG_KEY.into(),
        "{\"clusterStrategy\": {".into(),
    );
    data.insert(CPU_BURST_CONFIG_KEY.into(), "[1, 2]".into());
    data.insert(
        SYSTEM_CONFIG_KEY.into(),
        "{\"clusterStrategy\": {\"minFreeKbytesFactor\": \"lots\"}}".into(),
    );

    let error = SloControllerConfig::from_configmap_data(&data).unwrap_err();
    let keys: Vec<_> = error.errors.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            RESOURCE_QOS_CONFIG_KEY,
            CPU_BURST_CONFIG_KEY,
            SYSTEM_CONFIG_KEY
        ]
    );
    let message = error.to_string();
    assert!(message.contains("resource-qos-config: "), "{message}");
    assert!(message.contains("system-config: "), "{message}");

    // The lenient form keeps every key that parsed.
    let (config, errors) = SloControllerConfig::from_configmap_data_lenient(&data);
    assert_eq!(errors.len(), 3);
    assert!(config.resource_qos.is_none() && config.cpu_burst.is_none() && config.system.is_none());
    assert!(config.colocation.is_some() && config.resource_threshold.is_some());
    assert!(config.cpu_normalization.is_some() && config.resource_amplification.is_some());
}

#[test]
fn oversized_and_deeply_nested_keys_are_refused_before_parsing() {
    // A value larger than a whole ConfigMap may be (1 MiB), even if it is
    // otherwise valid JSON, is refused and named.
    let big = format!(
        "{{\"enable\": true, \"pad\": \"{}\"}}",
        "x".repeat(1024 * 1024)
    );
    let deep = format!(
        "{{\"enable\": true, \"pad\": {}1{}}}",
        "[".repeat(40),
        "]".repeat(40)
    );
    for (value, limit) in [(big, "1048576 bytes"), (deep, "nested deeper than 32")] {
        let data = BTreeMap::from([
            (COLOCATION_CONFIG_KEY.to_owned(), value),
            (
                RESOURCE_THRESHOLD_CONFIG_KEY.to_owned(),
                "{\"clusterStrategy\": {\"enable\": true}}".to_owned(),
            ),
        ]);
        let error = SloControllerConfig::from_configmap_data(&data).unwrap_err();
        assert_eq!(error.errors.len(), 1, "{error}");
        assert_eq!(error.errors[0].key, COLOCATION_CONFIG_KEY);
        let message = error.to_string();
        assert!(
            message.contains("colocation-config: ") && message.contains(limit),
            "{message}"
        );
        // The other keys still parse.
        let (config, _) = SloControllerConfig::from_configmap_data_lenient(&data);
        assert!(config.colocation.is_none() && config.resource_threshold.is_some());
    }
}

#[test]
fn blank_keys_mean_defaults_and_unknown_keys_are_kept() {
    let data = BTreeMap::from([
        (COLOCATION_CONFIG_KEY.to_owned(), "  \n".to_owned()),
        (
            "my-plugin-config".to_owned(),
            "{\"anything\": 1}".to_owned(),
        ),
        (
            RESOURCE_THRESHOLD_CONFIG_KEY.to_owned(),
            "{\"clusterStrategy\": {\"enable\": true}}".to_owned(),
        ),
    ]);
    let config = SloControllerConfig::from_configmap_data(&data).unwrap();
    assert!(config.colocation.is_none());
    assert_eq!(config.other_keys["my-plugin-config"], "{\"anything\": 1}");
    let written = config.to_configmap_data().unwrap();
    assert_eq!(written["my-plugin-config"], "{\"anything\": 1}");
    assert_eq!(
        written[RESOURCE_THRESHOLD_CONFIG_KEY],
        "{\"clusterStrategy\":{\"enable\":true}}"
    );
    assert!(!written.contains_key(COLOCATION_CONFIG_KEY));
}

#[test]
fn key_names_are_upstreams() {
    assert_eq!(
        ALL_CONFIG_KEYS,
        [
            "colocation-config",
            "resource-threshold-config",
            "resource-qos-config",
            "cpu-burst-config",
            "system-config",
            "host-application-config",
            "cpu-normalization-config",
            "resource-amplification-config",
        ]
    );
    assert_eq!(DEFAULT_SLO_CONTROLLER_CONFIG_NAME, "slo-controller-config");
    assert_eq!(DEFAULT_CONFIG_NAMESPACE, "koordinator-system");
}

// ---------------------------------------------------------------------------
// Defaults (numbers read from upstream pkg/util/sloconfig)
// ---------------------------------------------------------------------------

#[test]
fn colocation_defaults_are_upstreams() {
    let d = default_colocation_strategy();
    assert_eq!(d.enable, Some(false));
    assert_eq!(d.metric_aggregate_duration_seconds, Some(300));
    assert_eq!(d.metric_report_interval_seconds, Some(60));
    assert_eq!(
        d.metric_aggregate_policy.unwrap().durations,
        ["5m0s", "10m0s", "30m0s"]
    );
    assert_eq!(
        d.metric_memory_collect_policy,
        Some(NodeMemoryCollectPolicy::UsageWithoutPageCache)
    );
    assert_eq!(d.cpu_reclaim_threshold_percent, Some(60));
    assert_eq!(d.cpu_calculate_policy, Some(CalculatePolicy::Usage));
    assert_eq!(d.memory_reclaim_threshold_percent, Some(65));
    assert_eq!(d.memory_calculate_policy, Some(CalculatePolicy::Usage));
    assert_eq!(d.degrade_time_minutes, Some(15));
    assert_eq!(d.update_time_threshold_seconds, Some(300));
    assert_eq!(d.resource_diff_threshold, Some(0.1));
    assert_eq!(d.mid_cpu_threshold_percent, Some(100));
    assert_eq!(d.mid_memory_threshold_percent, Some(100));
    assert_eq!(d.mid_unallocated_percent, Some(0));
    assert_eq!(d.mid_static_cpu_reserved_percent, Some(0));
    assert_eq!(d.mid_static_memory_reserved_percent, Some(0));
    assert_eq!(d.batch_cpu_threshold_percent, None);
    assert_eq!(d.batch_memory_threshold_percent, None);
    assert_eq!(d.mid_reclaim_mode, None);
    assert!(default_colocation_cfg().node_configs.is_empty());
}

#[test]
fn threshold_burst_and_system_defaults_are_upstreams() {
    assert_eq!(
        serde_json::to_value(default_resource_threshold_strategy()).unwrap(),
        json!({
            "enable": false,
            "cpuSuppressThresholdPercent": 65,
            "cpuSuppressPolicy": "cpuset",
            "memoryEvictThresholdPercent": 70,
            "cpuEvictPolicy": "evictByRealLimit"
        })
    );
    assert_eq!(
        serde_json::to_value(default_cpu_burst_strategy()).unwrap(),
        json!({
            "policy": "none",
            "cpuBurstPercent": 1000,
            "cfsQuotaBurstPercent": 300,
            "cfsQuotaBurstPeriodSeconds": -1,
            "sharePoolThresholdPercent": 50
        })
    );
    assert_eq!(
        serde_json::to_value(default_system_strategy()).unwrap(),
        json!({"totalNetworkBandwidth": "0"})
    );
    let spec = default_node_slo_spec();
    assert_eq!(
        spec.resource_used_threshold_with_be,
        Some(default_resource_threshold_strategy())
    );
    assert_eq!(spec.cpu_burst_strategy, Some(default_cpu_burst_strategy()));
    let normalization = default_cpu_normalization_cfg();
    assert_eq!(normalization.strategy.enable, Some(false));
    assert!(normalization.strategy.ratio_model.is_empty());
    assert_eq!(
        default_resource_amplification_cfg().strategy.enable,
        Some(false)
    );
}

#[test]
fn resource_qos_defaults_are_upstreams() {
    let d = default_resource_qos_strategy();
    let policies = d.policies.as_ref().unwrap();
    assert_eq!(policies.cpu_policy, Some(CPUQOSPolicy::GroupIdentity));
    assert_eq!(policies.net_qos_policy, Some(NETQOSPolicy::Tc));

    // (class, group identity, core expeller, cat end, wmark ratio, wmark permill, wmark min adj)
    let expected = [
        (d.lsr_class.as_ref(), 2, true, 100, 95, 20, -25),
        (d.ls_class.as_ref(), 2, true, 100, 95, 20, -25),
        (d.be_class.as_ref(), -1, false, 30, 95, 20, 50),
        (d.system_class.as_ref(), 0, false, 100, 0, 50, 0),
    ];
    for (class, group_identity, expeller, cat_end, ratio, permill, min_adj) in expected {
        let class = class.unwrap();
        let cpu = class.cpu_qos.as_ref().unwrap();
        assert_eq!(cpu.enable, Some(false));
        assert_eq!(cpu.cpu_qos.group_identity, Some(group_identity));
        assert_eq!(cpu.cpu_qos.sched_idle, Some(0));
        assert_eq!(cpu.cpu_qos.core_expeller, Some(expeller));
        let resctrl = class.resctrl_qos.as_ref().unwrap();
        assert_eq!(resctrl.enable, Some(false));
        assert_eq!(resctrl.resctrl_qos.cat_range_start_percent, Some(0));
        assert_eq!(resctrl.resctrl_qos.cat_range_end_percent, Some(cat_end));
        assert_eq!(resctrl.resctrl_qos.mba_percent, Some(100));
        let memory = &class.memory_qos.as_ref().unwrap().memory_qos;
        assert_eq!(memory.wmark_ratio, Some(ratio));
        assert_eq!(memory.wmark_scale_permill, Some(permill));
        assert_eq!(memory.wmark_min_adj, Some(min_adj));
        for zero in [
            memory.min_limit_percent,
            memory.low_limit_percent,
            memory.throttling_percent,
            memory.priority_enable,
            memory.priority,
            memory.oom_kill_group,
        ] {
            assert_eq!(zero, Some(0));
        }
        assert_eq!(memory.page_cache_enable, None);
        let blkio = class.blkio_qos.as_ref().unwrap();
        assert_eq!(blkio.enable, Some(false));
        assert!(blkio.blkio_qos.blocks.is_empty());
        let network = class.network_qos.as_ref().unwrap();
        assert_eq!(network.enable, Some(false));
        assert_eq!(
            network.network_qos.ingress_request,
            Some(IntOrString::Int(0))
        );
        assert_eq!(network.network_qos.egress_limit, Some(IntOrString::Int(0)));
    }
    assert_eq!(
        serde_json::to_value(d.cgroup_root.as_ref().unwrap()).unwrap(),
        json!({"blkioQOS": {"enable": false}})
    );

    assert_eq!(default_cpu_qos(QoSClass::LSE), None);
    assert_eq!(default_memory_qos(QoSClass::None), None);
    let none = none_memory_qos();
    assert_eq!(
        (
            none.wmark_ratio,
            none.wmark_scale_permill,
            none.wmark_min_adj
        ),
        (Some(0), Some(50), Some(0))
    );
    assert_eq!(none_resctrl_qos().cat_range_end_percent, Some(100));
    let all_off = none_resource_qos_strategy();
    assert_eq!(
        all_off
            .be_class
            .unwrap()
            .cpu_qos
            .unwrap()
            .cpu_qos
            .group_identity,
        Some(0)
    );
}

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

fn broken_configmap_data() -> BTreeMap<String, String> {
    data(&[
        (
            COLOCATION_CONFIG_KEY,
            json!({
                "resourceDiffThreshold": 1.5,
                "metricAggregatePolicy": {"durations": ["5m", "ten minutes"]},
                "nodeConfigs": [
                    {"name": "a", "nodeSelector": {"matchLabels": {"pool": "a"}}, "midCPUThresholdPercent": 101}
                ]
            }),
        ),
        (
            RESOURCE_THRESHOLD_CONFIG_KEY,
            json!({
                "clusterStrategy": {
                    "cpuSuppressPolicy": "quota",
                    "memoryEvictThresholdPercent": 70,
                    "memoryEvictLowerPercent": 80,
                    "cpuEvictLowerPercent": 50,
                    "allocatableEvictPriorityThreshold": 9000
                },
                "nodeStrategies": [
                    {"name": "empty-selector", "nodeSelector": {}, "enable": true},
                    {"name": "hot", "nodeSelector": {"matchLabels": {"pool": "hot"}}, "cpuSuppressThresholdPercent": 120}
                ]
            }),
        ),
        (
            RESOURCE_QOS_CONFIG_KEY,
            json!({
                "clusterStrategy": {
                    "policies": {"cpuPolicy": "bvt"},
                    "lsClass": {"cpuQOS": {"groupIdentity": 3}, "networkQOS": {"ingressRequest": 60}},
                    "beClass": {
                        "memoryQOS": {"wmarkMinAdj": 60},
                        "networkQOS": {"ingressRequest": 50, "ingressLimit": 120},
                        "resctrlQOS": {"catRangeStartPercent": 50, "catRangeEndPercent": 30},
                        "blkioQOS": {"blocks": [{"name": "x", "type": "disk", "ioCfg": {"ioWeightPercent": 0}}]}
                    }
                },
                "nodeStrategies": [
                    {
                        "name": "bad-operator",
                        "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Matches", "values": ["a"]}]},
                        "lsrClass": {"memoryQOS": {"priority": 13}}
                    }
                ]
            }),
        ),
        (
            CPU_BURST_CONFIG_KEY,
            json!({
                "clusterStrategy": {"policy": "always", "cpuBurstPercent": 0},
                "nodeStrategies": [
                    {"name": "x", "nodeSelector": {"matchLabels": {"pool": "x"}}, "cfsQuotaBurstPercent": 50},
                    {"name": "x-and-ssd", "nodeSelector": {"matchLabels": {"pool": "x", "disk": "ssd"}}}
                ]
            }),
        ),
        (
            SYSTEM_CONFIG_KEY,
            json!({"clusterStrategy": {"watermarkScaleFactor": 500, "totalNetworkBandwidth": "fast"}}),
        ),
        (
            HOST_APPLICATION_CONFIG_KEY,
            json!({"applications": [{"name": "agent", "qos": "GOLD", "cgroupPath": {"base": "Root"}}]}),
        ),
        (
            CPU_NORMALIZATION_CONFIG_KEY,
            json!({
                "ratioModel": {"Old CPU": {"baseRatio": 0.8}},
                "nodeConfigs": [{"name": "n", "nodeSelector": {"matchLabels": {"pool": "n"}}, "defaultRatio": 6.0}]
            }),
        ),
        (
            RESOURCE_AMPLIFICATION_CONFIG_KEY,
            json!({"resourceAmplificationRatio": {"cpu": 0.5, "memory": 1.0}}),
        ),
    ])
}

#[test]
fn validate_reports_every_problem_with_its_path() {
    let config = SloControllerConfig::from_configmap_data(&broken_configmap_data()).unwrap();
    let errors = config.validate().unwrap_err().errors;
    let found: Vec<String> = errors.iter().map(ToString::to_string).collect();

    let expected: &[(&str, &str)] = &[
        (
            "colocation-config.metricAggregatePolicy.durations[1]",
            "ten minutes",
        ),
        (
            "colocation-config.resourceDiffThreshold",
            "must be within (0,1], got 1.5",
        ),
        (
            "colocation-config.nodeConfigs[0].midCPUThresholdPercent",
            "must be within [0,100], got 101",
        ),
        (
            "resource-threshold-config.clusterStrategy.cpuSuppressPolicy",
            "\"quota\" is not one of \"cpuset\", \"cfsQuota\"",
        ),
        (
            "resource-threshold-config.clusterStrategy.memoryEvictThresholdPercent",
            "must be greater than memoryEvictLowerPercent (80), got 70",
        ),
        (
            "resource-threshold-config.clusterStrategy.cpuEvictLowerPercent",
            "cpuEvictThresholdPercent is not",
        ),
        (
            "resource-threshold-config.clusterStrategy.allocatableEvictPriorityThreshold",
            "[0,7999]",
        ),
        (
            "resource-threshold-config.nodeStrategies[1].cpuSuppressThresholdPercent",
            "must be within [0,100], got 120",
        ),
        (
            "resource-threshold-config.nodeStrategies[0].nodeSelector",
            "must not be empty",
        ),
        (
            "resource-qos-config.clusterStrategy.policies.cpuPolicy",
            "\"bvt\"",
        ),
        (
            "resource-qos-config.clusterStrategy.lsClass.cpuQOS.groupIdentity",
            "must be within [-1,2], got 3",
        ),
        (
            "resource-qos-config.clusterStrategy.beClass.memoryQOS.wmarkMinAdj",
            "must be within [-25,50], got 60",
        ),
        (
            "resource-qos-config.clusterStrategy.beClass.blkioQOS.blocks[0].type",
            "\"disk\"",
        ),
        (
            "resource-qos-config.clusterStrategy.beClass.blkioQOS.blocks[0].ioCfg.ioWeightPercent",
            "[1,100]",
        ),
        (
            "resource-qos-config.clusterStrategy.beClass.resctrlQOS.catRangeEndPercent",
            "must be greater than catRangeStartPercent (50), got 30",
        ),
        (
            "resource-qos-config.clusterStrategy.beClass.networkQOS.ingressLimit",
            "got 120",
        ),
        (
            "resource-qos-config.clusterStrategy",
            "ingressRequest of lsrClass, lsClass and beClass add up to 110%",
        ),
        (
            "resource-qos-config.nodeStrategies[0].lsrClass.memoryQOS.priority",
            "must be within [0,12], got 13",
        ),
        (
            "resource-qos-config.nodeStrategies[0].nodeSelector",
            "matchExpressions[0].operator: operator \"Matches\"",
        ),
        ("cpu-burst-config.clusterStrategy.policy", "\"always\""),
        (
            "cpu-burst-config.clusterStrategy.cpuBurstPercent",
            "must be within [1,10000], got 0",
        ),
        (
            "cpu-burst-config.nodeStrategies[0].cfsQuotaBurstPercent",
            "must be >= 100, got 50",
        ),
        (
            "cpu-burst-config.nodeStrategies",
            "nodeStrategies[0], nodeStrategies[1] select the same nodes",
        ),
        (
            "system-config.clusterStrategy.watermarkScaleFactor",
            "must be within (0,400], got 500",
        ),
        (
            "system-config.clusterStrategy.totalNetworkBandwidth",
            "fast",
        ),
        (
            "host-application-config.applications[0].qos",
            "\"GOLD\" is not a Koordinator QoS class",
        ),
        (
            "host-application-config.applications[0].cgroupPath.base",
            "\"Root\"",
        ),
        (
            "cpu-normalization-config.ratioModel[\"Old CPU\"].baseRatio",
            "must be within [1.0,5.0], got 0.8",
        ),
        (
            "cpu-normalization-config.nodeConfigs[0].defaultRatio",
            "got 6",
        ),
        (
            "resource-amplification-config.resourceAmplificationRatio[\"cpu\"]",
            "must be >= 1, got 0.5",
        ),
    ];
    for (path, fragment) in expected {
        assert!(
            errors
                .iter()
                .any(|e| e.path == *path && e.message.contains(fragment)),
            "missing `{path}: ...{fragment}...` in:\n{}",
            found.join("\n")
        );
    }
    assert_eq!(
        errors.len(),
        expected.len(),
        "unexpected extra problems:\n{}",
        found.join("\n")
    );
}

#[test]
fn node_names_are_only_checked_when_asked() {
    let data = data(&[(
        RESOURCE_THRESHOLD_CONFIG_KEY,
        json!({"nodeStrategies": [
            {"name": "pool", "nodeSelector": {"matchLabels": {"pool": "a"}}},
            {"name": "pool", "nodeSelector": {"matchLabels": {"pool": "b"}}},
            {"nodeSelector": {"matchLabels": {"pool": "c"}}}
        ]}),
    )]);
    let config = SloControllerConfig::from_configmap_data(&data).unwrap();
    assert_eq!(config.validate(), Ok(()));

    let options = ValidationOptions {
        require_node_strategy_names: true,
    };
    let errors = config.validate_with(&options).unwrap_err().errors;
    let paths: Vec<_> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "resource-threshold-config.nodeStrategies[1].name",
            "resource-threshold-config.nodeStrategies[2].name",
        ]
    );
    assert!(errors[0].message.contains("nodeStrategies[0]"));
}

#[test]
fn network_quantities_must_fit_the_system_bandwidth() {
    let data = data(&[
        (
            RESOURCE_QOS_CONFIG_KEY,
            json!({"clusterStrategy": {
                "lsClass": {"networkQOS": {"ingressRequest": "600M", "egressRequest": "100M"}},
                "beClass": {"networkQOS": {"ingressRequest": "500M", "egressRequest": "30%x"}}
            }}),
        ),
        (
            SYSTEM_CONFIG_KEY,
            json!({"clusterStrategy": {"totalNetworkBandwidth": "1G"}}),
        ),
    ]);
    let config = SloControllerConfig::from_configmap_data(&data).unwrap();
    let errors = config.validate().unwrap_err().errors;
    let found: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0]
            .starts_with("resource-qos-config.clusterStrategy.beClass.networkQOS.egressRequest: ")
    );
    assert_eq!(
        found[1],
        "resource-qos-config.clusterStrategy: ingressRequest of lsrClass, lsClass and beClass add up to 1100000000, more than the total network bandwidth 1000000000"
    );

    // Mixing percentages and quantities is refused whatever the bandwidth.
    let mixed = data_with_qos(json!({"clusterStrategy": {
        "lsClass": {"networkQOS": {"ingressRequest": 20}},
        "beClass": {"networkQOS": {"ingressRequest": "10M"}}
    }}));
    let errors = mixed.validate().unwrap_err().errors;
    assert_eq!(errors.len(), 1);
    assert!(errors[0].message.contains("mix percentages and quantities"));
}

fn data_with_qos(qos: Value) -> SloControllerConfig {
    SloControllerConfig::from_configmap_data(&data(&[(RESOURCE_QOS_CONFIG_KEY, qos)])).unwrap()
}

#[test]
fn upper_bound_alone_is_accepted() {
    let config = SloControllerConfig::from_configmap_data(&data(&[(
        RESOURCE_THRESHOLD_CONFIG_KEY,
        json!({"clusterStrategy": {"enable": true, "memoryEvictThresholdPercent": 70, "cpuEvictThresholdPercent": 60}}),
    )]))
    .unwrap();
    assert_eq!(config.validate(), Ok(()));
}

// ---------------------------------------------------------------------------
// Merging
// ---------------------------------------------------------------------------

#[test]
fn threshold_strategy_is_default_then_cluster_then_first_matching_node() {
    let config = SloControllerConfig::from_configmap_data(&complete_configmap_data()).unwrap();
    let cfg = config.resource_threshold.unwrap();

    let plain = cfg.strategy_for_node(&labels(&[("node-pool", "general")]));
    assert_eq!(plain, *cfg.cluster_strategy.as_ref().unwrap());

    let dense = cfg.strategy_for_node(&labels(&[("node-pool", "dense")]));
    assert_eq!(dense.cpu_suppress_threshold_percent, Some(55));
    assert_eq!(dense.cpu_suppress_policy, Some(CPUSuppressPolicy::CfsQuota));
    assert_eq!(dense.memory_evict_threshold_percent, Some(70));
    assert_eq!(dense.enable, Some(true));

    // Both entries match; the first one wins.
    let both = cfg.strategy_for_node(&labels(&[
        ("node-pool", "dense"),
        ("eviction-disabled", ""),
    ]));
    assert_eq!(both, dense);
    let no_eviction = cfg.strategy_for_node(&labels(&[("eviction-disabled", "true")]));
    assert_eq!(no_eviction.enable, Some(false));
    assert_eq!(no_eviction.cpu_suppress_threshold_percent, Some(65));

    // Only a cluster strategy that sets little: the rest comes from the defaults.
    let sparse: ResourceThresholdCfg =
        serde_json::from_value(json!({"clusterStrategy": {"enable": true}})).unwrap();
    let strategy = sparse.strategy_for_node(&BTreeMap::new());
    assert_eq!(strategy.enable, Some(true));
    assert_eq!(strategy.cpu_suppress_threshold_percent, Some(65));
    assert_eq!(strategy.memory_evict_threshold_percent, Some(70));
    assert_eq!(
        strategy.cpu_suppress_policy,
        Some(CPUSuppressPolicy::CPUSet)
    );
}

#[test]
fn qos_strategy_merges_nested_fields() {
    let config = SloControllerConfig::from_configmap_data(&complete_configmap_data()).unwrap();
    let cfg = config.resource_qos.unwrap();
    let anolis = cfg.strategy_for_node(&labels(&[("kubernetes.io/os-image", "anolis")]));
    let be = anolis.be_class.as_ref().unwrap();
    let memory = &be.memory_qos.as_ref().unwrap();
    // From the node strategy:
    assert_eq!(memory.memory_qos.wmark_ratio, Some(90));
    // From the cluster strategy:
    assert_eq!(memory.enable, Some(true));
    assert_eq!(memory.memory_qos.wmark_min_adj, Some(50));
    assert_eq!(be.blkio_qos.as_ref().unwrap().blkio_qos.blocks.len(), 2);
    // From the defaults (the cluster strategy does not set them):
    assert_eq!(memory.memory_qos.priority, Some(0));
    let system_resctrl = anolis
        .system_class
        .as_ref()
        .unwrap()
        .resctrl_qos
        .as_ref()
        .unwrap();
    assert_eq!(system_resctrl.resctrl_qos.cat_range_end_percent, Some(100));

    let other = cfg.strategy_for_node(&labels(&[("kubernetes.io/os-image", "ubuntu")]));
    let other_be = other.be_class.unwrap().memory_qos.unwrap();
    assert_eq!(other_be.memory_qos.wmark_ratio, Some(95));
}

#[test]
fn merge_replaces_lists_and_merges_maps_by_key() {
    let base = SystemStrategy {
        sched_features: BTreeMap::from([("A".into(), true), ("B".into(), true)]),
        total_network_bandwidth: Some(Quantity("10G".into())),
        ..Default::default()
    };
    let overlay = SystemStrategy {
        sched_features: BTreeMap::from([("B".into(), false), ("C".into(), true)]),
        watermark_scale_factor: Some(200),
        ..Default::default()
    };
    let out = merged(&base, &overlay);
    assert_eq!(
        out.sched_features,
        BTreeMap::from([("A".into(), true), ("B".into(), false), ("C".into(), true)])
    );
    assert_eq!(out.total_network_bandwidth, Some(Quantity("10G".into())));
    assert_eq!(out.watermark_scale_factor, Some(200));

    let block = |name: &str| BlockCfg {
        name: name.into(),
        ..Default::default()
    };
    let base = BlkIOQOSCfg {
        enable: Some(true),
        blkio_qos: BlkIOQOS {
            blocks: vec![block("a"), block("b")],
        },
    };
    let replaced = merged(
        &base,
        &BlkIOQOSCfg {
            enable: None,
            blkio_qos: BlkIOQOS {
                blocks: vec![block("c")],
            },
        },
    );
    assert_eq!(replaced.blkio_qos.blocks, vec![block("c")]);
    assert_eq!(replaced.enable, Some(true));
    let kept = merged(&base, &BlkIOQOSCfg::default());
    assert_eq!(kept, base);
}

#[test]
fn selector_edge_cases_in_node_selection() {
    let cfg: CPUBurstCfg = serde_json::from_value(json!({
        "clusterStrategy": {"policy": "cpuBurstOnly"},
        "nodeStrategies": [
            {"name": "no-selector", "policy": "auto"},
            {"name": "broken", "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In"}]}, "policy": "auto"},
            {"name": "not-gpu", "nodeSelector": {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, "cpuBurstPercent": 500}
        ]
    }))
    .unwrap();
    // The first two entries never apply; the third applies to nodes without a gpu label.
    let cpu_node = cfg.strategy_for_node(&labels(&[("pool", "x")]));
    assert_eq!(
        cpu_node.cpu_burst_config.policy,
        Some(CPUBurstPolicy::CPUBurstOnly)
    );
    assert_eq!(cpu_node.cpu_burst_config.cpu_burst_percent, Some(500));
    let gpu_node = cfg.strategy_for_node(&labels(&[("gpu", "a100")]));
    assert_eq!(gpu_node.cpu_burst_config.cpu_burst_percent, Some(1000));
    assert_eq!(gpu_node.share_pool_threshold_percent, Some(50));

    // An empty selector matches every node.
    let everywhere: SystemCfg = serde_json::from_value(json!({
        "nodeStrategies": [{"nodeSelector": {}, "minFreeKbytesFactor": 120}]
    }))
    .unwrap();
    assert_eq!(
        everywhere
            .strategy_for_node(&BTreeMap::new())
            .min_free_kbytes_factor,
        Some(120)
    );
}

#[test]
fn colocation_strategy_for_node_and_node_overrides() {
    let config = SloControllerConfig::from_configmap_data(&complete_configmap_data()).unwrap();
    let cfg = config.colocation.unwrap();
    let gpu = cfg
        .strategy_for_node(&labels(&[("node-pool", "gpu")]))
        .unwrap();
    assert_eq!(gpu.cpu_reclaim_threshold_percent, Some(50));
    assert_eq!(gpu.memory_reclaim_threshold_percent, Some(75));
    assert_eq!(gpu.resource_diff_threshold, Some(0.2));
    let legacy = cfg
        .strategy_for_node(&labels(&[("kernel-version", "5.4")]))
        .unwrap();
    assert_eq!(legacy.enable, Some(false));

    // A node entry that is invalid after merging falls back to the cluster strategy.
    let mut bad_node = cfg.clone();
    bad_node.node_configs[0]
        .strategy
        .metric_report_interval_seconds = Some(0);
    let fallback = bad_node
        .strategy_for_node(&labels(&[("node-pool", "gpu")]))
        .unwrap();
    assert_eq!(fallback.cpu_reclaim_threshold_percent, Some(70));
    // An invalid cluster strategy yields nothing (keep the previous config).
    let mut bad_cluster = cfg.clone();
    bad_cluster.strategy.degrade_time_minutes = Some(0);
    assert_eq!(bad_cluster.strategy_for_node(&BTreeMap::new()), None);
    // Without any config the defaults apply.
    assert_eq!(
        ColocationCfg::default().strategy_for_node(&BTreeMap::new()),
        Some(default_colocation_strategy())
    );

    let mut strategy = default_colocation_strategy();
    let node_labels = labels(&[
        (LABEL_CPU_RECLAIM_RATIO, "0.8"),
        (LABEL_MEMORY_RECLAIM_RATIO, "-1"),
        (LABEL_MID_STATIC_CPU_RESERVED_RATIO, "0.155"),
        (LABEL_MID_STATIC_MEMORY_RESERVED_RATIO, "lots"),
    ]);
    let annotations = labels(&[(
        ANNOTATION_NODE_COLOCATION_STRATEGY,
        r#"{"cpuReclaimThresholdPercent": 40, "degradeTimeMinutes": 5}"#,
    )]);
    apply_node_colocation_overrides(&mut strategy, &node_labels, &annotations).unwrap();
    assert_eq!(strategy.degrade_time_minutes, Some(5));
    // Labels win over the annotation; 0.8 × 100 → 80, 0.155 × 100 truncates to 15.
    assert_eq!(strategy.cpu_reclaim_threshold_percent, Some(80));
    assert_eq!(strategy.mid_static_cpu_reserved_percent, Some(15));
    // Negative and malformed ratios are ignored.
    assert_eq!(strategy.memory_reclaim_threshold_percent, Some(65));
    assert_eq!(strategy.mid_static_memory_reserved_percent, Some(0));

    let broken = labels(&[(ANNOTATION_NODE_COLOCATION_STRATEGY, "{")]);
    let mut untouched = default_colocation_strategy();
    assert!(apply_node_colocation_overrides(&mut untouched, &BTreeMap::new(), &broken).is_err());
    assert_eq!(untouched, default_colocation_strategy());
}

#[test]
fn host_applications_normalization_and_amplification_per_node() {
    let config = SloControllerConfig::from_configmap_data(&complete_configmap_data()).unwrap();

    let host = config.host_application.unwrap();
    let pool = host.applications_for_node(&labels(&[("node-pool", "colocation")]));
    assert_eq!(pool.len(), 1);
    assert_eq!(pool[0].name, "hadoop-nodemanager");
    let other = host.applications_for_node(&BTreeMap::new());
    assert_eq!(other[0].name, "nginx");

    let normalization = config.cpu_normalization.unwrap();
    let bench = normalization.strategy_for_node(&labels(&[("node-pool", "benchmark")]));
    assert_eq!(bench.enable, Some(false));
    assert_eq!(bench.default_ratio, Some(1.2));
    assert_eq!(bench.ratio_model.len(), 1);
    assert_eq!(
        normalization.strategy_for_node(&BTreeMap::new()).enable,
        Some(true)
    );

    let amplification = config.resource_amplification.unwrap();
    let dedicated = amplification.strategy_for_node(&labels(&[("node-pool", "dedicated")]));
    assert_eq!(dedicated.enable, Some(false));
    assert_eq!(dedicated.resource_amplification_ratio["memory"], 1.2);
}

// ---------------------------------------------------------------------------
// Label selectors
// ---------------------------------------------------------------------------

fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

#[test]
fn label_selector_operators() {
    let selector = LabelSelector {
        match_labels: Some(BTreeMap::from([("pool".into(), "batch".into())])),
        match_expressions: Some(vec![
            expression("zone", "In", &["a", "b"]),
            expression("tier", "NotIn", &["frontend"]),
            expression("kubernetes.io/arch", "Exists", &[]),
            expression("maintenance", "DoesNotExist", &[]),
        ]),
    };
    let base = [
        ("pool", "batch"),
        ("zone", "a"),
        ("kubernetes.io/arch", "amd64"),
    ];
    assert!(label_selector_matches(&selector, &labels(&base)).unwrap());

    let with = |extra: (&str, &str)| {
        let mut l = labels(&base);
        l.insert(extra.0.into(), extra.1.into());
        label_selector_matches(&selector, &l).unwrap()
    };
    assert!(with(("tier", "backend")));
    assert!(!with(("tier", "frontend")));
    assert!(!with(("zone", "c")));
    assert!(!with(("pool", "online")));
    assert!(!with(("maintenance", "")));
    assert!(
        !label_selector_matches(&selector, &labels(&[("pool", "batch"), ("zone", "a")])).unwrap()
    );

    assert!(label_selector_matches(&LabelSelector::default(), &BTreeMap::new()).unwrap());
}

#[test]
fn malformed_label_selectors_are_errors() {
    let cases = [
        (
            expression("pool", "Matches", &["a"]),
            "operator \"Matches\"",
        ),
        (expression("pool", "In", &[]), "needs at least one value"),
        (expression("pool", "Exists", &["a"]), "takes no values"),
        (expression("Bad_Prefix/pool", "Exists", &[]), "prefix"),
        (expression("-pool", "Exists", &[]), "name part"),
        (expression("pool", "In", &["not ok"]), "invalid label value"),
    ];
    for (requirement, fragment) in cases {
        let selector = LabelSelector {
            match_expressions: Some(vec![requirement]),
            ..Default::default()
        };
        let error = label_selector_matches(&selector, &BTreeMap::new()).unwrap_err();
        assert!(
            error.to_string().contains(fragment),
            "{error} lacks {fragment}"
        );
        assert!(validate_label_selector(&selector).is_err());
    }
    let long_value = LabelSelector {
        match_labels: Some(BTreeMap::from([("pool".into(), "x".repeat(64))])),
        ..Default::default()
    };
    assert!(matches!(
        validate_label_selector(&long_value),
        Err(SelectorError::InvalidValue { .. })
    ));
    let good = LabelSelector {
        match_labels: Some(BTreeMap::from([(
            "node.koordinator.sh/pool".into(),
            "gpu_a-1.x".into(),
        )])),
        ..Default::default()
    };
    assert_eq!(validate_label_selector(&good), Ok(()));
}
