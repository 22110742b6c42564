//! `apis::extension`: QoS and priority derivation tables, and every JSON
//! annotation helper against the exact JSON upstream writes and reads.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use apis::extension::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

/// A pod whose containers have the given resources (JSON
/// `{"requests": {...}, "limits": {...}}` per container).
fn pod_with(labels: Value, priority: Option<i32>, containers: &[Value]) -> Pod {
    let containers: Vec<Value> = containers
        .iter()
        .enumerate()
        .map(|(i, resources)| json!({"name": format!("c{i}"), "resources": resources}))
        .collect();
    let mut spec = json!({ "containers": containers });
    if let Some(priority) = priority {
        spec["priority"] = json!(priority);
    }
    pod(json!({"metadata": {"name": "p", "labels": labels}, "spec": spec}))
}

fn guaranteed() -> Value {
    json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1000m", "memory": "1073741824"}})
}

fn burstable() -> Value {
    json!({"requests": {"cpu": "500m"}})
}

fn best_effort() -> Value {
    json!({})
}

fn annotations(pairs: &[(&str, &str)]) -> StringMap {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn one(key: &str, value: &str) -> StringMap {
    annotations(&[(key, value)])
}

fn quantities(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

fn as_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

// ---------------------------------------------------------------------------
// QoS
// ---------------------------------------------------------------------------

#[test]
fn qos_class_strings_match_upstream() {
    let expected = [
        (QoSClass::LSE, "LSE"),
        (QoSClass::LSR, "LSR"),
        (QoSClass::LS, "LS"),
        (QoSClass::BE, "BE"),
        (QoSClass::System, "SYSTEM"),
        (QoSClass::None, ""),
    ];
    for (class, text) in expected {
        assert_eq!(class.as_str(), text);
        assert_eq!(QoSClass::from_name(text), class);
    }
    assert_eq!(QoSClass::from_name("Guaranteed"), QoSClass::None);
    assert_eq!(LABEL_POD_QOS, "koordinator.sh/qosClass");
}

#[test]
fn qos_derivation_table() {
    let cases: Vec<(&str, Pod, QoSClass)> = vec![
        (
            "LSE label",
            pod_with(
                json!({"koordinator.sh/qosClass": "LSE"}),
                None,
                &[best_effort()],
            ),
            QoSClass::LSE,
        ),
        (
            "LSR label",
            pod_with(
                json!({"koordinator.sh/qosClass": "LSR"}),
                None,
                &[best_effort()],
            ),
            QoSClass::LSR,
        ),
        (
            "LS label",
            pod_with(
                json!({"koordinator.sh/qosClass": "LS"}),
                None,
                &[guaranteed()],
            ),
            QoSClass::LS,
        ),
        (
            "BE label beats Guaranteed",
            pod_with(
                json!({"koordinator.sh/qosClass": "BE"}),
                None,
                &[guaranteed()],
            ),
            QoSClass::BE,
        ),
        (
            "SYSTEM label",
            pod_with(
                json!({"koordinator.sh/qosClass": "SYSTEM"}),
                None,
                &[burstable()],
            ),
            QoSClass::System,
        ),
        (
            "Guaranteed → LSR",
            pod_with(json!({}), None, &[guaranteed()]),
            QoSClass::LSR,
        ),
        (
            "Burstable → LS",
            pod_with(json!({}), None, &[burstable()]),
            QoSClass::LS,
        ),
        (
            "BestEffort → BE",
            pod_with(json!({}), None, &[best_effort()]),
            QoSClass::BE,
        ),
        (
            "unknown label falls back to Kubernetes QoS",
            pod_with(
                json!({"koordinator.sh/qosClass": "gold"}),
                None,
                &[guaranteed()],
            ),
            QoSClass::LSR,
        ),
        (
            "empty label falls back",
            pod_with(
                json!({"koordinator.sh/qosClass": ""}),
                None,
                &[best_effort()],
            ),
            QoSClass::BE,
        ),
        (
            "lower-case label is unknown",
            pod_with(
                json!({"koordinator.sh/qosClass": "be"}),
                None,
                &[burstable()],
            ),
            QoSClass::LS,
        ),
    ];
    for (name, pod, expected) in cases {
        assert_eq!(qos_class_of_pod(&pod), expected, "{name}");
    }
}

#[test]
fn raw_qos_ignores_kubernetes_qos() {
    assert_eq!(
        pod_qos_class_raw(&pod_with(json!({}), None, &[guaranteed()])),
        QoSClass::None
    );
    assert_eq!(
        pod_qos_class_raw(&pod_with(
            json!({"koordinator.sh/qosClass": "LS"}),
            None,
            &[]
        )),
        QoSClass::LS
    );
    assert_eq!(pod_qos_class_raw(&pod(json!({}))), QoSClass::None);
}

#[test]
fn recorded_status_qos_class_wins_over_computation() {
    let mut recorded = pod_with(json!({}), None, &[best_effort()]);
    recorded.status = Some(serde_json::from_value(json!({"qosClass": "Guaranteed"})).unwrap());
    assert_eq!(qos_class_of_pod(&recorded), QoSClass::LSR);

    let mut unknown = pod_with(json!({}), None, &[guaranteed()]);
    unknown.status = Some(serde_json::from_value(json!({"qosClass": "Platinum"})).unwrap());
    assert_eq!(kube_qos_class_of_pod(&unknown), None);
    assert_eq!(qos_class_of_pod(&unknown), QoSClass::None);

    let mut empty = pod_with(json!({}), None, &[guaranteed()]);
    empty.status = Some(serde_json::from_value(json!({"qosClass": ""})).unwrap());
    assert_eq!(
        kube_qos_class_of_pod(&empty),
        Some(KubeQoSClass::Guaranteed)
    );
}

#[test]
fn kubernetes_qos_computation_follows_kubelet_rules() {
    let cases: Vec<(&str, Vec<Value>, Option<Value>, KubeQoSClass)> = vec![
        ("no containers", vec![], None, KubeQoSClass::BestEffort),
        (
            "equal requests and limits in other units",
            vec![guaranteed()],
            None,
            KubeQoSClass::Guaranteed,
        ),
        (
            "limits only (no defaulting here)",
            vec![json!({"limits": {"cpu": "1", "memory": "1Gi"}})],
            None,
            KubeQoSClass::Burstable,
        ),
        (
            "memory limit missing",
            vec![json!({"requests": {"cpu": "1"}, "limits": {"cpu": "1"}})],
            None,
            KubeQoSClass::Burstable,
        ),
        (
            "requests below limits",
            vec![
                json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}),
            ],
            None,
            KubeQoSClass::Burstable,
        ),
        (
            "zero amounts do not count",
            vec![json!({"requests": {"cpu": "0", "memory": "0"}})],
            None,
            KubeQoSClass::BestEffort,
        ),
        (
            "extended resources do not count",
            vec![
                json!({"requests": {"kubernetes.io/batch-cpu": "1000"}, "limits": {"kubernetes.io/batch-cpu": "1000"}}),
            ],
            None,
            KubeQoSClass::BestEffort,
        ),
        (
            "one Guaranteed and one BestEffort container",
            vec![guaranteed(), best_effort()],
            None,
            KubeQoSClass::Burstable,
        ),
        (
            "two Guaranteed containers",
            vec![guaranteed(), guaranteed()],
            None,
            KubeQoSClass::Guaranteed,
        ),
        (
            "init container without limits",
            vec![guaranteed()],
            Some(json!({"requests": {"cpu": "100m"}})),
            KubeQoSClass::Burstable,
        ),
        (
            "Guaranteed init container",
            vec![guaranteed()],
            Some(guaranteed()),
            KubeQoSClass::Guaranteed,
        ),
        (
            "unparsable quantity is skipped",
            vec![json!({"requests": {"cpu": "lots"}})],
            None,
            KubeQoSClass::BestEffort,
        ),
    ];
    for (name, containers, init, expected) in cases {
        let mut p = pod_with(json!({}), None, &containers);
        if let Some(init) = init {
            p.spec.as_mut().unwrap().init_containers = Some(vec![
                serde_json::from_value(json!({"name": "init", "resources": init})).unwrap(),
            ]);
        }
        assert_eq!(compute_kube_qos_class(p.spec.as_ref()), expected, "{name}");
    }
    assert_eq!(compute_kube_qos_class(None), KubeQoSClass::BestEffort);
}

// ---------------------------------------------------------------------------
// Priority
// ---------------------------------------------------------------------------

#[test]
fn priority_class_strings_and_defaults_match_upstream() {
    let expected = [
        (PriorityClass::Prod, "koord-prod", 9500, Some(9000..=9999)),
        (PriorityClass::Mid, "koord-mid", 7500, Some(7000..=7999)),
        (PriorityClass::Batch, "koord-batch", 5500, Some(5000..=5999)),
        (PriorityClass::Free, "koord-free", 3500, Some(3000..=3999)),
        (PriorityClass::None, "", 0, None),
    ];
    for (class, text, default, band) in expected {
        assert_eq!(class.as_str(), text);
        assert_eq!(PriorityClass::from_name(text), class);
        assert_eq!(class.default_value(), default);
        assert_eq!(class.value_range(), band);
    }
    assert_eq!(PriorityClass::from_name("koord-gold"), PriorityClass::None);
}

