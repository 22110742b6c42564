//! The node resource controller's device plugins (upstream noderesource
//! plugins `GPUDeviceResource` and `RDMADeviceResource`) run together for
//! one node: the node's Device CR (named after the node) becomes extended
//! resources in the node status and GPU labels on the node.
//!
//! Pure. [`plan_devices`] runs the selected plugins' Calculate;
//! [`need_sync`] and [`label_changes`] are upstream's NeedSync and
//! NeedSyncMeta against what the node carries. As upstream:
//! - a plugin's resources absent from its result are left as the node has
//!   them; a reset (`None`) removes them from capacity and allocatable;
//! - labels are only ever set, never removed;
//! - with colocation off for the node the plugins do not run (upstream's
//!   reset path asks them for nothing), so device resources and labels are
//!   left as they are;
//! - a plugin that fails leaves its resources as they are.

use std::collections::BTreeMap;

use apis::scheduling::v1alpha1::Device;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub use super::device_items::{DeviceItems, DeviceResourceError};
use super::node_meta::NodeResourcePlugins;
use super::{gpudeviceresource, rdmadeviceresource};

/// One plugin's outcome for a node.
#[derive(Clone, Debug, PartialEq)]
pub struct PluginRun {
    pub plugin: &'static str,
    pub result: Result<DeviceItems, DeviceResourceError>,
}

/// What the device plugins decide for one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DevicePlan {
    /// The plugins that ran, in upstream's order (GPU, then RDMA).
    pub runs: Vec<PluginRun>,
    /// Why no plugin ran (colocation off for the node, or the Device cache
    /// not synced yet); `None` when they ran or none is selected.
    pub skipped: Option<String>,
}

/// Reason when colocation is off for the node.
pub const SKIPPED_COLOCATION_OFF: &str =
    "node colocation is disabled in Config: device resources and labels are left as they are";
/// Reason when the Device cache has not synced yet.
pub const SKIPPED_CACHE_NOT_SYNCED: &str =
    "Devices not listed yet: device resources and labels are left as they are";

impl DevicePlan {
    /// A plan where no plugin runs, for `reason`.
    pub fn skipped(reason: &str) -> Self {
        DevicePlan {
            runs: Vec::new(),
            skipped: Some(reason.to_owned()),
        }
    }

