//! NUMA and cpuset allocation: the pod's resource-spec / resource-status /
//! numa-topology-spec annotations, the node CPU topology annotations koordlet
//! reports on the NodeResourceTopology, node labels, and kubelet's CPU
//! manager policy.

use serde::{Deserialize, Serialize};

use super::annotations::{
    StringMap, empty_as_none, is_false, null_as_default, parse_json_annotation, set_json_annotation,
};
use super::error::ExtensionError;
use super::resource::ResourceList;
use crate::wire_enum::wire_enum;

/// Pod annotation: the pod's NUMA policy ([`NUMATopologySpec`]).
pub const ANNOTATION_NUMA_TOPOLOGY_SPEC: &str = "scheduling.koordinator.sh/numa-topology-spec";
/// Pod annotation: the CPU binding the pod asks for ([`ResourceSpec`]).
pub const ANNOTATION_RESOURCE_SPEC: &str = "scheduling.koordinator.sh/resource-spec";
/// Pod annotation: what the scheduler allocated ([`ResourceStatus`]).
pub const ANNOTATION_RESOURCE_STATUS: &str = "scheduling.koordinator.sh/resource-status";

/// NodeResourceTopology annotation: [`CPUTopology`].
pub const ANNOTATION_NODE_CPU_TOPOLOGY: &str = "node.koordinator.sh/cpu-topology";
/// NodeResourceTopology annotation: cpusets of kubelet-managed Guaranteed pods ([`PodCPUAllocs`]).
pub const ANNOTATION_NODE_CPU_ALLOCS: &str = "node.koordinator.sh/pod-cpu-allocs";
/// NodeResourceTopology annotation: the shared pool of LS/Burstable pods ([`CPUSharedPool`] list).
pub const ANNOTATION_NODE_CPU_SHARED_POOLS: &str = "node.koordinator.sh/cpu-shared-pools";
/// NodeResourceTopology annotation: the shared pool of BE pods ([`CPUSharedPool`] list).
pub const ANNOTATION_NODE_BE_CPU_SHARED_POOLS: &str = "node.koordinator.sh/be-cpu-shared-pools";
/// Node label: [`NodeCPUBindPolicy`].
pub const LABEL_NODE_CPU_BIND_POLICY: &str = "node.koordinator.sh/cpu-bind-policy";
/// Node label: [`NUMAAllocateStrategy`].
pub const LABEL_NODE_NUMA_ALLOCATE_STRATEGY: &str = "node.koordinator.sh/numa-allocate-strategy";
/// Node label: [`NUMATopologyPolicy`].
pub const LABEL_NUMA_TOPOLOGY_POLICY: &str = "node.koordinator.sh/numa-topology-policy";

/// Node annotation: kubelet's CPU manager settings ([`KubeletCPUManagerPolicy`]).
pub const ANNOTATION_KUBELET_CPU_MANAGER_POLICY: &str = "kubelet.koordinator.sh/cpu-manager-policy";
pub const KUBELET_CPU_MANAGER_POLICY_STATIC: &str = "static";
pub const KUBELET_CPU_MANAGER_POLICY_NONE: &str = "none";
pub const KUBELET_CPU_MANAGER_POLICY_FULL_PCPUS_ONLY_OPTION: &str = "full-pcpus-only";
pub const KUBELET_CPU_MANAGER_POLICY_DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION: &str =
    "distribute-cpus-across-numa";

/// Value of `scheduling.koordinator.sh/resource-spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceSpec {
    /// Bind policy that must be met, or scheduling fails.
    #[serde(
        rename = "requiredCPUBindPolicy",
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub required_cpu_bind_policy: Option<CPUBindPolicy>,
    /// Bind policy applied on a best-effort basis.
    #[serde(
        rename = "preferredCPUBindPolicy",
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_cpu_bind_policy: Option<CPUBindPolicy>,
    /// Exclusivity applied on a best-effort basis.
    #[serde(
        rename = "preferredCPUExclusivePolicy",
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_cpu_exclusive_policy: Option<CPUExclusivePolicy>,
}

/// Value of `scheduling.koordinator.sh/numa-topology-spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NUMATopologySpec {
    #[serde(
        rename = "numaTopologyPolicy",
        default,
        skip_serializing_if = "NUMATopologyPolicy::is_none"
    )]
    pub numa_topology_policy: NUMATopologyPolicy,
    /// Whether single-NUMA and multi-NUMA pods may share a NUMA node.
    #[serde(
        rename = "singleNUMANodeExclusive",
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub single_numa_node_exclusive: Option<NumaTopologyExclusive>,
}

