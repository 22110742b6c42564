#![allow(clippy::unwrap_used)]
//! The SLO controllers' decisions on hand-built snapshots. Expected values are
//! worked out by hand from upstream's formulas in the comments.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use apis::configuration::SloControllerConfig;
use apis::extension::{BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY};
use apis::slo::v1alpha1::{NodeMetric, NodeMetricSpec, NodeSLO};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use koord_manager::slo_controller::config::{ConfigOutcome, ConfigState, node_colocation};
use koord_manager::slo_controller::nodemetric::{NodeMetricAction, reconcile_node_metric};
use koord_manager::slo_controller::noderesource::{SyncDecision, status_patch, sync_decision};
use koord_manager::slo_controller::nodeslo::{NodeSloAction, reconcile_node_slo};
use koord_manager::slo_controller::plan_node;
use koord_manager::slo_controller::resources::PodSummary;
use serde_json::json;

const GI: i64 = 1 << 30;

fn epoch_plus(seconds: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600 + seconds)
}

fn rfc3339(time: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(time)
        .unwrap()
        .to_string()
}

fn config(pairs: &[(&str, serde_json::Value)]) -> SloControllerConfig {
    let data: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.to_string()))
        .collect();
    let mut state = ConfigState::default();
    assert_eq!(state.offer(Some(&data)).outcome(), ConfigOutcome::Applied);
    state.current().clone()
}

fn colocation_on() -> SloControllerConfig {
    config(&[("colocation-config", json!({"enable": true}))])
}

fn node(
    name: &str,
    labels: serde_json::Value,
    capacity: (&str, &str),
    allocatable: (&str, &str),
) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "capacity": {"cpu": capacity.0, "memory": capacity.1},
            "allocatable": {"cpu": allocatable.0, "memory": allocatable.1},
        }
    }))
    .unwrap()
}

fn metric(name: &str, updated: SystemTime, status: serde_json::Value) -> NodeMetric {
    let mut status = status;
    status["updateTime"] = json!(rfc3339(updated));
    serde_json::from_value(json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
        "metadata": {"name": name}, "spec": {}, "status": status,
    }))
    .unwrap()
}

fn pod(
    name: &str,
    node: &str,
    qos: &str,
    priority: i32,
    cpu: &str,
    memory: &str,
    phase: &str,
) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "default", "name": name, "labels": {"koordinator.sh/qosClass": qos}},
        "spec": {"nodeName": node, "priority": priority, "containers": [
            {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
        ]},
        "status": {"phase": phase},
    }))
    .unwrap()
}

fn status_value(plan: &koord_manager::slo_controller::NodePlan, name: &str) -> Option<String> {
    plan.desired_status[name].as_ref().map(|q| q.0.clone())
}

/// 16 cores / 64 GiB, kubelet holds back 1 core and 4 GiB.
fn worker() -> Node {
    node(
        "worker",
        json!({"pool": "online"}),
        ("16", "64Gi"),
        ("15", "60Gi"),
    )
}

