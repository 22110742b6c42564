//! Device sharing (GPU, RDMA, FPGA, NPU): resource names, node labels, and
//! the allocation, hint, joint-allocation and GPU partition annotations.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};

use super::annotations::{
    StringMap, empty_as_none, is_zero_i32, null_as_default, parse_json_annotation,
    parse_json_annotation_non_empty, set_json_annotation,
};
use super::error::ExtensionError;
use super::resource::ResourceList;
use crate::wire_enum::wire_enum;

/// Pod annotation: the devices the scheduler allocated ([`DeviceAllocations`]).
pub const ANNOTATION_DEVICE_ALLOCATED: &str = "scheduling.koordinator.sh/device-allocated";
/// Pod annotation: how to pick devices ([`DeviceAllocateHints`]).
pub const ANNOTATION_DEVICE_ALLOCATE_HINT: &str = "scheduling.koordinator.sh/device-allocate-hint";
/// Pod annotation: device types to allocate together ([`DeviceJointAllocate`]).
pub const ANNOTATION_DEVICE_JOINT_ALLOCATE: &str =
    "scheduling.koordinator.sh/device-joint-allocate";
/// Pod annotation: the GPU partition the pod asks for ([`GPUPartitionSpec`]).
pub const ANNOTATION_GPU_PARTITION_SPEC: &str = "scheduling.koordinator.sh/gpu-partition-spec";
/// Device annotation: the GPU partitions the node supports ([`GPUPartitionTable`]).
pub const ANNOTATION_GPU_PARTITIONS: &str = "scheduling.koordinator.sh/gpu-partitions";

/// One NVIDIA GPU; counted as 100 gpu-core + 100 gpu-memory-ratio.
pub const RESOURCE_NVIDIA_GPU: &str = "nvidia.com/gpu";
/// One Hygon DCU, counted like a whole GPU.
pub const RESOURCE_HYGON_DCU: &str = "dcu.com/gpu";
/// One AMD GPU, counted like a whole GPU.
pub const RESOURCE_AMD_GPU: &str = "amd.com/gpu";
pub const RESOURCE_RDMA: &str = "koordinator.sh/rdma";
pub const RESOURCE_FPGA: &str = "koordinator.sh/fpga";
/// GPU share in percent (100 = one GPU), expanded to gpu-core and gpu-memory-ratio.
pub const RESOURCE_GPU: &str = "koordinator.sh/gpu";
/// The number of GPUs a pod shares.
pub const RESOURCE_GPU_SHARED: &str = "koordinator.sh/gpu.shared";
/// GPU compute in percent of one GPU.
pub const RESOURCE_GPU_CORE: &str = "koordinator.sh/gpu-core";
/// GPU memory in bytes.
pub const RESOURCE_GPU_MEMORY: &str = "koordinator.sh/gpu-memory";
/// GPU memory in percent of one GPU.
pub const RESOURCE_GPU_MEMORY_RATIO: &str = "koordinator.sh/gpu-memory-ratio";
pub const RESOURCE_HUAWEI_NPU_CORE: &str = "huawei.com/npu-core";
pub const RESOURCE_HUAWEI_NPU_CPU: &str = "huawei.com/npu-cpu";
pub const RESOURCE_HUAWEI_NPU_DVPP: &str = "huawei.com/npu-dvpp";

/// Node/Device label: [`GPUPartitionPolicy`].
pub const LABEL_GPU_PARTITION_POLICY: &str = "node.koordinator.sh/gpu-partition-policy";
pub const LABEL_GPU_VENDOR: &str = "node.koordinator.sh/gpu-vendor";
pub const LABEL_GPU_MODEL: &str = "node.koordinator.sh/gpu-model";
pub const LABEL_GPU_DRIVER_VERSION: &str = "node.koordinator.sh/gpu-driver-version";
/// Device label: `true`/`false`, whether secondary devices (RDMA, ...) are
/// laid out so joint allocation can rely on them.
pub const LABEL_SECONDARY_DEVICE_WELL_PLANNED: &str =
    "node.koordinator.sh/secondary-device-well-planned";
/// Pod label: [`GPUIsolationProvider`].
pub const LABEL_GPU_ISOLATION_PROVIDER: &str = "koordinator.sh/gpu-isolation-provider";
pub const LABEL_HAMI_VGPU_NODE: &str = "hami.io/vgpu-node";

pub const GPU_VENDOR_NVIDIA: &str = "nvidia";
pub const GPU_VENDOR_HUAWEI: &str = "huawei";
pub const GPU_VENDOR_CAMBRICON: &str = "cambricon";
pub const GPU_VENDOR_METAX: &str = "metax";
pub const GPU_VENDOR_BAIDU: &str = "baidu";