#[test]
fn priority_band_edges() {
    let cases = [
        (i32::MIN, PriorityClass::None),
        (-1, PriorityClass::None),
        (0, PriorityClass::None),
        (2999, PriorityClass::None),
        (3000, PriorityClass::Free),
        (3999, PriorityClass::Free),
        (4000, PriorityClass::None),
        (4999, PriorityClass::None),
        (5000, PriorityClass::Batch),
        (5999, PriorityClass::Batch),
        (6000, PriorityClass::None),
        (6999, PriorityClass::None),
        (7000, PriorityClass::Mid),
        (7999, PriorityClass::Mid),
        (8000, PriorityClass::None),
        (8999, PriorityClass::None),
        (9000, PriorityClass::Prod),
        (9999, PriorityClass::Prod),
        (10000, PriorityClass::None),
        (2_000_000_000, PriorityClass::None),
    ];
    for (value, expected) in cases {
        assert_eq!(
            PriorityClass::from_priority_value(value),
            expected,
            "priority {value}"
        );
        let raw = pod_priority_class_raw(&pod_with(json!({}), Some(value), &[]));
        assert_eq!(raw, expected, "raw class of a pod with priority {value}");
    }
}

#[test]
fn priority_derivation_table() {
    let label = |class: &str| json!({"koordinator.sh/priority-class": class});
    let cases: Vec<(&str, Pod, PriorityClass)> = vec![
        (
            "label beats spec.priority",
            pod_with(label("koord-batch"), Some(9500), &[guaranteed()]),
            PriorityClass::Batch,
        ),
        (
            "label without priority",
            pod_with(label("koord-mid"), None, &[best_effort()]),
            PriorityClass::Mid,
        ),
        (
            "band of spec.priority",
            pod_with(json!({}), Some(3100), &[guaranteed()]),
            PriorityClass::Free,
        ),
        (
            "prod band",
            pod_with(json!({}), Some(9999), &[best_effort()]),
            PriorityClass::Prod,
        ),
        (
            "outside every band: from Kubernetes QoS (Burstable → LS → prod)",
            pod_with(json!({}), Some(100), &[burstable()]),
            PriorityClass::Prod,
        ),
        (
            "no priority, BestEffort → BE → batch",
            pod_with(json!({}), None, &[best_effort()]),
            PriorityClass::Batch,
        ),
        (
            "no priority, Guaranteed → LSR → prod",
            pod_with(json!({}), None, &[guaranteed()]),
            PriorityClass::Prod,
        ),
        (
            "QoS label BE → batch",
            pod_with(
                json!({"koordinator.sh/qosClass": "BE"}),
                Some(0),
                &[guaranteed()],
            ),
            PriorityClass::Batch,
        ),
        (
            "QoS label SYSTEM → prod",
            pod_with(
                json!({"koordinator.sh/qosClass": "SYSTEM"}),
                None,
                &[best_effort()],
            ),
            PriorityClass::Prod,
        ),
        // Upstream stops at an unknown label: spec.priority is not consulted.
        (
            "unknown label skips spec.priority",
            pod_with(label("koord-gold"), Some(9500), &[best_effort()]),
            PriorityClass::Batch,
        ),
    ];
    for (name, pod, expected) in cases {
        assert_eq!(priority_class_of_pod(&pod), expected, "{name}");
    }
    assert_eq!(
        pod_priority_class_raw(&pod_with(label("koord-gold"), Some(9500), &[])),
        PriorityClass::None
    );
}

#[test]
fn priority_class_from_qos() {
    let cases = [
        (QoSClass::System, PriorityClass::Prod),
        (QoSClass::LSE, PriorityClass::Prod),
        (QoSClass::LSR, PriorityClass::Prod),
        (QoSClass::LS, PriorityClass::Prod),
        (QoSClass::BE, PriorityClass::Batch),
        (QoSClass::None, PriorityClass::None),
    ];
    for (qos, expected) in cases {
        assert_eq!(priority_class_for_qos(qos), expected, "{qos:?}");
    }
}

#[test]
fn priority_value_with_default() {
    assert_eq!(
        pod_priority_value_with_default(&pod_with(json!({}), Some(5123), &[])),
        5123
    );
    // 0 counts as unset: the default of the derived class (BestEffort → batch).
    assert_eq!(
        pod_priority_value_with_default(&pod_with(json!({}), Some(0), &[best_effort()])),
        5500
    );
    assert_eq!(
        pod_priority_value_with_default(&pod_with(
            json!({"koordinator.sh/priority-class": "koord-mid"}),
            None,
            &[]
        )),
        7500
    );
}

#[test]
fn sub_priority_label() {
    assert_eq!(get_pod_sub_priority(&StringMap::new()).unwrap(), None);
    assert_eq!(
        get_pod_sub_priority(&one(LABEL_POD_PRIORITY, "")).unwrap(),
        None
    );
    assert_eq!(
        get_pod_sub_priority(&one(LABEL_POD_PRIORITY, "1234")).unwrap(),
        Some(1234)
    );
    assert_eq!(
        get_pod_sub_priority(&one(LABEL_POD_PRIORITY, "-7")).unwrap(),
        Some(-7)
    );
    assert_eq!(
        get_pod_sub_priority(&one(LABEL_POD_PRIORITY, "0x10")).unwrap(),
        Some(16)
    );
    let err = get_pod_sub_priority(&one(LABEL_POD_PRIORITY, "high")).unwrap_err();
    assert!(
        matches!(&err, ExtensionError::InvalidValue { key, .. } if key == "koordinator.sh/priority")
    );
    assert!(get_pod_sub_priority(&one(LABEL_POD_PRIORITY, "99999999999")).is_err());
}

// ---------------------------------------------------------------------------
// Resource names
// ---------------------------------------------------------------------------

#[test]
fn resource_names_match_upstream() {
    let names = [
        (BATCH_CPU, "kubernetes.io/batch-cpu"),
        (BATCH_MEMORY, "kubernetes.io/batch-memory"),
        (MID_CPU, "kubernetes.io/mid-cpu"),
        (MID_MEMORY, "kubernetes.io/mid-memory"),
        (KOORD_BATCH_CPU, "koordinator.sh/batch-cpu"),
        (KOORD_BATCH_MEMORY, "koordinator.sh/batch-memory"),
        (RESOURCE_GPU, "koordinator.sh/gpu"),
        (RESOURCE_GPU_CORE, "koordinator.sh/gpu-core"),
        (RESOURCE_GPU_MEMORY, "koordinator.sh/gpu-memory"),
        (RESOURCE_GPU_MEMORY_RATIO, "koordinator.sh/gpu-memory-ratio"),
        (RESOURCE_GPU_SHARED, "koordinator.sh/gpu.shared"),
        (RESOURCE_RDMA, "koordinator.sh/rdma"),
        (RESOURCE_FPGA, "koordinator.sh/fpga"),
        (RESOURCE_NVIDIA_GPU, "nvidia.com/gpu"),
        (RESOURCE_AMD_GPU, "amd.com/gpu"),
        (RESOURCE_HYGON_DCU, "dcu.com/gpu"),
        (RESOURCE_HUAWEI_NPU_CORE, "huawei.com/npu-core"),
        (DEPRECATED_KOORD_GPU, "kubernetes.io/gpu"),
        (DEPRECATED_KOORD_RDMA, "kubernetes.io/rdma"),
    ];
    for (constant, expected) in names {
        assert_eq!(constant, expected);
    }
}

#[test]
fn priority_to_extended_resource_mapping() {
    assert_eq!(
        extended_resource_name(PriorityClass::Batch, "cpu"),
        Some("kubernetes.io/batch-cpu")
    );
    assert_eq!(
        extended_resource_name(PriorityClass::Batch, "memory"),
        Some("kubernetes.io/batch-memory")
    );
    assert_eq!(
        extended_resource_name(PriorityClass::Mid, "cpu"),
        Some("kubernetes.io/mid-cpu")
    );
    assert_eq!(
        extended_resource_name(PriorityClass::Mid, "memory"),
        Some("kubernetes.io/mid-memory")
    );
    assert_eq!(extended_resource_name(PriorityClass::Prod, "cpu"), None);
    assert_eq!(extended_resource_name(PriorityClass::Free, "cpu"), None);
    assert_eq!(
        extended_resource_name(PriorityClass::Batch, "ephemeral-storage"),
        None
    );

    assert_eq!(
        translate_resource_name_by_priority_class(PriorityClass::Prod, "cpu"),
        Some("cpu")
    );
    assert_eq!(
        translate_resource_name_by_priority_class(PriorityClass::None, "memory"),
        Some("memory")
    );
    assert_eq!(
        translate_resource_name_by_priority_class(PriorityClass::Batch, "cpu"),
        Some("kubernetes.io/batch-cpu")
    );
    assert_eq!(
        translate_resource_name_by_priority_class(PriorityClass::Free, "cpu"),
        None
    );

    assert_eq!(
        priority_class_of_extended_resource(BATCH_MEMORY),
        Some(PriorityClass::Batch)
    );
    assert_eq!(
        priority_class_of_extended_resource(MID_CPU),
        Some(PriorityClass::Mid)
    );
    assert_eq!(priority_class_of_extended_resource("cpu"), None);

    assert_eq!(
        current_batch_resource_name("koordinator.sh/batch-cpu"),
        Some(BATCH_CPU)
    );
    assert_eq!(
        current_device_resource_name("kubernetes.io/gpu-core"),
        Some(RESOURCE_GPU_CORE)
    );
    assert_eq!(
        current_device_resource_name("kubernetes.io/batch-cpu"),
        None
    );
}

