//! The label and annotation decoders: every `apis::extension` getter
//! (resource-spec, resource-status, device allocations, reservation
//! affinity, gang, eviction, NUMA, ... JSON and scalar values), the
//! scheduler's admission of objects carrying them, koordlet's pod- and
//! node-level readers (extended resources, system-QoS CPUs, the hook rules
//! built from node annotations) and the manager's node-reservation reader.
//!
//! The input is one value, stored under every known key as both a label and
//! an annotation, so one input reaches every decoder.
#![no_main]

use std::collections::BTreeMap;

use apis::extension as ext;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use libfuzzer_sys::fuzz_target;

/// Every label and annotation key (and resource name) `apis::extension` names.
const KEYS: [&str; 175] = [
    ext::ANNOTATION_ADMISSION,
    ext::ANNOTATION_ALIAS_GANG_MATCH_POLICY,
    ext::ANNOTATION_ALLOCATED,
    ext::ANNOTATION_BIND_GANG_GROUP_ID,
    ext::ANNOTATION_BIND_GANG_MEMBER_COUNT,
    ext::ANNOTATION_CHILD_REQUEST,
    ext::ANNOTATION_CPU_BASIC_INFO,
    ext::ANNOTATION_CPU_NORMALIZATION_RATIO,
    ext::ANNOTATION_CUSTOM_ESTIMATED_SCALING_FACTORS,
    ext::ANNOTATION_CUSTOM_ESTIMATED_SECONDS_AFTER_INITIALIZED,
    ext::ANNOTATION_CUSTOM_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED,
    ext::ANNOTATION_CUSTOM_USAGE_THRESHOLDS,
    ext::ANNOTATION_DEVICE_ALLOCATED,
    ext::ANNOTATION_DEVICE_ALLOCATE_HINT,
    ext::ANNOTATION_DEVICE_JOINT_ALLOCATE,
    ext::ANNOTATION_EVICTION_COST,
    ext::ANNOTATION_EXACT_MATCH_RESERVATION_SPEC,
    ext::ANNOTATION_EXTENDED_RESOURCE_SPEC,
    ext::ANNOTATION_GANG_GROUPS,
    ext::ANNOTATION_GANG_MATCH_POLICY,
    ext::ANNOTATION_GANG_MIN_NUM,
    ext::ANNOTATION_GANG_MODE,
    ext::ANNOTATION_GANG_NAME,
    ext::ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC,
    ext::ANNOTATION_GANG_POD_NETWORK_TOPOLOGY_INDEX,
    ext::ANNOTATION_GANG_TIMEOUT,
    ext::ANNOTATION_GANG_TOTAL_NUM,
    ext::ANNOTATION_GANG_WAIT_TIME,
    ext::ANNOTATION_GPU_PARTITIONS,
    ext::ANNOTATION_GPU_PARTITION_SPEC,
    ext::ANNOTATION_GUARANTEED,
    ext::ANNOTATION_IS_PRE_ALLOCATION,
    ext::ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ext::ANNOTATION_MAX_STRICT_CHECK_RESOURCE_KEYS,
    ext::ANNOTATION_NETWORK_QOS,
    ext::ANNOTATION_NODE_BANDWIDTH,
    ext::ANNOTATION_NODE_BE_CPU_SHARED_POOLS,
    ext::ANNOTATION_NODE_COLOCATION_STRATEGY,
    ext::ANNOTATION_NODE_CPU_ALLOCS,
    ext::ANNOTATION_NODE_CPU_SHARED_POOLS,
    ext::ANNOTATION_NODE_CPU_TOPOLOGY,
    ext::ANNOTATION_NODE_RAW_ALLOCATABLE,
    ext::ANNOTATION_NODE_RESERVATION,
    ext::ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
    ext::ANNOTATION_NODE_SYSTEM_QOS_RESOURCE,
    ext::ANNOTATION_NON_PREEMPTIBLE_REQUEST,
    ext::ANNOTATION_NON_PREEMPTIBLE_USED,
    ext::ANNOTATION_NUMA_TOPOLOGY_SPEC,
    ext::ANNOTATION_OOM_SCORE_ADJ,
    ext::ANNOTATION_OOM_SCORE_ADJ_SPEC,
    ext::ANNOTATION_ORIGINAL_SCHEDULER_NAME,
    ext::ANNOTATION_POD_EVICTION_PRIORITY,
    ext::ANNOTATION_POD_EVICT_POLICY,
    ext::ANNOTATION_POD_NETWORK_TOPOLOGY_SELECTOR,
    ext::ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY,
    ext::ANNOTATION_POD_REPLACE_RESOURCES,
    ext::ANNOTATION_QUOTA_NAMESPACES,
    ext::ANNOTATION_REQUEST,
    ext::ANNOTATION_RESCTRL,
    ext::ANNOTATION_RESERVATION_AFFINITY,
    ext::ANNOTATION_RESERVATION_ALLOCATED,
    ext::ANNOTATION_RESERVATION_CURRENT_OWNER,
    ext::ANNOTATION_RESERVATION_NAME,
    ext::ANNOTATION_RESERVATION_NODE,
    ext::ANNOTATION_RESERVATION_OWNERS,
    ext::ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE,
    ext::ANNOTATION_RESERVATION_RESTRICTED_OPTIONS,
    ext::ANNOTATION_RESERVE_POD,
    ext::ANNOTATION_RESOURCE_KEYS,
    ext::ANNOTATION_RESOURCE_SPEC,
    ext::ANNOTATION_RESOURCE_STATUS,
    ext::ANNOTATION_RUNTIME,
    ext::ANNOTATION_SCHEDULING_HINT,
    ext::ANNOTATION_SHARED_WEIGHT,
    ext::ANNOTATION_SKIP_HOOK_SERVER,
    ext::ANNOTATION_SKIP_UPDATE_RESOURCE,
    ext::ANNOTATION_SOFT_EVICTION,
    ext::ANNOTATION_TOTAL_RESOURCE,
    ext::ANNOTATION_UNSCHEDULABLE_RESOURCE,
    ext::BATCH_CPU,
    ext::BATCH_MEMORY,
    ext::DEFAULT_QUOTA_NAME,
    ext::DEPRECATED_ANNOTATION_BIND_GANG_GROUP_ID,
    ext::DEPRECATED_ANNOTATION_BIND_GANG_MEMBER_COUNT,
    ext::DEPRECATED_ANNOTATION_SCHEDULING_HINT,
    ext::DEPRECATED_GPU_CORE,
    ext::DEPRECATED_GPU_DRIVER,
    ext::DEPRECATED_GPU_MEMORY,
    ext::DEPRECATED_GPU_MEMORY_RATIO,
    ext::DEPRECATED_GPU_MODEL,
    ext::DEPRECATED_KOORD_FPGA,
    ext::DEPRECATED_KOORD_GPU,
    ext::DEPRECATED_KOORD_RDMA,
    ext::DEVICE_TYPE_FPGA,
    ext::DEVICE_TYPE_GPU,
    ext::DEVICE_TYPE_RDMA,
    ext::GPU_VENDOR_BAIDU,
    ext::GPU_VENDOR_CAMBRICON,
    ext::GPU_VENDOR_HUAWEI,
    ext::GPU_VENDOR_METAX,
    ext::GPU_VENDOR_NVIDIA,
    ext::KOORD_BATCH_CPU,
    ext::KOORD_BATCH_MEMORY,
    ext::KUBELET_CPU_MANAGER_POLICY_DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION,
    ext::KUBELET_CPU_MANAGER_POLICY_FULL_PCPUS_ONLY_OPTION,
    ext::KUBELET_CPU_MANAGER_POLICY_NONE,
    ext::KUBELET_CPU_MANAGER_POLICY_STATIC,
    ext::LABEL_ALLOW_FORCE_UPDATE,
    ext::LABEL_ALLOW_LENT_RESOURCE,
    ext::LABEL_BINDING_ADMISSION_BYPASS,
    ext::LABEL_CONTROLLER_MANAGED,
    ext::LABEL_CPU_NORMALIZATION_ENABLED,
    ext::LABEL_CPU_RECLAIM_RATIO,
    ext::LABEL_DISABLE_PREEMPTIBLE,
    ext::LABEL_GPU_DRIVER_VERSION,
    ext::LABEL_GPU_ISOLATION_PROVIDER,
    ext::LABEL_GPU_MODEL,
    ext::LABEL_GPU_PARTITION_POLICY,
    ext::LABEL_GPU_VENDOR,
    ext::LABEL_HAMI_VGPU_NODE,
    ext::LABEL_LIGHTWEIGHT_COSCHEDULING_POD_GROUP_MIN_AVAILABLE,
    ext::LABEL_LIGHTWEIGHT_COSCHEDULING_POD_GROUP_NAME,
    ext::LABEL_MANAGED_BY,
    ext::LABEL_MEMORY_RECLAIM_RATIO,
    ext::LABEL_MID_STATIC_CPU_RESERVED_RATIO,
    ext::LABEL_MID_STATIC_MEMORY_RESERVED_RATIO,
    ext::LABEL_NODE_CPU_BIND_POLICY,
    ext::LABEL_NODE_ENABLE_NUMA_RESERVATION,
    ext::LABEL_NODE_NUMA_ALLOCATE_STRATEGY,
    ext::LABEL_NUMA_TOPOLOGY_POLICY,
    ext::LABEL_POD_EVICT_ENABLED,
    ext::LABEL_POD_GROUP,
    ext::LABEL_POD_MUTATING_UPDATE,
    ext::LABEL_POD_OPERATING_MODE,
    ext::LABEL_POD_PREEMPTION_POLICY,
    ext::LABEL_POD_PRE_ALLOCATABLE,
    ext::LABEL_POD_PRIORITY,
    ext::LABEL_POD_PRIORITY_CLASS,
    ext::LABEL_POD_QOS,
    ext::LABEL_POD_SKIP_ENHANCED_VALIDATION,
    ext::LABEL_PREEMPTIBLE,
    ext::LABEL_PRE_ALLOCATION_REQUIRED,
    ext::LABEL_QUESTIONED_OBJECT_KEY,
    ext::LABEL_QUOTA_IGNORE_DEFAULT_TREE,
    ext::LABEL_QUOTA_IS_PARENT,
    ext::LABEL_QUOTA_IS_ROOT,
    ext::LABEL_QUOTA_NAME,
    ext::LABEL_QUOTA_PARENT,
    ext::LABEL_QUOTA_PROFILE,
    ext::LABEL_QUOTA_TREE_ID,
    ext::LABEL_RESERVATION_IGNORED,
    ext::LABEL_RESERVATION_ORDER,
    ext::LABEL_SCHEDULER_NAME,
    ext::LABEL_SECONDARY_DEVICE_WELL_PLANNED,
    ext::LABEL_TOPOLOGY_KEY_TO_EXPLAIN,
    ext::MID_CPU,
    ext::MID_MEMORY,
    ext::RESOURCE_AMD_GPU,
    ext::RESOURCE_CPU,
    ext::RESOURCE_EPHEMERAL_STORAGE,
    ext::RESOURCE_FPGA,
    ext::RESOURCE_GPU,
    ext::RESOURCE_GPU_CORE,
    ext::RESOURCE_GPU_MEMORY,
    ext::RESOURCE_GPU_MEMORY_RATIO,
    ext::RESOURCE_GPU_SHARED,
    ext::RESOURCE_HUAWEI_NPU_CORE,
    ext::RESOURCE_HUAWEI_NPU_CPU,
    ext::RESOURCE_HUAWEI_NPU_DVPP,
    ext::RESOURCE_HYGON_DCU,
    ext::RESOURCE_MEMORY,
    ext::RESOURCE_NVIDIA_GPU,
    ext::RESOURCE_RDMA,
    ext::ROOT_QUOTA_NAME,
    ext::SYSTEM_QUOTA_NAME,
];