/// Device type keys (upstream `schedulingv1alpha1.DeviceType`). The maps
/// below key by plain strings so a type this build does not know survives a
/// read-modify-write.
pub const DEVICE_TYPE_GPU: &str = "gpu";
pub const DEVICE_TYPE_FPGA: &str = "fpga";
pub const DEVICE_TYPE_RDMA: &str = "rdma";

/// Value of `scheduling.koordinator.sh/device-allocated`: device type → devices.
pub type DeviceAllocations = BTreeMap<String, Vec<DeviceAllocation>>;

/// One allocated device (or a share of it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceAllocation {
    pub minor: i32,
    /// Always written (upstream has no `omitempty` here).
    #[serde(default, deserialize_with = "null_as_default")]
    pub resources: ResourceList,
    /// Stable device identifier, for devices where the minor is meaningless (RDMA).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension: Option<DeviceAllocationExtension>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAllocationExtension {
    #[serde(
        rename = "vfs",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub virtual_functions: Vec<VirtualFunction>,
    #[serde(
        rename = "gpuSharedResourceTemplate",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub gpu_shared_resource_template: String,
}

/// An SR-IOV virtual function of an allocated device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VirtualFunction {
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub minor: i32,
    #[serde(rename = "busID", default, skip_serializing_if = "String::is_empty")]
    pub bus_id: String,
}

/// Value of `scheduling.koordinator.sh/device-joint-allocate`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceJointAllocate {
    /// Device types allocated together, by topology.
    #[serde(
        rename = "deviceTypes",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub device_types: Vec<String>,
    /// The scope the joint allocation must stay within.
    #[serde(
        rename = "requiredScope",
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub required_scope: Option<DeviceJointAllocateScope>,
}

wire_enum! {
    pub enum DeviceJointAllocateScope closed {
        SamePCIe = "SamePCIe",
    }
}

/// Value of `scheduling.koordinator.sh/device-allocate-hint`: device type → hint.
pub type DeviceAllocateHints = BTreeMap<String, DeviceHint>;

/// How to choose devices of one type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceHint {
    /// Only devices whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Allocate VFs from PFs whose VFs match.
    #[serde(
        rename = "vfSelector",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub vf_selector: Option<LabelSelector>,
    #[serde(
        rename = "allocateStrategy",
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub allocate_strategy: Option<DeviceAllocateStrategy>,
    #[serde(
        rename = "requiredTopologyScope",
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub required_topology_scope: Option<DeviceTopologyScope>,
    #[serde(
        rename = "exclusivePolicy",
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub exclusive_policy: Option<DeviceExclusivePolicy>,
}

wire_enum! {
    pub enum DeviceAllocateStrategy closed {
        /// The hint applies to every device of the type.
        ApplyForAll = "ApplyForAll",
        /// The request is a device count.
        RequestsAsCount = "RequestsAsCount",
    }
}

wire_enum! {
    pub enum DeviceTopologyScope closed {
        Device = "Device",
        PCIe = "PCIe",
        NUMANode = "NUMANode",
        Node = "Node",
    }
}

impl DeviceTopologyScope {
    /// Narrower scopes have higher levels (Device 4 … Node 1).
    pub fn level(self) -> i32 {
        match self {
            DeviceTopologyScope::Device => 4,
            DeviceTopologyScope::PCIe => 3,
            DeviceTopologyScope::NUMANode => 2,
            DeviceTopologyScope::Node => 1,
        }
    }
}

wire_enum! {
    pub enum DeviceExclusivePolicy closed {
        /// No other pod on the same device.
        DeviceLevel = "DeviceLevel",
        /// No other pod on the same PCIe switch.
        PCIExpressLevel = "PCIeLevel",
    }
}

/// Value of `scheduling.koordinator.sh/gpu-partition-spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GPUPartitionSpec {
    #[serde(
        rename = "allocatePolicy",
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub allocate_policy: Option<GPUPartitionAllocatePolicy>,
    #[serde(
        rename = "ringBusBandwidth",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ring_bus_bandwidth: Option<Quantity>,
}

wire_enum! {
    pub enum GPUPartitionAllocatePolicy closed {
        /// Only partitions with the best allocation score.
        Restricted = "Restricted",
        /// Prefer partitions with a better allocation score.
        BestEffort = "BestEffort",
    }
}

wire_enum! {
    /// Open as upstream's Go string: device-info files name other links
    /// (Huawei's `HCCS`), which koordlet passes through to the table.
    pub enum GPULinkType open {
        NVLink = "NVLink",
    }
}

/// One GPU partition a node supports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GPUPartition {
    #[serde(default, deserialize_with = "null_as_default")]
    pub minors: Vec<i32>,
    #[serde(
        rename = "gpuLinkType",
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub gpu_link_type: Option<GPULinkType>,
    #[serde(
        rename = "ringBusBandwidth",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ring_bus_bandwidth: Option<Quantity>,
    #[serde(
        rename = "allocationScore",
        default,
        skip_serializing_if = "is_zero_i32"
    )]
    pub allocation_score: i32,
}