#[test]
fn replace_resources_annotation() {
    let config = get_pod_replace_resources_config(&one(
        ANNOTATION_POD_REPLACE_RESOURCES,
        "nvidia.com/gpu:koordinator.sh/gpu, example.com/foo: ,bad,a:b:c",
    ));
    assert_eq!(config.erase_names, vec!["example.com/foo".to_owned()]);
    assert_eq!(
        config.replace_mappings,
        BTreeMap::from([("nvidia.com/gpu".to_owned(), "koordinator.sh/gpu".to_owned())])
    );
    assert_eq!(
        get_pod_replace_resources_config(&StringMap::new()),
        ReplaceResourcesConfig::default()
    );
}

// ---------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------

#[test]
fn well_known_keys_match_upstream() {
    let keys = [
        (LABEL_POD_PRIORITY_CLASS, "koordinator.sh/priority-class"),
        (LABEL_POD_EVICT_ENABLED, "koordinator.sh/eviction-enabled"),
        (
            ANNOTATION_POD_EVICT_POLICY,
            "koordinator.sh/eviction-policy",
        ),
        (
            ANNOTATION_RESOURCE_SPEC,
            "scheduling.koordinator.sh/resource-spec",
        ),
        (
            ANNOTATION_RESOURCE_STATUS,
            "scheduling.koordinator.sh/resource-status",
        ),
        (
            ANNOTATION_DEVICE_ALLOCATED,
            "scheduling.koordinator.sh/device-allocated",
        ),
        (
            ANNOTATION_RESERVATION_ALLOCATED,
            "scheduling.koordinator.sh/reservation-allocated",
        ),
        (
            ANNOTATION_GANG_WAIT_TIME,
            "gang.scheduling.koordinator.sh/waiting-time",
        ),
        (
            ANNOTATION_ALIAS_GANG_MATCH_POLICY,
            "pod-group.scheduling.sigs.k8s.io/match-policy",
        ),
        (
            ANNOTATION_BIND_GANG_GROUP_ID,
            "internal.scheduling.koordinator.sh/bind-gang-group-id",
        ),
        (
            ANNOTATION_NODE_RESERVATION,
            "node.koordinator.sh/reservation",
        ),
        (
            ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
            "kubelet.koordinator.sh/cpu-manager-policy",
        ),
        (LABEL_QUOTA_PARENT, "quota.scheduling.koordinator.sh/parent"),
        (
            ANNOTATION_SKIP_UPDATE_RESOURCE,
            "config.koordinator.sh/skip-update-resources",
        ),
        (
            ANNOTATION_SKIP_HOOK_SERVER,
            "runtimeproxy.koordinator.sh/skip-hookserver",
        ),
        (
            ANNOTATION_EXTENDED_RESOURCE_SPEC,
            "node.koordinator.sh/extended-resource-spec",
        ),
        (ANNOTATION_POD_CPU_QOS, "koordinator.sh/cpuQOS"),
        (ANNOTATION_POD_MEMORY_QOS, "koordinator.sh/memoryQOS"),
    ];
    for (constant, expected) in keys {
        assert_eq!(constant, expected);
    }
}

// ---------------------------------------------------------------------------
// JSON annotations: exact upstream JSON in, same JSON out
// ---------------------------------------------------------------------------

/// Reads `text` under `key` with `get`, writes it back with `set`, and
/// checks the written text is exactly `text`.
fn assert_exact_round_trip<T: std::fmt::Debug>(
    key: &str,
    text: &str,
    get: fn(&StringMap) -> Result<Option<T>, ExtensionError>,
    set: fn(&mut StringMap, &T) -> Result<(), ExtensionError>,
) -> T {
    let value = get(&one(key, text)).unwrap().unwrap();
    let mut written = StringMap::new();
    set(&mut written, &value).unwrap();
    assert_eq!(written.get(key).map(String::as_str), Some(text), "{key}");
    assert!(get(&StringMap::new()).unwrap().is_none(), "{key} absent");
    value
}

/// Like [`assert_exact_round_trip`] but compares JSON values, for types that
/// embed Kubernetes structs (k8s-openapi orders their fields alphabetically).
fn assert_semantic_round_trip<T: std::fmt::Debug>(
    key: &str,
    text: &str,
    get: fn(&StringMap) -> Result<Option<T>, ExtensionError>,
    set: fn(&mut StringMap, &T) -> Result<(), ExtensionError>,
) -> T {
    let value = get(&one(key, text)).unwrap().unwrap();
    let mut written = StringMap::new();
    set(&mut written, &value).unwrap();
    assert_eq!(as_json(&written[key]), as_json(text), "{key}");
    value
}

#[test]
fn resource_spec_round_trip() {
    let spec = assert_exact_round_trip(
        ANNOTATION_RESOURCE_SPEC,
        r#"{"requiredCPUBindPolicy":"FullPCPUs","preferredCPUBindPolicy":"SpreadByPCPUs","preferredCPUExclusivePolicy":"PCPULevel"}"#,
        get_resource_spec,
        set_resource_spec,
    );
    assert_eq!(
        spec.required_cpu_bind_policy,
        Some(CPUBindPolicy::FullPCPUs)
    );
    assert_eq!(
        spec.preferred_cpu_exclusive_policy,
        Some(CPUExclusivePolicy::PCPULevel)
    );
    // Go writes `{}` for an empty spec and reads `""` as unset.
    assert_exact_round_trip(
        ANNOTATION_RESOURCE_SPEC,
        "{}",
        get_resource_spec,
        set_resource_spec,
    );
    let empty = get_resource_spec(&one(
        ANNOTATION_RESOURCE_SPEC,
        r#"{"preferredCPUBindPolicy":""}"#,
    ))
    .unwrap();
    assert_eq!(empty, Some(ResourceSpec::default()));
    let unknown = get_resource_spec(&one(
        ANNOTATION_RESOURCE_SPEC,
        r#"{"preferredCPUBindPolicy":"Tight"}"#,
    ));
    assert!(matches!(unknown, Err(ExtensionError::MalformedJson { .. })));
}

#[test]
fn resource_status_round_trip() {
    let status = assert_exact_round_trip(
        ANNOTATION_RESOURCE_STATUS,
        r#"{"cpuset":"0-3,8","numaNodeResources":[{"node":0,"resources":{"cpu":"4","memory":"8Gi"}},{"node":1}]}"#,
        get_resource_status,
        set_resource_status,
    );
    assert_eq!(status.cpuset, "0-3,8");
    assert_eq!(
        status.numa_node_resources[0].resources,
        quantities(&[("cpu", "4"), ("memory", "8Gi")])
    );
    assert_eq!(status.numa_node_resources[1].node, 1);
    // Go writes `null` for nil slices; read as empty.
    let nulls = get_resource_status(&one(
        ANNOTATION_RESOURCE_STATUS,
        r#"{"numaNodeResources":null}"#,
    ))
    .unwrap();
    assert_eq!(nulls, Some(ResourceStatus::default()));
}

#[test]
fn numa_topology_spec_round_trip() {
    let spec = assert_exact_round_trip(
        ANNOTATION_NUMA_TOPOLOGY_SPEC,
        r#"{"numaTopologyPolicy":"SingleNUMANode","singleNUMANodeExclusive":"Required"}"#,
        get_numa_topology_spec,
        set_numa_topology_spec,
    );
    assert_eq!(
        spec.numa_topology_policy,
        NUMATopologyPolicy::SingleNUMANode
    );
    assert_eq!(
        spec.single_numa_node_exclusive,
        Some(NumaTopologyExclusive::Required)
    );
    let none = get_numa_topology_spec(&one(
        ANNOTATION_NUMA_TOPOLOGY_SPEC,
        r#"{"numaTopologyPolicy":""}"#,
    ))
    .unwrap()
    .unwrap();
    assert_eq!(none.numa_topology_policy, NUMATopologyPolicy::None);
}

#[test]
fn node_cpu_topology_annotations_round_trip() {
    assert_exact_round_trip(
        ANNOTATION_NODE_CPU_TOPOLOGY,
        r#"{"detail":[{"id":0,"core":0,"socket":0,"node":0},{"id":1,"core":0,"socket":0,"node":0}]}"#,
        get_cpu_topology,
        set_cpu_topology,
    );
    assert_exact_round_trip(
        ANNOTATION_NODE_CPU_ALLOCS,
        r#"[{"namespace":"default","name":"web","uid":"u-1","cpuset":"2-3","managedByKubelet":true}]"#,
        get_pod_cpu_allocs,
        set_pod_cpu_allocs,
    );
    assert_exact_round_trip(
        ANNOTATION_NODE_CPU_SHARED_POOLS,
        r#"[{"socket":0,"node":0,"cpuset":"0-7"},{"socket":1,"node":1,"cpuset":"8-15"}]"#,
        get_node_cpu_shared_pools,
        |a, v| set_node_cpu_shared_pools(a, v),
    );
    assert_exact_round_trip(
        ANNOTATION_NODE_BE_CPU_SHARED_POOLS,
        r#"[{"socket":0,"node":0,"cpuset":"0-15"}]"#,
        get_node_be_cpu_shared_pools,
        |a, v| set_node_be_cpu_shared_pools(a, v),
    );
}