/// Value of `scheduling.koordinator.sh/resource-status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceStatus {
    /// Allocated CPUs in Linux cpu-list form (`0-3,8`).
    #[serde(rename = "cpuset", default, skip_serializing_if = "String::is_empty")]
    pub cpuset: String,
    /// NUMA nodes the pod is bound to, with the amounts taken from each.
    #[serde(
        rename = "numaNodeResources",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub numa_node_resources: Vec<NUMANodeResource>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NUMANodeResource {
    pub node: i32,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "std::collections::BTreeMap::is_empty"
    )]
    pub resources: ResourceList,
}

wire_enum! {
    /// How a pod's CPUs are picked.
    pub enum CPUBindPolicy closed {
        /// The scheduler's configured default.
        Default = "Default",
        /// Pack onto as few physical cores as possible.
        FullPCPUs = "FullPCPUs",
        /// Spread logical CPUs evenly across physical cores.
        SpreadByPCPUs = "SpreadByPCPUs",
        /// Limit a Burstable pod to a constrained part of the shared pool.
        ConstrainedBurst = "ConstrainedBurst",
    }
}

wire_enum! {
    /// What a pod's CPUs must not share with other exclusive pods.
    pub enum CPUExclusivePolicy closed {
        None = "None",
        /// Physical cores.
        PCPULevel = "PCPULevel",
        /// NUMA nodes.
        NUMANodeLevel = "NUMANodeLevel",
    }
}

wire_enum! {
    /// Node-enforced bind policy (label `node.koordinator.sh/cpu-bind-policy`).
    pub enum NodeCPUBindPolicy closed {
        None = "None",
        /// Whole physical cores only (kubelet's `full-pcpus-only`).
        FullPCPUsOnly = "FullPCPUsOnly",
        SpreadByPCPUs = "SpreadByPCPUs",
    }
}

wire_enum! {
    /// Which NUMA node to take from first.
    pub enum NUMAAllocateStrategy closed {
        /// The node with the least free resources.
        MostAllocated = "MostAllocated",
        /// The node with the most free resources.
        LeastAllocated = "LeastAllocated",
        /// Spread CPUs evenly across NUMA nodes.
        DistributeEvenly = "DistributeEvenly",
    }
}

wire_enum! {
    pub enum NumaTopologyExclusive closed {
        Preferred = "Preferred",
        Required = "Required",
    }
}

wire_enum! {
    /// How a NUMA node is currently used.
    pub enum NumaNodeStatus closed {
        Idle = "idle",
        Shared = "shared",
        Single = "single",
    }
}

wire_enum! {
    /// NUMA alignment policy, as kubelet's topology manager names them.
    #[derive(Default)]
    pub enum NUMATopologyPolicy closed {
        #[default]
        None = "",
        BestEffort = "BestEffort",
        Restricted = "Restricted",
        SingleNUMANode = "SingleNUMANode",
    }
}

impl NUMATopologyPolicy {
    pub fn is_none(&self) -> bool {
        *self == NUMATopologyPolicy::None
    }
}

/// Value of `node.koordinator.sh/cpu-topology`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CPUTopology {
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub detail: Vec<CPUInfo>,
}

/// One logical CPU and where it sits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CPUInfo {
    pub id: i32,
    pub core: i32,
    pub socket: i32,
    pub node: i32,
}

/// The cpuset of one pod (a kubelet-managed Guaranteed pod).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodCPUAlloc {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(rename = "cpuset", default, skip_serializing_if = "String::is_empty")]
    pub cpuset: String,
    #[serde(rename = "managedByKubelet", default, skip_serializing_if = "is_false")]
    pub managed_by_kubelet: bool,
}

/// Value of `node.koordinator.sh/pod-cpu-allocs`.
pub type PodCPUAllocs = Vec<PodCPUAlloc>;

/// The shared CPUs of one NUMA node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CPUSharedPool {
    pub socket: i32,
    pub node: i32,
    #[serde(rename = "cpuset", default, skip_serializing_if = "String::is_empty")]
    pub cpuset: String,
}

/// Value of `kubelet.koordinator.sh/cpu-manager-policy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeletCPUManagerPolicy {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "std::collections::BTreeMap::is_empty"
    )]
    pub options: std::collections::BTreeMap<String, String>,
    #[serde(
        rename = "reservedCPUs",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub reserved_cpus: String,
}

pub fn get_numa_topology_spec(
    annotations: &StringMap,
) -> Result<Option<NUMATopologySpec>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_NUMA_TOPOLOGY_SPEC)
}

pub fn set_numa_topology_spec(
    annotations: &mut StringMap,
    spec: &NUMATopologySpec,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_NUMA_TOPOLOGY_SPEC, spec)
}

pub fn get_resource_spec(annotations: &StringMap) -> Result<Option<ResourceSpec>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_RESOURCE_SPEC)
}