/// Value of `scheduling.koordinator.sh/gpu-partitions`: GPU count → partitions.
pub type GPUPartitionTable = BTreeMap<i32, Vec<GPUPartition>>;

wire_enum! {
    /// Whether the partitions on the Device are binding.
    pub enum GPUPartitionPolicy closed {
        Honor = "Honor",
        Prefer = "Prefer",
    }
}

wire_enum! {
    pub enum GPUIsolationProvider closed {
        HAMiCore = "HAMi-core",
    }
}

/// Named resource templates for shared GPUs.
pub type GPUSharedResourceTemplates = BTreeMap<String, ResourceList>;

pub fn get_device_allocations(
    annotations: &StringMap,
) -> Result<Option<DeviceAllocations>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_DEVICE_ALLOCATED)
}

pub fn set_device_allocations(
    annotations: &mut StringMap,
    allocations: &DeviceAllocations,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_DEVICE_ALLOCATED, allocations)
}

pub fn get_device_allocate_hints(
    annotations: &StringMap,
) -> Result<Option<DeviceAllocateHints>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_DEVICE_ALLOCATE_HINT)
}

pub fn set_device_allocate_hints(
    annotations: &mut StringMap,
    hints: &DeviceAllocateHints,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_DEVICE_ALLOCATE_HINT, hints)
}

pub fn get_device_joint_allocate(
    annotations: &StringMap,
) -> Result<Option<DeviceJointAllocate>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_DEVICE_JOINT_ALLOCATE)
}

pub fn set_device_joint_allocate(
    annotations: &mut StringMap,
    joint_allocate: &DeviceJointAllocate,
) -> Result<(), ExtensionError> {
    set_json_annotation(
        annotations,
        ANNOTATION_DEVICE_JOINT_ALLOCATE,
        joint_allocate,
    )
}

/// The pod's GPU partition request; an unset allocate policy reads as
/// best-effort, as upstream fills it in.
pub fn get_gpu_partition_spec(
    annotations: &StringMap,
) -> Result<Option<GPUPartitionSpec>, ExtensionError> {
    let spec: Option<GPUPartitionSpec> =
        parse_json_annotation(annotations, ANNOTATION_GPU_PARTITION_SPEC)?;
    Ok(spec.map(|mut spec| {
        spec.allocate_policy
            .get_or_insert(GPUPartitionAllocatePolicy::BestEffort);
        spec
    }))
}

pub fn set_gpu_partition_spec(
    annotations: &mut StringMap,
    spec: &GPUPartitionSpec,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_GPU_PARTITION_SPEC, spec)
}

/// The partition table of a Device; absent or empty → `Ok(None)`, JSON
/// `null` → error (upstream rejects it as invalid).
pub fn get_gpu_partition_table(
    device_annotations: &StringMap,
) -> Result<Option<GPUPartitionTable>, ExtensionError> {
    let table: Option<Option<GPUPartitionTable>> =
        parse_json_annotation_non_empty(device_annotations, ANNOTATION_GPU_PARTITIONS)?;
    match table {
        None => Ok(None),
        Some(Some(table)) => Ok(Some(table)),
        Some(None) => Err(ExtensionError::invalid_value(
            ANNOTATION_GPU_PARTITIONS,
            "null",
            "the partition table is null",
        )),
    }
}

pub fn set_gpu_partition_table(
    device_annotations: &mut StringMap,
    table: &GPUPartitionTable,
) -> Result<(), ExtensionError> {
    set_json_annotation(device_annotations, ANNOTATION_GPU_PARTITIONS, table)
}

/// `Honor` only when the node/Device label says so; anything else is `Prefer`.
pub fn gpu_partition_policy(labels: &StringMap) -> GPUPartitionPolicy {
    match labels.get(LABEL_GPU_PARTITION_POLICY).map(String::as_str) {
        Some("Honor") => GPUPartitionPolicy::Honor,
        _ => GPUPartitionPolicy::Prefer,
    }
}

/// The Device is labelled `secondary-device-well-planned=true`.
pub fn is_secondary_device_well_planned(device_labels: &StringMap) -> bool {
    device_labels
        .get(LABEL_SECONDARY_DEVICE_WELL_PLANNED)
        .is_some_and(|v| v == "true")
}

/// The Device is explicitly labelled `secondary-device-well-planned=false`
/// (absent is neither planned nor not-planned).
pub fn is_secondary_device_not_well_planned(device_labels: &StringMap) -> bool {
    device_labels
        .get(LABEL_SECONDARY_DEVICE_WELL_PLANNED)
        .is_some_and(|v| v == "false")
}
