//! Device: the accelerators and NICs of one node (the object is named after
//! the node) and which pods hold them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hand_built::{CrdDescription, hand_built_resource};
use crate::wire_enum::wire_enum;

/// Device's CRD names. Upstream has a `status` field but no status
/// subresource, which kube-derive cannot express, so the root is hand-built.
pub const DEVICE_CRD: CrdDescription = CrdDescription {
    group: super::GROUP,
    version: super::VERSION,
    kind: "Device",
    plural: "devices",
    singular: "device",
    namespaced: false,
    short_names: &[],
    annotations: &[],
};

hand_built_resource! {
    /// The devices of a node and their current allocations.
    pub struct Device {
        crd: DEVICE_CRD,
        scope: Cluster,
        spec: DeviceSpec,
        status: DeviceStatus,
    }
}

wire_enum! {
    /// Kind of device.
    pub enum DeviceType open {
        Gpu = "gpu",
        Fpga = "fpga",
        Rdma = "rdma",
    }
}

wire_enum! {
    /// Condition types on a device (`metav1.Condition.type`).
    pub enum DeviceConditionType open {
        /// Whether the device works.
        Healthy = "Healthy",
    }
}

/// The devices a node reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<DeviceInfo>>,
}

/// One device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["health"]))]
pub struct DeviceInfo {
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<DeviceType>,
    /// Device attributes (model, vendor, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// The device's UUID.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "id")]
    pub uuid: Option<String>,
    /// Device minor number (e.g. `/dev/nvidia<minor>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<i32>,
    /// Vendor module index (e.g. a Huawei NPU's module).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "moduleID")]
    pub module_id: Option<i32>,
    /// Whether the device is usable (always written).
    #[serde(default)]
    #[schemars(extend("default" = false))]
    pub health: bool,
    /// Resources the device offers (e.g. `koordinator.sh/gpu-core`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::resource_list")]
    pub resources: Option<BTreeMap<String, Quantity>>,
    /// Where the device sits in the node's topology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<DeviceTopology>,
    /// SR-IOV virtual function groups.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "vfGroups")]
    pub vf_groups: Option<Vec<VirtualFunctionGroup>>,
    /// Device conditions, e.g. type `Healthy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::metav1_conditions")]
    pub conditions: Option<Vec<Condition>>,
}

/// A device's position: socket, NUMA node, PCIe switch and bus.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceTopology {
    #[serde(rename = "socketID")]
    pub socket_id: i32,
    #[serde(rename = "nodeID")]
    pub node_id: i32,
    #[serde(rename = "pcieID")]
    pub pcie_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "busID")]
    pub bus_id: Option<String>,
}

/// A set of virtual functions sharing labels.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VirtualFunctionGroup {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vfs: Option<Vec<VirtualFunction>>,
}

/// One SR-IOV virtual function.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VirtualFunction {
    pub minor: i32,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "busID")]
    pub bus_id: Option<String>,
}

/// Who holds which devices.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocations: Option<Vec<DeviceAllocation>>,
}

/// The allocations of one device type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceAllocation {
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<DeviceType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<DeviceAllocationItem>>,
}

/// Devices held by one pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceAllocationItem {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minors: Option<Vec<i32>>,
}