fn decode_all(map: &ext::StringMap, value: &str) {
    let _ = ext::get_pod_oom_score_adj(map);
    let _ = ext::get_pod_oom_score_adj_spec(map);
    let _ = ext::oom_score_adj_for_container(map, value);
    let _ = ext::get_gang_min_num(map, map);
    let _ = ext::get_gang_total_num(map);
    let _ = ext::get_gang_wait_time(map);
    let _ = ext::get_gang_mode(map);
    let _ = ext::get_gang_match_policy(map);
    let _ = ext::get_gang_groups(map);
    let _ = ext::get_gang_spec(map, map);
    let _ = ext::gang_name(map, map);
    let _ = ext::is_gang_pod(map, map);
    let _ = ext::get_cpu_normalization_ratio(map);
    let _ = ext::get_cpu_normalization_enabled(map);
    let _ = ext::get_cpu_basic_info(map);
    let _ = ext::get_soft_eviction_spec(map);
    let _ = ext::get_eviction_cost(map);
    let _ = ext::get_device_allocations(map);
    let _ = ext::get_device_allocate_hints(map);
    let _ = ext::get_device_joint_allocate(map);
    let _ = ext::get_gpu_partition_spec(map);
    let _ = ext::get_gpu_partition_table(map);
    let _ = ext::gpu_partition_policy(map);
    let _ = ext::get_shared_weight(map);
    let max = BTreeMap::from([("cpu".to_owned(), Quantity("4".to_owned()))]);
    let _ = ext::shared_weight_or_max(map, &max);
    let _ = ext::get_quota_namespaces(map);
    let _ = ext::get_max_strict_check_resource_keys(map);
    let _ = ext::get_quota_resource_keys(map);
    let _ = ext::parent_quota_name(value, map);
    let _ = ext::quota_tree_id(map);
    let _ = ext::quota_name_of_pod(map);
    let _ = ext::get_pod_eviction_priority(map);
    let _ = ext::get_pod_evict_policy(map);
    let _ = ext::is_eviction_policy_allowed(value, map);
    let _ = ext::get_custom_usage_thresholds(map);
    let _ = ext::get_custom_estimated_scaling_factors(map);
    let _ = ext::get_custom_estimated_seconds_after_pod_scheduled(map);
    let _ = ext::get_custom_estimated_seconds_after_initialized(map);
    let _ = ext::get_scheduling_hint(map);
    let _ = ext::get_network_topology_spec(map);
    let _ = ext::get_pod_network_topology_index(map);
    let _ = ext::pod_network_topology_selector(map);
    let _ = ext::get_node_colocation_strategy::<apis::configuration::ColocationStrategy>(map);
    let _ = ext::get_node_ratio_label_percent(map, ext::LABEL_CPU_RECLAIM_RATIO);
    let _ = ext::get_node_total_bandwidth(map);
    let _ = ext::get_node_reservation(map);
    if let Ok(Some(ratios)) = ext::get_node_resource_amplification_ratios(map) {
        let mut requests = BTreeMap::from([
            ("cpu".to_owned(), Quantity("4".to_owned())),
            ("memory".to_owned(), Quantity("8Gi".to_owned())),
        ]);
        ext::amplify_resource_list(&mut requests, &ratios, &[]);
    }
    let _ = ext::get_node_resource_amplification_ratio(map, "cpu");
    let _ = ext::get_node_raw_allocatable(map);
    let _ = ext::has_node_raw_allocatable(map);
    let _ = ext::get_numa_topology_spec(map);
    let _ = ext::get_resource_spec(map);
    let _ = ext::get_resource_status(map);
    let _ = ext::get_cpu_topology(map);
    let _ = ext::get_pod_cpu_allocs(map);
    let _ = ext::get_node_cpu_shared_pools(map);
    let _ = ext::get_node_be_cpu_shared_pools(map);
    let kubelet_policy = ext::get_kubelet_cpu_manager_policy(map).ok().flatten();
    let _ = ext::node_cpu_bind_policy(map, kubelet_policy.as_ref());
    let _ = ext::node_numa_topology_policy(map);
    let _ = ext::node_numa_allocate_strategy(map);
    let _ = ext::get_reservation_owners(map);
    let _ = ext::get_reservation_current_owner(map);
    let _ = ext::get_pod_sub_priority(map);
    let _ = ext::get_resctrl_info(map);
    let _ = ext::get_reservation_allocated(map);
    let _ = ext::remove_reservation_allocated(&mut map.clone(), value);
    let _ = ext::get_reservation_affinity(map);
    let _ = ext::get_reservation_restricted_options(map);
    let exact = ext::get_exact_match_reservation_spec(map).ok().flatten();
    let _ = ext::exact_match_reservation(&max, &max, exact.as_ref());
    let _ = ext::get_extended_resource_spec(map);
    let _ = ext::get_pod_replace_resources_config(map);
    let _ = ext::get_pod_cpu_burst_config(map);
    let _ = ext::get_pod_cpu_qos_config(map);
    let _ = ext::get_pod_memory_qos_config(map);
    let _ = ext::get_pod_blkio_qos(map);
    let _ = ext::get_system_qos_resource(map);
    let _ = ext::pod_koord_preemption_policy_with_default(map);
    let _ = ext::qos_class_from_labels(map);
    let _ = ext::explanation_key(map);
    let _ = ext::topology_key_to_explain(map);
    let _ = ext::is_secondary_device_well_planned(map);
    let _ = ext::should_skip_update_resource(map);
    let _ = ext::parse_go_bool(value);
}

