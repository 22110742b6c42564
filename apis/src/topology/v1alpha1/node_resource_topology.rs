//! NodeResourceTopology v1alpha1: a node's resource zones (NUMA nodes,
//! sockets) and the kubelet topology-manager policy. There is no `spec`:
//! the fields sit at the object's top level.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hand_built::{CrdDescription, hand_built_resource, null_as_default};
use crate::wire_enum::wire_enum;

/// NodeResourceTopology's CRD names (v1alpha1). kube-derive needs a `spec`,
/// so the root is hand-built.
pub const NODE_RESOURCE_TOPOLOGY_CRD: CrdDescription = CrdDescription {
    group: super::GROUP,
    version: super::VERSION,
    kind: "NodeResourceTopology",
    plural: "noderesourcetopologies",
    singular: "noderesourcetopology",
    namespaced: false,
    short_names: &["node-res-topo"],
    annotations: &[(super::API_APPROVED_ANNOTATION, super::API_APPROVED_URL)],
};

hand_built_resource! {
    /// A node's resource topology; named after the node.
    #[schemars(extend("required" = ["topologyPolicies", "zones"]))]
    pub struct NodeResourceTopology {
        crd: NODE_RESOURCE_TOPOLOGY_CRD,
        scope: Cluster,
        fields: {
            /// The kubelet topology-manager policies in force.
            #[serde(default, deserialize_with = "null_as_default")]
            "topologyPolicies" => pub topology_policies: Vec<TopologyManagerPolicy>,
            /// The node's zones.
            #[serde(default, deserialize_with = "null_as_default")]
            "zones" => pub zones: Vec<Zone>,
        }
    }
}

wire_enum! {
    /// The kubelet topology-manager policy (and scope) a node runs with.
    pub enum TopologyManagerPolicy open {
        /// `single-numa-node` policy, container scope.
        SingleNumaNodeContainerLevel = "SingleNUMANodeContainerLevel",
        /// `single-numa-node` policy, pod scope.
        SingleNumaNodePodLevel = "SingleNUMANodePodLevel",
        Restricted = "Restricted",
        /// `restricted` policy, container scope (v1alpha2).
        RestrictedContainerLevel = "RestrictedContainerLevel",
        /// `restricted` policy, pod scope (v1alpha2).
        RestrictedPodLevel = "RestrictedPodLevel",
        BestEffort = "BestEffort",
        /// `best-effort` policy, container scope (v1alpha2).
        BestEffortContainerLevel = "BestEffortContainerLevel",
        /// `best-effort` policy, pod scope (v1alpha2).
        BestEffortPodLevel = "BestEffortPodLevel",
        /// No alignment (the kubelet default).
        None = "None",
    }
}

/// A topology zone: a NUMA node, socket, die or core.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Zone {
    pub name: String,
    /// Zone kind, e.g. `Node` for a NUMA node.
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Distances to other zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub costs: Option<Vec<CostInfo>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<Vec<AttributeInfo>>,
    /// Resources of the zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<ResourceInfo>>,
}

/// Capacity, allocatable and free amount of one resource in a zone.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceInfo {
    pub name: String,
    /// Everything the zone has.
    #[schemars(schema_with = "crate::schema::quantity")]
    pub capacity: Quantity,
    /// What pods may use.
    #[schemars(schema_with = "crate::schema::quantity")]
    pub allocatable: Quantity,
    /// What is still free for new pods.
    #[schemars(schema_with = "crate::schema::quantity")]
    pub available: Quantity,
}

/// Distance from this zone to the named zone.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CostInfo {
    pub name: String,
    pub value: i64,
}

/// A named attribute.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AttributeInfo {
    pub name: String,
    pub value: String,
}
