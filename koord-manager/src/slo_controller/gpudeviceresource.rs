//! GPU device resources (upstream noderesource plugin `GPUDeviceResource`):
//! the node's Device CR becomes GPU extended resources and GPU labels on
//! the Node.
//!
//! Pure. Upstream's rules:
//! - no Device for the node, or no healthy GPU in it: every resource of
//!   [`RESOURCE_NAMES`] is removed from capacity and allocatable;
//! - otherwise the resources of the healthy GPUs are summed and those named
//!   in [`RESOURCE_NAMES`] are written; `koordinator.sh/gpu` is the sum of
//!   `gpu-core`, written only when the Device's `gpu-vendor` label is
//!   `nvidia` or absent; `koordinator.sh/gpu.shared` (100 per healthy GPU)
//!   only with the `EnableSyncGPUSharedResource` gate; a resource of the list
//!   no healthy GPU offers is left as the node has it;
//! - `nvidia.com/gpu` and other names outside the list are never written
//!   (the vendor's device plugin owns them);
//! - the Device's `gpu-vendor`, `gpu-model` and `gpu-driver-version` labels
//!   are copied to the node when present, and never removed.
//!
//! Beyond upstream: a negative or unreadable amount on a healthy GPU fails
//! the plugin (the node's GPU resources are left as they are) instead of
//! being summed.

use std::collections::BTreeMap;

use apis::extension::{
    GPU_VENDOR_NVIDIA, LABEL_GPU_DRIVER_VERSION, LABEL_GPU_MODEL, LABEL_GPU_VENDOR, RESOURCE_GPU,
    RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO, RESOURCE_GPU_SHARED,
    RESOURCE_HUAWEI_NPU_CORE, RESOURCE_HUAWEI_NPU_CPU, RESOURCE_HUAWEI_NPU_DVPP,
};
use apis::scheduling::v1alpha1::{Device, DeviceType};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::device_items::{DeviceItems, DeviceResourceError, Sum, healthy_devices};
use super::resources::is_resource_diff;

/// The plugin's name in `--noderesource-plugins`.
pub const PLUGIN_NAME: &str = "GPUDeviceResource";

/// The resources the plugin writes or resets, in upstream's order.
pub const RESOURCE_NAMES: [&str; 8] = [
    RESOURCE_GPU,
    RESOURCE_GPU_CORE,
    RESOURCE_HUAWEI_NPU_CORE,
    RESOURCE_HUAWEI_NPU_CPU,
    RESOURCE_HUAWEI_NPU_DVPP,
    RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO,
    RESOURCE_GPU_SHARED,
];

/// The node labels the plugin copies from the Device, in upstream's order.
pub const LABELS: [&str; 3] = [LABEL_GPU_VENDOR, LABEL_GPU_MODEL, LABEL_GPU_DRIVER_VERSION];

/// Upstream's messages.
pub const RESET_RESOURCES_MSG: &str = "reset node gpu resources";
pub const UPDATE_RESOURCES_MSG: &str = "node gpu resources from device";
pub const UPDATE_LABELS_MSG: &str = "node gpu labels from device";
pub const UPDATE_RESOURCES_AND_LABELS_MSG: &str =
    "node gpu resources from device; node gpu labels from device";
pub const NEED_SYNC_FOR_RESOURCE_DIFF: &str = "gpu resource diff is big than threshold";

/// Upstream's NeedSyncMeta message for a changed label.
pub fn need_sync_for_label(label: &str) -> String {
    format!("gpu device label {label} changed")
}

/// Every resource of the plugin reset (removed from the node).
pub fn reset() -> DeviceItems {
    DeviceItems {
        resources: RESOURCE_NAMES.iter().map(|name| (*name, None)).collect(),
        labels: BTreeMap::new(),
        message: RESET_RESOURCES_MSG,
    }
}

