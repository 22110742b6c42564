//! Network-topology-aware gang scheduling: the gang's gather rules, a pod's
//! rank within the gang, and the pod's topology selector.

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use super::annotations::{
    StringMap, annotations_of, is_zero_i32, null_as_default, parse_go_decimal_i64,
    parse_json_annotation_non_empty, set_json_annotation,
};
use super::error::ExtensionError;
use crate::wire_enum::wire_enum;

/// Pod annotation: the pod's index in its gang (e.g. its PyTorch rank).
pub const ANNOTATION_GANG_POD_NETWORK_TOPOLOGY_INDEX: &str =
    "gang.scheduling.koordinator.sh/network-topology-index";
/// Pod/PodGroup annotation: the gang's [`NetworkTopologySpec`].
pub const ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC: &str =
    "gang.scheduling.koordinator.sh/network-topology-spec";
/// Pod annotation: a selector over network topology nodes.
pub const ANNOTATION_POD_NETWORK_TOPOLOGY_SELECTOR: &str =
    "scheduling.koordinator.sh/network-topology-selector";

/// Value of `gang.scheduling.koordinator.sh/network-topology-spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkTopologySpec {
    #[serde(
        rename = "gatherStrategy",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub gather_strategy: Vec<NetworkTopologyGatherRule>,
}

/// How tightly the gang's pods gather within one topology layer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkTopologyGatherRule {
    /// The topology layer name (as in ClusterNetworkTopology).
    #[serde(default)]
    pub layer: String,
    pub strategy: NetworkTopologyGatherStrategy,
    /// Pods per gathered unit must be a multiple of this.
    #[serde(
        rename = "podCountMultiple",
        default,
        skip_serializing_if = "is_zero_i32"
    )]
    pub pod_count_multiple: i32,
}

wire_enum! {
    #[derive(Default)]
    pub enum NetworkTopologyGatherStrategy closed {
        #[default]
        MustGather = "MustGather",
        PreferGather = "PreferGather",
    }
}

/// Absent or empty → `Ok(None)`.
pub fn get_network_topology_spec(
    annotations: &StringMap,
) -> Result<Option<NetworkTopologySpec>, ExtensionError> {
    parse_json_annotation_non_empty(annotations, ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC)
}

pub fn set_network_topology_spec(
    annotations: &mut StringMap,
    spec: &NetworkTopologySpec,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC, spec)
}

/// The pod's index in its gang; absent → `Ok(None)` (upstream: -1).
pub fn get_pod_network_topology_index(
    annotations: &StringMap,
) -> Result<Option<i64>, ExtensionError> {
    let key = ANNOTATION_GANG_POD_NETWORK_TOPOLOGY_INDEX;
    match annotations.get(key) {
        None => Ok(None),
        Some(text) => parse_go_decimal_i64(text)
            .map(Some)
            .map_err(|reason| ExtensionError::invalid_value(key, text, reason)),
    }
}

/// Sorts pods by gang index: indexed pods first in index order, then the
/// rest; ties and unindexed pods by name. Malformed or negative indexes
/// count as unindexed, as upstream.
pub fn sort_pods_by_network_topology_index(pods: &mut [Pod]) {
    let index_of = |pod: &Pod| {
        get_pod_network_topology_index(annotations_of(&pod.metadata))
            .ok()
            .flatten()
            .filter(|index| *index >= 0)
    };
    pods.sort_by(|a, b| {
        let by_index = match (index_of(a), index_of(b)) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        };
        by_index.then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
}

/// The pod's network topology selector, if annotated.
pub fn pod_network_topology_selector(annotations: &StringMap) -> Option<&str> {
    annotations
        .get(ANNOTATION_POD_NETWORK_TOPOLOGY_SELECTOR)
        .map(String::as_str)
}