fn pod(meta: ObjectMeta) -> Pod {
    serde_json::from_value::<Pod>(serde_json::json!({
        "spec": {"containers": [{"name": "main", "resources": {
            "requests": {"cpu": "1", "memory": "1Gi"},
            "limits": {"cpu": "2", "memory": "2Gi"}}}]}
    }))
    .map(|pod| Pod {
        metadata: meta,
        ..pod
    })
    .unwrap_or_default()
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let map: ext::StringMap = KEYS
        .iter()
        .map(|key| ((*key).to_owned(), value.to_owned()))
        .collect();
    decode_all(&map, value);

    let meta = ObjectMeta {
        name: Some("p".into()),
        namespace: Some("default".into()),
        uid: Some("uid-1".into()),
        labels: Some(map.clone()),
        annotations: Some(map.clone()),
        ..ObjectMeta::default()
    };
    let pod = pod(meta.clone());
    let _ = ext::qos_class_of_pod(&pod);
    let _ = ext::priority_class_of_pod(&pod);
    let _ = ext::pod_priority_value_with_default(&pod);
    let _ = ext::scheduler_name_of_pod(&pod);
    let _ = ext::kube_qos_class_of_pod(&pod);

    // koordlet: pod-level readers (the hook context, resource accounting).
    let mut context = koordlet::runtimehooks::protocol::PodContext {
        labels: map.clone(),
        annotations: map.clone(),
        ..Default::default()
    };
    let _ = context.load_extended_resources_from_annotations();
    let _ = koordlet::statesinformer::podmeta::pod_meta_of(&pod);
    let _ = koordlet::qosmanager::netqos::net_qos_pod(&pod);
    let _ = koordlet::prediction::reclaim::pod_requests(&pod);

    // koordlet: node-level readers, and the hook rules built from them.
    let node = Node {
        metadata: ObjectMeta {
            name: Some("n".into()),
            ..meta.clone()
        },
        ..Node::default()
    };
    let _ = koordlet::statesinformer::nodetopo::system_exclusive_cpus(&map);
    let online = "0-7"
        .parse::<koord_common::units::CpuSet>()
        .unwrap_or_default();
    let _ = koordlet::runtimehooks::rules::NodeRules::build(
        Some(&node),
        None,
        Some(std::slice::from_ref(&pod)),
        Some(&online),
        None,
    );

    // koord-manager: the reservation a node's annotations withhold.
    let _ = koord_manager::slo_controller::resources::node_reserved(&node);

    // koord-scheduler: admission of objects as the watch delivers them.
    use koord_scheduler::cache::Object;
    let _ = koord_scheduler::admission::admit(Object::Pod(pod));
    let _ = koord_scheduler::admission::admit(Object::Node(node));
});
