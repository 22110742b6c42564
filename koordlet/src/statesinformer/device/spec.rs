//! The pure core: a [`DeviceSnapshot`] becomes the Device's devices and
//! labels, in upstream's shape:
//!
//! - GPU: `type: gpu`, `id` = NVML UUID, `minor`, `health`, resources
//!   `koordinator.sh/gpu-core: 100`, `koordinator.sh/gpu-memory: <bytes>`
//!   (binary SI), `koordinator.sh/gpu-memory-ratio: 100`, topology
//!   `{socketID: -1, nodeID, pcieID, busID}` when the PCI topology is known,
//!   and a `Healthy=False` condition only when unhealthy (upstream attaches
//!   conditions only to devices with a health status to tell).
//! - RDMA: `type: rdma`, `id` = PF PCI address, `minor` from `mlx<N>_<minor>`,
//!   `health` = every port ACTIVE, resources `koordinator.sh/rdma: 100`,
//!   topology as above, and one VF group `{vfs: [{minor: -1, busID}]}` when
//!   SR-IOV is configured.
//! - Labels when GPUs are present: `node.koordinator.sh/gpu-vendor: nvidia`,
//!   `gpu-model` (NVML name without `NVIDIA `, spaces as `-`, only when all
//!   GPUs agree) and `gpu-driver-version`.
//!
//! Devices are sorted by type, then minor, as upstream sorts them.

use std::collections::BTreeMap;

use apis::extension::{
    GPU_VENDOR_NVIDIA, LABEL_GPU_DRIVER_VERSION, LABEL_GPU_MODEL, LABEL_GPU_VENDOR, QuantityValue,
    RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO, RESOURCE_RDMA,
};
use apis::scheduling::v1alpha1::{
    Device, DeviceConditionType, DeviceInfo, DeviceSpec, DeviceTopology, DeviceType,
    VirtualFunction, VirtualFunctionGroup,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};

use super::{DeviceHealth, DeviceSnapshot, GpuInfo, PciTopology, RdmaNic};

/// Whole-device amounts upstream gives each GPU and RDMA NIC.
pub const FULL_DEVICE_PERCENT: i64 = 100;
/// Upstream leaves the socket unknown.
pub const UNKNOWN_SOCKET: i32 = -1;
/// Upstream's VF minor: VFs have no device node of their own.
pub const VF_MINOR: i32 = -1;
/// The labels this reporter owns on the Device; others are left alone.
pub const MANAGED_LABELS: [&str; 3] = [LABEL_GPU_VENDOR, LABEL_GPU_MODEL, LABEL_GPU_DRIVER_VERSION];

/// What the Device should say.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredDevice {
    /// Sorted by type, then minor.
    pub devices: Vec<DeviceInfo>,
    /// Values of [`MANAGED_LABELS`]; a missing key is removed.
    pub labels: BTreeMap<String, String>,
    /// Inputs skipped while building, one sentence each.
    pub problems: Vec<String>,
}

fn quantity_of(value: i64) -> Quantity {
    Quantity(value.to_string())
}

fn topology_of(topology: Option<&PciTopology>, bus_id: &str) -> Option<DeviceTopology> {
    // Upstream leaves the topology out unless NUMA node, root and bus are all known.
    let topology = topology?;
    if topology.node_id < 0 || topology.pcie_id.is_empty() || bus_id.is_empty() {
        return None;
    }
    Some(DeviceTopology {
        socket_id: UNKNOWN_SOCKET,
        node_id: topology.node_id,
        pcie_id: topology.pcie_id.clone(),
        bus_id: Some(bus_id.to_string()),
    })
}

/// A `reason` the API server accepts (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`).
fn condition_reason(code: &str) -> String {
    let cleaned: String = code
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(128)
        .collect();
    if cleaned.starts_with(|c: char| c.is_ascii_alphabetic()) {
        cleaned
    } else {
        "Unknown".to_string()
    }
}

