//! `topology.node.k8s.io/v1alpha2`: NodeResourceTopology as the CRD stores
//! it. Adds node-level `attributes` and makes `topologyPolicies` optional;
//! zones are as in v1alpha1. Its CRD version is emitted together with
//! v1alpha1's by `topology::v1alpha1::crds()`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::Resource;
use schemars::JsonSchema;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

pub use super::v1alpha1::{AttributeInfo, CostInfo, ResourceInfo, TopologyManagerPolicy, Zone};
use crate::scheduling::hand_built::{CrdDescription, null_as_default};
use crate::scheduling::hand_built_resource;

/// The API group of this module.
pub const GROUP: &str = super::v1alpha1::GROUP;
/// The API version of this module.
pub const VERSION: &str = "v1alpha2";

/// NodeResourceTopology's CRD names (v1alpha2).
pub const NODE_RESOURCE_TOPOLOGY_CRD: CrdDescription = CrdDescription {
    version: VERSION,
    ..super::v1alpha1::NODE_RESOURCE_TOPOLOGY_CRD
};

/// A node's resource topology; named after the node.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::scheduling::hand_built::without_property_defaults)]
#[schemars(extend("required" = ["zones"]))]
pub struct NodeResourceTopology {
    #[serde(default)]
    #[schemars(skip)]
    pub metadata: ObjectMeta,
    /// Deprecated upstream in favour of `attributes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_policies: Option<Vec<TopologyManagerPolicy>>,
    /// The node's zones.
    #[serde(default, deserialize_with = "null_as_default")]
    pub zones: Vec<Zone>,
    /// Node-level attributes (e.g. the topology-manager policy and scope).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<Vec<AttributeInfo>>,
}

hand_built_resource!(NodeResourceTopology, NODE_RESOURCE_TOPOLOGY_CRD, Cluster);

impl NodeResourceTopology {
    /// An object for node `name`.
    pub fn new(name: &str) -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

impl Serialize for NodeResourceTopology {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let optional =
            usize::from(self.topology_policies.is_some()) + usize::from(self.attributes.is_some());
        let mut state = serializer.serialize_struct("NodeResourceTopology", 4 + optional)?;
        state.serialize_field("apiVersion", &Self::api_version(&()))?;
        state.serialize_field("kind", &Self::kind(&()))?;
        state.serialize_field("metadata", &self.metadata)?;
        if let Some(policies) = &self.topology_policies {
            state.serialize_field("topologyPolicies", policies)?;
        }
        state.serialize_field("zones", &self.zones)?;
        if let Some(attributes) = &self.attributes {
            state.serialize_field("attributes", attributes)?;
        }
        state.end()
    }
}