#[test]
fn kubelet_cpu_manager_policy_and_node_bind_policy() {
    let policy = assert_exact_round_trip(
        ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
        r#"{"policy":"static","options":{"full-pcpus-only":"true"},"reservedCPUs":"0-1"}"#,
        get_kubelet_cpu_manager_policy,
        set_kubelet_cpu_manager_policy,
    );
    let no_labels = StringMap::new();
    assert_eq!(
        node_cpu_bind_policy(&no_labels, Some(&policy)),
        NodeCPUBindPolicy::FullPCPUsOnly
    );
    assert_eq!(
        node_cpu_bind_policy(&no_labels, None),
        NodeCPUBindPolicy::None
    );
    let spread = one(LABEL_NODE_CPU_BIND_POLICY, "SpreadByPCPUs");
    assert_eq!(
        node_cpu_bind_policy(&spread, None),
        NodeCPUBindPolicy::SpreadByPCPUs
    );
    // kubelet's full-pcpus-only wins over a spread label.
    assert_eq!(
        node_cpu_bind_policy(&spread, Some(&policy)),
        NodeCPUBindPolicy::FullPCPUsOnly
    );
    assert_eq!(
        node_cpu_bind_policy(&one(LABEL_NODE_CPU_BIND_POLICY, "Bogus"), None),
        NodeCPUBindPolicy::None
    );

    let mut labels = StringMap::new();
    set_node_numa_topology_policy(&mut labels, NUMATopologyPolicy::Restricted);
    assert_eq!(labels[LABEL_NUMA_TOPOLOGY_POLICY], "Restricted");
    assert_eq!(
        node_numa_topology_policy(&labels).unwrap(),
        NUMATopologyPolicy::Restricted
    );
    assert_eq!(
        node_numa_topology_policy(&StringMap::new()).unwrap(),
        NUMATopologyPolicy::None
    );
    assert!(node_numa_topology_policy(&one(LABEL_NUMA_TOPOLOGY_POLICY, "Loose")).is_err());
    assert_eq!(
        node_numa_allocate_strategy(&one(LABEL_NODE_NUMA_ALLOCATE_STRATEGY, "DistributeEvenly")),
        Some(NUMAAllocateStrategy::DistributeEvenly)
    );
}

#[test]
fn reservation_allocated_round_trip() {
    let allocated = assert_exact_round_trip(
        ANNOTATION_RESERVATION_ALLOCATED,
        r#"{"name":"reservation-1","uid":"0f5a2c1e"}"#,
        get_reservation_allocated,
        set_reservation_allocated,
    );
    assert_eq!(allocated.name, "reservation-1");

    let mut annotations = one(
        ANNOTATION_RESERVATION_ALLOCATED,
        r#"{"name":"r","uid":"abc"}"#,
    );
    assert!(!remove_reservation_allocated(&mut annotations, "other").unwrap());
    assert!(annotations.contains_key(ANNOTATION_RESERVATION_ALLOCATED));
    assert!(remove_reservation_allocated(&mut annotations, "abc").unwrap());
    assert!(annotations.is_empty());
}

#[test]
fn reservation_affinity_round_trip() {
    let affinity = assert_semantic_round_trip(
        ANNOTATION_RESERVATION_AFFINITY,
        r#"{"name":"r","requiredDuringSchedulingIgnoredDuringExecution":{"reservationSelectorTerms":[{"matchExpressions":[{"key":"team","operator":"In","values":["a"]}]}]},"reservationSelector":{"app":"web"},"tolerations":[{"key":"dedicated","operator":"Exists","effect":"NoSchedule"}]}"#,
        get_reservation_affinity,
        set_reservation_affinity,
    );
    assert_eq!(affinity.reservation_selector["app"], "web");
    assert_eq!(affinity.tolerations[0].key.as_deref(), Some("dedicated"));
    // Present but empty: an empty affinity, not absent.
    assert_eq!(
        get_reservation_affinity(&one(ANNOTATION_RESERVATION_AFFINITY, "")).unwrap(),
        Some(ReservationAffinity::default())
    );
    assert_eq!(get_reservation_affinity(&StringMap::new()).unwrap(), None);
}

#[test]
fn reservation_options_round_trip() {
    assert_exact_round_trip(
        ANNOTATION_RESERVATION_RESTRICTED_OPTIONS,
        r#"{"resources":["cpu","memory"]}"#,
        get_reservation_restricted_options,
        set_reservation_restricted_options,
    );
    assert_eq!(
        get_reservation_restricted_options(&one(ANNOTATION_RESERVATION_RESTRICTED_OPTIONS, ""))
            .unwrap(),
        None
    );
    let spec = assert_exact_round_trip(
        ANNOTATION_EXACT_MATCH_RESERVATION_SPEC,
        r#"{"resourceNames":["cpu","memory"]}"#,
        get_exact_match_reservation_spec,
        set_exact_match_reservation_spec,
    );
    let requests = quantities(&[("cpu", "2"), ("memory", "4Gi")]);
    let same = quantities(&[("cpu", "2000m"), ("memory", "4294967296")]);
    let bigger = quantities(&[("cpu", "3"), ("memory", "4Gi")]);
    assert!(exact_match_reservation(&requests, &same, Some(&spec)));
    assert!(!exact_match_reservation(&requests, &bigger, Some(&spec)));
    assert!(!exact_match_reservation(
        &quantities(&[("cpu", "2")]),
        &same,
        Some(&spec)
    ));
    assert!(exact_match_reservation(&requests, &bigger, None));
}

#[test]
fn reservation_owners_round_trip() {
    let owners = get_reservation_owners(&one(
        ANNOTATION_RESERVATION_OWNERS,
        r#"[{"object":{"name":"pod-a","namespace":"default"}},{"labelSelector":{"matchLabels":{"app":"web"}}}]"#,
    ))
    .unwrap()
    .unwrap();
    assert_eq!(owners.len(), 2);
    let mut written = StringMap::new();
    set_reservation_owners(&mut written, &owners).unwrap();
    assert_eq!(
        as_json(&written[ANNOTATION_RESERVATION_OWNERS]),
        json!([{"object":{"name":"pod-a","namespace":"default"}},{"labelSelector":{"matchLabels":{"app":"web"}}}])
    );
    assert!(is_reservation_operating_mode(&one(
        LABEL_POD_OPERATING_MODE,
        "Reservation"
    )));
    assert!(!is_reservation_operating_mode(&one(
        LABEL_POD_OPERATING_MODE,
        "Runnable"
    )));
}

#[test]
fn device_allocated_round_trip() {
    let text = r#"{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi","koordinator.sh/gpu-memory-ratio":"100"}}],"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0","extension":{"vfs":[{"minor":1,"busID":"0000:1f:00.2"}]}}]}"#;
    let allocations = assert_exact_round_trip(
        ANNOTATION_DEVICE_ALLOCATED,
        text,
        get_device_allocations,
        set_device_allocations,
    );
    let gpu = &allocations[DEVICE_TYPE_GPU][0];
    assert_eq!(gpu.minor, 0);
    assert_eq!(
        gpu.resources[RESOURCE_GPU_MEMORY],
        Quantity("16Gi".to_owned())
    );
    let rdma = &allocations[DEVICE_TYPE_RDMA][0];
    assert_eq!(rdma.id, "0000:1f:00.0");
    assert_eq!(
        rdma.extension.as_ref().unwrap().virtual_functions[0].bus_id,
        "0000:1f:00.2"
    );
    // `"resources": null` is what Go writes for a nil list.
    let nil = get_device_allocations(&one(
        ANNOTATION_DEVICE_ALLOCATED,
        r#"{"fpga":[{"minor":3,"resources":null}]}"#,
    ))
    .unwrap()
    .unwrap();
    assert!(nil["fpga"][0].resources.is_empty());
    let mut written = StringMap::new();
    set_device_allocations(&mut written, &nil).unwrap();
    assert_eq!(
        written[ANNOTATION_DEVICE_ALLOCATED],
        r#"{"fpga":[{"minor":3,"resources":{}}]}"#
    );
}

#[test]
fn device_hint_and_joint_allocate_round_trip() {
    let hints = assert_exact_round_trip(
        ANNOTATION_DEVICE_ALLOCATE_HINT,
        r#"{"gpu":{"selector":{"matchLabels":{"model":"A100"}},"requiredTopologyScope":"NUMANode"},"rdma":{"vfSelector":{},"allocateStrategy":"RequestsAsCount","exclusivePolicy":"PCIeLevel"}}"#,
        get_device_allocate_hints,
        set_device_allocate_hints,
    );
    assert_eq!(
        hints["gpu"].required_topology_scope,
        Some(DeviceTopologyScope::NUMANode)
    );
    assert_eq!(
        hints["rdma"].exclusive_policy,
        Some(DeviceExclusivePolicy::PCIExpressLevel)
    );
    assert_eq!(DeviceTopologyScope::PCIe.level(), 3);

    let joint = assert_exact_round_trip(
        ANNOTATION_DEVICE_JOINT_ALLOCATE,
        r#"{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}"#,
        get_device_joint_allocate,
        set_device_joint_allocate,
    );
    assert_eq!(
        joint.required_scope,
        Some(DeviceJointAllocateScope::SamePCIe)
    );
}

