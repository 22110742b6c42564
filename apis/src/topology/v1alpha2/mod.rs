//! `topology.node.k8s.io/v1alpha2`: NodeResourceTopology as the CRD stores
//! it. Adds node-level `attributes` and makes `topologyPolicies` optional;
//! zones are as in v1alpha1. Its CRD version is emitted together with
//! v1alpha1's by `topology::crds()`.

pub use super::v1alpha1::{AttributeInfo, CostInfo, ResourceInfo, TopologyManagerPolicy, Zone};
use crate::hand_built::{CrdDescription, hand_built_resource, null_as_default};

/// The API group of this module.
pub const GROUP: &str = super::v1alpha1::GROUP;
/// The API version of this module.
pub const VERSION: &str = "v1alpha2";

/// NodeResourceTopology's CRD names (v1alpha2).
pub const NODE_RESOURCE_TOPOLOGY_CRD: CrdDescription = CrdDescription {
    version: VERSION,
    ..super::v1alpha1::NODE_RESOURCE_TOPOLOGY_CRD
};

hand_built_resource! {
    /// A node's resource topology; named after the node.
    #[schemars(extend("required" = ["zones"]))]
    pub struct NodeResourceTopology {
        crd: NODE_RESOURCE_TOPOLOGY_CRD,
        scope: Cluster,
        fields: {
            /// Deprecated upstream in favour of `attributes`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            "topologyPolicies" => pub topology_policies: Option<Vec<TopologyManagerPolicy>>,
            /// The node's zones.
            #[serde(default, deserialize_with = "null_as_default")]
            "zones" => pub zones: Vec<Zone>,
            /// Node-level attributes (e.g. the topology-manager policy and scope).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            "attributes" => pub attributes: Option<Vec<AttributeInfo>>,
        }
    }
}