    /// The resources to write, merged over the plugins that succeeded
    /// (their resource names do not overlap).
    pub fn status(&self) -> BTreeMap<&'static str, Option<Quantity>> {
        self.succeeded()
            .flat_map(|items| items.resources.clone())
            .collect()
    }

    /// The labels to set, merged over the plugins that succeeded.
    pub fn labels(&self) -> BTreeMap<&'static str, String> {
        self.succeeded()
            .flat_map(|items| items.labels.clone())
            .collect()
    }

    /// The failures, as `plugin: error`.
    pub fn errors(&self) -> Vec<String> {
        self.runs
            .iter()
            .filter_map(|run| {
                run.result
                    .as_ref()
                    .err()
                    .map(|error| format!("{}: {error}", run.plugin))
            })
            .collect()
    }

    /// Why the plan is what it is: the plugins' messages, their errors or
    /// why none ran.
    pub fn reason(&self) -> String {
        if let Some(skipped) = &self.skipped {
            return skipped.clone();
        }
        self.runs
            .iter()
            .map(|run| match &run.result {
                Ok(items) => format!("{}: {}", run.plugin, items.message),
                Err(error) => format!(
                    "{}: {error}; its resources are left as they are",
                    run.plugin
                ),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn succeeded(&self) -> impl Iterator<Item = &DeviceItems> {
        self.runs.iter().filter_map(|run| run.result.as_ref().ok())
    }
}

/// Runs the selected device plugins for one node. `device` is the Device
/// named after the node, if any; `colocation_enabled` the node's effective
/// colocation switch; `sync_gpu_shared` upstream's
/// `EnableSyncGPUSharedResource` gate.
pub fn plan_devices(
    node: &Node,
    device: Option<&Device>,
    plugins: NodeResourcePlugins,
    colocation_enabled: bool,
    sync_gpu_shared: bool,
) -> DevicePlan {
    if !plugins.gpu_device_resource && !plugins.rdma_device_resource {
        return DevicePlan::default();
    }
    if !colocation_enabled {
        return DevicePlan::skipped(SKIPPED_COLOCATION_OFF);
    }
    let mut plan = DevicePlan::default();
    if plugins.gpu_device_resource {
        plan.runs.push(PluginRun {
            plugin: gpudeviceresource::PLUGIN_NAME,
            result: gpudeviceresource::calculate(node, device, sync_gpu_shared),
        });
    }
    if plugins.rdma_device_resource {
        plan.runs.push(PluginRun {
            plugin: rdmadeviceresource::PLUGIN_NAME,
            result: rdmadeviceresource::calculate(node, device),
        });
    }
    plan
}

/// Upstream's NeedSync of the device plugins against the node's
/// allocatable: the message of the first plugin (in order) one of whose
/// resources appears, vanishes or moves beyond `threshold` once its result
/// is applied; `None` when nothing differs enough.
pub fn need_sync(
    plan: &DevicePlan,
    current_allocatable: &BTreeMap<String, Quantity>,
    threshold: f64,
) -> Option<&'static str> {
    plan.runs.iter().find_map(|run| {
        let items = run.result.as_ref().ok()?;
        let mut prepared = current_allocatable.clone();
        prepare(&mut prepared, &items.resources);
        match run.plugin {
            gpudeviceresource::PLUGIN_NAME => {
                gpudeviceresource::need_sync(threshold, current_allocatable, &prepared)
            }
            _ => rdmadeviceresource::need_sync(threshold, current_allocatable, &prepared),
        }
    })
}

/// Upstream's NeedSyncMeta of the GPU plugin: the labels whose value the
/// plan changes, and the message naming the first of them (in upstream's
/// label order); empty when the node already carries them.
pub fn label_changes(node: &Node, plan: &DevicePlan) -> (BTreeMap<&'static str, String>, String) {
    let no_labels = BTreeMap::new();
    let current = node.metadata.labels.as_ref().unwrap_or(&no_labels);
    let changes: BTreeMap<&'static str, String> = plan
        .labels()
        .into_iter()
        .filter(|(key, value)| current.get(*key) != Some(value))
        .collect();
    if changes.is_empty() {
        return (changes, String::new());
    }
    let mut prepared = current.clone();
    for (key, value) in &changes {
        prepared.insert((*key).to_owned(), value.clone());
    }
    let reason = gpudeviceresource::need_sync_meta(current, &prepared).unwrap_or_default();
    (changes, reason)
}

/// Applies device resources to a node status resource list as upstream's
/// Prepare does (set or remove); used for capacity and allocatable alike.
pub fn prepare(
    list: &mut BTreeMap<String, Quantity>,
    resources: &BTreeMap<&'static str, Option<Quantity>>,
) {
    for (name, quantity) in resources {
        match quantity {
            Some(quantity) => list.insert((*name).to_owned(), quantity.clone()),
            None => list.remove(*name),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::extension::{
        LABEL_GPU_DRIVER_VERSION, LABEL_GPU_MODEL, LABEL_GPU_VENDOR, RESOURCE_GPU,
        RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO, RESOURCE_RDMA,
    };
    use apis::scheduling::v1alpha1::{DeviceInfo, DeviceSpec, DeviceType};

    fn q(text: &str) -> Quantity {
        Quantity(text.to_owned())
    }

    fn node(labels: &[(&str, &str)], allocatable: &[(&str, &str)]) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some("test-node".into());
        node.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        let list: BTreeMap<String, Quantity> = allocatable
            .iter()
            .map(|(k, v)| ((*k).to_owned(), q(v)))
            .collect();
        node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            allocatable: Some(list.clone()),
            capacity: Some(list),
            ..Default::default()
        });
        node
    }

    fn device_with(infos: Vec<DeviceInfo>, labels: &[(&str, &str)]) -> Device {
        let mut device = Device::new(
            "test-node",
            DeviceSpec {
                devices: Some(infos),
            },
        );
        device.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        device
    }

    fn info(kind: DeviceType, health: bool, resources: &[(&str, &str)]) -> DeviceInfo {
        DeviceInfo {
            type_: Some(kind),
            health,
            resources: Some(
                resources
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), q(v)))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn gpu(memory: &str) -> DeviceInfo {
        info(
            DeviceType::Gpu,
            true,
            &[
                (RESOURCE_GPU_CORE, "100"),
                (RESOURCE_GPU_MEMORY, memory),
                (RESOURCE_GPU_MEMORY_RATIO, "100"),
            ],
        )
    }

    #[test]
    fn both_plugins_merge_and_settle() {
        let device = device_with(
            vec![
                gpu("8000"),
                gpu("10000"),
                info(DeviceType::Rdma, true, &[]),
                info(DeviceType::Rdma, false, &[]),
            ],
            &[(LABEL_GPU_VENDOR, "nvidia"), (LABEL_GPU_MODEL, "A100")],
        );
        let bare = node(&[], &[("cpu", "100")]);
        let plan = plan_devices(&bare, Some(&device), NodeResourcePlugins::ALL, true, false);
        let status = plan.status();
        assert_eq!(status[RESOURCE_GPU], Some(q("200")));
        assert_eq!(status[RESOURCE_GPU_MEMORY], Some(q("18k")));
        assert_eq!(status[RESOURCE_RDMA], Some(q("100")));
        let current = bare.status.clone().unwrap().allocatable.unwrap();
        assert_eq!(
            need_sync(&plan, &current, 0.1),
            Some(gpudeviceresource::NEED_SYNC_FOR_RESOURCE_DIFF)
        );
        let (labels, reason) = label_changes(&bare, &plan);
        assert_eq!(labels.len(), 2);
        assert_eq!(
            reason,
            "gpu device label node.koordinator.sh/gpu-vendor changed"
        );

        // Applied, nothing more is due.
        let mut applied = bare.clone();
        let mut list = current.clone();
        prepare(&mut list, &status);
        applied.status.as_mut().unwrap().allocatable = Some(list.clone());
        applied.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        );
        assert_eq!(need_sync(&plan, &list, 0.1), None);
        assert_eq!(label_changes(&applied, &plan).0, BTreeMap::new());

        // Only the RDMA count moves: RDMA's message.
        let mut rdma_moved = list.clone();
        rdma_moved.insert(RESOURCE_RDMA.to_owned(), q("200"));
        assert_eq!(
            need_sync(&plan, &rdma_moved, 0.1),
            Some(rdmadeviceresource::NEED_SYNC_FOR_RESOURCE_DIFF)
        );
        // A move within the threshold is not due (upstream waits for the
        // periodic write).
        let mut within = list;
        within.insert(RESOURCE_GPU_MEMORY.to_owned(), q("17000"));
        assert_eq!(need_sync(&plan, &within, 0.1), None);
    }

    #[test]
    fn colocation_off_selection_and_failures() {
        let device = device_with(vec![gpu("8Gi")], &[(LABEL_GPU_DRIVER_VERSION, "480")]);
        let bare = node(&[], &[("cpu", "1")]);
        let off = plan_devices(&bare, Some(&device), NodeResourcePlugins::ALL, false, false);
        assert_eq!(off.skipped.as_deref(), Some(SKIPPED_COLOCATION_OFF));
        assert!(off.status().is_empty() && off.labels().is_empty());

        let none = NodeResourcePlugins::from_flag(Some(&["BatchResource".to_owned()]));
        assert_eq!(
            plan_devices(&bare, Some(&device), none, true, false),
            DevicePlan::default()
        );

        let only_rdma = NodeResourcePlugins::from_flag(Some(&["RDMADeviceResource".to_owned()]));
        let plan = plan_devices(&bare, Some(&device), only_rdma, true, false);
        assert_eq!(
            plan.status(),
            BTreeMap::from([(RESOURCE_RDMA, None)]),
            "no healthy RDMA device: reset"
        );
        assert!(plan.labels().is_empty());

        // A node without allocatable: both plugins fail, nothing is written.
        let mut empty = bare.clone();
        empty.status = None;
        let plan = plan_devices(&empty, Some(&device), NodeResourcePlugins::ALL, true, false);
        assert!(plan.status().is_empty());
        assert_eq!(plan.errors().len(), 2);
        assert!(plan.reason().contains("missing essential arguments"));
    }
}
