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
//! - XPU devices (device-info files), when there are any, replace NVML's
//!   GPUs, as upstream: `type: gpu`, `id` = uuid, the file's minor and
//!   resources (`gpu-memory-ratio: 100` unless given; bare `gpu-core` and
//!   `gpu-memory` get the `koordinator.sh/` domain), topology
//!   `{socketID: -1, nodeID (-1 when not given), pcieID, busID}`, and a
//!   `Healthy` condition whenever the file gives a status. Labels: the first
//!   device's `gpu-vendor` and `gpu-model`, and `gpu-partition-policy`
//!   (`Honor` when it `mustHonorPartition`, else `Prefer`) when it lists
//!   peer links. The peer links become the `gpu-partitions` annotation:
//!   each link's peers plus the device form one partition (deduplicated,
//!   allocation score 1), keyed by its GPU count.
//!
//! Devices are sorted by type, then minor, as upstream sorts them.

use std::collections::BTreeMap;

use apis::extension::{
    ANNOTATION_GPU_PARTITIONS, GPU_VENDOR_NVIDIA, GPULinkType, GPUPartition, GPUPartitionPolicy,
    GPUPartitionTable, LABEL_GPU_DRIVER_VERSION, LABEL_GPU_MODEL, LABEL_GPU_PARTITION_POLICY,
    LABEL_GPU_VENDOR, QuantityValue, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO, RESOURCE_RDMA,
};
use apis::scheduling::v1alpha1::{
    Device, DeviceConditionType, DeviceInfo, DeviceSpec, DeviceTopology, DeviceType,
    VirtualFunction, VirtualFunctionGroup,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};

use super::xpuinfo::XpuDeviceInfo;
use super::{DeviceHealth, DeviceSnapshot, GpuInfo, PciTopology, RdmaNic};

/// Whole-device amounts upstream gives each GPU and RDMA NIC.
pub const FULL_DEVICE_PERCENT: i64 = 100;
/// Upstream leaves the socket unknown.
pub const UNKNOWN_SOCKET: i32 = -1;
/// Upstream's VF minor: VFs have no device node of their own.
pub const VF_MINOR: i32 = -1;
/// The labels this reporter owns on the Device; others are left alone.
pub const MANAGED_LABELS: [&str; 4] = [
    LABEL_GPU_VENDOR,
    LABEL_GPU_MODEL,
    LABEL_GPU_DRIVER_VERSION,
    LABEL_GPU_PARTITION_POLICY,
];
/// The annotations this reporter owns on the Device; others are left alone.
pub const MANAGED_ANNOTATIONS: [&str; 1] = [ANNOTATION_GPU_PARTITIONS];
/// The longest device id accepted from a device-info file.
pub const MAX_DEVICE_ID_LEN: usize = 256;
/// The largest minor accepted from a device-info file (the scheduler keeps
/// partition minors in a 128-bit set).
pub const MAX_XPU_MINOR: i32 = 127;