#[test]
fn batch_by_usage_follows_upstream_formula() {
    let now = epoch_plus(3600);
    let metric = metric(
        "worker",
        now - Duration::from_secs(60),
        json!({
            "nodeMetric": {
                "nodeUsage": {"resources": {"cpu": "6", "memory": "24Gi"}},
                "systemUsage": {"resources": {"cpu": "2", "memory": "2Gi"}},
            },
            "podsMetric": [
                {"namespace": "default", "name": "web", "podUsage": {"resources": {"cpu": "3", "memory": "10Gi"}}},
                {"namespace": "default", "name": "ghost", "podUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}}},
                {"namespace": "default", "name": "ghost-be", "priority": "koord-batch", "podUsage": {"resources": {"cpu": "4", "memory": "4Gi"}}},
            ],
        }),
    );
    let pods = [
        pod("web", "worker", "LS", 9500, "4", "8Gi", "Running"),
        // No metric yet: its request counts as usage.
        pod("fresh", "worker", "LS", 9500, "1", "2Gi", "Pending"),
        pod("done", "worker", "LS", 9500, "8", "8Gi", "Succeeded"),
        pod("batch", "worker", "BE", 5500, "0", "0", "Running"),
    ];
    let refs: Vec<PodSummary> = pods.iter().map(PodSummary::of).collect();
    let plan = plan_node(&colocation_on(), &worker(), Some(&metric), &refs, None, now);
    assert!(!plan.resources.as_ref().unwrap().degraded && !plan.resources.as_ref().unwrap().reset);
    // margin = 16000m × 40% = 6400m; system = max(2000m, kubelet 1000m) = 2000m;
    // HP used = web 3000m + fresh 1000m + dangling ghost 500m = 4500m.
    // batch-cpu = 16000 − 6400 − 2000 − 4500 = 3100 (milli, written as units).
    assert_eq!(status_value(&plan, BATCH_CPU).as_deref(), Some("3100"));
    // margin = 64Gi × 35% (truncated); system = max(2Gi, 4Gi) = 4Gi;
    // HP used = 10Gi + 2Gi + 1Gi = 13Gi.
    let margin = (64.0 * GI as f64 * 0.35) as i64;
    let expected = 64 * GI - margin - 4 * GI - 13 * GI;
    assert_eq!(
        status_value(&plan, BATCH_MEMORY),
        Some(expected.to_string())
    );
}

#[test]
fn request_and_max_usage_request_policies_and_caps() {
    let now = epoch_plus(3600);
    let cfg = config(&[(
        "colocation-config",
        json!({
            "enable": true,
            "cpuCalculatePolicy": "maxUsageRequest",
            "memoryCalculatePolicy": "request",
            "batchCPUThresholdPercent": 10,
        }),
    )]);
    let metric = metric(
        "worker",
        now,
        json!({
            "nodeMetric": {"systemUsage": {"resources": {"cpu": "0", "memory": "0"}}},
            "podsMetric": [{"namespace": "default", "name": "web", "podUsage": {"resources": {"cpu": "3", "memory": "10Gi"}}}],
        }),
    );
    let pods = [pod("web", "worker", "LS", 9500, "4", "8Gi", "Running")];
    let refs: Vec<PodSummary> = pods.iter().map(PodSummary::of).collect();
    let plan = plan_node(&cfg, &worker(), Some(&metric), &refs, None, now);
    // by max(usage, request): 16000 − 6400 − 1000 − 4000 = 4600, capped at 10% = 1600.
    assert_eq!(status_value(&plan, BATCH_CPU).as_deref(), Some("1600"));
    // by request: 64Gi − margin − reserved 4Gi − request 8Gi.
    let margin = (64.0 * GI as f64 * 0.35) as i64;
    assert_eq!(
        status_value(&plan, BATCH_MEMORY),
        Some((64 * GI - margin - 4 * GI - 8 * GI).to_string())
    );
}

#[test]
fn a_stale_node_metric_withdraws_batch_and_mid() {
    let now = epoch_plus(7200);
    // Default degradeTimeMinutes is 15: 16 minutes is too old, 14 is fine.
    let stale = metric("worker", now - Duration::from_secs(16 * 60), json!({}));
    let fresh = metric("worker", now - Duration::from_secs(14 * 60), json!({}));
    let plan = plan_node(&colocation_on(), &worker(), Some(&stale), &[], None, now);
    assert!(plan.resources.as_ref().unwrap().degraded);
    assert!(
        plan.resources
            .as_ref()
            .unwrap()
            .reason
            .contains("degradeTimeMinutes"),
        "{}",
        plan.resources.as_ref().unwrap().reason
    );
    for name in [BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY] {
        assert_eq!(plan.desired_status[name], None, "{name}");
    }
    let plan = plan_node(&colocation_on(), &worker(), Some(&fresh), &[], None, now);
    assert!(!plan.resources.as_ref().unwrap().degraded);
    assert!(plan.desired_status[BATCH_CPU].is_some());
}

#[test]
fn a_missing_node_metric_or_disabled_colocation_withdraws_resources() {
    let now = epoch_plus(0);
    let plan = plan_node(&colocation_on(), &worker(), None, &[], None, now);
    assert!(plan.resources.as_ref().unwrap().degraded);
    assert!(
        plan.resources
            .as_ref()
            .unwrap()
            .reason
            .contains("NodeMetric not found")
    );
    assert_eq!(plan.desired_status[BATCH_CPU], None);

    let fresh = metric("worker", now, json!({}));
    let disabled = SloControllerConfig::default();
    let plan = plan_node(&disabled, &worker(), Some(&fresh), &[], None, now);
    assert!(!plan.resources.as_ref().unwrap().degraded && plan.resources.as_ref().unwrap().reset);
    assert!(plan.resources.as_ref().unwrap().reason.contains("disabled"));

    // Cluster on, this node's pool off.
    let cfg = config(&[(
        "colocation-config",
        json!({"enable": true, "nodeConfigs": [
            {"name": "off", "nodeSelector": {"matchLabels": {"pool": "online"}}, "enable": false}
        ]}),
    )]);
    let plan = plan_node(&cfg, &worker(), Some(&fresh), &[], None, now);
    assert!(plan.resources.as_ref().unwrap().reset && !plan.resources.as_ref().unwrap().degraded);
}

#[test]
fn mid_resources_from_prod_reclaimable_and_static_mode() {
    let now = epoch_plus(0);
    let metric = metric(
        "worker",
        now,
        json!({
            "nodeMetric": {
                "nodeUsage": {"resources": {"cpu": "14", "memory": "10Gi"}},
                "systemUsage": {"resources": {"cpu": "1", "memory": "1Gi"}},
            },
            "prodReclaimableMetric": {"resource": {"resources": {"cpu": "5", "memory": "8Gi"}}},
        }),
    );
    let pods = [pod("web", "worker", "LS", 9500, "10", "20Gi", "Running")];
    let refs: Vec<PodSummary> = pods.iter().map(PodSummary::of).collect();
    let cfg = config(&[(
        "colocation-config",
        json!({"enable": true, "midUnallocatedPercent": 50, "midCPUThresholdPercent": 30}),
    )]);
    let plan = plan_node(&cfg, &worker(), Some(&metric), &refs, None, now);
    // cpu: min(reclaimable 5000, unused 16000−14000) = 2000; unallocated =
    // 16000 − max(reserved 1000, system 1000) − 10000 = 5000, × 50% = 2500;
    // 4500 capped at 30% × 16000 = 4800 → 4500.
    assert_eq!(status_value(&plan, MID_CPU).as_deref(), Some("4500"));
    // memory: min(8Gi, 54Gi) + (64 − 4 − 20)Gi × 50% = 28Gi (cap 100%).
    assert_eq!(status_value(&plan, MID_MEMORY).as_deref(), Some("28Gi"));

    let cfg = config(&[(
        "colocation-config",
        json!({"enable": true, "midReclaimMode": "static", "midStaticCPUReservedPercent": 25,
               "midStaticMemoryReservedPercent": 50, "midMemoryThresholdPercent": 40}),
    )]);
    let plan = plan_node(&cfg, &worker(), Some(&metric), &refs, None, now);
    assert_eq!(status_value(&plan, MID_CPU).as_deref(), Some("4k"));
    // 50% capped at 40% of 64Gi.
    assert_eq!(
        status_value(&plan, MID_MEMORY),
        Some(((64.0 * GI as f64 * 0.4) as i64).to_string())
    );
}

#[test]
fn node_strategy_precedence_first_match_wins_per_section() {
    let cfg = config(&[
        (
            "resource-threshold-config",
            json!({
                "clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 65},
                "nodeStrategies": [
                    {"name": "gpu", "nodeSelector": {"matchLabels": {"gpu": "true"}}, "cpuSuppressThresholdPercent": 30},
                    {"name": "online", "nodeSelector": {"matchLabels": {"pool": "online"}}, "cpuSuppressThresholdPercent": 50},
                    {"name": "online-2", "nodeSelector": {"matchLabels": {"pool": "online"}}, "cpuSuppressThresholdPercent": 40},
                ]
            }),
        ),
        (
            "cpu-burst-config",
            json!({"clusterStrategy": {"policy": "auto"}, "nodeStrategies": [
                {"name": "b", "nodeSelector": {"matchLabels": {"pool": "batch"}}, "policy": "cpuBurstOnly"}
            ]}),
        ),
    ]);
    let online = worker();
    let gpu_online = node(
        "gpu",
        json!({"pool": "online", "gpu": "true"}),
        ("8", "8Gi"),
        ("8", "8Gi"),
    );
    let other = node("other", json!({"pool": "x"}), ("8", "8Gi"), ("8", "8Gi"));
    let threshold = |n: &Node| {
        let spec = koord_manager::slo_controller::nodeslo::node_slo_spec(&cfg, n, None);
        let threshold = spec.resource_used_threshold_with_be.unwrap();
        assert_eq!(threshold.enable, Some(true), "cluster value kept");
        let burst = spec.cpu_burst_strategy.unwrap();
        (
            threshold.cpu_suppress_threshold_percent,
            burst.cpu_burst_config.policy.map(|p| p.as_str().to_owned()),
        )
    };
    assert_eq!(threshold(&online), (Some(50), Some("auto".into())));
    assert_eq!(threshold(&gpu_online), (Some(30), Some("auto".into())));
    assert_eq!(threshold(&other), (Some(65), Some("auto".into())));
}

#[test]
fn node_slo_is_created_updated_and_deleted_with_the_node() {
    let cfg = config(&[(
        "resource-threshold-config",
        json!({"clusterStrategy": {"enable": true}}),
    )]);
    let node = worker();
    let NodeSloAction::Create(created) = reconcile_node_slo("worker", Some(&node), None, &cfg)
    else {
        panic!("expected a create");
    };
    assert_eq!(created.metadata.name.as_deref(), Some("worker"));
    assert_eq!(
        reconcile_node_slo("worker", Some(&node), Some(&created), &cfg),
        NodeSloAction::None
    );
    let changed = config(&[(
        "resource-threshold-config",
        json!({"clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 45}}),
    )]);
    let mut existing: NodeSLO = (*created).clone();
    existing.metadata.resource_version = Some("7".into());
    let NodeSloAction::Update(updated) =
        reconcile_node_slo("worker", Some(&node), Some(&existing), &changed)
    else {
        panic!("expected an update");
    };
    assert_eq!(updated.metadata.resource_version.as_deref(), Some("7"));
    assert_eq!(
        updated
            .spec
            .resource_used_threshold_with_be
            .as_ref()
            .unwrap()
            .cpu_suppress_threshold_percent,
        Some(45)
    );
    assert_eq!(
        reconcile_node_slo("worker", None, Some(&existing), &cfg),
        NodeSloAction::Delete("worker".into())
    );
}

#[test]
fn node_metric_carries_the_collect_policy() {
    let cfg = config(&[(
        "colocation-config",
        json!({"enable": true, "metricAggregateDurationSeconds": 120, "metricReportIntervalSeconds": 30}),
    )]);
    let node = worker();
    let colocation = node_colocation(&cfg, &node);
    let NodeMetricAction::Create(spec) =
        reconcile_node_metric("worker", Some(&node), None, Some(&colocation))
    else {
        panic!("expected a create");
    };
    let policy = spec.collect_policy.clone().unwrap();
    assert_eq!(policy.aggregate_duration_seconds, Some(120));
    assert_eq!(policy.report_interval_seconds, Some(30));
    let existing = NodeMetric::new("worker", NodeMetricSpec::default());
    assert_eq!(
        reconcile_node_metric("worker", Some(&node), Some(&existing), Some(&colocation)),
        NodeMetricAction::UpdateSpec(spec)
    );
    assert_eq!(
        reconcile_node_metric("worker", None, Some(&existing), Some(&colocation)),
        NodeMetricAction::Delete("worker".into())
    );
}

#[test]
fn status_is_written_only_beyond_the_diff_threshold_or_after_the_sync_period() {
    let now = epoch_plus(10_000);
    let current: BTreeMap<String, Quantity> = [
        (BATCH_CPU, "10000"),
        (BATCH_MEMORY, "10Gi"),
        (MID_CPU, "0"),
        (MID_MEMORY, "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Quantity(v.into())))
    .collect();
    let desired = |batch_cpu: &str| {
        BTreeMap::from([
            (BATCH_CPU, Some(Quantity(batch_cpu.into()))),
            (BATCH_MEMORY, Some(Quantity("10Gi".into()))),
            (MID_CPU, Some(Quantity("0".into()))),
            (MID_MEMORY, Some(Quantity("0".into()))),
        ])
    };
    let recent = Some(now - Duration::from_secs(60));
    let long_ago = Some(now - Duration::from_secs(301));
    // Default threshold 0.1: 10000 → 10900 is within it, 11001 beyond.
    assert_eq!(
        sync_decision(None, &current, &desired("10900"), recent, now),
        SyncDecision::Skip
    );
    assert!(matches!(
        sync_decision(None, &current, &desired("11001"), recent, now),
        SyncDecision::Write(reason) if reason.contains(BATCH_CPU)
    ));
    // A small change is written once the default 300 s period has passed.
    assert!(matches!(
        sync_decision(None, &current, &desired("10900"), long_ago, now),
        SyncDecision::Write(reason) if reason.contains("updateTimeThresholdSeconds")
    ));
    // As upstream, an expired write is redone even when nothing differs
    // (10k is 10000), and so is the first write of this process...
    assert!(matches!(
        sync_decision(None, &current, &desired("10k"), long_ago, now),
        SyncDecision::Write(reason) if reason.contains("updateTimeThresholdSeconds=300")
    ));
    assert!(matches!(
        sync_decision(None, &current, &desired("10k"), None, now),
        SyncDecision::Write(_)
    ));
    // ...but not before the period is over.
    assert_eq!(
        sync_decision(None, &current, &desired("10k"), recent, now),
        SyncDecision::Skip
    );
    let at_limit = Some(now - Duration::from_secs(300));
    assert_eq!(
        sync_decision(None, &current, &desired("10k"), at_limit, now),
        SyncDecision::Skip
    );
    // A configured threshold of 0.5 tolerates +40%.
    let cfg = config(&[(
        "colocation-config",
        json!({"enable": true, "resourceDiffThreshold": 0.5}),
    )]);
    let strategy = node_colocation(&cfg, &worker()).strategy.unwrap();
    assert_eq!(
        sync_decision(Some(&strategy), &current, &desired("14000"), recent, now),
        SyncDecision::Skip
    );
    // A resource that disappears is always written.
    let mut withdrawn = desired("10000");
    withdrawn.insert(BATCH_CPU, None);
    assert!(matches!(
        sync_decision(None, &current, &withdrawn, recent, now),
        SyncDecision::Write(_)
    ));
    assert_eq!(
        status_patch(&withdrawn)["status"]["allocatable"][BATCH_CPU],
        serde_json::Value::Null
    );
}

#[test]
fn third_party_batch_allocations_and_cpu_normalization_adjust_the_status() {
    let now = epoch_plus(0);
    let mut node = worker();
    node.metadata.annotations = Some(BTreeMap::from([
        (
            "node.koordinator.sh/thirdPartyAllocations".to_owned(),
            json!({"allocations": [{"name": "yarn", "priority": "koord-batch",
                "resources": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}}]})
            .to_string(),
        ),
        ("node.koordinator.sh/cpu-normalization-ratio".to_owned(), "1.50".to_owned()),
    ]));
    let metric = metric(
        "worker",
        now,
        json!({"nodeMetric": {"systemUsage": {"resources": {"cpu": "0", "memory": "0"}}}}),
    );
    let plan = plan_node(&colocation_on(), &node, Some(&metric), &[], None, now);
    // 16000 − 6400 − 1000 = 8600, × 1.5 = 12900, − 1000 third-party = 11900.
    assert_eq!(status_value(&plan, BATCH_CPU).as_deref(), Some("11900"));
}

#[test]
fn the_origin_annotation_records_batch_before_third_party_allocations() {
    use apis::extension::QuantityValue;
    const ORIGIN: &str = "node.koordinator.sh/originExtendedAllocatable";
    let now = epoch_plus(0);
    let mut node = worker();
    node.metadata.annotations = Some(BTreeMap::from([
        (
            "node.koordinator.sh/thirdPartyAllocations".to_owned(),
            json!({"allocations": [{"name": "yarn", "priority": "koord-batch",
                "resources": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}}]})
            .to_string(),
        ),
        ("node.koordinator.sh/cpu-normalization-ratio".to_owned(), "1.50".to_owned()),
        // Another allocator's entry is kept; stale batch values are replaced.
        (
            ORIGIN.to_owned(),
            json!({"resources": {"kubernetes.io/batch-cpu": "1", "example.com/gpu": "2"}})
                .to_string(),
        ),
    ]));
    let metric = metric(
        "worker",
        now,
        json!({"nodeMetric": {"systemUsage": {"resources": {"cpu": "0", "memory": "0"}}}}),
    );
    let plan = plan_node(&colocation_on(), &node, Some(&metric), &[], None, now);
    let written = plan
        .resources
        .as_ref()
        .unwrap()
        .origin_annotation(&node)
        .expect("the batch values differ from the annotation");
    let origin: serde_json::Value = serde_json::from_str(&written).unwrap();
    let value = |text: &serde_json::Value| {
        QuantityValue::of(&Quantity(text.as_str().unwrap().to_owned()))
            .unwrap()
            .value()
    };
    // 8600 × 1.5 = 12900, before the 1000 taken by YARN (status: 11900).
    assert_eq!(origin["resources"][BATCH_CPU], "12900");
    assert_eq!(origin["resources"]["example.com/gpu"], "2");
    let status_memory = value(&json!(status_value(&plan, BATCH_MEMORY).unwrap()));
    assert_eq!(
        value(&origin["resources"][BATCH_MEMORY]),
        plan.resources.as_ref().unwrap().batch.memory_bytes
    );
    assert_eq!(
        status_memory,
        plan.resources.as_ref().unwrap().batch.memory_bytes - GI
    );

    // Once written, the same values need no rewrite.
    node.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ORIGIN.to_owned(), written);
    assert_eq!(
        plan.resources.as_ref().unwrap().origin_annotation(&node),
        None
    );

    // Withdrawn resources record zero, as upstream's reset does.
    let off = plan_node(
        &SloControllerConfig::default(),
        &node,
        Some(&metric),
        &[],
        None,
        now,
    );
    assert!(off.resources.as_ref().unwrap().reset);
    let zero: serde_json::Value = serde_json::from_str(
        &off.resources
            .as_ref()
            .unwrap()
            .origin_annotation(&node)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(zero["resources"][BATCH_CPU], "0");
    assert_eq!(zero["resources"][BATCH_MEMORY], "0");
}

/// (ours) `cpu-latency-protection-config` renders into the NodeSLO extension
/// `cpuLatencyProtection`; other extensions are kept.
#[test]
fn latency_protection_config_renders_into_the_node_slo_extension() {
    use apis::slo::v1alpha1::cpu_latency_protection;

    let db = node("db-1", json!({"pool": "db"}), ("8", "32Gi"), ("8", "32Gi"));
    let web = node(
        "web-1",
        json!({"pool": "web"}),
        ("8", "32Gi"),
        ("8", "32Gi"),
    );
    let cfg = config(&[(
        "cpu-latency-protection-config",
        json!({"nodeStrategies": [{
            "name": "db",
            "nodeSelector": {"matchLabels": {"pool": "db"}},
            "enable": true,
            "targetWaitPercent": 15,
        }]}),
    )]);
    // An extension someone else wrote is already there.
    let mut existing: NodeSLO = serde_json::from_value(json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
        "metadata": {"name": "db-1", "resourceVersion": "3"},
        "spec": {"extensions": {"Object": {"other": {"x": 1}}}},
    }))
    .unwrap();
    let NodeSloAction::Update(updated) =
        reconcile_node_slo("db-1", Some(&db), Some(&existing), &cfg)
    else {
        panic!("expected an update");
    };
    let extensions = updated.spec.extensions.as_ref().unwrap();
    assert_eq!(extensions.object["other"], json!({"x": 1}));
    assert_eq!(
        extensions.object["cpuLatencyProtection"],
        json!({"enable": true, "targetWaitPercent": 15})
    );
    let settings = cpu_latency_protection(Some(extensions)).unwrap().unwrap();
    assert_eq!(settings.target_wait_percent, 15);
    // Rendered again: nothing to do.
    assert_eq!(
        reconcile_node_slo("db-1", Some(&db), Some(&updated), &cfg),
        NodeSloAction::None
    );
    // A node no strategy matches gets no extension.
    let NodeSloAction::Create(created) = reconcile_node_slo("web-1", Some(&web), None, &cfg) else {
        panic!("expected a create");
    };
    assert!(
        !created
            .spec
            .extensions
            .as_ref()
            .unwrap()
            .object
            .contains_key("cpuLatencyProtection")
    );
    // The strategy dropped from the key: the extension goes, "other" stays.
    let dropped = config(&[(
        "cpu-latency-protection-config",
        json!({"nodeStrategies": []}),
    )]);
    existing = (*updated).clone();
    let NodeSloAction::Update(removed) =
        reconcile_node_slo("db-1", Some(&db), Some(&existing), &dropped)
    else {
        panic!("expected an update");
    };
    let extensions = removed.spec.extensions.as_ref().unwrap();
    assert!(!extensions.object.contains_key("cpuLatencyProtection"));
    assert_eq!(extensions.object["other"], json!({"x": 1}));
    // Without the key the extension is left as it is.
    assert_eq!(
        reconcile_node_slo(
            "db-1",
            Some(&db),
            Some(&updated),
            &SloControllerConfig::default()
        ),
        NodeSloAction::None
    );
}

/// (ours) An invalid `cpu-latency-protection-config` is refused with its
/// problem and the last valid value stays in force.
#[test]
fn an_invalid_latency_protection_config_is_refused_and_the_last_valid_kept() {
    let key = "cpu-latency-protection-config";
    let good = json!({"clusterStrategy": {"enable": true, "targetWaitPercent": 20}}).to_string();
    let bad = json!({"clusterStrategy": {"enable": true, "targetWaitPercent": 0}}).to_string();
    let mut state = ConfigState::default();
    let data = |value: &str| BTreeMap::from([(key.to_owned(), value.to_owned())]);
    assert_eq!(
        state.offer(Some(&data(&good))).outcome(),
        ConfigOutcome::Applied
    );
    let update = state.offer(Some(&data(&bad)));
    let ConfigOutcome::Rejected(text) = update.outcome() else {
        panic!("expected a rejection: {update:?}");
    };
    assert!(
        text.contains("cpu-latency-protection-config") && text.contains("targetWaitPercent = 0"),
        "{text}"
    );
    assert_eq!(state.current().other_keys[key], good);
    // Never valid: not kept at all.
    let mut fresh = ConfigState::default();
    fresh.offer(Some(&data(&bad)));
    assert!(!fresh.current().other_keys.contains_key(key));
}