/// Upstream `Calculate`: the GPU resources and labels of the node from its
/// Device (`None`: no Device named after the node). `sync_shared` is the
/// `EnableSyncGPUSharedResource` gate.
pub fn calculate(
    node: &Node,
    device: Option<&Device>,
    sync_shared: bool,
) -> Result<DeviceItems, DeviceResourceError> {
    if node
        .status
        .as_ref()
        .and_then(|status| status.allocatable.as_ref())
        .is_none()
    {
        return Err(DeviceResourceError::MissingArguments);
    }
    let Some(device) = device else {
        return Ok(reset());
    };
    if healthy_devices(device, DeviceType::Gpu).next().is_none() {
        return Ok(reset());
    }
    let device_name = device.metadata.name.clone().unwrap_or_default();
    let mut sums: BTreeMap<&'static str, Sum> = BTreeMap::new();
    // `koordinator.sh/gpu` counts gpu-core; a GPU without one adds nothing.
    let mut total_gpu = Sum::units(0);
    let mut healthy: i64 = 0;
    for (index, info) in healthy_devices(device, DeviceType::Gpu) {
        healthy += 1;
        for (resource, quantity) in info.resources.iter().flatten() {
            // Names outside the list never reach the node, so they are not read.
            let Some(managed) = RESOURCE_NAMES.iter().find(|name| **name == resource) else {
                continue;
            };
            let at = || (device_name.clone(), index, resource.clone());
            sums.entry(*managed)
                .or_insert(Sum::ZERO)
                .add(quantity, at)?;
            if resource == RESOURCE_GPU_CORE {
                total_gpu.add(quantity, at)?;
            }
        }
    }
    let labels = device.metadata.labels.as_ref();
    let vendor = labels.and_then(|labels| labels.get(LABEL_GPU_VENDOR));
    // Only NVIDIA GPUs (or an unnamed vendor, as before vendors were
    // labelled) get the koordinator.sh/gpu wrapper resource.
    if vendor.is_none_or(|vendor| vendor.is_empty() || vendor == GPU_VENDOR_NVIDIA) {
        sums.insert(RESOURCE_GPU, total_gpu);
    }
    if sync_shared {
        sums.insert(RESOURCE_GPU_SHARED, Sum::units(healthy.saturating_mul(100)));
    }
    let copied: BTreeMap<&'static str, String> = LABELS
        .iter()
        .filter_map(|key| Some((*key, labels?.get(*key)?.clone())))
        .collect();
    Ok(DeviceItems {
        resources: sums
            .into_iter()
            .map(|(name, sum)| (name, Some(sum.quantity())))
            .collect(),
        message: if copied.is_empty() {
            UPDATE_RESOURCES_MSG
        } else {
            UPDATE_RESOURCES_AND_LABELS_MSG
        },
        labels: copied,
    })
}

/// Upstream `NeedSync`: a resource of [`RESOURCE_NAMES`] appears, vanishes
/// or moves beyond `threshold` between the node's allocatable and the
/// prepared one.
pub fn need_sync(
    threshold: f64,
    old: &BTreeMap<String, Quantity>,
    new: &BTreeMap<String, Quantity>,
) -> Option<&'static str> {
    RESOURCE_NAMES
        .iter()
        .any(|name| is_resource_diff(old.get(*name), new.get(*name), threshold))
        .then_some(NEED_SYNC_FOR_RESOURCE_DIFF)
}

/// Upstream `NeedSyncMeta`: the first of [`LABELS`] whose value differs.
pub fn need_sync_meta(
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
) -> Option<String> {
    LABELS
        .iter()
        .find(|key| old.get(**key) != new.get(**key))
        .map(|key| need_sync_for_label(key))
}

#[cfg(test)]
mod tests {
    //! Cases transcribed from upstream's
    //! `noderesource/plugins/gpudeviceresource/plugin_test.go`. Upstream's
    //! "get device object error" case (an API read failing) has no
    //! counterpart: the Device comes from the controller's cache.

    use super::*;
    use crate::slo_controller::device_resources::prepare;
    use apis::extension::{GPU_VENDOR_HUAWEI, RESOURCE_NVIDIA_GPU};
    use apis::scheduling::v1alpha1::{DeviceInfo, DeviceSpec};
    use k8s_openapi::api::core::v1::NodeStatus;