/// The Device entry of one GPU. Fails only when its memory size does not
/// fit a quantity.
pub fn gpu_device_info(gpu: &GpuInfo, now: &Time) -> Result<DeviceInfo, String> {
    let memory = i64::try_from(gpu.memory_total_bytes).map_err(|_| {
        format!(
            "GPU {}: memory size {} is out of range",
            gpu.uuid, gpu.memory_total_bytes
        )
    })?;
    let resources = BTreeMap::from([
        (
            RESOURCE_GPU_CORE.to_string(),
            quantity_of(FULL_DEVICE_PERCENT),
        ),
        (
            RESOURCE_GPU_MEMORY.to_string(),
            Quantity(QuantityValue::from_units(memory).to_binary_si()),
        ),
        (
            RESOURCE_GPU_MEMORY_RATIO.to_string(),
            quantity_of(FULL_DEVICE_PERCENT),
        ),
    ]);
    let conditions = match &gpu.health {
        DeviceHealth::Healthy => None,
        DeviceHealth::Unhealthy { code, message } => Some(vec![Condition {
            type_: DeviceConditionType::Healthy.as_str().to_string(),
            status: "False".to_string(),
            reason: condition_reason(code),
            message: crate::bounds::truncate(message, 1024).into_owned(),
            last_transition_time: now.clone(),
            observed_generation: None,
        }]),
    };
    Ok(DeviceInfo {
        type_: Some(DeviceType::Gpu),
        uuid: Some(gpu.uuid.clone()),
        minor: Some(gpu.minor),
        health: gpu.health.is_healthy(),
        resources: Some(resources),
        topology: topology_of(gpu.topology.as_ref(), &gpu.bus_id),
        conditions,
        ..DeviceInfo::default()
    })
}

/// The Device entry of one RDMA NIC.
pub fn rdma_device_info(nic: &RdmaNic) -> DeviceInfo {
    let vf_groups = nic.vfs.as_ref().map(|vfs| {
        let mut vfs: Vec<VirtualFunction> = vfs
            .iter()
            .map(|bus_id| VirtualFunction {
                minor: VF_MINOR,
                bus_id: Some(bus_id.clone()),
            })
            .collect();
        // Upstream sorts the VFs by bus id.
        vfs.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
        vec![VirtualFunctionGroup {
            labels: None,
            vfs: Some(vfs),
        }]
    });
    DeviceInfo {
        type_: Some(DeviceType::Rdma),
        uuid: Some(nic.bus_id.clone()),
        minor: Some(nic.minor),
        health: nic.healthy,
        resources: Some(BTreeMap::from([(
            RESOURCE_RDMA.to_string(),
            quantity_of(FULL_DEVICE_PERCENT),
        )])),
        topology: topology_of(nic.topology.as_ref(), &nic.bus_id),
        vf_groups,
        ..DeviceInfo::default()
    }
}

