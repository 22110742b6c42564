//! CPUs set aside for SYSTEM QoS pods (`node.koordinator.sh/system-qos-resource`).

use serde::{Deserialize, Serialize};

use super::annotations::{StringMap, parse_json_annotation, set_json_annotation};
use super::error::ExtensionError;

/// Node annotation: [`SystemQOSResource`].
pub const ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: &str = "node.koordinator.sh/system-qos-resource";

/// Value of `node.koordinator.sh/system-qos-resource`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemQOSResource {
    /// CPUs for SYSTEM pods, in cpu-list form.
    #[serde(rename = "cpuset", default, skip_serializing_if = "String::is_empty")]
    pub cpuset: String,
    /// Whether other pods are kept off those CPUs; unset means yes.
    #[serde(
        rename = "cpusetExclusive",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpuset_exclusive: Option<bool>,
}

impl SystemQOSResource {
    pub fn is_cpuset_exclusive(&self) -> bool {
        self.cpuset_exclusive.unwrap_or(true)
    }
}

pub fn get_system_qos_resource(
    node_annotations: &StringMap,
) -> Result<Option<SystemQOSResource>, ExtensionError> {
    parse_json_annotation(node_annotations, ANNOTATION_NODE_SYSTEM_QOS_RESOURCE)
}

pub fn set_system_qos_resource(
    node_annotations: &mut StringMap,
    resource: &SystemQOSResource,
) -> Result<(), ExtensionError> {
    set_json_annotation(
        node_annotations,
        ANNOTATION_NODE_SYSTEM_QOS_RESOURCE,
        resource,
    )
}
