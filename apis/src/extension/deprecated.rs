//! Deprecated resource names and label keys that are still accepted and
//! mapped to their current names.
//!
//! Upstream maps them in koord-scheduler's (and koord-descheduler's)
//! informer transformers only: pods, nodes, ElasticQuotas and Devices are
//! rewritten as they enter the scheduler's cache, under no feature gate.
//! No webhook rewrites them and koordlet does not read them. The
//! `transform_*` functions here are those transformers.

use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};

use super::annotations::StringMap;
use super::device_share::{
    RESOURCE_FPGA, RESOURCE_GPU, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO,
    RESOURCE_RDMA, get_device_allocations, set_device_allocations,
};
use super::error::ExtensionError;
use super::resource::{BATCH_CPU, BATCH_MEMORY, ResourceList};
use crate::scheduling::v1alpha1::DeviceSpec;
use crate::scheduling_sigs::v1alpha1::ElasticQuotaSpec;

/// Deprecated: use [`BATCH_CPU`].
pub const KOORD_BATCH_CPU: &str = "koordinator.sh/batch-cpu";
/// Deprecated: use [`BATCH_MEMORY`].
pub const KOORD_BATCH_MEMORY: &str = "koordinator.sh/batch-memory";
/// Deprecated: use [`RESOURCE_RDMA`].
pub const DEPRECATED_KOORD_RDMA: &str = "kubernetes.io/rdma";
/// Deprecated: use [`RESOURCE_FPGA`].
pub const DEPRECATED_KOORD_FPGA: &str = "kubernetes.io/fpga";
/// Deprecated: use [`RESOURCE_GPU`].
pub const DEPRECATED_KOORD_GPU: &str = "kubernetes.io/gpu";
/// Deprecated: use [`RESOURCE_GPU_CORE`].
pub const DEPRECATED_GPU_CORE: &str = "kubernetes.io/gpu-core";
/// Deprecated: use [`RESOURCE_GPU_MEMORY`].
pub const DEPRECATED_GPU_MEMORY: &str = "kubernetes.io/gpu-memory";
/// Deprecated: use [`RESOURCE_GPU_MEMORY_RATIO`].
pub const DEPRECATED_GPU_MEMORY_RATIO: &str = "kubernetes.io/gpu-memory-ratio";
/// Deprecated Device label: GPU driver version.
pub const DEPRECATED_GPU_DRIVER: &str = "kubernetes.io/gpu-driver";
/// Deprecated Device label: GPU model.
pub const DEPRECATED_GPU_MODEL: &str = "kubernetes.io/gpu-model";

/// Deprecated batch resource → current name.
pub const DEPRECATED_BATCH_RESOURCES_MAPPER: &[(&str, &str)] = &[
    (KOORD_BATCH_CPU, BATCH_CPU),
    (KOORD_BATCH_MEMORY, BATCH_MEMORY),
];

/// Deprecated device resource → current name.
pub const DEPRECATED_DEVICE_RESOURCES_MAPPER: &[(&str, &str)] = &[
    (DEPRECATED_KOORD_RDMA, RESOURCE_RDMA),
    (DEPRECATED_KOORD_FPGA, RESOURCE_FPGA),
    (DEPRECATED_KOORD_GPU, RESOURCE_GPU),
    (DEPRECATED_GPU_CORE, RESOURCE_GPU_CORE),
    (DEPRECATED_GPU_MEMORY, RESOURCE_GPU_MEMORY),
    (DEPRECATED_GPU_MEMORY_RATIO, RESOURCE_GPU_MEMORY_RATIO),
];

/// The current name of a deprecated batch resource, if `name` is one.
pub fn current_batch_resource_name(name: &str) -> Option<&'static str> {
    lookup(DEPRECATED_BATCH_RESOURCES_MAPPER, name)
}

/// The current name of a deprecated device resource, if `name` is one.
pub fn current_device_resource_name(name: &str) -> Option<&'static str> {
    lookup(DEPRECATED_DEVICE_RESOURCES_MAPPER, name)
}