/// Whether `value` is a valid label value (at most 63 characters of
/// `[A-Za-z0-9._-]`, alphanumeric at both ends).
pub fn is_label_value(value: &str) -> bool {
    value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The `gpu-model` label value: the common NVML name without `NVIDIA `,
/// spaces as `-` (`NVIDIA A100-SXM4-80GB` → `A100-SXM4-80GB`, `Tesla T4` →
/// `Tesla-T4`). `None` when the GPUs disagree or a name is empty.
pub fn gpu_model_label(models: &[&str]) -> Option<String> {
    let first = *models.first()?;
    if first.is_empty() || models.iter().any(|model| *model != first) {
        return None;
    }
    let model = first.strip_prefix("NVIDIA ").unwrap_or(first);
    Some(model.replace(' ', "-"))
}

/// The Device content for `snapshot`; `now` stamps new conditions.
pub fn build_desired_device(snapshot: &DeviceSnapshot, now: &Time) -> DesiredDevice {
    let mut problems = Vec::new();
    let mut devices = Vec::new();
    for gpu in &snapshot.gpus {
        match gpu_device_info(gpu, now) {
            Ok(info) => devices.push(info),
            Err(problem) => problems.push(problem),
        }
    }
    devices.extend(snapshot.rdma.iter().map(rdma_device_info));
    sort_devices(&mut devices);

    let mut labels = BTreeMap::new();
    if !snapshot.gpus.is_empty() {
        labels.insert(LABEL_GPU_VENDOR.to_string(), GPU_VENDOR_NVIDIA.to_string());
        let models: Vec<&str> = snapshot.gpus.iter().map(|gpu| gpu.model.as_str()).collect();
        match gpu_model_label(&models) {
            Some(model) if is_label_value(&model) => {
                labels.insert(LABEL_GPU_MODEL.to_string(), model);
            }
            Some(model) => problems.push(format!(
                "GPU model {:?} is not a valid label value; {LABEL_GPU_MODEL} left out",
                crate::bounds::for_log(&model)
            )),
            None => problems.push(format!(
                "GPU models differ or are unknown ({}); {LABEL_GPU_MODEL} left out",
                crate::bounds::for_log(&models.join(", "))
            )),
        }
        match snapshot.gpu_driver_version.as_deref() {
            Some(version) if is_label_value(version) => {
                labels.insert(LABEL_GPU_DRIVER_VERSION.to_string(), version.to_string());
            }
            Some(version) => problems.push(format!(
                "driver version {:?} is not a valid label value; {LABEL_GPU_DRIVER_VERSION} left out",
                crate::bounds::for_log(version)
            )),
            None => {}
        }
    }
    DesiredDevice {
        devices,
        labels,
        problems,
    }
}

fn type_name(info: &DeviceInfo) -> &str {
    info.type_.as_ref().map_or("", DeviceType::as_str)
}

/// Upstream's order: by type name, then minor.
pub fn sort_devices(devices: &mut [DeviceInfo]) {
    devices.sort_by(|a, b| {
        type_name(a).cmp(type_name(b)).then(
            a.minor
                .unwrap_or(i32::MIN)
                .cmp(&b.minor.unwrap_or(i32::MIN)),
        )
    });
    for device in devices.iter_mut() {
        if let Some(conditions) = device.conditions.as_mut() {
            conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
        }
    }
}

/// The devices with condition times cleared, for comparisons that must not
/// see a new timestamp as a change.
fn without_times(devices: &[DeviceInfo]) -> Vec<DeviceInfo> {
    let epoch = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let mut devices = devices.to_vec();
    sort_devices(&mut devices);
    for device in &mut devices {
        for condition in device.conditions.iter_mut().flatten() {
            condition.last_transition_time = epoch.clone();
        }
    }
    devices
}

fn device_key(info: &DeviceInfo) -> (String, String) {
    (
        type_name(info).to_string(),
        info.uuid.clone().unwrap_or_default(),
    )
}

impl DesiredDevice {
    /// Whether there is anything to report.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// Same devices and labels, condition times aside.
    pub fn same_content(&self, other: &DesiredDevice) -> bool {
        self.labels == other.labels && without_times(&self.devices) == without_times(&other.devices)
    }

    /// The devices with each condition's `lastTransitionTime` taken from
    /// `existing` when the same device already had that condition with the
    /// same status (upstream's rule).
    pub fn devices_after(&self, existing: Option<&Device>) -> Vec<DeviceInfo> {
        let old: BTreeMap<(String, String), &DeviceInfo> = existing
            .and_then(|device| device.spec.devices.as_ref())
            .into_iter()
            .flatten()
            .map(|info| (device_key(info), info))
            .collect();
        let mut devices = self.devices.clone();
        for device in &mut devices {
            let Some(previous) = old.get(&device_key(device)) else {
                continue;
            };
            for condition in device.conditions.iter_mut().flatten() {
                if let Some(before) = previous.conditions.iter().flatten().find(|before| {
                    before.type_ == condition.type_ && before.status == condition.status
                }) {
                    condition.last_transition_time = before.last_transition_time.clone();
                }
            }
        }
        devices
    }

    /// Why `existing` must be replaced, or `None` when it already says this.
    pub fn change_reason(&self, existing: &Device) -> Option<String> {
        let stored = existing.spec.devices.clone().unwrap_or_default();
        let wanted = without_times(&self.devices);
        let stored = without_times(&stored);
        if wanted != stored {
            let ids = |devices: &[DeviceInfo]| -> Vec<String> {
                devices
                    .iter()
                    .map(|d| format!("{}/{}", type_name(d), d.uuid.as_deref().unwrap_or("")))
                    .collect()
            };
            let (before, after) = (ids(&stored), ids(&wanted));
            return Some(if before != after {
                format!(
                    "devices changed from [{}] to [{}]",
                    before.join(", "),
                    after.join(", ")
                )
            } else {
                "device health, resources or topology changed".to_string()
            });
        }
        let labels = existing.metadata.labels.clone().unwrap_or_default();
        for key in MANAGED_LABELS {
            if labels.get(key) != self.labels.get(key) {
                return Some(format!("label {key} changed"));
            }
        }
        None
    }

    /// Writes the devices and the managed labels into `existing`, keeping
    /// its other labels, its annotations and its status.
    pub fn apply_to(&self, existing: &mut Device) {
        let devices = self.devices_after(Some(existing));
        existing.spec.devices = Some(devices);
        let labels = existing.metadata.labels.get_or_insert_with(BTreeMap::new);
        for key in MANAGED_LABELS {
            labels.remove(key);
        }
        labels.extend(self.labels.clone());
        if labels.is_empty() {
            existing.metadata.labels = None;
        }
    }

    /// A new Device named after the node and owned by it (upstream sets
    /// `controller` and `blockOwnerDeletion`, so it goes with the Node).
    pub fn new_object(&self, node: &Node) -> Device {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut device = Device::new(
            &name,
            DeviceSpec {
                devices: Some(self.devices.clone()),
            },
        );
        device.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".to_string(),
            kind: "Node".to_string(),
            name,
            uid: node.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        if !self.labels.is_empty() {
            device.metadata.labels = Some(self.labels.clone());
        }
        device
    }
}