    fn q(text: &str) -> Quantity {
        Quantity(text.to_owned())
    }

    fn list(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), q(v))).collect()
    }

    fn strings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    const BASE: [(&str, &str); 2] = [("cpu", "100"), ("memory", "400Gi")];

    fn test_node(labels: &[(&str, &str)], extra: &[(&str, &str)]) -> Node {
        let mut resources = BASE.to_vec();
        resources.extend_from_slice(extra);
        let mut node = Node::default();
        node.metadata.name = Some("test-node".into());
        let mut all_labels = vec![("test-label", "test-value")];
        all_labels.extend_from_slice(labels);
        node.metadata.labels = Some(strings(&all_labels));
        node.status = Some(NodeStatus {
            allocatable: Some(list(&resources)),
            capacity: Some(list(&resources)),
            ..NodeStatus::default()
        });
        node
    }

    const NVIDIA_LABELS: [(&str, &str); 3] = [
        (LABEL_GPU_VENDOR, GPU_VENDOR_NVIDIA),
        (LABEL_GPU_MODEL, "A100"),
        (LABEL_GPU_DRIVER_VERSION, "480"),
    ];

    const NVIDIA_RESOURCES: [(&str, &str); 4] = [
        (RESOURCE_GPU, "200"),
        (RESOURCE_GPU_CORE, "200"),
        (RESOURCE_GPU_MEMORY, "18000"),
        (RESOURCE_GPU_MEMORY_RATIO, "200"),
    ];

    fn gpu(health: bool, resources: &[(&str, &str)]) -> DeviceInfo {
        DeviceInfo {
            type_: Some(DeviceType::Gpu),
            health,
            resources: Some(list(resources)),
            ..DeviceInfo::default()
        }
    }

    fn device(labels: Option<&[(&str, &str)]>, infos: Vec<DeviceInfo>) -> Device {
        let mut device = Device::new(
            "test-node",
            DeviceSpec {
                devices: Some(infos),
            },
        );
        device.metadata.labels = labels.map(strings);
        device
    }

    fn nvidia_gpus() -> Vec<DeviceInfo> {
        ["8000", "10000"]
            .iter()
            .map(|memory| {
                gpu(
                    true,
                    &[
                        (RESOURCE_GPU_CORE, "100"),
                        (RESOURCE_GPU_MEMORY, memory),
                        (RESOURCE_GPU_MEMORY_RATIO, "100"),
                    ],
                )
            })
            .collect()
    }

    fn huawei_gpus() -> Vec<DeviceInfo> {
        ["8000", "10000"]
            .iter()
            .map(|memory| {
                gpu(
                    true,
                    &[
                        (RESOURCE_HUAWEI_NPU_CORE, "20"),
                        (RESOURCE_HUAWEI_NPU_CPU, "20"),
                        (RESOURCE_HUAWEI_NPU_DVPP, "100"),
                        (RESOURCE_GPU_MEMORY, memory),
                        (RESOURCE_GPU_MEMORY_RATIO, "100"),
                    ],
                )
            })
            .collect()
    }

    fn items(resources: &[(&'static str, &str)], labels: &[(&'static str, &str)]) -> DeviceItems {
        DeviceItems {
            resources: resources
                .iter()
                .map(|(name, value)| (*name, Some(q(value))))
                .collect(),
            labels: labels
                .iter()
                .map(|(name, value)| (*name, (*value).to_owned()))
                .collect(),
            message: if labels.is_empty() {
                UPDATE_RESOURCES_MSG
            } else {
                UPDATE_RESOURCES_AND_LABELS_MSG
            },
        }
    }

    #[test]
    fn calculate_follows_upstream() {
        let node = test_node(&[], &[]);
        let nvidia = device(Some(&NVIDIA_LABELS), nvidia_gpus());
        let huawei = device(
            Some(&[
                (LABEL_GPU_VENDOR, GPU_VENDOR_HUAWEI),
                (LABEL_GPU_MODEL, "Ascend-910"),
            ]),
            huawei_gpus(),
        );
        let missing_labels = device(None, nvidia_gpus());
        let missing_gpu_labels = device(Some(&[("anything", "anything")]), nvidia_gpus());
        let missing_gpu = device(None, Vec::new());
        let nvidia_items = [
            (RESOURCE_GPU, "200"),
            (RESOURCE_GPU_CORE, "200"),
            (RESOURCE_GPU_MEMORY, "18k"),
            (RESOURCE_GPU_MEMORY_RATIO, "200"),
        ];
        let huawei_items = [
            (RESOURCE_HUAWEI_NPU_CORE, "40"),
            (RESOURCE_HUAWEI_NPU_CPU, "40"),
            (RESOURCE_HUAWEI_NPU_DVPP, "200"),
            (RESOURCE_GPU_MEMORY, "18k"),
            (RESOURCE_GPU_MEMORY_RATIO, "200"),
        ];
        let with_shared = |base: &[(&'static str, &'static str)]| {
            let mut all = base.to_vec();
            all.push((RESOURCE_GPU_SHARED, "200"));
            all
        };
        let huawei_labels = [
            (LABEL_GPU_VENDOR, GPU_VENDOR_HUAWEI),
            (LABEL_GPU_MODEL, "Ascend-910"),
        ];
        let cases: Vec<(&str, Option<&Device>, bool, DeviceItems)> = vec![
            (
                "nvidia, shared resource synced",
                Some(&nvidia),
                true,
                items(&with_shared(&nvidia_items), &NVIDIA_LABELS),
            ),
            (
                "huawei, shared resource synced",
                Some(&huawei),
                true,
                items(&with_shared(&huawei_items), &huawei_labels),
            ),
            (
                "no labels, shared resource synced",
                Some(&missing_labels),
                true,
                items(&with_shared(&nvidia_items), &[]),
            ),
            (
                "no gpu labels, shared resource synced",
                Some(&missing_gpu_labels),
                true,
                items(&with_shared(&nvidia_items), &[]),
            ),
            (
                "nvidia",
                Some(&nvidia),
                false,
                items(&nvidia_items, &NVIDIA_LABELS),
            ),
            (
                "huawei",
                Some(&huawei),
                false,
                items(&huawei_items, &huawei_labels),
            ),
            (
                "no labels",
                Some(&missing_labels),
                false,
                items(&nvidia_items, &[]),
            ),
            (
                "no gpu labels",
                Some(&missing_gpu_labels),
                false,
                items(&nvidia_items, &[]),
            ),
            ("no device: reset", None, false, reset()),
            (
                "no gpu in device: reset",
                Some(&missing_gpu),
                false,
                reset(),
            ),
        ];
        for (name, device, shared, want) in cases {
            assert_eq!(calculate(&node, device, shared), Ok(want), "{name}");
        }
        assert_eq!(
            calculate(&Node::default(), None, false),
            Err(DeviceResourceError::MissingArguments),
            "args missing essential fields"
        );
        assert_eq!(reset().resources.len(), 8);
    }

    #[test]
    fn only_healthy_gpus_count_and_vendor_resources_are_left_alone() {
        let node = test_node(&[], &[]);
        let mut gpus = nvidia_gpus();
        gpus.push(gpu(
            false,
            &[
                (RESOURCE_GPU_CORE, "100"),
                (RESOURCE_GPU_MEMORY, "16Gi"),
                (RESOURCE_GPU_MEMORY_RATIO, "100"),
            ],
        ));
        // The vendor device plugin's resource is never written.
        gpus[0]
            .resources
            .as_mut()
            .unwrap()
            .insert(RESOURCE_NVIDIA_GPU.to_owned(), q("1"));
        let got = calculate(&node, Some(&device(None, gpus)), false).unwrap();
        assert_eq!(got, items(&NVIDIA_RESOURCES_SUMMED, &[]));
        // Every GPU unhealthy: reset.
        let sick = vec![gpu(false, &[(RESOURCE_GPU_CORE, "100")])];
        assert_eq!(
            calculate(&node, Some(&device(None, sick)), false),
            Ok(reset())
        );
        // An unreadable amount on a healthy GPU fails the plugin.
        let bad = vec![gpu(true, &[(RESOURCE_GPU_MEMORY, "lots")])];
        let err = calculate(&node, Some(&device(None, bad)), false).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "Device test-node: spec.devices[0].resources[koordinator.sh/gpu-memory]"
            ),
            "{err}"
        );
        // ... but not one on an unhealthy GPU, which is not read.
        let mut skipped = nvidia_gpus();
        skipped.push(gpu(false, &[(RESOURCE_GPU_MEMORY, "lots")]));
        assert!(calculate(&node, Some(&device(None, skipped)), false).is_ok());
    }

    const NVIDIA_RESOURCES_SUMMED: [(&str, &str); 4] = [
        (RESOURCE_GPU, "200"),
        (RESOURCE_GPU_CORE, "200"),
        (RESOURCE_GPU_MEMORY, "18k"),
        (RESOURCE_GPU_MEMORY_RATIO, "200"),
    ];

    fn allocatable(node: &Node) -> BTreeMap<String, Quantity> {
        node.status.clone().unwrap().allocatable.unwrap()
    }

    #[test]
    fn need_sync_follows_upstream() {
        let without = test_node(&[], &[]);
        let with = test_node(&NVIDIA_LABELS, &NVIDIA_RESOURCES);
        let driver_update = test_node(
            &[
                (LABEL_GPU_VENDOR, GPU_VENDOR_NVIDIA),
                (LABEL_GPU_MODEL, "A100"),
                (LABEL_GPU_DRIVER_VERSION, "486"),
            ],
            &NVIDIA_RESOURCES,
        );
        let resource_update = test_node(
            &NVIDIA_LABELS,
            &[
                (RESOURCE_GPU, "160"),
                (RESOURCE_GPU_CORE, "160"),
                (RESOURCE_GPU_MEMORY, "18000"),
                (RESOURCE_GPU_MEMORY_RATIO, "200"),
            ],
        );
        let cases = [
            ("both without gpu", &without, &without, None),
            ("both with gpu", &with, &with, None),
            ("labels change is ignored", &with, &driver_update, None),
            (
                "add resources",
                &without,
                &with,
                Some(NEED_SYNC_FOR_RESOURCE_DIFF),
            ),
            (
                "resource update",
                &with,
                &resource_update,
                Some(NEED_SYNC_FOR_RESOURCE_DIFF),
            ),
            (
                "delete resources",
                &with,
                &without,
                Some(NEED_SYNC_FOR_RESOURCE_DIFF),
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(
                need_sync(0.1, &allocatable(old), &allocatable(new)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn need_sync_meta_follows_upstream() {
        let labels = |node: &Node| node.metadata.labels.clone().unwrap();
        let without = test_node(&[], &[]);
        let with = test_node(&NVIDIA_LABELS, &NVIDIA_RESOURCES);
        let driver_update = test_node(
            &[
                (LABEL_GPU_VENDOR, GPU_VENDOR_NVIDIA),
                (LABEL_GPU_MODEL, "A100"),
                (LABEL_GPU_DRIVER_VERSION, "486"),
            ],
            &NVIDIA_RESOURCES,
        );
        let resource_update = test_node(&NVIDIA_LABELS, &[(RESOURCE_GPU_CORE, "160")]);
        let vendor_changed = need_sync_for_label(LABEL_GPU_VENDOR);
        let driver_changed = need_sync_for_label(LABEL_GPU_DRIVER_VERSION);
        let cases = [
            ("nothing changes", &without, &without, None),
            ("nothing changes 1", &with, &with, None),
            ("resources change is ignored", &with, &resource_update, None),
            ("add labels", &without, &with, Some(vendor_changed.clone())),
            (
                "driver version update",
                &with,
                &driver_update,
                Some(driver_changed),
            ),
            ("remove labels", &with, &without, Some(vendor_changed)),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(need_sync_meta(&labels(old), &labels(new)), want, "{name}");
        }
        assert_eq!(
            need_sync_for_label(LABEL_GPU_VENDOR),
            "gpu device label node.koordinator.sh/gpu-vendor changed"
        );
    }

    /// Upstream's Prepare applied to a node: resources set or removed in
    /// capacity and allocatable, labels set.
    fn prepared(node: &Node, items: &DeviceItems) -> Node {
        let mut node = node.clone();
        let status = node.status.get_or_insert_default();
        prepare(status.allocatable.get_or_insert_default(), &items.resources);
        prepare(status.capacity.get_or_insert_default(), &items.resources);
        let labels = node.metadata.labels.get_or_insert_default();
        for (key, value) in &items.labels {
            labels.insert((*key).to_owned(), value.clone());
        }
        node
    }

    #[test]
    fn prepare_follows_upstream() {
        let without = test_node(&[], &[]);
        let nvidia = test_node(&NVIDIA_LABELS, &NVIDIA_RESOURCES);
        let huawei_labels = [
            (LABEL_GPU_VENDOR, GPU_VENDOR_HUAWEI),
            (LABEL_GPU_MODEL, "Ascend-910"),
        ];
        let huawei_resources = [
            (RESOURCE_HUAWEI_NPU_CORE, "160"),
            (RESOURCE_HUAWEI_NPU_CPU, "160"),
            (RESOURCE_HUAWEI_NPU_DVPP, "200"),
            (RESOURCE_GPU_MEMORY, "18000"),
            (RESOURCE_GPU_MEMORY_RATIO, "200"),
        ];
        let huawei = test_node(&huawei_labels, &huawei_resources);
        let reset_of = |names: &[&'static str]| DeviceItems {
            resources: names.iter().map(|name| (*name, None)).collect(),
            ..DeviceItems::default()
        };
        let cases = [
            (
                "nothing to prepare",
                without.clone(),
                DeviceItems::default(),
                without.clone(),
            ),
            (
                "nvidia: update resources and labels",
                without.clone(),
                items(&NVIDIA_RESOURCES, &NVIDIA_LABELS),
                nvidia.clone(),
            ),
            (
                "nvidia: reset resources (labels stay)",
                nvidia.clone(),
                reset_of(&[
                    RESOURCE_GPU,
                    RESOURCE_GPU_CORE,
                    RESOURCE_GPU_MEMORY,
                    RESOURCE_GPU_MEMORY_RATIO,
                ]),
                test_node(&NVIDIA_LABELS, &[]),
            ),
            (
                "huawei: update resources and labels",
                without.clone(),
                items(&huawei_resources, &huawei_labels),
                huawei.clone(),
            ),
            (
                "huawei: reset resources (labels stay)",
                huawei,
                reset_of(&[
                    RESOURCE_HUAWEI_NPU_CORE,
                    RESOURCE_HUAWEI_NPU_CPU,
                    RESOURCE_HUAWEI_NPU_DVPP,
                    RESOURCE_GPU_MEMORY,
                    RESOURCE_GPU_MEMORY_RATIO,
                ]),
                test_node(&huawei_labels, &[]),
            ),
        ];
        for (name, node, items, want) in cases {
            assert_eq!(prepared(&node, &items), want, "{name}");
        }
    }

    #[test]
    fn calculate_then_prepare_updates_and_cleans_up() {
        // updateGPUDriverAndModel success (shared resource synced).
        let node = test_node(&[], &[]);
        let nvidia = device(Some(&NVIDIA_LABELS), nvidia_gpus());
        let items = calculate(&node, Some(&nvidia), true).unwrap();
        let mut want_resources = NVIDIA_RESOURCES_SUMMED.to_vec();
        want_resources.push((RESOURCE_GPU_SHARED, "200"));
        let with_device = test_node(&NVIDIA_LABELS, &want_resources);
        assert_eq!(prepared(&node, &items), with_device);
        // cleanup success: the Device is gone, the resources go, other
        // labels stay.
        let without_labels = test_node(&[], &want_resources);
        let items = calculate(&without_labels, None, false).unwrap();
        assert_eq!(prepared(&without_labels, &items), node);
    }
}