pub fn set_resource_spec(
    annotations: &mut StringMap,
    spec: &ResourceSpec,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_RESOURCE_SPEC, spec)
}

pub fn get_resource_status(
    annotations: &StringMap,
) -> Result<Option<ResourceStatus>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_RESOURCE_STATUS)
}

pub fn set_resource_status(
    annotations: &mut StringMap,
    status: &ResourceStatus,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_RESOURCE_STATUS, status)
}

pub fn get_cpu_topology(annotations: &StringMap) -> Result<Option<CPUTopology>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_NODE_CPU_TOPOLOGY)
}

pub fn set_cpu_topology(
    annotations: &mut StringMap,
    topology: &CPUTopology,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_NODE_CPU_TOPOLOGY, topology)
}

pub fn get_pod_cpu_allocs(annotations: &StringMap) -> Result<Option<PodCPUAllocs>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_NODE_CPU_ALLOCS)
}

pub fn set_pod_cpu_allocs(
    annotations: &mut StringMap,
    allocs: &PodCPUAllocs,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_NODE_CPU_ALLOCS, allocs)
}

pub fn get_node_cpu_shared_pools(
    annotations: &StringMap,
) -> Result<Option<Vec<CPUSharedPool>>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_NODE_CPU_SHARED_POOLS)
}

pub fn set_node_cpu_shared_pools(
    annotations: &mut StringMap,
    pools: &[CPUSharedPool],
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_NODE_CPU_SHARED_POOLS, pools)
}

pub fn get_node_be_cpu_shared_pools(
    annotations: &StringMap,
) -> Result<Option<Vec<CPUSharedPool>>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_NODE_BE_CPU_SHARED_POOLS)
}

pub fn set_node_be_cpu_shared_pools(
    annotations: &mut StringMap,
    pools: &[CPUSharedPool],
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_NODE_BE_CPU_SHARED_POOLS, pools)
}

pub fn get_kubelet_cpu_manager_policy(
    annotations: &StringMap,
) -> Result<Option<KubeletCPUManagerPolicy>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_KUBELET_CPU_MANAGER_POLICY)
}

pub fn set_kubelet_cpu_manager_policy(
    annotations: &mut StringMap,
    policy: &KubeletCPUManagerPolicy,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_KUBELET_CPU_MANAGER_POLICY, policy)
}

/// The node's enforced bind policy: full physical cores when the label says
/// so or kubelet runs the static policy with `full-pcpus-only=true`; spread
/// when the label says so; otherwise none (unknown label values included).
pub fn node_cpu_bind_policy(
    node_labels: &StringMap,
    kubelet_policy: Option<&KubeletCPUManagerPolicy>,
) -> NodeCPUBindPolicy {
    let label = node_labels
        .get(LABEL_NODE_CPU_BIND_POLICY)
        .map(String::as_str);
    let kubelet_full_pcpus_only = kubelet_policy.is_some_and(|policy| {
        policy.policy == KUBELET_CPU_MANAGER_POLICY_STATIC
            && policy
                .options
                .get(KUBELET_CPU_MANAGER_POLICY_FULL_PCPUS_ONLY_OPTION)
                .is_some_and(|v| v == "true")
    });
    if label == Some(NodeCPUBindPolicy::FullPCPUsOnly.as_str()) || kubelet_full_pcpus_only {
        NodeCPUBindPolicy::FullPCPUsOnly
    } else if label == Some(NodeCPUBindPolicy::SpreadByPCPUs.as_str()) {
        NodeCPUBindPolicy::SpreadByPCPUs
    } else {
        NodeCPUBindPolicy::None
    }
}

/// The node's NUMA topology policy label; absent → `None` policy, an unknown
/// value → error.
pub fn node_numa_topology_policy(labels: &StringMap) -> Result<NUMATopologyPolicy, ExtensionError> {
    match labels.get(LABEL_NUMA_TOPOLOGY_POLICY) {
        None => Ok(NUMATopologyPolicy::None),
        Some(text) => text
            .parse()
            .map_err(|err| ExtensionError::invalid_value(LABEL_NUMA_TOPOLOGY_POLICY, text, err)),
    }
}

pub fn set_node_numa_topology_policy(labels: &mut StringMap, policy: NUMATopologyPolicy) {
    labels.insert(
        LABEL_NUMA_TOPOLOGY_POLICY.to_owned(),
        policy.as_str().to_owned(),
    );
}

/// The node's NUMA allocate strategy label, if it names a known strategy
/// (callers fall back to their configured default otherwise).
pub fn node_numa_allocate_strategy(labels: &StringMap) -> Option<NUMAAllocateStrategy> {
    labels
        .get(LABEL_NODE_NUMA_ALLOCATE_STRATEGY)
        .and_then(|text| text.parse().ok())
}