fn lookup(mapper: &[(&str, &'static str)], name: &str) -> Option<&'static str> {
    mapper
        .iter()
        .find(|(deprecated, _)| *deprecated == name)
        .map(|(_, current)| *current)
}

/// Moves the quantity of each deprecated name in `list` to its current name,
/// as upstream's scheduler-side transformers do: when the current name is
/// already present, the list is left as it is for that pair (the current
/// name wins and the deprecated entry stays, unread). Returns whether
/// anything moved.
pub fn replace_deprecated_resources(list: &mut ResourceList, mapper: &[(&str, &str)]) -> bool {
    let mut moved = false;
    for (deprecated, current) in mapper {
        if list.contains_key(*current) {
            continue;
        }
        if let Some(quantity) = list.remove(*deprecated) {
            list.insert((*current).to_owned(), quantity);
            moved = true;
        }
    }
    moved
}

/// Both mappers (batch, then device) over one optional resource list.
fn replace_all(list: Option<&mut ResourceList>) -> bool {
    let Some(list) = list else {
        return false;
    };
    let batch = replace_deprecated_resources(list, DEPRECATED_BATCH_RESOURCES_MAPPER);
    replace_deprecated_resources(list, DEPRECATED_DEVICE_RESOURCES_MAPPER) || batch
}

/// Upstream `TransformDeprecatedBatchResources` and
/// `TransformDeprecatedDeviceResources` on a pod's spec: requests and limits
/// of init and regular containers, and the overhead. Returns whether
/// anything changed.
pub fn transform_deprecated_pod_resources(spec: &mut PodSpec) -> bool {
    let mut changed = false;
    let init = spec.init_containers.iter_mut().flatten();
    for container in init.chain(spec.containers.iter_mut()) {
        if let Some(resources) = container.resources.as_mut() {
            changed |= replace_all(resources.requests.as_mut());
            changed |= replace_all(resources.limits.as_mut());
        }
    }
    changed |= replace_all(spec.overhead.as_mut());
    changed
}

/// The device shares recorded in the `device-allocated` annotation with
/// deprecated device names moved to the current ones (upstream
/// `transformDeviceAllocations`). `Ok(false)` when there is no annotation or
/// nothing to move; an annotation that does not parse is an error and is
/// left untouched.
pub fn transform_deprecated_device_allocations(
    annotations: &mut StringMap,
) -> Result<bool, ExtensionError> {
    let Some(mut allocations) = get_device_allocations(annotations)? else {
        return Ok(false);
    };
    let mut changed = false;
    for allocation in allocations.values_mut().flatten() {
        changed |= replace_deprecated_resources(
            &mut allocation.resources,
            DEPRECATED_DEVICE_RESOURCES_MAPPER,
        );
    }
    if changed {
        set_device_allocations(annotations, &allocations)?;
    }
    Ok(changed)
}

/// Upstream's pod transformer for deprecated names: the spec's resource
/// lists and the device-allocated annotation. A malformed annotation is
/// left as it is (the caller's own annotation check reports it) and the
/// spec is still transformed. Returns whether anything changed.
pub fn transform_deprecated_pod(pod: &mut Pod) -> bool {
    let mut changed = pod
        .spec
        .as_mut()
        .is_some_and(transform_deprecated_pod_resources);
    if let Some(annotations) = pod.metadata.annotations.as_mut() {
        changed |= transform_deprecated_device_allocations(annotations).unwrap_or(false);
    }
    changed
}

/// Upstream `TransformNodeDeprecatedBatchResources` and
/// `TransformNodeDeprecatedDeviceResources`: allocatable and capacity.
pub fn transform_deprecated_node_resources(node: &mut Node) -> bool {
    let Some(status) = node.status.as_mut() else {
        return false;
    };
    let allocatable = replace_all(status.allocatable.as_mut());
    replace_all(status.capacity.as_mut()) || allocatable
}

/// Upstream `TransformElasticQuotaWithDeprecatedBatchResources`: `max` and
/// `min`, batch names only (quotas carry no device names upstream maps).
pub fn transform_deprecated_quota_resources(spec: &mut ElasticQuotaSpec) -> bool {
    let mut changed = false;
    for list in [spec.max.as_mut(), spec.min.as_mut()].into_iter().flatten() {
        changed |= replace_deprecated_resources(list, DEPRECATED_BATCH_RESOURCES_MAPPER);
    }
    changed
}

/// Upstream `TransformDeviceWithDeprecatedResources`: each device's resources.
pub fn transform_deprecated_device_resources(spec: &mut DeviceSpec) -> bool {
    let mut changed = false;
    for info in spec.devices.iter_mut().flatten() {
        if let Some(resources) = info.resources.as_mut() {
            changed |= replace_deprecated_resources(resources, DEPRECATED_DEVICE_RESOURCES_MAPPER);
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::{Value, json};

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), Quantity((*value).to_owned())))
            .collect()
    }

    fn pod(value: Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    /// A pod with `requests` on one init and one regular container and `overhead`.
    fn pod_with(requests: Value, overhead: Value, device_allocated: Option<&str>) -> Pod {
        let mut pod = pod(json!({
            "metadata": {"name": "p"},
            "spec": {
                "initContainers": [{"name": "init", "resources": {"requests": requests}}],
                "containers": [{"name": "main", "resources": {"requests": requests, "limits": requests}}],
                "overhead": overhead,
            }
        }));
        if let Some(text) = device_allocated {
            pod.metadata.annotations = Some(
                [(
                    super::super::ANNOTATION_DEVICE_ALLOCATED.to_owned(),
                    text.to_owned(),
                )]
                .into(),
            );
        }
        pod
    }

    // Upstream TestTransformPod: "normal pod" and "pod with deprecated resources".
    #[test]
    fn pods_with_deprecated_names_read_as_current_names() {
        let current_allocated = r#"{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"60","koordinator.sh/gpu-memory":"8Gi","koordinator.sh/gpu-memory-ratio":"50"}}]}"#;
        let current = pod_with(
            json!({"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi",
                   "koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100"}),
            json!({"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "2Gi"}),
            Some(current_allocated),
        );
        let mut unchanged = current.clone();
        assert!(!transform_deprecated_pod(&mut unchanged));
        assert_eq!(unchanged, current);

        let mut deprecated = pod_with(
            json!({"koordinator.sh/batch-cpu": "1000", "koordinator.sh/batch-memory": "1Gi",
                   "kubernetes.io/gpu-core": "100", "kubernetes.io/gpu-memory-ratio": "100"}),
            json!({"koordinator.sh/batch-cpu": "500", "koordinator.sh/batch-memory": "2Gi"}),
            Some(
                r#"{"gpu":[{"minor":1,"resources":{"kubernetes.io/gpu-core":"60","kubernetes.io/gpu-memory":"8Gi","kubernetes.io/gpu-memory-ratio":"50"}}]}"#,
            ),
        );
        assert!(transform_deprecated_pod(&mut deprecated));
        // The annotation is rewritten, so compare it parsed.
        let allocations = |pod: &Pod| {
            get_device_allocations(pod.metadata.annotations.as_ref().unwrap())
                .unwrap()
                .unwrap()
        };
        assert_eq!(allocations(&deprecated), allocations(&current));
        assert_eq!(deprecated.spec, current.spec);
    }

    #[test]
    fn a_current_name_already_present_wins_and_the_deprecated_entry_stays() {
        let mut both = list(&[
            (KOORD_BATCH_CPU, "2000"),
            (BATCH_CPU, "1000"),
            (KOORD_BATCH_MEMORY, "1Gi"),
        ]);
        assert!(replace_deprecated_resources(
            &mut both,
            DEPRECATED_BATCH_RESOURCES_MAPPER
        ));
        assert_eq!(
            both,
            list(&[
                (KOORD_BATCH_CPU, "2000"),
                (BATCH_CPU, "1000"),
                (BATCH_MEMORY, "1Gi"),
            ])
        );
        // Names outside the mapper are untouched; nothing moved is `false`.
        let mut other = list(&[("cpu", "1"), (DEPRECATED_GPU_CORE, "100")]);
        assert!(!replace_deprecated_resources(
            &mut other,
            DEPRECATED_BATCH_RESOURCES_MAPPER
        ));
        assert_eq!(other, list(&[("cpu", "1"), (DEPRECATED_GPU_CORE, "100")]));
    }

    #[test]
    fn a_malformed_device_annotation_is_left_and_the_spec_still_moves() {
        let mut pod = pod_with(
            json!({"koordinator.sh/batch-cpu": "1000"}),
            Value::Null,
            Some("{not json"),
        );
        assert!(transform_deprecated_pod(&mut pod));
        let annotations = pod.metadata.annotations.clone().unwrap();
        assert_eq!(
            annotations[super::super::ANNOTATION_DEVICE_ALLOCATED],
            "{not json"
        );
        assert!(transform_deprecated_device_allocations(&mut annotations.clone()).is_err());
        let spec = pod.spec.unwrap();
        let main = &spec.containers[0];
        let requests = main.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!(requests, &list(&[(BATCH_CPU, "1000")]));
    }

    // Upstream TestTransformNode: "normal node", "node with deprecated batch resources"
    // (and the device names the node transformer maps too).
    #[test]
    fn node_allocatable_and_capacity_move() {
        let node = |resources: Value| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "test-node"},
                "status": {"allocatable": resources, "capacity": resources}
            }))
            .unwrap()
        };
        let normal = node(json!({"cpu": "32", "memory": "64Gi"}));
        let mut unchanged = normal.clone();
        assert!(!transform_deprecated_node_resources(&mut unchanged));
        assert_eq!(unchanged, normal);

        let mut old = node(json!({"cpu": "32", "memory": "64Gi",
            "koordinator.sh/batch-cpu": "1000", "koordinator.sh/batch-memory": "10Gi",
            "kubernetes.io/rdma": "1"}));
        assert!(transform_deprecated_node_resources(&mut old));
        assert_eq!(
            old,
            node(json!({"cpu": "32", "memory": "64Gi",
                "kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "10Gi",
                "koordinator.sh/rdma": "1"}))
        );
    }

    // Upstream TestTransformElasticQuota: normal quota, and deprecated next to current names.
    #[test]
    fn quota_max_and_min_move_batch_names_only() {
        let mut spec = ElasticQuotaSpec {
            max: Some(list(&[
                (KOORD_BATCH_CPU, "1000"),
                (KOORD_BATCH_MEMORY, "10Gi"),
            ])),
            min: Some(list(&[
                (KOORD_BATCH_CPU, "500"),
                (DEPRECATED_KOORD_GPU, "1"),
            ])),
        };
        assert!(transform_deprecated_quota_resources(&mut spec));
        assert_eq!(
            spec.max,
            Some(list(&[(BATCH_CPU, "1000"), (BATCH_MEMORY, "10Gi")]))
        );
        assert_eq!(
            spec.min,
            Some(list(&[(BATCH_CPU, "500"), (DEPRECATED_KOORD_GPU, "1")]))
        );
        let both = list(&[
            (KOORD_BATCH_CPU, "1000"),
            (KOORD_BATCH_MEMORY, "10Gi"),
            (BATCH_CPU, "1000"),
            (BATCH_MEMORY, "10Gi"),
        ]);
        let mut spec = ElasticQuotaSpec {
            max: Some(both.clone()),
            min: Some(both.clone()),
        };
        assert!(!transform_deprecated_quota_resources(&mut spec));
        assert_eq!(spec.max, Some(both.clone()));
        assert_eq!(spec.min, Some(both));
    }

    // Upstream TestTransformDevice: "normal device", "device with deprecated resources".
    #[test]
    fn device_resources_move() {
        let device = |resources: Value| -> DeviceSpec {
            serde_json::from_value(json!({"devices": [
                {"type": "gpu", "minor": 1, "health": true, "resources": resources}
            ]}))
            .unwrap()
        };
        let normal = device(json!({"koordinator.sh/gpu-core": "100"}));
        let mut unchanged = normal.clone();
        assert!(!transform_deprecated_device_resources(&mut unchanged));
        assert_eq!(unchanged, normal);
        let mut old = device(json!({"kubernetes.io/gpu-core": "100",
            "kubernetes.io/gpu-memory-ratio": "100", "kubernetes.io/gpu-memory": "8Gi"}));
        assert!(transform_deprecated_device_resources(&mut old));
        assert_eq!(
            old,
            device(json!({"koordinator.sh/gpu-core": "100",
                "koordinator.sh/gpu-memory-ratio": "100", "koordinator.sh/gpu-memory": "8Gi"}))
        );
    }
}