/// What the Device should say.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredDevice {
    /// Sorted by type, then minor.
    pub devices: Vec<DeviceInfo>,
    /// Values of [`MANAGED_LABELS`]; a missing key is removed.
    pub labels: BTreeMap<String, String>,
    /// Values of [`MANAGED_ANNOTATIONS`]; a missing key is removed.
    pub annotations: BTreeMap<String, String>,
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
    let memory = i64::try_from(gpu.memory_total.0).map_err(|_| {
        format!(
            "GPU {}: memory size {} is out of range",
            gpu.uuid, gpu.memory_total.0
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
    let mut labels = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    let from_device_infos = !snapshot.xpus.is_empty();
    if from_device_infos {
        devices.extend(xpu_device_infos(&snapshot.xpus, now, &mut problems));
        labels = xpu_labels(&snapshot.xpus, &mut problems);
        let table = gpu_partition_table(&snapshot.xpus, &mut problems);
        if !table.is_empty() {
            match serde_json::to_string(&table) {
                Ok(text) => {
                    annotations.insert(ANNOTATION_GPU_PARTITIONS.to_string(), text);
                }
                Err(err) => problems.push(format!("GPU partition table not encoded: {err}")),
            }
        }
        if !snapshot.gpus.is_empty() {
            problems.push(format!(
                "{} NVML GPUs not reported: the XPU device-info files describe the GPUs",
                snapshot.gpus.len()
            ));
        }
    } else {
        for gpu in &snapshot.gpus {
            match gpu_device_info(gpu, now) {
                Ok(info) => devices.push(info),
                Err(problem) => problems.push(problem),
            }
        }
    }
    devices.extend(snapshot.rdma.iter().map(rdma_device_info));
    sort_devices(&mut devices);

    if !from_device_infos && !snapshot.gpus.is_empty() {
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
        annotations,
        problems,
    }
}

/// Whether `name` is a resource name the API server accepts: an optional
/// DNS-subdomain prefix and `/`, then a name of at most 63 characters of
/// `[A-Za-z0-9._-]`.
pub fn is_resource_name(name: &str) -> bool {
    let (prefix, base) = match name.split_once('/') {
        Some((prefix, base)) => (Some(prefix), base),
        None => (None, name),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    });
    prefix_ok && !base.is_empty() && is_label_value(base)
}

/// The canonical text of a quantity from a device-info file, as Kubernetes
/// re-prints a parsed quantity (binary suffixes stay binary: `32Gi`).
fn canonical_quantity(text: &str) -> Result<Quantity, String> {
    let value = QuantityValue::parse(text).map_err(|err| err.to_string())?;
    if value.is_negative() {
        return Err(format!("{text:?} is negative"));
    }
    let binary = text.trim_end().ends_with('i');
    Ok(Quantity(if binary {
        value.to_binary_si()
    } else {
        value.to_decimal_si()
    }))
}

/// A device-info minor: a decimal number in `0..=MAX_XPU_MINOR`.
fn xpu_minor(text: &str) -> Option<i32> {
    text.parse::<i32>()
        .ok()
        .filter(|minor| (0..=MAX_XPU_MINOR).contains(minor))
}

/// The Device entry of one XPU device; `None` (with the reason in
/// `problems`) when its minor or id is unusable. Resources that are not
/// valid names or quantities are left out, each with a problem.
pub fn xpu_device_info(
    xpu: &XpuDeviceInfo,
    now: &Time,
    problems: &mut Vec<String>,
) -> Option<DeviceInfo> {
    let uuid = crate::bounds::for_log(&xpu.uuid);
    let Some(minor) = xpu_minor(&xpu.minor) else {
        problems.push(format!(
            "XPU device {uuid:?}: minor {:?} is not a number from 0 to {MAX_XPU_MINOR}; device left out",
            crate::bounds::for_log(&xpu.minor)
        ));
        return None;
    };
    if xpu.uuid.len() > MAX_DEVICE_ID_LEN {
        problems.push(format!(
            "XPU device {minor}: uuid longer than {MAX_DEVICE_ID_LEN} characters; device left out"
        ));
        return None;
    }
    let mut resources = BTreeMap::from([(
        RESOURCE_GPU_MEMORY_RATIO.to_string(),
        quantity_of(FULL_DEVICE_PERCENT),
    )]);
    for (name, text) in xpu.resources.iter().flatten() {
        // Upstream's shorthand for the two koordinator GPU resources.
        let name = match name.as_str() {
            "gpu-core" => RESOURCE_GPU_CORE.to_string(),
            "gpu-memory" => RESOURCE_GPU_MEMORY.to_string(),
            other => other.to_string(),
        };
        if !is_resource_name(&name) {
            problems.push(format!(
                "XPU device {minor}: resource name {:?} is not valid; left out",
                crate::bounds::for_log(&name)
            ));
            continue;
        }
        match canonical_quantity(text) {
            Ok(quantity) => {
                resources.insert(name, quantity);
            }
            Err(reason) => problems.push(format!(
                "XPU device {minor}: resource {name}: {}; left out",
                crate::bounds::for_log(&reason)
            )),
        }
    }
    let topology = xpu.topology.as_ref().map(|topology| {
        let node_id = if topology.node_id.is_empty() {
            -1
        } else {
            topology.node_id.parse::<i32>().unwrap_or_else(|_| {
                problems.push(format!(
                    "XPU device {minor}: nodeID {:?} is not a number; NUMA node unknown",
                    crate::bounds::for_log(&topology.node_id)
                ));
                -1
            })
        };
        DeviceTopology {
            socket_id: UNKNOWN_SOCKET,
            node_id,
            pcie_id: topology.pcie_id.clone(),
            bus_id: Some(topology.bus_id.clone()).filter(|id| !id.is_empty()),
        }
    });
    let conditions = xpu.status.as_ref().map(|status| {
        let condition = if status.healthy {
            Condition {
                type_: DeviceConditionType::Healthy.as_str().to_string(),
                status: "True".to_string(),
                reason: "DeviceHealthy".to_string(),
                message: "device is healthy".to_string(),
                last_transition_time: now.clone(),
                observed_generation: None,
            }
        } else {
            let reason = if status.err_code.is_empty() {
                "Unknown".to_string()
            } else {
                condition_reason(&status.err_code)
            };
            let mut message = if status.err_message.is_empty() {
                "device is unhealthy".to_string()
            } else {
                status.err_message.clone()
            };
            // A code the API server would refuse as a reason (`-8001`)
            // is kept in the message instead.
            if !status.err_code.is_empty() && reason != status.err_code {
                message = format!("{message} (error code {})", status.err_code);
            }
            Condition {
                type_: DeviceConditionType::Healthy.as_str().to_string(),
                status: "False".to_string(),
                reason,
                message: crate::bounds::truncate(&message, 1024).into_owned(),
                last_transition_time: now.clone(),
                observed_generation: None,
            }
        };
        vec![condition]
    });
    Some(DeviceInfo {
        type_: Some(DeviceType::Gpu),
        uuid: Some(xpu.uuid.clone()),
        minor: Some(minor),
        health: xpu.status.as_ref().is_none_or(|status| status.healthy),
        resources: Some(resources),
        topology,
        conditions,
        ..DeviceInfo::default()
    })
}

/// The Device entries of the XPU devices; a minor given twice keeps its
/// first device (the scheduler knows GPUs by minor).
pub fn xpu_device_infos(
    xpus: &[XpuDeviceInfo],
    now: &Time,
    problems: &mut Vec<String>,
) -> Vec<DeviceInfo> {
    let mut devices: Vec<DeviceInfo> = Vec::new();
    for xpu in xpus {
        let Some(info) = xpu_device_info(xpu, now, problems) else {
            continue;
        };
        if devices.iter().any(|d| d.minor == info.minor) {
            problems.push(format!(
                "XPU device {:?}: minor {} is already taken; device left out",
                crate::bounds::for_log(&xpu.uuid),
                info.minor.unwrap_or_default()
            ));
            continue;
        }
        devices.push(info);
    }
    devices
}

/// The labels of XPU devices, from the first one as upstream: vendor,
/// model, and the partition policy when it reports peer links. A value that
/// is not a valid label value is left out with a problem.
pub fn xpu_labels(xpus: &[XpuDeviceInfo], problems: &mut Vec<String>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let Some(first) = xpus.first() else {
        return labels;
    };
    for (key, value) in [
        (LABEL_GPU_VENDOR, first.vendor.as_str()),
        (LABEL_GPU_MODEL, first.model.as_str()),
    ] {
        if is_label_value(value) {
            labels.insert(key.to_string(), value.to_string());
        } else {
            problems.push(format!(
                "XPU {value:?} is not a valid label value; {key} left out",
                value = crate::bounds::for_log(value)
            ));
        }
    }
    if let Some(topology) = first.topology.as_ref().filter(|t| t.p2p_links.is_some()) {
        let policy = if topology.must_honor_partition {
            GPUPartitionPolicy::Honor
        } else {
            GPUPartitionPolicy::Prefer
        };
        labels.insert(
            LABEL_GPU_PARTITION_POLICY.to_string(),
            policy.as_str().to_string(),
        );
    }
    labels
}

/// The GPU partition table the XPU peer links describe (upstream's rule):
/// every link's peer minors plus the device's own minor, deduplicated and
/// sorted, is one partition of the link's type with allocation score 1,
/// listed once under its GPU count. Minors that are not numbers are
/// skipped, as are links without peers or type.
pub fn gpu_partition_table(
    xpus: &[XpuDeviceInfo],
    problems: &mut Vec<String>,
) -> GPUPartitionTable {
    let mut table = GPUPartitionTable::new();
    let mut seen: std::collections::BTreeSet<Vec<i32>> = std::collections::BTreeSet::new();
    for xpu in xpus {
        let links = xpu
            .topology
            .iter()
            .flat_map(|t| t.p2p_links.iter().flatten());
        for link in links {
            if link.peer_minor.is_empty() || link.link_type.is_empty() {
                problems.push(format!(
                    "XPU device {}: a peer link without peers or type is skipped",
                    crate::bounds::for_log(&xpu.minor)
                ));
                continue;
            }
            let mut minors = std::collections::BTreeSet::new();
            let own = std::iter::once(xpu.minor.as_str());
            for text in link.peer_minor.split(',').chain(own) {
                match xpu_minor(text) {
                    Some(minor) => {
                        minors.insert(minor);
                    }
                    None => problems.push(format!(
                        "XPU device {}: peer minor {:?} is not a number from 0 to {MAX_XPU_MINOR}; skipped",
                        crate::bounds::for_log(&xpu.minor),
                        crate::bounds::for_log(text)
                    )),
                }
            }
            let minors: Vec<i32> = minors.into_iter().collect();
            if minors.is_empty() || !seen.insert(minors.clone()) {
                continue;
            }
            let count = i32::try_from(minors.len()).unwrap_or(i32::MAX);
            let link_type = match link.link_type.as_str() {
                "NVLink" => GPULinkType::NVLink,
                other => GPULinkType::Other(other.to_string()),
            };
            table.entry(count).or_default().push(GPUPartition {
                minors,
                gpu_link_type: Some(link_type),
                ring_bus_bandwidth: None,
                allocation_score: 1,
            });
        }
    }
    table
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
        self.labels == other.labels
            && self.annotations == other.annotations
            && without_times(&self.devices) == without_times(&other.devices)
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
        let annotations = existing.metadata.annotations.clone().unwrap_or_default();
        for key in MANAGED_ANNOTATIONS {
            if annotations.get(key) != self.annotations.get(key) {
                return Some(format!("annotation {key} changed"));
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
        let annotations = existing
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        for key in MANAGED_ANNOTATIONS {
            annotations.remove(key);
        }
        annotations.extend(self.annotations.clone());
        if annotations.is_empty() {
            existing.metadata.annotations = None;
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
        if !self.annotations.is_empty() {
            device.metadata.annotations = Some(self.annotations.clone());
        }
        device
    }
}
