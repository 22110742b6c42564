//! Resource usage containers shared by NodeMetric (upstream `resources.go`) and
//! the device description they embed (upstream `scheduling/v1alpha1.DeviceInfo`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::slo::string_enum;

/// Kubernetes `corev1.ResourceList`: resource name → quantity.
pub type ResourceList = BTreeMap<String, Quantity>;

/// The pattern the API server applies to quantities (as in upstream's CRDs).
const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Schema of one `resource.Quantity`, as controller-gen writes it.
pub fn quantity_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": true,
    })
}

/// Schema of a `corev1.ResourceList`, as controller-gen writes it.
pub fn resource_list_schema(generator: &mut SchemaGenerator) -> Schema {
    let value = quantity_schema(generator);
    json_schema!({
        "type": "object",
        "additionalProperties": value,
    })
}

/// Usage of a set of resources, with per-device detail where the node has devices.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceMap {
    /// Upstream embeds `corev1.ResourceList` under the `resources` key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub resources: ResourceList,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceInfo>,
}

impl ResourceMap {
    /// True when neither resources nor devices are present (Go omits nothing
    /// here, but an empty map carries no information).
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty() && self.devices.is_empty()
    }
}

string_enum! {
    /// Kind of a device (upstream `schedulingv1alpha1.DeviceType`).
    pub enum DeviceType {
        Gpu => "gpu",
        Fpga => "fpga",
        Rdma => "rdma",
    }
}

/// One device of a node (upstream `schedulingv1alpha1.DeviceInfo`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInfo {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub device_type: Option<DeviceType>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The device UUID; upstream's Go field is `UUID`, its JSON key `id`.
    #[serde(rename = "id", default, skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<i32>,
    #[serde(rename = "moduleID", default, skip_serializing_if = "Option::is_none")]
    pub module_id: Option<i32>,
    /// Always written, as upstream does (no omitempty); defaults to false.
    #[serde(default)]
    pub health: bool,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub resources: ResourceList,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<DeviceTopology>,
    #[serde(rename = "vfGroups", default, skip_serializing_if = "Vec::is_empty")]
    pub vf_groups: Vec<VirtualFunctionGroup>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Where a device sits in the node topology; the three IDs are required, as in
/// upstream's schema.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTopology {
    #[serde(rename = "socketID")]
    pub socket_id: i32,
    #[serde(rename = "nodeID")]
    pub node_id: i32,
    #[serde(rename = "pcieID")]
    pub pcie_id: String,
    #[serde(rename = "busID", default, skip_serializing_if = "String::is_empty")]
    pub bus_id: String,
}

/// A group of SR-IOV virtual functions sharing labels.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualFunctionGroup {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vfs: Vec<VirtualFunction>,
}

/// One SR-IOV virtual function.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualFunction {
    pub minor: i32,
    #[serde(rename = "busID", default, skip_serializing_if = "String::is_empty")]
    pub bus_id: String,
}