#[test]
fn gpu_partition_annotations_round_trip() {
    let spec = assert_exact_round_trip(
        ANNOTATION_GPU_PARTITION_SPEC,
        r#"{"allocatePolicy":"Restricted","ringBusBandwidth":"200Gi"}"#,
        get_gpu_partition_spec,
        set_gpu_partition_spec,
    );
    assert_eq!(
        spec.allocate_policy,
        Some(GPUPartitionAllocatePolicy::Restricted)
    );
    // An unset policy reads as best-effort.
    let defaulted = get_gpu_partition_spec(&one(ANNOTATION_GPU_PARTITION_SPEC, "{}"))
        .unwrap()
        .unwrap();
    assert_eq!(
        defaulted.allocate_policy,
        Some(GPUPartitionAllocatePolicy::BestEffort)
    );

    let table = assert_exact_round_trip(
        ANNOTATION_GPU_PARTITIONS,
        r#"{"2":[{"minors":[0,1],"gpuLinkType":"NVLink","ringBusBandwidth":"400Gi","allocationScore":1}],"4":[{"minors":[0,1,2,3]}]}"#,
        get_gpu_partition_table,
        set_gpu_partition_table,
    );
    assert_eq!(table[&4][0].minors, vec![0, 1, 2, 3]);
    // Link types other than NVLink (Huawei's HCCS) survive verbatim.
    let hccs = assert_exact_round_trip(
        ANNOTATION_GPU_PARTITIONS,
        r#"{"4":[{"minors":[0,1,2,3],"gpuLinkType":"HCCS","allocationScore":1}]}"#,
        get_gpu_partition_table,
        set_gpu_partition_table,
    );
    assert_eq!(
        hccs[&4][0].gpu_link_type,
        Some(GPULinkType::Other("HCCS".to_string()))
    );
    assert_eq!(
        get_gpu_partition_table(&one(ANNOTATION_GPU_PARTITIONS, "")).unwrap(),
        None
    );
    assert!(matches!(
        get_gpu_partition_table(&one(ANNOTATION_GPU_PARTITIONS, "null")),
        Err(ExtensionError::InvalidValue { .. })
    ));
    assert_eq!(
        gpu_partition_policy(&one(LABEL_GPU_PARTITION_POLICY, "Honor")),
        GPUPartitionPolicy::Honor
    );
    assert_eq!(
        gpu_partition_policy(&StringMap::new()),
        GPUPartitionPolicy::Prefer
    );
}

#[test]
fn gang_spec_from_annotations() {
    let pod_annotations = annotations(&[
        (ANNOTATION_GANG_NAME, "gang-a"),
        (ANNOTATION_GANG_MIN_NUM, "2"),
        (ANNOTATION_GANG_TOTAL_NUM, "4"),
        (ANNOTATION_GANG_WAIT_TIME, "1m30s"),
        (ANNOTATION_GANG_MODE, "NonStrict"),
        (
            ANNOTATION_GANG_GROUPS,
            r#"["default/gang-a","default/gang-b"]"#,
        ),
        (ANNOTATION_GANG_MATCH_POLICY, "waiting-and-running"),
        (
            ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC,
            r#"{"gatherStrategy":[{"layer":"SpineLayer","strategy":"PreferGather","podCountMultiple":2}]}"#,
        ),
    ]);
    let spec = get_gang_spec(&StringMap::new(), &pod_annotations)
        .unwrap()
        .unwrap();
    assert_eq!(
        spec,
        GangSpec {
            name: "gang-a".to_owned(),
            min_available: 2,
            total_number: Some(4),
            mode: Some(GangMode::NonStrict),
            match_policy: Some(GangMatchPolicy::WaitingAndRunning),
            waiting_time: Some(GoDuration::from_secs(90)),
            groups: vec!["default/gang-a".to_owned(), "default/gang-b".to_owned()],
            network_topology_spec: Some(NetworkTopologySpec {
                gather_strategy: vec![NetworkTopologyGatherRule {
                    layer: "SpineLayer".to_owned(),
                    strategy: NetworkTopologyGatherStrategy::PreferGather,
                    pod_count_multiple: 2,
                }],
            }),
        }
    );
    let mut written = StringMap::new();
    set_gang_spec(&mut written, &spec).unwrap();
    assert_eq!(written, pod_annotations);
}

#[test]
fn gang_name_and_defaults() {
    assert_eq!(
        get_gang_spec(&StringMap::new(), &StringMap::new()).unwrap(),
        None
    );
    // The PodGroup label wins over the light-weight label and the annotation.
    let labels = annotations(&[
        (LABEL_POD_GROUP, "pg"),
        (LABEL_LIGHTWEIGHT_COSCHEDULING_POD_GROUP_NAME, "lw"),
    ]);
    let pod_annotations = one(ANNOTATION_GANG_NAME, "anno");
    assert_eq!(gang_name(&labels, &pod_annotations), Some("pg"));
    assert_eq!(gang_name(&StringMap::new(), &pod_annotations), Some("anno"));
    assert!(!is_gang_pod(&one(LABEL_POD_GROUP, ""), &StringMap::new()));

    // Light-weight min-available label wins over the annotation.
    let lw = annotations(&[
        (LABEL_LIGHTWEIGHT_COSCHEDULING_POD_GROUP_NAME, "lw"),
        (LABEL_LIGHTWEIGHT_COSCHEDULING_POD_GROUP_MIN_AVAILABLE, "3"),
    ]);
    let spec = get_gang_spec(&lw, &one(ANNOTATION_GANG_MIN_NUM, "9"))
        .unwrap()
        .unwrap();
    assert_eq!(spec.min_available, 3);
    assert_eq!(spec.total_number, None);
    assert_eq!(spec.mode, None);
    assert!(spec.groups.is_empty());

    let missing = get_gang_spec(&StringMap::new(), &pod_annotations).unwrap_err();
    assert!(matches!(&missing, ExtensionError::Missing { key } if key == ANNOTATION_GANG_MIN_NUM));

    // The alias match-policy key is read when the gang key is absent.
    assert_eq!(
        get_gang_match_policy(&one(ANNOTATION_ALIAS_GANG_MATCH_POLICY, "only-waiting")).unwrap(),
        Some(GangMatchPolicy::OnlyWaiting)
    );
    assert_eq!(
        get_gang_wait_time(&one(ANNOTATION_GANG_WAIT_TIME, "")).unwrap(),
        None
    );
}

#[test]
fn gang_invalid_values_name_their_key() {
    let base = [(ANNOTATION_GANG_NAME, "g"), (ANNOTATION_GANG_MIN_NUM, "2")];
    let bad = [
        (ANNOTATION_GANG_MIN_NUM, "two"),
        (ANNOTATION_GANG_TOTAL_NUM, "4.5"),
        (ANNOTATION_GANG_WAIT_TIME, "30"),
        (ANNOTATION_GANG_MODE, "strict"),
        (ANNOTATION_GANG_MATCH_POLICY, "sometimes"),
        (ANNOTATION_GANG_GROUPS, "default/gang-a"),
        (ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC, "{"),
    ];
    for (key, value) in bad {
        let mut pod_annotations = annotations(&base);
        pod_annotations.insert(key.to_owned(), value.to_owned());
        let err = get_gang_spec(&StringMap::new(), &pod_annotations).unwrap_err();
        assert_eq!(err.key(), key, "{value}");
    }
}

