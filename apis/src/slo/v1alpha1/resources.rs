//! Resource usage containers of NodeMetric (upstream `resources.go`). Devices
//! are described by the Device CRD's [`DeviceInfo`], as upstream does.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::scheduling::v1alpha1::DeviceInfo;

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