#[test]
fn network_topology_index_and_sorting() {
    assert_eq!(
        get_pod_network_topology_index(&one(ANNOTATION_GANG_POD_NETWORK_TOPOLOGY_INDEX, "3"))
            .unwrap(),
        Some(3)
    );
    assert!(
        get_pod_network_topology_index(&one(ANNOTATION_GANG_POD_NETWORK_TOPOLOGY_INDEX, "x"))
            .is_err()
    );
    let make = |name: &str, index: Option<&str>| {
        let mut meta = json!({"name": name});
        if let Some(index) = index {
            meta["annotations"] = json!({ANNOTATION_GANG_POD_NETWORK_TOPOLOGY_INDEX: index});
        }
        pod(json!({"metadata": meta}))
    };
    let mut pods = vec![
        make("e", None),
        make("d", Some("bad")),
        make("c", Some("2")),
        make("b", Some("0")),
        make("a", Some("2")),
    ];
    sort_pods_by_network_topology_index(&mut pods);
    let order: Vec<&str> = pods
        .iter()
        .map(|p| p.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(order, ["b", "a", "c", "d", "e"]);
}

#[test]
fn eviction_keys() {
    assert!(pod_evict_enabled(&one(LABEL_POD_EVICT_ENABLED, "true")));
    assert!(!pod_evict_enabled(&one(LABEL_POD_EVICT_ENABLED, "True")));
    assert!(!pod_evict_enabled(&StringMap::new()));

    let policies = assert_exact_round_trip(
        ANNOTATION_POD_EVICT_POLICY,
        r#"["CPUEvict","MemoryEvict"]"#,
        get_pod_evict_policy,
        |a, v| set_pod_evict_policy(a, v),
    );
    assert_eq!(
        policies,
        vec!["CPUEvict".to_owned(), "MemoryEvict".to_owned()]
    );
    let policy = one(ANNOTATION_POD_EVICT_POLICY, r#"["CPUEvict"]"#);
    assert!(is_eviction_policy_allowed("CPUEvict", &policy));
    assert!(!is_eviction_policy_allowed("MemoryEvict", &policy));
    assert!(is_eviction_policy_allowed("MemoryEvict", &StringMap::new()));
    assert!(!is_eviction_policy_allowed(
        "CPUEvict",
        &one(ANNOTATION_POD_EVICT_POLICY, "CPUEvict")
    ));

    assert_eq!(
        get_pod_eviction_priority(&one(ANNOTATION_POD_EVICTION_PRIORITY, "-5")).unwrap(),
        Some(-5)
    );
    assert_eq!(get_pod_eviction_priority(&StringMap::new()).unwrap(), None);
    assert!(get_pod_eviction_priority(&one(ANNOTATION_POD_EVICTION_PRIORITY, "low")).is_err());

    for (text, expected) in [
        ("0", Some(0)),
        ("10", Some(10)),
        ("-3", Some(-3)),
        ("2147483647", Some(i32::MAX)),
    ] {
        assert_eq!(
            get_eviction_cost(&one(ANNOTATION_EVICTION_COST, text)).unwrap(),
            expected,
            "{text}"
        );
    }
    for text in ["+10", "008", "", "1.5", "2147483648", "ten"] {
        let err = get_eviction_cost(&one(ANNOTATION_EVICTION_COST, text)).unwrap_err();
        assert_eq!(err.key(), ANNOTATION_EVICTION_COST, "{text:?}");
    }
}

#[test]
fn soft_eviction_round_trip() {
    let spec = assert_semantic_round_trip(
        ANNOTATION_SOFT_EVICTION,
        r#"{"timestamp":"2024-05-01T08:00:00Z","deleteOptions":{"gracePeriodSeconds":30},"initiator":"koord-descheduler","reason":"rebalance"}"#,
        get_soft_eviction_spec,
        set_soft_eviction_spec,
    );
    assert_eq!(spec.initiator, "koord-descheduler");
    assert_eq!(spec.delete_options.unwrap().grace_period_seconds, Some(30));
}

#[test]
fn node_reservation_round_trip() {
    let reservation = assert_exact_round_trip(
        ANNOTATION_NODE_RESERVATION,
        r#"{"resources":{"cpu":"2500m","memory":"4Gi"},"applyPolicy":"Default"}"#,
        get_node_reservation,
        set_node_reservation,
    );
    assert_eq!(reservation.reserved_cpus_and_count(), ("", 3));
    let cpus = assert_exact_round_trip(
        ANNOTATION_NODE_RESERVATION,
        r#"{"resources":{"cpu":"2"},"reservedCPUs":"0-1","applyPolicy":"ReservedCPUsOnly"}"#,
        get_node_reservation,
        set_node_reservation,
    );
    assert_eq!(cpus.reserved_cpus_and_count(), ("0-1", 0));
    for (cpu, expected) in [("500m", 1), ("1", 1), ("1001m", 2), ("0", 0)] {
        let reservation = NodeReservation {
            resources: quantities(&[("cpu", cpu)]),
            ..NodeReservation::default()
        };
        assert_eq!(
            reservation.reserved_cpus_and_count(),
            ("", expected),
            "{cpu}"
        );
    }
    assert_eq!(
        get_node_reservation(&one(ANNOTATION_NODE_RESERVATION, "")).unwrap(),
        None
    );
}

#[test]
fn system_qos_resource_round_trip() {
    let resource = assert_exact_round_trip(
        ANNOTATION_NODE_SYSTEM_QOS_RESOURCE,
        r#"{"cpuset":"0-3","cpusetExclusive":false}"#,
        get_system_qos_resource,
        set_system_qos_resource,
    );
    assert!(!resource.is_cpuset_exclusive());
    let default = get_system_qos_resource(&one(
        ANNOTATION_NODE_SYSTEM_QOS_RESOURCE,
        r#"{"cpuset":"0"}"#,
    ))
    .unwrap()
    .unwrap();
    assert!(default.is_cpuset_exclusive());
}

#[test]
fn cpu_normalization_annotations() {
    let mut node = StringMap::new();
    assert!(set_cpu_normalization_ratio(&mut node, 1.2));
    assert_eq!(node[ANNOTATION_CPU_NORMALIZATION_RATIO], "1.20");
    assert!(!set_cpu_normalization_ratio(&mut node, 1.2));
    assert_eq!(get_cpu_normalization_ratio(&node).unwrap(), Some(1.2));
    assert_eq!(
        get_cpu_normalization_ratio(&StringMap::new()).unwrap(),
        None
    );
    for text in ["0", "-1.5", "fast", "NaN"] {
        let err = get_cpu_normalization_ratio(&one(ANNOTATION_CPU_NORMALIZATION_RATIO, text))
            .unwrap_err();
        assert_eq!(err.key(), ANNOTATION_CPU_NORMALIZATION_RATIO, "{text}");
    }
    assert_eq!(
        get_cpu_normalization_enabled(&one(LABEL_CPU_NORMALIZATION_ENABLED, "T")).unwrap(),
        Some(true)
    );
    assert!(get_cpu_normalization_enabled(&one(LABEL_CPU_NORMALIZATION_ENABLED, "yes")).is_err());
    assert!(is_cpu_normalization_ratio_different(1.0, 1.02));
    assert!(!is_cpu_normalization_ratio_different(1.0, 1.005));

    let info = get_cpu_basic_info(&one(
        ANNOTATION_CPU_BASIC_INFO,
        r#"{"cpuModel":"Intel(R) Xeon(R) Platinum","hyperThreadEnabled":true,"catL3CbmMask":"7ff","vendorID":"GenuineIntel"}"#,
    ))
    .unwrap()
    .unwrap();
    assert_eq!(info.key(), "Intel(R) Xeon(R) Platinum_true_false");
    let mut written = StringMap::new();
    assert!(set_cpu_basic_info(&mut written, &info).unwrap());
    assert!(!set_cpu_basic_info(&mut written, &info).unwrap());
    assert_eq!(
        written[ANNOTATION_CPU_BASIC_INFO],
        r#"{"cpuModel":"Intel(R) Xeon(R) Platinum","hyperThreadEnabled":true,"catL3CbmMask":"7ff","vendorID":"GenuineIntel"}"#
    );
}

#[test]
fn resource_amplification_annotations() {
    let mut node = StringMap::new();
    assert!(set_node_resource_amplification_ratio(&mut node, "cpu", Ratio(1.5)).unwrap());
    assert!(set_node_resource_amplification_ratio(&mut node, "memory", Ratio(1.0)).unwrap());
    assert!(!set_node_resource_amplification_ratio(&mut node, "cpu", Ratio(1.5)).unwrap());
    assert_eq!(
        node[ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO],
        r#"{"cpu":1.50,"memory":1.00}"#
    );
    assert_eq!(
        get_node_resource_amplification_ratio(&node, "cpu").unwrap(),
        Some(Ratio(1.5))
    );
    assert_eq!(
        get_node_resource_amplification_ratio(&node, "gpu").unwrap(),
        None
    );
    let bad = BTreeMap::from([("cpu".to_owned(), Ratio(f64::NAN))]);
    assert!(set_node_resource_amplification_ratios(&mut node, &bad).is_err());

    let raw = quantities(&[("cpu", "16"), ("memory", "64Gi")]);
    set_node_raw_allocatable(&mut node, &raw).unwrap();
    assert_eq!(
        node[ANNOTATION_NODE_RAW_ALLOCATABLE],
        r#"{"cpu":"16","memory":"64Gi"}"#
    );
    assert!(has_node_raw_allocatable(&node));
    assert_eq!(get_node_raw_allocatable(&node).unwrap(), Some(raw));

    assert_eq!(amplify(1000, Ratio(1.5)), 1500);
    assert_eq!(amplify(1001, Ratio(1.5)), 1502);
    assert_eq!(amplify(1000, Ratio(0.5)), 1000);
    let ratios = BTreeMap::from([
        ("cpu".to_owned(), Ratio(1.5)),
        ("memory".to_owned(), Ratio(2.0)),
        ("pods".to_owned(), Ratio(3.0)),
    ]);
    let mut requests = quantities(&[
        ("cpu", "1"),
        ("memory", "1Gi"),
        ("pods", "10"),
        ("ephemeral-storage", "1Gi"),
    ]);
    amplify_resource_list(&mut requests, &ratios, &[]);
    assert_eq!(
        requests,
        quantities(&[
            ("cpu", "1500m"),
            ("memory", "2Gi"),
            ("pods", "30"),
            ("ephemeral-storage", "1Gi")
        ])
    );
}

#[test]
fn usage_thresholds_round_trip() {
    let thresholds = assert_exact_round_trip(
        ANNOTATION_CUSTOM_USAGE_THRESHOLDS,
        r#"{"usageThresholds":{"cpu":65,"memory":85},"prodUsageThresholds":{"cpu":55},"aggregatedUsage":{"usageThresholds":{"cpu":70},"usageAggregationType":"p99","usageAggregatedDuration":"5m0s"}}"#,
        get_custom_usage_thresholds,
        set_custom_usage_thresholds,
    );
    let aggregated = thresholds.aggregated_usage.unwrap();
    assert_eq!(
        aggregated.usage_aggregation_type,
        Some(AggregationType::P99)
    );
    assert_eq!(
        aggregated.usage_aggregated_duration,
        Some(GoDuration::from_secs(300))
    );
    assert_eq!(
        get_custom_estimated_scaling_factors(&one(
            ANNOTATION_CUSTOM_ESTIMATED_SCALING_FACTORS,
            r#"{"cpu":80,"memory":70}"#
        ))
        .unwrap(),
        Some(BTreeMap::from([
            ("cpu".to_owned(), 80),
            ("memory".to_owned(), 70)
        ]))
    );
    assert_eq!(
        get_custom_estimated_seconds_after_pod_scheduled(&one(
            ANNOTATION_CUSTOM_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED,
            "120"
        ))
        .unwrap(),
        Some(120)
    );
    assert!(
        get_custom_estimated_seconds_after_initialized(&one(
            ANNOTATION_CUSTOM_ESTIMATED_SECONDS_AFTER_INITIALIZED,
            "2m"
        ))
        .is_err()
    );
}

#[test]
fn extended_resource_spec_round_trip() {
    let spec = assert_exact_round_trip(
        ANNOTATION_EXTENDED_RESOURCE_SPEC,
        r#"{"containers":{"main":{"limits":{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"2Gi"},"requests":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"1Gi"}}}}"#,
        get_extended_resource_spec,
        set_extended_resource_spec,
    );
    assert_eq!(
        spec.containers["main"].requests[BATCH_CPU],
        Quantity("500".to_owned())
    );
}

#[test]
fn resctrl_round_trip() {
    let config = assert_exact_round_trip(
        ANNOTATION_RESCTRL,
        r#"{"llc":{"schemata":{"range":[20,80]},"schemataPerCache":[{"cacheID":1,"range":[0,50]}]},"mb":{"schemata":{"percent":90}}}"#,
        get_resctrl_info,
        set_resctrl_info,
    );
    assert_eq!(config.llc.schemata_per_cache[0].cache_id, 1);
    assert_eq!(config.llc.schemata_per_cache[0].schemata.range, vec![0, 50]);
    // Go always writes both parts, even when empty.
    let mut written = StringMap::new();
    set_resctrl_info(&mut written, &ResctrlConfig::default()).unwrap();
    assert_eq!(
        written[ANNOTATION_RESCTRL],
        r#"{"llc":{"schemata":{}},"mb":{"schemata":{}}}"#
    );
}

#[test]
fn scheduling_hint_round_trip() {
    let hint = assert_exact_round_trip(
        ANNOTATION_SCHEDULING_HINT,
        r#"{"nodeNames":["node-1"],"preferredNodeNames":["node-2","node-3"],"extensions":{"reservation":{"name":"r"}}}"#,
        get_scheduling_hint,
        set_scheduling_hint,
    );
    assert_eq!(hint.preferred_node_names.len(), 2);
    // Falls back to the deprecated key.
    let deprecated = get_scheduling_hint(&annotations(&[
        (ANNOTATION_SCHEDULING_HINT, ""),
        (
            DEPRECATED_ANNOTATION_SCHEDULING_HINT,
            r#"{"nodeNames":["old"]}"#,
        ),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(deprecated.node_names, vec!["old".to_owned()]);
}

#[test]
fn pod_slo_override_annotations() {
    let cpu_qos = get_pod_cpu_qos_config(&one(ANNOTATION_POD_CPU_QOS, r#"{"groupIdentity":2}"#))
        .unwrap()
        .unwrap();
    assert_eq!(cpu_qos.cpu_qos.group_identity, Some(2));
    let mut written = StringMap::new();
    set_pod_cpu_qos_config(&mut written, &cpu_qos).unwrap();
    assert_eq!(
        as_json(&written[ANNOTATION_POD_CPU_QOS]),
        json!({"groupIdentity": 2})
    );
    let out_of_range =
        get_pod_cpu_qos_config(&one(ANNOTATION_POD_CPU_QOS, r#"{"groupIdentity":5}"#)).unwrap_err();
    assert!(
        matches!(&out_of_range, ExtensionError::InvalidValue { key, .. } if key == ANNOTATION_POD_CPU_QOS)
    );

    let memory = get_pod_memory_qos_config(&one(ANNOTATION_POD_MEMORY_QOS, r#"{"policy":"auto"}"#))
        .unwrap()
        .unwrap();
    let mut written = StringMap::new();
    set_pod_memory_qos_config(&mut written, &memory).unwrap();
    assert_eq!(
        as_json(&written[ANNOTATION_POD_MEMORY_QOS]),
        json!({"policy": "auto"})
    );
    assert!(
        get_pod_cpu_burst_config(&StringMap::new())
            .unwrap()
            .is_none()
    );
    assert!(get_pod_blkio_qos(&StringMap::new()).unwrap().is_none());
}

#[test]
fn oom_score_adj_annotations() {
    let pod_annotations = annotations(&[
        (ANNOTATION_OOM_SCORE_ADJ, "-500"),
        (ANNOTATION_OOM_SCORE_ADJ_SPEC, r#"{"sidecar":200}"#),
    ]);
    assert_eq!(
        oom_score_adj_for_container(&pod_annotations, "sidecar").unwrap(),
        Some(200)
    );
    assert_eq!(
        oom_score_adj_for_container(&pod_annotations, "main").unwrap(),
        Some(-500)
    );
    assert_eq!(
        oom_score_adj_for_container(&StringMap::new(), "main").unwrap(),
        None
    );
    assert!(get_pod_oom_score_adj(&one(ANNOTATION_OOM_SCORE_ADJ, "1001")).is_err());
    assert!(
        get_pod_oom_score_adj_spec(&one(ANNOTATION_OOM_SCORE_ADJ_SPEC, r#"{"a":-2000}"#)).is_err()
    );
}

#[test]
fn quota_labels_and_annotations() {
    assert_eq!(
        parent_quota_name("team-a", &StringMap::new()),
        ROOT_QUOTA_NAME
    );
    assert_eq!(parent_quota_name(ROOT_QUOTA_NAME, &StringMap::new()), "");
    assert_eq!(
        parent_quota_name("team-a", &one(LABEL_QUOTA_PARENT, "org")),
        "org"
    );
    assert!(is_allow_lent_resource(&StringMap::new()));
    assert!(!is_allow_lent_resource(&one(
        LABEL_ALLOW_LENT_RESOURCE,
        "false"
    )));
    assert!(is_pod_non_preemptible(&one(LABEL_PREEMPTIBLE, "false")));
    assert!(is_forbidden_modify(SYSTEM_QUOTA_NAME));
    assert!(!is_forbidden_modify(DEFAULT_QUOTA_NAME));

    let runtime = assert_exact_round_trip(
        ANNOTATION_RUNTIME,
        r#"{"cpu":"4","memory":"8Gi"}"#,
        get_quota_runtime,
        set_quota_runtime,
    );
    assert_eq!(runtime, quantities(&[("cpu", "4"), ("memory", "8Gi")]));
    assert_eq!(
        get_quota_request(&one(ANNOTATION_REQUEST, "")).unwrap(),
        None
    );
    assert_eq!(
        get_quota_namespaces(&one(ANNOTATION_QUOTA_NAMESPACES, r#"["ns-a","ns-b"]"#)).unwrap(),
        Some(vec!["ns-a".to_owned(), "ns-b".to_owned()])
    );
    let max = quantities(&[("cpu", "10")]);
    assert_eq!(shared_weight_or_max(&StringMap::new(), &max), max);
    assert_eq!(
        shared_weight_or_max(&one(ANNOTATION_SHARED_WEIGHT, r#"{"cpu":"0"}"#), &max),
        max
    );
    assert_eq!(
        shared_weight_or_max(&one(ANNOTATION_SHARED_WEIGHT, r#"{"cpu":"3"}"#), &max),
        quantities(&[("cpu", "3")])
    );
}

#[test]
fn misc_labels() {
    assert_eq!(
        get_node_ratio_label_percent(
            &one(LABEL_CPU_RECLAIM_RATIO, "0.655"),
            LABEL_CPU_RECLAIM_RATIO
        )
        .unwrap(),
        Some(65)
    );
    assert!(
        get_node_ratio_label_percent(&one(LABEL_CPU_RECLAIM_RATIO, "-1"), LABEL_CPU_RECLAIM_RATIO)
            .is_err()
    );
    assert_eq!(
        get_node_total_bandwidth(&one(ANNOTATION_NODE_BANDWIDTH, "10G")).unwrap(),
        Some(Quantity("10G".to_owned()))
    );
    assert!(get_node_total_bandwidth(&one(ANNOTATION_NODE_BANDWIDTH, "10 Gbps")).is_err());
    assert_eq!(
        pod_koord_preemption_policy_with_default(&StringMap::new()),
        PreemptionPolicy::Never
    );
    assert_eq!(
        pod_koord_preemption_policy(&one(LABEL_POD_PREEMPTION_POLICY, "PreemptLowerPriority")),
        Some(PreemptionPolicy::PreemptLowerPriority)
    );
    assert!(!is_pod_preemptible(&one(LABEL_DISABLE_PREEMPTIBLE, "true")));
    assert!(should_skip_update_resource(&one(
        ANNOTATION_SKIP_UPDATE_RESOURCE,
        ""
    )));
    assert!(should_reconcile_profile(&one(
        LABEL_CONTROLLER_MANAGED,
        "true"
    )));
    let scheduled = pod(
        json!({"metadata": {"labels": {LABEL_SCHEDULER_NAME: "koord-batch"}}, "spec": {"containers": [], "schedulerName": "koord-scheduler"}}),
    );
    assert_eq!(scheduler_name_of_pod(&scheduled), "koord-batch");
}

// ---------------------------------------------------------------------------
// Malformed values: typed errors naming the key, never a panic
// ---------------------------------------------------------------------------

type Getter = fn(&StringMap) -> Result<(), ExtensionError>;

macro_rules! getters {
    ($($key:expr => $get:expr),+ $(,)?) => {
        vec![$(($key, (|a: &StringMap| $get(a).map(|_| ())) as Getter)),+]
    };
}

#[test]
fn malformed_json_is_a_typed_error_for_every_helper() {
    let cases: Vec<(&str, Getter)> = getters![
        ANNOTATION_RESOURCE_SPEC => get_resource_spec,
        ANNOTATION_RESOURCE_STATUS => get_resource_status,
        ANNOTATION_NUMA_TOPOLOGY_SPEC => get_numa_topology_spec,
        ANNOTATION_NODE_CPU_TOPOLOGY => get_cpu_topology,
        ANNOTATION_NODE_CPU_ALLOCS => get_pod_cpu_allocs,
        ANNOTATION_NODE_CPU_SHARED_POOLS => get_node_cpu_shared_pools,
        ANNOTATION_NODE_BE_CPU_SHARED_POOLS => get_node_be_cpu_shared_pools,
        ANNOTATION_KUBELET_CPU_MANAGER_POLICY => get_kubelet_cpu_manager_policy,
        ANNOTATION_RESERVATION_ALLOCATED => get_reservation_allocated,
        ANNOTATION_RESERVATION_AFFINITY => get_reservation_affinity,
        ANNOTATION_RESERVATION_RESTRICTED_OPTIONS => get_reservation_restricted_options,
        ANNOTATION_EXACT_MATCH_RESERVATION_SPEC => get_exact_match_reservation_spec,
        ANNOTATION_RESERVATION_OWNERS => get_reservation_owners,
        ANNOTATION_RESERVATION_CURRENT_OWNER => get_reservation_current_owner,
        ANNOTATION_DEVICE_ALLOCATED => get_device_allocations,
        ANNOTATION_DEVICE_ALLOCATE_HINT => get_device_allocate_hints,
        ANNOTATION_DEVICE_JOINT_ALLOCATE => get_device_joint_allocate,
        ANNOTATION_GPU_PARTITION_SPEC => get_gpu_partition_spec,
        ANNOTATION_GPU_PARTITIONS => get_gpu_partition_table,
        ANNOTATION_GANG_GROUPS => get_gang_groups,
        ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC => get_network_topology_spec,
        ANNOTATION_POD_EVICT_POLICY => get_pod_evict_policy,
        ANNOTATION_SOFT_EVICTION => get_soft_eviction_spec,
        ANNOTATION_NODE_RESERVATION => get_node_reservation,
        ANNOTATION_NODE_SYSTEM_QOS_RESOURCE => get_system_qos_resource,
        ANNOTATION_CPU_BASIC_INFO => get_cpu_basic_info,
        ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO => get_node_resource_amplification_ratios,
        ANNOTATION_NODE_RAW_ALLOCATABLE => get_node_raw_allocatable,
        ANNOTATION_CUSTOM_USAGE_THRESHOLDS => get_custom_usage_thresholds,
        ANNOTATION_CUSTOM_ESTIMATED_SCALING_FACTORS => get_custom_estimated_scaling_factors,
        ANNOTATION_EXTENDED_RESOURCE_SPEC => get_extended_resource_spec,
        ANNOTATION_RESCTRL => get_resctrl_info,
        ANNOTATION_SCHEDULING_HINT => get_scheduling_hint,
        ANNOTATION_SHARED_WEIGHT => get_shared_weight,
        ANNOTATION_RUNTIME => get_quota_runtime,
        ANNOTATION_REQUEST => get_quota_request,
        ANNOTATION_CHILD_REQUEST => get_quota_child_request,
        ANNOTATION_GUARANTEED => get_quota_guaranteed,
        ANNOTATION_ALLOCATED => get_quota_allocated,
        ANNOTATION_NON_PREEMPTIBLE_REQUEST => get_quota_non_preemptible_request,
        ANNOTATION_NON_PREEMPTIBLE_USED => get_quota_non_preemptible_used,
        ANNOTATION_UNSCHEDULABLE_RESOURCE => get_quota_unschedulable_resource,
        ANNOTATION_ADMISSION => get_quota_admission,
        ANNOTATION_TOTAL_RESOURCE => get_quota_total_resource,
        ANNOTATION_QUOTA_NAMESPACES => get_quota_namespaces,
        ANNOTATION_MAX_STRICT_CHECK_RESOURCE_KEYS => get_max_strict_check_resource_keys,
        ANNOTATION_RESOURCE_KEYS => get_quota_resource_keys,
        ANNOTATION_OOM_SCORE_ADJ_SPEC => get_pod_oom_score_adj_spec,
        ANNOTATION_POD_CPU_BURST => get_pod_cpu_burst_config,
        ANNOTATION_POD_CPU_QOS => get_pod_cpu_qos_config,
        ANNOTATION_POD_MEMORY_QOS => get_pod_memory_qos_config,
        ANNOTATION_POD_BLKIO_QOS => get_pod_blkio_qos,
        ANNOTATION_NODE_COLOCATION_STRATEGY => get_node_colocation_strategy::<Value>,
    ];
    let malformed = ["{", "not json", r#"{"a":}"#, "[1,", "\u{0}"];
    for (key, get) in &cases {
        assert_eq!(
            get(&StringMap::new()).ok(),
            Some(()),
            "{key} absent must be Ok"
        );
        for text in malformed {
            match get(&one(key, text)) {
                Err(ExtensionError::MalformedJson { key: named, .. }) => assert_eq!(named, *key),
                other => panic!("{key} with {text:?}: expected MalformedJson, got {other:?}"),
            }
        }
    }
    // Wrong JSON shape (a string where an object belongs) is malformed too.
    for (key, get) in &cases {
        if *key == ANNOTATION_NODE_COLOCATION_STRATEGY {
            continue; // decoded as a free-form JSON value here
        }
        assert!(get(&one(key, "12345")).is_err(), "{key} with a number");
    }
}

#[test]
fn invalid_scalar_values_are_typed_errors() {
    let cases: Vec<(&str, &str, Getter)> = vec![
        (LABEL_POD_PRIORITY, "1.5", |a| {
            get_pod_sub_priority(a).map(|_| ())
        }),
        (ANNOTATION_POD_EVICTION_PRIORITY, "high", |a| {
            get_pod_eviction_priority(a).map(|_| ())
        }),
        (ANNOTATION_EVICTION_COST, "+1", |a| {
            get_eviction_cost(a).map(|_| ())
        }),
        (ANNOTATION_GANG_TOTAL_NUM, "many", |a| {
            get_gang_total_num(a).map(|_| ())
        }),
        (ANNOTATION_GANG_WAIT_TIME, "1 minute", |a| {
            get_gang_wait_time(a).map(|_| ())
        }),
        (ANNOTATION_GANG_MODE, "Loose", |a| {
            get_gang_mode(a).map(|_| ())
        }),
        (ANNOTATION_GANG_POD_NETWORK_TOPOLOGY_INDEX, "first", |a| {
            get_pod_network_topology_index(a).map(|_| ())
        }),
        (ANNOTATION_CPU_NORMALIZATION_RATIO, "fast", |a| {
            get_cpu_normalization_ratio(a).map(|_| ())
        }),
        (LABEL_CPU_NORMALIZATION_ENABLED, "on", |a| {
            get_cpu_normalization_enabled(a).map(|_| ())
        }),
        (ANNOTATION_NODE_BANDWIDTH, "lots", |a| {
            get_node_total_bandwidth(a).map(|_| ())
        }),
        (ANNOTATION_OOM_SCORE_ADJ, "-1001", |a| {
            get_pod_oom_score_adj(a).map(|_| ())
        }),
        (
            ANNOTATION_CUSTOM_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED,
            "1m",
            |a| get_custom_estimated_seconds_after_pod_scheduled(a).map(|_| ()),
        ),
        (LABEL_NUMA_TOPOLOGY_POLICY, "Loose", |a| {
            node_numa_topology_policy(a).map(|_| ())
        }),
    ];
    for (key, text, get) in cases {
        match get(&one(key, text)) {
            Err(ExtensionError::InvalidValue {
                key: named, value, ..
            }) => {
                assert_eq!(named, key);
                assert_eq!(value, text);
            }
            other => panic!("{key}={text:?}: expected InvalidValue, got {other:?}"),
        }
    }
}
